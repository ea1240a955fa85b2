/* SPDX-License-Identifier: MIT */
/*
 * Networking, names: corio_resolve and connects by name (localhost, names
 * that do not resolve, the cache's TTL and bound), a lookup waiting for the
 * pool with a deadline and cancel, connects to a sockaddr, UDP connects by
 * name and number, bad input, and every address of a name tried in order.
 */
#include "net_helpers.h"

/* ---- names: corio_resolve, connects by name, the cache ------------------------ */


static struct corio_net_stats nm_stats(void)
{
	struct corio_net_stats st;

	memset(&st, 0, sizeof(st));
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	return st;
}

/* One byte there and back on a fresh connection from c to l's accept. */
static void nm_round_trip(struct corio_listener *l, struct corio_sock *c)
{
	struct corio_sock *a = NULL;
	char b = 0;

	CHECK_EQ(corio_accept(l, &a), 0);
	CHECK_EQ(corio_send(c, "n", 1), 1);
	CHECK_EQ(corio_recv(a, &b, 1), 1);
	CHECK_EQ(b, 'n');
	CHECK_EQ(corio_send(a, "m", 1), 1);
	CHECK_EQ(corio_recv(c, &b, 1), 1);
	CHECK_EQ(b, 'm');
	CHECK_EQ(corio_close(a), 0);
	CHECK_EQ(corio_close(c), 0);
}

static void nm_localhost_entry(void *arg)
{
	struct sockaddr_storage ss[CORIO_RESOLVE_MAX];
	struct corio_listener *l = NULL;
	struct corio_sock *c = NULL;
	struct corio_net_stats st;
	char where[64];
	int n, port, v4 = 0;

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	port = atoi(strrchr(where, ':') + 1);
	snprintf(where, sizeof(where), "localhost:%d", port);
	/* by name: the resolver (a miss), then every address until one takes it */
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	nm_round_trip(l, c);
	st = nm_stats();
	CHECK_EQ(st.resolve_misses, 1);
	CHECK_EQ(st.resolve_hits, 0);
	/* again: from the shard's cache, no lookup */
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	nm_round_trip(l, c);
	n = corio_resolve(where, ss, CORIO_RESOLVE_MAX);
	CHECK(n >= 1);
	for (int i = 0; i < n; i++) {
		CHECK_EQ(corio_addr_port((struct sockaddr *)&ss[i]), port);
		if (ss[i].ss_family == AF_INET &&
		    ((struct sockaddr_in *)&ss[i])->sin_addr.s_addr == htonl(INADDR_LOOPBACK))
			v4++;
	}
	CHECK_EQ(v4, 1); /* /etc/hosts: localhost is 127.0.0.1 */
	CHECK_EQ(corio_resolve(where, ss, 1), 1); /* max bounds the answer */
	st = nm_stats();
	CHECK_EQ(st.resolve_misses, 1);
	CHECK_EQ(st.resolve_hits, 3);
	CHECK_EQ(st.resolve_failed, 0);
	/* numeric input: no lookup, no cache */
	CHECK_EQ(corio_resolve("10.1.2.3:7", ss, 4), 1);
	CHECK_EQ(corio_resolve("[::1]:7", ss, 4), 1);
	CHECK_EQ(ss[0].ss_family, AF_INET6);
	CHECK_EQ(nm_stats().resolve_hits + nm_stats().resolve_misses, 4);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, names_localhost_connects_and_the_second_lookup_is_a_cache_hit, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, nm_localhost_entry, NULL);
}

/* A name the resolver refuses without asking the network (not a valid
 * host name), and one that does not exist (may go to DNS: bounded). */
