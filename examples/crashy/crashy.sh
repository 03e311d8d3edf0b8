#!/bin/sh
# Runs for 0.1 to 0.9 seconds, then exits 1.
n=$(od -An -N1 -tu1 /dev/urandom | tr -d ' ')
tenths=$((n % 9 + 1))
echo "crashy: working for 0.${tenths}s"
sleep "0.${tenths}"
echo "crashy: giving up" >&2
exit 1
