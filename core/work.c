/* SPDX-License-Identifier: MIT */
/*
 * core/work.c - the blocking-work pool (corio_work, corio/work.h).
 *
 * ---- Who touches what ----------------------------------------------------------
 * A job record goes through three hands:
 *  1. the calling shard fills it and appends it to the pool's queue (one
 *     mutex for the runtime: a job costs microseconds at least, so the lock
 *     is not what limits it);
 *  2. a pool thread takes it off the queue (state RUNNING, under the lock),
 *     runs fn, stores the result and the times, and pushes the record on its
 *     home shard's `done` stack: a Treiber stack (CAS push by any thread,
 *     exchange-all pop by the owner, so no ABA), the same shape as a
 *     cross-shard call's reply (core/msg.c). The thread then hints the
 *     part (corio__shard_hint), reads the home shard's `sleeping` and, if
 *     it won the exchange, writes the shard's eventfd. It touches nothing
 *     else of the shard;
 *  3. the home shard pops it in its part's poll (in the turn after a hint)
 *     and either wakes the waiting fiber or,
 *     if that fiber left (cancel, deadline), calls release(arg) and frees
 *     the record.
 * `waiter` is read and written only on the home shard, so the decision
 * "wake or release" needs no atomics. `state` is the one field both sides
 * write, always under the pool lock: a caller that leaves takes a QUEUED job
 * back out of the queue (fn never runs), and leaves a RUNNING one to finish.
 *
 * ---- No lost wake-up -----------------------------------------------------------
 * The pusher's CAS on `done`, its hint and its load of `sleeping` are
 * seq_cst; the shard stores sleeping = 1 (seq_cst) before its last look,
 * a load of the hint word (seq_cst). The store-buffering argument of
 * core/msg.c applies: the shard sees the hint, or the pusher sees the shard
 * asleep and rings. A pusher that finds the bit set skips its fetch_or;
 * the loop's exchange of the hint comes after that load, and the poll's
 * exchange of `done` after it, so the record is taken.
 *
 * ---- Shutdown ------------------------------------------------------------------
 * A stopping shard cancels its fibers; a fiber waiting for a job leaves at
 * once (the job is abandoned), so shards do not wait for the pool. An
 * internal caller that must wait for fn (it lent fn the fiber's memory) parks
 * uninterruptibly, and its shard keeps turning until fn is done. corio_wait(),
 * after joining the shards, stops the pool: jobs still queued never run,
 * running ones are waited for, and every abandoned job's release runs on the
 * waiting thread. Then the census (each shard's `out` must be 0).
 */
#include "core/internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORK_THREADS_DEFAULT 4u
#define WORK_QUEUE_DEFAULT 1024u
#define FREE_KEEP 64u /* records a shard keeps for reuse */

enum { JOB_QUEUED, JOB_RUNNING };

struct job {
	intptr_t (*fn)(void *);
	void *arg;
	void (*release)(void *);
	intptr_t result;
	struct corio__shard *home;
	struct corio_fiber *waiter; /* home shard only; NULL once the caller left */
	struct job *next;           /* queue link under the lock, then the done stack */
	uint64_t queued_ns, start_ns, end_ns;
	int state;                  /* under the pool lock */
	bool ran;                   /* the pool thread ran fn (written before the push) */
	bool back;                  /* home shard only: back from the pool */
};

struct corio__pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *head, *tail;
	/* idle: threads waiting on cond (a signalled one until it has the
	 * lock again); starting: created, not yet at the queue */
	unsigned queued, running, idle, starting, nthreads, max_threads, max_queue;
	bool stop;
	pthread_t *threads;
	cpu_set_t mask; /* the process's affinity at corio_start() */
	/* copies of queued/running/nthreads for lock-free readers (stats) */
	uint64_t st_queued, st_running, st_threads;
};

/* Per-shard part. */
struct work {
	_Atomic(struct job *) done;
	struct job *free;
	unsigned nfree;
	uint64_t out; /* records taken from this shard and not back (census) */
	struct corio_work_stats st; /* owner-written; pool fields unused */
};

static inline struct work *part(struct corio__shard *s)
{
	return s->parts[CORIO__PART_WORK];
}

/* ---- the pool (runtime-wide) ------------------------------------------------------ */

