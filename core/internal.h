/* SPDX-License-Identifier: MIT */
/*
 * core/internal.h - the private interface of core/: runtime launch and
 * shutdown, shards, configuration, the loop, fibers (switch, stack pool),
 * the scheduler and wait queues, deadline scopes and bounded waits, sleeps
 * and timer waits, the cross-shard message ring, fiber-local sync, select,
 * groups and core's counters. It knows nothing of sockets, files or the
 * control socket: the areas above it (net/, fs/, ctl/) build on it.
 *
 * May include: timer/, uring/ and the public headers. Not installed.
 *
 * A shard is a list of parts: the ring (uring/), the scheduler and fibers,
 * pools, the wake-up eventfd, loop timing, and one slot per part in parts[]
 * (the table ctl/ctl.c hands to corio__rt_start; core's own parts are the
 * timers and the message ring).
 */
#ifndef CORIO_CORE_INTERNAL_H
#define CORIO_CORE_INTERNAL_H

#include "corio.h"
#include "corio/select.h"
#include "core/list.h"
#include "timer/internal.h"
#include "uring/internal.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define CORIO__UNUSED __attribute__((unused))
#define CORIO__LIKELY(x) __builtin_expect(!!(x), 1)
#define CORIO__UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Owner-written counters readable from other threads without tearing. */
#define CORIO__STAT_ADD(field, n) \
	__atomic_store_n(&(field), (field) + (n), __ATOMIC_RELAXED)
#define CORIO__STAT_SET(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)

/* ---- context switch (core/ctx.c) ----------------------------------------- */
struct corio__ctx {
	void *sp;
};
/* Save callee-saved registers on the current stack, store sp in from->sp,
 * load to->sp and return into whatever saved it. */
void corio__ctx_switch(struct corio__ctx *from, struct corio__ctx *to);
/* Prepare ctx so that switching to it calls entry(arg) on [lo, lo + size). */
void corio__ctx_make(struct corio__ctx *ctx, void *lo, size_t size, void (*entry)(void *),
		     void *arg);

/* ---- fibers -------------------------------------------------------------- */
enum corio__fiber_state {
	CORIO__F_NEW,     /* spawned, never run: has no stack yet */
	CORIO__F_READY,   /* on the run queue                     */
	CORIO__F_RUNNING,
	CORIO__F_PARKED,  /* waiting on a waitq or an op          */
	CORIO__F_DONE,    /* ended; the record waits for join/detach */
	CORIO__F_FREE,    /* joined or detached and ended: back in the pool.
	                     A handle to it is refused (-EINVAL) until the
	                     record is reused (core/fiber.c: quarantine) */
};

enum {
	CORIO__FF_DETACHED = 1u << 0,
	CORIO__FF_CANCELLED = 1u << 1,
	CORIO__FF_JOINED = 1u << 2, /* someone is joining / has joined */
	CORIO__FF_QUEUED = 1u << 3, /* on the run queue                */
};

struct corio__shard;

struct corio_fiber {
	struct corio__ctx ctx;
	struct corio__shard *shard;
	struct corio_fiber *run_next;            /* its class's run queue */
	struct corio_fiber *wq_next, *wq_prev;   /* a corio_waitq      */
	struct corio_waitq *wq;                  /* the waitq parked on */
	struct corio_fiber *all_next, *all_prev; /* shard's live list  */
	struct corio__op *wait_op;               /* the op parked on   */
	/* Open uninterruptible sections (corio__nocancel_push): while > 0 a
	 * cancel marks the fiber but does not wake it. */
	unsigned nocancel;
	/* Called once instead of fn when the fiber ends without ever having
	 * run (cancelled while new, or no stack): its spawner releases what
	 * arg holds (core/msg.c). f->status says why. */
	void (*unrun)(struct corio_fiber *f);
	uintptr_t unrun_ctx[2];
	struct corio_fiber *joiner;
	/* A select's stand-in (core/select.c): a record that waits on a wait
	 * queue (or as a joiner) for a selecting fiber. corio__ready() calls
	 * proxy_wake instead of queueing it. NULL for real fibers. */
	void (*proxy_wake)(struct corio_fiber *p, int res);
	/* Fiber groups (core/group.c): the member's group, its links in the
	 * group's member list, where to store its status, its spawn index. */
	struct corio_group *group;
	struct corio_fiber *grp_next, *grp_prev;
	int *grp_status;
	unsigned grp_index;
	int (*fn)(void *);
	void *arg;
	int status;
	int wake_res;
	uint8_t state;
	uint8_t flags;
	uint8_t cls;       /* scheduling class (core/sched.c)      */
	uint64_t ready_t;  /* tick it was last made ready (queue delay) */
	void *stack_map;   /* mmap base (the guard first) */
	void *stack_lo;    /* lowest usable byte, just above the guard */
	size_t stack_size; /* usable bytes above the guard */
	size_t stack_req;  /* requested size (0: default) */
	unsigned vg_id;
	uint64_t id;
	uint64_t deadline_ns; /* nearest deadline scope, 0: none (core/deadline.c) */
	unsigned dl_depth;    /* open deadline scopes                              */
	void *asan_fake;
	void *tsan_fiber;
	char name[24];
};

/* ---- per-area parts ------------------------------------------------------ */
/* Slots of s->parts[]: core's own parts first; the areas above core take
 * the slots from CORIO__PART_FIRST_AREA on, each naming its slot in its own
 * internal.h, and ctl/ctl.c puts every part in its slot of the table it
 * hands to corio__rt_start(). The loop calls the parts in slot order. */
