/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/keys.c - the string and key commands that run as one op on
 * their key's shard (OP_KEY): GETDEL, GETEX, APPEND, STRLEN, GETRANGE,
 * SETRANGE, INCRBYFLOAT, EXPIRETIME, TYPE, OBJECT, MEMORY USAGE. Replies
 * and errors are Redis 7.0's.
 */
#include "kv.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char kv_wrongtype_msg[] = "WRONGTYPE Operation against a key holding the wrong kind of value";

/* The Unix time in ms of e's deadline (kept as CLOCK_MONOTONIC ms). */
static long long kv_unix_deadline(const struct kv_entry *e)
{
	return (long long)(e->expire - kv_now_ms() + kv_unix_ms());
}

/* Redis's long double formatting for INCRBYFLOAT ("%.17Lf", trailing
 * zeros and a trailing point dropped). Returns the length. */
size_t kv_format_ld(char *buf, size_t n, long double v)
{
	int len = snprintf(buf, n, "%.17Lf", v);

	if (len <= 0 || (size_t)len >= n)
		return 0;
	if (strchr(buf, '.')) {
		while (len > 0 && buf[len - 1] == '0')
			len--;
		if (len > 0 && buf[len - 1] == '.')
			len--;
	}
	buf[len] = 0;
	if (len == 2 && !strcmp(buf, "-0"))
		len = 1, buf[0] = '0', buf[1] = 0;
	return (size_t)len;
}

/* A long double as Redis reads one: no spaces, the whole string, finite. */
bool kv_parse_ld(const char *p, size_t n, long double *out)
{
	char buf[128], *end;

	if (n == 0 || n >= sizeof(buf) || p[0] == ' ' || p[0] == '\t' || p[n - 1] == ' ')
		return false;
	memcpy(buf, p, n);
	buf[n] = 0;
	if (strlen(buf) != n)
		return false;
	*out = strtold(buf, &end);
	return *end == 0 && !isnan(*out); /* inf is a value (Redis) */
}

/* GETRANGE's window over n bytes: Redis's rules for negative and
 * out-of-range ends. false: empty. */
static bool kv_range(long long start, long long end, size_t n, size_t *from, size_t *len)
{
	long long sn = (long long)n;

	if (start < 0 && end < 0 && start > end)
		return false;
	if (start < 0)
		start += sn;
	if (end < 0)
		end += sn;
	if (start < 0)
		start = 0;
	if (end < 0)
		end = 0;
	if (end >= sn)
		end = sn - 1;
	if (!n || start > end)
		return false;
	*from = (size_t)start;
	*len = (size_t)(end - start + 1);
	return true;
}

/* OBJECT ENCODING of a string value: Redis's int / embstr / raw. */
static const char *kv_str_encoding(const struct kv_entry *e)
{
	long long v;

	if (e->vlen <= 20 && kv_str2ll(e->data + e->klen, e->vlen, &v))
		return "int";
	return e->vlen <= 44 ? "embstr" : "raw";
}

void kv_run_key(struct kv_shard *sh, struct kv_conn *c, struct kv_op *op, struct kv_entry *e,
		struct kv_entry **l, struct kv_buf *o)
{
	const struct kv_cmd *cmd = &c->cmds[op->cmd];
	const struct kv_arg *a = &c->av.v[cmd->arg0], *k = &c->av.v[op->key];
	bool str = e && e->type == KV_STR;

