/* SPDX-License-Identifier: MIT */
/*
 * bench-tls - full TLS 1.3 handshakes (no resumption) on loopback: a server
 * shard accepts, a client shard connects, per certificate type (ECDSA
 * P-256, RSA-2048). Prints handshakes/s, the server shard's CPU per
 * handshake (its thread's CPU time, kernel included, from corio_stats) and
 * its longest loop turn (turn_max_ns, as corio_stats counts it) and
 * how many turns the stall detector counted (over cfg.stall_ns, 10 ms, of
 * CPU time): the handshake's crypto runs on the shard, so a signature that
 * stalled it would show in that last column.
 *
 * Usage: bench-tls [HANDSHAKES]   (per key type; default 400)
 */
#include <corio.h>

#include "common/backend.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

struct run {
	struct corio_tls_ctx *srv, *cli;
	unsigned n;
	char addr[64];
	struct corio_listener *l;
	_Atomic int ready;
	int failed;
	uint64_t t0, t1, cpu0, cpu1, turn_max, stalls0, stalls1;
};

static uint64_t shard_cpu(unsigned shard, uint64_t *turn_max, uint64_t *stalls)
{
	struct corio_stats st;

	if (corio_stats_get(NULL, shard, &st) != 0)
		return 0;
	if (turn_max)
		*turn_max = st.turn_max_ns;
	*stalls = st.stalls;
	return st.cpu_ns;
}

static void server(struct run *r)
{
	struct sockaddr_storage a;
	socklen_t alen = sizeof(a);
	char b;

	if (corio_tcp_listen("127.0.0.1:0", NULL, &r->l) || corio_listener_addr(r->l, &a, &alen)) {
		r->failed = 1;
		return;
	}
	corio_addr_format((struct sockaddr *)&a, alen, r->addr, sizeof(r->addr));
	atomic_store(&r->ready, 1);
	for (unsigned i = 0; i < r->n; i++) {
		struct corio_sock *s;
		struct corio_tls *t;

		if (corio_accept(r->l, &s))
			break;
		if (i == 1) { /* the first one warms up */
			r->cpu0 = shard_cpu(0, NULL, &r->stalls0);
			r->t0 = corio_now_ns();
		}
		if (corio_tls_accept(r->srv, s, &t) == 0) {
			if (corio_tls_read(t, &b, 1) != 1)
				r->failed = 1;
			corio_tls_close(t);
		} else {
			r->failed = 1;
		}
		corio_close(s);
	}
	r->t1 = corio_now_ns();
	r->cpu1 = shard_cpu(0, &r->turn_max, &r->stalls1);
	corio_listener_close(r->l);
}

static void client(struct run *r)
{
	while (!atomic_load(&r->ready) && !r->failed)
		corio_sleep_ns(100000);
	for (unsigned i = 0; i < r->n && !r->failed; i++) {
		struct corio_sock *s;
		struct corio_tls *t;

		if (corio_tcp_connect(r->addr, &s)) {
			r->failed = 1;
			break;
		}
		if (corio_tls_connect(r->cli, s, "localhost", &t) == 0) {
			corio_tls_write(t, "x", 1);
			corio_tls_close(t);
		} else {
			fprintf(stderr, "bench-tls: %s\n", corio_last_error());
			r->failed = 1;
		}
		corio_close(s);
	}
}

static void entry(void *arg)
{
	if (corio_shard_id() == 0)
		server(arg);
	else
		client(arg);
}

static int one(const char *dir, unsigned key_type, const char *name, unsigned n)
{
	char ca[128], cak[128], pem[128], key[128];
	struct corio_tls_cert_gen g = {.cert_file = ca, .key_file = cak, .names = "bench CA",
				       .key_type = key_type, .flags = CORIO_TLS_GEN_CA};
	struct corio_tls_cert c = {pem, key};
	struct corio_tls_ctx_opts so = {.flags = CORIO_TLS_SERVER | CORIO_TLS_NO_TICKETS,
					.certs = &c, .ncerts = 1};
	struct corio_tls_ctx_opts co = {.flags = CORIO_TLS_NO_TICKETS, .ca_file = ca};
	struct corio_config cfg;
	struct run r = {.n = n + 1};

	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	snprintf(cak, sizeof(cak), "%s/ca.key", dir);
	snprintf(pem, sizeof(pem), "%s/srv.pem", dir);
	snprintf(key, sizeof(key), "%s/srv.key", dir);
	if (corio_tls_cert_generate(&g))
		goto fail;
	g = (struct corio_tls_cert_gen){.cert_file = pem, .key_file = key, .names = "localhost",
					.key_type = key_type, .ca_cert_file = ca, .ca_key_file = cak};
	if (corio_tls_cert_generate(&g) || corio_tls_ctx_new(&so, &r.srv) ||
	    corio_tls_ctx_new(&co, &r.cli))
		goto fail;
	corio_config_init(&cfg);
	cfg.shards = 2;
	if (corio_run(&cfg, entry, &r) || r.failed) {
		fprintf(stderr, "bench-tls: %s: the run failed: %s\n", name, corio_last_error());
		return 1;
	}
	double secs = (double)(r.t1 - r.t0) / 1e9;

	printf("%-10s %8u %12.0f %14.1f %16.2f %12llu\n", name, n, n / secs,
	       (double)(r.cpu1 - r.cpu0) / n / 1000.0, (double)r.turn_max / 1e6,
	       (unsigned long long)(r.stalls1 - r.stalls0));
	corio_tls_ctx_free(r.srv);
	corio_tls_ctx_free(r.cli);
	return 0;
fail:
	fprintf(stderr, "bench-tls: %s: %s\n", name, corio_last_error());
	return 1;
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 400;
	char dir[] = "/tmp/corio-bench-tls-XXXXXX", cmd[64];
	struct utsname u;
	int ret;

	if (n == 0 || n > 1000000 || !mkdtemp(dir)) {
		fprintf(stderr, "usage: bench-tls [HANDSHAKES]\n");
		return 2;
	}
	uname(&u);
	printf("bench-tls: server shard 0, client shard 1 (CPUs of %ld), backend %s, kernel %s, "
	       "%s, TLS 1.3 full handshakes (no tickets), kTLS ULP %s\n",
	       sysconf(_SC_NPROCESSORS_ONLN), tool_backend(), u.release, OpenSSL_version(OPENSSL_VERSION),
	       corio_tls_ktls_probe() == 1 ? "present" : "absent");
	printf("%-10s %8s %12s %14s %16s %12s\n", "key", "n", "handshakes/s", "server us/hs",
	       "longest turn ms", "CPU stalls");
	ret = one(dir, CORIO_TLS_KEY_EC_P256, "ECDSA-256", n) |
	      one(dir, CORIO_TLS_KEY_RSA2048, "RSA-2048", n);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-tls: could not remove %s\n", dir);
	return ret;
}
