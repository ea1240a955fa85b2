/* SPDX-License-Identifier: MIT */
/*
 * tools/common/json.h - a small strict JSON reader for corio's own answers
 * (the stats JSON of corio_stats_render() and the control socket), shared
 * by corio-stat and the tests. It reads objects, arrays, strings, true,
 * false, null and integers: no fractions or exponents, since corio writes
 * none, so a document that has them is refused rather than misread. Each
 * number is seen under its dotted path: "per_shard.0.ring.sqes", array
 * items by index. At most 16 levels deep, paths up to 255 bytes.
 */
#ifndef CORIO_TOOLS_JSON_H
#define CORIO_TOOLS_JSON_H

#include <stdbool.h>
#include <stdint.h>

/* Called for every number: its path, magnitude and sign. Nonzero stops
 * the walk, which then fails. */
typedef int (*tool_json_fn)(void *arg, const char *path, uint64_t mag, bool neg);

/* Walk doc (the whole string must be one JSON value, spaces around it
 * allowed), calling fn (may be NULL) for each number: 0, or -1 when doc is
 * not JSON as above or fn stopped it. */
int tool_json_walk(const char *doc, tool_json_fn fn, void *arg);

/* The non-negative number at path: 0 and *out (out may be NULL); -1 when
 * doc is not JSON; -2 when path names no such number (or more than one).
 * path NULL: only check that doc is JSON. */
int tool_json_get(const char *doc, const char *path, uint64_t *out);

#endif