enum corio__part_id {
	CORIO__PART_TIMER,
	CORIO__PART_MSG,
	CORIO__PART_WORK,
	CORIO__PART_FIRST_AREA,
	CORIO__PART_MAX = CORIO__PART_FIRST_AREA + 4,
};
struct corio__part {
	const char *name;
	/* on the shard thread, after the ring exists; -errno aborts start-up */
	int (*init)(struct corio__shard *s);
	/* once per loop turn, after running fibers; returns work done. With
	 * on_demand, only in a turn after the part asked for it with
	 * corio__part_want() (net's starved receives): the loop then pays
	 * nothing for it while it has no work. */
	unsigned (*poll)(struct corio__shard *s);
	bool on_demand;
	/* Fed by other threads (messages, pool completions): polled only in a
	 * turn after a producer hinted it with corio__shard_hint(), which it
	 * does after publishing; a poll that leaves work (a batch limit, a
	 * claim not yet published) hints itself again. The rest get work only
	 * from this shard's own fibers and completions, all of which come
	 * before the turn's poll. */
	bool fed;
	/* Once before the shard blocks in the kernel after spinning (idle
	 * spin; optional): the timers arm their kernel timeout here. */
	void (*sleep)(struct corio__shard *s);
	/* when shutdown begins on this shard */
	void (*stop)(struct corio__shard *s);
	/* true while the part still has kernel ops or work to drain */
	bool (*busy)(struct corio__shard *s);
	/* corio_drain() reached this shard: stop taking new work (optional) */
	void (*drain)(struct corio__shard *s);
	/* after the loop ended, before the ring is closed */
	void (*fini)(struct corio__shard *s);
	/* in corio_wait(), after every shard thread has ended: free what other
	 * threads may still read while shards stop (the stats getters). Parts
	 * without it free everything in fini. */
	void (*release)(struct corio__shard *s);
	/* in corio_wait(), after every shard thread has ended, before release:
	 * what the part still holds that should have come back (leak census,
	 * core/census.c); writes it into buf, returns how many, 0 if none */
	unsigned (*census)(struct corio__shard *s, char *buf, size_t len);
};
extern const struct corio__part corio__timer_part; /* core/timer.c */
extern const struct corio__part corio__msg_part;   /* core/msg.c   */
extern const struct corio__part corio__work_part;  /* core/work.c  */

/* ---- loop timing (core/stats.c) --------------------------------------------- */
/*
 * The loop reads a cheap tick clock once per busy turn and twice per idle
 * turn (around the blocking enter): on x86-64 with an invariant TSC it is
 * rdtsc (~10 ns here, against ~24 ns for clock_gettime through the vDSO), on
 * aarch64 the virtual counter; anywhere else, and when CORIO_CLOCK=monotonic
 * is set, CLOCK_MONOTONIC. Ticks are only ever subtracted from ticks read on
 * the same shard and turned into nanoseconds with corio__ticks_ns(). The
 * calibration is done once per process and never changes afterwards.
 */
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

struct corio__tick_cal {
	int tsc;       /* 1: rdtsc / cntvct; 0: CLOCK_MONOTONIC ns */
	uint64_t mult; /* ns = ticks * mult >> 32 */
	/* corio__tick_bucket(): by tick octave, its first bucket and the
	 * first tick of the next one (core/stats.c) */
	uint8_t hb[64];
	uint64_t ht[64];
};
extern struct corio__tick_cal corio__tick_cal;
/* Idempotent, thread-safe: 0, or -EINVAL (corio__error) for a bad CORIO_CLOCK. */
int corio__tick_calibrate(void);

static inline uint64_t corio__tick(void)
{
#if defined(__x86_64__)
	if (CORIO__LIKELY(corio__tick_cal.tsc))
		return __rdtsc();
#elif defined(__aarch64__)
	if (CORIO__LIKELY(corio__tick_cal.tsc)) {
		uint64_t v;

		__asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
		return v;
	}
#endif
	return corio_now_ns();
}

static inline uint64_t corio__ts_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

/* CLOCK_MONOTONIC_COARSE in ns: a few ns, a jiffy's resolution. */
static inline uint64_t corio__coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return corio__ts_ns(&ts);
}

static inline uint64_t corio__ticks_ns(uint64_t ticks)
{
	return (uint64_t)(((unsigned __int128)ticks * corio__tick_cal.mult) >> 32);
}

static inline uint64_t corio__ns_ticks(uint64_t ns)
{
	unsigned __int128 t = ((unsigned __int128)ns << 32) / corio__tick_cal.mult;

	return t > UINT64_MAX ? UINT64_MAX : (uint64_t)t;
}

/* Histogram bucket of a duration: 0 below 256 ns, b in [2^(b+7), 2^(b+8)) ns,
 * the last one everything from 2^38 ns (~275 s) up. */
static inline unsigned corio__hist_bucket(uint64_t ns)
{
	unsigned b;

	if (ns < 256)
		return 0;
	b = 64u - (unsigned)__builtin_clzll(ns) - 8u;
	return b < CORIO_STATS_HIST_BUCKETS ? b : CORIO_STATS_HIST_BUCKETS - 1;
}

/* corio__hist_bucket(corio__ticks_ns(t)), exactly, in a few instructions
 * (a table built at calibration). */
static inline unsigned corio__tick_bucket(uint64_t t)
{
	unsigned e = 63u - (unsigned)__builtin_clzll(t | 1);

	return corio__tick_cal.hb[e] + (t >= corio__tick_cal.ht[e]);
}

