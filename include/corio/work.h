/* SPDX-License-Identifier: MIT */
/*
 * corio/work.h - the blocking-work pool: run code that blocks or burns CPU
 * (getaddrinfo, a password hash, a blocking database client, a file call the
 * ring cannot make) on a thread of its own, while the calling fiber parks and
 * its shard goes on serving everything else. Include <corio.h>.
 *
 * The pool belongs to the runtime: cfg.work_threads threads (4), started
 * as jobs need them, and a queue of at most cfg.work_queue jobs waiting for
 * a thread (1024). While the pool has fewer than cfg.work_threads threads a
 * job never waits for a busy one: each queued job takes an idle thread that
 * no earlier job has claimed, or a new one, so n <= cfg.work_threads jobs
 * queued at once all run at once. Past that, jobs wait and run in the order
 * they were queued, from every shard. Pool threads run with every signal
 * blocked and on any CPU of the affinity mask the process had at
 * corio_start(), not on a shard's CPU.
 *
 * Threads: a job's function runs on a pool thread, not on a shard: it must
 * not call corio functions (except corio_post_foreign() and corio_now_ns())
 * and must not touch shard-local state; it may block as long as it likes.
 * The pool's threads never touch shard state either: a finished job goes
 * back to its shard through a lock-free stack, as a cross-shard call's reply
 * does (core/work.c), and the shard wakes its fiber.
 *
 * Shutdown: corio_wait() waits for every job that is running (a job that
 * never returns keeps corio_wait() from returning), runs the release of
 * every abandoned job, and counts jobs not given back in its leak census.
 */
#ifndef CORIO_WORK_H
#define CORIO_WORK_H

#include <corio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Run fn(arg) on a pool thread and park the calling fiber until it returns;
 * its return value goes to *result (result may be NULL). Blocking.
 *
 * Returns 0 when fn ran to its end: arg is the caller's again, release is
 * not called. Otherwise:
 *  -ECANCELED   the fiber was cancelled (before the call or while it waited);
 *  -ETIMEDOUT   the fiber's deadline scope passed (before or while waiting);
 *  -EAGAIN      cfg.work_queue jobs were already waiting for a thread
 *               (counted in corio_work_stats.refused);
 *  -ENOMEM      no memory for the job record, or the first pool thread could
 *               not be created;
 *  -EINVAL      fn is NULL;  -EPERM  not called from a fiber.
 * Every error return gives arg to the pool, and release (when not NULL)
 * gets it exactly once, when nothing in the pool uses it any more:
 *  - before the call returns, when fn never started (every error above but
 *    a cancellation or deadline that came while fn was running);
 *  - when fn returns, when the call gave up on a running fn: the waiting
 *    fiber leaves at once (it does not wait for fn), fn runs to its end on
 *    its thread, its result is dropped, and release(arg) runs on the
 *    caller's shard's loop (not in a fiber: it must not block) or, if that
 *    shard has stopped by then, on the pool thread inside corio_wait().
 * So: on 0 the caller frees arg itself; on an error it must not touch arg
 * again (release frees it). With release NULL and a deadline scope or a
 * cancellation possible, arg must not live on the caller's stack (or wrap
 * the call in corio_deadline_shield() to wait for fn). Counted per shard in
 * corio_work_stats.
 */
CORIO_API int corio_work(intptr_t (*fn)(void *arg), void *arg, void (*release)(void *arg),
			 intptr_t *result);

/*
 * Counters of the jobs one shard submitted, written by that shard and
 * read lock-free by any thread; the last three describe the whole pool
 * (the same values on every shard).
 */
struct corio_work_stats {
	uint64_t submitted; /* jobs queued by this shard                         */
	uint64_t done;      /* jobs whose fn returned to a waiting fiber         */
	uint64_t abandoned; /* jobs the caller gave up on (cancel, deadline, shutdown) */
	uint64_t refused;   /* corio_work calls refused with -EAGAIN (queue full) */
	uint64_t wait_ns;   /* total time jobs waited in the queue for a thread   */
	uint64_t run_ns;    /* total time fn ran                                  */
	uint64_t queued;    /* pool: jobs waiting for a thread now                */
	uint64_t running;   /* pool: jobs running now                             */
	uint64_t threads;   /* pool: threads started                             */
};

/* Copy shard's work counters. Any thread while rt runs (rt NULL: the calling
 * shard's runtime). Zeros before the shard has started. 0, -EINVAL (no such
 * shard, out NULL), -EPERM (rt NULL off a shard). */
CORIO_API int corio_work_stats_get(struct corio_rt *rt, unsigned shard,
				   struct corio_work_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* CORIO_WORK_H */
