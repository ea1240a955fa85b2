/* SPDX-License-Identifier: MIT */
/*
 * Networking, the socket's life: address parsing and bad input; echo from
 * 1 B to 1 MiB over TCP (IPv4, IPv6), Unix abstract and path sockets, with
 * copied, borrowed and batched receives and every fallback (no buffer
 * ring, no multishot, no incremental buffers); half-close, reset by peer,
 * refused connects; timeouts, cancellation and shutdown of blocked calls;
 * every EINVAL naming its call, stale handles, and calls refused when
 * cancelled even with data waiting. Every listener binds port 0 and reads
 * the port back.
 */
#include "net_helpers.h"

/* ---- address parsing ---------------------------------------------------------- */

Test(net, addr_parse)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char buf[64];
	static const char *bad[] = {
		"",          "127.0.0.1", "127.0.0.1:",  "127.0.0.1:65536", "127.0.0.1:8x",
		"host.example:80", "::1:80", "[::1]80",    "[::1",            "[zz]:1",
		"1.2.3:4",   "999.1.1.1:1",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(corio_addr_parse(bad[i], &ss, &len), -EINVAL, "\"%s\" accepted", bad[i]);
		cr_expect(strlen(corio_last_error()) > 10);
	}
	cr_assert_eq(corio_addr_parse("127.0.0.1:8080", &ss, &len), 0);
	cr_assert_eq(ss.ss_family, AF_INET);
	cr_assert_eq(corio_addr_port((struct sockaddr *)&ss), 8080);
	corio_addr_format((struct sockaddr *)&ss, len, buf, sizeof(buf));
	cr_assert_str_eq(buf, "127.0.0.1:8080");
	cr_assert_eq(corio_addr_parse("[::1]:0", &ss, &len), 0);
	cr_assert_eq(ss.ss_family, AF_INET6);
	corio_addr_format((struct sockaddr *)&ss, len, buf, sizeof(buf));
	cr_assert_str_eq(buf, "[::1]:0");
	cr_assert_eq(corio_addr_parse("localhost:1", &ss, &len), 0);
	cr_assert_eq(corio_addr_parse("*:1", &ss, &len), 0);
	cr_assert_eq(corio_addr_parse(":65535", &ss, &len), 0);
}

/* A numeric IPv4 host is read as inet_pton(AF_INET) reads it, by
 * corio_addr_parse and by corio_resolve's no-lookup path alike (both parse
 * it by hand, net/addr.c corio__ipv4_parse). */
Test(net, addr_parse_reads_ipv4_as_inet_pton)
{
	static const char *hosts[] = {
		"127.0.0.1", "0.0.0.0", "255.255.255.255", "10.0.0.10", "192.168.100.200",
		"1.2.3.255", "256.0.0.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.04",
		"0.0.0.00", "1..2.3", "1.2.3.", ".1.2.3", "1.2.3.2555", "-1.2.3.4", "1.2.3.4.",
		"1.2.3.4 ", "0x7f.0.0.1", "127.1",
	};

	for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
		struct sockaddr_storage ss, rs[2];
		struct in_addr want;
		socklen_t len;
		char hp[64];
		int ok = inet_pton(AF_INET, hosts[i], &want) == 1;

		snprintf(hp, sizeof(hp), "%s:80", hosts[i]);
		cr_expect_eq(corio_addr_parse(hp, &ss, &len), ok ? 0 : -EINVAL, "\"%s\"", hp);
		if (!ok)
			continue;
		cr_expect_eq(((struct sockaddr_in *)&ss)->sin_addr.s_addr, want.s_addr, "%s", hp);
		/* numeric: no lookup, off a shard too, the same bytes */
		memset(rs, 0xa5, sizeof(rs));
		cr_expect_eq(corio_resolve(hp, rs, 2), 1, "%s", hp);
		cr_expect_eq(memcmp(&rs[0], &ss, sizeof(ss)), 0, "%s", hp);
	}
}

