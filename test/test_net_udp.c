/* SPDX-License-Identifier: MIT */
/*
 * Networking, UDP: datagram boundaries over IPv4 and IPv6 (and beside a
 * stream ring), corio_recv on a socket that received through the ring,
 * empty datagrams, ICMP errors reported once, direct and ring sendto in
 * order, copies of the payload only, and datagrams longer than a ring
 * buffer's room (EMSGSIZE).
 */
#include "net_helpers.h"

/* ---- UDP ---------------------------------------------------------------------------- */

static void udp_entry(void *arg)
{
	const char *bind_at = arg;
	static const size_t sizes[] = { 1, 0, 100, 1000, 1472, 7, 9000 };
	struct corio_sock *srv, *cli;
	struct sockaddr_storage sa, ca, from;
	socklen_t salen, calen, flen;
	uint8_t out[9000], in[9100];
	size_t n = sizeof(sizes) / sizeof(sizes[0]);

	CHECK_EQ(corio_udp_bind(bind_at, &srv), 0);
	CHECK_EQ(corio_udp_bind(bind_at, &cli), 0);
	if (!srv || !cli)
		return;
	CHECK_EQ(corio_sock_local_addr(srv, &sa, &salen), 0);
	CHECK_EQ(corio_sock_local_addr(cli, &ca, &calen), 0);
	/* round 1: copying receive; round 2: borrowed (multishot recvmsg) */
	for (int round = 0; round < 2; round++) {
		for (size_t k = 0; k < n; k++) {
			fill(out, sizes[k], k + 10 * (size_t)round);
			CHECK_EQ(corio_sendto(cli, out, sizes[k], (struct sockaddr *)&sa, salen),
				 sizes[k]);
		}
		for (size_t k = 0; k < n; k++) {
			ssize_t r;
			struct corio_buf b = { 0 };

			flen = sizeof(from);
			memset(&from, 0, sizeof(from));
			if (round == 0) {
				r = corio_recvfrom(srv, in, sizeof(in), (struct sockaddr *)&from, &flen);
			} else {
				r = corio_recvfrom_buf(srv, &b, (struct sockaddr *)&from, &flen);
				if (r >= 0 && b.data)
					memcpy(in, b.data, (size_t)r);
			}
			CHECK_EQ(r, sizes[k]); /* one datagram per receive, boundaries kept */
			fill(out, sizes[k], k + 10 * (size_t)round);
			CHECK(r < 0 || memcmp(in, out, (size_t)r) == 0);
			CHECK_EQ(flen, calen);
			CHECK(memcmp(&from, &ca, calen) == 0);
			corio_buf_release(&b);
		}
	}
	/* truncation: a short buffer gets the head of the datagram only */
	{
		struct corio_sock *t;
		struct sockaddr_storage ta;
		socklen_t talen;

		CHECK_EQ(corio_udp_bind(bind_at, &t), 0);
		CHECK_EQ(corio_sock_local_addr(t, &ta, &talen), 0);
		fill(out, 500, 3);
		CHECK_EQ(corio_sendto(cli, out, 500, (struct sockaddr *)&ta, talen), 500);
		CHECK_EQ(corio_sendto(cli, out, 3, (struct sockaddr *)&ta, talen), 3);
		CHECK_EQ(corio_recvfrom(t, in, 10, NULL, NULL), 10);
		CHECK(memcmp(in, out, 10) == 0);
		CHECK_EQ(corio_recvfrom(t, in, 10, NULL, NULL), 3); /* the next datagram */
		CHECK_EQ(corio_close(t), 0);
	}
	CHECK_EQ(corio_close(srv), 0);
	CHECK_EQ(corio_close(cli), 0);
}

Test(net, udp_datagram_boundaries_ipv4, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, udp_entry, "127.0.0.1:0");
}

Test(net, udp_datagram_boundaries_ipv6, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	if (!have_ipv6_loopback())
		cr_skip_test("no IPv6 loopback (::1) on this machine");
	th_run(&cfg, udp_entry, "[::1]:0");
}

/* ---- corio_recv on a UDP socket that received through the ring ------------------------ */

