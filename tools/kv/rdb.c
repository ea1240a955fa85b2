/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/rdb.c - the RDB format: CRC64, LZF decompression, listpack and
 * ziplist, and the file's records, written and read; see rdb.h.
 *
 * The reader works on the whole file in memory (save.c maps it) and checks
 * every length against what is left before it reads, so a corrupt or
 * truncated file gets an error naming the offset, never a read past the end.
 * Strings point into the file where they are stored raw; integers and LZF
 * strings are decoded into a scratch area that lives for one key.
 */
#include "kv.h"
#include "rdb.h"

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- CRC64: Jones polynomial 0xad93d23594c935a9, reflected; slice-by-8 tables,
 * and carry-less multiplication for long buffers where the CPU has it ---- */

#define CRC64_POLY_REFLECTED 0x95ac9329ac4bc9b5ull /* 0xad93d23594c935a9 bit-reversed */

static uint64_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (unsigned i = 0; i < 256; i++) {
		uint64_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ CRC64_POLY_REFLECTED : c >> 1;
		crc_tab[0][i] = c;
	}
	for (unsigned i = 0; i < 256; i++)
		for (int k = 1; k < 8; k++)
			crc_tab[k][i] = (crc_tab[k - 1][i] >> 8) ^ crc_tab[0][crc_tab[k - 1][i] & 0xff];
}

/* One unaligned load (gcc -O2 kept the byte loop this replaced as eight
 * loads and shifts: 60% of a snapshot's instructions went to it). */
static uint64_t le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

static uint64_t crc_table(uint64_t crc, const uint8_t *p, size_t n)
{
	while (n >= 8) {
		crc ^= le64(p);
		crc = crc_tab[7][crc & 0xff] ^ crc_tab[6][(crc >> 8) & 0xff] ^
		      crc_tab[5][(crc >> 16) & 0xff] ^ crc_tab[4][(crc >> 24) & 0xff] ^
		      crc_tab[3][(crc >> 32) & 0xff] ^ crc_tab[2][(crc >> 40) & 0xff] ^
		      crc_tab[1][(crc >> 48) & 0xff] ^ crc_tab[0][crc >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		crc = crc_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
/*
 * Carry-less multiplication (PCLMULQDQ), 16 bytes a step, about ten times
 * fewer instructions than the tables. In the reflected bit order (bit i of
 * a 64-bit word is the coefficient of x^(63-i)) the state R is 128 bits
 * congruent, mod P, to the message so far (the first 16 bytes with the
 * incoming crc xored into the first 8). Appending 16 bytes D:
 *   R' = R * x^128 + D = H * x^192 + L * x^128 + D  (mod P),
 * H being R's first 8 bytes and L its last 8. A carry-less product of two
 * reflected words is x * A * B, one degree up, so the constants are
 * x^191 mod P for H and x^127 mod P for L. The end needs no Barrett
 * reduction: the CRC of the 16 bytes of R from crc 0, by the tables, is
 * R * x^64 mod P, which is the message's CRC.
 */
static uint64_t clmul_k191, clmul_k127; /* reflected x^191, x^127 mod P */
static bool clmul_ok;

static uint64_t xpow_mod(unsigned e) /* reflected x^e mod P */
{
	uint64_t v = 1ull << 63; /* x^0 */

	while (e--)
		v = (v >> 1) ^ (v & 1 ? CRC64_POLY_REFLECTED : 0);
	return v;
}

__attribute__((target("pclmul,sse4.1"))) static uint64_t crc_clmul(uint64_t crc, const uint8_t *p,
								 size_t n)
{
	const __m128i k = _mm_set_epi64x((long long)clmul_k127, (long long)clmul_k191);
	__m128i r = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)p),
				  _mm_cvtsi64_si128((long long)crc));
	uint8_t out[16];

	p += 16;
	n -= 16;
	while (n >= 16) {
		__m128i h = _mm_clmulepi64_si128(r, k, 0x00); /* H * x^191 */
		__m128i l = _mm_clmulepi64_si128(r, k, 0x11); /* L * x^127 */

		r = _mm_xor_si128(_mm_xor_si128(h, l),
				  _mm_loadu_si128((const __m128i *)(const void *)p));
		p += 16;
		n -= 16;
	}
	_mm_storeu_si128((__m128i *)(void *)out, r);
	return crc_table(crc_table(0, out, sizeof(out)), p, n);
}
#endif

static void crc_init_all(void)
{
	crc_init();
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) {
		/* Check against the tables before trusting it: lengths around
		 * the block size, and a chained call. */
		uint8_t buf[300];
		bool same = true;

		clmul_k191 = xpow_mod(191);
		clmul_k127 = xpow_mod(127);
		for (unsigned i = 0; i < sizeof(buf); i++)
			buf[i] = (uint8_t)(i * 131u + 7u);
		for (size_t len = 16; len <= sizeof(buf) && same; len += 7)
			same = crc_clmul(0x0123456789abcdefull, buf, len) ==
			       crc_table(0x0123456789abcdefull, buf, len);
		clmul_ok = same;
	}
