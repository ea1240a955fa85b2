/* SPDX-License-Identifier: MIT */
/*
 * core/shard.c - runtime start/stop, the shard thread and its loop.
 *
 * The loop (one iteration = one "turn"):
 *
 *   1. run the fibers that were ready when the turn began (at most
 *      run_budget of them), so a fiber that yields in a loop cannot starve
 *      I/O;
 *   2. let each part do its per-turn work (message ring drain, ...);
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
 * Wake-ups from other threads: each shard keeps a read armed on an eventfd;
 * a writer kicks it only while the shard says it is sleeping. The shard
 * raises `sleeping` (seq_cst) before its last check for work and the
 * blocking enter, and a kicker publishes its work before reading
 * `sleeping` (seq_cst), so at least one of them sees the other: no lost
 * wake-up. The first kicker to exchange `sleeping` back to 0 sends the one
 * doorbell; shards wake each other with IORING_OP_MSG_RING instead of the
 * eventfd when they can (core/msg.c has the full argument).
 */
#include "core/internal.h"
#include "core/sanitizer.h"
#include "core/stats.h"

#include <errno.h>
#include <numa.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__thread struct corio__shard *corio__tl_shard;
static __thread char tl_err[256];

int corio__error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(tl_err, sizeof(tl_err), fmt, ap);
	va_end(ap);
	return err;
}

const char *corio_last_error(void)
{
	return tl_err[0] ? tl_err : "no error";
}

uint64_t corio_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

unsigned corio_shard_id(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s ? s->id : UINT32_MAX;
}

unsigned corio_shard_count(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s ? s->rt->nshards : 0;
}

int corio_shard_cpu(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s ? s->cpu : -1;
}

/* ---- config ----------------------------------------------------------------- */

#if CORIO__ASAN || CORIO__TSAN
#define DEFAULT_STACK (512 * 1024) /* sanitizers grow frames a lot */
#else
#define DEFAULT_STACK (128 * 1024)
#endif

void corio_config_init(struct corio_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->sq_entries = 256;
	cfg->stack_size = DEFAULT_STACK;
	cfg->stack_guard = CORIO__STACK_GUARD_DEFAULT;
	cfg->idle = CORIO_IDLE_BLOCK;
	cfg->spin_us = 50;
	cfg->msg_slots = 4096;
	cfg->stall_ns = 10 * 1000 * 1000;
	cfg->stack_cache = 256;
	cfg->run_budget = 256;
}

static bool pow2(unsigned v)
{
	return v && !(v & (v - 1));
}

