/* SPDX-License-Identifier: MIT */
/*
 * soak-load - connection churn against an echo server, for `make soak`.
 *
 * Plain threads and blocking sockets (no corio: the client must not share
 * the server's bugs). Each thread loops until the deadline over a mix of
 * client behaviours, chosen in turn:
 *   long      a connection kept for the whole run, ping-ponging messages of
 *             random size (1 B .. 64 KiB)
 *   churn     connect, send a message, read it back, close
 *   reset     connect, send 16 KiB, close with SO_LINGER 0 (RST at once)
 *   halfclose connect, send, shutdown(SHUT_WR), read the echo up to EOF
 *   stall     connect, send without reading until the socket blocks (the
 *             server's sends back up), then reset
 *   vanish    connect, send half a message, close without reading
 * Every echoed byte is checked against what was sent (a per-connection
 * pseudo-random stream). A mismatch, an unexpected end of stream or a
 * server that does not answer within --io-timeout is an error. The
 * deadline bounds every loop; the program always ends.
 *
 * Prints one line per behaviour (connections, bytes verified, errors) and
 * exits 1 if any error was seen, 2 on bad options.
 */
#include "common/opt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define MAX_MSG (64 * 1024)

enum kind { K_LONG, K_CHURN, K_RESET, K_HALFCLOSE, K_STALL, K_VANISH, K_MAX };
static const char *const kind_name[K_MAX] = { "long", "churn", "reset", "halfclose", "stall",
					       "vanish" };

static struct {
	int port;
	unsigned threads;
	double secs, io_timeout;
	double end;
	atomic_ullong conns[K_MAX], bytes[K_MAX], errors[K_MAX];
	atomic_int first_err_printed;
} g;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* xorshift: the byte stream of one connection, reproducible from its seed */
struct stream {
	uint64_t s;
};
static uint8_t next_byte(struct stream *st)
{
	st->s ^= st->s << 13;
	st->s ^= st->s >> 7;
	st->s ^= st->s << 17;
	return (uint8_t)(st->s >> 24);
}
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fail(enum kind k, const char *what, int err)
{
	atomic_fetch_add(&g.errors[k], 1);
	if (atomic_fetch_add(&g.first_err_printed, 1) < 5)
		fprintf(stderr, "soak-load: %s: %s%s%s\n", kind_name[k], what, err ? ": " : "",
			err ? strerror(err) : "");
}

static int dial(enum kind k)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g.port) };
	struct timeval tv = { .tv_sec = (time_t)g.io_timeout,
			      .tv_usec = (suseconds_t)((g.io_timeout - (double)(time_t)g.io_timeout) * 1e6) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		fail(k, "socket", errno);
		return -1;
	}
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fail(k, "connect", errno);
		close(fd);
		return -1;
	}
	atomic_fetch_add(&g.conns[k], 1);
	return fd;
}

static void hard_close(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static int send_all(enum kind k, int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			fail(k, errno == EAGAIN ? "send timed out (server not reading)" : "send",
			     errno == EAGAIN ? 0 : errno);
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Read n bytes and check them against the stream. */
static int recv_check(enum kind k, int fd, struct stream *st, size_t n)
{
	uint8_t buf[16384];

	while (n) {
		ssize_t r = recv(fd, buf, n < sizeof(buf) ? n : sizeof(buf), 0);

		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			fail(k, r == 0 ? "end of stream before the whole echo"
				       : errno == EAGAIN ? "no echo within --io-timeout" : "recv",
			     r < 0 && errno != EAGAIN ? errno : 0);
			return -1;
		}
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != next_byte(st)) {
				fail(k, "echoed byte differs from the byte sent", 0);
				return -1;
			}
		atomic_fetch_add(&g.bytes[k], (unsigned long long)r);
		n -= (size_t)r;
	}
	return 0;
}

static void fill(struct stream *st, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = next_byte(st);
}

/* One ping-pong message of n bytes on fd. */
static int exchange(enum kind k, int fd, struct stream *tx, struct stream *rx, uint8_t *buf,
		    size_t n)
{
	fill(tx, buf, n);
	if (send_all(k, fd, buf, n))
		return -1;
	return recv_check(k, fd, rx, n);
}

