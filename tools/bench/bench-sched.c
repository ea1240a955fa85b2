/* SPDX-License-Identifier: MIT */
/*
 * bench-sched - scheduling classes on one core (docs/SCHED.md).
 *
 * Isolation: one TCP connection echoes 64-byte messages sent at a fixed
 * rate (2,000/s, one at a time) by a client thread on the other CPU, while
 * 8 batch fibers on the same shard burn CPU and call corio_maybe_yield().
 * Three set-ups, in the same binary, alternated run by run:
 *   alone        the echo alone (the floor);
 *   classes off  echo and burners all in the default class (one FIFO);
 *   classes on   the echo in a latency class, the burners in a batch class.
 * For each it prints the medians over runs of the round trip's p50, p99 and
 * p99.9 (from each send; a message due while the one before was still out
 * is sent when it returns, and the run ends after its seconds), and
 * the echo class's queue delay p99.9 and max as the runtime counted them
 * (corio_class_stats).
 *
 * Shares: three classes with 100, 200 and 700 shares, one burner each,
 * busy for 2 s on every shard; the CPU each class got, per shard.
 *
 * usage: bench-sched [runs 1..9 (3)] [seconds per run (2)]
 */
#include <corio.h>

#include "common/backend.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define MSG     64
#define RATE    2000
#define BURNERS 8

enum mode { ALONE, OFF, ON, NMODES };
static const char *const mode_name[NMODES] = { "alone", "classes off", "classes on" };

struct run {
	enum mode mode;
	unsigned secs;
	_Atomic int port;
	_Atomic int stop;
	int echo_cls;
	uint64_t *lat;  /* round trips, ns */
	size_t n;
	uint64_t qd999, qdmax; /* the echo class's queue delay */
	uint64_t slice_us;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int burner(void *arg)
{
	struct run *r = arg;

	while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		for (volatile int i = 0; i < 200; i++)
			;
		corio_maybe_yield();
	}
	return 0;
}

static int echo(void *arg)
{
	struct corio_sock *s = arg;
	char buf[4096];
	ssize_t n;

	while ((n = corio_recv(s, buf, sizeof(buf))) > 0)
		if (corio_send(s, buf, (size_t)n) != n)
			break;
	corio_close(s);
	return 0;
}

static void entry(void *arg)
{
	struct run *r = arg;
	struct corio_class_opts lat = { .name = "latency", .shares = 100,
					.flags = CORIO_CLASS_LATENCY };
	struct corio_class_opts bat = { .name = "batch", .shares = 100 };
	struct corio_spawn_opts bo = { 0 }, eo = { 0 };
	struct corio_fiber *b[BURNERS], *e;
	struct corio_listener *l;
	struct corio_sock *s;
	struct sockaddr_storage ss;
	struct corio_class_stats st;
	socklen_t len;
	int nb = r->mode == ALONE ? 0 : BURNERS;

	if (r->mode == ON) {
		eo.sched_class = (unsigned)corio_class_create(&lat);
		bo.sched_class = (unsigned)corio_class_create(&bat);
	}
	r->echo_cls = (int)eo.sched_class;
	if (corio_tcp_listen("127.0.0.1:0", NULL, &l) || corio_listener_addr(l, &ss, &len)) {
		atomic_store(&r->port, -1);
		return;
	}
	for (int i = 0; i < nb; i++)
		if (corio_spawn(burner, r, &bo, &b[i]))
			nb = i;
	atomic_store(&r->port, corio_addr_port((struct sockaddr *)&ss));
	if (corio_accept(l, &s) == 0 && corio_spawn(echo, s, &eo, &e) == 0)
		corio_join(e, NULL);
	corio_listener_close(l);
	if (!corio_class_stats_get(NULL, 0, eo.sched_class, &st)) {
		r->qd999 = corio_class_wait_quantile(&st, 0.999);
		r->qdmax = st.wait_max_ns;
	}
	atomic_store(&r->stop, 1);
	for (int i = 0; i < nb; i++)
		corio_join(b[i], NULL);
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* The client: one message at a time, each due at start + i / RATE. */
static void *client(void *arg)
{
	struct run *r = arg;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char buf[MSG] = { 0 };
	int fd, one = 1;
	uint64_t t0, period = 1000000000ull / RATE;
	size_t total = (size_t)r->secs * RATE;

	pin(0);
	while (!atomic_load(&r->port))
		usleep(1000);
	if (atomic_load(&r->port) < 0)
		return NULL;
	a.sin_port = htons((uint16_t)atomic_load(&r->port));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		perror("bench-sched: connect");
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	t0 = now_ns() + 50000000ull; /* the burners are running by then */
	for (size_t i = 0; i < total; i++) {
		uint64_t due = t0 + i * period, sent;
		struct timespec ts = { (time_t)(due / 1000000000ull), (long)(due % 1000000000ull) };
		size_t got = 0;

		if (now_ns() > t0 + total * period)
			break; /* the run's time is up: messages that fell behind are not sent */
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		sent = now_ns();
		if (send(fd, buf, MSG, MSG_NOSIGNAL) != MSG)
			break;
		while (got < MSG) {
			ssize_t k = recv(fd, buf, MSG - got, 0);

			if (k <= 0)
				goto out;
			got += (size_t)k;
		}
		r->lat[r->n++] = now_ns() - sent;
	}
out:
	close(fd);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, size_t n, double q)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i];
}

