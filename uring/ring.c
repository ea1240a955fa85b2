/* SPDX-License-Identifier: MIT */
/*
 * uring/ring.c - ring setup with feature probing, SQE acquisition, submit,
 * batched reaping and dispatch, cancel.
 *
 * Setup ladder (first rung the kernel accepts wins; -EINVAL means "kernel too
 * old for this flag", any other error is fatal and diagnosed):
 *   1. SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG   (Linux 6.1)
 *      completions are produced only when we enter the kernel, on our thread:
 *      no IPIs, no lock on the CQ, batched task work.
 *   2. SINGLE_ISSUER | COOP_TASKRUN | TASKRUN_FLAG    (Linux 6.0)
 *   3. COOP_TASKRUN | TASKRUN_FLAG                    (Linux 5.19)
 *   4. no flags                                       (anything with io_uring)
 * With SQPOLL (DEFER_TASKRUN cannot be combined with it):
 *   1. SQPOLL | SINGLE_ISSUER, 2. SQPOLL, then the ladder above without it.
 * TASKRUN_FLAG makes the kernel raise IORING_SQ_TASKRUN when deferred work
 * waits, so the loop knows when an enter is needed to see completions.
 */
#include "uring/internal.h"

#define CORIO__RING_UNLIKELY(x) __builtin_expect(!!(x), 0)

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

/* CORIO_RING_DISABLE's words, in the order of the CORIO__RING_NO_* bits */
static const char *const disable_words[] = {
	"single_issuer", "defer_taskrun", "coop_taskrun", "sqpoll", "reap_flush", "efd_wait", NULL,
};
static const char *const fault_words[] = { "ebadr", NULL };

/* The ring's environment: 0, or -EINVAL with the variable named in err. */
static int ring_env(struct corio__ring *r, char *err, size_t errlen)
{
	uint32_t dis = 0, fault = 0;
	int ret = corio__env_words("CORIO_RING_DISABLE", disable_words, &dis, err, errlen);

	if (ret >= 0)
		ret = corio__env_words("CORIO_RING_FAULT", fault_words, &fault, err, errlen);
	if (ret < 0)
		return ret;
	r->disabled = dis;
	r->no_reap_flush = dis & CORIO__RING_NO_REAP_FLUSH;
	r->fault_ebadr = fault & 1;
	return corio__fault_env(r, err, errlen);
}

/*
 * The syscall paths, each with its one test of r->emu (predicted: a ring
 * never changes mode). Everything else in uring/ works on the SQ and CQ
 * memory, which the emulator lays out as the kernel does.
 */
static int sys_submit(struct corio__ring *r)
{
	if (CORIO__RING_UNLIKELY(r->emu))
		return corio__emu_enter(r, 0, false, NULL);
	return io_uring_submit(&r->ring);
}

static int sys_get_events(struct corio__ring *r)
{
	if (CORIO__RING_UNLIKELY(r->emu))
		return corio__emu_enter(r, 0, false, NULL);
	return io_uring_get_events(&r->ring);
}

static int sys_submit_and_get_events(struct corio__ring *r)
{
	if (CORIO__RING_UNLIKELY(r->emu))
		return corio__emu_enter(r, 0, true, NULL);
	return io_uring_submit_and_get_events(&r->ring);
}

int corio__ring_try_setup(void)
{
	struct io_uring ring;
	int ret = io_uring_queue_init(1, &ring, 0);

	if (ret == 0)
		io_uring_queue_exit(&ring);
	return ret;
}

