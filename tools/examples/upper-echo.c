/* SPDX-License-Identifier: MIT */
/*
 * upper-echo - the line-protocol server that introductions to async
 * runtimes build, written against corio's public API only. Start here.
 *
 *	upper-echo [-b host] [-p port] [-s shards] [-m max_line] [-i idle_s]
 *
 * It accepts TCP connections and answers every line with the line
 * upper-cased and followed by "!!!":
 *
 *	$ printf 'hello\r\nworld\n' | nc 127.0.0.1 7000
 *	HELLO!!!
 *	WORLD!!!
 *
 * The protocol, precisely:
 *  - A line ends at LF; a CR right before the LF belongs to the line ending
 *    (CRLF), and the answer ends the same way the line did (CRLF or LF).
 *  - Lines may arrive split across any number of receives, and one receive
 *    may hold many lines: answers keep the order of the lines.
 *  - Upper-casing is ASCII-only and byte-wise (a-z -> A-Z, as toupper() in
 *    the C locale). Every other byte - UTF-8, invalid UTF-8, NUL - passes
 *    through unchanged; nothing is decoded or validated.
 *  - A line longer than max_line bytes (-m, default 64 KiB; the line ending
 *    not counted) is answered, as soon as it gets too long, with
 *	ERROR line too long (max N bytes)
 *    and the rest of it, up to its LF, is skipped. The connection is kept:
 *    the next line is answered normally. Memory per connection is bounded
 *    by max_line.
 *  - When the client closes its side, a last line without LF is still
 *    answered (with LF), then the server closes.
 *  - With -i, a connection idle for that many seconds gets
 *	ERROR idle timeout
 *    and is closed.
 *
 * How it is built (each piece is the usual way to do it with corio):
 *  - one listener per shard on the same port (CORIO_LISTEN_REUSEPORT: the
 *    kernel spreads connections); shard 0 binds first so that port 0 picks
 *    one port for all, then starts the others with corio_spawn_on();
 *  - each shard's connections run in a fiber group: when the runtime stops
 *    (SIGINT/SIGTERM -> corio_stop()) every fiber is cancelled, the accept
 *    loop leaves, and corio_group_close() waits until every connection
 *    fiber has closed its socket;
 *  - a connection waits with corio_select() for bytes or the idle deadline
 *    (a deadline scope around corio_recv() would do as well; the select
 *    shows how to add more sources, such as a shutdown event or a channel);
 *  - the protocol (struct ue_line) does no I/O, so it is easy to test.
 *
 * test/test_upper_echo.c includes this file with UPPER_ECHO_NO_MAIN and
 * drives ue_serve() over 127.0.0.1, and also runs the built binary.
 */
#include <corio.h>
#include <corio/select.h> /* also reached through corio.h */

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UE_MAX_LINE_DEFAULT (64 * 1024)
#define UE_RECV_SIZE (16 * 1024)

/* ---- the protocol (no I/O) ---------------------------------------------------- */

/* A growable byte buffer. */
struct ue_buf {
	char *p;
	size_t len, cap;
};

