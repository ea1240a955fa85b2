/* SPDX-License-Identifier: MIT */
/* The blocking-work pool (corio/work.h): jobs run off the shard, the shard
 * keeps serving, deadlines and cancellation end the wait at once and the
 * job's release runs exactly once, the queue bound, shutdown waits for
 * running jobs, pool threads' signal mask and CPUs, stats. */
#include "helpers.h"

#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <sys/syscall.h>

/* A job that blocks its thread until the test lets it go. */
struct gate {
	sem_t started, go;
	_Atomic int ran, released, finished;
	_Atomic long tid;
	long value;
};

static void gate_init(struct gate *g)
{
	memset(g, 0, sizeof(*g));
	sem_init(&g->started, 0, 0);
	sem_init(&g->go, 0, 0);
}

static intptr_t gate_fn(void *arg)
{
	struct gate *g = arg;

	atomic_fetch_add(&g->ran, 1);
	atomic_store(&g->tid, (long)syscall(SYS_gettid));
	sem_post(&g->started);
	sem_wait(&g->go);
	atomic_fetch_add(&g->finished, 1);
	return g->value;
}

static void gate_release(void *arg)
{
	struct gate *g = arg;

	atomic_fetch_add(&g->released, 1);
}

static intptr_t twice(void *arg)
{
	return 2 * (intptr_t)arg;
}

/* ---- the job runs on another thread while the shard serves its fibers ---- */

struct serve {
	struct gate g;
	int other_ran;
};

static int other_fiber(void *arg)
{
	struct serve *sv = arg;

	/* Runs while the job blocks its pool thread: the shard is free. */
	sv->other_ran = 1;
	sem_post(&sv->g.go);
	return 0;
}

static void serve_entry(void *arg)
{
	struct serve *sv = arg;
	intptr_t r = 0;

	sv->g.value = 42;
	CHECK_EQ(corio_spawn(other_fiber, sv, NULL, NULL), 0);
	CHECK_EQ(corio_work(gate_fn, &sv->g, NULL, &r), 0);
	CHECK_EQ(r, 42);
	CHECK_EQ(sv->other_ran, 1);
	CHECK(atomic_load(&sv->g.tid) != (long)syscall(SYS_gettid));
	CHECK_EQ(corio_work(twice, (void *)21, NULL, &r), 0);
	CHECK_EQ(r, 42);
}

Test(work, job_runs_off_the_shard_while_the_shard_serves, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct serve sv;

	memset(&sv, 0, sizeof(sv));
	gate_init(&sv.g);
	th_run(&cfg, serve_entry, &sv);
	cr_assert_eq(atomic_load(&sv.g.released), 0, "release must not run after a 0 return");
}

/* ---- deadline and cancellation: the caller leaves at once -------------- */

struct leave {
	struct gate g;
	struct corio_event released_ev;
	int ret;
	struct corio_fiber *worker;
};

static void leave_release(void *arg)
{
	struct leave *l = arg;

	gate_release(&l->g);
	corio_event_set(&l->released_ev); /* on the shard's loop: may set events */
}

/* Runs once the caller has parked in corio_work: holds the shard (and so its
 * timers) until fn is running, so the deadline ends a RUNNING job's wait.
 * Under load a pool thread may take longer than the deadline to pick the
 * job up; the caller then takes the job back out of the queue and fn never
 * runs (a_cancelled_or_expired_caller_starts_nothing's case), so the entry
 * tries again. */
#define STILL_WAITING 1
static int hold_until_started(void *arg)
{
	struct leave *l = arg;

	if (l->ret == STILL_WAITING) /* else the caller left before we ran */
		sem_wait(&l->g.started);
	return 0;
}

