/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/server.c - the server and connection commands: CLIENT (LIST,
 * KILL, INFO, ID, SETNAME, GETNAME, NO-EVICT, NO-TOUCH, SETINFO), TIME,
 * ROLE, WAIT, SLOWLOG, LATENCY. CLIENT LIST and KILL ask every shard about
 * its own connections (corio_gather): each shard keeps a list of them.
 */
#include "kv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* ---- the shard's connections ------------------------------------------------------- */

/* Join c to its shard's list; its addresses for CLIENT LIST. */
void kv_conn_register(struct kv_conn *c, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	c->fd = fd;
	c->created_ns = corio_now_ns();
	c->last_clock = c->sh->clock;
	if (!getpeername(fd, (struct sockaddr *)&ss, &len))
		corio_addr_format((struct sockaddr *)&ss, len, c->addr, sizeof(c->addr));
	len = sizeof(ss);
	if (!getsockname(fd, (struct sockaddr *)&ss, &len))
		corio_addr_format((struct sockaddr *)&ss, len, c->laddr, sizeof(c->laddr));
	c->next = c->sh->conns;
	c->prev = NULL;
	if (c->next)
		c->next->prev = c;
	c->sh->conns = c;
	c->listed = true;
}

void kv_conn_unregister(struct kv_conn *c)
{
	if (!c->listed)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		c->sh->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->listed = false;
}

