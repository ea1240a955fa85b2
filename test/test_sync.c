/* SPDX-License-Identifier: MIT */
/* Shard-local sync: event, wait group, semaphore, mutex, channel. */
#include "helpers.h"

struct shared {
	struct corio_event ev;
	struct corio_wg wg;
	struct corio_sem sem;
	struct corio_mutex mu;
	struct corio_chan ch;
	int woke, inside, max_inside, order[8], norder;
	long sum;
};

static int ev_waiter(void *arg)
{
	struct shared *s = arg;

	CHECK_EQ(corio_event_wait(&s->ev), 0);
	s->woke++;
	corio_wg_done(&s->wg);
	return 0;
}

static void event_entry(void *arg)
{
	struct shared *s = arg;

	corio_event_init(&s->ev);
	corio_wg_init(&s->wg);
	corio_wg_add(&s->wg, 5);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(corio_spawn(ev_waiter, s, NULL, NULL), 0);
	corio_yield();
	CHECK_EQ(s->woke, 0); /* all parked */
	corio_event_set(&s->ev);
	CHECK_EQ(corio_wg_wait(&s->wg), 0);
	CHECK_EQ(s->woke, 5);
	CHECK_EQ(corio_event_wait(&s->ev), 0); /* set: no wait */
	corio_event_reset(&s->ev);
	CHECK_EQ(s->ev.set, 0);
}

Test(sync, event_wakes_all_and_wait_group_counts, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct shared s;

	memset(&s, 0, sizeof(s));
	th_run(&cfg, event_entry, &s);
}

/* Semaphore of 2: never more than 2 inside; hand-off keeps FIFO order. */
static int sem_user(void *arg)
{
	struct shared *s = arg;

	CHECK_EQ(corio_sem_acquire(&s->sem), 0);
	if (++s->inside > s->max_inside)
		s->max_inside = s->inside;
	corio_yield();
	corio_yield();
	s->inside--;
	corio_sem_release(&s->sem);
	corio_wg_done(&s->wg);
	return 0;
}

static int mu_user(void *arg)
{
	struct shared *s = arg;

	CHECK_EQ(corio_mutex_lock(&s->mu), 0);
	s->order[s->norder++] = (int)corio_fiber_name(corio_self())[0];
	corio_yield(); /* others must queue behind us */
	CHECK_EQ(corio_mutex_trylock(&s->mu), -EBUSY);
	corio_mutex_unlock(&s->mu);
	corio_wg_done(&s->wg);
	return 0;
}

static void sem_mutex_entry(void *arg)
{
	struct shared *s = arg;
	char names[4][2] = { "a", "b", "c", "d" };

	corio_wg_init(&s->wg);
	corio_sem_init(&s->sem, 2);
	corio_wg_add(&s->wg, 10);
	for (int i = 0; i < 10; i++)
		CHECK_EQ(corio_spawn(sem_user, s, NULL, NULL), 0);
	CHECK_EQ(corio_wg_wait(&s->wg), 0);
	CHECK_EQ(s->max_inside, 2);
	CHECK_EQ(s->sem.count, 2);
	CHECK_EQ(corio_sem_try_acquire(&s->sem), 0);
	CHECK_EQ(corio_sem_try_acquire(&s->sem), 0);
	CHECK_EQ(corio_sem_try_acquire(&s->sem), -EAGAIN);

	corio_mutex_init(&s->mu);
	corio_wg_add(&s->wg, 4);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(corio_spawn(mu_user, s, &(struct corio_spawn_opts){ .name = names[i] }, NULL),
			 0);
	CHECK_EQ(corio_wg_wait(&s->wg), 0);
	CHECK_EQ(s->norder, 4);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(s->order[i], 'a' + i); /* FIFO hand-off */
	CHECK(s->mu.owner == NULL);
}

Test(sync, semaphore_and_mutex, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct shared s;

	memset(&s, 0, sizeof(s));
	th_run(&cfg, sem_mutex_entry, &s);
}

