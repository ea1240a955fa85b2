/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/table.c - the command table: how a name finds its command, and
 * COMMAND (COUNT, INFO, DOCS, LIST), which describes the same table.
 *
 * Dispatch: every name, lower-cased into two 64-bit words, is hashed into
 * an open-addressed index of KV_CMDTAB slots, built once per server
 * (kv_cmdtab_build(), in kv_server_init()). A lookup folds the request's
 * name the same way (a word at a time), hashes the two words, probes from
 * there (the table is under a quarter full: almost always one slot) and
 * compares two words: the cost does not grow with the table, as the
 * linear scan it replaced did.
 *
 * The families corio-kv does not serve (lists, sets, sorted sets, streams,
 * scripting) are in the table too, so that their commands get one error
 * that names the page listing what it serves, rather than "unknown
 * command"; COMMAND does not list them.
 */
#include "kv.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The rows leave out the trailing fields they do not need (NULL). */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define RO "readonly fast"
#define WR "write denyoom"
#define WRF "write denyoom fast"
#define CONN "noscript loading stale fast allow_busy"
#define RWAU "RW access update"
#define ND "nondeterministic_output"
#define MS_SUM "request_policy:multi_shard response_policy:agg_sum"
#define MS_ALL "request_policy:multi_shard response_policy:all_succeeded"
#define AS_SUM "request_policy:all_shards response_policy:agg_sum"
#define AS_ALL "request_policy:all_shards response_policy:all_succeeded"
#define KWSD "keyspace write slow dangerous"

/* name, arity, kind, n, flags, COMMAND flags, first, last, step, group, and
 * where they differ from what the flags imply: tips, key spec flags, ACL
 * categories (all Redis 7.0's) */
