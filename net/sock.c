/* SPDX-License-Identifier: MIT */
/*
 * net/sock.c - connected sockets: receive (into a caller buffer, or borrowed
 * from the provided-buffer ring), send with all-or-error semantics, shutdown,
 * close, options.
 *
 * The buffered receive path. A socket that has used corio_recv_buf() keeps
 * one multishot recv (s->r) in the kernel while its reader wants data. Each
 * CQE with data hands us a slice of a provided buffer - a whole buffer, or
 * with incremental consumption the next bytes of one that many receives
 * share (uring/bufring.c) - which is appended to the socket's queue (slice
 * records come from the part's pool); the reader pops from the queue. Each
 * slice holds a reference to its buffer; a buffer goes back to the ring only
 * when the kernel is done with it and the last slice of it is released
 * (corio_buf_release(), a queued slice dropped at close, a copy that used it
 * up) - never on a CQE that hands over no bytes (an EOF or error CQE).
 *
 * The multishot ends (a CQE without IORING_CQE_F_MORE) on end of stream,
 * an error, our cancel, or -ENOBUFS when the ring is empty. ENOBUFS loses
 * nothing: the kernel has not consumed the bytes, so the socket goes on
 * net->starved and the part's poll arms it again once a buffer is back.
 * End of stream and errors are sticky: every later receive returns them
 * after the queued data is consumed.
 *
 * Flow control: a socket holds at most net->recv_cap queued, unread
 * slices (each within one buffer); the rest stays in the socket, so the peer's window closes and
 * one unread connection cannot take the whole ring. The multishot is armed
 * with a byte limit of the room left (mshot_limit) and ends there; on
 * kernels without the limit it is cancelled when a CQE fills the queue,
 * and the socket then receives one buffer per single-shot recv (the
 * kernel may fill a few dozen more buffers before a cancel lands). Either
 * way the reader re-arms it once it has consumed half the queue (counted
 * in recv_capped).
 *
 * Resets: the kernel can miss a multishot recv's final CQE - a reset
 * arriving just after data leaves the recv armed with SO_ERROR set and no
 * CQE ever coming (a few in 10^4 connections that send and reset, on 6.18;
 * liburing issue #1549 describes the same for AF_UNIX EOF). So a stream
 * socket's multishot recv has a one-shot poll for POLLERR|POLLHUP|POLLRDHUP
 * beside it (s->h). When it fires the multishot is cancelled and the
 * socket receives with single-shot recvs from then on: each of those always
 * completes, with data, 0 or the error.
 */
#include "net/internal.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SOCK_POOL_MAX 4096
/* A closed socket's record is reused only after this many others were
 * closed after it, so a stale handle (a second corio_close, a call after
 * close) finds it marked dead and gets -EINVAL instead of acting on a
 * socket another fiber now owns (net.h states the limit). */
#define SOCK_QUARANTINE 64

/* ---- records ---------------------------------------------------------------- */

static void rop_cb(struct corio__op *op, int32_t res, uint32_t flags);
static void hup_cb(struct corio__op *op, int32_t res, uint32_t flags);

struct corio_sock *corio__sock_new(struct corio__net *n, int fd, int family, int type)
{
	struct corio_sock *s = n->nsock_free > SOCK_QUARANTINE ? n->sock_free : NULL;

	if (s) {
		n->sock_free = s->free_next;
		if (!n->sock_free)
			n->sock_free_tail = NULL;
		n->nsock_free--;
	} else {
		s = malloc(sizeof(*s));
		if (!s)
			return NULL;
	}
	memset(s, 0, sizeof(*s));
	s->net = n;
	s->fd = fd;
	s->family = family;
	s->type = type;
	s->r.op.cb = rop_cb;
	s->r.op.data = s;
	s->h.op.cb = hup_cb;
	s->h.op.data = s;
	corio__list_init(&s->uops);
	return s;
}

void corio__sock_free(struct corio_sock *s)
{
	struct corio__net *n = s->net;

	s->dead = true;
	s->free_next = NULL;
	if (n->sock_free_tail)
		n->sock_free_tail->free_next = s;
	else
		n->sock_free = s;
	n->sock_free_tail = s;
	if (++n->nsock_free > SOCK_POOL_MAX) { /* free the oldest */
		struct corio_sock *old = n->sock_free;

		n->sock_free = old->free_next;
		n->nsock_free--;
		free(old);
	}
}

/* s belongs to the calling shard? */
static struct corio__net *owner(const struct corio_sock *s)
{
	return s && !s->dead ? corio__net_owner(s->net) : NULL;
}

static void set_live(struct corio_sock *s, bool live)
{
	if (s->live == live)
		return;
	s->live = live;
	CORIO__STAT_ADD(s->net->stats.conns_live, live ? 1 : -1);
}

int corio_sock_from_fd(int fd, struct corio_sock **out)
{
	struct corio__net *n = corio__net();
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int type = 0;
	socklen_t tlen = sizeof(type);
	struct corio_sock *s;

	if (!out)
		return corio__error(-EINVAL, "corio_sock_from_fd: out is NULL");
	*out = NULL;
	if (!n)
		return -EPERM;
	if (fd < 0)
		return -EBADF;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0)
		return corio__error(-errno, "corio_sock_from_fd: fd %d is not a socket", fd);
	s = corio__sock_new(n, fd, ss.ss_family, type);
	if (!s)
		return -ENOMEM;
	if (type == SOCK_STREAM)
		set_live(s, true);
	*out = s;
	return 0;
}

/* ---- the receive queue ------------------------------------------------------- */

/* Queue the slice [off, off + len) of buffer id; it brings the reference
 * the caller took. False when out of slice records. */
static bool q_push(struct corio_sock *s, uint32_t id, uint32_t off, uint32_t len)
{
	struct corio__slice *q = corio__net_slice_get(s->net);

	if (!q)
		return false;
	q->next = NULL;
	q->id = id;
	q->off = off;
	q->len = len;
	if (!s->qtail)
		s->qhead = q;
	else
		s->qtail->next = q;
	s->qtail = q;
	s->qcount++;
	return true;
}

