//! `listen: {inject: true}`: real, unmodified servers that bind their port
//! themselves — `python3 -m http.server`, a Node server as the tutorials
//! write it, `php -S`, a Java `com.sun.net.httpserver` — run as several
//! instances on one port through the preload library; a rolling reload
//! refuses no connection; the program's other sockets work as without the
//! library; a static binary, which the library cannot reach, is warned about
//! once per version and runs on. Which process served a request is read
//! from /proc (who holds the accepted connection), so a test never needs the
//! server to say its pid. Programs that bind in odd ways (twice, in a forked
//! child, both families, several addresses at once, from two threads at
//! once, calls the kernel refuses) must get the answers the kernel gives
//! them alone: each is run alone first, then under supervise.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;
use supervise_core::INJECT_GRACE;

/// One HTTP/1.0 request on a new connection: the body, or the error.
fn get(port: u16) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    if !reply.starts_with("HTTP/1.") || !reply.contains(" 200 ") {
        return Err(std::io::Error::other(format!("not a 200: {reply:.80}")));
    }
    Ok(reply
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string())
}

/// How long a connection may wait to be accepted by an instance.
const ACCEPT_WAIT: Duration = Duration::from_secs(10);

/// The inode of the server's end of the connection from 127.0.0.1:`client`
/// to 127.0.0.1:`port`, once a process accepted it (the kernel shows 0
/// while it waits in the listening socket's queue). /proc/net/tcp writes an
/// address as the hex of its native-endian u32: 127.0.0.1 is 0100007F here.
fn accepted_inode(port: u16, client: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let (local, remote) = (
        format!("0100007F:{port:04X}"),
        format!("0100007F:{client:04X}"),
    );
    table
        .lines()
        .skip(1)
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let ours =
                fields.get(1) == Some(&local.as_str()) && fields.get(2) == Some(&remote.as_str());
            ours.then(|| fields.get(9).and_then(|inode| inode.parse().ok()))
                .flatten()
        })
        .filter(|inode| *inode != 0)
}

/// The process among `candidates` that holds socket `inode`.
fn holder(inode: u64, candidates: &[i32]) -> Option<i32> {
    let target = format!("socket:[{inode}]");
    candidates.iter().copied().find(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.filter_map(Result::ok).any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|link| link == Path::new(&target))
            })
        })
    })
}

/// One request on a new connection, as [`get`]: the pid of the process
/// that accepted it, if one did within [`ACCEPT_WAIT`] — a descendant of
/// `supervisor` holding the server's end of the connection, found before
/// the request is sent (the server waits for it, so it cannot have answered
/// and closed yet); and whether a 200 came back. The program is not asked
/// who it is: this works for any unmodified server. A server that closes
/// the connection without a word is `UnexpectedEof`; one that did before
/// its process was found has no pid.
fn request(port: u16, supervisor: i32) -> (Option<i32>, std::io::Result<()>) {
    let mut stream = match TcpStream::connect(("127.0.0.1", port)) {
        Ok(stream) => stream,
        Err(e) => return (None, Err(e)),
    };
    let client = match stream.local_addr() {
        Ok(address) => address.port(),
        Err(e) => return (None, Err(e)),
    };
    let deadline = Instant::now() + ACCEPT_WAIT;
    let pid = loop {
        if let Some(pid) = accepted_inode(port, client)
            .and_then(|inode| holder(inode, &descendants_of(supervisor)))
        {
            break pid;
        }
        if let Some(cut) = closed(&stream) {
            return (None, Err(cut));
        }
        if Instant::now() >= deadline {
            let waited = std::io::Error::other(format!(
                "no instance accepted the connection from port {client} within {ACCEPT_WAIT:?}"
            ));
            return (None, Err(waited));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let answered = (|| {
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply)?;
        if reply.is_empty() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if !reply.starts_with("HTTP/1.") || !reply.contains(" 200 ") {
            return Err(std::io::Error::other(format!("not a 200: {reply:.80}")));
        }
        Ok(())
    })();
    (Some(pid), answered)
}

/// Why the server's end of `stream` is gone, if it is (a peek that does
/// not wait: end of file, or a reset).
fn closed(stream: &TcpStream) -> Option<std::io::Error> {
    if let Err(e) = stream.set_nonblocking(true) {
        return Some(e);
    }
    let peeked = stream.peek(&mut [0u8; 1]);
    if let Err(e) = stream.set_nonblocking(false) {
        return Some(e);
    }
    match peeked {
        Ok(0) => Some(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed before the request was sent",
        )),
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => Some(e),
    }
}

/// The pid that served one request ([`request`]), or why it was not served.
fn served_by(port: u16, supervisor: i32) -> std::io::Result<i32> {
    match request(port, supervisor) {
        (Some(pid), Ok(())) => Ok(pid),
        (pid, Err(e)) => Err(std::io::Error::new(
            e.kind(),
            format!("{e} (accepted by {pid:?})"),
        )),
        (None, Ok(())) => unreachable!("a request is sent only once accepted"),
    }
}

/// The pids that served requests ([`served_by`]) until each of `expected`
/// served one, or one that is not among them did, or after `most`
/// requests: the kernel spreads the connections over the instances, so a
/// few dozen requests reach every one.
fn servers(port: u16, supervisor: i32, expected: &BTreeSet<i32>, most: usize) -> BTreeSet<i32> {
    let mut pids = BTreeSet::new();
    for i in 0..most {
        let pid = served_by(port, supervisor).unwrap_or_else(|e| panic!("request {i}: {e}"));
        pids.insert(pid);
        if pids == *expected || !expected.contains(&pid) {
            break;
        }
    }
    pids
}

/// Requests until `stop` is set (and at least `min` were answered), at most
/// [`MAX_REQUESTS`]: how many were answered and refused; the requests cut
/// (reset or closed unanswered), by the pid of the process that had
/// accepted them when it is known; and the requests that failed otherwise,
/// with why.
#[derive(Debug, Default)]
struct Tally {
    ok: usize,
    refused: usize,
    cut: BTreeMap<Option<i32>, usize>,
    failed: Vec<String>,
}

const MAX_REQUESTS: usize = 20_000;

