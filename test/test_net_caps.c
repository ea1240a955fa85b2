/* SPDX-License-Identifier: MIT */
/*
 * Networking, what one connection may hold: buffer-ring exhaustion with slow
 * consumers, an unread connection (or a flood of them) that cannot take the
 * shard's buffers or stop another client's echo, the send queue's bound and
 * its timeout, the queue caps as config, listener and environment fields,
 * owned sends that hold no ring buffer, and many waiting readers on a small
 * ring without an ENOBUFS storm.
 */
#include "net_helpers.h"

/* ---- buffer-ring exhaustion with slow consumers ------------------------------------- */

#define SLOW_BYTES (1u << 20)
#define SLOW_HOLD 3 /* buffers each consumer holds before releasing: 2 * 3 < 8 */

static int slow_server(void *arg)
{
	struct corio_sock *s = arg;
	struct corio_buf held[SLOW_HOLD];
	unsigned nheld = 0;
	size_t got = 0, seed = 0;
	bool bad = false;
	ssize_t r;

	/* the first byte says which client this is */
	while ((r = corio_recv_buf(s, &held[nheld])) > 0) {
		const uint8_t *p = held[nheld].data;

		if (!got)
			seed = p[0] / 13; /* pat(0, seed) == 13 * seed */
		for (ssize_t i = 0; i < r && !bad; i++)
			if (p[i] != pat(got + (size_t)i, seed)) {
				CHECK_EQ(p[i], pat(got + (size_t)i, seed));
				bad = true;
			}
		got += (size_t)r;
		if (++nheld == SLOW_HOLD) {
			for (int k = 0; k < 20; k++) /* slow */
				corio_yield();
			while (nheld)
				corio_buf_release(&held[--nheld]);
		}
	}
	CHECK_EQ(r, 0);
	while (nheld)
		corio_buf_release(&held[--nheld]);
	CHECK_EQ(got, SLOW_BYTES);
	CHECK_EQ(corio_close(s), 0);
	return 0;
}

static int slow_client(void *arg)
{
	const char *where = arg;
	static uint8_t bufs[2][SLOW_BYTES];
	static int next;
	int me = next++;
	struct corio_sock *c;

	fill(bufs[me], SLOW_BYTES, (size_t)me);
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	if (!c)
		return -1;
	CHECK_EQ(corio_send(c, bufs[me], SLOW_BYTES), SLOW_BYTES);
	CHECK_EQ(corio_shutdown_write(c), 0);
	CHECK_EQ(corio_recv(c, bufs[me], 1), 0);
	CHECK_EQ(corio_close(c), 0);
	return 0;
}