static void udp_recv_copy_entry(void *arg)
{
	struct corio_sock *srv, *cli;
	struct sockaddr_storage sa;
	socklen_t salen;
	struct corio_buf b;
	char buf[64];

	(void)arg;
	CHECK_EQ(corio_udp_bind("127.0.0.1:0", &srv), 0);
	CHECK_EQ(corio_udp_bind("127.0.0.1:0", &cli), 0);
	CHECK_EQ(corio_sock_local_addr(srv, &sa, &salen), 0);
	CHECK_EQ(corio_sendto(cli, "one", 3, (struct sockaddr *)&sa, salen), 3);
	CHECK_EQ(corio_recvfrom_buf(srv, &b, NULL, NULL), 3); /* the ring path from now on */
	corio_buf_release(&b);
	CHECK_EQ(corio_sendto(cli, "two", 3, (struct sockaddr *)&sa, salen), 3);
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(corio_recv(srv, buf, sizeof(buf)), 3); /* the datagram, not its header */
	CHECK(memcmp(buf, "two", 3) == 0);
	CHECK_EQ(corio_close(cli), 0);
	CHECK_EQ(corio_close(srv), 0);
}

Test(net, udp_recv_copy_after_buffered_receive, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, udp_recv_copy_entry, NULL);
}

/* ---- UDP and listener regressions (issue 13, helper udpctl) ------------------------ */


/* A UDP socket bound on 127.0.0.1 and its address. */
static struct corio_sock *udp_at(const char *where, struct sockaddr_storage *sa, socklen_t *len)
{
	struct corio_sock *s = NULL;

	CHECK_EQ(corio_udp_bind(where, &s), 0);
	if (s)
		CHECK_EQ(corio_sock_local_addr(s, sa, len), 0);
	return s;
}

/* Switch s to the buffered receive: one datagram through corio_recvfrom_buf. */
static void udp_go_buffered(struct corio_sock *s, struct corio_sock *from,
			    const struct sockaddr_storage *sa, socklen_t salen)
{
	struct corio_buf b;

	CHECK_EQ(corio_sendto(from, "a", 1, (const struct sockaddr *)sa, salen), 1);
	CHECK_EQ(corio_recvfrom_buf(s, &b, NULL, NULL), 1);
	corio_buf_release(&b);
}

/*
 * Empty datagrams on a buffered UDP socket (8-buffer ring): three rings'
 * worth, then a real one, which must arrive; a TCP borrowed receive on the
 * same shard still gets data and no buffer stays lent out. arg: 0 reads
 * with corio_recvfrom, 1 with corio_recvfrom_buf (a 0 result holds no
 * buffer, so not releasing it leaks nothing).
 */
static void udp_empty_entry(void *arg)
{
	int borrow = *(int *)arg;
	struct sockaddr_storage sa, ca;
	socklen_t salen, calen;
	struct corio_sock *srv = udp_at("127.0.0.1:0", &sa, &salen);
	struct corio_sock *cli = udp_at("127.0.0.1:0", &ca, &calen);
	struct corio_listener *l;
	struct corio_sock *tc, *ts;
	struct corio_net_stats st;
	struct corio_deadline d;
	struct corio_buf b;
	char where[64], buf[64];
	ssize_t r = -1;

	if (!srv || !cli)
		return;
	udp_go_buffered(srv, cli, &sa, salen);
	for (int i = 0; i < 24; i++)
		CHECK_EQ(corio_sendto(cli, "", 0, (struct sockaddr *)&sa, salen), 0);
	CHECK_EQ(corio_sendto(cli, "hello", 5, (struct sockaddr *)&sa, salen), 5);
	corio_timeout_push(&d, 2000 * MS);
	for (int i = 0; i < 24; i++) {
		if (borrow)
			r = corio_recvfrom_buf(srv, &b, NULL, NULL); /* not released */
		else
			r = corio_recvfrom(srv, buf, sizeof(buf), NULL, NULL);
		CHECK_EQ(r, 0);
		if (r)
			break;
	}
	if (!r) {
		r = corio_recvfrom(srv, buf, sizeof(buf), NULL, NULL);
		CHECK_EQ(r, 5);
		CHECK(r != 5 || !memcmp(buf, "hello", 5));
	}
	corio_deadline_pop(&d);

	/* a TCP borrowed receive on the same shard */
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	CHECK_EQ(corio_tcp_connect(where, &tc), 0);
	CHECK_EQ(corio_accept(l, &ts), 0);
	CHECK_EQ(corio_send(tc, "ping", 4), 4);
	corio_timeout_push(&d, 2000 * MS);
	r = corio_recv_buf(ts, &b);
	corio_deadline_pop(&d);
	CHECK_EQ(r, 4);
	corio_buf_release(&b);
	CHECK_EQ(corio_close(tc), 0);
	CHECK_EQ(corio_close(ts), 0);
	CHECK_EQ(corio_listener_close(l), 0);
	CHECK_EQ(corio_close(srv), 0);
	CHECK_EQ(corio_close(cli), 0);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.bufs_out, 0);
}

