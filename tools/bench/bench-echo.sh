#!/bin/sh
# tools/bench/bench-echo.sh BUILD_DIR - the echo benchmark of `make bench`.
#
# Three servers, run alternately (corio uring epoll, corio uring epoll, ...),
# each pinned to one CPU with the load pinned to the other, over 127.0.0.1:
#   corio  tools/corio-echo: corio's shard API
#   uring  tools/uring-echo: the hand-written raw-liburing floor (multishot
#          accept + recv, buffer ring, callbacks, no fibers)
#   epoll  tools/epoll-echo: the classic epoll server
# Cases:
#   closed loop   connections {1, 64, 512} x message size {64 B, 4 KiB}
#   busy-poll     1 connection, 64 B, every server spinning instead of sleeping
#   open loop     64 connections, 64 B, at 20k and 100k msgs/s: server CPU
#                 time per message next to latency (on 2 cores the client caps
#                 throughput, so CPU per message at a fixed rate is the
#                 comparison that holds; docs/BENCHMARKS.md, "Method")
#   sockperf      `sockperf ping-pong --tcp --full-rtt` against corio-echo
#                 --sockperf and `sockperf server`, when sockperf exists
#   fallback      corio-echo on the epoll fallback (CORIO_BACKEND=epoll: the
#                 ring emulator) beside epoll-echo and corio-echo on io_uring,
#                 alternated (fallback epoll corio, ...) over BENCH_ECHO_FB_REPS
#                 runs: server CPU per message at 20k and 100k msgs/s (goal
#                 <= 1.05x epoll-echo), 1-connection ping-pong p50 (goal
#                 <= 1.1x), msgs/s at 512 connections (client-bound: no goal);
#                 its own table. Each server's "listening" line names its
#                 backend, and a run on the wrong one is refused.
#   TLS           corio-echo plain (its default modes) and with the modes TLS
#                 has (--recv copy --send wait) beside corio-echo --tls
#                 (its generated ECDSA P-256 certificate, trusted by
#                 corio-load --tls --tls-ca: a full TLS 1.3 handshake per
#                 connection, before the measured window), 1 shard,
#                 alternated over BENCH_ECHO_TLS_REPS runs: msgs/s, server
#                 CPU per message, p50 and p99; its own table, whose setup
#                 line names the cipher openssl s_client agrees with the
#                 server (corio-load uses the same OpenSSL defaults).
#   UDP           the same servers with --udp (uring only when uring-echo has
#                 --udp): 1 socket ping-pong 64 B closed loop, and 64 sockets
#                 open loop at the same rates; corio-load --udp checks every
#                 datagram and counts lost, duplicated and reordered ones; and
#                 `sockperf ping-pong` (UDP) against corio-echo --udp
#                 --sockperf and `sockperf server` (UDP), with sockperf's own
#                 dropped / duplicated / out-of-order counts. A table of those
#                 counts says whether anything went missing.
# Prints markdown tables of medians with corio/uring and corio/epoll ratios;
# keeps every run (JSON lines), the tables, a latency-percentile plot of every
# run and a CPU-per-message bar chart (gnuplot) under bench-results/echo-<time>/.
#
# A server is started on a fresh port (port 0, read back from its
# "listening on" line) and used only once that port accepts a connection;
# the next server starts only after the previous one's port is closed. A
# run that fails is retried once, with a message saying so.
#
# Environment: BENCH_ECHO_REPS (3), BENCH_ECHO_FB_REPS (5; 0 skips the
# fallback section), BENCH_ECHO_TLS_REPS (5; 0 skips the TLS section),
# BENCH_ECHO_ONLY=tls or fallback (that section alone), BENCH_ECHO_SECS (1, closed loop; open
# loop and sockperf run twice as long), BENCH_ECHO_CLIENT (corio | epoll:
# corio-load's engine, busy-polling its own CPU), BENCH_ECHO_QUICK=1 (one
# repetition of a few cases, for a smoke test), BENCH_ECHO_SET=headline (what
# the default make bench shows, about 100 s: closed loop 1 and 512
# connections and open loop at 20k and 100k msgs/s, 64 B, corio uring epoll;
# no fallback, TLS, UDP or sockperf section; the default, full, is every
# case: make bench-echo or make bench FULL=1).
B=${1:-build}
T=$B/tools
. "$(dirname "$0")/lib.sh"
REPS=${BENCH_ECHO_REPS:-3}
FB_REPS=${BENCH_ECHO_FB_REPS:-5}
TLS_REPS=${BENCH_ECHO_TLS_REPS:-5}
ONLY=${BENCH_ECHO_ONLY:-}
SECS=${BENCH_ECHO_SECS:-1}
CLIENT=${BENCH_ECHO_CLIENT:-corio}
SET=${BENCH_ECHO_SET:-full}
WARM=0.3
SIDES="corio uring epoll"
case "$REPS" in ''|*[!0-9]*|0) echo "bench-echo: BENCH_ECHO_REPS must be a positive integer" >&2; exit 2;; esac
case "$FB_REPS" in ''|*[!0-9]*) echo "bench-echo: BENCH_ECHO_FB_REPS must be an integer >= 0" >&2; exit 2;; esac
case "$ONLY" in ''|tls|fallback) ;; *) echo "bench-echo: BENCH_ECHO_ONLY must be tls or fallback (or unset)" >&2; exit 2;; esac
case "$TLS_REPS" in ''|*[!0-9]*) echo "bench-echo: BENCH_ECHO_TLS_REPS must be an integer >= 0" >&2; exit 2;; esac
case "$CLIENT" in corio|epoll) ;; *) echo "bench-echo: BENCH_ECHO_CLIENT must be corio or epoll" >&2; exit 2;; esac
case "$SET" in full) ;; headline) FB_REPS=0 TLS_REPS=0 ;; *) echo "bench-echo: BENCH_ECHO_SET must be full or headline" >&2; exit 2;; esac
for t in corio-echo uring-echo epoll-echo corio-load; do
	if [ ! -x "$T/$t" ]; then
		echo "bench-echo: $T/$t is missing; run make tools first" >&2
		exit 1
	fi
