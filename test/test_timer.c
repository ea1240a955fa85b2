/* SPDX-License-Identifier: MIT */
/*
 * Timers: ordering, cancel, re-arm, periodic ticks, sleeps, deadline scopes,
 * per-call linked timeouts (and their fallbacks), shutdown with many timers
 * pending, statistics. Assertions are about order and results, never about
 * how fast something happened (that is tools/bench-timer's job); a timer
 * must never fire early, which is checked everywhere.
 */
#include "helpers.h"

#include "core/internal.h" /* corio__op_begin/_wait: a raw recv, as net/ does */

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS 1000000ull

static __thread uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static void run1(void (*entry)(void *), void *arg)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, entry, arg);
}

/* ---- ordering ------------------------------------------------------------- */

#define NORDER 10000

struct order {
	struct corio_timer t[NORDER];
	uint64_t deadline[NORDER];
	uint64_t fired_deadline[NORDER];
	unsigned nfired;
	unsigned early;
};

static void order_cb(struct corio_timer *t, void *arg, int res)
{
	struct order *o = arg;
	unsigned i = (unsigned)(t - o->t);

	CHECK_EQ(res, 1);
	if (corio_now_ns() < o->deadline[i])
		o->early++;
	if (o->nfired < NORDER)
		o->fired_deadline[o->nfired++] = o->deadline[i];
	CHECK(!corio_timer_armed(t));
}

static void order_entry(void *arg)
{
	struct order *o = arg;
	uint64_t now = corio_now_ns();

	for (unsigned i = 0; i < NORDER; i++) {
		o->deadline[i] = now + 2 * MS + rnd() % (100 * MS);
		CHECK_EQ(corio_timer_init(&o->t[i], order_cb, o), 0);
		CHECK_EQ(corio_timer_arm(&o->t[i], o->deadline[i], 0), 0);
	}
	while (o->nfired < NORDER)
		CHECK_EQ(corio_sleep_ns(5 * MS), 0);
}

Test(timer, ten_thousand_fire_in_deadline_order, .timeout = 60)
{
	struct order *o = calloc(1, sizeof(*o));

	run1(order_entry, o);
	cr_assert_eq(o->nfired, NORDER);
	cr_assert_eq(o->early, 0, "%u timers fired before their deadline", o->early);
	for (unsigned i = 1; i < NORDER; i++)
		cr_assert_geq(o->fired_deadline[i], o->fired_deadline[i - 1],
			      "fire %u out of deadline order", i);
	free(o);
}

/* Sleeping fibers wake in deadline order too. */
#define NSLEEP 1000
static uint64_t sleep_deadline[NSLEEP], woke_deadline[NSLEEP];
static unsigned nwoke, nlate;
static struct corio_event go;

static int sleeper(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;

	CHECK_EQ(corio_event_wait(&go), 0);
	/* A fiber that gets to arm only after its deadline (the machine was
	 * slow) is legitimately out of order: leave it out of the check. */
	if (corio_now_ns() >= sleep_deadline[i]) {
		nlate++;
		return 0;
	}
	CHECK_EQ(corio_sleep_until(sleep_deadline[i]), 0);
	CHECK(corio_now_ns() >= sleep_deadline[i]);
	woke_deadline[nwoke++] = sleep_deadline[i];
	return 0;
}

static void sleepers_entry(void *arg)
{
	uint64_t now;

	(void)arg;
	corio_event_init(&go);
	for (unsigned i = 0; i < NSLEEP; i++)
		CHECK_EQ(corio_spawn(sleeper, (void *)(uintptr_t)i, NULL, NULL), 0);
	corio_yield(); /* every sleeper starts and parks on go */
	now = corio_now_ns();
	for (unsigned i = 0; i < NSLEEP; i++)
		sleep_deadline[i] = now + 300 * MS + rnd() % (500 * MS); /* a stall of a
		few hundred ms while the sleepers arm must not make half of them late */
	corio_event_set(&go);
}

Test(timer, sleeping_fibers_wake_in_deadline_order, .timeout = 60)
{
	run1(sleepers_entry, NULL);
	cr_assert_eq(nwoke + nlate, NSLEEP);
	cr_assert_lt(nlate, NSLEEP / 2, "the machine is too slow for this test");
	for (unsigned i = 1; i < nwoke; i++)
		cr_assert_geq(woke_deadline[i], woke_deadline[i - 1], "wake %u out of order", i);
}

/* ---- cancel, re-arm ----------------------------------------------------------- */

static int cb_calls, cb_last_res;
static uint64_t cb_when;

static void count_cb(struct corio_timer *t, void *arg, int res)
{
	(void)t;
	(void)arg;
	cb_calls++;
	cb_last_res = res;
	cb_when = corio_now_ns();
}

static void cancel_entry(void *arg)
{
	struct corio_timer t, w;
	uint64_t d;

	(void)arg;
	/* before firing: the callback never runs */
	corio_timer_init(&t, count_cb, NULL);
	CHECK_EQ(corio_timer_cancel(&t), -ENOENT); /* never armed */
	CHECK_EQ(corio_timer_arm_in(&t, 5 * MS, 0), 0);
	CHECK(corio_timer_armed(&t));
	CHECK_EQ(corio_timer_cancel(&t), 0);
	CHECK(!corio_timer_armed(&t));
	CHECK_EQ(corio_timer_cancel(&t), -ENOENT);
	CHECK_EQ(corio_sleep_ns(20 * MS), 0);
	CHECK_EQ(cb_calls, 0);

	/* after firing: cancel reports -ENOENT, the callback ran once */
	d = corio_now_ns() + 2 * MS;
	CHECK_EQ(corio_timer_arm(&t, d, 0), 0);
	CHECK_EQ(corio_sleep_ns(10 * MS), 0);
	CHECK_EQ(cb_calls, 1);
	CHECK_EQ(cb_last_res, 1);
	CHECK(cb_when >= d);
	CHECK_EQ(corio_timer_cancel(&t), -ENOENT);

	/* cancelling a timer a fiber waits on wakes it with -ECANCELED */
	corio_timer_init(&w, NULL, NULL);
	CHECK_EQ(corio_timer_wait(&w), -ENOENT); /* not armed: would never end */
	CHECK_EQ(corio_timer_arm_in(&w, 1000 * MS, 0), 0);
	corio_timer_init(&t, NULL, NULL);
	CHECK_EQ(corio_timer_arm_in(&t, MS, 0), 0);
	CHECK_EQ(corio_timer_wait(&t), 1);
	CHECK_EQ(corio_timer_cancel(&w), 0);
	CHECK_EQ(corio_timer_wait(&w), -ENOENT);
}

