/* SPDX-License-Identifier: MIT */
/*
 * Buffered streams (corio/stream.h) over real TCP connections on
 * 127.0.0.1: lines cut at every byte (sent in pieces the reader receives
 * apart), zero copy where a frame lies in one buffer, a line over the
 * maximum, read_exact, peek and consume (and reading in place again after
 * a peek gathered more than was consumed), writes and writev byte-exact, the
 * graceful close against the reset a plain close causes, a timed-out or
 * cancelled read that keeps its bytes, a copying transport, bad input, and
 * the leak census for a stream never closed.
 */
#include "helpers.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------ */


static uint64_t bytes_in(struct corio_stream *st)
{
	struct corio_stream_stats ss;

	CHECK_EQ(corio_stream_stats_get(st, &ss), 0);
	return ss.bytes_in;
}

/* Send p[0..n) in pieces ending at cuts[], each only once the stream has
 * received everything before it, so each lands in a receive of its own. */
struct sender {
	struct corio_sock *c;
	struct corio_stream *st;
	const char *p;
	size_t n;
	const size_t *cuts;
	int ncuts;
};

static int send_pieces(void *arg)
{
	struct sender *sd = arg;
	size_t at = 0;

	for (int i = 0; i <= sd->ncuts; i++) {
		size_t end = i < sd->ncuts ? sd->cuts[i] : sd->n;

		if (end > at)
			CHECK_EQ(corio_send(sd->c, sd->p + at, end - at), (ssize_t)(end - at));
		at = end;
		while (bytes_in(sd->st) < at) /* the reader has this piece */
			corio_yield();
	}
	return corio_close(sd->c);
}

/* ---- lines at every cut ------------------------------------------------------ */

static const char lines_in[] = "alpha\nbe\n\ngamma-delta-epsilon\r\nx\nlast-without-lf";
static const char *const lines_want[] = { "alpha\n", "be\n", "\n", "gamma-delta-epsilon\r\n",
					  "x\n", "last-without-lf" };

/* Read every line of lines_in through a stream while send_pieces cuts it. */
static void read_lines(const size_t *cuts, int ncuts, struct corio_stream_stats *out)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_fiber *f = NULL;
	struct sender sd;
	const void *v;
	ssize_t r;

	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	sd = (struct sender){ c, st, lines_in, sizeof(lines_in) - 1, cuts, ncuts };
	CHECK_EQ(corio_spawn(send_pieces, &sd, NULL, &f), 0);
	for (size_t i = 0; i < sizeof(lines_want) / sizeof(lines_want[0]); i++) {
		size_t wl = strlen(lines_want[i]);

		r = corio_stream_read_until(st, '\n', 64, &v);
		CHECK_EQ(r, (ssize_t)wl);
		CHECK(r == (ssize_t)wl && memcmp(v, lines_want[i], wl) == 0);
	}
	CHECK_EQ(corio_stream_read_until(st, '\n', 64, &v), 0); /* end of stream */
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_stream_stats_get(st, out), 0);
	CHECK_EQ(corio_stream_close(st), 0);
}

static void lines_entry(void *arg)
{
	size_t n = sizeof(lines_in) - 1, cuts[sizeof(lines_in)];
	struct corio_stream_stats ss;
	uint64_t borrowed = 0, copied = 0;

	(void)arg;
	for (size_t a = 0; a <= n; a++) { /* one cut anywhere */
		read_lines(&a, 1, &ss);
		borrowed += ss.frames_borrowed;
		copied += ss.frames_buffered;
	}
	for (size_t a = 1; a < n; a += 3) { /* two cuts */
		size_t two[2] = { a, a + (a % 5) + 1 < n ? a + (a % 5) + 1 : n };

		read_lines(two, 2, &ss);
	}
	for (size_t i = 0; i < n; i++) /* byte by byte */
		cuts[i] = i + 1;
	read_lines(cuts, (int)n, &ss);
	CHECK(ss.frames_buffered >= 5); /* every line spanned receives */
	CHECK(ss.bytes_copied > 0);
	/* with one cut, the lines away from it came in place */
	CHECK(borrowed > 0 && copied > 0);
}

Test(stream, lines_cut_at_every_byte, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, lines_entry, NULL);
}

/* ---- zero copy ------------------------------------------------------------------ */

static void zero_copy_entry(void *arg)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_stats ss;
	const void *v[3];

	(void)arg;
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	CHECK_EQ(corio_send(c, "one\ntwo\nthree\n", 14), 14);
	CHECK_EQ(corio_stream_read_until(st, '\n', 100, &v[0]), 4);
	CHECK_EQ(corio_stream_read_until(st, '\n', 100, &v[1]), 4);
	CHECK_EQ(corio_stream_read_until(st, '\n', 100, &v[2]), 6);
	/* in place: consecutive views in one received buffer */
	CHECK((const char *)v[1] == (const char *)v[0] + 4);
	CHECK((const char *)v[2] == (const char *)v[1] + 4);
	CHECK(memcmp(v[2], "three\n", 6) == 0);
	CHECK_EQ(corio_stream_stats_get(st, &ss), 0);
	CHECK_EQ(ss.frames_borrowed, 3);
	CHECK_EQ(ss.bytes_copied, 0);
	CHECK_EQ(ss.rbuf_size, 0); /* the stream never needed a buffer of its own */
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_stream_close(st), 0);
}

Test(stream, frame_in_one_buffer_is_not_copied, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, zero_copy_entry, NULL);
}

/* ---- a line over the maximum ------------------------------------------------------ */

static void too_long_entry(void *arg)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_opts o = { .max_frame = 32 };
	const void *v;

	(void)arg;
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, &o, &st), 0);
	/* in one buffer */
	CHECK_EQ(corio_send(c, "0123456789abcdefXYZ\nok\n", 23), 23);
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), -EMSGSIZE);
	CHECK(strstr(corio_last_error(), "corio_stream_read_until") != NULL);
	CHECK_EQ(corio_stream_buffered(st), 23); /* the bytes stay */
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), -EMSGSIZE); /* again: same bytes */
	CHECK_EQ(corio_stream_skip_until(st, '\n'), 20);
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), 3);
	CHECK(memcmp(v, "ok\n", 3) == 0);
	/* across receives: at most max bytes are buffered for it */
	CHECK_EQ(corio_send(c, "0123456789", 10), 10);
	CHECK_EQ(corio_stream_peek(st, 10, &v), 10);
	CHECK_EQ(corio_send(c, "0123456789\nend\n", 15), 15);
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), -EMSGSIZE);
	CHECK_EQ(corio_stream_read_until(st, '\n', 32, &v), 21); /* a larger max takes it */
	CHECK_EQ(corio_stream_read_until(st, '\n', 32, &v), 4);
	CHECK(memcmp(v, "end\n", 4) == 0);
	/* over max_frame: bad input */
	CHECK_EINVAL_NAMES(corio_stream_read_until(st, '\n', 33, &v), "corio_stream_read_until");
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), 0);
	CHECK_EQ(corio_stream_close(st), 0);
}

