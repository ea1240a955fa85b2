/* SPDX-License-Identifier: MIT */
/*
 * test_httpd.c - tools/examples/httpd, the built program as a child
 * process: curl (a real client) for files, HEAD, errors, path escapes and
 * keep-alive; raw sockets for pipelining and the malformed, oversized and
 * slow heads; and the drain: 500 keep-alive connections, idle and busy,
 * then SIGTERM. HTTPS (--tls-cert/--tls-key, certificates made at run time
 * with corio_tls_cert_generate): curl and openssl s_client against it
 * (TLS 1.3, ALPN http/1.1, files byte-exact, keep-alive), handshakes that
 * fail, files that do not load, and the drain over TLS from a corio client.
 */
#include "helpers.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The program; HTTPD_PROG names another build of it (a sanitizer's). */
#define PROG (getenv("HTTPD_PROG") ? getenv("HTTPD_PROG") : "build/tools/examples/httpd")
#define GET_PROG \
	(getenv("HTTPS_GET_PROG") ? getenv("HTTPS_GET_PROG") : "build/tools/examples/https-get")
#define BIG (4 * 1024 * 1024 + 123) /* sendfile runs in pieces */

static char dir[64], www[128];
static char *big; /* the content of www/big.bin */

/* www/: index.html, big.bin, small.txt, a link to ../outside.txt. */
static void make_tree(void)
{
	char p[256];
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/corio-httpd-XXXXXX");
	cr_assert(mkdtemp(dir));
	snprintf(www, sizeof(www), "%s/www", dir);
	cr_assert_eq(mkdir(www, 0755), 0);
	big = malloc(BIG);
	for (size_t i = 0; i < BIG; i++)
		big[i] = (char)(i * 2654435761u >> 13);
	snprintf(p, sizeof(p), "%s/big.bin", www);
	cr_assert((f = fopen(p, "w")) && fwrite(big, 1, BIG, f) == BIG && fclose(f) == 0);
	snprintf(p, sizeof(p), "%s/small.txt", www);
	cr_assert((f = fopen(p, "w")) && fputs("hello, world\n", f) >= 0 && fclose(f) == 0);
	snprintf(p, sizeof(p), "%s/index.html", www);
	cr_assert((f = fopen(p, "w")) && fputs("<p>hi</p>\n", f) >= 0 && fclose(f) == 0);
	snprintf(p, sizeof(p), "%s/outside.txt", dir);
	cr_assert((f = fopen(p, "w")) && fputs("secret\n", f) >= 0 && fclose(f) == 0);
	snprintf(p, sizeof(p), "%s/link.txt", www);
	cr_assert_eq(symlink("../outside.txt", p), 0);
}

static void remove_tree(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
	free(big);
}

/* HTTPS: a CA, and a certificate it signed for localhost and 127.0.0.1. */
static char ca_pem[160], srv_pem[160], srv_key[160];

static void gen(const char *pem, const char *key, const char *names, unsigned flags,
		const char *ca, const char *cakey)
{
	struct corio_tls_cert_gen g = { .cert_file = pem, .key_file = key, .names = names,
					.flags = flags, .ca_cert_file = ca, .ca_key_file = cakey };

	cr_assert_eq(corio_tls_cert_generate(&g), 0, "%s: %s", names, corio_last_error());
}

static void make_certs(void)
{
	char ca_key[160];

	snprintf(ca_pem, sizeof(ca_pem), "%s/ca.pem", dir);
	snprintf(ca_key, sizeof(ca_key), "%s/ca.key", dir);
	snprintf(srv_pem, sizeof(srv_pem), "%s/srv.pem", dir);
	snprintf(srv_key, sizeof(srv_key), "%s/srv.key", dir);
	gen(ca_pem, ca_key, "corio httpd test CA", CORIO_TLS_GEN_CA, NULL, NULL);
	gen(srv_pem, srv_key, "localhost,127.0.0.1", 0, ca_pem, ca_key);
}

/* The program on www, plain or (tls) HTTPS with the certificate above. */
/* In the server's child: its stderr goes to dir/httpd.err, shown by
 * stop_prog when the server fails (a preempted shard's off-cpu report on a
 * loaded machine is no failure, and make test does not print it). */
static void prog_stderr(void)
{
	char p[128];
	int fd;

	snprintf(p, sizeof(p), "%s/httpd.err", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0)
		dup2(fd, 2);
}

