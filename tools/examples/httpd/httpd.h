/* SPDX-License-Identifier: MIT */
/*
 * tools/examples/httpd/httpd.h - the static-file HTTP/1.1 server of
 * tools/examples/httpd, one struct httpd_server per shard. main.c's
 * opening comment states what it serves and how; httpd.c is the code.
 */
#ifndef HTTPD_HTTPD_H
#define HTTPD_HTTPD_H

#include <corio.h>

#include <stdint.h>

#define HTTPD_HEAD_MAX 8192 /* a request head longer than this gets 431 */

struct httpd_server {
	struct corio_listener *l; /* this shard's listener (corio_tcp_listen_shared) */
	int dir;                  /* the served directory (an O_DIRECTORY fd)    */
	uint64_t idle_ns;         /* deadline for the next request head (0: none) */
	struct corio_group conns;
};

/* Accept on srv->l and serve each connection in a fiber of srv->conns. When
 * corio_drain() reaches the shard (accept: -ESHUTDOWN), wait for the
 * connections to finish; when the fiber is cancelled, cancel them. Then
 * close the listener. Returns the accept error that ended it. Blocking. */
int httpd_serve(struct httpd_server *srv);

#endif
