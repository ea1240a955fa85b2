/* SPDX-License-Identifier: MIT */
/*
 * net/internal.h - what the files of net/ share: the per-shard net part, the
 * socket and listener records, the uninterruptible park used while the
 * kernel still holds a socket's memory (corio__net_park_until), and the
 * calls between net's files, grouped by the file that defines them:
 * net/shard.c (the part), net/recv.c (receive buffers and the receive
 * path), net/send.c, net/sock.c (the record, close), net/listen.c.
 *
 * net/ owns TCP, UDP and Unix sockets: listen (SO_REUSEPORT per shard),
 * multishot accept, connect, receive (multishot, provided buffers), send
 * (zero-copy option), close, address parsing. May include: core/, timer/,
 * uring/ and the public headers; never fs/ or ctl/. Not installed.
 */
#ifndef CORIO_NET_INTERNAL_H
#define CORIO_NET_INTERNAL_H

#include "core/internal.h"
#include "uring/internal.h"

#include <netinet/in.h>
#include <sys/socket.h>

/* net's slot in s->parts[] (core/internal.h; ctl/ctl.c fills the table) */
#define CORIO__PART_NET (CORIO__PART_FIRST_AREA + 0)

/* A buffer id as net hands it around (corio_buf._id, slices, send
 * records): the ring's id, with CORIO__NET_DRING set for the datagram ring
 * (net->dbufs). */
#define CORIO__NET_DRING (1u << 16)

/* What a buffered UDP receive keeps in front of the payload in each ring
 * buffer: the multishot recvmsg header and room for a sockaddr_storage
 * (net/udp.c). A datagram fits if it is at most the buffer size - this. */
#define CORIO__NET_DGRAM_HDR (16u + 128u)

/* Bytes received into a provided buffer and not yet handed out: one per
 * receive CQE, queued on its socket; each holds one reference to its buffer
 * (uring/bufring.c). From the net part's pool. */
struct corio__slice {
	struct corio__slice *next;
	uint32_t id;  /* buffer id (CORIO__NET_DRING: datagram ring) */
	uint32_t off; /* where the bytes start in the buffer */
	uint32_t len;
};

/* A multishot (or re-armed single-shot) stream op's state. */
enum {
	NET_IDLE = 0,  /* nothing in the kernel              */
	NET_ARMED,     /* in the kernel                       */
	NET_CANCELING, /* cancel queued, final CQE pending    */
};

struct corio__net;

/* A long-lived receive or accept op; on net->armed while in the kernel, so
 * shutdown can cancel it. */
struct corio__mshot {
	struct corio__link link;
	struct corio__op op;
	uint8_t state; /* NET_* */
};

/* A queued asynchronous send of a borrowed buffer (corio_send_buf); from
 * the shard's pool. Only a socket's queue head is ever in the kernel. */
struct corio__srec {
	struct corio__op op;
	struct corio__srec *next;
	struct corio_sock *s;
	const char *p;   /* the bytes */
	uint32_t off, len;
	unsigned bid;
	bool gathered;   /* went out in a SENDMSG behind another record */
	bool owned;      /* corio_send_owned: the caller's bytes, no bid */
	int32_t res;     /* owned: what done gets (len, or -errno) */
	void (*done)(void *arg, int res); /* owned: may be NULL */
	void *arg;
};

/* Shards least-loaded dispatch tracks; beyond: round robin. */
#define CORIO__NET_TRACK 256

/* Idle pipes a shard keeps for corio_sendfile; more are made (and closed
 * after) when more sendfiles run at once. */
#define CORIO__NET_PIPES 32

/* At most this many queued corio_send_buf records go out in one send. */
#define CORIO__SEND_GATHER 16

/* A socket's flow-control caps: received slices it may hold unread (recv),
 * corio_send_buf records it may queue (send). The shard's come from
 * cfg.net_recv_queue / net_send_queue or CORIO_NET_RECV_QUEUE /
 * CORIO_NET_SEND_QUEUE (net/shard.c); a listener's recv_queue /
 * send_queue replace them for the sockets it accepts. */
struct corio__qcaps {
	uint16_t recv, send;
};

struct corio_sock {
	struct corio__net *net;
	uint64_t rx, tx;  /* stream bytes handed to the caller / sent (corio_sock_bytes) */
	int fd;
	int family, type;
	bool live;        /* counted in conns_live */
	bool buffered;    /* receives go through the provided-buffer ring */
	struct corio__qcaps cap; /* this socket's queue caps */

