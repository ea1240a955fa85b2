/* SPDX-License-Identifier: MIT */
/*
 * bench-msg - cross-shard message ring: one-way throughput 1->1 and N->1,
 * corio_call round trip with the target busy and asleep (MSG_RING and
 * eventfd doorbells), side by side with two baselines between plain
 * threads: a mutex+condvar queue and an eventfd-per-message queue
 * (tools/common/msgq.c). Every contender runs once per round, in turn, for
 * ROUNDS rounds; the table shows medians and the spread.
 *
 * Usage: bench-msg [ROUNDS]   (1..15, default 3)
 */
#include <corio.h>

#include "common/backend.h"
#include "common/msgq.h"
#include "common/opt.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define MAXR 15
#define TP_CORIO 5000000ull     /* messages per producer, corio */
#define TP_MUTEX 2000000ull     /* mutex+condvar                */
#define TP_EFD 500000ull        /* eventfd per message          */
#define RTT_BUSY 50000u         /* round trips, target awake    */
#define RTT_SLEEP 10000u        /* round trips, target asleep   */
#define WARMUP 1000u

static int cpu_a = 0, cpu_b = 1; /* producer side, consumer side */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct series {
	double v[MAXR];
	int n;
};

static void add(struct series *s, double v)
{
	s->v[s->n++] = v;
}

static double med(struct series *s, double *lo, double *hi)
{
	double t[MAXR];

	memcpy(t, s->v, sizeof(double) * (size_t)s->n);
	qsort(t, (size_t)s->n, sizeof(double), cmp_double);
	*lo = t[0];
	*hi = t[s->n - 1];
	return t[s->n / 2];
}

static cpu_set_t all_cpus; /* the main thread's mask, restored after baselines */

