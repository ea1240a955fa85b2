/* SPDX-License-Identifier: MIT */
/*
 * tls/shard.c - the TLS part of a shard: its counters, the room for its
 * client session cache (tls/cache.c), the leak census of sessions, and the
 * kTLS probe.
 *
 * This file names no OpenSSL call, and must not: ctl puts the part in
 * every runtime's table, so whatever it references is linked into every
 * program, and a program that never makes a TLS session must link without
 * -lssl -lcrypto (the README's build line). What frees OpenSSL objects at
 * the shard's end is a hook, p->drop, which the first session made on the
 * shard sets (corio__tls_new): no session, nothing of OpenSSL to free.
 */
#include "tls/internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef TCP_ULP
#define TCP_ULP 31
#endif

int corio_tls_ktls_probe(void)
{
	static atomic_int answer = -1;
	int a = atomic_load_explicit(&answer, memory_order_relaxed);
	int fd;

	if (a >= 0)
		return a;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return corio__error(-errno, "corio_tls_ktls_probe: socket: %s", strerror(errno));
	/* The ULP is looked up (and its module loaded) before the socket's
	 * state is checked: ENOENT means no tls ULP, ENOTCONN that it exists
	 * and wants a connected socket. */
	if (setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls")) == 0 || errno == ENOTCONN)
		a = 1;
	else if (errno == ENOENT)
		a = 0;
	else
		a = corio__error(-errno, "corio_tls_ktls_probe: TCP_ULP: %s", strerror(errno));
	close(fd);
	if (a >= 0)
		atomic_store_explicit(&answer, a, memory_order_relaxed);
	return a;
}

/* ---- the part --------------------------------------------------------------- */

static int tls_init(struct corio__shard *s)
{
	struct corio__tls_part *p = calloc(1, sizeof(*p));

	if (!p || !(p->cache = calloc(CORIO__TLS_CACHE, sizeof(*p->cache)))) {
		free(p);
		return -ENOMEM;
	}
	corio__list_init(&p->live);
	p->stats.ktls = corio_tls_ktls_probe() == 1;
	__atomic_store_n(&s->parts[CORIO__PART_TLS], p, __ATOMIC_RELEASE);
	return 0;
}

static void tls_fini(struct corio__shard *s)
{
	struct corio__tls_part *p = s->parts[CORIO__PART_TLS];

	if (!p)
		return;
	/* Sessions nobody closed: counted for the census (which fails
	 * corio_wait), and freed so their memory does not leak as well. */
	p->live_at_fini = p->stats.sessions_live;
	if (p->drop)
		p->drop(p);
	free(p->cache);
	p->cache = NULL;
}

static void tls_release(struct corio__shard *s)
{
	free(s->parts[CORIO__PART_TLS]);
	s->parts[CORIO__PART_TLS] = NULL;
}

/* Every session made on this shard was closed (corio_tls_close). */
static unsigned tls_census(struct corio__shard *s, char *buf, size_t len)
{
	struct corio__tls_part *p = s->parts[CORIO__PART_TLS];

	if (p->live_at_fini)
		snprintf(buf, len, "%llu TLS sessions never closed",
			 (unsigned long long)p->live_at_fini);
	return (unsigned)p->live_at_fini;
}

const struct corio__part corio__tls_part = {
	.name = "tls",
	.init = tls_init,
	.fini = tls_fini,
	.release = tls_release,
	.census = tls_census,
};

int corio_tls_stats_get(struct corio_rt *rt, unsigned shard, struct corio_tls_stats *out)
{
	const struct corio__tls_part *p;

	rt = corio__rt_or_own(rt);
	if (!rt)
		return corio__error(-EPERM, "corio_tls_stats_get: rt is NULL off a shard");
	if (!out || shard >= rt->nshards || !rt->shards[shard])
		return corio__error(-EINVAL, "corio_tls_stats_get: %s",
				    out ? "no such shard" : "out is NULL");
	p = __atomic_load_n(&rt->shards[shard]->parts[CORIO__PART_TLS], __ATOMIC_ACQUIRE);
	if (!p) {
		memset(out, 0, sizeof(*out));
		return 0;
	}
	corio__stats_copy(out, &p->stats, sizeof(*out));
	return 0;
}
