/* SPDX-License-Identifier: MIT */
/*
 * corio/net.h - TCP, UDP and Unix stream sockets on io_uring. Include <corio.h>.
 *
 * Sockets and listeners are shard-local: every call on one must be made on
 * the shard that created it (-EPERM otherwise: API misuse, which a debug
 * build answers with an abort, corio.h). To move a connection to
 * another shard, take its fd with corio_sock_release_fd() and wrap it there
 * with corio_sock_from_fd(). All blocking calls park only the calling fiber,
 * honour the fiber's deadline scope (they return -ETIMEDOUT once it has
 * passed) and cancellation (-ECANCELED), and return only once the kernel no
 * longer references the caller's memory.
 *
 * Addresses are "host:port": "127.0.0.1:8080", "[::1]:8080", "localhost:80"
 * (127.0.0.1), "*:80" or ":80" (IPv4 any), "[::]:80" (IPv6 any). Port 0
 * binds an ephemeral port; read it back with corio_listener_addr() /
 * corio_sock_local_addr(). Listening and binding take these numeric forms
 * only (anything else is -EINVAL with the reason in corio_last_error()).
 * Connecting (corio_tcp_connect, corio_udp_connect) and corio_resolve()
 * also take host names, "db.example:5432", "localhost:80" included: see
 * "names" below.
 */
#ifndef CORIO_NET_H
#define CORIO_NET_H

#include <corio.h>

#include <sys/socket.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct corio_listener; /* opaque: a listening TCP or Unix socket */
struct corio_sock;     /* opaque: a connected stream socket or a UDP socket */

/* ---- addresses ----------------------------------------------------------- */

/* Parse "host:port" (see above) into *addr / *len: 0 or -EINVAL. Any thread. */
CORIO_API int corio_addr_parse(const char *host_port, struct sockaddr_storage *addr,
			       socklen_t *len);
/* Format an IPv4/IPv6 address as "1.2.3.4:80" / "[::1]:80", a Unix one as its
 * path: the length written (truncated to fit, always terminated) or -EINVAL. */
CORIO_API int corio_addr_format(const struct sockaddr *addr, socklen_t len, char *buf,
				size_t size);
/* The port of an IPv4/IPv6 address, host order; -EINVAL for other families. */
CORIO_API int corio_addr_port(const struct sockaddr *addr);

/* ---- listening ------------------------------------------------------------- */

/* corio_listen_opts.flags */
#define CORIO_LISTEN_REUSEPORT 0x1u /* SO_REUSEPORT: one listener per shard on
                                       one port, the kernel spreads connections */
#define CORIO_LISTEN_V6ONLY    0x2u /* IPv6 socket accepts no IPv4 (default: both) */
#define CORIO_LISTEN_UNLINK    0x4u /* Unix: remove a stale socket file first:
                                       only a socket whose test connect is
                                       refused; a live server's socket gives
                                       -EADDRINUSE, a file that is not a
                                       socket -EEXIST, and neither is touched */
#define CORIO_LISTEN_ALL       0x7u

struct corio_listen_opts {
	unsigned backlog;     /* 0: SOMAXCONN                  */
	unsigned flags;       /* CORIO_LISTEN_*                 */
	/* 0: no limit. Else a connection that corio_accept() takes while this
	 * shard already has max_conns live stream sockets (accepted or
	 * connected, conns_live) is closed at once, counted in conns_refused,
	 * and corio_accept() waits for the next one: a flood of connections
	 * cannot take every fd and buffer of the shard. Connections that
	 * corio_accept_dispatch() hands to other shards are not counted here. */
	unsigned max_conns;
	/* 0: the shard's (corio_config.net_recv_queue / net_send_queue). Else
	 * 1..65535: the receive and send queue caps of the sockets this
	 * listener's corio_accept() and corio_accept_dispatch() return (see
	 * corio_recv_buf, corio_send_buf). CORIO_NET_RECV_QUEUE and
	 * CORIO_NET_SEND_QUEUE, when set, win over these (corio.h). */
	unsigned recv_queue;
	unsigned send_queue;
	unsigned reserved[3]; /* must be zero                   */
};

/*
 * Listen on host_port (opts may be NULL). TCP_NODELAY is set on the
 * listener, and accepted sockets inherit it. Returns 0 and the listener in
 * *out, or -errno (-EINVAL for a bad address or opts, -EADDRINUSE, ...).
 * Shard-local, does not block.
 */
CORIO_API int corio_tcp_listen(const char *host_port, const struct corio_listen_opts *opts,
			       struct corio_listener **out);
