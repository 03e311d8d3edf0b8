#!/bin/sh
# Stands in for a real program: reports what supervise gave it, then waits.
# `worker.sh --health` stands in for its health check (exit 0: healthy).
[ "$1" = --health ] && exit 0
echo "worker $SUPERVISE_INSTANCE of $SUPERVISE_APP (LOG_LEVEL=$LOG_LEVEL, PORT=$PORT, fds=$LISTEN_FDNAMES)"
trap 'echo "worker $SUPERVISE_INSTANCE: stopping"; exit 0' TERM
while :; do
  # The watchdog (`watchdog:` sets WATCHDOG_USEC): "still alive", every second.
  [ -n "$WATCHDOG_USEC" ] && systemd-notify WATCHDOG=1
  sleep 1
done
