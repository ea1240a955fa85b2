/* SPDX-License-Identifier: MIT */
/* tools/kv/reply.c - replies made on the connection's shard: the commands that
 * need no op (PING, INFO, CONFIG, CLIENT, HELLO, ...). */
#include "kv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>


/* An error reply whose text comes from the client: CR and LF become spaces. */
void kv_err_sanitized(struct kv_buf *o, const char *msg)
{
	size_t start = o->len;

	kv_err(o, msg);
	for (size_t i = start; o->p && i + 2 < o->len; i++)
		if (o->p[i] == '\r' || o->p[i] == '\n')
			o->p[i] = ' ';
}

void kv_reply_unknown(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	char msg[512];
	int n = snprintf(msg, sizeof(msg), "ERR unknown command '%.*s', with args beginning with: ",
			 (int)(a[0].n > 128 ? 128 : a[0].n), a[0].p);
	int args = 0;

	for (uint32_t i = 1; i < cmd->argc && args < 128; i++) {
		int room = 128 - args;
		int m = snprintf(msg + n, sizeof(msg) - (size_t)n, "'%.*s' ",
				 (int)(a[i].n > (size_t)room ? (size_t)room : a[i].n), a[i].p);

		args += m;
		n += m;
		if ((size_t)n >= sizeof(msg) - 1)
			break;
	}
	/* a NUL in an argument ends the message early: harmless */
	kv_err_sanitized(o, msg);
}

#define KV_SUM(srv, field) ({                                        \
	uint64_t s_ = 0;                                             \
	for (unsigned i_ = 0; i_ < (srv)->nshards; i_++)             \
		s_ += KV_GET((srv)->sh[i_].st.field);                 \
	s_; })

static uint64_t kv_mem_peak(struct kv_server *srv, uint64_t now);
static void kv_line(struct kv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));


/* Every second (the shard's tick): the rates INFO shows, and (shard 0)
 * the peak of the memory all shards hold. */
void kv_tick_rates(struct kv_shard *sh)
{
	uint64_t cmds = KV_GET(sh->st.cmds);

	KV_SET(sh->st.ops_sec, cmds - sh->tick_cmds);
	sh->tick_cmds = cmds;
	if (sh->id == 0)
		kv_mem_peak(sh->srv, KV_SUM(sh->srv, used_memory));
}

/* The most memory all shards held (sampled each second and at INFO). */
static uint64_t kv_mem_peak(struct kv_server *srv, uint64_t now)
{
	uint64_t p = atomic_load_explicit(&srv->mem_peak, memory_order_relaxed);

	while (now > p && !atomic_compare_exchange_weak(&srv->mem_peak, &p, now))
		;
	return now > p ? now : p;
}

/* INFO commandstats: calls per command (corio-kv does not time commands:
 * usec stays 0). */
static void kv_info_commandstats(struct kv_server *srv, struct kv_buf *b)
{
	kv_line(b, "# Commandstats\r\n");
	for (size_t i = 0; i < kv_nspecs(); i++) {
		uint64_t calls = 0;

		for (unsigned s = 0; s < srv->nshards; s++)
			calls += KV_GET(srv->sh[s].calls[i]);
		if (calls)
			kv_line(b, "cmdstat_%s:calls=%llu,usec=0,usec_per_call=0.00,rejected_calls=0,"
				   "failed_calls=0\r\n", kv_spec_at(i)->name, (unsigned long long)calls);
	}
	kv_line(b, "\r\n");
}

/* The most clients: the fd limit less what Redis reserves (32). */
static uint64_t kv_maxclients(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return 10000;
	return rl.rlim_cur > 32 ? rl.rlim_cur - 32 : 1;
}

static uint64_t kv_rss(void)
{
	char buf[128];
	unsigned long long size = 0, res = 0;
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	if (sscanf(buf, "%llu %llu", &size, &res) != 2)
		return 0;
	return res * (uint64_t)sysconf(_SC_PAGESIZE);
}


/* The largest output one connection held, over every shard's connections. */
static uint64_t kv_max_peak(struct kv_server *srv)
{
	uint64_t m = 0;

	for (unsigned i = 0; i < srv->nshards; i++)
		if (KV_GET(srv->sh[i].st.out_peak) > m)
			m = KV_GET(srv->sh[i].st.out_peak);
	return m;
}

static void kv_line(struct kv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void kv_line(struct kv_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!kv_reserve(b, 256))
		return;
	va_start(ap, fmt);
	n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n >= b->cap - b->len) { /* longer: room for all of it */
		if (!kv_reserve(b, (size_t)n + 1))
			return;
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	if (n > 0 && (size_t)n < b->cap - b->len)
		b->len += (size_t)n;
}

