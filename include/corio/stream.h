/* SPDX-License-Identifier: MIT */
/*
 * corio/stream.h - buffered streams: a reader and a writer over a transport.
 * Include <corio.h>.
 *
 * A stream turns a byte transport into what protocol code wants: a line up
 * to a delimiter, exactly n bytes, a look at what comes next; writes
 * gathered into one send with an explicit flush; a close that does not lose
 * the last reply to a reset. The transport is a small ops table, and the
 * stream knows it through that table alone (a write's "more follows" is a
 * flag of its writev, not a call around it), so code written on a stream
 * runs unchanged on any transport: the plain one here
 * wraps a corio socket (corio_stream_sock); corio_stream_tls (corio/tls.h)
 * puts one on a TLS session.
 *
 * Views. The read calls return a pointer (*view) to the bytes instead of
 * copying them out. A view is valid until the next read call on the stream
 * (read_until, skip_until, read_exact, peek, consume, read, wait) or its close:
 * copy what must live longer. On the plain transport a frame that lies in
 * one received buffer is returned in place, in the buffer the kernel filled
 * (zero copy: corio_recv_buf); a frame that spans two is copied once into
 * the stream's own read buffer. Bytes gathered that way and not consumed
 * (a peek for more than the caller then took) are read in place again from
 * the next read call on, once none of the earlier buffer's bytes remain
 * before them. The stream holds at most one borrowed
 * buffer, and none while it waits for the transport (what is left of it is
 * copied first), so an idle stream pins no ring buffer.
 *
 * Errors and what stays. Every blocking call honours the fiber's deadline
 * scope and cancellation (it returns -ETIMEDOUT / -ECANCELED) and keeps
 * every byte already received: a read that fails or times out consumes
 * nothing, and the next call sees the same bytes. As corio.h's one rule
 * says, cancellation and the deadline come first: every read call below
 * marked Blocking returns -ECANCELED / -ETIMEDOUT to a cancelled or expired
 * fiber even when the bytes it asks for are buffered (once its arguments
 * are checked), and takes nothing. A write that fails
 * (-ETIMEDOUT included: it is not known how much of the buffer went out)
 * breaks the write side: every later write, writev and flush returns the
 * same error; reading still works. Bad input is -EINVAL with the call
 * named in corio_last_error().
 *
 * Threads and fibers. A stream is shard-local (-EPERM elsewhere). One
 * fiber may read while another writes (-EBUSY for a second reader or a
 * second writer); close it when neither is inside a call.
 *
 * Ownership and the census. The stream owns its transport (the plain
 * transport: the socket) from corio_stream_new() on, and the fiber that
 * holds the stream owns the stream: it must end it with corio_stream_close()
 * or corio_stream_abort(), also when it is cancelled (both work then). A
 * stream still open when the runtime ends is a leak: corio_wait()'s census
 * reports it ("N streams never closed"), with -EBUSY.
 */
#ifndef CORIO_STREAM_H
#define CORIO_STREAM_H

#include <corio.h>
#include <corio/net.h>

#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct corio_stream; /* opaque */
struct corio_buf;    /* corio/net.h (declared here too: the headers include each other) */
struct corio_sock;

/*
 * A transport: t is the transport's own state, passed back to every op.
 * Every op may park the calling fiber and must honour its deadline scope
 * and cancellation, as corio's socket calls do. Results as corio_recv /
 * corio_sendv: >= 0, or -errno.
 */
struct corio_stream_transport {
	/* Copy received bytes into buf: >= 1, 0 at end of stream, -errno.
	 * Used when read_buf is NULL. */
	ssize_t (*read)(void *t, void *buf, size_t len);
	/* Lend the next received bytes in *b without copying: b->len (>= 1), 0
	 * at end of stream, -errno. NULL: the transport only copies. */
	ssize_t (*read_buf)(void *t, struct corio_buf *b);
	/* Give back what read_buf lent (required with read_buf). */
	void (*release)(void *t, struct corio_buf *b);
	/* Send every byte of iov[0..iovcnt): the total, or -errno. flags:
	 * CORIO_STREAM_WRITE_* hints (a transport may ignore any of them;
	 * unknown bits are 0 today and may be ignored too). */
	ssize_t (*writev)(void *t, const struct iovec *iov, int iovcnt, unsigned flags);
	/* The peer reads end of stream; reading goes on. 0 or -errno. */
	int (*shutdown_write)(void *t);
	/* Close and free t. 0 or -errno; t is gone either way. */
	int (*close)(void *t);
	/* Optional (NULL: corio_stream_wait says -ENOTSUP): read as read does,
	 * unless ev is set while no input has come: then -ESHUTDOWN, nothing
	 * read. Input already there wins over a set event. */
	ssize_t (*read_or)(void *t, void *buf, size_t len, struct corio_event *ev);
	/* Optional: send len bytes of the regular file fd from off as
	 * corio_sendfile does (the count, fewer at the file's end; -errno).
	 * NULL: corio_stream_sendfile reads the file and writes it (a
	 * transport that must see the bytes: TLS encrypts them). */
	ssize_t (*sendfile)(void *t, int fd, off_t off, size_t len);
};

