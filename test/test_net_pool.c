/* SPDX-License-Identifier: MIT */
/*
 * Networking, corio_pool_*: outgoing connections kept per key and reused;
 * a peer's FIN or RST found before reuse (the get connects anew, no
 * request fails); broken connections closed; max_idle, max_total (a get
 * waits, or times out), idle expiry, the connect deadline (a TLS
 * handshake nobody answers), keys by TLS context; bad input.
 */
#include "net_helpers.h"

#include <corio/pool.h>

#define MSN 1000000ull

struct pl {
	struct corio_listener *l;
	char addr[64];
	struct corio_sock *srv[8]; /* accepted, in order */
	int nsrv;
};

static void pl_listen(struct pl *s)
{
	memset(s, 0, sizeof(*s));
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &s->l), 0);
	addr_of(s->l, s->addr, sizeof(s->addr));
}

/* Take the next connection the kernel queued (a get that connected). */
static struct corio_sock *pl_accept(struct pl *s)
{
	struct corio_sock *a = NULL;

	CHECK_EQ(corio_accept(s->l, &a), 0);
	if (a && s->nsrv < 8)
		s->srv[s->nsrv++] = a;
	return a;
}

/* One request on c: a byte there and back through the server side a. */
static void pl_ping(struct corio_pool_conn *c, struct corio_sock *a)
{
	char b = 0;

	CHECK_EQ(corio_send(c->sock, "q", 1), 1);
	CHECK_EQ(corio_recv(a, &b, 1), 1);
	CHECK_EQ(corio_send(a, "r", 1), 1);
	CHECK_EQ(corio_recv(c->sock, &b, 1), 1);
	CHECK_EQ(b, 'r');
}

static void pl_close(struct pl *s)
{
	for (int i = 0; i < s->nsrv; i++)
		corio_close(s->srv[i]);
	CHECK_EQ(corio_listener_close(s->l), 0);
}

static struct corio_pool_stats pl_stats(struct corio_pool *p)
{
	struct corio_pool_stats st;

	memset(&st, 0, sizeof(st));
	CHECK_EQ(corio_pool_stats_get(p, &st), 0);
	return st;
}

/* ---- reuse, and dead connections found before use ---------------------------------- */

static void reuse_entry(void *arg)
{
	struct linger lg = { 1, 0 };
	struct corio_pool *p = NULL;
	struct corio_pool_conn *c = NULL, *c2 = NULL;
	struct corio_sock *a, *first;
	struct pl s;
	int fd;

	(void)arg;
	pl_listen(&s);
	CHECK_EQ(corio_pool_new(NULL, &p), 0);
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c), 0);
	first = c->sock;
	a = pl_accept(&s);
	pl_ping(c, a);
	corio_pool_put(c, 0);
	/* the same connection again: no connect */
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c), 0);
	CHECK(c->sock == first);
	pl_ping(c, a);
	CHECK_EQ(pl_stats(p).hits, 1);
	CHECK_EQ(pl_stats(p).connects, 1);
	fd = corio_sock_fd(c->sock);
	corio_pool_put(c, 0);
	/* the server closes it while idle (a keep-alive timeout): the get
	 * finds the FIN and connects anew; the request then works */
	CHECK_EQ(corio_close(a), 0);
	s.srv[0] = NULL;
	s.nsrv = 0;
	CHECK(corio_poll(fd, POLLIN | POLLRDHUP) > 0); /* the FIN is there (not consumed) */
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c), 0);
	CHECK_EQ(pl_stats(p).dead, 1);
	CHECK_EQ(pl_stats(p).connects, 2);
	a = pl_accept(&s);
	pl_ping(c, a);
	fd = corio_sock_fd(c->sock);
	corio_pool_put(c, 0);
	/* a reset while idle: the same */
	CHECK_EQ(corio_setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	CHECK_EQ(corio_close(a), 0);
	s.nsrv = 0;
	CHECK(corio_poll(fd, POLLIN | POLLRDHUP) > 0);
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c), 0);
	CHECK_EQ(pl_stats(p).dead, 2);
	a = pl_accept(&s);
	pl_ping(c, a);
	/* bytes nobody asked for while idle: out of step, not reused */
	fd = corio_sock_fd(c->sock);
	corio_pool_put(c, 0);
	CHECK_EQ(corio_send(a, "?", 1), 1);
	CHECK(corio_poll(fd, POLLIN) > 0);
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c), 0);
	CHECK_EQ(pl_stats(p).dead, 3);
	a = pl_accept(&s);
	/* broken: closed, not kept */
	corio_pool_put(c, 1);
	CHECK_EQ(pl_stats(p).broken, 1);
	CHECK_EQ(pl_stats(p).idle, 0);
	/* two at once: two connections; both kept idle, then reused */
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c), 0);
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c2), 0);
	CHECK(c->sock != c2->sock);
	pl_accept(&s);
	pl_accept(&s);
	corio_pool_put(c, 0);
	corio_pool_put(c2, 0);
	CHECK_EQ(pl_stats(p).idle, 2);
	CHECK_EQ(pl_stats(p).in_use, 0);
	CHECK_EQ(corio_pool_free(p), 0);
	pl_close(&s);
}