Test(timer, cancel_before_and_after_firing, .timeout = 30) { run1(cancel_entry, NULL); }

static int cancel_waiter(void *arg)
{
	CHECK_EQ(corio_timer_wait(arg), -ECANCELED);
	return 0;
}

static void cancel_wakes_entry(void *arg)
{
	struct corio_timer w;
	struct corio_fiber *a, *b;
	int st;

	(void)arg;
	corio_timer_init(&w, NULL, NULL);
	CHECK_EQ(corio_timer_arm_in(&w, 1000 * MS, 0), 0);
	CHECK_EQ(corio_spawn(cancel_waiter, &w, NULL, &a), 0);
	CHECK_EQ(corio_spawn(cancel_waiter, &w, NULL, &b), 0);
	corio_yield();
	CHECK_EQ(corio_timer_cancel(&w), 0);
	CHECK_EQ(corio_join(a, &st), 0);
	CHECK_EQ(corio_join(b, &st), 0);
}

Test(timer, cancel_wakes_every_waiter, .timeout = 30) { run1(cancel_wakes_entry, NULL); }

static void rearm_entry(void *arg)
{
	struct corio_timer t;
	uint64_t t0 = corio_now_ns(), d;

	(void)arg;
	cb_calls = 0;
	corio_timer_init(&t, count_cb, NULL);
	/* far -> near: fires once, at the near deadline */
	CHECK_EQ(corio_timer_arm(&t, t0 + 1000 * MS, 0), 0);
	d = t0 + 3 * MS;
	CHECK_EQ(corio_timer_arm(&t, d, 0), 0);
	CHECK_EQ(corio_timer_deadline(&t), d);
	while (!cb_calls)
		CHECK_EQ(corio_sleep_ns(MS), 0);
	CHECK(cb_when >= d);
	CHECK(!corio_timer_armed(&t));

	/* near -> later: does not fire at the near deadline (later is far
	 * enough that a shard held off its CPU for hundreds of ms on a loaded
	 * machine does not wake past it as well) */
	cb_calls = 0;
	t0 = corio_now_ns();
	CHECK_EQ(corio_timer_arm(&t, t0 + 2 * MS, 0), 0);
	d = t0 + 500 * MS;
	CHECK_EQ(corio_timer_arm(&t, d, 0), 0);
	CHECK_EQ(corio_sleep_until(t0 + 10 * MS), 0);
	CHECK_EQ(cb_calls, 0);
	while (!cb_calls)
		CHECK_EQ(corio_sleep_ns(MS), 0);
	CHECK(cb_when >= d);
	CHECK_EQ(cb_calls, 1);

	/* re-arming from inside its own callback is allowed (see periodic) */
}

Test(timer, rearm_moves_the_deadline, .timeout = 30) { run1(rearm_entry, NULL); }

/* The no-IORING_TIMEOUT_UPDATE fallback (remove + re-arm) behaves the same. */
Test(timer, rearm_without_timeout_update, .timeout = 30)
{
	struct order *o = calloc(1, sizeof(*o));

	setenv("CORIO_TIMER_NO_UPDATE", "1", 1);
	run1(rearm_entry, NULL);
	run1(order_entry, o);
	cr_assert_eq(o->early, 0);
	for (unsigned i = 1; i < NORDER; i++)
		cr_assert_geq(o->fired_deadline[i], o->fired_deadline[i - 1]);
	free(o);
}

/* ---- periodic ----------------------------------------------------------------- */

struct tick {
	struct corio_timer t;
	uint64_t first, period;
	int ticks, stop_at, bad_grid, early;
};

static void tick_cb(struct corio_timer *t, void *arg, int res)
{
	struct tick *k = arg;
	uint64_t now = corio_now_ns();

	CHECK(res >= 1);
	/* the next deadline stays on the grid first + k * period, and the
	 * tick(s) reported were due */
	if ((corio_timer_deadline(t) - k->first) % k->period)
		k->bad_grid++;
	if (now < corio_timer_deadline(t) - k->period)
		k->early++;
	k->ticks += res;
	if (k->ticks >= k->stop_at)
		CHECK_EQ(corio_timer_cancel(t), 0);
}

