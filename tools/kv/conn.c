/* SPDX-License-Identifier: MIT */
/* tools/kv/conn.c - connections (receive, parse a batch, run it, send), the
 * listeners, and the server's setup. */
#include "kv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static void kv_conn_free(struct kv_conn *c)
{
	free(c->q);
	kv_buf_free(&c->out);
	kv_buf_free(&c->mq);
	free(c->av.v);
	free(c->cmds);
	free(c->ops);
	for (unsigned i = 0; c->rem && i < c->srv->nshards; i++)
		kv_buf_free(&c->rem[i].out);
	free(c->rem);
	free(c);
}

/* Make room for need bytes of unparsed input at the front of the query buffer. */
static int kv_qbuf_room(struct kv_conn *c, size_t need)
{
	size_t left = c->qlen - c->qpos, cap;
	char *q;

	if (c->qpos) {
		memmove(c->q, c->q + c->qpos, left);
		c->qlen = left;
		c->qpos = 0;
	}
	if (need < left + 1)
		need = left + 1;
	if (need <= c->qcap && !(c->qcap > KV_BIG_BUF && need <= KV_QBUF_INIT))
		return 0;
	cap = KV_QBUF_INIT;
	while (cap < need)
		cap *= 2;
	if (cap == c->qcap)
		return 0;
	q = realloc(c->q, cap);
	if (!q)
		return -ENOMEM;
	c->q = q;
	c->qcap = cap;
	return 0;
}

/*
 * Parse and plan the complete commands in the query buffer as one batch.
 * RESP_MORE: all were taken and *need bytes are worth waiting for; RESP_ERR:
 * a protocol error (in errbuf) after them; RESP_CMD: the batch is full,
 * QUIT ended it, or an EXEC that must be a batch of its own ends or makes
 * it; RESP_NOMEM.
 */
static int kv_parse_batch(struct kv_conn *c, size_t *need, char *errbuf, size_t errlen)
{
	c->av.n = 0;
	c->ncmds = c->nops = 0;
	for (unsigned i = 0; i < c->srv->nshards; i++)
		c->rem[i].head = KV_NONE;
	while (c->ncmds < KV_BATCH_CMDS && c->nops < KV_BATCH_OPS && !c->closing) {
		size_t used = 0, arg0 = c->av.n;
		int r = resp_parse(c->q + c->qpos, c->qlen - c->qpos, &c->srv->lim, &c->av, &used, need,
				   errbuf, errlen);

		if (r != RESP_CMD)
			return r;
		if (c->av.n == arg0) { /* an empty command */
			c->qpos += used;
			continue;
		}
		r = kv_plan(c, (uint32_t)arg0, (uint32_t)(c->av.n - arg0));
		if (r == KV_PLAN_EXEC) { /* a batch of its own: this one, or the next */
			c->av.n = arg0;
			if (!c->ncmds) {
				c->qpos += used;
				r = kv_plan_exec(c);
			}
			return r < 0 ? RESP_NOMEM : RESP_CMD;
		}
		if (r)
			return RESP_NOMEM;
		c->qpos += used;
	}
	return RESP_CMD;
}

/*
 * Serve one connection: receive, parse every complete command, run them
 * as a batch, send the replies, repeat. Returns when the client leaves,
 * QUITs, breaks the protocol or a limit, or the fiber is cancelled.
 */
static void kv_serve_conn(struct kv_conn *c)
{
	char errbuf[160];

	for (;;) {
		size_t need = 0;
		int ret = kv_parse_batch(c, &need, errbuf, sizeof(errbuf));
		bool perr = ret == RESP_ERR, more = ret == RESP_MORE;

		if (ret == RESP_NOMEM)
			return;
		if ((c->ncmds || c->exec) && kv_run_batch(c))
			return;
		if (perr) {
			KV_INC(c->sh->st.proto_errors, 1);
			KV_LIT(&c->out, "-ERR ");
			kv_put(&c->out, errbuf, strlen(errbuf));
			KV_LIT(&c->out, "\r\n");
			c->closing = true;
		}
		if (c->out.nomem)
			return;
		if (c->out.len && corio_send(c->s, c->out.p, c->out.len) < 0)
			return;
		c->out.len = 0;
		if (c->exec) { /* the batch no longer points into the queue */
			c->exec = false;
			kv_multi_reset(c);
		}
		for (unsigned i = 0; i < c->srv->nshards; i++)
			if (c->rem[i].out.cap > KV_BIG_BUF)
				kv_buf_free(&c->rem[i].out);
		if (c->out.cap > KV_BIG_BUF)
			kv_buf_free(&c->out);
		if (c->closing)
			return;
		if (!more)
			continue; /* the batch was full: more commands are waiting */
		ret = kv_qbuf_room(c, need);
		if (ret)
			return;
		{
			ssize_t n = corio_recv(c->s, c->q + c->qlen, c->qcap - c->qlen);

			if (n <= 0)
				return; /* closed, reset, or cancelled */
			c->qlen += (size_t)n;
		}
	}
}

