#!/usr/bin/env python3
"""How fast a saved edit reaches the processes.

Scales an app of `sleep` workers 1 → 50 and 50 → 1 by rewriting the ecosystem
file (write a temp file, rename it over), 20 times each, and prints medians of:
the save to the first new worker spawned (debounce included), the save to the
50th, and for 50 → 1 the save to the last stop signal sent and to the last
worker gone. Builds the release binary first; loopback-free, bounded, and it
kills only the supervisor it started (by pid).

    python3 bench/reload.py [--rounds 20] [--instances 50]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ts(event):
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def app(instances):
    return (
        "apps:\n  sleepers:\n    command: [sleep, '100000']\n"
        f"    instances: {instances}\n    ready: none\n    kill_timeout: 5s\n"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--instances", type=int, default=50)
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="supervise-reload-")
    runtime = os.path.join(work, "run")
    os.mkdir(runtime, 0o700)
    path = os.path.join(work, "ecosystem.yaml")
    with open(path, "w") as f:
        f.write(app(1))
    env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
    env.pop("NOTIFY_SOCKET", None)
    sup = subprocess.Popen(
        [os.path.join(ROOT, "target", "release", "supervise"), "--log-format", "json", "-f", "ecosystem.yaml"],
        cwd=work, env=env, stdout=subprocess.PIPE, text=True, bufsize=1,
    )
    lines = iter(sup.stdout)

    def until(predicate):
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if predicate(event):
                return event
        raise SystemExit("the supervisor stopped")

    def save(instances):
        temp = path + ".tmp"
        with open(temp, "w") as f:
            f.write(app(instances))
        saved = time.time()
        os.rename(temp, path)
        return saved

    up_first, up_all, down_signalled, down_gone = [], [], [], []
    try:
        until(lambda e: e.get("event") == "all_ready")
        n = args.instances
        for _ in range(args.rounds):
            saved = save(n)
            spawns = [until(lambda e: e.get("event") == "spawned") for _ in range(n - 1)]
            up_first.append((ts(spawns[0]) - saved) * 1000)
            up_all.append((ts(spawns[-1]) - saved) * 1000)
            saved = save(1)
            stops = [until(lambda e: e.get("event") == "stopping") for _ in range(n - 1)]
            down_signalled.append((ts(stops[-1]) - saved) * 1000)
            gone = [until(lambda e: e.get("event") == "stopped") for _ in range(n - 1)]
            down_gone.append((max(ts(g) for g in gone) - saved) * 1000)
            time.sleep(0.2)  # let the next save be a separate burst
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sup.kill()
            sup.wait()

    def show(label, values):
        print(f"{label:44s} median {statistics.median(values):6.1f} ms   "
              f"min {min(values):6.1f}   max {max(values):6.1f}")

    print(f"{args.rounds} rounds, {args.instances} instances of sleep")
    show(f"1 → {n}: save to first worker spawned", up_first)
    show(f"1 → {n}: save to worker {n} spawned", up_all)
    show(f"{n} → 1: save to the last stop signal sent", down_signalled)
    show(f"{n} → 1: save to the last worker gone", down_gone)


if __name__ == "__main__":
    sys.exit(main())
