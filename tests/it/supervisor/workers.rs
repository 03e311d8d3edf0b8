//! What a worker is given: exactly its stdio and its listening sockets
//! (LISTEN_PID its own), its slot number, and the configured user.

use super::*;

#[test]
fn a_worker_sees_exactly_its_stdio_and_listening_sockets() {
    let mut s = Supervised::start(
        r#"
apps:
  flapper:
    command: [sh, -c, "n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n; [ $n -ge 50 ] && exec sleep 1000; exit 1"]
    listen: 127.0.0.1:0
    backoff: {initial: 1ms, max: 1ms, factor: 1}
    ready: none
"#,
    );
    s.wait_count("spawned", "flapper", 51);
    let pid = s.running_pids("flapper")[0];
    let read_fds = || -> BTreeSet<i32> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(eventually(WAIT, || std::fs::read_link(format!(
        "/proc/{pid}/exe"
    ))
    .is_ok_and(|e| e.ends_with("sleep"))));
    // `sleep` opens locale files for a moment as it starts: a leaked fd
    // stays, one of the program's own goes.
    let expected = BTreeSet::from([0, 1, 2, 3]);
    let settled = eventually(WAIT, || read_fds() == expected);
    let links: Vec<String> = read_fds()
        .iter()
        .map(|fd| {
            format!(
                "{fd} -> {:?}",
                std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            )
        })
        .collect();
    assert!(settled, "after 51 starts: {links:?}");
    let stdin = std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap();
    assert_eq!(stdin.to_str(), Some("/dev/null"));
    let socket = std::fs::read_link(format!("/proc/{pid}/fd/3")).unwrap();
    assert!(
        socket.to_string_lossy().starts_with("socket:"),
        "{socket:?}"
    );
}

/// A receiver as strict as systemd's: LISTEN_PID must be our own pid.
const STRICT_RECEIVER: &str = r#"
import os, socket, sys
if os.environ.get("LISTEN_PID") != str(os.getpid()) or os.environ.get("LISTEN_FDS") != "1":
    print("refusing: LISTEN_PID", os.environ.get("LISTEN_PID"), "pid", os.getpid(), flush=True)
    sys.exit(2)
listener = socket.socket(fileno=3)
print("accepting on", listener.getsockname()[1], "names", os.environ.get("LISTEN_FDNAMES"), flush=True)
me = os.environ["SUPERVISE_INSTANCE"].encode()
while True:
    conn, _ = listener.accept()
    conn.recv(1024)
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n" + me)
    conn.close()
"#;

#[test]
fn a_strict_receiver_accepts_the_socket_and_instances_share_the_port() {
    let mut s = Supervised::start_with(
        r#"
apps:
  strict:
    command: [python3, receiver.py]
    instances: 2
    listen: {name: web, address: "127.0.0.1:0"}
    ready: none
"#,
        &[],
        |dir| std::fs::write(dir.join("receiver.py"), STRICT_RECEIVER).unwrap(),
    );
    let first = s.wait_for("accepting", |e| {
        e["event"] == "output"
            && e["line"]
                .as_str()
                .is_some_and(|l| l.starts_with("accepting"))
    });
    s.wait_for("accepting", |e| {
        e["event"] == "output"
            && e["line"]
                .as_str()
                .is_some_and(|l| l.starts_with("accepting"))
    });
    let line = first["line"].as_str().unwrap();
    assert!(line.ends_with("names web"), "{line}");
    let port: u16 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    let mut served = BTreeSet::new();
    for _ in 0..200 {
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("never refused");
        conn.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let mut reply = String::new();
        conn.read_to_string(&mut reply).unwrap();
        served.insert(reply.chars().last().unwrap());
        if served.len() == 2 {
            break;
        }
    }
    assert_eq!(
        served,
        BTreeSet::from(['0', '1']),
        "both instances accept on the one port"
    );
}

#[test]
fn instances_get_their_slot_numbers() {
    let mut s = Supervised::start(
        r#"
apps:
  trio:
    command: [sh, -c, "echo slot=$SUPERVISE_INSTANCE node=$NODE_APP_INSTANCE app=$SUPERVISE_APP; exec sleep 1000"]
    instances: 3
    ready: none
"#,
    );
    let mut seen = BTreeSet::new();
    while seen.len() < 3 {
        let line = s.wait_for("a slot line", |e| {
            e["event"] == "output" && e["app"] == "trio"
        });
        let slot = line["slot"].as_u64().unwrap();
        assert_eq!(line["line"], format!("slot={slot} node={slot} app=trio"));
        seen.insert(slot);
    }
    assert_eq!(seen, BTreeSet::from([0, 1, 2]));
    assert_eq!(s.running_pids("trio").len(), 3);
}

#[test]
#[ignore = "needs root"]
fn workers_run_as_the_configured_user_when_root() {
    require_root();
    let mut s = Supervised::start(
        r#"
apps:
  unprivileged:
    command: [sh, -c, "echo uid=$(id -u) gid=$(id -g) user=$USER home=$HOME"]
    user: nobody
    restart: never
"#,
    );
    let line = s.wait_for("the id line", |e| {
        e["event"] == "output" && e["app"] == "unprivileged"
    });
    let text = line["line"].as_str().unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert!(
        text.starts_with(&format!(
            "uid={} gid={} user=nobody home=",
            nobody.uid, nobody.gid
        )),
        "{text}"
    );
}

/// A uid with no passwd entry (a file written for an image, or another
/// machine): the worker runs as that uid, with the group given or else the
/// same number, no other group, HOME=/ and the number as USER and LOGNAME.
#[test]
#[ignore = "needs root"]
fn workers_run_as_a_numeric_uid_without_an_entry_when_root() {
    require_root();
    let absent = |from: u32| {
        (from..from + 1_000_000)
            .find(|&id| {
                nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(id))
                    .is_ok_and(|found| found.is_none())
                    && nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(id))
                        .is_ok_and(|found| found.is_none())
            })
            .expect("an id without an entry")
    };
    let uid = absent(3_100_000_000);
    let gid = absent(3_200_000_000);
    let script =
        "echo uid=$(id -u) gid=$(id -g) groups=$(id -G) user=$USER logname=$LOGNAME home=$HOME";
    let mut s = Supervised::start(&format!(
        r#"
apps:
  bare:
    command: [sh, -c, "{script}"]
    user: {uid}
    cwd: /
    restart: never
  grouped:
    command: [sh, -c, "{script}"]
    user: "{uid}"
    group: {gid}
    cwd: /
    restart: never
"#
    ));
    for (app, group) in [("bare", uid), ("grouped", gid)] {
        let line = s.wait_for("the id line", |e| e["event"] == "output" && e["app"] == app);
        assert_eq!(
            line["line"].as_str().unwrap_or_default(),
            format!("uid={uid} gid={group} groups={group} user={uid} logname={uid} home=/"),
            "{app}"
        );
    }
}