/* The transport writev's flags: hints, as haproxy's snd_buf() flags are. */
#define CORIO_STREAM_WRITE_MORE 0x1u /* more follows at once (a file after a
                                        response head): the bytes may wait
                                        for it rather than leave in a packet
                                        of their own (the plain transport:
                                        CORIO_SEND_MORE, MSG_MORE) */

/* corio_stream_opts.flags */
#define CORIO_STREAM_AUTOFLUSH 0x1u /* a read that must wait for the transport
                                       first flushes the write buffer (unless
                                       another fiber is writing): answers to
                                       pipelined requests go out in one send,
                                       and a request-reply loop never waits
                                       for input with its reply unsent. A
                                       failed flush fails that read. */

/* Limits (a zeroed struct, or NULL, takes every default). */
struct corio_stream_opts {
	/* Longest frame read_until, read_exact and peek may ask for (their
	 * max / n): 1..1 GiB, 0: 64 KiB. The read buffer grows on demand up
	 * to this (it is only used for frames that span received buffers, or
	 * on a transport without read_buf), so memory per stream stays bounded;
	 * grown past 1 MiB, it is freed at the next read call that finds it
	 * empty. */
	size_t max_frame;
	/* The write buffer, allocated at the first buffered write: 1..1 GiB,
	 * 0: 16 KiB. */
	size_t wbuf;
	/* The graceful close's drain stops after this long (and at the
	 * deadline scope, if earlier): 0: 5 s. */
	uint64_t linger_ns;
	unsigned flags;       /* CORIO_STREAM_*                 */
	unsigned reserved[3]; /* must be zero                   */
};

/*
 * A stream over transport ops/t (ops and t must outlive the stream; ops is
 * usually static). Takes ownership of t: on success the stream closes it,
 * on failure t is untouched and still the caller's. 0 and *out, -EINVAL
 * (bad ops or opts), -ENOMEM, -EPERM off a shard. Does not block.
 */
CORIO_API int corio_stream_new(const struct corio_stream_transport *ops, void *t,
			       const struct corio_stream_opts *opts, struct corio_stream **out);
/* A stream over the plain transport: the connected stream socket s, read
 * with corio_recv_buf (zero copy), written with corio_sendv. Takes s as
 * corio_stream_new takes t: do not use s directly afterwards. */
CORIO_API int corio_stream_sock(struct corio_sock *s, const struct corio_stream_opts *opts,
				struct corio_stream **out);
/* The transport state given at creation (the socket for corio_stream_sock),
 * to ask it for addresses or options; NULL for a bad st. */
CORIO_API void *corio_stream_transport(struct corio_stream *st);

/* ---- reading --------------------------------------------------------------- */

/*
 * Read up to and including the next byte delim (0..255), at most max bytes
 * (1..max_frame) in all: the frame's length with *view on it, the delimiter
 * its last byte. At end of stream a last frame without the delimiter is
 * returned as it is (its last byte is not delim), then 0. -EMSGSIZE when
 * max bytes are buffered without a delimiter among them: nothing is
 * consumed, the bytes stay, and the caller may skip them
 * (corio_stream_skip_until, corio_stream_consume) or close; at most max
 * bytes are ever buffered for it. Blocking.
 */
CORIO_API ssize_t corio_stream_read_until(struct corio_stream *st, int delim, size_t max,
					  const void **view);
/* Discard bytes up to and including the next delim, however many: how many
 * were discarded (>= 1), 0 at end of stream before a delimiter. On an
 * error the bytes already discarded are gone. Blocking. */
