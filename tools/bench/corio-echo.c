/* SPDX-License-Identifier: MIT */
/*
 * corio-echo - multi-shard TCP echo server on corio.
 *
 * Accept models:
 *   reuseport  every shard has its own SO_REUSEPORT listener on the port
 *              and the kernel spreads connections (default);
 *   dispatch   shard 0 accepts and hands each connection to a shard,
 *              round robin (dispatch) or the least loaded (dispatch-least).
 * Each connection is a fiber that borrows received data from the shard's
 * provided-buffer ring (one multishot recv per connection, corio_recv_bufs)
 * and sends each buffer back with corio_send_buf(), which queues the send
 * and returns at once, so one io_uring_enter submits the sends and waits for
 * the next receives; --send wait sends the queued buffers with one
 * corio_sendv() and waits for it instead. --recv copy uses corio_recv()
 * into a per-connection buffer.
 * Flow control: a connection holds at most --recv-queue received buffers
 * nobody took and --send-queue queued sends (corio_send_buf waits when it
 * is full), so a client that sends and never reads stops being read (TCP
 * flow control) instead of taking the shard's buffer ring from the others.
 * --sockperf reflects sockperf's TCP framing (tools/common/sockperf.h), so
 * `sockperf ping-pong --tcp` and `sockperf under-load --tcp` can measure it.
 *
 * --udp: one UDP socket per shard on the port (SO_REUSEPORT: the kernel
 * picks a shard by the sender's address, so one sender always meets the
 * same shard and its datagrams stay in order), one fiber per socket that
 * receives a datagram (corio_recvfrom_buf: multishot recvmsg into the
 * provided-buffer ring; --recv copy: corio_recvfrom) and sends it back to
 * its sender with corio_sendto, waiting for that send before receiving
 * the next (datagrams that arrive meanwhile queue in the ring). Datagrams
 * larger than the ring's buffers (CORIO_NET_BUFS) are truncated in bufs
 * mode: use --recv copy for those. --udp --sockperf reflects sockperf's
 * UDP framing: every whole message of a datagram that asks for a reply is
 * sent back as its own datagram, the rest is dropped.
 *
 * --tls: TLS (1.3 or 1.2, whichever the client offers best) on every TCP
 * connection, with --tls-cert FILE --tls-key FILE, or, when neither is
 * given, a fresh self-signed ECDSA P-256 certificate for "localhost" and
 * 127.0.0.1 made at start: its key stays in memory only, the certificate is
 * written to a private directory under $TMPDIR (named in the listening line
 * as cert=PATH, for clients to trust with --tls-ca) and removed at exit.
 * Each connection's fiber does the handshake (bounded by 10 s), then reads
 * decrypted bytes into a per-connection buffer (corio_tls_read) and writes
 * them back (corio_tls_write, waited for): --recv copy and --send wait,
 * the only modes TLS has, since the session reads its records itself and
 * encrypts into its own buffer, so the provided-buffer ring and
 * corio_send_buf have nothing to lend it. --recv bufs, --send buf,
 * --sockperf and --udp are refused with --tls.
 *
 * Binds 127.0.0.1 only. Prints "corio-echo: listening on 127.0.0.1:PORT ..."
 * once every shard listens; stops cleanly on SIGINT/SIGTERM (or --timeout).
 */
#include <corio.h>

#include "common/backend.h"
#include "common/opt.h"
#include "common/sockperf.h"
#include "common/timing.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SHARDS 256
#define NBUFS 16       /* buffers taken per corio_recv_bufs() */
#define COPY_BUF 65536
#define TLS_HANDSHAKE_NS 10000000000ull /* a client that stalls its handshake */

enum accept_model { ACC_REUSEPORT, ACC_DISPATCH, ACC_DISPATCH_LEAST };

