#!/usr/bin/env python3
"""Core overhead of supervise with 100 instances of `sleep`.

Prints: time from start to all running, supervisor RSS, supervisor CPU over
30 s idle, and crash-to-respawn latency (median of 100 SIGKILLs, minus the
configured backoff.initial). Builds the release binary first. Bounded, local,
and it kills only the processes it started (the supervisor, by pid; the
supervisor's undertaker takes the workers with it).

    python3 bench/core.py [--instances 100] [--idle 30] [--kills 100]
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKOFF_INITIAL_MS = 100


def parse_ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def proc_stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Events:
    def __init__(self, stream):
        self.stream = stream

    def until(self, predicate, limit=60):
        deadline = time.time() + limit
        for line in self.stream:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if predicate(event):
                return event
            if time.time() > deadline:
                break
        raise SystemExit("timed out waiting for an event")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--kills", type=int, default=100)
    args = parser.parse_args()

    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    binary = os.path.join(ROOT, "target", "release", "supervise")
    work = tempfile.mkdtemp(prefix="supervise-bench-")
    runtime = os.path.join(work, "run")
    os.mkdir(runtime, 0o700)
    with open(os.path.join(work, "ecosystem.yaml"), "w") as f:
        f.write(
            "apps:\n  sleepers:\n    command: [sleep, '100000']\n"
            f"    instances: {args.instances}\n    ready: none\n"
            f"    backoff: {{initial: {BACKOFF_INITIAL_MS}ms}}\n"
        )
    env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
    env.pop("NOTIFY_SOCKET", None)
    started = time.time()
    sup = subprocess.Popen(
        [binary, "--log-format", "json", "-f", "ecosystem.yaml"],
        cwd=work, env=env, stdout=subprocess.PIPE, text=True, bufsize=1,
    )
    try:
        events = Events(sup.stdout)
        pids = {}
        def track(e):
            if e.get("event") == "spawned":
                pids[e["slot"]] = e["pid"]
            return e.get("event") == "all_ready"
        events.until(track)
        all_running = time.time() - started

        rss = rss_kb(sup.pid)
        ticks = os.sysconf("SC_CLK_TCK")
        before = proc_stat(sup.pid)
        time.sleep(args.idle)
        idle_cpu = (proc_stat(sup.pid) - before) / ticks / args.idle * 100

        # Each slot is killed at most once per round, so every restart is a
        # first one (backoff.initial) and not a later, longer backoff step.
        order = []
        while len(order) < args.kills:
            order += random.sample(list(pids), len(pids))
        latencies = []
        for slot in order[: args.kills]:
            killed_at = time.time()
            os.kill(pids[slot], signal.SIGKILL)
            respawn = events.until(lambda e: e.get("event") == "spawned" and e.get("slot") == slot)
            pids[slot] = respawn["pid"]
            latencies.append((parse_ts(respawn["timestamp"]) - killed_at) * 1000 - BACKOFF_INITIAL_MS)
        respawn_ms = statistics.median(latencies)

        print(f"instances                      {args.instances}")
        print(f"start to all running           {all_running * 1000:.0f} ms")
        print(f"supervisor RSS                 {rss / 1024:.1f} MiB")
        print(f"supervisor CPU, {args.idle:.0f} s idle        {idle_cpu:.3f} % of a core")
        print(f"respawn after backoff.initial  {respawn_ms:.2f} ms (median of {args.kills} SIGKILLs;"
              f" p90 {statistics.quantiles(latencies, n=10)[-1]:.2f} ms)")
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sup.kill()
            sup.wait()


if __name__ == "__main__":
    sys.exit(main())
