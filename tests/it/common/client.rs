//! A running supervisor, as its clients see it: the port it bound, commands
//! run against it, `status --json`, and the ecosystem file saved as an editor
//! does.

use super::*;

/// The port of the first socket the supervisor bound (`listening` event).
pub fn listening_port(s: &mut Supervised) -> u16 {
    let listening = s.wait_for("the socket", |e| e["event"] == "listening");
    listening["address"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Run `supervise ARGS --file ecosystem.yaml` as a client of the supervisor of
/// `s` (its directory and runtime directory), and wait for it.
pub fn run_client(s: &Supervised, args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .current_dir(s.dir.path())
        .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
        .args(args)
        .args(["--file", "ecosystem.yaml"])
        .output()
        .expect("the client runs")
}

/// Save `yaml` as the supervised ecosystem file, as an editor does (a new
/// file renamed over the old one).
pub fn save(s: &Supervised, yaml: &str) {
    let temp = s.path(".ecosystem.yaml.tmp");
    std::fs::write(&temp, yaml).expect("the new version is written");
    std::fs::rename(&temp, s.path("ecosystem.yaml")).expect("and renamed over the file");
}

/// `supervise status --json`, parsed.
pub fn status_json(s: &Supervised) -> Value {
    let output = run_client(s, &["status", "--json"]);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json: {e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// App `name` in a `status --json` reply.
pub fn app_status<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["apps"]
        .as_array()
        .and_then(|apps| apps.iter().find(|a| a["name"] == name))
        .unwrap_or_else(|| panic!("no app {name} in {status}"))
}
