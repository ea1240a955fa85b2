/* SPDX-License-Identifier: MIT */
/* tools/kv/plan.c - planning: a parsed command becomes ops, queued per shard. */
#include "kv.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


static int kv_add_op(struct kv_conn *c, enum kv_op_kind kind, uint32_t key, int shard)
{
	struct kv_op *op;

	if (c->nops == c->opcap) {
		size_t cap = c->opcap ? c->opcap * 2 : 64;
		struct kv_op *ops = realloc(c->ops, cap * sizeof(*ops));

		if (!ops)
			return -ENOMEM;
		c->ops = ops;
		c->opcap = cap;
	}
	op = &c->ops[c->nops];
	op->kind = (uint8_t)kind;
	op->cmd = (uint32_t)c->ncmds;
	op->key = key;
	op->next = KV_NONE;
	op->v = 0;
	op->ran = 0;
	op->roff = op->rlen = 0;
	if (shard < 0) {
		const struct kv_arg *k = &c->av.v[key];

		op->hash = kv_hash(c->srv->seed, k->p, k->n);
		shard = (int)kv_owner(c->srv, op->hash);
	}
	op->shard = (uint16_t)shard;
	if ((unsigned)shard != c->sh->id) { /* queue it for that shard */
		struct kv_remote *r = &c->rem[shard];

		if (r->head == KV_NONE)
			r->head = (uint32_t)c->nops;
		else
			c->ops[r->tail].next = (uint32_t)c->nops;
		r->tail = (uint32_t)c->nops;
	}
	c->cmds[c->ncmds].nops++;
	c->nops++;
	return 0;
}

static void kv_cmd_err(struct kv_cmd *cmd, const char *err)
{
	cmd->kind = C_ERR;
	cmd->err = err;
}

/*
 * SET key value [NX|XX] [GET] [EX s|PX ms|EXAT unix-s|PXAT unix-ms|KEEPTTL],
 * parsed as Redis 7.0 parses it: an option may repeat (the last expiry of
 * one unit wins: "EX 10 EX 20" is EX 20), options that conflict (NX with
 * XX, two units, a unit with KEEPTTL) are a syntax error, and only the
 * expiry that wins is checked, after the loop.
 */
static void kv_plan_set(struct kv_cmd *cmd, const struct kv_arg *a)
{
	static const char *const units[] = { "ex", "px", "exat", "pxat" };
	const struct kv_arg *exp = NULL;
	int unit = -1; /* units[] index of the expiry given */
	long long v;

	for (uint32_t i = 3; i < cmd->argc; i++) {
		const struct kv_arg *o = &a[i];
		int u = -1;

		for (int j = 0; j < 4; j++)
			if (kv_is(o, units[j]))
				u = j;
		if (kv_is(o, "nx") && !(cmd->flags & F_XX)) {
			cmd->flags |= F_NX;
		} else if (kv_is(o, "xx") && !(cmd->flags & F_NX)) {
			cmd->flags |= F_XX;
		} else if (kv_is(o, "get")) {
			cmd->flags |= F_GET;
		} else if (kv_is(o, "keepttl") && unit < 0) {
			cmd->flags |= F_KEEPTTL;
		} else if (u >= 0 && !(cmd->flags & F_KEEPTTL) && (unit < 0 || unit == u) &&
			   i + 1 < cmd->argc) {
			unit = u;
			exp = &a[++i];
		} else {
			kv_cmd_err(cmd, "ERR syntax error");
			return;
		}
	}
	if (!exp)
		return;
	if (!kv_str2ll(exp->p, exp->n, &v)) {
		kv_cmd_err(cmd, "ERR value is not an integer or out of range");
		return;
	}
	/* seconds (EX, EXAT) become ms; a relative one must not overflow once
	 * the Unix time is added (Redis's checks, in its order) */
	if (v <= 0 || (unit % 2 == 0 && v > LLONG_MAX / 1000) ||
	    (unit < 2 && (unit == 0 ? v * 1000 : v) > LLONG_MAX - kv_unix_ms())) {
		kv_cmd_err(cmd, "ERR invalid expire time in 'set' command");
		return;
	}
	cmd->n = unit % 2 == 0 ? v * 1000 : v;
	cmd->flags |= F_EXP | (unit >= 2 ? F_EXAT : 0);
}

