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
  - a raw loop of `os.posix_spawn` of the same N `sleep 100000` in this
    script, after the supervisor rounds (killed by pid and reaped at once),
    and each binary's start to all running divided by it;
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
import signal
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no bench/__pycache__ left in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import TICKS, Failed, children, cpu_ticks, log, parse_ts, rss_kb  # noqa: E402

MAX_INSTANCES_PER_APP = 4096  # src/spec.rs, defaults::MAX_INSTANCES
STATUS_CALLS = 5
# effects::fd_room: fds kept free for all but starts, and what a start
# needs beyond what it keeps.
FD_RESERVE = 256
FDS_TRANSIENT = 4


def raw_spawn_loop(n):
    """Seconds a plain loop of os.posix_spawn takes to start n `sleep 100000`
    (the same program supervise starts), measured here beside supervise; the
    processes are SIGKILLed by pid and reaped before it returns."""
    sleep = "/bin/sleep" if os.path.exists("/bin/sleep") else "/usr/bin/sleep"
    pids = []
    try:
        started = time.monotonic()
        for _ in range(n):
            pids.append(os.posix_spawn(sleep, ["sleep", "100000"], os.environ))
        return time.monotonic() - started
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def nofile_limit(pid):
    """The soft 'Max open files' of a running process."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


# ---------------------------------------------------------------- one supervisor


def ecosystem(n, apps):
    counts = [n // apps + (1 if i < n % apps else 0) for i in range(apps)]
    text = "apps:\n"
    for i, count in enumerate(counts):
        text += f"  many{i}:\n    command: sleep 100000\n    instances: {count}\n    ready: none\n"
    return text


class Supervisor(harness.Supervisor):
    """harness.Supervisor, that also counts `ready` and `start_failed` events
    (for the message of a wait that times out) and calls `status --json`."""

    def __init__(self, binary, n, apps):
        super().__init__(binary, ecosystem(n, apps), "supervise-many-")
        self.n = n
        self.ready = set()
        self.start_failed = {}  # errno -> count

    def on_event(self, event):
        kind = event.get("event")
        if kind == "ready":
            self.ready.add(event.get("pid"))
        elif kind == "start_failed":
            errno = event.get("errno")
            self.start_failed[errno] = self.start_failed.get(errno, 0) + 1

    def progress(self):
        with self.cond:
            text = f": {len(self.spawned)} spawned, {len(self.ready)} ready of {self.n}"
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
        return text + self.stderr_tail()

    def status(self):
        begun = time.perf_counter()
        result = subprocess.run([self.binary, "status", "--json", "-f", "ecosystem.yaml"],
                                cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=30)
        took = time.perf_counter() - begun
        if result.returncode != 0:
            raise Failed(f"status --json exited {result.returncode}: {result.stderr.decode(errors='replace')[-300:]}")
        return took, json.loads(result.stdout)


# ---------------------------------------------------------------- one round


def baseline(binary, apps):
    """The same apps with 0 instances: the supervisor's own fds and RSS."""
    sup = Supervisor(binary, 0, apps)
    try:
        sup.start()
        sup.next(lambda e: e.get("event") == "applied", 30, "the `applied` event (0 instances)")
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
    with harness.running(sup, result, errors=(Failed,)):
        ready = sup.next(lambda e: e.get("event") == "all_ready", timeout, f"`all_ready` ({n} instances)")
        result["start_s"] = (parse_ts(ready.get("timestamp")) or time.time()) - sup.started
        with sup.cond:
            stamps = sorted(filter(None, (parse_ts(e.get("timestamp")) for e in sup.spawned.values())))
        if stamps:
            result["last_spawned_s"] = stamps[-1] - sup.started
            result["half_spawned_s"] = stamps[len(stamps) // 2] - sup.started
        result["rss_kb"] = rss_kb(sup.pid)
        result["fds"] = fd_count(sup.pid)
        result["nofile"] = nofile_limit(sup.pid)
        sup.record()
        with sup.cond:
            result["spawned"] = len(sup.spawned)
        result["dropped_lines"] = sup.dropped()

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

        took, left = sup.terminate()
        unknown = set(sup.spawned) - set(sup.known)
        result["sigterm_s"] = took
        result["left"] = len(left)
        if unknown:
            result["note"] = (result.get("note", "") +
                              f" {len(unknown)} spawned pids had exited before they could be recorded").strip()
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
    harness.add_binary_option(parser)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for all_ready")
    parser.add_argument("--apps", type=int, default=None,
                        help="spread the instances over this many apps (default: as few as the "
                             f"per-app limit of {MAX_INSTANCES_PER_APP} allows); 3000 apps of 1 "
                             "against 1 app of 3000 shows a per-app cost")
    args = parser.parse_args()
    if args.instances < 1:
        parser.error("--instances must be at least 1")
    if args.apps is not None and not 1 <= args.apps <= args.instances:
        parser.error("--apps must be between 1 and --instances")
    if args.apps is not None and -(-args.instances // args.apps) > MAX_INSTANCES_PER_APP:
        parser.error(f"--apps too few: an app has at most {MAX_INSTANCES_PER_APP} instances")

    binaries = harness.begin(parser, args.binary, check_stale=False)

    n = args.instances
    apps = args.apps or max(1, -(-n // MAX_INSTANCES_PER_APP))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    sizes = ", ".join(str(n // apps + (1 if i < n % apps else 0)) for i in range(min(apps, 4)))
    if apps > 4:
        sizes += ", …"
    harness.print_header(
        binaries,
        f"{n} instances of `sleep 100000` (ready: none) in {apps} app(s) of {sizes}; "
        f"{args.rounds} round(s), idle {args.idle:g} s, all_ready timeout {args.timeout:g} s",
        limits=f"limits: RLIMIT_NOFILE soft {soft} hard {hard}, pid_max {pid_max}, uid {os.getuid()}",
        modified=False)

    def run(round_, label, path):
        log(f"round {round_ + 1}/{args.rounds}: {label} ({n} instances)")
        r = derived(measure(path, n, apps, args.idle, args.timeout), n)
        if "error" in r:
            log(f"  FAILED: {r['error']}")
        else:
            log(f"  all running in {r['start_s'] * 1000:.0f} ms (spawned: half at "
                f"{r.get('half_spawned_s', 0) * 1000:.0f} ms, the last at {r.get('last_spawned_s', 0) * 1000:.0f} ms), "
                f"{r['fds_n']} fds, "
                f"SIGTERM to exit {r['sigterm_s'] * 1000:.0f} ms, {r['left']} left")
        return r

    results = harness.run_rounds(binaries, args.rounds, run, settle=1)
    raw = []
    for round_ in range(args.rounds):
        raw.append(raw_spawn_loop(n))
        log(f"round {round_ + 1}/{args.rounds}: a raw posix_spawn loop started {n} in {raw[-1] * 1000:.0f} ms")

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
    what = "median of rounds" if args.rounds > 1 else "one round"
    print(f"\n{n} instances of sleep, {what}\n")

    def annotate(key, column):
        if key == "idle_cpu":
            return f" ({'/'.join(str(t) for t in column('idle_ticks'))} ticks)"
        return ""

    harness.print_table(rows, results, labels, no_ratio={"left"}, spread_keys=spread_keys, annotate=annotate)
    raw_ms = statistics.median(raw) * 1000
    print(f"\nA raw loop of posix_spawn of {n} `sleep 100000` (this script, same run): {raw_ms:.0f} ms")
    for label in labels:
        starts = [r["start_s"] for r in results[label] if r.get("start_s") is not None]
        if starts:
            ratio = statistics.median(starts) * 1000 / raw_ms
            print(f"{label}: start to all running / raw loop = {ratio:.2f}×")

    def column(label, key):
        return [r[key] for r in results[label] if r.get(key) is not None]

    def fd_bound(label):
        bound = column(label, "fd_bound")
        per = column(label, "fds_per")
        if bound:
            limit = column(label, "nofile")[0]
            fds0 = statistics.median(column(label, "fds0"))
            print(f"{label}: at {statistics.median(per):.3f} fds per instance, the RLIMIT_NOFILE of {limit} "
                  f"(supervise raises its soft limit to the hard one) allows ({limit} - {fds0:.0f}) / "
                  f"{statistics.median(per):.3f} = {statistics.median(bound):.0f} instances, less the "
                  f"{FD_RESERVE} fds a newer build keeps for commands and the {FDS_TRANSIENT} a start needs "
                  f"while it is made: ({limit} - {fds0:.0f} - {FD_RESERVE + FDS_TRANSIENT}) / {statistics.median(per):.3f} = "
                  f"{(limit - fds0 - FD_RESERVE - FDS_TRANSIENT) / statistics.median(per):.0f}: that is what "
                  f"bounds the instance count (apps are unlimited, 4,096 instances each; "
                  f"pid_max is {pid_max}).")

    return harness.finish(results, labels, about=fd_bound)


if __name__ == "__main__":
    sys.exit(main())
