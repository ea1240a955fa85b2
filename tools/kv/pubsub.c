/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/pubsub.c - publish/subscribe across shards.
 *
 * A subscription lives on the subscriber's own shard (kv_shard.subs: the
 * channel or pattern and the connection), so SUBSCRIBE never leaves its
 * shard. PUBLISH asks every shard (corio_gather, on corio's message
 * rings: no lock anywhere); each shard appends the message to the pending
 * pushes of each local subscriber that matches and wakes that
 * connection's pusher fiber, and answers how many it reached; PUBLISH
 * replies the sum.
 *
 * The pusher is one fiber per subscribed connection that writes its
 * pending pushes to the socket. The connection's own fiber writes its
 * replies; the two take turns (a one-permit semaphore around the stream's
 * writer), and the pusher waits while the connection has replies not yet
 * sent, so a SUBSCRIBE's confirmation always goes out before the messages
 * that follow it. A subscriber's pending pushes are bounded (Redis's
 * pubsub class: --output-limit / 8, 32 MiB by default): one that does not
 * read is disconnected at the limit (INFO's
 * client_output_limit_disconnections), and PUBLISH never waits for it.
 *
 * Cost: a PUBLISH visits every shard and each shard scans its
 * subscriptions (O(subscriptions on that shard)).
 */
#include "kv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct kv_sub {
	char *name;
	size_t n;
	struct kv_conn *c;
	bool pattern;
};

/* What a subscribed connection keeps (c->ps). */
struct kv_ps {
	struct kv_buf out;      /* pushes not yet written */
	struct kv_buf sending;  /* the ones being written */
	struct corio_event ev;  /* pushes are waiting, or the connection ends */
	struct corio_sem wlock; /* one writer at a time: the pusher or the connection */
	struct corio_fiber *pusher;
	uint32_t nsub, npsub;
	bool ending;
};

static uint64_t kv_ps_limit(const struct kv_server *srv)
{
	return srv->lim.out_limit / 8;
}

/* ---- the pusher --------------------------------------------------------------------- */

static int kv_pusher_fn(void *arg)
{
	struct kv_conn *c = arg;
	struct kv_ps *ps = c->ps;

	for (;;) {
		struct iovec iov;
		struct kv_buf t;
		ssize_t n;

		if (corio_event_wait(&ps->ev) < 0 || ps->ending)
			break;
		corio_event_reset(&ps->ev);
		if (!ps->out.len || c->busy || c->out.len)
			continue; /* the connection sends its replies first, then wakes us */
		t = ps->sending;
		ps->sending = ps->out;
		ps->out = t;
		ps->out.len = 0;
		if (corio_sem_acquire(&ps->wlock) < 0)
			break;
		iov.iov_base = ps->sending.p;
		iov.iov_len = ps->sending.len;
		n = corio_stream_writev(c->st, &iov, 1);
		corio_sem_release(&ps->wlock);
		if (n < 0)
			break;
		KV_INC(c->sh->st.net_out, (uint64_t)n);
		ps->sending.len = 0;
		if (ps->sending.cap > KV_BIG_BUF)
			kv_buf_free(&ps->sending);
		if (ps->out.len)
			corio_event_set(&ps->ev);
	}
	return 0;
}

/* The connection's turn to write (kv_send): around its stream write. */
int kv_ps_lock(struct kv_conn *c)
{
	return c->ps ? corio_sem_acquire(&c->ps->wlock) : 0;
}

void kv_ps_unlock(struct kv_conn *c)
{
	if (c->ps)
		corio_sem_release(&c->ps->wlock);
}

/* The connection has sent what it had: pushes held back may go. */
void kv_ps_idle(struct kv_conn *c)
{
	if (c->ps && c->ps->out.len && !c->busy && !c->out.len)
		corio_event_set(&c->ps->ev);
}

static struct kv_ps *kv_ps_get(struct kv_conn *c)
{
	struct corio_spawn_opts o = { .name = "kv-pusher" };

	if (c->ps)
		return c->ps;
	c->ps = calloc(1, sizeof(*c->ps));
	if (!c->ps)
		return NULL;
	corio_event_init(&c->ps->ev);
	corio_sem_init(&c->ps->wlock, 1);
	if (corio_spawn(kv_pusher_fn, c, &o, &c->ps->pusher)) {
		free(c->ps);
		c->ps = NULL;
	}
	return c->ps;
}

/* ---- the shard's subscriptions ----------------------------------------------------- */

static int kv_sub_find(struct kv_shard *sh, struct kv_conn *c, const struct kv_arg *name, bool pat)
{
	for (size_t i = 0; i < sh->nsubs; i++) {
		struct kv_sub *s = &sh->subs[i];

		if (s->c == c && s->pattern == pat && s->n == name->n && !memcmp(s->name, name->p, s->n))
			return (int)i;
	}
	return -1;
}