static void explain_failure(int err, unsigned sq, char *buf, size_t len)
{
	FILE *f;
	int disabled = -1;
	struct rlimit rl;

	switch (err) {
	case -ENOSYS:
		snprintf(buf, len,
			 "io_uring_setup failed with ENOSYS: this kernel has no io_uring "
			 "(CONFIG_IO_URING=n) or a seccomp filter blocks the syscall");
		return;
	case -EPERM:
		f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
		if (f) {
			if (fscanf(f, "%d", &disabled) != 1)
				disabled = -1;
			fclose(f);
		}
		if (disabled == 2)
			snprintf(buf, len, "io_uring is disabled: sysctl kernel.io_uring_disabled=2");
		else if (disabled == 1)
			snprintf(buf, len,
				 "io_uring is restricted: sysctl kernel.io_uring_disabled=1 allows "
				 "only CAP_SYS_ADMIN or members of kernel.io_uring_group");
		else
			snprintf(buf, len,
				 "io_uring_setup failed with EPERM: blocked by a seccomp filter or "
				 "security module (container runtimes often do this), or SQPOLL "
				 "needs privileges on this kernel");
		return;
	case -ENOMEM:
		if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
			snprintf(buf, len,
				 "io_uring_setup failed with ENOMEM: ring memory for %u entries "
				 "could not be locked; RLIMIT_MEMLOCK is %llu KiB (kernels before "
				 "5.12 charge rings to it: raise ulimit -l)",
				 sq, (unsigned long long)rl.rlim_cur / 1024);
		else
			snprintf(buf, len, "io_uring_setup failed with ENOMEM for %u entries", sq);
		return;
	case -EMFILE:
	case -ENFILE:
		snprintf(buf, len, "io_uring_setup: out of file descriptors (%s)", strerror(-err));
		return;
	case -EINVAL:
		snprintf(buf, len, "io_uring_setup rejected a ring of %u entries (EINVAL)", sq);
		return;
	default:
		snprintf(buf, len, "io_uring_setup failed: %s", strerror(-err));
	}
}

static int emu_init(struct corio__ring *r, const struct corio__ring_params *p, char *err,
		    size_t errlen)
{
	struct io_uring_params ip;
	int ret;

	memset(&ip, 0, sizeof(ip));
	if (p->cq_entries) {
		ip.flags = IORING_SETUP_CQSIZE;
		ip.cq_entries = p->cq_entries;
	}
	ret = corio__emu_init(r, p->sq_entries, &ip);
	if (ret) {
		snprintf(err, errlen, "the ring emulator could not start: %s", strerror(-ret));
		return ret;
	}
	r->under_valgrind = RUNNING_ON_VALGRIND != 0;
	r->setup_flags = 0;
	r->features = ip.features;
	r->sq_entries = ip.sq_entries;
	r->cq_entries = ip.cq_entries;
	r->caps = CORIO__CAP_MSHOT;
	corio__emu_probe(r);
	corio__fault_init(r); /* test builds: emu.c injects at its syscall sites */
	return 0;
}

int corio__ring_init(struct corio__ring *r, const struct corio__ring_params *p, char *err,
		     size_t errlen)
{
	static const unsigned ladder[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
		IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
		0,
	};
	static const unsigned sqpoll_ladder[] = {
		IORING_SETUP_SQPOLL | IORING_SETUP_SINGLE_ISSUER,
		IORING_SETUP_SQPOLL,
	};
	unsigned candidates[8], n = 0, drop = 0;
	struct io_uring_params ip;
	struct io_uring_probe *probe;
	int ret = -EINVAL;

	memset(r, 0, sizeof(*r));
	ret = ring_env(r, err, errlen);
	if (ret < 0)
		return ret;
	if (p->emu)
		return emu_init(r, p, err, errlen);
	if (r->disabled & CORIO__RING_NO_SINGLE_ISSUER)
		drop |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	if (r->disabled & CORIO__RING_NO_DEFER_TASKRUN)
		drop |= IORING_SETUP_DEFER_TASKRUN;
	if (r->disabled & CORIO__RING_NO_COOP_TASKRUN)
		drop |= IORING_SETUP_COOP_TASKRUN;
	if (p->sqpoll && !(r->disabled & CORIO__RING_NO_SQPOLL)) {
		for (unsigned i = 0; i < 2; i++)
			candidates[n++] = sqpoll_ladder[i];
	}
	for (unsigned i = 0; i < 4; i++) {
		unsigned f = ladder[i];

		if (f & drop)
			continue;
		candidates[n++] = f;
	}
	candidates[n++] = 0;

	for (unsigned i = 0; i < n; i++) {
		memset(&ip, 0, sizeof(ip));
		ip.flags = candidates[i];
		if (p->cq_entries) {
			ip.flags |= IORING_SETUP_CQSIZE;
			ip.cq_entries = p->cq_entries;
		}
		if ((ip.flags & IORING_SETUP_SQPOLL) && p->sqpoll_cpu >= 0) {
			ip.flags |= IORING_SETUP_SQ_AFF;
			ip.sq_thread_cpu = (unsigned)p->sqpoll_cpu;
		}
		ip.sq_thread_idle = 1000; /* ms the SQPOLL thread spins before sleeping */
		ret = io_uring_queue_init_params(p->sq_entries, &r->ring, &ip);
		if (ret == 0)
			break;
		/* EINVAL: a flag this kernel does not know; EPERM on an SQPOLL rung:
		 * unprivileged SQPOLL (before 5.11); try the next rung. */
		if (ret != -EINVAL && !(ret == -EPERM && (ip.flags & IORING_SETUP_SQPOLL)))
			break;
	}
	if (ret < 0) {
		explain_failure(ret, p->sq_entries, err, errlen);
		return ret;
	}
	r->under_valgrind = RUNNING_ON_VALGRIND != 0;
	r->setup_flags = ip.flags;
	r->features = ip.features;
	r->sq_entries = ip.sq_entries;
	r->cq_entries = ip.cq_entries;
	if (ip.flags & IORING_SETUP_SINGLE_ISSUER)
		r->caps |= CORIO__CAP_SINGLE_ISSUER;
	if (ip.flags & IORING_SETUP_DEFER_TASKRUN)
		r->caps |= CORIO__CAP_DEFER_TASKRUN;
	if (ip.flags & IORING_SETUP_COOP_TASKRUN)
		r->caps |= CORIO__CAP_COOP_TASKRUN;
	if (ip.flags & IORING_SETUP_SQPOLL)
		r->caps |= CORIO__CAP_SQPOLL;
	if (ip.flags & IORING_SETUP_TASKRUN_FLAG)
		r->caps |= CORIO__CAP_TASKRUN_FLAG;

	probe = io_uring_get_probe_ring(&r->ring);
	if (probe) {
		for (unsigned op = 0; op <= IORING_OP_LAST; op++)
			r->ops[op] = (unsigned char)io_uring_opcode_supported(probe, (int)op);
		io_uring_free_probe(probe);
	} else {
		/* IORING_REGISTER_PROBE is 5.6+; corio's kernels all have it. */
		r->ops[IORING_OP_NOP] = 1;
	}
	corio__fault_init(r);
#ifndef CORIO_FAULTS
	r->plain_wait = !r->under_valgrind && !(r->caps & CORIO__CAP_SQPOLL) && !r->fault_ebadr;
#endif
	return 0;
}