static void bad_input_entry(void *arg)
{
	struct corio_listener *l = (void *)1;
	struct corio_sock *s = (void *)1;
	struct corio_listen_opts o = { .flags = 0x100 };

	(void)arg;
	CHECK_EQ(corio_tcp_listen("nonsense", NULL, &l), -EINVAL);
	CHECK(l == NULL);
	CHECK(strstr(corio_last_error(), "nonsense") != NULL);
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", &o, &l), -EINVAL);
	CHECK_EQ(corio_tcp_connect("example.com", &s), -EINVAL); /* no port */
	CHECK(s == NULL);
	CHECK_EQ(corio_udp_bind("1.2.3.4", &s), -EINVAL);
	CHECK_EQ(corio_unix_listen("", NULL, &l), -EINVAL);
	CHECK_EQ(corio_recv(NULL, NULL, 0), -EINVAL);
}

Test(net, bad_input_is_einval, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, bad_input_entry, NULL);
}

Test(net, echo_ipv4_copy, .timeout = 60) { run_echo("127.0.0.1:0", false, false); }
Test(net, echo_ipv4_borrowed, .timeout = 60) { run_echo("127.0.0.1:0", 1, false); }
Test(net, echo_ipv4_borrowed_batches, .timeout = 60) { run_echo("127.0.0.1:0", 2, false); }
Test(net, echo_ipv6_borrowed, .timeout = 60)
{
	if (!have_ipv6_loopback())
		cr_skip_test("no IPv6 loopback (::1) on this machine");
	run_echo("[::1]:0", true, false);
}
Test(net, echo_ipv6_copy, .timeout = 60)
{
	if (!have_ipv6_loopback())
		cr_skip_test("no IPv6 loopback (::1) on this machine");
	run_echo("[::1]:0", false, false);
}
Test(net, echo_unix_abstract, .timeout = 60) { run_echo(NULL, 2, true); }

/* The fallbacks: no provided-buffer ring (user-mode pool), no multishot. */
Test(net, echo_fallback_no_bufring, .timeout = 60)
{
	setenv("CORIO_NET_DISABLE", "bufring,send_zc", 1);
	run_echo("127.0.0.1:0", true, false);
}
Test(net, echo_fallback_no_multishot, .timeout = 60)
{
	setenv("CORIO_NET_DISABLE", "multishot", 1);
	run_echo("127.0.0.1:0", true, false);
}

/* ---- Unix socket on a path ------------------------------------------------------- */

static int unix_echo_server(void *arg)
{
	struct corio_sock *s;

	CHECK_EQ(corio_accept(arg, &s), 0);
	return s ? echo_conn(s, 0) : -1;
}

static void unix_path_entry(void *arg)
{
	char dir[] = "/tmp/corio-net-XXXXXX", path[64];
	struct corio_listener *l;
	struct corio_fiber *f;
	struct corio_sock *c;
	struct corio_listen_opts o = { .flags = CORIO_LISTEN_UNLINK };
	char buf[16];
	struct stat stbuf;

	(void)arg;
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/ctl.sock", dir);
	CHECK_EQ(corio_unix_listen(path, &o, &l), 0);
	CHECK_EQ(stat(path, &stbuf), 0);
	CHECK_EQ(corio_spawn(unix_echo_server, l, NULL, &f), 0);
	CHECK_EQ(corio_unix_connect(path, &c), 0);
	CHECK_EQ(corio_send(c, "stats\n", 6), 6);
	CHECK_EQ(recv_all(c, (uint8_t *)buf, 6), 6);
	CHECK(memcmp(buf, "stats\n", 6) == 0);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_listener_close(l), 0);
	CHECK(stat(path, &stbuf) < 0); /* the listener removed its file */
	CHECK_EQ(corio_unix_connect(path, &c), -ENOENT);
	rmdir(dir);
}

Test(net, unix_path, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, unix_path_entry, NULL);
}

/* ---- half-close, reset, refused ----------------------------------------------------- */