/*
 * Listen-all: one port served by every shard that calls this. The first
 * call of the runtime for a host_port binds it (SO_REUSEPORT) and resolves
 * port 0; every later call with the same host_port string, on any shard,
 * gets its own listener on that same address and port, and the kernel
 * spreads connections over them. So each shard calls
 * corio_tcp_listen_shared("127.0.0.1:0", NULL, &l) in cfg.setup (or entry)
 * and corio_listener_addr() gives every shard the one port. opts as for
 * corio_tcp_listen (CORIO_LISTEN_REUSEPORT is implied). At most 16
 * host_port strings per runtime (-ENOSPC after); the resolved addresses are
 * the runtime's, shared read-only by its shards. Shard-local otherwise,
 * does not block.
 */
CORIO_API int corio_tcp_listen_shared(const char *host_port, const struct corio_listen_opts *opts,
				      struct corio_listener **out);
/* Listen on a Unix stream socket at path ("@name": abstract namespace). */
CORIO_API int corio_unix_listen(const char *path, const struct corio_listen_opts *opts,
				struct corio_listener **out);

/*
 * Wait for the next connection and return it in *out. One multishot accept
 * per listener stays armed while anyone accepts, so a burst of connections
 * costs one CQE each and no SQE. EMFILE/ENFILE (and other transient errors
 * such as ENOMEM) do not come back: the listener backs off (1 ms doubling
 * to 100 ms) and keeps listening; they are counted in the net stats. Nor
 * does a connection's own error (ECONNABORTED, EPROTO, ENETDOWN, EPERM, ...
 * as accept(2) lists): that connection is lost, the listener goes on.
 * Returns 0, -ECANCELED, -ETIMEDOUT, or -errno when the listener broke
 * (sticky: every later call returns it, after connections already queued).
 * Once corio_drain() reaches the shard: the connections already queued,
 * then -ESHUTDOWN (a fiber parked here is woken for it).
 * Blocking; one accepting fiber per listener at a time (-EBUSY).
 */
CORIO_API int corio_accept(struct corio_listener *l, struct corio_sock **out);

/* The listener's bound address (for port 0). 0 or -errno. */
CORIO_API int corio_listener_addr(struct corio_listener *l, struct sockaddr_storage *addr,
				  socklen_t *len);
CORIO_API int corio_listener_fd(const struct corio_listener *l);

/* Stop listening and free l. Connections already accepted by the kernel but
 * not yet returned by corio_accept() are closed. A Unix listener removes its
 * socket file if that file is still its own (not one another server bound
 * after ours was removed). A fiber waiting in corio_accept() on l (or
 * in its back-off) is woken with -EBADF, and the close waits until it has
 * left; a corio_accept() that starts while the close runs gets -EBADF too.
 * Blocking (waits for the multishot accept's last CQE and for those
 * fibers); returns 0, -EBADF when another fiber is already closing l,
 * -EPERM off a fiber with work in flight. */
CORIO_API int corio_listener_close(struct corio_listener *l);

/*
 * Accept model 2: accept on this shard and hand every connection to a shard
 * (round robin, or the one with the fewest live connections, counting the
 * ones handed to it that it has not taken yet; ties take turns), where
 * handler(sock, arg) runs in a new fiber; the handler owns the socket and
 * must close it. Runs until the calling fiber is cancelled or its deadline
 * passes (returns -ECANCELED / -ETIMEDOUT) or the listener breaks. Needs
 * corio_spawn_on() (cross-shard messages). A connection whose handler never
 * runs (its target shard stops first) is closed. Blocking.
 */
#define CORIO_DISPATCH_ROUND_ROBIN  0u
#define CORIO_DISPATCH_LEAST_LOADED 1u
CORIO_API int corio_accept_dispatch(struct corio_listener *l, unsigned policy,
				    int (*handler)(struct corio_sock *s, void *arg), void *arg);

/* ---- connecting ------------------------------------------------------------- */

/*
 * Connect to host_port (TCP_NODELAY on). Bound it with a deadline scope.
 * 0 and the socket in *out, or -ECONNREFUSED, -ETIMEDOUT, -EINVAL, ...
 * Blocking. A numeric address ("10.0.0.1:80", "[::1]:80") is connected
 * to as is. A host name is resolved first (corio_resolve: the shard's
 * cache, else c-ares on the shard; its errors, -ENOENT
 * for no such name, come back as they are), then every address it gave
 * is tried in the resolver's order until one connects. The deadline
 * scope bounds the whole call, lookup and every attempt: no attempt has
 * a bound of its own (no happy eyeballs), so without a scope an address
 * that never answers is waited for as long as the kernel's connect
 * timeout before the next is tried. A cancel or a passed deadline ends
 * the call at once (-ECANCELED / -ETIMEDOUT). When every address fails,
 * the first address's error is returned and corio_last_error() says how
 * many were tried. An empty or "*" host is -EINVAL (not "this host").
 */