int corio_config_check(const struct corio_config *cfg)
{
	cpu_set_t mask;

	for (unsigned i = 0; i < sizeof(cfg->reserved) / sizeof(cfg->reserved[0]); i++)
		if (cfg->reserved[i])
			return corio__error(-EINVAL,
					    "config: reserved[%u] is %u, must be 0 (was the "
					    "config filled by corio_config_init()?)",
					    i, cfg->reserved[i]);
	if (cfg->flags & ~CORIO_F_ALL)
		return corio__error(-EINVAL, "config: unknown flags 0x%x", cfg->flags & ~CORIO_F_ALL);
	if (cfg->shards > 1024)
		return corio__error(-EINVAL, "config: shards is %u, the maximum is 1024", cfg->shards);
	if (cfg->cpus && !cfg->shards)
		return corio__error(-EINVAL, "config: cpus given but shards is 0; say how many");
	if (!pow2(cfg->sq_entries) || cfg->sq_entries > 32768)
		return corio__error(-EINVAL,
				    "config: sq_entries is %u, must be a power of two in 1..32768",
				    cfg->sq_entries);
	if (cfg->cq_entries &&
	    (!pow2(cfg->cq_entries) || cfg->cq_entries < cfg->sq_entries || cfg->cq_entries > 65536))
		return corio__error(-EINVAL,
				    "config: cq_entries is %u, must be 0 or a power of two in "
				    "sq_entries (%u)..65536",
				    cfg->cq_entries, cfg->sq_entries);
	if (cfg->stack_size < CORIO__STACK_MIN || cfg->stack_size > CORIO__STACK_MAX)
		return corio__error(-EINVAL, "config: stack_size is %zu, must be 16 KiB..1 GiB",
				    cfg->stack_size);
	if (cfg->stack_guard % (unsigned)sysconf(_SC_PAGESIZE) ||
	    cfg->stack_guard > CORIO__STACK_GUARD_MAX)
		return corio__error(-EINVAL,
				    "config: stack_guard is %u, must be a multiple of the page "
				    "size (%ld) up to 16 MiB, or 0 for the default",
				    cfg->stack_guard, sysconf(_SC_PAGESIZE));
	if ((unsigned)cfg->idle > CORIO_IDLE_POLL)
		return corio__error(-EINVAL, "config: idle is %d, not a corio_idle value",
				    (int)cfg->idle);
	if (cfg->spin_us > 1000000)
		return corio__error(-EINVAL, "config: spin_us is %u, at most 1000000", cfg->spin_us);
	if (!pow2(cfg->msg_slots) || cfg->msg_slots < 2 || cfg->msg_slots > (1u << 24))
		return corio__error(-EINVAL,
				    "config: msg_slots is %u, must be a power of two in 2..16M",
				    cfg->msg_slots);
	if (!cfg->run_budget)
		return corio__error(-EINVAL, "config: run_budget is 0, must be >= 1");
	if (cfg->control_path && !cfg->control_path[0])
		return corio__error(-EINVAL, "config: control_path is empty (use NULL for none)");
	if (cfg->cpus) {
		if (sched_getaffinity(0, sizeof(mask), &mask))
			return corio__error(-errno, "config: sched_getaffinity: %s", strerror(errno));
		for (unsigned i = 0; i < cfg->shards; i++) {
			int c = cfg->cpus[i];

			if (c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &mask))
				return corio__error(-EINVAL,
						    "config: cpus[%u] is %d, which is not in this "
						    "process's CPU affinity mask",
						    i, c);
		}
	}
	return 0;
}

/* ---- busy accounting: the runtime ends when no shard has fibers ------------- */

static void rt_stop(struct corio_rt *rt);

void corio__shard_busy(struct corio__shard *s)
{
	struct corio__stats_part *sp = corio__stats_part(s);
	bool busy = s->stats.fibers_live > (sp ? sp->daemons : 0);

	if (busy == s->busy)
		return;
	s->busy = busy;
	if (busy)
		atomic_fetch_add(&s->rt->busy_shards, 1);
	else if (atomic_fetch_sub(&s->rt->busy_shards, 1) == 1)
		rt_stop(s->rt);
}

/* ---- wake-ups ----------------------------------------------------------------- */

static void kick(struct corio__shard *s)
{
	uint64_t one = 1;
	ssize_t r = write(s->efd, &one, sizeof(one));

	(void)r; /* EAGAIN: the counter is saturated, so a wake-up is pending anyway */
}

/* The caller published its work before calling (seq_cst load). Whoever
 * exchanges `sleeping` from 1 to 0 owns the wake-up, so a sleeping shard
 * gets one doorbell however many threads find it asleep (core/msg.c). */
void corio__shard_kick(struct corio__shard *s)
{
	if (atomic_load(&s->sleeping) && atomic_exchange(&s->sleeping, 0))
		kick(s);
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
static void efd_arm(struct corio__shard *s);

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
			fprintf(stderr, "corio: shard %u: poll on the wake-up eventfd failed: %s; "
				"wake-ups from other threads are lost\n", s->id, strerror(-res));
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
			fprintf(stderr, "corio: shard %u: read of the wake-up eventfd: %s; "
				"waiting with poll instead\n", s->id,
				res < 0 ? strerror(-res) : "short read");
		s->efd_poll = true;
	}
	efd_arm(s);
}

static void efd_arm(struct corio__shard *s)
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

static void rt_stop(struct corio_rt *rt)
{
	if (atomic_exchange(&rt->stopping, 1))
		return;
	for (unsigned i = 0; i < rt->nshards; i++)
		if (rt->shards[i] && rt->shards[i] != corio__tl_shard)
			kick(rt->shards[i]);
}

