/* SPDX-License-Identifier: MIT */
/* The ring layer seen through the public API: NOPs, full SQ, CQ overflow,
 * flag fallbacks, idle strategies. */
#include "helpers.h"

#include <liburing.h>
#include <stdlib.h>

static void nop_entry(void *arg)
{
	for (int i = 0; i < 10000; i++)
		CHECK_EQ(corio_nop(), 0);
	*(int *)arg = 1;
}

Test(uring, nop_round_trips, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	int done = 0;

	th_run(&cfg, nop_entry, &done);
	cr_assert_eq(done, 1);
}

/* 2000 fibers each issue NOPs into an 8-entry SQ and a 16-entry CQ: the SQ
 * fills (submit and retry) and the CQ overflows (the kernel parks CQEs in
 * its overflow list); every completion must still reach its fiber. */
struct flood {
	int done;
	struct corio_wg wg;
	struct corio_stats st;
};

static int flooder(void *arg)
{
	struct flood *f = arg;

	for (int i = 0; i < 5; i++)
		CHECK_EQ(corio_nop(), 0);
	f->done++;
	corio_wg_done(&f->wg);
	return 0;
}

static void flood_entry(void *arg)
{
	struct flood *f = arg;

	corio_wg_init(&f->wg);
	corio_wg_add(&f->wg, 2000);
	for (int i = 0; i < 2000; i++)
		CHECK_EQ(corio_spawn(flooder, f, NULL, NULL), 0);
	CHECK_EQ(corio_wg_wait(&f->wg), 0);
	CHECK_EQ(corio_stats_get(NULL, 0, &f->st), 0);
}

Test(uring, sq_full_and_cq_overflow_lose_nothing, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct flood f = { 0 };

	cfg.sq_entries = 8;
	cfg.cq_entries = 16;
	th_run(&cfg, flood_entry, &f);
	cr_assert_eq(f.done, 2000);
	cr_assert_gt(f.st.sq_full, 0, "the SQ never filled");
	cr_assert_gt(f.st.cq_overflow, 0, "the CQ never overflowed");
	cr_assert_geq(f.st.cqes, 10000);
}

static void flags_entry(void *arg)
{
	struct corio_stats *st = arg;

	for (int i = 0; i < 100; i++)
		CHECK_EQ(corio_nop(), 0);
	if (corio_shard_id() == 0)
		CHECK_EQ(corio_stats_get(NULL, 0, st), 0);
}

Test(uring, best_flags_by_default, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_stats st;

	th_run(&cfg, flags_entry, &st);
	/* Linux 6.1+ has both; this project's machines run 6.x. */
	cr_assert(st.ring_flags & IORING_SETUP_SINGLE_ISSUER, "flags 0x%llx",
		  (unsigned long long)st.ring_flags);
	cr_assert(st.ring_flags & IORING_SETUP_DEFER_TASKRUN);
}

Test(uring, forced_fallbacks_still_work, .timeout = 30)
{
	static const char *const disables[] = { "defer_taskrun", "single_issuer",
						"single_issuer,coop_taskrun" };

	for (unsigned i = 0; i < 3; i++) {
		struct corio_config cfg = th_cfg(2);
		struct corio_stats st;

		setenv("CORIO_RING_DISABLE", disables[i], 1);
		th_run(&cfg, flags_entry, &st);
		cr_assert(!(st.ring_flags & IORING_SETUP_DEFER_TASKRUN), "%s", disables[i]);
		if (i > 0)
			cr_assert(!(st.ring_flags & IORING_SETUP_SINGLE_ISSUER), "%s", disables[i]);
		if (i == 2)
			cr_assert(!(st.ring_flags & IORING_SETUP_COOP_TASKRUN), "%s", disables[i]);
	}
	unsetenv("CORIO_RING_DISABLE");
}

/* Every idle strategy wakes for completions and for shutdown. */
static int spinner_child(void *arg)
{
	for (int i = 0; i < 200; i++)
		CHECK_EQ(corio_nop(), 0);
	(*(int *)arg)++;
	return 0;
}

static void idle_entry(void *arg)
{
	for (int i = 0; i < 4; i++)
		CHECK_EQ(corio_spawn(spinner_child, arg, NULL, NULL), 0);
}

Test(uring, idle_strategies, .timeout = 30)
{
	enum corio_idle modes[] = { CORIO_IDLE_BLOCK, CORIO_IDLE_SPIN, CORIO_IDLE_POLL };

	for (unsigned i = 0; i < 3; i++) {
		struct corio_config cfg = th_cfg(1);
		int done = 0;

		cfg.idle = modes[i];
		cfg.spin_us = 20;
		th_run(&cfg, idle_entry, &done);
		cr_assert_eq(done, 4);
	}
}
