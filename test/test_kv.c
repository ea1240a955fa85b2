/* SPDX-License-Identifier: MIT */
/*
 * tools/kv (corio-kv): the RESP parser cut at every byte, then the real server
 * (kv_shard_main(), in this process, 1 and 2 shards) driven over 127.0.0.1
 * by a small RESP client running in a fiber: every command, pipelines whose
 * keys live on both shards answered in order, expiry (lazy and the active
 * sweep), malformed input, the limits (bulk length, multi-bulk count, query
 * buffer, output, maxmemory), and redis-cli / redis-benchmark when they are
 * installed. Each runtime ends with no fd left open (th_run()).
 */
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

/* ---- the parser alone ------------------------------------------------------------ */

/* Parse all of in[0..n) fed in pieces cut at cuts[]; the arguments of every
 * command, as "arg|arg|\n" lines, go to out. Returns the last parse result. */
static int parse_cut(const char *in, size_t n, const size_t *cuts, int ncuts, const struct kv_limits *lim,
		     char *out, size_t outsz)
{
	struct kv_argv av = { 0 };
	size_t have = 0, pos = 0, olen = 0, used, need;
	char err[160];
	int r = RESP_MORE;

	out[0] = 0;
	for (int i = 0; i <= ncuts; i++) {
		have = i < ncuts ? cuts[i] : n;
		for (;;) {
			av.n = 0;
			r = resp_parse(in + pos, have - pos, lim, &av, &used, &need, err, sizeof(err));
			if (r != RESP_CMD)
				break;
			cr_assert(need > 0 || 1);
			for (size_t a = 0; a < av.n; a++)
				olen += (size_t)snprintf(out + olen, outsz - olen, "%.*s|", (int)av.v[a].n,
							 av.v[a].p);
			olen += (size_t)snprintf(out + olen, outsz - olen, "\n");
			pos += used;
		}
		if (r == RESP_ERR) {
			olen += (size_t)snprintf(out + olen, outsz - olen, "ERR %s\n", err);
			break;
		}
		cr_assert(r == RESP_MORE);
		cr_assert(need > have - pos, "need %zu with %zu bytes", need, have - pos);
	}
	free(av.v);
	return r;
}

Test(kv, parser_every_split)
{
	static const char in[] = "*3\r\n$3\r\nSET\r\n$1\r\na\r\n$5\r\nhe\r\no\r\n"
				 "PING  hi\r\nget\ta\n\r\n*0\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\n"
				 "*1\r\n$4\r\nPING\r\n";
	static const char want[] = "SET|a|he\r\no|\nPING|hi|\nget|a|\n\n\nECHO||\nPING|\n";
	struct kv_limits lim;
	size_t n = sizeof(in) - 1;
	char out[1024];

	kv_limits_default(&lim);
	for (size_t a = 0; a <= n; a++) {
		for (size_t b = a; b <= n; b++) {
			size_t cuts[2] = { a, b };

			parse_cut(in, n, cuts, 2, &lim, out, sizeof(out));
			cr_assert_str_eq(out, want, "cuts %zu %zu", a, b);
		}
	}
}

Test(kv, parser_errors)
{
	static const struct {
		const char *in, *err;
	} cases[] = {
		{ "*abc\r\n", "Protocol error: invalid multibulk length" },
		{ "*1\r\r", "Protocol error: invalid multibulk length" },
		{ "*1\r\n+foo\r\n", "Protocol error: expected '$', got '+'" },
		{ "*1\r\n\x01", "Protocol error: expected '$', got '\\x01'" },
		{ "*1\r\n$-5\r\n", "Protocol error: invalid bulk length" },
		{ "*1\r\n$01\r\n", "Protocol error: invalid bulk length" },
		{ "*1\r\n$3\r\nabcXY", "Protocol error: expected CRLF after a bulk string" },
		{ "*1\r\n$2000\r\n", "Protocol error: invalid bulk length" },  /* over 1024 */
		{ "*2000\r\n", "Protocol error: invalid multibulk length" },    /* over 100 */
		{ "*99999999999999999999\r\n", "Protocol error: invalid multibulk length" },
	};
	struct kv_limits lim;
	char out[1024];

	kv_limits_default(&lim);
	lim.proto_max_bulk_len = 1024;
	lim.max_multibulk = 100;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char want[256];

		snprintf(want, sizeof(want), "ERR %s\n", cases[i].err);
		cr_assert_eq(parse_cut(cases[i].in, strlen(cases[i].in), NULL, 0, &lim, out, sizeof(out)),
			     RESP_ERR, "case %zu", i);
		cr_assert_str_eq(out, want, "case %zu", i);
	}
	/* lines without an end: more until the 64 KiB line limit, then an error */
	{
		size_t n = KV_MAX_LINE + 2;
		char *big = malloc(n);

		memset(big, 'a', n);
		cr_assert_eq(parse_cut(big, KV_MAX_LINE, NULL, 0, &lim, out, sizeof(out)), RESP_MORE);
		cr_assert_eq(parse_cut(big, n, NULL, 0, &lim, out, sizeof(out)), RESP_ERR);
		cr_assert_str_eq(out, "ERR Protocol error: too big inline request\n");
		big[0] = '*';
		cr_assert_eq(parse_cut(big, n, NULL, 0, &lim, out, sizeof(out)), RESP_ERR);
		cr_assert_str_eq(out, "ERR Protocol error: too big mbulk count string\n");
		free(big);
	}
}

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
static long reply_len(const char *p, size_t n)
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

static struct cl *cl_open(int port)
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

static void cl_close(struct cl *c)
{
	if (!c)
		return;
	corio_close(c->s);
	kv_buf_free(&c->out);
	free(c->last);
	free(c);
}

/* Queue one command (strings; NULL ends them). */
static void cl_cmd(struct cl *c, ...)
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

static void cl_raw(struct cl *c, const char *p, size_t n)
{
	kv_put(&c->out, p, n);
}

static void cl_flush(struct cl *c)
{
	if (c->out.len)
		CHECK_EQ(corio_send(c->s, c->out.p, c->out.len), (long long)c->out.len);
	c->out.len = 0;
}

/* The next reply, or NULL (connection closed, timed out, invalid). */
static const char *cl_reply(struct cl *c)
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
static int cl_closed(struct cl *c)
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

static void expect_at(struct cl *c, const char *want, const char *file, int line)
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
static void expect_has_at(struct cl *c, const char *needle, const char *file, int line)
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
static void expect_ttl_at(struct cl *c, long secs, const char *file, int line)
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

static int client_fiber(void *arg)
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

static void test_entry(void *arg)
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
static void run_kv(unsigned shards, const struct kv_limits *lim, void (*body)(struct kv_test *))
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
static int cl_shard(struct cl *c)
{
	const char *r;

	cl_cmd(c, "CLIENT", "INFO", NULL);
	r = cl_reply(c);
	r = r ? strstr(r, "shard=") : NULL;
	return r ? atoi(r + 6) : -1;
}

/* A key named prefix-N owned by shard. */
static void key_on(struct kv_server *srv, unsigned shard, const char *prefix, int from, char *out,
		   size_t n)
{
	for (int i = from;; i++) {
		snprintf(out, n, "%s-%d", prefix, i);
		if (kv_owner(srv, kv_hash(srv->seed, out, strlen(out))) == shard)
			return;
	}
}

/* ---- every command ----------------------------------------------------------------- */

static void all_commands(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	char k0[32], k1[32];

	if (!c)
		return;
	key_on(&t->srv, 0, "k", 0, k0, sizeof(k0));
	key_on(&t->srv, t->srv.nshards - 1, "j", 0, k1, sizeof(k1));

	cl_cmd(c, "PING", NULL);
	EXPECT(c, "+PONG\r\n");
	cl_cmd(c, "ping", "hello", NULL);
	EXPECT(c, "$5\r\nhello\r\n");
	cl_cmd(c, "PING", "a", "b", NULL);
	EXPECT(c, "-ERR wrong number of arguments for 'ping' command\r\n");
	cl_cmd(c, "ECHO", "", NULL);
	EXPECT(c, "$0\r\n\r\n");

	/* GET / SET and its options */
	cl_cmd(c, "GET", k0, NULL);
	EXPECT(c, "$-1\r\n");
	cl_cmd(c, "SET", k0, "v0", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "SET", k1, "v1", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "GET", k0, NULL);
	EXPECT(c, "$2\r\nv0\r\n");
	cl_cmd(c, "GET", k1, NULL);
	EXPECT(c, "$2\r\nv1\r\n");
	cl_cmd(c, "SET", k0, "x", "NX", NULL);
	EXPECT(c, "$-1\r\n");
	cl_cmd(c, "SET", "new", "x", "XX", NULL);
	EXPECT(c, "$-1\r\n");
	cl_cmd(c, "SET", k0, "v00", "XX", "GET", NULL);
	EXPECT(c, "$2\r\nv0\r\n");
	cl_cmd(c, "SET", "fresh", "f", "NX", "GET", NULL);
	EXPECT(c, "$-1\r\n");
	cl_cmd(c, "GET", "fresh", NULL);
	EXPECT(c, "$1\r\nf\r\n");
	cl_cmd(c, "SET", k0, "x", "NX", "XX", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "SET", k0, "x", "EX", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "SET", k0, "x", "EX", "0", NULL);
	EXPECT(c, "-ERR invalid expire time in 'set' command\r\n");
	cl_cmd(c, "SET", k0, "x", "PX", "abc", NULL);
	EXPECT(c, "-ERR value is not an integer or out of range\r\n");
	cl_cmd(c, "SET", k0, "x", "EX", "100", "PX", "100", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "SET", k0, "ttl", "EX", "100", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "TTL", k0, NULL);
	EXPECT_TTL(c, 100);
	cl_cmd(c, "SET", k0, "keep", "KEEPTTL", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "TTL", k0, NULL);
	EXPECT_TTL(c, 100);
	cl_cmd(c, "SET", k0, "nottl", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "TTL", k0, NULL);
	EXPECT(c, ":-1\r\n");
	cl_cmd(c, "GET", NULL);
	EXPECT(c, "-ERR wrong number of arguments for 'get' command\r\n");
	cl_cmd(c, "SET", "a", NULL);
	EXPECT(c, "-ERR wrong number of arguments for 'set' command\r\n");
	cl_cmd(c, "NOSUCH", "x\r\ny", "b", NULL);
	EXPECT(c, "-ERR unknown command 'NOSUCH', with args beginning with: 'x  y' 'b' \r\n");

	/* INCR family */
	cl_cmd(c, "INCR", "n", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "INCRBY", "n", "41", NULL);
	EXPECT(c, ":42\r\n");
	cl_cmd(c, "DECR", "n", NULL);
	EXPECT(c, ":41\r\n");
	cl_cmd(c, "DECRBY", "n", "-9", NULL);
	EXPECT(c, ":50\r\n");
	cl_cmd(c, "INCRBY", "n", "x", NULL);
	EXPECT(c, "-ERR value is not an integer or out of range\r\n");
	cl_cmd(c, "INCR", k1, NULL);
	EXPECT(c, "-ERR value is not an integer or out of range\r\n");
	cl_cmd(c, "SET", "big", "9223372036854775807", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "INCR", "big", NULL);
	EXPECT(c, "-ERR increment or decrement would overflow\r\n");
	cl_cmd(c, "GET", "n", NULL);
	EXPECT(c, "$2\r\n50\r\n");

	/* multi-key */
	cl_cmd(c, "MSET", k0, "a", k1, "b", "m3", "c", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "MSET", k0, "a", k1, NULL);
	EXPECT(c, "-ERR wrong number of arguments for 'mset' command\r\n");
	cl_cmd(c, "MGET", k0, "nope", k1, "m3", NULL);
	EXPECT(c, "*4\r\n$1\r\na\r\n$-1\r\n$1\r\nb\r\n$1\r\nc\r\n");
	cl_cmd(c, "EXISTS", k0, k1, k0, "nope", NULL);
	EXPECT(c, ":3\r\n");
	cl_cmd(c, "DBSIZE", NULL);
	EXPECT(c, ":6\r\n"); /* k0 k1 fresh n big m3 */
	cl_cmd(c, "DEL", k0, k1, "nope", NULL);
	EXPECT(c, ":2\r\n");
	cl_cmd(c, "EXISTS", k0, k1, NULL);
	EXPECT(c, ":0\r\n");

	/* expiry commands */
	cl_cmd(c, "TTL", "nope", NULL);
	EXPECT(c, ":-2\r\n");
	cl_cmd(c, "PTTL", "m3", NULL);
	EXPECT(c, ":-1\r\n");
	cl_cmd(c, "EXPIRE", "m3", "50", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "EXPIRE", "m3", "10", "GT", NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "EXPIRE", "m3", "10", "LT", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "TTL", "m3", NULL);
	EXPECT_TTL(c, 10);
	cl_cmd(c, "EXPIRE", "m3", "10", "NX", NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "EXPIRE", "m3", "10", "NX", "XX", NULL);
	EXPECT(c, "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n");
	cl_cmd(c, "PEXPIRE", "m3", "20000", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "TTL", "m3", NULL);
	EXPECT_TTL(c, 20);
	cl_cmd(c, "PERSIST", "m3", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "PERSIST", "m3", NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "EXPIRE", "nope", "10", NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "EXPIRE", "m3", "x", NULL);
	EXPECT(c, "-ERR value is not an integer or out of range\r\n");
	cl_cmd(c, "EXPIRE", "m3", "9223372036854775807", NULL);
	EXPECT(c, "-ERR invalid expire time in 'expire' command\r\n");
	cl_cmd(c, "EXPIRE", "m3", "-1", NULL); /* in the past: deleted */
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "EXISTS", "m3", NULL);
	EXPECT(c, ":0\r\n");

	/* server commands */
	cl_cmd(c, "INFO", NULL);
	EXPECT_HAS(c, "redis_version:");
	cl_cmd(c, "INFO", "keyspace", NULL);
	EXPECT_HAS(c, "db0:keys=3,"); /* fresh n big */
	cl_cmd(c, "INFO", "memory", NULL);
	EXPECT_HAS(c, "used_memory:");
	cl_cmd(c, "INFO", "corio", NULL);
	EXPECT_HAS(c, t->srv.nshards == 2 ? "shard1:" : "shard0:");
	cl_cmd(c, "INFO", "stats", NULL);
	EXPECT_HAS(c, "total_commands_processed:");
	cl_cmd(c, "INFO", "clients", NULL);
	EXPECT_HAS(c, "connected_clients:1\r\n");
	cl_cmd(c, "CONFIG", "GET", "save", NULL);
	EXPECT(c, "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
	cl_cmd(c, "CONFIG", "GET", "appendonly", NULL);
	EXPECT(c, "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
	cl_cmd(c, "CONFIG", "GET", "nosuch", NULL);
	EXPECT(c, "*0\r\n");
	cl_cmd(c, "CONFIG", "SET", "a", "b", NULL);
	EXPECT(c, "-ERR Unknown option or number of arguments for CONFIG SET - 'a'\r\n");
	cl_cmd(c, "COMMAND", "DOCS", NULL); /* COUNT and INFO: command_table_*, diff_command_table */
	EXPECT_HAS(c, "$3\r\nget\r\n*2\r\n$5\r\ngroup\r\n$6\r\nstring\r\n");
	cl_cmd(c, "COMMAND", NULL);
	EXPECT_HAS(c, "*10\r\n$3\r\nget\r\n");
	cl_cmd(c, "CLIENT", "GETNAME", NULL);
	EXPECT(c, "$-1\r\n");
	cl_cmd(c, "CLIENT", "SETNAME", "bob", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "CLIENT", "SETNAME", "b b", NULL);
	EXPECT(c, "-ERR Client names cannot contain spaces, newlines or special characters.\r\n");
	cl_cmd(c, "CLIENT", "GETNAME", NULL);
	EXPECT(c, "$3\r\nbob\r\n");
	cl_cmd(c, "SELECT", "0", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "SELECT", "1", NULL);
	EXPECT(c, "-ERR DB index is out of range\r\n");
	cl_cmd(c, "FLUSHALL", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "DBSIZE", NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "GET", "n", NULL);
	EXPECT(c, "$-1\r\n");

	/* inline commands, LF or CRLF */
	{
		static const char il[] = "SET il 7\r\nget il\nINCR   il  \r\n\r\n";

		cl_raw(c, il, sizeof(il) - 1);
	}
	EXPECT(c, "+OK\r\n");
	EXPECT(c, "$1\r\n7\r\n");
	EXPECT(c, ":8\r\n");

	/* QUIT: +OK, then the server closes; commands after it are not run */
	cl_cmd(c, "QUIT", NULL);
	cl_cmd(c, "SET", "after-quit", "1", NULL);
	EXPECT(c, "+OK\r\n");
	CHECK(cl_closed(c));
	cl_close(c);

	c = cl_open(t->port);
	cl_cmd(c, "EXISTS", "after-quit", NULL);
	EXPECT(c, ":0\r\n");
	cl_close(c);
}

Test(kv, every_command_1_shard, .timeout = 60)
{
	run_kv(1, NULL, all_commands);
}

Test(kv, every_command_2_shards, .timeout = 60)
{
	run_kv(2, NULL, all_commands);
}

/* ---- answers checked against redis-server 7.0.15 ------------------------------------ */

/* FLUSHALL/FLUSHDB take only ASYNC or SYNC (a typo must not wipe the data);
 * EXPIRE in the past, however far, deletes; SET takes EXAT and PXAT, lets
 * an option repeat (the last expiry wins) and refuses conflicting ones.
 * Every expected reply below is what redis-server 7.0.15 answered. */
static void redis_answers(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	char k[32];

	if (!c)
		return;
	key_on(&t->srv, t->srv.nshards - 1, "r", 0, k, sizeof(k));
	cl_cmd(c, "SET", k, "v", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "FLUSHALL", "FOO", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "FLUSHDB", "x", "y", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "FLUSHALL", "SYNC", "ASYNC", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "DBSIZE", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "FLUSHALL", "async", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "DBSIZE", NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "FLUSHDB", "SYNC", NULL);
	EXPECT(c, "+OK\r\n");

	/* EXPIRE far in the past deletes; past LLONG_MIN as ms it is refused */
	cl_cmd(c, "SET", k, "v", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "EXPIRE", k, "-9223372036854775", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "EXISTS", k, NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "SET", k, "v", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "EXPIRE", k, "-9223372036854776", NULL);
	EXPECT(c, "-ERR invalid expire time in 'expire' command\r\n");
	cl_cmd(c, "PEXPIRE", k, "-9223372036854775808", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "EXISTS", k, NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "SET", k, "v", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "EXPIRE", k, "-5", "GT", NULL); /* no TTL counts as forever */
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "EXPIRE", k, "0", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "EXISTS", k, NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "SET", k, "v", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "EXPIRE", k, "9223372036854775", NULL); /* fits as ms, not once now is added */
	EXPECT(c, "-ERR invalid expire time in 'expire' command\r\n");

	/* SET's options */
	cl_cmd(c, "SET", k, "v", "EX", "10", "EX", "20", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "TTL", k, NULL);
	EXPECT_TTL(c, 20);
	cl_cmd(c, "SET", k, "v", "EX", "abc", "EX", "30", NULL); /* only the last is read */
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "TTL", k, NULL);
	EXPECT_TTL(c, 30);
	cl_cmd(c, "SET", k, "v", "EX", "10", "PX", "20", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "SET", k, "v", "EXAT", "10", "EX", "5", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "SET", k, "v", "KEEPTTL", "EX", "5", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "SET", k, "v", "EX", "10", "KEEPTTL", NULL);
	EXPECT(c, "-ERR syntax error\r\n");
	cl_cmd(c, "SET", k, "v", "NX", "NX", "GET", "GET", NULL);
	EXPECT(c, "$1\r\nv\r\n");
	cl_cmd(c, "SET", k, "v", "EXAT", "99999999999", NULL); /* year 5138 */
	EXPECT(c, "+OK\r\n");
	{
		const char *r;

		cl_cmd(c, "TTL", k, NULL);
		r = cl_reply(c);
		CHECK(r && atoll(r + 1) > 90000000000ll && atoll(r + 1) < 99999999999ll);
	}
	cl_cmd(c, "SET", k, "old", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "SET", k, "v", "PXAT", "1", "GET", NULL); /* 1970: stored and gone */
	EXPECT(c, "$3\r\nold\r\n");
	cl_cmd(c, "EXISTS", k, NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "SET", k, "v", "EXAT", "0", NULL);
	EXPECT(c, "-ERR invalid expire time in 'set' command\r\n");
	cl_cmd(c, "SET", k, "v", "EXAT", "9223372036854776", NULL);
	EXPECT(c, "-ERR invalid expire time in 'set' command\r\n");
	cl_cmd(c, "SET", k, "v", "PXAT", "9223372036854775807", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "SET", k, "v", "PX", "9223372036854775807", NULL);
	EXPECT(c, "-ERR invalid expire time in 'set' command\r\n");
	cl_close(c);
}

