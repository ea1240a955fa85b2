#!/bin/sh
# tools/scripts/fuzz.sh SECS [TARGET...] - build the libFuzzer targets in test/fuzz/
# (clang, ASan+UBSan, library in build/fuzz) and run each for SECS seconds,
# starting from its seed corpus test/fuzz/seeds/TARGET/. New inputs go to
# build/fuzz/corpus/TARGET/ (the seeds in the repo are only read); a crash
# leaves its input in build/fuzz/artifacts/ and fails the run. Prints one
# line per target with the executions it ran.
set -u
SECS=${1:-10}
shift
B=build/fuzz
. "$(dirname "$0")/../bench/lib.sh"
TARGETS=${*:-$(for f in test/fuzz/fuzz_*.c; do basename "$f" .c | sed 's/^fuzz_//'; done)}
case "$SECS" in ''|*[!0-9]*|0) echo "fuzz: SECS must be a positive integer" >&2; exit 2;; esac
# clang and its libFuzzer runtime (a Recommends of clang on Debian 12, so
# --no-install-recommends leaves it out): install them when we can.
have_fuzzer() {
	printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }\n' |
		clang -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1
}
if ! command -v clang >/dev/null 2>&1 || ! have_fuzzer; then
	pk="clang libclang-rt-14-dev"
	# shellcheck disable=SC2086
	apt_install fuzz $pk
	if ! have_fuzzer; then
		echo "fuzz: clang with libFuzzer is needed: apt-get install $pk" >&2
		exit 1
	fi
fi

make --no-print-directory -s lib B=$B CC=clang SAN=address \
	CFLAGS="-O1 -g -fsanitize=fuzzer-no-link" || exit 1
FFLAGS="-O1 -g -std=gnu11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined
	-fno-sanitize-recover=undefined -Iinclude -Itools -I."
mkdir -p $B/artifacts
status=0
for t in $TARGETS; do
	src=test/fuzz/fuzz_$t.c
	[ -f "$src" ] || { echo "fuzz: no target $src" >&2; status=1; continue; }
	case $t in # the tool units a target links (through their headers)
	sockperf) extra=tools/common/sockperf.c ;;
	resp) extra="tools/kv/resp.c tools/kv/out.c" ;;
	rdb) extra="tools/kv/rdb.c tools/kv/resp.c tools/kv/out.c" ;;
	upper) extra=tools/examples/upper-echo/upper.c ;;
	*) extra="" ;;
	esac
	# shellcheck disable=SC2086
	if ! clang $FFLAGS -o $B/fuzz_$t $src $extra $B/libcorio.a -luring -lnuma -lpthread -lcares -lssl -lcrypto; then
		echo "fuzz: $t: build failed" >&2
		status=1
		continue
	fi
	mkdir -p $B/corpus/$t
	log=$B/fuzz_$t.log
	$B/fuzz_$t -max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=1024 \
		-artifact_prefix=$B/artifacts/$t- $B/corpus/$t test/fuzz/seeds/$t > "$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	corp=$(ls $B/corpus/$t | wc -l)
	if [ $rc -ne 0 ]; then
		echo "fuzz: $t: FAILED after ${execs:-?} executions (exit $rc); input in $B/artifacts/:"
		grep -E 'ERROR|SUMMARY|runtime error|deadly signal' "$log" | head -5
		status=1
	else
		echo "fuzz: $t: ${execs:-?} executions in $SECS s, 0 crashes ($corp new corpus inputs)"
	fi
done
exit $status
