/* SPDX-License-Identifier: MIT */
/*
 * corio/msg.h - cross-shard messages. Include <corio.h>.
 *
 * Shards share nothing; these calls are the only way one shard makes another
 * do something. Each shard owns one bounded inbound ring of fixed-size slots
 * (cfg.msg_slots, a power of two): a message is a function pointer and its
 * argument, copied into a slot; nothing is allocated per message.
 *
 * Guarantees:
 *  - A message that was accepted (the call returned 0) runs exactly once on
 *    its target, after every message the same sender accepted for that
 *    target earlier (per-sender FIFO). There is no order between senders.
 *  - A message that was not accepted never runs, and the sender is told:
 *    -EAGAIN (the ring is full; the *_wait variants park the fiber until
 *    there is room instead), -ECANCELED (the target is shutting down and
 *    has closed its ring, or the caller was cancelled), or -ETIMEDOUT (a
 *    *_wait variant, corio_call or corio_gather reached the caller's
 *    deadline scope while it waited for room; like every blocking call,
 *    in an expired scope they start nothing and return -ETIMEDOUT at once).
 *  - Shutdown: a shard that stops closes its ring and still runs every
 *    message it accepted before the close (corio_post functions run on the
 *    stopping loop; calls that had not started report -ECANCELED to their
 *    caller; see corio_spawn_on for fibers). Nothing vanishes. A shard
 *    does not finish stopping while a call it made is unanswered (one whose
 *    caller left at its deadline included): targets answer as they stop.
 *  - The runtime does not stop by itself (no live fiber anywhere) while a
 *    corio_spawn_on() message is in flight. A corio_post() in flight does
 *    not keep it alive, but it still runs while the target stops.
 *  - Waking a target costs nothing while it is awake. A sleeping target is
 *    woken once (one doorbell per sleep, whoever posts first), by an
 *    IORING_OP_MSG_RING from a shard or an eventfd write from a foreign
 *    thread.
 *
 * Threads: everything here is shard-local except corio_post_foreign() and
 * corio_msg_stats_get() with a non-NULL rt. Functions passed to corio_post()
 * run on the target's loop, not in a fiber: they must not block (they may
 * post, spawn fibers, set events).
 */
#ifndef CORIO_MSG_H
#define CORIO_MSG_H

