/* SPDX-License-Identifier: MIT */
/*
 * ctl/render.c - every area's counters as JSON or Prometheus text
 * (corio_stats_render).
 *
 * Rendering reads each shard's counters through the areas' public getters
 * (corio_stats_get, corio_msg_stats_get, ...), which load each 64-bit
 * counter with a relaxed atomic load: no locks, no torn values, and a shard
 * is never slowed down by a reader. One table (metrics[]) names every scalar
 * counter once, for both formats, so JSON and Prometheus cannot drift apart.
 */
#include "ctl/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- snapshots -------------------------------------------------------------------- */

struct snap {
	struct corio_stats core;
	struct corio_msg_stats msg;
	struct corio_timer_stats timer;
	struct corio_net_stats net;
	struct corio_fs_stats fs;
	struct corio_work_stats work;
	struct corio_tls_stats tls;
	struct corio__ctl_stats ctl;
	uint64_t doorbells_in;  /* eventfd + MSG_RING doorbells from peers */
	uint64_t lateness_p50, lateness_p99, lateness_p999;
	unsigned ncls; /* scheduling classes of the runtime (ids 0..ncls-1) */
	struct corio_class_stats cls[CORIO_CLASS_MAX];
};

static int snap_take(struct corio_rt *rt, unsigned i, unsigned n, struct snap *sn)
{
	int ret;

	memset(sn, 0, sizeof(*sn));
	ret = corio_stats_get(rt, i, &sn->core);
	if (!ret)
		ret = corio_msg_stats_get(rt, i, CORIO_MSG_PEER_ALL, &sn->msg);
	if (!ret)
		ret = corio_timer_stats_get(rt, i, &sn->timer);
	if (!ret)
		ret = corio_net_stats_get(rt, i, &sn->net);
	if (!ret)
		ret = corio_fs_stats_get(rt, i, &sn->fs);
	if (!ret)
		ret = corio_work_stats_get(rt, i, &sn->work);
	if (!ret)
		ret = corio_tls_stats_get(rt, i, &sn->tls);
	if (ret)
		return ret;
	corio__ctl_stats_get(corio__rt_or_own(rt), i, &sn->ctl);
	sn->doorbells_in = sn->core.doorbells_in;
	for (unsigned p = 0; p < n; p++) {
		struct corio_msg_stats m;

		if (p != i && !corio_msg_stats_get(rt, p, i, &m))
			sn->doorbells_in += m.doorbells;
	}
	sn->ncls = atomic_load_explicit(&corio__rt_or_own(rt)->ncls, memory_order_acquire);
	for (unsigned c = 0; c < sn->ncls; c++)
		if (corio_class_stats_get(rt, i, c, &sn->cls[c]))
			memset(&sn->cls[c], 0, sizeof(sn->cls[c]));
	sn->lateness_p50 = corio_timer_lateness_quantile(&sn->timer, 0.5);
	sn->lateness_p99 = corio_timer_lateness_quantile(&sn->timer, 0.99);
	sn->lateness_p999 = corio_timer_lateness_quantile(&sn->timer, 0.999);
	return 0;
}

/* ---- the metric table ------------------------------------------------------------------ */

enum kind { COUNTER, GAUGE, MAXGAUGE, INFO }; /* INFO: JSON only, not summed */

struct metric {
	const char *group; /* JSON object                                   */
	const char *name;  /* JSON key; Prometheus corio_<group>_<name>     */
	enum kind kind;
	bool ns;           /* nanoseconds: Prometheus gets seconds (_seconds) */
	size_t off;        /* in struct snap                                */
	const char *help;
};

#define M(g, n, k, ns, field, h) { g, n, k, ns, offsetof(struct snap, field), h }