done

if [ "$(nproc)" -ge 2 ]; then SCPU=1; LCPU=0; else SCPU=0; LCPU=0; fi

# sockperf and gnuplot: install them when we can (root with apt-get), else skip.
need=""
# the headline set runs no sockperf case
[ "$SET" = headline ] || command -v sockperf >/dev/null 2>&1 || need="$need sockperf"
command -v gnuplot >/dev/null 2>&1 || need="$need gnuplot-nox"
# shellcheck disable=SC2086
if [ -n "$need" ] && ! apt_install bench-echo $need; then
	echo "bench-echo: not installed:$need (apt-get install$need); going on without" >&2
fi

OUT=bench-results/echo-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT" || exit 1
RUNS=$OUT/runs.jsonl
ROWS=$OUT/rows.tsv
: > "$RUNS"
: > "$ROWS"
SRV_PID=
PORT=
PROTO=tcp  # tcp | udp: what the servers started next speak
trap 'stop_server; exit 130' INT TERM

# port_up PORT: the server's port is there (TCP listening / UDP bound).
port_up() {
	if [ "$PROTO" = udp ]; then port_bound_udp "$1"; else port_listening "$1"; fi
}

# start_server CMD...: run it pinned, wait for its "listening" line and for
# the port to accept; sets PORT and SRV_PID.
start_server() {
	for try in 1 2; do
		taskset -c $SCPU "$@" > "$OUT/server.out" 2> "$OUT/server.err" &
		SRV_PID=$!
		i=0
		while [ $i -lt 100 ]; do
			if grep -q 'listening on' "$OUT/server.out" 2>/dev/null; then
				PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/server.out")
				[ -n "$PORT" ] && port_up "$PORT" && return 0
			fi
			kill -0 $SRV_PID 2>/dev/null || break
			sleep 0.1
			i=$((i + 1))
		done
		echo "bench-echo: $1 did not start listening (try $try of 2):" >&2
		cat "$OUT/server.err" >&2
		stop_server
	done
	return 1
}

# stop_server: SIGTERM, wait for the process, then for its port to close, so
# the next server never shares a port with a listener still being torn down.
stop_server() {
	[ -n "$SRV_PID" ] || return 0
	kill -TERM $SRV_PID 2>/dev/null
	wait $SRV_PID 2>/dev/null
	SRV_PID=
	if [ -n "$PORT" ]; then
		i=0
		while port_up "$PORT" && [ $i -lt 50 ]; do
			sleep 0.1
			i=$((i + 1))
		done
	fi
	PORT=
}

jget() { # jget JSON KEY
	printf '%s\n' "$1" | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"
}

# row CASE SIDE msgs/s p50 p99 p99.9 max srv-ns/msg [lost/dup/reordered (UDP)]
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "${9:--}" >> "$ROWS"; }