static void deadline_entry(void *arg)
{
	struct leave *l = arg;
	struct corio_work_stats st;
	struct corio_deadline dl;
	int tries = 0;

	for (;;) {
		corio_event_init(&l->released_ev);
		atomic_store(&l->g.released, 0);
		CHECK_EQ(corio_spawn(hold_until_started, l, NULL, NULL), 0);
		l->ret = STILL_WAITING;
		CHECK_EQ(corio_timeout_push(&dl, 2 * 1000 * 1000), 0);
		l->ret = corio_work(gate_fn, l, leave_release, NULL);
		corio_deadline_pop(&dl);
		corio_yield(); /* hold_until_started ends, if it has not run */
		CHECK_EQ(l->ret, -ETIMEDOUT);
		if (atomic_load(&l->g.ran) || ++tries == 100)
			break;
		CHECK_EQ(atomic_load(&l->g.released), 1); /* fn never ran: released at once */
	}
	/* fn runs on: the shard is not waiting for it. Let it go. */
	CHECK_EQ(atomic_load(&l->g.ran), 1);
	CHECK_EQ(atomic_load(&l->g.released), 0);
	sem_post(&l->g.go);
	CHECK_EQ(corio_event_wait(&l->released_ev), 0);
	CHECK_EQ(atomic_load(&l->g.finished), 1);
	CHECK_EQ(atomic_load(&l->g.released), 1);
	CHECK_EQ(corio_work_stats_get(NULL, 0, &st), 0);
	CHECK(st.abandoned >= 1);
	CHECK_EQ(st.done, 0);
}

Test(work, deadline_ends_the_wait_and_release_runs_when_fn_returns, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct leave l;

	memset(&l, 0, sizeof(l));
	gate_init(&l.g);
	th_run(&cfg, deadline_entry, &l);
	cr_assert_eq(atomic_load(&l.g.released), 1);
}

static int cancel_worker(void *arg)
{
	struct leave *l = arg;

	l->ret = corio_work(gate_fn, l, leave_release, NULL);
	return 0;
}

static void cancel_entry(void *arg)
{
	struct leave *l = arg;

	corio_event_init(&l->released_ev);
	CHECK_EQ(corio_spawn(cancel_worker, l, NULL, &l->worker), 0);
	corio_yield(); /* the worker queues its job and parks */
	CHECK_EQ(corio_cancel(l->worker), 0);
	CHECK_EQ(corio_join(l->worker, NULL), 0);
	CHECK_EQ(l->ret, -ECANCELED);
	sem_post(&l->g.go); /* whether or not fn started, it may finish now */
	CHECK_EQ(corio_event_wait(&l->released_ev), 0);
	CHECK_EQ(atomic_load(&l->g.released), 1);
}

Test(work, cancel_ends_the_wait_and_release_runs_once, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct leave l;

	memset(&l, 0, sizeof(l));
	gate_init(&l.g);
	th_run(&cfg, cancel_entry, &l);
	cr_assert_eq(atomic_load(&l.g.released), 1);
	cr_assert_eq(atomic_load(&l.g.ran), atomic_load(&l.g.finished));
}

/* Cancelled before the call: fn never runs, release runs before it returns. */
static int precancelled(void *arg)
{
	struct leave *l = arg;

	corio_cancel(corio_self());
	l->ret = corio_work(gate_fn, l, leave_release, NULL);
	CHECK_EQ(atomic_load(&l->g.released), 1);
	return 0;
}