#endif
}

uint64_t kv_crc64(uint64_t crc, const void *buf, size_t n)
{
	pthread_once(&crc_once, crc_init_all);
#if defined(__x86_64__)
	if (n >= 64 && clmul_ok)
		return crc_clmul(crc, buf, n);
#endif
	return crc_table(crc, buf, n);
}

/* ---- LZF ----
 * A control byte c: below 32, a literal run of c + 1 bytes follows; else a
 * back reference: length c >> 5 (7: plus the next byte) + 2 bytes, from
 * ((c & 31) << 8 | next byte) + 1 bytes back. */
int kv_lzf_decompress(const uint8_t *in, size_t n, uint8_t *out, size_t outn)
{
	size_t i = 0, o = 0;

	while (i < n) {
		unsigned c = in[i++];

		if (c < 32) {
			size_t run = c + 1;

			if (i + run > n || o + run > outn)
				return -EINVAL;
			memcpy(out + o, in + i, run);
			i += run;
			o += run;
		} else {
			size_t len = c >> 5, back;

			if (len == 7) {
				if (i >= n)
					return -EINVAL;
				len += in[i++];
			}
			if (i >= n)
				return -EINVAL;
			back = ((size_t)(c & 31) << 8 | in[i++]) + 1;
			len += 2;
			if (back > o || o + len > outn)
				return -EINVAL;
			for (size_t k = 0; k < len; k++, o++) /* may overlap: byte by byte */
				out[o] = out[o - back];
		}
	}
	return o == outn ? 0 : -EINVAL;
}

/*
 * Compression, our own (the format above; Redis writes it with liblzf). A
 * table of the last position of each 3-byte hash finds a candidate; its
 * bytes decide (a stale entry from an earlier call points inside this
 * input or past ip, so the table is never cleared). References reach 8 KiB
 * back and run up to 264 bytes; literals go in runs of up to 32. The
 * output's length, or 0 when it would not fit outn (the caller then writes
 * the bytes as they are).
 */
#define LZF_HBITS 12
#define LZF_MAXBACK 8192
#define LZF_MAXLEN (2 + 7 + 255)

static bool lzf_lits(const uint8_t *in, size_t from, size_t to, uint8_t *out, size_t *o, size_t outn)
{
	while (from < to) {
		size_t run = to - from < 32 ? to - from : 32;

		if (*o + 1 + run > outn)
			return false;
		out[(*o)++] = (uint8_t)(run - 1);
		memcpy(out + *o, in + from, run);
		*o += run;
		from += run;
	}
	return true;
}

size_t kv_lzf_compress(const uint8_t *in, size_t n, uint8_t *out, size_t outn)
{
	static __thread uint32_t tab[1u << LZF_HBITS];
	size_t ip = 0, lit = 0, o = 0;

	if (n > UINT32_MAX)
		return 0;
	while (ip + 2 < n) {
		uint32_t v = (uint32_t)in[ip] << 16 | (uint32_t)in[ip + 1] << 8 | in[ip + 2];
		uint32_t h = (v * 2654435761u) >> (32 - LZF_HBITS);
		size_t ref = tab[h], back, len, max;

		tab[h] = (uint32_t)ip;
		if (ref >= ip || ip - ref > LZF_MAXBACK || memcmp(in + ref, in + ip, 3)) {
			ip++;
			continue;
		}
		max = n - ip < LZF_MAXLEN ? n - ip : LZF_MAXLEN;
		/* 8 bytes a step (ref < ip, so ref + len + 8 <= ip + max <= n),
		 * then byte by byte; the same length either way */
		for (len = 3; len + 8 <= max;) {
			uint64_t x = le64(in + ref + len) ^ le64(in + ip + len);

			if (x) {
				len += (size_t)__builtin_ctzll(x) / 8;
				goto matched;
			}
			len += 8;
		}
		while (len < max && in[ref + len] == in[ip + len])
			len++;
matched:
		if (!lzf_lits(in, lit, ip, out, &o, outn) || o + 3 > outn)
			return 0;
		back = ip - ref - 1;
		if (len - 2 < 7) {
			out[o++] = (uint8_t)((len - 2) << 5 | back >> 8);
		} else {
			out[o++] = (uint8_t)(7 << 5 | back >> 8);
			out[o++] = (uint8_t)(len - 2 - 7);
		}
		out[o++] = (uint8_t)back;
		ip += len;
		lit = ip;
	}
	return lzf_lits(in, lit, n, out, &o, outn) ? o : 0;
}

/* ---- writing ---- */