static void nm_noname_entry(void *arg)
{
	struct sockaddr_storage ss[2];
	struct corio_sock *c = (void *)1;
	struct corio_deadline d;
	struct corio_net_stats st;
	int ret;

	(void)arg;
	CHECK_EQ(corio_resolve("bad host!:80", ss, 2), -ENOENT);
	CHECK(strstr(corio_last_error(), "corio_resolve: cannot resolve \"bad host!\": ") != NULL);
	CHECK(strstr(corio_last_error(), "(cached)") == NULL);
	/* the negative answer is cached: a hit, the same error */
	CHECK_EQ(corio_tcp_connect("bad host!:80", &c), -ENOENT);
	CHECK(c == NULL);
	CHECK(strstr(corio_last_error(), "corio_tcp_connect: cannot resolve \"bad host!\"") != NULL);
	CHECK(strstr(corio_last_error(), "(cached)") != NULL);
	CHECK_EQ(corio_udp_connect("bad host!:80", &c), -ENOENT);
	st = nm_stats();
	CHECK_EQ(st.resolve_misses, 1);
	CHECK_EQ(st.resolve_hits, 2);
	CHECK_EQ(st.resolve_failed, 3);
	CHECK_EQ(corio_timeout_push(&d, 5ull * 1000 * 1000 * 1000), 0);
	ret = corio_tcp_connect("no-such-host.invalid:80", &c);
	corio_deadline_pop(&d);
	/* NXDOMAIN, no DNS server reachable, or our bound */
	CHECK(ret == -ENOENT || ret == -EAGAIN || ret == -ETIMEDOUT);
	if (ret != -ETIMEDOUT)
		CHECK(strstr(corio_last_error(), "\"no-such-host.invalid\"") != NULL);
}

Test(net, names_that_do_not_resolve_are_enoent_with_a_message_and_cached, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, nm_noname_entry, NULL);
}

static void nm_ttl_entry(void *arg)
{
	struct sockaddr_storage ss[2];
	struct corio_net_stats st;

	(void)arg;
	CHECK(corio_resolve("localhost:1", ss, 2) >= 1);
	CHECK_EQ(corio_resolve("bad host!:1", ss, 2), -ENOENT);
	/* resolve_ttl_ms = 1: 2 ms on, both entries have expired (the clock
	 * is monotonic: this is not a race) */
	CHECK_EQ(corio_sleep_ns(2 * 1000 * 1000), 0);
	CHECK(corio_resolve("localhost:1", ss, 2) >= 1);
	CHECK_EQ(corio_resolve("bad host!:1", ss, 2), -ENOENT);
	st = nm_stats();
	CHECK_EQ(st.resolve_misses, 4);
	CHECK_EQ(st.resolve_hits, 0);
}

Test(net, names_cache_entries_expire_after_resolve_ttl_ms, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	cfg.resolve_ttl_ms = 1;
	th_run(&cfg, nm_ttl_entry, NULL);
}

/* 257 names in a cache of 256: the oldest goes. "127.1.N" is an inet_aton
 * form getaddrinfo answers without a lookup anywhere (127.1.0.N), but not
 * a numeric address to corio (dotted quads only): a name, cached. */
static void nm_evict_entry(void *arg)
{
	struct sockaddr_storage ss[2];
	struct corio_net_stats st;
	char name[32];

	(void)arg;
	for (int i = 0; i <= 256; i++) {
		snprintf(name, sizeof(name), "127.1.%d:9", i);
		CHECK_EQ(corio_resolve(name, ss, 2), 1);
	}
	CHECK_EQ(((struct sockaddr_in *)&ss[0])->sin_addr.s_addr, htonl(0x7f010100));
	st = nm_stats();
	CHECK_EQ(st.resolve_misses, 257);
	CHECK_EQ(corio_resolve("127.1.256:9", ss, 2), 1);
	CHECK_EQ(corio_resolve("127.1.1:9", ss, 2), 1);
	CHECK_EQ(nm_stats().resolve_hits, 2); /* the newest and the second oldest stayed */
	CHECK_EQ(corio_resolve("127.1.0:9", ss, 2), 1);
	CHECK_EQ(nm_stats().resolve_misses, 258); /* the oldest was evicted */
}

Test(net, names_cache_is_bounded_and_evicts_the_oldest, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, nm_evict_entry, NULL);
}

/* ---- a lookup that waits for the pool: deadline and cancel ------------------ */

struct nm_block {
	sem_t started, go;
	int resolve_ret;
	_Atomic int gate_timed_out;
};

/* Holds the pool's thread until the test lets it go; gives up after 10 s
 * (so a lookup that waits for it, the bug, fails the test, not hangs it). */
static intptr_t nm_gate(void *arg)
{
	struct nm_block *b = arg;
	struct timespec ts;

	sem_post(&b->started);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	while (sem_timedwait(&b->go, &ts) < 0)
		if (errno != EINTR) {
			atomic_store(&b->gate_timed_out, 1);
			break;
		}
	return 0;
}

