/* SPDX-License-Identifier: MIT */
/* Runtime start/stop, shard identity and pinning, shutdown, stats. */
#include "helpers.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <unistd.h>

struct seen {
	_Atomic unsigned mask;
	_Atomic unsigned count;
	_Atomic int bad_cpu;
	int cpu_of[8];
};

static void record_entry(void *arg)
{
	struct seen *s = arg;
	unsigned id = corio_shard_id();

	CHECK(id < corio_shard_count());
	atomic_fetch_or(&s->mask, 1u << id);
	atomic_fetch_add(&s->count, 1);
	s->cpu_of[id] = corio_shard_cpu();
	if (sched_getcpu() != corio_shard_cpu())
		atomic_fetch_add(&s->bad_cpu, 1);
}

static void start_stop(unsigned n)
{
	struct corio_config cfg = th_cfg(n);
	struct seen s = { 0 };

	th_run(&cfg, record_entry, &s);
	cr_assert_eq(atomic_load(&s.count), n);
	cr_assert_eq(atomic_load(&s.mask), (1u << n) - 1);
	cr_assert_eq(atomic_load(&s.bad_cpu), 0, "a shard ran off its CPU");
}

Test(runtime, one_shard, .timeout = 30) { start_stop(1); }
Test(runtime, two_shards, .timeout = 30) { start_stop(2); }
Test(runtime, four_shards_oversubscribed, .timeout = 30) { start_stop(4); }

Test(runtime, default_is_one_shard_per_cpu, .timeout = 30)
{
	struct seen s = { 0 };
	cpu_set_t mask;

	sched_getaffinity(0, sizeof(mask), &mask);
	th_run(NULL, record_entry, &s);
	cr_assert_eq(atomic_load(&s.count), (unsigned)CPU_COUNT(&mask));
}

Test(runtime, explicit_cpus_are_used, .timeout = 30)
{
	cpu_set_t mask;
	int cpus[2], n = 0;
	struct corio_config cfg;
	struct seen s = { 0 };

	sched_getaffinity(0, sizeof(mask), &mask);
	for (int c = CPU_SETSIZE - 1; c >= 0 && n < 2; c--)
		if (CPU_ISSET(c, &mask))
			cpus[n++] = c;
	if (n < 2)
		cr_skip_test("needs two CPUs in the affinity mask");
	cfg = th_cfg(2);
	cfg.cpus = cpus;
	th_run(&cfg, record_entry, &s);
	cr_assert_eq(s.cpu_of[0], cpus[0]);
	cr_assert_eq(s.cpu_of[1], cpus[1]);
	cr_assert_eq(atomic_load(&s.bad_cpu), 0);
}

/* Shard 0 shuts down while every other shard has fibers blocked forever. */
static _Atomic int cancelled_waits;
static _Atomic unsigned blocked;

static int block_forever(void *arg)
{
	struct corio_event *ev = arg;
	int ret;

	atomic_fetch_add(&blocked, 1);
	ret = corio_event_wait(ev);

	if (ret == -ECANCELED)
		atomic_fetch_add(&cancelled_waits, 1);
	return ret;
}

static void shutdown_entry(void *arg)
{
	static __thread struct corio_event ev;
	(void)arg;
	corio_event_init(&ev);
	for (int i = 0; i < 10; i++)
		CHECK_EQ(corio_spawn(block_forever, &ev, NULL, NULL), 0);
	if (corio_shard_id() == 0) {
		/* wait until every shard has its blocked fibers, then stop all */
		while (atomic_load(&blocked) < 10 * corio_shard_count())
			corio_yield();
		corio_shutdown();
	}
	/* this fiber blocks too and must be cancelled */
	CHECK_EQ(corio_event_wait(&ev), -ECANCELED);
	CHECK_EQ(corio_spawn(block_forever, &ev, NULL, NULL), -ECANCELED);
}

Test(runtime, shutdown_cancels_blocked_fibers_everywhere, .timeout = 30)
{
	struct corio_config cfg = th_cfg(3);

	th_run(&cfg, shutdown_entry, NULL);
	cr_assert_eq(atomic_load(&cancelled_waits), 30, "got %d", atomic_load(&cancelled_waits));
}

