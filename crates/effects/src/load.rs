//! The load of an autoscaled app, as the core's `autoscale` judges it: the
//! connections waiting in the accept queues of its TCP listening sockets,
//! and the CPU its ready instances used since the last sample.
//!
//! The queue is the kernel's own count: `getsockopt(TCP_INFO)` on a
//! listening socket gives the current accept queue in `tcpi_unacked` (and
//! the backlog in `tcpi_sacked`), one syscall per socket. The CPU of an
//! instance is its cgroup's `usage_usec` (every process of it), else that
//! of its process tree from /proc (the leader and its descendants, found
//! through `/proc/PID/task/TID/children`, at most [`MAX_TREE`] of them; a
//! pre-forking server's CPU is in its children); its share of one CPU is
//! the CPU time between two samples over the time between them.
//!
//! A sample is taken on the loop thread four times a second per autoscaled
//! app. With cgroups it allocates nothing once warm: one path buffer and one
//! read buffer are reused, and a reading is kept per instance (added when an
//! instance is first seen, dropped when it is no longer ready); the walk of a
//! process tree without them reads a few small files per process.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read;
use std::os::fd::RawFd;
use std::path::Path;
use std::time::Instant;

use model::spec::{AppSpec, ListenAddress, SocketKey};
use model::usage::LoadSample;

/// The most processes of one instance's tree whose CPU is summed without a
/// cgroup (and listed to be): a fork bomb must not make a sample read for
/// ever. A larger tree reads low.
pub(crate) const MAX_TREE: usize = 256;

/// An instance's CPU time when it was last sampled.
#[derive(Debug, Clone, Copy)]
struct Reading {
    cpu_usec: u64,
    at: Instant,
}

/// What is kept from one sample to the next.
#[derive(Debug, Default)]
pub(crate) struct LoadSampler {
    /// App → leader pid → its last reading.
    readings: HashMap<String, HashMap<i32, Reading>>,
    path: String,
    buffer: Vec<u8>,
}

impl LoadSampler {
    /// Sample `app`, whose ready instances are led by `leaders`: `socket`
    /// finds a listening socket's fd, `cgroup` an instance's cgroup.
    pub(crate) fn sample<'a>(
        &mut self,
        app: &AppSpec,
        leaders: &[i32],
        socket: impl Fn(&SocketKey) -> Option<RawFd>,
        cgroup: impl Fn(i32) -> Option<&'a Path>,
        now: Instant,
    ) -> LoadSample {
        let queue = accept_queue(app, socket);
        let readings = match self.readings.get_mut(&app.name) {
            Some(readings) => readings,
            None => self.readings.entry(app.name.clone()).or_default(),
        };
        // Instances no longer ready (or gone) are forgotten.
        readings.retain(|pid, _| leaders.contains(pid));
        let mut total_percent = 0.0;
        let mut measured = 0;
        for &pid in leaders {
            let cpu = match cgroup(pid) {
                Some(cgroup) => cgroup_cpu_usec(cgroup, &mut self.path, &mut self.buffer),
                None => tree_cpu_usec(pid, &mut self.path, &mut self.buffer),
            };
            let Some(cpu_usec) = cpu else {
                continue;
            };
            let reading = Reading { cpu_usec, at: now };
            if let Some(last) = readings.insert(pid, reading) {
                let wall = now.saturating_duration_since(last.at).as_micros() as f64;
                if wall > 0.0 {
                    let used = cpu_usec.saturating_sub(last.cpu_usec) as f64;
                    total_percent += used / wall * 100.0;
                    measured += 1;
                }
            }
        }
        LoadSample {
            queue,
            cpu_percent: (measured > 0).then_some(total_percent.round() as u32),
            measured,
        }
    }

    /// Forget the readings of apps no longer autoscaled.
    pub(crate) fn retain_apps(&mut self, autoscaled: impl Fn(&str) -> bool) {
        self.readings.retain(|app, _| autoscaled(app));
    }
}

/// The connections waiting in the accept queues of `app`'s TCP sockets
/// (every slot's, with `reuseport`); `None` when none could be read.
fn accept_queue(app: &AppSpec, socket: impl Fn(&SocketKey) -> Option<RawFd>) -> Option<u32> {
    let mut total: Option<u32> = None;
    for listen in &app.process.listen {
        if !matches!(listen.address, ListenAddress::Tcp(_)) {
            continue;
        }
        let sockets = if listen.reuseport { app.instances } else { 1 };
        for slot in 0..sockets {
            let key = SocketKey {
                address: listen.address.clone(),
                slot: listen.reuseport.then_some(slot),
            };
            if let Some(waiting) = socket(&key).and_then(waiting_connections) {
                total = Some(total.unwrap_or(0).saturating_add(waiting));
            }
        }
    }
    total
}

