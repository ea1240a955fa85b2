/* SPDX-License-Identifier: MIT */
/*
 * core/sched.c - scheduling classes: which class's fibers a turn runs, the
 * registry of class names, preemption checks, per-class accounting.
 *
 * The model (docs/SCHED.md, corio/sched.h): each class has a run queue on
 * each shard (s->runq[id]); corio__ready() appends a fiber to its class's
 * queue and sets the class's bit in s->runq_active. A turn of the loop runs
 * one class (core/fiber.c, corio__run_fibers): the only one with ready
 * fibers (one test of the word: the common case costs nothing more), or
 * else the one corio__sched_pick() chooses, for at most one slice.
 *
 * Virtual time. A class's vtime grows by the ticks its fibers ran times
 * vmul = CORIO__VSCALE / shares, so a class with twice the shares ages
 * half as fast; the pick takes the least vtime, and over many slices each
 * busy class gets CPU in proportion to its shares. vtimes are compared as
 * wrapping differences (they may wrap after hours at 1 share). s->vmin is
 * the shard's virtual time: the least vtime among the classes that stayed
 * ready since the last run (s->sched_seen), or the vtime of the class that
 * ran alone. A class that comes back from idle is raised to it at the
 * pick, so it banks nothing while idle (its unused time went to the
 * others) and cannot then monopolise the shard to catch up.
 *
 * Latency classes: among the busy classes, a latency class is picked first
 * while its vtime is at most one of its own slices past the least vtime of
 * all busy classes. Within its shares it is always served next, ahead of
 * any batch class; past them it waits like any class, so it cannot starve
 * the others.
 *
 * The registry: class ids and names are runtime-wide (rt->cls_reg), so a
 * cross-shard message can name a class; each shard keeps its own shares,
 * flags, queue and accounting (s->cls[id]), set up by its first
 * corio_class_create() of the name, or from the registry when it first
 * runs work of the class (corio__class_use).
 */
#include "core/internal.h"
#include "uring/internal.h"

#include <errno.h>
#include <string.h>

static void class_setup(struct corio__shard *s, unsigned id, const char *name, unsigned shares,
			unsigned flags)
{
	struct corio__class *c = &s->cls[id];

	__atomic_store_n(&c->shares, shares, __ATOMIC_RELAXED); /* read by stats readers */
	__atomic_store_n(&c->flags, flags, __ATOMIC_RELAXED);
	c->vmul = CORIO__VSCALE / shares;
	c->vslice = s->slice_ticks * c->vmul;
	if (flags & CORIO_CLASS_LATENCY)
		s->cls_latency |= 1u << id;
	else
		s->cls_latency &= ~(1u << id);
	if (!atomic_load_explicit(&c->live, memory_order_relaxed)) {
		c->vtime = s->vmin; /* a new class starts level with the rest */
		strncpy(c->name, name, sizeof(c->name) - 1);
		atomic_store_explicit(&c->live, true, memory_order_release);
	}
}

void corio__sched_init(struct corio__shard *s)
{
	uint64_t us = s->rt->cfg.slice_us ? s->rt->cfg.slice_us : 500;

	s->slice_ticks = corio__ns_ticks(us * 1000);
	s->now = corio__tick(); /* fibers made ready before the loop's first turn */
	s->run.limit = s->ls.stall_ticks;
	s->run.budget0 = s->rt->cfg.run_budget;
	class_setup(s, 0, "default", 100, 0);
}

int corio__class_use(struct corio__shard *s, unsigned id, const char *who)
{
	struct corio_rt *rt = s->rt;
	const struct corio__class_reg *r;

	if (CORIO__LIKELY(id < CORIO_CLASS_MAX &&
			  atomic_load_explicit(&s->cls[id].live, memory_order_relaxed)))
		return 0;
	if (id >= CORIO_CLASS_MAX || id >= atomic_load_explicit(&rt->ncls, memory_order_acquire))
		return corio__error(-EINVAL, "%s: no scheduling class %u (corio_class_create)", who,
				    id);
	r = &rt->cls_reg[id];
	class_setup(s, id, r->name, r->shares, r->flags);
	return 0;
}

/* ---- the pick -------------------------------------------------------------- */

static inline bool vbefore(uint64_t a, uint64_t b)
{
	return (int64_t)(a - b) < 0;
}

