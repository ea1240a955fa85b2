/* SPDX-License-Identifier: MIT */
/*
 * core/signal.c - signals awaited in fibers (corio_signal_wait, cfg.signals).
 *
 * Every thread corio_start() creates blocks cfg.signals (shard threads here,
 * pool threads block everything). Shard 0 reads them from a signalfd: a
 * POLL_ADD on it stays armed like the wake-up read (not counted in
 * ops_inflight; io_uring_queue_exit cancels it), and its completion reads
 * every queued siginfo on the loop and gives each signal to every shard:
 * shard 0 directly, the others by corio_post() (a shard whose message ring
 * is full is owed its signals, retried every 1 ms until the post goes). A shard keeps one pending
 * bit per signal and wakes the fibers waiting on it; a wait takes the lowest
 * pending signal of its mask. All of it is shard-owned state: the only
 * cross-thread step is the message. corio_drain_on_signal's signals also
 * start the drain right there, on shard 0's loop.
 */
#include "core/internal.h"

#include <corio/msg.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

/* Signals a program may not wait for: they cannot be caught, or they
 * report a fault in the thread that raised them, or glibc keeps them. */
#define SIG_REFUSED                                                                       \
	(CORIO_SIG(SIGKILL) | CORIO_SIG(SIGSTOP) | CORIO_SIG(SIGSEGV) | CORIO_SIG(SIGBUS) | \
	 CORIO_SIG(SIGFPE) | CORIO_SIG(SIGILL) | CORIO_SIG(SIGTRAP) | CORIO_SIG(SIGSYS) |   \
	 CORIO_SIG(32) | CORIO_SIG(33))

int corio__signal_check(uint64_t mask)
{
	uint64_t bad = mask & SIG_REFUSED;

	if (bad)
		return corio__error(-EINVAL, "config: signals includes %d (%s), which cannot be "
				    "waited for", __builtin_ctzll(bad) + 1,
				    strsignal(__builtin_ctzll(bad) + 1));
	return 0;
}

static void mask_to_set(uint64_t mask, sigset_t *set)
{
	sigemptyset(set);
	for (int n = 1; n <= 64; n++)
		if (mask & CORIO_SIG(n))
			sigaddset(set, n);
}

void corio__signal_block(const struct corio_rt *rt)
{
	sigset_t set;

	if (!rt->cfg.signals)
		return;
	mask_to_set(rt->cfg.signals, &set);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void sig_retry(struct corio_timer *t, void *arg, int res);

int corio__signal_setup(struct corio__shard *s)
{
	sigset_t set;

	s->sigfd = -1;
	if (s->id != 0 || !s->rt->cfg.signals)
		return 0;
	mask_to_set(s->rt->cfg.signals, &set);
	s->sig_owed = calloc(s->rt->nshards, sizeof(*s->sig_owed));
	if (!s->sig_owed)
		return -ENOMEM;
	corio_timer_init(&s->sig_retry, sig_retry, s);
	s->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->sigfd < 0) {
		snprintf(s->err, sizeof(s->err), "shard 0: signalfd for cfg.signals: %s",
			 strerror(errno));
		return -errno;
	}
	return 0;
}

void corio__signal_fini(struct corio__shard *s)
{
	if (s->sigfd >= 0)
		close(s->sigfd);
	free(s->sig_owed);
	s->sig_owed = NULL;
	s->sigfd = -1;
}

/* Signals reach a shard: pending, and its waiters look. */
static void deliver(struct corio__shard *s, uint64_t mask)
{
	s->sig_pending |= mask;
	corio__wq_wake_all(&s->sig_wq, 0);
}

static void deliver_posted(void *arg)
{
	deliver(corio__shard(), (uint64_t)(uintptr_t)arg);
}

/* Give every shard what it is owed. A shard whose message ring is full
 * keeps its signals owed, and a 1 ms timer tries again: a signal is never
 * dropped, though a burst of the same one may arrive as one (as the kernel
 * merges standard signals). */