fn load(port: u16, supervisor: i32, min: usize, stop: &AtomicBool, done: &AtomicUsize) -> Tally {
    use std::io::ErrorKind::{ConnectionRefused, ConnectionReset, UnexpectedEof};
    let mut tally = Tally::default();
    for i in 0..MAX_REQUESTS {
        if tally.ok >= min && stop.load(Ordering::Relaxed) {
            break;
        }
        match request(port, supervisor) {
            (_, Ok(())) => {
                tally.ok += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
            (None, Err(e)) if e.kind() == ConnectionRefused => tally.refused += 1,
            (pid, Err(e)) if matches!(e.kind(), ConnectionReset | UnexpectedEof) => {
                *tally.cut.entry(pid).or_default() += 1;
            }
            (pid, Err(e)) => tally
                .failed
                .push(format!("request {i}, accepted by {pid:?}: {e}")),
        }
    }
    tally
}

/// The pids that answered `requests` requests whose body names the pid
/// (`pid N`), waiting until `want` of them did (bounded).
fn serving_pids(port: u16, want: usize) -> BTreeSet<String> {
    let mut pids = BTreeSet::new();
    let deadline = Instant::now() + WAIT;
    while pids.len() < want && Instant::now() < deadline {
        if let Ok(body) = get(port) {
            if let Some(pid) = body.split("pid ").nth(1) {
                pids.insert(pid.trim().to_string());
            }
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    pids
}

/// The pids of `app`'s `spawned` events of `generation`.
fn spawned_pids(s: &Supervised, app: &str, generation: i64) -> BTreeSet<i32> {
    s.events
        .iter()
        .filter(|e| e["event"] == "spawned" && e["app"] == app && e["generation"] == generation)
        .filter_map(|e| e["pid"].as_i64().map(|p| p as i32))
        .collect()
}

/// How long past [`INJECT_GRACE`] a test waits before its barrier:
/// supervise looks at that moment (a timer of its own), so a warning is
/// logged by then unless its loop was held up that long.
const INJECT_MARGIN: Duration = Duration::from_millis(500);

/// Time since `event`, by its timestamp.
fn since(event: &serde_json::Value) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0;
    Duration::from_secs_f64(((now - timestamp_ms(event)) / 1000.0).max(0.0))
}

/// Wait until [`INJECT_GRACE`] (and a margin) has passed since the last
/// `spawned` of `app`, then for the barrier: every check supervise makes
/// of its instances has been made and reported by then. (Nothing but the
/// clock says when the check is made: the core logs nothing for an
/// instance the library did reach.)
fn wait_out_the_grace(s: &mut Supervised, app: &str) {
    let last_spawn = s
        .events
        .iter()
        .rev()
        .find(|e| e["event"] == "spawned" && e["app"] == app)
        .cloned()
        .expect("the app spawned");
    let left = (INJECT_GRACE + INJECT_MARGIN).saturating_sub(since(&last_spawn));
    std::thread::sleep(left);
    s.barrier();
}

/// That the preload library told supervise of every substitution: no
/// instance of `app` is warned about ([`INJECT_GRACE`] after its spawn is
/// when supervise looks). Waits until that time has passed for the last one.
fn assert_every_instance_reported(s: &mut Supervised, app: &str) {
    wait_out_the_grace(s, app);
    assert_eq!(
        s.count("not_injected", app),
        0,
        "an instance was not handed the socket, or its report was lost: {}",
        s.dump()
    );
}

#[test]
fn python_http_server_serves_from_every_instance_and_reloads_refusing_nothing() {
    let port = free_port();
    let yaml = format!(
        "apps:\n  web:\n    command: [python3, -m, http.server, \"{port}\"]\n    instances: 3\n    listen: [{{address: \"127.0.0.1:{port}\", inject: true}}]\n    ready: {{delay: 500ms}}\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("index.html"), "hello\n").expect("write");
    });
    s.wait_count("ready", "web", 3);
    let first = spawned_pids(&s, "web", 1);
    assert_eq!(first.len(), 3, "{}", s.dump());
    // Who accepted each request, read from /proc (the server is not
    // asked): all three, within 200 requests.
    assert_eq!(
        servers(port, s.pid(), &first, 200),
        first,
        "200 requests were not served by the 3 instances"
    );

    // A rolling reload under load refuses no connection and fails no
    // request, and replaces every instance.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let client = {
        let (stop, done, supervisor) = (stop.clone(), done.clone(), s.pid());
        std::thread::spawn(move || load(port, supervisor, 300, &stop, &done))
    };
    assert!(
        eventually(WAIT, || done.load(Ordering::Relaxed) >= 50),
        "the load runs"
    );
    let reload = run_client(&s, &["reload", "web"]);
    assert!(
        reload.status.success(),
        "{}",
        String::from_utf8_lossy(&reload.stderr)
    );
    stop.store(true, Ordering::Relaxed);
    let tally = client.join().expect("the client ends");
    println!("{tally:?}");
    assert!(
        tally.refused == 0 && tally.failed.is_empty() && tally.ok >= 300,
        "the reload refused or failed requests: {tally:?}"
    );
    s.wait_count("spawned", "web", 6);
    let second = spawned_pids(&s, "web", 2);
    assert_eq!(second.len(), 3, "three new instances: {}", s.dump());
    assert!(second.is_disjoint(&first), "{first:?} {second:?}");
    assert!(
        first.iter().all(|pid| is_gone(*pid)),
        "every old instance stopped"
    );
    // http.server dies at once on SIGTERM (it sets no handler): a
    // connection it had accepted then is cut, reset or closed unanswered
    // (the manual says so). The client has one connection open at a time,
    // so each of the 3 stopped instances cut at most one, and none that
    // lives cut any.
    let cut: usize = tally.cut.values().sum();
    assert!(
        cut <= first.len()
            && tally
                .cut
                .iter()
                .all(|(pid, n)| pid.is_none_or(|pid| first.contains(&pid) && *n == 1)),
        "a request was cut other than by a stopping instance: {tally:?}"
    );
    assert_eq!(
        servers(port, s.pid(), &second, 200),
        second,
        "the new instances serve, all of them"
    );
    assert_every_instance_reported(&mut s, "web");
}

#[test]
fn a_node_server_written_as_the_tutorials_write_it_serves_from_two_pids() {
    let port = free_port();
    let yaml = format!(
        "apps:\n  app:\n    command: node app.js\n    instances: 2\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n"
    );
    // No cluster module, no fd 3: the port is written in the program.
    let app = format!(
        "const http = require('http');\nconst server = http.createServer((req, res) => {{\n  res.end(`pid ${{process.pid}}`);\n}});\nserver.listen({port}, () => console.log('listening on {port}'));\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("app.js"), app).expect("write");
    });
    s.wait_count("ready", "app", 2);
    let pids = serving_pids(port, 2);
    assert_eq!(pids.len(), 2, "{pids:?}");
}

#[test]
fn php_built_in_server_serves_from_two_instances() {
    if Command::new("php").arg("--version").output().is_err() {
        panic!("php is missing: .ci/run installs php-cli");
    }
    let port = free_port();
    let yaml = format!(
        "apps:\n  php:\n    command: php -S 127.0.0.1:{port} -t public\n    instances: 2\n    listen: [{{address: \"127.0.0.1:{port}\", inject: true}}]\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::create_dir(dir.join("public")).expect("mkdir");
        std::fs::write(
            dir.join("public/index.php"),
            "pid <?php echo getmypid(); ?>",
        )
        .expect("write");
    });
    s.wait_count("ready", "php", 2);
    let pids = serving_pids(port, 2);
    assert_eq!(pids.len(), 2, "{pids:?}");
}

#[test]
fn a_java_httpserver_serves_from_two_instances() {
    if Command::new("java").arg("-version").output().is_err() {
        panic!("java is missing: the JDK is on these machines");
    }
    let port = free_port();
    let yaml = format!(
        "apps:\n  java:\n    command: java Server.java\n    instances: 2\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n    ready: {{delay: 3s}}\n"
    );
    let server = format!(
        r#"import com.sun.net.httpserver.HttpServer;
import java.net.InetSocketAddress;

public class Server {{
    public static void main(String[] args) throws Exception {{
        HttpServer server = HttpServer.create(new InetSocketAddress({port}), 0);
        server.createContext("/", exchange -> {{
            byte[] body = ("pid " + ProcessHandle.current().pid()).getBytes();
            exchange.sendResponseHeaders(200, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        }});
        server.start();
    }}
}}
"#
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("Server.java"), server).expect("write");
    });
    s.wait_count("ready", "java", 2);
    let pids = serving_pids(port, 2);
    assert_eq!(pids.len(), 2, "{pids:?}");
}

