#!/usr/bin/env python3
"""What liveness checks and memory limits cost the supervisor (issue 12).

Two parts, each run --rounds times (default 2), the variants of a part
alternating (the order reversed every other round):

1. `checks`: --instances (default 100) workers, each a tiny HTTP server of
   its own (a blocking Python socket loop, `python3 -S`, about 7 MB each) on
   127.0.0.1:{instance+BASE}, all `ready: {http: …/ready}`; once with
   `health: {http: "http://127.0.0.1:{instance+BASE}/health", every: 1s,
   timeout: 1s, failures: 3, grace: 0s}` and once without (the ratio). After
   `all_ready` and --settle seconds, the supervisor's CPU (utime+stime of
   /proc/PID/stat: every thread of the supervisor process, no worker) over
   --duration seconds (default 30), as % of one core; with the share of its
   loop thread (the main thread: the runtime is single-threaded, the HTTP
   checks run on it) and of its blocking-pool threads, the CPU of its helper
   processes (spawner, undertaker: its children that are not workers), and
   of the workers together. The checks that failed in that window (events
   `check_failed`, `unhealthy`, `recycling`) are counted, and afterwards
   `status` must show every instance `healthy` (so the checks did run).

2. `memory`: N instances of `sleep 100000` (`ready: none`) with
   `max_memory: 150M` and the top-level `memory_check: 1s`, for each N of
   --memory-instances (default 100 and 1000), plus a baseline of the largest
   N without `max_memory` (nothing measured). The measurement runs on a
   blocking thread of the supervisor, so the process's CPU counts it: the
   supervisor's CPU over --duration seconds (nothing else happens: no probe,
   no status call), and from it the CPU per measurement and per instance
   (CPU / (duration / memory_check) / N), and the loop thread's own share
   per measurement (ordering it and handling its answers; from the thread's
   schedstat, in ns). Then, for --probe seconds (default 5), the loop's
   responsiveness while measurements run: a control request that the loop
   thread itself answers and that changes nothing, `{"v": 1, "cmd":
   "start", "target": "bench-no-such-app"}` (answered `no app …`), sent on
   the control socket one at a time, 5 ms after the previous answer; each
   round trip (connect, request, reply line) is timed, and the longest is
   reported next to the same in the baseline without measurements. A stall
   of the loop longer than the probe period (~5.3 ms) delays at least one
   answer, so the longest round trip bounds such stalls from above; it also
   holds this client's own scheduling on a loaded 2-core machine, which is
   what the baseline shows. The probe window is separate from the CPU window
   so that the probes' own cost (~0.15 ms of supervisor CPU each) is not
   counted as the measurement's. No `memory_exceeded` may happen (a `sleep`
   uses ~1 MB).

Built on bench/harness.py: binaries via `--binary` (default
target/release/supervise; only the first one given is used), a private temp
dir and XDG_RUNTIME_DIR per run, every wait bounded (--timeout for `all_ready`,
10 s for each control request, 60 s for the shutdown), and on a failure or
Ctrl-C only what the supervisor started is killed, by pidfd. Loopback only:
the workers listen on 127.0.0.1 and the checks and probes go there; the
control requests use the supervisor's unix socket. Never fails on a timing:
the exit status is 1 only when a run failed (a timeout, the supervisor
exiting, a control request unanswered); failed checks in part 1 and
`memory_exceeded` events in part 2 are reported under the tables.

    python3 bench/health.py [--part all|checks|memory] [--instances 100] [--duration 30]
        [--memory-instances 100,1000] [--probe 5] [--rounds 2] [--settle 2]
        [--base-port 19000] [--timeout 120] [--binary PATH]
"""
import argparse
import glob
import json
import os
import socket
import statistics
import sys
import time

sys.dont_write_bytecode = True  # no bench/__pycache__ left in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import TICKS, Failed, alive, cpu_ticks, log, rss_kb  # noqa: E402

# The worker of part 1: answers every connection `200 ok` and closes it.
HEALTH_SERVER = r'''
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
while True:
    c, _ = s.accept()
    try:
        c.settimeout(2)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 8192:
            d = c.recv(4096)
            if not d:
                break
            data += d
        c.sendall(ok)
    except OSError:
        pass
    finally:
        c.close()
'''