# load CASE SIDE REP ARGS...: one corio-load run against the current server.
load() {
	c=$1 side=$2 rep=$3
	shift 3
	spec=$OUT/spec-$(printf '%s' "$c" | tr -c 'A-Za-z0-9\n' '_')-$side-$rep.dat
	j=$(taskset -c $LCPU "$T/corio-load" -p "$PORT" --cpus $LCPU --engine $CLIENT --busy-poll \
		--server-pid $SRV_PID --json -q --warmup $WARM --label "$c|$side|$rep" \
		--spectrum "$spec" "$@" 2> "$OUT/load.err")
	st=$?
	# 3: a UDP run that completed with datagrams lost, duplicated or
	# reordered: keep it, the accounting table shows it
	if { [ $st -ne 0 ] && [ $st -ne 3 ]; } || [ -z "$j" ]; then
		[ -n "$j" ] && printf '%s\n' "$j" >> "$RUNS"
		return 1
	fi
	[ $st -eq 3 ] && echo "bench-echo: $c, $side, run $rep: $(tail -1 "$OUT/load.err")" >&2
	printf '%s\n' "$j" >> "$RUNS"
	acct=-
	[ "$PROTO" = udp ] && acct="$(jget "$j" lost)/$(jget "$j" dup)/$(jget "$j" reordered)"
	row "$c" "$side" "$(jget "$j" msgs_per_s)" "$(jget "$j" p50)" "$(jget "$j" p99)" \
		"$(jget "$j" p99.9)" "$(jget "$j" max)" "$(jget "$j" server_cpu_ns_per_msg)" "$acct"
}

# sp CASE SIDE REP: sockperf ping-pong against the current server (over
# $PROTO; sockperf's client speaks UDP unless given --tcp).
sp() {
	c=$1 side=$2 rep=$3
	tcpflag=--tcp
	[ "$PROTO" = udp ] && tcpflag=
	o=$(taskset -c $LCPU timeout 30 sockperf ping-pong $tcpflag -i 127.0.0.1 -p "$PORT" \
		-t $((SECS * 2)) -m 64 --full-rtt 2>&1)
	printf '%s\n' "$o" > "$OUT/sockperf-$PROTO-$side-$rep.txt"
	p() { printf '%s\n' "$o" | sed -n "s/.*percentile $1 = *\([0-9.]*\).*/\1/p"; }
	n=$(printf '%s\n' "$o" | sed -n 's/.*Valid Duration\] RunTime=\([0-9.]*\) sec; SentMessages=\([0-9]*\).*/\2 \1/p')
	mps=$(echo "$n" | awk '{ if ($2 > 0) printf "%.1f", $1 / $2 }')
	mx=$(printf '%s\n' "$o" | sed -n 's/.*<MAX> observation = *\([0-9.]*\).*/\1/p')
	if [ -z "$(p 50.000)" ]; then
		echo "bench-echo: sockperf against $side failed:" >&2
		printf '%s\n' "$o" | tail -5 >&2
		return 1
	fi
	# "# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0"
	acct=-
	[ "$PROTO" = udp ] && acct=$(printf '%s\n' "$o" | sed -n 's/.*dropped messages = \([0-9]*\); # duplicated messages = \([0-9]*\); # out-of-order messages = \([0-9]*\).*/\1\/\2\/\3/p' | head -1)
	row "$c" "$side" "$mps" "$(p 50.000)" "$(p 99.000)" "$(p 99.900)" "$mx" "-1" "${acct:--}"
}

# sockperf server cannot pick a port and print it: try a few near a random
# one below the ephemeral range (where clients' own sockets live), each
# checked unused first and listening after.
start_sockperf_server() {
	PORT=$((10000 + $$ % 20000))
	for try in 1 2 3 4 5; do
		while port_used $PORT || port_bound_udp $PORT; do PORT=$((PORT + 7)); done
		# sockperf server speaks UDP unless given --tcp
		if [ "$PROTO" = udp ]; then tcpflag=; else tcpflag=--tcp; fi
		taskset -c $SCPU sockperf server $tcpflag -i 127.0.0.1 -p $PORT > "$OUT/server.out" 2>&1 &
		SRV_PID=$!
		i=0
		while [ $i -lt 30 ] && kill -0 $SRV_PID 2>/dev/null; do
			port_up $PORT && return 0
			sleep 0.1
			i=$((i + 1))
		done
		stop_server
		PORT=$((PORT + 7))
	done
	echo "bench-echo: sockperf server did not start:" >&2
	cat "$OUT/server.out" >&2
	return 1
}

# srv SIDE [busy]: the command line of SIDE's server (with --udp over UDP).
srv() {
	case $1 in
	corio) s="$T/corio-echo --cpus $SCPU --port 0"; [ -n "$2" ] && s="$s --idle poll" ;;
	fallback) s="env CORIO_BACKEND=epoll $T/corio-echo --cpus $SCPU --port 0"
		[ -n "$2" ] && s="$s --idle poll" ;;
	copy) s="$T/corio-echo --cpus $SCPU --port 0 --recv copy --send wait" ;;
	tls) s="$T/corio-echo --cpus $SCPU --port 0 --tls" ;;
	uring) s="$T/uring-echo --cpus $SCPU --port 0"; [ -n "$2" ] && s="$s --busy-poll" ;;
	epoll) s="$T/epoll-echo --cpus $SCPU --port 0"; [ -n "$2" ] && s="$s --busy-poll" ;;
	esac
	[ "$PROTO" = udp ] && s="$s --udp"
	echo "$s"
}