struct corio__loopstat {
	uint64_t last_poll;   /* tick: the loop's last look at the ring          */
	uint64_t stall_ticks; /* config stall_ns in ticks; UINT64_MAX: off        */
	/* busy_ns, gap_ns, turn_max_ns, gap_max_ns and the two histograms of
	 * corio_stats, written by the shard (relaxed) in ticks and halves:
	 * gap = busy - submit; a histogram = same_hist + its own (turns whose
	 * gap was timed apart). corio_stats_get adds them up. */
	uint64_t busy_t, submit_t, turn_max_t, gap_max_t;
	uint64_t same_hist[CORIO_STATS_HIST_BUCKETS];
	uint64_t turn_hist[CORIO_STATS_HIST_BUCKETS];
	uint64_t gap_hist[CORIO_STATS_HIST_BUCKETS];
	/* Per-fiber stall timing reads the tick at every switch while a run
	 * lasts (core/fiber.c): the same read times the class's slice and
	 * the next fiber's queue delay. */
	uint64_t warn_after;  /* ns: no warning before this (rate limit)          */
	uint64_t suppressed;  /* warnings not printed since the last one          */
	uint64_t daemons;     /* live fibers that do not keep the runtime running */
	/* tick at which the idle period in progress began, 0 outside one: a
	 * reader on another thread adds it to idle_ns (corio_stats_get), so a
	 * shard blocked for a long time does not look like it has no time */
	uint64_t idle_from;
	/* On-CPU time for stall reports (core/stats.c). The per-switch check
	 * is on wall time; when it trips, the thread's CPU clock says how much
	 * of it the fiber really ran. That needs a reading from before the
	 * fiber started: the baseline, refreshed at a turn's start when older
	 * than stall_ns / 4, and at every report. CPU time between the
	 * baseline and the fiber's start is at most the wall time between
	 * them minus the loop's blocking enters, which gives a lower bound. */
	uint64_t cpu_base;      /* the thread's CPU ns at the baseline          */
	uint64_t base_ns;       /* CLOCK_MONOTONIC ns of the baseline           */
	uint64_t base_tick;     /* its tick, to tell when it is stale           */
	uint64_t base_blocked;  /* blocked_t at the baseline                    */
	uint64_t blocked_t;     /* ticks spent blocked in the loop's enters     */
	/* ticks idle (blocked or spinning), the idle_ns stat in ticks: the
	 * readers convert (corio_stats_get), the turn does not */
	uint64_t idle_t;
	uint64_t refresh_ticks; /* stall_ns / 4 in ticks; UINT64_MAX: off       */
	uint64_t offcpu_after;  /* rate limit of off-CPU reports (ns)           */
	uint64_t offcpu_suppressed;
	/* CORIO_STATS_TEST=read_gap: readers pause between loading idle_ns
	 * and idle_from, so the race above happens on every read (a test hook) */
	bool read_gap;
};

/* ---- scheduling classes (core/sched.c) ------------------------------------- */
struct corio__runq {
	struct corio_fiber *head, *tail;
};
struct corio__class {
	uint64_t vtime;  /* virtual time: ticks run * vmul (compared wrapping) */
	uint64_t vmul;   /* CORIO__VSCALE / shares                             */
	uint64_t vslice; /* one slice in its virtual time                      */
	unsigned shares, flags;
	_Atomic bool live; /* set up on this shard (read by stats readers)     */
	char name[24];
	/* Accounting, written by the shard (relaxed), read by any thread
	 * (corio_class_stats_get turns ticks into ns): durations are kept in
	 * ticks, so the hot path converts nothing but the histogram's value. */
	struct {
		uint64_t cpu_t, runs, slices_cut, yields;
		uint64_t wait_t, wait_max_t;
		uint64_t wait_hist[CORIO_STATS_HIST_BUCKETS];
	} st;
};
#define CORIO__VSCALE ((uint64_t)CORIO_CLASS_SHARES_MAX * 16)
/* Shard start: the default class, the slice. */
void corio__sched_init(struct corio__shard *s);
/* Set up class id on s from the runtime's registry if it is not yet: 0,
 * or -EINVAL with a message naming who (no such class). */
int corio__class_use(struct corio__shard *s, unsigned id, const char *who);
/* The class the next run takes (two or more have ready fibers). */
unsigned corio__sched_pick(struct corio__shard *s, uint32_t active);

/* ---- the shard ----------------------------------------------------------- */
struct corio_rt;

struct corio__shard {
	struct corio__ring ring;
	struct corio_rt *rt;
	unsigned id;
	int cpu;
	int numa_node;
	pthread_t thread;
	pid_t tid;

	/* scheduler: a run queue per class (core/sched.c has the model) */
	struct corio__ctx sched_ctx;
	struct corio_fiber *current;
	struct corio__runq runq[CORIO_CLASS_MAX];
	uint32_t runq_active;  /* classes whose run queue is not empty, 1 << id */
	uint32_t cls_latency;  /* latency classes, 1 << id                      */
	uint64_t now;          /* tick of the last switch or ring look: the
	                          time a fiber made ready now is stamped with   */
	uint64_t slice_ticks;  /* cfg.slice_us in ticks                         */
	uint64_t vmin;         /* the shard's virtual time (core/sched.c)        */
	uint32_t sched_seen;   /* runq_active when the last run began            */
	/* This turn's run of one class (core/fiber.c): while it lasts, a
	 * fiber that parks or yields hands the CPU straight to the next one. */
	struct {
		struct corio__runq *q;    /* the class's queue                          */
		struct corio__class *c;   /* the class                                  */
		struct corio_fiber *last; /* queued last when the turn began; NULL: run over */
		unsigned budget;          /* fibers this run may still start            */
		bool stalled;             /* a fiber ran past stall_ns (reported)       */
		bool cut;                 /* its slice ended it, fibers still ready     */
		uint64_t t0, end;         /* tick it began (s->now is the tick at the
		                             last switch); its slice ends at end      */
		uint64_t limit;           /* stall_ns in ticks (UINT64_MAX: off)        */
		unsigned budget0;         /* cfg.run_budget                             */
		uint32_t bit;             /* the class's bit in runq_active             */
	} run;
	struct corio__class cls[CORIO_CLASS_MAX];
	struct corio_fiber *all; /* live fibers, for shutdown */
	uint64_t ops_inflight;   /* kernel ops whose final CQE is pending */
	uint64_t next_fiber_id;
	bool stopping;           /* shutdown seen on this shard */
	bool busy;               /* counted in rt->busy_shards */
	bool dl_no_link;         /* kernel ops take no linked timeout (core/deadline.c) */
	struct corio_event start_ev; /* cfg.setup: set once every shard's setup returned */
	/* corio_drain (core/drain.c) */
	bool draining;
	struct corio_event drain_ev;
	struct corio_timer drain_timer; /* on the shard that began the drain */
	/* cfg.signals (core/signal.c): shard 0 reads sigfd; every shard keeps
	 * the signals given to it and not yet waited for */
	int sigfd;
	bool sig_armed;
	struct corio__op sig_op;
	uint64_t sig_pending;
	struct corio_waitq sig_wq;
	uint64_t *sig_owed;           /* shard 0: signals not yet posted, by shard */
	struct corio_timer sig_retry; /* shard 0: tries the owed posts again */

