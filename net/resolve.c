/* SPDX-License-Identifier: MIT */
/*
 * net/resolve.c - host names: corio_resolve() and the name step of
 * corio_tcp_connect() / corio_udp_connect().
 *
 * getaddrinfo(3) blocks (files, DNS, whatever nsswitch.conf lists), so it
 * runs on the blocking-work pool (core/work.c) as one job per lookup, and
 * the fiber parks: the shard keeps serving. Using the system resolver, not
 * a DNS client of our own, is what makes /etc/hosts, nsswitch and
 * gai.conf's address order hold. The job owns its memory (a malloc'd
 * record holding the name and the answer): a fiber that leaves on its
 * deadline or a cancel gives it to the pool, whose release frees it when
 * getaddrinfo returns (corio_work's contract), so nothing of the fiber's
 * stack is ever lent to the pool thread.
 *
 * Each shard keeps a cache of answers (no locks: a shard's own), created
 * on its first lookup: RES_ENTRIES names, the oldest stored evicted first.
 * An answer lives cfg.resolve_ttl_ms (30 s); a negative one ("no such
 * name") at most RES_NEG_TTL_MS, so a typo does not cost a lookup per
 * call, and a name that appears is seen soon. Failures that are not an
 * answer (the resolver could not be reached, EAI_AGAIN) are not cached.
 * The cache ignores the TTLs DNS gives (getaddrinfo does not report them):
 * a fixed TTL is the price of going through the system resolver.
 * Two fibers that miss on one name at once both ask the resolver.
 */
#include "net/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RES_ENTRIES        256
#define RES_TTL_DEFAULT_MS 30000u
#define RES_NEG_TTL_MS     5000u
#define RES_HOST_MAX       255 /* a DNS name's limit (RFC 1035: 253 + dots) */

_Static_assert(CORIO_RESOLVE_MAX <= 64, "addresses per name");

/* One cached name: its addresses with port 0, or a negative answer. */
struct res_entry {
	uint64_t stored_ns, expires_ns;
	uint32_t hash;
	int err;          /* 0, or the negative answer (-ENOENT) */
	char msg[96];     /* gai_strerror's text of a negative answer */
	unsigned naddrs;
	union corio__res_addr addrs[CORIO_RESOLVE_MAX];
	char host[];
};

struct corio__resolve {
	struct res_entry *e[RES_ENTRIES];
};

/* A lookup on the pool: the name in, the answer out. */
struct res_job {
	int gai, sys; /* getaddrinfo's result; errno for EAI_SYSTEM */
	struct corio__res_ans ans;
	char host[RES_HOST_MAX + 1];
};

/* ---- the pool side ------------------------------------------------------------ */

