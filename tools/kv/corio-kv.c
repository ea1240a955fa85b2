/* SPDX-License-Identifier: MIT */
/*
 * corio-kv - an in-memory key-value server that speaks Redis's protocol
 * (RESP2, RESP3 after HELLO 3, and inline commands), sharded thread-per-core
 * on corio's public API. Unmodified redis-cli and redis-benchmark talk to it.
 *
 *	corio-kv [-p port] [-b host] [-n shards] [--maxmemory BYTES] ...
 *	redis-cli -p 6380 set a 1
 *
 * Design (shared nothing, like Seastar's memcached and Dragonfly):
 *  - Each shard owns the keys whose hash maps to it (a seeded 64-bit hash;
 *    the high half picks the shard, the low half the bucket). Its table,
 *    expiry heap, memory count and counters are touched by its thread only.
 *  - Every shard listens on the same port (CORIO_LISTEN_REUSEPORT); a
 *    connection is a fiber on the shard that accepted it.
 *  - A connection receives into its own query buffer (corio_recv: the
 *    kernel writes there directly) and parses every complete command in it
 *    in place: arguments are (pointer, length) pairs into that buffer.
 *  - The commands of one receive form a batch. Each command becomes one or
 *    more ops, one per key (MGET/MSET/DEL/EXISTS fan out per key) or one per
 *    shard (DBSIZE, FLUSHALL). Ops owned by other shards run there first,
 *    one corio_call per shard (corio_gather when several shards are
 *    involved), each writing its replies into that shard's reply buffer of
 *    the connection. Then the connection walks the batch in request order,
 *    running its own shard's ops right there into the output buffer and
 *    copying the remote replies, so replies leave in request order. Each
 *    shard runs a batch's ops in request order, so a pipeline sees its own
 *    writes. The output of a batch goes out with one send (or in
 *    parts of half the output limit, when larger).
 *  - Expiry: an absolute CLOCK_MONOTONIC deadline in ms per key; checked
 *    lazily on every access, and an active sweep: a min-heap of expiring
 *    keys per shard and one corio_timer armed at its earliest deadline. The
 *    timer callback deletes at most KV_SWEEP_BUDGET keys per loop turn and
 *    re-arms in the past when more are due, so a mass expiry never stalls
 *    the loop.
 *  - The table rehashes incrementally (Redis's scheme): a few buckets move
 *    per operation, never the whole table at once.
 *  - Limits: a bulk longer than proto-max-bulk-len, a multi-bulk count over
 *    max-multibulk, a command larger than the query-buffer limit, or
 *    malformed RESP get "-ERR Protocol error: ..." and the connection is
 *    closed (replies to the commands before it are sent first). The output
 *    limit bounds the replies a connection holds: they are sent at half of
 *    it, mid-batch, the fiber waiting while the client does not read (see
 *    kv_remote_budget()); a client that reads is never closed. With
 *    --maxmemory, writes are refused with -OOM once a shard uses more than
 *    its share (maxmemory / shards) - no eviction.
 *  - MULTI copies the commands after it into a queue; EXEC makes them a
 *    batch of their own, replied to as one array.
 *
 * Not atomic across shards: MSET, FLUSHALL and EXEC apply per shard
 * (another client may see part of an MSET); single-key commands are
 * atomic, and each shard runs its part of an EXEC back to back while the
 * replies stay under the output budgets.
 *
 * test/test_kv.c includes this file with CORIO_KV_NO_MAIN and drives
 * kv_shard_main() over 127.0.0.1; test/fuzz/fuzz_resp.c fuzzes resp_parse().
 */
#include <corio.h>

#include "common/timing.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#define KV_VERSION "7.0.0" /* the Redis version whose replies we follow */
#define KV_QBUF_INIT (16 * 1024)
#define KV_BIG_BUF (1024 * 1024)  /* buffers above this shrink when idle */
#define KV_MAX_LINE (64 * 1024)   /* inline request / count line limit (Redis) */
#define KV_BATCH_CMDS 256         /* commands per batch */
#define KV_BATCH_OPS 4096         /* ops per batch (one command may exceed it) */
#define KV_SWEEP_BUDGET 200       /* expired keys deleted per loop turn */
#define KV_TABLE_INIT 1024        /* buckets */
#define KV_NONE UINT32_MAX
#define KV_NAME_MAX 64            /* CLIENT SETNAME: bytes, with the NUL */

/* ---- limits and the parser (no I/O) ---------------------------------------- */

struct kv_limits {
	uint64_t proto_max_bulk_len; /* longest bulk string (512 MiB)            */
	uint64_t max_multibulk;      /* most arguments in one command (1 Mi)     */
	uint64_t qbuf_limit;         /* largest command, all of it (64 MiB)      */
	uint64_t out_limit;          /* replies one connection holds (256 MiB)  */
	uint64_t maxmemory;          /* 0: unlimited                             */
};

static void kv_limits_default(struct kv_limits *l)
{
	l->proto_max_bulk_len = 512ull << 20;
	l->max_multibulk = 1024 * 1024;
	l->qbuf_limit = 64ull << 20;
	l->out_limit = 256ull << 20;
	l->maxmemory = 0;
}

struct kv_arg {
	const char *p;
	size_t n;
};

/* Arguments of the commands of one batch, appended by resp_parse(). */
struct kv_argv {
	struct kv_arg *v;
	size_t n, cap;
};

#define RESP_MORE 0   /* incomplete: *need is the total length worth waiting for */
#define RESP_CMD 1    /* one command: its arguments appended, *used bytes eaten */
#define RESP_ERR (-1) /* protocol error: the message (no "-ERR ") in errbuf     */
#define RESP_NOMEM (-2)

/* Redis's string2ll: an optional '-', digits, no leading zero, no spaces,
 * fits in a long long. 1 when p[0..n) is such a number. */
static int kv_str2ll(const char *p, size_t n, long long *out)
{
	unsigned long long v = 0;
	bool neg = false;
	size_t i = 0;

	if (n == 0 || n > 20)
		return 0;
	if (n == 1 && p[0] == '0') {
		*out = 0;
		return 1;
	}
	if (p[0] == '-') {
		neg = true;
		if (++i == n)
			return 0;
	}
	if (p[i] < '1' || p[i] > '9')
		return 0;
	for (; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return 0;
		if (v > (ULLONG_MAX - (unsigned)(p[i] - '0')) / 10)
			return 0;
		v = v * 10 + (unsigned)(p[i] - '0');
	}
	if (neg) {
		if (v > (unsigned long long)LLONG_MAX + 1)
			return 0;
		*out = (long long)(0 - v);
	} else {
		if (v > LLONG_MAX)
			return 0;
		*out = (long long)v;
	}
	return 1;
}

