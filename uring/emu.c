/* SPDX-License-Identifier: MIT */
/*
 * uring/emu.c - the ring emulator: the readiness fallback for hosts that
 * refuse io_uring (seccomp profiles, kernel.io_uring_disabled).
 *
 * A ring in emulated mode is a struct io_uring whose SQ and CQ point at
 * plain memory laid out as liburing 2.3 expects (khead, ktail, ring_mask,
 * sqes, cqes, ...), so liburing's inline helpers (io_uring_get_sqe, the
 * io_uring_prep_* family, CQ peeking and advancing, the buffer-ring helpers)
 * work on it unchanged, and so do the ~35 places above uring/ that fill
 * SQEs. Only the syscall paths of uring/ (set-up, enter, probe, buffer-ring
 * registration, exit) branch to this file, on one bool in struct corio__ring.
 *
 * Submit consumes SQEs in order and tries each at once with a non-blocking
 * syscall (recv/send with MSG_DONTWAIT, accept4 and connect on a socket set
 * O_NONBLOCK); a SEND that completes so is answered from its SQE alone,
 * with no op record. An op that would block (EAGAIN) is parked on its fd's
 * record and waits for readiness from one epoll instance, edge-triggered
 * (EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET, registered once per record). Several
 * ops may wait on one fd (a multishot receive, a send, a hang-up poll, a
 * user's corio_poll): they hang on the record in submission order, and a
 * readiness edge retries those whose direction it concerns. The record's
 * ready bits are set by edges and cleared by the EAGAIN of a retry.
 *
 * Fd records live in a hash keyed by fd (no table sized by fd). The layers
 * above close sockets with close(2) outside the ring, after their ops' final
 * CQEs, so a record without ops may describe a closed file, or a new file
 * behind a reused number: when a record goes from no ops to waiting it is
 * re-registered (EPOLL_CTL_MOD, or ADD on ENOENT), its ready bits cleared,
 * and the kernel reports the file's current state as a fresh edge. A user's
 * descriptor may also be closed while an op waits on it (a corio_poll in
 * another fiber): an op that parks beside waiting ops asks with
 * EPOLL_CTL_MOD whether the number still names the registered file, and
 * if not the waiting ops are marked stale (they wait for their deadline or
 * cancel, as io_uring's would on the old file) and the record registers the
 * new file (fd_moved). Nothing depends on being told of a close.
 *
 * What is emulated (what corio submits): NOP, POLL_ADD (one-shot and
 * multishot), RECV (one-shot, multishot, provided buffers, the multishot
 * byte limit), RECVMSG (one-shot, and multishot with provided buffers in the
 * kernel's struct io_uring_recvmsg_out layout), SEND, SENDMSG, ACCEPT (one-
 * shot and multishot), CONNECT, SHUTDOWN, READ on pollable fds (the shard's
 * wake-up eventfd), TIMEOUT (relative or absolute, any of the three clocks),
 * TIMEOUT_REMOVE and its IORING_TIMEOUT_UPDATE, ASYNC_CANCEL by user_data.
 * The probe reports only those; for the rest (linked timeouts, MSG_RING,
 * zero-copy sends, file ops, SOCKET) the layers above take the fallbacks
 * they already have for older kernels. READ is emulated but not reported:
 * fs/ must take its blocking path for regular files.
 *
 * Buffer selection picks a buffer only when the syscall can use it: a
 * receive peeks the head buffer, and the ring's head moves only when data
 * landed in it, so idle sockets pin no buffers. An empty ring ends the
 * receive with -ENOBUFS, as the kernel does. A ring registered with
 * IOU_PBUF_RING_INC is consumed incrementally, as 6.12's kernel does
 * (corio__emu_buf_commit): a receive takes only the bytes it got from the
 * head buffer, which stays at the head for the next while room is left.
 *
 * Fairness: a multishot op posts at most MSHOT_BUDGET CQEs per pass; a
 * record with work left stays on the ready list and IORING_SQ_TASKRUN is
 * raised in the SQ flags, so the loop's reap comes back for it (the same
 * signal the kernel gives for deferred task work). A full CQ never drops:
 * CQEs wait in an overflow list (IORING_SQ_CQ_OVERFLOW) and are posted as
 * room appears (IORING_FEAT_NODROP semantics).
 *
 * Waiting: an enter with wait_nr > 0 blocks in epoll_pwait2 (nanosecond
 * timeouts) until a CQE is posted or the earliest emulated TIMEOUT is due.
 * The shard's thread gets a timer slack of 1 ns at set-up: epoll timeouts
 * are stretched by the thread's slack (50 us by default) where a kernel
 * TIMEOUT's hrtimer is not, and with it every emulated timer woke ~55 us
 * late (bench-timer: p50 56 us against 7 us for a timerfd). The clock is
 * read only where a time is needed (a pending TIMEOUT or retry, a busy
 * turn deciding whether to look at epoll): a plain wait and its harvest read
 * none, where they were two vDSO calls per wake-up.
 *
 * Owner-thread only, like the ring. Allocation happens when pools grow
 * (op records, fd records, the overflow list), never per op in steady state.
 *
 * The files: this one (the memory, pools, hashes, completions, provided
 * buffers, submit, the wait, set-up and exit); emu_ops.c, one table row per
 * opcode and the syscalls behind them; emu_fd.c, fd records and readiness;
 * emu_timeout.c, the timeouts; emu.h, what they share.
 */
