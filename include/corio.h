/* SPDX-License-Identifier: MIT */
/*
 * corio.h - the public interface of corio, a thread-per-core, completion-based
 * io_uring runtime for Linux.
 *
 * Conventions (they hold for every function below unless its comment says
 * otherwise):
 *  - Functions return >= 0 on success and -errno on failure. errno is never
 *    the error channel.
 *  - "Shard-local" calls may only be made by code running on a shard (a fiber,
 *    or a callback run by the shard loop). Called from elsewhere they return
 *    -EPERM.
 *  - "Blocking" calls park only the calling fiber; the shard keeps running
 *    other fibers. They may only be made from a fiber: from a timer
 *    callback, a corio_post() function or another thread they return
 *    -EPERM. They return only once the kernel no longer references the
 *    caller's memory.
 *  - Cancellation and deadlines, the one rule: every blocking call, once
 *    its arguments are checked, first asks whether the calling fiber is
 *    cancelled (corio_cancel(), or the runtime shuts down) and whether its
 *    deadline scope (corio/timer.h) has passed, and then returns
 *    -ECANCELED or -ETIMEDOUT without taking or changing anything, even
 *    when it would not have had to park (an event already set, a free
 *    permit, a queued element, an ended fiber: a corio_join() refused so
 *    leaves the fiber joinable). So a cancelled fiber that is kept fed
 *    still sees its cancellation. The same holds while it is parked. The
 *    calls that must finish are the exceptions, each saying so: the
 *    closes (corio_close(), corio_close_fd(), corio_group_close()).
 *  - API misuse (a blocking call off a fiber, an unbalanced
 *    corio_deadline_pop(), unlocking a mutex the caller does not hold, a
 *    call on another shard's socket, listener, stream or TLS session, ...)
 *    returns the -errno its call documents, with a message naming the
 *    call, in release builds (the default; make and make install pass
 *    -DNDEBUG). A debug build of corio (make DEBUG=1, and the sanitizer
 *    builds) prints that message on stderr and aborts instead, so the bug
 *    shows where it is made.
 *  - Errors carry a message: see corio_last_error().
 *  - Only corio_stop(), corio_wait() and corio_post_foreign() may be called
 *    from threads that are not shards.
 */
#ifndef CORIO_H
#define CORIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CORIO_API __attribute__((visibility("default")))
#else
#define CORIO_API
#endif

#define CORIO_VERSION_MAJOR 0
#define CORIO_VERSION_MINOR 1
#define CORIO_VERSION_PATCH 0

/* ---- runtime ------------------------------------------------------------ */

/* What a shard does when it has no runnable fiber. */
enum corio_idle {
	CORIO_IDLE_BLOCK = 0, /* sleep in io_uring_enter until a completion    */
	CORIO_IDLE_SPIN = 1,  /* poll for spin_us microseconds, then block     */
	CORIO_IDLE_POLL = 2,  /* never sleep: lowest latency, burns its core   */
};

/*
 * Which engine runs the shards' I/O (corio_config.backend). One backend
 * serves every shard of a runtime. The environment variable
 * CORIO_BACKEND=auto|uring|epoll overrides the field (anything else makes
 * corio_start fail with -EINVAL).
 */
enum corio_backend {
	CORIO_BACKEND_AUTO = 0,  /* io_uring; the epoll fallback when the kernel or a
	                            seccomp filter refuses io_uring (ENOSYS, EPERM,
	                            EACCES), said once on stderr                */
	CORIO_BACKEND_URING = 1, /* io_uring only: fail to start without it       */
	CORIO_BACKEND_EPOLL = 2, /* the readiness fallback: a ring emulator on
	                            epoll and non-blocking syscalls (docs/BACKEND.md
	                            says what differs)                          */
};

/* corio_config.flags */
#define CORIO_F_SQPOLL 0x1u /* kernel SQ polling thread per shard (needs privileges on old kernels) */
#define CORIO_F_NO_PIN 0x2u /* do not pin shard threads to their CPUs                             */
#define CORIO_F_ALL    (CORIO_F_SQPOLL | CORIO_F_NO_PIN)

/*
 * Runtime configuration. Fill it with corio_config_init(), then change the
 * fields you care about. New fields are only ever taken from reserved[], so a
 * program compiled against an older header keeps working; reserved[] must be
 * zero and unknown flag bits are rejected with -EINVAL.
 */
