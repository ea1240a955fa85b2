#!/bin/sh
# tools/bench/bench-proxy-instr.sh BUILD_DIR - user-space instructions per
# short connection (connect, one 64-byte request, its echo checked, close)
# through tools/examples/tcp-proxy and through HAProxy (Debian's haproxy
# 2.6, mode tcp, nbthread 1, option splice-request and splice-response),
# counted by callgrind (issue 35, part 6). Run by bench-proxy.sh after its
# CPU rows; runs alone too.
#
# Each proxy runs under callgrind pinned to CPU 1, one thread; the upstream
# (epoll-echo) and short-load run on CPU 0. Counters are zeroed, N1
# connections made and the counters dumped; zeroed again, N2 connections,
# dumped: instructions per connection = (dump2 - dump1) / (N2 - N1), so
# start-up, the first connection's warm-up and the exit cancel out.
# short-load checks every echoed byte and fails on any error, which fails
# the measurement. Runs alternate (odd rounds tcp-proxy first); the table
# shows medians and min..max over REPS rounds. Counts repeat to 0.5% on a
# quiet machine and 4-8% on a loaded one (the loop turns per connection
# depend on how completions batch, which depends on timing).
#
# corio sleeps in 1 ms slices when it sees valgrind (uring/ring.c), a path
# that never runs natively: tcp-proxy is measured from a -DNVALGRIND build
# in $B/instr (bench-instr.sh does the same).
#
# Ports come from below the kernel's ephemeral range (lib.sh free_port):
# short-load and the proxies' upstream connections cycle through thousands
# of ephemeral ports, and a fixed port inside that range may be held (in
# TIME-WAIT, or by a self-connect of a probe) when the proxy binds it, which
# then exits with EADDRINUSE.
#
# Environment: BENCH_PROXY_INSTR_REPS (3), BENCH_PROXY_INSTR_N1 (2000),
# BENCH_PROXY_INSTR_N2 (6000), INSTR_BUILD ($B/instr).
set -u
B=${1:-build}
. "$(dirname "$0")/lib.sh"
IB=${INSTR_BUILD:-$B/instr}
REPS=${BENCH_PROXY_INSTR_REPS:-3}
N1=${BENCH_PROXY_INSTR_N1:-2000}
N2=${BENCH_PROXY_INSTR_N2:-6000}
SCPU=1 LCPU=0
[ "$(nproc)" -ge 2 ] || SCPU=0

if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_control >/dev/null 2>&1; then
	echo "bench-proxy-instr: valgrind is not installed (apt-get install valgrind); instructions per connection skipped"
	exit 0
fi
if ! command -v haproxy >/dev/null 2>&1; then
	echo "bench-proxy-instr: no haproxy (apt-get install haproxy); skipped"
	exit 0
fi
[ "$N2" -gt "$N1" ] || { echo "bench-proxy-instr: N2 ($N2) must exceed N1 ($N1)" >&2; exit 2; }
for f in "$B/tools/short-load" "$B/tools/epoll-echo"; do
	[ -x "$f" ] || { echo "bench-proxy-instr: $f is not built (make tools)" >&2; exit 1; }
done
make -s B="$IB" CFLAGS="-O2 -g -DNVALGRIND" "$IB/tools/examples/tcp-proxy" >/dev/null || {
	echo "bench-proxy-instr: build of $IB/tools/examples/tcp-proxy failed" >&2
	exit 1
}