int corio__pool_new(struct corio_rt *rt, const cpu_set_t *mask)
{
	struct corio__pool *p = calloc(1, sizeof(*p));
	unsigned n = rt->cfg.work_threads ? rt->cfg.work_threads : WORK_THREADS_DEFAULT;

	if (!p)
		return -ENOMEM;
	p->threads = calloc(n, sizeof(*p->threads));
	if (!p->threads) {
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->max_threads = n;
	p->max_queue = rt->cfg.work_queue ? rt->cfg.work_queue : WORK_QUEUE_DEFAULT;
	p->mask = *mask;
	rt->pool = p;
	return 0;
}

static void pool_counts(struct corio__pool *p) /* under the lock */
{
	__atomic_store_n(&p->st_queued, p->queued, __ATOMIC_RELAXED);
	__atomic_store_n(&p->st_running, p->running, __ATOMIC_RELAXED);
	__atomic_store_n(&p->st_threads, p->nthreads, __ATOMIC_RELAXED);
}

/* Give a finished job back to its home shard (pool thread). */
static void job_home(struct job *j)
{
	struct corio__shard *h = j->home;
	struct work *w = part(h);
	struct job *top = atomic_load(&w->done);

	do
		j->next = top;
	while (!atomic_compare_exchange_weak(&w->done, &top, j));
	corio__shard_hint(h, CORIO__PART_WORK);
	if (atomic_load(&h->sleeping) && atomic_exchange(&h->sleeping, 0))
		corio__shard_wake(h);
}

static void *pool_thread(void *arg)
{
	struct corio__pool *p = arg;

	pthread_mutex_lock(&p->lock);
	p->starting--;
	for (;;) {
		struct job *j;

		while (!p->head && !p->stop) {
			p->idle++;
			pthread_cond_wait(&p->cond, &p->lock);
			p->idle--;
		}
		if (!p->head) /* stopping, and nothing queued */
			break;
		j = p->head;
		p->head = j->next;
		if (!p->head)
			p->tail = NULL;
		p->queued--;
		if (p->stop) {
			/* corio_wait(): every shard has ended, so nobody waits for
			 * this job; it never runs, and goes home to be released. */
			pool_counts(p);
			pthread_mutex_unlock(&p->lock);
			job_home(j);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		j->state = JOB_RUNNING;
		p->running++;
		pool_counts(p);
		pthread_mutex_unlock(&p->lock);

		j->start_ns = corio_now_ns();
		j->result = j->fn(j->arg);
		j->end_ns = corio_now_ns();
		j->ran = true;
		job_home(j);

		pthread_mutex_lock(&p->lock);
		p->running--;
		pool_counts(p);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Start one more thread (under the lock). Created with every signal blocked
 * (set in the creator around pthread_create, so the thread never runs with
 * the shard's mask) and the process's start-time affinity, not the shard's
 * CPU. 0 or -errno. */
static int pool_grow(struct corio__pool *p)
{
	pthread_attr_t attr;
	sigset_t all, old;
	int ret;

	if (pthread_attr_init(&attr))
		return -ENOMEM;
	pthread_attr_setaffinity_np(&attr, sizeof(p->mask), &p->mask);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&p->threads[p->nthreads], &attr, pool_thread, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (ret)
		return -ret;
	p->nthreads++;
	p->starting++;
	return 0;
}

static void drain_done(struct corio__shard *s);

/* corio_wait(), after every shard thread has been joined: run out the pool
 * and hand every job back. */
void corio__pool_stop(struct corio_rt *rt)
{
	struct corio__pool *p = rt->pool;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	/* No thread was ever started: queued jobs are still in the queue. */
	while (p->head) {
		struct job *j = p->head;

		p->head = j->next;
		job_home(j);
	}
	p->tail = NULL;
	p->queued = 0;
	p->nthreads = 0;
	pool_counts(p);
	for (unsigned i = 0; i < rt->nshards; i++)
		if (rt->shards[i] && part(rt->shards[i]))
			drain_done(rt->shards[i]);
}

void corio__pool_free(struct corio_rt *rt)
{
	struct corio__pool *p = rt->pool;

	if (!p)
		return;
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p->threads);
	free(p);
	rt->pool = NULL;
}

/* ---- job records (per shard) ------------------------------------------------------ */

static struct job *job_get(struct work *w)
{
	struct job *j = w->free;

	if (j) {
		w->free = j->next;
		w->nfree--;
	} else if (!(j = malloc(sizeof(*j)))) {
		return NULL;
	}
	w->out++;
	return j;
}

static void job_put(struct work *w, struct job *j)
{
	w->out--;
	if (w->nfree < FREE_KEEP) {
		j->next = w->free;
		w->free = j;
		w->nfree++;
	} else {
		free(j);
	}
}

/* A job came home: wake its fiber, or release it if the fiber left. */
static void job_back(struct work *w, struct job *j)
{
	j->back = true;
	if (j->ran) {
		CORIO__STAT_ADD(w->st.wait_ns, j->start_ns - j->queued_ns);
		CORIO__STAT_ADD(w->st.run_ns, j->end_ns - j->start_ns);
	}
	if (j->waiter) {
		/* The fiber is still in corio_work: it takes the record. It may
		 * already be queued to run by a cancel or its deadline (then this
		 * wake-up does nothing); it checks j->back, not why it woke. */
		corio__ready(j->waiter, 1);
		return;
	}
	if (j->release)
		j->release(j->arg);
	job_put(w, j);
}

/* On the shard's loop, or in corio_wait() once the shard has ended. */
static void drain_done(struct corio__shard *s)
{
	struct work *w = part(s);
	struct job *j = atomic_exchange(&w->done, NULL), *rev = NULL;

	while (j) { /* the stack is newest first: restore completion order */
		struct job *n = j->next;

		j->next = rev;
		rev = j;
		j = n;
	}
	while (rev) {
		j = rev;
		rev = rev->next;
		job_back(w, j);
	}
}

/* ---- the call ------------------------------------------------------------------------ */

/* The caller leaves before fn returned. The job is QUEUED (take it out: fn
 * never runs; the caller releases) or RUNNING (it comes home later and is
 * released there). Returns true if the caller must release arg now. */
static bool job_abandon(struct corio__pool *p, struct work *w, struct job *j)
{
	bool unqueued = false;

	pthread_mutex_lock(&p->lock);
	if (j->state == JOB_QUEUED) {
		struct job **pp = &p->head, *prev = NULL;

		while (*pp && *pp != j) {
			prev = *pp;
			pp = &(*pp)->next;
		}
		if (*pp) { /* not taken by a stopping pool either */
			*pp = j->next;
			if (p->tail == j)
				p->tail = prev;
			p->queued--;
			pool_counts(p);
			unqueued = true;
		}
	}
	pthread_mutex_unlock(&p->lock);
	CORIO__STAT_ADD(w->st.abandoned, 1);
	if (unqueued) {
		job_put(w, j);
		return true;
	}
	j->waiter = NULL; /* job_back releases it when it comes home */
	return false;
}

/*
 * Queue a job; 0 or -errno (nothing queued).
 *
 * Every queued job has a thread that is free to take it, while the pool
 * may grow: an idle thread or one starting counts for one job only, so a
 * job queued behind others that already claimed the idle threads starts a
 * thread of its own. (Counting idle threads alone let every job queued
 * before the woken thread took the lock count the same one: four jobs ran
 * one after another on one thread.) A thread finishing a job is not
 * counted, though it takes the next job before it counts itself idle: the
 * pool may start a thread it turns out not to need, never one too few.
 */
static int job_queue(struct corio__pool *p, struct work *w, struct job *j)
{
	int ret = 0;

	pthread_mutex_lock(&p->lock);
	if (p->queued >= p->max_queue) {
		ret = -EAGAIN;
	} else if (p->queued + 1 > p->idle + p->starting && p->nthreads < p->max_threads &&
		   (ret = pool_grow(p)) && p->nthreads) {
		ret = 0; /* could not add a thread, but the ones we have will do */
	}
	if (!ret) {
		j->state = JOB_QUEUED;
		j->next = NULL;
		if (p->tail)
			p->tail->next = j;
		else
			p->head = j;
		p->tail = j;
		p->queued++;
		pool_counts(p);
		pthread_cond_signal(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	if (ret == -EAGAIN)
		CORIO__STAT_ADD(w->st.refused, 1);
	return ret;
}

static int refuse(int err, void (*release)(void *), void *arg, const char *why)
{
	if (release)
		release(arg);
	return why ? corio__error(err, "corio_work: %s", why) : err;
}

int corio__work_run(intptr_t (*fn)(void *), void *arg, void (*release)(void *),
		    intptr_t *result, bool wait_for_fn)
{
	struct corio__shard *s = corio__shard();
	struct corio_fiber *f;
	struct corio__pool *p;
	struct work *w;
	struct job *j;
	int ret;

	if (!fn)
		return refuse(-EINVAL, release, arg, "fn is NULL");
	if (!s || !s->current)
		return refuse(-EPERM, release, arg, "not called from a fiber");
	ret = corio__op_may_start();
	if (ret)
		return refuse(ret, release, arg, NULL);
	f = s->current;
	p = s->rt->pool;
	w = part(s);
	j = job_get(w);
	if (!j)
		return refuse(-ENOMEM, release, arg, "no memory for a job record");
	*j = (struct job){ .fn = fn, .arg = arg, .release = release, .home = s, .waiter = f,
			   .queued_ns = corio_now_ns() };
	ret = job_queue(p, w, j);
	if (ret) {
		job_put(w, j);
		return refuse(ret, release, arg,
			      ret == -EAGAIN ? "the queue is full (cfg.work_queue jobs wait)"
					     : "cannot start a pool thread");
	}
	CORIO__STAT_ADD(w->st.submitted, 1);
	if (wait_for_fn)
		corio__nocancel_push(f);
	/* Inside an uninterruptible section a passed deadline would end every
	 * bounded park at once: wait for fn with a plain park there. */
	while (!j->back) {
		ret = wait_for_fn ? corio__park() : corio__park_bounded();
		if (!j->back && (ret == -ETIMEDOUT || ret == -ECANCELED) && !wait_for_fn) {
			if (job_abandon(p, w, j) && release)
				release(arg);
			return ret;
		}
	}
	if (wait_for_fn)
		corio__nocancel_pop(f);
	if (result)
		*result = j->result;
	CORIO__STAT_ADD(w->st.done, 1);
	job_put(w, j);
	return 0;
}

int corio__work_or_here(intptr_t (*fn)(void *), void *arg, intptr_t *result)
{
	int ret = corio__work_run(fn, arg, NULL, result, true);

	if (ret == -EAGAIN || ret == -ENOMEM) {
		*result = fn(arg); /* the queue is full: as before the pool existed */
		return 0;
	}
	return ret;
}

int corio_work(intptr_t (*fn)(void *), void *arg, void (*release)(void *), intptr_t *result)
{
	return corio__work_run(fn, arg, release, result, false);
}

/* ---- the part ------------------------------------------------------------------------ */

static int work_init(struct corio__shard *s)
{
	struct work *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	atomic_init(&w->done, NULL);
	/* release: corio_work_stats_get() may read it from another thread */
	__atomic_store_n(&s->parts[CORIO__PART_WORK], w, __ATOMIC_RELEASE);
	return 0;
}

/* In a turn after a pool thread's hint: drain_done takes every job pushed
 * before its exchange (seq_cst), which follows the loop's exchange of the
 * hint; a later push hints again. */
static unsigned work_poll(struct corio__shard *s)
{
	struct work *w = part(s);

	if (!atomic_load(&w->done))
		return 0;
	drain_done(s);
	return 1;
}

static unsigned work_census(struct corio__shard *s, char *buf, size_t len)
{
	struct work *w = part(s);

	if (w->out)
		snprintf(buf, len, "%llu blocking-work jobs not given back",
			 (unsigned long long)w->out);
	return (unsigned)w->out;
}

static void work_release(struct corio__shard *s)
{
	struct work *w = part(s);

	while (w->free) {
		struct job *j = w->free;

		w->free = j->next;
		free(j);
	}
	free(w);
	s->parts[CORIO__PART_WORK] = NULL;
}

const struct corio__part corio__work_part = {
	.name = "work",
	.init = work_init,
	.poll = work_poll,
	.fed = true,
	.census = work_census,
	.release = work_release,
};

/* ---- stats ----------------------------------------------------------------------------- */

int corio_work_stats_get(struct corio_rt *rt, unsigned shard, struct corio_work_stats *out)
{
	struct work *w;

	if (!rt) {
		if (!corio__shard())
			return corio__error(-EPERM, "corio_work_stats_get: rt is NULL off a shard");
		rt = corio__shard()->rt;
	}
	if (!out || shard >= rt->nshards)
		return corio__error(-EINVAL, "corio_work_stats_get: %s",
				    out ? "no such shard" : "out is NULL");
	memset(out, 0, sizeof(*out));
	w = rt->shards[shard] ? __atomic_load_n(&rt->shards[shard]->parts[CORIO__PART_WORK],
						__ATOMIC_ACQUIRE)
			      : NULL;
	if (w) {
		out->submitted = __atomic_load_n(&w->st.submitted, __ATOMIC_RELAXED);
		out->done = __atomic_load_n(&w->st.done, __ATOMIC_RELAXED);
		out->abandoned = __atomic_load_n(&w->st.abandoned, __ATOMIC_RELAXED);
		out->refused = __atomic_load_n(&w->st.refused, __ATOMIC_RELAXED);
		out->wait_ns = __atomic_load_n(&w->st.wait_ns, __ATOMIC_RELAXED);
		out->run_ns = __atomic_load_n(&w->st.run_ns, __ATOMIC_RELAXED);
	}
	if (rt->pool) {
		out->queued = __atomic_load_n(&rt->pool->st_queued, __ATOMIC_RELAXED);
		out->running = __atomic_load_n(&rt->pool->st_running, __ATOMIC_RELAXED);
		out->threads = __atomic_load_n(&rt->pool->st_threads, __ATOMIC_RELAXED);
	}
	return 0;
}
