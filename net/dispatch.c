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
 * files for sockets (see docs/NET.md for why), so a plain fd
 * number is all there is to pass.
 *
 * Least-loaded picks the shard holding the fewest connections handed to it
 * and not yet closed: its conns_live plus the hand-offs still in flight to
 * it. In flight is counted, not guessed: the dispatching shard counts what
 * it handed to shard i (net->handed_to[i]), shard i counts what it took
 * from the dispatching one (net->taken_from[from]: adopted, or released
 * because the handler will never run), and the difference has not arrived
 * yet. (It used to be inferred: a hand-off stayed "in flight" until the
 * target's live count looked different at a later accept, and a short
 * connection opens and closes between two accepts, so that target's count
 * only grew and it starved.) A target counts a connection taken once it is
 * live, so on the target's own thread it is never in neither count; another
 * shard's counters are read relaxed and may lag by a connection or so.
 */
#include "net/internal.h"
#include "corio/msg.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

struct handoff {
	int fd;
	unsigned from; /* the dispatching shard, told when the hand-off is taken */
	struct corio__qcaps cap; /* the listener's queue caps */
	int (*handler)(struct corio_sock *s, void *arg);
	void *arg;
};

/* On the target: one hand-off from shard `from` arrived (or never will). */
static void taken(unsigned from)
{
	struct corio__net *n = corio__net();

	if (n && from < CORIO__NET_TRACK)
		CORIO__STAT_ADD(n->taken_from[from], 1);
}

/* The handler will never run: close the connection, free the record. On
 * the target (corio_spawn_on_ex's release hook). */
static void handoff_release(void *p)
{
	struct handoff *h = p;

	close(h->fd);
	taken(h->from);
	free(h);
}

static int adopt(void *p)
{
	struct handoff h = *(struct handoff *)p;
	struct corio_sock *s;
	int ret;

	free(p);
	ret = corio_sock_from_fd(h.fd, &s); /* live from here */
	taken(h.from);
	if (ret) {
		close(h.fd);
		return ret;
	}
	s->cap = h.cap;
	CORIO__STAT_ADD(s->net->stats.adopted, 1);
	return h.handler(s, h.arg);
}

/* The shard with the fewest connections handed to it and not closed; ties
 * go to the first from rr on, so equal shards take turns. */
static unsigned least_loaded(struct corio__net *n, unsigned nshards, unsigned rr)
{
	struct corio__shard *const *shards = n->shard->rt->shards;
	unsigned me = n->shard->id, target = rr % nshards;
	uint64_t best = UINT64_MAX;

	for (unsigned k = 0; k < nshards; k++) {
		unsigned i = (rr + k) % nshards;
		const struct corio__net *t =
			__atomic_load_n(&shards[i]->parts[CORIO__PART_NET], __ATOMIC_ACQUIRE);
		uint64_t load = n->handed_to[i];

		if (t) {
			uint64_t took = __atomic_load_n(&t->taken_from[me], __ATOMIC_RELAXED);

			load = (load > took ? load - took : 0) +
			       __atomic_load_n(&t->stats.conns_live, __ATOMIC_RELAXED);
		}
		if (load < best) {
			best = load;
			target = i;
		}
	}
	return target;
}

int corio_accept_dispatch(struct corio_listener *l, unsigned policy,
			  int (*handler)(struct corio_sock *s, void *arg), void *arg)
{
	struct corio__net *n = l ? corio__net_owner(l->net) : NULL;
	unsigned nshards = corio_shard_count(), rr = corio_shard_id();

	if (!n)
		return corio__net_not_mine("corio_accept_dispatch", l, "listener");
	if (!handler || policy > CORIO_DISPATCH_LEAST_LOADED)
		return corio__error(-EINVAL, "corio_accept_dispatch: %s",
				    handler ? "unknown policy" : "no handler");
	if (nshards > CORIO__NET_TRACK)
		policy = CORIO_DISPATCH_ROUND_ROBIN;
	for (;;) {
		struct handoff *h;
		unsigned target;
		int fd = corio__accept_fd(l), ret;

		if (fd < 0)
			return fd;
		target = policy == CORIO_DISPATCH_LEAST_LOADED ? least_loaded(n, nshards, rr)
							       : rr % nshards;
		rr++;
		h = malloc(sizeof(*h));
		if (!h) {
			close(fd);
			corio__net_err(n, -ENOMEM);
			continue;
		}
		h->fd = fd;
		h->from = corio_shard_id();
		h->cap = l->cap;
		h->handler = handler;
		h->arg = arg;
		/* counted before the post: while it waits for room, another
		 * dispatcher on this shard sees it on its way */
		if (target < CORIO__NET_TRACK)
			n->handed_to[target]++;
		ret = corio_spawn_on_ex(target, adopt, h, handoff_release, CORIO_SPAWN_ON_WAIT);
		if (ret) {
			/* not queued: h and fd are still ours, and nothing went */
			if (target < CORIO__NET_TRACK)
				n->handed_to[target]--;
			close(fd);
			free(h);
			corio__net_err(n, ret);
			if (ret == -ECANCELED || ret == -ETIMEDOUT)
				return ret;
			continue;
		}
		CORIO__STAT_ADD(n->stats.dispatched, 1);
	}
}
