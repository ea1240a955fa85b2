/* SPDX-License-Identifier: MIT */
/*
 * net/internal.h - what the files of net/ share: the per-shard net part, the
 * socket and listener records, the uninterruptible park used while the
 * kernel still holds a socket's memory (corio__net_park_until).
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
};

/* Shards least-loaded dispatch tracks; beyond: round robin. */
#define CORIO__NET_TRACK 256

/* At most this many queued corio_send_buf records go out in one send. */
#define CORIO__SEND_GATHER 16

struct corio_sock {
	struct corio__net *net;
	int fd;
	int family, type;
	bool live;        /* counted in conns_live */
	bool buffered;    /* receives go through the provided-buffer ring */

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
	bool capped;           /* receive stopped: qcount reached net->recv_cap */
	bool r_limited;        /* r armed with a byte limit (sock.c mshot_limit) */
	bool slow;             /* capped without a limit: single-shot receives */
	bool poll_armed;       /* re-armed by the part's poll, no CQE yet */
	uint16_t promise;      /* buffers r may still take under the budget */
	/* stream sockets with a multishot recv: a one-shot poll for
	 * POLLERR|POLLHUP|POLLRDHUP beside it, because the kernel can miss the
	 * multishot's final CQE after a reset (see sock.c) */
	struct corio__mshot h;
	bool hup;              /* the poll fired: receive with single shots */
	struct corio_waitq rwq;      /* the fiber waiting for data */
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
	struct iovec siov[CORIO__SEND_GATHER]; /* the in-flight SENDMSG's buffers */
	struct msghdr smsg;
	bool sq_cancel;        /* cancel queued: drop the rest at the head's CQE */
	bool wr_shut;          /* corio_shutdown_write done */
	int32_t serr;          /* the first send error, sticky */
	uint16_t sq_count;     /* records queued (at most net->send_cap) */
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
	unsigned recv_cap;     /* buffers a socket may hold queued, unread */
	unsigned reserve_pct;  /* CORIO_NET_RECV_RESERVE: % of a ring kept for
	                          stream sockets that hold nothing */
	unsigned poll_arms;    /* receives net_poll armed that have no CQE yet */
	unsigned promised;     /* sum of the armed stream receives' promise */
	bool recv_limit;       /* multishot recv takes a byte limit (until -EINVAL) */
	unsigned send_cap;     /* corio_send_buf records a socket may queue */
	bool send_gather;      /* queued records go out together (CORIO_NET_DISABLE=send_gather) */
	bool udp_direct;       /* corio_sendto tries sendmsg(2) first (net/udp.c) */
	bool send_direct;      /* corio_send/sendv try sendmsg(2) first (net/sock.c) */
	unsigned udp_eagain_test; /* CORIO_NET_UDP_EAGAIN: direct tries to refuse */
	unsigned tcp_short_test;  /* CORIO_NET_TCP_SHORT: bytes a direct TCP send
	                             may take at most (forces short writes) */
	uint32_t disabled;        /* CORIO_NET_DISABLE, bits of net/part.c's words */
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
};


#define CORIO__CONTAINER(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))

/* The calling shard's net part, or NULL off-shard. */
static inline struct corio__net *corio__net(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s ? s->parts[CORIO__PART_NET] : NULL;
}

extern const struct corio__part corio__net_part;

/* Set up the shard's stream buffer ring on first use: 0 or -errno. */
int corio__net_bufs(struct corio__net *n);
/* The ring datagrams go to, set up on first use: its tag (0: net->bufs, which
 * is not incremental; CORIO__NET_DRING: net->dbufs), or -errno. */
int corio__net_dbufs(struct corio__net *n);

static inline struct corio__bufring *corio__net_ring(struct corio__net *n, uint32_t id)
{
	return id & CORIO__NET_DRING ? &n->dbufs : &n->bufs;
}

static inline void *corio__net_slice_data(struct corio__net *n, const struct corio__slice *q)
{
	return (char *)corio__bufring_addr(corio__net_ring(n, q->id), q->id & 0xffffu) + q->off;
}

/*
 * The shard-wide receive budget (net/sock.c corio__sock_arm). A stream
 * socket holds the buffers queued on it unread and its queued sends. One
 * that holds none may always take one buffer (its receive is armed for one
 * buffer's worth: from the reserve, a single shot, once the ring is down to
 * it). One that holds some is armed only while the ring has more free than
 * the reserve plus what receives armed before were promised, and for at
 * most that many buffers (its promise, the multishot's byte limit). So
 * sockets that already hold data - however many - never take the reserve,
 * which stays for the ones that do not.
 */
