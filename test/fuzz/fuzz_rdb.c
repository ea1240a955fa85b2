/* SPDX-License-Identifier: MIT */
/*
 * fuzz_rdb - corio-kv's RDB reader (kv_rdb_parse(), what a snapshot at
 * start goes through) and its LZF compressor. The input is the body of a
 * dump: it is wrapped in the "REDIS0010" header and an EOF with a zero
 * checksum (which the reader, as Redis's, does not check), so the fuzzer
 * reaches the records without having to find a CRC64. The reader must
 * never crash or read out of bounds, must either accept the file or say
 * why at an offset inside it, and the strings it hands over must lie in
 * the file or its scratch memory (ASan reads them all). Every string value
 * read, and the raw input itself, must come back unchanged through
 * kv_lzf_compress and kv_lzf_decompress.
 */
#include "kv/kv.h"
#include "kv/out.h"
#include "kv/rdb.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* rdb.c's writer walks hashes through hash.c, which this target does not
 * link (it only reads): never called here. */
size_t kv_hash_nfields(const struct kv_entry *e)
{
	(void)e;
	abort();
}

void kv_hash_walk(const struct kv_entry *e,
		  void (*fn)(void *arg, const char *f, size_t fn, const char *v, size_t vn), void *arg)
{
	(void)e;
	(void)fn;
	(void)arg;
	abort();
}

static void lzf_round_trip(const uint8_t *p, size_t n)
{
	uint8_t *z = malloc(n + 64), *back = malloc(n + 1);
	size_t c = kv_lzf_compress(p, n, z, n + 64);

	if (n && !c)
		abort(); /* n + 64 always holds the literals */
	if (kv_lzf_decompress(z, c, back, n) || memcmp(p, back, n))
		abort();
	c = kv_lzf_compress(p, n, z, n > 4 ? n - 4 : 0); /* the writer's bound */
	if (c > (n > 4 ? n - 4 : 0) || (c && (kv_lzf_decompress(z, c, back, n) || memcmp(p, back, n))))
		abort();
	free(z);
	free(back);
}

static int seen(void *arg, const struct kv_rdb_obj *o)
{
	volatile uint8_t sum = 0;

	(void)arg;
	for (size_t i = 0; i < o->key.n; i++)
		sum += (uint8_t)o->key.p[i];
	if (o->type == KV_RDB_STR) {
		lzf_round_trip((const uint8_t *)o->val.p, o->val.n);
	} else {
		for (size_t i = 0; i < 2 * o->npairs; i++)
			for (size_t k = 0; k < o->fv[i].n; k++)
				sum += (uint8_t)o->fv[i].p[k];
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *f = malloc(size + 18);
	char err[256] = "";
	int ret;

	memcpy(f, "REDIS0010", 9);
	memcpy(f + 9, data, size);
	f[9 + size] = 0xff;
	memset(f + 10 + size, 0, 8);
	ret = kv_rdb_parse(f, size + 18, seen, NULL, err, sizeof(err));
	if (ret != 0 && ret != -EINVAL && ret != -ENOMEM)
		abort();
	if (ret == -EINVAL && (!err[0] || !strstr(err, "offset")))
		abort(); /* a refusal says where */
	free(f);
	lzf_round_trip(data, size);
	return 0;
}