	/* receive stream through the buffer ring */
	struct corio__mshot r;
	bool has_term;    /* rterm holds end of stream (0) or an error */
	bool starved;     /* on net->starved: armed again when a buffer returns */
	int32_t rterm;
	struct corio__slice *qhead, *qtail; /* received, not yet handed out */
	uint32_t qoff;         /* bytes of the head slice already consumed */
	uint32_t rtag;         /* 0, or CORIO__NET_DRING: the ring it receives into */
	unsigned ubid;         /* user-mode buffer of a pending single-shot recv */
	struct msghdr rmsg;    /* multishot recvmsg template (UDP) */
	uint16_t qcount;       /* slices queued, not yet handed out */
	bool capped;           /* receive stopped: qcount reached cap.recv */
	bool r_limited;        /* r armed with a byte limit (recv.c mshot_limit) */
	bool slow;             /* capped without a limit: single-shot receives */
	uint16_t promise;      /* buffers r may still take under the budget */
	/* stream sockets with a multishot recv: a one-shot poll for
	 * POLLERR|POLLHUP|POLLRDHUP beside it, because the kernel can miss the
	 * multishot's final CQE after a reset (see net/recv.c) */
	struct corio__mshot h;
	bool hup;              /* the poll fired: receive with single shots */
	struct corio_waitq rwq;      /* the fiber waiting for data */
	/* The buffer of the corio_recv_buf(s) parked on rwq while the queue
	 * is empty: the next bytes go straight into it (recv.c hand()). */
	struct corio_buf *rdirect;
	struct corio_fiber *closer;  /* fiber waiting for rop's last CQE */
	/* corio_close() with receives parked on s: it marks s closing, wakes
	 * them (-EBADF) and waits until every one has left (readers == 0) */
	bool closing;
	uint16_t readers;      /* fibers (or select stand-ins) parked receiving */
	struct corio__link uops; /* corio__sock_uop: copying receives in the kernel */
	struct corio__link starved_link;
	struct corio_sock *free_next;
	bool dead;             /* closed: in the pool's quarantine (stale handles get -EINVAL) */

	/* asynchronous sends (corio_send_buf): a FIFO whose first records are in
	 * the kernel as one send (several buffers gathered in one SENDMSG) */
	struct corio__srec *sq_head, *sq_tail;
	struct corio__srec srec1; /* the record of a corio_send_buf into an empty queue */
	struct iovec siov[CORIO__SEND_GATHER]; /* the in-flight SENDMSG's buffers */
	struct msghdr smsg;
	bool sq_cancel;        /* cancel queued: drop the rest at the head's CQE */
	bool wr_shut;          /* corio_shutdown_write done */
	bool nonblock;         /* O_NONBLOCK set (corio__sock_nonblock: splice, sendfile) */
	int32_t serr;          /* the first send error, sticky */
	uint16_t sq_count;     /* records queued (at most cap.send) */
	uint16_t sq_owned;     /* of those, corio_send_owned ones: no ring buffer */
	struct corio_waitq swq;      /* fibers waiting for the queue to drain */
	struct corio_waitq sroom;    /* corio_send_buf callers waiting for room */
	struct corio__link send_link; /* on net->sending while queued */
};

struct corio_listener {
	struct corio__net *net;
	int fd;
	int family;
	struct corio__mshot a;
	bool backoff;      /* a transient error stopped accepting: wait, re-arm */
	bool armed_once;
	unsigned backoff_ms;
	int aterm;         /* a fatal accept error, sticky */
	unsigned max_conns; /* corio_listen_opts.max_conns, 0: no limit  */
	struct corio__qcaps cap; /* its sockets' caps (opts or the shard's) */
	int fault_err;     /* test hook CORIO_NET_ACCEPT_FAULT: the next */
	unsigned fault_n;  /* fault_n accepts fail with -fault_err       */
	int *q;            /* accepted fds not yet returned */
	unsigned qhead, qlen, qcap;
	struct corio_waitq wq;  /* the accepting fiber */
	struct corio__link lnode; /* on the shard's listeners (corio_drain) */
	struct corio_fiber *closer;
	bool closing;           /* corio_listener_close has begun: accepts get -EBADF */
	uint16_t acceptors;     /* fibers inside corio_accept (the closer waits for 0) */
	char path[108];    /* Unix: the file to remove on close ... */
	dev_t path_dev;    /* ... if it is still this one */
	ino_t path_ino;
};

