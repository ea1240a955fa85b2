/* SPDX-License-Identifier: MIT */
/*
 * ctl/metrics.c - HTTP GET /metrics (Prometheus text) on a TCP address
 * (corio_metrics_serve), served with the public socket API in daemon fibers
 * like the control socket (ctl/control.c): each request is bounded by a
 * deadline, requests are capped in size, and at most a few are served at a
 * time.
 */
#include "ctl/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQUESTS 16 /* slots: requests served at once */
#define LIMIT_NS 5000000000ull /* a whole request must arrive within it; so must the answer */

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

static int http_reply(struct corio_sock *c, const char *status, const char *ctype,
		      const char *body, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n",
			 status, ctype, len);
	ssize_t r = corio_send(c, head, (size_t)n);

	if (r >= 0 && len)
		r = corio_send(c, body, len);
	return r < 0 ? (int)r : 0;
}

/* Read one request within the limit: its status line, or NULL when the
 * connection ended, failed, ran out of time or was evicted first. */
static const char *read_request(struct corio_sock *c, char *req, size_t cap)
{
	struct corio_deadline d;
	const char *status = NULL;
	size_t have = 0;

	/* one deadline over the whole request, not one per receive: a client
	 * that trickles a byte at a time is held to the limit as surely as a
	 * silent one (the control socket does the same per line) */
	corio_timeout_push(&d, LIMIT_NS);
	for (;;) {
		ssize_t n = corio_recv(c, req + have, cap - 1 - have);

		if (n <= 0)
			break;
		have += (size_t)n;
		req[have] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n")) {
			status = "";
			break;
		}
		if (have == cap - 1) {
			status = "431 Request Header Fields Too Large";
			break;
		}
	}
	corio_deadline_pop(&d);
	if (!status || *status)
		return status;
	if (strncmp(req, "GET ", 4) && strncmp(req, "HEAD ", 5))
		return "405 Method Not Allowed";
	if (!strncmp(req + (req[0] == 'G' ? 4 : 5), "/metrics ", 9) ||
	    !strncmp(req + (req[0] == 'G' ? 4 : 5), "/metrics?", 9))
		return "200 OK";
	return "404 Not Found";
}

static void answer(struct corio_sock *c, const char *status, bool head)
{
	struct corio_deadline d;

	corio_timeout_push(&d, LIMIT_NS);
	if (!strcmp(status, "200 OK")) {
		char *out;
		size_t len;

		if (corio_stats_render(NULL, CORIO_STATS_PROM, &out, &len) == 0) {
			http_reply(c, status, "text/plain; version=0.0.4; charset=utf-8", out,
				   head ? 0 : len);
			free(out);
		} else {
			http_reply(c, "500 Internal Server Error", "text/plain", "", 0);
		}
	} else {
		http_reply(c, status, "text/plain", status, strlen(status));
	}
	corio_deadline_pop(&d);
}

static int http_fiber(void *arg)
{
	struct http_client *cl = arg;
	struct corio_sock *c = cl->c;
	char req[4096];
	const char *status = read_request(c, req, sizeof(req));

	/* complete or not, it no longer waits for its request: not evictable */
	corio__list_del(&cl->link);
	if (status && !cl->evicted)
		answer(c, status, req[0] == 'H');
	corio_close(c);
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
