/* SPDX-License-Identifier: MIT */
/*
 * tools/load/corio-load/corio.c - corio-load's corio engine: one shard per
 * CPU, a fiber per connection (two in open loop: sender and receiver), over
 * TCP, TLS or connected UDP sockets.
 */
#include "load.h"

/* ---- corio engine -------------------------------------------------------------- */

/* Wait until the main thread says go (or abort): 0 or -1. */
static int corio_wait_go(void)
{
	int v;

	while (!(v = atomic_load(&g.go)))
		corio_sleep_ns(50000);
	return v > 0 ? 0 : -1;
}

/* Send on the connection (through its TLS session, if any): len or -errno. */
static ssize_t conn_send(struct cconn *k, const void *p, size_t len)
{
	return k->t ? corio_tls_write(k->t, p, len) : corio_send(k->s, p, len);
}

/* End our side: close_notify over TLS, else a TCP half-close. */
static int conn_shutdown(struct cconn *k)
{
	return k->t ? corio_tls_shutdown(k->t) : corio_shutdown_write(k->s);
}

/* Connect (and with --tls, the handshake), bounded by 5 s: 0, or -1 with
 * the connection failed and counted dead (nothing left open). */
static int conn_open(struct cconn *k)
{
	struct corio_deadline dl;
	int ret;

	corio_timeout_push(&dl, 5000000000ull);
	ret = corio_tcp_connect(g.p.addr, &k->s);
	if (ret) {
		corio_deadline_pop(&dl);
		tool_conn_fail(&k->c, "conn %u: connect %s: %s", k->c.id, g.p.addr, strerror(-ret));
		atomic_fetch_add(&g.dead, 1);
		return -1;
	}
	if (g.tls) {
		ret = corio_tls_connect(g.tls_ctx, k->s, g.tls_name, &k->t);
		if (ret) {
			/* the library's reason names the call and OpenSSL's verdict */
			tool_conn_fail(&k->c, "conn %u: TLS: %s", k->c.id, corio_last_error());
			k->t = NULL;
			corio_close(k->s);
			k->s = NULL;
		} else {
			atomic_store_explicit(&g.tls_version, corio_tls_version(k->t),
					      memory_order_relaxed);
		}
	}
	corio_deadline_pop(&dl);
	if (ret)
		atomic_fetch_add(&g.dead, 1);
	return ret ? -1 : 0;
}

/* Receive until EOF or error; verify and refill (closed loop). */
static int corio_receive(struct cconn *k, int closed)
{
	struct tool_conn *c = &k->c;
	uint64_t meas_end = tool_meas_end(&g.p);

	for (;;) {
		ssize_t n;
		const unsigned char *data;
		struct corio_buf b;
		int done;
		uint64_t now;

		if (k->t) {
			n = corio_tls_read(k->t, k->rx, rx_len());
			data = k->rx;
		} else if (g.recv_copy) {
			n = corio_recv(k->s, k->rx, rx_len());
			data = k->rx;
		} else {
			n = corio_recv_buf(k->s, &b);
			data = b.data;
		}
		if (n <= 0)
			return (int)n;
		now = tool_now_ns();
		done = tool_conn_rx(c, data, (size_t)n, now);
		if (!g.recv_copy && !k->t)
			corio_buf_release(&b);
		if (done < 0)
			return done;
		if (!closed || !done)
			continue;
		if (now < meas_end) {
			ssize_t r;

			tool_conn_fill(c, (unsigned)done, k->tx, now);
			r = conn_send(k, k->tx, (size_t)done * c->size);
			if (r < 0)
				return (int)r;
		} else if (c->rx == c->tx) {
			conn_shutdown(k);
		}
	}
}

/* Open loop: the receiving half. Bounded by the drain deadline like the
 * sender (a spawned fiber does not inherit its spawner's scope): a server
 * that stops answering must not keep the tool running. */
