/* SPDX-License-Identifier: MIT */
/*
 * corio_select(): the right item wins and the losers keep everything (no
 * element, byte or expiration taken; no stand-in left on any queue); a
 * socket, a timer and a channel in each arrangement; 1000 sockets of which
 * one gets data; wake-ups a select does not use are handed on; cancel,
 * deadlines, bad input. Only loopback; no sleeps that hope for an order.
 */
#include "helpers.h"

#include <corio/select.h> /* also reached through corio.h */

#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>


/* No stand-in of a finished select is left on the objects' queues. */
static void check_no_waiters(struct corio_chan *c, struct corio_timer *t)
{
	CHECK(c->recvq.head == NULL && c->sendq.head == NULL);
	CHECK(t->waiters.head == NULL);
}

static int send_later(void *arg)
{
	corio_yield();
	CHECK_EQ(corio_send(arg, "ping", 4), 4);
	return 0;
}

static int chan_later(void *arg)
{
	int v = 42;

	corio_yield();
	CHECK_EQ(corio_chan_send(arg, &v), 0);
	return 0;
}

static void arrangements_entry(void *arg)
{
	struct corio_sock *s = NULL, *c = NULL;
	struct corio_timer t;
	struct corio_chan ch;
	struct corio_sel w[3];
	struct corio_fiber *f;
	char buf[64];
	int v = 0, got;
	ssize_t n;

	(void)arg;
	th_tcp_pair(&s, &c);
	corio_timer_init(&t, NULL, NULL);
	CHECK_EQ(corio_chan_init(&ch, sizeof(int), 4), 0);

	/* A: the socket receives first. */
	CHECK_EQ(corio_timer_arm_in(&t, 10ull * 1000000000, 0), 0);
	CHECK_EQ(corio_spawn(send_later, c, NULL, &f), 0);
	corio_sel_recv(&w[0], s, buf, sizeof(buf));
	corio_sel_timer(&w[1], &t);
	corio_sel_chan_recv(&w[2], &ch, &v);
	CHECK_EQ(corio_select(w, 3), 0);
	CHECK_EQ(w[0].res, 4);
	CHECK(memcmp(buf, "ping", 4) == 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	check_no_waiters(&ch, &t);
	CHECK_EQ(corio_timer_armed(&t), 1); /* the losing timer is still armed */
	v = 7;
	CHECK_EQ(corio_chan_try_send(&ch, &v), 0); /* and the channel still works */
	got = 0;
	CHECK_EQ(corio_chan_try_recv(&ch, &got), 0);
	CHECK_EQ(got, 7);

	/* B: the timer fires first (socket and channel stay silent). */
	CHECK_EQ(corio_timer_arm_in(&t, 2000000, 0), 0);
	corio_sel_recv(&w[0], s, buf, sizeof(buf));
	corio_sel_timer(&w[1], &t);
	corio_sel_chan_recv(&w[2], &ch, &v);
	CHECK_EQ(corio_select(w, 3), 1);
	CHECK_EQ(w[1].res, 1);
	check_no_waiters(&ch, &t);
	/* The socket's receive stayed with the socket: later bytes are read. */
	CHECK_EQ(corio_send(c, "later", 5), 5);
	n = corio_recv(s, buf, sizeof(buf));
	CHECK_EQ(n, 5);
	CHECK(memcmp(buf, "later", 5) == 0);
	CHECK_EQ(corio_chan_try_recv(&ch, &got), -EAGAIN);

	/* C: the channel gets an element first. */
	CHECK_EQ(corio_timer_arm_in(&t, 10ull * 1000000000, 0), 0);
	CHECK_EQ(corio_spawn(chan_later, &ch, NULL, &f), 0);
	v = 0;
	corio_sel_recv(&w[0], s, buf, sizeof(buf));
	corio_sel_timer(&w[1], &t);
	corio_sel_chan_recv(&w[2], &ch, &v);
	CHECK_EQ(corio_select(w, 3), 2);
	CHECK_EQ(w[2].res, 0);
	CHECK_EQ(v, 42);
	CHECK_EQ(corio_join(f, NULL), 0);
	check_no_waiters(&ch, &t);
	CHECK_EQ(corio_send(c, "x", 1), 1);
	n = corio_recv(s, buf, sizeof(buf));
	CHECK_EQ(n, 1);
	CHECK_EQ(corio_timer_cancel(&t), 0); /* was still armed */

	/* All three ready at once: the lowest index wins, the others keep
	 * their element and expiration. Make the socket ready by taking one
	 * byte of two, so the other is queued in its stream. */
	CHECK_EQ(corio_send(c, "yz", 2), 2);
	corio_sel_recv(&w[0], s, buf, 1);
	CHECK_EQ(corio_select(w, 1), 0);
	CHECK_EQ(w[0].res, 1);
	CHECK_EQ(buf[0], 'y');
	CHECK_EQ(corio_timer_arm_in(&t, 0, 0), 0);
	while (corio_timer_armed(&t))
		corio_yield(); /* until it expired (pending: nobody waits) */
	v = 9;
	CHECK_EQ(corio_chan_try_send(&ch, &v), 0);
	v = -1;
	corio_sel_recv(&w[0], s, buf, sizeof(buf));
	corio_sel_timer(&w[1], &t);
	corio_sel_chan_recv(&w[2], &ch, &v);
	CHECK_EQ(corio_select(w, 3), 0);
	CHECK_EQ(w[0].res, 1);
	CHECK_EQ(buf[0], 'z');
	CHECK_EQ(v, -1);
	CHECK_EQ(corio_select(w, 3), 1); /* then the timer's expiration */
	CHECK_EQ(w[1].res, 1);
	CHECK_EQ(corio_select(w, 3), 1); /* a spent one-shot timer: -ENOENT */
	CHECK_EQ(w[1].res, -ENOENT);
	CHECK_EQ(corio_select(&w[2], 1), 0); /* the element is still there */
	CHECK_EQ(v, 9);
	check_no_waiters(&ch, &t);

	corio_chan_destroy(&ch);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_close(s), 0);
}

