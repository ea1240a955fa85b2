/* SPDX-License-Identifier: MIT */
/*
 * core/stats.c - core's own counters: the cheap tick clock the loop times
 * itself with, the stall detector, daemon fibers, and corio_stats_get().
 * Rendering every area's counters (JSON, Prometheus) is ctl/'s.
 */
#include "core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- tick clock -------------------------------------------------------------- */

struct corio__tick_cal corio__tick_cal = { .tsc = 0, .mult = 1ull << 32 };
static pthread_once_t cal_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
#include <cpuid.h>

static bool tsc_usable(void)
{
	unsigned a, b, c, d;

	/* CPUID 0x80000007 EDX bit 8: invariant TSC (constant rate, runs in
	 * every C-state). Without it rdtsc cannot time anything. */
	if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000007u)
		return false;
	__cpuid(0x80000007u, a, b, c, d);
	(void)a;
	(void)b;
	(void)c;
	return d & (1u << 8);
}
#endif

#if defined(__x86_64__)
/*
 * One (CLOCK_MONOTONIC, TSC) pair, read as close together as the machine
 * allows: the clock between two TSC reads, the tightest bracket of 8 tries.
 * A single try can be cut by a preemption between its reads (a VM's vCPU
 * descheduled for milliseconds): the rate was then off by that much over
 * the 200 us window, and every busy/idle/turn figure with it (seen: idle
 * time 3x the wall time). CORIO_CLOCK=test_preempt sleeps 2 ms inside the
 * first try, as such a preemption would (a test hook).
 */
static void cal_pair(uint64_t *ns, uint64_t *tsc, bool preempt)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < 8; i++) {
		uint64_t a = __rdtsc(), t = corio_now_ns(), b;

		if (preempt && i == 0)
			usleep(2000);
		b = __rdtsc();
		if (b - a < best) {
			best = b - a;
			*ns = t;
			*tsc = a + (b - a) / 2;
		}
	}
}
#endif

/* CORIO_CLOCK: the default (unset) calibrates the TSC where usable. */
enum { CLOCK_MONOTONIC_ONLY, CLOCK_TEST_PREEMPT, CLOCK_TSC };
static const char *const clock_words[] = { "monotonic", "test_preempt", NULL };

static unsigned clock_choice(char *err, size_t len)
{
	unsigned c = CLOCK_TSC;

	return corio__env_choice("CORIO_CLOCK", clock_words, &c, err, len) < 0 ? UINT32_MAX : c;
}

static void calibrate_clock(unsigned env);

/*
 * The histogram bucket of a duration in ticks, without turning it into ns
 * (corio__tick_bucket): a tick octave [2^e, 2^(e+1)) spans one octave of
 * ns, which holds at most one bucket boundary. hb[e] is the bucket of its
 * first tick, ht[e] the first tick of the octave in the next bucket
 * (UINT64_MAX: none). Exact: ht is found against corio__ticks_ns itself.
 */
static void bucket_table(void)
{
	struct corio__tick_cal *c = &corio__tick_cal;

	for (unsigned e = 0; e < 64; e++) {
		uint64_t lo = 1ull << e, hi = e == 63 ? UINT64_MAX : (lo << 1) - 1, t;
		unsigned b = corio__hist_bucket(corio__ticks_ns(lo));
		uint64_t edge;

		c->hb[e] = (uint8_t)b;
		c->ht[e] = UINT64_MAX;
		if (b >= CORIO_STATS_HIST_BUCKETS - 1)
			continue;
		edge = 1ull << (b + 8); /* the first ns of bucket b + 1 */
		if (corio__ticks_ns(hi) < edge)
			continue;
		/* the least t in [lo, hi] with ticks_ns(t) >= edge */
		t = lo;
		for (uint64_t z = hi; t < z;) {
			uint64_t m = t + (z - t) / 2;

			if (corio__ticks_ns(m) >= edge)
				z = m;
			else
				t = m + 1;
		}
		c->ht[e] = t;
	}
}

static void calibrate(void)
{
	char why[8];
	unsigned env = clock_choice(why, sizeof(why)); /* checked by corio__tick_calibrate */

	calibrate_clock(env);
	bucket_table();
}

