/* SPDX-License-Identifier: MIT */
/* tools/examples/httpd/httpd.h - one shard's server (docs/HTTPD.md). */
#ifndef HTTPD_HTTPD_H
#define HTTPD_HTTPD_H

#include <corio.h>

#define HTTPD_HEAD_MAX 8192 /* a longer request head gets 431 */

struct httpd_conf {
	int dir;                   /* the served directory (O_DIRECTORY fd) */
	struct corio_tls_ctx *tls; /* HTTPS (shared by every shard), or NULL */
	uint64_t idle_ns;          /* deadline for a handshake or a request head (0: none) */
};

/* Serve l's connections, each in a fiber of a group, until the drain
 * (accept: -ESHUTDOWN; then let them finish) or cancellation (cancel them);
 * close l. Returns the accept error that ended it. Blocking. */
int httpd_serve(const struct httpd_conf *conf, struct corio_listener *l);

#endif