/* EXPIRE / PEXPIRE key n [NX|XX|GT|LT] */
static void kv_plan_expire(struct kv_cmd *cmd, const struct kv_arg *a)
{
	long long v;

	if (!kv_str2ll(a[2].p, a[2].n, &v)) {
		kv_cmd_err(cmd, "ERR value is not an integer or out of range");
		return;
	}
	for (uint32_t i = 3; i < cmd->argc; i++) {
		if (kv_is(&a[i], "nx"))
			cmd->flags |= F_NX;
		else if (kv_is(&a[i], "xx"))
			cmd->flags |= F_XX;
		else if (kv_is(&a[i], "gt"))
			cmd->flags |= F_GT;
		else if (kv_is(&a[i], "lt"))
			cmd->flags |= F_LT;
		else {
			kv_cmd_err(cmd, "ERR Unsupported option");
			return;
		}
	}
	if (cmd->flags & F_NX && cmd->flags & (F_XX | F_GT | F_LT)) {
		kv_cmd_err(cmd, "ERR NX and XX, GT or LT options at the same time are not compatible");
		return;
	}
	if ((cmd->flags & (F_GT | F_LT)) == (F_GT | F_LT)) {
		kv_cmd_err(cmd, "ERR GT and LT options at the same time are not compatible");
		return;
	}
	/* Redis's bounds: seconds must fit as ms and the deadline must not pass
	 * LLONG_MAX; any time in the past, however far, deletes the key */
	if (__builtin_mul_overflow(v, cmd->spec->n, &v) ||
	    v > LLONG_MAX - (cmd->flags & F_EXAT ? 0 : kv_unix_ms())) {
		static const char *const msg[2][2] = {
			{ "ERR invalid expire time in 'pexpire' command",
			  "ERR invalid expire time in 'expire' command" },
			{ "ERR invalid expire time in 'pexpireat' command",
			  "ERR invalid expire time in 'expireat' command" },
		};

		kv_cmd_err(cmd, msg[!!(cmd->flags & F_EXAT)][cmd->spec->n != 1]);
		return;
	}
	cmd->n = v;
}

/*
 * An expiry argument of SETEX, PSETEX (rel, unit 1000 or 1) or GETEX's EX,
 * PX, EXAT, PXAT into cmd->n (ms) and F_EXP (| F_EXAT), checked as Redis
 * checks it; false with cmd made the error.
 */
static bool kv_plan_ttl(struct kv_cmd *cmd, const struct kv_arg *v, long long unit, bool at,
			const char *invalid)
{
	long long n;

	if (!kv_str2ll(v->p, v->n, &n)) {
		kv_cmd_err(cmd, "ERR value is not an integer or out of range");
		return false;
	}
	if (n <= 0 || __builtin_mul_overflow(n, unit, &n) || (!at && n > LLONG_MAX - kv_unix_ms())) {
		kv_cmd_err(cmd, invalid);
		return false;
	}
	cmd->n = n;
	cmd->flags |= F_EXP | (at ? F_EXAT : 0);
	return true;
}

/* GETEX key [EX s | PX ms | EXAT unix-s | PXAT unix-ms | PERSIST] */
static void kv_plan_getex(struct kv_cmd *cmd, const struct kv_arg *a)
{
	static const char *const units[] = { "ex", "px", "exat", "pxat" };
	static const char inv[] = "ERR invalid expire time in 'getex' command";
	int unit = -1;
	const struct kv_arg *v = NULL;

	for (uint32_t i = 2; i < cmd->argc; i++) {
		int u = -1;

		for (int j = 0; j < 4; j++)
			if (kv_is(&a[i], units[j]))
				u = j;
		if (u >= 0 && unit < 0 && !(cmd->flags & F_PERSIST) && i + 1 < cmd->argc) {
			unit = u;
			v = &a[++i];
		} else if (kv_is(&a[i], "persist") && unit < 0) {
			cmd->flags |= F_PERSIST;
		} else {
			kv_cmd_err(cmd, "ERR syntax error");
			return;
		}
	}
	if (v)
		kv_plan_ttl(cmd, v, unit % 2 == 0 ? 1000 : 1, unit >= 2, inv);
}

