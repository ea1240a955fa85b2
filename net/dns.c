/* SPDX-License-Identifier: MIT */
/*
 * net/dns.c - host names looked up on the shard with c-ares: /etc/hosts
 * and DNS without a thread per lookup (issue 35). net/resolve.c keeps the
 * call, the cache and the work-pool path; this file answers one name.
 *
 * Why not getaddrinfo on the pool: a lookup that DNS never answers holds a
 * pool thread for glibc's whole timeout (attempts x timeout, 10 s by
 * default), so a handful of them fill the pool and every corio_work job
 * and every other lookup waits behind them. Here a lookup is a few
 * datagrams on non-blocking sockets the shard polls; one that is never
 * answered costs a socket and a timer until c-ares gives up, and no
 * thread.
 *
 * The sources, in the order /etc/nsswitch.conf's "hosts:" line lists
 * them (its [action] items are ignored; without the file, glibc's default
 * "dns files"):
 *   files  /etc/hosts, read by c-ares on the shard (a short local read,
 *          as glibc does in-process): a channel with lookups "f", whose
 *          ares_getaddrinfo answers before it returns;
 *   dns    resolv.conf's nameservers, search list, ndots, timeout and
 *          attempts (and LOCALDOMAIN / RES_OPTIONS), read by c-ares: a
 *          channel with lookups "b" whose sockets the shard polls;
 *   other  (mdns, myhostname, resolve, ldap, ...) c-ares cannot ask
 *          them: once the lookup reaches such a source without an answer
 *          from the ones before it, the name goes to getaddrinfo on the
 *          work pool (-ENOSYS from corio__dns_lookup tells resolve.c).
 * Two channels, not one with lookups "fb", so an answer says where it
 * came from: the hosts file has no TTL (it is kept the configured time),
 * a DNS answer has the records' (kept at most the configured time; a TTL
 * of 0 is not kept at all).
 *
 * Polling. c-ares reports its sockets through ARES_OPT_SOCK_STATE_CB. Each
 * socket gets a watcher: a daemon fiber (it does not keep the runtime
 * alive) that waits in corio_poll() for what c-ares asked (readable,
 * writable) and hands the readiness to ares_process_fd(). When c-ares asks
 * for something else, or closes the socket (state 0, 0, just before its
 * close), the watcher is marked stale and cancelled; a stale watcher ends
 * at its next return from the poll, and a poll of a closed fd ends only by
 * the cancel (corio_poll's contract), so a reused fd number is never
 * processed by the old watcher. One ticker fiber runs ares_process_fd with
 * no socket when ares_timeout() says a retry or a timeout is due; a new
 * query kicks it, since its timeout may be the earliest.
 *
 * Sharing. Lookups of one name in flight at once share one query: the
 * first starts it, the others find it on the shard's list and wait for
 * the same event. The query is counted (refs): one for c-ares until its
 * callback runs, one per waiting fiber. A fiber that leaves on its
 * deadline or a cancel drops its reference; the query goes on for the
 * others (or for nobody: c-ares 1.18 cannot cancel one query) and the
 * last reference frees it. Nothing of a fiber's stack is ever lent to
 * c-ares.
 *
 * Order. ares_getaddrinfo sorts the addresses by RFC 6724's rules (it
 * finds each one's source address with a UDP connect, as glibc does), so
 * connects try them in the order getaddrinfo would give (no gai.conf).
 *
 * All of it is the shard's own: one pair of channels per shard, created on
 * its first lookup, destroyed at the part's fini (when no fiber is left).
 */
#include "net/internal.h"

#include <ares.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DNS_FIBER_STACK (64u * 1024)

struct dns_query;

/* One socket c-ares polls, and the fiber that polls it. */
struct dns_watch {
	struct dns_watch *next;
	struct corio__dns *d;
	struct corio_fiber *f;
	int fd;
	unsigned events; /* POLLIN / POLLOUT as c-ares asked */
	bool stale;      /* c-ares closed it or asked for other events */
	bool running;    /* inside ares_process_fd: do not cancel, it checks stale */
};