static void periodic_entry(void *arg)
{
	struct tick k = { .period = 2 * MS, .stop_at = 10 };
	struct corio_timer w;
	int total = 0;
	uint64_t t0, slept;

	(void)arg;
	/* callback flavour, cancelling itself from its callback */
	k.first = corio_now_ns() + MS;
	corio_timer_init(&k.t, tick_cb, &k);
	CHECK_EQ(corio_timer_arm(&k.t, k.first, k.period), 0);
	while (corio_timer_armed(&k.t))
		CHECK_EQ(corio_sleep_ns(MS), 0);
	CHECK(k.ticks >= 10);
	CHECK_EQ(k.bad_grid, 0);
	CHECK_EQ(k.early, 0);

	/* waited-on flavour: every wait returns >= 1; a slow waiter gets the
	 * missed ticks counted, not lost */
	corio_timer_init(&w, NULL, NULL);
	t0 = corio_now_ns();
	CHECK_EQ(corio_timer_arm(&w, t0 + MS, MS), 0);
	for (int i = 0; i < 5; i++) {
		int n = corio_timer_wait(&w);

		CHECK(n >= 1);
		total += n;
	}
	slept = corio_now_ns();
	CHECK_EQ(corio_sleep_ns(10 * MS), 0); /* miss ~10 ticks */
	slept += 10 * MS; /* the pass that woke us saw at least this time */
	{
		int n = corio_timer_wait(&w);

		CHECK(n >= 5);
		total += n;
	}
	/* every tick is accounted: ticks = floor((t - first)/period) + 1, for t
	 * at most now and at least the end of the sleep (bounds that a
	 * preemption between two lines here cannot break) */
	{
		uint64_t now = corio_now_ns();
		int most = (int)((now - (t0 + MS)) / MS) + 1;
		int least = (int)((slept - (t0 + MS)) / MS) + 1;

		CHECK(total <= most);
		CHECK(total >= least - 2); /* at most the tick(s) not yet delivered */
	}
	CHECK_EQ(corio_timer_cancel(&w), 0);
}

Test(timer, periodic_ticks, .timeout = 30) { run1(periodic_entry, NULL); }

/* ---- sleep and cancellation ---------------------------------------------------- */

static int long_sleeper(void *arg)
{
	(void)arg;
	CHECK_EQ(corio_sleep_ns(3600 * 1000 * MS), -ECANCELED);
	CHECK_EQ(corio_sleep_ns(MS), -ECANCELED); /* sticky */
	return 7;
}

static void sleep_cancel_entry(void *arg)
{
	struct corio_fiber *f;
	struct corio_timer_stats st;
	int status;
	uint64_t t0 = corio_now_ns();

	(void)arg;
	CHECK_EQ(corio_sleep_ns(0), 0);
	CHECK_EQ(corio_sleep_until(0), 0); /* in the past: still a yield */
	CHECK_EQ(corio_sleep_ns(3 * MS), 0);
	CHECK(corio_now_ns() - t0 >= 3 * MS);
	CHECK_EQ(corio_spawn(long_sleeper, NULL, NULL, &f), 0);
	corio_yield();
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, &status), 0);
	CHECK_EQ(status, 7);
	CHECK_EQ(corio_timer_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.active, 0); /* the cancelled sleep left nothing in the heap */
}

Test(timer, sleep_and_cancel, .timeout = 30) { run1(sleep_cancel_entry, NULL); }

/* ---- per-call timeouts and deadline scopes -------------------------------------- */

/* A raw IORING_OP_RECV through the same path as every blocking call. */
static int raw_recv(int fd, void *buf, size_t len, int flags)
{
	struct io_uring_sqe *sqe;
	struct corio__op op;
	int ret = corio__op_begin(&op, &sqe);

	if (ret)
		return ret;
	io_uring_prep_recv(sqe, fd, buf, len, flags);
	return corio__op_wait(&op);
}

static void recv_timeout_entry(void *arg)
{
	int sv[2];
	char buf[64], got[64];
	struct corio_deadline d;
	struct corio_timer_stats st0, st1;
	uint64_t t0;

	(void)arg;
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	CHECK_EQ(corio_timer_stats_get(NULL, 0, &st0), 0);
	memset(buf, 'x', sizeof(buf));
	t0 = corio_now_ns();
	CHECK_EQ(corio_timeout_push(&d, 20 * MS), 0);
	CHECK_EQ(raw_recv(sv[0], buf, sizeof(buf), 0), -ETIMEDOUT);
	CHECK(corio_now_ns() - t0 >= 20 * MS);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_deadline_ns(), 0);

	/* The kernel no longer holds buf: data sent now stays in the socket
	 * and buf is never written. */
	CHECK_EQ(write(sv[1], "hello", 5), 5);
	CHECK_EQ(corio_sleep_ns(5 * MS), 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		if (buf[i] != 'x') {
			CHECK(!"the timed-out recv wrote into its buffer");
			break;
		}
	CHECK_EQ(recv(sv[0], got, sizeof(got), MSG_DONTWAIT), 5);
	CHECK(!memcmp(got, "hello", 5));

	/* Without a scope the same recv just works. */
	CHECK_EQ(write(sv[1], "again", 5), 5);
	CHECK_EQ(raw_recv(sv[0], buf, sizeof(buf), 0), 5);

	/* Partial transfer: a MSG_WAITALL recv that got 5 of 64 bytes when its
	 * timeout fired reports the 5 bytes, not -ETIMEDOUT. */
	CHECK_EQ(write(sv[1], "part!", 5), 5);
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(corio_timeout_push(&d, 20 * MS), 0);
	CHECK_EQ(raw_recv(sv[0], buf, sizeof(buf), MSG_WAITALL), 5);
	CHECK(!memcmp(buf, "part!", 5));
	/* and the next call in the expired scope times out without starting */
	CHECK_EQ(corio_sleep_ns(25 * MS), -ETIMEDOUT);
	CHECK_EQ(raw_recv(sv[0], buf, sizeof(buf), 0), -ETIMEDOUT);
	CHECK_EQ(corio_deadline_pop(&d), 0);

	CHECK_EQ(corio_timer_stats_get(NULL, 0, &st1), 0);
	CHECK(st1.timed_out - st0.timed_out >= 3);
	close(sv[0]);
	close(sv[1]);
}

Test(timer, recv_with_timeout_on_silent_socket, .timeout = 30) { run1(recv_timeout_entry, NULL); }

/* The fallback (heap timer + async cancel) gives the same results. */
Test(timer, recv_timeout_without_linked_timeouts, .timeout = 30)
{
	setenv("CORIO_TIMER_NO_LINK", "1", 1);
	run1(recv_timeout_entry, NULL);
}