/* The reply of an unknown subcommand (C_BADSUB) or of OBJECT FREQ. */
static void kv_plan_object(struct kv_cmd *cmd, const struct kv_arg *a)
{
	static const char *const subs[] = { "encoding", "idletime", "refcount" };

	for (int i = 0; i < 3; i++) {
		if (kv_is(&a[1], subs[i]) && cmd->argc == 3) {
			cmd->n = i;
			return;
		}
	}
	if (kv_is(&a[1], "freq") && cmd->argc == 3)
		cmd->n = 3; /* the policy is checked when the key is found (keys.c), as Redis */
	else
		cmd->kind = C_BADSUB;
}

/* HRANDFIELD key [count [WITHVALUES]] */
static void kv_plan_hrandfield(struct kv_cmd *cmd, const struct kv_arg *a)
{
	if (cmd->argc == 2)
		return;
	if (cmd->argc > 4 || (cmd->argc == 4 && !kv_is(&a[3], "withvalues"))) {
		kv_cmd_err(cmd, "ERR syntax error");
		return;
	}
	if (!kv_str2ll(a[2].p, a[2].n, &cmd->n)) {
		kv_cmd_err(cmd, "ERR value is not an integer or out of range");
		return;
	}
	/* Redis's bound, so that -count (twice, with values) fits */
	if (cmd->n == LLONG_MIN || (cmd->argc == 4 && cmd->n < -(LLONG_MAX / 2))) {
		kv_cmd_err(cmd, cmd->argc == 4 ? "ERR value is out of range" :
						 "ERR value is out of range, value must between "
						 "-9223372036854775807 and 9223372036854775807");
		return;
	}
	cmd->flags |= F_COUNT | (cmd->argc == 4 ? F_WITHVALUES : 0);
}

/* HSCAN key cursor [MATCH pattern] [COUNT n]: the cursor in n, COUNT in
 * vidx, MATCH's argument index in n2. */
static void kv_plan_hscan(struct kv_cmd *cmd, const struct kv_arg *a)
{
	char num[32], *end;
	long long count = 10;

	errno = 0;
	if (a[2].n == 0 || a[2].n >= sizeof(num)) {
		kv_cmd_err(cmd, "ERR invalid cursor");
		return;
	}
	memcpy(num, a[2].p, a[2].n);
	num[a[2].n] = 0;
	cmd->n = (long long)strtoull(num, &end, 10);
	if (*end || errno == ERANGE) {
		kv_cmd_err(cmd, "ERR invalid cursor");
		return;
	}
	for (uint32_t i = 3; i < cmd->argc; i += 2) {
		if (i + 1 >= cmd->argc) {
			kv_cmd_err(cmd, "ERR syntax error");
			return;
		}
		if (kv_is(&a[i], "count")) {
			if (!kv_str2ll(a[i + 1].p, a[i + 1].n, &count)) {
				kv_cmd_err(cmd, "ERR value is not an integer or out of range");
				return;
			}
			if (count < 1) {
				kv_cmd_err(cmd, "ERR syntax error");
				return;
			}
		} else if (kv_is(&a[i], "match")) {
			cmd->flags |= F_MATCH;
			cmd->n2 = i + 1;
		} else {
			kv_cmd_err(cmd, "ERR syntax error");
			return;
		}
	}
	cmd->vidx = count > UINT32_MAX ? UINT32_MAX : (uint32_t)count;
}

/* Forget the transaction (EXEC ran it, DISCARD, EXECABORT). */
void kv_multi_reset(struct kv_conn *c)
{
	kv_unwatch(c); /* Redis: EXEC, DISCARD and an aborted EXEC forget the watches */
	c->in_multi = c->multi_dirty = false;
	c->mq.len = 0;
	c->mq_cmds = 0;
	if (c->mq.cap > KV_BIG_BUF)
		kv_buf_free(&c->mq);
}

/*
 * Queue a command after MULTI: its arguments are copied (they live in the
 * query buffer, which the next receive reuses). The queue is bounded by the
 * query buffer limit; past it the command is refused and EXEC will abort.
 */