static int kv_sub_add(struct kv_shard *sh, struct kv_conn *c, const struct kv_arg *name, bool pat)
{
	struct kv_sub *s;

	if (sh->nsubs == sh->subcap) {
		size_t cap = sh->subcap ? sh->subcap * 2 : 16;
		struct kv_sub *v = realloc(sh->subs, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		sh->subs = v;
		sh->subcap = cap;
	}
	s = &sh->subs[sh->nsubs];
	s->name = malloc(name->n + 1);
	if (!s->name)
		return -ENOMEM;
	memcpy(s->name, name->p, name->n);
	s->name[name->n] = 0;
	s->n = name->n;
	s->c = c;
	s->pattern = pat;
	sh->nsubs++;
	KV_INC(*(pat ? &sh->st.psubs : &sh->st.subs), 1);
	return 0;
}

/* Remove subscription i, keeping the others in order (UNSUBSCRIBE with no
 * channel answers them newest first, as Redis's order mostly is). */
static void kv_sub_del(struct kv_shard *sh, size_t i)
{
	KV_INC(*(sh->subs[i].pattern ? &sh->st.psubs : &sh->st.subs), (uint64_t)-1);
	free(sh->subs[i].name);
	memmove(&sh->subs[i], &sh->subs[i + 1], (sh->nsubs - i - 1) * sizeof(sh->subs[0]));
	sh->nsubs--;
}

/* ---- replies ------------------------------------------------------------------------ */

/* [p]subscribe / [p]unsubscribe confirmation: a push in RESP3. */
static void kv_ps_confirm(struct kv_buf *o, bool r3, const char *kind, const char *p, size_t n,
			  long long count)
{
	kv_num(o, r3 ? '>' : '*', 3);
	kv_bulkstr(o, kind);
	if (p)
		kv_bulk(o, p, n);
	else
		kv_null(o, r3);
	kv_num(o, ':', count);
}

static void kv_reply_subscribe(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o, bool pat)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_ps *ps = kv_ps_get(c);

	if (!ps) {
		kv_err(o, "ERR out of memory");
		return;
	}
	for (uint32_t i = 1; i < cmd->argc; i++) {
		if (kv_sub_find(c->sh, c, &a[i], pat) < 0) {
			if (kv_sub_add(c->sh, c, &a[i], pat)) {
				kv_err(o, "ERR out of memory");
				return;
			}
			pat ? ps->npsub++ : ps->nsub++;
		}
		kv_ps_confirm(o, cmd->resp3, pat ? "psubscribe" : "subscribe", a[i].p, a[i].n,
			      ps->nsub + ps->npsub);
	}
}

static void kv_reply_unsubscribe(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o, bool pat)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_shard *sh = c->sh;
	struct kv_ps *ps = c->ps;
	const char *kind = pat ? "punsubscribe" : "unsubscribe";
	bool any = false;

	if (cmd->argc == 1) { /* all of them */
		for (size_t i = sh->nsubs; i-- > 0;) {
			struct kv_sub *s = &sh->subs[i];

			if (s->c != c || s->pattern != pat)
				continue;
			pat ? ps->npsub-- : ps->nsub--;
			any = true;
			kv_ps_confirm(o, cmd->resp3, kind, s->name, s->n, ps->nsub + ps->npsub);
			kv_sub_del(sh, i);
		}
		if (!any)
			kv_ps_confirm(o, cmd->resp3, kind, NULL, 0, ps ? ps->nsub + ps->npsub : 0);
		return;
	}
	for (uint32_t i = 1; i < cmd->argc; i++) {
		int at = kv_sub_find(sh, c, &a[i], pat);

		if (at >= 0) {
			kv_sub_del(sh, (size_t)at);
			pat ? ps->npsub-- : ps->nsub--;
		}
		kv_ps_confirm(o, cmd->resp3, kind, a[i].p, a[i].n, ps ? ps->nsub + ps->npsub : 0);
	}
}

/* ---- PUBLISH ------------------------------------------------------------------------ */

struct kv_pub {
	struct kv_server *srv;
	const struct kv_arg *ch, *msg;
};

