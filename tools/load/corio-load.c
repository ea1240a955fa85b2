/* SPDX-License-Identifier: MIT */
/*
 * corio-load - TCP echo load generator for corio-echo, epoll-echo or any
 * echo server on 127.0.0.1.
 *
 *   closed loop: every connection keeps --pipeline messages in flight and
 *                sends a new one for each echo; latency from the send.
 *   open loop:   --rate msgs/s spread evenly over the connections at fixed
 *                intervals; latency from each message's intended send time,
 *                so a stalled server shows up as latency instead of slowing
 *                the generator down (no coordinated omission).
 *
 * Every echoed byte is verified (tools/common/load.h says how), a probe
 * connection is opened and closed before the load starts, and the run is
 * bounded: warm-up + duration + at most --drain for the last echoes.
 *
 * Two engines drive the same connections and logic:
 *   corio  (default) one corio shard per CPU, a fiber per connection (two in
 *          open loop: sender and receiver); --busy-poll uses CORIO_IDLE_POLL.
 *   epoll  one plain thread per CPU, non-blocking sockets and epoll;
 *          --busy-poll spins in epoll_wait(0). The instrument that does not
 *          depend on corio.
 *
 * --udp: each connection is one connected UDP socket and each message one
 * datagram (closed loop: --pipeline datagrams in flight per socket; open
 * loop: --rate), every echo checked whole; an echo missing --loss seconds
 * after its datagram was due is counted lost (and, in closed loop, replaced),
 * so a lost datagram cannot hang the run. Lost, late, duplicated and
 * reordered datagrams are reported, and make the exit status 3 (1 is kept
 * for errors: wrong bytes, a socket that failed).
 *
 * --tls (corio engine, TCP): each connection does a TLS 1.3 handshake (a
 * full one: no session tickets, so every connection costs the server one)
 * before the load starts, within the 5 s connect bound, then sends and
 * receives through the session (corio_tls_write / corio_tls_read) and ends
 * its side with close_notify; the same bytes are verified. The server's
 * certificate is verified against --tls-ca FILE, else the system store, and
 * its name against --tls-name (127.0.0.1); only --tls-insecure skips that.
 * No probe connection is made (it speaks plain TCP); a refused handshake is
 * each connection's error, with OpenSSL's reason.
 *
 * --server-pid PID samples that process's CPU time (all threads, ns) at the
 * start and end of the measured window and prints server CPU per message.
 */
#include <corio.h>

#include "common/hist.h"
#include "common/load.h"
#include "common/opt.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 64
#define MAX_CONNS 100000

static struct {
	struct tool_params p;
	int engine; /* 0 corio, 1 epoll */
	int busy;
	int recv_copy; /* corio engine: corio_recv instead of corio_recv_buf */
	unsigned workers;
	int cpus[MAX_WORKERS];
	unsigned ncpus;
	char cpus_str[64];
	struct tool_worker_stats *ws;
	_Atomic unsigned connected;
	_Atomic int go;   /* 1: start_ns is set, run; -1: abort */
	_Atomic int dead; /* workers that gave up before go */
	_Atomic uint64_t late;
	int tls, tls_insecure;          /* --tls, --tls-insecure */
	const char *tls_ca, *tls_name;  /* --tls-ca, --tls-name */
	struct corio_tls_ctx *tls_ctx;
	_Atomic(const char *) tls_version; /* what a handshake agreed */
} g;

