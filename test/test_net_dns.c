/* SPDX-License-Identifier: MIT */
/*
 * Networking, names through DNS (net/dns.c): lookups against a DNS server
 * the test runs, which never answers or answers late, each in a forked
 * child with a private mount and network namespace: a resolv.conf (and
 * nsswitch.conf, hosts) of the test's own are bind-mounted over /etc's,
 * and the server listens on 127.0.0.1:53 of the child's own loopback. The
 * machine's files and ports stay untouched. Without namespaces (unshare
 * refused) each test is skipped, saying so.
 *
 * What they hold: lookups DNS never answers end at their deadline (or
 * cancel) and leave the work pool and the hosts file's names free; lookups
 * of one name at once share one query; answers are kept for their TTL,
 * capped by resolve_ttl_ms, and a TTL of 0 is not kept; the search list is
 * used; NXDOMAIN is -ENOENT; addresses come in getaddrinfo's order; a
 * source nsswitch.conf lists that c-ares cannot read sends the name to
 * getaddrinfo on the pool.
 */
#include "net_helpers.h"

#include <net/if.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <time.h>

/* ---- the DNS server (a thread of the child) ------------------------------------ */

#define DS_NAMES 64

struct ds_count {
	char name[128];
	unsigned type;
	unsigned n;
};

static struct {
	int fd;
	bool silent;
	unsigned delay_ms;
	pthread_mutex_t lock;
	struct ds_count c[DS_NAMES];
	unsigned queries;
} ds = { .fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER };

/* Queries the server got for name (type 1: A, 28: AAAA; 0: either). */
static unsigned ds_count(const char *name, unsigned type)
{
	unsigned n = 0;

	pthread_mutex_lock(&ds.lock);
	for (int i = 0; i < DS_NAMES; i++)
		if (!strcmp(ds.c[i].name, name) && (!type || ds.c[i].type == type))
			n += ds.c[i].n;
	pthread_mutex_unlock(&ds.lock);
	return n;
}

static void ds_note(const char *name, unsigned type)
{
	pthread_mutex_lock(&ds.lock);
	ds.queries++;
	for (int i = 0; i < DS_NAMES; i++) {
		if (!ds.c[i].name[0])
			snprintf(ds.c[i].name, sizeof(ds.c[i].name), "%s", name), ds.c[i].type = type;
		if (!strcmp(ds.c[i].name, name) && ds.c[i].type == type) {
			ds.c[i].n++;
			break;
		}
	}
	pthread_mutex_unlock(&ds.lock);
}