static struct {
	unsigned shards;
	int port;
	int accept;               /* enum accept_model */
	int sockperf;
	int recv_copy;
	int send_wait;            /* --send wait: corio_sendv and wait */
	int udp;                  /* --udp */
	int tls;                  /* --tls */
	struct corio_tls_ctx *tls_ctx;
	_Atomic uint64_t tls_failed; /* handshakes refused (the first few are printed) */
	_Atomic int bound_port;   /* the port shard 0 bound (for port 0) */
	_Atomic unsigned listening;
	_Atomic int failed;       /* a shard could not listen: stop */
	_Atomic uint64_t proto_errors;
	_Atomic uint64_t udp_errors;  /* receive/send errors a UDP socket survived */
} g;

/* ---- connections ------------------------------------------------------------- */

static int echo_bufs(struct corio_sock *s)
{
	struct corio_buf b[NBUFS];
	struct iovec iov[NBUFS];

	for (;;) {
		int k = corio_recv_bufs(s, b, NBUFS);
		ssize_t r;

		if (k <= 0)
			return k;
		if (!g.send_wait) {
			int ret = 0;

			/* each call takes the buffer, even when it fails */
			for (int i = 0; i < k; i++)
				if (!ret)
					ret = corio_send_buf(s, &b[i]);
				else
					corio_buf_release(&b[i]);
			if (ret)
				return ret;
			continue;
		}
		for (int i = 0; i < k; i++) {
			iov[i].iov_base = b[i].data;
			iov[i].iov_len = b[i].len;
		}
		r = corio_sendv(s, iov, k, NULL);
		for (int i = 0; i < k; i++)
			corio_buf_release(&b[i]);
		if (r < 0)
			return (int)r;
	}
}

static int echo_copy(struct corio_sock *s)
{
	unsigned char *buf = malloc(COPY_BUF);
	ssize_t n = -ENOMEM;

	while (buf && (n = corio_recv(s, buf, COPY_BUF)) > 0)
		if ((n = corio_send(s, buf, (size_t)n)) < 0)
			break;
	free(buf);
	return (int)n;
}

/* sockperf: parse frames out of whatever arrives, send the replies they make. */
static int reflect(struct corio_sock *s)
{
	struct tool_sp sp;
	struct tool_buf out = { 0 };
	unsigned char *cbuf = g.recv_copy ? malloc(COPY_BUF) : NULL;
	int ret = 0;

	tool_sp_init(&sp);
	if (g.recv_copy && !cbuf)
		return -ENOMEM;
	while (!ret) {
		struct corio_buf b[NBUFS];
		int k;

		out.len = 0;
		if (g.recv_copy) {
			ssize_t n = corio_recv(s, cbuf, COPY_BUF);

			if (n <= 0) {
				ret = (int)n;
				break;
			}
			ret = tool_sp_feed(&sp, cbuf, (size_t)n, &out);
		} else {
			k = corio_recv_bufs(s, b, NBUFS);
			if (k <= 0) {
				ret = k;
				break;
			}
			for (int i = 0; i < k; i++) {
				if (!ret)
					ret = tool_sp_feed(&sp, b[i].data, b[i].len, &out);
				corio_buf_release(&b[i]);
			}
		}
		if (ret == -EPROTO && atomic_fetch_add(&g.proto_errors, 1) < 10)
			fprintf(stderr, "corio-echo: closing a connection: bad sockperf frame length\n");
		if (!ret && out.len) {
			ssize_t r = corio_send(s, out.p, out.len);

			if (r < 0)
				ret = (int)r;
		}
	}
	tool_buf_free(&out);
	free(cbuf);
	return ret;
}

/* --tls: handshake, then echo decrypted bytes until the peer's close_notify. */
static int echo_tls(struct corio_sock *s)
{
	struct corio_deadline dl;
	struct corio_tls *t;
	unsigned char *buf;
	ssize_t n;
	int ret;

	corio_timeout_push(&dl, TLS_HANDSHAKE_NS);
	ret = corio_tls_accept(g.tls_ctx, s, &t);
	corio_deadline_pop(&dl);
	if (ret) {
		if (ret != -ECANCELED && atomic_fetch_add(&g.tls_failed, 1) < 10)
			fprintf(stderr, "corio-echo: TLS handshake: %s (%s)\n", strerror(-ret),
				corio_last_error());
		return ret;
	}
	buf = malloc(COPY_BUF);
	n = buf ? 0 : -ENOMEM;
	while (buf && (n = corio_tls_read(t, buf, COPY_BUF)) > 0)
		if ((n = corio_tls_write(t, buf, (size_t)n)) < 0)
			break;
	free(buf);
	corio_tls_close(t); /* our close_notify after the client's */
	return (int)n;
}

