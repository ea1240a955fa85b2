/* SPDX-License-Identifier: MIT */
/* tools/common/load.c - see tool_load.h. */
#include "load.h"
#include "sockperf.h"
#include "timing.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static unsigned char pattern[65536 + TOOL_PATTERN];

uint64_t tool_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tool_load_global_init(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (size_t i = 0; i < sizeof(pattern); i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		pattern[i] = (unsigned char)(x >> 24);
	}
}

/* Where message k of connection c starts in the pattern. */
static size_t pat_off(unsigned c, uint64_t k)
{
	return (size_t)((c * 2654435761u + k * 40503u) % TOOL_PATTERN);
}

/* The header of message k on connection c. */
static void header(unsigned c, uint64_t k, unsigned char h[TOOL_HDR])
{
	for (int i = 0; i < 4; i++)
		h[i] = (unsigned char)(c >> (8 * i));
	for (int i = 0; i < 8; i++)
		h[4 + i] = (unsigned char)(k >> (8 * i));
}

int tool_conn_init(struct tool_conn *c, unsigned id, const struct tool_params *p,
		 struct tool_worker_stats *ws)
{
	uint32_t n = 1;
	uint32_t want = p->rate > 0 ? 4096 : p->pipeline;

	memset(c, 0, sizeof(*c));
	while (n < want)
		n *= 2;
	c->ts = malloc(n * sizeof(*c->ts));
	if (!c->ts)
		return -ENOMEM;
	c->ts_mask = n - 1;
	c->id = id;
	c->size = p->size;
	c->p = p;
	c->ws = ws;
	if (p->rate > 0) {
		c->interval_ns = 1e9 * p->conns / p->rate;
		/* spread the connections evenly over one interval */
		c->phase_ns = c->interval_ns * id / p->conns;
	}
	return 0;
}

void tool_conn_free(struct tool_conn *c)
{
	free(c->ts);
	c->ts = NULL;
}

unsigned tool_conn_room(const struct tool_conn *c)
{
	uint64_t cap = c->p->rate > 0 ? (uint64_t)c->ts_mask + 1 : c->p->pipeline;

	return (unsigned)(cap - (c->tx - c->rx));
}

uint64_t tool_conn_due(const struct tool_conn *c, uint64_t k)
{
	return c->p->start_ns + (uint64_t)(c->phase_ns + (double)k * c->interval_ns);
}

unsigned tool_conn_due_count(const struct tool_conn *c, uint64_t now, uint64_t end_ns)
{
	double first = (double)c->p->start_ns + c->phase_ns;
	uint64_t upto, endk, room = tool_conn_room(c);

	if ((double)now < first)
		return 0;
	upto = (uint64_t)(((double)now - first) / c->interval_ns) + 1;
	endk = (uint64_t)ceil(((double)end_ns - first) / c->interval_ns);
	if (upto > endk)
		upto = endk;
	if (upto <= c->tx)
		return 0;
	return (unsigned)(upto - c->tx < room ? upto - c->tx : room);
}

void tool_conn_fill(struct tool_conn *c, unsigned n, unsigned char *dst, uint64_t t)
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t k = c->tx++;
		unsigned char h[TOOL_HDR];
		size_t hl = c->size < TOOL_HDR ? c->size : TOOL_HDR;

		header(c->id, k, h);
		memcpy(dst, h, hl);
		memcpy(dst + hl, pattern + pat_off(c->id, k) + hl, c->size - hl);
		dst += c->size;
		c->ts[k & c->ts_mask] = c->p->rate > 0 ? tool_conn_due(c, k) : t;
	}
}

static void vfail(struct tool_worker_stats *ws, const char *fmt, va_list ap)
{
	if (atomic_fetch_add(&ws->errors, 1) == 0)
		vsnprintf(ws->err, sizeof(ws->err), fmt, ap);
}

void tool_worker_fail(struct tool_worker_stats *ws, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(ws, fmt, ap);
	va_end(ap);
}

void tool_conn_fail(struct tool_conn *c, const char *fmt, ...)
{
	va_list ap;

	if (c->failed)
		return;
	c->failed = 1;
	va_start(ap, fmt);
	vfail(c->ws, fmt, ap);
	va_end(ap);
}

/* Check k bytes of message m starting at its byte off: 0, or -EPROTO with
 * the first wrong byte recorded. */