void kv_rdb_put_len(struct kv_buf *b, uint64_t len)
{
	uint8_t t[9];
	size_t n;

	if (len < 64) {
		t[0] = (uint8_t)len;
		n = 1;
	} else if (len < 16384) {
		t[0] = (uint8_t)(0x40 | len >> 8);
		t[1] = (uint8_t)len;
		n = 2;
	} else if (len <= UINT32_MAX) {
		t[0] = 0x80;
		for (int i = 0; i < 4; i++)
			t[1 + i] = (uint8_t)(len >> (24 - 8 * i));
		n = 5;
	} else {
		t[0] = 0x81;
		for (int i = 0; i < 8; i++)
			t[1 + i] = (uint8_t)(len >> (56 - 8 * i));
		n = 9;
	}
	kv_put(b, t, n);
}

static void put_le(struct kv_buf *b, uint64_t v, int bytes)
{
	uint8_t t[8];

	for (int i = 0; i < bytes; i++)
		t[i] = (uint8_t)(v >> (8 * i));
	kv_put(b, t, (size_t)bytes);
}

void kv_rdb_put_str(struct kv_buf *b, const char *p, size_t n)
{
	long long v;

	/* Redis's rdbTryIntegerEncoding: a canonical integer (kv_str2ll is
	 * string2ll) of at most 11 characters, if it fits 32 bits */
	if (n && n <= 11 && kv_str2ll(p, n, &v) && v >= INT32_MIN && v <= INT32_MAX) {
		uint8_t t = v >= -128 && v <= 127 ? 0xc0 : v >= -32768 && v <= 32767 ? 0xc1 : 0xc2;

		kv_put(b, &t, 1);
		put_le(b, (uint64_t)v, t == 0xc0 ? 1 : t == 0xc1 ? 2 : 4);
		return;
	}
	/* Redis's rdbSaveLzfStringObject: strings over 20 bytes that LZF
	 * makes at least 4 bytes shorter; 0xc3, the lengths, the bytes. */
	if (n > 20 && kv_reserve(b, n + 24)) {
		uint8_t *at = (uint8_t *)b->p + b->len, *z = at + 24;
		size_t c = kv_lzf_compress((const uint8_t *)p, n, z, n - 4), hl;
		struct kv_buf h = { 0 };

		if (c) {
			uint8_t hb[24];

			/* the header into hb (lengths take at most 9 bytes each) */
			h.p = (char *)hb;
			h.cap = sizeof(hb);
			hb[0] = 0xc3;
			h.len = 1;
			kv_rdb_put_len(&h, c);
			kv_rdb_put_len(&h, n);
			hl = h.len;
			memmove(at + hl, z, c);
			memcpy(at, hb, hl);
			b->len += hl + c;
			return;
		}
	}
	kv_rdb_put_len(b, n);
	kv_put(b, p, n);
}

static void put_aux(struct kv_buf *b, const char *name, const char *val)
{
	uint8_t op = RDB_OP_AUX;

	kv_put(b, &op, 1);
	kv_rdb_put_str(b, name, strlen(name));
	kv_rdb_put_str(b, val, strlen(val));
}

void kv_rdb_put_header(struct kv_buf *b, int64_t unix_s, uint64_t used_mem, uint64_t keys,
		       uint64_t expires)
{
	char num[24];
	uint8_t op;

	KV_LIT(b, "REDIS0010");
	put_aux(b, "redis-ver", KV_VERSION);
	put_aux(b, "redis-bits", sizeof(void *) == 8 ? "64" : "32");
	snprintf(num, sizeof(num), "%lld", (long long)unix_s);
	put_aux(b, "ctime", num);
	snprintf(num, sizeof(num), "%llu", (unsigned long long)used_mem);
	put_aux(b, "used-mem", num);
	put_aux(b, "aof-base", "0");
	if (!keys) /* Redis writes no database section for an empty one */
		return;
	op = RDB_OP_SELECTDB;
	kv_put(b, &op, 1);
	kv_rdb_put_len(b, 0);
	op = RDB_OP_RESIZEDB;
	kv_put(b, &op, 1);
	kv_rdb_put_len(b, keys);
	kv_rdb_put_len(b, expires);
}

/* A listpack element's header and integer bytes (s is NULL for an integer
 * element whose bytes are all in hdr). Returns the encoding's size (without
 * the string's bytes); *isint tells which. */
static size_t lp_enc(const char *s, size_t n, uint8_t hdr[9], size_t *hn, bool *isint)
{
	long long v;

	*isint = false;
	if (n && n <= 20 && kv_str2ll(s, n, &v)) {
		*isint = true;
		if (v >= 0 && v <= 127) {
			hdr[0] = (uint8_t)v;
			*hn = 1;
		} else if (v >= -4096 && v <= 4095) {
			uint64_t u = (uint64_t)v & 0x1fff;

			hdr[0] = (uint8_t)(0xc0 | u >> 8);
			hdr[1] = (uint8_t)u;
			*hn = 2;
		} else {
			int bytes = v >= -32768 && v <= 32767 ? 2 : v >= -8388608 && v <= 8388607 ? 3 :
				    v >= INT32_MIN && v <= INT32_MAX ? 4 : 8;

			hdr[0] = bytes == 2 ? 0xf1 : bytes == 3 ? 0xf2 : bytes == 4 ? 0xf3 : 0xf4;
			for (int i = 0; i < bytes; i++)
				hdr[1 + i] = (uint8_t)((uint64_t)v >> (8 * i));
			*hn = 1 + (size_t)bytes;
		}
		return *hn;
	}
	if (n < 64) {
		hdr[0] = (uint8_t)(0x80 | n);
		*hn = 1;
	} else if (n < 4096) {
		hdr[0] = (uint8_t)(0xe0 | n >> 8);
		hdr[1] = (uint8_t)n;
		*hn = 2;
	} else {
		hdr[0] = 0xf0;
		for (int i = 0; i < 4; i++)
			hdr[1 + i] = (uint8_t)(n >> (8 * i));
		*hn = 5;
	}
	return *hn + n;
}

