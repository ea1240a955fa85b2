/* SPDX-License-Identifier: MIT */
/*
 * corio-stat - client of a corio runtime's control socket.
 *
 *   corio-stat SOCKET [--json | --prom] [--watch SECONDS]
 *
 * Default: a per-shard table like top's; with --watch, one every SECONDS,
 * with rates between samples (the first table shows averages since start);
 * below it the tls group's table once the program has had a TLS session
 * (else one line saying there was none, and whether the kernel has kTLS).
 * --json / --prom print the server's answer as it is (repeatedly with
 * --watch). Exit status: 0 (also after --help), 1 on a usage error, 2 when
 * the socket cannot be reached or answers garbage.
 */
#include "common/opt.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"

/* ---- talking to the socket --------------------------------------------------- */

/* Send cmd, read the whole answer (the server closes after our half-close). */
static char *ask(const char *path, const char *cmd, size_t *lenp)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	int fd;

	if (!buf || strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "corio-stat: %s: %s\n", path, buf ? "path too long" : "no memory");
		exit(2);
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (path[0] == '@') /* abstract namespace */
		sa.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa,
			      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path) +
					  (path[0] != '@'))) < 0) {
		fprintf(stderr, "corio-stat: cannot connect to %s: %s\n", path, strerror(errno));
		exit(2);
	}
	if (send(fd, cmd, strlen(cmd), MSG_NOSIGNAL) < 0 || shutdown(fd, SHUT_WR) < 0) {
		fprintf(stderr, "corio-stat: %s: %s\n", path, strerror(errno));
		exit(2);
	}
	for (;;) {
		ssize_t n;

		if (cap - len < 4096) {
			char *nb = realloc(buf, cap *= 2);

			if (!nb) {
				fprintf(stderr, "corio-stat: no memory\n");
				exit(2);
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "corio-stat: %s: %s\n", path, strerror(errno));
			exit(2);
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	if (!strncmp(buf, "error:", 6)) {
		fprintf(stderr, "corio-stat: the server said: %s", buf);
		exit(2);
	}
	if (lenp)
		*lenp = len;
	return buf;
}

/* ---- a flat view of the JSON: every number under its dotted path ---------------- */

struct kv {
	char path[96];
	double v;
};

struct flat {
	struct kv *kv;
	size_t n, cap;
};

/* tool_json_walk's callback: keep the number under its path. */
static int keep(void *arg, const char *path, uint64_t mag, bool neg)
{
	struct flat *f = arg;

	if (f->n == f->cap) {
		size_t nc = f->cap ? f->cap * 2 : 1024;
		struct kv *nk = realloc(f->kv, nc * sizeof(*nk));

		if (!nk)
			return -1;
		f->kv = nk;
		f->cap = nc;
	}
	snprintf(f->kv[f->n].path, sizeof(f->kv[0].path), "%s", path);
	f->kv[f->n++].v = neg ? -(double)mag : (double)mag;
	return 0;
}

static double get(const struct flat *f, unsigned shard, const char *key)
{
	char path[96];

	snprintf(path, sizeof(path), "per_shard.%u.%s", shard, key);
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->kv[i].path, path))
			return f->kv[i].v;
	return 0;
}

static char *last_doc; /* the newest answer: class names are strings */

static int sample(const char *path, struct flat *f, unsigned *shards)
{
	char *doc = ask(path, "stats\n", NULL);
	int ret;

	f->n = 0;
	ret = tool_json_walk(doc, keep, f);
	free(last_doc);
	last_doc = doc;
	if (ret)
		return -1;
	*shards = 0;
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->kv[i].path, "shards"))
			*shards = (unsigned)f->kv[i].v;
	return *shards ? 0 : -1;
}

/* ---- the table ---------------------------------------------------------------------- */

static double rate(const struct flat *a, const struct flat *b, unsigned s, const char *k,
		   double secs)
{
	double d = get(b, s, k) - (a ? get(a, s, k) : 0);

	return secs > 0 ? d / secs : 0;
}

