/* SPDX-License-Identifier: MIT */
/*
 * net/sock.c - the connected-socket record (its pool and the quarantine of
 * closed ones), wrapping an fd, close and release (receives and sends
 * taken out of the kernel first), addresses and options. Receiving is in
 * net/recv.c, sending in net/send.c; the record is in net/internal.h.
 */
#include "net/internal.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define SOCK_POOL_MAX 4096
/* A closed socket's record is reused only after this many others were
 * closed after it, so a stale handle (a second corio_close, a call after
 * close) finds it marked dead and gets -EINVAL instead of acting on a
 * socket another fiber now owns (net.h states the limit). */
#define SOCK_QUARANTINE 64

/* ---- records ---------------------------------------------------------------- */

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
	*s = (struct corio_sock){ .net = n, .fd = fd, .family = family, .type = type,
				  .cap = n->cap };
	s->r.op.cb = corio__sock_recv_cb;
	s->r.op.data = s;
	s->h.op.cb = corio__sock_hup_cb;
	s->h.op.data = s;
	corio__sock_send_init(s);
	corio__list_init(&s->uops);
	return s;
}

/*
 * O_NONBLOCK on s's fd, for good (corio_sendfile and corio_copy_bidi's
 * splice path; corio's other calls do not depend on it). One ioctl(FIONBIO)
 * sets the flag alone, where fcntl needed F_GETFL and F_SETFL.
 */
int corio__sock_nonblock(struct corio_sock *s)
{
	int one = 1;

	if (s->nonblock)
		return 0;
	if (ioctl(s->fd, FIONBIO, &one) < 0)
		return -errno;
	s->nonblock = true;
	return 0;
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

/* ---- close ------------------------------------------------------------------- */

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
	while (s->sq_head && !s->net->stopping && corio__wq_wait(&s->swq) == 0)
		;
	if (!s->sq_head)
		return;
	corio__sock_send_cancel(s);
	s->closer = corio__self();
	corio__net_park_until(sends_idle, s);
	s->closer = NULL;
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

	if (s->starved)
		corio__sock_unstarve(s);
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
		corio__net_buf_put(s->net, s->qhead->id);
		corio__sock_q_pop(s);
	}
}

int corio_close(struct corio_sock *s)
{
	struct corio__net *n = corio__sock_owner(s);
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
	struct corio__net *n = corio__sock_owner(s);
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

