/* SPDX-License-Identifier: MIT */
/*
 * timer/heap.c - the shard's clock and timers: a 4-ary min-heap of struct
 * corio_timer with one IORING_OP_TIMEOUT armed for the earliest deadline,
 * firing callbacks; statistics. Sleeps, timer waits and deadlines are
 * core's (core/timer.c, core/deadline.c): nothing here knows fibers.
 *
 * Why a heap and one SQE instead of one timeout SQE per timer: measured with
 * tools/bench-timer (numbers in docs/TIMERS.md). In short, the kernel keeps
 * a ring's timeouts on one list and IORING_OP_TIMEOUT_REMOVE finds its
 * victim by walking it, so arm+cancel costs two SQEs, two CQEs and an O(n)
 * walk, and every pending timeout holds a kernel request; the heap arms and
 * cancels with no syscall at all in O(log n), in the caller's memory.
 *
 * The kernel timeout (state in struct corio__timers):
 *  - armed_ns is the deadline the kernel was last given. The loop calls
 *    timers_poll() once per turn, before it submits: it fires what is due,
 *    then makes the kernel's deadline <= heap[0]: arm when nothing is in
 *    flight, IORING_TIMEOUT_UPDATE (one SQE) when heap[0] moved earlier.
 *    Arming many timers within a turn therefore costs at most one SQE.
 *  - When heap[0] moves later (cancel, or a later re-arm) nothing is sent:
 *    the kernel timeout fires early, finds nothing due, and the next poll
 *    re-arms. A spurious wake-up is cheaper than an SQE per cancel.
 *  - An update can race with the timeout firing (-ENOENT): its CQE is then
 *    already on its way and the next poll re-arms. Either way the CQE of the
 *    armed op is what clears `inflight`; the op record is never reused
 *    before it.
 *  - Kernels before 5.11 lack IORING_TIMEOUT_UPDATE (the update fails with
 *    -EINVAL): we remove the timeout instead and re-arm on its CQE.
 *    CORIO_TIMER_NO_UPDATE=1 forces that path for tests.
 *
 * Expiry runs in corio__timers_poll() and in the timeout's CQE callback, at
 * most EXPIRE_BUDGET timers, and no more than were armed when it began, at a
 * time so a burst cannot starve I/O, nor can a callback that re-arms its
 * timer in the past (the rest go on the next turn: poll reports work, so
 * the loop does not sleep, but it still submits and reaps: core/loop.c).
 * Callbacks run there, on the loop; a timer without one goes to T->deliver.
 *
 * Shutdown: stop removes the kernel timeout and disarms every timer,
 * calling callbacks (or deliver) with -ECANCELED; busy holds the shard until
 * the kernel returned the op records.
 */
#include "timer/internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HEAP_INIT 1024u
#define EXPIRE_BUDGET 4096u

/* ---- the clock ---------------------------------------------------------------- */

uint64_t corio_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- statistics ------------------------------------------------------------- */

static unsigned hist_bucket(uint64_t v)
{
	unsigned msb;

	if (v < 4)
		return (unsigned)v;
	msb = 63u - (unsigned)__builtin_clzll(v);
	return 4u * (msb - 1u) + (unsigned)((v >> (msb - 2u)) & 3u);
}

uint64_t corio_timer_hist_bucket_ns(unsigned b)
{
	unsigned msb, sub;
	uint64_t lo;

	if (b < 4)
		return b;
	if (b >= 4u * 63u)
		return UINT64_MAX;
	msb = b / 4u + 1u;
	sub = b % 4u;
	lo = (1ull << msb) | ((uint64_t)sub << (msb - 2u));
	return lo + (1ull << (msb - 2u)) - 1u;
}

uint64_t corio_timer_lateness_quantile(const struct corio_timer_stats *st, double q)
{
	int b = st ? corio__hist_rank(st->lateness_hist, CORIO_TIMER_HIST_BUCKETS, q) : -1;

	return b < 0 ? 0 : corio_timer_hist_bucket_ns((unsigned)b);
}

/* ---- the heap ----------------------------------------------------------------- */

static inline void heap_put(struct corio__timers *T, uint32_t i, struct corio__theap_ent e)
{
	T->heap[i] = e;
	e.t->slot = i + 1;
}

static void sift_up(struct corio__timers *T, uint32_t i, struct corio__theap_ent e)
{
	while (i) {
		uint32_t p = (i - 1) >> 2;

		if (T->heap[p].deadline <= e.deadline)
			break;
		heap_put(T, i, T->heap[p]);
		i = p;
	}
	heap_put(T, i, e);
}

