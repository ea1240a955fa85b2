/* SPDX-License-Identifier: MIT */
/*
 * uring/bufring.c - provided-buffer ring set-up and buffer recycling.
 *
 * liburing 2.3 (Debian 12) has no io_uring_setup_buf_ring(), so the ring
 * memory is mmap'd here (page aligned, as the kernel requires) and handed
 * over with io_uring_register_buf_ring(). Buffers are returned one at a time
 * with a release store of the tail: the kernel may pick a buffer the moment
 * the tail covers it.
 */
#include "uring/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

int corio__bufring_init(struct corio__bufring *b, struct corio__ring *r, uint16_t bgid,
			unsigned nbufs, unsigned size, bool kernel)
{
	struct io_uring_buf_reg reg;
	int ret;

	memset(b, 0, sizeof(*b));
	if (!nbufs || (nbufs & (nbufs - 1)) || nbufs > 32768 || !size)
		return -EINVAL;
	b->nbufs = nbufs;
	b->size = size;
	b->mask = nbufs - 1;
	b->bgid = bgid;
	b->mem_bytes = (size_t)nbufs * size;
	b->mem = map(b->mem_bytes);
	if (!b->mem)
		return -ENOMEM;
	if (kernel) {
		b->br_bytes = (size_t)nbufs * sizeof(struct io_uring_buf);
		b->br = map(b->br_bytes);
		if (!b->br) {
			corio__bufring_fini(b, r);
			return -ENOMEM;
		}
		memset(&reg, 0, sizeof(reg));
		reg.ring_addr = (uint64_t)(uintptr_t)b->br;
		reg.ring_entries = nbufs;
		reg.bgid = bgid;
		ret = io_uring_register_buf_ring(&r->ring, &reg, 0);
		if (ret < 0) {
			munmap(b->br, b->br_bytes);
			b->br = NULL;
			/* -EINVAL: no PBUF_RING (before 5.19): user mode below. */
			if (ret != -EINVAL) {
				corio__bufring_fini(b, r);
				return ret;
			}
		}
	}
	if (b->br) {
		io_uring_buf_ring_init(b->br);
		for (unsigned i = 0; i < nbufs; i++)
			io_uring_buf_ring_add(b->br, corio__bufring_addr(b, i), size, (uint16_t)i,
					      (int)b->mask, (int)i);
		io_uring_buf_ring_advance(b->br, (int)nbufs);
	} else {
		b->free = malloc(nbufs * sizeof(*b->free));
		if (!b->free) {
			corio__bufring_fini(b, r);
			return -ENOMEM;
		}
		for (unsigned i = 0; i < nbufs; i++)
			b->free[i] = (uint16_t)(nbufs - 1 - i);
		b->nfree = nbufs;
	}
	b->in_ring = nbufs;
	return 0;
}

void corio__bufring_fini(struct corio__bufring *b, struct corio__ring *r)
{
	if (b->br) {
		io_uring_unregister_buf_ring(&r->ring, b->bgid);
		munmap(b->br, b->br_bytes);
	}
	if (b->mem)
		munmap(b->mem, b->mem_bytes);
	free(b->free);
	memset(b, 0, sizeof(*b));
}

void corio__bufring_put(struct corio__bufring *b, unsigned bid)
{
	if (b->br) {
		io_uring_buf_ring_add(b->br, corio__bufring_addr(b, bid), b->size, (uint16_t)bid,
				      (int)b->mask, 0);
		io_uring_buf_ring_advance(b->br, 1);
	} else {
		b->free[b->nfree++] = (uint16_t)bid;
	}
	b->in_ring++;
}

int corio__bufring_take(struct corio__bufring *b)
{
	if (!b->nfree)
		return -ENOBUFS;
	b->in_ring--;
	return b->free[--b->nfree];
}