struct corio_config {
	unsigned shards;          /* 0: one per CPU in the affinity mask           */
	const int *cpus;          /* optional: CPU for shard i; NULL: the mask's
	                             CPUs in order, wrapping when shards > CPUs    */
	unsigned sq_entries;      /* per shard, power of two, 1..32768 (256)        */
	unsigned cq_entries;      /* 0: 2 * sq_entries; else power of two >= sq     */
	size_t stack_size;        /* default fiber stack in bytes, 16 KiB..1 GiB,
	                             rounded up to a page (128 KiB)                 */
	enum corio_idle idle;     /* CORIO_IDLE_BLOCK                               */
	unsigned spin_us;         /* CORIO_IDLE_SPIN: spin this long (50)           */
	unsigned msg_slots;       /* inbound message ring capacity per shard (4096) */
	const char *control_path; /* Unix control socket path, NULL: none           */
	uint64_t stall_ns;        /* stall report threshold: time on CPU a fiber or
	                             loop turn may take without yielding; 0: off
	                             (10 ms). Reports go to corio_set_log().      */
	unsigned flags;           /* CORIO_F_*                                      */
	unsigned stack_cache;     /* stacks kept per shard for reuse (256)          */
	unsigned run_budget;      /* max fibers run per loop turn before polling
	                             the ring again (256)                           */
	unsigned stack_guard;     /* inaccessible bytes below each fiber stack: a
	                             page multiple up to 16 MiB; 0: the default
	                             (64 KiB). See "stack overflow" below.          */
	unsigned work_threads;    /* blocking-work pool threads, 1..1024; 0: the
	                             default (4). See corio/work.h               */
	unsigned work_queue;      /* jobs that may wait for a pool thread before
	                             corio_work() says -EAGAIN; 0: 1024          */
	enum corio_backend backend; /* CORIO_BACKEND_AUTO                           */
	/* Per-socket flow-control caps, the same on every shard (corio/net.h,
	 * corio_recv_buf and corio_send_buf); 0: the default, 16; else
	 * 1..65535. net_recv_queue counts received buffers (slices of the
	 * shard's provided-buffer ring) a stream socket holds unread before
	 * its receive stops; net_send_queue counts corio_send_buf buffers a
	 * socket may have queued before the call waits for room. A listener's
	 * corio_listen_opts.recv_queue / send_queue override them for the
	 * sockets it accepts. The environment overrides both, as
	 * CORIO_BACKEND overrides backend: CORIO_NET_RECV_QUEUE and
	 * CORIO_NET_SEND_QUEUE are the operator's knobs, and when set they win
	 * over the config and over every listener's field. */
	unsigned net_recv_queue;
	/* Optional: setup(arg) runs first, in a fiber on every shard at once,
	 * with the arg given to corio_start(); entry runs on no shard until
	 * every setup has returned. Build per-shard state here (listeners,
	 * tables indexed by corio_shard_id()), so that no message from another
	 * shard's entry can find it missing. A setup may do I/O and block on
	 * its own shard; it should not wait for another shard (that one may
	 * still be in its own setup). corio_start() returns once every setup
	 * has returned: 0, or the first negative value one returned, after
	 * stopping the runtime (entry never runs then; what the setups built
	 * is the caller's to undo, so keep it in memory corio_wait() does not
	 * check, or return errors before building). NULL: no setup.        */
	int (*setup)(void *arg);
	unsigned net_send_queue;   /* see net_recv_queue above                     */
	/* How long a shard keeps a host name's addresses (corio/net.h,
	 * corio_resolve), in ms: 0: 30 s; at most 86,400,000 (a day). A DNS
	 * answer is kept its records' TTL when that is shorter. A
	 * negative answer ("no such name") is kept min(this, 5 s). Taken
	 * from reserved[0]: the struct keeps its size and layout.          */
	unsigned resolve_ttl_ms;
	/* The scheduling slice (corio/sched.h), in us: how long one class's
	 * fibers may run before the loop serves completions, timers and the
	 * other classes, and when corio_should_yield() turns true. 0: 500;
	 * else 10..1,000,000. Taken from reserved[0].                     */
	unsigned slice_us;
	unsigned reserved[1];     /* must be zero                                   */
	/* Signals a fiber may wait for with corio_signal_wait(), as a mask:
	 * CORIO_SIG(SIGTERM) | CORIO_SIG(SIGINT). corio_start() blocks them in
	 * the thread that calls it (they stay blocked there after
	 * corio_wait()) and in every thread it creates, and reads them
	 * through a signalfd on shard 0; threads you started before
	 * corio_start keep their mask: block them there yourself
	 * (pthread_sigmask), or the kernel may run their default action on
	 * one of those. SIGKILL, SIGSTOP and the
	 * signals of faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS)
	 * are refused with -EINVAL. 0: none.                               */
	uint64_t signals;
};

