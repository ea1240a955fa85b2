/* SPDX-License-Identifier: MIT */
/*
 * uring/fault.c - fault injection (see fault.h). Compiled to the parser of
 * CORIO_FAULTS alone unless -DCORIO_FAULTS.
 *
 * Where, and why there. A CQE the kernel already produced cannot be
 * rewritten safely: turning a successful recv into an error loses the bytes
 * the kernel consumed, and shrinking a send's result makes corio send again
 * what already went out. So every per-op fault is applied to the SQE, in
 * the window between the caller's prep and the flush of the SQ tail to the
 * kernel (corio__fault_sq(), called before each submit in ring.c and
 * msg_ring.c):
 *  - short: sqe->len shrinks; the kernel moves at most that many bytes, a
 *    real short transfer. Stream sockets only (SO_TYPE), since a shrunk
 *    datagram would be truncated, which is loss, not a fault.
 *  - mshot: the multishot flag is cleared; the kernel completes the op once
 *    without IORING_CQE_F_MORE, as it does when it ends a multishot (CQ
 *    overflow, an error). The recv's byte limit (optlen) goes too: the
 *    kernel accepts it only on a multishot.
 *  - errors: the SQE becomes IORING_OP_NOP with IORING_NOP_INJECT_RESULT
 *    (Linux 6.10-ish; probed), same user_data, same link flags, so the op
 *    completes with -errno before it touched anything: nothing was read,
 *    sent, accepted or opened, no provided buffer was taken. A failed head
 *    of a link fails its LINK_TIMEOUT with -ECANCELED, as a real error does.
 * Never touched: SQEs whose CQE nobody waits for (user_data 0), timeouts,
 * cancels, closes, polls (the shard's eventfd poll among them), MSG_RING
 * doorbells, reads and writes of anything but regular files (the shard's
 * eventfd read).
 *
 * The counters are process-wide atomics, not shard state: they are a test
 * harness's tally across every shard and runtime of the process, read by
 * test_faults and printed at exit.
 */
#include "uring/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- CORIO_FAULTS, parsed in every build ------------------------------------------ */
/*
 * A build without fault injection still parses the spec, so a bad one is
 * refused the same way everywhere; it then injects nothing, and the
 * variable being set only keeps corio_send in the ring (net/shard.c).
 */

static const char *const names[CORIO__FK_MAX + 3] = {
	[CORIO__FK_SHORT] = "short",   [CORIO__FK_MSHOT] = "mshot",
	[CORIO__FK_ENOBUFS] = "enobufs", [CORIO__FK_RETRY] = "retry",
	[CORIO__FK_SQFULL] = "sqfull", [CORIO__FK_BUSY] = "busy",
	[CORIO__FK_SQBUSY] = "sqbusy",
	[CORIO__FK_RESET] = "reset",   [CORIO__FK_PIPE] = "pipe",
	[CORIO__FK_EIO] = "eio",       [CORIO__FK_ENOMEM] = "enomem",
	[CORIO__FK_CANCEL] = "cancel", [CORIO__FK_EAGAIN] = "eagain",
	[CORIO__FK_HUP] = "hup",
	[CORIO__FK_MAX] = "transparent", [CORIO__FK_MAX + 1] = "surfacing", /* aliases */
};

#define TRANSPARENT                                                                   \
	((1u << CORIO__FK_SHORT) | (1u << CORIO__FK_MSHOT) | (1u << CORIO__FK_ENOBUFS) | \
	 (1u << CORIO__FK_RETRY) | (1u << CORIO__FK_SQFULL) | (1u << CORIO__FK_BUSY) |    \
	 (1u << CORIO__FK_SQBUSY) | (1u << CORIO__FK_EAGAIN))
/* kinds only the emulator's sites inject */
#define EMU_SITE ((1u << CORIO__FK_EAGAIN) | (1u << CORIO__FK_HUP))
#define SURFACING                                                                    \
	((1u << CORIO__FK_RESET) | (1u << CORIO__FK_PIPE) | (1u << CORIO__FK_EIO) |     \
	 (1u << CORIO__FK_ENOMEM) | (1u << CORIO__FK_CANCEL))

struct spec {
	uint64_t seed;
	double rate;
	uint32_t kinds;
};