static void kv_push_message(struct kv_conn *c, const struct kv_sub *s, const struct kv_pub *m)
{
	struct kv_ps *ps = c->ps;
	bool r3 = c->resp == 3;

	if (!ps || c->killed)
		return;
	kv_num(&ps->out, r3 ? '>' : '*', s->pattern ? 4 : 3);
	if (s->pattern) {
		kv_bulkstr(&ps->out, "pmessage");
		kv_bulk(&ps->out, s->name, s->n);
	} else {
		kv_bulkstr(&ps->out, "message");
	}
	kv_bulk(&ps->out, m->ch->p, m->ch->n);
	kv_bulk(&ps->out, m->msg->p, m->msg->n);
	if (ps->out.len > kv_ps_limit(c->srv) || ps->out.nomem) {
		/* Redis's pubsub class: a slow subscriber is disconnected */
		KV_INC(c->sh->st.slow_subscribers, 1);
		c->killed = true;
		shutdown(c->fd, SHUT_RDWR);
		ps->out.len = 0;
		return;
	}
	if (!c->busy && !c->out.len)
		corio_event_set(&ps->ev);
}

static intptr_t kv_publish_fn(void *arg)
{
	struct kv_pub *m = arg;
	struct kv_shard *sh = &m->srv->sh[corio_shard_id()];
	intptr_t n = 0;

	for (size_t i = 0; i < sh->nsubs; i++) {
		struct kv_sub *s = &sh->subs[i];
		bool hit = s->pattern ? kv_glob(s->name, s->n, m->ch->p, m->ch->n, false)
				      : s->n == m->ch->n && !memcmp(s->name, m->ch->p, s->n);

		if (hit) {
			kv_push_message(s->c, s, m);
			n++;
		}
	}
	return n;
}

static void kv_reply_publish(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_pub m = { c->srv, &a[1], &a[2] };
	intptr_t *res = calloc(c->srv->nshards, sizeof(*res));
	long long n = 0;

	KV_INC(c->sh->st.remote_calls, 1);
	if (!res || corio_gather(kv_publish_fn, &m, res)) {
		kv_err(o, "ERR corio-kv: a shard did not answer");
	} else {
		for (unsigned i = 0; i < c->srv->nshards; i++)
			n += res[i];
		kv_num(o, ':', n);
	}
	free(res);
}

/* ---- PUBSUB CHANNELS / NUMSUB / NUMPAT ---------------------------------------------- */

struct kv_pubsub_q {
	struct kv_server *srv;
	const struct kv_arg *match;   /* CHANNELS [pattern] */
	const struct kv_arg *names;   /* NUMSUB names */
	uint32_t nnames;
	long long *counts;            /* NUMSUB: [shards][nnames] */
	struct kv_buf *out;           /* CHANNELS / NUMPAT: [shards] of names, NUL-ended */
	bool patterns;
};

static intptr_t kv_pubsub_fn(void *arg)
{
	struct kv_pubsub_q *q = arg;
	unsigned me = corio_shard_id();
	struct kv_shard *sh = &q->srv->sh[me];

	for (size_t i = 0; i < sh->nsubs; i++) {
		struct kv_sub *s = &sh->subs[i];

		if (q->names) {
			for (uint32_t j = 0; j < q->nnames; j++)
				if (!s->pattern && s->n == q->names[j].n && !memcmp(s->name, q->names[j].p, s->n))
					q->counts[(size_t)me * q->nnames + j]++;
		} else if (s->pattern == q->patterns &&
			   (!q->match || kv_glob(q->match->p, q->match->n, s->name, s->n, false))) {
			kv_put(&q->out[me], s->name, s->n + 1);
		}
	}
	return 0;
}

static int kv_cmpstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The distinct names every shard listed (CHANNELS, NUMPAT): reply them, or
 * just their count. */
static void kv_reply_names(struct kv_pubsub_q *q, struct kv_buf *o, bool count_only)
{
	size_t n = 0, k = 0, distinct = 0;
	char **v;

	for (unsigned i = 0; i < q->srv->nshards; i++)
		for (size_t at = 0; at < q->out[i].len; at += strlen(q->out[i].p + at) + 1)
			n++;
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v) {
		kv_err(o, "ERR out of memory");
		return;
	}
	for (unsigned i = 0; i < q->srv->nshards; i++)
		for (size_t at = 0; at < q->out[i].len; at += strlen(q->out[i].p + at) + 1)
			v[k++] = q->out[i].p + at;
	qsort(v, n, sizeof(*v), kv_cmpstr);
	for (size_t i = 0; i < n; i++)
		distinct += !i || strcmp(v[i], v[i - 1]);
	if (count_only) {
		kv_num(o, ':', (long long)distinct);
	} else {
		kv_num(o, '*', (long long)distinct);
		for (size_t i = 0; i < n; i++)
			if (!i || strcmp(v[i], v[i - 1]))
				kv_bulkstr(o, v[i]);
	}
	free(v);
}

