/* SPDX-License-Identifier: MIT */
/*
 * test_httpd.c - tools/examples/httpd, the built program as a child
 * process: curl (a real client) for files, HEAD, errors, path escapes and
 * keep-alive; raw sockets for pipelining and the malformed, oversized and
 * slow heads; and the drain: 500 keep-alive connections, idle and busy,
 * then SIGTERM.
 */
#include "helpers.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* The program; HTTPD_PROG names another build of it (a sanitizer's). */
#define PROG (getenv("HTTPD_PROG") ? getenv("HTTPD_PROG") : "build/tools/examples/httpd")
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

static pid_t start_prog(int *port, const char *idle, const char *shards)
{
	int pfd[2];
	pid_t pid;
	char line[256] = { 0 };
	size_t got = 0;

	if (access(PROG, X_OK) != 0)
		cr_skip_test("%s is not built (make tools)", PROG);
	make_tree();
	cr_assert_eq(pipe(pfd), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		execl(PROG, PROG, "-d", www, "-p", "0", "-i", idle, "-s", shards, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
		ssize_t r = read(pfd[0], line + got, sizeof(line) - 1 - got);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(pfd[0]);
	cr_assert(sscanf(line, "httpd: listening on 127.0.0.1:%d", port) == 1, "no port in '%s'",
		  line);
	return pid;
}

/* SIGTERM, and the exit status within a bounded wait: it must be 0. */
static void stop_prog(pid_t pid)
{
	int status = 0;

	cr_assert_eq(kill(pid, SIGTERM), 0);
	for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(10000);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
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

/* Read exactly n bytes. */
static void read_n(int fd, char *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, buf + got, n - got);

		cr_assert(r > 0, "read: %zd after %zu of %zu", r, got, n);
		got += (size_t)r;
	}
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

static void run(const char *cmd, char *out, size_t cap)
{
	FILE *p = popen(cmd, "r");
	size_t n;

	cr_assert(p);
	n = fread(out, 1, cap - 1, p);
	out[n] = '\0';
	pclose(p);
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
	cr_assert_eq(system(cmd), 0);
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
		read_n(slow[i], buf, 4096); /* the response has begun */
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