static int kv_multi_queue(struct kv_conn *c, struct kv_cmd *cmd, const struct kv_arg *a, uint32_t argc)
{
	size_t need = 4 + 4 * (size_t)argc;
	uint32_t n;

	for (uint32_t i = 0; i < argc; i++)
		need += a[i].n;
	if (c->mq.len + need > c->srv->lim.qbuf_limit) {
		c->multi_dirty = true;
		kv_cmd_err(cmd, "ERR corio-kv: the transaction is larger than the query buffer limit");
		return 0;
	}
	if (!kv_reserve(&c->mq, need))
		return -ENOMEM;
	kv_put(&c->mq, &argc, 4);
	for (uint32_t i = 0; i < argc; i++) {
		n = (uint32_t)a[i].n;
		kv_put(&c->mq, &n, 4);
		kv_put(&c->mq, a[i].p, n);
	}
	c->mq_cmds++;
	cmd->kind = C_QUEUED;
	return 0;
}

/* EXEC: the queued commands become this batch, whose replies go out as one
 * array; their arguments point into the queue until the batch is done. */
int kv_plan_exec(struct kv_conn *c)
{
	size_t at = 0;
	int ret = 0;

	c->in_multi = false; /* plan them to run, not to queue again */
	if (c->nwatch && kv_unwatch(c)) { /* a watched key changed: nothing runs */
		struct kv_cmd *cmd = &c->cmds[c->ncmds++];

		cmd->kind = C_EXECNULL;
		kv_multi_reset(c);
		return 0;
	}
	c->exec = true;
	for (uint32_t i = 0; i < c->mq_cmds && !ret; i++) {
		uint32_t argc, n, arg0 = (uint32_t)c->av.n;

		memcpy(&argc, c->mq.p + at, 4);
		at += 4;
		for (uint32_t j = 0; j < argc && !ret; j++) {
			memcpy(&n, c->mq.p + at, 4);
			ret = kv_argv_push(&c->av, c->mq.p + at + 4, n);
			at += 4 + (size_t)n;
		}
		if (!ret)
			ret = kv_plan(c, arg0, argc);
	}
	return ret;
}

/* The commands that change the connection's state take effect when planned,
 * in request order: QUIT, MULTI, EXEC (refused), DISCARD, HELLO, AUTH. */
static void kv_plan_session(struct kv_conn *c, struct kv_cmd *cmd)
{
	switch (cmd->kind) {
	case C_QUIT:
		c->closing = true;
		break;
	case C_MULTI:
		if (c->in_multi)
			kv_cmd_err(cmd, "ERR MULTI calls can not be nested");
		c->in_multi = true;
		break;
	case C_EXEC: /* one that runs never gets here: kv_plan() returns KV_PLAN_EXEC */
		if (!c->in_multi)
			kv_cmd_err(cmd, "ERR EXEC without MULTI");
		else
			kv_cmd_err(cmd, "EXECABORT Transaction discarded because of previous errors.");
		kv_multi_reset(c);
		break;
	case C_AUTH: { /* AUTH [user] pass: takes effect here, for the commands after it */
		const struct kv_arg *a = &c->av.v[cmd->arg0];
		const char *bad;

		if (cmd->argc > 3) {
			kv_cmd_err(cmd, "ERR syntax error");
			break;
		}
		bad = kv_auth_check(c->sh, cmd->argc == 3 ? &a[1] : NULL, &a[cmd->argc - 1]);
		if (bad)
			kv_cmd_err(cmd, bad);
		else
			c->authed = true;
		break;
	}
	case C_DISCARD:
		if (!c->in_multi)
			kv_cmd_err(cmd, "ERR DISCARD without MULTI");
		kv_multi_reset(c);
		break;
	case C_HELLO: {
		/* the protocol switches here, when planned: the commands after it
		 * in this batch (remote ones run before the replies are written)
		 * and HELLO's own reply already speak the new one */
		char err[320];
		int ver = kv_hello(c, cmd, &cmd->flags, err, sizeof(err));
	
		if (ver > 0)
			c->resp = (uint8_t)ver;
		cmd->resp3 = c->resp == 3;
		cmd->n = c->resp;
		break;
	}
	default:
		break;
	}
}

#define KV_PLAN_DONE 2 /* kv_plan_gate(): answered without being planned */

