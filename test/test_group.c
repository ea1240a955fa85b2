/* SPDX-License-Identifier: MIT */
/*
 * Fiber groups: results collected, the first error reported and the others
 * cancelled, no member outliving corio_group_wait()/close() whatever ends
 * the wait (cancel, deadline), members that never ran, groups in selects.
 */
#include "helpers.h"

#include <corio/select.h> /* also reached through corio.h */

struct job {
	int id;
	struct corio_event *go; /* NULL: finish at once */
	int fail;               /* status to return after go, 0: id * 10 */
	int *ended;             /* counts members that ran to their end */
};

static int job_main(void *arg)
{
	struct job *j = arg;
	int ret;

	corio_yield();
	if (j->go && (ret = corio_event_wait(j->go)) < 0)
		return ret;
	if (j->ended)
		(*j->ended)++;
	return j->fail ? j->fail : j->id * 10;
}

static int sleeps_forever(void *arg)
{
	int ret = corio_sleep_ns(3600ull * 1000000000);

	if (arg)
		(*(int *)arg)++; /* counts members that saw their cancel */
	return ret;
}

/* ---- results ---------------------------------------------------------------- */
static void results_entry(void *arg)
{
	struct corio_group g;
	struct job jobs[50];
	int status[50];
	unsigned idx = 99;

	(void)arg;
	CHECK_EQ(corio_group_init(&g, 0), 0);
	for (int i = 0; i < 50; i++) {
		jobs[i] = (struct job){ .id = i };
		status[i] = -1;
		CHECK_EQ(corio_group_spawn(&g, job_main, &jobs[i], NULL, &status[i]), i);
	}
	CHECK_EQ(corio_group_live(&g), 50);
	CHECK_EQ(corio_group_wait(&g), 0);
	CHECK_EQ(corio_group_live(&g), 0);
	for (int i = 0; i < 50; i++)
		CHECK_EQ(status[i], i * 10);
	CHECK_EQ(corio_group_error(&g, &idx), 0);
	CHECK_EQ(idx, 99);
	CHECK_EQ(corio_group_wait(&g), 0); /* nothing left: at once */
	CHECK_EQ(corio_group_close(&g), 0);

	/* bad input */
	CHECK_EQ(corio_group_init(NULL, 0), -EINVAL);
	CHECK_EQ(corio_group_init(&g, 0x80), -EINVAL);
	CHECK_EQ(corio_group_init(&g, 0), 0);
	CHECK_EQ(corio_group_spawn(&g, NULL, NULL, NULL, NULL), -EINVAL);
	CHECK_EQ(corio_group_spawn(NULL, job_main, NULL, NULL, NULL), -EINVAL);
	CHECK_EQ(corio_group_spawn(&g, job_main, &jobs[0],
				   &(struct corio_spawn_opts){ .flags = 1 }, NULL),
		 -EINVAL);
	CHECK_EQ(corio_group_wait(NULL), -EINVAL);
	CHECK_EQ(corio_group_cancel(NULL), -EINVAL);
	CHECK_EQ(corio_group_live(&g), 0);
}

Test(group, collects_results, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, results_entry, NULL);
}

