//! Programs that bind in odd ways — their port again (twice, in a forked
//! child, both families), calls the kernel refuses, two threads at once —
//! get the answers the kernel gives them alone.

use super::*;

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
