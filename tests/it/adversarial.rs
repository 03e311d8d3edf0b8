//! Hostile and broken input: each gets one clear error, quickly, never a panic.

use std::path::Path;
use std::time::Duration;

use config::{Host, check_bytes, diagnostic::Severity};

/// "Well under a second" of the checking thread's own CPU time, in a debug
/// build. CPU time, not the wall clock: a loaded machine stretches the one,
/// never the other, and a check that searched without bound would still be
/// caught.
const BOUND: Duration = Duration::from_millis(900);

/// The CPU time this thread has used so far.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    let done = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn host() -> Host {
    Host::pinned(4, 1000, "/usr/bin:/bin")
}

/// Check `bytes`; assert it is refused in time with an error mentioning `needle`.
fn refused(bytes: &[u8], needle: &str) -> config::Checked {
    let start = thread_cpu_time();
    let checked = check_bytes(bytes, Path::new("/tmp/ecosystem.yaml"), &host());
    let took = thread_cpu_time() - start;
    assert!(took < BOUND, "took {took:?} of CPU");
    assert!(!checked.is_valid());
    let errors: Vec<&str> = checked
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.message.as_str())
        .collect();
    assert!(
        errors.iter().any(|m| m.contains(needle)),
        "expected an error containing {needle:?}, got {errors:?}"
    );
    checked
}

#[test]
fn empty_file() {
    refused(b"", "empty");
    refused(b"\n\n# only a comment\n", "empty");
}

#[test]
fn twenty_megabytes() {
    let mut big = b"apps:\n  web:\n    command: sleep 1\n".to_vec();
    big.extend(std::iter::repeat_n(b'#', 20 * 1024 * 1024));
    let checked = refused(&big, "bytes");
    assert_eq!(checked.diagnostics.len(), 1);
}

#[test]
fn deep_nesting() {
    let flow = format!("apps: {}{}", "[".repeat(100_000), "]".repeat(100_000));
    let checked = refused(flow.as_bytes(), "");
    assert_eq!(checked.diagnostics.len(), 1, "{:?}", checked.diagnostics);

    let mut block = String::from("apps:\n");
    for depth in 1..2_000 {
        block.push_str(&" ".repeat(depth));
        block.push_str("k:\n");
    }
    refused(block.as_bytes(), "");
}

#[test]
fn billion_laughs() {
    let mut bomb = String::from("x-a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in names.windows(2) {
        let alias = format!("*{}", pair[0]);
        let items = vec![alias; 9].join(", ");
        bomb.push_str(&format!("x-{}: &{} [{items}]\n", pair[1], pair[1]));
    }
    bomb.push_str("apps:\n  web:\n    command: [*i]\n");
    let checked = refused(bomb.as_bytes(), "");
    assert_eq!(checked.diagnostics.len(), 1, "{:?}", checked.diagnostics);
}

#[test]
fn merge_key_bomb() {
    let mut bomb = String::from("x-0: &m0 {k0: 1}\n");
    for level in 1..40 {
        bomb.push_str(&format!(
            "x-{level}: &m{level} {{<<: [*m{prev}, *m{prev}], k{level}: 1}}\n",
            prev = level - 1
        ));
    }
    bomb.push_str("apps: {}\n");
    let start = thread_cpu_time();
    let checked = check_bytes(bomb.as_bytes(), Path::new("/tmp/ecosystem.yaml"), &host());
    let took = thread_cpu_time() - start;
    assert!(took < BOUND, "took {took:?} of CPU");
    // Merging the same block twice deduplicates keys: whether refused by the
    // budget or accepted, it must be quick and must not panic.
    let _ = checked;
}

#[test]
fn non_utf8_bytes() {
    let checked = refused(b"apps:\n  web:\n    command: sl\xffeep\n", "UTF-8");
    let location = checked.diagnostics[0].location.expect("placed");
    assert_eq!((location.line, location.column), (3, 16));
}

#[test]
fn a_list_at_the_top() {
    refused(b"- apps: {}\n", "top level");
    refused(b"just a string\n", "top level");
}

#[test]
fn tabs_for_indentation() {
    let checked = refused(b"apps:\n\tweb:\n\t\tcommand: sleep 1\n", "tab");
    assert_eq!(checked.diagnostics.len(), 1);
    assert_eq!(checked.diagnostics[0].location.map(|l| l.line), Some(2));
}

#[test]
fn several_documents() {
    refused(b"apps: {}\n---\napps: {}\n", "");
}

#[test]
fn huge_numbers_and_odd_scalars() {
    refused(
        b"apps:\n  web:\n    command: sleep 1\n    instances: 99999999999999999999999\n",
        "instances",
    );
    refused(
        b"apps:\n  web:\n    command: sleep 1\n    backoff: {factor: .nan}\n",
        "nan",
    );
    refused(
        b"apps:\n  web:\n    command: sleep 1\n    backoff: {factor: .inf}\n",
        "",
    );
    refused(b"apps:\n  ? [a, b]\n  : {command: sleep 1}\n", "text");
}

#[test]
fn every_app_waiting_for_every_other() {
    // 120 apps, 14,280 edges and astronomically many cycles: a few
    // described, the rest counted. (200 apps took 0.7 s of the 0.9 s bound in
    // a debug build, nearly all of it reading the YAML.)
    let apps = 120;
    let mut text = String::from("apps:\n");
    for app in 0..apps {
        let others: Vec<String> = (0..apps)
            .filter(|other| *other != app)
            .map(|other| format!("a{other}"))
            .collect();
        text.push_str(&format!(
            "  a{app}:\n    command: sleep 1\n    depends_on: [{}]\n",
            others.join(", ")
        ));
    }
    let checked = refused(text.as_bytes(), "dependency cycle");
    assert!(
        checked.diagnostics.len() <= 11,
        "{} diagnostics",
        checked.diagnostics.len()
    );
    assert!(
        checked
            .diagnostics
            .iter()
            .any(|d| d.message.contains("more dependency cycles are not shown"))
    );
}

#[test]
fn a_long_dependency_chain_closed_into_a_ring() {
    let apps = 2_000;
    let mut text = String::from("apps:\n");
    for app in 0..apps {
        text.push_str(&format!(
            "  a{app}:\n    command: sleep 1\n    depends_on: [a{}]\n",
            (app + 1) % apps
        ));
    }
    let checked = refused(text.as_bytes(), "dependency cycle");
    assert_eq!(checked.diagnostics.len(), 1);
    assert!(
        checked.diagnostics[0].message.len() < 400,
        "the path is cut: {}",
        checked.diagnostics[0].message
    );
}

#[test]
fn cron_expressions_that_search_far() {
    // No minute at all, and no date at all: refused at once, not searched for.
    refused(
        b"apps:\n  job:\n    command: sleep 1\n    schedule: \",,, * * * *\"\n",
        "no time of day",
    );
    refused(
        b"apps:\n  job:\n    command: sleep 1\n    schedule: \"0 0 31 2,4,6,9,11 *\"\n",
        "no date",
    );
}
