/* SPDX-License-Identifier: MIT */
/*
 * corio/serve.h - serve a TCP address on every shard: one call that
 * listens, accepts, runs a handler in a fiber per connection and drains.
 * Include <corio.h>.
 *
 * What every server otherwise writes by hand (listen on each shard,
 * accept into a group, a fiber per connection, wait for -ESHUTDOWN, let
 * the connections finish, cancel the rest, close), as Go's http.Server
 * with Shutdown does:
 *
 *	static int echo(struct corio_conn *c)
 *	{
 *		char buf[4096];
 *		ssize_t n;
 *
 *		while ((n = corio_recv(c->sock, buf, sizeof buf)) > 0)
 *			if (corio_send(c->sock, buf, (size_t)n) < 0)
 *				break;
 *		return 0;                // corio_serve closes the connection
 *	}
 *
 *	static void entry(void *arg)     // runs on every shard
 *	{
 *		corio_drain_on_signal(CORIO_SIG(SIGTERM), 2000000000ull);
 *		corio_serve("127.0.0.1:8080", echo, NULL, NULL);
 *	}
 *
 * Signals: cfg.signals are blocked by corio_start() in every thread it
 * creates and in the thread that calls it (corio.h), so a program that
 * drains on SIGTERM needs no pthread_sigmask of its own, unless it starts
 * other threads before corio_start().
 */
#ifndef CORIO_SERVE_H
#define CORIO_SERVE_H

#include <corio.h>

#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

struct corio_sock;
struct corio_stream;
struct corio_stream_opts;
struct corio_tls_ctx;

/* One connection, as its handler gets it. Valid until the handler
 * returns; corio_serve closes the connection then (the handler must not). */
struct corio_conn {
	/* The connection's socket. With stream set it is the stream's
	 * transport: use it for addresses, options and corio_sock_bytes
	 * only, and move bytes through the stream. */
	struct corio_sock *sock;
	/* A stream over the connection: the TLS session's (opts.tls; the
	 * handshake is done) or, with CORIO_SERVE_STREAM, the plain socket's
	 * (corio_stream_sock). NULL otherwise. */
	struct corio_stream *stream;
	void *arg;      /* corio_serve's arg */
	unsigned shard; /* the shard it runs on */
	unsigned reserved;
};

/* corio_serve_opts.dispatch */
#define CORIO_SERVE_REUSEPORT  0u /* every calling shard listens (SO_REUSEPORT),
                                     the kernel spreads connections       */
#define CORIO_SERVE_RR         1u /* shard 0 accepts and hands connections
                                     out round robin (corio_accept_dispatch) */
#define CORIO_SERVE_LEAST      2u /* ... to the shard with the fewest        */

/* corio_serve_opts.flags */
#define CORIO_SERVE_STREAM 0x1u /* give plain connections a stream too */
#define CORIO_SERVE_ALL    0x1u

struct corio_serve_opts {
	unsigned backlog;   /* listen backlog; 0: SOMAXCONN                   */
	/* 0: no limit. Else corio_listen_opts.max_conns: a connection
	 * accepted while the shard has this many live stream sockets is
	 * closed at once (net stat conns_refused). Every live stream socket
	 * of the shard counts, outgoing ones (a proxy's upstreams) too. */
	unsigned max_conns;
	/* 0: none. Else the deadline of the TLS handshake, and the time a
	 * connection may move no byte either way (corio_sock_bytes) before
	 * its handler is cancelled: checked every idle_ns / 4, so a silent
	 * connection ends between idle_ns and 1.25 x idle_ns. */
	uint64_t idle_ns;
	/* Once the drain reaches the shard (corio_drain, or its signal): the
	 * handlers get this long to finish, then are cancelled. 0: until the
	 * drain's own deadline, when the runtime cancels every fiber. */
	uint64_t drain_ns;
	unsigned dispatch;  /* CORIO_SERVE_REUSEPORT, _RR or _LEAST           */
	unsigned flags;     /* CORIO_SERVE_*                                  */
	struct corio_tls_ctx *tls; /* serve TLS (a server context), or NULL  */
	const struct corio_stream_opts *stream; /* the streams' options, or NULL */
	/* Optional: called on each shard once it listens (the dispatching
	 * shard alone with _RR / _LEAST), with the bound address (port 0
	 * resolved) and corio_serve's arg. In the calling fiber; must not
	 * block. */
	void (*ready)(const struct sockaddr *addr, socklen_t len, void *arg);
	/* Scheduling classes (corio/sched.h): the class each connection's
	 * fiber runs its handler in, and the class it runs the TLS handshake
	 * in (a handshake storm then takes that class's share of the CPU,
	 * not the requests'). 0: the default class. Taken from reserved[0],
	 * [1]. -EINVAL for a class that does not exist. */
	unsigned sched_class;
	unsigned handshake_class;
	unsigned reserved[2]; /* must be zero */
};

/*
 * Serve host_port (numeric, as corio_tcp_listen_shared takes it: every
 * shard that calls this with the same string listens on one port, port 0
 * included) until the drain: handler(c) runs in a new fiber per
 * connection, on the shard that accepted it (with CORIO_SERVE_RR /
 * _LEAST: on the shard it was handed to; every shard that is to take
 * connections calls corio_serve, shard 0 alone accepts, and a shard that
 * does not call it closes what it is handed). Its return value is ignored.
 * opts may be NULL (the defaults above).
 *
 * Call it from a fiber on each shard that serves (entry runs on every
 * shard: call it there). It returns once this shard's drain is over:
 * corio_drain() (or corio_drain_on_signal's signal) reached the shard,
 * accepting stopped, the handlers ended or, drain_ns later, were cancelled
 * and ended, and the listener is closed: then 0. Handlers see the drain
 * as corio_draining() / corio_drain_event() (end an idle keep-alive at
 * once). If the calling fiber is cancelled (the runtime shuts down) the
 * handlers are cancelled, waited for, and it returns -ECANCELED; if the
 * listener breaks (a fatal accept error) they are let finish as in a
 * drain and that error is returned. Before serving: -EINVAL (bad
 * address, handler NULL, unknown flags or dispatch, reserved not zero,
 * drain_ns or idle_ns with no fiber), -EADDRINUSE, ... with a message, or
 * -EPERM off a fiber. Blocking.
 */
CORIO_API int corio_serve(const char *host_port, int (*handler)(struct corio_conn *c),
			  void *arg, const struct corio_serve_opts *opts);

/* Bytes s has received (handed to the caller) and sent, since it was
 * made; either pointer may be NULL. 0 or -EINVAL. Shard-local, does not
 * block. */
CORIO_API int corio_sock_bytes(const struct corio_sock *s, uint64_t *in, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif
