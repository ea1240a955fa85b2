#!/bin/sh
# tools/bench/bench-proxy.sh BUILD_DIR - tools/examples/tcp-proxy against
# HAProxy (Debian's haproxy 2.6) in mode tcp (issue 35, part 6).
#
# Both proxies: one thread (tcp-proxy -s 1; haproxy nbthread 1) pinned to
# CPU 1, one upstream: epoll-echo on CPU 0, where the load runs too.
# HAProxy splices both ways (option splice-request, splice-response) as tcp-proxy does
# (corio_copy_bidi between two plain sockets); tcp-proxy runs without
# health checks (-c 0), haproxy without checks too.
# Rows:
#   bulk   corio-load -c 4 -s 64 KiB -P 4 through the proxy: every echoed
#          byte checked end to end (corio-load exits 1 on a wrong byte); the
#          proxy moves 128 KiB per message (up and back): CPU per MiB moved
#   short  short-load: connect, one 64-byte request, its echo checked,
#          close, in a loop: CPU per connection
# Proxy CPU: every thread's on-CPU time (/proc/PID/task/*/schedstat) over
# the run. Runs alternate (odd rounds tcp-proxy first), REPS rounds; the
# table shows medians and the min..max. Then one strace -c -f of N short
# connections per proxy: system calls per connection (io_uring_enter is
# one call however many operations it submits; the ring's operations are
# not system calls). Last, when valgrind is installed, user-space
# instructions per short connection under callgrind (bench-proxy-instr.sh,
# about 70 s more; one line says so when it is skipped).
#
# Environment: BENCH_PROXY_REPS (3), BENCH_PROXY_SECS (2, per run),
# BENCH_PROXY_STRACE_CONNS (2000), BENCH_PROXY_INSTR=0 (skip the
# instruction row), and bench-proxy-instr.sh's own.
B=${1:-build}
. "$(dirname "$0")/lib.sh"
REPS=${BENCH_PROXY_REPS:-3}
SECS=${BENCH_PROXY_SECS:-2}
NSTRACE=${BENCH_PROXY_STRACE_CONNS:-2000}
PROXY=$B/tools/examples/tcp-proxy
LOAD=$B/tools/corio-load
SHORT=$B/tools/short-load
ECHO=$B/tools/epoll-echo

if ! command -v haproxy >/dev/null 2>&1 && ! apt_install bench-proxy haproxy; then
	echo "bench-proxy: no haproxy (apt-get install haproxy); skipped"
	exit 0
fi
for f in "$PROXY" "$LOAD" "$SHORT" "$ECHO"; do
	[ -x "$f" ] || { echo "bench-proxy: $f is not built (make tools)" >&2; exit 1; }
done
tmp=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

wait_port() { # PORT: up to 5 s
	i=0
	while ! port_listening "$1"; do
		i=$((i + 1))
		[ $i -gt 500 ] && { echo "bench-proxy: nothing listens on $1" >&2; exit 1; }
		sleep 0.01
	done
}

UP=$(free_port)
taskset -c 0 "$ECHO" -t 1 -p "$UP" >/dev/null 2>&1 &
pids="$pids $!"
wait_port "$UP"

CP=$(free_port)
taskset -c 1 "$PROXY" -s 1 -c 0 -l "127.0.0.1:$CP" -u "127.0.0.1:$UP" >/dev/null 2>&1 &
CPID=$!
pids="$pids $CPID"
HP=$CP
while [ "$HP" = "$CP" ] || port_used "$HP"; do HP=$(free_port); done
haproxy_cfg "$tmp/haproxy.cfg" "$HP" "$UP"
taskset -c 1 haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
HPID=$!
pids="$pids $HPID"
wait_port "$CP"
wait_port "$HP"