/* On a pool thread: touches nothing but the job. */
static intptr_t res_job_fn(void *arg)
{
	struct res_job *j = arg;
	struct corio__res_ans *a = &j->ans;
	/* No AI_ADDRCONFIG: it drops ::1 on hosts whose only IPv6 address is
	 * the loopback; an address the host cannot reach fails its connect at
	 * once (ENETUNREACH) and the next one is tried. */
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *p;

	j->gai = getaddrinfo(j->host, NULL, &hints, &res);
	j->sys = j->gai == EAI_SYSTEM ? errno : 0;
	if (j->gai)
		return 0;
	for (p = res; p && a->naddrs < CORIO_RESOLVE_MAX; p = p->ai_next) {
		bool v4 = p->ai_family == AF_INET && p->ai_addrlen >= sizeof(struct sockaddr_in);
		bool v6 = p->ai_family == AF_INET6 && p->ai_addrlen >= sizeof(struct sockaddr_in6);

		if (v4 || v6) {
			memset(&a->addrs[a->naddrs], 0, sizeof(a->addrs[0]));
			memcpy(&a->addrs[a->naddrs++], p->ai_addr,
			       v4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
		}
	}
	freeaddrinfo(res);
	if (!a->naddrs)
		j->gai = EAI_NONAME; /* names of other families only */
	return 0;
}

static void res_job_free(void *arg)
{
	free(arg);
}

/*
 * getaddrinfo's EAI_* as -errno (net.h documents it): the name has no
 * address -ENOENT (the negative answer, cached); the resolver could not
 * answer now -EAGAIN; out of memory -ENOMEM; a system error its errno;
 * everything else (EAI_FAIL, ...) -EIO.
 */
static int gai_errno(int gai, int sys)
{
	switch (gai) {
	case EAI_NONAME:
#ifdef EAI_NODATA
	case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
	case EAI_ADDRFAMILY:
#endif
		return -ENOENT;
	case EAI_AGAIN:
		return -EAGAIN;
	case EAI_MEMORY:
		return -ENOMEM;
	case EAI_SYSTEM:
		return sys > 0 ? -sys : -EIO;
	default:
		return -EIO;
	}
}

/* ---- the cache (the shard's own) ------------------------------------------------ */

static uint32_t res_hash(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

static int res_slot(const struct corio__resolve *c, const char *host, uint32_t h)
{
	for (int i = 0; i < RES_ENTRIES; i++)
		if (c->e[i] && c->e[i]->hash == h && !strcmp(c->e[i]->host, host))
			return i;
	return -1;
}

/* Where a new answer goes: its old entry, an empty slot, or the oldest. */
static int res_victim(const struct corio__resolve *c, const char *host, uint32_t h)
{
	int i = res_slot(c, host, h), old = 0;

	if (i >= 0)
		return i;
	for (i = 0; i < RES_ENTRIES; i++) {
		if (!c->e[i])
			return i;
		if (c->e[i]->stored_ns < c->e[old]->stored_ns)
			old = i;
	}
	return old;
}

static unsigned res_ttl_ms(const struct corio__net *n, bool negative)
{
	unsigned ttl = n->shard->rt->cfg.resolve_ttl_ms;

	if (!ttl)
		ttl = RES_TTL_DEFAULT_MS;
	return negative && ttl > RES_NEG_TTL_MS ? RES_NEG_TTL_MS : ttl;
}

/* Keep host's answer (or its negative answer) ttl_ms. Best effort:
 * without memory the next call asks again. */
static void res_store(struct corio__net *n, const char *host, const struct corio__res_ans *a,
		      uint64_t ttl_ms, uint32_t h)
{
	size_t hlen = strlen(host);
	struct res_entry *e;
	int i;

	if (!ttl_ms)
		return; /* a TTL of 0: not to be kept */
	if (!n->resolve && !(n->resolve = calloc(1, sizeof(*n->resolve))))
		return;
	e = malloc(sizeof(*e) + hlen + 1);
	if (!e)
		return;
	e->stored_ns = corio_now_ns();
	e->expires_ns = e->stored_ns + corio__ns_mul_sat(ttl_ms, CORIO__NS_PER_MS);
	e->hash = h;
	e->err = a->err;
	snprintf(e->msg, sizeof(e->msg), "%s", a->err ? a->msg : "");
	e->naddrs = a->naddrs;
	memcpy(e->addrs, a->addrs, sizeof(e->addrs));
	memcpy(e->host, host, hlen + 1);
	i = res_victim(n->resolve, host, h);
	free(n->resolve->e[i]);
	n->resolve->e[i] = e;
}

void corio__resolve_fini(struct corio__net *n)
{
	if (!n->resolve)
		return;
	for (int i = 0; i < RES_ENTRIES; i++)
		free(n->resolve->e[i]);
	free(n->resolve);
	n->resolve = NULL;
}

/* ---- the call ------------------------------------------------------------------ */

static unsigned res_copy(const union corio__res_addr *a, unsigned na, uint16_t port,
			 struct sockaddr_storage *out, unsigned max)
{
	unsigned k = na < max ? na : max;

	for (unsigned i = 0; i < k; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		memcpy(&out[i], &a[i], sizeof(a[i]));
		if (a[i].sa.sa_family == AF_INET)
			((struct sockaddr_in *)&out[i])->sin_port = htons(port);
		else
			((struct sockaddr_in6 *)&out[i])->sin6_port = htons(port);
	}
	return k;
}

/* A cached answer for host, still fresh: its count, its error, or 0 (none). */
static int res_cached(struct corio__net *n, const char *who, const char *host, uint32_t h,
		      uint16_t port, struct sockaddr_storage *out, unsigned max)
{
	struct res_entry *e;
	int i;

	if (!n->resolve || (i = res_slot(n->resolve, host, h)) < 0)
		return 0;
	e = n->resolve->e[i];
	if (corio_now_ns() >= e->expires_ns)
		return 0;
	CORIO__STAT_ADD(n->stats.resolve_hits, 1);
	if (e->err) {
		CORIO__STAT_ADD(n->stats.resolve_failed, 1);
		return corio__error(e->err, "%s: cannot resolve \"%s\": %s (cached)", who, host,
				    e->msg);
	}
	return (int)res_copy(e->addrs, e->naddrs, port, out, max);
}

/*
 * A host name as resolvers take it: letters, digits, '-', '_' and dots
 * between labels of 1..63 bytes (a trailing dot allowed). Anything else is
 * answered "no such name" without asking anyone, as glibc's resolver
 * refuses such a name before it sends a query (res_hnok).
 */
static bool res_valid_name(const char *host)
{
	size_t label = 0;

	for (const char *c = host; *c; c++) {
		if (*c == '.') {
			if (!label)
				return false;
			label = 0;
			continue;
		}
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'))
			return false;
		if (++label > 63)
			return false;
	}
	return true;
}

/* getaddrinfo on the work pool: 0 and *a, or -errno before it answered. */
static int res_pool(struct corio__net *n, const char *who, const char *host,
		    struct corio__res_ans *a)
{
	struct res_job *j = calloc(1, sizeof(*j));
	int ret;

	if (!j)
		return corio__error(-ENOMEM, "%s: no memory for a name lookup", who);
	memcpy(j->host, host, strlen(host) + 1);
	CORIO__STAT_ADD(n->stats.resolve_pool, 1);
	ret = corio__work_run(res_job_fn, j, res_job_free, NULL, false);
	if (ret) { /* j is the pool's now: its release frees it */
		if (ret == -EAGAIN || ret == -ENOMEM) {
			char why[160]; /* the pool's reason; not formatted into itself */

			snprintf(why, sizeof(why), "%s", corio_last_error());
			return corio__error(ret, "%s: cannot resolve \"%s\": %s", who, host, why);
		}
		return ret;
	}
	*a = j->ans;
	a->ttl_s = UINT32_MAX;
	if (j->gai) {
		a->err = gai_errno(j->gai, j->sys);
		snprintf(a->msg, sizeof(a->msg), "%s",
			 j->gai == EAI_SYSTEM ? strerror(j->sys) : gai_strerror(j->gai));
	}
	free(j);
	return 0;
}

/* Resolve a name (not numeric) through the cache, else c-ares on the
 * shard, else (a source c-ares cannot read) getaddrinfo on the pool. */
static int res_name(struct corio__net *n, const char *who, const char *host, uint16_t port,
		    struct sockaddr_storage *out, unsigned max)
{
	uint32_t h = res_hash(host);
	struct corio__res_ans *a;
	struct in_addr a4;
	unsigned flags = 0;
	uint64_t ttl_ms;
	int ret = corio__may_block(who); /* cancellation and the deadline first */

	if (!ret)
		ret = res_cached(n, who, host, h, port, out, max);
	if (ret)
		return ret;
	a = malloc(sizeof(*a)); /* not on the fiber's stack: 1 KiB */
	if (!a)
		return corio__error(-ENOMEM, "%s: no memory for a name lookup", who);
	memset(a, 0, sizeof(*a));
	a->ttl_s = UINT32_MAX;
	CORIO__STAT_ADD(n->stats.resolve_misses, 1);
	if (inet_aton(host, &a4)) {
		/* "127.1", "10.1.2" and other inet_aton forms getaddrinfo takes
		 * as numbers (corio's numeric form is the dotted quad) */
		a->naddrs = 1;
		a->addrs[0].in.sin_family = AF_INET;
		a->addrs[0].in.sin_addr = a4;
		ret = 0;
	} else if (!res_valid_name(host)) {
		a->err = -ENOENT;
		snprintf(a->msg, sizeof(a->msg), "not a valid host name");
		ret = 0;
	} else {
		ret = corio__dns_lookup(n, host, a, &flags);
		if (ret == -ENOSYS)
			ret = res_pool(n, who, host, a);
	}
	if (flags & CORIO__RES_SHARED)
		CORIO__STAT_ADD(n->stats.resolve_shared, 1);
	if (ret) {
		if (ret != -ECANCELED && ret != -ETIMEDOUT)
			CORIO__STAT_ADD(n->stats.resolve_failed, 1);
		free(a);
		return ret;
	}
	ttl_ms = res_ttl_ms(n, a->err != 0);
	if (!a->err && a->ttl_s != UINT32_MAX && (uint64_t)a->ttl_s * 1000u < ttl_ms)
		ttl_ms = (uint64_t)a->ttl_s * 1000u; /* the records' TTL, capped by the setting */
	if (a->err) {
		ret = a->err;
		CORIO__STAT_ADD(n->stats.resolve_failed, 1);
		if (ret == -ENOENT)
			res_store(n, host, a, ttl_ms, h);
		corio__error(ret, "%s: cannot resolve \"%s\": %s", who, host, a->msg);
	} else {
		res_store(n, host, a, ttl_ms, h);
		ret = (int)res_copy(a->addrs, a->naddrs, port, out, max);
	}
	free(a);
	return ret;
}

/* The port of "host:port": 0..65535, decimal. */
static int res_port(const char *who, const char *hp, const char *p, uint16_t *port)
{
	unsigned long v = 0;

	if (!*p)
		return corio__error(-EINVAL, "%s: \"%s\": missing port after ':'", who, hp);
	for (const char *c = p; *c; c++) {
		if (*c < '0' || *c > '9')
			return corio__error(-EINVAL, "%s: \"%s\": port \"%s\" is not a number", who,
					    hp, p);
		v = v * 10 + (unsigned long)(*c - '0');
		if (v > 65535)
			return corio__error(-EINVAL, "%s: \"%s\": port %s is above 65535", who, hp,
					    p);
	}
	*port = (uint16_t)v;
	return 0;
}

int corio__resolve_hp(const char *who, const char *hp, struct sockaddr_storage *out,
		      unsigned max)
{
	char host[RES_HOST_MAX + 1];
	struct in_addr a4;
	const char *colon;
	struct corio__net *n;
	socklen_t len;
	uint16_t port = 0;
	size_t hlen;
	int ret;

	if (!hp || !out || !max)
		return corio__error(-EINVAL, "%s: %s", who,
				    !hp ? "host_port is NULL" : !out ? "addrs is NULL" : "max is 0");
	if (hp[0] == '[') /* an IPv6 literal: numeric */
		return corio_addr_parse(hp, out, &len) ?: 1;
	colon = strrchr(hp, ':');
	if (!colon)
		return corio__error(-EINVAL, "%s: \"%s\": expected host:port", who, hp);
	if (memchr(hp, ':', (size_t)(colon - hp)))
		return corio__error(-EINVAL, "%s: \"%s\": an IPv6 address needs brackets: "
				    "[addr]:port", who, hp);
	hlen = (size_t)(colon - hp);
	if (!hlen || (hlen == 1 && hp[0] == '*'))
		return corio__error(-EINVAL, "%s: \"%s\": no host (an empty or \"*\" host is "
				    "for listening)", who, hp);
	if (hlen > RES_HOST_MAX)
		return corio__error(-EINVAL, "%s: the host name is %zu bytes, at most %d", who,
				    hlen, RES_HOST_MAX);
	ret = res_port(who, hp, colon + 1, &port);
	if (ret)
		return ret;
	if (corio__ipv4_parse(hp, hlen, &a4)) { /* numeric: no lookup, any thread */
		struct sockaddr_in *sin = (struct sockaddr_in *)out;

		/* as corio_addr_parse fills it, without reading hp again: this
		 * runs on every corio_tcp_connect to a numeric address */
		memset(out, 0, sizeof(*out));
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		sin->sin_addr = a4;
		return 1;
	}
	memcpy(host, hp, hlen);
	host[hlen] = 0;
	n = corio__net();
	if (!n)
		return corio__misuse(-EPERM, who, "a host name is resolved on a shard, in a fiber");
	return res_name(n, who, host, port, out, max);
}

int corio_resolve(const char *host_port, struct sockaddr_storage *addrs, unsigned max)
{
	return corio__resolve_hp("corio_resolve", host_port, addrs, max);
}

socklen_t corio__addr_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}