static int argv_push(struct kv_argv *av, const char *p, size_t n)
{
	if (av->n == av->cap) {
		size_t cap = av->cap ? av->cap * 2 : 64;
		struct kv_arg *v = realloc(av->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		av->v = v;
		av->cap = cap;
	}
	av->v[av->n].p = p;
	av->v[av->n].n = n;
	av->n++;
	return 0;
}

/* "\r\n"-terminated line at p[at..n): the index of its '\r', or -1 (none yet). */
static long line_end(const char *p, size_t n, size_t at)
{
	const char *cr = memchr(p + at, '\r', n - at);

	return cr ? (long)(cr - p) : -1;
}

/*
 * Parse one command from p[0..n) (the unparsed part of a query buffer).
 * RESP_CMD: its arguments were appended to av (none for an empty command,
 * "*0" or a blank inline line: skip it) and *used is its length.
 * RESP_MORE: nothing appended; *need is the buffer length worth waiting
 * for (n + 1 when unknown). RESP_ERR: a protocol error, described in
 * errbuf; the connection must be closed. RESP_NOMEM. No I/O, no state
 * kept between calls: the caller parses again from the same place once
 * more bytes have arrived.
 */
static int resp_parse(const char *p, size_t n, const struct kv_limits *lim, struct kv_argv *av,
		      size_t *used, size_t *need, char *errbuf, size_t errlen)
{
	size_t base = av->n, at;
	long long count, len;
	long cr;

	*need = n + 1;
	if (n == 0)
		return RESP_MORE;
	if (p[0] != '*') {
		/* inline: words separated by spaces or tabs, up to LF (CR stripped) */
		const char *lf = memchr(p, '\n', n);
		size_t end, i = 0;

		if (!lf) {
			if (n > KV_MAX_LINE) {
				snprintf(errbuf, errlen, "Protocol error: too big inline request");
				return RESP_ERR;
			}
			return RESP_MORE;
		}
		end = (size_t)(lf - p);
		if (end > KV_MAX_LINE) { /* the same answer however the bytes were cut */
			snprintf(errbuf, errlen, "Protocol error: too big inline request");
			return RESP_ERR;
		}
		*used = end + 1;
		if (end && p[end - 1] == '\r')
			end--;
		while (i < end) {
			size_t w;

			while (i < end && (p[i] == ' ' || p[i] == '\t'))
				i++;
			if (i == end)
				break;
			for (w = i; w < end && p[w] != ' ' && p[w] != '\t'; w++)
				;
			if (av->n - base >= lim->max_multibulk) {
				av->n = base;
				snprintf(errbuf, errlen, "Protocol error: invalid multibulk length");
				return RESP_ERR;
			}
			if (argv_push(av, p + i, w - i)) {
				av->n = base;
				return RESP_NOMEM;
			}
			i = w;
		}
		return RESP_CMD;
	}
	cr = line_end(p, n, 1);
	if (cr < 0 || cr > KV_MAX_LINE) {
		if (n > KV_MAX_LINE) {
			snprintf(errbuf, errlen, "Protocol error: too big mbulk count string");
			return RESP_ERR;
		}
		return RESP_MORE;
	}
	if ((size_t)cr + 1 >= n)
		return RESP_MORE; /* the LF has not arrived */
	if (p[cr + 1] != '\n' || !kv_str2ll(p + 1, (size_t)cr - 1, &count) ||
	    (count > 0 && (unsigned long long)count > lim->max_multibulk)) {
		snprintf(errbuf, errlen, "Protocol error: invalid multibulk length");
		return RESP_ERR;
	}
	at = (size_t)cr + 2;
	for (long long i = 0; i < count; i++) {
		if (at >= n)
			goto more;
		if (p[at] != '$') {
			unsigned char c = (unsigned char)p[at];

			if (c >= 32 && c < 127)
				snprintf(errbuf, errlen, "Protocol error: expected '$', got '%c'", c);
			else
				snprintf(errbuf, errlen, "Protocol error: expected '$', got '\\x%02x'", c);
			goto err;
		}
		cr = line_end(p, n, at + 1);
		if (cr < 0 || (size_t)cr - at > KV_MAX_LINE) {
			if (n - at > KV_MAX_LINE) {
				snprintf(errbuf, errlen, "Protocol error: too big bulk count string");
				goto err;
			}
			goto more;
		}
		if ((size_t)cr + 1 >= n)
			goto more;
		if (p[cr + 1] != '\n' || !kv_str2ll(p + at + 1, (size_t)cr - at - 1, &len) || len < 0 ||
		    (unsigned long long)len > lim->proto_max_bulk_len) {
			snprintf(errbuf, errlen, "Protocol error: invalid bulk length");
			goto err;
		}
		at = (size_t)cr + 2;
		if (at + (size_t)len + 2 > lim->qbuf_limit) {
			snprintf(errbuf, errlen,
				 "Protocol error: command larger than the query buffer limit (%llu bytes)",
				 (unsigned long long)lim->qbuf_limit);
			goto err;
		}
		if (at + (size_t)len + 2 > n) {
			*need = at + (size_t)len + 2;
			goto more;
		}
		if (p[at + len] != '\r' || p[at + len + 1] != '\n') {
			snprintf(errbuf, errlen, "Protocol error: expected CRLF after a bulk string");
			goto err;
		}
		if (argv_push(av, p + at, (size_t)len)) {
			av->n = base;
			return RESP_NOMEM;
		}
		at += (size_t)len + 2;
	}
	*used = at;
	return RESP_CMD;
more:
	av->n = base;
	if (*need <= n)
		*need = n + 1;
	return RESP_MORE;
err:
	av->n = base;
	return RESP_ERR;
}

/* ---- growable output buffers ------------------------------------------------- */

struct kv_buf {
	char *p;
	size_t len, cap;
	bool nomem; /* a write did not fit: the connection gives up */
};

static bool kv_reserve(struct kv_buf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->len + more <= b->cap)
		return true;
	if (b->nomem)
		return false;
	cap = b->cap ? b->cap * 2 : 512;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->nomem = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

static void kv_put(struct kv_buf *b, const void *p, size_t n)
{
	if (kv_reserve(b, n)) {
		memcpy(b->p + b->len, p, n);
		b->len += n;
	}
}

#define KV_LIT(b, s) kv_put((b), s, sizeof(s) - 1)

static size_t kv_lltoa(char *dst, long long v)
{
	char tmp[24];
	unsigned long long u = v < 0 ? 0 - (unsigned long long)v : (unsigned long long)v;
	size_t n = 0, i = 0;

	do
		tmp[n++] = (char)('0' + u % 10);
	while ((u /= 10));
	if (v < 0)
		dst[i++] = '-';
	while (n)
		dst[i++] = tmp[--n];
	return i;
}

/* ":v\r\n", "*v\r\n", "$v\r\n" */
static void kv_num(struct kv_buf *b, char type, long long v)
{
	if (kv_reserve(b, 24)) {
		b->p[b->len++] = type;
		b->len += kv_lltoa(b->p + b->len, v);
		b->p[b->len++] = '\r';
		b->p[b->len++] = '\n';
	}
}

static void kv_bulk(struct kv_buf *b, const void *p, size_t n)
{
	if (kv_reserve(b, n + 32)) {
		kv_num(b, '$', (long long)n);
		memcpy(b->p + b->len, p, n);
		b->len += n;
		b->p[b->len++] = '\r';
		b->p[b->len++] = '\n';
	}
}

static void kv_bulkstr(struct kv_buf *b, const char *s)
{
	kv_bulk(b, s, strlen(s));
}

/* Null: RESP2's null bulk string (Redis 7.0 answers it for arrays too, as
 * COMMAND INFO of an unknown name), RESP3's null. */
static void kv_null(struct kv_buf *b, bool resp3)
{
	if (resp3)
		KV_LIT(b, "_\r\n");
	else
		KV_LIT(b, "$-1\r\n");
}

/* Text for humans (INFO, CLIENT INFO): RESP3's verbatim string, as Redis. */
static void kv_verbatim(struct kv_buf *b, const void *p, size_t n, bool resp3)
{
	if (!resp3) {
		kv_bulk(b, p, n);
		return;
	}
	kv_num(b, '=', (long long)n + 4);
	KV_LIT(b, "txt:");
	kv_put(b, p, n);
	KV_LIT(b, "\r\n");
}

/* "-ERR msg\r\n" (or another error prefix that msg starts with, "-OOM ...") */
static void kv_err(struct kv_buf *b, const char *msg)
{
	kv_put(b, "-", 1);
	kv_put(b, msg, strlen(msg));
	KV_LIT(b, "\r\n");
}

static void kv_buf_free(struct kv_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* ---- a shard's keyspace --------------------------------------------------------- */

/* A key and its value, in one allocation. */
struct kv_entry {
	struct kv_entry *next; /* bucket chain */
	uint64_t hash;
	int64_t expire;        /* CLOCK_MONOTONIC ms; 0: none */
	uint32_t hidx;         /* expiry heap slot + 1; 0: not in the heap */
	uint32_t klen;
	uint32_t vlen;
	char data[];           /* key, then value */
};

struct kv_table {
	struct kv_entry **b;
	size_t mask; /* buckets - 1; b == NULL: none */
};

/* One shard's counters: written by their shard with relaxed stores, read
 * by INFO on any shard (each value untorn; the set is not a snapshot). */
struct kv_counters {
	_Atomic uint64_t keys, expires, used_memory;
	_Atomic uint64_t conns, conns_total, cmds, hits, misses, expired;
	_Atomic uint64_t remote_ops;   /* ops this shard ran for other shards' connections */
	_Atomic uint64_t remote_calls; /* corio_call/gather this shard's connections made */
	_Atomic uint64_t batches, proto_errors, oom_refused;
	_Atomic uint64_t out_flushes; /* sends made at half the output limit, mid-batch */
	_Atomic uint64_t out_waiting; /* connections waiting in such a send now */
	_Atomic uint64_t out_peak;    /* most bytes one connection's replies held */
};

#define KV_INC(x, d) atomic_store_explicit(&(x), atomic_load_explicit(&(x), memory_order_relaxed) + (d), \
					    memory_order_relaxed)
#define KV_GET(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define KV_SET(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

struct kv_server;

struct kv_shard {
	struct kv_server *srv;
	unsigned id;
	struct kv_table t[2]; /* t[1] is the rehash target */
	size_t rehash;        /* next t[0] bucket to move while t[1].b != NULL */
	size_t count;
	struct kv_entry **heap; /* entries with an expiry, min-heap by expire */
	size_t hn, hcap;
	struct corio_timer sweep;
	uint64_t mem;         /* bytes this shard holds (entries, tables, heap) */
	uint64_t maxmem;      /* this shard's share of maxmemory; 0: none */
	uint64_t next_conn_id;
	struct kv_counters st;
};

static int64_t kv_now_ms(void)
{
	return (int64_t)(corio_now_ns() / 1000000);
}

/* CLOCK_REALTIME in ms: EXAT and PXAT name Unix times, and Redis bounds
 * every expiry argument by the Unix time (its "basetime"), so we do too. */
static int64_t kv_unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The CLOCK_MONOTONIC deadline (ms) of an expiry n ms from now, or, when
 * at_unix, at the Unix time n ms (n >= 0); saturates rather than wraps. */
static int64_t kv_deadline_ms(long long n, bool at_unix)
{
	int64_t d = at_unix ? n - kv_unix_ms() : n, when;

	if (__builtin_add_overflow(kv_now_ms(), d, &when))
		when = d < 0 ? INT64_MIN : INT64_MAX;
	return when;
}

static size_t kv_usable(void *p)
{
	return p ? malloc_usable_size(p) : 0;
}

static void kv_mem(struct kv_shard *sh, int64_t delta)
{
	sh->mem += (uint64_t)delta;
	KV_SET(sh->st.used_memory, sh->mem);
}

/* ---- expiry heap ---- */

static void heap_set(struct kv_shard *sh, size_t i, struct kv_entry *e)
{
	sh->heap[i] = e;
	e->hidx = (uint32_t)(i + 1);
}

static void heap_up(struct kv_shard *sh, size_t i)
{
	struct kv_entry *e = sh->heap[i];

	while (i) {
		size_t parent = (i - 1) / 2;

		if (sh->heap[parent]->expire <= e->expire)
			break;
		heap_set(sh, i, sh->heap[parent]);
		i = parent;
	}
	heap_set(sh, i, e);
}

static void heap_down(struct kv_shard *sh, size_t i)
{
	struct kv_entry *e = sh->heap[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= sh->hn)
			break;
		if (c + 1 < sh->hn && sh->heap[c + 1]->expire < sh->heap[c]->expire)
			c++;
		if (sh->heap[c]->expire >= e->expire)
			break;
		heap_set(sh, i, sh->heap[c]);
		i = c;
	}
	heap_set(sh, i, e);
}

static void heap_remove(struct kv_shard *sh, struct kv_entry *e)
{
	size_t i = e->hidx - 1;

	e->hidx = 0;
	if (--sh->hn != i) {
		heap_set(sh, i, sh->heap[sh->hn]);
		heap_up(sh, i);
		heap_down(sh, sh->heap[i]->hidx - 1);
	}
	KV_SET(sh->st.expires, sh->hn);
}

static void kv_sweep_arm(struct kv_shard *sh)
{
	uint64_t when, armed;

	if (!sh->hn)
		return;
	when = tool_ms_to_ns(sh->heap[0]->expire); /* saturates: EXPIRE k 9223372036854 */
	armed = corio_timer_deadline(&sh->sweep);
	if (!armed || when < armed)
		corio_timer_arm(&sh->sweep, when, 0); /* -ENOMEM: the lazy check still holds */
}

/* Give e the expiry when (ms; 0: none). false: no memory for the heap. */
static bool kv_set_expire(struct kv_shard *sh, struct kv_entry *e, int64_t when)
{
	if (!when) {
		if (e->hidx)
			heap_remove(sh, e);
		e->expire = 0;
		return true;
	}
	if (!e->hidx) {
		if (sh->hn == sh->hcap) {
			size_t cap = sh->hcap ? sh->hcap * 2 : 64;
			struct kv_entry **h = realloc(sh->heap, cap * sizeof(*h));

			if (!h)
				return false;
			kv_mem(sh, (int64_t)((cap - sh->hcap) * sizeof(*h)));
			sh->heap = h;
			sh->hcap = cap;
		}
		e->expire = when;
		heap_set(sh, sh->hn++, e);
		heap_up(sh, sh->hn - 1);
		KV_SET(sh->st.expires, sh->hn);
	} else {
		int64_t old = e->expire;

		e->expire = when;
		if (when < old)
			heap_up(sh, e->hidx - 1);
		else
			heap_down(sh, e->hidx - 1);
	}
	kv_sweep_arm(sh);
	return true;
}

/* ---- the table ---- */

static uint64_t kv_hash(uint64_t seed, const char *p, size_t n)
{
	uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ull), w;

	while (n >= 8) {
		memcpy(&w, p, 8);
		h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
		h ^= h >> 31;
		p += 8;
		n -= 8;
	}
	w = 0;
	memcpy(&w, p, n);
	h = (h ^ w) * 0x94d049bb133111ebull;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	return h ^ (h >> 32);
}

static bool kv_table_alloc(struct kv_shard *sh, struct kv_table *t, size_t buckets)
{
	t->b = calloc(buckets, sizeof(*t->b));
	if (!t->b)
		return false;
	t->mask = buckets - 1;
	kv_mem(sh, (int64_t)(buckets * sizeof(*t->b)));
	return true;
}

static void kv_table_free(struct kv_shard *sh, struct kv_table *t)
{
	if (t->b)
		kv_mem(sh, -(int64_t)((t->mask + 1) * sizeof(*t->b)));
	free(t->b);
	t->b = NULL;
	t->mask = 0;
}

/* Move up to n buckets (and look at most 10 n empty ones) from t[0] to t[1]. */
static void kv_rehash_step(struct kv_shard *sh, int n)
{
	int empty = n * 10;

	while (n-- && sh->t[1].b) {
		struct kv_entry *e;

		while (!sh->t[0].b[sh->rehash]) {
			sh->rehash++;
			if (sh->rehash > sh->t[0].mask || !--empty)
				break;
		}
		if (sh->rehash <= sh->t[0].mask) {
			e = sh->t[0].b[sh->rehash];
			sh->t[0].b[sh->rehash] = NULL;
			while (e) {
				struct kv_entry *next = e->next;
				struct kv_entry **slot = &sh->t[1].b[e->hash & sh->t[1].mask];

				e->next = *slot;
				*slot = e;
				e = next;
			}
			sh->rehash++;
		}
		if (sh->rehash > sh->t[0].mask) {
			kv_table_free(sh, &sh->t[0]);
			sh->t[0] = sh->t[1];
			sh->t[1].b = NULL;
			sh->t[1].mask = 0;
			sh->rehash = 0;
		}
		if (!empty)
			break;
	}
}

/* The link that points at key's entry (its *link is NULL when absent):
 * in t[1] while rehashing when the bucket has moved. */
static struct kv_entry **kv_link(struct kv_shard *sh, uint64_t h, const char *k, size_t kn)
{
	struct kv_entry **l;

	if (sh->t[1].b)
		kv_rehash_step(sh, 1);
	for (int i = 0; i < 2 && sh->t[i].b; i++) {
		for (l = &sh->t[i].b[h & sh->t[i].mask]; *l; l = &(*l)->next) {
			struct kv_entry *e = *l;

			if (e->hash == h && e->klen == kn && !memcmp(e->data, k, kn))
				return l;
		}
		if (!sh->t[1].b)
			break;
	}
	/* absent: where to insert (t[1] while rehashing) */
	return &sh->t[sh->t[1].b ? 1 : 0].b[h & sh->t[sh->t[1].b ? 1 : 0].mask];
}

static void kv_unlink(struct kv_shard *sh, struct kv_entry **l)
{
	struct kv_entry *e = *l;

	*l = e->next;
	if (e->hidx)
		heap_remove(sh, e);
	kv_mem(sh, -(int64_t)kv_usable(e));
	free(e);
	sh->count--;
	KV_SET(sh->st.keys, sh->count);
}

/* The live entry for key, or NULL (an expired one is deleted on the way:
 * the lazy half of expiry). *lp gets the link either way. */
static struct kv_entry *kv_lookup(struct kv_shard *sh, uint64_t h, const struct kv_arg *k,
				  struct kv_entry ***lp)
{
	struct kv_entry **l = kv_link(sh, h, k->p, k->n);
	struct kv_entry *e = *l;

