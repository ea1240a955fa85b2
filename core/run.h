/* SPDX-License-Identifier: MIT */
/*
 * core/run.h - the run's pieces that the loop inlines (core/loop.c) and
 * core/fiber.c shares: a fiber's queue delay, the switch into a fiber that
 * has run before, the class's charge, and corio__run, which runs a lone
 * ready fiber in the loop's own frame and leaves every other run to
 * corio__run_fibers (core/fiber.c explains the run).
 */
#ifndef CORIO_CORE_RUN_H
#define CORIO_CORE_RUN_H

#include "core/internal.h"
#include "core/sanitizer.h"

/* f is taken off its queue to run now: its queue delay. */
static inline __attribute__((always_inline)) void corio__run_waited(struct corio__shard *s,
								    const struct corio_fiber *f)
{
	struct corio__class *c = s->run.c;
	uint64_t d = s->now - f->ready_t;

	/* fibers_run is the histogram's sum (corio_class_stats_get) */
	CORIO__STAT_ADD(c->st.wait_t, d);
	CORIO__STAT_ADD(c->st.wait_hist[corio__tick_bucket(d)], 1);
	if (CORIO__UNLIKELY(d > c->st.wait_max_t))
		CORIO__STAT_SET(c->st.wait_max_t, d);
}

/* Switch from the context from (the scheduler's, or a parking fiber's,
 * whose ASan fake stack is saved in *fake) into g, which has a stack and
 * context already and is the shard's current fiber from here on. */
static inline __attribute__((always_inline)) void corio__switch_into(struct corio__shard *s,
								     struct corio_fiber *g,
								     struct corio__ctx *from,
								     void **fake)
{
	s->current = g;
	CORIO__STAT_ADD(s->stats.switches, 1);
	CORIO__ASAN_START(fake, g->stack_lo, g->stack_size);
#if CORIO__TSAN
	__tsan_switch_to_fiber(g->tsan_fiber, 0);
#endif
	corio__ctx_switch(from, &g->ctx);
}

/* Scheduler side: switch into f, which has a stack and context already,
 * until control comes back to the loop (maybe from another fiber f handed
 * the CPU to). */
static inline __attribute__((always_inline)) void corio__run_resume(struct corio__shard *s,
								    struct corio_fiber *f)
{
	f->state = CORIO__F_RUNNING;
	corio__switch_into(s, f, &s->sched_ctx, &s->sched_asan_fake);
	CORIO__ASAN_FINISH(s->sched_asan_fake, NULL, NULL);
	f = s->current; /* the fiber that gave the CPU back (it read the tick) */
	s->current = NULL;
	if (f->state == CORIO__F_DONE)
		corio__fiber_reap(s, f);
}

/* The run of class c is over: c pays for it, its CPU and virtual time. */
static inline __attribute__((always_inline)) void corio__run_charge(struct corio__shard *s,
								    struct corio__class *c)
{
	uint64_t t = s->now - s->run.t0;

	c->vtime += t * c->vmul;
	CORIO__STAT_ADD(c->st.cpu_t, t);
	CORIO__STAT_ADD(c->st.runs, 1);
	if (CORIO__UNLIKELY(s->run.cut) && s->run.q->head)
		CORIO__STAT_ADD(c->st.slices_cut, 1);
}

/* The run's set-up for class id (core/fiber.c's corio__run_fibers and the
 * lone run below): its time starts at the loop's last look at the ring
 * (its tick is s->now), as the reap that made these fibers ready is
 * theirs, and its slice bounds corio_should_yield() in a lone fiber too. */
static inline __attribute__((always_inline)) struct corio__class *
corio__run_begin(struct corio__shard *s, uint32_t active, unsigned id)
{
	struct corio__class *c = &s->cls[id];

	s->sched_seen = active;
	s->run.q = &s->runq[id];
	s->run.c = c;
	s->run.stalled = false;
	s->run.cut = false;
	s->run.t0 = s->now;
	s->run.end = s->now + s->slice_ticks;
	return c;
}

/*
 * The loop's run: true when a fiber's stall was reported. When one class
 * has work and its queue holds one fiber that has run before (a reader
 * woken by its bytes), that fiber is the run, in the loop's frame: no
 * call, no budget, no peeks, which only part several fibers. run.last is
 * NULL, so whatever it makes ready waits for the next turn, as in a full
 * run. Everything else: corio__run_fibers.
 */
static inline __attribute__((always_inline)) bool corio__run(struct corio__shard *s)
{
	uint32_t active = s->runq_active;
	struct corio_fiber *f;
	struct corio__class *c;
	unsigned id;

	if (!active)
		return false;
	id = (unsigned)__builtin_ctz(active);
	f = s->runq[id].head;
	if (CORIO__UNLIKELY(active & (active - 1)) || f != s->runq[id].tail ||
	    f->state == CORIO__F_NEW)
		return corio__run_fibers(s);
	c = corio__run_begin(s, active, id);
	s->runq[id].head = s->runq[id].tail = NULL;
	s->runq_active = 0;
	f->flags &= ~CORIO__FF_QUEUED;
	s->run.last = NULL;
	corio__run_waited(s, f);
	corio__run_resume(s, f);
	corio__run_charge(s, c);
	return s->run.stalled;
}

#endif
