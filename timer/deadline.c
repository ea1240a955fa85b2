/* SPDX-License-Identifier: MIT */
/*
 * timer/deadline.c - deadline scopes, and the hook that bounds fiber waits
 * (wait queues) by them. Kernel ops get their linked timeouts in
 * core/ops.c.
 *
 * A fiber's effective deadline is one word, corio_fiber.deadline_ns (0:
 * none). A scope saves the previous value in the caller's struct
 * corio_deadline and installs min(previous, its own); pop restores it. So
 * nesting costs nothing and has no depth limit, and the nearest deadline
 * always wins. dl_depth only lets pop catch scopes closed out of order.
 */
#include "timer/internal.h"

#include <errno.h>

enum { SCOPE_SHIELD = 1u };

static int push(struct corio_deadline *scope, uint64_t deadline_ns, bool shield)
{
	struct corio_fiber *f = corio__self();

	CORIO__REQUIRE_FIBER(-EPERM);
	if (!scope)
		return -EINVAL;
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
	return push(scope, deadline_ns, false);
}

int corio_timeout_push(struct corio_deadline *scope, uint64_t timeout_ns)
{
	uint64_t now = corio_now_ns();

	return push(scope, timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns, false);
}

int corio_deadline_shield(struct corio_deadline *scope)
{
	return push(scope, 0, true);
}

int corio_deadline_pop(struct corio_deadline *scope)
{
	struct corio_fiber *f = corio__self();

	CORIO__REQUIRE_FIBER(-EPERM);
	if (!scope || scope->fiber != f || scope->depth != f->dl_depth || !f->dl_depth) {
		assert(!"corio_deadline_pop: not the innermost scope of this fiber");
		return -EINVAL;
	}
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

/* ---- bounding fiber waits ---------------------------------------------------- */

static void deadline_fire(struct corio_timer *t, void *arg, int res)
{
	struct corio_fiber *f = arg;

	(void)t;
	if (res < 0)
		return; /* shutdown: the fiber is being cancelled anyway */
	if (f->wq) {
		corio__timer_count_timeout(f->shard);
		corio__wq_unpark(f, -ETIMEDOUT);
	}
}

/* A bare park: the waker is whoever knows the fiber (a joinee, a call's
 * reply). The timer is disarmed right after the park returns, on this
 * thread, so while it is armed f is parked here or already queued (then
 * corio__ready() does nothing). */
static void deadline_fire_park(struct corio_timer *t, void *arg, int res)
{
	struct corio_fiber *f = arg;

	(void)t;
	if (res < 0)
		return;
	if (f->state == CORIO__F_PARKED) {
		corio__timer_count_timeout(f->shard);
		corio__ready(f, -ETIMEDOUT);
	}
}

static int arm(struct corio_timer *dt, struct corio_fiber *f, corio_timer_fn fire)
{
	if (corio_now_ns() >= f->deadline_ns) {
		corio__timer_count_timeout(f->shard);
		return -ETIMEDOUT;
	}
	corio_timer_init(dt, fire, f);
	return corio_timer_arm(dt, f->deadline_ns, 0);
}

int corio__deadline_arm(struct corio_timer *dt, struct corio_fiber *f)
{
	return arm(dt, f, deadline_fire);
}

int corio__deadline_arm_park(struct corio_timer *dt, struct corio_fiber *f)
{
	return arm(dt, f, deadline_fire_park);
}

void corio__deadline_disarm(struct corio_timer *dt)
{
	if (dt->slot)
		corio_timer_cancel(dt);
}
