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

/* Send the replies in c->out through the stream's writer, from corio-kv's
 * own buffer (not copied: the output limit and its accounting stay here).
 * The bytes sent, or -errno; a failure is the stream's sticky write error. */
ssize_t kv_send(struct kv_conn *c)
{
	struct iovec iov = { c->out.p, c->out.len };
	ssize_t n;

	if (kv_ps_lock(c) < 0) /* a subscriber's pusher may be writing */
		return -ECANCELED;
	n = corio_stream_writev(c->st, &iov, 1);
	kv_ps_unlock(c);
	if (n > 0)
		KV_INC(c->sh->st.net_out, (uint64_t)n);
	return n;
}

/*
 * Parse and plan the complete commands in p[0..n) (what the stream holds,
 * in place) as one batch; *pos is advanced past each command taken.
 * RESP_MORE: all were taken and the command at *pos is incomplete: *need
 * bytes from *pos are worth waiting for; RESP_ERR: a protocol error (in
 * errbuf) after them; RESP_CMD: the batch is full, QUIT ended it, or an
 * EXEC that must be a batch of its own ends or makes it; RESP_NOMEM.
 */
static int kv_parse_batch(struct kv_conn *c, const char *p, size_t n, size_t *pos, size_t *need,
			  char *errbuf, size_t errlen)
{
	c->av.n = 0;
	c->ncmds = c->nops = 0;
	c->serial = false;
	c->batch_end = false;
	for (unsigned i = 0; i < c->srv->nshards; i++)
		c->rem[i].head = KV_NONE;
	while (c->ncmds < KV_BATCH_CMDS && c->nops < KV_BATCH_OPS && !c->closing && !c->batch_end) {
		size_t used = 0, arg0 = c->av.n;
		int r = resp_parse(p + *pos, n - *pos, &c->srv->lim, &c->av, &used, need, errbuf,
				   errlen);

		if (r != RESP_CMD)
			return r;
		if (c->av.n == arg0) { /* an empty command */
			*pos += used;
			continue;
		}
		r = kv_plan(c, (uint32_t)arg0, (uint32_t)(c->av.n - arg0));
		if (r == KV_PLAN_EXEC) { /* a batch of its own: this one, or the next */
			c->av.n = arg0;
			if (!c->ncmds) {
				*pos += used;
				r = kv_plan_exec(c);
			}
			return r < 0 ? RESP_NOMEM : RESP_CMD;
		}
		if (r)
			return RESP_NOMEM;
		*pos += used;
	}
	return RESP_CMD;
}

/* Run the planned batch, answer a protocol error, send the replies when
 * flush (or the connection ends, or KV_OUT_DEFER of them wait) and drop
 * buffers a big batch grew. 0 to go on, -1 when the connection ends. */
static int kv_finish_batch(struct kv_conn *c, bool perr, const char *errbuf, bool flush)
{
	if ((c->ncmds || c->exec) && kv_run_batch(c))
		return -1;
	if (perr) {
		KV_INC(c->sh->st.proto_errors, 1);
		KV_LIT(&c->out, "-ERR ");
		kv_put(&c->out, errbuf, strlen(errbuf));
		KV_LIT(&c->out, "\r\n");
		c->closing = true;
	}
	if (c->out.nomem)
		return -1;
	if (c->out.len && (flush || c->closing || c->out.len >= KV_OUT_DEFER)) {
		if (kv_send(c) < 0)
			return -1;
		c->out.len = 0;
	}
	if (c->exec) { /* the batch no longer points into the queue */
		c->exec = false;
		kv_multi_reset(c);
	}
	for (unsigned i = 0; i < c->srv->nshards; i++)
		if (c->rem[i].out.cap > KV_BIG_BUF)
			kv_buf_free(&c->rem[i].out);
	if (c->out.cap > KV_BIG_BUF && !c->out.len)
		kv_buf_free(&c->out);
	return c->closing ? -1 : 0;
}

/*
 * How much to gather for the next look, when the command at the head of
 * the stream is incomplete (have bytes of it seen) and the parser waits
 * for need bytes: twice what was seen (KV_GATHER_MIN at least). The parser
 * starts the command again at every look, so looks that double finish a
 * long command in a few passes, where looking for need (one bulk string
 * more) took one per argument; and the copy stays about the command's
 * size: what the stream gathered past it is read in place again once the
 * command is consumed.
 */
static size_t kv_gather_upto(size_t have, size_t need, size_t max_frame)
{
	size_t more = have * 2 > KV_GATHER_MIN ? have * 2 : KV_GATHER_MIN;

	if (more < need)
		more = need;
	return more < max_frame ? more : max_frame;
}

/*
 * Serve one connection: parse every complete command the stream holds in
 * place (a command in one received buffer is read where the kernel put
 * it; one that spans two is gathered by the stream, with what follows it
 * in that buffer), run them as a batch, send the replies, consume, repeat.
 * The replies wait while the next look will not (the stream holds the
 * bytes it waits for): a batch cut short by a received buffer's end does
 * not cost a send of its own, and no reply ever waits for input. Returns
 * when the client leaves, QUITs, breaks the protocol or a limit, or the
 * fiber is cancelled.
 */
