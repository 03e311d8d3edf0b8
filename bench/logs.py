#!/usr/bin/env python3
"""Log file throughput: a worker printing N lines as fast as it can, with
`log` on (rotated files) and off, side by side in one run.

For each mode, one supervisor (`supervise --log-format json -f FILE`, its own
temp dir and 0700 XDG_RUNTIME_DIR) runs one app: python3 printing --lines
numbered lines of 100 bytes, then exiting 0 (`restart: never`). With `log`
on, `log: {file: logs/{app}.log, max_size: --max-size, keep: 1000}` (so that
every line written can be counted). The pipe between the worker and the
supervisor is what paces the worker, so its life — from the `spawned` event
to the `exited` event, on the supervisor's clock — is the rate at which
supervise takes its output: lines/s = N / that time. After SIGTERM (the log
files written), the lines in the files are counted and added to the
`log_dropped` counts: they must make N. The modes alternate over --rounds
(the order reversed every other round); the table has the medians and the
ratio on/off.

The supervisor's own stdout (one JSON `output` event per line) is read by a
thread that skips those events without parsing them (the supervisor drops
what a slow reader cannot take, in both modes alike).

Bounded (--timeout per wait, 60 s by default), local (no sockets but
supervise's own unix control socket), and it kills only what it started: the
supervisor by pid (its child), whose undertaker kills the worker with it; the
temp dir is removed in any case.

    python3 bench/logs.py [--lines 500000] [--max-size 10MB] [--rounds 3]
        [--binary target/release/supervise]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

LINE = 100


def parse_ts(text):
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run(binary, lines, max_size, logged, timeout):
    work = tempfile.mkdtemp(prefix="supervise-bench-logs-")
    process = None
    try:
        runtime = os.path.join(work, "run")
        os.mkdir(runtime, 0o700)
        os.mkdir(os.path.join(work, "logs"))
        program = (
            f"import sys\npad = 'x' * {LINE - 10}\nw = sys.stdout.write\n"
            f"for i in range({lines}): w(f'{{i:08d}} {{pad}}\\n')\nsys.stdout.flush()"
        )
        log = f"    log: {{file: \"logs/{{app}}.log\", max_size: {max_size}, keep: 1000}}\n" if logged else ""
        with open(os.path.join(work, "ecosystem.yaml"), "w") as f:
            f.write(
                "apps:\n  flood:\n"
                f"    command: {json.dumps(['python3', '-c', program])}\n"
                "    restart: never\n    ready: none\n" + log
            )
        env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
        for name in ("NOTIFY_SOCKET", "RUST_LOG", "LISTEN_FDS", "LISTEN_PID"):
            env.pop(name, None)
        process = subprocess.Popen(
            [binary, "--log-format", "json", "-f", "ecosystem.yaml"],
            cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        events, cond = [], threading.Condition()

        def read():
            for raw in process.stdout:
                if b'"event":"output"' in raw[:100]:
                    continue
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                with cond:
                    events.append(event)
                    cond.notify_all()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def wait(name):
            deadline = time.monotonic() + timeout
            with cond:
                while True:
                    for event in events:
                        if event.get("event") == name:
                            return event
                    left = deadline - time.monotonic()
                    if left <= 0 or process.poll() is not None:
                        raise RuntimeError(f"no `{name}` event within {timeout} s")
                    cond.wait(min(left, 0.5))

        spawned = wait("spawned")
        exited = wait("exited")
        took = parse_ts(exited["timestamp"]) - parse_ts(spawned["timestamp"])
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=timeout)
        reader.join(timeout=timeout)
        written = 0
        for name in os.listdir(os.path.join(work, "logs")):
            with open(os.path.join(work, "logs", name), "rb") as f:
                written += f.read().count(b"\n")
        dropped = sum(e.get("count", 0) for e in events if e.get("event") == "log_dropped")
        return took, written, dropped
    finally:
        if process is not None and process.poll() is None:
            process.kill()  # our child, not yet reaped: the pid is ours
            process.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=500_000)
    parser.add_argument("--max-size", default="10MB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--binary", default="target/release/supervise")
    args = parser.parse_args()
    args.binary = os.path.abspath(args.binary)
    rates = {False: [], True: []}
    accounted = []
    for round_ in range(args.rounds):
        order = [False, True] if round_ % 2 == 0 else [True, False]
        for logged in order:
            took, written, dropped = run(args.binary, args.lines, args.max_size, logged, args.timeout)
            rates[logged].append(args.lines / took)
            if logged:
                accounted.append((written, dropped))
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"{args.lines} lines of {LINE} bytes, {args.rounds} rounds, {os.cpu_count()} CPUs, {args.binary}")
    print()
    print("| | logs off | logs on (rotated at %s) | on/off |" % args.max_size)
    print("|---|---|---|---|")
    print(f"| lines/s taken from the worker (median) | {off:,.0f} | {on:,.0f} | {on / off:.2f} |")
    print(f"| MB/s | {off * LINE / 1e6:.1f} | {on * LINE / 1e6:.1f} | |")
    print()
    for written, dropped in accounted:
        status = "ok" if written + dropped == args.lines else "MISMATCH"
        print(f"- logs on: {written} lines in the files + {dropped} reported dropped = {written + dropped} ({status})")
    return 0 if all(w + d == args.lines for w, d in accounted) else 1


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    sys.exit(main())