/* "K1+K2...", '+', ':' or '|' between kinds: 0 or -EINVAL */
static int parse_kinds(const char *p, size_t len, uint32_t *kinds)
{
	size_t bad, badlen;
	uint32_t m;

	if (corio__env_mask(p, len, "+:|", names, &m, &bad, &badlen))
		return -EINVAL;
	if (m == UINT32_MAX)
		m = TRANSPARENT | SURFACING; /* "all": hup only by its name (fault.h) */
	if (m & (1u << CORIO__FK_MAX))
		m |= TRANSPARENT;
	if (m & (1u << (CORIO__FK_MAX + 1)))
		m |= SURFACING;
	*kinds |= m & (TRANSPARENT | SURFACING | (1u << CORIO__FK_HUP));
	return 0;
}

/* "seed=N,rate=R,kinds=K1+K2..." (a bare kind counts as kinds=): 0 or -EINVAL */
static int parse_spec(const char *env, struct spec *sp, char *err, size_t errlen)
{
	sp->seed = 1;
	sp->rate = 0.02;
	sp->kinds = 0;
	for (const char *p = env;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		int bad;

		if (len > 5 && !strncmp(p, "seed=", 5))
			bad = corio__env_num(p + 5, len - 5, 0, UINT64_MAX, &sp->seed);
		else if (len > 5 && !strncmp(p, "rate=", 5))
			bad = corio__env_real(p + 5, len - 5, 0, 1, &sp->rate);
		else if (len > 6 && !strncmp(p, "kinds=", 6))
			bad = parse_kinds(p + 6, len - 6, &sp->kinds);
		else
			bad = parse_kinds(p, len, &sp->kinds);
		if (bad)
			return corio__env_fail(err, errlen, "CORIO_FAULTS", env,
					       "bad item '%.*s' (expected seed=N, rate=0..1, "
					       "kinds=K+K..., K a kind, transparent, surfacing or all)",
					       (int)len, p);
		if (!end)
			return 0;
		p = end + 1;
	}
}

#ifdef CORIO_FAULTS
/* include/uapi/linux/io_uring.h, Linux 6.10+; liburing 2.3 lacks it */
#ifndef IORING_NOP_INJECT_RESULT
#define IORING_NOP_INJECT_RESULT (1U << 0)
#endif

static _Atomic uint64_t counts[CORIO__FK_MAX];
static _Atomic uint64_t ring_seq;
static _Atomic int nop_probe; /* 0 unknown, 1 works, -1 not */
static _Atomic int exit_hooked;
static char summary_hdr[128];
static char log_path[4096]; /* CORIO_FAULTS_LOG when the summary was hooked */

const char *corio__fault_name(enum corio__fault_kind k)
{
	return (unsigned)k < CORIO__FK_MAX ? names[k] : "?";
}

uint64_t corio__fault_count(enum corio__fault_kind k)
{
	return (unsigned)k < CORIO__FK_MAX ? atomic_load(&counts[k]) : 0;
}

static void count(enum corio__fault_kind k)
{
	atomic_fetch_add_explicit(&counts[k], 1, memory_order_relaxed);
}

static void print_summary(void)
{
	char line[512];
	size_t n = (size_t)snprintf(line, sizeof(line), "corio faults (%s):", summary_hdr);
	const char *log = log_path;

	for (unsigned k = 0; k < CORIO__FK_MAX && n < sizeof(line); k++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %s=%llu", names[k],
				      (unsigned long long)atomic_load(&counts[k]));
	if (n >= sizeof(line) - 1)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (log && *log) {
		/* one write with O_APPEND: lines of concurrent processes do not mix */
		int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);

		if (fd >= 0) {
			ssize_t w = write(fd, line, n);

			(void)w;
			close(fd);
		}
	} else {
		fwrite(line, 1, n, stderr);
	}
}

