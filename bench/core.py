#!/usr/bin/env python3
"""Core overhead of supervise with 100 instances of `sleep`, one or more builds side by side.

For N instances of `sleep 100000` (default 100; `ready: none`,
`backoff: {initial: 100ms}`) under each supervise binary given, prints one
markdown table with a column per binary and the ratio of each binary to the
first (after/before):

  - start to all running: from just before spawning
    `supervise --log-format json -f FILE` to the timestamp of its `all_ready`
    event (the supervisor's own clock, which is the same wall clock), and to
    its last `spawned` event;
  - the supervisor's RSS (VmRSS) once all are running; the RSS of its helper
    processes (its children that are not workers: an undertaker, a spawner,
    as a build has them), and the PSS (/proc/PID/smaps_rollup) of the
    supervisor and its helpers together, which counts shared pages once;
  - the CPU (utime+stime from /proc/PID/stat) of the supervisor, and of its
    helpers, over --idle seconds (default 30), as % of one core;
  - crash to respawn, over --kills SIGKILLs of workers (default 100): from the
    SIGKILL to the `exited` event, and to the replacement's `spawned` event
    minus the backoff delay (the `exited` event's `delay_ms`, else the
    configured 100 ms): median and p90. The slots are killed in a random
    order, each at most once per pass over the slots, so every restart is a
    first one (backoff.initial) and not a later, longer backoff step;
  - SIGTERM to the supervisor's exit, and how many of its workers are still
    alive after it exited.

It waits on `all_ready`, `spawned` and `exited` events, never on a count of
`ready` events: an older build may count a `ready: none` instance ready at its
spawn, a newer one only once its exec succeeded.

Each run has its own temp dir (the ecosystem file, and a private 0700
XDG_RUNTIME_DIR, so each run has its own lock). With several binaries and
--rounds, the runs alternate between binaries (the order reversed every other
round) and the table shows the medians of the rounds (with [min–max] for the
timings). It does not build anything: give it binaries (default
target/release/supervise; it warns when that one is older than src/).

Bounded (--timeout for `all_ready` and for each awaited event, 60 s by
default; 60 s for the shutdown), local (the only sockets are supervise's own
unix control sockets), and it kills only processes it started, by pid checked
against their start time (through a pidfd, so a reused pid is never hit): the
workers it SIGKILLs are the supervisor's children from its `spawned` events;
on a failure or Ctrl-C the supervisor is stopped (SIGSTOP, so it starts
nothing more), its children recorded, and SIGKILLed, then every process it
started still alive is SIGKILLed, and the temp dir is removed.

    python3 bench/core.py [--instances 100] [--idle 30] [--kills 100] [--rounds 1] [--timeout 60]
        [--binary before=/work/before/supervise --binary after=target/release/supervise]
"""
import argparse
import json
import os
import random
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
APP = "sleepers"
BACKOFF_INITIAL_MS = 100
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


def cpu_ticks(pid):
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
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