unsigned corio__sched_pick(struct corio__shard *s, uint32_t active)
{
	uint32_t busy = active & s->sched_seen; /* ready at the last run too */
	uint64_t least = 0;
	unsigned best = 0;
	bool any = false;

	/* The shard's virtual time moves up to the least vtime among the
	 * classes that stayed busy; if none did, to the vtime of the class
	 * that ran last (it ran alone: it set the pace). */
	for (uint32_t m = busy; m; m &= m - 1) {
		struct corio__class *c = &s->cls[__builtin_ctz(m)];

		if (!any || vbefore(c->vtime, least))
			least = c->vtime;
		any = true;
	}
	if (!any && s->run.c)
		least = s->run.c->vtime;
	if (vbefore(s->vmin, least))
		s->vmin = least;
	/* Classes back from idle start at it: idle time is not banked. */
	for (uint32_t m = active & ~busy; m; m &= m - 1) {
		struct corio__class *c = &s->cls[__builtin_ctz(m)];

		if (vbefore(c->vtime, s->vmin))
			c->vtime = s->vmin;
	}
	any = false;
	for (uint32_t m = active; m; m &= m - 1) {
		struct corio__class *c = &s->cls[__builtin_ctz(m)];

		if (!any || vbefore(c->vtime, least)) {
			least = c->vtime;
			best = (unsigned)__builtin_ctz(m);
			any = true;
		}
	}
	/* A latency class within one slice of its share goes first. */
	for (uint32_t m = active & s->cls_latency; m; m &= m - 1) {
		struct corio__class *c = &s->cls[__builtin_ctz(m)];

		if (!vbefore(least + c->vslice, c->vtime)) {
			best = (unsigned)__builtin_ctz(m);
			break;
		}
	}
	return best;
}

/* ---- the registry and the public calls --------------------------------------- */

static int reg_find(struct corio_rt *rt, const char *name)
{
	unsigned n = atomic_load_explicit(&rt->ncls, memory_order_acquire);

	for (unsigned i = 0; i < n; i++)
		if (!strcmp(rt->cls_reg[i].name, name))
			return (int)i;
	return -ENOENT;
}

static int check_shares(const char *who, unsigned shares)
{
	if (shares < 1 || shares > CORIO_CLASS_SHARES_MAX)
		return corio__error(-EINVAL, "%s: shares is %u, must be 1..%u", who, shares,
				    CORIO_CLASS_SHARES_MAX);
	return 0;
}

