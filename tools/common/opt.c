/* SPDX-License-Identifier: MIT */
/* tools/common/opt.c - see tool_opt.h. */
#include "opt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

const char *tool_prog = "corio-tool";

static int bad(const char *name, const char *s, const char *why)
{
	fprintf(stderr, "%s: %s: bad value '%s' (%s)\n", tool_prog, name, s ? s : "", why);
	return -EINVAL;
}

/*
 * Parse a non-negative decimal number with an optional fraction: digits,
 * optionally '.' and more digits, at least one digit in all; *end is set past
 * it (a unit suffix may follow). Signs, spaces, hex (0x50), exponents (1e2),
 * inf and nan are rejected here: strtod() alone takes all of those, and
 * "-p 0x50" must not mean port 80. Too many digits give +inf, which every
 * caller's range check then refuses with the range in its message.
 */
static int number(const char *s, double *v, const char **end)
{
	char buf[64];
	size_t n = 0, digits = 0;

	if (!s)
		return -EINVAL;
	while (s[n] >= '0' && s[n] <= '9')
		n++, digits++;
	if (s[n] == '.') {
		n++;
		while (s[n] >= '0' && s[n] <= '9')
			n++, digits++;
	}
	if (!digits)
		return -EINVAL;
	*end = s + n;
	if (n >= sizeof(buf)) {
		*v = INFINITY;
		return 0;
	}
	memcpy(buf, s, n);
	buf[n] = '\0';
	*v = strtod(buf, NULL); /* only decimal digits and one '.': cannot fail */
	return 0;
}

int tool_opt_count(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *e;
	double v, mul = 1;
	char why[96];

	if (number(s, &v, &e))
		return bad(name, s, "expected a number such as 64, 20k, 1m");
	if (!strcmp(e, "k") || !strcmp(e, "K"))
		mul = 1e3;
	else if (!strcmp(e, "m") || !strcmp(e, "M"))
		mul = 1e6;
	else if (*e)
		return bad(name, s, "unknown suffix; use k or m");
	v *= mul;
	if (v != floor(v) || v < (double)min || v > (double)max) {
		snprintf(why, sizeof(why), "expected a whole number in %llu..%llu",
			 (unsigned long long)min, (unsigned long long)max);
		return bad(name, s, why);
	}
	*out = (uint64_t)v;
	return 0;
}

int tool_opt_size(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *e;
	double v, mul = 1;
	char why[96];

	if (number(s, &v, &e))
		return bad(name, s, "expected a size such as 64, 4k, 4KiB");
	if (!strcasecmp(e, "k") || !strcasecmp(e, "kib") || !strcasecmp(e, "kb"))
		mul = 1024;
	else if (!strcasecmp(e, "m") || !strcasecmp(e, "mib") || !strcasecmp(e, "mb"))
		mul = 1024 * 1024;
	else if (*e && strcasecmp(e, "b"))
		return bad(name, s, "unknown suffix; use k/KiB or m/MiB");
	v *= mul;
	if (v != floor(v) || v < (double)min || v > (double)max) {
		snprintf(why, sizeof(why), "expected %llu..%llu bytes", (unsigned long long)min,
			 (unsigned long long)max);
		return bad(name, s, why);
	}
	*out = (uint64_t)v;
	return 0;
}

int tool_opt_seconds(const char *name, const char *s, double min_s, double max_s, double *out)
{
	const char *e;
	double v;
	char why[96];

	if (number(s, &v, &e))
		return bad(name, s, "expected a duration such as 2, 2.5s, 500ms");
	if (!strcmp(e, "ms"))
		v /= 1e3;
	else if (!strcmp(e, "us"))
		v /= 1e6;
	else if (*e && strcmp(e, "s"))
		return bad(name, s, "unknown unit; use s, ms or us");
	if (v < min_s || v > max_s) {
		snprintf(why, sizeof(why), "expected %g..%g seconds", min_s, max_s);
		return bad(name, s, why);
	}
	*out = v;
	return 0;
}

int tool_opt_cpus(const char *name, const char *s, int *cpus, unsigned max, unsigned *n)
{
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	const char *p = s;
	char why[96];

	*n = 0;
	if (!s || !*s)
		return bad(name, s, "expected a CPU list such as 0 or 0,1 or 0-3");
	while (*p) {
		char *e;
		long a, b;

		if (*p < '0' || *p > '9')
			return bad(name, s, "expected a CPU list such as 0 or 0,1 or 0-3");
		a = strtol(p, &e, 10);
		b = a;
		if (*e == '-') {
			if (e[1] < '0' || e[1] > '9')
				return bad(name, s, "expected a range such as 0-3");
			b = strtol(e + 1, &e, 10);
		}
		if (b < a || b >= ncpu) {
			snprintf(why, sizeof(why), "CPUs must be ascending ranges within 0..%ld",
				 ncpu - 1);
			return bad(name, s, why);
		}
		for (long c = a; c <= b; c++) {
			if (*n >= max) {
				snprintf(why, sizeof(why), "at most %u CPUs", max);
				return bad(name, s, why);
			}
			cpus[(*n)++] = (int)c;
		}
		if (*e == ',' && e[1])
			e++;
		else if (*e)
			return bad(name, s, "expected a CPU list such as 0 or 0,1 or 0-3");
		p = e;
	}
	return 0;
}

int tool_opt_choice(const char *name, const char *s, const char *const *choices)
{
	char why[160];
	size_t off = 0;

	for (int i = 0; choices[i]; i++)
		if (s && !strcmp(s, choices[i]))
			return i;
	off += (size_t)snprintf(why, sizeof(why), "expected one of:");
	for (int i = 0; choices[i] && off < sizeof(why); i++)
		off += (size_t)snprintf(why + off, sizeof(why) - off, " %s", choices[i]);
	return bad(name, s, why);
}
