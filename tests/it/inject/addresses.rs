//! Several addresses bound at once, and one bind more than the library can
//! weigh: answered as the kernel answers the program alone.

use super::*;

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
    include_str!("../../../crates/effects/inject/supervise_inject.c")
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
