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
 *    there is room instead), or -ECANCELED (the target is shutting down and
 *    has closed its ring).
 *  - Shutdown: a shard that stops closes its ring and still runs every
 *    message it accepted before the close (corio_post functions run on the
 *    stopping loop; calls that had not started report -ECANCELED to their
 *    caller; see corio_spawn_on for fibers). Nothing vanishes.
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
 * -EINVAL, -EPERM. Blocking. */
CORIO_API int corio_post_wait(unsigned shard, void (*fn)(void *arg), void *arg);

/*
 * Run fn(arg) in a new fiber on shard and park the calling fiber until it
 * returns; its return value is stored in *result (result may be NULL).
 * Waits for room when the target's ring is full. Returns 0 when fn ran,
 * -ECANCELED when it did not (the target is stopping, or the caller was
 * cancelled before the request was queued), -ENOMEM (no fiber on the
 * target), -EINVAL, -EPERM.
 * Once queued the call always waits for the target's answer, even if the
 * caller is cancelled meanwhile: fn may read and write *arg until the call
 * returns, so arg may live on the caller's stack. Blocking.
 */
CORIO_API int corio_call(unsigned shard, intptr_t (*fn)(void *arg), void *arg, intptr_t *result);

/*
 * Start fn(arg) as a detached fiber on shard (corio_spawn() over there).
 * Returns 0 (queued), -EAGAIN (full), -ECANCELED, -EINVAL, -EPERM; never
 * blocks. The runtime does not stop by itself before the fiber exists. If
 * the target is shutting down when the message arrives, the fiber is not
 * started, exactly like a local corio_spawn() during shutdown (counted in
 * corio_msg_stats.spawn_failed); use corio_call() when the caller must
 * know whether the work ran.
 */
CORIO_API int corio_spawn_on(unsigned shard, int (*fn)(void *arg), void *arg);
/* corio_spawn_on() that parks the fiber until there is room. Blocking. */
CORIO_API int corio_spawn_on_wait(unsigned shard, int (*fn)(void *arg), void *arg);

/*
 * corio_post_wait(fn, arg) to every shard, this one included, in shard
 * order. Returns how many shards it was queued on: corio_shard_count()
 * unless the caller was cancelled or shards are stopping; or -EINVAL,
 * -EPERM. Blocking.
 */
CORIO_API int corio_broadcast(void (*fn)(void *arg), void *arg);

/*
 * corio_call(i, fn, arg, &results[i]) on every shard i, this one included,
 * running concurrently (map-reduce: "sum a counter over all shards").
 * results must hold corio_shard_count() entries (may be NULL). Returns 0
 * when fn ran everywhere, else the first error in shard order (the other
 * results are still filled). Blocking.
 */
CORIO_API int corio_gather(intptr_t (*fn)(void *arg), void *arg, intptr_t *results);

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
	uint64_t spawn_failed; /* spawn_on from peer whose fiber could not start */
	uint64_t reserved[2];
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
