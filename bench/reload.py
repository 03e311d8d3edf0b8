#!/usr/bin/env python3
"""How fast a saved edit reaches the processes, one or more builds side by side.

Scales an app of `sleep` workers (`ready: none`) 1 → N and N → 1 (N = 50 by
default) by rewriting the ecosystem file as editors save (write a temp file,
rename it over), once per round (default 20 rounds), under each supervise
binary given, and prints one markdown table with a column per binary and the
ratio of each binary to the first (after/before), of the medians over the
rounds (with [min–max]) of:

  - 1 → N: the save to the `applied` event, to the first new worker's
    `spawned` event (debounce included), and to the `spawned` event of
    worker N;
  - N → 1: the save to the `applied` event, to the last stop signal sent (the
    last `stopping` event), and to the last worker gone (the last `stopped`
    event).

Times are from just before the rename to the supervisor's own event
timestamps (the same wall clock). It waits on `all_ready`, `applied`,
`spawned`, `stopping` and `stopped` events, never on a count of `ready`
events (an older build may count a `ready: none` instance ready at its spawn,
a newer one only once its exec succeeded), and it takes the `applied` event's
counter from `file_version` or, as older builds name it, `generation`.

Each round starts, for each binary, a supervisor of its own with 1 instance,
in its own temp dir (the ecosystem file, and a private 0700 XDG_RUNTIME_DIR,
so each run has its own lock); it waits for `all_ready`, saves N, then 1, and
stops the supervisor with SIGTERM. The runs alternate between binaries (the
order reversed every other round). It does not build anything: give it
binaries (default target/release/supervise; it warns when that one is older
than src/).

Bounded (--timeout for each awaited event, 30 s by default; 60 s for the
shutdown), local (the only sockets are supervise's own unix control sockets),
and it kills only processes it started, by pid checked against their start
time (through a pidfd, so a reused pid is never hit): on a failure or Ctrl-C
the supervisor is stopped (SIGSTOP, so it starts nothing more), its children
recorded, and SIGKILLed, then every process it started still alive (pids from
its `spawned` events and its children) is SIGKILLed, and the temp dir is
removed.

    python3 bench/reload.py [--rounds 20] [--instances 50] [--timeout 30]
        [--binary before=/work/before/supervise --binary after=target/release/supervise]
"""
import argparse
import json
import os
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
SHUTDOWN_LIMIT = 60.0
SETTLE = 0.2  # seconds between saves, so that each save is a burst of its own


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


def ecosystem(instances):
    return (
        f"apps:\n  {APP}:\n    command: [sleep, '100000']\n"
        f"    instances: {instances}\n    ready: none\n    kill_timeout: 5s\n"
    )


def file_version(event):
    """The `applied` event's counter: `file_version`, `generation` in older builds."""
    value = event.get("file_version", event.get("generation"))
    return value if isinstance(value, int) else None