/* Channel: 4 producers, 2 consumers, capacity 3; every value once; close. */
static int producer(void *arg)
{
	struct shared *s = arg;

	for (long i = 1; i <= 1000; i++)
		CHECK_EQ(corio_chan_send(&s->ch, &i), 0);
	corio_wg_done(&s->wg);
	return 0;
}

static int consumer(void *arg)
{
	struct shared *s = arg;
	long v;
	int ret;

	while ((ret = corio_chan_recv(&s->ch, &v)) == 0)
		s->sum += v;
	CHECK_EQ(ret, -EPIPE);
	return 0;
}

static void chan_entry(void *arg)
{
	struct shared *s = arg;
	struct corio_fiber *c[2];
	long v = 1;

	corio_wg_init(&s->wg);
	CHECK_EQ(corio_chan_init(&s->ch, sizeof(long), 0), -EINVAL);
	CHECK_EQ(corio_chan_init(&s->ch, sizeof(long), 3), 0);
	corio_wg_add(&s->wg, 4);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(corio_spawn(consumer, s, NULL, &c[i]), 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(corio_spawn(producer, s, NULL, NULL), 0);
	CHECK_EQ(corio_wg_wait(&s->wg), 0);
	corio_chan_close(&s->ch);
	CHECK_EQ(corio_join(c[0], NULL), 0);
	CHECK_EQ(corio_join(c[1], NULL), 0);
	CHECK_EQ(s->sum, 4L * 1000 * 1001 / 2);
	CHECK_EQ(corio_chan_send(&s->ch, &v), -EPIPE);
	CHECK_EQ(corio_chan_try_recv(&s->ch, &v), -EPIPE);
	corio_chan_destroy(&s->ch);
}

Test(sync, channel_delivers_every_value_once, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct shared s;

	memset(&s, 0, sizeof(s));
	th_run(&cfg, chan_entry, &s);
}

/* A cancelled waiter leaves the queue; the others still get their wake-ups. */
static int chan_waiter(void *arg)
{
	struct shared *s = arg;
	long v;

	return corio_chan_recv(&s->ch, &v);
}

static void cancel_waiter_entry(void *arg)
{
	struct shared *s = arg;
	struct corio_fiber *a, *b;
	long v = 9;
	int st;

	CHECK_EQ(corio_chan_init(&s->ch, sizeof(long), 1), 0);
	CHECK_EQ(corio_spawn(chan_waiter, s, NULL, &a), 0);
	CHECK_EQ(corio_spawn(chan_waiter, s, NULL, &b), 0);
	corio_yield();
	CHECK_EQ(corio_cancel(a), 0);
	CHECK_EQ(corio_chan_send(&s->ch, &v), 0);
	CHECK_EQ(corio_join(a, &st), 0);
	CHECK_EQ(st, -ECANCELED);
	CHECK_EQ(corio_join(b, &st), 0);
	CHECK_EQ(st, 0);
	corio_chan_destroy(&s->ch);
}

Test(sync, cancelled_waiter_leaves_the_queue, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	struct shared s;

	memset(&s, 0, sizeof(s));
	th_run(&cfg, cancel_waiter_entry, &s);
}

/*
 * corio.h's rule: a cancelled fiber, or one past its deadline scope, gets
 * -ECANCELED / -ETIMEDOUT from every blocking call, also when the call
 * would not have had to park, and nothing is taken. These used to return 0
 * (a set event, a zero count, a free permit or mutex, a queued element,
 * room in a channel, a pending timer expiration, an empty group), so a
 * cancelled worker kept fed never saw its cancellation.
 */
static void need_not_park_checks(int want)
{
	struct corio_event ev;
	struct corio_wg wg;
	struct corio_sem sem;
	struct corio_mutex mu;
	struct corio_chan full, room;
	struct corio_group g;
	struct corio_timer t;
	int x = 5, y = 0;

	corio_event_init(&ev);
	corio_event_set(&ev);
	corio_wg_init(&wg);
	corio_sem_init(&sem, 1);
	corio_mutex_init(&mu);
	CHECK_EQ(corio_chan_init(&full, sizeof(int), 1), 0);
	CHECK_EQ(corio_chan_init(&room, sizeof(int), 1), 0);
	CHECK_EQ(corio_chan_try_send(&full, &x), 0);
	CHECK_EQ(corio_group_init(&g, 0), 0);
	corio_timer_init(&t, NULL, NULL);
	CHECK_EQ(corio_timer_arm_in(&t, 0, 1000 * 1000000ull), 0);

	CHECK_EQ(corio_event_wait(&ev), want);
	CHECK_EQ(corio_wg_wait(&wg), want);
	CHECK_EQ(corio_sem_acquire(&sem), want);
	CHECK_EQ(sem.count, 1); /* the permit was not taken */
	CHECK_EQ(corio_mutex_lock(&mu), want);
	CHECK(mu.owner == NULL);
	CHECK_EQ(corio_chan_recv(&full, &y), want);
	CHECK_EQ(full.len, 1);
	CHECK_EQ(y, 0);
	CHECK_EQ(corio_chan_send(&room, &x), want);
	CHECK_EQ(room.len, 0);
	CHECK_EQ(corio_group_wait(&g), want);
	CHECK_EQ(corio_timer_wait(&t), want); /* pending or not: refused first */
	CHECK_EQ(corio_sleep_ns(0), want);
	CHECK_EQ(corio_nop(), want);
	/* the non-blocking forms still work */
	CHECK_EQ(corio_sem_try_acquire(&sem), 0);
	CHECK_EQ(corio_mutex_trylock(&mu), 0);
	corio_mutex_unlock(&mu);
	CHECK_EQ(corio_chan_try_recv(&full, &y), 0);
	CHECK_EQ(y, 5);
	CHECK_EQ(corio_timer_cancel(&t), 0);
	corio_chan_destroy(&full);
	corio_chan_destroy(&room);
}

static int cancelled_worker(void *arg)
{
	(void)arg;
	CHECK_EQ(corio_cancel(corio_self()), 0);
	need_not_park_checks(-ECANCELED);
	return 0;
}

static void need_not_park_entry(void *arg)
{
	struct corio_deadline d;
	struct corio_fiber *f;

	(void)arg;
	CHECK_EQ(corio_spawn(cancelled_worker, NULL, NULL, &f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_timeout_push(&d, 0), 0); /* expired at once */
	need_not_park_checks(-ETIMEDOUT);
	CHECK_EQ(corio_deadline_pop(&d), 0);
}

Test(sync, cancelled_or_expired_calls_refuse_even_when_they_need_not_park, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, need_not_park_entry, NULL);
}

/* Misuse that release builds survive (corio.h): the state stays sane and
 * corio_last_error() names the call. */
static void sync_misuse_entry(void *arg)
{
	struct corio_wg wg;
	struct corio_mutex mu;

	(void)arg;
	corio_wg_init(&wg);
	corio_wg_done(&wg);
	CHECK_EQ(wg.count, 0);
	CHECK(strstr(corio_last_error(), "corio_wg_done: ") != NULL);
	CHECK_EQ(corio_wg_wait(&wg), 0);
	corio_mutex_init(&mu);
	corio_mutex_unlock(&mu);
	CHECK(mu.owner == NULL);
	CHECK(strstr(corio_last_error(), "corio_mutex_unlock: ") != NULL);
	/* th_misuse_ex's release check: 0 and the last message */
	snprintf(th_misuse_err, sizeof(th_misuse_err), "%s", corio_last_error());
}

static int sync_misuse_run(void)
{
	struct corio_config cfg = th_cfg(1);

	return corio_run(&cfg, sync_misuse_entry, NULL) || atomic_load(&th_failures) ? -1000 : 0;
}

Test(sync, misuse_keeps_the_state_sane_in_release_builds, .timeout = 30)
{
	/* debug builds abort at the first one: corio_wg_done */
#ifdef NDEBUG
	th_misuse_ex(sync_misuse_run, "corio_mutex_unlock", 0);
#else
	th_misuse_ex(sync_misuse_run, "corio_wg_done", 0);
#endif
}
