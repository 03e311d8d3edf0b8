#!/usr/bin/env python3
"""Upgrading the supervisor itself: `supervise upgrade` against `pm2 update`.

1. The time from `supervise upgrade` to the new image answering `status`,
   with 100 and 1,000 instances of `sleep` (5 upgrades each, median and
   worst), and the `took_ms` the new image logs (from the request to the
   restored loop, the probe included).
2. The same server under both, with a client loop against it during the
   upgrade: examples/node-cluster's server.js, 2 instances — supervise
   sharing one socket (`supervise upgrade`), pm2 in cluster mode
   (`pm2 update`, which saves the process list, kills its daemon and every
   app, and starts them again). Requests answered, refused and failed, the
   longest gap without an answer, and whether the worker pids survived.

Installs what it needs (pm2 7 into bench/.cache) and builds supervise in
release, as bench/cluster.py does. Loopback only, bounded; stops every
process it started (supervise by pid, pm2 through its own `kill`). A
benchmark: not run in CI.

    python3 bench/upgrade.py [--upgrades 5]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (the shared harness: install, Supervise, Pm2)

ROOT = cluster.ROOT
BINARY = os.path.join(ROOT, "target", "release", "supervise")
# The most requests one client loop sends, whatever happens.
MAX_REQUESTS = 200_000


def client(supervisor):
    """Run `supervise ARGS -f ecosystem.yaml` against `supervisor`."""
    env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(supervisor.dir, "run"))

    def run(*args):
        return subprocess.run([BINARY, *args, "--file", "ecosystem.yaml"], cwd=supervisor.dir,
                              env=env, capture_output=True, text=True, timeout=60)
    return run


def workers_of(status, app):
    """Each worker of `app`: (slot, pid, restarts)."""
    for entry in status["apps"]:
        if entry["name"] == app:
            return sorted((w["slot"], w["pid"], w["restarts"]) for w in entry["workers"])
    return []


def time_upgrades(instances, upgrades):
    """Upgrade `upgrades` times with `instances` sleeps: per upgrade, the ms
    from the command to `status` answered by the new image, and took_ms."""
    supervisor = cluster.Supervise(instances, cluster.free_port(), command="[sleep, '100000']",
                                   extra="    ready: none\n")
    run = client(supervisor)
    try:
        before = json.loads(run("status", "--json").stdout)
        answered, took = [], []
        for n in range(1, upgrades + 1):
            started = time.perf_counter()
            upgrade = run("upgrade")
            if upgrade.returncode != 0:
                raise SystemExit(f"upgrade failed: {upgrade.stderr}")
            status = json.loads(run("status", "--json").stdout)
            answered.append((time.perf_counter() - started) * 1000)
            if status["supervisor"]["upgrades"] != n or workers_of(status, "api") != workers_of(before, "api"):
                raise SystemExit("the upgrade lost a worker or was not counted")
            supervisor.wait(lambda e, n=n: e.get("event") == "upgraded" and e.get("upgrades") == n)
            with supervisor.lock:
                took.append([e for e in supervisor.events if e.get("event") == "upgraded"][-1]["took_ms"])
            time.sleep(0.3)
        return answered, took
    finally:
        supervisor.stop()


def get(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.startswith(b"HTTP/1.1 200")


def load(port, stop, tally):
    """Requests one after another until `stop`; the longest gap without a 200."""
    last_ok = time.perf_counter()
    for _ in range(MAX_REQUESTS):
        if stop.is_set():
            break
        try:
            ok = get(port)
            tally["ok" if ok else "failed"] += 1
        except ConnectionRefusedError:
            tally["refused"] += 1
            ok = False
        except OSError:
            tally["failed"] += 1
            ok = False
        now = time.perf_counter()
        if ok:
            tally["gap_ms"] = max(tally["gap_ms"], (now - last_ok) * 1000)
            last_ok = now


def under_load(port, action):
    """Run `action` while a client loop hammers `port` (1 s before, 3 s after)."""
    tally = {"ok": 0, "refused": 0, "failed": 0, "gap_ms": 0.0}
    stop = threading.Event()
    thread = threading.Thread(target=load, args=(port, stop, tally))
    thread.start()
    time.sleep(1)
    started = time.perf_counter()
    action()
    took = (time.perf_counter() - started) * 1000
    time.sleep(3)
    stop.set()
    thread.join()
    return tally, took


def pm2_pids(pm2):
    listing = subprocess.run([pm2.pm2, "jlist"], env=pm2.env, capture_output=True, text=True, timeout=60)
    return sorted(p["pid"] for p in json.loads(listing.stdout or "[]"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upgrades", type=int, default=5)
    args = parser.parse_args()
    pm2_binary = cluster.install()

    rows = []
    for instances in (100, 1000):
        answered, took = time_upgrades(instances, args.upgrades)
        rows.append((instances, answered, took))
        cluster.log(f"{instances} instances: {answered} ms, took_ms {took}")

    port = cluster.free_port()
    supervisor = cluster.Supervise(2, port)
    run = client(supervisor)
    before = workers_of(json.loads(run("status", "--json").stdout), "api")
    sup_tally, sup_took = under_load(port, lambda: run("upgrade"))
    after = workers_of(json.loads(run("status", "--json").stdout), "api")
    supervisor.stop()

    port = cluster.free_port()
    pm2 = cluster.Pm2(pm2_binary, 2, port)
    try:
        pm2_before = pm2_pids(pm2)
        pm2_tally, pm2_took = under_load(port, lambda: pm2.run("update"))
        pm2_after = pm2_pids(pm2)
    finally:
        pm2.stop()

    print("\n| instances | `upgrade` → `status` answered by the new image, ms (median / worst) | `took_ms` logged (median / worst) |")
    print("|---|---|---|")
    for instances, answered, took in rows:
        print(f"| {instances} | {statistics.median(answered):.1f} / {max(answered):.1f} "
              f"| {statistics.median(took):.0f} / {max(took):.0f} |")
    print("\n| node-cluster server.js ×2, a client loop during it | command took, ms | answered | refused | failed | longest gap, ms | worker pids kept |")
    print("|---|---|---|---|---|---|---|")
    print(f"| `supervise upgrade` | {sup_took:.0f} | {sup_tally['ok']} | {sup_tally['refused']} | "
          f"{sup_tally['failed']} | {sup_tally['gap_ms']:.0f} | {'yes' if before == after else 'no'} |")
    print(f"| `pm2 update` | {pm2_took:.0f} | {pm2_tally['ok']} | {pm2_tally['refused']} | "
          f"{pm2_tally['failed']} | {pm2_tally['gap_ms']:.0f} | {'yes' if pm2_before == pm2_after else 'no'} |")
    lost_sup = sup_tally["refused"] + sup_tally["failed"]
    lost_pm2 = pm2_tally["refused"] + pm2_tally["failed"]
    print(f"\nrequests lost: supervise {lost_sup}, pm2 {lost_pm2}; longest gap pm2 / supervise: "
          f"{pm2_tally['gap_ms'] / max(sup_tally['gap_ms'], 0.001):.1f}x")


if __name__ == "__main__":
    main()
