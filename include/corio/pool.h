/* SPDX-License-Identifier: MIT */
/*
 * corio/pool.h - outgoing connection pools, one per shard: connections to
 * "host:port" (plain, or TLS with a client context) kept open between
 * requests, checked before reuse. Include <corio.h>.
 *
 *	struct corio_pool_conn *c;
 *	if (corio_pool_get(pool, "10.0.0.7:6379", NULL, &c) == 0) {
 *		ret = do_request(c->sock);                // or c->stream (TLS)
 *		corio_pool_put(c, ret < 0);               // broken: closed, not kept
 *	}
 *
 * A pool and its connections belong to the shard that made it (every call
 * is shard-local; -EPERM elsewhere). Connections are keyed by the
 * host_port string and the TLS context (NULL: plain): a connection is
 * reused only for the same pair.
 */
#ifndef CORIO_POOL_H
#define CORIO_POOL_H

#include <corio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct corio_pool; /* opaque */
struct corio_sock;
struct corio_stream;
struct corio_tls_ctx;

struct corio_pool_opts {
	unsigned max_idle;   /* idle connections kept per key; 0: 8            */
	/* Connections per key, in use and idle together; 0: no limit. A get
	 * over it waits (within the deadline scope) for a put. */
	unsigned max_total;
	uint64_t idle_ns;    /* an idle connection older than this is closed
	                        instead of reused; 0: 60 s                    */
	uint64_t connect_ns; /* bound of a new connection: resolving, every
	                        address tried, and the TLS handshake; 0: the
	                        fiber's deadline scope only                   */
	unsigned flags;      /* must be 0                                      */
	unsigned reserved[3]; /* must be zero                                  */
};

/* A connection lent by corio_pool_get until corio_pool_put. */
struct corio_pool_conn {
	struct corio_sock *sock;     /* the socket (with stream set: its
	                                transport; addresses and options only) */
	struct corio_stream *stream; /* TLS: the stream over it; else NULL      */
	void *_key;                  /* private */
	struct corio_pool_conn *_next; /* private */
	uint64_t _idle_since;        /* private */
};

struct corio_pool_stats {
	uint64_t hits;        /* gets answered with an idle connection           */
	uint64_t connects;    /* gets that made a new connection                 */
	uint64_t dead;        /* idle connections found closed or reset by the
	                         peer (or with bytes nobody asked for) on a get,
	                         closed instead of lent                        */
	uint64_t expired;     /* idle connections closed past idle_ns           */
	uint64_t broken;      /* connections put back broken (closed)           */
	uint64_t overflow;    /* connections put back over max_idle (closed)    */
	uint64_t waits;       /* gets that waited for max_total                 */
	uint64_t idle;        /* idle connections now                           */
	uint64_t in_use;      /* connections lent now                           */
};

/* A pool on this shard: 0 and *out, -EINVAL (bad opts, with a message),
 * -ENOMEM, -EPERM off a shard. Does not block. */
CORIO_API int corio_pool_new(const struct corio_pool_opts *opts, struct corio_pool **out);

/*
 * Lend a connection to host_port (as corio_tcp_connect takes it: a name
 * is resolved) over tls (a client context, NULL: plain). An idle one of
 * the same key is taken first, newest first, after a check that it is
 * still open: a poll without waiting that finds it readable (the peer's
 * FIN or RST, or bytes nobody asked for) closes it and counts it in dead,
 * and the next idle one is tried, so a dead connection is found here and
 * not by the request that would use it. Idle ones older than idle_ns are
 * closed too (expired). Else a new connection is made, bounded by
 * connect_ns and the deadline scope. With max_total connections of the
 * key out, waits for one to be put back. 0 and *out, or -errno: the
 * connect's (-ECONNREFUSED, -ENOENT for a name that does not resolve,
 * -ETIMEDOUT, ...), the handshake's, -ECANCELED, -EINVAL (NULLs). Blocking.
 */
CORIO_API int corio_pool_get(struct corio_pool *p, const char *host_port,
			     struct corio_tls_ctx *tls, struct corio_pool_conn **out);

/*
 * Give c back. broken != 0 (the request failed, the protocol is out of
 * step, the peer said it closes): closed (broken). Else kept idle for the
 * next get of its key, or closed when max_idle are idle already
 * (overflow). Either way a get waiting for max_total may go on. c must not
 * be used afterwards. Blocking only while a connection is closed.
 */
CORIO_API void corio_pool_put(struct corio_pool_conn *c, int broken);

/* Close every idle connection and free p. Connections still lent must be
 * put back first (-EBUSY otherwise, nothing freed). 0, -EBUSY or -EINVAL.
 * Blocking (the closes). */
CORIO_API int corio_pool_free(struct corio_pool *p);

/* A snapshot of p's counters: 0 or -EINVAL. Shard-local. */
CORIO_API int corio_pool_stats_get(const struct corio_pool *p, struct corio_pool_stats *out);

#ifdef __cplusplus
}
#endif

#endif