Test(kv, flush_expire_set_answer_as_redis, .timeout = 60)
{
	run_kv(2, NULL, redis_answers);
}

/* HELLO's facts (the flat array of RESP2, the map of RESP3) for connection id. */
static void hello_reply(char *out, size_t n, int proto, const char *id)
{
	snprintf(out, n,
		 "%s\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n"
		 "$5\r\nproto\r\n:%d\r\n$2\r\nid\r\n:%s\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
		 "$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
		 proto == 3 ? "%7" : "*14", proto, id);
}

/* HELLO as redis 7.0 answers it; HELLO 3 switches to RESP3 for the
 * commands after it in the same send, those another shard runs included. */
static void hello(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	char want2[512], want3[512], k[32], id[24] = "";
	const char *r;
	int sh;

	if (!c)
		return;
	sh = cl_shard(c);
	key_on(&t->srv, (unsigned)(sh + 1) % t->srv.nshards, "h", 0, k, sizeof(k));
	cl_cmd(c, "CLIENT", "ID", NULL);
	r = cl_reply(c);
	if (r)
		snprintf(id, sizeof(id), "%.*s", (int)strcspn(r + 1, "\r"), r + 1);
	hello_reply(want2, sizeof(want2), 2, id);
	hello_reply(want3, sizeof(want3), 3, id);
	cl_cmd(c, "HELLO", NULL);
	EXPECT(c, want2);
	cl_cmd(c, "HELLO", "2", NULL);
	EXPECT(c, want2);
	cl_cmd(c, "HELLO", "4", NULL);
	EXPECT(c, "-NOPROTO unsupported protocol version\r\n");
	cl_cmd(c, "HELLO", "1", NULL);
	EXPECT(c, "-NOPROTO unsupported protocol version\r\n");
	cl_cmd(c, "HELLO", "x", NULL);
	EXPECT(c, "-ERR Protocol version is not an integer or out of range\r\n");
	cl_cmd(c, "HELLO", "3", "FOO", NULL);
	EXPECT(c, "-ERR Syntax error in HELLO option 'FOO'\r\n");
	cl_cmd(c, "HELLO", "3", "AUTH", "a", NULL);
	EXPECT(c, "-ERR Syntax error in HELLO option 'AUTH'\r\n");
	cl_cmd(c, "HELLO", "3", "AUTH", "bob", "pw", NULL);
	EXPECT(c, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
	cl_cmd(c, "GET", k, NULL); /* none of those switched */
	EXPECT(c, "$-1\r\n");
	cl_cmd(c, "HELLO", "2", "AUTH", "default", "pw", "SETNAME", "joe", NULL);
	EXPECT(c, want2);
	cl_cmd(c, "CLIENT", "GETNAME", NULL);
	EXPECT(c, "$3\r\njoe\r\n");
	cl_cmd(c, "HELLO", "3", "SETNAME", "ann", "bad", NULL); /* the name before the error stays */
	EXPECT(c, "-ERR Syntax error in HELLO option 'bad'\r\n");
	cl_cmd(c, "CLIENT", "GETNAME", NULL);
	EXPECT(c, "$3\r\nann\r\n");

	/* one send: HELLO 3, then keys of another shard */
	cl_cmd(c, "HELLO", "3", NULL);
	cl_cmd(c, "GET", k, NULL);
	cl_cmd(c, "MGET", k, k, NULL);
	cl_cmd(c, "SET", k, "v", "NX", "GET", NULL);
	cl_cmd(c, "SET", k, "v", "NX", NULL);
	EXPECT(c, want3);
	EXPECT(c, "_\r\n");
	EXPECT(c, "*2\r\n_\r\n_\r\n");
	EXPECT(c, "_\r\n");
	EXPECT(c, "_\r\n");
	cl_cmd(c, "CONFIG", "GET", "save", NULL);
	EXPECT(c, "%1\r\n$4\r\nsave\r\n$0\r\n\r\n");
	cl_cmd(c, "COMMAND", "INFO", "nosuch", NULL);
	EXPECT(c, "*1\r\n_\r\n");
	cl_cmd(c, "INFO", "keyspace", NULL);
	EXPECT_HAS(c, "txt:# Keyspace\r\ndb0:keys=1,");
	CHECK(c->last && c->last[0] == '=');
	cl_cmd(c, "HELLO", "2", NULL);
	cl_cmd(c, "GET", "nope", NULL);
	EXPECT(c, want2);
	EXPECT(c, "$-1\r\n");
	cl_close(c);
}

Test(kv, hello_and_resp3, .timeout = 60)
{
	run_kv(2, NULL, hello);
}

/* MULTI queues, EXEC runs (keys on both shards), as redis 7.0 answers. */
static void transactions(struct kv_test *t)
{
	struct cl *c = cl_open(t->port), *o = cl_open(t->port);
	char k0[32], k1[32], want[64];

	if (!c || !o)
		return;
	key_on(&t->srv, 0, "t", 0, k0, sizeof(k0));
	key_on(&t->srv, t->srv.nshards - 1, "u", 0, k1, sizeof(k1));
	/* queued, not run: another client sees nothing until EXEC */
	cl_cmd(c, "MULTI", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "SET", k0, "1", NULL);
	EXPECT(c, "+QUEUED\r\n");
	cl_cmd(c, "INCR", k0, NULL);
	EXPECT(c, "+QUEUED\r\n");
	cl_cmd(c, "INCR", k1, NULL);
	EXPECT(c, "+QUEUED\r\n");
	cl_cmd(o, "MGET", k0, k1, NULL);
	EXPECT(o, "*2\r\n$-1\r\n$-1\r\n");
	cl_cmd(c, "EXEC", NULL);
	EXPECT(c, "*3\r\n+OK\r\n:2\r\n:1\r\n");
	cl_cmd(o, "MGET", k0, k1, NULL);
	EXPECT(o, "*2\r\n$1\r\n2\r\n$1\r\n1\r\n");

	/* as redis-py's pipeline() sends it: one send, commands around it */
	cl_cmd(c, "SET", "before", "b", NULL);
	cl_cmd(c, "MULTI", NULL);
	cl_cmd(c, "INCR", k0, NULL);
	cl_cmd(c, "GET", "before", NULL);
	cl_cmd(c, "INCR", k1, NULL);
	cl_cmd(c, "EXEC", NULL);
	cl_cmd(c, "GET", k1, NULL);
	EXPECT(c, "+OK\r\n");
	EXPECT(c, "+OK\r\n");
	for (int i = 0; i < 3; i++)
		EXPECT(c, "+QUEUED\r\n");
	EXPECT(c, "*3\r\n:3\r\n$1\r\nb\r\n:2\r\n");
	EXPECT(c, "$1\r\n2\r\n");

	/* refused when queued: EXEC aborts, nothing is applied */
	cl_cmd(c, "MULTI", NULL);
	cl_cmd(c, "SET", k0, "x", NULL);
	cl_cmd(c, "NOSUCH", "a", NULL);
	cl_cmd(c, "GET", NULL);
	cl_cmd(c, "EXEC", NULL);
	EXPECT(c, "+OK\r\n");
	EXPECT(c, "+QUEUED\r\n");
	EXPECT(c, "-ERR unknown command 'NOSUCH', with args beginning with: 'a' \r\n");
	EXPECT(c, "-ERR wrong number of arguments for 'get' command\r\n");
	EXPECT(c, "-EXECABORT Transaction discarded because of previous errors.\r\n");
	cl_cmd(c, "GET", k0, NULL);
	EXPECT(c, "$1\r\n3\r\n");
	/* failing when run: the error in the array, the others applied */
	cl_cmd(c, "MULTI", NULL);
	cl_cmd(c, "SET", "s", "str", NULL);
	cl_cmd(c, "INCR", "s", NULL);
	cl_cmd(c, "SET", k1, "new", "EX", "10", "PX", "5", NULL);
	cl_cmd(c, "SET", k1, "new", NULL);
	cl_cmd(c, "EXEC", NULL);
	EXPECT(c, "+OK\r\n");
	for (int i = 0; i < 4; i++)
		EXPECT(c, "+QUEUED\r\n");
	EXPECT(c, "*4\r\n+OK\r\n-ERR value is not an integer or out of range\r\n"
		  "-ERR syntax error\r\n+OK\r\n");
	cl_cmd(o, "GET", k1, NULL);
	EXPECT(o, "$3\r\nnew\r\n");

	/* nesting, EXEC and DISCARD without MULTI, DISCARD drops the queue */
	cl_cmd(c, "MULTI", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "MULTI", NULL);
	EXPECT(c, "-ERR MULTI calls can not be nested\r\n");
	cl_cmd(c, "SET", "d", "1", NULL);
	EXPECT(c, "+QUEUED\r\n");
	cl_cmd(c, "DISCARD", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "EXISTS", "d", NULL);
	EXPECT(c, ":0\r\n");
	cl_cmd(c, "EXEC", NULL);
	EXPECT(c, "-ERR EXEC without MULTI\r\n");
	cl_cmd(c, "DISCARD", NULL);
	EXPECT(c, "-ERR DISCARD without MULTI\r\n");
	cl_cmd(c, "MULTI", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "EXEC", NULL);
	EXPECT(c, "*0\r\n");
	cl_cmd(c, "MULTI", NULL);
	cl_cmd(c, "SET", "d", "1", NULL);
	cl_cmd(c, "EXEC", "x", NULL); /* aborts at once */
	cl_cmd(c, "EXEC", NULL);
	cl_cmd(c, "EXISTS", "d", NULL);
	EXPECT(c, "+OK\r\n");
	EXPECT(c, "+QUEUED\r\n");
	EXPECT(c, "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n");
	EXPECT(c, "-ERR EXEC without MULTI\r\n");
	EXPECT(c, ":0\r\n");

	/* more commands than one batch holds, in one send */
	cl_cmd(c, "DEL", k0, k1, NULL);
	EXPECT(c, ":2\r\n");
	cl_cmd(c, "MULTI", NULL);
	for (int i = 0; i < 3 * KV_BATCH_CMDS; i++)
		cl_cmd(c, "INCR", i % 2 ? k1 : k0, NULL);
	cl_cmd(c, "EXEC", NULL);
	EXPECT(c, "+OK\r\n");
	for (int i = 0; i < 3 * KV_BATCH_CMDS; i++)
		EXPECT(c, "+QUEUED\r\n");
	CHECK(cl_reply(c) && !strncmp(c->last, "*768\r\n:1\r\n:1\r\n:2\r\n:2\r\n", 22));
	snprintf(want, sizeof(want), ":%d\r\n:%d\r\n", 3 * KV_BATCH_CMDS / 2, 3 * KV_BATCH_CMDS / 2);
	CHECK(c->last && c->last_len > strlen(want) &&
	      !strcmp(c->last + c->last_len - strlen(want), want));
	cl_close(o);
	cl_close(c);
}

Test(kv, multi_exec_discard, .timeout = 60)
{
	run_kv(2, NULL, transactions);
}

/* ---- pipelines whose keys live on both shards --------------------------------------- */

#define PIPE_N 300

static void pipeline_body(struct kv_test *t, struct cl *c)
{
	char key[PIPE_N][32];

	for (int i = 0; i < PIPE_N; i++)
		key_on(&t->srv, (unsigned)(i % 2) % t->srv.nshards, "p", i * 1000, key[i], sizeof(key[i]));
	/* one send: SET, GET, INCR, MGET over both shards, DBSIZE in the middle */
	for (int i = 0; i < PIPE_N; i++) {
		char v[16];

		snprintf(v, sizeof(v), "%d", i);
		cl_cmd(c, "SET", key[i], v, NULL);
		cl_cmd(c, "GET", key[(i * 7) % (i + 1)], NULL);
		cl_cmd(c, "INCR", key[i], NULL);
		if (i % 50 == 49)
			cl_cmd(c, "DBSIZE", NULL);
		if (i >= 1)
			cl_cmd(c, "MGET", key[i], key[i - 1], "missing", NULL);
	}
	cl_flush(c);
	for (int i = 0; i < PIPE_N; i++) {
		char want[128];
		int j = (i * 7) % (i + 1);

		EXPECT(c, "+OK\r\n");
		/* key j was SET (and INCRed when j < i) earlier in this pipeline */
		snprintf(want, sizeof(want), "%d", j < i ? j + 1 : j);
		{
			char bulk[160];

			snprintf(bulk, sizeof(bulk), "$%zu\r\n%s\r\n", strlen(want), want);
			EXPECT(c, bulk);
		}
		snprintf(want, sizeof(want), ":%d\r\n", i + 1);
		EXPECT(c, want);
		if (i % 50 == 49) {
			snprintf(want, sizeof(want), ":%d\r\n", i + 1);
			EXPECT(c, want);
		}
		if (i >= 1) {
			char a[16], b[16];

			snprintf(a, sizeof(a), "%d", i + 1);
			snprintf(b, sizeof(b), "%d", i);
			snprintf(want, sizeof(want), "*3\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n$-1\r\n", strlen(a), a,
				 strlen(b), b);
			EXPECT(c, want);
		}
	}
	cl_cmd(c, "FLUSHALL", NULL);
	EXPECT(c, "+OK\r\n");
}

static void pipelines(struct kv_test *t)
{
	struct cl *on[2] = { NULL, NULL }, *extra[32];
	int nextra = 0;

	/* a connection on each shard (the kernel spreads them by address) */
	while (nextra < 32 && (!on[0] || (t->srv.nshards > 1 && !on[1]))) {
		struct cl *c = cl_open(t->port);
		int sh;

		if (!c)
			break;
		sh = cl_shard(c);
		CHECK(sh >= 0 && sh < (int)t->srv.nshards);
		if (sh >= 0 && sh < 2 && !on[sh])
			on[sh] = c;
		else
			extra[nextra++] = c;
	}
	CHECK(on[0] && (t->srv.nshards == 1 || on[1]));
	for (int s = 0; s < 2; s++) {
		if (on[s]) {
			pipeline_body(t, on[s]);
			cl_close(on[s]);
		}
	}
	while (nextra)
		cl_close(extra[--nextra]);
}

Test(kv, pipeline_mixed_ownership_in_order, .timeout = 60)
{
	run_kv(2, NULL, pipelines);
}

Test(kv, pipeline_1_shard, .timeout = 60)
{
	run_kv(1, NULL, pipelines);
}

/* Bytes that arrive one at a time still make the same replies. */
static void trickle(struct kv_test *t)
{
	static const char in[] = "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$3\r\nabc\r\nGET x\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n";
	struct cl *c = cl_open(t->port);

	for (size_t i = 0; i < sizeof(in) - 1; i++) {
		cl_raw(c, in + i, 1);
		cl_flush(c);
		corio_yield();
	}
	EXPECT(c, "+OK\r\n");
	EXPECT(c, "$3\r\nabc\r\n");
	EXPECT(c, "$2\r\nhi\r\n");
	cl_close(c);
}

Test(kv, bytes_one_at_a_time, .timeout = 60)
{
	run_kv(2, NULL, trickle);
}

/* A reply never waits for input: with the next command half received, the
 * replies before it go out (the loop holds replies back only while the
 * stream already holds the bytes its next look waits for). */
static void half_next_command(struct kv_test *t)
{
	static const char first[] = "PING\r\n*2\r\n$4\r\nECHO\r\n$5\r\nhel";
	struct cl *c = cl_open(t->port);

	cl_raw(c, first, sizeof(first) - 1); /* a bulk string cut short */
	cl_flush(c);
	EXPECT(c, "+PONG\r\n");
	cl_raw(c, "lo\r\n", 4);
	cl_flush(c);
	EXPECT(c, "$5\r\nhello\r\n");
	cl_raw(c, "PING\r\nECH", 9); /* a line whose end has not come */
	cl_flush(c);
	EXPECT(c, "+PONG\r\n");
	cl_raw(c, "O x\r\n", 5);
	cl_flush(c);
	EXPECT(c, "$1\r\nx\r\n");
	cl_close(c);
}

Test(kv, reply_not_held_while_the_next_command_is_half_received, .timeout = 60)
{
	run_kv(1, NULL, half_next_command);
}

/* ---- expiry -------------------------------------------------------------------------- */

static long long info_num(struct cl *c, const char *section, const char *field)
{
	const char *r, *p;

	cl_cmd(c, "INFO", section, NULL);
	r = cl_reply(c);
	p = r ? strstr(r, field) : NULL;
	return p ? atoll(p + strlen(field)) : -1;
}

static void expiry(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	char k[40];
	long long n = -1;

	/* lazy: read after the deadline; the timer never fires early, and the
	 * access itself checks the deadline, whatever the sweep has done (a
	 * second to live: a loaded machine can hold a shard off its CPU for
	 * hundreds of ms between the SET and the first GET) */
	cl_cmd(c, "SET", "lazy", "v", "PX", "1000", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "GET", "lazy", NULL);
	EXPECT(c, "$1\r\nv\r\n");
	corio_sleep_ns(1100000000);
	cl_cmd(c, "GET", "lazy", NULL);
	EXPECT(c, "$-1\r\n");
	cl_cmd(c, "TTL", "lazy", NULL);
	EXPECT(c, ":-2\r\n");

	/* active: 1000 keys on every shard expire without being touched; wait
	 * (bounded) until DBSIZE says the sweep removed them */
	for (int i = 0; i < 1000; i++) {
		snprintf(k, sizeof(k), "sweep-%d", i);
		cl_cmd(c, "SET", k, "v", "PX", i % 2 ? "20" : "25", NULL);
	}
	cl_cmd(c, "SET", "stays", "v", NULL);
	cl_cmd(c, "PEXPIRE", "stays", "600000", NULL);
	for (int i = 0; i < 1000; i++)
		EXPECT(c, "+OK\r\n");
	EXPECT(c, "+OK\r\n");
	EXPECT(c, ":1\r\n");
	for (int tries = 0; tries < 500; tries++) {
		const char *r;

		cl_cmd(c, "DBSIZE", NULL);
		r = cl_reply(c);
		n = r ? atoll(r + 1) : -1;
		if (n <= 1)
			break;
		corio_sleep_ns(10000000);
	}
	CHECK_EQ(n, 1);
	CHECK(info_num(c, "stats", "expired_keys:") >= 1001);
	CHECK_EQ(info_num(c, "keyspace", "expires="), 1);
	cl_cmd(c, "PERSIST", "stays", NULL);
	EXPECT(c, ":1\r\n");
	cl_close(c);
}

Test(kv, expiry_lazy_and_active, .timeout = 60)
{
	run_kv(2, NULL, expiry);
}

/* The tools' saturating conversions (tools/common/timing.h) at 2^63 scale. */
Test(kv, tool_time_conversions_saturate)
{
	cr_assert_eq(tool_ms_to_ns(1), 1000000ull);
	cr_assert_eq(tool_ms_to_ns(0), 0);
	cr_assert_eq(tool_ms_to_ns(-5), 0);
	cr_assert_eq(tool_ms_to_ns(18446744073709ll), 18446744073709000000ull); /* fits */
	cr_assert_eq(tool_ms_to_ns(18446744073710ll), UINT64_MAX);            /* does not */
	cr_assert_eq(tool_ms_to_ns(9223372036854000ll), UINT64_MAX); /* EXPIRE k 9223372036854 */
	cr_assert_eq(tool_ms_to_ns(INT64_MAX), UINT64_MAX);
	cr_assert_eq(tool_ns_mul_sat(1ull << 63, 2), UINT64_MAX);
	cr_assert_eq(tool_ns_mul_sat(1ull << 62, 2), 1ull << 63);
	cr_assert_eq(tool_s_to_ns(1.5), 1500000000ull);
	cr_assert_eq(tool_s_to_ns(-1), 0);
	cr_assert_eq(tool_s_to_ns(NAN), 0);
	cr_assert_eq(tool_s_to_ns(9223372036.854775808 * 2), UINT64_MAX);
	cr_assert_eq(tool_s_to_ns(1e300), UINT64_MAX);
	cr_assert_eq(tool_s_to_ns(INFINITY), UINT64_MAX);
}

/*
 * EXPIRE k 9223372036854 (seconds; Redis accepts it) used to overflow the
 * sweep's ms-to-ns conversion and arm its timer in the past: the timer
 * re-fired on every turn and the loop never served its sockets again. Now
 * the conversion saturates (the sweep is due "never"), and another client
 * is answered. One shard, in a forked child with a bounded wait: the bug
 * hangs the client fiber along with the server.
 */
static void huge_expire(struct kv_test *t)
{
	struct cl *c = cl_open(t->port), *d;
	uint64_t due;

	if (!c)
		return;
	cl_cmd(c, "SET", "far", "v", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "EXPIRE", "far", "9223372036854", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "PEXPIRE", "far", "9223372036854775", NULL); /* 2^63-scale ms */
	EXPECT(c, ":1\r\n");
	due = corio_timer_deadline(&t->srv.sh[0].sweep);
	CHECK(due == 0 || due > corio_now_ns() + 1000000000ull * 3600 * 24 * 365);
	d = cl_open(t->port);
	if (d) {
		cl_cmd(d, "PING", NULL);
		EXPECT(d, "+PONG\r\n");
		cl_cmd(d, "GET", "far", NULL);
		EXPECT(d, "$1\r\nv\r\n");
		cl_close(d);
	}
	cl_close(c);
}

static int huge_expire_child(void *arg)
{
	static struct kv_test t;
	struct corio_config cfg = th_cfg(1);
	int ret;

	(void)arg;
	kv_limits_default(&t.srv.lim);
	t.body = huge_expire;
	cfg.flags |= CORIO_F_NO_PIN;
	if (kv_server_init(&t.srv, 1))
		return 2;
	ret = corio_run(&cfg, test_entry, &t);
	if (atomic_load(&th_failures))
		fprintf(stderr, "%s\n", th_msg);
	return ret ? 3 : atomic_load(&th_failures) ? 4 : 0;
}

Test(kv, expire_near_2_to_63_does_not_starve_the_shard, .timeout = 60)
{
	th_child_ok(huge_expire_child, NULL, 20000, "EXPIRE k 9223372036854");
}

/* ---- malformed input and limits -------------------------------------------------------- */

struct bad_case {
	const char *in;
	size_t n;
	const char *want; /* the error reply, after the replies to what came before */
};

static void one_bad(struct kv_test *t, const char *pre, const char *in, size_t n, const char *want)
{
	struct cl *c = cl_open(t->port);

	if (!c)
		return;
	cl_raw(c, in, n);
	if (pre)
		EXPECT(c, pre);
	EXPECT(c, want);
	CHECK(cl_closed(c));
	cl_close(c);
}

static void malformed(struct kv_test *t)
{
	static const char big_inline_hdr[] = "SET x ";
	char *big;
	size_t bign = KV_MAX_LINE + 100;

	one_bad(t, NULL, "*abc\r\n", 6, "-ERR Protocol error: invalid multibulk length\r\n");
	one_bad(t, NULL, "*1\r\n+foo\r\n", 10, "-ERR Protocol error: expected '$', got '+'\r\n");
	one_bad(t, NULL, "*1\r\n$-5\r\n", 9, "-ERR Protocol error: invalid bulk length\r\n");
	one_bad(t, NULL, "*1\r\n$3\r\nabcXY", 13, "-ERR Protocol error: expected CRLF after a bulk string\r\n");
	/* the replies to the commands before the bad one come first */
	one_bad(t, "+PONG\r\n", "PING\r\n*x\r\n", 10, "-ERR Protocol error: invalid multibulk length\r\n");
	/* over the limits of this server: bulk 4096, multibulk 64, query buffer 64 KiB */
	one_bad(t, NULL, "*2\r\n$3\r\nGET\r\n$5000\r\n", 21, "-ERR Protocol error: invalid bulk length\r\n");
	one_bad(t, NULL, "*65\r\n", 5, "-ERR Protocol error: invalid multibulk length\r\n");
	{
		/* 20 args of 4000 bytes: each under the bulk limit, the whole over 64 KiB */
		struct kv_buf b = { 0 };
		char *arg = malloc(4000);

		memset(arg, 'z', 4000);
		kv_num(&b, '*', 20);
		for (int i = 0; i < 20; i++)
			kv_bulk(&b, arg, 4000);
		one_bad(t, NULL, b.p, b.len,
			"-ERR Protocol error: command larger than the query buffer limit (65536 bytes)\r\n");
		kv_buf_free(&b);
		free(arg);
	}
	big = malloc(bign);
	memcpy(big, big_inline_hdr, sizeof(big_inline_hdr) - 1);
	memset(big + sizeof(big_inline_hdr) - 1, 'q', bign - (sizeof(big_inline_hdr) - 1));
	one_bad(t, NULL, big, bign, "-ERR Protocol error: too big inline request\r\n");
	free(big);

	/* a client that leaves in the middle of a command, and random bytes:
	 * the server must neither crash nor leak (ASan and th_run watch) */
	{
		struct cl *c = cl_open(t->port);

		cl_raw(c, "*3\r\n$3\r\nSET\r\n$1\r\na\r\n$100\r\nabc", 30);
		cl_flush(c);
		cl_close(c);
	}
	{
		uint64_t x = 88172645463325252ull;

		for (int i = 0; i < 200; i++) {
			struct cl *c = cl_open(t->port);
			char buf[256];
			size_t n = 1 + (size_t)(i * 37 % 255);

			for (size_t j = 0; j < n; j++) {
				x ^= x << 13;
				x ^= x >> 7;
				x ^= x << 17;
				/* mostly protocol characters, so that parsing gets somewhere */
				buf[j] = "*$\r\n0123456789-+:ab \t"[x % 21];
				if (x % 97 == 0)
					buf[j] = (char)(x >> 8);
			}
			cl_raw(c, buf, n);
			cl_flush(c);
			cl_close(c);
		}
	}
	/* the server still answers */
	{
		struct cl *c = cl_open(t->port);

		cl_cmd(c, "PING", NULL);
		EXPECT(c, "+PONG\r\n");
		cl_close(c);
	}
}

Test(kv, malformed_input_and_protocol_limits, .timeout = 60)
{
	struct kv_limits lim;

	kv_limits_default(&lim);
	lim.proto_max_bulk_len = 4096;
	lim.max_multibulk = 64;
	lim.qbuf_limit = 64 * 1024;
	run_kv(2, &lim, malformed);
}

/* ---- output: bounded per connection, and a client that reads is never closed ---------- */

#define BIG_LEN (1 << 20) /* a value of 1 MiB */
#define BIG_N 300         /* replies of it asked for at once */

/*
 * Read n replies "$len\r\n" + len bytes of fill + "\r\n", after prefix (an
 * array header, or NULL), through the 64 KiB buffer without keeping them.
 * Returns how many matched whole: it stops at the first wrong byte, at end
 * of stream, or when nothing comes for 10 s.
 */
static long cl_read_values(struct cl *c, const char *prefix, long n, size_t len, char fill)
{
	char hdr[32];
	size_t hl = (size_t)snprintf(hdr, sizeof(hdr), "$%zu\r\n", len), one = hl + len + 2;
	size_t pl = prefix ? strlen(prefix) : 0;
	uint64_t total = pl + (uint64_t)n * one, pos = 0;

	cl_flush(c);
	while (pos < total) {
		size_t i = 0;

		if (!c->len) {
			struct corio_deadline d;
			ssize_t got;

			corio_timeout_push(&d, 10000000000ull);
			got = corio_recv(c->s, c->in, sizeof(c->in));
			corio_deadline_pop(&d);
			if (got <= 0)
				break;
			c->len = (size_t)got;
		}
		while (i < c->len && pos < total) {
			uint64_t r = pos >= pl ? (pos - pl) % one : 0;
			size_t run = 1;

			if (pos >= pl && r >= hl && r < hl + len) { /* a run of the value */
				run = hl + len - (size_t)r < c->len - i ? hl + len - (size_t)r : c->len - i;
				for (size_t j = 0; j < run; j++)
					if (c->in[i + j] != fill)
						goto out;
			} else if (c->in[i] != (pos < pl ? prefix[pos] : r < hl ? hdr[r] : "\r\n"[r - hl - len])) {
				goto out;
			}
			i += run;
			pos += run;
		}
		memmove(c->in, c->in + i, c->len - i);
		c->len -= i;
	}
out:
	return pos < pl ? 0 : (long)((pos - pl) / one);
}

/* Two keys of BIG_LEN 'v's, one on each shard. */
static void big_values(struct kv_test *t, struct cl *c, char k[2][32])
{
	char *v = malloc(BIG_LEN + 1);

	memset(v, 'v', BIG_LEN);
	v[BIG_LEN] = 0;
	for (unsigned i = 0; i < 2; i++) {
		key_on(&t->srv, i % t->srv.nshards, "big", 0, k[i], sizeof(k[i]));
		cl_cmd(c, "SET", k[i], v, NULL);
		EXPECT(c, "+OK\r\n");
	}
	free(v);
}

/* Pipelined GETs whose replies are 75 times the output limit: every reply
 * comes (before: the connection was closed with none). */
static void pipelined_big_gets(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	char k[2][32];

	if (!c)
		return;
	big_values(t, c, k);
	for (int i = 0; i < BIG_N; i++)
		cl_cmd(c, "GET", k[i % 2], NULL);
	CHECK_EQ(cl_read_values(c, NULL, BIG_N, BIG_LEN, 'v'), BIG_N);
	cl_cmd(c, "PING", NULL);
	EXPECT(c, "+PONG\r\n");
	CHECK(info_num(c, "stats", "client_output_flushes:") > 0);
	cl_close(c);
}

Test(kv, pipelined_replies_over_the_output_limit_all_arrive, .timeout = 120)
{
	struct kv_limits lim;

	kv_limits_default(&lim);
	lim.out_limit = 4 << 20;
	run_kv(2, &lim, pipelined_big_gets);
}

static void send_big_mget(struct cl *c, char k[2][32])
{
	kv_num(&c->out, '*', BIG_N + 1);
	kv_bulk(&c->out, "MGET", 4);
	for (int i = 0; i < BIG_N; i++)
		kv_bulk(&c->out, k[i % 2], strlen(k[i % 2]));
	cl_flush(c);
}

/* Wait (bounded) until INFO's field reaches want; its last value. */
static long long info_wait(struct cl *c, const char *section, const char *field, long long want)
{
	long long v = -1;

	for (int tries = 0; tries < 1000; tries++) {
		if ((v = info_num(c, section, field)) == want)
			break;
		corio_sleep_ns(10000000);
	}
	return v;
}

/*
 * One MGET of 300 MiB with a 4 MiB output limit: a client that never reads
 * leaves its connection waiting (not closed, holding no more), a slow reader
 * gets all of it, and no connection's reply buffers ever held more than
 * twice (limit + one value per shard) (before: 300 MiB, then a close).
 */
static void big_mget(struct kv_test *t)
{
	struct cl *c = cl_open(t->port), *idle = cl_open(t->port), *o = cl_open(t->port);
	long long bound = 2 * ((long long)t->srv.lim.out_limit + t->srv.nshards * (BIG_LEN + 64));
	long long peak;
	char k[2][32], hdr[16];

	if (!c || !idle || !o)
		return;
	big_values(t, o, k);
	send_big_mget(idle, k);
	CHECK_EQ(info_wait(o, "clients", "clients_waiting_output:", 1), 1);
	send_big_mget(c, k);
	corio_sleep_ns(200000000); /* slow: let the server fill what it can first */
	snprintf(hdr, sizeof(hdr), "*%d\r\n", BIG_N);
	CHECK_EQ(cl_read_values(c, hdr, BIG_N, BIG_LEN, 'v'), BIG_N);
	peak = info_num(o, "memory", "client_output_peak:");
	if (!(peak > BIG_LEN && peak <= bound)) {
		char m[128];

		snprintf(m, sizeof(m), "client_output_peak %lld, bound %lld", peak, bound);
		th_fail(__FILE__, __LINE__, m);
	}
	cl_close(idle); /* its connection ends: the send fails */
	CHECK_EQ(info_wait(o, "clients", "clients_waiting_output:", 0), 0);
	CHECK_EQ(info_wait(o, "clients", "connected_clients:", 2), 2);
	cl_close(c);
	cl_close(o);
}

Test(kv, huge_reply_bounded_per_connection, .timeout = 120)
{
	struct kv_limits lim;

	kv_limits_default(&lim);
	lim.out_limit = 4 << 20;
	run_kv(2, &lim, big_mget);
}

static void maxmemory(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	char k[32], v[1000];
	const char *r = NULL;
	int i;

	memset(v, 'm', sizeof(v) - 1);
	v[sizeof(v) - 1] = 0;
	unsigned full = 0, ok = 0; /* a bit per shard that refused a SET */

	/* each shard refuses once it holds more than its share: fill both */
	for (i = 0; i < 4000 && full != (1u << t->srv.nshards) - 1; i++) {
		snprintf(k, sizeof(k), "mm-%d", i);
		cl_cmd(c, "SET", k, v, NULL);
		r = cl_reply(c);
		if (r && !strcmp(r, "+OK\r\n")) {
			ok++;
			continue;
		}
		CHECK(r && !strcmp(r, "-OOM command not allowed when used memory > 'maxmemory'.\r\n"));
		full |= 1u << kv_owner(&t->srv, kv_hash(t->srv.seed, k, strlen(k)));
	}
	CHECK(ok > 100 && i < 4000);
	cl_cmd(c, "INCR", "counter", NULL);
	EXPECT_HAS(c, "-OOM ");
	cl_cmd(c, "MSET", "a", "1", "b", "2", "c", "3", "d", "4", NULL);
	EXPECT_HAS(c, "-OOM ");
	cl_cmd(c, "GET", "mm-0", NULL); /* reads still work */
	EXPECT_HAS(c, "$999\r\n");
	cl_cmd(c, "FLUSHALL", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "SET", "x", "1", NULL);
	EXPECT(c, "+OK\r\n");
	cl_close(c);
}

Test(kv, maxmemory_refuses_writes, .timeout = 60)
{
	struct kv_limits lim;

	kv_limits_default(&lim);
	lim.maxmemory = 2 * 200 * 1024; /* 200 KiB a shard */
	run_kv(2, &lim, maxmemory);
}

/* The table grows (incremental rehash) with keys on both shards. */
static void many_keys(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	char k[32], v[32];

	for (int i = 0; i < 20000; i++) {
		snprintf(k, sizeof(k), "key:%d", i);
		snprintf(v, sizeof(v), "%d", i * 3);
		cl_cmd(c, "SET", k, v, NULL);
		if (i % 500 == 499)
			for (int j = 0; j < 500; j++)
				EXPECT(c, "+OK\r\n");
	}
	cl_cmd(c, "DBSIZE", NULL);
	EXPECT(c, ":20000\r\n");
	for (int i = 0; i < 20000; i += 7) {
		char want[48];

		snprintf(k, sizeof(k), "key:%d", i);
		snprintf(v, sizeof(v), "%d", i * 3);
		snprintf(want, sizeof(want), "$%zu\r\n%s\r\n", strlen(v), v);
		cl_cmd(c, "GET", k, NULL);
		EXPECT(c, want);
	}
	cl_close(c);
}

Test(kv, many_keys_rehash, .timeout = 120)
{
	run_kv(2, NULL, many_keys);
}

static int run_cmd(const char *cmd, char *out, size_t n);
static void kv_idle_entry(void *arg);

/* ---- differential: the same commands to redis-server 7.0 and to corio-kv ---------- */

/*
 * The tests below start a redis-server of their own (skipping when it is not
 * installed), send it and corio-kv the same scripts, and compare the replies
 * byte for byte, in RESP2 and in RESP3 (HELLO 3 first), against 1 and 2
 * shards. A script is lines of words split at spaces ("" is an empty
 * argument, \s a space inside one); a line that starts with "~ " compares
 * only the type of the reply (its first byte: times, ids), "? " does not
 * compare, "! " wants corio-kv's reply (after the mark) and does not ask
 * redis (where corio-kv differs on purpose: its name, its errors); "3 "
 * (a digit) reads that many replies (SUBSCRIBE a b c) and compares them
 * all.
 */
static pid_t ref_pid;
static int ref_port;

static int free_tcp_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;

	if (fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void ref_stop(void);

/* Start the reference redis-server (extra: more arguments, NULL-ended). */
/* Is the server at 127.0.0.1:port our reference (its INFO names its pid)?
 * 1 yes, 0 something else answers there, -1 nothing listens yet. */
static int ref_is_ours(int port, pid_t pid, const char *pass)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = 2 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ret = -1;
	char buf[8192], want[48];
	size_t got = 0;

	if (fd < 0)
		return -1;
	if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		char info[160];
		int len = snprintf(info, sizeof(info), "%s%s%s*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n",
				   pass ? "AUTH " : "", pass ? pass : "", pass ? "\r\n" : "");
		ssize_t n;

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		ret = 0;
		if (write(fd, info, (size_t)len) == len) {
			snprintf(want, sizeof(want), "process_id:%d\r\n", (int)pid);
			while (got < sizeof(buf) - 1 && (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0) {
				got += (size_t)n;
				buf[got] = 0;
				if (strstr(buf, "# Clients") || strstr(buf, want))
					break;
			}
			buf[got] = 0;
			ret = strstr(buf, want) != NULL;
		}
	}
	close(fd);
	return ret;
}

/* Start the reference redis-server (extra: more arguments, NULL-ended) and
 * wait until it answers: a port picked free may be taken by another test
 * running at the same time before redis binds it, so the server that
 * answers must name our child's pid, or we start over on another port. */
static void ref_start(const char *extra, ...)
{
	char portstr[16];
	const char *argv[32] = { "redis-server", "--port", portstr, "--save", "", "--appendonly", "no",
				 "--bind", "127.0.0.1", "--logfile", "/dev/null", "--daemonize", "no" };
	const char *pass = NULL;
	int n = 13;
	va_list ap;

	if (system("command -v redis-server >/dev/null 2>&1") != 0)
		cr_skip_test("redis-server is not installed (apt-get install redis-server): "
			     "no reference to compare with");
	va_start(ap, extra);
	for (const char *a = extra; a && n < 31; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	for (int i = 13; i + 1 < n; i++)
		if (!strcmp(argv[i], "--requirepass"))
			pass = argv[i + 1];
	atexit(ref_stop); /* a failed assertion ends the test before its ref_stop() */
	for (int attempt = 0; attempt < 5; attempt++) {
		ref_port = free_tcp_port();
		cr_assert(ref_port > 0);
		snprintf(portstr, sizeof(portstr), "%d", ref_port);
		ref_pid = fork();
		cr_assert(ref_pid >= 0);
		if (ref_pid == 0) {
			int nul = open("/dev/null", O_RDWR);

			/* a test that fails, or is killed at its timeout, takes its
			 * reference down with it */
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
			execvp("redis-server", (char *const *)argv);
			_exit(127);
		}
		for (int i = 0; i < 500; i++) {
			int r = ref_is_ours(ref_port, ref_pid, pass);

			if (r == 1)
				return;
			if (r == 0 || waitpid(ref_pid, NULL, WNOHANG) == ref_pid)
				break; /* another server has the port, or ours died of it */
			usleep(10000);
		}
		ref_stop();
	}
	cr_assert_fail("redis-server did not start");
}

static void ref_stop(void)
{
	if (ref_pid > 0) {
		kill(ref_pid, SIGTERM);
		waitpid(ref_pid, NULL, 0); /* ECHILD if it already died: fine */
	}
	ref_pid = 0;
}

/* A connection to the reference server, once it accepts (5 s at most). */
static struct cl *ref_open(void)
{
	char where[32];

	snprintf(where, sizeof(where), "127.0.0.1:%d", ref_port);
	for (int i = 0; i < 500; i++) {
		struct corio_sock *s;

		if (corio_tcp_connect(where, &s) == 0) {
			struct cl *c = calloc(1, sizeof(*c));

			c->s = s;
			return c;
		}
		if (corio_sleep_ns(10000000) < 0)
			break;
	}
	CHECK(!"redis-server did not start");
	return NULL;
}

/* Queue the command of one script line (its words). */
static void cl_line(struct cl *c, const char *line)
{
	char w[64][256];
	const char *argv[65];
	int n = 0;

	for (const char *p = line; *p && n < 64;) {
		size_t len = 0;

		while (*p == ' ')
			p++;
		if (!*p)
			break;
		while (*p && *p != ' ' && len < sizeof(w[0]) - 1) {
			if (p[0] == '\\' && p[1] == 's') {
				w[n][len++] = ' ';
				p += 2;
			} else {
				w[n][len++] = *p++;
			}
		}
		w[n][len] = 0;
		if (!strcmp(w[n], "\"\""))
			w[n][0] = 0;
		argv[n] = w[n];
		n++;
	}
	kv_num(&c->out, '*', n);
	for (int i = 0; i < n; i++)
		kv_bulk(&c->out, argv[i], strlen(argv[i]));
}

/* The next n replies, concatenated (malloc), or none: a copy of dflt. */
static char *cl_replies(struct cl *c, int n, const char *dflt)
{
	struct kv_buf b = { 0 };

	for (int i = 0; i < n; i++) {
		const char *r = cl_reply(c);

		if (!r) {
			kv_buf_free(&b);
			return dflt ? strdup(dflt) : NULL;
		}
		kv_put(&b, r, strlen(r));
	}
	kv_put(&b, "", 1);
	return b.p;
}

/* Run a script (lines, NULL-ended) on both; every reply compared. */
static void diff_script_at(struct cl *kv, struct cl *ref, const char *const *lines, const char *file,
			   int line)
{
	for (int i = 0; lines[i]; i++) {
		const char *l = lines[i], *got;
		char *want = NULL, msg[440];
		int mode = 0; /* 0 exact, 1 type, 2 none, 3 literal */
		int replies = 1;

		if (l[0] >= '1' && l[0] <= '9' && l[1] == ' ') {
			replies = l[0] - '0';
			l += 2;
		}

		if ((l[0] == '~' || l[0] == '?' || l[0] == '!') && l[1] == ' ') {
			mode = l[0] == '~' ? 1 : l[0] == '?' ? 2 : 3;
			l += 2;
		}
		if (mode == 3) {
			const char *bar = strstr(l, " => ");

			if (!bar) {
				th_fail(file, line, "a ! line needs ' => reply'");
				return;
			}
			want = malloc(strlen(bar + 4) + 3);
			sprintf(want, "%s\r\n", bar + 4);
			{
				char cmd[512];

				snprintf(cmd, sizeof(cmd), "%.*s", (int)(bar - l), l);
				cl_line(kv, cmd);
			}
		} else {
			cl_line(kv, l);
			cl_line(ref, l);
			want = cl_replies(ref, replies, "(no reply from redis-server)");
		}
		got = replies > 1 ? cl_replies(kv, replies, NULL) : cl_reply(kv);
		if (!got || (mode == 0 && strcmp(got, want)) || (mode == 3 && strcmp(got, want)) ||
		    (mode == 1 && got[0] != want[0])) {
			size_t at = 0;

			while (got && got[at] && got[at] == want[at])
				at++;
			at = at > 40 ? at - 40 : 0; /* show where they part */
			snprintf(msg, sizeof(msg), "line %d '%.50s' at byte %zu: corio-kv %.150s, redis %.150s",
				 i, l, at, got ? got + at : "(none)", want + at);
			th_fail(file, line, msg);
		}
		if (replies > 1)
			free((char *)got);
		free(want);
	}
}

/* Both fresh (FLUSHALL), in protocol proto, then the script. */
static void diff_run_at(struct kv_test *t, int proto, const char *const *lines, const char *file, int line)
{
	struct cl *kv = cl_open(t->port), *ref = ref_open();

	if (kv && ref) {
		static const char *const prologue2[] = { "FLUSHALL", NULL };
		static const char *const prologue3[] = { "? HELLO 3", "FLUSHALL", NULL };

		diff_script_at(kv, ref, proto == 3 ? prologue3 : prologue2, file, line);
		diff_script_at(kv, ref, lines, file, line);
	}
	cl_close(kv);
	cl_close(ref);
}
#define DIFF(t, proto, lines) diff_run_at((t), (proto), (lines), __FILE__, __LINE__)

/* Run body on 1 and 2 shards against a fresh reference server. */
static void diff_test(void (*body)(struct kv_test *t))
{
	ref_start(NULL);
	run_kv(1, NULL, body);
	run_kv(2, NULL, body);
	ref_stop();
}

/* ---- (a) the table: dispatch, COMMAND, the families not served --------------------- */

static const char *const table_script[] = {
	"COMMAND INFO get mset del mget exists ttl incr dbsize flushall ping echo info quit hello multi exec",
	"COMMAND INFO GeT nosuch",
	"COMMAND DOCS nosuch",
	"COMMAND FOO",
	"COMMAND COUNT x",
	"COMMAND LIST x",
	"nosuch a b",
	"GeT",
	"get a",
	"SET a 1",
	"gEt a",
	"! LPUSH l a => -ERR 'lpush' is a list command: corio-kv does not serve lists, sets, sorted "
	"sets, streams or scripting; see docs/corio-kv.md (corio-kv(1)) for the commands it serves",
	"! zadd z 1 a => -ERR 'zadd' is a sorted set command: corio-kv does not serve lists, sets, "
	"sorted sets, streams or scripting; see docs/corio-kv.md (corio-kv(1)) for the commands it serves",
	"! EVAL x 0 => -ERR 'eval' is a scripting command: corio-kv does not serve lists, sets, "
	"sorted sets, streams or scripting; see docs/corio-kv.md (corio-kv(1)) for the commands it serves",
	"MULTI",
	"! SADD s a => -ERR 'sadd' is a set command: corio-kv does not serve lists, sets, sorted sets, "
	"streams or scripting; see docs/corio-kv.md (corio-kv(1)) for the commands it serves",
	NULL,
};

static void table_body(struct kv_test *t)
{
	DIFF(t, 2, table_script);
	DIFF(t, 3, table_script);
}

Test(kv, diff_command_table, .timeout = 120)
{
	diff_test(table_body);
}

/* Every name the table holds is found in any case, COMMAND COUNT and LIST
 * agree with COMMAND, and a name that is no command (however it hashes) is
 * not found. */
static void table_lookup(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	const char *r;
	long long count;

	if (!c)
		return;
	cl_cmd(c, "COMMAND", "COUNT", NULL);
	r = cl_reply(c);
	count = r ? atoll(r + 1) : -1;
	CHECK(count >= 30);
	cl_cmd(c, "COMMAND", "LIST", NULL);
	r = cl_reply(c);
	CHECK(r && atoll(r + 1) == count);
	for (const char *p = r ? strchr(r, '\n') + 1 : ""; *p == '$';) {
		char name[64], mixed[64];
		size_t n = (size_t)atoi(p + 1);
		const struct kv_spec *sp;
		struct kv_arg a = { mixed, n };

		p = strchr(p, '\n') + 1;
		snprintf(name, sizeof(name), "%.*s", (int)n, p);
		for (size_t i = 0; i < n; i++)
			mixed[i] = (char)(i % 2 ? toupper((unsigned char)name[i]) : name[i]);
		sp = kv_find_spec(&t->srv.cmds, &a);
		CHECK(sp && !strcmp(sp->name, name));
		a.n = n - 1; /* a prefix is not the command */
		sp = kv_find_spec(&t->srv.cmds, &a);
		CHECK(!sp || strcmp(sp->name, name));
		p += n + 2;
	}
	{
		struct kv_arg a = { "getx", 4 }, b = { "zremrangebyscorex", 17 };

		CHECK(!kv_find_spec(&t->srv.cmds, &a));
		CHECK(!kv_find_spec(&t->srv.cmds, &b));
	}
	cl_close(c);
}

Test(kv, command_table_finds_every_name, .timeout = 60)
{
	run_kv(1, NULL, table_lookup);
}

/* ---- (c) strings, keys and expiry ---------------------------------------------------- */

static const char *const strings_script[] = {
	"SETEX s 100 v", "~ TTL s", "SETEX s 0 v", "SETEX s -1 v", "SETEX s x v", "SETEX s 10",
	"PSETEX s 100000 v", "~ PTTL s", "PSETEX s 0 v", "GET s",
	"SETNX s w", "SETNX n1 w", "GET n1", "GETSET n1 x", "GETSET nope x", "GET nope", "TTL n1",
	"GETDEL n1", "GETDEL n1", "EXISTS n1",
	"SET g v", "GETEX g", "GETEX g EX 100", "~ TTL g", "GETEX g PERSIST", "TTL g",
	"GETEX g PX 5000", "~ PTTL g", "GETEX g EXAT 99999999999", "GETEX g EX 0", "GETEX g EX -1",
	"GETEX g EX x", "GETEX g EX 1 PX 1", "GETEX g PERSIST EX 1", "GETEX g FOO", "GETEX nope EX 1",
	"GETEX g PXAT 1", "EXISTS g",
	"APPEND a x", "APPEND a yz", "GET a", "STRLEN a", "STRLEN nope", "APPEND a \"\"",
	"SET r Hello\\sWorld", "GETRANGE r 0 4", "GETRANGE r -5 -1", "GETRANGE r 5 2",
	"GETRANGE r -1 -5", "GETRANGE r 0 100", "GETRANGE r -100 2", "GETRANGE r 20 30",
	"GETRANGE nope 0 1", "GETRANGE r x 1", "GETRANGE r 0 -100",
	"SETRANGE r 6 Redis", "GET r", "SETRANGE z 3 ab", "GET z", "SETRANGE y 3 \"\"", "EXISTS y",
	"SETRANGE r 1 \"\"", "SETRANGE r -1 a", "SETRANGE r x a", "SETRANGE r 536870911 ab",
	"SET f 10.50", "INCRBYFLOAT f 0.1", "INCRBYFLOAT f -5", "INCRBYFLOAT f 5.0e3",
	"INCRBYFLOAT f 2.0e-3", "INCRBYFLOAT nf 3", "INCRBYFLOAT nf 1.5", "INCRBYFLOAT f abc",
	"INCRBYFLOAT f \"\"", "INCRBYFLOAT f inf", "SET f abc", "INCRBYFLOAT f 1", "SET f 1e308",
	"INCRBYFLOAT f 1e308", "SET f 0", "INCRBYFLOAT f -0", "INCRBYFLOAT f 1.0000000000000001",
	"INCRBYFLOAT f \\s1",
	"SET e v", "EXPIREAT e 99999999999", "~ EXPIRETIME e", "~ PEXPIRETIME e",
	"EXPIRETIME nokey", "EXPIRETIME r", "PEXPIRETIME r", "PEXPIREAT e 99999999999000",
	"~ PEXPIRETIME e", "EXPIREAT e 9999999999999999", "PEXPIREAT e 1 GT", "EXPIREAT e 1",
	"EXISTS e", "EXPIREAT e 1", "PEXPIREAT nokey 1", "EXPIREAT r 100000000000 NX",
	"EXPIREAT r 100000000001 NX", "EXPIREAT r 1 XX LT",
	"TYPE r", "TYPE nope", "SET t1 1", "SET t2 2", "TOUCH t1 t2 nope", "UNLINK t1 t2 nope",
	"SET oi 12345", "OBJECT ENCODING oi", "SET oe short", "OBJECT ENCODING oe",
	"SET or 0123456789012345678901234567890123456789012345", "OBJECT ENCODING or",
	"OBJECT ENCODING nope", "OBJECT IDLETIME oe", "OBJECT FREQ oe", "OBJECT FOO oe",
	"OBJECT ENCODING", "~ OBJECT REFCOUNT oe", "OBJECT IDLETIME nope",
	"~ MEMORY USAGE oe", "MEMORY USAGE nope", "~ MEMORY USAGE oe SAMPLES 5", "MEMORY FOO",
	NULL,
};

static void strings_body(struct kv_test *t)
{
	DIFF(t, 2, strings_script);
	DIFF(t, 3, strings_script);
}

Test(kv, diff_strings_keys_expiry, .timeout = 120)
{
	diff_test(strings_body);
}

static const char *const across_script[] = {
	"SET a 1", "RENAME a b", "GET a", "GET b", "RENAME nokey x", "RENAME b b", "RENAME nokey nokey",
	"SET c 2", "RENAMENX b c", "RENAMENX b d", "GET d", "RENAMENX nokey d", "RENAMENX d d",
	"RENAMENX nokey2 c",
	"SET e v", "EXPIRE e 100", "RENAME e f", "~ TTL f", "EXISTS e",
	"COPY f g", "GET g", "~ TTL g", "COPY f g", "COPY f g REPLACE", "COPY f f", "COPY nokey g",
	"COPY f h DB 0", "! COPY f h DB 1 => -ERR DB index is out of range", "COPY f h FOO", "COPY f h DB x", "COPY f", "GET f",
	"MSETNX m1 1 m2 2", "MGET m1 m2", "MSETNX m2 3 m3 4", "EXISTS m3", "MSETNX m1",
	"MSETNX m1 1 m2",
	"FLUSHALL", "RANDOMKEY", "SET only 1", "RANDOMKEY", "KEYS *", "KEYS o*", "KEYS x*",
	"KEYS o[mn]l?", "KEYS", "RANDOMKEY x",
	"SCAN x", "SCAN 99999999999999999999999", "SCAN 0 COUNT 0", "SCAN 0 COUNT x", "SCAN 0 FOO bar", "SCAN 0 MATCH",
	"WATCH", "WATCH only", "UNWATCH", "MULTI", "WATCH x", "SET only 2", "EXEC", "GET only",
	"MULTI", "UNWATCH", "EXEC",
	"SET hh 1", "RENAME hh hh2", "TYPE hh2",
	NULL,
};

static void across_body(struct kv_test *t)
{
	DIFF(t, 2, across_script);
	DIFF(t, 3, across_script);
}

Test(kv, diff_rename_copy_msetnx_keys_watch, .timeout = 120)
{
	diff_test(across_body);
}

/* RENAME, RENAMENX, COPY between keys of two shards move the value, its
 * expiry and nothing else; a pipeline around them stays in order. */
static void across_shards(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	char a[32], b[32], b2[32];

	if (!c)
		return;
	key_on(&t->srv, 0, "x", 0, a, sizeof(a));
	key_on(&t->srv, t->srv.nshards - 1, "y", 0, b, sizeof(b));
	key_on(&t->srv, t->srv.nshards - 1, "z", 0, b2, sizeof(b2));
	/* one send: SET, RENAME across, GETs on both sides, in order */
	cl_cmd(c, "SET", a, "va", "EX", "100", NULL);
	cl_cmd(c, "GET", b, NULL);
	cl_cmd(c, "RENAME", a, b, NULL);
	cl_cmd(c, "GET", a, NULL);
	cl_cmd(c, "GET", b, NULL);
	cl_cmd(c, "TTL", b, NULL);
	EXPECT(c, "+OK\r\n");
	EXPECT(c, "$-1\r\n");
	EXPECT(c, "+OK\r\n");
	EXPECT(c, "$-1\r\n");
	EXPECT(c, "$2\r\nva\r\n");
	EXPECT_TTL(c, 100);
	cl_cmd(c, "SET", a, "new", NULL);
	cl_cmd(c, "RENAMENX", a, b, NULL);
	cl_cmd(c, "COPY", b, a, NULL);
	cl_cmd(c, "COPY", b, a, "REPLACE", NULL);
	cl_cmd(c, "GET", a, NULL);
	cl_cmd(c, "RENAMENX", b, b2, NULL);
	cl_cmd(c, "MGET", a, b, b2, NULL);
	EXPECT(c, "+OK\r\n");
	EXPECT(c, ":0\r\n");
	EXPECT(c, ":0\r\n");
	EXPECT(c, ":1\r\n");
	EXPECT(c, "$2\r\nva\r\n");
	EXPECT(c, ":1\r\n");
	EXPECT(c, "*3\r\n$2\r\nva\r\n$-1\r\n$2\r\nva\r\n");
	cl_cmd(c, "DBSIZE", NULL);
	EXPECT(c, ":2\r\n");
	cl_close(c);
}

Test(kv, rename_copy_across_shards, .timeout = 60)
{
	run_kv(2, NULL, across_shards);
}

#define SCAN_KEYS 3000

/* SCAN's guarantee: every key present for the whole scan comes back at
 * least once, however the tables grow and rehash meanwhile (another
 * client adds keys between the pages), on every shard; MATCH and TYPE
 * filter; the cursor ends at 0. */
static void scan_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port), *w = cl_open(t->port);
	static unsigned char seen[SCAN_KEYS];
	char k[32], cur[32] = "0";
	int pages = 0, extra = 0;

	if (!c || !w)
		return;
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < SCAN_KEYS; i++) {
		snprintf(k, sizeof(k), "s:%d", i);
		cl_cmd(c, "SET", k, "v", NULL);
	}
	for (int i = 0; i < SCAN_KEYS; i++)
		EXPECT(c, "+OK\r\n");
	do {
		const char *r, *p;
		int n;

		cl_cmd(c, "SCAN", cur, "COUNT", "50", "MATCH", "s:*", NULL);
		r = cl_reply(c);
		if (!r || strncmp(r, "*2\r\n$", 5)) {
			CHECK(!"SCAN's reply");
			break;
		}
		p = strchr(r + 4, '\n') + 1;
		snprintf(cur, sizeof(cur), "%.*s", (int)strcspn(p, "\r"), p);
		p = strchr(p, '\n') + 1;
		CHECK(*p == '*');
		n = atoi(p + 1);
		p = strchr(p, '\n') + 1;
		for (int i = 0; i < n; i++) {
			int len = atoi(p + 1), id;

			p = strchr(p, '\n') + 1;
			if (sscanf(p, "s:%d", &id) == 1 && id >= 0 && id < SCAN_KEYS)
				seen[id] = 1;
			else
				extra++;
			p += len + 2;
		}
		/* the other client grows the tables between pages */
		for (int i = 0; i < 200; i++) {
			snprintf(k, sizeof(k), "grow:%d:%d", pages, i);
			cl_cmd(w, "SET", k, "v", NULL);
		}
		for (int i = 0; i < 200; i++)
			EXPECT(w, "+OK\r\n");
		pages++;
	} while (strcmp(cur, "0") && pages < 100000);
	for (int i = 0; i < SCAN_KEYS; i++)
		if (!seen[i]) {
			char msg[64];

			snprintf(msg, sizeof(msg), "SCAN missed s:%d", i);
			th_fail(__FILE__, __LINE__, msg);
			break;
		}
	CHECK_EQ(extra, 0); /* MATCH kept the grow: keys out */
	/* TYPE: strings only here */
	cl_cmd(c, "SCAN", "0", "TYPE", "hash", "COUNT", "100000", NULL);
	EXPECT(c, t->srv.nshards == 1 ? "*2\r\n$1\r\n0\r\n*0\r\n" : "*2\r\n$1\r\n1\r\n*0\r\n");
	cl_close(c);
	cl_close(w);
}

