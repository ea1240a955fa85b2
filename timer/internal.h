/* SPDX-License-Identifier: MIT */
/*
 * timer/internal.h - the private interface of timer/: a shard's clock, its
 * 4-ary timer heap and the one IORING_OP_TIMEOUT armed for the earliest
 * entry. A timer fires a callback; timer/ knows nothing of fibers (like
 * libuv's timer heap under its loop). core/ builds sleeps, timer waits,
 * deadline scopes and bounded waits on it (core/timer.c, core/deadline.c).
 *
 * May include: uring/internal.h and the public headers. Not installed.
 */
#ifndef CORIO_TIMER_INTERNAL_H
#define CORIO_TIMER_INTERNAL_H

#include "corio.h"
#include "uring/internal.h"

#include <stdbool.h>
#include <stdint.h>

/*
 * Saturating time arithmetic, for every conversion of a caller's duration
 * to nanoseconds and every "now + duration" in the library. A wrapped
 * product or sum lands in the past: a timer armed there fires at once, and
 * one that re-arms itself from that value fires forever (corio-kv's sweep
 * with EXPIRE k 9223372036854 did). UINT64_MAX is "never" to the heap and
 * to a deadline scope, so saturating keeps the caller's meaning.
 */
#define CORIO__NS_PER_US 1000ull
#define CORIO__NS_PER_MS 1000000ull
#define CORIO__NS_PER_S 1000000000ull

/* n units of unit_ns nanoseconds each (e.g. ms * CORIO__NS_PER_MS). */
static inline uint64_t corio__ns_mul_sat(uint64_t n, uint64_t unit_ns)
{
	uint64_t r;

	return __builtin_mul_overflow(n, unit_ns, &r) ? UINT64_MAX : r;
}

/* a + b nanoseconds (a deadline from a time and a duration). */
static inline uint64_t corio__ns_add_sat(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* One heap entry: the deadline is copied in so that sifting compares
 * without touching the timers themselves. */
struct corio__theap_ent {
	uint64_t deadline;
	struct corio_timer *t;
};

struct corio__timers {
	struct corio__theap_ent *heap; /* 4-ary min-heap on deadline        */
	uint32_t n, cap;
	struct corio__ring *ring;      /* the shard's ring                   */
	void *owner;                   /* stored in t->shard while armed     */
	/* Delivers expirations (res > 0) and shutdown (-ECANCELED) to a timer
	 * without a callback: core/timer.c wakes its waiting fibers. */
	void (*deliver)(struct corio_timer *t, int res);

	/* The one IORING_OP_TIMEOUT kept armed for heap[0]. */
	struct corio__op op;           /* its record; cb = timeout_done     */
	struct __kernel_timespec arm_ts; /* read by the kernel at submit     */
	struct __kernel_timespec upd_ts; /* for IORING_TIMEOUT_UPDATE SQEs   */
	uint64_t armed_ns;             /* deadline the kernel was last told  */
	bool inflight;                 /* op awaits its CQE                  */
	bool removing;                 /* a remove is on its way (fallback)  */
	bool no_update;                /* kernel lacks IORING_TIMEOUT_UPDATE */
	bool stopping;
	struct corio__op upd_op;       /* shared by update/remove SQEs       */
	uint32_t upd_inflight;

	struct corio_timer_stats st;   /* owner-written, read by other threads */
};

/* Owner-written counters readable from other threads without tearing. */
#define CORIO__TSTAT_ADD(field, n) \
	__atomic_store_n(&(field), (field) + (n), __ATOMIC_RELAXED)

/* Set up T on ring r (the heap's first block is allocated): 0, -ENOMEM, or
 * -EINVAL with the reason in err (a bad CORIO_TIMER_NO_UPDATE). */
int corio__timers_init(struct corio__timers *T, struct corio__ring *r, void *owner,
		       void (*deliver)(struct corio_timer *t, int res), char *err, size_t errlen);
/*
 * The bucket that holds the q-quantile (0 <= q <= 1, clamped) of a
 * histogram of n buckets: the first whose running count reaches q of the
 * total (at least one sample). -1 when it is empty. The public quantile
 * calls of timers and scheduling classes map it to their buckets' bounds.
 */
static inline int corio__hist_rank(const uint64_t *hist, unsigned n, double q)
{
	uint64_t total = 0, seen = 0, want;

	for (unsigned b = 0; b < n; b++)
		total += hist[b];
	if (!total)
		return -1;
	q = q < 0 ? 0 : q > 1 ? 1 : q;
	want = (uint64_t)(q * (double)total);
	if (want < 1)
		want = 1;
	for (unsigned b = 0; b < n; b++) {
		seen += hist[b];
		if (seen >= want)
			return (int)b;
	}
	return (int)n - 1; /* not reached: seen ends at total >= want */
}

/*
 * Once per loop turn, before the loop submits: fire what is due (at most a
 * budget of timers; the rest next turn) and, when may_block, make the
 * kernel's timeout cover heap[0]. Returns the timers fired.
 */
unsigned corio__timers_poll(struct corio__timers *T, bool may_block);
/* Shutdown: remove the kernel timeout, disarm every timer (callbacks and
 * deliver() see -ECANCELED). */
void corio__timers_stop(struct corio__timers *T);
/* True when a timer armed at ns would cost no SQE: the kernel's timeout
 * is armed at or before ns, or an earlier timer will have it armed so, and
 * the loop wakes before ns anyway (core/deadline.c picks its kind of op
 * bound by this). */
static inline bool corio__timers_cover(const struct corio__timers *T, uint64_t ns)
{
	return !T->stopping && ((T->n && T->heap[0].deadline <= ns) ||
				(T->inflight && !T->removing && T->armed_ns <= ns));
}
/* True while the kernel still holds T's op records. */
bool corio__timers_busy(const struct corio__timers *T);
void corio__timers_fini(struct corio__timers *T); /* after the ring drained */

/* Arm (or re-arm) t at deadline_ns, periodic when period_ns != 0: 0,
 * -ECANCELED after stop, -ENOMEM. t must be disarmed or armed on T. */
int corio__timers_arm(struct corio__timers *T, struct corio_timer *t, uint64_t deadline_ns,
		      uint64_t period_ns);
/* Disarm t: 0, or -ENOENT when it is not armed. No callback runs. */
int corio__timers_cancel(struct corio__timers *T, struct corio_timer *t);

#endif