	/* pools */
	struct corio_fiber *fiber_free, *fiber_free_tail; /* FIFO, see fiber_alloc */
	size_t fiber_nfree;
	void **fiber_chunks;
	size_t nchunks, chunks_cap;
	void **stack_cache;
	unsigned nstacks, stack_cache_cap;
	size_t stack_size;  /* default, a page multiple */
	size_t stack_guard; /* PROT_NONE bytes below each stack, a page multiple */
	uint64_t stacks_mapped; /* stacks mmap'd and not yet unmapped (census) */

	/* wake-up from other threads: an eventfd with a read always armed */
	int efd;
	uint64_t efd_buf;
	struct corio__op efd_op;
	bool efd_armed;
	bool efd_poll;        /* wait with POLL_ADD + read(2), not an io_uring read */
	bool efd_nowait_test; /* CORIO_RING_DISABLE=efd_wait: act like an old kernel */
	_Atomic int sleeping; /* 1 while blocked (or about to) in io_uring_enter */
	_Atomic unsigned xpend; /* fed parts hinted by producers, 1 << slot */

	/* sanitizer bookkeeping for the scheduler's own stack */
	const void *sched_stack_bottom;
	size_t sched_stack_size;
	void *sched_asan_fake;
	void *tsan_sched;

	/* signal stack for the overflow detector */
	void *altstack;

	struct corio_stats stats;
	struct corio__loopstat ls; /* loop timing and stall reports (core/stats.c) */
	void *parts[CORIO__PART_MAX];
	unsigned part_want; /* on-demand parts to poll next turn, 1 << slot */
	char err[256];
};

/* Ask for an on-demand part's poll in the next loop turn (a part with
 * work left asks again from its poll). */
static inline void corio__part_want(struct corio__shard *s, unsigned slot)
{
	s->part_want |= 1u << slot;
}

/*
 * After publishing work for t's fed part `slot` with a seq_cst RMW (a CAS
 * or fetch_or on the part's own queue word), from any thread: t's loop
 * polls the part in its next turn. Then the caller checks t->sleeping
 * (core/msg.c, wake()). seq_cst throughout, so that with the sleeper's
 * store of `sleeping` and its load of `xpend` this is the store-buffering
 * handshake of core/loop.c. The RMW is skipped when the bit is set: the
 * loop's exchange that clears it comes after our load in the total order,
 * so the poll that follows the exchange sees what we published.
 */
static inline void corio__shard_hint(struct corio__shard *t, unsigned slot)
{
	unsigned bit = 1u << slot;

	if (!(atomic_load(&t->xpend) & bit))
		atomic_fetch_or(&t->xpend, bit);
}

/* ---- signals (core/signal.c) ---------------------------------------------- */
int corio__signal_check(uint64_t mask);            /* config: -EINVAL + message */
void corio__signal_block(const struct corio_rt *rt); /* on a new shard thread */
int corio__signal_setup(struct corio__shard *s);   /* shard 0: the signalfd */
void corio__signal_start(struct corio__shard *s);  /* arm its poll, once running */
void corio__signal_fini(struct corio__shard *s);

#define CORIO__RT_MEMO_MAX 16

/*
 * A value made once per runtime and shared by every shard (core/rt.c): the
 * first caller with key runs make(ctx, val) under the runtime's lock (it
 * must not block: a few syscalls at most) and the value is kept if make
 * returns 0; every later caller, on any shard, gets a copy. Returns 1 (made
 * now), 0 (copied), make's error (nothing kept), -ENOSPC (table full) or
 * -ENAMETOOLONG (key), -EPERM off a shard. The values are immutable once
 * made: the only state shards share besides the message rings.
 */
int corio__rt_memo(const char *key, int (*make)(void *ctx, void *val), void *ctx, void *val,
		   size_t size);

struct corio_rt {
	struct corio_config cfg;
	const struct corio__part *const *parts; /* CORIO__PART_MAX slots, from ctl/ */
	/* the poll hooks of the parts polled every turn, in slot order,
	 * packed (empty slots would cost each turn their tests) */
	unsigned (*polls[CORIO__PART_MAX])(struct corio__shard *s);
	unsigned npolls;
	void (*sleeps[CORIO__PART_MAX])(struct corio__shard *s);
	unsigned nsleeps;
	unsigned nshards;
	int *cpus;
	struct corio__shard **shards;
	struct corio__pool *pool; /* the blocking-work pool (core/work.c) */
	/* Per shard, the largest idle_ns any corio_stats_get() reader was
	 * given: a reader that loads idle_ns just before a period ends and
	 * idle_from just after sees neither the period nor its mark; clamping
	 * to this keeps every reading at or above the ones before it. The
	 * readers' state, not the shard's: written by readers only (CAS). */
	uint64_t *idle_shown;
	void (*entry)(void *);
	void *entry_arg;
	_Atomic int stopping;
	_Atomic unsigned busy_shards; /* shards with live fibers */
	/* start-up handshake */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned ready, failed;
	int first_err;
	bool go;
	_Atomic int draining; /* corio_drain() was called (the first one wins) */
	/* corio_drain_on_signal: the signals that start a drain (shard 0
	 * reads them as they arrive), and its timeout */
	_Atomic uint64_t drain_sig_mask, drain_sig_ns;
	unsigned setup_left; /* cfg.setup: shards whose setup has not returned */
	int setup_err;       /* the first negative value a setup returned */
	/* corio__rt_memo(): values made once per runtime, under lock */
	/* scheduling classes: names and the first creator's shares and flags,
	 * appended under lock; ncls published with a release store, and an
	 * entry below it never changes again (core/sched.c) */
	struct corio__class_reg {
		char name[24];
		unsigned shares, flags;
	} cls_reg[CORIO_CLASS_MAX];
	_Atomic unsigned ncls;
	struct corio__memo {
		char key[120];
		size_t size;
		unsigned char val[136];
	} memo[CORIO__RT_MEMO_MAX];
	unsigned nmemo;
	char err[256];
};

