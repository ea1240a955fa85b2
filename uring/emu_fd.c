/* SPDX-License-Identifier: MIT */
/*
 * uring/emu_fd.c - the ring emulator's fd records: an op that would block
 * parks on its fd's record, which waits for readiness from the emulator's
 * one epoll instance (edge-triggered, registered when the record goes from
 * no ops to waiting); an edge marks the record ready and its ops whose
 * direction the edge concerns are retried (emu.c's opening comment has the
 * whole story, and why a record may outlive its file).
 */
#include "uring/emu.h"

#include <errno.h>
#include <poll.h>

void corio__emu_ready_add(struct corio__emu *e, struct emu_fd *f)
{
	if (f->on_ready)
		return;
	f->on_ready = true;
	f->rnext = NULL;
	if (e->ready_tail)
		e->ready_tail->rnext = f;
	else
		e->ready_head = f;
	e->ready_tail = f;
}

/* The record goes from no ops to waiting: (re-)register it. Its file may be
 * new behind an old number, so its ready bits start over and the kernel
 * reports the current state as an edge. */
static int fd_watch(struct corio__emu *e, struct emu_fd *f)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
				  .data.ptr = f };
	int ret;

	f->ready = 0;
	f->nonblock = false;
	ret = epoll_ctl(e->epfd, f->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, f->fd, &ev);
	if (ret < 0 && errno == ENOENT)
		ret = epoll_ctl(e->epfd, EPOLL_CTL_ADD, f->fd, &ev);
	else if (ret < 0 && errno == EEXIST)
		ret = epoll_ctl(e->epfd, EPOLL_CTL_MOD, f->fd, &ev);
	if (ret < 0)
		return -errno; /* EPERM: not pollable (a regular file); EBADF */
	f->registered = true;
	return 0;
}

/*
 * o is to wait beside ops that are waiting already, on a registration made
 * when the first of them parked. If the number was closed since, epoll
 * dropped that registration with the file (silently: no event says so),
 * and a new file behind the same number would never report an edge: a
 * corio_poll of it waited for its deadline with the data there. So ask:
 * EPOLL_CTL_MOD fails with ENOENT when the file behind the number is not
 * the one registered (an epoll registration is the pair file, number),
 * and with EBADF when the number is closed. Then the ops waiting belong
 * to the old file. On io_uring each would keep waiting on it (the op holds
 * the file) until its deadline or cancel; here they are marked stale and
 * wait for those alone, never retried against the new file, whose state
 * is not theirs to report. True: the record must register afresh.
 *
 * One epoll_ctl per op that parks beside others (a send beside a parked
 * receive, net/'s hang-up poll beside its multishot receive); a MOD of a
 * live registration also re-reports the file's state as an edge, which at
 * worst retries the record's ops once.
 */
static bool fd_moved(struct corio__emu *e, struct emu_fd *f)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
				  .data.ptr = f };

	if (!f->registered)
		return true; /* a file found here before was refused by epoll: try again */
	if (epoll_ctl(e->epfd, EPOLL_CTL_MOD, f->fd, &ev) == 0 ||
	    (errno != ENOENT && errno != EBADF))
		return false;
	for (struct emu_op *o = f->head; o; o = o->next)
		o->events = 0; /* stale: no edge retries it */
	f->registered = false;
	return true;
}

/* False when o could not wait and was completed instead. */
bool corio__emu_park(struct corio__ring *r, struct emu_op *o)
{
	struct corio__emu *e = r->em;
	struct emu_fd *f = o->f;
	int ret;

	if (!f->head || fd_moved(e, f)) {
		ret = fd_watch(e, f);
		if (ret < 0) {
			/* Not pollable: a regular file is always ready (poll(2)
			 * says so); anything else cannot wait here. */
			if (o->readiness && ret == -EPERM) {
				corio__emu_finish(r, o, (int32_t)(o->events & (POLLIN | POLLOUT | POLLRDNORM |
								    POLLWRNORM)), 0);
				return false;
			}
			corio__emu_finish(r, o, ret == -EPERM ? -EAGAIN : ret, 0);
			return false;
		}
	}
	if (corio__emu_ud_add(e, o)) {
		corio__emu_finish(r, o, -ENOMEM, 0);
		return false;
	}
	o->next = NULL;
	if (f->tail)
		f->tail->next = o;
	else
		f->head = o;
	f->tail = o;
	o->parked = true;
	e->parked++;
	return true;
}