static int corio_receiver(void *arg)
{
	struct cconn *k = arg;
	struct corio_deadline dl;

	corio_deadline_push(&dl, tool_drain_end(&g.p));
	k->rx_status = corio_receive(k, 0);
	corio_deadline_pop(&dl);
	return 0;
}

/* Wait for the receiver, which ends by the drain deadline at the latest.
 * If the join itself gives up first (its own deadline, or a cancel),
 * cancel the receiver and wait again outside the scope: it uses k.
 * Returns 0, or -1 when it could not be waited for (the caller must then
 * leave k->s open). */
/* Open loop (corio engine): sleep until messages of c are due, count a late
 * start, and return how many are due now; 0 once the measured window ends
 * or the connection failed. TCP and UDP senders pace alike. */
static unsigned paced_due(struct tool_conn *c, uint64_t meas_end)
{
	for (;;) {
		uint64_t now = tool_now_ns();
		unsigned n;

		if (now >= meas_end || c->failed)
			return 0;
		n = tool_conn_due_count(c, now, meas_end);
		if (n) {
			if (now - tool_conn_due(c, c->tx) >= (uint64_t)c->interval_ns)
				atomic_fetch_add_explicit(&g.late, 1, memory_order_relaxed);
			return n;
		}
		if (!tool_conn_room(c))
			corio_sleep_ns(20000);
		else
			corio_sleep_until(tool_conn_due(c, c->tx));
	}
}

static int join_receiver(struct corio_fiber *rf)
{
	struct corio_deadline sh;
	int ret;

	if (!corio_join(rf, NULL))
		return 0;
	corio_cancel(rf);
	corio_deadline_shield(&sh);
	ret = corio_join(rf, NULL);
	corio_deadline_pop(&sh);
	if (ret)
		corio_detach(rf); /* only when this fiber is cancelled: never here */
	return ret ? -1 : 0;
}

static int corio_conn_fiber(void *arg)
{
	struct cconn *k = arg;
	struct tool_conn *c = &k->c;
	struct corio_deadline dl;
	uint64_t meas_end;
	int ret;

	if (conn_open(k))
		return 0;
	atomic_fetch_add(&g.connected, 1);
	if (corio_wait_go())
		goto out;
	meas_end = tool_meas_end(&g.p);
	corio_deadline_push(&dl, tool_drain_end(&g.p));
	if (g.p.rate <= 0) {
		tool_conn_fill(c, g.p.pipeline, k->tx, tool_now_ns());
		ret = (int)conn_send(k, k->tx, g.p.pipeline * c->size);
		if (ret >= 0)
			ret = corio_receive(k, 1);
	} else {
		struct corio_fiber *rf;
		unsigned n;

		ret = corio_spawn(corio_receiver, k, NULL, &rf);
		if (ret) {
			tool_conn_fail(c, "conn %u: spawn: %s", c->id, strerror(-ret));
			corio_deadline_pop(&dl);
			goto out;
		}
		while ((n = paced_due(c, meas_end)) != 0) {
			tool_conn_fill(c, n, k->tx, 0);
			ret = (int)conn_send(k, k->tx, (size_t)n * c->size);
			if (ret < 0)
				break;
		}
		if (ret >= 0)
			ret = conn_shutdown(k);
		else
			corio_cancel(rf); /* the send failed or timed out: no echo will end it */
		if (join_receiver(rf)) {
			corio_deadline_pop(&dl);
			tool_conn_fail(c, "conn %u: the receiver did not end", c->id);
			return 0;
		}
		if (ret >= 0)
			ret = k->rx_status;
	}
	corio_deadline_pop(&dl);
	if (ret < 0 && ret != -EPROTO)
		tool_conn_fail(c, "conn %u: %s after %llu of %llu messages", c->id,
			     ret == -ETIMEDOUT ? "echoes missing at the end of the drain time"
					       : strerror(-ret),
			     (unsigned long long)c->rx, (unsigned long long)c->tx);
	else if (ret == 0 && c->rx != c->tx)
		tool_conn_fail(c, "conn %u: server closed after %llu of %llu messages", c->id,
			     (unsigned long long)c->rx, (unsigned long long)c->tx);
out:
	if (k->t)
		corio_tls_close(k->t); /* already shut down, or ends a failed run: bounded */
	corio_close(k->s);
	return 0;
}

