/* SPDX-License-Identifier: MIT */
/*
 * corio/timer.h - sleeps, timer objects, deadline scopes, per-call timeouts,
 * timer statistics. Include <corio.h>.
 *
 * Time is CLOCK_MONOTONIC in nanoseconds (corio_now_ns()). Every call here
 * is shard-local; a timer belongs to the shard that armed it. Durations
 * saturate: now + a duration that does not fit is UINT64_MAX, "never"
 * (a deadline there does not expire), so a huge value never wraps into the
 * past.
 *
 * How it works (docs/TIMERS.md has the measurements): each shard keeps its
 * timers in a 4-ary min-heap and keeps one IORING_OP_TIMEOUT
 * (IORING_TIMEOUT_ABS) armed in its ring for the earliest deadline. Arming
 * and cancelling a timer touch only the heap; the kernel hears about it only
 * when the earliest deadline moves earlier (one IORING_TIMEOUT_UPDATE SQE,
 * at most one per loop turn). A timer never fires before its deadline.
 *
 * Per-call timeouts come from deadline scopes: while a scope is open, every
 * kernel operation the fiber waits on is bounded by the scope's deadline
 * (a heap timer that async-cancels the op when an earlier timer already
 * wakes the shard before it, else an IORING_OP_LINK_TIMEOUT linked behind
 * the op's SQE: docs/TIMERS.md), and so is every fiber wait
 * (corio_event_wait, corio_chan_recv, corio_sleep_ns, corio_timer_wait, ...).
 */
#ifndef CORIO_TIMER_H
#define CORIO_TIMER_H
#include <corio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sleeping -------------------------------------------------------------- */

/*
 * Park the calling fiber for ns nanoseconds / until deadline_ns
 * (CLOCK_MONOTONIC). Returns 0 on expiry, -ECANCELED when the fiber is
 * cancelled or the runtime shuts down, -ETIMEDOUT when an enclosing deadline
 * scope ends first (the fiber wakes at the scope's deadline). A deadline in
 * the past still yields once (the fiber runs again on a later loop turn).
 * Blocking.
 */
CORIO_API int corio_sleep_ns(uint64_t ns);
CORIO_API int corio_sleep_until(uint64_t deadline_ns);

/* ---- timer objects ---------------------------------------------------------- */

struct corio_timer;

/*
 * Timer callback; runs on the shard loop (not in a fiber: it must not block,
 * but it may arm or cancel timers, this one included, spawn fibers and post
 * messages). A callback that re-arms its timer at a time already past fires
 * again on the next loop turn, not within the same one: the loop submits
 * and reaps I/O between such rounds, so it cannot starve the shard's
 * sockets (it does keep the shard busy). res is the number of expirations being reported (>= 1; above 1
 * when a periodic timer missed ticks because the loop was late), or
 * -ECANCELED when the shard shuts down with the timer armed: after that call
 * the runtime no longer references the timer.
 */
typedef void (*corio_timer_fn)(struct corio_timer *t, void *arg, int res);

/*
 * A timer. The caller owns the memory (embed it anywhere, no allocation);
 * the fields are private. An all-zero struct is a valid unarmed timer without
 * callback. The memory may be reused or freed whenever the timer is not
 * armed and no fiber waits on it: after corio_timer_cancel(), after a
 * one-shot timer fired, or after its -ECANCELED callback.
 */
struct corio_timer {
	uint64_t deadline_ns;     /* private: next expiry             */
	uint64_t period_ns;       /* private: 0 = one-shot            */
	corio_timer_fn fn;        /* private                          */
	void *arg;                /* private                          */
	struct corio_waitq waiters; /* private: fibers in corio_timer_wait */
	void *shard;              /* private: the shard it is armed on */
	uint32_t slot;            /* private: heap slot + 1, 0 = not armed */
	uint32_t pending;         /* private: expirations no wait has collected */
};

/*
 * Initialise t with an optional callback (fn == NULL: fibers collect
 * expirations with corio_timer_wait()). Never fails for a valid t: 0, or
 * -EINVAL when t is NULL. Do not re-initialise an armed timer.
 */
CORIO_API int corio_timer_init(struct corio_timer *t, corio_timer_fn fn, void *arg);

/*
 * Arm t to expire at deadline_ns (absolute CLOCK_MONOTONIC); if period_ns is
 * not 0 it then expires every period_ns after that, on the grid
 * deadline + k * period (no drift; missed ticks are coalesced and counted).
 * Arming an armed timer re-arms it (moves it) and forgets expirations no
 * wait has collected. A deadline in the past expires on the next loop turn.
 * Returns 0, -EINVAL (t NULL, or armed/waited on by another shard),
 * -ENOMEM (the shard's heap could not grow), -ECANCELED (the shard is
 * shutting down), -EPERM (off-shard). Shard-local, never blocks, O(log n).
 */
CORIO_API int corio_timer_arm(struct corio_timer *t, uint64_t deadline_ns, uint64_t period_ns);

/* corio_timer_arm(t, corio_now_ns() + delay_ns, period_ns), saturating. */
CORIO_API int corio_timer_arm_in(struct corio_timer *t, uint64_t delay_ns, uint64_t period_ns);

/*
 * Disarm t. Its callback does not run; fibers waiting on it return
 * -ECANCELED. Returns 0 when t was armed, -ENOENT when it was not (a
 * one-shot timer that already fired, or one never armed), -EINVAL when it is
 * armed on another shard, -EPERM off-shard. Shard-local, O(log n).
 */
CORIO_API int corio_timer_cancel(struct corio_timer *t);