static int half_close_server(void *arg)
{
	struct corio_sock *s;
	struct corio_buf b;
	char got[16] = { 0 };
	size_t n = 0;
	ssize_t r;

	CHECK_EQ(corio_accept(arg, &s), 0);
	if (!s)
		return -1;
	while ((r = corio_recv_buf(s, &b)) > 0) {
		memcpy(got + n, b.data, (size_t)r);
		n += (size_t)r;
		corio_buf_release(&b);
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(n, 5);
	CHECK(memcmp(got, "hello", 5) == 0);
	CHECK_EQ(corio_recv_buf(s, &b), 0); /* EOF is sticky */
	/* our direction still works after the peer's half-close */
	CHECK_EQ(corio_send(s, "bye", 3), 3);
	CHECK_EQ(corio_close(s), 0);
	return 0;
}

static void half_close_entry(void *arg)
{
	struct corio_listener *l;
	struct corio_fiber *f;
	struct corio_sock *c;
	char where[64], buf[8];

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	CHECK_EQ(corio_spawn(half_close_server, l, NULL, &f), 0);
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	CHECK_EQ(corio_send(c, "hello", 5), 5);
	CHECK_EQ(corio_shutdown_write(c), 0);
	CHECK_EQ(recv_all(c, (uint8_t *)buf, 3), 3);
	CHECK(memcmp(buf, "bye", 3) == 0);
	CHECK_EQ(corio_recv(c, buf, sizeof(buf)), 0);
	CHECK_EQ(corio_send(c, "x", 1), -EPIPE); /* we shut our side down */
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, half_close, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, half_close_entry, NULL);
}

static int reset_server(void *arg)
{
	struct corio_sock *s;
	struct linger lg = { 1, 0 };
	char buf[4];

	CHECK_EQ(corio_accept(arg, &s), 0);
	if (!s)
		return -1;
	CHECK_EQ(recv_all(s, (uint8_t *)buf, 4), 4); /* the client is ready */
	CHECK_EQ(corio_setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	CHECK_EQ(corio_close(s), 0); /* linger 0: RST */
	return 0;
}

static void reset_entry(void *arg)
{
	bool borrow = arg != NULL;
	struct corio_listener *l;
	struct corio_fiber *f;
	struct corio_sock *c;
	struct corio_buf b;
	struct corio_net_stats st;
	char where[64], buf[8];
	ssize_t r;

	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	CHECK_EQ(corio_spawn(reset_server, l, NULL, &f), 0);
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	CHECK_EQ(corio_send(c, "ping", 4), 4);
	r = borrow ? corio_recv_buf(c, &b) : corio_recv(c, buf, sizeof(buf));
	CHECK_EQ(r, -ECONNRESET);
	if (borrow)
		CHECK_EQ(corio_recv_buf(c, &b), -ECONNRESET); /* sticky */
	r = corio_send(c, "x", 1);
	CHECK(r == -EPIPE || r == -ECONNRESET);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK(st.err_reset >= 1);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, reset_by_peer, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, reset_entry, NULL);
}

Test(net, reset_by_peer_borrowed, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, reset_entry, (void *)1);
}

static void refused_entry(void *arg)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	struct corio_sock *c;
	struct corio_net_stats st;
	char where[64];
	/* bound, never listening: a SYN to it gets a RST */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	(void)arg;
	CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	snprintf(where, sizeof(where), "127.0.0.1:%u", ntohs(a.sin_port));
	CHECK_EQ(corio_tcp_connect(where, &c), -ECONNREFUSED);
	CHECK(c == NULL);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.err_refused, 1);
	CHECK_EQ(st.conns_live, 0);
	close(fd);
}

Test(net, connection_refused, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, refused_entry, NULL);
}

/* ---- timeouts and cancellation ------------------------------------------------------ */

/* The elapsed time of a call bounded by a deadline of d: at least d, and
 * not much more (generous: the machine is shared). */
#define CHECK_ELAPSED(t0, d) \
	do { \
		uint64_t el_ = corio_now_ns() - (t0); \
		CHECK(el_ >= (d)); \
		CHECK(el_ < (d) + 2000 * MS); \
	} while (0)