Test(stream, line_over_max_is_emsgsize, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, too_long_entry, NULL);
}

/* ---- read_exact, peek, consume -------------------------------------------------------- */

static void exact_entry(void *arg)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_opts o = { .max_frame = 1 << 20 };
	size_t n = 300000;
	char *big = malloc(n), hdr[4];
	const void *v;
	ssize_t r;

	(void)arg;
	for (size_t i = 0; i < n; i++)
		big[i] = (char)(i * 7 + (i >> 9));
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, &o, &st), 0);
	memcpy(hdr, &(uint32_t){ (uint32_t)n }, 4);
	CHECK_EQ(corio_send(c, hdr, 4), 4);
	CHECK_EQ(corio_send(c, big, n), (ssize_t)n);
	CHECK_EQ(corio_send(c, "tail", 4), 4);
	CHECK_EQ(corio_shutdown_write(c), 0);
	r = corio_stream_peek(st, 1, &v);
	CHECK(r >= 1);
	CHECK_EQ(corio_stream_read_exact(st, 4, &v), 4);
	CHECK(memcmp(v, hdr, 4) == 0);
	r = corio_stream_read_exact(st, n, &v); /* spans many received buffers */
	CHECK_EQ(r, (ssize_t)n);
	CHECK(r == (ssize_t)n && memcmp(v, big, n) == 0);
	CHECK_EQ(corio_stream_peek(st, 2, &v), 4); /* fewer than asked only at the end */
	CHECK(memcmp(v, "tail", 4) == 0);
	CHECK_EQ(corio_stream_consume(st, 1), 0);
	CHECK_EINVAL_NAMES(corio_stream_consume(st, 4), "corio_stream_consume");
	CHECK_EQ(corio_stream_read_exact(st, 5, &v), -ENODATA); /* ended inside it */
	CHECK_EQ(corio_stream_buffered(st), 3);
	CHECK_EQ(corio_stream_read_exact(st, 3, &v), 3);
	CHECK(memcmp(v, "ail", 3) == 0);
	CHECK_EQ(corio_stream_read_exact(st, 3, &v), 0);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_stream_close(st), 0);
	free(big);
}

struct big_send {
	struct corio_sock *c;
	const char *p;
	size_t n;
};

static int send_big_then_line(void *arg)
{
	struct big_send *b = arg;

	CHECK_EQ(corio_send(b->c, b->p, b->n), (ssize_t)b->n);
	CHECK_EQ(corio_send(b->c, "x\n", 2), 2);
	return 0;
}

/* A read buffer one big frame grew past 1 MiB is given back once empty:
 * a connection that sent one large frame does not keep the memory (it
 * used to stay at its largest for the stream's life). */
static void shrink_entry(void *arg)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_opts o = { .max_frame = 4 << 20 };
	struct corio_stream_stats ss;
	struct corio_fiber *f = NULL;
	struct big_send b;
	size_t n = 3 << 20;
	char *big = malloc(n);
	const void *v;

	(void)arg;
	memset(big, 'b', n);
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, &o, &st), 0);
	b = (struct big_send){ c, big, n };
	CHECK_EQ(corio_spawn(send_big_then_line, &b, NULL, &f), 0);
	CHECK_EQ(corio_stream_read_exact(st, n, &v), (ssize_t)n); /* spans many buffers */
	CHECK_EQ(corio_stream_stats_get(st, &ss), 0);
	CHECK(ss.rbuf_size >= n);
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), 2);
	CHECK(memcmp(v, "x\n", 2) == 0);
	CHECK_EQ(corio_stream_stats_get(st, &ss), 0);
	CHECK_EQ(ss.rbuf_size, 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_stream_close(st), 0);
	free(big);
}

Test(stream, big_read_buffer_given_back_when_empty, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, shrink_entry, NULL);
}

Test(stream, read_exact_peek_consume, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, exact_entry, NULL);
}

/* A peek that gathered more than the caller then consumed goes back in
 * place: what is left of the copy came from the received buffer the stream
 * still holds, so the next read finds it there (it used to be read from
 * the copy, a piece at a time, until the copy ran dry). */
static void back_in_place_entry(void *arg)
{
	static const char in[] = "0123456789abcdef";
	static const size_t cut = 4;
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_stats ss;
	struct corio_fiber *f = NULL;
	struct sender sd;
	const void *v;

	(void)arg;
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	sd = (struct sender){ c, st, in, sizeof(in) - 1, &cut, 1 };
	CHECK_EQ(corio_spawn(send_pieces, &sd, NULL, &f), 0);
	CHECK_EQ(corio_stream_peek(st, 8, &v), 8); /* "0123" + "4567": gathered */
	CHECK(memcmp(v, "01234567", 8) == 0);
	CHECK_EQ(corio_stream_consume(st, 6), 0); /* "67" is left of the copy */
	CHECK_EQ(corio_stream_buffered(st), 10);
	CHECK_EQ(corio_stream_peek(st, 1, &v), 10); /* in place: all of it at once */
	CHECK(memcmp(v, "6789abcdef", 10) == 0);
	CHECK_EQ(corio_stream_read_exact(st, 10, &v), 10);
	CHECK(memcmp(v, "6789abcdef", 10) == 0);
	CHECK_EQ(corio_stream_stats_get(st, &ss), 0);
	CHECK_EQ(ss.frames_borrowed, 1);
	CHECK_EQ(ss.frames_buffered, 0);
	CHECK_EQ(ss.bytes_copied, 8);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_stream_read_exact(st, 1, &v), 0); /* end of stream */
	CHECK_EQ(corio_stream_close(st), 0);
}

Test(stream, gathered_bytes_not_consumed_are_read_in_place_again, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, back_in_place_entry, NULL);
}

/* peek_upto waits for n bytes only, but gathers up to max of what is
 * buffered: a parser sees the frames behind a spanning one in one view. */