Test(net, udp_empty_datagrams_leak_no_buffer, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	int borrow = 0;

	setenv("CORIO_NET_BUFS", "8:4096", 1);
	th_run(&cfg, udp_empty_entry, &borrow);
	borrow = 1;
	th_run(&cfg, udp_empty_entry, &borrow);
	unsetenv("CORIO_NET_BUFS");
}

/*
 * A connected UDP socket whose peer is gone gets ECONNREFUSED (an ICMP
 * port unreachable) once; datagrams after it are delivered, on the copying
 * and the buffered path alike.
 */
static ssize_t udp_rx(struct corio_sock *s, bool borrow, char *buf, size_t len)
{
	struct corio_deadline d;
	struct corio_buf b;
	ssize_t r;

	corio_timeout_push(&d, 2000 * MS);
	if (borrow) {
		r = corio_recvfrom_buf(s, &b, NULL, NULL);
		if (r > 0) {
			memcpy(buf, b.data, (size_t)r < len ? (size_t)r : len);
			corio_buf_release(&b);
		}
	} else {
		r = corio_recvfrom(s, buf, len, NULL, NULL);
	}
	corio_deadline_pop(&d);
	return r;
}

static void udp_icmp_entry(void *arg)
{
	bool borrow = *(int *)arg;
	struct sockaddr_storage aa, pa;
	socklen_t alen, plen;
	struct corio_sock *a = udp_at("127.0.0.1:0", &aa, &alen);
	struct corio_sock *p = udp_at("127.0.0.1:0", &pa, &plen);
	char where[64], buf[16];

	if (!a || !p)
		return;
	CHECK(corio_addr_format((struct sockaddr *)&pa, plen, where, sizeof(where)) > 0);
	CHECK_EQ(connect(corio_sock_fd(a), (struct sockaddr *)&pa, plen), 0);
	if (borrow)
		udp_go_buffered(a, p, &aa, alen);
	CHECK_EQ(corio_close(p), 0); /* nobody at pa now */
	CHECK_EQ(corio_sendto(a, "x", 1, NULL, 0), 1);
	CHECK_EQ(udp_rx(a, borrow, buf, sizeof(buf)), -ECONNREFUSED);
	/* the peer is back: its datagrams arrive */
	CHECK_EQ(corio_udp_bind(where, &p), 0);
	if (!p)
		return;
	CHECK_EQ(corio_sendto(p, "two", 3, (struct sockaddr *)&aa, alen), 3);
	CHECK_EQ(corio_sendto(p, "three", 5, (struct sockaddr *)&aa, alen), 5);
	CHECK_EQ(udp_rx(a, borrow, buf, sizeof(buf)), 3);
	CHECK(!memcmp(buf, "two", 3));
	CHECK_EQ(udp_rx(a, borrow, buf, sizeof(buf)), 5);
	CHECK(!memcmp(buf, "three", 5));
	CHECK_EQ(corio_close(p), 0);
	CHECK_EQ(corio_close(a), 0);
}

Test(net, udp_icmp_error_reported_once, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	int borrow = 0;

	th_run(&cfg, udp_icmp_entry, &borrow);
	borrow = 1;
	th_run(&cfg, udp_icmp_entry, &borrow);
}

/*
 * corio_sendto on UDP tries sendmsg(2) on the spot and goes through the
 * ring only when the socket refuses the datagram at once (EAGAIN). Loopback
 * never fills a UDP send buffer, so CORIO_NET_UDP_EAGAIN makes the first 3
 * direct tries fail that way: those datagrams must still arrive, in order,
 * through the ring, and be counted. An expired deadline or a cancelled
 * fiber sends nothing, on either path.
 */
