/* SPDX-License-Identifier: MIT */
/*
 * net/udp.c - UDP sockets: bind, sendto and recvfrom through SENDMSG /
 * RECVMSG (each datagram keeps its boundary), and a zero-copy receive
 * through multishot recvmsg into the shard's provided-buffer ring, where
 * each buffer holds a struct io_uring_recvmsg_out, the sender's address
 * and the payload.
 *
 * Datagrams keep whole buffers: in an incrementally consumed ring
 * (IOU_PBUF_RING_INC) a datagram would be cut to the room left in the
 * current buffer, and the header at the start of each receive would lose
 * its alignment. So when the stream ring is incremental, buffered UDP
 * sockets receive into a whole-buffer ring of their own (net->dbufs,
 * corio__net_dbufs()); otherwise they share the stream ring as before.
 */
#include "net/internal.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int corio_udp_bind(const char *host_port, struct corio_sock **out)
{
	struct corio__net *n = corio__net();
	struct sockaddr_storage ss;
	struct corio_sock *s;
	socklen_t len;
	int fd, ret;

	if (!out)
		return corio__error(-EINVAL, "corio_udp_bind: out is NULL");
	*out = NULL;
	if (!n)
		return -EPERM;
	ret = corio_addr_parse(host_port, &ss, &len);
	if (ret)
		return ret;
	fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return corio__error(-errno, "corio_udp_bind %s: socket: %s", host_port,
				    strerror(errno));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
		int err = errno;

		close(fd);
		return corio__error(-err, "corio_udp_bind %s: %s", host_port, strerror(err));
	}
	s = corio__sock_new(n, fd, ss.ss_family, SOCK_DGRAM);
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	*out = s;
	return 0;
}

/* connect(2) on a new UDP socket: no packet is sent, it returns at once.
 * The fd, or -errno. */
static int udp_connect_one(const struct sockaddr_storage *ss)
{
	int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)ss, corio__addr_len(ss)) < 0) {
		int err = errno;

		close(fd);
		return -err;
	}
	return fd;
}

/* Every address in order until the host can route to one (net.h). */
int corio_udp_connect(const char *host_port, struct corio_sock **out)
{
	static const char who[] = "corio_udp_connect";
	struct sockaddr_storage a[CORIO_RESOLVE_MAX];
	struct corio_sock *s;
	int n, i, fd = -EINVAL, first = 0;

	if (!out)
		return corio__error(-EINVAL, "corio_udp_connect: out is NULL");
	*out = NULL;
	if (!corio__net())
		return corio__misuse(-EPERM, who, "not called on a shard");
	n = corio__resolve_hp(who, host_port, a, CORIO_RESOLVE_MAX);
	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		fd = udp_connect_one(&a[i]);
		if (fd >= 0)
			break;
		if (!first)
			first = fd;
	}
	if (fd < 0)
		return corio__error(first, "%s %s: %s (%d address%s tried)", who, host_port,
				    strerror(-first), n, n == 1 ? "" : "es");
	s = corio__sock_new(corio__net(), fd, a[i].ss_family, SOCK_DGRAM);
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	*out = s;
	return 0;
}

/*
 * A datagram first tries its send right here, with a non-blocking
 * sendmsg(2): UDP takes a datagram whole or not at all, so it is either
 * sent at once or refused with EAGAIN (the socket's send buffer is full),
 * and only then does the send go through the ring and wait. The fiber keeps
 * the CPU: no SQE, no park and no loop turn per datagram, so a fiber that
 * answers a burst of datagrams sends them all in one run (through the ring
 * each waited for its completion, one loop turn per datagram, and that
 * queueing showed in the p99 of a server answering 64 clients on one
 * socket). CORIO_NET_DISABLE=udp_direct always uses the ring;
 * CORIO_NET_UDP_EAGAIN=N makes the first N direct tries fail with EAGAIN
 * (a test hook: loopback never fills a UDP send buffer).
 */
static ssize_t sendto_direct(struct corio__net *n, struct corio_sock *s, struct msghdr *mh)
{
	ssize_t r;

	if (CORIO__UNLIKELY(n->udp_eagain_test)) {
		n->udp_eagain_test--;
		r = -1;
		errno = EAGAIN;
	} else {
		r = sendmsg(s->fd, mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	if (r >= 0) {
		CORIO__STAT_ADD(n->stats.ops_out, 1);
		CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)r);
		return r;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
		CORIO__STAT_ADD(n->stats.udp_send_again, 1);
		return -EAGAIN; /* through the ring */
	}
	return corio__net_err(n, -errno);
}

