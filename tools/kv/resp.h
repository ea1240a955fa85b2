/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/resp.h - corio-kv's limits and its RESP parser: the grammar of
 * RESP2/RESP3 requests and inline commands, with no I/O and no state kept
 * between calls (test/fuzz/fuzz_resp.c fuzzes it alone).
 */
#ifndef CORIO_KV_RESP_H
#define CORIO_KV_RESP_H

#include <stddef.h>
#include <stdint.h>

#define KV_MAX_LINE (64 * 1024) /* inline request / count line limit (Redis) */

struct kv_limits {
	uint64_t proto_max_bulk_len; /* longest bulk string (512 MiB)            */
	uint64_t max_multibulk;      /* most arguments in one command (1 Mi)     */
	uint64_t qbuf_limit;         /* largest command, all of it (64 MiB)      */
	uint64_t out_limit;          /* replies one connection holds (256 MiB)  */
	uint64_t maxmemory;          /* 0: unlimited                             */
};

void kv_limits_default(struct kv_limits *l);

struct kv_arg {
	const char *p;
	size_t n;
};

/* Arguments of the commands of one batch, appended by resp_parse(). */
struct kv_argv {
	struct kv_arg *v;
	size_t n, cap;
};

#define RESP_MORE 0   /* incomplete: *need is the total length worth waiting for */
#define RESP_CMD 1    /* one command: its arguments appended, *used bytes eaten */
#define RESP_ERR (-1) /* protocol error: the message (no "-ERR ") in errbuf     */
#define RESP_NOMEM (-2)

/* Redis's string2ll: 1 when p[0..n) is a number in canonical form. */
int kv_str2ll(const char *p, size_t n, long long *out);
/* Append the argument p[0..n) to av: 0 or -ENOMEM. */
int kv_argv_push(struct kv_argv *av, const char *p, size_t n);
/* One command from p[0..n): RESP_CMD, RESP_MORE, RESP_ERR or RESP_NOMEM
 * (see resp.c). */
int resp_parse(const char *p, size_t n, const struct kv_limits *lim, struct kv_argv *av,
	       size_t *used, size_t *need, char *errbuf, size_t errlen);

#endif
