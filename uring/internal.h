/* SPDX-License-Identifier: MIT */
/*
 * uring/internal.h - the private interface of uring/, the lowest area and the
 * only code that talks to liburing: ring set-up and feature probing, SQE
 * acquisition, batched submit, CQE reaping and dispatch, provided-buffer
 * rings, cancel and MSG_RING doorbells. It knows nothing of fibers, timers,
 * sockets or files, and includes nothing of corio but the public headers.
 * Not installed.
 */
#ifndef CORIO_URING_INTERNAL_H
#define CORIO_URING_INTERNAL_H

/* ==== rings, SQEs, CQEs and op records (uring/ring.c) =================== */
/*
 * the only layer that talks to liburing.
 *
 * It knows rings, SQEs, CQEs and op records; it knows nothing of fibers.
 * Every SQE's user_data is either 0 (a fire-and-forget SQE whose CQE is
 * dropped: async-cancel requests, linked timeouts) or a pointer to a
 * struct corio__op, whose cb runs once per CQE. For a multishot op the
 * callback sees IORING_CQE_F_MORE on every CQE but the last one.
 */
#include "uring/sys.h"
#include "uring/fault.h" /* the fault-injection hooks (FAULTS=1 builds) */
#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct corio__op;
typedef void (*corio__op_cb)(struct corio__op *op, int32_t res, uint32_t cqe_flags);

/* An operation record: one per in-flight request (multishot: one per stream). */
struct corio__op {
	corio__op_cb cb;    /* runs on the owning shard for each CQE           */
	void *data;         /* owner's cookie (the waiting fiber, a timer, ...) */
	int32_t res;        /* last CQE's result                                */
	uint32_t cqe_flags; /* last CQE's flags                                 */
	uint64_t user_data; /* what its SQE carries: the op, or its link slot   */
};

/* Capability bits probed at ring setup (struct corio__ring.caps). */
enum {
	CORIO__CAP_SINGLE_ISSUER = 1u << 0,
	CORIO__CAP_DEFER_TASKRUN = 1u << 1,
	CORIO__CAP_COOP_TASKRUN = 1u << 2,
	CORIO__CAP_SQPOLL = 1u << 3,
	CORIO__CAP_TASKRUN_FLAG = 1u << 4,
	/* multishot recv, recvmsg and accept work although the opcode probe
	 * cannot say so (net/shard.c infers them from other opcodes): the
	 * emulator has them without IORING_OP_SOCKET or SEND_ZC */
	CORIO__CAP_MSHOT = 1u << 5,
};

struct corio__ring_params {
	unsigned sq_entries;
	unsigned cq_entries; /* 0: kernel default (2 * sq) */
	bool sqpoll;
	int sqpoll_cpu;      /* -1: not pinned */
	bool emu;            /* the ring emulator (uring/emu.c), not io_uring */
};

/* Ring counters; the core copies them into its stats. Owner-written. */
/* Written only by the ring's thread, read by the stats getters from any
 * thread (core/stats.c): every write is a relaxed atomic store of the new
 * value (CORIO__RCNT_ADD, a plain add and store on x86-64 and aarch64), so
 * readers never see a torn value and nothing is copied per loop turn. */
struct corio__ring_counters {
	uint64_t enters, sqes, cqes, sq_full, cq_overflow, cqe_dropped;
};
#define CORIO__RCNT_ADD(field, n) __atomic_store_n(&(field), (field) + (n), __ATOMIC_RELAXED)

struct corio__emu;

