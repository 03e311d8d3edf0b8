"""The harness shared by bench/core.py, bench/many.py and bench/reload.py.

Not a benchmark of its own: each of those scripts imports it (from its own
directory) and documents in its docstring what it measures. What they share:

  - binaries: `--binary [LABEL=]PATH`, repeatable (default
    target/release/supervise, with a note on stderr, unless the script opts
    out, when that one is older than src/); a PATH without a label is labelled by its directory's name,
    and a repeated label gets the binary's index appended. Nothing is built.
  - one supervisor: `supervise --log-format json -f ecosystem.yaml` in a temp
    dir of its own, which holds the ecosystem file and a private 0700
    XDG_RUNTIME_DIR (so each run has its own lock and control socket), with
    NOTIFY_SOCKET, RUST_LOG, LISTEN_FDS and LISTEN_PID removed from its
    environment. Its stdout is read by a thread that does little else (the
    supervisor drops log lines when its reader lags): JSON events are queued
    and consumed in order by `next` and `gather`; other lines (drop notices,
    panics) are kept apart. Its stderr goes to a file whose tail is quoted in
    failures.
  - bounded waits: every wait for an event has a limit, and fails (`Failed`)
    at that limit or as soon as the supervisor's stdout ends; the shutdown
    (SIGTERM to exit) has a limit of 60 s.
  - killing only what it started: the start time (/proc/PID/stat) of every
    process the supervisor started (its children, and the pids of its
    `spawned` events that are its children or its children's) is recorded
    while it is alive, and a process is signalled only through a pidfd
    opened before checking that start time, so a reused pid is never hit.
    On a failure or Ctrl-C (or SIGTERM to the benchmark) the supervisor is
    stopped (SIGSTOP, so it starts nothing more), what it started is
    recorded, it is SIGKILLed, then every recorded process still alive is
    SIGKILLed, and the temp dir is removed.
  - rounds: with several binaries, the runs alternate between them, the order
    reversed every other round.
  - the report: a header (machine, binaries), then one markdown table with a
    column per binary holding the median over the rounds (with [min–max]
    where asked) and a column per further binary with its ratio to the first
    (after/before), then a line per failed round, note, dropped log line and
    cleanup that had to kill; the exit status is 1 when a round failed.
"""
import contextlib
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
SHUTDOWN_LIMIT = 60.0
TICKS = os.sysconf("SC_CLK_TCK")


def log(message):
    print(message, file=sys.stderr, flush=True)


def http_ok(port, timeout):
    """One `GET /` to 127.0.0.1:`port`, read to the end: whether it was a
    200. A refused, reset or timed-out connection raises OSError."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.startswith(b"HTTP/1.1 200")


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


class Supervisor:
    """One `supervise --log-format json -f FILE` in its own temp dir (named
    after `prefix`), its events read by a thread and consumed in order by
    `next` and `gather`. A subclass may keep its own tallies in `on_event`,
    which the reader calls with `cond` held."""

    def __init__(self, binary, text, prefix):
        self.binary = binary
        self.work = tempfile.mkdtemp(prefix=prefix)
        self.runtime = os.path.join(self.work, "run")
        os.mkdir(self.runtime, 0o700)
        self.file = os.path.join(self.work, "ecosystem.yaml")
        with open(self.file, "w") as f:
            f.write(text)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.runtime)
        for name in ("NOTIFY_SOCKET", "RUST_LOG", "LISTEN_FDS", "LISTEN_PID"):
            self.env.pop(name, None)
        self.cond = threading.Condition()
        self.events = []
        self.cursor = 0
        self.eof = False
        self.other = []     # lines that are not JSON (drop notices, panics)
        self.spawned = {}   # pid -> its `spawned` event
        self.known = {}     # pid -> start time, of everything it started
        self.process = None
        self.reader = None

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

    def on_event(self, event):
        """Called by the reader, `cond` held, for each JSON event as it comes."""

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
                    self.spawned[event["pid"]] = event
                self.on_event(event)
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
                    raise Failed(f"the supervisor exited ({code}) before {what}{self.stderr_tail()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Failed(f"timed out after {limit:g} s waiting for {what}{self.progress()}")
                self.cond.wait(min(remaining, 0.5))

    def next(self, predicate, limit, what):
        """The next event not yet consumed that satisfies predicate (the ones
        before it are consumed too); Failed after `limit` seconds."""
        return self.gather(lambda taken: predicate(taken[-1]), limit, what)[-1]

    def progress(self):
        """What a timed-out wait says after what it waited for (`cond` held)."""
        return self.stderr_tail()

    def stderr_tail(self):
        try:
            with open(os.path.join(self.work, "stderr"), errors="replace") as f:
                tail = f.read()[-600:].strip()
        except OSError:
            return ""
        return f"\n  its stderr: {tail}" if tail else ""

    def dropped(self):
        """The supervisor's notices that it dropped log lines."""
        with self.cond:
            return [line for line in self.other if "dropped" in line]

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
        """SIGTERM; the time to its exit (s) and the workers (pids of its
        `spawned` events) still alive after it."""
        self.record()
        begun = time.perf_counter()
        os.kill(self.pid, signal.SIGTERM)
        try:
            code = self.process.wait(timeout=SHUTDOWN_LIMIT)
        except subprocess.TimeoutExpired:
            raise Failed(f"still running {SHUTDOWN_LIMIT:.0f} s after SIGTERM")
        took = time.perf_counter() - begun
        if code != 0:
            raise Failed(f"exited with {code} after SIGTERM{self.stderr_tail()}")
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
            if self.reader is not None:
                self.reader.join(timeout=5)
            if self.process.stdout:
                self.process.stdout.close()
        shutil.rmtree(self.work, ignore_errors=True)
        return killed


