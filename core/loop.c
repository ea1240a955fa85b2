/* SPDX-License-Identifier: MIT */
/*
 * core/loop.c - the shard loop, and the wake-ups that end its sleep.
 *
 * The loop (one iteration = one "turn"):
 *
 *   1. run the fibers that were ready when the turn began (at most
 *      run_budget of them), so a fiber that yields in a loop cannot starve
 *      I/O; each hands the CPU straight to the next (core/fiber.c);
 *   2. let each part do its per-turn work, once: due timers every turn;
 *      the message ring and pool completions only in a turn after another
 *      thread hinted them (corio__shard_hint: one load a turn otherwise);
 *      net's starved receives only in turns after one starved (on-demand
 *      parts ask with corio__part_want);
 *   3. talk to the kernel at most once: if fibers are ready, only submit
 *      queued SQEs (no syscall at all when the SQ is empty and the kernel
 *      has no deferred completions); if nothing is ready, submit and wait
 *      per the idle strategy;
 *   4. reap every CQE in batches and dispatch each to its op record, which
 *      makes waiting fibers ready.
 *
 * Shutdown: corio_shutdown() raises rt->stopping and kicks every shard
 * through its eventfd. Each shard then cancels all its fibers, keeps
 * turning until no fiber is alive and no op awaits its final CQE, and
 * closes its ring. corio_wait() joins the threads and frees the rest.
 *
 * What a turn costs is measured in user-space instructions per message
 * (make bench-instr; docs/BENCHMARKS.md has the history): nothing is
 * polled twice, the parts other threads feed cost one load of the hint
 * word a turn and one more before sleeping, the ring's counters are read where the ring keeps them, not copied per
 * turn, and the hot wake path (a completion making its fiber ready) is
 * inline.
 *
 * Wake-ups from other threads: each shard keeps a read armed on an eventfd;
 * a writer kicks it only while the shard says it is sleeping. The shard
 * raises `sleeping` (seq_cst) before its last check for work (a seq_cst
 * load of the hint word `xpend`) and the blocking enter, and a kicker
 * publishes its work and its hint before reading `sleeping` (seq_cst), so
 * at least one of them sees the other: no lost wake-up. The first kicker to exchange `sleeping` back to 0 sends the one
 * doorbell; shards wake each other with IORING_OP_MSG_RING instead of the
 * eventfd when they can (core/msg.c has the full argument).
 */
#include "core/internal.h"
#include "core/run.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- busy accounting: the runtime ends when no shard has fibers ------------- */

void corio__shard_busy(struct corio__shard *s)
{
	bool busy = s->stats.fibers_live > s->ls.daemons;

	if (busy == s->busy)
		return;
	s->busy = busy;
	if (busy)
		atomic_fetch_add(&s->rt->busy_shards, 1);
	else if (atomic_fetch_sub(&s->rt->busy_shards, 1) == 1)
		corio__rt_stop(s->rt);
}

/* ---- wake-ups ----------------------------------------------------------------- */

void corio__shard_wake(struct corio__shard *s)
{
	uint64_t one = 1;
	ssize_t r = write(s->efd, &one, sizeof(one));

	(void)r; /* EAGAIN: the counter is saturated, so a wake-up is pending anyway */
}

/*
 * The wake-up read. The eventfd is O_NONBLOCK, so that writers never block.
 * A read of it through io_uring waits (by internal poll) on kernels whose
 * eventfd has read_iter (5.8+, "eventfd: convert to f_op->read_iter()");
 * on older ones (liburing issue #143) it completes at once with -EAGAIN
 * when the counter is 0, and re-arming that read would turn the loop
 * forever. So an -EAGAIN (or any other failure) switches the
 * shard to POLL_ADD, which completes only when the counter is non-zero,
 * followed by a read(2) that resets it. CORIO_RING_DISABLE=efd_wait makes
 * the read fail the old kernels' way (RWF_NOWAIT), for tests.
 */
