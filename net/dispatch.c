/* SPDX-License-Identifier: MIT */
/*
 * net/dispatch.c - accept model 2: one shard accepts, every connection is
 * handed to a shard (this one included) where the handler runs in a new
 * fiber.
 *
 * The fd travels in a small heap record through corio_spawn_on_ex() (one
 * message-ring slot; the target wraps the fd in a socket of its own). If
 * the handler never runs (the target stops first, or has no memory or
 * stack for the fiber), the message's release hook closes the fd and frees
 * the record, so nothing leaks at shutdown. The
 * alternative, IORING_OP_MSG_RING with IORING_MSG_SEND_FD, passes a
 * registered (fixed) file between rings; corio does not use registered
 * files for sockets (see the README's net section for why), so a plain fd
 * number is all there is to pass.
 *
 * Least-loaded reads each shard's conns_live counter. Those lag behind the
 * hand-offs still in flight, so each target also carries a bias: the
 * connections sent to it since its counter last changed.
 */
#include "net/internal.h"
#include "corio/msg.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

struct handoff {
	int fd;
	int (*handler)(struct corio_sock *s, void *arg);
	void *arg;
};

/* The handler will never run: close the connection, free the record. */
static void handoff_release(void *p)
{
	struct handoff *h = p;

	close(h->fd);
	free(h);
}

static int adopt(void *p)
{
	struct handoff h = *(struct handoff *)p;
	struct corio_sock *s;
	int ret;

	free(p);
	ret = corio_sock_from_fd(h.fd, &s);
	if (ret) {
		close(h.fd);
		return ret;
	}
	CORIO__STAT_ADD(s->net->stats.adopted, 1);
	return h.handler(s, h.arg);
}

#define MAX_TRACK 256 /* shards tracked by least-loaded; beyond: round robin */

int corio_accept_dispatch(struct corio_listener *l, unsigned policy,
			  int (*handler)(struct corio_sock *s, void *arg), void *arg)
{
	struct corio__net *n = l ? corio__net_owner(l->net) : NULL;
	unsigned nshards = corio_shard_count(), rr = corio_shard_id();
	uint64_t last_live[MAX_TRACK] = { 0 }, bias[MAX_TRACK] = { 0 };

	if (!n)
		return corio__net_not_mine("corio_accept_dispatch", l, "listener");
	if (!handler || policy > CORIO_DISPATCH_LEAST_LOADED)
		return corio__error(-EINVAL, "corio_accept_dispatch: %s",
				    handler ? "unknown policy" : "no handler");
	if (nshards > MAX_TRACK)
		policy = CORIO_DISPATCH_ROUND_ROBIN;
	for (;;) {
		struct handoff *h;
		unsigned target;
		int fd = corio__accept_fd(l), ret;

		if (fd < 0)
			return fd;
		if (policy == CORIO_DISPATCH_LEAST_LOADED) {
			uint64_t best = UINT64_MAX;

			target = 0;
			for (unsigned k = 0; k < nshards; k++) {
				unsigned i = (rr + k) % nshards; /* ties: rotate */
				struct corio_net_stats st;

				corio_net_stats_get(NULL, i, &st);
				if (st.conns_live != last_live[i]) {
					last_live[i] = st.conns_live;
					bias[i] = 0;
				}
				if (st.conns_live + bias[i] < best) {
					best = st.conns_live + bias[i];
					target = i;
				}
			}
			bias[target]++;
			rr++;
		} else {
			target = rr++ % nshards;
		}
		h = malloc(sizeof(*h));
		if (!h) {
			close(fd);
			corio__net_err(n, -ENOMEM);
			continue;
		}
		h->fd = fd;
		h->handler = handler;
		h->arg = arg;
		ret = corio_spawn_on_ex(target, adopt, h, handoff_release, CORIO_SPAWN_ON_WAIT);
		if (ret) {
			/* not queued: h and fd are still ours */
			handoff_release(h);
			corio__net_err(n, ret);
			if (ret == -ECANCELED || ret == -ETIMEDOUT)
				return ret;
			continue;
		}
		CORIO__STAT_ADD(n->stats.dispatched, 1);
	}
}