static double median(double *v, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
			double t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int run_once(struct run *r)
{
	struct corio_config cfg;
	int cpus[1] = { 1 };
	pthread_t t;
	int ret;

	corio_config_init(&cfg);
	cfg.shards = 1;
	cfg.cpus = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? cpus : NULL;
	cfg.stall_ns = 0;
	r->slice_us = cfg.slice_us ? cfg.slice_us : 500;
	pthread_create(&t, NULL, client, r);
	ret = corio_run(&cfg, entry, r);
	pthread_join(t, NULL);
	return ret;
}

/* ---- shares ------------------------------------------------------------------ */

static const unsigned share_of[3] = { 100, 200, 700 };
static double got_share[64][3];
static unsigned nshards_run;

static void shares_entry(void *arg)
{
	struct run *r = arg;
	struct corio_fiber *f[3];
	unsigned id[3];
	uint64_t c0[3], sum = 0;

	for (int i = 0; i < 3; i++) {
		char name[8];
		struct corio_class_opts o = { .name = name, .shares = share_of[i] };
		struct corio_spawn_opts so = { 0 };

		snprintf(name, sizeof(name), "s%u", share_of[i]);
		id[i] = (unsigned)corio_class_create(&o);
		so.sched_class = id[i];
		corio_spawn(burner, r, &so, &f[i]);
	}
	corio_sleep_ns(100000000ull);
	for (int i = 0; i < 3; i++) {
		struct corio_class_stats st;

		corio_class_stats_get(NULL, corio_shard_id(), id[i], &st);
		c0[i] = st.cpu_ns;
	}
	corio_sleep_ns(2000000000ull);
	for (int i = 0; i < 3; i++) {
		struct corio_class_stats st;

		corio_class_stats_get(NULL, corio_shard_id(), id[i], &st);
		c0[i] = st.cpu_ns - c0[i];
		sum += c0[i];
	}
	for (int i = 0; i < 3; i++)
		got_share[corio_shard_id() % 64][i] = sum ? 100.0 * (double)c0[i] / (double)sum : 0;
	atomic_store(&r->stop, 1);
	for (int i = 0; i < 3; i++)
		corio_join(f[i], NULL);
}

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 3;
	unsigned secs = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
	double p50[NMODES][9], p99[NMODES][9], p999[NMODES][9], q999[NMODES][9], qmax[NMODES][9];
	struct utsname u;
	struct run r;
	struct corio_config cfg;

	if (runs < 1 || runs > 9 || secs < 1 || secs > 60) {
		fprintf(stderr, "usage: bench-sched [runs 1..9 (3)] [seconds per run 1..60 (2)]\n");
		return 2;
	}
	uname(&u);
	printf("bench-sched: isolation - 1 shard on CPU 1, one connection echoing %d-byte "
	       "messages at %d/s (client on CPU 0, one message at a time), beside %d batch "
	       "fibers burning CPU with corio_maybe_yield(); slice 500 us\n",
	       MSG, RATE, BURNERS);
	printf("backend %s, kernel %s, %ld cpus, %d runs of %u s per set-up, alternated (medians)\n",
	       tool_backend(), u.release, sysconf(_SC_NPROCESSORS_ONLN), runs, secs);
	for (int k = 0; k < runs; k++)
		for (int m = 0; m < NMODES; m++) {
			memset(&r, 0, sizeof(r));
			r.mode = (enum mode)m;
			r.secs = secs;
			r.lat = calloc((size_t)secs * RATE, sizeof(uint64_t));
			if (!r.lat || run_once(&r)) {
				fprintf(stderr, "bench-sched: run failed: %s\n", corio_last_error());
				return 1;
			}
			qsort(r.lat, r.n, sizeof(uint64_t), cmp_u64);
			p50[m][k] = (double)pct(r.lat, r.n, 0.5) / 1e3;
			p99[m][k] = (double)pct(r.lat, r.n, 0.99) / 1e3;
			p999[m][k] = (double)pct(r.lat, r.n, 0.999) / 1e3;
			q999[m][k] = (double)r.qd999 / 1e3;
			qmax[m][k] = (double)r.qdmax / 1e3;
			if (k == 0)
				printf("  run 1, %s: %zu of %u messages sent in %u s\n", mode_name[m],
				       r.n, secs * RATE, secs);
			free(r.lat);
		}
	printf("%-12s %10s %10s %10s %14s %14s\n", "set-up", "p50 us", "p99 us", "p99.9 us",
	       "qdelay p99.9", "qdelay max");
	double m99[NMODES];

	for (int m = 0; m < NMODES; m++) {
		m99[m] = median(p99[m], runs);
		printf("%-12s %10.0f %10.0f %10.0f %11.0f us %11.0f us\n", mode_name[m],
		       median(p50[m], runs), m99[m], median(p999[m], runs), median(q999[m], runs),
		       median(qmax[m], runs));
	}
	printf("p99, classes off / classes on: %.1fx (goal: >= 5x); queue delay p99.9 with "
	       "classes: the histogram bucket's upper bound (goal: <= one slice, 500 us)\n",
	       m99[ON] > 0 ? m99[OFF] / m99[ON] : 0);

	/* shares */
	corio_config_init(&cfg);
	cfg.stall_ns = 0;
	memset(&r, 0, sizeof(r));
	if (corio_run(&cfg, shares_entry, &r)) {
		fprintf(stderr, "bench-sched: shares run failed: %s\n", corio_last_error());
		return 1;
	}
	nshards_run = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	printf("\nbench-sched: shares - 3 classes (100, 200, 700 shares), one burner each, busy "
	       "for 2 s on each of %u shards\n", nshards_run);
	printf("%-8s %10s %10s %10s   (goal: 10 / 20 / 70 %% +- 5)\n", "shard", "100", "200",
	       "700");
	for (unsigned i = 0; i < nshards_run && i < 64; i++)
		printf("%-8u %9.1f%% %9.1f%% %9.1f%%\n", i, got_share[i][0], got_share[i][1],
		       got_share[i][2]);
	return 0;
}
