//! A Procfile (foreman, overmind, Heroku) to ours: each `name: command`
//! line is an app. Foreman runs a command with `sh -c` and gives it `PORT`
//! (5000 for the first process type, 5100 for the next, and one more per
//! instance), so a command that uses the shell or `$PORT` keeps both.

use serde_json::json;

use super::{Draft, DraftApp, Format, Note, app_name};

/// foreman's first port and its step between process types.
const FOREMAN_BASE_PORT: u64 = 5000;
const FOREMAN_PORT_STEP: u64 = 100;

/// Characters that make a command need a shell.
const SHELL_SYNTAX: &[char] = &[
    '$', '`', '|', '&', ';', '<', '>', '(', ')', '*', '?', '[', '~', '{', '}', '\\', '\'', '"', '#',
];

pub fn translate(text: &str, source: &str) -> Draft {
    let mut draft = Draft {
        format: Format::Procfile,
        source: source.to_string(),
        apps: Vec::new(),
        notes: Vec::new(),
    };
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if raw.starts_with(char::is_whitespace) {
            // foreman's pattern is anchored at the start of the line: an
            // indented line (a tab, spaces) is no process type there.
            draft.notes.push(Note::warning(
                Some(line),
                format!("indented, so not a process type (a Procfile line starts at column 0): {trimmed}"),
            ));
            continue;
        }
        // foreman's pattern: ^([A-Za-z0-9_-]+):\s*(.+)$
        let parsed = trimmed.split_once(':').filter(|(name, command)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                && !command.trim().is_empty()
        });
        let Some((process_type, command)) = parsed else {
            draft.notes.push(Note::warning(
                Some(line),
                format!("not `name: command`: {trimmed}"),
            ));
            continue;
        };
        let command = command.trim();
        let taken: Vec<String> = draft.apps.iter().map(|a| a.name.clone()).collect();
        let name = app_name(process_type, &taken);
        let mut app = DraftApp::new(name.clone(), Some(line));
        if name != process_type {
            app.note(
                Some(line),
                format!("named `{name}` (Procfile: `{process_type}`)"),
            );
        }
        // `NAME=value prog` sets a variable for the program: the shell's job.
        let assigns = command.split_whitespace().next().is_some_and(|word| {
            word.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit())
            })
        });
        if assigns || command.contains(SHELL_SYNTAX) {
            // `exec` makes the program the instance's main process (so it
            // gets LISTEN_PID and the stop signal) where the command is one
            // program, as most are (`exec NAME=value prog` would run a
            // program called `NAME=value`: such a command is left whole).
            let simple = !assigns
                && !command.contains(['|', '&', ';', '(', ')', '`', '\n'])
                && !command.starts_with("exec ");
            app.set(
                "command",
                json!(if simple {
                    format!("exec {command}")
                } else {
                    command.to_string()
                }),
            );
            app.set("shell", json!(true));
        } else {
            app.set("command", json!(command));
        }
        let port = FOREMAN_BASE_PORT + FOREMAN_PORT_STEP * draft.apps.len() as u64;
        // `$PORT`, `${PORT}`, `${PORT:-3000}`, … (not `$PORTS`).
        let uses_port = command.match_indices("$PORT").any(|(at, _)| {
            !command[at + 5..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        }) || command.contains("${PORT}")
            || command.contains("${PORT:")
            || command.contains("${PORT-");
        if uses_port {
            app.set("env", json!({"PORT": format!("{{instance+{port}}}")}));
            app.note(Some(line), format!("`$PORT`: {port} for the first instance, one more for each next, as foreman gives it.\nTo serve one port from every instance, write `listen: 127.0.0.1:{port}` instead (supervise then sets PORT\nand shares the socket as fd 3: see the manual, Cluster mode)"));
        }
        if process_type == "release" {
            app.set("restart", json!("never"));
            app.note(Some(line), "Heroku runs `release` once per deploy: a one-shot here, run again when edited;\nan app that needs it first can say `depends_on: {release: completed}`");
        }
        app.record_mapped("command");
        draft.apps.push(app);
    }
    if draft.apps.is_empty() {
        draft.notes.push(Note::warning(
            None,
            "no `name: command` line: nothing to run",
        ));
    }
    draft
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_is_an_app_and_port_users_get_foremans_ports() {
        let draft = translate(
            "web: bundle exec puma -p $PORT\nworker:   python3 worker.py --queue default\n# a comment\n\nclock: ./clock | logger\n",
            "Procfile",
        );
        let names: Vec<&str> = draft.apps.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["web", "worker", "clock"]);
        assert_eq!(
            draft.apps[0].fields["command"],
            json!("exec bundle exec puma -p $PORT")
        );
        assert_eq!(draft.apps[0].fields["shell"], json!(true));
        assert_eq!(
            draft.apps[0].fields["env"],
            json!({"PORT": "{instance+5000}"})
        );
        assert_eq!(
            draft.apps[1].fields["command"],
            json!("python3 worker.py --queue default")
        );
        assert!(!draft.apps[1].fields.contains_key("shell"));
        assert_eq!(
            draft.apps[2].fields["command"],
            json!("./clock | logger"),
            "a pipeline is left to the shell whole"
        );
        assert!(draft.notes.is_empty());
    }

    #[test]
    fn an_assignment_before_the_program_and_a_port_with_a_default_keep_the_shell_and_port() {
        let draft = translate(
            "worker: RAILS_ENV=production sleep 100\nweb: sleep ${PORT:-3000}\nother: echo $PORTS\n",
            "Procfile",
        );
        assert_eq!(draft.apps[0].fields["shell"], json!(true));
        assert_eq!(
            draft.apps[0].fields["command"],
            json!("RAILS_ENV=production sleep 100")
        );
        assert_eq!(
            draft.apps[1].fields["env"],
            json!({"PORT": "{instance+5100}"})
        );
        assert!(
            !draft.apps[2].fields.contains_key("env"),
            "$PORTS is another variable"
        );
    }

    #[test]
    fn lines_that_are_not_name_command_are_warned_with_their_line() {
        let draft = translate(
            "web: ok\nthis is not one\n: empty name\nbad name: x\n",
            "Procfile",
        );
        assert_eq!(draft.apps.len(), 1);
        let lines: Vec<Option<usize>> = draft.notes.iter().map(|n| n.line).collect();
        assert_eq!(lines, [Some(2), Some(3), Some(4)]);
    }

    #[test]
    fn an_indented_line_is_no_process_type() {
        let draft = translate("web: ok\n\tworker: sleep 1\n  clock: sleep 2\n", "Procfile");
        let names: Vec<&str> = draft.apps.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["web"]);
        let lines: Vec<Option<usize>> = draft.notes.iter().map(|n| n.line).collect();
        assert_eq!(lines, [Some(2), Some(3)]);
        assert!(
            draft.notes[0].text.contains("column 0"),
            "{:?}",
            draft.notes
        );
    }

    #[test]
    fn an_empty_procfile_says_so() {
        let draft = translate("# nothing\n", "Procfile");
        assert!(draft.apps.is_empty());
        assert_eq!(draft.notes.len(), 1);
    }
}