static void sig_flush(struct corio__shard *s)
{
	bool owed = false;

	for (unsigned k = 1; k < s->rt->nshards; k++) {
		if (!s->sig_owed[k])
			continue;
		if (corio_post(k, deliver_posted, (void *)(uintptr_t)s->sig_owed[k]) == 0)
			s->sig_owed[k] = 0;
		else
			owed = true;
	}
	if (owed && !corio_timer_armed(&s->sig_retry))
		corio_timer_arm_in(&s->sig_retry, 1000 * 1000, 0);
}

static void sig_retry(struct corio_timer *t, void *arg, int res)
{
	(void)t;
	if (res > 0)
		sig_flush(arg);
}

static void sig_arm(struct corio__shard *s);

static void sig_done(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct corio__shard *s = op->data;
	struct signalfd_siginfo si[8];
	uint64_t got = 0;
	ssize_t n;

	(void)flags;
	s->sig_armed = false;
	if (res < 0 && res != -EINTR) {
		if (res != -ECANCELED)
			corio__log("corio: shard 0: poll on the signalfd failed: %s; "
				   "cfg.signals are no longer delivered", strerror(-res));
		return;
	}
	while ((n = read(s->sigfd, si, sizeof(si))) > 0) {
		for (size_t i = 0; i < (size_t)n / sizeof(si[0]); i++) {
			uint64_t bit = CORIO_SIG((int)si[i].ssi_signo);

			for (unsigned k = 1; k < s->rt->nshards; k++)
				s->sig_owed[k] |= bit;
			deliver(s, bit);
			got |= bit;
		}
	}
	if (got & atomic_load_explicit(&s->rt->drain_sig_mask, memory_order_acquire))
		corio_drain(atomic_load_explicit(&s->rt->drain_sig_ns, memory_order_relaxed));
	sig_flush(s);
	sig_arm(s);
}

static void sig_arm(struct corio__shard *s)
{
	struct io_uring_sqe *sqe;

	if (s->sigfd < 0 || s->sig_armed || s->stopping)
		return;
	sqe = corio__ring_sqe(&s->ring);
	io_uring_prep_poll_add(sqe, s->sigfd, POLLIN);
	s->sig_op.cb = sig_done;
	s->sig_op.data = s;
	corio__sqe_set_op(sqe, &s->sig_op);
	s->sig_armed = true;
}

void corio__signal_start(struct corio__shard *s)
{
	sig_arm(s);
}

int corio_signal_wait(uint64_t mask, int *signo)
{
	struct corio__shard *s = corio__shard();
	uint64_t got;
	int ret;

	if (!signo)
		return corio__error(-EINVAL, "corio_signal_wait: signo is NULL");
	if (!mask)
		return corio__error(-EINVAL, "corio_signal_wait: mask is empty");
	if (s && (mask & ~s->rt->cfg.signals)) {
		int n = __builtin_ctzll(mask & ~s->rt->cfg.signals) + 1;

		return corio__error(-EINVAL, "corio_signal_wait: signal %d is not in cfg.signals", n);
	}
	ret = corio__may_block("corio_signal_wait");
	if (ret)
		return ret;
	while (!(s->sig_pending & mask)) {
		ret = corio__wq_wait(&s->sig_wq);
		if (ret < 0)
			return ret;
	}
	got = s->sig_pending & mask & -(s->sig_pending & mask); /* the lowest */
	s->sig_pending &= ~got;
	*signo = __builtin_ctzll(got) + 1;
	return 0;
}

int corio_drain_on_signal(uint64_t mask, uint64_t timeout_ns)
{
	struct corio__shard *s = corio__shard();

	if (!s)
		return corio__misuse(-EPERM, "corio_drain_on_signal", "not called on a shard");
	if (mask & ~s->rt->cfg.signals)
		return corio__error(-EINVAL, "corio_drain_on_signal: signal %d is not in cfg.signals",
				    __builtin_ctzll(mask & ~s->rt->cfg.signals) + 1);
	/* the timeout first: shard 0 reads it after it sees the mask */
	atomic_store_explicit(&s->rt->drain_sig_ns, timeout_ns, memory_order_relaxed);
	atomic_store_explicit(&s->rt->drain_sig_mask, mask, memory_order_release);
	return 0;
}