#include <corio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Run fn(arg) on shard's loop. fn must not block. Returns 0 (queued),
 * -EAGAIN (shard's ring is full), -ECANCELED (shard is stopping),
 * -EINVAL (no such shard, fn NULL), -EPERM (not on a shard). Shard-local,
 * never blocks; may be called from a corio_post() function. shard may be
 * the caller's own (runs on a later loop turn).
 */
CORIO_API int corio_post(unsigned shard, void (*fn)(void *arg), void *arg);

/* corio_post(), but when the ring is full the calling fiber parks (no
 * spinning) until the target has drained some slots. Returns 0,
 * -ECANCELED (target stopping, or the caller was cancelled: not queued),
 * -ETIMEDOUT (the caller's deadline scope passed before there was room:
 * not queued), -EINVAL, -EPERM. Blocking. */
CORIO_API int corio_post_wait(unsigned shard, void (*fn)(void *arg), void *arg);

/*
 * Run fn(arg) in a new fiber on shard and park the calling fiber until it
 * returns; its return value is stored in *result (result may be NULL).
 * Waits for room when the target's ring is full. Returns 0 when fn ran,
 * -ECANCELED when it did not (the target is stopping, or the caller was
 * cancelled before the request was queued), -ETIMEDOUT (the caller's
 * deadline scope passed; see below), -ENOMEM (no memory for the request,
 * or no fiber or stack on the target), -EINVAL, -EPERM.
 *
 * Cancellation: once queued the call waits for the target's answer even if
 * the caller is cancelled meanwhile, so fn may use *arg until the call
 * returns and arg may live on the caller's stack.
 *
 * Deadlines: fn runs inside the caller's deadline scope (its blocking calls
 * over there return -ETIMEDOUT at the same deadline), and the caller never
 * waits past it. At the deadline corio_call returns -ETIMEDOUT at once:
 * if fn had not started, it never runs; if it runs, it runs to its end
 * exactly once on the target and its result is dropped. So fn may still
 * be using *arg after a -ETIMEDOUT: inside a deadline scope, arg must not
 * live on the caller's stack (or wrap the call in corio_deadline_shield()
 * to wait for the answer). The call's own record is not on the caller's
 * stack. If the scope's timer cannot be armed (the caller's shard has begun
 * to stop, as when a cancelled corio_gather() still queues its later calls,
 * or no memory for the timer) the caller waits for the answer without the
 * bound; a stopping target answers at once. Blocking.
 */
CORIO_API int corio_call(unsigned shard, intptr_t (*fn)(void *arg), void *arg, intptr_t *result);

/*
 * Start fn(arg) as a detached fiber on shard (corio_spawn() over there).
 * Returns 0 (queued), -EAGAIN (full), -ECANCELED, -EINVAL, -EPERM; never
 * blocks. The runtime does not stop by itself before the fiber exists. If
 * the target is shutting down when the message arrives, or shutdown
 * cancels the fiber before it first ran, or it gets no stack, fn never
 * runs, exactly like a local corio_spawn() during shutdown (counted in
 * corio_msg_stats.spawn_failed; corio_spawn_on_ex() can release arg then);
 * use corio_call() when the caller must know whether the work ran.
 */
CORIO_API int corio_spawn_on(unsigned shard, int (*fn)(void *arg), void *arg);
/* corio_spawn_on() that parks the fiber until there is room: also returns
 * -ETIMEDOUT at the caller's deadline scope (not queued). Blocking. */
CORIO_API int corio_spawn_on_wait(unsigned shard, int (*fn)(void *arg), void *arg);

/* Flags for corio_spawn_on_ex(). */
#define CORIO_SPAWN_ON_WAIT 1u /* park until there is room (corio_spawn_on_wait) */

/*
 * corio_spawn_on() / corio_spawn_on_wait() (flags CORIO_SPAWN_ON_WAIT)
 * for an argument that owns something (a heap record, an fd). When the
 * call returns 0, exactly one of fn(arg) or release(arg) is called, on the
 * target: release when fn will never run - the target was stopping when
 * the message arrived, it had no memory for the fiber, the fiber was
 * cancelled by shutdown before it first ran, or no stack could be mapped
 * for it; each such case also counts in spawn_failed. release runs on the
 * target's loop, not in a fiber: it must not block. release may be NULL
 * (then this is corio_spawn_on). When the call returns an error, nothing
 * is called and arg is still the caller's. -EINVAL for unknown flags.
 */
CORIO_API int corio_spawn_on_ex(unsigned shard, int (*fn)(void *arg), void *arg,
				void (*release)(void *arg), unsigned flags);

/*
 * Cross-shard work in a scheduling class (corio/sched.h): as corio_call(),
 * corio_spawn_on_ex() and corio_post(), with the work run on the target in
 * class cls (an id from corio_class_create(); ids are the same on every
 * shard, and a shard that has not used the class yet sets it up with the
 * first creator's shares). corio_post_class() runs fn in a fiber of cls on
 * the target, not on its loop, so fn may block there; if no fiber can be
 * had for it (the target is stopping), fn runs on the target's loop
 * instead: still exactly once. cls 0 is the default class (and
 * corio_post_class(shard, 0, ...) is corio_post()). -EINVAL for a class
 * that does not exist, besides each call's own errors.
 */
CORIO_API int corio_call_class(unsigned shard, unsigned cls, intptr_t (*fn)(void *arg), void *arg,
			       intptr_t *result);
CORIO_API int corio_spawn_on_class(unsigned shard, unsigned cls, int (*fn)(void *arg), void *arg,
				   void (*release)(void *arg), unsigned flags);
CORIO_API int corio_post_class(unsigned shard, unsigned cls, void (*fn)(void *arg), void *arg);

/*
 * corio_post_wait(fn, arg) to every shard, this one included, in shard
 * order. Returns how many shards it was queued on: corio_shard_count()
 * unless the caller was cancelled, its deadline scope passed (it stops
 * there) or shards are stopping; -ECANCELED / -ETIMEDOUT when that was so
 * before it queued anything (corio.h's rule for blocking calls); or
 * -EINVAL, -EPERM. Blocking.
 */
CORIO_API int corio_broadcast(void (*fn)(void *arg), void *arg);

/*
 * corio_call(i, fn, arg, &results[i]) on every shard i, this one included,
 * running concurrently (map-reduce: "sum a counter over all shards").
 * results must hold corio_shard_count() entries (may be NULL). Returns 0
 * when fn ran everywhere, else the first error in shard order (the other
 * results are still filled; 0 where fn did not run or its result was
 * dropped). At the caller's deadline scope: -ETIMEDOUT, with each call
 * still out treated as corio_call() treats it. Blocking.
 */
CORIO_API int corio_gather(intptr_t (*fn)(void *arg), void *arg, intptr_t *results);

/*
 * corio_gather over a subset: corio_call(shards[i], fn, arg, &results[i])
 * for each of the n shards listed (each at most once, this one may be
 * among them), running concurrently; results (may be NULL) holds n
 * entries, in the order of shards. n 0 returns 0 at once. Returns as
 * corio_gather, or -EINVAL (shards NULL with n > 0, a shard not in the
 * runtime, one named twice; with a message). Blocking.
 *
 * Structured results: fn returns an intptr_t, so a result larger than a
 * pointer travels in memory the caller owns. Give each target its own
 * slot, e.g. arg pointing at an array of per-shard structs that fn
 * indexes with corio_shard_id() (each shard writes only its own slot,
 * so no lock), or have fn return a pointer to a struct it allocated,
 * which the caller frees. The caller reads the slots after the call
 * returned 0 (the replies order the writes before the return); after
 * -ETIMEDOUT a call still out may write its slot later, so keep that
 * memory alive (a heap array, not the stack) or wait without a deadline.
 */
CORIO_API int corio_gather_some(const unsigned *shards, unsigned n, intptr_t (*fn)(void *arg),
				void *arg, intptr_t *results);

/*
 * corio_post() from a thread that is not one of rt's shards (any thread).
 * A sleeping target is woken with an eventfd write. Returns 0, -EAGAIN
 * (full: retry later; there is no waiting variant for foreign threads),
 * -ECANCELED (stopping or stopped), -EINVAL. Valid until corio_wait(rt)
 * returns; never after (rt is freed then).
 */
CORIO_API int corio_post_foreign(struct corio_rt *rt, unsigned shard, void (*fn)(void *arg),
				 void *arg);

/* Per-peer message counters of one shard; each written by one thread. */
struct corio_msg_stats {
	uint64_t sent;         /* messages this shard queued on peer's ring      */
	uint64_t received;     /* messages from peer this shard ran / handled    */
	uint64_t full;         /* posts to peer that found its ring full         */
	uint64_t doorbells;    /* wake-ups this shard sent to a sleeping peer    */
	uint64_t calls;        /* corio_call requests this shard sent to peer    */
	uint64_t spawn_failed; /* spawn_on from peer whose fn never ran          */
	uint64_t doorbell_failed; /* MSG_RING doorbells to peer the kernel failed
				     after the submit (the eventfd rang instead) */
	uint64_t reserved[1];
};

/* Peer index for "all foreign threads" (then sent and full count what
 * foreign threads did to this shard; their doorbells are not counted) and
 * for the sum over every peer. */
#define CORIO_MSG_PEER_FOREIGN 0xfffffffeu
#define CORIO_MSG_PEER_ALL     0xffffffffu

/*
 * Copy shard's counters for peer (a shard index, CORIO_MSG_PEER_FOREIGN or
 * CORIO_MSG_PEER_ALL). rt may be NULL on a shard (its own runtime); other
 * threads pass a running rt. Returns 0, -EINVAL or -EPERM.
 */
CORIO_API int corio_msg_stats_get(struct corio_rt *rt, unsigned shard, unsigned peer,
				  struct corio_msg_stats *out);

#ifdef __cplusplus
}
#endif

#endif