static const struct metric metrics[] = {
	M("loop", "turns", COUNTER, false, core.loop_turns, "Shard loop iterations."),
	M("loop", "busy", COUNTER, true, core.busy_ns, "Time not idle (sum of loop-turn durations)."),
	M("loop", "idle", COUNTER, true, core.idle_ns, "Time blocked or spinning with nothing to do."),
	M("loop", "cpu", COUNTER, true, core.cpu_ns, "CPU time of the shard's thread, user and kernel (kernel work inside a blocking enter included)."),
	M("loop", "poll_gap", COUNTER, true, core.gap_ns, "Sum of the gaps between ring polls."),
	M("loop", "stalls", COUNTER, false, core.stalls, "Fibers or loop turns that ran past stall_ns."),
	M("loop", "turn_max", MAXGAUGE, true, core.turn_max_ns, "Longest loop turn."),
	M("loop", "poll_gap_max", MAXGAUGE, true, core.gap_max_ns, "Longest gap between ring polls."),
	M("ring", "enters", COUNTER, false, core.enters, "io_uring_enter calls."),
	M("ring", "sqes", COUNTER, false, core.sqes, "SQEs submitted."),
	M("ring", "cqes", COUNTER, false, core.cqes, "CQEs reaped."),
	M("ring", "sq_full", COUNTER, false, core.sq_full, "SQE requests that found the SQ full."),
	M("ring", "cq_overflow", COUNTER, false, core.cq_overflow, "Turns that found the CQ overflowed."),
	M("ring", "cqe_dropped", COUNTER, false, core.cqe_dropped, "Completions the kernel dropped (EBADR, out of memory)."),
	M("ring", "wakes", COUNTER, false, core.wakes, "Blocking enters that returned."),
	M("ring", "wake_cqes", COUNTER, false, core.wake_cqes, "CQEs reaped right after a wake-up."),
	M("ring", "doorbells_in", COUNTER, false, doorbells_in, "Wake-ups received (eventfd and MSG_RING)."),
	M("ring", "doorbells_out", COUNTER, false, msg.doorbells, "Wake-ups sent to sleeping peers."),
	M("ring", "setup_flags", INFO, false, core.ring_flags, NULL),
	M("ring", "features", INFO, false, core.ring_features, NULL),
	M("ring", "backend", INFO, false, core.backend, NULL), /* 0 io_uring, 1 epoll */
	M("fibers", "live", GAUGE, false, core.fibers_live, "Fibers that have not ended."),
	M("fibers", "spawned", COUNTER, false, core.fibers_spawned, "Fibers spawned."),
	M("fibers", "switches", COUNTER, false, core.switches, "Context switches into fibers."),
	M("msg", "sent", COUNTER, false, msg.sent, "Messages queued on peers' rings."),
	M("msg", "received", COUNTER, false, msg.received, "Messages from peers run here."),
	M("msg", "full", COUNTER, false, msg.full, "Posts that found a peer's ring full."),
	M("msg", "calls", COUNTER, false, msg.calls, "corio_call requests sent."),
	M("msg", "spawn_failed", COUNTER, false, msg.spawn_failed, "spawn_on requests whose fiber could not start."),
	M("timer", "armed", COUNTER, false, timer.armed, "Timers, sleeps and wait deadlines armed."),
	M("timer", "fired", COUNTER, false, timer.fired, "Timer expirations delivered."),
	M("timer", "cancelled", COUNTER, false, timer.cancelled, "Timers disarmed before expiry."),
	M("timer", "active", GAUGE, false, timer.active, "Timers armed now."),
	M("timer", "kernel_arms", COUNTER, false, timer.kernel_arms, "Timeout SQEs for the timer heap."),
	M("timer", "linked", COUNTER, false, timer.linked, "Kernel ops submitted with a linked timeout."),
	M("timer", "timed_out", COUNTER, false, timer.timed_out, "Blocking calls that returned -ETIMEDOUT."),
	M("timer", "lateness_max", MAXGAUGE, true, timer.lateness_max_ns, "Largest timer lateness."),
	M("timer", "lateness_p50", MAXGAUGE, true, lateness_p50, "Median timer lateness (bucket bound)."),
	M("timer", "lateness_p99", MAXGAUGE, true, lateness_p99, "99th percentile timer lateness."),
	M("timer", "lateness_p999", MAXGAUGE, true, lateness_p999, "99.9th percentile timer lateness."),
	M("net", "accepts", COUNTER, false, net.accepts, "Connections accepted."),
	M("net", "connects", COUNTER, false, net.connects, "Outgoing connections established."),
	M("net", "conns_live", GAUGE, false, net.conns_live, "Stream sockets open now."),
	M("net", "bytes_in", COUNTER, false, net.bytes_in, "Bytes received."),
	M("net", "bytes_out", COUNTER, false, net.bytes_out, "Bytes sent."),
	M("net", "ops_in", COUNTER, false, net.ops_in, "Receive completions with data."),
	M("net", "ops_out", COUNTER, false, net.ops_out, "Send completions."),
	M("net", "enobufs", COUNTER, false, net.enobufs, "Multishot receives stopped by an empty buffer ring."),
	M("net", "rearms", COUNTER, false, net.rearms, "Multishot receives/accepts armed again."),
	M("net", "bufs_out", GAUGE, false, net.bufs_out, "Provided buffers out of the ring now."),
	M("net", "dispatched", COUNTER, false, net.dispatched, "Connections handed to a shard."),
	M("net", "adopted", COUNTER, false, net.adopted, "Connections handed to this shard."),
	M("net", "err_reset", COUNTER, false, net.err_reset, "ECONNRESET errors."),
	M("net", "err_pipe", COUNTER, false, net.err_pipe, "EPIPE errors."),
	M("net", "err_refused", COUNTER, false, net.err_refused, "ECONNREFUSED errors."),
	M("net", "err_timeout", COUNTER, false, net.err_timeout, "ETIMEDOUT errors."),
	M("net", "err_fd_limit", COUNTER, false, net.err_fd_limit, "EMFILE/ENFILE on accept."),
	M("net", "err_other", COUNTER, false, net.err_other, "Other network errors."),
	M("net", "recv_capped", COUNTER, false, net.recv_capped, "Receives stopped by a socket's unread-buffer cap."),
	M("net", "send_full", COUNTER, false, net.send_full, "corio_send_buf calls that waited for a full queue."),
	M("net", "recv_hup", COUNTER, false, net.recv_hup, "Multishot receives stopped by the error/hang-up poll."),
	M("net", "conns_refused", COUNTER, false, net.conns_refused, "Accepted connections closed at once: the listener's max_conns was reached."),
	M("net", "send_gathered", COUNTER, false, net.send_gathered, "corio_send_buf records sent in one SENDMSG with the record before them."),
	M("net", "udp_send_again", COUNTER, false, net.udp_send_again, "corio_sendto datagrams a full send buffer refused at once, sent through the ring."),
	M("net", "send_direct", COUNTER, false, net.send_direct, "TCP sends the socket took (all or part) in a direct sendmsg(2), without the ring."),
	M("net", "udp_truncated", COUNTER, false, net.udp_truncated, "Datagrams over a receive buffer's payload room: dropped, -EMSGSIZE to the reader."),
	M("net", "recv_budget", COUNTER, false, net.recv_budget, "Stream receives refused or stopped by the shard-wide buffer budget (CORIO_NET_RECV_RESERVE)."),
	M("net", "resolve_hits", COUNTER, false, net.resolve_hits, "Host names answered from the shard's cache (negative answers too)."),
	M("net", "resolve_misses", COUNTER, false, net.resolve_misses, "Host names looked up (not in the cache): c-ares on the shard, or getaddrinfo on the work pool."),
	M("net", "resolve_failed", COUNTER, false, net.resolve_failed, "Name resolutions that failed (no such name, cached or not; resolver errors)."),
	M("net", "starved", GAUGE, false, net.starved, "Receives waiting now for a free ring buffer, armed again in order as buffers return."),
	M("net", "starved_armed", COUNTER, false, net.starved_armed, "Starved receives armed again as buffers returned."),
	M("net", "resolve_shared", COUNTER, false, net.resolve_shared, "Lookups that joined a query in flight for the same name."),
	M("net", "resolve_pool", COUNTER, false, net.resolve_pool, "Lookups answered by getaddrinfo on the work pool (a source c-ares cannot read)."),
	M("tls", "sessions_live", GAUGE, false, tls.sessions_live, "TLS sessions open now."),
	M("tls", "handshakes", COUNTER, false, tls.handshakes, "TLS handshakes completed, server and client."),
	M("tls", "resumed", COUNTER, false, tls.resumed, "Completed TLS handshakes that resumed a session (a ticket)."),
	M("tls", "handshake_failed", COUNTER, false, tls.handshake_failed, "TLS handshakes that ended with an error."),
	M("tls", "verify_failed", COUNTER, false, tls.verify_failed, "Failed TLS handshakes whose peer certificate was refused."),
	M("tls", "proto_errors", COUNTER, false, tls.proto_errors, "TLS sessions ended by a protocol error or fatal alert."),
	M("tls", "truncated", COUNTER, false, tls.truncated, "TLS connections whose TCP stream ended without close_notify."),
	M("tls", "notify_sent", COUNTER, false, tls.notify_sent, "TLS close_notify alerts sent."),
	M("tls", "bytes_in", COUNTER, false, tls.bytes_in, "Decrypted bytes read from TLS sessions."),
	M("tls", "bytes_out", COUNTER, false, tls.bytes_out, "Plaintext bytes written to TLS sessions."),
	M("tls", "cache_hits", COUNTER, false, tls.cache_hits, "Client TLS handshakes that offered a cached session."),
	M("tls", "ktls", MAXGAUGE, false, tls.ktls, "1 when the kernel offers the tls ULP (kTLS could be used), else 0."),
	M("ctl", "clients", GAUGE, false, ctl.clients, "Control-socket clients connected now."),
	M("ctl", "refused", COUNTER, false, ctl.refused, "Control-socket clients turned away: CORIO_CONTROL_CLIENTS were connected."),
	M("ctl", "idle_dropped", COUNTER, false, ctl.idle_dropped, "Control-socket clients closed at the idle limit."),
	M("ctl", "denied", COUNTER, false, ctl.denied, "Control-socket clients refused by the peer-credential check."),
	M("ctl", "too_long", COUNTER, false, ctl.too_long, "Control-socket clients closed for a line over 255 bytes."),
	M("ctl", "metrics_evicted", COUNTER, false, ctl.metrics_evicted, "HTTP /metrics connections closed to give their slot to a newer one: no complete request yet."),
	M("ctl", "metrics_refused", COUNTER, false, ctl.metrics_refused, "HTTP /metrics connections closed at accept: every slot was answering a request."),
	M("work", "submitted", COUNTER, false, work.submitted, "Blocking-work jobs this shard queued (corio_work)."),
	M("work", "done", COUNTER, false, work.done, "Jobs whose function returned to a waiting fiber."),
	M("work", "abandoned", COUNTER, false, work.abandoned, "Jobs the caller left (cancel, deadline, shutdown); their release ran or runs when they end."),
	M("work", "refused", COUNTER, false, work.refused, "corio_work calls refused because the queue was full."),
	M("work", "wait", COUNTER, true, work.wait_ns, "Time jobs waited in the queue for a pool thread."),
	M("work", "run", COUNTER, true, work.run_ns, "Time job functions ran on pool threads."),
	M("work", "pool_queued", INFO, false, work.queued, "Jobs waiting for a pool thread now (whole pool)."),
	M("work", "pool_running", INFO, false, work.running, "Jobs running now (whole pool)."),
	M("work", "pool_threads", INFO, false, work.threads, "Pool threads started (whole pool)."),
	M("fs", "sync_fallbacks", COUNTER, false, fs.sync_fallbacks, "File calls done with a blocking syscall."),
	M("fs", "dma_allocs", COUNTER, false, fs.dma_allocs, "corio_dma_alloc calls."),
	M("fs", "dma_cache_hits", COUNTER, false, fs.dma_cache_hits, "DMA allocations served from the cache."),
	M("fs", "dma_cached", GAUGE, false, fs.dma_cached, "Bytes held in the DMA buffer cache."),
	M("fs", "open_cached", COUNTER, false, fs.open_cached, "Opens done on the spot from the dentry cache."),
};
#define NMETRICS (sizeof(metrics) / sizeof(metrics[0]))