struct corio__ring {
	struct io_uring ring;
	bool emu;               /* emulated (uring/emu.c): the one test on syscall paths */
	struct corio__emu *em;
	unsigned setup_flags;   /* IORING_SETUP_* actually used */
	unsigned features;      /* IORING_FEAT_* from the kernel */
	unsigned caps;          /* CORIO__CAP_* */
	bool under_valgrind;    /* blocking waits are sliced (see ring.c) */
	bool no_reap_flush;     /* test: CORIO_RING_DISABLE=reap_flush */
	bool fault_ebadr;       /* test: CORIO_RING_FAULT=ebadr, once */
	bool faults_env;        /* CORIO_FAULTS is set (fault injection asked for) */
	unsigned disabled;      /* CORIO_RING_DISABLE: CORIO__RING_NO_* */
	unsigned char ops[IORING_OP_LAST + 1]; /* opcode supported, from the probe */
	unsigned sq_entries, cq_entries;
	unsigned sq_head;       /* the kernel's SQ head as last read: corio__ring_sqe */
	bool plain_wait;        /* corio__ring_wait may take its short way */
	struct corio__ring_counters cnt;
	struct corio__link *link_free;  /* link slot pool */
	void *link_chunks;              /* list of chunks, for ring exit */
	uint64_t links_out;             /* slots handed out and not yet free */
	/* CQEs taken off the CQ while an SQE was being acquired (a refused
	 * submit must drain the CQ); dispatched by the next corio__ring_reap,
	 * first and in order, so no callback runs inside corio__ring_sqe. */
	struct corio__stashed { uint64_t user_data; int32_t res; uint32_t flags; } *stash;
	unsigned nstash, stash_cap;
#ifdef CORIO_FAULTS
	struct corio__fault_ring fault; /* test builds only: uring/fault.h */
#endif
};

/* ==== CORIO_* environment settings (uring/env.c) ========================= */
/*
 * The one parser of every CORIO_* variable, here so every area can use it
 * (uring/env.c states the rule). Each corio__env_<kind>(var, ...) call
 * returns 0 when var is unset (*out keeps the caller's default), 1 when it
 * holds a valid value (stored in *out), or -EINVAL with "VAR=value: what
 * was expected" in err. Areas read their variables once, while a shard
 * starts, and fail its start with that message.
 */
int corio__env_uint(const char *var, uint64_t min, uint64_t max, uint64_t *out, char *err,
		    size_t len);
int corio__env_flag(const char *var, bool *out, char *err, size_t len); /* 0 or 1 */
/* One of words (NULL-terminated): *out is its index. */
int corio__env_choice(const char *var, const char *const *words, unsigned *out, char *err,
		      size_t len);
/* A comma list of words (NULL-terminated, at most 32) or "all": *mask has
 * bit i for words[i]. */
int corio__env_words(const char *var, const char *const *words, uint32_t *mask, char *err,
		     size_t len);
/* "A:B" (syntax names it for the message): A in lim[0]..lim[1], B in
 * lim[2]..lim[3]. */
int corio__env_pair(const char *var, const char *syntax, const uint64_t lim[4],
		    uint64_t out[2], char *err, size_t len);
int corio__env_str(const char *var, const char **out, char *err, size_t len); /* non-empty */

/* Primitives for structured values (CORIO_FAULTS), on s[0..n): */
/* decimal digits only, in min..max: 0, -EINVAL (syntax) or -ERANGE */
int corio__env_num(const char *s, size_t n, uint64_t min, uint64_t max, uint64_t *out);
/* an unsigned decimal fraction (no sign, inf or nan) in min..max: 0, -EINVAL, -ERANGE */
int corio__env_real(const char *s, size_t n, double min, double max, double *out);
/* the index of s in words (NULL-terminated), or -1 */
int corio__env_word(const char *s, size_t n, const char *const *words);
/* items separated by any of seps, each one of words or "all": 0, or
 * -EINVAL with the bad item at s[*bad], *badlen long */
int corio__env_mask(const char *s, size_t n, const char *seps, const char *const *words,
		    uint32_t *mask, size_t *bad, size_t *badlen);
/* Write "VAR=value: " and fmt into err; returns -EINVAL. */
int corio__env_fail(char *err, size_t len, const char *var, const char *val, const char *fmt,
		    ...) __attribute__((format(printf, 5, 6)));

/* CORIO_RING_DISABLE's words, as bits of struct corio__ring.disabled. */
enum {
	CORIO__RING_NO_SINGLE_ISSUER = 1u << 0,
	CORIO__RING_NO_DEFER_TASKRUN = 1u << 1,
	CORIO__RING_NO_COOP_TASKRUN = 1u << 2,
	CORIO__RING_NO_SQPOLL = 1u << 3,
	CORIO__RING_NO_REAP_FLUSH = 1u << 4, /* test: liburing's reap flush */
	CORIO__RING_NO_EFD_WAIT = 1u << 5,   /* test: core's eventfd wait (core/loop.c) */
};

