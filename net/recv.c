/* SPDX-License-Identifier: MIT */
/*
 * net/recv.c - receiving on connected sockets, in the order a message
 * travels: the receive-buffer policy (the rings, the budget, recycling),
 * arming a receive, its CQE queueing the bytes on the socket, re-arming
 * receives an empty ring stopped, and the reader taking the bytes (borrowed
 * with corio_recv_buf, or copied with corio_recv) and giving them back.
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
 * Flow control: a socket holds at most s->cap.recv queued, unread slices
 * (each within one buffer; the cap's sources and precedence are corio.h's
 * contract, net/shard.c reads them); the rest stays in the socket, so the
 * peer's window closes and one unread connection cannot take the whole
 * ring. The multishot is armed
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
#include <poll.h>
#include <stdlib.h>
#include <string.h>

/* ---- the receive-buffer policy: rings, recycling, slices, budget ---------- */

/*
 * Every receive buffer a net call touches comes and goes here: which ring a
 * socket receives into (corio__net_bufs, corio__net_dbufs), a buffer's
 * return (corio__net_buf_put, for slices, borrowed corio_bufs and sent
 * records alike), the slice records, and the budget that decides how many
 * buffers a stream receive may take (corio__sock_arm, the CQE handler and
 * the part's poll ask it). uring/bufring.c keeps the rings themselves.
 */

static int ring_init(struct corio__net *n, struct corio__bufring *b, uint16_t bgid, bool inc)
{
	unsigned nbufs = n->nbufs, size = n->bufsz;
	int ret;

	ret = corio__bufring_init(b, &n->shard->ring, bgid, nbufs, size, !corio__net_disabled(n, NO_BUFRING),
				  inc && !corio__net_disabled(n, NO_PBUF_INC));
	if (ret)
		return corio__error(ret, "net: cannot set up %u receive buffers of %u bytes: %s",
				    nbufs, size, strerror(-ret));
	b->out = &n->stats.bufs_out; /* both rings count there, as they go */
	return 0;
}

int corio__net_bufs(struct corio__net *n)
{
	int ret;

	if (CORIO__LIKELY(n->bufs_ready))
		return 0;
	ret = ring_init(n, &n->bufs, 0, true);
	if (ret)
		return ret;
	if (!corio__bufring_kernel(&n->bufs))
		n->multishot_recv = false; /* user mode is single-shot */
	n->reserve_bufs = (unsigned)((uint64_t)n->bufs.nbufs * n->reserve_pct / 100);
	n->bufs_ready = true;
	return 0;
}

int corio__net_dbufs(struct corio__net *n)
{
	int ret;

	if (n->bufs_ready && !n->bufs.inc)
		return 0; /* share the stream ring: it holds whole buffers */
	if (!n->dbufs_ready) {
		/* A datagram is cut to the room left in an incremental buffer:
		 * datagrams get whole buffers of their own (bgid 1). */
		ret = ring_init(n, &n->dbufs, 1, false);
		if (ret)
			return ret;
		n->reserve_dbufs = (unsigned)((uint64_t)n->dbufs.nbufs * n->reserve_pct / 100);
		n->dbufs_ready = true;
	}
	return CORIO__NET_DRING;
}

/* At the part's fini, after every op is done. */
void corio__net_bufs_fini(struct corio__net *n)
{
	/* for the leak census, which runs after the rings are gone */
	n->lent_at_fini = corio__bufring_lent(&n->bufs) + corio__bufring_lent(&n->dbufs);
	if (n->bufs_ready)
		corio__bufring_fini(&n->bufs, &n->shard->ring);
	if (n->dbufs_ready)
		corio__bufring_fini(&n->dbufs, &n->shard->ring);
	while (n->slice_chunks) {
		struct corio__slice *c = n->slice_chunks;

		n->slice_chunks = c->next;
		free(c);
	}
	n->slice_free = NULL;
}

/* The slice records: a free list refilled a chunk at a time, never freed
 * before the part's fini. */
#define SLICE_CHUNK 256

static void slice_put(struct corio__net *n, struct corio__slice *q)
{
	q->next = n->slice_free;
	n->slice_free = q;
}

static __attribute__((noinline, cold)) int slices_grow(struct corio__net *n)
{
	/* one chunk: a link word, then SLICE_CHUNK records */
	struct corio__slice *c = malloc(sizeof(*c) * (SLICE_CHUNK + 1));

	if (!c)
		return -ENOMEM;
	c[0].next = n->slice_chunks;
	n->slice_chunks = c;
	for (unsigned i = 1; i <= SLICE_CHUNK; i++)
		slice_put(n, &c[i]);
	return 0;
}

