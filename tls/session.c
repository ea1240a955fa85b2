/* SPDX-License-Identifier: MIT */
/*
 * tls/session.c - TLS sessions: OpenSSL over a BIO pair, and the record
 * pump that moves its bytes to and from the socket.
 *
 * OpenSSL never sees the socket. Its SSL writes records into one half of
 * a BIO pair and reads them from it; the pump owns the other half and
 * moves bytes with the session's io calls (corio_recv / corio_send_ex on
 * the socket), zero-copy in both directions: BIO_nwrite0 lends the pair's
 * own input buffer to corio_recv, BIO_nread0 lends the pending output to
 * corio_send_ex. So every wait is a corio wait (deadline scope,
 * cancellation, both backends), and the SSL call in between never blocks.
 *
 * One pump step: call the SSL function; on WANT_READ send what it wrote
 * (a handshake flight) and receive more; on WANT_WRITE (output half full)
 * send; on success or failure send what is pending (an alert included),
 * then return. Writes advance the output by what the socket took
 * (corio_send_ex's *sent), so a write cut by a deadline leaves the rest of
 * its records queued in order: the record stream is never torn, and the
 * next write or close_notify goes out after them.
 *
 * A reader and a writer fiber may use one session at once (OpenSSL calls
 * never overlap: fibers switch only inside the io calls). Only one of them
 * sends at a time (t->flushing): the other leaves its output in the pair,
 * and the sender's loop, which drains until the pair is empty, takes it.
 */
#include "tls/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#define TSTAT(t, field, n)                                        \
	do {                                                      \
		if ((t)->part)                                    \
			CORIO__STAT_ADD((t)->part->stats.field, n); \
	} while (0)

enum pump_op { OP_HANDSHAKE, OP_READ, OP_WRITE, OP_SHUTDOWN };

/* Send every byte waiting in the pair (0 or -errno). */
static int flush_out(struct corio_tls *t)
{
	char *p;
	int n;

	if (t->flushing)
		return 0; /* another fiber is in this loop and will send ours too */
	t->flushing = true;
	while ((n = BIO_nread0(t->net, &p)) > 0) {
		size_t sent = 0;
		int r = t->io.send(t->io.arg, p, (size_t)n, &sent);

		if (sent)
			BIO_nread(t->net, &p, (int)sent);
		if (r < 0) {
			t->flushing = false;
			return r;
		}
	}
	t->flushing = false;
	return 0;
}

/* Receive more into the pair: 0, or -errno. End of stream is handed on to
 * OpenSSL (the pair's write side shut), which decides what it means. */
static int fill_in(struct corio_tls *t)
{
	char *p;
	int room = BIO_nwrite0(t->net, &p);
	ssize_t n;

	if (t->net_eof)
		return corio__error(-ECONNABORTED, "tls: the connection ended without close_notify");
	if (room <= 0) /* OpenSSL reads all it is given; a full pair is a bug */
		return corio__error(-EIO, "tls: input buffer full while OpenSSL wants more");
	n = t->io.recv(t->io.arg, p, (size_t)room);
	if (n < 0)
		return (int)n;
	if (n == 0) {
		t->net_eof = true;
		BIO_shutdown_wr(t->net);
		return 0;
	}
	BIO_nwrite(t->net, &p, (int)n);
	return 0;
}

/* A fatal SSL error: its -errno, message and counters; sticky. */
static int ssl_failed(struct corio_tls *t, int e, const char *who)
{
	char why[200];
	long v = SSL_get_verify_result(t->ssl);
	unsigned long code = ERR_peek_error();
	int err;

	/* Whether the handshake had finished is t->handshaken, not
	 * SSL_in_init(): OpenSSL's fatal-error path puts the state machine
	 * back "in init", so a body cut short read as "during the handshake". */
	if (!t->server && !(t->ctx->flags & CORIO_TLS_NO_VERIFY) && v != X509_V_OK &&
	    !t->handshaken) {
		ERR_clear_error();
		err = corio__error(-EKEYREJECTED, "%s: the server's certificate was refused: %s", who,
				   X509_verify_cert_error_string(v));
		TSTAT(t, verify_failed, 1);
	} else if ((code && ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) ||
		   (e == SSL_ERROR_SYSCALL && t->net_eof)) {
		ERR_clear_error();
		err = corio__error(-ECONNABORTED,
				   "%s: the peer closed the connection without close_notify%s", who,
				   t->handshaken ? " (truncated)" : " (during the handshake)");
		TSTAT(t, truncated, 1);
	} else {
		err = corio__error(-EPROTO, "%s: %s", who,
				   corio__tls_reason(why, sizeof(why), "TLS protocol error"));
		TSTAT(t, proto_errors, 1);
	}
	t->err = err;
	return err;
}