/*
 * What comes before planning cmd (its spec looked up): refused (unknown
 * name, wrong arity: a transaction then aborts), queued after MULTI, or the
 * EXEC that runs a transaction. 0: plan it; KV_PLAN_DONE, KV_PLAN_EXEC, or
 * -ENOMEM.
 */
/* The rarer gates: not authenticated, subscribed (RESP2), cluster mode,
 * in MULTI. 0: on to planning; else as kv_plan_gate(). */
static int kv_plan_gate_rare(struct kv_conn *c, struct kv_cmd *cmd, const struct kv_arg *a, uint32_t argc)
{
	const struct kv_spec *sp = cmd->spec;
	int ret;

	if (!c->authed && sp->kind != C_AUTH && sp->kind != C_HELLO && sp->kind != C_QUIT) {
		c->multi_dirty |= c->in_multi; /* Redis: EXEC then aborts */
		if (sp->kind == C_EXEC) {
			kv_cmd_err(cmd, "EXECABORT Transaction discarded because of: NOAUTH Authentication "
					"required.");
			kv_multi_reset(c);
		} else {
			kv_cmd_err(cmd, kv_noauth_msg);
		}
		return KV_PLAN_DONE;
	}
	if (c->resp == 2 && c->ps && kv_ps_subscribed(c) && sp->kind != C_SUBSCRIBE &&
	    sp->kind != C_UNSUBSCRIBE && sp->kind != C_PING && sp->kind != C_QUIT) {
		cmd->kind = C_PSBLOCKED; /* RESP2's subscribed state */
		return KV_PLAN_DONE;
	}
	if (c->srv->cluster && sp->first > 0 && kv_crossslot(sp, a, argc)) {
		kv_cmd_err(cmd, "CROSSSLOT Keys in request don't hash to the same slot");
		c->multi_dirty |= c->in_multi;
		return KV_PLAN_DONE;
	}
	if (c->in_multi && sp->kind == C_WATCH) {
		kv_cmd_err(cmd, "ERR WATCH inside MULTI is not allowed");
		return KV_PLAN_DONE;
	}
	if (c->in_multi && sp->kind != C_MULTI && sp->kind != C_EXEC && sp->kind != C_DISCARD &&
	    sp->kind != C_QUIT) {
		ret = kv_multi_queue(c, cmd, a, argc);
		return ret ? ret : KV_PLAN_DONE;
	}
	if (sp->kind == C_EXEC && c->in_multi && !c->multi_dirty)
		return KV_PLAN_EXEC;
	return 0;
}

static int kv_plan_gate(struct kv_conn *c, struct kv_cmd *cmd, const struct kv_arg *a, uint32_t argc)
{
	const struct kv_spec *sp = cmd->spec;

	if (!sp || sp->kind == C_NOTSERVED || (sp->arity > 0 && argc != (uint32_t)sp->arity) ||
	    (sp->arity < 0 && argc < (uint32_t)-sp->arity) ||
	    ((sp->kind == C_MSET || sp->kind == C_MSETNX) && argc % 2 == 0) ||
	    (sp->kind == C_HSET && argc % 2)) {
		cmd->kind = !sp ? C_UNKNOWN : sp->kind == C_NOTSERVED ? C_NOTSERVED : C_ARITY;
		c->multi_dirty |= c->in_multi; /* Redis: EXEC then aborts */
		if (sp && sp->kind == C_EXEC) { /* Redis aborts at once, in MULTI or not */
			kv_cmd_err(cmd, "EXECABORT Transaction discarded because of: "
					"wrong number of arguments for 'exec' command");
			kv_multi_reset(c);
		}
		return KV_PLAN_DONE;
	}
	/* one test for what most commands never meet (the hot path) */
	if (!c->authed || c->ps || c->srv->cluster || c->in_multi || sp->kind == C_EXEC)
		return kv_plan_gate_rare(c, cmd, a, argc);
	return 0;
}

/*
 * Turn the command in av[arg0 ..] into c->cmds[c->ncmds] and its ops: 0,
 * -ENOMEM, or KV_PLAN_EXEC for the EXEC of a transaction without errors,
 * which must start a batch of its own (kv_plan_exec()).
 */