#define UDP_DIRECT_N 10

static void udp_direct_entry(void *arg)
{
	unsigned expect_again = (unsigned)(uintptr_t)arg;
	struct sockaddr_storage aa, pa;
	socklen_t alen, plen;
	struct corio_sock *a = udp_at("127.0.0.1:0", &aa, &alen);
	struct corio_sock *p = udp_at("127.0.0.1:0", &pa, &plen);
	struct corio_net_stats st0, st1;
	struct corio_deadline d;
	char buf[16];

	if (!a || !p)
		return;
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st0), 0);
	for (int i = 0; i < UDP_DIRECT_N; i++) {
		buf[0] = (char)('a' + i);
		CHECK_EQ(corio_sendto(a, buf, 1, (struct sockaddr *)&pa, plen), 1);
	}
	/* past its deadline: -ETIMEDOUT, and nothing leaves */
	CHECK_EQ(corio_deadline_push(&d, 1), 0);
	CHECK_EQ(corio_sendto(a, "X", 1, (struct sockaddr *)&pa, plen), -ETIMEDOUT);
	corio_deadline_pop(&d);
	CHECK_EQ(corio_sendto(a, "!", 1, (struct sockaddr *)&pa, plen), 1);
	for (int i = 0; i < UDP_DIRECT_N; i++) {
		CHECK_EQ(udp_rx(p, false, buf, sizeof(buf)), 1);
		CHECK_EQ(buf[0], (char)('a' + i));
	}
	CHECK_EQ(udp_rx(p, false, buf, sizeof(buf)), 1);
	CHECK_EQ(buf[0], '!'); /* not 'X' */
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st1), 0);
	CHECK_EQ(st1.udp_send_again - st0.udp_send_again, expect_again);
	CHECK_EQ(st1.ops_out - st0.ops_out, UDP_DIRECT_N + 1);
	CHECK_EQ(corio_close(p), 0);
	CHECK_EQ(corio_close(a), 0);
}

Test(net, udp_sendto_direct_in_order, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, udp_direct_entry, (void *)0);
}

Test(net, udp_sendto_full_buffer_goes_through_the_ring, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_UDP_EAGAIN", "3", 1);
	th_run(&cfg, udp_direct_entry, (void *)3);
}

/* The ring path alone, as before the direct try (and the boundaries test). */
Test(net, udp_sendto_ring_only, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_DISABLE", "udp_direct", 1);
	th_run(&cfg, udp_direct_entry, (void *)0);
	th_run(&cfg, udp_entry, "127.0.0.1:0");
}

/* corio_recv on a UDP socket, copying or buffered: one datagram's payload
 * (truncated to the buffer, the rest dropped, as recv(2)), never the ring's
 * headers. */
static void udp_recv_entry(void *arg)
{
	struct sockaddr_storage sa, ca;
	socklen_t salen, calen;
	struct corio_sock *srv = udp_at("127.0.0.1:0", &sa, &salen);
	struct corio_sock *cli = udp_at("127.0.0.1:0", &ca, &calen);
	char buf[64];

	(void)arg;
	if (!srv || !cli)
		return;
	for (int round = 0; round < 2; round++) {
		if (round)
			udp_go_buffered(srv, cli, &sa, salen);
		CHECK_EQ(corio_sendto(cli, "hello", 5, (struct sockaddr *)&sa, salen), 5);
		CHECK_EQ(corio_sendto(cli, "0123456789", 10, (struct sockaddr *)&sa, salen), 10);
		CHECK_EQ(corio_sendto(cli, "xy", 2, (struct sockaddr *)&sa, salen), 2);
		memset(buf, 0, sizeof(buf));
		CHECK_EQ(corio_recv(srv, buf, sizeof(buf)), 5);
		CHECK(!memcmp(buf, "hello", 5));
		CHECK_EQ(corio_recv(srv, buf, 4), 4);
		CHECK(!memcmp(buf, "0123", 4));
		CHECK_EQ(corio_recv(srv, buf, sizeof(buf)), 2);
		CHECK(!memcmp(buf, "xy", 2));
	}
	CHECK_EQ(corio_close(srv), 0);
	CHECK_EQ(corio_close(cli), 0);
}

