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
 * receive with -ENOBUFS, as the kernel does.
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
 */
#include "uring/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* include/uapi/linux/io_uring.h, Linux 6.10+; liburing 2.3 lacks it */
#ifndef IORING_NOP_INJECT_RESULT
#define IORING_NOP_INJECT_RESULT (1U << 0)
#endif

enum {
	MSHOT_BUDGET = 16,  /* CQEs per multishot op per pass                    */
	NEVENTS = 256,      /* epoll events per wait                             */
	POOL_CHUNK = 128,   /* op and fd records allocated at a time             */
	MAX_BUFRINGS = 16,  /* registered provided-buffer rings per ring         */
	HARVEST_NS = 50000, /* busy turns: epoll looked at this often        */
	RETRY_NS = 1000000, /* a connect refused for a full Unix backlog: retry  */
};

/* Interest bits of a parked op (which edges retry it). */
#define EV_IN (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)
#define EV_OUT (EPOLLOUT | EPOLLERR | EPOLLHUP)

struct emu_fd;

struct emu_op {
	struct emu_op *next;      /* on its record (FIFO), the timeout list or free */
	struct emu_op *hnext;     /* user_data hash chain                           */
	struct emu_fd *f;         /* NULL for timeouts                              */
	uint64_t user_data;
	uint64_t deadline;        /* timeouts: CLOCK_MONOTONIC ns                   */
	struct msghdr mh;         /* multishot recvmsg: the header template         */
	uint64_t addr, addr2;     /* the SQE's buffer / msghdr / sockaddr pointers  */
	uint32_t len;
	uint32_t limit;           /* multishot recv byte limit left (0: none)       */
	int32_t msg_flags;
	uint32_t events;          /* poll mask, or EV_IN / EV_OUT                   */
	uint8_t opcode;
	bool mshot, bsel, connecting;
	bool parked;              /* on its record (park() .. unpark())             */
	bool stale;               /* its file was closed under it: never retried    */
	uint16_t bgid;
	int fd;
	uint32_t accept_flags;
};

struct emu_fd {
	int fd;
	uint32_t ready;           /* edges seen since the last EAGAIN               */
	bool registered, on_ready, nonblock, retry;
	struct emu_op *head, *tail;
	struct emu_fd *xnext;     /* retry list                                     */
	struct emu_fd *hnext;     /* fd hash chain                                  */
	struct emu_fd *rnext;     /* ready list                                     */
};

struct emu_bufring {
	struct io_uring_buf_ring *br;
	unsigned entries, mask;
	uint16_t head, bgid;
	bool used;
};

struct corio__emu {
	/* the memory liburing's helpers read and write */
	unsigned sq_head, sq_tail, sq_mask, sq_entries, sq_flags, sq_dropped;
	unsigned cq_head, cq_tail, cq_mask, cq_entries, cq_flags, cq_overflow;
	unsigned *sq_array;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;

	int epfd;
	bool no_pwait2;           /* epoll_pwait2 is 5.11+: milliseconds before it */
	uint64_t last_harvest;
	unsigned parked;          /* ops waiting on fd records                      */
	struct emu_fd **fds;      /* hash by fd                                     */
	unsigned nfd_buckets, nfds;
	struct emu_op **uds;      /* hash by user_data, parked ops and timeouts     */
	unsigned nud_buckets, nuds;
	struct emu_fd *ready_head, *ready_tail;
	struct emu_fd *retry;     /* connects with no edge to wait for (try_connect) */
	uint64_t retry_at;
	struct emu_op *timeouts;  /* sorted by deadline                             */
	struct emu_op *op_free;
	struct emu_fd *fd_free;
	void *chunks;             /* every pool chunk, for exit                     */
	struct io_uring_cqe *ovf; /* CQEs waiting for room, FIFO                    */
	unsigned novf, ovf_head, ovf_cap;
	struct emu_bufring bufs[MAX_BUFRINGS];
	struct epoll_event evs[NEVENTS];
};

static uint64_t mono_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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

static struct emu_op *op_get(struct corio__emu *e)
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

static void op_put(struct corio__emu *e, struct emu_op *o)
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

static struct emu_fd *fd_find(struct corio__emu *e, int fd)
{
	if (!e->nfd_buckets)
		return NULL;
	for (struct emu_fd *f = e->fds[hash64((unsigned)fd, e->nfd_buckets)]; f; f = f->hnext)
		if (f->fd == fd)
			return f;
	return NULL;
}

