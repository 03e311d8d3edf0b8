#!/usr/bin/env python3
"""Memory recycle: supervise's `max_memory` against pm2's `max_memory_restart`
on the same leaking Node server, under load (issue 12).

The server is examples/node-cluster/server.js (the CPU-heavy handler that
drains on SIGTERM/SIGINT), copied into a temp dir with a few lines appended
(examples/ is not changed): with LEAK=R it keeps R MB more every second
(a Buffer of R/20 MB filled every 50 ms, so the pages are really used), and
it prints timing lines on its own clock (`Date.now()`): `listening` (after
its `listen`; under supervise it then runs `systemd-notify --ready` for
`ready: notify`), `crossed` (the first time its own RSS,
`process.memoryUsage.rss()`, checked every 50 ms, is above LIMIT_BYTES),
`signalled` (SIGTERM or SIGINT: its drain begins) and `exit`. Both tools
run that one file, 2 instances, with the same limit (--limit, default
150M = 150 MiB: `max_memory: 150M` and
`--max-memory-restart 150M`, both 1024-based), the same 10 s kill timeout,
and check memory every --interval seconds (default 1: supervise's top-level
`memory_check: 1s`; pm2's worker interval PM2_WORKER_INTERVAL=1000, read by
the pm2 daemon at its start, lib/Worker.js and constants.js; pm2's default
is 30 s).

  - supervise: `--log-format json`, `listen: 127.0.0.1:PORT` (one shared
    socket), `ready: notify`, `kill_timeout: 10s`, `max_memory`, the other
    keys default (`reload: {max_surge: 1, max_unavailable: 0}`, `backoff`
    from 100 ms).
  - supervise-reset: the same with `backoff: {reset_after: 3s}`. A recycle
    counts as a restart, and restart n waits 100 ms · 2^(n-1) unless the
    instance was ready for `reset_after` (default 60 s) first; a worker that
    leaks 20 MB/s lives ~6 s, so with the defaults every recycle of a slot
    waits twice as long as the one before (100 ms, 200 ms, … 3.2 s), while
    the old worker keeps serving and leaking. This variant shows the
    machinery without that growth (every recycle is attempt 1: 100 ms).
  - pm2 7 (installed into bench/.cache with its own PM2_HOME, as
    bench/cluster.py does), cluster mode: `pm2 start server.js -i 2
    --kill-timeout 10000 --max-memory-restart 150M`, with
    PM2_DISCRETE_MODE=true PM2_DISABLE_VERSION_CHECK=1 and
    PM2_LOG_DATE_FORMAT with milliseconds (for its log's timestamps).

Each run: start the tool, wait until both instances are ready, then
`wrk -t2 -c50 -d{--duration}s` (default 40 s: covers ≥ 3 recycles) against
127.0.0.1:PORT, then wait (at most 15 s) for the replacements of the
recycles begun during it, then stop. Per recycle (every recycle begun
during the wrk window):

  - crossing → detected: from the worker's own `crossed` line to supervise's
    `memory_exceeded` event / pm2's log line `[PM2][WORKER] Process N
    restarted because it exceeds --max-memory-restart value` (its timestamp);
  - detected → replacement ready: supervise: `memory_exceeded` to the `ready`
    event of the slot's next worker; pm2: its restart line to the next
    `-reload- New worker listening` (pm2 waits for the new worker's
    `listening`, then stops the old one);
  - detected → new worker listening (the new worker's own `listening` line:
    the same point for both tools);
  - detected → the replacement spawned (supervise's `spawned` event for the
    slot; pm2's `App [api:N] starting in -cluster mode-` log line), and
    supervise's backoff delay before it (`recycling.delay_ms`: a recycle
    counts as a restart);
  - detected → the old worker got its stop signal (its own `signalled`
    line: SIGTERM from supervise, SIGINT from pm2), and → it exited
    (supervise: its own `exit` line; pm2: `App [api:_old_N] exited` in its
    log, as a cluster worker's last lines do not reach pm2's log files);
  - the RSS the tool measured when it detected, and (supervise only, see
    above) the old worker's own RSS at its exit.

Per tool: requests sent, non-2xx answers and socket errors from wrk; and the
number of recycles. Rounds alternate the order of the tools (--rounds,
default 2), medians [min–max] over all recycles of all rounds. A
detection later than 2 periods after the crossing is printed with what
supervise logged in between.

Loopback only; bounded (every wait has a limit; wrk is killed after
duration + 60 s; pm2 commands have 120 s); cleanup on failure and Ctrl-C:
the supervisor and what it started by pidfd (bench/harness.py), pm2 by `pm2
kill` on its private PM2_HOME, then by pidfd whatever pm2 process this
script recorded (its daemon, from PM2_HOME/pm2.pid, and the daemon's
children) that is still alive. Never fails on a timing.

    python3 bench/recycle.py [--duration 40] [--rounds 2] [--leak 20] [--limit 150M]
        [--interval 1] [--binary PATH] [--tools supervise,supervise-reset,pm2]
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no bench/__pycache__ left in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from cluster import parse_wrk  # noqa: E402
from harness import Failed, log, parse_ts  # noqa: E402
from recycle_pm2 import Pm2, pm2_recycles  # noqa: E402

ROOT = harness.ROOT
CACHE = os.path.join(ROOT, "bench", ".cache")
SERVER_JS = os.path.join(ROOT, "examples", "node-cluster", "server.js")
READY_LIMIT = 60.0

LEAK_JS = r"""

