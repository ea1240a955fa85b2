/* SPDX-License-Identifier: MIT */
/*
 * Networking, corio_copy_bidi / corio_stream_copy_bidi: a client, a proxy
 * in the middle copying both ways, and a server, all on 127.0.0.1. Bytes
 * arrive exactly (a pattern, checked), each way, with the half-close
 * carried: the server reads the client's end of stream while its own reply
 * still flows back. Splice and ring paths; a reset ends both ways; the
 * idle and total deadlines; streams; bad input.
 */
#include "net_helpers.h"

#include <corio/copy.h>

#define MSN 1000000ull
#define UP   (3u << 20) /* client -> server */
#define DOWN (1u << 20) /* server -> client */

struct cp {
	struct corio_sock *client, *a, *b, *server; /* client <-> a | proxy | b <-> server */
	struct corio_copy_opts o;
	struct corio_copy_stats st;
	int ret;
	uint64_t took_ns;
	bool streams;
	int mode; /* 0: exchange; 1: server resets; 2: silence; 3: slow drip */
};

static void cp_open(struct cp *c)
{
	struct corio_listener *l1 = NULL, *l2 = NULL;
	char a1[64], a2[64];

	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l1), 0);
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l2), 0);
	addr_of(l1, a1, sizeof(a1));
	addr_of(l2, a2, sizeof(a2));
	CHECK_EQ(corio_tcp_connect(a1, &c->client), 0);
	CHECK_EQ(corio_accept(l1, &c->a), 0);
	CHECK_EQ(corio_tcp_connect(a2, &c->b), 0);
	CHECK_EQ(corio_accept(l2, &c->server), 0);
	CHECK_EQ(corio_listener_close(l1), 0);
	CHECK_EQ(corio_listener_close(l2), 0);
}

static struct corio_tls_ctx *cp_srv_tls, *cp_cli_tls; /* TLS on the client's side */

static int cp_proxy(void *arg)
{
	struct cp *c = arg;
	uint64_t t0 = corio_now_ns();

	if (c->streams) {
		struct corio_stream *sa = NULL, *sb = NULL;

		if (cp_srv_tls)
			CHECK_EQ(corio_stream_tls_accept(cp_srv_tls, c->a, NULL, &sa), 0);
		else
			CHECK_EQ(corio_stream_sock(c->a, NULL, &sa), 0);
		CHECK_EQ(corio_stream_sock(c->b, NULL, &sb), 0);
		c->ret = corio_stream_copy_bidi(sa, sb, &c->o, &c->st);
		c->took_ns = corio_now_ns() - t0;
		corio_stream_abort(sa);
		corio_stream_abort(sb);
	} else {
		c->ret = corio_copy_bidi(c->a, c->b, &c->o, &c->st);
		c->took_ns = corio_now_ns() - t0;
		corio_close(c->a);
		corio_close(c->b);
	}
	return 0;
}

/* The server: read UP bytes and the end of stream, checking each, then
 * send DOWN bytes back and close. */
static int cp_server(void *arg)
{
	struct cp *c = arg;
	static uint8_t in[64 << 10], out[DOWN];
	size_t got = 0;
	ssize_t n;

	while ((n = corio_recv(c->server, in, sizeof(in))) > 0) {
		for (ssize_t i = 0; i < n; i++)
			if (in[i] != pat(got + (size_t)i, 1)) {
				CHECK(!"a byte client -> server was lost or reordered");
				return 0;
			}
		got += (size_t)n;
	}
	CHECK_EQ(n, 0); /* the client's half-close, carried */
	CHECK_EQ(got, UP);
	fill(out, DOWN, 2);
	CHECK_EQ(corio_send(c->server, out, DOWN), DOWN);
	CHECK_EQ(corio_close(c->server), 0);
	return 0;
}

static int cp_client(void *arg)
{
	struct cp *c = arg;
	static uint8_t buf[UP];

	fill(buf, UP, 1);
	CHECK_EQ(corio_send(c->client, buf, UP), UP);
	CHECK_EQ(corio_shutdown_write(c->client), 0);
	CHECK_EQ(recv_all(c->client, buf, DOWN), DOWN);
	for (size_t i = 0; i < DOWN; i++)
		if (buf[i] != pat(i, 2)) {
			CHECK(!"a byte server -> client was lost or reordered");
			break;
		}
	CHECK_EQ(corio_recv(c->client, buf, 1), 0); /* the server's close, carried */
	CHECK_EQ(corio_close(c->client), 0);
	return 0;
}