static void calibrate_clock(unsigned env)
{
	if (env == CLOCK_MONOTONIC_ONLY)
		return;
#if defined(__x86_64__)
	if (tsc_usable()) {
		/* Count ticks over 200 us of CLOCK_MONOTONIC between two tight
		 * pairs: their jitter (~50 ns) makes the rate good to ~0.03%, and
		 * a preemption between the pairs moves both clocks alike. */
		bool preempt = env == CLOCK_TEST_PREEMPT;
		uint64_t t0, c0, t1, c1;

		cal_pair(&t0, &c0, preempt);
		do
			cal_pair(&t1, &c1, false);
		while (t1 - t0 < 200000);
		if (c1 > c0) {
			corio__tick_cal.mult = (uint64_t)(((unsigned __int128)(t1 - t0) << 32) / (c1 - c0));
			corio__tick_cal.tsc = corio__tick_cal.mult != 0;
		}
	}
#elif defined(__aarch64__)
	{
		uint64_t freq;

		__asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(freq));
		if (freq) {
			corio__tick_cal.mult = (uint64_t)((1000000000ull << 32) / freq);
			corio__tick_cal.tsc = 1;
		}
	}
#endif
}

int corio__tick_calibrate(void)
{
	char why[200];

	if (clock_choice(why, sizeof(why)) == UINT32_MAX)
		return corio__error(-EINVAL, "corio_start: %s", why);
	pthread_once(&cal_once, calibrate);
	return 0;
}

/* ---- stalls and daemons ------------------------------------------------------- */

/* The CPU time of a thread, 0 when the clock cannot be read. */
static uint64_t thread_cpu_ns(clockid_t cid)
{
	struct timespec ts;

	return clock_gettime(cid, &ts) ? 0 : corio__ts_ns(&ts);
}

/*
 * CORIO_STATS_TEST (test hooks): read_gap widens a reader's race (see
 * corio__loopstat.read_gap); setup_log says one line while the shard sets
 * up, before any part has started, so that a log hook on the shard's
 * thread can see what the stats getters answer then (DESIGN's rule).
 */
static int stats_test_env(struct corio__shard *s)
{
	static const char *const test_words[] = { "read_gap", "setup_log", NULL };
	unsigned test = UINT32_MAX;

	if (corio__env_choice("CORIO_STATS_TEST", test_words, &test, s->err, sizeof(s->err)) < 0)
		return -EINVAL;
	s->ls.read_gap = test == 0;
	if (test == 1)
		corio__log("corio: shard %u: CORIO_STATS_TEST=setup_log: no part started yet",
			   s->id);
	return 0;
}

int corio__loopstat_init(struct corio__shard *s)
{
	struct corio__loopstat *sp = &s->ls;
	uint64_t stall_ns = s->rt->cfg.stall_ns;

	if (stats_test_env(s) < 0)
		return -EINVAL;
	sp->stall_ticks = stall_ns ? corio__ns_ticks(stall_ns) : UINT64_MAX;
	sp->refresh_ticks = stall_ns ? corio__ns_ticks(stall_ns / 4) : UINT64_MAX;
	if (stall_ns)
		corio__cpu_base(s);
	return 0;
}

void corio__cpu_base(struct corio__shard *s)
{
	struct corio__loopstat *sp = &s->ls;

	sp->cpu_base = thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID);
	sp->base_ns = corio_now_ns();
	sp->base_tick = corio__tick();
	sp->base_blocked = sp->blocked_t;
}

void corio__daemon_add(struct corio__shard *s, int delta)
{
	s->ls.daemons += (uint64_t)(int64_t)delta;
	corio__shard_busy(s);
}

/*
 * How much of the wall time that just ended (wall_ns, give or take slack_ns)
 * the thread ran on CPU: a lower bound. The CPU used since the baseline,
 * less what can have been used between the baseline and the latest
 * possible start (that wall time, minus the loop's blocking enters in it,
 * which are off CPU). Exact when the thread was not preempted between the
 * baseline and the start; short by at most that preemption otherwise, and
 * the baseline is never older than stall_ns / 4 at a turn's start. A report
 * therefore never claims more than ran.
 */
static uint64_t on_cpu_ns(struct corio__shard *s, uint64_t wall_ns, uint64_t slack_ns)
{
	struct corio__loopstat *sp = &s->ls;
	uint64_t cpu = thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID), now = corio_now_ns();
	uint64_t shortest = wall_ns > slack_ns ? wall_ns - slack_ns : 0;
	uint64_t start = now > shortest ? now - shortest : 0, blocked, before = 0, used, on;

	if (!cpu || !sp->cpu_base)
		return wall_ns; /* no CPU clock: wall time is all there is */
	used = cpu - sp->cpu_base;
	blocked = corio__ticks_ns(sp->blocked_t - sp->base_blocked);
	if (start > sp->base_ns)
		before = start - sp->base_ns;
	before = before > blocked ? before - blocked : 0;
	on = used > before ? used - before : 0;
	sp->cpu_base = cpu;
	sp->base_ns = now;
	sp->base_tick = corio__tick();
	sp->base_blocked = sp->blocked_t;
	return on < wall_ns + slack_ns ? on : wall_ns + slack_ns;
}

