/* SPDX-License-Identifier: MIT */
/*
 * net/listen.c - listeners (TCP over IPv4/IPv6, Unix stream), multishot
 * accept with back-off on fd exhaustion, and outgoing connects.
 *
 * One multishot accept per listener (l->a) stays in the kernel while a
 * fiber accepts; every CQE carries a new fd, queued in l->q until
 * corio_accept() takes it. When the queue holds ACCEPT_QMAX fds the op is
 * cancelled (back-pressure: further connections wait in the kernel's
 * backlog) and armed again by the next corio_accept().
 *
 * EMFILE/ENFILE (and ENOMEM/ENOBUFS) end the multishot. The connection stays
 * in the backlog, so nothing is lost: the accepting fiber sleeps 1 ms,
 * doubling up to 100 ms while the error persists, then arms again.
 *
 * A connection's own error (ECONNABORTED, EPROTO, ENETDOWN, EPERM, ... the
 * list accept(2) says to retry on) costs that connection only: counted,
 * and accepting goes on (re-armed after the same back-off if it ended the
 * multishot). Any other error means the listening socket itself is broken
 * (EINVAL, EBADF, ...): it is sticky and every later accept returns it.
 */
#include "net/internal.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define ACCEPT_QMAX 256
#define BACKOFF_MAX_MS 100

static void aop_cb(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct corio_listener *l = op->data;
	struct corio__net *n = l->net;
	bool more = flags & IORING_CQE_F_MORE;

	if (res >= 0 && l->fault_n) {
		/* Test hook: this connection died before accept returned it.
		 * The kernel ends a multishot accept on an error: so do we. */
		l->fault_n--;
		close(res);
		res = -l->fault_err;
		if (more && l->a.state == NET_ARMED) {
			l->a.state = NET_CANCELING;
			corio__ring_cancel(&n->shard->ring, op);
		}
	}
	if (res >= 0) {
		if (l->qlen == l->qcap) {
			unsigned cap = l->qcap ? l->qcap * 2 : 16;
			int *q = malloc(cap * sizeof(*q));

			if (!q) {
				close(res); /* the peer sees a reset; counted below */
				corio__net_err(n, -ENOMEM);
				goto out;
			}
			for (unsigned i = 0; i < l->qlen; i++)
				q[i] = l->q[(l->qhead + i) % l->qcap];
			free(l->q);
			l->q = q;
			l->qcap = cap;
			l->qhead = 0;
		}
		l->q[(l->qhead + l->qlen) % l->qcap] = res;
		l->qlen++;
		if (l->qlen >= ACCEPT_QMAX && more && l->a.state == NET_ARMED) {
			l->a.state = NET_CANCELING;
			corio__ring_cancel(&n->shard->ring, op);
		}
	} else {
		switch (-res) {
		case ECANCELED: /* ours: close, back-pressure or shutdown */
		case EINTR:
		case EAGAIN:
			break;
		case ECONNABORTED: /* that connection died in the backlog */
		/* accept(2): Linux passes a new connection's pending network
		 * error (and a firewall's EPERM) to accept; the connection is
		 * gone, the listener is fine. Count it and accept on; if it
		 * ended the multishot, re-arm after a short back-off. */
		case EPROTO:
		case EPERM:
		case ENETDOWN:
		case ENETUNREACH:
		case ENOPROTOOPT:
		case EHOSTDOWN:
		case EHOSTUNREACH:
		case ENONET:
		case EOPNOTSUPP:
		case ETIMEDOUT:
			corio__net_err(n, res);
			if (!more)
				l->backoff = true;
			break;
		case EMFILE:
		case ENFILE:
		case ENOMEM:
		case ENOBUFS:
			corio__net_err(n, res);
			l->backoff = true;
			if (more && l->a.state == NET_ARMED) {
				l->a.state = NET_CANCELING;
				corio__ring_cancel(&n->shard->ring, op);
			}
			break;
		default:
			corio__net_err(n, res);
			l->aterm = res;
		}
	}
out:
	if (!more) {
		l->a.state = NET_IDLE;
		corio__list_del(&l->a.link);
		corio__op_finished(n->shard);
		if (l->closer)
			corio__ready(l->closer, 0);
	}
	corio__wq_wake_all(&l->wq, 0);
}

