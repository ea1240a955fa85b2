/* SPDX-License-Identifier: MIT */
/*
 * Networking, corio_serve: every shard serves one port with a handler per
 * connection; the drain lets handlers finish, then cancels them after
 * drain_ns; the idle deadline; max_conns; accept dispatch; TLS and plain
 * streams; bad input; cfg.signals blocked in the thread that starts the
 * runtime.
 */
#include "net_helpers.h"

#include <corio/serve.h>

#define MSN 1000000ull

static _Atomic int sv_port;
static _Atomic int sv_ready_calls;

static void sv_ready(const struct sockaddr *a, socklen_t len, void *arg)
{
	(void)len;
	(void)arg;
	atomic_store(&sv_port, corio_addr_port(a));
	atomic_fetch_add(&sv_ready_calls, 1);
}

/* Wait (yielding) until a shard listens: the port. */
static int sv_wait_port(void)
{
	int p;

	while (!(p = atomic_load(&sv_port)))
		corio_sleep_ns(MSN);
	return p;
}

static int sv_connect(struct corio_sock **c)
{
	char where[64];

	snprintf(where, sizeof(where), "127.0.0.1:%d", sv_wait_port());
	return corio_tcp_connect(where, c);
}

/* ---- every shard, and a drain that lets handlers finish ------------------------ */

struct sv_world {
	_Atomic int handled[4];      /* connections per shard */
	_Atomic int serve_ret[4];
	_Atomic int ended;           /* handlers that returned */
	_Atomic int last_recv;       /* what the held handler's last recv gave */
	struct corio_serve_opts o;
	const char *addr;
	int (*client)(void *arg);
};

static struct sv_world W;

/* Echo until end of stream; one byte 'H' first: hold (a long request). */
static int sv_echo(struct corio_conn *c)
{
	char buf[256];
	ssize_t n;

	atomic_fetch_add(&W.handled[c->shard], 1);
	CHECK(c->arg == &W);
	while ((n = corio_recv(c->sock, buf, sizeof(buf))) > 0)
		if (corio_send(c->sock, buf, (size_t)n) != n)
			break;
	atomic_store(&W.last_recv, (int)n);
	atomic_fetch_add(&W.ended, 1);
	return 0;
}

static void sv_entry(void *arg)
{
	int ret;

	(void)arg;
	if (corio_shard_id() == 0 && W.client)
		CHECK_EQ(corio_spawn(W.client, NULL, NULL, NULL), 0);
	ret = corio_serve(W.addr ? W.addr : "127.0.0.1:0", sv_echo, &W, &W.o);
	atomic_store(&W.serve_ret[corio_shard_id()], ret == 0 ? 1 : ret);
}

static void sv_reset(void)
{
	memset(&W, 0, sizeof(W));
	atomic_store(&sv_port, 0);
	atomic_store(&sv_ready_calls, 0);
	W.o.ready = sv_ready;
}

static int drain_client(void *arg)
{
	struct corio_sock *c[16], *held = NULL, *late = NULL;
	char b[8];
	int ret;

	(void)arg;
	for (int i = 0; i < 16; i++) {
		CHECK_EQ(sv_connect(&c[i]), 0);
		CHECK_EQ(corio_send(c[i], "x", 1), 1);
		CHECK_EQ(corio_recv(c[i], b, 1), 1);
	}
	for (int i = 0; i < 16; i++)
		CHECK_EQ(corio_close(c[i]), 0);
	/* one connection mid-request when the drain starts */
	CHECK_EQ(sv_connect(&held), 0);
	CHECK_EQ(corio_send(held, "a", 1), 1);
	CHECK_EQ(corio_recv(held, b, 1), 1);
	CHECK_EQ(corio_drain(10000 * MSN), 0);
	corio_sleep_ns(20 * MSN); /* the drain reached both shards (a post) */
	/* new connections are refused now */
	ret = sv_connect(&late);
	CHECK(ret == -ECONNREFUSED || ret == -ECONNRESET);
	/* the held one still works, and ends when its client says so */
	CHECK_EQ(corio_send(held, "b", 1), 1);
	CHECK_EQ(corio_recv(held, b, 1), 1);
	CHECK_EQ(b[0], 'b');
	/* the shard serving it has not returned: its drain is not over */
	CHECK(atomic_load(&W.serve_ret[0]) + atomic_load(&W.serve_ret[1]) <= 1);
	CHECK_EQ(corio_close(held), 0);
	return 0;
}

