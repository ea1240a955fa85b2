/* SPDX-License-Identifier: MIT */
/*
 * kv_helpers.h - what the kv suite's files (test/test_kv_*.c) share: a
 * small RESP client that runs in a fiber (struct cl, cl_cmd, cl_reply and
 * the EXPECT checks), and run_kv(), which runs corio-kv's server in this
 * process with a test body as its client. Static inline, so a file that
 * uses only some of them builds warning-free.
 */
#ifndef CORIO_TEST_KV_HELPERS_H
#define CORIO_TEST_KV_HELPERS_H

#include "helpers.h"

#include "common/timing.h"
#include "kv/kv.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>

/* ---- a small RESP client (in a fiber) -------------------------------------------- */

struct cl {
	struct corio_sock *s;
	char in[1 << 16];
	size_t len;          /* bytes in in[] */
	struct kv_buf out;   /* commands not sent yet */
	char *last;          /* the last reply, NUL-terminated (malloc) */
	size_t last_len;
};

/* Length of the complete reply at p[0..n), 0 when incomplete, -1 when invalid. */
static inline long reply_len(const char *p, size_t n)
{
	const char *cr;
	long long v;
	size_t at;

	if (n < 3)
		return 0;
	cr = memchr(p, '\r', n);
	if (!cr || (size_t)(cr - p) + 1 >= n)
		return 0;
	at = (size_t)(cr - p) + 2;
	switch (p[0]) {
	case '+':
	case '-':
	case ':':
	case '_': /* RESP3 null */
		return (long)at;
	case '$':
	case '=': /* RESP3 verbatim string */
		v = atoll(p + 1);
		if (v < 0)
			return (long)at;
		return at + (size_t)v + 2 <= n ? (long)(at + (size_t)v + 2) : 0;
	case '*':
	case '>': /* RESP3 push */
	case '~': /* RESP3 set */
	case '%': /* RESP3 map: twice as many elements */
		v = atoll(p + 1) * (p[0] == '%' ? 2 : 1);
		for (long long i = 0; i < v; i++) {
			long m = reply_len(p + at, n - at);

			if (m <= 0)
				return m;
			at += (size_t)m;
		}
		return (long)at;
	default:
		return -1;
	}
}

static inline struct cl *cl_open(int port)
{
	struct cl *c = calloc(1, sizeof(*c));
	char where[32];
	int ret;

	snprintf(where, sizeof(where), "127.0.0.1:%d", port);
	ret = corio_tcp_connect(where, &c->s);
	CHECK_EQ(ret, 0);
	if (ret) {
		free(c);
		return NULL;
	}
	return c;
}

static inline void cl_close(struct cl *c)
{
	if (!c)
		return;
	corio_close(c->s);
	kv_buf_free(&c->out);
	free(c->last);
	free(c);
}