/* cp_client over TLS: the half-close is a close_notify */
static int cp_tls_client(void *arg)
{
	struct cp *c = arg;
	static uint8_t buf[UP];
	struct corio_stream *st = NULL;
	size_t got = 0;
	ssize_t n;

	fill(buf, UP, 1);
	CHECK_EQ(corio_stream_tls_connect(cp_cli_tls, c->client, "localhost", NULL, &st), 0);
	if (!st)
		return 0;
	CHECK_EQ(corio_stream_write(st, buf, UP), UP);
	CHECK_EQ(corio_stream_shutdown_write(st), 0);
	while ((n = corio_stream_read(st, buf + got, UP - got)) > 0)
		got += (size_t)n;
	CHECK_EQ(n, 0); /* the server's close, carried as close_notify */
	CHECK_EQ(got, DOWN);
	for (size_t i = 0; i < got; i++)
		if (buf[i] != pat(i, 2)) {
			CHECK(!"a byte server -> client was lost or reordered");
			break;
		}
	corio_stream_abort(st);
	return 0;
}

static void cp_exchange_entry(void *arg)
{
	struct cp *c = arg;
	struct corio_fiber *f[3];

	cp_open(c);
	CHECK_EQ(corio_spawn(cp_proxy, c, NULL, &f[0]), 0);
	CHECK_EQ(corio_spawn(cp_server, c, NULL, &f[1]), 0);
	CHECK_EQ(corio_spawn(cp_srv_tls ? cp_tls_client : cp_client, c, NULL, &f[2]), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(corio_join(f[i], NULL), 0);
	CHECK_EQ(c->ret, 0);
	CHECK_EQ(c->st.a_to_b, UP);
	CHECK_EQ(c->st.b_to_a, DOWN);
	CHECK_EQ(c->st.a_end, 0);
	CHECK_EQ(c->st.b_end, 0);
}

Test(net, copy_bidi_splices_both_ways_and_carries_the_half_close, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct cp c;

	memset(&c, 0, sizeof(c));
	th_run(&cfg, cp_exchange_entry, &c);
	cr_assert_eq(c.st.spliced, 2, "both directions spliced");
}

Test(net, copy_bidi_through_the_ring_moves_the_same_bytes, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct cp c;

	memset(&c, 0, sizeof(c));
	c.o.flags = CORIO_COPY_NO_SPLICE;
	th_run(&cfg, cp_exchange_entry, &c);
	cr_assert_eq(c.st.spliced, 0);
}

Test(net, copy_bidi_between_streams_moves_the_same_bytes, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct cp c;

	memset(&c, 0, sizeof(c));
	c.streams = true;
	th_run(&cfg, cp_exchange_entry, &c);
	cr_assert_eq(c.st.spliced, 0);
}

Test(net, copy_bidi_between_a_tls_stream_and_a_plain_one, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	char dir[] = "/tmp/corio-copy-XXXXXX", pem[64], key[64], cmd[96];
	struct corio_tls_cert_gen g = { .cert_file = pem, .key_file = key,
					.names = "localhost,127.0.0.1" };
	struct corio_tls_cert cert = { pem, key };
	struct corio_tls_ctx_opts so = { .flags = CORIO_TLS_SERVER, .certs = &cert, .ncerts = 1 };
	struct corio_tls_ctx_opts co = { .flags = CORIO_TLS_NO_VERIFY };
	struct cp c;

	cr_assert(mkdtemp(dir));
	snprintf(pem, sizeof(pem), "%s/c.pem", dir);
	snprintf(key, sizeof(key), "%s/c.key", dir);
	cr_assert_eq(corio_tls_cert_generate(&g), 0, "%s", corio_last_error());
	cr_assert_eq(corio_tls_ctx_new(&so, &cp_srv_tls), 0, "%s", corio_last_error());
	cr_assert_eq(corio_tls_ctx_new(&co, &cp_cli_tls), 0, "%s", corio_last_error());
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
	memset(&c, 0, sizeof(c));
	c.streams = true;
	th_run(&cfg, cp_exchange_entry, &c);
	corio_tls_ctx_free(cp_srv_tls);
	corio_tls_ctx_free(cp_cli_tls);
	cp_srv_tls = cp_cli_tls = NULL;
	cr_assert_eq(c.st.spliced, 0);
}

/* ---- a reset ends both; idle and total deadlines ----------------------------------- */

static void cp_fail_entry(void *arg)
{
	struct cp *c = arg;
	struct corio_fiber *f;
	struct linger lg = { 1, 0 };
	char b;

	cp_open(c);
	CHECK_EQ(corio_spawn(cp_proxy, c, NULL, &f), 0);
	if (c->mode == 1) {
		/* one byte through, then the server resets; the client says nothing */
		CHECK_EQ(corio_send(c->client, "r", 1), 1);
		CHECK_EQ(corio_recv(c->server, &b, 1), 1);
		CHECK_EQ(corio_setsockopt(c->server, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
		CHECK_EQ(corio_close(c->server), 0);
		CHECK_EQ(corio_join(f, NULL), 0);
		CHECK(c->ret == -ECONNRESET || c->ret == -EPIPE);
		CHECK(c->took_ns < 5000 * MSN);
		CHECK_EQ(c->st.a_to_b, 1);
		CHECK_EQ(c->st.a_end, 1); /* the client's side had not ended */
		/* the proxy closed its side: the client sees it */
		CHECK(corio_recv(c->client, &b, 1) <= 0);
	} else if (c->mode == 2) {
		CHECK_EQ(corio_join(f, NULL), 0);
		CHECK_EQ(c->ret, -ETIMEDOUT);
		CHECK(c->took_ns >= 200 * MSN && c->took_ns < 2000 * MSN);
		CHECK_EQ(corio_close(c->server), 0);
	} else {
		/* a byte every 30 ms: never idle, but the total deadline ends it */
		for (int i = 0; i < 100 && !c->took_ns; i++) {
			if (corio_send(c->client, "d", 1) != 1 || corio_recv(c->server, &b, 1) != 1)
				break;
			corio_sleep_ns(30 * MSN);
		}
		CHECK_EQ(corio_join(f, NULL), 0);
		CHECK_EQ(c->ret, -ETIMEDOUT);
		CHECK(c->took_ns >= 300 * MSN && c->took_ns < 2000 * MSN);
		CHECK(c->st.a_to_b >= 5);
		CHECK_EQ(corio_close(c->server), 0);
	}
	CHECK_EQ(corio_close(c->client), 0);
}

static void cp_fail(int mode, unsigned flags)
{
	struct corio_config cfg = th_cfg(1);
	struct cp c;

	memset(&c, 0, sizeof(c));
	c.mode = mode;
	c.o.flags = flags;
	if (mode == 2)
		c.o.idle_ns = 200 * MSN;
	if (mode == 3) {
		c.o.idle_ns = 200 * MSN;
		c.o.total_ns = 300 * MSN;
	}
	th_run(&cfg, cp_fail_entry, &c);
}

Test(net, copy_bidi_a_reset_on_one_side_ends_both, .timeout = 30)
{
	cp_fail(1, 0);
	cp_fail(1, CORIO_COPY_NO_SPLICE);
}

Test(net, copy_bidi_idle_deadline_ends_a_silent_pair, .timeout = 30)
{
	cp_fail(2, 0);
	cp_fail(2, CORIO_COPY_NO_SPLICE);
}

Test(net, copy_bidi_total_deadline_ends_a_busy_pair, .timeout = 30)
{
	cp_fail(3, 0);
}

/* ---- bad input ---------------------------------------------------------------------- */

static void cp_bad_entry(void *arg)
{
	struct corio_copy_opts o;
	struct cp c;

	(void)arg;
	memset(&c, 0, sizeof(c));
	memset(&o, 0, sizeof(o));
	cp_open(&c);
	CHECK_EQ(corio_copy_bidi(NULL, c.b, NULL, NULL), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_copy_bidi: a is NULL") != NULL);
	CHECK_EQ(corio_copy_bidi(c.a, c.a, NULL, NULL), -EINVAL);
	CHECK(strstr(corio_last_error(), "the same connection") != NULL);
	o.flags = 0x10;
	CHECK_EQ(corio_copy_bidi(c.a, c.b, &o, NULL), -EINVAL);
	CHECK(strstr(corio_last_error(), "unknown flags 0x10") != NULL);
	o.flags = 0;
	o.reserved[1] = 3;
	CHECK_EQ(corio_copy_bidi(c.a, c.b, &o, NULL), -EINVAL);
	CHECK(strstr(corio_last_error(), "reserved[1] is not zero") != NULL);
	CHECK_EQ(corio_stream_copy_bidi(NULL, NULL, NULL, NULL), -EINVAL);
	corio_close(c.client);
	corio_close(c.a);
	corio_close(c.b);
	corio_close(c.server);
}

Test(net, copy_bidi_bad_input_is_einval_with_a_message, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, cp_bad_entry, NULL);
}
