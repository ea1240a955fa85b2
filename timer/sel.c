/* SPDX-License-Identifier: MIT */
/*
 * timer/sel.c - a timer as a corio_select() item (core/select.c has the
 * machinery). The select's stand-in waits on the timer's waiters queue like
 * a fiber in corio_timer_wait(). An expiration is delivered to waiters as
 * the wake-up's value, not through t->pending, so when the timer's item
 * does not win, disarm puts the count back into t->pending: the next wait
 * or select collects it, and nothing is lost.
 */
#include "timer/internal.h"

#include <errno.h>
#include <limits.h>

static bool timer_poll(struct corio_sel *it)
{
	struct corio_timer *t = it->obj;

	if (t->fn || (t->shard && t->shard != (void *)corio__tl_shard)) {
		it->res = -EINVAL;
		return true;
	}
	if (t->pending) {
		it->res = t->pending > INT_MAX ? INT_MAX : (ssize_t)t->pending;
		t->pending = 0;
		return true;
	}
	if (!t->slot) {
		it->res = -ENOENT; /* never armed, fired and collected, or cancelled */
		return true;
	}
	return false;
}

static int timer_arm(struct corio_sel *it, struct corio_fiber *p)
{
	corio__wq_push(&((struct corio_timer *)it->obj)->waiters, p);
	return 0;
}

static void timer_disarm(struct corio_sel *it, struct corio_fiber *p)
{
	struct corio_timer *t = it->obj;

	corio__wq_del(p);
	if (corio__proxy_fired(p) && p->wake_res > 0) {
		uint64_t sum = (uint64_t)t->pending + (uint64_t)p->wake_res;

		t->pending = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
	}
}

static const struct corio__sel_ops timer_sel_ops = {
	.poll = timer_poll,
	.arm = timer_arm,
	.disarm = timer_disarm,
};

void corio_sel_timer(struct corio_sel *it, struct corio_timer *t)
{
	corio__sel_fill(it, t ? &timer_sel_ops : NULL, t, NULL, 0, 0);
}