CORIO_API ssize_t corio_stream_skip_until(struct corio_stream *st, int delim);
/* Exactly n bytes (1..max_frame): n with *view on them, 0 at end of stream
 * with nothing buffered, -ENODATA when the stream ended inside the n bytes
 * (those stay buffered: peek them). Blocking. */
CORIO_API ssize_t corio_stream_read_exact(struct corio_stream *st, size_t n, const void **view);
/* Look without consuming: wait until n bytes (1..max_frame) are buffered
 * and return how many lie contiguous at *view: at least n (more when more
 * are in one place), fewer only at end of stream, 0 at end of stream with
 * nothing buffered. peek(st, 1, &v) is "whatever has come". Blocking. */
CORIO_API ssize_t corio_stream_peek(struct corio_stream *st, size_t n, const void **view);
/* corio_stream_peek(st, n, view) for a parser that takes several frames
 * per look: it waits only for n bytes (1..max_frame), but when they span
 * received buffers and must be gathered, it gathers up to max bytes
 * (n..max_frame) of what is already buffered, so the frames behind come in
 * the same view and the parser does not start again on a piece. What it
 * gathered and the caller did not consume is read in place again (above).
 * The count at *view as corio_stream_peek. Blocking. */
CORIO_API ssize_t corio_stream_peek_upto(struct corio_stream *st, size_t n, size_t max,
					 const void **view);
/* Consume n buffered bytes (at most corio_stream_buffered()): 0, or
 * -EINVAL for more. Does not block. */
CORIO_API int corio_stream_consume(struct corio_stream *st, size_t n);
/* Copy up to len bytes into buf: what is buffered, else one transport read:
 * >= 1, 0 at end of stream, -errno. Blocking. */
CORIO_API ssize_t corio_stream_read(struct corio_stream *st, void *buf, size_t len);
/* Bytes received and not yet consumed (0 for a bad st). */
CORIO_API size_t corio_stream_buffered(const struct corio_stream *st);
/*
 * Wait for input or for the event ev, whichever comes first: the bytes
 * buffered (>= 1; at once when some are, unless the fiber is cancelled or
 * past its deadline: above), 0 at end of stream, -ESHUTDOWN
 * when ev is set and nothing has come (ev is not reset; bytes that came
 * first win), -errno from the transport, -ENOTSUP when the transport has no
 * read_or (both built-in ones have it). For a server's idle keep-alive wait
 * against corio_drain_event(): the drain ends the wait, a request that
 * arrived first is still read. Honours the deadline scope. Blocking.
 */
CORIO_API ssize_t corio_stream_wait(struct corio_stream *st, struct corio_event *ev);

/* ---- writing --------------------------------------------------------------- */

/*
 * Buffer len bytes; when they do not fit, what is buffered and buf go out
 * together in one transport write. len, or -errno (the write side's error:
 * sticky). Blocking only when the buffer is full.
 *
 * Lifetime (every write call here, corio_stream_writev and
 * corio_stream_flush included): buf is copied into the write buffer, or,
 * when it does not fit, sent from where it is while the fiber parks
 * until the transport took it. Other fibers of the shard run during that
 * park, so buf must stay allocated and unchanged until the call returns:
 * bytes that another fiber may free or change meanwhile (an entry of a
 * shard-local cache that a delete or an update replaces) must be pinned
 * (a reference count the writer holds across the call), copied first, or
 * handed over with corio_stream_write_owned.
 */
CORIO_API ssize_t corio_stream_write(struct corio_stream *st, const void *buf, size_t len);
/*
 * Write len bytes of a buffer the caller hands over until done(arg, res)
 * runs: the stream owns buf from the call on, and whoever frees it does
 * so in done, so no other fiber's free can pull the bytes from under a
 * parked write (the lifetime rule above). What was buffered goes out
 * first (the call may park for that), then buf, in order with every later
 * write. On the plain transport (corio_stream_sock) buf is queued on the
 * socket with corio_send_owned, without a copy and without waiting: done
 * runs from the loop (not in a fiber, never inside this call) once the
 * kernel let go of buf, with len or the send error; it must not block.
 * On a transport that copies the bytes (TLS encrypts them) the write is
 * made here and done runs before this call returns. done runs exactly
 * once for every call that returned 0 (it may be NULL), never for one
 * that failed: -EINVAL (buf NULL, len 0 or over INT32_MAX), the write
 * side's sticky error, the errors of corio_send_owned. Blocking.
 */