static void accept_arm(struct corio_listener *l)
{
	struct corio__net *n = l->net;
	struct io_uring_sqe *sqe = corio__ring_sqe(&n->shard->ring);

	if (n->multishot_accept)
		io_uring_prep_multishot_accept(sqe, l->fd, NULL, NULL, SOCK_CLOEXEC);
	else
		io_uring_prep_accept(sqe, l->fd, NULL, NULL, SOCK_CLOEXEC);
	corio__sqe_set_op(sqe, &l->a.op);
	l->a.state = NET_ARMED;
	l->armed_once = true;
	corio__list_add(&n->armed, &l->a.link);
	corio__op_started(n->shard);
}

/* The queue caps of l's sockets: opts' where given, unless the environment
 * set the shard's (the operator's knob wins, corio.h). */
static struct corio__qcaps listen_caps(const struct corio__net *n,
				       const struct corio_listen_opts *o)
{
	struct corio__qcaps c = n->cap;

	if (o && o->recv_queue && !(n->cap_env & 1))
		c.recv = (uint16_t)o->recv_queue;
	if (o && o->send_queue && !(n->cap_env & 2))
		c.send = (uint16_t)o->send_queue;
	return c;
}

static int listen_common(int family, const struct sockaddr *sa, socklen_t salen,
			 const struct corio_listen_opts *o, const char *what,
			 struct corio_listener **out)
{
	struct corio__net *n = corio__net();
	struct corio_listener *l;
	int fd, one = 1, zero = 0;
	unsigned flags = o ? o->flags : 0;

	if (!n)
		return -EPERM;
	fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return corio__error(-errno, "listen %s: socket: %s", what, strerror(errno));
	if (family != AF_UNIX) {
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		    ((flags & CORIO_LISTEN_REUSEPORT) &&
		     setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
		    (family == AF_INET6 &&
		     setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY,
				(flags & CORIO_LISTEN_V6ONLY) ? &one : &zero, sizeof(one)) < 0) ||
		    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) {
			int err = errno;

			close(fd);
			return corio__error(-err, "listen %s: setsockopt: %s", what, strerror(err));
		}
	}
	if (bind(fd, sa, salen) < 0 ||
	    listen(fd, o && o->backlog ? (int)o->backlog : SOMAXCONN) < 0) {
		int err = errno;

		close(fd);
		return corio__error(-err, "listen %s: %s", what, strerror(err));
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		return -ENOMEM;
	}
	l->net = n;
	l->fd = fd;
	l->family = family;
	l->backoff_ms = 1;
	l->max_conns = o ? o->max_conns : 0;
	l->cap = listen_caps(n, o);
	l->fault_err = n->accept_fault_err; /* test hook, parsed at shard start */
	l->fault_n = n->accept_fault_n;
	l->a.op.cb = aop_cb;
	l->a.op.data = l;
	corio__list_add(&n->listeners, &l->lnode);
	if (n->draining)
		shutdown(fd, SHUT_RD); /* a listener opened while draining takes nobody */
	*out = l;
	return 0;
}

static int check_opts(const struct corio_listen_opts *o, const char *fn)
{
	if (!o)
		return 0;
	if (o->flags & ~CORIO_LISTEN_ALL)
		return corio__error(-EINVAL, "%s: unknown flags 0x%x", fn,
				    o->flags & ~CORIO_LISTEN_ALL);
	for (unsigned i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return corio__error(-EINVAL, "%s: reserved[%u] is not zero", fn, i);
	if (o->recv_queue > 65535 || o->send_queue > 65535)
		return corio__error(-EINVAL, "%s: %s is %u, at most 65535 (0: the shard's)", fn,
				    o->recv_queue > 65535 ? "recv_queue" : "send_queue",
				    o->recv_queue > 65535 ? o->recv_queue : o->send_queue);
	return 0;
}

int corio_tcp_listen(const char *host_port, const struct corio_listen_opts *o,
		     struct corio_listener **out)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int ret;

	if (!out)
		return corio__error(-EINVAL, "corio_tcp_listen: out is NULL");
	*out = NULL;
	ret = check_opts(o, "corio_tcp_listen");
	if (ret)
		return ret;
	ret = corio_addr_parse(host_port, &ss, &len);
	if (ret)
		return ret;
	return listen_common(ss.ss_family, (struct sockaddr *)&ss, len, o, host_port, out);
}

