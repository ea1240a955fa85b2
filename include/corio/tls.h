/* SPDX-License-Identifier: MIT */
/*
 * corio/tls.h - TLS 1.3 (and 1.2) sessions on connected corio sockets,
 * driven by OpenSSL 3 through memory BIOs: every byte on the wire goes
 * through corio_recv() / corio_send_ex(), so handshakes, reads, writes and
 * close_notify honour the fiber's deadline scope and cancellation and run
 * on both backends. Include <corio.h>; link with -lssl -lcrypto (pkg-config
 * corio does it). This header names no OpenSSL type.
 *
 * Threads. A context (struct corio_tls_ctx) is made once, before or while
 * the runtime runs, on any thread, and is then immutable: its certificates,
 * keys, CA store and session-ticket keys are shared read-only by every
 * shard (a resumed connection may land on any shard under SO_REUSEPORT).
 * OpenSSL takes its own internal locks on a shared context (reference
 * counts, the ticket-key read); corio adds none. A session (struct
 * corio_tls) is shard-local like its socket: every call on it must be made
 * on that shard, by one fiber at a time for reading and one for writing.
 * The client session cache is per shard, keyed by context and "host:port".
 *
 * Errors: -errno with the reason in corio_last_error() (OpenSSL's reason
 * string where it has one):
 *   -EPROTO        the peer sent what is not TLS, or a fatal alert;
 *   -EKEYREJECTED  the peer's certificate did not verify (chain or name);
 *   -ECONNABORTED  the TCP stream ended without close_notify (a truncation
 *                  attack looks the same: never taken as end of stream);
 *   -ETIMEDOUT / -ECANCELED / -ECONNRESET / -EPIPE ... from the socket.
 * A protocol error is sticky: later reads and writes return it again and
 * close sends no close_notify. A deadline or cancellation is not: a read
 * that timed out consumed nothing and may be retried, and a write that
 * timed out keeps its encrypted bytes queued in the session, in order,
 * ahead of anything written later (so the record stream stays whole).
 */
#ifndef CORIO_TLS_H
#define CORIO_TLS_H

#include <corio.h>
#include <corio/net.h>

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct corio_tls_ctx; /* opaque, shared by every shard, immutable */
struct corio_tls;     /* opaque: one TLS session on one socket, shard-local */

/* ---- contexts ---------------------------------------------------------- */

/* corio_tls_ctx_opts.flags */
#define CORIO_TLS_SERVER    0x1u /* a server context (else a client one)      */
#define CORIO_TLS_NO_VERIFY 0x2u /* client: accept any certificate and name
                                    (tests only: anyone can impersonate)     */
#define CORIO_TLS_ONLY_13   0x4u /* refuse TLS 1.2 (default: 1.2 minimum,
                                    1.3 preferred)                           */
#define CORIO_TLS_NO_TICKETS 0x8u /* no resumption: servers issue no session
                                    tickets, clients cache none             */
#define CORIO_TLS_CTX_ALL   0xfu

/* One certificate chain and its private key, PEM files. */
struct corio_tls_cert {
	const char *cert_file; /* the leaf first, then its intermediates */
	const char *key_file;
};

struct corio_tls_ctx_opts {
	unsigned flags; /* CORIO_TLS_* */
	/* Servers: at least one. A ClientHello whose server name (SNI)
	 * matches a certificate's names (subjectAltName, wildcards as
	 * X509_check_host allows) gets that certificate; any other, or none,
	 * gets certs[0]. */
	const struct corio_tls_cert *certs;
	unsigned ncerts;
	/* Clients: PEM bundle of trusted CAs; NULL: the system store
	 * (OpenSSL's default paths, /etc/ssl/certs on Debian). */
	const char *ca_file;
	/* ALPN protocols in preference order, comma-separated
	 * ("h2,http/1.1"); NULL: no ALPN. A server picks the first of its own
	 * list the client offers, and a client offering none of them gets
	 * no protocol (not an error); a client sends its list. */
	const char *alpn;
	/* Bytes of records a session holds before it must send them (0: 34
	 * KiB, two full records; else 4 KiB to 1 MiB). A write larger than
	 * this goes out in several sends; a larger buffer sends a large
	 * response in fewer (httpd: 72 KiB, a 64 KiB file in one send), at
	 * that much memory per session once it has written. */
	unsigned out_buf;
	unsigned reserved[3]; /* must be zero */
};

/*
 * Make a context: 0 and *out, or -EINVAL (bad opts), -ENOENT / -EPROTO (a
 * file that cannot be read or parsed, a key that does not match its
 * certificate: the reason and file in corio_last_error()), -ENOMEM.
 * Reads files: blocking (call it before corio_start, in cfg.setup, or on
 * the blocking-work pool). Any thread. The session-ticket keys are made
 * here, at random, and live as long as the context: every shard's server
 * sessions encrypt and decrypt tickets with them.
 */
CORIO_API int corio_tls_ctx_new(const struct corio_tls_ctx_opts *opts,
				struct corio_tls_ctx **out);