CORIO_API int corio_tcp_connect(const char *host_port, struct corio_sock **out);
/* corio_tcp_connect to one address: an AF_INET or AF_INET6 sa of at least
 * its family's size (sizeof(struct sockaddr_in) / sockaddr_in6) in len, as
 * getaddrinfo or corio_resolve gives it. -EINVAL for another family or a
 * short len. Blocking. */
CORIO_API int corio_tcp_connect_addr(const struct sockaddr *sa, socklen_t len,
				     struct corio_sock **out);
CORIO_API int corio_unix_connect(const char *path, struct corio_sock **out);

/* Wrap a connected stream socket fd (taking ownership), on this shard. */
CORIO_API int corio_sock_from_fd(int fd, struct corio_sock **out);
/* Free s but keep its fd open and return it (the caller owns it), or -EBUSY
 * when received data is still queued in s (it would be lost) or another
 * fiber is parked in a receive on s. Blocking
 * briefly if a multishot receive must be cancelled first. */
CORIO_API int corio_sock_release_fd(struct corio_sock *s);

/* ---- receiving ------------------------------------------------------------- */

/* A receive buffer borrowed from the shard's provided-buffer ring. */
struct corio_buf {
	void *data;        /* the bytes; valid until corio_buf_release()   */
	size_t len;
	void *_owner;      /* private */
	unsigned _id;      /* private */
	unsigned _pad;
};

/*
 * Receive into buf: the bytes received (>= 1), 0 when the peer has closed
 * its side (half-close or close), or -errno (-ECONNRESET, -ETIMEDOUT,
 * -ECANCELED, ...). Blocking; one receiving fiber per socket at a time.
 * On a UDP socket: the next datagram's payload, as corio_recvfrom().
 */
CORIO_API ssize_t corio_recv(struct corio_sock *s, void *buf, size_t len);

/*
 * Zero-copy receive: borrow the next chunk of data in *b without copying.
 * The socket keeps a multishot receive armed on the shard's provided-buffer
 * ring; data lands in whichever buffer the kernel picks, so idle sockets
 * hold no receive memory. Returns b->len (>= 1), 0 at end of stream, or
 * -errno like corio_recv(). When the ring runs dry (-ENOBUFS from the
 * kernel) nothing is lost: the data waits in the socket, and the receive
 * waits in the shard's FIFO of starved receives (stats: starved), which
 * are armed again in the order they stopped, one per buffer that comes
 * back: a dry ring may delay a receive, never stop it. Flow control: a socket holds at
 * most its receive queue cap (corio_config.net_recv_queue, a listener's
 * recv_queue, CORIO_NET_RECV_QUEUE; default 16) received slices that
 * nobody has taken yet (one per completion, each within one ring buffer: a
 * whole buffer where the kernel does not consume buffers incrementally);
 * past that the receive stops and the data waits in the socket (the peer's
 * TCP window closes) until the reader has taken half of them, so one
 * connection that is not read cannot take the shard's ring (counted in
 * recv_capped; exact on kernels whose multishot recv takes a byte limit,
 * approximate before: docs/NET.md, "Fallbacks", has the versions). Over the per-socket caps, a shard-wide
 * budget: CORIO_NET_RECV_RESERVE percent of the ring (default 50, 0: off)
 * is kept for sockets that hold nothing (no unread buffer, no queued
 * corio_send_buf; queued corio_send_owned records hold the caller's memory,
 * not the ring's, and do not count), which can always take one buffer; a socket that holds
 * some receives only into what is free above the reserve, so unread
 * connections, however many, cannot stop a new one's receive (refusals in
 * recv_budget). Buffers a caller keeps borrowed count against the ring but
 * not against their socket. Release every borrowed buffer
 * with corio_buf_release() on this shard; it stays valid after
 * corio_close(s). Once used on a socket, corio_recv() on it copies from the
 * same stream. After a failed corio_send_buf(), data already received is
 * still handed out; the send error comes after it. Blocking.
 */
CORIO_API ssize_t corio_recv_buf(struct corio_sock *s, struct corio_buf *b);
/* corio_recv_buf() for up to max buffers: waits for the first, then takes
 * the ones already queued without waiting (to send them on with one
 * corio_sendv()). Returns how many were filled (>= 1), 0 at end of stream,
 * or -errno. Release each one. Blocking. */