Test(net, serve_every_shard_serves_and_the_drain_lets_handlers_finish, .timeout = 30)
{
	struct corio_config cfg = th_cfg(2);
	uint64_t t0;

	sv_reset();
	W.client = drain_client;
	t0 = corio_now_ns();
	th_run(&cfg, sv_entry, NULL);
	cr_assert(corio_now_ns() - t0 < 5000 * MSN, "the runtime waited for the drain deadline");
	cr_assert_eq(atomic_load(&W.serve_ret[0]), 1);
	cr_assert_eq(atomic_load(&W.serve_ret[1]), 1);
	cr_assert_eq(atomic_load(&sv_ready_calls), 2);
	cr_assert_eq(atomic_load(&W.handled[0]) + atomic_load(&W.handled[1]), 17);
	cr_assert_eq(atomic_load(&W.ended), 17);
	cr_assert_eq(atomic_load(&W.last_recv), 0); /* the held handler saw its end of stream */
}

/* ---- drain_ns: handlers that do not finish are cancelled ------------------------- */

static int cancel_client(void *arg)
{
	struct corio_sock *c = NULL;
	char b;

	(void)arg;
	CHECK_EQ(sv_connect(&c), 0);
	CHECK_EQ(corio_send(c, "a", 1), 1);
	CHECK_EQ(corio_recv(c, &b, 1), 1);
	CHECK_EQ(corio_drain(10000 * MSN), 0);
	/* the handler is cancelled at drain_ns: the server closes */
	CHECK_EQ(corio_recv(c, &b, 1), 0);
	CHECK_EQ(corio_close(c), 0);
	return 0;
}

Test(net, serve_drain_ns_cancels_handlers_that_do_not_finish, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	uint64_t t0;

	sv_reset();
	W.client = cancel_client;
	W.o.drain_ns = 100 * MSN;
	t0 = corio_now_ns();
	th_run(&cfg, sv_entry, NULL);
	cr_assert(corio_now_ns() - t0 < 5000 * MSN, "the runtime waited for the drain deadline");
	cr_assert_eq(atomic_load(&W.serve_ret[0]), 1);
	cr_assert_eq(atomic_load(&W.last_recv), -ECANCELED);
}

/* ---- a cancel of the serving fiber (the runtime stops) ---------------------------- */

static int stop_client(void *arg)
{
	struct corio_sock *c = NULL;
	char b;

	(void)arg;
	CHECK_EQ(sv_connect(&c), 0);
	CHECK_EQ(corio_send(c, "a", 1), 1);
	CHECK_EQ(corio_recv(c, &b, 1), 1);
	corio_shutdown(); /* every fiber cancelled: this one's close still runs */
	corio_close(c);
	return 0;
}

Test(net, serve_returns_ecanceled_when_the_runtime_stops, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	sv_reset();
	W.client = stop_client;
	th_run(&cfg, sv_entry, NULL);
	cr_assert_eq(atomic_load(&W.serve_ret[0]), -ECANCELED);
	cr_assert_eq(atomic_load(&W.ended), 1);
	/* cancelled, or the client's close came first: either way it ended */
	cr_assert(atomic_load(&W.last_recv) == -ECANCELED || atomic_load(&W.last_recv) == 0);
}

/* ---- the idle deadline ------------------------------------------------------------ */

static int idle_client(void *arg)
{
	struct corio_sock *quiet = NULL, *busy = NULL;
	uint64_t t0;
	char b;

	(void)arg;
	CHECK_EQ(sv_connect(&quiet), 0);
	CHECK_EQ(sv_connect(&busy), 0);
	t0 = corio_now_ns();
	/* busy moves a byte every 50 ms for 600 ms: never idle 200 ms */
	for (int i = 0; i < 12; i++) {
		CHECK_EQ(corio_send(busy, "k", 1), 1);
		CHECK_EQ(corio_recv(busy, &b, 1), 1);
		corio_sleep_ns(50 * MSN);
	}
	/* quiet said nothing: its handler was cancelled, the server closed */
	CHECK_EQ(corio_recv(quiet, &b, 1), 0);
	CHECK(corio_now_ns() - t0 >= 600 * MSN);
	CHECK_EQ(atomic_load(&W.ended), 1);
	CHECK_EQ(corio_send(busy, "k", 1), 1);
	CHECK_EQ(corio_recv(busy, &b, 1), 1);
	CHECK_EQ(corio_close(quiet), 0);
	CHECK_EQ(corio_close(busy), 0);
	CHECK_EQ(corio_drain(5000 * MSN), 0);
	return 0;
}