/* corio_stop() from a thread that is not a shard. */
static void wait_entry(void *arg)
{
	struct corio_event ev;

	corio_event_init(&ev);
	atomic_fetch_add((_Atomic unsigned *)arg, 1);
	CHECK_EQ(corio_event_wait(&ev), -ECANCELED);
}

Test(runtime, stop_from_foreign_thread, .timeout = 30)
{
	struct corio_config cfg = th_cfg(2);
	struct corio_rt *rt;
	_Atomic unsigned up = 0;
	int before = th_fd_count();

	cr_assert_eq(corio_start(&cfg, wait_entry, &up, &rt), 0, "%s", corio_last_error());
	while (atomic_load(&up) < 2)
		usleep(1000);
	cr_assert_eq(corio_stop(rt), 0);
	cr_assert_eq(corio_wait(rt), 0);
	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
	cr_assert_eq(th_fd_count(), before);
}

/* The runtime ends by itself once no shard has a live fiber. */
static int short_child(void *arg)
{
	corio_yield();
	atomic_fetch_add((_Atomic unsigned *)arg, 1);
	return 0;
}

static void spawn_and_leave(void *arg)
{
	for (int i = 0; i < 100; i++)
		CHECK_EQ(corio_spawn(short_child, arg, NULL, NULL), 0);
}

Test(runtime, ends_when_all_fibers_end, .timeout = 30)
{
	struct corio_config cfg = th_cfg(2);
	_Atomic unsigned done = 0;

	th_run(&cfg, spawn_and_leave, &done);
	cr_assert_eq(atomic_load(&done), 200);
}

static int off_shard_nop(void)
{
	return corio_nop();
}

static int off_shard_spawn(void)
{
	return corio_spawn(short_child, NULL, NULL, NULL);
}

Test(runtime, off_shard_calls_fail_cleanly, .timeout = 30)
{
	cr_assert_eq(corio_shard_id(), UINT32_MAX);
	cr_assert_eq(corio_shard_count(), 0);
	th_misuse(off_shard_nop, "corio_nop");
	th_misuse(off_shard_spawn, "corio_spawn");
}

/* Counters move by what the work implies. */
static void stats_entry(void *arg)
{
	struct corio_stats *out = arg;
	struct corio_stats before, after;
	_Atomic unsigned children_done = 0;

	CHECK_EQ(corio_stats_get(NULL, corio_shard_id(), &before), 0);
	for (int i = 0; i < 1000; i++)
		CHECK_EQ(corio_nop(), 0);
	for (int i = 0; i < 10; i++)
		CHECK_EQ(corio_spawn(short_child, &children_done, NULL, NULL), 0);
	corio_yield();
	corio_yield();
	CHECK_EQ(corio_stats_get(NULL, corio_shard_id(), &after), 0);
	CHECK(after.sqes - before.sqes >= 1000);
	CHECK(after.cqes - before.cqes >= 1000);
	CHECK(after.enters - before.enters >= 1000); /* one fiber: one enter per nop */
	CHECK(after.enters - before.enters < 1100);
	CHECK_EQ(after.fibers_spawned - before.fibers_spawned, 10);
	CHECK(after.switches - before.switches >= 1000 + 10);
	CHECK(after.loop_turns - before.loop_turns >= 1000);
	CHECK_EQ(corio_stats_get(NULL, 99, &after), -EINVAL);
	while (atomic_load(&children_done) < 10)
		corio_yield();
	*out = after;
}

Test(runtime, stats_count_known_work, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_stats st;

	th_run(&cfg, stats_entry, &st);
	cr_assert_neq(st.ring_features, 0);
}
/* ---- the leak census (corio_wait) ---------------------------------------------- */

/* A borrowed receive buffer that is never released is a leak the runtime
 * names at corio_wait(): -EBUSY, and corio_last_error() says which shard
 * and what. */
