/* SPDX-License-Identifier: MIT */
/*
 * uring/env.c - the one parser of corio's CORIO_* environment settings.
 *
 * Every area reads its variables through these calls, once, while a shard
 * starts (the ring's set-up or the area's part init), so a bad value fails
 * corio_start() with -EINVAL and a message naming the variable and the
 * value, instead of being ignored, clamped, cut at its first non-digit or
 * wrapped. One rule for every variable:
 *  - unset: the default;
 *  - set: the whole string must be a value of the variable's syntax. An
 *    empty string is refused too (unset the variable instead), so a typo
 *    like CORIO_X= cannot look like a setting that took;
 *  - numbers: decimal digits only: no sign, no space, no unit suffix (the
 *    name carries the unit: _MS), checked against the variable's range
 *    before anything can wrap;
 *  - lists: comma-separated known words, "all" for every one; an unknown or
 *    empty item is refused.
 * It lives in the lowest area so every area can use it, and names no
 * variable itself: each caller passes its own name, range or words. The
 * message goes into the caller's buffer (uring/ has no error channel of its
 * own; the shard's s->err carries it to corio_last_error()).
 */
#include "uring/internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int corio__env_fail(char *err, size_t len, const char *var, const char *val, const char *fmt,
		    ...)
{
	va_list ap;
	int n = snprintf(err, len, "%s=%.48s%s: ", var, val, strlen(val) > 48 ? "..." : "");

	if (n >= 0 && (size_t)n < len) {
		va_start(ap, fmt);
		vsnprintf(err + n, len - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* var's value: NULL when unset (*ret 0) or empty (*ret -EINVAL, said in err). */
static const char *lookup(const char *var, char *err, size_t len, int *ret)
{
	const char *v = getenv(var);

	*ret = 0;
	if (v && !*v) {
		*ret = corio__env_fail(err, len, var, v, "empty (unset it for the default)");
		return NULL;
	}
	return v;
}

int corio__env_num(const char *s, size_t n, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned char)s[i] - '0';

		if (d > 9)
			return -EINVAL;
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE; /* would wrap: out of any range */
		v = v * 10 + d;
	}
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int corio__env_real(const char *s, size_t n, double min, double max, double *out)
{
	char buf[64], *end;
	double v;

	/* strtod alone would take a sign, spaces, "inf", "nan" and hex */
	if (!n || n >= sizeof(buf) || strspn(s, "0123456789.eE-+") < n || s[0] == '-' ||
	    s[0] == '+')
		return -EINVAL;
	memcpy(buf, s, n);
	buf[n] = '\0';
	errno = 0;
	v = strtod(buf, &end);
	if (*end || errno || !isfinite(v))
		return -EINVAL;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int corio__env_word(const char *s, size_t n, const char *const *words)
{
	for (int i = 0; words[i]; i++)
		if (strlen(words[i]) == n && !strncmp(s, words[i], n))
			return i;
	return -1;
}

/* "a, b, c" for a message (cut to fit). */
static const char *known(const char *const *words, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (unsigned i = 0; words[i] && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", words[i]);
	return buf;
}

int corio__env_mask(const char *s, size_t n, const char *seps, const char *const *words,
		    uint32_t *mask, size_t *bad, size_t *badlen)
{
	uint32_t m = 0;
	size_t i = 0;

	for (;;) {
		size_t w = 0;
		int k;

		while (i + w < n && !strchr(seps, s[i + w]))
			w++;
		k = corio__env_word(s + i, w, words);
		if (k >= 0)
			m |= 1u << k;
		else if (w == 3 && !strncmp(s + i, "all", 3))
			m = UINT32_MAX;
		else {
			*bad = i;
			*badlen = w;
			return -EINVAL;
		}
		i += w;
		if (i >= n)
			break;
		i++; /* the separator: an item must follow it */
	}
	*mask = m;
	return 0;
}

int corio__env_uint(const char *var, uint64_t min, uint64_t max, uint64_t *out, char *err,
		    size_t len)
{
	int ret;
	const char *v = lookup(var, err, len, &ret);

	if (!v)
		return ret;
	switch (corio__env_num(v, strlen(v), min, max, out)) {
	case 0:
		return 1;
	case -ERANGE:
		return corio__env_fail(err, len, var, v, "out of range (%llu..%llu)",
				       (unsigned long long)min, (unsigned long long)max);
	default:
		return corio__env_fail(err, len, var, v,
				       "expected a decimal integer %llu..%llu (no sign, no suffix)",
				       (unsigned long long)min, (unsigned long long)max);
	}
}

int corio__env_flag(const char *var, bool *out, char *err, size_t len)
{
	int ret;
	const char *v = lookup(var, err, len, &ret);

	if (!v)
		return ret;
	if (strcmp(v, "0") && strcmp(v, "1"))
		return corio__env_fail(err, len, var, v, "expected 0 or 1");
	*out = v[0] == '1';
	return 1;
}

int corio__env_choice(const char *var, const char *const *words, unsigned *out, char *err,
		      size_t len)
{
	char list[160];
	int ret;
	const char *v = lookup(var, err, len, &ret);

	if (!v)
		return ret;
	ret = corio__env_word(v, strlen(v), words);
	if (ret < 0)
		return corio__env_fail(err, len, var, v, "expected one of: %s",
				       known(words, list, sizeof(list)));
	*out = (unsigned)ret;
	return 1;
}

int corio__env_words(const char *var, const char *const *words, uint32_t *mask, char *err,
		     size_t len)
{
	char list[160];
	size_t bad, badlen;
	int ret;
	const char *v = lookup(var, err, len, &ret);

	if (!v)
		return ret;
	if (corio__env_mask(v, strlen(v), ",", words, mask, &bad, &badlen) < 0)
		return corio__env_fail(err, len, var, v,
				       "%s '%.*s' (a comma list of: %s, all)",
				       badlen ? "unknown item" : "empty item", (int)badlen, v + bad,
				       known(words, list, sizeof(list)));
	return 1;
}

int corio__env_pair(const char *var, const char *syntax, const uint64_t lim[4],
		    uint64_t out[2], char *err, size_t len)
{
	int ret;
	const char *v = lookup(var, err, len, &ret);
	const char *colon;
	uint64_t a, b;

	if (!v)
		return ret;
	colon = strchr(v, ':');
	if (!colon || corio__env_num(v, (size_t)(colon - v), lim[0], lim[1], &a) ||
	    corio__env_num(colon + 1, strlen(colon + 1), lim[2], lim[3], &b))
		return corio__env_fail(err, len, var, v,
				       "expected %s, decimal integers %llu..%llu and %llu..%llu",
				       syntax, (unsigned long long)lim[0],
				       (unsigned long long)lim[1], (unsigned long long)lim[2],
				       (unsigned long long)lim[3]);
	out[0] = a;
	out[1] = b;
	return 1;
}

int corio__env_str(const char *var, const char **out, char *err, size_t len)
{
	int ret;
	const char *v = lookup(var, err, len, &ret);

	if (!v)
		return ret;
	*out = v;
	return 1;
}