static bool kv_want(const struct kv_arg *sec, const char *name, bool dflt)
{
	if (!sec)
		return dflt;
	return kv_is(sec, name) || kv_is(sec, "all") || kv_is(sec, "everything") ||
	       (dflt && kv_is(sec, "default"));
}

static void kv_reply_info(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	struct kv_server *srv = c->srv;
	const struct kv_arg *sec = cmd->argc > 1 ? &c->av.v[cmd->arg0 + 1] : NULL;
	struct kv_buf b = { 0 };
	uint64_t up = (corio_now_ns() - srv->start_ns) / 1000000000ull;

	if (kv_want(sec, "server", true)) {
		struct utsname un = { 0 };

		uname(&un);
		kv_line(&b, "# Server\r\nredis_version:%s\r\nredis_mode:%s\r\n"
			    "server_name:corio-kv\r\nos:%s %s %s\r\narch_bits:%d\r\n"
			    "multiplexing_api:io_uring\r\nprocess_id:%d\r\n"
			    "tcp_port:%d\r\nuptime_in_seconds:%llu\r\nuptime_in_days:%llu\r\nhz:1\r\n"
			    "shards:%u\r\n\r\n",
			KV_VERSION, srv->cluster ? "cluster" : "standalone", un.sysname, un.release, un.machine, (int)(sizeof(void *) * 8),
			(int)getpid(), atomic_load(&srv->bound_port), (unsigned long long)up,
			(unsigned long long)(up / 86400), srv->nshards);
	}
	if (kv_want(sec, "clients", true))
		kv_line(&b, "# Clients\r\nconnected_clients:%llu\r\nmaxclients:%llu\r\n"
			    "blocked_clients:%llu\r\ntracking_clients:0\r\nclients_waiting_output:%llu\r\n\r\n",
			(unsigned long long)KV_SUM(srv, conns), (unsigned long long)kv_maxclients(),
			(unsigned long long)KV_SUM(srv, blocked), (unsigned long long)KV_SUM(srv, out_waiting));
	if (kv_want(sec, "memory", true)) {
		uint64_t used = KV_SUM(srv, used_memory), rss = kv_rss(), peak = kv_mem_peak(srv, used);

		kv_line(&b, "# Memory\r\nused_memory:%llu\r\nused_memory_human:%.2fM\r\n"
			    "used_memory_rss:%llu\r\nused_memory_peak:%llu\r\nused_memory_peak_human:%.2fM\r\n"
			    "maxmemory:%llu\r\nmaxmemory_policy:%s\r\n"
			    "mem_fragmentation_ratio:%.2f\r\nclient_output_peak:%llu\r\n\r\n",
			(unsigned long long)used, (double)used / 1048576.0, (unsigned long long)rss,
			(unsigned long long)peak, (double)peak / 1048576.0,
			(unsigned long long)atomic_load(&srv->maxmemory),
			kv_policy_names[atomic_load(&srv->policy)], used ? (double)rss / (double)used : 0.0,
			(unsigned long long)kv_max_peak(srv));
	}
	if (kv_want(sec, "persistence", true)) {
		struct kv_persist *p = &srv->persist;
		uint64_t dirty = KV_SUM(srv, dirty), saved = atomic_load(&p->dirty_saved);

		kv_line(&b, "# Persistence\r\nloading:0\r\nasync_loading:0\r\n"
			    "rdb_changes_since_last_save:%llu\r\nrdb_bgsave_in_progress:%d\r\n"
			    "rdb_last_save_time:%lld\r\nrdb_last_bgsave_status:%s\r\n"
			    "rdb_last_bgsave_time_sec:%lld\r\nrdb_saves:%llu\r\nrdb_last_cow_size:0\r\n"
			    "aof_enabled:0\r\naof_rewrite_in_progress:0\r\naof_last_write_status:ok\r\n\r\n",
			(unsigned long long)(dirty > saved ? dirty - saved : 0),
			atomic_load(&p->in_progress) && atomic_load(&p->bg),
			(long long)atomic_load(&p->lastsave), atomic_load(&p->last_ok) ? "ok" : "err",
			(long long)(atomic_load(&p->last_ms) + 500) / 1000,
			(unsigned long long)atomic_load(&p->saves));
	}
	if (kv_want(sec, "stats", true)) {
		kv_line(&b, "# Stats\r\ntotal_connections_received:%llu\r\ntotal_commands_processed:%llu\r\n"
			    "instantaneous_ops_per_sec:%llu\r\ntotal_net_input_bytes:%llu\r\n"
			    "total_net_output_bytes:%llu\r\nrejected_connections:%llu\r\n"
			    "expired_keys:%llu\r\nevicted_keys:%llu\r\nkeyspace_hits:%llu\r\nkeyspace_misses:%llu\r\n"
			    "pubsub_channels:%llu\r\npubsub_patterns:%llu\r\n"
			    "total_error_replies_protocol:%llu\r\nclient_output_limit_disconnections:%llu\r\n"
			    "client_output_flushes:%llu\r\noom_refused:%llu\r\n\r\n",
			(unsigned long long)KV_SUM(srv, conns_total), (unsigned long long)KV_SUM(srv, cmds),
			(unsigned long long)KV_SUM(srv, ops_sec), (unsigned long long)KV_SUM(srv, net_in),
			(unsigned long long)KV_SUM(srv, net_out), (unsigned long long)KV_SUM(srv, rejected),
			(unsigned long long)KV_SUM(srv, expired), (unsigned long long)KV_SUM(srv, evicted),
			(unsigned long long)KV_SUM(srv, hits),
			(unsigned long long)KV_SUM(srv, misses), (unsigned long long)kv_pubsub_count(srv, false),
			(unsigned long long)kv_pubsub_count(srv, true),
			(unsigned long long)KV_SUM(srv, proto_errors),
			(unsigned long long)KV_SUM(srv, slow_subscribers),
			(unsigned long long)KV_SUM(srv, out_flushes),
			(unsigned long long)KV_SUM(srv, oom_refused));
	}
	if (kv_want(sec, "replication", true)) /* a master without replicas */
		kv_line(&b, "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"
			    "master_failover_state:no-failover\r\n"
			    "master_replid:0000000000000000000000000000000000000000\r\n"
			    "master_repl_offset:0\r\nrepl_backlog_active:0\r\n\r\n");
	if (kv_want(sec, "cpu", true)) {
		struct rusage ru = { 0 };

		getrusage(RUSAGE_SELF, &ru);
		kv_line(&b, "# CPU\r\nused_cpu_sys:%ld.%06ld\r\nused_cpu_user:%ld.%06ld\r\n"
			    "used_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n\r\n",
			(long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec, (long)ru.ru_utime.tv_sec,
			(long)ru.ru_utime.tv_usec);
	}
	if (kv_want(sec, "cluster", true))
		kv_line(&b, "# Cluster\r\ncluster_enabled:%d\r\n\r\n", srv->cluster ? 1 : 0);
	if (kv_want(sec, "commandstats", false))
		kv_info_commandstats(srv, &b);
	if (kv_want(sec, "keyspace", true)) {
		uint64_t keys = KV_SUM(srv, keys);

		kv_line(&b, "# Keyspace\r\n");
		if (keys)
			kv_line(&b, "db0:keys=%llu,expires=%llu,avg_ttl=0\r\n", (unsigned long long)keys,
				(unsigned long long)KV_SUM(srv, expires));
		kv_line(&b, "\r\n");
	}
	if (kv_want(sec, "corio", false) || (sec && kv_is(sec, "default")) || !sec) {
		kv_line(&b, "# Corio\r\n");
		for (unsigned i = 0; i < srv->nshards; i++) {
			struct kv_counters *st = &srv->sh[i].st;
			struct corio_stats cs = { 0 };
			struct corio_msg_stats ms = { 0 };

			corio_stats_get(NULL, i, &cs);
			corio_msg_stats_get(NULL, i, CORIO_MSG_PEER_ALL, &ms);
			kv_line(&b, "shard%u:cpu=%llu,keys=%llu,conns=%llu,cmds=%llu,remote_ops_run=%llu,"
				    "remote_calls=%llu,batches=%llu,used_memory=%llu,loop_turns=%llu,"
				    "busy_ms=%llu,idle_ms=%llu,msgs_sent=%llu,msgs_received=%llu,"
				    "msg_calls=%llu,doorbells=%llu\r\n",
				i, (unsigned long long)cs.cpu, (unsigned long long)KV_GET(st->keys),
				(unsigned long long)KV_GET(st->conns), (unsigned long long)KV_GET(st->cmds),
				(unsigned long long)KV_GET(st->remote_ops),
				(unsigned long long)KV_GET(st->remote_calls),
				(unsigned long long)KV_GET(st->batches),
				(unsigned long long)KV_GET(st->used_memory),
				(unsigned long long)cs.loop_turns, (unsigned long long)(cs.busy_ns / 1000000),
				(unsigned long long)(cs.idle_ns / 1000000), (unsigned long long)ms.sent,
				(unsigned long long)ms.received, (unsigned long long)ms.calls,
				(unsigned long long)ms.doorbells);
		}
		kv_line(&b, "\r\n");
	}
	if (b.nomem)
		kv_err(o, "ERR out of memory");
	else
		kv_verbatim(o, b.p ? b.p : "", b.len, cmd->resp3);
	kv_buf_free(&b);
}

/*
 * A glob as Redis's KEYS, SCAN MATCH and CONFIG GET take it: * any run, ?
 * one byte, [abc] [a-z] [^x] a set, \x the byte x. nocase folds ASCII.
 * Recursion only at '*', with runs of '*' collapsed, so a pattern of n
 * stars costs at most n levels.
 */
bool kv_glob(const char *p, size_t pn, const char *s, size_t sn, bool nocase)
{
#define FOLD(ch) (nocase && (ch) >= 'A' && (ch) <= 'Z' ? (ch) + 32 : (ch))
	while (pn) {
		switch (*p) {
		case '*':
			while (pn > 1 && p[1] == '*') {
				p++;
				pn--;
			}
			if (pn == 1)
				return true;
			for (size_t i = 0; i <= sn; i++)
				if (kv_glob(p + 1, pn - 1, s + i, sn - i, nocase))
					return true;
			return false;
		case '?':
			if (!sn)
				return false;
			s++;
			sn--;
			break;
		case '[': {
			bool neg, match = false;

			if (!sn)
				return false;
			p++;
			pn--;
			neg = pn && *p == '^';
			if (neg) {
				p++;
				pn--;
			}
			while (pn && *p != ']') {
				if (*p == '\\' && pn >= 2) {
					p++;
					pn--;
					match |= FOLD(*p) == FOLD(*s);
				} else if (pn >= 3 && p[1] == '-' && p[2] != ']') {
					int lo = FOLD((unsigned char)p[0]), hi = FOLD((unsigned char)p[2]),
					    ch = FOLD((unsigned char)*s);

					if (lo > hi) {
						int t = lo;

						lo = hi;
						hi = t;
					}
					match |= ch >= lo && ch <= hi;
					p += 2;
					pn -= 2;
				} else {
					match |= FOLD(*p) == FOLD(*s);
				}
				p++;
				pn--;
			}
			if (neg)
				match = !match;
			if (!match)
				return false;
			s++;
			sn--;
			if (!pn)
				return sn == 0; /* an unclosed set ends the pattern */
			break;
		}
		case '\\':
			if (pn >= 2) {
				p++;
				pn--;
			}
			/* fall through */
		default:
			if (!sn || FOLD(*p) != FOLD(*s))
				return false;
			s++;
			sn--;
			break;
		}
		p++;
		pn--;
	}
	return sn == 0;
#undef FOLD
}

/* The parameters CONFIG GET answers, with their values now. */
#define KV_NCONF 24
static int kv_config_values(struct kv_conn *c, const char *names[KV_NCONF], char vals[KV_NCONF][48])
{
	struct kv_server *srv = c->srv;
	int n = 0;

#define CONF(nm, ...) (names[n] = (nm), snprintf(vals[n], sizeof(vals[0]), __VA_ARGS__), n++)
	names[n] = "save"; /* longer values: written by kv_config_long() */
	vals[n++][0] = 0;
	names[n] = "dir";
	vals[n++][0] = 0;
	names[n] = "dbfilename";
	vals[n++][0] = 0;
	CONF("appendonly", "no");
	CONF("maxmemory", "%llu", (unsigned long long)atomic_load(&srv->maxmemory));
	CONF("maxmemory-policy", "%s", kv_policy_names[atomic_load(&srv->policy)]);
	CONF("maxmemory-samples", "%d", atomic_load(&srv->samples));
	CONF("proto-max-bulk-len", "%llu", (unsigned long long)srv->lim.proto_max_bulk_len);
	CONF("client-query-buffer-limit", "%llu", (unsigned long long)srv->lim.qbuf_limit);
	CONF("databases", "1");
	CONF("timeout", "0"); /* idle clients are never closed */
	CONF("notify-keyspace-events", "%s", "");
	CONF("protected-mode", "%s", atomic_load(&srv->protected_mode) ? "yes" : "no");
	CONF("port", "%d", atomic_load(&srv->bound_port));
	CONF("bind", "%s", srv->host ? srv->host : "127.0.0.1");
	CONF("maxclients", "%llu", (unsigned long long)kv_maxclients());
	CONF("cluster-enabled", "%s", srv->cluster ? "yes" : "no");
	CONF("appendfsync", "everysec");
	names[n] = "requirepass"; /* the password itself: up to 512 bytes, not in vals */
	vals[n][0] = 0;
	n++;
#undef CONF
	return n;
}

/* Redis's memory values: a number with an optional unit (b; k, m, g in
 * thousands; kb, mb, gb in 1024s), in any case. */
static bool kv_memtoull(const char *p, size_t n, unsigned long long *out)
{
	static const struct { const char *u; unsigned long long mul; } units[] = {
		{ "b", 1 }, { "k", 1000 }, { "kb", 1024 }, { "m", 1000000 }, { "mb", 1 << 20 },
		{ "g", 1000000000 }, { "gb", 1 << 30 },
	};
	size_t d = 0;
	unsigned long long v = 0, mul = 1;

	while (d < n && p[d] >= '0' && p[d] <= '9') {
		if (v > (ULLONG_MAX - 9) / 10)
			return false;
		v = v * 10 + (unsigned long long)(p[d++] - '0');
	}
	if (!d)
		return false;
	if (d < n) {
		struct kv_arg u = { p + d, n - d };
		bool found = false;

		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]) && !found; i++)
			if (kv_is(&u, units[i].u)) {
				mul = units[i].mul;
				found = true;
			}
		if (!found)
			return false;
	}
	if (v && mul > ULLONG_MAX / v)
		return false;
	*out = v * mul;
	return true;
}