static int serve(struct corio_sock *s, void *arg)
{
	(void)arg;
	if (g.tls)
		echo_tls(s);
	else if (g.sockperf)
		reflect(s);
	else if (g.recv_copy)
		echo_copy(s);
	else
		echo_bufs(s);
	corio_close(s);
	return 0;
}

static int conn_fiber(void *arg)
{
	return serve(arg, NULL);
}

/* ---- UDP --------------------------------------------------------------------- */

/* sockperf framing: reflect each whole message that asks for a reply. */
static int udp_reflect(struct corio_sock *s, unsigned char *d, size_t n,
		       const struct sockaddr *to, socklen_t tolen)
{
	size_t pos = 0, off, len;
	int r;

	while ((r = tool_sp_dgram_next(d, n, &pos, &off, &len)) != 0) {
		ssize_t k;

		if (r < 0) {
			if (atomic_fetch_add(&g.proto_errors, 1) < 10)
				fprintf(stderr, "corio-echo: dropping a datagram's tail that is not a "
						"whole sockperf message\n");
			continue;
		}
		k = corio_sendto(s, d + off, len, to, tolen);
		if (k < 0)
			return (int)k;
	}
	return 0;
}

/* One socket's loop: receive a datagram, send it back to its sender. Ends
 * on -ECANCELED (corio_stop); any other error is counted and survived (a
 * datagram socket has no connection to lose), unless it repeats with
 * nothing received in between. */
static void udp_serve(struct corio_sock *s)
{
	unsigned char *cbuf = g.recv_copy ? malloc(COPY_BUF) : NULL;
	unsigned fails = 0;

	if (g.recv_copy && !cbuf) {
		atomic_store(&g.failed, 1);
		return;
	}
	for (;;) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		struct corio_buf b;
		unsigned char *d;
		ssize_t n;
		int ret = 0;

		if (g.recv_copy) {
			n = corio_recvfrom(s, cbuf, COPY_BUF, (struct sockaddr *)&from, &fl);
			d = cbuf;
		} else {
			n = corio_recvfrom_buf(s, &b, (struct sockaddr *)&from, &fl);
			d = b.data;
		}
		if (n >= 0) {
			if (g.sockperf)
				ret = udp_reflect(s, d, (size_t)n, (struct sockaddr *)&from, fl);
			else
				ret = (int)corio_sendto(s, d, (size_t)n, (struct sockaddr *)&from, fl);
			if (!g.recv_copy)
				corio_buf_release(&b);
			if (ret >= 0)
				fails = 0;
		} else {
			ret = (int)n;
		}
		if (ret == -ECANCELED)
			break;
		if (ret < 0) {
			if (atomic_fetch_add(&g.udp_errors, 1) < 10)
				fprintf(stderr, "corio-echo: shard %u: udp: %s\n", corio_shard_id(),
					strerror(-ret));
			if (++fails >= 1000) {
				fprintf(stderr, "corio-echo: shard %u: udp: giving up after 1000 errors "
						"in a row\n", corio_shard_id());
				atomic_store(&g.failed, 1);
				break;
			}
		}
	}
	free(cbuf);
}

/* ---- listening --------------------------------------------------------------- */

/* Port 0: shard 0 picks it, the others join it. 0, or -ECANCELED. */
static int shared_port(int *port)
{
	*port = g.port;
	if (*port || corio_shard_id() == 0)
		return 0;
	while (!(*port = atomic_load(&g.bound_port)) && !atomic_load(&g.failed))
		corio_sleep_ns(100000);
	return *port ? 0 : -ECANCELED;
}

static void bound(int port)
{
	if (corio_shard_id() == 0)
		atomic_store(&g.bound_port, port);
	atomic_fetch_add(&g.listening, 1);
}

