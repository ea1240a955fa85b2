/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/store.h - a shard's keyspace: the table (rehashed incrementally),
 * the expiry heap and its sweep timer, the memory count and the counters.
 * Everything here is touched by the shard's own thread only, except the
 * counters, which INFO reads from any shard.
 */
#ifndef CORIO_KV_STORE_H
#define CORIO_KV_STORE_H

#include <corio.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "out.h"
#include "resp.h"

#define KV_SWEEP_BUDGET 200 /* expired keys deleted per step (one step a turn) */
#ifndef KV_BG_SHARES
#define KV_BG_SHARES 10     /* the background class's shares; connections: 100 */
#endif
#define KV_LFU_INIT 5        /* a new key's LFU counter (Redis's LFU_INIT_VAL) */
#define KV_TABLE_INIT 1024   /* buckets */

/* A key and its value, in one allocation. */
struct kv_entry {
	struct kv_entry *next; /* bucket chain */
	uint64_t hash;
	int64_t expire;        /* CLOCK_MONOTONIC ms; 0: none */
	uint32_t hidx;         /* expiry heap slot + 1; 0: not in the heap */
	uint32_t klen;
	uint32_t vlen;
	uint8_t type : 2;      /* KV_STR, KV_HASH */
	uint8_t enc : 2;       /* KV_HASH: KV_ENC_SMALL (value: packed) or KV_ENC_TABLE */
	uint8_t snap : 1;      /* == the shard's snap.cur once written to the running
				  snapshot (or made after it began); see save.c */
	uint8_t lfu;           /* LFU counter (Redis's logarithmic one) */
	uint16_t atime;        /* last access, the shard's clock in s (wraps: 18 h) */
	char data[];           /* key, then value */
};

enum { KV_STR, KV_HASH };
enum { KV_ENC_SMALL, KV_ENC_TABLE };

struct kv_table {
	struct kv_entry **b;
	size_t mask; /* buckets - 1; b == NULL: none */
};

/* One shard's counters: written by their shard with relaxed stores, read
 * by INFO on any shard (each value untorn; the set is not a snapshot). */
struct kv_counters {
	_Atomic uint64_t keys, expires, used_memory;
	_Atomic uint64_t conns, conns_total, cmds, hits, misses, expired, evicted;
	_Atomic uint64_t remote_ops;   /* ops this shard ran for other shards' connections */
	_Atomic uint64_t remote_calls; /* corio_call/gather this shard's connections made */
	_Atomic uint64_t batches, proto_errors, oom_refused;
	_Atomic uint64_t out_flushes; /* sends made at half the output limit, mid-batch */
	_Atomic uint64_t out_waiting; /* connections waiting in such a send now */
	_Atomic uint64_t out_peak;    /* most bytes one connection's replies held */
	_Atomic uint64_t rejected;    /* connections refused (protected mode) */
	_Atomic uint64_t blocked;     /* clients waiting in WAIT */
	_Atomic uint64_t dirty;       /* changes to the keyspace (rdb_changes_since_last_save) */
	_Atomic uint64_t ops_sec;     /* commands in the last second */
	_Atomic uint64_t net_in, net_out; /* bytes read from and sent to clients */
	_Atomic uint64_t slow_subscribers; /* closed at the output limit (pub/sub) */
	_Atomic uint64_t subs, psubs; /* subscriptions to channels, patterns */
};

#define KV_INC(x, d) atomic_store_explicit(&(x), atomic_load_explicit(&(x), memory_order_relaxed) + (d), \
					    memory_order_relaxed)
#define KV_GET(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define KV_SET(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

struct kv_server;
struct kv_sub;

/* A key some connection WATCHes, kept on the key's shard (across.c). */
struct kv_watch {
	uint64_t hash;
	uint64_t conn;   /* the watcher's connection id */
	char *key;
	uint32_t klen;
	bool dirty;      /* changed since the WATCH */
};

/* A shard's copy of the password (auth.c): read by its connections only. */
#define KV_PASS_MAX 512
struct kv_auth {
	char pass[KV_PASS_MAX]; /* zero-padded */
	uint32_t len;
	bool set;               /* requirepass is set (len > 0) */
};

/* A shard's part of a running snapshot (save.c). */
struct kv_snap {
	bool active;          /* between kv_snap_begin() and the walk's end */
	uint8_t cur;          /* entries whose snap bit differs are in the view, unwritten */
	bool failed;          /* a write failed: the walk only marks what is left */
	struct kv_buf buf;    /* records made, not yet handed to the file */
	int64_t unix_off;     /* expiries: CLOCK_MONOTONIC ms + unix_off = Unix ms */
	uint64_t keys, expires, dirty; /* at the snapshot's point in time */
	uint64_t cow;         /* entries written ahead of the walk, by a change */
};

/* Eviction (evict.c): maxmemory-policy values. */
enum kv_policy { KV_NOEVICTION, KV_ALLKEYS_LRU, KV_VOLATILE_LRU, KV_ALLKEYS_LFU, KV_VOLATILE_LFU,
		 KV_VOLATILE_TTL, KV_ALLKEYS_RANDOM, KV_VOLATILE_RANDOM, KV_NPOLICIES };

/* The eviction pool (evict.c): the best candidates seen, ascending by score. */
#define KV_EVPOOL 16
struct kv_evcand {
	uint64_t score, hash;
	char *key;      /* a copy: the entry may go meanwhile */
	uint32_t klen, cap;
};
struct kv_evpool {
	struct kv_evcand c[KV_EVPOOL];
	int n;
	int policy;     /* the policy its scores are for */
};

