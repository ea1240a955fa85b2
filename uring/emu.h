/* SPDX-License-Identifier: MIT */
/*
 * uring/emu.h - the ring emulator's private parts, shared by its files:
 *
 *   emu.c          the SQ/CQ memory, pools, hashes, completions, provided
 *                  buffers, submit, the wait (enter), set-up and exit
 *   emu_ops.c      the ops: one table row per opcode (corio__emu_ops) and
 *                  the functions its rows name
 *   emu_fd.c       fd records: parking and readiness
 *   emu_timeout.c  TIMEOUT, TIMEOUT_REMOVE, ASYNC_CANCEL: the deadline list
 *
 * emu.c's opening comment says how the emulation works. Nothing here is
 * seen outside uring/emu*.c: uring/internal.h declares what the rest of
 * uring/ calls. Owner-thread only, like the ring.
 */
#ifndef CORIO_URING_EMU_H
#define CORIO_URING_EMU_H

#include "uring/internal.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LIKELY(x) __builtin_expect(!!(x), 1)

/* include/uapi/linux/io_uring.h, Linux 6.10+; liburing 2.3 lacks it */
#ifndef IORING_NOP_INJECT_RESULT
#define IORING_NOP_INJECT_RESULT (1U << 0)
#endif

enum {
	MSHOT_BUDGET = 16,  /* CQEs per multishot op per pass                    */
	NEVENTS = 256,      /* epoll events per wait                             */
	POOL_CHUNK = 128,   /* op and fd records allocated at a time             */
	MAX_BUFRINGS = 16,  /* registered provided-buffer rings per ring         */
	HARVEST_NS = 50000, /* busy turns: epoll looked at this often        */
	RETRY_NS = 1000000, /* a connect refused for a full Unix backlog: retry  */
};

/* Interest bits of a parked op (which edges retry it). */
#define EV_IN (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)
#define EV_OUT (EPOLLOUT | EPOLLERR | EPOLLHUP)

struct emu_fd;
struct emu_op;

/* One attempt of an op (struct emu_opdef's try says what it returns). */
typedef int (*emu_try_fn)(struct corio__ring *r, struct emu_op *o, uint32_t *flags);

struct emu_op {
	struct emu_op *next;      /* on its record (FIFO), the timeout list or free */
	struct emu_op *hnext;     /* user_data hash chain                           */
	struct emu_fd *f;         /* NULL for timeouts                              */
	emu_try_fn try;           /* its row's try, or the variant its prep picked  */
	/* corio__emu_bufring's hint: the bufs[] entry last found for bgid
	 * (bufs[0] from issue on, never NULL) */
	struct emu_bufring *bring;
	uint64_t user_data;
	uint64_t deadline;        /* timeouts: CLOCK_MONOTONIC ns                   */
	struct msghdr mh;         /* multishot recvmsg: the header template         */
	uint64_t addr, addr2;     /* the SQE's buffer / msghdr / sockaddr pointers  */
	uint64_t left;            /* multishot recv: bytes its byte limit leaves
				   * (UINT64_MAX: no limit)                        */
	uint32_t len;             /* (multishot recv: UINT32_MAX for none)         */
	int32_t msg_flags;
	uint32_t events;          /* poll mask, or EV_IN / EV_OUT; 0 once stale (its
				   * file was closed under it: never retried)      */
	uint8_t opcode;
	bool mshot, bsel, connecting;
	bool readiness;           /* its row's readiness                            */
	bool parked;              /* on its record (park() .. unpark())             */
	uint16_t bgid;
	int fd;
	uint32_t accept_flags;
};

struct emu_fd {
	int fd;
	uint32_t ready;           /* edges seen since the last EAGAIN               */
	bool registered, on_ready, nonblock, retry;
	struct emu_op *head, *tail;
	struct emu_fd *xnext;     /* retry list                                     */
	struct emu_fd *hnext;     /* fd hash chain                                  */
	struct emu_fd *rnext;     /* ready list                                     */
};

