/* SPDX-License-Identifier: MIT */
/* tools/common/hist.c - see tool_hist.h. */
#include "hist.h"

#include <string.h>

/*
 * Index layout: v < 2^(SUB_BITS+1) maps to itself. Above, with k the index
 * of v's top bit and shift = k - SUB_BITS, v >> shift lies in [128, 256),
 * and the index is shift * 128 + (v >> shift): contiguous across octaves.
 */
unsigned tool_hist_index(uint64_t v)
{
	unsigned k, shift;

	if (v < 2 * TOOL_HIST_SUB)
		return (unsigned)v;
	k = 63u - (unsigned)__builtin_clzll(v);
	shift = k - TOOL_HIST_SUB_BITS;
	return shift * TOOL_HIST_SUB + (unsigned)(v >> shift);
}

uint64_t tool_hist_lo(unsigned idx)
{
	unsigned shift;

	if (idx < 2 * TOOL_HIST_SUB)
		return idx;
	shift = idx / TOOL_HIST_SUB - 1;
	return (uint64_t)(idx - shift * TOOL_HIST_SUB) << shift;
}

uint64_t tool_hist_hi(unsigned idx)
{
	unsigned shift;

	if (idx < 2 * TOOL_HIST_SUB)
		return idx;
	shift = idx / TOOL_HIST_SUB - 1;
	return tool_hist_lo(idx) + ((uint64_t)1 << shift) - 1;
}

void tool_hist_init(struct tool_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

void tool_hist_add(struct tool_hist *h, uint64_t v)
{
	h->b[tool_hist_index(v)]++;
	h->count++;
	h->sum += (double)v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

void tool_hist_merge(struct tool_hist *dst, const struct tool_hist *src)
{
	for (unsigned i = 0; i < TOOL_HIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t tool_hist_quantile(const struct tool_hist *h, double q)
{
	uint64_t rank, seen = 0;

	if (!h->count)
		return 0;
	if (q <= 0)
		return h->min;
	if (q >= 1)
		return h->max;
	/* the smallest value with at least ceil(q * count) samples at or below it */
	rank = (uint64_t)(q * (double)h->count);
	if ((double)rank < q * (double)h->count)
		rank++;
	if (rank == 0)
		rank = 1;
	for (unsigned i = 0; i < TOOL_HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			uint64_t v = tool_hist_hi(i);

			if (v > h->max)
				v = h->max;
			if (v < h->min)
				v = h->min;
			return v;
		}
	}
	return h->max;
}

double tool_hist_mean(const struct tool_hist *h)
{
	return h->count ? h->sum / (double)h->count : 0;
}

void tool_hist_spectrum(const struct tool_hist *h, FILE *f)
{
	/* 1 - p = 10^(-x) for x from 0 to 5 in steps of 0.05 */
	for (int i = 0; i <= 100; i++) {
		double tail = 1.0, p;

		for (int j = 0; j < i; j++)
			tail /= 1.122018454301963; /* 10^0.05 */
		p = 1.0 - tail;
		if ((double)h->count * tail < 1.0)
			break;
		fprintf(f, "%.5f %.3f\n", p * 100.0, (double)tool_hist_quantile(h, p) / 1000.0);
	}
	fprintf(f, "%.5f %.3f\n", 100.0, (double)h->max / 1000.0);
}