/* ---- corio engine, UDP ---------------------------------------------------------- */

/* Send one datagram (message c->tx) stamped t: 0 or -errno (then unsent). */
static int cu_send(struct cconn *k, uint64_t t)
{
	ssize_t r;

	tool_uconn_fill(&k->u, k->tx, t);
	r = corio_sendto(k->s, k->tx, k->u.c.size, NULL, 0);
	if (r < 0) {
		tool_uconn_unfill(&k->u);
		return (int)r;
	}
	return 0;
}

/* Receive echoes until every datagram sent is echoed or lost and the
 * sending is over; closed loop: send one more for each. Bounded by the
 * drain deadline, and each wait by the next datagram's loss time. */
static int cu_receive(struct cconn *k, int closed)
{
	struct tool_uconn *u = &k->u;
	struct tool_conn *c = &u->c;
	uint64_t meas_end = tool_meas_end(&g.p), drain_end = tool_drain_end(&g.p);

	for (;;) {
		uint64_t now = tool_now_ns(), wake;
		struct corio_deadline dl;
		const unsigned char *data;
		struct corio_buf b;
		ssize_t n;
		int r;

		if (now >= drain_end) {
			tool_uconn_expire(u, UINT64_MAX);
			return 0;
		}
		tool_uconn_expire(u, now);
		if (closed && now < meas_end) {
			while (tool_conn_room(c))
				if ((r = cu_send(k, now)) < 0)
					return r;
		}
		if (c->rx == c->tx && (closed ? now >= meas_end : k->send_done))
			return 0;
		wake = tool_uconn_next_loss(u);
		if (wake == UINT64_MAX) /* nothing in flight: until the sender is done */
			wake = meas_end > now + 1000000 ? meas_end : now + 1000000;
		if (wake > drain_end)
			wake = drain_end;
		corio_deadline_push(&dl, wake);
		if (g.recv_copy) {
			n = corio_recvfrom(k->s, k->rx, 65536, NULL, NULL);
			data = k->rx;
		} else {
			n = corio_recvfrom_buf(k->s, &b, NULL, NULL);
			data = b.data;
		}
		corio_deadline_pop(&dl);
		/* A loss time, or the drain's end: the top of the loop tells
		 * which (at the drain's end what is in flight is lost, not an
		 * error; a run stalled by a loaded machine reached it here, CI
		 * 2026-11-29: "errors":4 against a mute server). */
		if (n == -ETIMEDOUT)
			continue;
		if (n < 0)
			return (int)n;
		r = tool_uconn_rx(u, data, (size_t)n, tool_now_ns());
		if (!g.recv_copy)
			corio_buf_release(&b);
		if (r < 0)
			return r;
	}
}

static int cu_receiver(void *arg)
{
	struct cconn *k = arg;
	struct corio_deadline dl;

	corio_deadline_push(&dl, tool_drain_end(&g.p));
	k->rx_status = cu_receive(k, 0);
	corio_deadline_pop(&dl);
	return 0;
}