Test(net, pool_reuses_and_finds_a_peers_fin_or_rst_before_use, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, reuse_entry, NULL);
}

/* ---- limits: max_idle, max_total, idle expiry ---------------------------------------- */

struct lim {
	struct corio_pool *p;
	const char *addr;
	int ret;
	uint64_t got_at;
};

static int lim_getter(void *arg)
{
	struct lim *l = arg;
	struct corio_pool_conn *c = NULL;

	l->ret = corio_pool_get(l->p, l->addr, NULL, &c);
	l->got_at = corio_now_ns();
	if (!l->ret)
		corio_pool_put(c, 0);
	return 0;
}

static void limits_entry(void *arg)
{
	struct corio_pool_opts o = { .max_idle = 1, .max_total = 2, .idle_ns = 100 * MSN };
	struct corio_pool *p = NULL;
	struct corio_pool_conn *c1 = NULL, *c2 = NULL;
	struct corio_deadline d;
	struct corio_fiber *f;
	struct lim lw;
	struct pl s;
	uint64_t put_at;

	(void)arg;
	pl_listen(&s);
	CHECK_EQ(corio_pool_new(&o, &p), 0);
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c1), 0);
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c2), 0);
	pl_accept(&s);
	pl_accept(&s);
	/* max_total: a third get waits; bounded by its scope */
	CHECK_EQ(corio_timeout_push(&d, 30 * MSN), 0);
	{
		struct corio_pool_conn *c3 = NULL;

		CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c3), -ETIMEDOUT);
	}
	corio_deadline_pop(&d);
	CHECK_EQ(pl_stats(p).waits, 1);
	/* ... and goes on with the connection a put gives back */
	memset(&lw, 0, sizeof(lw));
	lw.p = p;
	lw.addr = s.addr;
	CHECK_EQ(corio_spawn(lim_getter, &lw, NULL, &f), 0);
	corio_yield(); /* it waits */
	CHECK_EQ(lw.got_at, 0);
	put_at = corio_now_ns();
	corio_pool_put(c1, 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(lw.ret, 0);
	CHECK(lw.got_at >= put_at);
	CHECK_EQ(pl_stats(p).connects, 2); /* it took c1: a hit, no connect */
	/* max_idle 1: c1 is idle again (the getter put it back); c2 overflows */
	corio_pool_put(c2, 0);
	CHECK_EQ(pl_stats(p).overflow, 1);
	CHECK_EQ(pl_stats(p).idle, 1);
	/* idle expiry: past idle_ns the idle one is closed, not reused */
	corio_sleep_ns(150 * MSN);
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c1), 0);
	CHECK_EQ(pl_stats(p).expired, 1);
	CHECK_EQ(pl_stats(p).connects, 3);
	pl_accept(&s);
	corio_pool_put(c1, 0);
	CHECK_EQ(corio_pool_free(p), 0);
	pl_close(&s);
}

Test(net, pool_max_total_waits_max_idle_overflows_idle_ns_expires, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, limits_entry, NULL);
}

/* ---- the connect deadline, TLS keys ----------------------------------------------------- */

static struct corio_tls_ctx *pl_tls;

static void connect_entry(void *arg)
{
	struct corio_pool_opts o = { .connect_ns = 150 * MSN };
	struct corio_pool *p = NULL;
	struct corio_pool_conn *c = NULL;
	uint64_t t0;
	struct pl s;

	(void)arg;
	pl_listen(&s);
	CHECK_EQ(corio_pool_new(&o, &p), 0);
	/* TLS to a server that accepts TCP and never answers the handshake */
	t0 = corio_now_ns();
	CHECK_EQ(corio_pool_get(p, s.addr, pl_tls, &c), -ETIMEDOUT);
	CHECK(corio_now_ns() - t0 >= 150 * MSN && corio_now_ns() - t0 < 2000 * MSN);
	pl_accept(&s);
	/* plain to the same host:port is another key: it connects */
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c), 0);
	pl_accept(&s);
	corio_pool_put(c, 0);
	CHECK_EQ(corio_pool_get(p, s.addr, pl_tls, &c), -ETIMEDOUT); /* not the plain one */
	pl_accept(&s);
	CHECK_EQ(pl_stats(p).idle, 1);
	CHECK_EQ(corio_pool_get(p, "127.0.0.1:1", NULL, &c), -ECONNREFUSED);
	CHECK_EQ(corio_pool_free(p), 0);
	pl_close(&s);
}

Test(net, pool_connect_ns_bounds_connect_and_handshake_keys_by_tls_context, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_tls_ctx_opts co = { .flags = CORIO_TLS_NO_VERIFY };

	cr_assert_eq(corio_tls_ctx_new(&co, &pl_tls), 0, "%s", corio_last_error());
	th_run(&cfg, connect_entry, NULL);
	corio_tls_ctx_free(pl_tls);
}

/* ---- bad input ---------------------------------------------------------------------------- */