/*
 * The shard running on this thread. initial-exec: read with one %fs-relative
 * load in libcorio.so too, where the default model for a shared library
 * calls __tls_get_addr on every access (every corio call makes one or more:
 * measured +1.2 ns per fiber switch and +8 ns per batched NOP with the .so).
 * The cost: a program that dlopen()s libcorio.so needs one pointer of the
 * static TLS surplus glibc keeps for that.
 */
extern __thread struct corio__shard *corio__tl_shard
	__attribute__((tls_model("initial-exec")));

static inline struct corio__shard *corio__shard(void)
{
	return corio__tl_shard;
}

/* The calling fiber, or NULL (not on a shard, or in the loop itself). */
static inline struct corio_fiber *corio__self(void)
{
	struct corio__shard *s = corio__tl_shard;

	return s ? s->current : NULL;
}

/* Where a misused call was made from, for its message: a thread that is
 * not a shard, or the shard's loop outside any fiber (a timer callback, a
 * corio_post function, a spawn release hook). */
static inline const char *corio__not_fiber_why(void)
{
	return corio__tl_shard ? "called from a callback on the shard's loop (a timer callback, "
				 "a corio_post function), not from a fiber"
			       : "called from a thread that is not a shard";
}

/* A blocking call made outside a fiber: -errval and a message naming who,
 * the public call (and an abort in debug builds: corio__misuse). */
#define CORIO__REQUIRE_FIBER(who, errval)                                         \
	do {                                                                      \
		if (CORIO__UNLIKELY(!corio__self()))                              \
			return corio__misuse((errval), (who), "%s", corio__not_fiber_why()); \
	} while (0)

/* ---- scheduler and wait queues (core/fiber.c) ------------------------------ */
/* Park the calling fiber until corio__ready(); returns the value passed there. */
int corio__park(void);
/* Make f runnable with wake result res (no-op if it is already queued).
 * Inline: every completion that wakes a fiber comes through here. */
void corio__ready_proxy(struct corio_fiber *f, int res);
static inline void corio__ready(struct corio_fiber *f, int res)
{
	struct corio__shard *s = f->shard;

	if (CORIO__UNLIKELY(f->proxy_wake)) {
		corio__ready_proxy(f, res); /* a select's stand-in */
		return;
	}
	if (f->flags & CORIO__FF_QUEUED)
		return;
	f->wake_res = res;
	f->flags |= CORIO__FF_QUEUED;
	if (f->state != CORIO__F_NEW)
		f->state = CORIO__F_READY;
	f->run_next = NULL;
	f->ready_t = s->now;
	struct corio__runq *q = &s->runq[f->cls];

	if (q->tail) {
		q->tail->run_next = f;
	} else {
		q->head = f;
		s->runq_active |= 1u << f->cls;
	}
	q->tail = f;
}
/* Park until corio__ready(), bounded by the fiber's deadline scope:
 * -ETIMEDOUT at once if it has passed, or when it passes while parked. The
 * waker must tolerate the fiber having left (a timed-out waiter is gone). */
int corio__park_bounded(void);
/* End f, which never ran (state NEW), with status: wake its joiner, call
 * its unrun hook, reap it. On the loop. */
void corio__fiber_end_unrun(struct corio__shard *s, struct corio_fiber *f, int status);
/* corio_spawn() with an unrun hook (see struct corio_fiber). */
int corio__spawn_unrun(int (*fn)(void *), void *arg, const struct corio_spawn_opts *opts,
		       struct corio_fiber **out, void (*unrun)(struct corio_fiber *f),
		       uintptr_t ctx0, uintptr_t ctx1);
/* Fiber side of a park or a yield: hand the CPU to the next fiber of the
 * run, or back to the loop (core/fiber.c). */
void corio__leave(struct corio__shard *s, struct corio_fiber *f);
/* Queue f (the running fiber of s) on wq, park it, and return what woke
 * it. Every waker takes f off the queue first (wake_one/all, cancel, the
 * deadline). Should anything else make f ready - a stray completion for an
 * op f waited on before - f must not stay queued: the next caller would
 * find the queue taken (corio_accept's -EBUSY) or f would be pushed twice.
 * Callers loop on their condition, so the early return is a spurious
 * wake-up, nothing worse. Shared by both waits below. */
static inline __attribute__((always_inline)) int corio__wq_park(struct corio__shard *s,
								 struct corio_fiber *f,
								 struct corio_waitq *wq)
{
	f->wq = wq;
	CORIO__DLIST_APPEND(wq->head, wq->tail, f, wq_next, wq_prev);
	f->state = CORIO__F_PARKED;
	corio__leave(s, f);
	if (CORIO__UNLIKELY(f->wq != NULL)) {
		CORIO__DLIST_DEL2(f->wq->head, f->wq->tail, f, wq_next, wq_prev);
		f->wq = NULL;
	}
	return f->wake_res;
}
/* corio__wq_wait with a deadline scope, off a fiber, or cancelled. */
int corio__wq_wait_slow(struct corio_waitq *wq);
/* Park on a wait queue; -ECANCELED if cancelled (then off the queue).
 * Inline: a reader waiting for its socket's next bytes parks here once a
 * message; the common case (a fiber, not cancelled, no deadline scope)
 * pays no call but the switch. */
static inline int corio__wq_wait(struct corio_waitq *wq)
{
	struct corio__shard *s = corio__tl_shard;
	struct corio_fiber *f = s ? s->current : NULL;

	if (CORIO__UNLIKELY(!f || (f->flags & CORIO__FF_CANCELLED) || f->deadline_ns))
		return corio__wq_wait_slow(wq);
	return corio__wq_park(s, f, wq);
}
/* Pop the first waiter (NULL if none) and make it ready with res. */
struct corio_fiber *corio__wq_wake_one(struct corio_waitq *wq, int res);
/* Wake every waiter (inline: a completion waking its socket's one reader
 * is the hot case, and an empty queue costs one load). */