int kv_plan(struct kv_conn *c, uint32_t arg0, uint32_t argc)
{
	struct kv_cmd *cmd;
	const struct kv_arg *a = &c->av.v[arg0];
	const struct kv_spec *sp;
	const struct kv_slot *slot;
	int ret = 0;

	if (c->ncmds == c->cmdcap) {
		size_t cap = c->cmdcap ? c->cmdcap * 2 : 64;
		struct kv_cmd *cmds = realloc(c->cmds, cap * sizeof(*cmds));

		if (!cmds)
			return -ENOMEM;
		c->cmds = cmds;
		c->cmdcap = cap;
	}
	cmd = &c->cmds[c->ncmds];
	memset(cmd, 0, sizeof(*cmd));
	cmd->arg0 = arg0;
	cmd->argc = argc;
	cmd->op0 = (uint32_t)c->nops;
	cmd->resp3 = c->resp == 3;
	slot = kv_find_cmd(&c->srv->cmds, &a[0]);
	sp = cmd->spec = slot ? slot->sp : NULL;
	c->last = sp;
	ret = kv_plan_gate(c, cmd, a, argc);
	if (ret == KV_PLAN_EXEC)
		return ret;
	if (ret)
		goto out;
	cmd->kind = sp->kind;
	cmd->flags = sp->flags;
	cmd->n = sp->n;
	cmd->vidx = arg0 + 2;
	c->serial |= (sp->flags & F_SERIAL) != 0;
	KV_INC(c->sh->calls[slot->idx], 1); /* served: it passed the gate */
	switch (sp->kind) {
	case C_SETEX: /* SETEX / PSETEX key n value: SET key value EX|PX n */
		if (kv_plan_ttl(cmd, &a[2], sp->n, false, sp->n == 1 ?
				"ERR invalid expire time in 'psetex' command" :
				"ERR invalid expire time in 'setex' command")) {
			cmd->kind = C_SET;
			cmd->vidx = arg0 + 3;
			ret = kv_add_op(c, OP_SET, arg0 + 1, -1);
		}
		break;
	case C_GETEX:
		kv_plan_getex(cmd, a);
		if (cmd->kind == C_GETEX)
			ret = kv_add_op(c, OP_KEY, arg0 + 1, -1);
		break;
	case C_GETRANGE:
		if (!kv_str2ll(a[2].p, a[2].n, &cmd->n) || !kv_str2ll(a[3].p, a[3].n, &cmd->n2))
			kv_cmd_err(cmd, "ERR value is not an integer or out of range");
		else
			ret = kv_add_op(c, OP_KEY, arg0 + 1, -1);
		break;
	case C_SETRANGE:
		if (!kv_str2ll(a[2].p, a[2].n, &cmd->n))
			kv_cmd_err(cmd, "ERR value is not an integer or out of range");
		else if (cmd->n < 0)
			kv_cmd_err(cmd, "ERR offset is out of range");
		else
			ret = kv_add_op(c, OP_KEY, arg0 + 1, -1);
		break;
	case C_INCRBYFLOAT: {
		char buf[128], *end;

		if (a[2].n == 0 || a[2].n >= sizeof(buf) || a[2].p[0] == ' ' ||
		    a[2].p[a[2].n - 1] == ' ') {
			kv_cmd_err(cmd, "ERR value is not a valid float");
			break;
		}
		memcpy(buf, a[2].p, a[2].n);
		buf[a[2].n] = 0;
		{
			long double d = strtold(buf, &end);

			if (*end || strlen(buf) != a[2].n || d != d) {
				kv_cmd_err(cmd, "ERR value is not a valid float");
				break;
			}
		}
		ret = kv_add_op(c, OP_KEY, arg0 + 1, -1);
		break;
	}
	case C_OBJECT:
		kv_plan_object(cmd, a);
		if (cmd->kind == C_OBJECT)
			ret = kv_add_op(c, OP_KEY, arg0 + 2, -1);
		break;
	case C_MEMORY:
		if (kv_is(&a[1], "usage") && (argc == 3 || (argc == 5 && kv_is(&a[3], "samples"))))
			ret = kv_add_op(c, OP_KEY, arg0 + 2, -1);
		else
			cmd->kind = C_BADSUB;
		break;
	case C_HINCRBY:
		if (!kv_str2ll(a[3].p, a[3].n, &cmd->n))
			kv_cmd_err(cmd, "ERR value is not an integer or out of range");
		else
			ret = kv_add_op(c, OP_HASH, arg0 + 1, -1);
		break;
	case C_HINCRBYFLOAT: {
		long double d;

		if (!kv_parse_ld(a[3].p, a[3].n, &d))
			kv_cmd_err(cmd, "ERR value is not a valid float");
		else if (isinf(d))
			kv_cmd_err(cmd, "ERR value is NaN or Infinity");
		else
			ret = kv_add_op(c, OP_HASH, arg0 + 1, -1);
		break;
	}
	case C_HRANDFIELD:
		kv_plan_hrandfield(cmd, a);
		if (cmd->kind == C_HRANDFIELD)
			ret = kv_add_op(c, OP_HASH, arg0 + 1, -1);
		break;
	case C_HSCAN:
		kv_plan_hscan(cmd, a);
		if (cmd->kind == C_HSCAN)
			ret = kv_add_op(c, OP_HASH, arg0 + 1, -1);
		break;
	case C_SUBSCRIBE:
	case C_UNSUBSCRIBE:
		/* the subscribed state (RESP2) starts or ends when its reply is
		 * made: the commands after it are planned in the next batch */
		c->batch_end = true;
		break;
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
		ret = kv_add_op(c, OP_HASH, arg0 + 1, -1);
		break;
	case C_GETDEL:
	case C_APPEND:
	case C_STRLEN:
	case C_EXPIRETIME:
	case C_TYPE:
		ret = kv_add_op(c, OP_KEY, arg0 + 1, -1);
		break;
	case C_GET:
		ret = kv_add_op(c, OP_GET, arg0 + 1, -1);
		break;
	case C_SET:
		kv_plan_set(cmd, a);
		if (cmd->kind == C_SET)
			ret = kv_add_op(c, OP_SET, arg0 + 1, -1);
		break;
	case C_INCR:
		if (!cmd->n) {
			if (!kv_str2ll(a[2].p, a[2].n, &cmd->n)) {
				kv_cmd_err(cmd, "ERR value is not an integer or out of range");
				break;
			}
			if (cmd->flags & F_NEG) {
				if (cmd->n == LLONG_MIN) {
					kv_cmd_err(cmd, "ERR decrement would overflow");
					break;
				}
				cmd->n = -cmd->n;
			}
		}
		ret = kv_add_op(c, OP_INCR, arg0 + 1, -1);
		break;
	case C_EXPIRE:
		kv_plan_expire(cmd, a);
		if (cmd->kind == C_EXPIRE)
			ret = kv_add_op(c, OP_EXPIRE, arg0 + 1, -1);
		break;
	case C_TTL:
		ret = kv_add_op(c, OP_TTL, arg0 + 1, -1);
		break;
	case C_PERSIST:
		ret = kv_add_op(c, OP_PERSIST, arg0 + 1, -1);
		break;
	case C_MGET:
	case C_DEL:
	case C_EXISTS:
		for (uint32_t i = 1; i < argc && !ret; i++)
			ret = kv_add_op(c, sp->kind == C_MGET ? OP_GET : sp->kind == C_DEL ? OP_DEL : OP_EXISTS,
					arg0 + i, -1);
		break;
	case C_MSET:
		for (uint32_t i = 1; i < argc && !ret; i += 2)
			ret = kv_add_op(c, OP_MSET1, arg0 + i, -1);
		break;
	case C_FLUSHALL: /* [ASYNC|SYNC]: anything else must not flush (Redis) */
		if (argc > 2 || (argc == 2 && !kv_is(&a[1], "async") && !kv_is(&a[1], "sync"))) {
			kv_cmd_err(cmd, "ERR syntax error");
			break;
		}
		/* fall through */
	case C_DBSIZE:
		for (unsigned i = 0; i < c->srv->nshards && !ret; i++)
			ret = kv_add_op(c, sp->kind == C_DBSIZE ? OP_DBSIZE : OP_FLUSH, arg0, (int)i);
		break;
	case C_QUIT:
	case C_MULTI:
	case C_EXEC:
	case C_DISCARD:
	case C_HELLO:
	case C_AUTH:
		kv_plan_session(c, cmd);
		break;
	default:
		break;
	}
out:
	c->ncmds++;
	return ret == KV_PLAN_DONE ? 0 : ret;
}
