/* SPDX-License-Identifier: MIT */
/*
 * bench-burst - a burst of connections on one shard whose buffer ring is
 * far smaller than the burst: N connections (5,000) each send one message
 * (3,000 bytes) at once to an echo fiber per connection (corio_recv_buf +
 * corio_send_buf). The ring runs dry, receives stop with ENOBUFS and wait
 * in the shard's FIFO of starved receives until buffers return (docs/NET.md,
 * "A dry ring delays a receive, never stops it").
 *
 * Per ring size (64 and 512 buffers of 4 KiB), over several runs, it prints
 * the medians of: the time from the first send to the last byte echoed,
 * connections echoed per second over that time, and re-arms and ENOBUFS
 * completions per connection. Connections that never got their echo (a
 * liveness failure) are counted and printed; the run gives up on them
 * after 30 s.
 *
 * usage: bench-burst [connections (5000)] [runs, 1..9 (3)]
 * The client is a plain thread with epoll on the process's other CPU.
 */
#include <corio.h>

#include "common/backend.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define MSG 3000

struct run {
	int conns;
	_Atomic int port;
	_Atomic int done;
	int echoed, waiting, failed;
	uint64_t burst_ns;
	struct corio_net_stats st;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int echo(void *arg)
{
	struct corio_sock *s = arg;
	struct corio_buf b;

	while (corio_recv_buf(s, &b) > 0)
		if (corio_send_buf(s, &b) < 0)
			break;
	corio_close(s);
	return 0;
}

static int acceptor(void *arg)
{
	struct corio_spawn_opts so = { .stack_size = 32 * 1024 };
	struct corio_listener *l = arg;
	struct corio_sock *s;

	while (corio_accept(l, &s) == 0)
		if (corio_spawn(echo, s, &so, NULL) < 0)
			corio_close(s);
	return 0;
}

static void *client(void *arg)
{
	struct run *r = arg;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int *fd = calloc((size_t)r->conns, sizeof(int)), *got = calloc((size_t)r->conns, sizeof(int));
	static char out[MSG], in[MSG];
	int ep = epoll_create1(0), n = 0;
	uint64_t t0, until;

	a.sin_port = htons((uint16_t)atomic_load(&r->port));
	memset(out, 'b', sizeof(out));
	for (; fd && got && ep >= 0 && n < r->conns; n++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)n };
		int one = 1;

		fd[n] = socket(AF_INET, SOCK_STREAM, 0);
		if (fd[n] < 0 || connect(fd[n], (struct sockaddr *)&a, sizeof(a)) < 0) {
			fprintf(stderr, "bench-burst: connection %d: %s\n", n, strerror(errno));
			if (fd[n] >= 0)
				close(fd[n]);
			break;
		}
		setsockopt(fd[n], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		epoll_ctl(ep, EPOLL_CTL_ADD, fd[n], &ev);
	}
	r->failed = r->conns - n;
	t0 = now_ns();
	for (int i = 0; i < n; i++)
		if (send(fd[i], out, sizeof(out), 0) != (ssize_t)sizeof(out))
			r->failed++;
	until = t0 + 30000000000ull;
	for (int left = n; left > 0;) {
		struct epoll_event evs[256];
		int k = epoll_wait(ep, evs, 256, 100);

		for (int j = 0; j < k; j++) {
			int i = (int)evs[j].data.u32;
			ssize_t got_now = recv(fd[i], in, sizeof(in), MSG_DONTWAIT);

			if (got_now > 0)
				got[i] += (int)got_now;
			if (got_now <= 0 || got[i] >= MSG) {
				if (got[i] >= MSG)
					r->echoed++;
				epoll_ctl(ep, EPOLL_CTL_DEL, fd[i], NULL);
				left--;
			}
		}
		r->burst_ns = now_ns() - t0;
		if (now_ns() > until) {
			r->waiting = left;
			break;
		}
	}
	for (int i = 0; i < n; i++)
		close(fd[i]);
	if (ep >= 0)
		close(ep);
	free(fd);
	free(got);
	atomic_store(&r->done, 1);
	return NULL;
}