/* Rate limit: one line per second per shard and kind; the rest counted. */
static bool log_due(uint64_t *after, uint64_t *suppressed, uint64_t *shown)
{
	uint64_t now = corio_now_ns();

	if (now < *after) {
		++*suppressed;
		return false;
	}
	*after = now + CORIO__NS_PER_S;
	*shown = *suppressed;
	*suppressed = 0;
	return true;
}

bool corio__stall_report(struct corio__shard *s, const struct corio_fiber *f, uint64_t wall_ns,
			 uint64_t slack_ns)
{
	struct corio__loopstat *sp = &s->ls;
	uint64_t on = on_cpu_ns(s, wall_ns, slack_ns), off = wall_ns > on ? wall_ns - on : 0, more;
	double lim = (double)s->rt->cfg.stall_ns / 1e6;
	char who[80], tail[64] = "";

	if (f)
		snprintf(who, sizeof(who), "fiber %llu '%s'", (unsigned long long)f->id,
			 f->name[0] ? f->name : "?");
	else
		snprintf(who, sizeof(who), "one loop turn outside fibers");
	if (on > s->rt->cfg.stall_ns) {
		CORIO__STAT_ADD(s->stats.stalls, 1);
		if (!log_due(&sp->warn_after, &sp->suppressed, &more))
			return true;
		if (more)
			snprintf(tail, sizeof(tail), "; %llu more not reported", (unsigned long long)more);
		if (f)
			corio__log("corio: stall: shard %u (cpu %d) ran %s for %.3f ms on CPU without "
				   "yielding (%.3f ms more descheduled; stall_ns %.3f ms)%s",
				   s->id, s->cpu, who, (double)on / 1e6, (double)off / 1e6, lim, tail);
		else
			corio__log("corio: stall: shard %u (cpu %d) spent %.3f ms on CPU in %s "
				   "(message, timer or completion callbacks; %.3f ms more descheduled; "
				   "stall_ns %.3f ms)%s",
				   s->id, s->cpu, (double)on / 1e6, who, (double)off / 1e6, lim, tail);
		return true;
	}
	/* Past stall_ns in wall time but not on CPU: the shard was held off
	 * its CPU (preempted, or a fiber blocked in a system call outside the
	 * ring). Not a stall of the code that ran, but worth a line - when the
	 * wall time surely passed stall_ns. */
	if (wall_ns < s->rt->cfg.stall_ns + slack_ns)
		return false;
	if (!log_due(&sp->offcpu_after, &sp->offcpu_suppressed, &more))
		return true;
	if (more)
		snprintf(tail, sizeof(tail), "; %llu more not reported", (unsigned long long)more);
	corio__log("corio: off-cpu: shard %u (cpu %d) %s took %.3f ms, %.3f ms of it on CPU and "
		   "%.3f ms descheduled (a blocking system call outside the ring, or the thread "
		   "preempted; stall_ns %.3f ms)%s",
		   s->id, s->cpu, who, (double)wall_ns / 1e6, (double)on / 1e6, (double)off / 1e6, lim,
		   tail);
	return true;
}

uint64_t corio_stats_hist_bucket_ns(unsigned b)
{
	if (b >= CORIO_STATS_HIST_BUCKETS - 1)
		return UINT64_MAX;
	return 1ull << (b + 8);
}

/*
 * The CPU clock of thread tid, as the kernel encodes it (the encoding glibc's
 * pthread_getcpuclockid returns: per-thread, the scheduler's clock). From the
 * TID, not the pthread_t: corio_wait may join (and free the descriptor of) an
 * ended shard while another shard still reads its stats. A thread that has
 * ended makes the read fail (EINVAL), and the reader takes the final value.
 */
#define TID_CPU_CLOCK(tid) ((clockid_t)((~(unsigned)(tid) << 3) | 4 | 2))

/* A shard stores its thread's CPU time once, as it ends; until then the
 * readers ask the kernel for the thread's clock. */
void corio__stats_cpu_final(struct corio__shard *s)
{
	__atomic_store_n(&s->stats.cpu_ns, thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID),
			 __ATOMIC_RELEASE);
}