static void pbad_entry(void *arg)
{
	struct corio_pool_opts o;
	struct corio_pool *p = NULL;
	struct corio_pool_conn *c = NULL;
	struct pl s;

	(void)arg;
	memset(&o, 0, sizeof(o));
	o.flags = 2;
	CHECK_EQ(corio_pool_new(&o, &p), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_pool_new: unknown flags 0x2") != NULL);
	o.flags = 0;
	o.max_total = 2;
	o.max_idle = 3;
	CHECK_EQ(corio_pool_new(&o, &p), -EINVAL);
	CHECK(strstr(corio_last_error(), "max_idle 3 is over max_total 2") != NULL);
	CHECK_EQ(corio_pool_new(NULL, NULL), -EINVAL);
	CHECK_EQ(corio_pool_new(NULL, &p), 0);
	CHECK_EQ(corio_pool_get(p, NULL, NULL, &c), -EINVAL);
	CHECK_EQ(corio_pool_get(NULL, "127.0.0.1:1", NULL, &c), -EINVAL);
	CHECK_EQ(corio_pool_get(p, "127.0.0.1:1", NULL, NULL), -EINVAL);
	/* a lent connection holds the pool */
	pl_listen(&s);
	CHECK_EQ(corio_pool_get(p, s.addr, NULL, &c), 0);
	pl_accept(&s);
	CHECK_EQ(corio_pool_free(p), -EBUSY);
	CHECK(strstr(corio_last_error(), "1 connections are still lent") != NULL);
	corio_pool_put(c, 0);
	CHECK_EQ(corio_pool_free(p), 0);
	CHECK_EQ(corio_pool_free(NULL), -EINVAL);
	pl_close(&s);
}

Test(net, pool_bad_input_is_einval_with_a_message, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, pbad_entry, NULL);
}

/* ---- TLS: a pooled session is reused (its tickets are no sign of trouble) ---------- */

static struct corio_tls_ctx *pl_srv_tls;

static int tls_server(void *arg)
{
	struct pl *s = arg;
	struct corio_stream *st = NULL;
	struct corio_sock *a = NULL;
	const void *v;

	CHECK_EQ(corio_accept(s->l, &a), 0);
	CHECK_EQ(corio_stream_tls_accept(pl_srv_tls, a, NULL, &st), 0);
	if (!st)
		return 0;
	/* two requests on the one connection, a byte each */
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(corio_stream_read_exact(st, 1, &v), 1);
		CHECK_EQ(corio_stream_write(st, "R", 1), 1);
		CHECK_EQ(corio_stream_flush(st), 0);
	}
	corio_stream_close(st);
	return 0;
}

static void tls_entry(void *arg)
{
	struct corio_pool *p = NULL;
	struct corio_pool_conn *c = NULL;
	struct corio_sock *first = NULL;
	struct corio_fiber *f;
	const void *v;
	struct pl s;

	(void)arg;
	pl_listen(&s);
	CHECK_EQ(corio_spawn(tls_server, &s, NULL, &f), 0);
	CHECK_EQ(corio_pool_new(NULL, &p), 0);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(corio_pool_get(p, s.addr, pl_tls, &c), 0);
		if (!c || !c->stream)
			break;
		if (i == 0)
			first = c->sock;
		CHECK(c->sock == first);
		CHECK_EQ(corio_stream_write(c->stream, "Q", 1), 1);
		CHECK_EQ(corio_stream_flush(c->stream), 0);
		CHECK_EQ(corio_stream_read_exact(c->stream, 1, &v), 1);
		corio_pool_put(c, 0);
	}
	CHECK_EQ(pl_stats(p).hits, 1);
	CHECK_EQ(pl_stats(p).connects, 1);
	CHECK_EQ(pl_stats(p).dead, 0);
	CHECK_EQ(corio_pool_free(p), 0); /* closes it: the server's close ends */
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_listener_close(s.l), 0);
}

Test(net, pool_reuses_a_tls_connection, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	char dir[] = "/tmp/corio-pool-XXXXXX", pem[64], key[64], cmd[96];
	struct corio_tls_cert_gen g = { .cert_file = pem, .key_file = key,
					.names = "localhost,127.0.0.1" };
	struct corio_tls_cert cert = { pem, key };
	struct corio_tls_ctx_opts so = { .flags = CORIO_TLS_SERVER, .certs = &cert, .ncerts = 1 };
	struct corio_tls_ctx_opts co = { .flags = CORIO_TLS_NO_VERIFY };

	cr_assert(mkdtemp(dir));
	snprintf(pem, sizeof(pem), "%s/c.pem", dir);
	snprintf(key, sizeof(key), "%s/c.key", dir);
	cr_assert_eq(corio_tls_cert_generate(&g), 0, "%s", corio_last_error());
	cr_assert_eq(corio_tls_ctx_new(&so, &pl_srv_tls), 0, "%s", corio_last_error());
	cr_assert_eq(corio_tls_ctx_new(&co, &pl_tls), 0, "%s", corio_last_error());
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
	th_run(&cfg, tls_entry, NULL);
	corio_tls_ctx_free(pl_srv_tls);
	corio_tls_ctx_free(pl_tls);
}
