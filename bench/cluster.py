#!/usr/bin/env python3
"""Cluster mode, side by side with pm2, for the CPU-heavy Node handler of
examples/node-cluster.

Installs what it needs (wrk from Debian's packages, pm2 7 from the npm registry
into bench/.cache with its own PM2_HOME), builds supervise, then in one run:

1. throughput and latency (wrk -t2 -c50 -d10s, 3 rounds interleaved, medians):
   plain node, supervise with 1 and 2 instances, pm2 -i 2 (cluster mode);
   and how evenly the instances shared the work (each counts what it served);
2. a 15 s wrk run with two reloads in it: supervise (a change of the app's
   `env` in the file: a rolling replacement) and `pm2 reload`;
3. the same with a scale 2 -> 4 -> 2 (editing the file / `pm2 scale`);
4. the spread with a greedy accept loop (a Python asyncio worker pair).

Loopback only, bounded, and it stops every process it started (supervise and
the pm2 daemon by pid or by pm2's own `kill`). A benchmark: not run in CI.

    python3 bench/cluster.py [--duration 10] [--rounds 3]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "bench", ".cache")
SERVER_JS = os.path.join(ROOT, "examples", "node-cluster", "server.js")
PM2_ENV = {"PM2_DISCRETE_MODE": "true", "PM2_DISABLE_VERSION_CHECK": "1"}


def log(message):
    print(message, file=sys.stderr, flush=True)


def install():
    if shutil.which("wrk") is None:
        log("installing wrk")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True)
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "wrk"], check=True)
    pm2 = os.path.join(CACHE, "node_modules", ".bin", "pm2")
    if not os.path.exists(pm2):
        log("installing pm2 7 into bench/.cache")
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", CACHE, "pm2@7", "--no-audit", "--no-fund", "--silent"], check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    return pm2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, limit=30):
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def wrk(port, duration, during=None):
    """Run wrk; `during(start)` runs in a thread while it does."""
    command = ["wrk", "-t2", "-c50", f"-d{duration}s", "--latency", f"http://127.0.0.1:{port}/"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    thread = None
    if during:
        thread = threading.Thread(target=during)
        thread.start()
    out, _ = process.communicate(timeout=duration + 60)
    if thread:
        thread.join()
    return parse_wrk(out)


def parse_wrk(out):
    def number(pattern, default=0.0):
        m = re.search(pattern, out)
        return float(m.group(1)) if m else default

    def millis(text):
        value, unit = re.match(r"([\d.]+)(\w+)", text).groups()
        return float(value) * {"us": 0.001, "ms": 1, "s": 1000, "m": 60000}[unit]

    percentiles = dict(re.findall(r"\n\s+(50|99)%\s+(\S+)", out))
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "rps": number(r"Requests/sec:\s+([\d.]+)"),
        "p50": millis(percentiles["50"]) if "50" in percentiles else None,
        "p99": millis(percentiles["99"]) if "99" in percentiles else None,
        "requests": int(number(r"(\d+) requests in")),
        "non2xx": int(number(r"Non-2xx or 3xx responses: (\d+)")),
        "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0,
        "error_detail": errors.group(0) if errors else "none",
    }


class Supervise:
    def __init__(self, instances, port, command=None, extra="", listen=None):
        self.dir = tempfile.mkdtemp(prefix="supervise-cluster-")
        os.mkdir(os.path.join(self.dir, "run"), 0o700)
        self.port = port
        self.command = command or f"[node, {SERVER_JS}]"
        self.extra = extra
        self.listen = listen or f"127.0.0.1:{port}"
        self.write(instances, "1")
        env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(self.dir, "run"))
        env.pop("NOTIFY_SOCKET", None)
        self.process = subprocess.Popen(
            [os.path.join(ROOT, "target", "release", "supervise"), "--log-format", "json", "-f", "ecosystem.yaml"],
            cwd=self.dir, env=env, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        self.events = []
        self.lock = threading.Lock()
        threading.Thread(target=self.read, daemon=True).start()
        self.wait(lambda e: e.get("event") == "all_ready")

    def write(self, instances, version):
        text = (
            "apps:\n  api:\n"
            f"    command: {self.command}\n"
            f"    instances: {instances}\n"
            f"    listen: {self.listen}\n"
            "    kill_timeout: 10s\n"
            f"    env: {{VERSION: '{version}'}}\n{self.extra}"
        )
        temp = os.path.join(self.dir, "ecosystem.yaml.tmp")
        with open(temp, "w") as f:
            f.write(text)
        os.rename(temp, os.path.join(self.dir, "ecosystem.yaml"))

    def read(self):
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.events.append(event)

    def wait(self, predicate, count=1, limit=60):
        deadline = time.time() + limit
        while time.time() < deadline:
            with self.lock:
                if sum(1 for e in self.events if predicate(e)) >= count:
                    return
            time.sleep(0.02)
        raise SystemExit("supervise: timed out waiting for an event")

    def served(self):
        """Requests per instance, from each instance's drain line."""
        counts = []
        with self.lock:
            for e in self.events:
                m = re.search(r"drained after (\d+) requests", e.get("line", "") or "")
                if e.get("event") == "output" and m:
                    counts.append(int(m.group(1)))
        return counts

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        time.sleep(0.3)  # let the reader take the last lines