static struct emu_fd *fd_get(struct corio__emu *e, int fd)
{
	struct emu_fd *f = fd_find(e, fd);
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

static int ud_add(struct corio__emu *e, struct emu_op *o)
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

static void ud_del(struct corio__emu *e, struct emu_op *o)
{
	struct emu_op **pp = &e->uds[hash64(o->user_data, e->nud_buckets)];

	for (; *pp; pp = &(*pp)->hnext)
		if (*pp == o) {
			*pp = o->hnext;
			e->nuds--;
			return;
		}
}

static struct emu_op *ud_find(struct corio__emu *e, uint64_t ud)
{
	if (!e->nud_buckets)
		return NULL;
	for (struct emu_op *o = e->uds[hash64(ud, e->nud_buckets)]; o; o = o->hnext)
		if (o->user_data == ud)
			return o;
	return NULL;
}

/* ---- completions ------------------------------------------------------------------- */

static void set_flag(struct corio__emu *e, unsigned bit, bool on)
{
	unsigned f = e->sq_flags;

	IO_URING_WRITE_ONCE(e->sq_flags, on ? f | bit : f & ~bit);
}

static void post(struct corio__ring *r, uint64_t ud, int32_t res, uint32_t flags)
{
	struct corio__emu *e = r->em;
	unsigned head = io_uring_smp_load_acquire(&e->cq_head);

	if (UNLIKELY(e->novf) || e->cq_tail - head >= e->cq_entries) {
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
		set_flag(e, IORING_SQ_CQ_OVERFLOW, true);
		return;
	}
	e->cqes[e->cq_tail & e->cq_mask] =
		(struct io_uring_cqe){ .user_data = ud, .res = res, .flags = flags };
	io_uring_smp_store_release(&e->cq_tail, e->cq_tail + 1);
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
	if (!e->novf)
		set_flag(e, IORING_SQ_CQ_OVERFLOW, false);
}

static void finish(struct corio__ring *r, struct emu_op *o, int32_t res, uint32_t flags)
{
	post(r, o->user_data, res, flags);
	op_put(r->em, o);
}

/* ---- provided buffers ---------------------------------------------------------------- */

static struct emu_bufring *bufring(struct corio__emu *e, uint16_t bgid)
{
	for (unsigned i = 0; i < MAX_BUFRINGS; i++)
		if (e->bufs[i].used && e->bufs[i].bgid == bgid)
			return &e->bufs[i];
	return NULL;
}

/* The head buffer, not yet taken: the caller commits only when data landed. */
static struct io_uring_buf *buf_peek(struct emu_bufring *b)
{
	uint16_t tail = io_uring_smp_load_acquire(&b->br->tail);

	if (tail == b->head)
		return NULL;
	return &b->br->bufs[b->head & b->mask];
}

int corio__emu_register_buf_ring(struct corio__ring *r, const struct io_uring_buf_reg *reg)
{
	struct corio__emu *e = r->em;

	/* Incremental consumption (reg->pad: IOU_PBUF_RING_INC) is refused as a
	 * kernel before 6.12 would: bufring.c registers whole buffers instead. */
	if (reg->pad || !reg->ring_entries || (reg->ring_entries & (reg->ring_entries - 1)) ||
	    reg->ring_entries > 32768 || bufring(e, reg->bgid))
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
		b->used = true;
		return 0;
	}
	return -ENOSPC;
}

int corio__emu_unregister_buf_ring(struct corio__ring *r, unsigned bgid)
{
	struct emu_bufring *b = bufring(r->em, (uint16_t)bgid);

	if (!b)
		return -EINVAL;
	b->used = false;
	return 0;
}

/* ---- the ops ------------------------------------------------------------------------------ */

/* Result of one try: a CQE res, or one of these (outside the errno range). */
enum { T_AGAIN = -100000, /* would block: park, clear the ready bit    */
       T_MORE = -100001,  /* multishot: budget spent, more may follow */
       T_DONE = -100002   /* multishot: its final CQE is posted        */
};

static int err(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK ? T_AGAIN : -errno;
}

/*
 * Fault injection at the syscall sites (uring/fault.h; test builds): 0 to
 * make the call, *len perhaps shrunk (a short transfer); or the errno the
 * call "returned", set in errno. An injected EAGAIN stands for the kernel's
 * after a stale edge (another reader took the data): the next arrival's
 * edge follows it, given here by re-arming the record (EPOLL_CTL_MOD
 * reports the file's state as a fresh edge; an unregistered record gets
 * it from park()).
 */
static int fault_at(struct corio__ring *r, struct emu_op *o, size_t *len, int what)
{
	int e = corio__fault_syscall(r, o->fd, len, what);

	if (UNLIKELY(e)) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
					  .data.fd = o->fd };

		if (e == EAGAIN && o->f->registered)
			epoll_ctl(r->em->epfd, EPOLL_CTL_MOD, o->fd, &ev);
		errno = e;
	}
	return e;
}

/* The record's file O_NONBLOCK (accept4 and connect have no per-call
 * flag). Asked once per wait: an op already parked relies on the check
 * made since its record last (re-)registered; an op being issued asks
 * again, since the number may name another file than the one checked. */