static void scope_entry(void *arg)
{
	struct corio_deadline d, in, sh;
	struct corio_event ev;
	int p[2];
	uint64_t t0 = corio_now_ns(), dl = t0 + 500 * MS;
	char c;

	(void)arg;
	CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
	corio_event_init(&ev);

	/* one scope, three calls: two finish in time, the third is cut off
	 * (the scope is long enough that a shard held off its CPU for
	 * hundreds of ms on a loaded machine still finishes the two) */
	CHECK_EQ(corio_deadline_push(&d, dl), 0);
	CHECK_EQ(corio_deadline_ns(), dl);
	CHECK_EQ(corio_nop(), 0);
	CHECK_EQ(corio_sleep_ns(5 * MS), 0);
	CHECK_EQ(corio_poll(p[0], POLLIN), -ETIMEDOUT);
	CHECK(corio_now_ns() >= dl);
	/* past the deadline every call fails at once, fiber waits included */
	CHECK_EQ(corio_nop(), -ETIMEDOUT);
	CHECK_EQ(corio_event_wait(&ev), -ETIMEDOUT);
	/* a shield lets clean-up run */
	CHECK_EQ(corio_deadline_shield(&sh), 0);
	CHECK_EQ(corio_deadline_ns(), 0);
	CHECK_EQ(corio_nop(), 0);
	CHECK_EQ(corio_deadline_pop(&sh), 0);
	CHECK_EQ(corio_deadline_ns(), dl);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_nop(), 0);

	/* nesting: the nearest deadline wins, whichever scope is inner */
	t0 = corio_now_ns();
	CHECK_EQ(corio_deadline_push(&d, t0 + 1000 * MS), 0);
	CHECK_EQ(corio_timeout_push(&in, 10 * MS), 0);
	CHECK_EQ(corio_event_wait(&ev), -ETIMEDOUT); /* fiber wait, bounded */
	CHECK(corio_now_ns() - t0 >= 10 * MS);
	CHECK_EQ(corio_deadline_pop(&in), 0);
	CHECK_EQ(corio_deadline_pop(&d), 0);

	t0 = corio_now_ns();
	CHECK_EQ(corio_timeout_push(&d, 10 * MS), 0);
	CHECK_EQ(corio_timeout_push(&in, 1000 * MS), 0); /* cannot extend */
	CHECK(corio_deadline_ns() <= corio_now_ns() + 10 * MS);
	CHECK_EQ(corio_poll(p[0], POLLIN), -ETIMEDOUT);
	CHECK(corio_now_ns() - t0 >= 10 * MS);
	CHECK(corio_now_ns() - t0 < 900 * MS);
	CHECK_EQ(corio_deadline_pop(&in), 0);
	CHECK_EQ(corio_deadline_pop(&d), 0);

	/* a sleep longer than its scope ends at the scope's deadline */
	t0 = corio_now_ns();
	CHECK_EQ(corio_timeout_push(&d, 5 * MS), 0);
	CHECK_EQ(corio_sleep_ns(1000 * MS), -ETIMEDOUT);
	CHECK(corio_now_ns() - t0 >= 5 * MS);
	CHECK_EQ(corio_deadline_pop(&d), 0);

	/* data arriving in time is returned normally */
	CHECK_EQ(write(p[1], "z", 1), 1);
	CHECK_EQ(corio_timeout_push(&d, 1000 * MS), 0);
	CHECK(corio_poll(p[0], POLLIN) & POLLIN);
	CHECK_EQ(read(p[0], &c, 1), 1);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	close(p[0]);
	close(p[1]);
}

Test(timer, deadline_scope_covers_three_calls, .timeout = 30) { run1(scope_entry, NULL); }

Test(timer, deadline_scope_without_linked_timeouts, .timeout = 30)
{
	setenv("CORIO_TIMER_NO_LINK", "1", 1);
	run1(scope_entry, NULL);
}

/* A kernel op whose deadline comes after a timer already armed is bounded
 * by a heap timer (no linked timeout: the kernel wakes the loop first
 * anyway); one whose deadline is the shard's earliest gets a linked timeout
 * (io_uring; the fallback has none). Either way it ends with -ETIMEDOUT, not
 * before its deadline. */
struct bound_kind {
	uint64_t linked[4];
	bool uring;
};

static void no_fire(struct corio_timer *t, void *arg, int res)
{
	(void)t;
	(void)arg;
	(void)res;
}

/* Runs once the entry fiber has parked in its poll (a yield whether spawn
 * runs the child first or not), long before the timer is due. */
static int cancel_early(void *arg)
{
	corio_yield();
	CHECK_EQ(corio_timer_cancel(arg), 0);
	return 0;
}

/* A poll of fd (nothing comes) under a scope ending in_ns from now: it must
 * end with -ETIMEDOUT, not before the deadline. The linked timeouts it took. */
static uint64_t bounded_poll(int fd, uint64_t in_ns)
{
	struct corio_timer_stats a, b;
	struct corio_deadline d;
	uint64_t dl = corio_now_ns() + in_ns;

	CHECK_EQ(corio_timer_stats_get(NULL, 0, &a), 0);
	CHECK_EQ(corio_deadline_push(&d, dl), 0);
	CHECK_EQ(corio_poll(fd, POLLIN), -ETIMEDOUT);
	CHECK(corio_now_ns() >= dl);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_timer_stats_get(NULL, 0, &b), 0);
	CHECK(b.timed_out > a.timed_out);
	return b.linked - a.linked;
}