/* ---- the first error cancels the others --------------------------------------- */
static void first_error_entry(void *arg)
{
	struct corio_group g;
	struct corio_event go;
	struct job bad = { .id = 3, .fail = -EIO }, late = { .id = 4, .fail = -EPROTO };
	int status[8], cancelled = 0;
	unsigned idx = 99;
	uint64_t t0 = corio_now_ns();

	(void)arg;
	corio_event_init(&go);
	bad.go = &go;
	late.go = &go;
	CHECK_EQ(corio_group_init(&g, CORIO_GROUP_CANCEL_ON_ERROR), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(corio_group_spawn(&g, sleeps_forever, &cancelled, NULL, &status[i]), i);
	CHECK_EQ(corio_group_spawn(&g, job_main, &bad, NULL, &status[3]), 3);
	CHECK_EQ(corio_group_spawn(&g, sleeps_forever, &cancelled, NULL, &status[4]), 4);
	corio_yield(); /* everyone parks */
	corio_yield();
	corio_event_set(&go); /* member 3 fails */
	CHECK_EQ(corio_group_wait(&g), -EIO);
	CHECK_EQ(corio_group_error(&g, &idx), -EIO);
	CHECK_EQ(idx, 3);
	CHECK_EQ(corio_group_live(&g), 0);
	CHECK_EQ(cancelled, 4);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(status[i], i == 3 ? -EIO : -ECANCELED);
	CHECK(corio_now_ns() - t0 < 10ull * 1000000000); /* nobody slept an hour */
	/* a cancelled group takes no new members */
	CHECK_EQ(corio_group_spawn(&g, job_main, &late, NULL, NULL), -ECANCELED);

	/* Without CANCEL_ON_ERROR the others run to their end; the first error
	 * (in the order they ended) is reported. */
	{
		struct job j[4];
		int ended = 0;

		CHECK_EQ(corio_group_init(&g, 0), 0);
		corio_event_reset(&go);
		for (int i = 0; i < 4; i++) {
			j[i] = (struct job){ .id = i, .go = &go, .ended = &ended };
			if (i == 1)
				j[i].fail = -ENOSPC;
			if (i == 2)
				j[i].fail = -EPERM;
			CHECK_EQ(corio_group_spawn(&g, job_main, &j[i], NULL, &status[i]), i);
		}
		corio_event_set(&go);
		CHECK_EQ(corio_group_wait(&g), -ENOSPC);
		CHECK_EQ(corio_group_error(&g, &idx), -ENOSPC);
		CHECK_EQ(idx, 1);
		CHECK_EQ(ended, 4);
		CHECK_EQ(status[2], -EPERM);
		CHECK_EQ(status[3], 30);
	}
}

Test(group, first_error_cancels_the_rest, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, first_error_entry, NULL);
}

/* ---- nothing is left behind -------------------------------------------------------- */
struct owner {
	struct corio_group g;
	int cancelled;
	int ret;
	unsigned live_after;
};

static int owner_waits(void *arg)
{
	struct owner *o = arg;

	CHECK_EQ(corio_group_init(&o->g, 0), 0);
	for (int i = 0; i < 10; i++)
		CHECK(corio_group_spawn(&o->g, sleeps_forever, &o->cancelled, NULL, NULL) >= 0);
	o->ret = corio_group_wait(&o->g);
	o->live_after = corio_group_live(&o->g);
	return 0;
}

static int exits_early(void *arg)
{
	(void)arg;
	corio_exit(-EL2HLT);
}

static void left_behind_entry(void *arg)
{
	struct owner o = { .ret = -100, .live_after = 99 };
	struct corio_deadline d;
	struct corio_fiber *f;
	struct corio_group g;
	int st[3] = { 1, 1, 1 }, cancelled = 0;

	(void)arg;
	/* The waiter is cancelled: members are cancelled and joined first. */
	CHECK_EQ(corio_spawn(owner_waits, &o, NULL, &f), 0);
	corio_yield();
	corio_yield();
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(o.ret, -ECANCELED);
	CHECK_EQ(o.live_after, 0);
	CHECK_EQ(o.cancelled, 10);
	CHECK_EQ(corio_group_error(&o.g, NULL), 0); /* cancelled by us: no error */

	/* A deadline scope around the wait: -ETIMEDOUT, nobody left. */
	CHECK_EQ(corio_group_init(&g, 0), 0);
	for (int i = 0; i < 3; i++)
		CHECK(corio_group_spawn(&g, sleeps_forever, &cancelled, NULL, NULL) >= 0);
	corio_yield(); /* they are asleep before the scope begins (else a late
			  wait could find it passed before they ever ran) */
	CHECK_EQ(corio_timeout_push(&d, 2000000), 0);
	CHECK_EQ(corio_group_wait(&g), -ETIMEDOUT);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_group_live(&g), 0);
	CHECK_EQ(cancelled, 3);

	/* close: members that never ran end with -ECANCELED without running;
	 * a member's corio_exit() status is collected like a return. */
	CHECK_EQ(corio_group_init(&g, 0), 0);
	CHECK_EQ(corio_group_spawn(&g, exits_early, NULL, NULL, &st[0]), 0);
	corio_yield();
	CHECK_EQ(corio_group_spawn(&g, sleeps_forever, NULL, NULL, &st[1]), 1);
	CHECK_EQ(corio_group_spawn(&g, sleeps_forever, NULL, NULL, &st[2]), 2);
	CHECK_EQ(corio_group_close(&g), -EL2HLT);
	CHECK_EQ(st[0], -EL2HLT);
	CHECK_EQ(st[1], -ECANCELED);
	CHECK_EQ(st[2], -ECANCELED);
	CHECK_EQ(corio_group_live(&g), 0);

	/* close is not interrupted by the closer's own cancellation */
	CHECK_EQ(corio_group_init(&g, 0), 0);
	cancelled = 0;
	for (int i = 0; i < 3; i++)
		CHECK(corio_group_spawn(&g, sleeps_forever, &cancelled, NULL, NULL) >= 0);
	corio_yield();
	corio_cancel(corio_self());
	CHECK_EQ(corio_group_close(&g), 0);
	CHECK_EQ(corio_group_live(&g), 0);
	CHECK_EQ(cancelled, 3);
}

