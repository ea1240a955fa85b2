/* SPDX-License-Identifier: MIT */
/*
 * fuzz_upper - upper-echo's line splitter (struct ue_line, no I/O) on any
 * byte stream and any cutting of it into receives: it never crashes, its
 * answers do not depend on the cuts, and every answer line is the input
 * line upper-cased plus "!!!", or the too-long error.
 */
#include "examples/upper-echo/upper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run(const uint8_t *d, size_t n, size_t cut, size_t max, struct ue_buf *out)
{
	struct ue_line l;
	int ret = 0;

	ue_line_init(&l, max);
	for (size_t off = 0; off < n && !ret; off += cut)
		ret = ue_feed(&l, (const char *)d + off, n - off < cut ? n - off : cut, out);
	if (!ret)
		ret = ue_finish(&l, out);
	ue_line_free(&l);
	return ret;
}

/* The protocol as the header comment states it, written independently:
 * lines end at LF (a CR before it is the ending's), answers in order, a line
 * of more than max bytes (ending excluded) gets the error instead, and a last
 * line without LF is answered with LF. */
static void model(const uint8_t *d, size_t n, size_t max, struct ue_buf *out)
{
	size_t start = 0;

	while (start < n) {
		const uint8_t *lf = memchr(d + start, '\n', n - start);
		size_t end = lf ? (size_t)(lf - d) : n, len = end - start;
		bool crlf = lf && len && d[end - 1] == '\r';

		if (len - crlf > max) {
			char msg[80];
			int k = snprintf(msg, sizeof(msg), "ERROR line too long (max %zu bytes)\n", max);

			ue_put(out, msg, (size_t)k);
		} else {
			for (size_t i = start; i < end - crlf; i++) {
				char c = (char)d[i];

				ue_put(out, c >= 'a' && c <= 'z' ? &(char){ (char)(c - 32) } : &c, 1);
			}
			ue_put(out, crlf ? "!!!\r\n" : "!!!\n", crlf ? 5 : 4);
		}
		start = end + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ue_buf want = { 0 };
	struct ue_buf a = { 0 }, b = { 0 };
	size_t cut, max;
	int r1, r2;

	if (size < 2)
		return 0;
	cut = (size_t)data[0] % 13 + 1;
	max = (size_t)data[1] % 64 + 1; /* small limits reach the too-long path */
	data += 2, size -= 2;
	r1 = run(data, size, size ? size : 1, max, &a);
	r2 = run(data, size, cut, max, &b);
	if (r1 || r2)
		abort(); /* only -ENOMEM can fail, and it does not here */
	if (a.len != b.len || (a.len && memcmp(a.p, b.p, a.len)))
		abort(); /* the cuts changed the answers */
	model(data, size, max, &want);
	if (want.len != a.len || (a.len && memcmp(want.p, a.p, a.len)))
		abort(); /* the answers are not what the protocol says */
	free(a.p);
	free(b.p);
	free(want.p);
	return 0;
}