static int verify(struct tool_conn *c, uint64_t m, size_t off, const unsigned char *data, size_t k)
{
	size_t from = off < TOOL_HDR ? TOOL_HDR - off : 0;

	/* header bytes one by one, the pattern part with memcmp */
	if (off < TOOL_HDR) {
		unsigned char h[TOOL_HDR];
		size_t hk = TOOL_HDR - off;

		header(c->id, m, h);
		if (hk > k)
			hk = k;
		for (size_t i = 0; i < hk; i++)
			if (data[i] != h[off + i]) {
				tool_conn_fail(c, "conn %u: message %llu byte %zu: got 0x%02x, "
					     "expected 0x%02x (header)", c->id,
					     (unsigned long long)m, off + i, data[i], h[off + i]);
				return -EPROTO;
			}
	}
	if (from < k && memcmp(data + from, pattern + pat_off(c->id, m) + off + from, k - from)) {
		size_t i = from;

		while (data[i] == pattern[pat_off(c->id, m) + off + i])
			i++;
		tool_conn_fail(c, "conn %u: message %llu byte %zu: got 0x%02x, expected 0x%02x",
			     c->id, (unsigned long long)m, off + i, data[i],
			     pattern[pat_off(c->id, m) + off + i]);
		return -EPROTO;
	}
	return 0;
}

/* A message sent (or due) at t was echoed whole at now. */
static void count_done(struct tool_conn *c, uint64_t t, uint64_t now)
{
	uint64_t w0 = tool_warm_end(c->p), w1 = tool_meas_end(c->p);

	if (t >= w0 && t < w1) {
		tool_hist_add(&c->ws->hist, now > t ? now - t : 0);
		c->ws->msgs++;
	}
}

static void add_done(struct tool_conn *c, int done)
{
	if (done)
		atomic_store_explicit(&c->ws->done_all,
				      atomic_load_explicit(&c->ws->done_all, memory_order_relaxed) +
					      (uint64_t)done,
				      memory_order_relaxed);
}

int tool_conn_rx(struct tool_conn *c, const unsigned char *data, size_t n, uint64_t now)
{
	int done = 0;

	while (n) {
		size_t k = c->size - c->rx_off, off = c->rx_off;
		uint64_t m = c->rx;

		if (m >= c->tx) {
			tool_conn_fail(c, "conn %u: %zu bytes echoed beyond the %llu messages sent",
				     c->id, n, (unsigned long long)c->tx);
			return -EPROTO;
		}
		if (k > n)
			k = n;
		if (verify(c, m, off, data, k))
			return -EPROTO;
		data += k;
		n -= k;
		c->rx_off += k;
		if (c->rx_off == c->size) {
			c->rx_off = 0;
			c->rx++;
			done++;
			count_done(c, c->ts[m & c->ts_mask], now);
		}
	}
	add_done(c, done);
	return done;
}

/* ---- UDP ---------------------------------------------------------------------- */

int tool_uconn_init(struct tool_uconn *u, unsigned id, const struct tool_params *p,
		  struct tool_worker_stats *ws)
{
	int ret = tool_conn_init(&u->c, id, p, ws);
	size_t n;

	u->seq = NULL;
	u->state = NULL;
	u->top = 0;
	if (ret)
		return ret;
	n = (size_t)u->c.ts_mask + 1;
	u->seq = malloc(n * sizeof(*u->seq));
	u->state = calloc(n, 1);
	if (!u->seq || !u->state) {
		tool_uconn_free(u);
		return -ENOMEM;
	}
	memset(u->seq, 0xff, n * sizeof(*u->seq));
	return 0;
}

void tool_uconn_free(struct tool_uconn *u)
{
	tool_conn_free(&u->c);
	free(u->seq);
	free(u->state);
	u->seq = NULL;
	u->state = NULL;
}

void tool_uconn_fill(struct tool_uconn *u, unsigned char *dst, uint64_t t)
{
	uint64_t k = u->c.tx;

	tool_conn_fill(&u->c, 1, dst, t);
	u->seq[k & u->c.ts_mask] = k;
	u->state[k & u->c.ts_mask] = TOOL_U_PENDING;
}

void tool_uconn_unfill(struct tool_uconn *u)
{
	uint64_t k = --u->c.tx;

	u->seq[k & u->c.ts_mask] = UINT64_MAX;
	u->state[k & u->c.ts_mask] = TOOL_U_FREE;
}