# backend_ok SIDE: corio-echo's "listening" line names the backend it runs
# on: the fallback side must be on epoll and corio on io_uring (where io_uring
# is refused, corio falls back too: its rows are then the fallback's, said once).
backend_ok() {
	case $1 in
	fallback)
		grep -q 'backend=epoll' "$OUT/server.out" && return 0
		echo "bench-echo: the fallback server is not on the epoll backend:" >&2
		cat "$OUT/server.out" >&2
		return 1 ;;
	corio)
		if [ -z "$CORIO_WARNED" ] && ! grep -q 'backend=io_uring' "$OUT/server.out"; then
			echo "bench-echo: corio-echo is not on io_uring here: $(cat "$OUT/server.out")" >&2
			CORIO_WARNED=1
		fi ;;
	esac
	return 0
}

# run_once CASE SIDE REP BUSY LOAD_ARGS...: start the server, run the load, stop.
run_once() {
	c=$1 side=$2 rep=$3 busy=$4
	shift 4
	# shellcheck disable=SC2046
	start_server $(srv $side $busy) || return 1
	if ! backend_ok $side; then
		stop_server
		return 1
	fi
	# the TLS server's generated certificate is the one to trust
	[ "$side" = tls ] && set -- --tls --tls-ca "$(sed -n 's/.* cert=\([^ ]*\).*/\1/p' "$OUT/server.out")" "$@"
	load "$c" $side $rep "$@"
	st=$?
	stop_server
	return $st
}

# bench CASE BUSY LOAD_ARGS...: corio uring epoll, corio uring epoll, ...
bench() {
	c=$1 busy=$2
	shift 2
	r=1
	while [ $r -le $REPS ]; do
		for side in $SIDES; do
			if ! run_once "$c" $side $r "$busy" "$@"; then
				echo "bench-echo: $c, $side, run $r did not complete; retrying it once" >&2
				sed 's/^/  /' "$OUT/load.err" >&2
				if ! run_once "$c" $side $r "$busy" "$@"; then
					echo "bench-echo: $c, $side, run $r failed again (kept out of the table):" >&2
					sed 's/^/  /' "$OUT/load.err" "$OUT/server.err" >&2
				fi
			fi
		done
		r=$((r + 1))
	done
}

kern=$(uname -r)
echo "## echo benchmark (tools/bench/bench-echo.sh)"
echo "kernel $kern, $(nproc) CPUs; server pinned to CPU $SCPU, load (corio-load --engine $CLIENT"
echo "--busy-poll, every byte verified) pinned to CPU $LCPU; 127.0.0.1; 1 shard / 1 thread per"
echo "server, idle=block unless noted; $REPS alternating runs per case (corio uring epoll, ...),"
echo "medians; ${SECS} s closed loop, $((SECS * 2)) s open loop and sockperf, after ${WARM} s warm-up."
echo "Servers: corio = corio-echo, uring = uring-echo (raw liburing, the floor), epoll = epoll-echo;"
echo "udp cases: the same servers with --udp, corio-load --udp (one socket per conn)."
[ "$SET" = headline ] && echo "Cases: the headline set (BENCH_ECHO_SET=headline); every case, UDP, TLS and the epoll fallback: make bench-echo."

echo "Results: $OUT/"
echo

start=$(date +%s)
if [ -n "$BENCH_ECHO_QUICK" ]; then
	CONNS="1 64"; SIZES="64"; RATES="20000"
elif [ "$SET" = headline ]; then
	CONNS="1 512"; SIZES="64"; RATES="20000 100000"
else
	CONNS="1 64 512"; SIZES="64 4096"; RATES="20000 100000"
fi
if [ -z "$ONLY" ]; then
	for s in $SIZES; do
		for n in $CONNS; do
			bench "closed ${n}c ${s}B" "" -c $n -s $s -d $SECS
		done
	done
	[ "$SET" = headline ] || bench "closed 1c 64B busy-poll" busy -c 1 -s 64 -d $SECS
	for rate in $RATES; do
		bench "open 64c 64B $((rate / 1000))k/s" "" -c 64 -s 64 -r $rate -d $((SECS * 2))
	done
	if [ "$SET" = headline ]; then
		:
	elif command -v sockperf >/dev/null 2>&1; then
		r=1
		while [ $r -le $REPS ]; do
			# shellcheck disable=SC2046
			start_server $(srv corio) --sockperf && { sp "sockperf ping-pong 64B" corio $r; stop_server; }
			start_sockperf_server && sp "sockperf ping-pong 64B" sockperf $r
			stop_server
			r=$((r + 1))
		done
	else
		echo "(sockperf not installed: no sockperf rows)"
	fi
fi

