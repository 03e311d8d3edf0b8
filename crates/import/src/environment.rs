//! An app's environment as the source sets it, and the check that keeps
//! out of it what supervise refuses in an `env` (a name it cannot set, one
//! it sets itself, a value with a placeholder it cannot read): each format
//! has an environment, and they all end here.

use serde_json::{Map, Value};

use crate::DraftApp;

/// One variable of an app's environment as the source sets it, with the
/// line it is set on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvVar {
    pub(crate) name: String,
    pub(crate) value: String,
    pub(crate) line: Option<usize>,
}

/// Set `var` in `vars`, in the place of one of the same name if there is one.
pub(crate) fn set_env(vars: &mut Vec<EnvVar>, var: EnvVar) {
    match vars.iter_mut().find(|v| v.name == var.name) {
        Some(existing) => *existing = var,
        None => vars.push(var),
    }
}

/// `vars` as the app's `env`, without what `check` refuses in one: a name
/// that is not a variable name supervise can set (`my-var`), a name
/// supervise sets itself (`NOTIFY_SOCKET`; `HOME`, `USER`, `LOGNAME` when
/// the app has a `user`), and a value with a placeholder supervise cannot
/// read (`{instance-x}`). Each is left out with a warning naming it.
pub(crate) fn checked_env(
    app: &mut DraftApp,
    vars: Vec<EnvVar>,
    has_user: bool,
) -> Map<String, Value> {
    use config::validate::{reserved_env_name, valid_env_name};
    let mut env = Map::new();
    for var in vars {
        let name = &var.name;
        let problem = if !valid_env_name(name) {
            Some(
                "supervise sets only names of letters, digits and `_`, not starting with a digit"
                    .to_string(),
            )
        } else if has_user && matches!(name.as_str(), "HOME" | "USER" | "LOGNAME") {
            Some("with `user`, supervise sets HOME, USER and LOGNAME to that user's (from the password database) itself".to_string())
        } else if reserved_env_name(name, false, has_user, false) {
            Some("supervise sets it for each instance itself".to_string())
        } else {
            model::spec::Template::parse(&var.value).err().map(|error| {
                format!(
                    "its value {:?} holds a placeholder supervise cannot read ({}), and supervise has no escape for `{{instance`",
                    var.value, error.0
                )
            })
        };
        match problem {
            Some(why) => app.warn(
                var.line,
                format!("environment variable `{name}`: {why}; left out"),
            ),
            None => {
                env.insert(var.name, Value::String(var.value));
            }
        }
    }
    env
}