class Supervisor:
    """One `supervise --log-format json -f FILE` in its own temp dir, its events
    read by a thread (the supervisor drops log lines when its reader lags, so
    the reader does little else) and consumed in order by `next` and
    `gather`."""

    def __init__(self, binary, instances):
        self.binary = binary
        self.work = tempfile.mkdtemp(prefix="supervise-reload-")
        self.runtime = os.path.join(self.work, "run")
        os.mkdir(self.runtime, 0o700)
        self.file = os.path.join(self.work, "ecosystem.yaml")
        with open(self.file, "w") as f:
            f.write(ecosystem(instances))
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.runtime)
        for name in ("NOTIFY_SOCKET", "RUST_LOG", "LISTEN_FDS", "LISTEN_PID"):
            self.env.pop(name, None)
        self.cond = threading.Condition()
        self.events = []
        self.cursor = 0
        self.eof = False
        self.other = []     # lines that are not JSON (drop notices, panics)
        self.spawned = set()
        self.known = {}     # pid -> start time, of everything it started
        self.process = None

    def start(self):
        with open(os.path.join(self.work, "stderr"), "wb") as stderr:
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
                    self.spawned.add(event["pid"])
                self.events.append(event)
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def gather(self, done, limit, what):
        """The events not yet consumed, up to the first point where
        done(those events) holds; they are consumed. Failed after `limit`
        seconds."""
        deadline = time.monotonic() + limit
        taken = []
        with self.cond:
            while True:
                while self.cursor < len(self.events):
                    taken.append(self.events[self.cursor])
                    self.cursor += 1
                    if done(taken):
                        return taken
                if self.eof:
                    code = self.process.poll()
                    raise Failed(f"the supervisor exited ({code}) before {what}{self._stderr_tail()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Failed(f"timed out after {limit:g} s waiting for {what}{self._stderr_tail()}")
                self.cond.wait(min(remaining, 0.5))

    def next(self, predicate, limit, what):
        """The next event not yet consumed that satisfies predicate."""
        return self.gather(lambda taken: predicate(taken[-1]), limit, what)[-1]

    def _stderr_tail(self):
        try:
            with open(os.path.join(self.work, "stderr"), errors="replace") as f:
                tail = f.read()[-600:].strip()
        except OSError:
            return ""
        return f"\n  its stderr: {tail}" if tail else ""

    def save(self, instances):
        """Rewrite the file as editors save it; the time just before the rename."""
        temp = self.file + ".tmp"
        with open(temp, "w") as f:
            f.write(ecosystem(instances))
        saved = time.time()
        os.rename(temp, self.file)
        return saved

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

    def terminate(self):
        """SIGTERM; the workers still alive after its exit."""
        self.record()
        os.kill(self.pid, signal.SIGTERM)
        try:
            code = self.process.wait(timeout=SHUTDOWN_LIMIT)
        except subprocess.TimeoutExpired:
            raise Failed(f"still running {SHUTDOWN_LIMIT:.0f} s after SIGTERM")
        if code != 0:
            raise Failed(f"exited with {code} after SIGTERM{self._stderr_tail()}")
        with self.cond:
            workers = set(self.spawned)
        return [pid for pid in workers if pid in self.known and alive(pid, self.known[pid])]

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


def kind(event):
    return event.get("event") if event.get("app", APP) == APP else None


def stamp(event):
    at = parse_ts(event.get("timestamp"))
    if at is None:
        raise Failed(f"an event without a timestamp: {event}")
    return at


def measure(binary, n, timeout):
    """One supervisor: 1 → n → 1. Times in ms from the save."""
    result = {}
    sup = Supervisor(binary, 1)
    try:
        sup.start()
        version = None

        def note(event):
            nonlocal version
            if event.get("event") == "applied" and file_version(event) is not None:
                version = file_version(event)
            return event.get("event") == "all_ready"

        sup.next(note, timeout, "`all_ready` (1 instance)")
        time.sleep(SETTLE)

        def applied_after(previous):
            def test(event):
                if event.get("event") != "applied":
                    return False
                counter = file_version(event)
                return previous is None or counter is None or counter > previous
            return test

        # 1 → n: the `applied` event and n - 1 `spawned` events (of new slots).
        is_ours = applied_after(version)
        saved = sup.save(n)

        def up_done(events):
            spawned = {e.get("slot") for e in events if kind(e) == "spawned"}
            return any(is_ours(e) for e in events) and len(spawned) >= n - 1

        events = sup.gather(up_done, timeout, f"`applied` and {n - 1} `spawned` events (1 → {n})")
        applied = next(e for e in events if is_ours(e))
        version = file_version(applied)
        spawns = sorted(stamp(e) for e in events if kind(e) == "spawned")
        result["up_applied_ms"] = (stamp(applied) - saved) * 1000
        result["up_first_ms"] = (spawns[0] - saved) * 1000
        result["up_all_ms"] = (spawns[n - 2] - saved) * 1000 if n > 1 else None
        time.sleep(SETTLE)

        # n → 1: the `applied` event, n - 1 `stopping` and n - 1 `stopped` events.
        is_ours = applied_after(version)
        saved = sup.save(1)

        def down_done(events):
            stopping = {e.get("pid") for e in events if kind(e) == "stopping"}
            stopped = {e.get("pid") for e in events if kind(e) == "stopped"}
            return any(is_ours(e) for e in events) and len(stopping) >= n - 1 and len(stopped) >= n - 1

        events = sup.gather(down_done, timeout, f"`applied`, {n - 1} `stopping` and `stopped` events ({n} → 1)")
        applied = next(e for e in events if is_ours(e))
        result["down_applied_ms"] = (stamp(applied) - saved) * 1000
        if n > 1:
            result["down_signalled_ms"] = (max(stamp(e) for e in events if kind(e) == "stopping") - saved) * 1000
            result["down_gone_ms"] = (max(stamp(e) for e in events if kind(e) == "stopped") - saved) * 1000
        unexpected = [e for e in events if kind(e) == "spawned"]
        if unexpected:
            result["note"] = f"{len(unexpected)} `spawned` events while scaling down"

        left = sup.terminate()
        if left:
            result["note"] = (result.get("note", "") + f" {len(left)} workers alive after exit").strip()
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


def print_table(rows, results, labels, spread_keys=()):
    first = labels[0]
    header = ["measure"] + labels + [f"{label}/{first}" for label in labels[1:]]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, key, fmt in rows:
        cells, medians = [name], {}
        for label in labels:
            values = [r[key] for r in results[label] if r.get(key) is not None]
            if not values:
                cells.append("-")
                continue
            medians[label] = statistics.median(values)
            cell = fmt.format(medians[label])
            if len(values) > 1 and key in spread_keys:
                cell += f" [{fmt.format(min(values))}–{fmt.format(max(values))}]"
            cells.append(cell)
        for label in labels[1:]:
            if medians.get(label) is not None and medians.get(first):
                cells.append(f"{medians[label] / medians[first]:.2f}×")
            else:
                cells.append("-")
        print("| " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--instances", type=int, default=50)
    parser.add_argument("--binary", action="append", default=[],
                        help="[LABEL=]PATH, repeatable; default target/release/supervise")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each awaited event")
    args = parser.parse_args()
    if args.instances < 2:
        parser.error("--instances must be at least 2")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
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
    print(f"an app of `sleep 100000` (ready: none) scaled 1 → {n} → 1 by saving the file; "
          f"{args.rounds} round(s), a supervisor per round and binary, timeout {args.timeout:g} s")
    print(flush=True)

    results = {label: [] for label, _ in binaries}
    for round_ in range(args.rounds):
        order = binaries if round_ % 2 == 0 else list(reversed(binaries))
        for label, path in order:
            r = measure(path, n, args.timeout)
            results[label].append(r)
            if "error" in r:
                log(f"round {round_ + 1}/{args.rounds}: {label}: FAILED: {r['error']}")
            else:
                log(f"round {round_ + 1}/{args.rounds}: {label}: 1 → {n} {r['up_first_ms']:.1f}/"
                    f"{r['up_all_ms']:.1f} ms, {n} → 1 {r['down_signalled_ms']:.1f}/{r['down_gone_ms']:.1f} ms")

    rows = [
        (f"1 → {n}: save to `applied` (ms)", "up_applied_ms", "{:.1f}"),
        (f"1 → {n}: save to the first new worker spawned (ms)", "up_first_ms", "{:.1f}"),
        (f"1 → {n}: save to worker {n} spawned (ms)", "up_all_ms", "{:.1f}"),
        (f"{n} → 1: save to `applied` (ms)", "down_applied_ms", "{:.1f}"),
        (f"{n} → 1: save to the last stop signal sent (ms)", "down_signalled_ms", "{:.1f}"),
        (f"{n} → 1: save to the last worker gone (ms)", "down_gone_ms", "{:.1f}"),
    ]
    labels = [label for label, _ in binaries]
    what = f"median of {args.rounds} rounds [min–max]" if args.rounds > 1 else "one round"
    print(f"\n1 → {n} → 1 instances of sleep, {what}\n")
    print_table(rows, results, labels, spread_keys={key for _, key, _ in rows})

    print()
    for label in labels:
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
