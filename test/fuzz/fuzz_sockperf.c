/* SPDX-License-Identifier: MIT */
/*
 * fuzz_sockperf - the sockperf reflector's parser (tools/common/sockperf.c)
 * on any byte stream: it never crashes, and its output does not depend on
 * how the stream was cut into receives (the first input byte picks the cut
 * size; the result must equal feeding it whole). Every reply it writes is a
 * sockperf frame with the client bit cleared (the last may be cut short
 * when the stream ends inside a message: replies stream as bytes arrive).
 */
#include "common/sockperf.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int feed(const uint8_t *d, size_t n, size_t cut, struct tool_buf *out, uint64_t *msgs)
{
	struct tool_sp sp;
	int ret = 0;

	tool_sp_init(&sp);
	for (size_t off = 0; off < n && !ret; off += cut)
		ret = tool_sp_feed(&sp, d + off, n - off < cut ? n - off : cut, out);
	*msgs = sp.replies;
	return ret;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tool_buf whole = { 0 }, parts = { 0 };
	uint64_t m1, m2;
	size_t cut;
	int r1, r2;

	if (size < 1)
		return 0;
	cut = (size_t)data[0] % 17 + 1;
	data++, size--;
	r1 = feed(data, size, size ? size : 1, &whole, &m1);
	r2 = feed(data, size, cut, &parts, &m2);
	if (r1 != r2 || (r1 && r1 != -EPROTO && r1 != -ENOMEM))
		abort();
	if (!r1 && (m1 != m2 || whole.len != parts.len || (whole.len && memcmp(whole.p, parts.p, whole.len))))
		abort(); /* the cut changed what was reflected */
	/* Whole frames with the client bit clear, one per reply; only the last
	 * may be cut short, when the stream ended inside its message. */
	uint64_t frames = 0;

	for (size_t off = 0; !r1 && off < whole.len; frames++) {
		uint32_t len;

		if (whole.len - off < TOOL_SP_HDR)
			abort(); /* a header is always written whole */
		len = (uint32_t)whole.p[off + 10] << 24 | (uint32_t)whole.p[off + 11] << 16 |
		      (uint32_t)whole.p[off + 12] << 8 | whole.p[off + 13];
		if (len < TOOL_SP_HDR || (whole.p[off + 9] & TOOL_SP_F_CLIENT))
			abort();
		off += len < whole.len - off ? len : whole.len - off;
	}
	if (!r1 && frames != m1)
		abort();
	tool_buf_free(&whole);
	tool_buf_free(&parts);
	return 0;
}