void corio__sock_q_pop(struct corio_sock *s)
{
	struct corio__slice *q = s->qhead;

	s->qhead = q->next;
	if (!s->qhead)
		s->qtail = NULL;
	s->qoff = 0;
	s->qcount--;
	corio__net_slice_put(s->net, q);
}

static void buf_put(struct corio__net *n, uint32_t id)
{
	corio__net_buf_put(n, id);
}

static void starve(struct corio_sock *s)
{
	if (!s->starved) {
		s->starved = true;
		corio__list_add(&s->net->starved, &s->starved_link);
	}
}

static void rop_cb(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct corio_sock *s = op->data;
	struct corio__net *n = s->net;
	bool more = flags & IORING_CQE_F_MORE;
	bool enobufs = false;
	struct corio__bufring *ring = corio__net_ring(n, s->rtag);

	if (s->poll_armed) {
		s->poll_armed = false; /* it has taken its buffer, or not */
		n->poll_arms--;
	}
	if (s->promise && (res > 0 || !more)) {
		/* one promised buffer taken; the final CQE frees the rest */
		unsigned k = more ? 1 : s->promise;

		s->promise -= (uint16_t)k;
		n->promised -= k;
	}
	if (corio__bufring_kernel(ring)) {
		uint32_t off;
		int bid = corio__bufring_cqe(ring, res, flags, &off);

		/* After -ENOMEM lost bytes, later ones must not follow them. */
		if (bid >= 0 && (s->has_term || !q_push(s, (uint32_t)bid | s->rtag, off,
							(uint32_t)res))) {
			buf_put(n, (uint32_t)bid | s->rtag);
			res = -ENOMEM; /* the bytes are lost: end the stream */
			if (more) {
				s->r.state = NET_CANCELING; /* before the cancel, as everywhere */
				corio__ring_cancel(&n->shard->ring, &s->r.op);
			}
		}
	} else if (res > 0) {
		/* user mode: the buffer we took in corio__sock_arm() */
		if (!q_push(s, s->ubid | s->rtag, 0, (uint32_t)res)) {
			buf_put(n, s->ubid | s->rtag);
			res = -ENOMEM;
		}
	} else {
		buf_put(n, s->ubid | s->rtag);
	}
	corio__net_bufs_stat(n);
	if (res > 0) {
		CORIO__STAT_ADD(n->stats.ops_in, 1);
		if (!more && s->r.state == NET_ARMED) {
			/* the byte limit (or an early end): re-arm on reading */
			s->capped = true;
			if (s->r_limited)
				CORIO__STAT_ADD(n->stats.recv_capped, 1);
		}
	} else if (res == -EINVAL && s->r_limited) {
		/* This kernel rejects the limit: arm again without it. */
		n->recv_limit = false;
		s->capped = true;
	} else if (res == -ENOBUFS) {
		CORIO__STAT_ADD(n->stats.enobufs, 1);
		enobufs = true;
	} else if (res != -ECANCELED) {
		/* 0: end of stream; < 0: the connection's error. (-ECANCELED
		 * only ever comes from our own cancel: close or shutdown.) */
		s->has_term = true;
		s->rterm = res;
		if (res < 0)
			corio__net_err(n, res);
	}
	if (!more) {
		s->r.state = NET_IDLE;
		corio__list_del(&s->r.link);
		corio__op_finished(n->shard);
		if (s->closer)
			corio__ready(s->closer, 0);
		else if (enobufs && !n->stopping)
			starve(s);
	} else if (s->qcount >= n->recv_cap && s->r.state == NET_ARMED) {
		/* Nobody reads fast enough: leave the rest in the socket. The
		 * kernel may fill more buffers before the cancel lands, so
		 * without a byte limit the socket receives with single shots
		 * (one buffer each) from now on. */
		s->r.state = NET_CANCELING;
		corio__ring_cancel(&n->shard->ring, &s->r.op);
		s->capped = true;
		s->slow = true;
		CORIO__STAT_ADD(n->stats.recv_capped, 1);
	} else if (s->r.state == NET_ARMED && s->type == SOCK_STREAM && corio__sock_holds(s) &&
		   ring->in_ring <= corio__net_reserve(n, ring)) {
		/* The ring is down to its reserve and s holds buffers (a
		 * kernel without the byte limit, or whole buffers filled by
		 * small receives): stop it; its reader re-arms it and
		 * corio__sock_arm asks the budget again. */
		s->r.state = NET_CANCELING;
		corio__ring_cancel(&n->shard->ring, &s->r.op);
		s->capped = true;
		CORIO__STAT_ADD(n->stats.recv_budget, 1);
	}
	corio__net_wake(&s->rwq);
}

/* The error/hang-up poll beside a stream socket's multishot recv. */
static void hup_cb(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct corio_sock *s = op->data;
	struct corio__net *n = s->net;

	(void)flags;
	s->h.state = NET_IDLE;
	corio__list_del(&s->h.link);
	corio__op_finished(n->shard);
	if (res != -ECANCELED) {
		/* The stream is ending: do not trust the multishot to say so. */
		s->hup = true;
		if (s->r.state == NET_ARMED) {
			s->r.state = NET_CANCELING;
			corio__ring_cancel(&n->shard->ring, &s->r.op);
			CORIO__STAT_ADD(n->stats.recv_hup, 1);
		}
	}
	if (s->closer)
		corio__ready(s->closer, 0);
}

static void arm_hup(struct corio_sock *s)
{
	struct corio__net *n = s->net;
	struct io_uring_sqe *sqe = corio__ring_sqe(&n->shard->ring);

	io_uring_prep_poll_add(sqe, s->fd, POLLERR | POLLHUP | POLLRDHUP);
	corio__sqe_set_op(sqe, &s->h.op);
	s->h.state = NET_ARMED;
	corio__list_add(&n->armed, &s->h.link);
	corio__op_started(n->shard);
}

/*
 * On newer kernels (docs/NET.md, "Fallbacks", says which) a multishot
 * recv takes a total byte limit in
 * sqe->optlen (the 32 bits liburing 2.3 calls addr_len and __pad3) and ends
 * once it has received that much: the receive cap then holds exactly,
 * where cancelling it from a CQE lets the kernel fill a few dozen more
 * buffers first. Older kernels ignore the field or reject it with -EINVAL
 * (rop_cb then turns the limit off).
 */