static void efd_done(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct corio__shard *s = op->data;

	(void)flags;
	s->efd_armed = false;
	if (s->efd_poll) {
		if (res < 0 && res != -ECANCELED && res != -EINTR) {
			/* A poll on our own eventfd cannot fail for a reason that goes
			 * away: report it rather than re-arm in a loop. Other threads
			 * can no longer wake this shard while it sleeps. */
			corio__log("corio: shard %u: poll on the wake-up eventfd failed: %s; "
				   "wake-ups from other threads are lost", s->id, strerror(-res));
			return;
		}
		if (res > 0) {
			uint64_t v;
			ssize_t r = read(s->efd, &v, sizeof(v));

			(void)r; /* EAGAIN: nothing to reset; nothing is lost either */
			CORIO__STAT_ADD(s->stats.doorbells_in, 1);
		}
	} else if (res == (int32_t)sizeof(s->efd_buf)) {
		CORIO__STAT_ADD(s->stats.doorbells_in, 1);
	} else if (res != -ECANCELED && res != -EINTR) {
		if (res != -EAGAIN)
			corio__log("corio: shard %u: read of the wake-up eventfd: %s; "
				   "waiting with poll instead", s->id,
				   res < 0 ? strerror(-res) : "short read");
		s->efd_poll = true;
	}
	corio__wakeup_arm(s);
}

void corio__wakeup_arm(struct corio__shard *s)
{
	struct io_uring_sqe *sqe;

	if (s->efd_armed || s->stopping)
		return;
	sqe = corio__ring_sqe(&s->ring);
	if (s->efd_poll) {
		io_uring_prep_poll_add(sqe, s->efd, POLLIN);
	} else {
		io_uring_prep_read(sqe, s->efd, &s->efd_buf, sizeof(s->efd_buf), 0);
		if (CORIO__UNLIKELY(s->efd_nowait_test))
			sqe->rw_flags = RWF_NOWAIT;
	}
	s->efd_op.cb = efd_done;
	s->efd_op.data = s;
	corio__sqe_set_op(sqe, &s->efd_op);
	s->efd_armed = true;
}

/* ---- the loop ------------------------------------------------------------------- */

static void begin_stop(struct corio__shard *s)
{
	s->stopping = true;
	for (struct corio_fiber *f = s->all; f; f = f->all_next)
		corio__fiber_cancel(f);
	const struct corio__part *const *parts = s->rt->parts;

	for (unsigned i = 0; i < CORIO__PART_MAX; i++)
		if (parts[i] && parts[i]->stop)
			parts[i]->stop(s);
	/* The wake-up read stays armed; io_uring_queue_exit() cancels it. */
}

/* Inline: the turn pays no call for it (it runs once a turn, and again
 * only while an idle spin lasts). */
static inline __attribute__((always_inline)) unsigned parts_poll(struct corio__shard *s)
{
	const struct corio_rt *rt = s->rt;
	struct corio__timers *T = corio__timers(s);
	unsigned work = 0, want = s->part_want;

	/* Relaxed: a hint missed here is seen by the seq_cst look before
	 * sleeping (idle_wait); the exchange orders the polls after it. */
	if (CORIO__UNLIKELY(atomic_load_explicit(&s->xpend, memory_order_relaxed)))
		want |= atomic_exchange(&s->xpend, 0);
	/* The timers (a part with no .poll, core/timer.c): one load a turn
	 * while none is armed, no call. */
	if (T->n)
		work += corio__timers_poll(T, rt->cfg.idle == CORIO_IDLE_BLOCK);
	for (unsigned i = 0; i < rt->npolls; i++)
		work += rt->polls[i](s);
	if (CORIO__UNLIKELY(want)) {
		s->part_want = 0;
		while (want) {
			unsigned i = (unsigned)__builtin_ctz(want);

			want &= want - 1;
			work += rt->parts[i]->poll(s);
		}
	}
	return work;
}

static bool parts_busy(struct corio__shard *s)
{
	const struct corio__part *const *parts = s->rt->parts;

	for (unsigned i = 0; i < CORIO__PART_MAX; i++)
		if (parts[i] && parts[i]->busy && parts[i]->busy(s))
			return true;
	return false;
}

