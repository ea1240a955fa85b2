/* SPDX-License-Identifier: MIT */
/*
 * bench-net - quick TCP echo comparison of corio's two receive paths:
 *   copy:   corio_recv() into the handler's own 64 KiB buffer (one recv SQE
 *           per receive)
 *   borrow: corio_recv_bufs() from the shard's provided-buffer ring (one
 *           multishot recv per connection, zero SQEs per receive; the
 *           buffers queued at once go back out in one corio_sendv())
 * Server on shard 1, closed-loop ping-pong clients on shard 0, over
 * 127.0.0.1. Each case runs the two modes alternately (A B A B ...) and
 * prints medians: messages per second and the server shard's CPU time per
 * message (thread CPU clock), the robust number on a small shared machine.
 *
 * usage: bench-net [seconds-per-run (0.5)] [repetitions, 1..15 (3)]
 * BENCH_NET_DEBUG=1 also prints the server shard's loop counters per run.
 */
#include <corio.h>

#include "common/backend.h"
#include "common/opt.h"
#include "common/timing.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

struct run {
	int borrow;
	unsigned conns;
	size_t size;
	uint64_t dur_ns;
	_Atomic int port;
	_Atomic uint64_t msgs;
	_Atomic int clients_left;
	uint64_t srv_cpu0, srv_cpu1;
	int err;
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct handler_arg {
	struct run *r;
	struct corio_sock *s;
};

static int handler(void *p)
{
	struct handler_arg *h = p;
	struct corio_sock *s = h->s;
	int borrow = h->r->borrow;
	char *buf = borrow ? NULL : malloc(65536);
	ssize_t n;

	free(h);
	for (;;) {
		if (borrow) {
			struct corio_buf b[16];
			struct iovec iov[16];
			int k = corio_recv_bufs(s, b, 16);

			for (int i = 0; i < k; i++) {
				iov[i].iov_base = b[i].data;
				iov[i].iov_len = b[i].len;
			}
			n = k > 0 ? corio_sendv(s, iov, k, NULL) : k;
			for (int i = 0; i < k; i++)
				corio_buf_release(&b[i]);
		} else {
			n = corio_recv(s, buf, 65536);
			if (n > 0)
				n = corio_send(s, buf, (size_t)n);
		}
		if (n <= 0)
			break;
	}
	free(buf);
	corio_close(s);
	return 0;
}

static int server(struct run *r)
{
	struct corio_listener *l;
	struct sockaddr_storage ss;
	socklen_t len;
	int ret = corio_tcp_listen("127.0.0.1:0", NULL, &l);

	if (ret) {
		fprintf(stderr, "listen: %s (%s)\n", strerror(-ret), corio_last_error());
		return ret;
	}
	corio_listener_addr(l, &ss, &len);
	atomic_store(&r->port, corio_addr_port((struct sockaddr *)&ss));
	for (unsigned i = 0; i < r->conns; i++) {
		struct handler_arg *h = malloc(sizeof(*h));

		h->r = r;
		if ((ret = corio_accept(l, &h->s)) || (ret = corio_spawn(handler, h, NULL, NULL))) {
			free(h);
			break;
		}
	}
	corio_listener_close(l);
	r->srv_cpu0 = thread_cpu_ns();
	/* the handlers end when their clients close */
	while (atomic_load(&r->clients_left))
		corio_sleep_ns(2000000);
	corio_sleep_ns(2000000); /* let handlers see EOF */
	r->srv_cpu1 = thread_cpu_ns();
	if (getenv("BENCH_NET_DEBUG")) {
		struct corio_stats st;

		corio_stats_get(NULL, 1, &st);
		fprintf(stderr, "server shard: turns %llu enters %llu cqes %llu idle %llu ms busy %llu ms msgs %llu\n",
			(unsigned long long)st.loop_turns, (unsigned long long)st.enters,
			(unsigned long long)st.cqes, (unsigned long long)st.idle_ns / 1000000,
			(unsigned long long)st.busy_ns / 1000000, (unsigned long long)atomic_load(&r->msgs));
	}
	return ret;
}

static int client(void *p)
{
	struct run *r = p;
	struct corio_sock *c;
	char where[32], *out = malloc(r->size), *in = malloc(r->size);
	uint64_t end, n = 0;
	int ret;

	memset(out, 'x', r->size);
	snprintf(where, sizeof(where), "127.0.0.1:%d", atomic_load(&r->port));
	ret = corio_tcp_connect(where, &c);
	if (ret) {
		r->err = ret;
		goto out;
	}
	end = corio_now_ns() + r->dur_ns;
	while (corio_now_ns() < end) {
		size_t got = 0;

		if (corio_send(c, out, r->size) < 0)
			break;
		while (got < r->size) {
			ssize_t k = corio_recv(c, in + got, r->size - got);

			if (k <= 0)
				goto done;
			got += (size_t)k;
		}
		n++;
	}
done:
	atomic_fetch_add(&r->msgs, n);
	corio_close(c);
out:
	atomic_fetch_sub(&r->clients_left, 1);
	free(out);
	free(in);
	return 0;
}

static void entry(void *p)
{
	struct run *r = p;

	if (corio_shard_id() == 1) {
		server(r);
		return;
	}
	while (!atomic_load(&r->port))
		corio_sleep_ns(100000);
	for (unsigned i = 0; i < r->conns; i++)
		corio_spawn(client, r, NULL, NULL);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double secs = 0.5;
static int reps = 3;
static const struct tool_opt opts[] = {
	{ TOOL_OPT_SECONDS(NULL, 0, secs, 0.001, 3600, "SECONDS", "seconds per run (0.5)") },
	{ TOOL_OPT_COUNT(NULL, 0, reps, 1, 15, "REPS", "repetitions, 1..15 (3)") },
	{ 0 },
};
static const struct tool_cli cli = { "bench-net", "[SECONDS [REPS]]", NULL, opts };

int main(int argc, char **argv)
{
	static const struct { unsigned conns; size_t size; } cases[] = {
		{ 1, 64 }, { 32, 64 }, { 32, 4096 }, { 8, 65536 },
	};
	struct corio_config cfg;
	struct utsname u;
	int parsed;

	if ((parsed = tool_opt_parse(&cli, argc, argv)))
		return parsed > 0 ? 0 : 2;
	corio_config_init(&cfg);
	cfg.shards = 2;
	uname(&u);
	printf("bench-net: TCP echo over 127.0.0.1, 2 shards on the first CPUs of %ld, backend %s, "
	       "kernel %s, server on shard 1, closed-loop clients on shard 0;\n%d alternating runs of "
	       "%.2f s per mode; medians (min..max)\n\n", sysconf(_SC_NPROCESSORS_ONLN), tool_backend(),
	       u.release, reps, secs);
	printf("%-6s %5s %6s | %-26s | %-26s\n", "mode", "conns", "size", "msgs/s",
	       "server CPU ns/msg");
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		double rate[2][15], cpu[2][15];

		for (int rep = 0; rep < reps; rep++) {
			for (int mode = 0; mode < 2; mode++) {
				struct run r = { .borrow = mode, .conns = cases[c].conns,
						 .size = cases[c].size,
						 .dur_ns = tool_s_to_ns(secs) };
				int ret;

				atomic_store(&r.clients_left, (int)r.conns);
				ret = corio_run(&cfg, entry, &r);
				if (ret || r.err) {
					fprintf(stderr, "run failed: %s (%s)\n",
						strerror(-(ret ? ret : r.err)), corio_last_error());
					return 1;
				}
				rate[mode][rep] = (double)r.msgs / secs;
				cpu[mode][rep] = r.msgs ? (double)(r.srv_cpu1 - r.srv_cpu0) /
								  (double)r.msgs
							: 0;
			}
		}
		for (int mode = 0; mode < 2; mode++) {
			char a[40], b[40];

			qsort(rate[mode], (size_t)reps, sizeof(double), cmp);
			qsort(cpu[mode], (size_t)reps, sizeof(double), cmp);
			snprintf(a, sizeof(a), "%.0f (%.0f..%.0f)", rate[mode][reps / 2],
				 rate[mode][0], rate[mode][reps - 1]);
			snprintf(b, sizeof(b), "%.0f (%.0f..%.0f)", cpu[mode][reps / 2],
				 cpu[mode][0], cpu[mode][reps - 1]);
			printf("%-6s %5u %6zu | %-26s | %-26s\n", mode ? "borrow" : "copy",
			       cases[c].conns, cases[c].size, a, b);
		}
	}
	printf("\nserver CPU includes the loopback softirq work charged to its sends.\n");
	return 0;
}
