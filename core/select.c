/* SPDX-License-Identifier: MIT */
/*
 * core/select.c - corio_select(): wait for the first of many waitables, and
 * the kinds that live in core/ (channels, events, wait groups, fiber exit,
 * deadlines). Sockets (net/sel.c), timers (core/timer.c) and groups
 * (core/group.c) bring their own kinds through struct corio__sel_ops.
 *
 * How a fiber waits on n things. A fiber can be on one wait queue at a time
 * (the queue links live in struct corio_fiber), so for each item the
 * select takes a stand-in record (a "proxy": a struct corio_fiber from the
 * shard's fiber pool that never runs) and puts that on the item's queue.
 * Whatever wakes the queue - corio__wq_wake_one/all, a timer, a fiber's
 * end - ends in corio__ready(proxy), which calls proxy_wake() instead of
 * queueing: it notes the wake-up in the proxy and readies the selecting
 * fiber once. So no waitable needed to learn about select.
 *
 * One call:
 *  1. poll every item in index order; the first that can complete does
 *     (it takes its element / bytes / expirations) and wins;
 *  2. otherwise arm a proxy on every item, and one heap timer for the
 *     earliest deadline item or the fiber's deadline scope; park;
 *  3. on wake-up take every proxy off (disarm puts back what a wake-up
 *     carried: a timer's expiration count), poll again in index order, and
 *     let each woken item hand on a wake-up it did not use (a channel's
 *     wake_one picked our proxy over another waiter: that waiter must not
 *     sleep through it);
 *  4. no winner: cancelled -> -ECANCELED, deadline -> -ETIMEDOUT, else 2.
 * Nothing is taken from an item that does not win, and every proxy is off
 * every queue when the call returns.
 *
 * Cancellation: the selecting fiber parks on no queue and no op, so
 * corio__fiber_cancel() readies it with -ECANCELED (its bare-park case).
 * Kernel work: only socket items start any (the socket's own multishot
 * receive, which the socket owns and finishes: see net/sel.c).
 */
#include "core/internal.h"

#include <errno.h>
#include <string.h>

struct sel_ctx {
	struct corio_fiber *f;
	uint64_t dl;  /* earliest deadline item, 0: none */
	bool parked;  /* f is parked in this select */
	bool woken;   /* f was made ready            */
};

static void sel_wake(struct sel_ctx *ctx)
{
	if (ctx->parked && !ctx->woken) {
		ctx->woken = true;
		corio__ready(ctx->f, 0);
	}
}

static void proxy_wake(struct corio_fiber *p, int res)
{
	struct corio_sel *it = p->arg;

	p->status = 1; /* fired: see corio__proxy_fired() */
	p->wake_res = res;
	sel_wake(it->_ctx);
}

static void sel_timer_fire(struct corio_timer *t, void *arg, int res)
{
	(void)t;
	if (res > 0)
		sel_wake(arg);
	/* res < 0: shutdown; the fiber is being cancelled and wakes from that */
}

static inline const struct corio__sel_ops *ops_of(const struct corio_sel *it)
{
	return it->_ops;
}

static int check_items(const char *who, const struct corio_sel *items, size_t n)
{
	if (!items || !n || n > INT32_MAX)
		return corio__error(-EINVAL, "%s: no items", who);
	for (size_t i = 0; i < n; i++)
		if (!items[i]._ops)
			return corio__error(-EINVAL, "%s: item %zu not filled, or filled "
						     "with a NULL object",
					    who, i);
	return 0;
}

static int poll_all(struct corio_sel *items, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ops_of(&items[i])->poll(&items[i]))
			return (int)i;
	return -EAGAIN;
}

int corio_select_try(struct corio_sel *items, size_t n)
{
	int ret;

	if (!corio__tl_shard)
		return corio__misuse(-EPERM, "corio_select_try", "%s", corio__not_fiber_why());
	ret = check_items("corio_select_try", items, n);
	return ret ? ret : poll_all(items, n);
}

/*
 * Steps 2 and 3 up to the poll: arm proxies on items[0..n), park, take them
 * off. Returns the number of items armed (whose proxies the caller releases)
 * in *armed, and an item index >= 0 when arming that item failed (it won,
 * with the error in res), -ENOMEM, another -errno from arming the timer, or
 * -EAGAIN after a wake-up.
 */