static void held_buf_entry(void *arg)
{
	struct corio_listener *l;
	struct corio_sock *srv, *cli;
	struct corio_buf b;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char addr[64];

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	CHECK_EQ(corio_listener_addr(l, &ss, &sl), 0);
	CHECK(corio_addr_format((struct sockaddr *)&ss, sl, addr, sizeof(addr)) > 0);
	CHECK_EQ(corio_tcp_connect(addr, &cli), 0);
	CHECK_EQ(corio_accept(l, &srv), 0);
	CHECK_EQ(corio_send(cli, "leak", 4), 4);
	CHECK(corio_recv_buf(srv, &b) > 0); /* and never corio_buf_release(&b) */
	CHECK_EQ(corio_close(srv), 0);
	CHECK_EQ(corio_close(cli), 0);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(runtime, census_names_a_buffer_never_released, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	int ret = corio_run(&cfg, held_buf_entry, NULL);

	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
	cr_assert_eq(ret, -EBUSY, "corio_run returned %d for a leaked buffer", ret);
	cr_assert(strstr(corio_last_error(), "shard 0") && strstr(corio_last_error(), "buffer"),
		  "message: %s", corio_last_error());
}

/*
 * libcorio.so reads its thread-local shard pointer with the initial-exec
 * TLS model (one %fs-relative load instead of a __tls_get_addr call per
 * corio call). The price is that a dlopen() of the library takes static
 * TLS: a program that loads it at run time must still get a working shard
 * through it. The entry calls the loaded library's corio_stats_get(NULL,
 * ...), which needs that library's thread-local shard (-EPERM without it).
 * make test names the library in CORIO_TEST_SO (tools/scripts/run-tests.sh).
 */
static int (*so_stats_get)(struct corio_rt *, unsigned, struct corio_stats *);
static _Atomic int so_ret = 1;

static void so_entry(void *arg)
{
	struct corio_stats st;

	(void)arg;
	atomic_store(&so_ret, so_stats_get(NULL, 0, &st));
}

Test(runtime, shared_library_runs_a_shard_when_dlopened, .timeout = 30)
{
	const char *so = getenv("CORIO_TEST_SO");
	void (*init)(struct corio_config *);
	int (*run)(const struct corio_config *, void (*)(void *), void *);
	struct corio_config cfg;
	void *h;

	if (!so || !*so)
		cr_skip_test("CORIO_TEST_SO is not set (make test sets it)");
	h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	cr_assert(h, "dlopen(%s): %s", so, dlerror());
	*(void **)&init = dlsym(h, "corio_config_init");
	*(void **)&run = dlsym(h, "corio_run");
	*(void **)&so_stats_get = dlsym(h, "corio_stats_get");
	cr_assert(init && run && so_stats_get, "%s: missing symbols", so);
	init(&cfg);
	cfg.shards = 1;
	cr_assert_eq(run(&cfg, so_entry, NULL), 0);
	cr_assert_eq(atomic_load(&so_ret), 0, "the loaded library's corio_stats_get on its shard: %d",
		     atomic_load(&so_ret));
	dlclose(h);
}

/*
 * Every -EINVAL a core call returns carries a message naming the call
 * (about half had none, so an application logging corio_last_error()
 * printed an older, unrelated message), and a successful call does not
 * clear it (corio.h says so).
 */
static int einval_fn(void *arg) { (void)arg; return 0; }
static void einval_post(void *arg) { (void)arg; }
static intptr_t einval_call(void *arg) { (void)arg; return 0; }

static void einval_entry(void *arg)
{
	struct corio_timer_stats ts;
	struct corio_msg_stats ms;
	struct corio_stats st;
	struct corio_chan ch;
	char *out;
	size_t len;

	(void)arg;
	CHECK_EINVAL_NAMES(corio_spawn(NULL, NULL, NULL, NULL), "corio_spawn");
	CHECK_EINVAL_NAMES(corio_join(NULL, NULL), "corio_join");
	CHECK_EINVAL_NAMES(corio_join(corio_self(), NULL), "corio_join");
	CHECK_EINVAL_NAMES(corio_detach(NULL), "corio_detach");
	CHECK_EINVAL_NAMES(corio_cancel(NULL), "corio_cancel");
	CHECK_EINVAL_NAMES(corio_timer_init(NULL, NULL, NULL), "corio_timer_init");
	CHECK_EINVAL_NAMES(corio_timer_arm(NULL, 1, 0), "corio_timer_arm");
	CHECK_EINVAL_NAMES(corio_timer_cancel(NULL), "corio_timer_cancel");
	CHECK_EINVAL_NAMES(corio_timer_wait(NULL), "corio_timer_wait");
	CHECK_EINVAL_NAMES(corio_deadline_push(NULL, 1), "corio_deadline_push");
	CHECK_EINVAL_NAMES(corio_timeout_push(NULL, 1), "corio_timeout_push");
	CHECK_EINVAL_NAMES(corio_deadline_shield(NULL), "corio_deadline_shield");
	CHECK_EINVAL_NAMES(corio_timer_stats_get(NULL, 99, &ts), "corio_timer_stats_get");
	CHECK_EINVAL_NAMES(corio_stats_get(NULL, 99, &st), "corio_stats_get");
	CHECK_EINVAL_NAMES(corio_msg_stats_get(NULL, 99, 0, &ms), "corio_msg_stats_get");
	CHECK_EINVAL_NAMES(corio_stats_render(NULL, 99, &out, &len), "corio_stats_render");
	CHECK_EINVAL_NAMES(corio_post(99, einval_post, NULL), "corio_post");
	CHECK_EINVAL_NAMES(corio_post(0, NULL, NULL), "corio_post");
	CHECK_EINVAL_NAMES(corio_post_wait(99, einval_post, NULL), "corio_post_wait");
	CHECK_EINVAL_NAMES(corio_call(99, einval_call, NULL, NULL), "corio_call");
	CHECK_EINVAL_NAMES(corio_gather(NULL, NULL, NULL), "corio_gather");
	CHECK_EINVAL_NAMES(corio_broadcast(NULL, NULL), "corio_broadcast");
	CHECK_EINVAL_NAMES(corio_spawn_on(99, einval_fn, NULL), "corio_spawn_on");
	CHECK_EINVAL_NAMES(corio_spawn_on_wait(99, einval_fn, NULL), "corio_spawn_on_wait");
	CHECK_EINVAL_NAMES(corio_spawn_on_ex(0, einval_fn, NULL, NULL, 8), "corio_spawn_on_ex");
	CHECK_EINVAL_NAMES(corio_group_init(NULL, 0), "corio_group_init");
	CHECK_EINVAL_NAMES(corio_group_spawn(NULL, einval_fn, NULL, NULL, NULL),
			   "corio_group_spawn");
	CHECK_EINVAL_NAMES(corio_group_wait(NULL), "corio_group_wait");
	CHECK_EINVAL_NAMES(corio_group_close(NULL), "corio_group_close");
	CHECK_EINVAL_NAMES(corio_group_cancel(NULL), "corio_group_cancel");
	CHECK_EINVAL_NAMES(corio_group_error(NULL, NULL), "corio_group_error");
	CHECK_EINVAL_NAMES(corio_select(NULL, 0), "corio_select");
	CHECK_EINVAL_NAMES(corio_select_try(NULL, 0), "corio_select_try");
	CHECK_EINVAL_NAMES(corio_chan_init(&ch, 0, 1), "corio_chan_init");
	CHECK_EINVAL_NAMES(corio_post_foreign(NULL, 0, einval_post, NULL), "corio_post_foreign");
	CHECK_EINVAL_NAMES(corio_stop(NULL), "corio_stop");
	/* a success leaves the message of the last failure */
	CHECK_EINVAL_NAMES(corio_stop(NULL), "corio_stop");
	CHECK_EQ(corio_nop(), 0);
	CHECK(strncmp(corio_last_error(), "corio_stop: ", 12) == 0);
}

Test(runtime, every_einval_names_its_call, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, einval_entry, NULL);
	CHECK_EINVAL_NAMES(corio_wait(NULL), "corio_wait");
	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
}