# ---- the epoll fallback ------------------------------------------------------
# corio-echo on the ring emulator beside epoll-echo and corio-echo on io_uring,
# the same pinning and load, alternated; FB_REPS runs (5: issue 24's goals
# want medians of at least 5).
fb_start=$(date +%s)
if [ "$FB_REPS" -gt 0 ] && { [ -z "$ONLY" ] || [ "$ONLY" = fallback ]; }; then
	TCP_SIDES=$SIDES TCP_REPS=$REPS
	SIDES="fallback epoll corio" REPS=$FB_REPS
	bench "fallback closed 1c 64B" "" -c 1 -s 64 -d $SECS
	[ -z "$BENCH_ECHO_QUICK" ] && bench "fallback closed 512c 64B" "" -c 512 -s 64 -d $SECS
	for rate in $RATES; do
		bench "fallback open 64c 64B $((rate / 1000))k/s" "" -c 64 -s 64 -r $rate -d $((SECS * 2))
	done
	SIDES=$TCP_SIDES REPS=$TCP_REPS
fi
fb_end=$(date +%s)

# ---- TLS ---------------------------------------------------------------------
# corio-echo plain (bufs), plain with TLS's modes (copy), and --tls, alternated;
# short runs (the section costs about 3 x 3 x TLS_REPS x (SECS + 1.5) s).
tls_start=$(date +%s)
TLS_CIPHER=-
if [ "$ONLY" = fallback ]; then
	: # the fallback section alone
elif [ "$TLS_REPS" -gt 0 ] && [ "$CLIENT" != corio ]; then
	echo "bench-echo: no TLS rows: corio-load --tls runs on the corio engine (BENCH_ECHO_CLIENT=$CLIENT)" >&2
elif [ "$TLS_REPS" -gt 0 ]; then
	# shellcheck disable=SC2046
	if command -v openssl >/dev/null 2>&1 && start_server $(srv tls); then
		TLS_CIPHER=$(openssl s_client -connect "127.0.0.1:$PORT" -tls1_3 -CAfile \
			"$(sed -n 's/.* cert=\([^ ]*\).*/\1/p' "$OUT/server.out")" < /dev/null 2>/dev/null |
			sed -n 's/.*Cipher is \(.*\)/\1/p' | head -1)
		stop_server
	fi
	TCP_SIDES=$SIDES TCP_REPS=$REPS
	SIDES="corio copy tls" REPS=$TLS_REPS
	bench "tls closed 1c 64B" "" -c 1 -s 64 -d $SECS
	[ -z "$BENCH_ECHO_QUICK" ] && bench "tls closed 64c 4KiB" "" -c 64 -s 4096 -d $SECS
	bench "tls open 64c 64B 20k/s" "" -c 64 -s 64 -r 20000 -d $SECS
	SIDES=$TCP_SIDES REPS=$TCP_REPS
fi
tls_end=$(date +%s)

# ---- UDP ---------------------------------------------------------------------
PROTO=udp
TCP_SIDES=$SIDES
SIDES=""
for side in $TCP_SIDES; do
	# a server without --udp (an older uring-echo) sits this section out
	"$T/$side-echo" --help 2>&1 | grep -q -- '--udp' && SIDES="$SIDES $side"
done
if [ -z "$ONLY" ] && [ "$SET" != headline ]; then
	bench "udp closed 1c 64B" "" --udp -c 1 -s 64 -d $SECS
	for rate in $RATES; do
		bench "udp open 64c 64B $((rate / 1000))k/s" "" --udp -c 64 -s 64 -r $rate -d $((SECS * 2))
	done
	if command -v sockperf >/dev/null 2>&1; then
		r=1
		while [ $r -le $REPS ]; do
			# shellcheck disable=SC2046
			start_server $(srv corio) --sockperf && { sp "sockperf UDP ping-pong 64B" corio $r; stop_server; }
			start_sockperf_server && sp "sockperf UDP ping-pong 64B" sockperf $r
			stop_server
			r=$((r + 1))
		done
	fi
fi
SIDES=$TCP_SIDES
PROTO=tcp
end=$(date +%s)

