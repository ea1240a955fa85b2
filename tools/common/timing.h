/* SPDX-License-Identifier: MIT */
/*
 * tools/common/timing.h - saturating conversions of durations to nanoseconds
 * for the tools (header only, so corio-kv and the tests that include it need
 * no object). A product that wraps lands in the past: a timer armed there
 * fires at once, and a sweep that re-arms from it fires forever (corio-kv,
 * EXPIRE k 9223372036854). These clamp to UINT64_MAX, which corio's timers
 * and deadline scopes read as "never". The library has its own, private
 * ones (timer/internal.h); tools use only the public API.
 */
#ifndef CORIO_TOOLS_EB_TIME_H
#define CORIO_TOOLS_EB_TIME_H

#include <stdint.h>

#define TOOL_NS_PER_MS 1000000ull
#define TOOL_NS_PER_S 1000000000ull

/* n units of unit_ns each, UINT64_MAX when that does not fit. */
static inline uint64_t tool_ns_mul_sat(uint64_t n, uint64_t unit_ns)
{
	uint64_t r;

	return __builtin_mul_overflow(n, unit_ns, &r) ? UINT64_MAX : r;
}

/* Milliseconds (signed, as Redis keeps them) to ns: negative is 0. */
static inline uint64_t tool_ms_to_ns(int64_t ms)
{
	return ms <= 0 ? 0 : tool_ns_mul_sat((uint64_t)ms, TOOL_NS_PER_MS);
}

/* Seconds (a parsed option) to ns: negative or NaN is 0, too large (or
 * infinite) is UINT64_MAX, where a plain cast would be undefined. */
static inline uint64_t tool_s_to_ns(double s)
{
	double ns = s * 1e9;

	if (!(ns > 0))
		return 0;
	return ns >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)ns;
}

#endif
