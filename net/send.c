/* SPDX-License-Identifier: MIT */
/*
 * net/send.c - sending on connected sockets: a direct send(2)/sendmsg(2) first
 * where that saves a loop turn, the queue of borrowed buffers behind
 * corio_send_buf (its cap, gathering, its completion), the blocking sends
 * with all-or-error semantics (zero-copy option), shutdown of the write
 * side.
 */
#include "net/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

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
static inline __attribute__((always_inline)) bool direct_ok(struct corio__net *n)
{
	return n->send_direct && !n->shard->runq_active &&
	       !corio__ring_pending(&n->shard->ring);
}

/* A direct send's result r: counted when bytes went; 0 when the socket
 * took none (use the ring), else r. */
static inline ssize_t sent_now(struct corio__net *n, struct corio_sock *s, ssize_t r)
{
	if (r > 0) {
		CORIO__STAT_ADD(n->stats.ops_out, 1);
		CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)r);
		CORIO__STAT_ADD(n->stats.send_direct, 1);
		s->tx += (uint64_t)r;
		return r;
	}
	if (r == 0 || r == -EAGAIN || r == -EWOULDBLOCK || r == -EINTR)
		return 0;
	return r;
}

/* The bytes the socket took (0: none, use the ring) or -errno.
 * CORIO_NET_TCP_SHORT=N (tests) takes at most N bytes of the first iovec,
 * as a nearly full send buffer would: the callers' short-write paths. */
static ssize_t send_now(struct corio__net *n, struct corio_sock *s, struct msghdr *mh,
			int more)
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
	/* One buffer, no address or control data (every corio_send and a
	 * single corio_send_buf): send(2) skips the kernel's copy and check
	 * of the msghdr and its iovec array. */
	if (mh->msg_iovlen == 1 && !mh->msg_name && !mh->msg_controllen)
		r = corio__sys_send(s->fd, mh->msg_iov[0].iov_base, mh->msg_iov[0].iov_len,
				    MSG_DONTWAIT | MSG_NOSIGNAL | more);
	else
		r = corio__sys_sendmsg(s->fd, mh, MSG_DONTWAIT | MSG_NOSIGNAL | more);

	return sent_now(n, s, r);
}

/* For the blocking sends: deadline and cancellation are checked first, as
 * for every blocking call (the ring path makes the same checks). */
static ssize_t send_direct(struct corio__net *n, struct corio_sock *s, struct msghdr *mh,
			   int more)
{
	ssize_t r;

	if (!direct_ok(n))
		return 0;
	r = corio__may_block("corio_send"); /* or _sendv, _send_buf: one path */
	return r ? r : send_now(n, s, mh, more);
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
 * The queue holds at most s->cap.send records: a full one makes
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
		corio__prep_send(sqe, s->fd, r->p + r->off, r->len - r->off, MSG_NOSIGNAL);
	}
	corio__sqe_set_op(sqe, &r->op);
}

/* Owned records taken off a queue whose done callback is still to run,
 * in queue order. srec_cb calls them only once the socket's queue is
 * consistent again, so a callback may queue the next send on the same
 * socket. */
struct srec_fin {
	struct corio__srec *head, **tail;
};

/* res bytes of s's queue went out. */
static inline __attribute__((always_inline)) void srec_count(struct corio_sock *s, int32_t res)
{
	struct corio__net *n = s->net;

	CORIO__STAT_ADD(n->stats.ops_out, 1);
	CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)res);
	s->tx += (uint64_t)res;
}

/* Take the head off the queue: a borrowed buffer goes back to the ring, an
 * owned record onto fin with res for its done callback (fin may be NULL
 * when the head is known to be borrowed). */
static inline __attribute__((always_inline)) void srec_pop(struct corio_sock *s, int32_t res,
							    struct srec_fin *fin)
{
	struct corio__srec *r = s->sq_head;

	s->sq_head = r->next;
	if (!s->sq_head)
		s->sq_tail = NULL;
	s->sq_count--;
	if (r->owned) {
		s->sq_owned--;
		r->res = res;
		r->next = NULL;
		*fin->tail = r;
		fin->tail = &r->next;
	} else {
		corio__net_buf_put(s->net, r->bid);
		if (r != &s->srec1)
			srec_put(s->net, r);
	}
	corio__wq_wake_all(&s->sroom, 0);
}

/* res bytes of the queue went out: give back the records fully sent, move
 * the head's offset past the rest. */