static void slow_entry(void *arg)
{
	struct corio_listener *l;
	struct corio_fiber *f[4];
	struct corio_net_stats st;
	char where[64];

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	CHECK_EQ(corio_spawn(slow_client, where, NULL, &f[2]), 0);
	CHECK_EQ(corio_spawn(slow_client, where, NULL, &f[3]), 0);
	for (int i = 0; i < 2; i++) {
		struct corio_sock *s;

		CHECK_EQ(corio_accept(l, &s), 0);
		CHECK_EQ(corio_spawn(slow_server, s, NULL, &f[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		CHECK_EQ(corio_join(f[i], NULL), 0);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK(st.enobufs > 0);
	CHECK_EQ(st.bufs_out, 0);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, ring_exhaustion_loses_nothing, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_BUFS", "8:4096", 1);
	/* per-socket caps only: the shard-wide budget would keep the ring
	 * from running dry, and this test is about what happens when it does */
	setenv("CORIO_NET_RECV_RESERVE", "0", 1);
	th_run(&cfg, slow_entry, NULL);
}

/* ---- one connection that is not read cannot take the shard's buffers ---------------- */

#define FLOOD_BYTES (1u << 20)

static int flooder(void *arg)
{
	struct corio_sock *c = arg;
	uint8_t *buf = malloc(FLOOD_BYTES);

	if (!buf)
		return -ENOMEM;
	fill(buf, FLOOD_BYTES, 7);
	CHECK_EQ(corio_send(c, buf, FLOOD_BYTES), FLOOD_BYTES);
	CHECK_EQ(corio_shutdown_write(c), 0);
	free(buf);
	return 0;
}

static void recv_cap_entry(void *arg)
{
	struct pair p1, p2;
	struct corio_net_stats st;
	struct corio_deadline d;
	struct corio_fiber *f;
	struct corio_buf b, b1;
	uint64_t until;
	size_t got = 0;
	bool bad = false;
	ssize_t r;

	pair_open_opts(&p1, arg); /* arg: p1's listen options, or NULL */
	pair_open(&p2, 0, 0);
	CHECK_EQ(corio_spawn(flooder, p1.c, NULL, &f), 0);
	/* one receive arms p1's multishot; then nobody reads p1 */
	r = corio_recv_buf(p1.s, &b1); /* held until p2 got its data */
	CHECK(r > 0);
	got = r > 0 ? (size_t)r : 0;
	/* until p1's receive stopped (the cap) or emptied the ring (the bug) */
	until = corio_now_ns() + 2000 * 1000000ull;
	do {
		corio_sleep_ns(1000000);
		CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	} while (!st.recv_capped && !st.enobufs && corio_now_ns() < until);
	/* the other connection still gets its data */
	CHECK_EQ(corio_send(p2.c, "ping", 4), 4);
	corio_timeout_push(&d, 1000 * 1000000ull);
	r = corio_recv_buf(p2.s, &b);
	corio_deadline_pop(&d);
	CHECK_EQ(r, 4);
	if (r > 0)
		corio_buf_release(&b);
	corio_buf_release(&b1);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK(st.recv_capped >= 1);
	/* the cap is soft: CQEs posted before the cancel lands still count */
	CHECK(st.bufs_out < 64);
	/* and nothing of p1's stream is lost: read it all, in order */
	while ((r = corio_recv_buf(p1.s, &b)) > 0) {
		const uint8_t *q = b.data;

		for (ssize_t i = 0; i < r && !bad; i++)
			if (q[i] != pat(got + (size_t)i, 7)) {
				CHECK_EQ(q[i], pat(got + (size_t)i, 7));
				bad = true;
			}
		got += (size_t)r;
		corio_buf_release(&b);
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(got, FLOOD_BYTES);
	CHECK_EQ(corio_join(f, NULL), 0);
	pair_close(&p1);
	pair_close(&p2);
}

Test(net, unread_connection_cannot_starve_the_shard, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_BUFS", "64:4096", 1);
	setenv("CORIO_NET_RECV_QUEUE", "8", 1);
	th_run(&cfg, recv_cap_entry, NULL);
}

/* corio_send_buf on a full queue waits for room: bounded by the deadline,
 * which fails that call alone (the next one waits for room on its own). */
static int slow_writer(void *arg)
{
	struct corio_sock *c = arg;
	static uint8_t buf[FLOOD_BYTES];

	corio_send(c, buf, sizeof(buf)); /* ends when the test closes c */
	return 0;
}

static void send_cap_entry(void *arg)
{
	struct corio_net_stats st;
	struct corio_deadline d;
	struct corio_fiber *f;
	struct corio_buf b;
	struct pair p;
	int queued = 0, ret = 0;
	uint64_t full;
	ssize_t r;

	(void)arg;
	pair_open(&p, 16384, 16384);
	CHECK_EQ(corio_spawn(slow_writer, p.c, NULL, &f), 0);
	/* echo everything back into a client that never reads (1.5 s: the
	 * queue must fill before the scope ends, on a loaded machine too) */
	corio_timeout_push(&d, 1500 * 1000000ull);
	while ((r = corio_recv_buf(p.s, &b)) > 0 && (ret = corio_send_buf(p.s, &b)) == 0)
		queued++;
	corio_deadline_pop(&d);
	CHECK(r > 0); /* it was the send that waited, not the receive */
	CHECK_EQ(ret, -ETIMEDOUT);
	CHECK(queued >= 4);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK(st.send_full >= 1);
	CHECK(st.bufs_out < 64);
	/* not sticky: the next call waits for room again (counted), and its own
	 * scope ends it */
	full = st.send_full;
	corio_timeout_push(&d, 1000 * 1000000ull);
	r = corio_recv_buf(p.s, &b);
	corio_deadline_pop(&d);
	CHECK(r > 0);
	corio_timeout_push(&d, 100 * 1000000ull);
	if (r > 0)
		CHECK_EQ(corio_send_buf(p.s, &b), -ETIMEDOUT);
	corio_deadline_pop(&d);
	CHECK(b._owner == NULL); /* taken (released) even then */
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.send_full, full + 1);
	corio_cancel(f);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_close(p.c), 0); /* first: the server's queued sends fail */
	p.c = NULL;
	pair_close(&p);
}

Test(net, send_buf_queue_bound_waits_then_times_out, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_BUFS", "64:4096", 1);
	setenv("CORIO_NET_RECV_QUEUE", "8", 1);
	setenv("CORIO_NET_SEND_QUEUE", "4", 1);
	th_run(&cfg, send_cap_entry, NULL);
}

/* A corio_send_buf whose wait for room times out fails alone: every buffer
 * accepted before it (the call returned 0) reaches the peer, in order. The
 * peer reads nothing until the timeout, then reads the echo to its end. (The
 * timeout used to become the socket's send error, and the next completion
 * dropped the whole queue: 41 accepted calls, 41,984 bytes, 26,624 arrived.) */
#define ST_SEED 9

static int pattern_writer(void *arg)
{
	struct corio_sock *c = arg;
	uint8_t *buf = malloc(FLOOD_BYTES);

	if (!buf)
		return -ENOMEM;
	fill(buf, FLOOD_BYTES, ST_SEED);
	corio_send(c, buf, FLOOD_BYTES); /* ends when the test cancels it */
	free(buf);
	return 0;
}

static int shut_when_sent(void *arg)
{
	/* waits until the queue has drained, then the peer reads end of stream */
	CHECK_EQ(corio_shutdown_write(arg), 0);
	return 0;
}

static void send_timeout_alone_entry(void *arg)
{
	struct corio_deadline d;
	struct corio_fiber *w, *f;
	struct corio_buf b;
	struct pair p;
	uint8_t in[4096];
	size_t accepted = 0, got = 0;
	int calls = 0, ret = 0;
	bool bad = false;
	ssize_t r;

	(void)arg;
	pair_open(&p, 16384, 16384);
	CHECK_EQ(corio_spawn(pattern_writer, p.c, NULL, &w), 0);
	/* echo into a client that does not read yet (1.5 s: the queue fills
	 * long before the scope ends, on a loaded machine too) */
	corio_timeout_push(&d, 1500 * 1000000ull);
	while ((r = corio_recv_buf(p.s, &b)) > 0 && (ret = corio_send_buf(p.s, &b)) == 0) {
		accepted += (size_t)r;
		calls++;
	}
	corio_deadline_pop(&d);
	CHECK(r > 0); /* it was the send that waited, not the receive */
	CHECK_EQ(ret, -ETIMEDOUT);
	CHECK(calls >= 4);
	corio_cancel(w);
	CHECK_EQ(corio_join(w, NULL), 0);
	CHECK_EQ(corio_spawn(shut_when_sent, p.s, NULL, &f), 0);
	/* now read all of it: exactly the accepted calls' bytes, in order (5 s
	 * that must not pass: the bug ends the stream short, without a FIN) */
	corio_timeout_push(&d, 5000 * 1000000ull);
	while ((r = corio_recv(p.c, in, sizeof(in))) > 0) {
		for (ssize_t i = 0; i < r && !bad; i++)
			if (in[i] != pat(got + (size_t)i, ST_SEED)) {
				CHECK_EQ(in[i], pat(got + (size_t)i, ST_SEED));
				bad = true;
			}
		got += (size_t)r;
	}
	corio_deadline_pop(&d);
	CHECK_EQ(r, 0);
	CHECK_EQ(got, accepted);
	CHECK_EQ(corio_join(f, NULL), 0);
	pair_close(&p);
}

Test(net, send_buf_timeout_fails_alone_accepted_buffers_arrive, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_BUFS", "64:4096", 1);
	setenv("CORIO_NET_RECV_QUEUE", "8", 1);
	setenv("CORIO_NET_SEND_QUEUE", "4", 1);
	th_run(&cfg, send_timeout_alone_entry, NULL);
}

/* ---- the queue caps as config and listener fields ----------------------------------- */

/* cfg.net_recv_queue takes effect: the unread-connection test above, with
 * the cap set by the field, on a ring of 16 buffers and no reserve, so only
 * the per-socket cap keeps p1 from taking the whole ring (with the default
 * cap of 16 it would, and p2's receive would find no buffer). */
Test(net, config_recv_queue_caps_an_unread_connection, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	cfg.net_recv_queue = 4;
	setenv("CORIO_NET_BUFS", "16:4096", 1);
	setenv("CORIO_NET_RECV_RESERVE", "0", 1);
	th_run(&cfg, recv_cap_entry, NULL);
}

/*
 * The send queue cap a socket gets, counted exactly. The server's send path
 * is filled first (a client that never reads, small socket buffers); then,
 * in a deadline scope that has already passed, corio_send_buf queues until
 * the cap and the next call, which would have to wait for room, returns
 * -ETIMEDOUT at once.
 */
#define SQ_BUFS 8

struct sq_case {
	unsigned opts_send_queue; /* the listener's send_queue (0: the shard's) */
	int expect;               /* corio_send_buf calls queued before the wait */
};

static void send_queue_cap_entry(void *arg)
{
	const struct sq_case *c = arg;
	struct corio_listen_opts o = { .send_queue = c->opts_send_queue };
	static char fill_buf[1 << 16];
	struct corio_buf b[SQ_BUFS];
	struct corio_deadline d;
	struct pair p;
	int small = 4096, n = 0, ret = 0;

	pair_open_opts(&p, &o);
	CHECK_EQ(corio_setsockopt(p.c, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	CHECK_EQ(corio_setsockopt(p.s, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	/* borrowed buffers, one receive each */
	for (int i = 0; i < SQ_BUFS; i++) {
		CHECK_EQ(corio_send(p.c, "x", 1), 1);
		CHECK_EQ(corio_recv_buf(p.s, &b[i]), 1);
	}
	/* fill the server's send path: the client never reads */
	corio_timeout_push(&d, 500 * 1000000ull);
	while (corio_send(p.s, fill_buf, sizeof(fill_buf)) > 0)
		;
	corio_deadline_pop(&d);
	corio_timeout_push(&d, 1); /* passed before anything waits */
	while (n < SQ_BUFS && (ret = corio_send_buf(p.s, &b[n])) == 0)
		n++;
	corio_deadline_pop(&d);
	CHECK_EQ(ret, -ETIMEDOUT);
	CHECK_EQ(n, c->expect);
	for (int i = 0; i < SQ_BUFS; i++)
		corio_buf_release(&b[i]); /* the ones never queued */
	CHECK_EQ(corio_close(p.c), 0); /* first: the server's queued sends fail */
	p.c = NULL;
	pair_close(&p);
}

Test(net, config_send_queue_caps_send_buf, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct sq_case c = { .opts_send_queue = 0, .expect = 3 };

	cfg.net_send_queue = 3;
	th_run(&cfg, send_queue_cap_entry, &c);
}

Test(net, listener_send_queue_overrides_the_config, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct sq_case c = { .opts_send_queue = 2, .expect = 2 };

	cfg.net_send_queue = 5;
	th_run(&cfg, send_queue_cap_entry, &c);
}

/* The operator's knob wins over the config and the listener (corio.h). */
Test(net, env_send_queue_overrides_config_and_listener, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct sq_case c = { .opts_send_queue = 2, .expect = 3 };

	cfg.net_send_queue = 5;
	setenv("CORIO_NET_SEND_QUEUE", "3", 1);
	th_run(&cfg, send_queue_cap_entry, &c);
}

/* A listener's recv_queue: the unread-connection test on accepted sockets
 * whose cap comes from the listener alone (the config's is the default). */
static void recv_queue_opts_entry(void *arg)
{
	struct corio_listen_opts o = { .recv_queue = 4 }, bad = { .recv_queue = 65536 };
	struct corio_listener *l = NULL;

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", &bad, &l), -EINVAL);
	CHECK(strstr(corio_last_error(), "recv_queue") != NULL);
	recv_cap_entry(&o);
}

Test(net, listener_recv_queue_caps_accepted_sockets, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_BUFS", "16:4096", 1);
	setenv("CORIO_NET_RECV_RESERVE", "0", 1);
	th_run(&cfg, recv_queue_opts_entry, NULL);
}

/* ---- a flood of unread connections cannot stop another client's echo ------------- */

/*
 * An echo server like corio-echo (corio_recv_bufs of 16, corio_send_buf
 * each) on shard 0 with a 64-buffer ring; on shard 1, N = 4 x (64 / 16) =
 * 16 connections that send and never read, then one more client's ping
 * must come back. The per-socket caps alone let each flood connection pin
 * 16 queued receives, 16 queued sends and the 16 buffers its handler
 * holds, so a few of them took the whole ring and the ping was never
 * echoed. A flood client counts itself stalled once a send of it has
 * waited 200 ms (the server no longer drains it); the ping goes when all
 * are, or after 10 s.
 */
#define FL_RING  64
#define FL_CONNS (4 * FL_RING / 16)

static struct {
	_Atomic int port;
	_Atomic int stalled;
	_Atomic int done;
} fl;

static int fl_echo(void *arg)
{
	struct corio_sock *s = arg;
	struct corio_buf b[16];
	int sndbuf = 8192, k;

	corio_setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	while ((k = corio_recv_bufs(s, b, 16)) > 0) {
		int i = 0;

		while (i < k && corio_send_buf(s, &b[i]) == 0)
			i++;
		if (i < k) {
			for (i++; i < k; i++)
				corio_buf_release(&b[i]);
			break;
		}
	}
	corio_close(s);
	return 0;
}

static int fl_acceptor(void *arg)
{
	struct corio_listener *l = arg;
	struct corio_sock *s;

	while (corio_accept(l, &s) == 0)
		CHECK_EQ(corio_spawn(fl_echo, s, NULL, NULL), 0);
	return 0;
}

static int fl_flooder(void *arg)
{
	static uint8_t buf[65536];
	struct corio_sock *c = NULL;
	char where[32];
	int rcvbuf = 4096;
	bool stalled = false;

	(void)arg;
	snprintf(where, sizeof(where), "127.0.0.1:%d", atomic_load(&fl.port));
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	if (!c)
		return 0;
	corio_setsockopt(c, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	for (;;) {
		struct corio_deadline d;
		ssize_t r;

		corio_timeout_push(&d, 200 * MS);
		r = corio_send(c, buf, sizeof(buf));
		corio_deadline_pop(&d);
		if (r == -ETIMEDOUT && !stalled) {
			stalled = true;
			atomic_fetch_add(&fl.stalled, 1);
		} else if (r < 0 && r != -ETIMEDOUT) {
			break; /* cancelled: the test is over */
		}
	}
	CHECK_EQ(corio_close(c), 0);
	return 0;
}

static void fl_clients(void)
{
	struct corio_fiber *f[FL_CONNS];
	struct corio_net_stats st;
	struct corio_deadline d;
	struct corio_sock *c = NULL;
	uint64_t until;
	char where[32], in[4];

	while (!atomic_load(&fl.port))
		corio_yield();
	for (int i = 0; i < FL_CONNS; i++)
		CHECK_EQ(corio_spawn(fl_flooder, NULL, NULL, &f[i]), 0);
	until = corio_now_ns() + 10000 * MS;
	while (atomic_load(&fl.stalled) < FL_CONNS && corio_now_ns() < until)
		corio_sleep_ns(5 * MS);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	fprintf(stderr, "flood: %d of %d stalled, bufs_out %llu of %d, recv_budget %llu\n",
		atomic_load(&fl.stalled), FL_CONNS, (unsigned long long)st.bufs_out, FL_RING,
		(unsigned long long)st.recv_budget);
	/* another client's ping is echoed */
	snprintf(where, sizeof(where), "127.0.0.1:%d", atomic_load(&fl.port));
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	if (c) {
		CHECK_EQ(corio_send(c, "ping", 4), 4);
		corio_timeout_push(&d, 2000 * MS);
		CHECK_EQ(recv_all(c, (uint8_t *)in, 4), 4);
		corio_deadline_pop(&d);
		CHECK(!memcmp(in, "ping", 4));
		CHECK_EQ(corio_close(c), 0);
	}
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK(st.recv_budget > 0); /* the budget's refusals are counted */
	CHECK(st.bufs_out < FL_RING);
	for (int i = 0; i < FL_CONNS; i++) {
		corio_cancel(f[i]);
		CHECK_EQ(corio_join(f[i], NULL), 0);
	}
	atomic_store(&fl.done, 1);
}

static void fl_entry(void *arg)
{
	struct corio_listener *l = NULL;
	struct corio_fiber *acc = NULL;
	struct corio_net_stats st;
	char where[64];

	(void)arg;
	if (corio_shard_id() == 1) {
		fl_clients();
		return;
	}
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	CHECK_EQ(corio_spawn(fl_acceptor, l, NULL, &acc), 0);
	atomic_store(&fl.port, atoi(strrchr(where, ':') + 1));
	while (!atomic_load(&fl.done))
		corio_sleep_ns(5 * MS);
	corio_cancel(acc);
	CHECK_EQ(corio_join(acc, NULL), 0);
	CHECK_EQ(corio_listener_close(l), 0);
	do { /* the handlers see their peers gone and close */
		CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
		if (st.conns_live)
			corio_sleep_ns(MS);
	} while (st.conns_live);
}

static int fl_child(void *arg)
{
	struct corio_config cfg = th_cfg(2);
	int ret;

	(void)arg;
	setenv("CORIO_NET_BUFS", "64:4096", 1);
	ret = corio_run(&cfg, fl_entry, NULL);
	if (ret || atomic_load(&th_failures)) {
		fprintf(stderr, "corio_run %d (%s); %s\n", ret, corio_last_error(), th_msg);
		return 1;
	}
	return 0;
}

Test(net, unread_connections_flood_cannot_stop_another_echo, .timeout = 60)
{
	th_child_ok(fl_child, NULL, 40000, "flood of unread connections");
}

/* ---- owned sends hold no ring buffer ----------------------------------------------- */

/*
 * The receive budget lets a socket that holds no ring buffer take one from
 * the reserve. Records of corio_send_owned hold the caller's memory, not a
 * ring buffer, so a socket whose only queued sends are owned must count as
 * holding nothing. Ring of 2 buffers, reserve 99% (1 buffer): another
 * socket holds the other, so a socket that counted as holding would starve.
 */
static int ow_done_calls;

static void ow_done(void *arg, int res)
{
	(void)arg;
	(void)res;
	ow_done_calls++;
}

static void ow_entry(void *arg)
{
	static uint8_t big[4 << 20];
	struct corio_sock *a = NULL, *ac = NULL, *b = NULL, *bc = NULL;
	struct corio_deadline d;
	struct corio_buf held, got = { 0 };
	int small = 4096;

	(void)arg;
	th_tcp_pair(&b, &bc);
	th_tcp_pair(&a, &ac);
	if (!a || !b)
		return;
	/* b takes the one buffer above the reserve and keeps it */
	CHECK_EQ(corio_send(bc, big, 4096), 4096);
	CHECK_EQ(corio_recv_buf(b, &held), 4096);
	/* a's owned send stays queued: its peer reads nothing */
	corio_setsockopt(a, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	corio_setsockopt(ac, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	CHECK_EQ(corio_send_owned(a, big, sizeof(big), ow_done, NULL), 0);
	corio_yield();
	CHECK(corio_sock_queued(a, NULL) > 0);
	/* a holds no ring buffer: its receive may take the reserve */
	CHECK_EQ(corio_send(ac, "ping", 4), 4);
	corio_timeout_push(&d, 2000 * MS);
	CHECK_EQ(corio_recv_buf(a, &got), 4);
	corio_deadline_pop(&d);
	CHECK(got.len == 4 && !memcmp(got.data, "ping", 4));
	corio_buf_release(&got);
	corio_buf_release(&held);
	CHECK_EQ(corio_close(ac), 0); /* a's send fails with its peer gone */
	CHECK_EQ(corio_close(a), 0);
	while (!ow_done_calls) /* done runs from the loop */
		corio_sleep_ns(MS);
	CHECK_EQ(ow_done_calls, 1);
	CHECK_EQ(corio_close(bc), 0);
	CHECK_EQ(corio_close(b), 0);
}

static int ow_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	int ret;

	(void)arg;
	setenv("CORIO_NET_BUFS", "2:4096", 1);
	setenv("CORIO_NET_RECV_RESERVE", "99", 1);
	ret = corio_run(&cfg, ow_entry, NULL);
	if (ret || atomic_load(&th_failures)) {
		fprintf(stderr, "corio_run %d (%s); %s\n", ret, corio_last_error(), th_msg);
		return 1;
	}
	return 0;
}

Test(net, owned_sends_hold_no_ring_buffer_for_the_budget, .timeout = 60)
{
	th_child_ok(ow_child, NULL, 30000, "owned sends and the receive budget");
}

/* ---- many waiting readers on a small ring: no ENOBUFS storm -------------------------- */

/*
 * WR_CONNS connections each send one 4 KiB message at once to an echo
 * server whose ring has 8 buffers of 4 KiB (whole buffers: one message
 * each). The ring runs dry and most receives stop with ENOBUFS; that is
 * expected once per message or so. It used to be once per message per
 * returned buffer: every starved socket with a waiting reader was re-armed
 * as soon as one buffer came back, and all but one stopped again.
 */
#define WR_CONNS 400
#define WR_MSG   4096

static struct {
	_Atomic int port;
	_Atomic int echoed;
	_Atomic int connected;
} wr;

static int wr_echo(void *arg)
{
	struct corio_sock *s = arg;
	struct corio_buf b;
	ssize_t r;

	while ((r = corio_recv_buf(s, &b)) > 0) {
		CHECK_EQ(corio_send(s, b.data, b.len), r);
		corio_buf_release(&b);
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(corio_close(s), 0);
	return 0;
}

static int wr_acceptor(void *arg)
{
	struct corio_spawn_opts so = { .stack_size = 64 * 1024 };
	struct corio_listener *l = arg;
	struct corio_sock *s;

	while (corio_accept(l, &s) == 0)
		CHECK_EQ(corio_spawn(wr_echo, s, &so, NULL), 0);
	return 0;
}

static int wr_client(void *arg)
{
	uint8_t out[WR_MSG], in[WR_MSG];
	struct corio_sock *c = NULL;
	char where[32];

	(void)arg;
	snprintf(where, sizeof(where), "127.0.0.1:%d", atomic_load(&wr.port));
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	atomic_fetch_add(&wr.connected, 1);
	while (atomic_load(&wr.connected) < WR_CONNS)
		corio_sleep_ns(MS);
	if (c) {
		fill(out, sizeof(out), 9);
		CHECK_EQ(corio_send(c, out, sizeof(out)), sizeof(out));
		CHECK_EQ(recv_all(c, in, sizeof(in)), sizeof(in));
		if (!memcmp(in, out, sizeof(in)))
			atomic_fetch_add(&wr.echoed, 1);
		CHECK_EQ(corio_close(c), 0);
	}
	return 0;
}

static void wr_entry(void *arg)
{
	struct corio_spawn_opts so = { .stack_size = 64 * 1024 };
	struct corio_listen_opts o = { .backlog = 1024 };
	struct corio_fiber *acc, *cl[WR_CONNS];
	struct corio_listener *l = NULL;
	struct corio_net_stats st;
	char where[64];

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", &o, &l), 0);
	addr_of(l, where, sizeof(where));
	atomic_store(&wr.port, atoi(strrchr(where, ':') + 1));
	CHECK_EQ(corio_spawn(wr_acceptor, l, NULL, &acc), 0);
	for (int i = 0; i < WR_CONNS; i++)
		CHECK_EQ(corio_spawn(wr_client, NULL, &so, &cl[i]), 0);
	for (int i = 0; i < WR_CONNS; i++)
		CHECK_EQ(corio_join(cl[i], NULL), 0);
	corio_cancel(acc);
	CHECK_EQ(corio_join(acc, NULL), 0);
	CHECK_EQ(corio_listener_close(l), 0);
	do {
		CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
		if (st.conns_live)
			corio_sleep_ns(MS);
	} while (st.conns_live);
	CHECK_EQ(atomic_load(&wr.echoed), WR_CONNS);
	fprintf(stderr, "%d readers on 8 buffers: enobufs %llu, rearms %llu\n", WR_CONNS,
		(unsigned long long)st.enobufs, (unsigned long long)st.rearms);
#ifndef CORIO_FAULTS /* fault builds inject ENOBUFS completions on purpose */
	CHECK(st.enobufs <= 2 * WR_CONNS);
	CHECK(st.rearms <= 3 * WR_CONNS);
#endif
}

Test(net, many_readers_on_a_small_ring_no_enobufs_storm, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct rlimit rl;

	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < 2 * WR_CONNS + 100) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 4 * WR_CONNS
				      ? 4 * WR_CONNS
				      : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < 2 * WR_CONNS + 100)
		cr_skip_test("RLIMIT_NOFILE %lu is below %d", (unsigned long)rl.rlim_cur,
			     2 * WR_CONNS + 100);
	setenv("CORIO_NET_BUFS", "8:4096", 1);
	setenv("CORIO_NET_DISABLE", "pbuf_inc", 1);
	th_run(&cfg, wr_entry, NULL);
}

/* Every -EINVAL a net call returns names the call in corio_last_error()
 * (most had no message, so an older one showed). */
static void net_einval_entry(void *arg)
{
	struct corio_net_stats ns;
	struct corio_sock *sk;
	struct sockaddr_storage ss;
	struct sockaddr sa = { .sa_family = 255 }; /* no such family */
	socklen_t sl = sizeof(ss);
	struct corio_buf b;
	struct iovec iov = { 0 };
	char buf[64];
	int v = 0;

	(void)arg;
	CHECK_EINVAL_NAMES(corio_addr_format(NULL, 0, buf, sizeof(buf)), "corio_addr_format");
	CHECK_EINVAL_NAMES(corio_addr_format(&sa, sizeof(sa), buf, sizeof(buf)),
			   "corio_addr_format");
	CHECK_EINVAL_NAMES(corio_addr_port(NULL), "corio_addr_port");
	CHECK_EINVAL_NAMES(corio_addr_port(&sa), "corio_addr_port");
	CHECK_EINVAL_NAMES(corio_tcp_listen("127.0.0.1:0", NULL, NULL), "corio_tcp_listen");
	CHECK_EINVAL_NAMES(corio_unix_listen("x", NULL, NULL), "corio_unix_listen");
	CHECK_EINVAL_NAMES(corio_accept(NULL, NULL), "corio_accept");
	CHECK_EINVAL_NAMES(corio_accept(NULL, &sk), "corio_accept");
	CHECK_EINVAL_NAMES(corio_listener_addr(NULL, &ss, &sl), "corio_listener_addr");
	CHECK_EINVAL_NAMES(corio_listener_fd(NULL), "corio_listener_fd");
	CHECK_EINVAL_NAMES(corio_listener_close(NULL), "corio_listener_close");
	CHECK_EINVAL_NAMES(corio_accept_dispatch(NULL, 0, NULL, NULL), "corio_accept_dispatch");
	CHECK_EINVAL_NAMES(corio_tcp_connect("127.0.0.1:1", NULL), "corio_tcp_connect");
	CHECK_EINVAL_NAMES(corio_unix_connect("x", NULL), "corio_unix_connect");
	CHECK_EINVAL_NAMES(corio_sock_from_fd(0, NULL), "corio_sock_from_fd");
	CHECK_EINVAL_NAMES(corio_sock_release_fd(NULL), "corio_sock_release_fd");
	CHECK_EINVAL_NAMES(corio_recv(NULL, buf, 1), "corio_recv");
	CHECK_EINVAL_NAMES(corio_recv_buf(NULL, NULL), "corio_recv_buf");
	CHECK_EINVAL_NAMES(corio_recv_buf(NULL, &b), "corio_recv_buf");
	CHECK_EINVAL_NAMES(corio_send(NULL, buf, 1), "corio_send");
	CHECK_EINVAL_NAMES(corio_sendv(NULL, &iov, 1, NULL), "corio_sendv");
	CHECK_EINVAL_NAMES(corio_shutdown_write(NULL), "corio_shutdown_write");
	CHECK_EINVAL_NAMES(corio_close(NULL), "corio_close");
	CHECK_EINVAL_NAMES(corio_udp_bind("127.0.0.1:0", NULL), "corio_udp_bind");
	CHECK_EINVAL_NAMES(corio_sendto(NULL, buf, 1, NULL, 0), "corio_sendto");
	CHECK_EINVAL_NAMES(corio_recvfrom(NULL, buf, 1, NULL, NULL), "corio_recvfrom");
	CHECK_EINVAL_NAMES(corio_recvfrom_buf(NULL, NULL, NULL, NULL), "corio_recvfrom_buf");
	CHECK_EINVAL_NAMES(corio_sock_fd(NULL), "corio_sock_fd");
	CHECK_EINVAL_NAMES(corio_sock_local_addr(NULL, &ss, &sl), "corio_sock_local_addr");
	CHECK_EINVAL_NAMES(corio_sock_peer_addr(NULL, &ss, &sl), "corio_sock_peer_addr");
	CHECK_EINVAL_NAMES(corio_setsockopt(NULL, SOL_SOCKET, SO_REUSEADDR, &v, sizeof(v)),
			   "corio_setsockopt");
	CHECK_EINVAL_NAMES(corio_getsockopt(NULL, SOL_SOCKET, SO_REUSEADDR, &v, &sl),
			   "corio_getsockopt");
	CHECK_EINVAL_NAMES(corio_net_stats_get(NULL, 99, &ns), "corio_net_stats_get");
}

Test(net, every_einval_names_its_call, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, net_einval_entry, NULL);
}