/// `TCP_LISTEN` of the kernel's `enum tcp_state` (include/net/tcp_states.h),
/// which libc does not export.
const TCP_LISTEN: u8 = 10;

/// The accept queue of the listening socket `fd` (`TCP_INFO`'s
/// `tcpi_unacked` on a socket in the LISTEN state).
fn waiting_connections(fd: RawFd) -> Option<u32> {
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut length = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a writable tcp_info of `length` bytes; the kernel
    // writes at most that many and says how many in `length`.
    let done = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut length,
        )
    };
    if done != 0 {
        return None;
    }
    // SAFETY: getsockopt succeeded: the kernel filled it (zeroed beyond).
    let info = unsafe { info.assume_init() };
    (info.tcpi_state == TCP_LISTEN).then_some(info.tcpi_unacked)
}

/// `usage_usec` of `cgroup`'s `cpu.stat`.
fn cgroup_cpu_usec(cgroup: &Path, path: &mut String, buffer: &mut Vec<u8>) -> Option<u64> {
    path.clear();
    let _ = write!(path, "{}/cpu.stat", cgroup.display());
    let text = read(path, buffer)?;
    text.lines().find_map(|line| {
        line.strip_prefix("usage_usec ")
            .and_then(|v| v.trim().parse().ok())
    })
}

/// The CPU time of process `leader` and its descendants (at most
/// [`MAX_TREE`] processes), in µs; `None` when the leader cannot be read.
/// The leader's counts include its children that ended and were waited
/// for; one that ended since the last sample takes its CPU with it (that
/// interval reads low, never negative).
fn tree_cpu_usec(leader: i32, path: &mut String, buffer: &mut Vec<u8>) -> Option<u64> {
    let ticks_per_second = crate::procfs::ticks_per_second().max(1);
    let mut ticks = process_ticks(leader, true, path, buffer)?;
    let mut pending = crate::procfs::children(leader);
    let mut seen = 1;
    while let Some(pid) = pending.pop() {
        if seen >= MAX_TREE {
            break;
        }
        seen += 1;
        if let Some(own) = process_ticks(pid, false, path, buffer) {
            ticks += own;
            // Never more waiting than could still be summed.
            let room = MAX_TREE.saturating_sub(seen + pending.len());
            pending.extend(crate::procfs::children(pid).into_iter().take(room));
        }
    }
    Some(ticks.saturating_mul(1_000_000) / ticks_per_second)
}

/// utime + stime of process `pid` (with `waited`, also cutime + cstime:
/// its children that ended), in clock ticks.
fn process_ticks(pid: i32, waited: bool, path: &mut String, buffer: &mut Vec<u8>) -> Option<u64> {
    path.clear();
    let _ = write!(path, "/proc/{pid}/stat");
    let text = read(path, buffer)?;
    // The command (field 2) may hold spaces and parentheses: fields are
    // counted after its last `)`.
    let fields = text.get(text.rfind(')')? + 2..)?;
    let mut fields = fields.split_ascii_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let (cutime, cstime): (u64, u64) = if waited {
        (fields.next()?.parse().ok()?, fields.next()?.parse().ok()?)
    } else {
        (0, 0)
    };
    Some(utime + stime + cutime + cstime)
}