static inline __attribute__((always_inline)) void srec_sent(struct corio_sock *s, uint32_t res,
							     struct srec_fin *fin)
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
		srec_pop(s, (int32_t)r->len, fin);
	}
}

/* Run the done callbacks srec_cb collected; each record is back in the
 * pool before its callback runs. */
static void srec_finish(struct corio__net *n, struct srec_fin *fin)
{
	struct corio__srec *r = fin->head, *next;

	for (; r; r = next) {
		void (*done)(void *, int) = r->done;
		void *arg = r->arg;
		int res = r->res;

		next = r->next;
		srec_put(n, r);
		if (done)
			done(arg, res);
	}
}

/* The queue's op ended (nothing more in the kernel): wake who waits. */
static inline __attribute__((always_inline)) void srec_idle(struct corio_sock *s)
{
	s->sq_cancel = false;
	corio__list_del(&s->send_link);
	corio__op_finished(s->net->shard);
	if (s->closer)
		corio__ready(s->closer, 0);
	corio__wq_wake_all(&s->swq, 0);
}

/* srec_cb's every other completion: a short write, more queued, an owned
 * record, an error, a close or shutdown. */
static __attribute__((noinline)) void srec_cb_rest(struct corio_sock *s, int32_t res)
{
	struct corio__net *n = s->net;
	struct srec_fin fin = { NULL, &fin.head };

	if (res > 0) {
		srec_count(s, res);
		srec_sent(s, (uint32_t)res, &fin); /* the op's record may be off the queue */
	} else if (!s->serr) {
		s->serr = res ? res : -EPIPE;
		corio__net_err(n, s->serr);
	}
	if (!s->serr && !s->sq_cancel && !n->stopping) {
		if (s->sq_head)
			srec_submit(s, s->sq_head); /* a short write's rest, or the next */
		else
			srec_idle(s);
	} else {
		/* An error, close or shutdown: what is left is not sent. */
		if (!s->serr && s->sq_head)
			s->serr = -ECANCELED;
		while (s->sq_head)
			srec_pop(s, s->serr, &fin);
		srec_idle(s);
	}
	srec_finish(n, &fin);
}

static void srec_cb(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct corio__srec *r = op->data;
	struct corio_sock *s = r->s;

	(void)flags;
	if (__builtin_expect(res > 0 && r == s->sq_head && !r->next && !r->owned &&
				     (uint32_t)res == r->len - r->off && !s->serr && !s->sq_cancel &&
				     !s->net->stopping,
			     1)) {
		/* The common completion: the queue's one borrowed buffer went
		 * out whole, so no walk and no done list (a borrowed record
		 * never goes on one), in a frame of its own. */
		srec_count(s, res);
		srec_pop(s, res, NULL);
		srec_idle(s);
		return;
	}
	srec_cb_rest(s, res);
}

/* Why s's queue takes no new record (corio_send_buf, corio_send_owned): 0,
 * or the error for the caller. */
static int queue_refuses(struct corio__net *n, struct corio_sock *s, const char *who)
{
	if (!n)
		return corio__sock_not_mine(who, s);
	if (s->type != SOCK_STREAM)
		return corio__error(-EINVAL, "%s: not a stream socket", who);
	if (s->serr)
		return s->serr;
	if (s->wr_shut)
		return -EPIPE;
	return n->stopping ? -ECANCELED : 0;
}

/* r (its next NULL, counted) is the whole queue: send it, one op in
 * flight until the queue is empty again (srec_idle). */
static inline __attribute__((always_inline)) void srec_start(struct corio_sock *s,
							      struct corio__net *n,
							      struct corio__srec *r)
{
	struct io_uring_sqe *sqe = corio__ring_sqe(&n->shard->ring);

	s->sq_head = s->sq_tail = r;
	/* srec_submit's one-record case: nothing to gather behind it */
	corio__prep_send(sqe, s->fd, r->p + r->off, r->len - r->off, MSG_NOSIGNAL);
	corio__sqe_set_op(sqe, &r->op);
	corio__op_started(n->shard);
	corio__list_add(&n->sending, &s->send_link);
}

/* Put r at the tail of s's queue; an empty queue sends it at once and
 * counts as one op in flight until it is empty again (srec_idle). */
