//! The program's own sockets and descriptors: its other sockets work as
//! without the library, a handed socket keeps its close-on-exec and shares
//! its non-blocking mode, the app's own `LD_PRELOAD` is kept, and a socket is
//! not handed at an fd the program already uses.

use super::*;

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
