/* SPDX-License-Identifier: MIT */
/*
 * core/rt.c - a runtime's life: shard threads (CPU pinning, NUMA-local
 * memory, SIGPIPE blocked), start-up with a handshake so that corio_start()
 * returns only once every shard runs (or none does), shutdown, and
 * corio_wait(). The parts table comes from above (ctl/ hands it to
 * corio__rt_start), so core names no other area.
 *
 * Shutdown: corio_shutdown() raises rt->stopping and wakes every shard
 * through its eventfd. Each shard then cancels all its fibers, keeps
 * turning until no fiber is alive and no op awaits its final CQE, and
 * closes its ring (core/loop.c). corio_wait() joins the threads and frees
 * the rest.
 */
#include "core/internal.h"
#include "core/sanitizer.h"

#include <corio/msg.h>

#include <errno.h>
#include <numa.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

__thread struct corio__shard *corio__tl_shard;
static __thread char tl_err[256];

int corio__error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(tl_err, sizeof(tl_err), fmt, ap);
	va_end(ap);
	return err;
}

int corio__misuse(int err, const char *who, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(tl_err, sizeof(tl_err), "%s: ", who);

	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(tl_err))
		vsnprintf(tl_err + n, sizeof(tl_err) - (size_t)n, fmt, ap);
	va_end(ap);
#ifndef NDEBUG
	fprintf(stderr, "corio: %s (API misuse; debug builds abort)\n", tl_err);
	abort();
#endif
	return err;
}

const char *corio_last_error(void)
{
	return tl_err[0] ? tl_err : "no error";
}

unsigned corio_shard_id(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s ? s->id : UINT32_MAX;
}

unsigned corio_shard_count(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s ? s->rt->nshards : 0;
}

int corio_shard_cpu(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s ? s->cpu : -1;
}

void corio__rt_stop(struct corio_rt *rt)
{
	if (atomic_exchange(&rt->stopping, 1))
		return;
	for (unsigned i = 0; i < rt->nshards; i++)
		if (rt->shards[i] && rt->shards[i] != corio__tl_shard)
			corio__shard_wake(rt->shards[i]);
}

void corio_shutdown(void)
{
	struct corio__shard *s = corio__tl_shard;

	if (!s) {
		corio__misuse(0, "corio_shutdown", "%s (use corio_stop)", corio__not_fiber_why());
		return;
	}
	corio__rt_stop(s->rt);
}

int corio_stop(struct corio_rt *rt)
{
	if (!rt)
		return corio__error(-EINVAL, "corio_stop: rt is NULL");
	corio__rt_stop(rt);
	return 0;
}

/* ---- shard thread ------------------------------------------------------------------ */

static int entry_fiber(void *arg)
{
	struct corio_rt *rt = arg;

	rt->entry(rt->entry_arg);
	return 0;
}

struct corio_rt *corio_runtime(void)
{
	struct corio__shard *s = corio__shard();

	return s ? s->rt : NULL;
}

/* cfg.setup: run it, tell corio_start() (which counts the shards down),
 * and start entry once corio_start() says every setup is done (start_go,
 * posted to every shard). A failed start cancels this wait instead. */
static int setup_fiber(void *arg)
{
	struct corio_rt *rt = arg;
	struct corio__shard *s = corio__shard();
	struct corio_spawn_opts o = { .name = "entry" };
	int ret = rt->cfg.setup(rt->entry_arg);

	pthread_mutex_lock(&rt->lock);
	if (ret < 0 && !rt->setup_err) {
		rt->setup_err = ret;
		snprintf(rt->err, sizeof(rt->err), "corio_start: setup on shard %u returned %d (%s)",
			 s->id, ret, strerror(-ret));
	}
	rt->setup_left--;
	pthread_cond_broadcast(&rt->cond);
	pthread_mutex_unlock(&rt->lock);
	if (corio_event_wait(&s->start_ev))
		return 0; /* the start failed: the runtime stops */
	if (corio_spawn(entry_fiber, rt, &o, NULL))
		corio__rt_stop(rt); /* no entry on this shard: the start cannot hold */
	return 0;
}

