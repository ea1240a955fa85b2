#!/bin/sh
# make bench-instr: user-space instructions per message, counted by
# callgrind (exact: they repeat to 0.1% on a noisy machine where timings
# move 10-15%).
#
# For each server: start it under callgrind, pinned to one CPU; apply two
# closed-loop loads of different lengths (SHORT and LONG seconds) from
# corio-load pinned to the other CPU; zero the counters before each load and
# dump them after it; instructions per message = the difference of the two
# dumps over the difference in messages, so start-up, connection set-up and
# tear-down cancel out.
#
# corio sleeps in 1 ms slices when it sees valgrind (uring/ring.c), a path
# that never runs natively: the measured copy of the library is built with
# -DNVALGRIND (in $B/instr), so the native path is what gets counted.
#
# usage: bench-instr.sh BUILD_DIR   (env: INSTR_CONNS="1 64", INSTR_SHORT=2,
#        INSTR_LONG=6, INSTR_BACKENDS="uring epoll", INSTR_SERVERS="corio-echo
#        uring-echo epoll-echo httpd")
set -u
B=${1:-build}
IB=${INSTR_BUILD:-$B/instr}
CONNS=${INSTR_CONNS:-1 64}
SHORT=${INSTR_SHORT:-2}
LONG=${INSTR_LONG:-6}
BACKENDS=${INSTR_BACKENDS:-uring epoll}
SERVERS=${INSTR_SERVERS:-corio-echo uring-echo epoll-echo httpd}
SCPU=1 LCPU=0
[ "$(nproc)" -ge 2 ] || { SCPU=0; LCPU=0; }

if ! command -v callgrind_control >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "bench-instr: installing valgrind with apt-get"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind >/dev/null 2>&1 ||
		{ apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind >/dev/null 2>&1; }
fi
if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_control >/dev/null 2>&1; then
	echo "bench-instr: valgrind is not installed (apt-get install valgrind); skipped"
	exit 0
fi
make -s B="$IB" CFLAGS="-O2 -g -DNVALGRIND" "$IB/tools/corio-echo" "$IB/tools/uring-echo" \
	"$IB/tools/epoll-echo" "$IB/tools/examples/httpd" "$B/tools/corio-load" >/dev/null || {
	echo "bench-instr: build failed"
	exit 1
}
tmp=$(mktemp -d)
trap 'kill $(cat "$tmp"/pid 2>/dev/null) 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM

# a free TCP port on 127.0.0.1
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + $$ % 20000))
}

# total instructions (Ir) in the newest dump of PID
dump_ir() {
	pid=$1
	rm -f "$tmp"/cg.out.*
	callgrind_control -d "$pid" >/dev/null 2>&1
	f=$(ls -t "$tmp"/cg.out.* 2>/dev/null | head -n 1)
	[ -n "$f" ] || { echo 0; return; }
	awk '/^(summary|totals):/ { print $2; exit }' "$f"
}

wait_port() {
	i=0
	while [ $i -lt 300 ]; do
		if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# one load: prints "instructions messages"
one_load() {
	pid=$1 port=$2 conns=$3 secs=$4 kind=$5
	callgrind_control -z "$pid" >/dev/null 2>&1
	if [ "$kind" = http ]; then
		out=$(taskset -c $LCPU wrk -t1 -c"$conns" -d"${secs}s" "http://127.0.0.1:$port/f4k" 2>/dev/null)
		msgs=$(printf '%s\n' "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
		echo "$(dump_ir "$pid") ${msgs:-0}"
		return
	else
		out=$(taskset -c $LCPU "$B"/tools/corio-load -p "$port" -c "$conns" -s 64 -d "$secs" -w 0 \
			--no-probe --json -q 2>/dev/null)
	fi
	msgs=$(printf '%s' "$out" | sed -n 's/.*"msgs":\([0-9]*\).*/\1/p')
	echo "$(dump_ir "$pid") ${msgs:-0}"
}

# measure SERVER CONNS BACKEND: prints instructions per message or "-"
measure() {
	srv=$1 conns=$2 be=$3
	port=$(free_port)
	case $srv in
	corio-echo) cmd="$IB/tools/corio-echo -n 1 -p $port" kind=echo ;;
	uring-echo) cmd="$IB/tools/uring-echo -t 1 -p $port" kind=echo ;;
	epoll-echo) cmd="$IB/tools/epoll-echo -t 1 -p $port" kind=echo ;;
	httpd)
		mkdir -p "$tmp/www"
		head -c 4096 /dev/zero | tr '\0' x >"$tmp/www/f4k"
		command -v wrk >/dev/null 2>&1 || { echo "-"; return; }
		cmd="$IB/tools/examples/httpd -s 1 -p $port -d $tmp/www" kind=http ;;
	esac
	rm -f "$tmp"/cg.out.*
	CORIO_BACKEND=$be taskset -c $SCPU valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out.%p" \
		$cmd >"$tmp/srv.log" 2>&1 &
	echo $! >"$tmp/pid"
	pid=$(cat "$tmp/pid")
	if ! wait_port "$port"; then
		kill -9 "$pid" 2>/dev/null
		echo "-"
		return
	fi
	set -- $(one_load "$pid" "$port" "$conns" "$SHORT" "$kind")
	i1=$1 m1=$2
	set -- $(one_load "$pid" "$port" "$conns" "$LONG" "$kind")
	i2=$1 m2=$2
	# valgrind 3.19 may hang at exit (it does not know io_uring_enter
	# blocks): the numbers are taken, kill it
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	rm -f "$tmp/pid"
	if [ "$m2" -gt "$m1" ] 2>/dev/null; then
		awk -v a="$i1" -v b="$i2" -v x="$m1" -v y="$m2" 'BEGIN { printf "%.0f", (b - a) / (y - x) }'
	else
		echo "-"
	fi
}

echo "bench-instr: user-space instructions per message (callgrind; difference of a ${SHORT} s and a ${LONG} s"
echo "closed-loop load, so start-up cancels); server on CPU $SCPU, corio-load on CPU $LCPU; 64-byte echo,"
echo "httpd: one 4 KiB GET per message (keep-alive); kernel $(uname -r), $(nproc) cpus; corio built -O2 -DNVALGRIND"
printf '%-28s' "server"
for c in $CONNS; do printf '%16s' "$c conn"; done
echo
for srv in $SERVERS; do
	case $srv in
	corio-echo | httpd) bes=$BACKENDS ;;
	*) bes=native ;;
	esac
	for be in $bes; do
		case $be in
		uring) label="$srv, io_uring" ;;
		epoll) label="$srv, epoll fallback" ;;
		*) label=$srv ;;
		esac
		printf '%-28s' "$label"
		for c in $CONNS; do
			[ "$srv" = httpd ] && [ "$c" -gt 1 ] && c=50
			printf '%16s' "$(measure "$srv" "$c" "$([ "$be" = native ] && echo uring || echo "$be")")"
		done
		echo
	done
done
