#!/bin/sh
# tools/bench/bench-kv.sh BUILD_DIR - corio-kv against Debian's redis-server.
#
# Both servers run one thread pinned to the same CPU (1), redis-benchmark
# pinned to the other (0), alternately (corio redis corio redis ...), each
# on a fresh server. Per run: SET, GET, INCR, MSET (10 keys), HSET and HGET
# (fields of one hash, as redis-benchmark's hset test makes), 50 clients,
# pipeline 1 and 16; ops/s, p50 and p99 come from redis-benchmark's own
# --csv output; server CPU per request is the server's on-CPU time (the sum
# of /proc/PID/task/*/schedstat) over the run divided by the requests.
# Then memory: 1M distinct keys with 100-byte values loaded through
# redis-cli --pipe into a fresh server of each kind; bytes per key from RSS
# (/proc/PID/status VmRSS, after minus before) and from INFO memory
# (used_memory, after minus before); the same for 1M small hashes (5
# fields of 10-byte values each).
# Prints markdown tables of medians with corio/redis ratios, and keeps every
# raw result under bench-results/kv-<time>/.
#
# Environment: BENCH_KV_REPS (3), BENCH_KV_N (requests per run, 200000),
# BENCH_KV_KEYS (1000000), BENCH_KV_SHARDS (1), BENCH_KV_QUICK=1 (one
# repetition, 20000 requests, 100000 keys: a smoke test), BENCH_KV_SET=headline
# (what the default make bench shows, about 60 s: SET and GET at pipeline 1
# and 16, 50000 requests per run unless BENCH_KV_N says, no memory section;
# the default, full, adds INCR, MSET and the memory of 1M keys: make bench-kv
# or make bench FULL=1).
B=${1:-build}
. "$(dirname "$0")/lib.sh"
T=$B/tools
REPS=${BENCH_KV_REPS:-3}
SET=${BENCH_KV_SET:-full}
case "$SET" in
full) N=${BENCH_KV_N:-200000} TESTS="set get incr mset hset hget" ;;
headline) N=${BENCH_KV_N:-50000} TESTS="set get" ;;
*) echo "bench-kv: BENCH_KV_SET must be full or headline" >&2; exit 2 ;;
esac
KEYS=${BENCH_KV_KEYS:-1000000}
SHARDS=${BENCH_KV_SHARDS:-1}
if [ -n "${BENCH_KV_QUICK:-}" ]; then REPS=1; N=20000; KEYS=100000; fi
for v in "$REPS" "$N" "$KEYS" "$SHARDS"; do
	case "$v" in ''|*[!0-9]*|0) echo "bench-kv: BENCH_KV_* must be positive integers" >&2; exit 2;; esac
done
if [ ! -x "$T/corio-kv" ]; then
	echo "bench-kv: $T/corio-kv is missing; run make tools first" >&2
	exit 1
fi

# redis-benchmark, redis-cli and redis-server: install them when we can.
need=""
command -v redis-benchmark >/dev/null 2>&1 || need="$need redis-tools"
command -v redis-server >/dev/null 2>&1 || need="$need redis-server"
if [ -n "$need" ]; then
	# shellcheck disable=SC2086
	apt_install bench-kv $need
	if ! command -v redis-benchmark >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1; then
		echo "bench-kv: skipped: needs redis-tools and redis-server (apt-get install$need)" >&2
		exit 0
	fi
fi

if [ "$(nproc)" -ge 2 ]; then SCPU=1; LCPU=0; else SCPU=0; LCPU=0; fi
SCPUS=$SCPU
[ "$SHARDS" -gt 1 ] && SCPUS=$(seq -s, 0 $(($(nproc) - 1)))
OUT=bench-results/kv-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT" || exit 1
ROWS=$OUT/rows.tsv
: > "$ROWS"
SRV_PID=
PORT=
trap 'stop_server; exit 130' INT TERM