/* corio_tcp_listen_shared: the first caller binds and resolves port 0. */
struct shared_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

struct shared_make {
	const char *host_port;
	const struct corio_listen_opts *o;
	struct corio_listener **out;
};

static int shared_make(void *ctx, void *val)
{
	struct shared_make *m = ctx;
	struct shared_addr *a = val;
	int ret = corio_addr_parse(m->host_port, &a->ss, &a->len);

	if (!ret)
		ret = listen_common(a->ss.ss_family, (struct sockaddr *)&a->ss, a->len, m->o,
				    m->host_port, m->out);
	if (!ret) {
		a->len = sizeof(a->ss); /* the port the kernel chose for :0 */
		if (getsockname((*m->out)->fd, (struct sockaddr *)&a->ss, &a->len) < 0) {
			ret = corio__error(-errno, "corio_tcp_listen_shared %s: getsockname: %s",
					   m->host_port, strerror(errno));
			corio_listener_close(*m->out);
			*m->out = NULL;
		}
	}
	return ret;
}

int corio_tcp_listen_shared(const char *host_port, const struct corio_listen_opts *o,
			    struct corio_listener **out)
{
	struct corio_listen_opts opts = { 0 };
	struct shared_make m = { .host_port = host_port, .o = &opts, .out = out };
	struct shared_addr a;
	char key[120];
	int ret;

	if (!out)
		return corio__error(-EINVAL, "corio_tcp_listen_shared: out is NULL");
	*out = NULL;
	if (!host_port)
		return corio__error(-EINVAL, "corio_tcp_listen_shared: host_port is NULL");
	ret = check_opts(o, "corio_tcp_listen_shared");
	if (ret)
		return ret;
	if (!corio__net())
		return corio__misuse(-EPERM, "corio_tcp_listen_shared", "not called on a shard");
	if (o)
		opts = *o;
	opts.flags |= CORIO_LISTEN_REUSEPORT;
	if ((size_t)snprintf(key, sizeof(key), "tcp_listen_shared %s", host_port) >= sizeof(key))
		return corio__error(-EINVAL, "corio_tcp_listen_shared: host_port is too long");
	ret = corio__rt_memo(key, shared_make, &m, &a, sizeof(a));
	if (ret == -ENOSPC)
		return corio__error(ret, "corio_tcp_listen_shared: %d addresses per runtime at most",
				    CORIO__RT_MEMO_MAX);
	if (ret != 0)
		return ret < 0 ? ret : 0; /* 1: this call made the listener */
	return listen_common(a.ss.ss_family, (struct sockaddr *)&a.ss, a.len, &opts, host_port, out);
}

static int unix_addr(const char *path, struct sockaddr_un *sun, socklen_t *len, const char *fn)
{
	size_t plen;

	if (!path || !*path)
		return corio__error(-EINVAL, "%s: empty path", fn);
	plen = strlen(path);
	if (plen >= sizeof(sun->sun_path))
		return corio__error(-EINVAL, "%s: path \"%s\" is longer than %zu bytes", fn, path,
				    sizeof(sun->sun_path) - 1);
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	memcpy(sun->sun_path, path, plen);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + 1);
	if (path[0] == '@') { /* abstract namespace: no file, no terminating NUL */
		sun->sun_path[0] = 0;
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
	}
	return 0;
}

/*
 * CORIO_LISTEN_UNLINK: remove the file at path only if it is a socket that
 * nobody listens on (a test connect is refused), what a crashed server
 * leaves. A live server's socket is never taken over (-EADDRINUSE), and a
 * file that is not a socket is never removed (-EEXIST). 0 when the path is
 * free now.
 */
