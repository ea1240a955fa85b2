#!/bin/sh
# tools/bench/bench-kvsave.sh BUILD_DIR - corio-kv's snapshots and eviction
# beside Debian's redis-server (issue 36). make bench-kvsave runs it.
#
# Snapshots: each server runs one thread pinned to CPU 1 (corio-kv -n 1),
# redis-benchmark on CPU 0. A fresh server of each kind in turn gets KEYS
# keys of 100 bytes (redis-cli --pipe), then redis-benchmark -c 50 -P 1 -d
# 100 -r KEYS -t set,get (SET overwrites keys the snapshot has not written
# yet: corio-kv's copy-on-write, redis's fork pages) runs alternately
# without and with a snapshot: "with" keeps a BGSAVE running the whole run
# (one redis-cli on one connection asks every 20 ms). The harness itself
# runs on the load's CPU and starts no process during a timed run: a
# redis-cli started every 100 ms to poll, as this script once did, raised
# corio-kv's GET p99 from 0.66 to 4.3 ms with no snapshot at all, and
# reading smaps_rollup (PSS) every 200 ms to 4.7 ms. So memory is sampled
# in one more run with a snapshot, after the timed rounds (bash builtins:
# RSS every 50 ms, PSS every 200 ms): the peak over the RSS before (RSS
# summed over redis's parent and child, which counts the pages they share
# twice, and PSS, which does not). Per timed run: ops/s and p99 from
# redis-benchmark's --csv; with a snapshot, the snapshots made (INFO
# rdb_saves) and their mean time (the first BGSAVE to the end of the last,
# over that count). Then one BGSAVE alone, with no load, timed by polling
# rdb_bgsave_in_progress every 20 ms.
#
# Eviction: ZKEYS keys of 100 bytes loaded into a fresh server give the data
# set's used_memory; a fresh server with maxmemory at its empty used_memory
# plus half of that and allkeys-lru then takes kv-zipf's cache workload
# (GET a Zipf-distributed key, s = 0.99, SET it on a miss, pipeline 32, the
# same key sequence for both): its hit rate over the second half of ZGETS.
#
# Environment: BENCH_KVSAVE_KEYS (1000000), BENCH_KVSAVE_N (requests per
# redis-benchmark test, 300000), BENCH_KVSAVE_REPS (rounds of without/with
# per server, 2), BENCH_KVSAVE_ZKEYS (200000), BENCH_KVSAVE_ZGETS (1000000),
# BENCH_KVSAVE_QUICK=1 (100000 keys, 50000 requests, 1 round, 50000 / 200000
# for eviction: a smoke test). Raw results under bench-results/kvsave-<time>/.
# bash: its read -t sleeps without starting a process (dash's sleep is one)
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
B=${1:-build}
. "$(dirname "$0")/lib.sh"
T=$B/tools
KEYS=${BENCH_KVSAVE_KEYS:-1000000}
N=${BENCH_KVSAVE_N:-300000}
REPS=${BENCH_KVSAVE_REPS:-2}
ZKEYS=${BENCH_KVSAVE_ZKEYS:-200000}
ZGETS=${BENCH_KVSAVE_ZGETS:-1000000}
if [ -n "${BENCH_KVSAVE_QUICK:-}" ]; then KEYS=100000 N=50000 REPS=1 ZKEYS=50000 ZGETS=200000; fi
for v in "$KEYS" "$N" "$REPS" "$ZKEYS" "$ZGETS"; do
	case "$v" in ''|*[!0-9]*|0) echo "bench-kvsave: BENCH_KVSAVE_* must be positive integers" >&2; exit 2;; esac
done
for p in corio-kv kv-zipf; do
	if [ ! -x "$T/$p" ]; then
		echo "bench-kvsave: $T/$p is missing; run make tools first" >&2
		exit 1
	fi
