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
	unsigned hs_shares;        /* the TLS handshakes' class's shares (0: no class) */
	unsigned hs_class;         /* its id, per runtime (set by each shard's entry) */
};

/* Serve addr on this shard with corio_serve (every shard that calls it
 * shares the port) until the drain is over; ready(addr, len, conf) once
 * it listens. Returns corio_serve's result. Blocking. */
int httpd_serve(const struct httpd_conf *conf, const char *addr,
		void (*ready)(const struct sockaddr *a, socklen_t len, void *arg));
#endif