tmp=$(mktemp -d)
pids=""
cleanup() {
	# measure runs in a command substitution: its proxy's pid is in a file
	for p in $pids $(cat "$tmp"/pid 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# wait_listen PORT PID SECS: 0 once PORT listens, 1 if PID died or SECS passed
wait_listen() {
	i=0
	while ! port_listening "$1"; do
		kill -0 "$2" 2>/dev/null || return 1
		i=$((i + 1))
		[ $i -gt $(($3 * 10)) ] && return 1
		sleep 0.1
	done
}

UP=$(free_port)
taskset -c $LCPU "$B/tools/epoll-echo" -t 1 -p "$UP" >/dev/null 2>&1 &
pids="$pids $!"
wait_listen "$UP" $! 5 || { echo "bench-proxy-instr: epoll-echo did not listen on $UP" >&2; exit 1; }

# the newest dump's total instructions
dump_ir() {
	rm -f "$tmp"/cg.out.*
	callgrind_control -d "$1" >/dev/null 2>&1
	i=0
	while f=$(ls -t "$tmp"/cg.out.* 2>/dev/null | head -n 1) && ! grep -qs '^totals:' "$f"; do
		i=$((i + 1))
		[ $i -gt 100 ] && { echo 0; return; }
		sleep 0.1
	done
	awk '/^(summary|totals):/ { print $2; exit }' "$f"
}

# one_load PID PORT N: the instructions of N short connections, or fails
one_load() {
	callgrind_control -z "$1" >/dev/null 2>&1
	out=$(taskset -c $LCPU "$B/tools/short-load" -p "$2" -n "$3") || {
		echo "bench-proxy-instr: short-load through port $2 failed: $out" >&2
		return 1
	}
	dump_ir "$1"
}

# measure NAME: instructions per short connection through NAME, or "-"
measure() {
	port=$(free_port)
	while [ "$port" = "$UP" ]; do port=$(free_port); done
	case $1 in
	tcp-proxy) set -- "$IB/tools/examples/tcp-proxy" -s 1 -c 0 -l "127.0.0.1:$port" -u "127.0.0.1:$UP" ;;
	haproxy)
		haproxy_cfg "$tmp/haproxy.cfg" "$port" "$UP"
		set -- haproxy -db -f "$tmp/haproxy.cfg" ;;
	esac
	rm -f "$tmp"/cg.out.*
	taskset -c $SCPU valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out.%p" "$@" \
		>"$tmp/proxy.log" 2>&1 &
	pid=$!
	echo $pid >"$tmp/pid"
	if ! wait_listen "$port" $pid 60; then
		echo "bench-proxy-instr: $1 did not listen on $port under valgrind:" >&2
		grep -v '^==' "$tmp/proxy.log" | tail -n 5 >&2
		kill -9 $pid 2>/dev/null
		echo "-"
		return
	fi
	a=$(one_load $pid "$port" "$N1") && b=$(one_load $pid "$port" "$N2") || a=""
	# valgrind 3.19 does not know io_uring_enter blocks and may hang at
	# exit: the numbers are taken, kill it
	kill -9 $pid 2>/dev/null
	wait $pid 2>/dev/null
	rm -f "$tmp/pid"
	if [ -n "$a" ] && [ "${b:-0}" -gt "$a" ] 2>/dev/null; then
		awk -v a="$a" -v b="$b" -v n="$((N2 - N1))" 'BEGIN { printf "%.0f", (b - a) / n }'
	else
		echo "-"
	fi
}

med() { # values...: "median (min..max)", "-" values left out
	printf '%s\n' "$@" | grep -v '^-$' | sort -n | awk '{ v[NR] = $1 } END {
		if (!NR) { print "-"; exit }
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%.0f (%.0f..%.0f)", m, v[1], v[NR] }'
}

cv="" hv=""
r=1
while [ $r -le "$REPS" ]; do
	if [ $((r % 2)) = 1 ]; then
		cv="$cv $(measure tcp-proxy)"
		hv="$hv $(measure haproxy)"
	else
		hv="$hv $(measure haproxy)"
		cv="$cv $(measure tcp-proxy)"
	fi
	r=$((r + 1))
done
c=$(med $cv) h=$(med $hv)
ratio=$(echo "$c $h" | awk '$1 != "-" && $3 != "-" && $3 > 0 { printf "%.2fx", $1 / $3 }')

echo "## user-space instructions per short connection (callgrind), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "setup: kernel $(uname -r), $(nproc) cpus; $(valgrind --version); $(haproxy -v 2>/dev/null | head -n 1 | cut -d' ' -f1-3);"
echo "proxy (1 thread) on CPU $SCPU under callgrind, epoll-echo upstream and short-load on CPU $LCPU;"
echo "(instructions after $N2 connections - after $N1) / $((N2 - N1)); $REPS alternated rounds;"
echo "tcp-proxy -s 1 -c 0 built -O2 -g -DNVALGRIND; haproxy nbthread 1, mode tcp, option splice-request/splice-response"
echo "| row | tcp-proxy | haproxy | ratio |"
echo "|---|---|---|---|"
echo "| short: user-space instructions per connection (64 B request) | $c | $h | ${ratio:--} |"
echo "runs: tcp-proxy$cv; haproxy$hv"
[ "$c" != "-" ] && [ "$h" != "-" ]
