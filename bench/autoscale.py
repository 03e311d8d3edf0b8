#!/usr/bin/env python3
"""Autoscale against fixed counts, through a load step, side by side in one run.

The server is examples/autoscale/server.py (one request at a time: WORK_MS
of CPU, then SLEEP_MS of waiting, as for a database), so one instance serves
about 1 / (WORK_MS + SLEEP_MS) requests a second. Each setup runs the same
schedule: IDLE_BEFORE s with no load, LOAD s of an open-loop load at
--times × one instance's capacity (requests sent at their times whatever the
answers, each from a pool of client threads; latency counted from the time a
request was due, so a backlog in the generator counts too), then IDLE_AFTER
s with no load. Setups:

  - fixed 1:     `instances: 1`
  - fixed max:   `instances: MAX`
  - autoscale:   `autoscale: {min: 1, max: MAX, queue: QUEUE, up_after, down_after}`

For each: requests sent, failed (refused, reset, or no answer within the
client timeout), p50/p99/max latency of the answered ones, and the
instance-seconds used (`status --json` every 0.25 s: ready instances ×
time). All on 127.0.0.1, bounded in time; every process started is stopped
(see bench/harness.py).

  python3 bench/autoscale.py [--binary PATH] [--times 8] [--max 10]
  python3 bench/autoscale.py --load-only --port 5100   # load an example already running
"""
import argparse
import json
import os
import queue as queues
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import log  # noqa: E402

SERVER = os.path.join(harness.ROOT, "examples", "autoscale", "server.py")
WORK_MS = 2
SLEEP_MS = 20
IDLE_BEFORE = 10.0
LOAD = 20.0
IDLE_AFTER = 20.0
CLIENT_TIMEOUT = 5.0
CLIENT_THREADS = 128
STATUS_EVERY = 0.25
# The start of the load step: its latency is reported apart as well.
RAMP = 1.0
# After the backlog of the step itself has drained (it drains at the
# fixed count's spare rate: see BENCHMARKS.md).
RAMP_DRAINED = 5.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_request(port):
    if not harness.http_ok(port, CLIENT_TIMEOUT):
        raise OSError("no 200")


def open_loop(port, rate, seconds):
    """Send `rate` requests a second for `seconds`: ([(due, latency)] of the
    answered, seconds from the start, failed, sent)."""
    due = queues.Queue()
    latencies, failed = [], [0]
    lock = threading.Lock()

    start = time.monotonic()

    def client():
        while True:
            at = due.get()
            if at is None:
                return
            if time.monotonic() - at > CLIENT_TIMEOUT:
                # Due so long ago that no client could send it in time: the
                # load outran the threads, and that request is lost.
                with lock:
                    failed[0] += 1
                continue
            try:
                one_request(port)
                took = time.monotonic() - at
                with lock:
                    latencies.append((at - start, took))
            except OSError:
                with lock:
                    failed[0] += 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENT_THREADS)]
    for t in threads:
        t.start()
    sent = 0
    while True:
        at = start + sent / rate
        if at - start >= seconds:
            break
        delay = at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        due.put(at)
        sent += 1
    for _ in threads:
        due.put(None)
    # Each request ends within two client timeouts (connect, then the
    # answer), and stale ones are dropped: the threads end by then.
    deadline = time.monotonic() + 2 * CLIENT_TIMEOUT + 1
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return list(latencies), failed[0], sent


def ecosystem(port, setup, maximum, queue_target, up_after, down_after):
    count = {"fixed 1": "    instances: 1\n", "fixed max": f"    instances: {maximum}\n"}.get(setup)
    scale = count or (
        f"    autoscale: {{min: 1, max: {maximum}, queue: {queue_target}, "
        f"up_after: {up_after}, down_after: {down_after}}}\n"
    )
    return (
        "apps:\n  web:\n"
        f"    command: [python3, {json.dumps(SERVER)}]\n"
        f"    listen: 127.0.0.1:{port}\n"
        "    ready: {delay: 200ms}\n"
        f"    env: {{WORK_MS: \"{WORK_MS}\", SLEEP_MS: \"{SLEEP_MS}\"}}\n"
        + scale
    )


def ready_count(sup):
    out = subprocess.run(
        [sup.binary, "status", "--json", "-f", sup.file], env=sup.env,
        capture_output=True, timeout=10,
    )
    if out.returncode != 0:
        return None
    status = json.loads(out.stdout)
    return sum(1 for app in status["apps"] for w in app["workers"] if w.get("ready"))