/* Move c.rx past the datagrams that are settled (echoed or lost). */
static void settle(struct tool_uconn *u)
{
	while (u->c.rx < u->c.tx && u->state[u->c.rx & u->c.ts_mask] != TOOL_U_PENDING)
		u->c.rx++;
}

int tool_uconn_rx(struct tool_uconn *u, const unsigned char *data, size_t n, uint64_t now)
{
	struct tool_conn *c = &u->c;
	uint64_t m = 0;
	unsigned id = 0;
	size_t i;

	if (n != c->size) {
		tool_conn_fail(c, "conn %u: a %zu-byte datagram came back for %zu-byte ones", c->id, n,
			     c->size);
		return -EPROTO;
	}
	for (i = 0; i < 4; i++)
		id |= (unsigned)data[i] << (8 * i);
	for (i = 0; i < 8; i++)
		m |= (uint64_t)data[4 + i] << (8 * i);
	if (id != c->id || m >= c->tx) {
		tool_conn_fail(c, "conn %u: a datagram came back that was not sent (conn %u, "
			     "number %llu of %llu sent)", c->id, id, (unsigned long long)m,
			     (unsigned long long)c->tx);
		return -EPROTO;
	}
	if (verify(c, m, 0, data, n))
		return -EPROTO;
	i = m & c->ts_mask;
	if (u->seq[i] != m || u->state[i] == TOOL_U_GOT) {
		c->ws->dup++;
		return 0;
	}
	if (u->state[i] == TOOL_U_LOST) {
		c->ws->late++;
		return 0;
	}
	u->state[i] = TOOL_U_GOT;
	if (m + 1 < u->top)
		c->ws->reordered++;
	else
		u->top = m + 1;
	count_done(c, c->ts[i], now);
	add_done(c, 1);
	settle(u);
	return 1;
}

unsigned tool_uconn_expire(struct tool_uconn *u, uint64_t now)
{
	struct tool_conn *c = &u->c;
	uint64_t loss = tool_s_to_ns(c->p->loss_s);
	unsigned n = 0;

	settle(u);
	while (c->rx < c->tx) {
		size_t i = c->rx & c->ts_mask;

		if (u->state[i] == TOOL_U_PENDING) {
			if (now < c->ts[i] || now - c->ts[i] < loss)
				break;
			u->state[i] = TOOL_U_LOST;
			c->ws->lost++;
			n++;
		}
		c->rx++;
	}
	settle(u);
	return n;
}

uint64_t tool_uconn_next_loss(const struct tool_uconn *u)
{
	const struct tool_conn *c = &u->c;

	if (c->rx >= c->tx)
		return UINT64_MAX;
	return c->ts[c->rx & c->ts_mask] + tool_s_to_ns(c->p->loss_s);
}

uint64_t tool_warm_end(const struct tool_params *p)
{
	return p->start_ns + tool_s_to_ns(p->warmup_s);
}

uint64_t tool_meas_end(const struct tool_params *p)
{
	return tool_warm_end(p) + tool_s_to_ns(p->duration_s);
}

uint64_t tool_drain_end(const struct tool_params *p)
{
	return tool_meas_end(p) + tool_s_to_ns(p->drain_s);
}

/* ---- probe ------------------------------------------------------------------ */

int tool_probe(const struct tool_params *p, int sockperf)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p->port) };
	struct timeval tv = { .tv_sec = 2 };
	size_t size = sockperf ? TOOL_SP_HDR + 16 : p->size;
	unsigned char *out = malloc(size), *in = malloc(size);
	int fd = -1, one = 1, ret = 0;
	size_t got = 0;

	if (!out || !in) {
		ret = -ENOMEM;
		goto done;
	}
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		fprintf(stderr, "probe: connect to 127.0.0.1:%d: %s\n", p->port, strerror(errno));
		goto done;
	}
	for (size_t i = 0; i < size; i++)
		out[i] = pattern[i + 77];
	if (sockperf) { /* one ping-pong message: seq 1, client + reply */
		memset(out, 0, TOOL_SP_HDR);
		out[7] = 1;
		out[9] = TOOL_SP_F_CLIENT | TOOL_SP_F_REPLY;
		out[13] = (unsigned char)size;
	}
	if (send(fd, out, size, MSG_NOSIGNAL) != (ssize_t)size) {
		ret = -EIO;
		fprintf(stderr, "probe: send: %s\n", strerror(errno));
		goto done;
	}
	while (got < size) {
		ssize_t k = recv(fd, in + got, size - got, 0);

		if (k <= 0) {
			ret = k ? -errno : -ECONNRESET;
			fprintf(stderr, "probe: no echo (%s)\n",
				k ? strerror(errno) : "connection closed");
			goto done;
		}
		got += (size_t)k;
	}
	if (sockperf)
		out[9] &= (unsigned char)~TOOL_SP_F_CLIENT;
	if (memcmp(in, out, size)) {
		ret = -EPROTO;
		fprintf(stderr, "probe: the echo differs from what was sent\n");
	}
