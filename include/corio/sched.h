/* SPDX-License-Identifier: MIT */
/*
 * corio/sched.h - scheduling classes: latency work first, background work at
 * its share of the CPU. Include <corio.h>.
 *
 * The model (docs/SCHED.md has it whole, with the numbers):
 *  - A class has a name, shares and flags. Every fiber runs in one class;
 *    a fiber spawned without one runs in the default class (id 0, named
 *    "default", 100 shares), which every shard has from the start.
 *  - Each class has its own run queue. When a turn of the shard loop runs
 *    fibers, it picks one class and runs that class's ready fibers for at
 *    most one slice (cfg.slice_us, 500 us), then goes back to the kernel:
 *    completions and timers are served between any two slices, whatever
 *    the classes are doing.
 *  - The class picked is the one with the least virtual time: the CPU time
 *    its fibers used, divided by its shares. Classes that compete for the
 *    CPU split it in proportion to their shares; a class with nothing to
 *    run takes nothing and banks nothing (when it has work again it starts
 *    level with the others, so an idle class gives its time back).
 *  - A latency class (CORIO_CLASS_LATENCY) runs first whenever it has ready
 *    fibers and is at most one slice of its own ahead of its share: it
 *    cannot starve the others, because past its share it waits its turn
 *    like any class.
 *  - Fibers are cooperative: a class's slice ends at the next switch after
 *    it is used up, or after a tenth of it when completions are waiting.
 *    Long-running code calls corio_maybe_yield() (or tests
 *    corio_should_yield()) in its loops; the runtime's own long loops do.
 *    A fiber that never yields holds the shard for as long as it runs (the
 *    stall detector, cfg.stall_ns, reports it).
 *
 * Ids and names are runtime-wide: the first corio_class_create() of a name,
 * on any shard, gives it an id (1..CORIO_CLASS_MAX - 1) that means the same
 * class on every shard, so cross-shard work can name it (corio_call_class
 * and friends, corio/msg.h). Shares and flags are per shard: the first
 * corio_class_create() of a name on a shard sets that shard's, and a shard
 * that never creates it takes the first creator's when it first runs work
 * of that class. To give every shard a class at start-up, create it in
 * cfg.setup (it runs on every shard).
 *
 * Threads: everything here is shard-local except corio_class_stats_get()
 * with a non-NULL rt, which any thread may call.
 */
#ifndef CORIO_SCHED_H
#define CORIO_SCHED_H

#include <corio.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Class ids are 0 (the default class) to CORIO_CLASS_MAX - 1. */
#define CORIO_CLASS_MAX     32
#define CORIO_CLASS_DEFAULT 0
/* Shares: 1..CORIO_CLASS_SHARES_MAX; the default class has 100. */
#define CORIO_CLASS_SHARES_MAX 10000

/* corio_class_opts.flags */
#define CORIO_CLASS_LATENCY 0x1u /* served first while within its shares */

struct corio_class_opts {
	const char *name;  /* 1..23 characters, unique in the runtime        */
	unsigned shares;   /* 1..CORIO_CLASS_SHARES_MAX; 0 is refused        */
	unsigned flags;    /* CORIO_CLASS_*                                  */
	unsigned reserved[4]; /* must be zero                                */
};

/*
 * Create the class o->name, or on a shard that has it already, set its
 * shares and flags here. Returns its id (>= 1): the same for this name on
 * every shard, for the runtime's life. -EINVAL (no name, a name too long,
 * 0 or too many shares, unknown flags, reserved not zero; the name
 * "default": use corio_class_set_shares(0, ...)), -ENOSPC (every id is
 * taken), -EPERM off a shard. Shard-local.
 */
CORIO_API int corio_class_create(const struct corio_class_opts *o);

/* The id of the class called name, or -ENOENT (-EINVAL: name NULL). Any
 * shard; "default" is 0. Shard-local. */
CORIO_API int corio_class_find(const char *name);

/* Give class cls shares on this shard (the default class included).
 * 0, -EINVAL (shares, or no such class). Shard-local. */
CORIO_API int corio_class_set_shares(unsigned cls, unsigned shares);

/*
 * Move the calling fiber into class cls: its next wait or yield queues it
 * there (the rest of its current run is counted in the class it had).
 * Returns the class it was in, or -EINVAL (no such class), -EPERM (not a
 * fiber). A class for a new fiber is given at spawn
 * (corio_spawn_opts.sched_class). Shard-local.
 */
CORIO_API int corio_class_switch(unsigned cls);

/* The calling fiber's class (0 outside a fiber). Shard-local. */
CORIO_API unsigned corio_class_current(void);

/*
 * True once the calling fiber's class has used its slice (cfg.slice_us)
 * in this run, or a tenth of it while completions wait for the loop (on
 * io_uring: CQEs in the ring, or the kernel's deferred task work; the
 * run then ends at once, so the loop reaps them and a latency class they
 * wake runs next): a long computation should then yield, so that
 * completions, timers and the other classes are served. A clock read, a
 * compare and two loads of the ring. False outside a fiber. Shard-local.
 */
CORIO_API bool corio_should_yield(void);

/* corio_yield() when corio_should_yield() says so; else nothing. Counted
 * in the class's yields. Shard-local. */
CORIO_API void corio_maybe_yield(void);

/*
 * A class's accounting on one shard. Queue delay is the time a fiber of
 * the class was ready (woken, spawned or yielded) before it ran.
 * cpu_ns of every class of a shard adds up to the time its fibers ran,
 * within the loop's own time of its busy_ns (corio_stats).
 */
struct corio_class_stats {
	char name[24];
	unsigned id;
	unsigned shares;
	unsigned flags;
	unsigned reserved0;
	uint64_t cpu_ns;      /* time its fibers ran                          */
	uint64_t runs;        /* slices: loop turns that ran this class       */
	uint64_t fibers_run;  /* fibers resumed (or started)                  */
	uint64_t slices_cut;  /* slices that ended with fibers still ready    */
	uint64_t yields;      /* corio_maybe_yield() calls that yielded       */
	uint64_t wait_ns;     /* queue delay, summed over fibers_run          */
	uint64_t wait_max_ns; /* the longest queue delay                      */
	uint64_t wait_hist[CORIO_STATS_HIST_BUCKETS]; /* queue delays (corio_stats) */
	uint64_t reserved[4];
};

/*
 * Copy class cls's accounting on shard into *out. rt may be NULL on a
 * shard (its own runtime); other threads pass a running rt. Returns 0,
 * -ENOENT (no class cls; a class created on another shard that this one
 * has not used yet reads as zeros with its id and name), -EINVAL, -EPERM.
 */
CORIO_API int corio_class_stats_get(struct corio_rt *rt, unsigned shard, unsigned cls,
				    struct corio_class_stats *out);

/* The queue delay below which a fraction q (0..1) of a class's delays
 * fell, in ns, from its histogram (the bucket's upper bound; 0 when none). */
CORIO_API uint64_t corio_class_wait_quantile(const struct corio_class_stats *st, double q);

#ifdef __cplusplus
}
#endif

#endif