Test(net, udp_recv_copies_payload_only, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, udp_recv_entry, NULL);
}

/* Datagrams on both: their own whole-buffer ring beside an incremental
 * stream ring, or the shared one. */
Test(net, udp_datagram_boundaries_beside_stream_ring, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	for (int inc = 0; inc < 2; inc++) {
		if (!pbuf_path(inc))
			continue;
		th_run(&cfg, udp_entry, "127.0.0.1:0");
		run_echo("127.0.0.1:0", 1, false);
	}
}

/* ---- a datagram longer than a ring buffer's payload room is reported ------------- */

/*
 * 1 KiB ring buffers: the multishot recvmsg header (16 bytes) and the room
 * for the sender's address (a sockaddr_storage, 128) leave 880 bytes of
 * payload. 880 bytes arrive whole; 881 used to arrive as 880 without a
 * word, now the call returns -EMSGSIZE (the sender's address filled), the
 * datagram is dropped and counted, and the next call receives the next one.
 * Both the borrowed form and the copy from a buffered socket.
 */
#define TRUNC_BUF  1024
#define TRUNC_ROOM (TRUNC_BUF - 144)

static void udp_trunc_entry(void *arg)
{
	struct sockaddr_storage sa, ca, from;
	socklen_t salen, calen, fromlen;
	struct corio_sock *srv = udp_at("127.0.0.1:0", &sa, &salen);
	struct corio_sock *cli = udp_at("127.0.0.1:0", &ca, &calen);
	static uint8_t out[TRUNC_BUF], in[2 * TRUNC_BUF];
	struct corio_net_stats st;
	struct corio_deadline d;
	struct corio_buf b;
	ssize_t r;

	(void)arg;
	if (!srv || !cli)
		return;
	udp_go_buffered(srv, cli, &sa, salen);
	fill(out, sizeof(out), 5);
	corio_timeout_push(&d, 2000 * MS);
	for (int copy = 0; copy < 2; copy++) {
		/* fits exactly */
		CHECK_EQ(corio_sendto(cli, out, TRUNC_ROOM, (struct sockaddr *)&sa, salen),
			 TRUNC_ROOM);
		if (copy) {
			r = corio_recvfrom(srv, in, sizeof(in), NULL, NULL);
			CHECK_EQ(r, TRUNC_ROOM);
			CHECK(r != TRUNC_ROOM || !memcmp(in, out, TRUNC_ROOM));
		} else {
			r = corio_recvfrom_buf(srv, &b, NULL, NULL);
			CHECK_EQ(r, TRUNC_ROOM);
			CHECK(r != TRUNC_ROOM || !memcmp(b.data, out, TRUNC_ROOM));
			corio_buf_release(&b);
		}
		/* one byte over */
		CHECK_EQ(corio_sendto(cli, out, TRUNC_ROOM + 1, (struct sockaddr *)&sa, salen),
			 TRUNC_ROOM + 1);
		fromlen = sizeof(from);
		memset(&from, 0, sizeof(from));
		if (copy)
			r = corio_recvfrom(srv, in, sizeof(in), (struct sockaddr *)&from, &fromlen);
		else
			r = corio_recvfrom_buf(srv, &b, (struct sockaddr *)&from, &fromlen);
		CHECK_EQ(r, -EMSGSIZE);
		if (!copy && r > 0)
			corio_buf_release(&b); /* the bug: 880 of 881 bytes */
		CHECK(copy || b._owner == NULL);
		CHECK_EQ(fromlen, calen);
		CHECK(!memcmp(&from, &ca, calen));
		/* the next datagram comes through */
		CHECK_EQ(corio_sendto(cli, "next", 4, (struct sockaddr *)&sa, salen), 4);
		r = corio_recvfrom(srv, in, sizeof(in), NULL, NULL);
		CHECK_EQ(r, 4);
	}
	corio_deadline_pop(&d);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.udp_truncated, 2);
	CHECK_EQ(st.bufs_out, 0);
	CHECK_EQ(corio_close(srv), 0);
	CHECK_EQ(corio_close(cli), 0);
}

Test(net, udp_datagram_over_the_buffer_room_is_emsgsize, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_BUFS", "8:1024", 1);
	th_run(&cfg, udp_trunc_entry, NULL);
}