static void kv_reply_pubsub(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_server *srv = c->srv;
	struct kv_pubsub_q q = { .srv = srv };
	bool channels = kv_is(&a[1], "channels") && cmd->argc <= 3;
	bool numpat = kv_is(&a[1], "numpat") && cmd->argc == 2;
	bool numsub = kv_is(&a[1], "numsub");

	if (!channels && !numpat && !numsub) {
		kv_reply_badsub(c, cmd, o);
		return;
	}
	if (numsub) {
		q.names = &a[2];
		q.nnames = cmd->argc - 2;
		q.counts = calloc((size_t)srv->nshards * (q.nnames ? q.nnames : 1), sizeof(*q.counts));
		if (!q.counts) {
			kv_err(o, "ERR out of memory");
			return;
		}
	} else {
		q.out = calloc(srv->nshards, sizeof(*q.out));
		q.match = channels && cmd->argc == 3 ? &a[2] : NULL;
		q.patterns = numpat;
		if (!q.out) {
			kv_err(o, "ERR out of memory");
			return;
		}
	}
	if (corio_gather(kv_pubsub_fn, &q, NULL)) {
		kv_err(o, "ERR corio-kv: a shard did not answer");
	} else if (numsub) {
		kv_num(o, '*', 2 * (long long)q.nnames); /* an array in RESP3 too (Redis 7.0) */
		for (uint32_t j = 0; j < q.nnames; j++) {
			long long n = 0;

			for (unsigned i = 0; i < srv->nshards; i++)
				n += q.counts[(size_t)i * q.nnames + j];
			kv_bulk(o, q.names[j].p, q.names[j].n);
			kv_num(o, ':', n);
		}
	} else {
		kv_reply_names(&q, o, numpat);
	}
	for (unsigned i = 0; q.out && i < srv->nshards; i++)
		kv_buf_free(&q.out[i]);
	free(q.out);
	free(q.counts);
}

void kv_reply_ps(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	switch (cmd->kind) {
	case C_SUBSCRIBE:
		kv_reply_subscribe(c, cmd, o, cmd->flags & F_PATTERN);
		break;
	case C_UNSUBSCRIBE:
		kv_reply_unsubscribe(c, cmd, o, cmd->flags & F_PATTERN);
		break;
	case C_PUBLISH:
		kv_reply_publish(c, cmd, o);
		break;
	case C_PUBSUB:
		kv_reply_pubsub(c, cmd, o);
		break;
	default:
		break;
	}
}

/* Is the connection in RESP2's subscribed state (only (P)SUBSCRIBE,
 * (P)UNSUBSCRIBE, PING, QUIT, RESET allowed)? */
bool kv_ps_subscribed(const struct kv_conn *c)
{
	return c->ps && c->ps->nsub + c->ps->npsub > 0;
}

/* The connection ends: its subscriptions go, its pusher is stopped and
 * waited for (its stream is about to close). */
void kv_ps_end(struct kv_conn *c)
{
	struct kv_shard *sh = c->sh;

	if (!c->ps)
		return;
	for (size_t i = sh->nsubs; i-- > 0;)
		if (sh->subs[i].c == c)
			kv_sub_del(sh, i);
	c->ps->ending = true;
	corio_event_set(&c->ps->ev);
	if (c->ps->pusher) {
		shutdown(c->fd, SHUT_RDWR); /* a pusher stuck writing to a client that does not read */
		corio_join(c->ps->pusher, NULL);
	}
	kv_buf_free(&c->ps->out);
	kv_buf_free(&c->ps->sending);
	free(c->ps);
	c->ps = NULL;
}

/* INFO's pubsub_channels / pubsub_patterns: distinct channels (patterns)
 * with a subscriber, over every shard. */
uint64_t kv_pubsub_count(struct kv_server *srv, bool patterns)
{
	struct kv_pubsub_q q = { .srv = srv, .patterns = patterns };
	struct kv_buf o = { 0 };
	uint64_t n = 0;

	for (unsigned i = 0; i < srv->nshards; i++)
		n += KV_GET(*(patterns ? &srv->sh[i].st.psubs : &srv->sh[i].st.subs));
	if (!n)
		return 0; /* none anywhere: no need to ask */
	q.out = calloc(srv->nshards, sizeof(*q.out));
	if (!q.out || corio_gather(kv_pubsub_fn, &q, NULL)) {
		free(q.out);
		return n; /* an upper bound */
	}
	kv_reply_names(&q, &o, true);
	n = o.len > 1 && o.p[0] == ':' ? strtoull(o.p + 1, NULL, 10) : n;
	kv_buf_free(&o);
	for (unsigned i = 0; i < srv->nshards; i++)
		kv_buf_free(&q.out[i]);
	free(q.out);
	return n;
}