/* A 4 MiB receive buffer, so a few milliseconds' stall at 100k datagrams/s
 * does not overflow it (the default holds ~200 small datagrams): forced
 * when we may (root), else as much as net.core.rmem_max allows. */
static void big_rcvbuf(int fd)
{
	int v = 4 << 20;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

/* This shard's UDP socket on the port: SO_REUSEPORT has to be set before
 * bind(), which corio_udp_bind() does not offer, so the socket is made
 * here and handed to corio. */
static int udp_here(struct corio_sock **s)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int port, fd, one = 1, ret;

	if (shared_port(&port))
		return -ECANCELED;
	sa.sin_port = htons((uint16_t)port);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl)) {
		ret = -errno;
		goto fail;
	}
	big_rcvbuf(fd);
	ret = corio_sock_from_fd(fd, s);
	if (ret)
		goto fail;
	bound(ntohs(sa.sin_port));
	return 0;
fail:
	fprintf(stderr, "corio-echo: shard %u: udp bind 127.0.0.1:%d: %s\n", corio_shard_id(),
		port, strerror(-ret));
	if (fd >= 0)
		close(fd);
	atomic_store(&g.failed, 1);
	return ret;
}

static int listen_here(struct corio_listener **l)
{
	struct corio_listen_opts lo = { .flags = g.accept == ACC_REUSEPORT ? CORIO_LISTEN_REUSEPORT : 0 };
	char where[32];
	int port, ret;

	if (shared_port(&port))
		return -ECANCELED;
	snprintf(where, sizeof(where), "127.0.0.1:%d", port);
	ret = corio_tcp_listen(where, &lo, l);
	if (ret) {
		fprintf(stderr, "corio-echo: shard %u: listen on %s: %s (%s)\n", corio_shard_id(), where,
			strerror(-ret), corio_last_error());
		atomic_store(&g.failed, 1);
		return ret;
	}
	if (!port) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);

		corio_listener_addr(*l, &ss, &len);
		port = corio_addr_port((struct sockaddr *)&ss);
	}
	bound(port);
	return 0;
}

static void entry(void *arg)
{
	struct corio_listener *l;
	int ret;

	(void)arg;
	if (g.udp) {
		struct corio_sock *s;

		if (udp_here(&s))
			return;
		udp_serve(s);
		corio_close(s);
		return;
	}
	if (g.accept != ACC_REUSEPORT && corio_shard_id() != 0)
		return; /* dispatch: connections are spawned here by shard 0 */
	if (listen_here(&l))
		return;
	if (g.accept == ACC_REUSEPORT) {
		for (;;) {
			struct corio_sock *s;

			ret = corio_accept(l, &s);
			if (ret == -ECANCELED)
				break;
			if (ret) {
				fprintf(stderr, "corio-echo: shard %u: accept: %s\n", corio_shard_id(),
					strerror(-ret));
				atomic_store(&g.failed, 1);
				break;
			}
			ret = corio_spawn(conn_fiber, s, NULL, NULL);
			if (ret) {
				corio_close(s);
				if (ret == -ECANCELED)
					break;
			}
		}
	} else {
		ret = corio_accept_dispatch(l, g.accept == ACC_DISPATCH_LEAST
						       ? CORIO_DISPATCH_LEAST_LOADED
						       : CORIO_DISPATCH_ROUND_ROBIN,
					    serve, NULL);
		if (ret && ret != -ECANCELED) {
			fprintf(stderr, "corio-echo: accept_dispatch: %s\n", strerror(-ret));
			atomic_store(&g.failed, 1);
		}
	}
	corio_listener_close(l);
}

/* ---- main -------------------------------------------------------------------- */

static const char *const accepts[] = { "reuseport", "dispatch", "dispatch-least", NULL };
static const char *const recvs[] = { "bufs", "copy", NULL };
static const char *const sends[] = { "buf", "wait", NULL };

