/* SPDX-License-Identifier: MIT */
/*
 * fs/probe.c - the fs part of each shard: probes which file ops the ring can
 * do (the rest fall back to blocking syscalls), honours CORIO_FS_SYNC, owns
 * the counters and the aligned-buffer cache.
 */
#include "fs/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The io_uring ops each kind needs, with the kernel that added them. */
static const struct {
	const char *name;
	uint8_t op[2];
} kinds[CORIO_FS_NKINDS] = {
	[CORIO_FS_OPEN] = { "open", { IORING_OP_OPENAT, IORING_OP_OPENAT } },          /* 5.6  */
	[CORIO_FS_CLOSE] = { "close", { IORING_OP_CLOSE, IORING_OP_CLOSE } },          /* 5.6  */
	[CORIO_FS_READ] = { "read", { IORING_OP_READ, IORING_OP_READV } },             /* 5.6, 5.1 */
	[CORIO_FS_WRITE] = { "write", { IORING_OP_WRITE, IORING_OP_WRITEV } },         /* 5.6, 5.1 */
	[CORIO_FS_FSYNC] = { "fsync", { IORING_OP_FSYNC, IORING_OP_FSYNC } },          /* 5.1  */
	[CORIO_FS_STATX] = { "statx", { IORING_OP_STATX, IORING_OP_STATX } },          /* 5.6  */
	[CORIO_FS_FALLOCATE] = { "fallocate", { IORING_OP_FALLOCATE, IORING_OP_FALLOCATE } }, /* 5.6 */
	[CORIO_FS_RENAME] = { "rename", { IORING_OP_RENAMEAT, IORING_OP_RENAMEAT } },  /* 5.11 */
	[CORIO_FS_UNLINK] = { "unlink", { IORING_OP_UNLINKAT, IORING_OP_UNLINKAT } },  /* 5.11 */
	[CORIO_FS_MKDIR] = { "mkdir", { IORING_OP_MKDIRAT, IORING_OP_MKDIRAT } },      /* 5.15 */
};

/* Whether openat2(2) takes RESOLVE_CACHED (5.12; before: ENOSYS, or
 * EINVAL for the flag; a seccomp filter may refuse the call): corio_open's
 * on-the-spot path (fs/file.c). */
static bool cached_open_works(void)
{
	int fd = corio__openat2_cached(AT_FDCWD, "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return errno == EAGAIN; /* works; "/" was not cached (hardly) */
	close(fd);
	return true;
}

static int fs_init(struct corio__shard *s)
{
	const char *words[CORIO_FS_NKINDS + 1] = { NULL };
	struct corio__fs *fs;
	uint32_t sync = 0; /* CORIO_FS_SYNC: kinds forced to the blocking fallback */

	for (unsigned k = 0; k < CORIO_FS_NKINDS; k++)
		words[k] = kinds[k].name;
	if (corio__env_words("CORIO_FS_SYNC", words, &sync, s->err, sizeof(s->err)) < 0)
		return -EINVAL;
	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	for (unsigned k = 0; k < CORIO_FS_NKINDS; k++)
		fs->sync[k] = !corio__ring_has_op(&s->ring, kinds[k].op[0]) ||
			      !corio__ring_has_op(&s->ring, kinds[k].op[1]) || (sync >> k & 1);
	for (unsigned k = 0; k < CORIO_FS_NKINDS; k++)
		fs->forced[k] = sync >> k & 1;
	fs->no_cached_open = !cached_open_works();
	__atomic_store_n(&s->parts[CORIO__PART_FS], fs, __ATOMIC_RELEASE); /* stats readers */
	return 0;
}

static void fs_fini(struct corio__shard *s)
{
	struct corio__fs *fs = s->parts[CORIO__PART_FS];

	corio__fs_dma_fini(fs);
}

static void fs_release(struct corio__shard *s)
{
	free(s->parts[CORIO__PART_FS]);
	s->parts[CORIO__PART_FS] = NULL;
}

const struct corio__part corio__fs_part = {
	.name = "fs",
	.init = fs_init,
	.fini = fs_fini,
	.release = fs_release,
};

int corio_fs_stats_get(struct corio_rt *rt, unsigned shard, struct corio_fs_stats *out)
{
	const struct corio__fs *fs;

	rt = corio__rt_or_own(rt);
	if (!rt)
		return corio__error(-EPERM, "corio_fs_stats_get: rt is NULL off a shard");
	if (!out || shard >= rt->nshards || !rt->shards[shard])
		return corio__error(-EINVAL, "corio_fs_stats_get: %s", out ? "no such shard" : "out is NULL");
	fs = __atomic_load_n(&rt->shards[shard]->parts[CORIO__PART_FS], __ATOMIC_ACQUIRE);
	memset(out, 0, sizeof(*out)); /* the part has not started: zeros, as every getter */
	if (fs)
		corio__stats_copy(out, &fs->st, sizeof(*out));
	return 0;
}