/* ---- sharded start: cfg.setup runs on every shard before any entry ------ */

#define SETUP_SHARDS 3
struct setup_test {
	_Atomic int built[SETUP_SHARDS]; /* per-shard state, built by setup */
	_Atomic int setups, entries;
	_Atomic int seen_missing;        /* an entry found a shard not built */
	struct corio_rt *published;      /* corio_start's *out */
	int fail_on;                     /* setup of this shard fails (-1: none) */
};
static struct setup_test st_;

static int slow_setup(void *arg)
{
	struct setup_test *t = arg;
	unsigned me = corio_shard_id();

	CHECK(t == &st_);
	/* the last shard builds slowly, and blocks its own shard meanwhile */
	if (me == SETUP_SHARDS - 1)
		CHECK_EQ(corio_sleep_ns(30 * 1000 * 1000), 0);
	atomic_fetch_add(&t->setups, 1);
	if ((int)me == t->fail_on)
		return -EADDRINUSE;
	atomic_store(&t->built[me], 1);
	return 0;
}

static void read_built(void *arg)
{
	struct setup_test *t = arg;

	if (!atomic_load(&t->built[corio_shard_id()]))
		atomic_store(&t->seen_missing, 1);
}

static void setup_entry(void *arg)
{
	struct setup_test *t = arg;

	atomic_fetch_add(&t->entries, 1);
	/* every shard's state exists before any entry runs ... */
	for (unsigned i = 0; i < SETUP_SHARDS; i++)
		CHECK_EQ(atomic_load(&t->built[i]), 1);
	/* ... so a message to any shard finds it built */
	for (unsigned i = 0; i < SETUP_SHARDS; i++)
		CHECK_EQ(corio_post(i, read_built, t), 0);
	/* the handle is published before any fiber runs */
	CHECK(t->published != NULL);
	CHECK(corio_runtime() == t->published);
}