/* splitmix64: small, seedable, good enough to pick faults */
static uint64_t next(struct corio__fault_ring *f)
{
	uint64_t z = (f->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static bool roll(struct corio__fault_ring *f)
{
	return f->threshold && (uint32_t)next(f) < f->threshold;
}

static bool probe_nop_inject(struct corio__ring *r)
{
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	int got = -1;
	int known = atomic_load(&nop_probe);

	if (known)
		return known > 0;
	/* At ring setup, before anything else is queued or in flight. */
	sqe = io_uring_get_sqe(&r->ring);
	if (!sqe)
		return false;
	io_uring_prep_nop(sqe);
	sqe->rw_flags = IORING_NOP_INJECT_RESULT;
	sqe->len = (uint32_t)-EBADMSG;
	io_uring_sqe_set_data64(sqe, 1);
	if (io_uring_submit_and_wait(&r->ring, 1) == 1 && io_uring_peek_cqe(&r->ring, &cqe) == 0) {
		got = cqe->res;
		io_uring_cqe_seen(&r->ring, cqe);
	}
	atomic_store(&nop_probe, got == -EBADMSG ? 1 : -1);
	return got == -EBADMSG;
}

/* At ring setup, after the ring works: the probe and the exit summary. */
void corio__fault_init(struct corio__ring *r)
{
	struct corio__fault_ring *f = &r->fault;
	const char *log = NULL;
	char why[8];

	if (!f->kinds)
		return;
	if (r->emu)
		f->nop_inject = true; /* emu.c honours it (and the probe is per process) */
	else if (f->kinds & ((1u << CORIO__FK_ENOBUFS) | (1u << CORIO__FK_RETRY) | SURFACING))
		f->nop_inject = probe_nop_inject(r);
	if (!atomic_exchange(&exit_hooked, 1)) {
		snprintf(summary_hdr, sizeof(summary_hdr), "seed=%llu rate=%g%s",
			 (unsigned long long)f->seed, f->rate,
			 f->nop_inject || !(f->kinds & SURFACING) ? ""
								   : " no NOP_INJECT_RESULT");
		/* validated by corio__fault_env already */
		if (corio__env_str("CORIO_FAULTS_LOG", &log, why, sizeof(why)) > 0)
			snprintf(log_path, sizeof(log_path), "%s", log);
		atexit(print_summary);
	}
}

static int sock_type(int fd)
{
	int type = -1;
	socklen_t len = sizeof(type);

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
		return -1;
	return type;
}

static bool regular_file(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
}

/* Which kinds can hit this SQE (fixed files: the fd is not ours to inspect). */
static uint32_t applicable(const struct io_uring_sqe *sqe)
{
	uint32_t m = 0;
	bool stream;

	if (sqe->flags & IOSQE_FIXED_FILE)
		return 0;
	switch (sqe->opcode) {
	case IORING_OP_RECV:
		stream = sock_type(sqe->fd) == SOCK_STREAM;
		if (stream && !(sqe->flags & IOSQE_BUFFER_SELECT) && sqe->len > 1)
			m |= 1u << CORIO__FK_SHORT;
		if (sqe->ioprio & IORING_RECV_MULTISHOT) {
			m |= 1u << CORIO__FK_MSHOT;
			if (sqe->flags & IOSQE_BUFFER_SELECT)
				m |= 1u << CORIO__FK_ENOBUFS;
		}
		if (stream)
			m |= 1u << CORIO__FK_RESET;
		m |= (1u << CORIO__FK_ENOMEM) | (1u << CORIO__FK_CANCEL);
		break;
	case IORING_OP_RECVMSG:
		/* not mshot: a single-shot recvmsg lays out a selected buffer
		 * differently (no io_uring_recvmsg_out header) */
		if ((sqe->ioprio & IORING_RECV_MULTISHOT) && (sqe->flags & IOSQE_BUFFER_SELECT))
			m |= 1u << CORIO__FK_ENOBUFS;
		m |= (1u << CORIO__FK_ENOMEM) | (1u << CORIO__FK_CANCEL);
		break;
	case IORING_OP_SEND:
	case IORING_OP_SEND_ZC:
	case IORING_OP_SENDMSG:
		stream = sock_type(sqe->fd) == SOCK_STREAM;
		if (stream && sqe->opcode != IORING_OP_SENDMSG && sqe->len > 1)
			m |= 1u << CORIO__FK_SHORT;
		if (stream)
			m |= (1u << CORIO__FK_RESET) | (1u << CORIO__FK_PIPE);
		m |= (1u << CORIO__FK_ENOMEM) | (1u << CORIO__FK_CANCEL);
		break;
	case IORING_OP_ACCEPT:
		if (sqe->ioprio & IORING_ACCEPT_MULTISHOT)
			m |= 1u << CORIO__FK_MSHOT;
		m |= (1u << CORIO__FK_RETRY) | (1u << CORIO__FK_ENOMEM) | (1u << CORIO__FK_CANCEL);
		break;
	case IORING_OP_CONNECT:
	case IORING_OP_OPENAT:
		m |= (1u << CORIO__FK_ENOMEM) | (1u << CORIO__FK_CANCEL);
		break;
	case IORING_OP_READ:
	case IORING_OP_WRITE:
	case IORING_OP_READV:
	case IORING_OP_WRITEV:
	case IORING_OP_FSYNC:
	case IORING_OP_FALLOCATE:
		if (regular_file(sqe->fd))
			m |= (1u << CORIO__FK_EIO) | (1u << CORIO__FK_ENOMEM) |
			     (1u << CORIO__FK_CANCEL);
		break;
	default:
		break;
	}
	return m;
}

static void nop_fail(struct io_uring_sqe *sqe, int err)
{
	uint64_t ud = sqe->user_data;
	uint8_t keep = sqe->flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK | IOSQE_IO_DRAIN);

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = IORING_OP_NOP;
	sqe->flags = keep;
	sqe->rw_flags = IORING_NOP_INJECT_RESULT;
	sqe->len = (uint32_t)err;
	sqe->user_data = ud;
}

static void inject(struct corio__fault_ring *f, struct io_uring_sqe *sqe,
		   enum corio__fault_kind k)
{
	static const int retry_err[2] = { -EINTR, -EAGAIN };
	uint32_t zero = 0;

	switch (k) {
	case CORIO__FK_SHORT:
		sqe->len = 1 + (uint32_t)(next(f) % (sqe->len - 1));
		break;
	case CORIO__FK_MSHOT:
		if (sqe->opcode == IORING_OP_RECV) {
			sqe->ioprio &= (uint16_t)~IORING_RECV_MULTISHOT;
			memcpy(&sqe->addr_len, &zero, sizeof(zero)); /* optlen: the byte limit */
		} else {
			sqe->ioprio &= (uint16_t)~IORING_ACCEPT_MULTISHOT;
		}
		break;
	case CORIO__FK_ENOBUFS:
		nop_fail(sqe, -ENOBUFS);
		break;
	case CORIO__FK_RETRY:
		nop_fail(sqe, retry_err[next(f) & 1]);
		break;
	case CORIO__FK_RESET:
		nop_fail(sqe, -ECONNRESET);
		break;
	case CORIO__FK_PIPE:
		nop_fail(sqe, -EPIPE);
		break;
	case CORIO__FK_EIO:
		nop_fail(sqe, -EIO);
		break;
	case CORIO__FK_ENOMEM:
		nop_fail(sqe, -ENOMEM);
		break;
	case CORIO__FK_CANCEL:
		nop_fail(sqe, -ECANCELED);
		break;
	default:
		return;
	}
	count(k);
}

void corio__fault_sq(struct corio__ring *r)
{
	struct corio__fault_ring *f = &r->fault;
	struct io_uring_sq *sq = &r->ring.sq;
	uint32_t per_sqe = f->kinds & ~((1u << CORIO__FK_SQFULL) | (1u << CORIO__FK_BUSY) |
					(1u << CORIO__FK_SQBUSY) | EMU_SITE);

	if (r->emu) /* injected at the emulator's syscall sites instead */
		per_sqe &= ~(EMU_SITE | (1u << CORIO__FK_SHORT) | (1u << CORIO__FK_RESET) |
			     (1u << CORIO__FK_PIPE));
	if (!f->threshold || !per_sqe)
		return;
	if (!f->nop_inject)
		per_sqe &= (1u << CORIO__FK_SHORT) | (1u << CORIO__FK_MSHOT);
	for (unsigned i = sq->sqe_head; i != sq->sqe_tail; i++) {
		struct io_uring_sqe *sqe = &sq->sqes[i & sq->ring_mask];
		uint32_t m;
		unsigned n = 0, pick;
		enum corio__fault_kind k = CORIO__FK_MAX;

		if (!sqe->user_data || sqe->user_data == LIBURING_UDATA_TIMEOUT || !roll(f))
			continue;
		m = applicable(sqe) & per_sqe;
		if (!m)
			continue;
		for (uint32_t x = m; x; x &= x - 1)
			n++;
		pick = (unsigned)(next(f) % n);
		for (unsigned b = 0; b < CORIO__FK_MAX; b++)
			if ((m & (1u << b)) && pick-- == 0) {
				k = (enum corio__fault_kind)b;
				break;
			}
		inject(f, sqe, k);
	}
}

bool corio__fault_sqfull(struct corio__ring *r)
{
	struct corio__fault_ring *f = &r->fault;
	struct io_uring_sq *sq = &r->ring.sq;

	if (!(f->kinds & (1u << CORIO__FK_SQFULL)) || !roll(f))
		return false;
	/* Never between a linked op and its LINK_TIMEOUT (corio__op_begin
	 * reserved room for both): a submit there would split the link. */
	if (sq->sqe_tail != sq->sqe_head &&
	    (sq->sqes[(sq->sqe_tail - 1) & sq->ring_mask].flags & IOSQE_IO_LINK))
		return false;
	count(CORIO__FK_SQFULL);
	return true;
}

int corio__fault_enter(struct corio__ring *r, bool sq_full)
{
	struct corio__fault_ring *f = &r->fault;
	enum corio__fault_kind k = sq_full ? CORIO__FK_SQBUSY : CORIO__FK_BUSY;

	if (!(f->kinds & (1u << k)) || !roll(f))
		return 0;
	count(k);
	return (next(f) & 1) ? -EBUSY : -EAGAIN;
}
/*
 * The emulator's syscall sites (uring/emu_ops.c). As with SQEs, nothing is lost
 * by the injection: the call is not made (EAGAIN, ECONNRESET, EPIPE: it
 * moved no byte) or asks for fewer bytes (short: the kernel moves at most
 * that many, a real partial transfer). One roll per call.
 */
int corio__fault_syscall(struct corio__ring *r, int fd, size_t *len, int what)
{
	struct corio__fault_ring *f = &r->fault;
	uint32_t m = f->kinds & (1u << CORIO__FK_EAGAIN);
	unsigned n = 0, pick;

	if (!f->threshold || !roll(f))
		return 0;
	if (what != CORIO__FAULT_OTHER && (f->kinds & ((1u << CORIO__FK_SHORT) |
						       (1u << CORIO__FK_RESET) |
						       (1u << CORIO__FK_PIPE))) &&
	    sock_type(fd) == SOCK_STREAM) {
		if (len && *len > 1)
			m |= f->kinds & (1u << CORIO__FK_SHORT);
		m |= f->kinds & (1u << CORIO__FK_RESET);
		if (what == CORIO__FAULT_SEND)
			m |= f->kinds & (1u << CORIO__FK_PIPE);
	}
	for (uint32_t x = m; x; x &= x - 1)
		n++;
	if (!n)
		return 0;
	pick = (unsigned)(next(f) % n);
	for (unsigned b = 0; b < CORIO__FK_MAX; b++) {
		if (!(m & (1u << b)) || pick-- != 0)
			continue;
		count((enum corio__fault_kind)b);
		switch (b) {
		case CORIO__FK_SHORT:
			*len = 1 + (size_t)(next(f) % (*len - 1));
			return 0;
		case CORIO__FK_RESET:
			return ECONNRESET;
		case CORIO__FK_PIPE:
			return EPIPE;
		default:
			return EAGAIN;
		}
	}
	return 0;
}

uint32_t corio__fault_events(struct corio__ring *r, uint32_t events)
{
	struct corio__fault_ring *f = &r->fault;

	if (!(f->kinds & (1u << CORIO__FK_HUP)) || !roll(f))
		return events;
	count(CORIO__FK_HUP);
	return events | EPOLLERR | EPOLLHUP;
}
#endif /* CORIO_FAULTS */

int corio__fault_env(struct corio__ring *r, char *err, size_t errlen)
{
	const char *env = NULL, *log = NULL;
	struct spec sp;
	int ret = corio__env_str("CORIO_FAULTS", &env, err, errlen);

	if (ret >= 0)
		ret = corio__env_str("CORIO_FAULTS_LOG", &log, err, errlen);
	if (ret < 0 || !env)
		return ret < 0 ? ret : 0;
	ret = parse_spec(env, &sp, err, errlen);
	if (ret < 0)
		return ret;
	r->faults_env = true;
#ifdef CORIO_FAULTS
	{
		struct corio__fault_ring *f = &r->fault;

		f->kinds = sp.kinds ? sp.kinds : TRANSPARENT;
		f->seed = sp.seed;
		f->rate = sp.rate;
		f->threshold = (uint32_t)(sp.rate * 4294967295.0);
		f->rng = sp.seed * 0x2545f4914f6cdd1dull + atomic_fetch_add(&ring_seq, 1);
	}
#endif
	return 0;
}

