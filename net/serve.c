/* SPDX-License-Identifier: MIT */
/*
 * net/serve.c - corio_serve: listen, accept, a fiber per connection, drain
 * (issue 35, part 2).
 *
 * Each calling shard keeps a record on its fiber's stack: the listener
 * (unless another shard accepts for it), a fiber group holding one member
 * per connection, and the options. Accepting ends with -ESHUTDOWN when the
 * drain reaches the shard; then the group is waited for under a drain_ns
 * scope, whose end cancels the members (corio_group_wait's contract), and
 * corio_group_close waits for the last of them, uninterruptibly, so no
 * handler outlives the record. A cancel of the calling fiber (the runtime
 * stops) does the same at once.
 *
 * Accept dispatch (CORIO_SERVE_RR / _LEAST): shard 0 runs
 * corio_accept_dispatch, whose handler fiber on the target shard finds
 * that shard's record (a per-thread list, matched by host_port, handler
 * and arg) and hands the socket to a member of its group: the record, not
 * the dispatch fiber, owns the connection, so the drain covers it.
 *
 * TLS: net may not call tls (tls sits above it). tls/ctx.c sets
 * corio__serve_tls_accept when it makes the first context, so a program
 * that passes a context always has it, and one without TLS links no
 * OpenSSL for corio_serve.
 *
 * Idle deadline: a timer per connection reads the socket's byte counters
 * (corio_sock_bytes) every idle_ns / 4 and cancels the handler once they
 * have not moved for idle_ns. The timer is a callback on the loop, not a
 * fiber; it is cancelled before the connection's fiber ends.
 */
#include "net/internal.h"

#include <corio/select.h>
#include <corio/serve.h>
#include <corio/stream.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

_Atomic(corio__serve_tls_fn) corio__serve_tls_accept;

struct serve {
	struct serve *next;          /* this thread's records (dispatch finds them) */
	const char *host_port;
	int (*handler)(struct corio_conn *c);
	void *arg;
	struct corio_serve_opts o;
	struct corio_group conns;
	struct conn_start *cs_free;  /* start records the members handed back */
	bool closing;                /* no new member: the drain is over */
};

static __thread struct serve *serve_list;

struct conn {
	struct serve *sv;
	struct corio_sock *sock;
	struct corio_fiber *self;
	struct corio_timer idle;
	uint64_t last_bytes, last_move_ns;
};

static uint64_t sock_moved(const struct corio_sock *s)
{
	return s->rx + s->tx;
}

/* The idle watchdog: cancel the handler when no byte moved for idle_ns. */
static void idle_tick(struct corio_timer *t, void *arg, int res)
{
	struct conn *c = arg;
	uint64_t now = corio_now_ns(), b = sock_moved(c->sock);

	(void)t;
	if (res < 0)
		return; /* cancelled */
	if (b != c->last_bytes) {
		c->last_bytes = b;
		c->last_move_ns = now;
	} else if (now - c->last_move_ns >= c->sv->o.idle_ns) {
		corio_timer_cancel(&c->idle);
		corio_cancel(c->self);
	}
}

/* What a member starts with: its record and socket (not a stack slot: the
 * accept path cannot hand one to a fiber that runs later). They come from
 * the record's free list, where each member puts its own back once it has
 * read it: no malloc and free per connection (DESIGN.md, invariant 4).
 * The list holds at most as many as were ever started at once, and
 * corio_serve frees it when its group is empty. */
struct conn_start {
	struct serve *sv;
	struct corio_sock *sock;
	struct conn_start *next;     /* on sv->cs_free */
};

static void conn_start_put(struct conn_start *cs)
{
	struct serve *sv = cs->sv;

	cs->next = sv->cs_free;
	sv->cs_free = cs;
}

static void conn_release(void *arg)
{
	struct conn_start *cs = arg;

	corio_close(cs->sock); /* the member never ran: the runtime stops */
	conn_start_put(cs);
}

static int conn_main(void *arg)
{
	struct conn_start *cs = arg;
	struct serve *sv = cs->sv;
	struct corio_sock *s = cs->sock;
	struct corio_conn cc = { .sock = s, .arg = sv->arg, .shard = corio_shard_id() };
	struct conn c = { .sv = sv, .sock = s, .self = corio_self() };
	uint64_t tick = sv->o.idle_ns / 4 ? sv->o.idle_ns / 4 : 1;
	struct corio_deadline d;
	bool idle = false;
	int ret = 0;

	conn_start_put(cs);
	if (sv->o.idle_ns) {
		c.last_move_ns = corio_now_ns();
		corio_timer_init(&c.idle, idle_tick, &c);
		idle = !corio_timer_arm_in(&c.idle, tick, tick);
	}
	if (sv->o.tls) {
		corio__serve_tls_fn tls = atomic_load(&corio__serve_tls_accept);

		if (sv->o.handshake_class != sv->o.sched_class)
			corio_class_switch(sv->o.handshake_class); /* checked by corio_serve */
		if (sv->o.idle_ns)
			corio_timeout_push(&d, sv->o.idle_ns); /* the handshake */
		ret = tls ? tls(sv->o.tls, s, sv->o.stream, &cc.stream) : -EINVAL;
		if (sv->o.idle_ns)
			corio_deadline_pop(&d);
		if (sv->o.handshake_class != sv->o.sched_class)
			corio_class_switch(sv->o.sched_class);
	} else if (sv->o.flags & CORIO_SERVE_STREAM) {
		ret = corio_stream_sock(s, sv->o.stream, &cc.stream);
	}
	if (ret < 0) { /* a failed handshake ends this connection alone */
		corio_close(s);
	} else {
		sv->handler(&cc);
		if (cc.stream)
			corio_stream_close(cc.stream); /* flush, half-close, drain, close */
		else
			corio_close(s);
	}
	if (idle)
		corio_timer_cancel(&c.idle);
	return 0;
}