/* The values of save, dir and dbfilename (longer than the table's 48
 * bytes): true when name is one of them, its value written to o. */
static bool kv_config_long(struct kv_server *srv, const char *name, struct kv_buf *o)
{
	struct kv_persist *p = &srv->persist;
	char v[1100];

	if (!strcmp(name, "save")) {
		kv_save_points_format(p, v, sizeof(v));
	} else if (!strcmp(name, "dir") || !strcmp(name, "dbfilename")) {
		pthread_mutex_lock(&p->lock);
		if (!strcmp(name, "dir"))
			snprintf(v, sizeof(v), "%s", p->dir[0] ? p->dir : ".");
		else
			snprintf(v, sizeof(v), "%s", p->dbfilename);
		pthread_mutex_unlock(&p->lock);
		if (!strcmp(name, "dir") && v[0] != '/') { /* Redis answers the absolute path */
			char abs[1100];

			if (realpath(v, abs))
				snprintf(v, sizeof(v), "%s", abs);
		}
	} else {
		return false;
	}
	kv_bulkstr(o, v);
	return true;
}

/* CONFIG GET pattern...: every parameter some pattern matches, once. */
static void kv_config_get(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	const char *names[KV_NCONF];
	char vals[KV_NCONF][48];
	bool match[KV_NCONF] = { 0 };
	const struct kv_arg *as[KV_NCONF] = { 0 }; /* named without a glob: echoed as given */
	int n = kv_config_values(c, names, vals), hits = 0;

	for (int i = 0; i < n; i++) {
		for (uint32_t j = 2; j < cmd->argc && !match[i]; j++) {
			match[i] = kv_glob(a[j].p, a[j].n, names[i], strlen(names[i]), true);
			if (match[i] && !memchr(a[j].p, '*', a[j].n) && !memchr(a[j].p, '?', a[j].n) &&
			    !memchr(a[j].p, '[', a[j].n) && !memchr(a[j].p, '\\', a[j].n))
				as[i] = &a[j];
		}
		hits += match[i];
	}
	kv_num(o, cmd->resp3 ? '%' : '*', cmd->resp3 ? hits : 2 * hits);
	for (int i = 0; i < n; i++) {
		if (!match[i])
			continue;
		if (as[i])
			kv_bulk(o, as[i]->p, as[i]->n);
		else
			kv_bulkstr(o, names[i]);
		if (!strcmp(names[i], "requirepass"))
			kv_bulk(o, c->sh->auth.pass, c->sh->auth.len);
		else if (kv_config_long(c->srv, names[i], o))
			;
		else
			kv_bulkstr(o, vals[i]);
	}
}

