/* SPDX-License-Identifier: MIT */
/*
 * fs/file.c - file calls: each is one io_uring op waited on by the calling
 * fiber (corio__op_begin/corio__op_wait, so cancel, deadlines and per-call
 * timeouts apply), or, where the kernel lacks the op, the blocking syscall.
 *
 * Every call is described by a struct req, so that preparing the SQE, the
 * synchronous fallback and the accounting are each written once. Argument
 * errors are caught before anything is submitted and explained through
 * corio_last_error(); an EINVAL from the kernel on an O_DIRECT file is
 * explained after the fact (alignment), which costs two syscalls on that
 * error path only.
 */
#include "fs/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

struct req {
	const char *fn;         /* public name, for messages */
	enum corio_fs_kind kind;
	uint8_t opcode;         /* IORING_OP_* */
	int fd, fd2;            /* fd or dirfd; rename: new dirfd */
	const void *addr;       /* buffer, iovec array or path */
	const void *addr2;      /* rename: new path; statx: result */
	uint32_t len;           /* bytes, iovecs, mode or statx mask */
	uint64_t off;           /* offset; fallocate: length */
	uint32_t flags;         /* open, fsync, statx, rename or unlink flags; fallocate mode */
	uint64_t off2;          /* fallocate: offset */
};

static void prep(struct io_uring_sqe *sqe, const struct req *q)
{
	switch (q->opcode) {
	case IORING_OP_READ:
	case IORING_OP_WRITE:
	case IORING_OP_READV:
	case IORING_OP_WRITEV:
		io_uring_prep_rw(q->opcode, sqe, q->fd, q->addr, q->len, q->off);
		break;
	case IORING_OP_OPENAT:
		io_uring_prep_openat(sqe, q->fd, q->addr, (int)q->flags, (mode_t)q->len);
		break;
	case IORING_OP_CLOSE:
		io_uring_prep_close(sqe, q->fd);
		break;
	case IORING_OP_FSYNC:
		io_uring_prep_fsync(sqe, q->fd, q->flags);
		break;
	case IORING_OP_FALLOCATE:
		io_uring_prep_fallocate(sqe, q->fd, (int)q->flags, (off_t)q->off2, (off_t)q->off);
		break;
	case IORING_OP_STATX:
		io_uring_prep_statx(sqe, q->fd, q->addr, (int)q->flags, q->len,
				    (struct statx *)q->addr2);
		break;
	case IORING_OP_RENAMEAT:
		io_uring_prep_renameat(sqe, q->fd, q->addr, q->fd2, q->addr2, q->flags);
		break;
	case IORING_OP_UNLINKAT:
		io_uring_prep_unlinkat(sqe, q->fd, q->addr, (int)q->flags);
		break;
	case IORING_OP_MKDIRAT:
		io_uring_prep_mkdirat(sqe, q->fd, q->addr, (mode_t)q->len);
		break;
	default:
		assert(!"fs: unknown opcode");
	}
}

/* The blocking equivalent of q, for kernels without the op (see fs.h). */
static int64_t run_sync(const struct req *q)
{
	int64_t r;

	switch (q->opcode) { /* reads and writes: core/fileio.c */
	case IORING_OP_OPENAT:
		r = openat(q->fd, q->addr, (int)q->flags, (mode_t)q->len);
		break;
	case IORING_OP_CLOSE:
		r = close(q->fd);
		break;
	case IORING_OP_FSYNC:
		r = (q->flags & IORING_FSYNC_DATASYNC) ? fdatasync(q->fd) : fsync(q->fd);
		break;
	case IORING_OP_FALLOCATE:
		r = fallocate(q->fd, (int)q->flags, (off_t)q->off2, (off_t)q->off);
		break;
	case IORING_OP_STATX:
		r = statx(q->fd, q->addr, (int)q->flags, q->len, (struct statx *)q->addr2);
		break;
	case IORING_OP_RENAMEAT:
		r = renameat2(q->fd, q->addr, q->fd2, q->addr2, q->flags);
		break;
	case IORING_OP_UNLINKAT:
		r = unlinkat(q->fd, q->addr, (int)q->flags);
		break;
	case IORING_OP_MKDIRAT:
		r = mkdirat(q->fd, q->addr, (mode_t)q->len);
		break;
	default:
		assert(!"fs: unknown opcode");
		r = -1;
		errno = ENOSYS;
	}
	return r < 0 ? -errno : r;
}

