/* SPDX-License-Identifier: MIT */
/*
 * bench-timer - corio's timers against the two designs it could have had:
 *
 *   corio        the library: per-shard 4-ary heap, one timeout SQE armed
 *                for the earliest deadline (public API only)
 *   sqe/timer    one IORING_OP_TIMEOUT per timer, cancelled with
 *                IORING_OP_TIMEOUT_REMOVE, on a bare liburing ring set up
 *                like corio's (SINGLE_ISSUER|DEFER_TASKRUN): the lower bound
 *                of that design, with no runtime around it
 *   timerfd      what a C programmer writes without io_uring: a binary
 *                min-heap, one timerfd (absolute, CLOCK_MONOTONIC) armed for
 *                the earliest deadline, epoll_wait
 *
 * Everything runs on one CPU (the last one in the affinity mask), one
 * contender at a time, in the order corio, sqe/timer, timerfd for each case.
 *
 *   arm+cancel   pairs per second: arm a timer at a random deadline
 *                (uniform in 1..20 s) and cancel it, with 0 / 1k / 100k
 *                other timers armed (also uniform in 1..20 s)
 *   1M timers    time to arm 1M timers, and the memory they take: RSS growth
 *                for corio and timerfd (timer structs + heap), kernel slab
 *                growth for sqe/timer (its timers live in the kernel)
 *   lateness     P timers armed (1k, 100k), each re-armed on expiry at
 *                now + uniform(0, W), W chosen for ~10k expirations/s;
 *                lateness = clock read in the expiry handler - deadline;
 *                p50/p99/p99.9/max over LAT_SECONDS
 *   busy shard   a fiber sleeps 5 ms again and again while two other fibers
 *                of its shard yield in a loop (the loop never blocks):
 *                lateness = wake-up - deadline, p50/p99/max, on io_uring
 *                and on the epoll fallback side by side (each where it runs)
 *
 *   bench-timer [--quick] [--busy]   (--quick: shorter runs, for CI smoke
 *                                     tests; --busy: the busy-shard rows only)
 */
#include <corio.h>

#include "common/backend.h"
#include "common/opt.h"
#include "common/timing.h"

#include <errno.h>
#include <liburing.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/timerfd.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ull
#define SEC 1000000000ull

static int quick;
static int busy_only; /* --busy: the busy-shard rows alone */
static int cpu = -1;
static double lat_seconds = 1.5;

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;
static inline uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static long rss_kib(void)
{
	long pages = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &res) != 2)
			res = 0;
		fclose(f);
	}
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static long meminfo_kib(const char *key)
{
	char line[256];
	long v = -1;
	size_t n = strlen(key);
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = atol(line + n + 1);
			break;
		}
	fclose(f);
	return v;
}

/*
 * io_uring_queue_exit() returns at once; the kernel then cancels the ring's
 * requests in a kworker, which may run on our CPU. Wait (at most 10 s) for
 * the slab to shrink back, so the next contender is not charged for it.
 * Returns the seconds waited. Slab is a system-wide figure: the margin
 * absorbs other processes.
 */