/* What main()'s steps share. */
static struct {
	struct corio_config cfg;
	const char *idle_name;
	int cpu[MAX_SHARDS];
	struct tool_cpus cpus;
	int sqpoll, stats;
	double timeout;
	const char *tls_cert, *tls_key; /* --tls-cert, --tls-key */
	char tls_dir[64];               /* the generated certificate's directory, or "" */
	char tls_gen[128];              /* its path */
} m = { .idle_name = "block", .cpus = { m.cpu, MAX_SHARDS, 0, NULL } };

/* --idle block | spin[:US] | poll (or busy-poll); --busy-poll (value NULL)
 * is --idle poll. The last one given wins. */
static int parse_idle(const char *label, const char *s, void *to)
{
	struct corio_config *cfg = to;
	uint64_t v;

	(void)label;
	if (!s || !strcmp(s, "poll") || !strcmp(s, "busy-poll")) {
		cfg->idle = CORIO_IDLE_POLL;
	} else if (!strcmp(s, "block")) {
		cfg->idle = CORIO_IDLE_BLOCK;
	} else if (!strncmp(s, "spin", 4) && (!s[4] || s[4] == ':')) {
		cfg->idle = CORIO_IDLE_SPIN;
		if (s[4] && tool_opt_count("--idle spin:US", s + 5, 1, 10000000, &v))
			return -EINVAL;
		if (s[4])
			cfg->spin_us = (unsigned)v;
	} else {
		fprintf(stderr, "corio-echo: --idle: bad value '%s' (expected block, "
				"spin, spin:US or poll)\n", s);
		return -EINVAL;
	}
	m.idle_name = cfg->idle == CORIO_IDLE_POLL ? "poll" :
		      cfg->idle == CORIO_IDLE_SPIN ? "spin" : "block";
	return 0;
}

static int parse_options(int argc, char **argv)
{
	const struct tool_opt opts[] = {
		{ TOOL_OPT_COUNT("shards", 'n', m.cfg.shards, 1, MAX_SHARDS, "N", "shards (1)") },
		{ TOOL_OPT_CPUS("cpus", 'C', m.cpus, "LIST",
				"pin shard i to the i-th CPU of LIST (e.g. 1 or 0-1);\n"
				"default: the CPUs of the affinity mask in order") },
		{ TOOL_OPT_COUNT("port", 'p', g.port, 0, 65535, "P",
				 "TCP (UDP) port on 127.0.0.1; 0 picks one and prints it (0)") },
		{ TOOL_OPT_FLAG("udp", 'u', g.udp,
				"UDP echo: one SO_REUSEPORT socket per shard, each\n"
				"datagram sent back to its sender") },
		{ TOOL_OPT_CHOICE("accept", 'a', g.accept, accepts, "MODEL",
				  "reuseport | dispatch | dispatch-least (reuseport)") },
		{ TOOL_OPT_CALL("idle", 'i', parse_idle, &m.cfg, "MODE",
				"block | spin[:US] | poll (busy-poll) (block)") },
		{ TOOL_OPT_CALL("busy-poll", 0, parse_idle, &m.cfg, NULL, "same as --idle poll") },
		{ TOOL_OPT_FLAG("sqpoll", 0, m.sqpoll,
				"kernel SQ polling thread per shard (CORIO_F_SQPOLL)") },
		{ TOOL_OPT_CHOICE("recv", 0, g.recv_copy, recvs, "MODE",
				  "bufs (provided-buffer multishot) | copy (bufs)") },
		{ TOOL_OPT_CHOICE("send", 0, g.send_wait, sends, "MODE",
				  "buf (corio_send_buf, no wait) | wait (one\n"
				  "corio_sendv per batch, waited for) (buf)") },
		{ TOOL_OPT_COUNT("recv-queue", 0, m.cfg.net_recv_queue, 1, 65535, "N",
				 "received buffers a connection may hold unread\n"
				 "(cfg.net_recv_queue, 16)") },
		{ TOOL_OPT_COUNT("send-queue", 0, m.cfg.net_send_queue, 1, 65535, "N",
				 "corio_send_buf sends a connection may queue\n"
				 "(cfg.net_send_queue, 16)") },
		{ TOOL_OPT_FLAG("tls", 0, g.tls,
				"TLS on every connection (implies --recv copy --send wait);\n"
				"without --tls-cert/--tls-key: a fresh self-signed ECDSA\n"
				"P-256 certificate for localhost,127.0.0.1, its path in the\n"
				"listening line (cert=PATH), removed at exit") },
		{ TOOL_OPT_STRING("tls-cert", 0, m.tls_cert, "FILE",
				  "--tls: certificate chain, PEM (leaf first)") },
		{ TOOL_OPT_STRING("tls-key", 0, m.tls_key, "FILE", "--tls: its private key, PEM") },
		{ TOOL_OPT_FLAG("sockperf", 0, g.sockperf,
				"reflect sockperf's TCP (with --udp: UDP) framing instead\n"
				"of echoing") },
		{ TOOL_OPT_STRING("control", 0, m.cfg.control_path, "PATH",
				  "control socket (stats) at PATH") },
		{ TOOL_OPT_FLAG("stats", 0, m.stats, "print per-shard loop and net counters at exit") },
		{ TOOL_OPT_SECONDS("timeout", 0, m.timeout, 0.001, 1e6, "SECS",
				   "exit after SECS (default: run until SIGINT/SIGTERM)") },
		{ 0 },
	};
	const struct tool_cli cli = { "corio-echo", "[options]", NULL, opts };

	corio_config_init(&m.cfg);
	m.cfg.shards = 1;
	m.cfg.stall_ns = 0;
	g.recv_copy = g.send_wait = -1; /* not given: --tls tells them apart */
	return tool_opt_parse(&cli, argc, argv);
}

