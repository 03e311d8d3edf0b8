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

mod addresses;
mod binds;
mod servers;
mod sockets;
mod static_binary;

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

/// The JSON line [`BINDS_AGAIN`] or [`ODD_CALLS`] printed.
fn printed_report(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
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
        .arg(free_port().to_string())
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