PROBE_REQUEST = b'{"v":1,"cmd":"start","target":"bench-no-such-app"}\n'
PROBE_EVERY = 0.005
CONTROL_LIMIT = 10.0
MEMORY_LIMIT = "150M"


# ---------------------------------------------------------------- the supervisor


class Supervisor(harness.Supervisor):
    """harness.Supervisor with extra files in its dir and control requests."""

    def __init__(self, binary, text, files=None):
        super().__init__(binary, text, "supervise-health-")
        for name, content in (files or {}).items():
            with open(os.path.join(self.work, name), "w") as f:
                f.write(content)

    def socket_path(self):
        for path in glob.glob(os.path.join(self.runtime, "supervise", "*.sock")):
            if not os.path.islink(path):
                return path
        raise Failed("no control socket in the runtime dir")

    def request(self, line, path=None, limit=CONTROL_LIMIT):
        """One control request; its first reply line (bytes)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(limit)
            s.connect(path or self.socket_path())
            s.sendall(line)
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                reply += chunk
        return reply

    def status(self):
        reply = json.loads(self.request(b'{"v":1,"cmd":"status"}\n'))
        if not reply.get("ok"):
            raise Failed(f"status answered {reply}")
        return reply

    def helpers(self):
        """Its children that are not workers, with their start times."""
        self.record()
        with self.cond:
            workers = set(self.spawned)
        return {p: self.known[p] for p in harness.children(self.pid) - workers if p in self.known}

    def count(self, names, since):
        """How many events named in `names` came after index `since`."""
        with self.cond:
            return sum(1 for e in self.events[since:] if e.get("event") in names)

    def mark(self):
        with self.cond:
            return len(self.events)


def threads(pid):
    """tid -> (comm, utime+stime ticks, ns on a CPU from schedstat) of every
    thread of pid."""
    result = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        result[int(tid)] = (comm, int(fields[11]) + int(fields[12]), ns)
    return result


class CpuWindow:
    """The CPU ticks of the supervisor (all its threads), its loop thread,
    its blocking-pool threads, its helpers and given workers, over a
    window."""

    def __init__(self, sup, workers=()):
        self.sup = sup
        self.helpers = sup.helpers()
        self.workers = {p: s for p, s in workers}
        self.begun = time.monotonic()
        self.process = cpu_ticks(sup.pid)
        self.threads = threads(sup.pid)
        self.helper_ticks = {p: cpu_ticks(p) for p in self.helpers}
        self.worker_ticks = {p: cpu_ticks(p) for p in self.workers}

    def end(self):
        sup = self.sup
        elapsed = time.monotonic() - self.begun
        process = cpu_ticks(sup.pid) - self.process
        after = threads(sup.pid)
        loop = after[sup.pid][1] - self.threads[sup.pid][1]
        pool = sum(t - self.threads.get(tid, ("", 0, 0))[1]
                   for tid, (comm, t, _) in after.items() if comm.startswith("tokio"))
        # Finer than ticks, but only of the threads alive at the end.
        ns = sum(n - self.threads.get(tid, ("", 0, 0))[2] for tid, (_, _, n) in after.items())
        loop_ns = after[sup.pid][2] - self.threads[sup.pid][2]
        helper_ticks = 0
        for pid, started in self.helpers.items():
            if not alive(pid, started):
                raise Failed(f"helper process {pid} exited during the window")
            helper_ticks += cpu_ticks(pid) - self.helper_ticks[pid]
        worker_ticks = 0
        for pid, started in self.workers.items():
            if not alive(pid, started):
                raise Failed(f"worker {pid} exited during the window")
            worker_ticks += cpu_ticks(pid) - self.worker_ticks[pid]

        def pct(ticks):
            return ticks / TICKS / elapsed * 100

        return {
            "elapsed": elapsed,
            "ticks": process, "cpu": pct(process),
            "sched_cpu": ns / 1e9 / elapsed * 100,
            "loop_ns": loop_ns,
            "loop_ticks": loop, "loop_cpu": pct(loop),
            "pool_ticks": pool, "pool_cpu": pct(pool),
            "helper_ticks": helper_ticks, "helper_cpu": pct(helper_ticks),
            "worker_ticks": worker_ticks, "worker_cpu": pct(worker_ticks),
        }


# ---------------------------------------------------------------- part 1: HTTP checks


def free_window(base, n, tries=20):
    """A base port such that base..base+n-1 can all be bound on 127.0.0.1."""
    for attempt in range(tries):
        start = base + attempt * n
        if start + n > 65535:
            break
        sockets = []
        try:
            for port in range(start, start + n):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return start
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise SystemExit(f"no {n} free consecutive ports from {base}")


def checks_ecosystem(n, base, checks):
    url = f"http://127.0.0.1:{{instance+{base}}}"
    text = (
        "apps:\n  hc:\n"
        f"    command: [python3, -S, hp.py, '{{instance+{base}}}']\n"
        f"    instances: {n}\n"
        f"    ready: {{http: '{url}/ready'}}\n"
        "    kill_timeout: 2s\n"
    )
    if checks:
        text += f"    health: {{http: '{url}/health', every: 1s, timeout: 1s, failures: 3, grace: 0s}}\n"
    return text


def run_checks(binary, n, base, checks, args):
    result = {}
    sup = Supervisor(binary, checks_ecosystem(n, base, checks), {"hp.py": HEALTH_SERVER})
    with harness.running(sup, result):
        sup.next(lambda e: e.get("event") == "all_ready", args.timeout, f"`all_ready` ({n} HTTP workers)")
        time.sleep(args.settle)
        sup.record()
        with sup.cond:
            workers = [(p, sup.known[p]) for p in sup.spawned if p in sup.known]
        if len(workers) != n:
            raise Failed(f"{len(workers)} workers recorded of {n}")
        since = sup.mark()
        window = CpuWindow(sup, workers)
        time.sleep(args.duration)
        result.update(window.end())
        result["rss_mib"] = rss_kb(sup.pid) / 1024
        result["failed_checks"] = sup.count({"check_failed", "unhealthy", "recycling"}, since)
        status = sup.status()
        healths = [w.get("health") for a in status["apps"] for w in a["workers"]]
        result["healthy"] = sum(1 for h in healths if h == "healthy")
        if checks and (result["failed_checks"] or result["healthy"] != n):
            result["note"] = (f"{result['failed_checks']} failed checks in the window; "
                              f"{result['healthy']} of {n} healthy: {sorted(set(map(str, healths)))}")
        sup.terminate()
    return result


# ---------------------------------------------------------------- part 2: memory


def memory_ecosystem(n, limited):
    text = (
        "memory_check: 1s\n"
        "apps:\n  sleepers:\n"
        "    command: [sleep, '100000']\n"
        f"    instances: {n}\n"
        "    ready: none\n"
    )
    if limited:
        text += f"    max_memory: {MEMORY_LIMIT}\n"
    return text


def probe(sup, seconds):
    """Round trips (ms) of PROBE_REQUEST, one at a time, for `seconds`."""
    path = sup.socket_path()
    times = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        begun = time.perf_counter()
        reply = sup.request(PROBE_REQUEST, path)
        times.append((time.perf_counter() - begun) * 1000)
        if b"no app" not in reply:
            raise Failed(f"the probe was answered {reply[:200]!r}")
        time.sleep(PROBE_EVERY)
    return times


def run_memory(binary, n, limited, args, cpu_window=True):
    result = {}
    sup = Supervisor(binary, memory_ecosystem(n, limited))
    with harness.running(sup, result):
        sup.next(lambda e: e.get("event") == "all_ready", args.timeout, f"`all_ready` ({n} sleeps)")
        time.sleep(args.settle)
        since = sup.mark()
        if cpu_window:
            window = CpuWindow(sup)
            time.sleep(args.duration)
            result.update(window.end())
            measurements = result["elapsed"] / 1.0  # memory_check: 1s
            result["ms_per_measurement"] = result["ticks"] / TICKS / measurements * 1000
            result["us_per_instance"] = result["ms_per_measurement"] * 1000 / n
            result["loop_ms_per_measurement"] = result["loop_ns"] / 1e6 / measurements
        window = CpuWindow(sup)
        times = probe(sup, args.probe)
        during = window.end()
        result["probe_cpu"] = during["cpu"]
        result["probes"] = len(times)
        result["probe_max"] = max(times)
        result["probe_p99"] = statistics.quantiles(times, n=100)[-1] if len(times) > 1 else times[0]
        result["probe_median"] = statistics.median(times)
        result["probe_over_10ms"] = sum(1 for t in times if t > 10)
        result["rss_mib"] = rss_kb(sup.pid) / 1024
        result["exceeded"] = sup.count({"memory_exceeded", "recycling"}, since)
        if result["exceeded"]:
            result["note"] = f"{result['exceeded']} memory_exceeded/recycling events"
        sup.terminate()
    return result


# ---------------------------------------------------------------- report


def cell(values, fmt, spread=True):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    text = fmt.format(statistics.median(values))
    if spread and len(values) > 1:
        text += f" [{fmt.format(min(values))}–{fmt.format(max(values))}]"
    return text


def table(columns, results, rows):
    """Markdown: a column per variant; rows: (name, key, format, ticks_key)."""
    print("| measure | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name, key, fmt, ticks_key in rows:
        cells = []
        for column in columns:
            runs = [r for r in results[column] if not r.get("error")]
            text = cell([r.get(key) for r in runs], fmt)
            if ticks_key and runs and all(r.get(ticks_key) is not None for r in runs):
                text += f" ({'/'.join(str(r[ticks_key]) for r in runs)} ticks)"
            cells.append(text)
        print(f"| {name} | " + " | ".join(cells) + " |")


def ratio(results, key, over, under):
    a = [r[key] for r in results[over] if r.get(key) is not None]
    b = [r[key] for r in results[under] if r.get(key) is not None]
    if not a or not b or statistics.median(b) == 0:
        return "n/a (0 without checks)"
    return f"{statistics.median(a) / statistics.median(b):.1f}×"


def report_failures(results):
    failed = False
    for column, runs in results.items():
        for i, r in enumerate(runs):
            if r.get("error"):
                failed = True
                print(f"{column}, round {i + 1} FAILED: {r['error']}")
            if r.get("note"):
                print(f"{column}, round {i + 1}: {r['note']}")
            if r.get("dropped_lines"):
                print(f"{column}, round {i + 1}: the supervisor dropped log lines: {r['dropped_lines'][-1]}")
            if r.get("killed_in_cleanup"):
                print(f"{column}, round {i + 1}: the cleanup had to SIGKILL {r['killed_in_cleanup']} processes")
    return failed


def alternate(variants, rounds):
    results = {name: [] for name, _ in variants}
    for round_ in range(rounds):
        order = variants if round_ % 2 == 0 else list(reversed(variants))
        for name, fn in order:
            log(f"round {round_ + 1}/{rounds}: {name}")
            r = fn()
            log(f"  {r.get('error') or ', '.join(f'{k} {v:.3g}' for k, v in r.items() if isinstance(v, float))}")
            results[name].append(r)
            time.sleep(0.5)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["all", "checks", "memory"], default="all")
    parser.add_argument("--instances", type=int, default=100, help="part 1: HTTP workers")
    parser.add_argument("--memory-instances", default="100,1000", help="part 2: comma-separated Ns")
    parser.add_argument("--duration", type=float, default=30.0, help="CPU window (s)")
    parser.add_argument("--probe", type=float, default=5.0, help="part 2: probe window (s)")
    parser.add_argument("--settle", type=float, default=2.0, help="after all_ready, before measuring (s)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--base-port", type=int, default=19000)
    parser.add_argument("--timeout", type=float, default=120.0, help="wait for all_ready (s)")
    harness.add_binary_option(parser)
    args = parser.parse_args()
    try:
        sizes = [int(x) for x in args.memory_instances.split(",") if x.strip()]
    except ValueError:
        parser.error("--memory-instances: comma-separated integers")
    if args.instances < 1 or not sizes or min(sizes) < 1 or args.rounds < 1 or args.duration <= 0 or args.probe <= 0:
        parser.error("counts, --rounds, --duration and --probe must be positive")
    binaries = harness.begin(parser, args.binary)
    label, binary = binaries[0]
    harness.print_header(binaries[:1], f"{args.rounds} rounds; CPU windows of {args.duration:g} s "
                                       f"after {args.settle:g} s of settling; ticks of 1/{TICKS} s")
    failed = False

    if args.part in ("all", "checks"):
        n = args.instances
        base = free_window(args.base_port, n)
        variants = [("no checks", lambda: run_checks(binary, n, base, False, args)),
                    ("HTTP check every 1 s", lambda: run_checks(binary, n, base, True, args))]
        results = alternate(variants, args.rounds)
        print(f"\n### {n} HTTP workers (ports {base}–{base + n - 1}), with and without "
              f"`health: {{http, every: 1s}}`, median [min–max] of {args.rounds} rounds\n")
        table([v for v, _ in variants], results, [
            (f"supervisor CPU over {args.duration:g} s (% of a core)", "cpu", "{:.3f}", "ticks"),
            ("the same from its threads' schedstat (ns; % of a core)", "sched_cpu", "{:.4f}", None),
            ("… of which its loop thread", "loop_cpu", "{:.3f}", "loop_ticks"),
            ("… of which its blocking-pool threads", "pool_cpu", "{:.3f}", "pool_ticks"),
            ("helper processes' CPU (% of a core)", "helper_cpu", "{:.3f}", "helper_ticks"),
            (f"the {n} workers' CPU together (% of a core)", "worker_cpu", "{:.2f}", None),
            ("supervisor RSS after the window (MiB)", "rss_mib", "{:.1f}", None),
            ("failed checks in the window", "failed_checks", "{:.0f}", None),
            ("instances `healthy` in status after the window", "healthy", "{:.0f}", None),
        ])
        print()
        print(f"checks/no checks, supervisor CPU: {ratio(results, 'cpu', variants[1][0], variants[0][0])} "
              f"(ticks), {ratio(results, 'sched_cpu', variants[1][0], variants[0][0])} (schedstat); "
              f"goal (issue 12): ≤ 1 % of a core")
        failed |= report_failures(results)

    if args.part in ("all", "memory"):
        biggest = max(sizes)
        variants = [(f"{m} × sleep, max_memory, memory_check 1s",
                     (lambda m=m: run_memory(binary, m, True, args))) for m in sizes]
        variants.append((f"{biggest} × sleep, no max_memory (baseline, probe only)",
                         lambda: run_memory(binary, biggest, False, args, cpu_window=False)))
        results = alternate(variants, args.rounds)
        print(f"\n### Memory measurement every 1 s (`max_memory: {MEMORY_LIMIT}`), "
              f"median [min–max] of {args.rounds} rounds\n")
        table([v for v, _ in variants], results, [
            (f"supervisor CPU over {args.duration:g} s (% of a core)", "cpu", "{:.3f}", "ticks"),
            ("the same from its threads' schedstat (ns; % of a core)", "sched_cpu", "{:.4f}", None),
            ("… of which its loop thread", "loop_cpu", "{:.3f}", "loop_ticks"),
            ("… of which its blocking-pool threads", "pool_cpu", "{:.3f}", "pool_ticks"),
            ("CPU per measurement (ms)", "ms_per_measurement", "{:.1f}", None),
            ("CPU per measurement per instance (µs)", "us_per_instance", "{:.1f}", None),
            ("the loop thread's CPU per measurement (ms, schedstat)", "loop_ms_per_measurement", "{:.2f}", None),
            ("control round trip while measuring: max (ms)", "probe_max", "{:.2f}", None),
            ("control round trip: p99 (ms)", "probe_p99", "{:.2f}", None),
            ("control round trip: median (ms)", "probe_median", "{:.3f}", None),
            ("round trips over 10 ms", "probe_over_10ms", "{:.0f}", None),
            ("probes sent", "probes", "{:.0f}", None),
            ("supervisor CPU while probing (% of a core)", "probe_cpu", "{:.2f}", None),
            ("supervisor RSS (MiB)", "rss_mib", "{:.1f}", None),
        ])
        print()
        failed |= report_failures(results)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted (what it started is cleaned up)")
        sys.exit(130)