static const char *const fs_kinds[CORIO_FS_NKINDS] = {
	[CORIO_FS_OPEN] = "open",         [CORIO_FS_CLOSE] = "close",
	[CORIO_FS_READ] = "read",         [CORIO_FS_WRITE] = "write",
	[CORIO_FS_FSYNC] = "fsync",       [CORIO_FS_STATX] = "statx",
	[CORIO_FS_FALLOCATE] = "fallocate", [CORIO_FS_RENAME] = "rename",
	[CORIO_FS_UNLINK] = "unlink",     [CORIO_FS_MKDIR] = "mkdir",
};

static uint64_t val(const struct snap *sn, const struct metric *m)
{
	uint64_t v;

	memcpy(&v, (const char *)sn + m->off, sizeof(v));
	return v;
}

static void set_val(struct snap *sn, const struct metric *m, uint64_t v)
{
	memcpy((char *)sn + m->off, &v, sizeof(v));
}

/* Sum shard snapshots into a total (maxima stay maxima). */
static void snap_add(struct snap *tot, const struct snap *sn)
{
	for (size_t i = 0; i < NMETRICS; i++) {
		const struct metric *m = &metrics[i];
		uint64_t a = val(tot, m), b = val(sn, m);

		if (m->kind == MAXGAUGE)
			set_val(tot, m, a > b ? a : b);
		else if (m->kind != INFO)
			set_val(tot, m, a + b);
	}
	for (unsigned b = 0; b < CORIO_STATS_HIST_BUCKETS; b++) {
		tot->core.turn_hist[b] += sn->core.turn_hist[b];
		tot->core.gap_hist[b] += sn->core.gap_hist[b];
	}
	/* classes by id: a class is the same on every shard */
	tot->ncls = sn->ncls > tot->ncls ? sn->ncls : tot->ncls;
	for (unsigned c = 0; c < sn->ncls; c++) {
		struct corio_class_stats *t = &tot->cls[c];
		const struct corio_class_stats *x = &sn->cls[c];

		if (!t->name[0]) {
			memcpy(t->name, x->name, sizeof(t->name));
			t->id = x->id;
			t->flags = x->flags;
		}
		t->shares += x->shares;
		t->cpu_ns += x->cpu_ns;
		t->runs += x->runs;
		t->fibers_run += x->fibers_run;
		t->slices_cut += x->slices_cut;
		t->yields += x->yields;
		t->wait_ns += x->wait_ns;
		if (x->wait_max_ns > t->wait_max_ns)
			t->wait_max_ns = x->wait_max_ns;
		for (unsigned k = 0; k < CORIO_STATS_HIST_BUCKETS; k++)
			t->wait_hist[k] += x->wait_hist[k];
	}
	for (unsigned k = 0; k < CORIO_FS_NKINDS; k++) {
		tot->fs.kind[k].ops += sn->fs.kind[k].ops;
		tot->fs.kind[k].bytes += sn->fs.kind[k].bytes;
		tot->fs.kind[k].errors += sn->fs.kind[k].errors;
	}
}