/*
 * Create a ring, trying the best flag set first and falling back for older
 * kernels (see ring.c for the ladder). The environment variable
 * CORIO_RING_DISABLE (comma list of single_issuer, defer_taskrun,
 * coop_taskrun, sqpoll, and the test hooks reap_flush and efd_wait) forces
 * fallbacks for tests; it, CORIO_RING_FAULT and CORIO_FAULTS are parsed
 * here. On failure returns -errno and writes a human-readable cause into err.
 */
int corio__ring_init(struct corio__ring *r, const struct corio__ring_params *p, char *err,
		     size_t errlen);
void corio__ring_exit(struct corio__ring *r);

static inline bool corio__ring_has_op(const struct corio__ring *r, unsigned op)
{
	return op <= IORING_OP_LAST && r->ops[op];
}

/* corio__ring_sqe with a full SQ (uring/ring.c). */
struct io_uring_sqe *corio__ring_sqe_full(struct corio__ring *r);
/* A free SQE, never NULL: when the SQ is full, submits what is queued first;
 * if the kernel refuses that submit (-EBUSY/-EAGAIN: drain the CQ first) it
 * reaps, running callbacks inline, before it tries again. Inline: every op
 * takes one, and an SQ with room is the rule. */
static inline struct io_uring_sqe *corio__ring_sqe(struct corio__ring *r)
{
	struct io_uring_sq *sq = &r->ring.sq;
	unsigned tail = sq->sqe_tail;

	/* io_uring_get_sqe without its per-call flag tests (no SQE128 ring is
	 * ever set up) and without reading the kernel's head while the head
	 * last read leaves room: the head only moves on, so room by an old
	 * head is room. */
	if (__builtin_expect(tail - r->sq_head >= sq->ring_entries, 0)) {
		r->sq_head = (r->caps & CORIO__CAP_SQPOLL) ? io_uring_smp_load_acquire(sq->khead)
							   : IO_URING_READ_ONCE(*sq->khead);
		if (tail - r->sq_head >= sq->ring_entries)
			return corio__ring_sqe_full(r);
	}
	if (corio__fault_sqfull(r))
		return corio__ring_sqe_full(r);
	sq->sqe_tail = tail + 1;
	return &sq->sqes[tail & sq->ring_mask];
}

/* One CQE's op: its callback. NULL and LIBURING_UDATA_TIMEOUT (liburing's
 * own timeout SQE, for waits with a timeout on kernels without
 * IORING_FEAT_EXT_ARG) have none. */
static inline __attribute__((always_inline)) void corio__ring_dispatch(struct corio__op *op,
								       int32_t res, uint32_t flags)
{
	if (op && (uint64_t)(uintptr_t)op != LIBURING_UDATA_TIMEOUT) {
		op->res = res;
		op->cqe_flags = flags;
		op->cb(op, res, flags);
	}
}

/* Dispatch the CQEs in the CQ, in order, until it is empty or a callback
 * stashed the ones behind its own (corio__ring_sqe's refused submit): those
 * come before whatever the kernel posted since, so the caller dispatches
 * the stash next. The number dispatched. The head is read again after each
 * callback: one may have reaped from inside (the stash). */
static inline __attribute__((always_inline)) unsigned corio__ring_walk(struct corio__ring *r)
{
	struct io_uring_cq *cq = &r->ring.cq;
	unsigned n = 0;

	for (unsigned head = *cq->khead; head != io_uring_smp_load_acquire(cq->ktail);
	     head = *cq->khead) {
		struct io_uring_cqe *cqe = &cq->cqes[head & cq->ring_mask];
		struct corio__op *op = io_uring_cqe_get_data(cqe);
		int32_t res = cqe->res;
		uint32_t flags = cqe->flags;

		io_uring_smp_store_release(cq->khead, head + 1);
		n++;
		corio__ring_dispatch(op, res, flags);
		if (__builtin_expect(r->nstash != 0, 0))
			break;
	}
	return n;
}

/* Make room for n SQEs that must go to the kernel in one submit (a link:
 * corio__ring_sqe() would otherwise submit between them when the SQ fills). */
void corio__ring_reserve(struct corio__ring *r, unsigned n);

