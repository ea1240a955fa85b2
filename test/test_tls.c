/* SPDX-License-Identifier: MIT */
/*
 * test_tls - TLS sessions (corio/tls.h) over real sockets on 127.0.0.1:
 * corio to corio, corio against openssl s_client and s_server, trickled and
 * garbage handshakes, close_notify and truncation, certificates that do not
 * verify, SNI, resumption across shards, and the census. Certificates are
 * made at run time in a temporary directory (corio_tls_cert_generate); no
 * key is committed.
 */
#include "helpers.h"

#include <corio.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- certificates --------------------------------------------------------- */

static char dir[64];
static char ca_pem[128], ca_key[128], srv_pem[128], srv_key[128];
static char b_pem[128], b_key[128], self_pem[128], self_key[128];

static void certs_cleanup(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (dir[0] && system(cmd) != 0)
		fprintf(stderr, "test_tls: could not remove %s\n", dir);
}

static void gen(const char *pem, const char *key, const char *names, unsigned flags,
		const char *ca, const char *cakey)
{
	struct corio_tls_cert_gen g = {.cert_file = pem, .key_file = key, .names = names,
				       .flags = flags, .ca_cert_file = ca, .ca_key_file = cakey};
	int ret = corio_tls_cert_generate(&g);

	cr_assert_eq(ret, 0, "corio_tls_cert_generate(%s): %s", names, corio_last_error());
}

/* A CA; a server certificate it signed for localhost and 127.0.0.1; one
 * for b.test (SNI); a self-signed one for localhost it did not sign. */
static void certs(void)
{
	snprintf(dir, sizeof(dir), "/tmp/corio-tls-XXXXXX");
	cr_assert(mkdtemp(dir));
	atexit(certs_cleanup);
#define P(v, name) snprintf(v, sizeof(v), "%s/%s", dir, name)
	P(ca_pem, "ca.pem"), P(ca_key, "ca.key"), P(srv_pem, "srv.pem"), P(srv_key, "srv.key");
	P(b_pem, "b.pem"), P(b_key, "b.key"), P(self_pem, "self.pem"), P(self_key, "self.key");
#undef P
	gen(ca_pem, ca_key, "corio test CA", CORIO_TLS_GEN_CA, NULL, NULL);
	gen(srv_pem, srv_key, "localhost,127.0.0.1", 0, ca_pem, ca_key);
	gen(b_pem, b_key, "b.test", 0, ca_pem, ca_key);
	gen(self_pem, self_key, "localhost", 0, NULL, NULL);
}

static struct corio_tls_ctx *server_ctx(const char *pem, const char *key)
{
	struct corio_tls_cert c[2] = {{pem, key}, {b_pem, b_key}};
	struct corio_tls_ctx_opts o = {.flags = CORIO_TLS_SERVER, .certs = c, .ncerts = 2,
				       .alpn = "h2,http/1.1"};
	struct corio_tls_ctx *ctx = NULL;
	int ret = corio_tls_ctx_new(&o, &ctx);

	cr_assert_eq(ret, 0, "server ctx: %s", corio_last_error());
	return ctx;
}

static struct corio_tls_ctx *client_ctx(const char *ca, unsigned flags)
{
	struct corio_tls_ctx_opts o = {.flags = flags, .ca_file = ca, .alpn = "http/1.1"};
	struct corio_tls_ctx *ctx = NULL;
	int ret = corio_tls_ctx_new(&o, &ctx);

	cr_assert_eq(ret, 0, "client ctx: %s", corio_last_error());
	return ctx;
}

/* ---- helpers on a shard ----------------------------------------------------- */

static int listen_local(struct corio_listener **l, char *addr, size_t len)
{
	struct sockaddr_storage a;
	socklen_t alen = sizeof(a);
	int ret = corio_tcp_listen("127.0.0.1:0", NULL, l);

	if (ret == 0 && (ret = corio_listener_addr(*l, &a, &alen)) == 0)
		ret = corio_addr_format((struct sockaddr *)&a, alen, addr, len) > 0 ? 0 : -EINVAL;
	return ret;
}