static intptr_t sync_job(void *arg)
{
	return (intptr_t)run_sync(arg);
}

static bool is_rw(const struct req *q)
{
	return q->opcode == IORING_OP_READ || q->opcode == IORING_OP_WRITE ||
	       q->opcode == IORING_OP_READV || q->opcode == IORING_OP_WRITEV;
}

/* A read or write through the runtime's one file reader (core/fileio.c):
 * the ring, or with CORIO__RW_BLOCKING the pool; net's file copies use the
 * same. */
static int64_t run_rw(struct corio__fs *fs, const struct req *q, unsigned flags)
{
	struct corio__file_rw rw = { .who = q->fn, .opcode = q->opcode, .fd = q->fd,
				     .addr = q->addr, .len = q->len, .off = q->off,
				     .flags = flags };
	int64_t r = corio__file_rw(&rw);

	if (rw.blocking && fs)
		CORIO__STAT_ADD(fs->st.sync_fallbacks, 1);
	return r;
}

/* The blocking fallback, on a thread of the blocking-work pool (core/work.c)
 * so the shard keeps serving; the fiber waits for the syscall however it is
 * cancelled meanwhile, since the syscall uses the caller's buffers. With the
 * pool's queue full (or no thread to be had) the syscall runs here on the
 * shard, as it did before the pool existed. */
static int64_t run_blocking(struct corio__fs *fs, const struct req *q)
{
	intptr_t r;
	int ret;

	if (is_rw(q))
		return run_rw(fs, q, CORIO__RW_BLOCKING);
	ret = corio__work_or_here(sync_job, (void *)q, &r);
	if (ret)
		return ret; /* cancelled or past the deadline before it started */
	CORIO__STAT_ADD(fs->st.sync_fallbacks, 1);
	return (int64_t)r;
}

/* A pipe, FIFO, socket or character device: the fallback's read or write
 * need not hold a pool thread, which a cancel could not take back (the
 * epoll backend and kernels without the ops take this path). It waits for
 * readiness on the shard - corio_poll(), cancellable and bounded by the
 * deadline scope like the ring op it stands for - then makes the call with
 * RWF_NOWAIT. 1 if fd is such a file, 0 if not (a regular file: the pool). */
static bool pollable(const struct req *q)
{
	struct stat st;

	if (!is_rw(q))
		return false;
	return !fstat(q->fd, &st) &&
	       (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISCHR(st.st_mode));
}

static int64_t rw_flags(const struct req *q, int rwf)
{
	struct iovec one = { .iov_base = (void *)q->addr, .iov_len = q->len };
	bool vec = q->opcode == IORING_OP_READV || q->opcode == IORING_OP_WRITEV;
	const struct iovec *iov = vec ? q->addr : &one;
	int cnt = vec ? (int)q->len : 1;
	off_t off = q->off == CORIO_OFF_CUR ? -1 : (off_t)q->off;
	ssize_t r = (q->opcode == IORING_OP_READ || q->opcode == IORING_OP_READV)
			    ? preadv2(q->fd, iov, cnt, off, rwf)
			    : pwritev2(q->fd, iov, cnt, off, rwf);

	return r < 0 ? -errno : r;
}

/* The call without blocking: RWF_NOWAIT, or, where the file refuses it (a
 * FIFO: EOPNOTSUPP), with O_NONBLOCK set on the file around the call. */
