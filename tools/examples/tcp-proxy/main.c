/* SPDX-License-Identifier: MIT */
/*
 * tcp-proxy - a TCP load balancer on corio's public API:
 *
 *	tcp-proxy -l 127.0.0.1:8000 -u app1:9000 -u app2:9000 [-b rr|least]
 *	          [-s shards] [-c check_ms] [-i idle_s]
 *
 * Every shard serves the listen address (corio_serve: one port, a fiber per
 * connection). Each connection goes to an upstream, given by name or
 * number: round robin, or the one with the fewest connections this shard
 * has open to it (least), among those the last health check found up (all
 * of them when none is). A connect that fails marks the upstream down and
 * the next one is tried. Bytes then flow both ways with corio_copy_bidi
 * (splice between the two sockets, no copy through user space), a
 * half-close carried through, a reset ending both, -i idle seconds ending a
 * silent pair. A health-check fiber per shard connects to every upstream
 * every check_ms. SIGTERM or SIGINT drains: accepting stops, connections
 * under way finish (2 s at most), the process exits 0.
 */
#include "../../common/opt.h"

#include <corio.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_UP 32
#define MAX_SHARDS 256

struct upstream {
	const char *addr; /* "host:port", a name or a number */
	/* per shard: no lock, each shard writes only its own */
	unsigned char up[MAX_SHARDS]; /* the last check's verdict (1: up) */
	unsigned active[MAX_SHARDS];  /* connections open to it from this shard */
};

static struct {
	const char *listen;
	struct upstream up[MAX_UP];
	unsigned nup;
	int least;
	unsigned shards, check_ms, idle_s;
	unsigned rr[MAX_SHARDS]; /* per shard: the next round-robin pick */
} cfg_;

static int add_upstream(const char *label, const char *value, void *to)
{
	(void)to;
	if (cfg_.nup == MAX_UP) {
		fprintf(stderr, "tcp-proxy: %s: at most %d upstreams\n", label, MAX_UP);
		return -EINVAL;
	}
	if (!strrchr(value, ':')) {
		fprintf(stderr, "tcp-proxy: %s %s: expected host:port\n", label, value);
		return -EINVAL;
	}
	cfg_.up[cfg_.nup++].addr = value;
	return 0;
}

/* Is upstream i eligible on shard me: up, or every upstream is down. */
static int eligible(unsigned i, unsigned me, int any_up)
{
	return !any_up || cfg_.up[i].up[me];
}

/* The next upstream to try, skipping those in tried (a bit set). */
static int pick(unsigned me, unsigned tried)
{
	int any_up = 0, best = -1;

	for (unsigned i = 0; i < cfg_.nup; i++)
		any_up |= cfg_.up[i].up[me] && !(tried >> i & 1);
	if (cfg_.least) {
		for (unsigned k = 0; k < cfg_.nup; k++) { /* ties: rotate */
			unsigned i = (cfg_.rr[me] + k) % cfg_.nup;

			if (!(tried >> i & 1) && eligible(i, me, any_up) &&
			    (best < 0 || cfg_.up[i].active[me] < cfg_.up[best].active[me]))
				best = (int)i;
		}
		cfg_.rr[me]++;
		return best;
	}
	for (unsigned k = 0; k < cfg_.nup; k++) {
		unsigned i = cfg_.rr[me]++ % cfg_.nup;

		if (!(tried >> i & 1) && eligible(i, me, any_up))
			return (int)i;
	}
	return -1;
}

/* One client connection: an upstream, then bytes both ways. */
static int handle(struct corio_conn *c)
{
	struct corio_copy_opts co = { .idle_ns = cfg_.idle_s * 1000000000ull };
	unsigned me = c->shard, tried = 0;
	struct corio_sock *up = NULL;
	int i = -1;

	while (!up && (i = pick(me, tried)) >= 0) {
		struct corio_deadline d;
		int ret;

		tried |= 1u << i;
		corio_timeout_push(&d, 2000000000ull); /* a connect: 2 s */
		ret = corio_tcp_connect(cfg_.up[i].addr, &up);
		corio_deadline_pop(&d);
		if (ret < 0) {
			cfg_.up[i].up[me] = 0; /* down until the next check says up */
			up = NULL;
		}
	}
	if (!up)
		return 0; /* nobody answers: corio_serve closes the client */
	cfg_.up[i].active[me]++;
	corio_copy_bidi(c->sock, up, &co, NULL);
	cfg_.up[i].active[me]--;
	corio_close(up);
	return 0;
}