def signal_checked(pid, started, sig):
    """Send sig to pid only if it is still the process that started at
    `started`. A pidfd opened before the check pins the process, so the
    signal cannot reach another process that reused the pid."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):
        fd = None
    try:
        if not alive(pid, started):
            return False
        if fd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


# ---------------------------------------------------------------- one supervisor


def ecosystem(n):
    return (
        f"apps:\n  {APP}:\n    command: [sleep, '100000']\n"
        f"    instances: {n}\n    ready: none\n"
        f"    backoff: {{initial: {BACKOFF_INITIAL_MS}ms}}\n"
    )


class Supervisor:
    """One `supervise --log-format json -f FILE` in its own temp dir, its events
    read by a thread (the supervisor drops log lines when its reader lags, so
    the reader does little else) and consumed in order by `next`."""

    def __init__(self, binary, text):
        self.binary = binary
        self.work = tempfile.mkdtemp(prefix="supervise-core-")
        self.runtime = os.path.join(self.work, "run")
        os.mkdir(self.runtime, 0o700)
        with open(os.path.join(self.work, "ecosystem.yaml"), "w") as f:
            f.write(text)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.runtime)
        for name in ("NOTIFY_SOCKET", "RUST_LOG", "LISTEN_FDS", "LISTEN_PID"):
            self.env.pop(name, None)
        self.cond = threading.Condition()
        self.events = []
        self.cursor = 0
        self.eof = False
        self.other = []     # lines that are not JSON (drop notices, panics)
        self.spawned = {}   # pid -> slot, of every `spawned` event
        self.slots = {}     # slot -> pid of its latest `spawned` event
        self.known = {}     # pid -> start time, of everything it started
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
                event = None
            with self.cond:
                if not isinstance(event, dict):
                    self.other.append(line.decode(errors="replace").rstrip())
                    continue
                if event.get("event") == "spawned" and isinstance(event.get("pid"), int):
                    self.spawned[event["pid"]] = event.get("slot")
                    if event.get("app") == APP:
                        self.slots[event.get("slot")] = event["pid"]
                self.events.append(event)
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def next(self, predicate, limit, what):
        """The next event not yet consumed that satisfies predicate (the ones
        before it are consumed too); Failed after `limit` seconds."""
        deadline = time.monotonic() + limit
        with self.cond:
            while True:
                while self.cursor < len(self.events):
                    event = self.events[self.cursor]
                    self.cursor += 1
                    if predicate(event):
                        return event
                if self.eof:
                    code = self.process.poll()
                    raise Failed(f"the supervisor exited ({code}) before {what}{self._stderr_tail()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Failed(f"timed out after {limit:g} s waiting for {what}{self._stderr_tail()}")
                self.cond.wait(min(remaining, 0.5))

    def _stderr_tail(self):
        try:
            with open(os.path.join(self.work, "stderr"), errors="replace") as f:
                tail = f.read()[-600:].strip()
        except OSError:
            return ""
        return f"\n  its stderr: {tail}" if tail else ""

    def record(self):
        """Note the start time of everything the supervisor started (its
        children, and the pids of its `spawned` events that are its children
        or its children's) while it is alive, so that later checks and kills
        never confuse a reused pid with one of ours."""
        if self.process is None or self.process.poll() is not None:
            return
        mine = children(self.pid)
        parents = {self.pid} | mine
        with self.cond:
            pids = set(self.spawned)
        for pid in (pids | mine) - set(self.known):
            try:
                fields = stat_fields(pid)
            except OSError:
                continue
            if int(fields[1]) in parents:
                self.known[pid] = int(fields[19])

    def helpers(self):
        """The supervisor's children that are not workers (an undertaker, a
        spawner), with their start times."""
        self.record()
        with self.cond:
            workers = set(self.spawned)
        return {pid: self.known[pid] for pid in children(self.pid) - workers if pid in self.known}

    def terminate(self):
        """SIGTERM; the time to its exit (s) and the workers still alive."""
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
        with self.cond:
            workers = set(self.spawned)
        left = [pid for pid in workers if pid in self.known and alive(pid, self.known[pid])]
        return took, left

    def cleanup(self):
        """Whatever happened: the supervisor SIGKILLed by pid, then every
        process it started, then the temp dir removed. Returns how many
        processes had to be killed here."""
        killed = 0
        if self.process is not None:
            if self.process.poll() is None:
                # Frozen, it starts nothing between the census and the kill.
                try:
                    os.kill(self.pid, signal.SIGSTOP)
                    deadline = time.time() + 1
                    while time.time() < deadline and stat_fields(self.pid)[0] != "T":
                        time.sleep(0.01)
                except OSError:
                    pass
                self.record()
                try:
                    os.kill(self.pid, signal.SIGKILL)  # our child, not yet reaped: its pid is ours
                    killed += 1
                except OSError:
                    pass
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    log(f"  supervisor {self.pid} did not die after SIGKILL")
            # The undertaker kills the workers once the supervisor is gone;
            # give it a moment, then kill by pid whatever is left.
            deadline = time.time() + 3
            while time.time() < deadline and any(alive(p, s) for p, s in self.known.items()):
                time.sleep(0.05)
            for pid, started in self.known.items():
                if signal_checked(pid, started, signal.SIGKILL):
                    killed += 1
            deadline = time.time() + 5
            while time.time() < deadline and any(alive(p, s) for p, s in self.known.items()):
                time.sleep(0.05)
            left = [p for p, s in self.known.items() if alive(p, s)]
            if left:
                log(f"  WARNING: {len(left)} processes still alive after SIGKILL: {left[:10]}")
            self.reader.join(timeout=5)
            if self.process.stdout:
                self.process.stdout.close()
        shutil.rmtree(self.work, ignore_errors=True)
        return killed


# ---------------------------------------------------------------- one run


def quantile90(values):
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def measure(binary, n, idle, kills, timeout):
    result = {}
    sup = Supervisor(binary, ecosystem(n))
    try:
        sup.start()
        ready = sup.next(lambda e: e.get("event") == "all_ready", timeout, f"`all_ready` ({n} instances)")
        result["start_s"] = (parse_ts(ready.get("timestamp")) or time.time()) - sup.started
        with sup.cond:
            slots = dict(sup.slots)
            stamps = [parse_ts(e.get("timestamp")) for e in sup.events
                      if e.get("event") == "spawned" and e.get("app") == APP]
        stamps = sorted(filter(None, stamps))
        if stamps:
            result["last_spawned_s"] = stamps[-1] - sup.started
        if len(slots) != n:
            raise Failed(f"`all_ready` with {len(slots)} slots spawned of {n}")

        result["rss_kb"] = rss_kb(sup.pid)
        helpers = sup.helpers()
        result["helpers"] = len(helpers)
        result["helpers_rss_kb"] = sum(rss_kb(p) for p in helpers)
        pss = [pss_kb(p) for p in [sup.pid, *helpers]]
        if None not in pss:
            result["pss_kb"] = sum(pss)

        before = cpu_ticks(sup.pid)
        helpers_before = {p: cpu_ticks(p) for p in helpers}
        time.sleep(idle)
        result["idle_ticks"] = cpu_ticks(sup.pid) - before
        result["idle_cpu"] = result["idle_ticks"] / TICKS / idle * 100
        helper_ticks = 0
        for pid, started in helpers.items():
            if not alive(pid, started):
                raise Failed(f"helper process {pid} exited during the idle period")
            helper_ticks += cpu_ticks(pid) - helpers_before[pid]
        result["helpers_idle_ticks"] = helper_ticks
        result["helpers_idle_cpu"] = helper_ticks / TICKS / idle * 100

        # Each slot is killed at most once per pass, so every restart is a
        # first one (backoff.initial) and not a later, longer backoff step.
        order = []
        while len(order) < kills:
            order += random.sample(sorted(slots), len(slots))
        to_exited, respawn = [], []
        for slot in order[:kills]:
            sup.record()
            with sup.cond:
                pid = sup.slots[slot]
            started = sup.known.get(pid)
            if started is None:
                raise Failed(f"the worker of slot {slot} (pid {pid}) is not the supervisor's child")
            killed_at = time.time()
            if not signal_checked(pid, started, signal.SIGKILL):
                raise Failed(f"the worker of slot {slot} (pid {pid}) was gone before its SIGKILL")
            exited = sup.next(lambda e: e.get("event") == "exited" and e.get("pid") == pid,
                              timeout, f"the `exited` event of pid {pid}")
            spawned = sup.next(lambda e: e.get("event") == "spawned" and e.get("app") == APP
                               and e.get("slot") == slot and e.get("pid") != pid,
                               timeout, f"the respawn of slot {slot}")
            delay = exited.get("delay_ms")
            if not isinstance(delay, (int, float)):
                delay = BACKOFF_INITIAL_MS
            exited_at, spawned_at = parse_ts(exited.get("timestamp")), parse_ts(spawned.get("timestamp"))
            if exited_at is None or spawned_at is None:
                raise Failed("an event without a timestamp")
            to_exited.append((exited_at - killed_at) * 1000)
            respawn.append((spawned_at - killed_at) * 1000 - delay)
        if respawn:
            result["exited_ms"] = statistics.median(to_exited)
            result["respawn_ms"] = statistics.median(respawn)
            result["respawn_p90_ms"] = quantile90(respawn)

        took, left = sup.terminate()
        result["sigterm_s"] = took
        result["left"] = len(left)
        with sup.cond:
            result["dropped_lines"] = [line for line in sup.other if "dropped" in line]
    except (Failed, OSError) as error:
        result["error"] = str(error)
    finally:
        result["killed_in_cleanup"] = sup.cleanup()
    return result


# ---------------------------------------------------------------- report


def parse_binaries(parser, specs):
    binaries = []
    default = os.path.join(ROOT, "target", "release", "supervise")
    for i, spec in enumerate(specs or [default]):
        label, sep, path = spec.partition("=")
        if not sep or "/" in label:
            label, path = (os.path.basename(os.path.dirname(os.path.abspath(spec))) or f"b{i}"), spec
        path = os.path.abspath(path)
        if not os.access(path, os.X_OK):
            parser.error(f"{path}: not an executable (build it first: cargo build --release)")
        if label in dict(binaries):
            label = f"{label}{i}"
        binaries.append((label, path))
    if not specs:
        newest = max((os.path.getmtime(os.path.join(d, f))
                      for d, _, files in os.walk(os.path.join(ROOT, "src")) for f in files), default=0)
        if newest > os.path.getmtime(default):
            log(f"note: {default} is older than src/ (rebuild with cargo build --release)")
    return binaries


def print_table(rows, results, labels, no_ratio=(), spread_keys=(), annotate=None):
    first = labels[0]
    header = ["measure"] + labels + [f"{label}/{first}" for label in labels[1:]]
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
            if annotate:
                cell += annotate(key, lambda k: column(label, k))
            cells.append(cell)
        for label in labels[1:]:
            if key not in no_ratio and medians.get(label) is not None and medians.get(first):
                cells.append(f"{medians[label] / medians[first]:.2f}×")
            else:
                cells.append("-")
        print("| " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--binary", action="append", default=[],
                        help="[LABEL=]PATH, repeatable; default target/release/supervise")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for all_ready, and for each awaited event")
    args = parser.parse_args()
    if args.instances < 1:
        parser.error("--instances must be at least 1")
    if args.rounds < 1 or args.kills < 0 or args.idle <= 0:
        parser.error("--rounds must be at least 1, --kills at least 0, --idle above 0")
    binaries = parse_binaries(parser, args.binary)

    sys.stdout.reconfigure(line_buffering=True)  # keep the order with the progress on stderr
    # SIGTERM to the benchmark runs the cleanups as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    n = args.instances
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"machine: nproc {len(os.sched_getaffinity(0))}, kernel {os.uname().release}, "
          f"load average {load}")
    for label, path in binaries:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        built = time.strftime("%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(path)))
        print(f"{label}: {path} (modified {built} UTC): {version.stdout.strip() or version.stderr.strip()}")
    print(f"{n} instances of `sleep 100000` (ready: none, backoff.initial {BACKOFF_INITIAL_MS} ms); "
          f"{args.rounds} round(s), idle {args.idle:g} s, {args.kills} SIGKILLs, timeout {args.timeout:g} s")
    print(flush=True)

    results = {label: [] for label, _ in binaries}
    for round_ in range(args.rounds):
        order = binaries if round_ % 2 == 0 else list(reversed(binaries))
        for label, path in order:
            log(f"round {round_ + 1}/{args.rounds}: {label}")
            r = measure(path, n, args.idle, args.kills, args.timeout)
            results[label].append(r)
            if "error" in r:
                log(f"  FAILED: {r['error']}")
            else:
                respawn = f", respawn {r['respawn_ms']:.2f} ms" if "respawn_ms" in r else ""
                log(f"  all running in {r['start_s'] * 1000:.0f} ms, RSS {r['rss_kb'] / 1024:.1f} MiB, "
                    f"{r['idle_ticks']} ticks idle{respawn}, SIGTERM to exit {r['sigterm_s'] * 1000:.0f} ms, "
                    f"{r['left']} left")
            time.sleep(1)  # let the exits settle before the next run

    rows = [
        (f"start to all {n} running (ms)", "start_s", 1000, "{:.0f}"),
        ("start to the last `spawned` event (ms)", "last_spawned_s", 1000, "{:.0f}"),
        ("supervisor RSS (MiB)", "rss_kb", 1 / 1024, "{:.1f}"),
        ("helper processes' RSS (MiB)", "helpers_rss_kb", 1 / 1024, "{:.1f}"),
        ("supervisor + helpers PSS (MiB)", "pss_kb", 1 / 1024, "{:.1f}"),
        (f"supervisor CPU over {args.idle:g} s idle (% of a core)", "idle_cpu", 1, "{:.3f}"),
        (f"helpers' CPU over {args.idle:g} s idle (% of a core)", "helpers_idle_cpu", 1, "{:.3f}"),
        (f"SIGKILL to `exited` (ms, median of {args.kills})", "exited_ms", 1, "{:.2f}"),
        (f"respawn after the backoff (ms, median of {args.kills})", "respawn_ms", 1, "{:.2f}"),
        (f"respawn after the backoff (ms, p90 of {args.kills})", "respawn_p90_ms", 1, "{:.2f}"),
        ("SIGTERM to exit (ms)", "sigterm_s", 1000, "{:.0f}"),
        (f"workers alive after exit (of {n})", "left", 1, "{:.0f}"),
    ]
    spread = {"start_s", "last_spawned_s", "rss_kb", "idle_cpu", "exited_ms", "respawn_ms",
              "respawn_p90_ms", "sigterm_s"}

    def annotate(key, column):
        if key == "idle_cpu":
            return f" ({'/'.join(str(t) for t in column('idle_ticks'))} ticks)"
        if key == "helpers_idle_cpu":
            return f" ({'/'.join(str(t) for t in column('helpers_idle_ticks'))} ticks)"
        if key == "helpers_rss_kb":
            counts = sorted(set(column("helpers")))
            return f" ({'/'.join(str(c) for c in counts)} process{'' if counts == [1] else 'es'})"
        return ""

    labels = [label for label, _ in binaries]
    what = f"median of {args.rounds} rounds" if args.rounds > 1 else "one round"
    print(f"\n{n} instances of sleep, {what}\n")
    print_table(rows, results, labels, no_ratio={"left"}, spread_keys=spread, annotate=annotate)

    print()
    for label in labels:
        for i, r in enumerate(results[label]):
            if r.get("error"):
                print(f"{label} round {i + 1} FAILED: {r['error']}")
            if r.get("dropped_lines"):
                print(f"{label} round {i + 1}: the supervisor dropped log lines: {r['dropped_lines'][-1]}")
            if r.get("killed_in_cleanup"):
                print(f"{label} round {i + 1}: the cleanup had to SIGKILL {r['killed_in_cleanup']} processes")
    failed = any(r.get("error") for rs in results.values() for r in rs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
