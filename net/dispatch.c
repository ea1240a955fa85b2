/* SPDX-License-Identifier: MIT */
/* net/dispatch.c - accept model 2: hand accepted sockets to other shards. */
#include "net/net.h"

#include <errno.h>

int corio_accept_dispatch(struct corio_listener *l, unsigned policy,
			  int (*handler)(struct corio_sock *s, void *arg), void *arg)
{
	(void)l;
	(void)policy;
	(void)handler;
	(void)arg;
	return corio__error(-ENOSYS, "corio_accept_dispatch: needs cross-shard messages");
}
