//! How a ready instance is watched: `health` (a liveness check), `max_memory`,
//! `watchdog` and `watchdog_signal`. An instance that fails one of them is
//! replaced; none of them is known to a process except `watchdog`, which is
//! in its environment.

use std::path::Path;
use std::time::Duration;

use model::Signal;

use super::ready::{ProbePurpose, ProbeTarget, parse_probe_target};
use super::{
    AppContext, command_templates, key, parse_non_negative_duration, parse_positive_duration,
    within,
};
use crate::diagnostic::{PathSeg, Reporter};
use crate::host::find_program;
use crate::raw;
use model::spec::{HealthCheck, HealthSpec, ListenSpec, ProbeKind, Template, defaults};

/// What a size looks like, for every diagnostic about one.
const SIZE_HELP: &str = "write a number of bytes or a number with a unit, e.g. 300MB, 512K, 1.5GiB (K, M, G are 1024-based like KiB, MiB, GiB; KB, MB, GB are 1000-based)";

impl AppContext<'_> {
    /// `health`, its check and timing merged key by key over `defaults`.
    /// `None` without a check, or after an error (the error count tells).
    pub(super) fn resolve_health(
        &self,
        instances: Option<u32>,
        listen: &[ListenSpec],
        env: &[(String, Template)],
        cwd: Option<&Path>,
        reporter: &mut Reporter,
    ) -> Option<HealthSpec> {
        let timing =
            |field: &str,
             get: fn(&raw::Health) -> Option<&raw::DurationText>,
             parse: fn(&raw::DurationText, &[PathSeg], &mut Reporter) -> Option<Duration>,
             default: Duration,
             reporter: &mut Reporter| {
                match self.pick_nested("health", field, |f| f.health.as_ref(), get) {
                    Some((text, path)) => parse(&text, &path, reporter).map(|d| (d, Some(path))),
                    None => Some((default, None)),
                }
            };
        let every = timing(
            "every",
            |h| h.every.as_ref(),
            |text, path, reporter| {
                let every = parse_positive_duration(text, path, reporter)?;
                let bounds = (defaults::MIN_HEALTH_EVERY, Duration::MAX);
                within(every, bounds, "health.every", path, reporter)
            },
            defaults::HEALTH_EVERY,
            reporter,
        );
        let timeout = timing(
            "timeout",
            |h| h.timeout.as_ref(),
            parse_positive_duration,
            defaults::HEALTH_TIMEOUT,
            reporter,
        );
        let grace = timing(
            "grace",
            |h| h.grace.as_ref(),
            parse_non_negative_duration,
            defaults::HEALTH_GRACE,
            reporter,
        );
        let failures = match self.pick_nested(
            "health",
            "failures",
            |f| f.health.as_ref(),
            |h| h.failures.as_ref(),
        ) {
            Some((0, path)) => {
                reporter
                    .error(&path, "health.failures must be at least 1")
                    .help("it counts consecutive failed checks: 1 replaces an instance after its first failed check");
                None
            }
            Some((failures, _)) => Some(failures),
            None => Some(defaults::HEALTH_FAILURES),
        };
        let check = self.resolve_health_check(instances, listen, env, cwd, reporter);
        let ((every, every_path), (timeout, timeout_path)) = (every?, timeout?);
        if timeout > every
            && !self.broken("health")
            && let Some(path) = timeout_path.or(every_path)
        {
            let message = format!(
                "a health check may take {} but should run every {}",
                humantime::format_duration(timeout),
                humantime::format_duration(every)
            );
            reporter.warning(&path, message).help(
                "checks never overlap: a slow check delays the next one; make `timeout` at most `every`",
            );
        }
        Some(HealthSpec {
            check: check?,
            every,
            timeout,
            failures: failures?,
            grace: grace?.0,
        })
    }

    /// The one check of `health`: the app's own `http`, `tcp` or `exec`, else
    /// the one in `defaults`.
    fn resolve_health_check(
        &self,
        instances: Option<u32>,
        listen: &[ListenSpec],
        env: &[(String, Template)],
        cwd: Option<&Path>,
        reporter: &mut Reporter,
    ) -> Option<HealthCheck> {
        let has_check = |h: &raw::Health| h.http.is_some() || h.tcp.is_some() || h.exec.is_some();
        let own = self.fields.health.as_ref();
        let (block, block_path) = match (own, self.defaults.health.as_ref()) {
            (Some(health), _) if has_check(health) => (health, self.app_path(&["health"])),
            (_, Some(health)) if has_check(health) => {
                (health, vec![key("defaults"), key("health")])
            }
            _ => {
                if own.is_some() && !self.broken("health") {
                    reporter
                        .error(&self.app_path(&["health"]), "`health` needs a check: `http`, `tcp` or `exec`")
                        .help("e.g. `health: {http: \"http://127.0.0.1:{instance+8000}/health\"}`; `every`, `timeout`, `failures` and `grace` only say how often and how strictly");
                }
                return None;
            }
        };
        let field_path = |field: &str| {
            let mut path = block_path.clone();
            path.push(key(field));
            path
        };
        let written: Vec<&str> = [
            ("http", block.http.is_some()),
            ("tcp", block.tcp.is_some()),
            ("exec", block.exec.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect();
        if let [first, second, ..] = written.as_slice() {
            reporter
                .key_error(
                    &field_path(second),
                    format!("`health` has both `{first}` and `{second}`; a check is one of them"),
                )
                .help(
                    "keep one: an HTTP GET (`http`), a TCP connect (`tcp`) or a command (`exec`)",
                );
            return None;
        }
        let probe = |kind: ProbeKind, text: &str, reporter: &mut Reporter| {
            let target = ProbeTarget {
                kind,
                text,
                path: &field_path(kind.field()),
                purpose: ProbePurpose::Health,
            };
            parse_probe_target(target, instances, listen, reporter).map(HealthCheck::Probe)
        };
        if let Some(url) = &block.http {
            probe(ProbeKind::Http, url, reporter)
        } else if let Some(address) = &block.tcp {
            probe(ProbeKind::Tcp, address, reporter)
        } else {
            let command = block.exec.as_ref()?;
            self.resolve_health_exec(command, &field_path("exec"), env, cwd, reporter)
        }
    }

    /// `exec`: a string run with `/bin/sh -c`, or the exact argv.
    fn resolve_health_exec(
        &self,
        command: &raw::CommandLine,
        path: &[PathSeg],
        env: &[(String, Template)],
        cwd: Option<&Path>,
        reporter: &mut Reporter,
    ) -> Option<HealthCheck> {
        let words: Vec<&str> = match command {
            raw::CommandLine::Line(line) if !line.trim().is_empty() => {
                vec!["/bin/sh", "-c", line]
            }
            raw::CommandLine::Argv(argv) if argv.first().is_some_and(|a| !a.is_empty()) => {
                argv.iter().map(String::as_str).collect()
            }
            _ => {
                reporter
                    .error(path, "the health `exec` command is empty")
                    .help("give a command that exits 0 when the instance is healthy, e.g. `exec: curl -fsS http://127.0.0.1:{instance+8000}/health`");
                return None;
            }
        };
        let argv = command_templates(&words, "the health `exec` command", path, reporter)?;
        // A list names its program: look it up as the check will (from the
        // worker's cwd, along its PATH), so a typo does not fail every check.
        if let (raw::CommandLine::Argv(_), false, Some(cwd)) =
            (command, argv[0].uses_instance(), cwd)
            && let Err(problem) =
                find_program(words[0], cwd, self.program_search_path(env).as_deref())
        {
            reporter
                .warning(path, format!("the health check cannot run: {}", problem.message))
                .help("it runs in the app's cwd with the app's environment; use an absolute path to be sure");
        }
        Some(HealthCheck::Exec(argv))
    }

    /// `max_memory` in bytes (`None` without a limit, or after an error).
    pub(super) fn resolve_max_memory(&self, reporter: &mut Reporter) -> Option<u64> {
        let (size, path) = self.pick("max_memory", |f| f.max_memory.as_ref())?;
        resolve_size(
            &size,
            "max_memory",
            "leave `max_memory` out for no limit",
            &path,
            reporter,
        )
    }

    /// `watchdog`: how often a ready instance must send `WATCHDOG=1`.
    pub(super) fn resolve_watchdog(&self, reporter: &mut Reporter) -> Option<Duration> {
        let (text, path) = self.pick("watchdog", |f| f.watchdog.as_ref())?;
        let watchdog = parse_positive_duration(&text, &path, reporter)?;
        let bounds = (defaults::MIN_WATCHDOG, defaults::MAX_WATCHDOG);
        within(watchdog, bounds, "watchdog", &path, reporter)
    }

    /// `watchdog_signal`, with a warning where it is set for an app that has
    /// no `watchdog`.
    pub(super) fn resolve_watchdog_signal(&self, reporter: &mut Reporter) -> Option<Signal> {
        let signal = self.resolve_signal(
            "watchdog_signal",
            |f| f.watchdog_signal.as_ref(),
            Signal::SIGABRT,
            reporter,
        )?;
        let has_watchdog = self.pick("watchdog", |f| f.watchdog.as_ref()).is_some();
        if self.fields.watchdog_signal.is_some() && !has_watchdog && !self.broken("watchdog") {
            reporter
                .warning(
                    &self.app_path(&["watchdog_signal"]),
                    "`watchdog_signal` does nothing without `watchdog`",
                )
                .help("set `watchdog` (e.g. `watchdog: 10s`) for the instances to be watched, or drop `watchdog_signal`");
        }
        Some(signal)
    }
}

/// A size in bytes, greater than zero (`None` after an error, reported at
/// `path`; `zero_help` says what to write instead of 0).
pub(super) fn resolve_size(
    size: &raw::Size,
    field: &str,
    zero_help: &str,
    path: &[PathSeg],
    reporter: &mut Reporter,
) -> Option<u64> {
    let (bytes, text) = match size {
        raw::Size::Bytes(bytes) => (Ok(*bytes), bytes.to_string()),
        raw::Size::Text(text) => (parse_size(text), text.clone()),
    };
    let message = match bytes {
        Ok(0) => {
            reporter
                .error(path, format!("{field} must be greater than zero"))
                .help(zero_help);
            return None;
        }
        Ok(bytes) => return Some(bytes),
        Err(SizeError::NotASize) => format!("`{text}` is not a size"),
        Err(SizeError::Negative) => format!("a size cannot be negative, found `{text}`"),
        Err(SizeError::UnknownUnit(unit)) => format!("unknown unit `{unit}` in size `{text}`"),
        Err(SizeError::TooLarge) => format!("`{text}` is more bytes than supervise can count"),
    };
    reporter.error(path, message).help(SIZE_HELP);
    None
}

/// `text` in bytes as `max_memory` and `log.max_size` read it, or `None`
/// when `check` would refuse it as a size (zero is a size here: the fields
/// refuse it themselves).
pub fn size_in_bytes(text: &str) -> Option<u64> {
    parse_size(text).ok()
}

/// Why a size could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SizeError {
    /// Not a number with an optional unit.
    NotASize,
    /// A minus sign.
    Negative,
    /// A number with a unit that is not one of ours.
    UnknownUnit(String),
    /// More bytes than 64 bits hold.
    TooLarge,
}