static double settle(long slab0)
{
	uint64_t t0 = now_ns();

	while (now_ns() - t0 < 10 * SEC && meminfo_kib("Slab") > slab0 + 4096)
		usleep(1000);
	return (double)(now_ns() - t0) / 1e9;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct lat {
	uint64_t *v;
	size_t n, cap;
};

/* Expirations of deadlines before this are not sampled: they fell due while
 * the contender was still arming its P timers (arming is measured apart). */
static uint64_t measure_from;

static inline void lat_add(struct lat *l, uint64_t deadline, uint64_t now)
{
	if (deadline >= measure_from && l->n < l->cap)
		l->v[l->n++] = now - deadline;
}

static double lat_q(const struct lat *l, double q)
{
	size_t i;

	if (!l->n)
		return 0;
	i = (size_t)(q * (double)(l->n - 1));
	return (double)l->v[i] / 1000.0;
}

/* Window W so that P timers re-armed at now + U(0, W) expire ~10k times/s. */
static uint64_t window_for(unsigned p)
{
	return (uint64_t)p * 2 * SEC / 10000;
}

/* ================================================================= corio == */

struct ctimer {
	struct corio_timer t;
	uint64_t deadline;
};

struct cjob {
	int kind; /* 0 arm+cancel, 1 one million, 2 lateness, 3 sleeps beside yielders */
	enum corio_idle idle;
	enum corio_backend backend; /* AUTO: CORIO_BACKEND decides */
	volatile bool stop;        /* kind 3: the yielders end */
	uint64_t turns;            /* kind 3: loop turns while measuring */
	double on_cpu;             /* kind 3: the shard's CPU time / wall time */
	unsigned bg, p;
	uint64_t pairs;
	double rate, arm_s, cancel_s;
	long rss_kib;
	struct lat lat;
	uint64_t window, end;
	struct corio_timer_stats st;
	unsigned long long ring_flags;
};

static struct cjob *cj;

static void lat_cb(struct corio_timer *t, void *arg, int res)
{
	struct ctimer *c = (struct ctimer *)t;
	uint64_t now = corio_now_ns();

	(void)arg;
	if (res < 0)
		return;
	lat_add(&cj->lat, c->deadline, now);
	if (now >= cj->end)
		return;
	c->deadline = now + rnd() % cj->window;
	corio_timer_arm(t, c->deadline, 0);
}

/* kind 3: a fiber that only yields, until the sleeper is done */
static int yielder(void *arg)
{
	struct cjob *j = arg;

	while (!j->stop)
		corio_yield();
	return 0;
}

#define BUSY_SLEEP_NS (5 * MS)

/* kind 3: 5 ms sleeps beside two yielding fibers, for lat_seconds */
static void busy_sleeps(struct cjob *j)
{
	struct corio_fiber *y[2];
	struct corio_stats a, b;
	uint64_t t0 = corio_now_ns(), end = t0 + tool_s_to_ns(lat_seconds);

	measure_from = 0;
	corio_stats_get(NULL, 0, &a);
	for (int i = 0; i < 2; i++)
		if (corio_spawn(yielder, j, NULL, &y[i]))
			return;
	while (corio_now_ns() < end) {
		uint64_t d = corio_now_ns() + BUSY_SLEEP_NS;

		if (corio_sleep_until(d))
			break;
		lat_add(&j->lat, d, corio_now_ns());
	}
	corio_stats_get(NULL, 0, &b);
	j->turns = b.loop_turns - a.loop_turns;
	j->on_cpu = (double)(b.cpu_ns - a.cpu_ns) / (double)(corio_now_ns() - t0);
	j->stop = true;
	for (int i = 0; i < 2; i++)
		corio_join(y[i], NULL);
}

static void corio_entry(void *arg)
{
	struct cjob *j = arg;
	struct corio_stats ss;
	uint64_t base = corio_now_ns(), t0;

	corio_stats_get(NULL, 0, &ss);
	j->ring_flags = ss.ring_flags;
	if (j->kind == 0) {
		struct corio_timer *bg = calloc(j->bg ? j->bg : 1, sizeof(*bg));
		struct corio_timer *k = calloc(1024, sizeof(*k));

		for (unsigned i = 0; i < j->bg; i++)
			corio_timer_arm(&bg[i], base + SEC + rnd() % (19 * SEC), 0);
		t0 = corio_now_ns();
		for (uint64_t i = 0; i < j->pairs; i++) {
			struct corio_timer *t = &k[i & 1023];

			if (i >= 1024)
				corio_timer_cancel(t); /* armed 1024 pairs ago */
			corio_timer_arm(t, base + SEC + rnd() % (19 * SEC), 0);
		}
		j->rate = (double)j->pairs / ((double)(corio_now_ns() - t0) / 1e9);
		for (unsigned i = 0; i < 1024; i++)
			corio_timer_cancel(&k[i]);
		for (unsigned i = 0; i < j->bg; i++)
			corio_timer_cancel(&bg[i]);
		free(bg);
		free(k);
	} else if (j->kind == 1) {
		long r0 = rss_kib();
		struct corio_timer *t = malloc((size_t)j->p * sizeof(*t));

		t0 = corio_now_ns();
		for (unsigned i = 0; i < j->p; i++) {
			corio_timer_init(&t[i], NULL, NULL);
			corio_timer_arm(&t[i], base + 10 * SEC + rnd() % (10 * SEC), 0);
		}
		j->arm_s = (double)(corio_now_ns() - t0) / 1e9;
		j->rss_kib = rss_kib() - r0;
		corio_timer_stats_get(NULL, 0, &j->st);
		corio_yield(); /* one loop turn: the heap's timeout SQE goes out */
		t0 = corio_now_ns();
		for (unsigned i = 0; i < j->p; i++)
			corio_timer_cancel(&t[i]);
		j->cancel_s = (double)(corio_now_ns() - t0) / 1e9;
		free(t);
	} else if (j->kind == 3) {
		busy_sleeps(j);
	} else {
		struct ctimer *c = calloc(j->p, sizeof(*c));
		struct corio_timer_stats s0;

		corio_timer_stats_get(NULL, 0, &s0);
		j->end = base + 10 * MS + tool_s_to_ns(lat_seconds);
		for (unsigned i = 0; i < j->p; i++) {
			corio_timer_init(&c[i].t, lat_cb, NULL);
			c[i].deadline = base + 10 * MS + rnd() % j->window;
			corio_timer_arm(&c[i].t, c[i].deadline, 0);
		}
		measure_from = corio_now_ns() + MS;
		corio_sleep_until(j->end + MS);
		for (unsigned i = 0; i < j->p; i++)
			corio_timer_cancel(&c[i].t);
		corio_timer_stats_get(NULL, 0, &j->st);
		for (unsigned b = 0; b < CORIO_TIMER_HIST_BUCKETS; b++)
			j->st.lateness_hist[b] -= s0.lateness_hist[b];
		free(c);
	}
}

static int corio_job(struct cjob *j)
{
	struct corio_config cfg;

	corio_config_init(&cfg);
	cfg.stall_ns = 0; /* the benchmark loops in one fiber on purpose: no stall reports */
	cfg.shards = 1;
	cfg.cpus = &cpu;
	cfg.idle = j->idle;
	if (j->backend) {
		unsetenv("CORIO_BACKEND"); /* the config decides (one process, both backends) */
		cfg.backend = j->backend;
	}
	cj = j;
	return corio_run(&cfg, corio_entry, j);
}

/* ============================================================= sqe/timer == */

static int ring_setup(struct io_uring *r, unsigned entries)
{
	struct io_uring_params p;
	int ret;

	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	p.flags |= IORING_SETUP_CQSIZE;
	p.cq_entries = entries * 4;
	ret = io_uring_queue_init_params(entries, r, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_CQSIZE;
		p.cq_entries = entries * 4;
		ret = io_uring_queue_init_params(entries, r, &p);
	}
	return ret;
}

static void ts_of(struct __kernel_timespec *ts, uint64_t ns)
{
	ts->tv_sec = (long long)(ns / SEC);
	ts->tv_nsec = (long long)(ns % SEC);
}

static struct io_uring_sqe *get_sqe(struct io_uring *r)
{
	struct io_uring_sqe *sqe;

	while (!(sqe = io_uring_get_sqe(r)))
		io_uring_submit(r);
	return sqe;
}

static void drain_cqes(struct io_uring *r, unsigned want)
{
	struct io_uring_cqe *cqe;
	unsigned head, n;

	while (want) {
		io_uring_submit_and_wait(r, 1);
		n = 0;
		io_uring_for_each_cqe(r, head, cqe) n++;
		io_uring_cq_advance(r, n);
		want = n >= want ? 0 : want - n;
	}
}

/* Arm bg far timeouts (user_data 1..bg), kept in ts[]. */
static void sqe_background(struct io_uring *r, struct __kernel_timespec *ts, unsigned bg,
			   uint64_t base)
{
	for (unsigned i = 0; i < bg; i++) {
		struct io_uring_sqe *sqe = get_sqe(r);

		ts_of(&ts[i], base + SEC + rnd() % (19 * SEC));
		io_uring_prep_timeout(sqe, &ts[i], 0, IORING_TIMEOUT_ABS);
		io_uring_sqe_set_data64(sqe, 1 + i);
	}
	io_uring_submit(r);
}

static double sqe_arm_cancel(unsigned bg, uint64_t pairs, double max_s)
{
	struct io_uring r;
	struct __kernel_timespec *ts = calloc(bg + 64, sizeof(*ts));
	uint64_t base = now_ns(), t0, done = 0, deadline;
	long slab0 = meminfo_kib("Slab");

	if (ring_setup(&r, 4096) < 0)
		return -1;
	sqe_background(&r, ts, bg, base);
	t0 = now_ns();
	deadline = t0 + tool_s_to_ns(max_s);
	while (done < pairs) {
		for (unsigned i = 0; i < 64; i++) {
			struct io_uring_sqe *sqe = get_sqe(&r);
			uint64_t id = (1ull << 40) + i;

			ts_of(&ts[bg + i], base + SEC + rnd() % (19 * SEC));
			io_uring_prep_timeout(sqe, &ts[bg + i], 0, IORING_TIMEOUT_ABS);
			io_uring_sqe_set_data64(sqe, id);
			sqe = get_sqe(&r);
			io_uring_prep_timeout_remove(sqe, id, 0);
			io_uring_sqe_set_data64(sqe, 0);
		}
		drain_cqes(&r, 128);
		done += 64;
		if (now_ns() > deadline)
			break;
	}
	t0 = now_ns() - t0;
	io_uring_queue_exit(&r);
	settle(slab0);
	free(ts);
	return (double)done / ((double)t0 / 1e9);
}

static void sqe_million(unsigned n, double *arm_s, long *slab_kib, double *exit_s)
{
	struct io_uring r;
	struct __kernel_timespec *ts = calloc(n, sizeof(*ts));
	uint64_t base = now_ns(), t0;
	long s0;

	*arm_s = -1;
	if (ring_setup(&r, 4096) < 0)
		return;
	s0 = meminfo_kib("Slab");
	t0 = now_ns();
	sqe_background(&r, ts, n, base + 9 * SEC);
	*arm_s = (double)(now_ns() - t0) / 1e9;
	*slab_kib = meminfo_kib("Slab") - s0;
	t0 = now_ns();
	io_uring_queue_exit(&r);
	settle(s0);
	*exit_s = (double)(now_ns() - t0) / 1e9;
	free(ts);
}

static void sqe_lateness(unsigned p, struct lat *l)
{
	struct io_uring r;
	struct __kernel_timespec *ts = calloc(p, sizeof(*ts));
	uint64_t *dl = calloc(p, sizeof(*dl));
	uint64_t base = now_ns(), w = window_for(p), end;
	long slab0 = meminfo_kib("Slab");

	if (ring_setup(&r, 4096) < 0)
		return;
	end = base + 10 * MS + tool_s_to_ns(lat_seconds);
	for (unsigned i = 0; i < p; i++) {
		struct io_uring_sqe *sqe = get_sqe(&r);

		dl[i] = base + 10 * MS + rnd() % w;
		ts_of(&ts[i], dl[i]);
		io_uring_prep_timeout(sqe, &ts[i], 0, IORING_TIMEOUT_ABS);
		io_uring_sqe_set_data64(sqe, i);
	}
	io_uring_submit(&r);
	measure_from = now_ns() + MS;
	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		uint64_t now;

		io_uring_submit_and_wait(&r, 1);
		now = now_ns();
		io_uring_for_each_cqe(&r, head, cqe)
		{
			unsigned i = (unsigned)cqe->user_data;

			n++;
			if (cqe->res != -ETIME)
				continue;
			lat_add(l, dl[i], now);
			if (now < end) {
				struct io_uring_sqe *sqe = get_sqe(&r);

				dl[i] = now + rnd() % w;
				ts_of(&ts[i], dl[i]);
				io_uring_prep_timeout(sqe, &ts[i], 0, IORING_TIMEOUT_ABS);
				io_uring_sqe_set_data64(sqe, i);
			}
		}
		io_uring_cq_advance(&r, n);
		if (now >= end + MS)
			break;
	}
	io_uring_queue_exit(&r);
	settle(slab0);
	free(ts);
	free(dl);
}