/*
 * Loop timing. The turn boundary is the loop's look at the ring (the enter,
 * or the non-blocking submit); one tick is read there per busy turn, and an
 * idle turn reuses the two reads around its wait. For each turn:
 *   turn: ticks since the previous look, minus time spent idle (blocked or
 *         spinning) - the CPU time of reaping, fibers and parts;
 *   gap:  ticks from the previous look to the start of this one: how long a
 *         completion could sit unseen. It differs from turn by the submit
 *         syscall, which is only timed when there is one (a second read).
 * A turn longer than stall_ns that no fiber answers for (run_fibers times
 * fibers only while stall detection is on) is reported as the loop's own.
 */
static inline __attribute__((always_inline)) void account(struct corio__shard *s,
							   struct corio__loopstat *sp,
							   uint64_t turn_t, uint64_t gap_t,
							   bool fiber_stalled)
{
	unsigned tb = corio__tick_bucket(turn_t);

	/* In ticks, and a turn whose gap is the turn itself (no submit timed
	 * apart: every idle turn) counted once: corio_stats_get adds the
	 * halves up into busy_ns, gap_ns and the two histograms. */
	CORIO__STAT_ADD(sp->busy_t, turn_t);
	if (CORIO__LIKELY(gap_t == turn_t)) {
		CORIO__STAT_ADD(sp->same_hist[tb], 1);
	} else {
		CORIO__STAT_ADD(sp->submit_t, turn_t - gap_t);
		CORIO__STAT_ADD(sp->turn_hist[tb], 1);
		CORIO__STAT_ADD(sp->gap_hist[corio__tick_bucket(gap_t)], 1);
	}
	if (CORIO__UNLIKELY(turn_t > sp->turn_max_t)) {
		/* a gap is never longer than its turn (it leaves out the submit) */
		CORIO__STAT_SET(sp->turn_max_t, turn_t);
		if (gap_t > sp->gap_max_t)
			CORIO__STAT_SET(sp->gap_max_t, gap_t);
	}
	if (CORIO__UNLIKELY(turn_t > sp->stall_ticks) && !fiber_stalled)
		corio__stall_report(s, NULL, corio__ticks_ns(turn_t), 0);
}

/* Nothing is runnable: hand SQEs to the kernel and wait per the idle
 * strategy. Returns true when the shard blocked in the kernel.
 *
 * Three ticks at most (the start, the end of a spin, the end) and no
 * conversion: the idle and blocked times are kept in ticks, and the
 * readers convert (corio_stats_get, the stall reports). */