static void unpin(void)
{
	pthread_setaffinity_np(pthread_self(), sizeof(all_cpus), &all_cpus);
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* ---- corio one-way throughput ---------------------------------------------------- */

static struct {
	uint64_t per_producer, got, total;
	unsigned producers;
	_Atomic unsigned ready;
	_Atomic uint64_t t0;
	uint64_t t1;
	struct corio_event done;
} ow;

static void ow_handler(void *arg)
{
	(void)arg;
	if (++ow.got == ow.total) {
		ow.t1 = corio_now_ns();
		corio_event_set(&ow.done);
	}
}

static void ow_entry(void *arg)
{
	unsigned me = corio_shard_id();
	uint64_t zero = 0;

	(void)arg;
	atomic_fetch_add(&ow.ready, 1);
	while (atomic_load(&ow.ready) < corio_shard_count())
		corio_yield();
	if (me == 0) {
		corio_event_wait(&ow.done);
		return;
	}
	atomic_compare_exchange_strong(&ow.t0, &zero, corio_now_ns());
	for (uint64_t i = 0; i < ow.per_producer; i++)
		if (corio_post(0, ow_handler, NULL) == -EAGAIN &&
		    corio_post_wait(0, ow_handler, NULL) != 0)
			abort();
}

/* Msgs/s with `producers` shards posting to shard 0 (on cpu_b). */
static double corio_oneway(unsigned producers)
{
	struct corio_config cfg;
	int cpus[8] = { cpu_b, cpu_a, cpu_a, cpu_a, cpu_a, cpu_a, cpu_a, cpu_a };

	corio_config_init(&cfg);
	cfg.stall_ns = 0; /* the benchmark loops in one fiber on purpose: no stall reports */
	cfg.shards = producers + 1;
	cfg.cpus = cpus;
	memset(&ow, 0, sizeof(ow));
	ow.producers = producers;
	ow.per_producer = TP_CORIO / producers;
	ow.total = ow.per_producer * producers;
	corio_event_init(&ow.done);
	if (corio_run(&cfg, ow_entry, NULL))
		exit(1);
	return ow.total / ((ow.t1 - ow.t0) / 1e9);
}

/* ---- corio call round trip ----------------------------------------------------------- */

static uint64_t *samples;
static unsigned nsamples;

static intptr_t rtt_fn(void *arg)
{
	(void)arg;
	return 1;
}

static void rtt_entry(void *arg)
{
	intptr_t r;

	(void)arg;
	if (corio_shard_id() != 0)
		return; /* shard 1 only answers calls; it sleeps or spins in between */
	for (unsigned i = 0; i < WARMUP; i++)
		corio_call(1, rtt_fn, NULL, &r);
	for (unsigned i = 0; i < nsamples; i++) {
		uint64_t t = corio_now_ns();

		if (corio_call(1, rtt_fn, NULL, &r) != 0)
			abort();
		samples[i] = corio_now_ns() - t;
	}
}

static void percentiles(double *p50, double *p99)
{
	qsort(samples, nsamples, sizeof(uint64_t), cmp_u64);
	*p50 = samples[nsamples / 2] / 1e3;
	*p99 = samples[nsamples * 99 / 100] / 1e3;
}

static void corio_rtt(enum corio_idle idle, const char *doorbell, unsigned n, double *p50,
		      double *p99)
{
	struct corio_config cfg;
	int cpus[2] = { cpu_a, cpu_b };

	if (doorbell) /* NULL: the default (MSG_RING where the ring can send it) */
		setenv("CORIO_MSG_DOORBELL", doorbell, 1);
	else
		unsetenv("CORIO_MSG_DOORBELL");
	corio_config_init(&cfg);
	cfg.stall_ns = 0; /* the benchmark loops in one fiber on purpose: no stall reports */
	cfg.shards = 2;
	cfg.cpus = cpus;
	cfg.idle = idle;
	nsamples = n;
	if (corio_run(&cfg, rtt_entry, NULL))
		exit(1);
	unsetenv("CORIO_MSG_DOORBELL");
	percentiles(p50, p99);
}

/* ---- baselines ------------------------------------------------------------------------- */

static struct mq q1, q2;
static uint64_t b_got, b_total;
static _Atomic int b_stop, b_replied;

static void b_count(void *arg)
{
	(void)arg;
	b_got++;
}

static void *b_consumer(void *arg)
{
	(void)arg;
	pin(cpu_b);
	while (b_got < b_total)
		mq_run(&q1);
	return NULL;
}

static double base_oneway(enum mq_kind kind, uint64_t n)
{
	pthread_t th;
	uint64_t t0;

	if (mq_init(&q1, kind, 4096))
		exit(1);
	b_got = 0;
	b_total = n;
	pin(cpu_a);
	pthread_create(&th, NULL, b_consumer, NULL);
	t0 = corio_now_ns();
	for (uint64_t i = 0; i < n; i++)
		mq_post(&q1, b_count, NULL);
	pthread_join(th, NULL);
	t0 = corio_now_ns() - t0;
	unpin();
	mq_destroy(&q1);
	return n / (t0 / 1e9);
}

static void b_reply(void *arg)
{
	(void)arg;
	atomic_store_explicit(&b_replied, 1, memory_order_relaxed);
}

static void b_request(void *arg)
{
	(void)arg;
	mq_post(&q2, b_reply, NULL);
}

static void b_quit(void *arg)
{
	(void)arg;
	atomic_store(&b_stop, 1);
}

static void *b_server(void *arg)
{
	(void)arg;
	pin(cpu_b);
	while (!atomic_load(&b_stop))
		mq_run(&q1);
	return NULL;
}

static void base_rtt(enum mq_kind kind, unsigned n, double *p50, double *p99)
{
	pthread_t th;

	if (mq_init(&q1, kind, 4096) || mq_init(&q2, kind, 4096))
		exit(1);
	atomic_store(&b_stop, 0);
	pin(cpu_a);
	pthread_create(&th, NULL, b_server, NULL);
	nsamples = n;
	for (unsigned i = 0; i < WARMUP + n; i++) {
		uint64_t t = corio_now_ns();

		atomic_store(&b_replied, 0);
		mq_post(&q1, b_request, NULL);
		while (!atomic_load(&b_replied))
			mq_run(&q2);
		if (i >= WARMUP)
			samples[i - WARMUP] = corio_now_ns() - t;
	}
	mq_post(&q1, b_quit, NULL);
	pthread_join(th, NULL);
	unpin();
	mq_destroy(&q1);
	mq_destroy(&q2);
	percentiles(p50, p99);
}

/* ---- main ------------------------------------------------------------------------------ */

/* Every contender's figures over the rounds. */
struct results {
	struct series tp11, tp21, tpm, tpe;
	struct series busy50, busy99, mr50, mr99;
	struct series ef50, ef99, bm50, bm99;
	struct series be50, be99;
	bool fallback; /* the epoll backend */
};

/* One round: each contender once, in turn. */
static void run_round(struct results *r)
{
	double p50, p99;

	add(&r->tp11, corio_oneway(1));
	add(&r->tpm, base_oneway(MQ_MUTEX_CONDVAR, TP_MUTEX));
	add(&r->tp21, corio_oneway(2));
	add(&r->tpe, base_oneway(MQ_EVENTFD, TP_EFD));
	corio_rtt(CORIO_IDLE_POLL, NULL, RTT_BUSY, &p50, &p99);
	add(&r->busy50, p50), add(&r->busy99, p99);
	if (!r->fallback) { /* the fallback rings eventfds: no MSG_RING row there */
		corio_rtt(CORIO_IDLE_BLOCK, NULL, RTT_SLEEP, &p50, &p99);
		add(&r->mr50, p50), add(&r->mr99, p99);
	}
	base_rtt(MQ_MUTEX_CONDVAR, RTT_SLEEP, &p50, &p99);
	add(&r->bm50, p50), add(&r->bm99, p99);
	corio_rtt(CORIO_IDLE_BLOCK, "eventfd", RTT_SLEEP, &p50, &p99);
	add(&r->ef50, p50), add(&r->ef99, p99);
	base_rtt(MQ_EVENTFD, RTT_SLEEP, &p50, &p99);
	add(&r->be50, p50), add(&r->be99, p99);
}

static void print_results(struct results *r)
{
	double lo, hi, m;

	printf("\none-way throughput, M msgs/s          median   [min .. max]\n");
#define TP(name, s)                                                                 \
	m = med(&s, &lo, &hi);                                                      \
	printf("  %-36s %6.2f   [%.2f .. %.2f]\n", name, m / 1e6, lo / 1e6, hi / 1e6)
	TP("corio_post 1->1", r->tp11);
	TP("corio_post 2->1 (3 shards, 2 CPUs)", r->tp21);
	TP("mutex+condvar queue 1->1", r->tpm);
	TP("eventfd-per-message queue 1->1", r->tpe);
	printf("\nround trip, us                            p50 [min .. max]        p99 [min .. max]\n");
#define RT(name, a, b)                                                              \
	do {                                                                        \
		double l2, h2, m2;                                                  \
		m = med(&a, &lo, &hi);                                              \
		m2 = med(&b, &l2, &h2);                                             \
		printf("  %-38s %6.2f [%.2f .. %.2f]   %7.2f [%.2f .. %.2f]\n", name, m, lo, \
		       hi, m2, l2, h2);                                             \
	} while (0)
	RT("corio_call, target busy (idle=POLL)", r->busy50, r->busy99);
	if (r->fallback)
		printf("  %-38s (none: the fallback rings eventfds)\n",
		       "corio_call, asleep, MSG_RING doorbell");
	else
		RT("corio_call, asleep, MSG_RING doorbell", r->mr50, r->mr99);
	RT("corio_call, asleep, eventfd doorbell", r->ef50, r->ef99);
	RT("mutex+condvar ping-pong (threads sleep)", r->bm50, r->bm99);
	RT("eventfd-per-message ping-pong", r->be50, r->be99);
	printf("\ngoals: >= 20 M msgs/s 1->1; call p50 <= 1 us busy, <= 10 us asleep\n");
}

static unsigned rounds = 3;
static const struct tool_opt opts[] = {
	{ TOOL_OPT_COUNT(NULL, 0, rounds, 1, MAXR, "ROUNDS", "rounds of every contender (3)") },
	{ 0 },
};
static const struct tool_cli cli = { "bench-msg", "[ROUNDS]", NULL, opts };

int main(int argc, char **argv)
{
	static struct results res;
	struct utsname u;
	cpu_set_t mask;
	int k = 0, ret;

	ret = tool_opt_parse(&cli, argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	sched_getaffinity(0, sizeof(mask), &mask);
	all_cpus = mask;
	for (int c = 0; c < CPU_SETSIZE && k < 2; c++)
		if (CPU_ISSET(c, &mask))
			*(k++ == 0 ? &cpu_a : &cpu_b) = c;
	if (k < 2) {
		fprintf(stderr, "bench-msg: needs two CPUs\n");
		return 1;
	}
	samples = calloc(RTT_BUSY, sizeof(*samples));
	uname(&u);
	res.fallback = !strcmp(tool_backend(), "epoll");
	printf("bench-msg: cross-shard messages; backend %s, kernel %s, %ld CPUs online, "
	       "2 shards (3 for 2->1): sender CPU %d, receiver CPU %d, %u rounds (contenders "
	       "alternate each round)\n",
	       tool_backend(), u.release, sysconf(_SC_NPROCESSORS_ONLN), cpu_a, cpu_b, rounds);
	printf("msg_slots 4096 (default); one-way: %llu msgs per run (baselines: mutex %llu, "
	       "eventfd %llu); calls: %u busy / %u asleep round trips after %u warm-up\n",
	       TP_CORIO, TP_MUTEX, TP_EFD, RTT_BUSY, RTT_SLEEP, WARMUP);
	fflush(stdout);
	for (unsigned r = 0; r < rounds; r++)
		run_round(&res);
	print_results(&res);
	free(samples);
	return 0;
}
