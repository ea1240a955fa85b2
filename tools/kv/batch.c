/* SPDX-License-Identifier: MIT */
/* tools/kv/batch.c - a batch: run the remote ops, then reply in request order. */
#include "kv.h"

#include <errno.h>
#include <stdio.h>


/*
 * How a connection's output stays bounded (--output-limit, L): its pending
 * replies are sent once they reach L/2, the connection's fiber waiting
 * while the client does not read, before more are made; and another shard
 * runs the connection's ops for it only until its reply buffer holds
 * L/(2 shards), the rest in later calls, as the replies are walked. So a
 * connection holds at most about L of replies plus one reply per shard (a
 * value is copied whole), and allocations round that up to at most twice.
 * A client that reads is never closed; one that does not is left waiting.
 */
static uint64_t kv_remote_budget(const struct kv_conn *c)
{
	if (c->serial) /* one op per call, when its reply is due (across.c) */
		return 0;
	return c->srv->lim.out_limit / (2 * c->srv->nshards);
}

/* Run the ops a connection of another shard queued for this one, until
 * their replies reach the budget (corio_call: a fiber here, the caller
 * parked until it returns). */
static intptr_t kv_remote_fn(void *arg)
{
	struct kv_conn *c = arg;
	unsigned me = corio_shard_id();
	struct kv_shard *sh = &c->srv->sh[me];
	struct kv_remote *r = &c->rem[me];
	uint64_t n = 0, budget = kv_remote_budget(c);
	uint32_t i;

	if (me == c->sh->id || r->head == KV_NONE)
		return 0; /* corio_gather calls every shard, the caller's too */
	r->out.len = 0; /* the connection has copied every reply made before */
	for (i = r->head; i != KV_NONE && (!n || r->out.len < budget); i = c->ops[i].next, n++) {
		struct kv_op *op = &c->ops[i];

		op->roff = r->out.len;
		kv_run_op(sh, c, op, &r->out);
		op->rlen = r->out.len - op->roff;
		op->ran = 1;
	}
	r->head = i; /* the rest, if any, when the connection's replies reach them */
	KV_INC(sh->st.remote_ops, n);
	return r->out.nomem ? -ENOMEM : 0;
}

/* Record the bytes this connection's reply buffers hold (INFO's
 * client_output_peak). They only grow within a batch, so measuring before
 * each send and at the batch's end sees the largest. */
static void kv_out_peak(struct kv_conn *c)
{
	uint64_t held = c->out.cap;

	for (unsigned i = 0; i < c->srv->nshards; i++)
		held += c->rem[i].out.cap;
	if (held > KV_GET(c->sh->st.out_peak))
		KV_SET(c->sh->st.out_peak, held);
}

/* Send the pending replies once they reach half the output limit. */
static int kv_out_drain(struct kv_conn *c)
{
	ssize_t n;

	if (c->out.len < c->srv->lim.out_limit / 2)
		return 0;
	kv_out_peak(c);
	KV_INC(c->sh->st.out_flushes, 1);
	KV_INC(c->sh->st.out_waiting, 1);
	n = kv_send(c);
	KV_INC(c->sh->st.out_waiting, (uint64_t)-1);
	c->out.len = 0;
	return n < 0 ? (int)n : 0;
}

/* A remote op has run: when its shard stopped at its budget before it, run
 * that shard's next part now. The ops are walked in request order, so every
 * reply that shard made before has been copied and its buffer can be reused. */
static int kv_op_ready(struct kv_conn *c, struct kv_op *op)
{
	intptr_t res = 0;
	int ret;

	if (op->shard == c->sh->id || op->ran)
		return 0;
	KV_INC(c->sh->st.remote_calls, 1);
	ret = corio_call(op->shard, kv_remote_fn, c, &res);
	if (!ret)
		ret = (int)res;
	if (!ret && c->rem[op->shard].out.nomem)
		ret = -ENOMEM;
	return ret;
}

/* The reply of op into o: run here, or copied from its shard's replies. */
static int kv_op_reply(struct kv_conn *c, struct kv_op *op, struct kv_buf *o)
{
	int ret = kv_out_drain(c);

	if (!ret)
		ret = kv_op_ready(c, op);
	if (ret)
		return ret;
	if (op->shard == c->sh->id) {
		kv_run_op(c->sh, c, op, o);
	} else {
		struct kv_remote *r = &c->rem[op->shard];

		kv_put(o, r->out.p + op->roff, op->rlen);
	}
	return 0;
}

/* Sum of the op values of cmd (DEL, EXISTS, DBSIZE, MSET) into *sum. */
static int kv_op_sum(struct kv_conn *c, const struct kv_cmd *cmd, long long *sum)
{
	*sum = 0;
	for (uint32_t i = 0; i < cmd->nops; i++) {
		struct kv_op *op = &c->ops[cmd->op0 + i];
		int ret = kv_op_ready(c, op);

		if (ret)
			return ret;
		if (op->shard == c->sh->id)
			kv_run_op(c->sh, c, op, NULL);
		*sum += op->v;
	}
	return 0;
}

