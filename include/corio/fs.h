/* SPDX-License-Identifier: MIT */
/*
 * corio/fs.h - file I/O through the shard's io_uring ring. Include <corio.h>.
 *
 * Every call here is blocking and shard-local: it parks only the calling
 * fiber, may only be made from a fiber (else -EPERM), returns >= 0 or -errno,
 * returns -ECANCELED when the fiber is cancelled, and is bounded by the
 * fiber's deadline scope and per-call timeout (corio/timer.h) like every
 * other blocking call. When it returns, the kernel holds no reference to the
 * caller's buffers, iovecs or path strings.
 *
 * Each call is one io_uring op (IORING_OP_READ, _WRITE, _READV, _WRITEV,
 * _FSYNC, _OPENAT, _CLOSE, _STATX, _FALLOCATE, _RENAMEAT, _UNLINKAT,
 * _MKDIRAT), but for an open that needs no I/O: corio_open and
 * corio_openat first try openat2(2) with RESOLVE_CACHED (5.12) and
 * O_NONBLOCK on the spot, which succeeds only when the dentry cache knows
 * every component and the open itself would not wait (O_NONBLOCK is
 * cleared again unless asked for), as the ring's OPENAT does first inside
 * the kernel; counted in corio_fs_stats.open_cached. Every other open (a
 * lookup that must read the disk, O_CREAT, O_TRUNC, O_PATH, O_TMPFILE)
 * takes the op. Where the running kernel lacks an op (probed when the shard
 * starts, or on the epoll backend) the call falls back to the syscall,
 * counted in corio_fs_stats.sync_fallbacks: on a pipe, FIFO, socket or
 * character device it waits for readiness on the shard (corio_poll) and
 * then reads or writes without blocking, so a cancel or deadline ends the
 * wait as it ends the ring op; on a regular file (and everything else) it
 * runs on a thread of the blocking-work pool (corio/work.h) while the fiber
 * parks and the shard serves the rest (on the shard thread itself only when
 * the pool's queue is full). A fallback call checks first, as
 * the ring path does: a cancelled fiber gets -ECANCELED and a passed deadline
 * -ETIMEDOUT, and the syscall does not run (corio_close_fd() excepted: it
 * always closes); but once a pool thread runs the syscall it cannot be
 * cancelled or timed out. The environment variable CORIO_FS_SYNC (a comma
 * list of open, close, read, write, fsync, statx, fallocate, rename, unlink,
 * mkdir, or "all") forces that fallback, for tests.
 *
 * Offsets are byte offsets in the file; CORIO_OFF_CUR means "use and advance
 * the file position", as read(2)/write(2) do (and the only choice for pipes).
 * A single read or write moves at most CORIO_FS_MAX_RW bytes (the kernel's
 * own limit); longer requests return a short count, which the _all helpers
 * loop over.
 *
 * O_DIRECT: buffers, lengths and offsets must be aligned to the file's
 * direct-I/O alignment (corio_dio_align(); 512 or 4096 bytes on common
 * filesystems). Buffers from corio_dma_alloc() are always 4096-aligned.
 * Misaligned I/O returns -EINVAL and corio_last_error() says which of buffer,
 * length or offset is misaligned and to what.
 *
 * corio_last_error() explains -EINVAL returned for bad arguments, and kernel
 * errors where corio can tell more than the errno (O_DIRECT alignment,
 * O_DIRECT on a filesystem without it).
 */
#ifndef CORIO_FS_H
#define CORIO_FS_H
#include <corio.h>

#include <sys/uio.h> /* struct iovec */

