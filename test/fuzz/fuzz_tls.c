/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tls - the TLS record path at the BIO level, with no runtime: the
 * session's io calls read the input and drop the output, so each input
 * runs the same pump (tls/session.c) that serves sockets.
 *
 * The first byte picks the case:
 *  - even: the rest is what a client sent to a server session's
 *    handshake (corio__tls_handshake);
 *  - odd: a client and a server session finish a real handshake in
 *    memory, the client writes one valid record, and the rest of the input
 *    follows it into the server's reads (corio__tls_read).
 * Either must end in a result, 0 or -errno with a message, never a crash,
 * a leak or a hang (the io calls never wait: end of input is end of
 * stream).
 */
#include "tls/internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct corio_tls_ctx *srv, *cli;

struct input {
	const uint8_t *p;
	size_t left;
};

static ssize_t in_recv(void *arg, void *buf, size_t len)
{
	struct input *in = arg;
	size_t n = len < in->left ? len : in->left;

	/* in small pieces, so records are split at every offset over runs */
	if (n > 613)
		n = 613;
	memcpy(buf, in->p, n);
	in->p += n;
	in->left -= n;
	return (ssize_t)n;
}

static int out_drop(void *arg, const void *buf, size_t len, size_t *sent)
{
	*sent = len;
	return 0;
}

static int no_recv_called(void *arg, const void *buf, size_t len, size_t *sent)
{
	abort();
}

static void setup(void)
{
	char dir[] = "/tmp/corio-fuzz-tls-XXXXXX", pem[64], key[64], cmd[80];
	struct corio_tls_cert c = {pem, key};
	struct corio_tls_cert_gen g = {.cert_file = pem, .key_file = key, .names = "localhost"};
	struct corio_tls_ctx_opts so = {.flags = CORIO_TLS_SERVER, .certs = &c, .ncerts = 1,
					.alpn = "http/1.1"};
	struct corio_tls_ctx_opts co = {.flags = CORIO_TLS_NO_VERIFY, .alpn = "http/1.1"};

	if (!mkdtemp(dir))
		abort();
	snprintf(pem, sizeof(pem), "%s/c.pem", dir);
	snprintf(key, sizeof(key), "%s/c.key", dir);
	if (corio_tls_cert_generate(&g) || corio_tls_ctx_new(&so, &srv) ||
	    corio_tls_ctx_new(&co, &cli)) {
		fprintf(stderr, "fuzz_tls: %s\n", corio_last_error());
		abort();
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		abort();
}

/* Move what a's SSL wrote into b's input. */
static void shuttle(struct corio_tls *a, struct corio_tls *b)
{
	char *p, *q;
	int n, room;

	while ((n = BIO_nread0(a->net, &p)) > 0 && (room = BIO_nwrite0(b->net, &q)) > 0) {
		if (n > room)
			n = room;
		memcpy(q, p, (size_t)n);
		BIO_nread(a->net, &p, n);
		BIO_nwrite(b->net, &q, n);
	}
}

static void check(ssize_t r)
{
	if (r < 0 && r != -EPROTO && r != -ECONNABORTED && r != -EKEYREJECTED)
		abort(); /* only the documented TLS errors */
}

static void established(struct input *in)
{
	const struct corio__tls_io dead = {.send = no_recv_called};
	struct corio_tls *c, *s;
	char buf[4096];
	ssize_t r;

	if (corio__tls_new(srv, true, NULL, &dead, &s) || corio__tls_new(cli, false, "localhost", &dead, &c))
		abort();
	for (int i = 0; i < 10; i++) {
		int rc = SSL_do_handshake(c->ssl), rs = SSL_do_handshake(s->ssl);

		shuttle(c, s);
		shuttle(s, c);
		if (rc == 1 && rs == 1)
			break;
	}
	if (!SSL_is_init_finished(s->ssl) || SSL_write(c->ssl, "hello", 5) != 5)
		abort();
	shuttle(c, s);
	s->io = (struct corio__tls_io){.recv = in_recv, .send = out_drop, .arg = in};
	while ((r = corio__tls_read(s, buf, sizeof(buf))) > 0)
		;
	check(r);
	corio__tls_free(c);
	corio__tls_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = {data + 1, size ? size - 1 : 0};
	struct corio_tls *s;
	char buf[1024];

	if (!srv)
		setup();
	if (size && (data[0] & 1)) {
		established(&in);
		return 0;
	}
	const struct corio__tls_io io = {.recv = in_recv, .send = out_drop, .arg = &in};

	if (corio__tls_new(srv, true, NULL, &io, &s))
		abort();
	ssize_t r = corio__tls_handshake(s);

	check(r);
	if (r == 0)
		check(corio__tls_read(s, buf, sizeof(buf)));
	corio__tls_free(s);
	return 0;
}