wait_port() { # wait_port PORT: 0 once it accepts (5 s at most)
	i=0
	while [ $i -lt 50 ]; do
		port_listening "$1" && redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
		kill -0 $SRV_PID 2>/dev/null || return 1
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# start_server SIDE: sets SRV_PID and PORT. A server that does not come up
# is tried once more on another port; only a second failure is reported.
start_server() {
	start_server_once "$1" quiet || start_server_once "$1" loud
}

start_server_once() {
	PORT=$(free_port)
	case $1 in
	corio)
		taskset -c "$SCPUS" "$T/corio-kv" -p "$PORT" -n "$SHARDS" --cpus "$SCPUS" --save "" \
			> "$OUT/server.out" 2> "$OUT/server.err" &
		;;
	redis)
		taskset -c "$SCPU" redis-server --port "$PORT" --bind 127.0.0.1 --save '' \
			--appendonly no --protected-mode no --daemonize no --logfile "" \
			> "$OUT/server.out" 2> "$OUT/server.err" &
		;;
	esac
	SRV_PID=$!
	if ! wait_port "$PORT"; then
		if [ "$2" = loud ]; then
			echo "bench-kv: $1 did not start on port $PORT (second try):" >&2
			cat "$OUT/server.err" >&2
		else
			{ echo "first try on port $PORT:"; cat "$OUT/server.err"; } >> "$OUT/retries.txt"
		fi
		stop_server
		return 1
	fi
}

stop_server() {
	[ -n "$SRV_PID" ] || return 0
	kill -TERM $SRV_PID 2>/dev/null
	wait $SRV_PID 2>/dev/null
	SRV_PID=
	i=0
	while [ -n "$PORT" ] && port_listening "$PORT" && [ $i -lt 50 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	PORT=
}

# run SIDE REP TEST PIPELINE: one redis-benchmark run; appends a row
# test P side rep ops/s p50 p99 cpu-ns/request
run() {
	side=$1 rep=$2 t=$3 p=$4
	c0=$(cpu_ns $SRV_PID)
	if [ "$t" = hget ]; then # no -t hget: the fields the hset run made
		csv=$(taskset -c $LCPU redis-benchmark -p "$PORT" -c 50 -n "$N" -P "$p" -r 100000 \
			--csv hget myhash element:__rand_int__ 2> "$OUT/bench.err")
	else
		csv=$(taskset -c $LCPU redis-benchmark -p "$PORT" -c 50 -n "$N" -P "$p" -r 100000 \
			-d 100 -t "$t" --csv 2> "$OUT/bench.err")
	fi
	c1=$(cpu_ns $SRV_PID)
	printf '%s\n' "$csv" >> "$OUT/raw-$side.csv"
	line=$(printf '%s\n' "$csv" | sed -n '2p')
	if [ -z "$line" ]; then
		echo "bench-kv: redis-benchmark -t $t -P $p against $side failed:" >&2
		tail -3 "$OUT/bench.err" >&2
		return 1
	fi
	printf '%s\n' "$line" | tr -d '"' | awk -F, -v t="$t" -v p="$p" -v s="$side" -v r="$rep" \
		-v cpu=$((c1 - c0)) -v n="$N" \
		'{ printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\n", t, p, s, r, $2, $5, $7, cpu / n }' \
		>> "$ROWS"
}

# mem SIDE [hash]: load KEYS keys of 100 bytes (hash: KEYS hashes of 5
# fields of 10 bytes); prints "rss-bytes/key used-bytes/key".
mem() {
	start_server "$1" || return 1
	rss0=$(awk '/^VmRSS/ { print $2 * 1024 }' /proc/$SRV_PID/status)
	used0=$(redis-cli -p "$PORT" info memory | tr -d '\r' | sed -n 's/^used_memory://p')
	awk -v n="$KEYS" -v hash="${2:-}" 'BEGIN {
		v = sprintf("%0100d", 0)
		for (i = 0; i < n; i++)
			if (hash)
				printf "*12\r\n$4\r\nHSET\r\n$14\r\nkey:%010d\r\n" \
				       "$2\r\nf1\r\n$10\r\n%010d\r\n$2\r\nf2\r\n$10\r\n%010d\r\n" \
				       "$2\r\nf3\r\n$10\r\n%010d\r\n$2\r\nf4\r\n$10\r\n%010d\r\n" \
				       "$2\r\nf5\r\n$10\r\n%010d\r\n", i, i, i, i, i, i
			else
				printf "*3\r\n$3\r\nSET\r\n$14\r\nkey:%010d\r\n$100\r\n%s\r\n", i, v
	}' | redis-cli -p "$PORT" --pipe > "$OUT/pipe-$1.txt" 2>&1
	keys=$(redis-cli -p "$PORT" dbsize)
	rss1=$(awk '/^VmRSS/ { print $2 * 1024 }' /proc/$SRV_PID/status)
	used1=$(redis-cli -p "$PORT" info memory | tr -d '\r' | sed -n 's/^used_memory://p')
	stop_server
	if [ "$keys" != "$KEYS" ]; then
		echo "bench-kv: $1 holds $keys keys after loading $KEYS" >&2
		return 1
	fi
	echo "$(( (rss1 - rss0) / keys )) $(( (used1 - used0) / keys ))"
}

