/* SPDX-License-Identifier: MIT */
/*
 * tls/ctx.c - TLS contexts: OpenSSL SSL_CTXs set up once and shared,
 * read-only, by every shard.
 *
 * What is shared: the SSL_CTXs (certificates, keys, the CA store, the
 * session-ticket keys OpenSSL draws at random in SSL_CTX_new). Nothing is
 * changed on them after corio_tls_ctx_new returns; OpenSSL's own locks
 * (reference counts, the ticket-key lock) are the only cross-thread
 * synchronisation, and they are taken inside OpenSSL, not by corio.
 *
 * Server contexts keep no session cache (SSL_SESS_CACHE_OFF): resumption
 * is by stateless tickets only, so a ticket issued by one shard is opened
 * by any other with the same keys, and no shared cache needs a lock.
 * Client contexts hand each new session to the calling shard's cache
 * (tls/shard.c) through the new-session callback, which runs on the shard
 * that owns the SSL.
 */
#include "tls/internal.h"
#include "net/internal.h" /* corio__serve_tls_accept */

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

const char *corio__tls_reason(char *buf, size_t len, const char *fallback)
{
	unsigned long e = ERR_get_error();

	/* the first error is the root cause; drain the rest so they do not
	 * show up as the reason of a later, unrelated failure */
	while (e && ERR_get_error())
		;
	if (!e) {
		snprintf(buf, len, "%s", fallback);
		return buf;
	}
	const char *r = ERR_reason_error_string(e);

	if (r)
		snprintf(buf, len, "%s", r);
	else
		ERR_error_string_n(e, buf, len);
	return buf;
}

int corio__tls_ex_index(void)
{
	static atomic_int idx = -1;
	int i = atomic_load_explicit(&idx, memory_order_acquire);

	if (i >= 0)
		return i;
	/* two threads may both get one; the loser's index stays unused */
	i = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	int expect = -1;

	if (!atomic_compare_exchange_strong(&idx, &expect, i))
		i = expect;
	return i;
}

/* "h2,http/1.1" -> "\x02h2\x08http/1.1" */
static int alpn_wire(const char *list, unsigned char **out, unsigned *out_len)
{
	size_t n = strlen(list);
	unsigned char *w = malloc(n + 1);
	size_t at = 0;

	if (!w)
		return -ENOMEM;
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (l == 0 || l > 255) {
			free(w);
			return corio__error(-EINVAL, "corio_tls_ctx_new: bad ALPN list \"%s\"", list);
		}
		w[at++] = (unsigned char)l;
		memcpy(w + at, p, l);
		at += l;
		p += l + (e ? 1 : 0);
	}
	*out = w;
	*out_len = (unsigned)at;
	return 0;
}

/* Server: pick the first of our protocols the client offers. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned inlen, void *arg)
{
	struct corio_tls_ctx *c = arg;
	unsigned char *sel;

	if (SSL_select_next_proto(&sel, outlen, c->alpn, c->alpn_len, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK; /* no protocol in common: go on without */
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

/* Server: the certificate whose names match the SNI, else the default. */
static int sni_select(SSL *ssl, int *alert, void *arg)
{
	struct corio_tls_ctx *c = arg;
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);

	if (!name)
		return SSL_TLSEXT_ERR_OK;
	for (unsigned i = 1; i < c->nctx; i++) {
		X509 *x = SSL_CTX_get0_certificate(c->ctxs[i]);

		if (x && X509_check_host(x, name, 0, 0, NULL) == 1) {
			SSL_set_SSL_CTX(ssl, c->ctxs[i]);
			break;
		}
	}
	return SSL_TLSEXT_ERR_OK;
}

/* Client: a new session (TLS 1.3: a ticket after the handshake) goes to
 * the cache of the shard that owns this SSL, under its host:port. */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
	struct corio_tls *t = SSL_get_ex_data(ssl, corio__tls_ex_index());

	if (!t || !t->part || !t->cache_key[0] || !SSL_SESSION_is_resumable(sess))
		return 0; /* not kept: OpenSSL frees it */
	corio__tls_cache_put(t->part, t->ctx->id, t->cache_key, sess);
	return 1; /* the cache holds the reference */
}

static int ctx_fail(const char *what, const char *file, int err)
{
	char why[200];

	return corio__error(err, "corio_tls_ctx_new: %s%s%s: %s", what, file ? " " : "",
			    file ? file : "", corio__tls_reason(why, sizeof(why), "failed"));
}

static SSL_CTX *ctx_base(unsigned flags)
{
	SSL_CTX *c = SSL_CTX_new(flags & CORIO_TLS_SERVER ? TLS_server_method() : TLS_client_method());

	if (!c)
		return NULL;
	SSL_CTX_set_min_proto_version(c, flags & CORIO_TLS_ONLY_13 ? TLS1_3_VERSION : TLS1_2_VERSION);
	/* the record pump retries with the same buffer, but a writev gathers
	 * into a stack buffer whose address may differ on a retry */
	SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (flags & CORIO_TLS_NO_TICKETS)
		SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
	return c;
}