static int ssl_call(struct corio_tls *t, enum pump_op op, void *buf, size_t len)
{
	int n = len > INT32_MAX ? INT32_MAX : (int)len;

	switch (op) {
	case OP_HANDSHAKE:
		return SSL_do_handshake(t->ssl);
	case OP_READ:
		return SSL_read(t->ssl, buf, n);
	case OP_WRITE:
		return SSL_write(t->ssl, buf, n);
	case OP_SHUTDOWN:
		/* 0: our close_notify is written, the peer's not yet seen;
		 * that is all a one-way close waits for */
		return SSL_shutdown(t->ssl) >= 0 ? 1 : -1;
	}
	return -1;
}

/*
 * Run op until it succeeds: its result (> 0; 0 for a read at the peer's
 * close_notify), or -errno. Reads send their output (a key update's
 * answer) only when nobody else is sending, and a failed send does not
 * fail them: bytes already decrypted are handed out, and the socket's
 * error comes back from the next write (or from the receive). Writes leave
 * their records in the pair until it is full (the caller flushes at the
 * end).
 */
static ssize_t pump(struct corio_tls *t, enum pump_op op, void *buf, size_t len, const char *who)
{
	for (;;) {
		int r, e, ret;

		ERR_clear_error();
		r = ssl_call(t, op, buf, len);
		e = r > 0 ? SSL_ERROR_NONE : SSL_get_error(t->ssl, r);
		switch (e) {
		case SSL_ERROR_NONE:
			if (op == OP_READ)
				(void)flush_out(t);
			else if (op != OP_WRITE && (ret = flush_out(t)) < 0)
				return ret;
			return r;
		case SSL_ERROR_ZERO_RETURN:
			t->eof = true;
			return 0;
		case SSL_ERROR_WANT_WRITE:
			if ((ret = flush_out(t)) < 0)
				return ret;
			continue;
		case SSL_ERROR_WANT_READ:
			if ((ret = flush_out(t)) < 0 && op != OP_READ)
				return ret;
			if ((ret = fill_in(t)) < 0)
				return ret;
			continue;
		default:
			ret = ssl_failed(t, e, who);
			(void)flush_out(t); /* the alert, if any: best effort */
			return ret;
		}
	}
}

/* ---- sessions ------------------------------------------------------------- */

static bool is_ip_literal(const char *host)
{
	unsigned char a[16];

	return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

static int client_names(struct corio_tls *t, const char *host)
{
	if (!host)
		return 0;
	if (is_ip_literal(host)) {
		/* no SNI for addresses (RFC 6066); verify the IP SAN */
		if (!X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), host))
			return corio__error(-EINVAL, "corio_tls_connect: bad address \"%s\"", host);
		return 0;
	}
	if (!SSL_set_tlsext_host_name(t->ssl, host) || !SSL_set1_host(t->ssl, host))
		return corio__error(-EINVAL, "corio_tls_connect: bad host name \"%s\"", host);
	return 0;
}