CORIO_API int corio_stream_write_owned(struct corio_stream *st, const void *buf, size_t len,
				       void (*done)(void *arg, int res), void *arg);
/* Send what is buffered. 0 or -errno (sticky). Blocking. */
CORIO_API int corio_stream_flush(struct corio_stream *st);
/* Flush, then shut down the write side (the transport's shutdown_write:
 * TCP's FIN, TLS's close_notify): the peer reads end of stream, reading
 * goes on. 0 or -errno. Writes after it fail. Blocking. */
CORIO_API int corio_stream_shutdown_write(struct corio_stream *st);
/* Send what is buffered and then iov[0..iovcnt) (the caller's buffers,
 * not copied), in one transport write when they fit 16 entries: the bytes
 * of iov, or -errno (sticky). iov is not modified. Blocking. */
CORIO_API ssize_t corio_stream_writev(struct corio_stream *st, const struct iovec *iov,
				      int iovcnt);

/*
 * Send what is buffered, then len bytes of the regular file fd from offset
 * off (fd's position is not used). The plain transport sends them with
 * corio_sendfile (no copy through user space); a transport without a
 * sendfile op (TLS) gets them read into the write buffer (a ring read),
 * a buffer at a time, and written as by corio_stream_write. One exception
 * on the plain transport: a file of at most 16 KiB whose pages are all
 * cached and that fits the write buffer is copied into it and goes out
 * with the next flush, in one send with what was buffered before it (a
 * pipe and a second send cost more than the copy: docs/STREAM.md, "Files").
 * len, or -errno
 * (sticky, as for writes): -ENODATA when the file ends before len bytes
 * (what went out cannot be taken back: close). Before any of that, on
 * every transport and path (the inline copy and TLS's read included), fd
 * must be an open regular file, as for corio_sendfile: -EBADF when it is
 * not open, -EINVAL when it is anything else (a device such as /dev/zero,
 * a FIFO, a directory, a socket), with a message naming
 * corio_stream_sendfile; bad input, so nothing is sent and the error is
 * not sticky. (One fstat(2) per call, as corio_sendfile makes.) Blocking.
 */
CORIO_API ssize_t corio_stream_sendfile(struct corio_stream *st, int fd, uint64_t off,
					size_t len);

/* ---- closing --------------------------------------------------------------- */

/*
 * Graceful close: flush, shut down the write side (the peer reads end of
 * stream), then read and discard until the peer closes, within linger_ns
 * and the deadline scope, and only then close the transport. Closing a TCP
 * socket with unread data makes the kernel send a reset, which can destroy
 * a reply the peer has not read yet; draining first avoids it. st is freed
 * in every case. Returns 0, or the first error: the flush's or shutdown's,
 * -ETIMEDOUT when the peer did not close in time, -ECANCELED (then it
 * closes at once), the close's. -EBUSY (nothing done) while another fiber
 * is inside a call on st. Blocking.
 */
CORIO_API int corio_stream_close(struct corio_stream *st);
/* Close at once: buffered writes are dropped, nothing is drained. st is
 * freed. 0, the transport close's error, or -EBUSY as above. */
CORIO_API int corio_stream_abort(struct corio_stream *st);

/* ---- stats ----------------------------------------------------------------- */

struct corio_stream_stats {
	uint64_t bytes_in;        /* bytes the transport delivered              */
	uint64_t bytes_out;       /* bytes handed to the transport              */
	uint64_t frames_borrowed; /* frames returned in place, in a buffer the
	                             transport lent (no copy)                    */
	uint64_t frames_buffered; /* frames returned from the stream's buffer   */
	uint64_t bytes_copied;    /* bytes copied from lent buffers into the
	                             stream's buffer (frames spanning two)       */
	uint64_t writes;          /* transport writes                          */
	uint64_t rbuf_size;       /* the read buffer now (0 until needed)      */
	uint64_t wbuf_size;       /* the write buffer now (0 until needed)     */
};

/* A snapshot of st's counters: 0, or -EINVAL / -EPERM. Shard-local. */
CORIO_API int corio_stream_stats_get(const struct corio_stream *st,
				     struct corio_stream_stats *out);

#ifdef __cplusplus
}
#endif

#endif
