#!/usr/bin/env python3
"""Core overhead of supervise with 100 instances of `sleep`, one or more builds side by side.

For N instances of `sleep 100000` (default 100; `ready: none`,
`backoff: {initial: 100ms}`) under each supervise binary given, prints one
markdown table with a column per binary and the ratio of each binary to the
first (after/before):

  - start to all running: from just before spawning
    `supervise --log-format json -f FILE` to the timestamp of its `all_ready`
    event (the supervisor's own clock, which is the same wall clock), and to
    its last `spawned` event;
  - the supervisor's RSS (VmRSS) once all are running; the RSS of its helper
    processes (its children that are not workers: an undertaker, a spawner,
    as a build has them), and the PSS (/proc/PID/smaps_rollup) of the
    supervisor and its helpers together, which counts shared pages once;
  - the CPU (utime+stime from /proc/PID/stat) of the supervisor, and of its
    helpers, over --idle seconds (default 30), as % of one core;
  - crash to respawn, over --kills SIGKILLs of workers (default 100): from the
    SIGKILL to the `exited` event, and to the replacement's `spawned` event
    minus the backoff delay (the `exited` event's `delay_ms`, else the
    configured 100 ms): median and p90. The slots are killed in a random
    order, each at most once per pass over the slots, so every restart is a
    first one (backoff.initial) and not a later, longer backoff step;
  - SIGTERM to the supervisor's exit, and how many of its workers are still
    alive after it exited.

It waits on `all_ready`, `spawned` and `exited` events, never on a count of
`ready` events: an older build may count a `ready: none` instance ready at its
spawn, a newer one only once its exec succeeded.

Each run has its own temp dir (the ecosystem file, and a private 0700
XDG_RUNTIME_DIR, so each run has its own lock). With several binaries and
--rounds, the runs alternate between binaries (the order reversed every other
round) and the table shows the medians of the rounds (with [min–max] for the
timings). It does not build anything: give it binaries (default
target/release/supervise; it warns when that one is older than src/).

Bounded (--timeout for `all_ready` and for each awaited event, 60 s by
default; 60 s for the shutdown), local (the only sockets are supervise's own
unix control sockets), and it kills only processes it started, by pid checked
against their start time (through a pidfd, so a reused pid is never hit): the
workers it SIGKILLs are the supervisor's children from its `spawned` events;
on a failure or Ctrl-C the supervisor is stopped (SIGSTOP, so it starts
nothing more), its children recorded, and SIGKILLed, then every process it
started still alive is SIGKILLed, and the temp dir is removed.

    python3 bench/core.py [--instances 100] [--idle 30] [--kills 100] [--rounds 1] [--timeout 60]
        [--binary before=/work/before/supervise --binary after=target/release/supervise]
"""
import argparse
import os
import random
import signal
import statistics
import sys
import time

sys.dont_write_bytecode = True  # no bench/__pycache__ left in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import TICKS, Failed, alive, cpu_ticks, log, parse_ts, rss_kb, signal_checked  # noqa: E402

APP = "sleepers"
BACKOFF_INITIAL_MS = 100


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


# ---------------------------------------------------------------- one supervisor


def ecosystem(n):
    return (
        f"apps:\n  {APP}:\n    command: [sleep, '100000']\n"
        f"    instances: {n}\n    ready: none\n"
        f"    backoff: {{initial: {BACKOFF_INITIAL_MS}ms}}\n"
    )


class Supervisor(harness.Supervisor):
    """harness.Supervisor, that also keeps the pid of each slot's latest
    `spawned` event."""

    def __init__(self, binary, text):
        super().__init__(binary, text, "supervise-core-")
        self.slots = {}     # slot -> pid of its latest `spawned` event

    def on_event(self, event):
        if (event.get("event") == "spawned" and isinstance(event.get("pid"), int)
                and event.get("app") == APP):
            self.slots[event.get("slot")] = event["pid"]

    def helpers(self):
        """The supervisor's children that are not workers (an undertaker, a
        spawner), with their start times."""
        self.record()
        with self.cond:
            workers = set(self.spawned)
        return {pid: self.known[pid] for pid in harness.children(self.pid) - workers if pid in self.known}


