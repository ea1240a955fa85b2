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

#include <errno.h>
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

/* The options: defaults in place first (the parser keeps a target's value
 * when its option is not given). */
static struct {
	struct corio_config cfg;
	int cpu[MAX_SHARDS];
	struct tool_cpus cpus;
	int idle;
	int unprotected; /* --protected-mode: 0 yes, 1 no */
	int cluster;     /* --cluster-mode: 0 off, 1 emulated */
	int load_partial; /* --load-partial: 0 no, 1 yes */
	int policy;       /* --maxmemory-policy: enum kv_policy */
	uint64_t samples; /* --maxmemory-samples */
	double timeout;
	const char *dir, *dbfilename, *save;
} m = { .cpus = { m.cpu, MAX_SHARDS, 0, NULL } };

static int parse_options(struct kv_server *srv, int argc, char **argv)
{
	static const char *const idles[] = { "block", "spin", "poll", NULL };
	static const char *const yesno[] = { "yes", "no", NULL };
	static const char *const clmodes[] = { "off", "emulated", NULL };
	static const char *const noyes[] = { "no", "yes", NULL };
	static const char *policies[KV_NPOLICIES + 1];

	for (int i = 0; i < KV_NPOLICIES; i++)
		policies[i] = kv_policy_names[i];
	const struct tool_opt opts[] = {
		{ TOOL_OPT_COUNT("port", 'p', srv->port, 0, 65535, "P",
				 "TCP port (6379; 0: pick one and print it)") },
		{ TOOL_OPT_STRING("bind", 'b', srv->host, "HOST",
				  "address to listen on (127.0.0.1; * for all)") },
		{ TOOL_OPT_COUNT("shards", 'n', m.cfg.shards, 1, MAX_SHARDS, "N",
				 "shards (threads) (1)") },
		{ TOOL_OPT_CPUS("cpus", 'C', m.cpus, "LIST",
				"pin shard i to the i-th CPU of LIST (e.g. 1 or 0-1)") },
		{ TOOL_OPT_CHOICE("idle", 'i', m.idle, idles, "MODE", "block | spin | poll (block)") },
		{ TOOL_OPT_STRING("requirepass", 0, srv->requirepass, "PASS",
				  "clients must AUTH with PASS (512 bytes at most; none)") },
		{ TOOL_OPT_CHOICE("protected-mode", 0, m.unprotected, yesno, "yes|no",
				  "with no password, refuse clients not on loopback (yes)") },
		{ TOOL_OPT_CHOICE("cluster-mode", 0, m.cluster, clmodes, "off|emulated",
				  "emulated: answer CLUSTER as one node owning\nevery slot (off)") },
		{ TOOL_OPT_SIZE("maxmemory", 0, srv->lim.maxmemory, 0, 1ull << 62, "BYTES",
				"memory for data; above it, evict by --maxmemory-policy\n(0: no limit)") },
		{ TOOL_OPT_CHOICE("maxmemory-policy", 0, m.policy, policies, "POLICY",
				  "above maxmemory: noeviction (refuse writes), allkeys-lru,\n"
				  "volatile-lru, allkeys-lfu, volatile-lfu, volatile-ttl,\n"
				  "allkeys-random, volatile-random (noeviction)") },
		{ TOOL_OPT_COUNT("maxmemory-samples", 0, m.samples, 1, 64, "N",
				 "keys sampled per eviction (5)") },
		{ TOOL_OPT_SIZE("proto-max-bulk-len", 0, srv->lim.proto_max_bulk_len, 1, 1ull << 32,
				"BYTES", "longest bulk string (512MiB)") },
		{ TOOL_OPT_SIZE("query-buffer-limit", 0, srv->lim.qbuf_limit, 1024, 1ull << 34,
				"BYTES", "largest single command (64MiB)") },
		{ TOOL_OPT_SIZE("output-limit", 0, srv->lim.out_limit, 1024, 1ull << 62, "BYTES",
				"replies one connection holds before they are sent,\n"
				"waiting for the client to read (256MiB)") },
		{ TOOL_OPT_COUNT("max-multibulk", 0, srv->lim.max_multibulk, 1, INT32_MAX, "N",
				 "most arguments per command (1048576)") },
		{ TOOL_OPT_STRING("dir", 0, m.dir, "DIR", "where the RDB snapshot is written and read (.)") },
		{ TOOL_OPT_STRING("dbfilename", 0, m.dbfilename, "NAME",
				  "the snapshot's file name in DIR (dump.rdb)") },
		{ TOOL_OPT_STRING("save", 0, m.save, "\"SECS CHANGES ...\"",
				  "save points: BGSAVE after SECS seconds with at least\n"
				  "CHANGES changes (\"3600 1 300 100 60 10000\"; \"\": none)") },
		{ TOOL_OPT_CHOICE("load-partial", 0, m.load_partial, noyes, "no|yes",
				  "start with the keys before the error when the snapshot\n"
				  "is corrupt or truncated (no: refuse to start)") },
		{ TOOL_OPT_SECONDS("timeout", 0, m.timeout, 0.001, 1e6, "SECS",
				   "exit after SECS (default: until SIGINT/SIGTERM)") },
		{ 0 },
	};
	const struct tool_cli cli = { "corio-kv", "[options]", NULL, opts };

	return tool_opt_parse(&cli, argc, argv);
}