/* A slice record, or NULL when out of memory. */
static inline struct corio__slice *slice_get(struct corio__net *n)
{
	struct corio__slice *q = n->slice_free;

	if (CORIO__UNLIKELY(!q)) {
		if (slices_grow(n))
			return NULL;
		q = n->slice_free;
	}
	n->slice_free = q->next;
	return q;
}

/*
 * The shard-wide receive budget (corio__sock_arm). A stream socket holds
 * the buffers queued on it unread and its queued corio_send_buf records
 * (corio_send_owned records hold the caller's memory, not the ring's, and
 * count for nothing). One that holds
 * none may always take one buffer (its receive is armed for one buffer's
 * worth: from the reserve, a single shot, once the ring is down to it). One
 * that holds some is armed only while the ring has more free than the
 * reserve plus what receives armed before were promised, and for at most
 * that many buffers (its promise, the multishot's byte limit). So sockets
 * that already hold data - however many - never take the reserve, which
 * stays for the ones that do not.
 */
static unsigned holds(const struct corio_sock *s)
{
	return (unsigned)s->qcount + s->sq_count - s->sq_owned;
}

static unsigned ring_reserve(const struct corio__net *n, const struct corio__bufring *b)
{
	/* each ring's is kept, worked out once as the ring is set up */
	return b == &n->bufs ? n->reserve_bufs : n->reserve_dbufs;
}

/* Buffers of b a holding socket may be promised now. */
static unsigned budget_room(const struct corio__net *n, const struct corio__bufring *b)
{
	uint64_t used = (uint64_t)ring_reserve(n, b) + n->promised;

	return b->in_ring > used ? (unsigned)(b->in_ring - used) : 0;
}

static bool budget_ok(const struct corio__net *n, const struct corio_sock *s,
		      const struct corio__bufring *b)
{
	return s->type != SOCK_STREAM || !holds(s) || budget_room(n, b);
}

/* ---- arming a receive -------------------------------------------------------- */

static void starve(struct corio_sock *s)
{
	struct corio__net *n = s->net;

	if (!s->starved) {
		s->starved = true;
		corio__list_add(&n->starved, &s->starved_link);
		n->nstarved++;
		corio__part_want(n->shard, CORIO__PART_NET);
		CORIO__STAT_SET(n->stats.starved, n->nstarved);
	}
}

/*
 * On newer kernels (docs/NET.md, "Fallbacks", says which) a multishot
 * recv takes a total byte limit in
 * sqe->optlen (the 32 bits liburing 2.3 calls addr_len and __pad3) and ends
 * once it has received that much: the receive cap then holds exactly,
 * where cancelling it from a CQE lets the kernel fill a few dozen more
 * buffers first. Older kernels ignore the field or reject it with -EINVAL
 * (corio__sock_recv_cb then turns the limit off).
 */
static void mshot_limit(struct io_uring_sqe *sqe, struct corio_sock *s, unsigned room)
{
	struct corio__net *n = s->net;
	uint64_t bytes = (uint64_t)room * n->bufs.size; /* a slice is at most a buffer */
	uint32_t lim = bytes > INT32_MAX ? INT32_MAX : (uint32_t)bytes;

	memcpy(&sqe->addr_len, &lim, sizeof(lim));
}