static void mshot_limit(struct io_uring_sqe *sqe, struct corio_sock *s, unsigned room)
{
	struct corio__net *n = s->net;
	uint64_t bytes = (uint64_t)room * n->bufs.size; /* a slice is at most a buffer */
	uint32_t lim = bytes > INT32_MAX ? INT32_MAX : (uint32_t)bytes;

	memcpy(&sqe->addr_len, &lim, sizeof(lim));
}

int corio__sock_arm(struct corio_sock *s)
{
	struct corio__net *n = s->net;
	struct corio__bufring *ring;
	struct io_uring_sqe *sqe;
	unsigned lim = 0, promise = 0;
	bool reserve = false;
	int ret;

	if (n->stopping)
		return -ECANCELED;
	s->r_limited = false;
	ret = s->type == SOCK_DGRAM ? corio__net_dbufs(n) : corio__net_bufs(n);
	if (ret < 0)
		return ret;
	s->rtag = (uint32_t)ret;
	ring = corio__net_ring(n, s->rtag);
	if (!ring->in_ring) {
		/* Nothing to receive into: arm when a buffer comes back. */
		starve(s);
		return 0;
	}
	if (s->type == SOCK_STREAM) {
		/* the budget (net/internal.h): how many buffers s may take */
		unsigned room = n->recv_cap > s->qcount ? n->recv_cap - s->qcount : 1;
		unsigned avail = corio__net_budget_room(n, ring);

		if (!n->reserve_pct) {
			lim = room; /* CORIO_NET_RECV_RESERVE=0: per-socket caps only */
		} else if (!corio__sock_holds(s)) {
			/* One buffer's worth, promised to no one: what s takes
			 * beyond it is asked for once it holds it. From the
			 * reserve, a single shot, when the rest is gone. */
			lim = 1;
			reserve = ring->in_ring <= corio__net_reserve(n, ring) + n->promised;
		} else if (!avail) {
			CORIO__STAT_ADD(n->stats.recv_budget, 1);
			starve(s); /* net_poll arms it once the budget has room */
			return 0;
		} else {
			lim = room < avail ? room : avail;
			promise = lim;
		}
	}
	sqe = corio__ring_sqe(&n->shard->ring);
	if (s->type == SOCK_DGRAM) {
		io_uring_prep_recvmsg_multishot(sqe, s->fd, &s->rmsg, 0);
		corio__bufring_select(sqe, ring);
	} else if (corio__bufring_kernel(ring)) {
		io_uring_prep_recv(sqe, s->fd, NULL, 0, 0);
		if (n->multishot_recv && !s->hup && !(s->slow && !n->recv_limit) && !reserve) {
			sqe->ioprio |= IORING_RECV_MULTISHOT;
			s->r_limited = n->recv_limit;
			if (n->recv_limit)
				mshot_limit(sqe, s, lim);
			if (n->recv_limit && promise) {
				s->promise = (uint16_t)promise;
				n->promised += promise;
			}
		}
		corio__bufring_select(sqe, ring);
	} else {
		s->ubid = (unsigned)corio__bufring_take(ring);
		io_uring_prep_recv(sqe, s->fd, corio__bufring_addr(ring, s->ubid), ring->size, 0);
		corio__net_bufs_stat(n);
	}
	corio__sqe_set_op(sqe, &s->r.op);
	if (s->buffered)
		CORIO__STAT_ADD(n->stats.rearms, 1);
	s->buffered = true;
	s->capped = false;
	s->r.state = NET_ARMED;
	corio__list_add(&n->armed, &s->r.link);
	corio__op_started(n->shard);
	if (s->type == SOCK_STREAM && (sqe->ioprio & IORING_RECV_MULTISHOT) &&
	    s->h.state == NET_IDLE)
		arm_hup(s);
	return 0;
}

/* After the reader took buffers: re-arm a receive the cap stopped once
 * half the queue is consumed (not at every buffer: each arm is an SQE). */
static void uncap(struct corio_sock *s)
{
	if (s->capped && s->qcount <= s->net->recv_cap / 2 && s->r.state == NET_IDLE &&
	    !s->starved && !s->has_term)
		(void)corio__sock_arm(s); /* on failure the next wait arms it */
}

void corio__sock_reader_leave(struct corio_sock *s)
{
	s->readers--;
	if (s->closing && !s->readers && s->closer)
		corio__ready(s->closer, 0);
}

int corio__sock_wait_data(struct corio_sock *s)
{
	struct corio__net *n = s->net;
	int ret;

	if (s->closing)
		return -EBADF;
	if (s->rwq.head)
		return -EBUSY;
	while (!s->qhead && !s->has_term) {
		if (s->r.state == NET_IDLE && !s->starved) {
			ret = corio__sock_arm(s);
			if (ret)
				return ret;
		}
		s->readers++;
		ret = corio__net_wait(&s->rwq);
		corio__sock_reader_leave(s);
		/* Closed while we waited: the closer runs only once we park
		 * again, so s is still there to look at, but not after. */
		if (s->closing)
			return -EBADF;
		if (ret < 0)
			return corio__net_err(n, ret);
	}
	return 0;
}

int corio__sock_op_wait(struct corio_sock *s, struct corio__op *op)
{
	struct corio__sock_uop u = { .op = op };
	bool closed;
	int ret;

	corio__list_add(&s->uops, &u.link);
	s->readers++;
	ret = corio__op_wait(op);
	corio__list_del(&u.link);
	closed = s->closing;
	corio__sock_reader_leave(s);
	/* bytes that arrived before the cancel landed are the caller's */
	return closed && ret < 0 ? -EBADF : ret;
}

