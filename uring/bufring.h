/* SPDX-License-Identifier: MIT */
/*
 * uring/bufring.h - a pool of equal-sized receive buffers, handed to the
 * kernel as a provided-buffer ring (IORING_REGISTER_PBUF_RING, Linux 5.19).
 *
 * Two modes:
 *  - kernel mode: the buffers sit in a registered ring; an SQE with
 *    IOSQE_BUFFER_SELECT lets the kernel pick one when data arrives, and the
 *    CQE names it (IORING_CQE_F_BUFFER, id in the upper 16 bits). A buffer is
 *    out of the ring from that CQE until corio__bufring_put().
 *  - user mode (no PBUF_RING, or forced off for tests): the same memory, a
 *    free stack in user space; the caller takes a buffer before it submits.
 * Knows nothing of fibers or sockets. Owner-thread only.
 */
#ifndef CORIO_URING_BUFRING_H
#define CORIO_URING_BUFRING_H

#include "uring/ring.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct corio__bufring {
	struct io_uring_buf_ring *br; /* kernel mode: the registered ring; NULL in user mode */
	size_t br_bytes;
	unsigned char *mem;           /* nbufs * size bytes */
	size_t mem_bytes;
	uint16_t *free;               /* user mode: free stack of buffer ids */
	unsigned nfree;
	unsigned nbufs, size, mask;
	unsigned in_ring;             /* buffers the kernel (or the free stack) holds */
	uint16_t bgid;
};

/* Set up nbufs (power of two, <= 32768) buffers of size bytes. kernel=false
 * forces user mode. Falls back to user mode by itself when the kernel
 * refuses the ring (-EINVAL: before 5.19). Returns 0 or -errno. */
int corio__bufring_init(struct corio__bufring *b, struct corio__ring *r, uint16_t bgid,
			unsigned nbufs, unsigned size, bool kernel);
void corio__bufring_fini(struct corio__bufring *b, struct corio__ring *r);

static inline bool corio__bufring_kernel(const struct corio__bufring *b)
{
	return b->br != NULL;
}

static inline void *corio__bufring_addr(const struct corio__bufring *b, unsigned bid)
{
	return b->mem + (size_t)bid * b->size;
}

/* The kernel picked a buffer (a CQE had IORING_CQE_F_BUFFER): its id. */
static inline unsigned corio__bufring_cqe_bid(struct corio__bufring *b, uint32_t cqe_flags)
{
	b->in_ring--;
	return cqe_flags >> IORING_CQE_BUFFER_SHIFT;
}

/* Give a buffer back: to the kernel's ring or to the free stack. */
void corio__bufring_put(struct corio__bufring *b, unsigned bid);

/* User mode: take a free buffer id, or -ENOBUFS. */
int corio__bufring_take(struct corio__bufring *b);

/* Make sqe (a recv or recvmsg) let the kernel pick a buffer from b. */
static inline void corio__bufring_select(struct io_uring_sqe *sqe, const struct corio__bufring *b)
{
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = b->bgid;
}

#endif