static void peek_upto_entry(void *arg)
{
	static const char in[] = "0123456789abcdef";
	static const size_t cut = 4;
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_opts o = { .max_frame = 64 };
	struct corio_stream_stats ss;
	struct corio_fiber *f = NULL;
	struct sender sd;
	const void *v;

	(void)arg;
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, &o, &st), 0);
	CHECK_EINVAL_NAMES(corio_stream_peek_upto(st, 4, 3, &v), "corio_stream_peek_upto");
	CHECK_EINVAL_NAMES(corio_stream_peek_upto(st, 4, 65, &v), "corio_stream_peek_upto");
	CHECK_EINVAL_NAMES(corio_stream_peek_upto(st, 0, 8, &v), "corio_stream_peek_upto");
	sd = (struct sender){ c, st, in, sizeof(in) - 1, &cut, 1 };
	CHECK_EQ(corio_spawn(send_pieces, &sd, NULL, &f), 0);
	/* "0123", then "456789abcdef": 6 wanted, 12 gathered, none waited for */
	CHECK_EQ(corio_stream_peek_upto(st, 6, 12, &v), 12);
	CHECK(memcmp(v, "0123456789ab", 12) == 0);
	CHECK_EQ(corio_stream_consume(st, 10), 0);
	CHECK_EQ(corio_stream_peek_upto(st, 1, 64, &v), 6); /* "ab" back in place */
	CHECK(memcmp(v, "abcdef", 6) == 0);
	CHECK_EQ(corio_stream_consume(st, 6), 0);
	CHECK_EQ(corio_stream_stats_get(st, &ss), 0);
	CHECK_EQ(ss.bytes_copied, 12);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_stream_peek_upto(st, 1, 64, &v), 0); /* end of stream */
	CHECK_EQ(corio_stream_close(st), 0);
}

Test(stream, peek_upto_gathers_what_is_buffered_up_to_max, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, peek_upto_entry, NULL);
}

/* ---- writing ----------------------------------------------------------------------- */

struct drain_to {
	struct corio_sock *c;
	char *got;
	size_t n;
};

static int collect(void *arg)
{
	struct drain_to *d = arg;
	ssize_t r;

	while ((r = corio_recv(d->c, d->got + d->n, 1 << 16)) > 0)
		d->n += (size_t)r;
	CHECK_EQ(r, 0);
	return corio_close(d->c);
}

static void write_entry(void *arg)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_opts o = { .wbuf = 1000 };
	struct corio_stream_stats ss;
	struct corio_fiber *f = NULL;
	size_t total = 0, cap = 4 << 20;
	char *want = malloc(cap), *piece = malloc(5000);
	struct drain_to d = { NULL, malloc(cap + (1 << 16)), 0 };
	struct iovec iov[20];
	int calls = 0;

	(void)arg;
	for (size_t i = 0; i < 5000; i++)
		piece[i] = (char)('a' + i % 26);
	th_tcp_pair(&s, &c);
	d.c = c;
	CHECK_EQ(corio_stream_sock(s, &o, &st), 0);
	CHECK_EQ(corio_spawn(collect, &d, NULL, &f), 0);
	for (size_t i = 0; i < 3000; i++, calls++) { /* small, and some over the buffer */
		size_t len = i % 97 == 0 ? 1500 + i : 1 + i % 13;

		CHECK_EQ(corio_stream_write(st, piece, len), (ssize_t)len);
		memcpy(want + total, piece, len);
		total += len;
	}
	for (int k = 0; k < 2; k++) { /* 3 entries (one write with the buffer), 20 */
		int cnt = k ? 20 : 3;
		size_t sum = 0;

		CHECK_EQ(corio_stream_write(st, "x", 1), 1);
		want[total++] = 'x';
		for (int i = 0; i < cnt; i++) {
			iov[i] = (struct iovec){ piece + i, (size_t)(i * 37 + 1) };
			memcpy(want + total + sum, piece + i, iov[i].iov_len);
			sum += iov[i].iov_len;
		}
		CHECK_EQ(corio_stream_writev(st, iov, cnt), (ssize_t)sum);
		total += sum;
		calls += 2;
	}
	CHECK_EQ(corio_stream_write(st, "end", 3), 3);
	memcpy(want + total, "end", 3);
	total += 3;
	CHECK_EQ(corio_stream_flush(st), 0);
	CHECK_EQ(corio_stream_stats_get(st, &ss), 0);
	CHECK_EQ(ss.bytes_out, total);
	CHECK(ss.writes < (uint64_t)calls / 4); /* buffered: far fewer sends than calls */
	CHECK_EQ(corio_stream_close(st), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(d.n, total);
	CHECK(d.n == total && memcmp(d.got, want, total) == 0);
	free(want);
	free(piece);
	free(d.got);
}

Test(stream, write_flush_writev_byte_exact, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, write_entry, NULL);
}

/* ---- graceful close against the reset of a plain one --------------------------------- */
/*
 * The classic case: the client sends a request and more data the server
 * never reads, the server sends a long reply and closes. close(2) on a
 * socket with unread data sends a reset at once, and the part of the reply
 * still in the server's send queue (the client has not read yet) is
 * destroyed: the client reads part of it, then -ECONNRESET. The graceful
 * close shuts down the write side and drains until the client closes, so
 * the client reads the whole reply and end of stream.
 */
#define REPLY (384u << 10)
#define JUNK  (100u << 10)

struct close_case {
	struct corio_sock *c;
	struct corio_event closing; /* the server is closing: read now */
	size_t got;
	ssize_t end; /* the read that ended it: 0 or -errno */
};

static int reply_reader(void *arg)
{
	struct close_case *cc = arg;
	char buf[16384];
	ssize_t r;

	CHECK_EQ(corio_event_wait(&cc->closing), 0);
	while ((r = corio_recv(cc->c, buf, sizeof(buf))) > 0)
		cc->got += (size_t)r;
	cc->end = r;
	return corio_close(cc->c); /* the graceful close's drain ends here */
}