static int unlink_stale(const char *path, const struct sockaddr_un *sun, socklen_t len)
{
	struct stat st;
	int fd, ret;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : corio__error(-errno, "corio_unix_listen %s: %s", path,
							  strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return corio__error(-EEXIST,
				    "corio_unix_listen %s: exists and is not a socket; not removing it",
				    path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return corio__error(-errno, "corio_unix_listen %s: socket: %s", path,
				    strerror(errno));
	/* Non-blocking: a full backlog (EAGAIN) is a live server too. */
	ret = connect(fd, (const struct sockaddr *)sun, len) < 0 ? errno : 0;
	close(fd);
	if (ret == ENOENT)
		return 0; /* gone meanwhile */
	if (ret != ECONNREFUSED)
		return corio__error(-EADDRINUSE,
				    "corio_unix_listen %s: in use (a test connect got: %s); "
				    "not removing it",
				    path, ret ? strerror(ret) : "connected");
	if (unlink(path) < 0 && errno != ENOENT)
		return corio__error(-errno, "corio_unix_listen %s: cannot remove the stale socket: %s",
				    path, strerror(errno));
	return 0;
}

int corio_unix_listen(const char *path, const struct corio_listen_opts *o,
		      struct corio_listener **out)
{
	struct sockaddr_un sun;
	socklen_t len;
	int ret;

	if (!out)
		return corio__error(-EINVAL, "corio_unix_listen: out is NULL");
	*out = NULL;
	ret = check_opts(o, "corio_unix_listen");
	if (ret)
		return ret;
	ret = unix_addr(path, &sun, &len, "corio_unix_listen");
	if (ret)
		return ret;
	if (o && (o->flags & CORIO_LISTEN_UNLINK) && path[0] != '@') {
		ret = unlink_stale(path, &sun, len);
		if (ret)
			return ret;
	}
	ret = listen_common(AF_UNIX, (struct sockaddr *)&sun, len, o, path, out);
	if (!ret && path[0] != '@') {
		struct stat st;

		/* Remember which file is ours: close removes only that one. */
		if (!lstat(path, &st)) {
			snprintf((*out)->path, sizeof((*out)->path), "%s", path);
			(*out)->path_dev = st.st_dev;
			(*out)->path_ino = st.st_ino;
		}
	}
	return ret;
}

static struct corio__net *lowner(const struct corio_listener *l)
{
	return l ? corio__net_owner(l->net) : NULL;
}

/* The back-off after a transient accept error: a wait on the listener's
 * queue bounded by the back-off, so a close wakes it (-EBADF). 0 when it
 * is over, or the error (an enclosing deadline scope that passed too). */
static int backoff_wait(struct corio_listener *l)
{
	struct corio_deadline d;
	int ret;

	corio_timeout_push(&d, corio__ns_mul_sat(l->backoff_ms, CORIO__NS_PER_MS));
	ret = corio__wq_wait(&l->wq);
	corio_deadline_pop(&d);
	if (ret == -ETIMEDOUT && !(corio_deadline_ns() && corio_now_ns() >= corio_deadline_ns()))
		ret = 0; /* our back-off ended, not the caller's scope */
	return ret;
}

static int accept_loop(struct corio__net *n, struct corio_listener *l)
{
	int ret;

	for (;;) {
		if (l->closing)
			return corio__error(-EBADF, "corio_accept: the listener was closed");
		if (l->qlen) {
			int fd = l->q[l->qhead];

			l->qhead = (l->qhead + 1) % l->qcap;
			l->qlen--;
			l->backoff_ms = 1;
			CORIO__STAT_ADD(n->stats.accepts, 1);
			if (l->max_conns && n->stats.conns_live >= l->max_conns) {
				/* over the limit: the peer sees its connection closed */
				close(fd);
				CORIO__STAT_ADD(n->stats.conns_refused, 1);
				continue;
			}
			return fd;
		}
		if (n->draining)
			return corio__error(-ESHUTDOWN, "corio_accept: the runtime is draining");
		if (l->aterm)
			return l->aterm;
		if (n->stopping)
			return -ECANCELED;
		if (l->backoff && l->a.state == NET_IDLE) {
			ret = backoff_wait(l);
			if (ret < 0)
				return corio__net_err(n, ret);
			l->backoff = false;
			if (l->backoff_ms < BACKOFF_MAX_MS)
				l->backoff_ms *= 2;
			continue;
		}
		if (l->a.state == NET_IDLE) {
			if (l->armed_once)
				CORIO__STAT_ADD(n->stats.rearms, 1);
			accept_arm(l);
		}
		ret = corio__wq_wait(&l->wq);
		if (ret < 0)
			return corio__net_err(n, ret);
	}
}

/* Every corio_accept goes through here: the closer counts the fibers
 * inside and waits until the last has left (corio_listener_close). */
int corio__accept_fd(struct corio_listener *l)
{
	struct corio__net *n = lowner(l);
	int ret;

	if (!n)
		return corio__net_not_mine("corio_accept", l, "listener");
	if (l->closing)
		return corio__error(-EBADF, "corio_accept: the listener is being closed");
	if (l->wq.head)
		return corio__error(-EBUSY, "corio_accept: another fiber is accepting on "
				    "this listener");
	ret = corio__may_block("corio_accept");
	if (ret)
		return ret;
	l->acceptors++;
	ret = accept_loop(n, l);
	if (--l->acceptors == 0 && l->closing && l->closer)
		corio__ready(l->closer, 0);
	return ret;
}

int corio_accept(struct corio_listener *l, struct corio_sock **out)
{
	struct corio_sock *s;
	int fd;

	if (!out)
		return corio__error(-EINVAL, "corio_accept: out is NULL");
	*out = NULL;
	fd = corio__accept_fd(l);
	if (fd < 0)
		return fd;
	s = corio__sock_new(l->net, fd, l->family, SOCK_STREAM);
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	s->cap = l->cap;
	s->live = true;
	CORIO__STAT_ADD(l->net->stats.conns_live, 1);
	*out = s;
	return 0;
}

int corio_listener_addr(struct corio_listener *l, struct sockaddr_storage *addr, socklen_t *len)
{
	socklen_t sl = sizeof(*addr);

	if (!l || !addr)
		return corio__error(-EINVAL, "corio_listener_addr: %s is NULL",
				    l ? "addr" : "l");
	if (getsockname(l->fd, (struct sockaddr *)addr, &sl) < 0)
		return -errno;
	if (len)
		*len = sl;
	return 0;
}

int corio_listener_fd(const struct corio_listener *l)
{
	return l ? l->fd : corio__error(-EINVAL, "corio_listener_fd: l is NULL");
}

static bool no_acceptors(void *arg)
{
	return !((struct corio_listener *)arg)->acceptors;
}

static bool aop_idle(void *arg)
{
	return ((struct corio_listener *)arg)->a.state == NET_IDLE;
}

/*
 * corio_drain(): stop the multishot accept (connections it already took stay
 * queued and corio_accept returns them first), wake the accepting fibers
 * (they then get -ESHUTDOWN), and have the kernel refuse new TCP
 * connections: shutdown(SHUT_RD) on a listening TCP socket closes its
 * accept queue. A Unix listener keeps its backlog until it is closed.
 */
void corio__listeners_drain(struct corio__net *n)
{
	n->draining = true;
	for (struct corio__link *k = n->listeners.next; k != &n->listeners; k = k->next) {
		struct corio_listener *l = corio__list_entry(k, struct corio_listener, lnode);

		if (l->a.state == NET_ARMED) {
			l->a.state = NET_CANCELING;
			corio__ring_cancel(&n->shard->ring, &l->a.op);
		}
		if (l->family != AF_UNIX)
			shutdown(l->fd, SHUT_RD);
		corio__wq_wake_all(&l->wq, 0);
	}
}

int corio_listener_close(struct corio_listener *l)
{
	struct corio__net *n = lowner(l);

	if (!n)
		return corio__net_not_mine("corio_listener_close", l, "listener");
	if (l->closing)
		return corio__error(-EBADF, "corio_listener_close: another fiber is closing "
				    "this listener");
	if ((l->a.state != NET_IDLE || l->acceptors) && !corio__self())
		return corio__error(-EPERM, "corio_listener_close: the listener has work in "
				    "flight and %s", corio__not_fiber_why());
	l->closing = true;
	if (l->acceptors) {
		/* A fiber waits in corio_accept (or its back-off): wake it with
		 * -EBADF and wait until it has left, so nobody touches l after
		 * the free below. */
		corio__wq_wake_all(&l->wq, -EBADF);
		l->closer = corio__self();
		corio__net_park_until(no_acceptors, l);
		l->closer = NULL;
	}
	if (l->a.state != NET_IDLE) {
		if (l->a.state == NET_ARMED) {
			l->a.state = NET_CANCELING;
			corio__ring_cancel(&n->shard->ring, &l->a.op);
		}
		l->closer = corio__self();
		corio__net_park_until(aop_idle, l);
		l->closer = NULL;
	}
	while (l->qlen) {
		close(l->q[l->qhead]);
		l->qhead = (l->qhead + 1) % l->qcap;
		l->qlen--;
	}
	close(l->fd);
	if (l->path[0]) {
		struct stat st;

		/* Someone may have removed our file and bound a new server
		 * there: leave any file that is not ours. */
		if (!lstat(l->path, &st) && S_ISSOCK(st.st_mode) && st.st_dev == l->path_dev &&
		    st.st_ino == l->path_ino)
			unlink(l->path);
	}
	corio__list_del(&l->lnode);
	free(l->q);
	free(l);
	return 0;
}

/* ---- connect ---------------------------------------------------------------- */

static int connect_common(const char *who, int family, const struct sockaddr *sa, socklen_t len,
			  const char *what, struct corio_sock **out)
{
	struct corio__net *n = corio__net();
	struct io_uring_sqe *sqe;
	struct corio__op op;
	struct corio_sock *s;
	int fd, ret, one = 1;

	if (!n)
		return corio__misuse(-EPERM, who, "not called on a shard");
	ret = corio__may_block(who); /* cancellation and the deadline first */
	if (ret)
		return ret;
	fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return corio__net_err(n, corio__error(-errno, "connect %s: socket: %s", what,
						      strerror(errno)));
	if (family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ret = corio__op_begin_who(&op, &sqe, who);
	if (ret) {
		close(fd);
		return ret;
	}
	io_uring_prep_connect(sqe, fd, sa, len);
	ret = corio__op_wait(&op);
	if (ret < 0) {
		close(fd);
		return corio__net_err(n, ret);
	}
	s = corio__sock_new(n, fd, family, SOCK_STREAM);
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	s->live = true;
	CORIO__STAT_ADD(n->stats.conns_live, 1);
	CORIO__STAT_ADD(n->stats.connects, 1);
	*out = s;
	return 0;
}

/*
 * Every address of the name in order, within the caller's deadline scope.
 * An address's failure (refused, unreachable, a TCP timeout) moves on to
 * the next; a cancel or the caller's passed deadline ends the call, since
 * the next attempt would fail the same way at once.
 */
int corio_tcp_connect(const char *host_port, struct corio_sock **out)
{
	static const char who[] = "corio_tcp_connect";
	struct sockaddr_storage a[CORIO_RESOLVE_MAX];
	int n, ret, first = 0;

	if (!out)
		return corio__error(-EINVAL, "corio_tcp_connect: out is NULL");
	*out = NULL;
	n = corio__resolve_hp(who, host_port, a, CORIO_RESOLVE_MAX);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		ret = connect_common(who, a[i].ss_family, (struct sockaddr *)&a[i],
				     corio__addr_len(&a[i]), host_port, out);
		if (!ret || n == 1)
			return ret;
		if (!first)
			first = ret;
		if (ret == -ECANCELED || ret == -EPERM || corio__may_block(who))
			return ret;
	}
	return corio__error(first, "%s %s: none of its %d addresses took the connection "
			    "(the first: %s)", who, host_port, n, strerror(-first));
}

int corio_tcp_connect_addr(const struct sockaddr *sa, socklen_t len, struct corio_sock **out)
{
	socklen_t need;
	char what[64];

	if (!out)
		return corio__error(-EINVAL, "corio_tcp_connect_addr: out is NULL");
	*out = NULL;
	if (!sa)
		return corio__error(-EINVAL, "corio_tcp_connect_addr: sa is NULL");
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return corio__error(-EINVAL, "corio_tcp_connect_addr: address family %d is not "
				    "AF_INET or AF_INET6", sa->sa_family);
	need = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	if (len < need)
		return corio__error(-EINVAL, "corio_tcp_connect_addr: len %u is short for %s "
				    "(%u)", (unsigned)len,
				    sa->sa_family == AF_INET ? "AF_INET" : "AF_INET6", (unsigned)need);
	if (corio_addr_format(sa, len, what, sizeof(what)) < 0)
		snprintf(what, sizeof(what), "?");
	return connect_common("corio_tcp_connect_addr", sa->sa_family, sa, need, what, out);
}

int corio_unix_connect(const char *path, struct corio_sock **out)
{
	struct sockaddr_un sun;
	socklen_t len;
	int ret;

	if (!out)
		return corio__error(-EINVAL, "corio_unix_connect: out is NULL");
	*out = NULL;
	ret = unix_addr(path, &sun, &len, "corio_unix_connect");
	if (ret)
		return ret;
	return connect_common("corio_unix_connect", AF_UNIX, (struct sockaddr *)&sun, len,
			      path, out);
}
