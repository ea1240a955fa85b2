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
BAD(net_recv_queue_too_big, net_recv_queue, 65536, "net_recv_queue")
BAD(net_send_queue_too_big, net_send_queue, 65536, "net_send_queue")
BAD(resolve_ttl_too_big, resolve_ttl_ms, 86400001, "resolve_ttl_ms")

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
	cfg.reserved[0] = 1;
	expect_einval(&cfg, "reserved[0]");
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

/* ---- CORIO_* environment settings: one strict parser (uring/env.c) -------------- */

static void env_entry(void *arg)
{
	(void)arg;
	corio_yield();
}

/* corio_start refuses var=value: -EINVAL, a message naming the variable
 * with its value, no runtime, no entry run, no fd left open. */
static void env_refused(const char *var, const char *value)
{
	struct corio_config cfg = th_cfg(2);
	struct corio_rt *rt = NULL;
	char want[128];
	int before = th_fd_count(), ret;

	setenv(var, value, 1);
	ret = corio_start(&cfg, never, NULL, &rt);
	unsetenv(var);
	cr_assert_eq(ret, -EINVAL, "%s=%s: corio_start returned %d (%s)", var, value, ret,
		     ret ? corio_last_error() : "started");
	cr_assert_null(rt);
	snprintf(want, sizeof(want), "%s=%s:", var, value);
	cr_assert(strstr(corio_last_error(), want), "message '%s' does not name '%s'",
		  corio_last_error(), want);
	cr_assert_eq(th_fd_count(), before);
}

/* ... and runs with a good one. */
static void env_accepted(const char *var, const char *value)
{
	struct corio_config cfg = th_cfg(2);

	setenv(var, value, 1);
	th_run(&cfg, env_entry, NULL);
	unsetenv(var);
}

static void env_family(const char *const *vars, const char *const *bad, const char *good)
{
	for (unsigned v = 0; vars[v]; v++) {
		for (unsigned b = 0; bad[b]; b++)
			env_refused(vars[v], bad[b]);
		env_accepted(vars[v], good);
	}
}

/* Integers: decimal digits only, in range; "5s" used to mean 5 ms and a huge
 * timeout wrapped the 60 s idle limit to milliseconds. */
Test(config, env_integers_are_strict, .timeout = 60)
{
	static const char *const limits[] = { "CORIO_CONTROL_TIMEOUT_MS", "CORIO_CONTROL_CLIENTS",
					      "CORIO_NET_RECV_QUEUE", "CORIO_NET_SEND_QUEUE",
					      NULL };
	static const char *const hooks[] = { "CORIO_NET_UDP_EAGAIN", "CORIO_NET_TCP_SHORT", NULL };
	static const char *const bad[] = { "5s", "99999999999999999999", "-5", "", " 5", "+5",
					   "0x10", "5.0", NULL };
	static const char *const bad_ranges[] = { "0", "1537228672809", "18446744073709551616",
						  NULL };

	env_family(limits, bad, "8");
	env_family(limits, bad_ranges, "4");
	env_family(hooks, bad, "0");
	env_refused("CORIO_CONTROL_CLIENTS", "1025");
	env_refused("CORIO_CONTROL_TIMEOUT_MS", "3600001");
	env_refused("CORIO_NET_RECV_QUEUE", "65536");
	env_refused("CORIO_NET_TCP_SHORT", "65536");
}

/* "A:B" test hooks. */
Test(config, env_pairs_are_strict, .timeout = 60)
{
	static const char *const bufs[] = { "CORIO_NET_BUFS", NULL };
	static const char *const fault[] = { "CORIO_NET_ACCEPT_FAULT", NULL };
	static const char *const bad[] = { "64", "64:", ":4096", "64:4096x", "64:-1", "",
					   "99999999999999999999:1", "64:4096:1", "5s:5", NULL };

	env_family(bufs, bad, "64:4096");
	env_refused("CORIO_NET_BUFS", "100:4096"); /* not a power of two */
	env_refused("CORIO_NET_BUFS", "65536:4096");
	env_refused("CORIO_NET_BUFS", "64:0");
	env_family(fault, bad, "104:0");
	env_refused("CORIO_NET_ACCEPT_FAULT", "0:1");
	env_refused("CORIO_NET_ACCEPT_FAULT", "ECONNRESET:1");
}

/* Comma lists of known words ("all" for every one). */
Test(config, env_lists_refuse_unknown_items, .timeout = 60)
{
	static const char *const net[] = { "CORIO_NET_DISABLE", NULL };
	static const char *const ring[] = { "CORIO_RING_DISABLE", NULL };
	static const char *const fs[] = { "CORIO_FS_SYNC", NULL };
	static const char *const fault[] = { "CORIO_RING_FAULT", NULL };
	static const char *const bad[] = { "nosuch", "", ",", "send_zc,", "send_zc,,udp_direct",
					   "SEND_ZC", " send_zc", NULL };

	env_family(net, bad, "send_zc,udp_direct");
	env_family(ring, bad, "sqpoll");
	env_refused("CORIO_RING_DISABLE", "sqpol");
	env_family(fs, bad, "read,write");
	env_refused("CORIO_FS_SYNC", "reads");
	for (unsigned b = 0; bad[b]; b++)
		env_refused(fault[0], bad[b]);
	/* Accepted, the forced EBADR of a waiting enter (if a shard waited) is
	 * reported: to the log, captured here, not to make test's output. */
	th_log_capture();
	env_accepted(fault[0], "ebadr");
	th_log_release();
	cr_assert_eq(th_log_has("\n"), th_log_has("corio: io_uring_enter: EBADR: "),
		     "a line other than the EBADR report: %s", th_log_buf);
	env_accepted("CORIO_FS_SYNC", "all");
}

/* One word of a set, and 0/1 flags. */
Test(config, env_choices_and_flags_are_strict, .timeout = 60)
{
	static const char *const flags[] = { "CORIO_TIMER_NO_LINK", "CORIO_TIMER_NO_UPDATE", NULL };
	static const char *const bad_flags[] = { "yes", "2", "", "01", "1 ", "true", NULL };

	env_family(flags, bad_flags, "1");
	env_accepted("CORIO_TIMER_NO_LINK", "0");
	env_refused("CORIO_MSG_DOORBELL", "msgring");
	env_refused("CORIO_MSG_DOORBELL", "");
	env_refused("CORIO_MSG_DOORBELL", "eventfd,badfd");
	env_accepted("CORIO_MSG_DOORBELL", "eventfd");
	env_refused("CORIO_CLOCK", "tsc");
	env_refused("CORIO_CLOCK", "");
	env_accepted("CORIO_CLOCK", "monotonic");
	env_refused("CORIO_STATS_TEST", "read-gap");
	env_accepted("CORIO_STATS_TEST", "read_gap");
}

/* The fault-injection spec, parsed (and refused) in every build. */
Test(config, env_fault_spec_is_strict, .timeout = 60)
{
	static const char *const bad[] = { "seed=x", "seed=", "seed=-1", "rate=2", "rate=-0.1",
					   "rate=nan", "rate=0.1x", "kinds=short+nosuch", "bogus",
					   "seed=1,,rate=0.1", "", "kinds=", NULL };

	for (unsigned b = 0; bad[b]; b++)
		env_refused("CORIO_FAULTS", bad[b]);
	env_accepted("CORIO_FAULTS", "seed=3,rate=0,kinds=short+mshot");
	env_accepted("CORIO_FAULTS", "rate=0,sqfull|busy");
	env_refused("CORIO_FAULTS_LOG", "");
}