static void close_case(bool graceful, struct close_case *cc)
{
	struct corio_sock *s;
	struct corio_stream *st = NULL;
	struct corio_fiber *fr = NULL;
	int sndbuf = REPLY + (64 << 10), rcvbuf = 64 << 10;
	char *junk = calloc(1, JUNK), *reply = calloc(1, REPLY);
	const void *v;

	*cc = (struct close_case){ 0 };
	corio_event_init(&cc->closing);
	th_tcp_pair(&s, &cc->c);
	/* the whole reply fits the server's send queue, the client's window a
	 * part: without reading, most of it waits in the server */
	CHECK_EQ(corio_setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
	CHECK_EQ(corio_setsockopt(cc->c, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
	CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	memcpy(junk, "GET\n", 4);
	CHECK_EQ(corio_send(cc->c, junk, JUNK), (ssize_t)JUNK);
	CHECK_EQ(corio_spawn(reply_reader, cc, NULL, &fr), 0);
	CHECK_EQ(corio_stream_read_until(st, '\n', 100, &v), 4);
	CHECK_EQ(corio_stream_write(st, reply, REPLY), (ssize_t)REPLY);
	corio_event_set(&cc->closing);
	if (graceful)
		CHECK_EQ(corio_stream_close(st), 0);
	else
		CHECK_EQ(corio_stream_abort(st), 0);
	CHECK_EQ(corio_join(fr, NULL), 0);
	free(junk);
	free(reply);
}

static void close_entry(void *arg)
{
	struct close_case plain, graceful;

	(void)arg;
	close_case(false, &plain);
	close_case(true, &graceful);
	/* the plain close lost the reply's end to a reset: the case is real */
	CHECK_EQ(plain.end, -ECONNRESET);
	CHECK(plain.got < REPLY);
	/* the graceful one delivered all of it, then end of stream */
	CHECK_EQ(graceful.end, 0);
	CHECK_EQ(graceful.got, REPLY);
}

Test(stream, graceful_close_delivers_the_last_reply, .timeout = 60)
{
	/* one receive slot per socket: most of the junk stays in the kernel,
	 * unread, as it would behind a server that stopped reading */
	struct corio_config cfg = th_cfg(1);

	cfg.net_recv_queue = 1;
	th_run(&cfg, close_entry, NULL);
}

/* ---- deadline and cancellation keep the buffered bytes ---------------------------------- */

struct blocked {
	struct corio_stream *st;
	ssize_t r;
};

static int read_line_fiber(void *arg)
{
	struct blocked *b = arg;
	const void *v;

	b->r = corio_stream_read_until(b->st, '\n', 100, &v);
	return 0;
}

static void keep_entry(void *arg)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_deadline d;
	struct corio_fiber *f = NULL;
	struct blocked b;
	const void *v;

	(void)arg;
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	/* a deadline: the partial line stays */
	CHECK_EQ(corio_send(c, "part", 4), 4);
	CHECK_EQ(corio_timeout_push(&d, 50 * 1000 * 1000), 0);
	CHECK_EQ(corio_stream_read_until(st, '\n', 100, &v), -ETIMEDOUT);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_stream_buffered(st), 4);
	/* cancellation of a reader parked for the rest: the same */
	CHECK_EQ(corio_send(c, "ial", 3), 3);
	b = (struct blocked){ st, 1 };
	CHECK_EQ(corio_spawn(read_line_fiber, &b, NULL, &f), 0);
	while (bytes_in(st) < 7) /* it has the bytes and waits for more */
		corio_yield();
	corio_yield();
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(b.r, -ECANCELED);
	CHECK_EQ(corio_stream_buffered(st), 7);
	CHECK_EQ(corio_send(c, "-line\nnext\n", 11), 11);
	CHECK_EQ(corio_stream_read_until(st, '\n', 100, &v), 13);
	CHECK(memcmp(v, "partial-line\n", 13) == 0);
	CHECK_EQ(corio_stream_read_until(st, '\n', 100, &v), 5);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_stream_close(st), 0);
}

Test(stream, timeout_and_cancel_keep_buffered_bytes, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, keep_entry, NULL);
}

/* ---- a transport that only copies (as TLS will) -------------------------------------- */

static ssize_t copy_read(void *t, void *buf, size_t len)
{
	return corio_recv(t, buf, len < 3 ? len : 3); /* tiny reads: frames span */
}

static ssize_t copy_writev(void *t, const struct iovec *iov, int n, unsigned flags)
{
	(void)flags;
	return corio_sendv(t, iov, n, NULL);
}

static int copy_shut(void *t)
{
	return corio_shutdown_write(t);
}

static int copy_close(void *t)
{
	return corio_close(t);
}

static const struct corio_stream_transport copy_ops = {
	.read = copy_read,
	.writev = copy_writev,
	.shutdown_write = copy_shut,
	.close = copy_close,
};

static void copy_entry(void *arg)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_opts o = { .max_frame = 16, .flags = CORIO_STREAM_AUTOFLUSH };
	const void *v;
	char buf[64];

	(void)arg;
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_new(&copy_ops, s, &o, &st), 0);
	CHECK(corio_stream_transport(st) == s);
	CHECK_EQ(corio_send(c, "hello world\nthis line is far too long\nabc", 41), 41);
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), 12);
	CHECK(memcmp(v, "hello world\n", 12) == 0);
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), -EMSGSIZE);
	CHECK_EQ(corio_stream_skip_until(st, '\n'), 26);
	/* AUTOFLUSH: the reply goes out before the read waits */
	CHECK_EQ(corio_stream_write(st, "reply", 5), 5);
	CHECK_EQ(corio_stream_read_exact(st, 3, &v), 3);
	CHECK_EQ(corio_recv(c, buf, sizeof(buf)), 5);
	CHECK_EQ(corio_shutdown_write(c), 0);
	CHECK_EQ(corio_stream_read(st, buf, sizeof(buf)), 0);
	CHECK_EQ(corio_stream_close(st), 0);
	CHECK_EQ(corio_recv(c, buf, sizeof(buf)), 0);
	CHECK_EQ(corio_close(c), 0);
}

Test(stream, copying_transport_and_autoflush, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, copy_entry, NULL);
}

/* ---- cancellation and the deadline come first, even with bytes buffered ---------------- */

/* Every blocking read call, made by a fiber that is cancelled (or whose
 * deadline scope has passed) while the stream holds bytes: each returns
 * -ECANCELED (-ETIMEDOUT) and takes nothing, as corio_recv does (corio.h's
 * one rule). The stream used to hand out what it had buffered. */
#define REFUSES(st, call, expect)                                        \
	do {                                                             \
		size_t had_ = corio_stream_buffered(st);                 \
		CHECK(had_ > 0);                                         \
		CHECK_EQ((call), (expect));                              \
		CHECK_EQ(corio_stream_buffered(st), had_); /* taken: none */ \
	} while (0)

static void every_read_refuses(struct corio_stream *st, int expect, bool has_wait)
{
	struct corio_event ev;
	const void *v = NULL;
	char buf[1];

	corio_event_init(&ev);
	REFUSES(st, corio_stream_peek(st, 1, &v), expect);
	REFUSES(st, corio_stream_peek_upto(st, 1, 8, &v), expect);
	if (has_wait)
		REFUSES(st, corio_stream_wait(st, &ev), expect);
	REFUSES(st, corio_stream_read_until(st, '\n', 16, &v), expect);
	REFUSES(st, corio_stream_skip_until(st, '\n'), expect);
	REFUSES(st, corio_stream_read_exact(st, 1, &v), expect);
	REFUSES(st, corio_stream_read(st, buf, sizeof(buf)), expect);
}