void corio_shutdown(void)
{
	struct corio__shard *s = corio__tl_shard;

	if (!s) {
		assert(!"corio_shutdown outside a shard");
		return;
	}
	rt_stop(s->rt);
}

int corio_stop(struct corio_rt *rt)
{
	if (!rt)
		return -EINVAL;
	rt_stop(rt);
	return 0;
}

/* ---- the loop ------------------------------------------------------------------- */

static void begin_stop(struct corio__shard *s)
{
	s->stopping = true;
	for (struct corio_fiber *f = s->all; f; f = f->all_next)
		corio__fiber_cancel(f);
	for (unsigned i = 0; i < CORIO__PART_MAX; i++)
		if (corio__parts[i] && corio__parts[i]->stop)
			corio__parts[i]->stop(s);
	/* The wake-up read stays armed; io_uring_queue_exit() cancels it. */
}

static inline uint64_t coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Returns true when a fiber ran past stall_ns (it has been reported). With
 * stall detection on, each fiber run costs one clock read: the coarse clock
 * (~3 ns) when stall_ns is well above its resolution, else a tick (~10 ns
 * in this VM). The first run of a turn starts from the tick the loop took
 * at its last ring poll, so the turn itself reads nothing extra. stall_ns
 * = 0 turns it off. */
static bool run_fibers(struct corio__shard *s, struct corio__stats_part *sp)
{
	struct corio_fiber *last = s->runq_tail;
	unsigned budget = s->rt->cfg.run_budget;
	bool stalled = false, timed = sp->stall_ticks != UINT64_MAX;
	bool coarse = sp->stall_coarse;
	uint64_t t = 0, now, limit = coarse ? s->rt->cfg.stall_ns : sp->stall_ticks;

	if (!s->runq_head)
		return false;
	if (timed)
		t = coarse ? coarse_ns() : sp->last_poll;
	while (s->runq_head && budget--) {
		struct corio_fiber *f = s->runq_head;
		bool was_last = f == last;

		s->runq_head = f->run_next;
		if (!s->runq_head)
			s->runq_tail = NULL;
		f->flags &= ~CORIO__FF_QUEUED;
		if (f->state == CORIO__F_NEW && (f->flags & CORIO__FF_CANCELLED)) {
			corio__fiber_end_unrun(s, f, -ECANCELED);
		} else {
			corio__switch_to(s, f);
			/* f may be back in the fiber pool: its name and id stay
			 * until the next spawn reuses it. */
			if (timed) {
				now = coarse ? coarse_ns() : corio__tick();
				if (CORIO__UNLIKELY(now - t > limit)) {
					corio__stall_report(s, f,
							    coarse ? now - t : corio__ticks_ns(now - t));
					stalled = true;
				}
				t = now;
			}
		}
		if (was_last)
			break;
	}
	return stalled;
}

static unsigned parts_poll(struct corio__shard *s)
{
	unsigned work = 0;

	for (unsigned i = 0; i < CORIO__PART_MAX; i++)
		if (corio__parts[i] && corio__parts[i]->poll)
			work += corio__parts[i]->poll(s);
	return work;
}

static bool parts_busy(struct corio__shard *s)
{
	for (unsigned i = 0; i < CORIO__PART_MAX; i++)
		if (corio__parts[i] && corio__parts[i]->busy && corio__parts[i]->busy(s))
			return true;
	return false;
}