static int cu_conn_fiber(void *arg)
{
	struct cconn *k = arg;
	struct tool_conn *c = &k->u.c;
	struct sockaddr_storage sa;
	socklen_t sl;
	struct corio_deadline dl;
	int ret;

	ret = corio_udp_bind("127.0.0.1:0", &k->s);
	if (!ret && !(ret = corio_addr_parse(g.p.addr, &sa, &sl)) &&
	    connect(corio_sock_fd(k->s), (struct sockaddr *)&sa, sl))
		ret = -errno;
	if (!ret)
		big_rcvbuf(corio_sock_fd(k->s));
	if (ret) {
		tool_conn_fail(c, "conn %u: udp socket to %s: %s", c->id, g.p.addr, strerror(-ret));
		atomic_fetch_add(&g.dead, 1);
		if (k->s)
			corio_close(k->s);
		return 0;
	}
	atomic_fetch_add(&g.connected, 1);
	if (corio_wait_go())
		goto out;
	corio_deadline_push(&dl, tool_drain_end(&g.p));
	if (g.p.rate <= 0) {
		ret = cu_receive(k, 1);
	} else {
		uint64_t meas_end = tool_meas_end(&g.p);
		struct corio_fiber *rf;
		unsigned n;

		ret = corio_spawn(cu_receiver, k, NULL, &rf);
		if (ret) {
			tool_conn_fail(c, "conn %u: spawn: %s", c->id, strerror(-ret));
			corio_deadline_pop(&dl);
			goto out;
		}
		while ((n = paced_due(c, meas_end)) != 0) {
			while (n-- && (ret = cu_send(k, 0)) == 0)
				;
			if (ret < 0)
				break;
		}
		k->send_done = 1;
		if (ret < 0)
			corio_cancel(rf);
		if (join_receiver(rf)) {
			corio_deadline_pop(&dl);
			tool_conn_fail(c, "conn %u: the receiver did not end", c->id);
			return 0;
		}
		if (ret >= 0)
			ret = k->rx_status;
	}
	corio_deadline_pop(&dl);
	if (ret < 0 && ret != -EPROTO)
		tool_conn_fail(c, "conn %u: %s after %llu datagrams", c->id, strerror(-ret),
			     (unsigned long long)c->tx);
out:
	corio_close(k->s);
	return 0;
}

static void corio_entry(void *arg)
{
	struct cconn *conns = arg;
	unsigned me = corio_shard_id();

	for (unsigned i = me; i < g.p.conns; i += g.workers) {
		int ret = corio_spawn(g.p.udp ? cu_conn_fiber : corio_conn_fiber, &conns[i], NULL, NULL);

		if (ret) {
			tool_worker_fail(&g.ws[me], "spawn: %s", strerror(-ret));
			atomic_fetch_add(&g.dead, 1);
		}
	}
}

/* The corio engine: one shard per worker, the connections spread over them. */
int load_start_corio(void)
{
	struct corio_config cfg;
	int ret;

	m.cc = calloc(g.p.conns, sizeof(*m.cc));
	if (!m.cc)
		return -ENOMEM;
	for (unsigned i = 0; i < g.p.conns; i++) {
		struct cconn *c = &m.cc[i];
		size_t txn = g.p.size * (g.p.rate > 0 ? 4096 : g.p.pipeline);

		if (g.p.udp ? tool_uconn_init(&c->u, i, &g.p, &g.ws[i % g.workers])
			    : tool_conn_init(&c->c, i, &g.p, &g.ws[i % g.workers]))
			return -ENOMEM;
		c->tx = malloc(txn);
		c->rx = g.recv_copy ? malloc(g.p.udp ? 65536 : rx_len()) : NULL; /* --tls: copy */
		if (!c->tx || (g.recv_copy && !c->rx))
			return -ENOMEM;
	}
	corio_config_init(&cfg);
	cfg.shards = g.workers;
	cfg.cpus = g.ncpus ? g.cpus : NULL;
	cfg.idle = g.busy ? CORIO_IDLE_POLL : CORIO_IDLE_BLOCK;
	cfg.stall_ns = 0;
	ret = corio_start(&cfg, corio_entry, m.cc, &m.rt);
	if (ret) {
		fprintf(stderr, "corio-load: corio_start: %s (%s)\n", strerror(-ret),
			corio_last_error());
		return 1;
	}
	return 0;
}
