#!/usr/bin/env python3
"""Supervisor overhead, side by side: supervise, pm2 7, supervisord, circus.

For 100 instances of `sleep 100000` under each: the daemon's RSS, the time
from start to all 100 running, the crash-to-respawn latency (median of 50
SIGKILLs of random children), the daemon's CPU over 30 s idle, and what
happens to the children when the daemon itself is SIGKILLed.

Installs what it needs: pm2 7 from the npm registry into bench/.cache (own
PM2_HOME, PM2_DISCRETE_MODE=true, PM2_DISABLE_VERSION_CHECK=1), supervisor and
circus from PyPI into bench/.cache/venv. Bounded and local; every process it
started is killed by pid at the end, orphans included.

    python3 bench/overhead.py [--instances 100] [--kills 50] [--idle 30]
"""
import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "bench", ".cache")
VENV = os.path.join(CACHE, "venv")


def log(message):
    print(message, file=sys.stderr, flush=True)


def install():
    pm2 = os.path.join(CACHE, "node_modules", ".bin", "pm2")
    if not os.path.exists(pm2):
        log("installing pm2 7")
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", CACHE, "pm2@7", "--no-audit", "--no-fund", "--silent"], check=True)
    if not os.path.exists(os.path.join(VENV, "bin", "circusd")):
        log("installing supervisor and circus into a venv")
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "-q", "supervisor", "circus"], check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    return pm2


