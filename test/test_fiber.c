/* SPDX-License-Identifier: MIT */
/* Fibers: yield order, join results, many fibers, cancel, stacks. */
#include "helpers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- yield ordering ----------------------------------------------------- */
struct order {
	char log[64];
	int n;
};

struct yielder {
	struct order *o;
	char name;
};

static int yield_three(void *arg)
{
	struct yielder *y = arg;

	for (int i = 0; i < 3; i++) {
		y->o->log[y->o->n++] = y->name;
		corio_yield();
	}
	return 0;
}

static void yield_entry(void *arg)
{
	struct order *o = arg;
	struct yielder ys[3] = { { o, 'A' }, { o, 'B' }, { o, 'C' } };
	struct corio_fiber *f[3];

	for (int i = 0; i < 3; i++)
		CHECK_EQ(corio_spawn(yield_three, &ys[i], NULL, &f[i]), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(corio_join(f[i], NULL), 0);
}

Test(fiber, yield_is_round_robin, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct order o = { 0 };

	th_run(&cfg, yield_entry, &o);
	cr_assert_str_eq(o.log, "ABCABCABC");
}

/* A parking or yielding fiber hands the CPU straight to the next ready one,
 * but only within the turn's run: the loop still gets its turn after the
 * fibers that were ready when the turn began, and after run_budget of them. */
static volatile int stop_spinning;

static int yield_until_stopped(void *arg)
{
	long *runs = arg;

	while (!stop_spinning) {
		(*runs)++;
		corio_yield();
	}
	return 0;
}

static int sleep_then_stop(void *arg)
{
	(void)arg;
	CHECK_EQ(corio_sleep_ns(2 * 1000000ull), 0); /* needs the loop to reap its CQE */
	stop_spinning = 1;
	return 0;
}

static void spin_entry(void *arg)
{
	struct corio_fiber *f[4];
	long runs = 0;

	(void)arg;
	stop_spinning = 0;
	for (int i = 0; i < 3; i++)
		CHECK_EQ(corio_spawn(yield_until_stopped, &runs, NULL, &f[i]), 0);
	CHECK_EQ(corio_spawn(sleep_then_stop, NULL, NULL, &f[3]), 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(corio_join(f[i], NULL), 0);
	CHECK(runs > 3);
}

Test(fiber, yielding_fibers_do_not_starve_the_ring, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, spin_entry, NULL); /* hangs if yields never reach the loop */
}

static int yield_fifty(void *arg)
{
	(void)arg;
	for (int i = 0; i < 50; i++)
		corio_yield();
	return 0;
}

static void budget_entry(void *arg)
{
	struct corio_stats a, b;
	struct corio_fiber *f[4];

	(void)arg;
	CHECK_EQ(corio_stats_get(NULL, 0, &a), 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(corio_spawn(yield_fifty, NULL, NULL, &f[i]), 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(corio_join(f[i], NULL), 0);
	CHECK_EQ(corio_stats_get(NULL, 0, &b), 0);
	/* 4 x 51 fiber runs, at most 2 per turn (the entry fiber's own runs
	 * only add turns) */
	CHECK(b.loop_turns - a.loop_turns >= 4 * 51 / 2);
}

Test(fiber, run_budget_bounds_the_fibers_run_per_turn, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	cfg.run_budget = 2;
	th_run(&cfg, budget_entry, NULL);
}

/* ---- join results and corio_exit ---------------------------------------- */
static int returns_42(void *arg)
{
	(void)arg;
	return 42;
}

static void nested_exit(int depth)
{
	if (depth < 0)
		return;
	if (depth > 0)
		nested_exit(depth - 1);
	corio_exit(-7);
}

static int exits_deep(void *arg)
{
	(void)arg;
	nested_exit(10);
	return 1; /* not reached */
}

static int blocks_on_event(void *arg)
{
	return corio_event_wait(arg);
}

static void join_entry(void *arg)
{
	struct corio_fiber *a, *b, *c;
	struct corio_event ev;
	int st = 0;

	(void)arg;
	corio_event_init(&ev);
	CHECK_EQ(corio_spawn(returns_42, NULL, NULL, &a), 0);
	CHECK_EQ(corio_spawn(exits_deep, NULL, &(struct corio_spawn_opts){ .name = "deep" }, &b), 0);
	CHECK_EQ(corio_spawn(blocks_on_event, &ev, NULL, &c), 0);
	CHECK_EQ(corio_join(a, &st), 0);
	CHECK_EQ(st, 42);
	CHECK_EQ(corio_join(b, &st), 0);
	CHECK_EQ(st, -7);
	CHECK_EQ(corio_join(corio_self(), &st), -EINVAL);
	corio_event_set(&ev); /* c ends once it runs */
	CHECK_EQ(corio_join(c, &st), 0);
	CHECK_EQ(st, 0);
	CHECK_EQ(corio_spawn(NULL, NULL, NULL, NULL), -EINVAL);
	CHECK_EQ(corio_spawn(returns_42, NULL, &(struct corio_spawn_opts){ .flags = 1 }, NULL), -EINVAL);
	CHECK_EQ(corio_spawn(returns_42, NULL, &(struct corio_spawn_opts){ .stack_size = 100 }, NULL),
		 -EINVAL);
}

Test(fiber, join_returns_status, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, join_entry, NULL);
}

/* A deadline scope bounds corio_join; the fiber stays joinable. */
static void join_deadline_entry(void *arg)
{
	struct corio_fiber *f;
	struct corio_deadline d;
	struct corio_event ev;
	uint64_t t0;
	int st = 1;

	(void)arg;
	corio_event_init(&ev);
	CHECK_EQ(corio_spawn(blocks_on_event, &ev, NULL, &f), 0);
	t0 = corio_now_ns();
	CHECK_EQ(corio_timeout_push(&d, 20 * 1000000ull), 0);
	CHECK_EQ(corio_join(f, &st), -ETIMEDOUT);
	CHECK(corio_now_ns() - t0 >= 20 * 1000000ull);
	CHECK_EQ(st, 1);
	/* expired scope: at once, still joinable */
	CHECK_EQ(corio_join(f, &st), -ETIMEDOUT);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	corio_event_set(&ev);
	CHECK_EQ(corio_join(f, &st), 0);
	CHECK_EQ(st, 0);
	/* an expired scope refuses even a join that need not wait (corio.h's
	 * rule), and the ended fiber stays joinable */
	CHECK_EQ(corio_spawn(returns_42, NULL, NULL, &f), 0);
	corio_yield();
	CHECK_EQ(corio_timeout_push(&d, 0), 0);
	CHECK_EQ(corio_join(f, &st), -ETIMEDOUT);
	CHECK_EQ(st, 0);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_join(f, &st), 0);
	CHECK_EQ(st, 42);
}

Test(fiber, join_is_bounded_by_the_deadline_scope, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, join_deadline_entry, NULL);
}

