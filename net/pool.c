/* SPDX-License-Identifier: MIT */
/*
 * net/pool.c - outgoing connection pools (issue 35, part 5).
 *
 * A pool is a list of keys ("host:port" string and TLS context), each
 * with a stack of idle connections (newest on top: the one most likely
 * still warm and open), a count of its connections (idle and lent) and an
 * event that a get waiting for max_total waits on: every put and close
 * sets it, and a waiter looks again (cooperative scheduling on one shard:
 * nothing runs between its look and its wait, so no wake-up is lost).
 *
 * Liveness before reuse: a connection that sat idle may have been closed
 * by the peer (a server's keep-alive timeout) or reset. A poll(2) that
 * does not wait tells: POLLRDHUP / POLLHUP / POLLERR, or, on a plain
 * connection, any byte (a reply nobody asked for is as bad: the protocol
 * is out of step). corio's own view comes first: a receive armed on the
 * socket (it was read with corio_recv_buf, as streams do) may already
 * hold the end of stream or bytes. A TLS connection may hold bytes that
 * are still fine (TLS 1.3 session tickets arrive after the handshake), so
 * there only the hang-up counts; a peer that sent close_notify and keeps
 * TCP open is found by the request. Nothing here needs a fiber of its own.
 */
#include "net/internal.h"

#include <corio/pool.h>
#include <corio/stream.h>

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAX_IDLE 8u
#define POOL_IDLE_NS  (60ull * 1000000000ull)

_Atomic(corio__pool_tls_fn) corio__pool_tls_connect;

struct pool_key {
	struct pool_key *next;
	struct corio_pool *p;
	struct corio_tls_ctx *tls;
	struct corio_pool_conn *idle; /* newest first */
	unsigned nidle, total;        /* idle; idle + lent */
	struct corio_event ev;        /* a put or a close: look again */
	char hp[];
};

struct corio_pool {
	struct corio__net *net;
	struct corio_pool_opts o;
	struct pool_key *keys;
	struct corio_pool_stats st;
};

static struct corio_pool *pool_mine(const struct corio_pool *p)
{
	return p && corio__net_owner(p->net) ? (struct corio_pool *)p : NULL;
}

int corio_pool_new(const struct corio_pool_opts *opts, struct corio_pool **out)
{
	struct corio__net *n = corio__net();
	struct corio_pool *p;

	if (!out)
		return corio__error(-EINVAL, "corio_pool_new: out is NULL");
	*out = NULL;
	if (!n)
		return corio__misuse(-EPERM, "corio_pool_new", "not called on a shard");
	if (opts && opts->flags)
		return corio__error(-EINVAL, "corio_pool_new: unknown flags 0x%x", opts->flags);
	for (unsigned i = 0; opts && i < 3; i++)
		if (opts->reserved[i])
			return corio__error(-EINVAL, "corio_pool_new: reserved[%u] is not zero", i);
	if (opts && opts->max_total && opts->max_idle > opts->max_total)
		return corio__error(-EINVAL, "corio_pool_new: max_idle %u is over max_total %u",
				    opts->max_idle, opts->max_total);
	p = calloc(1, sizeof(*p));
	if (!p)
		return corio__error(-ENOMEM, "corio_pool_new: no memory");
	p->net = n;
	if (opts)
		p->o = *opts;
	if (!p->o.max_idle)
		p->o.max_idle = p->o.max_total && p->o.max_total < POOL_MAX_IDLE ? p->o.max_total
										  : POOL_MAX_IDLE;
	if (!p->o.idle_ns)
		p->o.idle_ns = POOL_IDLE_NS;
	*out = p;
	return 0;
}

static struct pool_key *key_get(struct corio_pool *p, const char *hp, struct corio_tls_ctx *tls)
{
	struct pool_key *k;
	size_t len;

	for (k = p->keys; k; k = k->next)
		if (k->tls == tls && !strcmp(k->hp, hp))
			return k;
	len = strlen(hp) + 1;
	k = calloc(1, sizeof(*k) + len);
	if (!k)
		return NULL;
	k->p = p;
	k->tls = tls;
	corio_event_init(&k->ev);
	memcpy(k->hp, hp, len);
	k->next = p->keys;
	p->keys = k;
	return k;
}

/* Close c for good (it is off the idle stack or was lent). */
static void conn_close(struct pool_key *k, struct corio_pool_conn *c)
{
	if (c->stream)
		corio_stream_abort(c->stream);
	else
		corio_close(c->sock);
	free(c);
	k->total--;
	corio_event_set(&k->ev);
}

/* Still open, and nothing came that nobody asked for? */
static bool conn_alive(const struct corio_pool_conn *c)
{
	const struct corio_sock *s = c->sock;
	struct pollfd pfd = { .fd = s->fd, .events = POLLIN | POLLRDHUP };
	bool tls = c->stream != NULL;

	if (s->has_term || s->hup || s->serr)
		return false;
	if (!tls && s->qhead)
		return false;
	if (poll(&pfd, 1, 0) < 0)
		return false;
	if (pfd.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))
		return false;
	return tls || !(pfd.revents & POLLIN);
}

/* The host of "host:port" for TLS's name check and SNI. */
static void host_of(const char *hp, char *out, size_t size)
{
	const char *colon = strrchr(hp, ':');
	size_t len = colon ? (size_t)(colon - hp) : strlen(hp);

	if (len >= 2 && hp[0] == '[' && hp[len - 1] == ']') {
		hp++;
		len -= 2;
	}
	if (len >= size)
		len = size - 1;
	memcpy(out, hp, len);
	out[len] = 0;
}

