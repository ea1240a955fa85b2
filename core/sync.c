/* SPDX-License-Identifier: MIT */
/*
 * core/sync.c - shard-local synchronisation for fibers: event, wait group,
 * semaphore, mutex, bounded channel. All users run on one thread, so there
 * are no atomics: a wait queue and a counter each.
 *
 * Hand-off rule: a semaphore release or a mutex unlock with waiters hands the
 * permit straight to the first waiter (no barging), so a woken waiter never
 * has to re-check. Events, wait groups and channels wake waiters that then
 * re-check their condition.
 *
 * Every blocking call here asks corio__may_block() first, before it looks
 * at its object: a cancelled fiber, or one past its deadline scope, gets
 * -ECANCELED / -ETIMEDOUT even when the event is set or a permit is free
 * (corio.h's rule), so a worker kept fed still sees its cancellation.
 */
#include "core/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- event ------------------------------------------------------------------ */

void corio_event_init(struct corio_event *ev)
{
	memset(ev, 0, sizeof(*ev));
}

void corio_event_set(struct corio_event *ev)
{
	ev->set = 1;
	corio__wq_wake_all(&ev->wq, 0);
}

void corio_event_reset(struct corio_event *ev)
{
	ev->set = 0;
}

int corio_event_wait(struct corio_event *ev)
{
	int ret = corio__may_block("corio_event_wait");

	if (ret)
		return ret;
	while (!ev->set) {
		ret = corio__wq_wait(&ev->wq);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* ---- wait group ---------------------------------------------------------------- */

void corio_wg_init(struct corio_wg *wg)
{
	memset(wg, 0, sizeof(*wg));
}

static void wg_add(const char *who, struct corio_wg *wg, long n)
{
	wg->count += n;
	if (CORIO__UNLIKELY(wg->count < 0)) {
		(void)corio__misuse(0, who, "the count would drop below zero (%ld); it stays at 0",
				    wg->count);
		wg->count = 0;
	}
	if (wg->count == 0)
		corio__wq_wake_all(&wg->wq, 0);
}

void corio_wg_add(struct corio_wg *wg, long n)
{
	wg_add("corio_wg_add", wg, n);
}

void corio_wg_done(struct corio_wg *wg)
{
	wg_add("corio_wg_done", wg, -1);
}

int corio_wg_wait(struct corio_wg *wg)
{
	int ret = corio__may_block("corio_wg_wait");

	if (ret)
		return ret;
	while (wg->count > 0) {
		ret = corio__wq_wait(&wg->wq);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* ---- semaphore -------------------------------------------------------------------- */

void corio_sem_init(struct corio_sem *s, long count)
{
	memset(s, 0, sizeof(*s));
	s->count = count;
}

int corio_sem_try_acquire(struct corio_sem *s)
{
	if (s->count > 0 && !s->wq.head) {
		s->count--;
		return 0;
	}
	return -EAGAIN;
}

int corio_sem_acquire(struct corio_sem *s)
{
	int ret = corio__may_block("corio_sem_acquire");

	if (ret)
		return ret;
	if (corio_sem_try_acquire(s) == 0)
		return 0;
	/* Woken with 0 only by a release that handed us its permit. */
	return corio__wq_wait(&s->wq);
}

void corio_sem_release(struct corio_sem *s)
{
	if (!corio__wq_wake_one(&s->wq, 0))
		s->count++;
}

/* ---- mutex ------------------------------------------------------------------------- */

void corio_mutex_init(struct corio_mutex *m)
{
	memset(m, 0, sizeof(*m));
}

int corio_mutex_trylock(struct corio_mutex *m)
{
	struct corio_fiber *self = corio__self();

	if (!self)
		return corio__misuse(-EPERM, "corio_mutex_trylock", "%s", corio__not_fiber_why());
	if (m->owner)
		return -EBUSY;
	m->owner = self;
	return 0;
}

int corio_mutex_lock(struct corio_mutex *m)
{
	struct corio_fiber *self = corio__self();
	int ret = corio__may_block("corio_mutex_lock");

	if (ret)
		return ret;
	if (!m->owner) {
		m->owner = self;
		return 0;
	}
	if (m->owner == self)
		return -EDEADLK;
	ret = corio__wq_wait(&m->wq);
	if (ret == 0)
		assert(m->owner == self); /* handed over by unlock */
	return ret;
}

void corio_mutex_unlock(struct corio_mutex *m)
{
	struct corio_fiber *next;

	if (CORIO__UNLIKELY(m->owner != corio__self() || !m->owner)) {
		(void)corio__misuse(0, "corio_mutex_unlock", "%s; the mutex is left as it was",
				    m->owner ? "the caller does not own the mutex"
					     : "the mutex is not locked");
		return;
	}
	next = corio__wq_wake_one(&m->wq, 0);
	m->owner = next;
}

/* ---- channel ------------------------------------------------------------------------- */

int corio_chan_init(struct corio_chan *c, size_t esize, size_t cap)
{
	memset(c, 0, sizeof(*c));
	if (!esize || !cap || cap > SIZE_MAX / esize)
		return corio__error(-EINVAL, "corio_chan_init: need esize >= 1 and cap >= 1 (got %zu, %zu)",
				    esize, cap);
	c->buf = malloc(esize * cap);
	if (!c->buf)
		return -ENOMEM;
	c->esize = esize;
	c->cap = cap;
	return 0;
}

void corio_chan_destroy(struct corio_chan *c)
{
	if (CORIO__UNLIKELY(c->recvq.head || c->sendq.head)) {
		/* Release builds: the waiters wake to a closed, empty channel
		 * (-EPIPE) and never touch the buffer freed below; c itself
		 * must stay valid until they have run. */
		(void)corio__misuse(0, "corio_chan_destroy", "fibers are still waiting on the "
				       "channel; they get -EPIPE");
		c->len = 0;
		corio_chan_close(c);
	}
	free(c->buf);
	c->buf = NULL;
}

int corio_chan_try_send(struct corio_chan *c, const void *elem)
{
	if (c->closed)
		return -EPIPE;
	if (c->len == c->cap)
		return -EAGAIN;
	memcpy(c->buf + ((c->head + c->len) % c->cap) * c->esize, elem, c->esize);
	c->len++;
	corio__wq_wake_one(&c->recvq, 0);
	return 0;
}

int corio_chan_try_recv(struct corio_chan *c, void *elem)
{
	if (!c->len)
		return c->closed ? -EPIPE : -EAGAIN;
	memcpy(elem, c->buf + c->head * c->esize, c->esize);
	c->head = (c->head + 1) % c->cap;
	c->len--;
	corio__wq_wake_one(&c->sendq, 0);
	return 0;
}

int corio_chan_send(struct corio_chan *c, const void *elem)
{
	int ret = corio__may_block("corio_chan_send");

	while (ret == 0) {
		ret = corio_chan_try_send(c, elem);
		if (ret != -EAGAIN)
			return ret;
		ret = corio__wq_wait(&c->sendq);
	}
	return ret;
}

int corio_chan_recv(struct corio_chan *c, void *elem)
{
	int ret = corio__may_block("corio_chan_recv");

	while (ret == 0) {
		ret = corio_chan_try_recv(c, elem);
		if (ret != -EAGAIN)
			return ret;
		ret = corio__wq_wait(&c->recvq);
	}
	return ret;
}

void corio_chan_close(struct corio_chan *c)
{
	c->closed = 1;
	corio__wq_wake_all(&c->recvq, 0);
	corio__wq_wake_all(&c->sendq, 0);
}
