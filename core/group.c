/* SPDX-License-Identifier: MIT */
/*
 * core/group.c - fiber groups: fibers spawned into a group, waited for as
 * one, with the first error remembered and, optionally, the rest cancelled.
 *
 * Members are ordinary detached fibers with f->group set. Every way a fiber
 * ends - it returned, called corio_exit(), was cancelled before it ever
 * ran, had no memory for a stack - goes through corio__fiber_reap(), which
 * calls corio__group_exit() on the scheduler's stack before the fiber is
 * freed: that is where the status is stored, the first error recorded, the
 * others cancelled, and the waiters woken when the last member is gone.
 * So the group needs no record per member and no allocation of its own.
 *
 * No fiber left behind: corio_group_wait() never returns while a member
 * lives. When the waiter is cancelled or its deadline passes it cancels the
 * members and then waits for them with its own cancellation ignored
 * (drain()), as corio_group_close() does.
 */
#include "core/internal.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static bool mine(const struct corio_group *g)
{
	return g && corio__tl_shard && g->shard == corio__tl_shard;
}

int corio_group_init(struct corio_group *g, unsigned flags)
{
	if (!corio__tl_shard)
		return corio__misuse(-EPERM, "corio_group_init", "%s", corio__not_fiber_why());
	if (!g)
		return corio__error(-EINVAL, "corio_group_init: g is NULL");
	if (flags & ~CORIO_GROUP_ALL)
		return corio__error(-EINVAL, "corio_group_init: unknown flags 0x%x",
				    flags & ~CORIO_GROUP_ALL);
	memset(g, 0, sizeof(*g));
	g->shard = corio__tl_shard;
	g->flags = flags;
	return 0;
}

static void cancel_members(struct corio_group *g)
{
	g->cancelled = 1;
	/* Cancelling never ends a fiber synchronously (one that never ran is
	 * ended by the loop), so the list stays intact while we walk it. */
	for (struct corio_fiber *m = g->members; m; m = m->grp_next)
		corio__fiber_cancel(m);
}

int corio_group_spawn(struct corio_group *g, int (*fn)(void *), void *arg,
		      const struct corio_spawn_opts *opts, int *status)
{
	struct corio_fiber *f;
	int ret;

	if (!corio__tl_shard)
		return corio__misuse(-EPERM, "corio_group_spawn", "%s", corio__not_fiber_why());
	if (!mine(g) || !fn)
		return corio__error(-EINVAL, "corio_group_spawn: %s",
				    !fn ? "fn is NULL" : g ? "the group belongs to another shard"
							   : "g is NULL");
	if (g->cancelled)
		return -ECANCELED;
	if (g->spawned == INT_MAX)
		return -EOVERFLOW;
	ret = corio_spawn(fn, arg, opts, &f);
	if (ret)
		return ret;
	f->group = g;
	f->grp_status = status;
	f->grp_index = g->spawned++;
	CORIO__DLIST_PUSH(g->members, f, grp_next, grp_prev);
	g->live++;
	corio_detach(f); /* freed when it ends, after corio__group_exit() */
	return (int)f->grp_index;
}

void corio__group_exit(struct corio_fiber *f)
{
	struct corio_group *g = f->group;

	f->group = NULL;
	CORIO__DLIST_DEL(g->members, f, grp_next, grp_prev);
	g->live--;
	if (f->grp_status)
		*f->grp_status = f->status;
	/* A member that ends with -ECANCELED because the group was cancelled
	 * did not fail on its own. */
	if (f->status < 0 && !g->err && !(g->cancelled && f->status == -ECANCELED)) {
		g->err = f->status;
		g->err_index = f->grp_index;
		if (g->flags & CORIO_GROUP_CANCEL_ON_ERROR)
			cancel_members(g);
	}
	if (!g->live)
		corio__wq_wake_all(&g->wq, 0);
}

/* Wait for every member to end, ignoring the caller's cancellation (the
 * members' ends wake it). */
static void drain(struct corio_group *g, struct corio_fiber *self)
{
	corio__nocancel_push(self);
	while (g->live) {
		corio__wq_push(&g->wq, self);
		corio__park();
		corio__wq_del(self); /* woken by something else: leave the queue */
	}
	corio__nocancel_pop(self);
}

static int waitable(const char *who, struct corio_group *g, struct corio_fiber *self)
{
	if (!mine(g))
		return corio__error(-EINVAL, "%s: %s", who,
				    g ? "the group belongs to another shard" : "g is NULL");
	if (self->group == g)
		return -EDEADLK; /* it would wait for itself */
	return 0;
}

int corio_group_wait(struct corio_group *g)
{
	struct corio_fiber *self = corio__self();
	int ret;

	CORIO__REQUIRE_FIBER("corio_group_wait", -EPERM);
	ret = waitable("corio_group_wait", g, self);
	if (ret)
		return ret;
	/* Cancelled or past the deadline: the members are cancelled and
	 * drained as when that happens while waiting (corio.h's rule). */
	ret = corio__may_block("corio_group_wait");
	if (ret) {
		cancel_members(g);
		drain(g, self);
		return ret;
	}
	while (g->live) {
		ret = corio__wq_wait(&g->wq); /* bounded by cancel and deadlines */
		if (ret < 0) {
			cancel_members(g);
			drain(g, self);
			return ret;
		}
	}
	return g->err;
}

int corio_group_close(struct corio_group *g)
{
	struct corio_fiber *self = corio__self();
	int ret;

	CORIO__REQUIRE_FIBER("corio_group_close", -EPERM);
	ret = waitable("corio_group_close", g, self);
	if (ret)
		return ret;
	cancel_members(g);
	drain(g, self);
	return g->err;
}

int corio_group_cancel(struct corio_group *g)
{
	if (!mine(g))
		return corio__error(-EINVAL, "corio_group_cancel: %s",
				    g ? "the group belongs to another shard (or the caller is "
					"not on a shard)" : "g is NULL");
	cancel_members(g);
	return 0;
}

int corio_group_error(const struct corio_group *g, unsigned *index)
{
	if (!g)
		return corio__error(-EINVAL, "corio_group_error: g is NULL");
	if (index && g->err)
		*index = g->err_index;
	return g->err;
}

unsigned corio_group_live(const struct corio_group *g)
{
	return g ? g->live : 0;
}

/* ---- as a select item -------------------------------------------------------- */

static bool group_poll(struct corio_sel *it)
{
	struct corio_group *g = it->obj;

	if (!mine(g)) {
		it->res = -EINVAL;
		return true;
	}
	if (g->live)
		return false;
	it->res = g->err;
	return true;
}

static int group_arm(struct corio_sel *it, struct corio_fiber *p)
{
	corio__wq_push(&((struct corio_group *)it->obj)->wq, p);
	return 0;
}

static void group_disarm(struct corio_sel *it, struct corio_fiber *p)
{
	(void)it;
	corio__wq_del(p);
}

static const struct corio__sel_ops group_ops = {
	.poll = group_poll,
	.arm = group_arm,
	.disarm = group_disarm,
};

void corio_sel_group(struct corio_sel *it, struct corio_group *g)
{
	corio__sel_fill(it, g ? &group_ops : NULL, g, NULL, 0, 0);
}