/* The back length of an element of l bytes (encoding and data), forward. */
static size_t lp_backlen(uint64_t l, uint8_t out[5])
{
	size_t n = l <= 127 ? 1 : l < 16383 ? 2 : l < 2097151 ? 3 : l < 268435455 ? 4 : 5;

	for (size_t i = 0; i < n; i++) {
		size_t shift = 7 * (n - 1 - i);

		out[i] = (uint8_t)((l >> shift) & 127);
		if (i > 0)
			out[i] |= 128;
	}
	return n;
}

void kv_rdb_put_listpack(struct kv_buf *b, const struct kv_arg *a, size_t n)
{
	uint64_t total = 6 + 1;
	uint8_t hdr[9], bl[5];
	size_t hn;
	bool isint;

	for (size_t i = 0; i < n; i++) {
		size_t l = lp_enc(a[i].p, a[i].n, hdr, &hn, &isint);

		total += l + lp_backlen(l, bl);
	}
	kv_rdb_put_len(b, total);
	put_le(b, total, 4);
	put_le(b, n < 65535 ? n : 65535, 2);
	for (size_t i = 0; i < n; i++) {
		size_t l = lp_enc(a[i].p, a[i].n, hdr, &hn, &isint);

		kv_put(b, hdr, hn);
		if (!isint)
			kv_put(b, a[i].p, a[i].n);
		kv_put(b, bl, lp_backlen(l, bl));
	}
	hdr[0] = 0xff;
	kv_put(b, hdr, 1);
}

struct put_hash {
	struct kv_buf *b;
	struct kv_arg a[2 * 128 + 2];
	size_t n;
};

static void put_field(void *arg, const char *f, size_t fn, const char *v, size_t vn)
{
	struct put_hash *ph = arg;

	if (ph->n + 2 <= sizeof(ph->a) / sizeof(ph->a[0])) { /* small: kept for the listpack */
		ph->a[ph->n++] = (struct kv_arg){ f, fn };
		ph->a[ph->n++] = (struct kv_arg){ v, vn };
	}
}

static void put_field_raw(void *arg, const char *f, size_t fn, const char *v, size_t vn)
{
	struct kv_buf *b = arg;

	kv_rdb_put_str(b, f, fn);
	kv_rdb_put_str(b, v, vn);
}

void kv_rdb_put_entry(struct kv_buf *b, const struct kv_entry *e, int64_t unix_off)
{
	uint8_t t[1];

	if (e->expire) {
		t[0] = RDB_OP_EXPIRETIME_MS;
		kv_put(b, t, 1);
		put_le(b, (uint64_t)(e->expire + unix_off), 8);
	}
	if (e->type == KV_STR) {
		t[0] = RDB_TYPE_STRING;
		kv_put(b, t, 1);
		kv_rdb_put_str(b, e->data, e->klen);
		kv_rdb_put_str(b, e->data + e->klen, e->vlen);
	} else if (e->enc == KV_ENC_SMALL) {
		static __thread struct put_hash ph; /* 4 KiB: off the fiber's stack */

		ph.n = 0;
		kv_hash_walk(e, put_field, &ph);
		t[0] = RDB_TYPE_HASH_LISTPACK;
		kv_put(b, t, 1);
		kv_rdb_put_str(b, e->data, e->klen);
		kv_rdb_put_listpack(b, ph.a, ph.n);
	} else {
		t[0] = RDB_TYPE_HASH;
		kv_put(b, t, 1);
		kv_rdb_put_str(b, e->data, e->klen);
		kv_rdb_put_len(b, kv_hash_nfields(e));
		kv_hash_walk(e, put_field_raw, b);
	}
}

/* ---- reading ---- */

/* A string read: in the file (p), or at off in the scratch area (p NULL). */
struct rstr {
	const char *p;
	size_t off, n;
};

struct rd {
	const uint8_t *p;
	size_t n, at;
	int version;
	char *err;
	size_t errlen;
	struct kv_buf scratch;  /* decoded strings of the current key */
	struct rstr *fv;        /* a hash's fields and values */
	size_t nfv, fvcap;
	struct kv_arg *args;    /* fv resolved */
	size_t argcap;
};