struct refusing {
	struct corio_stream *st;
	bool has_wait;
};

static int cancelled_reader(void *arg)
{
	struct refusing *r = arg;

	CHECK_EQ(corio_cancel(corio_self()), 0);
	every_read_refuses(r->st, -ECANCELED, r->has_wait);
	return 0;
}

#define LINES5 "ab\ncd\nef\ngh\nij\n"

static void refuse_case(const struct corio_stream_transport *ops)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_deadline d;
	struct corio_fiber *f = NULL;
	struct refusing r;
	const void *v;

	th_tcp_pair(&s, &c);
	CHECK_EQ(ops ? corio_stream_new(ops, s, NULL, &st) : corio_stream_sock(s, NULL, &st), 0);
	CHECK_EQ(corio_send(c, LINES5, 15), 15);
	CHECK(corio_stream_peek(st, 15, &v) >= 15); /* all buffered */
	r = (struct refusing){ st, !ops };
	CHECK_EQ(corio_spawn(cancelled_reader, &r, NULL, &f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_timeout_push(&d, 1), 0);
	CHECK_EQ(corio_sleep_ns(1000 * 1000), -ETIMEDOUT); /* the scope has passed */
	every_read_refuses(st, -ETIMEDOUT, !ops);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	/* every byte is still there, in order (bounded: a read that took
	 * them would leave these waiting) */
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_timeout_push(&d, 5ull * 1000 * 1000 * 1000), 0);
	for (int i = 0; i < 5; i++) {
		CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), 3);
		CHECK(v && memcmp(v, &LINES5[3 * i], 3) == 0);
	}
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), 0);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_stream_close(st), 0);
}

static void refuse_entry(void *arg)
{
	(void)arg;
	refuse_case(NULL);      /* plain: the bytes lie in a lent buffer */
	refuse_case(&copy_ops); /* copying, 3-byte reads: in the stream's own */
}

Test(stream, cancelled_or_expired_reads_refuse_even_with_bytes_buffered, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, refuse_entry, NULL);
}

/* ---- waiting for input or an event (corio_stream_wait) ------------------------------- */

/* The idle wait of a keep-alive server: input wins, a set event ends the
 * wait with -ESHUTDOWN, bytes already buffered return at once, a deadline
 * keeps what came, end of stream is 0; a transport without read_or says
 * -ENOTSUP. */
static void wait_entry(void *arg)
{
	struct corio_sock *s, *c, *s2, *c2;
	struct corio_stream *st = NULL, *st2 = NULL;
	struct corio_event ev;
	struct corio_deadline d;
	const void *v;

	(void)arg;
	corio_event_init(&ev);
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	CHECK_EQ(corio_stream_wait(st, NULL), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_stream_wait") != NULL);
	CHECK_EQ(corio_send(c, "ab\ncd\n", 6), 6);
	CHECK_EQ(corio_stream_wait(st, &ev), 6); /* event unset: waits for the bytes */
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), 3);
	corio_event_set(&ev);
	CHECK_EQ(corio_stream_wait(st, &ev), 3); /* buffered: at once, event or not */
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), 3);
	CHECK(memcmp(v, "cd\n", 3) == 0);
	CHECK_EQ(corio_stream_wait(st, &ev), -ESHUTDOWN); /* nothing came: the event */
	corio_event_reset(&ev);
	CHECK_EQ(corio_timeout_push(&d, 20 * 1000 * 1000), 0);
	CHECK_EQ(corio_stream_wait(st, &ev), -ETIMEDOUT);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_send(c, "ef\n", 3), 3);
	CHECK_EQ(corio_stream_wait(st, &ev), 3); /* nothing lost to the timeout */
	CHECK_EQ(corio_stream_read_until(st, '\n', 16, &v), 3);
	CHECK(memcmp(v, "ef\n", 3) == 0);
	CHECK_EQ(corio_shutdown_write(c), 0);
	CHECK_EQ(corio_stream_wait(st, &ev), 0); /* end of stream */
	CHECK_EQ(corio_stream_close(st), 0);
	CHECK_EQ(corio_close(c), 0);
	th_tcp_pair(&s2, &c2);
	CHECK_EQ(corio_stream_new(&copy_ops, s2, NULL, &st2), 0);
	CHECK_EQ(corio_stream_wait(st2, &ev), -ENOTSUP);
	CHECK_EQ(corio_stream_abort(st2), 0);
	CHECK_EQ(corio_close(c2), 0);
}

Test(stream, wait_ends_at_input_or_the_event, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, wait_entry, NULL);
}

/* ---- files on a stream (corio_stream_sendfile) ----------------------------------------- */

#define FILE_LEN ((size_t)300 * 1024 + 7)

static bool uncached_reached;

/* A head, a file, a tail, byte-exact, on the plain transport (sendfile) and
 * on the copying one (read into the write buffer); a file shorter than
 * asked is -ENODATA and breaks the write side. */
static void file_case(const struct corio_stream_transport *ops, int fd, const char *want)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_opts o = { .wbuf = 1000 };
	struct corio_fiber *f = NULL;
	struct drain_to d = { NULL, malloc(FILE_LEN + (1 << 17)), 0 };

	th_tcp_pair(&s, &c);
	d.c = c;
	CHECK_EQ(ops ? corio_stream_new(ops, s, &o, &st) : corio_stream_sock(s, &o, &st), 0);
	CHECK_EQ(corio_spawn(collect, &d, NULL, &f), 0);
	CHECK_EQ(corio_stream_write(st, "head", 4), 4);
	CHECK_EQ(corio_stream_sendfile(st, fd, 0, FILE_LEN), (ssize_t)FILE_LEN);
	CHECK_EQ(corio_stream_sendfile(st, fd, 5, 10), 10);
	CHECK_EQ(corio_stream_write(st, "tail", 4), 4);
	CHECK_EQ(corio_stream_flush(st), 0);
	CHECK_EQ(corio_stream_sendfile(st, fd, FILE_LEN - 3, 4), -ENODATA);
	CHECK(strstr(corio_last_error(), "corio_stream_sendfile") != NULL);
	CHECK_EQ(corio_stream_write(st, "x", 1), -ENODATA); /* sticky */
	corio_stream_close(st); /* its error is the sticky one */
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK(d.n >= 4 + FILE_LEN + 14);
	CHECK(memcmp(d.got, "head", 4) == 0);
	CHECK(memcmp(d.got + 4, want, FILE_LEN) == 0);
	CHECK(memcmp(d.got + 4 + FILE_LEN, want + 5, 10) == 0);
	CHECK(memcmp(d.got + 4 + FILE_LEN + 10, "tail", 4) == 0);
	free(d.got);
}