CORIO_API int corio_recv_bufs(struct corio_sock *s, struct corio_buf *b, int max);
CORIO_API void corio_buf_release(struct corio_buf *b);

/* ---- sending ------------------------------------------------------------- */

/* corio_send_ex flags */
#define CORIO_SEND_ZC 0x1u /* zero-copy (IORING_OP_SEND_ZC) when the kernel and
                              socket support it, else a plain send; pays for
                              large payloads only. The kernel lets go of buf
                              only once the peer acknowledged the data, so
                              when the deadline passes or the fiber is
                              cancelled (or the shard stops) before that, the
                              connection is aborted (reset) to make it let
                              go: the call returns -ETIMEDOUT / -ECANCELED
                              and later calls on s -ECONNABORTED */
#define CORIO_SEND_MORE 0x2u /* more follows at once: MSG_MORE, so a last
                                partial TCP segment waits for the next send
                                or corio_sendfile on s and leaves with it
                                (a response head before its body). Only
                                when something follows: the kernel may hold
                                the bytes until then. */

/*
 * Send all len bytes: len, or -errno (-EPIPE, -ECONNRESET, -ETIMEDOUT,
 * -ECANCELED, ...) with nothing said about how much went out. Short writes
 * are retried. Never raises SIGPIPE. Blocking. When no other fiber is ready
 * and no SQE is queued it first tries a non-blocking sendmsg(2) on the
 * spot: when the socket buffer takes all of it, it returns without parking;
 * only the rest goes through the ring
 * (corio_sendv alike; not with CORIO_SEND_ZC; CORIO_NET_DISABLE=tcp_direct
 * turns it off).
 */
CORIO_API ssize_t corio_send(struct corio_sock *s, const void *buf, size_t len);
/* corio_send with flags; *sent (may be NULL) is how many bytes reached the
 * socket, on success and on error. */
CORIO_API ssize_t corio_send_ex(struct corio_sock *s, const void *buf, size_t len,
				unsigned flags, size_t *sent);
/* Send every byte of iov[0..iovcnt): the total, or -errno. iov is not
 * modified. *sent as for corio_send_ex. */
CORIO_API ssize_t corio_sendv(struct corio_sock *s, const struct iovec *iov, int iovcnt,
			      size_t *sent);

/*
 * Send a buffer borrowed with corio_recv_buf()/corio_recv_bufs() without
 * waiting: takes ownership of *b (cleared; do not release it), queues a
 * send of all its bytes and returns. A completion handler resubmits short
 * writes and gives the buffer back to the ring once all of it is sent or
 * the send failed. Sends leave in the order queued, one in the kernel per
 * socket: the queue's head alone, or up to 16 queued buffers gathered into
 * one SENDMSG when more were queued while a send was out (counted in
 * send_gathered; CORIO_NET_DISABLE=send_gather turns it off). When
 * nothing is queued on s, no other fiber is ready and no SQE is queued, it
 * first tries a non-blocking sendmsg(2): what the socket takes is sent on
 * the spot, the buffer back in the ring before the call returns when all
 * of it went (net stat send_direct; CORIO_NET_DISABLE=tcp_direct turns it
 * off), and only the rest is queued. The queue is bounded: with its send
 * queue cap (corio_config.net_send_queue, a listener's send_queue,
 * CORIO_NET_SEND_QUEUE; default 16) sends queued, corio_send_buf waits until one is done (like a blocking
 * send: a peer that does not read slows its writer down, and with it the
 * writer's reads; counted in send_full), within the fiber's deadline scope
 * and cancellation; outside a fiber it returns -EAGAIN. Returns 0, or
 * -errno when the direct try failed (-ECONNRESET, -EPIPE: kept as the
 * socket's send error), the socket already has a send error, was shut down for
 * writing, the shard stops, or the wait for room failed (-ETIMEDOUT,
 * -ECANCELED); the buffer is taken (released) on every error too. A
 * failed wait for room fails that call alone: none of its bytes went, the
 * buffers accepted before it (their calls returned 0) still go out, in
 * order, and later calls are not refused for it. The socket's send error
 * (the first failed send, or a partial direct send whose rest could not be
 * queued) is kept: queued sends not yet out are dropped, and it is
 * returned by the next corio_send* or corio_shutdown_write() on s, and by
 * corio_recv* once the data already received is consumed.
 * corio_send(), corio_sendv() and corio_shutdown_write() first wait until
 * the queue has drained; corio_close() waits until it has (or, when the
 * fiber is cancelled or its deadline passes, cancels what is left) so the
 * kernel holds no buffer once it returns. Shard-local; blocks only while
 * the queue is full.
 */