// ---- appended by bench/recycle.py (not part of the example): a steady
// leak of LEAK MB/s, and timing lines on the worker's own clock.
{
  const rate = Number(process.env.LEAK || 0) * 1e6;
  const limit = Number(process.env.LIMIT_BYTES || 0);
  const kept = [];
  const say = (what) => console.log(JSON.stringify({
    bench: what, t: Date.now(), pid: process.pid, instance, rss: process.memoryUsage.rss() }));
  let crossed = false;
  if (rate > 0) {
    const tick = 50;
    setInterval(() => {
      kept.push(Buffer.allocUnsafe(Math.round(rate * tick / 1000)).fill(0x5a));
      if (!crossed && limit > 0 && process.memoryUsage.rss() > limit) {
        crossed = true;
        say('crossed');
      }
    }, tick);
  }
  server.on('listening', () => {
    say('listening');
    if (process.env.NOTIFY_SOCKET) {
      require('child_process').execFile('systemd-notify', ['--ready'], () => {});
    }
  });
  process.on('SIGTERM', () => say('signalled'));
  process.on('SIGINT', () => say('signalled'));
  process.on('exit', () => say('exit'));
}
"""


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}[m.group(2)]


def install():
    if shutil.which("wrk") is None:
        log("installing wrk")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, timeout=600)
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "wrk"], check=True, timeout=600)
    pm2 = os.path.join(CACHE, "node_modules", ".bin", "pm2")
    if not os.path.exists(pm2):
        log("installing pm2 7 into bench/.cache")
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", CACHE, "pm2@7", "--no-audit", "--no-fund", "--silent"],
                       check=True, timeout=600)
    for tool in ("node", "systemd-notify"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed")
    return pm2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_text():
    with open(SERVER_JS) as f:
        return f.read() + LEAK_JS


def bench_line(text):
    """The JSON timing line of the worker, or None."""
    if not text or '"bench"' not in text:
        return None
    try:
        line = json.loads(text[text.index("{"):])
    except ValueError:
        return None
    return line if isinstance(line, dict) and "bench" in line else None


class Wrk:
    def __init__(self, port, duration, connections):
        self.duration = duration
        self.process = subprocess.Popen(
            ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", f"http://127.0.0.1:{port}/"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.begun = time.time()

    def result(self):
        try:
            out, _ = self.process.communicate(timeout=self.duration + 60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            raise Failed("wrk did not finish")
        self.ended = time.time()
        r = parse_wrk(out)
        if not r["requests"]:
            raise Failed(f"wrk: {out.strip()[-300:]}")
        return r

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()  # our own unreaped child
            self.process.wait(timeout=10)


# ---------------------------------------------------------------- supervise


RESET_AFTER = "3s"
NAMES = {"supervise": "supervise (`max_memory`, default backoff)",
         "supervise-reset": f"supervise, `backoff: {{reset_after: {RESET_AFTER}}}`",
         "pm2": "pm2 (`max_memory_restart`, cluster mode)"}
FINISH_LIMIT = 15.0  # after wrk, for the replacements of the recycles begun in its window


def supervise_run(binary, args, port, reset_after=None):
    text = (
        f"memory_check: {args.interval:g}s\n"
        "apps:\n  api:\n"
        "    command: [node, server.js]\n"
        "    instances: 2\n"
        f"    listen: 127.0.0.1:{port}\n"
        "    ready: notify\n"
        "    kill_timeout: 10s\n"
        f"    max_memory: {args.limit}\n"
        f"    env: {{LEAK: '{args.leak:g}', LIMIT_BYTES: '{parse_size(args.limit)}'}}\n"
    )
    if reset_after:
        text += f"    backoff: {{reset_after: {reset_after}}}\n"
    result = {}
    sup = harness.Supervisor(binary, text, "supervise-recycle-")
    with open(os.path.join(sup.work, "server.js"), "w") as f:
        f.write(server_text())
    wrk = None
    with harness.running(sup, result):
        sup.next(lambda e: e.get("event") == "all_ready", READY_LIMIT, "`all_ready` (2 node workers)")
        wrk = Wrk(port, args.duration, args.connections)
        try:
            result.update(wrk.result())
        finally:
            wrk.stop()
        # Let the recycles begun in the window finish (bounded).
        deadline = time.time() + FINISH_LIMIT
        while time.time() < deadline:
            with sup.cond:
                events = list(sup.events)
            if all(r.get("ready_ms") is not None for r in supervise_recycles(events, wrk.begun, wrk.ended)):
                break
            time.sleep(0.1)
        took, left = sup.terminate()
        with sup.cond:
            events = list(sup.events)
        result["recycles"] = supervise_recycles(events, wrk.begun, wrk.ended)
        result["late"] = late_detections(events, args.interval)
        result["exceeded_total"] = sum(1 for e in events if e.get("event") == "memory_exceeded")
        if left:
            result["note"] = f"{len(left)} workers alive after the supervisor exited"
    return result


def supervise_recycles(events, begun, ended):
    lines = {}  # (kind, pid) -> the worker's timing line
    for e in events:
        if e.get("event") == "output":
            line = bench_line(e.get("line"))
            if line:
                lines.setdefault((line["bench"], line["pid"]), line)
    recycles = []
    for i, e in enumerate(events):
        if e.get("event") != "memory_exceeded":
            continue
        at = parse_ts(e.get("timestamp"))
        if at is None or not begun <= at <= ended:
            continue
        slot, old = e.get("slot"), e.get("pid")
        r = {"slot": slot, "rss_detected": e.get("rss_bytes")}
        crossed = lines.get(("crossed", old))
        if crossed:
            r["detect_ms"] = (at - crossed["t"] / 1000) * 1000
        for later in events[i + 1:]:
            kind = later.get("event")
            if kind == "recycling" and later.get("pid") == old and "delay_ms" not in r:
                r["delay_ms"] = later.get("delay_ms")
            if kind == "spawned" and later.get("slot") == slot and later.get("app") == e.get("app") \
                    and "spawn_ms" not in r:
                r["spawn_ms"] = (parse_ts(later["timestamp"]) - at) * 1000
            if kind == "ready" and later.get("slot") == slot and later.get("pid") != old \
                    and later.get("app") == e.get("app"):
                r["ready_ms"] = (parse_ts(later["timestamp"]) - at) * 1000
                listening = lines.get(("listening", later.get("pid")))
                if listening:
                    r["listening_ms"] = (listening["t"] / 1000 - at) * 1000
                break
        signalled = lines.get(("signalled", old))
        if signalled:
            r["signalled_ms"] = (signalled["t"] / 1000 - at) * 1000
        exited = lines.get(("exit", old))
        if exited:
            r["old_exit_ms"] = (exited["t"] / 1000 - at) * 1000
            r["rss_at_exit"] = exited["rss"]
        recycles.append(r)
    return recycles


def late_detections(events, interval):
    """For each `memory_exceeded` more than 2 periods after the worker's own
    `crossed` line: what supervise logged for that app in between."""
    crossed = {}
    for e in events:
        line = bench_line(e.get("line")) if e.get("event") == "output" else None
        if line and line["bench"] == "crossed":
            crossed.setdefault(line["pid"], line["t"] / 1000)
    notes = []
    for e in events:
        if e.get("event") != "memory_exceeded" or e.get("pid") not in crossed:
            continue
        at, since = parse_ts(e.get("timestamp")), crossed[e["pid"]]
        if at is None or at - since <= 2 * interval:
            continue
        between = [f"{(parse_ts(x['timestamp']) - since) * 1000:+.0f} ms {x['event']} slot {x.get('slot')} "
                   f"pid {x.get('pid')}" + (f" delay {x['delay_ms']} ms" if "delay_ms" in x else "")
                   for x in events
                   if x.get("event") in ("memory_exceeded", "recycling", "spawned", "ready", "stopping", "stopped")
                   and since <= (parse_ts(x.get("timestamp")) or 0) <= at]
        notes.append(f"slot {e.get('slot')} pid {e['pid']} crossed the limit {(at - since) * 1000:.0f} ms before "
                     f"its memory_exceeded; from its crossing: " + "; ".join(between))
    return notes


# ---------------------------------------------------------------- pm2


def pm2_run(pm2_bin, args, port):
    result = {}
    pm = Pm2(pm2_bin, server_text(), {"PORT": str(port), "LEAK": f"{args.leak:g}",
                                      "LIMIT_BYTES": str(parse_size(args.limit)),
                                      "PM2_WORKER_INTERVAL": str(int(args.interval * 1000))},
             bench_line)
    wrk = None
    try:
        pm.start(args.limit)
        deadline = time.time() + READY_LIMIT
        while len({line["pid"] for line in pm.lines("listening")}) < 2:
            if time.time() > deadline:
                raise Failed("pm2: the 2 workers did not print `listening` within 60 s")
            time.sleep(0.05)
        pm.record()
        wrk = Wrk(port, args.duration, args.connections)
        while wrk.process.poll() is None and time.time() < wrk.begun + args.duration + 60:
            pm.record()  # the workers it starts, so that the cleanup knows them
            time.sleep(0.5)
        result.update(wrk.result())
        deadline = time.time() + FINISH_LIMIT
        while time.time() < deadline:
            pm.record()
            if all(r.get("ready_ms") is not None for r in pm2_recycles(pm, wrk.begun, wrk.ended)[0]):
                break
            time.sleep(0.1)
        result["recycles"], result["exceeded_total"], result["pm2_refused"] = pm2_recycles(
            pm, wrk.begun, wrk.ended)
        if result["pm2_refused"]:
            result["note"] = f"pm2 logged {result['pm2_refused']} refused reloads"
    except (Failed, OSError, subprocess.TimeoutExpired) as error:
        result["error"] = str(error)
    finally:
        if wrk is not None:
            wrk.stop()
        result["killed_in_cleanup"] = pm.cleanup()
    return result


# ---------------------------------------------------------------- report


def summary(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    text = fmt.format(statistics.median(values))
    if len(values) > 1:
        text += f" [{fmt.format(min(values))}–{fmt.format(max(values))}]"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=40, help="wrk's duration (s)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--leak", type=float, default=20.0, help="MB per second per worker")
    parser.add_argument("--limit", default="150M", help="NUMBER[K|M|G], 1024-based for both tools")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="memory check period (s): memory_check / PM2_WORKER_INTERVAL")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--tools", default="supervise,supervise-reset,pm2",
                        help="supervise (defaults), supervise-reset (backoff.reset_after 3s), pm2")
    harness.add_binary_option(parser)
    args = parser.parse_args()
    try:
        limit_bytes = parse_size(args.limit)
    except ValueError:
        parser.error("--limit: NUMBER[K|M|G]")
    tools = [t for t in args.tools.split(",") if t]
    if not tools or any(t not in NAMES for t in tools):
        parser.error(f"--tools: some of {', '.join(NAMES)}")
    if args.rounds < 1 or args.duration < 5 or args.leak <= 0 or args.interval <= 0:
        parser.error("--rounds ≥ 1, --duration ≥ 5, --leak and --interval > 0")
    binaries = harness.begin(parser, args.binary)
    _, binary = binaries[0]
    pm2_bin = install() if "pm2" in tools else None
    pm2_version = "-"
    if pm2_bin:  # from its package.json: `pm2 --version` would start a daemon
        with open(os.path.join(CACHE, "node_modules", "pm2", "package.json")) as f:
            pm2_version = json.load(f).get("version", "?")
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    harness.print_header(
        binaries[:1],
        f"pm2 {pm2_version}, node {node}; leak {args.leak:g} MB/s per worker, limit {args.limit} "
        f"({limit_bytes} bytes), memory checked every {args.interval:g} s by both; "
        f"wrk -t2 -c{args.connections} -d{args.duration}s; {args.rounds} rounds")

    results = {tool: [] for tool in tools}
    for round_ in range(args.rounds):
        order = tools if round_ % 2 == 0 else list(reversed(tools))
        for tool in order:
            log(f"round {round_ + 1}/{args.rounds}: {tool}")
            port = free_port()
            if tool == "supervise":
                r = supervise_run(binary, args, port)
            elif tool == "supervise-reset":
                r = supervise_run(binary, args, port, reset_after=RESET_AFTER)
            else:
                r = pm2_run(pm2_bin, args, port)
            if r.get("error"):
                log(f"  FAILED: {r['error']}")
            else:
                ready = [x.get("ready_ms") for x in r["recycles"] if x.get("ready_ms") is not None]
                log(f"  {r['requests']} requests, {r['non2xx']} non-2xx, {r['socket_errors']} socket errors; "
                    f"{len(r['recycles'])} recycles, detected→ready {summary(ready, '{:.0f}')} ms")
            results[tool].append(r)
            time.sleep(1)

    names = NAMES
    print(f"\n### Recycling a leaking Node server: 2 instances, {args.leak:g} MB/s each, limit {args.limit}, "
          f"checked every {args.interval:g} s, under `wrk -t2 -c{args.connections} -d{args.duration}s`\n")
    print("Per recycle (median [min–max] over the recycles of all rounds), ms:\n")
    print("| measure | " + " | ".join(names[t] for t in tools) + " |")
    print("|---|" + "---|" * len(tools))

    def recycles(tool):
        return [x for r in results[tool] if not r.get("error") for x in r["recycles"]]

    rows = [
        ("recycles in the wrk window (per round)", None),
        ("crossing the limit → detected", "detect_ms"),
        ("detected → replacement ready (supervise: `memory_exceeded` → `ready`; pm2: its log)", "ready_ms"),
        ("detected → the new worker's own `listening`", "listening_ms"),
        ("detected → the replacement spawned (supervise: `spawned`; pm2: `starting` in its log)", "spawn_ms"),
        ("… supervise's backoff delay before that spawn (`recycling.delay_ms`)", "delay_ms"),
        ("detected → the old worker got its stop signal (its own line)", "signalled_ms"),
        ("detected → the old worker exited (supervise: its `exit` line; pm2: `exited` in its log)",
         "old_exit_ms"),
    ]
    for name, key in rows:
        cells = []
        for tool in tools:
            if key is None:
                cells.append("/".join(str(len(r["recycles"])) for r in results[tool] if not r.get("error")) or "-")
            else:
                cells.append(summary([x.get(key) for x in recycles(tool)], "{:.0f}"))
        print(f"| {name} | " + " | ".join(cells) + " |")
    for name, key in [("RSS measured by the tool when it detected (MB)", "rss_detected"),
                      ("the old worker's own RSS at its exit (MB)", "rss_at_exit")]:
        cells = [summary([x[key] / 1e6 for x in recycles(tool) if x.get(key)], "{:.0f}") for tool in tools]
        print(f"| {name}; the limit is {limit_bytes / 1e6:.1f} MB | " + " | ".join(cells) + " |")

    print(f"\nUnder load, per round (`wrk -t2 -c{args.connections} -d{args.duration}s`):\n")
    print("| tool | round | requests | non-2xx | socket errors | recycles |")
    print("|---|---|---|---|---|---|")
    for tool in tools:
        for i, r in enumerate(results[tool]):
            if r.get("error"):
                print(f"| {tool} | {i + 1} | FAILED | | | |")
                continue
            print(f"| {tool} | {i + 1} | {r['requests']} | {r['non2xx']} | {r['socket_errors']} "
                  f"({r['error_detail']}) | {len(r['recycles'])} |")
    print()
    failed = False
    for tool in tools:
        for i, r in enumerate(results[tool]):
            if r.get("error"):
                failed = True
                print(f"{tool} round {i + 1} FAILED: {r['error']}")
            if r.get("note"):
                print(f"{tool} round {i + 1}: {r['note']}")
            for note in r.get("late", []):
                print(f"{tool} round {i + 1}: late detection: {note}")
            if r.get("killed_in_cleanup"):
                print(f"{tool} round {i + 1}: the cleanup had to SIGKILL {r['killed_in_cleanup']} processes")
            missing = [x for x in r.get("recycles", []) if x.get("ready_ms") is None]
            if missing:
                print(f"{tool} round {i + 1}: {len(missing)} recycles without a replacement ready before the end")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted (what it started is cleaned up)")
        sys.exit(130)