Test(kv, scan_returns_every_key_while_tables_grow, .timeout = 120)
{
	run_kv(1, NULL, scan_body);
	run_kv(2, NULL, scan_body);
}

/* WATCH: a change by anyone to a watched key, on whatever shard, between
 * WATCH and EXEC aborts the EXEC (a null reply, nothing run); no change,
 * or UNWATCH, lets it run. */
static void watch_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port), *o = cl_open(t->port);

	if (!c || !o)
		return;
	for (unsigned sh = 0; sh < t->srv.nshards; sh++) {
		char k[32], k2[32];

		key_on(&t->srv, sh, "w", 0, k, sizeof(k));
		key_on(&t->srv, (sh + 1) % t->srv.nshards, "v", 0, k2, sizeof(k2));
		cl_cmd(c, "SET", k, "1", NULL);
		EXPECT(c, "+OK\r\n");
		/* changed by another client: aborted */
		cl_cmd(c, "WATCH", k, k2, NULL);
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "SET", k, "other", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "SET", k, "mine", NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*-1\r\n");
		cl_cmd(c, "GET", k, NULL);
		EXPECT(c, "$5\r\nother\r\n");
		/* not changed: runs */
		cl_cmd(c, "WATCH", k, NULL);
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "SET", k, "mine", NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*1\r\n+OK\r\n");
		/* the watch ended with the EXEC: a later change does not matter */
		cl_cmd(o, "SET", k, "x", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "GET", k, NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*1\r\n$1\r\nx\r\n");
		/* an expiry set by another aborts; so does a key that expires */
		cl_cmd(c, "WATCH", k, NULL);
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "PEXPIRE", k, "1", NULL);
		EXPECT(o, ":1\r\n");
		corio_sleep_ns(5000000);
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "GET", k, NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*-1\r\n");
		/* UNWATCH forgets */
		cl_cmd(c, "WATCH", k2, NULL);
		cl_cmd(c, "UNWATCH", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "SET", k2, "changed", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "DEL", k2, NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*1\r\n:1\r\n");
		/* FLUSHALL aborts; DISCARD forgets the watches */
		cl_cmd(c, "WATCH", k2, NULL);
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "FLUSHALL", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "PING", NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*-1\r\n");
		cl_cmd(c, "HELLO", "3", NULL);
		cl_reply(c);
		cl_cmd(c, "WATCH", k, NULL);
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "SET", k, "y", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "_\r\n"); /* RESP3's null */
		cl_cmd(c, "HELLO", "2", NULL);
		cl_reply(c);
	}
	/* a connection that leaves with watches leaves none behind */
	{
		struct cl *d = cl_open(t->port);

		cl_cmd(d, "WATCH", "a", "b", "c", NULL);
		EXPECT(d, "+OK\r\n");
		cl_close(d);
		for (int i = 0; i < 200; i++) {
			size_t nw = 0;

			for (unsigned sh = 0; sh < t->srv.nshards; sh++)
				nw += t->srv.sh[sh].nw;
			if (!nw)
				break;
			corio_sleep_ns(1000000);
		}
	}
	cl_close(c);
	cl_close(o);
}