static void table(const struct flat *a, const struct flat *b, unsigned shards, double secs)
{
	printf("backend: %s\n", get(b, 0, "ring.backend") == 1 ? "epoll (the fallback: io_uring "
		"is refused here or CORIO_BACKEND=epoll)" : "io_uring");
	printf("%5s %4s %9s %6s %6s %9s %9s %6s %9s %6s %7s %9s %8s %8s %8s %8s %6s %7s %8s %6s %9s\n",
	       "shard", "cpu", "turns/s", "busy%", "cpu%", "enters/s", "sqes/s", "sq/ent", "cqes/s", "cq/wk",
	       "fibers", "switch/s", "msgin/s", "msgout/s", "netinMB", "netoutMB", "conns",
	       "starved", "rearm/s", "stalls", "turnmax");
	for (unsigned s = 0; s < shards; s++) {
		double busy = rate(a, b, s, "loop.busy_ns", secs);
		double idle = rate(a, b, s, "loop.idle_ns", secs);
		double enters = rate(a, b, s, "ring.enters", secs);
		double sqes = rate(a, b, s, "ring.sqes", secs);
		double wakes = rate(a, b, s, "ring.wakes", secs);
		double wcq = rate(a, b, s, "ring.wake_cqes", secs);

		printf("%5u %4.0f %9.0f %6.1f %6.1f %9.0f %9.0f %6.2f %9.0f %6.2f %7.0f %9.0f %8.0f %8.0f "
		       "%8.2f %8.2f %6.0f %7.0f %8.0f %6.0f %7.2fms\n",
		       s, get(b, s, "cpu"), rate(a, b, s, "loop.turns", secs),
		       busy + idle > 0 ? 100.0 * busy / (busy + idle) : 0,
		       rate(a, b, s, "loop.cpu_ns", secs) / 1e7, enters, sqes,
		       enters > 0 ? sqes / enters : 0, rate(a, b, s, "ring.cqes", secs),
		       wakes > 0 ? wcq / wakes : 0, get(b, s, "fibers.live"),
		       rate(a, b, s, "fibers.switches", secs), rate(a, b, s, "msg.received", secs),
		       rate(a, b, s, "msg.sent", secs), rate(a, b, s, "net.bytes_in", secs) / 1e6,
		       rate(a, b, s, "net.bytes_out", secs) / 1e6, get(b, s, "net.conns_live"),
		       get(b, s, "net.starved"), rate(a, b, s, "net.rearms", secs),
		       get(b, s, "loop.stalls"), get(b, s, "loop.turn_max_ns") / 1e6);
	}
}

static bool has(const struct flat *f, unsigned shard, const char *key)
{
	char path[96];

	snprintf(path, sizeof(path), "per_shard.%u.%s", shard, key);
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->kv[i].path, path))
			return true;
	return false;
}

/* Class c's name and latency flag (strings and booleans, which the flat
 * view leaves out), from the answer's first object of it: ids are
 * runtime-wide. */
static bool class_name(unsigned c, char *out, size_t len)
{
	char key[40];
	const char *p;
	size_t n = 0;

	snprintf(key, sizeof(key), "{\"id\":%u,\"name\":\"", c);
	p = last_doc ? strstr(last_doc, key) : NULL;
	if (p)
		for (p += strlen(key); *p && *p != '"' && n + 1 < len; p++)
			out[n++] = *p;
	out[n] = '\0';
	return p && !strncmp(p, "\",\"latency\":true", 16);
}

/* Scheduling classes (docs/SCHED.md): per shard, each class's share of
 * the shard's time, slices, fibers run, slices cut, yields and queue delay. */
static void class_table(const struct flat *a, const struct flat *b, unsigned shards, double secs)
{
	printf("classes:\n%5s %-16s %6s %4s %6s %8s %9s %7s %8s %9s %9s %9s\n", "shard", "class",
	       "shares", "lat", "cpu%", "slices/s", "fibers/s", "cut/s", "yield/s", "qd avg", "qd p99",
	       "qd max");
	for (unsigned s = 0; s < shards; s++)
		for (unsigned c = 0;; c++) {
			char k[64], name[24];
			double fib, wait;
			bool lat;

			snprintf(k, sizeof(k), "classes.%u.cpu_ns", c);
			if (!has(b, s, k))
				break;
#define CK(field) (snprintf(k, sizeof(k), "classes.%u." field, c), k)
			lat = class_name(c, name, sizeof(name));
			fib = rate(a, b, s, CK("fibers_run"), secs);
			wait = rate(a, b, s, CK("wait_ns"), secs);
			printf("%5u %-16s %6.0f %4s %6.1f %8.0f %9.0f %7.0f %8.0f %7.0fus %7.0fus %7.0fus\n",
			       s, name, get(b, s, CK("shares")), lat ? "yes" : "",
			       rate(a, b, s, CK("cpu_ns"), secs) / 1e7, rate(a, b, s, CK("runs"), secs),
			       fib, rate(a, b, s, CK("slices_cut"), secs),
			       rate(a, b, s, CK("yields"), secs), fib > 0 ? wait / fib / 1e3 : 0,
			       get(b, s, CK("wait_p99_ns")) / 1e3, get(b, s, CK("wait_max_ns")) / 1e3);
#undef CK
		}
}