/* Bind an SQE to an op record (or to nothing: op == NULL drops its CQE). */
static inline void corio__sqe_set_op(struct io_uring_sqe *sqe, struct corio__op *op)
{
	io_uring_sqe_set_data(sqe, op);
	if (op)
		op->user_data = (uint64_t)(uintptr_t)op;
}

/* io_uring_prep_send, for the send path's SQE each message: the same
 * fields, but the SQE cleared in four vector stores instead of liburing's
 * dozen field by field. */
static inline void corio__prep_send(struct io_uring_sqe *sqe, int fd, const void *buf, size_t len,
				    int flags)
{
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = IORING_OP_SEND;
	sqe->fd = fd;
	sqe->addr = (uint64_t)(uintptr_t)buf;
	sqe->len = (uint32_t)len;
	sqe->msg_flags = (uint32_t)flags;
}

/*
 * Link slots: the user_data of an op followed by an IORING_OP_LINK_TIMEOUT.
 * When that timeout fires, the kernel cancels the op by matching its
 * user_data, from task work that may run after the op's own CQE has been
 * reaped; if the user_data were the op record's address, a fiber reusing
 * that (stack) address for its next op would get that op cancelled. A slot
 * stands in for the record: the op's CQE goes through it to the record at
 * once, and the slot is reused only after the link timeout's own CQE, which
 * the kernel posts after its cancel attempt. Slots come from a per-ring
 * pool (chunks of 64, freed at ring exit).
 */
struct corio__link;
/* A free slot, or NULL when out of memory. */
struct corio__link *corio__ring_link_get(struct corio__ring *r);
/* Route head's CQEs to op through slot, and lt's CQE to slot. */
void corio__ring_link_bind(struct corio__link *slot, struct io_uring_sqe *head,
			   struct io_uring_sqe *lt, struct corio__op *op);

/* The last SQE queued and not yet handed to the kernel, if it carries
 * user_data (a linked timeout can still be appended behind it); else NULL. */
struct io_uring_sqe *corio__ring_queued_sqe(struct corio__ring *r, uint64_t user_data);

/* SQEs queued but not yet handed to the kernel. */
static inline unsigned corio__ring_pending(const struct corio__ring *r)
{
	return io_uring_sq_ready(&r->ring);
}

/* True if the kernel has completions that only an enter will flush (deferred
 * task work or overflowed CQEs). */
bool corio__ring_needs_enter(const struct corio__ring *r);

/*
 * One io_uring_enter: submit what is queued and, with wait_nr > 0, sleep
 * until that many completions are ready. Returns >= 0 or -errno: -EINTR,
 * and -EAGAIN/-EBUSY (the kernel wants the CQ drained first), after which
 * the caller reaps before it enters again (the shard loop always does);
 * -EBADR is counted and reported (corio__ring_check()).
 */
int corio__ring_enter(struct corio__ring *r, unsigned wait_nr);
/* Account an io_uring_enter result (-EBADR: completions dropped, counted
 * and reported); returns ret. */
int corio__ring_check(struct corio__ring *r, int ret, const char *what);
/* The wait's enter on a kernel ring without SQPOLL, without liburing's
 * submit path (it works out per call what holds for every corio ring: no
 * SQPOLL here, no registered ring fd, GETEVENTS since we wait): publish the
 * queued SQEs, then one syscall that submits whatever the kernel has not
 * consumed and waits for wait_nr completions. The raw result. */
static inline __attribute__((always_inline)) int corio__ring_sys_wait(struct corio__ring *r,
								      unsigned wait_nr)
{
	struct io_uring_sq *sq = &r->ring.sq;
	unsigned tail = sq->sqe_tail;

	if (sq->sqe_head != tail) {
		sq->sqe_head = tail;
		io_uring_smp_store_release(sq->ktail, tail);
	}
	return (int)corio__sys_uring_enter(r->ring.ring_fd, tail - IO_URING_READ_ONCE(*sq->khead),
					   wait_nr, IORING_ENTER_GETEVENTS);
}
/* corio__ring_enter(r, 1), the idle turn's: submit what is queued and wait
 * for one completion; inline in the loop, the common case in a few tests. */