ssize_t corio_recv_buf(struct corio_sock *s, struct corio_buf *b)
{
	struct corio__net *n = owner(s);
	struct corio__slice *q;
	int ret;

	if (!b)
		return corio__error(-EINVAL, "corio_recv_buf: b is NULL");
	b->data = NULL;
	b->len = 0;
	b->_owner = NULL;
	if (!n)
		return corio__sock_not_mine("corio_recv_buf", s);
	if (s->type != SOCK_STREAM)
		return corio__error(-EINVAL, "corio_recv_buf: not a stream socket "
					     "(use corio_recvfrom_buf)");
	ret = corio__may_block("corio_recv_buf"); /* cancellation first, data or not */
	if (ret)
		return ret;
	/* A send error ends the stream, but what already arrived comes first. */
	if (s->serr && !s->qhead)
		return s->serr;
	ret = corio__sock_wait_data(s);
	if (ret)
		return ret;
	q = s->qhead;
	if (!q)
		return s->rterm;
	/* the slice's reference goes to b */
	b->data = (char *)corio__net_slice_data(n, q) + s->qoff;
	b->len = q->len - s->qoff;
	b->_owner = n;
	b->_id = q->id;
	corio__sock_q_pop(s);
	CORIO__STAT_ADD(n->stats.bytes_in, b->len);
	uncap(s);
	return (ssize_t)b->len;
}

int corio_recv_bufs(struct corio_sock *s, struct corio_buf *b, int max)
{
	struct corio__net *n;
	ssize_t r;
	int count = 1;

	if (!b || max < 1)
		return corio__error(-EINVAL, "corio_recv_bufs: no room for a buffer");
	r = corio_recv_buf(s, &b[0]);
	if (r <= 0)
		return (int)r;
	n = s->net;
	/* More already queued? Take them without waiting. */
	while (count < max && s->qhead) {
		struct corio__slice *q = s->qhead;
		struct corio_buf *x = &b[count++];

		x->data = corio__net_slice_data(n, q);
		x->len = q->len;
		x->_owner = n;
		x->_id = q->id;
		corio__sock_q_pop(s);
		CORIO__STAT_ADD(n->stats.bytes_in, x->len);
	}
	uncap(s);
	return count;
}

void corio_buf_release(struct corio_buf *b)
{
	struct corio__net *n;

	if (!b || !b->_owner)
		return;
	n = b->_owner;
	if (n != corio__net()) {
		/* Released on the wrong shard: returning it here would corrupt
		 * another shard's ring. Leak it instead. */
		(void)corio__misuse(0, "corio_buf_release", "the buffer belongs to another "
				       "shard; it is leaked, not released");
		return;
	}
	buf_put(n, b->_id);
	b->_owner = NULL;
	b->data = NULL;
	b->len = 0;
}

ssize_t corio__sock_take(struct corio_sock *s, void *buf, size_t len)
{
	struct corio__net *n = s->net;
	struct corio__slice *q = s->qhead;
	size_t avail;

	if (!q)
		return s->rterm;
	if (len > INT32_MAX)
		len = INT32_MAX;
	avail = q->len - s->qoff;
	if (len > avail)
		len = avail;
	memcpy(buf, (char *)corio__net_slice_data(n, q) + s->qoff, len);
	s->qoff += (uint32_t)len;
	if (s->qoff == q->len) {
		buf_put(n, q->id);
		corio__sock_q_pop(s);
	}
	CORIO__STAT_ADD(n->stats.bytes_in, len);
	uncap(s);
	return (ssize_t)len;
}

ssize_t corio_recv(struct corio_sock *s, void *buf, size_t len)
{
	struct corio__net *n = owner(s);
	struct io_uring_sqe *sqe;
	struct corio__op op;
	int ret;

	if (!n)
		return corio__sock_not_mine("corio_recv", s);
	if (!buf || !len)
		return corio__error(-EINVAL, "corio_recv: empty buffer");
	ret = corio__may_block("corio_recv"); /* cancellation first, data or not */
	if (ret)
		return ret;
	if (len > INT32_MAX)
		len = INT32_MAX;
	/* A buffered UDP socket's ring buffers hold recvmsg headers: hand out
	 * the next datagram's payload, as recv(2) would. */
	if (s->type == SOCK_DGRAM && s->buffered)
		return corio_recvfrom(s, buf, len, NULL, NULL);
	if (s->serr && !s->qhead)
		return s->serr;
	if (s->buffered) {
		/* Keep the byte order: copy out of the buffered stream. */
		ret = corio__sock_wait_data(s);
		if (ret)
			return ret;
		return corio__sock_take(s, buf, len);
	}
	if (s->closing)
		return -EBADF;
	if (s->rwq.head)
		return -EBUSY;
	ret = corio__op_begin(&op, &sqe);
	if (ret)
		return ret;
	io_uring_prep_recv(sqe, s->fd, buf, len, 0);
	ret = corio__sock_op_wait(s, &op);
	if (ret == -EBADF)
		return ret; /* closed: s is gone */
	if (ret > 0) {
		CORIO__STAT_ADD(n->stats.ops_in, 1);
		CORIO__STAT_ADD(n->stats.bytes_in, (uint64_t)ret);
	} else if (ret < 0) {
		corio__net_err(n, ret);
	}
	return ret;
}

/* ---- direct sends ------------------------------------------------------------- */

/*
 * corio_send, corio_sendv and corio_send_buf first try a non-blocking
 * sendmsg(2) on the spot: what the socket's send buffer takes returns
 * without an SQE, a CQE, a park or a loop turn; only the rest (the buffer is
 * full: EAGAIN or a short write) goes through the ring, as does every send
 * made while other fibers are ready or SQEs are queued (it then shares the
 * loop's next enter with them: one syscall for all, where a direct try
 * would be one more). CORIO_NET_DISABLE=tcp_direct turns it off, and so
 * does CORIO_FAULTS, so that fault-injection runs meet every send in the
 * ring (where the faults are injected).
 */
static bool direct_ok(struct corio__net *n)
{
	return n->send_direct && !n->shard->runq_head &&
	       !corio__ring_pending(&n->shard->ring);
}

/* The bytes the socket took (0: none, use the ring) or -errno.
 * CORIO_NET_TCP_SHORT=N (tests) takes at most N bytes of the first iovec,
 * as a nearly full send buffer would: the callers' short-write paths. */