static pid_t start_prog_tls(int *port, const char *idle, const char *shards, bool tls)
{
	if (access(PROG, X_OK) != 0)
		cr_skip_test("%s is not built (make tools)", PROG);
	make_tree();
	if (tls)
		make_certs();
	return th_start_server(tls ? (char *[]){ PROG, "-d", www, "-p", "0", "-i", (char *)idle, "-s",
						 (char *)shards, "--tls-cert", srv_pem, "--tls-key",
						 srv_key, NULL }
				   : (char *[]){ PROG, "-d", www, "-p", "0", "-i", (char *)idle, "-s",
						 (char *)shards, NULL },
			       "httpd", prog_stderr, port);
}

static pid_t start_prog(int *port, const char *idle, const char *shards)
{
	return start_prog_tls(port, idle, shards, false);
}

/* SIGTERM, and the exit status within a bounded wait: it must be 0. */
static void stop_prog(pid_t pid)
{
	int status = 0;

	char p[128], err[2048] = "";
	FILE *f;

	cr_assert_eq(kill(pid, SIGTERM), 0);
	for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(10000);
	snprintf(p, sizeof(p), "%s/httpd.err", dir);
	if ((f = fopen(p, "r"))) {
		err[fread(err, 1, sizeof(err) - 1, f)] = '\0';
		fclose(f);
	}
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x; its stderr: %s",
		  status, err);
	remove_tree();
}