/* CONFIG SET name value [name value ...]: requirepass and protected-mode;
 * every pair is checked before any applies, as Redis 7.0 does. */
static void kv_config_set(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	const struct kv_arg *pass = NULL, *save = NULL, *dir = NULL, *dbf = NULL;
	struct kv_persist *p = &c->srv->persist;
	int prot = -1, policy = -1;
	long long samples = -1;
	unsigned long long maxmem = 0;
	bool set_maxmem = false;
	char msg[200];

	if (cmd->argc < 4 || cmd->argc % 2) {
		kv_err(o, "ERR wrong number of arguments for 'config|set' command");
		return;
	}
	for (uint32_t j = 2; j < cmd->argc; j += 2) {
		if (kv_is(&a[j], "requirepass")) {
			if (a[j + 1].n > KV_PASS_MAX) {
				kv_err(o, "ERR CONFIG SET failed (possibly related to argument 'requirepass') "
					  "- corio-kv takes passwords of 512 bytes at most");
				return;
			}
			pass = &a[j + 1];
		} else if (kv_is(&a[j], "protected-mode")) {
			if (!kv_is(&a[j + 1], "yes") && !kv_is(&a[j + 1], "no")) {
				kv_err(o, "ERR CONFIG SET failed (possibly related to argument "
					  "'protected-mode') - argument must be 'yes' or 'no'");
				return;
			}
			prot = kv_is(&a[j + 1], "yes");
		} else if (kv_is(&a[j], "maxmemory")) {
			if (!kv_memtoull(a[j + 1].p, a[j + 1].n, &maxmem)) {
				kv_err(o, "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - "
					  "argument must be a memory value");
				return;
			}
			set_maxmem = true;
		} else if (kv_is(&a[j], "maxmemory-policy")) {
			if ((policy = kv_policy_parse(a[j + 1].p, a[j + 1].n)) < 0) {
				kv_err(o, "ERR CONFIG SET failed (possibly related to argument "
					  "'maxmemory-policy') - argument(s) must be one of the following: "
					  "volatile-lru, allkeys-lru, volatile-lfu, allkeys-lfu, volatile-random, "
					  "allkeys-random, volatile-ttl, noeviction");
				return;
			}
		} else if (kv_is(&a[j], "maxmemory-samples")) {
			if (!kv_str2ll(a[j + 1].p, a[j + 1].n, &samples) || samples < 1 || samples > 64) {
				kv_err(o, "ERR CONFIG SET failed (possibly related to argument "
					  "'maxmemory-samples') - argument must be between 1 and 64 inclusive "
					  "(corio-kv samples at most 64)");
				return;
			}
		} else if (kv_is(&a[j], "save")) {
			struct kv_persist test;

			memset(&test, 0, sizeof(test));
			pthread_mutex_init(&test.lock, NULL);
			if (kv_save_points_parse(&test, a[j + 1].p, a[j + 1].n)) {
				pthread_mutex_destroy(&test.lock);
				kv_err(o, "ERR CONFIG SET failed (possibly related to argument 'save') - "
					  "Invalid save parameters");
				return;
			}
			pthread_mutex_destroy(&test.lock);
			save = &a[j + 1];
		} else if (kv_is(&a[j], "dir")) {
			char path[sizeof(p->dir)];
			struct stat st;

			if (a[j + 1].n >= sizeof(path) || memchr(a[j + 1].p, 0, a[j + 1].n)) {
				kv_err(o, "ERR CONFIG SET failed (possibly related to argument 'dir') - "
					  "the path is too long");
				return;
			}
			memcpy(path, a[j + 1].p, a[j + 1].n);
			path[a[j + 1].n] = 0;
			int err = stat(path, &st) ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;

			if (err) {
				snprintf(msg, sizeof(msg), "ERR CONFIG SET failed (possibly related to "
					 "argument 'dir') - %s", strerror(err));
				kv_err(o, msg);
				return;
			}
			dir = &a[j + 1];
		} else if (kv_is(&a[j], "dbfilename")) {
			if (!a[j + 1].n || a[j + 1].n >= sizeof(p->dbfilename) ||
			    memchr(a[j + 1].p, '/', a[j + 1].n) || memchr(a[j + 1].p, 0, a[j + 1].n)) {
				kv_err(o, "ERR CONFIG SET failed (possibly related to argument 'dbfilename') "
					  "- dbfilename can't be a path, just a filename");
				return;
			}
			dbf = &a[j + 1];
		} else {
			snprintf(msg, sizeof(msg), "ERR Unknown option or number of arguments for CONFIG "
				 "SET - '%.*s'", (int)(a[j].n > 64 ? 64 : a[j].n), a[j].p);
			kv_err_sanitized(o, msg);
			return;
		}
	}
	if (pass && kv_auth_set_all(c->srv, pass->p, pass->n)) {
		kv_err(o, "ERR CONFIG SET failed: could not reach every shard");
		return;
	}
	if (prot >= 0)
		atomic_store(&c->srv->protected_mode, prot);
	if (save)
		kv_save_points_parse(p, save->p, save->n);
	if (policy >= 0)
		atomic_store(&c->srv->policy, policy);
	if (samples > 0)
		atomic_store(&c->srv->samples, (int)samples);
	if (set_maxmem) { /* each shard's share; they evict at their next write */
		atomic_store(&c->srv->maxmemory, maxmem);
		for (unsigned i = 0; i < c->srv->nshards; i++)
			KV_SET(c->srv->sh[i].maxmem, maxmem / c->srv->nshards);
	}
	if (dir || dbf) {
		pthread_mutex_lock(&p->lock);
		if (dir)
			snprintf(p->dir, sizeof(p->dir), "%.*s", (int)dir->n, dir->p);
		if (dbf)
			snprintf(p->dbfilename, sizeof(p->dbfilename), "%.*s", (int)dbf->n, dbf->p);
		pthread_mutex_unlock(&p->lock);
	}
	KV_LIT(o, "+OK\r\n");
}