static inline __attribute__((always_inline)) int corio__ring_wait(struct corio__ring *r)
{
	int ret;

	/* corio__ring_enter(r, 1)'s branch for a plain kernel ring (no stash,
	 * SQPOLL, valgrind or injected fault), tested once */
	if (__builtin_expect(!r->plain_wait || r->nstash, 0))
		return corio__ring_enter(r, 1);
	ret = corio__ring_sys_wait(r, 1);
	CORIO__RCNT_ADD(r->cnt.enters, 1);
	if (ret > 0)
		CORIO__RCNT_ADD(r->cnt.sqes, (unsigned)ret);
	return ret < 0 ? corio__ring_check(r, ret, "io_uring_enter") : ret;
}

/* Non-blocking: submit what is queued, flush completions the kernel holds
 * back, and return how many CQEs are ready (for spinning idle loops). */
unsigned corio__ring_poll(struct corio__ring *r);

/* Reap every ready CQE and run each op's callback. Returns the number
 * reaped. Flushes overflowed CQEs and deferred task work so none is left
 * behind (ring.c says why that matters). Safe to call from a callback. */
unsigned corio__ring_reap(struct corio__ring *r);
/* The loop's reap, once a turn: corio__ring_reap, with the common turn (no
 * stash, nothing held back in the kernel) in the caller's frame. */
static inline __attribute__((always_inline)) unsigned corio__ring_reap_turn(struct corio__ring *r)
{
	unsigned n = 0;

	if (__builtin_expect(!r->nstash, 1)) {
		n = corio__ring_walk(r);
		if (n)
			CORIO__RCNT_ADD(r->cnt.cqes, n);
		if (__builtin_expect(!r->nstash && !(IO_URING_READ_ONCE(*r->ring.sq.kflags) &
						     (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN)),
				     1))
			return n;
	}
	return n + corio__ring_reap(r); /* the stash, a flush: the whole reap */
}

/* Queue an async cancel of op (matched by user_data). The op's own final CQE
 * still arrives (with -ECANCELED, or its real result if it won the race).
 * Like every call that takes an SQE, it may reap and run callbacks inline
 * (SQ full and the kernel refusing the submit: corio__ring_sqe), so op's
 * final CQE may already have been dispatched when it returns: mark the op
 * as cancelling BEFORE the call, never after (test_faults,
 * inline_reap_during_cancel). */
void corio__ring_cancel(struct corio__ring *r, struct corio__op *op);


/* ==== the ring emulator (uring/emu.c) ==================================== */
/*
 * The readiness fallback: the same SQ and CQ memory, served by non-blocking
 * syscalls and epoll instead of the kernel's io_uring (emu.c explains).
 * Only uring/'s syscall paths call these, when r->emu is set.
 */
/* Set up r->ring as an emulated ring of entries SQEs (p: CQSIZE honoured;
 * features and sizes written back). 0 or -errno. */
int corio__emu_init(struct corio__ring *r, unsigned entries, struct io_uring_params *p);
void corio__emu_exit(struct corio__ring *r);
/* Fill r->ops with the opcodes the emulator serves. */
void corio__emu_probe(struct corio__ring *r);
/* Submit what is queued, post what is ready; with wait_nr, block until a
 * CQE is posted (or limit passes: NULL waits for ever). poll: look at epoll
 * even when not waiting. Returns SQEs submitted or -EINTR. */
int corio__emu_enter(struct corio__ring *r, unsigned wait_nr, bool poll,
		     const struct __kernel_timespec *limit);
/* corio__ring_enter on an emulated ring: the same steps (stash, fault
 * hooks, counters, -EBADR) around the emulator's enter, in one frame. */
int corio__emu_ring_enter(struct corio__ring *r, unsigned wait_nr);
/* A busy loop should enter now: parked ops have not been looked at for a
 * while, or an emulated timeout is due. */
bool corio__emu_poll_due(const struct corio__ring *r);
int corio__emu_register_buf_ring(struct corio__ring *r, const struct io_uring_buf_reg *reg);
int corio__emu_unregister_buf_ring(struct corio__ring *r, unsigned bgid);
/* Optional: fd is about to be closed and has no ops left; its record may
 * go. Correctness never depends on it (records are re-checked on reuse). */
void corio__emu_forget_fd(struct corio__ring *r, int fd);

/*
 * Can this process set up an io_uring at all? Sets up and closes a one-entry
 * ring: 0, or the -errno of the refusal (-ENOSYS, -EPERM, -EACCES: seccomp
 * filters, kernel.io_uring_disabled; -ENOMEM: memlock limits, ...).
 */
