/* SPDX-License-Identifier: MIT */
/*
 * fs/part.c - the fs part of each shard: probes which file ops the ring can
 * do (the rest fall back to blocking syscalls), honours CORIO_FS_SYNC, owns
 * the counters and the aligned-buffer cache.
 */
#include "fs/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

static bool forced_sync(const char *env, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = env; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if ((len == n && !strncmp(p, name, n)) || (len == 3 && !strncmp(p, "all", 3)))
			return true;
		p = end ? end + 1 : NULL;
	}
	return false;
}

static int fs_init(struct corio__shard *s)
{
	struct corio__fs *fs = calloc(1, sizeof(*fs));
	const char *env = getenv("CORIO_FS_SYNC");

	if (!fs)
		return -ENOMEM;
	for (unsigned k = 0; k < CORIO_FS_NKINDS; k++)
		fs->sync[k] = !corio__ring_has_op(&s->ring, kinds[k].op[0]) ||
			      !corio__ring_has_op(&s->ring, kinds[k].op[1]) ||
			      forced_sync(env, kinds[k].name);
	s->parts[CORIO__PART_FS] = fs;
	return 0;
}

static void fs_fini(struct corio__shard *s)
{
	struct corio__fs *fs = s->parts[CORIO__PART_FS];

	corio__fs_dma_fini(fs);
	s->parts[CORIO__PART_FS] = NULL;
	free(fs);
}

const struct corio__part corio__fs_part = {
	.name = "fs",
	.init = fs_init,
	.fini = fs_fini,
};

int corio_fs_stats_get(struct corio_rt *rt, unsigned shard, struct corio_fs_stats *out)
{
	const struct corio__fs *fs;
	const uint64_t *src;
	uint64_t *dst = (uint64_t *)out;

	if (!rt) {
		if (!corio__tl_shard)
			return -EPERM;
		rt = corio__tl_shard->rt;
	}
	if (!out || shard >= rt->nshards)
		return corio__error(-EINVAL, "corio_fs_stats_get: %s", out ? "no such shard" : "out is NULL");
	fs = rt->shards[shard]->parts[CORIO__PART_FS];
	if (!fs)
		return corio__error(-EINVAL, "corio_fs_stats_get: shard %u has no fs state", shard);
	src = (const uint64_t *)&fs->st;
	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	return 0;
}
