//! Kubernetes names. An app's name (`[a-z0-9][a-z0-9_-]*`) names all its
//! objects, but a Kubernetes name is a DNS label, a namespace a DNS-1123
//! label and a port name an IANA service name, and some names an export
//! must not write at all. The rules are kept together so that what is
//! renamed (with a warning) and what is refused (with an error) is decided
//! in one place.

use std::collections::HashSet;

use crate::Notes;
use config::diagnostic::PathSeg;
use model::spec::AppSpec;

/// The Service through which pods reach the API server, in `default`.
const API_SERVER_SERVICE: &str = "kubernetes";

/// The longest name of most objects (a DNS label).
const MAX_NAME: usize = 63;
/// A CronJob's name: its Jobs append 11 characters.
const MAX_CRONJOB_NAME: usize = 52;

/// The DNS-label name of an app's objects, or `None` (with an error) when
/// the app's name cannot be made one.
pub(super) fn object_name(app: &AppSpec, notes: &mut Notes) -> Option<String> {
    match dns_label(&app.name) {
        Ok(name) => {
            if name != app.name {
                notes.warn_key(
                    &app_path(&app.name),
                    format!(
                        "app name `{}` is not a Kubernetes name; its objects are named `{name}`",
                        app.name
                    ),
                    "Kubernetes names are DNS labels: lowercase letters, digits and `-`, starting and ending with a letter or digit",
                );
            }
            let limit = if app.schedule.is_some() {
                MAX_CRONJOB_NAME
            } else {
                MAX_NAME
            };
            if name.len() > limit {
                notes.error_key(
                    &app_path(&app.name),
                    format!(
                        "app name `{}` is {} characters: a Kubernetes {} name has at most {limit}",
                        app.name,
                        name.len(),
                        if app.schedule.is_some() {
                            "CronJob"
                        } else {
                            "Service or Deployment"
                        }
                    ),
                    "use a shorter app name",
                );
                return None;
            }
            Some(name)
        }
        Err(message) => {
            notes.error_key(&app_path(&app.name), message, "rename the app");
            None
        }
    }
}

/// Whether the object `kind` `object_name` of `app` may be written; if
/// not, an error says why: a name made from the app's (`APP-1`, `APP-env`)
/// can be too long, the API server's own Service must not be replaced, and
/// no two objects of a kind may share a name (`taken` holds those written
/// so far, and takes this one).
pub(super) fn object_fits(
    kind: &'static str,
    object_name: &str,
    app: &AppSpec,
    namespace: Option<&str>,
    taken: &mut HashSet<(&'static str, String)>,
    notes: &mut Notes,
) -> bool {
    if object_name.len() > MAX_NAME {
        notes.error_key(
            &app_path(&app.name),
            format!(
                "the {kind} `{object_name}` of app `{}` would be {} characters: a Kubernetes name has at most {MAX_NAME}",
                app.name,
                object_name.len()
            ),
            "use a shorter app name",
        );
        return false;
    }
    if kind == "Service"
        && object_name == API_SERVER_SERVICE
        && namespace.is_none_or(|ns| ns == "default")
    {
        notes.error_key(
            &app_path(&app.name),
            format!(
                "the Service `{object_name}` of app `{}` would replace the API server's own, `{API_SERVER_SERVICE}` in the namespace `default`",
                app.name
            ),
            "rename the app, or export it into a namespace of its own with --namespace",
        );
        return false;
    }
    if !taken.insert((kind, object_name.to_string())) {
        notes.error_key(
            &app_path(&app.name),
            format!(
                "the {kind} `{object_name}` of app `{}` has the name of another app's",
                app.name
            ),
            "rename one of the apps: Kubernetes names are made from app names, `_` read as `-`",
        );
        return false;
    }
    true
}

fn app_path(app: &str) -> Vec<PathSeg> {
    vec![PathSeg::Key("apps".into()), PathSeg::Key(app.into())]
}

/// An app name (`[a-z0-9][a-z0-9_-]*`) as a DNS-1035 label (what a Service
/// needs, and so every object of the app): `_` → `-`, trailing `-` dropped,
/// a leading digit prefixed with `app-`.
pub(super) fn dns_label(name: &str) -> Result<String, String> {
    let mut label: String = name
        .chars()
        .map(|c| if c == '_' { '-' } else { c })
        .collect();
    while label.ends_with('-') {
        label.pop();
    }
    if label.starts_with(|c: char| c.is_ascii_digit()) {
        label.insert_str(0, "app-");
    }
    let valid = label.starts_with(|c: char| c.is_ascii_lowercase())
        && label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(label)
    } else {
        Err(format!(
            "app name `{name}` cannot be made a Kubernetes name"
        ))
    }
}

/// Whether `name` is a DNS-1123 label (what a namespace is): 1 to 63
/// lowercase letters, digits and `-`, starting and ending with a letter or
/// digit.
pub fn is_dns1123_label(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A port name (IANA service name: at most 15 characters, lowercase letters,
/// digits and single `-`, a letter somewhere, no `-` at either end).
pub(super) fn port_name(name: &str) -> Option<String> {
    let name: String = name
        .chars()
        .map(|c| if c == '_' { '-' } else { c })
        .collect();
    let valid = (1..=15).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.chars().any(|c| c.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    valid.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_names_become_dns_labels() {
        assert_eq!(dns_label("web").unwrap(), "web");
        assert_eq!(dns_label("my_app").unwrap(), "my-app");
        assert_eq!(dns_label("web_").unwrap(), "web");
        assert_eq!(dns_label("1api").unwrap(), "app-1api");
        assert_eq!(dns_label("a-b_c").unwrap(), "a-b-c");
    }

    #[test]
    fn namespaces_are_dns_1123_labels() {
        assert!(is_dns1123_label("shop"));
        assert!(is_dns1123_label("1abc"));
        assert!(is_dns1123_label(&"n".repeat(63)));
        assert!(!is_dns1123_label(&"n".repeat(64)));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("Bad_NS"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
    }

    #[test]
    fn port_names_follow_the_iana_rules() {
        assert_eq!(port_name("http").as_deref(), Some("http"));
        assert_eq!(port_name("admin_api").as_deref(), Some("admin-api"));
        assert_eq!(port_name("a-very-long-port-name"), None);
        assert_eq!(port_name("8080"), None);
        assert_eq!(port_name("a--b"), None);
    }
}
