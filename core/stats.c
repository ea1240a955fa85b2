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

static void calibrate(void)
{
	char why[8];
	unsigned env = clock_choice(why, sizeof(why)); /* checked by corio__tick_calibrate */

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

int corio__loopstat_init(struct corio__shard *s)
{
	static const char *const test_words[] = { "read_gap", NULL };
	struct corio__loopstat *sp = &s->ls;
	uint64_t stall_ns = s->rt->cfg.stall_ns;
	unsigned test = UINT32_MAX;
	struct timespec res;

	if (corio__env_choice("CORIO_STATS_TEST", test_words, &test, s->err, sizeof(s->err)) < 0)
		return -EINVAL;
	sp->read_gap = test == 0;
	sp->stall_ticks = stall_ns ? corio__ns_ticks(stall_ns) : UINT64_MAX;
	sp->stall_coarse = stall_ns && !clock_getres(CLOCK_MONOTONIC_COARSE, &res) &&
			   stall_ns >= 4 * corio__ts_ns(&res);
	return 0;
}

void corio__daemon_add(struct corio__shard *s, int delta)
{
	s->ls.daemons += (uint64_t)(int64_t)delta;
	corio__shard_busy(s);
}

void corio__stall_report(struct corio__shard *s, const struct corio_fiber *f, uint64_t ns)
{
	struct corio__loopstat *sp = &s->ls;
	uint64_t now = corio_now_ns();
	char line[300];
	int n;

	CORIO__STAT_ADD(s->stats.stalls, 1);
	if (now < sp->warn_after) {
		sp->suppressed++;
		return;
	}
	sp->warn_after = now + 1000000000ull; /* one report per second per shard */
	if (f)
		n = snprintf(line, sizeof(line),
			     "corio: stall: shard %u (cpu %d) ran fiber %llu '%s' for %.3f ms "
			     "without yielding (stall_ns %.3f ms)",
			     s->id, s->cpu, (unsigned long long)f->id, f->name[0] ? f->name : "?",
			     (double)ns / 1e6, (double)s->rt->cfg.stall_ns / 1e6);
	else
		n = snprintf(line, sizeof(line),
			     "corio: stall: shard %u (cpu %d) spent %.3f ms in one loop turn "
			     "outside fibers (message, timer or completion callbacks; stall_ns %.3f ms)",
			     s->id, s->cpu, (double)ns / 1e6, (double)s->rt->cfg.stall_ns / 1e6);
	if (n > 0 && (size_t)n < sizeof(line) && sp->suppressed)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "; %llu more not reported",
			      (unsigned long long)sp->suppressed);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	sp->suppressed = 0;
	/* one write: the line is not interleaved with other threads' output */
	if (write(2, line, (size_t)n) < 0) {
		/* nothing to do: stderr is gone */
	}
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

/* The CPU time of a thread, 0 when the clock cannot be read. */
static uint64_t thread_cpu_ns(clockid_t cid)
{
	struct timespec ts;

	return clock_gettime(cid, &ts) ? 0 : corio__ts_ns(&ts);
}

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
	if (s != corio__tl_shard) {
		/* An idle period in progress (the shard may be blocked for
		 * hours): count it up to now. Read after idle_ns, see loop.c. */
		uint64_t idle = __atomic_load_n(&s->stats.idle_ns, __ATOMIC_ACQUIRE);
		uint64_t from, now;

		if (s->ls.read_gap)
			usleep(50);
		from = __atomic_load_n(&s->ls.idle_from, __ATOMIC_ACQUIRE);
		now = corio__tick();
		out->idle_ns = idle;
		if (from && now > from)
			out->idle_ns += corio__ticks_ns(now - from);
	}
	idle_monotonic(&s->ls.idle_shown, &out->idle_ns);
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
