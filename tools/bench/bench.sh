#!/bin/sh
# make bench: run every micro-benchmark (build/tools/bench-*) once per
# backend, io_uring then the epoll fallback (CORIO_BACKEND=uring, =epoll;
# BENCH_BACKENDS="uring" skips the fallback), then the echo benchmark driver
# when it exists, corio-kv against redis and httpd against nginx. Each
# program prints its own setup (backend included) and table; this script
# only adds the machine header and keeps a copy of the output under
# bench-results/.
B=${1:-build}
BACKENDS=${BENCH_BACKENDS:-uring epoll}
mkdir -p bench-results
out=bench-results/bench-$(date +%Y%m%d-%H%M%S).txt
{
	echo "# corio make bench - $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "kernel: $(uname -r)  cpus: $(nproc)  compiler: $(${CC:-cc} --version | head -n 1)"
	echo
	for b in "$B"/tools/bench-*; do
		[ -x "$b" ] || continue
		for be in $BACKENDS; do
			echo "## $(basename "$b") (CORIO_BACKEND=$be)"
			CORIO_BACKEND=$be "$b" || echo "!! $(basename "$b") exited with $? (CORIO_BACKEND=$be)"
			echo
		done
	done
	if [ -x tools/bench/bench-echo.sh ]; then
		sh tools/bench/bench-echo.sh "$B"
	fi
	if [ -f tools/bench/bench-kv.sh ]; then
		sh tools/bench/bench-kv.sh "$B"
	fi
	if [ -f tools/bench/bench-httpd.sh ]; then
		sh tools/bench/bench-httpd.sh "$B"
	fi
} 2>&1 | tee "$out"
echo "saved: $out"