static void publish_ring_stats(struct corio__shard *s)
{
	CORIO__STAT_SET(s->stats.enters, s->ring.cnt.enters);
	CORIO__STAT_SET(s->stats.sqes, s->ring.cnt.sqes);
	CORIO__STAT_SET(s->stats.cqes, s->ring.cnt.cqes);
	CORIO__STAT_SET(s->stats.sq_full, s->ring.cnt.sq_full);
	CORIO__STAT_SET(s->stats.cq_overflow, s->ring.cnt.cq_overflow);
	CORIO__STAT_SET(s->stats.cqe_dropped, s->ring.cnt.cqe_dropped);
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
static void account(struct corio__shard *s, struct corio__stats_part *sp, uint64_t turn_t,
		    uint64_t gap_t, bool fiber_stalled)
{
	uint64_t turn = corio__ticks_ns(turn_t), gap = corio__ticks_ns(gap_t);
	unsigned tb = corio__hist_bucket(turn), gb = corio__hist_bucket(gap);

	CORIO__STAT_ADD(s->stats.busy_ns, turn);
	CORIO__STAT_ADD(s->stats.gap_ns, gap);
	CORIO__STAT_ADD(s->stats.turn_hist[tb], 1);
	CORIO__STAT_ADD(s->stats.gap_hist[gb], 1);
	if (CORIO__UNLIKELY(turn > s->stats.turn_max_ns))
		CORIO__STAT_SET(s->stats.turn_max_ns, turn);
	if (CORIO__UNLIKELY(gap > s->stats.gap_max_ns))
		CORIO__STAT_SET(s->stats.gap_max_ns, gap);
	if (CORIO__UNLIKELY(turn_t > sp->stall_ticks) && !fiber_stalled)
		corio__stall_report(s, NULL, turn);
}

/* Nothing is runnable: hand SQEs to the kernel and wait per the idle
 * strategy. Returns true when the shard blocked in the kernel. */
static bool idle_wait(struct corio__shard *s, struct corio__stats_part *sp, bool fiber_stalled)
{
	const struct corio_config *cfg = &s->rt->cfg;
	uint64_t t0 = corio__tick(), spin_end;
	bool blocked = false;

	account(s, sp, t0 - sp->last_poll, t0 - sp->last_poll, fiber_stalled);
	if (cfg->idle != CORIO_IDLE_BLOCK) {
		spin_end = cfg->idle == CORIO_IDLE_POLL
				   ? UINT64_MAX
				   : t0 + corio__ns_ticks(cfg->spin_us * 1000ull);
		for (;;) {
			if (corio__ring_poll(&s->ring) || parts_poll(s) || s->runq_head ||
			    atomic_load_explicit(&s->rt->stopping, memory_order_relaxed))
				goto out;
			if (corio__tick() >= spin_end)
				break;
		}
	}
	/* A stopping shard never blocks: it turns until its fibers, ops and
	 * parts have drained, and never advertises itself as sleeping (a
	 * MSG_RING doorbell must not target a ring that is about to close). */
	if (atomic_load_explicit(&s->rt->stopping, memory_order_relaxed)) {
		corio__ring_poll(&s->ring); /* submit, and flush deferred completions */
		goto out;
	}
	/* One more pass before advertising sleep: under a steady stream of
	 * messages this usually finds work, and senders never see us asleep. */
	if (cfg->idle == CORIO_IDLE_BLOCK && (parts_poll(s) || s->runq_head))
		goto out;
	atomic_store(&s->sleeping, 1);
	/* Last look for work that another thread published before it saw us
	 * awake (seq_cst loads in the parts; see core/msg.c). */
	if (!parts_poll(s) && !s->runq_head && !atomic_load(&s->rt->stopping)) {
		corio__ring_enter(&s->ring, 1);
		blocked = true;
	}
	/* seq_cst: a waker whose exchange won saw us before this store, and
	 * our next check of the waker's in-flight count sees its increment. */
	atomic_store(&s->sleeping, 0);
out:
	sp->last_poll = corio__tick();
	CORIO__STAT_ADD(s->stats.idle_ns, corio__ticks_ns(sp->last_poll - t0));
	return blocked;
}

/* Busy turn: submit without waiting (no syscall when the SQ is empty). */
static void busy_poll(struct corio__shard *s, struct corio__stats_part *sp, bool fiber_stalled)
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
	sp->last_poll = t1;
}