static void bound_kind_entry(void *arg)
{
	struct bound_kind *k = arg;
	struct corio_timer early, late;
	struct corio_stats ss;
	int p[2];

	CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
	CHECK_EQ(corio_stats_get(NULL, 0, &ss), 0);
	k->uring = ss.backend == 0; /* io_uring */

	/* covered: a timer 10 ms out, the poll's deadline 60 ms out */
	corio_timer_init(&early, no_fire, NULL);
	CHECK_EQ(corio_timer_arm(&early, corio_now_ns() + 10 * MS, 0), 0);
	k->linked[0] = bounded_poll(p[0], 60 * MS);

	/* the earliest: the only other timer is 10 s out */
	corio_timer_init(&late, no_fire, NULL);
	CHECK_EQ(corio_timer_arm(&late, corio_now_ns() + 10000 * MS, 0), 0);
	k->linked[1] = bounded_poll(p[0], 30 * MS);
	CHECK_EQ(corio_timer_cancel(&late), 0);

	/* covered by a timer that is cancelled while the op waits: the
	 * kernel's timeout then fires for nothing, and the op's own heap
	 * timer still ends it at its deadline */
	CHECK_EQ(corio_timer_arm(&early, corio_now_ns() + 100 * MS, 0), 0);
	CHECK_EQ(corio_spawn(cancel_early, &early, NULL, NULL), 0);
	k->linked[2] = bounded_poll(p[0], 150 * MS);

	/* covered by the kernel's timeout alone: armed for a timer that was
	 * cancelled after a loop turn had told the kernel, the heap empty */
	CHECK_EQ(corio_timer_arm(&early, corio_now_ns() + 100 * MS, 0), 0);
	corio_yield(); /* the loop arms the kernel's timeout */
	CHECK_EQ(corio_timer_cancel(&early), 0);
	k->linked[3] = bounded_poll(p[0], 150 * MS);
	close(p[0]);
	close(p[1]);
}

Test(timer, op_deadline_behind_an_armed_timer_takes_no_linked_timeout, .timeout = 30)
{
	struct bound_kind k = { { 9, 9, 9, 9 }, false };

	run1(bound_kind_entry, &k);
	cr_assert_eq(k.linked[0], 0, "a covered deadline took %llu linked timeouts",
		     (unsigned long long)k.linked[0]);
	cr_assert_eq(k.linked[1], k.uring ? 1u : 0u, "the earliest deadline took %llu",
		     (unsigned long long)k.linked[1]);
	cr_assert_eq(k.linked[2], 0, "a deadline covered by a cancelled timer took %llu",
		     (unsigned long long)k.linked[2]);
	cr_assert_eq(k.linked[3], 0, "a deadline covered by the kernel's timeout took %llu",
		     (unsigned long long)k.linked[3]);
}

/* A full SQ never splits an op from its linked timeout: 300 fibers with a
 * scope each issue polls through a 4-entry SQ. */
struct small_sq {
	int p[2];
	struct corio_wg wg;
};

static int scoped_poller(void *arg)
{
	struct small_sq *sq = arg;
	struct corio_deadline d;

	CHECK_EQ(corio_timeout_push(&d, 20 * MS), 0);
	CHECK_EQ(corio_poll(sq->p[0], POLLIN), -ETIMEDOUT);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_nop(), 0);
	corio_wg_done(&sq->wg);
	return 0;
}

static void small_sq_entry(void *arg)
{
	struct small_sq sq;
	int *p = sq.p;

	(void)arg;
	CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
	corio_wg_init(&sq.wg);
	corio_wg_add(&sq.wg, 300);
	for (int i = 0; i < 300; i++)
		CHECK_EQ(corio_spawn(scoped_poller, &sq, NULL, NULL), 0);
	CHECK_EQ(corio_wg_wait(&sq.wg), 0); /* every poller is done with the pipe */
	close(p[0]);
	close(p[1]);
}

Test(timer, links_survive_a_full_sq, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	cfg.sq_entries = 4;
	th_run(&cfg, small_sq_entry, NULL);
}

/* ---- shutdown ---------------------------------------------------------------------- */

#define NPEND 100000
static _Atomic int cancelled_cbs, cancelled_sleeps;
static _Atomic unsigned shards_armed;

static void pending_cb(struct corio_timer *t, void *arg, int res)
{
	(void)arg;
	(void)t;
	if (res == -ECANCELED)
		atomic_fetch_add(&cancelled_cbs, 1);
	else
		CHECK(!"a far-future timer fired");
}

static int pending_sleeper(void *arg)
{
	(void)arg;
	if (corio_sleep_ns(3600 * 1000 * MS) == -ECANCELED)
		atomic_fetch_add(&cancelled_sleeps, 1);
	return 0;
}

static void shutdown_entry(void *arg)
{
	struct corio_timer *t = arg;
	struct corio_timer_stats st;
	uint64_t now = corio_now_ns();

	t += (size_t)corio_shard_id() * NPEND;
	for (unsigned i = 0; i < NPEND; i++) {
		corio_timer_init(&t[i], pending_cb, NULL);
		CHECK_EQ(corio_timer_arm(&t[i], now + 3600 * 1000 * MS + rnd() % (1000 * MS),
					 i % 2 ? 1000 * MS : 0), 0);
	}
	for (int i = 0; i < 1000; i++)
		CHECK_EQ(corio_spawn(pending_sleeper, NULL, NULL, NULL), 0);
	CHECK_EQ(corio_sleep_ns(MS), 0);
	CHECK_EQ(corio_timer_stats_get(NULL, corio_shard_id(), &st), 0);
	CHECK_EQ(st.active, NPEND + 1000);
	atomic_fetch_add(&shards_armed, 1);
	if (corio_shard_id() == 0) {
		while (atomic_load(&shards_armed) < corio_shard_count())
			CHECK_EQ(corio_sleep_ns(MS), 0);
		corio_shutdown();
	}
	CHECK_EQ(corio_sleep_ns(3600 * 1000 * MS), -ECANCELED);
}

Test(timer, shutdown_with_100k_pending_timers, .timeout = 60)
{
	struct corio_config cfg = th_cfg(2);
	struct corio_timer *t = calloc(2 * NPEND, sizeof(*t));

	th_run(&cfg, shutdown_entry, t);
	cr_assert_eq(atomic_load(&cancelled_cbs), 2 * NPEND);
	cr_assert_eq(atomic_load(&cancelled_sleeps), 2 * 1000);
	for (unsigned i = 0; i < 2 * NPEND; i++)
		cr_assert(!corio_timer_armed(&t[i]));
	free(t); /* safe: the runtime let go of every timer */
}