struct corio__net {
	struct corio__shard *shard;
	struct corio_net_stats stats;
	struct corio__bufring bufs;  /* stream receives (incremental if it can) */
	struct corio__bufring dbufs; /* datagrams, when bufs is incremental */
	unsigned long lent_at_fini;  /* slices still lent out when the shard ended */
	bool bufs_ready, dbufs_ready;
	bool multishot_recv;   /* probed: multishot recv accepted */
	bool multishot_accept;
	bool multishot_recvmsg;
	bool send_zc;
	bool stopping;
	struct corio__qcaps cap; /* new sockets' queue caps (config, env) */
	uint8_t cap_env;       /* bits 0/1: CORIO_NET_RECV/SEND_QUEUE set: listeners keep them */
	unsigned reserve_pct;  /* CORIO_NET_RECV_RESERVE: % of a ring kept for
	                          stream sockets that hold nothing */
	unsigned nstarved;     /* sockets on starved (stats.starved) */
	unsigned reserve_bufs; /* reserve_pct of the stream ring, in buffers */
	unsigned reserve_dbufs; /* and of the datagram ring */
	unsigned promised;     /* sum of the armed stream receives' promise */
	bool recv_limit;       /* multishot recv takes a byte limit (until -EINVAL) */
	bool send_gather;      /* queued records go out together (CORIO_NET_DISABLE=send_gather) */
	bool udp_direct;       /* corio_sendto tries sendmsg(2) first (net/udp.c) */
	bool send_direct;      /* corio_send/sendv try sendmsg(2) first (net/send.c) */
	unsigned udp_eagain_test; /* CORIO_NET_UDP_EAGAIN: direct tries to refuse */
	unsigned tcp_short_test;  /* CORIO_NET_TCP_SHORT: bytes a direct TCP send
	                             may take at most (forces short writes) */
	size_t send_max;          /* the same as a cap: SIZE_MAX when it is 0 */
	uint32_t disabled;        /* CORIO_NET_DISABLE, bits NO_* below */
	unsigned nbufs, bufsz;    /* receive rings (CORIO_NET_BUFS=count:size) */
	int accept_fault_err;     /* CORIO_NET_ACCEPT_FAULT=errno:count, copied */
	unsigned accept_fault_n;  /* into each new listener                     */
	struct corio__slice *slice_free; /* slice pool */
	void *slice_chunks;              /* its chunks, freed at fini */
	struct corio__link starved; /* sockets waiting for a free buffer */
	struct corio__link armed;   /* corio__mshot ops in the kernel */
	struct corio__link listeners; /* every open listener (corio_drain) */
	bool draining;              /* corio_drain(): accepts end with -ESHUTDOWN */
	struct corio_sock *sock_free, *sock_free_tail; /* FIFO: a quarantine */
	unsigned nsock_free;
	struct corio__link sending; /* sockets with queued sends */
	struct corio__srec *srec_free;
	unsigned nsrec_free;
	/* accept-and-dispatch's hand-offs (net/dispatch.c), by shard index
	 * below CORIO__NET_TRACK: connections this shard handed to shard i,
	 * and hand-offs from shard i this shard took (written here, read by
	 * the dispatching shard) */
	uint64_t handed_to[CORIO__NET_TRACK];
	uint64_t taken_from[CORIO__NET_TRACK];
	/* buffered streams (net/stream.c) open on this shard and the bytes of
	 * their buffers, for the leak census */
	unsigned long streams_live;
	unsigned long stream_bytes;
	struct corio__resolve *resolve; /* the name cache (net/resolve.c), on first use */
	struct corio__dns *dns;         /* c-ares's channels (net/dns.c), on first use */
	/* corio_sendfile (net/send.c): IORING_OP_SPLICE through pipes from
	 * this pool (net/shard.c), sized pipe_size (CORIO_NET_PIPE_SIZE) */
	bool splice;              /* probed, and not CORIO_NET_DISABLE=splice */
	bool sendfile_cached;     /* cached files by sendfile(2) inline (not =cached) */
	bool sendfile_now;        /* no SPLICE and no ring READ: sendfile(2) (net/shard.c) */
	unsigned pipe_size;       /* bytes a pooled pipe holds (F_GETPIPE_SZ) */
	unsigned npipes;          /* idle pipes in pipes[] */
	unsigned pipes_out;       /* pipes a sendfile holds now (the census) */
	int pipes[CORIO__NET_PIPES][2];
};