static const struct kv_spec kv_specs[] = {
	{ "get", 2, C_GET, 0, 0, RO, 1, 1, 1, "string" },
	{ "set", -3, C_SET, 0, 0, WR, 1, 1, 1, "string" },
	{ "del", -2, C_DEL, 0, 0, "write", 1, -1, 1, "generic", MS_SUM, "RM delete" },
	{ "exists", -2, C_EXISTS, 0, 0, RO, 1, -1, 1, "generic", MS_SUM, "RO" },
	{ "incr", 2, C_INCR, 1, 0, WRF, 1, 1, 1, "string", NULL, RWAU },
	{ "decr", 2, C_INCR, -1, 0, WRF, 1, 1, 1, "string", NULL, RWAU },
	{ "incrby", 3, C_INCR, 0, 0, WRF, 1, 1, 1, "string", NULL, RWAU },
	{ "decrby", 3, C_INCR, 0, F_NEG, WRF, 1, 1, 1, "string", NULL, RWAU },
	{ "mget", -2, C_MGET, 0, 0, RO, 1, -1, 1, "string", "request_policy:multi_shard" },
	{ "mset", -3, C_MSET, 0, 0, WR, 1, -1, 2, "string", MS_ALL, "OW update" },
	{ "expire", -3, C_EXPIRE, 1000, 0, "write fast", 1, 1, 1, "generic" },
	{ "pexpire", -3, C_EXPIRE, 1, 0, "write fast", 1, 1, 1, "generic" },
	{ "ttl", 2, C_TTL, 0, 0, RO, 1, 1, 1, "generic", ND },
	{ "pttl", 2, C_TTL, 0, F_PX, RO, 1, 1, 1, "generic", ND },
	{ "persist", 2, C_PERSIST, 0, 0, "write fast", 1, 1, 1, "generic" },
	{ "setex", 4, C_SETEX, 1000, 0, WR, 1, 1, 1, "string", NULL, "OW update" },
	{ "psetex", 4, C_SETEX, 1, 0, WR, 1, 1, 1, "string", NULL, "OW update" },
	{ "setnx", 3, C_SET, 0, F_NX | F_INTREPLY, WRF, 1, 1, 1, "string", NULL, "OW insert" },
	{ "getset", 3, C_SET, 0, F_GET, WRF, 1, 1, 1, "string", NULL, RWAU },
	{ "getdel", 2, C_GETDEL, 0, 0, "write fast", 1, 1, 1, "string", NULL, "RW access delete" },
	{ "getex", -2, C_GETEX, 0, 0, "write fast", 1, 1, 1, "string", NULL, RWAU },
	{ "append", 3, C_APPEND, 0, 0, WRF, 1, 1, 1, "string", NULL, "RW insert" },
	{ "strlen", 2, C_STRLEN, 0, 0, RO, 1, 1, 1, "string", NULL, "RO" },
	{ "getrange", 4, C_GETRANGE, 0, 0, "readonly", 1, 1, 1, "string" },
	{ "setrange", 4, C_SETRANGE, 0, 0, WR, 1, 1, 1, "string", NULL, "RW update" },
	{ "incrbyfloat", 3, C_INCRBYFLOAT, 0, 0, WRF, 1, 1, 1, "string", NULL, RWAU },
	{ "expireat", -3, C_EXPIRE, 1000, F_EXAT, "write fast", 1, 1, 1, "generic", NULL, "RW update" },
	{ "pexpireat", -3, C_EXPIRE, 1, F_EXAT, "write fast", 1, 1, 1, "generic", NULL, "RW update" },
	{ "expiretime", 2, C_EXPIRETIME, 0, 0, RO, 1, 1, 1, "generic", NULL, "RO access" },
	{ "pexpiretime", 2, C_EXPIRETIME, 0, F_PX, RO, 1, 1, 1, "generic", NULL, "RO access" },
	{ "type", 2, C_TYPE, 0, 0, RO, 1, 1, 1, "generic", NULL, "RO" },
	{ "unlink", -2, C_DEL, 0, 0, "write fast", 1, -1, 1, "generic", MS_SUM, "RM delete" },
	{ "touch", -2, C_EXISTS, 0, 0, RO, 1, -1, 1, "generic", MS_SUM, "RO" },
	{ "object", -2, C_OBJECT, 0, 0, "readonly", 2, 2, 1, "generic", ND },
	{ "memory", -2, C_MEMORY, 0, 0, "readonly", 2, 2, 1, "server", ND },
	{ "rename", 3, C_RENAME, 0, F_SERIAL, "write", 1, 2, 1, "generic" },
	{ "renamenx", 3, C_RENAME, 0, F_SERIAL | F_NX, "write fast", 1, 2, 1, "generic" },
	{ "copy", -3, C_COPY, 0, F_SERIAL, WR, 1, 2, 1, "generic" },
	{ "msetnx", -3, C_MSETNX, 0, F_SERIAL, WR, 1, -1, 2, "string", MS_ALL, "OW insert" },
	{ "randomkey", 1, C_RANDOMKEY, 0, F_SERIAL, "readonly", 0, 0, 0, "generic",
	  "request_policy:all_shards nondeterministic_output" },
	{ "scan", -2, C_SCAN, 0, F_SERIAL, "readonly", 0, 0, 0, "generic",
	  "nondeterministic_output request_policy:special" },
	{ "keys", 2, C_KEYS, 0, F_SERIAL, "readonly", 0, 0, 0, "generic",
	  "request_policy:all_shards nondeterministic_output_order" },
	{ "watch", -2, C_WATCH, 0, F_SERIAL, "noscript loading stale fast allow_busy", 1, -1, 1,
	  "transactions", NULL, "RO" },
	{ "unwatch", 1, C_UNWATCH, 0, F_SERIAL, CONN, 0, 0, 0, "transactions" },
	{ "time", 1, C_TIME, 0, 0, "loading stale fast", 0, 0, 0, "server", ND },
	{ "role", 1, C_ROLE, 0, 0, "noscript loading stale fast", 0, 0, 0, "server", NULL, NULL,
	  "admin fast dangerous" },
	{ "wait", 3, C_WAIT, 0, 0, "noscript", 0, 0, 0, "generic",
	  "request_policy:all_shards response_policy:agg_min", NULL, "slow connection" },
	{ "slowlog", -2, C_SLOWLOG, 0, 0, "admin loading stale", 0, 0, 0, "server" },
	{ "latency", -2, C_LATENCY, 0, 0, "admin noscript loading stale", 0, 0, 0, "server" },
	{ "hset", -4, C_HSET, 0, 0, WRF, 1, 1, 1, "hash" },
	{ "hmset", -4, C_HSET, 0, F_OKREPLY, WRF, 1, 1, 1, "hash" },
	{ "hsetnx", 4, C_HSETNX, 0, 0, WRF, 1, 1, 1, "hash", NULL, "RW insert" },
	{ "hget", 3, C_HGET, 0, 0, RO, 1, 1, 1, "hash" },
	{ "hmget", -3, C_HMGET, 0, 0, RO, 1, 1, 1, "hash" },
	{ "hgetall", 2, C_HGETALL, 0, 0, "readonly", 1, 1, 1, "hash", "nondeterministic_output_order" },
	{ "hkeys", 2, C_HKEYS, 0, 0, "readonly", 1, 1, 1, "hash", "nondeterministic_output_order" },
	{ "hvals", 2, C_HVALS, 0, 0, "readonly", 1, 1, 1, "hash", "nondeterministic_output_order" },
	{ "hdel", -3, C_HDEL, 0, 0, "write fast", 1, 1, 1, "hash", NULL, "RW delete" },
	{ "hexists", 3, C_HEXISTS, 0, 0, RO, 1, 1, 1, "hash", NULL, "RO" },
	{ "hlen", 2, C_HLEN, 0, 0, RO, 1, 1, 1, "hash", NULL, "RO" },
	{ "hstrlen", 3, C_HSTRLEN, 0, 0, RO, 1, 1, 1, "hash", NULL, "RO" },
	{ "hincrby", 4, C_HINCRBY, 0, 0, WRF, 1, 1, 1, "hash", NULL, RWAU },
	{ "hincrbyfloat", 4, C_HINCRBYFLOAT, 0, 0, WRF, 1, 1, 1, "hash", NULL, RWAU },
	{ "hrandfield", -2, C_HRANDFIELD, 0, 0, "readonly", 1, 1, 1, "hash", ND },
	{ "hscan", -3, C_HSCAN, 0, 0, "readonly", 1, 1, 1, "hash", ND },
	{ "cluster", -2, C_CLUSTER, 0, 0, "loading stale", 0, 0, 0, "cluster", NULL, NULL, "slow" },
	{ "readonly", 1, C_READONLY, 0, 0, "loading stale fast", 0, 0, 0, "cluster", NULL, NULL,
	  "fast connection" },
	{ "readwrite", 1, C_READONLY, 0, 0, "loading stale fast", 0, 0, 0, "cluster", NULL, NULL,
	  "fast connection" },
	{ "subscribe", -2, C_SUBSCRIBE, 0, 0, "pubsub noscript loading stale", 0, 0, 0, "pubsub" },
	{ "psubscribe", -2, C_SUBSCRIBE, 0, F_PATTERN, "pubsub noscript loading stale", 0, 0, 0,
	  "pubsub" },
	{ "unsubscribe", -1, C_UNSUBSCRIBE, 0, 0, "pubsub noscript loading stale", 0, 0, 0, "pubsub" },
	{ "punsubscribe", -1, C_UNSUBSCRIBE, 0, F_PATTERN, "pubsub noscript loading stale", 0, 0, 0,
	  "pubsub" },
	{ "publish", 3, C_PUBLISH, 0, 0, "pubsub loading stale fast may_replicate", 0, 0, 0, "pubsub" },
	{ "pubsub", -2, C_PUBSUB, 0, 0, "pubsub loading stale", 0, 0, 0, "pubsub" },
	{ "dbsize", 1, C_DBSIZE, 0, 0, RO, 0, 0, 0, "server", AS_SUM, NULL, "keyspace read fast" },
	{ "flushall", -1, C_FLUSHALL, 0, 0, "write", 0, 0, 0, "server", AS_ALL, NULL, KWSD },
	{ "flushdb", -1, C_FLUSHALL, 0, 0, "write", 0, 0, 0, "server", AS_ALL, NULL, KWSD },
	{ "ping", -1, C_PING, 0, 0, "fast", 0, 0, 0, "connection", AS_ALL },
	{ "echo", 2, C_ECHO, 0, 0, "loading stale fast", 0, 0, 0, "connection" },
	{ "info", -1, C_INFO, 0, 0, "loading stale", 0, 0, 0, "server",
	  "nondeterministic_output request_policy:all_shards response_policy:special", NULL,
	  "slow dangerous" },
	{ "config", -2, C_CONFIG, 0, 0, "admin loading stale", 0, 0, 0, "server" },
	{ "save", 1, C_SAVE, 0, F_SERIAL, "admin noscript no_async_loading no_multi", 0, 0, 0, "server" },
	{ "bgsave", -1, C_BGSAVE, 0, F_SERIAL, "admin noscript no_async_loading", 0, 0, 0, "server" },
	{ "lastsave", 1, C_LASTSAVE, 0, 0, "loading stale fast", 0, 0, 0, "server", ND, NULL,
	  "admin fast dangerous" },
	{ "shutdown", -1, C_SHUTDOWN, 0, F_SERIAL, "admin noscript loading stale no_multi allow_busy", 0,
	  0, 0, "server" },
	{ "command", -1, C_COMMAND, 0, 0, "loading stale", 0, 0, 0, "server",
	  "nondeterministic_output_order", NULL, "slow connection" },
	{ "client", -2, C_CLIENT, 0, 0, "loading stale", 0, 0, 0, "connection" },
	{ "select", 2, C_SELECT, 0, 0, "loading stale fast", 0, 0, 0, "connection" },
	{ "quit", -1, C_QUIT, 0, 0, "noscript loading stale fast no_auth allow_busy", 0, 0, 0, "connection" },
	{ "hello", -1, C_HELLO, 0, 0, "noscript loading stale fast no_auth allow_busy", 0, 0, 0,
	  "connection" },
	{ "auth", -2, C_AUTH, 0, 0, "noscript loading stale fast no_auth allow_busy", 0, 0, 0,
	  "connection" },
	{ "multi", 1, C_MULTI, 0, 0, CONN, 0, 0, 0, "transactions" },
	{ "exec", 1, C_EXEC, 0, 0, "noscript loading stale skip_slowlog", 0, 0, 0, "transactions" },
	{ "discard", 1, C_DISCARD, 0, 0, CONN, 0, 0, 0, "transactions" },
};
#define KV_NSPECS (sizeof(kv_specs) / sizeof(kv_specs[0]))

