/* SPDX-License-Identifier: MIT */
/* tools/kv/store.c - a shard's keyspace: expiry heap, the table; see store.h. */
#include "store.h"

#include "common/timing.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t kv_now_ms(void)
{
	return (int64_t)(corio_now_ns() / 1000000);
}

/* CLOCK_REALTIME in ms: EXAT and PXAT name Unix times, and Redis bounds
 * every expiry argument by the Unix time (its "basetime"), so we do too. */
int64_t kv_unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The CLOCK_MONOTONIC deadline (ms) of an expiry n ms from now, or, when
 * at_unix, at the Unix time n ms (n >= 0); saturates rather than wraps. */
int64_t kv_deadline_ms(long long n, bool at_unix)
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

/* Count delta bytes more (or fewer) held by this shard (hash.c's tables). */
void kv_store_account(struct kv_shard *sh, int64_t delta)
{
	kv_mem(sh, delta);
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
bool kv_set_expire(struct kv_shard *sh, struct kv_entry *e, int64_t when)
{
	kv_snap_pre(sh, e);
	kv_touched(sh, e->hash, e->data, e->klen);
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

uint64_t kv_hash(uint64_t seed, const char *p, size_t n)
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

	/* not while a snapshot walks the tables: an entry moved from a bucket
	 * the walk has not reached to one it has passed would be missed */
	if (sh->snap.active)
		return;
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

/* Free an entry and what its value owns. */
void kv_entry_free(struct kv_entry *e)
{
	if (e->enc == KV_ENC_TABLE)
		kv_hash_table_free(e);
	free(e);
}

/* Take e (at *l) out of the table and the heap, not freed: the caller
 * owns it (RENAME moves it to another shard). */
struct kv_entry *kv_detach(struct kv_shard *sh, struct kv_entry **l)
{
	struct kv_entry *e = *l;

	kv_snap_pre(sh, e);
	kv_touched(sh, e->hash, e->data, e->klen);
	KV_INC(sh->st.dirty, 1);
	*l = e->next;
	if (e->hidx)
		heap_remove(sh, e);
	kv_mem(sh, -(int64_t)(kv_usable(e) + kv_payload_bytes(e)));
	sh->count--;
	KV_SET(sh->st.keys, sh->count);
	return e;
}

void kv_unlink(struct kv_shard *sh, struct kv_entry **l)
{
	kv_entry_free(kv_detach(sh, l));
}

/* The live entry for key, or NULL (an expired one is deleted on the way:
 * the lazy half of expiry). *lp gets the link either way. */
struct kv_entry *kv_lookup(struct kv_shard *sh, uint64_t h, const struct kv_arg *k,
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
struct kv_entry *kv_store(struct kv_shard *sh, struct kv_entry **l, struct kv_entry *old,
				 uint64_t h, const struct kv_arg *k, const void *v, size_t vn,
				 bool keep_ttl)
{
	size_t need = sizeof(struct kv_entry) + k->n + vn;
	struct kv_entry *e;

	if (old)
		kv_snap_pre(sh, old);
	kv_touched(sh, h, k->p, k->n);
	KV_INC(sh->st.dirty, 1);
	if (old && old->type == KV_STR && kv_usable(old) >= need && kv_usable(old) <= 2 * need + 64) {
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
	e->type = KV_STR;
	e->enc = 0;
	e->snap = sh->snap.cur; /* made after any running snapshot's point in time */
	e->lfu = old ? old->lfu : KV_LFU_INIT;
	e->atime = sh->clock;
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
		kv_mem(sh, -(int64_t)(kv_usable(old) + kv_payload_bytes(old)));
		kv_entry_free(old);
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

/*
 * Store src's value (and type, and expiry) under key k at link l (old: the
 * entry there, replaced), consuming src (detached by RENAME or cloned by
 * COPY, perhaps on another shard). NULL without memory (src untouched).
 */
struct kv_entry *kv_adopt(struct kv_shard *sh, struct kv_entry **l, struct kv_entry *old, uint64_t h,
			  const struct kv_arg *k, struct kv_entry *src)
{
	struct kv_arg v = { src->data + src->klen, src->vlen };
	struct kv_entry *e;

	e = kv_store(sh, l, old, h, k, v.p, v.n, false);
	if (!e)
		return NULL;
	e->type = src->type;
	e->enc = src->enc;
	kv_mem(sh, (int64_t)kv_payload_bytes(e)); /* a table moved in with the value */
	if (src->expire)
		kv_set_expire(sh, e, src->expire);
	free(src); /* not kv_entry_free(): its table, if any, is e's now */
	return e;
}

void kv_flush(struct kv_shard *sh)
{
	if (sh->snap.active) /* the running snapshot keeps what was there */
		kv_snap_flush_all(sh);
	kv_watch_touch_all(sh);
	for (int i = 0; i < 2; i++) {
		for (size_t b = 0; sh->t[i].b && b <= sh->t[i].mask; b++) {
			struct kv_entry *e = sh->t[i].b[b];

			while (e) {
				struct kv_entry *next = e->next;

				kv_mem(sh, -(int64_t)(kv_usable(e) + kv_payload_bytes(e)));
				kv_entry_free(e);
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

/* Delete up to KV_SWEEP_BUDGET expired keys: true when more are due. */
static bool kv_sweep_step(struct kv_shard *sh)
{
	int64_t now = kv_now_ms();
	int n = 0;

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
	return sh->hn && sh->heap[0]->expire <= now;
}

/*
 * The active half of expiry: a fiber per shard in the background class
 * (kv_shard_start), woken by the sweep timer at the earliest deadline. One
 * step of KV_SWEEP_BUDGET keys per turn while more are due, so a mass
 * expiry takes the class's share of the CPU, not the connections' turns.
 */
static int kv_sweeper_fn(void *arg)
{
	struct kv_shard *sh = arg;

	while (corio_event_wait(&sh->sweep_ev) == 0) {
		corio_event_reset(&sh->sweep_ev);
		while (kv_sweep_step(sh))
			corio_yield();
		kv_sweep_arm(sh);
	}
	sh->sweeper = false; /* the shard stops */
	return 0;
}

/* The sweep timer: wake the sweeper, or sweep here if it could not start. */
static void kv_sweep_fn(struct corio_timer *t, void *arg, int res)
{
	struct kv_shard *sh = arg;

	(void)t;
	if (res < 0)
		return; /* the shard stops */
	if (sh->sweeper) {
		corio_event_set(&sh->sweep_ev);
		return;
	}
	kv_sweep_step(sh);
	/* more due: the deadline is in the past, so this runs again next turn */
	kv_sweep_arm(sh);
}

/* Every second, on the shard: the access clock. */
static void kv_tick_fn(struct corio_timer *t, void *arg, int res)
{
	struct kv_shard *sh = arg;

	(void)t;
	if (res < 0)
		return;
	sh->clock = (uint16_t)(corio_now_ns() / 1000000000ull);
	kv_tick_rates(sh);
}

/* Start the shard's tick (on its thread). */
void kv_shard_start(struct kv_shard *sh)
{
	struct corio_class_opts bg = { .name = "kv-background", .shares = KV_BG_SHARES };
	struct corio_spawn_opts o = { .name = "kv-sweeper" };
	int cls = corio_class_create(&bg);

	/* no class (cannot happen: one name, created once per shard): the
	 * background work runs in the default class */
	sh->bg_cls = cls > 0 ? (unsigned)cls : 0;
	o.sched_class = sh->bg_cls;
	corio_event_init(&sh->sweep_ev);
	sh->sweeper = corio_spawn(kv_sweeper_fn, sh, &o, NULL) == 0;
	sh->clock = (uint16_t)(corio_now_ns() / 1000000000ull);
	corio_timer_arm_in(&sh->tick, 1000000000ull, 1000000000ull); /* -ENOMEM: clock stands */
}

int kv_shard_init(struct kv_shard *sh, struct kv_server *srv, unsigned id, uint64_t maxmem)
{
	memset(sh, 0, sizeof(*sh));
	sh->srv = srv;
	sh->id = id;
	sh->maxmem = maxmem;
	sh->rnd = corio_now_ns() ^ ((uint64_t)id << 32);
	corio_timer_init(&sh->sweep, kv_sweep_fn, sh);
	corio_timer_init(&sh->tick, kv_tick_fn, sh);
	sh->calls = calloc(kv_nspecs(), sizeof(*sh->calls));
	if (!sh->calls)
		return -ENOMEM;
	return kv_table_alloc(sh, &sh->t[0], KV_TABLE_INIT) ? 0 : -ENOMEM;
}

/* After the runtime has stopped. */
void kv_shard_free(struct kv_shard *sh)
{
	for (int i = 0; i < 2; i++) {
		for (size_t b = 0; sh->t[i].b && b <= sh->t[i].mask; b++) {
			struct kv_entry *e = sh->t[i].b[b];

			while (e) {
				struct kv_entry *next = e->next;

				kv_entry_free(e);
				e = next;
			}
		}
		free(sh->t[i].b);
		sh->t[i].b = NULL;
	}
	free(sh->heap);
	sh->heap = NULL;
	kv_evpool_free(sh);
	free(sh->calls);
	sh->calls = NULL;
	free(sh->subs); /* empty: every connection removed its own */
	sh->subs = NULL;
	for (size_t i = 0; i < sh->nw; i++)
		free(sh->w[i].key);
	free(sh->w);
	sh->w = NULL;
	sh->nw = sh->wcap = 0;
	sh->hn = sh->hcap = 0;
}
