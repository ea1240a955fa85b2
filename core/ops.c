/* SPDX-License-Identifier: MIT */
/*
 * core/ops.c - a fiber waiting on a kernel op, and the raw ring calls
 * (corio_nop, corio_poll) built on it.
 */
#include "core/internal.h"
#include "timer/internal.h" /* deadlines: linked timeouts */

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

/*
 * Deadlines (owned by timer/): when the fiber has a deadline scope open
 * (corio_fiber.deadline_ns != 0), op_begin first returns -ETIMEDOUT if the
 * deadline has passed, and otherwise reserves two SQ slots, so that the
 * IORING_OP_LINK_TIMEOUT op_wait appends right behind the caller's SQE is
 * never split from it by a flush of a full SQ. op_wait marks the caller's
 * SQE IOSQE_IO_LINK (after the caller's prep, which clears sqe->flags) and
 * adds the link timeout (IORING_TIMEOUT_ABS, CLOCK_MONOTONIC; the kernel
 * copies the timespec at submit, while this frame is parked). Both SQEs
 * carry a link slot (uring/internal.h) as user_data, not the op record: the
 * kernel's timeout cancels the op by user_data from task work that can run
 * after the op's CQE was reaped, and the record's stack address is reused
 * by the fiber's next op at once; the slot is reused only after the link
 * timeout's own CQE (test_uring: link_timeout_never_cancels_the_next_op). When the timeout fires the kernel cancels the op, whose
 * final CQE then carries -ECANCELED (or -EINTR from an io-wq worker), or a
 * byte count if it had moved data already: a count is returned as is, an
 * error becomes -ETIMEDOUT once the deadline has passed and the fiber was
 * not cancelled. Either way we return only after that final CQE.
 *
 * Fallback (no LINK_TIMEOUT op, a one-entry SQ, CORIO_TIMER_NO_LINK=1, or a
 * caller that took another SQE between begin and wait): a heap timer at the
 * deadline issues an async cancel for the op.
 */
int corio__op_may_start(void)
{
	struct corio_fiber *f = corio__self();

	CORIO__REQUIRE_FIBER(-EPERM);
	if (f->flags & CORIO__FF_CANCELLED)
		return -ECANCELED;
	if (CORIO__UNLIKELY(f->deadline_ns) && corio_now_ns() >= f->deadline_ns) {
		corio__timer_count_timeout(f->shard);
		return -ETIMEDOUT;
	}
	return 0;
}

int corio__op_begin(struct corio__op *op, struct io_uring_sqe **sqe)
{
	struct corio_fiber *f = corio__self();
	struct corio__ring *r;
	int ret = corio__op_may_start();

	if (ret)
		return ret;
	r = &f->shard->ring;
	if (CORIO__UNLIKELY(f->deadline_ns)) {
		struct corio__timers *T = corio__timers(f->shard);

		if (T && !T->no_link)
			corio__ring_reserve(r, 2);
	}
	op->cb = wake_waiter;
	op->data = f;
	op->res = 0;
	op->cqe_flags = 0;
	*sqe = corio__ring_sqe(r);
	corio__sqe_set_op(*sqe, op);
	return 0;
}

/* The op's SQE, if it is the last one queued and not yet submitted. */
static struct io_uring_sqe *queued_sqe_of(struct corio__ring *r, struct corio__op *op)
{
	struct io_uring_sq *sq = &r->ring.sq;
	struct io_uring_sqe *last;

	if (sq->sqe_tail == sq->sqe_head)
		return NULL;
	last = &sq->sqes[(sq->sqe_tail - 1) & sq->ring_mask];
	return last->user_data == op->user_data ? last : NULL;
}

static void deadline_cancel_op(struct corio_timer *t, void *arg, int res)
{
	struct corio__op *op = arg;
	struct corio_fiber *f = op->data;

	(void)t;
	if (res > 0 && f->wait_op == op)
		corio__ring_cancel(&f->shard->ring, op);
}

int corio__op_wait(struct corio__op *op)
{
	struct corio_fiber *f = op->data;
	struct corio__shard *s = f->shard;
	uint64_t dl = f->deadline_ns;
	struct __kernel_timespec ts;
	struct corio_timer dt;
	bool fallback = false;
	int res;

	if (CORIO__UNLIKELY(dl)) {
		struct corio__timers *T = corio__timers(s);
		struct io_uring_sqe *head = queued_sqe_of(&s->ring, op);
		struct corio__link *slot = NULL;

		if (T && !T->no_link && head && io_uring_sq_space_left(&s->ring.ring) >= 1 &&
		    (slot = corio__ring_link_get(&s->ring))) {
			struct io_uring_sqe *lt;

			head->flags |= IOSQE_IO_LINK;
			ts.tv_sec = (long long)(dl / 1000000000u);
			ts.tv_nsec = (long long)(dl % 1000000000u);
			lt = corio__ring_sqe(&s->ring);
			io_uring_prep_link_timeout(lt, &ts, IORING_TIMEOUT_ABS);
			corio__ring_link_bind(slot, head, lt, op);
			corio__timer_count_linked(s);
		} else {
			/* The op may already be submitted: cancel it by user_data. */
			corio_timer_init(&dt, deadline_cancel_op, op);
			fallback = corio_timer_arm(&dt, dl, 0) == 0;
		}
	}
	corio__op_started(s);
	f->wait_op = op;
	res = corio__park();
	/* Only the final CQE wakes us (a cancel never does): the kernel is done. */
	assert(f->wait_op == NULL);
	if (CORIO__UNLIKELY(dl)) {
		if (fallback && dt.slot)
			corio_timer_cancel(&dt);
		if ((res == -ECANCELED || res == -EINTR) && !(f->flags & CORIO__FF_CANCELLED) &&
		    corio_now_ns() >= dl) {
			res = -ETIMEDOUT;
			corio__timer_count_timeout(s);
		}
	}
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
