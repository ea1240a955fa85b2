/* SPDX-License-Identifier: MIT */
/* tools/common/sockperf.c - see tool_sockperf.h. */
#include "sockperf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tool_buf_put(struct tool_buf *b, const void *src, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		unsigned char *p;

		while (cap < b->len + n)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, src, n);
	b->len += n;
	return 0;
}

void tool_buf_free(struct tool_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

void tool_sp_init(struct tool_sp *sp)
{
	memset(sp, 0, sizeof(*sp));
}

int tool_sp_feed(struct tool_sp *sp, const unsigned char *in, size_t n, struct tool_buf *out)
{
	while (n) {
		size_t k;

		if (sp->have < TOOL_SP_HDR) {
			k = TOOL_SP_HDR - sp->have;
			if (k > n)
				k = n;
			memcpy(sp->hdr + sp->have, in, k);
			sp->have += (uint32_t)k;
			in += k;
			n -= k;
			if (sp->have < TOOL_SP_HDR)
				return 0;
			sp->len = (uint32_t)sp->hdr[10] << 24 | (uint32_t)sp->hdr[11] << 16 |
				  (uint32_t)sp->hdr[12] << 8 | sp->hdr[13];
			if (sp->len < TOOL_SP_HDR || sp->len > TOOL_SP_MAX_MSG)
				return -EPROTO;
			/* flags are big-endian: their low byte is hdr[9] */
			sp->reply = tool_sp_wants_reply(sp->hdr[9]);
			sp->msgs++;
			if (sp->reply) {
				sp->hdr[9] &= (unsigned char)~TOOL_SP_F_CLIENT;
				sp->replies++;
				if (tool_buf_put(out, sp->hdr, TOOL_SP_HDR))
					return -ENOMEM;
			}
		}
		k = sp->len - sp->have;
		if (k > n)
			k = n;
		if (k && sp->reply && tool_buf_put(out, in, k))
			return -ENOMEM;
		sp->have += (uint32_t)k;
		in += k;
		n -= k;
		if (sp->have == sp->len)
			sp->have = 0;
	}
	return 0;
}

int tool_sp_dgram_next(unsigned char *d, size_t n, size_t *pos, size_t *off, size_t *len)
{
	while (*pos < n) {
		unsigned char *m = d + *pos;
		size_t left = n - *pos;
		uint32_t l;

		if (left < TOOL_SP_HDR) {
			*pos = n;
			return -EPROTO;
		}
		l = (uint32_t)m[10] << 24 | (uint32_t)m[11] << 16 | (uint32_t)m[12] << 8 | m[13];
		if (l < TOOL_SP_HDR || l > left) {
			*pos = n;
			return -EPROTO;
		}
		*pos += l;
		if (tool_sp_wants_reply(m[9])) {
			m[9] &= (unsigned char)~TOOL_SP_F_CLIENT;
			*off = (size_t)(m - d);
			*len = l;
			return 1;
		}
	}
	return 0;
}
