/* SPDX-License-Identifier: MIT */
/*
 * corio/copy.h - copy bytes both ways between two connections until both
 * ends are done, as a proxy or a TLS terminator does (Tokio's
 * copy_bidirectional, Go's io.Copy both ways). Include <corio.h>.
 *
 *	struct corio_copy_stats cs;
 *	ret = corio_copy_bidi(client, upstream, NULL, &cs);
 *	corio_close(client);
 *	corio_close(upstream);
 *
 * Each direction runs in a fiber of its own (a group: the first error
 * cancels the other), so a connection that is not read does not stop the
 * other direction. End of stream on one side is carried to the other as a
 * half-close (shutdown of the write side), and the other direction goes
 * on until its own end: the call returns 0 once both directions ended that
 * way. An error on either side (a reset: -ECONNRESET, -EPIPE) ends both at
 * once and is returned; the caller closes both connections (the other one
 * may still hold unsent bytes: corio_close waits for them, or close it
 * with SO_LINGER 0 to pass the reset on).
 */
#ifndef CORIO_COPY_H
#define CORIO_COPY_H

#include <corio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct corio_sock;
struct corio_stream;

/* corio_copy_opts.flags */
#define CORIO_COPY_NO_SPLICE 0x1u /* sockets: copy through the buffer ring, never splice */
#define CORIO_COPY_ALL       0x1u

struct corio_copy_opts {
	/* 0: none. Else the call ends with -ETIMEDOUT once no byte moved
	 * either way for this long (checked every idle_ns / 4). */
	uint64_t idle_ns;
	/* 0: none. Else the whole call ends with -ETIMEDOUT this long after it
	 * began (the fiber's own deadline scope bounds it too). */
	uint64_t total_ns;
	unsigned flags;       /* CORIO_COPY_*                  */
	unsigned reserved[3]; /* must be zero                  */
};

struct corio_copy_stats {
	uint64_t a_to_b;   /* bytes read from a and written to b */
	uint64_t b_to_a;
	int a_end;         /* how reading a ended: 0 end of stream, -errno, or 1: it
	                      had not ended (the call ended first)          */
	int b_end;
	unsigned spliced;  /* directions that moved their bytes with splice(2): 0..2 */
	unsigned reserved;
};

/*
 * Copy between the connected stream sockets a and b, both of this shard,
 * both ways (above). Between two sockets whose bytes corio holds none of
 * (no buffered receive used on them, nothing queued to send), each
 * direction moves its bytes with splice(2) through a pipe of its own
 * (socket -> pipe -> socket, no copy through user space, as HAProxy
 * splices), waiting with corio_poll for readiness; otherwise (or with
 * CORIO_COPY_NO_SPLICE, CORIO_NET_DISABLE=splice) through the shard's
 * buffer ring, corio_recv_buf into corio_send_buf, without a copy either.
 * Bytes are counted in corio_sock_bytes and the net stats as any
 * receive and send. st (may be NULL) is filled in every case. Returns 0
 * (both ends reached end of stream), the first error, -ETIMEDOUT
 * (idle_ns, total_ns or the deadline scope), -ECANCELED, or -EINVAL (a or
 * b NULL, the same socket, not a stream socket, bad opts), -EPERM off a
 * fiber. Blocking.
 */
CORIO_API int corio_copy_bidi(struct corio_sock *a, struct corio_sock *b,
			      const struct corio_copy_opts *opts, struct corio_copy_stats *st);

/*
 * The same between two streams (corio/stream.h): a TLS session's on
 * either side or both, where the bytes must pass through user space to
 * be encrypted or decrypted. Each direction reads what the source stream
 * has (corio_stream_read) and writes it to the other (corio_stream_write
 * and a flush when the source has nothing more buffered); end of stream is
 * carried with corio_stream_shutdown_write (TCP's FIN, TLS's close_notify).
 * Each stream must have no other reader or writer meanwhile. Results as
 * corio_copy_bidi; spliced is 0. Blocking.
 */
CORIO_API int corio_stream_copy_bidi(struct corio_stream *a, struct corio_stream *b,
				     const struct corio_copy_opts *opts,
				     struct corio_copy_stats *st);

#ifdef __cplusplus
}
#endif

#endif
