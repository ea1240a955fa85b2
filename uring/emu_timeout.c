/* SPDX-License-Identifier: MIT */
/*
 * uring/emu_timeout.c - the ring emulator's timeouts: TIMEOUT records on
 * one list sorted by deadline (CLOCK_MONOTONIC ns, whatever clock the SQE
 * named), fired by emu.c's wait; TIMEOUT_REMOVE (and its UPDATE) and
 * ASYNC_CANCEL by user_data, which find parked ops too.
 */
#include "uring/emu.h"

#include <errno.h>

static void timeout_insert(struct corio__emu *e, struct emu_op *o)
{
	struct emu_op **pp = &e->timeouts;

	while (*pp && (*pp)->deadline <= o->deadline)
		pp = &(*pp)->next;
	o->next = *pp;
	*pp = o;
}

static void timeout_unlink(struct corio__emu *e, struct emu_op *o)
{
	for (struct emu_op **pp = &e->timeouts; *pp; pp = &(*pp)->next)
		if (*pp == o) {
			*pp = o->next;
			break;
		}
	corio__emu_ud_del(e, o);
}

/* A timespec in the SQE's clock and mode, as CLOCK_MONOTONIC ns. */
static int timeout_deadline(const struct __kernel_timespec *ts, uint32_t tflags, uint64_t *out)
{
	clockid_t c = CLOCK_MONOTONIC;
	uint64_t v, now;

	if (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)
		return -EINVAL;
	v = (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
	if (tflags & IORING_TIMEOUT_BOOTTIME)
		c = CLOCK_BOOTTIME;
	else if (tflags & IORING_TIMEOUT_REALTIME)
		c = CLOCK_REALTIME;
	now = mono_ns(CLOCK_MONOTONIC);
	if (!(tflags & IORING_TIMEOUT_ABS))
		*out = now + v;
	else if (c == CLOCK_MONOTONIC)
		*out = v;
	else {
		uint64_t cn = mono_ns(c);

		*out = v > cn ? now + (v - cn) : now;
	}
	return 0;
}

void corio__emu_fire_due(struct corio__ring *r)
{
	struct corio__emu *e = r->em;
	uint64_t now = mono_ns(CLOCK_MONOTONIC);

	corio__emu_fire_retries(e, now);
	while (e->timeouts && e->timeouts->deadline <= now) {
		struct emu_op *o = e->timeouts;

		timeout_unlink(e, o);
		corio__emu_finish(r, o, -ETIME, 0);
	}
}

int corio__emu_timeout_remove(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	struct corio__emu *e = r->em;
	struct emu_op *t = corio__emu_ud_find(e, sqe->addr);
	uint32_t tflags = sqe->timeout_flags;
	uint64_t dl;
	int ret;

	if (!t || t->f)
		return -ENOENT;
	if (!(tflags & IORING_TIMEOUT_UPDATE)) {
		timeout_unlink(e, t);
		corio__emu_finish(r, t, -ECANCELED, 0);
		return 0;
	}
	ret = timeout_deadline((const struct __kernel_timespec *)(uintptr_t)sqe->off, tflags, &dl);
	if (ret)
		return ret;
	timeout_unlink(e, t);
	t->deadline = dl;
	timeout_insert(e, t);
	return corio__emu_ud_add(e, t);
}

int corio__emu_cancel(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	struct corio__emu *e = r->em;
	struct emu_op *o;

	if (sqe->cancel_flags & ~IORING_ASYNC_CANCEL_ALL)
		return -EINVAL; /* by fd or "any": corio does not use them */
	o = corio__emu_ud_find(e, sqe->addr);
	if (!o)
		return -ENOENT; /* done already (its CQE may wait in the CQ) */
	if (o->f)
		corio__emu_unpark(e, o);
	else
		timeout_unlink(e, o);
	corio__emu_finish(r, o, -ECANCELED, 0);
	return 0;
}

int corio__emu_timeout_add(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe)
{
	int ret;

	/* Completion counts and multishot timeouts: corio uses neither. */
	if (sqe->off || (sqe->timeout_flags & ~(IORING_TIMEOUT_ABS | IORING_TIMEOUT_BOOTTIME |
						 IORING_TIMEOUT_REALTIME)))
		return -EINVAL;
	ret = timeout_deadline((const struct __kernel_timespec *)(uintptr_t)sqe->addr,
			       sqe->timeout_flags, &o->deadline);
	if (ret)
		return ret;
	ret = corio__emu_ud_add(r->em, o);
	if (ret)
		return ret;
	timeout_insert(r->em, o);
	return 0;
}