/* The first part of every other shard's ops, those shards in parallel. */
static int kv_run_remote(struct kv_conn *c)
{
	struct kv_server *srv = c->srv;
	unsigned remote = 0, last = 0;
	intptr_t res = 0;
	int ret;

	for (unsigned i = 0; i < srv->nshards; i++)
		if (c->rem[i].head != KV_NONE) {
			remote++;
			last = i;
		}
	if (!remote)
		return 0;
	KV_INC(c->sh->st.remote_calls, 1);
	if (remote == 1)
		ret = corio_call(last, kv_remote_fn, c, &res);
	else
		ret = corio_gather(kv_remote_fn, c, NULL);
	if (!ret)
		ret = (int)res;
	for (unsigned i = 0; i < srv->nshards && !ret; i++)
		if (c->rem[i].out.nomem)
			ret = -ENOMEM;
	return ret;
}

/* An unknown subcommand, or a known one with the wrong arity. */
void kv_reply_badsub(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	char msg[200], up[32];
	size_t i;

	for (i = 0; cmd->spec->name[i] && i < sizeof(up) - 1; i++)
		up[i] = (char)(cmd->spec->name[i] - 32 * (cmd->spec->name[i] >= 'a'));
	up[i] = 0;
	if (kv_subcommand_known(cmd->spec->name, &a[1])) { /* wrong arity */
		char low[32];

		for (i = 0; i < a[1].n && i < sizeof(low) - 1; i++)
			low[i] = (char)(a[1].p[i] | 0x20);
		low[i] = 0;
		snprintf(msg, sizeof(msg), "ERR wrong number of arguments for '%s|%s' command",
			 cmd->spec->name, low);
	} else {
		snprintf(msg, sizeof(msg), "ERR unknown subcommand '%.*s'. Try %s HELP.",
			 (int)(a[1].n > 64 ? 64 : a[1].n), a[1].p, up);
	}
	kv_err_sanitized(o, msg);
}

/* The reply to one command of the batch, in order. */
static int kv_reply_cmd(struct kv_conn *c, struct kv_cmd *cmd, struct kv_buf *o)
{
	long long sum;
	int ret = kv_out_drain(c);

	if (ret)
		return ret;
	switch (cmd->kind) {
	case C_UNKNOWN:
		kv_reply_unknown(c, cmd, o);
		break;
	case C_NOTSERVED:
		kv_reply_notserved(cmd, o);
		break;
	case C_EXECNULL: /* RESP2's null array */
		if (cmd->resp3)
			KV_LIT(o, "_\r\n");
		else
			KV_LIT(o, "*-1\r\n");
		break;
	case C_RENAME:
	case C_COPY:
	case C_MSETNX:
	case C_RANDOMKEY:
	case C_SCAN:
	case C_KEYS:
	case C_WATCH:
	case C_UNWATCH:
		kv_reply_across(c, cmd, o);
		break;
	case C_ARITY: {
		char msg[128];

		snprintf(msg, sizeof(msg), "ERR wrong number of arguments for '%s' command",
			 cmd->spec->name);
		kv_err(o, msg);
		break;
	}
	case C_ERR:
		kv_err(o, cmd->err);
		break;
	case C_BADSUB:
		kv_reply_badsub(c, cmd, o);
		break;
	case C_GET:
	case C_SET:
	case C_INCR:
	case C_GETDEL:
	case C_GETEX:
	case C_APPEND:
	case C_STRLEN:
	case C_GETRANGE:
	case C_SETRANGE:
	case C_INCRBYFLOAT:
	case C_EXPIRETIME:
	case C_TYPE:
	case C_OBJECT:
	case C_MEMORY:
	case C_HSET:
	case C_HSETNX:
	case C_HGET:
	case C_HMGET:
	case C_HGETALL:
	case C_HKEYS:
	case C_HVALS:
	case C_HDEL:
	case C_HEXISTS:
	case C_HLEN:
	case C_HSTRLEN:
	case C_HINCRBY:
	case C_HINCRBYFLOAT:
	case C_HRANDFIELD:
	case C_HSCAN:
	case C_EXPIRE:
	case C_TTL:
	case C_PERSIST:
		return kv_op_reply(c, &c->ops[cmd->op0], o);
	case C_MGET: /* element by element: one over the limit is sent in parts */
		kv_num(o, '*', cmd->nops);
		for (uint32_t j = 0; j < cmd->nops && !ret; j++)
			ret = kv_op_reply(c, &c->ops[cmd->op0 + j], o);
		return ret;
	case C_DEL:
	case C_EXISTS:
	case C_DBSIZE:
		if (!(ret = kv_op_sum(c, cmd, &sum)))
			kv_num(o, ':', sum);
		return ret;
	case C_MSET:
		if ((ret = kv_op_sum(c, cmd, &sum)))
			return ret;
		if (sum)
			kv_err(o, kv_oom_msg); /* some shards may have stored theirs */
		else
			KV_LIT(o, "+OK\r\n");
		break;
	case C_FLUSHALL:
		if (!(ret = kv_op_sum(c, cmd, &sum)))
			KV_LIT(o, "+OK\r\n");
		return ret;
	default:
		kv_reply_local(c, cmd, o);
		break;
	}
	return 0;
}

int kv_run_batch(struct kv_conn *c)
{
	struct kv_buf *o = &c->out;
	int ret = c->serial ? 0 : kv_run_remote(c);

	if (ret)
		return ret;
	KV_INC(c->sh->st.cmds, c->ncmds);
	c->last_clock = c->sh->clock;
	KV_INC(c->sh->st.batches, 1);
	if (c->exec)
		kv_num(o, '*', (long long)c->ncmds);
	for (size_t i = 0; i < c->ncmds && !ret; i++)
		ret = kv_reply_cmd(c, &c->cmds[i], o);
	kv_out_peak(c);
	return ret ? ret : o->nomem ? -ENOMEM : 0;
}