int corio__tls_new(struct corio_tls_ctx *ctx, bool server, const char *host,
		   const struct corio__tls_io *io, struct corio_tls **out)
{
	struct corio_tls *t = calloc(1, sizeof(*t));
	BIO *inner = NULL;
	int ret;

	if (!t)
		return corio__error(-ENOMEM, "tls: out of memory");
	t->ctx = ctx;
	t->io = *io;
	t->server = server;
	t->part = corio__tls_part_here();
	if (!(t->ssl = SSL_new(ctx->ctxs[0])) ||
	    !BIO_new_bio_pair(&inner, ctx->out_buf, &t->net, CORIO__TLS_IN_BUF)) {
		SSL_free(t->ssl);
		free(t);
		return corio__error(-ENOMEM, "tls: out of memory for a session");
	}
	SSL_set_bio(t->ssl, inner, inner);
	SSL_set_ex_data(t->ssl, corio__tls_ex_index(), t);
	if (server) {
		SSL_set_accept_state(t->ssl);
	} else {
		SSL_set_connect_state(t->ssl);
		if ((ret = client_names(t, host)) < 0) {
			corio__tls_free(t);
			return ret;
		}
	}
	if (t->part) {
		t->part->drop = corio__tls_part_drop; /* OpenSSL is linked: see tls/shard.c */
		CORIO__STAT_ADD(t->part->stats.sessions_live, 1);
		corio__list_add(&t->part->live, &t->link);
		t->counted = true;
	}
	*out = t;
	return 0;
}

void corio__tls_free(struct corio_tls *t)
{
	if (t->counted) {
		CORIO__STAT_SET(t->part->stats.sessions_live, t->part->stats.sessions_live - 1);
		corio__list_del(&t->link);
	}
	SSL_free(t->ssl); /* and the inner half of the pair */
	BIO_free(t->net);
	free(t);
}

int corio__tls_handshake(struct corio_tls *t)
{
	const char *who = t->server ? "corio_tls_accept" : "corio_tls_connect";
	ssize_t r = pump(t, OP_HANDSHAKE, NULL, 0, who);

	if (r > 0) {
		t->handshaken = true;
		TSTAT(t, handshakes, 1);
		if (SSL_session_reused(t->ssl))
			TSTAT(t, resumed, 1);
		return 0;
	}
	TSTAT(t, handshake_failed, 1);
	if (r == 0) /* close_notify before the handshake ended */
		return corio__error(-ECONNABORTED, "%s: the peer closed during the handshake", who);
	return (int)r;
}

/* ---- the public calls --------------------------------------------------- */

static ssize_t sock_recv(void *arg, void *buf, size_t len)
{
	return corio_recv(arg, buf, len);
}

static int sock_send(void *arg, const void *buf, size_t len, size_t *sent)
{
	ssize_t r = corio_send_ex(arg, buf, len, 0, sent);

	return r < 0 ? (int)r : 0;
}

/* The socket's next bytes or ev, whichever comes first (a select copies,
 * corio/select.h, so this wait does too: into the pair's buffer). */
static ssize_t sock_recv_or(void *arg, void *buf, size_t len, struct corio_event *ev)
{
	struct corio_sel w[2];
	int i;

	corio_sel_recv(&w[0], arg, buf, len); /* first: bytes that came win */
	corio_sel_event(&w[1], ev);
	i = corio_select(w, 2);
	return i < 0 ? i : i == 0 ? w[0].res : -ESHUTDOWN;
}

