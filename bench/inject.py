#!/usr/bin/env python3
"""Servers that bind their own port, side by side with pm2's cluster mode.

A Node server as the tutorials write it — `http.createServer(...).listen(N)`
with the port in the code, no cluster module, no fd 3 — run as 2 instances:
by supervise with `listen: {address, inject: true}` (the preload library
hands each instance supervise's socket when it binds N), and by
`pm2 start app.js -i 2` (Node's cluster module shares the port). Plain node
(one process) is the baseline. wrk -t2 -c50, 3 rounds interleaved, medians,
ratios printed in one run. Before each supervise and pm2 run, requests on
new connections must come from 2 distinct pids, and during it each of
them must have spent at least MIN_SHARE of the CPU time the two spent
(from /proc): else the figure would be one instance's, and the run stops
saying so.

Installs what it needs (wrk, pm2 7 into bench/.cache) and builds supervise,
as bench/cluster.py does. Loopback only, bounded; stops every process it
started. A benchmark: not run in CI.

    python3 bench/inject.py [--duration 10] [--rounds 3]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (the shared harness: wrk, Supervise, pm2)

APP = """const http = require('http');
const server = http.createServer((req, res) => {{
  res.writeHead(200, {{'Content-Type': 'text/plain'}});
  res.end('hello from ' + process.pid + '\\n');
}});
server.listen({port});
"""


# Requests, each on a new connection, to find which pids serve.
SAMPLE_REQUESTS = 200
# The least share of the instances' CPU time under wrk each must have had.
MIN_SHARE = 0.1


def serving_pids(port, want):
    """The pids that answered requests on new connections (the app says
    its pid), until `want` of them did or SAMPLE_REQUESTS were sent."""
    pids = set()
    for _ in range(SAMPLE_REQUESTS):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
            connection.settimeout(5)
            connection.sendall(b"GET / HTTP/1.0\r\nHost: bench\r\n\r\n")
            reply = b""
            while chunk := connection.recv(4096):
                reply += chunk
        found = re.search(rb"hello from (\d+)", reply)
        if found:
            pids.add(int(found.group(1)))
        if len(pids) >= want:
            break
    return pids


def cpu_ticks(pid):
    """utime + stime of `pid` (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def measured_on_every_instance(name, port, instances, duration):
    """wrk on `port`, checking that `instances` distinct pids serve and
    that each did its share of the work; their shares are in the result."""
    pids = serving_pids(port, instances)
    if len(pids) != instances:
        raise SystemExit(f"{name}: {SAMPLE_REQUESTS} requests were served by {sorted(pids)}, not {instances} pids")
    before = {pid: cpu_ticks(pid) for pid in pids}
    result = cluster.wrk(port, duration)
    spent = {pid: cpu_ticks(pid) - before[pid] for pid in pids}
    total = sum(spent.values()) or 1
    result["shares"] = sorted(round(ticks / total, 2) for ticks in spent.values())
    if min(result["shares"]) < MIN_SHARE:
        raise SystemExit(f"{name}: one instance did {result['shares']} of the work: the figure would be one instance's")
    return result


def write_app(port):
    folder = tempfile.mkdtemp(prefix="inject-bench-")
    path = os.path.join(folder, "app.js")
    with open(path, "w") as f:
        f.write(APP.format(port=port))
    return path


class Pm2App:
    """`pm2 start app.js -i N` with a PM2_HOME of its own."""

    def __init__(self, pm2, app, instances, port):
        self.pm2 = pm2
        self.home = tempfile.mkdtemp(prefix="pm2-home-")
        self.env = dict(os.environ, PM2_HOME=self.home, **cluster.PM2_ENV)
        self.run("start", app, "-i", str(instances), "--name", "app")
        cluster.wait_port(port)
        time.sleep(1)  # pm2 says online before every worker listens

    def run(self, *args):
        subprocess.run([self.pm2, *args], env=self.env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, timeout=120)

    def stop(self):
        self.run("kill")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pm2 = cluster.install()
    results = {"node": [], "supervise": [], "pm2": []}
    for round_ in range(args.rounds):
        for name in ["node", "supervise", "pm2"]:
            port = cluster.free_port()
            app = write_app(port)
            if name == "node":
                process = subprocess.Popen(["node", app], stdout=subprocess.DEVNULL)
                cluster.wait_port(port)
                stop = lambda: (process.terminate(), process.wait())  # noqa: E731
            elif name == "supervise":
                runner = cluster.Supervise(
                    2, port, command=f"[node, {app}]",
                    listen=f"[{{address: '127.0.0.1:{port}', inject: true}}]",
                )
                stop = runner.stop
            else:
                runner = Pm2App(pm2, app, 2, port)
                stop = runner.stop
            try:
                if name == "node":
                    result = cluster.wrk(port, args.duration)
                else:
                    result = measured_on_every_instance(name, port, 2, args.duration)
            finally:
                stop()
            shares = f", CPU shares {result['shares']}" if "shares" in result else ""
            cluster.log(f"round {round_ + 1} {name}: {result['rps']:.0f} req/s, p99 {result['p99']} ms, errors {result['error_detail']}{shares}")
            results[name].append(result)

    def median(name, key):
        return statistics.median(r[key] for r in results[name])

    print(f"{'':28} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for name, label in [("node", "node, 1 process"), ("supervise", "supervise inject, 2"), ("pm2", "pm2 -i 2 (cluster)")]:
        errors = sum(r["socket_errors"] + r["non2xx"] for r in results[name])
        print(f"{label:28} {median(name, 'rps'):>10.0f} {median(name, 'p50'):>8.2f} {median(name, 'p99'):>8.2f} {errors:>7}")
    for name in ["supervise", "pm2"]:
        print(f"{name}: each instance's share of the CPU time, by round: {[r['shares'] for r in results[name]]}")
    print(f"supervise / pm2: {median('supervise', 'rps') / median('pm2', 'rps'):.2f}x; "
          f"supervise / one node: {median('supervise', 'rps') / median('node', 'rps'):.2f}x")


if __name__ == "__main__":
    main()
