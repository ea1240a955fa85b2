/* SPDX-License-Identifier: MIT */
/*
 * fuzz_control - the control socket's line reader and command parser
 * (ctl/control.c, corio__ctl_feed/_next) on any byte stream cut into any
 * receives: it never crashes or overruns its 256-byte buffer, the commands
 * it sees do not depend on the cuts, and they are what an independent model
 * of the protocol says (a line ends at LF, blanks and a CR around it are
 * ignored, a line of 256 or more bytes before its LF ends the session).
 */
#include "ctl/internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXV 4096

/* What the server would do with d cut into receives of at most cut bytes. */
static size_t run(const uint8_t *d, size_t n, size_t cut, int *v)
{
	struct corio__ctl_lines r = { .have = 0 };
	size_t nv = 0, off = 0;

	for (;;) {
		int c;

		while ((c = corio__ctl_next(&r)) != CORIO__CTL_MORE) {
			if (r.have > CORIO__CTL_LINE_MAX || nv == MAXV)
				abort();
			v[nv++] = c;
			if (c == CORIO__CTL_TOO_LONG)
				return nv; /* the server closes the connection */
		}
		if (off == n)
			return nv;
		off += corio__ctl_feed(&r, (const char *)d + off, n - off < cut ? n - off : cut);
	}
}

static int model_line(const uint8_t *p, size_t len)
{
	while (len && (p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t'))
		len--;
	while (len && (*p == ' ' || *p == '\t'))
		p++, len--;
	if (!len)
		return CORIO__CTL_EMPTY;
	if (len == 5 && !memcmp(p, "stats", 5))
		return CORIO__CTL_STATS;
	if (len == 4 && !memcmp(p, "prom", 4))
		return CORIO__CTL_PROM;
	if (len == 4 && !memcmp(p, "help", 4))
		return CORIO__CTL_HELP;
	return CORIO__CTL_UNKNOWN;
}

static size_t model(const uint8_t *d, size_t n, int *v)
{
	size_t nv = 0, start = 0;

	while (start < n && nv < MAXV) {
		const uint8_t *lf = memchr(d + start, '\n', n - start);
		size_t len = (lf ? (size_t)(lf - d) : n) - start;

		if (len >= CORIO__CTL_LINE_MAX) {
			v[nv++] = CORIO__CTL_TOO_LONG;
			break;
		}
		if (!lf)
			break; /* a partial line: nothing yet */
		v[nv++] = model_line(d + start, len);
		start += len + 1;
	}
	return nv;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int a[MAXV], b[MAXV], m[MAXV];
	size_t na, nb, nm, cut;

	if (size < 1)
		return 0;
	cut = (size_t)data[0] % 31 + 1;
	data++, size--;
	na = run(data, size, size ? size : 1, a);
	nb = run(data, size, cut, b);
	nm = model(data, size, m);
	if (na != nb || memcmp(a, b, na * sizeof(int)))
		abort(); /* the cuts changed the commands */
	if (na != nm || memcmp(a, m, na * sizeof(int)))
		abort(); /* not what the protocol says */
	return 0;
}