ssize_t corio_sendto(struct corio_sock *s, const void *buf, size_t len,
		     const struct sockaddr *addr, socklen_t addrlen)
{
	struct corio__net *n = corio__sock_owner(s);
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = {
		.msg_name = (void *)addr,
		.msg_namelen = addr ? addrlen : 0,
		.msg_iov = &iov,
		.msg_iovlen = 1,
	};
	struct io_uring_sqe *sqe;
	struct corio__op op;
	int ret;

	if (!n)
		return corio__sock_not_mine("corio_sendto", s);
	if (!buf && len)
		return corio__error(-EINVAL, "corio_sendto: buf is NULL");
	if (s->type == SOCK_DGRAM && n->udp_direct) {
		ssize_t r = corio__op_may_start();

		if (!r)
			r = sendto_direct(n, s, &mh);
		if (r != -EAGAIN)
			return r;
	}
	ret = corio__op_begin(&op, &sqe);
	if (ret)
		return ret;
	io_uring_prep_sendmsg(sqe, s->fd, &mh, MSG_NOSIGNAL);
	ret = corio__op_wait(&op);
	if (ret < 0)
		return corio__net_err(n, ret);
	CORIO__STAT_ADD(n->stats.ops_out, 1);
	CORIO__STAT_ADD(n->stats.bytes_out, (uint64_t)ret);
	return ret;
}

static void copy_addr(const void *name, socklen_t namelen, struct sockaddr *addr,
		      socklen_t *addrlen)
{
	if (!addr || !addrlen)
		return;
	memcpy(addr, name, namelen < *addrlen ? namelen : *addrlen);
	*addrlen = namelen;
}

/*
 * The head buffer of a buffered UDP socket: payload and sender. *trunc:
 * the datagram did not fit. A buffer holds the struct io_uring_recvmsg_out
 * (16 bytes), room for the sender's address (msg_namelen, a
 * sockaddr_storage: 128) and the payload, so the payload that fits is the
 * buffer size - 144 (CORIO__NET_DGRAM_HDR); the kernel cuts the rest off
 * and says so with MSG_TRUNC in the header's flags, as recvmsg(2) does.
 */
static void *dgram_parse(struct corio_sock *s, const struct corio__slice *q, size_t *plen,
			 void **name, socklen_t *namelen, bool *trunc)
{
	void *b = corio__net_slice_data(s->net, q);
	struct io_uring_recvmsg_out *o = io_uring_recvmsg_validate(b, (int)q->len, &s->rmsg);

	if (!o)
		return NULL;
	*name = io_uring_recvmsg_name(o);
	*namelen = o->namelen < s->rmsg.msg_namelen ? o->namelen : s->rmsg.msg_namelen;
	*plen = io_uring_recvmsg_payload_length(o, (int)q->len, &s->rmsg);
	*trunc = (o->flags & MSG_TRUNC) || o->payloadlen > *plen;
	return io_uring_recvmsg_payload(o, &s->rmsg);
}

static int buffered_setup(struct corio_sock *s)
{
	struct corio__net *n = s->net;
	int ret;

	if (s->buffered)
		return 0;
	ret = corio__net_dbufs(n);
	if (ret < 0)
		return ret;
	if (!n->multishot_recvmsg || !corio__bufring_kernel(corio__net_ring(n, (uint32_t)ret)))
		return corio__error(-EOPNOTSUPP,
				    "corio_recvfrom_buf needs multishot recvmsg and a provided-"
				    "buffer ring (Linux 6.0)");
	_Static_assert(sizeof(struct io_uring_recvmsg_out) + sizeof(struct sockaddr_storage) ==
			       CORIO__NET_DGRAM_HDR,
		       "the payload room net.h promises");
	memset(&s->rmsg, 0, sizeof(s->rmsg));
	s->rmsg.msg_namelen = sizeof(struct sockaddr_storage);
	return 0;
}