Test(kv, watch_aborts_exec_on_any_shard, .timeout = 60)
{
	run_kv(1, NULL, watch_body);
	run_kv(2, NULL, watch_body);
}

static const char *const server_script[] = {
	"~ TIME", "ROLE", "WAIT 0 0", "WAIT 1 1", "WAIT x 0", "WAIT 0 -1", "WAIT 0 x",
	"SLOWLOG GET", "SLOWLOG GET 5", "SLOWLOG LEN", "SLOWLOG RESET", "SLOWLOG GET x",
	"SLOWLOG GET -2", "SLOWLOG FOO", "SLOWLOG LEN x",
	"LATENCY LATEST", "LATENCY HISTORY command", "LATENCY RESET", "LATENCY FOO",
	"CLIENT NO-EVICT on", "CLIENT NO-EVICT off", "CLIENT NO-EVICT x",
	"CLIENT KILL 1.2.3.4:5", "CLIENT KILL ID 999", "CLIENT KILL FOO bar", "CLIENT KILL ID x",
	"CLIENT KILL ID 0", "CLIENT KILL SKIPME maybe", "CLIENT KILL TYPE pubsub",
	"CLIENT KILL TYPE foo", "CLIENT KILL USER nobody", "CLIENT LIST TYPE pubsub",
	"CLIENT LIST TYPE foo", "CLIENT LIST ID x", "CLIENT LIST FOO", "CLIENT FOO", "CLIENT KILL",
	"CLIENT SETNAME a\\sb", "CLIENT GETNAME",
	"! CLIENT NO-TOUCH on => +OK", "! CLIENT NO-TOUCH x => -ERR syntax error",
	NULL,
};