/* ---- output buffer ------------------------------------------------------------------- */

struct sb {
	char *p;
	size_t len, cap;
	int err;
};

static void sb_printf(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sb *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->err = -EINVAL;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = b->cap * 2 + (size_t)n + 1;
		char *np = realloc(b->p, ncap);

		if (!np) {
			b->err = -ENOMEM;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
}

/* ---- JSON ------------------------------------------------------------------------------ */

static void json_hist(struct sb *b, const char *key, const uint64_t *h)
{
	sb_printf(b, "\"%s\":[", key);
	for (unsigned i = 0; i < CORIO_STATS_HIST_BUCKETS; i++)
		sb_printf(b, "%s%llu", i ? "," : "", (unsigned long long)h[i]);
	sb_printf(b, "]");
}

/* "classes": one object per scheduling class (corio/sched.h). In the
 * totals, shares is the sum over shards. */
static void json_classes(struct sb *b, const struct snap *sn, bool shard)
{
	sb_printf(b, ",\"classes\":[");
	for (unsigned c = 0; c < sn->ncls; c++) {
		const struct corio_class_stats *x = &sn->cls[c];

		sb_printf(b, "%s{\"id\":%u,\"name\":\"%s\",\"latency\":%s,\"%s\":%u,"
			  "\"cpu_ns\":%llu,\"runs\":%llu,\"fibers_run\":%llu,\"slices_cut\":%llu,"
			  "\"yields\":%llu,\"wait_ns\":%llu,\"wait_max_ns\":%llu,"
			  "\"wait_p99_ns\":%llu,\"wait_p999_ns\":%llu,",
			  c ? "," : "", c, x->name, x->flags & CORIO_CLASS_LATENCY ? "true" : "false",
			  shard ? "shares" : "shares_sum", x->shares,
			  (unsigned long long)x->cpu_ns, (unsigned long long)x->runs,
			  (unsigned long long)x->fibers_run, (unsigned long long)x->slices_cut,
			  (unsigned long long)x->yields, (unsigned long long)x->wait_ns,
			  (unsigned long long)x->wait_max_ns,
			  (unsigned long long)corio_class_wait_quantile(x, 0.99),
			  (unsigned long long)corio_class_wait_quantile(x, 0.999));
		json_hist(b, "wait_hist", x->wait_hist);
		sb_printf(b, "}");
	}
	sb_printf(b, "]");
}

static void json_shard(struct sb *b, const struct snap *sn, int shard)
{
	const char *group = NULL;
	bool first = true;

	sb_printf(b, "{");
	if (shard >= 0)
		sb_printf(b, "\"shard\":%d,\"cpu\":%llu,", shard, (unsigned long long)sn->core.cpu);
	for (size_t i = 0; i < NMETRICS; i++) {
		const struct metric *m = &metrics[i];

		if (shard < 0 && m->kind == INFO)
			continue;
		if (!group || strcmp(group, m->group)) {
			if (group && !strcmp(group, "loop")) {
				sb_printf(b, ",");
				json_hist(b, "turn_hist", sn->core.turn_hist);
				sb_printf(b, ",");
				json_hist(b, "poll_gap_hist", sn->core.gap_hist);
			}
			sb_printf(b, "%s\"%s\":{", group ? "}," : "", m->group);
			group = m->group;
			first = true;
		}
		sb_printf(b, "%s\"%s%s\":%llu", first ? "" : ",", m->name, m->ns ? "_ns" : "",
			  (unsigned long long)val(sn, m));
		first = false;
	}
	/* the table ends with the fs group: add its per-kind objects (each
	 * group's rows must be contiguous: a group seen twice would be two
	 * objects under one key, and JSON readers keep only the last) */
	sb_printf(b, ",\"kinds\":{");
	for (unsigned k = 0; k < CORIO_FS_NKINDS; k++)
		sb_printf(b, "%s\"%s\":{\"ops\":%llu,\"bytes\":%llu,\"errors\":%llu}", k ? "," : "",
			  fs_kinds[k], (unsigned long long)sn->fs.kind[k].ops,
			  (unsigned long long)sn->fs.kind[k].bytes,
			  (unsigned long long)sn->fs.kind[k].errors);
	sb_printf(b, "}}");
	json_classes(b, sn, shard >= 0);
	sb_printf(b, "}");
}

static void render_json(struct sb *b, const struct snap *sn, unsigned n, const struct snap *tot)
{
	sb_printf(b, "{\"version\":1,\"time_ns\":%llu,\"shards\":%u,\"hist_bounds_ns\":[",
		  (unsigned long long)corio_now_ns(), n);
	for (unsigned i = 0; i + 1 < CORIO_STATS_HIST_BUCKETS; i++)
		sb_printf(b, "%s%llu", i ? "," : "", (unsigned long long)corio_stats_hist_bucket_ns(i));
	sb_printf(b, "],\"per_shard\":[");
	for (unsigned i = 0; i < n; i++) {
		if (i)
			sb_printf(b, ",");
		json_shard(b, &sn[i], (int)i);
	}
	sb_printf(b, "],\"totals\":");
	json_shard(b, tot, -1);
	sb_printf(b, "}\n");
}

/* ---- Prometheus ---------------------------------------------------------------------------- */

static void prom_num(struct sb *b, uint64_t v, bool ns)
{
	if (ns)
		sb_printf(b, "%llu.%09llu\n", (unsigned long long)(v / 1000000000ull),
			  (unsigned long long)(v % 1000000000ull));
	else
		sb_printf(b, "%llu\n", (unsigned long long)v);
}

static void prom_hist(struct sb *b, const char *name, const char *help, const struct snap *sn,
		      unsigned n, size_t hoff, size_t soff)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (unsigned i = 0; i < n; i++) {
		const uint64_t *h = (const uint64_t *)((const char *)&sn[i] + hoff);
		uint64_t sum, cum = 0;

		memcpy(&sum, (const char *)&sn[i] + soff, sizeof(sum));
		for (unsigned k = 0; k < CORIO_STATS_HIST_BUCKETS; k++) {
			uint64_t le = corio_stats_hist_bucket_ns(k);

			cum += h[k];
			if (le == UINT64_MAX)
				sb_printf(b, "%s_bucket{shard=\"%u\",le=\"+Inf\"} %llu\n", name, i,
					  (unsigned long long)cum);
			else
				sb_printf(b, "%s_bucket{shard=\"%u\",le=\"%.9g\"} %llu\n", name, i,
					  (double)le / 1e9, (unsigned long long)cum);
		}
		sb_printf(b, "%s_sum{shard=\"%u\"} ", name, i);
		prom_num(b, sum, true);
		sb_printf(b, "%s_count{shard=\"%u\"} %llu\n", name, i, (unsigned long long)cum);
	}
}

