/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/evict.c - eviction under maxmemory, approximated by sampling as
 * Redis does, per shard: each shard holds maxmemory / shards and evicts
 * its own keys when a write finds it over its share.
 *
 * The policies are Redis's: noeviction (refuse the write with -OOM),
 * allkeys-/volatile- (every key, or the keys with an expiry) x lru, lfu,
 * random, and volatile-ttl. Candidates: maxmemory-samples keys picked at
 * random (from the table's buckets, or from the expiry heap for volatile-),
 * scored (idle seconds; 255 - the LFU counter; how soon it expires), and
 * kept in a pool of the best KV_EVPOOL seen so far (Redis's eviction pool):
 * the best of the pool goes first. The pool holds copies of the keys (an
 * entry may be freed or replaced meanwhile) and looks the key up again
 * before evicting it.
 *
 * The clocks: an entry's atime is the shard's clock in seconds (16 bits,
 * wrapping every 18 hours, so idle times are modulo that; Redis's 24-bit
 * clock wraps after 194 days); LFU's last-decrement time is the same atime
 * (Redis updates both on every access), in minutes.
 */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

#define KV_EVICT_MAX 1024    /* keys one write may evict */
#define KV_LFU_LOG_FACTOR 10 /* Redis's lfu-log-factor default */
#define KV_LFU_DECAY_MIN 1   /* Redis's lfu-decay-time default (minutes) */

const char *const kv_policy_names[KV_NPOLICIES] = {
	"noeviction", "allkeys-lru", "volatile-lru", "allkeys-lfu", "volatile-lfu",
	"volatile-ttl", "allkeys-random", "volatile-random",
};

int kv_policy_parse(const char *p, size_t n)
{
	for (int i = 0; i < KV_NPOLICIES; i++) {
		struct kv_arg a = { p, n };

		if (kv_is(&a, kv_policy_names[i]))
			return i;
	}
	return -1;
}

static uint64_t kv_rand(struct kv_shard *sh)
{
	sh->rnd = sh->rnd * 6364136223846793005ull + 1442695040888963407ull;
	return sh->rnd >> 17;
}

/* The LFU counter of e after the decay for the minutes it was not touched. */
unsigned kv_lfu_get(const struct kv_shard *sh, const struct kv_entry *e)
{
	unsigned minutes = (uint16_t)(sh->clock - e->atime) / 60u / KV_LFU_DECAY_MIN;

	return e->lfu > minutes ? e->lfu - minutes : 0;
}

/* An access under an LFU policy: decay, then Redis's logarithmic increment
 * (the more accesses a key has, the less likely one more counts). */
void kv_lfu_touch(struct kv_shard *sh, struct kv_entry *e)
{
	unsigned c = kv_lfu_get(sh, e);

	if (c < 255) {
		double base = c > KV_LFU_INIT ? c - KV_LFU_INIT : 0;
		double r = (double)(kv_rand(sh) & 0xffffff) / (double)0x1000000;

		if (r < 1.0 / (base * KV_LFU_LOG_FACTOR + 1))
			c++;
	}
	e->lfu = (uint8_t)c;
}

/* How much e deserves to go (higher first) under policy. */
static uint64_t kv_ev_score(const struct kv_shard *sh, const struct kv_entry *e, int policy)
{
	switch (policy) {
	case KV_ALLKEYS_LRU:
	case KV_VOLATILE_LRU:
		return (uint16_t)(sh->clock - e->atime);
	case KV_ALLKEYS_LFU:
	case KV_VOLATILE_LFU:
		return 255 - kv_lfu_get(sh, e);
	default: /* volatile-ttl: the sooner it expires, the better */
		return UINT64_MAX - (uint64_t)e->expire;
	}
}

static bool kv_volatile(int policy)
{
	return policy == KV_VOLATILE_LRU || policy == KV_VOLATILE_LFU || policy == KV_VOLATILE_TTL ||
	       policy == KV_VOLATILE_RANDOM;
}

/* Up to want entries picked at random: from the expiry heap (volatile),
 * or from a run of buckets of the table (both while it rehashes) from a
 * random one, as Redis's dictGetSomeKeys: want * 10 buckets, or, when
 * those were all empty, on until one is found or the table is done. */
static size_t kv_ev_sample(struct kv_shard *sh, bool vol, struct kv_entry **out, size_t want)
{
	size_t n = 0, i, steps, most;

	if (vol) {
		for (size_t k = 0; k < want && sh->hn; k++)
			out[n++] = sh->heap[kv_rand(sh) % sh->hn];
		return n;
	}
	if (!sh->count || !sh->t[0].b)
		return 0;
	most = (sh->t[1].b && sh->t[1].mask > sh->t[0].mask ? sh->t[1].mask : sh->t[0].mask) + 1;
	i = kv_rand(sh);
	for (steps = 0; n < want && steps < most && (steps < want * 10 || !n); steps++, i++) {
		for (int ti = 0; ti < 2 && n < want; ti++) {
			const struct kv_table *t = &sh->t[ti];

			if (!t->b)
				continue;
			for (struct kv_entry *e = t->b[i & t->mask]; e && n < want; e = e->next)
				out[n++] = e;
		}
	}
	return n;
}

static void kv_ev_clear(struct kv_evpool *p)
{
	p->n = 0;
}

/* Put e in the pool when it beats the worst there (or there is room). */
static void kv_ev_offer(struct kv_evpool *p, const struct kv_entry *e, uint64_t score)
{
	int k;

	for (k = 0; k < p->n; k++) /* already there: its score now */
		if (p->c[k].hash == e->hash && p->c[k].klen == e->klen &&
		    !memcmp(p->c[k].key, e->data, e->klen))
			return;
	if (p->n == KV_EVPOOL && score <= p->c[0].score)
		return;
	if (p->n == KV_EVPOOL) { /* drop the worst, keep its buffer */
		struct kv_evcand worst = p->c[0];

		memmove(&p->c[0], &p->c[1], (KV_EVPOOL - 1) * sizeof(p->c[0]));
		p->c[KV_EVPOOL - 1] = worst;
		p->n--;
	}
	/* ascending by score: find the place, shift the better ones up */
	for (k = p->n; k > 0 && p->c[k - 1].score > score; k--)
		;
	{
		struct kv_evcand slot = p->c[p->n]; /* the free buffer */

		memmove(&p->c[k + 1], &p->c[k], (size_t)(p->n - k) * sizeof(p->c[0]));
		p->c[k] = slot;
	}
	if (p->c[k].cap < e->klen) {
		char *key = realloc(p->c[k].key, e->klen);

		if (!key) { /* no room for the copy: take it out again */
			struct kv_evcand slot = p->c[k];

			memmove(&p->c[k], &p->c[k + 1], (size_t)(p->n - k) * sizeof(p->c[0]));
			p->c[p->n] = slot;
			return;
		}
		p->c[k].key = key;
		p->c[k].cap = e->klen;
	}
	memcpy(p->c[k].key, e->data, e->klen);
	p->c[k].klen = e->klen;
	p->c[k].hash = e->hash;
	p->c[k].score = score;
	p->n++;
}

/* Evict one key by policy: true when one went. */
static bool kv_evict_one(struct kv_shard *sh, int policy, int samples)
{
	struct kv_entry *cand[64], **l;
	bool vol = kv_volatile(policy);
	size_t n;

	if (samples > 64)
		samples = 64;
	if (policy == KV_ALLKEYS_RANDOM || policy == KV_VOLATILE_RANDOM) {
		struct kv_arg k;
		struct kv_entry *e;

		if (!kv_ev_sample(sh, vol, cand, 1))
			return false;
		k = (struct kv_arg){ cand[0]->data, cand[0]->klen };
		e = kv_lookup(sh, cand[0]->hash, &k, &l);
		if (e)
			kv_unlink(sh, l);
		return true; /* gone either way (kv_lookup drops an expired one) */
	}
	if (sh->evpool.policy != policy) {
		kv_ev_clear(&sh->evpool);
		sh->evpool.policy = policy;
	}
	for (int round = 0; round < 16; round++) {
		n = kv_ev_sample(sh, vol, cand, (size_t)samples);
		for (size_t i = 0; i < n; i++)
			kv_ev_offer(&sh->evpool, cand[i], kv_ev_score(sh, cand[i], policy));
		while (sh->evpool.n) { /* the best first; a key gone or changed is dropped */
			struct kv_evcand *best = &sh->evpool.c[sh->evpool.n - 1];
			struct kv_arg k = { best->key, best->klen };
			struct kv_entry *e = kv_lookup(sh, best->hash, &k, &l);

			sh->evpool.n--;
			if (e && (!vol || e->expire)) {
				kv_unlink(sh, l);
				return true;
			}
		}
		if (!n)
			return false;
	}
	return false;
}

/*
 * A write found the shard over its share: evict by the policy until it is
 * under (at most KV_EVICT_MAX keys). false: the write is refused (-OOM):
 * noeviction, or nothing could be evicted.
 */
bool kv_evict(struct kv_shard *sh, uint64_t max)
{
	int policy = atomic_load_explicit(&sh->srv->policy, memory_order_relaxed);
	int samples = atomic_load_explicit(&sh->srv->samples, memory_order_relaxed);
	int freed = 0;

	if (policy == KV_NOEVICTION)
		return false;
	if (samples < 1)
		samples = 5;
	while (sh->mem > max && freed < KV_EVICT_MAX && kv_evict_one(sh, policy, samples))
		freed++;
	KV_INC(sh->st.evicted, (uint64_t)freed);
	return sh->mem <= max || freed > 0;
}

void kv_evpool_free(struct kv_shard *sh)
{
	for (int i = 0; i < KV_EVPOOL; i++) {
		free(sh->evpool.c[i].key);
		sh->evpool.c[i].key = NULL;
		sh->evpool.c[i].cap = 0;
	}
	sh->evpool.n = 0;
}