static void server_body(struct kv_test *t)
{
	DIFF(t, 2, server_script);
	DIFF(t, 3, server_script);
}

Test(kv, diff_time_role_wait_slowlog_latency_client, .timeout = 120)
{
	diff_test(server_body);
}

/* CLIENT LIST shows the connections of every shard, in Redis's line
 * format; CLIENT KILL ID ends one on another shard; CLIENT INFO is the
 * caller's line; NO-TOUCH keeps OBJECT IDLETIME growing. */
static void clients_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port), *d[6];
	long long ids[6];
	const char *r;
	int victim = -1, me;

	if (!c)
		return;
	me = cl_shard(c);
	for (int i = 0; i < 6; i++) {
		d[i] = cl_open(t->port);
		cl_cmd(d[i], "CLIENT", "ID", NULL);
		r = cl_reply(d[i]);
		ids[i] = r ? atoll(r + 1) : -1;
		if (victim < 0 && cl_shard(d[i]) != me)
			victim = i;
	}
	/* SO_REUSEPORT may put all six on our shard: try more for the last */
	for (int tries = 0; victim < 0 && t->srv.nshards > 1 && tries < 60; tries++) {
		cl_close(d[5]);
		d[5] = cl_open(t->port);
		cl_cmd(d[5], "CLIENT", "ID", NULL);
		r = cl_reply(d[5]);
		ids[5] = r ? atoll(r + 1) : -1;
		if (cl_shard(d[5]) != me)
			victim = 5;
	}
	cl_cmd(c, "CLIENT", "LIST", NULL);
	r = cl_reply(c);
	for (int i = 0; r && i < 6; i++) {
		char want[48];

		snprintf(want, sizeof(want), "id=%lld addr=127.0.0.1:", ids[i]);
		CHECK(strstr(r, want));
	}
	CHECK(r && strstr(r, " cmd=client|list user=default redir=-1 resp=2 shard="));
	CHECK(r && strstr(r, " cmd=client ")); /* the others' last: CLIENT INFO */
	cl_cmd(c, "CLIENT", "INFO", NULL);
	EXPECT_HAS(c, " cmd=client|info ");
	if (t->srv.nshards > 1)
		CHECK(victim >= 0);
	if (victim < 0)
		victim = 0;
	{
		char id[24];

		snprintf(id, sizeof(id), "%lld", ids[victim]);
		cl_cmd(c, "CLIENT", "KILL", "ID", id, NULL);
		EXPECT(c, ":1\r\n");
		CHECK(cl_closed(d[victim]));
		cl_cmd(c, "CLIENT", "KILL", "ID", id, NULL);
		EXPECT(c, ":0\r\n");
	}
	/* SKIPME no: the caller too, after its reply */
	cl_cmd(d[(victim + 1) % 6], "CLIENT", "KILL", "USER", "default", "SKIPME", "no", NULL);
	EXPECT(d[(victim + 1) % 6], ":6\r\n");
	CHECK(cl_closed(d[(victim + 1) % 6]));
	CHECK(cl_closed(c));
	for (int i = 0; i < 6; i++)
		cl_close(d[i]);
	cl_close(c);
	c = cl_open(t->port);
	cl_cmd(c, "SET", "idle", "v", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "CLIENT", "NO-TOUCH", "on", NULL);
	EXPECT(c, "+OK\r\n");
	corio_sleep_ns(2100000000ull);
	cl_cmd(c, "GET", "idle", NULL);
	EXPECT(c, "$1\r\nv\r\n");
	cl_cmd(c, "OBJECT", "IDLETIME", "idle", NULL);
	r = cl_reply(c);
	CHECK(r && atoll(r + 1) >= 1);
	cl_cmd(c, "CLIENT", "NO-TOUCH", "off", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "GET", "idle", NULL);
	EXPECT(c, "$1\r\nv\r\n");
	cl_cmd(c, "OBJECT", "IDLETIME", "idle", NULL);
	EXPECT(c, ":0\r\n");
	cl_close(c);
}