def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def process_table():
    """pid -> (ppid, name) of every live process, from one pass over /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), name)
    return table


def sleepers(pid):
    """The live `sleep` processes under daemon `pid` (at any depth)."""
    table = process_table()
    kids = {}
    for child, (parent, _) in table.items():
        kids.setdefault(parent, []).append(child)
    result, frontier = [], [pid]
    while frontier:
        for child in kids.get(frontier.pop(), []):
            frontier.append(child)
            if table[child][1] == "sleep":
                result.append(child)
    return result


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_ticks(pid):
    fields = stat(pid)
    return int(fields[11]) + int(fields[12])


def wait_for(predicate, limit=120, step=0.005):
    deadline = time.time() + limit
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise SystemExit("timed out")


class Peer:
    name = ""

    def start(self, work, n):
        raise NotImplementedError

    def daemon(self):
        raise NotImplementedError

    def stop(self):
        pass


class Supervise(Peer):
    name = "supervise"

    def start(self, work, n):
        os.mkdir(os.path.join(work, "run"), 0o700)
        with open(os.path.join(work, "ecosystem.yaml"), "w") as f:
            f.write(f"apps:\n  sleepers:\n    command: [sleep, '100000']\n    instances: {n}\n    ready: none\n"
                    "    backoff: {initial: 1ms}\n")
        env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(work, "run"))
        self.process = subprocess.Popen([os.path.join(ROOT, "target", "release", "supervise"), "-q", "-f", "ecosystem.yaml"],
                                        cwd=work, env=env, stdout=subprocess.DEVNULL)

    def daemon(self):
        return self.process.pid


class Pm2(Peer):
    name = "pm2"

    def __init__(self, pm2):
        self.pm2 = pm2

    def start(self, work, n):
        self.env = dict(os.environ, PM2_HOME=os.path.join(work, "pm2"), PM2_DISCRETE_MODE="true", PM2_DISABLE_VERSION_CHECK="1")
        config = os.path.join(work, "ecosystem.config.js")
        with open(config, "w") as f:
            f.write("module.exports = {apps: [{name: 'sleepers', script: 'sleep', args: '100000', "
                    f"instances: {n}, exec_mode: 'fork', interpreter: 'none', autorestart: true}}]}};\n")
        subprocess.run([self.pm2, "start", config], env=self.env, stdout=subprocess.DEVNULL, check=True)

    def daemon(self):
        with open(os.path.join(self.env["PM2_HOME"], "pm2.pid")) as f:
            return int(f.read())

    def stop(self):
        subprocess.run([self.pm2, "kill"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Supervisord(Peer):
    name = "supervisord"

    def start(self, work, n):
        config = os.path.join(work, "supervisord.conf")
        with open(config, "w") as f:
            f.write(f"[supervisord]\nnodaemon=true\nlogfile={work}/supervisord.log\npidfile={work}/supervisord.pid\n"
                    f"[program:sleepers]\ncommand=sleep 100000\nnumprocs={n}\nprocess_name=%(program_name)s_%(process_num)03d\n"
                    "autorestart=true\nstartsecs=0\nstdout_logfile=NONE\nstderr_logfile=NONE\n")
        self.process = subprocess.Popen([os.path.join(VENV, "bin", "supervisord"), "-c", config], stdout=subprocess.DEVNULL)

    def daemon(self):
        return self.process.pid


class Circus(Peer):
    name = "circus"

    def start(self, work, n):
        config = os.path.join(work, "circus.ini")
        with open(config, "w") as f:
            f.write(f"[circus]\nendpoint = ipc://{work}/endpoint\npubsub_endpoint = ipc://{work}/pubsub\nstatsd = false\n"
                    f"[watcher:sleepers]\ncmd = sleep 100000\nnumprocesses = {n}\n")
        self.process = subprocess.Popen([os.path.join(VENV, "bin", "circusd"), config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def daemon(self):
        return self.process.pid


def measure(peer, n, kills, idle):
    work = tempfile.mkdtemp(prefix=f"overhead-{peer.name}-")
    started = time.time()
    peer.start(work, n)
    daemon = wait_for(lambda: _try(peer.daemon))
    wait_for(lambda: len(sleepers(daemon)) >= n)
    start_s = time.time() - started
    time.sleep(1)
    rss = rss_mb(daemon)
    before = cpu_ticks(daemon)
    time.sleep(idle)
    idle_cpu = (cpu_ticks(daemon) - before) / os.sysconf("SC_CLK_TCK") / idle * 100
    latencies = []
    for _ in range(kills):
        current = sleepers(daemon)
        victim = random.choice(current)
        killed = time.time()
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: victim not in sleepers(daemon) and len(sleepers(daemon)) >= n, limit=60, step=0.001)
        latencies.append((time.time() - killed) * 1000)
        time.sleep(0.05)
    children_left = sleepers(daemon)
    os.kill(daemon, signal.SIGKILL)
    time.sleep(2)
    survivors = [p for p in children_left if os.path.exists(f"/proc/{p}") and stat(p)[0] != "Z"]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    peer.stop()
    return {"start_s": start_s, "rss_mb": rss, "idle_cpu": idle_cpu, "respawn_ms": statistics.median(latencies),
            "orphans": len(survivors), "children": len(children_left)}


def _try(function):
    try:
        return function()
    except (OSError, ValueError):
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--idle", type=float, default=30)
    args = parser.parse_args()
    pm2 = install()
    results = {}
    for peer in [Supervise(), Pm2(pm2), Supervisord(), Circus()]:
        log(f"measuring {peer.name}")
        results[peer.name] = measure(peer, args.instances, args.kills, args.idle)
    ours = results["supervise"]
    print(f"\n{args.instances} instances of sleep; respawn: median of {args.kills} SIGKILLs; CPU over {args.idle:.0f} s idle\n")
    print("| | RSS MB | start to all running s | respawn ms | idle CPU % | children left when SIGKILLed |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['rss_mb']:.1f} | {r['start_s']:.2f} | {r['respawn_ms']:.1f} | {r['idle_cpu']:.3f} | {r['orphans']} of {r['children']} |")
    print("\nratios, peer / supervise (higher = supervise better):")
    for name, r in results.items():
        if name == "supervise":
            continue
        print(f"  {name}: RSS {r['rss_mb'] / ours['rss_mb']:.1f}x, start {r['start_s'] / ours['start_s']:.1f}x, "
              f"respawn {r['respawn_ms'] / ours['respawn_ms']:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
