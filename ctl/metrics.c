/* SPDX-License-Identifier: MIT */
/*
 * ctl/metrics.c - HTTP GET /metrics (Prometheus text) on a TCP address
 * (corio_metrics_serve), served in daemon fibers like the control socket
 * (ctl/control.c), each connection on a buffered stream (corio/stream.h):
 * the head is read a line at a time, the answer goes out in one write and
 * the close is graceful. Each request is bounded by a deadline, requests
 * are capped in size, and at most a few are served at a time.
 */
#include "ctl/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQUESTS 16 /* slots: requests served at once */
#define LIMIT_NS 5000000000ull /* a whole request must arrive within it; so must the answer */
#define REQ_MAX 4095 /* a request head's bytes; past them: 431 */
#define LINGER_NS 1000000000ull /* the graceful close waits this long for the client */

/*
 * When every slot is taken, a new connection takes the slot of the one that
 * has waited longest without sending a complete request (the head of
 * `reading`, which is in accept order): a connection that sends nothing
 * holds a slot only until newer ones need it, so a few silent or trickling
 * clients cannot keep scrapers out. A slot whose request is complete is
 * never taken (its answer is being sent, within its own limit); when all 16
 * are, the new connection is closed at once (ctl.metrics_refused).
 */
struct metrics_srv {
	unsigned refs;    /* the server fiber and each request's record */
	unsigned active;  /* slots held */
	struct corio__link reading; /* records still reading their request, oldest first */
	struct corio__ctl_stats *st; /* this shard's ctl counters */
};

/* One request: its fiber's argument, alive until the fiber ends. */
struct http_client {
	struct metrics_srv *m;
	struct corio_sock *c;
	struct corio_fiber *f; /* valid while linked in m->reading */
	struct corio__link link;
	bool evicted;          /* its slot was given away: it no longer counts */
};

static void srv_put(struct metrics_srv *m)
{
	if (--m->refs == 0)
		free(m);
}

/* The request ends: give its slot back (unless an eviction already did). */
static void client_end(struct http_client *cl)
{
	struct metrics_srv *m = cl->m;

	corio__list_del(&cl->link);
	if (!cl->evicted)
		m->active--;
	free(cl);
	srv_put(m);
}

/* Its fiber never ran (the runtime stopped, or it was evicted first): the
 * socket has no receive armed, so closing it here does not block. */
static void client_release(void *arg)
{
	struct http_client *cl = arg;

	corio_close(cl->c);
	client_end(cl);
}

/* Take the slot of the connection waiting longest for its request. */
static bool evict_oldest(struct metrics_srv *m)
{
	struct http_client *old;

	if (corio__list_empty(&m->reading))
		return false;
	old = corio__list_entry(m->reading.next, struct http_client, link);
	corio__list_del(&old->link);
	old->evicted = true;
	m->active--;
	CORIO__STAT_ADD(m->st->metrics_evicted, 1);
	corio_cancel(old->f); /* its receive ends with -ECANCELED; it closes */
	return true;
}

/* The head and the body in one write (the body not copied). */
static int http_reply(struct corio_stream *st, const char *status, const char *ctype,
		      const char *body, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n",
			 status, ctype, len);
	struct iovec iov[2] = { { head, (size_t)n }, { (void *)body, len } };
	ssize_t r = corio_stream_writev(st, iov, len ? 2 : 1);

	return r < 0 ? (int)r : 0;
}

/* The status of a complete request whose request line is line. */
static const char *route(const char *line)
{
	const char *path = line + (line[0] == 'G' ? 4 : 5);

	if (strncmp(line, "GET ", 4) && strncmp(line, "HEAD ", 5))
		return "405 Method Not Allowed";
	if (!strncmp(path, "/metrics ", 9) || !strncmp(path, "/metrics?", 9))
		return "200 OK";
	return "404 Not Found";
}

/*
 * Read one request head within the limit, a line at a time up to its empty
 * line, REQ_MAX bytes in all; its request line is copied to line. The
 * status, or NULL when the connection ended, failed, ran out of time or
 * was evicted first.
 */
