#!/usr/bin/env bash
# demo-busy.sh: the demo (`floodgate demo`) against a healthy redis-server
# of its own, on a free loopback port, while BUSY CPU-bound processes (shell
# busy loops) compete with it for the cores for the whole run. Extra
# arguments go to `floodgate demo` (-duration, -compare, -report ...).
# At the end it prints what issue 31 asks of the demo under a competing
# process: the rate-limit decisions made without Redis (local_fallback,
# fail_open, fail_closed) and their share, the fail-closed decisions, and
# the breaker's state, from the demo's own output.
set -euo pipefail

BUSY=${BUSY:-2}
GO=${GO:-go}
case "$BUSY" in '' | *[!0-9]*) echo "demo-busy: BUSY=$BUSY is not a number of processes" >&2; exit 2 ;; esac
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
	echo "demo-busy: redis-server and redis-cli are needed (make deps)" >&2
	exit 1
}

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	if [ -f "$work/redis.pid" ]; then kill -9 "$(cat "$work/redis.pid")" 2>/dev/null || true; fi
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

"$GO" build -o "$work/floodgate" ./cmd/floodgate

# A free port: try a few at random until one serves (a taken one fails to bind).
port=
for _ in $(seq 20); do
	p=$((20000 + RANDOM % 20000))
	redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
		--daemonize yes --pidfile "$work/redis.pid" --logfile "$work/redis.log" >/dev/null 2>&1 || continue
	for _ in $(seq 50); do
		if redis-cli -p "$p" ping 2>/dev/null | grep -q PONG; then port=$p; break; fi
		sleep 0.1
	done
	[ -n "$port" ] && break
	rm -f "$work/redis.pid"
done
[ -n "$port" ] || { echo "demo-busy: could not start redis-server on a free port" >&2; exit 1; }

for _ in $(seq "$BUSY"); do
	sh -c 'while :; do :; done' &
	pids+=($!)
done
echo "demo-busy: redis-server on 127.0.0.1:$port, $BUSY CPU-bound busy loops running (pids ${pids[*]:-none}), load average $(cut -d' ' -f1-3 /proc/loadavg)"

set +e
"$work/floodgate" demo -redis "redis://127.0.0.1:$port" "$@" | tee "$work/out.txt"
rc=${PIPESTATUS[0]}
set -e

echo
echo "demo-busy: $BUSY busy loops, load average $(cut -d' ' -f1-3 /proc/loadavg) at end"
grep -E '^  tiers decisions|^  Redis fallback:|Where rate-limit decisions were made' "$work/out.txt" || true
fc=$(grep -oE 'fail_closed [0-9]+' "$work/out.txt" | head -1 | grep -oE '[0-9]+' || true)
echo "demo-busy: fail-closed decisions: ${fc:-0}"
exit "$rc"
