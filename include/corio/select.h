/* SPDX-License-Identifier: MIT */
/*
 * corio/select.h - structured concurrency: wait for the first of many
 * things (corio_select), and run fibers as one unit (fiber groups).
 * Include <corio.h>.
 *
 * Everything here is shard-local: the things waited on, the group and its
 * members all belong to the calling fiber's shard.
 *
 * ---- select -----------------------------------------------------------------
 *
 * A select item is a small caller-owned record (an array of them on the
 * stack is the usual form; nothing is allocated per call after warm-up).
 * Fill each with one constructor, then call corio_select():
 *
 *	struct corio_sel w[3];
 *	corio_sel_recv(&w[0], sock, buf, sizeof buf);   // bytes from a socket
 *	corio_sel_chan_recv(&w[1], &jobs, &job);         // an element from a channel
 *	corio_sel_deadline(&w[2], corio_now_ns() + ms);  // or give up at a time
 *	switch (corio_select(w, 3)) {
 *	case 0: n = w[0].res; ...                        // buf holds n bytes
 *	...
 *
 * corio_select() returns the index of the item that completed, and that
 * item's result in its res field. Exactly one item completes per call: the
 * others are left as they were, with nothing taken from them (no channel
 * element, no byte, no timer expiration), so the same array can be passed
 * again, or the things used directly. When several are ready at once the
 * lowest index wins (order the array by priority; rotate it for fairness).
 *
 * In-flight I/O. A socket item receives through the socket's receive stream
 * (one multishot receive on the shard's provided-buffer ring, as
 * corio_recv_buf() uses): arming it costs one SQE the first time and none
 * afterwards, an idle socket holds no buffer, and the caller's buffer is
 * only ever written by corio_select() itself, by a copy. A losing socket
 * keeps its receive armed: bytes that arrive later are queued in the socket
 * and returned by the next select, corio_recv() or corio_recv_buf() on it,
 * never lost. That stream is the socket's, not the select's: corio_close()
 * cancels it and waits for its final completion (invariant 2), as it does
 * for corio_recv_buf(). So when corio_select() returns - with a winner,
 * -ECANCELED or -ETIMEDOUT - the kernel references no memory of the caller.
 *
 * Results in res, per kind:
 *   recv        bytes copied (>= 1), 0 at end of stream, -errno (-EBUSY
 *               when another fiber is receiving on the socket)
 *   chan_recv   0 (element stored in elem), -EPIPE (closed and empty)
 *   chan_send   0 (element copied from elem into the channel), -EPIPE
 *   event       0 (the event is set; it is not reset)
 *   wg          0 (the count is zero)
 *   fiber       the fiber's exit status; it has ended but must still be
 *               joined (corio_join() then returns at once)
 *   timer       expirations collected (>= 1), or -ENOENT when it is not
 *               armed and none is pending (never armed, a one-shot already
 *               collected, or cancelled): such an item always completes,
 *               so drop a spent timer from the array
 *   deadline    0 (the time has come)
 *   group       the group's first error, or 0 (no member is left)
 *
 * corio_select() itself returns the winning index (>= 0), or
 *   -EINVAL     items is NULL, n is 0, or an item was not filled (or its
 *               constructor got a NULL object)
 *   -ECANCELED  the calling fiber was cancelled (nothing was taken)
 *   -ETIMEDOUT  the fiber's deadline scope ended first
 *   -ENOMEM     no memory for the stand-ins that wait on each item
 *   -EPERM      not called from a fiber
 * Blocking. While it waits, each item's object counts as waited on by this
 * fiber: a channel's or an event's other waiters are unaffected (a wake-up
 * the select does not use is handed on), but a socket or a fiber accepts
 * one waiter (another corio_recv() on the socket gets -EBUSY, another
 * corio_join() -EINVAL). Cost: O(n) per call to register and unregister.
 *
 * ---- fiber groups -------------------------------------------------------------
 *
 * A group runs fibers as one unit, like a Trio nursery or Go's errgroup:
 *
 *	struct corio_group g;
 *	corio_group_init(&g, CORIO_GROUP_CANCEL_ON_ERROR);
 *	for (i = 0; i < n; i++)
 *		corio_group_spawn(&g, fetch, &job[i], NULL, &status[i]);
 *	err = corio_group_wait(&g);       // all ended; the first error, or 0
 *
 * A member's status (its function's return value or corio_exit()'s
 * argument) is an error when it is negative. The group remembers the first
 * error (in the order members ended) and which member returned it. With
 * CORIO_GROUP_CANCEL_ON_ERROR the first error cancels every other member
 * (their blocking calls return -ECANCELED); members that then end with
 * -ECANCELED are not errors of their own.
 *
 * Leaving the scope never leaves a fiber behind: corio_group_wait() returns
 * only when no member is left, even when the waiting fiber is cancelled or
 * its deadline passes (it then cancels the members, waits for them and
 * returns -ECANCELED / -ETIMEDOUT), and corio_group_close() cancels what is
 * left and waits, without being interruptible. A member that ignores
 * cancellation (loops without a blocking call) holds the wait up: members
 * must be written to end when cancelled.
 */
#ifndef CORIO_SELECT_H
#define CORIO_SELECT_H

#include <corio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct corio_sock;
struct corio_timer;
struct corio_group;