static void sift_down(struct corio__timers *T, uint32_t i, struct corio__theap_ent e)
{
	uint32_t n = T->n;

	for (;;) {
		uint32_t c = 4 * i + 1, best, end;

		if (c >= n)
			break;
		best = c;
		end = c + 4 < n ? c + 4 : n;
		for (uint32_t j = c + 1; j < end; j++)
			if (T->heap[j].deadline < T->heap[best].deadline)
				best = j;
		if (T->heap[best].deadline >= e.deadline)
			break;
		heap_put(T, i, T->heap[best]);
		i = best;
	}
	heap_put(T, i, e);
}

/* Put e at slot i, which holds something else, restoring heap order. */
static void heap_fix(struct corio__timers *T, uint32_t i, struct corio__theap_ent e)
{
	if (i && e.deadline < T->heap[(i - 1) >> 2].deadline)
		sift_up(T, i, e);
	else
		sift_down(T, i, e);
}

static int heap_grow(struct corio__timers *T)
{
	uint32_t cap;
	struct corio__theap_ent *h;

	if (T->cap >= UINT32_MAX / 2)
		return -ENOMEM;
	cap = T->cap ? T->cap * 2 : HEAP_INIT;
	h = realloc(T->heap, (size_t)cap * sizeof(*h));
	if (!h)
		return -ENOMEM;
	T->heap = h;
	T->cap = cap;
	return 0;
}

static void heap_remove(struct corio__timers *T, struct corio_timer *t)
{
	uint32_t i = t->slot - 1;
	struct corio__theap_ent last;

	t->slot = 0;
	last = T->heap[--T->n];
	if (i != T->n)
		heap_fix(T, i, last);
}

/* ---- the kernel timeout ---------------------------------------------------------- */

static inline void ts_set(struct __kernel_timespec *ts, uint64_t ns)
{
	ts->tv_sec = (long long)(ns / 1000000000u);
	ts->tv_nsec = (long long)(ns % 1000000000u);
}

static void send_remove(struct corio__timers *T)
{
	struct io_uring_sqe *sqe = corio__ring_sqe(T->ring);

	io_uring_prep_timeout_remove(sqe, (uint64_t)(uintptr_t)&T->op, 0);
	corio__sqe_set_op(sqe, &T->upd_op);
	T->upd_inflight++;
	T->removing = true;
}

/* Make the kernel's deadline <= min (heap[0]). */
static void kernel_sync(struct corio__timers *T, uint64_t min)
{
	struct io_uring_sqe *sqe;

	if (!T->inflight) {
		ts_set(&T->arm_ts, min);
		/* A late update still queued for the old op (SQPOLL) must not move
		 * the new one later than min. */
		ts_set(&T->upd_ts, min);
		sqe = corio__ring_sqe(T->ring);
		io_uring_prep_timeout(sqe, &T->arm_ts, 0, IORING_TIMEOUT_ABS);
		corio__sqe_set_op(sqe, &T->op);
		T->inflight = true;
		T->armed_ns = min;
		CORIO__TSTAT_ADD(T->st.kernel_arms, 1);
	} else if (min < T->armed_ns && !T->removing) {
		if (T->no_update) {
			send_remove(T);
			return;
		}
		ts_set(&T->upd_ts, min);
		sqe = corio__ring_sqe(T->ring);
		io_uring_prep_timeout_update(sqe, &T->upd_ts, (uint64_t)(uintptr_t)&T->op,
					     IORING_TIMEOUT_ABS);
		corio__sqe_set_op(sqe, &T->upd_op);
		T->upd_inflight++;
		T->armed_ns = min;
		CORIO__TSTAT_ADD(T->st.kernel_arms, 1);
	}
}

static void deliver(struct corio__timers *T, struct corio_timer *t, uint64_t count)
{
	int res = count > INT_MAX ? INT_MAX : (int)count;

	if (t->fn)
		t->fn(t, t->arg, res); /* t may be gone after this */
	else
		T->deliver(t, res);
}

/*
 * Fire what is due at now. At most EXPIRE_BUDGET timers, and at most as many
 * as were armed when the pass began: a callback that re-arms its timer at a
 * time already past (or at now, which is past by the time it is compared)
 * puts it back at the top of the heap, and without the second bound it
 * would fire again and again within one pass. With it, each pass ends after
 * about one round of the timers, the loop submits and reaps, and the rest
 * fire on the next turn (poll reports work, so the loop does not sleep).
 */
static unsigned expire(struct corio__timers *T, uint64_t now)
{
	unsigned budget = T->n < EXPIRE_BUDGET ? T->n : EXPIRE_BUDGET, fired = 0;

	while (T->n && T->heap[0].deadline <= now && budget--) {
		struct corio_timer *t = T->heap[0].t;
		uint64_t late = now - t->deadline_ns, count = 1;

		CORIO__TSTAT_ADD(T->st.lateness_hist[hist_bucket(late)], 1);
		if (late > T->st.lateness_max_ns)
			__atomic_store_n(&T->st.lateness_max_ns, late, __ATOMIC_RELAXED);
		if (t->period_ns) {
			uint64_t next;

			count += late / t->period_ns;
			next = corio__ns_add_sat(corio__ns_mul_sat(count, t->period_ns), t->deadline_ns);
			t->deadline_ns = next;
			sift_down(T, 0, (struct corio__theap_ent){ next, t });
		} else {
			heap_remove(T, t);
			CORIO__TSTAT_ADD(T->st.active, -1);
		}
		CORIO__TSTAT_ADD(T->st.fired, count);
		fired++;
		deliver(T, t, count);
	}
	return fired;
}

