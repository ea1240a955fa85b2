/* SPDX-License-Identifier: MIT */
/*
 * core/fileio.c - the one file reader (and writer) at an offset, for fs's
 * calls and net's file copies alike: the ring's op where the probe has it,
 * else the syscall on a thread of the blocking-work pool (core/work.c), so
 * a file that is not in memory parks one fiber, never the shard. libuv's
 * uv__iou_fs_read_or_write is the model: try the ring, else the pool.
 *
 * It lives in core because both net (corio_stream_sendfile over TLS, the
 * copy behind corio_sendfile) and fs (corio_read_at and friends) need it
 * and neither may call the other; core is the lowest area that can park a
 * fiber. What is fs's own stays in fs: the argument checks, CORIO_FS_SYNC
 * (which asks for the pool by CORIO__RW_BLOCKING), pipes and FIFOs on the
 * fallback (a readiness wait, not a pool thread), the explanation of an
 * O_DIRECT EINVAL, the counters.
 *
 * On the pool the fiber waits for the syscall however it is cancelled
 * meanwhile (the syscall uses the caller's buffer); with the pool's queue
 * full it runs here on the shard, as fs's fallback did before the pool.
 */
#include "core/internal.h"

#include <errno.h>
#include <sys/uio.h>

static bool is_read(const struct corio__file_rw *q)
{
	return q->opcode == IORING_OP_READ || q->opcode == IORING_OP_READV;
}

/* The syscall for q with RWF flags rwf: the count or -errno. */
static int64_t rw_sys(const struct corio__file_rw *q, int rwf)
{
	struct iovec one = { .iov_base = (void *)q->addr, .iov_len = q->len };
	bool vec = q->opcode == IORING_OP_READV || q->opcode == IORING_OP_WRITEV;
	const struct iovec *iov = vec ? q->addr : &one;
	int cnt = vec ? (int)q->len : 1;
	off_t off = q->off == CORIO_OFF_CUR ? -1 : (off_t)q->off; /* -1: the file position */
	ssize_t r = is_read(q) ? preadv2(q->fd, iov, cnt, off, rwf)
			       : pwritev2(q->fd, iov, cnt, off, rwf);

	return r < 0 ? -errno : r;
}

static intptr_t rw_job(void *arg)
{
	return (intptr_t)rw_sys(arg, 0);
}

int64_t corio__file_rw(struct corio__file_rw *q)
{
	struct corio__shard *sh = corio__shard();
	struct io_uring_sqe *sqe;
	struct corio__op op;
	intptr_t r;
	int ret;

	q->blocking = false;
	if ((q->flags & CORIO__RW_CACHED_FIRST) && is_read(q) && q->off != CORIO_OFF_CUR) {
		/* What is in the page cache is read on the spot: one syscall,
		 * no round trip through the loop (a 64 KiB file over TLS took
		 * four) and no pool hop. RWF_NOWAIT (4.14) refuses with EAGAIN
		 * rather than wait for the disk (and EOPNOTSUPP where the file
		 * has no such path); then the ring or the pool reads it. */
		int64_t n = rw_sys(q, RWF_NOWAIT);

		if (n >= 0)
			return n; /* 0: end of file (RWF_NOWAIT says EAGAIN, not 0) */
	}
	if (sh && !(q->flags & CORIO__RW_BLOCKING) && corio__ring_has_op(&sh->ring, q->opcode)) {
		ret = corio__op_begin_who(&op, &sqe, q->who);
		if (ret)
			return ret;
		io_uring_prep_rw(q->opcode, sqe, q->fd, q->addr, q->len, q->off);
		return corio__op_wait(&op);
	}
	/* No ring op (the epoll fallback; a kernel before 5.6), or asked for
	 * the blocking path: the ring path's checks first, then the pool. */
	ret = corio__may_block(q->who);
	if (ret)
		return ret;
	ret = corio__work_or_here(rw_job, q, &r);
	if (ret)
		return ret; /* cancelled or past the deadline before it started */
	q->blocking = true;
	return (int64_t)r;
}

ssize_t corio__file_read(int fd, void *buf, size_t len, off_t off, const char *who)
{
	struct corio__file_rw q = { .who = who, .opcode = IORING_OP_READ, .fd = fd, .addr = buf,
				    .len = len > CORIO_FS_MAX_RW ? CORIO_FS_MAX_RW : (uint32_t)len,
				    .off = (uint64_t)off, .flags = CORIO__RW_CACHED_FIRST };

	return (ssize_t)corio__file_rw(&q);
}
