/* SPDX-License-Identifier: MIT */
/*
 * fuzz_resp - corio-kv's RESP parser (resp_parse(), no I/O) on any byte
 * stream: it never crashes or reads out of bounds, its result does not
 * depend on how the bytes were cut into receives (the server re-parses
 * from the same place when more bytes arrive), it never asks for fewer
 * bytes than it has, and every multi-bulk command it accepts re-encodes to
 * exactly the bytes it consumed (lengths are canonical: no sign, no
 * leading zero), every inline one to words without blanks.
 */
#include "kv/out.h"
#include "kv/resp.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Parse d[0..n) delivered cut bytes at a time; the commands (arguments
 * joined by '|' with their lengths) and the final state go to out. */
static void run(const char *d, size_t n, size_t cut, const struct kv_limits *lim, struct kv_buf *out)
{
	struct kv_argv av = { 0 };
	size_t pos = 0, have = 0;
	char err[160];
	int r = RESP_MORE;

	while (r == RESP_MORE || r == RESP_CMD) {
		size_t used = 0, need = 0;

		if (r == RESP_MORE) {
			if (have == n)
				break;
			have = n - have < cut ? n : have + cut;
		}
		av.n = 0;
		r = resp_parse(d + pos, have - pos, lim, &av, &used, &need, err, sizeof(err));
		if (r == RESP_MORE && need <= have - pos)
			abort(); /* it must wait for more than it has */
		if (r != RESP_CMD)
			continue;
		if (used == 0 || used > have - pos)
			abort();
		if (d[pos] == '*' && av.n) { /* canonical: re-encoding gives the same bytes */
			struct kv_buf b = { 0 };

			kv_num(&b, '*', (long long)av.n);
			for (size_t i = 0; i < av.n; i++)
				kv_bulk(&b, av.v[i].p, av.v[i].n);
			if (b.len != used || memcmp(b.p, d + pos, used))
				abort();
			kv_buf_free(&b);
		} else if (d[pos] != '*') {
			for (size_t i = 0; i < av.n; i++)
				if (!av.v[i].n || memchr(av.v[i].p, ' ', av.v[i].n) ||
				    memchr(av.v[i].p, '\t', av.v[i].n) || memchr(av.v[i].p, '\n', av.v[i].n))
					abort();
		}
		kv_num(out, '*', (long long)av.n);
		for (size_t i = 0; i < av.n; i++)
			kv_bulk(out, av.v[i].p, av.v[i].n);
		pos += used;
	}
	if (r == RESP_ERR)
		kv_put(out, err, strlen(err));
	else
		kv_num(out, ':', (long long)(n - pos)); /* unparsed tail */
	free(av.v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kv_limits lim;
	struct kv_buf a = { 0 }, b = { 0 };
	size_t cut;

	if (size < 3)
		return 0;
	kv_limits_default(&lim);
	cut = (size_t)data[0] % 17 + 1;
	lim.proto_max_bulk_len = (size_t)data[1] % 64; /* small limits reach the errors */
	lim.max_multibulk = (size_t)data[2] % 16 + 1;
	lim.qbuf_limit = 512;
	data += 3, size -= 3;
	run((const char *)data, size, size ? size : 1, &lim, &a);
	run((const char *)data, size, cut, &lim, &b);
	if (a.nomem || b.nomem)
		abort();
	if (a.len != b.len || (a.len && memcmp(a.p, b.p, a.len)))
		abort(); /* the cuts changed the result */
	kv_buf_free(&a);
	kv_buf_free(&b);
	return 0;
}
