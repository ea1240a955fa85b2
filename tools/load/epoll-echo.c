/* SPDX-License-Identifier: MIT */
/*
 * epoll-echo - the TCP echo server a careful user would write without corio,
 * as the baseline for corio-echo: one thread per CPU, each with its own
 * SO_REUSEPORT listener and epoll set (level-triggered), non-blocking
 * sockets with TCP_NODELAY, one read(64 KiB) per readiness event and the
 * bytes written straight back. A short write keeps the rest, stops reading
 * that connection and waits for EPOLLOUT (back-pressure instead of
 * unbounded buffering). --busy-poll spins in epoll_wait(timeout 0).
 * --sockperf reflects sockperf's framing (tools/common/sockperf.h).
 *
 * --udp: each thread has its own SO_REUSEPORT UDP socket instead of a
 * listener; per readiness event it reads up to 64 datagrams (recvfrom until
 * EAGAIN) and sends each straight back to its sender with sendto; a full
 * send buffer (EAGAIN) waits in poll(POLLOUT) for that one datagram, so
 * nothing is dropped by the server. --udp --sockperf reflects sockperf's
 * UDP framing (tool_sp_dgram_next).
 *
 * Binds 127.0.0.1 only. Stops cleanly on SIGINT/SIGTERM (or --timeout).
 */
#include "common/opt.h"
#include "common/proc.h"
#include "common/sockperf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RBUF (64 * 1024)
#define MAX_THREADS 256

struct conn {
	int fd;
	int sending;        /* waiting for EPOLLOUT with pend bytes left */
	struct tool_buf pend; /* unsent bytes */
	size_t pend_off;
	struct tool_sp sp;
	struct tool_buf out;  /* sockperf replies */
};

struct worker {
	pthread_t th;
	unsigned idx;
	int cpu;            /* -1: not pinned */
	int lfd, epfd;
	uint64_t accepts, msgs_in, bytes_in, errors, send_waits;
	int err;
};

static struct {
	unsigned threads;
	int port;
	int busy;
	int sockperf;
	int udp;
	int stopfd; /* eventfd: written once to stop every worker */
	_Atomic int stop;
	_Atomic int bound_port;
} g;

static char listener_tag; /* epoll data.ptr of the listener */
static char stop_tag;


/* Send one datagram; a full send buffer is waited out. */
static void udp_reply(struct worker *w, const void *d, size_t n, const struct sockaddr *to,
		      socklen_t tolen)
{
	for (;;) {
		struct pollfd pf = { .fd = w->lfd, .events = POLLOUT };

		if (sendto(w->lfd, d, n, 0, to, tolen) >= 0)
			return;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != ENOBUFS) {
			w->errors++;
			return;
		}
		w->send_waits++;
		poll(&pf, 1, 100);
	}
}

static void on_udp(struct worker *w, unsigned char *buf)
{
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(w->lfd, buf, RBUF, 0, (struct sockaddr *)&from, &fl);
		size_t pos = 0, off, len;
		int r;

		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				w->errors++;
			return;
		}
		w->msgs_in++;
		w->bytes_in += (uint64_t)n;
		if (!g.sockperf) {
			udp_reply(w, buf, (size_t)n, (struct sockaddr *)&from, fl);
			continue;
		}
		while ((r = tool_sp_dgram_next(buf, (size_t)n, &pos, &off, &len)) != 0) {
			if (r < 0)
				w->errors++;
			else
				udp_reply(w, buf + off, len, (struct sockaddr *)&from, fl);
		}
	}
}

static void conn_close(struct worker *w, struct conn *c)
{
	close(c->fd); /* also removes it from the epoll set */
	tool_buf_free(&c->pend);
	tool_buf_free(&c->out);
	free(c);
}

static int set_events(struct worker *w, struct conn *c, unsigned ev)
{
	struct epoll_event e = { .events = ev, .data.ptr = c };

	return epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &e);
}

/* Write data; keep what the socket does not take. 0, or -1 to close. */
static int reply(struct worker *w, struct conn *c, const unsigned char *data, size_t n)
{
	while (n) {
		ssize_t k = send(c->fd, data, n, MSG_NOSIGNAL);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				return -1;
			c->pend.len = 0;
			c->pend_off = 0;
			if (tool_buf_put(&c->pend, data, n))
				return -1;
			c->sending = 1;
			return set_events(w, c, EPOLLOUT) ? -1 : 0;
		}
		data += k;
		n -= (size_t)k;
	}
	return 0;
}