Test(select, socket_timer_channel, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, arrangements_entry, NULL);
}

Test(select, socket_timer_channel_single_shot_fallback, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	/* user-mode buffers: the socket's stream is a re-armed single-shot recv */
	setenv("CORIO_NET_DISABLE", "bufring,multishot", 1);
	th_run(&cfg, arrangements_entry, NULL);
}

/* ---- 1000 sockets, one of which gets data ---------------------------------- */
#define NSOCK 1000

struct many {
	struct corio_sock *s[NSOCK];
	int peer[NSOCK];
	struct corio_sel w[NSOCK];
	char buf[NSOCK][16];
	int next; /* which peer writes, for the writer fiber */
};

static int write_peer(void *arg)
{
	struct many *m = arg;
	char msg[16];
	int len = snprintf(msg, sizeof(msg), "hi %d", m->next);

	corio_yield(); /* after the select has parked */
	CHECK_EQ(write(m->peer[m->next], msg, (size_t)len), len);
	return 0;
}

static void many_entry(void *arg)
{
	struct many *m = arg;
	struct corio_net_stats st0, st1;
	uint64_t t0;

	for (int i = 0; i < NSOCK; i++) {
		int sv[2];

		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		CHECK_EQ(corio_sock_from_fd(sv[0], &m->s[i]), 0);
		m->peer[i] = sv[1];
	}
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st0), 0);
	t0 = corio_now_ns();
	for (int round = 0; round < 20; round++) {
		int k = (round * 337 + 11) % NSOCK, got;
		char want[16];

		for (int i = 0; i < NSOCK; i++)
			corio_sel_recv(&m->w[i], m->s[i], m->buf[i], sizeof(m->buf[i]));
		snprintf(want, sizeof(want), "hi %d", k);
		m->next = k;
		if (round % 2) {
			struct corio_fiber *f;

			CHECK_EQ(corio_spawn(write_peer, m, NULL, &f), 0);
			got = corio_select(m->w, NSOCK);
			CHECK_EQ(corio_join(f, NULL), 0);
		} else {
			/* written before: seen at once or after it lands */
			CHECK_EQ(write(m->peer[k], want, strlen(want)), (ssize_t)strlen(want));
			got = corio_select(m->w, NSOCK);
		}
		CHECK_EQ(got, k);
		if (got == k) {
			CHECK_EQ(m->w[k].res, (ssize_t)strlen(want));
			CHECK(memcmp(m->buf[k], want, strlen(want)) == 0);
		}
	}
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st1), 0);
	CHECK_EQ(st1.ops_in - st0.ops_in, 20); /* one completion per message, no more */
	printf("select over %d sockets: %.1f us per round\n", NSOCK,
	       (double)(corio_now_ns() - t0) / 20 / 1000);
	/* The 999 losers of the last round still have their receives armed;
	 * close cancels each and waits for its final completion. */
	for (int i = 0; i < NSOCK; i++) {
		CHECK_EQ(corio_close(m->s[i]), 0);
		close(m->peer[i]);
	}
}