@contextlib.contextmanager
def running(sup, result, errors=(Failed, OSError)):
    """Starts sup for the body of the with. When the body ends well, the
    supervisor's drop notices so far are result["dropped_lines"] (unless the
    body noted them itself); an error of `errors` in it (or in the start) is
    result["error"]; and whatever happened, sup is cleaned up, with how many
    processes that had to kill as result["killed_in_cleanup"]."""
    try:
        sup.start()
        yield sup
        result.setdefault("dropped_lines", sup.dropped())
    except errors as error:
        result["error"] = str(error)
    finally:
        result["killed_in_cleanup"] = sup.cleanup()


# ---------------------------------------------------------------- runs and report


def add_binary_option(parser):
    parser.add_argument("--binary", action="append", default=[],
                        help="[LABEL=]PATH, repeatable; default target/release/supervise")


def parse_binaries(parser, specs, check_stale=True):
    """[(label, path)] from the `--binary [LABEL=]PATH` options; with none,
    target/release/supervise (noting on stderr, with check_stale, when it is
    older than src/)."""
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
    if check_stale and not specs:
        newest = max((os.path.getmtime(os.path.join(d, f))
                      for d, _, files in os.walk(os.path.join(ROOT, "src")) for f in files), default=0)
        if newest > os.path.getmtime(default):
            log(f"note: {default} is older than src/ (rebuild with cargo build --release)")
    return binaries


def begin(parser, specs, check_stale=True):
    """The binaries (parse_binaries), then, before the first run: stdout
    line-buffered, to keep its order with the progress on stderr, and SIGTERM
    to the benchmark running the cleanups as Ctrl-C does."""
    binaries = parse_binaries(parser, specs, check_stale)
    sys.stdout.reconfigure(line_buffering=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return binaries


def print_header(binaries, what, limits=None, modified=True):
    """The machine (and `limits`, a line), a line per binary (its label,
    path, with `modified` its mtime, and its `--version`), then `what` and a
    blank line."""
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"machine: nproc {len(os.sched_getaffinity(0))}, kernel {os.uname().release}, "
          f"load average {load}")
    if limits:
        print(limits)
    for label, path in binaries:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        if modified:
            built = time.strftime("%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(path)))
            print(f"{label}: {path} (modified {built} UTC): {version.stdout.strip() or version.stderr.strip()}")
        else:
            print(f"{label}: {path}: {version.stdout.strip() or version.stderr.strip()}")
    print(what)
    print(flush=True)


def run_rounds(binaries, rounds, run, settle=0):
    """label -> [run(round, label, path) of each round], round from 0: in
    each round a run per binary, in order, the order reversed every other
    round; `settle` seconds after each run let the exits settle before the
    next one."""
    results = {label: [] for label, _ in binaries}
    for round_ in range(rounds):
        order = binaries if round_ % 2 == 0 else list(reversed(binaries))
        for label, path in order:
            results[label].append(run(round_, label, path))
            if settle:
                time.sleep(settle)
    return results


def print_table(rows, results, labels, no_ratio=(), spread_keys=(), annotate=None):
    """One markdown table. rows: (name, key, scale, format); results: label
    -> the rounds' result dicts. A cell is the median of the rounds (times
    scale), with [min–max] for the keys in spread_keys when there are several,
    and annotate(key, column) appended (column(key): that label's values);
    the ratio of each further label to the first, except for no_ratio keys."""
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


def finish(results, labels, about=None):
    """After the table: a blank line, then for each label about(label) (the
    script's own lines, if any) and a line per failed round, note, dropped
    log line and cleanup that had to kill. The exit status: 1 when a round
    failed, else 0."""
    print()
    for label in labels:
        if about:
            about(label)
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