/* =============================================================== timerfd == */

/* The baseline: a binary heap of timer pointers and a timerfd for its top. */
struct btimer {
	uint64_t deadline;
	uint32_t idx; /* heap slot + 1, 0 = not armed */
};

struct bheap {
	struct btimer **h;
	uint32_t n, cap;
	int tfd, epfd;
	uint64_t armed; /* what the timerfd is set to, 0 = disarmed */
};

static void bh_put(struct bheap *b, uint32_t i, struct btimer *t)
{
	b->h[i] = t;
	t->idx = i + 1;
}

static void bh_up(struct bheap *b, uint32_t i, struct btimer *t)
{
	while (i) {
		uint32_t p = (i - 1) / 2;

		if (b->h[p]->deadline <= t->deadline)
			break;
		bh_put(b, i, b->h[p]);
		i = p;
	}
	bh_put(b, i, t);
}

static void bh_down(struct bheap *b, uint32_t i, struct btimer *t)
{
	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= b->n)
			break;
		if (c + 1 < b->n && b->h[c + 1]->deadline < b->h[c]->deadline)
			c++;
		if (b->h[c]->deadline >= t->deadline)
			break;
		bh_put(b, i, b->h[c]);
		i = c;
	}
	bh_put(b, i, t);
}

static void bh_settimer(struct bheap *b, uint64_t at)
{
	struct itimerspec its = { 0 };

	its.it_value.tv_sec = (time_t)(at / SEC);
	its.it_value.tv_nsec = (long)(at % SEC);
	timerfd_settime(b->tfd, TFD_TIMER_ABSTIME, &its, NULL);
	b->armed = at;
}