Test(select, one_of_1000_sockets, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct many *m = calloc(1, sizeof(*m));
	struct rlimit rl;

	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_max < 2 * NSOCK + 100)
		cr_skip_test("RLIMIT_NOFILE hard limit %lu is too low", (unsigned long)rl.rlim_max);
	if (rl.rlim_cur < 2 * NSOCK + 100) {
		rl.rlim_cur = 2 * NSOCK + 100;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	th_run(&cfg, many_entry, m);
	free(m);
}

/* ---- a wake-up the select does not use is handed on ------------------------- */
struct handon {
	struct corio_event ev;
	struct corio_chan ch;
	int sel_ret, recv_val;
};

static int handon_selector(void *arg)
{
	struct handon *h = arg;
	struct corio_sel w[2];
	int v = -1;

	corio_sel_event(&w[0], &h->ev);
	corio_sel_chan_recv(&w[1], &h->ch, &v);
	h->sel_ret = corio_select(w, 2);
	CHECK_EQ(v, -1); /* the event won: nothing taken from the channel */
	return 0;
}

static int handon_receiver(void *arg)
{
	struct handon *h = arg;

	return corio_chan_recv(&h->ch, &h->recv_val);
}

static void handon_entry(void *arg)
{
	struct handon h = { .sel_ret = -100 };
	struct corio_fiber *a, *b;
	int v = 5, st = -1;

	(void)arg;
	corio_event_init(&h.ev);
	CHECK_EQ(corio_chan_init(&h.ch, sizeof(int), 1), 0);
	CHECK_EQ(corio_spawn(handon_selector, &h, NULL, &a), 0);
	CHECK_EQ(corio_spawn(handon_receiver, &h, NULL, &b), 0);
	corio_yield(); /* both park: the selector first in the channel's queue */
	CHECK(h.ch.recvq.head != NULL);
	/* The element wakes the selector's stand-in; the event then wins. The
	 * receiver must get the element, not sleep forever. */
	CHECK_EQ(corio_chan_try_send(&h.ch, &v), 0);
	corio_event_set(&h.ev);
	CHECK_EQ(corio_join(a, NULL), 0);
	CHECK_EQ(corio_join(b, &st), 0);
	CHECK_EQ(h.sel_ret, 0);
	CHECK_EQ(st, 0);
	CHECK_EQ(h.recv_val, 5);
	corio_chan_destroy(&h.ch);
}

Test(select, unused_wakeup_is_handed_on, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, handon_entry, NULL);
}

/* ---- a timer's expiration delivered to a losing select is put back ---------- */
struct putback {
	struct corio_event ev;
	struct corio_timer t, cb;
	int ret;
};

static void set_event(struct corio_timer *t, void *arg, int res)
{
	(void)t;
	if (res > 0)
		corio_event_set(arg);
}

static int putback_selector(void *arg)
{
	struct putback *p = arg;
	struct corio_sel w[2];

	corio_sel_event(&w[0], &p->ev);
	corio_sel_timer(&w[1], &p->t);
	p->ret = corio_select(w, 2);
	return 0;
}

