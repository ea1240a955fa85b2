/* SPDX-License-Identifier: MIT */
/*
 * httpd - a static-file HTTP/1.1 server on corio's toolkit, in one page.
 *
 *	httpd -d DIR [-p port] [-s shards] [-i idle_s]
 *
 * What it serves (see docs/HTTPD.md):
 *  - GET and HEAD of the regular files under DIR, with Content-Type by
 *    extension, Content-Length and Date; a directory serves its index.html.
 *    Other methods get 405 with Allow: GET, HEAD.
 *  - Keep-alive (HTTP/1.1, or 1.0 with Connection: keep-alive) and
 *    pipelining: answers in order, gathered into one send while requests
 *    are buffered (the stream's AUTOFLUSH), file bodies by corio_sendfile.
 *  - Paths never leave DIR: ".." segments and symbolic links (anywhere in
 *    the path, even ones pointing inside) get 403; missing files 404.
 *  - 400 for a bad request line, header or %-escape; 413 for a request
 *    with a body (Content-Length > 0 or Transfer-Encoding: none is read);
 *    431 for a head over 8 KiB; 408 when a head has begun but is not
 *    complete within -i seconds (a connection with nothing sent is closed
 *    quietly). These answers close the connection.
 *  - SIGTERM / SIGINT drain (2 s): listeners close, idle keep-alive
 *    connections close at once, a request already received (or arriving
 *    in part) is answered with Connection: close, responses being sent
 *    finish; then the process exits 0.
 *
 * How it is built: each shard listens on the one port in cfg.setup
 * (corio_tcp_listen_shared: port 0 picks one for all), serves its
 * connections in a fiber group (httpd.c), and a fiber on shard 0 turns the
 * signals of cfg.signals into corio_drain().
 */
#include "httpd.h"
#include "../../common/opt.h" /* the tools' option parser */

#include <corio/net.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct httpd_server *srv; /* one per shard */
static char addr[64];

static int setup(void *arg)
{
	(void)arg;
	return corio_tcp_listen_shared(addr, NULL, &srv[corio_shard_id()].l);
}

static int on_signal(void *arg)
{
	int signo;

	(void)arg;
	if (corio_signal_wait(CORIO_SIG(SIGTERM) | CORIO_SIG(SIGINT), &signo) == 0)
		corio_drain(2000000000ull);
	return 0;
}

static void entry(void *arg)
{
	struct httpd_server *s = &srv[corio_shard_id()];
	struct sockaddr_storage ss;
	socklen_t len;
	char name[128];

	(void)arg;
	if (corio_shard_id() == 0) {
		if (corio_listener_addr(s->l, &ss, &len) == 0 &&
		    corio_addr_format((struct sockaddr *)&ss, len, name, sizeof(name)) >= 0)
			printf("httpd: listening on %s\n", name);
		fflush(stdout);
		if (corio_spawn(on_signal, NULL, NULL, NULL) < 0)
			corio_shutdown();
	}
	httpd_serve(s);
}

int main(int argc, char **argv)
{
	struct corio_config cfg;
	const char *dir = NULL;
	unsigned port = 8080, shards = 1, idle_s = 5;
	sigset_t set;
	int fd, ret;
	const struct tool_opt table[] = {
		{ TOOL_OPT_STRING(NULL, 'd', dir, "dir", "the directory to serve"), .required = 1 },
		{ TOOL_OPT_COUNT(NULL, 'p', port, 0, 65535, "port",
				 "TCP port on 127.0.0.1 (8080; 0: pick one and print it)") },
		{ TOOL_OPT_COUNT(NULL, 's', shards, 1, 1024, "shards", "shards (threads) (1)") },
		{ TOOL_OPT_COUNT(NULL, 'i', idle_s, 0, 1000000, "seconds",
				 "deadline for a request head, idle keep-alive included (5; 0: none)") },
		{ 0 },
	};
	const struct tool_cli cli = { "httpd", "-d DIR [-p port] [-s shards] [-i idle_s]",
				      "Drains and exits on SIGINT or SIGTERM.\n", table };

	ret = tool_opt_parse(&cli, argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	srv = calloc(shards, sizeof(*srv));
	if (fd < 0 || !srv) {
		fprintf(stderr, "httpd: %s: %s\n", dir, fd < 0 ? strerror(errno) : "no memory");
		return 1;
	}
	for (unsigned i = 0; i < shards; i++)
		srv[i] = (struct httpd_server){ .dir = fd, .idle_ns = idle_s * 1000000000ull };
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	/* cfg.signals: blocked here before any thread exists, read by shard 0 */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	corio_config_init(&cfg);
	cfg.shards = shards;
	cfg.flags |= CORIO_F_NO_PIN;
	cfg.setup = setup;
	cfg.signals = CORIO_SIG(SIGTERM) | CORIO_SIG(SIGINT);
	ret = corio_run(&cfg, entry, NULL);
	if (ret < 0)
		fprintf(stderr, "httpd: %s\n", corio_last_error());
	return ret < 0 ? 1 : 0;
}
