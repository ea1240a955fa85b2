/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/rdb.h - Redis's RDB file format, version 10 (Redis 7.0): the
 * bytes of a dump, written and read, with no I/O and no shard state (the
 * snapshot and the load around it are save.c's). Written from the format's
 * description (Redis's rdb.h, listpack.c, ziplist.c, lzf_d.c, crc64.c
 * describe it; no code is taken from them).
 *
 * A file: "REDIS0010", aux fields (0xFA name value), per database SELECTDB
 * (0xFE n) and RESIZEDB (0xFB keys expires), then per key [0xFC expiry in
 * Unix ms, 8 bytes LE] type key value, then EOF (0xFF) and the CRC64 (Jones
 * polynomial, reflected, 8 bytes LE) of every byte before it.
 */
#ifndef CORIO_KV_RDB_H
#define CORIO_KV_RDB_H

#include <stddef.h>
#include <stdint.h>

#include "out.h"
#include "resp.h"

#define KV_RDB_VERSION 10

/* value types (the ones corio-kv writes or reads) */
#define RDB_TYPE_STRING 0
#define RDB_TYPE_HASH 4
#define RDB_TYPE_HASH_ZIPLIST 13
#define RDB_TYPE_HASH_LISTPACK 16
/* opcodes */
#define RDB_OP_FUNCTION2 245
#define RDB_OP_FUNCTION 246
#define RDB_OP_MODULE_AUX 247
#define RDB_OP_IDLE 248
#define RDB_OP_FREQ 249
#define RDB_OP_AUX 250
#define RDB_OP_RESIZEDB 251
#define RDB_OP_EXPIRETIME_MS 252
#define RDB_OP_EXPIRETIME 253
#define RDB_OP_SELECTDB 254
#define RDB_OP_EOF 255

struct kv_entry;

/* CRC64 (Jones, reflected, init 0): crc of p[0..n) continued from crc.
 * kv_crc64(0, "123456789", 9) == 0xe9c6d914c4b8d9ca. */
uint64_t kv_crc64(uint64_t crc, const void *p, size_t n);

/* LZF: decompress in[0..n) into exactly outn bytes of out: 0, or -EINVAL
 * when the input is malformed or does not make exactly outn bytes. */
int kv_lzf_decompress(const uint8_t *in, size_t n, uint8_t *out, size_t outn);
/* LZF-compress n bytes into out: the length written, or 0 when it would
 * not fit outn bytes. */
size_t kv_lzf_compress(const uint8_t *in, size_t n, uint8_t *out, size_t outn);

/* ---- writing (into a growable buffer) ---- */

void kv_rdb_put_len(struct kv_buf *b, uint64_t len);
/* A string: integer-encoded where Redis would (a canonical integer of at
 * most 11 characters that fits 32 bits), else length and bytes. */
void kv_rdb_put_str(struct kv_buf *b, const char *p, size_t n);
/* "REDIS0010", the aux fields, and (keys > 0) SELECTDB 0 and RESIZEDB. */
void kv_rdb_put_header(struct kv_buf *b, int64_t unix_s, uint64_t used_mem, uint64_t keys,
		       uint64_t expires);
/* One key: its expiry (monotonic ms + unix_off = Unix ms), type, key and
 * value (a small hash as a listpack, a large one field by field). */
void kv_rdb_put_entry(struct kv_buf *b, const struct kv_entry *e, int64_t unix_off);
/* A listpack of the strings a[0..n) (fields and values in turn), as bytes. */
void kv_rdb_put_listpack(struct kv_buf *b, const struct kv_arg *a, size_t n);

/* ---- reading ---- */

enum { KV_RDB_STR, KV_RDB_HASH };

/* One key as read: its strings point into the file or into scratch memory
 * that lives until the callback returns. */
struct kv_rdb_obj {
	int type;                /* KV_RDB_STR, KV_RDB_HASH */
	struct kv_arg key, val;  /* val: a string's value */
	const struct kv_arg *fv; /* a hash's fields and values in turn */
	size_t npairs;
	int64_t expire_ms;       /* Unix ms; 0: none */
	uint64_t offset;         /* where its record starts in the file */
};

/* Called per key: 0 to go on, < 0 stops the read with that value. */
typedef int (*kv_rdb_fn)(void *arg, const struct kv_rdb_obj *o);

/*
 * Read the dump p[0..n): every key to fn. 0; -EINVAL for a file that is
 * not an RDB file, is corrupt or truncated, fails its checksum or holds a
 * type corio-kv does not serve (err then says what, at which offset);
 * -ENOMEM; or what fn returned. Accepts versions 1..10 and every encoding
 * Redis 7.0 writes for strings and hashes: raw, integer and LZF strings,
 * hashes field by field, as ziplist or as listpack.
 */
int kv_rdb_parse(const uint8_t *p, size_t n, kv_rdb_fn fn, void *arg, char *err, size_t errlen);

#endif