/* ---- 100k fibers spawned and joined --------------------------------------- */
#if defined(__SANITIZE_THREAD__)
#define MANY 10000 /* TSan creates a shadow fiber per fiber: 100k takes ~a minute */
#else
#define MANY 100000
#endif

static int add_one(void *arg)
{
	(*(long *)arg)++;
	return 3;
}

static void many_entry(void *arg)
{
	struct corio_fiber **fs = calloc(MANY, sizeof(*fs));
	long *count = arg;
	long sum = 0;

	CHECK(fs != NULL);
	if (!fs)
		return;
	for (int i = 0; i < MANY; i++)
		CHECK_EQ(corio_spawn(add_one, count, NULL, &fs[i]), 0);
	for (int i = 0; i < MANY; i++) {
		int st = 0;

		CHECK_EQ(corio_join(fs[i], &st), 0);
		sum += st;
	}
	CHECK_EQ(sum, 3L * MANY);
	free(fs);
}

Test(fiber, hundred_thousand_spawned_and_joined, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	long count = 0;

	th_run(&cfg, many_entry, &count);
	cr_assert_eq(count, MANY);
}

/* ---- cancel --------------------------------------------------------------- */
struct cancel_ctx {
	int pipefd[2];
	int poll_res;
	int ran_unstarted;
};

