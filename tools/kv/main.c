/* SPDX-License-Identifier: MIT */
/*
 * corio-kv - an in-memory key-value server that speaks Redis's protocol
 * (RESP2, RESP3 after HELLO 3, and inline commands), sharded thread-per-core
 * on corio's public API. Unmodified redis-cli and redis-benchmark talk to it.
 *
 *	corio-kv [-p port] [-b host] [-n shards] [--maxmemory BYTES] ...
 *	redis-cli -p 6380 set a 1
 *
 * The design, and a map of the files: kv.h.
 */
#include "kv.h"

#include "common/opt.h"
#include "common/timing.h"

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the program ------------------------------------------------------------------ */

#define MAX_SHARDS 256

static struct kv_server g_srv;

static void entry(void *arg)
{
	kv_shard_main(arg);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: corio-kv [options]\n"
		"  -p, --port P              TCP port (6379; 0: pick one and print it)\n"
		"  -b, --bind HOST           address to listen on (127.0.0.1; * for all)\n"
		"  -n, --shards N            shards (threads) (1)\n"
		"  -C, --cpus LIST           pin shard i to the i-th CPU of LIST (e.g. 1 or 0-1)\n"
		"  -i, --idle MODE           block | spin | poll (block)\n"
		"      --maxmemory BYTES     refuse writes with -OOM above this (0: no limit)\n"
		"      --proto-max-bulk-len BYTES   longest bulk string (512MiB)\n"
		"      --query-buffer-limit BYTES   largest single command (64MiB)\n"
		"      --output-limit BYTES  replies one connection holds before they are\n"
		"                            sent, waiting for the client to read (256MiB)\n"
		"      --max-multibulk N     most arguments per command (1048576)\n"
		"      --timeout SECS        exit after SECS (default: until SIGINT/SIGTERM)\n"
		"  -h, --help\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "bind", required_argument, NULL, 'b' },
		{ "shards", required_argument, NULL, 'n' },
		{ "cpus", required_argument, NULL, 'C' },
		{ "idle", required_argument, NULL, 'i' },
		{ "maxmemory", required_argument, NULL, 'M' },
		{ "proto-max-bulk-len", required_argument, NULL, 'B' },
		{ "query-buffer-limit", required_argument, NULL, 'Q' },
		{ "output-limit", required_argument, NULL, 'O' },
		{ "max-multibulk", required_argument, NULL, 'A' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static const char *const idles[] = { "block", "spin", "poll", NULL };
	static int cpus[MAX_SHARDS];
	struct kv_server *srv = &g_srv;
	unsigned ncpus = 0;
	struct corio_config cfg;
	struct corio_rt *rt;
	double timeout = 0;
	uint64_t v, until;
	sigset_t set;
	int o, ret;

	tool_prog = "corio-kv";
	kv_limits_default(&srv->lim);
	srv->port = 6379;
	srv->host = "127.0.0.1";
	corio_config_init(&cfg);
	cfg.shards = 1;
	cfg.stall_ns = 0;
	while ((o = getopt_long(argc, argv, "p:b:n:C:i:h", opts, NULL)) != -1) {
		switch (o) {
		case 'p':
			if (tool_opt_count("--port", optarg, 0, 65535, &v))
				return 2;
			srv->port = (int)v;
			break;
		case 'b':
			srv->host = optarg;
			break;
		case 'n':
			if (tool_opt_count("--shards", optarg, 1, MAX_SHARDS, &v))
				return 2;
			cfg.shards = (unsigned)v;
			break;
		case 'C':
			if (tool_opt_cpus("--cpus", optarg, cpus, MAX_SHARDS, &ncpus))
				return 2;
			break;
		case 'i':
			if ((o = tool_opt_choice("--idle", optarg, idles)) < 0)
				return 2;
			cfg.idle = o == 0 ? CORIO_IDLE_BLOCK : o == 1 ? CORIO_IDLE_SPIN : CORIO_IDLE_POLL;
			break;
		case 'M':
			if (tool_opt_size("--maxmemory", optarg, 0, UINT64_MAX / 2, &v))
				return 2;
			srv->lim.maxmemory = v;
			break;
		case 'B':
			if (tool_opt_size("--proto-max-bulk-len", optarg, 1, 1ull << 32, &v))
				return 2;
			srv->lim.proto_max_bulk_len = v;
			break;
		case 'Q':
			if (tool_opt_size("--query-buffer-limit", optarg, 1024, 1ull << 34, &v))
				return 2;
			srv->lim.qbuf_limit = v;
			break;
		case 'O':
			if (tool_opt_size("--output-limit", optarg, 1024, UINT64_MAX / 2, &v))
				return 2;
			srv->lim.out_limit = v;
			break;
		case 'A':
			if (tool_opt_count("--max-multibulk", optarg, 1, INT32_MAX, &v))
				return 2;
			srv->lim.max_multibulk = v;
			break;
		case 'T':
			if (tool_opt_seconds("--timeout", optarg, 0.001, 1e6, &timeout))
				return 2;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "corio-kv: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (ncpus) {
		for (unsigned i = ncpus; i < cfg.shards; i++)
			cpus[i] = cpus[i % ncpus];
		cfg.cpus = cpus;
	}
	if (kv_server_init(srv, cfg.shards)) {
		fprintf(stderr, "corio-kv: out of memory\n");
		return 1;
	}
	/* shards inherit this mask: only the main thread takes the signals */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	ret = corio_start(&cfg, entry, srv, &rt);
	if (ret) {
		fprintf(stderr, "corio-kv: cannot start: %s (%s)\n", strerror(-ret), corio_last_error());
		kv_server_free(srv);
		return 1;
	}
	until = timeout > 0 ? corio_now_ns() + tool_s_to_ns(timeout) : UINT64_MAX;
	for (int printed = 0;;) {
		struct timespec ts = { .tv_nsec = 50000000 };

		if (!printed && atomic_load(&srv->listening) == cfg.shards) {
			printf("corio-kv: listening on %s:%d shards=%u pid=%d\n", srv->host,
			       atomic_load(&srv->bound_port), cfg.shards, (int)getpid());
			fflush(stdout);
			printed = 1;
		}
		if (atomic_load(&srv->failed) || corio_now_ns() >= until)
			break;
		o = sigtimedwait(&set, NULL, &ts);
		if (o == SIGINT || o == SIGTERM)
			break;
	}
	corio_stop(rt);
	ret = corio_wait(rt);
	kv_server_free(srv);
	if (ret) {
		fprintf(stderr, "corio-kv: runtime: %s\n", strerror(-ret));
		return 1;
	}
	return atomic_load(&srv->failed) ? 1 : 0;
}
