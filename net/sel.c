/* SPDX-License-Identifier: MIT */
/*
 * net/sel.c - a socket receive as a corio_select() item (core/select.c has
 * the machinery).
 *
 * The item waits on the socket's receive stream, the one corio_recv_buf()
 * uses (net/recv.c): arming it queues the socket's multishot receive on the
 * shard's provided-buffer ring if it is not armed yet, and puts the
 * select's stand-in on s->rwq, which the stream's CQE handler wakes. The
 * kernel writes only into the ring's buffers, never into the caller's: the
 * item's poll copies queued bytes into it->buf. When the item loses, its
 * receive stays armed as the socket's, and what arrives is queued there for
 * the next reader; corio_close() cancels it and waits for its final CQE.
 */
#include "net/internal.h"

#include <errno.h>

static bool recv_poll(struct corio_sel *it)
{
	struct corio_sock *s = it->obj;

	if (s->dead || !corio__net_owner(s->net)) {
		it->res = corio__sock_not_mine("corio_sel_recv", s);
		return true;
	}
	if (s->type != SOCK_STREAM) {
		it->res = corio__error(-EINVAL, "corio_sel_recv: not a stream socket");
		return true;
	}
	if (s->closing) {
		it->res = -EBADF; /* corio_close() woke us; s goes once we return */
		return true;
	}
	if (!s->qhead && !s->has_term)
		return false;
	it->res = corio__sock_take(s, it->buf, it->len);
	return true;
}

static int recv_arm(struct corio_sel *it, struct corio_fiber *p)
{
	struct corio_sock *s = it->obj;
	int ret;

	if (s->closing)
		return -EBADF;
	if (s->rwq.head)
		return -EBUSY; /* one receiving fiber per socket */
	if (s->r.state == NET_IDLE && !s->starved) {
		ret = corio__sock_arm(s);
		if (ret)
			return corio__net_err(s->net, ret);
	}
	corio__wq_push(&s->rwq, p);
	s->readers++; /* a closer waits for the disarm; the poll after it still sees s */
	it->_aux = 1; /* counted: the disarm uncounts it */
	return 0;
}

/* Also called for an item whose arm failed (select disarms it too): only
 * an item the arm counted leaves the socket's readers. */
static void recv_disarm(struct corio_sel *it, struct corio_fiber *p)
{
	corio__wq_del(p);
	if (it->_aux) {
		it->_aux = 0;
		corio__sock_reader_leave(it->obj);
	}
}

static const struct corio__sel_ops recv_sel_ops = {
	.poll = recv_poll,
	.arm = recv_arm,
	.disarm = recv_disarm,
};

void corio_sel_recv(struct corio_sel *it, struct corio_sock *s, void *buf, size_t len)
{
	corio__sel_fill(it, s && buf && len ? &recv_sel_ops : NULL, s, buf, len, 0);
}