# run NAME PORT PID KIND: one measured run; prints "value" (ns per unit)
run() {
	c0=$(cpu_ns "$3")
	if [ "$4" = bulk ]; then
		out=$(taskset -c 0 "$LOAD" -p "$2" -c 4 -s 65536 -P 4 -d "$SECS" -w 0.3 -q --json) ||
			{ echo "bench-proxy: $1 bulk: corio-load failed (a wrong byte?): $out" >&2; echo -1; return; }
		c1=$(cpu_ns "$3")
		msgs=$(echo "$out" | sed 's/.*"msgs":\([0-9]*\).*/\1/')
		# 128 KiB through the proxy per message: ns per MiB
		echo "$c0 $c1 $msgs" | awk '{ printf "%.0f", ($2 - $1) / ($3 * 0.125) }'
	else
		out=$(taskset -c 0 "$SHORT" -p "$2" -d "$SECS") ||
			{ echo "bench-proxy: $1 short: $out" >&2; echo -1; return; }
		c1=$(cpu_ns "$3")
		n=$(echo "$out" | awk '{ print $2 }')
		echo "$c0 $c1 $n" | awk '{ printf "%.0f", ($2 - $1) / $3 }'
	fi
}

med() { # values...: "median (min..max)"
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%.0f (%.0f..%.0f)", m, v[1], v[NR] }'
}

for kind in bulk short; do
	cv="" hv=""
	r=1
	while [ $r -le "$REPS" ]; do
		if [ $((r % 2)) = 1 ]; then
			cv="$cv $(run tcp-proxy "$CP" "$CPID" $kind)"
			hv="$hv $(run haproxy "$HP" "$HPID" $kind)"
		else
			hv="$hv $(run haproxy "$HP" "$HPID" $kind)"
			cv="$cv $(run tcp-proxy "$CP" "$CPID" $kind)"
		fi
		r=$((r + 1))
	done
	eval "c_$kind=\"\$(med $cv)\"; h_$kind=\"\$(med $hv)\""
	eval "cm_$kind=\$(echo \$c_$kind | cut -d' ' -f1); hm_$kind=\$(echo \$h_$kind | cut -d' ' -f1)"
done

sys_per_conn() { # PORT PID: system calls per short connection (strace -c -f)
	strace -c -f -q -o "$tmp/strace.$2" -p "$2" &
	sp=$!
	sleep 0.5
	taskset -c 0 "$SHORT" -p "$1" -n "$NSTRACE" >/dev/null
	kill -INT $sp
	wait $sp 2>/dev/null
	awk -v n="$NSTRACE" '$NF == "total" { printf "%.1f", $(NF - 2) / n }' "$tmp/strace.$2"
}
if command -v strace >/dev/null 2>&1; then
	sc=$(sys_per_conn "$CP" "$CPID")
	sh_=$(sys_per_conn "$HP" "$HPID")
else
	sc="-" sh_="-"
fi

echo "## tcp-proxy against haproxy 2.6 (mode tcp, splice), 1 thread on CPU 1; $REPS alternated rounds of ${SECS} s"
echo "| row | tcp-proxy | haproxy | ratio |"
echo "|---|---|---|---|"
echo "| bulk: proxy CPU ns per MiB (64 KiB echo, 4 conns x 4 in flight) | $c_bulk | $h_bulk | $(echo "$cm_bulk $hm_bulk" | awk '{ printf "%.2fx", $1 / $2 }') |"
echo "| short: proxy CPU ns per connection (64 B request) | $c_short | $h_short | $(echo "$cm_short $hm_short" | awk '{ printf "%.2fx", $1 / $2 }') |"
echo "| short: system calls per connection (strace -c, $NSTRACE conns) | $sc | $sh_ | $(echo "$sc $sh_" | awk '$2 > 0 { printf "%.2fx", $1 / $2 }') |"

# the instruction row, with the proxies above stopped: callgrind runs its own
if [ "${BENCH_PROXY_INSTR:-1}" != 0 ]; then
	echo
	cleanup
	trap - EXIT INT TERM
	sh "$(dirname "$0")/bench-proxy-instr.sh" "$B" ||
		echo "bench-proxy: the instruction row failed (bench-proxy-instr.sh exited $?)"
else
	echo "bench-proxy: BENCH_PROXY_INSTR=0: instructions per connection skipped"
fi