	switch (cmd->kind) {
	case C_GETDEL:
	case C_GETEX:
		KV_INC(*(e ? &sh->st.hits : &sh->st.misses), 1);
		if (!e) {
			kv_null(o, cmd->resp3);
			break;
		}
		if (!str) {
			kv_err(o, kv_wrongtype_msg);
			break;
		}
		kv_bulk(o, e->data + e->klen, e->vlen);
		if (cmd->kind == C_GETDEL) {
			kv_unlink(sh, l);
		} else if (cmd->flags & F_PERSIST) {
			kv_set_expire(sh, e, 0);
		} else if (cmd->flags & F_EXP) {
			int64_t when = kv_deadline_ms(cmd->n, cmd->flags & F_EXAT);

			if (when <= kv_now_ms()) {
				kv_unlink(sh, l);
				KV_INC(sh->st.expired, 1);
			} else {
				kv_set_expire(sh, e, when);
			}
		}
		break;
	case C_APPEND: {
		const struct kv_arg *v = &a[2];
		size_t n = e ? e->vlen : 0;
		char *buf;

		if (e && !str) {
			kv_err(o, kv_wrongtype_msg);
			break;
		}
		if (n + v->n > c->srv->lim.proto_max_bulk_len) {
			kv_err(o, "ERR string exceeds maximum allowed size (proto-max-bulk-len)");
			break;
		}
		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		buf = malloc(n + v->n + 1);
		if (!buf) {
			kv_err(o, "ERR out of memory");
			break;
		}
		if (n)
			memcpy(buf, e->data + e->klen, n);
		memcpy(buf + n, v->p, v->n);
		if (!kv_store(sh, l, e, op->hash, k, buf, n + v->n, true))
			kv_err(o, "ERR out of memory");
		else
			kv_num(o, ':', (long long)(n + v->n));
		free(buf);
		break;
	}
	case C_STRLEN:
		if (e && !str)
			kv_err(o, kv_wrongtype_msg);
		else
			kv_num(o, ':', e ? (long long)e->vlen : 0);
		break;
	case C_GETRANGE: {
		size_t from, len;

		if (e && !str)
			kv_err(o, kv_wrongtype_msg);
		else if (e && kv_range(cmd->n, cmd->n2, e->vlen, &from, &len))
			kv_bulk(o, e->data + e->klen + from, len);
		else
			KV_LIT(o, "$0\r\n\r\n");
		break;
	}
	case C_SETRANGE: {
		const struct kv_arg *v = &a[3];
		size_t n = e ? e->vlen : 0, off = (size_t)cmd->n, total;
		char *buf;

		if (e && !str) {
			kv_err(o, kv_wrongtype_msg);
			break;
		}
		if (!v->n) { /* nothing to write: the length, and no key made */
			kv_num(o, ':', (long long)n);
			break;
		}
		if (off + v->n > c->srv->lim.proto_max_bulk_len) {
			kv_err(o, "ERR string exceeds maximum allowed size (proto-max-bulk-len)");
			break;
		}
		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		total = off + v->n > n ? off + v->n : n;
		buf = calloc(1, total + 1);
		if (!buf) {
			kv_err(o, "ERR out of memory");
			break;
		}
		if (n)
			memcpy(buf, e->data + e->klen, n);
		memcpy(buf + off, v->p, v->n);
		if (!kv_store(sh, l, e, op->hash, k, buf, total, true))
			kv_err(o, "ERR out of memory");
		else
			kv_num(o, ':', (long long)total);
		free(buf);
		break;
	}
	case C_INCRBYFLOAT: {
		long double cur = 0, inc;
		char num[5200];
		size_t n;

		if (e && !str) {
			kv_err(o, kv_wrongtype_msg);
			break;
		}
		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		if (e && !kv_parse_ld(e->data + e->klen, e->vlen, &cur)) {
			kv_err(o, "ERR value is not a valid float");
			break;
		}
		kv_parse_ld(a[2].p, a[2].n, &inc); /* checked when planned */
		cur += inc;
		if (isnan(cur) || isinf(cur)) {
			kv_err(o, "ERR increment would produce NaN or Infinity");
			break;
		}
		n = kv_format_ld(num, sizeof(num), cur);
		if (!n || !kv_store(sh, l, e, op->hash, k, num, n, true)) {
			kv_err(o, "ERR out of memory");
			break;
		}
		kv_bulk(o, num, n);
		break;
	}
	case C_EXPIRETIME:
		if (!e)
			KV_LIT(o, ":-2\r\n");
		else if (!e->expire)
			KV_LIT(o, ":-1\r\n");
		else
			kv_num(o, ':', cmd->flags & F_PX ? kv_unix_deadline(e) : kv_unix_deadline(e) / 1000);
		break;
	case C_TYPE:
		if (!e)
			KV_LIT(o, "+none\r\n");
		else if (e->type == KV_HASH)
			KV_LIT(o, "+hash\r\n");
		else
			KV_LIT(o, "+string\r\n");
		break;
	case C_OBJECT:
		if (!e) {
			kv_null(o, cmd->resp3);
		} else if (cmd->n == 0) { /* ENCODING */
			kv_bulkstr(o, e->type == KV_STR ? kv_str_encoding(e) :
				   e->enc == KV_ENC_SMALL ? "listpack" : "hashtable");
		} else if (cmd->n == 1) { /* IDLETIME */
			if (kv_policy_lfu(atomic_load_explicit(&sh->srv->policy, memory_order_relaxed)))
				kv_err(o, "ERR An LFU maxmemory policy is selected, idle time not tracked. "
					  "Please note that when switching between policies at runtime LRU "
					  "and LFU data will take some time to adjust.");
			else
				kv_num(o, ':', (uint16_t)(sh->clock - e->atime));
		} else if (cmd->n == 3) { /* FREQ */
			if (!kv_policy_lfu(atomic_load_explicit(&sh->srv->policy, memory_order_relaxed)))
				kv_err(o, "ERR An LFU maxmemory policy is not selected, access frequency not "
					  "tracked. Please note that when switching between policies at "
					  "runtime LRU and LFU data will take some time to adjust.");
			else
				kv_num(o, ':', kv_lfu_get(sh, e));
		} else { /* REFCOUNT: nothing is shared */
			kv_num(o, ':', 1);
		}
		break;
	case C_MEMORY:
		if (!e)
			kv_null(o, cmd->resp3);
		else
			kv_num(o, ':', (long long)(malloc_usable_size(e) + sizeof(struct kv_entry *) +
						   kv_payload_bytes(e)));
		break;
	default:
		break;
	}
}