/* CONFIG GET / SET / RESETSTAT. */
static void kv_reply_config(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];

	if (kv_is(&a[1], "get")) {
		if (cmd->argc < 3)
			kv_err(o, "ERR wrong number of arguments for 'config|get' command");
		else
			kv_config_get(c, cmd, o);
	} else if (kv_is(&a[1], "set")) {
		kv_config_set(c, cmd, o);
	} else if (kv_is(&a[1], "resetstat") && cmd->argc == 2) {
		KV_LIT(o, "+OK\r\n"); /* corio-kv's counters are not reset */
	} else if (kv_is(&a[1], "rewrite") && cmd->argc == 2) {
		kv_err(o, "ERR corio-kv has no config file to rewrite");
	} else {
		kv_reply_badsub(c, cmd, o);
	}
}

/* NULL when CLIENT SETNAME takes name, else the error reply. */
const char *kv_name_check(const struct kv_arg *name)
{
	for (size_t i = 0; i < name->n; i++)
		if (name->p[i] <= ' ' || name->p[i] > '~')
			return "ERR Client names cannot contain spaces, newlines or special characters.";
	if (name->n >= KV_NAME_MAX)
		return "ERR client name too long for corio-kv (63 bytes)";
	return NULL;
}

void kv_set_name(struct kv_conn *c, const struct kv_arg *name)
{
	memcpy(c->name, name->p, name->n);
	c->name[name->n] = 0;
}

