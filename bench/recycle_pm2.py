"""pm2's side of bench/recycle.py: pm2 with a private PM2_HOME, and what
its logs say of each recycle (`max_memory_restart`)."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from datetime import datetime

import harness
from harness import Failed, alive, log, signal_checked, stat_fields

PM2_ENV = {"PM2_DISCRETE_MODE": "true", "PM2_DISABLE_VERSION_CHECK": "1",
           "PM2_LOG_DATE_FORMAT": "YYYY-MM-DDTHH:mm:ss.SSS"}
PM2_LIMIT = 120.0


class Pm2:
    """pm2 with a private PM2_HOME; records its daemon and the daemon's
    children (pid and start time) so that the cleanup kills only those."""

    def __init__(self, pm2, server, env, parse_line):
        """`server`: the program's text; `env`: what the workers get
        beside PM2_ENV; `parse_line`: a worker's timing line, or None."""
        self.pm2 = pm2
        self.parse_line = parse_line
        self.home = tempfile.mkdtemp(prefix="pm2-recycle-")
        self.dir = os.path.join(self.home, "app")
        os.mkdir(self.dir)
        with open(os.path.join(self.dir, "server.js"), "w") as f:
            f.write(server)
        env = dict(os.environ, PM2_HOME=self.home, **env, **PM2_ENV)
        for name in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID"):
            env.pop(name, None)
        self.env = env
        self.known = {}

    def run(self, *argv):
        return subprocess.run([self.pm2, *argv], env=self.env, cwd=self.dir, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=PM2_LIMIT).returncode

    def record(self):
        try:
            with open(os.path.join(self.home, "pm2.pid")) as f:
                daemon = int(f.read().strip())
        except (OSError, ValueError):
            return
        for pid in {daemon} | harness.children(daemon):
            if pid in self.known:
                continue
            try:
                self.known[pid] = int(stat_fields(pid)[19])
            except OSError:
                pass

    def start(self, limit_text):
        code = self.run("start", "server.js", "-i", "2", "--name", "api", "--kill-timeout", "10000",
                        "--max-memory-restart", limit_text)
        self.record()
        if code != 0:
            raise Failed(f"pm2 start exited with {code}")

    def lines(self, kind):
        """The workers' timing lines of one kind, from pm2's log files
        (api-out-N.log: N is pm2's process id, kept by a replacement)."""
        found = []
        logs = os.path.join(self.home, "logs")
        for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            m = re.fullmatch(r"api-out-(\d+)\.log", name)
            if not m:
                continue
            with open(os.path.join(logs, name), errors="replace") as f:
                for text in f:
                    line = self.parse_line(text)
                    if line and line["bench"] == kind:
                        line["pm_id"] = m.group(1)  # the log of pm2's process id N
                        found.append(line)
        return found

    def daemon_log(self):
        """(timestamp, text) of each line of pm2.log with a parseable time."""
        result = []
        try:
            with open(os.path.join(self.home, "pm2.log"), errors="replace") as f:
                for text in f:
                    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}): (.*)", text)
                    if m:
                        at = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").timestamp()
                        result.append((at, m.group(2)))
        except OSError:
            pass
        return result

    def cleanup(self):
        killed = 0
        self.record()
        try:
            self.run("kill")
        except subprocess.TimeoutExpired:
            log("  pm2 kill timed out")
        deadline = time.time() + 5
        while time.time() < deadline and any(alive(p, s) for p, s in self.known.items()):
            time.sleep(0.05)
        for pid, started in self.known.items():
            if signal_checked(pid, started, signal.SIGKILL):
                killed += 1
        shutil.rmtree(self.home, ignore_errors=True)
        return killed



RESTART = re.compile(r"\[PM2\]\[WORKER\] Process (\d+) restarted because it exceeds "
                     r"--max-memory-restart value \(current_memory=(\d+)")


def pm2_recycles(pm, begun, ended):
    daemon = pm.daemon_log()
    crossed = pm.lines("crossed")
    listening = pm.lines("listening")
    exits = {line["pid"]: line for line in pm.lines("exit")}
    signalled = {line["pid"]: line for line in pm.lines("signalled")}
    recycles, total = [], 0
    refused = sum(1 for _, text in daemon if "Reload already in progress" in text)
    for i, (at, text) in enumerate(daemon):
        m = RESTART.search(text)
        if not m:
            continue
        total += 1
        if not begun <= at <= ended:
            continue
        slot = m.group(1)
        r = {"slot": int(slot), "rss_detected": int(m.group(2))}
        # The old worker: the last one of that process id to listen before
        # (pm2 gives the replacement the same id, and the same log file).
        before = [line for line in listening if line["pm_id"] == slot and line["t"] / 1000 <= at]
        old = before[-1]["pid"] if before else None
        mine = [line for line in crossed if line["pid"] == old]
        if mine:
            r["detect_ms"] = (at - mine[0]["t"] / 1000) * 1000
        for later, later_text in daemon[i + 1:]:
            if "spawn_ms" not in r and f"App [api:{slot}] starting" in later_text:
                r["spawn_ms"] = (later - at) * 1000
            if "ready_ms" not in r and "-reload- New worker listening" in later_text:
                r["ready_ms"] = (later - at) * 1000
            if f"App [api:_old_{slot}] exited" in later_text:
                r["old_exit_ms"] = (later - at) * 1000
                break
        after = [line for line in listening if line["pm_id"] == slot and line["t"] / 1000 > at
                 and line["pid"] != old]
        if after:
            r["listening_ms"] = (after[0]["t"] / 1000 - at) * 1000
        if old in signalled:
            r["signalled_ms"] = (signalled[old]["t"] / 1000 - at) * 1000
        if old in exits:
            r["rss_at_exit"] = exits[old]["rss"]
        recycles.append(r)
    return recycles, total, refused