/* The error/hang-up poll beside a stream socket's multishot recv (see the
 * top of the file). */
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
		unsigned room = s->cap.recv > s->qcount ? s->cap.recv - s->qcount : 1;
		unsigned avail = budget_room(n, ring);

		if (!n->reserve_pct) {
			lim = room; /* CORIO_NET_RECV_RESERVE=0: per-socket caps only */
		} else if (!holds(s)) {
			/* One buffer's worth, promised to no one: what s takes
			 * beyond it is asked for once it holds it. From the
			 * reserve, a single shot, when the rest is gone. */
			lim = 1;
			reserve = ring->in_ring <= ring_reserve(n, ring) + n->promised;
		} else if (!avail) {
			CORIO__STAT_ADD(n->stats.recv_budget, 1);
			starve(s); /* the part's poll arms it once the budget has room */
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

/* ---- the receive's completions ------------------------------------------------ */

/* Queue the slice [off, off + len) of buffer id; it brings the reference
 * the caller took. False when out of slice records. */
static inline __attribute__((always_inline)) bool q_push(struct corio_sock *s, uint32_t id,
							  uint32_t off, uint32_t len)
{
	struct corio__slice *q = slice_get(s->net);

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

/* The slice [off, off + len) of buffer id goes to the parked reader's
 * buffer, with the reference the caller took: no slice record, no queue. */
static inline __attribute__((always_inline)) void hand(struct corio_sock *s, struct corio__net *n,
							struct corio__bufring *ring, uint32_t id,
							uint32_t off, uint32_t len)
{
	struct corio_buf *b = s->rdirect;

	s->rdirect = NULL;
	b->data = (char *)corio__bufring_addr(ring, id) + off;
	b->len = len;
	b->_owner = n;
	b->_id = id | s->rtag;
}

/*
 * A receive CQE, in three steps: take its bytes (queue the slice of its
 * buffer, or give the buffer back), read its result (the stream's end or
 * error, an empty ring, a kernel that refuses the byte limit), then decide
 * what the receive does next (it ended; or the cap or the budget stops
 * it). The reader is woken last.
 */

/* Step 1: queue the bytes the CQE brought, or give back its buffer. The
 * result, which becomes -ENOMEM when the bytes could not be queued (they
 * are lost, so the stream ends there). */
static int32_t recv_take(struct corio_sock *s, struct corio__bufring *ring, int32_t res,
			 uint32_t flags, bool more)
{
	struct corio__net *n = s->net;

	if (s->promise && (res > 0 || !more)) {
		/* one promised buffer taken; the final CQE frees the rest */
		unsigned k = more ? 1 : s->promise;

		s->promise -= (uint16_t)k;
		n->promised -= k;
	}
	if (corio__bufring_kernel(ring)) {
		uint32_t off;
		int bid = corio__bufring_cqe(ring, res, flags, &off);

		/* The parked corio_recv_buf(s) takes the bytes straight, when
		 * the queue is empty (it parks only then) and it still waits:
		 * whatever took it off rwq (a cancel, a deadline, the close)
		 * leaves them to the queue. After -ENOMEM lost bytes, later ones
		 * must not follow them. */
		if (bid >= 0 && s->rdirect && s->rwq.head && !s->has_term) {
			hand(s, n, ring, (uint32_t)bid, off, (uint32_t)res);
		} else if (bid >= 0 && (s->has_term || !q_push(s, (uint32_t)bid | s->rtag, off,
								 (uint32_t)res))) {
			corio__net_buf_put(n, (uint32_t)bid | s->rtag);
			res = -ENOMEM; /* the bytes are lost: end the stream */
			if (more) {
				s->r.state = NET_CANCELING; /* before the cancel, as everywhere */
				corio__ring_cancel(&n->shard->ring, &s->r.op);
			}
		}
	} else if (res > 0) {
		/* user mode: the buffer we took in corio__sock_arm() */
		if (!q_push(s, s->ubid | s->rtag, 0, (uint32_t)res)) {
			corio__net_buf_put(n, s->ubid | s->rtag);
			res = -ENOMEM;
		}
	} else {
		corio__net_buf_put(n, s->ubid | s->rtag);
	}
	return res;
}

/* Step 2: what the result says of the stream. True when the ring was
 * empty (-ENOBUFS: nothing consumed, the receive is to starve). */
static bool recv_result(struct corio_sock *s, int32_t res, bool more)
{
	struct corio__net *n = s->net;

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
		return true;
	} else if (res != -ECANCELED) {
		/* 0: end of stream; < 0: the connection's error. (-ECANCELED
		 * only ever comes from our own cancel: close or shutdown.) */
		s->has_term = true;
		s->rterm = res;
		if (res < 0)
			corio__net_err(n, res);
	}
	return false;
}

/* Stop a multishot receive that is still armed; its reader re-arms it. */
static void recv_stop(struct corio_sock *s)
{
	s->r.state = NET_CANCELING;
	corio__ring_cancel(&s->net->shard->ring, &s->r.op);
	s->capped = true;
}

/* Step 3: the receive ended (its last CQE), or a queue at its cap or a
 * ring down to its reserve stops it. */
static void recv_next(struct corio_sock *s, const struct corio__bufring *ring, bool more,
		      bool enobufs)
{
	struct corio__net *n = s->net;

	if (!more) {
		s->r.state = NET_IDLE;
		corio__list_del(&s->r.link);
		corio__op_finished(n->shard);
		if (s->closer)
			corio__ready(s->closer, 0);
		else if (enobufs && !n->stopping)
			starve(s);
	} else if (s->qcount >= s->cap.recv && s->r.state == NET_ARMED) {
		/* Nobody reads fast enough: leave the rest in the socket. The
		 * kernel may fill more buffers before the cancel lands, so
		 * without a byte limit the socket receives with single shots
		 * (one buffer each) from now on. */
		recv_stop(s);
		s->slow = true;
		CORIO__STAT_ADD(n->stats.recv_capped, 1);
	} else if (ring->in_ring <= ring_reserve(n, ring) && s->r.state == NET_ARMED &&
		   s->type == SOCK_STREAM && holds(s)) { /* the rare test first */
		/* The ring is down to its reserve and s holds buffers (a
		 * kernel without the byte limit, or whole buffers filled by
		 * small receives): stop it; its reader re-arms it and
		 * corio__sock_arm asks the budget again. */
		recv_stop(s);
		CORIO__STAT_ADD(n->stats.recv_budget, 1);
	}
}

void corio__sock_recv_cb(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct corio_sock *s = op->data;
	struct corio__bufring *ring = corio__net_ring(s->net, s->rtag);
	bool more = flags & IORING_CQE_F_MORE;

	res = recv_take(s, ring, res, flags, more);
	recv_next(s, ring, more, recv_result(s, res, more));
	corio__wq_wake_all(&s->rwq, 0);
}

/* The error/hang-up poll beside a stream socket's multishot recv. */
void corio__sock_hup_cb(struct corio__op *op, int32_t res, uint32_t flags)
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

/* ---- re-arming starved receives (the part's poll) ---------------------------- */

/*
 * Re-arm receives that an empty ring (or the budget) stopped, once buffers
 * came back, in the order they stopped (net->starved is a FIFO). A socket
 * whose reader waits gets a free buffer; one nobody waits on only when the
 * ring has some slack, so a slow consumer holding buffers does not make the
 * others ping-pong on ENOBUFS. Each call arms at most one receive per
 * buffer free now: arming every starved socket at the first buffer back
 * had all but one of them stop on ENOBUFS again, once per returned buffer.
 *
 * The count starts afresh at every call, and that is what keeps a starved
 * receive from waiting for good. A receive armed here on a socket with
 * bytes waiting completes at the submit that follows (its CQE is reaped in
 * the same turn), so the next call sees the buffer it took. One armed on a
 * socket with nothing to read (its reader found the ring dry before its
 * peer had sent anything) takes no buffer until bytes come, maybe never.
 * Counting such receives against the free buffers until their first CQE,
 * as this poll once did, let 64 idle readers use up a 64-buffer ring's
 * room for good: every socket starved after them waited forever with
 * every buffer back in the ring (issue 31: 1,804-2,555 of a 5,000
 * connection burst). net::burst_of_5000_on_a_small_ring_serves_every_connection
 * holds it.
 */
void corio__sock_unstarve(struct corio_sock *s)
{
	struct corio__net *n = s->net;

	corio__list_del(&s->starved_link);
	s->starved = false;
	n->nstarved--;
	CORIO__STAT_SET(n->stats.starved, n->nstarved);
}

unsigned corio__net_recv_poll(struct corio__shard *sh)
{
	struct corio__net *n = sh->parts[CORIO__PART_NET];
	struct corio__link *l, *next;
	unsigned work = 0, room[2];

	if (!n || n->starved.next == &n->starved || n->stopping)
		return 0;
	corio__part_want(sh, CORIO__PART_NET); /* until none is starved */
	room[0] = n->bufs.in_ring;
	room[1] = n->dbufs.in_ring;
	for (l = n->starved.next; l != &n->starved && (room[0] || room[1]); l = next) {
		struct corio_sock *s = CORIO__CONTAINER(l, struct corio_sock, starved_link);
		const struct corio__bufring *b = corio__net_ring(n, s->rtag);
		unsigned *r = &room[s->rtag ? 1 : 0];
		unsigned slack = b->nbufs / 8 ? b->nbufs / 8 : 1;

		bool again;

		next = l->next;
		if (!*r || (!s->rwq.head && *r < slack) || !budget_ok(n, s, b))
			continue;
		corio__sock_unstarve(s);
		/* an arm that starved before the socket's first receive is not
		 * a re-arm to corio__sock_arm; armed from here, it counts as one
		 * (starved_armed is part of rearms, net.h) */
		again = s->buffered;
		if (s->qcount >= s->cap.recv) {
			s->capped = true; /* its reader re-arms it */
		} else if (s->r.state == NET_IDLE && !s->has_term && corio__sock_arm(s) == 0 &&
			   s->r.state == NET_ARMED) {
			if (!again)
				CORIO__STAT_ADD(n->stats.rearms, 1);
			CORIO__STAT_ADD(n->stats.starved_armed, 1);
			(*r)--;
			work++;
		}
	}
	return work;
}

/* ---- the reader ------------------------------------------------------------- */

/* After the reader took buffers: re-arm a receive the cap stopped once
 * half the queue is consumed (not at every buffer: each arm is an SQE). */
static void uncap(struct corio_sock *s)
{
	if (s->capped && s->qcount <= s->cap.recv / 2 && s->r.state == NET_IDLE &&
	    !s->starved && !s->has_term)
		(void)corio__sock_arm(s); /* on failure the next wait arms it */
}

void corio__sock_q_pop(struct corio_sock *s)
{
	struct corio__slice *q = s->qhead;

	s->qhead = q->next;
	if (!s->qhead)
		s->qtail = NULL;
	s->qoff = 0;
	s->qcount--;
	slice_put(s->net, q);
}

void corio__sock_reader_leave(struct corio_sock *s)
{
	s->readers--;
	if (s->closing && !s->readers && s->closer)
		corio__ready(s->closer, 0);
}

/* corio__sock_wait_data, inline for corio_recv_buf(s): the reader's park
 * once a message. With b (corio_recv_buf(s)'s buffer), bytes that arrive
 * while it waits may be handed straight to b (hand()); 0 then means b
 * holds them, and the queue may hold more after them. me: the caller's
 * fiber when corio__may_block_fiber found it free to park, so the first
 * park skips that test; a second park tests again (a cancel inside an
 * uninterruptible section marks the fiber without waking it). */
static inline __attribute__((always_inline)) int wait_data(struct corio_sock *s,
							   struct corio_buf *b,
							   struct corio_fiber *me)
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
		s->rdirect = b;
		ret = me ? corio__wq_park(me->shard, me, &s->rwq) : corio__wq_wait(&s->rwq);
		me = NULL;
		s->rdirect = NULL;
		corio__sock_reader_leave(s);
		/* Closed while we waited: the closer runs only once we park
		 * again, so s is still there to look at, but not after. Bytes
		 * handed to b go with the rest of the queue the close drops. */
		if (s->closing) {
			if (b && b->_owner)
				corio__net_buf_give_back(n, b);
			return -EBADF;
		}
		if (b && b->_owner)
			return 0; /* bytes first, whatever else woke us */
		if (ret < 0)
			return corio__net_err(n, ret);
	}
	return 0;
}

