#!/bin/sh
# tools/bench-echo.sh BUILD_DIR - the echo benchmark of `make bench`.
#
# corio-echo against epoll-echo (and corio-echo --sockperf against
# `sockperf server`), run alternately A B A B, server pinned to one CPU and
# the load to the other, over 127.0.0.1:
#   closed loop   connections {1, 64, 512} x message size {64 B, 4 KiB}
#   busy-poll     1 connection, 64 B, both servers spinning instead of sleeping
#   open loop     64 connections, 64 B, at 20k and 100k msgs/s: server CPU
#                 time per message next to latency (on 2 cores the client caps
#                 throughput, so CPU per message at a fixed rate is the
#                 comparison that holds; ../shared/notes/BENCHMARKING.md)
#   sockperf      `sockperf ping-pong --tcp --full-rtt`, when sockperf exists
# Prints one markdown table of medians with corio/baseline ratios; keeps
# every run (JSON lines), the table and a latency-percentile plot (gnuplot)
# under bench-results/echo-<time>/.
#
# Environment: BENCH_ECHO_REPS (3), BENCH_ECHO_SECS (1, closed loop; open
# loop and sockperf run twice as long), BENCH_ECHO_CLIENT (corio | epoll:
# corio-load's engine, busy-polling its own CPU), BENCH_ECHO_QUICK=1 (one
# repetition of a few cases, for a smoke test).
B=${1:-build}
T=$B/tools
REPS=${BENCH_ECHO_REPS:-3}
SECS=${BENCH_ECHO_SECS:-1}
CLIENT=${BENCH_ECHO_CLIENT:-corio}
WARM=0.3
case "$REPS" in ''|*[!0-9]*|0) echo "bench-echo: BENCH_ECHO_REPS must be a positive integer" >&2; exit 2;; esac
case "$CLIENT" in corio|epoll) ;; *) echo "bench-echo: BENCH_ECHO_CLIENT must be corio or epoll" >&2; exit 2;; esac
for t in corio-echo epoll-echo corio-load; do
	if [ ! -x "$T/$t" ]; then
		echo "bench-echo: $T/$t is missing; run make tools first" >&2
		exit 1
	fi
done

if [ "$(nproc)" -ge 2 ]; then SCPU=1; LCPU=0; else SCPU=0; LCPU=0; fi

