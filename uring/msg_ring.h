/* SPDX-License-Identifier: MIT */
/*
 * uring/msg_ring.h - IORING_OP_MSG_RING doorbells between rings (the
 * liburing side of the cross-shard message ring in core/msg.c).
 */
#ifndef CORIO_URING_MSG_RING_H
#define CORIO_URING_MSG_RING_H

#include "uring/ring.h"

/* True if r can send MSG_RING doorbells: the opcode is supported (5.18+)
 * and r has no SQPOLL thread (with SQPOLL the kernel thread would resolve
 * the target's fd later, after the sender stopped guarding its lifetime). */
bool corio__ring_can_msg(const struct corio__ring *r);

/*
 * Post one CQE (user_data 0, res 0: the target's reap ignores it) on the
 * ring behind target_fd, and submit at once, so the target is woken now and
 * the kernel has resolved target_fd before this returns. The sender's own
 * CQE carries op (NULL: ignored); it is skipped on success when the kernel
 * can (IORING_FEAT_CQE_SKIP), so op->cb mostly sees failures the kernel
 * found after taking the SQE (-EOVERFLOW, -ENOMEM, ...): the target was
 * not woken. Returns 0 or -errno from the submit (then no CQE comes).
 */
int corio__ring_msg_doorbell(struct corio__ring *r, int target_fd, struct corio__op *op);

#endif