static void srec_queue(struct corio_sock *s, struct corio__srec *r)
{
	struct corio__net *n = s->net;

	r->next = NULL;
	s->sq_count++;
	s->sq_owned += r->owned;
	if (s->sq_tail) {
		s->sq_tail->next = r;
		s->sq_tail = r;
		return;
	}
	srec_start(s, n, r);
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
	while (!ret && s->sq_count >= s->cap.send) {
		ret = corio__wq_wait(&s->sroom);
		if (!ret)
			ret = s->serr ? s->serr : s->wr_shut ? -EPIPE : n->stopping ? -ECANCELED : 0;
	}
	if (ret && ret != s->serr)
		corio__net_err(n, ret);
	return ret;
}

void corio__sock_send_init(struct corio_sock *s)
{
	s->srec1.op.cb = srec_cb;
	s->srec1.op.data = &s->srec1;
	s->srec1.s = s;
}

/* r takes b's bytes from off on (b is empty after: the record owns the
 * buffer's reference now). The record's op, socket and owned flag are the
 * caller's: set once for s->srec1 (corio__sock_send_init), per use for a
 * pooled one (srec_take). */
static inline __attribute__((always_inline)) void srec_fill(struct corio__srec *r,
							     struct corio_buf *b, uint32_t off)
{
	r->next = NULL;
	r->p = b->data;
	r->off = off;
	r->len = (uint32_t)b->len;
	r->bid = b->_id;
	r->gathered = false;
	b->_owner = NULL;
	b->data = NULL;
	b->len = 0;
}

/* srec_fill for any record of s, the pool's included. */
static inline __attribute__((always_inline)) void srec_take(struct corio__srec *r,
							     struct corio_sock *s,
							     struct corio_buf *b, uint32_t off)
{
	r->op.cb = srec_cb;
	r->op.data = r;
	r->s = s;
	r->owned = false;
	srec_fill(r, b, off);
}

int corio_send_buf(struct corio_sock *s, struct corio_buf *b)
{
	struct corio__net *n = corio__sock_owner(s);
	struct corio__srec *r = NULL;
	ssize_t sent = 0;
	int ret = 0;

	if (!b || !b->_owner)
		return corio__error(-EINVAL, "corio_send_buf: not a borrowed buffer");
	/* n is this shard's net or NULL: only a buffer that is not n's needs
	 * the second look (and a socket that is not ours is reported below) */
	if (CORIO__UNLIKELY(b->_owner != n) && b->_owner != corio__net())
		return corio__misuse(-EPERM, "corio_send_buf", "the buffer belongs to another shard");
	if (CORIO__LIKELY(n && b->len && s->type == SOCK_STREAM && !s->serr && !s->wr_shut &&
			  !n->stopping && s->sq_count < s->cap.send)) {
		/* The common cases, each check once: an open stream of ours
		 * with room in its queue. With nothing queued and a send the
		 * socket takes whole, the buffer is back in its ring at once;
		 * else (sent 0) it is queued, as below. CORIO_NET_TCP_SHORT
		 * (tests) cuts the send, as in send_now, so the short write
		 * is tested on this path too. */
		if (s->sq_tail)
			goto sent; /* behind the queue: as below */
		if (direct_ok(n)) {
			size_t len = b->len < n->send_max ? b->len : n->send_max;

			sent = sent_now(n, s, corio__sys_send(s->fd, b->data, len,
							      MSG_DONTWAIT | MSG_NOSIGNAL));
			if (CORIO__LIKELY((size_t)sent == b->len)) {
				corio__net_buf_give_back(n, b);
				return 0;
			}
			goto sent; /* a short write, none, or an error: as below */
		}
		/* Other fibers are ready (their sends go in the same submit):
		 * the whole buffer becomes the queue, in s's own record. */
		r = &s->srec1; /* its op, s and owned never change */
		srec_fill(r, b, 0);
		s->sq_count = 1;
		srec_start(s, n, r);
		return 0;
	}
	ret = queue_refuses(n, s, "corio_send_buf");
	if (!ret && b->len && s->sq_count >= s->cap.send)
		ret = wait_room(s);
	if (!ret && b->len && !s->sq_tail && direct_ok(n)) {
		/* Nothing queued on s: try it now. The buffer is back at once
		 * when the socket took it all; a short write queues the rest. */
		struct iovec v = { .iov_base = b->data, .iov_len = b->len };
		struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1 };

		sent = send_now(n, s, &mh, 0);
sent:
		if (sent < 0) {
			s->serr = (int)sent;
			ret = corio__net_err(n, (int)sent);
		} else if ((size_t)sent == b->len) {
			b->len = 0; /* all sent: released below */
		}
	}
	/* Into an empty queue (the rule) the socket's own record goes: it is
	 * free whenever the queue is empty (one send op at a time, and its
	 * record leaves the queue only once the op is done). */
	if (!ret && b->len && !(r = s->sq_tail ? srec_get(n) : &s->srec1)) {
		ret = -ENOMEM;
		if (sent)
			s->serr = ret; /* the byte stream has a hole */
	}
	if (ret || !b->len) {
		/* b is this shard's (checked above; s may not be, so not
		 * s's net): straight back to its ring */
		corio__net_buf_give_back(b->_owner, b);
		return ret;
	}
	srec_take(r, s, b, (uint32_t)sent);
	srec_queue(s, r);
	return 0;
}