/* The tls group: counts since start, and rates for handshakes and bytes. */
static void tls_table(const struct flat *a, const struct flat *b, unsigned shards, double secs)
{
	const char *ktls = get(b, 0, "tls.ktls") ? "offered by the kernel" : "not in this kernel";
	double any = 0;

	for (unsigned s = 0; s < shards; s++)
		any += get(b, s, "tls.handshakes") + get(b, s, "tls.handshake_failed") +
		       get(b, s, "tls.sessions_live");
	if (!any) {
		printf("tls: no sessions (kTLS %s)\n", ktls);
		return;
	}
	printf("tls (kTLS %s):\n", ktls);
	printf("%5s %8s %10s %8s %8s %8s %8s %8s %8s %8s %8s\n", "shard", "sessions", "handshakes",
	       "hs/s", "resumed", "failed", "verifyf", "proto", "trunc", "inMB/s", "outMB/s");
	for (unsigned s = 0; s < shards; s++)
		printf("%5u %8.0f %10.0f %8.1f %8.0f %8.0f %8.0f %8.0f %8.0f %8.2f %8.2f\n", s,
		       get(b, s, "tls.sessions_live"), get(b, s, "tls.handshakes"),
		       rate(a, b, s, "tls.handshakes", secs), get(b, s, "tls.resumed"),
		       get(b, s, "tls.handshake_failed"), get(b, s, "tls.verify_failed"),
		       get(b, s, "tls.proto_errors"), get(b, s, "tls.truncated"),
		       rate(a, b, s, "tls.bytes_in", secs) / 1e6,
		       rate(a, b, s, "tls.bytes_out", secs) / 1e6);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *path;
static double watch;
static int form; /* 0: the table; 1 --json, 2 --prom: the answer as it is */
static const struct tool_opt opts[] = {
	{ TOOL_OPT_STRING(NULL, 0, path, "SOCKET", "the runtime's control socket"), .required = 1 },
	{ TOOL_OPT_SET("json", 0, form, 1, "print the server's JSON answer as it is") },
	{ TOOL_OPT_SET("prom", 0, form, 2, "print the server's Prometheus answer as it is") },
	{ TOOL_OPT_SECONDS("watch", 0, watch, 0, 1e6, "SECONDS",
			   "repeat every SECONDS, with rates between samples") },
	{ 0 },
};
static const struct tool_cli cli = { "corio-stat", "SOCKET [--json | --prom] [--watch SECONDS]",
				     NULL, opts };

int main(int argc, char **argv)
{
	static const char *const answers[] = { NULL, "stats\n", "prom\n" };
	const char *raw;
	struct flat f[2] = { { 0 } };
	unsigned shards;
	int cur = 0, have_prev = 0, ret;

	if ((ret = tool_opt_parse(&cli, argc, argv))) /* usage: 1; 2 says the socket failed */
		return ret > 0 ? 0 : 1;
	raw = answers[form];
	for (;;) {
		double t = now_s(), secs;
		static double prev_t;

		if (raw) {
			char *out = ask(path, raw, NULL);

			fputs(out, stdout);
			free(out);
		} else {
			if (sample(path, &f[cur], &shards)) {
				fprintf(stderr, "corio-stat: %s: cannot parse the stats answer\n", path);
				return 2;
			}
			if (have_prev) {
				secs = t - prev_t;
				table(&f[!cur], &f[cur], shards, secs);
				class_table(&f[!cur], &f[cur], shards, secs);
				tls_table(&f[!cur], &f[cur], shards, secs);
			} else {
				/* first sample: averages since the shards started */
				secs = (get(&f[cur], 0, "loop.busy_ns") +
					get(&f[cur], 0, "loop.idle_ns")) / 1e9;
				table(NULL, &f[cur], shards, secs);
				class_table(NULL, &f[cur], shards, secs);
				tls_table(NULL, &f[cur], shards, secs);
			}
			have_prev = 1;
			prev_t = t;
			cur = !cur;
		}
		fflush(stdout);
		if (!watch)
			break;
		usleep((useconds_t)(watch * 1e6));
		if (!raw)
			printf("\n");
	}
	free(f[0].kv);
	free(f[1].kv);
	free(last_doc);
	return 0;
}