echo "## corio-kv vs redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')"
echo "server CPU $SCPUS (corio-kv shards: $SHARDS), redis-benchmark CPU $LCPU;" \
	"50 clients, $N requests per run, 100-byte values, $REPS repetitions, A B A B;" \
	"kernel $(uname -r), $(nproc) CPUs"
[ "$SET" = headline ] && echo "Tests: the headline set (BENCH_KV_SET=headline); INCR, MSET, HSET, HGET and memory: make bench-kv."
for rep in $(seq 1 "$REPS"); do
	for side in corio redis; do
		start_server $side || continue
		for t in $TESTS; do
			for p in 1 16; do
				run $side "$rep" $t $p || run $side "$rep" $t $p
			done
		done
		stop_server
	done
done

echo
echo "| test | pipeline | corio ops/s | redis ops/s | corio/redis | corio p50 ms | redis p50 ms | corio p99 ms | redis p99 ms | corio CPU ns/req | redis CPU ns/req |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for t in $TESTS; do
	for p in 1 16; do
		awk -F'\t' -v t="$t" -v p="$p" '
			function med(a, n,   i, j, x) {
				for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
				return n ? (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) : 0
			}
			$1 == t && $2 == p {
				k = $3; n[k]++
				ops[k, n[k]] = $5; p50[k, n[k]] = $6; p99[k, n[k]] = $7; cpu[k, n[k]] = $8
			}
			END {
				split("corio redis", sides, " ")
				for (s = 1; s <= 2; s++) {
					k = sides[s]
					for (i = 1; i <= n[k]; i++) { a[i] = ops[k, i] } ; o[k] = med(a, n[k])
					for (i = 1; i <= n[k]; i++) { a[i] = p50[k, i] } ; l[k] = med(a, n[k])
					for (i = 1; i <= n[k]; i++) { a[i] = p99[k, i] } ; h[k] = med(a, n[k])
					for (i = 1; i <= n[k]; i++) { a[i] = cpu[k, i] } ; c[k] = med(a, n[k])
				}
				printf "| %s | %s | %.0f | %.0f | %.2f | %.3f | %.3f | %.3f | %.3f | %.0f | %.0f |\n",
					toupper(t), p, o["corio"], o["redis"], o["redis"] ? o["corio"] / o["redis"] : 0,
					l["corio"], l["redis"], h["corio"], h["redis"], c["corio"], c["redis"]
			}' "$ROWS"
	done
done

if [ "$SET" = headline ]; then
	echo "raw results: $OUT"
	exit 0
fi
echo
echo "memory, $KEYS keys of 14 bytes with 100-byte values (bytes per key):"
echo "| server | RSS/key | used_memory/key |"
echo "|---|---|---|"
mc=$(mem corio) && echo "| corio-kv | ${mc% *} | ${mc#* } |"
mr=$(mem redis) && echo "| redis-server | ${mr% *} | ${mr#* } |"
if [ -n "$mc" ] && [ -n "$mr" ]; then
	echo "RSS per key corio/redis: $(awk -v a="${mc% *}" -v b="${mr% *}" 'BEGIN { printf "%.2f", b ? a / b : 0 }')"
fi
echo
echo "memory, $KEYS hashes of 5 fields with 10-byte values (bytes per key):"
echo "| server | RSS/key | used_memory/key |"
echo "|---|---|---|"
hc=$(mem corio hash) && echo "| corio-kv | ${hc% *} | ${hc#* } |"
hr=$(mem redis hash) && echo "| redis-server | ${hr% *} | ${hr#* } |"
if [ -n "$hc" ] && [ -n "$hr" ]; then
	echo "RSS per hash corio/redis: $(awk -v a="${hc% *}" -v b="${hr% *}" 'BEGIN { printf "%.2f", b ? a / b : 0 }')"
fi
echo "raw results: $OUT"