static void timeout_done(struct corio__op *op, int32_t res, uint32_t cqe_flags)
{
	struct corio__timers *T = op->data;

	(void)res;
	(void)cqe_flags;
	T->inflight = false;
	T->removing = false;
	T->armed_ns = 0;
	/* -ETIME: expired; -ECANCELED: removed (re-arm happens in poll). */
	if (!T->stopping && T->n)
		expire(T, corio_now_ns());
}

static void update_done(struct corio__op *op, int32_t res, uint32_t cqe_flags)
{
	struct corio__timers *T = op->data;

	(void)cqe_flags;
	T->upd_inflight--;
	if (res == -EINVAL && !T->no_update) {
		/* IORING_TIMEOUT_UPDATE is 5.11+: fall back to remove + re-arm. */
		T->no_update = true;
		if (T->inflight && !T->removing)
			send_remove(T);
	}
}

/* ---- the heap's life ------------------------------------------------------------- */

int corio__timers_init(struct corio__timers *T, struct corio__ring *r, void *owner,
		       void (*deliver_fn)(struct corio_timer *t, int res), char *err, size_t errlen)
{
	bool no_update = false;

	memset(T, 0, sizeof(*T));
	if (corio__env_flag("CORIO_TIMER_NO_UPDATE", &no_update, err, errlen) < 0)
		return -EINVAL;
	if (heap_grow(T))
		return -ENOMEM;
	T->ring = r;
	T->owner = owner;
	T->deliver = deliver_fn;
	T->op.cb = timeout_done;
	T->op.data = T;
	T->upd_op.cb = update_done;
	T->upd_op.data = T;
	T->no_update = no_update;
	return 0;
}

unsigned corio__timers_poll(struct corio__timers *T, bool may_block)
{
	unsigned fired = 0;
	uint64_t min;

	if (!T->n || T->stopping)
		return 0;
	min = T->heap[0].deadline;
	if (min <= corio_now_ns()) {
		fired = expire(T, corio_now_ns());
		if (!T->n)
			return fired;
		min = T->heap[0].deadline;
	}
	/* A loop that will not block catches every deadline itself: arming
	 * the kernel timeout only costs it an interrupt (~13 us of lateness
	 * on a VM, docs/TIMERS.md). */
	if (may_block)
		kernel_sync(T, min);
	return fired;
}

void corio__timers_stop(struct corio__timers *T)
{
	T->stopping = true;
	if (T->inflight && !T->removing)
		send_remove(T);
	/* Take from the end: no sifting, and callbacks may cancel others. */
	while (T->n) {
		struct corio_timer *t = T->heap[T->n - 1].t;

		heap_remove(T, t);
		CORIO__TSTAT_ADD(T->st.active, -1);
		CORIO__TSTAT_ADD(T->st.cancelled, 1);
		if (t->fn)
			t->fn(t, t->arg, -ECANCELED);
		else
			T->deliver(t, -ECANCELED);
	}
}

bool corio__timers_busy(const struct corio__timers *T)
{
	return T->inflight || T->upd_inflight;
}

void corio__timers_fini(struct corio__timers *T)
{
	free(T->heap);
	T->heap = NULL;
}

/* ---- arming ------------------------------------------------------------------------ */

int corio__timers_arm(struct corio__timers *T, struct corio_timer *t, uint64_t deadline_ns,
		      uint64_t period_ns)
{
	int ret;

	if (T->stopping)
		return -ECANCELED;
	t->period_ns = period_ns;
	t->deadline_ns = deadline_ns;
	if (t->slot) {
		heap_fix(T, t->slot - 1, (struct corio__theap_ent){ deadline_ns, t });
	} else {
		if (T->n == T->cap && (ret = heap_grow(T)))
			return ret;
		t->shard = T->owner;
		T->n++;
		sift_up(T, T->n - 1, (struct corio__theap_ent){ deadline_ns, t });
		CORIO__TSTAT_ADD(T->st.active, 1);
	}
	CORIO__TSTAT_ADD(T->st.armed, 1);
	return 0;
}

int corio__timers_cancel(struct corio__timers *T, struct corio_timer *t)
{
	if (!t->slot)
		return -ENOENT;
	heap_remove(T, t);
	CORIO__TSTAT_ADD(T->st.active, -1);
	CORIO__TSTAT_ADD(T->st.cancelled, 1);
	return 0;
}
