/* SPDX-License-Identifier: MIT */
/*
 * bench-core - micro-benchmarks of the foundation: fiber switch (yield),
 * spawn+run+exit, NOP round trip through the ring (batch 1 and batched).
 * One shard; every figure is the median of RUNS runs, with min and max.
 *
 *   bench-core [--quick]
 */
#include <corio.h>

#include "common/backend.h"
#include "common/opt.h"

#include <liburing.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define RUNS 7

static int quick;
static uint64_t stall_default;

struct result {
	const char *name;
	double ns[RUNS];
	const char *unit;
	double goal;
};

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* ---- fiber switches: fibers that yield in a ring ----------------------------
 * A yield hands the CPU straight to the next ready fiber: one context switch.
 * After the last fiber of a turn the loop takes its turn (polls parts and the
 * ring), so with n fibers each yield also pays 1/n of a loop turn:
 * 64 fibers measure the switch, 2 fibers a ping-pong (a switch and half a
 * turn). Both are ns per yield. */
static long yields;

static int yielder(void *arg)
{
	(void)arg;
	for (long i = 0; i < yields; i++)
		corio_yield();
	return 0;
}

static double bench_yield(int n)
{
	struct corio_fiber *f[64];
	uint64_t t0 = corio_now_ns();

	for (int i = 0; i < n; i++)
		corio_spawn(yielder, NULL, NULL, &f[i]);
	for (int i = 0; i < n; i++)
		corio_join(f[i], NULL);
	return (double)(corio_now_ns() - t0) / (double)(yields * n);
}

/* ---- spawn + run + exit ---------------------------------------------------- */
static int nothing(void *arg)
{
	(void)arg;
	return 0;
}

static double bench_spawn(void)
{
	long n = quick ? 100000 : 1000000;
	uint64_t t0 = corio_now_ns();
	struct corio_stats st;

	for (long i = 0; i < n; i += 256) {
		for (int k = 0; k < 256; k++)
			corio_spawn(nothing, NULL, NULL, NULL);
		corio_yield(); /* the 256 run and exit before we run again */
	}
	do {
		corio_yield();
		corio_stats_get(NULL, 0, &st);
	} while (st.fibers_live > 1);
	return (double)(corio_now_ns() - t0) / (double)n;
}

/* ---- NOP round trips ----------------------------------------------------------- */
static long nops_each;

static int nopper(void *arg)
{
	for (long i = 0; i < nops_each; i++)
		corio_nop();
	return 0;
}

static double bench_nop(int fibers)
{
	long total = quick ? 200000 : 1000000;
	struct corio_fiber *f[256];
	uint64_t t0;

	nops_each = total / fibers;
	t0 = corio_now_ns();
	for (int i = 0; i < fibers; i++)
		corio_spawn(nopper, NULL, NULL, &f[i]);
	for (int i = 0; i < fibers; i++)
		corio_join(f[i], NULL);
	return (double)(corio_now_ns() - t0) / (double)(nops_each * fibers);
}

/* Baseline: the same NOPs through a bare liburing ring, no fibers, no corio:
 * what the kernel itself costs per op on this machine. */
static double bench_raw_nop(unsigned batch)
{
	long total = quick ? 200000 : 1000000;
	struct io_uring_params p = { .flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN };
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	uint64_t t0;

	if (io_uring_queue_init_params(256, &ring, &p) < 0 && io_uring_queue_init(256, &ring, 0) < 0)
		return 0;
	t0 = corio_now_ns();
	for (long done = 0; done < total; done += batch) {
		for (unsigned i = 0; i < batch; i++)
			io_uring_prep_nop(io_uring_get_sqe(&ring));
		io_uring_submit_and_wait(&ring, batch);
		io_uring_cq_advance(&ring, batch);
		(void)cqe;
	}
	t0 = corio_now_ns() - t0;
	io_uring_queue_exit(&ring);
	return (double)t0 / (double)total;
}

enum { R_SWITCH, R_PINGPONG, R_SWITCH_NOSTALL, R_SPAWN, R_NOP1, R_NOP64, R_RAW1, R_RAW64, NRES };