/* The families not served this round (C_NOTSERVED; group: the family). */
#define NS(nm, fam) { nm, -1, C_NOTSERVED, 0, 0, "", 0, 0, 0, fam }
static const struct kv_spec kv_notserved[] = {
	NS("lpush", "list"), NS("rpush", "list"), NS("lpushx", "list"), NS("rpushx", "list"),
	NS("lpop", "list"), NS("rpop", "list"), NS("llen", "list"), NS("lrange", "list"),
	NS("lindex", "list"), NS("lset", "list"), NS("linsert", "list"), NS("lrem", "list"),
	NS("ltrim", "list"), NS("lpos", "list"), NS("lmove", "list"), NS("blmove", "list"),
	NS("rpoplpush", "list"), NS("brpoplpush", "list"), NS("blpop", "list"),
	NS("brpop", "list"), NS("lmpop", "list"), NS("blmpop", "list"),
	NS("sadd", "set"), NS("srem", "set"), NS("smembers", "set"), NS("sismember", "set"),
	NS("smismember", "set"), NS("scard", "set"), NS("spop", "set"),
	NS("srandmember", "set"), NS("smove", "set"), NS("sinter", "set"),
	NS("sinterstore", "set"), NS("sintercard", "set"), NS("sunion", "set"),
	NS("sunionstore", "set"), NS("sdiff", "set"), NS("sdiffstore", "set"),
	NS("sscan", "set"),
	NS("zadd", "sorted set"), NS("zrem", "sorted set"), NS("zscore", "sorted set"),
	NS("zmscore", "sorted set"), NS("zincrby", "sorted set"), NS("zcard", "sorted set"),
	NS("zcount", "sorted set"), NS("zlexcount", "sorted set"), NS("zrange", "sorted set"),
	NS("zrangestore", "sorted set"), NS("zrangebyscore", "sorted set"),
	NS("zrangebylex", "sorted set"), NS("zrevrange", "sorted set"),
	NS("zrevrangebyscore", "sorted set"), NS("zrevrangebylex", "sorted set"),
	NS("zrank", "sorted set"), NS("zrevrank", "sorted set"),
	NS("zremrangebyrank", "sorted set"), NS("zremrangebyscore", "sorted set"),
	NS("zremrangebylex", "sorted set"), NS("zpopmin", "sorted set"),
	NS("zpopmax", "sorted set"), NS("bzpopmin", "sorted set"),
	NS("bzpopmax", "sorted set"), NS("zmpop", "sorted set"), NS("bzmpop", "sorted set"),
	NS("zrandmember", "sorted set"), NS("zscan", "sorted set"), NS("zunion", "sorted set"),
	NS("zunionstore", "sorted set"), NS("zinter", "sorted set"),
	NS("zinterstore", "sorted set"), NS("zintercard", "sorted set"),
	NS("zdiff", "sorted set"), NS("zdiffstore", "sorted set"),
	NS("xadd", "stream"), NS("xrange", "stream"), NS("xrevrange", "stream"),
	NS("xlen", "stream"), NS("xread", "stream"), NS("xreadgroup", "stream"),
	NS("xgroup", "stream"), NS("xack", "stream"), NS("xpending", "stream"),
	NS("xclaim", "stream"), NS("xautoclaim", "stream"), NS("xdel", "stream"),
	NS("xtrim", "stream"), NS("xinfo", "stream"), NS("xsetid", "stream"),
	NS("eval", "scripting"), NS("evalsha", "scripting"), NS("eval_ro", "scripting"),
	NS("evalsha_ro", "scripting"), NS("script", "scripting"), NS("function", "scripting"),
	NS("fcall", "scripting"), NS("fcall_ro", "scripting"),
};
#undef NS
#define KV_NNOTSERVED (sizeof(kv_notserved) / sizeof(kv_notserved[0]))

