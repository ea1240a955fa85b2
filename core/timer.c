/* SPDX-License-Identifier: MIT */
/*
 * core/timer.c - timers as the public API sees them, built on timer/'s heap:
 * timer objects that fibers wait on, sleeps, a timer as a corio_select()
 * item, the timer counters, and the shard part that runs the heap each
 * loop turn.
 *
 * timer/ fires callbacks only. A timer without one (fn == NULL) is a
 * waitable: its expirations reach deliver_wait() below, which wakes the
 * fibers in corio_timer_wait() with the count, or keeps the count in
 * t->pending for the next wait when nobody waits.
 *
 * The select item's stand-in waits on the timer's waiters queue like a
 * fiber in corio_timer_wait(). An expiration is delivered to waiters as the
 * wake-up's value, not through t->pending, so when the timer's item does
 * not win, disarm puts the count back into t->pending: the next wait or
 * select collects it, and nothing is lost.
 */
#include "core/internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- delivery to fibers ------------------------------------------------------ */

static void deliver_wait(struct corio_timer *t, int res)
{
	if (res < 0) {
		t->pending = 0;
		corio__wq_wake_all(&t->waiters, res);
	} else if (t->waiters.head) {
		corio__wq_wake_all(&t->waiters, res);
	} else {
		uint64_t p = (uint64_t)t->pending + (uint64_t)res;

		t->pending = p > UINT32_MAX ? UINT32_MAX : (uint32_t)p;
	}
}

/* ---- the shard part --------------------------------------------------------------- */

static int timers_init(struct corio__shard *s)
{
	struct corio__timers *T = malloc(sizeof(*T));
	int ret;

	if (!T)
		return -ENOMEM;
	ret = corio__deadline_init(s);
	if (!ret)
		ret = corio__timers_init(T, &s->ring, s, deliver_wait, s->err, sizeof(s->err));
	if (ret) {
		free(T);
		return ret;
	}
	__atomic_store_n(&s->parts[CORIO__PART_TIMER], T, __ATOMIC_RELEASE);
	return 0;
}

/* No .poll: the loop polls the timers itself, inline (core/loop.c
 * parts_poll), one load a turn while none is armed. They arm the kernel
 * timeout only when the loop may block: at every turn's poll under BLOCK;
 * under SPIN once the spin is over and the shard is about to sleep
 * (timers_sleep); POLL never blocks. */
static void timers_sleep(struct corio__shard *s)
{
	if (s->rt->cfg.idle == CORIO_IDLE_SPIN)
		(void)corio__timers_poll(corio__timers(s), true);
}

static void timers_stop(struct corio__shard *s)
{
	corio__timers_stop(corio__timers(s));
}

static bool timers_busy(struct corio__shard *s)
{
	return corio__timers_busy(corio__timers(s));
}

static void timers_fini(struct corio__shard *s)
{
	corio__timers_fini(corio__timers(s));
}

static void timers_release(struct corio__shard *s)
{
	free(s->parts[CORIO__PART_TIMER]);
	s->parts[CORIO__PART_TIMER] = NULL;
}

const struct corio__part corio__timer_part = {
	.name = "timer",
	.init = timers_init,
	.sleep = timers_sleep,
	.stop = timers_stop,
	.busy = timers_busy,
	.fini = timers_fini,
	.release = timers_release,
};

int corio_timer_stats_get(struct corio_rt *rt, unsigned shard, struct corio_timer_stats *out)
{
	struct corio__timers *T;

	rt = corio__rt_or_own(rt);
	if (!rt)
		return corio__error(-EPERM, "corio_timer_stats_get: rt is NULL off a shard");
	if (!out || shard >= rt->nshards || !rt->shards[shard])
		return corio__error(-EINVAL, "corio_timer_stats_get: %s",
				    out ? "no such shard" : "out is NULL");
	T = __atomic_load_n((struct corio__timers **)&rt->shards[shard]->parts[CORIO__PART_TIMER],
			    __ATOMIC_ACQUIRE);
	if (!T) {
		memset(out, 0, sizeof(*out));
		return 0;
	}
	corio__stats_copy(out, &T->st, sizeof(*out));
	return 0;
}

/* ---- timer objects ------------------------------------------------------------------ */