/* Per scheduling class and shard, labelled with the class's name. */
static void prom_classes(struct sb *b, const struct snap *sn, unsigned n)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
		bool ns;
	} cm[] = {
		{ "corio_class_shares", "gauge", "The class's shares on the shard.",
		  offsetof(struct corio_class_stats, shares), false },
		{ "corio_class_cpu_seconds_total", "counter", "Time the class's fibers ran.",
		  offsetof(struct corio_class_stats, cpu_ns), true },
		{ "corio_class_runs_total", "counter", "Slices: loop turns that ran the class.",
		  offsetof(struct corio_class_stats, runs), false },
		{ "corio_class_fibers_run_total", "counter", "Fibers of the class resumed.",
		  offsetof(struct corio_class_stats, fibers_run), false },
		{ "corio_class_slices_cut_total", "counter",
		  "Slices that ended with fibers of the class still ready.",
		  offsetof(struct corio_class_stats, slices_cut), false },
		{ "corio_class_yields_total", "counter", "corio_maybe_yield calls that yielded.",
		  offsetof(struct corio_class_stats, yields), false },
		{ "corio_class_queue_delay_max_seconds", "gauge",
		  "Longest time a fiber of the class was ready before it ran.",
		  offsetof(struct corio_class_stats, wait_max_ns), true },
	};

	for (size_t k = 0; k < sizeof(cm) / sizeof(cm[0]); k++) {
		sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", cm[k].name, cm[k].help, cm[k].name,
			  cm[k].type);
		for (unsigned i = 0; i < n; i++)
			for (unsigned c = 0; c < sn[i].ncls; c++) {
				const char *p = (const char *)&sn[i].cls[c] + cm[k].off;
				uint64_t v;

				if (cm[k].off == offsetof(struct corio_class_stats, shares)) {
					v = sn[i].cls[c].shares;
				} else {
					memcpy(&v, p, sizeof(v));
				}
				sb_printf(b, "%s{shard=\"%u\",class=\"%s\"} ", cm[k].name, i,
					  sn[i].cls[c].name);
				prom_num(b, v, cm[k].ns);
			}
	}
	const char *qd = "corio_class_queue_delay_seconds";

	sb_printf(b, "# HELP %s Time fibers of the class were ready before they ran.\n"
		     "# TYPE %s histogram\n", qd, qd);
	for (unsigned i = 0; i < n; i++)
		for (unsigned c = 0; c < sn[i].ncls; c++) {
			const struct corio_class_stats *x = &sn[i].cls[c];
			uint64_t cum = 0;

			for (unsigned k = 0; k < CORIO_STATS_HIST_BUCKETS; k++) {
				uint64_t le = corio_stats_hist_bucket_ns(k);

				cum += x->wait_hist[k];
				if (le == UINT64_MAX)
					sb_printf(b, "%s_bucket{shard=\"%u\",class=\"%s\",le=\"+Inf\"} "
						  "%llu\n", qd, i, x->name, (unsigned long long)cum);
				else
					sb_printf(b, "%s_bucket{shard=\"%u\",class=\"%s\",le=\"%.9g\"} "
						  "%llu\n", qd, i, x->name, (double)le / 1e9,
						  (unsigned long long)cum);
			}
			sb_printf(b, "%s_sum{shard=\"%u\",class=\"%s\"} ", qd, i, x->name);
			prom_num(b, x->wait_ns, true);
			sb_printf(b, "%s_count{shard=\"%u\",class=\"%s\"} %llu\n", qd, i, x->name,
				  (unsigned long long)cum);
		}
}