struct corio__dns {
	struct corio__net *net;
	ares_channel files, dns; /* NULL when the source is not used */
	int init_err;            /* -errno: c-ares could not be set up */
	char order[8];           /* the sources: 'f', 'b', 'o' (other) */
	bool dying;              /* at fini: the state callback does nothing */
	struct dns_watch *watches;
	struct dns_query *inflight;
	struct corio_fiber *ticker;
	struct corio_event kick; /* a query started: the ticker looks again */
	unsigned active;         /* queries c-ares has not called back */
};

struct dns_query {
	struct dns_query *next;
	struct corio__dns *d;
	unsigned refs;
	bool done, listed;
	struct corio_event ev;
	struct corio__res_ans ans;
	char host[];
};

/* ---- /etc/nsswitch.conf ------------------------------------------------------ */

/* The sources of "hosts:" as 'f' (files), 'b' (dns), 'o' (anything else,
 * once: after it, the pool asks everything). */
static void nss_order(char *order, size_t size)
{
	FILE *f = fopen("/etc/nsswitch.conf", "re");
	char line[512];
	size_t k = 0;

	snprintf(order, size, "bf"); /* glibc without the file: dns [!UNAVAIL=return] files */
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *tok, *save = NULL;

		while (*p == ' ' || *p == '\t')
			p++;
		if (strncmp(p, "hosts:", 6))
			continue;
		p += 6;
		k = 0;
		for (tok = strtok_r(p, " \t\r\n", &save); tok && k + 1 < size;
		     tok = strtok_r(NULL, " \t\r\n", &save)) {
			if (*tok == '#')
				break;
			if (*tok == '[' || strchr(tok, ']')) /* an [action] item */
				continue;
			if (!strcmp(tok, "files"))
				order[k++] = 'f';
			else if (!strcmp(tok, "dns"))
				order[k++] = 'b';
			else {
				order[k++] = 'o';
				break;
			}
		}
		order[k] = 0;
	}
	fclose(f);
	if (!k)
		snprintf(order, size, "bf");
}

/* ---- polling c-ares's sockets ------------------------------------------------- */

/* A watcher's end (or its fiber's, when it never ran): unlink, free. */
static void dns_watch_release(void *arg)
{
	struct dns_watch *w = arg;
	struct corio__dns *d = w->d;

	for (struct dns_watch **pp = &d->watches; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	free(w);
	corio__daemon_add(corio__shard(), -1);
}

static int dns_watch_fiber(void *arg)
{
	struct dns_watch *w = arg;
	struct corio__dns *d = w->d;
	ares_channel ch = d->dns;

	while (!w->stale) {
		int r = corio_poll(w->fd, w->events);

		if (w->stale || r == -ECANCELED)
			break;
		if (r < 0) /* the runtime stops, or a poll error: c-ares's timeouts go on */
			break;
		w->running = true;
		ares_process_fd(ch, (r & (POLLIN | POLLERR | POLLHUP)) ? w->fd : ARES_SOCKET_BAD,
				(r & (POLLOUT | POLLERR)) ? w->fd : ARES_SOCKET_BAD);
		w->running = false;
	}
	dns_watch_release(w); /* the record is the fiber's own */
	return 0;
}

/* c-ares: fd now wants reading / writing (both 0: it is about to close). */
static void dns_sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
	struct corio__dns *d = data;
	unsigned ev = (readable ? POLLIN : 0u) | (writable ? POLLOUT : 0u);
	struct corio_spawn_opts o = { .name = "corio-dns-poll", .stack_size = DNS_FIBER_STACK,
				      .release = dns_watch_release };
	struct dns_watch *w;

	if (d->dying)
		return;
	for (w = d->watches; w; w = w->next) {
		if (w->fd != fd || w->stale)
			continue;
		if (w->events == ev)
			return;
		if (w->running && ev) { /* its own process_fd: it polls anew next time */
			w->events = ev;
			return;
		}
		w->stale = true;
		if (!w->running && w->f)
			corio_cancel(w->f);
	}
	if (!ev)
		return;
	w = calloc(1, sizeof(*w));
	if (!w) {
		corio__log("corio: DNS: no memory to poll a resolver socket; its lookups "
			   "end at their timeout");
		return;
	}
	w->d = d;
	w->fd = fd;
	w->events = ev;
	w->next = d->watches;
	d->watches = w;
	if (corio_spawn(dns_watch_fiber, w, &o, &w->f) < 0) {
		d->watches = w->next;
		free(w);
		corio__log("corio: DNS: no fiber to poll a resolver socket; its lookups "
			   "end at their timeout");
		return;
	}
	corio__daemon_add(corio__shard(), 1);
	corio_detach(w->f); /* the handle stays usable until it ends: it unlinks w first */
}