Test(net, serve_idle_ns_cancels_a_connection_that_moves_no_byte, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	sv_reset();
	W.client = idle_client;
	W.o.idle_ns = 200 * MSN;
	th_run(&cfg, sv_entry, NULL);
	cr_assert_eq(atomic_load(&W.serve_ret[0]), 1);
	cr_assert_eq(atomic_load(&W.ended), 2);
}

/* ---- max_conns -------------------------------------------------------------------- */

static int max_client(void *arg)
{
	struct corio_sock *a = NULL, *b = NULL;
	struct corio_net_stats st;
	char x;
	ssize_t r;

	(void)arg;
	CHECK_EQ(sv_connect(&a), 0);
	CHECK_EQ(corio_send(a, "1", 1), 1);
	CHECK_EQ(corio_recv(a, &x, 1), 1);
	CHECK_EQ(sv_connect(&b), 0); /* the kernel takes it; the server closes it */
	r = corio_recv(b, &x, 1);
	CHECK(r == 0 || r == -ECONNRESET);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.conns_refused, 1);
	CHECK_EQ(corio_send(a, "2", 1), 1); /* the first is served on */
	CHECK_EQ(corio_recv(a, &x, 1), 1);
	CHECK_EQ(corio_close(a), 0);
	CHECK_EQ(corio_close(b), 0);
	CHECK_EQ(corio_drain(5000 * MSN), 0);
	return 0;
}

Test(net, serve_max_conns_closes_connections_over_it, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	sv_reset();
	W.client = max_client;
	/* 2: the client's own socket on this shard counts too (conns_live) */
	W.o.max_conns = 2;
	th_run(&cfg, sv_entry, NULL);
	cr_assert_eq(atomic_load(&W.serve_ret[0]), 1);
	cr_assert_eq(atomic_load(&W.handled[0]), 1);
}

/* ---- accept dispatch ----------------------------------------------------------------- */

static int dispatch_client(void *arg)
{
	struct corio_sock *c;
	char b;

	(void)arg;
	for (int i = 0; i < 8; i++) {
		c = NULL;
		CHECK_EQ(sv_connect(&c), 0);
		CHECK_EQ(corio_send(c, "d", 1), 1);
		CHECK_EQ(corio_recv(c, &b, 1), 1);
		CHECK_EQ(corio_close(c), 0);
	}
	CHECK_EQ(corio_drain(5000 * MSN), 0);
	return 0;
}

Test(net, serve_dispatch_hands_connections_to_every_shard, .timeout = 30)
{
	struct corio_config cfg = th_cfg(2);

	sv_reset();
	W.client = dispatch_client;
	W.o.dispatch = CORIO_SERVE_RR;
	th_run(&cfg, sv_entry, NULL);
	cr_assert_eq(atomic_load(&W.serve_ret[0]), 1);
	cr_assert_eq(atomic_load(&W.serve_ret[1]), 1);
	cr_assert_eq(atomic_load(&sv_ready_calls), 1, "shard 0 alone listens");
	cr_assert_eq(atomic_load(&W.handled[0]), 4);
	cr_assert_eq(atomic_load(&W.handled[1]), 4);
}

/* ---- streams: plain (CORIO_SERVE_STREAM) and TLS ------------------------------------- */

static struct corio_tls_ctx *tls_cli;

/* Answer one line, upper-cased, through the stream. */
static int sv_line(struct corio_conn *c)
{
	const void *v;
	char out[64];
	ssize_t n;

	atomic_fetch_add(&W.handled[c->shard], 1);
	CHECK(c->stream != NULL);
	if (!c->stream)
		return 0;
	n = corio_stream_read_until(c->stream, '\n', sizeof(out), &v);
	CHECK(n > 0);
	for (ssize_t i = 0; i < n; i++)
		out[i] = (char)(((const char *)v)[i] & ~0x20);
	out[n - 1] = '\n';
	CHECK_EQ(corio_stream_write(c->stream, out, (size_t)n), n);
	atomic_fetch_add(&W.ended, 1);
	return 0;
}