static void bh_arm(struct bheap *b, struct btimer *t, uint64_t deadline)
{
	if (b->n == b->cap) {
		b->cap = b->cap ? b->cap * 2 : 1024;
		b->h = realloc(b->h, b->cap * sizeof(*b->h));
	}
	t->deadline = deadline;
	bh_up(b, b->n++, t);
	/* New earliest deadline: tell the kernel (one syscall). */
	if (b->h[0] == t && (!b->armed || deadline < b->armed))
		bh_settimer(b, deadline);
}

/* Lazy like corio: a later top only costs a spurious wake-up. */
static void bh_cancel(struct bheap *b, struct btimer *t)
{
	uint32_t i = t->idx - 1;
	struct btimer *last = b->h[--b->n];

	t->idx = 0;
	if (i == b->n)
		return;
	if (i && last->deadline < b->h[(i - 1) / 2]->deadline)
		bh_up(b, i, last);
	else
		bh_down(b, i, last);
}

static void bh_init(struct bheap *b)
{
	struct epoll_event ev = { .events = EPOLLIN };

	memset(b, 0, sizeof(*b));
	b->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	b->epfd = epoll_create1(EPOLL_CLOEXEC);
	epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->tfd, &ev);
}

static void bh_fini(struct bheap *b)
{
	close(b->tfd);
	close(b->epfd);
	free(b->h);
}