/* corio_config.signals bit of signal number n (1..64). */
#define CORIO_SIG(n) (1ull << ((n) - 1))

/* Set every field of *cfg to its default. Always call it first. */
CORIO_API void corio_config_init(struct corio_config *cfg);

/* Check a config without starting anything: 0 or -EINVAL (see corio_last_error()). */
CORIO_API int corio_config_check(const struct corio_config *cfg);

struct corio_rt; /* a running runtime; opaque */

/*
 * Start the shards described by cfg (NULL: defaults). Each shard is a thread
 * pinned to its CPU with its own io_uring ring; once every shard is up (and
 * cfg->setup, if any, has returned on every shard), entry(arg) runs in a
 * fiber on every shard. Returns 0 and the runtime in *out, or -errno when a
 * shard could not start or a setup failed (everything is undone then, *out
 * is NULL, and corio_last_error() says why: bad config, io_uring disabled,
 * which shard's setup, ...). *out is written before any fiber runs, so
 * entry may read it through a global the caller passed *out's address of;
 * on a shard, corio_runtime() gives the same handle.
 */
CORIO_API int corio_start(const struct corio_config *cfg, void (*entry)(void *arg),
			  void *arg, struct corio_rt **out);

/*
 * Wait until every shard has stopped, then free the runtime. A runtime stops
 * when corio_shutdown()/corio_stop() is called, or by itself once no shard
 * has a live fiber. Returns 0, or the first -errno a shard failed with.
 * Then a leak census: every shard must have given back its fiber stacks,
 * op records, link-timeout slots, provided buffers (a corio_buf never
 * released counts) and cross-shard call records; if one did not,
 * corio_wait() returns -EBUSY and corio_last_error() names the shard and
 * what leaked. The runtime is freed either way.
 * Call exactly once per corio_start(), from a thread that is not a shard.
 */
CORIO_API int corio_wait(struct corio_rt *rt);

/* The runtime the calling shard belongs to (for corio_stop(),
 * corio_post_foreign() handed to another thread, stats); NULL when the
 * caller is not a shard. */
CORIO_API struct corio_rt *corio_runtime(void);

/*
 * Wait in a fiber, on any shard, for one of the signals in mask (a subset
 * of cfg.signals, CORIO_SIG bits). Each signal shard 0 reads is given to
 * every shard: it wakes the fibers of that shard that wait for it, or, if
 * none does, stays pending there (one per signal number, as the kernel
 * keeps standard signals) until a wait on that shard asks for it. Returns
 * 0 with the signal number in *signo (the lowest pending one of mask), or
 * -ECANCELED, -ETIMEDOUT (deadline scope), -EINVAL (mask empty or not in
 * cfg.signals, signo NULL), -EPERM (not in a fiber).
 */
CORIO_API int corio_signal_wait(uint64_t mask, int *signo);

/*
 * Drain the calling shard's runtime: a graceful stop. Every shard stops
 * accepting (corio_accept() returns the connections corio had already
 * taken from the kernel, then -ESHUTDOWN; TCP listeners stop taking new
 * connections, which are refused), sets its drain event, and its fibers go
 * on: their blocking calls keep working. timeout_ns after this call the
 * runtime shuts down as by corio_shutdown(), cancelling what is left; it
 * stops earlier by itself once no fiber is left, as always. Only the first
 * call of a runtime counts (later ones return 0 and keep its deadline).
 * Returns 0, or -EPERM off a shard. Never blocks; may be called from a
 * fiber, a timer callback or a corio_post() function.
 */