done
need=""
command -v redis-benchmark >/dev/null 2>&1 || need="$need redis-tools"
command -v redis-server >/dev/null 2>&1 || need="$need redis-server"
if [ -n "$need" ]; then
	# shellcheck disable=SC2086
	apt_install bench-kvsave $need
	if ! command -v redis-benchmark >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1; then
		echo "bench-kvsave: skipped: needs redis-tools and redis-server (apt-get install$need)" >&2
		exit 0
	fi
fi

if [ "$(nproc)" -ge 2 ]; then SCPU=1; LCPU=0; else SCPU=0; LCPU=0; fi
# the harness (sampler, BGSAVE driver, loaders) on the load's CPU, off the
# server's; the servers and redis-benchmark are pinned explicitly
taskset -p -c "$LCPU" $$ > /dev/null 2>&1 || true
OUT=bench-results/kvsave-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT/corio" "$OUT/redis" || exit 1
OUT=$(cd "$OUT" && pwd)
ROWS=$OUT/rows.tsv
# nap SECONDS: a read that times out on a FIFO nobody writes
mkfifo "$OUT/nap" && exec 9<> "$OUT/nap" || exit 1
nap() { read -r -t "$1" -u 9 _ || :; }
: > "$ROWS"
SRV_PID=
PORT=
trap 'stop_server; rm -f "$OUT/snapping"; exit 130' INT TERM

# start_server SIDE [ARGS...]: a fresh server (no file to load) on a free port.
start_server() {
	side=$1
	shift
	rm -f "$OUT/$side/dump.rdb" "$OUT/$side"/temp-*
	PORT=$(free_port)
	case $side in
	corio)
		taskset -c "$SCPU" "$T/corio-kv" -p "$PORT" -n 1 --cpus "$SCPU" --save "" --dir "$OUT/corio" \
			"$@" > "$OUT/server.out" 2> "$OUT/server.err" &
		;;
	redis)
		taskset -c "$SCPU" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
			--protected-mode no --daemonize no --logfile "" --dir "$OUT/redis" "$@" \
			> "$OUT/server.out" 2> "$OUT/server.err" &
		;;
	esac
	SRV_PID=$!
	i=0
	while [ $i -lt 100 ]; do
		redis-cli -p "$PORT" ping >/dev/null 2>&1 && return 0
		kill -0 $SRV_PID 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	echo "bench-kvsave: $side did not start:" >&2
	cat "$OUT/server.err" >&2
	return 1
}

stop_server() {
	[ -n "$SRV_PID" ] || return 0
	kill -KILL $SRV_PID 2>/dev/null # no save at exit, whatever the config
	wait $SRV_PID 2>/dev/null
	SRV_PID=
	PORT=
}

info() { # info FIELD: the server's INFO value
	redis-cli -p "$PORT" info all | tr -d '\r' | sed -n "s/^$1://p"
}

load() { # load N: N keys key:%010d of 100 bytes
	awk -v n="$1" 'BEGIN { v = sprintf("%0100d", 0)
		for (i = 0; i < n; i++) printf "*3\r\n$3\r\nSET\r\n$14\r\nkey:%010d\r\n$100\r\n%s\r\n", i, v }' |
		redis-cli -p "$PORT" --pipe > "$OUT/pipe.txt" 2>&1
}