/*
 * Wait for t (a timer without callback) to expire. Returns the number of
 * expirations since the last wait (>= 1; timerfd semantics), at once if some
 * are already pending. -ENOENT when t is neither armed nor has pending
 * expirations (the wait could never end), -EINVAL when t has a callback or
 * belongs to another shard, -ECANCELED when t is cancelled meanwhile or the
 * fiber is cancelled, -ETIMEDOUT when an enclosing deadline scope ends
 * first. Blocking; several fibers may wait on one timer (all wake).
 */
CORIO_API int corio_timer_wait(struct corio_timer *t);

/* 1 if t is armed, else 0. */
CORIO_API int corio_timer_armed(const struct corio_timer *t);

/* t's next expiry (CLOCK_MONOTONIC ns), or 0 when it is not armed. */
CORIO_API uint64_t corio_timer_deadline(const struct corio_timer *t);

/* ---- deadline scopes and per-call timeouts ----------------------------------- */

/*
 * A deadline scope, on the caller's stack. While it is open, every blocking
 * call of the fiber that opened it is bounded by its deadline: kernel
 * operations (recv, send, read, nop, poll, ...) are cancelled at the
 * deadline and return -ETIMEDOUT, fiber waits (events, channels, mutexes,
 * semaphores, wait groups, sleeps, timers, corio_join, cross-shard
 * messages: see corio/msg.h for corio_call) return -ETIMEDOUT at the
 * deadline. Once the deadline has passed, every blocking call in the scope
 * returns -ETIMEDOUT at once, without starting anything.
 *
 * Scopes nest; the nearest deadline wins (an inner scope cannot extend an
 * outer one, except a shield). A fiber starts with no deadline and does not
 * inherit its spawner's.
 *
 * Partial transfers: a timed-out call returns only after the kernel is done
 * with its buffers (its final completion). If the operation moved bytes
 * before the timeout cancelled it (a recv/send that was being retried, a
 * MSG_WAITALL recv), the call returns that byte count rather than
 * -ETIMEDOUT, so no byte is lost; the next call in the scope reports
 * -ETIMEDOUT.
 *
 * To bound a single call:
 *
 *	struct corio_deadline d;
 *	corio_timeout_push(&d, 5 * 1000000);     // 5 ms
 *	n = corio_recv(sock, buf, sizeof buf);   // -ETIMEDOUT after 5 ms
 *	corio_deadline_pop(&d);
 */
struct corio_deadline {
	uint64_t saved_ns; /* private: the enclosing deadline */
	void *fiber;       /* private */
	unsigned depth;    /* private */
	unsigned flags;    /* private */
};

/* Open a scope ending at deadline_ns (absolute CLOCK_MONOTONIC; 0: no new
 * deadline, the scope only nests). 0, -EINVAL (scope NULL), -EPERM
 * (not in a fiber). */
CORIO_API int corio_deadline_push(struct corio_deadline *scope, uint64_t deadline_ns);

/* corio_deadline_push(scope, corio_now_ns() + timeout_ns), saturating. */
CORIO_API int corio_timeout_push(struct corio_deadline *scope, uint64_t timeout_ns);

/* Open a shield: inside it no enclosing deadline applies (for clean-up such
 * as close or a goodbye message after a timeout). Cancellation still does.
 * Scopes pushed inside a shield apply normally. */
CORIO_API int corio_deadline_shield(struct corio_deadline *scope);

/* Close the innermost scope (it must be scope: scopes close in LIFO order,
 * on the fiber that opened them). 0, or -EINVAL on misuse (not the innermost
 * open scope of the calling fiber: nothing changes, and corio_last_error()
 * says so; a debug build aborts with that message, see corio.h). */
CORIO_API int corio_deadline_pop(struct corio_deadline *scope);

/* The calling fiber's effective deadline (CLOCK_MONOTONIC ns), 0: none. */
CORIO_API uint64_t corio_deadline_ns(void);

/* ---- statistics ------------------------------------------------------------- */

#define CORIO_TIMER_HIST_BUCKETS 256

/*
 * One shard's timer counters, written by the shard, readable from any thread
 * while the runtime runs (each field untorn; the snapshot is not atomic).
 * Lateness is the time from a deadline to the loop noticing it expired
 * (before the callback runs or the waiting fiber is resumed).
 */
struct corio_timer_stats {
	uint64_t armed;          /* corio_timer_arm calls, sleeps and fiber-wait deadlines */
	uint64_t fired;          /* expirations delivered (a periodic timer's missed ticks
	                            count once each)                                        */
	uint64_t cancelled;      /* timers disarmed before they expired                      */
	uint64_t active;         /* timers armed right now                                   */
	uint64_t kernel_arms;    /* timeout SQEs for the shard's heap (arm + update)         */
	uint64_t linked;         /* kernel ops submitted with a linked timeout (not the ones
	                            an earlier timer covers: those take a heap timer)       */
	uint64_t timed_out;      /* blocking calls that returned -ETIMEDOUT                  */
	uint64_t lateness_max_ns;
	/* log-linear buckets: see corio_timer_hist_bucket_ns() */
	uint64_t lateness_hist[CORIO_TIMER_HIST_BUCKETS];
};

/* Copy shard's timer counters (rt may be NULL on a shard: its own runtime).
 * 0, -EINVAL or -EPERM. */
CORIO_API int corio_timer_stats_get(struct corio_rt *rt, unsigned shard,
				    struct corio_timer_stats *out);

/* Upper bound (ns, inclusive) of lateness histogram bucket b; buckets are
 * 4 per power of two (at most 25% wide). */
CORIO_API uint64_t corio_timer_hist_bucket_ns(unsigned b);

/* The lateness below which a fraction q (0..1) of expirations fall, as a
 * bucket upper bound in ns; 0 when nothing fired. */
CORIO_API uint64_t corio_timer_lateness_quantile(const struct corio_timer_stats *st, double q);

#ifdef __cplusplus
}
#endif
#endif