int corio_class_create(const struct corio_class_opts *o)
{
	struct corio__shard *s = corio__tl_shard;
	struct corio_rt *rt;
	size_t len;
	int id, ret;

	if (!s)
		return corio__misuse(-EPERM, "corio_class_create", "%s", corio__not_fiber_why());
	if (!o || !o->name)
		return corio__error(-EINVAL, "corio_class_create: %s is NULL", o ? "name" : "opts");
	len = strlen(o->name);
	if (!len || len >= sizeof(s->cls[0].name))
		return corio__error(-EINVAL, "corio_class_create: name '%s' must be 1..%zu characters",
				    o->name, sizeof(s->cls[0].name) - 1);
	if (o->flags & ~CORIO_CLASS_LATENCY)
		return corio__error(-EINVAL, "corio_class_create: unknown flags 0x%x",
				    o->flags & ~CORIO_CLASS_LATENCY);
	for (unsigned i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return corio__error(-EINVAL, "corio_class_create: reserved[%u] is not zero", i);
	ret = check_shares("corio_class_create", o->shares);
	if (ret)
		return ret;
	if (!strcmp(o->name, "default"))
		return corio__error(-EINVAL, "corio_class_create: 'default' is the default class "
				    "(id 0): give it shares with corio_class_set_shares(0, n)");
	rt = s->rt;
	pthread_mutex_lock(&rt->lock);
	id = reg_find(rt, o->name);
	if (id < 0) {
		unsigned n = atomic_load_explicit(&rt->ncls, memory_order_relaxed);

		if (n >= CORIO_CLASS_MAX) {
			pthread_mutex_unlock(&rt->lock);
			return corio__error(-ENOSPC, "corio_class_create: '%s': all %u classes are "
					    "taken", o->name, CORIO_CLASS_MAX);
		}
		struct corio__class_reg *r = &rt->cls_reg[n];

		memset(r, 0, sizeof(*r));
		strcpy(r->name, o->name);
		r->shares = o->shares;
		r->flags = o->flags;
		atomic_store_explicit(&rt->ncls, n + 1, memory_order_release);
		id = (int)n;
	}
	pthread_mutex_unlock(&rt->lock);
	class_setup(s, (unsigned)id, o->name, o->shares, o->flags);
	return id;
}

int corio_class_find(const char *name)
{
	struct corio__shard *s = corio__tl_shard;

	if (!s)
		return corio__misuse(-EPERM, "corio_class_find", "%s", corio__not_fiber_why());
	if (!name)
		return corio__error(-EINVAL, "corio_class_find: name is NULL");
	return reg_find(s->rt, name);
}

int corio_class_set_shares(unsigned cls, unsigned shares)
{
	struct corio__shard *s = corio__tl_shard;
	int ret;

	if (!s)
		return corio__misuse(-EPERM, "corio_class_set_shares", "%s", corio__not_fiber_why());
	ret = check_shares("corio_class_set_shares", shares);
	if (!ret)
		ret = corio__class_use(s, cls, "corio_class_set_shares");
	if (ret)
		return ret;
	class_setup(s, cls, s->cls[cls].name, shares, s->cls[cls].flags);
	return 0;
}

int corio_class_switch(unsigned cls)
{
	struct corio_fiber *f = corio__self();
	int ret, old;

	if (!f)
		return corio__misuse(-EPERM, "corio_class_switch", "%s", corio__not_fiber_why());
	ret = corio__class_use(f->shard, cls, "corio_class_switch");
	if (ret)
		return ret;
	old = f->cls;
	f->cls = (uint8_t)cls;
	return old;
}

unsigned corio_class_current(void)
{
	struct corio_fiber *f = corio__self();

	return f ? f->cls : 0;
}

/*
 * Completions wait for the loop: the kernel has CQEs in the ring, or task
 * work that the next enter turns into CQEs (IORING_SQ_TASKRUN, on rings
 * that have the flag). Two loads of the ring's shared memory, as
 * Seastar's need_preempt looks at its completion queues. The fallback's
 * readiness is only known by asking epoll: not here.
 */
static inline bool io_waiting(const struct corio__ring *r)
{
	if (CORIO__UNLIKELY(r->emu))
		return false;
	if ((r->caps & CORIO__CAP_TASKRUN_FLAG) &&
	    (IO_URING_READ_ONCE(*r->ring.sq.kflags) & IORING_SQ_TASKRUN))
		return true;
	return io_uring_cq_ready(&r->ring) != 0;
}

/*
 * The slice is used; or a tenth of it is and completions wait for the
 * loop: then the run ends early (run.end moves to now), so the loop reaps
 * them and a latency class they wake runs next, instead of waiting for
 * the rest of a batch class's slice.
 */
static bool yield_due(struct corio__shard *s)
{
	uint64_t now = corio__tick();

	if (now >= s->run.end)
		return true;
	if (now - s->run.t0 >= s->slice_ticks / 10 && io_waiting(&s->ring)) {
		s->run.end = now;
		return true;
	}
	return false;
}

bool corio_should_yield(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s && s->current && yield_due(s);
}

void corio_maybe_yield(void)
{
	struct corio__shard *s = corio__tl_shard;
	struct corio_fiber *f;

	if (!s || !(f = s->current) || !yield_due(s))
		return;
	CORIO__STAT_ADD(s->cls[f->cls].st.yields, 1);
	corio_yield();
}

/* ---- accounting ---------------------------------------------------------------- */

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

int corio_class_stats_get(struct corio_rt *rt, unsigned shard, unsigned cls,
			  struct corio_class_stats *out)
{
	struct corio__shard *s;
	struct corio__class *c;
	unsigned n;

	rt = corio__rt_or_own(rt);
	if (!rt)
		return corio__error(-EPERM, "corio_class_stats_get: rt is NULL off a shard");
	if (!out || shard >= rt->nshards)
		return corio__error(-EINVAL, "corio_class_stats_get: %s",
				    out ? "no such shard" : "out is NULL");
	n = atomic_load_explicit(&rt->ncls, memory_order_acquire);
	if (cls >= CORIO_CLASS_MAX || (cls && cls >= n))
		return corio__error(-ENOENT, "corio_class_stats_get: no class %u", cls);
	s = rt->shards[shard];
	c = &s->cls[cls];
	memset(out, 0, sizeof(*out));
	out->id = cls;
	if (!atomic_load_explicit(&c->live, memory_order_acquire)) {
		/* created elsewhere, never used here */
		strcpy(out->name, rt->cls_reg[cls].name);
		out->shares = rt->cls_reg[cls].shares;
		out->flags = rt->cls_reg[cls].flags;
		return 0;
	}
	memcpy(out->name, c->name, sizeof(out->name)); /* written once, before live */
	out->shares = __atomic_load_n(&c->shares, __ATOMIC_RELAXED);
	out->flags = __atomic_load_n(&c->flags, __ATOMIC_RELAXED);
	out->cpu_ns = corio__ticks_ns(LD(c->st.cpu_t));
	out->runs = LD(c->st.runs);
	out->slices_cut = LD(c->st.slices_cut);
	out->yields = LD(c->st.yields);
	out->wait_ns = corio__ticks_ns(LD(c->st.wait_t));
	out->wait_max_ns = corio__ticks_ns(LD(c->st.wait_max_t));
	for (unsigned b = 0; b < CORIO_STATS_HIST_BUCKETS; b++) {
		out->wait_hist[b] = LD(c->st.wait_hist[b]);
		out->fibers_run += out->wait_hist[b];
	}
	return 0;
}

uint64_t corio_class_wait_quantile(const struct corio_class_stats *st, double q)
{
	int b = st ? corio__hist_rank(st->wait_hist, CORIO_STATS_HIST_BUCKETS, q) : -1;
	uint64_t hi;

	if (b < 0)
		return 0;
	hi = 1ull << (b + 8); /* the bucket's upper bound */
	return hi < st->wait_max_ns ? hi : st->wait_max_ns;
}