static inline void corio__wq_wake_all(struct corio_waitq *wq, int res)
{
	struct corio_fiber *f;

	while ((f = wq->head)) {
		wq->head = f->wq_next;
		if (wq->head)
			wq->head->wq_prev = NULL;
		else
			wq->tail = NULL;
		f->wq_next = f->wq_prev = NULL;
		f->wq = NULL;
		corio__ready(f, res);
	}
}
/* If f is parked on a wait queue, take it off and make it ready with res
 * (a deadline expiring, core/deadline.c). */
void corio__wq_unpark(struct corio_fiber *f, int res);
void corio__fiber_cancel(struct corio_fiber *f);
/* Append f to wq without parking it (a select's stand-in). */
void corio__wq_push(struct corio_waitq *wq, struct corio_fiber *f);
/* Take f off the wait queue it is on, if any, without waking it. */
void corio__wq_del(struct corio_fiber *f);

/* ---- select and groups (core/select.c, core/group.c) ---------------------- */
struct corio_sel;

/*
 * What a kind of waitable does for corio_select(). Each constructor
 * (corio_sel_event(), corio_sel_recv(), ...) lives with its waitable's area
 * and stores its ops in the item, so core/ needs to know no other area.
 *  poll:     complete the item now if it can (fill it->res, consume what the
 *            item takes: a channel element, queued bytes, expirations) and
 *            return true; otherwise change nothing and return false.
 *  arm:      register the stand-in p where the waitable wakes its waiters
 *            (corio__wq_push on its wait queue); may start kernel work that
 *            outlives the select only if its owner (the socket) finishes it.
 *            0, or -errno: the item then completes with that error.
 *  disarm:   take p off again (p may have been woken already: then
 *            corio__proxy_fired(p) and p->wake_res say so) and put back
 *            anything the wake-up carried (a timer's expiration count).
 *  pass_on:  optional; p woke but the select did not take from this item:
 *            hand the wake-up to the waitable's next waiter, if the thing
 *            is still ready (a channel's wake_one), so no wake-up is lost.
 */
struct corio__sel_ops {
	bool (*poll)(struct corio_sel *it);
	int (*arm)(struct corio_sel *it, struct corio_fiber *p);
	void (*disarm)(struct corio_sel *it, struct corio_fiber *p);
	void (*pass_on)(struct corio_sel *it);
};

/* Stand-in records, from the shard's fiber pool (no allocation after warm-up). */
struct corio_fiber *corio__proxy_get(struct corio__shard *s,
				     void (*wake)(struct corio_fiber *p, int res), void *arg);
void corio__proxy_put(struct corio__shard *s, struct corio_fiber *p);
static inline bool corio__proxy_fired(const struct corio_fiber *p)
{
	return p->status != 0;
}

/* Fill a select item (the constructors); ops NULL marks it invalid. */
static inline void corio__sel_fill(struct corio_sel *it, const struct corio__sel_ops *ops,
				   void *obj, void *buf, size_t len, uint64_t ns)
{
	if (!it)
		return;
	it->obj = obj;
	it->buf = buf;
	it->len = len;
	it->ns = ns;
	it->res = 0;
	it->_ops = ops;
	it->_proxy = NULL;
	it->_ctx = NULL;
	it->_aux = 0;
}

/* A member of a group ended (called from corio__fiber_reap). */
void corio__group_exit(struct corio_fiber *f);

/* ---- kernel ops waited on by a fiber (core/ops.c) ------------------------ */
/*
 * The pattern every blocking call uses:
 *
 *	struct corio__op op;
 *	struct io_uring_sqe *sqe;
 *	int ret = corio__op_begin(&op, &sqe);   // -ECANCELED / -EPERM, or 0
 *	if (ret) return ret;
 *	io_uring_prep_xxx(sqe, ...);
 *	return corio__op_wait(&op);
 *
 * corio__op_wait parks until the op's final CQE and returns its result. If
 * the fiber is cancelled meanwhile, an async cancel is queued and the wait
 * goes on until the final CQE, so the kernel is done with every buffer when
 * it returns (invariant 2).
 *
 * Take no other SQE between corio__op_begin and corio__op_wait: the wait
 * links the deadline's LINK_TIMEOUT right behind the op's SQE, and if that
 * SQE is no longer the last one queued it falls back to a heap timer that
 * async-cancels the op (correct, but one more SQE and a timer).
 */
int corio__op_begin_who(struct corio__op *op, struct io_uring_sqe **sqe, const char *who);
int corio__op_wait(struct corio__op *op);
/*
 * The checks every blocking call makes before anything else (corio.h's
 * rule), and corio__op_begin before it takes an SQE: -EPERM off a fiber,
 * -ECANCELED, -ETIMEDOUT past the deadline scope, else 0. who names the
 * public call in the -EPERM message. Also for calls that do their work
 * without the ring (blocking-syscall fallbacks), so an expired scope fails
 * them the same way.
 */
int corio__may_block_slow(const char *who);
static inline int corio__may_block(const char *who)
{
	struct corio_fiber *f = corio__self();

	if (CORIO__LIKELY(f && !(f->flags & CORIO__FF_CANCELLED) && !f->deadline_ns))
		return 0;
	return corio__may_block_slow(who);
}
/* corio__may_block for a caller that parks next: the calling fiber when
 * its first park needs no test of its own (not cancelled, no deadline
 * scope: corio__wq_park), else NULL with *ret the slow check's answer (0:
 * it may block, through the checked corio__wq_wait). */
static inline __attribute__((always_inline)) struct corio_fiber *
corio__may_block_fiber(const char *who, int *ret)
{
	struct corio_fiber *f = corio__self();

	if (CORIO__LIKELY(f && !(f->flags & CORIO__FF_CANCELLED) && !f->deadline_ns)) {
		*ret = 0;
		return f;
	}
	*ret = corio__may_block_slow(who);
	return NULL;
}
/* Without a name: the calling function's, which is the public call where
 * the op is begun in it (pass the public name with the _who forms where
 * it is not). */