static void sleep_until_ns(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static size_t rx_len(void)
{
	size_t n = g.p.size * (g.p.rate > 0 ? 4 : g.p.pipeline);

	if (n < 16384)
		n = 16384;
	if (n > 262144)
		n = 262144;
	return n;
}

/* ---- corio engine -------------------------------------------------------------- */

struct cconn {
	struct tool_conn c;
	struct tool_uconn u; /* --udp: instead of c */
	struct corio_sock *s;
	struct corio_tls *t; /* --tls: the session on s */
	unsigned char *tx, *rx;
	int rx_status; /* receiver's end: 0 EOF, else -errno */
	int send_done; /* --udp open loop: the sender has sent its last datagram */
};

/* Wait until the main thread says go (or abort): 0 or -1. */
static int corio_wait_go(void)
{
	int v;

	while (!(v = atomic_load(&g.go)))
		corio_sleep_ns(50000);
	return v > 0 ? 0 : -1;
}

/* Send on the connection (through its TLS session, if any): len or -errno. */
static ssize_t conn_send(struct cconn *k, const void *p, size_t len)
{
	return k->t ? corio_tls_write(k->t, p, len) : corio_send(k->s, p, len);
}

/* End our side: close_notify over TLS, else a TCP half-close. */
static int conn_shutdown(struct cconn *k)
{
	return k->t ? corio_tls_shutdown(k->t) : corio_shutdown_write(k->s);
}

/* Connect (and with --tls, the handshake), bounded by 5 s: 0, or -1 with
 * the connection failed and counted dead (nothing left open). */
static int conn_open(struct cconn *k)
{
	struct corio_deadline dl;
	int ret;

	corio_timeout_push(&dl, 5000000000ull);
	ret = corio_tcp_connect(g.p.addr, &k->s);
	if (ret) {
		corio_deadline_pop(&dl);
		tool_conn_fail(&k->c, "conn %u: connect %s: %s", k->c.id, g.p.addr, strerror(-ret));
		atomic_fetch_add(&g.dead, 1);
		return -1;
	}
	if (g.tls) {
		ret = corio_tls_connect(g.tls_ctx, k->s, g.tls_name, &k->t);
		if (ret) {
			/* the library's reason names the call and OpenSSL's verdict */
			tool_conn_fail(&k->c, "conn %u: TLS: %s", k->c.id, corio_last_error());
			k->t = NULL;
			corio_close(k->s);
			k->s = NULL;
		} else {
			atomic_store_explicit(&g.tls_version, corio_tls_version(k->t),
					      memory_order_relaxed);
		}
	}
	corio_deadline_pop(&dl);
	if (ret)
		atomic_fetch_add(&g.dead, 1);
	return ret ? -1 : 0;
}

/* Receive until EOF or error; verify and refill (closed loop). */
static int corio_receive(struct cconn *k, int closed)
{
	struct tool_conn *c = &k->c;
	uint64_t meas_end = tool_meas_end(&g.p);

	for (;;) {
		ssize_t n;
		const unsigned char *data;
		struct corio_buf b;
		int done;
		uint64_t now;

		if (k->t) {
			n = corio_tls_read(k->t, k->rx, rx_len());
			data = k->rx;
		} else if (g.recv_copy) {
			n = corio_recv(k->s, k->rx, rx_len());
			data = k->rx;
		} else {
			n = corio_recv_buf(k->s, &b);
			data = b.data;
		}
		if (n <= 0)
			return (int)n;
		now = tool_now_ns();
		done = tool_conn_rx(c, data, (size_t)n, now);
		if (!g.recv_copy && !k->t)
			corio_buf_release(&b);
		if (done < 0)
			return done;
		if (!closed || !done)
			continue;
		if (now < meas_end) {
			ssize_t r;

			tool_conn_fill(c, (unsigned)done, k->tx, now);
			r = conn_send(k, k->tx, (size_t)done * c->size);
			if (r < 0)
				return (int)r;
		} else if (c->rx == c->tx) {
			conn_shutdown(k);
		}
	}
}

/* Open loop: the receiving half. Bounded by the drain deadline like the
 * sender (a spawned fiber does not inherit its spawner's scope): a server
 * that stops answering must not keep the tool running. */
static int corio_receiver(void *arg)
{
	struct cconn *k = arg;
	struct corio_deadline dl;

	corio_deadline_push(&dl, tool_drain_end(&g.p));
	k->rx_status = corio_receive(k, 0);
	corio_deadline_pop(&dl);
	return 0;
}

/* Wait for the receiver, which ends by the drain deadline at the latest.
 * If the join itself gives up first (its own deadline, or a cancel),
 * cancel the receiver and wait again outside the scope: it uses k.
 * Returns 0, or -1 when it could not be waited for (the caller must then
 * leave k->s open). */
/* Open loop (corio engine): sleep until messages of c are due, count a late
 * start, and return how many are due now; 0 once the measured window ends
 * or the connection failed. TCP and UDP senders pace alike. */
static unsigned paced_due(struct tool_conn *c, uint64_t meas_end)
{
	for (;;) {
		uint64_t now = tool_now_ns();
		unsigned n;

		if (now >= meas_end || c->failed)
			return 0;
		n = tool_conn_due_count(c, now, meas_end);
		if (n) {
			if (now - tool_conn_due(c, c->tx) >= (uint64_t)c->interval_ns)
				atomic_fetch_add_explicit(&g.late, 1, memory_order_relaxed);
			return n;
		}
		if (!tool_conn_room(c))
			corio_sleep_ns(20000);
		else
			corio_sleep_until(tool_conn_due(c, c->tx));
	}
}

static int join_receiver(struct corio_fiber *rf)
{
	struct corio_deadline sh;
	int ret;

	if (!corio_join(rf, NULL))
		return 0;
	corio_cancel(rf);
	corio_deadline_shield(&sh);
	ret = corio_join(rf, NULL);
	corio_deadline_pop(&sh);
	if (ret)
		corio_detach(rf); /* only when this fiber is cancelled: never here */
	return ret ? -1 : 0;
}

static int corio_conn_fiber(void *arg)
{
	struct cconn *k = arg;
	struct tool_conn *c = &k->c;
	struct corio_deadline dl;
	uint64_t meas_end;
	int ret;

	if (conn_open(k))
		return 0;
	atomic_fetch_add(&g.connected, 1);
	if (corio_wait_go())
		goto out;
	meas_end = tool_meas_end(&g.p);
	corio_deadline_push(&dl, tool_drain_end(&g.p));
	if (g.p.rate <= 0) {
		tool_conn_fill(c, g.p.pipeline, k->tx, tool_now_ns());
		ret = (int)conn_send(k, k->tx, g.p.pipeline * c->size);
		if (ret >= 0)
			ret = corio_receive(k, 1);
	} else {
		struct corio_fiber *rf;
		unsigned n;

		ret = corio_spawn(corio_receiver, k, NULL, &rf);
		if (ret) {
			tool_conn_fail(c, "conn %u: spawn: %s", c->id, strerror(-ret));
			corio_deadline_pop(&dl);
			goto out;
		}
		while ((n = paced_due(c, meas_end)) != 0) {
			tool_conn_fill(c, n, k->tx, 0);
			ret = (int)conn_send(k, k->tx, (size_t)n * c->size);
			if (ret < 0)
				break;
		}
		if (ret >= 0)
			ret = conn_shutdown(k);
		else
			corio_cancel(rf); /* the send failed or timed out: no echo will end it */
		if (join_receiver(rf)) {
			corio_deadline_pop(&dl);
			tool_conn_fail(c, "conn %u: the receiver did not end", c->id);
			return 0;
		}
		if (ret >= 0)
			ret = k->rx_status;
	}
	corio_deadline_pop(&dl);
	if (ret < 0 && ret != -EPROTO)
		tool_conn_fail(c, "conn %u: %s after %llu of %llu messages", c->id,
			     ret == -ETIMEDOUT ? "echoes missing at the end of the drain time"
					       : strerror(-ret),
			     (unsigned long long)c->rx, (unsigned long long)c->tx);
	else if (ret == 0 && c->rx != c->tx)
		tool_conn_fail(c, "conn %u: server closed after %llu of %llu messages", c->id,
			     (unsigned long long)c->rx, (unsigned long long)c->tx);
out:
	if (k->t)
		corio_tls_close(k->t); /* already shut down, or ends a failed run: bounded */
	corio_close(k->s);
	return 0;
}

/* A 4 MiB receive buffer, so a few milliseconds' stall at 100k datagrams/s
 * does not overflow it (the default holds ~200 small datagrams): forced
 * when we may (root), else as much as net.core.rmem_max allows. */
static void big_rcvbuf(int fd)
{
	int v = 4 << 20;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

/* ---- corio engine, UDP ---------------------------------------------------------- */

/* Send one datagram (message c->tx) stamped t: 0 or -errno (then unsent). */
static int cu_send(struct cconn *k, uint64_t t)
{
	ssize_t r;

	tool_uconn_fill(&k->u, k->tx, t);
	r = corio_sendto(k->s, k->tx, k->u.c.size, NULL, 0);
	if (r < 0) {
		tool_uconn_unfill(&k->u);
		return (int)r;
	}
	return 0;
}

/* Receive echoes until every datagram sent is echoed or lost and the
 * sending is over; closed loop: send one more for each. Bounded by the
 * drain deadline, and each wait by the next datagram's loss time. */
static int cu_receive(struct cconn *k, int closed)
{
	struct tool_uconn *u = &k->u;
	struct tool_conn *c = &u->c;
	uint64_t meas_end = tool_meas_end(&g.p), drain_end = tool_drain_end(&g.p);

	for (;;) {
		uint64_t now = tool_now_ns(), wake;
		struct corio_deadline dl;
		const unsigned char *data;
		struct corio_buf b;
		ssize_t n;
		int r;

		if (now >= drain_end) {
			tool_uconn_expire(u, UINT64_MAX);
			return 0;
		}
		tool_uconn_expire(u, now);
		if (closed && now < meas_end) {
			while (tool_conn_room(c))
				if ((r = cu_send(k, now)) < 0)
					return r;
		}
		if (c->rx == c->tx && (closed ? now >= meas_end : k->send_done))
			return 0;
		wake = tool_uconn_next_loss(u);
		if (wake == UINT64_MAX) /* nothing in flight: until the sender is done */
			wake = meas_end > now + 1000000 ? meas_end : now + 1000000;
		if (wake > drain_end)
			wake = drain_end;
		corio_deadline_push(&dl, wake);
		if (g.recv_copy) {
			n = corio_recvfrom(k->s, k->rx, 65536, NULL, NULL);
			data = k->rx;
		} else {
			n = corio_recvfrom_buf(k->s, &b, NULL, NULL);
			data = b.data;
		}
		corio_deadline_pop(&dl);
		if (n == -ETIMEDOUT && tool_now_ns() < drain_end)
			continue;
		if (n < 0)
			return (int)n;
		r = tool_uconn_rx(u, data, (size_t)n, tool_now_ns());
		if (!g.recv_copy)
			corio_buf_release(&b);
		if (r < 0)
			return r;
	}
}

static int cu_receiver(void *arg)
{
	struct cconn *k = arg;
	struct corio_deadline dl;

	corio_deadline_push(&dl, tool_drain_end(&g.p));
	k->rx_status = cu_receive(k, 0);
	corio_deadline_pop(&dl);
	return 0;
}

static int cu_conn_fiber(void *arg)
{
	struct cconn *k = arg;
	struct tool_conn *c = &k->u.c;
	struct sockaddr_storage sa;
	socklen_t sl;
	struct corio_deadline dl;
	int ret;

	ret = corio_udp_bind("127.0.0.1:0", &k->s);
	if (!ret && !(ret = corio_addr_parse(g.p.addr, &sa, &sl)) &&
	    connect(corio_sock_fd(k->s), (struct sockaddr *)&sa, sl))
		ret = -errno;
	if (!ret)
		big_rcvbuf(corio_sock_fd(k->s));
	if (ret) {
		tool_conn_fail(c, "conn %u: udp socket to %s: %s", c->id, g.p.addr, strerror(-ret));
		atomic_fetch_add(&g.dead, 1);
		if (k->s)
			corio_close(k->s);
		return 0;
	}
	atomic_fetch_add(&g.connected, 1);
	if (corio_wait_go())
		goto out;
	corio_deadline_push(&dl, tool_drain_end(&g.p));
	if (g.p.rate <= 0) {
		ret = cu_receive(k, 1);
	} else {
		uint64_t meas_end = tool_meas_end(&g.p);
		struct corio_fiber *rf;
		unsigned n;

		ret = corio_spawn(cu_receiver, k, NULL, &rf);
		if (ret) {
			tool_conn_fail(c, "conn %u: spawn: %s", c->id, strerror(-ret));
			corio_deadline_pop(&dl);
			goto out;
		}
		while ((n = paced_due(c, meas_end)) != 0) {
			while (n-- && (ret = cu_send(k, 0)) == 0)
				;
			if (ret < 0)
				break;
		}
		k->send_done = 1;
		if (ret < 0)
			corio_cancel(rf);
		if (join_receiver(rf)) {
			corio_deadline_pop(&dl);
			tool_conn_fail(c, "conn %u: the receiver did not end", c->id);
			return 0;
		}
		if (ret >= 0)
			ret = k->rx_status;
	}
	corio_deadline_pop(&dl);
	if (ret < 0 && ret != -EPROTO)
		tool_conn_fail(c, "conn %u: %s after %llu datagrams", c->id, strerror(-ret),
			     (unsigned long long)c->tx);
out:
	corio_close(k->s);
	return 0;
}

static void corio_entry(void *arg)
{
	struct cconn *conns = arg;
	unsigned me = corio_shard_id();

	for (unsigned i = me; i < g.p.conns; i += g.workers) {
		int ret = corio_spawn(g.p.udp ? cu_conn_fiber : corio_conn_fiber, &conns[i], NULL, NULL);

		if (ret) {
			tool_worker_fail(&g.ws[me], "spawn: %s", strerror(-ret));
			atomic_fetch_add(&g.dead, 1);
		}
	}
}

/* ---- epoll engine -------------------------------------------------------------- */

struct pconn {
	struct tool_conn c;
	struct tool_uconn u; /* --udp: instead of c */
	int fd;
	struct { unsigned char *p; size_t len, off, cap; } out;
	unsigned ev;  /* registered events */
	int wr_shut, closed;
};

struct pworker {
	pthread_t th;
	unsigned idx;
	struct pconn *conns; /* every workers-th connection */
	unsigned n;
};

static int fcntl_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -1 : 0;
}

static int p_queue(struct pconn *k, unsigned n, uint64_t t)
{
	size_t need = (size_t)n * k->c.size;

	if (k->out.off == k->out.len)
		k->out.off = k->out.len = 0;
	if (k->out.len + need > k->out.cap) {
		size_t cap = k->out.cap ? k->out.cap : 4096;
		unsigned char *p;

		if (k->out.off) {
			memmove(k->out.p, k->out.p + k->out.off, k->out.len - k->out.off);
			k->out.len -= k->out.off;
			k->out.off = 0;
		}
		while (cap < k->out.len + need)
			cap *= 2;
		p = realloc(k->out.p, cap);
		if (!p)
			return -ENOMEM;
		k->out.p = p;
		k->out.cap = cap;
	}
	tool_conn_fill(&k->c, n, k->out.p + k->out.len, t);
	k->out.len += need;
	return 0;
}

static int p_events(int ep, struct pconn *k, unsigned ev)
{
	struct epoll_event e = { .events = ev, .data.ptr = k };

	if (ev == k->ev)
		return 0;
	k->ev = ev;
	return epoll_ctl(ep, EPOLL_CTL_MOD, k->fd, &e);
}

/* Send what is queued: 0, or -errno. */
static int p_flush(int ep, struct pconn *k)
{
	while (k->out.off < k->out.len) {
		ssize_t r = send(k->fd, k->out.p + k->out.off, k->out.len - k->out.off, MSG_NOSIGNAL);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return p_events(ep, k, EPOLLIN | EPOLLOUT) ? -errno : 0;
			return -errno;
		}
		k->out.off += (size_t)r;
	}
	return p_events(ep, k, EPOLLIN) ? -errno : 0;
}