struct emu_bufring {
	struct io_uring_buf_ring *br;
	unsigned entries, mask;
	uint16_t head, bgid;
	bool used;
	bool inc;                 /* IOU_PBUF_RING_INC: consumed incrementally      */
};

struct corio__emu {
	/* the memory liburing's helpers read and write */
	unsigned sq_head, sq_tail, sq_mask, sq_entries, sq_flags, sq_dropped;
	unsigned cq_head, cq_tail, cq_mask, cq_entries, cq_flags, cq_overflow;
	unsigned cq_room;         /* cq_entries, 0 while CQEs wait in ovf: the test
				   * corio__emu_post makes for both               */
	unsigned *sq_array;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;

	int epfd;
	bool no_pwait2;           /* epoll_pwait2 is 5.11+: milliseconds before it */
	uint64_t last_harvest;
	unsigned parked;          /* ops waiting on fd records                      */
	struct emu_fd **fds;      /* hash by fd                                     */
	unsigned nfd_buckets, nfds;
	struct emu_op **uds;      /* hash by user_data, parked ops and timeouts     */
	unsigned nud_buckets, nuds;
	struct emu_fd *ready_head, *ready_tail;
	struct emu_fd *retry;     /* connects with no edge to wait for (try_connect) */
	uint64_t retry_at;
	struct emu_op *timeouts;  /* sorted by deadline                             */
	struct emu_op *op_free;
	struct emu_fd *fd_free;
	void *chunks;             /* every pool chunk, for exit                     */
	struct io_uring_cqe *ovf; /* CQEs waiting for room, FIFO                    */
	unsigned novf, ovf_head, ovf_cap;
	struct emu_bufring bufs[MAX_BUFRINGS];
	struct epoll_event evs[NEVENTS];
};

static inline uint64_t mono_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Result of one try: a CQE res, or one of these (outside the errno range). */
enum { T_AGAIN = -100000, /* would block: park, clear the ready bit    */
       T_MORE = -100001,  /* multishot: budget spent, more may follow */
       T_DONE = -100002   /* multishot: its final CQE is posted        */
};

/*
 * What the emulator knows of one opcode: its row in corio__emu_ops, indexed
 * by IORING_OP_* (the kernel's io_uring/opdef.c in miniature). A zero row
 * is an opcode the emulator does not serve: its SQE completes with -EINVAL.
 * Submit (emu.c's issue) reads a row in this order: now; else an op record
 * and prep; then, for an op with a try, its fd record and a first try,
 * parking on the record when it would block.
 */
struct emu_opdef {
	/* Answered from the SQE alone, with no op record: 1 its CQE is
	 * posted; 0 tried, it would block (park it with no second try); -1
	 * not answered here (the full path). */
	int (*now)(struct corio__ring *r, const struct io_uring_sqe *sqe);
	/* The op's own SQE fields, after the common ones (fd, addr, off, len,
	 * msg_flags, buffer group, events, multishot, try): 0 or -errno. It may
	 * set o->try to the variant of try the op's form takes (the records'
	 * retries call o->try). An op with no try (TIMEOUT) is started here:
	 * its record is the caller's no more. */
	int (*prep)(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe);
	/* One attempt: a CQE res, T_AGAIN, T_MORE or T_DONE; *flags (zeroed by
	 * the caller) gets the CQE flags of a result the caller posts. Set: the op waits on an fd
	 * record (epoll readiness). */
	emu_try_fn try;
	uint32_t events;       /* the edges that retry it: EV_IN, EV_OUT (0: the SQE's poll mask) */
	uint16_t mshot_ioprio; /* the SQE ioprio bit that makes it multishot (0: none)   */
	bool mshot_bsel;       /* multishot needs provided buffers (-EINVAL without)     */
	/* It reports readiness rather than moving data (POLL_ADD): issued
	 * with no try while its record waits on other ops (their registration
	 * reports the state), its T_AGAIN clears no ready bit, a multishot one
	 * stays parked after each CQE, and on a file epoll refuses (a regular
	 * file) it completes as poll(2) would: ready. */
	bool readiness;
	bool probe;            /* reported by corio__emu_probe                       */
	uint8_t fault;         /* its syscall's class for fault injection (uring/fault.h:
				  CORIO__FAULT_*); the provided-buffer paths name theirs */
};