static void timeout_entry(void *arg)
{
	struct corio_listener *l, *full;
	struct corio_sock *c, *s, *extra[8];
	struct corio_deadline d;
	struct corio_buf b;
	struct corio_listen_opts o = { .backlog = 1 };
	char where[64], buf[16];
	uint64_t t0;
	int ret, nextra = 0;

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));

	/* accept with nobody connecting */
	t0 = corio_now_ns();
	corio_timeout_push(&d, 30 * MS);
	CHECK_EQ(corio_accept(l, &s), -ETIMEDOUT);
	corio_deadline_pop(&d);
	CHECK_ELAPSED(t0, 30 * MS);

	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	CHECK_EQ(corio_accept(l, &s), 0);
	if (!c || !s)
		return;

	/* recv on a silent socket, both paths; nothing is lost afterwards */
	t0 = corio_now_ns();
	corio_timeout_push(&d, 30 * MS);
	CHECK_EQ(corio_recv(s, buf, sizeof(buf)), -ETIMEDOUT);
	corio_deadline_pop(&d);
	CHECK_ELAPSED(t0, 30 * MS);
	CHECK_EQ(corio_send(c, "abc", 3), 3);
	CHECK_EQ(recv_all(s, (uint8_t *)buf, 3), 3);
	CHECK(memcmp(buf, "abc", 3) == 0);

	t0 = corio_now_ns();
	corio_timeout_push(&d, 30 * MS);
	CHECK_EQ(corio_recv_buf(c, &b), -ETIMEDOUT);
	corio_deadline_pop(&d);
	CHECK_ELAPSED(t0, 30 * MS);
	CHECK_EQ(corio_send(s, "xyz", 3), 3);
	CHECK_EQ(corio_recv_buf(c, &b), 3);
	CHECK(b.data && memcmp(b.data, "xyz", 3) == 0);
	corio_buf_release(&b);

	/* an expired scope fails every call at once */
	corio_timeout_push(&d, 0);
	CHECK_EQ(corio_recv_buf(c, &b), -ETIMEDOUT);
	CHECK_EQ(corio_send(c, "x", 1), -ETIMEDOUT);
	corio_deadline_pop(&d);

	/* connect to a listener whose accept queue is full: SYNs are dropped,
	 * so the connect hangs until the deadline */
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", &o, &full), 0);
	addr_of(full, where, sizeof(where));
	for (;;) {
		t0 = corio_now_ns();
		corio_timeout_push(&d, 100 * MS);
		ret = corio_tcp_connect(where, &extra[nextra]);
		corio_deadline_pop(&d);
		if (ret == 0 && nextra < 7) {
			nextra++;
			continue;
		}
		CHECK_EQ(ret, -ETIMEDOUT);
		CHECK_ELAPSED(t0, 100 * MS);
		break;
	}
	while (nextra)
		CHECK_EQ(corio_close(extra[--nextra]), 0);
	CHECK_EQ(corio_listener_close(full), 0);

	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_close(s), 0);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, timeouts, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, timeout_entry, NULL);
}

static int blocked_reader(void *arg)
{
	struct corio_buf b;

	return (int)corio_recv_buf(arg, &b);
}

static int blocked_acceptor(void *arg)
{
	struct corio_sock *s;

	return corio_accept(arg, &s);
}

static void cancel_entry(void *arg)
{
	struct corio_listener *l;
	struct corio_fiber *fr, *fa;
	struct corio_sock *c, *s;
	char where[64];
	int st = 0;

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	CHECK_EQ(corio_accept(l, &s), 0);
	CHECK_EQ(corio_spawn(blocked_reader, s, NULL, &fr), 0);
	CHECK_EQ(corio_spawn(blocked_acceptor, l, NULL, &fa), 0);
	corio_yield(); /* both park */
	CHECK_EQ(corio_cancel(fr), 0);
	CHECK_EQ(corio_cancel(fa), 0);
	CHECK_EQ(corio_join(fr, &st), 0);
	CHECK_EQ(st, -ECANCELED);
	CHECK_EQ(corio_join(fa, &st), 0);
	CHECK_EQ(st, -ECANCELED);
	/* the multishot recv is still armed: close must take it out first */
	CHECK_EQ(corio_close(s), 0);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, cancel_blocked_calls_then_close, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, cancel_entry, NULL);
}

/* Shutdown with sockets whose multishot ops are armed: the runtime drains
 * them (the test closes the sockets after the fibers were cancelled). */
static struct corio_sock *shut_s, *shut_c;
static struct corio_listener *shut_l;

static int shut_reader(void *arg)
{
	struct corio_buf b;

	(void)arg;
	CHECK_EQ(corio_recv_buf(shut_s, &b), -ECANCELED);
	CHECK_EQ(corio_close(shut_s), 0); /* works in a cancelled fiber */
	CHECK_EQ(corio_close(shut_c), 0);
	CHECK_EQ(corio_listener_close(shut_l), 0);
	return 0;
}

