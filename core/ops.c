/* SPDX-License-Identifier: MIT */
/*
 * core/ops.c - a fiber waiting on a kernel op, and the raw ring calls
 * (corio_nop, corio_poll) built on it. A deadline scope bounds the op with a
 * linked timeout (core/deadline.c says how).
 */
#include "core/internal.h"

#include <errno.h>

static void wake_waiter(struct corio__op *op, int32_t res, uint32_t cqe_flags)
{
	struct corio_fiber *f = op->data;

	if (cqe_flags & IORING_CQE_F_MORE)
		return; /* not the final CQE */
	corio__op_finished(f->shard);
	f->wait_op = NULL;
	corio__ready(f, res);
}

int corio__may_block_slow(const char *who)
{
	struct corio_fiber *f = corio__self();

	CORIO__REQUIRE_FIBER(who, -EPERM);
	if (f->flags & CORIO__FF_CANCELLED)
		return -ECANCELED;
	if (corio__deadline_passed(f))
		return -ETIMEDOUT;
	return 0;
}

int corio__op_begin_who(struct corio__op *op, struct io_uring_sqe **sqe, const char *who)
{
	struct corio_fiber *f = corio__self();
	int ret = corio__may_block(who);

	if (ret)
		return ret;
	corio__deadline_op_prepare(f);
	op->cb = wake_waiter;
	op->data = f;
	op->res = 0;
	op->cqe_flags = 0;
	*sqe = corio__ring_sqe(&f->shard->ring);
	corio__sqe_set_op(*sqe, op);
	return 0;
}

int corio__op_wait(struct corio__op *op)
{
	struct corio_fiber *f = op->data;
	struct corio__dl_op d;
	bool bounded = f->deadline_ns != 0;
	int res;

	if (CORIO__UNLIKELY(bounded))
		corio__deadline_op_link(&d, op);
	corio__op_started(f->shard);
	f->wait_op = op;
	res = corio__park();
	/* Only the final CQE wakes us (a cancel never does): the kernel is done. */
	assert(f->wait_op == NULL);
	if (CORIO__UNLIKELY(bounded))
		res = corio__deadline_op_done(&d, f, res);
	return res;
}

int corio_nop(void)
{
	struct io_uring_sqe *sqe;
	struct corio__op op;
	int ret = corio__op_begin(&op, &sqe);

	if (ret)
		return ret;
	io_uring_prep_nop(sqe);
	return corio__op_wait(&op);
}

int corio_poll(int fd, unsigned events)
{
	struct io_uring_sqe *sqe;
	struct corio__op op;
	int ret;

	if (fd < 0)
		return -EBADF;
	ret = corio__op_begin(&op, &sqe);
	if (ret)
		return ret;
	io_uring_prep_poll_add(sqe, fd, events);
	return corio__op_wait(&op);
}