struct kv_shard {
	struct kv_server *srv;
	unsigned id;
	struct kv_table t[2]; /* t[1] is the rehash target */
	size_t rehash;        /* next t[0] bucket to move while t[1].b != NULL */
	size_t count;
	struct kv_entry **heap; /* entries with an expiry, min-heap by expire */
	size_t hn, hcap;
	struct corio_timer sweep; /* at the earliest expiry: wakes the sweeper */
	struct corio_event sweep_ev;
	bool sweeper;         /* the sweeper fiber runs (else the timer sweeps) */
	unsigned bg_cls;      /* "kv-background": sweeps and snapshot walks (corio/sched.h) */
	struct corio_timer tick; /* every second: clock, and the per-second rates */
	uint64_t mem;         /* bytes this shard holds (entries, tables, heap) */
	_Atomic uint64_t maxmem; /* this shard's share of maxmemory; 0: none (CONFIG SET: any shard) */
	bool evict_failed;    /* kv_make_room() found nothing to evict */
	struct kv_evpool evpool; /* evict.c */
	uint64_t next_conn_id;
	uint64_t rnd;         /* HRANDFIELD's generator */
	uint64_t tick_cmds;   /* st.cmds at the last tick */
	_Atomic uint64_t *calls; /* [kv_nspecs()]: calls per command (INFO commandstats) */
	uint16_t clock;       /* seconds, wrapping: entries' atime (ticked by the sweep timer) */
	struct kv_auth auth;
	struct kv_watch *w;   /* watched keys of this shard, any connection's */
	size_t nw, wcap;
	struct kv_conn *conns; /* this shard's connections (CLIENT LIST / KILL) */
	struct kv_sub *subs;  /* its connections' subscriptions (pubsub.c) */
	size_t nsubs, subcap;
	struct kv_snap snap;  /* save.c */
	struct kv_counters st;
};

/* Clocks: CLOCK_MONOTONIC ms (expiries), CLOCK_REALTIME ms (Unix times),
 * and the monotonic deadline of an expiry (see store.c). */
int64_t kv_now_ms(void);
int64_t kv_unix_ms(void);
int64_t kv_deadline_ms(long long n, bool at_unix);

uint64_t kv_hash(uint64_t seed, const char *p, size_t n);
struct kv_entry *kv_lookup(struct kv_shard *sh, uint64_t h, const struct kv_arg *k,
			   struct kv_entry ***lp);
struct kv_entry *kv_store(struct kv_shard *sh, struct kv_entry **l, struct kv_entry *old,
			  uint64_t h, const struct kv_arg *k, const void *v, size_t vn,
			  bool keep_ttl);
void kv_unlink(struct kv_shard *sh, struct kv_entry **l);
bool kv_set_expire(struct kv_shard *sh, struct kv_entry *e, int64_t when);
void kv_flush(struct kv_shard *sh);
size_t kv_payload_bytes(const struct kv_entry *e);
void kv_entry_free(struct kv_entry *e);
void kv_store_account(struct kv_shard *sh, int64_t delta);
/* hash.c: a hash's table (KV_ENC_TABLE) freed; any entry cloned, detached
 * (the table too), for COPY */
void kv_hash_table_free(struct kv_entry *e);
struct kv_entry *kv_entry_clone(const struct kv_entry *e);
struct kv_entry *kv_detach(struct kv_shard *sh, struct kv_entry **l);
struct kv_entry *kv_adopt(struct kv_shard *sh, struct kv_entry **l, struct kv_entry *old, uint64_t h,
			  const struct kv_arg *k, struct kv_entry *src);
size_t kv_hash_nfields(const struct kv_entry *e);
void kv_hash_walk(const struct kv_entry *e, void (*fn)(void *arg, const char *f, size_t fn,
						       const char *v, size_t vn), void *arg);
struct kv_entry *kv_hash_restore(struct kv_shard *sh, uint64_t h, const struct kv_arg *k,
				 const struct kv_arg *fv, size_t n);
/* save.c: write e to the running snapshot before it changes (copy-on-write
 * of the entry's bytes into the snapshot's stream), when it is in the view
 * and not written yet. Every change to an entry calls this first. */
void kv_snap_cow(struct kv_shard *sh, struct kv_entry *e);
static inline void kv_snap_pre(struct kv_shard *sh, struct kv_entry *e)
{
	if (__builtin_expect(e->snap != sh->snap.cur, 0)) /* the hot path pays this test only */
		kv_snap_cow(sh, e);
}
void kv_snap_flush_all(struct kv_shard *sh);
void kv_evpool_free(struct kv_shard *sh); /* evict.c */
void kv_watch_touch(struct kv_shard *sh, uint64_t h, const char *k, size_t kn);
void kv_watch_touch_all(struct kv_shard *sh);
static inline void kv_touched(struct kv_shard *sh, uint64_t h, const char *k, size_t kn)
{
	if (sh->nw) /* the hot path pays this test only */
		kv_watch_touch(sh, h, k, kn);
}
int kv_shard_init(struct kv_shard *sh, struct kv_server *srv, unsigned id, uint64_t maxmem);
void kv_shard_start(struct kv_shard *sh);
size_t kv_nspecs(void); /* table.c: the commands served */
void kv_tick_rates(struct kv_shard *sh); /* reply.c: INFO's per-second rates */
void kv_shard_free(struct kv_shard *sh);

#endif