#[test]
fn the_programs_other_sockets_work_as_without_the_library() {
    let (port, other) = (free_port(), free_port());
    // A peer the program connects out to.
    let peer = TcpListener::bind("127.0.0.1:0").expect("bind");
    let peer_port = peer.local_addr().expect("address").port();
    let program = format!(
        r#"import socket, sys
served = socket.socket()
served.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
served.bind(("127.0.0.1", {port}))
served.listen(16)
mine = socket.socket()
mine.bind(("127.0.0.1", {other}))
mine.listen(16)
out = socket.create_connection(("127.0.0.1", {peer_port}))
out.sendall(b"hello from the program\n")
print("served", served.getsockname()[1], "mine", mine.getsockname()[1], "out", out.getpeername()[1], flush=True)
while True:
    for sock in (served, mine):
        sock.settimeout(0.05)
        try:
            conn, _ = sock.accept()
        except socket.timeout:
            continue
        conn.recv(1024)
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\npid %d on %d" % (__import__("os").getpid(), sock.getsockname()[1]))
        conn.close()
"#
    );
    let yaml = format!(
        "apps:\n  mixed:\n    command: [python3, program.py]\n    listen: [{{address: \"127.0.0.1:{port}\", inject: true}}]\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("program.py"), program).expect("write");
    });
    // The outgoing connection arrives with what the program sent.
    peer.set_nonblocking(false).expect("blocking");
    let (mut conn, _) = peer.accept().expect("the program connects out");
    conn.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut said = [0u8; 64];
    let n = conn.read(&mut said).expect("it says hello");
    assert_eq!(&said[..n], b"hello from the program\n");
    let line = s.wait_for("the program's report", |e| {
        e["event"] == "output" && e["line"].as_str().is_some_and(|l| l.starts_with("served"))
    });
    assert_eq!(
        line["line"],
        format!("served {port} mine {other} out {peer_port}"),
        "getsockname and getpeername tell the truth"
    );
    s.wait_event("ready", "mixed");
    assert!(
        get(port)
            .expect("the injected socket serves")
            .ends_with(&format!("on {port}"))
    );
    assert!(
        get(other)
            .expect("its own socket serves")
            .ends_with(&format!("on {other}"))
    );
}

/// Compile the C file `source` into `output` with cc and `flags`.
fn compile_c(source: &Path, output: &Path, flags: &[&str]) {
    let built = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(output)
        .arg(source)
        .output()
        .expect("cc runs");
    assert!(
        built.status.success(),
        "cc {flags:?} {} failed (.ci/run installs libc6-dev): {}",
        source.display(),
        String::from_utf8_lossy(&built.stderr)
    );
}

/// Compile a tiny static C program that binds `port` itself (through glibc
/// linked in, which no preload reaches), says what bind returned, and stays up.
fn static_binary(dir: &Path, port: u16) {
    let source = format!(
        r#"#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(void) {{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons({port});
    int r = bind(s, (struct sockaddr *)&a, sizeof a);
    printf("bind returned %d\n", r);
    fflush(stdout);
    for (;;) pause();
}}
"#
    );
    std::fs::write(dir.join("server.c"), source).expect("write");
    compile_c(
        &dir.join("server.c"),
        &dir.join("server"),
        &["-static", "-O1"],
    );
}

/// The `not_injected` warnings of `app` for `generation`.
fn warnings(s: &Supervised, app: &str, generation: i64) -> usize {
    s.events
        .iter()
        .filter(|e| {
            e["event"] == "not_injected" && e["app"] == app && e["generation"] == generation
        })
        .count()
}

#[test]
fn a_static_binary_is_warned_about_once_per_version_and_runs_on() {
    let port = free_port();
    let yaml = format!(
        "apps:\n  static:\n    command: ./server\n    instances: 2\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n    ready: {{delay: 300ms}}\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| static_binary(dir, port));
    s.wait_count("ready", "static", 2);
    let warning = s.wait_event("not_injected", "static");
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["generation"], 1);
    let message = warning["message"].as_str().unwrap_or_default();
    for what_to_do in ["static binary", "EADDRINUSE", "LISTEN_FDS", "drop `inject`"] {
        assert!(
            message.contains(what_to_do),
            "the warning says what happened and what to do ({what_to_do}): {message}"
        );
    }
    // It runs on: both instances are up and were not restarted.
    let status = status_json(&s);
    let app = app_status(&status, "static");
    let ready = app["workers"]
        .as_array()
        .map_or(0, |w| w.iter().filter(|w| w["ready"] == true).count());
    assert_eq!(ready, 2, "{app}");
    assert_eq!(s.count("exited", "static"), 0);

    // An instance of the same version started again after the warning is
    // not warned about again; nor was the other instance.
    let restart = run_client(&s, &["restart", "static.0"]);
    assert!(
        restart.status.success(),
        "{}",
        String::from_utf8_lossy(&restart.stderr)
    );
    s.wait_count("spawned", "static", 3);
    assert_eq!(spawned_pids(&s, "static", 1).len(), 3, "{}", s.dump());
    wait_out_the_grace(&mut s, "static");
    assert_eq!(
        warnings(&s, "static", 1),
        1,
        "once per version, not per instance or per process: {}",
        s.dump()
    );

    // A new version is warned about once more, once for its two instances.
    let reload = run_client(&s, &["reload", "static"]);
    assert!(
        reload.status.success(),
        "{}",
        String::from_utf8_lossy(&reload.stderr)
    );
    s.wait_count("spawned", "static", 5);
    assert_eq!(spawned_pids(&s, "static", 2).len(), 2, "{}", s.dump());
    s.wait_for("the new version's warning", |e| {
        e["event"] == "not_injected" && e["generation"] == 2
    });
    wait_out_the_grace(&mut s, "static");
    assert_eq!(warnings(&s, "static", 2), 1, "{}", s.dump());
    assert_eq!(warnings(&s, "static", 1), 1, "{}", s.dump());
}

#[test]
fn the_any_server_example_serves_an_unmodified_http_server_from_four_instances() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/any-server");
    let port = free_port();
    let yaml = std::fs::read_to_string(folder.join("ecosystem.yaml"))
        .expect("the example")
        .replace("8000", &port.to_string());
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::copy(folder.join("index.html"), dir.join("index.html")).expect("copy");
    });
    s.wait_count("ready", "web", 4);
    assert!(get(port).expect("served").contains("four instances"));
    let instances = spawned_pids(&s, "web", 1);
    assert_eq!(
        servers(port, s.pid(), &instances, 200),
        instances,
        "200 requests were not served by the 4 instances"
    );
}

