/* SPDX-License-Identifier: MIT */
/*
 * tools/examples/upper-echo: the protocol fed at every split point, a real
 * server (ue_serve(), in this process) driven over 127.0.0.1 - lines split
 * across receives, CRLF, bytes that are not UTF-8, a 1 MiB line over and
 * under the limit, many lines in one send, a last line without LF - and
 * the built program started as a child and stopped with SIGTERM/SIGINT.
 */
#include "helpers.h"

#include "examples/upper-echo/upper.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024 * 1024)

/* ---- the protocol alone: every split gives the same answers --------------------- */
static void feed_all(const char *in, size_t n, size_t max, const size_t *cuts, int ncuts,
		     struct ue_buf *out)
{
	struct ue_line l;
	size_t at = 0;

	ue_line_init(&l, max);
	for (int i = 0; i <= ncuts; i++) {
		size_t end = i < ncuts ? cuts[i] : n;

		cr_assert_eq(ue_feed(&l, in + at, end - at, out), 0);
		at = end;
	}
	cr_assert_eq(ue_finish(&l, out), 0);
	ue_line_free(&l);
}

Test(upper_echo, protocol_every_split)
{
	static const char in[] = "ab\r\ncd\n\nxyz0123\n123456789\n12345678901\n1234567890\r\n"
				 "\xff\xfe\x80 \xc3\xa9t\xc3\xa9\r\r\nABC\x00q\n123456789012tail";
	static const char want[] = "AB!!!\r\nCD!!!\n!!!\nXYZ0123!!!\n123456789!!!\n"
				   "ERROR line too long (max 10 bytes)\n1234567890!!!\r\n"
				   "\xff\xfe\x80 \xc3\xa9T\xc3\xa9\r!!!\r\nABC\x00Q!!!\n"
				   "ERROR line too long (max 10 bytes)\n";
	size_t n = sizeof(in) - 1;

	/* one cut anywhere, and two cuts anywhere */
	for (size_t a = 0; a <= n; a++) {
		for (size_t b = a; b <= n; b += (a % 7 == 0 ? 1 : 13)) {
			struct ue_buf out = { 0 };
			size_t cuts[2] = { a, b };

			feed_all(in, n, 10, cuts, 2, &out);
			cr_assert_eq(out.len, sizeof(want) - 1, "cuts %zu %zu: %zu bytes", a, b, out.len);
			cr_assert(memcmp(out.p, want, out.len) == 0, "cuts %zu %zu", a, b);
			free(out.p);
		}
	}
	/* byte by byte */
	{
		struct ue_buf out = { 0 };
		size_t cuts[sizeof(in)];

		for (size_t i = 0; i < n; i++)
			cuts[i] = i;
		feed_all(in, n, 10, cuts, (int)n, &out);
		cr_assert(out.len == sizeof(want) - 1 && memcmp(out.p, want, out.len) == 0);
		free(out.p);
	}
}

/* A last line without LF is judged at end of stream: a trailing CR is not a
 * line ending there, so max + 1 bytes ending in CR are too long (found by
 * test/fuzz/fuzz_upper.c: it used to be answered). */
Test(upper_echo, last_line_cr_at_eof_over_max)
{
	static const char in[] = "ok\n12345\r";
	static const char want[] = "OK!!!\nERROR line too long (max 5 bytes)\n";
	struct ue_buf out = { 0 };

	feed_all(in, sizeof(in) - 1, 5, NULL, 0, &out);
	cr_assert(out.len == sizeof(want) - 1 && memcmp(out.p, want, out.len) == 0,
		  "got %.*s", (int)out.len, out.p);
	free(out.p);
}

/* ---- a real server over loopback ---------------------------------------------------- */
struct step {
	const char *send;
	size_t slen;        /* 0: strlen(send) */
	const char *expect; /* NULL: nothing to read after this send */
	size_t elen;        /* 0: strlen(expect) */
};