/* An unlinked temporary file of FILE_LEN bytes made from tmpl (a mkstemp
 * template): its fd, and its bytes in *want (malloc'd). */
static int test_file(char *tmpl, unsigned mul, unsigned div, char **want)
{
	int fd = mkstemp(tmpl);

	*want = malloc(FILE_LEN);
	CHECK(fd >= 0 && *want);
	unlink(tmpl);
	for (size_t i = 0; i < FILE_LEN; i++)
		(*want)[i] = (char)(i * mul + i / div);
	CHECK_EQ(corio_write_all(fd, *want, FILE_LEN, 0, NULL), (ssize_t)FILE_LEN);
	return fd;
}

static void file_entry(void *arg)
{
	char path[] = "/tmp/corio-stream-file-XXXXXX", *want;
	int fd = test_file(path, 7, 251, &want);

	(void)arg;
	file_case(NULL, fd, want);
	file_case(&copy_ops, fd, want);
	close(fd);
	free(want);
}

Test(stream, sendfile_byte_exact_on_both_transports, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, file_entry, NULL);
}

/* A file that is not in the page cache: the copying transport's read is
 * refused on the spot (RWF_NOWAIT) and goes through the ring, byte-exact;
 * on the epoll fallback, which has no file ops, through the blocking-work
 * pool (core/fileio.c), so the read parks the fiber, not the shard (it
 * used to be a pread(2) on the shard). */
static void uncached_entry(void *arg)
{
	char path[] = "/var/tmp/corio-stream-cold-XXXXXX", *want, b;
	struct iovec v = { &b, 1 };
	struct corio_work_stats w0, w1;
	int fd = test_file(path, 11, 241, &want);

	(void)arg;
	CHECK_EQ(fdatasync(fd), 0);
	CHECK_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	if (preadv2(fd, &v, 1, 0, RWF_NOWAIT) == -1 && errno == EAGAIN)
		uncached_reached = true; /* else the kernel kept the pages: skip */
	CHECK_EQ(corio_work_stats_get(NULL, 0, &w0), 0);
	if (uncached_reached)
		file_case(&copy_ops, fd, want);
	CHECK_EQ(corio_work_stats_get(NULL, 0, &w1), 0);
	if (uncached_reached && th_on_epoll())
		CHECK(w1.submitted > w0.submitted); /* the pool read what was not cached */
	else
		CHECK_EQ(w1.submitted, w0.submitted); /* the ring did */
	close(fd);
	free(want);
}

Test(stream, sendfile_of_a_file_not_in_the_page_cache_reads_it_through_the_ring_or_the_pool,
     .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, uncached_entry, NULL);
	if (!uncached_reached)
		cr_skip_test("the page cache kept the file after POSIX_FADV_DONTNEED");
}

/* A small cached file goes out in the same send as the head before it and
 * the tail after it (one transport write), byte-exact; a large one does not
 * (head, file, tail). */
static void small_file_entry(void *arg)
{
	static const size_t sizes[] = { 13, 4096, 16384, 3 << 20 };
	char path[] = "/tmp/corio-stream-small-XXXXXX", *want = malloc(3 << 20);
	int fd = mkstemp(path);

	(void)arg;
	CHECK(fd >= 0);
	unlink(path);
	for (size_t i = 0; i < (3u << 20); i++)
		want[i] = (char)(i * 13 + i / 509);
	CHECK_EQ(corio_write_all(fd, want, 3 << 20, 0, NULL), (ssize_t)(3 << 20));
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct corio_sock *s, *c;
		struct corio_stream *st = NULL;
		struct corio_stream_opts o = { .wbuf = 32768 };
		struct corio_stream_stats ss;
		struct corio_fiber *f = NULL;
		struct drain_to d = { NULL, malloc(sizes[k] + (1 << 17)), 0 };

		th_tcp_pair(&s, &c);
		d.c = c;
		CHECK_EQ(corio_stream_sock(s, &o, &st), 0);
		CHECK_EQ(corio_spawn(collect, &d, NULL, &f), 0);
		CHECK_EQ(corio_stream_write(st, "head", 4), 4);
		CHECK_EQ(corio_stream_sendfile(st, fd, 0, sizes[k]), (ssize_t)sizes[k]);
		CHECK_EQ(corio_stream_write(st, "tail", 4), 4);
		CHECK_EQ(corio_stream_flush(st), 0);
		CHECK_EQ(corio_stream_stats_get(st, &ss), 0);
		CHECK_EQ(ss.writes, sizes[k] <= 16384 ? 1u : 3u);
		CHECK_EQ(ss.bytes_out, sizes[k] + 8);
		CHECK_EQ(corio_stream_close(st), 0);
		CHECK_EQ(corio_join(f, NULL), 0);
		CHECK(d.n == sizes[k] + 8 && !memcmp(d.got, "head", 4) &&
		      !memcmp(d.got + 4, want, sizes[k]) && !memcmp(d.got + 4 + sizes[k], "tail", 4));
		free(d.got);
	}
	close(fd);
	free(want);
}

Test(stream, sendfile_small_cached_file_leaves_in_the_heads_send, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, small_file_entry, NULL);
}

/* ---- "more follows" through the ops table ------------------------------------------------ */

/* Any transport hears "more follows" as a flag of its writev: the buffered
 * head before a file its sendfile op sends carries CORIO_STREAM_WRITE_MORE
 * (the plain transport turns it into MSG_MORE), every other write 0. The
 * stream used to ask it of the socket transport alone, around the table. */
struct more_t {
	struct corio_sock *s;
	unsigned flags[8];
	int writes;
};

static ssize_t more_writev(void *t, const struct iovec *iov, int n, unsigned flags)
{
	struct more_t *m = t;

	if (m->writes < 8)
		m->flags[m->writes] = flags;
	m->writes++;
	return corio_sendv(m->s, iov, n, NULL);
}

static ssize_t more_read(void *t, void *buf, size_t len)
{
	return corio_recv(((struct more_t *)t)->s, buf, len);
}

static int more_shut(void *t)
{
	return corio_shutdown_write(((struct more_t *)t)->s);
}