CORIO_API int corio_drain(uint64_t timeout_ns);
/*
 * Drain on a signal, as servers do on SIGTERM: from now on, a signal of
 * mask (a subset of cfg.signals) that reaches the runtime starts
 * corio_drain(timeout_ns) as shard 0 reads it, without a fiber (nothing
 * waits, so nothing keeps the runtime alive). The signal still reaches
 * corio_signal_wait() as usual. A later call replaces mask and timeout
 * (mask 0: off). 0, -EINVAL (a signal not in cfg.signals), -EPERM off a
 * shard. Any shard; never blocks.
 */
CORIO_API int corio_drain_on_signal(uint64_t mask, uint64_t timeout_ns);
/* The calling shard's drain event (NULL off a shard): set when the drain
 * reaches the shard. Wait on it, or select on it with corio_sel_event(),
 * to end idle work at once (an idle keep-alive connection). */
CORIO_API struct corio_event *corio_drain_event(void);
/* 1 once the drain has reached the calling shard, else 0. */
CORIO_API int corio_draining(void);

/* corio_start() + corio_wait(). */
CORIO_API int corio_run(const struct corio_config *cfg, void (*entry)(void *arg), void *arg);

/*
 * Stop the runtime the calling shard belongs to: every fiber is cancelled
 * (its blocking calls return -ECANCELED), loops drain their in-flight
 * operations, and everything is freed. Returns at once; shard-local.
 */
CORIO_API void corio_shutdown(void);

/* corio_shutdown() for rt, from any thread. Returns 0. */
CORIO_API int corio_stop(struct corio_rt *rt);

/*
 * The message of the most recent corio call on this thread that failed
 * with a message: "call: why". Every call that returns -EINVAL sets one,
 * as does every -EPERM for misuse, and the failures their comments say
 * explain themselves (corio_start(), corio_wait(), config checks, file
 * calls). Other failures (-ECANCELED, -ETIMEDOUT, -EAGAIN, errors the
 * kernel returned for I/O) do not set it, and successful calls never clear
 * it: so it describes the call that just failed only when that call's
 * error is one of those; read it right after such a failure, not later.
 * "no error" before any. Never NULL; the text stays until the thread's
 * next failure with a message replaces it.
 */
CORIO_API const char *corio_last_error(void);

/*
 * Runtime messages: stall and off-CPU reports (see stall_ns), a wake-up
 * eventfd or control socket that stopped working, completions the kernel
 * dropped, environment values ignored, ... One line each, starting
 * "corio: ", without a trailing newline. By default (fn NULL) each goes to
 * stderr with one write(2).
 *
 * corio_set_log(fn, arg) sends them to fn(arg, line) instead, process-wide.
 * Threads: fn runs on whichever thread reports, mostly shard threads, on
 * the loop and not in a fiber (also the thread in corio_start()). Calls are
 * serialized (never two at once, so fn needs no lock of its own); fn must
 * return soon (the shard waits), must not block on corio and must not call
 * corio_set_log(). corio_set_log() may be called from any thread at any
 * time; once it returns, the previous fn is not running and is never called
 * again. line is valid only during the call. The one exception is the
 * stack-overflow line, written to stderr from the signal handler.
 */
typedef void (*corio_log_fn)(void *arg, const char *line);
CORIO_API void corio_set_log(corio_log_fn fn, void *arg);

CORIO_API unsigned corio_shard_id(void);    /* this shard's index; UINT32_MAX off-shard */
CORIO_API unsigned corio_shard_count(void); /* shards in this runtime; 0 off-shard      */
CORIO_API int corio_shard_cpu(void);        /* the CPU this shard is pinned to          */
CORIO_API uint64_t corio_now_ns(void);      /* CLOCK_MONOTONIC in nanoseconds; any thread */

/* ---- fibers (shard-local) ------------------------------------------------ */

struct corio_fiber; /* opaque */

/*
 * Stack overflow. Below each fiber stack lie cfg.stack_guard inaccessible
 * bytes. An access there ends the process (SIGSEGV) after this line on
 * stderr: "corio: stack overflow in fiber 'NAME' (id N) on shard S: ...".
 * That holds when the first access below the stack lands in the guard: any
 * overflow by frames smaller than the guard, and by frames of any size in
 * code built with -fstack-clash-protection (it touches a large frame, alloca
 * or VLA page by page, downwards). In code built without it, one frame
 * larger than the guard can write below the guard unnoticed, into whatever
 * is mapped there (often another fiber's stack): build fiber code with
 * -fstack-clash-protection (corio itself is), or raise stack_guard.
 */