int corio__rt_memo(const char *key, int (*make)(void *ctx, void *val), void *ctx, void *val,
		   size_t size)
{
	struct corio__shard *s = corio__shard();
	struct corio_rt *rt;
	struct corio__memo *m;
	int ret = 0;

	if (!s)
		return -EPERM;
	rt = s->rt;
	if (size > sizeof(m->val) || strlen(key) >= sizeof(m->key))
		return -ENAMETOOLONG;
	pthread_mutex_lock(&rt->lock);
	for (m = rt->memo; m < rt->memo + rt->nmemo; m++)
		if (!strcmp(m->key, key))
			break;
	if (m < rt->memo + rt->nmemo) {
		memcpy(val, m->val, size);
	} else if (rt->nmemo == CORIO__RT_MEMO_MAX) {
		ret = -ENOSPC;
	} else {
		ret = make(ctx, val);
		if (!ret) {
			snprintf(m->key, sizeof(m->key), "%s", key);
			memcpy(m->val, val, size);
			m->size = size;
			rt->nmemo++;
			ret = 1;
		}
	}
	pthread_mutex_unlock(&rt->lock);
	return ret;
}

/* Posted to every shard once the setups are done: let entry run. */
static void start_go(void *arg)
{
	(void)arg;
	corio_event_set(&corio__shard()->start_ev);
}

/* corio_start()'s thread: wait for every shard's setup, then release the
 * entries; 0, or the first setup's error (the runtime is stopped then). */
static int setups_wait(struct corio_rt *rt)
{
	int ret;

	pthread_mutex_lock(&rt->lock);
	while (rt->setup_left)
		pthread_cond_wait(&rt->cond, &rt->lock);
	ret = rt->setup_err;
	pthread_mutex_unlock(&rt->lock);
	for (unsigned i = 0; !ret && i < rt->nshards; i++) {
		ret = corio_post_foreign(rt, i, start_go, NULL);
		if (ret)
			snprintf(rt->err, sizeof(rt->err),
				 "corio_start: cannot start entry on shard %u: %s", i, strerror(-ret));
	}
	return ret;
}

static int shard_setup(struct corio__shard *s)
{
	struct corio_rt *rt = s->rt;
	struct corio__ring_params rp = {
		.sq_entries = rt->cfg.sq_entries,
		.cq_entries = rt->cfg.cq_entries,
		.sqpoll = (rt->cfg.flags & CORIO_F_SQPOLL) && rt->cfg.backend != CORIO_BACKEND_EPOLL,
		.sqpoll_cpu = -1,
		.emu = rt->cfg.backend == CORIO_BACKEND_EPOLL,
	};
	char why[200];
	int ret;

	if (!(rt->cfg.flags & CORIO_F_NO_PIN)) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(s->cpu, &set);
		ret = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
		if (ret) {
			snprintf(s->err, sizeof(s->err), "shard %u: cannot pin to CPU %d: %s", s->id,
				 s->cpu, strerror(ret));
			return -ret;
		}
	}
	if (numa_available() >= 0)
		numa_set_localalloc(); /* stacks and pools land on this CPU's node */

	ret = corio__ring_init(&s->ring, &rp, why, sizeof(why));
	if (ret) {
		snprintf(s->err, sizeof(s->err), "shard %u: %s", s->id, why);
		return ret;
	}
	CORIO__STAT_SET(s->stats.ring_flags, s->ring.setup_flags);
	CORIO__STAT_SET(s->stats.ring_features, s->ring.features);
	CORIO__STAT_SET(s->stats.cpu, (uint64_t)s->cpu);
	CORIO__STAT_SET(s->stats.backend, s->ring.emu ? 1 : 0);

	s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->efd < 0) {
		ret = -errno;
		snprintf(s->err, sizeof(s->err), "shard %u: eventfd: %s", s->id, strerror(errno));
		return ret;
	}
	s->efd_nowait_test = s->ring.disabled & CORIO__RING_NO_EFD_WAIT;
	ret = corio__signal_setup(s);
	if (ret)
		return ret;
	ret = corio__stack_init(s, &rt->cfg);
	if (ret)
		return ret;
	corio__altstack_init(s); /* without it an overflow report is lost, nothing else */
	ret = corio__loopstat_init(s);
	if (ret)
		return ret;
	corio__sched_init(s);
	for (unsigned i = 0; i < CORIO__PART_MAX; i++) {
		const struct corio__part *p = rt->parts[i];

		s->err[0] = '\0';
		if (p && p->init && (ret = p->init(s)) < 0) {
			/* a part may say why itself, in s->err */
			if (!s->err[0])
				snprintf(s->err, sizeof(s->err), "shard %u: %s: %s", s->id,
					 p->name, strerror(-ret));
			return ret;
		}
	}
	return 0;
}