static double tfd_arm_cancel(unsigned bg, uint64_t pairs)
{
	struct bheap b;
	struct btimer *bt = calloc(bg ? bg : 1, sizeof(*bt)), *k = calloc(1024, sizeof(*k));
	uint64_t base = now_ns(), t0;

	bh_init(&b);
	for (unsigned i = 0; i < bg; i++)
		bh_arm(&b, &bt[i], base + SEC + rnd() % (19 * SEC));
	t0 = now_ns();
	for (uint64_t i = 0; i < pairs; i++) {
		struct btimer *t = &k[i & 1023];

		if (i >= 1024)
			bh_cancel(&b, t); /* armed 1024 pairs ago */
		bh_arm(&b, t, base + SEC + rnd() % (19 * SEC));
	}
	t0 = now_ns() - t0;
	bh_fini(&b);
	free(bt);
	free(k);
	return (double)pairs / ((double)t0 / 1e9);
}

static void tfd_million(unsigned n, double *arm_s, long *rss)
{
	struct bheap b;
	long r0 = rss_kib();
	struct btimer *t = malloc((size_t)n * sizeof(*t));
	uint64_t base = now_ns(), t0 = now_ns();

	bh_init(&b);
	for (unsigned i = 0; i < n; i++)
		bh_arm(&b, &t[i], base + 10 * SEC + rnd() % (10 * SEC));
	*arm_s = (double)(now_ns() - t0) / 1e9;
	*rss = rss_kib() - r0;
	bh_fini(&b);
	free(t);
}

static void tfd_lateness(unsigned p, struct lat *l)
{
	struct bheap b;
	struct btimer *t = calloc(p, sizeof(*t));
	uint64_t base = now_ns(), w = window_for(p), end;

	bh_init(&b);
	end = base + 10 * MS + tool_s_to_ns(lat_seconds);
	for (unsigned i = 0; i < p; i++)
		bh_arm(&b, &t[i], base + 10 * MS + rnd() % w);
	measure_from = now_ns() + MS;
	for (;;) {
		struct epoll_event ev;
		uint64_t ticks, now;
		unsigned budget = 4096;

		if (epoll_wait(b.epfd, &ev, 1, -1) < 1)
			continue;
		if (read(b.tfd, &ticks, sizeof(ticks)) < 0)
			continue;
		b.armed = 0;
		now = now_ns();
		while (b.n && b.h[0]->deadline <= now && budget--) {
			struct btimer *x = b.h[0];

			lat_add(l, x->deadline, now);
			bh_cancel(&b, x);
			if (now < end)
				bh_arm(&b, x, now + rnd() % w);
		}
		if (now >= end + MS)
			break;
		if (b.n && (!b.armed || b.h[0]->deadline < b.armed))
			bh_settimer(&b, b.h[0]->deadline);
	}
	bh_fini(&b);
	free(t);
}