#define CORIO__CONTAINER(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))

/* The calling shard's net part, or NULL off-shard. */
static inline struct corio__net *corio__net(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s ? s->parts[CORIO__PART_NET] : NULL;
}

/* Check that obj belongs to this shard: its net part, or NULL. */
static inline struct corio__net *corio__net_owner(struct corio__net *n)
{
	return n && n == corio__net() ? n : NULL;
}

/* s belongs to the calling shard and is not closed: its net part, or NULL. */
static inline struct corio__net *corio__sock_owner(const struct corio_sock *s)
{
	/* corio__net_owner(s->net), shorter: a socket's net is set when it
	 * is made, and a net is its shard's one net part */
	return s && !s->dead && s->net->shard == corio__tl_shard ? s->net : NULL;
}

/* A call on obj (a socket or listener) that failed the owner check: -EINVAL
 * when obj is NULL, else -EPERM (obj belongs to another shard, or the
 * caller is not on a shard) through corio__misuse: a message naming who
 * (corio_last_error) in release builds, an abort in debug builds. */
static inline int corio__net_not_mine(const char *who, const void *obj, const char *what)
{
	if (!obj)
		return corio__error(-EINVAL, "%s: the %s is NULL", who, what);
	/* another shard's object: API misuse (docs/DESIGN.md, "Rules written
	 * once"), as for a TLS session */
	return corio__misuse(-EPERM, who, "the %s belongs to another shard, or the caller is "
			     "not on a shard", what);
}

/* The error for a socket call on s that corio__sock_owner() refused: NULL,
 * closed (a stale handle still in the quarantine), or another shard's. */
static inline int corio__sock_not_mine(const char *who, const struct corio_sock *s)
{
	if (s && s->dead)
		return corio__error(-EINVAL, "%s: the socket was closed (a stale handle)", who);
	return corio__net_not_mine(who, s, "socket");
}

/* CORIO_NET_DISABLE's words as bits of net->disabled (net/shard.c parses
 * them): forced fallbacks for tests and A/B runs. */
enum { NO_BUFRING, NO_PBUF_INC, NO_MULTISHOT, NO_SEND_ZC, NO_RECV_LIMIT, NO_SEND_GATHER,
       NO_UDP_DIRECT, NO_TCP_DIRECT, NO_SPLICE, NO_CACHED, NO_DNS };

static inline bool corio__net_disabled(const struct corio__net *n, unsigned what)
{
	return n->disabled >> what & 1;
}

/* ---- net/shard.c: the part ----------------------------------------------- */

extern const struct corio__part corio__net_part;

/* Count an error in the stats by kind. Returns err. */
int corio__net_err(struct corio__net *n, int err);

/* Park, not interruptible by cancellation, until *done is true (the caller's
 * CQE handler sets it and readies the fiber). */
void corio__net_park_until(bool (*done)(void *), void *arg);

/* ---- net/recv.c: receive buffers and the receive path -------------------- */

/* Set up the shard's stream buffer ring on first use: 0 or -errno. */
int corio__net_bufs(struct corio__net *n);
/* The ring datagrams go to, set up on first use: its tag (0: net->bufs, which
 * is not incremental; CORIO__NET_DRING: net->dbufs), or -errno. */
int corio__net_dbufs(struct corio__net *n);
/* At the part's fini: count the slices still lent (for the census), give
 * the rings back to the kernel, free the slice pool. */
void corio__net_bufs_fini(struct corio__net *n);

static inline struct corio__bufring *corio__net_ring(struct corio__net *n, uint32_t id)
{
	return id & CORIO__NET_DRING ? &n->dbufs : &n->bufs;
}

static inline void *corio__net_slice_data(struct corio__net *n, const struct corio__slice *q)
{
	return (char *)corio__bufring_addr(corio__net_ring(n, q->id), q->id & 0xffffu) + q->off;
}

/* Put one reference to buffer id (a slice's, a corio_buf's); the ring
 * keeps the bufs_out stat. */
static inline void corio__net_buf_put(struct corio__net *n, uint32_t id)
{
	corio__bufring_put(corio__net_ring(n, id), id & 0xffffu);
}

