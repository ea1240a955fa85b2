/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/out.h - growable output buffers and the RESP replies written
 * into them. A write that does not fit sets nomem and writes nothing more:
 * the connection gives up once its batch is done.
 */
#ifndef CORIO_KV_OUT_H
#define CORIO_KV_OUT_H

#include <stdbool.h>
#include <stddef.h>

struct kv_buf {
	char *p;
	size_t len, cap;
	bool nomem; /* a write did not fit: the connection gives up */
};

bool kv_reserve(struct kv_buf *b, size_t more);
void kv_put(struct kv_buf *b, const void *p, size_t n);
#define KV_LIT(b, s) kv_put((b), s, sizeof(s) - 1)

size_t kv_lltoa(char *dst, long long v);
void kv_num(struct kv_buf *b, char type, long long v);
void kv_bulk(struct kv_buf *b, const void *p, size_t n);
void kv_bulkstr(struct kv_buf *b, const char *s);
void kv_null(struct kv_buf *b, bool resp3);
void kv_verbatim(struct kv_buf *b, const void *p, size_t n, bool resp3);
void kv_err(struct kv_buf *b, const char *msg);
void kv_buf_free(struct kv_buf *b);

#endif