static void line_entry(void *arg)
{
	(void)arg;
	if (W.client)
		CHECK_EQ(corio_spawn(W.client, NULL, NULL, NULL), 0);
	atomic_store(&W.serve_ret[0], corio_serve("127.0.0.1:0", sv_line, &W, &W.o) ?: 1);
}

static int line_client(void *arg)
{
	struct corio_sock *s = NULL;
	struct corio_stream *st = NULL;
	const void *v;

	(void)arg;
	CHECK_EQ(sv_connect(&s), 0);
	if (tls_cli)
		CHECK_EQ(corio_stream_tls_connect(tls_cli, s, "localhost", NULL, &st), 0);
	else
		CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	if (st) {
		CHECK_EQ(corio_stream_write(st, "hello\n", 6), 6);
		CHECK_EQ(corio_stream_flush(st), 0);
		CHECK_EQ(corio_stream_read_until(st, '\n', 64, &v), 6);
		CHECK(!memcmp(v, "HELLO\n", 6));
		corio_stream_close(st);
	}
	CHECK_EQ(corio_drain(5000 * MSN), 0);
	return 0;
}

Test(net, serve_stream_flag_gives_plain_connections_a_stream, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	sv_reset();
	W.client = line_client;
	W.o.flags = CORIO_SERVE_STREAM;
	tls_cli = NULL;
	th_run(&cfg, line_entry, NULL);
	cr_assert_eq(atomic_load(&W.serve_ret[0]), 1);
	cr_assert_eq(atomic_load(&W.ended), 1);
}

/* A server context on a fresh self-signed certificate, and tls_cli. */
static struct corio_tls_ctx *tls_pair(void)
{
	char dir[] = "/tmp/corio-serve-XXXXXX", pem[64], key[64], cmd[96];
	struct corio_tls_cert_gen g = { .cert_file = pem, .key_file = key,
					.names = "localhost,127.0.0.1" };
	struct corio_tls_cert cert = { pem, key };
	struct corio_tls_ctx_opts so = { .flags = CORIO_TLS_SERVER, .certs = &cert, .ncerts = 1 };
	struct corio_tls_ctx_opts co = { .flags = CORIO_TLS_NO_VERIFY };
	struct corio_tls_ctx *srv = NULL;

	cr_assert(mkdtemp(dir));
	snprintf(pem, sizeof(pem), "%s/c.pem", dir);
	snprintf(key, sizeof(key), "%s/c.key", dir);
	cr_assert_eq(corio_tls_cert_generate(&g), 0, "%s", corio_last_error());
	cr_assert_eq(corio_tls_ctx_new(&so, &srv), 0, "%s", corio_last_error());
	cr_assert_eq(corio_tls_ctx_new(&co, &tls_cli), 0, "%s", corio_last_error());
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
	return srv;
}

Test(net, serve_tls_hands_the_handler_a_tls_stream, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_tls_ctx *srv = tls_pair();

	sv_reset();
	W.client = line_client;
	W.o.tls = srv;
	W.o.idle_ns = 5000 * MSN;
	th_run(&cfg, line_entry, NULL);
	corio_tls_ctx_free(srv);
	corio_tls_ctx_free(tls_cli);
	tls_cli = NULL;
	cr_assert_eq(atomic_load(&W.serve_ret[0]), 1);
	cr_assert_eq(atomic_load(&W.ended), 1);
}

/* The handshake runs in handshake_class, the handler in sched_class
 * (corio/sched.h): a handshake storm takes its class's share. */
static _Atomic int handler_cls = -1;
static int hs_cls_id;

static int sv_line_cls(struct corio_conn *c)
{
	atomic_store(&handler_cls, (int)corio_class_current());
	return sv_line(c);
}

static void cls_entry(void *arg)
{
	struct corio_class_opts req = { .name = "requests", .shares = 100 };
	struct corio_class_opts hs = { .name = "handshakes", .shares = 20 };
	struct corio_class_stats st;

	(void)arg;
	W.o.sched_class = (unsigned)corio_class_create(&req);
	W.o.handshake_class = (unsigned)(hs_cls_id = corio_class_create(&hs));
	CHECK_EQ(corio_spawn(W.client, NULL, NULL, NULL), 0);
	atomic_store(&W.serve_ret[0], corio_serve("127.0.0.1:0", sv_line_cls, &W, &W.o) ?: 1);
	CHECK_EQ(corio_class_stats_get(NULL, 0, (unsigned)hs_cls_id, &st), 0);
	CHECK(st.fibers_run >= 1 && st.cpu_ns > 0); /* the handshake's steps ran there */
}

