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

#include <malloc.h>
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