int corio__ring_try_setup(void);

/* ==== provided-buffer rings (uring/bufring.c) =========================== */
/*
 * a pool of equal-sized receive buffers, handed to the
 * kernel as a provided-buffer ring (IORING_REGISTER_PBUF_RING, Linux 5.19).
 *
 * Three modes:
 *  - incremental kernel mode (IOU_PBUF_RING_INC, 6.12; asked for with
 *    inc=true, probed by trying the registration): the kernel fills a
 *    buffer bit by bit, one receive after another, and says with
 *    IORING_CQE_F_BUF_MORE that it keeps the buffer for more. Many small
 *    receives share one buffer (bufring.c explains the rules).
 *  - kernel mode: the buffers sit in a registered ring; an SQE with
 *    IOSQE_BUFFER_SELECT lets the kernel pick one when data arrives, and the
 *    CQE names it (IORING_CQE_F_BUFFER, id in the upper 16 bits).
 *  - user mode (no PBUF_RING, or forced off for tests): the same memory, a
 *    free stack in user space; the caller takes a buffer before it submits.
 * In every mode a buffer carries a count of references (the slices of it
 * the caller holds) and goes back to the ring (or the free stack) only when
 * the kernel is done with it and the last reference is put.
 * Knows nothing of fibers or sockets. Owner-thread only.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* liburing 2.3 predates incremental consumption (uapi values of 6.12). */
#ifndef IOU_PBUF_RING_INC
#define IOU_PBUF_RING_INC 2 /* io_uring_buf_reg.flags (liburing 2.3: .pad) */
#endif
#ifndef IORING_CQE_F_BUF_MORE
#define IORING_CQE_F_BUF_MORE (1U << 4)
#endif

struct corio__bufring {
	struct io_uring_buf_ring *br; /* kernel mode: the registered ring; NULL in user mode */
	size_t br_bytes;
	unsigned char *mem;           /* nbufs * size bytes */
	size_t mem_bytes;
	uint16_t *free;               /* user mode: free stack of buffer ids */
	unsigned nfree;
	uint32_t *refs;               /* per buffer: references (see bufring.c) */
	uint32_t *fill;               /* per buffer, incremental mode: bytes filled */
	unsigned nbufs, size, mask;
	unsigned in_ring;             /* buffers the kernel (or the free stack) holds */
	uint64_t *out;                /* a counter of buffers out of the ring, kept up
				       * to date with relaxed stores (a stat another
				       * thread reads); points at out0 unless set */
	uint64_t out0;
	bool inc;                     /* incremental consumption is on */
	uint16_t bgid;
};

/* Set up nbufs (power of two, <= 32768) buffers of size bytes. kernel=false
 * forces user mode; inc asks for incremental consumption, which is used
 * when the kernel takes it (b->inc says so). Falls back by itself: to
 * whole-buffer mode when the kernel refuses IOU_PBUF_RING_INC (before
 * 6.12), to user mode when it refuses the ring (-EINVAL: before 5.19).
 * Returns 0 or -errno. */
int corio__bufring_init(struct corio__bufring *b, struct corio__ring *r, uint16_t bgid,
			unsigned nbufs, unsigned size, bool kernel, bool inc);
void corio__bufring_fini(struct corio__bufring *b, struct corio__ring *r);
/* References the caller holds (slices queued or lent out), all buffers
 * together; 0 when every slice came back (the leak census asks). */
unsigned long corio__bufring_lent(const struct corio__bufring *b);

static inline bool corio__bufring_kernel(const struct corio__bufring *b)
{
	return b->br != NULL;
}

static inline void *corio__bufring_addr(const struct corio__bufring *b, unsigned bid)
{
	return b->mem + (size_t)bid * b->size;
}

/* refs[] bit: the kernel keeps the buffer at its ring's head for more. */
#define CORIO__BUFRING_KREF (1u << 31)

/* One buffer fewer (or more) in the ring: in_ring and the out counter. */
static inline void corio__bufring_out(struct corio__bufring *b, int d)
{
	b->in_ring -= (unsigned)d;
	__atomic_store_n(b->out, *b->out + (uint64_t)(int64_t)d, __ATOMIC_RELAXED);
}