#[test]
fn a_stopping_program_that_shuts_its_listener_down_leaves_the_port_to_the_others() {
    let port = free_port();
    // On SIGTERM it shuts its listening socket down, as some servers do to
    // wake their accept loop: the socket is every instance's.
    let program = format!(
        r#"import os, signal, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", {port}))
s.listen(16)
def stop(*_):
    s.shutdown(socket.SHUT_RDWR)
    s.close()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    conn, _ = s.accept()
    conn.recv(1024)
    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\npid %d" % os.getpid())
    conn.close()
"#
    );
    let yaml = format!(
        "apps:\n  web:\n    command: [python3, server.py]\n    instances: 2\n    listen: [{{address: \"127.0.0.1:{port}\", inject: true}}]\n    ready: {{delay: 300ms}}\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("server.py"), program).expect("write");
    });
    s.wait_count("ready", "web", 2);
    let reload = run_client(&s, &["reload", "web"]);
    assert!(
        reload.status.success(),
        "{}",
        String::from_utf8_lossy(&reload.stderr)
    );
    s.wait_count("ready", "web", 4);
    let pids = serving_pids(port, 2);
    assert_eq!(pids.len(), 2, "the replacements serve: {pids:?}");
    assert_eq!(
        s.count("spawned", "web"),
        4,
        "the replacements never failed: {}",
        s.dump()
    );
}

/// A program that binds its port in every way the kernel has an answer
/// for: the IPv6 wildcard with IPV6_V6ONLY beside 0.0.0.0 (as asyncio's
/// `create_server` does), the same address twice, a dual-stack `::` beside
/// 0.0.0.0, closed and bound again, a forked child binding it once more,
/// two sockets with SO_REUSEPORT. It prints what each bind answered, which
/// were handed supervise's socket, and how many connections wait unaccepted
/// after its `listen(1)`.
const BINDS_AGAIN: &str = r##"import errno, json, os, socket, sys

port = int(sys.argv[1])
try:
    inherited = os.fstat(3).st_ino
except OSError:
    inherited = None
answers, handed, library = {}, {}, {}

def bind(name, sock, address):
    try:
        sock.bind(address)
        answers[name] = "ok"
        handed[name] = os.fstat(sock.fileno()).st_ino == inherited
    except OSError as e:
        answers[name] = errno.errorcode[e.errno]

# asyncio's create_server(host=None): :: with IPV6_V6ONLY, then 0.0.0.0.
v6 = socket.socket(socket.AF_INET6)
v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
bind("v6only", v6, ("::", port))
v4 = socket.socket()
bind("v4 beside v6only", v4, ("0.0.0.0", port))
bind("v4 again", socket.socket(), ("0.0.0.0", port))
bind("dual-stack beside v4", socket.socket(socket.AF_INET6), ("::", port))
v6.close()
v4.close()
# Closed, then bound again.
v4 = socket.socket()
v4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
bind("again after close", v4, ("0.0.0.0", port))
v4.listen(1)
if inherited is not None:
    # listen(1) left supervise's backlog: 8 connections wait unaccepted.
    queued = []
    for _ in range(8):
        try:
            queued.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            break
    library["queued after listen(1)"] = len(queued)
    for client in queued:
        v4.accept()[0].close()
        client.close()
# Forked after bind: the child serves on the socket and cannot bind it.
child = os.fork()
if child == 0:
    conn, _ = v4.accept()
    conn.sendall(b"child")
    conn.close()
    try:
        socket.socket().bind(("0.0.0.0", port))
        os._exit(0)
    except OSError as e:
        os._exit(e.errno)
with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
    answers["served by the child"] = c.recv(16).decode()
answers["the child's bind"] = errno.errorcode.get(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), "ok")
v4.close()
# SO_REUSEPORT on both: the kernel lets them share.
pair = [socket.socket(), socket.socket()]
for i, sock in enumerate(pair):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    bind(f"reuseport {i}", sock, ("0.0.0.0", port))
print(json.dumps({"answers": answers, "handed": handed, "library": library}), flush=True)
"##;

/// The JSON line [`BINDS_AGAIN`] or [`ODD_CALLS`] printed.
fn printed_report(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[test]
fn a_program_that_binds_its_port_again_is_answered_as_the_kernel_answers_it_alone() {
    // Alone, without supervise or the library: the kernel's answers.
    let alone = tempfile::tempdir().expect("temp dir");
    std::fs::write(alone.path().join("binds.py"), BINDS_AGAIN).expect("write");
    let output = Command::new("python3")
        .arg(alone.path().join("binds.py"))
        .arg(free_port().to_string())
        .env_remove("LD_PRELOAD")
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let kernel = printed_report(String::from_utf8_lossy(&output.stdout).trim());

    let port = free_port();
    let yaml = format!(
        "apps:\n  binds:\n    command: [python3, binds.py, \"{port}\"]\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n    ready: none\n    restart: never\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("binds.py"), BINDS_AGAIN).expect("write");
    });
    let line = s.wait_for("the program's report", |e| {
        e["event"] == "output" && e["stream"] == "stdout" && e["app"] == "binds"
    });
    let injected = printed_report(line["line"].as_str().unwrap_or_default());
    assert_eq!(
        injected["answers"], kernel["answers"],
        "the library answered other than the kernel does (alone: {kernel})"
    );
    let handed = injected["handed"].as_object().expect("handed");
    assert!(
        handed.len() == 5 && handed.values().all(|h| h == true),
        "every bind that succeeded was handed supervise's socket: {injected}"
    );
    assert_eq!(
        injected["library"]["queued after listen(1)"], 8,
        "the program's listen(1) replaced supervise's backlog: {injected}"
    );
}

/// A program with three addresses to bind, the first without `inject`
/// (fd 3), then two with it (fds 4 and 5): what its sockets are after each
/// bind, checked with fcntl and getsockopt from inside it.
const FLAGS: &str = r##"import errno, fcntl, json, os, socket, sys

plain, private_port, shared_port = map(int, sys.argv[1:4])
report = {"SUPERVISE_INJECT_FDS": os.environ.get("SUPERVISE_INJECT_FDS")}

def state(sock, inherited):
    fd = sock.fileno()
    return {
        "handed": os.fstat(fd).st_ino == os.fstat(inherited).st_ino,
        "cloexec": bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC),
        "nonblocking": bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK),
        "rcvbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
    }

# Not inheritable (Python's default: FD_CLOEXEC), blocking, a small
# receive buffer asked for before bind.
private = socket.socket()
private.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
report["rcvbuf asked"] = private.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
private.bind(("127.0.0.1", private_port))
report["private"] = state(private, 4)
# Inheritable and non-blocking: O_NONBLOCK is set on the socket every
# instance shares.
first = socket.socket()
first.set_inheritable(True)
first.setblocking(False)
first.bind(("127.0.0.1", shared_port))
report["non-blocking"] = state(first, 5)
first.close()
# Inheritable and blocking, bound again: the shared socket stays
# non-blocking (the library only ever adds O_NONBLOCK).
second = socket.socket()
second.set_inheritable(True)
second.bind(("127.0.0.1", shared_port))
report["blocking after"] = state(second, 5)
# The address without inject (fd 3) is not handed over.
try:
    socket.socket().bind(("127.0.0.1", plain))
    report["plain"] = "ok"