CORIO_API int corio_send_buf(struct corio_sock *s, struct corio_buf *b);

/* shutdown(SHUT_WR): the peer reads end of stream; receiving still works.
 * Waits only for queued sends (corio_send_buf); the shutdown itself is a
 * direct system call, which never waits. Shard-local, in a fiber. */
CORIO_API int corio_shutdown_write(struct corio_sock *s);

/* Close s and free it. Buffers borrowed from it stay valid until released.
 * Blocking (waits for a pending multishot receive's last CQE); returns 0 or
 * the close error. Data received and not yet handed out is discarded.
 * Another fiber of the shard parked in a receive on s (corio_recv,
 * corio_recv_buf(s), corio_recvfrom(_buf), a corio_select() receive item)
 * is woken with -EBADF - a copying receive whose bytes had already landed
 * in its buffer returns them instead - and close returns only once every
 * such fiber has left s and the kernel has let go of the socket (the peer
 * sees the close, a UDP port is free again). Such a fiber must not use s
 * after -EBADF: it is freed. A receive or a second close that starts while
 * the close waits returns -EBADF. Sends another fiber has in progress on s
 * are not covered: s must not be in a send of another fiber.
 * Stale handles: a closed socket's record is reused only after 64 more
 * sockets of the shard were closed, so until then a call on the old handle
 * (a second corio_close included) returns -EINVAL, "the socket was closed";
 * later the handle may name another socket, so do not keep it. */
CORIO_API int corio_close(struct corio_sock *s);

/* ---- UDP -------------------------------------------------------------- */

/* A UDP socket bound to host_port ("127.0.0.1:0" for a client). */
CORIO_API int corio_udp_bind(const char *host_port, struct corio_sock **out);
/*
 * A UDP socket connected to host_port (a numeric address or a host name,
 * resolved as corio_tcp_connect does), bound to an ephemeral port: the
 * kernel sends its datagrams to that peer and delivers only that peer's.
 * corio_send() sends one datagram (corio_sendto with addr NULL alike),
 * corio_recv() / corio_recvfrom(_buf) receive one; an ICMP "port
 * unreachable" from the peer comes back once from a receive as
 * -ECONNREFUSED. A UDP connect sends nothing, so "every address in order"
 * only skips addresses the host cannot route to (the first one it can
 * is taken; nothing says a peer listens there). Blocking only while a
 * name is resolved; 0 and *out, or -errno.
 */
CORIO_API int corio_udp_connect(const char *host_port, struct corio_sock **out);
/* Send one datagram to addr (NULL: the connected peer): len or -errno.
 * Tries a non-blocking sendmsg(2) first and returns at once when the socket
 * takes it (no park); only a full send buffer makes it send through the
 * ring and wait (net stat udp_send_again). Cancellation and the deadline
 * scope are checked first, as for every blocking call. */
CORIO_API ssize_t corio_sendto(struct corio_sock *s, const void *buf, size_t len,
			       const struct sockaddr *addr, socklen_t addrlen);
/* Receive one datagram into buf; one longer than len is truncated to len
 * (the rest is discarded, as recvfrom(2)). The sender's address goes to
 * addr/addrlen when addr is not NULL (*addrlen in: its size, out: the
 * address length). Returns the bytes stored or -errno. On a socket that
 * used corio_recvfrom_buf() the datagram comes out of the ring, and one
 * that did not fit a ring buffer is -EMSGSIZE as there. Blocking. */
CORIO_API ssize_t corio_recvfrom(struct corio_sock *s, void *buf, size_t len,
				 struct sockaddr *addr, socklen_t *addrlen);
/* Zero-copy corio_recvfrom through the provided-buffer ring (multishot
 * recvmsg where available): one datagram per buffer; release it with
 * corio_buf_release(). A buffer also holds the recvmsg header and room for
 * the sender's address, so the payload that fits is the buffer size - 144
 * bytes (16,240 with the default 16 KiB buffers; CORIO_NET_BUFS sizes
 * them). A longer datagram is not handed out cut: the call returns
 * -EMSGSIZE (the sender's address filled in, no buffer lent), the datagram
 * is dropped and counted in udp_truncated, and the next call receives the
 * next one. An empty datagram returns 0 and lends no buffer (releasing b
 * is harmless). An error such as -ECONNREFUSED (ICMP, connected socket) is
 * returned once, like corio_recvfrom(); the next call receives again.
 * Once used on a socket, corio_recvfrom() and corio_recv() on it copy the
 * next datagram's payload out of the ring. */