static int set_nonblock(struct emu_op *o)
{
	struct emu_fd *f = o->f;
	int fl;

	if (f->nonblock && o->parked)
		return 0; /* checked since the record last registered */
	fl = fcntl(f->fd, F_GETFL);
	if (fl < 0)
		return -errno;
	if (!(fl & O_NONBLOCK) && fcntl(f->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	f->nonblock = true;
	return 0;
}

/* A multishot receive into provided buffers. */
static int try_recv_bsel(struct corio__ring *r, struct emu_op *o)
{
	struct emu_bufring *b = bufring(r->em, o->bgid);
	unsigned posted = 0;

	if (!b)
		return -ENOBUFS;
	for (;;) {
		struct io_uring_buf *buf = buf_peek(b);
		size_t len;
		ssize_t n;
		uint32_t fl;

		if (!buf)
			return -ENOBUFS; /* ends a multishot, as the kernel does */
		len = buf->len;
		if (o->len && o->len < len)
			len = o->len;
		if (o->limit && o->limit < len)
			len = o->limit;
		n = fault_at(r, o, &len, CORIO__FAULT_RECV)
			    ? -1
			    : corio__nc_recv(o->fd, (void *)(uintptr_t)buf->addr, len, o->msg_flags | MSG_DONTWAIT);
		if (n <= 0)
			return n == 0 ? 0 : err();
		fl = IORING_CQE_F_BUFFER | ((uint32_t)buf->bid << IORING_CQE_BUFFER_SHIFT);
		b->head++;
		if (o->limit) {
			o->limit -= (uint32_t)n;
			if (!o->limit) {
				post(r, o->user_data, (int32_t)n, fl);
				return T_DONE; /* posted the final CQE */
			}
		}
		post(r, o->user_data, (int32_t)n, fl | IORING_CQE_F_MORE);
		/*
		 * A short read drained the stream (a multishot RECV is a stream
		 * receive: datagram sockets use RECVMSG): wait for the next edge
		 * instead of paying a recv for its EAGAIN. Edge-triggered epoll
		 * reports every arrival after this read, so nothing is missed;
		 * a hang-up seen already is not reported again, so then read on
		 * until the 0.
		 */
		if ((size_t)n < len && !(o->f->ready & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
			return T_AGAIN;
		if (++posted >= MSHOT_BUDGET)
			return T_MORE;
	}
}

/* One-shot buffer-select receive: post with the buffer flags. */
static int recv_bsel_once(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	struct emu_bufring *b = bufring(r->em, o->bgid);
	struct io_uring_buf *buf = b ? buf_peek(b) : NULL;
	size_t len;
	ssize_t n;

	if (!buf)
		return -ENOBUFS;
	len = o->len && o->len < buf->len ? o->len : buf->len;
	if (fault_at(r, o, o->opcode == IORING_OP_RECV ? &len : NULL, CORIO__FAULT_RECV)) {
		n = -1;
	} else if (o->opcode == IORING_OP_RECVMSG) {
		struct msghdr *mh = (struct msghdr *)(uintptr_t)o->addr;
		struct iovec iov = { (void *)(uintptr_t)buf->addr, len };
		struct iovec *saved = mh->msg_iov;
		size_t savedn = mh->msg_iovlen;

		if (mh->msg_iovlen == 1 && mh->msg_iov[0].iov_len && mh->msg_iov[0].iov_len < len)
			iov.iov_len = mh->msg_iov[0].iov_len;
		mh->msg_iov = &iov;
		mh->msg_iovlen = 1;
		n = corio__nc_recvmsg(o->fd, mh, o->msg_flags | MSG_DONTWAIT);
		mh->msg_iov = saved;
		mh->msg_iovlen = savedn;
	} else {
		n = corio__nc_recv(o->fd, (void *)(uintptr_t)buf->addr, len, o->msg_flags | MSG_DONTWAIT);
	}
	if (n < 0)
		return err();
	if (n > 0) {
		*flags = IORING_CQE_F_BUFFER | ((uint32_t)buf->bid << IORING_CQE_BUFFER_SHIFT);
		b->head++;
	}
	return (int)n;
}

/*
 * Multishot recvmsg: each datagram goes into its own buffer as the kernel
 * lays it out: struct io_uring_recvmsg_out, then msg_namelen bytes for the
 * name and msg_controllen for control data (the sizes of the SQE's msghdr
 * template), then the payload; payloadlen is the datagram's full length
 * (MSG_TRUNC) and flags has MSG_TRUNC when it did not fit.
 */
static int try_recvmsg_mshot(struct corio__ring *r, struct emu_op *o)
{
	struct emu_bufring *b = bufring(r->em, o->bgid);
	size_t hdr = sizeof(struct io_uring_recvmsg_out) + o->mh.msg_namelen + o->mh.msg_controllen;
	unsigned posted = 0;

	if (!b)
		return -ENOBUFS;
	for (;;) {
		struct io_uring_buf *buf = buf_peek(b);
		struct io_uring_recvmsg_out *out;
		struct msghdr mh;
		struct iovec iov;
		unsigned char *p;
		ssize_t n;
		size_t room;

		if (!buf)
			return -ENOBUFS;
		if (buf->len < hdr)
			return -EFAULT;
		p = (unsigned char *)(uintptr_t)buf->addr;
		out = (struct io_uring_recvmsg_out *)p;
		room = buf->len - hdr;
		iov = (struct iovec){ p + hdr, room };
		mh = (struct msghdr){
			.msg_name = o->mh.msg_namelen ? p + sizeof(*out) : NULL,
			.msg_namelen = o->mh.msg_namelen,
			.msg_control = o->mh.msg_controllen ? p + sizeof(*out) + o->mh.msg_namelen : NULL,
			.msg_controllen = o->mh.msg_controllen,
			.msg_iov = &iov,
			.msg_iovlen = 1,
		};
		n = fault_at(r, o, NULL, CORIO__FAULT_OTHER)
			    ? -1
			    : corio__nc_recvmsg(o->fd, &mh, o->msg_flags | MSG_DONTWAIT | MSG_TRUNC);
		if (n < 0)
			return err();
		out->namelen = mh.msg_namelen;
		out->controllen = (uint32_t)mh.msg_controllen;
		out->payloadlen = (uint32_t)n;
		out->flags = (uint32_t)mh.msg_flags;
		b->head++;
		post(r, o->user_data, (int32_t)(hdr + ((size_t)n < room ? (size_t)n : room)),
		     IORING_CQE_F_BUFFER | ((uint32_t)buf->bid << IORING_CQE_BUFFER_SHIFT) |
			     IORING_CQE_F_MORE);
		if (++posted >= MSHOT_BUDGET)
			return T_MORE;
	}
}

static int try_accept(struct corio__ring *r, struct emu_op *o)
{
	unsigned posted = 0;
	int ret = set_nonblock(o);

	if (ret)
		return ret;
	for (;;) {
		int fd = fault_at(r, o, NULL, CORIO__FAULT_OTHER)
				 ? -1
				 : accept4(o->fd, (struct sockaddr *)(uintptr_t)o->addr,
					   (socklen_t *)(uintptr_t)o->addr2, (int)o->accept_flags);

		if (fd < 0)
			return err();
		if (!o->mshot)
			return fd;
		post(r, o->user_data, fd, IORING_CQE_F_MORE);
		if (++posted >= MSHOT_BUDGET)
			return T_MORE;
	}
}

/*
 * A Unix connect answers EAGAIN while the listener's backlog is full, and
 * no edge comes when it drains: the wake-up goes to the listener's queue,
 * not to the connecting socket (io_uring connects from a worker that
 * blocks). Such records are retried every RETRY_NS: a bounded poll that
 * lasts only while a backlog overflows.
 */
static void retry_later(struct corio__emu *e, struct emu_fd *f)
{
	if (f->retry)
		return;
	if (!e->retry)
		e->retry_at = mono_ns(CLOCK_MONOTONIC) + RETRY_NS;
	f->retry = true;
	f->xnext = e->retry;
	e->retry = f;
}

static void ready_add(struct corio__emu *e, struct emu_fd *f);

static void fire_retries(struct corio__emu *e, uint64_t now)
{
	struct emu_fd *f = e->retry;

	if (!f || now < e->retry_at)
		return;
	e->retry = NULL;
	for (struct emu_fd *nx; f; f = nx) {
		nx = f->xnext;
		f->retry = false;
		f->ready |= EPOLLOUT;
		ready_add(e, f);
	}
}

static int try_connect(struct corio__ring *r, struct emu_op *o)
{
	int ret, e;
	socklen_t len = sizeof(e);

	if (o->connecting) {
		/* an edge after EINPROGRESS: the outcome is in SO_ERROR */
		struct pollfd p = { .fd = o->fd, .events = POLLOUT };

		if (poll(&p, 1, 0) == 0)
			return T_AGAIN;
		if (getsockopt(o->fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
			return -errno;
		return -e;
	}
	ret = set_nonblock(o);
	if (ret)
		return ret;
	if (connect(o->fd, (const struct sockaddr *)(uintptr_t)o->addr, (socklen_t)o->addr2) == 0)
		return 0;
	if (errno == EINPROGRESS) {
		o->connecting = true;
		return T_AGAIN;
	}
	if (errno == EAGAIN)
		retry_later(r->em, o->f); /* a Unix listener's backlog is full */
	return err();
}

static int try_sendmsg(struct corio__ring *r, struct emu_op *o)
{
	const struct msghdr *mh = (const struct msghdr *)(uintptr_t)o->addr;
	struct msghdr m = *mh;
	struct iovec first;
	size_t len = mh->msg_iovlen ? mh->msg_iov[0].iov_len : 0;
	ssize_t n;

	if (fault_at(r, o, &len, CORIO__FAULT_SEND))
		return err();
	if (UNLIKELY(mh->msg_iovlen && len < mh->msg_iov[0].iov_len)) {
		/* a short write (test builds): part of the first iovec only */
		first = (struct iovec){ mh->msg_iov[0].iov_base, len };
		m.msg_iov = &first;
		m.msg_iovlen = 1;
	}
	n = corio__nc_sendmsg(o->fd, &m, o->msg_flags | MSG_DONTWAIT | MSG_NOSIGNAL);
	return n < 0 ? err() : (int)n;
}

/*
 * A poll answered from the record's bits. The bits are edges the record
 * has seen, cleared only when one of the emulator's own ops meets EAGAIN:
 * a socket that corio_sendfile() filled with sendfile(2), outside the
 * emulator, kept "writable" from its first edge, and a POLLOUT wait beside
 * a parked receive then completed at once, every time, while sendfile(2)
 * said EAGAIN (a spin at 100% CPU). So a one-shot poll asks poll(2) for
 * the state now before it completes, and drops the bits that are stale;
 * the record stays registered, so the next change is an edge. A multishot
 * poll reports edges, as the kernel's does.
 */
static int try_poll(struct emu_op *o)
{
	uint32_t ready = o->f->ready & (o->events | EPOLLERR | EPOLLHUP);
	struct pollfd p;

	if (!ready)
		return T_AGAIN;
	if (o->mshot)
		return (int)ready; /* EPOLL* and POLL* share their bit values */
	p = (struct pollfd){ .fd = o->fd, .events = (short)o->events };
	if (poll(&p, 1, 0) < 0)
		return (int)ready; /* cannot tell: as before */
	if (!p.revents) {
		o->f->ready &= ~(o->events & (EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDNORM |
					     EPOLLWRNORM | EPOLLRDHUP));
		return T_AGAIN;
	}
	return p.revents & (short)(o->events | POLLERR | POLLHUP | POLLNVAL);
}

/* One attempt at op o; flags gets CQE flags for a result posted by the caller. */
static int try_op(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	size_t len = o->len;
	ssize_t n;

	*flags = 0;
	switch (o->opcode) {
	case IORING_OP_RECV:
		if (o->bsel)
			return o->mshot ? try_recv_bsel(r, o) : recv_bsel_once(r, o, flags);
		n = fault_at(r, o, &len, CORIO__FAULT_RECV)
			    ? -1
			    : corio__nc_recv(o->fd, (void *)(uintptr_t)o->addr, len, o->msg_flags | MSG_DONTWAIT);
		return n < 0 ? err() : (int)n;
	case IORING_OP_RECVMSG:
		if (o->mshot)
			return try_recvmsg_mshot(r, o);
		if (o->bsel)
			return recv_bsel_once(r, o, flags);
		n = fault_at(r, o, NULL, CORIO__FAULT_OTHER)
			    ? -1
			    : corio__nc_recvmsg(o->fd, (struct msghdr *)(uintptr_t)o->addr,
				      o->msg_flags | MSG_DONTWAIT);
		return n < 0 ? err() : (int)n;
	case IORING_OP_SEND:
		n = fault_at(r, o, &len, CORIO__FAULT_SEND)
			    ? -1
			    : corio__nc_send(o->fd, (const void *)(uintptr_t)o->addr, len,
				   o->msg_flags | MSG_DONTWAIT | MSG_NOSIGNAL);
		return n < 0 ? err() : (int)n;
	case IORING_OP_SENDMSG:
		return try_sendmsg(r, o);
	case IORING_OP_READ:
		n = fault_at(r, o, NULL, CORIO__FAULT_OTHER)
			    ? -1
			    : corio__nc_read(o->fd, (void *)(uintptr_t)o->addr, o->len);
		if (n < 0 && errno == EAGAIN && (o->msg_flags & RWF_NOWAIT))
			return -EAGAIN; /* RWF_NOWAIT: the old kernels' answer, for tests */
		return n < 0 ? err() : (int)n;
	case IORING_OP_ACCEPT:
		return try_accept(r, o);
	case IORING_OP_CONNECT:
		return try_connect(r, o);
	case IORING_OP_POLL_ADD:
		return try_poll(o);
	default:
		return -EINVAL;
	}
}

/* ---- fd records: parking and readiness ------------------------------------------------ */

static void ready_add(struct corio__emu *e, struct emu_fd *f)
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
	set_flag(e, IORING_SQ_TASKRUN, true);
}

/* The record goes from no ops to waiting: (re-)register it. Its file may be
 * new behind an old number, so its ready bits start over and the kernel
 * reports the current state as an edge. */
static int fd_watch(struct corio__emu *e, struct emu_fd *f)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
				  .data.fd = f->fd };
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
				  .data.fd = f->fd };

	if (!f->registered)
		return true; /* a file found here before was refused by epoll: try again */
	if (epoll_ctl(e->epfd, EPOLL_CTL_MOD, f->fd, &ev) == 0 ||
	    (errno != ENOENT && errno != EBADF))
		return false;
	for (struct emu_op *o = f->head; o; o = o->next)
		o->stale = true;
	f->registered = false;
	return true;
}

/* False when o could not wait and was completed instead. */
static bool park(struct corio__ring *r, struct emu_op *o)
{
	struct corio__emu *e = r->em;
	struct emu_fd *f = o->f;
	int ret;

	if (!f->head || fd_moved(e, f)) {
		ret = fd_watch(e, f);
		if (ret < 0) {
			/* Not pollable: a regular file is always ready (poll(2)
			 * says so); anything else cannot wait here. */
			if (o->opcode == IORING_OP_POLL_ADD && ret == -EPERM) {
				finish(r, o, (int32_t)(o->events & (POLLIN | POLLOUT | POLLRDNORM |
								    POLLWRNORM)), 0);
				return false;
			}
			finish(r, o, ret == -EPERM ? -EAGAIN : ret, 0);
			return false;
		}
	}
	if (ud_add(e, o)) {
		finish(r, o, -ENOMEM, 0);
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

static void unpark(struct corio__emu *e, struct emu_op *o)
{
	struct emu_fd *f = o->f;
	struct emu_op **pp = &f->head, *prev = NULL;

	for (; *pp != o; pp = &(*pp)->next)
		prev = *pp;
	*pp = o->next;
	if (f->tail == o)
		f->tail = prev;
	ud_del(e, o);
	o->parked = false;
	e->parked--;
}

/* Handle the outcome of a try of a parked op: true if it left the record. */
static bool settle(struct corio__ring *r, struct emu_op *o, int res, uint32_t flags, bool *more)
{
	struct emu_fd *f = o->f;

	if (res == T_AGAIN) {
		/* would block: the direction's bit was stale */
		if (o->opcode == IORING_OP_POLL_ADD)
			return false;
		f->ready &= ~(o->events == EV_OUT ? EPOLLOUT : EPOLLIN);
		return false;
	}
	if (res == T_MORE) {
		*more = true; /* budget spent, work left: stay on the ready list */
		return false;
	}
	if (o->opcode == IORING_OP_POLL_ADD && o->mshot) {
		post(r, o->user_data, res, IORING_CQE_F_MORE);
		return false;
	}
	unpark(r->em, o);
	if (res == T_DONE)
		op_put(r->em, o); /* the multishot's final CQE is posted already */
	else
		finish(r, o, res, flags);
	return true;
}

/* Retry the ops of f that its ready bits concern. */
static void process_fd(struct corio__ring *r, struct emu_fd *f)
{
	bool more = false;

	for (struct emu_op *o = f->head, *next; o; o = next) {
		uint32_t flags;
		int res;

		next = o->next;
		if (!(f->ready & o->events) || o->stale)
			continue;
		res = try_op(r, o, &flags);
		settle(r, o, res, flags, &more);
	}
	if (more && f->head)
		ready_add(r->em, f);
}

static void process_ready(struct corio__ring *r)
{
	struct corio__emu *e = r->em;
	struct emu_fd *f = e->ready_head, *end = e->ready_tail;

	/* One pass over what is queued now; records re-queued by this pass
	 * wait for the next one. */
	e->ready_head = e->ready_tail = NULL;
	set_flag(e, IORING_SQ_TASKRUN, false);
	while (f) {
		struct emu_fd *next = f == end ? NULL : f->rnext;

		f->on_ready = false;
		process_fd(r, f);
		f = next;
	}
}

static void harvest(struct corio__ring *r, int n)
{
	struct corio__emu *e = r->em;

	for (int i = 0; i < n; i++) {
		struct emu_fd *f = fd_find(e, e->evs[i].data.fd);

		if (!f || !f->head)
			continue; /* idle: re-registered (and re-read) when it waits again */
		f->ready |= corio__fault_events(r, e->evs[i].events);
		ready_add(e, f);
	}
	/* Looked just now; when exactly is asked only if a busy turn wants
	 * it (corio__emu_poll_due), not paid here on every wake-up. */
	e->last_harvest = 0;
	if (n)
		process_ready(r);
}

/* ---- timeouts ----------------------------------------------------------------------------- */

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
	ud_del(e, o);
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

static void fire_timeouts(struct corio__ring *r)
{
	struct corio__emu *e = r->em;
	uint64_t now;

	if (!e->timeouts && !e->retry)
		return;
	now = mono_ns(CLOCK_MONOTONIC);
	fire_retries(e, now);
	while (e->timeouts && e->timeouts->deadline <= now) {
		struct emu_op *o = e->timeouts;

		timeout_unlink(e, o);
		finish(r, o, -ETIME, 0);
	}
}

static int timeout_remove(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	struct corio__emu *e = r->em;
	struct emu_op *t = ud_find(e, sqe->addr);
	uint32_t tflags = sqe->timeout_flags;
	uint64_t dl;
	int ret;

	if (!t || t->f)
		return -ENOENT;
	if (!(tflags & IORING_TIMEOUT_UPDATE)) {
		timeout_unlink(e, t);
		finish(r, t, -ECANCELED, 0);
		return 0;
	}
	ret = timeout_deadline((const struct __kernel_timespec *)(uintptr_t)sqe->off, tflags, &dl);
	if (ret)
		return ret;
	timeout_unlink(e, t);
	t->deadline = dl;
	timeout_insert(e, t);
	return ud_add(e, t);
}

static int cancel(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	struct corio__emu *e = r->em;
	struct emu_op *o;

	if (sqe->cancel_flags & ~IORING_ASYNC_CANCEL_ALL)
		return -EINVAL; /* by fd or "any": corio does not use them */
	o = ud_find(e, sqe->addr);
	if (!o)
		return -ENOENT; /* done already (its CQE may wait in the CQ) */
	if (o->f)
		unpark(e, o);
	else
		timeout_unlink(e, o);
	finish(r, o, -ECANCELED, 0);
	return 0;
}

/* ---- submit --------------------------------------------------------------------------------- */

static int prep(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe)
{
	o->fd = sqe->fd;
	o->addr = sqe->addr;
	o->addr2 = sqe->off;
	o->len = sqe->len;
	o->msg_flags = (int32_t)sqe->msg_flags;
	o->bsel = sqe->flags & IOSQE_BUFFER_SELECT;
	o->bgid = sqe->buf_group;
	switch (sqe->opcode) {
	case IORING_OP_RECV:
		o->mshot = sqe->ioprio & IORING_RECV_MULTISHOT;
		if (o->mshot && !o->bsel)
			return -EINVAL;
		memcpy(&o->limit, &sqe->addr_len, sizeof(o->limit)); /* 6.16's byte limit */
		o->events = EV_IN;
		break;
	case IORING_OP_RECVMSG:
		o->mshot = sqe->ioprio & IORING_RECV_MULTISHOT;
		if (o->mshot) {
			if (!o->bsel)
				return -EINVAL;
			o->mh = *(const struct msghdr *)(uintptr_t)sqe->addr; /* template */
		}
		o->events = EV_IN;
		break;
	case IORING_OP_READ:
		o->msg_flags = (int32_t)sqe->rw_flags;
		o->events = EV_IN;
		break;
	case IORING_OP_ACCEPT:
		o->mshot = sqe->ioprio & IORING_ACCEPT_MULTISHOT;
		o->accept_flags = sqe->accept_flags;
		o->events = EV_IN;
		break;
	case IORING_OP_SEND:
	case IORING_OP_SENDMSG:
	case IORING_OP_CONNECT:
		o->events = EV_OUT;
		break;
	case IORING_OP_POLL_ADD:
		o->events = sqe->poll32_events;
		o->mshot = sqe->len & IORING_POLL_ADD_MULTI;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static int timeout_add(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe)
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
	ret = ud_add(r->em, o);
	if (ret)
		return ret;
	timeout_insert(r->em, o);
	return 1;
}

/*
 * A SEND the socket takes at once (or fails at once) is answered from the
 * SQE: no op record, no fd-record look-up, which every ring-issued send
 * (corio_send_buf while other fibers are ready) paid per message. 1: its
 * CQE is posted; 0: tried, it would block (the full path parks it without
 * a second try); -1: not tried. Fault builds never try here: their
 * injection sits on the full path's syscall sites.
 */
static int send_at_once(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
#ifdef CORIO_FAULTS
	(void)r;
	(void)sqe;
	return -1;
#else
	ssize_t n = corio__nc_send(sqe->fd, (const void *)(uintptr_t)sqe->addr, sqe->len,
			 (int)sqe->msg_flags | MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	post(r, sqe->user_data, n < 0 ? -errno : (int32_t)n, 0);
	return 1;
#endif
}

/* Issue one SQE: complete it now, or park it. */
static void issue(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	struct corio__emu *e = r->em;
	struct emu_op *o;
	uint32_t flags = 0;
	int res, tried = -1;

	/* links, drains, fixed files, CQE skipping: never reported, never used */
	if (UNLIKELY(sqe->flags & ~(IOSQE_BUFFER_SELECT | IOSQE_ASYNC))) {
		post(r, sqe->user_data, -EINVAL, 0);
		return;
	}
	switch (sqe->opcode) {
	case IORING_OP_NOP:
		/* NOP_INJECT_RESULT (6.10): the fault injector's errors */
		post(r, sqe->user_data,
		     sqe->rw_flags & IORING_NOP_INJECT_RESULT ? (int32_t)sqe->len : 0, 0);
		return;
	case IORING_OP_TIMEOUT_REMOVE:
		post(r, sqe->user_data, timeout_remove(r, sqe), 0);
		return;
	case IORING_OP_ASYNC_CANCEL:
		post(r, sqe->user_data, cancel(r, sqe), 0);
		return;
	case IORING_OP_SHUTDOWN:
		post(r, sqe->user_data, shutdown(sqe->fd, (int)sqe->len) < 0 ? -errno : 0, 0);
		return;
	case IORING_OP_SEND:
		if ((tried = send_at_once(r, sqe)) == 1)
			return;
		break;
	}
	o = op_get(e);
	if (!o) {
		post(r, sqe->user_data, -ENOMEM, 0);
		return;
	}
	o->user_data = sqe->user_data;
	o->opcode = sqe->opcode;
	if (sqe->opcode == IORING_OP_TIMEOUT) {
		res = timeout_add(r, o, sqe);
		if (res < 0)
			finish(r, o, res, 0);
		return;
	}
	res = prep(r, o, sqe);
	if (!res && !(o->f = fd_get(e, o->fd)))
		res = -ENOMEM;
	if (res) {
		finish(r, o, res, 0);
		return;
	}
	/* A poll is answered from the record's bits while it waits on other
	 * ops; otherwise the registration below reports the fd's state. A
	 * send tried already would block: park it. */
	if ((o->opcode == IORING_OP_POLL_ADD && !o->f->head) || tried == 0)
		res = T_AGAIN;
	else
		res = try_op(r, o, &flags);
	if (res == T_AGAIN || res == T_MORE) {
		struct emu_fd *f = o->f;

		if (park(r, o) && res == T_MORE)
			ready_add(e, f);
	} else if (res == T_DONE) {
		op_put(e, o);
	} else if (o->opcode == IORING_OP_POLL_ADD && o->mshot) {
		post(r, o->user_data, res, IORING_CQE_F_MORE);
		park(r, o);
	} else {
		finish(r, o, res, flags);
	}
}

static unsigned submit(struct corio__ring *r)
{
	struct corio__emu *e = r->em;
	struct io_uring_sq *sq = &r->ring.sq;
	unsigned n = 0;

	while (sq->sqe_head != sq->sqe_tail) {
		struct io_uring_sqe sqe = sq->sqes[sq->sqe_head & sq->ring_mask];

		/* consumed before it runs: liburing may hand the slot out again */
		sq->sqe_head++;
		IO_URING_WRITE_ONCE(e->sq_head, sq->sqe_head);
		IO_URING_WRITE_ONCE(e->sq_tail, sq->sqe_head);
		issue(r, &sqe);
		n++;
	}
	return n;
}

/* ---- enter ------------------------------------------------------------------------------------ */

static int epoll_wait_ns(struct corio__emu *e, int64_t ns)
{
	int n;

	if (!e->no_pwait2) {
		struct __kernel_timespec ts = { ns / 1000000000, ns % 1000000000 };

		n = (int)corio__nc_epoll_pwait2(e->epfd, e->evs, NEVENTS, ns < 0 ? NULL : &ts);
		if (n >= 0 || errno != ENOSYS)
			return n < 0 ? -errno : n;
		e->no_pwait2 = true; /* before 5.11: milliseconds, rounded up */
	}
	n = (int)corio__nc_epoll_wait(e->epfd, e->evs, NEVENTS, ns < 0 ? -1 : (int)((ns + 999999) / 1000000));
	return n < 0 ? -errno : n;
}

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

int corio__emu_enter(struct corio__ring *r, unsigned wait_nr, bool poll,
		     const struct __kernel_timespec *limit)
{
	struct corio__emu *e = r->em;
	unsigned submitted = submit(r);
	uint64_t until = 0;
	int n;

	if (e->ready_head)
		process_ready(r);
	fire_timeouts(r);
	flush_overflow(e);
	/* Look at epoll when asked, or when a busy turn is due for a look. A
	 * wait that the submit satisfied at once (an op that completes on
	 * the spot) is a busy turn too: it used to skip the look, so a fiber
	 * whose every op completed at once kept every parked op of the shard
	 * from being served (backend::ops_that_complete_at_once_...). */
	if (poll || ((!wait_nr || io_uring_cq_ready(&r->ring) || e->ready_head) &&
		     corio__emu_poll_due(r))) {
		n = epoll_wait_ns(e, 0);
		if (n >= 0) /* 0 events is a look too (else every busy turn polls) */
			harvest(r, n);
		fire_timeouts(r);
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
		n = epoll_wait_ns(e, ns);
		if (n < 0)
			return submitted ? (int)submitted : n; /* -EINTR */
		harvest(r, n);
		fire_timeouts(r);
		if (until && mono_ns(CLOCK_MONOTONIC) >= until)
			break;
	}
	return (int)submitted;
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

void corio__emu_probe(struct corio__ring *r)
{
	static const unsigned char ops[] = {
		IORING_OP_NOP, IORING_OP_POLL_ADD, IORING_OP_RECV, IORING_OP_RECVMSG,
		IORING_OP_SEND, IORING_OP_SENDMSG, IORING_OP_ACCEPT, IORING_OP_CONNECT,
		IORING_OP_SHUTDOWN, IORING_OP_TIMEOUT, IORING_OP_TIMEOUT_REMOVE,
		IORING_OP_ASYNC_CANCEL,
	};

	memset(r->ops, 0, sizeof(r->ops));
	for (unsigned i = 0; i < sizeof(ops); i++)
		r->ops[ops[i]] = 1;
}

void corio__emu_forget_fd(struct corio__ring *r, int fd)
{
	struct corio__emu *e = r->em;
	struct emu_fd *f = fd_find(e, fd);
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