/*
 * A name (at most 16 bytes) as two little-endian words, zero-padded, its
 * ASCII capitals made small a word at a time: a byte's top bit after
 * adding 0x3f says ">= 'A'", after adding 0x25 ">= '['"; the capitals get
 * 0x20. Other bytes stay as they are, so the key is the name exactly, in
 * lower case.
 */
static uint64_t kv_load(const char *p, size_t n)
{
	uint64_t v = 0;

	memcpy(&v, p, n); /* n is 4 or 8 where it is called: a plain load */
	return v;
}

static inline __attribute__((always_inline)) uint64_t kv_fold(uint64_t x)
{
	const uint64_t hi = 0x8080808080808080ull, lo7 = 0x7f7f7f7f7f7f7f7full;
	uint64_t low = x & lo7;
	uint64_t upper = (low + 0x3f3f3f3f3f3f3f3full) & ~(low + 0x2525252525252525ull) & ~x & hi;

	return x | (upper >> 2);
}

static inline __attribute__((always_inline)) void kv_name_key(const char *p, size_t n, uint64_t k[2])
{
	/* the bytes into place with loads that stay inside p[0 .. n) and may
	 * overlap (an overlapped byte is the same value twice) */
	k[1] = 0;
	if (n >= 8) {
		k[0] = kv_load(p, 8);
		if (n > 8)
			k[1] = kv_load(p + n - 8, 8) >> (8 * (16 - n));
	} else if (n >= 4) {
		k[0] = kv_load(p, 4) | kv_load(p + n - 4, 4) << (8 * (n - 4));
	} else if (n) {
		k[0] = (uint64_t)(uint8_t)p[0] | (uint64_t)(uint8_t)p[n / 2] << (8 * (n / 2)) |
		       (uint64_t)(uint8_t)p[n - 1] << (8 * (n - 1));
	} else {
		k[0] = 0;
	}
	k[0] = kv_fold(k[0]);
	if (n > 8)
		k[1] = kv_fold(k[1]);
}

