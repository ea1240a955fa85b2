/* SPDX-License-Identifier: MIT */
/* tools/kv/resp.c - corio-kv's limits and RESP parser (no I/O); see resp.h. */
#include "resp.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kv_limits_default(struct kv_limits *l)
{
	l->proto_max_bulk_len = 512ull << 20;
	l->max_multibulk = 1024 * 1024;
	l->qbuf_limit = 64ull << 20;
	l->out_limit = 256ull << 20;
	l->maxmemory = 0;
}

/* Redis's string2ll: an optional '-', digits, no leading zero, no spaces,
 * fits in a long long. 1 when p[0..n) is such a number. */
int kv_str2ll(const char *p, size_t n, long long *out)
{
	unsigned long long v = 0;
	bool neg = false;
	size_t i = 0;

	if (n == 0 || n > 20)
		return 0;
	if (n == 1 && p[0] == '0') {
		*out = 0;
		return 1;
	}
	if (p[0] == '-') {
		neg = true;
		if (++i == n)
			return 0;
	}
	if (p[i] < '1' || p[i] > '9')
		return 0;
	/* Up to 18 digits cannot overflow: the lengths and counts of every
	 * request take this loop alone (no division per digit). */
	if (n - i <= 18) {
		for (; i < n; i++) {
			unsigned d = (unsigned)(unsigned char)p[i] - '0';

			if (d > 9)
				return 0;
			v = v * 10 + d;
		}
		*out = neg ? -(long long)v : (long long)v;
		return 1;
	}
	for (; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return 0;
		if (v > (ULLONG_MAX - (unsigned)(p[i] - '0')) / 10)
			return 0;
		v = v * 10 + (unsigned)(p[i] - '0');
	}
	if (neg) {
		if (v > (unsigned long long)LLONG_MAX + 1)
			return 0;
		*out = (long long)(0 - v);
	} else {
		if (v > LLONG_MAX)
			return 0;
		*out = (long long)v;
	}
	return 1;
}

int kv_argv_push(struct kv_argv *av, const char *p, size_t n)
{
	if (av->n == av->cap) {
		size_t cap = av->cap ? av->cap * 2 : 64;
		struct kv_arg *v = realloc(av->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		av->v = v;
		av->cap = cap;
	}
	av->v[av->n].p = p;
	av->v[av->n].n = n;
	av->n++;
	return 0;
}

/* "\r\n"-terminated line at p[at..n): the index of its '\r', or -1 (none yet). */
static long line_end(const char *p, size_t n, size_t at)
{
	const char *cr = memchr(p + at, '\r', n - at);

	return cr ? (long)(cr - p) : -1;
}

/*
 * Parse one command from p[0..n) (the unparsed part of a query buffer).
 * RESP_CMD: its arguments were appended to av (none for an empty command,
 * "*0" or a blank inline line: skip it) and *used is its length.
 * RESP_MORE: nothing appended; *need is the buffer length worth waiting
 * for (n + 1 when unknown). RESP_ERR: a protocol error, described in
 * errbuf; the connection must be closed. RESP_NOMEM. No I/O, no state
 * kept between calls: the caller parses again from the same place once
 * more bytes have arrived.
 */
int resp_parse(const char *p, size_t n, const struct kv_limits *lim, struct kv_argv *av,
		      size_t *used, size_t *need, char *errbuf, size_t errlen)
{
	size_t base = av->n, at;
	long long count, len;
	long cr;

	*need = n + 1;
	if (n == 0)
		return RESP_MORE;
	if (p[0] != '*') {
		/* inline: words separated by spaces or tabs, up to LF (CR stripped) */
		const char *lf = memchr(p, '\n', n);
		size_t end, i = 0;

		if (!lf) {
			if (n > KV_MAX_LINE) {
				snprintf(errbuf, errlen, "Protocol error: too big inline request");
				return RESP_ERR;
			}
			return RESP_MORE;
		}
		end = (size_t)(lf - p);
		if (end > KV_MAX_LINE) { /* the same answer however the bytes were cut */
			snprintf(errbuf, errlen, "Protocol error: too big inline request");
			return RESP_ERR;
		}
		*used = end + 1;
		if (end && p[end - 1] == '\r')
			end--;
		while (i < end) {
			size_t w;

			while (i < end && (p[i] == ' ' || p[i] == '\t'))
				i++;
			if (i == end)
				break;
			for (w = i; w < end && p[w] != ' ' && p[w] != '\t'; w++)
				;
			if (av->n - base >= lim->max_multibulk) {
				av->n = base;
				snprintf(errbuf, errlen, "Protocol error: invalid multibulk length");
				return RESP_ERR;
			}
			if (kv_argv_push(av, p + i, w - i)) {
				av->n = base;
				return RESP_NOMEM;
			}
			i = w;
		}
		return RESP_CMD;
	}
	cr = line_end(p, n, 1);
	if (cr < 0 || cr > KV_MAX_LINE) {
		if (n > KV_MAX_LINE) {
			snprintf(errbuf, errlen, "Protocol error: too big mbulk count string");
			return RESP_ERR;
		}
		return RESP_MORE;
	}
	if ((size_t)cr + 1 >= n)
		return RESP_MORE; /* the LF has not arrived */
	if (p[cr + 1] != '\n' || !kv_str2ll(p + 1, (size_t)cr - 1, &count) ||
	    (count > 0 && (unsigned long long)count > lim->max_multibulk)) {
		snprintf(errbuf, errlen, "Protocol error: invalid multibulk length");
		return RESP_ERR;
	}
	at = (size_t)cr + 2;
	for (long long i = 0; i < count; i++) {
		if (at >= n)
			goto more;
		if (p[at] != '$') {
			unsigned char c = (unsigned char)p[at];

			if (c >= 32 && c < 127)
				snprintf(errbuf, errlen, "Protocol error: expected '$', got '%c'", c);
			else
				snprintf(errbuf, errlen, "Protocol error: expected '$', got '\\x%02x'", c);
			goto err;
		}
		cr = line_end(p, n, at + 1);
		if (cr < 0 || (size_t)cr - at > KV_MAX_LINE) {
			if (n - at > KV_MAX_LINE) {
				snprintf(errbuf, errlen, "Protocol error: too big bulk count string");
				goto err;
			}
			goto more;
		}
		if ((size_t)cr + 1 >= n)
			goto more;
		if (p[cr + 1] != '\n' || !kv_str2ll(p + at + 1, (size_t)cr - at - 1, &len) || len < 0 ||
		    (unsigned long long)len > lim->proto_max_bulk_len) {
			snprintf(errbuf, errlen, "Protocol error: invalid bulk length");
			goto err;
		}
		at = (size_t)cr + 2;
		if (at + (size_t)len + 2 > lim->qbuf_limit) {
			snprintf(errbuf, errlen,
				 "Protocol error: command larger than the query buffer limit (%llu bytes)",
				 (unsigned long long)lim->qbuf_limit);
			goto err;
		}
		if (at + (size_t)len + 2 > n) {
			*need = at + (size_t)len + 2;
			goto more;
		}
		if (p[at + len] != '\r' || p[at + len + 1] != '\n') {
			snprintf(errbuf, errlen, "Protocol error: expected CRLF after a bulk string");
			goto err;
		}
		if (kv_argv_push(av, p + at, (size_t)len)) {
			av->n = base;
			return RESP_NOMEM;
		}
		at += (size_t)len + 2;
	}
	*used = at;
	return RESP_CMD;
more:
	av->n = base;
	if (*need <= n)
		*need = n + 1;
	return RESP_MORE;
err:
	av->n = base;
	return RESP_ERR;
}