# mem_kb FIELD: sets MEM to VmRSS or Pss (kB) of the server and its
# children, summed; shell builtins only, no subshell (the sampler runs
# beside the measured run: a process started per sample cost the runs
# milliseconds at a time, more than the snapshot did).
mem_kb() {
	MEM=0 kids=
	read -r kids < /proc/"$SRV_PID"/task/"$SRV_PID"/children 2>/dev/null
	for p in $SRV_PID $kids; do
		if [ "$1" = Pss ]; then f=/proc/$p/smaps_rollup; else f=/proc/$p/status; fi
		[ -r "$f" ] || continue
		{ while read -r k v rest; do
			[ "$k" = "$1:" ] && MEM=$((MEM + v))
		done < "$f"; } 2>/dev/null # a fork's child may end meanwhile
	done
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# snapper: while $OUT/snapping exists, sample the server's RSS every 50 ms
# and its PSS every 200 ms (walking the page tables costs more); writes the
# peaks to $OUT/snap.txt. Both modes sample, so its cost is in both.
snapper() {
	prss=0 ppss=0 tick=0
	while [ -e "$OUT/snapping" ]; do
		mem_kb VmRSS
		[ "$MEM" -gt "$prss" ] && prss=$MEM
		if [ $((tick % 4)) = 0 ]; then
			mem_kb Pss
			[ "$MEM" -gt "$ppss" ] && ppss=$MEM
		fi
		tick=$((tick + 1))
		nap 0.05
	done
	echo "$prss $ppss" > "$OUT/snap.txt"
}

# bench SIDE MODE REP: one redis-benchmark run; MODE quiet (nothing
# else), snap (a snapshot running throughout) or mem (snap, sampling
# memory: a run of its own, so no sampling touches the timed runs);
# rows: side mode rep test ops/s p99 [snap: snapshot-ms saves | mem:
# rss-ratio pss-ratio]. A snapshot runs throughout by one redis-cli on one
# connection (-r -1 -i 0.02: a BGSAVE every 20 ms; while one runs the
# server answers "already in progress"), so no process starts during the
# run. A snapshot's time under load is the time from the first BGSAVE to
# the end of the last, over the saves made (INFO rdb_saves): gaps of up to
# 20 ms between saves included.
bench() {
	side=$1 mode=$2 rep=$3
	mem_kb VmRSS
	rss0=$MEM
	sp= dp=
	if [ "$mode" = mem ]; then
		touch "$OUT/snapping"
		snapper &
		sp=$!
	fi
	if [ "$mode" != quiet ]; then
		saves0=$(info rdb_saves)
		t0=$(now_ms)
		redis-cli -p "$PORT" -r -1 -i 0.02 bgsave > /dev/null 2>&1 &
		dp=$!
	fi
	nap 0.2
	csv=$(taskset -c $LCPU redis-benchmark -p "$PORT" -c 50 -n "$N" -P 1 -r "$KEYS" -d 100 \
		-t set,get --csv 2> "$OUT/bench.err")
	extra=""
	[ -n "$dp" ] && kill $dp 2>/dev/null && wait $dp 2>/dev/null
	if [ -n "$sp" ]; then
		rm -f "$OUT/snapping"
		wait $sp
		read -r prss ppss < "$OUT/snap.txt"
		extra=$(awk -v a="$prss" -v b="$ppss" -v r="$rss0" 'BEGIN { printf "\t%.2f\t%.2f", a / r, b / r }')
	fi
	if [ -n "$dp" ]; then
		# let the last BGSAVE end before the next run
		i=0
		while [ "$(info rdb_bgsave_in_progress)" = 1 ] && [ $i -lt 600 ]; do nap 0.02; i=$((i + 1)); done
		t1=$(now_ms)
		saves=$(($(info rdb_saves) - saves0))
		[ "$mode" = snap ] && extra=$(awk -v ms=$((t1 - t0)) -v n="$saves" \
			'BEGIN { printf "\t%s\t%d", n ? sprintf("%.0f", ms / n) : "-", n }')
	fi
	printf '%s\n' "$csv" >> "$OUT/raw-$side.csv"
	printf '%s\n' "$csv" | sed -n '2,3p' | tr -d '"' | awk -F, -v s="$side" -v m="$mode" -v r="$rep" \
		-v x="$extra" '{ printf "%s\t%s\t%s\t%s\t%s\t%s%s\n", s, m, r, $1, $2, $7, x }' >> "$ROWS"
}

# alone SIDE: one BGSAVE with no load; its ms
alone() {
	t0=$(now_ms)
	redis-cli -p "$PORT" bgsave >/dev/null
	sleep 0.02
	while [ "$(info rdb_bgsave_in_progress)" = 1 ]; do sleep 0.02; done
	echo $(($(now_ms) - t0))
}

echo "## corio-kv snapshots beside redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') BGSAVE (fork)"
echo "server CPU $SCPU (corio-kv: 1 shard), redis-benchmark CPU $LCPU; $KEYS keys of 100 bytes;" \
	"redis-benchmark -c 50 -P 1 -r $KEYS -d 100 -t set,get -n $N; $REPS rounds of without / with a snapshot"
echo
for side in corio redis; do
	start_server $side || exit 1
	load "$KEYS"
	keys=$(redis-cli -p "$PORT" dbsize)
	[ "$keys" = "$KEYS" ] || { echo "bench-kvsave: $side holds $keys keys after loading $KEYS" >&2; exit 1; }
	for rep in $(seq 1 "$REPS"); do
		bench $side quiet "$rep"
		bench $side snap "$rep"
	done
	bench $side mem 1
	echo "$side $(alone)" >> "$OUT/alone.txt"
	stop_server
done
echo "| server | test | ops/s without | ops/s with | p99 ms without | p99 ms with | p99 with/without | peak RSS / before | peak PSS / before | snapshot ms under load (mean) | snapshots under load | snapshot ms alone |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for side in corio redis; do
	for t in SET GET; do
		awk -F'\t' -v s="$side" -v t="$t" -v alone="$(sed -n "s/^$side //p" "$OUT/alone.txt")" '
		function med(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x } return n ? a[int((n + 1) / 2)] : 0 }
		$1 == s && $4 == t && $2 == "quiet" { q[++nq] = $5; qp[nq] = $6 }
		$1 == s && $4 == t && $2 == "snap" { w[++nw] = $5; wp[nw] = $6; d[nw] = $7; k[nw] = $8 }
		$1 == s && $4 == t && $2 == "mem" { r[++nm] = $7; p[nm] = $8 }
		END {
			a = med(q, nq); b = med(w, nw); c = med(qp, nq); e = med(wp, nw)
			printf "| %s | %s | %.0f | %.0f | %.3f | %.3f | %.2f | %.2f | %.2f | %s | %s | %s |\n", \
				s == "corio" ? "corio-kv" : "redis-server", t, a, b, c, e, c ? e / c : 0, \
				med(r, nm), med(p, nm), med(d, nw), med(k, nw), alone
		}' "$ROWS"
	done