/* Never hand out less idle time than a reader was given before: raise
 * *idle to the largest value shown, or record it as the new largest. */
static void idle_monotonic(uint64_t *shown, uint64_t *idle)
{
	uint64_t seen = __atomic_load_n(shown, __ATOMIC_RELAXED);

	while (seen < *idle &&
	       !__atomic_compare_exchange_n(shown, &seen, *idle, true, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED))
		;
	if (seen > *idle)
		*idle = seen;
}

int corio_stats_get(struct corio_rt *rt, unsigned shard, struct corio_stats *out)
{
	struct corio__shard *s;

	rt = corio__rt_or_own(rt);
	if (!rt)
		return corio__error(-EPERM, "corio_stats_get: rt is NULL off a shard");
	if (!out || shard >= rt->nshards)
		return corio__error(-EINVAL, "corio_stats_get: %s",
				    out ? "no such shard" : "out is NULL");
	s = rt->shards[shard];
	corio__stats_copy(out, &s->stats, sizeof(*out));
	/* the ring's own counters, read where the ring keeps them (relaxed
	 * atomics: uring/internal.h), not copied into stats every turn */
	out->enters = __atomic_load_n(&s->ring.cnt.enters, __ATOMIC_RELAXED);
	out->sqes = __atomic_load_n(&s->ring.cnt.sqes, __ATOMIC_RELAXED);
	out->cqes = __atomic_load_n(&s->ring.cnt.cqes, __ATOMIC_RELAXED);
	out->sq_full = __atomic_load_n(&s->ring.cnt.sq_full, __ATOMIC_RELAXED);
	out->cq_overflow = __atomic_load_n(&s->ring.cnt.cq_overflow, __ATOMIC_RELAXED);
	out->cqe_dropped = __atomic_load_n(&s->ring.cnt.cqe_dropped, __ATOMIC_RELAXED);
	{
		uint64_t busy = __atomic_load_n(&s->ls.busy_t, __ATOMIC_RELAXED);
		uint64_t sub = __atomic_load_n(&s->ls.submit_t, __ATOMIC_RELAXED);

		out->busy_ns = corio__ticks_ns(busy);
		out->gap_ns = corio__ticks_ns(busy > sub ? busy - sub : 0);
	}
	/* Every turn is in turn_hist once (the loop's account()), so the
	 * turns are its sum: no counter of their own in the loop. */
	out->loop_turns = 0;
	for (unsigned b = 0; b < CORIO_STATS_HIST_BUCKETS; b++) {
		uint64_t same = __atomic_load_n(&s->ls.same_hist[b], __ATOMIC_RELAXED);

		out->turn_hist[b] = same + __atomic_load_n(&s->ls.turn_hist[b], __ATOMIC_RELAXED);
		out->gap_hist[b] = same + __atomic_load_n(&s->ls.gap_hist[b], __ATOMIC_RELAXED);
		out->loop_turns += out->turn_hist[b];
	}
	out->turn_max_ns = corio__ticks_ns(__atomic_load_n(&s->ls.turn_max_t, __ATOMIC_RELAXED));
	out->gap_max_ns = corio__ticks_ns(__atomic_load_n(&s->ls.gap_max_t, __ATOMIC_RELAXED));
	/* Kept in ticks by the loop (core/loop.c). */
	out->idle_ns = corio__ticks_ns(__atomic_load_n(&s->ls.idle_t, __ATOMIC_ACQUIRE));
	if (s != corio__tl_shard) {
		/* An idle period in progress (the shard may be blocked for
		 * hours): count it up to now. Read after idle_t, see loop.c. */
		uint64_t from, now;

		if (s->ls.read_gap)
			usleep(50);
		from = __atomic_load_n(&s->ls.idle_from, __ATOMIC_ACQUIRE);
		now = corio__tick();
		if (from && now > from)
			out->idle_ns += corio__ticks_ns(now - from);
	}
	idle_monotonic(&rt->idle_shown[shard], &out->idle_ns);
	if (!out->cpu_ns) {
		/* Still running: its thread's clock. Once it has ended, that
		 * read fails and the final value it stored is there. */
		if (s == corio__tl_shard)
			out->cpu_ns = thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID);
		else if (s->tid > 0)
			out->cpu_ns = thread_cpu_ns(TID_CPU_CLOCK(s->tid));
		if (!out->cpu_ns)
			out->cpu_ns = __atomic_load_n(&s->stats.cpu_ns, __ATOMIC_ACQUIRE);
	}
	return 0;
}