/* Until SIGINT/SIGTERM (blocked in set), --timeout or a shard's failure;
 * says where it listens once every shard does. */
static void serve_until_stop(struct kv_server *srv, sigset_t *set)
{
	uint64_t until = m.timeout > 0 ? corio_now_ns() + tool_s_to_ns(m.timeout) : UINT64_MAX;

	for (int printed = 0;;) {
		struct timespec ts = { .tv_nsec = 50000000 };
		int sig;

		if (!printed && atomic_load(&srv->listening) == m.cfg.shards) {
			printf("corio-kv: listening on %s:%d shards=%u pid=%d\n", srv->host,
			       atomic_load(&srv->bound_port), m.cfg.shards, (int)getpid());
			fflush(stdout);
			printed = 1;
		}
		if (atomic_load(&srv->failed) || corio_now_ns() >= until)
			break;
		if (atomic_load(&srv->persist.stop))
			break;
		sig = sigtimedwait(set, NULL, &ts);
		if (sig == SIGINT || sig == SIGTERM) {
			/* with save points, save first (shard 0's saver does, then
			 * sets stop); a second signal stops at once, as does a
			 * signal before every shard listens */
			int points;

			pthread_mutex_lock(&srv->persist.lock); /* CONFIG SET save may change them */
			points = srv->persist.npoints;
			pthread_mutex_unlock(&srv->persist.lock);
			if (points && printed && !atomic_load(&srv->persist.shutdown)) {
				atomic_store(&srv->persist.shutdown, 2);
				continue;
			}
			break;
		}
	}
}

int main(int argc, char **argv)
{
	struct kv_server *srv = &g_srv;
	struct corio_rt *rt;
	sigset_t set;
	int ret;

	kv_limits_default(&srv->lim);
	srv->port = 6379;
	srv->host = "127.0.0.1";
	corio_config_init(&m.cfg);
	m.cfg.shards = 1;
	m.cfg.stall_ns = 0;
	ret = parse_options(srv, argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	atomic_store(&srv->protected_mode, !m.unprotected);
	srv->cluster = m.cluster == 1;
	m.cfg.idle = m.idle == 0 ? CORIO_IDLE_BLOCK : m.idle == 1 ? CORIO_IDLE_SPIN : CORIO_IDLE_POLL;
	if (m.cpus.n) {
		for (unsigned i = m.cpus.n; i < m.cfg.shards; i++)
			m.cpu[i] = m.cpu[i % m.cpus.n];
		m.cfg.cpus = m.cpu;
	}
	snprintf(srv->persist.dir, sizeof(srv->persist.dir), "%s", m.dir ? m.dir : ".");
	snprintf(srv->persist.dbfilename, sizeof(srv->persist.dbfilename), "%s",
		 m.dbfilename ? m.dbfilename : "dump.rdb");
	srv->persist.load_partial = m.load_partial == 1;
	atomic_store(&srv->policy, m.policy);
	atomic_store(&srv->samples, m.samples ? (int)m.samples : 5);
	if (strchr(srv->persist.dbfilename, '/') || !srv->persist.dbfilename[0]) {
		fprintf(stderr, "corio-kv: --dbfilename: a file name, not a path\n");
		return 2;
	}
	if ((ret = kv_server_init(srv, m.cfg.shards))) {
		fprintf(stderr, "corio-kv: %s\n", ret == -E2BIG ? "--requirepass is longer than 512 bytes"
								: "out of memory");
		return 1;
	}
	m.save = m.save ? m.save : "3600 1 300 100 60 10000"; /* Redis's default */
	if (kv_save_points_parse(&srv->persist, m.save, strlen(m.save))) {
		fprintf(stderr, "corio-kv: --save: want pairs of seconds and changes, as \"60 10000\"\n");
		kv_server_free(srv);
		return 2;
	}
	/* shards inherit this mask: only the main thread takes the signals */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	ret = corio_start(&m.cfg, entry, srv, &rt);
	if (ret) {
		fprintf(stderr, "corio-kv: cannot start: %s (%s)\n", strerror(-ret), corio_last_error());
		kv_server_free(srv);
		return 1;
	}
	serve_until_stop(srv, &set);
	corio_stop(rt);
	ret = corio_wait(rt);
	kv_server_free(srv);
	if (ret) {
		fprintf(stderr, "corio-kv: runtime: %s\n", strerror(-ret));
		return 1;
	}
	return atomic_load(&srv->failed) ? 1 : 0;
}