/* ---- link slots (ring.h) ---------------------------------------------------- */

struct corio__link {
	struct corio__op head;  /* the user_data of the op's SQE          */
	struct corio__op lt;    /* the user_data of the LINK_TIMEOUT SQE  */
	struct corio__op *op;   /* the caller's record, until its final CQE */
	struct corio__ring *r;
	struct corio__link *next_free;
	unsigned pending;       /* CQEs still to come: 2, 1, 0 (free)     */
};

#define LINK_CHUNK 64
struct link_chunk {
	struct link_chunk *next;
	struct corio__link slot[LINK_CHUNK];
};

static void link_put(struct corio__link *l)
{
	if (--l->pending == 0) {
		l->r->links_out--;
		l->next_free = l->r->link_free;
		l->r->link_free = l;
	}
}

static void link_head_cb(struct corio__op *hop, int32_t res, uint32_t flags)
{
	struct corio__link *l = (struct corio__link *)hop; /* head is the first member */
	struct corio__op *op = l->op;

	if (!(flags & IORING_CQE_F_MORE)) {
		l->op = NULL;
		link_put(l);
	}
	op->res = res;
	op->cqe_flags = flags;
	op->cb(op, res, flags);
}

static void link_lt_cb(struct corio__op *ltop, int32_t res, uint32_t flags)
{
	(void)res;
	(void)flags;
	link_put(ltop->data);
}

struct io_uring_sqe *corio__ring_queued_sqe(struct corio__ring *r, uint64_t user_data)
{
	struct io_uring_sq *sq = &r->ring.sq;
	struct io_uring_sqe *last;

	if (sq->sqe_tail == sq->sqe_head)
		return NULL;
	last = &sq->sqes[(sq->sqe_tail - 1) & sq->ring_mask];
	return last->user_data == user_data ? last : NULL;
}

struct corio__link *corio__ring_link_get(struct corio__ring *r)
{
	struct corio__link *l = r->link_free;

	if (!l) {
		struct link_chunk *c = calloc(1, sizeof(*c));

		if (!c)
			return NULL;
		c->next = r->link_chunks;
		r->link_chunks = c;
		for (unsigned i = 0; i < LINK_CHUNK; i++) {
			c->slot[i].next_free = r->link_free;
			r->link_free = &c->slot[i];
		}
		l = r->link_free;
	}
	r->link_free = l->next_free;
	r->links_out++;
	l->r = r;
	return l;
}