#define corio__op_begin(op, sqe) corio__op_begin_who((op), (sqe), __func__)
#define corio__op_may_start()    corio__may_block(__func__)

/*
 * Uninterruptible sections, the twin of corio_deadline_shield() for
 * cancellation: inside one, a corio_cancel() of the fiber (or shutdown)
 * marks it cancelled, so its later blocking calls return -ECANCELED, but
 * does not wake it or cancel its kernel op. For a park whose waited-for
 * thing still references the fiber's memory (a call's record on the
 * target, a close that must finish, a group's members). Sections nest
 * (a close inside a group drain); a deadline scope still applies inside
 * one unless it is shielded as well.
 */
static inline void corio__nocancel_push(struct corio_fiber *f)
{
	f->nocancel++;
}
static inline void corio__nocancel_pop(struct corio_fiber *f)
{
	assert(f->nocancel);
	f->nocancel--;
}

/* ---- deadlines (core/deadline.c) ------------------------------------------- */
/* At shard start: can kernel ops carry linked timeouts (s->dl_no_link)? */
/* 0, or -EINVAL with the reason in s->err (a bad CORIO_TIMER_NO_LINK). */
int corio__deadline_init(struct corio__shard *s);
/* The one check every wait makes: true (and counted as a timeout) when f's
 * deadline scope has passed. */
bool corio__deadline_passed(struct corio_fiber *f);
/* A blocking call is about to return -ETIMEDOUT for another reason. */
void corio__deadline_count_timeout(struct corio__shard *s);
/*
 * Bound a fiber wait by f's deadline scope. Call before parking f when
 * f->deadline_ns != 0: returns -ETIMEDOUT if the deadline has passed, else
 * arms dt (on the caller's stack) to pull f off its wait queue (_arm) or
 * wake it from a bare park (_arm_park) with -ETIMEDOUT at the deadline;
 * corio__deadline_disarm(dt) after the park.
 */
int corio__deadline_arm(struct corio_timer *dt, struct corio_fiber *f);
int corio__deadline_arm_park(struct corio_timer *dt, struct corio_fiber *f);
void corio__deadline_disarm(struct corio_timer *dt);
/* A kernel op under a deadline scope (corio__op_begin / _wait): prepare
 * before taking the op's SQE, link after its prep, done after the park. */
struct corio__dl_op {
	uint64_t deadline_ns;
	struct __kernel_timespec ts; /* read by the kernel at submit */
	struct corio_timer dt;       /* the fallback's heap timer    */
	bool fallback;
};
void corio__deadline_op_prepare(struct corio_fiber *f);
void corio__deadline_op_link(struct corio__dl_op *d, struct corio__op *op);
int corio__deadline_op_done(struct corio__dl_op *d, struct corio_fiber *f, int res);

/* ---- timers (core/timer.c on timer/) ----------------------------------------- */
static inline struct corio__timers *corio__timers(struct corio__shard *s)
{
	return (struct corio__timers *)s->parts[CORIO__PART_TIMER];
}

/* Book-keeping for ops not waited on by a fiber (multishot, callbacks):
 * the shard drains them before it stops. */
static inline void corio__op_started(struct corio__shard *s)
{
	s->ops_inflight++;
}
static inline void corio__op_finished(struct corio__shard *s)
{
	s->ops_inflight--;
}

/* ---- stats getters ------------------------------------------------------- */
/* The runtime a stats getter reads: rt, or the caller's own when rt is NULL
 * (NULL off-shard: the getter returns -EPERM). */
static inline struct corio_rt *corio__rt_or_own(struct corio_rt *rt)
{
	if (rt)
		return rt;
	return corio__tl_shard ? corio__tl_shard->rt : NULL;
}

/* Copy owner-written uint64_t counters without tearing (relaxed loads). */
static inline void corio__stats_copy(void *dst, const void *src, size_t size)
{
	const uint64_t *from = src;
	uint64_t *to = dst;

	for (size_t i = 0; i < size / sizeof(uint64_t); i++)
		to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
}

/* ---- errors -------------------------------------------------------------- */
/* Record a message for corio_last_error() on this thread; returns err.
 * Every -EINVAL a public call returns comes with one, naming the call. */
int corio__error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * API misuse the headers answer with an error (a blocking call off a
 * fiber, an unbalanced corio_deadline_pop, ...): record "who: why" as
 * corio__error() does and return err. Debug builds (no NDEBUG: make
 * DEBUG=1, the sanitizer builds) print "corio: who: why" on stderr and
 * abort instead, so the bug shows where it is made. who is the public call
 * the user made, never an internal function.
 */