/* One CLIENT LIST line (Redis 7.0's fields; corio-kv adds shard=). */
static void kv_client_line(struct kv_buf *b, const struct kv_conn *c, const char *cmdname)
{
	char line[512];
	uint64_t age = (corio_now_ns() - c->created_ns) / 1000000000ull;
	int n;

	n = snprintf(line, sizeof(line),
		     "id=%llu addr=%s laddr=%s fd=%d name=%s age=%llu idle=%u flags=%s db=0 sub=0 "
		     "psub=0 ssub=0 multi=%d qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=%zu rbs=0 rbp=0 "
		     "obl=0 oll=0 omem=0 tot-mem=%zu events=r cmd=%s user=default redir=-1 resp=%u "
		     "shard=%u\n",
		     (unsigned long long)c->id, c->addr, c->laddr, c->fd, c->name,
		     (unsigned long long)age, (unsigned)(uint16_t)(c->sh->clock - c->last_clock),
		     c->in_multi ? "x" : c->no_evict ? "e" : "N", c->in_multi ? (int)c->mq_cmds : -1,
		     c->mq.cap, c->out.cap + c->mq.cap, cmdname, (unsigned)c->resp, c->sh->id);
	if (n > 0)
		kv_put(b, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static const char *kv_last_cmd(const struct kv_conn *c, const struct kv_conn *self)
{
	if (c == self)
		return "client|list";
	return c->last ? c->last->name : "NULL";
}

struct kv_clients {
	struct kv_server *srv;
	struct kv_conn *self;
	struct kv_buf *out;     /* [shards] */
	/* CLIENT KILL's filters (0 / NULL: any) */
	uint64_t id;
	const struct kv_arg *addr, *laddr;
	bool skipme, user_other, kill; /* user_other: a type no client has */
	intptr_t killed_self;
};

static bool kv_client_match(const struct kv_clients *q, const struct kv_conn *c)
{
	if (c->killed || (q->id && c->id != q->id))
		return false;
	if (q->addr && !kv_is(q->addr, c->addr))
		return false;
	if (q->laddr && !kv_is(q->laddr, c->laddr))
		return false;
	if (q->user_other)
		return false;
	return !(q->skipme && c == q->self);
}

static intptr_t kv_clients_fn(void *arg)
{
	struct kv_clients *q = arg;
	unsigned me = corio_shard_id();
	struct kv_shard *sh = &q->srv->sh[me];
	intptr_t n = 0;

	for (struct kv_conn *c = sh->conns; c; c = c->next) {
		if (!q->kill) {
			if (kv_client_match(q, c))
				kv_client_line(&q->out[me], c, kv_last_cmd(c, q->self));
			continue;
		}
		if (!kv_client_match(q, c))
			continue;
		n++;
		if (c == q->self)
			q->killed_self = 1; /* after its reply (Redis) */
		else
			shutdown(c->fd, SHUT_RDWR); /* its fiber reads the end and leaves */
		c->killed = true; /* gone for CLIENT LIST and KILL from now on */
	}
	return n;
}

static void kv_client_list(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_clients q = { .srv = c->srv, .self = c };
	size_t len = 0;

	if (cmd->argc == 4 && kv_is(&a[2], "type")) {
		if (kv_is(&a[3], "pubsub") || kv_is(&a[3], "master") || kv_is(&a[3], "replica") ||
		    kv_is(&a[3], "slave")) {
			kv_verbatim(o, "", 0, cmd->resp3);
			return;
		}
		if (!kv_is(&a[3], "normal")) {
			char msg[128];

			snprintf(msg, sizeof(msg), "ERR Unknown client type '%.*s'",
				 (int)(a[3].n > 40 ? 40 : a[3].n), a[3].p);
			kv_err_sanitized(o, msg);
			return;
		}
	} else if (cmd->argc == 4 && kv_is(&a[2], "id")) {
		long long id;

		if (!kv_str2ll(a[3].p, a[3].n, &id) || id <= 0) {
			kv_err(o, "ERR Invalid client ID");
			return;
		}
		q.id = (uint64_t)id;
	} else if (cmd->argc != 2) {
		kv_err(o, "ERR syntax error");
		return;
	}
	q.out = calloc(c->srv->nshards, sizeof(*q.out));
	if (!q.out || corio_gather(kv_clients_fn, &q, NULL)) {
		kv_err(o, "ERR corio-kv: a shard did not answer");
	} else {
		for (unsigned i = 0; i < c->srv->nshards; i++)
			len += q.out[i].len;
		if (cmd->resp3) {
			kv_num(o, '=', (long long)len + 4);
			KV_LIT(o, "txt:");
		} else {
			kv_num(o, '$', (long long)len);
		}
		for (unsigned i = 0; i < c->srv->nshards; i++)
			kv_put(o, q.out[i].p, q.out[i].len);
		KV_LIT(o, "\r\n");
	}
	for (unsigned i = 0; q.out && i < c->srv->nshards; i++)
		kv_buf_free(&q.out[i]);
	free(q.out);
}

/* CLIENT KILL addr | CLIENT KILL [ID id] [ADDR a] [LADDR a] [USER u] [SKIPME yes|no] [TYPE t] */
static void kv_client_kill(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_clients q = { .srv = c->srv, .self = c, .kill = true, .skipme = true };
	intptr_t *res = NULL;
	long long n = 0;
	bool old = cmd->argc == 3;

	if (old) {
		q.addr = &a[2];
		q.skipme = false;
	} else if (cmd->argc % 2) {
		kv_err(o, "ERR syntax error");
		return;
	}
	for (uint32_t i = 2; !old && i < cmd->argc; i += 2) {
		const struct kv_arg *v = &a[i + 1];
		long long id;

		if (kv_is(&a[i], "id")) {
			if (!kv_str2ll(v->p, v->n, &id) || id <= 0) {
				kv_err(o, "ERR client-id should be greater than 0");
				return;
			}
			q.id = (uint64_t)id;
		} else if (kv_is(&a[i], "addr")) {
			q.addr = v;
		} else if (kv_is(&a[i], "laddr")) {
			q.laddr = v;
		} else if (kv_is(&a[i], "user")) {
			if (!kv_is(v, "default")) { /* the only user */
				char msg[128];

				snprintf(msg, sizeof(msg), "ERR No such user '%.*s'",
					 (int)(v->n > 40 ? 40 : v->n), v->p);
				kv_err_sanitized(o, msg);
				return;
			}
		} else if (kv_is(&a[i], "skipme")) {
			if (!kv_is(v, "yes") && !kv_is(v, "no")) {
				kv_err(o, "ERR syntax error");
				return;
			}
			q.skipme = kv_is(v, "yes");
		} else if (kv_is(&a[i], "type")) {
			if (kv_is(v, "master") || kv_is(v, "replica") || kv_is(v, "slave") ||
			    kv_is(v, "pubsub")) {
				q.user_other = true; /* none of those */
			} else if (!kv_is(v, "normal")) {
				char msg[128];

				snprintf(msg, sizeof(msg), "ERR Unknown client type '%.*s'",
					 (int)(v->n > 40 ? 40 : v->n), v->p);
				kv_err_sanitized(o, msg);
				return;
			}
		} else {
			kv_err(o, "ERR syntax error");
			return;
		}
	}
	res = calloc(c->srv->nshards, sizeof(*res));
	if (!res || corio_gather(kv_clients_fn, &q, res)) {
		kv_err(o, "ERR corio-kv: a shard did not answer");
		free(res);
		return;
	}
	for (unsigned i = 0; i < c->srv->nshards; i++)
		n += res[i];
	free(res);
	if (q.killed_self)
		c->closing = true;
	if (!old)
		kv_num(o, ':', n);
	else if (n)
		KV_LIT(o, "+OK\r\n");
	else
		kv_err(o, "ERR No such client");
}

static void kv_client_info(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	struct kv_buf b = { 0 };

	kv_client_line(&b, c, "client|info");
	kv_verbatim(o, b.p ? b.p : "", b.len, cmd->resp3);
	kv_buf_free(&b);
}

/* CLIENT NO-EVICT / NO-TOUCH on|off */
static void kv_client_onoff(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o, bool *flag)
{
	const struct kv_arg *v = &c->av.v[cmd->arg0 + 2];

	if (kv_is(v, "on"))
		*flag = true;
	else if (kv_is(v, "off"))
		*flag = false;
	else {
		kv_err(o, "ERR syntax error");
		return;
	}
	KV_LIT(o, "+OK\r\n");
}

void kv_reply_client(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];

	if (kv_is(&a[1], "setname") && cmd->argc == 3) {
		const char *bad = kv_name_check(&a[2]);

		if (bad) {
			kv_err(o, bad);
			return;
		}
		kv_set_name(c, &a[2]);
		KV_LIT(o, "+OK\r\n");
	} else if (kv_is(&a[1], "getname") && cmd->argc == 2) {
		if (c->name[0])
			kv_bulkstr(o, c->name);
		else
			kv_null(o, cmd->resp3);
	} else if (kv_is(&a[1], "id") && cmd->argc == 2) {
		kv_num(o, ':', (long long)c->id);
	} else if (kv_is(&a[1], "info") && cmd->argc == 2) {
		kv_client_info(c, cmd, o);
	} else if (kv_is(&a[1], "list")) {
		kv_client_list(c, cmd, o);
	} else if (kv_is(&a[1], "kill") && cmd->argc >= 3) {
		kv_client_kill(c, cmd, o);
	} else if (kv_is(&a[1], "no-evict") && cmd->argc == 3) {
		kv_client_onoff(c, cmd, o, &c->no_evict);
	} else if (kv_is(&a[1], "no-touch") && cmd->argc == 3) {
		kv_client_onoff(c, cmd, o, &c->no_touch);
	} else if (kv_is(&a[1], "setinfo") && cmd->argc == 4) {
		KV_LIT(o, "+OK\r\n");
	} else {
		char msg[160];

		if (kv_subcommand_known("client", &a[1])) {
			char low[32];
			size_t i;

			for (i = 0; i < a[1].n && i < sizeof(low) - 1; i++)
				low[i] = (char)(a[1].p[i] | 0x20);
			low[i] = 0;
			snprintf(msg, sizeof(msg), "ERR wrong number of arguments for 'client|%s' command",
				 low);
		} else {
			snprintf(msg, sizeof(msg), "ERR unknown subcommand '%.*s'. Try CLIENT HELP.",
				 (int)(a[1].n > 64 ? 64 : a[1].n), a[1].p);
		}
		kv_err_sanitized(o, msg);
	}
}

/* ---- TIME, ROLE, WAIT, SLOWLOG, LATENCY --------------------------------------------- */

void kv_reply_server(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];

	switch (cmd->kind) {
	case C_TIME: {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		kv_num(o, '*', 2);
		{
			char s[24], us[24];

			snprintf(s, sizeof(s), "%lld", (long long)ts.tv_sec);
			snprintf(us, sizeof(us), "%ld", ts.tv_nsec / 1000);
			kv_bulkstr(o, s);
			kv_bulkstr(o, us);
		}
		break;
	}
	case C_ROLE:
		KV_LIT(o, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
		break;
	case C_WAIT: { /* no replicas: 0 of them acknowledge, at once */
		long long n, ms;

		if (!kv_str2ll(a[1].p, a[1].n, &n)) {
			kv_err(o, "ERR value is not an integer or out of range");
		} else if (!kv_str2ll(a[2].p, a[2].n, &ms)) {
			kv_err(o, "ERR timeout is not an integer or out of range");
		} else if (ms < 0) {
			kv_err(o, "ERR timeout is negative");
		} else {
			if (n > 0 && ms > 0) { /* what a replica-less Redis waits */
				KV_INC(c->sh->st.blocked, 1);
				corio_sleep_ns((uint64_t)(ms > 3600000 ? 3600000 : ms) * 1000000ull);
				KV_INC(c->sh->st.blocked, (uint64_t)-1);
			}
			KV_LIT(o, ":0\r\n");
		}
		break;
	}
	case C_SLOWLOG: /* nothing is recorded (docs/corio-kv.md) */
		if (kv_is(&a[1], "get") && cmd->argc <= 3) {
			long long n;

			if (cmd->argc == 3 && (!kv_str2ll(a[2].p, a[2].n, &n) || n < -1))
				kv_err(o, "ERR count should be greater than or equal to -1");
			else
				KV_LIT(o, "*0\r\n");
		} else if (kv_is(&a[1], "len") && cmd->argc == 2) {
			KV_LIT(o, ":0\r\n");
		} else if (kv_is(&a[1], "reset") && cmd->argc == 2) {
			KV_LIT(o, "+OK\r\n");
		} else {
			struct kv_cmd bad = *cmd;

			bad.kind = C_BADSUB;
			kv_reply_badsub(c, &bad, o);
		}
		break;
	case C_LATENCY: /* nothing is recorded (docs/corio-kv.md) */
		if (kv_is(&a[1], "latest") && cmd->argc == 2)
			KV_LIT(o, "*0\r\n");
		else if (kv_is(&a[1], "history") && cmd->argc == 3)
			KV_LIT(o, "*0\r\n");
		else if (kv_is(&a[1], "reset"))
			KV_LIT(o, ":0\r\n");
		else {
			struct kv_cmd bad = *cmd;

			bad.kind = C_BADSUB;
			kv_reply_badsub(c, &bad, o);
		}
		break;
	default:
		break;
	}
}