# sockperf and gnuplot: install them when we can (root with apt-get), else skip.
need=""
command -v sockperf >/dev/null 2>&1 || need="$need sockperf"
command -v gnuplot >/dev/null 2>&1 || need="$need gnuplot-nox"
if [ -n "$need" ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "bench-echo: installing$need with apt-get"
		DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need >/dev/null 2>&1 ||
			echo "bench-echo: apt-get install$need failed; going on without" >&2
	else
		echo "bench-echo: not installed:$need (apt-get install$need); going on without" >&2
	fi
fi

OUT=bench-results/echo-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT" || exit 1
RUNS=$OUT/runs.jsonl
ROWS=$OUT/rows.tsv
: > "$RUNS"
: > "$ROWS"
SRV_PID=
trap 'stop_server; exit 130' INT TERM

# start_server CMD...: run it pinned, wait for its "listening" line; sets PORT and SRV_PID.
start_server() {
	for try in 1 2; do
		taskset -c $SCPU "$@" > "$OUT/server.out" 2> "$OUT/server.err" &
		SRV_PID=$!
		i=0
		while [ $i -lt 100 ]; do
			if grep -q 'listening on' "$OUT/server.out" 2>/dev/null; then
				PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/server.out")
				[ -n "$PORT" ] && return 0
			fi
			kill -0 $SRV_PID 2>/dev/null || break
			sleep 0.1
			i=$((i + 1))
		done
		echo "bench-echo: $1 did not start (try $try):" >&2
		cat "$OUT/server.err" >&2
		stop_server
	done
	return 1
}

stop_server() {
	[ -n "$SRV_PID" ] || return 0
	kill -TERM $SRV_PID 2>/dev/null
	wait $SRV_PID 2>/dev/null
	SRV_PID=
}

jget() { # jget JSON KEY
	printf '%s\n' "$1" | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"
}

# row CASE SIDE msgs/s p50 p99 p99.9 max srv-ns/msg
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$ROWS"; }

# load CASE SIDE REP ARGS...: one corio-load run against the current server.
load() {
	c=$1 side=$2 rep=$3
	shift 3
	spec=$OUT/spec-$(printf '%s' "$c" | tr -c 'A-Za-z0-9\n' '_')-$side.dat
	j=$(taskset -c $LCPU "$T/corio-load" -p "$PORT" --cpus $LCPU --engine $CLIENT --busy-poll \
		--server-pid $SRV_PID --json -q --warmup $WARM --label "$c|$side|$rep" \
		--spectrum "$spec" "$@" 2> "$OUT/load.err")
	st=$?
	if [ $st -ne 0 ] || [ -z "$j" ]; then
		echo "bench-echo: $c $side rep $rep: corio-load failed ($st):" >&2
		cat "$OUT/load.err" >&2
		[ -n "$j" ] && printf '%s\n' "$j" >> "$RUNS"
		return 1
	fi
	printf '%s\n' "$j" >> "$RUNS"
	row "$c" "$side" "$(jget "$j" msgs_per_s)" "$(jget "$j" p50)" "$(jget "$j" p99)" \
		"$(jget "$j" p99.9)" "$(jget "$j" max)" "$(jget "$j" server_cpu_ns_per_msg)"
}

# sp CASE SIDE REP: sockperf ping-pong against the current server.
sp() {
	c=$1 side=$2 rep=$3
	o=$(taskset -c $LCPU timeout 30 sockperf ping-pong --tcp -i 127.0.0.1 -p "$PORT" \
		-t $((SECS * 2)) -m 64 --full-rtt 2>&1)
	printf '%s\n' "$o" > "$OUT/sockperf-$side-$rep.txt"
	p() { printf '%s\n' "$o" | sed -n "s/.*percentile $1 = *\([0-9.]*\).*/\1/p"; }
	n=$(printf '%s\n' "$o" | sed -n 's/.*Valid Duration\] RunTime=\([0-9.]*\) sec; SentMessages=\([0-9]*\).*/\2 \1/p')
	mps=$(echo "$n" | awk '{ if ($2 > 0) printf "%.1f", $1 / $2 }')
	mx=$(printf '%s\n' "$o" | sed -n 's/.*<MAX> observation = *\([0-9.]*\).*/\1/p')
	if [ -z "$(p 50.000)" ]; then
		echo "bench-echo: sockperf against $side failed:" >&2
		printf '%s\n' "$o" | tail -5 >&2
		return 1
	fi
	row "$c" "$side" "$mps" "$(p 50.000)" "$(p 99.000)" "$(p 99.900)" "$mx" "-1"
}

# sockperf server cannot pick a port and print it: try a few near a random one.
start_sockperf_server() {
	PORT=$((20000 + $$ % 20000))
	for try in 1 2 3 4 5; do
		taskset -c $SCPU sockperf server --tcp -i 127.0.0.1 -p $PORT > "$OUT/server.out" 2>&1 &
		SRV_PID=$!
		sleep 0.5
		kill -0 $SRV_PID 2>/dev/null && return 0
		wait $SRV_PID
		SRV_PID=
		PORT=$((PORT + 7))
	done
	echo "bench-echo: sockperf server did not start:" >&2
	cat "$OUT/server.out" >&2
	return 1
}

CE="$T/corio-echo --cpus $SCPU --port 0"
EE="$T/epoll-echo --cpus $SCPU --port 0"

# bench CASE CORIO_SERVER BASE_SERVER LOAD_ARGS...: A B A B ...
bench() {
	c=$1 a=$2 b=$3
	shift 3
	r=1
	while [ $r -le $REPS ]; do
		for side in corio base; do
			if [ $side = corio ]; then srv=$a; else srv=$b; fi
			# shellcheck disable=SC2086
			start_server $srv || continue
			load "$c" $side $r "$@"
			stop_server
		done
		r=$((r + 1))
	done
}

kern=$(uname -r)
echo "## echo benchmark (tools/bench-echo.sh)"
echo "kernel $kern, $(nproc) CPUs; server pinned to CPU $SCPU, load (corio-load --engine $CLIENT"
echo "--busy-poll) pinned to CPU $LCPU; 127.0.0.1; 1 shard / 1 thread per server, idle=block"
echo "unless noted; $REPS alternating runs per case (A B A B), medians; ${SECS} s closed loop,"
echo "$((SECS * 2)) s open loop and sockperf, after ${WARM} s warm-up. Results: $OUT/"
echo

start=$(date +%s)
if [ -n "$BENCH_ECHO_QUICK" ]; then
	CONNS="1 64"; SIZES="64"; RATES="20000"
else
	CONNS="1 64 512"; SIZES="64 4096"; RATES="20000 100000"
fi
for s in $SIZES; do
	for n in $CONNS; do
		bench "closed ${n}c ${s}B" "$CE" "$EE" -c $n -s $s -d $SECS
	done
done
bench "closed 1c 64B busy-poll" "$CE --idle poll" "$EE --busy-poll" -c 1 -s 64 -d $SECS
for rate in $RATES; do
	bench "open 64c 64B $((rate / 1000))k/s" "$CE" "$EE" -c 64 -s 64 -r $rate -d $((SECS * 2))
done
if command -v sockperf >/dev/null 2>&1; then
	r=1
	while [ $r -le $REPS ]; do
		start_server $CE --sockperf && { sp "sockperf ping-pong 64B" corio $r; stop_server; }
		start_sockperf_server && sp "sockperf ping-pong 64B" base $r
		stop_server
		r=$((r + 1))
	done
else
	echo "(sockperf not installed: no sockperf rows)"
fi
end=$(date +%s)

# ---- the table ---------------------------------------------------------------
awk -F'\t' '
function med(list,   n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
	MIN = a[1]; MAX = a[n]
	if (n == 0) return ""
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function k(v) { return v >= 10000 ? sprintf("%.0fk", v / 1000) : v >= 1000 ? sprintf("%.1fk", v / 1000) : sprintf("%.0f", v) }
function spread(m) { return (m > 0) ? sprintf(" ±%.0f%%", 100 * (MAX - MIN) / 2 / m) : "" }
function ratio(a, b) { return (b > 0 && a >= 0 && a != "") ? sprintf("%.2f", a / b) : "-" }
{
	if (!($1 in seen)) { seen[$1] = 1; order[++nc] = $1 }
	key = $1 SUBSEP $2
	for (f = 3; f <= 8; f++) v[key, f] = v[key, f] " " $f
}
END {
	print "| case | msgs/s corio | msgs/s base | ratio | server CPU ns/msg corio | base | ratio | p50 us corio / base (ratio) | p99 us | p99.9 us |"
	print "|---|---|---|---|---|---|---|---|---|---|"
	for (i = 1; i <= nc; i++) {
		c = order[i]; a = c SUBSEP "corio"; b = c SUBSEP "base"
		for (f = 3; f <= 8; f++) {
			ma[f] = med(v[a, f]); sa[f] = spread(ma[f])
			mb[f] = med(v[b, f]); sb[f] = spread(mb[f])
		}
		cpu_a = (ma[8] > 0) ? sprintf("%.0f%s", ma[8], sa[8]) : "-"
		cpu_b = (mb[8] > 0) ? sprintf("%.0f%s", mb[8], sb[8]) : "-"
		printf "| %s | %s%s | %s%s | %s | %s | %s | %s |", c, k(ma[3]), sa[3], k(mb[3]), sb[3], ratio(ma[3], mb[3]), cpu_a, cpu_b, (ma[8] > 0 ? ratio(ma[8], mb[8]) : "-")
		for (f = 4; f <= 6; f++) printf " %.1f / %.1f (%s) |", ma[f], mb[f], ratio(ma[f], mb[f])
		printf "\n"
	}
}' "$ROWS" > "$OUT/table.md"
cat "$OUT/table.md"
echo
echo "base = epoll-echo (sockperf rows: \`sockperf server\`). ±: half the min..max range over"
echo "the runs, in % of the median. Latency: corio-load closes the loop per message (closed)"
echo "or measures from the intended send time (open); sockperf rows are sockperf's full RTT."
echo "Server CPU: all its threads' CPU time (schedstat) over the measured window / messages."
errs=$(grep -c '"errors":[1-9]' "$RUNS")
echo "runs: $(wc -l < "$RUNS") corio-load runs, $errs with errors; $((end - start)) s"

# ---- the plot ----------------------------------------------------------------
if command -v gnuplot >/dev/null 2>&1; then
	pl=""
	for f in "$OUT"/spec-closed_1c_64B-*.dat "$OUT"/spec-open_64c_64B_100k_s-*.dat \
		"$OUT"/spec-open_64c_64B_20k_s-*.dat; do
		[ -s "$f" ] || continue
		t=$(basename "$f" .dat | sed -e 's/^spec-//' -e 's/-corio$/ corio-echo/' \
			-e 's/-base$/ epoll-echo/' -e 's/_s /\/s /' -e 's/_/ /g')
		pl="$pl${pl:+, }'$f' using (1/(1-\$1/100.0)):2 with lines lw 2 title '$t'"
	done
	if [ -n "$pl" ]; then
		gnuplot <<GP 2> "$OUT/gnuplot.err" && echo "plot: $OUT/latency.png"
set terminal pngcairo size 1000,600 noenhanced
set output '$OUT/latency.png'
set title 'corio-echo vs epoll-echo: latency by percentile (last run of each; kernel $kern)'
set logscale x
set logscale y
set xlabel 'percentile'
set ylabel 'latency (us)'
set xtics ('0%%' 1, '90%%' 10, '99%%' 100, '99.9%%' 1000, '99.99%%' 10000, '99.999%%' 100000)
set grid
set key top left
plot $pl
GP
		[ -s "$OUT/gnuplot.err" ] && cat "$OUT/gnuplot.err" >&2
	fi
fi
