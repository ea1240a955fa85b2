/* SPDX-License-Identifier: MIT */
/*
 * core/drain.c - a graceful stop (corio_drain): stop taking new work, let
 * the work under way finish within a deadline, then shut down.
 *
 * The first corio_drain() of a runtime wins (rt->draining). It arms a timer
 * on its own shard whose callback shuts the runtime down, and tells every
 * shard, itself directly and the others by corio_post(): each marks itself
 * draining, sets its drain event (corio_drain_event(): servers select on it
 * to close idle connections) and calls each part's drain hook (net: every
 * listener stops accepting). Nothing is cancelled until the deadline; a
 * runtime whose fibers all end before it stops by itself, as always. The
 * timer is not a fiber, so it does not keep the runtime alive.
 */
#include "core/internal.h"

#include <corio/msg.h>

#include <errno.h>

static void drain_expired(struct corio_timer *t, void *arg, int res)
{
	(void)t;
	if (res > 0) /* not the -ECANCELED of a shard that stops first */
		corio__rt_stop(arg);
}

static void drain_begin(struct corio__shard *s)
{
	const struct corio__part *const *parts = s->rt->parts;

	if (s->draining)
		return;
	s->draining = true;
	corio_event_set(&s->drain_ev);
	for (unsigned i = 0; i < CORIO__PART_MAX; i++)
		if (parts[i] && parts[i]->drain && s->parts[i])
			parts[i]->drain(s);
}

static void drain_posted(void *arg)
{
	(void)arg;
	drain_begin(corio__shard());
}

int corio_drain(uint64_t timeout_ns)
{
	struct corio__shard *s = corio__shard();
	struct corio_rt *rt;
	int ret;

	if (!s)
		return corio__misuse(-EPERM, "corio_drain", "not called on a shard");
	rt = s->rt;
	if (atomic_exchange(&rt->draining, 1))
		return 0; /* a drain is under way: its deadline holds */
	corio_timer_init(&s->drain_timer, drain_expired, rt);
	ret = corio_timer_arm_in(&s->drain_timer, timeout_ns, 0);
	if (ret)
		corio__rt_stop(rt); /* no deadline (the shard stops already): stop now */
	for (unsigned i = 0; i < rt->nshards; i++)
		if (i != s->id && corio_post(i, drain_posted, NULL))
			corio__rt_stop(rt); /* a shard we cannot tell: no drain without it */
	drain_begin(s);
	return 0;
}

struct corio_event *corio_drain_event(void)
{
	struct corio__shard *s = corio__shard();

	return s ? &s->drain_ev : NULL;
}

int corio_draining(void)
{
	struct corio__shard *s = corio__shard();

	return s && s->draining;
}