	if (e && e->hash == h && e->klen == k->n && !memcmp(e->data, k->p, k->n)) {
		if (e->expire && e->expire <= kv_now_ms()) {
			kv_unlink(sh, l);
			KV_INC(sh->st.expired, 1);
			l = kv_link(sh, h, k->p, k->n);
			e = NULL;
		}
	} else {
		e = NULL;
	}
	*lp = l;
	return e;
}

/*
 * Store value v under key at link l (old: the entry there, or NULL). The
 * entry is rewritten in place when its allocation is large enough, else
 * replaced (keeping its chain position and heap slot). keep_ttl keeps old's
 * expiry, otherwise it is cleared. Returns the entry, or NULL without memory.
 */
static struct kv_entry *kv_store(struct kv_shard *sh, struct kv_entry **l, struct kv_entry *old,
				 uint64_t h, const struct kv_arg *k, const void *v, size_t vn,
				 bool keep_ttl)
{
	size_t need = sizeof(struct kv_entry) + k->n + vn;
	struct kv_entry *e;

	if (old && kv_usable(old) >= need && kv_usable(old) <= 2 * need + 64) {
		memmove(old->data + old->klen, v, vn); /* v may be old's own value (INCR) */
		old->vlen = (uint32_t)vn;
		if (!keep_ttl)
			kv_set_expire(sh, old, 0);
		return old;
	}
	e = malloc(need);
	if (!e)
		return NULL;
	e->hash = h;
	e->expire = 0;
	e->hidx = 0;
	e->klen = (uint32_t)k->n;
	e->vlen = (uint32_t)vn;
	memcpy(e->data, k->p, k->n);
	memcpy(e->data + k->n, v, vn);
	kv_mem(sh, (int64_t)kv_usable(e));
	if (old) {
		e->next = old->next;
		if (old->hidx) {
			if (keep_ttl) { /* take over old's heap slot */
				e->expire = old->expire;
				heap_set(sh, old->hidx - 1, e);
				old->hidx = 0;
			} else {
				heap_remove(sh, old);
			}
		}
		kv_mem(sh, -(int64_t)kv_usable(old));
		free(old);
	} else {
		e->next = *l;
		sh->count++;
		KV_SET(sh->st.keys, sh->count);
	}
	*l = e;
	/* grow at load factor 1; rehash incrementally from now on */
	if (!old && !sh->t[1].b && sh->count > sh->t[0].mask + 1 &&
	    kv_table_alloc(sh, &sh->t[1], (sh->t[0].mask + 1) * 2))
		sh->rehash = 0;
	return e;
}

static void kv_flush(struct kv_shard *sh)
{
	for (int i = 0; i < 2; i++) {
		for (size_t b = 0; sh->t[i].b && b <= sh->t[i].mask; b++) {
			struct kv_entry *e = sh->t[i].b[b];

			while (e) {
				struct kv_entry *next = e->next;

				kv_mem(sh, -(int64_t)kv_usable(e));
				free(e);
				e = next;
			}
		}
		kv_table_free(sh, &sh->t[i]);
	}
	sh->rehash = 0;
	sh->count = 0;
	sh->hn = 0;
	KV_SET(sh->st.keys, 0);
	KV_SET(sh->st.expires, 0);
	if (corio_shard_id() == sh->id)
		corio_timer_cancel(&sh->sweep);
	kv_table_alloc(sh, &sh->t[0], KV_TABLE_INIT); /* failing: t[0].b stays NULL */
}

/* The active half of expiry: runs on the loop at the earliest deadline. */
static void kv_sweep_fn(struct corio_timer *t, void *arg, int res)
{
	struct kv_shard *sh = arg;
	int64_t now = kv_now_ms();
	int n = 0;

	(void)t;
	if (res < 0)
		return; /* the shard stops */
	while (sh->hn && sh->heap[0]->expire <= now && n++ < KV_SWEEP_BUDGET) {
		struct kv_entry *e = sh->heap[0];
		struct kv_arg k = { e->data, e->klen };
		struct kv_entry **l = kv_link(sh, e->hash, k.p, k.n);

		if (*l != e) { /* cannot happen: every heap entry is in the table */
			heap_remove(sh, e);
			continue;
		}
		kv_unlink(sh, l);
		KV_INC(sh->st.expired, 1);
	}
	/* more due: the deadline is in the past, so this runs again next turn */
	kv_sweep_arm(sh);
}

static int kv_shard_init(struct kv_shard *sh, struct kv_server *srv, unsigned id, uint64_t maxmem)
{
	memset(sh, 0, sizeof(*sh));
	sh->srv = srv;
	sh->id = id;
	sh->maxmem = maxmem;
	corio_timer_init(&sh->sweep, kv_sweep_fn, sh);
	return kv_table_alloc(sh, &sh->t[0], KV_TABLE_INIT) ? 0 : -ENOMEM;
}

/* After the runtime has stopped. */
static void kv_shard_free(struct kv_shard *sh)
{
	for (int i = 0; i < 2; i++) {
		for (size_t b = 0; sh->t[i].b && b <= sh->t[i].mask; b++) {
			struct kv_entry *e = sh->t[i].b[b];

			while (e) {
				struct kv_entry *next = e->next;

				free(e);
				e = next;
			}
		}
		free(sh->t[i].b);
		sh->t[i].b = NULL;
	}
	free(sh->heap);
	sh->heap = NULL;
	sh->hn = sh->hcap = 0;
}

/* ---- the server and its commands ------------------------------------------------ */

struct kv_server {
	struct kv_limits lim;
	unsigned nshards;
	uint64_t seed;
	const char *host;         /* "127.0.0.1" */
	int port;                 /* 0: pick one (shard 0 binds, the others join) */
	struct kv_shard *sh;      /* [nshards], each touched by its shard only */
	uint64_t start_ns;
	_Atomic int bound_port;
	_Atomic unsigned listening;
	_Atomic int failed;
};

static unsigned kv_owner(const struct kv_server *srv, uint64_t h)
{
	return (unsigned)(((h >> 32) * srv->nshards) >> 32);
}

enum kv_kind {
	C_UNKNOWN, C_ARITY, C_ERR, /* replies made from the command alone */
	C_PING, C_ECHO, C_GET, C_SET, C_DEL, C_EXISTS, C_INCR, C_MGET, C_MSET, C_EXPIRE,
	C_TTL, C_PERSIST, C_DBSIZE, C_FLUSHALL, C_INFO, C_CONFIG, C_COMMAND, C_CLIENT,
	C_SELECT, C_QUIT, C_HELLO, C_MULTI, C_EXEC, C_DISCARD, C_QUEUED,
};

/* set / expire flags */
#define F_NX 0x1u
#define F_XX 0x2u
#define F_GET 0x4u
#define F_KEEPTTL 0x8u
#define F_GT 0x10u
#define F_LT 0x20u
#define F_PX 0x40u  /* TTL: milliseconds */
#define F_EXP 0x80u /* SET: an expiry was given (in n, ms) */
#define F_NEG 0x100u /* DECRBY: negate the argument */
#define F_EXAT 0x200u /* SET: n is a Unix time in ms (EXAT, PXAT) */

struct kv_spec {
	const char *name;
	int arity; /* Redis's: > 0 exactly, < 0 at least -arity */
	enum kv_kind kind;
	long long n;  /* INCR's step, ... */
	unsigned flags;
	const char *cflags; /* COMMAND's flags */
	int first, last, step;
};

static const struct kv_spec kv_specs[] = {
	{ "get", 2, C_GET, 0, 0, "readonly fast", 1, 1, 1 },
	{ "set", -3, C_SET, 0, 0, "write denyoom", 1, 1, 1 },
	{ "del", -2, C_DEL, 0, 0, "write", 1, -1, 1 },
	{ "exists", -2, C_EXISTS, 0, 0, "readonly fast", 1, -1, 1 },
	{ "incr", 2, C_INCR, 1, 0, "write denyoom fast", 1, 1, 1 },
	{ "decr", 2, C_INCR, -1, 0, "write denyoom fast", 1, 1, 1 },
	{ "incrby", 3, C_INCR, 0, 0, "write denyoom fast", 1, 1, 1 },
	{ "decrby", 3, C_INCR, 0, F_NEG, "write denyoom fast", 1, 1, 1 },
	{ "mget", -2, C_MGET, 0, 0, "readonly fast", 1, -1, 1 },
	{ "mset", -3, C_MSET, 0, 0, "write denyoom", 1, -1, 2 },
	{ "expire", -3, C_EXPIRE, 1000, 0, "write fast", 1, 1, 1 },
	{ "pexpire", -3, C_EXPIRE, 1, 0, "write fast", 1, 1, 1 },
	{ "ttl", 2, C_TTL, 0, 0, "readonly fast", 1, 1, 1 },
	{ "pttl", 2, C_TTL, 0, F_PX, "readonly fast", 1, 1, 1 },
	{ "persist", 2, C_PERSIST, 0, 0, "write fast", 1, 1, 1 },
	{ "dbsize", 1, C_DBSIZE, 0, 0, "readonly fast", 0, 0, 0 },
	{ "flushall", -1, C_FLUSHALL, 0, 0, "write", 0, 0, 0 },
	{ "flushdb", -1, C_FLUSHALL, 0, 0, "write", 0, 0, 0 },
	{ "ping", -1, C_PING, 0, 0, "fast", 0, 0, 0 },
	{ "echo", 2, C_ECHO, 0, 0, "fast", 0, 0, 0 },
	{ "info", -1, C_INFO, 0, 0, "loading stale", 0, 0, 0 },
	{ "config", -2, C_CONFIG, 0, 0, "admin loading stale", 0, 0, 0 },
	{ "command", -1, C_COMMAND, 0, 0, "loading stale", 0, 0, 0 },
	{ "client", -2, C_CLIENT, 0, 0, "loading stale", 0, 0, 0 },
	{ "select", 2, C_SELECT, 0, 0, "loading stale fast", 0, 0, 0 },
	{ "quit", -1, C_QUIT, 0, 0, "loading stale fast", 0, 0, 0 },
	{ "hello", -1, C_HELLO, 0, 0, "noscript loading stale fast no_auth", 0, 0, 0 },
	{ "multi", 1, C_MULTI, 0, 0, "noscript loading stale fast", 0, 0, 0 },
	{ "exec", 1, C_EXEC, 0, 0, "noscript loading stale skip_slowlog", 0, 0, 0 },
	{ "discard", 1, C_DISCARD, 0, 0, "noscript loading stale fast", 0, 0, 0 },
};
#define KV_NSPECS (sizeof(kv_specs) / sizeof(kv_specs[0]))

static const struct kv_spec *kv_find_spec(const struct kv_arg *a)
{
	for (size_t i = 0; i < KV_NSPECS; i++) {
		const char *nm = kv_specs[i].name;

		if (strlen(nm) == a->n && !strncasecmp(nm, a->p, a->n))
			return &kv_specs[i];
	}
	return NULL;
}

static bool kv_is(const struct kv_arg *a, const char *word)
{
	return strlen(word) == a->n && !strncasecmp(word, a->p, a->n);
}

/* One command of a batch. */
struct kv_cmd {
	enum kv_kind kind;
	unsigned flags;
	const struct kv_spec *spec;
	uint32_t arg0, argc; /* its arguments: batch argv[arg0 .. arg0 + argc) */
	uint32_t op0, nops;  /* its ops */
	long long n;         /* INCR step, expiry in ms, ... */
	const char *err;     /* C_ERR: the reply, without "-" and CRLF */
	bool resp3;          /* reply in RESP3 (the protocol when it was planned) */
};

/* An op: the part of a command that one shard runs. */
enum kv_op_kind { OP_GET, OP_SET, OP_MSET1, OP_DEL, OP_EXISTS, OP_INCR, OP_EXPIRE, OP_TTL,
		  OP_PERSIST, OP_DBSIZE, OP_FLUSH };

struct kv_op {
	uint8_t kind;
	uint8_t ran;    /* remote: its shard has run it (reply or v is there) */
	uint16_t shard;
	uint32_t cmd;   /* its command */
	uint32_t key;   /* argv index of its key (MSET: then its value) */
	uint32_t next;  /* next op of the same shard in this batch, KV_NONE */
	uint64_t hash;
	size_t roff, rlen; /* remote: its reply in the shard's reply buffer */
	long long v;       /* DEL/EXISTS/DBSIZE: count; MSET: 1 when refused (OOM) */
};

/* What the connection keeps per shard for a batch. */
struct kv_remote {
	uint32_t head, tail; /* its ops not run yet, KV_NONE: none */
	struct kv_buf out;   /* the replies that shard wrote */
};