Test(kv, client_list_kill_across_shards, .timeout = 60)
{
	run_kv(2, NULL, clients_body);
}

/* ---- (d) hashes ---------------------------------------------------------------------- */

static const char *const hash_script[] = {
	"HSET h a 1 b 2", "HSET h a 3 c 4", "HGETALL h", "HGET h a", "HGET h nope", "HGET nokey a",
	"HMGET h a nope b", "HMGET nokey a b", "HKEYS h", "HVALS h", "HLEN h", "HLEN nokey",
	"HEXISTS h a", "HEXISTS h z", "HSTRLEN h a", "HSTRLEN h z", "HSETNX h a 9", "HSETNX h d 9",
	"HGET h d", "HMSET h e 5 f 6", "HMSET h e", "HSET h", "HSET h a", "HSET h a 1 b",
	"HSET h a 1 a 2", "HGET h a", "HDEL h a nope c", "HDEL h a", "HGETALL h", "HDEL nokey a",
	"HINCRBY h n 5", "HINCRBY h n -7", "HINCRBY h n x", "HSET h s str", "HINCRBY h s 1",
	"HSET h big 9223372036854775807", "HINCRBY h big 1", "HINCRBYFLOAT h fl 1.5",
	"HINCRBYFLOAT h fl 2.0e2", "HINCRBYFLOAT h s 1", "HINCRBYFLOAT h fl x", "HINCRBYFLOAT h fl inf",
	"HGETALL h", "TYPE h", "OBJECT ENCODING h", "HRANDFIELD nokey", "HRANDFIELD nokey 2",
	"HRANDFIELD h 0", "HRANDFIELD h x", "HRANDFIELD h 1 FOO", "HRANDFIELD h 1 WITHVALUES x",
	"HRANDFIELD h -9223372036854775808", "HRANDFIELD h -9223372036854775807 WITHVALUES",
	"HSCAN h 0", "HSCAN h 0 MATCH f*", "HSCAN h 0 COUNT 0", "HSCAN h x", "HSCAN h 0 COUNT",
	"HSCAN nokey 0", "HSCAN h 0 FOO 1",
	/* types */
	"SET str v", "HGET str a", "HSET str a 1", "HGETALL str", "HLEN str", "HDEL str a",
	"HINCRBY str a 1", "HRANDFIELD str", "HSCAN str 0", "GET h", "INCR h", "APPEND h x",
	"STRLEN h", "GETRANGE h 0 1", "MGET h str", "SET h v", "TYPE h", "HSET h a 1",
	/* expiry on the key, and the key goes with its last field */
	"EXPIRE h 100", "~ TTL h", "HSET h b 2", "~ TTL h", "HDEL h a b", "EXISTS h",
	/* renamed and copied with their fields */
	"HSET r f v g w", "RENAME r r2", "HGETALL r2", "COPY r2 r3", "HGETALL r3", "HSET r3 f x",
	"HGET r2 f",
	/* past the small encoding: a value over 64 bytes */
	"HSET L f 0123456789012345678901234567890123456789012345678901234567890123456789",
	"OBJECT ENCODING L", "HSTRLEN L f", "HSET L g 1", "HLEN L", "HDEL L f", "HGET L g",
	"HINCRBY L g 2", "COPY L L2", "HLEN L2", "HDEL L g", "EXISTS L", "EXISTS L2",
	NULL,
};

static void hash_body(struct kv_test *t)
{
	DIFF(t, 2, hash_script);
	DIFF(t, 3, hash_script);
}

Test(kv, diff_hashes, .timeout = 120)
{
	diff_test(hash_body);
}

/* A hash past 128 fields becomes a table: every field still there, HSCAN
 * walks it all (cursor until 0), HRANDFIELD's counts hold, and the memory
 * it holds is counted and given back when it goes. */
static void big_hash_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	static unsigned char seen[1000];
	char f[32], v[32], cur[32] = "0";
	long long before, after;
	const char *r;

	if (!c)
		return;
	before = info_num(c, "memory", "used_memory:");
	for (int i = 0; i < 1000; i++) {
		snprintf(f, sizeof(f), "f%d", i);
		snprintf(v, sizeof(v), "v%d", i);
		cl_cmd(c, "HSET", "big", f, v, NULL);
	}
	for (int i = 0; i < 1000; i++)
		EXPECT(c, ":1\r\n");
	cl_cmd(c, "OBJECT", "ENCODING", "big", NULL);
	EXPECT(c, "$9\r\nhashtable\r\n");
	cl_cmd(c, "HLEN", "big", NULL);
	EXPECT(c, ":1000\r\n");
	cl_cmd(c, "HGET", "big", "f777", NULL);
	EXPECT(c, "$4\r\nv777\r\n");
	cl_cmd(c, "HSET", "big", "f777", "x", "f1000", "y", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "HDEL", "big", "f1000", NULL);
	EXPECT(c, ":1\r\n");
	after = info_num(c, "memory", "used_memory:");
	CHECK(after - before > 1000 * 24);
	cl_cmd(c, "MEMORY", "USAGE", "big", NULL);
	r = cl_reply(c);
	CHECK(r && atoll(r + 1) > 1000 * 24);
	memset(seen, 0, sizeof(seen));
	do {
		const char *p;
		int n;

		cl_cmd(c, "HSCAN", "big", cur, "COUNT", "30", NULL);
		r = cl_reply(c);
		if (!r)
			break;
		p = strchr(r + 4, '\n') + 1;
		snprintf(cur, sizeof(cur), "%.*s", (int)strcspn(p, "\r"), p);
		p = strchr(p, '\n') + 1;
		n = atoi(p + 1);
		p = strchr(p, '\n') + 1;
		for (int i = 0; i < n; i++) {
			int len = atoi(p + 1), id;

			p = strchr(p, '\n') + 1;
			if (i % 2 == 0 && sscanf(p, "f%d", &id) == 1 && id >= 0 && id < 1000)
				seen[id] = 1;
			p += len + 2;
		}
	} while (strcmp(cur, "0"));
	for (int i = 0; i < 1000; i++)
		CHECK(seen[i]);
	cl_cmd(c, "HRANDFIELD", "big", "5", NULL);
	EXPECT_HAS(c, "*5\r\n");
	cl_cmd(c, "HRANDFIELD", "big", "-3000", NULL);
	EXPECT_HAS(c, "*3000\r\n");
	cl_cmd(c, "HRANDFIELD", "big", "2000", NULL);
	EXPECT_HAS(c, "*1000\r\n");
	cl_cmd(c, "HRANDFIELD", "big", "2", "WITHVALUES", NULL);
	EXPECT_HAS(c, "*4\r\n");
	/* a count whose reply the output limit cannot hold: refused, not built */
	cl_cmd(c, "HRANDFIELD", "big", "-9223372036854775807", NULL);
	EXPECT(c, "-ERR corio-kv: HRANDFIELD's count makes a reply over the output limit\r\n");
	cl_cmd(c, "SCAN", "0", "COUNT", "9223372036854775807", NULL); /* no overflow (UBSan) */
	EXPECT_HAS(c, "*2\r\n");
	cl_cmd(c, "DEL", "big", NULL);
	EXPECT(c, ":1\r\n");
	CHECK_EQ(info_num(c, "memory", "used_memory:"), before);
	cl_close(c);
}

