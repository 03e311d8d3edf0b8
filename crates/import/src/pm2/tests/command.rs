//! The command line: the interpreter by extension or file, a script on the
//! PATH, explicit interpreters, pm2's argument splitting, a script with a
//! space, `cmd` and `command`, and numbers written as JavaScript does.

use super::*;

#[test]
fn the_interpreter_follows_the_extension_then_the_file() {
    let text = FileKind::Text;
    let cases = [
        ("server.js", text, json!(["node", "./server.js"])),
        ("tool.py", text, json!(["python3", "./tool.py"])),
        ("run.sh", text, json!(["bash", "./run.sh"])),
        ("start", text, json!(["node", "./start"])),
        ("bin/server", FileKind::Binary, json!(["bin/server"])),
    ];
    for (script, kind, argv) in cases {
        let path = format!("/srv/app/{script}");
        let draft = one(json!({"name": "a", "script": script}), &[(&path, kind)]);
        assert_eq!(draft.fields["command"], argv, "{script}");
    }
}

#[test]
fn a_script_not_in_cwd_is_looked_up_on_the_path() {
    let draft = one(
        json!({"name": "a", "script": "npm", "args": "run start"}),
        &[],
    );
    assert_eq!(
        draft.fields["command"],
        json!(["node", "/usr/bin/npm", "run", "start"]),
        "pm2 runs a text file found on the PATH with node"
    );
    let draft = one(json!({"name": "a", "script": "missing.js"}), &[]);
    assert!(
        draft.notes.iter().any(|n| n.text.contains("would refuse")),
        "{:?}",
        draft.notes
    );
}

#[test]
fn an_explicit_interpreter_and_its_arguments_come_first() {
    let draft = one(
        json!({"name": "a", "script": "app.rb", "interpreter": "ruby", "interpreter_args": "-W0", "args": ["--port", 3000]}),
        &[("/srv/app/app.rb", FileKind::Text)],
    );
    assert_eq!(
        draft.fields["command"],
        json!(["ruby", "-W0", "./app.rb", "--port", "3000"])
    );
    let draft = one(
        json!({"name": "a", "script": "./server", "exec_interpreter": "none"}),
        &[("/srv/app/server", FileKind::Text)],
    );
    assert_eq!(draft.fields["command"], json!(["./server"]));
}

#[test]
fn string_args_split_as_pm2_splits_them() {
    assert_eq!(split_args("a  b"), ["a", "b"]);
    assert_eq!(
        split_args(r#"--name "night shift" 'x y'"#),
        ["--name", "night shift", "x y"]
    );
    assert_eq!(
        split_args("--name='night shift' k=\"v w\""),
        ["--name='night shift'", "k=\"v w\""]
    );
    assert_eq!(split_args("it's"), ["it's"]);
    assert_eq!(split_args(""), Vec::<String>::new());
}

#[test]
fn a_script_with_a_space_is_a_command_line_run_by_bash() {
    let draft = one(
        json!({"script": "python3 -m http.server 8000", "args": "--ignored"}),
        &[],
    );
    assert_eq!(
        draft.fields["command"],
        json!(["bash", "-c", "python3 -m http.server 8000"])
    );
    assert_eq!(
        draft.name, "python3-m-http-server-8000",
        "named after the command line, as pm2 names it"
    );
    assert!(draft.notes.iter().any(|n| n.text.contains("`args`")));
}

#[test]
fn cmd_and_command_stand_for_a_missing_script() {
    let draft = one(json!({"name": "k", "command": "sleep 101"}), &[]);
    assert_eq!(draft.fields["command"], json!(["bash", "-c", "sleep 101"]));
    let draft = one(
        json!({"name": "l", "cmd": "sleep", "args": "102"}),
        &[("/srv/app/sleep", FileKind::Binary)],
    );
    assert_eq!(draft.fields["command"], json!(["./sleep", "102"]));
}

#[test]
fn numbers_are_written_as_javascript_writes_them() {
    let draft = one(
        json!({"name": "a", "script": "a.js", "args": [1e3, 1.0, 100, 0.5], "env": {"A": 1e3, "B": 8080.0}}),
        &[("/srv/app/a.js", FileKind::Text)],
    );
    assert_eq!(
        draft.fields["command"],
        json!(["node", "./a.js", "1000", "1", "100", "0.5"])
    );
    assert_eq!(draft.fields["env"], json!({"A": "1000", "B": "8080"}));
}