static void shutdown_entry(void *arg)
{
	char where[64];

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &shut_l), 0);
	addr_of(shut_l, where, sizeof(where));
	CHECK_EQ(corio_tcp_connect(where, &shut_c), 0);
	CHECK_EQ(corio_accept(shut_l, &shut_s), 0);
	CHECK_EQ(corio_spawn(shut_reader, NULL, NULL, NULL), 0);
	corio_yield();
	corio_shutdown();
}

Test(net, shutdown_with_armed_receive, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, shutdown_entry, NULL);
}

/* The echo round trips on the whole-buffer path (the other echo tests take
 * the incremental one where the kernel has it). */
Test(net, echo_fallback_no_pbuf_inc, .timeout = 60)
{
	setenv("CORIO_NET_DISABLE", "pbuf_inc", 1);
	run_echo("127.0.0.1:0", 1, false);
	run_echo("127.0.0.1:0", 2, false);
	run_echo("127.0.0.1:0", false, false);
}

/* ---- the listener, and receives with data waiting, in the same classes --------- */

struct lclose {
	struct corio_listener *l;
	int accept_ret, close_ret, again_ret;
};

static int lclose_acceptor(void *arg)
{
	struct lclose *c = arg;
	struct corio_sock *s = NULL;

	c->accept_ret = corio_accept(c->l, &s);
	if (s)
		corio_close(s);
	return 0;
}

static void lclose_entry(void *arg)
{
	struct lclose *c = arg;
	struct corio_fiber *f;

	if (corio_tcp_listen("127.0.0.1:0", NULL, &c->l))
		return;
	if (corio_spawn(lclose_acceptor, c, NULL, &f))
		return;
	corio_yield(); /* the acceptor parks in corio_accept */
	c->close_ret = corio_listener_close(c->l);
	corio_join(f, NULL);
}

static int lclose_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	struct lclose c = { .accept_ret = 1, .close_ret = 1 };

	(void)arg;
	if (corio_run(&cfg, lclose_entry, &c))
		return 10;
	return c.accept_ret == -EBADF && c.close_ret == 0 ? 0 : 11;
}

/* corio_listener_close() with a fiber parked in corio_accept() asserted (and
 * in release builds freed the listener under it): now the acceptor is woken
 * with -EBADF and the close waits for it (issue 22, the class of item 2). */
Test(net, listener_close_wakes_a_parked_accept_with_ebadf, .timeout = 30)
{
	th_child_ok(lclose_child, NULL, 10000, "listener close with a parked accept");
}

struct cfirst {
	char where[64];
	struct corio_listener *l;
	int recv_c, recvbuf_c, recv_t, accept_c;
};

static int cfirst_peer(void *arg)
{
	struct cfirst *c = arg;
	struct corio_sock *s;

	if (corio_tcp_connect(c->where, &s) == 0) {
		corio_send(s, "hello", 5);
		corio_sleep_ns(50 * 1000 * 1000); /* hold the connection open */
		corio_close(s);
	}
	return 0;
}

static int cfirst_server(void *arg)
{
	struct cfirst *c = arg;
	struct corio_sock *s;
	struct corio_buf b;
	struct corio_deadline d;
	char buf[8];

	if (corio_accept(c->l, &s))
		return 0;
	/* wait until the bytes are queued, without taking them */
	corio_poll(corio_sock_fd(s), POLLIN);
	corio_timeout_push(&d, 1); /* a scope that has passed */
	corio_sleep_ns(1000);
	c->recv_t = (int)corio_recv(s, buf, sizeof(buf));
	corio_deadline_pop(&d);
	corio_cancel(corio_self());
	c->recv_c = (int)corio_recv(s, buf, sizeof(buf));
	c->recvbuf_c = (int)corio_recv_buf(s, &b);
	corio_buf_release(&b);
	corio_close(s);
	return 0;
}

