/* SPDX-License-Identifier: MIT */
/*
 * tools/examples/upper-echo/upper.c - the line protocol (no I/O) and a
 * server on one shard; see upper.h, and main.c for the protocol itself.
 */
#include "upper.h"

#include <corio/select.h> /* also reached through corio.h */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UE_RECV_SIZE (16 * 1024)

/* ---- the protocol (no I/O) ---------------------------------------------------- */

static int ue_reserve(struct ue_buf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 256;
	char *p;

	if (b->len + more <= b->cap)
		return 0;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int ue_put(struct ue_buf *b, const void *p, size_t n)
{
	if (ue_reserve(b, n))
		return -ENOMEM;
	memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

void ue_line_init(struct ue_line *l, size_t max)
{
	memset(l, 0, sizeof(*l));
	l->max = max;
}

void ue_line_free(struct ue_line *l)
{
	free(l->part.p);
	l->part.p = NULL;
}

/* Answer one line: p[0..n) without its LF (a CR at the end is the CRLF's). */
static int ue_answer(struct ue_buf *out, const char *p, size_t n, bool had_lf)
{
	bool crlf = had_lf && n && p[n - 1] == '\r';
	char *dst;

	if (crlf)
		n--;
	if (ue_reserve(out, n + 5))
		return -ENOMEM;
	dst = out->p + out->len;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		dst[i] = (char)(c >= 'a' && c <= 'z' ? c - ('a' - 'A') : c);
	}
	out->len += n;
	return ue_put(out, crlf ? "!!!\r\n" : "!!!\n", crlf ? 5 : 4);
}

static int ue_too_long(struct ue_line *l, struct ue_buf *out)
{
	char msg[80];
	int n = snprintf(msg, sizeof(msg), "ERROR line too long (max %zu bytes)\n", l->max);

	l->part.len = 0;
	l->skipping = true;
	return ue_put(out, msg, (size_t)n);
}

/*
 * Feed received bytes; answers for every completed line are appended to
 * out. 0, or -ENOMEM. A line is too long when it holds more than max bytes
 * besides its ending (LF or CRLF). A partial line is judged as soon as it
 * could no longer fit even if its LF came next, so memory stays bounded.
 */
int ue_feed(struct ue_line *l, const char *p, size_t n, struct ue_buf *out)
{
	while (n) {
		const char *lf = memchr(p, '\n', n);
		size_t seg = lf ? (size_t)(lf - p) : n; /* bytes before the LF */
		size_t have = l->part.len + seg;        /* the line so far */
		char last = seg ? p[seg - 1] : l->part.len ? l->part.p[l->part.len - 1] : 0;
		int ret = 0;

		if (l->skipping) {
			l->skipping = !lf; /* the over-long line ends at this LF */
		} else if (lf) {
			if (have - (last == '\r') > l->max) {
				ret = ue_too_long(l, out);
				l->skipping = false; /* its LF is right here */
			} else if (!l->part.len) {
				ret = ue_answer(out, p, seg, true); /* all in this receive: no copy */
			} else if ((ret = ue_put(&l->part, p, seg)) == 0) {
				ret = ue_answer(out, l->part.p, l->part.len, true);
				l->part.len = 0;
			}
		} else if (have > l->max + 1 || (have == l->max + 1 && last != '\r')) {
			ret = ue_too_long(l, out); /* then skip up to its LF */
		} else {
			ret = ue_put(&l->part, p, seg);
		}
		if (ret)
			return ret;
		seg += lf ? 1 : 0;
		p += seg;
		n -= seg;
	}
	return 0;
}

/* End of stream: answer a last line that had no LF. */
int ue_finish(struct ue_line *l, struct ue_buf *out)
{
	int ret = 0;

	/* Without an LF a trailing CR is part of the line, so a partial line
	 * kept at max + 1 bytes (it ended in CR, which could have been a CRLF)
	 * is too long after all. */
	if (l->part.len && !l->skipping)
		ret = l->part.len > l->max ? ue_too_long(l, out)
					   : ue_answer(out, l->part.p, l->part.len, false);
	l->part.len = 0;
	l->skipping = false;
	return ret;
}

/* ---- a server on one shard ------------------------------------------------------ */

struct ue_conn {
	struct ue_server *srv;
	struct corio_sock *s;
};

static int ue_conn_main(void *arg)
{
	struct ue_conn *c = arg;
	struct ue_server *srv = c->srv;
	struct corio_sock *s = c->s;
	char in[UE_RECV_SIZE];
	struct ue_buf out = { 0 };
	struct ue_line line;

	free(c);
	ue_line_init(&line, srv->max_line ? srv->max_line : UE_MAX_LINE_DEFAULT);
	for (;;) {
		struct corio_sel w[2];
		size_t nw = 1;
		ssize_t n;
		int i;

		corio_sel_recv(&w[0], s, in, sizeof(in));
		if (srv->idle_ns) {
			corio_sel_deadline(&w[1], corio_now_ns() + srv->idle_ns);
			nw = 2;
		}
		i = corio_select(w, nw);
		if (i < 0)
			break; /* -ECANCELED: the server is stopping */
		if (i == 1) {
			static const char idle[] = "ERROR idle timeout\n";

			corio_send(s, idle, sizeof(idle) - 1);
			break;
		}
		n = w[0].res;
		if (n < 0)
			break; /* reset by the peer, ... */
		if (n == 0) {
			if (ue_finish(&line, &out) == 0 && out.len)
				corio_send(s, out.p, out.len);
			break;
		}
		if (ue_feed(&line, in, (size_t)n, &out) < 0)
			break; /* no memory: drop this connection, keep the server */
		if (out.len && corio_send(s, out.p, out.len) < 0)
			break;
		out.len = 0;
	}
	free(out.p);
	ue_line_free(&line);
	corio_close(s);
	return 0; /* a connection's trouble is not the server's error */
}

/* Listen on host_port (port 0: any; REUSEPORT so that every shard can
 * listen on the same port). 0 or -errno. */
int ue_listen(struct ue_server *srv, const char *host_port)
{
	struct corio_listen_opts lo = { .flags = CORIO_LISTEN_REUSEPORT };

	return corio_tcp_listen(host_port, &lo, &srv->l);
}

/*
 * Accept connections on srv->l and serve each in a fiber of srv->conns,
 * until the calling fiber is cancelled (or the listener breaks). Then
 * cancel the connections, wait for them, close the listener. Returns the
 * accept error that ended it (-ECANCELED normally). Blocking.
 */
int ue_serve(struct ue_server *srv)
{
	int ret = corio_group_init(&srv->conns, 0);

	while (ret == 0) {
		struct corio_sock *s;
		struct ue_conn *c;

		ret = corio_accept(srv->l, &s);
		if (ret < 0)
			break;
		c = malloc(sizeof(*c));
		if (!c) {
			corio_close(s);
			continue;
		}
		c->srv = srv;
		c->s = s;
		if (corio_group_spawn(&srv->conns, ue_conn_main, c, NULL, NULL) < 0) {
			free(c);
			corio_close(s);
		}
	}
	corio_group_close(&srv->conns); /* no connection fiber outlives us */
	corio_listener_close(srv->l);
	srv->l = NULL;
	return ret;
}