static int nm_blocker(void *arg)
{
	CHECK_EQ(corio_work(nm_gate, arg, NULL, NULL), 0);
	return 0;
}

static int nm_resolver(void *arg)
{
	struct nm_block *b = arg;
	struct sockaddr_storage ss[2];

	b->resolve_ret = corio_resolve("localhost:80", ss, 2);
	return 0;
}

static void nm_pool_entry(void *arg)
{
	struct nm_block *b = arg;
	struct sockaddr_storage ss[2];
	struct corio_fiber *blk, *res;
	struct corio_work_stats ws;
	struct corio_deadline d;

	/* the pool's one thread is held: a lookup waits in the queue */
	CHECK_EQ(corio_spawn(nm_blocker, b, NULL, &blk), 0);
	corio_yield();
	sem_wait(&b->started);
	CHECK_EQ(corio_timeout_push(&d, 20 * 1000 * 1000), 0);
	/* (waiting for the blocker instead would never end: it is let go below) */
	CHECK_EQ(corio_resolve("localhost:80", ss, 2), -ETIMEDOUT);
	corio_deadline_pop(&d);
	CHECK_EQ(corio_spawn(nm_resolver, b, NULL, &res), 0);
	corio_yield(); /* it queued its lookup and parked */
	CHECK_EQ(corio_cancel(res), 0);
	CHECK_EQ(corio_join(res, NULL), 0);
	CHECK_EQ(b->resolve_ret, -ECANCELED);
	CHECK_EQ(corio_work_stats_get(NULL, 0, &ws), 0);
	CHECK_EQ(ws.abandoned, 2); /* both lookups left the queue, never ran */
	CHECK_EQ(ws.queued, 0);
	CHECK_EQ(nm_stats().resolve_failed, 0); /* a deadline or cancel is not a failure */
	CHECK_EQ(atomic_load(&b->gate_timed_out), 0); /* the lookups did not wait for it */
	sem_post(&b->go);
	CHECK_EQ(corio_join(blk, NULL), 0);
	/* nothing was cached: the next lookup runs */
	CHECK(corio_resolve("localhost:80", ss, 2) >= 1);
	CHECK_EQ(nm_stats().resolve_misses, 3);
	CHECK_EQ(nm_stats().resolve_pool, 3);
}

Test(net, names_lookup_waiting_for_the_pool_honours_deadline_and_cancel, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct nm_block b;

	/* the pool's path: getaddrinfo, as for a source c-ares cannot read */
	setenv("CORIO_NET_DISABLE", "dns", 1);
	cfg.work_threads = 1;
	memset(&b, 0, sizeof(b));
	sem_init(&b.started, 0, 0);
	sem_init(&b.go, 0, 0);
	th_run(&cfg, nm_pool_entry, &b);
}

/* ---- connect to a sockaddr; UDP connect --------------------------------------- */

static void nm_addr_entry(void *arg)
{
	struct sockaddr_storage ss;
	struct corio_listener *l = NULL;
	struct corio_sock *c = (void *)1;
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t len;

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	CHECK_EQ(corio_listener_addr(l, &ss, &len), 0);
	CHECK_EQ(corio_tcp_connect_addr((struct sockaddr *)&ss, len, &c), 0);
	nm_round_trip(l, c);
	CHECK_EQ(nm_stats().connects, 1);
	CHECK_EQ(corio_tcp_connect_addr(NULL, len, &c), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_tcp_connect_addr: sa is NULL") != NULL);
	CHECK_EQ(corio_tcp_connect_addr((struct sockaddr *)&ss, 8, &c), -EINVAL);
	CHECK(strstr(corio_last_error(), "len 8 is short for AF_INET") != NULL);
	CHECK_EQ(corio_tcp_connect_addr((struct sockaddr *)&sun, sizeof(sun), &c), -EINVAL);
	CHECK(strstr(corio_last_error(), "is not AF_INET or AF_INET6") != NULL);
	CHECK_EQ(corio_tcp_connect_addr((struct sockaddr *)&ss, len, NULL), -EINVAL);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, names_tcp_connect_addr_connects_to_a_sockaddr, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, nm_addr_entry, NULL);
}