static void cfirst_entry(void *arg)
{
	struct cfirst *c = arg;
	struct corio_fiber *srv, *peer, *peer2;
	struct corio_sock *s;

	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &c->l), 0);
	addr_of(c->l, c->where, sizeof(c->where));
	CHECK_EQ(corio_spawn(cfirst_server, c, NULL, &srv), 0);
	CHECK_EQ(corio_spawn(cfirst_peer, c, NULL, &peer), 0);
	CHECK_EQ(corio_join(srv, NULL), 0);
	CHECK_EQ(corio_join(peer, NULL), 0);
	/* a connection waits in the listener: a cancelled caller still gets none */
	CHECK_EQ(corio_spawn(cfirst_peer, c, NULL, &peer2), 0);
	corio_sleep_ns(20 * 1000 * 1000);
	corio_cancel(corio_self());
	c->accept_c = corio_accept(c->l, &s);
	if (c->accept_c == 0)
		corio_close(s);
	corio_join(peer2, NULL);
	corio_listener_close(c->l);
}

/* Cancellation and the deadline come first even when data or a connection
 * is already waiting (corio.h's rule, item 9 of issue 22, in net). */
Test(net, receives_and_accept_refuse_when_cancelled_even_with_data_waiting, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct cfirst c;

	memset(&c, 0, sizeof(c));
	th_run(&cfg, cfirst_entry, &c);
	cr_assert_eq(c.recv_t, -ETIMEDOUT);
	cr_assert_eq(c.recv_c, -ECANCELED);
	cr_assert_eq(c.recvbuf_c, -ECANCELED);
	cr_assert_eq(c.accept_c, -ECANCELED);
}

/* A second corio_close (or any call) on a closed socket's handle is -EINVAL
 * while the record is in the quarantine; it used to push the record on the
 * pool twice and close a descriptor another socket may own by then. */
static void stale_sock_entry(void *arg)
{
	struct corio_listener *l;
	struct corio_sock *a, *b, *c;
	char where[64], buf[4];

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	CHECK_EQ(corio_tcp_connect(where, &a), 0);
	CHECK_EQ(corio_close(a), 0);
	CHECK_EQ(corio_close(a), -EINVAL);
	CHECK(strstr(corio_last_error(), "closed") != NULL);
	CHECK_EQ(corio_recv(a, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(corio_send(a, "x", 1), -EINVAL);
	CHECK_EQ(corio_sock_fd(a), -EINVAL);
	/* a new socket does not take the stale record at once */
	CHECK_EQ(corio_tcp_connect(where, &b), 0);
	CHECK(b != a);
	CHECK_EQ(corio_accept(l, &c), 0);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_accept(l, &c), 0);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_close(a), -EINVAL); /* still refused; b untouched */
	CHECK_EQ(corio_send(b, "ok", 2), 2);
	CHECK_EQ(corio_close(b), 0);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, stale_socket_handle_is_einval_not_a_double_free, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, stale_sock_entry, NULL);
}

/* ---- another shard's socket: API misuse, as another shard's TLS session ---------- */

/* The rule written once (docs/DESIGN.md): a call on another shard's object
 * is misuse, corio__misuse's -EPERM with a message naming the call in
 * release builds, an abort in debug builds; net's sockets and streams now
 * do what tls's sessions did. */
static int foreign_ret;

static intptr_t foreign_send(void *arg)
{
	intptr_t r = corio_send(arg, "x", 1);

	snprintf(th_misuse_err, sizeof(th_misuse_err), "%s", corio_last_error());
	return r;
}

static void foreign_entry(void *arg)
{
	struct corio_sock *s, *c;
	intptr_t r = 0;

	(void)arg;
	if (corio_shard_id() != 0)
		return; /* entry runs on every shard: shard 0's socket, shard 1's call */
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_call(1, foreign_send, s, &r), 0);
	foreign_ret = (int)r;
	CHECK_EQ(corio_close(s), 0);
	CHECK_EQ(corio_close(c), 0);
}

static int foreign_socket_send(void)
{
	struct corio_config cfg = th_cfg(2);
	int ret = corio_run(&cfg, foreign_entry, NULL);

	return ret || atomic_load(&th_failures) ? -1000 : foreign_ret;
}

Test(net, another_shards_socket_is_misuse, .timeout = 60)
{
	th_misuse(foreign_socket_send, "corio_send");
}