struct kv_conn {
	struct kv_server *srv;
	struct kv_shard *sh;
	struct corio_sock *s;
	uint64_t id;
	char *q;               /* query buffer: [qpos, qlen) not parsed yet */
	size_t qlen, qcap, qpos;
	struct kv_buf out;
	struct kv_argv av;
	struct kv_cmd *cmds;
	size_t ncmds, cmdcap;
	struct kv_op *ops;
	size_t nops, opcap;
	struct kv_remote *rem; /* [nshards] */
	char name[KV_NAME_MAX];
	uint8_t resp;          /* 2 or 3: the protocol of the commands planned next */
	bool in_multi;         /* after MULTI: commands are queued, not run */
	bool multi_dirty;      /* a queued command was refused: EXEC aborts */
	bool exec;             /* this batch is an EXEC: one array of replies */
	struct kv_buf mq;      /* MULTI's queue: (argc, (len, bytes)...) per command */
	uint32_t mq_cmds;      /* commands queued */
	bool closing;          /* QUIT or a protocol error: send, then close */
};

static const char kv_oom_msg[] = "OOM command not allowed when used memory > 'maxmemory'.";

/* ---- ops: run on the key's shard, writing the reply (if any) to o ---- */

static bool kv_oom(struct kv_shard *sh)
{
	if (sh->maxmem && sh->mem > sh->maxmem) {
		KV_INC(sh->st.oom_refused, 1);
		return true;
	}
	return false;
}

static void kv_run_op(struct kv_shard *sh, struct kv_conn *c, struct kv_op *op, struct kv_buf *o)
{
	const struct kv_cmd *cmd = &c->cmds[op->cmd];
	const struct kv_arg *k = &c->av.v[op->key];
	struct kv_entry **l = NULL, *e = NULL;

	if (op->kind != OP_DBSIZE && op->kind != OP_FLUSH) {
		e = kv_lookup(sh, op->hash, k, &l);
		if (op->kind == OP_GET || op->kind == OP_INCR)
			KV_INC(*(e ? &sh->st.hits : &sh->st.misses), 1);
	}
	switch (op->kind) {
	case OP_GET:
		if (e)
			kv_bulk(o, e->data + e->klen, e->vlen);
		else
			kv_null(o, cmd->resp3);
		break;
	case OP_SET: {
		const struct kv_arg *v = &c->av.v[cmd->arg0 + 2];
		int64_t when = 0;

		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		if (cmd->flags & F_GET) {
			if (e)
				kv_bulk(o, e->data + e->klen, e->vlen);
			else
				kv_null(o, cmd->resp3);
		}
		if ((cmd->flags & F_NX && e) || (cmd->flags & F_XX && !e)) {
			if (!(cmd->flags & F_GET))
				kv_null(o, cmd->resp3);
			break;
		}
		if (cmd->flags & F_EXP)
			when = kv_deadline_ms(cmd->n, cmd->flags & F_EXAT);
		if (!(e = kv_store(sh, l, e, op->hash, k, v->p, v->n, cmd->flags & F_KEEPTTL)) ||
		    (when > kv_now_ms() && !kv_set_expire(sh, e, when))) {
			if (!(cmd->flags & F_GET))
				kv_err(o, "ERR out of memory");
			break;
		}
		if (cmd->flags & F_EXP && when <= kv_now_ms()) {
			kv_unlink(sh, l); /* EXAT/PXAT in the past: stored and gone (Redis) */
			KV_INC(sh->st.expired, 1);
		}
		if (!(cmd->flags & F_GET))
			KV_LIT(o, "+OK\r\n");
		break;
	}
	case OP_MSET1: {
		const struct kv_arg *v = k + 1;

		if (kv_oom(sh) || !kv_store(sh, l, e, op->hash, k, v->p, v->n, false))
			op->v = 1;
		break;
	}
	case OP_DEL:
		op->v = 0;
		if (e) {
			kv_unlink(sh, l);
			op->v = 1;
		}
		break;
	case OP_EXISTS:
		op->v = e != NULL;
		break;
	case OP_INCR: {
		long long cur = 0, res;
		char num[24];
		size_t n;

		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		if (e && !kv_str2ll(e->data + e->klen, e->vlen, &cur)) {
			kv_err(o, "ERR value is not an integer or out of range");
			break;
		}
		if (__builtin_add_overflow(cur, cmd->n, &res)) {
			kv_err(o, "ERR increment or decrement would overflow");
			break;
		}
		n = kv_lltoa(num, res);
		if (!kv_store(sh, l, e, op->hash, k, num, n, true)) {
			kv_err(o, "ERR out of memory");
			break;
		}
		kv_num(o, ':', res);
		break;
	}
	case OP_EXPIRE: {
		int64_t now = kv_now_ms(), when = now + cmd->n; /* overflow checked when parsed */
		unsigned f = cmd->flags;

		if (!e || (f & F_NX && e->expire) || (f & F_XX && !e->expire) ||
		    (f & F_GT && (!e->expire || when <= e->expire)) ||
		    (f & F_LT && e->expire && when >= e->expire)) {
			KV_LIT(o, ":0\r\n");
			break;
		}
		if (when <= now) {
			kv_unlink(sh, l); /* a deadline in the past deletes (Redis) */
			KV_INC(sh->st.expired, 1);
		} else if (!kv_set_expire(sh, e, when)) {
			kv_err(o, "ERR out of memory");
			break;
		}
		KV_LIT(o, ":1\r\n");
		break;
	}
	case OP_TTL:
		if (!e) {
			KV_LIT(o, ":-2\r\n");
		} else if (!e->expire) {
			KV_LIT(o, ":-1\r\n");
		} else {
			long long ms = e->expire - kv_now_ms();

			if (ms < 0)
				ms = 0;
			kv_num(o, ':', cmd->flags & F_PX ? ms : (ms + 500) / 1000);
		}
		break;
	case OP_PERSIST:
		if (e && e->expire) {
			kv_set_expire(sh, e, 0);
			KV_LIT(o, ":1\r\n");
		} else {
			KV_LIT(o, ":0\r\n");
		}
		break;
	case OP_DBSIZE:
		op->v = (long long)sh->count;
		break;
	case OP_FLUSH:
		kv_flush(sh);
		break;
	}
}

static uint64_t kv_remote_budget(const struct kv_server *srv);

/* Run the ops a connection of another shard queued for this one, until
 * their replies reach the budget (corio_call: a fiber here, the caller
 * parked until it returns). */
static intptr_t kv_remote_fn(void *arg)
{
	struct kv_conn *c = arg;
	unsigned me = corio_shard_id();
	struct kv_shard *sh = &c->srv->sh[me];
	struct kv_remote *r = &c->rem[me];
	uint64_t n = 0, budget = kv_remote_budget(c->srv);
	uint32_t i;

	if (me == c->sh->id || r->head == KV_NONE)
		return 0; /* corio_gather calls every shard, the caller's too */
	r->out.len = 0; /* the connection has copied every reply made before */
	for (i = r->head; i != KV_NONE && (!n || r->out.len < budget); i = c->ops[i].next, n++) {
		struct kv_op *op = &c->ops[i];

		op->roff = r->out.len;
		kv_run_op(sh, c, op, &r->out);
		op->rlen = r->out.len - op->roff;
		op->ran = 1;
	}
	r->head = i; /* the rest, if any, when the connection's replies reach them */
	KV_INC(sh->st.remote_ops, n);
	return r->out.nomem ? -ENOMEM : 0;
}

/* ---- planning: a parsed command becomes ops ------------------------------------ */

static int kv_hello(struct kv_conn *c, const struct kv_cmd *cmd, bool apply, char *err, size_t n);

static int kv_add_op(struct kv_conn *c, enum kv_op_kind kind, uint32_t key, int shard)
{
	struct kv_op *op;

	if (c->nops == c->opcap) {
		size_t cap = c->opcap ? c->opcap * 2 : 64;
		struct kv_op *ops = realloc(c->ops, cap * sizeof(*ops));

		if (!ops)
			return -ENOMEM;
		c->ops = ops;
		c->opcap = cap;
	}
	op = &c->ops[c->nops];
	op->kind = (uint8_t)kind;
	op->cmd = (uint32_t)c->ncmds;
	op->key = key;
	op->next = KV_NONE;
	op->v = 0;
	op->ran = 0;
	op->roff = op->rlen = 0;
	if (shard < 0) {
		const struct kv_arg *k = &c->av.v[key];

		op->hash = kv_hash(c->srv->seed, k->p, k->n);
		shard = (int)kv_owner(c->srv, op->hash);
	}
	op->shard = (uint16_t)shard;
	if ((unsigned)shard != c->sh->id) { /* queue it for that shard */
		struct kv_remote *r = &c->rem[shard];

		if (r->head == KV_NONE)
			r->head = (uint32_t)c->nops;
		else
			c->ops[r->tail].next = (uint32_t)c->nops;
		r->tail = (uint32_t)c->nops;
	}
	c->cmds[c->ncmds].nops++;
	c->nops++;
	return 0;
}

static void kv_cmd_err(struct kv_cmd *cmd, const char *err)
{
	cmd->kind = C_ERR;
	cmd->err = err;
}

/*
 * SET key value [NX|XX] [GET] [EX s|PX ms|EXAT unix-s|PXAT unix-ms|KEEPTTL],
 * parsed as Redis 7.0 parses it: an option may repeat (the last expiry of
 * one unit wins: "EX 10 EX 20" is EX 20), options that conflict (NX with
 * XX, two units, a unit with KEEPTTL) are a syntax error, and only the
 * expiry that wins is checked, after the loop.
 */
static void kv_plan_set(struct kv_cmd *cmd, const struct kv_arg *a)
{
	static const char *const units[] = { "ex", "px", "exat", "pxat" };
	const struct kv_arg *exp = NULL;
	int unit = -1; /* units[] index of the expiry given */
	long long v;

	for (uint32_t i = 3; i < cmd->argc; i++) {
		const struct kv_arg *o = &a[i];
		int u = -1;

		for (int j = 0; j < 4; j++)
			if (kv_is(o, units[j]))
				u = j;
		if (kv_is(o, "nx") && !(cmd->flags & F_XX)) {
			cmd->flags |= F_NX;
		} else if (kv_is(o, "xx") && !(cmd->flags & F_NX)) {
			cmd->flags |= F_XX;
		} else if (kv_is(o, "get")) {
			cmd->flags |= F_GET;
		} else if (kv_is(o, "keepttl") && unit < 0) {
			cmd->flags |= F_KEEPTTL;
		} else if (u >= 0 && !(cmd->flags & F_KEEPTTL) && (unit < 0 || unit == u) &&
			   i + 1 < cmd->argc) {
			unit = u;
			exp = &a[++i];
		} else {
			kv_cmd_err(cmd, "ERR syntax error");
			return;
		}
	}
	if (!exp)
		return;
	if (!kv_str2ll(exp->p, exp->n, &v)) {
		kv_cmd_err(cmd, "ERR value is not an integer or out of range");
		return;
	}
	/* seconds (EX, EXAT) become ms; a relative one must not overflow once
	 * the Unix time is added (Redis's checks, in its order) */
	if (v <= 0 || (unit % 2 == 0 && v > LLONG_MAX / 1000) ||
	    (unit < 2 && (unit == 0 ? v * 1000 : v) > LLONG_MAX - kv_unix_ms())) {
		kv_cmd_err(cmd, "ERR invalid expire time in 'set' command");
		return;
	}
	cmd->n = unit % 2 == 0 ? v * 1000 : v;
	cmd->flags |= F_EXP | (unit >= 2 ? F_EXAT : 0);
}

/* EXPIRE / PEXPIRE key n [NX|XX|GT|LT] */
static void kv_plan_expire(struct kv_cmd *cmd, const struct kv_arg *a)
{
	long long v;

	if (!kv_str2ll(a[2].p, a[2].n, &v)) {
		kv_cmd_err(cmd, "ERR value is not an integer or out of range");
		return;
	}
	for (uint32_t i = 3; i < cmd->argc; i++) {
		if (kv_is(&a[i], "nx"))
			cmd->flags |= F_NX;
		else if (kv_is(&a[i], "xx"))
			cmd->flags |= F_XX;
		else if (kv_is(&a[i], "gt"))
			cmd->flags |= F_GT;
		else if (kv_is(&a[i], "lt"))
			cmd->flags |= F_LT;
		else {
			kv_cmd_err(cmd, "ERR Unsupported option");
			return;
		}
	}
	if (cmd->flags & F_NX && cmd->flags & (F_XX | F_GT | F_LT)) {
		kv_cmd_err(cmd, "ERR NX and XX, GT or LT options at the same time are not compatible");
		return;
	}
	if ((cmd->flags & (F_GT | F_LT)) == (F_GT | F_LT)) {
		kv_cmd_err(cmd, "ERR GT and LT options at the same time are not compatible");
		return;
	}
	/* Redis's bounds: seconds must fit as ms and the deadline must not pass
	 * LLONG_MAX; any time in the past, however far, deletes the key */
	if (__builtin_mul_overflow(v, cmd->spec->n, &v) || v > LLONG_MAX - kv_unix_ms()) {
		kv_cmd_err(cmd, cmd->spec->n == 1 ? "ERR invalid expire time in 'pexpire' command"
						  : "ERR invalid expire time in 'expire' command");
		return;
	}
	cmd->n = v;
}

