/* SPDX-License-Identifier: MIT */
/* tools/kv/cmd.c - the command table, the ops each key command runs on its key's
 * shard, and COMMAND (which describes the table). */
#include "kv.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- the command table ---------------------------------------------------------- */

static const struct kv_spec kv_specs[] = {
	{ "get", 2, C_GET, 0, 0, "readonly fast", 1, 1, 1 },
	{ "set", -3, C_SET, 0, 0, "write denyoom", 1, 1, 1 },
	{ "del", -2, C_DEL, 0, 0, "write", 1, -1, 1 },
	{ "exists", -2, C_EXISTS, 0, 0, "readonly fast", 1, -1, 1 },
	{ "incr", 2, C_INCR, 1, 0, "write denyoom fast", 1, 1, 1 },
	{ "decr", 2, C_INCR, -1, 0, "write denyoom fast", 1, 1, 1 },
	{ "incrby", 3, C_INCR, 0, 0, "write denyoom fast", 1, 1, 1 },
	{ "decrby", 3, C_INCR, 0, F_NEG, "write denyoom fast", 1, 1, 1 },
	{ "mget", -2, C_MGET, 0, 0, "readonly fast", 1, -1, 1 },
	{ "mset", -3, C_MSET, 0, 0, "write denyoom", 1, -1, 2 },
	{ "expire", -3, C_EXPIRE, 1000, 0, "write fast", 1, 1, 1 },
	{ "pexpire", -3, C_EXPIRE, 1, 0, "write fast", 1, 1, 1 },
	{ "ttl", 2, C_TTL, 0, 0, "readonly fast", 1, 1, 1 },
	{ "pttl", 2, C_TTL, 0, F_PX, "readonly fast", 1, 1, 1 },
	{ "persist", 2, C_PERSIST, 0, 0, "write fast", 1, 1, 1 },
	{ "dbsize", 1, C_DBSIZE, 0, 0, "readonly fast", 0, 0, 0 },
	{ "flushall", -1, C_FLUSHALL, 0, 0, "write", 0, 0, 0 },
	{ "flushdb", -1, C_FLUSHALL, 0, 0, "write", 0, 0, 0 },
	{ "ping", -1, C_PING, 0, 0, "fast", 0, 0, 0 },
	{ "echo", 2, C_ECHO, 0, 0, "fast", 0, 0, 0 },
	{ "info", -1, C_INFO, 0, 0, "loading stale", 0, 0, 0 },
	{ "config", -2, C_CONFIG, 0, 0, "admin loading stale", 0, 0, 0 },
	{ "command", -1, C_COMMAND, 0, 0, "loading stale", 0, 0, 0 },
	{ "client", -2, C_CLIENT, 0, 0, "loading stale", 0, 0, 0 },
	{ "select", 2, C_SELECT, 0, 0, "loading stale fast", 0, 0, 0 },
	{ "quit", -1, C_QUIT, 0, 0, "loading stale fast", 0, 0, 0 },
	{ "hello", -1, C_HELLO, 0, 0, "noscript loading stale fast no_auth", 0, 0, 0 },
	{ "multi", 1, C_MULTI, 0, 0, "noscript loading stale fast", 0, 0, 0 },
	{ "exec", 1, C_EXEC, 0, 0, "noscript loading stale skip_slowlog", 0, 0, 0 },
	{ "discard", 1, C_DISCARD, 0, 0, "noscript loading stale fast", 0, 0, 0 },
};
#define KV_NSPECS (sizeof(kv_specs) / sizeof(kv_specs[0]))

const struct kv_spec *kv_find_spec(const struct kv_arg *a)
{
	for (size_t i = 0; i < KV_NSPECS; i++) {
		const char *nm = kv_specs[i].name;

		if (strlen(nm) == a->n && !strncasecmp(nm, a->p, a->n))
			return &kv_specs[i];
	}
	return NULL;
}

bool kv_is(const struct kv_arg *a, const char *word)
{
	return strlen(word) == a->n && !strncasecmp(word, a->p, a->n);
}

const char kv_oom_msg[] = "OOM command not allowed when used memory > 'maxmemory'.";

/* ---- ops: run on the key's shard, writing the reply (if any) to o ---- */

static bool kv_oom(struct kv_shard *sh)
{
	if (sh->maxmem && sh->mem > sh->maxmem) {
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
		e = kv_lookup(sh, op->hash, k, &l);
		if (op->kind == OP_GET || op->kind == OP_INCR)
			KV_INC(*(e ? &sh->st.hits : &sh->st.misses), 1);
	}
	switch (op->kind) {
	case OP_GET:
		if (e)
			kv_bulk(o, e->data + e->klen, e->vlen);
		else
			kv_null(o, cmd->resp3);
		break;
	case OP_SET: {
		const struct kv_arg *v = &c->av.v[cmd->arg0 + 2];
		int64_t when = 0;

		if (kv_oom(sh)) {
			kv_err(o, kv_oom_msg);
			break;
		}
		if (cmd->flags & F_GET) {
			if (e)
				kv_bulk(o, e->data + e->klen, e->vlen);
			else
				kv_null(o, cmd->resp3);
		}
		if ((cmd->flags & F_NX && e) || (cmd->flags & F_XX && !e)) {
			if (!(cmd->flags & F_GET))
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
		if (!(cmd->flags & F_GET))
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
		int64_t now = kv_now_ms(), when = now + cmd->n; /* overflow checked when parsed */
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

/* ---- COMMAND: the table, as clients read it -------------------------------------- */

static void kv_command_info(struct kv_buf *o, const struct kv_spec *sp, bool resp3)
{
	char fl[64];
	int nf = 0;
	const char *p = sp->cflags;

	kv_num(o, '*', 6);
	kv_bulkstr(o, sp->name);
	kv_num(o, ':', sp->arity);
	snprintf(fl, sizeof(fl), "%s", sp->cflags);
	for (const char *q = p; *q; q++)
		nf += (q == p || q[-1] == ' ') && *q != ' ';
	kv_num(o, resp3 ? '~' : '*', nf); /* a set in RESP3 */
	for (char *w = strtok(fl, " "); w; w = strtok(NULL, " ")) {
		kv_put(o, "+", 1);
		kv_put(o, w, strlen(w));
		KV_LIT(o, "\r\n");
	}
	kv_num(o, ':', sp->first);
	kv_num(o, ':', sp->last);
	kv_num(o, ':', sp->step);
}

/* COMMAND, COMMAND COUNT, COMMAND INFO name..., COMMAND DOCS (empty: enough
 * for redis-cli, which then shows no hints). */
void kv_reply_command(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];

	if (cmd->argc == 1) {
		kv_num(o, '*', (long long)KV_NSPECS);
		for (size_t i = 0; i < KV_NSPECS; i++)
			kv_command_info(o, &kv_specs[i], cmd->resp3);
	} else if (kv_is(&a[1], "count")) {
		kv_num(o, ':', (long long)KV_NSPECS);
	} else if (kv_is(&a[1], "docs")) {
		kv_num(o, cmd->resp3 ? '%' : '*', 0);
	} else if (kv_is(&a[1], "info")) {
		kv_num(o, '*', (long long)cmd->argc - 2);
		for (uint32_t i = 2; i < cmd->argc; i++) {
			const struct kv_spec *sp = kv_find_spec(&a[i]);

			if (sp)
				kv_command_info(o, sp, cmd->resp3);
			else
				kv_null(o, cmd->resp3);
		}
	} else {
		kv_err(o, "ERR unknown subcommand or wrong number of arguments for 'command'");
	}
}