extern const struct emu_opdef corio__emu_ops[IORING_OP_LAST];

/* The row of opcode op (a zero row past the table's end). */
static inline const struct emu_opdef *corio__emu_opdef(unsigned op)
{
	static const struct emu_opdef none;

	return op < IORING_OP_LAST ? &corio__emu_ops[op] : &none;
}

/* emu.c: pools and hashes */
struct emu_op *corio__emu_op_get(struct corio__emu *e);
void corio__emu_op_put(struct corio__emu *e, struct emu_op *o);
struct emu_fd *corio__emu_fd_find(struct corio__emu *e, int fd);
struct emu_fd *corio__emu_fd_get(struct corio__emu *e, int fd);
int corio__emu_ud_add(struct corio__emu *e, struct emu_op *o);
void corio__emu_ud_del(struct corio__emu *e, struct emu_op *o);
struct emu_op *corio__emu_ud_find(struct corio__emu *e, uint64_t ud);

/* emu.c: completions and provided buffers */
static inline void corio__emu_set_flag(struct corio__emu *e, unsigned bit, bool on)
{
	unsigned f = e->sq_flags;

	IO_URING_WRITE_ONCE(e->sq_flags, on ? f | bit : f & ~bit);
}

/* A CQE that finds the CQ full, or others waiting before it: the overflow
 * list (out of line: the post below is on every message's path). */
void corio__emu_post_ovf(struct corio__ring *r, uint64_t ud, int32_t res, uint32_t flags);

static inline void corio__emu_post(struct corio__ring *r, uint64_t ud, int32_t res, uint32_t flags)
{
	struct corio__emu *e = r->em;
	unsigned tail = e->cq_tail;
	struct io_uring_cqe *cqe;

	if (UNLIKELY(tail - io_uring_smp_load_acquire(&e->cq_head) >= e->cq_room)) {
		corio__emu_post_ovf(r, ud, res, flags);
		return;
	}
	cqe = &e->cqes[tail & e->cq_mask];
	cqe->user_data = ud;
	cqe->res = res;
	cqe->flags = flags;
	io_uring_smp_store_release(&e->cq_tail, tail + 1);
}

static inline bool corio__emu_cq_ready(const struct corio__emu *e)
{
	return io_uring_smp_load_acquire(&e->cq_tail) != e->cq_head;
}

/* Post o's CQE and return o to the pool. */
void corio__emu_finish(struct corio__ring *r, struct emu_op *o, int32_t res, uint32_t flags);
struct emu_bufring *corio__emu_bufring_find(struct corio__emu *e, uint16_t bgid);

/* The ring of group bgid, or NULL: the entry last found for it is checked
 * first (*hint, per op: an entry of e->bufs, never NULL), a registration
 * being moved or dropped since. */
static inline struct emu_bufring *corio__emu_bufring(struct corio__emu *e, uint16_t bgid,
						     struct emu_bufring **hint)
{
	struct emu_bufring *b = *hint;

	if (UNLIKELY(!b->used || b->bgid != bgid)) {
		b = corio__emu_bufring_find(e, bgid);
		if (b)
			*hint = b;
	}
	return b;
}

/* The head buffer, not yet taken: the caller commits only when data landed. */
static inline struct io_uring_buf *corio__emu_buf_peek(struct emu_bufring *b)
{
	uint16_t tail = io_uring_smp_load_acquire(&b->br->tail);

	if (tail == b->head)
		return NULL;
	return &b->br->bufs[b->head & b->mask];
}

/*
 * Commit n > 0 bytes received into buf, b's head buffer, which had room
 * bytes (its len, read before the receive): the CQE flags that name it. A
 * whole-buffer ring hands the buffer over (the head moves on). An
 * incremental one (IOU_PBUF_RING_INC) does what the kernel's
 * io_kbuf_inc_commit does: the entry's addr and len move past the bytes,
 * and the buffer stays at the head, IORING_CQE_F_BUF_MORE saying so, until
 * a receive fills what was left of it (uring/bufring.c counts the slices).
 */