CORIO_API ssize_t corio_recvfrom_buf(struct corio_sock *s, struct corio_buf *b,
				     struct sockaddr *addr, socklen_t *addrlen);

/* ---- names ------------------------------------------------------------------- */

/* The addresses corio_resolve() gives at most, and connects try. */
#define CORIO_RESOLVE_MAX 8

/*
 * Resolve host_port ("host:port") into up to max addresses in addrs[],
 * in the resolver's order (RFC 6724), each an AF_INET or
 * AF_INET6 address (length: sizeof(struct sockaddr_in) or sockaddr_in6)
 * with port set. Returns how many were stored (1..max; at most
 * CORIO_RESOLVE_MAX), or -errno.
 *
 * Numeric input ("10.0.0.1:80", "[::1]:80") gives its one address
 * without a lookup, on any thread. A host name needs a fiber (-EPERM off
 * one) and is looked up on the shard with c-ares, no thread per lookup,
 * from the sources /etc/nsswitch.conf's "hosts:" line lists, in its order:
 * files (/etc/hosts) and dns (resolv.conf's servers, search list, ndots,
 * timeout, attempts) are c-ares's; at the first other source (mdns,
 * myhostname, ...) that is reached without an answer, the name goes to
 * getaddrinfo(3) as a job on the blocking-work pool (corio/work.h;
 * -EAGAIN when cfg.work_queue jobs wait), the only lookups that take a
 * pool thread (CORIO_NET_DISABLE=dns sends every lookup there).
 * IPv4 and IPv6 are both asked for; the addresses come sorted by RFC 6724
 * as getaddrinfo sorts them. Lookups of one name on one shard at once
 * share one query. Bounded by the deadline scope and cancellation
 * (-ETIMEDOUT, -ECANCELED at once, however long DNS takes, also while a
 * pool job waits for a thread; the query or job goes on and frees its
 * own memory). A name with a byte other than letters, digits, '-', '_'
 * and dots between non-empty labels is -ENOENT without a lookup; an
 * inet_aton form ("127.1") is its number.
 *
 * Each shard caches answers: 256 names, the oldest stored evicted first.
 * A DNS answer is kept for the lowest TTL of its records, at most
 * cfg.resolve_ttl_ms (30 s), and not at all for a TTL of 0; an answer
 * from /etc/hosts or getaddrinfo (no TTL) for cfg.resolve_ttl_ms; "no such
 * name" min(that, 5 s), returned again as -ENOENT. Counted in net stats
 * resolve_hits / resolve_misses / resolve_failed / resolve_shared /
 * resolve_pool.
 *
 * Errors, each with corio_last_error() naming the host and the resolver's
 * text (c-ares's or gai_strerror): -ENOENT the name has no address
 * (NXDOMAIN, no A or AAAA record; EAI_NONAME, EAI_NODATA, EAI_ADDRFAMILY;
 * a malformed name); -EAGAIN DNS could not answer now (no server answered
 * within resolv.conf's timeout and attempts, refused, SERVFAIL; EAI_AGAIN;
 * not cached); -ENOMEM; EAI_SYSTEM's errno; -EIO anything else.
 * -EINVAL for bad input: NULL arguments, max 0, no ':port', an empty or
 * "*" host, a port that is not 0..65535, an unbracketed IPv6 address, a
 * host over 255 bytes.
 */
CORIO_API int corio_resolve(const char *host_port, struct sockaddr_storage *addrs,
			    unsigned max);

/* ---- socket details ---------------------------------------------------------- */

CORIO_API int corio_sock_fd(const struct corio_sock *s);
CORIO_API int corio_sock_local_addr(struct corio_sock *s, struct sockaddr_storage *addr,
				    socklen_t *len);
CORIO_API int corio_sock_peer_addr(struct corio_sock *s, struct sockaddr_storage *addr,
				   socklen_t *len);
/* setsockopt(2)/getsockopt(2) pass-through: 0 or -errno. */
CORIO_API int corio_setsockopt(struct corio_sock *s, int level, int name, const void *val,
			       socklen_t len);
CORIO_API int corio_getsockopt(struct corio_sock *s, int level, int name, void *val,
			       socklen_t *len);

/* ---- stats ------------------------------------------------------------------ */

/* One shard's network counters; written by the shard, readable from any
 * thread without tearing (a snapshot is not atomic as a whole). New
 * counters are added at the end. */
