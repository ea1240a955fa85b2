/* SPDX-License-Identifier: MIT */
/* Config validation: every bad field is -EINVAL with a message naming it. */
#include "helpers.h"

#include <sched.h>

static void never(void *arg)
{
	(void)arg;
	th_fail(__FILE__, __LINE__, "entry ran with a bad config");
}

static void expect_einval(struct corio_config *cfg, const char *needle)
{
	struct corio_rt *rt = NULL;
	int before = th_fd_count();

	cr_assert_eq(corio_config_check(cfg), -EINVAL, "%s accepted", needle);
	cr_assert(strstr(corio_last_error(), needle), "message '%s' does not name '%s'",
		  corio_last_error(), needle);
	cr_assert_eq(corio_start(cfg, never, NULL, &rt), -EINVAL);
	cr_assert_null(rt);
	cr_assert_eq(th_fd_count(), before);
}

#define BAD(name, field, value, needle)                   \
	Test(config, name) {                       \
		struct corio_config cfg;                  \
		corio_config_init(&cfg);                  \
		cfg.field = value;                        \
		expect_einval(&cfg, needle);              \
	}

BAD(sq_zero, sq_entries, 0, "sq_entries")
BAD(sq_not_pow2, sq_entries, 100, "sq_entries")
BAD(sq_too_big, sq_entries, 65536, "sq_entries")
BAD(cq_not_pow2, cq_entries, 100, "cq_entries")
BAD(stack_too_small, stack_size, 4096, "stack_size")
BAD(stack_too_big, stack_size, (size_t)-1, "stack_size")
BAD(stack_guard_not_page_multiple, stack_guard, 5000, "stack_guard")
BAD(stack_guard_too_big, stack_guard, 1u << 30, "stack_guard")
BAD(spin_too_long, spin_us, 2000000, "spin_us")
BAD(msg_slots_not_pow2, msg_slots, 1000, "msg_slots")
BAD(run_budget_zero, run_budget, 0, "run_budget")
BAD(unknown_flag, flags, 0x80000000u, "flags")
BAD(too_many_shards, shards, 5000, "shards")
BAD(empty_control_path, control_path, "", "control_path")

Test(config, bad_cq_smaller_than_sq)
{
	struct corio_config cfg;

	corio_config_init(&cfg);
	cfg.sq_entries = 64;
	cfg.cq_entries = 32;
	expect_einval(&cfg, "cq_entries");
}

Test(config, bad_idle)
{
	struct corio_config cfg;

	corio_config_init(&cfg);
	cfg.idle = (enum corio_idle)7;
	expect_einval(&cfg, "idle");
}

Test(config, reserved_must_be_zero)
{
	struct corio_config cfg;

	corio_config_init(&cfg);
	cfg.reserved[3] = 1;
	expect_einval(&cfg, "reserved[3]");
}

Test(config, cpu_outside_affinity_mask)
{
	struct corio_config cfg;
	cpu_set_t mask;
	int cpu = -1;

	sched_getaffinity(0, sizeof(mask), &mask);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (!CPU_ISSET(c, &mask)) {
			cpu = c;
			break;
		}
	corio_config_init(&cfg);
	cfg.shards = 1;
	cfg.cpus = &cpu;
	expect_einval(&cfg, "cpus[0]");
}

Test(config, cpus_without_shard_count)
{
	struct corio_config cfg;
	int cpu = 0;

	corio_config_init(&cfg);
	cfg.cpus = &cpu;
	expect_einval(&cfg, "cpus");
}

Test(config, defaults_are_valid)
{
	struct corio_config cfg;

	corio_config_init(&cfg);
	cr_assert_eq(corio_config_check(&cfg), 0, "%s", corio_last_error());
	cr_assert_eq(corio_config_check(&cfg), 0);
}

/* The guard below each fiber stack: 64 KiB by default (a frame up to that
 * size cannot jump over it); 0, what a program built against a header
 * without the field leaves there, means the default. */
Test(config, stack_guard_default_and_zero)
{
	struct corio_config cfg;

	corio_config_init(&cfg);
	cr_assert_eq(cfg.stack_guard, 64u * 1024);
	cfg.stack_guard = 0;
	cr_assert_eq(corio_config_check(&cfg), 0, "%s", corio_last_error());
	cfg.stack_guard = (unsigned)sysconf(_SC_PAGESIZE);
	cr_assert_eq(corio_config_check(&cfg), 0, "%s", corio_last_error());
}

Test(config, null_entry_is_rejected)
{
	struct corio_rt *rt;

	cr_assert_eq(corio_start(NULL, NULL, NULL, &rt), -EINVAL);
}
