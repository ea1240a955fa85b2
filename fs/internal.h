/* SPDX-License-Identifier: MIT */
/*
 * fs/internal.h - the fs part of a shard: counters, forced fallbacks and the
 * aligned-buffer cache. Written only by the shard's own thread; the counters
 * are read by corio_fs_stats_get() from any thread.
 *
 * fs/ owns file I/O: open, read/write at offsets (vectored too), fsync,
 * statx, fallocate, rename, unlink, mkdir, O_DIRECT buffers, and the
 * blocking-syscall fallback. May include: core/, timer/, uring/ and the
 * public headers; never net/ or ctl/. Not installed.
 */
#ifndef CORIO_FS_INTERNAL_H
#define CORIO_FS_INTERNAL_H

#include "core/internal.h"

/* fs's slot in s->parts[] (core/internal.h; ctl/ctl.c fills the table) */
#define CORIO__PART_FS (CORIO__PART_FIRST_AREA + 1)

/* corio_dma_alloc() size classes: 4 KiB << i, i < FS_DMA_CLASSES (4 KiB..1 MiB). */
#define FS_DMA_CLASSES 9
#define FS_DMA_MIN_SHIFT 12
#define FS_DMA_CACHE_MAX (32u << 20) /* bytes cached per shard */

struct corio__fs {
	struct corio_fs_stats st;
	bool sync[CORIO_FS_NKINDS]; /* do this kind with the blocking syscall */
	bool forced[CORIO_FS_NKINDS]; /* ... because CORIO_FS_SYNC says so */
	bool no_cached_open; /* openat2 RESOLVE_CACHED refused (before 5.12) */
	void *dma_free[FS_DMA_CLASSES]; /* intrusive lists: next pointer in the buffer */
	size_t dma_cached;
};

extern const struct corio__part corio__fs_part;

static inline struct corio__fs *corio__fs_of(struct corio__shard *s)
{
	return s ? s->parts[CORIO__PART_FS] : NULL;
}

/* Count one finished call of kind with result res (bytes when >= 0 and the
 * kind moves data). */
static inline void corio__fs_account(struct corio__fs *fs, enum corio_fs_kind kind, int64_t res)
{
	if (!fs)
		return;
	CORIO__STAT_ADD(fs->st.kind[kind].ops, 1);
	if (res < 0)
		CORIO__STAT_ADD(fs->st.kind[kind].errors, 1);
	else if (kind == CORIO_FS_READ || kind == CORIO_FS_WRITE)
		CORIO__STAT_ADD(fs->st.kind[kind].bytes, (uint64_t)res);
}

void corio__fs_dma_fini(struct corio__fs *fs);

/* openat2(2) with RESOLVE_CACHED (the dentry cache only): the fd, or -1
 * with errno (EAGAIN: a lookup would read the disk). fs/file.c. */
int corio__openat2_cached(int dirfd, const char *path, int flags);

#endif