static void *worker(void *arg)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull * ((uintptr_t)arg + 1);
	static _Thread_local uint8_t buf[MAX_MSG];
	struct stream ltx, lrx;
	int lfd = dial(K_LONG);
	unsigned turn = 0;

	ltx.s = lrx.s = seed | 1;
	while (now_s() < g.end) {
		enum kind k = (enum kind)(1 + turn++ % (K_MAX - 1));
		struct stream tx, rx;
		size_t n = 1 + rnd(&seed) % 4096;
		int fd;

		/* the long-lived connection takes a turn between every other */
		if (lfd >= 0 && exchange(K_LONG, lfd, &ltx, &lrx, buf, 1 + rnd(&seed) % MAX_MSG)) {
			close(lfd);
			lfd = -1;
		}
		tx.s = rx.s = rnd(&seed) | 1;
		fd = dial(k);
		if (fd < 0) {
			usleep(1000);
			continue;
		}
		switch (k) {
		case K_CHURN:
			exchange(k, fd, &tx, &rx, buf, n);
			close(fd);
			break;
		case K_RESET:
			fill(&tx, buf, 16384);
			if (send_all(k, fd, buf, 16384) == 0)
				atomic_fetch_add(&g.bytes[k], 16384);
			hard_close(fd);
			break;
		case K_HALFCLOSE: {
			char c;

			fill(&tx, buf, n);
			if (send_all(k, fd, buf, n) == 0 && shutdown(fd, SHUT_WR) == 0 &&
			    recv_check(k, fd, &rx, n) == 0) {
				ssize_t r = recv(fd, &c, 1, 0);

				if (r != 0)
					fail(k, r > 0 ? "bytes after the echo" : "no EOF after half-close",
					     r < 0 && errno != EAGAIN ? errno : 0);
			}
			close(fd);
			break;
		}
		case K_STALL: {
			/* Send without reading until the kernel stops taking bytes
			 * for 100 ms (the server stopped reading: back-pressure), or
			 * 1 MiB went out; then reset. */
			size_t sent = 0;

			fill(&tx, buf, sizeof(buf));
			while (sent < (1u << 20) && now_s() < g.end) {
				struct pollfd p = { .fd = fd, .events = POLLOUT };
				ssize_t r;

				if (poll(&p, 1, 100) <= 0)
					break;
				r = send(fd, buf, sizeof(buf), MSG_NOSIGNAL | MSG_DONTWAIT);
				if (r < 0 && errno != EAGAIN)
					break;
				if (r > 0)
					sent += (size_t)r;
			}
			atomic_fetch_add(&g.bytes[k], sent);
			hard_close(fd);
			break;
		}
		case K_VANISH:
			n = 1024 + rnd(&seed) % 1024;
			fill(&tx, buf, n);
			if (send_all(k, fd, buf, n) == 0)
				atomic_fetch_add(&g.bytes[k], n);
			close(fd);
			break;
		default:
			close(fd);
			break;
		}
	}
	if (lfd >= 0)
		close(lfd);
	return NULL;
}

static int parse_options(int argc, char **argv)
{
	const struct tool_opt opts[] = {
		{ TOOL_OPT_COUNT("port", 'p', g.port, 1, 65535, "P",
				 "echo server on 127.0.0.1:P (required)"), .required = 1 },
		{ TOOL_OPT_COUNT("threads", 't', g.threads, 1, MAX_THREADS, "N",
				 "client threads, each with one long-lived connection (4)") },
		{ TOOL_OPT_SECONDS("duration", 'd', g.secs, 0.1, 86400, "SECS",
				   "how long to churn (10)") },
		{ TOOL_OPT_SECONDS("io-timeout", 0, g.io_timeout, 0.01, 600, "S",
				   "an echo must arrive within S seconds (5)") },
		{ 0 },
	};
	const struct tool_cli cli = {
		"soak-load", "-p PORT [-t THREADS] [-d SECS] [--io-timeout SECS]", NULL, opts,
	};

	g.port = -1;
	g.threads = 4;
	g.secs = 10;
	g.io_timeout = 5;
	return tool_opt_parse(&cli, argc, argv);
}

int main(int argc, char **argv)
{
	pthread_t th[MAX_THREADS];
	unsigned long long errs = 0;
	int ret;

	ret = parse_options(argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	g.end = now_s() + g.secs;
	for (unsigned i = 0; i < g.threads; i++)
		if (pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i)) {
			fprintf(stderr, "soak-load: pthread_create failed\n");
			return 1;
		}
	for (unsigned i = 0; i < g.threads; i++)
		pthread_join(th[i], NULL);
	for (int k = 0; k < K_MAX; k++) {
		printf("soak-load: %-9s %8llu connections %12llu bytes %s %llu errors\n", kind_name[k],
		       (unsigned long long)g.conns[k], (unsigned long long)g.bytes[k],
		       k == K_STALL || k == K_RESET || k == K_VANISH ? "sent    " : "verified",
		       (unsigned long long)g.errors[k]);
		errs += g.errors[k];
	}
	return errs ? 1 : 0;
}