/* Free ctx once no session made from it is open (sessions hold no
 * reference to it that outlives their close). Any thread; NULL is a no-op.
 * A shard's client cache entries for ctx are dropped when that shard next
 * looks in its cache or stops, not here: free contexts after corio_wait(),
 * or make them once for the process. */
CORIO_API void corio_tls_ctx_free(struct corio_tls_ctx *ctx);

/* ---- handshakes --------------------------------------------------------- */

/*
 * Server handshake on the connected socket s (ctx made with
 * CORIO_TLS_SERVER): 0 and the session in *out, or -errno (see above; the
 * socket is the caller's in every case, never closed here). Bounded by the
 * fiber's deadline scope: a ClientHello that trickles in a byte at a time
 * completes if it completes before the deadline, else -ETIMEDOUT; the
 * shard serves other fibers while this one waits. Handshake crypto runs on
 * the shard (about 1 ms of CPU for RSA-2048, less for ECDSA P-256:
 * docs/TLS.md). Blocking.
 */
CORIO_API int corio_tls_accept(struct corio_tls_ctx *ctx, struct corio_sock *s,
			       struct corio_tls **out);
/*
 * Client handshake on the connected socket s to host (a DNS name or an IP
 * literal): sends host as SNI (not for IP literals), verifies the chain
 * against the context's CAs and the certificate against host, unless the
 * context has CORIO_TLS_NO_VERIFY. A refused certificate is -EKEYREJECTED
 * with OpenSSL's verify reason ("certificate has expired", "hostname
 * mismatch", ...). Offers the session this shard cached for (ctx,
 * host:peer port), so a reconnect resumes (corio_tls_resumed()). Blocking.
 */
CORIO_API int corio_tls_connect(struct corio_tls_ctx *ctx, struct corio_sock *s,
				const char *host, struct corio_tls **out);

/* ---- the stream ---------------------------------------------------------- */

/*
 * Read up to len decrypted bytes: the count (>= 1), 0 once the peer's
 * close_notify arrived (end of stream), or -errno; a TCP end without
 * close_notify is -ECONNABORTED. Waits only when no decrypted byte is
 * buffered. Blocking; one reading fiber per session.
 */
CORIO_API ssize_t corio_tls_read(struct corio_tls *t, void *buf, size_t len);
/* Encrypt and send all len bytes: len, or -errno (as corio_send: nothing is
 * said about how many reached the socket). Returns once every record is in
 * the socket. Blocking; one writing fiber per session. */
CORIO_API ssize_t corio_tls_write(struct corio_tls *t, const void *buf, size_t len);
/* corio_tls_write of iov[0..iovcnt): small pieces are gathered into one
 * record (up to 4 KiB), large ones are written as they are. */
CORIO_API ssize_t corio_tls_writev(struct corio_tls *t, const struct iovec *iov, int iovcnt);
/*
 * Send close_notify (once; later calls return 0) after any bytes still
 * queued, bounded by the deadline scope even when the peer does not read.
 * Reading still works (the peer may answer with its own close_notify).
 * 0, the session's sticky error, or the socket's (-ETIMEDOUT, -EPIPE ...).
 * Blocking.
 */
CORIO_API int corio_tls_shutdown(struct corio_tls *t);
/*
 * corio_tls_shutdown() unless it was done or the session failed, then free
 * t. Bounded by the fiber's deadline scope and by 1 s of its own when the
 * scope is later or absent, so a peer that reads nothing cannot hold the
 * fiber. The socket stays open and the caller's: corio_close() it after.
 * Returns 0 or the close_notify's error; t is freed either way. Blocking.
 */
CORIO_API int corio_tls_close(struct corio_tls *t);

/* ---- as a stream ------------------------------------------------------------ */

struct corio_stream;      /* corio/stream.h */
struct corio_stream_opts;

/*
 * A buffered stream (corio/stream.h) over the session t, so code written on
 * corio_stream_* runs over TLS unchanged. The stream takes t and its socket
 * (corio_tls_sock) as corio_stream_sock takes a socket: on success it owns
 * both and the caller must not use either directly again; on failure both
 * stay the caller's. corio_stream_transport() returns t (for corio_tls_alpn
 * and the like). The transport copies: reads decrypt into the stream's own
 * buffer (no zero-copy views), writes are corio_tls_writev.
 * What the TLS rules mean on a stream:
 *   - end of stream (0) is the peer's close_notify; a TCP end without it is
 *     -ECONNABORTED from the read call, never end of stream, with the bytes
 *     already buffered kept;
 *   - corio_stream_close flushes, sends close_notify (the write side's
 *     shutdown), drains until the peer's close_notify, then frees the
 *     session and closes the socket; a peer that ends TCP without its own
 *     close_notify makes it return -ECONNABORTED (the data went out; the
 *     peer's end was not clean);
 *   - corio_stream_abort sends no close_notify: buffered writes are dropped,
 *     so the peer reads -ECONNABORTED, not a clean end.
 * 0 and *out, -EINVAL (NULL t, bad opts), -EBUSY (a stream owns t already),
 * -ENOMEM, -EPERM (another shard's session). Does not block.
 */
