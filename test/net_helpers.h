/* SPDX-License-Identifier: MIT */
/*
 * net_helpers.h - what the net suite's files (test/test_net_*.c) share: a
 * byte pattern, a listener's address, exact reads, the echo server and
 * client every family test runs (run_echo), two connected-pair kinds
 * (struct pair; struct sb_pair, whose small socket buffers back up a send
 * queue), and which provided-buffer path a test takes (pbuf_path). Static
 * inline, so a file that uses only some of them still builds warning-free.
 */
#ifndef CORIO_TEST_NET_HELPERS_H
#define CORIO_TEST_NET_HELPERS_H

#include "helpers.h"

#include <poll.h>

#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------ */

static uint8_t pat(size_t i, size_t seed)
{
	return (uint8_t)((i * 7 + seed * 13 + (i >> 8)) & 0xff);
}

static inline void fill(uint8_t *p, size_t n, size_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pat(i, seed);
}

static inline void addr_of(struct corio_listener *l, char *buf, size_t size)
{
	struct sockaddr_storage ss;
	socklen_t len;

	CHECK_EQ(corio_listener_addr(l, &ss, &len), 0);
	CHECK(corio_addr_format((struct sockaddr *)&ss, len, buf, size) > 0);
}

static inline bool have_ipv6_loopback(void)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	int fd = socket(AF_INET6, SOCK_STREAM, 0);
	bool ok;

	if (fd < 0)
		return false;
	ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

/* Read exactly n bytes with corio_recv: n, 0 at EOF, or -errno. */
static inline ssize_t recv_all(struct corio_sock *s, uint8_t *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = corio_recv(s, p + got, n - got);

		if (r <= 0)
			return r;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* Echo every byte back until EOF: through borrowed buffers (1: one at a
 * time, 2: every queued one, sent with one sendv) or a copy (0). */
static inline int echo_conn(struct corio_sock *s, int borrow)
{
	uint8_t buf[8192];
	ssize_t r;

	for (;;) {
		if (borrow == 2) {
			struct corio_buf b[4];
			struct iovec iov[4];
			size_t total = 0;
			int k = corio_recv_bufs(s, b, 4);

			for (int i = 0; i < k; i++) {
				iov[i].iov_base = b[i].data;
				iov[i].iov_len = b[i].len;
				total += b[i].len;
			}
			r = k;
			if (k > 0)
				CHECK_EQ(corio_sendv(s, iov, k, NULL), total);
			for (int i = 0; i < k; i++)
				corio_buf_release(&b[i]);
		} else if (borrow) {
			struct corio_buf b;

			r = corio_recv_buf(s, &b);
			if (r > 0) {
				CHECK_EQ(corio_send(s, b.data, b.len), r);
				corio_buf_release(&b);
			}
		} else {
			r = corio_recv(s, buf, sizeof(buf));
			if (r > 0)
				CHECK_EQ(corio_send(s, buf, (size_t)r), r);
		}
		if (r <= 0)
			break;
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(corio_close(s), 0);
	return 0;
}

/* ---- echo, 1 B .. 1 MiB ------------------------------------------------------- */

struct echo_cfg {
	const char *listen;
	int borrow;   /* server: 0 copy, 1 recv_buf, 2 recv_bufs + sendv */
	bool unix_;
};

struct writer {
	struct corio_sock *s;
	const uint8_t *p;
	size_t n;
	int mode; /* 0 send, 1 sendv, 2 zero-copy */
};

static inline int writer_fn(void *arg)
{
	struct writer *w = arg;
	size_t sent = 0;

	if (w->mode == 1 && w->n >= 3) {
		struct iovec iov[3] = {
			{ (void *)w->p, 1 },
			{ (void *)(w->p + 1), w->n / 2 },
			{ (void *)(w->p + 1 + w->n / 2), w->n - 1 - w->n / 2 },
		};
		CHECK_EQ(corio_sendv(w->s, iov, 3, &sent), w->n);
	} else {
		CHECK_EQ(corio_send_ex(w->s, w->p, w->n, w->mode == 2 ? CORIO_SEND_ZC : 0, &sent),
			 w->n);
	}
	CHECK_EQ(sent, w->n);
	return 0;
}

static inline int echo_server(void *arg)
{
	struct corio_listener *l = arg;
	struct corio_sock *s;
	int nd = 0;
	socklen_t len = sizeof(nd);

	CHECK_EQ(corio_accept(l, &s), 0);
	if (!s)
		return -1;
	if (corio_getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &nd, &len) == 0) /* not Unix */
		CHECK_EQ(nd, 1); /* inherited from the listener */
	/* the fiber's name says which receive path to use */
	return echo_conn(s, strcmp(corio_fiber_name(corio_self()), "copy") == 0 ? 0
			    : strcmp(corio_fiber_name(corio_self()), "borrow") == 0 ? 1 : 2);
}

/* Client side of an echo check: for each size, a writer fiber sends a
 * pattern (rotating over nmodes send modes) while we read it back and
 * verify every byte. Returns the bytes echoed. */
static inline size_t echo_sizes(struct corio_sock *c, uint8_t *out, uint8_t *in, const size_t *sizes,
			 size_t n, int nmodes)
{
	size_t total = 0;

	for (size_t k = 0; k < n; k++) {
		struct writer w = { c, out, sizes[k], (int)(k % (size_t)nmodes) };
		struct corio_fiber *wf;

		fill(out, sizes[k], k);
		memset(in, 0, sizes[k]);
		CHECK_EQ(corio_spawn(writer_fn, &w, NULL, &wf), 0);
		CHECK_EQ(recv_all(c, in, sizes[k]), sizes[k]);
		CHECK_EQ(corio_join(wf, NULL), 0);
		for (size_t i = 0; i < sizes[k]; i++)
			if (in[i] != pat(i, k)) {
				CHECK_EQ(in[i], pat(i, k));
				break;
			}
		total += sizes[k];
	}
	return total;
}

static inline void echo_entry(void *arg)
{
	const struct echo_cfg *ec = arg;
	static const size_t sizes[] = { 1, 2, 100, 1460, 4096, 65536, 300000, 1 << 20 };
	struct corio_listener *l;
	struct corio_fiber *srv;
	struct corio_sock *c;
	char where[128];
	uint8_t *out = malloc(1 << 20), *in = malloc(1 << 20);
	struct corio_net_stats st;
	struct corio_spawn_opts so = {
		.name = ec->borrow == 2 ? "bufs" : ec->borrow ? "borrow" : "copy"
	};
	size_t total;

	if (ec->unix_) {
		snprintf(where, sizeof(where), "@corio-test-%d-%d", (int)getpid(), ec->borrow);
		CHECK_EQ(corio_unix_listen(where, NULL, &l), 0);
	} else {
		CHECK_EQ(corio_tcp_listen(ec->listen, NULL, &l), 0);
		addr_of(l, where, sizeof(where));
	}
	CHECK_EQ(corio_spawn(echo_server, l, &so, &srv), 0);
	if (ec->unix_)
		CHECK_EQ(corio_unix_connect(where, &c), 0);
	else
		CHECK_EQ(corio_tcp_connect(where, &c), 0);
	if (!c)
		return;
	total = echo_sizes(c, out, in, sizes, sizeof(sizes) / sizeof(sizes[0]), 3);
	CHECK_EQ(corio_shutdown_write(c), 0);
	CHECK_EQ(corio_recv(c, in, 1), 0); /* server closed after our EOF */
	CHECK_EQ(corio_join(srv, NULL), 0);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.accepts, 1);
	CHECK_EQ(st.connects, 1);
	CHECK_EQ(st.conns_live, 1);
	CHECK(st.bytes_in >= 2 * total);
	CHECK(st.bytes_out >= 2 * total);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.conns_live, 0);
	CHECK_EQ(st.bufs_out, 0);
	CHECK_EQ(corio_listener_close(l), 0);
	free(out);
	free(in);
}

