/* SPDX-License-Identifier: MIT */
/*
 * core/deadline.c - deadlines, in one place: deadline scopes, the one check
 * "has this fiber's deadline passed" that every wait makes, the timer that
 * bounds a parked fiber, and the linked-timeout half of a kernel op.
 *
 * A fiber's effective deadline is one word, corio_fiber.deadline_ns (0:
 * none). A scope saves the previous value in the caller's struct
 * corio_deadline and installs min(previous, its own); pop restores it. So
 * nesting costs nothing and has no depth limit, and the nearest deadline
 * always wins. dl_depth only lets pop catch scopes closed out of order.
 *
 * How each kind of wait is bounded:
 *  - every blocking call first asks corio__deadline_passed(): a passed
 *    deadline fails the call before it starts anything (and is counted);
 *  - a fiber parked on a wait queue or in a bare park gets a heap timer at
 *    its deadline (corio__deadline_arm / _arm_park) that takes it off the
 *    queue, or wakes it, with -ETIMEDOUT;
 *  - a kernel op whose deadline is covered (corio__timers_cover: a timer
 *    no later than it is in the heap, or the kernel's timeout is armed no
 *    later) gets a heap timer at the deadline that async-cancels the op if
 *    it fires: the loop wakes before that deadline anyway, so the bound
 *    costs no SQE and no CQE when the op completes in time, the usual case
 *    (an idle-timeout scope around a server's reply: the linked timeout
 *    below cost httpd ~6% of its CPU per 4 KiB GET under wrk -c500,
 *    docs/TIMERS.md);
 *  - any other kernel op (its deadline is the shard's earliest: a linked
 *    timeout costs what moving the kernel's timeout earlier would, and
 *    leaves no early wake-up behind) gets an IORING_OP_LINK_TIMEOUT linked
 *    behind its SQE (IOSQE_IO_LINK; IORING_TIMEOUT_ABS on CLOCK_MONOTONIC; the kernel
 *    copies the timespec at submit, while the frame is parked). When it
 *    fires the kernel cancels the op, whose final CQE then carries
 *    -ECANCELED (or -EINTR from an io-wq worker), or a byte count if data
 *    had moved already: a count is returned as is, an error becomes
 *    -ETIMEDOUT once the deadline has passed and the fiber was not
 *    cancelled. Either way the op's caller returns only after that final
 *    CQE (invariant 2). Both SQEs carry a link slot (uring/internal.h) as
 *    user_data, not the op record: the kernel's timeout cancels the op by
 *    user_data from task work that may run after the op's CQE was reaped,
 *    while the record's stack address is reused by the fiber's next op at
 *    once; a slot is reused only after the link timeout's own CQE.
 *    Fallback (no LINK_TIMEOUT, 5.5+; a one-entry SQ; CORIO_TIMER_NO_LINK=1;
 *    or a caller that took another SQE between begin and wait): a heap timer
 *    at the deadline async-cancels the op.
 */
#include "core/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- scopes -------------------------------------------------------------------- */

enum { SCOPE_SHIELD = 1u };

static int push(const char *who, struct corio_deadline *scope, uint64_t deadline_ns,
		bool shield)
{
	struct corio_fiber *f = corio__self();

	CORIO__REQUIRE_FIBER(who, -EPERM);
	if (!scope)
		return corio__error(-EINVAL, "%s: scope is NULL", who);
	scope->saved_ns = f->deadline_ns;
	scope->fiber = f;
	scope->depth = ++f->dl_depth;
	scope->flags = shield ? SCOPE_SHIELD : 0;
	if (shield)
		f->deadline_ns = 0;
	else if (deadline_ns && (!f->deadline_ns || deadline_ns < f->deadline_ns))
		f->deadline_ns = deadline_ns;
	return 0;
}

int corio_deadline_push(struct corio_deadline *scope, uint64_t deadline_ns)
{
	return push("corio_deadline_push", scope, deadline_ns, false);
}

int corio_timeout_push(struct corio_deadline *scope, uint64_t timeout_ns)
{
	return push("corio_timeout_push", scope, corio__ns_add_sat(corio_now_ns(), timeout_ns),
		    false);
}

int corio_deadline_shield(struct corio_deadline *scope)
{
	return push("corio_deadline_shield", scope, 0, true);
}

int corio_deadline_pop(struct corio_deadline *scope)
{
	struct corio_fiber *f = corio__self();

	CORIO__REQUIRE_FIBER("corio_deadline_pop", -EPERM);
	if (!scope || scope->fiber != f || scope->depth != f->dl_depth || !f->dl_depth)
		return corio__misuse(-EINVAL, "corio_deadline_pop",
				     "%s is not the innermost open scope of this fiber",
				     scope ? "scope" : "NULL");
	f->deadline_ns = scope->saved_ns;
	f->dl_depth--;
	scope->fiber = NULL;
	return 0;
}

uint64_t corio_deadline_ns(void)
{
	struct corio_fiber *f = corio__self();

	return f ? f->deadline_ns : 0;
}

/* ---- the one check ---------------------------------------------------------------- */

void corio__deadline_count_timeout(struct corio__shard *s)
{
	struct corio__timers *T = corio__timers(s);

	if (T)
		CORIO__STAT_ADD(T->st.timed_out, 1);
}