#define KV_PLAN_EXEC 1 /* kv_plan(): EXEC of a transaction; nothing was planned */

/* Forget the transaction (EXEC ran it, DISCARD, EXECABORT). */
static void kv_multi_reset(struct kv_conn *c)
{
	c->in_multi = c->multi_dirty = false;
	c->mq.len = 0;
	c->mq_cmds = 0;
	if (c->mq.cap > KV_BIG_BUF)
		kv_buf_free(&c->mq);
}

/*
 * Queue a command after MULTI: its arguments are copied (they live in the
 * query buffer, which the next receive reuses). The queue is bounded by the
 * query buffer limit; past it the command is refused and EXEC will abort.
 */
static int kv_multi_queue(struct kv_conn *c, struct kv_cmd *cmd, const struct kv_arg *a, uint32_t argc)
{
	size_t need = 4 + 4 * (size_t)argc;
	uint32_t n;

	for (uint32_t i = 0; i < argc; i++)
		need += a[i].n;
	if (c->mq.len + need > c->srv->lim.qbuf_limit) {
		c->multi_dirty = true;
		kv_cmd_err(cmd, "ERR corio-kv: the transaction is larger than the query buffer limit");
		return 0;
	}
	if (!kv_reserve(&c->mq, need))
		return -ENOMEM;
	kv_put(&c->mq, &argc, 4);
	for (uint32_t i = 0; i < argc; i++) {
		n = (uint32_t)a[i].n;
		kv_put(&c->mq, &n, 4);
		kv_put(&c->mq, a[i].p, n);
	}
	c->mq_cmds++;
	cmd->kind = C_QUEUED;
	return 0;
}

static int kv_plan(struct kv_conn *c, uint32_t arg0, uint32_t argc);

/* EXEC: the queued commands become this batch, whose replies go out as one
 * array; their arguments point into the queue until the batch is done. */
static int kv_plan_exec(struct kv_conn *c)
{
	size_t at = 0;
	int ret = 0;

	c->in_multi = false; /* plan them to run, not to queue again */
	c->exec = true;
	for (uint32_t i = 0; i < c->mq_cmds && !ret; i++) {
		uint32_t argc, n, arg0 = (uint32_t)c->av.n;

		memcpy(&argc, c->mq.p + at, 4);
		at += 4;
		for (uint32_t j = 0; j < argc && !ret; j++) {
			memcpy(&n, c->mq.p + at, 4);
			ret = argv_push(&c->av, c->mq.p + at + 4, n);
			at += 4 + (size_t)n;
		}
		if (!ret)
			ret = kv_plan(c, arg0, argc);
	}
	return ret;
}

/* The commands that change the connection's state take effect when planned,
 * in request order: QUIT, MULTI, EXEC (refused), DISCARD, HELLO. */
static void kv_plan_session(struct kv_conn *c, struct kv_cmd *cmd)
{
	switch (cmd->kind) {
	case C_QUIT:
		c->closing = true;
		break;
	case C_MULTI:
		if (c->in_multi)
			kv_cmd_err(cmd, "ERR MULTI calls can not be nested");
		c->in_multi = true;
		break;
	case C_EXEC: /* one that runs never gets here: kv_plan() returns KV_PLAN_EXEC */
		if (!c->in_multi)
			kv_cmd_err(cmd, "ERR EXEC without MULTI");
		else
			kv_cmd_err(cmd, "EXECABORT Transaction discarded because of previous errors.");
		kv_multi_reset(c);
		break;
	case C_DISCARD:
		if (!c->in_multi)
			kv_cmd_err(cmd, "ERR DISCARD without MULTI");
		kv_multi_reset(c);
		break;
	case C_HELLO: {
		/* the protocol switches here, when planned: the commands after it
		 * in this batch (remote ones run before the replies are written)
		 * and HELLO's own reply already speak the new one */
		char err[200];
		int ver = kv_hello(c, cmd, false, err, sizeof(err));
	
		if (ver > 0)
			c->resp = (uint8_t)ver;
		cmd->resp3 = c->resp == 3;
		cmd->n = c->resp;
		break;
	}
	default:
		break;
	}
}

#define KV_PLAN_DONE 2 /* kv_plan_gate(): answered without being planned */

/*
 * What comes before planning cmd (its spec looked up): refused (unknown
 * name, wrong arity: a transaction then aborts), queued after MULTI, or the
 * EXEC that runs a transaction. 0: plan it; KV_PLAN_DONE, KV_PLAN_EXEC, or
 * -ENOMEM.
 */
static int kv_plan_gate(struct kv_conn *c, struct kv_cmd *cmd, const struct kv_arg *a, uint32_t argc)
{
	const struct kv_spec *sp = cmd->spec;
	int ret;

	if (!sp || (sp->arity > 0 && argc != (uint32_t)sp->arity) ||
	    (sp->arity < 0 && argc < (uint32_t)-sp->arity) ||
	    (sp->kind == C_MSET && argc % 2 == 0)) {
		cmd->kind = sp ? C_ARITY : C_UNKNOWN;
		c->multi_dirty |= c->in_multi; /* Redis: EXEC then aborts */
		if (sp && sp->kind == C_EXEC) { /* Redis aborts at once, in MULTI or not */
			kv_cmd_err(cmd, "EXECABORT Transaction discarded because of: "
					"wrong number of arguments for 'exec' command");
			kv_multi_reset(c);
		}
		return KV_PLAN_DONE;
	}
	if (c->in_multi && sp->kind != C_MULTI && sp->kind != C_EXEC && sp->kind != C_DISCARD &&
	    sp->kind != C_QUIT) {
		ret = kv_multi_queue(c, cmd, a, argc);
		return ret ? ret : KV_PLAN_DONE;
	}
	if (sp->kind == C_EXEC && c->in_multi && !c->multi_dirty)
		return KV_PLAN_EXEC;
	return 0;
}

/*
 * Turn the command in av[arg0 ..] into c->cmds[c->ncmds] and its ops: 0,
 * -ENOMEM, or KV_PLAN_EXEC for the EXEC of a transaction without errors,
 * which must start a batch of its own (kv_plan_exec()).
 */
static int kv_plan(struct kv_conn *c, uint32_t arg0, uint32_t argc)
{
	struct kv_cmd *cmd;
	const struct kv_arg *a = &c->av.v[arg0];
	const struct kv_spec *sp;
	int ret = 0;

	if (c->ncmds == c->cmdcap) {
		size_t cap = c->cmdcap ? c->cmdcap * 2 : 64;
		struct kv_cmd *cmds = realloc(c->cmds, cap * sizeof(*cmds));

		if (!cmds)
			return -ENOMEM;
		c->cmds = cmds;
		c->cmdcap = cap;
	}
	cmd = &c->cmds[c->ncmds];
	memset(cmd, 0, sizeof(*cmd));
	cmd->arg0 = arg0;
	cmd->argc = argc;
	cmd->op0 = (uint32_t)c->nops;
	cmd->resp3 = c->resp == 3;
	sp = cmd->spec = kv_find_spec(&a[0]);
	ret = kv_plan_gate(c, cmd, a, argc);
	if (ret == KV_PLAN_EXEC)
		return ret;
	if (ret)
		goto out;
	cmd->kind = sp->kind;
	cmd->flags = sp->flags;
	cmd->n = sp->n;
	switch (sp->kind) {
	case C_GET:
		ret = kv_add_op(c, OP_GET, arg0 + 1, -1);
		break;
	case C_SET:
		kv_plan_set(cmd, a);
		if (cmd->kind == C_SET)
			ret = kv_add_op(c, OP_SET, arg0 + 1, -1);
		break;
	case C_INCR:
		if (!cmd->n) {
			if (!kv_str2ll(a[2].p, a[2].n, &cmd->n)) {
				kv_cmd_err(cmd, "ERR value is not an integer or out of range");
				break;
			}
			if (cmd->flags & F_NEG) {
				if (cmd->n == LLONG_MIN) {
					kv_cmd_err(cmd, "ERR decrement would overflow");
					break;
				}
				cmd->n = -cmd->n;
			}
		}
		ret = kv_add_op(c, OP_INCR, arg0 + 1, -1);
		break;
	case C_EXPIRE:
		kv_plan_expire(cmd, a);
		if (cmd->kind == C_EXPIRE)
			ret = kv_add_op(c, OP_EXPIRE, arg0 + 1, -1);
		break;
	case C_TTL:
		ret = kv_add_op(c, OP_TTL, arg0 + 1, -1);
		break;
	case C_PERSIST:
		ret = kv_add_op(c, OP_PERSIST, arg0 + 1, -1);
		break;
	case C_MGET:
	case C_DEL:
	case C_EXISTS:
		for (uint32_t i = 1; i < argc && !ret; i++)
			ret = kv_add_op(c, sp->kind == C_MGET ? OP_GET : sp->kind == C_DEL ? OP_DEL : OP_EXISTS,
					arg0 + i, -1);
		break;
	case C_MSET:
		for (uint32_t i = 1; i < argc && !ret; i += 2)
			ret = kv_add_op(c, OP_MSET1, arg0 + i, -1);
		break;
	case C_FLUSHALL: /* [ASYNC|SYNC]: anything else must not flush (Redis) */
		if (argc > 2 || (argc == 2 && !kv_is(&a[1], "async") && !kv_is(&a[1], "sync"))) {
			kv_cmd_err(cmd, "ERR syntax error");
			break;
		}
		/* fall through */
	case C_DBSIZE:
		for (unsigned i = 0; i < c->srv->nshards && !ret; i++)
			ret = kv_add_op(c, sp->kind == C_DBSIZE ? OP_DBSIZE : OP_FLUSH, arg0, (int)i);
		break;
	case C_QUIT:
	case C_MULTI:
	case C_EXEC:
	case C_DISCARD:
	case C_HELLO:
		kv_plan_session(c, cmd);
		break;
	default:
		break;
	}
out:
	c->ncmds++;
	return ret == KV_PLAN_DONE ? 0 : ret;
}

/* ---- replies made on the connection's shard ------------------------------------- */

/* An error reply whose text comes from the client: CR and LF become spaces. */
static void kv_err_sanitized(struct kv_buf *o, const char *msg)
{
	size_t start = o->len;

	kv_err(o, msg);
	for (size_t i = start; o->p && i + 2 < o->len; i++)
		if (o->p[i] == '\r' || o->p[i] == '\n')
			o->p[i] = ' ';
}

static void kv_reply_unknown(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	char msg[512];
	int n = snprintf(msg, sizeof(msg), "ERR unknown command '%.*s', with args beginning with: ",
			 (int)(a[0].n > 128 ? 128 : a[0].n), a[0].p);
	int args = 0;

	for (uint32_t i = 1; i < cmd->argc && args < 128; i++) {
		int room = 128 - args;
		int m = snprintf(msg + n, sizeof(msg) - (size_t)n, "'%.*s' ",
				 (int)(a[i].n > (size_t)room ? (size_t)room : a[i].n), a[i].p);

		args += m;
		n += m;
		if ((size_t)n >= sizeof(msg) - 1)
			break;
	}
	/* a NUL in an argument ends the message early: harmless */
	kv_err_sanitized(o, msg);
}

static uint64_t kv_rss(void)
{
	char buf[128];
	unsigned long long size = 0, res = 0;
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	if (sscanf(buf, "%llu %llu", &size, &res) != 2)
		return 0;
	return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

#define KV_SUM(srv, field) ({                                        \
	uint64_t s_ = 0;                                             \
	for (unsigned i_ = 0; i_ < (srv)->nshards; i_++)             \
		s_ += KV_GET((srv)->sh[i_].st.field);                 \
	s_; })

/* The largest output one connection held, over every shard's connections. */
static uint64_t kv_max_peak(struct kv_server *srv)
{
	uint64_t m = 0;

	for (unsigned i = 0; i < srv->nshards; i++)
		if (KV_GET(srv->sh[i].st.out_peak) > m)
			m = KV_GET(srv->sh[i].st.out_peak);
	return m;
}

static void kv_line(struct kv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void kv_line(struct kv_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!kv_reserve(b, 256))
		return;
	va_start(ap, fmt);
	n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n < b->cap - b->len)
		b->len += (size_t)n;
}

