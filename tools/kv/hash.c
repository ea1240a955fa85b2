/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/hash.c - hashes: a key whose value is fields and their values.
 *
 * Two encodings, as Redis has (and named as its OBJECT ENCODING names them):
 *  - small ("listpack"): up to KV_HASH_SMALL_FIELDS fields of at most
 *    KV_HASH_SMALL_LEN bytes each, packed in the entry's value: per field
 *    a varint length, the field, a varint length, the value. One
 *    allocation per key, two bytes of overhead per small field and value,
 *    looked up by a scan (short, and in one cache-friendly run).
 *  - table ("hashtable"): past either limit the hash becomes a chained
 *    table of its own (struct kv_htab; the entry's value is its pointer),
 *    O(1) per field however many. It never goes back to small (Redis
 *    neither).
 * The memory count includes the table: kv_payload_bytes().
 */
#include "kv.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kv_hnode {
	struct kv_hnode *next;
	uint64_t hash;
	uint32_t flen, vlen;
	char data[]; /* field, then value */
};

struct kv_htab {
	struct kv_hnode **b;
	size_t mask;  /* buckets - 1 */
	size_t n;     /* fields */
	size_t bytes; /* what it holds: this, the buckets, the nodes (usable sizes) */
};

static struct kv_htab *kv_htab_of(const struct kv_entry *e)
{
	struct kv_htab *t;

	memcpy(&t, e->data + e->klen, sizeof(t));
	return t;
}

size_t kv_payload_bytes(const struct kv_entry *e)
{
	return e->enc == KV_ENC_TABLE ? kv_htab_of(e)->bytes : 0;
}

static void kv_htab_free(struct kv_htab *t)
{
	for (size_t i = 0; i <= t->mask; i++) {
		struct kv_hnode *n = t->b[i];

		while (n) {
			struct kv_hnode *next = n->next;

			free(n);
			n = next;
		}
	}
	free(t->b);
	free(t);
}

void kv_hash_table_free(struct kv_entry *e)
{
	kv_htab_free(kv_htab_of(e));
	e->enc = KV_ENC_SMALL;
}

static struct kv_htab *kv_htab_new(size_t buckets)
{
	struct kv_htab *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->b = calloc(buckets, sizeof(*t->b));
	if (!t->b) {
		free(t);
		return NULL;
	}
	t->mask = buckets - 1;
	t->bytes = malloc_usable_size(t) + malloc_usable_size(t->b);
	return t;
}

/* Put node n (its hash set) in t, growing t at load factor 1. */
static void kv_htab_put(struct kv_htab *t, struct kv_hnode *n)
{
	if (t->n >= t->mask + 1) {
		size_t nb = (t->mask + 1) * 2;
		struct kv_hnode **b = calloc(nb, sizeof(*b));

		if (b) { /* without memory the chains just grow longer */
			for (size_t i = 0; i <= t->mask; i++) {
				struct kv_hnode *x = t->b[i];

				while (x) {
					struct kv_hnode *next = x->next;

					x->next = b[x->hash & (nb - 1)];
					b[x->hash & (nb - 1)] = x;
					x = next;
				}
			}
			t->bytes -= malloc_usable_size(t->b);
			free(t->b);
			t->b = b;
			t->mask = nb - 1;
			t->bytes += malloc_usable_size(b);
		}
	}
	n->next = t->b[n->hash & t->mask];
	t->b[n->hash & t->mask] = n;
	t->n++;
	t->bytes += malloc_usable_size(n);
}

/* A detached copy of e (COPY): its table too; NULL without memory. */
struct kv_entry *kv_entry_clone(const struct kv_entry *e)
{
	size_t sz = sizeof(*e) + e->klen + e->vlen;
	struct kv_entry *c = malloc(sz);
	struct kv_htab *from, *t;

	if (!c)
		return NULL;
	memcpy(c, e, sz);
	c->hidx = 0;
	c->next = NULL;
	if (e->enc != KV_ENC_TABLE)
		return c;
	from = kv_htab_of(e);
	t = kv_htab_new(from->mask + 1);
	for (size_t i = 0; t && i <= from->mask; i++) {
		for (struct kv_hnode *x = from->b[i]; x; x = x->next) {
			size_t nsz = sizeof(*x) + x->flen + x->vlen;
			struct kv_hnode *n = malloc(nsz);

			if (!n) {
				kv_htab_free(t);
				t = NULL;
				break;
			}
			memcpy(n, x, nsz);
			kv_htab_put(t, n);
		}
	}
	if (!t) {
		free(c);
		return NULL;
	}
	memcpy(c->data + c->klen, &t, sizeof(t));
	return c;
}

