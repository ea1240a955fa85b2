/* SPDX-License-Identifier: MIT */
/*
 * core/fiber.c - fibers: spawn, switch, park/wake, yield, join, exit, cancel,
 * wait queues.
 *
 * The loop runs the fibers that are ready when a turn begins (at most
 * run_budget of them; the run queue is FIFO). While that run lasts, a fiber
 * that parks or yields hands the CPU straight to the next one: one context
 * switch, not two through the loop's own context (the scheduler). Control
 * goes back to the scheduler when the run is over, when the next fiber has
 * never run (it needs a stack first) and when a fiber ends (its stack is
 * freed from another). A fiber struct
 * comes from a per-shard free list (allocated in chunks, never freed before
 * the shard ends); its stack is taken from the shard's stack cache when it
 * first runs and returned when it ends, so spawning is cheap and a fiber
 * that never ran holds no stack.
 *
 * Cancellation is sticky: once cancelled, every blocking call returns
 * -ECANCELED. A fiber parked on a wait queue is taken off it and woken at
 * once; one parked on a kernel op gets an async cancel and stays parked
 * until the op's final CQE (invariant 2).
 */
#include "core/run.h"


#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIBER_CHUNK 64

/*
 * Fiber records are never unmapped while the shard runs, so a handle to a
 * fiber that was joined, or detached and ended, still points at a record
 * in the pool: its state is CORIO__F_FREE and every call taking a handle
 * refuses it with -EINVAL. That holds until the record is reused by a
 * later spawn. To push that moment back, freed records queue FIFO and a
 * record is taken only while more than FIBER_QUARANTINE others wait behind
 * it (a fresh chunk is allocated otherwise): a record is reused no sooner
 * than FIBER_QUARANTINE other fibers (or select stand-ins) were freed after
 * it. Cost: at most FIBER_QUARANTINE idle records (~16 KiB) per shard.
 */
#define FIBER_QUARANTINE 64

static int fiber_chunk_add(struct corio__shard *s)
{
	struct corio_fiber *chunk = calloc(FIBER_CHUNK, sizeof(*chunk));

	if (!chunk)
		return -ENOMEM;
	if (s->nchunks == s->chunks_cap) {
		size_t cap = s->chunks_cap ? s->chunks_cap * 2 : 16;
		void **n = realloc(s->fiber_chunks, cap * sizeof(*n));

		if (!n) {
			free(chunk);
			return -ENOMEM;
		}
		s->fiber_chunks = n;
		s->chunks_cap = cap;
	}
	s->fiber_chunks[s->nchunks++] = chunk;
	/* Fresh records go first: they are nobody's stale handle. */
	for (int i = FIBER_CHUNK - 1; i >= 0; i--) {
		chunk[i].state = CORIO__F_FREE;
		chunk[i].run_next = s->fiber_free;
		s->fiber_free = &chunk[i];
		if (!s->fiber_free_tail)
			s->fiber_free_tail = &chunk[i];
	}
	s->fiber_nfree += FIBER_CHUNK;
	return 0;
}

static struct corio_fiber *fiber_alloc(struct corio__shard *s)
{
	struct corio_fiber *f;

	if (CORIO__UNLIKELY(s->fiber_nfree <= FIBER_QUARANTINE) && fiber_chunk_add(s) &&
	    !s->fiber_free)
		return NULL; /* no memory, and nothing at all to reuse */
	f = s->fiber_free;
	s->fiber_free = f->run_next;
	if (!s->fiber_free)
		s->fiber_free_tail = NULL;
	s->fiber_nfree--;
	return f;
}

static void fiber_free(struct corio__shard *s, struct corio_fiber *f)
{
	f->state = CORIO__F_FREE;
	f->flags = 0;
	f->joiner = NULL;
	f->run_next = NULL;
	if (s->fiber_free_tail)
		s->fiber_free_tail->run_next = f;
	else
		s->fiber_free = f;
	s->fiber_free_tail = f;
	s->fiber_nfree++;
}