Test(group, nothing_left_behind, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, left_behind_entry, NULL);
}

/* ---- members spawning members, waiting on their own group, groups in selects -------- */
struct tree {
	struct corio_group g;
	int depth_sum;
	int self_wait;
};

static int grows(void *arg)
{
	struct tree *t = arg;

	t->depth_sum++;
	if (t->depth_sum < 20)
		CHECK(corio_group_spawn(&t->g, grows, t, NULL, NULL) >= 0);
	if (t->depth_sum == 1)
		t->self_wait = corio_group_wait(&t->g);
	return 0;
}

static void misc_entry(void *arg)
{
	struct tree t = { .self_wait = -100 };
	struct corio_sel w[2];
	struct corio_event ev;
	struct job bad = { .id = 1, .fail = -EBADMSG };

	(void)arg;
	CHECK_EQ(corio_group_init(&t.g, 0), 0);
	CHECK_EQ(corio_group_spawn(&t.g, grows, &t, NULL, NULL), 0);
	CHECK_EQ(corio_group_wait(&t.g), 0);
	CHECK_EQ(t.depth_sum, 20);
	CHECK_EQ(t.self_wait, -EDEADLK);

	/* a group as a select item: res is its first error */
	corio_event_init(&ev);
	CHECK_EQ(corio_group_init(&t.g, 0), 0);
	CHECK_EQ(corio_group_spawn(&t.g, job_main, &bad, NULL, NULL), 0);
	corio_sel_event(&w[0], &ev);
	corio_sel_group(&w[1], &t.g);
	CHECK_EQ(corio_select(w, 2), 1);
	CHECK_EQ(w[1].res, -EBADMSG);
	CHECK_EQ(corio_group_live(&t.g), 0);
	CHECK(t.g.wq.head == NULL);
}

Test(group, members_spawn_and_select, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, misc_entry, NULL);
}

/* ---- runtime shutdown with a group waiting ------------------------------------------ */
static int stops_runtime(void *arg)
{
	(void)arg;
	corio_yield();
	corio_shutdown();
	return 0;
}

struct counted {
	int started, cancelled;
};

static int counts_its_cancel(void *arg)
{
	struct counted *c = arg;

	c->started++;
	return sleeps_forever(&c->cancelled);
}

/* Both shards run this, and either may shut the runtime down first: a
 * member the other shard's shutdown cancels before it first runs never runs
 * (corio.h) and still ends with -ECANCELED; every member that ran saw its
 * cancel. */
static void shutdown_entry(void *arg)
{
	struct corio_group g;
	struct counted c = { 0 };
	int status[5];

	(void)arg;
	CHECK_EQ(corio_group_init(&g, 0), 0);
	for (int i = 0; i < 5; i++)
		CHECK(corio_group_spawn(&g, counts_its_cancel, &c, NULL, &status[i]) >= 0);
	CHECK_EQ(corio_spawn(stops_runtime, NULL, NULL, NULL), 0);
	CHECK_EQ(corio_group_wait(&g), -ECANCELED);
	CHECK_EQ(corio_group_live(&g), 0);
	CHECK_EQ(c.cancelled, c.started);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(status[i], -ECANCELED);
}

Test(group, runtime_shutdown, .timeout = 30)
{
	struct corio_config cfg = th_cfg(2);

	th_run(&cfg, shutdown_entry, NULL);
}