CORIO_API int corio_stream_tls(struct corio_tls *t, const struct corio_stream_opts *opts,
			       struct corio_stream **out);

/*
 * The handshake and the stream in one call: corio_tls_accept (server) or
 * corio_tls_connect (client, to host) on s, then corio_stream_tls. 0 and
 * *out, owning the session and s; or -errno (the handshake's or the
 * stream's, the reason in corio_last_error()) with the session freed and s
 * still the caller's to close. The handshake is bounded by the fiber's
 * deadline scope. Blocking.
 */
CORIO_API int corio_stream_tls_accept(struct corio_tls_ctx *ctx, struct corio_sock *s,
				      const struct corio_stream_opts *opts,
				      struct corio_stream **out);
CORIO_API int corio_stream_tls_connect(struct corio_tls_ctx *ctx, struct corio_sock *s,
				       const char *host, const struct corio_stream_opts *opts,
				       struct corio_stream **out);

/* ---- details -------------------------------------------------------------- */

/* The ALPN protocol agreed (not terminated; *len its length), or NULL. */
CORIO_API const char *corio_tls_alpn(const struct corio_tls *t, size_t *len);
/* 1 when the handshake resumed a session (a ticket), else 0. */
CORIO_API int corio_tls_resumed(const struct corio_tls *t);
/* "TLSv1.3", "TLSv1.2". */
CORIO_API const char *corio_tls_version(const struct corio_tls *t);
/* The server name the client asked for (SNI) on a server session, or NULL. */
CORIO_API const char *corio_tls_server_name(const struct corio_tls *t);
/* The session's socket. */
CORIO_API struct corio_sock *corio_tls_sock(const struct corio_tls *t);

/*
 * kTLS probe: 1 when the kernel offers the "tls" upper-layer protocol
 * (setsockopt(TCP_ULP, "tls") on a fresh TCP socket says ENOTCONN, not
 * ENOENT), so records could be handed to it after the handshake; 0 when it
 * does not (ENOENT: no tls module); -errno when the probe itself failed.
 * corio does not use kTLS yet (docs/TLS.md says what it would change); the
 * answer is in corio_tls_stats.ktls. Any thread, does not block.
 */
CORIO_API int corio_tls_ktls_probe(void);

/* ---- certificates for tests and examples ------------------------------------ */

#define CORIO_TLS_KEY_EC_P256 0u /* ECDSA on P-256 (the default) */
#define CORIO_TLS_KEY_RSA2048 1u

/* corio_tls_cert_gen.flags */
#define CORIO_TLS_GEN_CA 0x1u /* a CA certificate (basicConstraints CA:TRUE) */

struct corio_tls_cert_gen {
	const char *cert_file, *key_file; /* written, PEM (the key mode 0600) */
	/* comma-separated subjectAltNames: DNS names and IP literals
	 * ("localhost,127.0.0.1"); the first is also the subject CN */
	const char *names;
	unsigned key_type;           /* CORIO_TLS_KEY_*                    */
	unsigned flags;              /* CORIO_TLS_GEN_*                    */
	unsigned days;               /* validity from now; 0: 1 day        */
	const char *ca_cert_file;    /* the signer; NULL: self-signed      */
	const char *ca_key_file;
	unsigned reserved[4];        /* must be zero                       */
};
/* Make a fresh key and certificate and write them: 0 or -errno with the
 * reason. For tests, examples and benchmarks (a real deployment gets its
 * certificates from its CA). Blocking (key generation, files); any thread. */
CORIO_API int corio_tls_cert_generate(const struct corio_tls_cert_gen *g);

/* ---- stats ----------------------------------------------------------------- */

/* One shard's TLS counters; written by the shard, readable from any thread
 * (as corio_net_stats). New counters are added at the end. */
struct corio_tls_stats {
	uint64_t sessions_live;    /* sessions open now (the census checks 0)    */
	uint64_t handshakes;       /* completed, server and client               */
	uint64_t resumed;          /* of which resumed a session                 */
	uint64_t handshake_failed; /* handshakes that ended with an error        */
	uint64_t verify_failed;    /* of which: the peer's certificate refused   */
	uint64_t proto_errors;     /* sessions ended by -EPROTO (garbage, alerts) */
	uint64_t truncated;        /* TCP ends without close_notify              */
	uint64_t notify_sent;      /* close_notify sent                          */
	uint64_t bytes_in;         /* decrypted bytes read                       */
	uint64_t bytes_out;        /* plaintext bytes written                    */
	uint64_t cache_hits;       /* client handshakes that offered a session   */
	uint64_t ktls;             /* 1: the kernel has the tls ULP, 0: not      */
};
/* Copy shard's TLS counters: 0, -EINVAL or -EPERM (as corio_net_stats_get;
 * zeros before the area has started on that shard). */
CORIO_API int corio_tls_stats_get(struct corio_rt *rt, unsigned shard,
				  struct corio_tls_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* CORIO_TLS_H */