Test(runtime, setup_runs_on_every_shard_before_any_entry, .timeout = 30)
{
	struct corio_config cfg = th_cfg(SETUP_SHARDS);
	int ret;

	memset(&st_, 0, sizeof(st_));
	st_.fail_on = -1;
	cfg.setup = slow_setup;
	cr_assert_null(corio_runtime(), "not a shard: no runtime");
	ret = corio_start(&cfg, setup_entry, &st_, &st_.published);
	cr_assert_eq(ret, 0, "corio_start: %s", corio_last_error());
	/* corio_start returned: every setup has returned */
	cr_assert_eq(atomic_load(&st_.setups), SETUP_SHARDS);
	cr_assert_eq(corio_wait(st_.published), 0, "%s", corio_last_error());
	cr_assert_eq(atomic_load(&st_.entries), SETUP_SHARDS);
	cr_assert_eq(atomic_load(&st_.seen_missing), 0);
	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
}

Test(runtime, a_failed_setup_fails_the_start_and_no_entry_runs, .timeout = 30)
{
	struct corio_config cfg = th_cfg(SETUP_SHARDS);
	struct corio_rt *rt = (struct corio_rt *)&cfg; /* must come back NULL */
	int before = th_fd_count();
	int ret;

	memset(&st_, 0, sizeof(st_));
	st_.fail_on = 1;
	cfg.setup = slow_setup;
	ret = corio_start(&cfg, setup_entry, &st_, &rt);
	cr_assert_eq(ret, -EADDRINUSE, "corio_start: %d %s", ret, corio_last_error());
	cr_assert_null(rt);
	cr_assert(strstr(corio_last_error(), "setup on shard 1") != NULL, "%s", corio_last_error());
	cr_assert_eq(atomic_load(&st_.setups), SETUP_SHARDS);
	cr_assert_eq(atomic_load(&st_.entries), 0);
	cr_assert_eq(th_fd_count(), before, "the failed start left file descriptors open");
}

/* ---- signals awaited in fibers (cfg.signals, corio_signal_wait) --------- */

#define SIG_SET (CORIO_SIG(SIGUSR1) | CORIO_SIG(SIGUSR2) | CORIO_SIG(SIGTERM))
static _Atomic int sig_got[2];