void corio__fiber_pool_free(struct corio__shard *s)
{
	for (size_t i = 0; i < s->nchunks; i++)
		free(s->fiber_chunks[i]);
	free(s->fiber_chunks);
	s->fiber_chunks = NULL;
	s->nchunks = s->chunks_cap = 0;
	s->fiber_free = s->fiber_free_tail = NULL;
	s->fiber_nfree = 0;
}

static void all_unlink(struct corio__shard *s, struct corio_fiber *f)
{
	CORIO__DLIST_DEL(s->all, f, all_next, all_prev);
}

/* ---- the switch ----------------------------------------------------------- */

static void fiber_main(void *arg) __attribute__((noreturn));
static void fiber_end(struct corio_fiber *f) __attribute__((noreturn));

/* After control arrives in a fiber (first entry or return from a park),
 * from the scheduler or from another fiber. The old stack's bounds are not
 * kept: the scheduler's were recorded by fiber_main. */
static inline void arrived(struct corio_fiber *f)
{
	CORIO__ASAN_FINISH(f->asan_fake, NULL, NULL);
	(void)f;
}

/* Out of the switch path: f ran d ticks of wall time, past stall_ns; the
 * CPU clock decides what to report. */
static __attribute__((noinline, cold)) void ran_long(struct corio__shard *s,
						     const struct corio_fiber *f, uint64_t d)
{
	if (corio__stall_report(s, f, corio__ticks_ns(d), 0))
		s->run.stalled = true; /* the turn's time is answered for */
}

/* At every switch away from f while the run lasts: one tick read, which
 * times the stall detector, the class's slice and the next fiber's queue
 * delay; everything else only when f ran past stall_ns. */
static inline void ran(struct corio__shard *s, const struct corio_fiber *f)
{
	uint64_t now = corio__tick(), d = now - s->now;

	s->now = now;
	if (CORIO__UNLIKELY(d > s->run.limit))
		ran_long(s, f, d);
}

/* The next fiber of this turn's run, or NULL when the run is over: its
 * budget spent, its slice used, or the fiber queued last when it began
 * has run. */
static inline struct corio_fiber *run_peek(struct corio__shard *s)
{
	struct corio_fiber *f;

	if (!s->run.last || !(f = s->run.q->head))
		return NULL; /* run.last first: NULL after a lone fiber's run */
	if (CORIO__UNLIKELY(s->now >= s->run.end)) {
		s->run.last = NULL;
		s->run.cut = true;
		return NULL;
	}
	return f;
}

/* Take f, which run_peek() gave, off the queue. */
static inline void run_take(struct corio__shard *s, struct corio_fiber *f)
{
	struct corio__runq *q = s->run.q;

	q->head = f->run_next;
	if (!q->head) {
		q->tail = NULL;
		s->runq_active &= ~s->run.bit;
	}
	f->flags &= ~CORIO__FF_QUEUED;
	if (f == s->run.last || !--s->run.budget)
		s->run.last = NULL;
	corio__run_waited(s, f);
}

/* Scheduler side: run f until control comes back to the loop, which may be
 * from another fiber f handed the CPU to. */
static inline __attribute__((always_inline)) void switch_to(struct corio__shard *s,
							     struct corio_fiber *f)
{
	if (f->state == CORIO__F_NEW) {
		if (corio__stack_get(s, f)) {
			/* No stack (vm.max_map_count, address space): the fiber
			 * ends without running, with every end step. */
			corio__fiber_end_unrun(s, f, -ENOMEM);
			return;
		}
		corio__ctx_make(&f->ctx, f->stack_lo, f->stack_size, fiber_main, f);
#if CORIO__TSAN
		f->tsan_fiber = __tsan_create_fiber(0);
#endif
	}
	corio__run_resume(s, f);
}