static int ctx_server_cert(struct corio_tls_ctx *c, unsigned i, const struct corio_tls_cert *cert)
{
	SSL_CTX *x = c->ctxs[i];

	if (!cert->cert_file || !cert->key_file)
		return corio__error(-EINVAL, "corio_tls_ctx_new: certs[%u] needs cert_file and key_file", i);
	if (SSL_CTX_use_certificate_chain_file(x, cert->cert_file) != 1)
		return ctx_fail("cannot load the certificate chain", cert->cert_file, -EPROTO);
	if (SSL_CTX_use_PrivateKey_file(x, cert->key_file, SSL_FILETYPE_PEM) != 1)
		return ctx_fail("cannot load the key", cert->key_file, -EPROTO);
	if (SSL_CTX_check_private_key(x) != 1)
		return ctx_fail("the key does not match its certificate", cert->key_file, -EPROTO);
	SSL_CTX_set_session_cache_mode(x, SSL_SESS_CACHE_OFF);
	if (c->alpn)
		SSL_CTX_set_alpn_select_cb(x, alpn_select, c);
	return 0;
}

static int ctx_client(struct corio_tls_ctx *c, const struct corio_tls_ctx_opts *o)
{
	SSL_CTX *x = c->ctxs[0];

	if (o->ca_file) {
		if (SSL_CTX_load_verify_locations(x, o->ca_file, NULL) != 1)
			return ctx_fail("cannot load the CA bundle", o->ca_file, -EPROTO);
	} else if (SSL_CTX_set_default_verify_paths(x) != 1) {
		return ctx_fail("cannot load the system CA store", NULL, -EPROTO);
	}
	SSL_CTX_set_verify(x, o->flags & CORIO_TLS_NO_VERIFY ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
	if (c->alpn && SSL_CTX_set_alpn_protos(x, c->alpn, c->alpn_len) != 0)
		return ctx_fail("cannot set ALPN", NULL, -EINVAL);
	if (!(o->flags & CORIO_TLS_NO_TICKETS)) {
		SSL_CTX_set_session_cache_mode(x, SSL_SESS_CACHE_CLIENT |
							  SSL_SESS_CACHE_NO_INTERNAL_STORE);
		SSL_CTX_sess_set_new_cb(x, new_session);
	}
	return 0;
}

static int ctx_check(const struct corio_tls_ctx_opts *o, struct corio_tls_ctx **out)
{
	if (!o || !out)
		return corio__error(-EINVAL, "corio_tls_ctx_new: %s is NULL", o ? "out" : "opts");
	if (o->flags & ~CORIO_TLS_CTX_ALL)
		return corio__error(-EINVAL, "corio_tls_ctx_new: unknown flags 0x%x",
				    o->flags & ~CORIO_TLS_CTX_ALL);
	for (unsigned i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return corio__error(-EINVAL, "corio_tls_ctx_new: reserved fields must be zero");
	if (o->out_buf && (o->out_buf < 4096 || o->out_buf > (1u << 20)))
		return corio__error(-EINVAL, "corio_tls_ctx_new: out_buf %u is outside 4096..1048576 "
				    "(0: the default)", o->out_buf);
	if ((o->flags & CORIO_TLS_SERVER) && (!o->certs || !o->ncerts || o->ncerts > 64))
		return corio__error(-EINVAL, "corio_tls_ctx_new: a server needs 1 to 64 certs");
	return 0;
}

int corio_tls_ctx_new(const struct corio_tls_ctx_opts *o, struct corio_tls_ctx **out)
{
	static _Atomic uint64_t next_id = 1;
	int ret = ctx_check(o, out);
	struct corio_tls_ctx *c;
	unsigned n;

	/* corio_serve's handshake (net/serve.c cannot name tls's calls) */
	atomic_store(&corio__serve_tls_accept, corio_stream_tls_accept);
	atomic_store(&corio__pool_tls_connect, corio_stream_tls_connect); /* corio_pool_get's */
	if (ret)
		return ret;
	n = o->flags & CORIO_TLS_SERVER ? o->ncerts : 1;
	c = calloc(1, sizeof(*c));
	if (!c || !(c->ctxs = calloc(n, sizeof(*c->ctxs)))) {
		free(c);
		return corio__error(-ENOMEM, "corio_tls_ctx_new: out of memory");
	}
	c->flags = o->flags;
	c->out_buf = o->out_buf ? o->out_buf : CORIO__TLS_OUT_BUF;
	c->id = atomic_fetch_add(&next_id, 1);
	ERR_clear_error();
	if (o->alpn && (ret = alpn_wire(o->alpn, &c->alpn, &c->alpn_len)))
		goto fail;
	for (c->nctx = 0; c->nctx < n; c->nctx++)
		if (!(c->ctxs[c->nctx] = ctx_base(o->flags))) {
			ret = ctx_fail("SSL_CTX_new", NULL, -ENOMEM);
			goto fail;
		}
	if (o->flags & CORIO_TLS_SERVER) {
		for (unsigned i = 0; i < n; i++)
			if ((ret = ctx_server_cert(c, i, &o->certs[i])))
				goto fail;
		SSL_CTX_set_tlsext_servername_callback(c->ctxs[0], sni_select);
		SSL_CTX_set_tlsext_servername_arg(c->ctxs[0], c);
	} else if ((ret = ctx_client(c, o))) {
		goto fail;
	}
	*out = c;
	return 0;
fail:
	corio_tls_ctx_free(c);
	return ret;
}

void corio_tls_ctx_free(struct corio_tls_ctx *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < c->nctx; i++)
		SSL_CTX_free(c->ctxs[i]);
	free(c->ctxs);
	free(c->alpn);
	free(c);
}