static int waits_for_term(void *arg)
{
	int signo = 0;

	*(int *)arg = corio_signal_wait(CORIO_SIG(SIGTERM), &signo);
	return 0;
}

static void signal_entry(void *arg)
{
	struct corio_deadline dl;
	struct corio_fiber *f;
	int signo = 0, cancelled = 1;

	(void)arg;
	if (corio_shard_id() == 0) {
		/* process-directed, as kill(1) sends them: every thread blocks
		 * them, so only shard 0's signalfd takes them */
		CHECK_EQ(kill(getpid(), SIGUSR1), 0);
		CHECK_EQ(kill(getpid(), SIGUSR2), 0);
	}
	/* every shard gets every signal, waiting or not when it came */
	CHECK_EQ(corio_signal_wait(CORIO_SIG(SIGUSR2), &signo), 0);
	CHECK_EQ(signo, SIGUSR2);
	CHECK_EQ(corio_signal_wait(CORIO_SIG(SIGUSR1), &signo), 0);
	CHECK_EQ(signo, SIGUSR1);
	atomic_store(&sig_got[corio_shard_id()], signo);
	/* taken: the next wait for it is bounded by the deadline scope */
	CHECK_EQ(corio_timeout_push(&dl, 20 * 1000 * 1000), 0);
	CHECK_EQ(corio_signal_wait(CORIO_SIG(SIGUSR1) | CORIO_SIG(SIGUSR2), &signo), -ETIMEDOUT);
	corio_deadline_pop(&dl);
	/* and by cancellation */
	CHECK_EQ(corio_spawn(waits_for_term, &cancelled, NULL, &f), 0);
	corio_yield();
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(cancelled, -ECANCELED);
	/* bad input */
	CHECK_EQ(corio_signal_wait(CORIO_SIG(SIGHUP), &signo), -EINVAL);
	CHECK(strstr(corio_last_error(), "signal 1 is not in cfg.signals") != NULL);
	CHECK_EQ(corio_signal_wait(0, &signo), -EINVAL);
	CHECK_EQ(corio_signal_wait(CORIO_SIG(SIGTERM), NULL), -EINVAL);
}

static int signal_child(void *arg)
{
	struct corio_config cfg = th_cfg(2);
	sigset_t set;
	int ret;

	(void)arg;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL); /* the caller's part (corio.h) */
	cfg.signals = SIG_SET;
	ret = corio_run(&cfg, signal_entry, NULL);
	if (ret || atomic_load(&th_failures)) {
		fprintf(stderr, "signal child: %d %s / %s\n", ret, corio_last_error(), th_msg);
		return 1;
	}
	return atomic_load(&sig_got[0]) == SIGUSR1 && atomic_load(&sig_got[1]) == SIGUSR1 ? 0 : 2;
}

Test(runtime, signals_reach_fibers_on_every_shard, .timeout = 60)
{
	/* a child of its own: Criterion's threads do not block the signals */
	th_child_ok(signal_child, NULL, 30000, "signals");
}

Test(runtime, signals_that_cannot_be_waited_for_are_refused, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	int bad[] = { SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL };

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[32];

		cfg.signals = CORIO_SIG(SIGTERM) | CORIO_SIG(bad[i]);
		cr_assert_eq(corio_config_check(&cfg), -EINVAL);
		snprintf(want, sizeof(want), "includes %d", bad[i]);
		cr_assert(strstr(corio_last_error(), want) != NULL, "%s", corio_last_error());
	}
	cfg.signals = CORIO_SIG(SIGTERM) | CORIO_SIG(SIGRTMIN + 1);
	cr_assert_eq(corio_config_check(&cfg), 0, "%s", corio_last_error());
}

/* A shard whose message ring is full when a signal comes is owed it: the
 * post is tried again until it goes (it was dropped, with a log line). */
static sem_t ring_blocked, ring_release;
static _Atomic int ring_got;

static void ring_noop(void *arg)
{
	(void)arg;
}