static struct result res[NRES] = {
	[R_SWITCH] = { "fiber switch (a yield among 64 fibers)", { 0 }, "ns/yield", 10 },
	[R_PINGPONG] = { "yield ping-pong, 2 fibers (a switch + half a loop turn)", { 0 },
			 "ns/yield", 0 },
	[R_SWITCH_NOSTALL] = { "fiber switch, stall detector off (stall_ns 0)", { 0 },
			       "ns/yield", 0 },
	[R_SPAWN] = { "spawn+run+exit", { 0 }, "ns/fiber", 100 },
	[R_NOP1] = { "NOP round trip, batch 1", { 0 }, "ns/op", 0 },
	[R_NOP64] = { "NOP round trip, batch 64 (64 fibers)", { 0 }, "ns/op", 0 },
	[R_RAW1] = { "baseline: bare liburing NOP, batch 1", { 0 }, "ns/op", 0 },
	[R_RAW64] = { "baseline: bare liburing NOP, batch 64", { 0 }, "ns/op", 0 },
};
static struct corio_stats final_stats;

static void entry(void *arg)
{
	(void)arg;
	for (int r = 0; r < RUNS; r++) {
		yields = quick ? 100000 : 1000000;
		res[R_SWITCH].ns[r] = bench_yield(64);
		yields *= 8;
		res[R_PINGPONG].ns[r] = bench_yield(2);
		res[R_SPAWN].ns[r] = bench_spawn();
		res[R_NOP1].ns[r] = bench_nop(1);
		res[R_NOP64].ns[r] = bench_nop(64);
	}
	corio_stats_get(NULL, 0, &final_stats);
}

/* The same switch with the stall detector's per-switch clock read off. */
static void entry_nostall(void *arg)
{
	(void)arg;
	yields = quick ? 100000 : 1000000;
	for (int r = 0; r < RUNS; r++)
		res[R_SWITCH_NOSTALL].ns[r] = bench_yield(64);
}

static double median(struct result *r)
{
	qsort(r->ns, RUNS, sizeof(double), cmp);
	return r->ns[RUNS / 2];
}

static void print_results(void)
{
	printf("| benchmark | median | min | max | unit | goal |\n|---|---|---|---|---|---|\n");
	for (int i = 0; i < NRES; i++) {
		double m = median(&res[i]);

		printf("| %s | %.1f | %.1f | %.1f | %s | ", res[i].name, m, res[i].ns[0],
		       res[i].ns[RUNS - 1], res[i].unit);
		if (res[i].goal)
			printf("<= %.0f |\n", res[i].goal);
		else if (i == R_NOP64)
			printf("<= 1.3x bare (%.2fx) |\n", m / median(&res[R_RAW64]));
		else
			printf("- |\n");
	}
}

static const struct tool_opt opts[] = {
	{ TOOL_OPT_FLAG("quick", 0, quick, "shorter runs, for CI smoke tests") },
	{ 0 },
};
static const struct tool_cli cli = { "bench-core", "[--quick]", NULL, opts };

int main(int argc, char **argv)
{
	struct corio_config cfg;
	struct utsname u;
	int cpu = 1, ret;

	if ((ret = tool_opt_parse(&cli, argc, argv)))
		return ret > 0 ? 0 : 2;
	corio_config_init(&cfg);
	stall_default = cfg.stall_ns;
	cfg.shards = 1;
	cfg.cpus = &cpu;
	if (corio_config_check(&cfg)) {
		cpu = 0; /* a one-CPU mask */
	}
	ret = corio_run(&cfg, entry, NULL);
	if (ret)
		return 1;
	cfg.stall_ns = 0;
	ret = corio_run(&cfg, entry_nostall, NULL);
	if (ret)
		return 1;
	/* The baseline runs on this plain thread, pinned like the shard was,
	 * not inside a fiber (it would stall the loop for its whole run). */
	{
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	for (int r = 0; r < RUNS; r++) {
		res[R_RAW1].ns[r] = bench_raw_nop(1);
		res[R_RAW64].ns[r] = bench_raw_nop(64);
	}
	uname(&u);
	printf("setup: 1 shard on CPU %d of %ld, backend %s, kernel %s %s, ring flags 0x%llx%s%s, sq %u, "
	       "stall_ns %llu (one clock read per switch; 0 in the stall-off row), "
	       "compiler %s, %d runs each (median [min, max])\n",
	       cpu, sysconf(_SC_NPROCESSORS_ONLN), tool_backend(), u.sysname, u.release,
	       (unsigned long long)final_stats.ring_flags,
	       final_stats.ring_flags & IORING_SETUP_DEFER_TASKRUN ? " (DEFER_TASKRUN" : "",
	       final_stats.ring_flags & IORING_SETUP_DEFER_TASKRUN ? "+SINGLE_ISSUER)" : "",
	       cfg.sq_entries, (unsigned long long)stall_default, __VERSION__, RUNS);
	print_results();
	return 0;
}