static void p_close(struct pconn *k, unsigned *open)
{
	if (k->closed)
		return;
	k->closed = 1;
	close(k->fd);
	(*open)--;
}

static void *p_worker(void *arg)
{
	struct pworker *w = arg;
	struct tool_worker_stats *ws = &g.ws[w->idx];
	struct epoll_event ev[64];
	unsigned char *rbuf = malloc(rx_len());
	int ep = epoll_create1(EPOLL_CLOEXEC);
	unsigned open = 0;
	uint64_t meas_end, drain_end;
	int closed = g.p.rate <= 0, v;

	if (w->idx < g.ncpus) {
		cpu_set_t cs;

		CPU_ZERO(&cs);
		CPU_SET(g.cpus[w->idx], &cs);
		pthread_setaffinity_np(pthread_self(), sizeof(cs), &cs);
	}
	if (!rbuf || ep < 0) {
		tool_worker_fail(ws, "worker %u: out of memory or epoll", w->idx);
		atomic_fetch_add(&g.dead, w->n);
		return NULL;
	}
	for (unsigned i = 0; i < w->n; i++) {
		struct pconn *k = &w->conns[i];
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g.p.port) };
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = k };
		int one = 1;

		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		k->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (k->fd < 0 || setsockopt(k->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
		    connect(k->fd, (struct sockaddr *)&sa, sizeof(sa))) {
			tool_conn_fail(&k->c, "conn %u: connect %s: %s", k->c.id, g.p.addr, strerror(errno));
			if (k->fd >= 0)
				close(k->fd);
			k->closed = 1;
			atomic_fetch_add(&g.dead, 1);
			continue;
		}
		if (fcntl_nonblock(k->fd) || epoll_ctl(ep, EPOLL_CTL_ADD, k->fd, &e)) {
			tool_conn_fail(&k->c, "conn %u: epoll: %s", k->c.id, strerror(errno));
			close(k->fd);
			k->closed = 1;
			atomic_fetch_add(&g.dead, 1);
			continue;
		}
		k->ev = EPOLLIN;
		open++;
		atomic_fetch_add(&g.connected, 1);
	}
	while (!(v = atomic_load(&g.go)))
		usleep(50);
	if (v < 0)
		goto out;
	meas_end = tool_meas_end(&g.p);
	drain_end = tool_drain_end(&g.p);
	if (closed) {
		uint64_t now = tool_now_ns();

		for (unsigned i = 0; i < w->n; i++) {
			struct pconn *k = &w->conns[i];

			if (!k->closed && (p_queue(k, g.p.pipeline, now) || p_flush(ep, k)))
				tool_conn_fail(&k->c, "conn %u: send: %s", k->c.id, strerror(errno));
		}
	}
	while (open) {
		uint64_t now = tool_now_ns(), wake = drain_end;
		struct timespec ts;
		int n;

		if (now >= drain_end) {
			for (unsigned i = 0; i < w->n; i++) {
				struct pconn *k = &w->conns[i];

				if (!k->closed) {
					tool_conn_fail(&k->c, "conn %u: echoes missing at the end of the drain "
						     "time after %llu of %llu messages", k->c.id,
						     (unsigned long long)k->c.rx, (unsigned long long)k->c.tx);
					p_close(k, &open);
				}
			}
			break;
		}
		for (unsigned i = 0; i < w->n; i++) {
			struct pconn *k = &w->conns[i];

			if (k->closed || k->wr_shut)
				continue;
			if (!closed && now < meas_end) {
				unsigned d = tool_conn_due_count(&k->c, now, meas_end);

				if (d) {
					if (now - tool_conn_due(&k->c, k->c.tx) >= (uint64_t)k->c.interval_ns)
						atomic_fetch_add_explicit(&g.late, 1, memory_order_relaxed);
					if (p_queue(k, d, 0) || p_flush(ep, k)) {
						tool_conn_fail(&k->c, "conn %u: send: %s", k->c.id, strerror(errno));
						p_close(k, &open);
						continue;
					}
				}
				if (tool_conn_room(&k->c)) {
					uint64_t due = tool_conn_due(&k->c, k->c.tx);

					if (due < wake)
						wake = due;
				}
			} else if (now >= meas_end && k->out.off == k->out.len &&
				   (!closed || k->c.rx == k->c.tx)) {
				shutdown(k->fd, SHUT_WR);
				k->wr_shut = 1;
			}
		}
		if (now < meas_end && meas_end < wake)
			wake = meas_end;
		if (g.busy || wake <= now) {
			ts.tv_sec = 0;
			ts.tv_nsec = 0;
		} else {
			ts.tv_sec = (time_t)((wake - now) / 1000000000ull);
			ts.tv_nsec = (long)((wake - now) % 1000000000ull);
		}
		n = epoll_pwait2(ep, ev, 64, &ts, NULL);
		if (n < 0 && errno != EINTR) {
			tool_worker_fail(ws, "epoll_pwait2: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct pconn *k = ev[i].data.ptr;
			ssize_t r;
			int done;

			if (k->closed)
				continue;
			if ((ev[i].events & EPOLLOUT) && p_flush(ep, k)) {
				tool_conn_fail(&k->c, "conn %u: send: %s", k->c.id, strerror(errno));
				p_close(k, &open);
				continue;
			}
			if (!(ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
				continue;
			r = recv(k->fd, rbuf, rx_len(), 0);
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r <= 0) {
				if (r < 0)
					tool_conn_fail(&k->c, "conn %u: recv: %s", k->c.id, strerror(errno));
				else if (k->c.rx != k->c.tx || !k->wr_shut)
					tool_conn_fail(&k->c, "conn %u: server closed after %llu of %llu messages",
						     k->c.id, (unsigned long long)k->c.rx,
						     (unsigned long long)k->c.tx);
				p_close(k, &open);
				continue;
			}
			now = tool_now_ns();
			done = tool_conn_rx(&k->c, rbuf, (size_t)r, now);
			if (done < 0) {
				p_close(k, &open);
				continue;
			}
			if (closed && done && now < meas_end &&
			    (p_queue(k, (unsigned)done, now) || p_flush(ep, k))) {
				tool_conn_fail(&k->c, "conn %u: send: %s", k->c.id, strerror(errno));
				p_close(k, &open);
			}
		}
	}
out:
	for (unsigned i = 0; i < w->n; i++) {
		p_close(&w->conns[i], &open);
		free(w->conns[i].out.p);
	}
	close(ep);
	free(rbuf);
	return NULL;
}

/* ---- epoll engine, UDP ---------------------------------------------------------- */

/* Send one datagram stamped t: 1 sent, 0 the socket is full (try later), -errno. */
static int pu_send(struct pconn *k, unsigned char *buf, uint64_t t)
{
	tool_uconn_fill(&k->u, buf, t);
	if (send(k->fd, buf, k->u.c.size, 0) == (ssize_t)k->u.c.size)
		return 1;
	tool_uconn_unfill(&k->u);
	return errno == EAGAIN || errno == EINTR || errno == ENOBUFS ? 0 : -errno;
}

static void *pu_worker(void *arg)
{
	struct pworker *w = arg;
	struct tool_worker_stats *ws = &g.ws[w->idx];
	struct epoll_event ev[64];
	unsigned char *rbuf = malloc(65536), *tbuf = malloc(g.p.size);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	unsigned open = 0;
	uint64_t meas_end, drain_end;
	int closed = g.p.rate <= 0, v;

	if (w->idx < g.ncpus) {
		cpu_set_t cs;

		CPU_ZERO(&cs);
		CPU_SET(g.cpus[w->idx], &cs);
		pthread_setaffinity_np(pthread_self(), sizeof(cs), &cs);
	}
	if (!rbuf || !tbuf || ep < 0) {
		tool_worker_fail(ws, "worker %u: out of memory or epoll", w->idx);
		atomic_fetch_add(&g.dead, w->n);
		free(rbuf);
		free(tbuf);
		if (ep >= 0)
			close(ep);
		return NULL;
	}
	for (unsigned i = 0; i < w->n; i++) {
		struct pconn *k = &w->conns[i];
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g.p.port) };
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = k };

		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		k->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (k->fd >= 0)
			big_rcvbuf(k->fd);
		if (k->fd < 0 || connect(k->fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, k->fd, &e)) {
			tool_conn_fail(&k->u.c, "conn %u: udp socket to %s: %s", k->u.c.id, g.p.addr,
				     strerror(errno));
			if (k->fd >= 0)
				close(k->fd);
			k->closed = 1;
			atomic_fetch_add(&g.dead, 1);
			continue;
		}
		open++;
		atomic_fetch_add(&g.connected, 1);
	}
	while (!(v = atomic_load(&g.go)))
		usleep(50);
	if (v < 0)
		goto out;
	meas_end = tool_meas_end(&g.p);
	drain_end = tool_drain_end(&g.p);
	while (open) {
		uint64_t now = tool_now_ns(), wake = drain_end;
		struct timespec ts;
		int n;

		if (now >= drain_end) {
			for (unsigned i = 0; i < w->n; i++) {
				tool_uconn_expire(&w->conns[i].u, UINT64_MAX);
				p_close(&w->conns[i], &open);
			}
			break;
		}
		for (unsigned i = 0; i < w->n; i++) {
			struct pconn *k = &w->conns[i];
			struct tool_conn *c = &k->u.c;
			int r = 1;

			if (k->closed)
				continue;
			tool_uconn_expire(&k->u, now);
			if (now < meas_end && closed) {
				while (tool_conn_room(c) && (r = pu_send(k, tbuf, now)) > 0)
					;
			} else if (now < meas_end) {
				unsigned d = tool_conn_due_count(c, now, meas_end);

				if (d && now - tool_conn_due(c, c->tx) >= (uint64_t)c->interval_ns)
					atomic_fetch_add_explicit(&g.late, 1, memory_order_relaxed);
				while (d-- && (r = pu_send(k, tbuf, 0)) > 0)
					;
				if (tool_conn_room(c) && tool_conn_due(c, c->tx) < wake)
					wake = tool_conn_due(c, c->tx);
			}
			if (r < 0) {
				tool_conn_fail(c, "conn %u: send: %s", c->id, strerror(-r));
				p_close(k, &open);
				continue;
			}
			if (now >= meas_end && c->rx == c->tx) {
				p_close(k, &open);
				continue;
			}
			if (r == 0 || !tool_conn_room(c)) /* socket full / ring full: poll again soon */
				wake = now + 20000 < wake ? now + 20000 : wake;
			if (tool_uconn_next_loss(&k->u) < wake)
				wake = tool_uconn_next_loss(&k->u);
		}
		if (!open)
			break;
		if (now < meas_end && meas_end < wake)
			wake = meas_end;
		if (g.busy || wake <= now) {
			ts.tv_sec = 0;
			ts.tv_nsec = 0;
		} else {
			ts.tv_sec = (time_t)((wake - now) / 1000000000ull);
			ts.tv_nsec = (long)((wake - now) % 1000000000ull);
		}
		n = epoll_pwait2(ep, ev, 64, &ts, NULL);
		if (n < 0 && errno != EINTR) {
			tool_worker_fail(ws, "epoll_pwait2: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct pconn *k = ev[i].data.ptr;

			for (int j = 0; j < 64 && !k->closed; j++) {
				ssize_t r = recv(k->fd, rbuf, 65536, 0);

				if (r < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				if (r < 0) {
					tool_conn_fail(&k->u.c, "conn %u: recv: %s", k->u.c.id, strerror(errno));
					p_close(k, &open);
					break;
				}
				now = tool_now_ns();
				if (tool_uconn_rx(&k->u, rbuf, (size_t)r, now) < 0) {
					p_close(k, &open);
					break;
				}
				/* closed loop: the next datagram goes out at once */
				while (closed && now < meas_end && tool_conn_room(&k->u.c) &&
				       pu_send(k, tbuf, now) > 0)
					;
			}
		}
	}
out:
	for (unsigned i = 0; i < w->n; i++)
		p_close(&w->conns[i], &open);
	close(ep);
	free(rbuf);
	free(tbuf);
	return NULL;
}

/* ---- main --------------------------------------------------------------------- */

static const char *const engines[] = { "corio", "epoll", NULL };
static const char *const recvs[] = { "buf", "copy", NULL };

/* What main()'s steps share: the options only main reads, and the run. */
static struct {
	const char *label, *spectrum;
	int json, quiet, probe, server_pid;
	struct tool_cpus cpus;
	struct cconn *cc;   /* corio engine */
	struct pworker *pw; /* epoll engine */
	struct corio_rt *rt;
	int64_t srv0, srv1, cli0, cli1; /* CPU times at the measured window's edges */
	uint64_t tls_handshakes;        /* summed over the shards before corio_wait */
} m = { .probe = 1, .cpus = { g.cpus, MAX_WORKERS, 0, NULL }, .srv0 = -1, .srv1 = -1 };

static int parse_options(int argc, char **argv)
{
	const struct tool_opt opts[] = {
		{ TOOL_OPT_COUNT("port", 'p', g.p.port, 1, 65535, "P",
				 "echo server on 127.0.0.1:P (required)"), .required = 1 },
		{ TOOL_OPT_COUNT("conns", 'c', g.p.conns, 1, MAX_CONNS, "N", "connections (1)") },
		{ TOOL_OPT_SIZE("size", 's', g.p.size, 1, 65536, "BYTES",
				"message size, 1..64KiB (64)") },
		{ TOOL_OPT_COUNT("pipeline", 'P', g.p.pipeline, 1, 1024, "N",
				 "closed loop: messages in flight per connection (1)") },
		{ TOOL_OPT_COUNT("rate", 'r', g.p.rate, 1, 100000000, "MSGS/S",
				 "open loop at this total rate (e.g. 100k); default closed loop") },
		{ TOOL_OPT_SECONDS("duration", 'd', g.p.duration_s, 0.01, 3600, "SECS",
				   "measured time (5)") },
		{ TOOL_OPT_SECONDS("warmup", 'w', g.p.warmup_s, 0, 600, "SECS",
				   "load before measuring, not recorded (0.5)") },
		{ TOOL_OPT_SECONDS("drain", 0, g.p.drain_s, 0.01, 600, "SECS",
				   "wait at most this long for the last echoes (2)") },
		{ TOOL_OPT_CHOICE("engine", 'e', g.engine, engines, "E",
				  "corio (shards, fibers) or epoll (plain threads) (corio)") },
		{ TOOL_OPT_COUNT("workers", 't', g.workers, 1, MAX_WORKERS, "N",
				 "shards / threads; default: one per --cpus entry, else 1") },
		{ TOOL_OPT_CPUS("cpus", 'C', m.cpus, "LIST",
				"pin worker i to the i-th CPU of LIST (e.g. 0)") },
		{ TOOL_OPT_FLAG("busy-poll", 0, g.busy, "never sleep: corio idle=poll / epoll_wait(0)") },
		{ TOOL_OPT_CHOICE("recv", 0, g.recv_copy, recvs, "MODE",
				  "corio engine: buf (provided buffers) or copy (buf)") },
		{ TOOL_OPT_FLAG("udp", 'u', g.p.udp,
				"UDP: one socket per conn, one datagram per message\n"
				"(--size 12..65507); reports lost/late/dup/reordered") },
		{ TOOL_OPT_SECONDS("loss", 0, g.p.loss_s, 0.001, 600, "SECS",
				   "UDP: an echo this late is counted lost (0.5)") },
		{ TOOL_OPT_FLAG("tls", 0, g.tls,
				"TLS 1.3 on every connection (corio engine, TCP): a full\n"
				"handshake each, before the load; no probe connection") },
		{ TOOL_OPT_STRING("tls-ca", 0, g.tls_ca, "FILE",
				  "--tls: trust these CAs (PEM; corio-echo's cert=PATH);\n"
				  "default: the system store") },
		{ TOOL_OPT_STRING("tls-name", 0, g.tls_name, "NAME",
				  "--tls: the name (SNI) the certificate must carry\n"
				  "(127.0.0.1)") },
		{ TOOL_OPT_FLAG("tls-insecure", 0, g.tls_insecure,
				"--tls: do not verify the certificate (anyone could\n"
				"impersonate the server)") },
		{ TOOL_OPT_COUNT("server-pid", 0, m.server_pid, 1, 1u << 30, "PID",
				 "report that process's CPU time per message") },
		{ TOOL_OPT_SET("no-probe", 0, m.probe, 0, "skip the probe connection") },
		{ TOOL_OPT_FLAG("json", 0, m.json, "one JSON object instead of the text report") },
		{ TOOL_OPT_STRING("label", 0, m.label, "TEXT", "copied into the JSON") },
		{ TOOL_OPT_STRING("spectrum", 0, m.spectrum, "FILE",
				  "write the latency percentile spectrum (percentile, us)") },
		{ TOOL_OPT_FLAG("quiet", 'q', m.quiet, "no progress line") },
		{ 0 },
	};
	const struct tool_cli cli = {
		"corio-load", "-p PORT [options]",
		"Exit status: 0; 1 errors (wrong bytes, a connection failed); 2 bad options;\n"
		"3 (--udp) datagrams lost, late, duplicated or reordered.\n",
		opts,
	};

	g.p.conns = 1;
	g.p.size = 64;
	g.p.pipeline = 1;
	g.p.duration_s = 5;
	g.p.warmup_s = 0.5;
	g.p.drain_s = 2;
	g.p.loss_s = 0.5;
	g.p.port = -1;
	g.recv_copy = -1; /* not given: --tls tells it apart */
	g.tls_name = "127.0.0.1";
	return tool_opt_parse(&cli, argc, argv);
}

/* --tls and what it can be combined with; the client context: 0 or 2.
 * TLS reads decrypt into the connection's buffer: --recv copy only. */
static int check_tls(void)
{
	struct corio_tls_ctx_opts o = { .flags = CORIO_TLS_ONLY_13 | CORIO_TLS_NO_TICKETS };
	const char *bad = NULL;

	if (!g.tls) {
		if (g.tls_ca || g.tls_insecure) {
			fprintf(stderr, "corio-load: --tls-ca and --tls-insecure need --tls\n");
			return 2;
		}
		g.recv_copy = g.recv_copy > 0;
		return 0;
	}
	if (g.engine != 0)
		bad = "--engine epoll (TLS runs on the corio engine)";
	else if (g.p.udp)
		bad = "--udp (TLS runs over TCP)";
	else if (g.recv_copy == 0)
		bad = "--recv buf (a TLS session decrypts into the connection's buffer: --recv copy)";
	else if (g.tls_ca && g.tls_insecure)
		bad = "--tls-ca and --tls-insecure together (verify, or do not)";
	if (bad) {
		fprintf(stderr, "corio-load: --tls: not with %s\n", bad);
		return 2;
	}
	g.recv_copy = 1;
	o.ca_file = g.tls_ca;
	if (g.tls_insecure)
		o.flags |= CORIO_TLS_NO_VERIFY;
	if (corio_tls_ctx_new(&o, &g.tls_ctx)) {
		fprintf(stderr, "corio-load: --tls-ca %s: %s\n", g.tls_ca ? g.tls_ca : "(system store)",
			corio_last_error());
		return 2;
	}
	m.probe = 0; /* the probe speaks plain TCP */
	return 0;
}

/* The checks that span options, and the derived settings: 0 or 2. */
static int check_options(void)
{
	if (check_tls())
		return 2;
	g.ncpus = m.cpus.n;
	snprintf(g.cpus_str, sizeof(g.cpus_str), "%s", g.ncpus ? m.cpus.arg : "any");
	if (!g.workers)
		g.workers = g.ncpus ? g.ncpus : 1;
	if (g.workers > g.p.conns)
		g.workers = g.p.conns;
	if (g.p.rate > 0 && g.p.rate / g.p.conns > 1e7) {
		fprintf(stderr, "corio-load: --rate: more than 10M msgs/s per connection\n");
		return 2;
	}
	if (g.p.udp && (g.p.size < TOOL_HDR || g.p.size > 65507)) {
		fprintf(stderr, "corio-load: --udp: --size must be %d..65507 (a datagram carries its "
				"connection and sequence number)\n", TOOL_HDR);
		return 2;
	}
	return 0;
}

/* The probe connection and the --server-pid check: 0, 1 or 2. */
static int probe_target(char *addr, size_t len)
{
	snprintf(addr, len, "127.0.0.1:%d", g.p.port);
	g.p.addr = addr;
	tool_load_global_init();
	if (m.probe && (g.p.udp ? tool_probe_udp(&g.p) : tool_probe(&g.p, 0))) {
		fprintf(stderr, "corio-load: the probe connection to %s failed; is an echo server there?\n",
			addr);
		return 1;
	}
	if (m.server_pid && tool_proc_cpu_ns(m.server_pid) < 0) {
		fprintf(stderr, "corio-load: --server-pid %d: cannot read its CPU time\n", m.server_pid);
		return 2;
	}
	return 0;
}

/* The corio engine: one shard per worker, the connections spread over them. */
static int start_corio(void)
{
	struct corio_config cfg;
	int ret;

	m.cc = calloc(g.p.conns, sizeof(*m.cc));
	if (!m.cc)
		return -ENOMEM;
	for (unsigned i = 0; i < g.p.conns; i++) {
		struct cconn *c = &m.cc[i];
		size_t txn = g.p.size * (g.p.rate > 0 ? 4096 : g.p.pipeline);

		if (g.p.udp ? tool_uconn_init(&c->u, i, &g.p, &g.ws[i % g.workers])
			    : tool_conn_init(&c->c, i, &g.p, &g.ws[i % g.workers]))
			return -ENOMEM;
		c->tx = malloc(txn);
		c->rx = g.recv_copy ? malloc(g.p.udp ? 65536 : rx_len()) : NULL; /* --tls: copy */
		if (!c->tx || (g.recv_copy && !c->rx))
			return -ENOMEM;
	}
	corio_config_init(&cfg);
	cfg.shards = g.workers;
	cfg.cpus = g.ncpus ? g.cpus : NULL;
	cfg.idle = g.busy ? CORIO_IDLE_POLL : CORIO_IDLE_BLOCK;
	cfg.stall_ns = 0;
	ret = corio_start(&cfg, corio_entry, m.cc, &m.rt);
	if (ret) {
		fprintf(stderr, "corio-load: corio_start: %s (%s)\n", strerror(-ret),
			corio_last_error());
		return 1;
	}
	return 0;
}

/* The epoll engine: one plain thread per worker. */
static int start_epoll(void)
{
	int ret;

	m.pw = calloc(g.workers, sizeof(*m.pw));
	if (!m.pw)
		return -ENOMEM;
	for (unsigned w = 0; w < g.workers; w++) {
		m.pw[w].idx = w;
		m.pw[w].conns = calloc(g.p.conns / g.workers + 1, sizeof(struct pconn));
		if (!m.pw[w].conns)
			return -ENOMEM;
	}
	for (unsigned i = 0; i < g.p.conns; i++) {
		struct pworker *w = &m.pw[i % g.workers];
		struct pconn *k = &w->conns[w->n++];

		if (g.p.udp ? tool_uconn_init(&k->u, i, &g.p, &g.ws[w->idx])
			    : tool_conn_init(&k->c, i, &g.p, &g.ws[w->idx]))
			return -ENOMEM;
	}
	for (unsigned w = 0; w < g.workers; w++) {
		ret = pthread_create(&m.pw[w].th, NULL, g.p.udp ? pu_worker : p_worker, &m.pw[w]);
		if (ret) {
			fprintf(stderr, "corio-load: pthread_create: %s\n", strerror(ret));
			return 1;
		}
	}
	return 0;
}

/* Per-worker stats, then the engine: 0 or 1 (out of memory said). */
static int start_workers(void)
{
	int ret = -ENOMEM;

	g.ws = calloc(g.workers, sizeof(*g.ws));
	if (g.ws) {
		for (unsigned i = 0; i < g.workers; i++)
			tool_hist_init(&g.ws[i].hist);
		ret = g.engine == 0 ? start_corio() : start_epoll();
	}
	if (ret == -ENOMEM) {
		fprintf(stderr, "corio-load: out of memory\n");
		return 1;
	}
	return ret;
}

/* Progress every second; CPU times sampled at the window's edges. */
static void measure(void)
{
	uint64_t w0 = tool_warm_end(&g.p), w1 = tool_meas_end(&g.p);
	int progress = !m.quiet && g.p.warmup_s + g.p.duration_s > 3;
	int tty = isatty(2);
	uint64_t next = g.p.start_ns + 1000000000ull, last_done = 0, last_t = g.p.start_ns;

	for (;;) {
		uint64_t t = next;

		if (m.cli0 == 0 && w0 <= t)
			t = w0;
		if (w1 <= t)
			t = w1;
		sleep_until_ns(t);
		if (m.cli0 == 0 && t == w0) {
			m.srv0 = m.server_pid ? tool_proc_cpu_ns(m.server_pid) : -1;
			m.cli0 = tool_self_cpu_ns();
			if (!m.cli0)
				m.cli0 = 1;
		}
		if (t == w1) {
			m.srv1 = m.server_pid ? tool_proc_cpu_ns(m.server_pid) : -1;
			m.cli1 = tool_self_cpu_ns();
			break;
		}
		if (t == next) {
			uint64_t done = 0, errs = 0;

			for (unsigned i = 0; i < g.workers; i++) {
				done += atomic_load_explicit(&g.ws[i].done_all, memory_order_relaxed);
				errs += atomic_load(&g.ws[i].errors);
			}
			if (progress)
				fprintf(stderr, "%s[%5.1f s] %10.0f msgs/s  %llu errors%s",
					tty ? "\r" : "", (double)(t - g.p.start_ns) / 1e9,
					(double)(done - last_done) * 1e9 / (double)(t - last_t),
					(unsigned long long)errs, tty ? "  " : "\n");
			last_done = done;
			last_t = t;
			next += 1000000000ull;
		}
	}
	if (progress && tty)
		fprintf(stderr, "\n");
}

/* Every connection up (or failed), then go, measure, and wait for the
 * workers to end: 0 or 1. */
static int run(void)
{
	uint64_t limit = tool_now_ns() + 10000000000ull;
	int ret = 0;

	while (atomic_load(&g.connected) + (unsigned)atomic_load(&g.dead) < g.p.conns &&
	       tool_now_ns() < limit)
		usleep(1000);
	if (atomic_load(&g.connected) < g.p.conns) {
		atomic_store(&g.go, -1);
		ret = 1;
	} else {
		g.p.start_ns = tool_now_ns() + 2000000;
		atomic_store(&g.go, 1);
		measure();
	}
	if (g.engine == 0) {
		int r2;

		for (unsigned i = 0; g.tls && i < g.workers; i++) {
			struct corio_tls_stats ts;

			if (!corio_tls_stats_get(m.rt, i, &ts))
				m.tls_handshakes += ts.handshakes;
		}
		r2 = corio_wait(m.rt);

		if (r2) {
			fprintf(stderr, "corio-load: runtime: %s\n", strerror(-r2));
			ret = 1;
		}
	} else {
		for (unsigned w = 0; w < g.workers; w++)
			pthread_join(m.pw[w].th, NULL);
	}
	return ret;
}

/* The workers' results summed into one report. */
static void gather(struct tool_report *rep)
{
	rep->engine = engines[g.engine];
	rep->label = m.label;
	rep->workers = g.workers;
	rep->cpus = g.cpus_str;
	rep->busy_poll = g.busy;
	rep->seconds = g.p.duration_s;
	rep->late_sends = atomic_load(&g.late);
	tool_hist_init(&rep->hist);
	for (unsigned i = 0; i < g.workers; i++) {
		tool_hist_merge(&rep->hist, &g.ws[i].hist);
		rep->msgs += g.ws[i].msgs;
		if (g.ws[i].errors && !rep->errors)
			snprintf(rep->first_err, sizeof(rep->first_err), "%s", g.ws[i].err);
		rep->errors += atomic_load(&g.ws[i].errors);
		rep->lost += g.ws[i].lost;
		rep->late += g.ws[i].late;
		rep->dup += g.ws[i].dup;
		rep->reordered += g.ws[i].reordered;
	}
	rep->server_cpu_ns = m.srv0 >= 0 && m.srv1 >= 0 ? m.srv1 - m.srv0 : -1;
	rep->client_cpu_ns = m.cli1 - m.cli0;
	if (g.tls) {
		rep->tls = atomic_load(&g.tls_version);
		if (!rep->tls)
			rep->tls = "none agreed";
		rep->tls_handshakes = m.tls_handshakes;
	}
}

/* Print the report (and the spectrum); the exit status from ret and it. */
static int report(int ret)
{
	struct tool_report rep = { 0 };

	gather(&rep);
	tool_report_print(stdout, &rep, &g.p, m.json);
	if (m.spectrum) {
		FILE *f = fopen(m.spectrum, "w");

		if (!f) {
			fprintf(stderr, "corio-load: %s: %s\n", m.spectrum, strerror(errno));
			ret = 1;
		} else {
			tool_hist_spectrum(&rep.hist, f);
			fclose(f);
		}
	}
	if (rep.errors) {
		fprintf(stderr, "corio-load: %llu errors; first: %s\n", (unsigned long long)rep.errors,
			rep.first_err);
		ret = 1;
	}
	if (!ret && (rep.lost || rep.late || rep.dup || rep.reordered)) {
		fprintf(stderr, "corio-load: datagrams lost %llu, late %llu, duplicated %llu, "
				"reordered %llu (exit status 3)\n", (unsigned long long)rep.lost,
			(unsigned long long)rep.late, (unsigned long long)rep.dup,
			(unsigned long long)rep.reordered);
		ret = 3;
	}
	return ret;
}

static void free_conn(struct tool_conn *c, struct tool_uconn *u)
{
	if (g.p.udp)
		tool_uconn_free(u);
	else
		tool_conn_free(c);
}

static void free_all(void)
{
	if (m.cc) {
		for (unsigned i = 0; i < g.p.conns; i++) {
			free_conn(&m.cc[i].c, &m.cc[i].u);
			free(m.cc[i].tx);
			free(m.cc[i].rx);
		}
		free(m.cc);
	}
	if (m.pw) {
		for (unsigned w = 0; w < g.workers; w++) {
			for (unsigned i = 0; i < m.pw[w].n; i++)
				free_conn(&m.pw[w].conns[i].c, &m.pw[w].conns[i].u);
			free(m.pw[w].conns);
		}
		free(m.pw);
	}
	free(g.ws);
}

int main(int argc, char **argv)
{
	char addr[32];
	int ret;

	/* timed sleeps (open loop without --busy-poll) should wake on time, not
	 * up to 50 us late: the default timer slack; threads inherit this */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	ret = parse_options(argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	ret = check_options();
	if (!ret)
		ret = probe_target(addr, sizeof(addr));
	if (!ret)
		ret = start_workers();
	if (ret)
		return ret;
	ret = report(run());
	free_all();
	corio_tls_ctx_free(g.tls_ctx); /* after corio_wait: no session is open */
	return ret;
}