#include "uring/emu.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

/* ---- pools ---------------------------------------------------------------------- */

static void *chunk(struct corio__emu *e, size_t bytes)
{
	void **c = calloc(1, sizeof(void *) + bytes);

	if (!c)
		return NULL;
	*c = e->chunks;
	e->chunks = c;
	return c + 1;
}

struct emu_op *corio__emu_op_get(struct corio__emu *e)
{
	struct emu_op *o = e->op_free;

	if (UNLIKELY(!o)) {
		struct emu_op *c = chunk(e, POOL_CHUNK * sizeof(*c));

		if (!c)
			return NULL;
		for (unsigned i = 0; i < POOL_CHUNK; i++) {
			c[i].next = e->op_free;
			e->op_free = &c[i];
		}
		o = e->op_free;
	}
	e->op_free = o->next;
	memset(o, 0, sizeof(*o));
	return o;
}

void corio__emu_op_put(struct corio__emu *e, struct emu_op *o)
{
	o->next = e->op_free;
	e->op_free = o;
}

/* ---- hashes ----------------------------------------------------------------------- */

static unsigned hash64(uint64_t v, unsigned nb)
{
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	return (unsigned)v & (nb - 1);
}

static int grow_fds(struct corio__emu *e)
{
	unsigned n = e->nfd_buckets ? e->nfd_buckets * 2 : 256;
	struct emu_fd **t = calloc(n, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (unsigned i = 0; i < e->nfd_buckets; i++)
		for (struct emu_fd *f = e->fds[i], *nx; f; f = nx) {
			unsigned h = hash64((unsigned)f->fd, n);

			nx = f->hnext;
			f->hnext = t[h];
			t[h] = f;
		}
	free(e->fds);
	e->fds = t;
	e->nfd_buckets = n;
	return 0;
}

static int grow_uds(struct corio__emu *e)
{
	unsigned n = e->nud_buckets ? e->nud_buckets * 2 : 256;
	struct emu_op **t = calloc(n, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (unsigned i = 0; i < e->nud_buckets; i++)
		for (struct emu_op *o = e->uds[i], *nx; o; o = nx) {
			unsigned h = hash64(o->user_data, n);

			nx = o->hnext;
			o->hnext = t[h];
			t[h] = o;
		}
	free(e->uds);
	e->uds = t;
	e->nud_buckets = n;
	return 0;
}

struct emu_fd *corio__emu_fd_find(struct corio__emu *e, int fd)
{
	if (!e->nfd_buckets)
		return NULL;
	for (struct emu_fd *f = e->fds[hash64((unsigned)fd, e->nfd_buckets)]; f; f = f->hnext)
		if (f->fd == fd)
			return f;
	return NULL;
}

struct emu_fd *corio__emu_fd_get(struct corio__emu *e, int fd)
{
	struct emu_fd *f = corio__emu_fd_find(e, fd);
	unsigned h;

	if (f)
		return f;
	if (e->nfds >= e->nfd_buckets && grow_fds(e))
		return NULL;
	f = e->fd_free;
	if (!f) {
		struct emu_fd *c = chunk(e, POOL_CHUNK * sizeof(*c));

		if (!c)
			return NULL;
		for (unsigned i = 0; i < POOL_CHUNK; i++) {
			c[i].hnext = e->fd_free;
			e->fd_free = &c[i];
		}
		f = e->fd_free;
	}
	e->fd_free = f->hnext;
	memset(f, 0, sizeof(*f));
	f->fd = fd;
	h = hash64((unsigned)fd, e->nfd_buckets);
	f->hnext = e->fds[h];
	e->fds[h] = f;
	e->nfds++;
	return f;
}

int corio__emu_ud_add(struct corio__emu *e, struct emu_op *o)
{
	unsigned h;

	if (e->nuds >= e->nud_buckets && grow_uds(e))
		return -ENOMEM;
	h = hash64(o->user_data, e->nud_buckets);
	o->hnext = e->uds[h];
	e->uds[h] = o;
	e->nuds++;
	return 0;
}

void corio__emu_ud_del(struct corio__emu *e, struct emu_op *o)
{
	struct emu_op **pp = &e->uds[hash64(o->user_data, e->nud_buckets)];

	for (; *pp; pp = &(*pp)->hnext)
		if (*pp == o) {
			*pp = o->hnext;
			e->nuds--;
			return;
		}
}

struct emu_op *corio__emu_ud_find(struct corio__emu *e, uint64_t ud)
{
	if (!e->nud_buckets)
		return NULL;
	for (struct emu_op *o = e->uds[hash64(ud, e->nud_buckets)]; o; o = o->hnext)
		if (o->user_data == ud)
			return o;
	return NULL;
}

/* ---- completions ------------------------------------------------------------------- */

void corio__emu_post_ovf(struct corio__ring *r, uint64_t ud, int32_t res, uint32_t flags)
{
	struct corio__emu *e = r->em;
	unsigned head = io_uring_smp_load_acquire(&e->cq_head);

	if (!e->novf && e->cq_tail - head < e->cq_entries) {
		corio__emu_post(r, ud, res, flags); /* room after all */
		return;
	}
	if (e->novf == e->ovf_cap) {
		unsigned cap = e->ovf_cap ? 2 * e->ovf_cap : 64;
		struct io_uring_cqe *p = malloc(cap * sizeof(*p));

		if (!p) {
			/* Nothing sane is left: a lost CQE hangs a fiber. */
			CORIO__RCNT_ADD(r->cnt.cqe_dropped, 1);
			return;
		}
		for (unsigned i = 0; i < e->novf; i++)
			p[i] = e->ovf[(e->ovf_head + i) % e->ovf_cap];
		free(e->ovf);
		e->ovf = p;
		e->ovf_cap = cap;
		e->ovf_head = 0;
	}
	e->ovf[(e->ovf_head + e->novf++) % e->ovf_cap] =
		(struct io_uring_cqe){ .user_data = ud, .res = res, .flags = flags };
	e->cq_room = 0; /* later CQEs queue behind this one */
	corio__emu_set_flag(e, IORING_SQ_CQ_OVERFLOW, true);
}

static void flush_overflow(struct corio__emu *e)
{
	unsigned head = io_uring_smp_load_acquire(&e->cq_head);

	while (e->novf && e->cq_tail - head < e->cq_entries) {
		e->cqes[e->cq_tail & e->cq_mask] = e->ovf[e->ovf_head];
		e->ovf_head = (e->ovf_head + 1) % e->ovf_cap;
		e->novf--;
		io_uring_smp_store_release(&e->cq_tail, e->cq_tail + 1);
	}
	if (!e->novf) {
		e->cq_room = e->cq_entries;
		corio__emu_set_flag(e, IORING_SQ_CQ_OVERFLOW, false);
	}
}

void corio__emu_finish(struct corio__ring *r, struct emu_op *o, int32_t res, uint32_t flags)
{
	corio__emu_post(r, o->user_data, res, flags);
	corio__emu_op_put(r->em, o);
}

/* ---- provided buffers ---------------------------------------------------------------- */

struct emu_bufring *corio__emu_bufring_find(struct corio__emu *e, uint16_t bgid)
{
	for (unsigned i = 0; i < MAX_BUFRINGS; i++)
		if (e->bufs[i].used && e->bufs[i].bgid == bgid)
			return &e->bufs[i];
	return NULL;
}

int corio__emu_register_buf_ring(struct corio__ring *r, const struct io_uring_buf_reg *reg)
{
	struct corio__emu *e = r->em;

	/* reg->pad is io_uring_buf_reg.flags (liburing 2.3's name): of its
	 * flags only incremental consumption is served (IOU_PBUF_RING_MMAP
	 * needs kernel memory). */
	if ((reg->pad & ~IOU_PBUF_RING_INC) || !reg->ring_entries ||
	    (reg->ring_entries & (reg->ring_entries - 1)) || reg->ring_entries > 32768 ||
	    corio__emu_bufring_find(e, reg->bgid))
		return -EINVAL;
	for (unsigned i = 0; i < MAX_BUFRINGS; i++) {
		struct emu_bufring *b = &e->bufs[i];

		if (b->used)
			continue;
		b->br = (struct io_uring_buf_ring *)(uintptr_t)reg->ring_addr;
		b->entries = reg->ring_entries;
		b->mask = reg->ring_entries - 1;
		b->head = 0;
		b->bgid = reg->bgid;
		b->inc = reg->pad & IOU_PBUF_RING_INC;
		b->used = true;
		return 0;
	}
	return -ENOSPC;
}

int corio__emu_unregister_buf_ring(struct corio__ring *r, unsigned bgid)
{
	struct emu_bufring *b = corio__emu_bufring_find(r->em, (uint16_t)bgid);

	if (!b)
		return -EINVAL;
	b->used = false;
	return 0;
}

/* ---- submit --------------------------------------------------------------------------------- */

/* links, drains, fixed files, CQE skipping: never reported, never used */
#define SQE_FLAGS_SERVED (IOSQE_BUFFER_SELECT | IOSQE_ASYNC)

/* Issue one SQE: complete it now, or park it. Its row in corio__emu_ops
 * says how (uring/emu.h). tried: a SEND's corio__emu_send_now() answer
 * (issue() below made it), -1 for any other op. */
static __attribute__((noinline)) void issue_op(struct corio__ring *r,
					       const struct io_uring_sqe *sqe, int tried)
{
	const struct emu_opdef *def = corio__emu_opdef(sqe->opcode);
	struct corio__emu *e = r->em;
	struct emu_op *o;
	uint32_t flags = 0;
	int res;

	if (UNLIKELY(sqe->flags & ~SQE_FLAGS_SERVED)) {
		corio__emu_post(r, sqe->user_data, -EINVAL, 0);
		return;
	}
	if (sqe->opcode != IORING_OP_SEND && def->now && (tried = def->now(r, sqe)) == 1)
		return;
	o = corio__emu_op_get(e);
	if (!o) {
		corio__emu_post(r, sqe->user_data, -ENOMEM, 0);
		return;
	}
	o->user_data = sqe->user_data;
	o->opcode = sqe->opcode;
	if (!def->try) { /* TIMEOUT, started by its prep; or not served */
		res = def->prep ? def->prep(r, o, sqe) : -EINVAL;
		if (res < 0)
			corio__emu_finish(r, o, res, 0);
		return;
	}
	o->fd = sqe->fd;
	o->addr = sqe->addr;
	o->addr2 = sqe->off;
	o->len = sqe->len;
	o->msg_flags = (int32_t)sqe->msg_flags;
	o->bsel = sqe->flags & IOSQE_BUFFER_SELECT;
	o->bgid = sqe->buf_group;
	o->bring = e->bufs;
	o->events = def->events;
	o->mshot = sqe->ioprio & def->mshot_ioprio;
	o->try = def->try;
	o->readiness = def->readiness;
	res = o->mshot && def->mshot_bsel && !o->bsel ? -EINVAL : 0;
	if (!res && def->prep)
		res = def->prep(r, o, sqe);
	if (!res && !(o->f = corio__emu_fd_get(e, o->fd)))
		res = -ENOMEM;
	if (res) {
		corio__emu_finish(r, o, res, 0);
		return;
	}
	/* A poll is answered from the record's bits while it waits on other
	 * ops; otherwise the registration below reports the fd's state. A
	 * send tried already would block: park it. */
	if ((def->readiness && !o->f->head) || tried == 0)
		res = T_AGAIN;
	else
		res = o->try(r, o, &flags);
	if (res == T_AGAIN || res == T_MORE) {
		struct emu_fd *f = o->f;

		if (corio__emu_park(r, o) && res == T_MORE)
			corio__emu_ready_add(e, f);
	} else if (res == T_DONE) {
		corio__emu_op_put(e, o);
	} else if (def->readiness && o->mshot) {
		corio__emu_post(r, o->user_data, res, IORING_CQE_F_MORE);
		corio__emu_park(r, o);
	} else {
		corio__emu_finish(r, o, res, flags);
	}
}

/* A SEND the socket takes at once (every ring-issued send's, at load) is
 * answered here, inline in submit's loop, without the op table's row. */
static inline __attribute__((always_inline)) void issue(struct corio__ring *r,
							 const struct io_uring_sqe *sqe)
{
	int tried = -1;

	if (LIKELY(sqe->opcode == IORING_OP_SEND && !(sqe->flags & ~SQE_FLAGS_SERVED)) &&
	    LIKELY((tried = corio__emu_send_now(r, sqe)) == 1))
		return;
	issue_op(r, sqe, tried);
}

static __attribute__((noinline)) unsigned submit(struct corio__ring *r)
{
	struct corio__emu *e = r->em;
	struct io_uring_sq *sq = &r->ring.sq;
	unsigned n = 0;

	/* Read in place: nothing an issue does takes an SQE (no callback
	 * runs in here), so the slot is not handed out again before the
	 * issue is done with it; the consumed head is published once. */
	while (sq->sqe_head != sq->sqe_tail) {
		issue(r, &sq->sqes[sq->sqe_head & sq->ring_mask]);
		sq->sqe_head++;
		n++;
	}
	if (n) {
		IO_URING_WRITE_ONCE(e->sq_head, sq->sqe_head);
		IO_URING_WRITE_ONCE(e->sq_tail, sq->sqe_head);
	}
	return n;
}

/* ---- enter ------------------------------------------------------------------------------------ */

bool corio__emu_poll_due(const struct corio__ring *r)
{
	struct corio__emu *e = r->em;
	uint64_t now;

	if (!e->parked && !e->timeouts)
		return false;
	now = mono_ns(CLOCK_MONOTONIC);
	if (!e->last_harvest)
		e->last_harvest = now; /* the first busy look since a harvest */
	return (e->parked && now - e->last_harvest >= HARVEST_NS) ||
	       (e->timeouts && e->timeouts->deadline <= now) ||
	       (e->retry && e->retry_at <= now);
}

/* Everything an enter may do, after its submit. */
static __attribute__((noinline)) int enter_full(struct corio__ring *r, unsigned wait_nr, bool poll,
						 const struct __kernel_timespec *limit,
						 unsigned submitted)
{
	struct corio__emu *e = r->em;
	uint64_t until = 0;
	int n;

	if (e->ready_head)
		corio__emu_process_ready(r);
	corio__emu_fire_timeouts(r);
	if (UNLIKELY(e->novf))
		flush_overflow(e);
	/* Look at epoll when asked, or when a busy turn is due for a look. A
	 * wait that the submit satisfied at once (an op that completes on
	 * the spot) is a busy turn too: it used to skip the look, so a fiber
	 * whose every op completed at once kept every parked op of the shard
	 * from being served (backend::ops_that_complete_at_once_...). */
	if (poll || ((!wait_nr || io_uring_cq_ready(&r->ring) || e->ready_head) &&
		     corio__emu_poll_due(r))) {
		n = corio__emu_epoll_wait(e, 0);
		if (n >= 0) /* 0 events is a look too (else every busy turn polls) */
			corio__emu_harvest(r, n);
		corio__emu_fire_timeouts(r);
	}
	if (limit)
		until = mono_ns(CLOCK_MONOTONIC) + (uint64_t)limit->tv_sec * 1000000000ull +
			(uint64_t)limit->tv_nsec;
	while (wait_nr && io_uring_cq_ready(&r->ring) < 1 && !e->ready_head) {
		/* no clock read when nothing is timed (the common wait) */
		uint64_t now = e->timeouts || e->retry || until ? mono_ns(CLOCK_MONOTONIC) : 0;
		int64_t ns = -1;

		if (e->timeouts)
			ns = e->timeouts->deadline > now ? (int64_t)(e->timeouts->deadline - now) : 0;
		if (e->retry) {
			int64_t r_ns = e->retry_at > now ? (int64_t)(e->retry_at - now) : 0;

			if (ns < 0 || r_ns < ns)
				ns = r_ns;
		}
		if (until) {
			int64_t left = until > now ? (int64_t)(until - now) : 0;

			if (ns < 0 || left < ns)
				ns = left;
		}
		n = corio__emu_epoll_wait(e, ns);
		if (n < 0) {
			corio__emu_sync_taskrun(e);
			return submitted ? (int)submitted : n; /* -EINTR */
		}
		corio__emu_harvest(r, n);
		corio__emu_fire_timeouts(r);
		if (until && mono_ns(CLOCK_MONOTONIC) >= until)
			break;
	}
	corio__emu_sync_taskrun(e);
	return (int)submitted;
}

static inline __attribute__((always_inline)) int enter(struct corio__ring *r, unsigned wait_nr,
							bool poll,
							const struct __kernel_timespec *limit)
{
	struct corio__emu *e = r->em;
	unsigned submitted = 0;

	if (r->ring.sq.sqe_head != r->ring.sq.sqe_tail)
		submitted = submit(r);
	/*
	 * The plain wait, every message's at low load: nothing queued, timed
	 * or overflowed, no look asked for, the CQ empty. enter_full's steps
	 * before its wait loop do nothing then, and this is its loop with no
	 * timeout; anything else (a retry armed by a connect tried in the
	 * harvest) goes on there.
	 */
	if (LIKELY(wait_nr && !poll && !limit) &&
	    LIKELY(!e->ready_head && !e->novf && !e->timeouts && !e->retry) &&
	    !corio__emu_cq_ready(e)) {
		int n = corio__emu_wait_plain(r);

		if (UNLIKELY(n < 0))
			return submitted ? (int)submitted : n; /* -EINTR; nothing queued */
		if (LIKELY(corio__emu_cq_ready(e) || e->ready_head)) {
			corio__emu_sync_taskrun(e);
			return (int)submitted;
		}
	}
	return enter_full(r, wait_nr, poll, limit, submitted);
}

int corio__emu_enter(struct corio__ring *r, unsigned wait_nr, bool poll,
		     const struct __kernel_timespec *limit)
{
	return enter(r, wait_nr, poll, limit);
}

/*
 * The loop's enter (corio__ring_enter tests r->emu first and comes to
 * corio__emu_ring_enter below, which comes here unless the plain wait):
 * its steps as ring.c takes them for io_uring (the stash, the fault hooks,
 * nothing to do, the counters, -EBADR), around the enter above inlined
 * with no limit, so that every message's wait at low load is one frame
 * short of what it was, and builds no timespec for valgrind's slices.
 * ring.c's version is the reference: change both together.
 */
static __attribute__((noinline)) int ring_enter_full(struct corio__ring *r, unsigned wait_nr)
{
	unsigned pending;
	int ret;

	if (r->nstash)
		wait_nr = 0; /* completions are waiting in the stash already */
	pending = io_uring_sq_ready(&r->ring);
	if ((pending || wait_nr) && (ret = corio__fault_enter(r, false)) < 0)
		return ret; /* test builds: the kernel "refused" (uring/fault.h) */
	if (!wait_nr && !pending && !corio__ring_needs_enter(r))
		return 0;
	if (UNLIKELY(r->under_valgrind)) {
		/* valgrind: sliced waits (ring.c says why) */
		struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 1000000 };

		ret = corio__emu_enter(r, wait_nr, false, &ts);
		if (wait_nr)
			sched_yield();
	} else {
		ret = enter(r, wait_nr, false, NULL);
	}
	CORIO__RCNT_ADD(r->cnt.enters, 1);
	if (UNLIKELY(r->fault_ebadr) && wait_nr) {
		r->fault_ebadr = false;
		ret = -EBADR;
	}
	if (UNLIKELY(ret < 0))
		return corio__ring_check(r, ret, "io_uring_enter");
	if (ret > 0)
		CORIO__RCNT_ADD(r->cnt.sqes, (unsigned)ret);
	return ret;
}

int corio__emu_ring_enter(struct corio__ring *r, unsigned wait_nr)
{
	struct corio__emu *e = r->em;

	/*
	 * The plain wait with nothing to submit (every message's at one
	 * connection, where the send went out directly): ring_enter_full's
	 * steps reduce to the fault hooks and corio__emu_wait_enter, which
	 * counts the enter itself. Tested here with no frame built: two
	 * tail calls.
	 */
	corio__fault_sq(r);
	if (LIKELY(wait_nr && !r->nstash && r->ring.sq.sqe_head == r->ring.sq.sqe_tail) &&
	    LIKELY(!r->under_valgrind && !r->fault_ebadr) &&
	    LIKELY(!e->ready_head && !e->novf && !e->timeouts && !e->retry) &&
	    !corio__emu_cq_ready(e)) {
		int ret = corio__fault_enter(r, false);

		return ret < 0 ? ret : corio__emu_wait_enter(r);
	}
	return ring_enter_full(r, wait_nr);
}

/* ---- set-up and exit ------------------------------------------------------------------------- */

static void *zalloc_aligned(size_t bytes)
{
	void *p = NULL;

	if (posix_memalign(&p, 64, bytes))
		return NULL;
	memset(p, 0, bytes);
	return p;
}

/* What the ring waits with: the epoll instance (or -1, errno set), and
 * timeouts as exact as io_uring's (the header: the slack would delay every
 * wake-up by ~50 us; this is the shard's own thread, and set-up runs on it). */
static int waiter_init(void)
{
	prctl(PR_SET_TIMERSLACK, 1ul, 0ul, 0ul, 0ul);
	return epoll_create1(EPOLL_CLOEXEC);
}

int corio__emu_init(struct corio__ring *r, unsigned entries, struct io_uring_params *p)
{
	struct corio__emu *e;
	struct io_uring *ring = &r->ring;
	unsigned cq = p->flags & IORING_SETUP_CQSIZE ? p->cq_entries : 2 * entries;

	if (!entries || (entries & (entries - 1)) || entries > 32768 || !cq || (cq & (cq - 1)) ||
	    cq < entries)
		return -EINVAL;
	e = zalloc_aligned(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->sqes = zalloc_aligned(entries * sizeof(*e->sqes));
	e->sq_array = zalloc_aligned(entries * sizeof(*e->sq_array));
	e->cqes = zalloc_aligned(cq * sizeof(*e->cqes));
	e->epfd = waiter_init();
	if (!e->sqes || !e->sq_array || !e->cqes || e->epfd < 0) {
		int ret = e->epfd < 0 && e->sqes && e->sq_array && e->cqes ? -errno : -ENOMEM;

		if (e->epfd >= 0)
			close(e->epfd);
		free(e->sqes);
		free(e->sq_array);
		free(e->cqes);
		free(e);
		return ret;
	}
	e->sq_entries = entries;
	e->sq_mask = entries - 1;
	e->cq_entries = cq;
	e->cq_room = cq;
	e->cq_mask = cq - 1;
	e->last_harvest = mono_ns(CLOCK_MONOTONIC);
	memset(ring, 0, sizeof(*ring));
	ring->sq = (struct io_uring_sq){
		.khead = &e->sq_head, .ktail = &e->sq_tail, .kring_mask = &e->sq_mask,
		.kring_entries = &e->sq_entries, .kflags = &e->sq_flags,
		.kdropped = &e->sq_dropped, .array = e->sq_array, .sqes = e->sqes,
		.ring_mask = e->sq_mask, .ring_entries = entries,
	};
	ring->cq = (struct io_uring_cq){
		.khead = &e->cq_head, .ktail = &e->cq_tail, .kring_mask = &e->cq_mask,
		.kring_entries = &e->cq_entries, .kflags = &e->cq_flags,
		.koverflow = &e->cq_overflow, .cqes = e->cqes,
		.ring_mask = e->cq_mask, .ring_entries = cq,
	};
	ring->ring_fd = ring->enter_ring_fd = e->epfd; /* > 0: rt.c's "ring is open" */
	/* Only what the emulation really gives. */
	ring->features = p->features = IORING_FEAT_NODROP | IORING_FEAT_SUBMIT_STABLE |
				       IORING_FEAT_FAST_POLL | IORING_FEAT_POLL_32BITS;
	p->sq_entries = entries;
	p->cq_entries = cq;
	p->flags &= IORING_SETUP_CQSIZE;
	r->em = e;
	r->emu = true;
	return 0;
}

/* The probe column of the op table. */
void corio__emu_probe(struct corio__ring *r)
{
	memset(r->ops, 0, sizeof(r->ops));
	for (unsigned op = 0; op < IORING_OP_LAST; op++)
		r->ops[op] = corio__emu_ops[op].probe;
}

void corio__emu_forget_fd(struct corio__ring *r, int fd)
{
	struct corio__emu *e = r->em;
	struct emu_fd *f = corio__emu_fd_find(e, fd);
	struct emu_fd **pp;

	if (!f || f->head || f->on_ready || f->retry)
		return;
	if (f->registered)
		epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL);
	for (pp = &e->fds[hash64((unsigned)fd, e->nfd_buckets)]; *pp != f; pp = &(*pp)->hnext)
		;
	*pp = f->hnext;
	e->nfds--;
	f->hnext = e->fd_free;
	e->fd_free = f;
}

void corio__emu_exit(struct corio__ring *r)
{
	struct corio__emu *e = r->em;

	if (!e)
		return;
	/* Like io_uring_queue_exit: what is still parked is dropped, no CQE. */
	close(e->epfd);
	while (e->chunks) {
		void **c = e->chunks;

		e->chunks = *c;
		free(c);
	}
	free(e->fds);
	free(e->uds);
	free(e->ovf);
	free(e->sqes);
	free(e->sq_array);
	free(e->cqes);
	free(e);
	r->em = NULL;
	memset(&r->ring, 0, sizeof(r->ring));
	r->ring.ring_fd = -1;
}