static int rd_fail(struct rd *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int rd_fail(struct rd *r, size_t at, const char *fmt, ...)
{
	char why[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(r->err, r->errlen, "bad RDB file at offset %zu (of %zu bytes): %s", at, r->n, why);
	return -EINVAL;
}

static int rd_need(struct rd *r, size_t k, const char *what)
{
	if (r->n - r->at < k)
		return rd_fail(r, r->at, "truncated: %s needs %zu bytes, %zu are left", what, k,
			       r->n - r->at);
	return 0;
}

static int rd_byte(struct rd *r, uint8_t *b, const char *what)
{
	int ret = rd_need(r, 1, what);

	if (!ret)
		*b = r->p[r->at++];
	return ret;
}

/* A length, or (*enc set) the special encoding of a string. */
static int rd_len(struct rd *r, uint64_t *len, int *enc, const char *what)
{
	uint8_t b;
	int ret = rd_byte(r, &b, what);

	if (ret)
		return ret;
	if (enc)
		*enc = -1;
	switch (b >> 6) {
	case 0:
		*len = b & 0x3f;
		return 0;
	case 1:
		if ((ret = rd_need(r, 1, what)))
			return ret;
		*len = (uint64_t)(b & 0x3f) << 8 | r->p[r->at++];
		return 0;
	case 2: {
		int bytes = b == 0x80 ? 4 : b == 0x81 ? 8 : 0;

		if (!bytes)
			return rd_fail(r, r->at - 1, "unknown length encoding 0x%02x in %s", b, what);
		if ((ret = rd_need(r, (size_t)bytes, what)))
			return ret;
		*len = 0;
		for (int i = 0; i < bytes; i++)
			*len = *len << 8 | r->p[r->at++];
		return 0;
	}
	default:
		if (!enc)
			return rd_fail(r, r->at - 1, "a string encoding (0x%02x) where %s is a length", b,
				       what);
		*enc = b & 0x3f;
		*len = 0;
		return 0;
	}
}

static int rd_scratch_put(struct rd *r, struct rstr *s, const void *p, size_t n)
{
	s->p = NULL;
	s->off = r->scratch.len;
	s->n = n;
	kv_put(&r->scratch, p, n);
	return r->scratch.nomem ? -ENOMEM : 0;
}

static int rd_int_text(struct rd *r, struct rstr *s, long long v)
{
	char num[24];

	return rd_scratch_put(r, s, num, kv_lltoa(num, v));
}

static int64_t rd_sle(const uint8_t *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	if (bytes < 8 && (v >> (8 * bytes - 1)) & 1) /* sign-extend */
		v |= ~0ull << (8 * bytes);
	return (int64_t)v;
}

static int rd_str(struct rd *r, struct rstr *s, const char *what)
{
	size_t at = r->at;
	uint64_t len;
	int enc, ret = rd_len(r, &len, &enc, what);

	if (ret)
		return ret;
	if (enc < 0) {
		if ((ret = rd_need(r, len, what)))
			return ret;
		s->p = (const char *)r->p + r->at;
		s->n = (size_t)len;
		r->at += len;
		return 0;
	}
	if (enc <= 2) { /* 8, 16, 32-bit integer */
		int bytes = 1 << enc;

		if ((ret = rd_need(r, (size_t)bytes, what)))
			return ret;
		r->at += (size_t)bytes;
		return rd_int_text(r, s, rd_sle(r->p + r->at - bytes, bytes));
	}
	if (enc == 3) { /* LZF: compressed length, length, data */
		uint64_t clen, ulen;

		if ((ret = rd_len(r, &clen, NULL, what)) || (ret = rd_len(r, &ulen, NULL, what)) ||
		    (ret = rd_need(r, clen, what)))
			return ret;
		/* a token of 2-3 bytes makes at most 264: a longer claim is corrupt */
		/* (at least a byte: an empty string's scratch must not be NULL) */
		if (ulen > clen * 132 + 64 || !kv_reserve(&r->scratch, ulen ? ulen : 1))
			return ulen > clen * 132 + 64 ? rd_fail(r, at, "LZF string of %llu bytes claims "
								"%llu uncompressed", (unsigned long long)clen,
								(unsigned long long)ulen)
						      : -ENOMEM;
		if (kv_lzf_decompress(r->p + r->at, clen, (uint8_t *)r->scratch.p + r->scratch.len, ulen))
			return rd_fail(r, at, "LZF data of %s does not decompress", what);
		s->p = NULL;
		s->off = r->scratch.len;
		s->n = ulen;
		r->scratch.len += ulen;
		r->at += clen;
		return 0;
	}
	return rd_fail(r, at, "unknown string encoding %d in %s", enc, what);
}

static const char *rstr_ptr(const struct rd *r, const struct rstr *s)
{
	return s->p ? s->p : r->scratch.p + s->off;
}

static int rd_push(struct rd *r, const struct rstr *s)
{
	if (r->nfv == r->fvcap) {
		size_t cap = r->fvcap ? r->fvcap * 2 : 256;
		struct rstr *fv = realloc(r->fv, cap * sizeof(*fv));

		if (!fv)
			return -ENOMEM;
		r->fv = fv;
		r->fvcap = cap;
	}
	r->fv[r->nfv++] = *s;
	return 0;
}

/* The elements of the listpack b[0..n) (at: its offset in the file, for
 * errors) pushed to r->fv. */
static int rd_listpack(struct rd *r, const uint8_t *b, size_t n, size_t at)
{
	size_t i = 6, count = 0;
	uint32_t total;
	int ret;

	if (n < 7)
		return rd_fail(r, at, "listpack of %zu bytes", n);
	total = (uint32_t)rd_sle(b, 4) & 0xffffffffu;
	if (total != n || b[n - 1] != 0xff)
		return rd_fail(r, at, "listpack header says %u bytes, the string has %zu", total, n);
	while (i < n - 1) {
		uint8_t c = b[i];
		size_t hn = 1, len = 0, el;
		struct rstr s;
		uint8_t bl[5];

		if (!(c & 0x80)) {
			ret = rd_int_text(r, &s, c);
		} else if ((c & 0xc0) == 0x80) {
			len = c & 0x3f;
		} else if ((c & 0xe0) == 0xc0) {
			if (i + 2 > n - 1)
				goto trunc;
			hn = 2;
			{
				int v = (c & 0x1f) << 8 | b[i + 1];

				ret = rd_int_text(r, &s, v >= 4096 ? v - 8192 : v);
			}
		} else if ((c & 0xf0) == 0xe0) {
			if (i + 2 > n - 1)
				goto trunc;
			hn = 2;
			len = (size_t)(c & 0x0f) << 8 | b[i + 1];
		} else if (c == 0xf0) {
			if (i + 5 > n - 1)
				goto trunc;
			hn = 5;
			len = (size_t)((uint64_t)rd_sle(b + i + 1, 4) & 0xffffffffu);
		} else if (c >= 0xf1 && c <= 0xf4) {
			int bytes = c == 0xf1 ? 2 : c == 0xf2 ? 3 : c == 0xf3 ? 4 : 8;

			hn = 1 + (size_t)bytes;
			if (i + hn > n - 1)
				goto trunc;
			ret = rd_int_text(r, &s, rd_sle(b + i + 1, bytes));
		} else {
			return rd_fail(r, at + i, "listpack element with encoding 0x%02x", c);
		}
		if ((c & 0xc0) == 0x80 || (c & 0xf0) == 0xe0 || c == 0xf0) { /* a string */
			if (len > n - 1 - i - hn)
				goto trunc;
			s.p = (const char *)b + i + hn;
			s.n = len;
			ret = 0;
		}
		if (ret)
			return ret;
		el = hn + len;
		i += el + lp_backlen(el, bl);
		if (i > n - 1)
			goto trunc;
		if ((ret = rd_push(r, &s)))
			return ret;
		count++;
	}
	if ((unsigned)(b[4] | b[5] << 8) != 65535 && (size_t)(b[4] | b[5] << 8) != count)
		return rd_fail(r, at, "listpack header counts %u elements, it holds %zu",
			       (unsigned)(b[4] | b[5] << 8), count);
	return 0;
trunc:
	return rd_fail(r, at + i, "listpack element runs past the listpack's end");
}

/* The entries of the ziplist b[0..n), as rd_listpack(). */
static int rd_ziplist(struct rd *r, const uint8_t *b, size_t n, size_t at)
{
	size_t i = 10;
	int ret;

	if (n < 11 || (uint32_t)(rd_sle(b, 4) & 0xffffffffu) != n || b[n - 1] != 0xff)
		return rd_fail(r, at, "ziplist header does not match its %zu bytes", n);
	while (i < n - 1) {
		uint8_t c;
		size_t len = 0, hn = 1;
		struct rstr s;

		i += b[i] < 254 ? 1 : 5; /* the previous entry's length */
		if (i >= n - 1)
			goto trunc;
		c = b[i];
		switch (c >> 6) {
		case 0:
			len = c & 0x3f;
			break;
		case 1:
			if (i + 2 > n - 1)
				goto trunc;
			len = (size_t)(c & 0x3f) << 8 | b[i + 1];
			hn = 2;
			break;
		case 2:
			if (c != 0x80)
				return rd_fail(r, at + i, "ziplist entry with encoding 0x%02x", c);
			if (i + 5 > n - 1)
				goto trunc;
			len = (size_t)b[i + 1] << 24 | (size_t)b[i + 2] << 16 | (size_t)b[i + 3] << 8 | b[i + 4];
			hn = 5;
			break;
		default: {
			int bytes = c == 0xc0 ? 2 : c == 0xd0 ? 4 : c == 0xe0 ? 8 : c == 0xf0 ? 3 :
				    c == 0xfe ? 1 : 0;

			if (bytes) {
				if (i + 1 + (size_t)bytes > n - 1)
					goto trunc;
				ret = rd_int_text(r, &s, rd_sle(b + i + 1, bytes));
				i += 1 + (size_t)bytes;
			} else if (c >= 0xf1 && c <= 0xfd) {
				ret = rd_int_text(r, &s, (c & 0x0f) - 1);
				i++;
			} else {
				return rd_fail(r, at + i, "ziplist entry with encoding 0x%02x", c);
			}
			if (ret || (ret = rd_push(r, &s)))
				return ret;
			continue;
		}
		}
		if (len > n - 1 - i - hn)
			goto trunc;
		s.p = (const char *)b + i + hn;
		s.n = len;
		i += hn + len;
		if ((ret = rd_push(r, &s)))
			return ret;
	}
	return 0;
trunc:
	return rd_fail(r, at + i, "ziplist entry runs past the ziplist's end");
}

/* A hash's value of the given type into r->fv. */
static int rd_hash(struct rd *r, int type)
{
	size_t at = r->at;
	struct rstr blob;
	const uint8_t *b;
	uint64_t len;
	int ret;

	if (type == RDB_TYPE_HASH) {
		if ((ret = rd_len(r, &len, NULL, "a hash's length")))
			return ret;
		if (len > (r->n - r->at) / 2) /* each field and value takes a byte at least */
			return rd_fail(r, at, "hash of %llu fields in %zu bytes",
				       (unsigned long long)len, r->n - r->at);
		for (uint64_t i = 0; i < 2 * len; i++) {
			struct rstr s;

			if ((ret = rd_str(r, &s, i % 2 ? "a hash value" : "a hash field")) ||
			    (ret = rd_push(r, &s)))
				return ret;
		}
		return 0;
	}
	if ((ret = rd_str(r, &blob, type == RDB_TYPE_HASH_LISTPACK ? "a listpack" : "a ziplist")))
		return ret;
	if (!blob.p) { /* LZF: in the scratch area, which the elements may grow: copy it out */
		uint8_t *copy = malloc(blob.n ? blob.n : 1);

		if (!copy)
			return -ENOMEM;
		memcpy(copy, r->scratch.p + blob.off, blob.n);
		r->scratch.len = blob.off;
		ret = type == RDB_TYPE_HASH_LISTPACK ? rd_listpack(r, copy, blob.n, at)
						     : rd_ziplist(r, copy, blob.n, at);
		/* elements that pointed into the copy move to the scratch area */
		for (size_t i = 0; !ret && i < r->nfv; i++) {
			if (r->fv[i].p && (const uint8_t *)r->fv[i].p >= copy &&
			    (const uint8_t *)r->fv[i].p < copy + blob.n) {
				struct rstr s;

				ret = rd_scratch_put(r, &s, r->fv[i].p, r->fv[i].n);
				r->fv[i] = s;
			}
		}
		free(copy);
	} else {
		b = (const uint8_t *)blob.p;
		ret = type == RDB_TYPE_HASH_LISTPACK ? rd_listpack(r, b, blob.n, at)
						     : rd_ziplist(r, b, blob.n, at);
	}
	if (!ret && r->nfv % 2)
		ret = rd_fail(r, at, "hash of an odd number (%zu) of fields and values", r->nfv);
	return ret;
}

static int rd_key(struct rd *r, int type, int64_t expire, size_t at, kv_rdb_fn fn, void *arg)
{
	struct kv_rdb_obj o = { .expire_ms = expire, .offset = at };
	struct rstr k, v;
	int ret;

	r->scratch.len = 0;
	r->nfv = 0;
	if ((ret = rd_str(r, &k, "a key")))
		return ret;
	if (type == RDB_TYPE_STRING) {
		if ((ret = rd_str(r, &v, "a string value")))
			return ret;
		o.type = KV_RDB_STR;
		o.val = (struct kv_arg){ rstr_ptr(r, &v), v.n };
	} else if (type == RDB_TYPE_HASH || type == RDB_TYPE_HASH_LISTPACK ||
		   type == RDB_TYPE_HASH_ZIPLIST) {
		if ((ret = rd_hash(r, type)))
			return ret;
		if (r->nfv > r->argcap) {
			struct kv_arg *a = realloc(r->args, r->nfv * sizeof(*a));

			if (!a)
				return -ENOMEM;
			r->args = a;
			r->argcap = r->nfv;
		}
		for (size_t i = 0; i < r->nfv; i++)
			r->args[i] = (struct kv_arg){ rstr_ptr(r, &r->fv[i]), r->fv[i].n };
		o.type = KV_RDB_HASH;
		o.fv = r->args;
		o.npairs = r->nfv / 2;
		if (!o.npairs)
			return rd_fail(r, at, "an empty hash");
	} else {
		static const char *const names[] = { [1] = "list", [2] = "set", [3] = "sorted set",
						     [5] = "sorted set", [6] = "module", [7] = "module",
						     [9] = "zipmap hash", [10] = "list", [11] = "set",
						     [12] = "sorted set", [14] = "list", [15] = "stream",
						     [17] = "sorted set", [18] = "list", [19] = "stream",
						     [20] = "set" };
		const char *nm = type < (int)(sizeof(names) / sizeof(names[0])) && names[type] ?
				 names[type] : "unknown";

		return rd_fail(r, at, "value type %d (%s): corio-kv keeps strings and hashes only", type,
			       nm);
	}
	if (r->scratch.nomem)
		return -ENOMEM;
	o.key = (struct kv_arg){ rstr_ptr(r, &k), k.n };
	return fn(arg, &o);
}

static int rd_all(struct rd *r, kv_rdb_fn fn, void *arg)
{
	int64_t expire = 0;
	size_t at = 0;
	int ret;

	if (r->n < 9 || memcmp(r->p, "REDIS", 5))
		return rd_fail(r, 0, "not an RDB file (it does not start with REDIS)");
	for (int i = 5; i < 9; i++) {
		if (r->p[i] < '0' || r->p[i] > '9')
			return rd_fail(r, (size_t)i, "the version is not a number");
		r->version = r->version * 10 + (r->p[i] - '0');
	}
	if (r->version < 1 || r->version > KV_RDB_VERSION)
		return rd_fail(r, 5, "version %d: corio-kv reads 1 to %d", r->version, KV_RDB_VERSION);
	r->at = 9;
	for (;;) {
		uint8_t op;
		uint64_t a, b;
		struct rstr s1, s2;

		at = r->at;
		if ((ret = rd_byte(r, &op, "an opcode")))
			return ret;
		switch (op) {
		case RDB_OP_EOF:
			if (r->version >= 5) {
				uint64_t want, got;

				if ((ret = rd_need(r, 8, "the checksum")))
					return ret;
				want = le64(r->p + r->at);
				got = kv_crc64(0, r->p, r->at);
				if (want && want != got)
					return rd_fail(r, r->at, "checksum 0x%016llx, the data's is 0x%016llx",
						       (unsigned long long)want, (unsigned long long)got);
				r->at += 8;
			}
			if (r->at != r->n)
				return rd_fail(r, r->at, "%zu bytes after the end", r->n - r->at);
			return 0;
		case RDB_OP_AUX:
			if ((ret = rd_str(r, &s1, "an aux field's name")) ||
			    (ret = rd_str(r, &s2, "an aux field's value")))
				return ret;
			r->scratch.len = 0;
			continue;
		case RDB_OP_SELECTDB:
			if ((ret = rd_len(r, &a, NULL, "SELECTDB")))
				return ret;
			if (a != 0)
				return rd_fail(r, at, "database %llu: corio-kv has database 0 only",
					       (unsigned long long)a);
			continue;
		case RDB_OP_RESIZEDB:
			if ((ret = rd_len(r, &a, NULL, "RESIZEDB")) || (ret = rd_len(r, &b, NULL, "RESIZEDB")))
				return ret;
			continue;
		case RDB_OP_EXPIRETIME_MS:
			if ((ret = rd_need(r, 8, "an expiry")))
				return ret;
			expire = (int64_t)le64(r->p + r->at);
			r->at += 8;
			if (!expire)
				expire = 1; /* the epoch: long past */
			continue;
		case RDB_OP_EXPIRETIME:
			if ((ret = rd_need(r, 4, "an expiry")))
				return ret;
			expire = (int64_t)(rd_sle(r->p + r->at, 4) & 0xffffffff) * 1000;
			r->at += 4;
			if (!expire)
				expire = 1;
			continue;
		case RDB_OP_IDLE:
			if ((ret = rd_len(r, &a, NULL, "an idle time")))
				return ret;
			continue;
		case RDB_OP_FREQ:
			if ((ret = rd_need(r, 1, "a frequency")))
				return ret;
			r->at++;
			continue;
		case RDB_OP_MODULE_AUX:
		case RDB_OP_FUNCTION:
		case RDB_OP_FUNCTION2:
			return rd_fail(r, at, "opcode %u (%s): corio-kv has neither", op,
				       op == RDB_OP_MODULE_AUX ? "module data" : "functions");
		default:
			if ((ret = rd_key(r, op, expire, at, fn, arg)))
				return ret;
			expire = 0;
			continue;
		}
	}
}

int kv_rdb_parse(const uint8_t *p, size_t n, kv_rdb_fn fn, void *arg, char *err, size_t errlen)
{
	struct rd r = { .p = p, .n = n, .err = err, .errlen = errlen };
	int ret;

	if (errlen)
		err[0] = 0;
	ret = rd_all(&r, fn, arg);
	if (ret == -ENOMEM && errlen && !err[0])
		snprintf(err, errlen, "out of memory reading the RDB file (near offset %zu)", r.at);
	kv_buf_free(&r.scratch);
	free(r.fv);
	free(r.args);
	return ret;
}