struct kv_listener {
	struct kv_server *srv;
	struct kv_shard *sh;
	struct corio_listener *l;
	struct corio_group conns;
};

static int kv_conn_fiber(void *arg)
{
	struct kv_conn *c = arg;

	KV_INC(c->sh->st.conns, 1);
	KV_INC(c->sh->st.conns_total, 1);
	kv_serve_conn(c);
	corio_close(c->s);
	KV_INC(c->sh->st.conns, (uint64_t)-1);
	kv_conn_free(c);
	return 0; /* a connection's trouble is not the server's */
}

/* A connection whose fiber never ran (the runtime stopped first): its
 * socket and record still have to go. Runs on the loop; the socket has no
 * receive armed yet, so closing it does not block. */
static void kv_conn_release(void *arg)
{
	struct kv_conn *c = arg;

	corio_close(c->s);
	kv_conn_free(c);
}

/* Accept until cancelled; then cancel the connections and wait for them. */
static int kv_accept_loop(struct kv_listener *kl)
{
	struct corio_spawn_opts o = { .name = "kv-conn", .release = kv_conn_release };
	int ret = corio_group_init(&kl->conns, 0);

	while (!ret) {
		struct corio_sock *s;
		struct kv_conn *c;

		ret = corio_accept(kl->l, &s);
		if (ret < 0)
			break;
		c = calloc(1, sizeof(*c));
		if (c)
			c->rem = calloc(kl->srv->nshards, sizeof(*c->rem));
		if (!c || !c->rem) {
			free(c);
			corio_close(s);
			continue;
		}
		c->srv = kl->srv;
		c->sh = kl->sh;
		c->s = s;
		c->resp = 2;
		c->id = ++kl->sh->next_conn_id * kl->srv->nshards + kl->sh->id;
		if (corio_group_spawn(&kl->conns, kv_conn_fiber, c, &o, NULL) < 0) {
			corio_close(s);
			kv_conn_free(c);
		}
	}
	corio_group_close(&kl->conns);
	return ret;
}

/*
 * Everything a shard does: listen (shard 0 first, so that port 0 picks one
 * port for all; the others join it), accept and serve until the runtime
 * stops. Run it on every shard (the corio_start entry). Blocking.
 */
void kv_shard_main(struct kv_server *srv)
{
	struct corio_listen_opts lo = { .flags = CORIO_LISTEN_REUSEPORT };
	struct kv_listener kl = { .srv = srv, .sh = &srv->sh[corio_shard_id()] };
	char where[300];
	int port = srv->port, ret;

	if (!port && corio_shard_id() != 0) {
		while (!(port = atomic_load(&srv->bound_port)) && !atomic_load(&srv->failed))
			if (corio_sleep_ns(100000) < 0)
				return;
		if (!port)
			return;
	}
	snprintf(where, sizeof(where), "%s:%d", srv->host ? srv->host : "127.0.0.1", port);
	ret = corio_tcp_listen(where, &lo, &kl.l);
	if (ret) {
		fprintf(stderr, "corio-kv: shard %u: listen on %s: %s (%s)\n", corio_shard_id(), where,
			strerror(-ret), corio_last_error());
		atomic_store(&srv->failed, 1);
		return;
	}
	if (!port) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);

		if (!corio_listener_addr(kl.l, &ss, &len))
			port = corio_addr_port((struct sockaddr *)&ss);
	}
	if (corio_shard_id() == 0)
		atomic_store(&srv->bound_port, port);
	atomic_fetch_add(&srv->listening, 1);
	ret = kv_accept_loop(&kl);
	if (ret != -ECANCELED) {
		fprintf(stderr, "corio-kv: shard %u: accept: %s\n", corio_shard_id(), strerror(-ret));
		atomic_store(&srv->failed, 1);
	}
	corio_listener_close(kl.l);
}

/* Set up srv for nshards (before corio_start); 0 or -ENOMEM. */
int kv_server_init(struct kv_server *srv, unsigned nshards)
{
	uint64_t seed = corio_now_ns();
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, &seed, sizeof(seed)) != sizeof(seed))
			seed ^= (uint64_t)getpid() << 32;
		close(fd);
	}
	srv->nshards = nshards;
	srv->seed = seed;
	srv->start_ns = corio_now_ns();
	srv->sh = calloc(nshards, sizeof(*srv->sh));
	if (!srv->sh)
		return -ENOMEM;
	for (unsigned i = 0; i < nshards; i++) {
		if (kv_shard_init(&srv->sh[i], srv, i, srv->lim.maxmemory / nshards)) {
			for (unsigned j = 0; j <= i; j++)
				kv_shard_free(&srv->sh[j]);
			free(srv->sh);
			srv->sh = NULL;
			return -ENOMEM;
		}
	}
	return 0;
}

/* After corio_wait(): every shard has stopped. */
void kv_server_free(struct kv_server *srv)
{
	for (unsigned i = 0; srv->sh && i < srv->nshards; i++)
		kv_shard_free(&srv->sh[i]);
	free(srv->sh);
	srv->sh = NULL;
}