done:
	if (fd >= 0)
		close(fd);
	free(out);
	free(in);
	return ret;
}

int tool_probe_udp(const struct tool_params *p)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p->port) };
	struct timeval tv = { .tv_sec = 2 };
	unsigned char *out = malloc(p->size), *in = malloc(p->size + 1);
	int fd = -1, ret = 0;
	ssize_t k;

	if (!out || !in) {
		ret = -ENOMEM;
		goto done;
	}
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		fprintf(stderr, "probe: udp socket to 127.0.0.1:%d: %s\n", p->port, strerror(errno));
		goto done;
	}
	for (size_t i = 0; i < p->size; i++)
		out[i] = pattern[i + 77];
	if (send(fd, out, p->size, 0) != (ssize_t)p->size) {
		ret = -EIO;
		fprintf(stderr, "probe: send: %s\n", strerror(errno));
		goto done;
	}
	k = recv(fd, in, p->size + 1, 0);
	if (k < 0) {
		ret = -errno;
		fprintf(stderr, "probe: no echo within 2 s (%s)\n", strerror(errno));
	} else if ((size_t)k != p->size || memcmp(in, out, p->size)) {
		ret = -EPROTO;
		fprintf(stderr, "probe: the echo differs from what was sent\n");
	}
done:
	if (fd >= 0)
		close(fd);
	free(out);
	free(in);
	return ret;
}

/* ---- CPU time ------------------------------------------------------------------ */

int64_t tool_proc_cpu_ns(int pid)
{
	char path[64], buf[512];
	DIR *d;
	struct dirent *e;
	int64_t sum = 0;
	int any = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (d) {
		while ((e = readdir(d))) {
			char p2[96];
			unsigned long long ns;

			if (e->d_name[0] == '.')
				continue;
			snprintf(p2, sizeof(p2), "/proc/%d/task/%.20s/schedstat", pid, e->d_name);
			f = fopen(p2, "r");
			if (!f)
				continue;
			if (fscanf(f, "%llu", &ns) == 1) {
				sum += (int64_t)ns;
				any = 1;
			}
			fclose(f);
		}
		closedir(d);
		if (any)
			return sum;
	}
	/* no schedstat: utime + stime in clock ticks */
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	{
		char *q = strrchr(buf, ')');
		unsigned long long ut, st;

		if (!q || sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				 &ut, &st) != 2)
			return -1;
		return (int64_t)((ut + st) * (1000000000ull / (unsigned long long)sysconf(_SC_CLK_TCK)));
	}
}

int64_t tool_self_cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (int64_t)ru.ru_utime.tv_sec * 1000000000 + ru.ru_utime.tv_usec * 1000 +
	       (int64_t)ru.ru_stime.tv_sec * 1000000000 + ru.ru_stime.tv_usec * 1000;
}

/* ---- report ------------------------------------------------------------------ */

static const struct { const char *name; double q; } pcts[] = {
	{ "p50", 0.50 }, { "p90", 0.90 }, { "p99", 0.99 }, { "p99.9", 0.999 }, { "p99.99", 0.9999 },
};