struct corio_spawn_opts {
	size_t stack_size;    /* 0: the config's stack_size; else 16 KiB..1 GiB,
	                         rounded up to a page                          */
	const char *name;     /* for stall and overflow reports; copied (23 ch) */
	unsigned flags;       /* must be 0                                       */
	unsigned sched_class; /* the class it runs in (corio/sched.h); 0: the
	                         default class, not the spawner's. Was
	                         reserved (must be 0) before classes existed  */
	/* Optional: called once with arg, instead of fn, when the fiber ends
	 * without ever having run (cancelled before it started, shutdown, no
	 * stack could be mapped), so whatever arg owns (a socket, a record)
	 * is not lost. It runs on the shard's loop and must not block. Fills
	 * what was reserved[1..2] in 0.1.0: zero there means none. */
	void (*release)(void *arg);
};

/*
 * Start fn(arg) in a new fiber on this shard. It runs after the caller next
 * parks or yields. With out == NULL the fiber is detached (freed when it
 * ends); otherwise *out must be passed to corio_join() or corio_detach().
 * Returns 0, -EINVAL (bad opts), -ENOMEM, or -ECANCELED when the runtime is
 * shutting down. Shard-local.
 */
CORIO_API int corio_spawn(int (*fn)(void *arg), void *arg, const struct corio_spawn_opts *opts,
			  struct corio_fiber **out);

/* Let other ready fibers run; this one runs again on a later loop turn. */
CORIO_API void corio_yield(void);

/*
 * Wait for f to end and free it; its status (fn's return value or
 * corio_exit()'s argument; -ECANCELED if it was cancelled before it ever
 * ran, -ENOMEM if no stack could be mapped for it) is stored in *status
 * when status != NULL. Returns 0, -EINVAL (f is the caller, of another
 * shard, detached, being joined by another fiber or a corio_select(), or
 * already joined), -ECANCELED when the joining fiber is cancelled, or
 * -ETIMEDOUT at its deadline scope: both even when f has already ended,
 * and f stays joinable. Blocking.
 *
 * Stale handles: once f was joined, or was detached and has ended, its
 * record goes back to the shard's pool, and every call given the handle
 * (corio_join, corio_detach, corio_cancel, a corio_sel_fiber item) fails
 * with -EINVAL. The limit: that holds until a later spawn reuses the
 * record, which happens no sooner than 64 other fibers have been freed on
 * the shard after it (unless no memory for new records is left); after
 * that the handle names the new fiber.
 */
CORIO_API int corio_join(struct corio_fiber *f, int *status);

/* Give up the right to join f: it is freed when it ends (now, if it has
 * ended). 0, or -EINVAL for a handle corio_join() would refuse (detached,
 * already joined, or another fiber is joining it). Shard-local. */
CORIO_API int corio_detach(struct corio_fiber *f);

/* End the calling fiber with status. Never returns. */
CORIO_API void corio_exit(int status) __attribute__((noreturn));

/*
 * Cancel f: its current blocking call (and every later one) returns
 * -ECANCELED, after the kernel has let go of the call's memory. A fiber that
 * has not started yet never runs and ends with status -ECANCELED (its
 * spawn options' release, if any, gets arg then). Cancelling
 * a finished fiber that is still joinable does nothing. Returns 0, or
 * -EINVAL for NULL, a fiber of another shard, or a stale handle (see
 * corio_join()). Shard-local.
 */
CORIO_API int corio_cancel(struct corio_fiber *f);

CORIO_API struct corio_fiber *corio_self(void); /* NULL outside a fiber      */
CORIO_API int corio_cancelled(void);            /* 1 if the caller is cancelled */
CORIO_API const char *corio_fiber_name(const struct corio_fiber *f);

/* ---- fiber-local sync (shard-local, no atomics) -------------------------- */
/*
 * These objects live on one shard: every fiber using one must belong to the
 * shard that initialised it. Waiters are woken in FIFO order. Each wait
 * returns 0, or -ECANCELED / -ETIMEDOUT when the waiting fiber is
 * cancelled or its deadline scope passes, before it looks at the object
 * (the rule at the top: a set event, a free permit or a queued element is
 * not taken then), or -EPERM off a fiber.
 * Misuse that release builds survive (see the top): corio_wg_add() or
 * corio_wg_done() taking the count below zero leaves it at 0 (the waiters
 * wake); corio_mutex_unlock() by a fiber that does not hold the mutex
 * changes nothing; corio_chan_destroy() with fibers waiting closes the
 * channel first, so they get -EPIPE (c must stay valid until they ran).
 * Each sets corio_last_error().
 */