/* ---- misuse and statistics ----------------------------------------------------------- */

static void misuse_entry(void *arg)
{
	struct corio_timer t;
	struct corio_timer_stats st0, st1;

	(void)arg;
	CHECK_EQ(corio_timer_init(NULL, NULL, NULL), -EINVAL);
	CHECK_EQ(corio_timer_arm(NULL, 0, 0), -EINVAL);
	CHECK_EQ(corio_timer_cancel(NULL), -EINVAL);
	CHECK_EQ(corio_timer_wait(NULL), -EINVAL);
	CHECK_EQ(corio_deadline_push(NULL, 1), -EINVAL);
	corio_timer_init(&t, count_cb, NULL);
	CHECK_EQ(corio_timer_wait(&t), -EINVAL); /* has a callback */
	CHECK_EQ(corio_timer_stats_get(NULL, 99, &st0), -EINVAL);

	/* a zeroed timer is a valid unarmed one */
	memset(&t, 0, sizeof(t));
	CHECK_EQ(corio_timer_cancel(&t), -ENOENT);

	/* statistics move by what was done */
	CHECK_EQ(corio_timer_stats_get(NULL, 0, &st0), 0);
	for (int i = 0; i < 100; i++) {
		CHECK_EQ(corio_timer_arm_in(&t, 1000 * MS, 0), 0);
		CHECK_EQ(corio_timer_cancel(&t), 0);
	}
	for (int i = 0; i < 10; i++)
		CHECK_EQ(corio_sleep_ns(100000), 0);
	CHECK_EQ(corio_timer_stats_get(NULL, 0, &st1), 0);
	CHECK_EQ(st1.armed - st0.armed, 110);
	CHECK_EQ(st1.cancelled - st0.cancelled, 100);
	CHECK_EQ(st1.fired - st0.fired, 10);
	CHECK_EQ(st1.active, 0);
	{
		uint64_t n = 0;

		for (unsigned b = 0; b < CORIO_TIMER_HIST_BUCKETS; b++)
			n += st1.lateness_hist[b];
		CHECK_EQ(n, st1.fired);
	}
	CHECK(corio_timer_lateness_quantile(&st1, 1.0) >= corio_timer_lateness_quantile(&st1, 0.5));
	CHECK(corio_timer_lateness_quantile(&st1, 1.0) <= st1.lateness_max_ns * 5 / 4 + 4);
}

Test(timer, misuse_and_stats, .timeout = 30) { run1(misuse_entry, NULL); }

Test(timer, histogram_buckets_cover_every_value)
{
	uint64_t prev = 0;

	for (unsigned b = 0; b < CORIO_TIMER_HIST_BUCKETS - 4; b++) {
		uint64_t up = corio_timer_hist_bucket_ns(b);

		cr_assert(b == 0 || up > prev, "bucket %u", b);
		cr_assert(b < 8 || up - prev <= prev / 4 + 1, "bucket %u too wide", b);
		prev = up;
	}
}

static int off_shard_arm(void)
{
	struct corio_timer t = { 0 };

	return corio_timer_arm(&t, 1, 0);
}

static int off_shard_sleep(void)
{
	return corio_sleep_ns(1);
}

static int off_shard_deadline(void)
{
	struct corio_deadline d;

	return corio_deadline_push(&d, 1);
}

Test(timer, off_shard_calls_fail_cleanly, .timeout = 30)
{
	cr_assert_eq(corio_deadline_ns(), 0);
	th_misuse(off_shard_arm, "corio_timer_arm");
	th_misuse(off_shard_sleep, "corio_sleep_ns");
	th_misuse(off_shard_deadline, "corio_deadline_push");
}

/* Spinning shards arm the kernel timeout only when they may block. */
static void idle_modes(enum corio_idle idle)
{
	struct corio_config cfg = th_cfg(1);
	struct order *o = calloc(1, sizeof(*o));

	cfg.idle = idle;
	cfg.spin_us = 20;
	th_run(&cfg, order_entry, o);
	cr_assert_eq(o->nfired, NORDER);
	cr_assert_eq(o->early, 0);
	for (unsigned i = 1; i < NORDER; i++)
		cr_assert_geq(o->fired_deadline[i], o->fired_deadline[i - 1]);
	free(o);
	th_run(&cfg, scope_entry, NULL);
	th_run(&cfg, periodic_entry, NULL);
}

Test(timer, idle_spin, .timeout = 60) { idle_modes(CORIO_IDLE_SPIN); }
Test(timer, idle_poll, .timeout = 60) { idle_modes(CORIO_IDLE_POLL); }

/*
 * A due timer on a busy shard. Two fibers yield in a loop, so the loop
 * never blocks and never waits for the kernel's timeout: the timer must be
 * caught by the loop's own look at the heap, each turn. Counted, not
 * timed: the yielders count the yields they make after the sleeper's
 * deadline has passed (by the clock) until the sleeper runs again. A turn
 * is two yields here, and the sleeper is made ready in the turn that finds
 * it due, so a handful is the expected count (up to 6 seen on both
 * backends); a loop that fired timers only when it waited, or only on the
 * kernel timeout's completion reaped some turns later, would count
 * thousands. Preemption only delays the yields, it does not add any. Runs
 * on the backend CORIO_BACKEND names (the suite runs on both).
 */
#define BUSY_SLEEPS 20
#define BUSY_MAX_YIELDS 64

static struct {
	uint64_t deadline; /* 0: nobody sleeps */
	unsigned after;    /* yields made past the deadline */
	bool stop;
} busy;

static int busy_yielder(void *arg)
{
	(void)arg;
	while (!busy.stop) {
		if (busy.deadline && corio_now_ns() >= busy.deadline)
			busy.after++;
		corio_yield();
	}
	return 0;
}