void corio__emu_unpark(struct corio__emu *e, struct emu_op *o)
{
	struct emu_fd *f = o->f;
	struct emu_op **pp = &f->head, *prev = NULL;

	for (; *pp != o; pp = &(*pp)->next)
		prev = *pp;
	*pp = o->next;
	if (f->tail == o)
		f->tail = prev;
	corio__emu_ud_del(e, o);
	o->parked = false;
	e->parked--;
}

/* Handle the outcome of a try of a parked op, T_AGAIN aside (its caller's):
 * true if it spent its budget with work left (the record stays ready). */
static bool settle(struct corio__ring *r, struct emu_op *o, int res, uint32_t flags)
{
	if (res == T_MORE)
		return true;
	if (o->readiness && o->mshot) {
		corio__emu_post(r, o->user_data, res, IORING_CQE_F_MORE);
		return false;
	}
	corio__emu_unpark(r->em, o);
	if (res == T_DONE)
		corio__emu_op_put(r->em, o); /* the multishot's final CQE is posted already */
	else
		corio__emu_finish(r, o, res, flags);
	return false;
}

/* Retry the ops of f that its ready bits concern (inline in both loops:
 * the harvest's is every message's path). */
static inline __attribute__((always_inline)) void process_fd(struct corio__ring *r, struct emu_fd *f)
{
	bool more = false;

	for (struct emu_op *o = f->head, *next; o; o = next) {
		uint32_t flags;
		int res;

		next = o->next;
		if (!(f->ready & o->events))
			continue; /* not its direction, or stale (no events) */
		if (LIKELY(o->try == corio__emu_try_recv_mshot)) {
			/* the multishot receive, every message's: inline. Its
			 * T_AGAIN (every message's end) says the stream is
			 * drained: the input bit was stale (it is an EV_IN op
			 * that moves data) */
			res = corio__emu_recv_mshot(r, o);
			if (res == T_AGAIN) {
				f->ready &= ~EPOLLIN;
				continue;
			}
			flags = 0; /* it posts its own CQEs */
		} else {
			flags = 0; /* a try sets only the flags it posts with */
			res = o->try(r, o, &flags);
			if (res == T_AGAIN) {
				/* would block: the direction's bit was stale
				 * (a readiness op's T_AGAIN clears none) */
				if (!o->readiness)
					f->ready &= ~(o->events == EV_OUT ? EPOLLOUT : EPOLLIN);
				continue;
			}
		}
		more |= settle(r, o, res, flags);
	}
	if (more && f->head)
		corio__emu_ready_add(r->em, f);
}

void corio__emu_process_ready(struct corio__ring *r)
{
	struct corio__emu *e = r->em;
	struct emu_fd *f = e->ready_head, *end = e->ready_tail;

	/* One pass over what is queued now; records re-queued by this pass
	 * wait for the next one. */
	e->ready_head = e->ready_tail = NULL;
	while (f) {
		struct emu_fd *next = f == end ? NULL : f->rnext;

		f->on_ready = false;
		process_fd(r, f);
		f = next;
	}
}

/* ---- the wait ----------------------------------------------------------------------- */

static inline int epoll_wait_ms(struct corio__emu *e, int64_t ns)
{
	int n = (int)corio__nc_epoll_wait(e->epfd, e->evs, NEVENTS,
					  ns < 0 ? -1 : (int)((ns + 999999) / 1000000));

	return n < 0 ? -errno : n;
}

/* The wait: ns < 0 none (the common case takes no timespec). */
static inline int epoll_wait_ns(struct corio__emu *e, int64_t ns)
{
	struct __kernel_timespec ts;
	int n;

	if (UNLIKELY(e->no_pwait2))
		return epoll_wait_ms(e, ns);
	if (ns >= 0)
		ts = (struct __kernel_timespec){ ns / 1000000000, ns % 1000000000 };
	n = (int)corio__nc_epoll_pwait2(e->epfd, e->evs, NEVENTS, ns < 0 ? NULL : &ts);
	if (LIKELY(n >= 0))
		return n;
	if (errno != ENOSYS)
		return -errno;
	e->no_pwait2 = true; /* before 5.11: milliseconds, rounded up */
	return epoll_wait_ms(e, ns);
}