static void putback_entry(void *arg)
{
	struct putback p = { .ret = -100 };
	struct corio_fiber *f;
	uint64_t at = corio_now_ns() + 2000000;

	(void)arg;
	corio_event_init(&p.ev);
	corio_timer_init(&p.t, NULL, NULL);
	corio_timer_init(&p.cb, set_event, &p.ev);
	/* Same deadline: both expire in one pass of the loop, before the
	 * selector runs, so it sees the event (index 0) and the timer. */
	CHECK_EQ(corio_timer_arm(&p.t, at, 0), 0);
	CHECK_EQ(corio_timer_arm(&p.cb, at, 0), 0);
	CHECK_EQ(corio_spawn(putback_selector, &p, NULL, &f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(p.ret, 0);
	CHECK(p.t.waiters.head == NULL && p.ev.wq.head == NULL);
	CHECK_EQ(corio_timer_wait(&p.t), 1); /* at once: the expiration was kept */
}

Test(select, losing_timer_keeps_its_expiration, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, putback_entry, NULL);
}

/* ---- cancel and deadlines ------------------------------------------------------- */
struct blocked {
	struct corio_sock *s;
	struct corio_chan ch;
	struct corio_timer t;
	char buf[16];
	int ret;
};

static int blocked_selector(void *arg)
{
	struct blocked *b = arg;
	struct corio_sel w[3];
	int v;

	corio_sel_recv(&w[0], b->s, b->buf, sizeof(b->buf));
	corio_sel_chan_recv(&w[1], &b->ch, &v);
	corio_sel_timer(&w[2], &b->t);
	b->ret = corio_select(w, 3);
	return b->ret;
}

static void cancel_entry(void *arg)
{
	struct blocked b = { .ret = -100 };
	struct corio_sock *c = NULL;
	struct corio_deadline d;
	struct corio_sel w[2];
	struct corio_fiber *f;
	char buf[16];
	uint64_t t0;
	int v = 0;

	(void)arg;
	th_tcp_pair(&b.s, &c);
	CHECK_EQ(corio_chan_init(&b.ch, sizeof(int), 2), 0);
	corio_timer_init(&b.t, NULL, NULL);
	CHECK_EQ(corio_timer_arm_in(&b.t, 60ull * 1000000000, 0), 0);

	/* Cancel a parked select: -ECANCELED, every stand-in gone. */
	CHECK_EQ(corio_spawn(blocked_selector, &b, NULL, &f), 0);
	corio_yield();
	CHECK(b.ch.recvq.head != NULL && b.t.waiters.head != NULL);
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(b.ret, -ECANCELED);
	check_no_waiters(&b.ch, &b.t);
	/* Another receiver may use the socket now; the bytes were not lost. */
	CHECK_EQ(corio_send(c, "abc", 3), 3);
	CHECK_EQ(corio_recv(b.s, buf, sizeof(buf)), 3);

	/* While a select waits on the socket, another reader gets -EBUSY, and
	 * a select on a socket someone else reads completes with -EBUSY. */
	b.ret = -100;
	CHECK_EQ(corio_spawn(blocked_selector, &b, NULL, &f), 0);
	corio_yield();
	CHECK_EQ(corio_recv(b.s, buf, sizeof(buf)), -EBUSY);
	corio_sel_recv(&w[0], b.s, buf, sizeof(buf));
	CHECK_EQ(corio_select(w, 1), 0);
	CHECK_EQ(w[0].res, -EBUSY);
	v = 3;
	CHECK_EQ(corio_chan_try_send(&b.ch, &v), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(b.ret, 1);

	/* The fiber's deadline scope bounds a select: -ETIMEDOUT. */
	t0 = corio_now_ns();
	CHECK_EQ(corio_timeout_push(&d, 3000000), 0);
	corio_sel_chan_recv(&w[0], &b.ch, &v);
	corio_sel_recv(&w[1], b.s, buf, sizeof(buf));
	CHECK_EQ(corio_select(w, 2), -ETIMEDOUT);
	CHECK_EQ(corio_select(w, 2), -ETIMEDOUT); /* at once once it passed */
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK(corio_now_ns() - t0 >= 3000000);
	check_no_waiters(&b.ch, &b.t);

	/* A deadline item wins over silence; the earlier of two wins. */
	t0 = corio_now_ns();
	corio_sel_chan_recv(&w[0], &b.ch, &v);
	corio_sel_deadline(&w[1], t0 + 2000000);
	CHECK_EQ(corio_select(w, 2), 1);
	CHECK(corio_now_ns() >= t0 + 2000000);
	CHECK_EQ(corio_timer_cancel(&b.t), 0);
	corio_sel_deadline(&w[0], corio_now_ns() + 50ull * 1000000000);
	corio_sel_deadline(&w[1], corio_now_ns() + 1000000);
	CHECK_EQ(corio_select(w, 2), 1);

	/* Cancelled before: -ECANCELED at once, nothing taken. */
	CHECK_EQ(corio_chan_try_send(&b.ch, &v), 0);
	corio_cancel(corio_self());
	corio_sel_chan_recv(&w[0], &b.ch, &v);
	CHECK_EQ(corio_select(w, 1), -ECANCELED);
	CHECK_EQ(b.ch.len, 1);

	corio_chan_destroy(&b.ch);
	CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_close(b.s), 0);
}

Test(select, cancel_and_deadlines, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, cancel_entry, NULL);
}

/* ---- the other kinds, and bad input ------------------------------------------------ */
static int returns_17(void *arg)
{
	(void)arg;
	corio_yield();
	return 17;
}

static int take_one(void *arg)
{
	int v;

	corio_yield();
	return corio_chan_recv(arg, &v);
}

static int wg_done_later(void *arg)
{
	corio_yield();
	corio_wg_done(arg);
	return 0;
}

