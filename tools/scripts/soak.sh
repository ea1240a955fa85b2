#!/bin/sh
# tools/scripts/soak.sh BUILD_DIR SECS - `make soak`: corio-echo under connection churn.
#
# For each accept model (reuseport, dispatch) it starts corio-echo with two
# shards and a control socket, warms it up with a short soak-load run, lets
# it settle, and records the server's baseline: open fds, RSS, and from the
# control socket the live fibers, live connections and provided buffers
# held, summed over shards. Then soak-load churns for SECS seconds (long
# connections, connect-send-close, resets, half-closes, readers that stop
# reading, clients that vanish mid-message; every echoed byte verified),
# sampled every few seconds, and after it the server must settle back:
# fds, fibers, connections and buffers to their baseline exactly, RSS to
# at most 10% + 8 MiB over it (pools keep what the peak needed).
# Exit 1 on any client error or anything that did not come back.
B=${1:-build}
SECS=${2:-30}
T=$B/tools
case "$SECS" in ''|*[!0-9]*|0) echo "soak: SECS must be a positive integer" >&2; exit 2;; esac
for t in corio-echo corio-stat soak-load; do
	[ -x "$T/$t" ] || { echo "soak: $T/$t is missing; run make tools first" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/corio-soak.XXXXXX)
SRV=
trap '[ -n "$SRV" ] && kill $SRV 2>/dev/null; rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM

# sample: "fds rss_kib fibers conns bufs" of the running server
sample() {
	fds=$(ls /proc/$SRV/fd 2>/dev/null | wc -l)
	rss=$(awk '$1 == "VmRSS:" { print $2 }' /proc/$SRV/status 2>/dev/null)
	# per-shard objects only: the "totals" object after them repeats the sums
	"$T/corio-stat" "$dir/ctl" --json 2>/dev/null | sed 's/"totals":.*//' > "$dir/stats.json"
	[ -s "$dir/stats.json" ] || { echo "- - - - -"; return; }
	sum() { grep -o "\"$1\":[0-9]*" "$dir/stats.json" | awk -F: '{ s += $2 } END { print s + 0 }'; }
	# fibers: the "live" inside each "fibers" object
	fib=$(grep -o '"fibers":{"live":[0-9]*' "$dir/stats.json" | awk -F: '{ s += $3 } END { print s + 0 }')
	echo "$fds ${rss:-0} $fib $(sum conns_live) $(sum bufs_out)"
}

# settle: wait (at most 15 s) until the server holds no client connection
# beyond the control client asking, then sample.
settle() {
	i=0
	while [ $i -lt 150 ]; do
		# shellcheck disable=SC2046
		set -- $(sample)
		[ "$4" = 1 ] && break # only the control client asking
		sleep 0.1
		i=$((i + 1))
	done
	sample
}

status=0
: > "$dir/verdict"
echo "## soak (tools/scripts/soak.sh): corio-echo, 2 shards, $SECS s of churn per accept model"
echo "kernel $(uname -r), $(nproc) CPUs; client: soak-load, 4 threads (long, churn, reset,"
echo "halfclose, stall, vanish), every echoed byte verified"
echo
printf '| model | when | fds | RSS KiB | fibers | conns | bufs held |\n|---|---|---|---|---|---|---|\n' > "$dir/table"
for model in reuseport dispatch; do
	"$T/corio-echo" -n 2 -a $model --port 0 --control "$dir/ctl" > "$dir/server.out" 2> "$dir/server.err" &
	SRV=$!
	i=0
	until grep -q 'listening on' "$dir/server.out" 2>/dev/null && [ -S "$dir/ctl" ]; do
		i=$((i + 1))
		if [ $i -gt 100 ] || ! kill -0 $SRV 2>/dev/null; then
			echo "soak: corio-echo ($model) did not start:" >&2
			cat "$dir/server.err" >&2
			exit 1
		fi
		sleep 0.1
	done
	port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$dir/server.out")
	"$T/soak-load" -p "$port" -d 2 > "$dir/warm.out" 2>&1 || { cat "$dir/warm.out"; status=1; }
	base=$(settle)
	echo "| $model | start | $(echo $base | tr ' ' '|' | sed 's/|/ | /g') |" >> "$dir/table"
	"$T/soak-load" -p "$port" -d "$SECS" > "$dir/load.out" 2>&1 &
	LOAD=$!
	step=$((SECS / 3))
	[ $step -lt 1 ] && step=1
	t=0
	while kill -0 $LOAD 2>/dev/null; do
		sleep 1
		t=$((t + 1))
		if [ $((t % step)) = 0 ] && kill -0 $LOAD 2>/dev/null; then
			echo "| $model | during, ${t} s | $(sample | sed 's/ / | /g') |" >> "$dir/table"
		fi
	done
	wait $LOAD || status=1
	sed 's/^/    /' "$dir/load.out"
	end=$(settle)
	echo "| $model | after | $(echo $end | sed 's/ / | /g') |" >> "$dir/table"
	set -- $base
	b_fds=$1 b_rss=$2 b_fib=$3 b_con=$4 b_buf=$5
	set -- $end
	for pair in "fds $b_fds $1" "fibers $b_fib $3" "connections $b_con $4" "buffers-held $b_buf $5"; do
		set -- $pair
		if [ "$2" != "$3" ]; then
			echo "soak: $model: $1 did not come back: $2 before, $3 after" >> "$dir/verdict"
			status=1
		fi
	done
	set -- $end
	if [ "$2" -gt $((b_rss + b_rss / 10 + 8192)) ]; then
		echo "soak: $model: RSS grew from $b_rss to $2 KiB" >> "$dir/verdict"
		status=1
	fi
	kill -TERM $SRV
	wait $SRV || { echo "soak: corio-echo ($model) exited with $?" >&2; status=1; }
	SRV=
done
cat "$dir/table"
[ -s "$dir/verdict" ] && cat "$dir/verdict"
echo "(conns counts the control client asking; fibers include the accept and control fibers)"
[ $status = 0 ] && echo "soak: passed" || echo "soak: FAILED"
exit $status