static int dial(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = 20 }; /* a hang fails instead of hanging */
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert(fd >= 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_all(int fd, const char *s)
{
	cr_assert_eq(write(fd, s, strlen(s)), (ssize_t)strlen(s));
}

/* Read until the peer closes (at most cap bytes): how many. */
static size_t read_to_eof(int fd, char *buf, size_t cap)
{
	size_t got = 0;
	ssize_t r;

	while (got < cap && (r = read(fd, buf + got, cap - got)) > 0)
		got += (size_t)r;
	cr_assert(got < cap || read(fd, buf, 1) == 0);
	return got;
}

/* One raw exchange: what the server sends until it closes. */
static size_t exchange(int port, const char *req, char *buf, size_t cap)
{
	int fd = dial(port);
	size_t n;

	send_all(fd, req);
	n = read_to_eof(fd, buf, cap - 1);
	buf[n] = '\0';
	close(fd);
	return n;
}

/* popen(cmd, "r") and read it whole, the command bound to this process
 * as th_sh_start says (a killed test leaves no client behind). */
static void run(const char *cmd, char *out, size_t cap)
{
	int pfd[2];
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	cr_assert_eq(pipe(pfd), 0);
	pid = th_sh_start(cmd, pfd[1], -1);
	close(pfd[1]);
	while (n < cap - 1 && (r = read(pfd[0], out + n, cap - 1 - n)) != 0)
		if (r > 0)
			n += (size_t)r;
		else if (errno != EINTR)
			break;
	out[n] = '\0';
	close(pfd[0]);
	th_sh_wait(pid);
}

/* The head of a response at buf and its length (up to the blank line). */
static size_t head_len(const char *buf)
{
	const char *e = strstr(buf, "\r\n\r\n");

	cr_assert(e, "no head in '%.200s'", buf);
	return (size_t)(e + 4 - buf);
}

/* ---- curl ---------------------------------------------------------------------- */

static void need_curl(void)
{
	if (system("command -v curl >/dev/null 2>&1") != 0)
		cr_skip_test("curl is not installed (apt-get install curl)");
}

Test(httpd, curl_files_errors_escapes_keepalive, .timeout = 60)
{
	char cmd[512], out[4096], path[200];
	int port;
	pid_t pid;
	FILE *f;
	char *got = malloc(BIG + 1);

	need_curl();
	pid = start_prog(&port, "5", "2");
	/* GET: byte-exact, several MiB */
	snprintf(path, sizeof(path), "%s/got.bin", dir);
	snprintf(cmd, sizeof(cmd), "curl -sf -o %s http://127.0.0.1:%d/big.bin", path, port);
	cr_assert_eq(th_system(cmd), 0);
	cr_assert((f = fopen(path, "r")));
	cr_assert_eq(fread(got, 1, BIG + 1, f), (size_t)BIG);
	fclose(f);
	cr_assert(memcmp(got, big, BIG) == 0);
	free(got);
	/* HEAD: headers only, the file's length */
	snprintf(cmd, sizeof(cmd), "curl -sI http://127.0.0.1:%d/big.bin", port);
	run(cmd, out, sizeof(out));
	cr_assert(strstr(out, "HTTP/1.1 200 OK\r\n"), "%s", out);
	snprintf(path, sizeof(path), "Content-Length: %d\r\n", BIG);
	cr_assert(strstr(out, path), "%s", out);
	cr_assert(strstr(out, "Date: "), "%s", out);
	cr_assert(strstr(out, "Content-Type: application/octet-stream\r\n"), "%s", out);
	snprintf(cmd, sizeof(cmd), "curl -si http://127.0.0.1:%d/", port);
	run(cmd, out, sizeof(out));
	cr_assert(strstr(out, "Content-Type: text/html\r\n") && strstr(out, "\r\n\r\n<p>hi</p>\n"),
		  "%s", out);
	/* status codes: missing, method, escapes (.. and a link out of the tree) */
	snprintf(cmd, sizeof(cmd),
		 "for u in /nope.txt /small.txt /../outside.txt /link.txt /./../outside.txt "
		 "/%%2e%%2e/outside.txt; do curl -s --path-as-is -o /dev/null -w '%%{http_code} ' "
		 "http://127.0.0.1:%d$u; done; curl -s -o /dev/null -w '%%{http_code}' -X DELETE "
		 "http://127.0.0.1:%d/small.txt",
		 port, port);
	run(cmd, out, sizeof(out));
	cr_assert_str_eq(out, "404 200 403 403 403 403 405");
	/* keep-alive: two URLs on one connection */
	snprintf(cmd, sizeof(cmd),
		 "curl -sv -o /dev/null -o /dev/null http://127.0.0.1:%d/small.txt "
		 "http://127.0.0.1:%d/big.bin 2>&1",
		 port, port);
	run(cmd, out, sizeof(out));
	cr_assert(strstr(out, "Re-using existing connection"), "%s", out);
	stop_prog(pid);
}

/* ---- raw sockets --------------------------------------------------------------- */

Test(httpd, pipelining_in_order, .timeout = 60)
{
	static const char small_resp_body[] = "hello, world\n";
	char buf[8192];
	int port, fd;
	size_t n, h;
	pid_t pid = start_prog(&port, "5", "1");

	fd = dial(port);
	/* three requests in one write: the answers come in order, the last closes */
	send_all(fd, "GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n"
		     "HEAD /index.html HTTP/1.1\r\nHost: x\r\n\r\n"
		     "GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	n = read_to_eof(fd, buf, sizeof(buf) - 1);
	buf[n] = '\0';
	close(fd);
	h = head_len(buf);
	cr_assert(strstr(buf, "Content-Type: text/plain\r\nContent-Length: 13\r\n") < buf + h);
	cr_assert(memcmp(buf + h, small_resp_body, 13) == 0, "%s", buf);
	n = head_len(buf + h + 13); /* HEAD: no body */
	cr_assert(strstr(buf + h + 13, "Content-Length: 10\r\n"), "%s", buf);
	cr_assert(!strstr(buf + h + 13, "Connection: close") ||
		  strstr(buf + h + 13, "Connection: close") > buf + h + 13 + n);
	h += 13 + n;
	n = head_len(buf + h);
	cr_assert(strstr(buf + h, "Connection: close\r\n"), "%s", buf);
	cr_assert_str_eq(buf + h + n, "<p>hi</p>\n");
	stop_prog(pid);
}

Test(httpd, bad_heads_400_413_431_408, .timeout = 60)
{
	char buf[16384], req[12000];
	int port;
	pid_t pid = start_prog(&port, "1", "1");

	exchange(port, "GARBAGE\r\n\r\n", buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 400 ", 13) == 0, "%s", buf);
	exchange(port, "GET / HTTP/1.1\r\nno colon\r\n\r\n", buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 400 ", 13) == 0, "%s", buf);
	exchange(port, "GET /%00 HTTP/1.1\r\n\r\n", buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 400 ", 13) == 0, "%s", buf);
	exchange(port, "GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 413 ", 13) == 0, "%s", buf);
	exchange(port, "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", buf,
		 sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 413 ", 13) == 0, "%s", buf);
	exchange(port, "GET / HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", buf,
		 sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 200 ", 13) == 0, "%s", buf);
	/* a head over 8 KiB, in one header line and in many short ones */
	snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nX: %09000d\r\n\r\n", 1);
	exchange(port, req, buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 431 ", 13) == 0, "%s", buf);
	strcpy(req, "GET / HTTP/1.1\r\n");
	while (strlen(req) < 9000)
		strcat(req, "X-Some-Header: value\r\n");
	strcat(req, "\r\n");
	exchange(port, req, buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 431 ", 13) == 0, "%s", buf);
	/* half a head, then nothing past -i 1: 408 and the close */
	exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n", buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 408 ", 13) == 0, "%s", buf);
	cr_assert(strstr(buf, "Connection: close\r\n"), "%s", buf);
	/* nothing at all past -i: closed quietly */
	cr_assert_eq(exchange(port, "", buf, sizeof(buf)), 0);
	stop_prog(pid);
}

/* The last keep-alive GET's Date value (get_on). */
static char last_date[64];

/* One keep-alive GET on fd: the status, the body into body (NUL-ended). */
static int get_on(int fd, const char *path, char *body, size_t cap)
{
	char req[256], buf[4096];
	size_t n = 0, h = 0, len = 0;
	const char *cl;

	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
	send_all(fd, req);
	buf[0] = '\0';
	while (!h || n < h + len) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);

		cr_assert(r > 0, "read %zd after %zu", r, n);
		n += (size_t)r;
		buf[n] = '\0';
		if (!h && strstr(buf, "\r\n\r\n")) {
			h = head_len(buf);
			cr_assert((cl = strstr(buf, "Content-Length: ")), "%s", buf);
			len = strtoul(cl + 16, NULL, 10);
		}
	}
	cr_assert_eq(n, h + len, "%s", buf);
	cr_assert(len < cap);
	cr_assert((cl = strstr(buf, "\r\nDate: ")) && cl < buf + h, "%s", buf);
	snprintf(last_date, sizeof(last_date), "%.*s", (int)strcspn(cl + 8, "\r"), cl + 8);
	memcpy(body, buf + h, len);
	body[len] = '\0';
	return atoi(buf + 9);
}

static void put_file(const char *name, const char *text)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", www, name);
	cr_assert((f = fopen(p, "w")) && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* httpd keeps the files it served open (an open-file cache), but every
 * answer is what a fresh open would give: a file rewritten in place,
 * replaced by a rename, removed, or replaced by a link, one request after
 * the other on one keep-alive connection (and so within the cache's life). */
Test(httpd, served_fresh_after_changes_on_disk, .timeout = 60)
{
	char body[1024], p[256], q[256];
	int port, fd;
	pid_t pid = start_prog(&port, "5", "1");

	fd = dial(port);
	cr_assert_eq(get_on(fd, "/small.txt", body, sizeof(body)), 200);
	cr_assert_str_eq(body, "hello, world\n");
	cr_assert_eq(get_on(fd, "/small.txt", body, sizeof(body)), 200);
	snprintf(q, sizeof(q), "%s", last_date);
	usleep(1100000); /* the Date moves on (heads are kept per file and second) */
	cr_assert_eq(get_on(fd, "/small.txt", body, sizeof(body)), 200);
	cr_assert_str_neq(last_date, q);
	put_file("small.txt", "rewritten in place, longer\n");
	cr_assert_eq(get_on(fd, "/small.txt", body, sizeof(body)), 200);
	cr_assert_str_eq(body, "rewritten in place, longer\n");
	put_file("new.txt", "replaced\n");
	snprintf(p, sizeof(p), "%s/new.txt", www);
	snprintf(q, sizeof(q), "%s/small.txt", www);
	cr_assert_eq(rename(p, q), 0);
	cr_assert_eq(get_on(fd, "/small.txt", body, sizeof(body)), 200);
	cr_assert_str_eq(body, "replaced\n");
	cr_assert_eq(unlink(q), 0);
	cr_assert_eq(get_on(fd, "/small.txt", body, sizeof(body)), 404);
	put_file("small.txt", "back\n");
	cr_assert_eq(get_on(fd, "/small.txt", body, sizeof(body)), 200);
	cr_assert_str_eq(body, "back\n");
	cr_assert_eq(unlink(q), 0);
	cr_assert_eq(symlink("index.html", q), 0);
	cr_assert_eq(get_on(fd, "/small.txt", body, sizeof(body)), 403);
	cr_assert_eq(get_on(fd, "/index.html", body, sizeof(body)), 200);
	cr_assert_str_eq(body, "<p>hi</p>\n");
	close(fd);
	stop_prog(pid);
}

/* ---- the drain ------------------------------------------------------------------- */

#define N_IDLE 430
#define N_PART 50
#define N_SLOW 20
#define SMALL_REQ "GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n"

/* A keep-alive response to SMALL_REQ, read whole. */
static void read_small(int fd, bool want_close)
{
	char buf[1024];
	size_t n = 0, h;

	while (!strstr(buf, "\r\n\r\n") || n < head_len(buf) + 13) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);

		cr_assert(r > 0, "read %zd after %zu", r, n);
		n += (size_t)r;
		buf[n] = '\0';
	}
	h = head_len(buf);
	cr_assert_eq(n, h + 13);
	cr_assert(memcmp(buf + h, "hello, world\n", 13) == 0);
	cr_assert_eq(!!strstr(buf, "Connection: close\r\n"), want_close, "%s", buf);
}

/*
 * 500 keep-alive connections: idle ones (one request answered), ones with a
 * second request half received, and ones reading a big file slowly (its
 * sendfile parked on a full socket). Then SIGTERM: every idle connection is
 * closed at once (end of stream, nothing sent), the half requests, completed
 * after that, are answered whole with Connection: close, the big files
 * arrive byte-exact, and the server exits 0.
 */
Test(httpd, drain_500_connections, .timeout = 120)
{
	static int idle[N_IDLE], part[N_PART], slow[N_SLOW];
	struct rlimit rl;
	char *buf = malloc(BIG + 4096), one;
	int port;
	pid_t pid;

	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 2048 && rl.rlim_max > rl.rlim_cur) {
		rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
		setrlimit(RLIMIT_NOFILE, &rl); /* the server inherits it */
	}
	pid = start_prog(&port, "30", "2");
	for (int i = 0; i < N_IDLE; i++) {
		idle[i] = dial(port);
		send_all(idle[i], SMALL_REQ);
		read_small(idle[i], false);
	}
	for (int i = 0; i < N_PART; i++) { /* the second head comes with the first */
		part[i] = dial(port);
		send_all(part[i], SMALL_REQ "GET /small.txt HTTP/1.1\r\nHost: x\r\n");
		read_small(part[i], false);
	}
	for (int i = 0; i < N_SLOW; i++) {
		slow[i] = dial(port);
		send_all(slow[i], "GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
		for (size_t got = 0; got < 4096;) { /* the response has begun */
			ssize_t r = read(slow[i], buf + got, 4096 - got);

			cr_assert(r > 0, "slow connection %d: read %zd (%s) after %zu of 4096", i, r,
				  r < 0 ? strerror(errno) : "end", got);
			got += (size_t)r;
		}
	}
	cr_assert_eq(kill(pid, SIGTERM), 0);
	for (int i = 0; i < N_IDLE; i++) { /* closed, with nothing more said */
		cr_assert_eq(read(idle[i], &one, 1), 0, "idle connection %d", i);
		close(idle[i]);
	}
	for (int i = 0; i < N_PART; i++) { /* the drain has begun: finish the heads */
		send_all(part[i], "\r\n");
		read_small(part[i], true);
		cr_assert_eq(read(part[i], &one, 1), 0);
		close(part[i]);
	}
	for (int i = 0; i < N_SLOW; i++) {
		size_t n = 4096 + read_to_eof(slow[i], buf + 4096, BIG + 4096 - 4096), h;

		buf[n < BIG + 4095 ? n : BIG + 4095] = '\0';
		h = head_len(buf);
		cr_assert_eq(n, h + BIG, "slow connection %d: %zu bytes", i, n);
		cr_assert(memcmp(buf + h, big, BIG) == 0, "slow connection %d", i);
		close(slow[i]);
	}
	free(buf);
	stop_prog(pid); /* already exiting: the status must be 0 */
}

/* ---- HTTPS ------------------------------------------------------------------------ */

/*
 * curl verifying the server against the test CA: a 4 MiB file byte-exact
 * (read, encrypted, written: sendfile cannot apply), keep-alive, TLS 1.3
 * and HTTP/1.1 by ALPN, status codes. A client that speaks plain HTTP to
 * the port, and one that sends nothing past -i, lose their connection
 * only: the next curl is served.
 */
Test(httpd, https_curl_files_keepalive_tls13_http11, .timeout = 60)
{
	char cmd[1024], out[8192], path[200];
	int port, fd;
	pid_t pid;
	FILE *f;
	char *got = malloc(BIG + 1);

	need_curl();
	pid = start_prog_tls(&port, "1", "2", true);
	snprintf(path, sizeof(path), "%s/got.bin", dir);
	snprintf(cmd, sizeof(cmd), "curl -sf --cacert %s -o %s https://127.0.0.1:%d/big.bin",
		 ca_pem, path, port);
	cr_assert_eq(th_system(cmd), 0);
	cr_assert((f = fopen(path, "r")));
	cr_assert_eq(fread(got, 1, BIG + 1, f), (size_t)BIG);
	fclose(f);
	cr_assert(memcmp(got, big, BIG) == 0);
	free(got);
	snprintf(cmd, sizeof(cmd),
		 "curl -sv --cacert %s -o /dev/null -o /dev/null -w '[%%{http_version} "
		 "%%{http_code}]' https://127.0.0.1:%d/small.txt https://127.0.0.1:%d/big.bin 2>&1",
		 ca_pem, port, port);
	run(cmd, out, sizeof(out));
	cr_assert(strstr(out, "SSL connection using TLSv1.3"), "%s", out);
	cr_assert(strstr(out, "ALPN: server accepted http/1.1"), "%s", out);
	cr_assert(strstr(out, "Re-using existing connection"), "%s", out);
	cr_assert(strstr(out, "[1.1 200][1.1 200]"), "%s", out);
	/* the client example, verifying too: the same bytes */
	if (access(GET_PROG, X_OK) == 0) {
		got = malloc(BIG + 1);
		snprintf(cmd, sizeof(cmd), "%s --cafile %s https://localhost:%d/big.bin > %s",
			 GET_PROG, ca_pem, port, path);
		cr_assert_eq(th_system(cmd), 0);
		cr_assert((f = fopen(path, "r")));
		cr_assert_eq(fread(got, 1, BIG + 1, f), (size_t)BIG);
		fclose(f);
		cr_assert(memcmp(got, big, BIG) == 0);
		free(got);
	}
	/* plain HTTP to the HTTPS port: no handshake, that connection closed */
	exchange(port, "GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n", out, sizeof(out));
	cr_assert(strncmp(out, "HTTP/", 5) != 0, "%s", out);
	/* no ClientHello within -i 1: closed, nothing sent */
	fd = dial(port);
	cr_assert_eq(read_to_eof(fd, out, sizeof(out)), 0);
	close(fd);
	snprintf(cmd, sizeof(cmd),
		 "for u in /small.txt /nope.txt /../outside.txt; do curl -s --path-as-is "
		 "--cacert %s -o /dev/null -w '%%{http_code} ' https://127.0.0.1:%d$u; done",
		 ca_pem, port);
	run(cmd, out, sizeof(out));
	cr_assert_str_eq(out, "200 404 403 ");
	stop_prog(pid);
}

/* Read what fd gives (into buf, at most cap - 1 bytes kept, the rest
 * read and dropped) until its end or until `until` bytes came, waiting at
 * most secs in all: the bytes read, or -1 when the time ran out. */
static long long read_bounded(int fd, char *buf, size_t cap, long long until, int secs)
{
	struct timespec t0, now;
	long long got = 0;
	char sink[65536];

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < until) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char *to = (size_t)got < cap - 1 ? buf + got : sink;
		size_t room = (size_t)got < cap - 1 ? cap - 1 - (size_t)got : sizeof(sink);
		ssize_t r;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec >= secs)
			return -1;
		if (poll(&p, 1, 1000) <= 0)
			continue;
		if ((r = read(fd, to, room)) == 0)
			break;
		if (r > 0)
			got += r;
		else if (errno != EINTR)
			break;
	}
	if (cap)
		buf[(size_t)got < cap - 1 ? (size_t)got : cap - 1] = '\0';
	return got;
}

/*
 * The client example when its server dies mid-download (SIGKILL, as a
 * killed test run kills its httpd): it ends on its own within a bounded
 * wait (its -t is far longer), exits 3, and says the body was cut short,
 * not that the handshake failed. The body is a 1 GiB sparse file, so the
 * transfer is surely under way: the test reads 64 KiB of it from the
 * client's stdout, and the client, its socket and the server's wait on
 * this pipe until the server is killed.
 */
Test(httpd, https_get_exits_3_when_the_server_dies_mid_download, .timeout = 90)
{
	char cmd[1024], p[256], out[64], err[2048];
	int pfd[2], efd[2], port, fd, status = 0;
	long long got;
	pid_t srv, cli;

	if (access(GET_PROG, X_OK) != 0)
		cr_skip_test("%s is not built (make tools)", GET_PROG);
	srv = start_prog_tls(&port, "5", "1", true);
	snprintf(p, sizeof(p), "%s/huge.bin", www);
	cr_assert((fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0);
	cr_assert_eq(ftruncate(fd, 1ll << 30), 0);
	close(fd);
	cr_assert_eq(pipe(pfd), 0);
	cr_assert_eq(pipe(efd), 0);
	snprintf(cmd, sizeof(cmd), "exec %s --cafile %s -t 600 https://localhost:%d/huge.bin",
		 GET_PROG, ca_pem, port);
	cli = th_sh_start(cmd, pfd[1], efd[1]);
	close(pfd[1]);
	close(efd[1]);
	got = read_bounded(pfd[0], out, sizeof(out), 65536, 20);
	if (got < 65536)
		read_bounded(efd[0], err, sizeof(err), sizeof(err), 20);
	cr_assert_geq(got, 65536, "the client wrote %lld body bytes in 20 s; stderr: %s", got,
		      got < 65536 ? err : "");
	cr_assert_eq(kill(srv, SIGKILL), 0);
	cr_assert_eq(waitpid(srv, NULL, 0), srv);
	/* what the client still had (socket and TLS buffers), then its end */
	got = read_bounded(pfd[0], out, sizeof(out), 1ll << 30, 20);
	cr_assert_geq(got, 0, "the client was still writing 20 s after its server died");
	got = read_bounded(efd[0], err, sizeof(err), sizeof(err), 20);
	cr_assert_geq(got, 0, "the client's stderr stayed open 20 s after its server died");
	close(pfd[0]);
	close(efd[0]);
	status = th_sh_wait(cli);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 3, "status 0x%x, stderr: %s",
		  status, err);
	cr_assert(strstr(err, "reading the body: ") &&
		  (strstr(err, "(truncated)") || strstr(err, "reset by peer")) &&
		  !strstr(err, "handshake"), "%s", err);
	remove_tree();
}

static void need_openssl(void)
{
	if (system("command -v openssl >/dev/null 2>&1") != 0)
		cr_skip_test("the openssl command is not installed (apt-get install openssl)");
}

/* openssl s_client asking for TLS 1.3 and http/1.1: both agreed, the
 * certificate verified, a real response. */
Test(httpd, https_openssl_s_client_tls13_alpn, .timeout = 60)
{
	char cmd[1024], out[16384];
	int port;
	pid_t pid;

	need_openssl();
	pid = start_prog_tls(&port, "5", "1", true);
	snprintf(cmd, sizeof(cmd),
		 "printf 'GET /small.txt HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n' | "
		 "timeout 20 openssl s_client -connect 127.0.0.1:%d -CAfile %s -alpn http/1.1 "
		 "-tls1_3 -verify_return_error -ign_eof 2>&1",
		 port, ca_pem);
	run(cmd, out, sizeof(out));
	cr_assert(strstr(out, "Protocol  : TLSv1.3"), "%s", out);
	cr_assert(strstr(out, "ALPN protocol: http/1.1"), "%s", out);
	cr_assert(strstr(out, "Verify return code: 0 (ok)"), "%s", out);
	cr_assert(strstr(out, "HTTP/1.1 200 OK\r\n"), "%s", out);
	cr_assert(strstr(out, "\r\n\r\nhello, world\n"), "%s", out);
	stop_prog(pid);
}

/* A certificate or key that does not load, or one without the other: exit
 * status 2 and a message naming the file, never an abort. */
Test(httpd, https_files_that_do_not_load_exit_2_naming_the_file, .timeout = 60)
{
	char cmd[1024], out[4096];

	if (access(PROG, X_OK) != 0)
		cr_skip_test("%s is not built (make tools)", PROG);
	make_tree();
	make_certs();
	snprintf(cmd, sizeof(cmd), "%s -d %s --tls-cert %s/nope.pem --tls-key %s 2>&1; echo rc=$?",
		 PROG, www, dir, srv_key);
	run(cmd, out, sizeof(out));
	cr_assert(strstr(out, "nope.pem") && strstr(out, "rc=2\n"), "%s", out);
	snprintf(cmd, sizeof(cmd), "%s -d %s --tls-cert %s --tls-key %s/small.txt 2>&1; echo rc=$?",
		 PROG, www, srv_pem, www);
	run(cmd, out, sizeof(out));
	cr_assert(strstr(out, "small.txt") && strstr(out, "rc=2\n"), "%s", out);
	snprintf(cmd, sizeof(cmd), "%s -d %s --tls-cert %s --tls-key %s 2>&1; echo rc=$?", PROG,
		 www, srv_pem, ca_pem);
	run(cmd, out, sizeof(out));
	cr_assert(strstr(out, ca_pem) && strstr(out, "rc=2\n"), "%s", out);
	snprintf(cmd, sizeof(cmd), "%s -d %s --tls-cert %s 2>&1; echo rc=$?", PROG, www, srv_pem);
	run(cmd, out, sizeof(out));
	cr_assert(strstr(out, "go together") && strstr(out, "rc=2\n"), "%s", out);
	remove_tree();
}

/* ---- the drain over TLS, from a corio client -------------------------------------- */

struct tdrain {
	pid_t pid;
	int port;
	struct corio_tls_ctx *ctx;
	ssize_t idle_end, part_end;
	bool part_closed;
};

static struct corio_stream *tls_dial(struct tdrain *d)
{
	struct corio_stream_opts o = { .max_frame = 8192 };
	struct corio_stream *st = NULL;
	struct corio_sock *s = NULL;
	char addr[64];

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", d->port);
	CHECK_EQ(corio_tcp_connect(addr, &s), 0);
	CHECK_EQ(corio_stream_tls_connect(d->ctx, s, "127.0.0.1", &o, &st), 0);
	return st;
}

/* Send req, read one response to SMALL_REQ whole: whether it said
 * Connection: close. */
static bool tls_small(struct corio_stream *st, const char *req)
{
	bool close_hdr = false;
	const void *v;
	ssize_t n;

	CHECK_EQ(corio_stream_write(st, req, strlen(req)), (ssize_t)strlen(req));
	CHECK_EQ(corio_stream_flush(st), 0);
	while ((n = corio_stream_read_until(st, '\n', 8192, &v)) > 2)
		close_hdr |= n == 19 && memcmp(v, "Connection: close\r\n", 19) == 0;
	if (n == 2 && corio_stream_read_exact(st, 13, &v) == 13) /* the blank line, the body */
		CHECK(memcmp(v, "hello, world\n", 13) == 0);
	else
		CHECK(!"a whole response");
	return close_hdr;
}

/* An idle keep-alive connection and one with half a second request; then
 * SIGTERM: the idle one ends with close_notify (a clean end of stream, not
 * a truncation), the half request is answered with Connection: close and
 * then ends cleanly too. */
static void tdrain_entry(void *arg)
{
	struct tdrain *d = arg;
	struct corio_stream *idle = tls_dial(d), *part = tls_dial(d);
	const void *v;

	CHECK(!tls_small(idle, SMALL_REQ));
	CHECK(!tls_small(part, SMALL_REQ));
	CHECK_EQ(corio_stream_write(part, "GET /small.txt HTTP/1.1\r\n", 25), 25);
	CHECK_EQ(corio_stream_flush(part), 0);
	CHECK_EQ(kill(d->pid, SIGTERM), 0);
	d->idle_end = corio_stream_read_until(idle, '\n', 8192, &v);
	d->part_closed = tls_small(part, "Host: x\r\n\r\n");
	d->part_end = corio_stream_read_until(part, '\n', 8192, &v);
	corio_stream_close(idle);
	corio_stream_close(part);
}

Test(httpd, https_drain_closes_idle_connections_with_close_notify, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_tls_ctx_opts o = { .ca_file = ca_pem, .alpn = "http/1.1" };
	struct tdrain d = { 0 };

	d.pid = start_prog_tls(&d.port, "30", "1", true);
	cr_assert_eq(corio_tls_ctx_new(&o, &d.ctx), 0, "%s", corio_last_error());
	th_run(&cfg, tdrain_entry, &d);
	corio_tls_ctx_free(d.ctx);
	cr_assert_eq(d.idle_end, 0, "the idle connection's end: %zd", d.idle_end);
	cr_assert(d.part_closed, "the answer after the drain lacks Connection: close");
	cr_assert_eq(d.part_end, 0, "the answered connection's end: %zd", d.part_end);
	stop_prog(d.pid); /* already exiting: the status must be 0 */
}