static int close_later(void *arg)
{
	corio_yield();
	return corio_close(arg);
}

static void kinds_entry(void *arg)
{
	struct corio_sel w[3];
	struct corio_fiber *f, *g;
	struct corio_chan ch;
	struct corio_event ev;
	struct corio_timer t;
	struct corio_wg wg;
	struct corio_sock *s = NULL, *c = NULL;
	char buf[8];
	int v = 1, st = 0;

	(void)arg;
	CHECK_EQ(corio_chan_init(&ch, sizeof(int), 1), 0);
	corio_event_init(&ev);
	corio_wg_init(&wg);

	/* fiber exit: res is its status; it still has to be joined */
	CHECK_EQ(corio_spawn(returns_17, NULL, NULL, &f), 0);
	corio_sel_event(&w[0], &ev);
	corio_sel_fiber(&w[1], f);
	CHECK_EQ(corio_select(w, 2), 1);
	CHECK_EQ(w[1].res, 17);
	CHECK_EQ(corio_join(f, &st), 0);
	CHECK_EQ(st, 17);

	/* channel send readiness: the element goes in when there is room */
	CHECK_EQ(corio_chan_try_send(&ch, &v), 0);
	CHECK_EQ(corio_spawn(take_one, &ch, NULL, &f), 0);
	v = 2;
	corio_sel_event(&w[0], &ev);
	corio_sel_chan_send(&w[1], &ch, &v);
	CHECK_EQ(corio_select(w, 2), 1);
	CHECK_EQ(w[1].res, 0);
	CHECK_EQ(corio_join(f, &st), 0);
	CHECK_EQ(corio_chan_try_recv(&ch, &v), 0);
	CHECK_EQ(v, 2);

	/* wait group and event */
	corio_wg_add(&wg, 1);
	CHECK_EQ(corio_spawn(wg_done_later, &wg, NULL, &f), 0);
	corio_sel_event(&w[0], &ev);
	corio_sel_wg(&w[1], &wg);
	CHECK_EQ(corio_select(w, 2), 1);
	CHECK_EQ(corio_join(f, NULL), 0);
	corio_event_set(&ev);
	CHECK_EQ(corio_select(w, 2), 0);

	/* end of stream on a socket: res 0; closed channel: -EPIPE */
	th_tcp_pair(&s, &c);
	CHECK_EQ(corio_spawn(close_later, c, NULL, &f), 0);
	corio_sel_recv(&w[0], s, buf, sizeof(buf));
	CHECK_EQ(corio_select(w, 1), 0);
	CHECK_EQ(w[0].res, 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(corio_close(s), 0);
	corio_chan_close(&ch);
	corio_sel_chan_recv(&w[0], &ch, &v);
	CHECK_EQ(corio_select(w, 1), 0);
	CHECK_EQ(w[0].res, -EPIPE);

	/* bad input: -EINVAL from the call, or an item completing with it */
	CHECK_EQ(corio_select(NULL, 1), -EINVAL);
	CHECK_EQ(corio_select(w, 0), -EINVAL);
	corio_sel_event(&w[0], NULL);
	CHECK_EQ(corio_select(w, 1), -EINVAL);
	corio_sel_recv(&w[0], NULL, buf, 1);
	CHECK_EQ(corio_select(w, 1), -EINVAL);
	corio_sel_chan_recv(&w[0], &ch, NULL);
	CHECK_EQ(corio_select_try(w, 1), -EINVAL);
	CHECK_EQ(corio_spawn(returns_17, NULL, NULL, &g), 0);
	CHECK_EQ(corio_detach(g), 0);
	corio_sel_fiber(&w[0], g);
	CHECK_EQ(corio_select(w, 1), 0);
	CHECK_EQ(w[0].res, -EINVAL); /* detached: could be freed under us */
	corio_sel_fiber(&w[0], corio_self());
	CHECK_EQ(corio_select(w, 1), 0);
	CHECK_EQ(w[0].res, -EINVAL);
	corio_timer_init(&t, NULL, NULL);
	corio_sel_timer(&w[0], &t);
	CHECK_EQ(corio_select(w, 1), 0);
	CHECK_EQ(w[0].res, -ENOENT); /* never armed: it could never fire */
	corio_event_reset(&ev);
	corio_sel_event(&w[0], &ev);
	CHECK_EQ(corio_select_try(w, 1), -EAGAIN);
	corio_chan_destroy(&ch);
}

Test(select, kinds_and_bad_input, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, kinds_entry, NULL);
}