int corio__misuse(int err, const char *who, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- stacks (core/stack.c) ----------------------------------------------- */
/* Bounds of cfg.stack_size and corio_spawn_opts.stack_size; cfg.stack_guard
 * default and bound. The guard only costs address space (PROT_NONE). */
#define CORIO__STACK_MIN           ((size_t)16384)
#define CORIO__STACK_MAX           ((size_t)1 << 30)
#define CORIO__STACK_GUARD_DEFAULT (64u * 1024)
#define CORIO__STACK_GUARD_MAX     (16u << 20)
/* Sizes, guard and cache from the config (sizes rounded up to a page here,
 * once, so the cache compares like with like). 0 or -ENOMEM. */
int corio__stack_init(struct corio__shard *s, const struct corio_config *cfg);
/* A validated stack size rounded up to a page; 0 stays 0 (the default). */
size_t corio__stack_round(size_t size);
int corio__stack_get(struct corio__shard *s, struct corio_fiber *f);
void corio__stack_put(struct corio__shard *s, struct corio_fiber *f);
void corio__stack_cache_free(struct corio__shard *s);
void corio__overflow_handler_install(void);
int corio__altstack_init(struct corio__shard *s);
void corio__altstack_fini(struct corio__shard *s);

/* Leak census (core/census.c): in corio_wait(), after every shard thread
 * ended, check that stacks, op records, link slots and each part's pools
 * came back. 0, or -EBUSY with corio_last_error() naming shard and leak. */
int corio__census(struct corio_rt *rt);

/* ---- fiber pool (core/fiber.c) ------------------------------------------- */
void corio__fiber_pool_free(struct corio__shard *s);
/* After a fiber ended and the scheduler is back on its own stack. */
void corio__fiber_reap(struct corio__shard *s, struct corio_fiber *f);
/* Run the fibers that are ready as the turn begins (at most run_budget),
 * on the loop; true when one ran past stall_ns (it has been reported). */
bool corio__run_fibers(struct corio__shard *s);

/* ---- the loop and the runtime (core/loop.c, core/rt.c, core/stats.c) ------- */
/* Start a runtime whose shards run the parts of table parts[CORIO__PART_MAX]
 * (ctl/ctl.c hands it over: corio_start). Otherwise as corio_start(). */
int corio__rt_start(const struct corio_config *cfg, const struct corio__part *const *parts,
		    void (*entry)(void *), void *arg, struct corio_rt **out);
/* Raise rt->stopping once and wake every shard; any thread. */
void corio__rt_stop(struct corio_rt *rt);
/* Write s's wake-up eventfd (a sleeping shard wakes); any thread. */
void corio__shard_wake(struct corio__shard *s);
/* Arm the shard's wake-up read; on the shard, before its loop. */
void corio__wakeup_arm(struct corio__shard *s);
/* The shard loop; returns once the shard has stopped and drained. */
void corio__loop(struct corio__shard *s);
/* Call after fibers_live changed: tracks whether any shard has fibers. */
void corio__shard_busy(struct corio__shard *s);
/* Stall reporting: set up from the config at shard start; report that f
 * (NULL: the loop's own callbacks) ran ns without giving the CPU back, on
 * stderr, rate-limited to one line per shard per second, and count it. */
/* 0, or -EINVAL with the reason in s->err (a bad CORIO_STATS_TEST). */
int corio__loopstat_init(struct corio__shard *s);
/* A fiber (f) or a loop turn (f NULL) took wall_ns (+- slack_ns, the
 * clock's resolution), about stall_ns or more: read the thread's CPU clock
 * and report a stall when it ran past stall_ns on CPU, an off-CPU line when
 * the wall time surely passed stall_ns but the CPU time did not
 * (rate-limited, to the log hook). Refreshes the on-CPU baseline. True
 * when either was due (the fiber answers for its turn's time), false when
 * the wall time did not surely pass stall_ns after all (an early trip). */
bool corio__stall_report(struct corio__shard *s, const struct corio_fiber *f, uint64_t wall_ns,
			 uint64_t slack_ns);
/* Take a new on-CPU baseline (the thread's CPU clock: a system call). */
void corio__cpu_base(struct corio__shard *s);
/* As the shard ends: keep its thread's CPU time for corio_stats_get. */
void corio__stats_cpu_final(struct corio__shard *s);
/* A daemon fiber (the control server) counts in fibers_live but does not
 * keep the runtime running: call right after spawning it, and once more
 * (delta -1) when it is about to end. */
void corio__daemon_add(struct corio__shard *s, int delta);

/* ---- the blocking-work pool (core/work.c) ---------------------------------- */
struct corio__pool;
/* In corio_start(), on the starting thread: the pool's queue, no thread yet;
 * mask is the affinity its threads get. 0 or -ENOMEM. */
int corio__pool_new(struct corio_rt *rt, const cpu_set_t *mask);
/* In corio_wait(), after every shard thread ended: wait for running jobs,
 * release abandoned ones. Then corio__pool_free(). */
void corio__pool_stop(struct corio_rt *rt);
void corio__pool_free(struct corio_rt *rt);
/* corio_work(); with wait_for_fn the fiber waits for fn however it is
 * cancelled or its deadline passes (fn may use the caller's memory until it
 * returns: the file calls' blocking fallback). */
int corio__work_run(intptr_t (*fn)(void *), void *arg, void (*release)(void *),
		    intptr_t *result, bool wait_for_fn);
/* fn(arg) on a pool thread, the fiber waiting for it however it is
 * cancelled (corio__work_run with wait_for_fn), or here on the shard when
 * the pool's queue is full or no thread can be had. 0 and *result, or
 * -errno before fn ran (cancelled, past the deadline, off a fiber). */
int corio__work_or_here(intptr_t (*fn)(void *), void *arg, intptr_t *result);

/* ---- file reads and writes at an offset (core/fileio.c) --------------------- */
/* One read or write of a file, described once for every caller (fs's
 * calls, net's file copies). */
struct corio__file_rw {
	const char *who;   /* the public call, for messages */
	uint8_t opcode;    /* IORING_OP_READ, _WRITE, _READV or _WRITEV */
	int fd;
	const void *addr;  /* the buffer, or the iovec array */
	uint32_t len;      /* bytes (at most CORIO_FS_MAX_RW), or iovecs */
	uint64_t off;      /* the offset, or CORIO_OFF_CUR: the file position */
	unsigned flags;    /* CORIO__RW_* */
	bool blocking;     /* out: the syscall ran (on the pool or the shard) */
};
#define CORIO__RW_CACHED_FIRST 0x1u /* a read at an offset first tries
                                       preadv2(RWF_NOWAIT) on the spot */
#define CORIO__RW_BLOCKING     0x2u /* the pool although the ring has the op
                                       (CORIO_FS_SYNC) */
/* The ring's op where the probe has it (and CORIO__RW_BLOCKING is not
 * asked), else the syscall on the blocking-work pool (on the shard when its
 * queue is full). The count (0 at end of file) or -errno. Blocking. */
int64_t corio__file_rw(struct corio__file_rw *q);
/* One read of fd at off into buf: a page-cache hit on the spot, else
 * corio__file_rw (the ring, else the pool). The count (0 at the end of the
 * file) or -errno; who names the public call for messages. Blocking. */
ssize_t corio__file_read(int fd, void *buf, size_t len, off_t off, const char *who);

#endif