static void busy_entry(void *arg)
{
	struct corio_fiber *y[2];
	unsigned worst = 0;
	char why[96];

	(void)arg;
	for (int i = 0; i < 2; i++)
		CHECK_EQ(corio_spawn(busy_yielder, NULL, NULL, &y[i]), 0);
	for (int i = 0; i < BUSY_SLEEPS; i++) {
		uint64_t d = corio_now_ns() + 2 * MS;

		busy.after = 0;
		busy.deadline = d;
		CHECK_EQ(corio_sleep_until(d), 0);
		busy.deadline = 0;
		CHECK(corio_now_ns() >= d); /* never early */
		if (busy.after > worst)
			worst = busy.after;
	}
	busy.stop = true;
	for (int i = 0; i < 2; i++)
		CHECK_EQ(corio_join(y[i], NULL), 0);
	if (worst > BUSY_MAX_YIELDS) {
		snprintf(why, sizeof(why), "a due sleep waited for %u yields of a busy shard", worst);
		th_fail(__FILE__, __LINE__, why);
	}
}

Test(timer, due_timer_fires_within_a_few_turns_of_a_busy_shard, .timeout = 30)
{
	run1(busy_entry, NULL);
}

/*
 * Misuse on a shard's loop, outside any fiber: a blocking call from a timer
 * callback or from a corio_post() function, and an unbalanced
 * corio_deadline_pop(). The default (release) build returns the documented
 * -EPERM / -EINVAL with a message naming the call the user made (it used to
 * abort, naming corio__op_may_start and friends); debug builds abort with
 * that message (th_misuse_ex checks whichever this build promises).
 */
static int misuse_ret;
static struct corio_event misuse_done;

static void misuse_note(int ret)
{
	misuse_ret = ret;
	snprintf(th_misuse_err, sizeof(th_misuse_err), "%s", corio_last_error());
	corio_event_set(&misuse_done);
}

static void misuse_timer_cb(struct corio_timer *t, void *arg, int res)
{
	(void)t;
	(void)arg;
	(void)res;
	misuse_note(corio_sleep_ns(1));
}

static void misuse_posted(void *arg)
{
	struct corio_event ev;

	(void)arg;
	corio_event_init(&ev);
	corio_event_set(&ev); /* set: the call would not even have to park */
	misuse_note(corio_event_wait(&ev));
}

static void loop_misuse_entry(void *arg)
{
	int which = (int)(intptr_t)arg;
	struct corio_timer t;

	corio_event_init(&misuse_done);
	if (which == 0) {
		corio_timer_init(&t, misuse_timer_cb, NULL);
		CHECK_EQ(corio_timer_arm_in(&t, 0, 0), 0);
	} else if (which == 1) {
		CHECK_EQ(corio_post(corio_shard_id(), misuse_posted, NULL), 0);
	} else {
		struct corio_deadline outer, inner;

		CHECK_EQ(corio_timeout_push(&outer, 1000 * MS), 0);
		CHECK_EQ(corio_timeout_push(&inner, 1000 * MS), 0);
		misuse_ret = corio_deadline_pop(&outer); /* not the innermost */
		snprintf(th_misuse_err, sizeof(th_misuse_err), "%s", corio_last_error());
		/* nothing changed: the scopes still close in order */
		CHECK_EQ(corio_deadline_pop(&inner), 0);
		CHECK_EQ(corio_deadline_pop(&outer), 0);
		return;
	}
	CHECK_EQ(corio_event_wait(&misuse_done), 0);
}

static int misuse_run(int which)
{
	struct corio_config cfg = th_cfg(1);
	int ret = corio_run(&cfg, loop_misuse_entry, (void *)(intptr_t)which);

	return ret || atomic_load(&th_failures) ? -1000 : misuse_ret;
}

static int misuse_from_timer_cb(void) { return misuse_run(0); }
static int misuse_from_posted_fn(void) { return misuse_run(1); }
static int misuse_unbalanced_pop(void) { return misuse_run(2); }

Test(timer, misuse_on_the_loop_returns_the_documented_error, .timeout = 60)
{
	th_misuse(misuse_from_timer_cb, "corio_sleep_ns: called from a callback");
	th_misuse(misuse_from_posted_fn, "corio_event_wait: called from a callback");
	th_misuse_ex(misuse_unbalanced_pop, "corio_deadline_pop", -EINVAL);
}

/* ---- a callback that re-arms its timer in the past --------------------------------- */

/*
 * A timer whose callback re-arms it at a time already past (or at now,
 * which is past by the next look) has work on every loop turn. The loop
 * must still submit and reap between its callbacks: a TCP echo on the same
 * shard answers two clients, one after the other. Run in a forked child
 * with a bounded wait, since the bug starves the shard's sockets forever.
 */
enum { REARM_PAST = 1, REARM_NOW = 2 };

static struct {
	struct corio_timer t[2];
	_Atomic int port;
	_Atomic unsigned long fired;
	unsigned which;
} rp;

static void past_cb(struct corio_timer *t, void *arg, int res)
{
	(void)arg;
	if (res < 0)
		return; /* shutdown */
	atomic_fetch_add(&rp.fired, 1);
	corio_timer_arm(t, t == &rp.t[0] ? 1 : corio_now_ns(), 0);
}

static int past_echo(void *arg)
{
	struct corio_sock *s = arg;
	char buf[64];
	ssize_t n;

	while ((n = corio_recv(s, buf, sizeof(buf))) > 0)
		if (corio_send(s, buf, (size_t)n) != n)
			break;
	corio_close(s);
	return 0;
}