static bool kv_want(const struct kv_arg *sec, const char *name, bool dflt)
{
	if (!sec)
		return dflt;
	return kv_is(sec, name) || kv_is(sec, "all") || kv_is(sec, "everything") ||
	       (dflt && kv_is(sec, "default"));
}

static void kv_reply_info(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	struct kv_server *srv = c->srv;
	const struct kv_arg *sec = cmd->argc > 1 ? &c->av.v[cmd->arg0 + 1] : NULL;
	struct kv_buf b = { 0 };
	uint64_t up = (corio_now_ns() - srv->start_ns) / 1000000000ull;

	if (kv_want(sec, "server", true)) {
		kv_line(&b, "# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\n"
			    "server_name:corio-kv\r\nmultiplexing_api:io_uring\r\nprocess_id:%d\r\n"
			    "tcp_port:%d\r\nuptime_in_seconds:%llu\r\nshards:%u\r\n\r\n",
			KV_VERSION, (int)getpid(), atomic_load(&srv->bound_port),
			(unsigned long long)up, srv->nshards);
	}
	if (kv_want(sec, "clients", true))
		kv_line(&b, "# Clients\r\nconnected_clients:%llu\r\nclients_waiting_output:%llu\r\n\r\n",
			(unsigned long long)KV_SUM(srv, conns), (unsigned long long)KV_SUM(srv, out_waiting));
	if (kv_want(sec, "memory", true)) {
		uint64_t used = KV_SUM(srv, used_memory), rss = kv_rss();

		kv_line(&b, "# Memory\r\nused_memory:%llu\r\nused_memory_human:%.2fM\r\n"
			    "used_memory_rss:%llu\r\nmaxmemory:%llu\r\nmaxmemory_policy:noeviction\r\n"
			    "mem_fragmentation_ratio:%.2f\r\nclient_output_peak:%llu\r\n\r\n",
			(unsigned long long)used, (double)used / 1048576.0, (unsigned long long)rss,
			(unsigned long long)srv->lim.maxmemory, used ? (double)rss / (double)used : 0.0,
			(unsigned long long)kv_max_peak(srv));
	}
	if (kv_want(sec, "stats", true)) {
		kv_line(&b, "# Stats\r\ntotal_connections_received:%llu\r\ntotal_commands_processed:%llu\r\n"
			    "expired_keys:%llu\r\nkeyspace_hits:%llu\r\nkeyspace_misses:%llu\r\n"
			    "total_error_replies_protocol:%llu\r\nclient_output_limit_disconnections:0\r\n"
			    "client_output_flushes:%llu\r\noom_refused:%llu\r\n\r\n",
			(unsigned long long)KV_SUM(srv, conns_total), (unsigned long long)KV_SUM(srv, cmds),
			(unsigned long long)KV_SUM(srv, expired), (unsigned long long)KV_SUM(srv, hits),
			(unsigned long long)KV_SUM(srv, misses), (unsigned long long)KV_SUM(srv, proto_errors),
			(unsigned long long)KV_SUM(srv, out_flushes),
			(unsigned long long)KV_SUM(srv, oom_refused));
	}
	if (kv_want(sec, "keyspace", true)) {
		uint64_t keys = KV_SUM(srv, keys);

		kv_line(&b, "# Keyspace\r\n");
		if (keys)
			kv_line(&b, "db0:keys=%llu,expires=%llu,avg_ttl=0\r\n", (unsigned long long)keys,
				(unsigned long long)KV_SUM(srv, expires));
		kv_line(&b, "\r\n");
	}
	if (kv_want(sec, "corio", false) || (sec && kv_is(sec, "default")) || !sec) {
		kv_line(&b, "# Corio\r\n");
		for (unsigned i = 0; i < srv->nshards; i++) {
			struct kv_counters *st = &srv->sh[i].st;
			struct corio_stats cs = { 0 };
			struct corio_msg_stats ms = { 0 };

			corio_stats_get(NULL, i, &cs);
			corio_msg_stats_get(NULL, i, CORIO_MSG_PEER_ALL, &ms);
			kv_line(&b, "shard%u:cpu=%llu,keys=%llu,conns=%llu,cmds=%llu,remote_ops_run=%llu,"
				    "remote_calls=%llu,batches=%llu,used_memory=%llu,loop_turns=%llu,"
				    "busy_ms=%llu,idle_ms=%llu,msgs_sent=%llu,msgs_received=%llu,"
				    "msg_calls=%llu,doorbells=%llu\r\n",
				i, (unsigned long long)cs.cpu, (unsigned long long)KV_GET(st->keys),
				(unsigned long long)KV_GET(st->conns), (unsigned long long)KV_GET(st->cmds),
				(unsigned long long)KV_GET(st->remote_ops),
				(unsigned long long)KV_GET(st->remote_calls),
				(unsigned long long)KV_GET(st->batches),
				(unsigned long long)KV_GET(st->used_memory),
				(unsigned long long)cs.loop_turns, (unsigned long long)(cs.busy_ns / 1000000),
				(unsigned long long)(cs.idle_ns / 1000000), (unsigned long long)ms.sent,
				(unsigned long long)ms.received, (unsigned long long)ms.calls,
				(unsigned long long)ms.doorbells);
		}
		kv_line(&b, "\r\n");
	}
	if (b.nomem)
		kv_err(o, "ERR out of memory");
	else
		kv_verbatim(o, b.p ? b.p : "", b.len, cmd->resp3);
	kv_buf_free(&b);
}

/* CONFIG GET pattern: the few parameters redis-benchmark and redis-cli ask for. */
static void kv_reply_config(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_server *srv = c->srv;
	char v[5][24];
	const char *names[] = { "save", "appendonly", "maxmemory", "proto-max-bulk-len",
				"client-query-buffer-limit", "databases" };
	const char *vals[6];
	int match[6], n = 0;

	if (!kv_is(&a[1], "get")) {
		kv_err(o, "ERR CONFIG subcommand not supported by corio-kv (only CONFIG GET)");
		return;
	}
	if (cmd->argc != 3) {
		kv_err(o, "ERR wrong number of arguments for 'config|get' command");
		return;
	}
	snprintf(v[0], sizeof(v[0]), "%llu", (unsigned long long)srv->lim.maxmemory);
	snprintf(v[1], sizeof(v[1]), "%llu", (unsigned long long)srv->lim.proto_max_bulk_len);
	snprintf(v[2], sizeof(v[2]), "%llu", (unsigned long long)srv->lim.qbuf_limit);
	vals[0] = "";
	vals[1] = "no";
	vals[2] = v[0];
	vals[3] = v[1];
	vals[4] = v[2];
	vals[5] = "1";
	for (int i = 0; i < 6; i++) {
		match[i] = kv_is(&a[2], names[i]) || (a[2].n == 1 && a[2].p[0] == '*');
		n += match[i];
	}
	if (cmd->resp3)
		kv_num(o, '%', n);
	else
		kv_num(o, '*', 2 * n);
	for (int i = 0; i < 6; i++) {
		if (match[i]) {
			kv_bulkstr(o, names[i]);
			kv_bulkstr(o, vals[i]);
		}
	}
}

static void kv_command_info(struct kv_buf *o, const struct kv_spec *sp, bool resp3)
{
	char fl[64];
	int nf = 0;
	const char *p = sp->cflags;

	kv_num(o, '*', 6);
	kv_bulkstr(o, sp->name);
	kv_num(o, ':', sp->arity);
	snprintf(fl, sizeof(fl), "%s", sp->cflags);
	for (const char *q = p; *q; q++)
		nf += (q == p || q[-1] == ' ') && *q != ' ';
	kv_num(o, resp3 ? '~' : '*', nf); /* a set in RESP3 */
	for (char *w = strtok(fl, " "); w; w = strtok(NULL, " ")) {
		kv_put(o, "+", 1);
		kv_put(o, w, strlen(w));
		KV_LIT(o, "\r\n");
	}
	kv_num(o, ':', sp->first);
	kv_num(o, ':', sp->last);
	kv_num(o, ':', sp->step);
}

/* COMMAND, COMMAND COUNT, COMMAND INFO name..., COMMAND DOCS (empty: enough
 * for redis-cli, which then shows no hints). */
static void kv_reply_command(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];

	if (cmd->argc == 1) {
		kv_num(o, '*', (long long)KV_NSPECS);
		for (size_t i = 0; i < KV_NSPECS; i++)
			kv_command_info(o, &kv_specs[i], cmd->resp3);
	} else if (kv_is(&a[1], "count")) {
		kv_num(o, ':', (long long)KV_NSPECS);
	} else if (kv_is(&a[1], "docs")) {
		kv_num(o, cmd->resp3 ? '%' : '*', 0);
	} else if (kv_is(&a[1], "info")) {
		kv_num(o, '*', (long long)cmd->argc - 2);
		for (uint32_t i = 2; i < cmd->argc; i++) {
			const struct kv_spec *sp = kv_find_spec(&a[i]);

			if (sp)
				kv_command_info(o, sp, cmd->resp3);
			else
				kv_null(o, cmd->resp3);
		}
	} else {
		kv_err(o, "ERR unknown subcommand or wrong number of arguments for 'command'");
	}
}

/* NULL when CLIENT SETNAME takes name, else the error reply. */
static const char *kv_name_check(const struct kv_arg *name)
{
	for (size_t i = 0; i < name->n; i++)
		if (name->p[i] <= ' ' || name->p[i] > '~')
			return "ERR Client names cannot contain spaces, newlines or special characters.";
	if (name->n >= KV_NAME_MAX)
		return "ERR client name too long for corio-kv (63 bytes)";
	return NULL;
}

static void kv_set_name(struct kv_conn *c, const struct kv_arg *name)
{
	memcpy(c->name, name->p, name->n);
	c->name[name->n] = 0;
}

static void kv_reply_client(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];

	if (kv_is(&a[1], "setname") && cmd->argc == 3) {
		const char *bad = kv_name_check(&a[2]);

		if (bad) {
			kv_err(o, bad);
			return;
		}
		kv_set_name(c, &a[2]);
		KV_LIT(o, "+OK\r\n");
	} else if (kv_is(&a[1], "getname") && cmd->argc == 2) {
		if (c->name[0])
			kv_bulkstr(o, c->name);
		else
			kv_null(o, cmd->resp3);
	} else if (kv_is(&a[1], "id") && cmd->argc == 2) {
		kv_num(o, ':', (long long)c->id);
	} else if (kv_is(&a[1], "info") && cmd->argc == 2) {
		char line[160];

		snprintf(line, sizeof(line), "id=%llu name=%s shard=%u db=0 resp=%u\n",
			 (unsigned long long)c->id, c->name, c->sh->id, cmd->resp3 ? 3u : 2u);
		kv_verbatim(o, line, strlen(line), cmd->resp3);
	} else if (kv_is(&a[1], "setinfo") && cmd->argc == 4) {
		KV_LIT(o, "+OK\r\n");
	} else {
		kv_err(o, "ERR unknown subcommand or wrong number of arguments for 'client'");
	}
}

/*
 * HELLO [protover [AUTH user pass] [SETNAME name]], as Redis 7.0 answers it
 * with no password set: the "default" user takes any password, others are
 * refused. Options act in order (a SETNAME before a bad option stays, as in
 * Redis). Returns the protocol asked for (0: none), or -1 with the error
 * reply (no "-") in err. apply: SETNAME sets the name; false only checks.
 */
static int kv_hello(struct kv_conn *c, const struct kv_cmd *cmd, bool apply, char *err, size_t n)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	long long ver = 0;

	if (cmd->argc >= 2 && !kv_str2ll(a[1].p, a[1].n, &ver)) {
		snprintf(err, n, "ERR Protocol version is not an integer or out of range");
		return -1;
	}
	if (cmd->argc >= 2 && (ver < 2 || ver > 3)) {
		snprintf(err, n, "NOPROTO unsupported protocol version");
		return -1;
	}
	for (uint32_t j = 2; j < cmd->argc; j++) {
		uint32_t more = cmd->argc - 1 - j;
		const char *bad;

		if (kv_is(&a[j], "auth") && more >= 2) {
			if (!kv_is(&a[j + 1], "default")) {
				snprintf(err, n, "WRONGPASS invalid username-password pair or user is disabled.");
				return -1;
			}
			j += 2;
		} else if (kv_is(&a[j], "setname") && more >= 1) {
			if ((bad = kv_name_check(&a[j + 1]))) {
				snprintf(err, n, "%s", bad);
				return -1;
			}
			if (apply)
				kv_set_name(c, &a[j + 1]);
			j++;
		} else {
			snprintf(err, n, "ERR Syntax error in HELLO option '%.*s'",
				 (int)(a[j].n > 128 ? 128 : a[j].n), a[j].p);
			return -1;
		}
	}
	return (int)ver;
}