static int open_session(struct corio_tls_ctx *ctx, struct corio_sock *s, bool server,
			const char *host, struct corio_tls **out, const char *who)
{
	const struct corio__tls_io io = {.recv = sock_recv, .send = sock_send,
					 .recv_or = sock_recv_or, .arg = s};
	struct corio_tls *t;
	int ret = corio__may_block(who);

	if (ret)
		return ret;
	if (!ctx || !s || !out)
		return corio__error(-EINVAL, "%s: ctx, socket and out must not be NULL", who);
	if (!(ctx->flags & CORIO_TLS_SERVER) != !server)
		return corio__error(-EINVAL, "%s: a %s context", who,
				    server ? "client" : "server");
	if (!corio__tls_part_here())
		return corio__error(-EPERM, "%s: the runtime has no TLS part", who);
	if ((ret = corio__tls_new(ctx, server, host, &io, &t)) < 0)
		return ret;
	t->sock = s;
	if (!server && !(ctx->flags & CORIO_TLS_NO_TICKETS) && host) {
		struct sockaddr_storage a;
		socklen_t alen = sizeof(a);
		int port = corio_sock_peer_addr(s, &a, &alen) == 0
				   ? corio_addr_port((struct sockaddr *)&a) : -1;
		SSL_SESSION *sess;

		if (port >= 0)
			snprintf(t->cache_key, sizeof(t->cache_key), "%s:%d", host, port);
		if (t->cache_key[0] &&
		    (sess = corio__tls_cache_get(t->part, ctx->id, t->cache_key))) {
			SSL_set_session(t->ssl, sess);
			SSL_SESSION_free(sess);
			TSTAT(t, cache_hits, 1);
		}
	}
	if ((ret = corio__tls_handshake(t)) < 0) {
		corio__tls_free(t);
		return ret;
	}
	*out = t;
	return 0;
}

int corio_tls_accept(struct corio_tls_ctx *ctx, struct corio_sock *s, struct corio_tls **out)
{
	return open_session(ctx, s, true, NULL, out, "corio_tls_accept");
}

int corio_tls_connect(struct corio_tls_ctx *ctx, struct corio_sock *s, const char *host,
		      struct corio_tls **out)
{
	return open_session(ctx, s, false, host, out, "corio_tls_connect");
}

/* The checks every stream call makes first: 0 or -errno. */
static int session_ok(struct corio_tls *t, const char *who)
{
	int ret = corio__may_block(who);

	if (ret)
		return ret;
	if (!t)
		return corio__error(-EINVAL, "%s: the session is NULL", who);
	if (t->part && t->part != corio__tls_part_here())
		return corio__misuse(-EPERM, who, "the session belongs to another shard");
	return 0;
}

ssize_t corio_tls_read(struct corio_tls *t, void *buf, size_t len)
{
	ssize_t r = session_ok(t, "corio_tls_read");

	return r ? r : corio__tls_read(t, buf, len);
}

ssize_t corio__tls_read(struct corio_tls *t, void *buf, size_t len)
{
	ssize_t r;

	if (t->err)
		return t->err;
	if (t->eof)
		return 0;
	if (!len)
		return 0;
	r = pump(t, OP_READ, buf, len, "corio_tls_read");
	if (r > 0)
		TSTAT(t, bytes_in, (uint64_t)r);
	return r;
}

/*
 * corio_tls_read, unless ev is set while there is nothing to read: then
 * -ESHUTDOWN (the stream's read_or, tls/stream.c). Something to read is
 * a decrypted byte or a record OpenSSL holds, one in the pair, the
 * session's end or error; without any, the io table's recv_or races the
 * next bytes against ev, into the pair as fill_in would put them.
 */
ssize_t corio__tls_read_or(struct corio_tls *t, void *buf, size_t len, struct corio_event *ev)
{
	char *p;
	ssize_t n;
	int room;

	if (!t->err && !t->eof && !t->net_eof && t->io.recv_or && !SSL_has_pending(t->ssl) &&
	    !BIO_ctrl_pending(SSL_get_rbio(t->ssl)) && (room = BIO_nwrite0(t->net, &p)) > 0) {
		n = t->io.recv_or(t->io.arg, p, (size_t)room, ev);
		if (n < 0)
			return n;
		if (n == 0) {
			t->net_eof = true;
			BIO_shutdown_wr(t->net);
		} else {
			BIO_nwrite(t->net, &p, (int)n);
		}
	}
	return corio_tls_read(t, buf, len);
}

/* Write buf whole into records (the pair sends as it fills): 0 or -errno. */
static int write_all(struct corio_tls *t, const char *buf, size_t len)
{
	while (len) {
		ssize_t r = pump(t, OP_WRITE, (void *)buf, len, "corio_tls_write");

		if (r < 0)
			return (int)r;
		buf += r;
		len -= (size_t)r;
	}
	return 0;
}