/* ---- the small encoding: varint length, field, varint length, value ---------------- */

#define KV_HASH_SMALL_FIELDS 128 /* Redis's hash-max-listpack-entries */
#define KV_HASH_SMALL_LEN 64     /* Redis's hash-max-listpack-value */

static size_t kv_varint_put(char *p, size_t v)
{
	size_t n = 0;

	do {
		p[n++] = (char)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return n;
}

static size_t kv_varint_get(const char *p, size_t *v)
{
	size_t n = 0, shift = 0;

	*v = 0;
	do {
		*v |= (size_t)((unsigned char)p[n] & 0x7f) << shift;
		shift += 7;
	} while ((unsigned char)p[n++] & 0x80);
	return n;
}

/* A field and its value, wherever the hash keeps them. */
struct kv_hf {
	const char *f, *v;
	size_t fn, vn;
};

/* Walking a hash: small (at: offset in the value) or table (bucket, node). */
struct kv_hiter {
	const struct kv_entry *e;
	size_t at;
	size_t bucket;
	const struct kv_hnode *node;
};

static void kv_hiter_init(struct kv_hiter *it, const struct kv_entry *e)
{
	memset(it, 0, sizeof(*it));
	it->e = e;
}

static bool kv_hiter_next(struct kv_hiter *it, struct kv_hf *hf)
{
	const struct kv_entry *e = it->e;

	if (e->enc == KV_ENC_SMALL) {
		const char *p = e->data + e->klen;

		if (it->at >= e->vlen)
			return false;
		it->at += kv_varint_get(p + it->at, &hf->fn);
		hf->f = p + it->at;
		it->at += hf->fn;
		it->at += kv_varint_get(p + it->at, &hf->vn);
		hf->v = p + it->at;
		it->at += hf->vn;
		return true;
	} else {
		const struct kv_htab *t = kv_htab_of(e);

		if (it->node)
			it->node = it->node->next;
		while (!it->node && it->bucket <= t->mask)
			it->node = t->b[it->bucket++];
		if (!it->node)
			return false;
		hf->f = it->node->data;
		hf->fn = it->node->flen;
		hf->v = it->node->data + it->node->flen;
		hf->vn = it->node->vlen;
		return true;
	}
}

static size_t kv_hash_len(const struct kv_entry *e)
{
	struct kv_hiter it;
	struct kv_hf hf;
	size_t n = 0;

	if (e->enc == KV_ENC_TABLE)
		return kv_htab_of(e)->n;
	kv_hiter_init(&it, e);
	while (kv_hiter_next(&it, &hf))
		n++;
	return n;
}

static uint64_t kv_field_hash(const char *p, size_t n)
{
	return kv_hash(0x68617368ull, p, n);
}

/* The field f of hash e, or false. */
static bool kv_hash_get(const struct kv_entry *e, const struct kv_arg *f, struct kv_hf *out)
{
	if (e->enc == KV_ENC_TABLE) {
		const struct kv_htab *t = kv_htab_of(e);
		uint64_t h = kv_field_hash(f->p, f->n);

		for (const struct kv_hnode *x = t->b[h & t->mask]; x; x = x->next) {
			if (x->hash == h && x->flen == f->n && !memcmp(x->data, f->p, f->n)) {
				out->f = x->data;
				out->fn = x->flen;
				out->v = x->data + x->flen;
				out->vn = x->vlen;
				return true;
			}
		}
		return false;
	} else {
		struct kv_hiter it;

		kv_hiter_init(&it, e);
		while (kv_hiter_next(&it, out))
			if (out->fn == f->n && !memcmp(out->f, f->p, f->n))
				return true;
		return false;
	}
}

/* ---- changes -------------------------------------------------------------------------- */

/* Where a changed hash goes: the entry (at l) rebuilt around a new small
 * value, or its table changed in place. */
struct kv_hctx {
	struct kv_shard *sh;
	struct kv_entry **l, *e; /* e NULL: the key does not exist yet */
	uint64_t h;
	const struct kv_arg *k;
};

static struct kv_hnode *kv_hnode_new(const char *f, size_t fn, const char *v, size_t vn)
{
	struct kv_hnode *n = malloc(sizeof(*n) + fn + vn);

	if (!n)
		return NULL;
	n->hash = kv_field_hash(f, fn);
	n->flen = (uint32_t)fn;
	n->vlen = (uint32_t)vn;
	memcpy(n->data, f, fn);
	memcpy(n->data + fn, v, vn);
	return n;
}

/* Put the table t as x's value (the key's entry rebuilt; t's bytes counted). */
static struct kv_entry *kv_hash_install_table(struct kv_hctx *x, struct kv_htab *t)
{
	struct kv_entry *e = kv_store(x->sh, x->l, x->e, x->h, x->k, &t, sizeof(t), true);

	if (!e)
		return NULL;
	e->type = KV_HASH;
	e->enc = KV_ENC_TABLE;
	kv_store_account(x->sh, (int64_t)t->bytes);
	x->e = e;
	return e;
}

/* The small hash x->e becomes a table (it outgrew the small encoding). */
static bool kv_hash_to_table(struct kv_hctx *x)
{
	struct kv_htab *t = kv_htab_new(KV_HASH_SMALL_FIELDS * 2);
	struct kv_hiter it;
	struct kv_hf hf;

	if (!t)
		return false;
	kv_hiter_init(&it, x->e);
	while (kv_hiter_next(&it, &hf)) {
		struct kv_hnode *n = kv_hnode_new(hf.f, hf.fn, hf.v, hf.vn);

		if (!n) {
			kv_htab_free(t);
			return false;
		}
		kv_htab_put(t, n);
	}
	if (!kv_hash_install_table(x, t)) {
		kv_htab_free(t);
		return false;
	}
	return true;
}

/* Set field f to v in the table of x->e: 1 added, 0 replaced, -ENOMEM. */
static int kv_htab_set(struct kv_hctx *x, const char *f, size_t fn, const char *v, size_t vn)
{
	struct kv_htab *t = kv_htab_of(x->e);
	uint64_t h = kv_field_hash(f, fn);
	struct kv_hnode **pp, *n = kv_hnode_new(f, fn, v, vn);
	size_t before = t->bytes;

	if (!n)
		return -ENOMEM;
	kv_snap_pre(x->sh, x->e);
	kv_touched(x->sh, x->e->hash, x->e->data, x->e->klen);
	for (pp = &t->b[h & t->mask]; *pp; pp = &(*pp)->next) {
		struct kv_hnode *o = *pp;

		if (o->hash == h && o->flen == fn && !memcmp(o->data, f, fn)) {
			n->next = o->next;
			*pp = n;
			t->bytes += malloc_usable_size(n) - malloc_usable_size(o);
			free(o);
			kv_store_account(x->sh, (int64_t)(t->bytes - before));
			return 0;
		}
	}
	kv_htab_put(t, n);
	kv_store_account(x->sh, (int64_t)(t->bytes - before));
	return 1;
}

/* Delete field f from the table of x->e: 1 or 0. */
static int kv_htab_del(struct kv_hctx *x, const struct kv_arg *f)
{
	struct kv_htab *t = kv_htab_of(x->e);
	uint64_t h = kv_field_hash(f->p, f->n);

	for (struct kv_hnode **pp = &t->b[h & t->mask]; *pp; pp = &(*pp)->next) {
		struct kv_hnode *o = *pp;

		if (o->hash == h && o->flen == f->n && !memcmp(o->data, f->p, f->n)) {
			size_t sz = malloc_usable_size(o);

			kv_snap_pre(x->sh, x->e);
			kv_touched(x->sh, x->e->hash, x->e->data, x->e->klen);
			*pp = o->next;
			free(o);
			t->n--;
			t->bytes -= sz;
			kv_store_account(x->sh, -(int64_t)sz);
			return 1;
		}
	}
	return 0;
}

/*
 * Set the pairs (f[i], v[i]) of a[0 .. 2n) (nx: only fields not there),
 * creating the key if needed. *added gets the number of new fields.
 * 0, or -ENOMEM.
 */
static int kv_hash_set(struct kv_hctx *x, const struct kv_arg *a, size_t n, bool nx, long long *added)
{
	size_t need = 0;
	bool small = !x->e || x->e->enc == KV_ENC_SMALL;
	char *buf, *p;

	*added = 0;
	for (size_t i = 0; i < 2 * n; i++) {
		need += a[i].n + 10;
		if (a[i].n > KV_HASH_SMALL_LEN)
			small = false;
	}
	if (x->e && x->e->enc == KV_ENC_SMALL && (!small || kv_hash_len(x->e) + n > KV_HASH_SMALL_FIELDS)) {
		/* maybe too big for small: a table when it does not fit */
		size_t fields = kv_hash_len(x->e);

		for (size_t i = 0; i < n && small; i++) {
			struct kv_hf hf;

			fields += !kv_hash_get(x->e, &a[2 * i], &hf);
		}
		if (!small || fields > KV_HASH_SMALL_FIELDS) {
			if (!kv_hash_to_table(x))
				return -ENOMEM;
			small = false;
		}
	}
	if (!x->e && (!small || n > KV_HASH_SMALL_FIELDS)) {
		struct kv_htab *t = kv_htab_new(KV_HASH_SMALL_FIELDS * 2);

		if (!t)
			return -ENOMEM;
		if (!kv_hash_install_table(x, t)) {
			kv_htab_free(t);
			return -ENOMEM;
		}
		small = false;
	}
	if (!small) {
		for (size_t i = 0; i < n; i++) {
			struct kv_hf hf;
			int r;

			if (nx && kv_hash_get(x->e, &a[2 * i], &hf))
				continue;
			r = kv_htab_set(x, a[2 * i].p, a[2 * i].n, a[2 * i + 1].p, a[2 * i + 1].n);
			if (r < 0)
				return r;
			*added += r;
		}
		return 0;
	}
	/* small: the new value is the old with each field replaced or appended */
	need += x->e ? x->e->vlen : 0;
	buf = malloc(need);
	if (!buf)
		return -ENOMEM;
	p = buf;
	if (x->e) {
		memcpy(p, x->e->data + x->e->klen, x->e->vlen);
		p += x->e->vlen;
	}
	for (size_t i = 0; i < n; i++) {
		const struct kv_arg *f = &a[2 * i], *v = &a[2 * i + 1];
		struct kv_entry view = { .klen = 0, .vlen = (uint32_t)(p - buf), .enc = KV_ENC_SMALL };
		struct kv_hiter it;
		struct kv_hf hf;
		bool found = false;

		/* look in what is built so far (a field may repeat in one HSET) */
		it.e = &view;
		it.at = 0;
		while (it.at < (size_t)(p - buf)) {
			size_t start = it.at, fn, vn;

			it.at += kv_varint_get(buf + it.at, &fn);
			hf.f = buf + it.at;
			it.at += fn;
			it.at += kv_varint_get(buf + it.at, &vn);
			hf.v = buf + it.at;
			it.at += vn;
			if (fn == f->n && !memcmp(hf.f, f->p, fn)) {
				found = true;
				if (!nx) { /* cut it out, splice the new one in its place */
					char tmp[24];
					size_t tn = 0, end = it.at, rest = (size_t)(p - buf) - end;
					size_t newlen;

					tn += kv_varint_put(tmp, f->n);
					newlen = tn + f->n;
					tn = kv_varint_put(tmp, v->n);
					newlen += tn + v->n;
					memmove(buf + start + newlen, buf + end, rest);
					p = buf + start + newlen + rest;
					{
						char *q = buf + start;

						q += kv_varint_put(q, f->n);
						memcpy(q, f->p, f->n);
						q += f->n;
						q += kv_varint_put(q, v->n);
						memcpy(q, v->p, v->n);
					}
				}
				break;
			}
		}
		if (!found) {
			p += kv_varint_put(p, f->n);
			memcpy(p, f->p, f->n);
			p += f->n;
			p += kv_varint_put(p, v->n);
			memcpy(p, v->p, v->n);
			p += v->n;
			(*added)++;
		}
	}
	{
		struct kv_entry *e = kv_store(x->sh, x->l, x->e, x->h, x->k, buf, (size_t)(p - buf), true);

		free(buf);
		if (!e)
			return -ENOMEM;
		e->type = KV_HASH;
		e->enc = KV_ENC_SMALL;
		x->e = e;
	}
	return 0;
}

/* Delete the fields a[0 .. n): how many were there; the key goes with its
 * last field. */
static long long kv_hash_del(struct kv_hctx *x, const struct kv_arg *a, size_t n)
{
	long long gone = 0;

	if (x->e->enc == KV_ENC_TABLE) {
		for (size_t i = 0; i < n; i++)
			gone += kv_htab_del(x, &a[i]);
		if (!kv_htab_of(x->e)->n)
			kv_unlink(x->sh, x->l);
		return gone;
	}
	{
		char *buf = malloc(x->e->vlen + 1), *p = buf;
		struct kv_hiter it;
		struct kv_hf hf;

		if (!buf)
			return 0;
		kv_hiter_init(&it, x->e);
		while (kv_hiter_next(&it, &hf)) {
			bool del = false;

			for (size_t i = 0; i < n && !del; i++)
				del = hf.fn == a[i].n && !memcmp(hf.f, a[i].p, hf.fn);
			if (del) {
				gone++;
				continue;
			}
			p += kv_varint_put(p, hf.fn);
			memcpy(p, hf.f, hf.fn);
			p += hf.fn;
			p += kv_varint_put(p, hf.vn);
			memcpy(p, hf.v, hf.vn);
			p += hf.vn;
		}
		if (gone && p == buf) {
			kv_unlink(x->sh, x->l);
		} else if (gone) {
			struct kv_entry *e = kv_store(x->sh, x->l, x->e, x->h, x->k, buf,
						      (size_t)(p - buf), true);

			if (e) {
				e->type = KV_HASH;
				e->enc = KV_ENC_SMALL;
			}
		}
		free(buf);
	}
	return gone;
}

/* ---- the commands --------------------------------------------------------------------- */

static void kv_hf_reply_pair(struct kv_buf *o, const struct kv_hf *hf)
{
	kv_bulk(o, hf->f, hf->fn);
	kv_bulk(o, hf->v, hf->vn);
}

/* HRANDFIELD key [count [WITHVALUES]] */
static void kv_hrandfield(struct kv_shard *sh, const struct kv_cmd *cmd, struct kv_entry *e,
			  struct kv_buf *o)
{
	bool with = cmd->flags & F_WITHVALUES, r3 = cmd->resp3;
	size_t n = kv_hash_len(e);
	long long count = cmd->n;
	struct kv_hiter it;
	struct kv_hf hf;

	sh->rnd = sh->rnd * 6364136223846793005ull + 1442695040888963407ull;
	if (!(cmd->flags & F_COUNT)) { /* one field */
		size_t pick = (size_t)(sh->rnd >> 33) % n;

		kv_hiter_init(&it, e);
		while (kv_hiter_next(&it, &hf) && pick--)
			;
		kv_bulk(o, hf.f, hf.fn);
		return;
	}
	if (count >= 0) { /* distinct: the first min(count, n) of a random rotation */
		size_t want = (size_t)count < n ? (size_t)count : n, start = (size_t)(sh->rnd >> 33) % n;

		kv_num(o, '*', (long long)(with && !r3 ? 2 * want : want));
		for (size_t round = 0, i = 0; round < 2 && want; round++) {
			kv_hiter_init(&it, e);
			for (i = 0; kv_hiter_next(&it, &hf) && want; i++) {
				if ((round == 0 && i < start) || (round == 1 && i >= start))
					continue;
				if (with && r3)
					KV_LIT(o, "*2\r\n");
				if (with)
					kv_hf_reply_pair(o, &hf);
				else
					kv_bulk(o, hf.f, hf.fn);
				want--;
			}
		}
		return;
	}
	/* negative: -count picks, repeats allowed */
	count = -count;
	kv_num(o, '*', with && !r3 ? 2 * count : count);
	for (long long j = 0; j < count; j++) {
		size_t pick;

		sh->rnd = sh->rnd * 6364136223846793005ull + 1442695040888963407ull;
		pick = (size_t)(sh->rnd >> 33) % n;
		kv_hiter_init(&it, e);
		while (kv_hiter_next(&it, &hf) && pick--)
			;
		if (with && r3)
			KV_LIT(o, "*2\r\n");
		if (with)
			kv_hf_reply_pair(o, &hf);
		else
			kv_bulk(o, hf.f, hf.fn);
	}
}

static uint64_t kv_rev64(uint64_t v)
{
	v = ((v >> 1) & 0x5555555555555555ull) | ((v & 0x5555555555555555ull) << 1);
	v = ((v >> 2) & 0x3333333333333333ull) | ((v & 0x3333333333333333ull) << 2);
	v = ((v >> 4) & 0x0f0f0f0f0f0f0f0full) | ((v & 0x0f0f0f0f0f0f0f0full) << 4);
	return __builtin_bswap64(v);
}

/* HSCAN key cursor [MATCH p] [COUNT n]: a small hash whole (cursor 0, as
 * Redis); a table bucket by bucket in reverse-binary order. */
static void kv_hscan(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_entry *e, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	const struct kv_arg *match = cmd->flags & F_MATCH ? &a[cmd->n2] : NULL;
	struct kv_buf items = { 0 };
	uint64_t v = (uint64_t)cmd->n;
	long long n = 0, budget;
	char num[24];

	if (!e || e->enc == KV_ENC_SMALL) {
		struct kv_hiter it;
		struct kv_hf hf;

		if (e) {
			kv_hiter_init(&it, e);
			while (kv_hiter_next(&it, &hf)) {
				if (match && !kv_glob(match->p, match->n, hf.f, hf.fn, false))
					continue;
				kv_hf_reply_pair(&items, &hf);
				n++;
			}
		}
		v = 0;
	} else {
		const struct kv_htab *t = kv_htab_of(e);

		budget = cmd->vidx * 10; /* COUNT */
		do {
			for (const struct kv_hnode *x = t->b[v & t->mask]; x; x = x->next) {
				if (match && !kv_glob(match->p, match->n, x->data, x->flen, false))
					continue;
				kv_bulk(&items, x->data, x->flen);
				kv_bulk(&items, x->data + x->flen, x->vlen);
				n++;
			}
			v |= ~(uint64_t)t->mask;
			v = kv_rev64(kv_rev64(v) + 1);
		} while (v && n < (long long)cmd->vidx && --budget > 0);
	}
	kv_num(o, '*', 2);
	snprintf(num, sizeof(num), "%llu", (unsigned long long)v);
	kv_bulkstr(o, num);
	kv_num(o, '*', 2 * n);
	kv_put(o, items.p, items.len);
	kv_buf_free(&items);
}

/* HINCRBY / HINCRBYFLOAT field by: the new value's text into num. */
static const char *kv_hincr(const struct kv_cmd *cmd, const struct kv_hf *cur, bool found,
			    const struct kv_arg *by, char *num, size_t *nn)
{
	if (cmd->kind == C_HINCRBY) {
		long long v = 0, r;

		if (found && !kv_str2ll(cur->v, cur->vn, &v))
			return "ERR hash value is not an integer";
		if (__builtin_add_overflow(v, cmd->n, &r))
			return "ERR increment or decrement would overflow";
		*nn = kv_lltoa(num, r);
		return NULL;
	} else {
		long double v = 0, inc = 0;

		if (found && !kv_parse_ld(cur->v, cur->vn, &v))
			return "ERR hash value is not a float";
		kv_parse_ld(by->p, by->n, &inc);
		v += inc;
		if (isnan(v) || isinf(v))
			return "ERR increment would produce NaN or Infinity";
		*nn = kv_format_ld(num, 5200, v);
		return NULL;
	}
}

void kv_run_hash(struct kv_shard *sh, struct kv_conn *c, struct kv_op *op, struct kv_entry *e,
		 struct kv_entry **l, struct kv_buf *o)
{
	const struct kv_cmd *cmd = &c->cmds[op->cmd];
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_hctx x = { sh, l, e, op->hash, &c->av.v[op->key] };
	struct kv_hf hf;
	long long added;

	if (e && e->type != KV_HASH) {
		kv_err(o, kv_wrongtype_msg);
		return;
	}
	switch (cmd->kind) {
	case C_HSET:
	case C_HSETNX: {
		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		if (kv_hash_set(&x, &a[2], (cmd->argc - 2) / 2, cmd->kind == C_HSETNX, &added)) {
			kv_err(o, "ERR out of memory");
			break;
		}
		if (cmd->flags & F_OKREPLY) /* HMSET */
			KV_LIT(o, "+OK\r\n");
		else
			kv_num(o, ':', added);
		break;
	}
	case C_HGET:
		if (e && kv_hash_get(e, &a[2], &hf))
			kv_bulk(o, hf.v, hf.vn);
		else
			kv_null(o, cmd->resp3);
		break;
	case C_HMGET:
		kv_num(o, '*', cmd->argc - 2);
		for (uint32_t i = 2; i < cmd->argc; i++) {
			if (e && kv_hash_get(e, &a[i], &hf))
				kv_bulk(o, hf.v, hf.vn);
			else
				kv_null(o, cmd->resp3);
		}
		break;
	case C_HGETALL:
	case C_HKEYS:
	case C_HVALS: {
		size_t n = e ? kv_hash_len(e) : 0;
		struct kv_hiter it;

		if (cmd->kind == C_HGETALL)
			kv_num(o, cmd->resp3 ? '%' : '*', cmd->resp3 ? (long long)n : 2 * (long long)n);
		else
			kv_num(o, '*', (long long)n);
		if (!e)
			break;
		kv_hiter_init(&it, e);
		while (kv_hiter_next(&it, &hf)) {
			if (cmd->kind != C_HVALS)
				kv_bulk(o, hf.f, hf.fn);
			if (cmd->kind != C_HKEYS)
				kv_bulk(o, hf.v, hf.vn);
		}
		break;
	}
	case C_HDEL:
		kv_num(o, ':', e ? kv_hash_del(&x, &a[2], cmd->argc - 2) : 0);
		break;
	case C_HEXISTS:
		kv_num(o, ':', e && kv_hash_get(e, &a[2], &hf));
		break;
	case C_HLEN:
		kv_num(o, ':', e ? (long long)kv_hash_len(e) : 0);
		break;
	case C_HSTRLEN:
		kv_num(o, ':', e && kv_hash_get(e, &a[2], &hf) ? (long long)hf.vn : 0);
		break;
	case C_HINCRBY:
	case C_HINCRBYFLOAT: {
		char num[5200];
		size_t nn = 0;
		bool found = e && kv_hash_get(e, &a[2], &hf);
		const char *bad;
		struct kv_arg pair[2];

		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		if ((bad = kv_hincr(cmd, &hf, found, &a[3], num, &nn))) {
			kv_err(o, bad);
			break;
		}
		pair[0] = a[2];
		pair[1] = (struct kv_arg){ num, nn };
		if (kv_hash_set(&x, pair, 1, false, &added)) {
			kv_err(o, "ERR out of memory");
			break;
		}
		if (cmd->kind == C_HINCRBY)
			kv_put(o, ":", 1), kv_put(o, num, nn), KV_LIT(o, "\r\n");
		else
			kv_bulk(o, num, nn);
		break;
	}
	case C_HRANDFIELD:
		if (!e) {
			if (cmd->flags & F_COUNT)
				KV_LIT(o, "*0\r\n");
			else
				kv_null(o, cmd->resp3);
		} else if (cmd->flags & F_COUNT && cmd->n == 0) {
			KV_LIT(o, "*0\r\n");
		} else if (cmd->flags & F_COUNT && cmd->n < 0 &&
			   (unsigned long long)-cmd->n > c->srv->lim.out_limit / 6) {
			/* -count picks with repeats, each at least "$0\r\n\r\n": a count
			 * the output limit cannot hold is refused, not built */
			kv_err(o, "ERR corio-kv: HRANDFIELD's count makes a reply over the output limit");
		} else {
			kv_hrandfield(sh, cmd, e, o);
		}
		break;
	case C_HSCAN:
		kv_hscan(c, cmd, e, o);
		break;
	default:
		break;
	}
}

/* ---- for the snapshot and the load (save.c, rdb.c) ------------------------------ */

size_t kv_hash_nfields(const struct kv_entry *e)
{
	return kv_hash_len(e);
}

/* fn(arg, field, value) for every field of hash e, in its order. */
void kv_hash_walk(const struct kv_entry *e, void (*fn)(void *arg, const char *f, size_t fn,
						       const char *v, size_t vn), void *arg)
{
	struct kv_hiter it;
	struct kv_hf hf;

	kv_hiter_init(&it, e);
	while (kv_hiter_next(&it, &hf))
		fn(arg, hf.f, hf.fn, hf.v, hf.vn);
}

/* Make key k (hash h, absent) a hash of the pairs fv[0 .. 2n), as HSET
 * would: small when it fits Redis's listpack limits. The entry, or NULL
 * without memory. */
struct kv_entry *kv_hash_restore(struct kv_shard *sh, uint64_t h, const struct kv_arg *k,
				 const struct kv_arg *fv, size_t n)
{
	struct kv_entry **l;
	struct kv_entry *e = kv_lookup(sh, h, k, &l);
	struct kv_hctx x = { sh, l, NULL, h, k };
	long long added;

	if (e)
		kv_unlink(sh, l), kv_lookup(sh, h, k, &x.l);
	if (kv_hash_set(&x, fv, n, false, &added))
		return NULL;
	return x.e;
}