static inline uint32_t corio__emu_buf_commit(struct emu_bufring *b, struct io_uring_buf *buf,
					     size_t n, uint32_t room)
{
	uint32_t fl = IORING_CQE_F_BUFFER | ((uint32_t)buf->bid << IORING_CQE_BUFFER_SHIFT);

	if (LIKELY(b->inc && n < room)) {
		buf->addr += n;
		buf->len = room - (uint32_t)n;
		return fl | IORING_CQE_F_BUF_MORE;
	}
	if (b->inc)
		buf->len = 0;
	b->head++;
	return fl;
}

/*
 * A SEND the socket takes at once (or fails at once) is answered from the
 * SQE: no op record, no fd-record look-up, which every ring-issued send
 * (corio_send_buf while other fibers are ready) paid per message. 1: its
 * CQE is posted; 0: tried, it would block (the full path parks it without
 * a second try); -1: not tried. Fault builds never try here: their
 * injection sits on the full path's syscall sites. Inline: at load, with
 * sends queued on the ring, one a message (emu.c's issue calls it
 * directly; SEND's row names it too).
 */
static inline int corio__emu_send_now(struct corio__ring *r, const struct io_uring_sqe *sqe)
{
#ifdef CORIO_FAULTS
	(void)r;
	(void)sqe;
	return -1;
#else
	ssize_t n = corio__nc_send(sqe->fd, (const void *)(uintptr_t)sqe->addr, sqe->len,
			 (int)sqe->msg_flags | MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	corio__emu_post(r, sqe->user_data, n < 0 ? -errno : (int32_t)n, 0);
	return 1;
#endif
}

/* IORING_SQ_TASKRUN says the ready list has records (the loop's reap
 * comes back for them). The list changes only in an enter, so the flag
 * is set once, on the way out. */
static inline void corio__emu_sync_taskrun(struct corio__emu *e)
{
	unsigned f = e->sq_flags;

	if (UNLIKELY(!!(f & IORING_SQ_TASKRUN) != !!e->ready_head))
		IO_URING_WRITE_ONCE(e->sq_flags, f ^ IORING_SQ_TASKRUN);
}

/* ---- emu_ops.c's syscall sites, here for the inline receive below ---- */

static inline int corio__emu_err(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK ? T_AGAIN : -errno;
}

/*
 * Fault injection at the syscall sites (uring/fault.h; test builds): 0 to
 * make the call, *len perhaps shrunk (a short transfer); or the errno the
 * call "returned", set in errno. An injected EAGAIN stands for the kernel's
 * after a stale edge (another reader took the data): the next arrival's
 * edge follows it, given here by re-arming the record (EPOLL_CTL_MOD
 * reports the file's state as a fresh edge; an unregistered record gets
 * it from corio__emu_park()).
 */
static inline int corio__emu_fault_at(struct corio__ring *r, struct emu_op *o, size_t *len, int what)
{
	int e = corio__fault_syscall(r, o->fd, len, what);

	if (UNLIKELY(e)) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
					  .data.ptr = o->f };

		if (e == EAGAIN && o->f->registered)
			epoll_ctl(r->em->epfd, EPOLL_CTL_MOD, o->fd, &ev);
		errno = e;
	}
	return e;
}

/* A multishot receive into provided buffers: every message's receive,
 * inline in the harvest (emu_fd.c), out of line as the op's try. */
static inline __attribute__((always_inline)) int corio__emu_recv_mshot(struct corio__ring *r,
									struct emu_op *o)
{
	struct emu_bufring *b = corio__emu_bufring(r->em, o->bgid, &o->bring);
	unsigned posted = 0;