int corio_send_owned(struct corio_sock *s, const void *buf, size_t len,
		     void (*done)(void *arg, int res), void *arg)
{
	struct corio__net *n = corio__sock_owner(s);
	struct corio__srec *r;
	int ret;

	if (!n)
		return corio__sock_not_mine("corio_send_owned", s);
	if (!buf || !len || len > INT32_MAX)
		return corio__error(-EINVAL, "corio_send_owned: %s",
				    !buf ? "buf is NULL" : !len ? "len is 0" : "len is over INT32_MAX");
	ret = queue_refuses(n, s, "corio_send_owned");
	if (!ret && s->sq_count >= s->cap.send)
		ret = wait_room(s);
	if (ret)
		return ret;
	r = srec_get(n);
	if (!r)
		return corio__error(-ENOMEM, "corio_send_owned: no memory for a send record");
	*r = (struct corio__srec){ .op = { .cb = srec_cb, .data = r }, .s = s, .p = buf,
				   .len = (uint32_t)len, .owned = true, .done = done, .arg = arg };
	srec_queue(s, r);
	return 0;
}

ssize_t corio_sock_queued(struct corio_sock *s, size_t *kernel)
{
	struct corio__net *n = corio__sock_owner(s);
	size_t bytes = 0;
	int v = 0;

	if (kernel)
		*kernel = 0;
	if (!n)
		return corio__sock_not_mine("corio_sock_queued", s);
	/* SIOCOUTQ: TCP's bytes not yet acknowledged (sent or not), a Unix or
	 * UDP socket's bytes not yet taken by the peer or the device */
	if (kernel && ioctl(s->fd, SIOCOUTQ, &v) < 0)
		return corio__error(-errno, "corio_sock_queued: SIOCOUTQ: %s", strerror(errno));
	if (kernel)
		*kernel = (size_t)v;
	for (const struct corio__srec *r = s->sq_head; r; r = r->next)
		bytes += r->len - r->off; /* the head's off moves at its CQE only */
	return (ssize_t)bytes;
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
		int ret = corio__wq_wait(&s->swq);

		if (ret < 0)
			return corio__net_err(s->net, ret);
	}
	return s->serr;
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

static int send_once(struct corio_sock *s, const void *buf, size_t len, bool *zc, int more)
{
	struct io_uring_sqe *sqe;
	struct zc_op z;
	int ret = corio__op_begin_who(&z.op, &sqe, "corio_send"), wret;

	if (ret)
		return ret;
	if (*zc) {
		io_uring_prep_send_zc(sqe, s->fd, buf, len, MSG_NOSIGNAL | more, 0);
		z.inner = z.op.cb;
		z.op.cb = zc_cb;
		z.shard = s->net->shard;
		z.parked = NULL;
		z.wq = (struct corio_waitq){ 0 };
		z.notif = false;
	} else {
		io_uring_prep_send(sqe, s->fd, buf, len, MSG_NOSIGNAL | more);
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
	struct corio__net *n = corio__sock_owner(s);
	int more = flags & CORIO_SEND_MORE ? MSG_MORE : 0;
	bool zc;
	size_t done = 0;

	if (sent)
		*sent = 0;
	if (!n)
		return corio__sock_not_mine("corio_send", s);
	if (flags & ~(CORIO_SEND_ZC | CORIO_SEND_MORE))
		return corio__error(-EINVAL, "corio_send_ex: unknown flags 0x%x",
				    flags & ~(CORIO_SEND_ZC | CORIO_SEND_MORE));
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
		ssize_t r = send_direct(n, s, &mh, more);

		if (r < 0)
			return corio__net_err(n, (int)r);
		done = (size_t)r;
		if (sent)
			*sent = done;
	}
	while (done < len) {
		size_t chunk = len - done > INT32_MAX ? INT32_MAX : len - done;
		int ret = send_once(s, (const char *)buf + done, chunk, &zc, more);

		if (ret == -EAGAIN)
			continue;
		if (ret < 0)
			return corio__net_err(n, ret);
		done += (size_t)ret;
		if (sent)
			*sent = done;
		CORIO__STAT_ADD(n->stats.ops_out, 1);
		CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)ret);
		s->tx += (uint64_t)ret;
	}
	return (ssize_t)len;
}

