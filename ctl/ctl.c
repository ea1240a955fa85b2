/* SPDX-License-Identifier: MIT */
/*
 * ctl/ctl.c - where the library is put together: the table of every area's
 * shard part, in the order the loop calls them, handed to core when a
 * runtime starts (corio_start). Core runs whatever parts it is given and
 * names no area itself; this is the one place that names them all.
 */
#include "ctl/internal.h"

#include <stdio.h>

/* The control part: every shard keeps ctl's counters (/metrics may be
 * served on any); shard 0 serves the control socket when the config names
 * a path. Its state is freed in corio_wait (release). */
static int ctl_init(struct corio__shard *s)
{
	int ret = corio__control_init(s);

	if (ret)
		return ret;
	if (s->id == 0 && s->rt->cfg.control_path)
		return corio__control_start(s, s->rt->cfg.control_path);
	return 0;
}

static const struct corio__part ctl_part = {
	.name = "ctl",
	.init = ctl_init,
	.fini = corio__control_fini,
	.release = corio__control_release,
};

_Static_assert(CORIO__PART_NET >= CORIO__PART_FIRST_AREA && CORIO__PART_NET < CORIO__PART_MAX &&
		       CORIO__PART_FS >= CORIO__PART_FIRST_AREA && CORIO__PART_FS < CORIO__PART_MAX &&
		       CORIO__PART_CTL >= CORIO__PART_FIRST_AREA && CORIO__PART_CTL < CORIO__PART_MAX &&
		       CORIO__PART_NET != CORIO__PART_FS && CORIO__PART_NET != CORIO__PART_CTL &&
		       CORIO__PART_FS != CORIO__PART_CTL && CORIO__PART_TLS >= CORIO__PART_FIRST_AREA &&
		       CORIO__PART_TLS < CORIO__PART_MAX && CORIO__PART_TLS != CORIO__PART_NET &&
		       CORIO__PART_TLS != CORIO__PART_FS && CORIO__PART_TLS != CORIO__PART_CTL,
	       "each area above core needs its own slot of s->parts[]");

static const struct corio__part *const parts[CORIO__PART_MAX] = {
	[CORIO__PART_TIMER] = &corio__timer_part,
	[CORIO__PART_MSG] = &corio__msg_part,
	[CORIO__PART_WORK] = &corio__work_part,
	[CORIO__PART_NET] = &corio__net_part,
	[CORIO__PART_FS] = &corio__fs_part,
	[CORIO__PART_CTL] = &ctl_part,
	[CORIO__PART_TLS] = &corio__tls_part,
};

int corio_start(const struct corio_config *cfg, void (*entry)(void *), void *arg,
		struct corio_rt **out)
{
	return corio__rt_start(cfg, parts, entry, arg, out);
}

int corio_run(const struct corio_config *cfg, void (*entry)(void *), void *arg)
{
	struct corio_rt *rt;
	int ret = corio_start(cfg, entry, arg, &rt);

	if (ret) {
		corio__log("corio: %s", corio_last_error());
		return ret;
	}
	return corio_wait(rt);
}