bool corio__run_fibers(struct corio__shard *s)
{
	uint32_t active = s->runq_active;
	struct corio__class *c;
	struct corio_fiber *f;
	unsigned id;

	if (!active)
		return false;
	/* one class with work (the common case): no pick */
	id = CORIO__LIKELY(!(active & (active - 1))) ? (unsigned)__builtin_ctz(active)
						      : corio__sched_pick(s, active);
	c = corio__run_begin(s, active, id);
	s->run.bit = 1u << id;
	s->run.last = s->run.q->tail;
	s->run.budget = s->run.budget0;
	while ((f = run_peek(s))) {
		run_take(s, f);
		if (f->state == CORIO__F_NEW && (f->flags & CORIO__FF_CANCELLED))
			corio__fiber_end_unrun(s, f, -ECANCELED);
		else
			switch_to(s, f);
		/* f may be back in the fiber pool: its name and id stay until
		 * the next spawn reuses it. */
	}
	corio__run_charge(s, c);
	return s->run.stalled;
}

/* Fiber side: f parks or yields. Hand the CPU to the next fiber of the run
 * if it has run before; else give it back to the scheduler. */
void corio__leave(struct corio__shard *s, struct corio_fiber *f)
{
	struct corio_fiber *g;

	ran(s, f);
	g = run_peek(s);
	if (g && g->state != CORIO__F_NEW) {
		run_take(s, g);
		g->state = CORIO__F_RUNNING;
		if (g == f)
			return; /* f yielded and is next: no switch */
		corio__switch_into(s, g, &f->ctx, &f->asan_fake);
	} else {
		CORIO__ASAN_START(&f->asan_fake, s->sched_stack_bottom, s->sched_stack_size);
#if CORIO__TSAN
		__tsan_switch_to_fiber(s->tsan_sched, 0);
#endif
		corio__ctx_switch(&f->ctx, &s->sched_ctx);
	}
	arrived(f);
}

static void fiber_main(void *arg)
{
	struct corio_fiber *f = arg;
	struct corio__shard *s = f->shard;

	CORIO__ASAN_FINISH(NULL, &s->sched_stack_bottom, &s->sched_stack_size);
	f->status = f->fn(f->arg);
	fiber_end(f);
}

static void fiber_end(struct corio_fiber *f)
{
	struct corio__shard *s = f->shard;

	f->state = CORIO__F_DONE;
	if (f->joiner)
		corio__ready(f->joiner, 0);
	ran(s, f);
	/* Final switch: NULL tells ASan this stack's fake frames can go. */
	CORIO__ASAN_START(NULL, s->sched_stack_bottom, s->sched_stack_size);
#if CORIO__TSAN
	__tsan_switch_to_fiber(s->tsan_sched, 0);
#endif
	corio__ctx_switch(&f->ctx, &s->sched_ctx);
	__builtin_unreachable();
}

void corio__fiber_end_unrun(struct corio__shard *s, struct corio_fiber *f, int status)
{
	void (*unrun)(struct corio_fiber *) = f->unrun;

	f->status = status;
	f->state = CORIO__F_DONE;
	if (f->joiner)
		corio__ready(f->joiner, 0);
	f->unrun = NULL;
	if (unrun)
		unrun(f); /* fn never ran: whoever spawned it releases arg */
	corio__fiber_reap(s, f);
}

void corio__fiber_reap(struct corio__shard *s, struct corio_fiber *f)
{
	if (f->group)
		corio__group_exit(f); /* every way a fiber ends comes through here */
	corio__stack_put(s, f);
#if CORIO__TSAN
	if (f->tsan_fiber) {
		__tsan_destroy_fiber(f->tsan_fiber);
		f->tsan_fiber = NULL;
	}
#endif
	all_unlink(s, f);
	CORIO__STAT_ADD(s->stats.fibers_live, -1);
	corio__shard_busy(s);
	if (f->flags & CORIO__FF_DETACHED)
		fiber_free(s, f);
}

