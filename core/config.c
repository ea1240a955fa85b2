/* SPDX-License-Identifier: MIT */
/*
 * core/config.c - the runtime configuration: defaults and validation. Every
 * rejected value gets -EINVAL and a corio_last_error() message naming the
 * field, the value and the allowed range.
 */
#include "core/internal.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

/* ---- config ----------------------------------------------------------------- */

/* backend came out of reserved[]: the struct's size and layout stay put */
_Static_assert(sizeof(enum corio_backend) == sizeof(unsigned), "corio_config.backend");
/* and so did resolve_ttl_ms and slice_us (reserved[0], [1]) */
_Static_assert(sizeof(void *) != 8 || sizeof(struct corio_config) == 128, "corio_config's size is fixed (LP64)");

#if CORIO__ASAN || CORIO__TSAN
#define DEFAULT_STACK (512 * 1024) /* sanitizers grow frames a lot */
#else
#define DEFAULT_STACK (128 * 1024)
#endif

void corio_config_init(struct corio_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->sq_entries = 256;
	cfg->stack_size = DEFAULT_STACK;
	cfg->stack_guard = CORIO__STACK_GUARD_DEFAULT;
	cfg->idle = CORIO_IDLE_BLOCK;
	cfg->spin_us = 50;
	cfg->msg_slots = 4096;
	cfg->stall_ns = 10 * 1000 * 1000;
	cfg->stack_cache = 256;
	cfg->run_budget = 256;
}

static bool pow2(unsigned v)
{
	return v && !(v & (v - 1));
}

/* The pools' and the per-socket queues' sizes (0: each one's default). */
static int check_queues(const struct corio_config *cfg)
{
	if (cfg->work_threads > 1024)
		return corio__error(-EINVAL, "config: work_threads is %u, at most 1024 (0: 4)",
				    cfg->work_threads);
	if (cfg->work_queue > (1u << 24))
		return corio__error(-EINVAL, "config: work_queue is %u, at most 16M (0: 1024)",
				    cfg->work_queue);
	if (cfg->net_recv_queue > 65535)
		return corio__error(-EINVAL, "config: net_recv_queue is %u, at most 65535 (0: 16)",
				    cfg->net_recv_queue);
	if (cfg->net_send_queue > 65535)
		return corio__error(-EINVAL, "config: net_send_queue is %u, at most 65535 (0: 16)",
				    cfg->net_send_queue);
	if (cfg->slice_us && (cfg->slice_us < 10 || cfg->slice_us > 1000000))
		return corio__error(-EINVAL, "config: slice_us is %u, must be 10..1000000 (0: 500)",
				    cfg->slice_us);
	if (cfg->resolve_ttl_ms > 86400000u)
		return corio__error(-EINVAL, "config: resolve_ttl_ms is %u, at most 86400000 "
				    "(a day; 0: 30 s)", cfg->resolve_ttl_ms);
	return 0;
}

int corio_config_check(const struct corio_config *cfg)
{
	cpu_set_t mask;
	int ret;

	for (unsigned i = 0; i < sizeof(cfg->reserved) / sizeof(cfg->reserved[0]); i++)
		if (cfg->reserved[i])
			return corio__error(-EINVAL,
					    "config: reserved[%u] is %u, must be 0 (was the "
					    "config filled by corio_config_init()?)",
					    i, cfg->reserved[i]);
	if (corio__signal_check(cfg->signals))
		return -EINVAL;
	if (cfg->flags & ~CORIO_F_ALL)
		return corio__error(-EINVAL, "config: unknown flags 0x%x", cfg->flags & ~CORIO_F_ALL);
	if (cfg->shards > 1024)
		return corio__error(-EINVAL, "config: shards is %u, the maximum is 1024", cfg->shards);
	if (cfg->cpus && !cfg->shards)
		return corio__error(-EINVAL, "config: cpus given but shards is 0; say how many");
	if (!pow2(cfg->sq_entries) || cfg->sq_entries > 32768)
		return corio__error(-EINVAL,
				    "config: sq_entries is %u, must be a power of two in 1..32768",
				    cfg->sq_entries);
	if (cfg->cq_entries &&
	    (!pow2(cfg->cq_entries) || cfg->cq_entries < cfg->sq_entries || cfg->cq_entries > 65536))
		return corio__error(-EINVAL,
				    "config: cq_entries is %u, must be 0 or a power of two in "
				    "sq_entries (%u)..65536",
				    cfg->cq_entries, cfg->sq_entries);
	if (cfg->stack_size < CORIO__STACK_MIN || cfg->stack_size > CORIO__STACK_MAX)
		return corio__error(-EINVAL, "config: stack_size is %zu, must be 16 KiB..1 GiB",
				    cfg->stack_size);
	if (cfg->stack_guard % (unsigned)sysconf(_SC_PAGESIZE) ||
	    cfg->stack_guard > CORIO__STACK_GUARD_MAX)
		return corio__error(-EINVAL,
				    "config: stack_guard is %u, must be a multiple of the page "
				    "size (%ld) up to 16 MiB, or 0 for the default",
				    cfg->stack_guard, sysconf(_SC_PAGESIZE));
	if ((unsigned)cfg->backend > CORIO_BACKEND_EPOLL)
		return corio__error(-EINVAL, "config: backend is %d, not a corio_backend value",
				    (int)cfg->backend);
	if ((unsigned)cfg->idle > CORIO_IDLE_POLL)
		return corio__error(-EINVAL, "config: idle is %d, not a corio_idle value",
				    (int)cfg->idle);
	if (cfg->spin_us > 1000000)
		return corio__error(-EINVAL, "config: spin_us is %u, at most 1000000", cfg->spin_us);
	if (!pow2(cfg->msg_slots) || cfg->msg_slots < 2 || cfg->msg_slots > (1u << 24))
		return corio__error(-EINVAL,
				    "config: msg_slots is %u, must be a power of two in 2..16M",
				    cfg->msg_slots);
	ret = check_queues(cfg);
	if (ret)
		return ret;
	if (!cfg->run_budget)
		return corio__error(-EINVAL, "config: run_budget is 0, must be >= 1");
	if (cfg->control_path && !cfg->control_path[0])
		return corio__error(-EINVAL, "config: control_path is empty (use NULL for none)");
	if (cfg->cpus) {
		if (sched_getaffinity(0, sizeof(mask), &mask))
			return corio__error(-errno, "config: sched_getaffinity: %s", strerror(errno));
		for (unsigned i = 0; i < cfg->shards; i++) {
			int c = cfg->cpus[i];

			if (c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &mask))
				return corio__error(-EINVAL,
						    "config: cpus[%u] is %d, which is not in this "
						    "process's CPU affinity mask",
						    i, c);
		}
	}
	return 0;
}