static ssize_t recv_exact(struct corio_sock *s, char *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = corio_recv(s, p + got, n - got);

		if (r <= 0)
			return r < 0 ? r : (ssize_t)got;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* Run steps on one connection; after the last, half-close and expect
 * `tail` then end of stream. */
static void converse(const char *addr, const struct step *steps, int n, const char *tail)
{
	struct corio_sock *c = NULL;
	char buf[4096];

	CHECK_EQ(corio_tcp_connect(addr, &c), 0);
	if (!c)
		return;
	for (int i = 0; i < n; i++) {
		const struct step *st = &steps[i];
		size_t sl = st->slen ? st->slen : strlen(st->send);

		CHECK_EQ(corio_send(c, st->send, sl), (ssize_t)sl);
		if (st->expect) {
			size_t el = st->elen ? st->elen : strlen(st->expect);
			char *got = malloc(el);

			CHECK_EQ(recv_exact(c, got, el), (ssize_t)el);
			CHECK(memcmp(got, st->expect, el) == 0);
			free(got);
		}
	}
	CHECK_EQ(corio_shutdown_write(c), 0);
	{
		size_t tl = strlen(tail);

		CHECK_EQ(recv_exact(c, buf, tl), (ssize_t)tl);
		CHECK(memcmp(buf, tail, tl) == 0);
		CHECK_EQ(corio_recv(c, buf, sizeof(buf)), 0); /* the server closed */
	}
	CHECK_EQ(corio_close(c), 0);
}

struct server {
	struct ue_server srv;
	char addr[64];
	int ret;
};

static int server_main(void *arg)
{
	struct server *sv = arg;

	sv->ret = ue_serve(&sv->srv);
	return 0;
}

static struct corio_fiber *start_server(struct server *sv, size_t max_line)
{
	struct corio_fiber *f = NULL;

	memset(sv, 0, sizeof(*sv));
	sv->srv.max_line = max_line;
	sv->srv.addr = "127.0.0.1:0";
	CHECK_EQ(corio_spawn(server_main, sv, NULL, &f), 0);
	while (!sv->srv.bound[0]) /* corio_serve listens, then says where */
		corio_yield();
	snprintf(sv->addr, sizeof(sv->addr), "%s", sv->srv.bound);
	return f;
}

static void stop_server(struct server *sv, struct corio_fiber *f)
{
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(sv->ret, -ECANCELED);
}

static void split_entry(void *arg)
{
	struct server sv;
	struct corio_fiber *f = start_server(&sv, 0);

	(void)arg;
	/* Each expected answer proves the server has taken in the partial line
	 * sent with it, so the next piece arrives in another receive. */
	const struct step split[] = {
		{ "hel", 0, NULL, 0 },
		{ "lo\nwo", 0, "HELLO!!!\n", 0 },
		{ "r", 0, NULL, 0 },
		{ "ld\nz\r", 0, "WORLD!!!\n", 0 },
		{ "\n", 0, "Z!!!\r\n", 0 }, /* CR and LF in different receives */
		{ "a\r\nb\nc\r\n\r\n", 0, "A!!!\r\nB!!!\nC!!!\r\n!!!\r\n", 0 },
		{ "caf\xc3\xa9 \xff\xc0\xaf\x00x\n", 12, "CAF\xc3\xa9 \xff\xc0\xaf\x00X!!!\n", 15 },
	};
	converse(sv.addr, split, (int)(sizeof(split) / sizeof(split[0])), "");
	/* a last line without LF is answered at end of stream */
	converse(sv.addr, (const struct step[]){ { "one\ntwo", 0, "ONE!!!\n", 0 } }, 1, "TWO!!!\n");

	/* many lines in one send: answers in order */
	{
		static char in[1000 * 8], want[1000 * 11];
		size_t il = 0, wl = 0;

		for (int i = 0; i < 1000; i++) {
			il += (size_t)sprintf(in + il, "l%05d\n", i);
			wl += (size_t)sprintf(want + wl, "L%05d!!!\n", i);
		}
		converse(sv.addr, (const struct step[]){ { in, il, want, wl } }, 1, "");
	}
	stop_server(&sv, f);
}

Test(upper_echo, split_lines_crlf_utf8, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, split_entry, NULL);
}

/* 1 MiB lines: over the default limit (error line, connection kept), and
 * under a 2 MiB limit (answered whole). Sent in pieces of odd sizes. */