# ---------------------------------------------------------------- one run


def quantile90(values):
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def measure(binary, n, idle, kills, timeout):
    result = {}
    sup = Supervisor(binary, ecosystem(n))
    with harness.running(sup, result):
        ready = sup.next(lambda e: e.get("event") == "all_ready", timeout, f"`all_ready` ({n} instances)")
        result["start_s"] = (parse_ts(ready.get("timestamp")) or time.time()) - sup.started
        with sup.cond:
            slots = dict(sup.slots)
            stamps = [parse_ts(e.get("timestamp")) for e in sup.events
                      if e.get("event") == "spawned" and e.get("app") == APP]
        stamps = sorted(filter(None, stamps))
        if stamps:
            result["last_spawned_s"] = stamps[-1] - sup.started
        if len(slots) != n:
            raise Failed(f"`all_ready` with {len(slots)} slots spawned of {n}")

        result["rss_kb"] = rss_kb(sup.pid)
        helpers = sup.helpers()
        result["helpers"] = len(helpers)
        result["helpers_rss_kb"] = sum(rss_kb(p) for p in helpers)
        pss = [pss_kb(p) for p in [sup.pid, *helpers]]
        if None not in pss:
            result["pss_kb"] = sum(pss)

        before = cpu_ticks(sup.pid)
        helpers_before = {p: cpu_ticks(p) for p in helpers}
        time.sleep(idle)
        result["idle_ticks"] = cpu_ticks(sup.pid) - before
        result["idle_cpu"] = result["idle_ticks"] / TICKS / idle * 100
        helper_ticks = 0
        for pid, started in helpers.items():
            if not alive(pid, started):
                raise Failed(f"helper process {pid} exited during the idle period")
            helper_ticks += cpu_ticks(pid) - helpers_before[pid]
        result["helpers_idle_ticks"] = helper_ticks
        result["helpers_idle_cpu"] = helper_ticks / TICKS / idle * 100

        # Each slot is killed at most once per pass, so every restart is a
        # first one (backoff.initial) and not a later, longer backoff step.
        order = []
        while len(order) < kills:
            order += random.sample(sorted(slots), len(slots))
        to_exited, respawn = [], []
        for slot in order[:kills]:
            sup.record()
            with sup.cond:
                pid = sup.slots[slot]
            started = sup.known.get(pid)
            if started is None:
                raise Failed(f"the worker of slot {slot} (pid {pid}) is not the supervisor's child")
            killed_at = time.time()
            if not signal_checked(pid, started, signal.SIGKILL):
                raise Failed(f"the worker of slot {slot} (pid {pid}) was gone before its SIGKILL")
            exited = sup.next(lambda e: e.get("event") == "exited" and e.get("pid") == pid,
                              timeout, f"the `exited` event of pid {pid}")
            spawned = sup.next(lambda e: e.get("event") == "spawned" and e.get("app") == APP
                               and e.get("slot") == slot and e.get("pid") != pid,
                               timeout, f"the respawn of slot {slot}")
            delay = exited.get("delay_ms")
            if not isinstance(delay, (int, float)):
                delay = BACKOFF_INITIAL_MS
            exited_at, spawned_at = parse_ts(exited.get("timestamp")), parse_ts(spawned.get("timestamp"))
            if exited_at is None or spawned_at is None:
                raise Failed("an event without a timestamp")
            to_exited.append((exited_at - killed_at) * 1000)
            respawn.append((spawned_at - killed_at) * 1000 - delay)
        if respawn:
            result["exited_ms"] = statistics.median(to_exited)
            result["respawn_ms"] = statistics.median(respawn)
            result["respawn_p90_ms"] = quantile90(respawn)

        took, left = sup.terminate()
        result["sigterm_s"] = took
        result["left"] = len(left)
    return result