static int more_close(void *t)
{
	return corio_close(((struct more_t *)t)->s);
}

static ssize_t more_sendfile(void *t, int fd, off_t off, size_t len)
{
	return corio_sendfile(((struct more_t *)t)->s, fd, off, len);
}

static const struct corio_stream_transport more_ops = {
	.read = more_read,
	.writev = more_writev,
	.sendfile = more_sendfile,
	.shutdown_write = more_shut,
	.close = more_close,
};

static void more_entry(void *arg)
{
	char path[] = "/tmp/corio-stream-more-XXXXXX", *want;
	int fd = test_file(path, 3, 127, &want);
	struct more_t m = { 0 };
	struct corio_sock *c;
	struct corio_stream *st = NULL;
	struct corio_fiber *f = NULL;
	struct drain_to d = { NULL, malloc(FILE_LEN + (1 << 17)), 0 };

	(void)arg;
	th_tcp_pair(&m.s, &c);
	d.c = c;
	CHECK_EQ(corio_stream_new(&more_ops, &m, NULL, &st), 0);
	CHECK_EQ(corio_spawn(collect, &d, NULL, &f), 0);
	CHECK_EQ(corio_stream_write(st, "head", 4), 4);
	CHECK_EQ(corio_stream_sendfile(st, fd, 0, FILE_LEN), (ssize_t)FILE_LEN);
	CHECK_EQ(m.writes, 1); /* the head, before the file */
	CHECK_EQ(m.flags[0], CORIO_STREAM_WRITE_MORE);
	CHECK_EQ(corio_stream_write(st, "tail", 4), 4);
	CHECK_EQ(corio_stream_flush(st), 0);
	CHECK_EQ(m.writes, 2);
	CHECK_EQ(m.flags[1], 0u); /* a plain flush: nothing follows */
	CHECK_EQ(corio_stream_close(st), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK(d.n == 4 + FILE_LEN + 4 && !memcmp(d.got, "head", 4) &&
	      !memcmp(d.got + 4, want, FILE_LEN) && !memcmp(d.got + 4 + FILE_LEN, "tail", 4));
	close(fd);
	free(want);
	free(d.got);
}

Test(stream, transport_writev_hears_more_follows_before_a_file, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, more_entry, NULL);
}

/* ---- sendfile of anything but a regular file --------------------------------------------- */

/* A character device, a FIFO, a directory, a socket: -EINVAL with a message
 * naming the call; a closed fd: -EBADF. Nothing goes out and the write side
 * stays whole (bad input, not a failed write), on corio_sendfile, on the
 * plain transport (sendfile, and the small cached file copied inline: it
 * used to read 4 KiB of /dev/zero and send them) and on a copying one (read
 * and written, as TLS does). */
static void not_file_case(const struct corio_stream_transport *ops, int fd)
{
	struct th_not_file nf[TH_NOT_FILES];
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_deadline d;
	char buf[16] = "";

	/* bounded: a call that read a FIFO or a socket would wait for ever */
	CHECK_EQ(corio_timeout_push(&d, 5ull * 1000 * 1000 * 1000), 0);
	th_tcp_pair(&s, &c);
	if (!ops) { /* the socket call the plain transport uses, first */
		th_not_files(nf);
		for (int i = 0; i < TH_NOT_FILES; i++) {
			th_error_reset();
			CHECK_EQ(corio_sendfile(s, nf[i].fd, 0, 4096), nf[i].err);
			CHECK(strstr(corio_last_error(), "corio_sendfile: ") == corio_last_error());
			CHECK(strstr(corio_last_error(), nf[i].msg) != NULL);
		}
		th_not_files_close(nf);
	}
	CHECK_EQ(ops ? corio_stream_new(ops, s, NULL, &st) : corio_stream_sock(s, NULL, &st), 0);
	CHECK_EQ(corio_stream_write(st, "hd", 2), 2); /* buffered: must not go out alone */
	th_not_files(nf);
	for (int i = 0; i < TH_NOT_FILES; i++) {
		th_error_reset();
		CHECK_EQ(corio_stream_sendfile(st, nf[i].fd, 0, 4096), nf[i].err);
		CHECK(strstr(corio_last_error(), "corio_stream_sendfile: ") == corio_last_error());
		CHECK(strstr(corio_last_error(), nf[i].msg) != NULL);
		CHECK_EQ(corio_stream_sendfile(st, nf[i].fd, 0, 0), nf[i].err); /* len 0 too */
	}
	th_not_files_close(nf);
	/* not sticky, nothing sent: the head and a real file go out, exactly */
	CHECK_EQ(corio_stream_sendfile(st, fd, 0, 4), 4);
	CHECK_EQ(corio_stream_flush(st), 0);
	CHECK_EQ(corio_shutdown_write(c), 0);
	for (size_t got = 0; got < 6;) {
		ssize_t n = corio_recv(c, buf + got, sizeof(buf) - got);

		CHECK(n > 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	CHECK(memcmp(buf, "hdfile", 6) == 0);
	CHECK_EQ(corio_stream_close(st), 0);
	CHECK_EQ(corio_recv(c, buf, sizeof(buf)), 0); /* nothing behind it */
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_deadline_pop(&d), 0);
}

static void not_file_entry(void *arg)
{
	char path[] = "/tmp/corio-stream-file-XXXXXX";
	int fd = mkstemp(path);

	(void)arg;
	CHECK(fd >= 0);
	unlink(path);
	CHECK_EQ(write(fd, "file", 4), 4);
	not_file_case(NULL, fd);
	not_file_case(&copy_ops, fd);
	close(fd);
}

Test(stream, sendfile_refuses_anything_but_a_regular_file, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, not_file_entry, NULL);
}

/* ---- bad input ------------------------------------------------------------------------ */