/* What --tls can be combined with: 0 or 2. The receive and send modes
 * TLS has are copy and wait (see the top of the file). */
static int check_tls_options(void)
{
	if (!g.tls) {
		if (m.tls_cert || m.tls_key) {
			fprintf(stderr, "corio-echo: --tls-cert and --tls-key need --tls\n");
			return 2;
		}
		g.recv_copy = g.recv_copy > 0;
		g.send_wait = g.send_wait > 0;
		return 0;
	}
	if (!m.tls_cert != !m.tls_key) {
		fprintf(stderr, "corio-echo: --tls: give both --tls-cert and --tls-key, or neither "
				"(a certificate is then made)\n");
		return 2;
	}
	if (g.recv_copy == 0 || g.send_wait == 0) {
		fprintf(stderr, "corio-echo: --tls: %s is not supported: a TLS session "
				"receives its records itself and decrypts into a per-connection buffer, "
				"and encrypts into its own before it sends (--recv copy --send wait, what "
				"--tls does)\n", g.recv_copy == 0 ? "--recv bufs" : "--send buf");
		return 2;
	}
	if (g.udp || g.sockperf) {
		fprintf(stderr, "corio-echo: --tls: not with %s (TLS runs over TCP echo only)\n",
			g.udp ? "--udp" : "--sockperf");
		return 2;
	}
	g.recv_copy = g.send_wait = 1;
	return 0;
}

/* The checks that span options, and the CPU list: 0 or 2. */
static int check_options(void)
{
	if (check_tls_options())
		return 2;
	if (g.udp && g.accept != ACC_REUSEPORT) {
		fprintf(stderr, "corio-echo: --udp: there is nothing to accept (--accept %s)\n",
			accepts[g.accept]);
		return 2;
	}
	if (m.sqpoll)
		m.cfg.flags |= CORIO_F_SQPOLL;
	if (m.cpus.n) {
		/* repeat the list: shard i on cpus[i % n] */
		for (unsigned i = m.cpus.n; i < m.cfg.shards; i++)
			m.cpu[i] = m.cpu[i % m.cpus.n];
		m.cfg.cpus = m.cpu;
	}
	g.shards = m.cfg.shards;
	return 0;
}

/* Remove the generated certificate and its directory (the key never stays
 * on disk: it is removed as soon as the context holds it). */
static void tls_cleanup(void)
{
	corio_tls_ctx_free(g.tls_ctx);
	g.tls_ctx = NULL;
	if (m.tls_dir[0]) {
		remove(m.tls_gen);
		remove(m.tls_dir);
		m.tls_dir[0] = '\0';
	}
}