static int blocked_in_kernel(void *arg)
{
	struct cancel_ctx *c = arg;

	c->poll_res = corio_poll(c->pipefd[0], POLLIN);
	/* sticky: every later blocking call fails too */
	CHECK_EQ(corio_nop(), -ECANCELED);
	return 5;
}

static int never_runs(void *arg)
{
	((struct cancel_ctx *)arg)->ran_unstarted = 1;
	return 0;
}

static void cancel_entry(void *arg)
{
	struct cancel_ctx *c = arg;
	struct corio_fiber *k, *w, *u;
	struct corio_event ev;
	int st = 0;
	char b;

	corio_event_init(&ev);
	CHECK_EQ(pipe2(c->pipefd, O_NONBLOCK | O_CLOEXEC), 0);
	CHECK_EQ(corio_spawn(blocked_in_kernel, c, NULL, &k), 0);
	CHECK_EQ(corio_spawn(blocks_on_event, &ev, NULL, &w), 0);
	CHECK_EQ(corio_spawn(never_runs, c, NULL, &u), 0);
	CHECK_EQ(corio_cancel(u), 0); /* before it ever ran */
	corio_yield();                /* k and w are now parked */
	CHECK_EQ(corio_cancel(k), 0);
	CHECK_EQ(corio_cancel(w), 0);
	CHECK_EQ(corio_join(k, &st), 0);
	CHECK_EQ(st, 5);
	CHECK_EQ(c->poll_res, -ECANCELED);
	CHECK_EQ(corio_join(w, &st), 0);
	CHECK_EQ(st, -ECANCELED);
	CHECK_EQ(corio_join(u, &st), 0);
	CHECK_EQ(st, -ECANCELED);
	CHECK_EQ(c->ran_unstarted, 0);
	/* the cancelled poll consumed nothing: data written now is still readable */
	CHECK_EQ(write(c->pipefd[1], "x", 1), 1);
	CHECK_EQ(corio_poll(c->pipefd[0], POLLIN) & POLLIN, POLLIN);
	CHECK_EQ(read(c->pipefd[0], &b, 1), 1);
	CHECK_EQ(corio_cancel(NULL), -EINVAL);
	close(c->pipefd[0]);
	close(c->pipefd[1]);
}

Test(fiber, cancel_blocked_and_unstarted, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct cancel_ctx c = { 0 };

	th_run(&cfg, cancel_entry, &c);
}

/* ---- stacks ------------------------------------------------------------------ */
static long recurse(int depth)
{
	volatile char frame[512];

	frame[0] = (char)depth;
	frame[511] = (char)depth;
	if (depth == 0)
		return frame[0];
	return recurse(depth - 1) + frame[511] - frame[0] + 1;
}

static int deep(void *arg)
{
	*(long *)arg = recurse(10000); /* about 5.5 MB of frames */
	return 0;
}

