/* SPDX-License-Identifier: MIT */
/*
 * tools/load/corio-load/load.h - what corio-load's files share: the run's
 * state (g: the parameters and what the workers count; m: what main's steps
 * share), each engine's connection records, and each file's entry points.
 *
 *   main.c    the options, the checks, the run's steps, main()
 *   corio.c   the corio engine (TCP, UDP, TLS): a fiber per connection
 *   epoll.c   the epoll engine (TCP, UDP): a plain thread per CPU
 *   report.c  the workers' counts gathered and printed
 *
 * main.c's opening comment says what the tool does.
 */
#ifndef CORIO_LOAD_H
#define CORIO_LOAD_H

#include <corio.h>

#include "common/hist.h"
#include "common/load.h"
#include "common/opt.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 64
#define MAX_CONNS 100000

struct load_state {
	struct tool_params p;
	int engine; /* 0 corio, 1 epoll */
	int busy;
	int recv_copy; /* corio engine: corio_recv instead of corio_recv_buf */
	unsigned workers;
	int cpus[MAX_WORKERS];
	unsigned ncpus;
	char cpus_str[64];
	struct tool_worker_stats *ws;
	_Atomic unsigned connected;
	_Atomic int go;   /* 1: start_ns is set, run; -1: abort */
	_Atomic int dead; /* workers that gave up before go */
	_Atomic uint64_t late;
	int tls, tls_insecure;          /* --tls, --tls-insecure */
	const char *tls_ca, *tls_name;  /* --tls-ca, --tls-name */
	struct corio_tls_ctx *tls_ctx;
	_Atomic(const char *) tls_version; /* what a handshake agreed */
};
extern struct load_state g;

static inline void sleep_until_ns(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static inline size_t rx_len(void)
{
	size_t n = g.p.size * (g.p.rate > 0 ? 4 : g.p.pipeline);

	if (n < 16384)
		n = 16384;
	if (n > 262144)
		n = 262144;
	return n;
}

/* A 4 MiB receive buffer, so a few milliseconds' stall at 100k datagrams/s
 * does not overflow it (the default holds ~200 small datagrams): forced
 * when we may (root), else as much as net.core.rmem_max allows. */
static inline void big_rcvbuf(int fd)
{
	int v = 4 << 20;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

/* ---- the corio engine (corio.c) ---- */

struct cconn {
	struct tool_conn c;
	struct tool_uconn u; /* --udp: instead of c */
	struct corio_sock *s;
	struct corio_tls *t; /* --tls: the session on s */
	unsigned char *tx, *rx;
	int rx_status; /* receiver's end: 0 EOF, else -errno */
	int send_done; /* --udp open loop: the sender has sent its last datagram */
};

int load_start_corio(void); /* the runtime and its connections: 0, 1 (said), -ENOMEM */

/* ---- the epoll engine (epoll.c) ---- */

struct pconn {
	struct tool_conn c;
	struct tool_uconn u; /* --udp: instead of c */
	int fd;
	struct { unsigned char *p; size_t len, off, cap; } out;
	unsigned ev;  /* registered events */
	int wr_shut, closed;
};

struct pworker {
	pthread_t th;
	unsigned idx;
	struct pconn *conns; /* every workers-th connection */
	unsigned n;
};

int load_start_epoll(void); /* its threads and connections: 0, 1 (said), -ENOMEM */

/* ---- main.c ---- */

/* What main()'s steps share: the options only main reads, and the run. */
struct load_run {
	const char *label, *spectrum;
	int json, quiet, probe, server_pid;
	struct tool_cpus cpus;
	struct cconn *cc;   /* corio engine */
	struct pworker *pw; /* epoll engine */
	struct corio_rt *rt;
	int64_t srv0, srv1, cli0, cli1; /* CPU times at the measured window's edges */
	uint64_t tls_handshakes;        /* summed over the shards before corio_wait */
};
extern struct load_run m;
extern const char *const engines[]; /* --engine's names, by g.engine */

/* ---- report.c ---- */

/* Print the report (and the spectrum); the exit status from ret and it. */
int load_report(int ret);

#endif
