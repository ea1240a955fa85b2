/* SPDX-License-Identifier: MIT */
/*
 * core/census.c - the leak census run by corio_wait().
 *
 * When every shard thread has ended, each shard must have given back what
 * it took while it ran: every fiber ended, every stack unmapped (the cache
 * is emptied at teardown), every op's final CQE reaped (ops_inflight), every
 * link slot freed by its LINK_TIMEOUT's CQE, and whatever each part pools
 * (provided buffers, call records) back in its pool; the part's census
 * hook says. A shortfall is a corio bug (or memory the application still
 * holds: a corio_buf never released), and a long-running server would run
 * out of it: corio_wait() returns -EBUSY and corio_last_error() names the
 * shard and the leak, so every test that checks corio_run()'s result
 * checks this too. Runs on the waiting thread; the shards' state is
 * stable (their threads were joined) and not yet released.
 */
#include "core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int corio__census(struct corio_rt *rt)
{
	for (unsigned i = 0; i < rt->nshards; i++) {
		struct corio__shard *s = rt->shards[i];
		char what[256], part[160];
		size_t n = 0;

		if (!s)
			continue;
		what[0] = '\0';
#define LEAK(cond, ...)                                                                     \
	do {                                                                                  \
		if ((cond) && n < sizeof(what))                                               \
			n += (size_t)snprintf(what + n, sizeof(what) - n, __VA_ARGS__);      \
	} while (0)
		LEAK(s->stats.fibers_live, " %llu fibers alive;",
		     (unsigned long long)s->stats.fibers_live);
		LEAK(s->stacks_mapped, " %llu fiber stacks still mapped;",
		     (unsigned long long)s->stacks_mapped);
		LEAK(s->ops_inflight, " %llu ops without their final CQE;",
		     (unsigned long long)s->ops_inflight);
		LEAK(s->ring.links_out, " %llu link slots not freed;",
		     (unsigned long long)s->ring.links_out);
		for (unsigned k = 0; k < CORIO__PART_MAX; k++) {
			const struct corio__part *p = rt->parts[k];

			part[0] = '\0';
			if (p && p->census && s->parts[k] && p->census(s, part, sizeof(part)))
				LEAK(1, " %s: %s;", p->name, part);
		}
#undef LEAK
		if (n)
			return corio__error(-EBUSY, "corio_wait: shard %u leaked:%s", i, what);
	}
	return 0;
}