# ---------------------------------------------------------------- report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--kills", type=int, default=100)
    harness.add_binary_option(parser)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for all_ready, and for each awaited event")
    args = parser.parse_args()
    n = args.instances
    if n < 1:
        parser.error("--instances must be at least 1")
    if args.rounds < 1 or args.kills < 0 or args.idle <= 0:
        parser.error("--rounds must be at least 1, --kills at least 0, --idle above 0")
    binaries = harness.begin(parser, args.binary)
    harness.print_header(
        binaries,
        f"{n} instances of `sleep 100000` (ready: none, backoff.initial {BACKOFF_INITIAL_MS} ms); "
        f"{args.rounds} round(s), idle {args.idle:g} s, {args.kills} SIGKILLs, timeout {args.timeout:g} s")

    def run(round_, label, path):
        log(f"round {round_ + 1}/{args.rounds}: {label}")
        r = measure(path, n, args.idle, args.kills, args.timeout)
        if "error" in r:
            log(f"  FAILED: {r['error']}")
        else:
            respawn = f", respawn {r['respawn_ms']:.2f} ms" if "respawn_ms" in r else ""
            log(f"  all running in {r['start_s'] * 1000:.0f} ms, RSS {r['rss_kb'] / 1024:.1f} MiB, "
                f"{r['idle_ticks']} ticks idle{respawn}, SIGTERM to exit {r['sigterm_s'] * 1000:.0f} ms, "
                f"{r['left']} left")
        return r

    results = harness.run_rounds(binaries, args.rounds, run, settle=1)

    rows = [
        (f"start to all {n} running (ms)", "start_s", 1000, "{:.0f}"),
        ("start to the last `spawned` event (ms)", "last_spawned_s", 1000, "{:.0f}"),
        ("supervisor RSS (MiB)", "rss_kb", 1 / 1024, "{:.1f}"),
        ("helper processes' RSS (MiB)", "helpers_rss_kb", 1 / 1024, "{:.1f}"),
        ("supervisor + helpers PSS (MiB)", "pss_kb", 1 / 1024, "{:.1f}"),
        (f"supervisor CPU over {args.idle:g} s idle (% of a core)", "idle_cpu", 1, "{:.3f}"),
        (f"helpers' CPU over {args.idle:g} s idle (% of a core)", "helpers_idle_cpu", 1, "{:.3f}"),
        (f"SIGKILL to `exited` (ms, median of {args.kills})", "exited_ms", 1, "{:.2f}"),
        (f"respawn after the backoff (ms, median of {args.kills})", "respawn_ms", 1, "{:.2f}"),
        (f"respawn after the backoff (ms, p90 of {args.kills})", "respawn_p90_ms", 1, "{:.2f}"),
        ("SIGTERM to exit (ms)", "sigterm_s", 1000, "{:.0f}"),
        (f"workers alive after exit (of {n})", "left", 1, "{:.0f}"),
    ]
    spread = {"start_s", "last_spawned_s", "rss_kb", "idle_cpu", "exited_ms", "respawn_ms",
              "respawn_p90_ms", "sigterm_s"}

    def annotate(key, column):
        if key == "idle_cpu":
            return f" ({'/'.join(str(t) for t in column('idle_ticks'))} ticks)"
        if key == "helpers_idle_cpu":
            return f" ({'/'.join(str(t) for t in column('helpers_idle_ticks'))} ticks)"
        if key == "helpers_rss_kb":
            counts = sorted(set(column("helpers")))
            return f" ({'/'.join(str(c) for c in counts)} process{'' if counts == [1] else 'es'})"
        return ""

    labels = [label for label, _ in binaries]
    what = f"median of {args.rounds} rounds" if args.rounds > 1 else "one round"
    print(f"\n{n} instances of sleep, {what}\n")
    harness.print_table(rows, results, labels, no_ratio={"left"}, spread_keys=spread, annotate=annotate)
    return harness.finish(results, labels)


if __name__ == "__main__":
    sys.exit(main())
