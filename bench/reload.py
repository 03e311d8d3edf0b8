#!/usr/bin/env python3
"""How fast a saved edit reaches the processes, one or more builds side by side.

Scales an app of `sleep` workers (`ready: none`) 1 → N and N → 1 (N = 50 by
default) by rewriting the ecosystem file as editors save (write a temp file,
rename it over), once per round (default 20 rounds), under each supervise
binary given, and prints one markdown table with a column per binary and the
ratio of each binary to the first (after/before), of the medians over the
rounds (with [min–max]) of:

  - 1 → N: the save to the `applied` event, to the first new worker's
    `spawned` event (debounce included), and to the `spawned` event of
    worker N;
  - N → 1: the save to the `applied` event, to the last stop signal sent (the
    last `stopping` event), and to the last worker gone (the last `stopped`
    event).

Times are from just before the rename to the supervisor's own event
timestamps (the same wall clock). It waits on `all_ready`, `applied`,
`spawned`, `stopping` and `stopped` events, never on a count of `ready`
events (an older build may count a `ready: none` instance ready at its spawn,
a newer one only once its exec succeeded), and it takes the `applied` event's
counter from `file_version` or, as older builds name it, `generation`.

Each round starts, for each binary, a supervisor of its own with 1 instance,
in its own temp dir (the ecosystem file, and a private 0700 XDG_RUNTIME_DIR,
so each run has its own lock); it waits for `all_ready`, saves N, then 1, and
stops the supervisor with SIGTERM. The runs alternate between binaries (the
order reversed every other round). It does not build anything: give it
binaries (default target/release/supervise; it warns when that one is older
than src/).

Bounded (--timeout for each awaited event, 30 s by default; 60 s for the
shutdown), local (the only sockets are supervise's own unix control sockets),
and it kills only processes it started, by pid checked against their start
time (through a pidfd, so a reused pid is never hit): on a failure or Ctrl-C
the supervisor is stopped (SIGSTOP, so it starts nothing more), its children
recorded, and SIGKILLed, then every process it started still alive (pids from
its `spawned` events and its children) is SIGKILLed, and the temp dir is
removed.

    python3 bench/reload.py [--rounds 20] [--instances 50] [--timeout 30]
        [--binary before=/work/before/supervise --binary after=target/release/supervise]
"""
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # no bench/__pycache__ left in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Failed, log, parse_ts  # noqa: E402

APP = "sleepers"
SETTLE = 0.2  # seconds between saves, so that each save is a burst of its own


# ---------------------------------------------------------------- one supervisor


def ecosystem(instances):
    return (
        f"apps:\n  {APP}:\n    command: [sleep, '100000']\n"
        f"    instances: {instances}\n    ready: none\n    kill_timeout: 5s\n"
    )


def file_version(event):
    """The `applied` event's counter: `file_version`, `generation` in older builds."""
    value = event.get("file_version", event.get("generation"))
    return value if isinstance(value, int) else None


class Supervisor(harness.Supervisor):
    """harness.Supervisor, whose file can be saved again."""

    def __init__(self, binary, instances):
        super().__init__(binary, ecosystem(instances), "supervise-reload-")

    def save(self, instances):
        """Rewrite the file as editors save it; the time just before the rename."""
        temp = self.file + ".tmp"
        with open(temp, "w") as f:
            f.write(ecosystem(instances))
        saved = time.time()
        os.rename(temp, self.file)
        return saved


# ---------------------------------------------------------------- one run


def kind(event):
    return event.get("event") if event.get("app", APP) == APP else None


def stamp(event):
    at = parse_ts(event.get("timestamp"))
    if at is None:
        raise Failed(f"an event without a timestamp: {event}")
    return at