struct corio_net_stats {
	uint64_t accepts;      /* connections accepted                          */
	uint64_t connects;     /* outgoing connections established              */
	uint64_t conns_live;   /* stream sockets open now                       */
	uint64_t bytes_in;     /* bytes received                                */
	uint64_t bytes_out;    /* bytes sent                                    */
	uint64_t ops_in;       /* receive completions with data                 */
	uint64_t ops_out;      /* send completions                              */
	uint64_t enobufs;      /* multishot receives stopped by an empty ring   */
	uint64_t rearms;       /* multishot receives/accepts armed again        */
	uint64_t bufs_out;     /* provided buffers out of the ring now          */
	uint64_t dispatched;   /* connections this shard handed to a shard      */
	uint64_t adopted;      /* connections handed to this shard              */
	uint64_t err_reset;    /* ECONNRESET                                    */
	uint64_t err_pipe;     /* EPIPE                                         */
	uint64_t err_refused;  /* ECONNREFUSED                                  */
	uint64_t err_timeout;  /* ETIMEDOUT (deadline or TCP)                   */
	uint64_t err_fd_limit; /* EMFILE / ENFILE on accept (backed off)        */
	uint64_t err_other;    /* every other error, cancellation excluded      */
	uint64_t recv_capped;  /* receives stopped: the socket held its cap of
	                          unread buffers (net_recv_queue)              */
	uint64_t send_full;    /* corio_send_buf calls that met a full queue
	                          (net_send_queue) and waited                  */
	uint64_t recv_hup;     /* multishot receives stopped by the socket's
	                          error/hang-up poll                            */
	uint64_t conns_refused; /* accepted connections closed at once: the
	                          listener's max_conns was reached             */
	uint64_t send_gathered; /* corio_send_buf records that went out in one
	                          send together with the one before them        */
	uint64_t udp_send_again; /* corio_sendto datagrams the socket's full send
	                          buffer refused at once: sent through the ring  */
	uint64_t send_direct;  /* TCP sends (corio_send, corio_sendv,
	                          corio_send_buf) the socket took, all or part,
	                          in a direct sendmsg(2): no SQE, no park       */
	uint64_t udp_truncated; /* datagrams longer than a ring buffer's payload
	                          room: dropped, -EMSGSIZE to the receiver      */
	uint64_t recv_budget;  /* stream receives refused or stopped by the
	                          shard-wide budget: the socket held buffers
	                          and the ring was down to its reserve
	                          (CORIO_NET_RECV_RESERVE)                      */
	uint64_t resolve_hits; /* host names answered from the shard's name
	                          cache (negative answers too)                  */
	uint64_t resolve_misses; /* host names looked up (not in the cache):
	                          c-ares on the shard or getaddrinfo on the
	                          work pool                                     */
	uint64_t resolve_failed; /* resolutions that failed: no such name
	                          (cached or not), resolver errors, pool full;
	                          not a deadline or cancel                      */
	uint64_t starved;      /* stream and datagram receives waiting now for a
	                          free ring buffer (an empty ring or the budget
	                          stopped them): each is armed again, in the
	                          order it stopped, as buffers return           */
	uint64_t starved_armed; /* starved receives armed again as buffers
	                          returned (part of rearms)                     */
	uint64_t resolve_shared; /* lookups that joined a query another fiber
	                          of the shard had in flight for the same name
	                          (part of resolve_misses)                      */
	uint64_t resolve_pool; /* lookups answered by getaddrinfo on the work
	                          pool: c-ares cannot ask a source nsswitch.conf
	                          lists, or CORIO_NET_DISABLE=dns (part of
	                          resolve_misses)                               */
};

/* Copy a snapshot of shard's net counters. Any thread while the runtime
 * runs; rt may be NULL on a shard (its own runtime). 0, -EINVAL or -EPERM. */
CORIO_API int corio_net_stats_get(struct corio_rt *rt, unsigned shard,
				  struct corio_net_stats *out);

/* ---- owned-buffer sends, the send queue, sendfile ----------------------------- */