static void loop(struct corio__shard *s)
{
	struct corio_rt *rt = s->rt;
	struct corio__stats_part *sp = corio__stats_part(s);
	unsigned n;
	bool woke, stalled;

	sp->last_poll = corio__tick();
	for (;;) {
		if (CORIO__UNLIKELY(!s->stopping &&
				    atomic_load_explicit(&rt->stopping, memory_order_relaxed)))
			begin_stop(s);
		stalled = run_fibers(s, sp);
		parts_poll(s);
		if (CORIO__UNLIKELY(s->stopping) && !s->all && !s->ops_inflight && !s->runq_head &&
		    !parts_busy(s))
			break;
		woke = false;
		if (s->runq_head)
			busy_poll(s, sp, stalled);
		else
			woke = idle_wait(s, sp, stalled);
		/* Always reap after the enter, whatever it returned: -EBUSY or
		 * -EAGAIN (the kernel wants the CQ drained) is answered by this
		 * reap, -EBADR was reported in corio__ring_check(). */
		n = corio__ring_reap(&s->ring);
		if (woke) {
			CORIO__STAT_ADD(s->stats.wakes, 1);
			CORIO__STAT_ADD(s->stats.wake_cqes, n);
		}
		CORIO__STAT_ADD(s->stats.loop_turns, 1);
		publish_ring_stats(s);
	}
	publish_ring_stats(s);
}

/* ---- shard thread ------------------------------------------------------------------ */

static int entry_fiber(void *arg)
{
	struct corio_rt *rt = arg;

	rt->entry(rt->entry_arg);
	return 0;
}

static int shard_setup(struct corio__shard *s)
{
	struct corio_rt *rt = s->rt;
	struct corio__ring_params rp = {
		.sq_entries = rt->cfg.sq_entries,
		.cq_entries = rt->cfg.cq_entries,
		.sqpoll = rt->cfg.flags & CORIO_F_SQPOLL,
		.sqpoll_cpu = -1,
	};
	char why[200];
	int ret;

	if (!(rt->cfg.flags & CORIO_F_NO_PIN)) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(s->cpu, &set);
		ret = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
		if (ret) {
			snprintf(s->err, sizeof(s->err), "shard %u: cannot pin to CPU %d: %s", s->id,
				 s->cpu, strerror(ret));
			return -ret;
		}
	}
	if (numa_available() >= 0)
		numa_set_localalloc(); /* stacks and pools land on this CPU's node */

	ret = corio__ring_init(&s->ring, &rp, why, sizeof(why));
	if (ret) {
		snprintf(s->err, sizeof(s->err), "shard %u: %s", s->id, why);
		return ret;
	}
	CORIO__STAT_SET(s->stats.ring_flags, s->ring.setup_flags);
	CORIO__STAT_SET(s->stats.ring_features, s->ring.features);
	CORIO__STAT_SET(s->stats.cpu, (uint64_t)s->cpu);

	s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->efd < 0) {
		ret = -errno;
		snprintf(s->err, sizeof(s->err), "shard %u: eventfd: %s", s->id, strerror(errno));
		return ret;
	}
	s->efd_nowait_test = corio__env_has("CORIO_RING_DISABLE", "efd_wait");
	ret = corio__stack_init(s, &rt->cfg);
	if (ret)
		return ret;
	corio__altstack_init(s); /* without it an overflow report is lost, nothing else */
	for (unsigned i = 0; i < CORIO__PART_MAX; i++) {
		const struct corio__part *p = corio__parts[i];

		s->err[0] = '\0';
		if (p && p->init && (ret = p->init(s)) < 0) {
			/* a part may say why itself, in s->err */
			if (!s->err[0])
				snprintf(s->err, sizeof(s->err), "shard %u: %s: %s", s->id,
					 p->name, strerror(-ret));
			return ret;
		}
	}
	return 0;
}

static void shard_teardown(struct corio__shard *s)
{
	for (unsigned i = CORIO__PART_MAX; i-- > 0;)
		if (corio__parts[i] && corio__parts[i]->fini && s->parts[i])
			corio__parts[i]->fini(s);
	if (s->ring.ring.ring_fd > 0)
		corio__ring_exit(&s->ring);
	corio__stack_cache_free(s);
	corio__fiber_pool_free(s);
	corio__altstack_fini(s);
}