# ---- the tables --------------------------------------------------------------
awk -F'\t' -v out="$OUT" '
function med(list,   n, a, i, j, t) {
	n = split(list, a, " ")
	if (n == 0) { MIN = MAX = ""; return "" }
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
	MIN = a[1]; MAX = a[n]
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function k(v) { return v == "" ? "-" : v >= 10000 ? sprintf("%.0fk", v / 1000) : v >= 1000 ? sprintf("%.1fk", v / 1000) : sprintf("%.0f", v) }
function spread(m) { return (m > 0) ? sprintf(" ±%.0f%%", 100 * (MAX - MIN) / 2 / m) : "" }
function ratio(a, b) { return (b > 0 && a != "" && a >= 0) ? sprintf("%.2f", a / b) : "-" }
function us(v) { return v == "" ? "-" : sprintf("%.1f", v) }
{
	if (!($1 in seen)) { seen[$1] = 1; order[++nc] = $1 }
	key = $1 SUBSEP $2
	for (f = 3; f <= 8; f++) v[key, f] = v[key, f] " " $f
}
END {
	for (i = 1; i <= nc; i++) if (order[i] !~ /^(sockperf|fallback|tls)/) main++
	if (main) {
		print "| case | msgs/s corio | uring | epoll | corio/uring | corio/epoll | server CPU ns/msg corio | uring | epoll | corio/uring | corio/epoll |"
		print "|---|---|---|---|---|---|---|---|---|---|---|"
		nl = split("corio uring epoll", S, " ")
		for (i = 1; i <= nc; i++) {
			c = order[i]
			if (c ~ /^(sockperf|fallback|tls)/) continue
			for (s = 1; s <= nl; s++) {
				kk = c SUBSEP S[s]
				for (f = 3; f <= 8; f++) { m[S[s], f] = med(v[kk, f]); sd[S[s], f] = spread(m[S[s], f]) }
			}
			printf "| %s | %s%s | %s%s | %s%s | %s | %s |", c,
				k(m["corio", 3]), sd["corio", 3], k(m["uring", 3]), sd["uring", 3], k(m["epoll", 3]), sd["epoll", 3],
				ratio(m["corio", 3], m["uring", 3]), ratio(m["corio", 3], m["epoll", 3])
			for (s = 1; s <= nl; s++)
				printf " %s |", (m[S[s], 8] > 0) ? sprintf("%.0f%s", m[S[s], 8], sd[S[s], 8]) : "-"
			printf " %s | %s |\n", (m["corio", 8] > 0 ? ratio(m["corio", 8], m["uring", 8]) : "-"),
				(m["corio", 8] > 0 ? ratio(m["corio", 8], m["epoll", 8]) : "-")
			if (m["corio", 8] > 0)
				printf "\"%s\" %s %s %s\n", c, m["corio", 8], m["uring", 8] + 0, m["epoll", 8] + 0 > (out "/cpu.dat")
		}
		print ""
		print "| case | p50 us corio / uring / epoll | corio/uring | corio/epoll | p99 us | corio/uring | corio/epoll | p99.9 us | corio/uring | corio/epoll |"
		print "|---|---|---|---|---|---|---|---|---|---|"
		for (i = 1; i <= nc; i++) {
			c = order[i]
			if (c ~ /^(sockperf|fallback|tls)/) continue
			for (s = 1; s <= nl; s++)
				for (f = 4; f <= 6; f++) m[S[s], f] = med(v[c SUBSEP S[s], f])
			printf "| %s |", c
			for (f = 4; f <= 6; f++)
				printf " %s / %s / %s | %s | %s |", us(m["corio", f]), us(m["uring", f]), us(m["epoll", f]),
					ratio(m["corio", f], m["uring", f]), ratio(m["corio", f], m["epoll", f])
			printf "\n"
		}
	}
	for (i = 1; i <= nc; i++) {
		c = order[i]
		if (c !~ /^sockperf/) continue
		for (f = 3; f <= 6; f++) { a[f] = med(v[c SUBSEP "corio", f]); b[f] = med(v[c SUBSEP "sockperf", f]) }
		print ""
		print "| case | msgs/s corio-echo --sockperf | sockperf server | ratio | p50 us corio / sockperf (ratio) | p99 us | p99.9 us |"
		print "|---|---|---|---|---|---|---|"
		printf "| %s | %s | %s | %s |", c, k(a[3]), k(b[3]), ratio(a[3], b[3])
		for (f = 4; f <= 6; f++) printf " %s / %s (%s) |", us(a[f]), us(b[f]), ratio(a[f], b[f])
		printf "\n"
	}
}' "$ROWS" > "$OUT/table.md"
# UDP: every datagram accounted for, summed over the runs of each case.
awk -F'\t' '
$9 != "-" && $9 != "" {
	key = $1 SUBSEP $2
	if (!(key in n)) order[++nk] = key
	n[key]++
	split($9, a, "/"); l[key] += a[1]; d[key] += a[2]; r[key] += a[3]
	tl += a[1]; td += a[2]; tr += a[3]
}
END {
	if (!nk) exit
	print ""
	print "| UDP case | server | runs | lost | duplicated | reordered |"
	print "|---|---|---|---|---|---|"
	for (i = 1; i <= nk; i++) {
		split(order[i], k, SUBSEP)
		printf "| %s | %s | %d | %d | %d | %d |\n", k[1], k[2], n[order[i]], l[order[i]], d[order[i]], r[order[i]]
	}
	print ""
	if (tl + td + tr == 0)
		print "UDP: every datagram came back once and in order (corio-load: checked byte by byte; sockperf: its own counts)."
	else
		printf "UDP: NOT CLEAN: %d lost, %d duplicated, %d reordered over all runs.\n", tl, td, tr
}' "$ROWS" >> "$OUT/table.md"
# The fallback's table: each goal's metric, medians ± half range, ratios.
awk -F'\t' -v reps="$FB_REPS" -v secs="$SECS" -v kern="$(uname -r)" -v scpu=$SCPU -v lcpu=$LCPU -v t=$((fb_end - fb_start)) '
function med(list,   n, a, i, j, x) {
	n = split(list, a, " ")
	if (n == 0) { MIN = MAX = ""; N = 0; return "" }
	for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
	MIN = a[1]; MAX = a[n]; N = n
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function cell(c, side, f, fmt,   m) {
	m = med(v[c SUBSEP side, f])
	if (m == "") { M[side] = ""; return "-" }
	M[side] = m
	return sprintf(fmt, m) (m > 0 ? sprintf(" ±%.0f%%", 100 * (MAX - MIN) / 2 / m) : "") " (" N ")"
}
function ratio(a, b) { return (a != "" && b > 0) ? sprintf("%.2f", a / b) : "-" }
function line(what, c, f, fmt, goal,   a, b, d, r, g) {
	if (!((c SUBSEP "fallback", f) in v)) return
	a = cell(c, "fallback", f, fmt); b = cell(c, "epoll", f, fmt); d = cell(c, "corio", f, fmt)
	r = ratio(M["fallback"], M["epoll"])
	if (goal !~ /^[0-9.]+$/) g = goal == "" ? "-" : goal
	else g = r == "-" ? "<= " goal ": -" : (r + 0 <= goal + 0 ? "<= " goal ": met" : "<= " goal ": **not met**")
	printf "| %s | %s | %s | %s | %s | %s | %s |\n", what, a, b, r, g, d, ratio(M["fallback"], M["corio"])
}
$1 ~ /^fallback/ { for (f = 3; f <= 8; f++) v[$1 SUBSEP $2, f] = v[$1 SUBSEP $2, f] " " $f; any = 1 }
END {
	if (!any) exit
	print ""
	print "### The epoll fallback (corio-echo with CORIO_BACKEND=epoll)"
	printf "kernel %s; server pinned to CPU %d, corio-load (busy-poll, every byte verified) to CPU %d; 1 shard / 1 thread;\n", kern, scpu, lcpu
	printf "%d alternating runs per case (fallback, epoll-echo, corio-echo on io_uring); medians ± half the\n", reps
	printf "min..max range (runs); %s s closed loop, %d s open loop; %d s for this section.\n\n", secs, 2 * secs, t
	print "| row | fallback | epoll-echo | fallback/epoll | goal | corio on io_uring | fallback/io_uring |"
	print "|---|---|---|---|---|---|---|"
	line("server CPU ns/msg, open 64c 64B 20k/s", "fallback open 64c 64B 20k/s", 8, "%.0f", "1.05")
	line("server CPU ns/msg, open 64c 64B 100k/s", "fallback open 64c 64B 100k/s", 8, "%.0f", "1.05")
	line("p50 us, closed 1c 64B (ping-pong)", "fallback closed 1c 64B", 4, "%.1f", "1.1")
	line("p99 us, closed 1c 64B", "fallback closed 1c 64B", 5, "%.1f", "")
	line("msgs/s, closed 1c 64B", "fallback closed 1c 64B", 3, "%.0f", "")
	line("msgs/s, closed 512c 64B", "fallback closed 512c 64B", 3, "%.0f", "none: client-bound")
	line("p50 us, open 64c 64B 100k/s", "fallback open 64c 64B 100k/s", 4, "%.1f", "")
}' "$ROWS" >> "$OUT/table.md"
# The TLS table: per case, msgs/s, server CPU per message, p50, p99;
# medians ± half range, and --tls against the plain server in both modes.
awk -F'\t' -v reps="$TLS_REPS" -v secs="$SECS" -v kern="$(uname -r)" -v scpu=$SCPU -v lcpu=$LCPU \
	-v t=$((tls_end - tls_start)) -v cipher="$TLS_CIPHER" '
function med(list,   n, a, i, j, x) {
	n = split(list, a, " ")
	if (n == 0) { MIN = MAX = ""; N = 0; return "" }
	for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
	MIN = a[1]; MAX = a[n]; N = n
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function cell(c, side, f, fmt,   m) {
	m = med(v[c SUBSEP side, f])
	if (m == "" || m < 0) { M[side] = ""; return "-" }
	M[side] = m
	return sprintf(fmt, m) (m > 0 ? sprintf(" ±%.0f%%", 100 * (MAX - MIN) / 2 / m) : "") " (" N ")"
}
function ratio(a, b) { return (a != "" && b > 0) ? sprintf("%.2f", a / b) : "-" }
function line(what, c, f, fmt,   a, b, d) {
	if (!((c SUBSEP "tls", f) in v)) return
	a = cell(c, "corio", f, fmt); b = cell(c, "copy", f, fmt); d = cell(c, "tls", f, fmt)
	printf "| %s, %s | %s | %s | %s | %s | %s |\n", substr(c, 5), what, a, b, d,
		ratio(M["tls"], M["copy"]), ratio(M["tls"], M["corio"])
}
$1 ~ /^tls / { for (f = 3; f <= 8; f++) v[$1 SUBSEP $2, f] = v[$1 SUBSEP $2, f] " " $f; if (!($1 in seen)) { seen[$1] = 1; order[++nc] = $1 } }
END {
	if (!nc) exit
	print ""
	print "### TLS echo (corio-echo --tls against plain corio-echo)"
	printf "kernel %s; server pinned to CPU %d, corio-load (busy-poll, every byte verified) to CPU %d; 1 shard;\n", kern, scpu, lcpu
	printf "TLS: TLS 1.3, cipher %s, ECDSA P-256 self-signed certificate (corio-echo --tls generates it;\n", cipher == "" ? "-" : cipher
	print "corio-load --tls --tls-ca verifies it), one full handshake per connection before the measured window."
	printf "%d alternating runs per case (plain bufs, plain copy, tls); medians ± half the min..max range (runs);\n", reps
	printf "%s s per run; %d s for this section. plain: default modes (--recv bufs --send buf); copy: the\n", secs, t
	print "modes TLS has (--recv copy --send wait), so tls/copy is the cost of the encryption alone.\n"
	print "| case, metric | plain | copy | tls | tls/copy | tls/plain |"
	print "|---|---|---|---|---|---|"
	for (i = 1; i <= nc; i++) {
		line("msgs/s", order[i], 3, "%.0f")
		line("server CPU ns/msg", order[i], 8, "%.0f")
		line("p50 us", order[i], 4, "%.1f")
		line("p99 us", order[i], 5, "%.1f")
	}
}' "$ROWS" >> "$OUT/table.md"
cat "$OUT/table.md"
echo
echo "±: half the min..max range over the runs, in % of the median. Latency: corio-load"
echo "closes the loop per message (closed) or measures from the intended send time (open);"
echo "sockperf rows are sockperf's full RTT. Server CPU: all the server's threads' CPU time"
echo "(schedstat) over the measured window / messages."
errs=$(grep -c '"errors":[1-9]' "$RUNS")
echo "runs: $(wc -l < "$RUNS") corio-load runs, $errs with errors; $((end - start)) s"

# ---- the plots ---------------------------------------------------------------
if command -v gnuplot >/dev/null 2>&1; then
	# Every run of three cases, one panel per case; colour = server.
	panel() { # panel CASE_FILE_KEY TITLE
		pl=""
		for side in $SIDES; do
			case $side in corio) col=1 ;; uring) col=2 ;; epoll) col=3 ;; esac
			first=1
			for f in "$OUT"/spec-$1-$side-*.dat; do
				[ -s "$f" ] || continue
				if [ $first = 1 ]; then t="title '$side-echo'"; first=0; else t="notitle"; fi
				pl="$pl${pl:+, }'$f' using (1/(1-\$1/100.0)):2 with lines lw 1.5 lc $col $t"
			done
		done
		[ -n "$pl" ] && printf "set title '%s'\nplot %s\n" "$2" "$pl"
	}
	{
		echo "set terminal pngcairo size 2000,520 noenhanced"
		echo "set output '$OUT/latency.png'"
		echo "set multiplot layout 1,4 title 'latency by percentile, every run (kernel $kern)'"
		echo "set logscale x; set logscale y; set grid; set key top left"
		echo "set xlabel 'percentile'; set ylabel 'latency (us)'"
		echo "set xtics ('0%%' 1, '90%%' 10, '99%%' 100, '99.9%%' 1000, '99.99%%' 10000)"
		panel closed_1c_64B 'closed 1 conn 64 B'
		panel open_64c_64B_20k_s 'open 64 conns 64 B 20k/s'
		panel open_64c_64B_100k_s 'open 64 conns 64 B 100k/s'
		panel udp_closed_1c_64B 'UDP closed 1 socket 64 B'
		echo "unset multiplot"
	} > "$OUT/latency.gp"
	gnuplot "$OUT/latency.gp" 2> "$OUT/gnuplot.err" && echo "plot: $OUT/latency.png"
	if [ -s "$OUT/cpu.dat" ]; then
		gnuplot 2>> "$OUT/gnuplot.err" <<GP && echo "plot: $OUT/cpu.png"
set terminal pngcairo size 1200,520 noenhanced
set output '$OUT/cpu.png'
set title 'server CPU per message (ns, median of runs; kernel $kern)'
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set xtics rotate by -30
set grid ytics
set yrange [0:*]
set key top left
plot '$OUT/cpu.dat' using 2:xtic(1) title 'corio-echo', '' using 3 title 'uring-echo', '' using 4 title 'epoll-echo'
GP
	fi
	[ -s "$OUT/gnuplot.err" ] && cat "$OUT/gnuplot.err" >&2
fi
exit 0