static inline __attribute__((always_inline)) bool idle_wait(struct corio__shard *s,
							    struct corio__loopstat *sp,
							    bool fiber_stalled)
{
	const struct corio_rt *rt = s->rt;
	uint64_t t0 = corio__tick(), enter_t = t0, t1;
	bool blocked = false;

	account(s, sp, t0 - sp->last_poll, t0 - sp->last_poll, fiber_stalled);
	__atomic_store_n(&sp->idle_from, t0 ? t0 : 1, __ATOMIC_RELEASE);
	if (CORIO__UNLIKELY(rt->cfg.idle != CORIO_IDLE_BLOCK)) {
		uint64_t spin_end = rt->cfg.idle == CORIO_IDLE_POLL
					    ? UINT64_MAX
					    : t0 + corio__ns_ticks(corio__ns_mul_sat(rt->cfg.spin_us,
										   CORIO__NS_PER_US));

		for (;;) {
			if (corio__ring_poll(&s->ring) || parts_poll(s) || s->runq_active ||
			    atomic_load_explicit(&rt->stopping, memory_order_relaxed))
				goto out;
			if ((enter_t = corio__tick()) >= spin_end)
				break;
		}
		/* The parts' last word before blocking after a spin (the timers
		 * arm their kernel timeout, which the spin did without). */
		for (unsigned i = 0; i < rt->nsleeps; i++)
			rt->sleeps[i](s);
	}
	/* A stopping shard never blocks: it turns until its fibers, ops and
	 * parts have drained, and never advertises itself as sleeping (a
	 * MSG_RING doorbell must not target a ring that is about to close).
	 *
	 * Else one look at what other threads feed before advertising sleep:
	 * under a steady stream of messages this usually finds work, and
	 * senders never see us asleep. The parts this shard feeds itself were
	 * polled this turn, after every fiber and completion that could give
	 * them work. */
	if (CORIO__UNLIKELY(atomic_load_explicit(&rt->stopping, memory_order_relaxed)) ||
	    s->runq_active || atomic_load_explicit(&s->xpend, memory_order_relaxed))
		goto submit;
	atomic_store(&s->sleeping, 1);
	/* Last look for work that another thread published before it saw us
	 * awake: its hint (seq_cst; corio__shard_hint). */
	if (!atomic_load(&s->xpend) && !atomic_load(&rt->stopping)) {
		corio__ring_wait(&s->ring);
		blocked = true;
	}
	/* seq_cst: a waker whose exchange won saw us before this store, and
	 * our next check of the waker's in-flight count sees its increment. */
	atomic_store(&s->sleeping, 0);
	if (!blocked) {
submit:
		/* Work turned up instead of sleep (or the shard stops): still
		 * hand the kernel the queued SQEs and run its deferred
		 * completions (no syscall when there are none). A part that has
		 * work on every turn - a timer callback that re-arms in the past
		 * - would otherwise keep every socket of the shard from being
		 * served (timer::rearm_in_the_past_*). */
		corio__ring_poll(&s->ring);
	}
out:
	s->now = sp->last_poll = t1 = corio__tick();
	/* Clear the mark before adding: a reader that sees the new idle_t
	 * (acquire) then sees no mark, so it never counts this period twice. */
	__atomic_store_n(&sp->idle_from, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&sp->idle_t, sp->idle_t + (t1 - t0), __ATOMIC_RELEASE);
	if (blocked) /* off CPU: the stall reports' on-CPU bound subtracts it */
		sp->blocked_t += t1 - enter_t;
	return blocked;
}

/* Busy turn: submit without waiting (no syscall when the SQ is empty). */
static void busy_poll(struct corio__shard *s, struct corio__loopstat *sp, bool fiber_stalled)
{
	uint64_t t0, t1;

	if (corio__ring_pending(&s->ring) || corio__ring_needs_enter(&s->ring)) {
		t0 = corio__tick();
		corio__ring_enter(&s->ring, 0);
		t1 = corio__tick();
	} else {
		t0 = t1 = corio__tick();
	}
	account(s, sp, t1 - sp->last_poll, t0 - sp->last_poll, fiber_stalled);
	s->now = sp->last_poll = t1;
}

void corio__loop(struct corio__shard *s)
{
	struct corio_rt *rt = s->rt;
	struct corio__loopstat *sp = &s->ls;
	unsigned n;
	bool woke, stalled;

	s->now = sp->last_poll = corio__tick();
	for (;;) {
		if (CORIO__UNLIKELY(!s->stopping &&
				    atomic_load_explicit(&rt->stopping, memory_order_relaxed)))
			begin_stop(s);
		/* A fresh on-CPU baseline for stall reports, at most every
		 * stall_ns / 4 (a system call; never when stall_ns is 0). */
		if (CORIO__UNLIKELY(sp->last_poll - sp->base_tick > sp->refresh_ticks))
			corio__cpu_base(s);
		stalled = corio__run(s);
		parts_poll(s);
		if (CORIO__UNLIKELY(s->stopping) && !s->all && !s->ops_inflight && !s->runq_active &&
		    !parts_busy(s))
			break;
		woke = false;
		if (s->runq_active)
			busy_poll(s, sp, stalled);
		else
			woke = idle_wait(s, sp, stalled);
		/* Always reap after the enter, whatever it returned: -EBUSY or
		 * -EAGAIN (the kernel wants the CQ drained) is answered by this
		 * reap, -EBADR was reported in corio__ring_check(). */
		n = corio__ring_reap_turn(&s->ring);
		if (woke) {
			CORIO__STAT_ADD(s->stats.wakes, 1);
			CORIO__STAT_ADD(s->stats.wake_cqes, n);
		}
		/* loop_turns is the sum of the turn histogram (corio_stats_get) */
	}
}