static void kv_serve_conn(struct kv_conn *c, size_t max_frame)
{
	char errbuf[160];
	size_t want = 1, upto = 1;

	for (;;) {
		const void *v;
		size_t pos = 0, need = 0;
		ssize_t n = corio_stream_peek_upto(c->st, want, upto, &v);
		int ret;

		if (n <= 0 || (size_t)n < want)
			return; /* closed (inside a command or not), reset, or cancelled */
		c->busy = true; /* a subscriber's pushes wait for these replies */
		ret = kv_parse_batch(c, v, (size_t)n, &pos, &need, errbuf, sizeof(errbuf));
		if (ret == RESP_NOMEM)
			return;
		if (ret == RESP_MORE && need > max_frame) { /* only with a limit near 1 GiB */
			snprintf(errbuf, sizeof(errbuf), "Protocol error: command larger than %zu "
				 "bytes, the most a connection buffers", max_frame);
			ret = RESP_ERR;
		}
		/* need counts from pos; the stream's count (pos..) once consumed */
		want = ret == RESP_MORE ? need : 1;
		upto = ret == RESP_MORE ? kv_gather_upto((size_t)n - pos, need, max_frame) : 1;
		/* the batch's arguments point into v: consume only once it ran */
		KV_INC(c->sh->st.net_in, pos);
		if (kv_finish_batch(c, ret == RESP_ERR, errbuf,
				    corio_stream_buffered(c->st) - pos < want) ||
		    corio_stream_consume(c->st, pos))
			return;
		c->busy = false;
		kv_ps_idle(c);
	}
}

struct kv_listener {
	struct kv_server *srv;
	struct kv_shard *sh;
	struct corio_listener *l;
	struct corio_group conns;
};

/* The stream's largest frame: a whole command up to the query-buffer
 * limit, plus the lines the parser may look at past it before it refuses
 * (an inline request or a count line, KV_MAX_LINE each), within the
 * stream's 1 GiB. */
static size_t kv_max_frame(const struct kv_server *srv)
{
	uint64_t f = srv->lim.qbuf_limit + 2 * (uint64_t)KV_MAX_LINE + 2;

	return f > KV_STREAM_MAX ? KV_STREAM_MAX : (size_t)f;
}

static int kv_conn_fiber(void *arg)
{
	struct kv_conn *c = arg;
	struct corio_stream_opts so = { .max_frame = kv_max_frame(c->srv) };

	KV_INC(c->sh->st.conns, 1);
	KV_INC(c->sh->st.conns_total, 1);
	kv_conn_register(c, corio_sock_fd(c->s));
	if (corio_stream_sock(c->s, &so, &c->st) == 0) {
		if (kv_protected_refuses(c->srv, c->sh, c->s)) {
			/* Redis's protected mode: the reason, then the close */
			KV_INC(c->sh->st.rejected, 1);
			kv_put(&c->out, kv_denied_msg, strlen(kv_denied_msg));
			if (!c->out.nomem)
				kv_send(c);
		} else {
			kv_serve_conn(c, so.max_frame);
		}
		kv_ps_end(c); /* its pusher writes to the stream: stopped first */
		/* half-close and let the client read the last reply (a QUIT's,
		 * a protocol error's) before the socket goes: no reset */
		corio_stream_close(c->st);
	} else {
		corio_close(c->s);
	}
	kv_unwatch(c);
	kv_conn_unregister(c);
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
		c->authed = !kl->sh->auth.set; /* the default user has no password */
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

	if (kv_rdb_load(srv, kl.sh)) { /* the file said why; the server does not start */
		atomic_store(&srv->failed, 1);
		return;
	}
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
	kv_shard_start(kl.sh);
	kv_saver_start(srv);
	atomic_fetch_add(&srv->listening, 1);
	ret = kv_accept_loop(&kl);
	kv_saver_stop(srv);
	if (ret != -ECANCELED) {
		fprintf(stderr, "corio-kv: shard %u: accept: %s\n", corio_shard_id(), strerror(-ret));
		atomic_store(&srv->failed, 1);
	}
	corio_listener_close(kl.l);
	corio_timer_cancel(&kl.sh->tick);
}

/* Set up srv for nshards (before corio_start); 0, -ENOMEM, -E2BIG for a
 * requirepass over KV_PASS_MAX, or -ENOSPC when the command table outgrew
 * its index. */
int kv_server_init(struct kv_server *srv, unsigned nshards)
{
	uint64_t seed = corio_now_ns();
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, &seed, sizeof(seed)) != sizeof(seed))
			seed ^= (uint64_t)getpid() << 32;
		close(fd);
	}
	if (kv_cmdtab_build(&srv->cmds))
		return -ENOSPC;
	if (srv->requirepass && strlen(srv->requirepass) > KV_PASS_MAX)
		return -E2BIG;
	if (kv_persist_init(&srv->persist))
		return -ENOMEM;
	srv->nshards = nshards;
	srv->seed = seed;
	atomic_store(&srv->maxmemory, srv->lim.maxmemory);
	if (!atomic_load(&srv->samples))
		atomic_store(&srv->samples, 5); /* Redis's maxmemory-samples */
	srv->start_ns = corio_now_ns();
	srv->start_unix = kv_unix_ms() / 1000;
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
		if (srv->requirepass)
			kv_auth_set(&srv->sh[i].auth, srv->requirepass, strlen(srv->requirepass));
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
