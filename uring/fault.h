/* SPDX-License-Identifier: MIT */
/*
 * uring/fault.h - fault injection for tests (build with -DCORIO_FAULTS:
 * `make test FAULTS=1`; without it every hook below is an empty inline).
 *
 * Enabled at run time by CORIO_FAULTS="seed=N,rate=R,kinds=K1+K2...",
 * read at each ring's setup. Every fault is one the kernel can really
 * produce, injected where no byte is lost by the injection itself: SQEs are
 * rewritten just before they are handed to the kernel (uring/fault.c says
 * how), never a CQE after the kernel did the work. Kinds:
 *
 *   transparent (corio absorbs them; the suites pass unchanged)
 *     short    a stream send/recv SQE asks for fewer bytes (a short transfer)
 *     mshot    a multishot recv/accept is submitted single-shot: it ends
 *              after one CQE, without IORING_CQE_F_MORE, and must be re-armed
 *     enobufs  a buffer-select multishot recv completes with -ENOBUFS
 *     retry    an accept completes with -EINTR or -EAGAIN
 *     sqfull   corio__ring_sqe() finds the SQ full once
 *     busy     io_uring_enter answers -EBUSY or -EAGAIN without submitting
 *     sqbusy   the submit corio__ring_sqe() makes for a full SQ is refused:
 *              the CQ is drained into the stash, dispatched by the next reap
 *              (it used to run callbacks inline and hang: test_faults)
 *   surfacing (the caller gets -errno)
 *     reset    -ECONNRESET on a stream send/recv
 *     pipe     -EPIPE on a stream send
 *     eio      -EIO on a read/write/fsync/fallocate of a regular file
 *     enomem   -ENOMEM on any op above, connect and openat
 *     cancel   -ECANCELED on any of those (the kernel cancelled it: exit,
 *              io-wq teardown)
 *   the ring emulator's (uring/emu_ops.c; injected at its syscall sites and
 *   epoll waits, where short, reset and pipe are injected too)
 *     eagain   transparent: a recv/send/accept/read answers EAGAIN though
 *              epoll said ready (a stale edge: another reader took the data,
 *              a datagram failed its checksum); the next arrival's edge
 *              follows, given by re-arming the fd's record
 *     hup      an epoll edge carries EPOLLERR|EPOLLHUP the file does not
 *              have: every op on the fd retries and its syscall tells the
 *              truth; a poll of the fd sees them (net/'s hang-up poll then
 *              receives with single-shot recvs). In no alias, since a
 *              user's corio_poll would see a hang-up that is not there.
 *   aliases: transparent, surfacing, all (transparent and surfacing)
 *
 * Errors complete through IORING_OP_NOP with IORING_NOP_INJECT_RESULT
 * (probed once; without it only short, mshot, sqfull and busy are injected;
 * the emulator has it).
 * Counts are per process (atomic), printed at exit on stderr, or appended
 * as one line to the file CORIO_FAULTS_LOG names (make test sums them).
 */
#ifndef CORIO_URING_FAULT_H
#define CORIO_URING_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct corio__ring;

enum corio__fault_kind {
	CORIO__FK_SHORT,
	CORIO__FK_MSHOT,
	CORIO__FK_ENOBUFS,
	CORIO__FK_RETRY,
	CORIO__FK_SQFULL,
	CORIO__FK_BUSY,
	CORIO__FK_SQBUSY,
	CORIO__FK_RESET,
	CORIO__FK_PIPE,
	CORIO__FK_EIO,
	CORIO__FK_ENOMEM,
	CORIO__FK_CANCEL,
	CORIO__FK_EAGAIN,
	CORIO__FK_HUP,
	CORIO__FK_MAX
};

/* Parse CORIO_FAULTS and CORIO_FAULTS_LOG (every build; a build without
 * FAULTS=1 injects nothing) into r, before the ring is set up: 0, or
 * -EINVAL with the variable named in err. */
int corio__fault_env(struct corio__ring *r, char *err, size_t errlen);

/* What a syscall site of the emulator does (corio__fault_syscall). */
enum { CORIO__FAULT_OTHER, CORIO__FAULT_RECV, CORIO__FAULT_SEND };

#ifdef CORIO_FAULTS
/* Per-ring state, embedded in struct corio__ring. */
struct corio__fault_ring {
	uint64_t rng;
	uint32_t kinds;     /* 1u << CORIO__FK_* */
	uint32_t threshold; /* a fault when the next 32 random bits are below it */
	bool nop_inject;    /* IORING_NOP_INJECT_RESULT works */
	uint64_t seed;      /* the spec's, for the exit summary */
	double rate;
};

/* After the ring is set up: probe what injection needs, hook the summary. */
void corio__fault_init(struct corio__ring *r);
/* Rewrite the SQEs queued since the last flush; call before every submit. */
void corio__fault_sq(struct corio__ring *r);
/* Pretend the SQ is full (once per call). */
bool corio__fault_sqfull(struct corio__ring *r);
/* 0, or -EBUSY / -EAGAIN to return instead of entering the kernel;
 * sq_full: the submit of corio__ring_sqe() with a full SQ (kind sqbusy). */
int corio__fault_enter(struct corio__ring *r, bool sq_full);
/* Faults injected so far in this process, of one kind. */
uint64_t corio__fault_count(enum corio__fault_kind k);
const char *corio__fault_name(enum corio__fault_kind k);
/* The emulator's syscall sites. what: CORIO__FAULT_RECV or _SEND (a
 * transfer: len its length, NULL when it must not shrink) or _OTHER.
 * 0: make the call (*len perhaps shrunk: short, stream sockets only); or
 * the errno the call is to "return": EAGAIN, ECONNRESET (stream
 * transfers), EPIPE (stream sends). */
int corio__fault_syscall(struct corio__ring *r, int fd, size_t *len, int what);
/* An epoll event's bits, with EPOLLERR|EPOLLHUP added when hup hits. */
uint32_t corio__fault_events(struct corio__ring *r, uint32_t events);
#else
static inline void corio__fault_init(struct corio__ring *r) { (void)r; }
static inline void corio__fault_sq(struct corio__ring *r) { (void)r; }
static inline bool corio__fault_sqfull(struct corio__ring *r) { (void)r; return false; }
static inline int corio__fault_enter(struct corio__ring *r, bool sq_full)
{
	(void)r;
	(void)sq_full;
	return 0;
}
static inline int corio__fault_syscall(struct corio__ring *r, int fd, size_t *len, int what)
{
	(void)r;
	(void)fd;
	(void)len;
	(void)what;
	return 0;
}
static inline uint32_t corio__fault_events(struct corio__ring *r, uint32_t events)
{
	(void)r;
	return events;
}
#endif

#endif
