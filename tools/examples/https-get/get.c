/* SPDX-License-Identifier: MIT */
/* tools/examples/https-get/get.c - the fetch; get.h says what it does. */
#include "get.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HEAD_LINE_MAX 8192

int get_url_parse(const char *url, struct get_url *u, const char **why)
{
	const char *h = url + 8, *hend, *port = NULL, *rest;
	size_t hl, pl = 0;
	bool v6 = *h == '[';

	if (strncasecmp(url, "https://", 8) != 0)
		return *why = "not an https:// URL", -EINVAL;
	if (url[strcspn(url, " \t\r\n")])
		return *why = "a space or a line break in it", -EINVAL;
	hend = v6 ? strchr(h, ']') : h + strcspn(h, ":/?#");
	if (!hend || hend == h + v6)
		return *why = "no host", -EINVAL;
	hend += v6; /* past the ']' */
	hl = (size_t)(hend - h);
	if (*hend == ':') {
		port = hend + 1;
		pl = strspn(port, "0123456789");
	}
	rest = port ? port + pl : hend;
	if (port && (!pl || pl > 5 || atoi(port) > 65535 || !strchr("/?#", *rest))) /* '\0' too */
		return *why = "a bad port", -EINVAL;
	if (hl >= sizeof(u->name) || strlen(rest) + 2 > sizeof(u->path))
		return *why = "too long", -EINVAL;
	snprintf(u->name, sizeof(u->name), "%.*s", (int)(hl - 2 * v6), h + v6);
	snprintf(u->addr, sizeof(u->addr), "%.*s:%.*s", (int)hl, h, port ? (int)pl : 3,
		 port ? port : "443");
	snprintf(u->host, sizeof(u->host), "%.*s", (int)(rest - h), h); /* with any :port */
	snprintf(u->path, sizeof(u->path), "%s%s", *rest == '/' ? "" : "/", rest);
	u->path[strcspn(u->path, "#")] = '\0'; /* a fragment is the client's */
	return 0;
}

/* Record why the fetch failed: err, returned. */
static int fail(struct get_req *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
	return err;
}

/* The reason for err: TLS failures explain themselves in corio_last_error()
 * (corio/tls.h); socket errors and timeouts do not set it. */
static const char *reason(int err)
{
	if (err == -EKEYREJECTED || err == -EPROTO || err == -ECONNABORTED)
		return corio_last_error();
	return strerror(-err);
}

static bool blank(const void *line, ssize_t n)
{
	return n == 1 || (n == 2 && *(const char *)line == '\r');
}

/* The status line and the headers: the status, *len (Content-Length, -1
 * when absent) and *chunked; or -errno. */
static int read_head(struct corio_stream *st, struct get_req *r, long long *len, bool *chunked)
{
	const void *p;
	const char *v;
	ssize_t n = corio_stream_read_until(st, '\n', HEAD_LINE_MAX, &p);
	int status = 0;

	*len = -1;
	*chunked = false;
	v = p;
	if (n <= 0)
		return fail(r, n ? (int)n : -EPROTO, "reading the response: %s",
			    n ? reason((int)n) : "the server closed without one");
	if (n < 13 || memcmp(v, "HTTP/1.", 7) != 0 || sscanf(v + 8, " %3d", &status) != 1 ||
	    status < 100 || status > 599)
		return fail(r, -EPROTO, "not an HTTP/1.x response: '%.*s'", (int)(n > 60 ? 60 : n), v);
	while ((n = corio_stream_read_until(st, '\n', HEAD_LINE_MAX, &p)) > 0 && !blank(p, n)) {
		v = p; /* "Name: value\r\n": the line end stops each scan */
		if (strncasecmp(v, "content-length:", 15) == 0)
			*len = strtoll(v + 15, NULL, 10);
		else if (strncasecmp(v, "transfer-encoding:", 18) == 0)
			*chunked = memmem(v, (size_t)n, "chunked", 7) != NULL;
	}
	if (n <= 0)
		return fail(r, n ? (int)n : -EPROTO, "the response head: %s",
			    n ? reason((int)n) : "the connection ended inside it");
	return status;
}