struct corio_waitq { /* private: an intrusive list of parked fibers */
	struct corio_fiber *head, *tail;
};

struct corio_event { /* manual-reset event */
	struct corio_waitq wq;
	int set;
};
CORIO_API void corio_event_init(struct corio_event *ev);
CORIO_API void corio_event_set(struct corio_event *ev);   /* wakes all waiters */
CORIO_API void corio_event_reset(struct corio_event *ev);
CORIO_API int corio_event_wait(struct corio_event *ev);   /* blocking */

struct corio_wg { /* wait group: wait until the count drops to zero */
	struct corio_waitq wq;
	long count;
};
CORIO_API void corio_wg_init(struct corio_wg *wg);
CORIO_API void corio_wg_add(struct corio_wg *wg, long n);
CORIO_API void corio_wg_done(struct corio_wg *wg);
CORIO_API int corio_wg_wait(struct corio_wg *wg); /* blocking */

struct corio_sem { /* counting semaphore; releases hand permits to waiters */
	struct corio_waitq wq;
	long count;
};
CORIO_API void corio_sem_init(struct corio_sem *s, long count);
CORIO_API int corio_sem_acquire(struct corio_sem *s);     /* blocking */
CORIO_API int corio_sem_try_acquire(struct corio_sem *s); /* 0 or -EAGAIN */
CORIO_API void corio_sem_release(struct corio_sem *s);

struct corio_mutex { /* fiber mutex: owned by the fiber that locked it */
	struct corio_waitq wq;
	struct corio_fiber *owner;
};
CORIO_API void corio_mutex_init(struct corio_mutex *m);
CORIO_API int corio_mutex_lock(struct corio_mutex *m);    /* blocking */
CORIO_API int corio_mutex_trylock(struct corio_mutex *m); /* 0 or -EBUSY */
CORIO_API void corio_mutex_unlock(struct corio_mutex *m);

/* Bounded channel of fixed-size elements, copied in and out. */
struct corio_chan {
	struct corio_waitq recvq, sendq;
	unsigned char *buf;
	size_t esize, cap, head, len;
	int closed;
};
/* cap >= 1 elements of esize >= 1 bytes: 0, -EINVAL or -ENOMEM. */
CORIO_API int corio_chan_init(struct corio_chan *c, size_t esize, size_t cap);
CORIO_API void corio_chan_destroy(struct corio_chan *c); /* no fiber may be waiting */
/* send: 0, -EPIPE when closed, -ECANCELED. recv: 0, -EPIPE when closed and empty. */
CORIO_API int corio_chan_send(struct corio_chan *c, const void *elem); /* blocking */
CORIO_API int corio_chan_recv(struct corio_chan *c, void *elem);       /* blocking */
CORIO_API int corio_chan_try_send(struct corio_chan *c, const void *elem); /* or -EAGAIN */
CORIO_API int corio_chan_try_recv(struct corio_chan *c, void *elem);       /* or -EAGAIN */
CORIO_API void corio_chan_close(struct corio_chan *c); /* wakes every waiter */

/* ---- raw ring operations (blocking, shard-local) ------------------------ */

/* One IORING_OP_NOP through this shard's ring: 0 or -ECANCELED. */
CORIO_API int corio_nop(void);

/*
 * Wait until fd is ready for the poll(2) events mask: the revents, or -errno.
 * A poll waits on the file fd names when it starts: if fd is closed while
 * it waits, it ends only by its deadline or a cancel (io_uring holds the
 * old file; the fallback never reports another file's state to it), and a
 * new poll of a new file that reuses the number sees that file at once, on
 * both backends.
 */
CORIO_API int corio_poll(int fd, unsigned events);

/* ---- stats ---------------------------------------------------------------- */

/* Buckets of the loop histograms: bucket 0 counts durations below 256 ns,
 * bucket b (1..30) those in [2^(b+7), 2^(b+8)) ns, bucket 31 the rest. */
#define CORIO_STATS_HIST_BUCKETS 32

/*
 * One shard's counters. Each is written only by its shard and can be read
 * from any thread without tearing; a snapshot is not atomic as a whole.
 * New counters are added at the end.
 */
