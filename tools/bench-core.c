/* SPDX-License-Identifier: MIT */
/*
 * bench-core - micro-benchmarks of the foundation: context switch,
 * spawn+run+exit, NOP round trip through the ring (batch 1 and batched).
 * One shard; every figure is the median of RUNS runs, with min and max.
 *
 *   bench-core [--quick]
 */
#include <corio.h>

#include <liburing.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#define RUNS 7

static int quick;

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

/* ---- context switch: two fibers yield to each other --------------------- */
static long yields;

static int yielder(void *arg)
{
	for (long i = 0; i < yields; i++)
		corio_yield();
	return 0;
}

static double bench_switch(void)
{
	struct corio_fiber *a, *b;
	struct corio_stats s0, s1;
	uint64_t t0, t1;

	corio_stats_get(NULL, 0, &s0);
	t0 = corio_now_ns();
	corio_spawn(yielder, NULL, NULL, &a);
	corio_spawn(yielder, NULL, NULL, &b);
	corio_join(a, NULL);
	corio_join(b, NULL);
	t1 = corio_now_ns();
	corio_stats_get(NULL, 0, &s1);
	/* stats.switches counts loop -> fiber switches, one per yield; each
	 * yield is two context switches (fiber -> loop -> next fiber). */
	return (double)(t1 - t0) / (double)(2 * (s1.switches - s0.switches));
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

static struct result res[6] = {
	{ "context switch (half a yield round trip)", { 0 }, "ns/switch", 5 },
	{ "spawn+run+exit", { 0 }, "ns/fiber", 100 },
	{ "NOP round trip, batch 1", { 0 }, "ns/op", 0 },
	{ "NOP round trip, batch 64", { 0 }, "ns/op", 30 },
	{ "baseline: bare liburing NOP, batch 1", { 0 }, "ns/op", 0 },
	{ "baseline: bare liburing NOP, batch 64", { 0 }, "ns/op", 0 },
};
static struct corio_stats final_stats;

static void entry(void *arg)
{
	(void)arg;
	yields = quick ? 200000 : 2000000;
	for (int r = 0; r < RUNS; r++) {
		res[0].ns[r] = bench_switch();
		res[1].ns[r] = bench_spawn();
		res[2].ns[r] = bench_nop(1);
		res[3].ns[r] = bench_nop(64);
	}
	corio_stats_get(NULL, 0, &final_stats);
}

int main(int argc, char **argv)
{
	struct corio_config cfg;
	struct utsname u;
	int cpu = 1, ret;

	quick = argc > 1 && !strcmp(argv[1], "--quick");
	corio_config_init(&cfg);
	cfg.shards = 1;
	cfg.cpus = &cpu;
	if (corio_config_check(&cfg)) {
		cpu = 0; /* a one-CPU mask */
	}
	ret = corio_run(&cfg, entry, NULL);
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
		res[4].ns[r] = bench_raw_nop(1);
		res[5].ns[r] = bench_raw_nop(64);
	}
	uname(&u);
	printf("setup: 1 shard on CPU %d, kernel %s %s, ring flags 0x%llx%s%s, sq %u, "
	       "compiler %s, %d runs each (median [min, max])\n",
	       cpu, u.sysname, u.release, (unsigned long long)final_stats.ring_flags,
	       final_stats.ring_flags & IORING_SETUP_DEFER_TASKRUN ? " (DEFER_TASKRUN" : "",
	       final_stats.ring_flags & IORING_SETUP_DEFER_TASKRUN ? "+SINGLE_ISSUER)" : "",
	       cfg.sq_entries, __VERSION__, RUNS);
	printf("| benchmark | median | min | max | unit | goal |\n|---|---|---|---|---|---|\n");
	for (int i = 0; i < 6; i++) {
		qsort(res[i].ns, RUNS, sizeof(double), cmp);
		printf("| %s | %.1f | %.1f | %.1f | %s | ", res[i].name, res[i].ns[RUNS / 2],
		       res[i].ns[0], res[i].ns[RUNS - 1], res[i].unit);
		if (res[i].goal)
			printf("<= %.0f |\n", res[i].goal);
		else
			printf("- |\n");
	}
	return 0;
}