static inline unsigned corio__sock_holds(const struct corio_sock *s)
{
	return (unsigned)s->qcount + s->sq_count;
}

static inline unsigned corio__net_reserve(const struct corio__net *n,
					  const struct corio__bufring *b)
{
	return (unsigned)((uint64_t)b->nbufs * n->reserve_pct / 100);
}

/* Buffers of b a holding socket may be promised now. */
static inline unsigned corio__net_budget_room(const struct corio__net *n,
					      const struct corio__bufring *b)
{
	uint64_t used = (uint64_t)corio__net_reserve(n, b) + n->promised;

	return b->in_ring > used ? (unsigned)(b->in_ring - used) : 0;
}

static inline bool corio__net_budget_ok(const struct corio__net *n, const struct corio_sock *s,
					const struct corio__bufring *b)
{
	return s->type != SOCK_STREAM || !corio__sock_holds(s) || corio__net_budget_room(n, b);
}

/* Put one reference to buffer id (a slice's, a corio_buf's); refresh the
 * bufs_out stat. */
void corio__net_buf_put(struct corio__net *n, uint32_t id);
/* Refresh stats.bufs_out: buffers out of both rings now. */
void corio__net_bufs_stat(struct corio__net *n);

/* A slice record from the pool, or NULL when out of memory. */
struct corio__slice *corio__net_slice_get(struct corio__net *n);
static inline void corio__net_slice_put(struct corio__net *n, struct corio__slice *q)
{
	q->next = n->slice_free;
	n->slice_free = q;
}

/* Take the head slice off s's receive queue (the caller keeps its
 * reference or puts it) and return the record to the pool. */
void corio__sock_q_pop(struct corio_sock *s);

/* Count an error in the stats by kind. Returns err. */
int corio__net_err(struct corio__net *n, int err);
/* corio_drain() reached this shard: every listener stops accepting (listen.c) */
void corio__listeners_drain(struct corio__net *n);

/*
 * Park the calling fiber on wq (it must be the only waiter) until
 * corio__net_wake(wq): 0, or -ECANCELED, or -ETIMEDOUT at the fiber's
 * deadline scope (corio__wq_wait does both).
 */
static inline int corio__net_wait(struct corio_waitq *wq)
{
	return corio__wq_wait(wq);
}

static inline void corio__net_wake(struct corio_waitq *wq)
{
	corio__wq_wake_all(wq, 0);
}

/* Park, not interruptible by cancellation, until *done is true (the caller's
 * CQE handler sets it and readies the fiber). */
void corio__net_park_until(bool (*done)(void *), void *arg);

/* Check that obj belongs to this shard: its net part, or NULL. */
static inline struct corio__net *corio__net_owner(struct corio__net *n)
{
	return n && n == corio__net() ? n : NULL;
}

/* Queue a receive on s (multishot where possible): 0 or -errno. */
int corio__sock_arm(struct corio_sock *s);
/* Park until s has queued data (stream bytes or datagrams) or a terminal
 * result, arming its receive as needed: 0, or -errno (-EBUSY if another
 * fiber is already receiving on s). */
int corio__sock_wait_data(struct corio_sock *s);

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

/* A socket record from the shard's pool. */
struct corio_sock *corio__sock_new(struct corio__net *n, int fd, int family, int type);
void corio__sock_free(struct corio_sock *s);

/* Cancel s's queued sends (the head's final CQE drops the rest). */
void corio__sock_send_cancel(struct corio_sock *s);

/* The next accepted fd of l (owned by the caller), or -errno. Blocking. */
int corio__accept_fd(struct corio_listener *l);

/* A call on obj (a socket or listener) that failed the owner check: -EINVAL
 * when obj is NULL, else -EPERM (obj belongs to another shard, or the
 * caller is not on a shard), with a message naming who (corio_last_error). */
static inline int corio__net_not_mine(const char *who, const void *obj, const char *what)
{
	if (!obj)
		return corio__error(-EINVAL, "%s: the %s is NULL", who, what);
	return corio__error(-EPERM, "%s: the %s belongs to another shard, or the caller is "
				    "not on a shard", who, what);
}

/* The error for a socket call on s that owner() refused: NULL, closed
 * (a stale handle still in the quarantine), or another shard's. */
static inline int corio__sock_not_mine(const char *who, const struct corio_sock *s)
{
	if (s && s->dead)
		return corio__error(-EINVAL, "%s: the socket was closed (a stale handle)", who);
	return corio__net_not_mine(who, s, "socket");
}

#endif
