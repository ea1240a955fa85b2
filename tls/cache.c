/* SPDX-License-Identifier: MIT */
/*
 * tls/cache.c - the per-shard client session cache, and what frees a
 * shard's OpenSSL objects at its end (the part's drop hook).
 *
 * The client cache is per shard, so it needs no lock: CORIO__TLS_CACHE
 * entries keyed by (context id, "host:port"), least recently used out.
 * A session is taken out when offered (TLS 1.3 tickets are meant for one
 * use); the handshake's new tickets put a fresh one back. Context ids are
 * never reused in a process, so entries of a freed context only age out.
 *
 * The part itself (tls/shard.c) names no OpenSSL call, so a program that
 * uses no TLS links without libssl; corio__tls_new sets p->drop to
 * corio__tls_part_drop on the first session of a shard.
 */
#include "tls/internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

SSL_SESSION *corio__tls_cache_get(struct corio__tls_part *p, uint64_t ctx_id, const char *key)
{
	for (unsigned i = 0; p && i < CORIO__TLS_CACHE; i++) {
		struct corio__tls_cache_ent *e = &p->cache[i];
		SSL_SESSION *s = e->sess;

		if (!s || e->ctx_id != ctx_id || strcmp(e->key, key) != 0)
			continue;
		e->sess = NULL;
		/* an expired session would make a full handshake anyway */
		if (SSL_SESSION_get_time(s) + SSL_SESSION_get_timeout(s) < (long)time(NULL)) {
			SSL_SESSION_free(s);
			return NULL;
		}
		return s;
	}
	return NULL;
}

void corio__tls_cache_put(struct corio__tls_part *p, uint64_t ctx_id, const char *key,
			  SSL_SESSION *sess)
{
	struct corio__tls_cache_ent *victim = &p->cache[0];

	for (unsigned i = 0; i < CORIO__TLS_CACHE; i++) {
		struct corio__tls_cache_ent *e = &p->cache[i];

		if (e->sess && e->ctx_id == ctx_id && strcmp(e->key, key) == 0) {
			victim = e; /* a newer ticket for the same peer replaces it */
			break;
		}
		if (!e->sess || (victim->sess && e->used < victim->used))
			victim = e;
	}
	if (victim->sess)
		SSL_SESSION_free(victim->sess);
	victim->sess = sess;
	victim->ctx_id = ctx_id;
	victim->used = ++p->cache_tick;
	snprintf(victim->key, sizeof(victim->key), "%s", key);
}

/* The part's drop hook: free the sessions nobody closed (tls_fini has
 * counted them for the census) and the cached client sessions. */
void corio__tls_part_drop(struct corio__tls_part *p)
{
	while (!corio__list_empty(&p->live))
		corio__tls_free(corio__list_entry(p->live.next, struct corio_tls, link));
	for (unsigned i = 0; p->cache && i < CORIO__TLS_CACHE; i++) {
		SSL_SESSION_free(p->cache[i].sess);
		p->cache[i].sess = NULL;
	}
}