/* Give b's buffer back to n's ring and empty b: it lends nothing now. */
static inline void corio__net_buf_give_back(struct corio__net *n, struct corio_buf *b)
{
	corio__net_buf_put(n, b->_id);
	b->_owner = NULL;
	b->data = NULL;
	b->len = 0;
}

/* The part's poll: re-arm receives an empty ring (or the budget) stopped.
 * The number armed. */
unsigned corio__net_recv_poll(struct corio__shard *sh);

/* The completion handlers of s->r (the receive) and s->h (the hang-up
 * poll beside it); corio__sock_new() installs them. */
void corio__sock_recv_cb(struct corio__op *op, int32_t res, uint32_t flags);
void corio__sock_hup_cb(struct corio__op *op, int32_t res, uint32_t flags);

/* corio_drain() reached this shard: every listener stops accepting (listen.c) */
void corio__listeners_drain(struct corio__net *n);

/* Queue a receive on s (multishot where possible): 0 or -errno. */
int corio__sock_arm(struct corio_sock *s);
/* Take s off net->starved (it is on it). */
void corio__sock_unstarve(struct corio_sock *s);
/* Park until s has queued data (stream bytes or datagrams) or a terminal
 * result, arming its receive as needed: 0, or -errno (-EBUSY if another
 * fiber is already receiving on s). */
int corio__sock_wait_data(struct corio_sock *s);

/* Set the parts of s->srec1 that never change (corio__sock_new). */
void corio__sock_send_init(struct corio_sock *s);

/* Take the head slice off s's receive queue (the caller keeps its
 * reference or puts it) and return the record to the pool. */
void corio__sock_q_pop(struct corio_sock *s);

/* A copying receive's kernel op (into the caller's buffer), on s->uops
 * while it is in the kernel, so corio_close() can cancel it. On the
 * receiving fiber's stack. */
struct corio__sock_uop {
	struct corio__link link;
	struct corio__op *op;
};

/* Wait for a copying receive's op begun on s (corio__op_begin): its result,
 * or -EBADF when corio_close(s) cancelled it (s is gone: do not touch it). */
int corio__sock_op_wait(struct corio_sock *s, struct corio__op *op);
/* A fiber (or select stand-in) parked receiving on s has left: wakes a
 * closer waiting for the last one. */
void corio__sock_reader_leave(struct corio_sock *s);

/* Copy up to len queued bytes of s's receive stream into buf: the count,
 * or s's end-of-stream / error result when nothing is queued and the
 * stream has ended. Call only when data is queued or has_term is set. */
ssize_t corio__sock_take(struct corio_sock *s, void *buf, size_t len);

/* ---- net/resolve.c, net/dns.c: names ----------------------------------------- */

union corio__res_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
};

/* One name's answer, from c-ares or getaddrinfo: its addresses with port 0
 * in the order connects try them, or why there are none. */
struct corio__res_ans {
	int err;         /* 0; -ENOENT no such name (a negative answer, cached);
	                    else a failure that is not an answer (-EAGAIN: no
	                    server answered; -ENOMEM, -EIO), not cached */
	uint32_t ttl_s;  /* the records' lowest TTL; UINT32_MAX: none given
	                    (the hosts file, getaddrinfo) */
	unsigned naddrs;
	union corio__res_addr addrs[CORIO_RESOLVE_MAX];
	char msg[96];    /* the resolver's words for err */
};

/* corio__dns_lookup's *flags */
#define CORIO__RES_DNS    0x1u /* DNS was asked (the answer has a TTL) */
#define CORIO__RES_SHARED 0x2u /* it joined a query another fiber started */

/* Look host (a name, not numeric) up on this shard with c-ares, in
 * nsswitch.conf's order of files and dns: 0 and *ans (its err says
 * whether there is an answer), -ETIMEDOUT / -ECANCELED (the fiber's
 * deadline or cancel: the query goes on for the others), -ENOMEM, or
 * -ENOSYS: c-ares cannot answer here (CORIO_NET_DISABLE=dns, c-ares did
 * not start, or nsswitch.conf lists a source it cannot read and the ones
 * before it had no answer): ask getaddrinfo. Blocking. */
int corio__dns_lookup(struct corio__net *n, const char *host, struct corio__res_ans *ans,
		      unsigned *flags);