static void bad_entry(void *arg)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct corio_stream_opts o = { .flags = 0x80 };
	struct corio_stream_transport none = { 0 };
	const void *v;

	(void)arg;
	th_tcp_pair(&s, &c);
	CHECK_EINVAL_NAMES(corio_stream_sock(s, &o, &st), "corio_stream_new");
	o = (struct corio_stream_opts){ .reserved = { 1 } };
	CHECK_EINVAL_NAMES(corio_stream_sock(s, &o, &st), "corio_stream_new");
	CHECK_EINVAL_NAMES(corio_stream_new(&none, s, NULL, &st), "corio_stream_new");
	CHECK_EINVAL_NAMES(corio_stream_sock(NULL, NULL, &st), "corio_stream_sock");
	CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	CHECK_EINVAL_NAMES(corio_stream_read_until(st, 256, 10, &v), "corio_stream_read_until");
	CHECK_EINVAL_NAMES(corio_stream_read_until(st, '\n', 0, &v), "corio_stream_read_until");
	CHECK_EINVAL_NAMES(corio_stream_read_until(st, '\n', 10, NULL), "corio_stream_read_until");
	CHECK_EINVAL_NAMES(corio_stream_read_exact(st, 0, &v), "corio_stream_read_exact");
	CHECK_EINVAL_NAMES(corio_stream_peek(st, 1 << 20, &v), "corio_stream_peek");
	CHECK_EINVAL_NAMES(corio_stream_read(st, NULL, 1), "corio_stream_read");
	CHECK_EINVAL_NAMES(corio_stream_write(st, NULL, 1), "corio_stream_write");
	CHECK_EINVAL_NAMES(corio_stream_writev(st, NULL, 1), "corio_stream_writev");
	CHECK_EINVAL_NAMES(corio_stream_close(NULL), "corio_stream_close");
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_stream_close(st), 0);
}

Test(stream, bad_input_is_einval_naming_the_call, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, bad_entry, NULL);
}

/* ---- the census ------------------------------------------------------------------------- */

static void leak_entry(void *arg)
{
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;

	(void)arg;
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	CHECK_EQ(corio_stream_write(st, "x", 1), 1); /* holds its write buffer */
	CHECK_EQ(corio_close(c), 0);
	/* st is never closed */
}

static int leak_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	int ret;

	(void)arg;
	ret = corio_run(&cfg, leak_entry, NULL);
	if (atomic_load(&th_failures)) {
		fprintf(stderr, "%s\n", th_msg);
		return 2;
	}
	if (ret != -EBUSY || !strstr(corio_last_error(), "1 streams never closed")) {
		fprintf(stderr, "corio_run: %d (%s)\n", ret, corio_last_error());
		return 1;
	}
	return 0;
}

/* A stream its fiber never closed shows in corio_wait()'s census (in a
 * child: the leaked stream's memory and socket go with the process). */
Test(stream, census_counts_a_stream_never_closed, .timeout = 30)
{
	th_child_ok(leak_child, NULL, 20000, "a leaked stream");
}

/* The same on every other test: th_run checks corio_run's census. */

/* ---- corio_stream_write_owned ------------------------------------------------ */

#define WO_LEN (256u << 10)

struct wo {
	int calls, res;
	bool in_call; /* set while corio_stream_write_owned runs */
	bool ran_inside;
};

static void wo_done(void *arg, int res)
{
	struct wo *w = arg;

	w->calls++;
	w->res = res;
	w->ran_inside = w->in_call;
}

static void wo_done_free(void *arg, int res)
{
	struct wo *w = *(struct wo **)arg;

	wo_done(w, res);
	free(arg); /* the buffer is the stream's until here: done frees it */
}

/* A transport that is not the plain one (as TLS is not): copies through
 * corio_recv / corio_sendv. */
static ssize_t wo_read(void *t, void *buf, size_t len)
{
	return corio_recv(t, buf, len);
}
static ssize_t wo_writev(void *t, const struct iovec *iov, int n, unsigned flags)
{
	(void)flags;
	return corio_sendv(t, iov, n, NULL);
}
static int wo_shut(void *t)
{
	return corio_shutdown_write(t);
}
static int wo_close(void *t)
{
	return corio_close(t);
}
static const struct corio_stream_transport wo_ops = {
	.read = wo_read, .writev = wo_writev, .shutdown_write = wo_shut, .close = wo_close,
};

static void wo_entry(void *arg)
{
	static uint8_t got[WO_LEN + 16];
	struct corio_sock *s, *c;
	struct corio_stream *st = NULL;
	struct wo w;
	bool generic = *(bool *)arg;
	uint8_t *buf = malloc(sizeof(struct wo *) + WO_LEN), *p = buf + sizeof(struct wo *);
	size_t have = 0;
	ssize_t n;

	memset(&w, 0, sizeof(w));
	*(struct wo **)buf = &w;
	for (size_t i = 0; i < WO_LEN; i++)
		p[i] = (uint8_t)(i * 7 + 3);
	th_tcp_pair(&s, &c);
	if (generic)
		CHECK_EQ(corio_stream_new(&wo_ops, s, NULL, &st), 0);
	else
		CHECK_EQ(corio_stream_sock(s, NULL, &st), 0);
	/* bad input: refused, done never runs */
	CHECK_EQ(corio_stream_write_owned(st, NULL, 4, wo_done, &w), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_stream_write_owned: buf is NULL") != NULL);
	CHECK_EQ(corio_stream_write_owned(st, p, 0, wo_done, &w), -EINVAL);
	CHECK_EQ(w.calls, 0);
	CHECK_EQ(corio_stream_write(st, "head", 4), 4); /* buffered: goes first */
	w.in_call = true;
	CHECK_EQ(corio_stream_write_owned(st, p, WO_LEN, wo_done_free, buf), 0);
	w.in_call = false;
	/* the plain transport queues it and returns: done comes from the loop */
	if (!generic)
		CHECK_EQ(w.calls, 0);
	CHECK_EQ(corio_stream_write(st, "tail", 4), 4);
	CHECK_EQ(corio_stream_flush(st), 0);
	while (have < WO_LEN + 8 && (n = corio_recv(c, got + have, sizeof(got) - have)) > 0)
		have += (size_t)n;
	CHECK_EQ(have, WO_LEN + 8);
	CHECK(!memcmp(got, "head", 4));
	for (size_t i = 0; i < WO_LEN; i++)
		if (got[4 + i] != (uint8_t)(i * 7 + 3)) {
			CHECK(!"a byte of the owned buffer was lost or reordered");
			break;
		}
	CHECK(!memcmp(got + 4 + WO_LEN, "tail", 4));
	CHECK_EQ(corio_shutdown_write(c), 0); /* the close's drain ends at once */
	CHECK_EQ(corio_stream_close(st), 0);
	CHECK_EQ(w.calls, 1);
	CHECK_EQ(w.res, (int)WO_LEN);
	CHECK_EQ(w.ran_inside, generic); /* a copying transport: inside the call */
	CHECK_EQ(corio_close(c), 0);
}

Test(stream, write_owned_plain_queues_without_a_copy_and_keeps_the_order, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	bool generic = false;

	th_run(&cfg, wo_entry, &generic);
}

Test(stream, write_owned_on_a_copying_transport_calls_done_before_it_returns, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	bool generic = true;

	th_run(&cfg, wo_entry, &generic);
}
