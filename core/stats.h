/* SPDX-License-Identifier: MIT */
/*
 * core/stats.h - the stats part of a shard (core/stats.c) and the cheap
 * tick clock the loop times itself with. Not installed.
 *
 * The loop (core/shard.c) reads the clock once per busy turn and twice per
 * idle turn (around the blocking enter), so the clock must be cheap: on
 * x86-64 with an invariant TSC it is rdtsc (~10 ns here, against ~24 ns for
 * clock_gettime through the vDSO), on aarch64 the virtual counter; anywhere
 * else, and when CORIO_CLOCK=monotonic is set, CLOCK_MONOTONIC. Ticks are
 * only ever subtracted from ticks read on the same shard and turned into
 * nanoseconds with corio__ticks_ns(). The calibration is done once per
 * process and never changes afterwards.
 */
#ifndef CORIO_CORE_STATS_H
#define CORIO_CORE_STATS_H

#include "core/internal.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

struct corio__tick_cal {
	int tsc;       /* 1: rdtsc / cntvct; 0: CLOCK_MONOTONIC ns */
	uint64_t mult; /* ns = ticks * mult >> 32 */
};
extern struct corio__tick_cal corio__tick_cal;
void corio__tick_calibrate(void); /* idempotent, thread-safe */

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

struct corio__control;

/* s->parts[CORIO__PART_STATS] */
struct corio__stats_part {
	uint64_t last_poll;   /* tick: the loop's last look at the ring          */
	uint64_t stall_ticks; /* config stall_ns in ticks; UINT64_MAX: off        */
	/* Per-fiber stall timing reads CLOCK_MONOTONIC_COARSE (~3 ns here, vs
	 * ~10 ns for rdtsc in this VM) when stall_ns is at least 4 of its
	 * resolution (a jiffy); else the tick clock. */
	bool stall_coarse;
	uint64_t warn_after;  /* ns: no warning before this (rate limit)          */
	uint64_t suppressed;  /* warnings not printed since the last one          */
	uint64_t daemons;     /* live fibers that do not keep the runtime running */
	struct corio__control *ctl; /* shard 0 with a control_path: the server    */
};

static inline struct corio__stats_part *corio__stats_part(struct corio__shard *s)
{
	return (struct corio__stats_part *)s->parts[CORIO__PART_STATS];
}

/* Report a stall on stderr (rate-limited) and count it. f: the fiber that ran
 * for ns without giving the CPU back, or NULL when the time went to the
 * loop's own callbacks (messages, timers, completions). */
void corio__stall_report(struct corio__shard *s, const struct corio_fiber *f, uint64_t ns);

/* A daemon fiber (the control server) counts in fibers_live but does not
 * keep the runtime running: call right after spawning it, and once more
 * when it is about to end. */
void corio__daemon_add(struct corio__shard *s, int delta);

/* core/control.c: the control socket on shard 0. */
int corio__control_start(struct corio__shard *s, const char *path);
void corio__control_fini(struct corio__shard *s);

#endif