int corio__sock_wait_data(struct corio_sock *s)
{
	return wait_data(s, NULL, NULL);
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

/* corio_recv_buf, inline in it and in corio_recv_bufs (no second call a
 * message). */
static inline __attribute__((always_inline)) ssize_t recv_buf(struct corio_sock *s,
							      struct corio_buf *b, bool more)
{
	struct corio__net *n = corio__sock_owner(s);
	struct corio__slice *q;
	struct corio_fiber *me;
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
	me = corio__may_block_fiber("corio_recv_buf", &ret); /* cancellation first, data or not */
	if (ret)
		return ret;
	/* A send error ends the stream, but what already arrived comes first. */
	if (s->serr && !s->qhead)
		return s->serr;
	ret = wait_data(s, b, me);
	if (ret)
		return ret;
	if (!b->_owner) { /* else the bytes were handed straight to b */
		q = s->qhead;
		if (!q)
			return s->rterm;
		/* the slice's reference goes to b */
		b->data = (char *)corio__net_slice_data(n, q) + s->qoff;
		b->len = q->len - s->qoff;
		b->_owner = n;
		b->_id = q->id;
		corio__sock_q_pop(s);
	}
	CORIO__STAT_ADD(n->stats.bytes_in, b->len);
	s->rx += b->len;
	if (!more) /* else the caller takes more first, then uncaps */
		uncap(s);
	return (ssize_t)b->len;
}

ssize_t corio_recv_buf(struct corio_sock *s, struct corio_buf *b)
{
	return recv_buf(s, b, false);
}

int corio_recv_bufs(struct corio_sock *s, struct corio_buf *b, int max)
{
	struct corio__net *n;
	ssize_t r;
	int count = 1;

	if (!b || max < 1)
		return corio__error(-EINVAL, "corio_recv_bufs: no room for a buffer");
	r = recv_buf(s, &b[0], true);
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
		s->rx += x->len;
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
	corio__net_buf_give_back(n, b);
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
		corio__net_buf_put(n, q->id);
		corio__sock_q_pop(s);
	}
	CORIO__STAT_ADD(n->stats.bytes_in, len);
	s->rx += len;
	uncap(s);
	return (ssize_t)len;
}

ssize_t corio_recv(struct corio_sock *s, void *buf, size_t len)
{
	struct corio__net *n = corio__sock_owner(s);
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
		s->rx += (uint64_t)ret;
	} else if (ret < 0) {
		corio__net_err(n, ret);
	}
	return ret;
}
