/* SPDX-License-Identifier: MIT */
/*
 * tools/kv (corio-kv), the server as a whole: the RESP parser cut at every
 * byte, then the real server (kv_shard_main(), in this process, 1 and 2
 * shards) driven over 127.0.0.1 by a small RESP client running in a fiber:
 * every command, answers checked against redis-server, pipelines whose keys
 * live on both shards answered in order, expiry (lazy and the active
 * sweep), malformed input, the limits (bulk length, multi-bulk count, query
 * buffer, output, maxmemory). Each runtime ends with no fd left open
 * (th_run()).
 *
 * test_kv_commands.c has the same commands sent to redis-server and
 * corio-kv (when redis-server is installed), the command families one by
 * one and the real clients; kv_helpers.h the client and run_kv() both
 * files use.
 */
#include "kv_helpers.h"

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
	/* the sweeps ran in the background class, on both shards */
	{
		int bg = corio_class_find("kv-background");
		struct corio_class_stats st;

		CHECK(bg > 0);
		for (unsigned s = 0; bg > 0 && s < 2; s++) {
			CHECK_EQ(corio_class_stats_get(NULL, s, (unsigned)bg, &st), 0);
			CHECK(st.fibers_run >= 1 && st.cpu_ns > 0);
			CHECK_EQ(st.shares, KV_BG_SHARES);
		}
	}
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