/* ---- run queue and parking -------------------------------------------------- */

void corio__ready_proxy(struct corio_fiber *f, int res)
{
	f->proxy_wake(f, res); /* a select's stand-in: tell its select */
}

int corio__park(void)
{
	struct corio__shard *s = corio__tl_shard;
	struct corio_fiber *f = s->current;

	f->state = CORIO__F_PARKED;
	corio__leave(s, f);
	return f->wake_res;
}

int corio__park_bounded(void)
{
	struct corio_fiber *f = corio__self();
	struct corio_timer dt; /* the deadline scope's timer (core/deadline.c) */
	int ret;

	if (CORIO__LIKELY(!f->deadline_ns))
		return corio__park();
	ret = corio__deadline_arm_park(&dt, f);
	if (ret < 0)
		return ret;
	ret = corio__park();
	corio__deadline_disarm(&dt);
	return ret;
}

void corio_yield(void)
{
	struct corio_fiber *f = corio__self();

	if (!f)
		return;
	corio__ready(f, 0);
	corio__leave(f->shard, f);
}

/* ---- wait queues -------------------------------------------------------------- */

static void wq_remove(struct corio_waitq *wq, struct corio_fiber *f)
{
	CORIO__DLIST_DEL2(wq->head, wq->tail, f, wq_next, wq_prev);
	f->wq = NULL;
}

void corio__wq_push(struct corio_waitq *wq, struct corio_fiber *f)
{
	f->wq = wq;
	CORIO__DLIST_APPEND(wq->head, wq->tail, f, wq_next, wq_prev);
}

void corio__wq_del(struct corio_fiber *f)
{
	if (f->wq)
		wq_remove(f->wq, f);
}

int corio__wq_wait_slow(struct corio_waitq *wq)
{
	struct corio_fiber *f = corio__self();
	struct corio_timer dt; /* the deadline scope's timer (core/deadline.c) */
	bool bounded;
	int ret;

	/* The public calls check first (corio__may_block, naming themselves);
	 * this catches a path that did not. */
	CORIO__REQUIRE_FIBER("a blocking corio call", -EPERM);
	if (f->flags & CORIO__FF_CANCELLED)
		return -ECANCELED;
	bounded = f->deadline_ns != 0;
	if (CORIO__UNLIKELY(bounded) && (ret = corio__deadline_arm(&dt, f)) < 0)
		return ret;
	ret = corio__wq_park(f->shard, f, wq);
	if (CORIO__UNLIKELY(bounded))
		corio__deadline_disarm(&dt);
	return ret;
}

void corio__wq_unpark(struct corio_fiber *f, int res)
{
	if (!f->wq)
		return;
	wq_remove(f->wq, f);
	corio__ready(f, res);
}

struct corio_fiber *corio__wq_wake_one(struct corio_waitq *wq, int res)
{
	struct corio_fiber *f = wq->head;

	if (!f)
		return NULL;
	wq_remove(wq, f);
	corio__ready(f, res);
	return f;
}


/* ---- select stand-ins ----------------------------------------------------------- */

struct corio_fiber *corio__proxy_get(struct corio__shard *s,
				     void (*wake)(struct corio_fiber *p, int res), void *arg)
{
	struct corio_fiber *p = fiber_alloc(s);

	if (!p)
		return NULL;
	memset(p, 0, sizeof(*p));
	p->shard = s;
	p->proxy_wake = wake;
	p->arg = arg;
	p->state = CORIO__F_PARKED; /* never runs; never on the live list */
	return p;
}

void corio__proxy_put(struct corio__shard *s, struct corio_fiber *p)
{
	assert(!p->wq);
	p->proxy_wake = NULL;
	fiber_free(s, p);
}

/* ---- public fiber API ---------------------------------------------------------- */

