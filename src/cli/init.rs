//! `supervise init [-- COMMAND…]`: a first ecosystem file, commented, that
//! `check` passes as written, with the schema beside it so an editor
//! completes and checks every key from the first keystroke.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use super::{err, exit};
use import::{app_name, emit};

/// The program that stands in when no command is given: it stays up, so
/// `supervise` runs the file as written.
const PLACEHOLDER: &[&str] = &["sleep", "infinity"];

/// Programs that run the program named after them: the app is named after
/// what they run.
const INTERPRETERS: &[&str] = &[
    "python", "python3", "node", "bun", "deno", "ruby", "php", "perl", "bash", "sh", "java", "npm",
    "npx", "yarn", "pnpm", "uv", "poetry", "bundle", "exec", "env",
];

/// The app's name for `command`: the program's, or for an interpreter the
/// script's or module's (`python3 -m http.server` → `http-server`).
pub(crate) fn name_for(command: &[String]) -> String {
    let base = |word: &str| {
        let file = Path::new(word)
            .file_name()
            .map_or(word.to_string(), |f| f.to_string_lossy().into_owned());
        file.split('.').next().map_or(file.clone(), str::to_string)
    };
    let Some(program) = command.first() else {
        return "app".to_string();
    };
    let program = base(program);
    let name = if INTERPRETERS
        .contains(&program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.'))
    {
        let mut words = command.iter().skip(1);
        let mut chosen = None;
        while let Some(word) = words.next() {
            // `sh -c 'prog …'`: named after the script's first program.
            if word == "-c" {
                chosen = words
                    .next()
                    .and_then(|script| script.split_whitespace().next().map(base));
                break;
            }
            if word == "-m" || word == "-jar" || word == "run" || word == "exec" {
                chosen = words.next().map(|w| {
                    let file = Path::new(w)
                        .file_name()
                        .map_or(w.clone(), |f| f.to_string_lossy().into_owned());
                    file.strip_suffix(".jar").unwrap_or(&file).replace('.', "-")
                });
                break;
            }
            if !word.starts_with('-') {
                chosen = Some(base(word));
                break;
            }
        }
        chosen.unwrap_or(program)
    } else {
        program
    };
    app_name(&name, &[])
}

/// The file `init` writes.
pub(crate) fn template(command: &[String], name: Option<&str>) -> String {
    let (argv, placeholder): (Vec<String>, bool) = if command.is_empty() {
        (PLACEHOLDER.iter().map(|s| s.to_string()).collect(), true)
    } else {
        (command.to_vec(), false)
    };
    let name = match name {
        Some(name) => app_name(name, &[]),
        None if placeholder => "app".to_string(),
        None => name_for(&argv),
    };
    let command_line = emit::scalar(&serde_json::Value::String(shell_words::join(&argv)), false);
    let comment = if placeholder {
        "  # your program here: split like a shell, or a list [prog, arg]"
    } else {
        "  # split like a shell, or a list [prog, arg]"
    };
    let name = emit::key(&name);
    format!(
        r#"# yaml-language-server: $schema=ecosystem.schema.json
#
# The ecosystem file of supervise: every app under `apps` is kept running
# as declared. `supervise check` checks it, `supervise` runs it, and an edit
# while it runs is followed at once (scaled, or replaced without downtime).
# Every key is in the manual (docs/src/reference/keys.md); the schema (`supervise schema`)
# lets an editor complete and check them.

apps:
  {name}:
    command: {command_line}{comment}
    # instances: 1             # an integer >= 0, or "max" (one per CPU)
    # listen: 127.0.0.1:8080   # bound once, shared by every instance as fd 3 (and PORT)
    # ready: {{delay: 1s}}       # none | notify | {{tcp: ADDR}} | {{http: URL}} | {{delay: D}}
    # env:
    #   GREETING: hello        # values may use {{instance}}: 0, 1, …
    # cwd: .                   # relative to this file's folder
    # restart: always          # always | on-failure | never
    # backoff: {{initial: 100ms, max: 30s, factor: 2, reset_after: 60s}}
    # max_restarts: {{count: 5, within: 1m}}   # then `failed` (default: never give up)
    # stop_signal: SIGTERM
    # kill_timeout: 10s        # then SIGKILL to every process of the instance
    # reload: {{max_surge: 1, max_unavailable: 0}}   # rolling replacement on an edit
    # health: {{http: "http://127.0.0.1:8080/health", every: 10s, failures: 3}}
    # max_memory: 500MB        # more: replaced
    # log: {{file: "logs/{{app}}.log", max_size: 10MB, keep: 5}}

# defaults:                  # merged under every app; an app's own keys win
#   kill_timeout: 10s
"#
    )
}

/// `supervise init`: write `file` (never over an existing one) and the
/// schema beside it (when there is none).
pub fn run(file: Option<&Path>, command: &[String], name: Option<&str>) -> ExitCode {
    let path = file.unwrap_or(Path::new("ecosystem.yaml"));
    if command
        .first()
        .is_some_and(|program| program.trim().is_empty())
    {
        err(
            "error: the command's program is empty: give it after `--`, e.g. `supervise init -- python3 -m http.server 8000`\n",
        );
        return ExitCode::from(exit::USAGE);
    }
    let text = template(command, name);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(error) = written {
        let reason = if error.kind() == std::io::ErrorKind::AlreadyExists {
            "it exists; init writes a new file (edit that one, or remove it first)".to_string()
        } else {
            error.to_string()
        };
        err(&format!(
            "error: cannot write {}: {reason}\n",
            path.display()
        ));
        return ExitCode::from(exit::USAGE);
    }
    let schema = path.with_file_name("ecosystem.schema.json");
    let mut wrote_schema = false;
    if !schema.exists() {
        let json = format!("{:#}\n", config::json_schema());
        match std::fs::write(&schema, json) {
            Ok(()) => wrote_schema = true,
            Err(error) => err(&format!(
                "warning: cannot write {}: {error}\n",
                schema.display()
            )),
        }
    }
    err(&format!(
        "wrote {}{}\nnext: `supervise check -f {0}`, then `supervise -f {0}`\n",
        path.display(),
        if wrote_schema {
            format!(" and {}", schema.display())
        } else {
            String::new()
        }
    ));
    ExitCode::from(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn the_app_is_named_after_what_runs() {
        assert_eq!(
            name_for(&words("python3 -m http.server 8000")),
            "http-server"
        );
        assert_eq!(name_for(&words("node server.js")), "server");
        assert_eq!(name_for(&words("node --inspect ./src/api.js")), "api");
        assert_eq!(
            name_for(&words("/usr/local/bin/redis-server --port 7000")),
            "redis-server"
        );
        assert_eq!(name_for(&words("java -jar build/shop.jar")), "shop");
        assert_eq!(name_for(&words("npm run worker")), "worker");
        assert_eq!(name_for(&words("./My.App")), "my");
        assert_eq!(name_for(&[]), "app");
        assert_eq!(
            name_for(&["sh".into(), "-c".into(), "echo \"q\" && sleep 1".into()]),
            "echo"
        );
    }

    #[test]
    fn the_template_passes_check_with_and_without_a_command() {
        let host = config::Host::pinned(2, 1000, "/usr/bin:/bin");
        for (command, name) in [
            (vec![], None),
            (words("sleep 1000"), None),
            (
                vec!["sh".into(), "-c".into(), "echo 'a b'; sleep 9".into()],
                None,
            ),
            (words("true"), None),
            (words("sleep 1"), Some("null")),
            (words("sleep 1"), Some("1e3")),
        ] {
            let text = template(&command, name);
            let checked = config::check_text(&text, Path::new("/tmp/ecosystem.yaml"), &host);
            assert!(checked.is_valid(), "{text}\n{:?}", checked.diagnostics);
        }
    }
}