/* One thing to wait for. Fill it with a constructor below; the private
 * fields belong to corio_select() while it runs. */
struct corio_sel {
	void *obj;           /* the waitable (socket, channel, event, ...)      */
	void *buf;           /* recv: where bytes go; chan: the element         */
	size_t len;          /* recv: room in buf                               */
	uint64_t ns;         /* deadline: CLOCK_MONOTONIC ns                    */
	ssize_t res;         /* out: the item's result when it won (see above)  */
	const void *_ops;    /* private: the kind's operations                  */
	void *_proxy;        /* private: the stand-in waiting on obj            */
	void *_ctx;          /* private: the running select                     */
	intptr_t _aux;       /* private                                         */
};

/* Constructors. Each fills *it completely and never fails: an invalid
 * argument (NULL object, empty buffer) makes corio_select() return -EINVAL. */
CORIO_API void corio_sel_recv(struct corio_sel *it, struct corio_sock *s, void *buf, size_t len);
CORIO_API void corio_sel_chan_recv(struct corio_sel *it, struct corio_chan *c, void *elem);
CORIO_API void corio_sel_chan_send(struct corio_sel *it, struct corio_chan *c, const void *elem);
CORIO_API void corio_sel_event(struct corio_sel *it, struct corio_event *ev);
CORIO_API void corio_sel_wg(struct corio_sel *it, struct corio_wg *wg);
/* f must be joinable (not detached) and not being joined. */
CORIO_API void corio_sel_fiber(struct corio_sel *it, struct corio_fiber *f);
/* t must be a timer without callback (corio_timer_init(t, NULL, NULL)). */
CORIO_API void corio_sel_timer(struct corio_sel *it, struct corio_timer *t);
CORIO_API void corio_sel_deadline(struct corio_sel *it, uint64_t deadline_ns);
CORIO_API void corio_sel_group(struct corio_sel *it, struct corio_group *g);

/* Wait until one of items[0..n) completes: its index, or -errno (above). */
CORIO_API int corio_select(struct corio_sel *items, size_t n);

/* Like corio_select(), but never waits: the index of the first item that is
 * ready now (completed, as corio_select() would), or -EAGAIN. Does not
 * need a fiber; shard-local. */
CORIO_API int corio_select_try(struct corio_sel *items, size_t n);

/* ---- fiber groups ------------------------------------------------------------ */

#define CORIO_GROUP_CANCEL_ON_ERROR 0x1u /* the first error cancels the rest */
#define CORIO_GROUP_ALL             0x1u

/* A group. The caller owns the memory; the fields are private. It may be
 * reused or freed once no member is left (after corio_group_wait() or
 * corio_group_close() returned) and no fiber waits on it. */
struct corio_group {
	struct corio_waitq wq;       /* private: fibers waiting for the group */
	struct corio_fiber *members; /* private: members that have not ended  */
	void *shard;                 /* private */
	unsigned flags;              /* private */
	unsigned live;               /* private: members not ended            */
	unsigned spawned;            /* private: next member index            */
	unsigned err_index;          /* private */
	int err;                     /* private: first error, 0: none         */
	int cancelled;               /* private */
};

/* Initialise g (flags: CORIO_GROUP_*): 0, or -EINVAL (g NULL, unknown
 * flags). Shard-local; the group belongs to the calling shard. */
CORIO_API int corio_group_init(struct corio_group *g, unsigned flags);

/*
 * Start fn(arg) in a new fiber that belongs to g (opts as corio_spawn()).
 * When it ends, its status is stored in *status (status may be NULL; it
 * must stay valid until the member has ended). Returns the member's index
 * (0, 1, ... in spawn order), or -EINVAL, -ENOMEM, or -ECANCELED when the
 * group was cancelled (by corio_group_cancel() or a first error with
 * CORIO_GROUP_CANCEL_ON_ERROR) or the runtime is shutting down.
 * Shard-local; may be called from members too.
 */
CORIO_API int corio_group_spawn(struct corio_group *g, int (*fn)(void *arg), void *arg,
				const struct corio_spawn_opts *opts, int *status);

/*
 * Wait until every member has ended; returns the first error (a member's
 * negative status) or 0. When the waiting fiber is cancelled or its
 * deadline scope ends first (before the call, too: even when no member is
 * left), the members are cancelled and waited for, and the call returns
 * -ECANCELED / -ETIMEDOUT. -EINVAL (bad g), -EDEADLK (a
 * member waiting for its own group). Blocking; several fibers may wait.
 */
CORIO_API int corio_group_wait(struct corio_group *g);

/* Cancel every member that has not ended, and refuse new ones. Returns at
 * once: 0 or -EINVAL. Shard-local. */
CORIO_API int corio_group_cancel(struct corio_group *g);

/* Leave the group's scope: cancel the members that are left and wait for
 * them, even if the calling fiber is cancelled. Returns the first error or
 * 0 (-EINVAL, -EDEADLK as for corio_group_wait). Blocking. */
CORIO_API int corio_group_close(struct corio_group *g);

/* The first error (0: none) and, when index is not NULL and there was one,
 * the index of the member that returned it. */
CORIO_API int corio_group_error(const struct corio_group *g, unsigned *index);

/* Members that have not ended yet. */
CORIO_API unsigned corio_group_live(const struct corio_group *g);

#ifdef __cplusplus
}
#endif

#endif
