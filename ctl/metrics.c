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

#define MAX_REQUESTS 16 /* served at once; more are closed at accept */

struct metrics_srv {
	unsigned refs;    /* the server fiber and each request fiber */
	unsigned active;
};

/* One request's fiber argument. */
struct http_client {
	struct metrics_srv *m;
	struct corio_sock *c;
};

static void srv_put(struct metrics_srv *m)
{
	if (--m->refs == 0)
		free(m);
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

static int http_fiber(void *arg)
{
	struct http_client *cl = arg;
	struct metrics_srv *m = cl->m;
	struct corio_sock *c = cl->c;
	struct corio_deadline d;
	char req[4096];
	size_t have = 0;
	const char *status = NULL;

	free(cl);
	corio_timeout_push(&d, 5000000000ull);
	for (;;) {
		ssize_t n = corio_recv(c, req + have, sizeof(req) - 1 - have);

		if (n <= 0)
			goto out;
		have += (size_t)n;
		req[have] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
		if (have == sizeof(req) - 1) {
			status = "431 Request Header Fields Too Large";
			break;
		}
	}
	if (!status) {
		if (strncmp(req, "GET ", 4) && strncmp(req, "HEAD ", 5))
			status = "405 Method Not Allowed";
		else if (!strncmp(req + (req[0] == 'G' ? 4 : 5), "/metrics ", 9) ||
			 !strncmp(req + (req[0] == 'G' ? 4 : 5), "/metrics?", 9))
			status = "200 OK";
		else if (req[0] != 'G' && req[0] != 'H')
			status = "400 Bad Request";
		else
			status = "404 Not Found";
	}
	if (!strcmp(status, "200 OK")) {
		char *out;
		size_t len;

		if (corio_stats_render(NULL, CORIO_STATS_PROM, &out, &len) == 0) {
			http_reply(c, status, "text/plain; version=0.0.4; charset=utf-8", out,
				   req[0] == 'H' ? 0 : len);
			free(out);
		} else {
			http_reply(c, "500 Internal Server Error", "text/plain", "", 0);
		}
	} else {
		http_reply(c, status, "text/plain", status, strlen(status));
	}
out:
	corio_deadline_pop(&d);
	corio_close(c);
	m->active--;
	srv_put(m);
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
	ret = corio_tcp_listen(host_port, NULL, &l);
	if (ret < 0) {
		free(m);
		return ret;
	}
	for (;;) {
		struct corio_spawn_opts o = { .name = "corio-metrics" };
		struct corio_sock *c;
		struct http_client *cl;

		ret = corio_accept(l, &c);
		if (ret < 0)
			break;
		if (m->active >= MAX_REQUESTS || !(cl = malloc(sizeof(*cl)))) {
			corio_close(c);
			continue;
		}
		cl->m = m;
		cl->c = c;
		m->refs++;
		m->active++;
		if (corio_spawn(http_fiber, cl, &o, NULL) < 0) {
			m->refs--;
			m->active--;
			free(cl);
			corio_close(c);
		}
	}
	corio_listener_close(l);
	srv_put(m);
	return ret;
}