static const char *read_request(struct corio_stream *st, char *line, size_t cap)
{
	struct corio_deadline d;
	const char *status = NULL;
	size_t have = 0;

	/* one deadline over the whole request, not one per receive: a client
	 * that trickles a byte at a time is held to the limit as surely as a
	 * silent one (the control socket does the same per line) */
	corio_timeout_push(&d, LIMIT_NS);
	line[0] = '\0';
	while (!status) {
		const void *v = NULL;
		ssize_t n = have < REQ_MAX ? corio_stream_read_until(st, '\n', REQ_MAX - have, &v)
					   : -EMSGSIZE;
		const char *p = v;

		if (n == -EMSGSIZE)
			status = "431 Request Header Fields Too Large";
		if (n <= 0 || p[n - 1] != '\n')
			break; /* ended before the head did, failed, timed out, evicted */
		if (!have)
			snprintf(line, cap, "%.*s", (int)n, p);
		have += (size_t)n;
		if (n == 1 || (n == 2 && p[0] == '\r')) /* the empty line: the head is whole */
			status = route(line);
	}
	corio_deadline_pop(&d);
	return status;
}

/* Answer, then close gracefully (the client reads the answer, not a reset,
 * even when it sent more than the head), all within the limit. */
static void answer(struct corio_stream *st, const char *status, bool head)
{
	struct corio_deadline d;

	corio_timeout_push(&d, LIMIT_NS);
	if (!strcmp(status, "200 OK")) {
		char *out;
		size_t len;

		if (corio_stats_render(NULL, CORIO_STATS_PROM, &out, &len) == 0) {
			http_reply(st, status, "text/plain; version=0.0.4; charset=utf-8", out,
				   head ? 0 : len);
			free(out);
		} else {
			http_reply(st, "500 Internal Server Error", "text/plain", "", 0);
		}
	} else {
		http_reply(st, status, "text/plain", status, strlen(status));
	}
	corio_stream_close(st);
	corio_deadline_pop(&d);
}

static int http_fiber(void *arg)
{
	struct http_client *cl = arg;
	struct corio_stream_opts so = { .max_frame = REQ_MAX, .linger_ns = LINGER_NS };
	struct corio_stream *st;
	char line[256];
	const char *status = NULL;

	if (corio_stream_sock(cl->c, &so, &st) == 0) {
		status = read_request(st, line, sizeof(line));
	} else {
		corio_close(cl->c);
		st = NULL;
	}
	/* complete or not, it no longer waits for its request: not evictable */
	corio__list_del(&cl->link);
	if (st && status && !cl->evicted)
		answer(st, status, line[0] == 'H');
	else if (st)
		corio_stream_abort(st);
	client_end(cl);
	return 0;
}

/* Serve one accepted connection in a slot of its own: 0, or -errno (the
 * connection is closed then). */
static int serve_one(struct metrics_srv *m, struct corio_sock *c)
{
	struct corio_spawn_opts o = { .name = "corio-metrics", .release = client_release };
	struct http_client *cl;
	int ret;

	if (m->active >= MAX_REQUESTS && !evict_oldest(m)) {
		CORIO__STAT_ADD(m->st->metrics_refused, 1);
		corio_close(c);
		return -EBUSY;
	}
	cl = calloc(1, sizeof(*cl));
	if (!cl) {
		corio_close(c);
		return -ENOMEM;
	}
	cl->m = m;
	cl->c = c;
	ret = corio_spawn(http_fiber, cl, &o, &cl->f);
	if (ret < 0) {
		free(cl);
		corio_close(c);
		return ret;
	}
	corio_detach(cl->f); /* cl->f stays valid while cl is in m->reading */
	corio__list_add(&m->reading, &cl->link);
	m->refs++;
	m->active++;
	return 0;
}

int corio_metrics_serve(const char *host_port)
{
	struct corio_listener *l;
	struct metrics_srv *m;
	int ret;

	CORIO__REQUIRE_FIBER("corio_metrics_serve", -EPERM);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->refs = 1;
	corio__list_init(&m->reading);
	m->st = corio__ctl_stats_own();
	ret = corio_tcp_listen(host_port, NULL, &l);
	if (ret < 0) {
		free(m);
		return ret;
	}
	for (;;) {
		struct corio_sock *c;

		ret = corio_accept(l, &c);
		if (ret < 0)
			break;
		serve_one(m, c);
	}
	corio_listener_close(l);
	srv_put(m);
	return ret;
}
