/* SPDX-License-Identifier: MIT */
/*
 * core/parts.c - the per-area parts of a shard. Each area (timers, messages,
 * net, fs, stats) that keeps per-shard state or per-turn work registers its
 * hooks here; the loop calls them in this order.
 */
#include "core/internal.h"

extern const struct corio__part corio__timer_part; /* timer/timer.c */
extern const struct corio__part corio__msg_part; /* core/msg.c */
extern const struct corio__part corio__fs_part; /* fs/part.c */
extern const struct corio__part corio__net_part; /* net/part.c */
extern const struct corio__part corio__stats_part_ops; /* core/stats.c */

const struct corio__part *const corio__parts[CORIO__PART_MAX] = {
	[CORIO__PART_TIMER] = &corio__timer_part,
	[CORIO__PART_MSG] = &corio__msg_part,
	[CORIO__PART_NET] = &corio__net_part,
	[CORIO__PART_FS] = &corio__fs_part,
	[CORIO__PART_STATS] = &corio__stats_part_ops,
};