static void past_entry(void *arg)
{
	struct corio_listener *l;
	struct corio_sock *s;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	(void)arg;
	if (corio_tcp_listen("127.0.0.1:0", NULL, &l) || corio_listener_addr(l, &ss, &len)) {
		atomic_store(&rp.port, -1);
		return;
	}
	for (int i = 0; i < 2; i++) {
		corio_timer_init(&rp.t[i], past_cb, NULL);
		if (rp.which & (1u << i))
			corio_timer_arm(&rp.t[i], i == 0 ? 1 : corio_now_ns(), 0);
	}
	atomic_store(&rp.port, corio_addr_port((struct sockaddr *)&ss));
	while (corio_accept(l, &s) == 0)
		if (corio_spawn(past_echo, s, NULL, NULL))
			corio_close(s);
	for (int i = 0; i < 2; i++)
		corio_timer_cancel(&rp.t[i]);
	corio_listener_close(l);
}

/* One client: connect, send, and read the echo within 5 s. 0 when it came. */
static int echo_once(int port, const char *msg)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port) };
	size_t n = strlen(msg), got = 0;
	char buf[64];
	int fd = socket(AF_INET, SOCK_STREAM, 0), ret = 1;

	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) || send(fd, msg, n, 0) != (ssize_t)n)
		goto out;
	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 5000) != 1)
			goto out; /* no answer: the shard never served the socket */
		r = recv(fd, buf + got, sizeof(buf) - got, 0);
		if (r <= 0)
			goto out;
		got += (size_t)r;
	}
	ret = memcmp(buf, msg, n) != 0;
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

static int past_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	struct corio_rt *rt;
	int port;

	rp.which = (unsigned)(uintptr_t)arg;
	cfg.flags |= CORIO_F_NO_PIN;
	if (corio_start(&cfg, past_entry, NULL, &rt))
		return 2;
	while ((port = atomic_load(&rp.port)) == 0)
		usleep(1000);
	if (port < 0)
		return 3;
	if (echo_once(port, "first client"))
		return 4;
	if (echo_once(port, "another client"))
		return 5;
	if (atomic_load(&rp.fired) < 2)
		return 6; /* the timers must really have been re-firing meanwhile */
	corio_stop(rt);
	return corio_wait(rt) ? 7 : 0;
}

Test(timer, rearm_in_the_past_still_serves_io, .timeout = 60)
{
	th_child_ok(past_child, (void *)(uintptr_t)REARM_PAST, 20000, "re-armed in the past");
}

Test(timer, rearm_at_now_still_serves_io, .timeout = 60)
{
	th_child_ok(past_child, (void *)(uintptr_t)REARM_NOW, 20000, "re-armed at now");
}

Test(timer, rearm_past_and_now_still_serve_io, .timeout = 60)
{
	th_child_ok(past_child, (void *)(uintptr_t)(REARM_PAST | REARM_NOW), 20000,
		    "re-armed in the past and at now");
}

/* ---- durations near 2^64 ns saturate, never wrap into the past ------------------------ */

static int huge_sleeper(void *arg)
{
	struct corio_deadline d;
	int ret;

	(void)arg;
	/* a sleep of 2^64-1 ns (or 2^63) ends at its enclosing 1 ms scope, not at once */
	corio_timeout_push(&d, 1 * MS);
	ret = corio_sleep_ns(UINT64_MAX);
	corio_deadline_pop(&d);
	CHECK_EQ(ret, -ETIMEDOUT);
	corio_timeout_push(&d, 1 * MS);
	ret = corio_sleep_ns(1ull << 63);
	corio_deadline_pop(&d);
	CHECK_EQ(ret, -ETIMEDOUT);
	return 0;
}

static int huge_cb_calls;

static void huge_cb(struct corio_timer *t, void *arg, int res)
{
	(void)t;
	(void)arg;
	if (res > 0)
		huge_cb_calls++;
}

static void huge_entry(void *arg)
{
	const uint64_t big[] = { UINT64_MAX, UINT64_MAX - 1, 1ull << 63, (1ull << 63) + 12345,
				 9223372036854ull * 1000000ull };
	struct corio_deadline d;
	struct corio_timer t;
	struct corio_fiber *f;
	uint64_t now = corio_now_ns();

	(void)arg;
	for (unsigned i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		/* a timeout scope: its deadline is now + big, or UINT64_MAX */
		CHECK_EQ(corio_timeout_push(&d, big[i]), 0);
		CHECK(corio_deadline_ns() >= now + (big[i] > UINT64_MAX - now ? 0 : big[i]));
		CHECK(corio_deadline_ns() >= now);
		CHECK(big[i] <= UINT64_MAX - now || corio_deadline_ns() == UINT64_MAX);
		corio_deadline_pop(&d);

		/* a timer armed that far out is not due */
		corio_timer_init(&t, huge_cb, NULL);
		CHECK_EQ(corio_timer_arm_in(&t, big[i], big[i]), 0);
		CHECK(corio_timer_deadline(&t) >= now);
		CHECK(big[i] <= UINT64_MAX - now || corio_timer_deadline(&t) == UINT64_MAX);
		corio_yield();
		corio_yield();
		CHECK_EQ(huge_cb_calls, 0);
		CHECK_EQ(corio_timer_cancel(&t), 0);
	}
	/* a periodic timer with a 2^63-scale period, first due now: it fires
	 * once, and its next tick saturates instead of wrapping into the past */
	corio_timer_init(&t, huge_cb, NULL);
	CHECK_EQ(corio_timer_arm(&t, corio_now_ns(), UINT64_MAX - 1), 0);
	while (!huge_cb_calls)
		corio_yield();
	for (int i = 0; i < 10; i++)
		corio_yield();
	CHECK_EQ(huge_cb_calls, 1);
	CHECK_EQ(corio_timer_deadline(&t), UINT64_MAX);
	CHECK_EQ(corio_timer_cancel(&t), 0);

	CHECK_EQ(corio_spawn(huge_sleeper, NULL, NULL, &f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
}

Test(timer, durations_near_2_to_64_saturate, .timeout = 30) { run1(huge_entry, NULL); }
