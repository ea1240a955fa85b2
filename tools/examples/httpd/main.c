/* SPDX-License-Identifier: MIT */
/*
 * httpd - a static-file HTTP/1.1 server on corio's toolkit; docs/HTTPD.md
 * states what it serves and answers. httpd -d DIR [-p port] [-s shards] [-i idle_s]
 * Each shard listens on the one port in cfg.setup (corio_tcp_listen_shared:
 * port 0 picks one for all) and serves in httpd.c; a fiber on shard 0 turns
 * SIGTERM / SIGINT (cfg.signals) into corio_drain(2 s).
 */
#include "httpd.h"
#include "../../common/opt.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	struct sockaddr_storage ss;
	socklen_t len;
	char name[128];

	if (corio_shard_id() == 0) {
		if (corio_listener_addr(srv[0].l, &ss, &len) == 0 &&
		    corio_addr_format((struct sockaddr *)&ss, len, name, sizeof(name)) >= 0)
			printf("httpd: listening on %s\n", name);
		fflush(stdout);
		if (corio_spawn(on_signal, arg, NULL, NULL) < 0)
			corio_shutdown();
	}
	httpd_serve(&srv[corio_shard_id()]);
}

int main(int argc, char **argv)
{
	const char *dir = NULL;
	unsigned port = 8080, shards = 1, idle_s = 5;
	struct corio_config cfg;
	sigset_t set;
	int fd, ret;
	const struct tool_opt table[] = {
		{ TOOL_OPT_STRING(NULL, 'd', dir, "dir", "the directory to serve"), .required = 1 },
		{ TOOL_OPT_COUNT(NULL, 'p', port, 0, 65535, "port",
				 "port on 127.0.0.1 (8080; 0: pick one, printed)") },
		{ TOOL_OPT_COUNT(NULL, 's', shards, 1, 1024, "shards", "shards (threads) (1)") },
		{ TOOL_OPT_COUNT(NULL, 'i', idle_s, 0, 1000000, "seconds",
				 "deadline for a request head, idle keep-alive included (5; 0: none)") },
		{ 0 },
	};
	const struct tool_cli cli = { "httpd", "-d DIR [-p port] [-s shards] [-i idle_s]",
				      "Drains and exits on SIGINT or SIGTERM.\n", table };

	if ((ret = tool_opt_parse(&cli, argc, argv)))
		return ret > 0 ? 0 : 2;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	srv = calloc(shards, sizeof(*srv));
	if (fd < 0 || !srv) {
		fprintf(stderr, "httpd: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	for (unsigned i = 0; i < shards; i++)
		srv[i] = (struct httpd_server){ .dir = fd, .idle_ns = idle_s * 1000000000ull };
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	sigemptyset(&set); /* cfg.signals: blocked before any thread exists */
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	corio_config_init(&cfg);
	cfg.shards = shards;
	cfg.flags |= CORIO_F_NO_PIN;
	cfg.setup = setup;
	cfg.signals = CORIO_SIG(SIGTERM) | CORIO_SIG(SIGINT);
	if ((ret = corio_run(&cfg, entry, NULL)) < 0)
		fprintf(stderr, "httpd: %s\n", corio_last_error());
	return ret < 0 ? 1 : 0;
}