ssize_t corio_recvfrom_buf(struct corio_sock *s, struct corio_buf *b, struct sockaddr *addr,
			   socklen_t *addrlen)
{
	struct corio__net *n = corio__sock_owner(s);
	int ret;

	if (!b)
		return corio__error(-EINVAL, "corio_recvfrom_buf: b is NULL");
	b->data = NULL;
	b->len = 0;
	b->_owner = NULL;
	if (!n)
		return corio__sock_not_mine("corio_recvfrom_buf", s);
	if (s->type != SOCK_DGRAM)
		return corio__error(-EINVAL, "corio_recvfrom_buf: not a UDP socket");
	ret = corio__may_block("corio_recvfrom_buf"); /* cancellation first, data or not */
	if (ret)
		return ret;
	ret = buffered_setup(s);
	if (ret)
		return ret;
	for (;;) {
		void *name, *p;
		socklen_t namelen;
		size_t plen;
		bool trunc;
		struct corio__slice *q;
		uint32_t id;

		ret = corio__sock_wait_data(s);
		if (ret)
			return ret;
		q = s->qhead;
		if (!q) {
			/* An error (an ICMP one such as ECONNREFUSED on a connected
			 * socket) is this receive's result, not the socket's end:
			 * report it once and receive again on the next call, as
			 * recvfrom(2) and the copying path do. The error ended the
			 * multishot, so corio__sock_wait_data() re-arms it. */
			ret = s->rterm;
			if (ret < 0) {
				s->has_term = false;
				s->rterm = 0;
			}
			return ret;
		}
		p = dgram_parse(s, q, &plen, &name, &namelen, &trunc);
		id = q->id;
		corio__sock_q_pop(s); /* its reference is ours now */
		if (!p) { /* cannot happen with a sane kernel: skip it */
			corio__net_buf_put(n, id);
			continue;
		}
		copy_addr(name, namelen, addr, addrlen);
		if (trunc) {
			/* Cut by the ring, not by the caller: a part of a datagram
			 * handed out as if whole would be a lie. Drop it, say so. */
			corio__net_buf_put(n, id);
			CORIO__STAT_ADD(n->stats.udp_truncated, 1);
			return corio__error(-EMSGSIZE,
					    "corio_recvfrom_buf: a datagram over the %u bytes "
					    "a receive buffer holds was dropped",
					    corio__net_ring(n, id)->size - CORIO__NET_DGRAM_HDR);
		}
		if (!plen) {
			/* An empty datagram: 0 and no buffer to release (a caller
			 * that treats 0 as "nothing to release" must not leak one
			 * ring buffer per empty datagram a peer sends). */
			corio__net_buf_put(n, id);
			return 0;
		}
		b->data = p;
		b->len = plen;
		b->_owner = n;
		b->_id = id;
		CORIO__STAT_ADD(n->stats.bytes_in, plen);
		return (ssize_t)plen;
	}
}

ssize_t corio_recvfrom(struct corio_sock *s, void *buf, size_t len, struct sockaddr *addr,
		       socklen_t *addrlen)
{
	struct corio__net *n = corio__sock_owner(s);
	struct sockaddr_storage ss;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr mh = {
		.msg_name = &ss,
		.msg_namelen = sizeof(ss),
		.msg_iov = &iov,
		.msg_iovlen = 1,
	};
	struct io_uring_sqe *sqe;
	struct corio__op op;
	int ret;

	if (!n)
		return corio__sock_not_mine("corio_recvfrom", s);
	if (!buf && len)
		return corio__error(-EINVAL, "corio_recvfrom: buf is NULL");
	ret = corio__may_block("corio_recvfrom"); /* cancellation first, data or not */
	if (ret)
		return ret;
	if (s->buffered) {
		/* Datagrams already sit in the ring: copy the next one out. */
		struct corio_buf b;
		ssize_t r = corio_recvfrom_buf(s, &b, addr, addrlen);

		if (r <= 0)
			return r;
		if ((size_t)r > len)
			r = (ssize_t)len;
		memcpy(buf, b.data, (size_t)r);
		corio_buf_release(&b);
		return r;
	}
	if (s->closing)
		return -EBADF;
	if (s->rwq.head)
		return -EBUSY;
	ret = corio__op_begin(&op, &sqe);
	if (ret)
		return ret;
	io_uring_prep_recvmsg(sqe, s->fd, &mh, 0);
	ret = corio__sock_op_wait(s, &op);
	if (ret == -EBADF)
		return ret; /* closed: s is gone */
	if (ret < 0)
		return corio__net_err(n, ret);
	CORIO__STAT_ADD(n->stats.ops_in, 1);
	CORIO__STAT_ADD(n->stats.bytes_in, (uint64_t)ret);
	copy_addr(&ss, mh.msg_namelen, addr, addrlen);
	return ret;
}
