/* SPDX-License-Identifier: MIT */
/*
 * httpd - a static-file HTTP/1.1 server on corio's toolkit; docs/HTTPD.md
 * states what it serves and answers. httpd -d DIR [-p port] [-s shards]
 * [-i idle_s] [--tls-cert FILE --tls-key FILE] (HTTPS, ALPN http/1.1).
 * Each shard serves the one port with corio_serve (port 0 picks one for
 * all) and httpd.c answers each connection; SIGTERM / SIGINT (in
 * cfg.signals, which corio_start blocks in this thread too) start
 * corio_drain(2 s) (corio_drain_on_signal).
 */
#include "httpd.h"
#include "../../common/opt.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static struct httpd_conf conf;
static char addr[64];

static void ready(const struct sockaddr *a, socklen_t len, void *arg)
{
	char name[128];

	(void)arg;
	if (corio_shard_id() == 0 && corio_addr_format(a, len, name, sizeof(name)) >= 0) {
		printf("httpd: listening on %s\n", name);
		fflush(stdout);
	}
}

static void entry(void *arg)
{
	struct httpd_conf c = conf; /* this shard's: hs_class set here */

	(void)arg;
	if (c.hs_shares) {
		/* TLS handshakes in a class of their own (docs/SCHED.md): a
		 * storm of them takes hs_shares of every 100 + hs_shares of the
		 * CPU while requests have work, not all of it */
		struct corio_class_opts hs = { .name = "tls-handshake", .shares = c.hs_shares };
		int id = corio_class_create(&hs);

		c.hs_class = id > 0 ? (unsigned)id : 0;
	}
	if (corio_drain_on_signal(CORIO_SIG(SIGTERM) | CORIO_SIG(SIGINT), 2000000000ull) == 0)
		httpd_serve(&c, addr, ready); /* returns once the drain is over */
}

int main(int argc, char **argv)
{
	const char *dir = NULL;
	unsigned port = 8080, shards = 1, idle_s = 5;
	struct corio_tls_cert pem = { 0 };
	struct corio_tls_ctx_opts tls = { .flags = CORIO_TLS_SERVER, .certs = &pem, .ncerts = 1,
					  .alpn = "http/1.1", .out_buf = 72 << 10 }; /* docs/HTTPD.md */
	struct corio_config cfg;
	int ret;
	const struct tool_opt table[] = {
		{ TOOL_OPT_STRING(NULL, 'd', dir, "dir", "the directory to serve"), .required = 1 },
		{ TOOL_OPT_COUNT(NULL, 'p', port, 0, 65535, "port",
				 "port on 127.0.0.1 (8080; 0: pick one, printed)") },
		{ TOOL_OPT_COUNT(NULL, 's', shards, 1, 1024, "shards", "shards (threads) (1)") },
		{ TOOL_OPT_COUNT(NULL, 'i', idle_s, 0, 1000000, "seconds",
				 "deadline for a handshake or a request head, idle keep-alive "
				 "included (5; 0: none)") },
		{ TOOL_OPT_STRING("tls-cert", 0, pem.cert_file, "FILE",
				  "serve HTTPS: the certificate chain (PEM)") },
		{ TOOL_OPT_STRING("tls-key", 0, pem.key_file, "FILE", "its private key (PEM)") },
		{ TOOL_OPT_COUNT("hs-shares", 0, conf.hs_shares, 0, 10000, "N",
				 "TLS handshakes run in the class tls-handshake with N shares "
				 "against the requests' 100 (25; 0: in the requests' class)") },
		{ 0 },
	};
	const struct tool_cli cli = { "httpd", "-d DIR [-p port] [-s shards] [-i idle_s] "
				      "[--tls-cert FILE --tls-key FILE] [--hs-shares N]",
				      "Drains and exits on SIGINT or SIGTERM.\n", table };

	conf.hs_shares = 25;
	if ((ret = tool_opt_parse(&cli, argc, argv)))
		return ret > 0 ? 0 : 2;
	if (!pem.cert_file != !pem.key_file ||
	    (pem.cert_file && corio_tls_ctx_new(&tls, &conf.tls) < 0)) {
		fprintf(stderr, "httpd: %s\n", !pem.cert_file != !pem.key_file
				? "--tls-cert and --tls-key go together" : corio_last_error());
		return 2;
	}
	conf.idle_ns = idle_s * 1000000000ull;
	if ((conf.dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "httpd: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	corio_config_init(&cfg);
	cfg.shards = shards;
	cfg.flags |= CORIO_F_NO_PIN;
	cfg.signals = CORIO_SIG(SIGTERM) | CORIO_SIG(SIGINT);
	if ((ret = corio_run(&cfg, entry, NULL)) < 0)
		fprintf(stderr, "httpd: %s\n", corio_last_error());
	corio_tls_ctx_free(conf.tls);
	return ret < 0 ? 1 : 0;
}
