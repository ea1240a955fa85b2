/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/across.c - the commands whose work crosses shards step by step,
 * run when their reply is due: RENAME, RENAMENX, COPY, MSETNX, RANDOMKEY,
 * SCAN, KEYS, WATCH and UNWATCH (and the watch registry EXEC checks).
 *
 * A batch holding one of them runs serially (kv_conn.serial): no shard
 * runs ahead of the replies, each remote op runs when its reply is due
 * (kv_remote_budget() is 0), so these commands, which call one shard and
 * then another, stay in request order with the rest of the pipeline.
 *
 * What is atomic: each step on one shard. RENAME, COPY and MSETNX of keys
 * on one shard are atomic (one step); across shards another client may
 * run between the steps (see docs/corio-kv.md).
 *
 * WATCH: each shard keeps the watched keys of its own keyspace (kv_watch:
 * the key, the watcher's connection id, a dirty bit). Every change to a key
 * (store, delete, expiry set or cleared, expired, FLUSHALL) marks its
 * watches dirty, on the key's shard, in the same step as the change; the
 * test on the hot path is one load (kv_touched()). EXEC asks every shard
 * for the connection's watches, dropping them, and runs the transaction
 * only when none is dirty.
 */
#include "kv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fn(arg) on shard: in place when it is this connection's, else by corio_call. */
static intptr_t kv_on(struct kv_conn *c, unsigned shard, intptr_t (*fn)(void *), void *arg)
{
	intptr_t res = 0;

	if (shard == c->sh->id)
		return fn(arg);
	KV_INC(c->sh->st.remote_calls, 1);
	if (corio_call(shard, fn, arg, &res))
		return -EIO;
	return res;
}

/* One key's step on its shard. */
struct kv_step {
	struct kv_server *srv;
	const struct kv_arg *k;
	uint64_t h;
	struct kv_entry *e;      /* in: the entry to adopt; out: the one taken */
	const struct kv_arg *v;  /* MSETNX: the value */
	const struct kv_arg *k2; /* same-shard RENAME/COPY: the destination */
	uint64_t h2;
	bool copy, nx;
};

static struct kv_shard *kv_here(struct kv_server *srv)
{
	return &srv->sh[corio_shard_id()];
}

static intptr_t kv_step_exists(void *arg)
{
	struct kv_step *s = arg;
	struct kv_entry **l;

	return kv_lookup(kv_here(s->srv), s->h, s->k, &l) != NULL;
}

/* Take the key's entry: detached (RENAME) or a copy of it (COPY). 1, 0
 * when there is none, -ENOMEM. */
static intptr_t kv_step_take(void *arg)
{
	struct kv_step *s = arg;
	struct kv_shard *sh = kv_here(s->srv);
	struct kv_entry **l, *e = kv_lookup(sh, s->h, s->k, &l);

	if (!e)
		return 0;
	s->e = s->copy ? kv_entry_clone(e) : kv_detach(sh, l);
	return s->e ? 1 : -ENOMEM;
}

/* Store s->e under s->k (consumed); with nx, not over a key (0). */
static intptr_t kv_step_put(void *arg)
{
	struct kv_step *s = arg;
	struct kv_shard *sh = kv_here(s->srv);
	struct kv_entry **l, *old = kv_lookup(sh, s->h, s->k, &l);

	if (old && s->nx)
		return 0;
	return kv_adopt(sh, l, old, s->h, s->k, s->e) ? 1 : -ENOMEM;
}

/* RENAME/COPY with both keys on one shard: one step. 1 done, 0 refused
 * (nx and the destination exists), -ENOENT no source, -ENOMEM. */
static intptr_t kv_step_move_local(void *arg)
{
	struct kv_step *s = arg;
	struct kv_shard *sh = kv_here(s->srv);
	struct kv_entry **l, *e = kv_lookup(sh, s->h, s->k, &l), *src;

	if (!e)
		return -ENOENT;
	if (s->nx && kv_lookup(sh, s->h2, s->k2, &l))
		return 0;
	e = kv_lookup(sh, s->h, s->k, &l); /* the link again: the lookup may have moved buckets */
	src = s->copy ? kv_entry_clone(e) : kv_detach(sh, l);
	if (!src)
		return -ENOMEM;
	e = kv_lookup(sh, s->h2, s->k2, &l);
	if (!kv_adopt(sh, l, e, s->h2, s->k2, src)) {
		kv_entry_free(src);
		return -ENOMEM;
	}
	return 1;
}

/* RENAME, RENAMENX (nx), COPY (copy; nx unless REPLACE): 1, 0, -ENOENT. */
static intptr_t kv_move(struct kv_conn *c, const struct kv_arg *src, const struct kv_arg *dst,
			bool copy, bool nx)
{
	struct kv_server *srv = c->srv;
	struct kv_step s = { .srv = srv, .k = src, .copy = copy, .nx = nx, .k2 = dst };
	unsigned a, b;
	intptr_t r;

	s.h = kv_hash(srv->seed, src->p, src->n);
	s.h2 = kv_hash(srv->seed, dst->p, dst->n);
	a = kv_owner(srv, s.h);
	b = kv_owner(srv, s.h2);
	if (a == b)
		return kv_on(c, a, kv_step_move_local, &s);
	/* across shards: check the destination, take the source, put it */
	if (nx) {
		struct kv_step d = { .srv = srv, .k = dst, .h = s.h2 };

		if ((r = kv_on(c, b, kv_step_exists, &d)) != 0)
			return r > 0 ? (kv_on(c, a, kv_step_exists, &s) > 0 ? 0 : -ENOENT) : r;
	}
	if ((r = kv_on(c, a, kv_step_take, &s)) <= 0)
		return r ? r : -ENOENT;
	s.k = dst;
	s.h = s.h2;
	s.nx = false; /* checked: a key made since is overwritten (not atomic across shards) */
	r = kv_on(c, b, kv_step_put, &s);
	if (r <= 0)
		kv_entry_free(s.e);
	return r;
}

static void kv_reply_move(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	bool copy = cmd->kind == C_COPY, nx = cmd->flags & F_NX;
	intptr_t r;

	if (copy) {
		nx = true;
		for (uint32_t i = 3; i < cmd->argc; i++) {
			long long db;

			if (kv_is(&a[i], "replace")) {
				nx = false;
			} else if (kv_is(&a[i], "db") && i + 1 < cmd->argc) {
				if (!kv_str2ll(a[i + 1].p, a[i + 1].n, &db)) {
					kv_err(o, "ERR value is not an integer or out of range");
					return;
				}
				if (db != 0) {
					kv_err(o, "ERR DB index is out of range");
					return;
				}
				i++;
			} else {
				kv_err(o, "ERR syntax error");
				return;
			}
		}
		if (a[1].n == a[2].n && !memcmp(a[1].p, a[2].p, a[1].n)) {
			kv_err(o, "ERR source and destination objects are the same");
			return;
		}
	} else if (a[1].n == a[2].n && !memcmp(a[1].p, a[2].p, a[1].n)) {
		struct kv_step s = { .srv = c->srv, .k = &a[1] };

		s.h = kv_hash(c->srv->seed, a[1].p, a[1].n);
		r = kv_on(c, kv_owner(c->srv, s.h), kv_step_exists, &s);
		if (r <= 0)
			kv_err(o, "ERR no such key");
		else if (nx)
			KV_LIT(o, ":0\r\n");
		else
			KV_LIT(o, "+OK\r\n");
		return;
	}
	r = kv_move(c, &a[1], &a[2], copy, nx);
	if (r == -ENOENT)
		copy ? KV_LIT(o, ":0\r\n") : kv_err(o, "ERR no such key");
	else if (r < 0)
		kv_err(o, "ERR out of memory");
	else if (copy || nx)
		kv_num(o, ':', r);
	else
		KV_LIT(o, "+OK\r\n");
}

/* ---- MSETNX -------------------------------------------------------------------------- */

static intptr_t kv_step_set(void *arg)
{
	struct kv_step *s = arg;
	struct kv_shard *sh = kv_here(s->srv);
	struct kv_entry **l, *e;

	kv_make_room(sh);
	e = kv_lookup(sh, s->h, s->k, &l);
	if (kv_oom(sh))
		return -ENOSPC;
	return kv_store(sh, l, e, s->h, s->k, s->v->p, s->v->n, false) ? 1 : -ENOMEM;
}

static void kv_reply_msetnx(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	intptr_t r = 0;

	for (uint32_t i = 1; i < cmd->argc && !r; i += 2) {
		struct kv_step s = { .srv = c->srv, .k = &a[i] };

		s.h = kv_hash(c->srv->seed, a[i].p, a[i].n);
		r = kv_on(c, kv_owner(c->srv, s.h), kv_step_exists, &s);
	}
	if (r) {
		KV_LIT(o, ":0\r\n");
		return;
	}
	for (uint32_t i = 1; i < cmd->argc && r >= 0; i += 2) {
		struct kv_step s = { .srv = c->srv, .k = &a[i], .v = &a[i + 1] };

		s.h = kv_hash(c->srv->seed, a[i].p, a[i].n);
		r = kv_on(c, kv_owner(c->srv, s.h), kv_step_set, &s);
	}
	if (r == -ENOSPC)
		kv_err(o, kv_oom_msg); /* the keys before it are set: not atomic across shards */
	else if (r < 0)
		kv_err(o, "ERR out of memory");
	else
		KV_LIT(o, ":1\r\n");
}

/* ---- RANDOMKEY, SCAN, KEYS ------------------------------------------------------------ */

struct kv_walk {
	struct kv_server *srv;
	struct kv_buf out;      /* the keys, as bulk strings */
	long long n;            /* how many */
	uint64_t cursor;        /* SCAN: in, the bucket cursor; out, the next */
	long long count;        /* SCAN's COUNT */
	const struct kv_arg *match;
	int type;               /* -1: any; KV_STR, KV_HASH; -2: a type none has */
	uint64_t rnd;
};

static bool kv_walk_wants(struct kv_walk *w, const struct kv_entry *e, int64_t now)
{
	if (e->expire && e->expire <= now)
		return false;
	if (w->type != -1 && w->type != e->type)
		return false;
	return !w->match || kv_glob(w->match->p, w->match->n, e->data, e->klen, false);
}

static void kv_walk_bucket(struct kv_walk *w, struct kv_entry *e, int64_t now)
{
	for (; e; e = e->next) {
		if (kv_walk_wants(w, e, now)) {
			kv_bulk(&w->out, e->data, e->klen);
			w->n++;
		}
	}
}

static uint64_t kv_rev(uint64_t v)
{
	v = ((v >> 1) & 0x5555555555555555ull) | ((v & 0x5555555555555555ull) << 1);
	v = ((v >> 2) & 0x3333333333333333ull) | ((v & 0x3333333333333333ull) << 2);
	v = ((v >> 4) & 0x0f0f0f0f0f0f0f0full) | ((v & 0x0f0f0f0f0f0f0f0full) << 4);
	return __builtin_bswap64(v);
}

/*
 * One SCAN step on this shard: buckets in reverse-binary order of the
 * cursor, so that a table that doubles (or a rehash in progress: both
 * tables are walked, the smaller's bucket and every bucket of the larger
 * it splits into) never makes the cursor skip a bucket it has not seen.
 * A key present all along is returned at least once; one may come twice.
 */
static intptr_t kv_scan_fn(void *arg)
{
	struct kv_walk *w = arg;
	struct kv_shard *sh = kv_here(w->srv);
	int64_t now = kv_now_ms();
	uint64_t v = w->cursor;
	long long budget = (w->count < (1ll << 40) ? w->count : (1ll << 40)) * 10;

	if (!sh->t[0].b)
		return w->cursor = 0, 0;
	do {
		if (!sh->t[1].b) {
			uint64_t m0 = sh->t[0].mask;

			kv_walk_bucket(w, sh->t[0].b[v & m0], now);
			v |= ~m0;
		} else {
			const struct kv_table *s = &sh->t[0], *g = &sh->t[1];
			uint64_t m0, m1;

			if (s->mask > g->mask) {
				const struct kv_table *x = s;

				s = g;
				g = x;
			}
			m0 = s->mask;
			m1 = g->mask;
			kv_walk_bucket(w, s->b[v & m0], now);
			do {
				kv_walk_bucket(w, g->b[v & m1], now);
				v = (((v | m0) + 1) & ~m0) | (v & m0);
			} while (v & (m0 ^ m1));
			v |= ~m0;
		}
		v = kv_rev(kv_rev(v) + 1);
	} while (v && w->n < w->count && --budget > 0);
	w->cursor = v;
	return 0;
}

static intptr_t kv_keys_fn(void *arg)
{
	struct kv_walk *w = &((struct kv_walk *)arg)[corio_shard_id()];
	struct kv_shard *sh = kv_here(w->srv);
	int64_t now = kv_now_ms();

	for (int i = 0; i < 2; i++)
		for (size_t b = 0; sh->t[i].b && b <= sh->t[i].mask; b++)
			kv_walk_bucket(w, sh->t[i].b[b], now);
	return 0;
}

/* A random live key of this shard, into w->out (w->n 1), or none. */
static intptr_t kv_random_fn(void *arg)
{
	struct kv_walk *w = arg;
	struct kv_shard *sh = kv_here(w->srv);
	int64_t now = kv_now_ms();
	const struct kv_table *t = &sh->t[sh->t[1].b && w->rnd % 2 ? 1 : 0];

	if (!t->b || !sh->count)
		return 0;
	/* random buckets first (the table is at least half full, mostly); then
	 * a walk from a random one, so a sparse table still answers */
	for (size_t tries = 0; tries <= 2 * (t->mask + 1) && !w->n; tries++) {
		struct kv_entry *e;
		size_t len = 0, pick;

		w->rnd = w->rnd * 6364136223846793005ull + 1442695040888963407ull;
		e = t->b[(tries < 64 ? (w->rnd >> 17) : tries) & t->mask];
		for (struct kv_entry *x = e; x; x = x->next)
			len += !(x->expire && x->expire <= now);
		if (!len)
			continue;
		pick = (size_t)(w->rnd >> 40) % len;
		for (; e; e = e->next) {
			if (e->expire && e->expire <= now)
				continue;
			if (!pick--) {
				kv_bulk(&w->out, e->data, e->klen);
				w->n = 1;
				break;
			}
		}
		if (tries == 64 && t != &sh->t[0] && !w->n)
			t = &sh->t[0];
	}
	return 0;
}

static void kv_reply_randomkey(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	struct kv_server *srv = c->srv;
	struct kv_walk w = { .srv = srv, .type = -1, .rnd = corio_now_ns() ^ c->id << 20 };
	uint64_t total = 0, r;
	unsigned i;

	for (i = 0; i < srv->nshards; i++)
		total += KV_GET(srv->sh[i].st.keys);
	/* a shard by its share of the keys; if its keys are gone, the others */
	r = total ? (w.rnd >> 11) % total : 0;
	for (i = 0; i < srv->nshards && r >= KV_GET(srv->sh[i].st.keys); i++)
		r -= KV_GET(srv->sh[i].st.keys);
	for (unsigned j = 0; total && j < srv->nshards && !w.n; j++)
		kv_on(c, (i + j) % srv->nshards, kv_random_fn, &w);
	if (w.n)
		kv_put(o, w.out.p, w.out.len);
	else
		kv_null(o, cmd->resp3);
	kv_buf_free(&w.out);
}

/* TYPE's argument: KV_STR, KV_HASH, -2 for a type no key has (Redis
 * answers an empty page for a valid type it holds none of). */
static int kv_type_arg(const struct kv_arg *t)
{
	if (kv_is(t, "string"))
		return KV_STR;
	if (kv_is(t, "hash"))
		return KV_HASH;
	return -2;
}

/* SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]. The cursor names the
 * shard (cursor % shards) and the bucket cursor there (cursor / shards):
 * one shard at a time, in order, then 0. */
static void kv_reply_scan(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_server *srv = c->srv;
	struct kv_walk w = { .srv = srv, .count = 10, .type = -1 };
	unsigned long long cur = 0;
	char *end, num[32];
	unsigned shard;

	/* read as Redis reads it (strtoull: "-1" is 2^64 - 1, a cursor as good as any) */
	errno = 0;
	if (a[1].n == 0 || a[1].n >= sizeof(num) ||
	    (memcpy(num, a[1].p, a[1].n), num[a[1].n] = 0, cur = strtoull(num, &end, 10), *end) ||
	    errno == ERANGE) {
		kv_err(o, "ERR invalid cursor");
		return;
	}
	for (uint32_t i = 2; i < cmd->argc; i += 2) {
		if (i + 1 >= cmd->argc) {
			kv_err(o, "ERR syntax error");
			return;
		}
		if (kv_is(&a[i], "count")) {
			if (!kv_str2ll(a[i + 1].p, a[i + 1].n, &w.count)) {
				kv_err(o, "ERR value is not an integer or out of range");
				return;
			}
			if (w.count < 1) {
				kv_err(o, "ERR syntax error");
				return;
			}
		} else if (kv_is(&a[i], "match")) {
			w.match = &a[i + 1];
			if (w.match->n == 1 && w.match->p[0] == '*')
				w.match = NULL;
		} else if (kv_is(&a[i], "type")) {
			w.type = kv_type_arg(&a[i + 1]);
		} else {
			kv_err(o, "ERR syntax error");
			return;
		}
	}
	shard = (unsigned)(cur % srv->nshards);
	w.cursor = cur / srv->nshards;
	if (w.type != -2)
		kv_on(c, shard, kv_scan_fn, &w);
	else
		w.cursor = 0;
	if (w.cursor)
		cur = w.cursor * srv->nshards + shard;
	else
		cur = shard + 1 < srv->nshards ? shard + 1 : 0;
	kv_num(o, '*', 2);
	snprintf(num, sizeof(num), "%llu", cur);
	kv_bulkstr(o, num);
	kv_num(o, '*', w.n);
	kv_put(o, w.out.p, w.out.len);
	kv_buf_free(&w.out);
}

static void kv_reply_keys(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	struct kv_server *srv = c->srv;
	struct kv_walk *w = calloc(srv->nshards, sizeof(*w));
	const struct kv_arg *pat = &c->av.v[cmd->arg0 + 1];
	long long n = 0;

	if (!w) {
		kv_err(o, "ERR out of memory");
		return;
	}
	for (unsigned i = 0; i < srv->nshards; i++) {
		w[i].srv = srv;
		w[i].type = -1;
		w[i].match = pat->n == 1 && pat->p[0] == '*' ? NULL : pat;
	}
	KV_INC(c->sh->st.remote_calls, 1);
	if (corio_gather(kv_keys_fn, w, NULL)) {
		kv_err(o, "ERR corio-kv: a shard did not answer");
	} else {
		for (unsigned i = 0; i < srv->nshards; i++)
			n += w[i].n;
		kv_num(o, '*', n);
		for (unsigned i = 0; i < srv->nshards; i++)
			kv_put(o, w[i].out.p, w[i].out.len);
	}
	for (unsigned i = 0; i < srv->nshards; i++)
		kv_buf_free(&w[i].out);
	free(w);
}

/* ---- WATCH --------------------------------------------------------------------------- */

/* Mark every watch of key dirty (on the key's shard, as it changes). */
void kv_watch_touch(struct kv_shard *sh, uint64_t h, const char *k, size_t kn)
{
	for (size_t i = 0; i < sh->nw; i++) {
		struct kv_watch *x = &sh->w[i];

		if (x->hash == h && x->klen == kn && !memcmp(x->key, k, kn))
			x->dirty = true;
	}
}

void kv_watch_touch_all(struct kv_shard *sh)
{
	for (size_t i = 0; i < sh->nw; i++)
		sh->w[i].dirty = true;
}

struct kv_watch_msg {
	struct kv_server *srv;
	uint64_t conn;
	const struct kv_arg *k;
	uint64_t h;
};

static intptr_t kv_watch_add_fn(void *arg)
{
	struct kv_watch_msg *m = arg;
	struct kv_shard *sh = kv_here(m->srv);
	struct kv_watch *x;

	if (sh->nw == sh->wcap) {
		size_t cap = sh->wcap ? sh->wcap * 2 : 16;
		struct kv_watch *w = realloc(sh->w, cap * sizeof(*w));

		if (!w)
			return -ENOMEM;
		sh->w = w;
		sh->wcap = cap;
	}
	x = &sh->w[sh->nw];
	x->key = malloc(m->k->n + 1);
	if (!x->key)
		return -ENOMEM;
	memcpy(x->key, m->k->p, m->k->n);
	x->klen = (uint32_t)m->k->n;
	x->hash = m->h;
	x->conn = m->conn;
	x->dirty = false;
	sh->nw++;
	return 0;
}

/* Drop the connection's watches on this shard; how many were dirty. */
static intptr_t kv_watch_drop_fn(void *arg)
{
	struct kv_watch_msg *m = arg;
	struct kv_shard *sh = kv_here(m->srv);
	intptr_t dirty = 0;

	for (size_t i = 0; i < sh->nw;) {
		if (sh->w[i].conn == m->conn) {
			dirty += sh->w[i].dirty;
			free(sh->w[i].key);
			sh->w[i] = sh->w[--sh->nw];
		} else {
			i++;
		}
	}
	return dirty;
}

/* Forget every watch of c (UNWATCH, EXEC, DISCARD, the connection's end):
 * true when one of them was dirty. */
bool kv_unwatch(struct kv_conn *c)
{
	struct kv_watch_msg m = { .srv = c->srv, .conn = c->id };
	intptr_t *res;
	bool dirty = false;

	if (!c->nwatch)
		return false;
	c->nwatch = 0;
	res = calloc(c->srv->nshards, sizeof(*res));
	if (!res || corio_gather(kv_watch_drop_fn, &m, res))
		dirty = true; /* cannot tell: a transaction must not run on a guess */
	for (unsigned i = 0; res && i < c->srv->nshards; i++)
		dirty |= res[i] != 0;
	free(res);
	return dirty;
}

static void kv_reply_watch(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];

	for (uint32_t i = 1; i < cmd->argc; i++) {
		struct kv_watch_msg m = { .srv = c->srv, .conn = c->id, .k = &a[i] };

		m.h = kv_hash(c->srv->seed, a[i].p, a[i].n);
		if (kv_on(c, kv_owner(c->srv, m.h), kv_watch_add_fn, &m)) {
			kv_err(o, "ERR out of memory");
			return;
		}
		c->nwatch++;
	}
	KV_LIT(o, "+OK\r\n");
}

/* The replies of the commands above. */
void kv_reply_across(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	switch (cmd->kind) {
	case C_RENAME:
	case C_COPY:
		kv_reply_move(c, cmd, o);
		break;
	case C_MSETNX:
		kv_reply_msetnx(c, cmd, o);
		break;
	case C_RANDOMKEY:
		kv_reply_randomkey(c, cmd, o);
		break;
	case C_SCAN:
		kv_reply_scan(c, cmd, o);
		break;
	case C_KEYS:
		kv_reply_keys(c, cmd, o);
		break;
	case C_WATCH:
		kv_reply_watch(c, cmd, o);
		break;
	case C_UNWATCH:
		kv_unwatch(c);
		KV_LIT(o, "+OK\r\n");
		break;
	default:
		break;
	}
}