/*
 * Send len bytes of a buffer the caller owns without waiting for them to go
 * out, so a connection can receive its next request while the reply to the
 * last one is still being sent. The buffer joins the socket's one send
 * queue, behind the corio_send_buf buffers queued before it and before
 * every later send (corio_send, corio_sendv, corio_sendfile and
 * corio_shutdown_write wait for the queue to drain first), so the bytes
 * leave in the order the calls were made; queued buffers are gathered into
 * one SENDMSG as for corio_send_buf. The caller must leave buf unchanged
 * and allocated until done runs.
 *
 * The buffer is handed back through one mechanism: done(arg, res) runs
 * exactly once for every call that returned 0, on this shard's loop (not
 * in a fiber, and never inside corio_send_owned itself), once the kernel
 * no longer references buf. res is len when every byte was sent, else
 * -errno: the socket's send error (-EPIPE, -ECONNRESET, ...; a record
 * partly sent when it came gets it too), or -ECANCELED when the queue was
 * dropped before the bytes went (corio_close() cut short by its fiber's
 * cancellation or deadline, the shard's shutdown, an earlier record's
 * error). done must not block (blocking calls return -EPERM off a fiber);
 * it may free buf, post, wake a fiber, or queue the next
 * corio_send_owned on any socket (on a full queue that returns -EAGAIN
 * there). done may be NULL (a static buffer).
 *
 * The queue's cap (corio_config.net_send_queue, ...) counts these records
 * too: a call on a full queue waits for room within the fiber's deadline
 * scope and cancellation, as corio_send_buf does (-EAGAIN outside a
 * fiber). There is no direct sendmsg(2) try on the spot (unlike
 * corio_send_buf): the bytes always go through the ring, one SQE shared
 * with the loop's next submit, so done always runs from the loop.
 * corio_close() waits for queued records to go out (or, when its fiber is
 * cancelled or its deadline passes, drops them: done gets -ECANCELED), and
 * the shard's stop drops what is left: no done is lost at shutdown.
 *
 * Returns 0 (done will run), or -errno and done never runs: -EINVAL (buf
 * NULL, len 0 or over INT32_MAX, not a stream socket), the socket's send
 * error, -EPIPE after corio_shutdown_write(), -ECANCELED when the shard
 * stops, -ETIMEDOUT / -ECANCELED / -EAGAIN from the wait for room,
 * -ENOMEM. Shard-local; blocks only while the queue is full.
 */
CORIO_API int corio_send_owned(struct corio_sock *s, const void *buf, size_t len,
			       void (*done)(void *arg, int res), void *arg);

/*
 * The bytes waiting to go out on s: returns the bytes in corio's send
 * queue (corio_send_owned and corio_send_buf records) whose send has not
 * completed yet - bytes in a send the kernel is working on count until its
 * completion - or -errno. 0 once the queue is empty. When kernel is not
 * NULL, *kernel is the socket's own send queue as SIOCOUTQ reports it: for
 * TCP the bytes written to the socket and not yet acknowledged by the peer
 * (sent or not); the two do not overlap, and their sum is what the peer
 * has not confirmed. Does not block; shard-local.
 */
CORIO_API ssize_t corio_sock_queued(struct corio_sock *s, size_t *kernel);

/*
 * Send len bytes of the regular file fd, from offset off, on the stream
 * socket s, without copying them through user space where the backend
 * allows: on io_uring, a file of at most a pipeful whose pages are all in
 * the page cache (cachestat(2), 6.5+) by sendfile(2) on the spot with
 * readiness waits (no read can wait for the disk; CORIO_NET_DISABLE=cached
 * turns this off); otherwise an IORING_OP_SPLICE file -> pipe (the file's reads
 * run on the kernel's workers, never blocking the shard) and a
 * non-blocking splice(2) pipe -> socket with readiness waits, through the
 * shard's pipe pool (CORIO_NET_PIPE_SIZE); on the epoll fallback,
 * sendfile(2) with readiness waits (a page-cache miss blocks the shard for
 * the read); where neither (CORIO_NET_DISABLE=splice on io_uring), a copy
 * through a 64 KiB buffer. The first two set O_NONBLOCK on s's fd for
 * good (corio's other calls do not depend on it; corio_sock_release_fd
 * hands the fd back with it). fd's file position is not used or moved.
 * Queued corio_send_buf / corio_send_owned records go out first.
 * Returns the bytes sent: len, or fewer when the file ends first (0 at or
 * past its end, or for len 0); or -errno, with nothing said about how much
 * went out: -EBADF (fd not open), -EINVAL (not a regular file: a device
 * such as /dev/zero, a FIFO, a directory, a socket; off negative; s not a
 * stream socket; these three with a message naming the call and nothing
 * sent), -EPIPE, -ECONNRESET, -ETIMEDOUT /
 * -ECANCELED (the deadline scope or cancellation cut it short: the stream
 * may end mid-file; close the connection). Blocking.
 */
CORIO_API ssize_t corio_sendfile(struct corio_sock *s, int fd, off_t off, size_t len);

#ifdef __cplusplus
}
#endif

#endif
