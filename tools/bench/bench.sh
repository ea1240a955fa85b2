#!/bin/sh
# tools/bench/bench.sh BUILD_DIR [headline | full | AREA...] - what make bench runs.
#
#   headline  make bench: the comparisons a newcomer asks for first, in about
#             4 minutes: corio-echo against uring-echo and epoll-echo, httpd
#             against nginx, corio-kv against redis-server, each driver's
#             headline set (BENCH_*_SET=headline: fewer cases, same method).
#   full      make bench FULL=1: every micro-benchmark (build/tools/bench-*)
#             once per backend, io_uring then the epoll fallback
#             (CORIO_BACKEND=uring, =epoll; BENCH_BACKENDS="uring" skips the
#             fallback), then every case of the echo, kv and httpd drivers:
#             about 20 minutes.
#   AREA      make bench-AREA: echo, httpd, kv (every case of that driver),
#             kvsave (corio-kv snapshots and eviction beside redis-server),
#             instr (instructions per message under callgrind),
#             micro (every micro-benchmark), or one micro-benchmark by name:
#             core, fs, msg, net, sched, sendfile, timer, tls (bench-AREA on both
#             backends).
# Each section starts with a progress line ("== [2/3] httpd against nginx
# (about 60 s)") and ends with its measured time. Each program prints its own
# setup (backend, shards, CPUs, connections, sizes, kernel) with its table;
# this script adds the machine and the build's flags, and keeps a copy of the
# output under bench-results/.
B=${1:-build}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- headline
BACKENDS=${BENCH_BACKENDS:-uring epoll}
MICRO=""
for b in "$B"/tools/bench-*; do
	[ -x "$b" ] && MICRO="$MICRO ${b##*/bench-}"
done

# The sections, as NAME:SET words (SET: headline or full).
secs=""
for a in "$@"; do
	case $a in
	headline) secs="$secs echo:headline httpd:headline kv:headline" ;;
	full)
		for m in $MICRO; do secs="$secs $m:full"; done
		secs="$secs echo:full kv:full httpd:full instr:full"
		;;
	instr) secs="$secs instr:full" ;;
	micro) for m in $MICRO; do secs="$secs $m:full"; done ;;
	echo | httpd | kv | kvsave | proxy) secs="$secs $a:full" ;;
	*)
		if [ -x "$B/tools/bench-$a" ]; then
			secs="$secs $a:full"
		else
			echo "bench: no such area: $a (headline, full, echo, httpd, kv, kvsave, proxy, micro,$(echo "$MICRO" | sed 's/ /, /g; s/^,//'))" >&2
			exit 2
		fi
		;;
	esac
done
n=$(echo $secs | wc -w)

# title NAME SET: what the section compares, and about how long it takes on
# the 2-vCPU VM the docs were measured on (docs/BENCHMARKS.md).
title() {
	case $1:$2 in
	echo:headline) echo "echo: corio-echo against uring-echo and epoll-echo (about 100 s)" ;;
	echo:full) echo "echo: every case, UDP, TLS, the epoll fallback (about 7 minutes)" ;;
	proxy:full) echo "proxy: tools/examples/tcp-proxy against haproxy in mode tcp (about 1 minute; 70 s more for instructions under callgrind)" ;;
	httpd:headline) echo "httpd against nginx (about 60 s)" ;;
	httpd:full) echo "httpd against nginx: every row, HTTPS, full handshakes (about 3 minutes)" ;;
	kv:headline) echo "corio-kv against redis-server (about 60 s)" ;;
	kv:full) echo "corio-kv against redis-server: every test, memory of 1M keys (about 2 minutes)" ;;
	kvsave:full) echo "corio-kv snapshots and eviction beside redis-server's BGSAVE and allkeys-lru (about 6 minutes)" ;;
	instr:full) echo "user-space instructions per message under callgrind: corio-echo, uring-echo, epoll-echo, httpd (about 6 minutes)" ;;
	*)
		# bench-micro of 2026-11-29, both backends, on a VM other jobs shared
		case $1 in
		burst) t=20 ;; core) t=130 ;; fs) t=50 ;; msg) t=190 ;; net) t=25 ;; sendfile) t=5 ;;
		sched) t=60 ;; timer) t=50 ;; tls) t=15 ;; *) t= ;;
		esac
		echo "bench-$1, micro-benchmark, on $(echo $BACKENDS | sed 's/ / then /')${t:+ (both backends: about $t s)}"
		;;
	esac
}

mkdir -p bench-results
out=bench-results/bench-$(date +%Y%m%d-%H%M%S).txt
{
	echo "# corio make bench - $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "kernel: $(uname -r)  cpus: $(nproc)  compiler: $(${CC:-cc} --version | head -n 1)"
	[ -f "$B/.cflags" ] && echo "build flags: $(cat "$B/.cflags")"
	if [ "$*" = headline ]; then
		echo "This is the headline run: $n comparisons, about 4 minutes. Everything else"
		echo "(micro-benchmarks on both backends, every echo case with UDP, TLS and the"
		echo "epoll fallback, every httpd and kv row, kv's memory): make bench FULL=1"
		echo "(about 20 minutes), or one area: make bench-echo, bench-httpd, bench-kv,"
		echo "bench-micro, $(for m in $MICRO; do printf 'bench-%s, ' "$m"; done | sed 's/, $//')."
	fi
	echo
	i=0
	t_all=$(date +%s)
	for s in $secs; do
		i=$((i + 1))
		name=${s%%:*} set=${s#*:}
		echo "== [$i/$n] $(title "$name" "$set")"
		t0=$(date +%s)
		case $name in
		echo) BENCH_ECHO_SET=$set sh tools/bench/bench-echo.sh "$B" ;;
		httpd) BENCH_HTTPD_SET=$set sh tools/bench/bench-httpd.sh "$B" ;;
		kv) BENCH_KV_SET=$set sh tools/bench/bench-kv.sh "$B" ;;
		kvsave) sh tools/bench/bench-kvsave.sh "$B" ;;
		instr) sh tools/bench/bench-instr.sh "$B" ;;
		proxy) sh tools/bench/bench-proxy.sh "$B" ;;
		*)
			for be in $BACKENDS; do
				echo "## bench-$name (CORIO_BACKEND=$be)"
				CORIO_BACKEND=$be "$B/tools/bench-$name" ||
					echo "!! bench-$name exited with $? (CORIO_BACKEND=$be)"
				echo
			done
			;;
		esac
		echo "== [$i/$n] done in $(($(date +%s) - t0)) s"
		echo
	done
	[ "$n" = 1 ] && w=section || w=sections
	echo "make bench: $n $w in $(($(date +%s) - t_all)) s"
} 2>&1 | tee "$out"
echo "saved: $out"