class Pm2:
    def __init__(self, pm2, instances, port):
        self.pm2 = pm2
        self.home = tempfile.mkdtemp(prefix="pm2-home-")
        self.env = dict(os.environ, PM2_HOME=self.home, PORT=str(port), **PM2_ENV)
        self.run("start", SERVER_JS, "-i", str(instances), "--name", "api", "--kill-timeout", "10000")
        wait_port(port)
        time.sleep(1)  # pm2 reports online before every worker listens

    def run(self, *args):
        subprocess.run([self.pm2, *args], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)

    def served(self):
        counts = []
        logs = os.path.join(self.home, "logs")
        for name in os.listdir(logs) if os.path.isdir(logs) else []:
            with open(os.path.join(logs, name), errors="replace") as f:
                counts += [int(n) for n in re.findall(r"drained after (\d+) requests", f.read())]
        return counts

    def stop(self):
        try:
            self.run("delete", "all")
            time.sleep(1)
        finally:
            subprocess.run([self.pm2, "kill"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def plain_node(port):
    process = subprocess.Popen(["node", SERVER_JS], env=dict(os.environ, PORT=str(port)), stdout=subprocess.PIPE, text=True)
    wait_port(port)
    return process


def spread(counts):
    if len(counts) < 2 or sum(counts) == 0:
        return "n/a"
    return f"{min(counts) / max(counts):.2f} (min/max of {sorted(counts)})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pm2 = install()
    results = {name: [] for name in ["node", "supervise-1", "supervise-2", "pm2-2"]}
    spreads = {"supervise-2": [], "pm2-2": []}

    for round_number in range(args.rounds):
        for name in results:
            port = free_port()
            log(f"round {round_number + 1}: {name}")
            if name == "node":
                process = plain_node(port)
                results[name].append(wrk(port, args.duration))
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
            elif name.startswith("supervise"):
                sup = Supervise(int(name[-1]), port)
                results[name].append(wrk(port, args.duration))
                sup.stop()
                if name == "supervise-2":
                    spreads[name].append(spread(sup.served()))
            else:
                pm = Pm2(pm2, 2, port)
                try:
                    results[name].append(wrk(port, args.duration))
                finally:
                    pm.stop()
                spreads[name].append(spread(pm.served()))

    print(f"\n## Throughput, wrk -t2 -c50 -d{args.duration}s, {args.rounds} rounds interleaved (median [min-max])\n")
    print("| setup | req/s | p50 ms | p99 ms |")
    print("|---|---|---|---|")
    medians = {}
    for name, runs in results.items():
        rps = [r["rps"] for r in runs]
        medians[name] = statistics.median(rps)
        p50 = statistics.median(r["p50"] for r in runs)
        p99 = statistics.median(r["p99"] for r in runs)
        print(f"| {name} | {medians[name]:.0f} [{min(rps):.0f}-{max(rps):.0f}] | {p50:.1f} | {p99:.1f} |")
    print(f"\nsupervise-2 / pm2-2 throughput: {medians['supervise-2'] / medians['pm2-2']:.2f}x")
    print(f"supervise-2 / node: {medians['supervise-2'] / medians['node']:.2f}x")
    for name, values in spreads.items():
        print(f"spread of requests over the 2 instances, {name}: {values}")

    # Reloads and scaling under load.
    window = 15
    print(f"\n## Under load: wrk -t2 -c50 -d{window}s with two reloads, then with a scale 2 -> 4 -> 2\n")
    print("| what | requests | non-2xx | socket errors |")
    print("|---|---|---|---|")

    port = free_port()
    sup = Supervise(2, port)
    def sup_reloads():
        for version in ["2", "3"]:
            time.sleep(3)
            sup.write(2, version)
            sup.wait(lambda e: e.get("event") == "stopped", count=2 if version == "2" else 4)
    r = wrk(port, window, sup_reloads)
    sup.stop()
    print(f"| supervise: 2 reloads (env change in the file) | {r['requests']} | {r['non2xx']} | {r['socket_errors']} ({r['error_detail']}) |")

    port = free_port()
    pm = Pm2(pm2, 2, port)
    def pm2_reloads():
        for _ in range(2):
            time.sleep(3)
            pm.run("reload", "api")
    try:
        r = wrk(port, window, pm2_reloads)
    finally:
        pm.stop()
    print(f"| pm2: 2 x `pm2 reload` | {r['requests']} | {r['non2xx']} | {r['socket_errors']} ({r['error_detail']}) |")

    port = free_port()
    sup = Supervise(2, port)
    def sup_scale():
        time.sleep(3)
        sup.write(4, "1")
        sup.wait(lambda e: e.get("event") == "ready", count=4)
        time.sleep(3)
        sup.write(2, "1")
        sup.wait(lambda e: e.get("event") == "stopped", count=2)
    r = wrk(port, window, sup_scale)
    sup.stop()
    print(f"| supervise: scale 2 -> 4 -> 2 (editing the file) | {r['requests']} | {r['non2xx']} | {r['socket_errors']} ({r['error_detail']}) |")

    port = free_port()
    pm = Pm2(pm2, 2, port)
    def pm2_scale():
        time.sleep(3)
        pm.run("scale", "api", "4")
        time.sleep(3)
        pm.run("scale", "api", "2")
    try:
        r = wrk(port, window, pm2_scale)
    finally:
        pm.stop()
    print(f"| pm2: `pm2 scale` 2 -> 4 -> 2 | {r['requests']} | {r['non2xx']} | {r['socket_errors']} ({r['error_detail']}) |")

    # A greedy accept loop: a Python asyncio worker pair, on one shared socket
    # and on one SO_REUSEPORT socket per instance.
    greedy = os.path.join(ROOT, "bench", "greedy_worker.py")
    print("\n## A greedy accept loop (Python asyncio worker pair)\n")
    print("| sockets | req/s (median) | spread per round (min/max) |")
    print("|---|---|---|")
    for label, reuseport in [("one shared accept queue", False), ("reuseport: one per instance", True)]:
        rates, spreads_seen = [], []
        for _ in range(args.rounds):
            port = free_port()
            listen = f"{{address: '127.0.0.1:{port}', reuseport: true}}" if reuseport else None
            sup = Supervise(2, port, command=f"[python3, {greedy}]", listen=listen)
            r = wrk(port, args.duration)
            sup.stop()
            rates.append(r["rps"])
            counts = sup.served()
            spreads_seen.append(f"{min(counts) / max(counts):.2f}" if len(counts) == 2 and max(counts) else "n/a")
        print(f"| {label} | {statistics.median(rates):.0f} | {', '.join(spreads_seen)} |")


if __name__ == "__main__":
    sys.exit(main())