/* The caller's shard and its timers, or an error. */
static int owner(const char *who, struct corio__shard **sp, struct corio__timers **Tp)
{
	struct corio__shard *s = corio__tl_shard;

	*sp = NULL;
	*Tp = NULL;
	if (CORIO__UNLIKELY(!s))
		return corio__misuse(-EPERM, who, "%s", corio__not_fiber_why());
	*sp = s;
	*Tp = corio__timers(s);
	return *Tp ? 0 : -ENOSYS;
}

int corio_timer_init(struct corio_timer *t, corio_timer_fn fn, void *arg)
{
	if (!t)
		return corio__error(-EINVAL, "corio_timer_init: t is NULL");
	memset(t, 0, sizeof(*t));
	t->fn = fn;
	t->arg = arg;
	return 0;
}

int corio_timer_arm(struct corio_timer *t, uint64_t deadline_ns, uint64_t period_ns)
{
	struct corio__shard *s;
	struct corio__timers *T;
	int ret = owner("corio_timer_arm", &s, &T);

	if (ret)
		return ret;
	if (!t)
		return corio__error(-EINVAL, "corio_timer_arm: t is NULL");
	if (t->shard && t->shard != (void *)s && (t->slot || t->waiters.head))
		return corio__error(-EINVAL, "corio_timer_arm: the timer is armed or waited "
					     "on by another shard");
	ret = corio__timers_arm(T, t, deadline_ns, period_ns);
	if (ret == 0)
		t->pending = 0;
	return ret;
}

static uint64_t sat_from_now(uint64_t delta)
{
	return corio__ns_add_sat(corio_now_ns(), delta);
}

int corio_timer_arm_in(struct corio_timer *t, uint64_t delay_ns, uint64_t period_ns)
{
	return corio_timer_arm(t, sat_from_now(delay_ns), period_ns);
}

int corio_timer_cancel(struct corio_timer *t)
{
	struct corio__shard *s;
	struct corio__timers *T;
	int ret = owner("corio_timer_cancel", &s, &T);

	if (ret)
		return ret;
	if (!t)
		return corio__error(-EINVAL, "corio_timer_cancel: t is NULL");
	if (!t->slot)
		return -ENOENT;
	if (t->shard != (void *)s)
		return corio__error(-EINVAL, "corio_timer_cancel: the timer belongs to another shard");
	corio__timers_cancel(T, t);
	t->pending = 0;
	corio__wq_wake_all(&t->waiters, -ECANCELED);
	return 0;
}

int corio_timer_wait(struct corio_timer *t)
{
	struct corio_fiber *f = corio__self();

	int ret = corio__may_block("corio_timer_wait"); /* before the count too */

	if (ret)
		return ret;
	if (!t || t->fn)
		return corio__error(-EINVAL, "corio_timer_wait: %s",
				    t ? "the timer has a callback" : "t is NULL");
	if (t->shard && t->shard != (void *)f->shard)
		return corio__error(-EINVAL, "corio_timer_wait: the timer belongs to another shard");
	for (;;) {
		if (t->pending) {
			uint32_t n = t->pending;

			t->pending = 0;
			return n > INT_MAX ? INT_MAX : (int)n;
		}
		if (!t->slot)
			return -ENOENT;
		ret = corio__wq_wait(&t->waiters);
		if (ret)
			return ret; /* expirations, or -ECANCELED / -ETIMEDOUT */
	}
}

int corio_timer_armed(const struct corio_timer *t)
{
	return t && t->slot != 0;
}

uint64_t corio_timer_deadline(const struct corio_timer *t)
{
	return t && t->slot ? t->deadline_ns : 0;
}

/* ---- sleeping ------------------------------------------------------------------------ */

static int sleep_until(const char *who, uint64_t deadline_ns)
{
	struct corio_timer t;
	int ret = corio__may_block(who);

	if (ret)
		return ret;
	corio_timer_init(&t, NULL, NULL);
	ret = corio_timer_arm(&t, deadline_ns, 0);
	if (ret)
		return ret;
	ret = corio_timer_wait(&t);
	if (ret < 0) {
		corio_timer_cancel(&t); /* -ENOENT if it fired meanwhile: fine */
		return ret;
	}
	return 0;
}

int corio_sleep_until(uint64_t deadline_ns)
{
	return sleep_until("corio_sleep_until", deadline_ns);
}

int corio_sleep_ns(uint64_t ns)
{
	return sleep_until("corio_sleep_ns", sat_from_now(ns));
}

/* ---- a timer as a select item ----------------------------------------------------------- */

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
