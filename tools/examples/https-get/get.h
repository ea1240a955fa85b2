/* SPDX-License-Identifier: MIT */
/* tools/examples/https-get/get.h - one HTTPS GET (docs/corio-https-get.md). */
#ifndef HTTPS_GET_GET_H
#define HTTPS_GET_GET_H

#include <corio.h>

#include <stdio.h>

/* https://host[:port][/path]: host as given ("[::1]" keeps its brackets in
 * addr and the Host header, not in name, which SNI and verification use). */
struct get_url {
	char name[256];  /* the host to verify: a DNS name or an IP literal */
	char addr[300];  /* "host:port" for corio_tcp_connect               */
	char host[300];  /* the Host header: host, and :port when not 443   */
	char path[2048]; /* "/" when the URL has none                        */
};

/* Parse url into u: 0, or -EINVAL with the reason in *why. */
int get_url_parse(const char *url, struct get_url *u, const char **why);

struct get_req {
	struct get_url url;
	struct corio_tls_ctx *ctx; /* a client context (ALPN http/1.1)    */
	uint64_t timeout_ns;       /* for the whole fetch                 */
	FILE *out;                 /* where the body goes                 */
	int status;                /* out: the HTTP status                */
	char err[512];             /* out: why the fetch failed           */
};

/* Connect, handshake (SNI, verification unless the context says not), send
 * the GET with Connection: close, write the body to r->out (by
 * Content-Length, chunked, or to the end of the stream). 0 with r->status,
 * or -errno with the reason in r->err. Blocking; in a fiber. */
int get_fetch(struct get_req *r);

#endif
