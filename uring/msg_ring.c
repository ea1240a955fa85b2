/* SPDX-License-Identifier: MIT */
/* uring/msg_ring.c - MSG_RING doorbells (declared in uring/internal.h). */
#include "uring/internal.h"

#include <errno.h>

bool corio__ring_can_msg(const struct corio__ring *r)
{
	return corio__ring_has_op(r, IORING_OP_MSG_RING) && !(r->caps & CORIO__CAP_SQPOLL);
}

int corio__ring_msg_doorbell(struct corio__ring *r, int target_fd, struct corio__op *op)
{
	struct io_uring_sqe *sqe = corio__ring_sqe(r);
	int ret;

	io_uring_prep_msg_ring(sqe, target_fd, 0, 0, 0);
	corio__sqe_set_op(sqe, op);
	if (r->features & IORING_FEAT_CQE_SKIP)
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	/* Submit now (this also hands over whatever else is queued): the
	 * target must not wait for our next loop turn, and the caller only
	 * guards target_fd's lifetime until this returns. */
	corio__fault_sq(r); /* test builds: faults for what else is queued */
	do {
		ret = io_uring_submit(&r->ring);
		CORIO__RCNT_ADD(r->cnt.enters, 1);
	} while (ret == -EINTR);
	if (ret > 0)
		CORIO__RCNT_ADD(r->cnt.sqes, (unsigned)ret);
	if (io_uring_sq_ready(&r->ring)) {
		/* Not consumed (-EBUSY with a full CQ, -EAGAIN, ...). Ours is the
		 * last SQE queued and the kernel reads SQEs only inside an enter
		 * (no SQPOLL here), so it can still be turned into a harmless NOP;
		 * the caller then rings another doorbell. */
		io_uring_prep_nop(sqe);
		corio__sqe_set_op(sqe, NULL);
		return ret < 0 ? ret : -EAGAIN;
	}
	return 0;
}