/* Put one reference to a buffer; the last one (once the kernel is done
 * with it) gives it back to the kernel's ring or to the free stack.
 * Inline: every received buffer comes back through here. */
static inline void corio__bufring_put(struct corio__bufring *b, unsigned bid)
{
	if (--b->refs[bid])
		return; /* more slices out, or the kernel still fills it */
	b->fill[bid] = 0;
	if (b->br) {
		io_uring_buf_ring_add(b->br, corio__bufring_addr(b, bid), b->size, (uint16_t)bid,
				      (int)b->mask, 0);
		io_uring_buf_ring_advance(b->br, 1);
	} else {
		b->free[b->nfree++] = (uint16_t)bid;
	}
	corio__bufring_out(b, -1);
}

/*
 * A CQE of a receive that let the kernel select from b (kernel modes).
 * Returns the id of the buffer its res bytes went to and sets *off to
 * where they start in it, with one reference taken for the caller (put it
 * with corio__bufring_put()); or -1 when the CQE hands over no bytes
 * (res <= 0, no IORING_CQE_F_BUFFER): any buffer it names is dealt with.
 * Inline: one call per received buffer.
 */
static inline int corio__bufring_cqe(struct corio__bufring *b, int32_t res, uint32_t cqe_flags,
				     uint32_t *off)
{
	unsigned bid;

	if (!(cqe_flags & IORING_CQE_F_BUFFER))
		return -1;
	bid = cqe_flags >> IORING_CQE_BUFFER_SHIFT;
	if (bid >= b->nbufs)
		return -1; /* not one of ours: cannot happen with a sane kernel */
	if (!b->inc) {
		corio__bufring_out(b, 1);
		b->refs[bid] = 1;
		if (res <= 0) {
			corio__bufring_put(b, bid);
			return -1;
		}
		*off = 0;
		return (int)bid;
	}
	if (res <= 0)
		return -1; /* nothing committed: still the kernel's (see bufring.c) */
	*off = b->fill[bid];
	b->fill[bid] += (uint32_t)res;
	b->refs[bid]++;
	if (cqe_flags & IORING_CQE_F_BUF_MORE) {
		b->refs[bid] |= CORIO__BUFRING_KREF;
	} else {
		b->refs[bid] &= ~CORIO__BUFRING_KREF;
		corio__bufring_out(b, 1); /* the kernel is done with it */
	}
	return (int)bid;
}

/* User mode: take a free buffer id (one reference), or -ENOBUFS. */
int corio__bufring_take(struct corio__bufring *b);

/* Make sqe (a recv or recvmsg) let the kernel pick a buffer from b. */
static inline void corio__bufring_select(struct io_uring_sqe *sqe, const struct corio__bufring *b)
{
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = b->bgid;
}

/* ==== MSG_RING doorbells (uring/msg_ring.c) ============================= */
/*
 * IORING_OP_MSG_RING doorbells between rings (the
 * liburing side of the cross-shard message ring in core/msg.c).
 */
/* True if r can send MSG_RING doorbells: the opcode is supported (5.18+)
 * and r has no SQPOLL thread (with SQPOLL the kernel thread would resolve
 * the target's fd later, after the sender stopped guarding its lifetime). */
bool corio__ring_can_msg(const struct corio__ring *r);

/*
 * Post one CQE (user_data 0, res 0: the target's reap ignores it) on the
 * ring behind target_fd, and submit at once, so the target is woken now and
 * the kernel has resolved target_fd before this returns. The sender's own
 * CQE carries op (NULL: ignored); it is skipped on success when the kernel
 * can (IORING_FEAT_CQE_SKIP), so op->cb mostly sees failures the kernel
 * found after taking the SQE (-EOVERFLOW, -ENOMEM, ...): the target was
 * not woken. Returns 0 or -errno from the submit (then no CQE comes).
 */
int corio__ring_msg_doorbell(struct corio__ring *r, int target_fd, struct corio__op *op);

/* ---- runtime messages (uring/log.c) ------------------------------------------ */
/*
 * One line (no trailing newline; "corio: ..." by convention) to the
 * application's hook (corio_set_log) or, by default, stderr. Any thread;
 * serialized. Not from a signal handler (it takes a lock).
 */
void corio__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
