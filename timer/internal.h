/* SPDX-License-Identifier: MIT */
/*
 * timer/internal.h - the timer part of a shard, as seen by core/ (the deadline
 * hooks in core/ops.c and core/fiber.c). Not installed.
 */
#ifndef CORIO_TIMER_INTERNAL_H
#define CORIO_TIMER_INTERNAL_H

#include "core/internal.h"

/* One heap entry: the deadline is copied in so that sifting compares
 * without touching the timers themselves. */
struct corio__theap_ent {
	uint64_t deadline;
	struct corio_timer *t;
};

struct corio__timers {
	struct corio__theap_ent *heap; /* 4-ary min-heap on deadline        */
	uint32_t n, cap;

	/* The one IORING_OP_TIMEOUT kept armed for heap[0]. */
	struct corio__op op;           /* its record; cb = timeout_done     */
	struct __kernel_timespec arm_ts; /* read by the kernel at submit     */
	struct __kernel_timespec upd_ts; /* for IORING_TIMEOUT_UPDATE SQEs   */
	uint64_t armed_ns;             /* deadline the kernel was last told  */
	bool inflight;                 /* op awaits its CQE                  */
	bool removing;                 /* a remove is on its way (fallback)  */
	bool no_update;                /* kernel lacks IORING_TIMEOUT_UPDATE */
	bool no_link;                  /* no IORING_OP_LINK_TIMEOUT: per-call
	                                  timeouts use a heap timer + cancel  */
	bool stopping;
	struct corio__op upd_op;       /* shared by update/remove SQEs       */
	uint32_t upd_inflight;

	struct corio_timer_stats st;   /* owner-written, read by other threads */
};

static inline struct corio__timers *corio__timers(struct corio__shard *s)
{
	return s->parts[CORIO__PART_TIMER];
}

extern const struct corio__part corio__timer_part;

/* ---- deadline hooks (timer/deadline.c) ------------------------------------ */

/*
 * Bound a fiber wait by f's deadline scope. Call before parking f on a wait
 * queue when f->deadline_ns != 0: returns -ETIMEDOUT if the deadline has
 * passed, else arms dt (on the caller's stack) to pull f off its wait queue
 * with -ETIMEDOUT at the deadline; corio__deadline_disarm(dt) after the park.
 */
int corio__deadline_arm(struct corio_timer *dt, struct corio_fiber *f);
/* The same for a bare park (corio__park_bounded): at the deadline, f is made
 * ready with -ETIMEDOUT if it is still parked. */
int corio__deadline_arm_park(struct corio_timer *dt, struct corio_fiber *f);
void corio__deadline_disarm(struct corio_timer *dt);

/* A blocking call is about to return -ETIMEDOUT. */
void corio__timer_count_timeout(struct corio__shard *s);
/* A kernel op went out with a linked timeout. */
void corio__timer_count_linked(struct corio__shard *s);

#endif