static void precancel_entry(void *arg)
{
	struct leave *l = arg;
	struct corio_fiber *f;
	struct corio_deadline dl;

	corio_event_init(&l->released_ev);
	CHECK_EQ(corio_spawn(precancelled, l, NULL, &f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(l->ret, -ECANCELED);
	CHECK_EQ(atomic_load(&l->g.ran), 0);
	/* and in a scope that has passed */
	CHECK_EQ(corio_timeout_push(&dl, 1), 0);
	CHECK_EQ(corio_sleep_ns(1000 * 1000), -ETIMEDOUT);
	CHECK_EQ(corio_work(gate_fn, l, leave_release, NULL), -ETIMEDOUT);
	corio_deadline_pop(&dl);
	CHECK_EQ(atomic_load(&l->g.ran), 0);
	CHECK_EQ(atomic_load(&l->g.released), 2);
	/* bad input: release runs too, fn never */
	CHECK_EQ(corio_work(NULL, l, leave_release, NULL), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_work") != NULL);
	CHECK_EQ(atomic_load(&l->g.released), 3);
}

Test(work, a_cancelled_or_expired_caller_starts_nothing, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct leave l;

	memset(&l, 0, sizeof(l));
	gate_init(&l.g);
	th_run(&cfg, precancel_entry, &l);
}

/* ---- one thread, a queue of one: the bound and abandoning a queued job ---- */

struct queue_test {
	struct gate a, b, c;
	int ret_b, ret_c;
	struct corio_wg wg;
};

static int queue_b(void *arg)
{
	struct queue_test *q = arg;
	struct corio_deadline dl;

	/* a holds the only thread: b waits in the queue until its deadline */
	CHECK_EQ(corio_timeout_push(&dl, 20 * 1000 * 1000), 0);
	q->ret_b = corio_work(gate_fn, &q->b, gate_release, NULL);
	corio_deadline_pop(&dl);
	/* it never ran, so its release ran before the call returned */
	CHECK_EQ(atomic_load(&q->b.released), 1);
	corio_wg_done(&q->wg);
	return 0;
}

static int queue_a(void *arg)
{
	struct queue_test *q = arg;
	intptr_t r = 0;

	CHECK_EQ(corio_work(gate_fn, &q->a, gate_release, &r), 0);
	corio_wg_done(&q->wg);
	return 0;
}

static void queue_entry(void *arg)
{
	struct queue_test *q = arg;
	struct corio_work_stats st;

	corio_wg_init(&q->wg);
	corio_wg_add(&q->wg, 2);
	CHECK_EQ(corio_spawn(queue_a, q, NULL, NULL), 0);
	corio_yield();
	sem_wait(&q->a.started); /* a holds the thread */
	CHECK_EQ(corio_spawn(queue_b, q, NULL, NULL), 0);
	corio_yield(); /* b is queued (the queue is now full) */
	q->ret_c = corio_work(gate_fn, &q->c, gate_release, NULL);
	CHECK_EQ(q->ret_c, -EAGAIN);
	CHECK_EQ(atomic_load(&q->c.released), 1);
	CHECK_EQ(atomic_load(&q->c.ran), 0);
	CHECK(strstr(corio_last_error(), "queue is full") != NULL);
	CHECK_EQ(corio_work_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.refused, 1);
	CHECK_EQ(st.queued, 1);
	CHECK_EQ(st.running, 1);
	CHECK_EQ(st.threads, 1);
	corio_sleep_ns(40 * 1000 * 1000); /* b's deadline passes */
	sem_post(&q->a.go);
	CHECK_EQ(corio_wg_wait(&q->wg), 0);
	CHECK_EQ(q->ret_b, -ETIMEDOUT);
	CHECK_EQ(atomic_load(&q->b.ran), 0);
	CHECK_EQ(atomic_load(&q->a.released), 0);
	CHECK_EQ(corio_work_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.done, 1);
	CHECK_EQ(st.abandoned, 1);
	CHECK_EQ(st.queued, 0);
}

Test(work, queue_bound_and_a_queued_job_that_is_abandoned_never_runs, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct queue_test q;

	cfg.work_threads = 1;
	cfg.work_queue = 1;
	memset(&q, 0, sizeof(q));
	gate_init(&q.a);
	gate_init(&q.b);
	gate_init(&q.c);
	th_run(&cfg, queue_entry, &q);
}

/* ---- shutdown: corio_wait() waits for the running job and releases it ---- */

struct stop_test {
	struct gate g;
	sem_t left;
	_Atomic long shard_tid;
};

/* Lets the job finish once its caller has left and the shard's thread has
 * ended, so only corio_wait() can collect the job. */
static void *let_go_after_leave(void *arg)
{
	struct stop_test *st = arg;
	char path[64];

	sem_wait(&st->left);
	snprintf(path, sizeof(path), "/proc/self/task/%ld", atomic_load(&st->shard_tid));
	while (access(path, F_OK) == 0)
		usleep(1000); /* polls a condition; no ordering is hoped for */
	sem_post(&st->g.go);
	return NULL;
}

static void stop_entry(void *arg)
{
	struct stop_test *st = arg;

	atomic_store(&st->shard_tid, (long)syscall(SYS_gettid));
	/* corio_stop() cancels this wait while the job runs on its thread */
	CHECK_EQ(corio_work(gate_fn, &st->g, gate_release, NULL), -ECANCELED);
	CHECK_EQ(atomic_load(&st->g.released), 0);
	sem_post(&st->left);
}

Test(work, corio_wait_waits_for_running_jobs_and_releases_them, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_rt *rt;
	struct stop_test st;
	pthread_t t;
	int ret;

	gate_init(&st.g);
	sem_init(&st.left, 0, 0);
	cr_assert_eq(corio_start(&cfg, stop_entry, &st, &rt), 0);
	sem_wait(&st.g.started); /* the job runs on its thread */
	corio_stop(rt);          /* the waiting fiber is cancelled and leaves */
	pthread_create(&t, NULL, let_go_after_leave, &st);
	ret = corio_wait(rt);
	cr_assert_eq(ret, 0, "corio_wait: %s", corio_last_error());
	/* corio_wait returned: the job must have finished and been released */
	cr_assert_eq(atomic_load(&st.g.finished), 1);
	cr_assert_eq(atomic_load(&st.g.released), 1);
	pthread_join(t, NULL);
	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
}

/* ---- pool threads: every signal blocked, the process's CPUs ------------ */

struct thread_facts {
	int sigint_blocked, sigterm_blocked, ncpus;
};

static intptr_t read_facts(void *arg)
{
	struct thread_facts *tf = arg;
	sigset_t cur;
	cpu_set_t mask;

	pthread_sigmask(SIG_SETMASK, NULL, &cur);
	tf->sigint_blocked = sigismember(&cur, SIGINT);
	tf->sigterm_blocked = sigismember(&cur, SIGTERM);
	if (!sched_getaffinity(0, sizeof(mask), &mask))
		tf->ncpus = CPU_COUNT(&mask);
	return 0;
}

static void facts_entry(void *arg)
{
	CHECK_EQ(corio_work(read_facts, arg, NULL, NULL), 0);
}

Test(work, pool_threads_block_signals_and_are_not_pinned_to_the_shard, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct thread_facts tf = { 0 };
	cpu_set_t mask;

	cr_assert_eq(sched_getaffinity(0, sizeof(mask), &mask), 0);
	th_run(&cfg, facts_entry, &tf);
	cr_assert_eq(tf.sigint_blocked, 1);
	cr_assert_eq(tf.sigterm_blocked, 1);
	cr_assert_eq(tf.ncpus, CPU_COUNT(&mask), "pool thread has %d CPUs, the process %d",
		     tf.ncpus, CPU_COUNT(&mask));
}

/* ---- a job never waits for a busy thread while the pool may grow -------- */

/* N jobs that each hold their thread until all N run at once: they can only
 * finish if the pool gives each its own thread. The pool thread waits on a
 * condition variable; the test's fibers end the wait (give_up) when their
 * deadline passes, so the failing case fails instead of hanging. */
#define LATCH_N 4
struct latch {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int arrived, give_up, released;
	int ret[LATCH_N];
	struct corio_wg wg;
	struct latch_arg {
		struct latch *l;
		int i;
	} who[LATCH_N];
};

static intptr_t latch_fn(void *arg)
{
	struct latch *l = arg;
	intptr_t all;

	pthread_mutex_lock(&l->lock);
	if (++l->arrived == LATCH_N)
		pthread_cond_broadcast(&l->cond);
	while (l->arrived < LATCH_N && !l->give_up)
		pthread_cond_wait(&l->cond, &l->lock);
	all = l->arrived >= LATCH_N;
	pthread_mutex_unlock(&l->lock);
	return all;
}

static void latch_release(void *arg)
{
	struct latch *l = arg;

	pthread_mutex_lock(&l->lock);
	l->released++;
	pthread_mutex_unlock(&l->lock);
}

static int latch_worker(void *arg)
{
	struct latch_arg *a = arg;
	struct latch *l = a->l;
	struct corio_deadline dl;
	intptr_t all = 0;
	int i = a->i;

	/* 5 s: the fixed pool starts the threads in microseconds; the margin is
	 * for a loaded machine, never an ordering the test hopes for */
	CHECK_EQ(corio_timeout_push(&dl, 5ull * 1000 * 1000 * 1000), 0);
	l->ret[i] = corio_work(latch_fn, l, latch_release, &all);
	corio_deadline_pop(&dl);
	if (l->ret[i] == 0)
		CHECK_EQ(all, 1);
	else { /* a job waited for a busy thread: let the running ones go */
		pthread_mutex_lock(&l->lock);
		l->give_up = 1;
		pthread_cond_broadcast(&l->cond);
		pthread_mutex_unlock(&l->lock);
	}
	corio_wg_done(&l->wg);
	return 0;
}

static int nothing(void *arg)
{
	(void)arg;
	return 0;
}

/* The pool's one thread moves to the shard's CPU as a SCHED_BATCH thread,
 * which a wake-up never lets preempt a running one: it runs there only once
 * the shard parks (see latch_entry). */
struct pin {
	int cpu;
	_Atomic long tid;
};

static intptr_t pin_to_shard_cpu(void *arg)
{
	struct pin *pn = arg;
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(pn->cpu, &one);
	atomic_store(&pn->tid, (long)syscall(SYS_gettid));
	if (sched_setscheduler(0, SCHED_BATCH, &(struct sched_param){ 0 }))
		return -errno;
	return sched_setaffinity(0, sizeof(one), &one) ? -errno : 0;
}

static void latch_entry(void *arg)
{
	struct latch *l = arg;
	struct corio_fiber *f[LATCH_N];
	struct corio_work_stats st;
	struct pin pn = { .cpu = corio_shard_cpu() };
	cpu_set_t all; /* the process's CPUs, which the pool's threads run on */
	intptr_t r = -1;

	CHECK_EQ(sched_getaffinity(getpid(), sizeof(all), &all), 0);
	/* Stacks for the workers, so their calls follow each other closely
	 * (a fiber's first run maps its stack). */
	for (int i = 0; i < LATCH_N; i++)
		CHECK_EQ(corio_spawn(nothing, NULL, NULL, &f[i]), 0);
	for (int i = 0; i < LATCH_N; i++)
		CHECK_EQ(corio_join(f[i], NULL), 0);
	/* The case: one thread, idle. Every job queued before it woke
	 * counted that same idle thread, so no thread was added and the jobs
	 * ran one after another. The thread shares the shard's CPU while the
	 * jobs are queued, so it wakes only once they all are: without that
	 * the race is lost or won by microseconds, and the old pool passed
	 * three runs in four. */
	CHECK_EQ(corio_work(pin_to_shard_cpu, &pn, NULL, &r), 0);
	CHECK_EQ(r, 0);
	for (;;) { /* idle: it counts running down under the lock it waits with */
		CHECK_EQ(corio_work_stats_get(NULL, 0, &st), 0);
		if (!st.running)
			break;
		corio_sleep_ns(1000 * 1000); /* polls a condition; the CPU goes to the thread */
	}
	CHECK_EQ(st.threads, 1);
	corio_wg_init(&l->wg);
	corio_wg_add(&l->wg, LATCH_N);
	for (int i = 0; i < LATCH_N; i++) {
		l->who[i] = (struct latch_arg){ l, i };
		CHECK_EQ(corio_spawn(latch_worker, &l->who[i], NULL, NULL), 0);
	}
	corio_yield(); /* the workers queue their jobs back to back, in one turn */
	/* queued: the thread is an ordinary one again */
	CHECK_EQ(sched_setscheduler((pid_t)atomic_load(&pn.tid), SCHED_OTHER,
				    &(struct sched_param){ 0 }), 0);
	CHECK_EQ(sched_setaffinity((pid_t)atomic_load(&pn.tid), sizeof(all), &all), 0);
	CHECK_EQ(corio_wg_wait(&l->wg), 0);
	for (int i = 0; i < LATCH_N; i++)
		CHECK_EQ(l->ret[i], 0);
	pthread_mutex_lock(&l->lock);
	CHECK_EQ(l->arrived, LATCH_N);
	pthread_mutex_unlock(&l->lock);
	CHECK_EQ(corio_work_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.threads, LATCH_N);
}

Test(work, queued_jobs_start_on_new_threads_while_the_pool_may_grow, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	static struct latch l;

	cfg.work_threads = LATCH_N;
	memset(&l, 0, sizeof(l));
	pthread_mutex_init(&l.lock, NULL);
	pthread_cond_init(&l.cond, NULL);
	th_run(&cfg, latch_entry, &l);
	cr_assert_eq(l.released, 0, "every job ran to its end: no release");
}

/* ---- many jobs from every shard ---------------------------------------- */

static int many_one(void *arg)
{
	intptr_t r = -1, i = (intptr_t)arg;

	CHECK_EQ(corio_work(twice, (void *)i, NULL, &r), 0);
	CHECK_EQ(r, 2 * i);
	return 0;
}

static void many_entry(void *arg)
{
	struct corio_fiber *f[64];
	struct corio_work_stats st;
	char *out;
	size_t len;

	(void)arg;
	for (intptr_t i = 0; i < 64; i++)
		CHECK_EQ(corio_spawn(many_one, (void *)(i + 1000 * corio_shard_id()), NULL, &f[i]), 0);
	for (int i = 0; i < 64; i++)
		CHECK_EQ(corio_join(f[i], NULL), 0);
	CHECK_EQ(corio_work_stats_get(NULL, corio_shard_id(), &st), 0);
	CHECK_EQ(st.submitted, 64);
	CHECK_EQ(st.done, 64);
	CHECK(st.threads >= 1 && st.threads <= 3);
	if (corio_shard_id() == 0 && corio_stats_render(NULL, CORIO_STATS_PROM, &out, &len) == 0) {
		CHECK(strstr(out, "corio_work_done") != NULL);
		free(out);
	}
}

Test(work, many_jobs_from_every_shard_all_return, .timeout = 60)
{
	struct corio_config cfg = th_cfg(2);

	cfg.work_threads = 3;
	th_run(&cfg, many_entry, NULL);
}

/* ---- misuse and config ----------------------------------------------------- */

static int work_off_shard(void)
{
	return corio_work(twice, NULL, NULL, NULL);
}

Test(work, off_a_fiber_is_eperm)
{
	cr_assert_eq(work_off_shard(), -EPERM);
	cr_assert(strstr(corio_last_error(), "corio_work") != NULL);
}

Test(work, config_bounds)
{
	struct corio_config cfg;
	struct corio_work_stats st;

	corio_config_init(&cfg);
	cfg.work_threads = 1025;
	cr_assert_eq(corio_config_check(&cfg), -EINVAL);
	cr_assert(strstr(corio_last_error(), "work_threads") != NULL);
	corio_config_init(&cfg);
	cfg.work_queue = (1u << 24) + 1;
	cr_assert_eq(corio_config_check(&cfg), -EINVAL);
	cr_assert(strstr(corio_last_error(), "work_queue") != NULL);
	cr_assert_eq(corio_work_stats_get(NULL, 0, &st), -EPERM);
}