Test(net, serve_runs_the_tls_handshake_and_the_handler_in_their_classes, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_tls_ctx *srv = tls_pair();

	sv_reset();
	W.client = line_client;
	W.o.tls = srv;
	th_run(&cfg, cls_entry, NULL);
	corio_tls_ctx_free(srv);
	corio_tls_ctx_free(tls_cli);
	tls_cli = NULL;
	cr_assert_eq(atomic_load(&W.serve_ret[0]), 1);
	cr_assert_eq(atomic_load(&W.ended), 1);
	cr_assert_eq(atomic_load(&handler_cls), 1, "the handler ran in class %d, not 'requests' (1)",
		     atomic_load(&handler_cls));
}

/* ---- bad input ------------------------------------------------------------------------ */

static void bad_entry(void *arg)
{
	struct corio_serve_opts o;

	(void)arg;
	CHECK_EQ(corio_serve(NULL, sv_echo, NULL, NULL), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_serve: host_port is NULL") != NULL);
	CHECK_EQ(corio_serve("127.0.0.1:0", NULL, NULL, NULL), -EINVAL);
	CHECK(strstr(corio_last_error(), "handler is NULL") != NULL);
	memset(&o, 0, sizeof(o));
	o.flags = 0x80;
	CHECK_EQ(corio_serve("127.0.0.1:0", sv_echo, NULL, &o), -EINVAL);
	CHECK(strstr(corio_last_error(), "unknown flags 0x80") != NULL);
	o.flags = 0;
	o.dispatch = 7;
	CHECK_EQ(corio_serve("127.0.0.1:0", sv_echo, NULL, &o), -EINVAL);
	CHECK(strstr(corio_last_error(), "unknown dispatch 7") != NULL);
	o.dispatch = 0;
	o.reserved[1] = 1;
	CHECK_EQ(corio_serve("127.0.0.1:0", sv_echo, NULL, &o), -EINVAL);
	CHECK(strstr(corio_last_error(), "reserved[1] is not zero") != NULL);
	o.reserved[1] = 0;
	o.handshake_class = 9;
	CHECK_EQ(corio_serve("127.0.0.1:0", sv_echo, NULL, &o), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_serve: no scheduling class 9") != NULL);
	o.handshake_class = 0;
	CHECK_EQ(corio_serve("db.example:0", sv_echo, NULL, NULL), -EINVAL); /* numeric only */
	CHECK_EQ(corio_sock_bytes(NULL, NULL, NULL), -EINVAL);
}

static int serve_off_shard(void)
{
	return corio_serve("127.0.0.1:0", sv_echo, NULL, NULL);
}

Test(net, serve_bad_input_is_einval_with_a_message, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, bad_entry, NULL);
	th_misuse(serve_off_shard, "corio_serve"); /* -EPERM; a debug build aborts */
}

/* ---- cfg.signals: blocked in the thread that starts the runtime ------------------------ */

static _Atomic int sig_got;

static void sig_entry(void *arg)
{
	int signo = 0;

	(void)arg;
	if (corio_signal_wait(CORIO_SIG(SIGUSR1), &signo) == 0)
		atomic_store(&sig_got, signo);
}

static int sig_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_rt *rt = NULL;
	sigset_t cur;

	(void)arg;
	cfg.signals = CORIO_SIG(SIGUSR1);
	if (corio_start(&cfg, sig_entry, NULL, &rt))
		return 2;
	pthread_sigmask(SIG_BLOCK, NULL, &cur);
	if (!sigismember(&cur, SIGUSR1))
		return 3; /* the calling thread would take the default action */
	/* to this thread itself: blocked here, read by shard 0's signalfd */
	kill(getpid(), SIGUSR1);
	if (corio_wait(rt))
		return 4;
	return atomic_load(&sig_got) == SIGUSR1 ? 0 : 5;
}

Test(net, serve_cfg_signals_are_blocked_in_the_thread_that_starts_the_runtime, .timeout = 30)
{
	th_child_ok(sig_child, NULL, 20000, "SIGUSR1 to a runtime started without a sigmask");
}