/* The ticker: c-ares's retries and timeouts, while queries are active. */
static int dns_ticker_fiber(void *arg)
{
	struct corio__dns *d = arg;

	for (;;) {
		struct timeval tv, *t;
		struct corio_deadline dl;
		int r;

		corio_event_reset(&d->kick);
		t = d->active ? ares_timeout(d->dns, NULL, &tv) : NULL;
		if (!t) {
			r = corio_event_wait(&d->kick);
		} else {
			uint64_t ns = (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_usec * 1000u;

			corio_timeout_push(&dl, ns ? ns : 1);
			r = corio_event_wait(&d->kick);
			corio_deadline_pop(&dl);
			if (r == -ETIMEDOUT) {
				ares_process_fd(d->dns, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
				r = 0;
			}
		}
		if (r == -ECANCELED || r < 0)
			break;
	}
	d->ticker = NULL;
	corio__daemon_add(corio__shard(), -1);
	return 0;
}

static void dns_ticker_release(void *arg)
{
	struct corio__dns *d = arg;

	d->ticker = NULL;
	corio__daemon_add(corio__shard(), -1);
}

/* ---- set-up --------------------------------------------------------------------- */

static pthread_once_t dns_lib_once = PTHREAD_ONCE_INIT;
static int dns_lib_status;

/* ares_library_init is process-wide and not thread-safe: once, and never
 * undone (c-ares keeps nothing there on Linux). */
static void dns_lib_init(void)
{
	dns_lib_status = ares_library_init(ARES_LIB_INIT_ALL);
}

static int dns_channel(struct corio__dns *d, ares_channel *ch, const char *lookups)
{
	struct ares_options o;
	int mask = ARES_OPT_LOOKUPS;
	int st;

	memset(&o, 0, sizeof(o));
	o.lookups = (char *)lookups;
	if (lookups[0] == 'b') { /* the files channel has no socket to poll */
		mask |= ARES_OPT_SOCK_STATE_CB;
		o.sock_state_cb = dns_sock_state;
		o.sock_state_cb_data = d;
	}
	st = ares_init_options(ch, &o, mask);
	if (st != ARES_SUCCESS) {
		*ch = NULL;
		return corio__error(st == ARES_ENOMEM ? -ENOMEM : -EIO,
				    "corio_resolve: c-ares could not start: %s", ares_strerror(st));
	}
	return 0;
}

/* The shard's resolver, set up on its first lookup; NULL with *err. */
static struct corio__dns *dns_get(struct corio__net *n, int *err)
{
	struct corio__dns *d = n->dns;

	if (d) {
		*err = d->init_err;
		return d->init_err ? NULL : d;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		*err = -ENOMEM;
		return NULL;
	}
	d->net = n;
	n->dns = d;
	corio_event_init(&d->kick);
	pthread_once(&dns_lib_once, dns_lib_init);
	if (dns_lib_status != ARES_SUCCESS) {
		d->init_err = -EIO;
	} else {
		nss_order(d->order, sizeof(d->order));
		if (strchr(d->order, 'f'))
			d->init_err = dns_channel(d, &d->files, "f");
		if (!d->init_err && strchr(d->order, 'b'))
			d->init_err = dns_channel(d, &d->dns, "b");
	}
	*err = d->init_err;
	return d->init_err ? NULL : d;
}

void corio__dns_fini(struct corio__net *n)
{
	struct corio__dns *d = n->dns;

	if (!d)
		return;
	d->dying = true; /* no fiber is left: the state callback must not spawn */
	if (d->files)
		ares_destroy(d->files);
	if (d->dns)
		ares_destroy(d->dns); /* pending queries called back: EDESTRUCTION */
	while (d->watches) { /* watchers that never ran (the shard stopped) */
		struct dns_watch *w = d->watches;

		d->watches = w->next;
		free(w);
	}
	free(d);
	n->dns = NULL;
}

/* ---- one query ------------------------------------------------------------------ */

static int ares_errno(int st)
{
	switch (st) {
	case ARES_ENOTFOUND:
	case ARES_ENODATA:
	case ARES_EBADNAME:
	case ARES_EBADFAMILY:
		return -ENOENT;
	case ARES_ETIMEOUT:
	case ARES_ECONNREFUSED:
	case ARES_ESERVFAIL:
	case ARES_EREFUSED:
		return -EAGAIN;
	case ARES_ENOMEM:
		return -ENOMEM;
	case ARES_EDESTRUCTION:
	case ARES_ECANCELLED:
		return -ECANCELED;
	default:
		return -EIO;
	}
}


/* Fill ans from c-ares's answer: its addresses (in its order), the lowest
 * TTL among them in seconds (UINT32_MAX when none was given). */
static void dns_fill(struct corio__res_ans *ans, int status, const struct ares_addrinfo *ai)
{
	const struct ares_addrinfo_node *p;
	uint32_t ttl = UINT32_MAX;

	memset(ans, 0, sizeof(*ans));
	ans->ttl_s = UINT32_MAX;
	if (status != ARES_SUCCESS) {
		ans->err = ares_errno(status);
		snprintf(ans->msg, sizeof(ans->msg), "%s", ares_strerror(status));
		return;
	}
	for (p = ai ? ai->nodes : NULL; p && ans->naddrs < CORIO_RESOLVE_MAX; p = p->ai_next) {
		bool v4 = p->ai_family == AF_INET && p->ai_addrlen >= sizeof(struct sockaddr_in);
		bool v6 = p->ai_family == AF_INET6 && p->ai_addrlen >= sizeof(struct sockaddr_in6);

		if (!v4 && !v6)
			continue;
		memcpy(&ans->addrs[ans->naddrs++], p->ai_addr,
		       v4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
		if (p->ai_ttl >= 0 && (uint32_t)p->ai_ttl < ttl)
			ttl = (uint32_t)p->ai_ttl;
	}
	if (ai)
		for (const struct ares_addrinfo_cname *c = ai->cnames; c; c = c->next)
			if (c->ttl >= 0 && (uint32_t)c->ttl < ttl)
				ttl = (uint32_t)c->ttl;
	ans->ttl_s = ttl;
	if (!ans->naddrs) {
		ans->err = -ENOENT;
		snprintf(ans->msg, sizeof(ans->msg), "no IPv4 or IPv6 address");
	}
}

static void dns_unlist(struct dns_query *q)
{
	if (!q->listed)
		return;
	for (struct dns_query **pp = &q->d->inflight; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	q->listed = false;
}

static void dns_query_put(struct dns_query *q)
{
	if (--q->refs)
		return;
	dns_unlist(q);
	free(q);
}

static void dns_answered(void *arg, int status, int timeouts, struct ares_addrinfo *ai)
{
	struct dns_query *q = arg;

	(void)timeouts;
	dns_unlist(q); /* a lookup from now on starts a query of its own */
	dns_fill(&q->ans, status, ai);
	if (ai)
		ares_freeaddrinfo(ai);
	q->done = true;
	if (q->d->active)
		q->d->active--;
	corio_event_set(&q->ev);
	dns_query_put(q); /* c-ares's reference */
}

/* A file lookup: c-ares answers before ares_getaddrinfo returns. */
static void file_answered(void *arg, int status, int timeouts, struct ares_addrinfo *ai)
{
	struct corio__res_ans *ans = arg;

	(void)timeouts;
	/* c-ares 1.18 ends a files-only miss with ARES_ECONNREFUSED (no
	 * "next lookup" left): any failure but memory means "not in the file" */
	if (status != ARES_SUCCESS && status != ARES_ENOMEM)
		status = ARES_ENOTFOUND;
	dns_fill(ans, status, ai);
	ans->ttl_s = UINT32_MAX; /* the hosts file has none: the configured one */
	if (ai)
		ares_freeaddrinfo(ai);
}

static const struct ares_addrinfo_hints dns_hints = { .ai_family = AF_UNSPEC,
						      .ai_socktype = SOCK_STREAM };

/* Ask DNS (sharing a query in flight for host): 0 and *ans, or -errno. */
static int dns_ask(struct corio__dns *d, const char *host, struct corio__res_ans *ans,
		   bool *shared)
{
	struct dns_query *q;
	int ret;

	for (q = d->inflight; q; q = q->next)
		if (!strcmp(q->host, host))
			break;
	*shared = q != NULL;
	if (!q) {
		size_t len = strlen(host) + 1;

		q = calloc(1, sizeof(*q) + len);
		if (!q)
			return corio__error(-ENOMEM, "corio_resolve: no memory for a lookup");
		q->d = d;
		q->refs = 2; /* c-ares's and ours */
		corio_event_init(&q->ev);
		memcpy(q->host, host, len);
		q->next = d->inflight;
		d->inflight = q;
		q->listed = true;
		d->active++;
		if (!d->ticker) {
			struct corio_spawn_opts o = { .name = "corio-dns-timer",
						      .stack_size = DNS_FIBER_STACK,
						      .release = dns_ticker_release };

			if (!corio_spawn(dns_ticker_fiber, d, &o, &d->ticker)) {
				corio__daemon_add(corio__shard(), 1);
				corio_detach(d->ticker);
			} /* else no retries: answers still arrive through the polls */
		}
		ares_getaddrinfo(d->dns, host, NULL, &dns_hints, dns_answered, q);
		corio_event_set(&d->kick);
	} else {
		q->refs++;
	}
	if (q->done) { /* answered on the spot (or shared with an answered one) */
		*ans = q->ans;
		dns_query_put(q);
		return 0;
	}
	ret = corio_event_wait(&q->ev);
	if (!ret && q->done)
		*ans = q->ans;
	else if (!ret)
		ret = -EIO;
	dns_query_put(q);
	return ret;
}

int corio__dns_lookup(struct corio__net *n, const char *host, struct corio__res_ans *ans,
		      unsigned *flags)
{
	struct corio__dns *d;
	int err, ret = 0;
	bool shared = false;

	*flags = 0;
	if (corio__net_disabled(n, NO_DNS))
		return -ENOSYS;
	d = dns_get(n, &err);
	if (!d)
		return -ENOSYS; /* c-ares could not start: the pool answers */
	memset(ans, 0, sizeof(*ans));
	ans->err = -ENOENT;
	snprintf(ans->msg, sizeof(ans->msg), "no such name");
	for (const char *s = d->order; *s; s++) {
		if (*s == 'o')
			return -ENOSYS; /* a source c-ares cannot read: getaddrinfo on the pool */
		if (*s == 'f') {
			ans->err = -ENOENT;
			ares_getaddrinfo(d->files, host, NULL, &dns_hints, file_answered, ans);
		} else {
			ret = dns_ask(d, host, ans, &shared);
			if (ret)
				return ret;
			if (shared)
				*flags |= CORIO__RES_SHARED;
			*flags |= CORIO__RES_DNS;
		}
		if (ans->err != -ENOENT)
			return 0; /* an answer, or an error that is not "not here" */
	}
	return 0;
}
