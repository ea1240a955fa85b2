/* SPDX-License-Identifier: MIT */
/*
 * corio/stats.h - every area's counters in one place: rendering them as
 * JSON or Prometheus text, the control socket, and HTTP /metrics.
 * Include <corio.h>.
 *
 * The counters themselves are per shard and per area (struct corio_stats in
 * corio.h, and the timer, msg, net and fs stats): each is written only by
 * its shard and read by anyone without locks and without torn values; a
 * snapshot is consistent per counter, not as a whole.
 *
 * Control socket (corio_config.control_path), the JSON schema and the
 * Prometheus names: docs/STATS.md is their contract (man corio-stats);
 * tools/stat/corio-stat is the client.
 *
 * Stall detector: with corio_config.stall_ns != 0, a fiber that runs longer
 * than stall_ns without giving the CPU back (or a loop turn whose callbacks
 * do) is reported on stderr, naming the shard and the fiber, at most once a
 * second per shard (the rest are counted in corio_stats.stalls and in the
 * next report). The report comes when the fiber yields or parks: a fiber
 * that never does hangs its shard unreported.
 */
#ifndef CORIO_STATS_H
#define CORIO_STATS_H

#include <corio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exclusive upper bound in ns of loop histogram bucket b (corio_stats
 * turn_hist / gap_hist); UINT64_MAX for the last bucket and past it. */
CORIO_API uint64_t corio_stats_hist_bucket_ns(unsigned b);

/* Formats for corio_stats_render() */
#define CORIO_STATS_JSON 0u
#define CORIO_STATS_PROM 1u /* Prometheus text exposition format 0.0.4 */

/*
 * Render every shard's counters (all areas) into a new buffer: *out (free()
 * it; NUL-terminated) and its length in *len. Any thread while rt runs; rt
 * may be NULL on a shard (its own runtime). Allocates; not for hot paths.
 * 0, -EINVAL, -EPERM or -ENOMEM.
 */
CORIO_API int corio_stats_render(struct corio_rt *rt, unsigned format, char **out, size_t *len);

/*
 * Serve the "prom" output over HTTP on host_port ("127.0.0.1:9100"):
 * GET /metrics answers it, anything else a 404 (or 405 / 431). One
 * request per connection, each in its own fiber on this shard, at most 16 at
 * a time: 5 s to send the whole request, then 5 s to read the answer. When
 * all 16 slots are taken, a new connection takes the slot of the one that
 * has waited longest without sending a complete request (that one is closed;
 * counted in ctl.metrics_evicted), so silent or trickling clients cannot
 * keep a scraper out; only when all 16 are answering is it closed at once
 * (ctl.metrics_refused). Runs until the calling
 * fiber is cancelled (returns -ECANCELED) or the listener fails (-errno);
 * off unless a program calls it. Blocking.
 */
CORIO_API int corio_metrics_serve(const char *host_port);

#ifdef __cplusplus
}
#endif

#endif