ssize_t corio_send(struct corio_sock *s, const void *buf, size_t len)
{
	return corio_send_ex(s, buf, len, 0, NULL);
}

#define SENDV_BATCH 64

/* A ring send of mh's iovecs: a SEND when there is one (the kernel then has
 * no msghdr and iovec array to copy in and import: a stream's writev of one
 * reply buffer is the common case), a SENDMSG otherwise. */
static void prep_sendv(struct io_uring_sqe *sqe, int fd, struct msghdr *mh)
{
	if (mh->msg_iovlen == 1)
		io_uring_prep_send(sqe, fd, mh->msg_iov[0].iov_base, mh->msg_iov[0].iov_len,
				   MSG_NOSIGNAL);
	else
		io_uring_prep_sendmsg(sqe, fd, mh, MSG_NOSIGNAL);
}

ssize_t corio_sendv(struct corio_sock *s, const struct iovec *iov, int iovcnt, size_t *sent)
{
	struct corio__net *n = corio__sock_owner(s);
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
				ret = send_direct(n, s, &mh, 0);
			} else {
				ret = corio__op_begin(&op, &sqe);
				if (!ret) {
					prep_sendv(sqe, s->fd, &mh);
					ret = corio__op_wait(&op);
					if (ret >= 0) {
						CORIO__STAT_ADD(n->stats.ops_out, 1);
						CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)ret);
						s->tx += (uint64_t)ret;
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

/* ---- shutdown ------------------------------------------------------------------ */

/*
 * shutdown(2) on the spot, not IORING_OP_SHUTDOWN: the call never waits
 * (a FIN is queued behind the bytes already in the socket), while the ring
 * op is always handed to an io-wq worker (the kernel forces it async) and
 * parks the fiber for a loop turn - two context switches and a worker
 * wake-up per half-close, two per connection through corio_copy_bidi.
 * The queued sends are waited for first, as before, and a cancelled fiber
 * or a passed deadline still gets -ECANCELED / -ETIMEDOUT.
 */
int corio_shutdown_write(struct corio_sock *s)
{
	struct corio__net *n = corio__sock_owner(s);
	int ret;

	if (!n)
		return corio__sock_not_mine("corio_shutdown_write", s);
	if (s->sq_head || s->serr) {
		ret = wait_sends(s);
		if (ret)
			return ret;
	}
	ret = corio__may_block("corio_shutdown_write");
	if (ret)
		return ret;
	if (shutdown(s->fd, SHUT_WR) < 0)
		return corio__net_err(n, -errno);
	s->wr_shut = true;
	return 0;
}

/* ---- file to socket --------------------------------------------------------- */

/*
 * corio_sendfile moves a file's bytes to a socket without copying them
 * through user space, one of four ways (the first per call, the rest once
 * per shard):
 * - io_uring, a file of at most a pipeful all in the page cache
 *   (cachestat(2), 6.5): sendfile(2) on the spot, as on the fallback below
 *   (all_cached: no worker hop, no pipe);
 * - io_uring with IORING_OP_SPLICE (5.7): file -> pipe with a SPLICE op,
 *   which the kernel runs on its worker threads (a page-cache miss blocks a
 *   worker, not the shard); then pipe -> socket with splice(2) on the spot,
 *   non-blocking, waiting for room with corio_poll(). Not a second SPLICE
 *   op: a SPLICE into a socket whose peer does not read blocks its worker
 *   in the socket's wait for memory, where cancelling it (deadline,
 *   corio_cancel, shutdown) did not reach it (6.18: the call hung), and
 *   one more hop per pipeful is not free either. The pipe is the shard's
 *   (net/shard.c's pool).
 * - a ring with neither SPLICE nor a READ for files (the epoll fallback:
 *   the emulator's probe reports neither; n->sendfile_now, net/shard.c):
 *   sendfile(2) with the same readiness waits; a page-cache miss blocks
 *   the shard for the read. That is the one file read that does not park
 *   the fiber alone (fs's calls and the TLS stream's file reads go to the
 *   blocking-work pool there, core/fileio.c); it is kept for speed, since
 *   a copy would take a trip through user space per 64 KiB of every
 *   file, cached or not, and a pool hop per miss.
 * - otherwise (CORIO_NET_DISABLE=splice on io_uring) the copy,
 *   corio__file_copy into corio_send, reading with core's one file reader
 *   (the page cache on the spot, else the ring's READ, else the pool).
 * The socket is made O_NONBLOCK for the first two (splice(2) and
 * sendfile(2) take no MSG_DONTWAIT; the ring's own socket ops do not
 * depend on the flag, and the emulator sets it on every socket anyway).
 * Every wait is a ring op or corio_poll(), so the deadline scope and
 * cancellation bound it.
 */

/* One SPLICE op from a file: the bytes moved, 0 at end of file, or -errno. */
static ssize_t splice_op(int in, int64_t off_in, int out, size_t len)
{
	struct io_uring_sqe *sqe;
	struct corio__op op;
	int ret = corio__op_begin_who(&op, &sqe, "corio_sendfile");

	if (ret)
		return ret;
	io_uring_prep_splice(sqe, in, off_in, out, -1, (unsigned)len, 0);
	return corio__op_wait(&op);
}

/* What a non-blocking splice(2) or sendfile(2) to s returned: r bytes
 * counted and returned; 0 at end of input; -EAGAIN after a wait for room
 * (try again), or -errno. */
static ssize_t moved(struct corio_sock *s, ssize_t r)
{
	int ret;

	if (r > 0) {
		CORIO__STAT_ADD(s->net->stats.ops_out, 1);
		CORIO__STAT_ADD(s->net->stats.bytes_out, (uint64_t)r);
		s->tx += (uint64_t)r;
		return r;
	}
	if (r == 0)
		return 0;
	if (errno == EINTR)
		return -EAGAIN;
	if (errno != EAGAIN)
		return -errno;
	ret = corio_poll(s->fd, POLLOUT);
	return ret < 0 ? ret : -EAGAIN;
}

/* Move in bytes from the pipe to s: 0 or -errno. */
static int pipe_out(struct corio_sock *s, int pipe_r, size_t in, size_t *done)
{
	while (in) {
		ssize_t r = moved(s, splice(pipe_r, NULL, s->fd, NULL, in,
					    SPLICE_F_NONBLOCK | SPLICE_F_MOVE));

		if (r == -EAGAIN)
			continue;
		if (r <= 0)
			return r ? (int)r : -EPIPE; /* the pipe had the bytes */
		in -= (size_t)r;
		*done += (size_t)r;
	}
	return 0;
}

static ssize_t sendfile_splice(struct corio_sock *s, int fd, off_t off, size_t len)
{
	struct corio__net *n = s->net;
	size_t done = 0;
	ssize_t ret;
	int p[2];

	ret = corio__net_pipe_get(n, p);
	if (ret)
		return ret;
	while (done < len) {
		size_t want = len - done < n->pipe_size ? len - done : n->pipe_size;

		ret = splice_op(fd, (int64_t)off + (int64_t)done, p[1], want);
		if (ret <= 0)
			break; /* 0: end of file */
		ret = pipe_out(s, p[0], (size_t)ret, &done);
		if (ret < 0)
			break;
	}
	/* a pipe an error may have left bytes in is not reused */
	corio__net_pipe_put(n, p, ret >= 0);
	return ret < 0 ? ret : (ssize_t)done;
}

/*
 * Whether every page of fd's [off, off + len) is in the page cache, by
 * cachestat(2) (6.5; it never blocks). Then sendfile(2) on the spot cannot
 * wait for the disk, and it saves the SPLICE op's hop to a kernel worker
 * and the pipe (httpd's 64 KiB row: nginx calls sendfile inline). A page
 * evicted between the look and the call blocks the shard for its read, as
 * on the fallback. false where cachestat is missing (ENOSYS) or says no.
 * Only for a file of at most a pipeful (CORIO_NET_PIPE_SIZE): a larger one
 * would hold the shard for the whole copy (6 MiB took 11 ms), where the
 * SPLICE path parks between pipefuls.
 */
#ifndef CORIO__NR_cachestat
#define CORIO__NR_cachestat 451 /* the same number on every architecture */
#endif
static bool all_cached(int fd, off_t off, size_t len)
{
	struct { uint64_t off, len; } range = { (uint64_t)off, len };
	struct { uint64_t cache, dirty, writeback, evicted, recently_evicted; } cs;
	uint64_t page = (uint64_t)getpagesize();
	uint64_t pages = ((uint64_t)off + len + page - 1) / page - (uint64_t)off / page;

	if (syscall(CORIO__NR_cachestat, fd, &range, &cs, 0) != 0)
		return false;
	return cs.cache >= pages;
}

static ssize_t sendfile_nonblock(struct corio_sock *s, int fd, off_t off, size_t len)
{
	size_t done = 0;

	while (done < len) {
		off_t at = off + (off_t)done;
		size_t want = len - done < (1u << 30) ? len - done : (1u << 30);
		ssize_t r = moved(s, sendfile(s->fd, fd, &at, want));

		if (r == -EAGAIN)
			continue;
		if (r <= 0)
			return r ? r : (ssize_t)done; /* 0: end of file */
		done += (size_t)r;
	}
	return (ssize_t)done;
}

ssize_t corio__file_copy(int fd, off_t off, size_t len,
			 ssize_t (*write)(void *ctx, const void *buf, size_t len), void *ctx)
{
	/* the slow path: one buffer per call, not per chunk */
	size_t bufsz = len < (64u << 10) ? len : (64u << 10);
	char *buf = malloc(bufsz ? bufsz : 1);
	size_t done = 0;
	ssize_t ret = 0;

	if (!buf)
		return -ENOMEM;
	while (done < len) {
		size_t want = len - done < bufsz ? len - done : bufsz;
		off_t at = off + (off_t)done;

		ret = corio__file_read(fd, buf, want, at, "corio_sendfile");
		if (ret <= 0)
			break; /* 0: end of file */
		ret = write(ctx, buf, (size_t)ret);
		if (ret < 0)
			break;
		done += (size_t)ret;
	}
	free(buf);
	return ret < 0 ? ret : (ssize_t)done;
}

static ssize_t copy_to_sock(void *ctx, const void *buf, size_t len)
{
	return corio_send(ctx, buf, len);
}

int corio__sendfile_fd(int fd, const char *who)
{
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return corio__error(-EBADF, "%s: fd %d is not an open file", who, fd);
	if (!S_ISREG(st.st_mode))
		return corio__error(-EINVAL, "%s: fd %d is not a regular file", who, fd);
	return 0;
}

static ssize_t sendfile_run(struct corio_sock *s, int fd, off_t off, size_t len, bool fd_checked)
{
	struct corio__net *n = corio__sock_owner(s);
	ssize_t ret;

	if (!n)
		return corio__sock_not_mine("corio_sendfile", s);
	if (s->type != SOCK_STREAM)
		return corio__error(-EINVAL, "corio_sendfile: not a stream socket");
	if (!fd_checked && (ret = corio__sendfile_fd(fd, "corio_sendfile")))
		return ret;
	if (off < 0)
		return corio__error(-EINVAL, "corio_sendfile: off is negative");
	ret = corio__may_block("corio_sendfile");
	if (ret)
		return ret;
	if (s->sq_head || s->serr) {
		ret = wait_sends(s); /* byte order: the queued sends first */
		if (ret)
			return ret;
	}
	if (s->wr_shut)
		return -EPIPE;
	if (!len)
		return 0;
	if (n->splice || n->sendfile_now) {
		ret = corio__sock_nonblock(s);
		if (!ret)
			ret = n->splice && !(n->sendfile_cached && len <= n->pipe_size &&
					     all_cached(fd, off, len))
				      ? sendfile_splice(s, fd, off, len)
				      : sendfile_nonblock(s, fd, off, len);
	} else {
		ret = corio__file_copy(fd, off, len, copy_to_sock, s);
	}
	return ret < 0 ? corio__net_err(n, (int)ret) : ret;
}

ssize_t corio_sendfile(struct corio_sock *s, int fd, off_t off, size_t len)
{
	return sendfile_run(s, fd, off, len, false);
}

ssize_t corio__sendfile_checked(struct corio_sock *s, int fd, off_t off, size_t len)
{
	return sendfile_run(s, fd, off, len, true);
}
