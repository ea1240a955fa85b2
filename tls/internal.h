/* SPDX-License-Identifier: MIT */
/*
 * tls/internal.h - the TLS area: contexts (tls/ctx.c), sessions and their
 * record pump (tls/session.c), certificate generation (tls/cert.c), the
 * per-shard part with its counters (tls/shard.c), its client session cache
 * (tls/cache.c), and the stream transport over a session (tls/stream.c).
 *
 * tls sits above net and below ctl: it uses net's public calls (corio_recv,
 * corio_send_ex, corio_sock_peer_addr) and core's internals (errors,
 * misuse, the shard, deadline scopes); ctl puts its part in the table.
 * This header is the only one that names OpenSSL types; the public
 * corio/tls.h keeps them opaque.
 */
#ifndef CORIO_TLS_INTERNAL_H
#define CORIO_TLS_INTERNAL_H

#include "core/internal.h"
#include "core/list.h"

#include <corio/tls.h>
#include <openssl/ssl.h>

#define CORIO__PART_TLS (CORIO__PART_FIRST_AREA + 3)

/* A context: one SSL_CTX per certificate (SNI switches to it with
 * SSL_set_SSL_CTX; tickets stay with ctxs[0], the session context, so one
 * set of ticket keys serves every name). Immutable after corio_tls_ctx_new. */
struct corio_tls_ctx {
	unsigned flags;
	unsigned nctx;
	SSL_CTX **ctxs;            /* nctx; ctxs[0]: the default and the client's */
	unsigned char *alpn;       /* wire format (length-prefixed), or NULL */
	unsigned alpn_len;
	unsigned out_buf;          /* the BIO pair's output half, bytes (never 0) */
	uint64_t id;               /* cache key part: never reused in a process */
};

/*
 * The session's byte I/O, behind this table so the session does not name
 * the socket: the socket's (corio_recv / corio_send_ex / a select of the
 * socket's bytes against an event) in service, a byte array in the fuzz
 * targets (no runtime), and the place a kTLS transport would take over
 * after the handshake. The session calls only these for bytes.
 *   recv: bytes into buf (>= 1), 0 at end of stream, or -errno;
 *   send: -errno or 0, with *sent the bytes the peer's socket took;
 *   recv_or: recv, unless ev is set while nothing has come: then
 *     -ESHUTDOWN and nothing received (bytes that came win over a set
 *     event). NULL: the session cannot wait against an event, and
 *     corio__tls_read_or reads as corio_tls_read does.
 */
struct corio__tls_io {
	ssize_t (*recv)(void *arg, void *buf, size_t len);
	int (*send)(void *arg, const void *buf, size_t len, size_t *sent);
	ssize_t (*recv_or)(void *arg, void *buf, size_t len, struct corio_event *ev);
	void *arg;
};

/* The BIO pair's buffers: one full record (16 KiB + TLS 1.2's largest
 * expansion) fits on the way in; two on the way out, so a large write
 * sends two records per socket call. */
#define CORIO__TLS_IN_BUF  18688
#define CORIO__TLS_OUT_BUF 34816

struct corio__tls_part;

struct corio_tls {
	struct corio__link link;   /* in the part's live list (the census) */
	SSL *ssl;
	BIO *net;                  /* our end of the BIO pair (SSL has the other) */
	struct corio__tls_io io;
	struct corio_sock *sock;
	struct corio__tls_part *part; /* the shard's, NULL in the fuzz targets */
	struct corio_tls_ctx *ctx;
	int err;                   /* sticky: a protocol error or truncation */
	bool server;
	bool notify_sent;
	bool handshaken;           /* the handshake finished (SSL_in_init is no
				      witness: a fatal error sets it again) */
	bool eof;                  /* the peer's close_notify arrived */
	bool net_eof;              /* the socket said end of stream */
	bool flushing;             /* a fiber is sending the pair's output */
	bool counted;              /* in the part's sessions_live */
	bool in_stream;            /* a stream owns it (tls/stream.c) */
	bool stream_shut;          /* that stream's close asked for close_notify */
	char cache_key[80];        /* client: "host:port", "" when uncached */
};

/* tls/session.c */
/* A session on io (sock may be NULL): 0 and *out, or -errno. server: an
 * accepting session; host: the client's SNI and verified name (NULL: none).
 * No handshake yet: corio__tls_handshake() does it. */
int corio__tls_new(struct corio_tls_ctx *ctx, bool server, const char *host,
		   const struct corio__tls_io *io, struct corio_tls **out);
int corio__tls_handshake(struct corio_tls *t);
/* corio_tls_read without the fiber checks (the fuzz targets call it off
 * any runtime, with io calls that never wait). */
ssize_t corio__tls_read(struct corio_tls *t, void *buf, size_t len);
/* corio_tls_read, or -ESHUTDOWN when ev is set first (the stream's read_or). */
ssize_t corio__tls_read_or(struct corio_tls *t, void *buf, size_t len, struct corio_event *ev);
/* Free without close_notify (the fuzz targets; corio_tls_close's end). */
void corio__tls_free(struct corio_tls *t);

/* tls/ctx.c: the OpenSSL reason of the last error on this thread's queue
 * (cleared), or fallback when there is none. */
const char *corio__tls_reason(char *buf, size_t len, const char *fallback);
/* Which SSL ex_data index holds the struct corio_tls * of an SSL. */
int corio__tls_ex_index(void);

/* tls/shard.c: the part, its counters and the client cache */
struct corio__tls_part {
	struct corio_tls_stats stats;
	struct corio__tls_cache_ent *cache; /* CORIO__TLS_CACHE entries */
	uint64_t cache_tick;
	uint64_t live_at_fini;
	struct corio__link live;   /* open sessions: the census frees and counts them */
	/* Frees the sessions and cached sessions at the shard's end: set by
	 * the shard's first session (corio__tls_new), so the part, which
	 * every runtime links, names no OpenSSL call (tls/shard.c). */
	void (*drop)(struct corio__tls_part *p);
};
#define CORIO__TLS_CACHE 64
struct corio__tls_cache_ent {
	uint64_t ctx_id;
	uint64_t used;             /* cache_tick when last stored or taken: LRU */
	SSL_SESSION *sess;
	char key[80];
};
extern const struct corio__part corio__tls_part;

static inline struct corio__tls_part *corio__tls_part_here(void)
{
	struct corio__shard *s = corio__shard();

	return s ? s->parts[CORIO__PART_TLS] : NULL;
}
/* tls/cache.c: the part's drop hook, and the client cache.
 * The cached session for (ctx, key), with a reference the caller frees
 * (SSL_set_session takes its own), or NULL. */
SSL_SESSION *corio__tls_cache_get(struct corio__tls_part *p, uint64_t ctx_id, const char *key);
/* Keep sess (the cache takes the caller's reference) for (ctx, key). */
void corio__tls_cache_put(struct corio__tls_part *p, uint64_t ctx_id, const char *key,
			  SSL_SESSION *sess);
void corio__tls_part_drop(struct corio__tls_part *p);

#endif