/* Give s to a new member of sv's group; on failure s is closed. */
static void conn_spawn(struct serve *sv, struct corio_sock *s)
{
	struct corio_spawn_opts o = { .name = "corio-serve-conn", .release = conn_release,
				      .sched_class = sv->o.sched_class };
	struct conn_start *cs;

	if (sv->closing || (!(cs = sv->cs_free) && !(cs = malloc(sizeof(*cs))))) {
		corio_close(s);
		return;
	}
	if (cs == sv->cs_free)
		sv->cs_free = cs->next;
	cs->sv = sv;
	cs->sock = s;
	if (corio_group_spawn(&sv->conns, conn_main, cs, &o, NULL) < 0) {
		conn_start_put(cs);
		corio_close(s);
	}
}

/* Dispatch's handler, in a fiber on the target shard: the connection goes
 * to this shard's matching record, or is closed (no corio_serve here). */
static int dispatched(struct corio_sock *s, void *arg)
{
	struct serve *sv;

	/* arg is the handler (a code address outlives every record; shard
	 * 0's record may be gone by the time a hand-off arrives) */
	for (sv = serve_list; sv; sv = sv->next)
		if ((void *)sv->handler == arg && !sv->closing)
			break;
	if (sv)
		conn_spawn(sv, s);
	else
		corio_close(s);
	return 0;
}

static int serve_check(const char *host_port, int (*handler)(struct corio_conn *c),
		       const struct corio_serve_opts *o)
{
	if (!host_port || !handler)
		return corio__error(-EINVAL, "corio_serve: %s is NULL",
				    host_port ? "handler" : "host_port");
	if (o->flags & ~CORIO_SERVE_ALL)
		return corio__error(-EINVAL, "corio_serve: unknown flags 0x%x", o->flags);
	if (o->dispatch > CORIO_SERVE_LEAST)
		return corio__error(-EINVAL, "corio_serve: unknown dispatch %u", o->dispatch);
	for (unsigned i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return corio__error(-EINVAL, "corio_serve: reserved[%u] is not zero", i);
	/* a class this shard can run (any the runtime has: corio/sched.h) */
	for (unsigned i = 0; corio__shard() && i < 2; i++) { /* off a shard: -EPERM later */
		unsigned c = i ? o->handshake_class : o->sched_class;

		if (c && corio__class_use(corio__shard(), c, "corio_serve") < 0)
			return -EINVAL;
	}
	return 0;
}

int corio_serve(const char *host_port, int (*handler)(struct corio_conn *c), void *arg,
		const struct corio_serve_opts *opts)
{
	static const struct corio_serve_opts defaults;
	struct serve sv = { .host_port = host_port, .handler = handler, .arg = arg,
			    .o = opts ? *opts : defaults };
	struct corio_listen_opts lo = { .backlog = sv.o.backlog, .max_conns = sv.o.max_conns };
	struct corio_listener *l = NULL;
	struct corio_deadline d;
	int ret = corio__may_block("corio_serve");

	if (ret)
		return ret;
	if ((ret = serve_check(host_port, handler, &sv.o)))
		return ret;
	/* with dispatch, shard 0 alone listens; the others take what it hands them */
	if (sv.o.dispatch == CORIO_SERVE_REUSEPORT || corio_shard_id() == 0) {
		struct sockaddr_storage ss;
		socklen_t len;

		ret = corio_tcp_listen_shared(host_port, &lo, &l);
		if (ret)
			return ret;
		if (sv.o.ready && !corio_listener_addr(l, &ss, &len))
			sv.o.ready((struct sockaddr *)&ss, len, arg);
	}
	corio_group_init(&sv.conns, 0);
	sv.next = serve_list;
	serve_list = &sv;
	if (!l) /* a shard dispatched to: wait for the drain */
		ret = corio_event_wait(corio_drain_event());
	else if (sv.o.dispatch == CORIO_SERVE_REUSEPORT)
		for (;;) {
			struct corio_sock *s;

			ret = corio_accept(l, &s);
			if (ret)
				break;
			conn_spawn(&sv, s);
		}
	else
		ret = corio_accept_dispatch(l, sv.o.dispatch == CORIO_SERVE_RR
						       ? CORIO_DISPATCH_ROUND_ROBIN
						       : CORIO_DISPATCH_LEAST_LOADED,
					    dispatched, (void *)handler);
	if (ret == -ESHUTDOWN)
		ret = 0; /* the drain: accepting is over */
	if (l)
		corio_listener_close(l);
	if (ret != -ECANCELED) {
		/* the handlers finish, within drain_ns */
		if (sv.o.drain_ns)
			corio_timeout_push(&d, sv.o.drain_ns);
		corio_group_wait(&sv.conns); /* its deadline cancels the rest */
		if (sv.o.drain_ns)
			corio_deadline_pop(&d);
	}
	sv.closing = true;
	corio_group_close(&sv.conns); /* whatever is left, cancelled; uninterruptible */
	while (sv.cs_free) { /* no member is left to hand one back */
		struct conn_start *cs = sv.cs_free;

		sv.cs_free = cs->next;
		free(cs);
	}
	for (struct serve **pp = &serve_list; *pp; pp = &(*pp)->next)
		if (*pp == &sv) {
			*pp = sv.next;
			break;
		}
	return ret;
}

int corio_sock_bytes(const struct corio_sock *s, uint64_t *in, uint64_t *out)
{
	if (!s || s->dead)
		return corio__error(-EINVAL, "corio_sock_bytes: %s",
				    s ? "the socket was closed (a stale handle)" : "s is NULL");
	if (in)
		*in = s->rx;
	if (out)
		*out = s->tx;
	return 0;
}
