/* SPDX-License-Identifier: MIT */
/*
 * uring/bufring.c - provided-buffer ring set-up and buffer recycling.
 *
 * liburing 2.3 (Debian 12) has no io_uring_setup_buf_ring(), so the ring
 * memory is mmap'd here (page aligned, as the kernel requires) and handed
 * over with io_uring_register_buf_ring(). Buffers are returned one at a time
 * with a release store of the tail: the kernel may pick a buffer the moment
 * the tail covers it.
 *
 * Whole-buffer mode (5.19+). The kernel takes the buffer at the ring's head
 * for one receive and advances the head: the CQE (IORING_CQE_F_BUFFER, the
 * id in the upper 16 bits) hands the whole buffer to us, even for one byte.
 * A CQE that names a buffer with res <= 0 hands it over empty; we put it
 * straight back.
 *
 * Incremental mode (IOU_PBUF_RING_INC in io_uring_buf_reg.flags, 6.12;
 * liburing 2.3 calls that field .pad). What the kernel does (io_uring/kbuf.c,
 * io_kbuf_inc_commit, and io_uring_register_buf_ring(3)):
 *  - a receive selects the head buffer with the room left in it; the data
 *    goes where the previous receive into that buffer stopped. At commit the
 *    kernel adds the bytes received to the ring entry's addr and takes them
 *    off its len, and advances the head only when len reaches 0 (or, for a
 *    receive that had to commit at selection - io-wq - it consumes the whole
 *    rest at once).
 *  - the CQE names the buffer (IORING_CQE_F_BUFFER) and, while the kernel
 *    keeps it at the head for more, carries IORING_CQE_F_BUF_MORE. The
 *    first CQE for the buffer without BUF_MORE is its last one: the kernel
 *    has let go of it. The bytes of each CQE start where the bytes of the
 *    previous CQE for the same id ended (no offset is reported: we count,
 *    b->fill[]). Without bundles a receive never spans two buffers.
 *  - a CQE with res <= 0 commits nothing, so its buffer stays at the head
 *    and stays the kernel's, whatever the flags say: a zero-length commit
 *    returned "consumed" (no BUF_MORE) until a 2025 fix (liburing issue
 *    #1553), and res < 0 commits nothing either. We ignore such CQEs'
 *    buffers; recycling one would hand the kernel a buffer it still holds.
 *    (The one case where such a CQE ends a buffer: a receive run from io-wq
 *    consumes the rest at selection. corio never sends socket receives
 *    there - no IOSQE_ASYNC, and sockets poll - and were it to happen the
 *    buffer would be lost to the ring, never handed out twice.)
 *  - datagrams do not fit: a datagram is cut to the room left in the
 *    buffer, so UDP keeps a whole-buffer ring of its own (net/udp.c).
 * So a buffer is lent out as slices, one per CQE, and carries a reference
 * count (b->refs[]): one per slice the caller holds (queued on a socket or
 * borrowed through corio_buf) plus KERNEL_REF while the kernel keeps it for
 * more. It returns to the ring when the kernel is done AND the last slice
 * is put, in whatever order the slices are put; until then no byte of it is
 * reused. A ring entry the kernel moved along (addr/len) is rewritten in
 * full when the buffer goes back.
 *
 * User mode: the caller takes a buffer from a free stack before it submits
 * a plain recv into it (one reference), and puts it like any other.
 */
#include "uring/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define KERNEL_REF CORIO__BUFRING_KREF

static void *map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static int register_ring(struct corio__bufring *b, struct corio__ring *r, uint16_t flags)
{
	struct io_uring_buf_reg reg;

	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uint64_t)(uintptr_t)b->br;
	reg.ring_entries = b->nbufs;
	reg.bgid = b->bgid;
	reg.pad = flags; /* .flags in newer headers */
	if (r->emu)
		return corio__emu_register_buf_ring(r, &reg);
	return io_uring_register_buf_ring(&r->ring, &reg, 0);
}

int corio__bufring_init(struct corio__bufring *b, struct corio__ring *r, uint16_t bgid,
			unsigned nbufs, unsigned size, bool kernel, bool inc)
{
	int ret = -EINVAL;

	memset(b, 0, sizeof(*b));
	b->out = &b->out0;
	if (!nbufs || (nbufs & (nbufs - 1)) || nbufs > 32768 || !size || size > INT32_MAX)
		return -EINVAL;
	b->nbufs = nbufs;
	b->size = size;
	b->mask = nbufs - 1;
	b->bgid = bgid;
	b->mem_bytes = (size_t)nbufs * size;
	b->mem = map(b->mem_bytes);
	b->refs = calloc(nbufs, sizeof(*b->refs));
	b->fill = calloc(nbufs, sizeof(*b->fill));
	if (!b->mem || !b->refs || !b->fill) {
		corio__bufring_fini(b, r);
		return -ENOMEM;
	}
	if (kernel) {
		b->br_bytes = (size_t)nbufs * sizeof(struct io_uring_buf);
		b->br = map(b->br_bytes);
		if (!b->br) {
			corio__bufring_fini(b, r);
			return -ENOMEM;
		}
		/* -EINVAL for IOU_PBUF_RING_INC: before 6.12, whole buffers. */
		if (inc) {
			ret = register_ring(b, r, IOU_PBUF_RING_INC);
			b->inc = ret == 0;
		}
		if (ret == -EINVAL)
			ret = register_ring(b, r, 0);
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
		if (r->emu)
			corio__emu_unregister_buf_ring(r, b->bgid);
		else
			io_uring_unregister_buf_ring(&r->ring, b->bgid);
		munmap(b->br, b->br_bytes);
	}
	if (b->mem)
		munmap(b->mem, b->mem_bytes);
	free(b->free);
	free(b->refs);
	free(b->fill);
	memset(b, 0, sizeof(*b));
}

unsigned long corio__bufring_lent(const struct corio__bufring *b)
{
	unsigned long n = 0;

	if (!b->refs)
		return 0; /* never set up */
	/* a buffer in the ring (or the free stack) has no reference left */
	for (unsigned i = 0; i < b->nbufs; i++)
		n += b->refs[i] & ~KERNEL_REF;
	return n;
}

int corio__bufring_take(struct corio__bufring *b)
{
	unsigned bid;

	if (!b->nfree)
		return -ENOBUFS;
	corio__bufring_out(b, 1);
	bid = b->free[--b->nfree];
	b->refs[bid] = 1;
	return (int)bid;
}