static uint32_t kv_key_hash(const uint64_t k[2], size_t n)
{
	uint64_t h = (k[0] ^ (k[1] * 0x9e3779b97f4a7c15ull) ^ n) * 0xbf58476d1ce4e5b9ull;

	return (uint32_t)(h >> 40);
}

static void kv_tab_insert(struct kv_cmdtab *t, const struct kv_spec *sp, size_t idx)
{
	size_t n = strlen(sp->name);
	struct kv_slot s = { .sp = sp, .len = (uint16_t)n, .idx = (uint16_t)idx };
	uint32_t i;

	kv_name_key(sp->name, n, s.key);
	for (i = kv_key_hash(s.key, n) & (KV_CMDTAB - 1); t->slot[i].sp; i = (i + 1) & (KV_CMDTAB - 1))
		;
	t->slot[i] = s;
}

/*
 * Build the index of every name (kv_server_init(); the server's, read-only
 * from then on). 0, or -ENOSPC when the table outgrew its index (a
 * mistake made when building corio-kv, which the tests catch).
 */
int kv_cmdtab_build(struct kv_cmdtab *t)
{
	memset(t, 0, sizeof(*t));
	if (KV_NSPECS + KV_NNOTSERVED > KV_CMDTAB / 2)
		return -ENOSPC;
	for (size_t i = 0; i < KV_NSPECS; i++)
		kv_tab_insert(t, &kv_specs[i], i);
	for (size_t i = 0; i < KV_NNOTSERVED; i++)
		kv_tab_insert(t, &kv_notserved[i], KV_NSPECS);
	return 0;
}