static inline void run_echo(const char *listen, int borrow, bool unix_)
{
	struct corio_config cfg = th_cfg(1);
	struct echo_cfg ec = { listen, borrow, unix_ };

	th_run(&cfg, echo_entry, &ec);
}

/* A connected pair with small socket buffers, so echoed data backs up in
 * the server's send queue while the client does not read (these tests
 * raise the queue's bound, CORIO_NET_SEND_QUEUE, to hold all of it). */
struct sb_pair {
	struct corio_listener *l;
	struct corio_sock *s, *c; /* server side, client side */
	uint8_t *out;
	size_t n;
};

#define SB_BYTES (1u << 20)

static inline void sb_open(struct sb_pair *p)
{
	char where[64];
	int small = 16384;

	memset(p, 0, sizeof(*p));
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &p->l), 0);
	addr_of(p->l, where, sizeof(where));
	CHECK_EQ(corio_tcp_connect(where, &p->c), 0);
	CHECK_EQ(corio_accept(p->l, &p->s), 0);
	CHECK_EQ(corio_setsockopt(p->s, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	CHECK_EQ(corio_setsockopt(p->c, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
}

/* The client sends SB_BYTES; the server queues every received buffer with
 * corio_send_buf and never waits. Returns once the server took them all. */
static inline void sb_fill(struct sb_pair *p)
{
	struct corio_net_stats st;
	struct corio_fiber *wf;
	struct writer w;
	size_t got = 0;

	p->n = SB_BYTES;
	p->out = malloc(p->n);
	fill(p->out, p->n, 5);
	w = (struct writer){ p->c, p->out, p->n, 0 };
	CHECK_EQ(corio_spawn(writer_fn, &w, NULL, &wf), 0);
	while (got < p->n) {
		struct corio_buf b[8];
		int k = corio_recv_bufs(p->s, b, 8);

		CHECK(k > 0);
		if (k <= 0)
			break;
		for (int i = 0; i < k; i++) {
			got += b[i].len;
			CHECK_EQ(corio_send_buf(p->s, &b[i]), 0);
		}
	}
	CHECK_EQ(corio_join(wf, NULL), 0);
	corio_sleep_ns(20 * 1000000ull);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK(st.bufs_out > 8); /* many sends still queued: the peer does not read */
}

/* Read n bytes (slowly) and check they are the pattern, in order. A byte
 * the server lost must fail the test, not hang it: the reads run under a
 * 20 s deadline scope. */
static inline void sb_read_check(struct corio_sock *c, size_t n, bool slow)
{
	struct corio_deadline d;
	uint8_t buf[4096];
	size_t got = 0;
	unsigned reads = 0;

	CHECK_EQ(corio_timeout_push(&d, 20ull * 1000000000), 0);
	while (got < n) {
		ssize_t r = corio_recv(c, buf, sizeof(buf) < n - got ? sizeof(buf) : n - got);

		CHECK(r > 0);
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pat(got + (size_t)i, 5)) {
				CHECK_EQ(buf[i], pat(got + (size_t)i, 5));
				corio_deadline_pop(&d);
				return;
			}
		got += (size_t)r;
		if (slow && ++reads % 16 == 0)
			corio_sleep_ns(200000);
	}
	corio_deadline_pop(&d);
}

static inline void sb_close(struct sb_pair *p)
{
	struct corio_net_stats st;

	if (p->s)
		CHECK_EQ(corio_close(p->s), 0);
	if (p->c)
		CHECK_EQ(corio_close(p->c), 0);
	CHECK_EQ(corio_listener_close(p->l), 0);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.bufs_out, 0);
	free(p->out);
}

struct pair {
	struct corio_listener *l;
	struct corio_sock *c, *s; /* client side, server side */
};

static inline void pair_open(struct pair *p, int rcvbuf_c, int sndbuf_s)
{
	char where[64];

	memset(p, 0, sizeof(*p));
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &p->l), 0);
	addr_of(p->l, where, sizeof(where));
	CHECK_EQ(corio_tcp_connect(where, &p->c), 0);
	CHECK_EQ(corio_accept(p->l, &p->s), 0);
	if (rcvbuf_c)
		CHECK_EQ(corio_setsockopt(p->c, SOL_SOCKET, SO_RCVBUF, &rcvbuf_c, sizeof(int)), 0);
	if (sndbuf_s)
		CHECK_EQ(corio_setsockopt(p->s, SOL_SOCKET, SO_SNDBUF, &sndbuf_s, sizeof(int)), 0);
}

