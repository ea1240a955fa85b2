/* SPDX-License-Identifier: MIT */
/*
 * tls/stream.c - the TLS stream transport: a buffered stream
 * (corio/stream.h) over a TLS session, so protocol code written on
 * corio_stream_* runs over TLS unchanged.
 *
 * It lives here, not in net/, because tls sits above net: the stream layer
 * knows transports only through their ops table, and this file fills one
 * with the session's calls. The transport copies (read, not read_buf): the
 * bytes are decrypted into the stream's own buffer, there is no kernel
 * buffer to lend. It has no sendfile op: the file's bytes must pass
 * through OpenSSL, so corio_stream_sendfile reads them into the write
 * buffer and writes them (kTLS would change that: docs/TLS.md).
 *
 * Closing tells the peer which end it was. The graceful stream close calls
 * shutdown_write (close_notify, after every queued record) before close;
 * corio_stream_abort calls close alone. So close frees the session with
 * close_notify only when shutdown_write was asked for: an abort drops
 * buffered writes, and a close_notify after it would tell the peer that
 * what it got was complete. The peer of an aborted stream reads a TCP end
 * without close_notify, -ECONNABORTED, which is the truth.
 */
#include "tls/internal.h"

#include <corio/stream.h>

#include <errno.h>

static ssize_t tls_read(void *t, void *buf, size_t len)
{
	return corio_tls_read(t, buf, len);
}

static ssize_t tls_read_or(void *t, void *buf, size_t len, struct corio_event *ev)
{
	return corio__tls_read_or(t, buf, len, ev);
}

/* No flags apply: the stream asks "more follows" only before a sendfile
 * op, which this transport has not (the file's bytes join the buffer). */
static ssize_t tls_writev(void *t, const struct iovec *iov, int iovcnt, unsigned flags)
{
	(void)flags;
	return corio_tls_writev(t, iov, iovcnt);
}

static int tls_shutdown(void *t)
{
	struct corio_tls *s = t;

	s->stream_shut = true;
	return corio_tls_shutdown(s);
}

/* The session, then its socket: the stream owns both. */
static int tls_close(void *t)
{
	struct corio_tls *s = t;
	struct corio_sock *sock = s->sock;
	int ret = 0, r;

	if (s->stream_shut)
		ret = corio_tls_close(s); /* a close_notify a deadline cut short */
	else
		corio__tls_free(s); /* an abort: no close_notify (above) */
	r = corio_close(sock);
	return ret ? ret : r;
}

static const struct corio_stream_transport tls_ops = {
	.read = tls_read,
	.read_or = tls_read_or,
	.writev = tls_writev,
	.shutdown_write = tls_shutdown,
	.close = tls_close,
};

int corio_stream_tls(struct corio_tls *t, const struct corio_stream_opts *opts,
		     struct corio_stream **out)
{
	int ret;

	if (!t)
		return corio__error(-EINVAL, "corio_stream_tls: the session is NULL");
	if (!t->part || t->part != corio__tls_part_here())
		return corio__misuse(-EPERM, "corio_stream_tls",
				     "the session belongs to another shard");
	if (t->in_stream)
		return corio__error(-EBUSY, "corio_stream_tls: a stream owns the session already");
	ret = corio_stream_new(&tls_ops, t, opts, out);
	if (ret == 0)
		t->in_stream = true;
	return ret;
}

/* A handshake's session t into a stream: 0, or -errno with t freed (a
 * stream that could not be made after a good handshake says close_notify). */
static int open_stream(struct corio_tls *t, const struct corio_stream_opts *opts,
		       struct corio_stream **out)
{
	int ret = corio_stream_tls(t, opts, out);

	if (ret < 0)
		corio_tls_close(t);
	return ret;
}

int corio_stream_tls_accept(struct corio_tls_ctx *ctx, struct corio_sock *s,
			    const struct corio_stream_opts *opts, struct corio_stream **out)
{
	struct corio_tls *t = NULL;
	int ret = corio_tls_accept(ctx, s, &t);

	return ret < 0 ? ret : open_stream(t, opts, out);
}

int corio_stream_tls_connect(struct corio_tls_ctx *ctx, struct corio_sock *s, const char *host,
			     const struct corio_stream_opts *opts, struct corio_stream **out)
{
	struct corio_tls *t = NULL;
	int ret = corio_tls_connect(ctx, s, host, &t);

	return ret < 0 ? ret : open_stream(t, opts, out);
}