/* A fiber that never ran hands arg to its spawn options' release. */
static void release_unrun(struct corio_fiber *f)
{
	((void (*)(void *))f->unrun_ctx[0])(f->arg);
}

int corio_spawn(int (*fn)(void *), void *arg, const struct corio_spawn_opts *opts,
		struct corio_fiber **out)
{
	if (opts && opts->release)
		return corio__spawn_unrun(fn, arg, opts, out, release_unrun,
					  (uintptr_t)opts->release, 0);
	return corio__spawn_unrun(fn, arg, opts, out, NULL, 0, 0);
}

int corio__spawn_unrun(int (*fn)(void *), void *arg, const struct corio_spawn_opts *opts,
		       struct corio_fiber **out, void (*unrun)(struct corio_fiber *f),
		       uintptr_t ctx0, uintptr_t ctx1)
{
	struct corio__shard *s = corio__tl_shard;
	struct corio_fiber *f;

	if (out)
		*out = NULL;
	if (!s)
		return corio__misuse(-EPERM, "corio_spawn", "%s", corio__not_fiber_why());
	if (!fn)
		return corio__error(-EINVAL, "corio_spawn: fn is NULL");
	if (opts) {
		if (opts->flags)
			return corio__error(-EINVAL, "corio_spawn: unknown flags 0x%x", opts->flags);
		if (opts->sched_class) {
			int ret = corio__class_use(s, opts->sched_class, "corio_spawn");

			if (ret)
				return ret;
		}
		if (opts->stack_size &&
		    (opts->stack_size < CORIO__STACK_MIN || opts->stack_size > CORIO__STACK_MAX))
			return corio__error(-EINVAL,
					    "corio_spawn: stack_size is %zu, must be 0 or 16 KiB..1 GiB",
					    opts->stack_size);
	}
	if (s->stopping)
		return -ECANCELED;
	f = fiber_alloc(s);
	if (!f)
		return -ENOMEM;
	memset(f, 0, sizeof(*f));
	f->shard = s;
	f->fn = fn;
	f->arg = arg;
	f->id = ++s->next_fiber_id;
	f->state = CORIO__F_NEW;
	f->unrun = unrun;
	f->unrun_ctx[0] = ctx0;
	f->unrun_ctx[1] = ctx1;
	f->stack_req = opts ? corio__stack_round(opts->stack_size) : 0;
	f->cls = opts ? (uint8_t)opts->sched_class : 0;
	if (opts && opts->name) {
		strncpy(f->name, opts->name, sizeof(f->name) - 1);
	}
	/* Inherit the spawner's deadline scope? No: a new fiber is a new scope. */
	if (!out)
		f->flags |= CORIO__FF_DETACHED;
	CORIO__DLIST_PUSH(s->all, f, all_next, all_prev);
	CORIO__STAT_ADD(s->stats.fibers_live, 1);
	CORIO__STAT_ADD(s->stats.fibers_spawned, 1);
	corio__shard_busy(s);
	corio__ready(f, 0);
	if (out)
		*out = f;
	return 0;
}

/* Why handle f cannot be joined or detached by a fiber of shard s (a
 * message for corio_last_error()), or NULL. A record back in the pool
 * (CORIO__F_FREE: joined, or detached and ended) or lent to a select as a
 * stand-in is refused until a spawn reuses it (fiber_alloc's quarantine). */
static const char *unjoinable(const struct corio__shard *s, const struct corio_fiber *f)
{
	if (!f)
		return "the fiber is NULL";
	if (f->shard != s)
		return "the fiber belongs to another shard";
	if (f->state == CORIO__F_FREE || f->proxy_wake)
		return "the fiber was already joined, or was detached and has ended";
	if (f->flags & CORIO__FF_DETACHED)
		return "the fiber is detached";
	if (f->joiner)
		return "another fiber (or a corio_select) is joining it";
	return NULL;
}