struct corio_stats {
	uint64_t loop_turns;     /* shard loop iterations                        */
	uint64_t enters;         /* io_uring_enter calls                          */
	uint64_t sqes;           /* SQEs submitted                                */
	uint64_t cqes;           /* CQEs reaped                                   */
	uint64_t sq_full;        /* SQE requests that found the SQ full           */
	uint64_t cq_overflow;    /* turns that found the CQ overflowed (flushed)  */
	uint64_t fibers_live;    /* fibers that have not ended                    */
	uint64_t fibers_spawned; /* fibers ever spawned                           */
	uint64_t switches;       /* context switches                              */
	uint64_t idle_ns;        /* time with nothing to run: blocked in
	                            io_uring_enter, or spinning (idle=spin/poll);
	                            read from another thread it includes the
	                            idle period in progress; no reading is ever
	                            below an earlier one                         */
	uint64_t busy_ns;        /* time not blocked                              */
	uint64_t ring_flags;     /* IORING_SETUP_* flags the ring runs with       */
	uint64_t ring_features;  /* IORING_FEAT_* the kernel reported             */
	uint64_t cpu;            /* CPU the shard is pinned to                    */
	/* loop instrumentation (core/loop.c); see corio/stats.h */
	uint64_t wakes;          /* blocking enters that returned (shard slept)   */
	uint64_t wake_cqes;      /* CQEs reaped right after those wake-ups        */
	uint64_t doorbells_in;   /* eventfd wake-ups (foreign threads, shutdown);
	                            MSG_RING ones are in the peers' msg stats     */
	uint64_t stalls;         /* fibers or loop turns that ran past stall_ns
	                            on CPU (time descheduled is not counted)    */
	uint64_t turn_max_ns;    /* longest loop turn (CPU time, idle excluded)   */
	uint64_t gap_max_ns;     /* longest gap between two looks at the ring     */
	uint64_t gap_ns;         /* sum of the gaps (the turns' sum is busy_ns)   */
	/* log2 buckets, see corio_stats_hist_bucket_ns() */
	uint64_t turn_hist[CORIO_STATS_HIST_BUCKETS]; /* loop-turn durations     */
	uint64_t gap_hist[CORIO_STATS_HIST_BUCKETS];  /* gaps between ring polls */
	uint64_t cqe_dropped;    /* io_uring_enter said EBADR: the kernel dropped
	                            completions (out of memory); should stay 0   */
	uint64_t cpu_ns;         /* CPU time the shard's thread has used, user
	                            and kernel, read when the snapshot is taken.
	                            The kernel's work for the shard inside a
	                            blocking io_uring_enter (receiving, task
	                            work) is here, while idle_ns counts that
	                            enter as idle: under load busy_ns + idle_ns
	                            is wall time, cpu_ns what the shard cost   */
	uint64_t backend;        /* 0: io_uring, 1: the epoll fallback (the ring
	                            emulator; enters and sqes count its calls) */
};

/* Copy a snapshot of shard's counters. Any thread while the runtime runs
 * (rt may be NULL on a shard: its own runtime). 0, -EINVAL or -EPERM. */
CORIO_API int corio_stats_get(struct corio_rt *rt, unsigned shard, struct corio_stats *out);

#ifdef __cplusplus
}
#endif

/* Per-area headers; each also compiles on its own. */
#include "corio/timer.h" /* sleeps, timers, deadlines, per-call timeouts */
#include "corio/msg.h"   /* cross-shard messages                        */
#include "corio/net.h"   /* TCP, UDP and Unix sockets                   */
#include "corio/fs.h"    /* file I/O                                    */
#include "corio/stats.h" /* stats rendering, control socket, /metrics   */
#include "corio/select.h" /* wait for the first of many; fiber groups */
#include "corio/work.h"   /* the blocking-work pool                      */
#include "corio/stream.h" /* buffered streams over a transport           */
#include "corio/tls.h"    /* TLS sessions (OpenSSL; no OpenSSL header)   */
#include "corio/sched.h"  /* scheduling classes, should_yield          */
#include "corio/serve.h"  /* serve an address on every shard, and drain  */
#include "corio/copy.h"   /* bytes both ways between two connections     */
#include "corio/pool.h"   /* outgoing connection pools                   */

#endif /* CORIO_H */
