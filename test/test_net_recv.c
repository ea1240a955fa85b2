/* SPDX-License-Identifier: MIT */
/*
 * Networking, receives: data received before a send error is handed out
 * first (borrowed and copied receives), provided buffers that fit small
 * messages (IOU_PBUF_RING_INC: slices released out of order, a held slice
 * pinning its buffer, on the incremental and whole-buffer paths), many
 * small messages held without running the ring dry, closing a socket
 * another fiber is parked on, and closing one whose parked reader was
 * already handed its bytes.
 */
#include "net_helpers.h"

/* ---- data received before a send error is handed out first ------------------------- */

#define QD_BYTES 8192

static void queued_then_error_entry(void *arg)
{
	bool copy = arg != NULL;
	struct linger lg = { 1, 0 };
	uint8_t out[QD_BYTES], in[QD_BYTES];
	struct corio_buf b;
	struct pair p;
	size_t got;
	ssize_t r, e;

	pair_open(&p, 0, 0);
	fill(out, sizeof(out), 3);
	CHECK_EQ(corio_send(p.c, out, sizeof(out)), sizeof(out));
	/* 1 KiB buffers: the first comes back, the other seven are queued */
	r = corio_recv_buf(p.s, &b);
	CHECK(r > 0 && r <= QD_BYTES);
	got = r > 0 ? (size_t)r : 0;
	if (r > 0)
		memcpy(in, b.data, (size_t)r);
	CHECK_EQ(corio_setsockopt(p.c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	CHECK_EQ(corio_close(p.c), 0); /* reset */
	p.c = NULL;
	/* fails at once (the direct try) or in the kernel (the ring) */
	e = corio_send_buf(p.s, &b);
	CHECK(e == 0 || e == -ECONNRESET || e == -EPIPE);
	r = corio_send(p.s, "x", 1); /* waits for it: the error, kept */
	CHECK(r == -ECONNRESET || r == -EPIPE);
	CHECK(e == 0 || r == e);
	e = r;
	/* what arrived before the reset comes first, then the error */
	for (;;) {
		if (copy) {
			r = got < sizeof(in) ? corio_recv(p.s, in + got, sizeof(in) - got) : corio_recv(p.s, in, 1);
		} else {
			r = corio_recv_buf(p.s, &b);
			if (r > 0) {
				if (got + (size_t)r <= sizeof(in))
					memcpy(in + got, b.data, (size_t)r);
				corio_buf_release(&b);
			}
		}
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	CHECK_EQ(got, QD_BYTES);
	CHECK(memcmp(in, out, sizeof(in)) == 0);
	CHECK(r == e || r == -ECONNRESET);
	pair_close(&p);
}

Test(net, recv_buf_hands_out_queued_data_before_send_error, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_BUFS", "64:1024", 1);
	setenv("CORIO_NET_RECV_RESERVE", "0", 1); /* all 8 KiB queued before the reset */
	th_run(&cfg, queued_then_error_entry, NULL);
}

Test(net, recv_copy_hands_out_queued_data_before_send_error, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_BUFS", "64:1024", 1);
	setenv("CORIO_NET_RECV_RESERVE", "0", 1); /* all 8 KiB queued before the reset */
	th_run(&cfg, queued_then_error_entry, (void *)1);
}

/* ---- provided buffers that fit small messages (IOU_PBUF_RING_INC) ---------------------- */

/* Check that slice b holds the stream's bytes [at, at + b->len) of seed. */
static void check_slice(const struct corio_buf *b, size_t at, size_t seed)
{
	const uint8_t *p = b->data;

	for (size_t i = 0; i < b->len; i++)
		if (p[i] != pat(at + i, seed)) {
			CHECK(!"slice byte differs from what was sent");
			return;
		}
}

/* Send n bytes of the seed pattern, starting at stream offset at, on c, in
 * messages of msg bytes; receive them on s one slice at a time, check and
 * release each. */
static void stream_through(struct pair *p, size_t at, size_t n, size_t msg, size_t seed)
{
	uint8_t out[512];
	size_t sent = 0, got = 0;

	while (got < n) {
		if (sent < n) {
			size_t k = n - sent < msg ? n - sent : msg;

			for (size_t i = 0; i < k; i++)
				out[i] = pat(at + sent + i, seed);
			CHECK_EQ(corio_send(p->c, out, k), (ssize_t)k);
			sent += k;
		}
		while (got < sent) {
			struct corio_buf b;
			ssize_t r = corio_recv_buf(p->s, &b);

			CHECK(r > 0);
			if (r <= 0)
				return;
			check_slice(&b, at + got, seed);
			got += (size_t)r;
			corio_buf_release(&b);
		}
	}
}

#define SL_MSG 100
#define SL_N 6

struct slices_arg {
	bool inc;   /* the path is incremental: slices share buffers */
	bool order; /* the out-of-order test, else the pinned-buffer test */
};

/*
 * Buffers of 256 bytes, 4 (incremental) or 8 (whole: one per message). The
 * server takes SL_N messages of 100 bytes as slices and holds them all
 * (with incremental buffers, two or three share a buffer: checked by their
 * addresses), which pins all but one or two buffers.
 * order: release them out of order (2, 5, 0, 4, 1, 3), checking that the
 * ones still held are intact after each release and after 8 KiB more went
 * through the buffers left (each reused many times; the ring may run dry
 * and be re-armed on the way).
 * pinned: release all but the first (its buffer is full, the kernel done
 * with it, every other slice of it released), stream 8 KiB through, and
 * check the first is intact: its buffer was not handed back while held.
 */
static void slices_entry(void *arg)
{
	const struct slices_arg *a = arg;
	static const int order[SL_N] = { 2, 5, 0, 4, 1, 3 };
	struct corio_buf b[SL_N * 2];
	size_t at[SL_N * 2];
	uint8_t msg[SL_MSG];
	struct corio_net_stats st;
	bool held[SL_N * 2] = { 0 };
	int nb = 0, shared = 0;
	size_t got = 0, total = 0;
	struct pair p;

	pair_open(&p, 0, 0);
	for (int m = 0; m < SL_N; m++) {
		for (size_t i = 0; i < SL_MSG; i++)
			msg[i] = pat(total + i, 3);
		CHECK_EQ(corio_send(p.c, msg, SL_MSG), SL_MSG);
		total += SL_MSG;
		while (got < total && nb < SL_N * 2) {
			ssize_t r = corio_recv_buf(p.s, &b[nb]);

			CHECK(r > 0);
			if (r <= 0)
				return;
			at[nb] = got;
			held[nb++] = true;
			got += (size_t)r;
		}
	}
	CHECK_EQ(got, total);
	for (int i = 1; i < nb; i++)
		if ((char *)b[i].data == (char *)b[i - 1].data + b[i - 1].len)
			shared++;
	if (a->inc)
		CHECK(shared >= 2); /* several slices follow each other in one buffer */
	else
		CHECK_EQ(shared, 0);
	for (int i = 0; i < nb; i++)
		check_slice(&b[i], at[i], 3);
	if (a->order) {
		for (int k = 0; k < SL_N; k++) {
			int i = order[k] < nb ? order[k] : nb - 1;

			if (held[i]) {
				corio_buf_release(&b[i]);
				held[i] = false;
			}
			stream_through(&p, total, 8192 / SL_N, 60, 3);
			total += 8192 / SL_N;
			for (int j = 0; j < nb; j++)
				if (held[j])
					check_slice(&b[j], at[j], 3);
		}
		for (int i = 0; i < nb; i++)
			if (held[i])
				corio_buf_release(&b[i]);
	} else {
		for (int i = 1; i < nb; i++)
			corio_buf_release(&b[i]);
		stream_through(&p, total, 8192, 60, 3);
		total += 8192;
		check_slice(&b[0], at[0], 3);
		CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
		CHECK(st.bufs_out >= 1); /* the pinned one */
		corio_buf_release(&b[0]);
	}
	stream_through(&p, total, 2048, 200, 3);
	pair_close(&p); /* every buffer back: bufs_out == 0 */
}

static void run_slices(bool inc, bool order)
{
	struct corio_config cfg = th_cfg(1);
	struct slices_arg a = { inc, order };

	if (!pbuf_path(inc))
		cr_skip_test("the kernel has no IOU_PBUF_RING_INC (Linux 6.12)");
	setenv("CORIO_NET_BUFS", inc ? "4:256" : "8:256", 1);
	th_run(&cfg, slices_entry, &a);
}

Test(net, pbuf_inc_slices_released_out_of_order, .timeout = 30) { run_slices(true, true); }
Test(net, pbuf_whole_slices_released_out_of_order, .timeout = 30) { run_slices(false, true); }
Test(net, pbuf_inc_held_slice_pins_its_buffer, .timeout = 30) { run_slices(true, false); }
Test(net, pbuf_whole_held_slice_pins_its_buffer, .timeout = 30) { run_slices(false, false); }

/*
 * Many connections, one small message each, held by the server until every
 * one has arrived: with default settings that must not run the ring dry.
 * 768 connections x 64 B: whole buffers would need 768 of the 512 (the
 * receives past 512 would wait forever: each is bounded by 5 s here), where
 * incremental buffers hold them in 3.
 */
#define MC_CONNS 768
#define MC_MSG 64

static void many_small_entry(void *arg)
{
	struct corio_listener *l;
	struct corio_sock **c = calloc(MC_CONNS, sizeof(*c)), **s = calloc(MC_CONNS, sizeof(*s));
	struct corio_buf *b = calloc(MC_CONNS, sizeof(*b));
	struct corio_net_stats st;
	uint8_t msg[MC_MSG];
	char where[64];
	int ok = 0;

	(void)arg;
	CHECK(c && s && b);
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	for (int i = 0; i < MC_CONNS; i++) {
		CHECK_EQ(corio_tcp_connect(where, &c[i]), 0);
		CHECK_EQ(corio_accept(l, &s[i]), 0);
		fill(msg, MC_MSG, (size_t)i);
		CHECK_EQ(corio_send(c[i], msg, MC_MSG), MC_MSG);
	}
	for (int i = 0; i < MC_CONNS; i++) {
		struct corio_deadline d;
		size_t got = 0;

		/* one message may arrive as more than one slice: keep the
		 * first, copy-check the rest through corio_recv */
		CHECK_EQ(corio_timeout_push(&d, 5000000000ull), 0);
		if (corio_recv_buf(s[i], &b[i]) > 0) {
			fill(msg, MC_MSG, (size_t)i);
			CHECK(memcmp(b[i].data, msg, b[i].len) == 0);
			got = b[i].len;
		}
		while (got && got < MC_MSG) {
			uint8_t rest[MC_MSG];
			ssize_t r = corio_recv(s[i], rest, MC_MSG - got);

			if (r <= 0)
				break;
			CHECK(memcmp(rest, msg + got, (size_t)r) == 0);
			got += (size_t)r;
		}
		CHECK_EQ(corio_deadline_pop(&d), 0);
		CHECK_EQ(got, MC_MSG);
		if (got != MC_MSG)
			break;
		ok++;
	}
	CHECK_EQ(ok, MC_CONNS);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
#ifndef CORIO_FAULTS /* fault builds inject ENOBUFS completions on purpose */
	CHECK_EQ(st.enobufs, 0);
#endif
	CHECK(st.bufs_out <= 8); /* 48 KiB of messages in 16 KiB buffers */
	for (int i = 0; i < MC_CONNS; i++) {
		corio_buf_release(&b[i]);
		CHECK_EQ(corio_close(c[i]), 0);
		CHECK_EQ(corio_close(s[i]), 0);
	}
	CHECK_EQ(corio_listener_close(l), 0);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.bufs_out, 0);
	free(c);
	free(s);
	free(b);
}

Test(net, many_small_messages_held_do_not_run_the_ring_dry, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	if (!pbuf_path(true))
		cr_skip_test("the kernel has no IOU_PBUF_RING_INC (Linux 6.12)");
	unsetenv("CORIO_NET_BUFS");
	th_run(&cfg, many_small_entry, NULL);
}

/* ---- closing a socket another fiber is parked on ---------------------------------- */

/*
 * corio_close(s) while another fiber of the shard waits in a receive on s:
 * the waiter returns -EBADF, close completes, and the kernel lets go of the
 * socket (the TCP peer reads end of stream, the UDP port is free again).
 * Before: the borrowed forms, select and the copy from a buffered socket
 * aborted on an assert; the copying forms were never woken, their kernel
 * receive kept the socket open (and received after the close).
 */
enum {
	CR_RECV_BUF,    /* corio_recv_buf */
	CR_RECV_COPY,   /* corio_recv, nothing buffered: a recv into the caller's buffer */
	CR_RECV_COPY_Q, /* corio_recv on a socket that used the ring */
	CR_SELECT,      /* corio_select on a receive item */
	CR_UDP_BUF,     /* corio_recvfrom_buf */
	CR_UDP_COPY,    /* corio_recvfrom, nothing buffered */
};

struct cr_ctx {
	int mode;
	struct corio_sock *s;
	ssize_t res;
	bool started;
};

static int cr_reader(void *arg)
{
	struct cr_ctx *x = arg;
	struct corio_buf b;
	struct corio_sel w[1];
	char buf[64];
	int r;

	x->started = true;
	switch (x->mode) {
	case CR_RECV_BUF:
	case CR_UDP_BUF:
		x->res = x->mode == CR_RECV_BUF ? corio_recv_buf(x->s, &b)
						: corio_recvfrom_buf(x->s, &b, NULL, NULL);
		if (x->res > 0)
			corio_buf_release(&b);
		break;
	case CR_RECV_COPY:
	case CR_RECV_COPY_Q:
		x->res = corio_recv(x->s, buf, sizeof(buf));
		break;
	case CR_SELECT:
		corio_sel_recv(&w[0], x->s, buf, sizeof(buf));
		r = corio_select(w, 1);
		x->res = r == 0 ? w[0].res : 1000 + r;
		break;
	case CR_UDP_COPY:
		x->res = corio_recvfrom(x->s, buf, sizeof(buf), NULL, NULL);
		break;
	}
	return 0;
}

static void close_reader_entry(void *arg)
{
	struct cr_ctx x = { .mode = (int)(intptr_t)arg };
	bool udp = x.mode == CR_UDP_BUF || x.mode == CR_UDP_COPY;
	struct sockaddr_storage ss;
	struct corio_deadline d;
	struct corio_fiber *f;
	struct corio_sock *u2;
	struct corio_buf b;
	struct pair p;
	char where[64], c;
	socklen_t len;

	if (udp) {
		CHECK_EQ(corio_udp_bind("127.0.0.1:0", &x.s), 0);
		CHECK_EQ(corio_sock_local_addr(x.s, &ss, &len), 0);
		CHECK(corio_addr_format((struct sockaddr *)&ss, len, where, sizeof(where)) > 0);
	} else {
		pair_open(&p, 0, 0);
		x.s = p.s;
	}
	if (x.mode == CR_RECV_COPY_Q) {
		/* put the socket on the ring first */
		CHECK_EQ(corio_send(p.c, "x", 1), 1);
		CHECK_EQ(corio_recv_buf(p.s, &b), 1);
		corio_buf_release(&b);
	}
	CHECK_EQ(corio_spawn(cr_reader, &x, NULL, &f), 0);
	while (!x.started)
		corio_yield();
	corio_yield(); /* the reader is parked, its receive submitted */
	CHECK_EQ(corio_close(x.s), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(x.res, -EBADF);
	if (udp) {
		/* the port was let go: it can be bound again */
		CHECK_EQ(corio_udp_bind(where, &u2), 0);
		if (u2)
			CHECK_EQ(corio_close(u2), 0);
		return;
	}
	/* the kernel holds the socket no more: the peer reads end of stream */
	corio_timeout_push(&d, 2000 * 1000000ull);
	CHECK_EQ(corio_recv(p.c, &c, 1), 0);
	corio_deadline_pop(&d);
	p.s = NULL;
	pair_close(&p);
}

static int close_reader_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	int ret = corio_run(&cfg, close_reader_entry, arg);

	if (ret || atomic_load(&th_failures)) {
		fprintf(stderr, "corio_run %d; %s\n", ret, th_msg);
		return 1;
	}
	return 0;
}

#define CLOSE_READER_TEST(name, mode)                                                     \
	Test(net, close_wakes_parked_##name, .timeout = 30)                               \
	{                                                                                  \
		th_child_ok(close_reader_child, (void *)(intptr_t)(mode), 10000, #name);   \
	}
CLOSE_READER_TEST(recv_buf, CR_RECV_BUF)
CLOSE_READER_TEST(recv_copy, CR_RECV_COPY)
CLOSE_READER_TEST(recv_copy_buffered, CR_RECV_COPY_Q)
CLOSE_READER_TEST(select, CR_SELECT)
CLOSE_READER_TEST(udp_recvfrom_buf, CR_UDP_BUF)
CLOSE_READER_TEST(udp_recvfrom_copy, CR_UDP_COPY)

/*
 * Bytes that reach a parked corio_recv_buf go straight into its buffer,
 * not through the socket's queue (net/recv.c hand()). If s is closed after
 * that and before the reader runs, the reader still returns -EBADF, and
 * the buffer it was handed goes back to the ring with the rest of what the
 * close drops (bufs_out is 0 again; pair_close checks it). On both
 * provided-buffer paths: an incremental buffer the kernel still fills is
 * not out of the ring, a whole one is.
 */
static int hc_sender(void *arg)
{
	CHECK_EQ(corio_send(arg, "x", 1), 1);
	return 0;
}

static void handed_then_closed_entry(void *arg)
{
	bool whole = arg != NULL;
	struct cr_ctx x = { .mode = CR_RECV_BUF };
	struct corio_net_stats st;
	struct corio_fiber *f, *g;
	struct pair p;
	uint64_t in0;

	pair_open(&p, 0, 0);
	x.s = p.s;
	CHECK_EQ(corio_spawn(cr_reader, &x, NULL, &f), 0);
	while (!x.started)
		corio_yield();
	corio_yield(); /* the reader is parked, its receive submitted */
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	in0 = st.ops_in;
	/* Sent by another fiber: a send can park (it goes through the ring
	 * under CORIO_FAULTS), and this fiber must stay ready. Yield until
	 * the receive's CQE has been handled: it made the reader ready behind
	 * this fiber, which each yield queues before the turn's reap. */
	CHECK_EQ(corio_spawn(hc_sender, p.c, NULL, &g), 0);
	do {
		corio_yield();
		CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	} while (st.ops_in == in0);
	if (whole)
		CHECK_EQ(st.bufs_out, 1); /* in the reader's hands, not yet run */
	CHECK_EQ(corio_close(x.s), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(x.res, -EBADF);
	CHECK_EQ(corio_join(g, NULL), 0);
	p.s = NULL;
	pair_close(&p);
}

Test(net, close_after_bytes_reach_a_parked_reader_gives_them_back_inc, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	if (!pbuf_path(true))
		cr_skip_test("no incremental provided buffers here");
	th_run(&cfg, handed_then_closed_entry, NULL);
}

Test(net, close_after_bytes_reach_a_parked_reader_gives_them_back_whole, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	pbuf_path(false);
	th_run(&cfg, handed_then_closed_entry, (void *)1);
}