size_t kv_nspecs(void)
{
	return KV_NSPECS;
}

const struct kv_spec *kv_spec_at(size_t i)
{
	return &kv_specs[i];
}

size_t kv_spec_index(const struct kv_spec *sp)
{
	if (sp < kv_specs || sp >= kv_specs + KV_NSPECS)
		return KV_NSPECS;
	return (size_t)(sp - kv_specs);
}

/* The slot of the command named a (any case), or NULL: the name folded
 * into two words, one hash of them, then (almost always) one slot whose
 * words and length match. */
const struct kv_slot *kv_find_cmd(const struct kv_cmdtab *t, const struct kv_arg *a)
{
	uint64_t k[2];
	uint32_t i;

	if (a->n > KV_NAME_LONGEST)
		return NULL;
	kv_name_key(a->p, a->n, k);
	for (i = kv_key_hash(k, a->n) & (KV_CMDTAB - 1); t->slot[i].sp; i = (i + 1) & (KV_CMDTAB - 1)) {
		const struct kv_slot *s = &t->slot[i];

		if (s->key[0] == k[0] && s->key[1] == k[1] && s->len == a->n)
			return s;
	}
	return NULL;
}

const struct kv_spec *kv_find_spec(const struct kv_cmdtab *t, const struct kv_arg *a)
{
	const struct kv_slot *s = kv_find_cmd(t, a);

	return s ? s->sp : NULL;
}

bool kv_is(const struct kv_arg *a, const char *word)
{
	return strlen(word) == a->n && !strncasecmp(word, a->p, a->n);
}

/* The error for a command of a family corio-kv does not serve: not "unknown
 * command", but what it is and where to read what is served. */
void kv_reply_notserved(const struct kv_cmd *cmd, struct kv_buf *o)
{
	char msg[300];

	snprintf(msg, sizeof(msg), "ERR '%s' is a %s command: corio-kv does not serve lists, sets, "
		 "sorted sets, streams or scripting; see docs/corio-kv.md (corio-kv(1)) for the "
		 "commands it serves", cmd->spec->name, cmd->spec->group);
	kv_err(o, msg);
}

/* Is sub one of the subcommands of the container command name (Redis
 * 7.0's, served or not: a known one with the wrong arity gets Redis's
 * "wrong number of arguments for 'object|encoding'")? */
bool kv_subcommand_known(const char *name, const struct kv_arg *sub)
{
	static const char *const subs[][2] = {
		{ "object", "encoding idletime refcount freq help" },
		{ "memory", "usage stats doctor malloc-stats purge help" },
		{ "client", "id info list kill getname setname no-evict no-touch pause unpause reply "
			    "tracking trackinginfo getredir caching unblock setinfo help" },
		{ "config", "get set resetstat rewrite help" },
		{ "slowlog", "get len reset help" },
		{ "latency", "latest history reset graph doctor histogram help" },
		{ "cluster", "info slots shards nodes myid keyslot countkeysinslot help" },
		{ "pubsub", "channels numsub numpat shardchannels shardnumsub help" },
	};

	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		const char *p = subs[i][1];

		if (strcmp(subs[i][0], name))
			continue;
		while (*p) {
			size_t n = strcspn(p, " ");

			if (n == sub->n && !strncasecmp(p, sub->p, n))
				return true;
			p += n + (p[n] == ' ');
		}
	}
	return false;
}