static void render_prom(struct sb *b, const struct snap *sn, unsigned n)
{
	char name[96];

	sb_printf(b, "# HELP corio_shard_cpu CPU the shard runs on.\n# TYPE corio_shard_cpu gauge\n");
	for (unsigned i = 0; i < n; i++)
		sb_printf(b, "corio_shard_cpu{shard=\"%u\"} %llu\n", i,
			  (unsigned long long)sn[i].core.cpu);
	sb_printf(b, "# HELP corio_ring_backend I/O backend: 0 io_uring, 1 the epoll fallback.\n"
		     "# TYPE corio_ring_backend gauge\n");
	for (unsigned i = 0; i < n; i++)
		sb_printf(b, "corio_ring_backend{shard=\"%u\"} %llu\n", i,
			  (unsigned long long)sn[i].core.backend);
	for (size_t k = 0; k < NMETRICS; k++) {
		const struct metric *m = &metrics[k];

		if (m->kind == INFO)
			continue;
		snprintf(name, sizeof(name), "corio_%s_%s%s%s", m->group, m->name,
			 m->ns ? "_seconds" : "", m->kind == COUNTER ? "_total" : "");
		sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, m->help, name,
			  m->kind == COUNTER ? "counter" : "gauge");
		for (unsigned i = 0; i < n; i++) {
			sb_printf(b, "%s{shard=\"%u\"} ", name, i);
			prom_num(b, val(&sn[i], m), m->ns);
		}
	}
	prom_hist(b, "corio_loop_turn_seconds", "Loop-turn durations (CPU time, idle excluded).", sn,
		  n, offsetof(struct snap, core.turn_hist), offsetof(struct snap, core.busy_ns));
	prom_hist(b, "corio_loop_poll_gap_seconds", "Gaps between two looks at the ring.", sn, n,
		  offsetof(struct snap, core.gap_hist), offsetof(struct snap, core.gap_ns));
	prom_classes(b, sn, n);
	static const char *const what[3] = { "ops", "bytes", "errors" };
	static const char *const whelp[3] = { "File calls completed.", "File bytes moved.",
					      "File calls that failed." };
	for (unsigned w = 0; w < 3; w++) {
		snprintf(name, sizeof(name), "corio_fs_%s_total", what[w]);
		sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, whelp[w], name);
		for (unsigned i = 0; i < n; i++)
			for (unsigned k = 0; k < CORIO_FS_NKINDS; k++) {
				uint64_t v = w == 0 ? sn[i].fs.kind[k].ops
					     : w == 1 ? sn[i].fs.kind[k].bytes
						      : sn[i].fs.kind[k].errors;

				sb_printf(b, "%s{shard=\"%u\",kind=\"%s\"} %llu\n", name, i,
					  fs_kinds[k], (unsigned long long)v);
			}
	}
}

