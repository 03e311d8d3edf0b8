#!/usr/bin/env python3
"""supervise with many instances: 5,000 `sleep` processes, one or more builds side by side.

For N instances of `sleep 100000` (default 5,000) under each supervise binary
given, prints one table with a column per binary and the ratio of each binary
to the first (after/before):

  - start to all running: from just before spawning
    `supervise --log-format json -f FILE` to the timestamp of its `all_ready`
    event (the supervisor's own clock, which is the same wall clock), and
    to its last `spawned` event;
  - the supervisor's RSS (VmRSS) once all are running, and per instance: the
    RSS above that of the same file with `instances: 0`, divided by N (and,
    for information, its RSS again after the status calls and after the idle
    period);
  - its open fds (/proc/PID/fd) with N instances minus with 0, divided by N,
    and from that the largest instance count its RLIMIT_NOFILE allows
    ((limit - fds at 0) / fds per instance; supervise raises its soft limit to
    the hard one, so the limit is the hard RLIMIT_NOFILE);
  - `supervise status --json -f FILE`: wall time of the client command,
    median and max of 5 calls;
  - the supervisor's CPU over --idle seconds (utime+stime from
    /proc/PID/stat), as % of one core;
  - SIGTERM to the supervisor's exit, and how many of the processes it spawned
    are still alive after it exited (a zombie counts as gone: its parent,
    supervise, is gone).

The instances are `ready: none`: with the default `{delay: 1s}`, `all_ready`
would come a second after the last spawn and measure the delay, not the
supervisor. With `ready: none`, `all_ready` marks the moment every instance is
started (a newer build may count a `ready: none` instance ready only once its
exec succeeded: `all_ready` still comes once every instance is ready, so the
script waits on `all_ready`, never on a count of `ready` events). The
instances are spread evenly over as few apps as the per-app limit (4,096)
allows: 5,000 are two apps of 2,500.

Each run has its own temp dir (the ecosystem file, and a private 0700
XDG_RUNTIME_DIR, so each run has its own lock); the 0-instance run comes
first, then the N-instance run. With several binaries and --rounds, the runs
alternate between binaries (the order reversed every other round) and the
table shows medians. It does not build anything: give it binaries
(default target/release/supervise).

Bounded (--timeout for `all_ready`, 120 s by default; 60 s for the shutdown),
local (the only sockets are supervise's own unix control sockets), and it
kills only processes it started, by pid: on a failure or Ctrl-C the
supervisor is stopped (SIGSTOP, so it starts nothing more), its children
counted, and SIGKILLed, then every worker it spawned (pids from its
`spawned` events and its children in /proc, checked against their start time
so a reused pid is never hit), and the temp dir is removed.

    python3 bench/many.py [--instances 5000] [--idle 10] [--rounds 1] [--timeout 120]
        [--binary before=/work/before/supervise --binary after=target/release/supervise]
"""
import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_INSTANCES_PER_APP = 4096  # src/spec.rs, defaults::MAX_INSTANCES
STATUS_CALLS = 5
SHUTDOWN_LIMIT = 60.0
TICKS = os.sysconf("SC_CLK_TCK")


def log(message):
    print(message, file=sys.stderr, flush=True)


class Failed(Exception):
    pass


# ---------------------------------------------------------------- /proc


def parse_ts(text):
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (AttributeError, ValueError):
        return None


def stat_fields(pid):
    """Fields of /proc/PID/stat after the command name (state is [0])."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def start_time(pid):
    try:
        return int(stat_fields(pid)[19])
    except (OSError, IndexError, ValueError):
        return None


def cpu_ticks(pid):
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def nofile_limit(pid):
    """The soft 'Max open files' of a running process."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