/*
 * HELLO [protover [AUTH user pass] [SETNAME name]], as Redis 7.0 answers
 * it: AUTH logs in as the default user (the only one; with no password set
 * it takes any password), and a client not authenticated once the options
 * are done is refused. Options act in order (a SETNAME before a bad option
 * stays, as in Redis). Returns the protocol asked for (0: none), or -1 with
 * the error reply (no "-") in err. Called twice: when planned (authst is
 * &cmd->flags: AUTH is checked and takes effect, its outcome recorded
 * there) and when replied to (authst NULL: SETNAME sets the name, AUTH's
 * outcome is read back).
 */
int kv_hello(struct kv_conn *c, const struct kv_cmd *cmd, unsigned *authst, char *err, size_t n)
{
	bool apply = !authst;
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	long long ver = 0;

	if (cmd->argc >= 2 && !kv_str2ll(a[1].p, a[1].n, &ver)) {
		snprintf(err, n, "ERR Protocol version is not an integer or out of range");
		return -1;
	}
	if (cmd->argc >= 2 && (ver < 2 || ver > 3)) {
		snprintf(err, n, "NOPROTO unsupported protocol version");
		return -1;
	}
	for (uint32_t j = 2; j < cmd->argc; j++) {
		uint32_t more = cmd->argc - 1 - j;
		const char *bad;

		if (kv_is(&a[j], "auth") && more >= 2) {
			if (authst && kv_auth_check(c->sh, &a[j + 1], &a[j + 2]))
				*authst |= F_AUTHBAD;
			else if (authst)
				c->authed = true;
			if (cmd->flags & F_AUTHBAD) {
				snprintf(err, n, "%s", kv_wrongpass_msg);
				return -1;
			}
			j += 2;
		} else if (kv_is(&a[j], "setname") && more >= 1) {
			if ((bad = kv_name_check(&a[j + 1]))) {
				snprintf(err, n, "%s", bad);
				return -1;
			}
			if (apply)
				kv_set_name(c, &a[j + 1]);
			j++;
		} else {
			snprintf(err, n, "ERR Syntax error in HELLO option '%.*s'",
				 (int)(a[j].n > 128 ? 128 : a[j].n), a[j].p);
			return -1;
		}
	}
	if (authst && !c->authed)
		*authst |= F_NOAUTH;
	if (cmd->flags & F_NOAUTH) {
		snprintf(err, n, "NOAUTH HELLO must be called with the client already authenticated, "
			 "otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the "
			 "client and select the RESP protocol version at the same time");
		return -1;
	}
	return (int)ver;
}