static void deep_entry(void *arg)
{
	struct corio_fiber *f;
	struct corio_spawn_opts o = { .stack_size = 16u << 20, .name = "deep" };

	CHECK_EQ(corio_spawn(deep, arg, &o, &f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
}

Test(fiber, deep_recursion_in_large_stack, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	long r = -1;

	th_run(&cfg, deep_entry, &r);
	cr_assert_eq(r, 10000);
}

static int overflow(void *arg)
{
	(void)arg;
	return (int)recurse(1 << 20);
}

static void overflow_entry(void *arg)
{
	struct corio_spawn_opts o = { .stack_size = 32768, .name = "overflower" };

	(void)arg;
	corio_spawn(overflow, NULL, &o, NULL);
}

Test(fiber, stack_overflow_names_the_fiber, .timeout = 30)
{
	int errpipe[2], status;
	char buf[4096];
	ssize_t n, len = 0;
	pid_t pid;

	cr_assert_eq(pipe(errpipe), 0);
	pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		struct corio_config cfg = th_cfg(1);

		dup2(errpipe[1], 2);
		corio_run(&cfg, overflow_entry, NULL);
		_exit(0); /* not reached: the overflow kills us */
	}
	close(errpipe[1]);
	while ((n = read(errpipe[0], buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += n;
	buf[len] = '\0';
	close(errpipe[0]);
	waitpid(pid, &status, 0);
	cr_assert(WIFSIGNALED(status), "the child exited instead of dying: %s", buf);
	cr_assert(strstr(buf, "stack overflow in fiber 'overflower'") != NULL,
		  "no overflow report on stderr; got: %s", buf);
}

/* ---- stack guard, stack_size bounds, stack cache ------------------------------ */
#include <stdint.h>
#include <sys/mman.h>

/*
 * A frame larger than the guard must not jump over it into the stack mapped
 * below (another fiber's). Two defences: the library and these tests are
 * built with -fstack-clash-protection (a large frame probes each page on its
 * way down, so it meets the guard), and the guard is cfg.stack_guard bytes
 * (64 KiB by default), so even an unprobed frame up to that size lands in it.
 * Each overflow runs in a forked child; its stderr comes back through a pipe.
 */
struct ovf {
	struct corio_config cfg;
	size_t jump; /* 0: a real 70 KiB frame; else one store this far below the frame */
	int errfd;
	struct corio_event go, hold;
};

static __attribute__((noinline)) int big_frame(void)
{
	char a[70 * 1024];
	volatile size_t low = 0;

	a[low] = 1; /* the low end first: the frame's lowest byte */
	__asm__ volatile("" : : "r"(a) : "memory"); /* the whole array is in the frame */
	return a[low];
}

/* What a large frame built without -fstack-clash-protection does: its first
 * store lands far below the last byte the stack touched. */
static __attribute__((noinline)) void unprobed_jump(size_t below)
{
	volatile char *p = (volatile char *)__builtin_frame_address(0) - below;

	*p = 1;
}

static int ovf_fiber(void *arg)
{
	struct ovf *o = arg;

	corio_event_wait(&o->go); /* holds its stack while the victim maps one */
	if (o->jump)
		unprobed_jump(o->jump);
	else
		big_frame();
	return 0;
}

static int ovf_victim(void *arg)
{
	return corio_event_wait(&((struct ovf *)arg)->hold);
}

static void ovf_entry(void *arg)
{
	struct ovf *o = arg;
	struct corio_spawn_opts big = { .stack_size = 64 * 1024, .name = "big-frame" };
	struct corio_spawn_opts vic = { .stack_size = 64 * 1024, .name = "victim" };
	struct corio_fiber *f = NULL, *v = NULL;

	corio_event_init(&o->go);
	corio_event_init(&o->hold);
	if (corio_spawn(ovf_fiber, o, &big, &f))
		return;
	corio_yield(); /* f takes its stack and parks */
	if (corio_spawn(ovf_victim, o, &vic, &v) == 0)
		corio_yield(); /* mapped next: usually just below f's guard */
	corio_event_set(&o->go);
	corio_join(f, NULL);
	corio_event_set(&o->hold);
	if (v)
		corio_join(v, NULL);
}

static int ovf_child(void *arg)
{
	struct ovf *o = arg;

	dup2(o->errfd, 2);
	return corio_run(&o->cfg, ovf_entry, o) ? 1 : 0; /* reached only if unnoticed */
}

static void expect_overflow_report(struct ovf *o)
{
	int fds[2], st;
	char buf[8192];
	ssize_t n, len = 0;

	cr_assert_eq(pipe(fds), 0);
	o->errfd = fds[1];
	st = th_fork_bounded(ovf_child, o, 20000);
	close(fds[1]);
	while ((n = read(fds[0], buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += n;
	buf[len] = '\0';
	close(fds[0]);
	cr_assert(st != TH_HUNG, "still running after 20 s; stderr: %s", buf);
	cr_assert(WIFSIGNALED(st), "the overflow went unnoticed (status 0x%x); stderr: %s", st, buf);
	cr_assert(strstr(buf, "corio: stack overflow in fiber 'big-frame'") != NULL,
		  "no report naming the fiber; stderr: %s", buf);
}

Test(fiber, large_frame_overflow_names_the_fiber, .timeout = 60)
{
	struct ovf o = { .cfg = th_cfg(1) };

	expect_overflow_report(&o);
}

Test(fiber, unprobed_frame_within_guard_names_the_fiber, .timeout = 60)
{
	struct ovf o = { .cfg = th_cfg(1), .jump = 70 * 1024 };

	expect_overflow_report(&o);
}

Test(fiber, stack_guard_config_is_applied, .timeout = 60)
{
	struct ovf o = { .cfg = th_cfg(1), .jump = 200 * 1024 };

	o.cfg.stack_guard = 256 * 1024; /* the default 64 KiB would be jumped over */
	expect_overflow_report(&o);
}

/* corio_spawn checks opts->stack_size against the bounds of cfg.stack_size:
 * SIZE_MAX used to be accepted (then crashed), SIZE_MAX - 4095 wrapped size +
 * guard and hung. */
static void huge_stack_entry(void *arg)
{
	const size_t bad[] = { SIZE_MAX, SIZE_MAX - 4095, ((size_t)1 << 30) + 1, 16383 };
	int *failed = arg;

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct corio_spawn_opts o = { .stack_size = bad[i], .name = "huge" };
		int r = corio_spawn(returns_42, NULL, &o, NULL);

		if (r != -EINVAL || !strstr(corio_last_error(), "stack_size")) {
			fprintf(stderr, "stack_size %zu: %d (%s)\n", bad[i], r, corio_last_error());
			(*failed)++;
		}
	}
}

static int huge_stack_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	int failed = 0;

	(void)arg;
	if (corio_run(&cfg, huge_stack_entry, &failed))
		return 1;
	return failed ? 2 : 0;
}

Test(fiber, spawn_rejects_out_of_range_stack_size, .timeout = 30)
{
	th_child_ok(huge_stack_child, NULL, 10000, "corio_spawn with stack_size SIZE_MAX");
}

/* A stack_size that is not a page multiple still reuses cached stacks. Seen
 * from inside a fiber: a page deep in a reused stack is already resident (the
 * fiber before touched it), in a fresh mapping it is not (mincore()). */
#define REUSE_SPAWNS 1000
#define ODD_STACK 65636 /* 64 KiB + 100 */
#define DEEP (32 * 1024)

static __attribute__((noinline)) void touch_deep(void)
{
	volatile char a[DEEP];

	for (size_t i = 0; i < sizeof(a); i += 256)
		a[i] = 1;
}

static int deep_page_resident(void *arg)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t p = ((uintptr_t)__builtin_frame_address(0) - DEEP / 2) & ~(uintptr_t)(ps - 1);
	unsigned char vec = 0;

	if (mincore((void *)p, ps, &vec) == 0 && (vec & 1))
		(*(long *)arg)++;
	touch_deep(); /* for the next fiber on this stack */
	return 0;
}

static void reuse_entry(void *arg)
{
	struct corio_spawn_opts odd = { .stack_size = ODD_STACK };
	struct corio_fiber *f;
	long *resident = arg;

	for (int i = 0; i < 2 * REUSE_SPAWNS + 2; i++) {
		if (i == 2)
			*resident = 0; /* the first stack is fresh, of course */
		CHECK_EQ(corio_spawn(deep_page_resident, resident, i % 2 ? &odd : NULL, &f), 0);
		CHECK_EQ(corio_join(f, NULL), 0);
	}
}

Test(fiber, stack_cache_reused_for_unaligned_size, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	long resident = 0;

	cfg.stack_size = ODD_STACK; /* not a page multiple */
	th_run(&cfg, reuse_entry, &resident);
	/* a margin for pages reclaimed under memory pressure */
	cr_assert(resident > 2 * REUSE_SPAWNS * 9 / 10,
		  "%ld of %d fibers found a reused stack: the stack cache was bypassed",
		  resident, 2 * REUSE_SPAWNS);
}

/* A fiber whose stack cannot be mapped ends with -ENOMEM and wakes its
 * joiner. vm.max_map_count is used up with one-page mappings of
 * alternating protection (they cannot merge), so the stack mmap fails. */
#define NOMAP_MAX (1u << 20)

static int nostack_child(void *arg)
{
	static void *maps[NOMAP_MAX];
	struct corio_fiber *f;
	size_t n = 0;
	int st = 0;

	(void)arg;
	while (n < NOMAP_MAX) {
		void *p = mmap(NULL, 4096, (n & 1) ? PROT_READ : PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			break;
		maps[n++] = p;
	}
	if (n == NOMAP_MAX)
		return 77;
	CHECK_EQ(corio_spawn(returns_42, NULL, &(struct corio_spawn_opts){ .stack_size = 1 << 20 },
			     &f), 0);
	CHECK_EQ(corio_join(f, &st), 0);
	CHECK_EQ(st, -ENOMEM);
	while (n)
		munmap(maps[--n], 4096);
	return 0;
}

static int nostack_fiber(void *arg)
{
	(void)arg;
	return nostack_child(NULL);
}

static void nostack_entry(void *arg)
{
	struct corio_fiber *f;
	int st = -1;

	(void)arg;
	/* in its own fiber with a roomy default stack, spawned before the maps
	 * run out */
	CHECK_EQ(corio_spawn(nostack_fiber, NULL, NULL, &f), 0);
	CHECK_EQ(corio_join(f, &st), 0);
	*(int *)arg = st;
}

static int nostack_run(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	int st = -1, before = th_fd_count();

	(void)arg;
	if (corio_run(&cfg, nostack_entry, &st) || atomic_load(&th_failures)) {
		fprintf(stderr, "%s\n", th_msg);
		return 1;
	}
	if (th_fd_count() != before)
		return 3;
	return st;
}

Test(fiber, no_stack_ends_the_fiber_and_wakes_its_joiner, .timeout = 60)
{
	/* The bound is for a joiner never woken; under TSan the child's mmap
	 * and munmap of ~65k maps alone take 10-12 s on a loaded 2-core
	 * machine (gdb: in the munmap loop, after the join), so allow 25 s. */
	int st = th_fork_bounded(nostack_run, NULL, 25000);

	cr_assert(st != TH_HUNG, "the joiner of a fiber without a stack was never woken");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		cr_skip_test("vm.max_map_count is too large to exhaust");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child ended with status 0x%x", st);
}

/* ---- spawn options' release: an argument whose fiber never runs --------------- */

static int rel_fn_ran, rel_released;

static int rel_fn(void *arg)
{
	(void)arg;
	rel_fn_ran++;
	return 0;
}

static void rel_release(void *arg)
{
	CHECK_EQ((intptr_t)arg, 42);
	rel_released++;
}

static void release_entry(void *arg)
{
	struct corio_spawn_opts o = { .name = "never", .release = rel_release };
	struct corio_fiber *f;
	int st = 0;

	(void)arg;
	/* cancelled before it ever ran: release gets arg, fn never runs */
	CHECK_EQ(corio_spawn(rel_fn, (void *)(intptr_t)42, &o, &f), 0);
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, &st), 0);
	CHECK_EQ(st, -ECANCELED);
	CHECK_EQ(rel_released, 1);
	CHECK_EQ(rel_fn_ran, 0);
	/* one that runs: fn runs, release never */
	CHECK_EQ(corio_spawn(rel_fn, (void *)(intptr_t)42, &o, &f), 0);
	CHECK_EQ(corio_join(f, &st), 0);
	CHECK_EQ(rel_fn_ran, 1);
	CHECK_EQ(rel_released, 1);
	/* detached, and the runtime shuts down before it runs */
	CHECK_EQ(corio_spawn(rel_fn, (void *)(intptr_t)42, &o, NULL), 0);
	corio_shutdown();
}

Test(fiber, spawn_release_gets_the_argument_of_a_fiber_that_never_ran, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, release_entry, NULL);
	cr_assert_eq(rel_released, 2, "release ran %d times, 2 expected", rel_released);
	cr_assert_eq(rel_fn_ran, 1);
}

/* ---- stale handles: joined twice, detached while joined ------------------------- */

static int returns_arg(void *arg)
{
	return (int)(intptr_t)arg;
}

static int waits_then_9(void *arg)
{
	CHECK_EQ(corio_event_wait(arg), 0);
	return 9;
}

static int joins_and_checks(void *arg)
{
	struct corio_fiber *g = arg;
	int st = 0;

	CHECK_EQ(corio_join(g, &st), 0);
	CHECK_EQ(st, 9);
	return 0;
}

static void stale_entry(void *arg)
{
	struct corio_fiber *f, *g, *j, *x[8];
	struct corio_event ev;
	int st = 0;

	(void)arg;
	corio_event_init(&ev);
	/* joined twice: the second join is refused, the record freed once */
	CHECK_EQ(corio_spawn(returns_arg, (void *)(intptr_t)7, NULL, &f), 0);
	CHECK_EQ(corio_join(f, &st), 0);
	CHECK_EQ(st, 7);
	CHECK_EQ(corio_join(f, &st), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_join: ") != NULL);
	CHECK_EQ(corio_detach(f), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_detach: ") != NULL);
	CHECK_EQ(corio_cancel(f), -EINVAL);
	/* detached while another fiber is parked joining it: refused, and
	 * the joiner gets its status */
	CHECK_EQ(corio_spawn(waits_then_9, &ev, NULL, &g), 0);
	CHECK_EQ(corio_spawn(joins_and_checks, g, NULL, &j), 0);
	corio_yield(); /* g parks on ev, j parks joining g */
	CHECK_EQ(corio_detach(g), -EINVAL);
	CHECK(strstr(corio_last_error(), "joining") != NULL);
	corio_event_set(&ev);
	CHECK_EQ(corio_join(j, &st), 0);
	CHECK_EQ(st, 0);
	CHECK_EQ(corio_join(g, &st), -EINVAL); /* j joined it */
	/* the pool is sane: every new fiber is distinct, runs, and its join
	 * returns its own status (a cycle in the free list handed the same
	 * record out twice) */
	for (int i = 0; i < 8; i++)
		CHECK_EQ(corio_spawn(returns_arg, (void *)(intptr_t)(100 + i), NULL, &x[i]), 0);
	for (int i = 0; i < 8; i++)
		for (int k = 0; k < i; k++)
			CHECK(x[i] != x[k]);
	for (int i = 0; i < 8; i++) {
		CHECK_EQ(corio_join(x[i], &st), 0);
		CHECK_EQ(st, 100 + i);
	}
	/* the quarantine: the joined handle stays refused while 64 fibers
	 * are spawned and joined after it (corio.h's stated limit) */
	for (int i = 0; i < 64; i++) {
		CHECK_EQ(corio_spawn(returns_arg, (void *)(intptr_t)i, NULL, &x[0]), 0);
		CHECK(x[0] != f);
		CHECK_EQ(corio_join(x[0], &st), 0);
		CHECK_EQ(st, i);
		CHECK_EQ(corio_join(f, &st), -EINVAL);
	}
}

static int stale_run(void *arg)
{
	struct corio_config cfg = th_cfg(1);

	(void)arg;
	if (corio_run(&cfg, stale_entry, NULL) != 0)
		return 2;
	if (atomic_load(&th_failures))
		fprintf(stderr, "%s\n", th_msg);
	return atomic_load(&th_failures) ? 3 : 0;
}

/* Used to free the record twice: the free list became a cycle, later
 * spawns shared records, joins returned other fibers' statuses, then hung
 * or crashed. A child, bounded. */
Test(fiber, join_twice_and_detach_while_joined_are_refused, .timeout = 30)
{
	int st = th_fork_bounded(stale_run, NULL, 10000);

	cr_assert(st != TH_HUNG, "hung (a record freed twice)");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child ended with status 0x%x", st);
}

/* corio.h's rule: a cancelled fiber's corio_join is refused even when the
 * joined fiber has ended (it used to return 0), and leaves it joinable. */
static void cancelled_join_entry(void *arg)
{
	struct corio_fiber *f;
	int st = 1;

	(void)arg;
	CHECK_EQ(corio_spawn(returns_42, NULL, NULL, &f), 0);
	corio_yield(); /* f ends */
	CHECK_EQ(corio_cancel(corio_self()), 0);
	CHECK_EQ(corio_join(f, &st), -ECANCELED);
	CHECK_EQ(st, 1);
	CHECK_EQ(corio_detach(f), 0); /* still joinable: the right to join is given up */
	CHECK_EQ(corio_join(f, &st), -EINVAL);
}

Test(fiber, cancelled_join_of_an_ended_fiber_is_refused_and_keeps_it_joinable, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, cancelled_join_entry, NULL);
}
