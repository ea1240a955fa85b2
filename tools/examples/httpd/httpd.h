/* SPDX-License-Identifier: MIT */
/* tools/examples/httpd/httpd.h - one shard's server (docs/HTTPD.md). */
#ifndef HTTPD_HTTPD_H
#define HTTPD_HTTPD_H

#include <corio.h>

#define HTTPD_HEAD_MAX 8192 /* a longer request head gets 431 */

struct httpd_server {
	struct corio_listener *l; /* this shard's (corio_tcp_listen_shared) */
	int dir;                  /* the served directory (O_DIRECTORY fd)  */
	uint64_t idle_ns;         /* deadline for a request head (0: none)  */
	struct corio_group conns;
};

/* Serve srv->l's connections, each in a fiber of srv->conns, until the drain
 * (accept: -ESHUTDOWN; then let them finish) or cancellation (cancel them);
 * close the listener. Returns the accept error that ended it. Blocking. */
int httpd_serve(struct httpd_server *srv);

#endif