static void ring_full_entry(void *arg)
{
	struct corio_deadline dl;
	int signo = 0, posts = 0;

	(void)arg;
	if (corio_shard_id() == 1) {
		sem_post(&ring_blocked);
		sem_wait(&ring_release); /* holds the shard: its ring is not drained */
		CHECK_EQ(corio_timeout_push(&dl, 5ull * 1000 * 1000 * 1000), 0);
		CHECK_EQ(corio_signal_wait(CORIO_SIG(SIGUSR1), &signo), 0);
		corio_deadline_pop(&dl);
		atomic_store(&ring_got, signo);
		return;
	}
	sem_wait(&ring_blocked);
	while (corio_post(1, ring_noop, NULL) == 0 && posts < 1000000)
		posts++;
	CHECK(posts < 1000000); /* shard 1's ring is full now */
	CHECK_EQ(kill(getpid(), SIGUSR1), 0);
	/* shard 0 has it: shard 1's post was tried against the full ring */
	CHECK_EQ(corio_signal_wait(CORIO_SIG(SIGUSR1), &signo), 0);
	sem_post(&ring_release);
}

static int ring_full_child(void *arg)
{
	struct corio_config cfg = th_cfg(2);
	sigset_t set;
	int ret;

	(void)arg;
	sem_init(&ring_blocked, 0, 0);
	sem_init(&ring_release, 0, 0);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	cfg.signals = CORIO_SIG(SIGUSR1);
	cfg.msg_slots = 2;
	ret = corio_run(&cfg, ring_full_entry, NULL);
	if (ret || atomic_load(&th_failures)) {
		fprintf(stderr, "ring-full child: %d %s / %s\n", ret, corio_last_error(), th_msg);
		return 1;
	}
	return atomic_load(&ring_got) == SIGUSR1 ? 0 : 2;
}

Test(runtime, a_signal_reaches_a_shard_whose_message_ring_was_full, .timeout = 60)
{
	th_child_ok(ring_full_child, NULL, 30000, "signal to a full ring");
}

/* ---- drain on a signal (corio_drain_on_signal) ------------------------------------ */

static _Atomic int drained_on[2];

/* Shard 0 asks for it and sends itself SIGUSR1; every shard waits for its
 * drain event, with no fiber waiting for the signal. */
static void drain_sig_entry(void *arg)
{
	(void)arg;
	if (corio_shard_id() == 0) {
		CHECK_EQ(corio_drain_on_signal(CORIO_SIG(SIGUSR2), 1000000000ull), -EINVAL);
		CHECK(strstr(corio_last_error(), "signal 12 is not in cfg.signals") != NULL);
		CHECK_EQ(corio_drain_on_signal(CORIO_SIG(SIGUSR1), 10ull * 1000000000ull), 0);
		CHECK_EQ(kill(getpid(), SIGUSR1), 0);
	}
	CHECK_EQ(corio_event_wait(corio_drain_event()), 0);
	atomic_store(&drained_on[corio_shard_id()], corio_draining());
}

static int drain_sig_child(void *arg)
{
	struct corio_config cfg = th_cfg(2);
	sigset_t set;
	int ret;

	(void)arg;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	cfg.signals = CORIO_SIG(SIGUSR1);
	ret = corio_run(&cfg, drain_sig_entry, NULL);
	if (ret || atomic_load(&th_failures)) {
		fprintf(stderr, "drain child: %d %s / %s\n", ret, corio_last_error(), th_msg);
		return 1;
	}
	return atomic_load(&drained_on[0]) == 1 && atomic_load(&drained_on[1]) == 1 ? 0 : 2;
}

static int drain_on_signal_off_shard(void)
{
	return corio_drain_on_signal(CORIO_SIG(SIGTERM), 1);
}

Test(runtime, a_signal_starts_the_drain_when_asked, .timeout = 60)
{
	th_child_ok(drain_sig_child, NULL, 30000, "drain on a signal");
	/* off a shard: -EPERM naming the call (debug builds abort saying so) */
	th_misuse_ex(drain_on_signal_off_shard, "corio_drain_on_signal", -EPERM);
}