done

echo
echo "## allkeys-lru hit rate, maxmemory at half the data set ($ZKEYS keys of 100 bytes; kv-zipf s=0.99, $ZGETS GETs, SET on a miss)"
echo
echo "| server | data set used_memory | maxmemory | hit rate (second half) | hit rate (all) | evicted_keys |"
echo "|---|---|---|---|---|---|"
for side in corio redis; do
	start_server $side || exit 1
	u0=$(info used_memory)
	awk -v n="$ZKEYS" 'BEGIN { v = sprintf("%0100d", 0)
		for (i = 0; i < n; i++) printf "*3\r\n$3\r\nSET\r\n$12\r\nkey:%08d\r\n$100\r\n%s\r\n", i, v }' |
		redis-cli -p "$PORT" --pipe > "$OUT/pipe.txt" 2>&1
	u1=$(info used_memory)
	stop_server
	data=$((u1 - u0))
	max=$((u0 + data / 2))
	start_server $side --maxmemory "$max" --maxmemory-policy allkeys-lru || exit 1
	res=$(taskset -c $LCPU "$T/kv-zipf" -p "$PORT" -n "$ZKEYS" -o "$ZGETS" -P 32 -d 100)
	ev=$(info evicted_keys)
	stop_server
	echo "$side $res" >> "$OUT/zipf.txt"
	h2=$(echo "$res" | sed -n 's/.*hit_rate_second_half=\([^ ]*\).*/\1/p')
	h=$(echo "$res" | sed -n 's/.* hit_rate=\([^ ]*\).*/\1/p')
	echo "| $( [ $side = corio ] && echo corio-kv || echo redis-server) | $data | $max | $h2 | $h | $ev |"
done
echo
echo "raw results: $OUT"