except OSError as e:
    report["plain"] = errno.errorcode[e.errno]
print(json.dumps(report), flush=True)
"##;

#[test]
fn a_socket_handed_over_keeps_the_programs_close_on_exec_and_shares_its_non_blocking_mode() {
    let (plain, private, shared) = (free_port(), free_port(), free_port());
    let yaml = format!(
        "apps:\n  flags:\n    command: [python3, flags.py, \"{plain}\", \"{private}\", \"{shared}\"]\n    listen:\n      - \"127.0.0.1:{plain}\"\n      - {{address: \"127.0.0.1:{private}\", inject: true}}\n      - {{address: \"127.0.0.1:{shared}\", inject: true}}\n    ready: none\n    restart: never\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("flags.py"), FLAGS).expect("write");
    });
    let line = s.wait_for("the program's report", |e| {
        e["event"] == "output" && e["stream"] == "stdout" && e["app"] == "flags"
    });
    let text = line["line"].as_str().unwrap_or_default();
    let report: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    // The sockets with inject are the second and third: fds 4 and 5.
    assert_eq!(report["SUPERVISE_INJECT_FDS"], "4,5", "{report}");
    assert_eq!(
        report["plain"], "EADDRINUSE",
        "an address without inject is not handed over: {report}"
    );
    let private = &report["private"];
    assert_eq!(private["handed"], true, "{report}");
    assert_eq!(
        private["cloexec"], true,
        "not inheritable stays so: {report}"
    );
    assert_eq!(private["nonblocking"], false, "{report}");
    assert_ne!(
        private["rcvbuf"], report["rcvbuf asked"],
        "an option set before bind() is the program's socket's, which is gone: {report}"
    );
    let nonblocking = &report["non-blocking"];
    assert_eq!(nonblocking["handed"], true, "{report}");
    assert_eq!(
        nonblocking["cloexec"], false,
        "inheritable stays so: {report}"
    );
    assert_eq!(nonblocking["nonblocking"], true, "{report}");
    let after = &report["blocking after"];
    assert_eq!(after["handed"], true, "{report}");
    assert_eq!(after["cloexec"], false, "{report}");
    assert_eq!(
        after["nonblocking"], true,
        "O_NONBLOCK is the shared socket's, and the library only ever adds it: {report}"
    );
}

#[test]
fn the_apps_own_ld_preload_is_kept_and_both_libraries_act() {
    // A harmless library of the user's, built here: its constructor leaves
    // a mark in the environment the program then reads.
    let library = tempfile::tempdir().expect("temp dir");
    let marker = library.path().join("marker.so");
    std::fs::write(
        library.path().join("marker.c"),
        "#include <stdlib.h>\n__attribute__((constructor)) static void mark(void) { setenv(\"PRELOAD_MARKER\", \"loaded\", 1); }\n",
    )
    .expect("write");
    compile_c(
        &library.path().join("marker.c"),
        &marker,
        &["-shared", "-fPIC"],
    );
    let port = free_port();
    let program = format!(
        r#"import json, os, socket
s = socket.socket()
s.bind(("127.0.0.1", {port}))
print(json.dumps({{
    "marker": os.environ.get("PRELOAD_MARKER"),
    "preload": os.environ.get("LD_PRELOAD"),
    "handed": os.fstat(s.fileno()).st_ino == os.fstat(3).st_ino,
}}), flush=True)
"#
    );
    let yaml = format!(
        "apps:\n  both:\n    command: [python3, both.py]\n    env: {{LD_PRELOAD: \"{}\"}}\n    listen: [{{address: \"127.0.0.1:{port}\", inject: true}}]\n    ready: none\n    restart: never\n",
        marker.display()
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("both.py"), program).expect("write");
    });
    let line = s.wait_for("the program's report", |e| {
        e["event"] == "output" && e["stream"] == "stdout" && e["app"] == "both"
    });
    let text = line["line"].as_str().unwrap_or_default();
    let report: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(
        report["marker"], "loaded",
        "the app's library ran: {report}"
    );
    assert_eq!(report["handed"], true, "supervise's library ran: {report}");
    let preload = report["preload"].as_str().unwrap_or_default();
    let (first, second) = preload.split_once(':').unwrap_or_default();
    assert!(
        first == marker.to_string_lossy() && second.contains("/inject-") && second.ends_with(".so"),
        "the app's library first, supervise's after it: {preload}"
    );
}

/// A C program making the calls the kernel refuses — binding one socket
/// twice, an address of the other family — and a non-blocking listener
/// used with accept4(SOCK_NONBLOCK). It prints each answer, and whether
/// its two listening sockets are the one passed at fd 3.
const ODD_CALLS: &str = r##"#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *answer(int r) { return r == 0 ? "ok" : strerrorname_np(errno); }

/* Whether `fd` is the socket supervise passed at fd 3. */
static const char *handed(int fd) {
    struct stat mine, inherited;
    return fstat(fd, &mine) == 0 && fstat(3, &inherited) == 0 && mine.st_ino == inherited.st_ino ? "true" : "false";
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int port = atoi(argv[1]);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct sockaddr_in6 any6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    struct sockaddr_in loopback = any;
    loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    printf("{\"answers\": {");
    int s = socket(AF_INET, SOCK_STREAM, 0);
    printf("\"first\": \"%s\", ", answer(bind(s, (struct sockaddr *)&any, sizeof any)));
    const char *first = handed(s);
    printf("\"the same fd again\": \"%s\", ", answer(bind(s, (struct sockaddr *)&any, sizeof any)));
    close(s);
    int six = socket(AF_INET6, SOCK_STREAM, 0);
    printf("\"an IPv4 address on an IPv6 socket\": \"%s\", ", answer(bind(six, (struct sockaddr *)&any, sizeof any)));
    close(six);
    int four = socket(AF_INET, SOCK_STREAM, 0);
    printf("\"an IPv6 address on an IPv4 socket\": \"%s\", ", answer(bind(four, (struct sockaddr *)&any6, sizeof any6)));
    close(four);
    int shortened = socket(AF_INET, SOCK_STREAM, 0);
    printf("\"a short address\": \"%s\", ", answer(bind(shortened, (struct sockaddr *)&any, 4)));
    close(shortened);
    /* Non-blocking from socket(), accept4() asking for non-blocking. */
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    printf("\"non-blocking\": \"%s\", ", answer(bind(listener, (struct sockaddr *)&any, sizeof any)));
    const char *second = handed(listener);
    printf("\"listen\": \"%s\", ", answer(listen(listener, 16)));
    printf("\"accept4 of nothing\": \"%s\", ", answer(accept4(listener, NULL, NULL, SOCK_NONBLOCK) < 0 ? -1 : 0));
    int client = socket(AF_INET, SOCK_STREAM, 0);
    printf("\"connect\": \"%s\", ", answer(connect(client, (struct sockaddr *)&loopback, sizeof loopback)));
    struct pollfd ready = {.fd = listener, .events = POLLIN};
    printf("\"poll\": %d, ", poll(&ready, 1, 10000));
    int accepted = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    printf("\"accept4\": \"%s\", ", answer(accepted < 0 ? -1 : 0));
    printf("\"accepted non-blocking\": %s}, ", accepted >= 0 && (fcntl(accepted, F_GETFL) & O_NONBLOCK) ? "true" : "false");
    printf("\"handed\": [%s, %s]}\n", first, second);
    return 0;
}
"##;

