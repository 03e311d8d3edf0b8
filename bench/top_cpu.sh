#!/usr/bin/env bash
# What `supervise top` costs: the CPU time of `top` (and of the supervisor
# serving it) while it watches INSTANCES `sleep` instances for DURATION
# seconds in a 160×50 tmux pane, read from /proc/PID/stat (utime + stime).
#
#   bash bench/top_cpu.sh [BINARY]     # default target/release/supervise
#   INSTANCES=1000 DURATION=30 bash bench/top_cpu.sh
set -euo pipefail
binary=$(realpath "${1:-target/release/supervise}")
instances=${INSTANCES:-100}
duration=${DURATION:-30}
server="bench-top-$$"
dir=$(mktemp -d)
mkdir -m 700 "$dir/run"
cat >"$dir/ecosystem.yaml" <<YAML
apps:
  sleepers:
    command: sleep 100000
    instances: $instances
    ready: none
YAML
XDG_RUNTIME_DIR="$dir/run" "$binary" -q -f "$dir/ecosystem.yaml" >"$dir/supervise.log" 2>&1 &
supervisor=$!
cleanup() {
    tmux -L "$server" kill-server 2>/dev/null || true
    kill "$supervisor" 2>/dev/null || true
    wait "$supervisor" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

# Wait (bounded) until every instance runs.
for _ in $(seq 1 300); do
    running=$(XDG_RUNTIME_DIR="$dir/run" "$binary" status --json -f "$dir/ecosystem.yaml" 2>/dev/null |
        python3 -c 'import json,sys; print(sum(a["running"] for a in json.load(sys.stdin)["apps"]))' 2>/dev/null || echo 0)
    [ "$running" = "$instances" ] && break
    sleep 0.1
done
[ "$running" = "$instances" ] || { echo "only $running of $instances running" >&2; exit 1; }

tmux -L "$server" new-session -d -x 160 -y 50 -s top \
    "XDG_RUNTIME_DIR='$dir/run' exec '$binary' top -f '$dir/ecosystem.yaml'"
top=$(tmux -L "$server" display -p -t top '#{pane_pid}')
sleep 2 # past the start (the first status, the first frames)

ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
top_before=$(ticks "$top")
supervisor_before=$(ticks "$supervisor")
start=$(date +%s.%N)
sleep "$duration"
end=$(date +%s.%N)
top_after=$(ticks "$top")
supervisor_after=$(ticks "$supervisor")
tmux -L "$server" capture-pane -p -t top | head -3

python3 - "$hz" "$start" "$end" "$top_before" "$top_after" "$supervisor_before" "$supervisor_after" "$instances" <<'PY'
import sys
hz, start, end, tb, ta, sb, sa, n = (float(x) for x in sys.argv[1:])
wall = end - start
for name, before, after in (("top", tb, ta), ("supervisor", sb, sa)):
    ticks = after - before
    print(f"{name}: {ticks:.0f} ticks of 1/{hz:.0f} s in {wall:.1f} s = {ticks / hz / wall * 100:.2f} % of a core ({n:.0f} instances)")
PY