static int wait_round(struct corio_fiber *f, struct corio_sel *items, size_t n, size_t *armed)
{
	struct corio__shard *s = f->shard;
	struct sel_ctx ctx = { .f = f };
	struct corio_timer tm;
	bool timed = false;
	uint64_t dl;
	int ret = -EAGAIN;
	size_t i;

	for (i = 0; i < n; i++) {
		struct corio_sel *it = &items[i];
		struct corio_fiber *p = corio__proxy_get(s, proxy_wake, it);
		int r;

		if (!p) {
			ret = -ENOMEM;
			break;
		}
		it->_ctx = &ctx;
		it->_proxy = p;
		r = ops_of(it)->arm(it, p);
		if (r < 0) {
			it->res = r;
			ret = (int)i;
			i++;
			break;
		}
	}
	*armed = i;
	if (ret == -EAGAIN) {
		dl = ctx.dl;
		if (f->deadline_ns && (!dl || f->deadline_ns < dl))
			dl = f->deadline_ns;
		if (dl) {
			corio_timer_init(&tm, sel_timer_fire, &ctx);
			ret = corio_timer_arm(&tm, dl, 0);
			if (ret)
				goto out; /* -ENOMEM, or -ECANCELED at shutdown */
			timed = true;
			ret = -EAGAIN;
		}
		ctx.parked = true;
		corio__park();
		ctx.parked = false;
		if (timed)
			corio_timer_cancel(&tm); /* -ENOENT once it fired: fine */
	}
out:
	for (i = 0; i < *armed; i++)
		ops_of(&items[i])->disarm(&items[i], items[i]._proxy);
	return ret;
}

/* Step 3's end: hand on unused wake-ups, give the proxies back. */
static void release(struct corio__shard *s, struct corio_sel *items, size_t armed)
{
	for (size_t i = 0; i < armed; i++) {
		struct corio_sel *it = &items[i];
		struct corio_fiber *p = it->_proxy;

		if (corio__proxy_fired(p) && ops_of(it)->pass_on)
			ops_of(it)->pass_on(it);
		it->_proxy = NULL;
		it->_ctx = NULL;
		corio__proxy_put(s, p);
	}
}

static int stop_reason(struct corio_fiber *f)
{
	if (f->flags & CORIO__FF_CANCELLED)
		return -ECANCELED;
	if (corio__deadline_passed(f))
		return -ETIMEDOUT;
	return 0;
}

int corio_select(struct corio_sel *items, size_t n)
{
	struct corio_fiber *f = corio__self();
	int ret;

	CORIO__REQUIRE_FIBER("corio_select", -EPERM);
	ret = check_items("corio_select", items, n);
	if (ret)
		return ret;
	ret = stop_reason(f);
	if (ret)
		return ret;
	ret = poll_all(items, n);
	while (ret < 0) {
		size_t armed = 0;
		int r = wait_round(f, items, n, &armed);

		ret = r >= 0 ? r : poll_all(items, n);
		release(f->shard, items, armed);
		if (ret >= 0)
			break;
		if (r != -EAGAIN)
			return r;
		ret = stop_reason(f);
		if (ret)
			return ret;
		ret = -EAGAIN;
	}
	return ret;
}

/* ---- channels ------------------------------------------------------------ */

static bool chan_recv_poll(struct corio_sel *it)
{
	int r = corio_chan_try_recv(it->obj, it->buf);

	if (r == -EAGAIN)
		return false;
	it->res = r;
	return true;
}

static int chan_recv_arm(struct corio_sel *it, struct corio_fiber *p)
{
	corio__wq_push(&((struct corio_chan *)it->obj)->recvq, p);
	return 0;
}

static void del_proxy(struct corio_sel *it, struct corio_fiber *p)
{
	(void)it;
	corio__wq_del(p);
}

static void chan_recv_pass_on(struct corio_sel *it)
{
	struct corio_chan *c = it->obj;

	if (c->len)
		corio__wq_wake_one(&c->recvq, 0);
}

static const struct corio__sel_ops chan_recv_ops = {
	.poll = chan_recv_poll,
	.arm = chan_recv_arm,
	.disarm = del_proxy,
	.pass_on = chan_recv_pass_on,
};

void corio_sel_chan_recv(struct corio_sel *it, struct corio_chan *c, void *elem)
{
	corio__sel_fill(it, c && elem ? &chan_recv_ops : NULL, c, elem, 0, 0);
}

static bool chan_send_poll(struct corio_sel *it)
{
	int r = corio_chan_try_send(it->obj, it->buf);

	if (r == -EAGAIN)
		return false;
	it->res = r;
	return true;
}

static int chan_send_arm(struct corio_sel *it, struct corio_fiber *p)
{
	corio__wq_push(&((struct corio_chan *)it->obj)->sendq, p);
	return 0;
}