static ssize_t read_full(struct corio_tls *t, char *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = corio_tls_read(t, buf + got, len - got);

		if (n <= 0)
			return n;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Read and write back until the peer's close_notify; 0 or -errno. */
static int echo(struct corio_tls *t)
{
	char buf[4096];
	ssize_t n;

	while ((n = corio_tls_read(t, buf, sizeof(buf))) > 0)
		if (corio_tls_write(t, buf, (size_t)n) != n)
			return -EIO;
	return (int)n;
}

struct srv {
	struct corio_tls_ctx *ctx;
	struct corio_listener *l;
	int accept_ret, echo_ret;
	char err[256];
	char sni[64];
	unsigned shard[2];
	int resumed[2];
	_Atomic int n;
};

/* Accept one connection, handshake, echo until close_notify. */
static int serve_one(void *arg)
{
	struct srv *v = arg;
	struct corio_sock *s;
	struct corio_tls *t;

	CHECK_EQ(corio_accept(v->l, &s), 0);
	v->accept_ret = corio_tls_accept(v->ctx, s, &t);
	snprintf(v->err, sizeof(v->err), "%s", corio_last_error());
	if (v->accept_ret == 0) {
		const char *sni = corio_tls_server_name(t);

		snprintf(v->sni, sizeof(v->sni), "%s", sni ? sni : "");
		v->echo_ret = echo(t);
		snprintf(v->err, sizeof(v->err), "%s", corio_last_error());
		corio_tls_close(t);
	}
	corio_close(s);
	return 0;
}

static int connect_tls(const char *addr, struct corio_tls_ctx *ctx, const char *host,
		       struct corio_sock **s, struct corio_tls **t)
{
	int ret = corio_tcp_connect(addr, s);

	if (ret)
		return ret;
	ret = corio_tls_connect(ctx, *s, host, t);
	if (ret)
		corio_close(*s);
	return ret;
}

/* ---- corio <-> corio ------------------------------------------------------- */

struct resume {
	struct srv v;
	struct corio_tls_ctx *cli;
	char addr[64];
};

static int resume_handler(struct corio_sock *s, void *arg)
{
	struct resume *r = arg;
	struct corio_tls *t;
	int ret = corio_tls_accept(r->v.ctx, s, &t);

	CHECK_EQ(ret, 0);
	if (ret == 0) {
		int i = atomic_fetch_add(&r->v.n, 1);

		if (i < 2) {
			r->v.shard[i] = corio_shard_id();
			r->v.resumed[i] = corio_tls_resumed(t);
		}
		CHECK_EQ(echo(t), 0);
		corio_tls_close(t); /* the client may be gone: EPIPE is fine */
	}
	corio_close(s);
	return 0;
}

static int dispatcher(void *arg)
{
	struct resume *r = arg;

	corio_accept_dispatch(r->v.l, CORIO_DISPATCH_ROUND_ROBIN, resume_handler, r);
	return 0;
}

static void one_client(struct resume *r, int i)
{
	struct corio_sock *s;
	struct corio_tls *t;
	struct iovec iov[2] = {{"hello ", 6}, {"world", 5}};
	char buf[16] = "";
	size_t alen;
	const char *alpn;

	CHECK_EQ(connect_tls(r->addr, r->cli, "localhost", &s, &t), 0);
	CHECK(strcmp(corio_tls_version(t), "TLSv1.3") == 0);
	alpn = corio_tls_alpn(t, &alen);
	CHECK(alpn && alen == 8 && memcmp(alpn, "http/1.1", 8) == 0);
	CHECK_EQ(corio_tls_writev(t, iov, 2), 11);
	CHECK_EQ(read_full(t, buf, 11), 11);
	CHECK(memcmp(buf, "hello world", 11) == 0);
	CHECK_EQ(corio_tls_resumed(t), i == 1);
	CHECK_EQ(corio_tls_close(t), 0);
	corio_close(s);
}

static void resume_entry(void *arg)
{
	struct resume *r = arg;
	struct corio_fiber *f;
	struct corio_tls_stats st;

	if (corio_shard_id() != 0)
		return;
	CHECK_EQ(listen_local(&r->v.l, r->addr, sizeof(r->addr)), 0);
	CHECK_EQ(corio_spawn(dispatcher, r, NULL, &f), 0);
	one_client(r, 0);
	one_client(r, 1);
	corio_cancel(f);
	corio_join(f, NULL);
	corio_listener_close(r->v.l);
	/* both handlers have closed by now: the client read their echo and
	 * its close waits for nothing; count what shard 0 saw */
	CHECK_EQ(corio_tls_stats_get(NULL, 0, &st), 0);
	CHECK(st.handshakes >= 2 && st.cache_hits == 1);
}

Test(tls, echo_tls13_alpn_and_resumption_on_another_shard, .timeout = 60)
{
	struct corio_config cfg = th_cfg(2);
	struct resume r = {0};

	certs();
	r.v.ctx = server_ctx(srv_pem, srv_key);
	r.cli = client_ctx(ca_pem, 0);
	th_run(&cfg, resume_entry, &r);
	cr_assert_eq(atomic_load(&r.v.n), 2);
	cr_assert_neq(r.v.shard[0], r.v.shard[1], "both connections landed on shard %u",
		      r.v.shard[0]);
	cr_assert_eq(r.v.resumed[0], 0);
	cr_assert_eq(r.v.resumed[1], 1, "the second connection did not resume on shard %u",
		     r.v.shard[1]);
	corio_tls_ctx_free(r.v.ctx);
	corio_tls_ctx_free(r.cli);
}

/* ---- against the openssl command ------------------------------------------------ */

static void need_openssl(void)
{
	if (system("command -v openssl >/dev/null 2>&1") != 0)
		cr_skip_test("the openssl command is not installed (apt-get install openssl)");
}

struct ext {
	struct srv v;
	char addr[64];
	_Atomic int ready;
};

/* One connection: echo the first chunk, then close_notify. */
static void once_entry(void *arg)
{
	struct ext *e = arg;
	struct corio_sock *s;
	struct corio_tls *t;
	char buf[256];
	ssize_t n;

	CHECK_EQ(listen_local(&e->v.l, e->addr, sizeof(e->addr)), 0);
	atomic_store(&e->ready, 1);
	CHECK_EQ(corio_accept(e->v.l, &s), 0);
	e->v.accept_ret = corio_tls_accept(e->v.ctx, s, &t);
	if (e->v.accept_ret == 0) {
		n = corio_tls_read(t, buf, sizeof(buf));
		CHECK(n > 0);
		if (n > 0)
			CHECK_EQ(corio_tls_write(t, buf, (size_t)n), n);
		CHECK_EQ(corio_tls_close(t), 0);
	}
	corio_close(s);
	corio_listener_close(e->v.l);
}

Test(tls, openssl_s_client_against_corio_server, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct ext e = {0};
	struct corio_rt *rt;
	char cmd[1024], out[16384];
	size_t got = 0;
	FILE *p;

	need_openssl();
	certs();
	e.v.ctx = server_ctx(srv_pem, srv_key);
	cr_assert_eq(corio_start(&cfg, once_entry, &e, &rt), 0, "%s", corio_last_error());
	for (int i = 0; i < 10000 && !atomic_load(&e.ready); i++)
		usleep(1000);
	cr_assert(atomic_load(&e.ready));
	snprintf(cmd, sizeof(cmd),
		 "printf 'hello corio\\n' | timeout 20 openssl s_client -connect %s -CAfile %s "
		 "-verify_return_error -verify_hostname localhost -servername localhost "
		 "-alpn http/1.1 -ign_eof 2>&1", e.addr, ca_pem);
	p = popen(cmd, "r");
	cr_assert(p);
	while (got < sizeof(out) - 1 && fgets(out + got, (int)(sizeof(out) - got), p))
		got += strlen(out + got);
	pclose(p);
	cr_assert_eq(corio_wait(rt), 0, "%s", corio_last_error());
	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
	cr_assert_eq(e.v.accept_ret, 0);
	cr_assert(strstr(out, "TLSv1.3"), "not TLS 1.3:\n%s", out);
	cr_assert(strstr(out, "ALPN protocol: http/1.1"), "no ALPN:\n%s", out);
	cr_assert(strstr(out, "Verify return code: 0 (ok)"), "not verified:\n%s", out);
	cr_assert(strstr(out, "hello corio"), "no echo:\n%s", out);
	corio_tls_ctx_free(e.v.ctx);
}

struct cli {
	char addr[64];
	struct corio_tls_ctx *good, *other_ca;
	int ok_ret, wrong_ret, untrusted_ret;
	char resp[4096], wrong_err[256], untrusted_err[256];
};

static void s_server_client_entry(void *arg)
{
	struct cli *c = arg;
	struct corio_sock *s;
	struct corio_tls *t;
	size_t got = 0;
	ssize_t n;

	c->ok_ret = connect_tls(c->addr, c->good, "localhost", &s, &t);
	if (c->ok_ret == 0) {
		CHECK(strcmp(corio_tls_version(t), "TLSv1.3") == 0);
		CHECK(corio_tls_alpn(t, NULL) != NULL);
		CHECK_EQ(corio_tls_write(t, "GET / HTTP/1.0\r\n\r\n", 18), 18);
		while ((n = corio_tls_read(t, c->resp + got, sizeof(c->resp) - 1 - got)) > 0)
			got += (size_t)n;
		corio_tls_close(t);
		corio_close(s);
	}
	c->wrong_ret = connect_tls(c->addr, c->good, "wrong.example", &s, &t);
	snprintf(c->wrong_err, sizeof(c->wrong_err), "%s", corio_last_error());
	if (c->wrong_ret == 0)
		corio_tls_close(t), corio_close(s);
	c->untrusted_ret = connect_tls(c->addr, c->other_ca, "localhost", &s, &t);
	snprintf(c->untrusted_err, sizeof(c->untrusted_err), "%s", corio_last_error());
	if (c->untrusted_ret == 0)
		corio_tls_close(t), corio_close(s);
}

/* In an s_server child: its stderr (the alerts of the handshakes a test
 * makes fail on purpose, the files it serves) goes nowhere; the tests
 * assert what the clients say. */
static void quiet_stderr(void)
{
	int fd = open("/dev/null", O_WRONLY);

	if (fd >= 0)
		dup2(fd, 2);
}

/* openssl s_server on port 0: its pid, and its address from "ACCEPT ...". */
static pid_t s_server(char *addr, size_t len)
{
	int fds[2];
	char line[256];
	pid_t pid;
	FILE *f;

	cr_assert(pipe(fds) == 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		quiet_stderr();
		execlp("openssl", "openssl", "s_server", "-accept", "127.0.0.1:0", "-cert", srv_pem,
		       "-key", srv_key, "-www", "-naccept", "3", "-alpn", "http/1.1", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "ACCEPT %63s", addr) == 1)
			break;
	fclose(f);
	cr_assert(addr[0], "openssl s_server printed no ACCEPT line");
	(void)len;
	return pid;
}

Test(tls, corio_client_against_openssl_s_server, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct cli c = {0};
	pid_t pid;

	need_openssl();
	certs();
	c.good = client_ctx(ca_pem, 0);
	c.other_ca = client_ctx(self_pem, 0); /* trusts another root only */
	pid = s_server(c.addr, sizeof(c.addr));
	th_run(&cfg, s_server_client_entry, &c);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	cr_assert_eq(c.ok_ret, 0);
	cr_assert(strstr(c.resp, "200 ok"), "s_server answered: %s", c.resp);
	cr_assert_eq(c.wrong_ret, -EKEYREJECTED);
	cr_assert(strstr(c.wrong_err, "hostname mismatch"), "%s", c.wrong_err);
	cr_assert_eq(c.untrusted_ret, -EKEYREJECTED);
	cr_assert(strstr(c.untrusted_err, "certificate"), "%s", c.untrusted_err);
	corio_tls_ctx_free(c.good);
	corio_tls_ctx_free(c.other_ca);
}

/* ---- the client example (tools/examples/https-get) against openssl s_server -------- */

#define GET_PROG \
	(getenv("HTTPS_GET_PROG") ? getenv("HTTPS_GET_PROG") : "build/tools/examples/https-get")
#define PAGE_LEN (100 * 1024 + 17)

/* openssl s_server -WWW in dir (it serves the files there), with pem/key,
 * for n connections: its pid, and its port in *port. */
static pid_t s_server_www(const char *pem, const char *key, int n, int *port)
{
	char line[256], addr[64] = "", nacc[16];
	int fds[2];
	pid_t pid;
	FILE *f;

	snprintf(nacc, sizeof(nacc), "%d", n);
	cr_assert(pipe(fds) == 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		if (chdir(dir) != 0)
			_exit(126);
		quiet_stderr();
		execlp("openssl", "openssl", "s_server", "-accept", "127.0.0.1:0", "-cert", pem,
		       "-key", key, "-WWW", "-naccept", nacc, "-alpn", "http/1.1",
		       (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "ACCEPT %63s", addr) == 1)
			break;
	fclose(f);
	cr_assert(addr[0] && strrchr(addr, ':'), "openssl s_server printed no ACCEPT line");
	*port = atoi(strrchr(addr, ':') + 1);
	return pid;
}

/* Run the client on url with --cafile ca: its exit status; stdout in
 * dir/got, stderr in err. */
static int https_get(const char *ca, const char *url, char *err, size_t errlen)
{
	char cmd[1024], path[160];
	int st;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "%s --cafile %s -t 20 %s > %s/got 2> %s/err", GET_PROG, ca, url,
		 dir, dir);
	st = system(cmd);
	snprintf(path, sizeof(path), "%s/err", dir);
	cr_assert((f = fopen(path, "r")));
	err[fread(err, 1, errlen - 1, f)] = '\0';
	fclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * The right CA and host: the page byte-exact, exit 0. A certificate for
 * another name (b.test) at localhost, and one signed by a CA the client
 * does not trust: exit 3 with the verification's reason on stderr.
 */
Test(tls, https_get_example_verifies_against_openssl_s_server, .timeout = 60)
{
	char url[128], err[1024], path[160], *page = malloc(PAGE_LEN), *got = malloc(PAGE_LEN + 1);
	int port, rc;
	pid_t pid;
	FILE *f;

	need_openssl();
	if (access(GET_PROG, X_OK) != 0)
		cr_skip_test("%s is not built (make tools)", GET_PROG);
	certs();
	for (size_t i = 0; i < PAGE_LEN; i++)
		page[i] = (char)('a' + i % 23 + (i / 1000) % 3);
	snprintf(path, sizeof(path), "%s/page.txt", dir);
	cr_assert((f = fopen(path, "w")) && fwrite(page, 1, PAGE_LEN, f) == PAGE_LEN &&
		  fclose(f) == 0);
	pid = s_server_www(srv_pem, srv_key, 2, &port);
	snprintf(url, sizeof(url), "https://localhost:%d/page.txt", port);
	rc = https_get(ca_pem, url, err, sizeof(err));
	cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
	snprintf(path, sizeof(path), "%s/got", dir);
	cr_assert((f = fopen(path, "r")));
	cr_assert_eq(fread(got, 1, PAGE_LEN + 1, f), (size_t)PAGE_LEN);
	fclose(f);
	cr_assert(memcmp(got, page, PAGE_LEN) == 0);
	rc = https_get(self_pem, url, err, sizeof(err)); /* trusts another root only */
	cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
	cr_assert(strstr(err, "certificate was refused: unable to get local issuer"), "%s", err);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	pid = s_server_www(b_pem, b_key, 1, &port); /* a certificate for b.test only */
	snprintf(url, sizeof(url), "https://localhost:%d/page.txt", port);
	rc = https_get(ca_pem, url, err, sizeof(err));
	cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
	cr_assert(strstr(err, "certificate was refused: hostname mismatch"), "%s", err);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	free(page);
	free(got);
}

/* ---- a ClientHello a byte at a time ---------------------------------------------- */

/*
 * client -> proxy -> server on one shard. The proxy forwards the client's
 * bytes one at a time, gap_ns apart, and after the first 10 holds until
 * another connection of the same shard has finished a whole TLS exchange:
 * if the trickled handshake held the shard, that could never happen and
 * the test would time out.
 */
struct trickle {
	struct srv v;           /* the trickled server */
	struct srv other;       /* another server on the shard */
	struct corio_listener *pl;
	char addr[64], paddr[64], oaddr[64];
	struct corio_tls_ctx *cli;
	uint64_t gap_ns, deadline_ns;
	struct corio_event other_done;
	int client_ret;
	char err[256];
};

struct pipe_dir {
	struct corio_sock *from, *to;
	struct trickle *tr;
	bool slow;
};

static int forward(void *arg)
{
	struct pipe_dir *d = arg;
	char buf[4096];
	size_t sent = 0;
	ssize_t n;

	while ((n = corio_recv(d->from, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i += d->slow ? 1 : n) {
			if (d->slow && sent == 10)
				corio_event_wait(&d->tr->other_done);
			if (corio_send(d->to, buf + i, d->slow ? 1 : (size_t)n) < 0)
				goto out;
			sent++;
			if (d->slow)
				corio_sleep_ns(d->tr->gap_ns);
		}
	}
out:
	corio_shutdown_write(d->to);
	return 0;
}

static int proxy(void *arg)
{
	struct trickle *tr = arg;
	struct corio_sock *c, *s;
	struct corio_fiber *f[2];

	CHECK_EQ(corio_accept(tr->pl, &c), 0);
	CHECK_EQ(corio_tcp_connect(tr->addr, &s), 0);
	struct pipe_dir up = {c, s, tr, true}, down = {s, c, tr, false};

	CHECK_EQ(corio_spawn(forward, &up, NULL, &f[0]), 0);
	CHECK_EQ(corio_spawn(forward, &down, NULL, &f[1]), 0);
	corio_join(f[0], NULL);
	corio_join(f[1], NULL);
	corio_close(c);
	corio_close(s);
	return 0;
}

static int trickled_server(void *arg)
{
	struct trickle *tr = arg;
	struct corio_deadline d;
	struct corio_sock *s;
	struct corio_tls *t;

	CHECK_EQ(corio_accept(tr->v.l, &s), 0);
	corio_timeout_push(&d, tr->deadline_ns);
	tr->v.accept_ret = corio_tls_accept(tr->v.ctx, s, &t);
	corio_deadline_pop(&d);
	if (tr->v.accept_ret == 0) {
		CHECK_EQ(echo(t), 0);
		corio_tls_close(t);
	}
	corio_close(s);
	return 0;
}

static int other_client(void *arg)
{
	struct trickle *tr = arg;
	struct corio_sock *s;
	struct corio_tls *t;
	char buf[4];

	CHECK_EQ(connect_tls(tr->oaddr, tr->cli, "localhost", &s, &t), 0);
	CHECK_EQ(corio_tls_write(t, "ping", 4), 4);
	CHECK_EQ(read_full(t, buf, 4), 4);
	CHECK_EQ(corio_tls_close(t), 0);
	corio_close(s);
	corio_event_set(&tr->other_done);
	return 0;
}

static void trickle_entry(void *arg)
{
	struct trickle *tr = arg;
	struct corio_fiber *f[4];
	struct corio_sock *s;
	struct corio_tls *t;
	char buf[5];

	corio_event_init(&tr->other_done);
	CHECK_EQ(listen_local(&tr->v.l, tr->addr, sizeof(tr->addr)), 0);
	CHECK_EQ(listen_local(&tr->other.l, tr->oaddr, sizeof(tr->oaddr)), 0);
	CHECK_EQ(listen_local(&tr->pl, tr->paddr, sizeof(tr->paddr)), 0);
	CHECK_EQ(corio_spawn(trickled_server, tr, NULL, &f[0]), 0);
	CHECK_EQ(corio_spawn(serve_one, &tr->other, NULL, &f[1]), 0);
	CHECK_EQ(corio_spawn(proxy, tr, NULL, &f[2]), 0);
	CHECK_EQ(corio_spawn(other_client, tr, NULL, &f[3]), 0);
	tr->client_ret = connect_tls(tr->paddr, tr->cli, "localhost", &s, &t);
	snprintf(tr->err, sizeof(tr->err), "%s", corio_last_error());
	if (tr->client_ret == 0) {
		CHECK_EQ(corio_tls_write(t, "hello", 5), 5);
		CHECK_EQ(read_full(t, buf, 5), 5);
		CHECK_EQ(corio_tls_close(t), 0);
		corio_close(s);
	}
	for (int i = 0; i < 4; i++)
		corio_join(f[i], NULL);
	corio_listener_close(tr->v.l);
	corio_listener_close(tr->other.l);
	corio_listener_close(tr->pl);
}

static void trickle_run(struct trickle *tr)
{
	struct corio_config cfg = th_cfg(1);

	certs();
	tr->v.ctx = server_ctx(srv_pem, srv_key);
	tr->other.ctx = tr->v.ctx;
	tr->cli = client_ctx(ca_pem, 0);
	th_run(&cfg, trickle_entry, tr);
	corio_tls_ctx_free(tr->v.ctx);
	corio_tls_ctx_free(tr->cli);
	cr_assert_eq(tr->other.accept_ret, 0, "the other connection: %s", tr->other.err);
}

Test(tls, clienthello_byte_by_byte_completes_within_the_deadline, .timeout = 60)
{
	struct trickle tr = {.gap_ns = 100000, .deadline_ns = 20000000000ull};

	trickle_run(&tr);
	cr_assert_eq(tr.v.accept_ret, 0, "server: %s", tr.v.err);
	cr_assert_eq(tr.client_ret, 0, "client: %s", tr.err);
}

Test(tls, clienthello_byte_by_byte_past_the_deadline_is_etimedout, .timeout = 60)
{
	/* a ClientHello is > 200 bytes: > 1 s at 5 ms a byte, against 20 ms */
	struct trickle tr = {.gap_ns = 5000000, .deadline_ns = 20000000};

	trickle_run(&tr);
	cr_assert_eq(tr.v.accept_ret, -ETIMEDOUT);
	cr_assert_neq(tr.client_ret, 0);
}

/* ---- garbage, truncation, close_notify ------------------------------------------- */

struct bad {
	struct srv v;
	struct corio_tls_ctx *cli;
	char addr[64];
	int mode;
	int client_ret, close_ret, write_ret;
	char client_err[256];
	struct corio_event done;
};

enum { GARBAGE_HELLO, GARBAGE_RECORD, TRUNCATE, CLEAN_CLOSE, STUCK_CLOSE };

/* The server side of each case. */
static int bad_server(void *arg)
{
	struct bad *b = arg;
	struct corio_deadline d;
	struct corio_sock *s;
	struct corio_tls *t;
	char chunk[65536] = {0};

	CHECK_EQ(corio_accept(b->v.l, &s), 0);
	if (b->mode == STUCK_CLOSE)
		CHECK_EQ(corio_setsockopt(s, SOL_SOCKET, SO_SNDBUF, &(int){4096}, sizeof(int)), 0);
	b->v.accept_ret = corio_tls_accept(b->v.ctx, s, &t);
	snprintf(b->v.err, sizeof(b->v.err), "%s", corio_last_error());
	if (b->v.accept_ret == 0 && b->mode == CLEAN_CLOSE) {
		CHECK_EQ(corio_tls_write(t, "bye", 3), 3);
		b->close_ret = corio_tls_close(t);
	} else if (b->v.accept_ret == 0 && b->mode == STUCK_CLOSE) {
		/* the client reads nothing: fill every buffer, then close */
		corio_timeout_push(&d, 200000000);
		while ((b->write_ret = (int)corio_tls_write(t, chunk, sizeof(chunk))) > 0)
			;
		corio_deadline_pop(&d);
		corio_timeout_push(&d, 50000000);
		b->close_ret = corio_tls_close(t);
		corio_deadline_pop(&d);
	} else if (b->v.accept_ret == 0) {
		b->v.echo_ret = echo(t);
		snprintf(b->v.err, sizeof(b->v.err), "%s", corio_last_error());
		/* a failed session stays failed */
		CHECK_EQ(corio_tls_read(t, chunk, 1), b->v.echo_ret);
		b->close_ret = corio_tls_close(t);
	}
	corio_event_set(&b->done);
	corio_close(s);
	return 0;
}

static void bad_client(struct bad *b)
{
	struct corio_sock *s;
	struct corio_tls *t;
	char buf[8];

	if (b->mode == GARBAGE_HELLO) {
		CHECK_EQ(corio_tcp_connect(b->addr, &s), 0);
		CHECK_EQ(corio_send(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27), 27);
		corio_event_wait(&b->done);
		corio_close(s);
		return;
	}
	b->client_ret = connect_tls(b->addr, b->cli, "localhost", &s, &t);
	snprintf(b->client_err, sizeof(b->client_err), "%s", corio_last_error());
	if (b->client_ret)
		return;
	switch (b->mode) {
	case GARBAGE_RECORD: /* application data that no key decrypts */
		CHECK_EQ(corio_send(s, "\x17\x03\x03\x00\x20garbage-garbage-garbage-garbage!", 37), 37);
		break;
	case TRUNCATE: /* data, then a TCP FIN with no close_notify */
		CHECK_EQ(corio_tls_write(t, "x", 1), 1);
		CHECK_EQ(read_full(t, buf, 1), 1);
		CHECK_EQ(corio_shutdown_write(s), 0);
		break;
	case CLEAN_CLOSE:
		CHECK_EQ(read_full(t, buf, 3), 3);
		CHECK_EQ(corio_tls_read(t, buf, sizeof(buf)), 0); /* close_notify */
		CHECK_EQ(corio_tls_read(t, buf, sizeof(buf)), 0);
		break;
	}
	corio_event_wait(&b->done);
	corio_tls_close(t);
	corio_close(s);
}

static void bad_entry(void *arg)
{
	struct bad *b = arg;
	struct corio_fiber *f;

	corio_event_init(&b->done);
	CHECK_EQ(listen_local(&b->v.l, b->addr, sizeof(b->addr)), 0);
	CHECK_EQ(corio_spawn(bad_server, b, NULL, &f), 0);
	bad_client(b);
	corio_join(f, NULL);
	corio_listener_close(b->v.l);
}

static void bad_run(struct bad *b, const char *srv_cert, const char *srv_k, unsigned cli_flags,
		    const char *host)
{
	struct corio_config cfg = th_cfg(1);

	(void)host;
	b->v.ctx = server_ctx(srv_cert, srv_k);
	b->cli = client_ctx(ca_pem, cli_flags);
	th_run(&cfg, bad_entry, b);
	corio_tls_ctx_free(b->v.ctx);
	corio_tls_ctx_free(b->cli);
}

Test(tls, garbage_instead_of_a_clienthello_is_eproto_with_the_reason, .timeout = 60)
{
	struct bad b = {.mode = GARBAGE_HELLO};

	certs();
	bad_run(&b, srv_pem, srv_key, 0, "localhost");
	cr_assert_eq(b.v.accept_ret, -EPROTO, "%d: %s", b.v.accept_ret, b.v.err);
	cr_assert(strncmp(b.v.err, "corio_tls_accept: ", 18) == 0 && strlen(b.v.err) > 20,
		  "%s", b.v.err);
	cr_assert(strstr(b.v.err, "http request") || strstr(b.v.err, "wrong version"), "%s",
		  b.v.err);
}

Test(tls, a_garbage_record_in_a_session_is_eproto_and_sticky, .timeout = 60)
{
	struct bad b = {.mode = GARBAGE_RECORD};

	certs();
	bad_run(&b, srv_pem, srv_key, 0, "localhost");
	cr_assert_eq(b.v.accept_ret, 0, "%s", b.v.err);
	cr_assert_eq(b.v.echo_ret, -EPROTO, "%d: %s", b.v.echo_ret, b.v.err);
	cr_assert(strncmp(b.v.err, "corio_tls_read: ", 16) == 0, "%s", b.v.err);
	cr_assert_eq(b.close_ret, 0); /* no close_notify after a fatal error */
}

Test(tls, a_tcp_close_without_close_notify_is_an_error_not_eof, .timeout = 60)
{
	struct bad b = {.mode = TRUNCATE};

	certs();
	bad_run(&b, srv_pem, srv_key, 0, "localhost");
	cr_assert_eq(b.v.echo_ret, -ECONNABORTED, "%d: %s", b.v.echo_ret, b.v.err);
	/* after the handshake: OpenSSL's error path says "in init" again */
	cr_assert(strstr(b.v.err, "without close_notify (truncated)"), "%s", b.v.err);
}

Test(tls, close_sends_close_notify_and_the_peer_reads_end_of_stream, .timeout = 60)
{
	struct bad b = {.mode = CLEAN_CLOSE};

	certs();
	bad_run(&b, srv_pem, srv_key, 0, "localhost");
	cr_assert_eq(b.close_ret, 0);
}

Test(tls, close_notify_is_bounded_by_the_deadline_when_the_peer_reads_nothing, .timeout = 60)
{
	struct bad b = {.mode = STUCK_CLOSE};

	certs();
	bad_run(&b, srv_pem, srv_key, 0, "localhost");
	cr_assert_eq(b.write_ret, -ETIMEDOUT);
	cr_assert_eq(b.close_ret, -ETIMEDOUT);
}

/* ---- certificates ------------------------------------------------------------------ */

struct verify {
	struct srv v;
	struct corio_tls_ctx *cli;
	char addr[64];
	const char *host;
	int client_ret;
	char client_err[256];
	char sni[64];
};

static void verify_entry(void *arg)
{
	struct verify *vf = arg;
	struct corio_fiber *f;
	struct corio_sock *s;
	struct corio_tls *t;

	CHECK_EQ(listen_local(&vf->v.l, vf->addr, sizeof(vf->addr)), 0);
	CHECK_EQ(corio_spawn(serve_one, &vf->v, NULL, &f), 0);
	vf->client_ret = connect_tls(vf->addr, vf->cli, vf->host, &s, &t);
	snprintf(vf->client_err, sizeof(vf->client_err), "%s", corio_last_error());
	if (vf->client_ret == 0) {
		CHECK_EQ(corio_tls_close(t), 0);
		corio_close(s);
	}
	corio_join(f, NULL);
	corio_listener_close(vf->v.l);
}

static void verify_run(struct verify *vf, const char *pem, const char *key, unsigned flags)
{
	struct corio_config cfg = th_cfg(1);

	certs();
	vf->v.ctx = server_ctx(pem, key);
	vf->cli = client_ctx(ca_pem, flags);
	th_run(&cfg, verify_entry, vf);
	corio_tls_ctx_free(vf->v.ctx);
	corio_tls_ctx_free(vf->cli);
}

Test(tls, a_self_signed_certificate_is_refused_with_the_reason, .timeout = 60)
{
	struct verify vf = {.host = "localhost"};

	verify_run(&vf, self_pem, self_key, 0);
	cr_assert_eq(vf.client_ret, -EKEYREJECTED, "%d: %s", vf.client_ret, vf.client_err);
	cr_assert(strstr(vf.client_err, "self") && strstr(vf.client_err, "certificate"), "%s",
		  vf.client_err);
	cr_assert_eq(vf.v.accept_ret, -EPROTO, "the server saw: %s", vf.v.err);
}

Test(tls, a_wrong_host_name_is_refused_with_the_reason, .timeout = 60)
{
	struct verify vf = {.host = "wrong.example"};

	verify_run(&vf, srv_pem, srv_key, 0);
	cr_assert_eq(vf.client_ret, -EKEYREJECTED, "%d: %s", vf.client_ret, vf.client_err);
	cr_assert(strstr(vf.client_err, "hostname mismatch"), "%s", vf.client_err);
}

Test(tls, no_verify_is_the_only_way_past_a_bad_certificate, .timeout = 60)
{
	struct verify vf = {.host = "wrong.example"};

	verify_run(&vf, self_pem, self_key, CORIO_TLS_NO_VERIFY);
	cr_assert_eq(vf.client_ret, 0, "%s", vf.client_err);
}

Test(tls, an_ip_address_is_verified_against_the_ip_san, .timeout = 60)
{
	struct verify vf = {.host = "127.0.0.1"};

	verify_run(&vf, srv_pem, srv_key, 0);
	cr_assert_eq(vf.client_ret, 0, "%s", vf.client_err);
}

Test(tls, sni_picks_the_matching_certificate, .timeout = 60)
{
	struct verify vf = {.host = "b.test"};

	verify_run(&vf, srv_pem, srv_key, 0);
	cr_assert_eq(vf.client_ret, 0, "%s", vf.client_err);
	cr_assert_str_eq(vf.v.sni, "b.test");
}

/* ---- the census and the API's errors ------------------------------------------------ */

struct leak {
	struct verify *vf;
	struct corio_sock *s;
	struct corio_tls *t;
};

static int leak_accept(void *p)
{
	struct leak *x = p;

	return corio_tls_accept(x->vf->v.ctx, x->s, &x->t);
}

static void leak_entry(void *arg)
{
	struct verify *vf = arg;
	struct corio_sock *c;
	struct corio_tls *ct;
	struct corio_tls_stats st;
	struct corio_fiber *f;
	struct leak a = {vf, NULL, NULL};
	int st_ret = -1;

	CHECK_EQ(listen_local(&vf->v.l, vf->addr, sizeof(vf->addr)), 0);
	CHECK_EQ(corio_tcp_connect(vf->addr, &c), 0);
	CHECK_EQ(corio_accept(vf->v.l, &a.s), 0);
	CHECK_EQ(corio_spawn(leak_accept, &a, NULL, &f), 0);
	CHECK_EQ(corio_tls_connect(vf->cli, c, "localhost", &ct), 0);
	CHECK_EQ(corio_join(f, &st_ret), 0);
	CHECK_EQ(st_ret, 0);
	CHECK_EQ(corio_tls_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.sessions_live, 2);
	CHECK_EQ(corio_tls_close(ct), 0);
	CHECK_EQ(corio_tls_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.sessions_live, 1);
	corio_close(c);
	corio_close(a.s); /* a.t is never closed: the census must say so */
	corio_listener_close(vf->v.l);
}

Test(tls, census_counts_a_session_never_closed, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct verify vf = {0};
	int ret;

	certs();
	vf.v.ctx = server_ctx(srv_pem, srv_key);
	vf.cli = client_ctx(ca_pem, 0);
	ret = corio_run(&cfg, leak_entry, &vf);
	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
	cr_assert_eq(ret, -EBUSY, "corio_run: %d %s", ret, corio_last_error());
	cr_assert(strstr(corio_last_error(), "tls: 1 TLS sessions never closed"), "%s",
		  corio_last_error());
	corio_tls_ctx_free(vf.v.ctx);
	corio_tls_ctx_free(vf.cli);
}

Test(tls, contexts_check_their_options)
{
	struct corio_tls_cert c = {"/nonexistent/cert.pem", "/nonexistent/key.pem"};
	struct corio_tls_ctx_opts o = {.flags = 0x100};
	struct corio_tls_ctx *ctx = NULL;

	cr_assert_eq(corio_tls_ctx_new(&o, &ctx), -EINVAL);
	cr_assert(strstr(corio_last_error(), "unknown flags"), "%s", corio_last_error());
	o = (struct corio_tls_ctx_opts){.flags = CORIO_TLS_SERVER};
	cr_assert_eq(corio_tls_ctx_new(&o, &ctx), -EINVAL);
	o.certs = &c;
	o.ncerts = 1;
	cr_assert_eq(corio_tls_ctx_new(&o, &ctx), -EPROTO);
	cr_assert(strstr(corio_last_error(), "/nonexistent/cert.pem"), "%s", corio_last_error());
	o = (struct corio_tls_ctx_opts){.alpn = "h2,,x"};
	cr_assert_eq(corio_tls_ctx_new(&o, &ctx), -EINVAL);
	o = (struct corio_tls_ctx_opts){.reserved = {1}};
	cr_assert_eq(corio_tls_ctx_new(&o, &ctx), -EINVAL);
	cr_assert(corio_tls_ktls_probe() >= 0);
}

/* ---- streams over TLS (corio_stream_tls) ---------------------------------------------- */

/* A connected pair on this shard; with contexts, a TLS session on each end. */
struct tpair {
	struct corio_sock *s, *c;  /* the accepted (server) and connecting sockets */
	struct corio_tls *st, *ct; /* their sessions, NULL on a plain pair */
	struct corio_tls_ctx *sctx;
};

static int tpair_accept(void *arg)
{
	struct tpair *p = arg;

	return corio_tls_accept(p->sctx, p->s, &p->st);
}

static void tpair_open(struct tpair *p, struct corio_tls_ctx *sctx, struct corio_tls_ctx *cctx)
{
	struct corio_listener *l = NULL;
	struct corio_fiber *f = NULL;
	char addr[64];
	int ret = -1;

	*p = (struct tpair){.sctx = sctx};
	CHECK_EQ(listen_local(&l, addr, sizeof(addr)), 0);
	CHECK_EQ(corio_tcp_connect(addr, &p->c), 0);
	CHECK_EQ(corio_accept(l, &p->s), 0);
	CHECK_EQ(corio_listener_close(l), 0);
	if (!sctx)
		return;
	CHECK_EQ(corio_spawn(tpair_accept, p, NULL, &f), 0);
	CHECK_EQ(corio_tls_connect(cctx, p->c, "localhost", &p->ct), 0);
	CHECK_EQ(corio_join(f, &ret), 0);
	CHECK_EQ(ret, 0);
}

/* The server end as a stream: TLS when the pair has sessions, else plain. */
static struct corio_stream *tpair_stream(struct tpair *p, unsigned flags)
{
	struct corio_stream_opts o = {.flags = flags};
	struct corio_stream *st = NULL;

	if (p->st)
		CHECK_EQ(corio_stream_tls(p->st, &o, &st), 0);
	else
		CHECK_EQ(corio_stream_sock(p->s, &o, &st), 0);
	return st;
}

/* The client end, raw: TLS calls on a TLS pair, socket calls on a plain one. */
static ssize_t cli_write(struct tpair *p, const void *buf, size_t len)
{
	return p->ct ? corio_tls_write(p->ct, buf, len) : corio_send(p->c, buf, len);
}

static ssize_t cli_read(struct tpair *p, void *buf, size_t len)
{
	return p->ct ? corio_tls_read(p->ct, buf, len) : corio_recv(p->c, buf, len);
}

static void cli_close(struct tpair *p)
{
	if (p->ct)
		corio_tls_close(p->ct); /* the peer may be gone: its error is no matter */
	CHECK_EQ(corio_close(p->c), 0);
}

#define LINE_MAX_TEST 65536

/* The protocol, written once on corio_stream_* calls: answer every line
 * with "> " and the line, until end of stream; then the graceful close.
 * 0, or the first error. */
static int line_echo(struct corio_stream *st)
{
	const void *line;
	ssize_t n;
	int ret;

	while ((n = corio_stream_read_until(st, '\n', LINE_MAX_TEST, &line)) > 0)
		if (corio_stream_write(st, "> ", 2) != 2 ||
		    corio_stream_write(st, line, (size_t)n) != n)
			break;
	ret = corio_stream_close(st);
	return n < 0 ? (int)n : ret;
}

struct same {
	struct corio_tls_ctx *sctx, *cctx;
	char *in, *want, *got;
	size_t in_len, want_len, got_len[2];
	int server_ret[2];
};

struct same_srv {
	struct corio_stream *st;
	int ret;
};

static int same_server(void *arg)
{
	struct same_srv *v = arg;

	v->ret = line_echo(v->st);
	return 0;
}

/* One run of line_echo: over TLS when tls, else over the plain socket. */
static void same_run(struct same *sm, int tls)
{
	/* pieces end inside lines, and one is longer than a TLS record
	 * (16 KiB): every line is cut across records (each write is its own) */
	static const size_t cuts[] = {3, 8, 13, 15, 20, 4000, 21000, 21021, 21023};
	struct same_srv v = {0};
	struct corio_fiber *f = NULL;
	struct tpair p;
	size_t at = 0, got = 0;
	ssize_t n;

	tpair_open(&p, tls ? sm->sctx : NULL, sm->cctx);
	v.st = tpair_stream(&p, CORIO_STREAM_AUTOFLUSH);
	CHECK_EQ(corio_spawn(same_server, &v, NULL, &f), 0);
	for (size_t i = 0; i <= sizeof(cuts) / sizeof(cuts[0]); i++) {
		size_t end = i < sizeof(cuts) / sizeof(cuts[0]) ? cuts[i] : sm->in_len;

		CHECK_EQ(cli_write(&p, sm->in + at, end - at), (ssize_t)(end - at));
		at = end;
	}
	if (p.ct) /* end of stream: close_notify on TLS, a FIN on TCP */
		CHECK_EQ(corio_tls_shutdown(p.ct), 0);
	else
		CHECK_EQ(corio_shutdown_write(p.c), 0);
	while (got < sm->want_len + 1 &&
	       (n = cli_read(&p, sm->got + got, sm->want_len + 1 - got)) > 0)
		got += (size_t)n;
	CHECK_EQ(cli_read(&p, sm->got + got, 1), 0); /* the server's clean end */
	cli_close(&p);
	CHECK_EQ(corio_join(f, NULL), 0);
	sm->server_ret[tls] = v.ret;
	sm->got_len[tls] = got;
}

static void same_entry(void *arg)
{
	struct same *sm = arg;
	char *plain;

	same_run(sm, 0);
	plain = malloc(sm->got_len[0] + 1);
	CHECK(plain != NULL);
	memcpy(plain, sm->got, sm->got_len[0]);
	same_run(sm, 1);
	CHECK(sm->got_len[1] == sm->got_len[0] && !memcmp(plain, sm->got, sm->got_len[0]));
	free(plain);
}

/* Issue 26: code written on a stream runs over TLS unchanged. line_echo
 * runs over a plain socket and over TLS, with lines cut across TLS
 * records and one line over a record; both answers are the same, byte for
 * byte, and what the protocol says they should be. */
Test(tls, the_same_stream_code_runs_over_plain_and_tls, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct same sm = {0};
	size_t w = 0;

	certs();
	sm.sctx = server_ctx(srv_pem, srv_key);
	sm.cctx = client_ctx(ca_pem, 0);
	sm.in_len = 21020 + 14;
	sm.in = malloc(sm.in_len);
	sm.want = malloc(sm.in_len * 2);
	sm.got = malloc(sm.in_len * 2);
	cr_assert(sm.in && sm.want && sm.got);
	memcpy(sm.in, "alpha\nbeta\n\ngamma-", 18);
	memset(sm.in + 18, 'x', 21000);
	memcpy(sm.in + 21018, "\nend\r\nlast-no-lf", sm.in_len - 21018);
	for (size_t i = 0, start = 0; i < sm.in_len; i++)
		if (sm.in[i] == '\n' || i + 1 == sm.in_len) {
			memcpy(sm.want + w, "> ", 2);
			memcpy(sm.want + w + 2, sm.in + start, i + 1 - start);
			w += i + 3 - start;
			start = i + 1;
		}
	sm.want_len = w;
	th_run(&cfg, same_entry, &sm);
	cr_assert_eq(sm.server_ret[0], 0, "plain: %d", sm.server_ret[0]);
	cr_assert_eq(sm.server_ret[1], 0, "tls: %d", sm.server_ret[1]);
	cr_assert_eq(sm.got_len[1], sm.want_len);
	cr_assert(!memcmp(sm.got, sm.want, sm.want_len), "not the expected answer");
	free(sm.in);
	free(sm.want);
	free(sm.got);
	corio_tls_ctx_free(sm.sctx);
	corio_tls_ctx_free(sm.cctx);
}

/* ---- the graceful close, an abort, a truncation, a deadline ------------------------------ */

#define REPLY   (256u << 10)
#define JUNK_IN (64u << 10)

struct gclose {
	struct corio_tls_ctx *sctx, *cctx;
	struct tpair p;
	struct corio_event closing; /* the server is closing: read now */
	size_t got;
	ssize_t end; /* the read that ended the reply: 0 or -errno */
	int close_ret, write_ret;
	uint64_t notify_before, notify_after;
};

/* The client's writer: a request, then bytes the server never reads. */
static int gclose_writer(void *arg)
{
	struct gclose *g = arg;
	char *junk = calloc(1, JUNK_IN);

	memcpy(junk, "GET\n", 4);
	g->write_ret = (int)corio_tls_write(g->p.ct, junk, JUNK_IN);
	free(junk);
	return 0;
}

static int gclose_reader(void *arg)
{
	struct gclose *g = arg;
	char buf[16384];
	ssize_t r;

	CHECK_EQ(corio_event_wait(&g->closing), 0);
	while ((r = corio_tls_read(g->p.ct, buf, sizeof(buf))) > 0)
		g->got += (size_t)r;
	g->end = r;
	/* the client's close_notify: the server's drain ends at it */
	CHECK_EQ(corio_tls_close(g->p.ct), 0);
	return 0;
}

static void gclose_entry(void *arg)
{
	struct gclose *g = arg;
	struct corio_fiber *fw = NULL, *fr = NULL;
	struct corio_stream *st;
	struct corio_tls_stats ts;
	int sndbuf = REPLY * 2, rcvbuf = 64 << 10;
	char *reply = calloc(1, REPLY);
	const void *v;

	corio_event_init(&g->closing);
	tpair_open(&g->p, g->sctx, g->cctx);
	/* the whole reply fits the server's send queue, the client's window a
	 * part: without reading, most of it waits in the server */
	CHECK_EQ(corio_setsockopt(g->p.s, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
	CHECK_EQ(corio_setsockopt(g->p.c, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
	st = tpair_stream(&g->p, 0);
	CHECK_EQ(corio_spawn(gclose_writer, g, NULL, &fw), 0);
	CHECK_EQ(corio_spawn(gclose_reader, g, NULL, &fr), 0);
	CHECK_EQ(corio_stream_read_until(st, '\n', 100, &v), 4);
	CHECK_EQ(corio_stream_write(st, reply, REPLY), (ssize_t)REPLY);
	CHECK_EQ(corio_tls_stats_get(NULL, 0, &ts), 0);
	g->notify_before = ts.notify_sent;
	corio_event_set(&g->closing);
	CHECK_EQ(corio_join(fw, NULL), 0); /* one writer at a time per session */
	g->close_ret = corio_stream_close(st);
	CHECK_EQ(corio_join(fr, NULL), 0);
	CHECK_EQ(corio_tls_stats_get(NULL, 0, &ts), 0);
	g->notify_after = ts.notify_sent;
	CHECK_EQ(corio_close(g->p.c), 0);
	free(reply);
}

/* The graceful close over TLS: every byte of the last reply reaches the
 * peer, then its end of stream is a close_notify (0, not an error), while
 * bytes the server never read wait in its socket; the drain ends at the
 * client's own close_notify, and the close returns 0. */
Test(tls, stream_graceful_close_delivers_the_last_reply_and_close_notify, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct gclose g = {0};

	certs();
	g.sctx = server_ctx(srv_pem, srv_key);
	g.cctx = client_ctx(ca_pem, 0);
	cfg.net_recv_queue = 1; /* the junk stays in the kernel, unread */
	th_run(&cfg, gclose_entry, &g);
	cr_assert_eq(g.write_ret, (int)JUNK_IN);
	cr_assert_eq(g.end, 0, "the client's read ended with %zd", g.end);
	cr_assert_eq(g.got, REPLY);
	cr_assert_eq(g.close_ret, 0);
	/* the server's close_notify and the client's, both on this shard */
	cr_assert_eq(g.notify_after, g.notify_before + 2);
	corio_tls_ctx_free(g.sctx);
	corio_tls_ctx_free(g.cctx);
}

struct cut {
	struct corio_tls_ctx *sctx, *cctx;
	ssize_t first, second, third, after_abort;
	size_t buffered;
	char err[256], got[16];
};

/* A truncation: the client sends a line and half of the next, then a TCP
 * FIN with no close_notify. */
static void truncate_entry(void *arg)
{
	struct cut *c = arg;
	struct corio_stream *st;
	struct tpair p;
	const void *v;

	tpair_open(&p, c->sctx, c->cctx);
	st = tpair_stream(&p, 0);
	CHECK_EQ(corio_tls_write(p.ct, "line1\npart", 10), 10);
	CHECK_EQ(corio_shutdown_write(p.c), 0);
	c->first = corio_stream_read_until(st, '\n', 100, &v);
	c->second = corio_stream_read_until(st, '\n', 100, &v);
	snprintf(c->err, sizeof(c->err), "%s", corio_last_error());
	c->third = corio_stream_read_until(st, '\n', 100, &v);
	c->buffered = corio_stream_buffered(st);
	CHECK_EQ(corio_stream_abort(st), 0);
	cli_close(&p);
}

/* A TCP end without close_notify under a stream is an error from the
 * read, every time, never end of stream, and the half line stays. */
Test(tls, stream_read_of_a_truncated_connection_is_an_error_not_eof, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct cut c = {0};

	certs();
	c.sctx = server_ctx(srv_pem, srv_key);
	c.cctx = client_ctx(ca_pem, 0);
	th_run(&cfg, truncate_entry, &c);
	cr_assert_eq(c.first, 6);
	cr_assert_eq(c.second, -ECONNABORTED, "%zd: %s", c.second, c.err);
	cr_assert(strstr(c.err, "without close_notify (truncated)"), "%s", c.err);
	cr_assert_eq(c.third, -ECONNABORTED);
	cr_assert_eq(c.buffered, 4);
	corio_tls_ctx_free(c.sctx);
	corio_tls_ctx_free(c.cctx);
}

/* An abort drops buffered writes and sends no close_notify: the peer gets
 * what was flushed, then a truncation (-ECONNABORTED), not end of stream. */
static void abort_entry(void *arg)
{
	struct cut *c = arg;
	struct corio_stream *st;
	struct tpair p;
	ssize_t n;
	size_t got = 0;

	tpair_open(&p, c->sctx, c->cctx);
	st = tpair_stream(&p, 0);
	CHECK_EQ(corio_stream_write(st, "sent\n", 5), 5);
	CHECK_EQ(corio_stream_flush(st), 0);
	CHECK_EQ(corio_stream_write(st, "dropped\n", 8), 8);
	CHECK_EQ(corio_stream_abort(st), 0);
	while (got < sizeof(c->got) - 1 &&
	       (n = corio_tls_read(p.ct, c->got + got, sizeof(c->got) - 1 - got)) > 0)
		got += (size_t)n;
	c->after_abort = corio_tls_read(p.ct, c->got + got, 1);
	cli_close(&p);
}

Test(tls, stream_abort_sends_no_close_notify, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct cut c = {0};

	certs();
	c.sctx = server_ctx(srv_pem, srv_key);
	c.cctx = client_ctx(ca_pem, 0);
	th_run(&cfg, abort_entry, &c);
	cr_assert_str_eq(c.got, "sent\n");
	cr_assert_eq(c.after_abort, -ECONNABORTED, "%zd", c.after_abort);
	corio_tls_ctx_free(c.sctx);
	corio_tls_ctx_free(c.cctx);
}

/* A deadline on a blocked stream read over TLS: -ETIMEDOUT, the bytes
 * decrypted so far stay, and the next read returns the whole line. (And
 * corio_stream_tls's refusals.) */
static void deadline_entry(void *arg)
{
	struct cut *c = arg;
	struct corio_deadline d;
	struct corio_stream *st;
	struct corio_tls_stats ts;
	struct corio_stream *other = NULL;
	struct tpair p;
	const void *v;

	tpair_open(&p, c->sctx, c->cctx);
	st = tpair_stream(&p, 0);
	/* bad input: a NULL session, a session a stream owns already */
	CHECK_EQ(corio_stream_tls(NULL, NULL, &other), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_stream_tls") != NULL);
	CHECK_EQ(corio_stream_tls(p.st, NULL, &other), -EBUSY);
	CHECK(other == NULL);
	CHECK(corio_stream_transport(st) == p.st);
	CHECK_EQ(corio_tls_write(p.ct, "hel", 3), 3);
	CHECK_EQ(corio_stream_peek(st, 3, &v), 3); /* it has them, decrypted */
	CHECK_EQ(corio_timeout_push(&d, 50 * 1000 * 1000), 0);
	c->first = corio_stream_read_until(st, '\n', 100, &v);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	c->buffered = corio_stream_buffered(st);
	CHECK_EQ(corio_tls_write(p.ct, "lo\n", 3), 3);
	c->second = corio_stream_read_until(st, '\n', 100, &v);
	if (c->second > 0)
		memcpy(c->got, v, (size_t)c->second < sizeof(c->got) ? (size_t)c->second : 15);
	CHECK_EQ(corio_tls_stats_get(NULL, 0, &ts), 0);
	CHECK_EQ(ts.sessions_live, 2);
	CHECK_EQ(corio_tls_close(p.ct), 0);
	c->third = corio_stream_read_until(st, '\n', 100, &v); /* close_notify: 0 */
	CHECK_EQ(corio_stream_close(st), 0);
	CHECK_EQ(corio_close(p.c), 0);
	CHECK_EQ(corio_tls_stats_get(NULL, 0, &ts), 0);
	CHECK_EQ(ts.sessions_live, 0);
}

Test(tls, stream_read_deadline_keeps_the_decrypted_bytes, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct cut c = {0};

	certs();
	c.sctx = server_ctx(srv_pem, srv_key);
	c.cctx = client_ctx(ca_pem, 0);
	th_run(&cfg, deadline_entry, &c);
	cr_assert_eq(c.first, -ETIMEDOUT);
	cr_assert_eq(c.buffered, 3);
	cr_assert_eq(c.second, 6);
	cr_assert_str_eq(c.got, "hello\n");
	cr_assert_eq(c.third, 0);
	corio_tls_ctx_free(c.sctx);
	corio_tls_ctx_free(c.cctx);
}

/* ---- the idle wait and files over TLS (corio_stream_wait, _sendfile) -------------------- */

/* The wait looks at what the session holds before it races the socket
 * against the event: a decrypted byte OpenSSL keeps (a 2-byte stream read
 * took half a record) wins over a set event; with nothing held, the event
 * ends the wait. A file goes out read, encrypted and written, byte-exact. */
#define TFILE_LEN ((size_t)200 * 1024 + 3)

struct tread {
	struct corio_tls *t;
	char *got;
	ssize_t n;
};

static int tls_reader(void *arg)
{
	struct tread *r = arg;

	r->n = read_full(r->t, r->got, TFILE_LEN + 2);
	return 0;
}

static void wait_file_entry(void *arg)
{
	struct cut *c = arg;
	struct corio_stream_opts o = {.max_frame = 2};
	struct corio_stream *st = NULL;
	struct corio_event ev;
	struct corio_fiber *f = NULL;
	struct tread rd = {.got = malloc(TFILE_LEN + 2)};
	char path[] = "/tmp/corio-tls-file-XXXXXX", *want = malloc(TFILE_LEN);
	int fd = mkstemp(path);
	struct tpair p;
	const void *v;

	CHECK(fd >= 0);
	unlink(path);
	for (size_t i = 0; i < TFILE_LEN; i++)
		want[i] = (char)(i * 13 + i / 509);
	CHECK_EQ(corio_write_all(fd, want, TFILE_LEN, 0, NULL), (ssize_t)TFILE_LEN);
	corio_event_init(&ev);
	tpair_open(&p, c->sctx, c->cctx);
	CHECK_EQ(corio_stream_tls(p.st, &o, &st), 0);
	corio_event_set(&ev);
	c->first = corio_stream_wait(st, &ev); /* nothing sent: the event */
	corio_event_reset(&ev);
	CHECK_EQ(corio_tls_write(p.ct, "a\nb\n", 4), 4); /* one record */
	CHECK_EQ(corio_stream_wait(st, &ev), 2); /* reads of 2 bytes: "b\n" stays in OpenSSL */
	CHECK_EQ(corio_stream_read_until(st, '\n', 2, &v), 2);
	corio_event_set(&ev);
	c->second = corio_stream_wait(st, &ev); /* "b\n" is there: it wins */
	CHECK_EQ(corio_stream_read_until(st, '\n', 2, &v), 2);
	CHECK(memcmp(v, "b\n", 2) == 0);
	rd.t = p.ct;
	CHECK_EQ(corio_spawn(tls_reader, &rd, NULL, &f), 0);
	CHECK_EQ(corio_stream_write(st, "hd", 2), 2);
	CHECK_EQ(corio_stream_sendfile(st, fd, 0, TFILE_LEN), (ssize_t)TFILE_LEN);
	CHECK_EQ(corio_stream_flush(st), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	c->third = rd.n;
	CHECK(rd.n == (ssize_t)TFILE_LEN + 2 && memcmp(rd.got, "hd", 2) == 0 &&
	      memcmp(rd.got + 2, want, TFILE_LEN) == 0);
	CHECK_EQ(corio_tls_close(p.ct), 0);
	CHECK_EQ(corio_stream_close(st), 0);
	CHECK_EQ(corio_close(p.c), 0);
	close(fd);
	free(want);
	free(rd.got);
}

Test(tls, stream_wait_sees_what_the_session_holds_and_files_go_out_encrypted, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct cut c = {0};

	certs();
	c.sctx = server_ctx(srv_pem, srv_key);
	c.cctx = client_ctx(ca_pem, 0);
	th_run(&cfg, wait_file_entry, &c);
	cr_assert_eq(c.first, -ESHUTDOWN, "%zd", c.first);
	cr_assert_eq(c.second, 2, "%zd", c.second);
	cr_assert_eq(c.third, (ssize_t)TFILE_LEN + 2, "%zd", c.third);
	corio_tls_ctx_free(c.sctx);
	corio_tls_ctx_free(c.cctx);
}

/* ---- sendfile of anything but a regular file, over TLS --------------------------------- */

/* The TLS stream reads the file itself (no sendfile op): a character device
 * used to be read and its bytes sent encrypted, a FIFO or socket to be
 * waited on. Each is -EINVAL (a closed fd -EBADF) with a message naming
 * corio_stream_sendfile; nothing goes out and the write side stays whole. */
static void tls_not_file_entry(void *arg)
{
	struct cut *c = arg;
	struct th_not_file nf[TH_NOT_FILES];
	struct corio_stream *st = NULL;
	struct corio_deadline d;
	char path[] = "/tmp/corio-tls-file-XXXXXX", got[8] = "";
	int fd = mkstemp(path);
	struct tpair p;

	CHECK(fd >= 0);
	unlink(path);
	CHECK_EQ(write(fd, "file", 4), 4);
	/* bounded: a call that read a FIFO or a socket would wait for ever */
	CHECK_EQ(corio_timeout_push(&d, 5ull * 1000 * 1000 * 1000), 0);
	tpair_open(&p, c->sctx, c->cctx);
	CHECK_EQ(corio_stream_tls(p.st, NULL, &st), 0);
	CHECK_EQ(corio_stream_write(st, "hd", 2), 2);
	th_not_files(nf);
	for (int i = 0; i < TH_NOT_FILES; i++) {
		th_error_reset();
		CHECK_EQ(corio_stream_sendfile(st, nf[i].fd, 0, 4096), nf[i].err);
		CHECK(strstr(corio_last_error(), "corio_stream_sendfile: ") == corio_last_error());
		CHECK(strstr(corio_last_error(), nf[i].msg) != NULL);
	}
	th_not_files_close(nf);
	CHECK_EQ(corio_stream_sendfile(st, fd, 0, 4), 4);
	CHECK_EQ(corio_stream_flush(st), 0);
	CHECK_EQ(read_full(p.ct, got, 6), 6);
	CHECK(memcmp(got, "hdfile", 6) == 0);
	CHECK_EQ(corio_tls_close(p.ct), 0);
	CHECK_EQ(corio_stream_close(st), 0);
	CHECK_EQ(corio_close(p.c), 0);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	close(fd);
}

Test(tls, stream_sendfile_refuses_anything_but_a_regular_file, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct cut c = {0};

	certs();
	c.sctx = server_ctx(srv_pem, srv_key);
	c.cctx = client_ctx(ca_pem, 0);
	th_run(&cfg, tls_not_file_entry, &c);
	corio_tls_ctx_free(c.sctx);
	corio_tls_ctx_free(c.cctx);
}

/* ---- the handshake and the stream in one call ------------------------------------------- */

struct hs {
	struct corio_tls_ctx *sctx, *cctx;
	struct corio_listener *l;
	int server_ret, ok_ret, bad_ret, live_after;
	char reply[16], bad_err[256];
};

/* Two connections: the first answers a line; the second's client refuses
 * the certificate (a wrong host), so this end's handshake fails too. */
static int hs_server(void *arg)
{
	struct hs *h = arg;
	struct corio_stream_opts o = {.flags = CORIO_STREAM_AUTOFLUSH};
	struct corio_stream *st;
	struct corio_sock *s;

	CHECK_EQ(corio_accept(h->l, &s), 0);
	h->server_ret = corio_stream_tls_accept(h->sctx, s, &o, &st);
	if (h->server_ret == 0)
		CHECK_EQ(line_echo(st), 0);
	CHECK_EQ(corio_accept(h->l, &s), 0);
	CHECK(corio_stream_tls_accept(h->sctx, s, NULL, &st) < 0);
	return corio_close(s); /* still ours after the failure */
}

static void hs_entry(void *arg)
{
	struct hs *h = arg;
	struct corio_stream *st = NULL;
	struct corio_tls_stats ts;
	struct corio_fiber *f = NULL;
	struct corio_sock *c;
	char addr[64];
	const void *v;
	ssize_t n;

	CHECK_EQ(listen_local(&h->l, addr, sizeof(addr)), 0);
	CHECK_EQ(corio_spawn(hs_server, h, NULL, &f), 0);
	CHECK_EQ(corio_tcp_connect(addr, &c), 0);
	h->ok_ret = corio_stream_tls_connect(h->cctx, c, "localhost", NULL, &st);
	if (h->ok_ret == 0) {
		CHECK_EQ(corio_stream_write(st, "hi\n", 3), 3);
		CHECK_EQ(corio_stream_flush(st), 0);
		CHECK_EQ(corio_tls_alpn(corio_stream_transport(st), NULL) != NULL, 1);
		n = corio_stream_read_until(st, '\n', sizeof(h->reply) - 1, &v);
		if (n > 0)
			memcpy(h->reply, v, (size_t)n);
		CHECK_EQ(corio_stream_close(st), 0);
	}
	CHECK_EQ(corio_tcp_connect(addr, &c), 0);
	h->bad_ret = corio_stream_tls_connect(h->cctx, c, "wrong.example", NULL, &st);
	snprintf(h->bad_err, sizeof(h->bad_err), "%s", corio_last_error());
	CHECK_EQ(corio_close(c), 0); /* the socket stayed the caller's */
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_listener_close(h->l), 0);
	CHECK_EQ(corio_tls_stats_get(NULL, 0, &ts), 0);
	h->live_after = (int)ts.sessions_live; /* the failed sessions were freed */
}

Test(tls, stream_tls_accept_and_connect_free_the_session_on_failure, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct hs h = {0};

	certs();
	h.sctx = server_ctx(srv_pem, srv_key);
	h.cctx = client_ctx(ca_pem, 0);
	th_run(&cfg, hs_entry, &h);
	cr_assert_eq(h.server_ret, 0);
	cr_assert_eq(h.ok_ret, 0);
	cr_assert_str_eq(h.reply, "> hi\n");
	cr_assert_eq(h.bad_ret, -EKEYREJECTED, "%d: %s", h.bad_ret, h.bad_err);
	cr_assert(strstr(h.bad_err, "hostname mismatch"), "%s", h.bad_err);
	cr_assert_eq(h.live_after, 0);
	corio_tls_ctx_free(h.sctx);
	corio_tls_ctx_free(h.cctx);
}

/* ---- the census: a TLS stream never closed ------------------------------------------------ */

static void stream_leak_entry(void *arg)
{
	struct cut *c = arg;
	struct corio_stream *st;
	struct tpair p;

	tpair_open(&p, c->sctx, c->cctx);
	st = tpair_stream(&p, 0);
	CHECK_EQ(corio_stream_write(st, "x", 1), 1); /* holds its write buffer */
	cli_close(&p);
	/* st, its session and its socket are never closed */
}

static int stream_leak_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	int ret = corio_run(&cfg, stream_leak_entry, arg);

	if (atomic_load(&th_failures)) {
		fprintf(stderr, "%s\n", th_msg);
		return 2;
	}
	if (ret != -EBUSY || !strstr(corio_last_error(), "1 streams never closed") ||
	    !strstr(corio_last_error(), "1 TLS sessions never closed")) {
		fprintf(stderr, "corio_run: %d (%s)\n", ret, corio_last_error());
		return 1;
	}
	return 0;
}

/* Both censuses see a TLS stream nobody closed: the stream's (net) and the
 * session's (tls). In a child: the stream's memory goes with the process. */
Test(tls, census_counts_a_tls_stream_never_closed, .timeout = 60)
{
	struct cut c = {0};

	certs();
	c.sctx = server_ctx(srv_pem, srv_key);
	c.cctx = client_ctx(ca_pem, 0);
	th_child_ok(stream_leak_child, &c, 30000, "a leaked TLS stream");
	corio_tls_ctx_free(c.sctx);
	corio_tls_ctx_free(c.cctx);
}

/* ---- the output buffer (corio_tls_ctx_opts.out_buf) ------------------------------------ */

/*
 * A session sends what its output buffer holds: with the default (two
 * full records) a 512 KiB write takes 16 sends (at least 12 is checked);
 * with out_buf 1 MiB the whole write fits and takes 1 (at most 4: only
 * the socket's room could split it). Byte-exact either way. Out-of-range sizes are
 * -EINVAL with the range in the message.
 */
struct outbuf {
	struct tpair p;
	char *in;
};

static int outbuf_reader(void *arg)
{
	struct outbuf *o = arg;

	return read_full(o->p.ct, o->in, 512 << 10) == 512 << 10 ? 0 : -EIO;
}

static uint64_t outbuf_sends(unsigned out_buf)
{
	struct corio_tls_cert c = {srv_pem, srv_key};
	struct corio_tls_ctx_opts so = {.flags = CORIO_TLS_SERVER, .certs = &c, .ncerts = 1,
					.out_buf = out_buf};
	struct corio_tls_ctx *sctx = NULL, *cctx = client_ctx(ca_pem, 0);
	struct corio_net_stats a, b;
	struct corio_fiber *f = NULL;
	struct outbuf o;
	char *out = malloc(512 << 10);
	int ret = -1;

	CHECK_EQ(corio_tls_ctx_new(&so, &sctx), 0);
	o.in = malloc(512 << 10);
	for (size_t i = 0; i < (512u << 10); i++)
		out[i] = (char)(i * 7 + i / 4096);
	tpair_open(&o.p, sctx, cctx);
	CHECK_EQ(corio_spawn(outbuf_reader, &o, NULL, &f), 0);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &a), 0);
	CHECK_EQ(corio_tls_write(o.p.st, out, 512 << 10), 512 << 10);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &b), 0);
	CHECK_EQ(corio_join(f, &ret), 0);
	CHECK_EQ(ret, 0);
	CHECK(memcmp(o.in, out, 512 << 10) == 0);
	corio_tls_close(o.p.st);
	CHECK_EQ(corio_close(o.p.s), 0);
	cli_close(&o.p);
	corio_tls_ctx_free(sctx);
	corio_tls_ctx_free(cctx);
	free(out);
	free(o.in);
	return b.ops_out - a.ops_out;
}

static void outbuf_entry(void *arg)
{
	uint64_t dflt = outbuf_sends(0), big = outbuf_sends(1u << 20);
	char why[96];

	(void)arg;
	if (dflt < 12 || big > 4) {
		snprintf(why, sizeof(why), "512 KiB took %llu sends by default, %llu with out_buf 1 MiB",
			 (unsigned long long)dflt, (unsigned long long)big);
		th_fail(__FILE__, __LINE__, why);
	}
}

Test(tls, out_buf_sends_a_large_write_in_fewer_sends, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_tls_cert c = {srv_pem, srv_key};
	struct corio_tls_ctx_opts o = {.flags = CORIO_TLS_SERVER, .certs = &c, .ncerts = 1};
	struct corio_tls_ctx *ctx = NULL;

	certs();
	for (int i = 0; i < 2; i++) {
		o.out_buf = i ? (2u << 20) : 1;
		cr_assert_eq(corio_tls_ctx_new(&o, &ctx), -EINVAL);
		cr_assert(strstr(corio_last_error(), "out_buf"), "%s", corio_last_error());
	}
	th_run(&cfg, outbuf_entry, NULL);
}
