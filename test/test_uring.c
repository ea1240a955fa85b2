/* SPDX-License-Identifier: MIT */
/* The ring layer seen through the public API: NOPs, full SQ, CQ overflow,
 * flag fallbacks, idle strategies. */
#include "helpers.h"

#include <liburing.h>
#include <poll.h>
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
	TH_URING_ONLY("ring set-up flags (IORING_SETUP_*)");
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

/* ---- the wake-up eventfd --------------------------------------------------------- */

/* An idle shard sleeps in the kernel: its wake-up read on the eventfd
 * completes once per doorbell, not in a loop (an O_NONBLOCK eventfd read
 * through io_uring completes with -EAGAIN at once on kernels before 5.8;
 * re-arming that spins). Doorbells
 * from a foreign thread each wake it and are counted. */
struct efd_run {
	_Atomic int posts_seen;
	_Atomic int done;
	struct corio_stats st;
};

static void efd_post(void *arg)
{
	atomic_fetch_add(&((struct efd_run *)arg)->posts_seen, 1);
}

static void efd_entry(void *arg)
{
	struct efd_run *e = arg;

	while (atomic_load(&e->posts_seen) < 20)
		corio_sleep_ns(20 * 1000 * 1000); /* the shard sleeps between posts */
	CHECK_EQ(corio_stats_get(NULL, 0, &e->st), 0);
}

static void efd_idle(void)
{
	struct corio_config cfg = th_cfg(1);
	struct efd_run e = { 0 };
	struct corio_rt *rt;
	int before = th_fd_count();

	cr_assert_eq(corio_start(&cfg, efd_entry, &e, &rt), 0);
	for (int i = 0; i < 20; i++) {
		usleep(5000);
		while (corio_post_foreign(rt, 0, efd_post, &e) == -EAGAIN)
			usleep(1000);
	}
	cr_assert_eq(corio_wait(rt), 0);
	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
	cr_assert_eq(th_fd_count(), before);
	/* 20 doorbells at most, plus the sleeps' own turns: a spinning wake-up
	 * read turns the loop hundreds of thousands of times in that time. */
	cr_assert_leq(e.st.doorbells_in, 20, "doorbells_in %llu",
		      (unsigned long long)e.st.doorbells_in);
	cr_assert_lt(e.st.loop_turns, 2000, "loop_turns %llu", (unsigned long long)e.st.loop_turns);
}

Test(uring, idle_shard_does_not_spin_on_its_eventfd, .timeout = 30)
{
	efd_idle();
}

/* The same where the read fails at once with -EAGAIN, as an O_NONBLOCK
 * eventfd read does on kernels before 5.8 (forced with RWF_NOWAIT): the
 * shard must switch to poll-then-read, not spin. */
Test(uring, eventfd_eagain_falls_back_to_poll, .timeout = 30)
{
	setenv("CORIO_RING_DISABLE", "efd_wait", 1);
	efd_idle();
	unsetenv("CORIO_RING_DISABLE");
}

/* ---- io_uring_enter results ------------------------------------------------------ */

/* -EBADR from a waiting enter (the kernel dropped CQEs: forced here with
 * CORIO_RING_FAULT=ebadr) is counted and reported, and the shard goes on. */
static void ebadr_entry(void *arg)
{
	struct corio_stats *st = arg;

	for (int i = 0; i < 5; i++) {
		corio_sleep_ns(1000000); /* the shard blocks in a waiting enter */
		CHECK_EQ(corio_nop(), 0);
	}
	CHECK_EQ(corio_stats_get(NULL, 0, st), 0);
}

Test(uring, dropped_cqes_are_counted_and_reported, .timeout = 30)
{
	TH_URING_ONLY("the kernel's dropped-completion report (EBADR, CORIO_RING_FAULT)");
	struct corio_config cfg = th_cfg(1);
	struct corio_stats st;

	setenv("CORIO_RING_FAULT", "ebadr", 1);
	th_log_capture();
	th_run(&cfg, ebadr_entry, &st);
	th_log_release();
	unsetenv("CORIO_RING_FAULT");
	cr_assert_eq(st.cqe_dropped, 1, "cqe_dropped %llu", (unsigned long long)st.cqe_dropped);
	cr_assert_eq(th_log_has("corio: io_uring_enter: EBADR: the kernel dropped completions"), 1,
		     "the report, once: %s", th_log_buf);
	cr_assert(strstr(th_log_buf, "(1 so far)"), "the count: %s", th_log_buf);
}

/* ---- link timeouts cancel by user_data ------------------------------------------- */

#include <sys/timerfd.h>

/*
 * A deadline's link timeout cancels its op by user_data, from deferred
 * task work. When the op completes just as the timeout fires, that cancel
 * can still be pending when the fiber's next op reuses the same stack
 * address for its record: the next op would be cancelled. Thousands of
 * back-to-back pairs: a bounded poll whose timerfd fires at the deadline
 * (either may win), then a poll at the same record address with a far
 * deadline whose timerfd fires soon: it must never see -ECANCELED. Run
 * with the reap's task-work flush removed (CORIO_RING_DISABLE=reap_flush),
 * so the guarantee cannot rest on that flush alone.
 */
struct lt_run {
	int spurious, timedout, ready;
};

static __attribute__((noinline)) int lt_poll(int fd, uint64_t deadline)
{
	struct corio_deadline d;
	int r;

	corio_deadline_push(&d, deadline);
	r = corio_poll(fd, POLLIN);
	corio_deadline_pop(&d);
	return r;
}

static void arm_at(int tfd, uint64_t abs_ns)
{
	struct itimerspec its = { .it_value = { .tv_sec = (time_t)(abs_ns / 1000000000u),
						.tv_nsec = (long)(abs_ns % 1000000000u) } };
	uint64_t v;

	(void)!read(tfd, &v, sizeof(v));
	timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void lt_entry(void *arg)
{
	struct lt_run *lr = arg;
	int a = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	int b = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

	CHECK(a >= 0 && b >= 0);
	for (int i = 0; i < 3000; i++) {
		uint64_t t = corio_now_ns() + 30000;
		int r;

		arm_at(a, t);
		r = lt_poll(a, t); /* the timerfd and the deadline race */
		if (r == -ETIMEDOUT)
			lr->timedout++;
		else if (r > 0)
			lr->ready++;
		else
			CHECK_EQ(r, 0);
		arm_at(b, corio_now_ns() + 20000);
		r = lt_poll(b, corio_now_ns() + 5000000000ull);
		if (r == -ECANCELED)
			lr->spurious++;
		else
			CHECK(r > 0);
	}
	close(a);
	close(b);
}

Test(uring, link_timeout_never_cancels_the_next_op, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct lt_run lr = { 0 };

	setenv("CORIO_RING_DISABLE", "reap_flush", 1);
	th_run(&cfg, lt_entry, &lr);
	unsetenv("CORIO_RING_DISABLE");
	cr_log_info("timed out %d, ready %d, spurious cancels %d", lr.timedout, lr.ready,
		    lr.spurious);
	cr_assert_eq(lr.spurious, 0, "%d of 3000 next ops were cancelled by a stale link timeout "
		     "(timed out %d, ready %d)", lr.spurious, lr.timedout, lr.ready);
}