/// The number of bytes in `300MB`, `300 MB`, `512k`, `1.5GiB` or `1048576`:
/// `B`; `K`, `M`, `G` and `KiB`, `MiB`, `GiB` are 1024-based (as pm2 and
/// systemd's `MemoryMax=` read them); `KB`, `MB`, `GB` are 1000-based. Units
/// are case-insensitive; a fraction is rounded down to a whole byte.
fn parse_size(text: &str) -> Result<u64, SizeError> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(SizeError::Negative);
    }
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let unit = unit.trim_start();
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let is_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !is_digits(whole) || (number.contains('.') && !is_digits(fraction)) {
        return Err(SizeError::NotASize);
    }
    let multiplier: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(SizeError::UnknownUnit(unit.to_string())),
    };
    let whole: u128 = whole.parse().map_err(|_| SizeError::TooLarge)?;
    // Beyond 18 digits a fraction cannot add a byte to a size below 2^64
    // (the largest multiplier is 2^30), and 10^18 fits in a u128 product.
    let fraction = &fraction[..fraction.len().min(18)];
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| SizeError::NotASize)?
    };
    let bytes = whole
        .checked_mul(multiplier)
        .and_then(|b| b.checked_add(fraction * multiplier / scale))
        .ok_or(SizeError::TooLarge)?;
    u64::try_from(bytes).map_err(|_| SizeError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Host, check_text};
    use model::spec::{Desired, Probe};

    fn resolve(text: &str) -> Desired {
        let dir = tempfile::tempdir().unwrap();
        let checked = check_text(
            text,
            &dir.path().join("ecosystem.yaml"),
            &Host::pinned(2, 1000, "/usr/bin:/bin"),
        );
        let problems = format!("{:?}", checked.diagnostics);
        checked.desired.expect(&problems)
    }

    #[test]
    fn nothing_written_means_no_health_no_limit_no_watchdog() {
        let desired = resolve("apps:\n  web:\n    command: sleep 1\n");
        let web = &desired.apps[0];
        assert_eq!(web.health, None);
        assert_eq!(web.max_memory, None);
        assert_eq!(web.process.watchdog, None);
        assert_eq!(web.watchdog_signal, Signal::SIGABRT);
        assert_eq!(desired.memory_check, defaults::MEMORY_CHECK);
    }

    #[test]
    fn every_key_resolves() {
        let desired = resolve(
            "memory_check: 2s\napps:\n  web:\n    command: sleep 1\n    instances: 2\n    \
             health: {http: \"http://127.0.0.1:{instance+8000}/up\", every: 5s, timeout: 1s, failures: 1, grace: 20s}\n    \
             max_memory: 300 MB\n    watchdog: 10s\n    watchdog_signal: quit\n",
        );
        assert_eq!(desired.memory_check, Duration::from_secs(2));
        let web = &desired.apps[0];
        let health = web.health.as_ref().unwrap();
        let HealthCheck::Probe(probe) = &health.check else {
            panic!("{health:?}")
        };
        assert_eq!(probe.kind, ProbeKind::Http);
        assert_eq!(
            probe.target(1),
            Some(&Probe::Http {
                address: "127.0.0.1:8001".parse().unwrap(),
                path: "/up".into()
            })
        );
        assert_eq!(
            (health.every, health.timeout, health.failures, health.grace),
            (
                Duration::from_secs(5),
                Duration::from_secs(1),
                1,
                Duration::from_secs(20)
            )
        );
        assert_eq!(web.max_memory, Some(300_000_000));
        assert_eq!(web.process.watchdog, Some(Duration::from_secs(10)));
        assert_eq!(web.watchdog_signal, Signal::SIGQUIT);
    }

    #[test]
    fn exec_checks_are_a_shell_line_or_an_argv() {
        let desired = resolve(
            "apps:\n  line:\n    command: sleep 1\n    health: {exec: \"curl -f localhost:{instance+80}\"}\n  \
             argv:\n    command: sleep 1\n    health: {exec: [sh, -c, \"exit 0\"]}\n",
        );
        let argv = |app: usize| match &desired.apps[app].health.as_ref().unwrap().check {
            HealthCheck::Exec(argv) => argv.iter().map(|a| a.expand(1)).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(argv(0), ["/bin/sh", "-c", "curl -f localhost:81"]);
        assert_eq!(argv(1), ["sh", "-c", "exit 0"]);
    }

    #[test]
    fn health_in_defaults_merges_key_by_key_and_an_own_check_replaces_it() {
        let desired = resolve(
            "defaults:\n  health: {exec: \"exit 0\", every: 30s, failures: 5}\n  max_memory: 1G\n\
             apps:\n  inherits:\n    command: sleep 1\n  \
             own-timing:\n    command: sleep 1\n    health: {every: 5s}\n  \
             own-check:\n    command: sleep 1\n    health: {tcp: \"127.0.0.1:9000\"}\n    max_memory: 200M\n",
        );
        let health = |name: &str| desired.app(name).unwrap().health.clone().unwrap();
        let inherited = health("inherits");
        assert!(matches!(inherited.check, HealthCheck::Exec(_)));
        assert_eq!(
            (inherited.every, inherited.failures, inherited.timeout),
            (Duration::from_secs(30), 5, defaults::HEALTH_TIMEOUT)
        );
        let own_timing = health("own-timing");
        assert_eq!(own_timing.check, inherited.check);
        assert_eq!(
            (own_timing.every, own_timing.failures),
            (Duration::from_secs(5), 5)
        );
        let own_check = health("own-check");
        assert!(
            matches!(own_check.check, HealthCheck::Probe(_)),
            "not two checks"
        );
        assert_eq!(
            (own_check.every, own_check.failures),
            (Duration::from_secs(30), 5)
        );
        assert_eq!(desired.app("inherits").unwrap().max_memory, Some(1 << 30));
        assert_eq!(
            desired.app("own-check").unwrap().max_memory,
            Some(200 << 20)
        );
    }

    #[test]
    fn defaults_timing_without_a_check_gives_no_app_a_health_check() {
        let desired =
            resolve("defaults:\n  health: {every: 30s}\napps:\n  web:\n    command: sleep 1\n");
        assert_eq!(desired.apps[0].health, None);
    }

    #[test]
    fn sizes_in_every_unit() {
        let cases = [
            ("1048576", 1_048_576),
            ("300B", 300),
            ("300b", 300),
            ("4K", 4 << 10),
            ("4k", 4 << 10),
            ("4KiB", 4 << 10),
            ("4kib", 4 << 10),
            ("300M", 300 << 20),
            ("300MiB", 300 << 20),
            ("2G", 2 << 30),
            ("2GiB", 2 << 30),
            ("2gib", 2 << 30),
            ("4KB", 4_000),
            ("300MB", 300_000_000),
            ("300mb", 300_000_000),
            ("2GB", 2_000_000_000),
        ];
        for (text, bytes) in cases {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn sizes_with_spaces_and_fractions() {
        assert_eq!(parse_size("300 MB"), Ok(300_000_000));
        assert_eq!(parse_size("  300MB  "), Ok(300_000_000));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("0.5K"), Ok(512));
        assert_eq!(parse_size("1.9B"), Ok(1), "a fraction of a byte is dropped");
        assert_eq!(
            parse_size("0"),
            Ok(0),
            "zero is read; validation refuses it"
        );
    }

    #[test]
    fn sizes_that_are_not() {
        assert_eq!(parse_size("lots"), Err(SizeError::NotASize));
        assert_eq!(parse_size(""), Err(SizeError::NotASize));
        assert_eq!(parse_size("MB"), Err(SizeError::NotASize));
        assert_eq!(parse_size(".5G"), Err(SizeError::NotASize));
        assert_eq!(parse_size("1.G"), Err(SizeError::NotASize));
        assert_eq!(parse_size("1.2.3M"), Err(SizeError::NotASize));
        assert_eq!(parse_size("-1MB"), Err(SizeError::Negative));
        assert_eq!(
            parse_size("300 XB"),
            Err(SizeError::UnknownUnit("XB".into()))
        );
        assert_eq!(parse_size("2TB"), Err(SizeError::UnknownUnit("TB".into())));
        assert_eq!(
            parse_size("300 M B"),
            Err(SizeError::UnknownUnit("M B".into()))
        );
    }

    #[test]
    fn sizes_that_overflow() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_size("18446744073709551616"), Err(SizeError::TooLarge));
        assert_eq!(parse_size("17179869183G"), Ok(17_179_869_183 << 30));
        assert_eq!(parse_size("17179869184G"), Err(SizeError::TooLarge));
        assert_eq!(
            parse_size("99999999999999999999999999999999999999999G"),
            Err(SizeError::TooLarge)
        );
        assert_eq!(
            parse_size("1.0000000000000000000000000001K"),
            Ok(1024),
            "a long fraction is cut, not an overflow"
        );
    }
}
