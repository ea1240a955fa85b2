/* SPDX-License-Identifier: MIT */
/*
 * tools/common/opt.h - option value parsing for the echo benchmark tools
 * (corio-echo, corio-load, epoll-echo). Each parser checks the whole string
 * and the range, and on failure prints "prog: --name: why" to stderr and
 * returns -EINVAL; the caller exits with status 2.
 */
#ifndef CORIO_TOOLS_EB_OPT_H
#define CORIO_TOOLS_EB_OPT_H

#include <stddef.h>
#include <stdint.h>

/* The program name used in messages (set it first thing in main). */
extern const char *tool_prog;

/* An integer in [min, max]; suffixes k (1000) and m (1000000) allowed. */
int tool_opt_count(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* A byte size in [min, max]: 4096, 4k, 4KiB, 1m, 1MiB (k and m are 1024). */
int tool_opt_size(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* A duration in [min_s, max_s] seconds: 2, 2.5, 2s, 500ms, 100us. */
int tool_opt_seconds(const char *name, const char *s, double min_s, double max_s, double *out);
/* A CPU list "0", "1,3", "0-3,6" into cpus[0..*n), at most max entries,
 * each below the number of configured CPUs. */
int tool_opt_cpus(const char *name, const char *s, int *cpus, unsigned max, unsigned *n);
/* One of the words in choices (NULL-terminated): its index. */
int tool_opt_choice(const char *name, const char *s, const char *const *choices);

#endif