void corio__ring_link_bind(struct corio__link *l, struct io_uring_sqe *head,
			   struct io_uring_sqe *lt, struct corio__op *op)
{
	l->op = op;
	l->pending = 2;
	l->head.cb = link_head_cb;
	l->head.data = l;
	l->lt.cb = link_lt_cb;
	l->lt.data = l;
	io_uring_sqe_set_data(head, &l->head);
	io_uring_sqe_set_data(lt, &l->lt);
	op->user_data = (uint64_t)(uintptr_t)&l->head; /* what a cancel must match */
}

void corio__ring_exit(struct corio__ring *r)
{
	/* After the exit no CQE can reach a slot: free them all, pending or not. */
	if (CORIO__RING_UNLIKELY(r->emu))
		corio__emu_exit(r);
	else
		io_uring_queue_exit(&r->ring);
	for (struct link_chunk *c = r->link_chunks, *n; c; c = n) {
		n = c->next;
		free(c);
	}
	r->link_chunks = NULL;
	r->link_free = NULL;
	free(r->stash);
	r->stash = NULL;
	r->nstash = r->stash_cap = 0;
}

/*
 * Every io_uring_enter result passes through here. -EBADR: the kernel had to
 * drop completions although the ring has IORING_FEAT_NODROP (it could not
 * allocate an overflow entry: the machine is critically short of memory);
 * the fibers waiting on them never wake, and nothing can tell which they
 * are. It is counted (corio_stats.cqe_dropped) and said on stderr; the
 * kernel clears the condition once reported. Other errors are returned.
 * CORIO_RING_FAULT=ebadr makes the next waiting enter report it, for tests.
 */
int corio__ring_check(struct corio__ring *r, int ret, const char *what)
{
	if (CORIO__RING_UNLIKELY(ret == -EBADR)) {
		CORIO__RCNT_ADD(r->cnt.cqe_dropped, 1);
		corio__log("corio: %s: EBADR: the kernel dropped completions (no memory for "
			   "its CQ overflow list); operations waiting on them will never complete "
			   "(%llu so far)", what, (unsigned long long)r->cnt.cqe_dropped);
	}
	return ret;
}

static void stash_cqes(struct corio__ring *r);

/*
 * -EBUSY / -EAGAIN from a submit: the kernel wants the CQ drained (kernels
 * before 5.19 refuse new SQEs while overflowed CQEs wait) or is short of
 * request memory. Retrying without draining would spin. The CQEs are not
 * dispatched here: this runs inside corio__ring_sqe(), in the middle of
 * whoever takes an SQE (a fiber between checking its socket's queue and
 * parking on it, a callback half-way through a state change), and a
 * callback run there wakes or changes what the caller has not finished
 * looking at (found by fault injection: a reader parked with data queued,
 * faults::inline_reap_during_cancel). They are stashed and dispatched by
 * the loop's next reap, before the CQ, so their order is kept.
 */
static void submit_refused(struct corio__ring *r)
{
	stash_cqes(r);
	sched_yield();
}

struct io_uring_sqe *corio__ring_sqe_full(struct corio__ring *r)
{
	struct io_uring_sqe *sqe = NULL;

	while (!sqe) {
		int ret;

		/* SQ full: hand what is queued to the kernel and try again. With
		 * SQPOLL the kernel thread may not have consumed them yet: wait
		 * for room. */
		CORIO__RCNT_ADD(r->cnt.sq_full, 1);
		corio__fault_sq(r);
		if (r->caps & CORIO__CAP_SQPOLL) {
			io_uring_submit(&r->ring);
			io_uring_sqring_wait(&r->ring);
		} else {
			CORIO__RCNT_ADD(r->cnt.enters, 1);
			ret = corio__fault_enter(r, true);
			if (!ret)
				ret = sys_submit(r);
			ret = corio__ring_check(r, ret, "io_uring_submit");
			if (ret > 0)
				CORIO__RCNT_ADD(r->cnt.sqes, (unsigned)ret);
			else if (ret == -EAGAIN || ret == -EBUSY)
				submit_refused(r);
			else if (ret < 0 && ret != -EINTR && ret != -EBADR) {
				corio__log("corio: io_uring_submit failed with a full SQ: %s",
					   strerror(-ret));
				abort(); /* the ring itself is broken: nothing sane to do */
			}
		}
		sqe = corio__fault_sqfull(r) ? NULL : io_uring_get_sqe(&r->ring);
	}
	return sqe;
}

