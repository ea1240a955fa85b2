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
	/* a fiber that has already ended is joined even in an expired scope */
	CHECK_EQ(corio_spawn(returns_42, NULL, NULL, &f), 0);
	corio_yield();
	CHECK_EQ(corio_timeout_push(&d, 0), 0);
	CHECK_EQ(corio_join(f, &st), 0);
	CHECK_EQ(st, 42);
	CHECK_EQ(corio_deadline_pop(&d), 0);
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

Test(fiber, no_stack_ends_the_fiber_and_wakes_its_joiner, .timeout = 30)
{
	int st = th_fork_bounded(nostack_run, NULL, 10000);

	cr_assert(st != TH_HUNG, "the joiner of a fiber without a stack was never woken");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		cr_skip_test("vm.max_map_count is too large to exhaust");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child ended with status 0x%x", st);
}