Test(kv, hash_past_the_small_encoding, .timeout = 60)
{
	run_kv(1, NULL, big_hash_body);
	run_kv(2, NULL, big_hash_body);
}

/* ---- (e) INFO and CONFIG GET for dashboards ------------------------------------------ */

static const char *const config_script[] = {
	"CONFIG GET timeout", "CONFIG GET notify-keyspace-events", "CONFIG GET maxmemory-policy",
	"CONFIG GET maxmemory", "CONFIG GET appendonly", "CONFIG GET save", "CONFIG GET nosuch",
	"CONFIG GET appendfsync", "CONFIG GET requirepass",
	"CONFIG GET", "CONFIG GET TIMEOUT", "~ CONFIG GET timeout maxmemory-policy",
	"~ CONFIG GET maxmemory*", "CONFIG FOO", "CONFIG SET",
	NULL,
};

static void config_body(struct kv_test *t)
{
	DIFF(t, 2, config_script);
	DIFF(t, 3, config_script);
}

Test(kv, diff_config_get, .timeout = 120)
{
	diff_test(config_body);
}

/* The fields dashboards read are there, with values that move as they
 * should; sections persistence, replication, cpu and commandstats filled. */
static void info_body(struct kv_test *t)
{
	static const char *const fields[] = {
		"os:", "arch_bits:64", "blocked_clients:0", "maxclients:", "used_memory_peak:",
		"loading:0", "rdb_changes_since_last_save:", "rdb_last_save_time:",
		"rdb_last_bgsave_status:ok", "aof_enabled:0", "instantaneous_ops_per_sec:",
		"total_net_input_bytes:", "total_net_output_bytes:", "rejected_connections:0",
		"evicted_keys:0", "pubsub_channels:0", "role:master", "connected_slaves:0",
		"master_repl_offset:0", "used_cpu_sys:", "used_cpu_user:", "# Persistence",
		"# Replication", "# CPU",
	};
	struct cl *c = cl_open(t->port);
	uint64_t until;
	const char *r;
	long long ops = 0;

	if (!c)
		return;
	cl_cmd(c, "INFO", NULL);
	r = cl_reply(c);
	for (size_t i = 0; r && i < sizeof(fields) / sizeof(fields[0]); i++) {
		char want[64];

		snprintf(want, sizeof(want), "\n%s", fields[i]);
		if (!strstr(r, want))
			th_fail(__FILE__, __LINE__, fields[i]);
	}
	CHECK(r && !strstr(r, "# Commandstats")); /* not in the default set (Redis) */
	CHECK_EQ(info_num(c, "persistence", "rdb_changes_since_last_save:"), 0);
	for (int i = 0; i < 7; i++)
		cl_cmd(c, "SET", "k", "v", NULL);
	for (int i = 0; i < 7; i++)
		EXPECT(c, "+OK\r\n");
	CHECK_EQ(info_num(c, "persistence", "rdb_changes_since_last_save:"), 7);
	CHECK(info_num(c, "stats", "total_net_input_bytes:") > 7 * 20);
	CHECK(info_num(c, "stats", "total_net_output_bytes:") > 7 * 5);
	CHECK(info_num(c, "memory", "used_memory_peak:") >= info_num(c, "memory", "used_memory:"));
	cl_cmd(c, "INFO", "commandstats", NULL);
	EXPECT_HAS(c, "# Commandstats\r\n");
	CHECK(c->last && strstr(c->last, "cmdstat_set:calls=7,usec=0,"));
	CHECK(c->last && strstr(c->last, "cmdstat_info:calls="));
	/* busy for over a second: the last second's rate is not 0 */
	until = corio_now_ns() + 1300000000ull;
	while (corio_now_ns() < until) {
		for (int i = 0; i < 50; i++)
			cl_cmd(c, "PING", NULL);
		for (int i = 0; i < 50; i++)
			EXPECT(c, "+PONG\r\n");
	}
	ops = info_num(c, "stats", "instantaneous_ops_per_sec:");
	CHECK(ops > 0);
	cl_close(c);
}

Test(kv, info_fields_for_dashboards, .timeout = 60)
{
	run_kv(2, NULL, info_body);
}

/* ---- (f) the emulated cluster -------------------------------------------------------- */

static const char *const nocluster_script[] = {
	"CLUSTER INFO", "CLUSTER SLOTS", "CLUSTER KEYSLOT a", "READONLY", "READWRITE", "MGET a b",
	NULL,
};

static void nocluster_body(struct kv_test *t)
{
	DIFF(t, 2, nocluster_script);
	DIFF(t, 3, nocluster_script);
}

Test(kv, diff_cluster_disabled, .timeout = 120)
{
	diff_test(nocluster_body);
}

#define XSLOT "-CROSSSLOT Keys in request don't hash to the same slot"

/* Against a redis-server in cluster mode (no slots assigned: only what
 * does not need a slot is compared), and corio-kv's own answers. */
static const char *const cluster_script[] = {
	"CLUSTER KEYSLOT 123456789", "CLUSTER KEYSLOT foo", "CLUSTER KEYSLOT {user1000}.following",
	"CLUSTER KEYSLOT {user1000}.followers", "CLUSTER KEYSLOT foo{}{bar}", "CLUSTER KEYSLOT foo{{bar}}zap",
	"CLUSTER KEYSLOT foo{bar}{zap}", "CLUSTER KEYSLOT {", "CLUSTER KEYSLOT }{", "CLUSTER KEYSLOT \"\"",
	"CLUSTER KEYSLOT", "CLUSTER FOO", "CLUSTER COUNTKEYSINSLOT x", "CLUSTER COUNTKEYSINSLOT 20000",
	"CLUSTER COUNTKEYSINSLOT -1", "READONLY", "READWRITE",
	"! MGET a b => " XSLOT, "! MSET a 1 b 2 => " XSLOT, "! DEL a b => " XSLOT,
	"! EXISTS {a}1 {b}2 => " XSLOT, "! RENAME a b => " XSLOT, "! WATCH a b => " XSLOT,
	"! MSET {a}1 1 {a}2 2 => +OK", "! MGET {a}1 {a}2 => *2\r\n$1\r\n1\r\n$1\r\n2",
	"! RENAME {a}1 {a}3 => +OK", "! CLUSTER COUNTKEYSINSLOT 15495 => :2",
	"! MULTI => +OK", "! MGET a b => " XSLOT, "! EXEC => -EXECABORT Transaction discarded because "
	"of previous errors.",
	NULL,
};

static void cluster_body(struct kv_test *t)
{
	struct cl *c;
	char want[512], id[48];
	const char *r;

	DIFF(t, 2, cluster_script);
	DIFF(t, 3, cluster_script);
	c = cl_open(t->port);
	if (!c)
		return;
	cl_cmd(c, "CLUSTER", "MYID", NULL);
	r = cl_reply(c);
	CHECK(r && !strncmp(r, "$40\r\n", 5));
	snprintf(id, sizeof(id), "%.40s", r ? r + 5 : "");
	cl_cmd(c, "CLUSTER", "SLOTS", NULL);
	snprintf(want, sizeof(want), "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:%d\r\n"
		 "$40\r\n%s\r\n*0\r\n", t->port, id);
	EXPECT(c, want);
	cl_cmd(c, "CLUSTER", "NODES", NULL);
	snprintf(want, sizeof(want), "%s 127.0.0.1:%d@%d myself,master - 0 0 1 connected 0-16383\n",
		 id, t->port, t->port + 10000);
	EXPECT_HAS(c, want);
	cl_cmd(c, "CLUSTER", "INFO", NULL);
	EXPECT_HAS(c, "cluster_state:ok\r\ncluster_slots_assigned:16384\r\n");
	cl_cmd(c, "CLUSTER", "SHARDS", NULL);
	EXPECT_HAS(c, "$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n");
	cl_cmd(c, "INFO", "cluster", NULL);
	EXPECT_HAS(c, "cluster_enabled:1");
	cl_close(c);
}

static char kv_test_nodes[64];

Test(kv, diff_cluster_emulated, .timeout = 120)
{
	snprintf(kv_test_nodes, sizeof(kv_test_nodes), "/tmp/corio-kv-test-nodes-%d.conf", (int)getpid());
	ref_start("--cluster-enabled", "yes", "--cluster-config-file", kv_test_nodes, NULL);
	kv_test_cluster = 1;
	run_kv(1, NULL, cluster_body);
	run_kv(2, NULL, cluster_body);
	kv_test_cluster = 0;
	ref_stop();
	unlink(kv_test_nodes);
}

/* Cluster clients connect unchanged: redis-cli -c, and redis-py's
 * RedisCluster (when the system's python3 has redis). The server runs on
 * its own shards; the clients run from the test's thread. */
Test(kv, cluster_clients_connect, .timeout = 120)
{
	static struct kv_server srv;
	struct corio_config cfg = th_cfg(2);
	struct corio_rt *rt;
	char cmd[1024], out[4096];
	int before, port, st;

	if (system("command -v redis-cli >/dev/null 2>&1") != 0)
		cr_skip_test("redis-cli is not installed (apt-get install redis-tools)");
	before = th_fd_count();
	memset(&srv, 0, sizeof(srv));
	kv_limits_default(&srv.lim);
	srv.cluster = true;
	cfg.flags |= CORIO_F_NO_PIN;
	cr_assert_eq(kv_server_init(&srv, 2), 0);
	cr_assert_eq(corio_start(&cfg, kv_idle_entry, &srv, &rt), 0);
	while (atomic_load(&srv.listening) < 2 && !atomic_load(&srv.failed))
		usleep(1000);
	cr_assert(!atomic_load(&srv.failed));
	port = atomic_load(&srv.bound_port);
	snprintf(cmd, sizeof(cmd), "redis-cli -c -p %d set '{u}a' 1 && redis-cli -c -p %d get '{u}a' && "
		 "redis-cli -c -p %d mget '{u}a' '{u}b'", port, port, port);
	st = run_cmd(cmd, out, sizeof(out));
	cr_expect_eq(st, 0);
	cr_expect_str_eq(out, "OK\n1\n1\n\n");
	if (system("/usr/bin/python3 -c 'import redis.cluster' >/dev/null 2>&1") == 0) {
		snprintf(cmd, sizeof(cmd),
			 "/usr/bin/python3 -c 'import redis\n"
			 "rc = redis.cluster.RedisCluster(host=\"127.0.0.1\", port=%d)\n"
			 "rc.set(\"x\", \"1\"); rc.set(\"y\", \"2\"); rc.hset(\"h\", mapping={\"f\": \"v\"})\n"
			 "print(rc.get(\"x\"), rc.get(\"y\"), rc.hgetall(\"h\"), rc.mget_nonatomic(\"x\", \"y\"), "
			 "len(rc.get_nodes()))\n' 2>&1", port);
		st = run_cmd(cmd, out, sizeof(out));
		cr_expect_eq(st, 0, "%s", out);
		cr_expect_str_eq(out, "b'1' b'2' {b'f': b'v'} [b'1', b'2'] 1\n");
	}
	corio_stop(rt);
	cr_assert_eq(corio_wait(rt), 0);
	kv_server_free(&srv);
	cr_assert_eq(th_fd_count(), before, "the runtime left file descriptors open");
}

/* ---- (g) pub/sub --------------------------------------------------------------------- */

static const char *const pubsub_script[] = {
	"PUBLISH nochan m", "PUBSUB NUMSUB a", "PUBSUB NUMPAT", "PUBSUB CHANNELS", "PUBSUB FOO",
	"SUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "PUBSUB NUMSUB", "PUBLISH a",
	"2 SUBSCRIBE a b", "GET x", "PING", "PING hi", "SUBSCRIBE a", "PSUBSCRIBE p*",
	"~ PUBSUB CHANNELS", "PUBSUB CHANNELS a*", "PUBSUB NUMSUB a b c", "PUBSUB NUMPAT",
	"UNSUBSCRIBE a", "UNSUBSCRIBE", "PUNSUBSCRIBE", "UNSUBSCRIBE", "PUBSUB NUMPAT", "GET x",
	NULL,
};

static void pubsub_body(struct kv_test *t)
{
	DIFF(t, 2, pubsub_script);
	DIFF(t, 3, pubsub_script);
}

Test(kv, diff_pubsub, .timeout = 120)
{
	diff_test(pubsub_body);
}

/* PUBLISH reaches the subscribers of every shard (channel and pattern,
 * RESP2 and RESP3 push), answers how many, and a subscriber's replies and
 * pushes stay in order. */