/// A port the program alone can bind as it does, without `SO_REUSEADDR`,
/// on any address. [`free_port`] looks with `SO_REUSEADDR` (as
/// `TcpListener::bind` sets it), which a port whose connections of an
/// earlier test are in TIME_WAIT passes and a plain `bind` refuses with
/// EADDRINUSE: the kernel's answers would not be those of a free port.
fn port_a_plain_bind_takes() -> u16 {
    for _ in 0..100 {
        let port = free_port();
        if plain_bind_takes(libc::AF_INET, port) && plain_bind_takes(libc::AF_INET6, port) {
            return port;
        }
    }
    panic!("no port a plain bind takes in 100 tries");
}

/// Whether a socket of `family` without `SO_REUSEADDR` can bind the
/// wildcard address at `port` (closed at once).
fn plain_bind_takes(family: libc::c_int, port: u16) -> bool {
    // SAFETY: a socket of our own, bound to a zeroed sockaddr of its family
    // with the port set, then closed.
    unsafe {
        let fd = libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return false;
        }
        let bound = if family == libc::AF_INET6 {
            let mut address: libc::sockaddr_in6 = std::mem::zeroed();
            address.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            address.sin6_port = port.to_be();
            let size = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            libc::bind(fd, (&raw const address).cast(), size)
        } else {
            let mut address: libc::sockaddr_in = std::mem::zeroed();
            address.sin_family = libc::AF_INET as libc::sa_family_t;
            address.sin_port = port.to_be();
            let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            libc::bind(fd, (&raw const address).cast(), size)
        };
        libc::close(fd);
        bound == 0
    }
}

/// Run the C program `source` (built with cc and `flags`) with a port and
/// `args`, twice: alone, without supervise or the library — the kernel's
/// answers — and then as an app whose `listen` is `host:PORT` with
/// `inject`. The JSON line it printed each time.
fn alone_and_injected(
    source: &str,
    flags: &[&str],
    host: &str,
    args: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    let built = tempfile::tempdir().expect("temp dir");
    let program = built.path().join("program");
    std::fs::write(built.path().join("program.c"), source).expect("write");
    compile_c(&built.path().join("program.c"), &program, flags);
    let output = Command::new(&program)
        .arg(port_a_plain_bind_takes().to_string())
        .args(args)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("it runs");
    assert!(output.status.success(), "{output:?}");
    let kernel = printed_report(String::from_utf8_lossy(&output.stdout).trim());

    let port = free_port();
    let command: Vec<String> = [program.display().to_string(), port.to_string()]
        .into_iter()
        .chain(args.iter().map(|arg| arg.to_string()))
        .collect();
    let yaml = format!(
        "apps:\n  program:\n    command: {}\n    listen: [{{address: \"{host}:{port}\", inject: true}}]\n    ready: none\n    restart: never\n",
        serde_json::to_string(&command).expect("a list")
    );
    let mut s = Supervised::start(&yaml);
    let line = s.wait_for("the program's report", |e| {
        e["event"] == "output" && e["stream"] == "stdout" && e["app"] == "program"
    });
    let injected = printed_report(line["line"].as_str().unwrap_or_default());
    (kernel, injected)
}

#[test]
fn calls_the_kernel_refuses_are_refused_as_alone_and_accept4_works_non_blocking() {
    let (kernel, injected) = alone_and_injected(ODD_CALLS, &["-O1"], "0.0.0.0", &[]);
    assert_eq!(
        injected["answers"], kernel["answers"],
        "the library answered other than the kernel does (alone: {kernel})"
    );
    assert_eq!(
        injected["handed"],
        serde_json::json!([true, true]),
        "{injected}"
    );
}

/// A C program that binds its port on several addresses at once, keeping
/// each socket open, in the scenario its second argument names (each for
/// one `listen` address, see the functions): two specific addresses, IPv4
/// and IPv6 loopback, v4/v6 shares and third binds after them, v4-mapped
/// addresses; or `full N`: N + 1 distinct addresses held at once. For each
/// bind it prints `[answer, whether the socket is the one passed at fd 3]`.
const ADDRESSES: &str = r##"#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* The most sockets the program keeps bound at once. */
#define MAX_OPEN 64

static int port, open_fds[MAX_OPEN], open_count, printed;

/* Whether `fd` is the socket supervise passed at fd 3. */
static int handed(int fd) {
    struct stat mine, inherited;
    return fd != 3 && fstat(fd, &mine) == 0 && fstat(3, &inherited) == 0 && mine.st_ino == inherited.st_ino;
}

/* Bind a new TCP socket to `text` (an IPv4 or IPv6 literal), with
 * IPV6_V6ONLY set to `v6only` on an IPv6 one, and keep it open; print
 * what bind() answered and whether the socket is now supervise's. */
static void bind_one(const char *name, const char *text, int v6only) {
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    int six = inet_pton(AF_INET, text, &in.sin_addr) != 1;
    if (six && inet_pton(AF_INET6, text, &in6.sin6_addr) != 1) exit(3);
    int fd = socket(six ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || open_count == MAX_OPEN) exit(4);
    if (six && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only) != 0) exit(5);
    int r = six ? bind(fd, (struct sockaddr *)&in6, sizeof in6) : bind(fd, (struct sockaddr *)&in, sizeof in);
    printf("%s\"%s\": [\"%s\", %s]", printed++ ? ", " : "", name, r == 0 ? "ok" : strerrorname_np(errno),
           handed(fd) ? "true" : "false");
    open_fds[open_count++] = fd;
}

static void close_all(void) {
    while (open_count) close(open_fds[--open_count]);
}

/* Under a listen address of 0.0.0.0. */
static void ipv4_wildcard(void) {
    /* Two specific addresses: the kernel lets each have the port. */
    bind_one("127.0.0.1", "127.0.0.1", 0);
    bind_one("127.0.0.2 beside 127.0.0.1", "127.0.0.2", 0);
    close_all();
    /* IPv4 and IPv6 loopback, without IPV6_V6ONLY (::1 is IPv6's only). */
    bind_one("127.0.0.1, alone again", "127.0.0.1", 0);
    bind_one("::1 beside 127.0.0.1", "::1", 0);
    close_all();
    /* A v4/v6 share of the wildcards; a third bind meets the first. */
    bind_one("0.0.0.0", "0.0.0.0", 0);
    bind_one(":: v6only beside 0.0.0.0", "::", 1);
    bind_one("0.0.0.0, third", "0.0.0.0", 0);
    bind_one("127.0.0.2, third", "127.0.0.2", 0);
    bind_one("::1, third", "::1", 0);
    bind_one(":: dual-stack, third", "::", 0);
    close_all();
    /* A v4/v6 share of specific addresses, more beside them (one
     * v4-mapped), and what each of them keeps out. */
    bind_one("127.0.0.1, first", "127.0.0.1", 0);
    bind_one("::1, second", "::1", 0);
    bind_one("127.0.0.2 beside both", "127.0.0.2", 0);
    bind_one("::ffff:127.0.0.3 beside them", "::ffff:127.0.0.3", 0);
    bind_one("127.0.0.3 under the mapped one", "127.0.0.3", 0);
    bind_one("127.0.0.1 again", "127.0.0.1", 0);
    bind_one("::1 again", "::1", 0);
    bind_one("0.0.0.0 over them", "0.0.0.0", 0);
    bind_one(":: v6only over ::1", "::", 1);
    close_all();
}