static void shard_teardown(struct corio__shard *s)
{
	const struct corio__part *const *parts = s->rt->parts;

	for (unsigned i = CORIO__PART_MAX; i-- > 0;)
		if (parts[i] && parts[i]->fini && s->parts[i])
			parts[i]->fini(s);
	if (s->ring.ring.ring_fd > 0)
		corio__ring_exit(&s->ring);
	corio__signal_fini(s); /* after the ring: its poll is gone */
	corio__stack_cache_free(s);
	corio__fiber_pool_free(s);
	corio__altstack_fini(s);
}

/*
 * A write to a pipe, FIFO or socket whose reader has gone raises SIGPIPE in
 * the writing thread, whose default action ends the whole process. On a
 * shard that thread is corio's: a corio_write_at() issued inline by the ring,
 * or the blocking fallback. Shard threads block SIGPIPE, so such a write
 * returns -EPIPE and the process lives; the signal stays pending on the
 * shard thread, blocked, and is never delivered. The application's own
 * threads and its SIGPIPE disposition are untouched (docs/RUNTIME.md, "Signals").
 */
static void block_sigpipe(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *shard_main(void *arg)
{
	struct corio__shard *s = arg;
	struct corio_rt *rt = s->rt;
	int ret;

	corio__tl_shard = s;
	s->tid = (pid_t)syscall(SYS_gettid);
	block_sigpipe();
	corio__signal_block(rt);
#if CORIO__TSAN
	s->tsan_sched = __tsan_get_current_fiber();
#endif
	ret = shard_setup(s);

	pthread_mutex_lock(&rt->lock);
	if (ret) {
		rt->failed++;
		if (!rt->first_err) {
			rt->first_err = ret;
			snprintf(rt->err, sizeof(rt->err), "%s", s->err);
		}
	} else {
		rt->ready++;
	}
	pthread_cond_broadcast(&rt->cond);
	while (!rt->go)
		pthread_cond_wait(&rt->cond, &rt->lock);
	pthread_mutex_unlock(&rt->lock);

	if (!ret && !rt->failed) {
		struct corio_spawn_opts o = { .name = rt->cfg.setup ? "setup" : "entry" };

		corio__wakeup_arm(s);
		corio__signal_start(s);
		corio_event_init(&s->start_ev);
		corio_event_init(&s->drain_ev);
		ret = corio_spawn(rt->cfg.setup ? setup_fiber : entry_fiber, rt, &o, NULL);
		if (ret == 0)
			corio__loop(s);
	}
	shard_teardown(s);
	corio__stats_cpu_final(s);
	corio__tl_shard = NULL;
	return (void *)(intptr_t)ret;
}

/* ---- the backend ----------------------------------------------------------------------- */

/* The one place the runtime tells the operator about its backend: the log
 * hook (corio_set_log), stderr by default. */
__attribute__((format(printf, 1, 2))) static void backend_say(const char *fmt, ...)
{
	char line[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	corio__log("corio: %s", line);
}

/* CORIO_BACKEND=auto|uring|epoll overrides cfg.backend (the one strict
 * parser, uring/env.c). */
static int env_backend(enum corio_backend *b)
{
	static const char *const words[] = { "auto", "uring", "epoll", NULL };
	static const enum corio_backend kinds[] = { CORIO_BACKEND_AUTO, CORIO_BACKEND_URING,
						    CORIO_BACKEND_EPOLL };
	char why[200];
	unsigned i;
	int ret = corio__env_choice("CORIO_BACKEND", words, &i, why, sizeof(why));

	if (ret < 0)
		return corio__error(-EINVAL, "corio_start: %s", why);
	if (ret > 0)
		*b = kinds[i];
	return 0;
}

/*
 * One backend for every shard (a MSG_RING doorbell needs a ring at both
 * ends). AUTO sets up a one-entry ring on this thread before any shard
 * starts: a refusal (ENOSYS: no io_uring or a seccomp filter; EPERM:
 * seccomp, kernel.io_uring_disabled, a security module; EACCES) selects the
 * emulator. Any other failure (ENOMEM from memlock limits, ...) is not a
 * refusal: the shards meet it again and report it as before.
 */
static int pick_backend(struct corio_config *cfg)
{
	enum corio_backend b = cfg->backend;
	int ret = env_backend(&b);

	if (ret)
		return ret;
	if (b == CORIO_BACKEND_AUTO) {
		ret = corio__ring_try_setup();
		b = CORIO_BACKEND_URING;
		if (ret == -ENOSYS || ret == -EPERM || ret == -EACCES) {
			b = CORIO_BACKEND_EPOLL;
			backend_say("io_uring is refused here (io_uring_setup: %s); running on the "
				    "epoll fallback%s", strerror(-ret),
				    ret == -EPERM ? " (a seccomp filter or kernel.io_uring_disabled)"
						  : "");
		}
	}
	if (b == CORIO_BACKEND_EPOLL && (cfg->flags & CORIO_F_SQPOLL))
		backend_say("CORIO_F_SQPOLL has no meaning on the epoll fallback: no SQ "
			    "polling thread runs");
	cfg->backend = b;
	return 0;
}

/* ---- start / wait -------------------------------------------------------------------- */

static void shard_free(struct corio__shard *s)
{
	if (!s)
		return;
	if (s->efd > 0)
		close(s->efd);
	if (numa_available() >= 0)
		numa_free(s, sizeof(*s));
	else
		free(s);
}

static struct corio__shard *shard_alloc(int cpu)
{
	struct corio__shard *s;
	int node = -1;

	if (numa_available() >= 0) {
		node = numa_node_of_cpu(cpu);
		s = node >= 0 ? numa_alloc_onnode(sizeof(*s), node) : numa_alloc_local(sizeof(*s));
	} else {
		s = aligned_alloc(64, (sizeof(*s) + 63) & ~(size_t)63);
	}
	if (!s)
		return NULL;
	memset(s, 0, sizeof(*s));
	s->numa_node = node;
	s->busy = true; /* counted in rt->busy_shards from the start */
	s->efd = -1;
	s->sigfd = -1;
	s->ring.ring.ring_fd = -1;
	return s;
}

/* The runtime's per-shard arrays: 0 or -ENOMEM (rt_free frees what there is). */
static int rt_arrays_new(struct corio_rt *rt, unsigned n)
{
	rt->cpus = calloc(n, sizeof(int));
	rt->shards = calloc(n, sizeof(*rt->shards));
	rt->idle_shown = calloc(n, sizeof(*rt->idle_shown));
	return rt->cpus && rt->shards && rt->idle_shown ? 0 : -ENOMEM;
}

static void rt_arrays_free(struct corio_rt *rt)
{
	free(rt->shards);
	free(rt->cpus);
	free(rt->idle_shown);
}

static void rt_free(struct corio_rt *rt)
{
	/* Every shard thread has ended: nothing can read a part any more. */
	for (unsigned i = 0; i < rt->nshards; i++)
		for (unsigned k = 0; rt->shards[i] && k < CORIO__PART_MAX; k++)
			if (rt->parts[k] && rt->parts[k]->release && rt->shards[i]->parts[k])
				rt->parts[k]->release(rt->shards[i]);
	for (unsigned i = 0; i < rt->nshards; i++)
		shard_free(rt->shards[i]);
	rt_arrays_free(rt);
	corio__pool_free(rt);
	pthread_mutex_destroy(&rt->lock);
	pthread_cond_destroy(&rt->cond);
	free(rt);
}

/* cfg.setup: corio_start() returns once every setup has returned; a failed
 * one stops the runtime, and corio_start() returns its error. */
static int start_after_setups(struct corio_rt *rt, struct corio_rt **out)
{
	char why[sizeof(rt->err)];
	int ret = setups_wait(rt);

	if (!ret)
		return 0;
	snprintf(why, sizeof(why), "%s", rt->err);
	corio__rt_stop(rt);
	corio_wait(rt); /* frees rt; its own census result gives way to ret */
	*out = NULL;
	return corio__error(ret, "%s", why);
}

/* corio_start's checks before anything is allocated: the arguments, the
 * config (defaults when NULL, into *defcfg), the clock, the CPU mask. */
static int start_check(const struct corio_config **cfg, struct corio_config *defcfg,
		       void (*entry)(void *), struct corio_rt **out, cpu_set_t *mask)
{
	int ret;

	if (out)
		*out = NULL;
	if (!out || !entry)
		return corio__error(-EINVAL, "corio_start: entry and out are required");
	if (corio__tl_shard)
		return corio__error(-EPERM, "corio_start: called from a shard; nested runtimes are not supported");
	if (!*cfg) {
		corio_config_init(defcfg);
		*cfg = defcfg;
	}
	ret = corio_config_check(*cfg);
	if (!ret)
		ret = corio__tick_calibrate(); /* a bad CORIO_CLOCK fails here */
	if (ret)
		return ret;
	if (sched_getaffinity(0, sizeof(*mask), mask))
		return corio__error(-errno, "corio_start: sched_getaffinity: %s", strerror(errno));
	return 0;
}

/* The runtime of n shards, before any thread: its config and backend, the
 * parts' hooks, the arrays, the work pool, each shard's CPU. */
static int rt_new(const struct corio_config *cfg, const struct corio__part *const *parts,
		  void (*entry)(void *), void *arg, unsigned n, cpu_set_t *mask,
		  struct corio_rt **rtp)
{
	struct corio_rt *rt = calloc(1, sizeof(*rt));
	int list[CPU_SETSIZE];
	unsigned k = 0;
	int ret;

	if (!rt)
		return -ENOMEM;
	rt->cfg = *cfg;
	rt->cfg.cpus = NULL;
	ret = pick_backend(&rt->cfg);
	if (ret) {
		free(rt);
		return ret;
	}
	rt->parts = parts;
	for (unsigned i = 0; i < CORIO__PART_MAX; i++)
		if (parts[i]) {
			if (parts[i]->poll && !parts[i]->on_demand && !parts[i]->fed)
				rt->polls[rt->npolls++] = parts[i]->poll;
			if (parts[i]->sleep)
				rt->sleeps[rt->nsleeps++] = parts[i]->sleep;
		}
	rt->nshards = n;
	rt->entry = entry;
	rt->entry_arg = arg;
	atomic_init(&rt->busy_shards, n);
	pthread_mutex_init(&rt->lock, NULL);
	/* class 0, the default class: every shard sets it up at start */
	strcpy(rt->cls_reg[0].name, "default");
	rt->cls_reg[0].shares = 100;
	atomic_init(&rt->ncls, 1);
	pthread_cond_init(&rt->cond, NULL);
	if (rt_arrays_new(rt, n) || corio__pool_new(rt, mask)) {
		rt_free(rt);
		return -ENOMEM;
	}
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, mask))
			list[k++] = c;
	/* cfg->cpus, or the mask's CPUs in order, wrapping when shards > CPUs */
	for (unsigned i = 0; i < n; i++)
		rt->cpus[i] = cfg->cpus ? cfg->cpus[i] : list[i % k];
	*rtp = rt;
	return 0;
}