/* --tls: the server context, from the files given or from a fresh ECDSA
 * P-256 certificate: 0, 1 (could not make it, said) or 2 (a bad file). */
static int tls_setup(void)
{
	struct corio_tls_cert c = { m.tls_cert, m.tls_key };
	struct corio_tls_ctx_opts o = { .flags = CORIO_TLS_SERVER, .certs = &c, .ncerts = 1 };
	const char *tmp = getenv("TMPDIR");
	char key[128];
	int ret;

	if (!g.tls)
		return 0;
	if (!m.tls_cert) {
		struct corio_tls_cert_gen gen = { .names = "localhost,127.0.0.1",
						  .key_type = CORIO_TLS_KEY_EC_P256, .days = 30 };

		snprintf(m.tls_dir, sizeof(m.tls_dir), "%s/corio-echo-XXXXXX",
			 tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
		if (!mkdtemp(m.tls_dir)) {
			fprintf(stderr, "corio-echo: --tls: %s: %s\n", m.tls_dir, strerror(errno));
			m.tls_dir[0] = '\0';
			return 1;
		}
		snprintf(m.tls_gen, sizeof(m.tls_gen), "%s/cert.pem", m.tls_dir);
		snprintf(key, sizeof(key), "%s/key.pem", m.tls_dir);
		gen.cert_file = c.cert_file = m.tls_gen;
		gen.key_file = c.key_file = key;
		ret = corio_tls_cert_generate(&gen);
		if (!ret)
			ret = corio_tls_ctx_new(&o, &g.tls_ctx);
		remove(key);
		if (ret) {
			fprintf(stderr, "corio-echo: --tls: making a certificate: %s\n", corio_last_error());
			tls_cleanup();
			return 1;
		}
		return 0;
	}
	ret = corio_tls_ctx_new(&o, &g.tls_ctx);
	if (ret) {
		fprintf(stderr, "corio-echo: --tls-cert %s --tls-key %s: %s\n", m.tls_cert, m.tls_key,
			corio_last_error());
		return 2;
	}
	return 0;
}

static void print_listening(struct corio_rt *rt)
{
	printf("corio-echo: listening on 127.0.0.1:%d shards=%u cpus=", atomic_load(&g.bound_port),
	       g.shards);
	for (unsigned i = 0; i < g.shards; i++) {
		if (m.cpus.n)
			printf("%s%d", i ? "," : "", m.cpu[i]);
		else
			printf("%sauto", i ? "," : "");
	}
	printf(" proto=%s accept=%s idle=%s%s recv=%s send=%s mode=%s backend=%s pid=%d",
	       g.udp ? "udp" : "tcp", g.udp ? "-" : accepts[g.accept], m.idle_name,
	       m.cfg.flags & CORIO_F_SQPOLL ? " sqpoll" : "", recvs[g.recv_copy],
	       sends[g.send_wait], g.sockperf ? "sockperf" : "echo", tool_backend_of(rt),
	       (int)getpid());
	if (g.tls)
		printf(" tls=%s cert=%s", m.tls_dir[0] ? "generated-ecdsa-p256-self-signed" : "files",
		       m.tls_dir[0] ? m.tls_gen : m.tls_cert);
	printf("\n");
	fflush(stdout);
}

/* Print the listening line once every listener is up; return on a failed
 * shard, the timeout, SIGINT or SIGTERM (blocked in set). */
static void wait_for_stop(struct corio_rt *rt, sigset_t *set)
{
	uint64_t until = m.timeout > 0 ? corio_now_ns() + tool_s_to_ns(m.timeout) : UINT64_MAX;
	unsigned want = g.accept == ACC_REUSEPORT || g.udp ? g.shards : 1;
	int printed = 0, sig;

	for (;;) {
		struct timespec ts = { .tv_nsec = 50000000 };

		if (!printed && atomic_load(&g.listening) == want) {
			print_listening(rt);
			printed = 1;
		}
		if (atomic_load(&g.failed) || corio_now_ns() >= until)
			break;
		sig = sigtimedwait(set, NULL, &ts);
		if (sig == SIGINT || sig == SIGTERM)
			break;
	}
}

static void print_tls_stats(struct corio_rt *rt, unsigned i)
{
	struct corio_tls_stats ts;

	if (!g.tls || corio_tls_stats_get(rt, i, &ts))
		return;
	fprintf(stderr,
		"corio-echo: shard %u tls: handshakes %llu resumed %llu handshake_failed %llu "
		"verify_failed %llu proto_errors %llu truncated %llu notify_sent %llu bytes_in %llu "
		"bytes_out %llu sessions_live %llu ktls %llu\n",
		i, (unsigned long long)ts.handshakes, (unsigned long long)ts.resumed,
		(unsigned long long)ts.handshake_failed, (unsigned long long)ts.verify_failed,
		(unsigned long long)ts.proto_errors, (unsigned long long)ts.truncated,
		(unsigned long long)ts.notify_sent, (unsigned long long)ts.bytes_in,
		(unsigned long long)ts.bytes_out, (unsigned long long)ts.sessions_live,
		(unsigned long long)ts.ktls);
}

static void print_stats(struct corio_rt *rt)
{
	for (unsigned i = 0; i < g.shards; i++) {
		struct corio_stats st;
		struct corio_net_stats ns;

		if (corio_stats_get(rt, i, &st) || corio_net_stats_get(rt, i, &ns))
			continue;
		fprintf(stderr,
			"corio-echo: shard %u cpu %llu: turns %llu enters %llu sqes %llu cqes %llu "
			"switches %llu busy %.0f ms idle %.0f ms cpu %.0f ms | accepts %llu recv ops %llu send ops "
			"%llu bytes in %llu enobufs %llu rearms %llu recv_capped %llu send_full %llu "
			"send_gathered %llu send_direct %llu\n",
			i, (unsigned long long)st.cpu, (unsigned long long)st.loop_turns,
			(unsigned long long)st.enters, (unsigned long long)st.sqes,
			(unsigned long long)st.cqes, (unsigned long long)st.switches,
			(double)st.busy_ns / 1e6, (double)st.idle_ns / 1e6, (double)st.cpu_ns / 1e6,
			(unsigned long long)ns.accepts, (unsigned long long)ns.ops_in,
			(unsigned long long)ns.ops_out, (unsigned long long)ns.bytes_in,
			(unsigned long long)ns.enobufs, (unsigned long long)ns.rearms,
			(unsigned long long)ns.recv_capped, (unsigned long long)ns.send_full,
			(unsigned long long)ns.send_gathered, (unsigned long long)ns.send_direct);
		print_tls_stats(rt, i);
	}
}

int main(int argc, char **argv)
{
	struct corio_rt *rt;
	sigset_t set;
	int ret;

	ret = parse_options(argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	if (check_options())
		return 2;
	ret = tls_setup();
	if (ret)
		return ret;
	/* shards inherit this mask: only the main thread takes the signals */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	ret = corio_start(&m.cfg, entry, NULL, &rt);
	if (ret) {
		fprintf(stderr, "corio-echo: cannot start: %s (%s)\n", strerror(-ret), corio_last_error());
		tls_cleanup();
		return 1;
	}
	wait_for_stop(rt, &set);
	if (m.stats)
		print_stats(rt);
	if (g.udp && (atomic_load(&g.udp_errors) || atomic_load(&g.proto_errors)))
		fprintf(stderr, "corio-echo: udp: %llu receive/send errors, %llu bad sockperf datagrams\n",
			(unsigned long long)atomic_load(&g.udp_errors),
			(unsigned long long)atomic_load(&g.proto_errors));
	corio_stop(rt);
	ret = corio_wait(rt);
	tls_cleanup(); /* after the wait: no session is open */
	if (ret) {
		fprintf(stderr, "corio-echo: runtime: %s\n", strerror(-ret));
		return 1;
	}
	return atomic_load(&g.failed) ? 1 : 0;
}