def children(pid):
    result = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    result.update(int(p) for p in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return result


def alive(pid, started):
    """Still the same process, and not a zombie."""
    try:
        fields = stat_fields(pid)
    except OSError:
        return False
    return int(fields[19]) == started and fields[0] not in ("Z", "X")


# ---------------------------------------------------------------- one supervisor


def ecosystem(n, apps):
    counts = [n // apps + (1 if i < n % apps else 0) for i in range(apps)]
    text = "apps:\n"
    for i, count in enumerate(counts):
        text += f"  many{i}:\n    command: sleep 100000\n    instances: {count}\n    ready: none\n"
    return text


class Supervisor:
    """One `supervise --log-format json -f FILE` in its own temp dir, its events
    read by a thread (the supervisor drops log lines when its reader lags, so
    the reader does nothing else)."""

    def __init__(self, binary, n, apps):
        self.binary = binary
        self.n = n
        self.work = tempfile.mkdtemp(prefix="supervise-many-")
        self.runtime = os.path.join(self.work, "run")
        os.mkdir(self.runtime, 0o700)
        self.file = os.path.join(self.work, "ecosystem.yaml")
        with open(self.file, "w") as f:
            f.write(ecosystem(n, apps))
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.runtime)
        for name in ("NOTIFY_SOCKET", "RUST_LOG", "LISTEN_FDS", "LISTEN_PID"):
            self.env.pop(name, None)
        self.lock = threading.Lock()
        self.spawned = {}      # pid -> event timestamp
        self.ready = set()
        self.start_failed = {}  # errno -> count
        self.other = []         # lines that are not JSON (drop notices, panics)
        self.applied = threading.Event()
        self.all_ready = threading.Event()
        self.all_ready_at = None
        self.known = {}         # pid -> start time, of everything it started
        self.process = None

    def start(self):
        with open(os.path.join(self.work, "stderr"), "wb") as stderr:
            self.started = time.time()
            self.process = subprocess.Popen(
                [self.binary, "--log-format", "json", "-f", "ecosystem.yaml"],
                cwd=self.work, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=stderr,
            )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    @property
    def pid(self):
        return self.process.pid

    def _read(self):
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                with self.lock:
                    self.other.append(line.decode(errors="replace").rstrip())
                continue
            kind = event.get("event")
            with self.lock:
                if kind == "spawned":
                    self.spawned[event["pid"]] = event.get("timestamp")
                elif kind == "ready":
                    self.ready.add(event.get("pid"))
                elif kind == "start_failed":
                    errno = event.get("errno")
                    self.start_failed[errno] = self.start_failed.get(errno, 0) + 1
                elif kind == "applied":
                    self.applied.set()
                elif kind == "all_ready" and self.all_ready_at is None:
                    self.all_ready_at = parse_ts(event.get("timestamp")) or time.time()
                    self.all_ready.set()

    def wait(self, flag, limit, what):
        deadline = time.time() + limit
        while not flag.wait(0.2):
            if self.process.poll() is not None:
                raise Failed(f"the supervisor exited with {self.process.returncode} before {what}"
                             f"{self._stderr_tail()}")
            if time.time() > deadline:
                raise Failed(f"timed out after {limit:g} s waiting for {what}: {self.progress()}")

    def progress(self):
        with self.lock:
            text = f"{len(self.spawned)} spawned, {len(self.ready)} ready of {self.n}"
            if self.start_failed:
                errors = ", ".join(f"{os.strerror(e) if isinstance(e, int) else e} ({e}) × {c}"
                                   for e, c in self.start_failed.items())
                text += f"; start_failed: {errors}"
            drops = [line for line in self.other if "dropped" in line]
        try:
            fds = fd_count(self.pid)
            live = len(children(self.pid))
            text += f"; supervisor fds {fds}, live children {live}"
            limit = nofile_limit(self.pid)
            if limit:
                text += f", RLIMIT_NOFILE {limit}"
        except OSError:
            pass
        if drops:
            text += f"; {drops[-1]}"
        return text + self._stderr_tail()

    def _stderr_tail(self):
        try:
            with open(os.path.join(self.work, "stderr"), errors="replace") as f:
                tail = f.read()[-600:].strip()
        except OSError:
            return ""
        return f"\n  its stderr: {tail}" if tail else ""

    def record(self):
        """Note the start time of everything the supervisor started (its
        `spawned` pids and its children) while it is alive, so that later
        checks and kills never confuse a reused pid with one of ours."""
        if self.process is None or self.process.poll() is not None:
            return
        with self.lock:
            pids = set(self.spawned)
        pids |= children(self.pid)
        for pid in pids - set(self.known):
            try:
                fields = stat_fields(pid)
            except OSError:
                continue
            if int(fields[1]) == self.pid:  # still its child: ours for sure
                self.known[pid] = int(fields[19])

    def status(self):
        begun = time.perf_counter()
        result = subprocess.run([self.binary, "status", "--json", "-f", "ecosystem.yaml"],
                                cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=30)
        took = time.perf_counter() - begun
        if result.returncode != 0:
            raise Failed(f"status --json exited {result.returncode}: {result.stderr.decode(errors='replace')[-300:]}")
        return took, json.loads(result.stdout)

    def terminate(self):
        """SIGTERM; the time to its exit (s) and the pids it spawned still alive."""
        self.record()
        begun = time.perf_counter()
        os.kill(self.pid, signal.SIGTERM)
        try:
            code = self.process.wait(timeout=SHUTDOWN_LIMIT)
        except subprocess.TimeoutExpired:
            raise Failed(f"still running {SHUTDOWN_LIMIT:.0f} s after SIGTERM")
        took = time.perf_counter() - begun
        if code != 0:
            raise Failed(f"exited with {code} after SIGTERM{self._stderr_tail()}")
        workers = set(self.spawned)
        left = [pid for pid in workers if pid in self.known and alive(pid, self.known[pid])]
        unknown = workers - set(self.known)
        return took, left, unknown

    def cleanup(self):
        """Whatever happened: the supervisor SIGKILLed by pid, then every
        process it started, then the temp dir removed. Returns how many
        processes had to be killed here."""
        killed = 0
        if self.process is not None:
            if self.process.poll() is None:
                # Frozen, it starts nothing between the census and the kill.
                os.kill(self.pid, signal.SIGSTOP)
                deadline = time.time() + 1
                while time.time() < deadline and stat_fields(self.pid)[0] != "T":
                    time.sleep(0.01)
                self.record()
                os.kill(self.pid, signal.SIGKILL)
                killed += 1
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    log(f"  supervisor {self.pid} did not die after SIGKILL")
            # The undertaker kills the worker groups once the supervisor is
            # gone; give it a moment, then kill by pid whatever is left.
            deadline = time.time() + 3
            while time.time() < deadline and any(alive(p, s) for p, s in self.known.items()):
                time.sleep(0.05)
            for pid, started in self.known.items():
                if alive(pid, started):
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                    except OSError:
                        pass
            deadline = time.time() + 5
            while time.time() < deadline and any(alive(p, s) for p, s in self.known.items()):
                time.sleep(0.05)
            left = [p for p, s in self.known.items() if alive(p, s)]
            if left:
                log(f"  WARNING: {len(left)} processes still alive after SIGKILL: {left[:10]}")
            if self.process.stdout:
                self.process.stdout.close()
        shutil.rmtree(self.work, ignore_errors=True)
        return killed


# ---------------------------------------------------------------- one round


def baseline(binary, apps):
    """The same apps with 0 instances: the supervisor's own fds and RSS."""
    sup = Supervisor(binary, 0, apps)
    try:
        sup.start()
        sup.wait(sup.applied, 30, "the `applied` event (0 instances)")
        sup.status()  # the control socket answers: start-up is over
        time.sleep(0.3)
        result = {"fds0": fd_count(sup.pid), "rss0_kb": rss_kb(sup.pid)}
        sup.terminate()
        return result
    finally:
        sup.cleanup()


def measure(binary, n, apps, idle, timeout):
    result = {}
    try:
        result.update(baseline(binary, apps))
    except Failed as error:
        result["error"] = f"0-instance run: {error}"
        return result
    sup = Supervisor(binary, n, apps)
    try:
        sup.start()
        sup.wait(sup.all_ready, timeout, f"`all_ready` ({n} instances)")
        result["start_s"] = sup.all_ready_at - sup.started
        with sup.lock:
            stamps = sorted(filter(None, (parse_ts(t) for t in sup.spawned.values())))
        if stamps:
            result["last_spawned_s"] = stamps[-1] - sup.started
            result["half_spawned_s"] = stamps[len(stamps) // 2] - sup.started
        result["rss_kb"] = rss_kb(sup.pid)
        result["fds"] = fd_count(sup.pid)
        result["nofile"] = nofile_limit(sup.pid)
        sup.record()
        with sup.lock:
            result["spawned"] = len(sup.spawned)
            result["dropped_lines"] = [line for line in sup.other if "dropped" in line]

        calls = []
        for _ in range(STATUS_CALLS):
            took, status = sup.status()
            calls.append(took)
        running = sum(app.get("running", 0) for app in status.get("apps", []))
        if running != n:
            result["note"] = f"status --json says {running} running of {n}"
        result["rss_after_status_kb"] = rss_kb(sup.pid)
        result["status_median_s"] = statistics.median(calls)
        result["status_max_s"] = max(calls)

        before = cpu_ticks(sup.pid)
        time.sleep(idle)
        ticks = cpu_ticks(sup.pid) - before
        result["idle_ticks"] = ticks
        result["idle_cpu"] = ticks / TICKS / idle * 100
        result["fds_after_idle"] = fd_count(sup.pid)
        result["rss_after_idle_kb"] = rss_kb(sup.pid)

        took, left, unknown = sup.terminate()
        result["sigterm_s"] = took
        result["left"] = len(left)
        if unknown:
            result["note"] = (result.get("note", "") +
                              f" {len(unknown)} spawned pids had exited before they could be recorded").strip()
    except Failed as error:
        result["error"] = str(error)
    finally:
        result["killed_in_cleanup"] = sup.cleanup()
    return result


# ---------------------------------------------------------------- report


def derived(r, n):
    out = dict(r)
    if "fds" in r and "fds0" in r and n:
        fds = max(r["fds"], r.get("fds_after_idle", 0))
        out["fds_n"] = fds
        out["fds_per"] = (fds - r["fds0"]) / n
        if out["fds_per"] > 0 and r.get("nofile"):
            out["fd_bound"] = (r["nofile"] - r["fds0"]) / out["fds_per"]
    if "rss_kb" in r and "rss0_kb" in r and n:
        out["rss_per_kb"] = (r["rss_kb"] - r["rss0_kb"]) / n
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=5000)
    parser.add_argument("--binary", action="append", default=[],
                        help="[LABEL=]PATH, repeatable; default target/release/supervise")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for all_ready")
    args = parser.parse_args()
    if args.instances < 1:
        parser.error("--instances must be at least 1")

    binaries = []
    for i, spec in enumerate(args.binary or [os.path.join(ROOT, "target", "release", "supervise")]):
        label, sep, path = spec.partition("=")
        if not sep or "/" in label:
            label, path = (os.path.basename(os.path.dirname(os.path.abspath(spec))) or f"b{i}"), spec
        path = os.path.abspath(path)
        if not os.access(path, os.X_OK):
            parser.error(f"{path}: not an executable (build it first: cargo build --release)")
        if label in dict(binaries):
            label = f"{label}{i}"
        binaries.append((label, path))

    sys.stdout.reconfigure(line_buffering=True)  # keep the order with the progress on stderr
    # SIGTERM to the benchmark runs the cleanups as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    n = args.instances
    apps = max(1, -(-n // MAX_INSTANCES_PER_APP))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"machine: nproc {len(os.sched_getaffinity(0))}, kernel {os.uname().release}, "
          f"load average {load}")
    print(f"limits: RLIMIT_NOFILE soft {soft} hard {hard}, pid_max {pid_max}, uid {os.getuid()}")
    for label, path in binaries:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        print(f"{label}: {path}: {version.stdout.strip() or version.stderr.strip()}")
    sizes = ", ".join(str(n // apps + (1 if i < n % apps else 0)) for i in range(apps))
    print(f"{n} instances of `sleep 100000` (ready: none) in {apps} app(s) of {sizes}; "
          f"{args.rounds} round(s), idle {args.idle:g} s, all_ready timeout {args.timeout:g} s")
    print(flush=True)

    results = {label: [] for label, _ in binaries}
    for round_ in range(args.rounds):
        order = binaries if round_ % 2 == 0 else list(reversed(binaries))
        for label, path in order:
            log(f"round {round_ + 1}/{args.rounds}: {label} ({n} instances)")
            r = derived(measure(path, n, apps, args.idle, args.timeout), n)
            results[label].append(r)
            if "error" in r:
                log(f"  FAILED: {r['error']}")
            else:
                log(f"  all running in {r['start_s'] * 1000:.0f} ms (spawned: half at "
                    f"{r.get('half_spawned_s', 0) * 1000:.0f} ms, the last at {r.get('last_spawned_s', 0) * 1000:.0f} ms), "
                    f"{r['fds_n']} fds, "
                    f"SIGTERM to exit {r['sigterm_s'] * 1000:.0f} ms, {r['left']} left")
            time.sleep(1)  # let the exits settle before the next run

    rows = [
        ("start to all running (ms)", "start_s", 1000, "{:.0f}"),
        ("start to the last `spawned` event (ms)", "last_spawned_s", 1000, "{:.0f}"),
        ("supervisor RSS, 0 instances (MiB)", "rss0_kb", 1 / 1024, "{:.1f}"),
        (f"supervisor RSS, {n} running (MiB)", "rss_kb", 1 / 1024, "{:.1f}"),
        (f"supervisor RSS after {STATUS_CALLS} status calls (MiB)", "rss_after_status_kb", 1 / 1024, "{:.1f}"),
        (f"supervisor RSS after {args.idle:g} s idle (MiB)", "rss_after_idle_kb", 1 / 1024, "{:.1f}"),
        ("RSS per instance, above 0 instances (KB)", "rss_per_kb", 1, "{:.2f}"),
        ("supervisor fds, 0 instances", "fds0", 1, "{:.0f}"),
        (f"supervisor fds, {n} running", "fds_n", 1, "{:.0f}"),
        ("fds per instance", "fds_per", 1, "{:.3f}"),
        ("instances the fd limit allows", "fd_bound", 1, "{:.0f}"),
        (f"status --json, median of {STATUS_CALLS} (ms)", "status_median_s", 1000, "{:.1f}"),
        (f"status --json, max of {STATUS_CALLS} (ms)", "status_max_s", 1000, "{:.1f}"),
        (f"idle CPU over {args.idle:g} s (% of a core)", "idle_cpu", 1, "{:.3f}"),
        ("SIGTERM to exit (ms)", "sigterm_s", 1000, "{:.0f}"),
        (f"workers alive after exit (of {n})", "left", 1, "{:.0f}"),
    ]
    spread_keys = {"start_s", "last_spawned_s", "status_median_s", "sigterm_s", "idle_cpu"}
    labels = [label for label, _ in binaries]
    first = labels[0]
    header = ["measure"] + labels + [f"{label}/{first}" for label in labels[1:]]
    what = "median of rounds" if args.rounds > 1 else "one round"
    print(f"\n{n} instances of sleep, {what}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))

    def column(label, key):
        return [r[key] for r in results[label] if r.get(key) is not None]

    for name, key, scale, fmt in rows:
        cells, medians = [name], {}
        for label in labels:
            values = column(label, key)
            if not values:
                cells.append("-")
                continue
            medians[label] = statistics.median(values)
            cell = fmt.format(medians[label] * scale)
            if len(values) > 1 and key in spread_keys:
                cell += f" [{fmt.format(min(values) * scale)}–{fmt.format(max(values) * scale)}]"
            if key == "idle_cpu":
                cell += f" ({'/'.join(str(t) for t in column(label, 'idle_ticks'))} ticks)"
            cells.append(cell)
        for label in labels[1:]:
            if key != "left" and medians.get(label) is not None and medians.get(first):
                cells.append(f"{medians[label] / medians[first]:.2f}×")
            else:
                cells.append("-")
        print("| " + " | ".join(cells) + " |")

    print()
    for label in labels:
        bound = column(label, "fd_bound")
        per = column(label, "fds_per")
        if bound:
            limit = column(label, "nofile")[0]
            fds0 = statistics.median(column(label, "fds0"))
            print(f"{label}: at {statistics.median(per):.3f} fds per instance, the RLIMIT_NOFILE of {limit} "
                  f"(supervise raises its soft limit to the hard one) allows ({limit} - {fds0:.0f}) / "
                  f"{statistics.median(per):.3f} = {statistics.median(bound):.0f} instances: that is what "
                  f"bounds the instance count (apps are unlimited, 4,096 instances each; "
                  f"pid_max is {pid_max}).")
        for i, r in enumerate(results[label]):
            if r.get("error"):
                print(f"{label} round {i + 1} FAILED: {r['error']}")
            if r.get("note"):
                print(f"{label} round {i + 1}: {r['note']}")
            if r.get("dropped_lines"):
                print(f"{label} round {i + 1}: the supervisor dropped log lines: {r['dropped_lines'][-1]}")
            if r.get("killed_in_cleanup"):
                print(f"{label} round {i + 1}: the cleanup had to SIGKILL {r['killed_in_cleanup']} processes")
    failed = any(r.get("error") for rs in results.values() for r in rs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