static int write_check(struct corio_tls *t, const char *who)
{
	int ret = session_ok(t, who);

	if (ret)
		return ret;
	if (t->err)
		return t->err;
	if (t->notify_sent)
		return corio__error(-EPIPE, "%s: close_notify was sent", who);
	return 0;
}

ssize_t corio_tls_write(struct corio_tls *t, const void *buf, size_t len)
{
	int ret = write_check(t, "corio_tls_write");

	if (ret)
		return ret;
	if ((ret = write_all(t, buf, len)) < 0 || (ret = flush_out(t)) < 0)
		return ret;
	TSTAT(t, bytes_out, len);
	return (ssize_t)len;
}

#define GATHER 4096

ssize_t corio_tls_writev(struct corio_tls *t, const struct iovec *iov, int iovcnt)
{
	char gather[GATHER];
	size_t held = 0, total = 0;
	int ret = write_check(t, "corio_tls_writev");

	if (ret)
		return ret;
	if (iovcnt < 0 || (iovcnt && !iov))
		return corio__error(-EINVAL, "corio_tls_writev: bad iov");
	for (int i = 0; i < iovcnt; i++) {
		const char *p = iov[i].iov_base;
		size_t l = iov[i].iov_len;

		/* small pieces share a record; a large one goes as it is */
		if (held && held + l > GATHER) {
			if ((ret = write_all(t, gather, held)) < 0)
				return ret;
			held = 0;
		}
		if (l < GATHER) {
			memcpy(gather + held, p, l);
			held += l;
		} else if ((ret = write_all(t, p, l)) < 0) {
			return ret;
		}
		total += l;
	}
	if ((held && (ret = write_all(t, gather, held)) < 0) || (ret = flush_out(t)) < 0)
		return ret;
	TSTAT(t, bytes_out, total);
	return (ssize_t)total;
}

int corio_tls_shutdown(struct corio_tls *t)
{
	int ret = session_ok(t, "corio_tls_shutdown");

	if (ret)
		return ret;
	if (t->err)
		return t->err;
	if (!t->notify_sent) {
		ssize_t r = pump(t, OP_SHUTDOWN, NULL, 0, "corio_tls_shutdown");

		if (r < 0)
			return (int)r;
		t->notify_sent = true;
		TSTAT(t, notify_sent, 1);
		return 0;
	}
	return flush_out(t); /* a close_notify a deadline cut short */
}

#define CLOSE_BOUND_NS 1000000000ull

int corio_tls_close(struct corio_tls *t)
{
	struct corio_deadline d;
	int ret = 0;

	if (!t)
		return corio__error(-EINVAL, "corio_tls_close: the session is NULL");
	if (t->part && t->part != corio__tls_part_here())
		return corio__misuse(-EPERM, "corio_tls_close", "the session belongs to another shard");
	if (!t->err && (!t->notify_sent || BIO_ctrl_pending(t->net))) {
		/* a nested scope: the caller's deadline still applies if nearer */
		bool scoped = corio_timeout_push(&d, CLOSE_BOUND_NS) == 0;

		ret = corio_tls_shutdown(t);
		if (scoped)
			corio_deadline_pop(&d);
	}
	corio__tls_free(t);
	return ret;
}

const char *corio_tls_alpn(const struct corio_tls *t, size_t *len)
{
	const unsigned char *p = NULL;
	unsigned l = 0;

	if (t)
		SSL_get0_alpn_selected(t->ssl, &p, &l);
	if (len)
		*len = l;
	return l ? (const char *)p : NULL;
}

int corio_tls_resumed(const struct corio_tls *t)
{
	return t && SSL_session_reused(t->ssl) ? 1 : 0;
}

const char *corio_tls_version(const struct corio_tls *t)
{
	return t ? SSL_get_version(t->ssl) : NULL;
}

const char *corio_tls_server_name(const struct corio_tls *t)
{
	return t && t->server ? SSL_get_servername(t->ssl, TLSEXT_NAMETYPE_host_name) : NULL;
}

struct corio_sock *corio_tls_sock(const struct corio_tls *t)
{
	return t ? t->sock : NULL;
}