static int64_t rw_nowait(const struct req *q)
{
	int64_t r = rw_flags(q, RWF_NOWAIT);
	int fl;

	if (r != -EOPNOTSUPP)
		return r;
	fl = fcntl(q->fd, F_GETFL);
	if (fl < 0)
		return -errno;
	if (!(fl & O_NONBLOCK) && fcntl(q->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -EOPNOTSUPP;
	r = rw_flags(q, 0);
	if (!(fl & O_NONBLOCK))
		fcntl(q->fd, F_SETFL, fl);
	return r;
}

static int64_t run_pollable(struct corio__fs *fs, const struct req *q)
{
	bool rd = q->opcode == IORING_OP_READ || q->opcode == IORING_OP_READV;

	for (;;) {
		int64_t r = rw_nowait(q);
		int ret;

		if (r == -EOPNOTSUPP) /* neither RWF_NOWAIT nor O_NONBLOCK: the pool */
			return run_blocking(fs, q);
		if (r != -EAGAIN) {
			CORIO__STAT_ADD(fs->st.sync_fallbacks, 1);
			return r;
		}
		ret = corio_poll(q->fd, rd ? POLLIN : POLLOUT);
		if (ret < 0)
			return ret;
	}
}

static int64_t run(const struct req *q)
{
	struct corio__fs *fs = corio__fs_of(corio__shard());
	struct io_uring_sqe *sqe;
	struct corio__op op;
	int64_t res;

	if (CORIO__UNLIKELY(fs && fs->sync[q->kind])) {
		/* The ring path's checks: cancelled, or the deadline scope has
		 * passed, and the syscall does not run. (Once it runs it cannot
		 * be interrupted: see fs.h.) */
		res = corio__may_block(q->fn);
		if (res == -EPERM)
			return res;
		if (!res)
			res = pollable(q) ? run_pollable(fs, q) : run_blocking(fs, q);
	} else if (is_rw(q)) {
		res = run_rw(fs, q, 0);
	} else {
		int ret = corio__op_begin_who(&op, &sqe, q->fn);

		if (ret) {
			res = ret;
		} else {
			prep(sqe, q);
			res = corio__op_wait(&op);
		}
	}
	corio__fs_account(fs, q->kind, res);
	return res;
}

/* ---- argument checks and error explanations ---------------------------- */

static int bad_fd(const char *fn, int fd)
{
	return corio__error(-EBADF, "%s: fd %d is negative", fn, fd);
}

static int check_off(const char *fn, uint64_t off)
{
	if (off != CORIO_OFF_CUR && off > (uint64_t)INT64_MAX)
		return corio__error(-EINVAL, "%s: offset %llu is beyond the largest file offset",
				    fn, (unsigned long long)off);
	return 0;
}

static int check_path(const char *fn, const char *path)
{
	if (!path)
		return corio__error(-EINVAL, "%s: path is NULL", fn);
	return 0;
}

/* Direct-I/O alignment of fd without a fiber (error path only): statx
 * STATX_DIOALIGN, else the conventional 512 bytes. */
static void dio_align_sync(int fd, unsigned *mem, unsigned *off)
{
	struct statx stx;

	*mem = *off = 512;
	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_mem_align) {
		*mem = stx.stx_dio_mem_align;
		*off = stx.stx_dio_offset_align;
	}
}

/*
 * The kernel said EINVAL to a read or write. If fd is O_DIRECT, say which
 * of buffer(s), length or offset breaks its alignment.
 */
static void explain_rw_einval(const struct req *q)
{
	const struct iovec *iov = q->addr;
	unsigned mem, offa;
	uintptr_t bad_buf = 0;
	size_t bad_len = 0;
	bool vec = q->opcode == IORING_OP_READV || q->opcode == IORING_OP_WRITEV;
	int fl = fcntl(q->fd, F_GETFL);

	if (fl < 0 || !(fl & O_DIRECT)) {
		corio__error(-EINVAL, "%s: the kernel rejected the request on fd %d (EINVAL)", q->fn,
			     q->fd);
		return;
	}
	dio_align_sync(q->fd, &mem, &offa);
	for (uint32_t i = 0; i < (vec ? q->len : 1); i++) {
		uintptr_t b = (uintptr_t)(vec ? iov[i].iov_base : q->addr);
		size_t l = vec ? iov[i].iov_len : q->len;

		if (!bad_buf && (b % mem))
			bad_buf = b;
		if (!bad_len && (l % offa))
			bad_len = l;
	}
	if (bad_buf)
		corio__error(-EINVAL,
			     "%s: fd %d is O_DIRECT and buffer %p is not aligned to %u bytes "
			     "(use corio_dma_alloc())",
			     q->fn, q->fd, (void *)bad_buf, mem);
	else if (bad_len)
		corio__error(-EINVAL,
			     "%s: fd %d is O_DIRECT and length %zu is not a multiple of %u bytes",
			     q->fn, q->fd, bad_len, offa);
	else if (q->off != CORIO_OFF_CUR && q->off % offa)
		corio__error(-EINVAL,
			     "%s: fd %d is O_DIRECT and offset %llu is not a multiple of %u bytes",
			     q->fn, q->fd, (unsigned long long)q->off, offa);
	else
		corio__error(-EINVAL,
			     "%s: the kernel rejected O_DIRECT I/O on fd %d (EINVAL) although "
			     "buffer, length and offset are aligned to %u/%u bytes",
			     q->fn, q->fd, mem, offa);
}

static ssize_t rw(struct req *q)
{
	int64_t r = run(q);

	if (CORIO__UNLIKELY(r == -EINVAL))
		explain_rw_einval(q);
	return (ssize_t)r;
}

/* ---- open / close ------------------------------------------------------------ */

/*
 * An open that needs no I/O, on the spot: openat2(2) with RESOLVE_CACHED
 * (5.12) resolves the path from the dentry cache alone and says EAGAIN
 * where the lookup would have to read the disk, and O_NONBLOCK keeps the
 * open itself from waiting (a FIFO without a writer, a lease being
 * broken); it is cleared afterwards unless the caller asked for it. That
 * is what the ring's OPENAT tries first inside the kernel, without the
 * round trip through the loop (or, on the epoll fallback, the hop to a
 * pool thread): a file server opens a file per request. Creating,
 * truncating and O_TMPFILE opens, and an EAGAIN, take the ring (or the
 * pool). Returns the fd, -errno, or -EAGAIN: not done here.
 */
#ifndef RESOLVE_CACHED
#define RESOLVE_CACHED 0x20
#endif
int corio__openat2_cached(int dirfd, const char *path, int flags)
{
	struct { uint64_t flags, mode, resolve; } how = { .flags = (uint64_t)(unsigned)flags,
							  .resolve = RESOLVE_CACHED };

	return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

static int open_cached(struct corio__fs *fs, int dirfd, const char *path, int flags)
{
	int fd, ret;

	if (!fs || fs->no_cached_open || fs->forced[CORIO_FS_OPEN] ||
	    (flags & (O_CREAT | O_TRUNC | O_PATH)) || (flags & O_TMPFILE) == O_TMPFILE)
		return -EAGAIN;
	ret = corio__may_block("corio_open");
	if (ret)
		return ret; /* cancelled, or the deadline has passed: no open */
	fd = corio__openat2_cached(dirfd, path, flags | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		ret = -errno;
		/* EAGAIN: not cached (or a lease to break); EINVAL: let the
		 * ring say it and explain it (O_DIRECT); ENXIO: a FIFO with no
		 * reader, which a blocking open waits for */
		if (ret == -EAGAIN || ret == -EINVAL || (ret == -ENXIO && !(flags & O_NONBLOCK)))
			return -EAGAIN;
		return ret;
	}
	if (!(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
		ret = -errno;
		close(fd);
		return ret;
	}
	CORIO__STAT_ADD(fs->st.open_cached, 1);
	return fd;
}

int corio_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	struct req q = { .fn = "corio_open", .kind = CORIO_FS_OPEN, .opcode = IORING_OP_OPENAT,
			 .fd = dirfd, .addr = path, .len = mode,
			 .flags = (uint32_t)(flags | O_CLOEXEC) };
	struct corio__fs *fs = corio__fs_of(corio__shard());
	int ret = check_path(q.fn, path);

	if (ret)
		return ret;
	ret = open_cached(fs, dirfd, path, flags);
	if (ret != -EAGAIN) {
		corio__fs_account(fs, q.kind, ret);
		return ret;
	}
	ret = (int)run(&q);
	if (ret == -EINVAL && (flags & O_DIRECT))
		corio__error(ret, "corio_open: %s: EINVAL with O_DIRECT: its filesystem probably "
			     "does not support direct I/O (tmpfs before 6.6 does not)", path);
	return ret;
}

int corio_open(const char *path, int flags, mode_t mode)
{
	return corio_openat(AT_FDCWD, path, flags, mode);
}

/*
 * Whether close(2) of fd cannot wait: a file on a filesystem whose files
 * have no flush method (local disks, tmpfs, overlayfs over them, procfs,
 * sysfs; a pipe). io_uring's CLOSE runs inline in that case and goes to a
 * kernel worker only for a file with a flush (NFS, FUSE, SMB, ...), which
 * may wait for the network. Without the op (the epoll fallback) the same
 * test keeps a file server's per-request close off the pool: one
 * fstatfs(2) instead of a hop to a pool thread and back. Sockets are not
 * here: SO_LINGER can make their close wait.
 */
static bool close_cannot_wait(int fd)
{
	static const unsigned long local[] = {
		EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC, BTRFS_SUPER_MAGIC, TMPFS_MAGIC,
		OVERLAYFS_SUPER_MAGIC, RAMFS_MAGIC, PROC_SUPER_MAGIC,
		SYSFS_MAGIC, PIPEFS_MAGIC,
	};
	struct statfs sf;

	if (fstatfs(fd, &sf) != 0)
		return false;
	for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
		if ((unsigned long)sf.f_type == local[i])
			return true;
	return false;
}

int corio_close_fd(int fd)
{
	struct req q = { .fn = "corio_close_fd", .kind = CORIO_FS_CLOSE,
			 .opcode = IORING_OP_CLOSE, .fd = fd };
	struct corio__fs *fs = corio__fs_of(corio__shard());
	struct corio_fiber *f = corio__self();
	struct corio_deadline shield;
	int ret;

	if (fd < 0)
		return bad_fd(q.fn, fd);
	if (!f || !fs)
		return (int)run(&q); /* -EPERM off a fiber */
	/*
	 * A close must close (see fs.h): a cancelled fiber's clean-up must not
	 * leak the fd, and a close cancelled half-way (punted to a kernel
	 * worker for a file with a flush method) would leave it unknown
	 * whether the fd is still open, and retrying could close a number
	 * another shard has just been given. So: already cancelled, close(2)
	 * here (cheap on local filesystems); otherwise a cancel arriving
	 * while the close is in flight is noted but does not interrupt it.
	 * The blocking fallback (run on the pool, below) closes whatever the
	 * fiber's deadline or cancel state, like the ring path.
	 */
	if (f->flags & CORIO__FF_CANCELLED) {
		ret = (int)run_sync(&q);
		CORIO__STAT_ADD(fs->st.sync_fallbacks, 1);
		corio__fs_account(fs, q.kind, ret);
		return ret;
	}
	if (fs->sync[CORIO_FS_CLOSE] && !fs->forced[CORIO_FS_CLOSE] && close_cannot_wait(fd)) {
		ret = (int)run_sync(&q); /* the fallback, a local file: on the spot */
		CORIO__STAT_ADD(fs->st.sync_fallbacks, 1);
		corio__fs_account(fs, q.kind, ret);
		return ret;
	}
	/* A deadline scope does not apply either (an expired one would fail
	 * the close before it starts): the shield lifts it for the close. */
	corio_deadline_shield(&shield);
	corio__nocancel_push(f); /* the close runs to its end; the flag is set */
	ret = (int)run(&q);
	corio__nocancel_pop(f);
	corio_deadline_pop(&shield);
	return ret;
}

/* ---- read / write --------------------------------------------------------------- */

static ssize_t rw1(const char *fn, enum corio_fs_kind kind, uint8_t opcode, int fd,
		   const void *buf, size_t len, uint64_t off)
{
	struct req q = { .fn = fn, .kind = kind, .opcode = opcode, .fd = fd, .addr = buf,
			 .off = off };
	int ret;

	if (fd < 0)
		return bad_fd(fn, fd);
	if ((ret = check_off(fn, off)))
		return ret;
	if (!buf && len)
		return corio__error(-EINVAL, "%s: buffer is NULL", fn);
	q.len = len > CORIO_FS_MAX_RW ? CORIO_FS_MAX_RW : (uint32_t)len;
	return rw(&q);
}

ssize_t corio_read_at(int fd, void *buf, size_t len, uint64_t off)
{
	return rw1("corio_read_at", CORIO_FS_READ, IORING_OP_READ, fd, buf, len, off);
}

ssize_t corio_write_at(int fd, const void *buf, size_t len, uint64_t off)
{
	return rw1("corio_write_at", CORIO_FS_WRITE, IORING_OP_WRITE, fd, buf, len, off);
}

static ssize_t rwv(const char *fn, enum corio_fs_kind kind, uint8_t opcode, int fd,
		   const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct req q = { .fn = fn, .kind = kind, .opcode = opcode, .fd = fd, .addr = iov,
			 .len = (uint32_t)iovcnt, .off = off };
	int ret;

	if (fd < 0)
		return bad_fd(fn, fd);
	if ((ret = check_off(fn, off)))
		return ret;
	if (!iov || iovcnt < 1 || iovcnt > IOV_MAX)
		return corio__error(-EINVAL, "%s: need an iovec array of 1..%d entries (got %d%s)",
				    fn, IOV_MAX, iovcnt, iov ? "" : ", NULL");
	return rw(&q);
}

ssize_t corio_readv_at(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
	return rwv("corio_readv_at", CORIO_FS_READ, IORING_OP_READV, fd, iov, iovcnt, off);
}

ssize_t corio_writev_at(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
	return rwv("corio_writev_at", CORIO_FS_WRITE, IORING_OP_WRITEV, fd, iov, iovcnt, off);
}

static uint64_t advance(uint64_t off, size_t n)
{
	return off == CORIO_OFF_CUR ? off : off + n;
}

ssize_t corio_read_all(int fd, void *buf, size_t len, uint64_t off, size_t *done)
{
	size_t got = 0;
	ssize_t r;

	if (len > (size_t)SSIZE_MAX)
		return corio__error(-EINVAL, "corio_read_all: length %zu does not fit ssize_t", len);
	while (got < len) {
		r = corio_read_at(fd, (char *)buf + got, len - got, advance(off, got));
		if (r < 0) {
			if (done)
				*done = got;
			return r;
		}
		if (r == 0)
			break; /* end of file */
		got += (size_t)r;
	}
	if (done)
		*done = got;
	return (ssize_t)got;
}

ssize_t corio_write_all(int fd, const void *buf, size_t len, uint64_t off, size_t *done)
{
	size_t put = 0;
	ssize_t r;

	if (len > (size_t)SSIZE_MAX)
		return corio__error(-EINVAL, "corio_write_all: length %zu does not fit ssize_t", len);
	while (put < len) {
		r = corio_write_at(fd, (const char *)buf + put, len - put, advance(off, put));
		if (r <= 0) {
			if (done)
				*done = put;
			if (r == 0)
				return corio__error(-EIO, "corio_write_all: fd %d accepted 0 bytes of %zu",
						    fd, len - put);
			return r;
		}
		put += (size_t)r;
	}
	if (done)
		*done = put;
	return (ssize_t)put;
}

/* ---- durability and metadata ------------------------------------------------------ */

int corio_fsync(int fd, unsigned flags)
{
	struct req q = { .fn = "corio_fsync", .kind = CORIO_FS_FSYNC, .opcode = IORING_OP_FSYNC,
			 .fd = fd };

	if (fd < 0)
		return bad_fd(q.fn, fd);
	if (flags & ~CORIO_FSYNC_DATA)
		return corio__error(-EINVAL, "corio_fsync: unknown flags 0x%x", flags & ~CORIO_FSYNC_DATA);
	q.flags = (flags & CORIO_FSYNC_DATA) ? IORING_FSYNC_DATASYNC : 0;
	return (int)run(&q);
}

int corio_fallocate(int fd, int mode, uint64_t off, uint64_t len)
{
	struct req q = { .fn = "corio_fallocate", .kind = CORIO_FS_FALLOCATE,
			 .opcode = IORING_OP_FALLOCATE, .fd = fd, .flags = (uint32_t)mode,
			 .off2 = off, .off = len };

	if (fd < 0)
		return bad_fd(q.fn, fd);
	if (off > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - off)
		return corio__error(-EINVAL, "corio_fallocate: range %llu+%llu is beyond the largest "
				    "file offset", (unsigned long long)off, (unsigned long long)len);
	if (len == 0)
		return corio__error(-EINVAL, "corio_fallocate: length is 0");
	return (int)run(&q);
}

int corio_statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *out)
{
	struct req q = { .fn = "corio_statx", .kind = CORIO_FS_STATX, .opcode = IORING_OP_STATX,
			 .fd = dirfd, .addr = path, .addr2 = out, .len = mask,
			 .flags = (uint32_t)flags };
	int ret = check_path(q.fn, path);

	if (ret)
		return ret;
	if (!out)
		return corio__error(-EINVAL, "corio_statx: out is NULL");
	return (int)run(&q);
}

int corio_dio_align(int fd, unsigned *mem_align, unsigned *off_align)
{
	struct statx stx;
	int ret;

	if (fd < 0)
		return bad_fd("corio_dio_align", fd);
	ret = corio_statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx);
	if (ret)
		return ret;
	if (!(stx.stx_mask & STATX_DIOALIGN) || !stx.stx_dio_mem_align)
		return corio__error(-EOPNOTSUPP, "corio_dio_align: fd %d: its filesystem reports "
				    "no direct-I/O support", fd);
	if (mem_align)
		*mem_align = stx.stx_dio_mem_align;
	if (off_align)
		*off_align = stx.stx_dio_offset_align;
	return 0;
}