/*
 * A write to a pipe, FIFO or socket whose reader has gone raises SIGPIPE in
 * the writing thread, whose default action ends the whole process. On a
 * shard that thread is corio's: a corio_write_at() issued inline by the ring,
 * or the blocking fallback. Shard threads block SIGPIPE, so such a write
 * returns -EPIPE and the process lives; the signal stays pending on the
 * shard thread, blocked, and is never delivered. The application's own
 * threads and its SIGPIPE disposition are untouched (README, "How it runs").
 */
static void block_sigpipe(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *shard_main(void *arg)
{
	struct corio__shard *s = arg;
	struct corio_rt *rt = s->rt;
	int ret;

	corio__tl_shard = s;
	s->tid = (pid_t)syscall(SYS_gettid);
	block_sigpipe();
#if CORIO__TSAN
	s->tsan_sched = __tsan_get_current_fiber();
#endif
	ret = shard_setup(s);

	pthread_mutex_lock(&rt->lock);
	if (ret) {
		rt->failed++;
		if (!rt->first_err) {
			rt->first_err = ret;
			snprintf(rt->err, sizeof(rt->err), "%s", s->err);
		}
	} else {
		rt->ready++;
	}
	pthread_cond_broadcast(&rt->cond);
	while (!rt->go)
		pthread_cond_wait(&rt->cond, &rt->lock);
	pthread_mutex_unlock(&rt->lock);

	if (!ret && !rt->failed) {
		struct corio_spawn_opts o = { .name = "entry" };

		efd_arm(s);
		ret = corio_spawn(entry_fiber, rt, &o, NULL);
		if (ret == 0)
			loop(s);
	}
	shard_teardown(s);
	corio__tl_shard = NULL;
	return (void *)(intptr_t)ret;
}

/* ---- start / wait -------------------------------------------------------------------- */

static void shard_free(struct corio__shard *s)
{
	if (!s)
		return;
	if (s->efd > 0)
		close(s->efd);
	if (numa_available() >= 0)
		numa_free(s, sizeof(*s));
	else
		free(s);
}

static struct corio__shard *shard_alloc(int cpu)
{
	struct corio__shard *s;
	int node = -1;

	if (numa_available() >= 0) {
		node = numa_node_of_cpu(cpu);
		s = node >= 0 ? numa_alloc_onnode(sizeof(*s), node) : numa_alloc_local(sizeof(*s));
	} else {
		s = aligned_alloc(64, (sizeof(*s) + 63) & ~(size_t)63);
	}
	if (!s)
		return NULL;
	memset(s, 0, sizeof(*s));
	s->numa_node = node;
	s->busy = true; /* counted in rt->busy_shards from the start */
	s->efd = -1;
	s->ring.ring.ring_fd = -1;
	return s;
}

static void rt_free(struct corio_rt *rt)
{
	/* Every shard thread has ended: nothing can read a part any more. */
	for (unsigned i = 0; i < rt->nshards; i++)
		for (unsigned k = 0; rt->shards[i] && k < CORIO__PART_MAX; k++)
			if (corio__parts[k] && corio__parts[k]->release && rt->shards[i]->parts[k])
				corio__parts[k]->release(rt->shards[i]);
	for (unsigned i = 0; i < rt->nshards; i++)
		shard_free(rt->shards[i]);
	free(rt->shards);
	free(rt->cpus);
	pthread_mutex_destroy(&rt->lock);
	pthread_cond_destroy(&rt->cond);
	free(rt);
}

int corio_start(const struct corio_config *ucfg, void (*entry)(void *), void *arg,
		struct corio_rt **out)
{
	struct corio_config defcfg;
	const struct corio_config *cfg = ucfg;
	struct corio_rt *rt;
	cpu_set_t mask;
	unsigned n, nmask, started = 0;
	int ret;

	if (out)
		*out = NULL;
	if (!out || !entry)
		return corio__error(-EINVAL, "corio_start: entry and out are required");
	if (corio__tl_shard)
		return corio__error(-EPERM, "corio_start: called from a shard; nested runtimes are not supported");
	if (!cfg) {
		corio_config_init(&defcfg);
		cfg = &defcfg;
	}
	ret = corio_config_check(cfg);
	if (ret)
		return ret;
	if (sched_getaffinity(0, sizeof(mask), &mask))
		return corio__error(-errno, "corio_start: sched_getaffinity: %s", strerror(errno));
	nmask = (unsigned)CPU_COUNT(&mask);
	n = cfg->shards ? cfg->shards : nmask;

	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->cfg = *cfg;
	rt->cfg.cpus = NULL;
	rt->nshards = n;
	rt->entry = entry;
	rt->entry_arg = arg;
	atomic_init(&rt->busy_shards, n);
	pthread_mutex_init(&rt->lock, NULL);
	pthread_cond_init(&rt->cond, NULL);
	rt->cpus = calloc(n, sizeof(int));
	rt->shards = calloc(n, sizeof(*rt->shards));
	if (!rt->cpus || !rt->shards) {
		rt_free(rt);
		return -ENOMEM;
	}
	{
		int list[CPU_SETSIZE];
		unsigned k = 0;

		for (int c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &mask))
				list[k++] = c;
		/* cfg->cpus, or the mask's CPUs in order, wrapping when shards > CPUs */
		for (unsigned i = 0; i < n; i++)
			rt->cpus[i] = cfg->cpus ? cfg->cpus[i] : list[i % k];
	}
	corio__overflow_handler_install();
	corio__tick_calibrate();

	for (unsigned i = 0; i < n; i++) {
		struct corio__shard *s = shard_alloc(rt->cpus[i]);

		if (!s) {
			ret = corio__error(-ENOMEM, "corio_start: cannot allocate shard %u", i);
			break;
		}
		s->rt = rt;
		s->id = i;
		s->cpu = rt->cpus[i];
		rt->shards[i] = s;
		ret = pthread_create(&s->thread, NULL, shard_main, s);
		if (ret) {
			ret = corio__error(-ret, "corio_start: pthread_create for shard %u: %s", i,
					   strerror(ret));
			break;
		}
		started++;
	}

	pthread_mutex_lock(&rt->lock);
	while (rt->ready + rt->failed < started)
		pthread_cond_wait(&rt->cond, &rt->lock);
	if (!ret && rt->failed) {
		ret = rt->first_err;
		corio__error(ret, "%s", rt->err);
	}
	if (ret)
		rt->failed++; /* tell the shards not to run */
	rt->go = true;
	pthread_cond_broadcast(&rt->cond);
	pthread_mutex_unlock(&rt->lock);

	if (ret) {
		for (unsigned i = 0; i < started; i++)
			pthread_join(rt->shards[i]->thread, NULL);
		rt_free(rt);
		return ret;
	}
	*out = rt;
	return 0;
}

int corio_wait(struct corio_rt *rt)
{
	int first = 0;

	if (!rt)
		return -EINVAL;
	if (corio__tl_shard)
		return -EPERM; /* a shard cannot wait for its own runtime */
	for (unsigned i = 0; i < rt->nshards; i++) {
		void *res = NULL;

		pthread_join(rt->shards[i]->thread, &res);
		if (!first && res)
			first = (int)(intptr_t)res;
	}
	if (!first)
		first = corio__census(rt); /* nothing leaked: core/census.c */
	rt_free(rt);
	return first;
}

int corio_run(const struct corio_config *cfg, void (*entry)(void *), void *arg)
{
	struct corio_rt *rt;
	int ret = corio_start(cfg, entry, arg, &rt);

	if (ret) {
		fprintf(stderr, "corio: %s\n", corio_last_error());
		return ret;
	}
	return corio_wait(rt);
}

int corio_stats_get(struct corio_rt *rt, unsigned shard, struct corio_stats *out)
{
	rt = corio__rt_or_own(rt);
	if (!rt)
		return -EPERM;
	if (!out || shard >= rt->nshards)
		return -EINVAL;
	corio__stats_copy(out, &rt->shards[shard]->stats, sizeof(*out));
	return 0;
}
