/* SPDX-License-Identifier: MIT */
/*
 * tools/examples/upper-echo/upper.c - the line protocol (no I/O) and a
 * server on one shard; see upper.h, and main.c for the protocol itself.
 */
#include "upper.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
/*
 * The server reads through a buffered stream (corio/stream.h), not through
 * ue_feed(): corio_stream_read_until() finds each line, in place in the
 * received buffer when it lies in one, gathered once when it spans two, and
 * holds at most max_line + 2 bytes (the line and its CRLF) for it. The
 * answers are buffered and go out when the stream would wait for input
 * (CORIO_STREAM_AUTOFLUSH), so pipelined lines are answered in one send.
 * ue_feed() stays as the protocol's reference without I/O, which the tests
 * and the fuzzer drive at every cut; the server's answers are checked
 * against the same expectations over TCP (test/test_upper_echo.c).
 */

static int ue_send_too_long(struct corio_stream *st, size_t max)
{
	char msg[80];
	int n = snprintf(msg, sizeof(msg), "ERROR line too long (max %zu bytes)\n", max);

	return corio_stream_write(st, msg, (size_t)n) < 0 ? -1 : 0;
}

/* Answer one line as the stream returned it: p[0..n), its LF last if it had
 * one (a line without LF comes only at end of stream, and is answered with
 * LF). 0, or -1 when the connection broke. */
static int ue_send_answer(struct corio_stream *st, const char *p, size_t n, size_t max)
{
	bool lf = n && p[n - 1] == '\n';
	size_t len = n - lf;
	bool crlf = lf && len && p[len - 1] == '\r';
	char up[4096];

	len -= crlf;
	if (len > max)
		return ue_send_too_long(st, max);
	for (size_t off = 0; off < len; off += sizeof(up)) {
		size_t k = len - off < sizeof(up) ? len - off : sizeof(up);

		for (size_t i = 0; i < k; i++) {
			unsigned char c = (unsigned char)p[off + i];

			up[i] = (char)(c >= 'a' && c <= 'z' ? c - ('a' - 'A') : c);
		}
		if (corio_stream_write(st, up, k) < 0)
			return -1;
	}
	return corio_stream_write(st, crlf ? "!!!\r\n" : "!!!\n", crlf ? 5 : 4) < 0 ? -1 : 0;
}

/* The next line, within the idle timeout when there is one: a wait that
 * times out keeps what it had received, so a line still arriving (bytes
 * came during the wait) is waited for again; only a wait in which nothing
 * came is idle. */
static ssize_t ue_next_line(struct corio_stream *st, const struct ue_server *srv, size_t max,
			    const void **line)
{
	for (;;) {
		size_t had = corio_stream_buffered(st);
		struct corio_deadline d;
		ssize_t n;

		if (!srv->idle_ns)
			return corio_stream_read_until(st, '\n', max + 2, line);
		corio_timeout_push(&d, srv->idle_ns);
		n = corio_stream_read_until(st, '\n', max + 2, line);
		corio_deadline_pop(&d);
		if (n != -ETIMEDOUT || corio_stream_buffered(st) == had)
			return n;
	}
}

/* One connection, in its own fiber (corio_serve made the stream and
 * closes it after: flush, half-close, let the client read the last
 * answers, close). */
static int ue_conn_main(struct corio_conn *c)
{
	struct ue_server *srv = c->arg;
	size_t max = srv->max_line ? srv->max_line : UE_MAX_LINE_DEFAULT;
	struct corio_stream *st = c->stream;
	const void *line;
	ssize_t n;

	srv->live++;
	while ((n = ue_next_line(st, srv, max, &line)) != 0) {
		if (n == -EMSGSIZE) { /* the line is too long: say so, skip the rest */
			if (ue_send_too_long(st, max) < 0 || corio_stream_skip_until(st, '\n') <= 0)
				break;
		} else if (n == -ETIMEDOUT) {
			static const char idle[] = "ERROR idle timeout\n";

			corio_stream_write(st, idle, sizeof(idle) - 1);
			break;
		} else if (n < 0 || ue_send_answer(st, line, (size_t)n, max) < 0) {
			break; /* -ECANCELED (the server stops), reset by the peer, ... */
		}
	}
	srv->live--;
	return 0; /* a connection's trouble is not the server's error */
}

/* corio_serve's: remember where we listen (the caller prints it). */
static void ue_ready(const struct sockaddr *a, socklen_t len, void *arg)
{
	struct ue_server *srv = arg;

	if (corio_addr_format(a, len, srv->bound, sizeof(srv->bound)) < 0)
		srv->bound[0] = '?';
	if (srv->ready)
		srv->ready(srv);
}

/*
 * Serve srv->addr on this shard with corio_serve (every shard that calls
 * it shares the port; port 0 picks one for all): a fiber and a buffered
 * stream per connection, until the drain is over (then 0: lines being
 * answered are answered, idle connections are cancelled after drain_ns)
 * or the calling fiber is cancelled (-ECANCELED: every connection is
 * cancelled and closed first). -errno when it cannot listen. Blocking.
 */
int ue_serve(struct ue_server *srv)
{
	size_t max = srv->max_line ? srv->max_line : UE_MAX_LINE_DEFAULT;
	struct corio_stream_opts so = { .max_frame = max + 2, .flags = CORIO_STREAM_AUTOFLUSH };
	struct corio_serve_opts o = { .flags = CORIO_SERVE_STREAM, .stream = &so,
				      .drain_ns = srv->drain_ns, .ready = ue_ready };

	return corio_serve(srv->addr, ue_conn_main, srv, &o);
}