int corio_stats_render(struct corio_rt *rt, unsigned format, char **out, size_t *len)
{
	struct corio__shard *self = corio__shard();
	struct sb b = { 0 };
	struct snap *sn, tot;
	unsigned n;
	int ret;

	if (out)
		*out = NULL;
	if (len)
		*len = 0;
	if (!out || format > CORIO_STATS_PROM)
		return corio__error(-EINVAL, "corio_stats_render: %s",
				    out ? "unknown format" : "out is NULL");
	if (!rt) {
		if (!self)
			return -EPERM;
		rt = self->rt;
	}
	n = rt->nshards;
	sn = calloc(n, sizeof(*sn));
	if (!sn)
		return -ENOMEM;
	memset(&tot, 0, sizeof(tot));
	for (unsigned i = 0; i < n; i++) {
		ret = snap_take(rt, i, n, &sn[i]);
		if (ret) {
			free(sn);
			return ret;
		}
		snap_add(&tot, &sn[i]);
	}
	b.cap = 4096 + (size_t)n * (format == CORIO_STATS_JSON ? 3072 : 12288) +
		(size_t)n * tot.ncls * (format == CORIO_STATS_JSON ? 512 : 4096);
	b.p = malloc(b.cap);
	if (!b.p) {
		free(sn);
		return -ENOMEM;
	}
	if (format == CORIO_STATS_JSON)
		render_json(&b, sn, n, &tot);
	else
		render_prom(&b, sn, n);
	free(sn);
	if (b.err) {
		free(b.p);
		return b.err;
	}
	*out = b.p;
	if (len)
		*len = b.len;
	return 0;
}