static int conn_new(struct pool_key *k, struct corio_pool_conn **out)
{
	struct corio_pool *p = k->p;
	struct corio_pool_conn *c = calloc(1, sizeof(*c));
	struct corio_deadline d;
	bool scope = false;
	int ret;

	if (!c)
		return corio__error(-ENOMEM, "corio_pool_get: no memory");
	if (p->o.connect_ns)
		scope = !corio_timeout_push(&d, p->o.connect_ns);
	ret = corio_tcp_connect(k->hp, &c->sock);
	if (!ret && k->tls) {
		corio__pool_tls_fn tls = atomic_load(&corio__pool_tls_connect);
		char host[256];

		host_of(k->hp, host, sizeof(host));
		ret = tls ? tls(k->tls, c->sock, host, NULL, &c->stream) : -EINVAL;
		if (ret)
			corio_close(c->sock);
	}
	if (scope)
		corio_deadline_pop(&d);
	if (ret) {
		free(c);
		return ret;
	}
	c->_key = k;
	p->st.connects++;
	*out = c;
	return 0;
}

int corio_pool_get(struct corio_pool *p, const char *host_port, struct corio_tls_ctx *tls,
		   struct corio_pool_conn **out)
{
	struct pool_key *k;
	bool waited = false;
	int ret;

	if (!out)
		return corio__error(-EINVAL, "corio_pool_get: out is NULL");
	*out = NULL;
	if (!pool_mine(p))
		return p ? corio__misuse(-EPERM, "corio_pool_get", "the pool belongs to another "
					 "shard, or the caller is not on a shard")
			 : corio__error(-EINVAL, "corio_pool_get: p is NULL");
	if (!host_port)
		return corio__error(-EINVAL, "corio_pool_get: host_port is NULL");
	if ((ret = corio__may_block("corio_pool_get")))
		return ret;
	if (!(k = key_get(p, host_port, tls)))
		return corio__error(-ENOMEM, "corio_pool_get: no memory");
	for (;;) {
		uint64_t now = corio_now_ns();

		while (k->idle) { /* newest first */
			struct corio_pool_conn *c = k->idle;

			k->idle = c->_next;
			k->nidle--;
			p->st.idle--;
			if (now - c->_idle_since > p->o.idle_ns) {
				p->st.expired++;
			} else if (!conn_alive(c)) {
				p->st.dead++;
			} else {
				c->_next = NULL;
				p->st.hits++;
				p->st.in_use++;
				*out = c;
				return 0;
			}
			conn_close(k, c);
		}
		if (!p->o.max_total || k->total < p->o.max_total)
			break;
		if (!waited) {
			p->st.waits++;
			waited = true;
		}
		corio_event_reset(&k->ev);
		if ((ret = corio_event_wait(&k->ev)))
			return ret;
	}
	k->total++; /* held while it connects: a waiter does not overshoot */
	ret = conn_new(k, out);
	if (ret) {
		k->total--;
		corio_event_set(&k->ev);
		return ret;
	}
	p->st.in_use++;
	return 0;
}

void corio_pool_put(struct corio_pool_conn *c, int broken)
{
	struct pool_key *k = c ? c->_key : NULL;
	struct corio_pool *p = k ? pool_mine(k->p) : NULL;
	uint64_t now;

	if (!p) {
		if (c)
			corio__misuse(-EPERM, "corio_pool_put", "the connection's pool belongs to "
				      "another shard, or the caller is not on a shard");
		return;
	}
	p->st.in_use--;
	if (broken) {
		p->st.broken++;
		conn_close(k, c);
		return;
	}
	/* the oldest idle ones past idle_ns go first: they are at the bottom */
	now = corio_now_ns();
	for (struct corio_pool_conn **pp = &k->idle; *pp;) {
		struct corio_pool_conn *o = *pp;

		if (now - o->_idle_since > p->o.idle_ns) {
			*pp = o->_next;
			k->nidle--;
			p->st.idle--;
			p->st.expired++;
			conn_close(k, o);
		} else {
			pp = &o->_next;
		}
	}
	if (k->nidle >= p->o.max_idle) {
		p->st.overflow++;
		conn_close(k, c);
		return;
	}
	c->_idle_since = now;
	c->_next = k->idle;
	k->idle = c;
	k->nidle++;
	p->st.idle++;
	corio_event_set(&k->ev);
}

int corio_pool_free(struct corio_pool *p)
{
	struct pool_key *k;

	if (!pool_mine(p))
		return p ? corio__misuse(-EPERM, "corio_pool_free", "the pool belongs to another "
					 "shard, or the caller is not on a shard")
			 : corio__error(-EINVAL, "corio_pool_free: p is NULL");
	if (p->st.in_use)
		return corio__error(-EBUSY, "corio_pool_free: %llu connections are still lent",
				    (unsigned long long)p->st.in_use);
	while ((k = p->keys)) {
		p->keys = k->next;
		while (k->idle) {
			struct corio_pool_conn *c = k->idle;

			k->idle = c->_next;
			conn_close(k, c);
		}
		free(k);
	}
	free(p);
	return 0;
}

int corio_pool_stats_get(const struct corio_pool *p, struct corio_pool_stats *out)
{
	if (!p || !out)
		return corio__error(-EINVAL, "corio_pool_stats_get: %s is NULL", p ? "out" : "p");
	if (!pool_mine(p))
		return corio__misuse(-EPERM, "corio_pool_stats_get", "the pool belongs to another "
				     "shard, or the caller is not on a shard");
	*out = p->st;
	return 0;
}