int corio_join(struct corio_fiber *f, int *status)
{
	struct corio_fiber *self = corio__self();
	const char *why;
	int ret;

	CORIO__REQUIRE_FIBER("corio_join", -EPERM);
	if (f == self)
		return corio__error(-EINVAL, "corio_join: a fiber cannot join itself");
	why = unjoinable(self->shard, f);
	if (why)
		return corio__error(-EINVAL, "corio_join: %s", why);
	/* Cancellation and the deadline scope first, even when f has ended
	 * (corio.h's rule): f stays joinable. */
	ret = corio__may_block("corio_join");
	while (ret == 0 && f->state != CORIO__F_DONE) {
		f->joiner = self;
		ret = corio__park_bounded(); /* -ETIMEDOUT at the deadline scope */
		f->joiner = NULL;
		if (ret < 0 && f->state == CORIO__F_DONE)
			ret = 0; /* it ended as we were woken: take it */
		else if (ret == 0)
			ret = corio__may_block("corio_join"); /* woken by a cancel */
	}
	if (ret < 0)
		return ret; /* f stays joinable */
	if (status)
		*status = f->status;
	fiber_free(self->shard, f);
	return 0;
}

int corio_detach(struct corio_fiber *f)
{
	struct corio__shard *s = corio__tl_shard;
	const char *why;

	if (!s)
		return corio__misuse(-EPERM, "corio_detach", "%s", corio__not_fiber_why());
	why = unjoinable(s, f);
	if (why)
		return corio__error(-EINVAL, "corio_detach: %s", why);
	if (f->state == CORIO__F_DONE) {
		fiber_free(s, f);
		return 0;
	}
	f->flags |= CORIO__FF_DETACHED;
	return 0;
}

void corio_exit(int status)
{
	struct corio_fiber *f = corio__self();

	if (!f) {
		fprintf(stderr, "corio: corio_exit called outside a fiber\n");
		abort(); /* API misuse, not input: there is no fiber to end */
	}
	f->status = status;
	fiber_end(f);
}

void corio__fiber_cancel(struct corio_fiber *f)
{
	struct corio__shard *s = f->shard;

	if (f->state == CORIO__F_DONE || (f->flags & CORIO__FF_CANCELLED))
		return;
	f->flags |= CORIO__FF_CANCELLED;
	switch (f->state) {
	case CORIO__F_NEW:
		/* Never ran: it stays queued, and the loop ends it without
		 * running it (status -ECANCELED). */
		break;
	case CORIO__F_PARKED:
		if (f->nocancel) {
			/* uninterruptible: marked, left parked */
		} else if (f->wq) {
			wq_remove(f->wq, f);
			corio__ready(f, -ECANCELED);
		} else if (f->wait_op) {
			corio__ring_cancel(&s->ring, f->wait_op);
		} else if (f != s->current) {
			/* parked in join or a bare park: wake with -ECANCELED */
			corio__ready(f, -ECANCELED);
		}
		break;
	default:
		break;
	}
}

int corio_cancel(struct corio_fiber *f)
{
	struct corio__shard *s = corio__tl_shard;

	if (!s)
		return corio__misuse(-EPERM, "corio_cancel", "%s", corio__not_fiber_why());
	if (!f || f->shard != s)
		return corio__error(-EINVAL, "corio_cancel: %s",
				    f ? "the fiber belongs to another shard" : "the fiber is NULL");
	if (f->state == CORIO__F_FREE || f->proxy_wake)
		return corio__error(-EINVAL, "corio_cancel: the fiber was already joined, "
					     "or was detached and has ended");
	corio__fiber_cancel(f);
	return 0;
}

struct corio_fiber *corio_self(void)
{
	return corio__self();
}

int corio_cancelled(void)
{
	struct corio_fiber *f = corio__self();

	return f && (f->flags & CORIO__FF_CANCELLED);
}

const char *corio_fiber_name(const struct corio_fiber *f)
{
	return f ? f->name : "";
}
