/* SPDX-License-Identifier: MIT */
/*
 * tools/common/hist.h - a log-linear latency histogram for the echo
 * benchmark tools (corio-load), in the spirit of HdrHistogram.
 *
 * Values (nanoseconds) below 256 are counted exactly; above, every power of
 * two is split into 128 equal buckets, so a bucket is at most 1/128 (0.8%)
 * of its value wide. Range: the whole uint64_t. Fixed size (about 58 KiB),
 * no allocation after init, recording is one clz and one increment.
 * One writer; merge per-thread histograms at the end.
 */
#ifndef CORIO_TOOLS_EB_HIST_H
#define CORIO_TOOLS_EB_HIST_H

#include <stdint.h>
#include <stdio.h>

#define TOOL_HIST_SUB_BITS 7
#define TOOL_HIST_SUB      (1u << TOOL_HIST_SUB_BITS)            /* 128 */
#define TOOL_HIST_BUCKETS  ((64 - TOOL_HIST_SUB_BITS + 1) * TOOL_HIST_SUB) /* 7424 */

struct tool_hist {
	uint64_t count;
	uint64_t min, max;
	double sum;
	uint64_t b[TOOL_HIST_BUCKETS];
};

void tool_hist_init(struct tool_hist *h);
void tool_hist_add(struct tool_hist *h, uint64_t v);
void tool_hist_merge(struct tool_hist *dst, const struct tool_hist *src);
/* The value below which a fraction q (0..1) of the samples fall: the upper
 * bound of its bucket, clamped to the exact maximum; 0 when empty. */
uint64_t tool_hist_quantile(const struct tool_hist *h, double q);
double tool_hist_mean(const struct tool_hist *h);
/* Bucket index of v, and the bucket's lowest and highest value. */
unsigned tool_hist_index(uint64_t v);
uint64_t tool_hist_lo(unsigned idx);
uint64_t tool_hist_hi(unsigned idx);
/* Write a percentile spectrum, one "percentile value_us" line per point,
 * for plotting (percentiles 0 .. 99.999 on a 1/(1-p) scale). */
void tool_hist_spectrum(const struct tool_hist *h, FILE *f);

#endif