/* ---- COMMAND: the table, as clients read it -------------------------------------- */

static int kv_words(const char *s)
{
	int n = 0;

	for (const char *q = s; *q; q++)
		n += (q == s || q[-1] == ' ') && *q != ' ';
	return n;
}

/* The words of s as simple strings, prefixed by pre ("@" for ACL categories). */
static void kv_word_set(struct kv_buf *o, const char *s, const char *pre, bool resp3)
{
	kv_num(o, resp3 ? '~' : '*', kv_words(s));
	for (const char *q = s; *q;) {
		size_t n = strcspn(q, " ");

		if (n) {
			kv_put(o, "+", 1);
			kv_put(o, pre, strlen(pre));
			kv_put(o, q, n);
			KV_LIT(o, "\r\n");
		}
		q += n + (q[n] == ' ');
	}
}

static bool kv_has_flag(const struct kv_spec *sp, const char *w)
{
	size_t n = strlen(w);

	for (const char *q = sp->cflags; (q = strstr(q, w)); q += n)
		if ((q == sp->cflags || q[-1] == ' ') && (q[n] == ' ' || !q[n]))
			return true;
	return false;
}

/* Redis's ACL categories, from the flags and the group, in Redis's order. */
static void kv_acl_cats(const struct kv_spec *sp, char *out, size_t n)
{
	const char *g = sp->group;

	if (sp->acl) {
		snprintf(out, n, "%s", sp->acl);
		return;
	}
	bool str = !strcmp(g, "string"), hash = !strcmp(g, "hash"), ps = !strcmp(g, "pubsub");

	snprintf(out, n, "%s%s%s%s%s%s%s%s%s%s%s", !strcmp(g, "generic") ? "keyspace " : "",
		 kv_has_flag(sp, "readonly") ? "read " : "", kv_has_flag(sp, "write") ? "write " : "",
		 hash ? "hash " : "", str ? "string " : "", ps ? "pubsub " : "",
		 kv_has_flag(sp, "admin") ? "admin " : "", kv_has_flag(sp, "fast") ? "fast " : "slow ",
		 kv_has_flag(sp, "admin") ? "dangerous " : "",
		 !strcmp(g, "connection") ? "connection " : "",
		 !strcmp(g, "transactions") ? "transaction " : "");
	if (*out)
		out[strlen(out) - 1] = 0; /* the last space */
}

/* The key spec of a command with keys (first, last, step), in Redis 7.0's shape. */
static void kv_key_spec(struct kv_buf *o, const struct kv_spec *sp, bool resp3)
{
	const char *m = resp3 ? "%" : "*";
	int f = resp3 ? 1 : 2;

	if (!sp->first) {
		kv_num(o, resp3 ? '~' : '*', 0);
		return;
	}
	kv_num(o, resp3 ? '~' : '*', 1);
	kv_num(o, m[0], 3 * f);
	kv_bulkstr(o, "flags");
	kv_word_set(o, sp->ks ? sp->ks : kv_has_flag(sp, "readonly") ? "RO access" : "RW update", "",
		    resp3);
	kv_bulkstr(o, "begin_search");
	kv_num(o, m[0], 2 * f);
	kv_bulkstr(o, "type");
	kv_bulkstr(o, "index");
	kv_bulkstr(o, "spec");
	kv_num(o, m[0], 1 * f);
	kv_bulkstr(o, "index");
	kv_num(o, ':', sp->first);
	kv_bulkstr(o, "find_keys");
	kv_num(o, m[0], 2 * f);
	kv_bulkstr(o, "type");
	kv_bulkstr(o, "range");
	kv_bulkstr(o, "spec");
	kv_num(o, m[0], 3 * f);
	kv_bulkstr(o, "lastkey");
	kv_num(o, ':', sp->last < 0 ? sp->last : sp->last - sp->first);
	kv_bulkstr(o, "keystep");
	kv_num(o, ':', sp->step);
	kv_bulkstr(o, "limit");
	kv_num(o, ':', 0);
}