/* One thread per shard; *started counts those created (the rest were not:
 * the first failure stops the loop, and is the result). */
static int shards_spawn(struct corio_rt *rt, unsigned *started)
{
	/* cfg.signals: blocked in the calling thread too, and so in every
	 * thread created from here (the shards, the pool), with no window
	 * before a shard blocks them itself; left blocked after corio_wait
	 * (unblocking them could run a pending signal's default action) */
	corio__signal_block(rt);
	for (unsigned i = 0; i < rt->nshards; i++) {
		struct corio__shard *s = shard_alloc(rt->cpus[i]);
		int ret;

		if (!s)
			return corio__error(-ENOMEM, "corio_start: cannot allocate shard %u", i);
		s->rt = rt;
		s->id = i;
		s->cpu = rt->cpus[i];
		rt->shards[i] = s;
		ret = pthread_create(&s->thread, NULL, shard_main, s);
		if (ret)
			return corio__error(-ret, "corio_start: pthread_create for shard %u: %s", i,
					    strerror(ret));
		(*started)++;
	}
	return 0;
}

/* Wait until every started shard has set up or failed, then let them go:
 * to run (the runtime published in *out first, under the lock, before any
 * fiber runs) or, on ret or a shard's failure, to leave. The result. */
static int shards_release(struct corio_rt *rt, unsigned started, int ret, struct corio_rt **out)
{
	pthread_mutex_lock(&rt->lock);
	while (rt->ready + rt->failed < started)
		pthread_cond_wait(&rt->cond, &rt->lock);
	if (!ret && rt->failed) {
		ret = rt->first_err;
		corio__error(ret, "%s", rt->err);
	}
	if (ret)
		rt->failed++; /* tell the shards not to run */
	else
		*out = rt; /* published before any fiber runs (under the lock) */
	rt->setup_left = rt->cfg.setup ? rt->nshards : 0;
	rt->go = true;
	pthread_cond_broadcast(&rt->cond);
	pthread_mutex_unlock(&rt->lock);
	return ret;
}