/* Queue one command (strings; NULL ends them). */
static inline void cl_cmd(struct cl *c, ...)
{
	const char *a[64];
	int n = 0;
	va_list ap;

	va_start(ap, c);
	while (n < 64 && (a[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	kv_num(&c->out, '*', n);
	for (int i = 0; i < n; i++)
		kv_bulk(&c->out, a[i], strlen(a[i]));
}

static inline void cl_raw(struct cl *c, const char *p, size_t n)
{
	kv_put(&c->out, p, n);
}

static inline void cl_flush(struct cl *c)
{
	if (c->out.len)
		CHECK_EQ(corio_send(c->s, c->out.p, c->out.len), (long long)c->out.len);
	c->out.len = 0;
}

/* The next reply, or NULL (connection closed, timed out, invalid). */
static inline const char *cl_reply(struct cl *c)
{
	struct corio_deadline d;
	long m;

	cl_flush(c);
	corio_timeout_push(&d, 5000000000ull);
	while ((m = reply_len(c->in, c->len)) == 0) {
		ssize_t n = c->len < sizeof(c->in) ? corio_recv(c->s, c->in + c->len, sizeof(c->in) - c->len)
						   : -ENOBUFS;

		if (n <= 0) {
			m = -1;
			break;
		}
		c->len += (size_t)n;
	}
	corio_deadline_pop(&d);
	if (m < 0)
		return NULL;
	free(c->last);
	c->last = malloc((size_t)m + 1);
	memcpy(c->last, c->in, (size_t)m);
	c->last[m] = 0;
	c->last_len = (size_t)m;
	memmove(c->in, c->in + m, c->len - (size_t)m);
	c->len -= (size_t)m;
	return c->last;
}

/* 1 when the server closed the connection (end of stream or reset) with no
 * more replies. */
static inline int cl_closed(struct cl *c)
{
	struct corio_deadline d;
	ssize_t n;

	cl_flush(c);
	if (c->len)
		return 0;
	corio_timeout_push(&d, 5000000000ull);
	n = corio_recv(c->s, c->in, sizeof(c->in));
	corio_deadline_pop(&d);
	return n == 0 || n == -ECONNRESET;
}

static inline void expect_at(struct cl *c, const char *want, const char *file, int line)
{
	const char *got = cl_reply(c);

	if (!got || strcmp(got, want)) {
		char msg[400];

		snprintf(msg, sizeof(msg), "reply %.150s, want %.150s", got ? got : "(none)", want);
		th_fail(file, line, msg);
	}
}
#define EXPECT(c, want) expect_at((c), (want), __FILE__, __LINE__)

/* The reply must contain needle. */
static inline void expect_has_at(struct cl *c, const char *needle, const char *file, int line)
{
	const char *got = cl_reply(c);

	if (!got || !strstr(got, needle)) {
		char msg[400];

		snprintf(msg, sizeof(msg), "reply %.200s lacks %.100s", got ? got : "(none)", needle);
		th_fail(file, line, msg);
	}
}
#define EXPECT_HAS(c, needle) expect_has_at((c), (needle), __FILE__, __LINE__)

/* A TTL reply of secs, or secs - 1: TTL rounds the time left to the nearest
 * second, and half a second can pass between setting it and asking on a
 * loaded machine. */
static inline void expect_ttl_at(struct cl *c, long secs, const char *file, int line)
{
	const char *got = cl_reply(c);
	char *end = NULL;
	long n = got && got[0] == ':' ? strtol(got + 1, &end, 10) : -100;

	if (!end || strcmp(end, "\r\n") || n > secs || n < secs - 1) {
		char msg[400];

		snprintf(msg, sizeof(msg), "reply %.200s, want :%ld (or one less)", got ? got : "(none)",
			 secs);
		th_fail(file, line, msg);
	}
}
#define EXPECT_TTL(c, secs) expect_ttl_at((c), (secs), __FILE__, __LINE__)

/* ---- running a server and a client ----------------------------------------------- */

struct kv_test {
	struct kv_server srv;
	void (*body)(struct kv_test *t);
	int port;
};

static inline int client_fiber(void *arg)
{
	struct kv_test *t = arg;

	while (atomic_load(&t->srv.listening) < t->srv.nshards && !atomic_load(&t->srv.failed))
		if (corio_sleep_ns(1000000) < 0)
			return 0;
	CHECK(!atomic_load(&t->srv.failed));
	t->port = atomic_load(&t->srv.bound_port);
	if (!atomic_load(&t->srv.failed))
		t->body(t);
	corio_shutdown();
	return 0;
}

static inline void test_entry(void *arg)
{
	struct kv_test *t = arg;

	if (corio_shard_id() == 0)
		CHECK_EQ(corio_spawn(client_fiber, t, NULL, NULL), 0);
	kv_shard_main(&t->srv);
}

static const char *kv_test_pass; /* run_kv(): the server's --requirepass */
static const char *kv_test_host; /* run_kv(): the address to bind */
static int kv_test_protected;    /* run_kv(): protected mode */
static int kv_test_cluster;      /* run_kv(): --cluster-mode emulated */

/* Run body against a server of n shards; lim NULL: the defaults. */
static inline void run_kv(unsigned shards, const struct kv_limits *lim, void (*body)(struct kv_test *))
{
	static struct kv_test t; /* big: keep it off the test thread's stack */
	struct corio_config cfg = th_cfg(shards);

	memset(&t, 0, sizeof(t));
	if (lim)
		t.srv.lim = *lim;
	else
		kv_limits_default(&t.srv.lim);
	t.srv.port = 0;
	t.srv.requirepass = kv_test_pass;
	t.srv.host = kv_test_host;
	atomic_store(&t.srv.protected_mode, kv_test_protected);
	t.srv.cluster = kv_test_cluster;
	t.body = body;
	cfg.flags |= CORIO_F_NO_PIN;
	cr_assert_eq(kv_server_init(&t.srv, shards), 0);
	th_run(&cfg, test_entry, &t);
	kv_server_free(&t.srv);
}

/* The shard a connection lives on (CLIENT INFO says). */
static inline int cl_shard(struct cl *c)
{
	const char *r;

	cl_cmd(c, "CLIENT", "INFO", NULL);
	r = cl_reply(c);
	r = r ? strstr(r, "shard=") : NULL;
	return r ? atoi(r + 6) : -1;
}

/* A key named prefix-N owned by shard. */
static inline void key_on(struct kv_server *srv, unsigned shard, const char *prefix, int from, char *out,
		   size_t n)
{
	for (int i = from;; i++) {
		snprintf(out, n, "%s-%d", prefix, i);
		if (kv_owner(srv, kv_hash(srv->seed, out, strlen(out))) == shard)
			return;
	}
}

static inline long long info_num(struct cl *c, const char *section, const char *field)
{
	const char *r, *p;

	cl_cmd(c, "INFO", section, NULL);
	r = cl_reply(c);
	p = r ? strstr(r, field) : NULL;
	return p ? atoll(p + strlen(field)) : -1;
}

#endif