static ssize_t send_now(struct corio__net *n, struct corio_sock *s, struct msghdr *mh)
{
	struct iovec cut;
	struct msghdr one;
	ssize_t r;

	if (CORIO__UNLIKELY(n->tcp_short_test) && mh->msg_iovlen &&
	    (mh->msg_iovlen > 1 || mh->msg_iov[0].iov_len > n->tcp_short_test)) {
		cut = mh->msg_iov[0];
		if (cut.iov_len > n->tcp_short_test)
			cut.iov_len = n->tcp_short_test;
		one = (struct msghdr){ .msg_iov = &cut, .msg_iovlen = 1 };
		mh = &one;
	}
	r = sendmsg(s->fd, mh, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (r > 0) {
		CORIO__STAT_ADD(n->stats.ops_out, 1);
		CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)r);
		CORIO__STAT_ADD(n->stats.send_direct, 1);
		return r;
	}
	if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	return -errno;
}

/* For the blocking sends: deadline and cancellation are checked first, as
 * for every blocking call (the ring path makes the same checks). */
static ssize_t send_direct(struct corio__net *n, struct corio_sock *s, struct msghdr *mh)
{
	ssize_t r;

	if (!direct_ok(n))
		return 0;
	r = corio__may_block("corio_send"); /* or _sendv, _send_buf: one path */
	return r ? r : send_now(n, s, mh);
}

/* ---- asynchronous sends of borrowed buffers ----------------------------------- */

/*
 * corio_send_buf() queues a send record on the socket's FIFO and returns.
 * One send per socket is in the kernel at a time (separate SENDs on one
 * socket could reorder when one goes to poll-retry): the head record alone
 * (a SEND), or the first CORIO__SEND_GATHER records gathered into one
 * SENDMSG, so a connection whose queue grew while a send was out sends it
 * all with one SQE and one CQE. The completion callback gives back the
 * buffers of the records fully sent and submits what is left, from the
 * first unsent byte. The first error (or a cancel by close or shutdown) drops
 * every queued record, releasing its buffer, and is kept in s->serr for the
 * socket's next call. One op per socket counts in ops_inflight while the
 * queue is not empty, so the shard drains it before it stops.
 *
 * The queue holds at most net->send_cap records: a full one makes
 * corio_send_buf wait for room (counted in send_full), so a peer that does
 * not read stops its echo server's reads (and, through the receive cap,
 * its own sends) instead of draining the buffer ring into the queue.
 */

#define SREC_POOL_MAX 4096

static struct corio__srec *srec_get(struct corio__net *n)
{
	struct corio__srec *r = n->srec_free;

	if (!r)
		return malloc(sizeof(*r));
	n->srec_free = r->next;
	n->nsrec_free--;
	return r;
}

static void srec_put(struct corio__net *n, struct corio__srec *r)
{
	if (n->nsrec_free < SREC_POOL_MAX) {
		r->next = n->srec_free;
		n->srec_free = r;
		n->nsrec_free++;
	} else {
		free(r);
	}
}

/* Send the queue from its head: one record with a SEND, more gathered. */
static void srec_submit(struct corio_sock *s, struct corio__srec *r)
{
	struct io_uring_sqe *sqe = corio__ring_sqe(&s->net->shard->ring);
	unsigned k = 0;

	if (r->next && s->net->send_gather) {
		for (struct corio__srec *x = r; x && k < CORIO__SEND_GATHER; x = x->next, k++) {
			s->siov[k].iov_base = (void *)(x->p + x->off);
			s->siov[k].iov_len = x->len - x->off;
			if (k && !x->gathered) {
				x->gathered = true;
				CORIO__STAT_ADD(s->net->stats.send_gathered, 1);
			}
		}
		memset(&s->smsg, 0, sizeof(s->smsg));
		s->smsg.msg_iov = s->siov;
		s->smsg.msg_iovlen = k;
		io_uring_prep_sendmsg(sqe, s->fd, &s->smsg, MSG_NOSIGNAL);
	} else {
		io_uring_prep_send(sqe, s->fd, r->p + r->off, r->len - r->off, MSG_NOSIGNAL);
	}
	corio__sqe_set_op(sqe, &r->op);
}

/* Take the head off the queue: its buffer goes back to the ring. */
static void srec_pop(struct corio_sock *s)
{
	struct corio__srec *r = s->sq_head;

	s->sq_head = r->next;
	if (!s->sq_head)
		s->sq_tail = NULL;
	s->sq_count--;
	buf_put(s->net, r->bid);
	srec_put(s->net, r);
	corio__wq_wake_all(&s->sroom, 0);
}

/* res bytes of the queue went out: give back the records fully sent, move
 * the head's offset past the rest. */
static void srec_sent(struct corio_sock *s, uint32_t res)
{
	while (res && s->sq_head) {
		struct corio__srec *r = s->sq_head;
		uint32_t left = r->len - r->off;

		if (res < left) {
			r->off += res;
			return;
		}
		res -= left;
		r->off = r->len;
		srec_pop(s);
	}
}

static void srec_cb(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct corio__srec *r = op->data;
	struct corio_sock *s = r->s;
	struct corio__net *n = s->net;

	(void)flags;
	if (res > 0) {
		CORIO__STAT_ADD(n->stats.ops_out, 1);
		CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)res);
		srec_sent(s, (uint32_t)res); /* r may be back in the pool */
	} else if (!s->serr) {
		s->serr = res ? res : -EPIPE;
		corio__net_err(n, s->serr);
	}
	if (!s->serr && !s->sq_cancel && !n->stopping) {
		if (s->sq_head) {
			srec_submit(s, s->sq_head); /* a short write's rest, or the next */
			return;
		}
	} else {
		/* An error, close or shutdown: what is left is not sent. */
		if (!s->serr && s->sq_head)
			s->serr = -ECANCELED;
		while (s->sq_head)
			srec_pop(s);
	}
	s->sq_cancel = false;
	corio__list_del(&s->send_link);
	corio__op_finished(n->shard);
	if (s->closer)
		corio__ready(s->closer, 0);
	corio__wq_wake_all(&s->swq, 0);
}

/*
 * corio_send_buf on a full queue: wait until a queued send is done. 0, or
 * the socket's send error, or -ECANCELED / -ETIMEDOUT (the fiber's), or
 * -EAGAIN outside a fiber. A wait cut short fails this call alone: its
 * buffer was not queued and none of its bytes went, so the stream has no
 * hole, and the records queued before it (accepted: their calls returned
 * 0) must still go out. It is not stored in s->serr, which srec_cb reads
 * as "drop the queue".
 */