/// The text of the file at `path`, read into `buffer`.
fn read<'b>(path: &str, buffer: &'b mut Vec<u8>) -> Option<&'b str> {
    buffer.clear();
    std::fs::File::open(path)
        .and_then(|mut file| file.read_to_end(buffer))
        .ok()?;
    std::str::from_utf8(buffer).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::spec::ListenSpec;
    use std::net::TcpListener;
    use std::os::fd::AsRawFd;

    fn app_on(address: std::net::SocketAddr) -> AppSpec {
        let mut app = AppSpec::with_defaults("web", &["x"], 1);
        app.process.listen = vec![ListenSpec {
            name: "web".to_string(),
            address: ListenAddress::Tcp(address),
            reuseport: false,
            inject: false,
        }];
        app
    }

    /// The CPU time of this process (every thread).
    fn process_cpu() -> std::time::Duration {
        let mut time = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `time` is a valid timespec to write to.
        let done = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut time) };
        assert_eq!(done, 0, "clock_gettime");
        std::time::Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
    }

    #[test]
    fn the_queue_is_the_connections_no_one_accepted_yet() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let app = app_on(address);
        let fd = listener.as_raw_fd();
        let mut sampler = LoadSampler::default();
        let now = Instant::now();
        let empty = sampler.sample(&app, &[], |_| Some(fd), |_| None, now);
        assert_eq!(empty.queue, Some(0));
        let waiting: Vec<_> = (0..3)
            .map(|_| std::net::TcpStream::connect(address).expect("connect"))
            .collect();
        // The handshake completes in the kernel at connect: the three are in
        // the accept queue once `connect` returned.
        let sample = sampler.sample(&app, &[], |_| Some(fd), |_| None, now);
        assert_eq!(sample.queue, Some(3));
        let _ = listener.accept().expect("accept");
        let sample = sampler.sample(&app, &[], |_| Some(fd), |_| None, now);
        assert_eq!(sample.queue, Some(2));
        drop(waiting);
        let unread = sampler.sample(&app, &[], |_| None, |_| None, now);
        assert_eq!(unread.queue, None, "no socket read: no queue");
    }

    /// Whether `condition` holds within 10 s (looked at every 10 ms).
    fn eventually(mut condition: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while Instant::now() < deadline {
            if condition() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        condition()
    }

    /// A pre-forking server's CPU is in its children: without a cgroup the
    /// tree of the leader is summed, not the leader alone.
    #[test]
    fn the_cpu_of_a_leader_includes_its_busy_children() {
        let mut parent = std::process::Command::new("sh")
            .args(["-c", "yes > /dev/null & wait"])
            .spawn()
            .expect("sh runs");
        let leader = parent.id() as i32;
        let (mut path, mut buffer) = (String::new(), Vec::new());
        let child = || crate::procfs::children(leader).first().copied();
        assert!(eventually(|| child().is_some()), "the busy child started");
        let busy = child().unwrap_or(0);
        let own = |path: &mut String, buffer: &mut Vec<u8>| {
            process_ticks(busy, false, path, buffer).unwrap_or(0)
        };
        let tree_before = tree_cpu_usec(leader, &mut path, &mut buffer).unwrap_or(0);
        let child_before = own(&mut path, &mut buffer);
        // The event meant: the child has used a fifth of a second more.
        let ticks_per_second = crate::procfs::ticks_per_second().max(1);
        assert!(
            eventually(|| {
                own(&mut String::new(), &mut Vec::new()) >= child_before + ticks_per_second / 5
            }),
            "the child spins"
        );
        let child_used =
            (own(&mut path, &mut buffer) - child_before) * 1_000_000 / ticks_per_second;
        let tree_used = tree_cpu_usec(leader, &mut path, &mut buffer).unwrap_or(0) - tree_before;
        // SAFETY: kill(2) of the child this test started, by its pid.
        unsafe { libc::kill(busy, libc::SIGKILL) };
        let _ = parent.kill();
        let _ = parent.wait();
        // Read a moment apart: a tick either way.
        let tick = 1_000_000 / ticks_per_second;
        assert!(
            tree_used + 2 * tick >= child_used,
            "the tree used {tree_used} µs, its child {child_used} µs"
        );
    }

    #[test]
    fn a_busy_instance_is_measured_from_its_second_sample() {
        let app = AppSpec::with_defaults("busy", &["x"], 1);
        let mut sampler = LoadSampler::default();
        let me = std::process::id() as i32;
        let cpu_before = process_cpu();
        let first_at = Instant::now();
        let first = sampler.sample(&app, &[me], |_| None, |_| None, first_at);
        assert_eq!((first.cpu_percent, first.measured), (None, 0));
        let mut spin = 0u64;
        while first_at.elapsed() < std::time::Duration::from_millis(400) {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        let second_at = Instant::now();
        let second = sampler.sample(&app, &[me], |_| None, |_| None, second_at);
        let used = process_cpu() - cpu_before;
        let expected = used.as_secs_f64() / (second_at - first_at).as_secs_f64() * 100.0;
        assert_eq!(second.measured, 1);
        // /proc counts in clock ticks (10 ms): 2 readings over 400 ms.
        let measured = f64::from(second.cpu_percent.unwrap_or(0));
        assert!(
            (measured - expected).abs() <= 15.0,
            "{second:?}, the process used {expected:.0}%"
        );
        let gone = sampler.sample(&app, &[], |_| None, |_| None, Instant::now());
        assert_eq!(gone.measured, 0);
        assert!(
            sampler.readings["busy"].is_empty(),
            "forgotten once not ready"
        );
    }
}