/* The server's facts, a map in RESP3 and a flat array in RESP2 (Redis's
 * fields; "server" says redis because clients read it to pick features). */
static void kv_reply_hello(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	char err[200];

	if (kv_hello(c, cmd, true, err, sizeof(err)) < 0) {
		kv_err_sanitized(o, err);
		return;
	}
	kv_num(o, cmd->resp3 ? '%' : '*', cmd->resp3 ? 7 : 14);
	kv_bulkstr(o, "server");
	kv_bulkstr(o, "redis");
	kv_bulkstr(o, "version");
	kv_bulkstr(o, KV_VERSION);
	kv_bulkstr(o, "proto");
	kv_num(o, ':', cmd->n);
	kv_bulkstr(o, "id");
	kv_num(o, ':', (long long)c->id);
	kv_bulkstr(o, "mode");
	kv_bulkstr(o, "standalone");
	kv_bulkstr(o, "role");
	kv_bulkstr(o, "master");
	kv_bulkstr(o, "modules");
	KV_LIT(o, "*0\r\n");
}

/* ---- a batch: run the remote ops, then reply in order ------------------------------ */

/*
 * How a connection's output stays bounded (--output-limit, L): its pending
 * replies are sent once they reach L/2, the connection's fiber waiting
 * while the client does not read, before more are made; and another shard
 * runs the connection's ops for it only until its reply buffer holds
 * L/(2 shards), the rest in later calls, as the replies are walked. So a
 * connection holds at most about L of replies plus one reply per shard (a
 * value is copied whole), and allocations round that up to at most twice.
 * A client that reads is never closed; one that does not is left waiting.
 */
static uint64_t kv_remote_budget(const struct kv_server *srv)
{
	return srv->lim.out_limit / (2 * srv->nshards);
}

/* Record the bytes this connection's reply buffers hold (INFO's
 * client_output_peak). They only grow within a batch, so measuring before
 * each send and at the batch's end sees the largest. */
static void kv_out_peak(struct kv_conn *c)
{
	uint64_t held = c->out.cap;

	for (unsigned i = 0; i < c->srv->nshards; i++)
		held += c->rem[i].out.cap;
	if (held > KV_GET(c->sh->st.out_peak))
		KV_SET(c->sh->st.out_peak, held);
}

/* Send the pending replies once they reach half the output limit. */
static int kv_out_drain(struct kv_conn *c)
{
	ssize_t n;

	if (c->out.len < c->srv->lim.out_limit / 2)
		return 0;
	kv_out_peak(c);
	KV_INC(c->sh->st.out_flushes, 1);
	KV_INC(c->sh->st.out_waiting, 1);
	n = corio_send(c->s, c->out.p, c->out.len);
	KV_INC(c->sh->st.out_waiting, (uint64_t)-1);
	c->out.len = 0;
	return n < 0 ? (int)n : 0;
}

/* A remote op has run: when its shard stopped at its budget before it, run
 * that shard's next part now. The ops are walked in request order, so every
 * reply that shard made before has been copied and its buffer can be reused. */
static int kv_op_ready(struct kv_conn *c, struct kv_op *op)
{
	intptr_t res = 0;
	int ret;

	if (op->shard == c->sh->id || op->ran)
		return 0;
	KV_INC(c->sh->st.remote_calls, 1);
	ret = corio_call(op->shard, kv_remote_fn, c, &res);
	if (!ret)
		ret = (int)res;
	if (!ret && c->rem[op->shard].out.nomem)
		ret = -ENOMEM;
	return ret;
}

/* The reply of op into o: run here, or copied from its shard's replies. */
static int kv_op_reply(struct kv_conn *c, struct kv_op *op, struct kv_buf *o)
{
	int ret = kv_out_drain(c);

	if (!ret)
		ret = kv_op_ready(c, op);
	if (ret)
		return ret;
	if (op->shard == c->sh->id) {
		kv_run_op(c->sh, c, op, o);
	} else {
		struct kv_remote *r = &c->rem[op->shard];

		kv_put(o, r->out.p + op->roff, op->rlen);
	}
	return 0;
}

/* Sum of the op values of cmd (DEL, EXISTS, DBSIZE, MSET) into *sum. */
static int kv_op_sum(struct kv_conn *c, const struct kv_cmd *cmd, long long *sum)
{
	*sum = 0;
	for (uint32_t i = 0; i < cmd->nops; i++) {
		struct kv_op *op = &c->ops[cmd->op0 + i];
		int ret = kv_op_ready(c, op);

		if (ret)
			return ret;
		if (op->shard == c->sh->id)
			kv_run_op(c->sh, c, op, NULL);
		*sum += op->v;
	}
	return 0;
}

/* The first part of every other shard's ops, those shards in parallel. */
static int kv_run_remote(struct kv_conn *c)
{
	struct kv_server *srv = c->srv;
	unsigned remote = 0, last = 0;
	intptr_t res = 0;
	int ret;

	for (unsigned i = 0; i < srv->nshards; i++)
		if (c->rem[i].head != KV_NONE) {
			remote++;
			last = i;
		}
	if (!remote)
		return 0;
	KV_INC(c->sh->st.remote_calls, 1);
	if (remote == 1)
		ret = corio_call(last, kv_remote_fn, c, &res);
	else
		ret = corio_gather(kv_remote_fn, c, NULL);
	if (!ret)
		ret = (int)res;
	for (unsigned i = 0; i < srv->nshards && !ret; i++)
		if (c->rem[i].out.nomem)
			ret = -ENOMEM;
	return ret;
}

/* The replies that need no op: made from the command and the connection. */
static void kv_reply_local(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];

	switch (cmd->kind) {
	case C_PING:
		if (cmd->argc == 1)
			KV_LIT(o, "+PONG\r\n");
		else if (cmd->argc == 2)
			kv_bulk(o, a[1].p, a[1].n);
		else
			kv_err(o, "ERR wrong number of arguments for 'ping' command");
		break;
	case C_ECHO:
		kv_bulk(o, a[1].p, a[1].n);
		break;
	case C_INFO:
		kv_reply_info(c, cmd, o);
		break;
	case C_CONFIG:
		kv_reply_config(c, cmd, o);
		break;
	case C_COMMAND:
		kv_reply_command(c, cmd, o);
		break;
	case C_CLIENT:
		kv_reply_client(c, cmd, o);
		break;
	case C_SELECT: {
		long long db;

		if (!kv_str2ll(a[1].p, a[1].n, &db))
			kv_err(o, "ERR value is not an integer or out of range");
		else if (db != 0)
			kv_err(o, "ERR DB index is out of range");
		else
			KV_LIT(o, "+OK\r\n");
		break;
	}
	case C_QUIT:
		KV_LIT(o, "+OK\r\n");
		break;
	case C_HELLO:
		kv_reply_hello(c, cmd, o);
		break;
	case C_MULTI:
	case C_DISCARD:
		KV_LIT(o, "+OK\r\n");
		break;
	case C_QUEUED:
		KV_LIT(o, "+QUEUED\r\n");
		break;
	case C_EXEC: /* planned as C_ERR or as its commands */
		break;
	default:
		break;
	}
}

/* The reply to one command of the batch, in order. */
static int kv_reply_cmd(struct kv_conn *c, struct kv_cmd *cmd, struct kv_buf *o)
{
	long long sum;
	int ret = kv_out_drain(c);

	if (ret)
		return ret;
	switch (cmd->kind) {
	case C_UNKNOWN:
		kv_reply_unknown(c, cmd, o);
		break;
	case C_ARITY: {
		char msg[128];

		snprintf(msg, sizeof(msg), "ERR wrong number of arguments for '%s' command",
			 cmd->spec->name);
		kv_err(o, msg);
		break;
	}
	case C_ERR:
		kv_err(o, cmd->err);
		break;
	case C_GET:
	case C_SET:
	case C_INCR:
	case C_EXPIRE:
	case C_TTL:
	case C_PERSIST:
		return kv_op_reply(c, &c->ops[cmd->op0], o);
	case C_MGET: /* element by element: one over the limit is sent in parts */
		kv_num(o, '*', cmd->nops);
		for (uint32_t j = 0; j < cmd->nops && !ret; j++)
			ret = kv_op_reply(c, &c->ops[cmd->op0 + j], o);
		return ret;
	case C_DEL:
	case C_EXISTS:
	case C_DBSIZE:
		if (!(ret = kv_op_sum(c, cmd, &sum)))
			kv_num(o, ':', sum);
		return ret;
	case C_MSET:
		if ((ret = kv_op_sum(c, cmd, &sum)))
			return ret;
		if (sum)
			kv_err(o, kv_oom_msg); /* some shards may have stored theirs */
		else
			KV_LIT(o, "+OK\r\n");
		break;
	case C_FLUSHALL:
		if (!(ret = kv_op_sum(c, cmd, &sum)))
			KV_LIT(o, "+OK\r\n");
		return ret;
	default:
		kv_reply_local(c, cmd, o);
		break;
	}
	return 0;
}

static int kv_run_batch(struct kv_conn *c)
{
	struct kv_buf *o = &c->out;
	int ret = kv_run_remote(c);

	if (ret)
		return ret;
	KV_INC(c->sh->st.cmds, c->ncmds);
	KV_INC(c->sh->st.batches, 1);
	if (c->exec)
		kv_num(o, '*', (long long)c->ncmds);
	for (size_t i = 0; i < c->ncmds && !ret; i++)
		ret = kv_reply_cmd(c, &c->cmds[i], o);
	kv_out_peak(c);
	return ret ? ret : o->nomem ? -ENOMEM : 0;
}

/* ---- connections ---------------------------------------------------------------- */

static void kv_conn_free(struct kv_conn *c)
{
	free(c->q);
	kv_buf_free(&c->out);
	kv_buf_free(&c->mq);
	free(c->av.v);
	free(c->cmds);
	free(c->ops);
	for (unsigned i = 0; c->rem && i < c->srv->nshards; i++)
		kv_buf_free(&c->rem[i].out);
	free(c->rem);
	free(c);
}

/* Make room for need bytes of unparsed input at the front of the query buffer. */
static int kv_qbuf_room(struct kv_conn *c, size_t need)
{
	size_t left = c->qlen - c->qpos, cap;
	char *q;

	if (c->qpos) {
		memmove(c->q, c->q + c->qpos, left);
		c->qlen = left;
		c->qpos = 0;
	}
	if (need < left + 1)
		need = left + 1;
	if (need <= c->qcap && !(c->qcap > KV_BIG_BUF && need <= KV_QBUF_INIT))
		return 0;
	cap = KV_QBUF_INIT;
	while (cap < need)
		cap *= 2;
	if (cap == c->qcap)
		return 0;
	q = realloc(c->q, cap);
	if (!q)
		return -ENOMEM;
	c->q = q;
	c->qcap = cap;
	return 0;
}

/*
 * Parse and plan the complete commands in the query buffer as one batch.
 * RESP_MORE: all were taken and *need bytes are worth waiting for; RESP_ERR:
 * a protocol error (in errbuf) after them; RESP_CMD: the batch is full,
 * QUIT ended it, or an EXEC that must be a batch of its own ends or makes
 * it; RESP_NOMEM.
 */
static int kv_parse_batch(struct kv_conn *c, size_t *need, char *errbuf, size_t errlen)
{
	c->av.n = 0;
	c->ncmds = c->nops = 0;
	for (unsigned i = 0; i < c->srv->nshards; i++)
		c->rem[i].head = KV_NONE;
	while (c->ncmds < KV_BATCH_CMDS && c->nops < KV_BATCH_OPS && !c->closing) {
		size_t used = 0, arg0 = c->av.n;
		int r = resp_parse(c->q + c->qpos, c->qlen - c->qpos, &c->srv->lim, &c->av, &used, need,
				   errbuf, errlen);

		if (r != RESP_CMD)
			return r;
		if (c->av.n == arg0) { /* an empty command */
			c->qpos += used;
			continue;
		}
		r = kv_plan(c, (uint32_t)arg0, (uint32_t)(c->av.n - arg0));
		if (r == KV_PLAN_EXEC) { /* a batch of its own: this one, or the next */
			c->av.n = arg0;
			if (!c->ncmds) {
				c->qpos += used;
				r = kv_plan_exec(c);
			}
			return r < 0 ? RESP_NOMEM : RESP_CMD;
		}
		if (r)
			return RESP_NOMEM;
		c->qpos += used;
	}
	return RESP_CMD;
}

/*
 * Serve one connection: receive, parse every complete command, run them
 * as a batch, send the replies, repeat. Returns when the client leaves,
 * QUITs, breaks the protocol or a limit, or the fiber is cancelled.
 */