static int wait_room(struct corio_sock *s)
{
	struct corio__net *n = s->net;
	int ret = 0;

	CORIO__STAT_ADD(n->stats.send_full, 1);
	if (!corio__self())
		return -EAGAIN;
	while (!ret && s->sq_count >= n->send_cap) {
		ret = corio__net_wait(&s->sroom);
		if (!ret)
			ret = s->serr ? s->serr : s->wr_shut ? -EPIPE : n->stopping ? -ECANCELED : 0;
	}
	if (ret && ret != s->serr)
		corio__net_err(n, ret);
	return ret;
}

int corio_send_buf(struct corio_sock *s, struct corio_buf *b)
{
	struct corio__net *n = owner(s);
	struct corio__srec *r = NULL;
	ssize_t sent = 0;
	int ret = 0;

	if (!b || !b->_owner)
		return corio__error(-EINVAL, "corio_send_buf: not a borrowed buffer");
	if (b->_owner != corio__net())
		return corio__misuse(-EPERM, "corio_send_buf", "the buffer belongs to another shard");
	if (!n)
		ret = corio__sock_not_mine("corio_send_buf", s);
	else if (s->type != SOCK_STREAM)
		ret = corio__error(-EINVAL, "corio_send_buf: not a stream socket");
	else if (s->serr)
		ret = s->serr;
	else if (s->wr_shut)
		ret = -EPIPE;
	else if (n->stopping)
		ret = -ECANCELED;
	else if (b->len && s->sq_count >= n->send_cap)
		ret = wait_room(s);
	if (!ret && b->len && !s->sq_tail && direct_ok(n)) {
		/* Nothing queued on s: try it now. The buffer is back at once
		 * when the socket took it all; a short write queues the rest. */
		struct iovec v = { .iov_base = b->data, .iov_len = b->len };
		struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1 };

		sent = send_now(n, s, &mh);
		if (sent < 0) {
			s->serr = (int)sent;
			ret = corio__net_err(n, (int)sent);
		} else if ((size_t)sent == b->len) {
			b->len = 0; /* all sent: released below */
		}
	}
	if (!ret && b->len && !(r = srec_get(n))) {
		ret = -ENOMEM;
		if (sent)
			s->serr = ret; /* the byte stream has a hole */
	}
	if (ret || !b->len) {
		corio_buf_release(b);
		return ret;
	}
	r->op.cb = srec_cb;
	r->op.data = r;
	r->next = NULL;
	r->s = s;
	r->p = b->data;
	r->off = (uint32_t)sent;
	r->len = (uint32_t)b->len;
	r->bid = b->_id;
	r->gathered = false;
	b->_owner = NULL;
	b->data = NULL;
	b->len = 0;
	s->sq_count++;
	if (s->sq_tail) {
		s->sq_tail->next = r;
		s->sq_tail = r;
		return 0;
	}
	s->sq_head = s->sq_tail = r;
	srec_submit(s, r);
	corio__op_started(n->shard);
	corio__list_add(&n->sending, &s->send_link);
	return 0;
}

void corio__sock_send_cancel(struct corio_sock *s)
{
	if (s->sq_head && !s->sq_cancel) {
		s->sq_cancel = true;
		corio__ring_cancel(&s->net->shard->ring, &s->sq_head->op);
	}
}

/* Before a synchronous send: wait until the queued sends are out (byte
 * order). 0, the recorded send error, or -ECANCELED / -ETIMEDOUT. */
static int wait_sends(struct corio_sock *s)
{
	while (s->sq_head) {
		int ret = corio__net_wait(&s->swq);

		if (ret < 0)
			return corio__net_err(s->net, ret);
	}
	return s->serr;
}

static bool sends_idle(void *arg)
{
	return !((struct corio_sock *)arg)->sq_head;
}

/* Close / release: let the queued sends finish; when the fiber is cancelled,
 * its deadline passes or the shard stops, cancel them instead. Either way
 * wait for the last CQE, so the kernel holds no buffer afterwards. */
static void drain_sends(struct corio_sock *s)
{
	if (!s->sq_head)
		return;
	while (s->sq_head && !s->net->stopping && corio__net_wait(&s->swq) == 0)
		;
	if (!s->sq_head)
		return;
	corio__sock_send_cancel(s);
	s->closer = corio__self();
	corio__net_park_until(sends_idle, s);
	s->closer = NULL;
}

/* ---- send ------------------------------------------------------------------ */

/*
 * Zero-copy send posts two CQEs: the result (with IORING_CQE_F_MORE when a
 * notification follows) and, once the kernel let go of the pages, the
 * notification (IORING_CQE_F_NOTIF). The first CQE ends the op as far as
 * corio__op_wait() is concerned (its deadline and cancellation apply to the
 * send itself); the notification is waited for after it, separately.
 *
 * That wait must be bounded too: the pages are let go only when the data
 * is acknowledged, so a peer that stops reading holds them (and the call)
 * forever. When the fiber's deadline passes, it is cancelled or the shard
 * stops, the connection is aborted - connect(AF_UNSPEC), i.e.
 * tcp_disconnect(): a reset, and the write queue freed, which releases the
 * pages - and the call still waits for the notification (it then comes at
 * once), so the kernel holds no reference to buf when it returns.
 */
struct zc_op {
	struct corio__op op;
	corio__op_cb inner;
	struct corio__shard *shard;
	struct corio_fiber *parked; /* waiting for the notification, unbounded */
	struct corio_waitq wq;      /* waiting for the notification, bounded   */
	bool notif;                 /* a notification is still to come         */
};

static void zc_cb(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct zc_op *z = (struct zc_op *)op;

	if (flags & IORING_CQE_F_NOTIF) {
		z->notif = false;
		corio__op_finished(z->shard);
		corio__wq_wake_all(&z->wq, 0);
		if (z->parked)
			corio__ready(z->parked, 0);
		return;
	}
	if (flags & IORING_CQE_F_MORE) {
		z->notif = true;
		corio__op_started(z->shard); /* the shard waits for it too */
	}
	z->inner(op, res, flags & ~IORING_CQE_F_MORE);
}

static bool zc_done(void *arg)
{
	return !((struct zc_op *)arg)->notif;
}