static void nm_udp_entry(void *arg)
{
	struct sockaddr_storage from, peer;
	struct corio_sock *srv = NULL, *c = NULL;
	socklen_t flen = sizeof(from), plen;
	char where[64], buf[16];
	const char *names[2] = { "localhost", "127.0.0.1" };

	(void)arg;
	CHECK_EQ(corio_udp_bind("127.0.0.1:0", &srv), 0);
	CHECK_EQ(corio_sock_local_addr(srv, &peer, &plen), 0);
	for (int i = 0; i < 2; i++) {
		snprintf(where, sizeof(where), "%s:%d", names[i],
			 corio_addr_port((struct sockaddr *)&peer));
		CHECK_EQ(corio_udp_connect(where, &c), 0);
		CHECK_EQ(corio_send(c, "ping", 4), 4);
		flen = sizeof(from);
		CHECK_EQ(corio_recvfrom(srv, buf, sizeof(buf), (struct sockaddr *)&from, &flen), 4);
		CHECK(!memcmp(buf, "ping", 4));
		CHECK_EQ(corio_sendto(srv, "pong!", 5, (struct sockaddr *)&from, flen), 5);
		CHECK_EQ(corio_recv(c, buf, sizeof(buf)), 5);
		CHECK(!memcmp(buf, "pong!", 5));
		/* connected: the peer is the one address it sends to */
		CHECK_EQ(corio_sendto(c, "x", 1, NULL, 0), 1);
		CHECK_EQ(corio_recvfrom(srv, buf, sizeof(buf), NULL, NULL), 1);
		CHECK_EQ(corio_close(c), 0);
	}
	CHECK_EQ(nm_stats().resolve_misses, 1);
	CHECK_EQ(corio_close(srv), 0);
}

Test(net, names_udp_connect_round_trip_by_name_and_number, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, nm_udp_entry, NULL);
}

/* ---- bad input ------------------------------------------------------------------ */

#define NM_BAD(call, needle)                                                         \
	do {                                                                          \
		CHECK_EQ((call), -EINVAL);                                            \
		if (!strstr(corio_last_error(), (needle)))                            \
			CHECK(!"message" #call);                                      \
	} while (0)

static void nm_bad_entry(void *arg)
{
	struct sockaddr_storage ss[2];
	struct corio_sock *c = (void *)1;
	char longname[400];

	(void)arg;
	memset(longname, 'a', sizeof(longname));
	strcpy(longname + 300, ":80");
	NM_BAD(corio_resolve(NULL, ss, 2), "corio_resolve: host_port is NULL");
	NM_BAD(corio_resolve("localhost:80", NULL, 2), "corio_resolve: addrs is NULL");
	NM_BAD(corio_resolve("localhost:80", ss, 0), "corio_resolve: max is 0");
	NM_BAD(corio_resolve("", ss, 2), "expected host:port");
	NM_BAD(corio_resolve("localhost", ss, 2), "expected host:port");
	NM_BAD(corio_resolve(":80", ss, 2), "no host");
	NM_BAD(corio_resolve("*:80", ss, 2), "no host");
	NM_BAD(corio_resolve("localhost:65536", ss, 2), "port 65536 is above 65535");
	NM_BAD(corio_resolve("localhost:-1", ss, 2), "is not a number");
	NM_BAD(corio_resolve("localhost:", ss, 2), "missing port");
	NM_BAD(corio_resolve("::1:80", ss, 2), "needs brackets");
	NM_BAD(corio_resolve(longname, ss, 2), "at most 255");
	NM_BAD(corio_tcp_connect(NULL, &c), "corio_tcp_connect: host_port is NULL");
	CHECK(c == NULL);
	NM_BAD(corio_tcp_connect(":80", &c), "corio_tcp_connect: \":80\": no host");
	NM_BAD(corio_tcp_connect("localhost:99999", &c), "above 65535");
	NM_BAD(corio_tcp_connect("localhost:80", NULL), "out is NULL");
	NM_BAD(corio_udp_connect("", &c), "corio_udp_connect: \"\": expected host:port");
	NM_BAD(corio_udp_connect("localhost:80", NULL), "out is NULL");
	/* none of it asked the resolver */
	CHECK_EQ(nm_stats().resolve_misses, 0);
	CHECK_EQ(nm_stats().resolve_failed, 0);
}

Test(net, names_bad_input_is_einval_with_a_message, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, nm_bad_entry, NULL);
}