void tool_report_print(FILE *f, const struct tool_report *r, const struct tool_params *p, int json)
{
	struct utsname u;
	double mps = r->seconds > 0 ? (double)r->msgs / r->seconds : 0;
	double mbs = mps * (double)p->size / 1e6;
	double srv = r->server_cpu_ns >= 0 && r->msgs ? (double)r->server_cpu_ns / (double)r->msgs : -1;
	double cli = r->msgs ? (double)r->client_cpu_ns / (double)r->msgs : -1;
	const struct tool_hist *h = &r->hist;

	uname(&u);
	if (json) {
		fprintf(f, "{\"tool\":\"corio-load\",\"label\":\"%s\",\"engine\":\"%s\",\"workers\":%u,"
			   "\"cpus\":\"%s\",\"busy_poll\":%d,\"kernel\":\"%s\",\"addr\":\"%s\","
			   "\"conns\":%u,\"size\":%zu,\"mode\":\"%s\",\"pipeline\":%u,\"rate\":%.0f,"
			   "\"seconds\":%.3f,\"msgs\":%llu,\"msgs_per_s\":%.1f,\"mb_per_s\":%.3f,"
			   "\"late_sends\":%llu,\"errors\":%llu,\"proto\":\"%s\",\"lost\":%llu,"
			   "\"late\":%llu,\"dup\":%llu,\"reordered\":%llu,\"tls\":\"%s\","
			   "\"tls_handshakes\":%llu,",
			r->label ? r->label : "", r->engine, r->workers, r->cpus, r->busy_poll,
			u.release, p->addr, p->conns, p->size, p->rate > 0 ? "open" : "closed",
			p->pipeline, p->rate, r->seconds, (unsigned long long)r->msgs, mps, mbs,
			(unsigned long long)r->late_sends, (unsigned long long)r->errors,
			p->udp ? "udp" : "tcp", (unsigned long long)r->lost, (unsigned long long)r->late,
			(unsigned long long)r->dup, (unsigned long long)r->reordered,
			r->tls ? r->tls : "off", (unsigned long long)r->tls_handshakes);
		fprintf(f, "\"lat_us\":{\"min\":%.3f,\"mean\":%.3f", h->count ? (double)h->min / 1e3 : 0,
			tool_hist_mean(h) / 1e3);
		for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++)
			fprintf(f, ",\"%s\":%.3f", pcts[i].name,
				(double)tool_hist_quantile(h, pcts[i].q) / 1e3);
		fprintf(f, ",\"max\":%.3f},\"server_cpu_ns_per_msg\":%.1f,"
			   "\"client_cpu_ns_per_msg\":%.1f}\n",
			(double)h->max / 1e3, srv, cli);
		return;
	}
	fprintf(f, "corio-load: %s engine, %u worker(s) on CPU %s%s; kernel %s\n", r->engine,
		r->workers, r->cpus, r->busy_poll ? ", busy-polling" : "", u.release);
	if (p->udp)
		fprintf(f, "  UDP: each conn is one socket, each message one datagram (lost after %.2f s)\n",
			p->loss_s);
	if (p->rate > 0)
		fprintf(f, "  %s, %u conns, %zu B messages, open loop at %.0f msgs/s, %.1f s measured "
			   "(after %.1f s warm-up)\n", p->addr, p->conns, p->size, p->rate,
			r->seconds, p->warmup_s);
	else
		fprintf(f, "  %s, %u conns, %zu B messages, closed loop, pipeline %u, %.1f s measured "
			   "(after %.1f s warm-up)\n", p->addr, p->conns, p->size, p->pipeline,
			r->seconds, p->warmup_s);
	if (r->tls)
		fprintf(f, "  TLS: %s, %llu handshakes (full, no resumption)\n", r->tls,
			(unsigned long long)r->tls_handshakes);
	fprintf(f, "  %.0f msgs/s, %.2f MB/s each way, %llu messages, %llu errors\n", mps, mbs,
		(unsigned long long)r->msgs, (unsigned long long)r->errors);
	fprintf(f, "  latency us: min %.1f", h->count ? (double)h->min / 1e3 : 0);
	for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++)
		fprintf(f, "  %s %.1f", pcts[i].name, (double)tool_hist_quantile(h, pcts[i].q) / 1e3);
	fprintf(f, "  max %.1f\n", (double)h->max / 1e3);
	if (srv >= 0)
		fprintf(f, "  server CPU %.0f ns/msg,", srv);
	else
		fprintf(f, " ");
	fprintf(f, " client CPU %.0f ns/msg", cli);
	if (p->rate > 0)
		fprintf(f, ", %llu sends late by >= 1 interval", (unsigned long long)r->late_sends);
	fprintf(f, "\n");
	if (p->udp)
		fprintf(f, "  datagrams over the whole run: %llu lost, %llu late, %llu duplicated, "
			   "%llu reordered\n", (unsigned long long)r->lost, (unsigned long long)r->late,
			(unsigned long long)r->dup, (unsigned long long)r->reordered);
	if (r->errors)
		fprintf(f, "  first error: %s\n", r->first_err);
}