	if (!b)
		return -ENOBUFS;
	for (;;) {
		struct io_uring_buf *buf = corio__emu_buf_peek(b);
		uint32_t room, fl;
		size_t len;
		ssize_t n;

		if (!buf)
			return -ENOBUFS; /* ends a multishot, as the kernel does */
		room = buf->len;
		len = room < o->len ? room : o->len;
		if (o->left < len)
			len = (size_t)o->left;
		n = corio__emu_fault_at(r, o, &len, CORIO__FAULT_RECV)
			    ? -1
			    : corio__nc_recv(o->fd, (void *)(uintptr_t)buf->addr, len, o->msg_flags | MSG_DONTWAIT);
		if (n <= 0)
			return n == 0 ? 0 : corio__emu_err();
		fl = corio__emu_buf_commit(b, buf, (size_t)n, room);
		o->left -= (uint64_t)n;
		if (UNLIKELY(!o->left)) {
			corio__emu_post(r, o->user_data, (int32_t)n, fl);
			return T_DONE; /* posted the final CQE: the limit is reached */
		}
		corio__emu_post(r, o->user_data, (int32_t)n, fl | IORING_CQE_F_MORE);
		/*
		 * A short read drained the stream (a multishot RECV is a stream
		 * receive: datagram sockets use RECVMSG): wait for the next edge
		 * instead of paying a recv for its EAGAIN. Edge-triggered epoll
		 * reports every arrival after this read, so nothing is missed;
		 * a hang-up seen already is not reported again, so then read on
		 * until the 0.
		 */
		if ((size_t)n < len && !(o->f->ready & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
			return T_AGAIN;
		if (++posted >= MSHOT_BUDGET)
			return T_MORE;
	}
}

int corio__emu_try_recv_mshot(struct corio__ring *r, struct emu_op *o, uint32_t *flags);

/* emu_fd.c: fd records */
void corio__emu_ready_add(struct corio__emu *e, struct emu_fd *f);
/* False when o could not wait and was completed instead. */
bool corio__emu_park(struct corio__ring *r, struct emu_op *o);
void corio__emu_unpark(struct corio__emu *e, struct emu_op *o);
/* One pass over the ready list. */
void corio__emu_process_ready(struct corio__ring *r);
/* One epoll wait into e->evs (ns < 0: no timeout): events, or -errno. */
int corio__emu_epoll_wait(struct corio__emu *e, int64_t ns);
/* n epoll events in e->evs: mark their records ready, retry their ops. */
void corio__emu_harvest(struct corio__ring *r, int n);
/* The plain wait (corio__emu_enter): wait with no timeout and harvest
 * until a CQE is posted, a record is queued, or a timeout or retry is
 * armed. 0, or -errno (-EINTR). */
int corio__emu_wait_plain(struct corio__ring *r);
/* corio__emu_ring_enter's plain wait: nothing to submit, nothing queued,
 * timed or overflowed, the CQ empty, no valgrind or -EBADR fault. The
 * enter counted; 0, or -errno (-EINTR). */
int corio__emu_wait_enter(struct corio__ring *r);
/* A connect with no edge to wait for: retried after RETRY_NS. */
void corio__emu_retry_later(struct corio__emu *e, struct emu_fd *f);
void corio__emu_fire_retries(struct corio__emu *e, uint64_t now);

/* emu_timeout.c */
/* TIMEOUT's prep: o waits on the deadline list. 0 or -errno. */
int corio__emu_timeout_add(struct corio__ring *r, struct emu_op *o, const struct io_uring_sqe *sqe);
/* TIMEOUT_REMOVE (and its UPDATE), ASYNC_CANCEL: the CQE res. */
int corio__emu_timeout_remove(struct corio__ring *r, const struct io_uring_sqe *sqe);
int corio__emu_cancel(struct corio__ring *r, const struct io_uring_sqe *sqe);
/* Complete the timeouts due (and due connect retries); the test for none
 * pending inline, since every wait makes it. */
void corio__emu_fire_due(struct corio__ring *r);

static inline void corio__emu_fire_timeouts(struct corio__ring *r)
{
	if (UNLIKELY(r->em->timeouts || r->em->retry))
		corio__emu_fire_due(r);
}

#endif