static int on_readable(struct worker *w, struct conn *c, unsigned char *buf)
{
	ssize_t n = recv(c->fd, buf, RBUF, 0);

	if (n <= 0) {
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n < 0 && errno != ECONNRESET)
			w->errors++;
		return -1;
	}
	w->msgs_in++;
	w->bytes_in += (uint64_t)n;
	if (!g.sockperf)
		return reply(w, c, buf, (size_t)n);
	c->out.len = 0;
	if (tool_sp_feed(&c->sp, buf, (size_t)n, &c->out)) {
		fprintf(stderr, "epoll-echo: closing a connection: bad sockperf frame\n");
		w->errors++;
		return -1;
	}
	return c->out.len ? reply(w, c, c->out.p, c->out.len) : 0;
}

static int on_writable(struct worker *w, struct conn *c)
{
	while (c->pend_off < c->pend.len) {
		ssize_t k = send(c->fd, c->pend.p + c->pend_off, c->pend.len - c->pend_off,
				 MSG_NOSIGNAL);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -1;
		}
		c->pend_off += (size_t)k;
	}
	c->sending = 0;
	return set_events(w, c, EPOLLIN) ? -1 : 0;
}

static void on_accept(struct worker *w)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(w->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
		struct epoll_event e = { .events = EPOLLIN };
		struct conn *c;

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
				w->errors++;
				if (errno == EMFILE || errno == ENFILE)
					fprintf(stderr, "epoll-echo: accept: %s\n", strerror(errno));
			}
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		tool_sp_init(&c->sp);
		e.data.ptr = c;
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &e)) {
			conn_close(w, c);
			continue;
		}
		w->accepts++;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct epoll_event ev[64];
	unsigned char *buf = malloc(RBUF);

	if (!buf) {
		w->err = -ENOMEM;
		return NULL;
	}
	while (!atomic_load_explicit(&g.stop, memory_order_relaxed)) {
		int n = epoll_wait(w->epfd, ev, 64, g.busy ? 0 : -1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			w->err = -errno;
			break;
		}
		for (int i = 0; i < n; i++) {
			void *p = ev[i].data.ptr;
			struct conn *c = p;
			int r;

			if (p == &listener_tag) {
				if (g.udp)
					on_udp(w, buf);
				else
					on_accept(w);
				continue;
			}
			if (p == &stop_tag)
				goto out;
			if (c->sending)
				r = (ev[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) ? on_writable(w, c) : 0;
			else
				r = on_readable(w, c, buf);
			if (r)
				conn_close(w, c);
		}
	}
out:
	free(buf);
	return NULL; /* connections still open are closed by exit */
}

static struct worker workers[MAX_THREADS];
static int cpu[MAX_THREADS];
static struct tool_cpus cpus = { cpu, MAX_THREADS, 0, NULL };
static double timeout;

static int parse_options(int argc, char **argv)
{
	const struct tool_opt opts[] = {
		{ TOOL_OPT_COUNT("threads", 't', g.threads, 1, MAX_THREADS, "N",
				 "worker threads, one SO_REUSEPORT listener each (1)") },
		{ TOOL_OPT_COUNT("shards", 0, g.threads, 1, MAX_THREADS, "N", "same as --threads") },
		{ TOOL_OPT_CPUS("cpus", 'C', cpus, "LIST",
				"pin thread i to the i-th CPU of LIST (e.g. 1 or 0-1)") },
		{ TOOL_OPT_COUNT("port", 'p', g.port, 0, 65535, "P",
				 "TCP port on 127.0.0.1; 0 picks one and prints it (0)") },
		{ TOOL_OPT_FLAG("busy-poll", 0, g.busy, "spin in epoll_wait(0) instead of sleeping") },
		{ TOOL_OPT_FLAG("udp", 'u', g.udp,
				"UDP echo: one SO_REUSEPORT socket per thread, each\n"
				"datagram sent back to its sender") },
		{ TOOL_OPT_FLAG("sockperf", 0, g.sockperf,
				"reflect sockperf's TCP (with --udp: UDP) framing") },
		{ TOOL_OPT_SECONDS("timeout", 0, timeout, 0.001, 1e6, "SECS",
				   "exit after SECS (default: run until SIGINT/SIGTERM)") },
		{ 0 },
	};
	const struct tool_cli cli = {
		"epoll-echo", "[options]",
		"Prints 'epoll-echo: listening on 127.0.0.1:PORT ...' when ready.\n", opts,
	};

	g.threads = 1;
	return tool_opt_parse(&cli, argc, argv);
}