/* One command as COMMAND INFO gives it: Redis 7.0's ten fields. */
static void kv_command_info(struct kv_buf *o, const struct kv_spec *sp, bool resp3)
{
	char cats[96];

	kv_num(o, '*', 10);
	kv_bulkstr(o, sp->name);
	kv_num(o, ':', sp->arity);
	kv_word_set(o, sp->cflags, "", resp3);
	kv_num(o, ':', sp->first);
	kv_num(o, ':', sp->last);
	kv_num(o, ':', sp->step);
	kv_acl_cats(sp, cats, sizeof(cats));
	kv_word_set(o, cats, "@", resp3);
	if (sp->tips) {
		kv_num(o, resp3 ? '~' : '*', kv_words(sp->tips));
		for (const char *q = sp->tips; *q;) {
			size_t n = strcspn(q, " ");

			kv_bulk(o, q, n);
			q += n + (q[n] == ' ');
		}
	} else {
		kv_num(o, resp3 ? '~' : '*', 0); /* tips */
	}
	kv_key_spec(o, sp, resp3);
	kv_num(o, resp3 ? '~' : '*', 0); /* subcommands */
}

/* One command as COMMAND DOCS gives it: its name, then a map of its group
 * (corio-kv keeps no summaries or argument lists: redis-cli then shows no
 * hints, which it handles). */
static void kv_command_docs(struct kv_buf *o, const struct kv_spec *sp, bool resp3)
{
	kv_bulkstr(o, sp->name);
	kv_num(o, resp3 ? '%' : '*', resp3 ? 1 : 2);
	kv_bulkstr(o, "group");
	kv_bulkstr(o, sp->group);
}

/* COMMAND, COUNT, INFO [name...], DOCS [name...], LIST. */
void kv_reply_command(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	const struct kv_cmdtab *t = &c->srv->cmds;
	bool r3 = cmd->resp3;

	if (cmd->argc == 1) {
		kv_num(o, '*', (long long)KV_NSPECS);
		for (size_t i = 0; i < KV_NSPECS; i++)
			kv_command_info(o, &kv_specs[i], r3);
	} else if (kv_is(&a[1], "count") && cmd->argc == 2) {
		kv_num(o, ':', (long long)KV_NSPECS);
	} else if (kv_is(&a[1], "list") && cmd->argc == 2) {
		kv_num(o, '*', (long long)KV_NSPECS);
		for (size_t i = 0; i < KV_NSPECS; i++)
			kv_bulkstr(o, kv_specs[i].name);
	} else if (kv_is(&a[1], "docs")) {
		const struct kv_spec *sp;
		size_t n = 0;

		if (cmd->argc == 2) {
			kv_num(o, r3 ? '%' : '*', (long long)(r3 ? KV_NSPECS : 2 * KV_NSPECS));
			for (size_t i = 0; i < KV_NSPECS; i++)
				kv_command_docs(o, &kv_specs[i], r3);
			return;
		}
		for (uint32_t i = 2; i < cmd->argc; i++)
			n += (sp = kv_find_spec(t, &a[i])) && sp->kind != C_NOTSERVED;
		kv_num(o, r3 ? '%' : '*', (long long)(r3 ? n : 2 * n));
		for (uint32_t i = 2; i < cmd->argc; i++)
			if ((sp = kv_find_spec(t, &a[i])) && sp->kind != C_NOTSERVED)
				kv_command_docs(o, sp, r3);
	} else if (kv_is(&a[1], "info")) {
		kv_num(o, '*', (long long)cmd->argc - 2);
		for (uint32_t i = 2; i < cmd->argc; i++) {
			const struct kv_spec *sp = kv_find_spec(t, &a[i]);

			if (sp && sp->kind != C_NOTSERVED)
				kv_command_info(o, sp, r3);
			else
				kv_null(o, r3);
		}
	} else if (kv_is(&a[1], "count")) {
		kv_err(o, "ERR wrong number of arguments for 'command|count' command");
	} else if (kv_is(&a[1], "list")) { /* LIST FILTERBY ...: not here */
		kv_err(o, "ERR syntax error");
	} else {
		char msg[200];

		snprintf(msg, sizeof(msg), "ERR unknown subcommand '%.*s'. Try COMMAND HELP.",
			 (int)(a[1].n > 64 ? 64 : a[1].n), a[1].p);
		kv_err_sanitized(o, msg);
	}
}
