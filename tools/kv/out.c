/* SPDX-License-Identifier: MIT */
/* tools/kv/out.c - growable output buffers and RESP replies; see out.h. */
#include "out.h"

#include <stdlib.h>
#include <string.h>

bool kv_reserve(struct kv_buf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->len + more <= b->cap)
		return true;
	if (b->nomem)
		return false;
	cap = b->cap ? b->cap * 2 : 512;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->nomem = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void kv_put(struct kv_buf *b, const void *p, size_t n)
{
	if (n && kv_reserve(b, n)) { /* n 0: p may be an empty buffer's NULL */
		memcpy(b->p + b->len, p, n);
		b->len += n;
	}
}

size_t kv_lltoa(char *dst, long long v)
{
	char tmp[24];
	unsigned long long u = v < 0 ? 0 - (unsigned long long)v : (unsigned long long)v;
	size_t n = 0, i = 0;

	do
		tmp[n++] = (char)('0' + u % 10);
	while ((u /= 10));
	if (v < 0)
		dst[i++] = '-';
	while (n)
		dst[i++] = tmp[--n];
	return i;
}

/* ":v\r\n", "*v\r\n", "$v\r\n" */
void kv_num(struct kv_buf *b, char type, long long v)
{
	if (kv_reserve(b, 24)) {
		b->p[b->len++] = type;
		b->len += kv_lltoa(b->p + b->len, v);
		b->p[b->len++] = '\r';
		b->p[b->len++] = '\n';
	}
}

void kv_bulk(struct kv_buf *b, const void *p, size_t n)
{
	if (kv_reserve(b, n + 32)) {
		kv_num(b, '$', (long long)n);
		memcpy(b->p + b->len, p, n);
		b->len += n;
		b->p[b->len++] = '\r';
		b->p[b->len++] = '\n';
	}
}

void kv_bulkstr(struct kv_buf *b, const char *s)
{
	kv_bulk(b, s, strlen(s));
}

/* Null: RESP2's null bulk string (Redis 7.0 answers it for arrays too, as
 * COMMAND INFO of an unknown name), RESP3's null. */
void kv_null(struct kv_buf *b, bool resp3)
{
	if (resp3)
		KV_LIT(b, "_\r\n");
	else
		KV_LIT(b, "$-1\r\n");
}

/* Text for humans (INFO, CLIENT INFO): RESP3's verbatim string, as Redis. */
void kv_verbatim(struct kv_buf *b, const void *p, size_t n, bool resp3)
{
	if (!resp3) {
		kv_bulk(b, p, n);
		return;
	}
	kv_num(b, '=', (long long)n + 4);
	KV_LIT(b, "txt:");
	kv_put(b, p, n);
	KV_LIT(b, "\r\n");
}

/* "-ERR msg\r\n" (or another error prefix that msg starts with, "-OOM ...") */
void kv_err(struct kv_buf *b, const char *msg)
{
	kv_put(b, "-", 1);
	kv_put(b, msg, strlen(msg));
	KV_LIT(b, "\r\n");
}

void kv_buf_free(struct kv_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}