/* Wait for z's notification; abort the connection if the wait is cut
 * short. 0, or -ETIMEDOUT / -ECANCELED when it was. */
static int zc_wait_notif(struct corio_sock *s, struct zc_op *z)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };
	int ret = 0;

	while (z->notif && !ret)
		ret = corio__wq_wait(&z->wq);
	if (!z->notif)
		return 0;
	/* Reset the connection so the kernel frees the pages now. */
	if (connect(s->fd, &sa, sizeof(sa)) < 0)
		shutdown(s->fd, SHUT_RDWR); /* not expected; at least stop sending */
	if (!s->serr)
		s->serr = -ECONNABORTED;
	z->parked = corio__self();
	corio__net_park_until(zc_done, z);
	z->parked = NULL;
	return ret;
}

static int send_once(struct corio_sock *s, const void *buf, size_t len, bool *zc)
{
	struct io_uring_sqe *sqe;
	struct zc_op z;
	int ret = corio__op_begin_who(&z.op, &sqe, "corio_send"), wret;

	if (ret)
		return ret;
	if (*zc) {
		io_uring_prep_send_zc(sqe, s->fd, buf, len, MSG_NOSIGNAL, 0);
		z.inner = z.op.cb;
		z.op.cb = zc_cb;
		z.shard = s->net->shard;
		z.parked = NULL;
		z.wq = (struct corio_waitq){ 0 };
		z.notif = false;
	} else {
		io_uring_prep_send(sqe, s->fd, buf, len, MSG_NOSIGNAL);
	}
	ret = corio__op_wait(&z.op);
	if (*zc && z.notif && (wret = zc_wait_notif(s, &z)) < 0)
		return wret; /* the connection is gone: what was sent is lost */
	if (*zc && (ret == -EOPNOTSUPP || ret == -EINVAL)) {
		/* The socket family has no zero-copy path (Unix): plain send. */
		*zc = false;
		return -EAGAIN;
	}
	return ret;
}

ssize_t corio_send_ex(struct corio_sock *s, const void *buf, size_t len, unsigned flags,
		      size_t *sent)
{
	struct corio__net *n = owner(s);
	bool zc;
	size_t done = 0;

	if (sent)
		*sent = 0;
	if (!n)
		return corio__sock_not_mine("corio_send", s);
	if (flags & ~CORIO_SEND_ZC)
		return corio__error(-EINVAL, "corio_send_ex: unknown flags 0x%x",
				    flags & ~CORIO_SEND_ZC);
	if (!buf && len)
		return corio__error(-EINVAL, "corio_send: buf is NULL");
	if (s->sq_head || s->serr) {
		int ret = wait_sends(s);

		if (ret)
			return ret;
	}
	zc = (flags & CORIO_SEND_ZC) && n->send_zc;
	if (!zc && n->send_direct && len) {
		struct iovec v = { .iov_base = (void *)buf, .iov_len = len };
		struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1 };
		ssize_t r = send_direct(n, s, &mh);

		if (r < 0)
			return corio__net_err(n, (int)r);
		done = (size_t)r;
		if (sent)
			*sent = done;
	}
	while (done < len) {
		size_t chunk = len - done > INT32_MAX ? INT32_MAX : len - done;
		int ret = send_once(s, (const char *)buf + done, chunk, &zc);

		if (ret == -EAGAIN)
			continue;
		if (ret < 0)
			return corio__net_err(n, ret);
		done += (size_t)ret;
		if (sent)
			*sent = done;
		CORIO__STAT_ADD(n->stats.ops_out, 1);
		CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)ret);
	}
	return (ssize_t)len;
}

ssize_t corio_send(struct corio_sock *s, const void *buf, size_t len)
{
	return corio_send_ex(s, buf, len, 0, NULL);
}

#define SENDV_BATCH 64

ssize_t corio_sendv(struct corio_sock *s, const struct iovec *iov, int iovcnt, size_t *sent)
{
	struct corio__net *n = owner(s);
	struct iovec v[SENDV_BATCH];
	size_t total = 0, done = 0;
	bool direct;
	int i = 0;

	if (sent)
		*sent = 0;
	if (!n)
		return corio__sock_not_mine("corio_sendv", s);
	if (iovcnt < 0 || (iovcnt && !iov))
		return corio__error(-EINVAL, "corio_sendv: %s",
				    iovcnt < 0 ? "iovcnt is negative" : "iov is NULL");
	if (s->sq_head || s->serr) {
		int ret = wait_sends(s);

		if (ret)
			return ret;
	}
	for (int k = 0; k < iovcnt; k++)
		total += iov[k].iov_len;
	direct = n->send_direct && total; /* the first send only (see send_direct) */
	/* Take up to SENDV_BATCH entries at a time (copies: iov is the
	 * caller's, and a short write advances our copy). */
	while (i < iovcnt) {
		int cnt = 0;
		size_t batch = 0;

		while (i + cnt < iovcnt && cnt < SENDV_BATCH) {
			v[cnt] = iov[i + cnt];
			batch += v[cnt].iov_len;
			cnt++;
		}
		i += cnt;
		for (int first = 0; batch;) {
			struct msghdr mh = { .msg_iov = v + first, .msg_iovlen = (size_t)(cnt - first) };
			struct io_uring_sqe *sqe;
			struct corio__op op;
			ssize_t ret;
			size_t r;

			if (direct) {
				direct = false;
				ret = send_direct(n, s, &mh);
			} else {
				ret = corio__op_begin(&op, &sqe);
				if (!ret) {
					io_uring_prep_sendmsg(sqe, s->fd, &mh, MSG_NOSIGNAL);
					ret = corio__op_wait(&op);
					if (ret >= 0) {
						CORIO__STAT_ADD(n->stats.ops_out, 1);
						CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)ret);
					}
				}
			}
			if (ret < 0)
				return corio__net_err(n, (int)ret);
			r = (size_t)ret;
			done += r;
			batch -= r;
			if (sent)
				*sent = done;
			while (first < cnt && r >= v[first].iov_len) {
				r -= v[first].iov_len;
				first++;
			}
			if (first < cnt) {
				v[first].iov_base = (char *)v[first].iov_base + r;
				v[first].iov_len -= r;
			}
		}
	}
	return (ssize_t)total;
}