/* The address the server gives name: 10.53.x.y from its hash. */
static uint32_t ds_addr(const char *name)
{
	uint32_t h = 2166136261u;

	for (const char *s = name; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return 0x0a350000u | (h & 0xfffe) | 1u;
}

/* The TTL the server gives name: by its first label. */
static uint32_t ds_ttl(const char *name)
{
	if (!strncmp(name, "zero.", 5))
		return 0;
	if (!strncmp(name, "one.", 4))
		return 1;
	return 3600;
}

/* Answer q (len bytes) into r: the length, or 0 to say nothing. */
static size_t ds_answer(const uint8_t *q, size_t len, uint8_t *r, size_t rsize)
{
	char name[128];
	size_t k = 0, p = 12, qend;
	unsigned type, an = 0;
	uint32_t ttl;
	bool nx;

	if (len < 17 || len > rsize - 64)
		return 0;
	while (p < len && q[p]) {
		unsigned l = q[p];

		if (l > 63 || p + 1 + l >= len || k + l + 2 >= sizeof(name))
			return 0;
		if (k)
			name[k++] = '.';
		for (unsigned i = 0; i < l; i++)
			name[k++] = (char)(q[p + 1 + i] | 0x20);
		p += 1 + l;
	}
	name[k] = 0;
	if (p + 5 > len)
		return 0;
	type = (unsigned)q[p + 1] << 8 | q[p + 2];
	qend = p + 5;
	ds_note(name, type);
	if (ds.silent)
		return 0;
	nx = !strncmp(name, "nx", 2) || !strstr(name, ".test");
	ttl = ds_ttl(name);
	memcpy(r, q, qend);
	r[2] = 0x81 | (q[2] & 0x01); /* QR, opcode 0, RD as asked */
	r[3] = nx ? 0x83 : 0x80;     /* RA; NXDOMAIN or NOERROR */
	r[6] = r[7] = r[8] = r[9] = r[10] = r[11] = 0;
	p = qend;
	if (!nx && (type == 1 || (type == 28 && !strncmp(name, "dual.", 5)))) {
		uint32_t a = htonl(type == 1 ? (strncmp(name, "dual.", 5) ? ds_addr(name) : 0x7f000001u) : 0);
		uint8_t rr[12] = { 0xc0, 0x0c, 0, (uint8_t)type, 0, 1, (uint8_t)(ttl >> 24),
				   (uint8_t)(ttl >> 16), (uint8_t)(ttl >> 8), (uint8_t)ttl, 0,
				   type == 1 ? 4 : 16 };

		memcpy(r + p, rr, sizeof(rr));
		p += sizeof(rr);
		if (type == 1) {
			memcpy(r + p, &a, 4);
			p += 4;
		} else {
			memcpy(r + p, &in6addr_loopback, 16);
			p += 16;
		}
		an = 1;
	}
	r[7] = (uint8_t)an;
	return p;
}

struct ds_pending {
	uint64_t due_ns;
	struct sockaddr_in to;
	size_t len;
	uint8_t buf[512];
};

static uint64_t ds_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Answers every query delay_ms after it came (or never), in order. */
static void *ds_thread(void *arg)
{
	static struct ds_pending pend[64];
	unsigned head = 0, tail = 0;

	(void)arg;
	for (;;) {
		int timeout = -1;
		struct pollfd pfd = { .fd = ds.fd, .events = POLLIN };

		while (head != tail && pend[head % 64].due_ns <= ds_now()) {
			struct ds_pending *pp = &pend[head++ % 64];

			sendto(ds.fd, pp->buf, pp->len, 0, (struct sockaddr *)&pp->to, sizeof(pp->to));
		}
		if (head != tail)
			timeout = (int)((pend[head % 64].due_ns - ds_now()) / 1000000u) + 1;
		if (poll(&pfd, 1, timeout) > 0) {
			uint8_t q[512];
			struct sockaddr_in from;
			socklen_t fl = sizeof(from);
			ssize_t n = recvfrom(ds.fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
			struct ds_pending *pp;

			if (n <= 0 || tail - head >= 64)
				continue;
			pp = &pend[tail % 64];
			pp->len = ds_answer(q, (size_t)n, pp->buf, sizeof(pp->buf));
			if (!pp->len)
				continue;
			pp->to = from;
			pp->due_ns = ds_now() + ds.delay_ms * 1000000ull;
			tail++;
		}
	}
	return NULL;
}

/* ---- the child's namespaces ---------------------------------------------------- */

static int ds_bind_file(const char *target, const char *text)
{
	char path[] = "/tmp/corio-dns-XXXXXX";
	int fd = mkstemp(path), ok;

	if (fd < 0)
		return -1;
	ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
	close(fd);
	ok = ok && mount(path, target, NULL, MS_BIND, NULL) == 0;
	unlink(path); /* the bind mount keeps it */
	return ok ? 0 : -1;
}

/* Own mounts and network (lo up), our files over /etc's, the server on
 * 127.0.0.1:53: 0, or 77 when the namespaces cannot be had. */
static int ds_setup(const char *resolv, const char *nsswitch, const char *hosts, bool silent,
		    unsigned delay_ms)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(53),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct ifreq ifr;
	pthread_t t;
	int s;

	if (unshare(CLONE_NEWNS | CLONE_NEWNET) < 0 &&
	    unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) < 0)
		return 77;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return 77;
	s = socket(AF_INET, SOCK_DGRAM, 0);
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return 77;
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return 77;
	close(s);
	if (ds_bind_file("/etc/resolv.conf", resolv) ||
	    ds_bind_file("/etc/nsswitch.conf", nsswitch ? nsswitch : "hosts: files dns\n") ||
	    ds_bind_file("/etc/hosts", hosts ? hosts : "127.0.0.1 localhost\n"))
		return 77;
	ds.silent = silent;
	ds.delay_ms = delay_ms;
	ds.fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (ds.fd < 0 || bind(ds.fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return 77;
	if (pthread_create(&t, NULL, ds_thread, NULL))
		return 1;
	pthread_detach(t);
	return 0;
}

struct ds_case {
	const char *resolv, *nsswitch, *hosts;
	bool silent;
	unsigned delay_ms;
	unsigned ttl_ms;       /* cfg.resolve_ttl_ms */
	unsigned work_threads; /* cfg.work_threads */
	void (*entry)(void *);
};

static int ds_child(void *arg)
{
	const struct ds_case *c = arg;
	struct corio_config cfg = th_cfg(1);
	int ret = ds_setup(c->resolv, c->nsswitch, c->hosts, c->silent, c->delay_ms), before;

	if (ret)
		return ret;
	cfg.resolve_ttl_ms = c->ttl_ms;
	cfg.work_threads = c->work_threads;
	before = th_fd_count();
	ret = corio_run(&cfg, c->entry, NULL);
	if (ret || atomic_load(&th_failures)) {
		fprintf(stderr, "corio_run %d (%s); %s\n", ret, corio_last_error(), th_msg);
		return 1;
	}
	if (th_fd_count() != before) {
		fprintf(stderr, "the runtime left %d file descriptors open\n", th_fd_count() - before);
		return 1;
	}
	return 0;
}

static void ds_run(const struct ds_case *c)
{
	int st = th_fork_bounded(ds_child, (void *)c, 30000);

	cr_assert(st != TH_HUNG, "the child hung");
	cr_assert(WIFEXITED(st), "the child ended with status 0x%x", st);
	if (WEXITSTATUS(st) == 77)
		cr_skip_test("no private mount and network namespace here (unshare, mount or "
			     "binding 127.0.0.1:53 in it refused)");
	cr_assert_eq(WEXITSTATUS(st), 0, "see the child's stderr");
}

static struct corio_net_stats ds_stats(void)
{
	struct corio_net_stats st;

	memset(&st, 0, sizeof(st));
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	return st;
}

#define MS_NS 1000000ull

/* ---- a server that never answers ------------------------------------------------- */

struct ds_lookup {
	char name[64];
	uint64_t timeout_ns; /* 0: none */
	int ret;
	uint64_t took_ns;
	struct sockaddr_storage ss[CORIO_RESOLVE_MAX];
};

static int ds_lookup_fiber(void *arg)
{
	struct ds_lookup *l = arg;
	struct corio_deadline d;
	uint64_t t0 = corio_now_ns();

	if (l->timeout_ns)
		CHECK_EQ(corio_timeout_push(&d, l->timeout_ns), 0);
	l->ret = corio_resolve(l->name, l->ss, CORIO_RESOLVE_MAX);
	if (l->timeout_ns)
		corio_deadline_pop(&d);
	l->took_ns = corio_now_ns() - t0;
	return 0;
}

static intptr_t ds_empty_job(void *arg)
{
	(void)arg;
	return 7;
}

static void silent_entry(void *arg)
{
	struct ds_lookup l[8], cancelled = { .name = "cancel-me.test:80" };
	struct corio_fiber *f[8], *cf;
	struct sockaddr_storage ss[2];
	struct corio_work_stats ws;
	struct corio_net_stats st;
	intptr_t res = 0;
	uint64_t t0;

	(void)arg;
	for (int i = 0; i < 8; i++) {
		memset(&l[i], 0, sizeof(l[i]));
		snprintf(l[i].name, sizeof(l[i].name), "silent-%d.test:80", i);
		l[i].timeout_ns = 300 * MS_NS;
		CHECK_EQ(corio_spawn(ds_lookup_fiber, &l[i], NULL, &f[i]), 0);
	}
	CHECK_EQ(corio_spawn(ds_lookup_fiber, &cancelled, NULL, &cf), 0);
	corio_yield(); /* every lookup has asked and parked */
	/* while they wait: the pool and the hosts file's names are free */
	t0 = corio_now_ns();
	CHECK_EQ(corio_work(ds_empty_job, NULL, NULL, &res), 0);
	CHECK_EQ(res, 7);
	CHECK_EQ(corio_resolve("localhost:80", ss, 2), 1);
	CHECK_EQ(((struct sockaddr_in *)&ss[0])->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	CHECK(corio_now_ns() - t0 < 200 * MS_NS);
	/* none of the lookups has ended yet: they were all in flight */
	for (int i = 0; i < 8; i++)
		CHECK_EQ(l[i].took_ns, 0);
	/* a cancel ends a lookup at once */
	t0 = corio_now_ns();
	CHECK_EQ(corio_cancel(cf), 0);
	CHECK_EQ(corio_join(cf, NULL), 0);
	CHECK_EQ(cancelled.ret, -ECANCELED);
	CHECK(corio_now_ns() - t0 < 100 * MS_NS);
	for (int i = 0; i < 8; i++) {
		CHECK_EQ(corio_join(f[i], NULL), 0);
		CHECK_EQ(l[i].ret, -ETIMEDOUT);
		CHECK(l[i].took_ns >= 300 * MS_NS);
		CHECK(l[i].took_ns < 1000 * MS_NS);
		/* c-ares asked the server: the lookup was DNS's, not the pool's */
		l[i].name[strlen(l[i].name) - 3] = 0;
		CHECK(ds_count(l[i].name, 1) >= 1);
	}
	st = ds_stats();
	CHECK_EQ(st.resolve_pool, 0);
	CHECK_EQ(st.resolve_failed, 0); /* deadlines and cancels are not failures */
	CHECK_EQ(st.resolve_misses, 10);
	CHECK_EQ(corio_work_stats_get(NULL, 0, &ws), 0);
	CHECK_EQ(ws.submitted, 1); /* the empty job alone */
}

Test(net, dns_silent_server_lookups_end_at_their_deadline_and_leave_the_pool_free, .timeout = 40)
{
	static const struct ds_case c = {
		.resolv = "nameserver 127.0.0.1\noptions timeout:5 attempts:2\n",
		.silent = true, .work_threads = 1, .entry = silent_entry,
	};

	ds_run(&c);
}

/* ---- a server that answers late: shared queries, TTLs, search, errors --------------- */

static void slow_entry(void *arg)
{
	struct ds_lookup l[8];
	struct corio_fiber *f[8];
	struct sockaddr_storage ss[CORIO_RESOLVE_MAX];
	struct corio_net_stats st;
	uint32_t want = htonl(ds_addr("same.test"));

	(void)arg;
	/* eight lookups of one name at once: one query (A and AAAA) */
	for (int i = 0; i < 8; i++) {
		memset(&l[i], 0, sizeof(l[i]));
		snprintf(l[i].name, sizeof(l[i].name), "same.test:%d", 100 + i);
		l[i].timeout_ns = 5000 * MS_NS;
		CHECK_EQ(corio_spawn(ds_lookup_fiber, &l[i], NULL, &f[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		CHECK_EQ(corio_join(f[i], NULL), 0);
		CHECK_EQ(l[i].ret, 1);
		CHECK_EQ(((struct sockaddr_in *)&l[i].ss[0])->sin_addr.s_addr, want);
		CHECK_EQ(corio_addr_port((struct sockaddr *)&l[i].ss[0]), 100 + i);
		CHECK(l[i].took_ns >= 100 * MS_NS); /* the server's delay */
	}
	CHECK_EQ(ds_count("same.test", 1), 1);
	CHECK_EQ(ds_count("same.test", 28), 1);
	st = ds_stats();
	CHECK_EQ(st.resolve_misses, 8);
	CHECK_EQ(st.resolve_shared, 7);
	/* kept (TTL 3600, capped at 2 s): a hit, no query */
	CHECK_EQ(corio_resolve("same.test:1", ss, 2), 1);
	CHECK_EQ(ds_count("same.test", 1), 1);
	CHECK_EQ(ds_stats().resolve_hits, 1);
	/* TTL 0: not kept, each lookup asks */
	CHECK_EQ(corio_resolve("zero.test:1", ss, 2), 1);
	CHECK_EQ(corio_resolve("zero.test:1", ss, 2), 1);
	CHECK_EQ(ds_count("zero.test", 1), 2);
	/* TTL 1 s, and the 2 s cap: one.test expires first, same.test later */
	CHECK_EQ(corio_resolve("one.test:1", ss, 2), 1);
	CHECK_EQ(corio_sleep_ns(1100 * MS_NS), 0);
	CHECK_EQ(corio_resolve("one.test:1", ss, 2), 1);
	CHECK_EQ(ds_count("one.test", 1), 2);
	CHECK_EQ(corio_resolve("same.test:1", ss, 2), 1);
	CHECK_EQ(ds_count("same.test", 1), 1);
	CHECK_EQ(corio_sleep_ns(1000 * MS_NS), 0);
	CHECK_EQ(corio_resolve("same.test:1", ss, 2), 1);
	CHECK_EQ(ds_count("same.test", 1), 2);
	/* the search list: "web" is asked as web.corio.test first */
	CHECK_EQ(corio_resolve("web:8", ss, 2), 1);
	CHECK_EQ(((struct sockaddr_in *)&ss[0])->sin_addr.s_addr, htonl(ds_addr("web.corio.test")));
	CHECK_EQ(ds_count("web.corio.test", 1), 1);
	/* NXDOMAIN: -ENOENT with the name, kept as a negative answer */
	CHECK_EQ(corio_resolve("nx.test:1", ss, 2), -ENOENT);
	CHECK(strstr(corio_last_error(), "cannot resolve \"nx.test\"") != NULL);
	CHECK_EQ(corio_resolve("nx.test:1", ss, 2), -ENOENT);
	CHECK(strstr(corio_last_error(), "(cached)") != NULL);
	st = ds_stats();
	CHECK_EQ(st.resolve_pool, 0);
	CHECK_EQ(st.resolve_failed, 2);
}

Test(net, dns_slow_server_shares_queries_keeps_ttls_and_uses_the_search_list, .timeout = 40)
{
	static const struct ds_case c = {
		.resolv = "nameserver 127.0.0.1\nsearch corio.test\noptions timeout:3 attempts:1\n",
		.delay_ms = 150, .ttl_ms = 2000, .entry = slow_entry,
	};

	ds_run(&c);
}

/* ---- the order of addresses: as getaddrinfo gives them ------------------------------ */

/* getaddrinfo's order for name (it blocks: a test, on a name it answers
 * at once or from the quick server). */
static int gai_order(const char *name, struct sockaddr_storage *out, int max)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *p;
	int n = 0;

	if (getaddrinfo(name, NULL, &hints, &res))
		return -1;
	for (p = res; p && n < max; p = p->ai_next) {
		memset(&out[n], 0, sizeof(out[n]));
		memcpy(&out[n++], p->ai_addr, p->ai_addrlen);
	}
	freeaddrinfo(res);
	return n;
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

static void order_entry(void *arg)
{
	static const char *const names[] = { "both.test", "dual.test" };
	struct sockaddr_storage mine[CORIO_RESOLVE_MAX], theirs[CORIO_RESOLVE_MAX];
	char hp[64];

	(void)arg;
	for (int k = 0; k < 2; k++) {
		int n, g;

		snprintf(hp, sizeof(hp), "%s:5", names[k]);
		n = corio_resolve(hp, mine, CORIO_RESOLVE_MAX);
		g = gai_order(names[k], theirs, CORIO_RESOLVE_MAX);
		CHECK_EQ(n, 2); /* both families: the hosts file's two; DNS's A and AAAA */
		CHECK_EQ(n, g);
		for (int i = 0; i < n && i < g; i++)
			if (!same_addr(&mine[i], &theirs[i]))
				CHECK(!"the order differs from getaddrinfo's");
	}
	CHECK_EQ(ds_stats().resolve_pool, 0);
}

Test(net, dns_addresses_come_in_getaddrinfos_order, .timeout = 40)
{
	static const struct ds_case c = {
		.resolv = "nameserver 127.0.0.1\noptions timeout:3 attempts:1\n",
		.hosts = "127.0.0.1 localhost\n127.0.0.1 both.test\n::1 both.test\n",
		.entry = order_entry,
	};

	if (!have_ipv6_loopback())
		cr_skip_test("no IPv6 loopback here: one family only, nothing to order");
	ds_run(&c);
}

/* ---- a source c-ares cannot read: the pool's getaddrinfo ----------------------------- */

static void nss_entry(void *arg)
{
	struct sockaddr_storage ss[2];
	struct corio_net_stats st;

	(void)arg;
	/* the hosts file answers on the shard, before the other source's turn */
	CHECK_EQ(corio_resolve("localhost:1", ss, 2), 1);
	CHECK_EQ(ds_stats().resolve_pool, 0);
	/* not in the file: "myhostname" comes before dns, so getaddrinfo
	 * (which asks it, then DNS: our server) answers on the pool */
	CHECK_EQ(corio_resolve("pool.test:1", ss, 2), 1);
	CHECK_EQ(((struct sockaddr_in *)&ss[0])->sin_addr.s_addr, htonl(ds_addr("pool.test")));
	st = ds_stats();
	CHECK_EQ(st.resolve_pool, 1);
	CHECK_EQ(st.resolve_misses, 2);
}

Test(net, dns_a_source_cares_cannot_read_goes_to_getaddrinfo_on_the_pool, .timeout = 40)
{
	static const struct ds_case c = {
		.resolv = "nameserver 127.0.0.1\noptions timeout:3 attempts:1\n",
		.nsswitch = "hosts: files myhostname dns\n",
		.entry = nss_entry,
	};

	ds_run(&c);
}