/* ============================================================= nanosleep == */

/* The machine's floor: one thread sleeping to absolute deadlines with
 * clock_nanosleep (timer slack 1 ns), ~10k wake-ups/s. Any design that
 * blocks in the kernel between expirations pays at least this. */
static void nanosleep_lateness(struct lat *l)
{
	uint64_t end = now_ns() + tool_s_to_ns(lat_seconds);

	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	measure_from = 0;
	for (uint64_t now = now_ns(); now < end; now = now_ns()) {
		uint64_t d = now + 1000 + rnd() % (180 * 1000);
		struct timespec ts = { (time_t)(d / SEC), (long)(d % SEC) };

		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		lat_add(l, d, now_ns());
	}
	prctl(PR_SET_TIMERSLACK, 0UL, 0, 0, 0);
}

/* ================================================================ driver == */

static void pin_self(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static void lat_print(const char *who, unsigned p, struct lat *l)
{
	qsort(l->v, l->n, sizeof(*l->v), cmp_u64);
	printf("  %-10s %7u  %8zu  %9.1f  %9.1f  %9.1f  %9.1f\n", who, p, l->n, lat_q(l, 0.5),
	       lat_q(l, 0.99), lat_q(l, 0.999), l->n ? (double)l->v[l->n - 1] / 1000.0 : 0.0);
}

static const char *ring_flags_str(unsigned long long f)
{
	static char buf[128];

	buf[0] = 0;
	if (f & IORING_SETUP_SQPOLL)
		strcat(buf, "SQPOLL|");
	if (f & IORING_SETUP_SINGLE_ISSUER)
		strcat(buf, "SINGLE_ISSUER|");
	if (f & IORING_SETUP_DEFER_TASKRUN)
		strcat(buf, "DEFER_TASKRUN|");
	if (f & IORING_SETUP_COOP_TASKRUN)
		strcat(buf, "COOP_TASKRUN|");
	if (f & IORING_SETUP_TASKRUN_FLAG)
		strcat(buf, "TASKRUN_FLAG|");
	if (buf[0])
		buf[strlen(buf) - 1] = 0;
	else
		strcpy(buf, "none");
	return buf;
}

struct million {
	double arm_s, end_s;
	long mem_kib;
	unsigned long long sqes;
};

static void million_child(int which, unsigned n, struct million *m)
{
	if (which == 0) {
		struct cjob j;

		memset(&j, 0, sizeof(j));
		j.kind = 1;
		j.p = n;
		corio_job(&j);
		m->arm_s = j.arm_s;
		m->end_s = j.cancel_s;
		m->mem_kib = j.rss_kib;
		m->sqes = j.st.kernel_arms;
	} else if (which == 1) {
		sqe_million(n, &m->arm_s, &m->mem_kib, &m->end_s);
	} else {
		tfd_million(n, &m->arm_s, &m->mem_kib);
	}
}

/* 1M timers, each contender in a fresh process (clean RSS), before the
 * other phases leave freed memory around: 0 or 1. */
static int million_phase(unsigned million)
{
	struct million *m = mmap(NULL, 3 * sizeof(*m), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return 1;
	memset(m, 0, 3 * sizeof(*m));
	for (int c = 0; c < 3; c++) {
		pid_t pid;

		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			million_child(c, million, &m[c]);
			_exit(0);
		}
		if (pid > 0)
			waitpid(pid, NULL, 0);
	}
	printf("%u timers on one shard (goal: corio <= 256 MiB)\n", million);
	printf("  %-10s arm %6.0f ms (%4.0f ns/timer), cancel all %5.0f ms, RSS +%6.1f MiB "
	       "(%3.0f B/timer), timeout SQEs sent %llu\n",
	       "corio", m[0].arm_s * 1e3, m[0].arm_s * 1e9 / million, m[0].end_s * 1e3,
	       m[0].mem_kib / 1024.0, m[0].mem_kib * 1024.0 / million, m[0].sqes);
	printf("  %-10s arm %6.0f ms (%4.0f ns/timer), ring teardown %5.0f ms, kernel slab "
	       "+%6.1f MiB (%3.0f B/timer; system-wide figure)\n",
	       "sqe/timer", m[1].arm_s * 1e3, m[1].arm_s * 1e9 / million, m[1].end_s * 1e3,
	       m[1].mem_kib / 1024.0, m[1].mem_kib * 1024.0 / million);
	printf("  %-10s arm %6.0f ms (%4.0f ns/timer), RSS +%6.1f MiB (%3.0f B/timer)\n",
	       "timerfd", m[2].arm_s * 1e3, m[2].arm_s * 1e9 / million, m[2].mem_kib / 1024.0,
	       m[2].mem_kib * 1024.0 / million);
	printf("\n");
	return 0;
}

static void arm_cancel_phase(uint64_t pairs)
{
	static const unsigned bgs[] = { 0, 1000, 100000 };
	double r_c[3], r_s[3], r_t[3];
	struct cjob j;

	for (unsigned b = 0; b < 3; b++) {
		memset(&j, 0, sizeof(j));
		j.kind = 0;
		j.bg = bgs[b];
		j.pairs = pairs;
		corio_job(&j);
		r_c[b] = j.rate;
		r_s[b] = sqe_arm_cancel(bgs[b], pairs, quick ? 0.2 : 0.5);
		r_t[b] = tfd_arm_cancel(bgs[b], pairs);
	}
	printf("arm+cancel (cancel the timer armed 1024 pairs earlier), million pairs/s (goal: corio >= 2.0)\n");
	printf("  %-22s %10s %10s %10s\n", "other timers armed", "corio", "sqe/timer", "timerfd");
	for (unsigned b = 0; b < 3; b++)
		printf("  %-22u %10.2f %10.4f %10.2f\n", bgs[b], r_c[b] / 1e6, r_s[b] / 1e6,
		       r_t[b] / 1e6);
}

/* Lateness with p timers armed: corio (blocking, then busy-polling),
 * one SQE per timer, timerfd. */
static void lateness_row(unsigned p)
{
	size_t cap = (size_t)(lat_seconds * 30000) + 1000;
	struct lat ls = { calloc(cap, 8), 0, cap }, lt = { calloc(cap, 8), 0, cap };
	struct cjob j;

	memset(&j, 0, sizeof(j));
	j.kind = 2;
	j.p = p;
	j.window = window_for(p);
	j.lat.v = calloc(cap, 8);
	j.lat.cap = cap;
	corio_job(&j);
	sqe_lateness(p, &ls);
	tfd_lateness(p, &lt);
	lat_print("corio", p, &j.lat);
	lat_print("sqe/timer", p, &ls);
	lat_print("timerfd", p, &lt);
	printf("  %-10s %7u  (corio's own stats histogram: p50 <= %.1f, p99 <= %.1f, "
	       "p99.9 <= %.1f)\n",
	       "", p, corio_timer_lateness_quantile(&j.st, 0.5) / 1e3,
	       corio_timer_lateness_quantile(&j.st, 0.99) / 1e3,
	       corio_timer_lateness_quantile(&j.st, 0.999) / 1e3);
	/* the same with a busy-polling shard: no kernel wake-up in the path */
	j.idle = CORIO_IDLE_POLL;
	j.lat.n = 0;
	corio_job(&j);
	lat_print("corio/poll", p, &j.lat);
	free(j.lat.v);
	free(ls.v);
	free(lt.v);
}

static void lateness_phase(void)
{
	static const unsigned lps[] = { 1000, 100000 };
	size_t cap = (size_t)(lat_seconds * 30000) + 1000;
	struct lat ln;

	printf("\nlateness in us, ~10k expirations/s for %.1f s (goal: corio p99 <= 50 at 100k)\n",
	       lat_seconds);
	printf("  %-10s %7s  %8s  %9s  %9s  %9s  %9s\n", "", "armed", "samples", "p50", "p99",
	       "p99.9", "max");
	for (unsigned k = 0; k < 2; k++)
		lateness_row(lps[k]);
	ln = (struct lat){ calloc(cap, 8), 0, cap };
	nanosleep_lateness(&ln);
	lat_print("nanosleep", 1, &ln);
	free(ln.v);
	printf("  (nanosleep: one thread, clock_nanosleep to absolute deadlines: the "
	       "wake-up floor of this machine)\n");
}

/*
 * A sleeping fiber on a shard that never blocks: two fibers yield in a
 * loop beside it, so every turn is a busy one and the timer must be caught
 * by the loop's own look at the heap (core/loop.c: each turn, before the
 * enter), not by a wake-up. Both backends, in one process, one after the
 * other on the same CPU; a backend that cannot start here says so.
 */
static void busy_phase(void)
{
	static const struct {
		enum corio_backend b;
		const char *name;
	} bk[] = { { CORIO_BACKEND_URING, "io_uring" }, { CORIO_BACKEND_EPOLL, "epoll" } };
	size_t cap = (size_t)(lat_seconds * 1e9 / BUSY_SLEEP_NS) + 16;

	printf("\n5 ms sleeps beside 2 fibers yielding in a loop: 1 shard pinned to CPU %d, "
	       "idle=block, stall_ns 0, %.1f s per backend; lateness in us\n", cpu, lat_seconds);
	printf("  %-10s %8s  %9s  %9s  %9s  %12s  %6s\n", "backend", "samples", "p50", "p99", "max",
	       "loop turns/s", "on CPU");
	for (unsigned b = 0; b < 2; b++) {
		struct cjob j;

		memset(&j, 0, sizeof(j));
		j.kind = 3;
		j.backend = bk[b].b;
		j.lat = (struct lat){ calloc(cap, 8), 0, cap };
		if (corio_job(&j) || !j.lat.n) {
			printf("  %-10s (cannot run here: %s)\n", bk[b].name, corio_last_error());
			free(j.lat.v);
			continue;
		}
		qsort(j.lat.v, j.lat.n, sizeof(*j.lat.v), cmp_u64);
		printf("  %-10s %8zu  %9.1f  %9.1f  %9.1f  %12.0f  %5.0f%%\n", bk[b].name, j.lat.n,
		       lat_q(&j.lat, 0.5), lat_q(&j.lat, 0.99),
		       (double)j.lat.v[j.lat.n - 1] / 1000.0, (double)j.turns / lat_seconds,
		       100.0 * j.on_cpu);
		free(j.lat.v);
	}
	printf("  (the loop fires a due timer within a few turns on both backends,\n"
	       "  timer::due_timer_fires_within_a_few_turns_of_a_busy_shard; on CPU below\n"
	       "  100%%: other processes held the shard's CPU, and the lateness is mostly theirs)\n");
}

static const struct tool_opt opts[] = {
	{ TOOL_OPT_FLAG("quick", 0, quick, "shorter runs, for CI smoke tests") },
	{ TOOL_OPT_FLAG("busy", 0, busy_only, "only the 5 ms sleeps beside yielding fibers") },
	{ 0 },
};
static const struct tool_cli cli = { "bench-timer", "[--quick] [--busy]", NULL, opts };

int main(int argc, char **argv)
{
	unsigned million = 1000000;
	uint64_t pairs = 4000000;
	struct utsname u;
	cpu_set_t mask;
	struct cjob j;
	int ret;

	ret = tool_opt_parse(&cli, argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	if (quick) {
		lat_seconds = 0.3;
		pairs = 400000;
		million = 100000;
	}
	sched_getaffinity(0, sizeof(mask), &mask);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &mask))
			cpu = c;
	pin_self();
	uname(&u);

	memset(&j, 0, sizeof(j));
	j.kind = 0;
	j.pairs = 1000;
	if (corio_job(&j)) {
		fprintf(stderr, "bench-timer: cannot start corio: %s\n", corio_last_error());
		return 1;
	}
	printf("bench-timer: 1 shard pinned to CPU %d of %ld, backend %s, kernel %s, "
	       "ring %s, idle=block%s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN), tool_backend(), u.release,
	       ring_flags_str(j.ring_flags), quick ? ", --quick" : "");
	printf("contenders: corio = heap + 1 timeout SQE; sqe/timer = 1 IORING_OP_TIMEOUT per "
	       "timer (bare liburing); timerfd = binary heap + timerfd + epoll\n\n");
	if (busy_only) {
		busy_phase();
		return 0;
	}
	if (million_phase(million))
		return 1;
	arm_cancel_phase(pairs);
	lateness_phase();
	busy_phase();
	return 0;
}