void corio__ring_reserve(struct corio__ring *r, unsigned n)
{
	while (io_uring_sq_space_left(&r->ring) < n) {
		CORIO__RCNT_ADD(r->cnt.sq_full, 1);
		if (r->caps & CORIO__CAP_SQPOLL) {
			corio__fault_sq(r);
			io_uring_submit(&r->ring);
			io_uring_sqring_wait(&r->ring);
		} else {
			int ret = corio__ring_enter(r, 0);

			if (ret == -EAGAIN || ret == -EBUSY)
				submit_refused(r);
		}
	}
}

bool corio__ring_needs_enter(const struct corio__ring *r)
{
	unsigned flags = IO_URING_READ_ONCE(*r->ring.sq.kflags);

	if (CORIO__RING_UNLIKELY(r->emu))
		return (flags & (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN)) ||
		       corio__emu_poll_due(r);
	return flags & (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN);
}

#define CORIO__UNLIKELY_VG(r) __builtin_expect((r)->under_valgrind, 0)


int corio__ring_enter(struct corio__ring *r, unsigned wait_nr)
{
	unsigned pending;
	int ret;

	/* The emulator takes these same steps in its own frame (emu.c) */
	if (CORIO__RING_UNLIKELY(r->emu))
		return corio__emu_ring_enter(r, wait_nr);
	if (r->nstash)
		wait_nr = 0; /* completions are waiting in the stash already */
	corio__fault_sq(r);
	pending = io_uring_sq_ready(&r->ring);
	if ((pending || wait_nr) && (ret = corio__fault_enter(r, false)) < 0)
		return ret; /* test builds: the kernel "refused" (uring/fault.h) */
	if (wait_nr && CORIO__UNLIKELY_VG(r)) {
		/* Valgrind runs one thread at a time and does not know that
		 * io_uring_enter blocks: a shard sleeping in it would keep every
		 * other thread from running. Sleep in 1 ms slices instead. */
		struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 1000000 };
		struct io_uring_cqe *cqe;

		ret = io_uring_submit_and_wait_timeout(&r->ring, &cqe, wait_nr, &ts, NULL);
		if (ret == -ETIME) {
			ret = 0;
			sched_yield(); /* valgrind hands its lock over here */
		}
	} else if (wait_nr && !(r->caps & CORIO__CAP_SQPOLL)) {
		ret = corio__ring_sys_wait(r, wait_nr);
	} else if (wait_nr) {
		ret = io_uring_submit_and_wait(&r->ring, wait_nr);
	} else if (corio__ring_needs_enter(r)) {
		/* Deferred task work or overflowed CQEs wait for us: submit and
		 * run them in the same enter. */
		ret = io_uring_submit_and_get_events(&r->ring);
	} else if (pending) {
		ret = io_uring_submit(&r->ring);
	} else {
		return 0;
	}
	CORIO__RCNT_ADD(r->cnt.enters, 1);
	if (CORIO__RING_UNLIKELY(r->fault_ebadr) && wait_nr) {
		r->fault_ebadr = false;
		ret = -EBADR;
	}
	ret = corio__ring_check(r, ret, "io_uring_enter");
	if (ret > 0)
		CORIO__RCNT_ADD(r->cnt.sqes, (unsigned)ret);
	return ret;
}

unsigned corio__ring_poll(struct corio__ring *r)
{
	/* Without TASKRUN_FLAG we cannot tell whether completions wait in the
	 * kernel: ask every time. */
	corio__fault_sq(r);
	if (corio__ring_pending(r) || corio__ring_needs_enter(r) ||
	    !(r->caps & CORIO__CAP_TASKRUN_FLAG)) {
		int ret = corio__ring_check(r, sys_submit_and_get_events(r), "io_uring_enter");

		CORIO__RCNT_ADD(r->cnt.enters, 1);
		if (ret > 0)
			CORIO__RCNT_ADD(r->cnt.sqes, (unsigned)ret);
	}
	return io_uring_cq_ready(&r->ring) + r->nstash;
}

void corio__ring_cancel(struct corio__ring *r, struct corio__op *op)
{
	struct io_uring_sqe *sqe = corio__ring_sqe(r);

	/* user_data is 0 only for a record never bound to an SQE */
	io_uring_prep_cancel64(sqe, op->user_data ? op->user_data : (uint64_t)(uintptr_t)op, 0);
	corio__sqe_set_op(sqe, NULL);
}