int corio_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
		   unsigned flags)
{
	struct req q = { .fn = "corio_rename", .kind = CORIO_FS_RENAME,
			 .opcode = IORING_OP_RENAMEAT, .fd = olddirfd, .fd2 = newdirfd,
			 .addr = oldpath, .addr2 = newpath, .flags = flags };
	int ret = check_path(q.fn, oldpath);

	if (ret || (ret = check_path(q.fn, newpath)))
		return ret;
	return (int)run(&q);
}

int corio_rename(const char *oldpath, const char *newpath)
{
	return corio_renameat(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

int corio_unlinkat(int dirfd, const char *path, int flags)
{
	struct req q = { .fn = "corio_unlink", .kind = CORIO_FS_UNLINK,
			 .opcode = IORING_OP_UNLINKAT, .fd = dirfd, .addr = path,
			 .flags = (uint32_t)flags };
	int ret = check_path(q.fn, path);

	if (ret)
		return ret;
	if (flags & ~AT_REMOVEDIR)
		return corio__error(-EINVAL, "corio_unlinkat: unknown flags 0x%x", flags & ~AT_REMOVEDIR);
	return (int)run(&q);
}

int corio_unlink(const char *path)
{
	return corio_unlinkat(AT_FDCWD, path, 0);
}

int corio_rmdir(const char *path)
{
	return corio_unlinkat(AT_FDCWD, path, AT_REMOVEDIR);
}

int corio_mkdirat(int dirfd, const char *path, mode_t mode)
{
	struct req q = { .fn = "corio_mkdir", .kind = CORIO_FS_MKDIR, .opcode = IORING_OP_MKDIRAT,
			 .fd = dirfd, .addr = path, .len = mode };
	int ret = check_path(q.fn, path);

	if (ret)
		return ret;
	return (int)run(&q);
}

int corio_mkdir(const char *path, mode_t mode)
{
	return corio_mkdirat(AT_FDCWD, path, mode);
}