def measure(binary, n, timeout):
    """One supervisor: 1 → n → 1. Times in ms from the save."""
    result = {}
    sup = Supervisor(binary, 1)
    with harness.running(sup, result):
        version = None

        def note(event):
            nonlocal version
            if event.get("event") == "applied" and file_version(event) is not None:
                version = file_version(event)
            return event.get("event") == "all_ready"

        sup.next(note, timeout, "`all_ready` (1 instance)")
        time.sleep(SETTLE)

        def applied_after(previous):
            def test(event):
                if event.get("event") != "applied":
                    return False
                counter = file_version(event)
                return previous is None or counter is None or counter > previous
            return test

        # 1 → n: the `applied` event and n - 1 `spawned` events (of new slots).
        is_ours = applied_after(version)
        saved = sup.save(n)

        def up_done(events):
            spawned = {e.get("slot") for e in events if kind(e) == "spawned"}
            return any(is_ours(e) for e in events) and len(spawned) >= n - 1

        events = sup.gather(up_done, timeout, f"`applied` and {n - 1} `spawned` events (1 → {n})")
        applied = next(e for e in events if is_ours(e))
        version = file_version(applied)
        spawns = sorted(stamp(e) for e in events if kind(e) == "spawned")
        result["up_applied_ms"] = (stamp(applied) - saved) * 1000
        result["up_first_ms"] = (spawns[0] - saved) * 1000
        result["up_all_ms"] = (spawns[n - 2] - saved) * 1000 if n > 1 else None
        time.sleep(SETTLE)

        # n → 1: the `applied` event, n - 1 `stopping` and n - 1 `stopped` events.
        is_ours = applied_after(version)
        saved = sup.save(1)

        def down_done(events):
            stopping = {e.get("pid") for e in events if kind(e) == "stopping"}
            stopped = {e.get("pid") for e in events if kind(e) == "stopped"}
            return any(is_ours(e) for e in events) and len(stopping) >= n - 1 and len(stopped) >= n - 1

        events = sup.gather(down_done, timeout, f"`applied`, {n - 1} `stopping` and `stopped` events ({n} → 1)")
        applied = next(e for e in events if is_ours(e))
        result["down_applied_ms"] = (stamp(applied) - saved) * 1000
        if n > 1:
            result["down_signalled_ms"] = (max(stamp(e) for e in events if kind(e) == "stopping") - saved) * 1000
            result["down_gone_ms"] = (max(stamp(e) for e in events if kind(e) == "stopped") - saved) * 1000
        unexpected = [e for e in events if kind(e) == "spawned"]
        if unexpected:
            result["note"] = f"{len(unexpected)} `spawned` events while scaling down"

        _, left = sup.terminate()
        if left:
            result["note"] = (result.get("note", "") + f" {len(left)} workers alive after exit").strip()
    return result


# ---------------------------------------------------------------- report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--instances", type=int, default=50)
    harness.add_binary_option(parser)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each awaited event")
    args = parser.parse_args()
    n = args.instances
    if n < 2:
        parser.error("--instances must be at least 2")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    binaries = harness.begin(parser, args.binary)
    harness.print_header(
        binaries,
        f"an app of `sleep 100000` (ready: none) scaled 1 → {n} → 1 by saving the file; "
        f"{args.rounds} round(s), a supervisor per round and binary, timeout {args.timeout:g} s")

    def run(round_, label, path):
        r = measure(path, n, args.timeout)
        if "error" in r:
            log(f"round {round_ + 1}/{args.rounds}: {label}: FAILED: {r['error']}")
        else:
            log(f"round {round_ + 1}/{args.rounds}: {label}: 1 → {n} {r['up_first_ms']:.1f}/"
                f"{r['up_all_ms']:.1f} ms, {n} → 1 {r['down_signalled_ms']:.1f}/{r['down_gone_ms']:.1f} ms")
        return r

    results = harness.run_rounds(binaries, args.rounds, run)

    rows = [
        (f"1 → {n}: save to `applied` (ms)", "up_applied_ms", 1, "{:.1f}"),
        (f"1 → {n}: save to the first new worker spawned (ms)", "up_first_ms", 1, "{:.1f}"),
        (f"1 → {n}: save to worker {n} spawned (ms)", "up_all_ms", 1, "{:.1f}"),
        (f"{n} → 1: save to `applied` (ms)", "down_applied_ms", 1, "{:.1f}"),
        (f"{n} → 1: save to the last stop signal sent (ms)", "down_signalled_ms", 1, "{:.1f}"),
        (f"{n} → 1: save to the last worker gone (ms)", "down_gone_ms", 1, "{:.1f}"),
    ]
    labels = [label for label, _ in binaries]
    what = f"median of {args.rounds} rounds [min–max]" if args.rounds > 1 else "one round"
    print(f"\n1 → {n} → 1 instances of sleep, {what}\n")
    harness.print_table(rows, results, labels, spread_keys={key for _, key, _, _ in rows})
    return harness.finish(results, labels)


if __name__ == "__main__":
    sys.exit(main())