/* Under [::] (dual-stack): IPv6 sockets only are handed it. */
static void ipv6_wildcard(void) {
    bind_one("::ffff:127.0.0.1", "::ffff:127.0.0.1", 0);
    bind_one("::ffff:127.0.0.2 beside it", "::ffff:127.0.0.2", 0);
    bind_one("::1 beside them", "::1", 0);
    bind_one("::ffff:127.0.0.1 again", "::ffff:127.0.0.1", 0);
    bind_one(":: v6only over ::1", "::", 1);
    close_all();
}

/* Under 127.0.0.1: a bind the library does not hand over still meets
 * what it handed. */
static void ipv4_specific(void) {
    bind_one("0.0.0.0", "0.0.0.0", 0);
    bind_one("127.0.0.2 under 0.0.0.0", "127.0.0.2", 0);
    close_all();
    bind_one("127.0.0.1", "127.0.0.1", 0);
    bind_one("127.0.0.2 beside 127.0.0.1", "127.0.0.2", 0);
    close_all();
}

/* Under 0.0.0.0: `most` + 1 distinct addresses held at once, then one
 * closed and another bound. */
static void full(int most) {
    char name[64], address[32];
    if (most < 1 || most + 1 >= MAX_OPEN) exit(6);
    for (int i = 1; i <= most + 1; i++) {
        snprintf(address, sizeof address, "127.0.0.%d", i);
        snprintf(name, sizeof name, "%d: %s", i, address);
        bind_one(name, address, 0);
    }
    close(open_fds[0]);
    open_fds[0] = open_fds[--open_count];
    snprintf(address, sizeof address, "127.0.0.%d", most + 2);
    snprintf(name, sizeof name, "after a close: %s", address);
    bind_one(name, address, 0);
    close_all();
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    port = atoi(argv[1]);
    printf("{\"answers\": {");
    if (strcmp(argv[2], "ipv4 wildcard") == 0) ipv4_wildcard();
    else if (strcmp(argv[2], "ipv6 wildcard") == 0) ipv6_wildcard();
    else if (strcmp(argv[2], "ipv4 specific") == 0) ipv4_specific();
    else if (strcmp(argv[2], "full") == 0 && argc == 4) full(atoi(argv[3]));
    else return 2;
    printf("}}\n");
    return 0;
}
"##;