static void chan_send_pass_on(struct corio_sel *it)
{
	struct corio_chan *c = it->obj;

	if (c->len < c->cap && !c->closed)
		corio__wq_wake_one(&c->sendq, 0);
}

static const struct corio__sel_ops chan_send_ops = {
	.poll = chan_send_poll,
	.arm = chan_send_arm,
	.disarm = del_proxy,
	.pass_on = chan_send_pass_on,
};

void corio_sel_chan_send(struct corio_sel *it, struct corio_chan *c, const void *elem)
{
	corio__sel_fill(it, c && elem ? &chan_send_ops : NULL, c, (void *)elem, 0, 0);
}

/* ---- events and wait groups ---------------------------------------------------- */

static bool event_poll(struct corio_sel *it)
{
	if (!((struct corio_event *)it->obj)->set)
		return false;
	it->res = 0;
	return true;
}

static int event_arm(struct corio_sel *it, struct corio_fiber *p)
{
	corio__wq_push(&((struct corio_event *)it->obj)->wq, p);
	return 0;
}

static const struct corio__sel_ops event_ops = {
	.poll = event_poll,
	.arm = event_arm,
	.disarm = del_proxy, /* set wakes every waiter: nothing to hand on */
};

void corio_sel_event(struct corio_sel *it, struct corio_event *ev)
{
	corio__sel_fill(it, ev ? &event_ops : NULL, ev, NULL, 0, 0);
}

static bool wg_poll(struct corio_sel *it)
{
	if (((struct corio_wg *)it->obj)->count > 0)
		return false;
	it->res = 0;
	return true;
}

static int wg_arm(struct corio_sel *it, struct corio_fiber *p)
{
	corio__wq_push(&((struct corio_wg *)it->obj)->wq, p);
	return 0;
}

static const struct corio__sel_ops wg_ops = {
	.poll = wg_poll,
	.arm = wg_arm,
	.disarm = del_proxy,
};

void corio_sel_wg(struct corio_sel *it, struct corio_wg *wg)
{
	corio__sel_fill(it, wg ? &wg_ops : NULL, wg, NULL, 0, 0);
}

/* ---- fiber exit ------------------------------------------------------------------ */

/* The proxy stands in as the fiber's joiner: its end readies the joiner. */
static bool fiber_poll(struct corio_sel *it)
{
	struct corio_fiber *t = it->obj;

	if (t->shard != corio__tl_shard || (t->flags & CORIO__FF_DETACHED) ||
	    t == corio__self() || t->state == CORIO__F_FREE || t->proxy_wake) {
		it->res = -EINVAL;
		return true;
	}
	if (t->state == CORIO__F_DONE) {
		it->res = t->status;
		return true;
	}
	if (t->joiner) { /* someone is joining it */
		it->res = -EINVAL;
		return true;
	}
	return false;
}

static int fiber_arm(struct corio_sel *it, struct corio_fiber *p)
{
	((struct corio_fiber *)it->obj)->joiner = p;
	return 0;
}

static void fiber_disarm(struct corio_sel *it, struct corio_fiber *p)
{
	struct corio_fiber *t = it->obj;

	if (t->joiner == p)
		t->joiner = NULL;
}

static const struct corio__sel_ops fiber_ops = {
	.poll = fiber_poll,
	.arm = fiber_arm,
	.disarm = fiber_disarm,
};

void corio_sel_fiber(struct corio_sel *it, struct corio_fiber *f)
{
	corio__sel_fill(it, f ? &fiber_ops : NULL, f, NULL, 0, 0);
}

/* ---- deadlines ------------------------------------------------------------------ */

/* No queue: the select's one timer covers the earliest deadline item. */
static bool deadline_poll(struct corio_sel *it)
{
	if (corio_now_ns() < it->ns)
		return false;
	it->res = 0;
	return true;
}

static int deadline_arm(struct corio_sel *it, struct corio_fiber *p)
{
	struct sel_ctx *ctx = it->_ctx;

	(void)p;
	if (!ctx->dl || it->ns < ctx->dl)
		ctx->dl = it->ns;
	return 0;
}

static void deadline_disarm(struct corio_sel *it, struct corio_fiber *p)
{
	(void)it;
	(void)p;
}

static const struct corio__sel_ops deadline_ops = {
	.poll = deadline_poll,
	.arm = deadline_arm,
	.disarm = deadline_disarm,
};

void corio_sel_deadline(struct corio_sel *it, uint64_t deadline_ns)
{
	corio__sel_fill(it, &deadline_ops, NULL, NULL, 0, deadline_ns);
}