static void mib_entry(void *arg)
{
	char *line = malloc(MIB + 1), *want = malloc(MIB + 4);
	struct server sv;
	struct corio_fiber *f = start_server(&sv, 0);
	char err[80];

	(void)arg;
	for (size_t i = 0; i < MIB; i++) {
		line[i] = (char)('a' + i % 26);
		want[i] = (char)('A' + i % 26);
	}
	line[MIB] = '\n';
	memcpy(want + MIB, "!!!\n", 4);
	snprintf(err, sizeof(err), "ERROR line too long (max %d bytes)\n", UE_MAX_LINE_DEFAULT);
	{
		const struct step steps[] = {
			{ line, 100000, NULL, 0 }, /* over the limit already: the error comes now */
			{ "", 0, err, 0 },
			{ line + 100000, MIB + 1 - 100000, NULL, 0 },
			{ "still here\n", 0, "STILL HERE!!!\n", 0 },
		};
		converse(sv.addr, steps, 4, "");
	}
	stop_server(&sv, f);

	f = start_server(&sv, 2 * MIB);
	{
		const struct step steps[] = {
			{ line, 77777, NULL, 0 },
			{ line + 77777, MIB + 1 - 77777, want, MIB + 4 },
			{ "x\r\n", 0, "X!!!\r\n", 0 },
		};
		converse(sv.addr, steps, 3, "");
	}
	stop_server(&sv, f);
	free(line);
	free(want);
}

Test(upper_echo, one_mib_line, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, mib_entry, NULL);
}

/* Stopping the server with connections open: every connection fiber ends
 * and closes its socket (th_run checks no fd is left). */
struct idle {
	const char *addr;
	int answered;
};

static int idle_client(void *arg)
{
	struct idle *id = arg;
	struct corio_sock *c = NULL;
	char buf[16];

	CHECK_EQ(corio_tcp_connect(id->addr, &c), 0);
	CHECK_EQ(corio_send(c, "hi\n", 3), 3);
	CHECK_EQ(recv_exact(c, buf, 6), 6);
	id->answered++;
	CHECK_EQ(corio_recv(c, buf, sizeof(buf)), 0); /* closed by the stop */
	return corio_close(c);
}

static void stop_entry(void *arg)
{
	struct server sv;
	struct corio_fiber *f = start_server(&sv, 0), *c[4];
	struct idle id = { sv.addr, 0 };

	(void)arg;
	for (int i = 0; i < 4; i++)
		CHECK_EQ(corio_spawn(idle_client, &id, NULL, &c[i]), 0);
	while (id.answered < 4) /* every connection is served and idle */
		corio_yield();
	CHECK_EQ(sv.srv.live, 4);
	stop_server(&sv, f);
	for (int i = 0; i < 4; i++) {
		int st = -1;

		CHECK_EQ(corio_join(c[i], &st), 0);
		CHECK_EQ(st, 0);
	}
}

Test(upper_echo, stop_closes_connections, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, stop_entry, NULL);
}

/* ---- the program, as a child process -------------------------------------------------- */
#define PROG "build/tools/examples/upper-echo"

static pid_t start_prog(int *port, const char *shards)
{
	return th_start_server((char *[]){ PROG, "-p", "0", "-s", (char *)shards, NULL },
			       "upper-echo", NULL, port);
}

static void talk(int port, const char *send, const char *want)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	char buf[256];
	size_t got = 0, wl = strlen(want);

	cr_assert(fd >= 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(write(fd, send, strlen(send)), (ssize_t)strlen(send));
	shutdown(fd, SHUT_WR);
	for (;;) {
		ssize_t r = read(fd, buf + got, sizeof(buf) - 1 - got);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	cr_assert_eq(got, wl);
	cr_assert(memcmp(buf, want, wl) == 0);
}

static void run_prog(int sig, const char *shards)
{
	int port = 0, status = 0;
	pid_t pid;

	if (access(PROG, X_OK) != 0)
		cr_skip_test("%s is not built (make tools)", PROG);
	pid = start_prog(&port, shards);
	for (int i = 0; i < 8; i++) /* connections land on either shard */
		talk(port, "split\r\nli", "SPLIT!!!\r\nLI!!!\n");
	cr_assert_eq(kill(pid, sig), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
}

Test(upper_echo, program_sigterm, .timeout = 30)
{
	run_prog(SIGTERM, "2");
}

Test(upper_echo, program_sigint, .timeout = 30)
{
	run_prog(SIGINT, "1");
}