/* ---- shutdown and close ------------------------------------------------------ */

int corio_shutdown_write(struct corio_sock *s)
{
	struct corio__net *n = owner(s);
	struct io_uring_sqe *sqe;
	struct corio__op op;
	int ret;

	if (!n)
		return corio__sock_not_mine("corio_shutdown_write", s);
	if (s->sq_head || s->serr) {
		ret = wait_sends(s);
		if (ret)
			return ret;
	}
	ret = corio__op_begin(&op, &sqe);
	if (ret)
		return ret;
	io_uring_prep_shutdown(sqe, s->fd, SHUT_WR);
	ret = corio__op_wait(&op);
	if (ret < 0)
		return corio__net_err(n, ret);
	s->wr_shut = true;
	return 0;
}

static bool rop_idle(void *arg)
{
	struct corio_sock *s = arg;

	return s->r.state == NET_IDLE && s->h.state == NET_IDLE;
}

/* Take s's receive out of the kernel: cancel it and wait for its last CQE. */
static void quiesce(struct corio_sock *s)
{
	struct corio__net *n = s->net;

	corio__list_del(&s->starved_link);
	s->starved = false;
	if (rop_idle(s))
		return;
	if (s->r.state == NET_ARMED) {
		s->r.state = NET_CANCELING;
		corio__ring_cancel(&n->shard->ring, &s->r.op);
	}
	if (s->h.state == NET_ARMED) {
		s->h.state = NET_CANCELING;
		corio__ring_cancel(&n->shard->ring, &s->h.op);
	}
	s->closer = corio__self();
	assert(s->closer);
	corio__net_park_until(rop_idle, s);
	s->closer = NULL;
}

static bool no_readers(void *arg)
{
	return !((struct corio_sock *)arg)->readers;
}

/* Close with receives parked on s: wake each with -EBADF (a copying one
 * through the cancel of its op) and wait until all have left, so none
 * touches s once it is freed and the kernel holds the fd no more. */
static void evict_readers(struct corio_sock *s)
{
	struct corio__net *n = s->net;

	if (!s->readers)
		return;
	corio__wq_wake_all(&s->rwq, -EBADF);
	for (struct corio__link *l = s->uops.next; l != &s->uops; l = l->next)
		corio__ring_cancel(&n->shard->ring,
				   CORIO__CONTAINER(l, struct corio__sock_uop, link)->op);
	s->closer = corio__self();
	corio__net_park_until(no_readers, s);
	s->closer = NULL;
}

static void drop_queue(struct corio_sock *s)
{
	while (s->qhead) {
		buf_put(s->net, s->qhead->id);
		corio__sock_q_pop(s);
	}
}

int corio_close(struct corio_sock *s)
{
	struct corio__net *n = owner(s);
	int ret = 0;

	if (!n)
		return corio__sock_not_mine("corio_close", s);
	if (s->closing)
		return corio__error(-EBADF, "corio_close: another fiber is closing this socket");
	if ((!rop_idle(s) || s->sq_head || s->readers) && !corio__self())
		return corio__error(-EPERM, "corio_close: the socket has kernel work in "
				    "flight and %s", corio__not_fiber_why());
	s->closing = true; /* no receive starts from now on */
	evict_readers(s);
	drain_sends(s);
	quiesce(s);
	drop_queue(s);
	set_live(s, false);
	if (close(s->fd) < 0)
		ret = -errno;
	corio__sock_free(s);
	return ret;
}

int corio_sock_release_fd(struct corio_sock *s)
{
	struct corio__net *n = owner(s);
	int fd;

	if (!n)
		return corio__sock_not_mine("corio_sock_release_fd", s);
	if (s->closing)
		return corio__error(-EBADF, "corio_sock_release_fd: another fiber is closing "
				    "this socket");
	if (s->readers)
		return corio__error(-EBUSY, "corio_sock_release_fd: a fiber waits to receive "
				    "on this socket");
	if ((!rop_idle(s) || s->sq_head) && !corio__self())
		return corio__error(-EPERM, "corio_sock_release_fd: the socket has kernel "
				    "work in flight and %s", corio__not_fiber_why());
	drain_sends(s);
	quiesce(s);
	if (s->qhead)
		return -EBUSY;
	fd = s->fd;
	set_live(s, false);
	corio__sock_free(s);
	return fd;
}

/* ---- details ----------------------------------------------------------------- */

int corio_sock_fd(const struct corio_sock *s)
{
	if (s && s->dead)
		return corio__sock_not_mine("corio_sock_fd", s);
	return s ? s->fd : corio__error(-EINVAL, "corio_sock_fd: s is NULL");
}

int corio_sock_local_addr(struct corio_sock *s, struct sockaddr_storage *addr, socklen_t *len)
{
	socklen_t l = sizeof(*addr);

	if (!s || !addr)
		return corio__error(-EINVAL, "corio_sock_local_addr: %s is NULL",
				    s ? "addr" : "s");
	if (getsockname(s->fd, (struct sockaddr *)addr, &l) < 0)
		return -errno;
	if (len)
		*len = l;
	return 0;
}

int corio_sock_peer_addr(struct corio_sock *s, struct sockaddr_storage *addr, socklen_t *len)
{
	socklen_t l = sizeof(*addr);

	if (!s || !addr)
		return corio__error(-EINVAL, "corio_sock_peer_addr: %s is NULL",
				    s ? "addr" : "s");
	if (getpeername(s->fd, (struct sockaddr *)addr, &l) < 0)
		return -errno;
	if (len)
		*len = l;
	return 0;
}

int corio_setsockopt(struct corio_sock *s, int level, int name, const void *val, socklen_t len)
{
	if (!s)
		return corio__error(-EINVAL, "corio_setsockopt: s is NULL");
	return setsockopt(s->fd, level, name, val, len) < 0 ? -errno : 0;
}

int corio_getsockopt(struct corio_sock *s, int level, int name, void *val, socklen_t *len)
{
	if (!s)
		return corio__error(-EINVAL, "corio_getsockopt: s is NULL");
	return getsockopt(s->fd, level, name, val, len) < 0 ? -errno : 0;
}