static int ue_reserve(struct ue_buf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 256;
	char *p;

	if (b->len + more <= b->cap)
		return 0;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static int ue_put(struct ue_buf *b, const void *p, size_t n)
{
	if (ue_reserve(b, n))
		return -ENOMEM;
	memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

/* One connection's line state. */
struct ue_line {
	struct ue_buf part; /* the line so far (no LF yet) */
	size_t max;         /* longest line answered, line ending excluded */
	bool skipping;      /* inside an over-long line: drop up to its LF */
};

static void ue_line_init(struct ue_line *l, size_t max)
{
	memset(l, 0, sizeof(*l));
	l->max = max;
}

static void ue_line_free(struct ue_line *l)
{
	free(l->part.p);
	l->part.p = NULL;
}

/* Answer one line: p[0..n) without its LF (a CR at the end is the CRLF's). */
static int ue_answer(struct ue_buf *out, const char *p, size_t n, bool had_lf)
{
	bool crlf = had_lf && n && p[n - 1] == '\r';
	char *dst;

	if (crlf)
		n--;
	if (ue_reserve(out, n + 5))
		return -ENOMEM;
	dst = out->p + out->len;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		dst[i] = (char)(c >= 'a' && c <= 'z' ? c - ('a' - 'A') : c);
	}
	out->len += n;
	return ue_put(out, crlf ? "!!!\r\n" : "!!!\n", crlf ? 5 : 4);
}

static int ue_too_long(struct ue_line *l, struct ue_buf *out)
{
	char msg[80];
	int n = snprintf(msg, sizeof(msg), "ERROR line too long (max %zu bytes)\n", l->max);

	l->part.len = 0;
	l->skipping = true;
	return ue_put(out, msg, (size_t)n);
}

/*
 * Feed received bytes; answers for every completed line are appended to
 * out. 0, or -ENOMEM. A line is too long when it holds more than max bytes
 * besides its ending (LF or CRLF). A partial line is judged as soon as it
 * could no longer fit even if its LF came next, so memory stays bounded.
 */
static int ue_feed(struct ue_line *l, const char *p, size_t n, struct ue_buf *out)
{
	while (n) {
		const char *lf = memchr(p, '\n', n);
		size_t seg = lf ? (size_t)(lf - p) : n; /* bytes before the LF */
		size_t have = l->part.len + seg;        /* the line so far */
		char last = seg ? p[seg - 1] : l->part.len ? l->part.p[l->part.len - 1] : 0;
		int ret = 0;

		if (l->skipping) {
			l->skipping = !lf; /* the over-long line ends at this LF */
		} else if (lf) {
			if (have - (last == '\r') > l->max) {
				ret = ue_too_long(l, out);
				l->skipping = false; /* its LF is right here */
			} else if (!l->part.len) {
				ret = ue_answer(out, p, seg, true); /* all in this receive: no copy */
			} else if ((ret = ue_put(&l->part, p, seg)) == 0) {
				ret = ue_answer(out, l->part.p, l->part.len, true);
				l->part.len = 0;
			}
		} else if (have > l->max + 1 || (have == l->max + 1 && last != '\r')) {
			ret = ue_too_long(l, out); /* then skip up to its LF */
		} else {
			ret = ue_put(&l->part, p, seg);
		}
		if (ret)
			return ret;
		seg += lf ? 1 : 0;
		p += seg;
		n -= seg;
	}
	return 0;
}

/* End of stream: answer a last line that had no LF. */
static int ue_finish(struct ue_line *l, struct ue_buf *out)
{
	int ret = 0;

	/* Without an LF a trailing CR is part of the line, so a partial line
	 * kept at max + 1 bytes (it ended in CR, which could have been a CRLF)
	 * is too long after all. */
	if (l->part.len && !l->skipping)
		ret = l->part.len > l->max ? ue_too_long(l, out)
					   : ue_answer(out, l->part.p, l->part.len, false);
	l->part.len = 0;
	l->skipping = false;
	return ret;
}

/* ---- a server on one shard ------------------------------------------------------ */

struct ue_server {
	struct corio_listener *l;
	size_t max_line;    /* 0: UE_MAX_LINE_DEFAULT */
	uint64_t idle_ns;   /* 0: no idle timeout */
	struct corio_group conns;
};

struct ue_conn {
	struct ue_server *srv;
	struct corio_sock *s;
};

static int ue_conn_main(void *arg)
{
	struct ue_conn *c = arg;
	struct ue_server *srv = c->srv;
	struct corio_sock *s = c->s;
	char in[UE_RECV_SIZE];
	struct ue_buf out = { 0 };
	struct ue_line line;

	free(c);
	ue_line_init(&line, srv->max_line ? srv->max_line : UE_MAX_LINE_DEFAULT);
	for (;;) {
		struct corio_sel w[2];
		size_t nw = 1;
		ssize_t n;
		int i;

		corio_sel_recv(&w[0], s, in, sizeof(in));
		if (srv->idle_ns) {
			corio_sel_deadline(&w[1], corio_now_ns() + srv->idle_ns);
			nw = 2;
		}
		i = corio_select(w, nw);
		if (i < 0)
			break; /* -ECANCELED: the server is stopping */
		if (i == 1) {
			static const char idle[] = "ERROR idle timeout\n";

			corio_send(s, idle, sizeof(idle) - 1);
			break;
		}
		n = w[0].res;
		if (n < 0)
			break; /* reset by the peer, ... */
		if (n == 0) {
			if (ue_finish(&line, &out) == 0 && out.len)
				corio_send(s, out.p, out.len);
			break;
		}
		if (ue_feed(&line, in, (size_t)n, &out) < 0)
			break; /* no memory: drop this connection, keep the server */
		if (out.len && corio_send(s, out.p, out.len) < 0)
			break;
		out.len = 0;
	}
	free(out.p);
	ue_line_free(&line);
	corio_close(s);
	return 0; /* a connection's trouble is not the server's error */
}

/* Listen on host_port (port 0: any; REUSEPORT so that every shard can
 * listen on the same port). 0 or -errno. */
static int ue_listen(struct ue_server *srv, const char *host_port)
{
	struct corio_listen_opts lo = { .flags = CORIO_LISTEN_REUSEPORT };

	return corio_tcp_listen(host_port, &lo, &srv->l);
}

/*
 * Accept connections on srv->l and serve each in a fiber of srv->conns,
 * until the calling fiber is cancelled (or the listener breaks). Then
 * cancel the connections, wait for them, close the listener. Returns the
 * accept error that ended it (-ECANCELED normally). Blocking.
 */
static int ue_serve(struct ue_server *srv)
{
	int ret = corio_group_init(&srv->conns, 0);

	while (ret == 0) {
		struct corio_sock *s;
		struct ue_conn *c;

		ret = corio_accept(srv->l, &s);
		if (ret < 0)
			break;
		c = malloc(sizeof(*c));
		if (!c) {
			corio_close(s);
			continue;
		}
		c->srv = srv;
		c->s = s;
		if (corio_group_spawn(&srv->conns, ue_conn_main, c, NULL, NULL) < 0) {
			free(c);
			corio_close(s);
		}
	}
	corio_group_close(&srv->conns); /* no connection fiber outlives us */
	corio_listener_close(srv->l);
	srv->l = NULL;
	return ret;
}

#ifndef UPPER_ECHO_NO_MAIN
/* ---- the program ------------------------------------------------------------------ */

#include "../common/opt.h" /* the tools' option parser */

#include <pthread.h>
#include <unistd.h>

struct ue_opts {
	const char *host;
	unsigned port;
	unsigned shards;
	size_t max_line;
	uint64_t idle_ns;
	char addr[300]; /* the address every shard listens on */
};

static struct ue_opts opts;
static volatile sig_atomic_t failed;

/* Block until the runtime is stopped: the process exits through main. */
static void park_forever(void)
{
	while (corio_sleep_ns(UINT64_MAX / 2) == 0)
		;
}

static void fatal(const char *what, int err)
{
	fprintf(stderr, "upper-echo: %s: %s (%s)\n", what, strerror(-err), corio_last_error());
	failed = 1;
	kill(getpid(), SIGTERM); /* main's sigwait() stops the runtime */
	park_forever();
}

static int shard_main(void *arg)
{
	struct ue_server srv = { .max_line = opts.max_line, .idle_ns = opts.idle_ns };
	int ret;

	(void)arg;
	ret = ue_listen(&srv, opts.addr);
	if (ret < 0) {
		fatal("listen", ret);
		return ret;
	}
	ue_serve(&srv);
	return 0;
}

static void entry(void *arg)
{
	struct ue_server srv = { .max_line = opts.max_line, .idle_ns = opts.idle_ns };
	struct sockaddr_storage ss;
	socklen_t len;
	char name[128];
	int ret;

	(void)arg;
	if (corio_shard_id() != 0)
		return; /* shard 0 starts the others once the port is known */
	snprintf(opts.addr, sizeof(opts.addr), "%s:%u", opts.host, opts.port);
	ret = ue_listen(&srv, opts.addr);
	if (ret < 0) {
		fatal("listen", ret);
		return;
	}
	ret = corio_listener_addr(srv.l, &ss, &len);
	if (ret < 0 || corio_addr_format((struct sockaddr *)&ss, len, name, sizeof(name)) < 0) {
		fatal("listener address", ret < 0 ? ret : -EINVAL);
		return;
	}
	snprintf(opts.addr, sizeof(opts.addr), "%s", name);
	for (unsigned i = 1; i < corio_shard_count(); i++) {
		ret = corio_spawn_on(i, shard_main, NULL);
		if (ret < 0)
			fatal("corio_spawn_on", ret);
	}
	printf("upper-echo: listening on %s (%u shards)\n", name, corio_shard_count());
	fflush(stdout);
	ue_serve(&srv);
}

int main(int argc, char **argv)
{
	struct corio_config cfg;
	struct corio_rt *rt;
	unsigned idle_s = 0;
	sigset_t set;
	int sig, ret;
	const struct tool_opt table[] = {
		{ TOOL_OPT_STRING(NULL, 'b', opts.host, "host",
				  "address to listen on (127.0.0.1; * for all)") },
		{ TOOL_OPT_COUNT(NULL, 'p', opts.port, 0, 65535, "port",
				 "TCP port (7000; 0: pick one and print it)") },
		{ TOOL_OPT_COUNT(NULL, 's', opts.shards, 0, 1024, "shards",
				 "shards (threads) to run (1; 0: one per CPU)") },
		{ TOOL_OPT_SIZE(NULL, 'm', opts.max_line, 1, 1u << 30, "bytes",
				"longest line answered (65536); longer ones get an error line") },
		{ TOOL_OPT_COUNT(NULL, 'i', idle_s, 0, 1000000, "seconds",
				 "close connections idle this long (0: never)") },
		{ 0 },
	};
	const struct tool_cli cli = {
		"upper-echo", "[-b host] [-p port] [-s shards] [-m max_line] [-i idle_s]",
		"Stops on SIGINT or SIGTERM.\n", table,
	};

	opts.host = "127.0.0.1";
	opts.port = 7000;
	opts.shards = 1;
	opts.max_line = UE_MAX_LINE_DEFAULT;
	ret = tool_opt_parse(&cli, argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	opts.idle_ns = idle_s * 1000000000ull;

	/* Signals: blocked in every thread (shards inherit the mask), taken
	 * here with sigwait(), then the runtime is stopped. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	corio_config_init(&cfg);
	cfg.shards = opts.shards;
	cfg.flags |= CORIO_F_NO_PIN;
	ret = corio_start(&cfg, entry, NULL, &rt);
	if (ret < 0) {
		fprintf(stderr, "upper-echo: %s\n", corio_last_error());
		return 1;
	}
	sigwait(&set, &sig);
	corio_stop(rt);
	ret = corio_wait(rt);
	return ret < 0 || failed ? 1 : 0;
}
#endif /* UPPER_ECHO_NO_MAIN */