static void publish_body(struct kv_test *t)
{
	struct cl *sub[40] = { 0 }, *p = cl_open(t->port);
	int on[2] = { -1, -1 }, n = 0, nsub = 0;
	char want[128];

	if (!p)
		return;
	/* until there is a subscriber on each shard (SO_REUSEPORT spreads them) */
	while (nsub < 40 && (on[0] < 0 || (t->srv.nshards > 1 && on[1] < 0))) {
		int sh;

		sub[nsub] = cl_open(t->port);
		sh = cl_shard(sub[nsub]);
		if (sh >= 0 && sh < 2 && on[sh] < 0)
			on[sh] = nsub;
		nsub++;
	}
	CHECK(on[0] >= 0 && (t->srv.nshards == 1 || on[1] >= 0));
	for (int s = 0; s < (int)t->srv.nshards; s++) {
		struct cl *c = sub[on[s]];

		if (s == 1) { /* the second in RESP3, with a pattern too */
			cl_cmd(c, "HELLO", "3", NULL);
			cl_reply(c);
			cl_cmd(c, "PSUBSCRIBE", "ne*", NULL);
			EXPECT(c, ">3\r\n$10\r\npsubscribe\r\n$3\r\nne*\r\n:1\r\n");
			n++;
		}
		cl_cmd(c, "SUBSCRIBE", "news", NULL);
		EXPECT(c, s == 1 ? ">3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:2\r\n"
				 : "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n");
		n++;
	}
	cl_cmd(p, "PUBLISH", "news", "hello", NULL);
	snprintf(want, sizeof(want), ":%d\r\n", n);
	EXPECT(p, want);
	EXPECT(sub[on[0]], "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n");
	if (t->srv.nshards > 1) {
		const char *a = cl_reply(sub[on[1]]), *b;
		char *first = a ? strdup(a) : NULL;

		b = cl_reply(sub[on[1]]);
		/* a pmessage and a message, in either order (as Redis: patterns after) */
		CHECK(first && b);
		if (first && b) {
			CHECK(strstr(first, "message\r\n") && strstr(b, "message\r\n"));
			CHECK(!strcmp(first, ">4\r\n$8\r\npmessage\r\n$3\r\nne*\r\n$4\r\nnews\r\n$5\r\nhello\r\n") ||
			      !strcmp(b, ">4\r\n$8\r\npmessage\r\n$3\r\nne*\r\n$4\r\nnews\r\n$5\r\nhello\r\n"));
		}
		free(first);
	}
	cl_cmd(p, "PUBSUB", "NUMSUB", "news", NULL);
	snprintf(want, sizeof(want), "*2\r\n$4\r\nnews\r\n:%u\r\n", t->srv.nshards);
	EXPECT(p, want);
	cl_cmd(p, "PUBSUB", "CHANNELS", NULL);
	EXPECT(p, "*1\r\n$4\r\nnews\r\n");
	cl_cmd(p, "INFO", "stats", NULL);
	EXPECT_HAS(p, "pubsub_channels:1\r\n");
	/* pipelined after SUBSCRIBE in one send: RESP2's subscribed state holds */
	{
		struct cl *q = cl_open(t->port);

		cl_cmd(q, "SUBSCRIBE", "other", NULL);
		cl_cmd(q, "GET", "x", NULL);
		cl_cmd(q, "UNSUBSCRIBE", NULL);
		cl_cmd(q, "GET", "x", NULL);
		EXPECT(q, "*3\r\n$9\r\nsubscribe\r\n$5\r\nother\r\n:1\r\n");
		EXPECT(q, "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
			  "QUIT / RESET are allowed in this context\r\n");
		EXPECT(q, "*3\r\n$11\r\nunsubscribe\r\n$5\r\nother\r\n:0\r\n");
		EXPECT(q, "$-1\r\n");
		cl_close(q);
	}
	/* a reply and the pushes after it, in order */
	cl_cmd(sub[on[0]], "PING", NULL);
	cl_flush(sub[on[0]]);
	cl_cmd(p, "PUBLISH", "news", "2", NULL);
	EXPECT(p, t->srv.nshards > 1 ? ":3\r\n" : ":1\r\n");
	EXPECT(sub[on[0]], "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
	EXPECT(sub[on[0]], "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$1\r\n2\r\n");
	for (int i = 0; i < nsub; i++)
		cl_close(sub[i]);
	cl_close(p);
}

Test(kv, publish_reaches_every_shard, .timeout = 60)
{
	run_kv(1, NULL, publish_body);
	run_kv(2, NULL, publish_body);
}

/* A subscriber that does not read is disconnected once its pending
 * pushes pass the pubsub limit (--output-limit / 8), and the publisher
 * never waits for it. */
static void slow_sub_body(struct kv_test *t)
{
	struct cl *s = cl_open(t->port), *p = cl_open(t->port);
	static char big[64 * 1024];
	uint64_t t0 = corio_now_ns();
	int i;

	if (!s || !p)
		return;
	memset(big, 'x', sizeof(big) - 1);
	cl_cmd(s, "SUBSCRIBE", "flood", NULL);
	EXPECT(s, "*3\r\n$9\r\nsubscribe\r\n$5\r\nflood\r\n:1\r\n");
	for (i = 0; i < 2000; i++) {
		const char *r;

		cl_cmd(p, "PUBLISH", "flood", big, NULL);
		r = cl_reply(p);
		if (!r || !strcmp(r, ":0\r\n"))
			break; /* gone */
	}
	CHECK(i < 2000);
	CHECK(corio_now_ns() - t0 < 20000000000ull);
	CHECK(info_num(p, "stats", "client_output_limit_disconnections:") == 1);
	cl_close(s);
	cl_close(p);
}

Test(kv, slow_subscriber_is_disconnected, .timeout = 60)
{
	struct kv_limits lim;

	kv_limits_default(&lim);
	lim.out_limit = 1 << 20; /* pubsub limit: 128 KiB */
	run_kv(2, &lim, slow_sub_body);
}

/* ---- (b) access control ------------------------------------------------------------ */

static const char *const auth_script[] = {
	"nosuch",
	"get",
	"get a",
	"ping",
	"MULTI",
	"EXEC",
	"AUTH",
	"AUTH a b c",
	"AUTH bad",
	"AUTH bob sec",
	"HELLO",
	"HELLO 3",
	"HELLO 3 AUTH default bad",
	"HELLO 2 AUTH bob sec SETNAME x",
	"CLIENT ID",
	"AUTH default sec",
	"SET a 1",
	"GET a",
	"MULTI",
	"AUTH sec",
	"GET a",
	"EXEC",
	"CONFIG SET requirepass \"\"",
	"AUTH sec",
	"AUTH x y",
	"AUTH default zzz",
	"CONFIG SET protected-mode no",
	"CONFIG SET foo bar",
	"CONFIG SET requirepass",
	"CONFIG GET requirepass",
	"CONFIG SET requirepass sec",
	"CONFIG GET requirepass",
	"CONFIG SET protected-mode maybe",
	"CONFIG SET protected-mode yes requirepass sec2",
	"CONFIG GET protected-mode",
	NULL,
};

/* A new connection after the password changed. */
static const char *const auth_after_script[] = {
	"GET a",
	"AUTH sec",
	"~ HELLO 3 AUTH default sec2",
	"GET a",
	"CONFIG SET requirepass sec",
	NULL,
};

static void auth_body(struct kv_test *t)
{
	struct cl *kv = cl_open(t->port), *ref = ref_open();

	if (kv && ref)
		diff_script_at(kv, ref, auth_script, __FILE__, __LINE__);
	cl_close(kv);
	cl_close(ref);
	kv = cl_open(t->port);
	ref = ref_open();
	if (kv && ref)
		diff_script_at(kv, ref, auth_after_script, __FILE__, __LINE__);
	cl_close(kv);
	cl_close(ref);
}

Test(kv, diff_auth_requirepass, .timeout = 120)
{
	ref_start("--requirepass", "sec", NULL);
	kv_test_pass = "sec";
	run_kv(1, NULL, auth_body);
	run_kv(2, NULL, auth_body);
	kv_test_pass = NULL;
	ref_stop();
}

/* CONFIG SET requirepass on one shard holds on every shard: connections
 * that land on each (SO_REUSEPORT spreads them) need the new password and
 * refuse the old; those already authenticated stay so. */
static void auth_all_shards(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	bool seen[2] = { false, false };

	if (!c)
		return;
	cl_cmd(c, "CONFIG", "SET", "requirepass", "n3w", NULL);
	EXPECT(c, "+OK\r\n");
	for (int i = 0; i < 40 && !(seen[0] && seen[t->srv.nshards - 1]); i++) {
		struct cl *d = cl_open(t->port);

		if (!d)
			break;
		cl_cmd(d, "GET", "k", NULL);
		EXPECT(d, "-NOAUTH Authentication required.\r\n");
		cl_cmd(d, "AUTH", "pw", NULL);
		EXPECT(d, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
		cl_cmd(d, "AUTH", "n3wx", NULL); /* a longer attempt that starts right */
		EXPECT(d, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
		cl_cmd(d, "AUTH", "n3", NULL);
		EXPECT(d, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
		cl_cmd(d, "AUTH", "n3w", NULL);
		EXPECT(d, "+OK\r\n");
		seen[cl_shard(d) == 1] = true;
		cl_close(d);
	}
	CHECK(seen[0] && seen[t->srv.nshards - 1]);
	cl_cmd(c, "GET", "k", NULL); /* authenticated before the change */
	EXPECT(c, "$-1\r\n");
	cl_close(c);
}

Test(kv, requirepass_set_on_one_shard_holds_on_all, .timeout = 60)
{
	run_kv(2, NULL, auth_all_shards);
}

/* The first IPv4 address of this machine that is not loopback, or 0. */
static int outside_addr(char *out, size_t n)
{
	struct ifaddrs *ifa, *i;
	int found = 0;

	if (getifaddrs(&ifa))
		return 0;
	for (i = ifa; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		if ((ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr) >> 24) == 127)
			continue;
		found = inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out,
				  (socklen_t)n) != NULL;
	}
	freeifaddrs(ifa);
	return found;
}

static char outside[INET_ADDRSTRLEN];

/* Protected mode: bound to every address with no password, a client from
 * another address gets Redis's -DENIED and the close; loopback is served;
 * once a password is set the outside client is served (and must AUTH). */
static void protected_body(struct kv_test *t)
{
	struct cl *local = cl_open(t->port), *far;
	char where[64];
	struct corio_sock *s;

	if (!local)
		return;
	snprintf(where, sizeof(where), "%s:%d", outside, t->port);
	CHECK_EQ(corio_tcp_connect(where, &s), 0);
	far = calloc(1, sizeof(*far));
	far->s = s;
	cl_reply(far);
	CHECK(far->last && !strncmp(far->last, "-DENIED Redis is running in protected mode", 42));
	CHECK(far->last && !strcmp(far->last, kv_denied_msg));
	CHECK(cl_closed(far));
	cl_close(far);
	cl_cmd(local, "PING", NULL);
	EXPECT(local, "+PONG\r\n");
	cl_cmd(local, "INFO", "stats", NULL);
	EXPECT_HAS(local, "rejected_connections:1\r\n");
	cl_cmd(local, "CONFIG", "SET", "requirepass", "pw", NULL);
	EXPECT(local, "+OK\r\n");
	CHECK_EQ(corio_tcp_connect(where, &s), 0);
	far = calloc(1, sizeof(*far));
	far->s = s;
	cl_cmd(far, "PING", NULL);
	EXPECT(far, "-NOAUTH Authentication required.\r\n");
	cl_cmd(far, "AUTH", "pw", NULL);
	EXPECT(far, "+OK\r\n");
	cl_close(far);
	/* protected-mode no: served without a password too */
	cl_cmd(local, "CONFIG", "SET", "requirepass", "", "protected-mode", "no", NULL);
	EXPECT(local, "+OK\r\n");
	CHECK_EQ(corio_tcp_connect(where, &s), 0);
	far = calloc(1, sizeof(*far));
	far->s = s;
	cl_cmd(far, "PING", NULL);
	EXPECT(far, "+PONG\r\n");
	cl_close(far);
	cl_close(local);
}

Test(kv, protected_mode_refuses_outside_clients, .timeout = 60)
{
	if (!outside_addr(outside, sizeof(outside)))
		cr_skip_test("no non-loopback IPv4 address to connect from");
	kv_test_host = "0.0.0.0";
	kv_test_protected = 1;
	run_kv(2, NULL, protected_body);
	kv_test_host = NULL;
	kv_test_protected = 0;
}

/* ---- real clients ------------------------------------------------------------------------ */

static void kv_idle_entry(void *arg)
{
	kv_shard_main(arg);
}

static int run_cmd(const char *cmd, char *out, size_t n)
{
	FILE *f = popen(cmd, "r");
	size_t got;

	cr_assert(f, "popen %s", cmd);
	got = fread(out, 1, n - 1, f);
	out[got] = 0;
	return pclose(f);
}

Test(kv, redis_cli_and_benchmark, .timeout = 120)
{
	static struct kv_server srv;
	struct corio_config cfg = th_cfg(2);
	struct corio_rt *rt;
	char cmd[512], out[4096];
	int before, port, st;

	if (system("command -v redis-cli >/dev/null 2>&1") != 0)
		cr_skip_test("redis-cli is not installed (apt-get install redis-tools)");
	before = th_fd_count();
	memset(&srv, 0, sizeof(srv));
	kv_limits_default(&srv.lim);
	cfg.flags |= CORIO_F_NO_PIN;
	cr_assert_eq(kv_server_init(&srv, 2), 0);
	cr_assert_eq(corio_start(&cfg, kv_idle_entry, &srv, &rt), 0);
	/* waiting for a condition, not for time to pass */
	while (atomic_load(&srv.listening) < 2 && !atomic_load(&srv.failed))
		usleep(1000);
	cr_assert(!atomic_load(&srv.failed));
	port = atomic_load(&srv.bound_port);

	snprintf(cmd, sizeof(cmd), "redis-cli -p %d set a 1 && redis-cli -p %d incr a && "
		 "redis-cli -p %d get a", port, port, port);
	st = run_cmd(cmd, out, sizeof(out));
	cr_assert_eq(st, 0, "%s: status %d", cmd, st);
	cr_assert_str_eq(out, "OK\n2\n2\n");
	snprintf(cmd, sizeof(cmd),
		 "printf 'mset x 1 y 2 z 3\\nmget x y z nope\\nexpire x 100\\nttl x\\ndbsize\\n"
		 "ping\\nnosuch\\n' | redis-cli -p %d", port);
	st = run_cmd(cmd, out, sizeof(out));
	cr_assert_eq(st, 0);
	cr_assert_str_eq(out, "OK\n1\n2\n3\n\n1\n100\n4\nPONG\n"
			      "ERR unknown command 'nosuch', with args beginning with: \n\n", "got: %s", out);
	snprintf(cmd, sizeof(cmd), "redis-cli -p %d info keyspace", port);
	st = run_cmd(cmd, out, sizeof(out));
	cr_assert(st == 0 && strstr(out, "db0:keys=4,expires=1"), "got: %s", out);

	/* redis-py's pubsub (when the system's python3 has redis) */
	if (system("/usr/bin/python3 -c 'import redis' >/dev/null 2>&1") == 0) {
		snprintf(cmd, sizeof(cmd),
			 "/usr/bin/python3 -c 'import redis\n"
			 "r = redis.Redis(port=%d); p = r.pubsub(); p.subscribe(\"ch\")\n"
			 "print(p.get_message(timeout=2)[\"type\"], r.publish(\"ch\", \"hi\"))\n"
			 "m = p.get_message(timeout=2); print(m[\"type\"], m[\"data\"])\n' 2>&1", port);
		st = run_cmd(cmd, out, sizeof(out));
		cr_assert_eq(st, 0, "%s", out);
		cr_assert_str_eq(out, "subscribe 1\nmessage b'hi'\n");
	}
	/* node-redis's subscribe, which used to throw an uncaught "unknown
	 * command" and end the Node process (runs when node resolves the redis
	 * module, e.g. NODE_PATH=/path/node_modules with redis@4 installed) */
	if (system("node -e \"require('redis')\" >/dev/null 2>&1") == 0) {
		snprintf(cmd, sizeof(cmd),
			 "node -e \"const { createClient } = require('redis'); (async () => {"
			 "const c = createClient({ url: 'redis://127.0.0.1:%d' }); await c.connect();"
			 "const s = c.duplicate(); await s.connect(); let got = null;"
			 "await s.subscribe('ch', (m, ch) => { got = ch + ':' + m; });"
			 "const n = await c.publish('ch', 'hi');"
			 "await new Promise(r => setTimeout(r, 200));"
			 "console.log(n, got); await s.quit(); await c.quit();"
			 "})().catch(e => { console.log('throw', e.message); process.exit(3); });\" 2>&1",
			 port);
		st = run_cmd(cmd, out, sizeof(out));
		cr_assert_eq(st, 0, "%s", out);
		cr_assert_str_eq(out, "1 ch:hi\n");
	}
	if (system("command -v redis-benchmark >/dev/null 2>&1") == 0) {
		snprintf(cmd, sizeof(cmd),
			 "redis-benchmark -p %d -n 2000 -c 8 -P 4 -t set,get,incr,mset -q 2>&1", port);
		st = run_cmd(cmd, out, sizeof(out));
		cr_assert_eq(st, 0, "%s: %s", cmd, out);
		cr_assert(strstr(out, "SET: ") && strstr(out, "GET: ") && strstr(out, "INCR: ") &&
			  strstr(out, "MSET (10 keys): "), "got: %s", out);
	}
	corio_stop(rt);
	cr_assert_eq(corio_wait(rt), 0);
	kv_server_free(&srv);
	cr_assert_eq(th_fd_count(), before, "the runtime left file descriptors open");
}

/* kv_str2ll is Redis's string2ll: what it accepts and refuses, on both
 * sides of the 18-digit fast path. */
Test(kv, str2ll_accepts_what_redis_accepts)
{
	static const struct { const char *s; int ok; long long v; } c[] = {
		{ "0", 1, 0 }, { "7", 1, 7 }, { "-7", 1, -7 }, { "100", 1, 100 },
		{ "999999999999999999", 1, 999999999999999999LL },
		{ "-999999999999999999", 1, -999999999999999999LL },
		{ "9223372036854775807", 1, 9223372036854775807LL },
		{ "-9223372036854775808", 1, (-9223372036854775807LL - 1) },
		{ "9223372036854775808", 0, 0 }, { "-9223372036854775809", 0, 0 },
		{ "18446744073709551616", 0, 0 }, { "", 0, 0 }, { "-", 0, 0 }, { "-0", 0, 0 },
		{ "01", 0, 0 }, { " 1", 0, 0 }, { "1 ", 0, 0 }, { "1a", 0, 0 }, { "+1", 0, 0 },
		{ "12345678901234567x", 0, 0 }, { "123456789012345678901", 0, 0 },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		long long v = 12345;
		int ok = kv_str2ll(c[i].s, strlen(c[i].s), &v);

		cr_assert_eq(ok, c[i].ok, "kv_str2ll(\"%s\") = %d", c[i].s, ok);
		if (ok)
			cr_assert_eq(v, c[i].v, "kv_str2ll(\"%s\") gave %lld", c[i].s, v);
	}
}