static inline void pair_close(struct pair *p)
{
	struct corio_net_stats st;

	if (p->s)
		CHECK_EQ(corio_close(p->s), 0);
	if (p->c)
		CHECK_EQ(corio_close(p->c), 0);
	CHECK_EQ(corio_listener_close(p->l), 0);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.bufs_out, 0);
}

/* A pair whose listener has the options o (NULL: none). */
static inline void pair_open_opts(struct pair *p, const struct corio_listen_opts *o)
{
	char where[64];

	memset(p, 0, sizeof(*p));
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", o, &p->l), 0);
	addr_of(p->l, where, sizeof(where));
	CHECK_EQ(corio_tcp_connect(where, &p->c), 0);
	CHECK_EQ(corio_accept(p->l, &p->s), 0);
}


/* ---- provided buffers that fit small messages (IOU_PBUF_RING_INC) ---------------------- */


#ifndef IOU_PBUF_RING_INC
#define IOU_PBUF_RING_INC 2
#endif

/* Does this kernel consume provided buffers incrementally (6.12)? Asked of
 * a throw-away ring, only to know which path the runtime takes. */
static inline bool kernel_pbuf_inc(void)
{
	struct io_uring ring;
	struct io_uring_buf_reg reg;
	void *br = NULL;
	int ret;

	if (io_uring_queue_init(2, &ring, 0) < 0)
		return false;
	if (posix_memalign(&br, 4096, 4096) == 0) {
		memset(&reg, 0, sizeof(reg));
		reg.ring_addr = (uint64_t)(uintptr_t)br;
		reg.ring_entries = 1;
		reg.pad = IOU_PBUF_RING_INC; /* .flags in newer headers */
		ret = io_uring_register_buf_ring(&ring, &reg, 0);
		if (ret == 0)
			io_uring_unregister_buf_ring(&ring, 0);
	} else {
		ret = -ENOMEM;
	}
	io_uring_queue_exit(&ring);
	free(br);
	return ret == 0;
}

/* Which path a test runs: incremental buffers (the default where the kernel
 * has them, and on the epoll fallback, which emulates them) or whole
 * buffers (CORIO_NET_DISABLE=pbuf_inc). */
static inline bool pbuf_path(bool inc)
{
	if (inc) {
		if (!th_on_epoll() && !kernel_pbuf_inc())
			return false;
		unsetenv("CORIO_NET_DISABLE");
	} else {
		setenv("CORIO_NET_DISABLE", "pbuf_inc", 1);
	}
	return true;
}

#define MS 1000000ull

/* A done callback's record: how often it ran, with what, in which order. */
struct ow_done {
	int calls, res, order;
};
static int ow_seq;

static inline void ow_done_cb(void *arg, int res)
{
	struct ow_done *d = arg;

	d->calls++;
	d->res = res;
	d->order = ++ow_seq;
}

#endif
