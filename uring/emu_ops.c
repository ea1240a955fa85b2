/* SPDX-License-Identifier: MIT */
/*
 * uring/emu_ops.c - the ring emulator's ops: what each opcode does, as one
 * row per opcode in corio__emu_ops (uring/emu.h says what a row holds), and
 * the functions the rows name. Each try makes one non-blocking syscall (or
 * one per CQE, for a multishot op within its budget) and answers a CQE res,
 * or T_AGAIN when it would block; emu.c's issue and emu_fd.c's readiness
 * loop decide what follows. The probe is this table's probe column.
 */
#include "uring/emu.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

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

/* A multishot receive into provided buffers (emu.h: inline in the
 * harvest, where every message's receive is made). */
int corio__emu_try_recv_mshot(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	(void)flags;
	return corio__emu_recv_mshot(r, o);
}

/* One-shot buffer-select receive: post with the buffer flags. */
static int recv_bsel_once(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	struct emu_bufring *b = corio__emu_bufring(r->em, o->bgid, &o->bring);
	struct io_uring_buf *buf = b ? corio__emu_buf_peek(b) : NULL;
	uint32_t room;
	size_t len;
	ssize_t n;

	if (!buf)
		return -ENOBUFS;
	room = buf->len;
	len = o->len && o->len < room ? o->len : room;
	if (corio__emu_fault_at(r, o, o->opcode == IORING_OP_RECV ? &len : NULL, CORIO__FAULT_RECV)) {
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
		return corio__emu_err();
	if (n > 0)
		*flags = corio__emu_buf_commit(b, buf, (size_t)n, room);
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
	struct emu_bufring *b = corio__emu_bufring(r->em, o->bgid, &o->bring);
	size_t hdr = sizeof(struct io_uring_recvmsg_out) + o->mh.msg_namelen + o->mh.msg_controllen;
	unsigned posted = 0;

	if (!b)
		return -ENOBUFS;
	for (;;) {
		struct io_uring_buf *buf = corio__emu_buf_peek(b);
		struct io_uring_recvmsg_out *out;
		struct msghdr mh;
		struct iovec iov;
		unsigned char *p;
		ssize_t n;
		size_t room, res;

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
		n = corio__emu_fault_at(r, o, NULL, CORIO__FAULT_OTHER)
			    ? -1
			    : corio__nc_recvmsg(o->fd, &mh, o->msg_flags | MSG_DONTWAIT | MSG_TRUNC);
		if (n < 0)
			return corio__emu_err();
		out->namelen = mh.msg_namelen;
		out->controllen = (uint32_t)mh.msg_controllen;
		out->payloadlen = (uint32_t)n;
		out->flags = (uint32_t)mh.msg_flags;
		res = hdr + ((size_t)n < room ? (size_t)n : room);
		corio__emu_post(r, o->user_data, (int32_t)res,
				corio__emu_buf_commit(b, buf, res, (uint32_t)(hdr + room)) | IORING_CQE_F_MORE);
		if (++posted >= MSHOT_BUDGET)
			return T_MORE;
	}
}

static int try_accept(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	unsigned posted = 0;
	int ret = set_nonblock(o);

	if (ret)
		return ret;
	for (;;) {
		int fd = corio__emu_fault_at(r, o, NULL, corio__emu_ops[o->opcode].fault)
				 ? -1
				 : accept4(o->fd, (struct sockaddr *)(uintptr_t)o->addr,
					   (socklen_t *)(uintptr_t)o->addr2, (int)o->accept_flags);

		if (fd < 0)
			return corio__emu_err();
		if (!o->mshot)
			return fd;
		corio__emu_post(r, o->user_data, fd, IORING_CQE_F_MORE);
		if (++posted >= MSHOT_BUDGET)
			return T_MORE;
	}
}
static int try_connect(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
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
		corio__emu_retry_later(r->em, o->f); /* a Unix listener's backlog is full */
	return corio__emu_err();
}

static int try_sendmsg(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	const struct msghdr *mh = (const struct msghdr *)(uintptr_t)o->addr;
	struct msghdr m = *mh;
	struct iovec first;
	size_t len = mh->msg_iovlen ? mh->msg_iov[0].iov_len : 0;
	ssize_t n;

	if (corio__emu_fault_at(r, o, &len, corio__emu_ops[o->opcode].fault))
		return corio__emu_err();
	if (UNLIKELY(mh->msg_iovlen && len < mh->msg_iov[0].iov_len)) {
		/* a short write (test builds): part of the first iovec only */
		first = (struct iovec){ mh->msg_iov[0].iov_base, len };
		m.msg_iov = &first;
		m.msg_iovlen = 1;
	}
	n = corio__nc_sendmsg(o->fd, &m, o->msg_flags | MSG_DONTWAIT | MSG_NOSIGNAL);
	return n < 0 ? corio__emu_err() : (int)n;
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
static int try_poll(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
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

/* The plain receive: into the SQE's buffer, or a provided one. */
static int try_recv(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	size_t len = o->len;
	ssize_t n;

	if (o->bsel)
		return o->mshot ? corio__emu_recv_mshot(r, o) : recv_bsel_once(r, o, flags);
	n = corio__emu_fault_at(r, o, &len, corio__emu_ops[o->opcode].fault)
		    ? -1
		    : corio__nc_recv(o->fd, (void *)(uintptr_t)o->addr, len, o->msg_flags | MSG_DONTWAIT);
	return n < 0 ? corio__emu_err() : (int)n;
}

static int try_recvmsg(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	ssize_t n;

	if (o->mshot)
		return try_recvmsg_mshot(r, o);
	if (o->bsel)
		return recv_bsel_once(r, o, flags);
	n = corio__emu_fault_at(r, o, NULL, corio__emu_ops[o->opcode].fault)
		    ? -1
		    : corio__nc_recvmsg(o->fd, (struct msghdr *)(uintptr_t)o->addr,
				      o->msg_flags | MSG_DONTWAIT);
	return n < 0 ? corio__emu_err() : (int)n;
}

static int try_send(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	size_t len = o->len;
	ssize_t n = corio__emu_fault_at(r, o, &len, corio__emu_ops[o->opcode].fault)
			    ? -1
			    : corio__nc_send(o->fd, (const void *)(uintptr_t)o->addr, len,
					     o->msg_flags | MSG_DONTWAIT | MSG_NOSIGNAL);

	return n < 0 ? corio__emu_err() : (int)n;
}

static int try_read(struct corio__ring *r, struct emu_op *o, uint32_t *flags)
{
	ssize_t n = corio__emu_fault_at(r, o, NULL, corio__emu_ops[o->opcode].fault)
			    ? -1
			    : corio__nc_read(o->fd, (void *)(uintptr_t)o->addr, o->len);

	if (n < 0 && errno == EAGAIN && (o->msg_flags & RWF_NOWAIT))
		return -EAGAIN; /* RWF_NOWAIT: the old kernels' answer, for tests */
	return n < 0 ? corio__emu_err() : (int)n;
}

/* ---- preparation: each op's own SQE fields --------------------------------------------- */

static int prep_recv(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe)
{
	uint32_t limit;

	if (o->bsel && o->mshot) {
		memcpy(&limit, &sqe->addr_len, sizeof(limit)); /* 6.16's byte limit */
		o->left = limit ? limit : UINT64_MAX;
		if (!o->len)
			o->len = UINT32_MAX; /* no cap: one test less per receive */
		o->try = corio__emu_try_recv_mshot; /* its retries skip try_recv's dispatch */
	}
	return 0;
}

static int prep_recvmsg(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe)
{
	if (o->mshot)
		o->mh = *(const struct msghdr *)(uintptr_t)sqe->addr; /* template */
	return 0;
}

static int prep_read(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe)
{
	o->msg_flags = (int32_t)sqe->rw_flags;
	return 0;
}

static int prep_accept(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe)
{
	o->accept_flags = sqe->accept_flags;
	return 0;
}

static int prep_poll(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe)
{
	o->events = sqe->poll32_events;
	o->mshot = sqe->len & IORING_POLL_ADD_MULTI;
	return 0;
}

/* ---- answered at submit ------------------------------------------------------------------ */

/* NOP_INJECT_RESULT (6.10): the fault injector's errors. */
static int now_nop(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	corio__emu_post(r, sqe->user_data,
			sqe->rw_flags & IORING_NOP_INJECT_RESULT ? (int32_t)sqe->len : 0, 0);
	return 1;
}

static int now_timeout_remove(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	corio__emu_post(r, sqe->user_data, corio__emu_timeout_remove(r, sqe), 0);
	return 1;
}

static int now_cancel(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	corio__emu_post(r, sqe->user_data, corio__emu_cancel(r, sqe), 0);
	return 1;
}

static int now_shutdown(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	corio__emu_post(r, sqe->user_data, shutdown(sqe->fd, (int)sqe->len) < 0 ? -errno : 0, 0);
	return 1;
}

static int send_at_once(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
	return corio__emu_send_now(r, sqe);
}

/* ---- the table ---------------------------------------------------------------------------- */

/*
 * One row per opcode served (uring/emu.h: struct emu_opdef). What is
 * emulated is what corio submits; every row but READ's is probed: READ
 * serves the shard's wake-up eventfd, and fs/ must take its blocking path
 * for regular files, which it does when READ is not reported.
 */
const struct emu_opdef corio__emu_ops[IORING_OP_LAST] = {
	[IORING_OP_NOP] = { .now = now_nop, .probe = true },
	[IORING_OP_POLL_ADD] = {
		.prep = prep_poll, .try = try_poll, .readiness = true, .probe = true,
	},
	[IORING_OP_RECV] = {
		.prep = prep_recv, .try = try_recv, .events = EV_IN,
		.mshot_ioprio = IORING_RECV_MULTISHOT, .mshot_bsel = true,
		.fault = CORIO__FAULT_RECV, .probe = true,
	},
	[IORING_OP_RECVMSG] = {
		.prep = prep_recvmsg, .try = try_recvmsg, .events = EV_IN,
		.mshot_ioprio = IORING_RECV_MULTISHOT, .mshot_bsel = true,
		.fault = CORIO__FAULT_OTHER, .probe = true,
	},
	[IORING_OP_SEND] = {
		.now = send_at_once, .try = try_send, .events = EV_OUT,
		.fault = CORIO__FAULT_SEND, .probe = true,
	},
	[IORING_OP_SENDMSG] = {
		.try = try_sendmsg, .events = EV_OUT, .fault = CORIO__FAULT_SEND, .probe = true,
	},
	[IORING_OP_READ] = {
		.prep = prep_read, .try = try_read, .events = EV_IN, .fault = CORIO__FAULT_OTHER,
	},
	[IORING_OP_ACCEPT] = {
		.prep = prep_accept, .try = try_accept, .events = EV_IN,
		.mshot_ioprio = IORING_ACCEPT_MULTISHOT, .fault = CORIO__FAULT_OTHER, .probe = true,
	},
	[IORING_OP_CONNECT] = { .try = try_connect, .events = EV_OUT, .probe = true },
	[IORING_OP_SHUTDOWN] = { .now = now_shutdown, .probe = true },
	[IORING_OP_TIMEOUT] = { .prep = corio__emu_timeout_add, .probe = true },
	[IORING_OP_TIMEOUT_REMOVE] = { .now = now_timeout_remove, .probe = true },
	[IORING_OP_ASYNC_CANCEL] = { .now = now_cancel, .probe = true },
};
