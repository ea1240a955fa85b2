/* SPDX-License-Identifier: MIT */
/*
 * https-get - fetch one URL over HTTPS with verification, on corio's
 * public API (docs/corio-https-get.md):
 *
 *	corio-https-get [--cafile F] [--insecure] [-t secs] https://host[:port]/path
 *
 * It connects by host name (corio_tcp_connect resolves it), sends the name
 * as SNI and verifies the certificate chain (the system store, or
 * --cafile) and the name, offers ALPN http/1.1, sends a GET with
 * Connection: close and writes the body to stdout. Exit status: 0 for a
 * 2xx answer, 1 for another status (its body is still written), 2 for a
 * bad command line or a CA file that does not load, 3 when the fetch
 * failed (connection, TLS, verification, a malformed or cut response),
 * with the reason on stderr.
 *
 * The files: main.c (this one: options, the runtime), get.h and get.c (the
 * URL, the request and the response, in one fiber).
 */
#include "get.h"
#include "../../common/opt.h"

#include <stdio.h>
#include <string.h>

static void entry(void *arg)
{
	struct get_req *r = arg;

	if (get_fetch(r) < 0)
		r->status = -1;
	fflush(r->out);
}

int main(int argc, char **argv)
{
	static struct get_req r; /* 2 KiB of path and more: not on the stack */
	const char *url = NULL, *cafile = NULL, *why = NULL;
	int insecure = 0, ret;
	double timeout_s = 30;
	struct corio_tls_ctx_opts to = { .alpn = "http/1.1" };
	struct corio_config cfg;
	const struct tool_opt table[] = {
		{ TOOL_OPT_STRING("cafile", 0, cafile, "FILE",
				  "trusted CAs, PEM (default: the system store)") },
		{ TOOL_OPT_FLAG("insecure", 'k', insecure,
				"accept any certificate and name (anyone can impersonate)") },
		{ TOOL_OPT_SECONDS("timeout", 't', timeout_s, 0.001, 86400, "SECS",
				   "for the whole fetch (30)") },
		{ TOOL_OPT_STRING(NULL, 0, url, "URL", "https://host[:port][/path]"), .required = 1 },
		{ 0 },
	};
	const struct tool_cli cli = {
		"corio-https-get", "[--cafile FILE] [--insecure] [-t SECS] https://host[:port]/path",
		"Writes the body to stdout. Exit status: 0 (2xx), 1 (another status),\n"
		"2 (usage, CA file), 3 (the fetch failed: the reason on stderr).\n", table };

	if ((ret = tool_opt_parse(&cli, argc, argv)))
		return ret > 0 ? 0 : 2;
	if (get_url_parse(url, &r.url, &why) < 0) {
		fprintf(stderr, "corio-https-get: %s: %s\n", url, why);
		return 2;
	}
	to.ca_file = cafile;
	to.flags = insecure ? CORIO_TLS_NO_VERIFY : 0;
	if (corio_tls_ctx_new(&to, &r.ctx) < 0) {
		fprintf(stderr, "corio-https-get: %s\n", corio_last_error());
		return 2;
	}
	r.timeout_ns = (uint64_t)(timeout_s * 1e9);
	r.out = stdout;
	corio_config_init(&cfg);
	cfg.shards = 1;
	cfg.flags |= CORIO_F_NO_PIN;
	if ((ret = corio_run(&cfg, entry, &r)) < 0)
		fprintf(stderr, "corio-https-get: %s\n", corio_last_error());
	else if (r.status < 0)
		fprintf(stderr, "corio-https-get: %s\n", r.err);
	else if (r.status < 200 || r.status > 299)
		fprintf(stderr, "corio-https-get: HTTP status %d\n", r.status);
	corio_tls_ctx_free(r.ctx);
	return ret < 0 || r.status < 0 ? 3 : r.status < 200 || r.status > 299 ? 1 : 0;
}