int corio__rt_start(const struct corio_config *ucfg, const struct corio__part *const *parts,
		    void (*entry)(void *), void *arg, struct corio_rt **out)
{
	struct corio_config defcfg;
	const struct corio_config *cfg = ucfg;
	struct corio_rt *rt;
	cpu_set_t mask;
	unsigned started = 0;
	int ret;

	ret = start_check(&cfg, &defcfg, entry, out, &mask);
	if (ret)
		return ret;
	ret = rt_new(cfg, parts, entry, arg, cfg->shards ? cfg->shards : (unsigned)CPU_COUNT(&mask),
		     &mask, &rt);
	if (ret)
		return ret;
	corio__overflow_handler_install();
	ret = shards_spawn(rt, &started);
	ret = shards_release(rt, started, ret, out);
	if (ret) {
		for (unsigned i = 0; i < started; i++)
			pthread_join(rt->shards[i]->thread, NULL);
		rt_free(rt);
		return ret;
	}
	return rt->cfg.setup ? start_after_setups(rt, out) : 0;
}

int corio_wait(struct corio_rt *rt)
{
	int first = 0;

	if (!rt)
		return corio__error(-EINVAL, "corio_wait: rt is NULL");
	if (corio__tl_shard)
		return -EPERM; /* a shard cannot wait for its own runtime */
	for (unsigned i = 0; i < rt->nshards; i++) {
		void *res = NULL;

		pthread_join(rt->shards[i]->thread, &res);
		if (!first && res)
			first = (int)(intptr_t)res;
	}
	corio__pool_stop(rt); /* running jobs end, abandoned ones are released */
	if (!first)
		first = corio__census(rt); /* nothing leaked: core/census.c */
	rt_free(rt);
	return first;
}