/* At the part's fini, no fiber left: close c-ares's channels. */
void corio__dns_fini(struct corio__net *n);

/* ---- net/serve.c -------------------------------------------------------------- */

struct corio_tls_ctx;
struct corio_stream;
struct corio_stream_opts;
/* corio_stream_tls_accept, set by tls/ctx.c when it makes a context (net
 * may not call tls by name; a program without TLS then links no OpenSSL). */
typedef int (*corio__serve_tls_fn)(struct corio_tls_ctx *ctx, struct corio_sock *s,
				   const struct corio_stream_opts *opts, struct corio_stream **out);
extern _Atomic(corio__serve_tls_fn) corio__serve_tls_accept;
/* corio_stream_tls_connect, for net/pool.c: the same arrangement. */
typedef int (*corio__pool_tls_fn)(struct corio_tls_ctx *ctx, struct corio_sock *s,
				  const char *host, const struct corio_stream_opts *opts,
				  struct corio_stream **out);
extern _Atomic(corio__pool_tls_fn) corio__pool_tls_connect;

/* ---- net/send.c ------------------------------------------------------------ */

/* Cancel s's queued sends (the head's final CQE drops the rest). */
void corio__sock_send_cancel(struct corio_sock *s);

/* ---- net/sock.c, net/listen.c ---------------------------------------------- */

/* A socket record from the shard's pool. */
struct corio_sock *corio__sock_new(struct corio__net *n, int fd, int family, int type);
void corio__sock_free(struct corio_sock *s);
/* Make s's fd O_NONBLOCK for good (once; s->nonblock): 0 or -errno. */
int corio__sock_nonblock(struct corio_sock *s);

/* The next accepted fd of l (owned by the caller), or -errno. Blocking. */
int corio__accept_fd(struct corio_listener *l);

/* ---- net/addr.c and net/resolve.c ------------------------------------------- */

/* The dotted quad of len bytes at s (no NUL needed), read exactly as
 * inet_pton(AF_INET) reads it: 1 and *out, or 0. */
int corio__ipv4_parse(const char *s, size_t len, struct in_addr *out);

/* corio_resolve() with who naming the public call in messages: "host:port"
 * to up to max addresses (numeric: one, no lookup), or -errno. */
int corio__resolve_hp(const char *who, const char *hp, struct sockaddr_storage *out,
		      unsigned max);
/* sizeof(struct sockaddr_in) or sockaddr_in6, by ss's family. */
socklen_t corio__addr_len(const struct sockaddr_storage *ss);
/* At the part's fini: free the shard's name cache. */
void corio__resolve_fini(struct corio__net *n);
/* ---- owned sends and sendfile (net/send.c, net/shard.c) -------------------- */

/* A pipe for corio_sendfile's splices: from the pool, else a new one sized
 * n->pipe_size. 0 and p[0] (read end), p[1] (write end), or -errno. */
int corio__net_pipe_get(struct corio__net *n, int p[2]);
/* Give a pipe back: to the pool when it is empty (clean) and there is
 * room, else closed. */
void corio__net_pipe_put(struct corio__net *n, int p[2], bool clean);

/* What sendfile can send: fd is an open regular file. 0, or -EBADF (not
 * an open fd) / -EINVAL (a device, FIFO, directory, socket, ...) with a
 * message naming who. One fstat(2): every sendfile path asks this once per
 * call, corio_sendfile and corio_stream_sendfile alike. */
int corio__sendfile_fd(int fd, const char *who);
/* corio_sendfile for a caller that has asked corio__sendfile_fd already
 * (corio_stream_sendfile's plain transport): no second fstat. */
ssize_t corio__sendfile_checked(struct corio_sock *s, int fd, off_t off, size_t len);

/* The copying way from a file to a writer: read len bytes of fd from off
 * (corio__file_read, core/fileio.c: the page cache on the spot, else the
 * ring's READ, else the blocking-work pool) into a buffer
 * and hand each piece to write(ctx, buf, len), which returns len or
 * -errno (corio_send's contract). For transports that need the bytes
 * (TLS) and for corio_sendfile where nothing better exists. The bytes
 * written (fewer than len only at end of file) or -errno. Blocking. */
ssize_t corio__file_copy(int fd, off_t off, size_t len,
			 ssize_t (*write)(void *ctx, const void *buf, size_t len), void *ctx);

#endif
