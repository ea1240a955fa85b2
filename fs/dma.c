/* SPDX-License-Identifier: MIT */
/*
 * fs/dma.c - aligned buffers for O_DIRECT with a per-shard cache.
 *
 * Buffers come from posix_memalign(CORIO_DMA_ALIGN). Sizes up to 1 MiB are
 * rounded up to a power of two (a size class); a freed buffer goes on its
 * class's free list on the freeing shard (the list's next pointer lives in
 * the buffer itself), so a shard that allocates and frees in a steady state
 * never calls malloc. The class of a buffer is recovered on free from
 * malloc_usable_size(), which is at least the class size and less than
 * twice it, so free needs no size and no header (a header would cost the
 * alignment). A buffer freed on another shard simply joins that shard's
 * cache: it is plain heap memory, owned by nobody once freed.
 */
#include "fs/internal.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>

static int size_class(size_t size)
{
	int c = 0;

	while (c < FS_DMA_CLASSES && ((size_t)1 << (FS_DMA_MIN_SHIFT + c)) < size)
		c++;
	return c < FS_DMA_CLASSES ? c : -1;
}

void *corio_dma_alloc(size_t size)
{
	struct corio__fs *fs = corio__fs_of(corio__shard());
	int c = size_class(size);
	void *p;

	if (size == 0) {
		corio__error(-EINVAL, "corio_dma_alloc: size is 0");
		return NULL;
	}
	if (fs)
		CORIO__STAT_ADD(fs->st.dma_allocs, 1);
	if (c >= 0) {
		size = (size_t)1 << (FS_DMA_MIN_SHIFT + c);
		if (fs && (p = fs->dma_free[c])) {
			fs->dma_free[c] = *(void **)p;
			fs->dma_cached -= size;
			CORIO__STAT_ADD(fs->st.dma_cache_hits, 1);
			CORIO__STAT_SET(fs->st.dma_cached, fs->dma_cached);
			return p;
		}
	} else {
		if (size > SIZE_MAX - CORIO_DMA_ALIGN) {
			corio__error(-ENOMEM, "corio_dma_alloc: %zu bytes is too large", size);
			return NULL;
		}
		size = (size + CORIO_DMA_ALIGN - 1) & ~(size_t)(CORIO_DMA_ALIGN - 1);
	}
	if (posix_memalign(&p, CORIO_DMA_ALIGN, size)) {
		corio__error(-ENOMEM, "corio_dma_alloc: out of memory for %zu bytes", size);
		return NULL;
	}
	return p;
}

void corio_dma_free(void *buf)
{
	struct corio__fs *fs = corio__fs_of(corio__shard());
	size_t usable, size;
	int c;

	if (!buf)
		return;
	/* The largest class not above the usable size; a buffer of 2 MiB or
	 * more (a large allocation) is not cached. */
	usable = malloc_usable_size(buf);
	c = usable ? (int)(63 - __builtin_clzll((unsigned long long)usable)) - FS_DMA_MIN_SHIFT : -1;
	if (!fs || c < 0 || c >= FS_DMA_CLASSES) {
		free(buf);
		return;
	}
	size = (size_t)1 << (FS_DMA_MIN_SHIFT + c);
	if (fs->dma_cached + size > FS_DMA_CACHE_MAX) {
		free(buf);
		return;
	}
	*(void **)buf = fs->dma_free[c];
	fs->dma_free[c] = buf;
	fs->dma_cached += size;
	CORIO__STAT_SET(fs->st.dma_cached, fs->dma_cached);
}

void corio__fs_dma_fini(struct corio__fs *fs)
{
	for (int c = 0; c < FS_DMA_CLASSES; c++) {
		while (fs->dma_free[c]) {
			void *p = fs->dma_free[c];

			fs->dma_free[c] = *(void **)p;
			free(p);
		}
	}
	fs->dma_cached = 0;
}