static void kv_serve_conn(struct kv_conn *c)
{
	char errbuf[160];

	for (;;) {
		size_t need = 0;
		int ret = kv_parse_batch(c, &need, errbuf, sizeof(errbuf));
		bool perr = ret == RESP_ERR, more = ret == RESP_MORE;

		if (ret == RESP_NOMEM)
			return;
		if ((c->ncmds || c->exec) && kv_run_batch(c))
			return;
		if (perr) {
			KV_INC(c->sh->st.proto_errors, 1);
			KV_LIT(&c->out, "-ERR ");
			kv_put(&c->out, errbuf, strlen(errbuf));
			KV_LIT(&c->out, "\r\n");
			c->closing = true;
		}
		if (c->out.nomem)
			return;
		if (c->out.len && corio_send(c->s, c->out.p, c->out.len) < 0)
			return;
		c->out.len = 0;
		if (c->exec) { /* the batch no longer points into the queue */
			c->exec = false;
			kv_multi_reset(c);
		}
		for (unsigned i = 0; i < c->srv->nshards; i++)
			if (c->rem[i].out.cap > KV_BIG_BUF)
				kv_buf_free(&c->rem[i].out);
		if (c->out.cap > KV_BIG_BUF)
			kv_buf_free(&c->out);
		if (c->closing)
			return;
		if (!more)
			continue; /* the batch was full: more commands are waiting */
		ret = kv_qbuf_room(c, need);
		if (ret)
			return;
		{
			ssize_t n = corio_recv(c->s, c->q + c->qlen, c->qcap - c->qlen);

			if (n <= 0)
				return; /* closed, reset, or cancelled */
			c->qlen += (size_t)n;
		}
	}
}

struct kv_listener {
	struct kv_server *srv;
	struct kv_shard *sh;
	struct corio_listener *l;
	struct corio_group conns;
};

static int kv_conn_fiber(void *arg)
{
	struct kv_conn *c = arg;

	KV_INC(c->sh->st.conns, 1);
	KV_INC(c->sh->st.conns_total, 1);
	kv_serve_conn(c);
	corio_close(c->s);
	KV_INC(c->sh->st.conns, (uint64_t)-1);
	kv_conn_free(c);
	return 0; /* a connection's trouble is not the server's */
}

/* A connection whose fiber never ran (the runtime stopped first): its
 * socket and record still have to go. Runs on the loop; the socket has no
 * receive armed yet, so closing it does not block. */
static void kv_conn_release(void *arg)
{
	struct kv_conn *c = arg;

	corio_close(c->s);
	kv_conn_free(c);
}

/* Accept until cancelled; then cancel the connections and wait for them. */
static int kv_accept_loop(struct kv_listener *kl)
{
	struct corio_spawn_opts o = { .name = "kv-conn", .release = kv_conn_release };
	int ret = corio_group_init(&kl->conns, 0);

	while (!ret) {
		struct corio_sock *s;
		struct kv_conn *c;

		ret = corio_accept(kl->l, &s);
		if (ret < 0)
			break;
		c = calloc(1, sizeof(*c));
		if (c)
			c->rem = calloc(kl->srv->nshards, sizeof(*c->rem));
		if (!c || !c->rem) {
			free(c);
			corio_close(s);
			continue;
		}
		c->srv = kl->srv;
		c->sh = kl->sh;
		c->s = s;
		c->resp = 2;
		c->id = ++kl->sh->next_conn_id * kl->srv->nshards + kl->sh->id;
		if (corio_group_spawn(&kl->conns, kv_conn_fiber, c, &o, NULL) < 0) {
			corio_close(s);
			kv_conn_free(c);
		}
	}
	corio_group_close(&kl->conns);
	return ret;
}

/*
 * Everything a shard does: listen (shard 0 first, so that port 0 picks one
 * port for all; the others join it), accept and serve until the runtime
 * stops. Run it on every shard (the corio_start entry). Blocking.
 */
static void kv_shard_main(struct kv_server *srv)
{
	struct corio_listen_opts lo = { .flags = CORIO_LISTEN_REUSEPORT };
	struct kv_listener kl = { .srv = srv, .sh = &srv->sh[corio_shard_id()] };
	char where[300];
	int port = srv->port, ret;

	if (!port && corio_shard_id() != 0) {
		while (!(port = atomic_load(&srv->bound_port)) && !atomic_load(&srv->failed))
			if (corio_sleep_ns(100000) < 0)
				return;
		if (!port)
			return;
	}
	snprintf(where, sizeof(where), "%s:%d", srv->host ? srv->host : "127.0.0.1", port);
	ret = corio_tcp_listen(where, &lo, &kl.l);
	if (ret) {
		fprintf(stderr, "corio-kv: shard %u: listen on %s: %s (%s)\n", corio_shard_id(), where,
			strerror(-ret), corio_last_error());
		atomic_store(&srv->failed, 1);
		return;
	}
	if (!port) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);

		if (!corio_listener_addr(kl.l, &ss, &len))
			port = corio_addr_port((struct sockaddr *)&ss);
	}
	if (corio_shard_id() == 0)
		atomic_store(&srv->bound_port, port);
	atomic_fetch_add(&srv->listening, 1);
	ret = kv_accept_loop(&kl);
	if (ret != -ECANCELED) {
		fprintf(stderr, "corio-kv: shard %u: accept: %s\n", corio_shard_id(), strerror(-ret));
		atomic_store(&srv->failed, 1);
	}
	corio_listener_close(kl.l);
}

/* Set up srv for nshards (before corio_start); 0 or -ENOMEM. */
static int kv_server_init(struct kv_server *srv, unsigned nshards)
{
	uint64_t seed = corio_now_ns();
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, &seed, sizeof(seed)) != sizeof(seed))
			seed ^= (uint64_t)getpid() << 32;
		close(fd);
	}
	srv->nshards = nshards;
	srv->seed = seed;
	srv->start_ns = corio_now_ns();
	srv->sh = calloc(nshards, sizeof(*srv->sh));
	if (!srv->sh)
		return -ENOMEM;
	for (unsigned i = 0; i < nshards; i++) {
		if (kv_shard_init(&srv->sh[i], srv, i, srv->lim.maxmemory / nshards)) {
			for (unsigned j = 0; j <= i; j++)
				kv_shard_free(&srv->sh[j]);
			free(srv->sh);
			srv->sh = NULL;
			return -ENOMEM;
		}
	}
	return 0;
}

/* After corio_wait(): every shard has stopped. */
static void kv_server_free(struct kv_server *srv)
{
	for (unsigned i = 0; srv->sh && i < srv->nshards; i++)
		kv_shard_free(&srv->sh[i]);
	free(srv->sh);
	srv->sh = NULL;
}

#ifndef CORIO_KV_NO_MAIN
/* ---- the program ------------------------------------------------------------------ */

#include "common/opt.h"

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#define MAX_SHARDS 256

static struct kv_server g_srv;

static void entry(void *arg)
{
	kv_shard_main(arg);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: corio-kv [options]\n"
		"  -p, --port P              TCP port (6379; 0: pick one and print it)\n"
		"  -b, --bind HOST           address to listen on (127.0.0.1; * for all)\n"
		"  -n, --shards N            shards (threads) (1)\n"
		"  -C, --cpus LIST           pin shard i to the i-th CPU of LIST (e.g. 1 or 0-1)\n"
		"  -i, --idle MODE           block | spin | poll (block)\n"
		"      --maxmemory BYTES     refuse writes with -OOM above this (0: no limit)\n"
		"      --proto-max-bulk-len BYTES   longest bulk string (512MiB)\n"
		"      --query-buffer-limit BYTES   largest single command (64MiB)\n"
		"      --output-limit BYTES  replies one connection holds before they are\n"
		"                            sent, waiting for the client to read (256MiB)\n"
		"      --max-multibulk N     most arguments per command (1048576)\n"
		"      --timeout SECS        exit after SECS (default: until SIGINT/SIGTERM)\n"
		"  -h, --help\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "bind", required_argument, NULL, 'b' },
		{ "shards", required_argument, NULL, 'n' },
		{ "cpus", required_argument, NULL, 'C' },
		{ "idle", required_argument, NULL, 'i' },
		{ "maxmemory", required_argument, NULL, 'M' },
		{ "proto-max-bulk-len", required_argument, NULL, 'B' },
		{ "query-buffer-limit", required_argument, NULL, 'Q' },
		{ "output-limit", required_argument, NULL, 'O' },
		{ "max-multibulk", required_argument, NULL, 'A' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static const char *const idles[] = { "block", "spin", "poll", NULL };
	static int cpus[MAX_SHARDS];
	struct kv_server *srv = &g_srv;
	unsigned ncpus = 0;
	struct corio_config cfg;
	struct corio_rt *rt;
	double timeout = 0;
	uint64_t v, until;
	sigset_t set;
	int o, ret;

	tool_prog = "corio-kv";
	kv_limits_default(&srv->lim);
	srv->port = 6379;
	srv->host = "127.0.0.1";
	corio_config_init(&cfg);
	cfg.shards = 1;
	cfg.stall_ns = 0;
	while ((o = getopt_long(argc, argv, "p:b:n:C:i:h", opts, NULL)) != -1) {
		switch (o) {
		case 'p':
			if (tool_opt_count("--port", optarg, 0, 65535, &v))
				return 2;
			srv->port = (int)v;
			break;
		case 'b':
			srv->host = optarg;
			break;
		case 'n':
			if (tool_opt_count("--shards", optarg, 1, MAX_SHARDS, &v))
				return 2;
			cfg.shards = (unsigned)v;
			break;
		case 'C':
			if (tool_opt_cpus("--cpus", optarg, cpus, MAX_SHARDS, &ncpus))
				return 2;
			break;
		case 'i':
			if ((o = tool_opt_choice("--idle", optarg, idles)) < 0)
				return 2;
			cfg.idle = o == 0 ? CORIO_IDLE_BLOCK : o == 1 ? CORIO_IDLE_SPIN : CORIO_IDLE_POLL;
			break;
		case 'M':
			if (tool_opt_size("--maxmemory", optarg, 0, UINT64_MAX / 2, &v))
				return 2;
			srv->lim.maxmemory = v;
			break;
		case 'B':
			if (tool_opt_size("--proto-max-bulk-len", optarg, 1, 1ull << 32, &v))
				return 2;
			srv->lim.proto_max_bulk_len = v;
			break;
		case 'Q':
			if (tool_opt_size("--query-buffer-limit", optarg, 1024, 1ull << 34, &v))
				return 2;
			srv->lim.qbuf_limit = v;
			break;
		case 'O':
			if (tool_opt_size("--output-limit", optarg, 1024, UINT64_MAX / 2, &v))
				return 2;
			srv->lim.out_limit = v;
			break;
		case 'A':
			if (tool_opt_count("--max-multibulk", optarg, 1, INT32_MAX, &v))
				return 2;
			srv->lim.max_multibulk = v;
			break;
		case 'T':
			if (tool_opt_seconds("--timeout", optarg, 0.001, 1e6, &timeout))
				return 2;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "corio-kv: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (ncpus) {
		for (unsigned i = ncpus; i < cfg.shards; i++)
			cpus[i] = cpus[i % ncpus];
		cfg.cpus = cpus;
	}
	if (kv_server_init(srv, cfg.shards)) {
		fprintf(stderr, "corio-kv: out of memory\n");
		return 1;
	}
	/* shards inherit this mask: only the main thread takes the signals */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	ret = corio_start(&cfg, entry, srv, &rt);
	if (ret) {
		fprintf(stderr, "corio-kv: cannot start: %s (%s)\n", strerror(-ret), corio_last_error());
		kv_server_free(srv);
		return 1;
	}
	until = timeout > 0 ? corio_now_ns() + tool_s_to_ns(timeout) : UINT64_MAX;
	for (int printed = 0;;) {
		struct timespec ts = { .tv_nsec = 50000000 };

		if (!printed && atomic_load(&srv->listening) == cfg.shards) {
			printf("corio-kv: listening on %s:%d shards=%u pid=%d\n", srv->host,
			       atomic_load(&srv->bound_port), cfg.shards, (int)getpid());
			fflush(stdout);
			printed = 1;
		}
		if (atomic_load(&srv->failed) || corio_now_ns() >= until)
			break;
		o = sigtimedwait(&set, NULL, &ts);
		if (o == SIGINT || o == SIGTERM)
			break;
	}
	corio_stop(rt);
	ret = corio_wait(rt);
	kv_server_free(srv);
	if (ret) {
		fprintf(stderr, "corio-kv: runtime: %s\n", strerror(-ret));
		return 1;
	}
	return atomic_load(&srv->failed) ? 1 : 0;
}
#endif /* CORIO_KV_NO_MAIN */
