/* SPDX-License-Identifier: MIT */
/* tools/kv/cmd.c - the ops each key command runs on its key's shard. */
#include "kv.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

const char kv_oom_msg[] = "OOM command not allowed when used memory > 'maxmemory'.";

/* ---- ops: run on the key's shard, writing the reply (if any) to o ---- */

/* Over its share of maxmemory: evict by the policy (before the op looks
 * its key up: an eviction may free any entry). */
void kv_make_room(struct kv_shard *sh)
{
	uint64_t max = KV_GET(sh->maxmem);

	sh->evict_failed = max && sh->mem > max && !kv_evict(sh, max);
}

/* A write must be refused: over the share, and noeviction or nothing left
 * to evict. */
bool kv_oom(struct kv_shard *sh)
{
	uint64_t max = KV_GET(sh->maxmem);

	if (max && sh->mem > max &&
	    (sh->evict_failed || atomic_load_explicit(&sh->srv->policy, memory_order_relaxed) == KV_NOEVICTION)) {
		KV_INC(sh->st.oom_refused, 1);
		return true;
	}
	return false;
}

void kv_run_op(struct kv_shard *sh, struct kv_conn *c, struct kv_op *op, struct kv_buf *o)
{
	const struct kv_cmd *cmd = &c->cmds[op->cmd];
	const struct kv_arg *k = &c->av.v[op->key];
	struct kv_entry **l = NULL, *e = NULL;

	if (op->kind != OP_DBSIZE && op->kind != OP_FLUSH) {
		if (op->kind == OP_SET || op->kind == OP_MSET1 || op->kind == OP_INCR || op->kind == OP_KEY ||
		    op->kind == OP_HASH)
			kv_make_room(sh);
		e = kv_lookup(sh, op->hash, k, &l);
		if (op->kind == OP_GET || op->kind == OP_INCR)
			KV_INC(*(e ? &sh->st.hits : &sh->st.misses), 1);
		if (e && !c->no_touch && cmd->kind != C_OBJECT) {
			if (kv_policy_lfu(atomic_load_explicit(&sh->srv->policy, memory_order_relaxed)))
				kv_lfu_touch(sh, e);
			e->atime = sh->clock;
		}
	}
	switch (op->kind) {
	case OP_GET:
		if (e && e->type == KV_STR)
			kv_bulk(o, e->data + e->klen, e->vlen);
		else if (e && cmd->kind == C_GET)
			kv_err(o, kv_wrongtype_msg);
		else
			kv_null(o, cmd->resp3); /* MGET: nil for a key of another type */
		break;
	case OP_KEY:
		kv_run_key(sh, c, op, e, l, o);
		break;
	case OP_HASH:
		kv_run_hash(sh, c, op, e, l, o);
		break;
	case OP_SET: {
		const struct kv_arg *v = &c->av.v[cmd->vidx];
		int64_t when = 0;

		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		if (cmd->flags & F_GET && e && e->type != KV_STR) {
			kv_err(o, kv_wrongtype_msg);
			break;
		}
		if (cmd->flags & F_GET) {
			if (e)
				kv_bulk(o, e->data + e->klen, e->vlen);
			else
				kv_null(o, cmd->resp3);
		}
		if ((cmd->flags & F_NX && e) || (cmd->flags & F_XX && !e)) {
			if (cmd->flags & F_INTREPLY) /* SETNX */
				KV_LIT(o, ":0\r\n");
			else if (!(cmd->flags & F_GET))
				kv_null(o, cmd->resp3);
			break;
		}
		if (cmd->flags & F_EXP)
			when = kv_deadline_ms(cmd->n, cmd->flags & F_EXAT);
		if (!(e = kv_store(sh, l, e, op->hash, k, v->p, v->n, cmd->flags & F_KEEPTTL)) ||
		    (when > kv_now_ms() && !kv_set_expire(sh, e, when))) {
			if (!(cmd->flags & F_GET))
				kv_err(o, "ERR out of memory");
			break;
		}
		if (cmd->flags & F_EXP && when <= kv_now_ms()) {
			kv_unlink(sh, l); /* EXAT/PXAT in the past: stored and gone (Redis) */
			KV_INC(sh->st.expired, 1);
		}
		if (cmd->flags & F_INTREPLY)
			KV_LIT(o, ":1\r\n");
		else if (!(cmd->flags & F_GET))
			KV_LIT(o, "+OK\r\n");
		break;
	}
	case OP_MSET1: {
		const struct kv_arg *v = k + 1;

		if (kv_oom(sh) || !kv_store(sh, l, e, op->hash, k, v->p, v->n, false))
			op->v = 1;
		break;
	}
	case OP_DEL:
		op->v = 0;
		if (e) {
			kv_unlink(sh, l);
			op->v = 1;
		}
		break;
	case OP_EXISTS:
		op->v = e != NULL;
		break;
	case OP_INCR: {
		long long cur = 0, res;
		char num[24];
		size_t n;

		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		if (e && e->type != KV_STR) {
			kv_err(o, kv_wrongtype_msg);
			break;
		}
		if (e && !kv_str2ll(e->data + e->klen, e->vlen, &cur)) {
			kv_err(o, "ERR value is not an integer or out of range");
			break;
		}
		if (__builtin_add_overflow(cur, cmd->n, &res)) {
			kv_err(o, "ERR increment or decrement would overflow");
			break;
		}
		n = kv_lltoa(num, res);
		if (!kv_store(sh, l, e, op->hash, k, num, n, true)) {
			kv_err(o, "ERR out of memory");
			break;
		}
		kv_num(o, ':', res);
		break;
	}
	case OP_EXPIRE: {
		int64_t now = kv_now_ms(), when = cmd->flags & F_EXAT ? kv_deadline_ms(cmd->n, true)
								      : now + cmd->n; /* checked when parsed */
		unsigned f = cmd->flags;

		if (!e || (f & F_NX && e->expire) || (f & F_XX && !e->expire) ||
		    (f & F_GT && (!e->expire || when <= e->expire)) ||
		    (f & F_LT && e->expire && when >= e->expire)) {
			KV_LIT(o, ":0\r\n");
			break;
		}
		if (when <= now) {
			kv_unlink(sh, l); /* a deadline in the past deletes (Redis) */
			KV_INC(sh->st.expired, 1);
		} else if (!kv_set_expire(sh, e, when)) {
			kv_err(o, "ERR out of memory");
			break;
		}
		KV_LIT(o, ":1\r\n");
		break;
	}
	case OP_TTL:
		if (!e) {
			KV_LIT(o, ":-2\r\n");
		} else if (!e->expire) {
			KV_LIT(o, ":-1\r\n");
		} else {
			long long ms = e->expire - kv_now_ms();

			if (ms < 0)
				ms = 0;
			kv_num(o, ':', cmd->flags & F_PX ? ms : (ms + 500) / 1000);
		}
		break;
	case OP_PERSIST:
		if (e && e->expire) {
			kv_set_expire(sh, e, 0);
			KV_LIT(o, ":1\r\n");
		} else {
			KV_LIT(o, ":0\r\n");
		}
		break;
	case OP_DBSIZE:
		op->v = (long long)sh->count;
		break;
	case OP_FLUSH:
		kv_flush(sh);
		break;
	}
}