/* Copy len bytes of the body (-1: up to the end of the stream) to r->out. */
static int copy_body(struct corio_stream *st, struct get_req *r, long long len)
{
	char buf[16384];
	ssize_t n = 1;

	while (len != 0 && (n = corio_stream_read(st, buf, len < 0 || len > (long long)sizeof(buf)
							    ? sizeof(buf) : (size_t)len)) > 0) {
		if (fwrite(buf, 1, (size_t)n, r->out) != (size_t)n) /* the shard waits: one fetch */
			return fail(r, -EIO, "writing the body: %s", strerror(errno));
		len -= len > 0 ? n : 0;
	}
	if (n < 0)
		return fail(r, (int)n, "reading the body: %s", reason((int)n));
	return len > 0 ? fail(r, -EPROTO, "the body ended %lld bytes early", len) : 0;
}

/* Transfer-Encoding: chunked: "SIZE(hex)[;ext]\r\n" DATA "\r\n" ..., a 0
 * chunk, trailers, a blank line. */
static int copy_chunked(struct corio_stream *st, struct get_req *r)
{
	unsigned long long size = 1;
	const void *v;
	ssize_t n;
	int ret = 0;

	while (ret == 0 && size) {
		n = corio_stream_read_until(st, '\n', HEAD_LINE_MAX, &v);
		if (n <= 0 || sscanf(v, "%llx", &size) != 1 || size > (1ull << 62))
			return fail(r, n < 0 ? (int)n : -EPROTO, "a bad chunk size line");
		ret = copy_body(st, r, (long long)size);
		if (ret == 0 && size && corio_stream_read_until(st, '\n', 3, &v) <= 0)
			return fail(r, -EPROTO, "no line end after a chunk");
	}
	while (ret == 0 && (n = corio_stream_read_until(st, '\n', HEAD_LINE_MAX, &v)) > 2)
		; /* trailers */
	return ret ? ret : n < 0 ? fail(r, (int)n, "the trailers: %s", reason((int)n)) : 0;
}

/* The request, the head, the body. */
static int exchange(struct corio_stream *st, struct get_req *r)
{
	char req[4096];
	long long len;
	bool chunked;
	int n = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: corio-https-get\r\n"
			 "Accept: */*\r\nConnection: close\r\n\r\n", r->url.path, r->url.host);
	int ret;

	if (n < 0 || (size_t)n >= sizeof(req))
		return fail(r, -EINVAL, "the request is too long");
	if ((ret = (int)corio_stream_write(st, req, (size_t)n)) < 0 ||
	    (ret = corio_stream_flush(st)) < 0)
		return fail(r, ret, "sending the request: %s", reason(ret));
	do /* an informational answer (103 Early Hints) comes before the real one */
		r->status = read_head(st, r, &len, &chunked);
	while (r->status >= 100 && r->status < 200);
	if (r->status < 0)
		return r->status;
	return chunked ? copy_chunked(st, r) : copy_body(st, r, len);
}

int get_fetch(struct get_req *r)
{
	struct corio_stream_opts so = { .max_frame = HEAD_LINE_MAX };
	struct corio_stream *st;
	struct corio_sock *s;
	struct corio_deadline d;
	int ret;

	corio_timeout_push(&d, r->timeout_ns);
	if ((ret = corio_tcp_connect(r->url.addr, &s)) < 0) {
		ret = fail(r, ret, "connecting to %s: %s", r->url.addr, /* -ENOENT: corio/net.h */
			   ret == -ENOENT ? "the name has no address" : strerror(-ret));
	} else if ((ret = corio_stream_tls_connect(r->ctx, s, r->url.name, &so, &st)) < 0) {
		fail(r, ret, "TLS with %s: %s", r->url.addr, reason(ret));
		corio_close(s);
	} else {
		ret = exchange(st, r);
		/* The body is whole (its length, its last chunk or close_notify):
		 * a server that then drops TCP without close_notify is no error. */
		if (ret < 0)
			corio_stream_abort(st);
		else
			corio_stream_close(st);
	}
	corio_deadline_pop(&d);
	return ret;
}