/*
 * Reap. Each CQE is consumed (the CQ head advanced) before its callback
 * runs, so a callback that needs an SQE and finds the kernel refusing to
 * take more until the CQ drains (-EBUSY) can reap again from inside
 * (corio__ring_sqe): nothing is dispatched twice.
 *
 * The loop ends only after a look at the ring that found no completion the
 * kernel holds back: IORING_SQ_CQ_OVERFLOW (CQEs parked in the overflow
 * list, IORING_FEAT_NODROP) or IORING_SQ_TASKRUN (deferred task work, which
 * includes a fired link timeout's cancel-by-user_data). That last flush is
 * what lets a fiber reuse a stack-resident op record right away: see
 * "Link timeouts" in core/ops.c. CORIO_RING_DISABLE=reap_flush drops the
 * task-work part of it, for the test that shows ops.c no longer needs it.
 */
/* The next CQE, or NULL: never enters the kernel (io_uring_peek_cqe()
 * would, to wait for 0 events, when the CQ is empty). */
static struct io_uring_cqe *peek(struct corio__ring *r)
{
	struct io_uring_cq *cq = &r->ring.cq;
	unsigned head = *cq->khead;

	if (io_uring_smp_load_acquire(cq->ktail) == head)
		return NULL;
	return &cq->cqes[head & cq->ring_mask];
}

/* Take every CQE off the CQ (and flush the kernel's overflow list into it)
 * without dispatching: see submit_refused(). */
static void stash_cqes(struct corio__ring *r)
{
	for (unsigned flushes = 0; flushes < 64; flushes++) {
		struct io_uring_cqe *cqe;

		while ((cqe = peek(r))) {
			if (r->nstash == r->stash_cap) {
				unsigned cap = r->stash_cap ? 2 * r->stash_cap : r->cq_entries;
				void *p = realloc(r->stash, (size_t)cap * sizeof(*r->stash));

				if (!p) {
					corio__log("corio: out of memory keeping completions aside "
						   "while the kernel refuses submissions");
					abort(); /* dispatching here instead could hang a fiber */
				}
				r->stash = p;
				r->stash_cap = cap;
			}
			r->stash[r->nstash++] = (struct corio__stashed){ cqe->user_data, cqe->res,
									cqe->flags };
			io_uring_cq_advance(&r->ring, 1);
		}
		if (!(IO_URING_READ_ONCE(*r->ring.sq.kflags) & IORING_SQ_CQ_OVERFLOW))
			break;
		CORIO__RCNT_ADD(r->cnt.enters, 1);
		corio__ring_check(r, sys_get_events(r), "io_uring_get_events");
	}
}

unsigned corio__ring_reap(struct corio__ring *r)
{
	unsigned total = 0, flushes = 0;

	/* Fast path for turns with nothing to reap (fibers only yielding). */
	if (!r->nstash && !io_uring_cq_ready(&r->ring) && !corio__ring_needs_enter(r))
		return 0;
	for (;;) {
		unsigned kflags;

		/* Stashed CQEs are older than anything now in the CQ: they go
		 * first, also after an overflow flush below has posted newer
		 * ones. A callback may stash more (it takes SQEs): index, hold
		 * no pointer, empty the stash only when it is done. Out of
		 * order, a socket's final receive CQE could overtake an earlier
		 * one and its closer free the socket under it
		 * (net::reset_churn_under_refused_submits). */
		if (CORIO__RING_UNLIKELY(r->nstash)) {
			for (unsigned i = 0; i < r->nstash; i++) {
				struct corio__stashed c = r->stash[i];

				total++;
				corio__ring_dispatch((struct corio__op *)(uintptr_t)c.user_data, c.res, c.flags);
			}
			r->nstash = 0;
		}
		total += corio__ring_walk(r);
		if (CORIO__RING_UNLIKELY(r->nstash))
			continue;
		kflags = IO_URING_READ_ONCE(*r->ring.sq.kflags) &
			 (IORING_SQ_CQ_OVERFLOW | (r->no_reap_flush ? 0 : IORING_SQ_TASKRUN));
		if (!kflags || flushes >= 64)
			break;
		/* A bound on flushes: completions that keep arriving are left for
		 * the next turn (the loop's enter flushes them), so fibers run. */
		flushes++;
		if (kflags & IORING_SQ_CQ_OVERFLOW)
			CORIO__RCNT_ADD(r->cnt.cq_overflow, 1);
		CORIO__RCNT_ADD(r->cnt.enters, 1);
		corio__ring_check(r, sys_get_events(r), "io_uring_get_events");
	}
	CORIO__RCNT_ADD(r->cnt.cqes, total);
	return total;
}