/* One listener and epoll set per thread, in the main thread (port 0 is
 * resolved by the first), and the stop eventfd in every set: 0 or 1. */
static int listen_all(void)
{
	g.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (g.stopfd < 0) {
		perror("epoll-echo: eventfd");
		return 1;
	}
	for (unsigned i = 0; i < g.threads; i++) {
		struct epoll_event le = { .events = EPOLLIN, .data.ptr = &listener_tag };
		struct epoll_event se = { .events = EPOLLIN, .data.ptr = &stop_tag };
		int fd = tool_listen_loopback(g.udp ? SOCK_DGRAM : SOCK_STREAM, g.port, 1);

		if (fd < 0) {
			fprintf(stderr, "epoll-echo: listen on 127.0.0.1:%d: %s\n", g.port, strerror(-fd));
			return 1;
		}
		if (!g.port)
			g.port = tool_local_port(fd);
		workers[i].idx = i;
		workers[i].lfd = fd;
		workers[i].cpu = cpus.n ? cpu[i % cpus.n] : -1;
		workers[i].epfd = epoll_create1(EPOLL_CLOEXEC);
		if (workers[i].epfd < 0 || epoll_ctl(workers[i].epfd, EPOLL_CTL_ADD, fd, &le) ||
		    epoll_ctl(workers[i].epfd, EPOLL_CTL_ADD, g.stopfd, &se)) {
			perror("epoll-echo: epoll");
			return 1;
		}
	}
	return 0;
}

/* Wake every thread, join them, print their counters: the exit status. */
static int stop_all(void)
{
	uint64_t v = 1;
	int ret = 0;

	atomic_store(&g.stop, 1);
	if (write(g.stopfd, &v, sizeof(v)) != sizeof(v))
		perror("epoll-echo: eventfd write");
	for (unsigned i = 0; i < g.threads; i++) {
		pthread_join(workers[i].th, NULL);
		if (workers[i].err) {
			fprintf(stderr, "epoll-echo: thread %u: %s\n", i, strerror(-workers[i].err));
			ret = 1;
		}
		fprintf(stderr, "epoll-echo: thread %u: %llu accepts, %llu reads, %llu bytes, %llu errors, "
			"%llu send waits\n", i, (unsigned long long)workers[i].accepts,
			(unsigned long long)workers[i].msgs_in, (unsigned long long)workers[i].bytes_in,
			(unsigned long long)workers[i].errors, (unsigned long long)workers[i].send_waits);
		close(workers[i].lfd);
		close(workers[i].epfd);
	}
	return ret;
}

int main(int argc, char **argv)
{
	int ret;

	ret = parse_options(argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	if (listen_all())
		return 1;
	tool_block_stop_signals();
	for (unsigned i = 0; i < g.threads; i++) {
		ret = tool_thread_pinned(&workers[i].th, workers[i].cpu, worker_main, &workers[i]);
		if (ret) {
			fprintf(stderr, "epoll-echo: pthread_create: %s\n", strerror(ret));
			return 1;
		}
	}
	printf("epoll-echo: listening on 127.0.0.1:%d threads=%u cpus=", g.port, g.threads);
	for (unsigned i = 0; i < g.threads; i++)
		printf("%s%d", i ? "," : "", workers[i].cpu);
	printf(" proto=%s idle=%s mode=%s pid=%d\n", g.udp ? "udp" : "tcp", g.busy ? "busy-poll" : "block",
	       g.sockperf ? "sockperf" : "echo", (int)getpid());
	fflush(stdout);
	/* SIGINT/SIGTERM or the timeout; EINTR (a tracer attaching) is not a stop */
	tool_wait_stop(timeout);
	return stop_all();
}