/// What [`ADDRESSES`] printed: each bind's answer, and the binds answered
/// `ok` that were not handed supervise's socket.
fn answers_and_unhanded(report: &serde_json::Value) -> (BTreeMap<String, String>, Vec<String>) {
    let binds = report["answers"].as_object().expect("answers");
    let answers = binds
        .iter()
        .map(|(name, bind)| {
            (
                name.clone(),
                bind[0].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let unhanded = binds
        .iter()
        .filter(|(_, bind)| bind[0] == "ok" && bind[1] != true)
        .map(|(name, _)| name.clone())
        .collect();
    (answers, unhanded)
}

#[test]
fn binds_of_several_addresses_at_once_are_answered_as_the_kernel_answers_them_alone() {
    // Each scenario under its listen address: 0.0.0.0 and [::] hand their
    // one socket to every bind the kernel lets have the port; under
    // 127.0.0.1, 127.0.0.2 is the program's own socket (alone, or under
    // 0.0.0.0 the program already holds).
    for (host, scenario, own) in [
        ("0.0.0.0", "ipv4 wildcard", &[][..]),
        ("[::]", "ipv6 wildcard", &[][..]),
        (
            "127.0.0.1",
            "ipv4 specific",
            &["127.0.0.2 beside 127.0.0.1"][..],
        ),
    ] {
        let (kernel, injected) = alone_and_injected(ADDRESSES, &["-O1"], host, &[scenario]);
        let (alone, _) = answers_and_unhanded(&kernel);
        let (answers, unhanded) = answers_and_unhanded(&injected);
        assert_eq!(
            answers, alone,
            "{scenario} under {host}: the library answered other than the kernel does alone"
        );
        assert!(
            alone.values().any(|answer| answer == "EADDRINUSE"),
            "{scenario}: the kernel refuses some: {kernel}"
        );
        assert_eq!(
            unhanded, own,
            "{scenario} under {host}: every other bind that worked was handed supervise's socket: {injected}"
        );
    }
}

/// MAX_HANDED in the library: how many binds of one socket it weighs at once.
fn max_handed() -> usize {
    include_str!("../../crates/effects/inject/supervise_inject.c")
        .lines()
        .find_map(|line| line.strip_prefix("#define MAX_HANDED "))
        .and_then(|value| value.trim().parse().ok())
        .expect("the library defines MAX_HANDED")
}

#[test]
fn one_bind_more_than_the_library_can_weigh_gets_eaddrinuse_until_one_is_closed() {
    // Distinct addresses, which the kernel lets all have the port: the
    // library is handed the socket for MAX_HANDED of them and refuses one
    // more, as it says, rather than hand it unrecorded.
    let most = max_handed();
    let (kernel, injected) =
        alone_and_injected(ADDRESSES, &["-O1"], "0.0.0.0", &["full", &most.to_string()]);
    let (alone, _) = answers_and_unhanded(&kernel);
    assert!(
        alone.len() == most + 2 && alone.values().all(|answer| answer == "ok"),
        "{kernel}"
    );
    let (answers, unhanded) = answers_and_unhanded(&injected);
    let one_more = format!("{}: 127.0.0.{}", most + 1, most + 1);
    for (name, answer) in &answers {
        let expected = if *name == one_more {
            "EADDRINUSE"
        } else {
            "ok"
        };
        assert_eq!(answer, expected, "{name}: {injected}");
    }
    assert_eq!(answers.len(), most + 2, "{injected}");
    assert!(unhanded.is_empty(), "{injected}");
}

/// A C program whose two threads bind the port at the same moment (a
/// spinning barrier releases both), round after round: both 0.0.0.0, which
/// the kernel gives one of them; then 0.0.0.0 and :: with IPV6_V6ONLY,
/// which it gives both. It prints how the rounds ended, how many binds
/// worked and how many of those were handed the socket at fd 3.
const RACE: &str = r##"#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Rounds of each kind; the two binding threads; spins before a yield. */
#define ROUNDS 500
#define THREADS 2
#define SPINS 10000

static int port;
static int arrived, generation;
/* Per round and thread: bind's answer (0 or errno) and whether handed. */
static int answer[2][ROUNDS][THREADS], handed_to[2][ROUNDS][THREADS];

/* Both threads leave together: they spin, so neither waits on a wake-up. */
static void barrier(void) {
    int gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&arrived, 1, __ATOMIC_ACQ_REL) == THREADS) {
        __atomic_store_n(&arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&generation, gen + 1, __ATOMIC_RELEASE);
        return;
    }
    for (long spins = 0; __atomic_load_n(&generation, __ATOMIC_ACQUIRE) == gen; spins++)
        if (spins % SPINS == SPINS - 1) sched_yield();
}

static int handed(int fd) {
    struct stat mine, inherited;
    return fd != 3 && fstat(fd, &mine) == 0 && fstat(3, &inherited) == 0 && mine.st_ino == inherited.st_ino;
}

/* Kind 0: both bind 0.0.0.0 (the kernel lets one have it). Kind 1: one
 * 0.0.0.0, the other :: with IPV6_V6ONLY (the kernel lets both). */
static void *binder(void *arg) {
    int me = (int)(long)arg;
    for (int kind = 0; kind < 2; kind++) {
        for (int round = 0; round < ROUNDS; round++) {
            int six = kind == 1 && me == 1, one = 1;
            int fd = socket(six ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
            if (fd < 0 || (six && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0)) exit(3);
            struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(port)};
            struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
            barrier();
            int r = six ? bind(fd, (struct sockaddr *)&in6, sizeof in6) : bind(fd, (struct sockaddr *)&in, sizeof in);
            answer[kind][round][me] = r == 0 ? 0 : errno;
            handed_to[kind][round][me] = r == 0 && handed(fd);
            barrier();
            close(fd);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    port = atoi(argv[1]);
    pthread_t threads[THREADS];
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, binder, (void *)i) != 0) return 4;
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    const char *kinds[2] = {"both 0.0.0.0", "0.0.0.0 and :: v6only"};
    printf("{\"answers\": {");
    int handed_oks = 0, oks = 0;
    for (int kind = 0; kind < 2; kind++) {
        /* How many rounds ended each way: both ok, one ok, neither. */
        int ways[THREADS + 1] = {0};
        for (int round = 0; round < ROUNDS; round++) {
            int ok = 0;
            for (int t = 0; t < THREADS; t++) {
                if (answer[kind][round][t] == 0) ok++;
                else if (answer[kind][round][t] != EADDRINUSE) return 5;
                handed_oks += handed_to[kind][round][t];
            }
            oks += ok;
            ways[ok]++;
        }
        printf("%s\"%s\": {\"both ok\": %d, \"one ok, one EADDRINUSE\": %d, \"both EADDRINUSE\": %d}",
               kind ? ", " : "", kinds[kind], ways[2], ways[1], ways[0]);
    }
    printf("}, \"oks\": %d, \"handed\": %d}\n", oks, handed_oks);
    return 0;
}
"##;

#[test]
fn two_threads_binding_the_port_at_once_are_answered_as_the_kernel_answers_them() {
    let (kernel, injected) = alone_and_injected(RACE, &["-O1", "-pthread"], "0.0.0.0", &[]);
    assert_eq!(
        injected["answers"], kernel["answers"],
        "the library answered other than the kernel does alone (both handed one port, or a share refused): {injected}"
    );
    let rounds = &kernel["answers"]["both 0.0.0.0"];
    assert!(
        rounds["both ok"] == 0 && rounds["both EADDRINUSE"] == 0,
        "alone, the kernel gives the port to one of two: {kernel}"
    );
    assert_eq!(injected["handed"], injected["oks"], "{injected}");
}

#[test]
fn a_child_with_a_connection_at_the_inherited_fd_is_not_handed_it() {
    let port = free_port();
    // The server hands a connection to a child at fd 3, as it might to a
    // helper; the child inherits the environment (LD_PRELOAD and
    // SUPERVISE_INJECT_FDS=3) and binds the port: that connection, whose
    // local port it is, must not be taken for supervise's socket.
    let program = format!(
        r#"import os, socket, subprocess, sys
listener = socket.socket()
listener.bind(("127.0.0.1", {port}))
listener.listen(8)
client = socket.create_connection(("127.0.0.1", {port}))
connection, _ = listener.accept()
os.dup2(connection.fileno(), 3)
child = """
import errno, socket
try:
    socket.socket().bind(("127.0.0.1", {port}))
    print("the child's bind: ok", flush=True)
except OSError as e:
    print("the child's bind:", errno.errorcode[e.errno], flush=True)
"""
subprocess.run([sys.executable, "-c", child], pass_fds=(3,), check=True)
"#
    );
    let yaml = format!(
        "apps:\n  helper:\n    command: [python3, helper.py]\n    listen: [{{address: \"127.0.0.1:{port}\", inject: true}}]\n    ready: none\n    restart: never\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("helper.py"), program).expect("write");
    });
    let line = s.wait_for("the child's report", |e| {
        e["event"] == "output" && e["app"] == "helper"
    });
    assert_eq!(
        line["line"],
        "the child's bind: EADDRINUSE",
        "the kernel's answer, as to a program alone: {}",
        s.dump()
    );
}

#[test]
fn a_program_that_closed_fd_3_is_not_handed_the_socket_now_at_fd_3() {
    let port = free_port();
    // A daemon-like program closes what it inherited; its next socket gets
    // fd 3, which the library must not take for supervise's.
    let program = format!(
        r#"import errno, os, socket
os.close(3)
other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
listener = socket.socket()
try:
    listener.bind(("0.0.0.0", {port}))
    print("bound", listener.getsockname()[1], "other is fd", other.fileno(), flush=True)
except OSError as e:
    print("bind failed", errno.errorcode[e.errno], "other is fd", other.fileno(), flush=True)
import time
time.sleep(1000)
"#
    );
    let yaml = format!(
        "apps:\n  closer:\n    command: [python3, closer.py]\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("closer.py"), program).expect("write");
    });
    let line = s.wait_for("the program's report", |e| {
        e["event"] == "output" && e["app"] == "closer"
    });
    assert_eq!(
        line["line"], "bind failed EADDRINUSE other is fd 3",
        "{line}"
    );
}

#[test]
fn a_static_binary_refused_the_port_is_said_once_as_it_fails() {
    let port = free_port();
    // Binds supervise's very address and gives up when refused, as most
    // servers do: it never becomes ready.
    let yaml = format!(
        "apps:\n  same:\n    command: ./server\n    instances: 2\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n    ready: {{delay: 2s}}\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        static_binary(dir, port);
        // The same program, but it exits when its bind fails.
        let source = std::fs::read_to_string(dir.join("server.c")).expect("source");
        let exiting = source.replace(
            "printf(\"bind returned %d\\n\", r);",
            "printf(\"bind returned %d\\n\", r);\n    if (r != 0) return 1;",
        );
        std::fs::write(dir.join("server.c"), exiting).expect("write");
        compile_c(
            &dir.join("server.c"),
            &dir.join("server"),
            &["-static", "-O1"],
        );
    });
    let warning = s.wait_event("not_injected", "same");
    assert_eq!(warning["before_ready"], true, "{warning}");
    assert!(
        warning["message"]
            .as_str()
            .is_some_and(|m| m.contains("EADDRINUSE"))
    );
    s.wait_count("exited", "same", 4);
    assert_eq!(
        s.count("not_injected", "same"),
        1,
        "said once per version of the app"
    );
}