/* Every check_ms: can each upstream be connected to? Until the drain. */
static int checker(void *arg)
{
	unsigned me = corio_shard_id();

	(void)arg;
	for (;;) {
		struct corio_deadline d;
		int ret;

		for (unsigned i = 0; i < cfg_.nup && !corio_draining(); i++) {
			struct corio_sock *s = NULL;

			corio_timeout_push(&d, 1000000000ull);
			ret = corio_tcp_connect(cfg_.up[i].addr, &s);
			corio_deadline_pop(&d);
			cfg_.up[i].up[me] = ret == 0;
			if (s)
				corio_close(s);
			if (ret == -ECANCELED)
				return 0;
		}
		corio_timeout_push(&d, cfg_.check_ms * 1000000ull);
		ret = corio_event_wait(corio_drain_event());
		corio_deadline_pop(&d);
		if (ret != -ETIMEDOUT)
			return 0; /* the drain, or cancelled */
	}
}

static void ready(const struct sockaddr *a, socklen_t len, void *arg)
{
	char name[128];

	(void)arg;
	if (corio_shard_id() == 0 && corio_addr_format(a, len, name, sizeof(name)) >= 0) {
		printf("tcp-proxy: listening on %s (%u shards, %u upstreams)\n", name,
		       corio_shard_count(), cfg_.nup);
		fflush(stdout);
	}
}

static void entry(void *arg)
{
	struct corio_serve_opts so = { .ready = ready, .drain_ns = 2000000000ull };
	struct corio_fiber *chk = NULL;
	unsigned me = corio_shard_id();
	int ret;

	(void)arg;
	for (unsigned i = 0; i < cfg_.nup; i++)
		cfg_.up[i].up[me] = 1; /* until the first check says otherwise */
	cfg_.rr[me] = me; /* shards start their rounds at different upstreams */
	if (cfg_.check_ms)
		corio_spawn(checker, NULL, NULL, &chk);
	ret = corio_drain_on_signal(CORIO_SIG(SIGTERM) | CORIO_SIG(SIGINT), 3000000000ull);
	if (ret == 0)
		ret = corio_serve(cfg_.listen, handle, NULL, &so);
	if (ret < 0 && ret != -ECANCELED) {
		fprintf(stderr, "tcp-proxy: %s: %s\n", cfg_.listen, corio_last_error());
		corio_shutdown();
	}
	if (chk) {
		corio_cancel(chk);
		corio_join(chk, NULL);
	}
}

int main(int argc, char **argv)
{
	static const char *const balance[] = { "rr", "least", NULL };
	struct corio_config cfg;
	int ret;
	const struct tool_opt table[] = {
		{ TOOL_OPT_STRING(NULL, 'l', cfg_.listen, "host:port",
				  "address to listen on (127.0.0.1:8000; port 0: pick one)") },
		{ TOOL_OPT_CALL(NULL, 'u', add_upstream, NULL, "host:port",
				"an upstream, by name or number (repeat: up to 32)"), .required = 1 },
		{ TOOL_OPT_CHOICE(NULL, 'b', cfg_.least, balance, "rr|least",
				  "round robin (rr) or fewest connections (least)") },
		{ TOOL_OPT_COUNT(NULL, 's', cfg_.shards, 1, MAX_SHARDS, "shards", "shards (1)") },
		{ TOOL_OPT_COUNT(NULL, 'c', cfg_.check_ms, 0, 3600000, "ms",
				 "health-check interval (1000; 0: none)") },
		{ TOOL_OPT_COUNT(NULL, 'i', cfg_.idle_s, 0, 86400, "seconds",
				 "end a pair silent this long (0: never)") },
		{ 0 },
	};
	const struct tool_cli cli = { "tcp-proxy", "-u host:port [-u ...] [-l host:port] "
				      "[-b rr|least] [-s shards] [-c check_ms] [-i idle_s]",
				      "Drains and exits on SIGINT or SIGTERM.\n", table };

	cfg_.listen = "127.0.0.1:8000";
	cfg_.shards = 1;
	cfg_.check_ms = 1000;
	if ((ret = tool_opt_parse(&cli, argc, argv)))
		return ret > 0 ? 0 : 2;
	corio_config_init(&cfg);
	cfg.shards = cfg_.shards;
	cfg.signals = CORIO_SIG(SIGTERM) | CORIO_SIG(SIGINT);
	if ((ret = corio_run(&cfg, entry, NULL)) < 0)
		fprintf(stderr, "tcp-proxy: %s\n", corio_last_error());
	return ret < 0 ? 1 : 0;
}