static void entry(void *arg)
{
	struct run *r = arg;
	struct corio_listen_opts o = { .backlog = 4096 };
	struct corio_listener *l = NULL;
	struct corio_sockaddr_buf { struct sockaddr_storage ss; socklen_t len; } sa;
	struct corio_fiber *acc;
	pthread_t t;
	int ret;

	ret = corio_tcp_listen("127.0.0.1:0", &o, &l);
	if (ret < 0) {
		fprintf(stderr, "bench-burst: listen: %s (%s)\n", strerror(-ret), corio_last_error());
		r->failed = r->conns;
		return;
	}
	sa.len = sizeof(sa.ss);
	corio_listener_addr(l, &sa.ss, &sa.len);
	atomic_store(&r->port, corio_addr_port((struct sockaddr *)&sa.ss));
	corio_spawn(acceptor, l, NULL, &acc);
	if (pthread_create(&t, NULL, client, r) != 0) {
		r->failed = r->conns;
	} else {
		while (!atomic_load(&r->done))
			corio_sleep_ns(5000000);
		pthread_join(t, NULL);
	}
	corio_net_stats_get(NULL, 0, &r->st);
	corio_cancel(acc);
	corio_join(acc, NULL);
	corio_listener_close(l);
	for (;;) {
		struct corio_net_stats st;

		if (corio_net_stats_get(NULL, 0, &st) < 0 || !st.conns_live)
			break;
		corio_sleep_ns(1000000);
	}
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	static const char *const rings[] = { "64:4096", "512:4096" };
	int conns = argc > 1 ? atoi(argv[1]) : 5000, runs = argc > 2 ? atoi(argv[2]) : 3;
	struct rlimit rl;
	struct utsname u;
	int status = 0;

	if (conns < 1 || conns > 100000 || runs < 1 || runs > 9) {
		fprintf(stderr, "usage: bench-burst [connections 1..100000 (5000)] [runs 1..9 (3)]\n");
		return 1;
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < (rlim_t)(2 * conns + 100)) {
		rl.rlim_cur = rl.rlim_max < (rlim_t)(2 * conns + 100) ? rl.rlim_max : (rlim_t)(2 * conns + 100);
		setrlimit(RLIMIT_NOFILE, &rl);
		if (rl.rlim_cur < (rlim_t)(2 * conns + 100)) {
			conns = (int)(rl.rlim_cur - 100) / 2;
			fprintf(stderr, "bench-burst: RLIMIT_NOFILE allows %d connections\n", conns);
		}
	}
	uname(&u);
	printf("bench-burst: %d connections each send %d bytes at once to 1 shard (an echo fiber "
	       "per connection: corio_recv_buf + corio_send_buf); client: 1 thread, epoll\n",
	       conns, MSG);
	printf("backend %s, kernel %s, %ld cpus, %d runs per ring (medians)\n", tool_backend(),
	       u.release, sysconf(_SC_NPROCESSORS_ONLN), runs);
	printf("%-10s %10s %12s %12s %12s %10s\n", "ring", "burst ms", "conns/s", "rearms/conn",
	       "enobufs/conn", "unserved");
	for (unsigned k = 0; k < sizeof(rings) / sizeof(rings[0]); k++) {
		double ms[9], cps[9], ra[9], eb[9];
		int unserved = 0;

		setenv("CORIO_NET_BUFS", rings[k], 1);
		for (int i = 0; i < runs; i++) {
			struct corio_config cfg;
			struct run r = { .conns = conns };
			int ret;

			corio_config_init(&cfg);
			cfg.shards = 1;
			/* 5,000 fibers' first stacks are mapped in the burst: the
			 * stall reports would say so 30 times a run */
			cfg.stall_ns = 0;
			ret = corio_run(&cfg, entry, &r);
			if (ret < 0) {
				fprintf(stderr, "bench-burst: corio_run: %s (%s)\n", strerror(-ret),
					corio_last_error());
				return 1;
			}
			ms[i] = (double)r.burst_ns / 1e6;
			cps[i] = r.burst_ns ? r.echoed / ((double)r.burst_ns / 1e9) : 0;
			ra[i] = (double)r.st.rearms / conns;
			eb[i] = (double)r.st.enobufs / conns;
			unserved += conns - r.echoed;
		}
		printf("%-10s %10.1f %12.0f %12.2f %12.2f %10d\n", rings[k], median(ms, runs),
		       median(cps, runs), median(ra, runs), median(eb, runs), unserved);
		if (unserved)
			status = 1;
	}
	unsetenv("CORIO_NET_BUFS");
	if (status)
		printf("!! some connections were never echoed: a starved receive was not armed again\n");
	return status;
}