/* The server's facts, a map in RESP3 and a flat array in RESP2 (Redis's
 * fields; "server" says redis because clients read it to pick features). */
static void kv_reply_hello(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	char err[320];

	if (kv_hello(c, cmd, NULL, err, sizeof(err)) < 0) {
		kv_err_sanitized(o, err);
		return;
	}
	kv_num(o, cmd->resp3 ? '%' : '*', cmd->resp3 ? 7 : 14);
	kv_bulkstr(o, "server");
	kv_bulkstr(o, "redis");
	kv_bulkstr(o, "version");
	kv_bulkstr(o, KV_VERSION);
	kv_bulkstr(o, "proto");
	kv_num(o, ':', cmd->n);
	kv_bulkstr(o, "id");
	kv_num(o, ':', (long long)c->id);
	kv_bulkstr(o, "mode");
	kv_bulkstr(o, c->srv->cluster ? "cluster" : "standalone");
	kv_bulkstr(o, "role");
	kv_bulkstr(o, "master");
	kv_bulkstr(o, "modules");
	KV_LIT(o, "*0\r\n");
}

/* The replies that need no op: made from the command and the connection. */
void kv_reply_local(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];

	switch (cmd->kind) {
	case C_PING:
		if (!cmd->resp3 && kv_ps_subscribed(c) && cmd->argc <= 2) { /* RESP2, subscribed */
			KV_LIT(o, "*2\r\n$4\r\npong\r\n");
			kv_bulk(o, cmd->argc == 2 ? a[1].p : "", cmd->argc == 2 ? a[1].n : 0);
		} else if (cmd->argc == 1)
			KV_LIT(o, "+PONG\r\n");
		else if (cmd->argc == 2)
			kv_bulk(o, a[1].p, a[1].n);
		else
			kv_err(o, "ERR wrong number of arguments for 'ping' command");
		break;
	case C_ECHO:
		kv_bulk(o, a[1].p, a[1].n);
		break;
	case C_INFO:
		kv_reply_info(c, cmd, o);
		break;
	case C_CONFIG:
		kv_reply_config(c, cmd, o);
		break;
	case C_COMMAND:
		kv_reply_command(c, cmd, o);
		break;
	case C_CLIENT:
		kv_reply_client(c, cmd, o);
		break;
	case C_SUBSCRIBE:
	case C_UNSUBSCRIBE:
	case C_PUBLISH:
	case C_PUBSUB:
		kv_reply_ps(c, cmd, o);
		break;
	case C_PSBLOCKED: {
		char msg[240], name[64];
		size_t i, n;

		n = (size_t)snprintf(name, sizeof(name), "%s", cmd->spec->name);
		if (cmd->argc > 1 && kv_subcommand_known(cmd->spec->name, &a[1]) && n < sizeof(name) - 1) {
			name[n++] = '|';
			for (i = 0; i < a[1].n && n < sizeof(name) - 1; i++)
				name[n++] = (char)(a[1].p[i] | 0x20);
			name[n] = 0;
		}
		snprintf(msg, sizeof(msg), "ERR Can't execute '%s': only (P|S)SUBSCRIBE / "
			 "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context", name);
		kv_err(o, msg);
		break;
	}
	case C_CLUSTER:
	case C_READONLY:
		kv_reply_cluster(c, cmd, o);
		break;
	case C_SAVE:
	case C_BGSAVE:
	case C_LASTSAVE:
	case C_SHUTDOWN:
		kv_reply_save(c, cmd, o);
		break;
	case C_TIME:
	case C_ROLE:
	case C_WAIT:
	case C_SLOWLOG:
	case C_LATENCY:
		kv_reply_server(c, cmd, o);
		break;
	case C_SELECT: {
		long long db;

		if (!kv_str2ll(a[1].p, a[1].n, &db))
			kv_err(o, "ERR value is not an integer or out of range");
		else if (db != 0)
			kv_err(o, "ERR DB index is out of range");
		else
			KV_LIT(o, "+OK\r\n");
		break;
	}
	case C_QUIT:
		KV_LIT(o, "+OK\r\n");
		break;
	case C_HELLO:
		kv_reply_hello(c, cmd, o);
		break;
	case C_MULTI:
	case C_DISCARD:
	case C_AUTH: /* refused ones were planned as C_ERR */
		KV_LIT(o, "+OK\r\n");
		break;
	case C_QUEUED:
		KV_LIT(o, "+QUEUED\r\n");
		break;
	case C_EXEC: /* planned as C_ERR or as its commands */
		break;
	default:
		break;
	}
}
