#!/bin/sh
# Stands in for a real program: reports what supervise gave it, then waits.
echo "worker $SUPERVISE_INSTANCE of $SUPERVISE_APP (LOG_LEVEL=$LOG_LEVEL, PORT=$PORT, fds=$LISTEN_FDNAMES)"
trap 'echo "worker $SUPERVISE_INSTANCE: stopping"; exit 0' TERM
while :; do sleep 1; done