/* ---- every address in order: a name with two, the first refuses ------------------ */

/*
 * The system resolver reads /etc/hosts, so the test gives it one of its
 * own: in a forked child, a private mount namespace (a user namespace too
 * when not root) with a file bound over /etc/hosts that lists
 * "two-addr.test" as ::1 and 127.0.0.1. A listener on the second address
 * the resolver gives (with its port) leaves the first one refusing, so the
 * connect succeeds only by trying the next. Exit 77: no namespace here.
 */
#define NM_NAME "two-addr.test"

static int nm_hosts_setup(void)
{
	char path[] = "/tmp/corio-hosts-XXXXXX";
	const char text[] = "::1 " NM_NAME "\n127.0.0.1 " NM_NAME "\n127.0.0.1 localhost\n";
	int fd, ok;

	if (unshare(CLONE_NEWNS) < 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
		return 77;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return 77;
	fd = mkstemp(path);
	if (fd < 0)
		return 77;
	ok = write(fd, text, sizeof(text) - 1) == (ssize_t)(sizeof(text) - 1);
	close(fd);
	ok = ok && mount(path, "/etc/hosts", NULL, MS_BIND, NULL) == 0;
	unlink(path); /* the bind mount keeps it */
	return ok ? 0 : 77;
}

static void nm_order_entry(void *arg)
{
	struct sockaddr_storage ss[CORIO_RESOLVE_MAX], la;
	struct corio_listener *l = NULL;
	struct corio_sock *c = NULL;
	struct corio_net_stats st;
	char where[64];
	socklen_t len;
	int n;

	(void)arg;
	n = corio_resolve(NM_NAME ":0", ss, CORIO_RESOLVE_MAX);
	CHECK_EQ(n, 2); /* both, from our /etc/hosts */
	if (n != 2)
		return;
	CHECK(ss[0].ss_family != ss[1].ss_family);
	/* listen on the second address only; the first then refuses */
	CHECK(corio_addr_format((struct sockaddr *)&ss[1], sizeof(ss[1]), where, sizeof(where)) > 0);
	CHECK_EQ(corio_tcp_listen(where, NULL, &l), 0);
	if (!l)
		return;
	CHECK_EQ(corio_listener_addr(l, &la, &len), 0);
	snprintf(where, sizeof(where), NM_NAME ":%d", corio_addr_port((struct sockaddr *)&la));
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	if (c)
		nm_round_trip(l, c);
	st = nm_stats();
	CHECK_EQ(st.connects, 1);
	CHECK_EQ(st.err_refused + st.err_other, 1); /* the first address, refused */
	/* none listens on either now: both tried, the first's error returned */
	CHECK_EQ(corio_listener_close(l), 0);
	n = corio_tcp_connect(where, &c);
	CHECK(n == -ECONNREFUSED || n == -ENETUNREACH || n == -EADDRNOTAVAIL);
	CHECK(strstr(corio_last_error(), "none of its 2 addresses took the connection") != NULL);
	st = nm_stats();
	CHECK_EQ(st.resolve_misses, 1); /* one entry per name, whatever the port */
	CHECK_EQ(st.resolve_hits, 2);
}

static int nm_order_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	int ret = nm_hosts_setup();

	(void)arg;
	if (ret)
		return ret;
	ret = corio_run(&cfg, nm_order_entry, NULL);
	if (ret || atomic_load(&th_failures)) {
		fprintf(stderr, "corio_run %d (%s); %s\n", ret, corio_last_error(), th_msg);
		return 1;
	}
	return 0;
}

Test(net, names_connect_tries_every_address_in_order, .timeout = 30)
{
	int st = th_fork_bounded(nm_order_child, NULL, 20000);

	cr_assert(st != TH_HUNG, "the child hung");
	cr_assert(WIFEXITED(st), "the child ended with status 0x%x", st);
	if (WEXITSTATUS(st) == 77)
		cr_skip_test("no private mount namespace here (unshare/mount refused)");
	cr_assert_eq(WEXITSTATUS(st), 0, "see the child's stderr");
}