bool corio__deadline_passed(struct corio_fiber *f)
{
	if (CORIO__LIKELY(!f->deadline_ns) || corio_now_ns() < f->deadline_ns)
		return false;
	corio__deadline_count_timeout(f->shard);
	return true;
}

/* ---- bounding parked fibers ----------------------------------------------------------- */

static void fire_wq(struct corio_timer *t, void *arg, int res)
{
	struct corio_fiber *f = arg;

	(void)t;
	if (res < 0)
		return; /* shutdown: the fiber is being cancelled anyway */
	if (f->wq) {
		corio__deadline_count_timeout(f->shard);
		corio__wq_unpark(f, -ETIMEDOUT);
	}
}

/* A bare park: the waker is whoever knows the fiber (a joinee, a call's
 * reply). The timer is disarmed right after the park returns, on this
 * thread, so while it is armed f is parked here or already queued (then
 * corio__ready() does nothing). */
static void fire_park(struct corio_timer *t, void *arg, int res)
{
	struct corio_fiber *f = arg;

	(void)t;
	if (res < 0)
		return;
	if (f->state == CORIO__F_PARKED) {
		corio__deadline_count_timeout(f->shard);
		corio__ready(f, -ETIMEDOUT);
	}
}

static int arm(struct corio_timer *dt, struct corio_fiber *f, corio_timer_fn fire)
{
	if (corio__deadline_passed(f))
		return -ETIMEDOUT;
	corio_timer_init(dt, fire, f);
	return corio_timer_arm(dt, f->deadline_ns, 0);
}

int corio__deadline_arm(struct corio_timer *dt, struct corio_fiber *f)
{
	return arm(dt, f, fire_wq);
}

int corio__deadline_arm_park(struct corio_timer *dt, struct corio_fiber *f)
{
	return arm(dt, f, fire_park);
}

void corio__deadline_disarm(struct corio_timer *dt)
{
	if (dt->slot)
		corio_timer_cancel(dt);
}

/* ---- kernel ops ------------------------------------------------------------------------ */

void corio__deadline_op_prepare(struct corio_fiber *f)
{
	/* Reserve two SQ slots, so that the link timeout op_link appends right
	 * behind the caller's SQE is never split from it by a flush of a full
	 * SQ. */
	if (CORIO__UNLIKELY(f->deadline_ns) && !f->shard->dl_no_link)
		corio__ring_reserve(&f->shard->ring, 2);
}

static void cancel_op(struct corio_timer *t, void *arg, int res)
{
	struct corio__op *op = arg;
	struct corio_fiber *f = op->data;

	(void)t;
	if (res > 0 && f->wait_op == op)
		corio__ring_cancel(&f->shard->ring, op);
}

void corio__deadline_op_link(struct corio__dl_op *d, struct corio__op *op)
{
	struct corio_fiber *f = op->data;
	struct corio__shard *s = f->shard;
	struct io_uring_sqe *head = corio__ring_queued_sqe(&s->ring, op->user_data);
	struct corio__link *slot = NULL;

	d->deadline_ns = f->deadline_ns;
	d->fallback = false;
	if (!s->dl_no_link && head && !corio__timers_cover(corio__timers(s), d->deadline_ns) &&
	    io_uring_sq_space_left(&s->ring.ring) >= 1 &&
	    (slot = corio__ring_link_get(&s->ring))) {
		struct io_uring_sqe *lt;

		/* after the caller's prep, which clears sqe->flags */
		head->flags |= IOSQE_IO_LINK;
		d->ts.tv_sec = (long long)(d->deadline_ns / 1000000000u);
		d->ts.tv_nsec = (long long)(d->deadline_ns % 1000000000u);
		lt = corio__ring_sqe(&s->ring);
		io_uring_prep_link_timeout(lt, &d->ts, IORING_TIMEOUT_ABS);
		corio__ring_link_bind(slot, head, lt, op);
		CORIO__STAT_ADD(corio__timers(s)->st.linked, 1);
	} else {
		/* A heap timer (covered, or no link possible). The op may already
		 * be submitted: cancel it by user_data. */
		corio_timer_init(&d->dt, cancel_op, op);
		d->fallback = corio_timer_arm(&d->dt, d->deadline_ns, 0) == 0;
	}
}

int corio__deadline_op_done(struct corio__dl_op *d, struct corio_fiber *f, int res)
{
	if (d->fallback && d->dt.slot)
		corio_timer_cancel(&d->dt);
	if ((res == -ECANCELED || res == -EINTR) && !(f->flags & CORIO__FF_CANCELLED) &&
	    corio_now_ns() >= d->deadline_ns) {
		corio__deadline_count_timeout(f->shard);
		return -ETIMEDOUT;
	}
	return res;
}

int corio__deadline_init(struct corio__shard *s)
{
	bool no_link = false;

	/* Linked timeouts are 5.5+; a one-entry SQ cannot hold a link.
	 * CORIO_TIMER_NO_LINK=1 forces the heap-timer fallback for tests. */
	if (corio__env_flag("CORIO_TIMER_NO_LINK", &no_link, s->err, sizeof(s->err)) < 0)
		return -EINVAL;
	s->dl_no_link = !corio__ring_has_op(&s->ring, IORING_OP_LINK_TIMEOUT) ||
			s->ring.sq_entries < 2 || no_link;
	return 0;
}