#ifdef __cplusplus
extern "C" {
#endif

struct statx; /* <sys/stat.h> with _GNU_SOURCE, or <linux/stat.h> */

#define CORIO_OFF_CUR UINT64_MAX          /* offset: the file position   */
#define CORIO_FS_MAX_RW 0x7ffff000u       /* most bytes one op moves     */
#define CORIO_FSYNC_DATA 0x1u             /* corio_fsync: fdatasync(2)   */
#define CORIO_DMA_ALIGN 4096u             /* corio_dma_alloc() alignment */

/* ---- open / close -------------------------------------------------------- */

/*
 * Open path like openat(2) relative to dirfd (AT_FDCWD: the working
 * directory). flags and mode as for open(2); O_CLOEXEC is always added.
 * Returns the new fd, or -errno (-EINVAL with O_DIRECT on a filesystem that
 * does not support it, e.g. tmpfs before 6.6).
 */
CORIO_API int corio_open(const char *path, int flags, mode_t mode);
CORIO_API int corio_openat(int dirfd, const char *path, int flags, mode_t mode);

/*
 * Close fd: 0 or -errno. A close always runs to its end, so clean-up code
 * after a cancel or a timeout never leaks descriptors: deadline scopes do
 * not apply to it, a cancel arriving meanwhile does not interrupt it, and a
 * fiber already cancelled closes with close(2) on the shard thread. Where
 * the ring has no CLOSE op (the epoll fallback), a file on a filesystem
 * whose close cannot wait (ext2/3/4, XFS, Btrfs, tmpfs, ramfs, overlayfs,
 * procfs, sysfs, a pipe; fstatfs(2) tells) is closed on the shard as well,
 * and anything else (NFS, FUSE, SMB, a socket) on the pool.
 */
CORIO_API int corio_close_fd(int fd);

/* ---- read / write ------------------------------------------------------- */

/* Read up to len bytes at off: the count (0: end of file) or -errno. */
CORIO_API ssize_t corio_read_at(int fd, void *buf, size_t len, uint64_t off);

/* Write up to len bytes at off: the count (may be short) or -errno. A pipe,
 * FIFO or socket whose reader has gone gives -EPIPE, never SIGPIPE (shard
 * threads block it; docs/RUNTIME.md, "Signals"). */
CORIO_API ssize_t corio_write_at(int fd, const void *buf, size_t len, uint64_t off);

/* Vectored forms, like preadv(2)/pwritev(2); 1 <= iovcnt <= IOV_MAX. The
 * iovec array itself need only live until the call returns. */
CORIO_API ssize_t corio_readv_at(int fd, const struct iovec *iov, int iovcnt, uint64_t off);
CORIO_API ssize_t corio_writev_at(int fd, const struct iovec *iov, int iovcnt, uint64_t off);

/*
 * Read len bytes at off, looping over short reads. Returns len, or fewer
 * only when end of file came first, or -errno; then *done (may be NULL)
 * holds how many bytes had been read before the error.
 */
CORIO_API ssize_t corio_read_all(int fd, void *buf, size_t len, uint64_t off, size_t *done);

/*
 * Write all len bytes at off, looping over short writes. Returns len or
 * -errno; then *done (may be NULL) holds how many bytes were written before
 * the error. A write that makes no progress fails with -EIO.
 */
CORIO_API ssize_t corio_write_all(int fd, const void *buf, size_t len, uint64_t off,
				  size_t *done);

/* ---- durability and metadata -------------------------------------------- */

/* fsync(2), or fdatasync(2) with CORIO_FSYNC_DATA. 0 or -errno. */
CORIO_API int corio_fsync(int fd, unsigned flags);

/* fallocate(2): mode is FALLOC_FL_* (0: allocate and extend). 0 or -errno. */
CORIO_API int corio_fallocate(int fd, int mode, uint64_t off, uint64_t len);

/*
 * statx(2): fill *out for path relative to dirfd. For an open fd pass
 * path "" and AT_EMPTY_PATH. mask is STATX_* (STATX_BASIC_STATS: what
 * fstat gives). 0 or -errno.
 */
CORIO_API int corio_statx(int dirfd, const char *path, int flags, unsigned mask,
			  struct statx *out);

/* renameat2(2); flags RENAME_NOREPLACE, RENAME_EXCHANGE, ... 0 or -errno. */
CORIO_API int corio_rename(const char *oldpath, const char *newpath);
CORIO_API int corio_renameat(int olddirfd, const char *oldpath, int newdirfd,
			     const char *newpath, unsigned flags);

/* unlinkat(2); AT_REMOVEDIR removes an empty directory. 0 or -errno. */
CORIO_API int corio_unlink(const char *path);
CORIO_API int corio_unlinkat(int dirfd, const char *path, int flags);
CORIO_API int corio_rmdir(const char *path);

/* mkdirat(2). 0 or -errno. */
CORIO_API int corio_mkdir(const char *path, mode_t mode);
CORIO_API int corio_mkdirat(int dirfd, const char *path, mode_t mode);

/*
 * The direct-I/O alignment the file open as fd requires (statx
 * STATX_DIOALIGN, Linux 6.1): memory alignment of buffers, and alignment of
 * offsets and lengths. 0, -EOPNOTSUPP when its filesystem does not do direct
 * I/O or does not say, or -errno.
 */
CORIO_API int corio_dio_align(int fd, unsigned *mem_align, unsigned *off_align);

/* ---- aligned buffers ----------------------------------------------------- */

/*
 * A buffer of at least size bytes aligned to CORIO_DMA_ALIGN, for O_DIRECT.
 * Sizes up to 1 MiB are rounded up to a power of two and recycled through a
 * per-shard cache, so steady-state allocation does no malloc; larger ones
 * come straight from the system allocator. Callable from any thread (off a
 * shard nothing is cached). NULL only when memory is exhausted or size is 0
 * (corio_last_error() says which). Contents are not zeroed.
 */
CORIO_API void *corio_dma_alloc(size_t size);

/* Release a buffer from corio_dma_alloc() (NULL is ignored). Any thread; on
 * a shard it goes to that shard's cache, bounded to 32 MiB per shard. Only
 * after every call using it has returned. */
CORIO_API void corio_dma_free(void *buf);

/* ---- stats ---------------------------------------------------------------- */

/* Kinds of file operation, indexes of corio_fs_stats.kind[]. */
enum corio_fs_kind {
	CORIO_FS_OPEN,
	CORIO_FS_CLOSE,
	CORIO_FS_READ,  /* read_at, readv_at, each op of read_all  */
	CORIO_FS_WRITE, /* write_at, writev_at, each op of write_all */
	CORIO_FS_FSYNC,
	CORIO_FS_STATX,
	CORIO_FS_FALLOCATE,
	CORIO_FS_RENAME,
	CORIO_FS_UNLINK, /* unlink and rmdir */
	CORIO_FS_MKDIR,
	CORIO_FS_NKINDS,
};

/* One shard's file I/O counters; new ones are added at the end. */
struct corio_fs_stats {
	struct {
		uint64_t ops;    /* calls completed (successful or not)          */
		uint64_t bytes;  /* bytes moved (read and write kinds)           */
		uint64_t errors; /* calls that returned -errno (-ECANCELED too) */
	} kind[16];              /* indexed by enum corio_fs_kind                */
	uint64_t sync_fallbacks; /* calls done with a blocking syscall           */
	uint64_t dma_allocs;     /* corio_dma_alloc() calls on this shard        */
	uint64_t dma_cache_hits; /* ... served from the shard's cache            */
	uint64_t dma_cached;     /* bytes held in the cache now                  */
	uint64_t open_cached;    /* opens done on the spot from the dentry cache */
	uint64_t reserved[11];
};

/* Copy a snapshot of shard's fs counters. Any thread while the runtime runs
 * (rt may be NULL on a shard: its own runtime). 0, -EINVAL or -EPERM. */
CORIO_API int corio_fs_stats_get(struct corio_rt *rt, unsigned shard, struct corio_fs_stats *out);

#ifdef __cplusplus
}
#endif
#endif