def run(binary, setup, args):
    port = free_port()
    text = ecosystem(port, setup, args.max, args.queue, args.up_after, args.down_after)
    sup = harness.Supervisor(binary, text, "supervise-autoscale-")
    result = {"setup": setup}
    capacity = 1000.0 / (WORK_MS + SLEEP_MS)
    with harness.running(sup, result):
        want = args.max if setup == "fixed max" else 1
        sup.gather(lambda events: sum(e.get("event") == "ready" for e in events) >= want,
                   60, f"{want} ready")
        instance_seconds = [0.0]
        stop = threading.Event()

        def watch():
            last = time.monotonic()
            while not stop.is_set():
                count = ready_count(sup) or 0
                now = time.monotonic()
                instance_seconds[0] += count * (now - last)
                last = now
                stop.wait(STATUS_EVERY)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(IDLE_BEFORE)
        began = time.time()
        answered, failed, sent = open_loop(port, capacity * args.times, LOAD)
        time.sleep(IDLE_AFTER)
        stop.set()
        watcher.join()
        latencies = sorted(took for _, took in answered)
        settled = sorted(took for due, took in answered if due >= RAMP)
        drained = sorted(took for due, took in answered if due >= RAMP_DRAINED)
        q = lambda values, p: values[min(len(values) - 1, int(p * len(values)))] * 1000 if values else float("nan")
        with sup.cond:
            steps = [(harness.parse_ts(e.get("timestamp")) or began, e.get("from"), e.get("to"))
                     for e in sup.events if e.get("event") == "autoscaled"]
        result.update(sent=sent, failed=failed, p50=q(latencies, 0.5), p99=q(latencies, 0.99),
                      p99_settled=q(settled, 0.99), p99_drained=q(drained, 0.99),
                      max=latencies[-1] * 1000 if latencies else float("nan"),
                      instance_seconds=instance_seconds[0],
                      steps=[(round(at - began, 2), f, t) for at, f, t in steps])
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_binary_option(parser)
    parser.add_argument("--times", type=float, default=8.0, help="the load, in instances' capacity")
    parser.add_argument("--max", type=int, default=10)
    parser.add_argument("--queue", type=int, default=4)
    parser.add_argument("--up-after", default="250ms")
    parser.add_argument("--down-after", default="1s")
    parser.add_argument("--load-only", action="store_true",
                        help="only send the load step to --port (a server already running)")
    parser.add_argument("--port", type=int, default=5100)
    args = parser.parse_args()
    if args.load_only:
        capacity = 1000.0 / (WORK_MS + SLEEP_MS)
        answered, failed, sent = open_loop(args.port, capacity * args.times, LOAD)
        print(f"sent {sent}, failed {failed}, answered {len(answered)}")
        return
    binaries = harness.parse_binaries(parser, args.binary)
    label, binary = binaries[0]
    harness.print_header(binaries, f"a load step of {args.times:g}× one instance "
                         f"({IDLE_BEFORE:g} s idle, {LOAD:g} s loaded, {IDLE_AFTER:g} s idle)")
    results = []
    for setup in ("fixed 1", "fixed max", "autoscale"):
        log(f"{setup}…")
        results.append(run(binary, setup, args))
    print()
    print(f"| setup | sent | failed | p50 (ms) | p99 (ms) | p99 after the first {RAMP:g} s (ms) "
          f"| p99 after the first {RAMP_DRAINED:g} s (ms) | max (ms) | instance-seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['setup']} | failed: {r['error']} | | | | | | | |")
            continue
        print(f"| {r['setup']} | {r['sent']} | {r['failed']} | {r['p50']:.1f} | {r['p99']:.1f} "
              f"| {r['p99_settled']:.1f} | {r['p99_drained']:.1f} | {r['max']:.0f} "
              f"| {r['instance_seconds']:.0f} |")
    for r in results:
        if r.get("steps"):
            steps = ", ".join(f"{f}→{t} at {at:+.2f} s" for at, f, t in r["steps"])
            print(f"\n{r['setup']} steps (from the start of the load): {steps}")
    by = {r["setup"]: r for r in results if "error" not in r}
    if "fixed max" in by and "autoscale" in by:
        fixed, auto = by["fixed max"], by["autoscale"]
        print(f"\nautoscale / fixed max: p99 {auto['p99'] / fixed['p99']:.2f}×, "
              f"instance-seconds {auto['instance_seconds'] / fixed['instance_seconds']:.2f}×, "
              f"failed {auto['failed']}")
    if any("error" in r for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