int corio__emu_epoll_wait(struct corio__emu *e, int64_t ns)
{
	return epoll_wait_ns(e, ns);
}

static inline __attribute__((always_inline)) void harvest(struct corio__ring *r, int n)
{
	struct corio__emu *e = r->em;

	/*
	 * Each record is retried as its event is read, not queued for a pass
	 * after the loop: nothing an op does touches another record. A
	 * record queued already (its multishot budget spent) gets the bits
	 * and keeps its place, for the next enter's pass (one pass each).
	 * data.ptr is the record: records go back to their pool, never to
	 * the heap, before exit, so an event of a registration that outlived
	 * its record's file (a file still open elsewhere) points at a record
	 * that is idle (skipped) or serves another fd (its ops retried once,
	 * for an EAGAIN), as a look-up by the old number would.
	 */
	for (int i = 0; i < n; i++) {
		struct emu_fd *f = e->evs[i].data.ptr;

		if (!f->head)
			continue; /* idle: re-registered (and re-read) when it waits again */
		f->ready |= corio__fault_events(r, e->evs[i].events);
		if (!f->on_ready)
			process_fd(r, f);
	}
	/* Looked just now; when exactly is asked only if a busy turn wants
	 * it (corio__emu_poll_due), not paid here on every wake-up. */
	e->last_harvest = 0;
}

void corio__emu_harvest(struct corio__ring *r, int n)
{
	harvest(r, n);
}

/* The plain wait's loop, inline in both callers below: -errno (-EINTR),
 * 0 when a CQE is posted or a record queued, 1 when neither but a timeout
 * or retry is armed (by the harvest). The test for the common end (a CQE
 * and no record queued, nor flagged) first: then no flag needs syncing. */
static inline __attribute__((always_inline)) int wait_plain(struct corio__ring *r)
{
	struct corio__emu *e = r->em;

	for (;;) {
		int n = epoll_wait_ns(e, -1);

		if (UNLIKELY(n < 0))
			return n;
		harvest(r, n);
		if (LIKELY(corio__emu_cq_ready(e) && !e->ready_head &&
			   !(e->sq_flags & IORING_SQ_TASKRUN)))
			return 0;
		if (corio__emu_cq_ready(e) || e->ready_head) {
			corio__emu_sync_taskrun(e);
			return 0;
		}
		if (e->timeouts || e->retry)
			return 1;
	}
}

int corio__emu_wait_plain(struct corio__ring *r)
{
	int ret = wait_plain(r);

	return ret < 0 ? ret : 0;
}

int corio__emu_wait_enter(struct corio__ring *r)
{
	int ret = wait_plain(r); /* -EINTR: nothing queued */

	if (UNLIKELY(ret > 0)) /* a timeout or retry armed by the harvest: the full enter */
		ret = corio__emu_enter(r, 1, false, NULL);
	CORIO__RCNT_ADD(r->cnt.enters, 1);
	return ret;
}

/* ---- connects with no edge to wait for ------------------------------------------------- */

/*
 * A Unix connect answers EAGAIN while the listener's backlog is full, and
 * no edge comes when it drains: the wake-up goes to the listener's queue,
 * not to the connecting socket (io_uring connects from a worker that
 * blocks). Such records are retried every RETRY_NS: a bounded poll that
 * lasts only while a backlog overflows.
 */
void corio__emu_retry_later(struct corio__emu *e, struct emu_fd *f)
{
	if (f->retry)
		return;
	if (!e->retry)
		e->retry_at = mono_ns(CLOCK_MONOTONIC) + RETRY_NS;
	f->retry = true;
	f->xnext = e->retry;
	e->retry = f;
}

void corio__emu_fire_retries(struct corio__emu *e, uint64_t now)
{
	struct emu_fd *f = e->retry;

	if (!f || now < e->retry_at)
		return;
	e->retry = NULL;
	for (struct emu_fd *nx; f; f = nx) {
		nx = f->xnext;
		f->retry = false;
		f->ready |= EPOLLOUT;
		corio__emu_ready_add(e, f);
	}
}
