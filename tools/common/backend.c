/* SPDX-License-Identifier: MIT */
/*
 * tools/common/backend.c - the backend a default runtime picks (backend.h).
 * Asking a running shard is the only way to know: with CORIO_BACKEND unset
 * (auto) corio_start decides from whether ring set-up is refused.
 */
#include "backend.h"

#include <corio.h>

#include <stdint.h>
#include <stdio.h>

static const char *name(uint64_t b)
{
	return b == 0 ? "io_uring" : b == 1 ? "epoll" : "?";
}

const char *tool_backend_of(struct corio_rt *rt)
{
	struct corio_stats st;

	return corio_stats_get(rt, 0, &st) == 0 ? name(st.backend) : "?";
}

static void probe(void *arg)
{
	struct corio_stats st;

	if (corio_stats_get(NULL, 0, &st) == 0)
		*(uint64_t *)arg = st.backend;
}

const char *tool_backend(void)
{
	static char why[160];
	struct corio_config cfg;
	uint64_t b = UINT64_MAX;
	int ret;

	corio_config_init(&cfg);
	cfg.shards = 1;
	ret = corio_run(&cfg, probe, &b);
	if (ret == 0 && b <= 1)
		return name(b);
	snprintf(why, sizeof(why), "none (%s)", ret ? corio_last_error() : "no stats");
	return why;
}
