/* SPDX-License-Identifier: MIT */
/*
 * core/msg.c - the cross-shard message ring: post, call, spawn_on,
 * broadcast, gather, post_foreign.
 *
 * ---- The ring ---------------------------------------------------------------
 * Each shard owns one inbound ring of cap = cfg.msg_slots slots (a power of
 * two). A slot is 40 bytes: a sequence word, a function, its argument, an
 * aux word (message kind and sender) and a release function (spawn_on_ex:
 * called instead of fn when fn will never run). Producers are the other shards, the
 * shard itself and foreign threads; the consumer is the owning shard only.
 * It is a bounded MPSC queue with a sequence number per slot:
 *
 *   slot[i].seq == pos          slot free for the producer that claims pos
 *   slot[i].seq == pos + 1      message at pos published
 *   slot[i].seq == pos + cap    consumed; free for position pos + cap
 *
 * Producer: read tail; if slot[tail].seq == tail, claim the position with a
 * CAS tail -> tail + 1 (seq_cst), write fn/arg/aux with plain stores, then
 * publish with ONE release store seq = pos + 1. If slot[tail].seq < tail the
 * slot still holds a message from the previous lap: the ring is full
 * (-EAGAIN). Per-producer FIFO: one producer claims increasing positions, and
 * the consumer takes positions strictly in order.
 * Consumer: while slot[head].seq == head + 1 (acquire; pairs with the
 * producer's release, so fn/arg/aux are visible), copy the slot out, free it
 * with a release store seq = head + cap (pairs with the next producer's
 * acquire load of seq, so our reads of the old payload happen before its
 * writes), advance head (private to the consumer), run the message. At most
 * `batch` messages per loop turn, so a flood cannot starve I/O.
 *
 * ---- No lost wake-up ----------------------------------------------------------
 * The consumer's loop polls this part only in a turn after a hint
 * (corio__shard_hint: bit CORIO__PART_MSG of the shard's `xpend`). Every
 * producer, after publishing - a claim is a seq_cst CAS on tail, a reply a
 * CAS on `done`, a room notice a fetch_or on `room_from` - hints in wake():
 * a seq_cst load of xpend and, if the bit is clear, a seq_cst fetch_or.
 * The loop exchanges xpend to 0 (seq_cst) and then polls, and the poll
 * ends with a seq_cst look at all three words (msg_pending), which treats
 * any position claimed but not consumed as work, published or not: if
 * work is left (the batch limit, a claim still being published) the part
 * hints itself again. A producer that skips the fetch_or because the bit
 * is set loaded it before the loop's exchange in the total order, so its
 * claim comes before that exchange and the closing look sees it.
 * A shard about to block in io_uring_enter (core/loop.c, idle_wait) stores
 * sleeping = 1 (seq_cst), then loads xpend (seq_cst); a producer hints,
 * then loads sleeping (seq_cst). These four accesses are in one total
 * order (the store-buffering pattern, forbidden for seq_cst): either the
 * consumer sees the hint and does not block, or the producer sees
 * sleeping == 1 and rings. No fence is needed on the producer's fast path:
 * the RMWs are full barriers.
 * The producer that sees sleeping == 1 takes the wake-up with an exchange
 * to 0; only the winner rings, so a sleeping shard gets one doorbell however
 * many shards post to it, and the others know a doorbell is on its way. The
 * sleeper stores sleeping = 0 after its enter returns. The same handshake
 * covers the two other things that wake a shard from outside: call replies
 * (a CAS on `done`) and room notices (a fetch_or on `room_from`), each
 * followed by the same sleeping check.
 *
 * Doorbells: from a shard, an IORING_OP_MSG_RING SQE on the sender's own ring
 * that posts a CQE (user_data 0, ignored) on the target's ring, submitted at
 * once; from a foreign thread (or with CORIO_MSG_DOORBELL=eventfd, or an
 * SQPOLL ring), a write to the target's eventfd, on which the target always
 * keeps a read armed. A MSG_RING names the target by fd, so the target must
 * not close its ring between our exchange and the kernel resolving the fd
 * inside our submit: the sender raises the target's db_inflight around it,
 * and a stopping shard does not finish its loop while db_inflight != 0.
 * (The sleeper's store of 0 is seq_cst, so a sender whose exchange won saw
 * the target before that store, and the target's later check of
 * db_inflight sees the sender's increment.)
 *
 * ---- Full ring -----------------------------------------------------------------
 * The *_wait variants park the fiber on a per-target wait queue of its own
 * shard after setting the sender's bit in the target's room_waiters bitmap
 * and trying once more (an acq_rel RMW on the target's room_seq between the
 * two; the consumer does the same between freeing slots and reading the
 * bitmap, so one of them sees the other: room_sync()). After a batch that freed slots, the consumer hands each waiting
 * shard a bit in that shard's room_from bitmap and wakes it; that shard's
 * poll wakes the fibers waiting on that target, which retry.
 *
 * ---- Calls -------------------------------------------------------------------
 * corio_call queues a CALL message whose argument is a record on the
 * caller's stack; the target spawns a fiber that runs fn and pushes the
 * record on the caller shard's `done` stack (a Treiber stack: CAS push by any
 * thread, exchange-all pop by the owner, so no ABA). Replies never need ring
 * space, so two shards calling each other with full rings cannot deadlock.
 * The caller parks in an uninterruptible section: the target may
 * use *arg until it replies, so the caller waits for the reply even when
 * cancelled.
 *
 * ---- Shutdown ------------------------------------------------------------------
 * stop: the ring is closed by setting bit 63 of tail with one fetch_or; the
 * value before it is the final number of positions ever claimed, and every
 * later post sees the bit and returns -ECANCELED. The loop then drains up to
 * that position: posts run, calls are answered -ECANCELED (corio_spawn
 * refuses while stopping), spawn_on messages count as spawn_failed. Calls
 * whose fiber was spawned but never started (stop cancels it before it
 * runs) are answered -ECANCELED at stop. Fibers waiting for room here are
 * woken and get -ECANCELED. So every message is either run or reported.
 * A stopping shard also waits until its own call records are home
 * (calls_out == 0): a caller that left at its deadline no longer holds the
 * shard open, and its record returns only with the late reply.
 * Auto-stop (the runtime ends when no shard has a live fiber): a spawn_on in
 * flight adds one to rt->busy_shards until the target has spawned the
 * fiber, so the runtime cannot end between the post and the spawn. Posts do
 * not keep it alive (that would put a shared atomic on every post); they
 * still run during the stop drain.
 *
 * Memory: every ring lives until corio_wait() has joined all shards (the
 * part's release hook), so other shards and foreign threads may still post
 * to a stopped shard and read its closed tail: they get -ECANCELED.
 */
#include "core/internal.h"
#include "uring/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLOSED (1ull << 63)
#define BATCH_MAX 1024u /* messages run per loop turn */
#define GATHER_WAVE 16u /* calls a gather keeps in flight (records on the stack) */

enum { KIND_POST = 0, KIND_CALL = 1, KIND_SPAWN = 2 };
/* a slot's aux word: the sender, the scheduling class the work runs in on
 * the target (corio/sched.h; 0: the default, and a post's fn on the loop),
 * the kind */
#define AUX(kind, sender, cls) \
	(((uint64_t)(sender) << 8) | ((uint64_t)(cls) << 2) | (uint64_t)(kind))
#define AUX_SENDER(aux) ((unsigned)((aux) >> 8))
#define AUX_CLASS(aux)  ((unsigned)((aux) >> 2) & 63u)
_Static_assert(CORIO_CLASS_MAX <= 64, "a class id fits in aux");

struct slot {
	_Atomic uint64_t seq;
	void (*fn)(void *);
	void *arg;
	uint64_t aux;
	void (*release)(void *); /* spawn_on: called instead of fn if it never runs */
};

/* Counters owned by one shard (read by others with relaxed loads). */
struct peer_stats {
	uint64_t sent, received, full, doorbells, calls, spawn_failed, doorbell_failed;
};

struct callwait {
	struct corio_fiber *fiber;
	unsigned pending;
};

/* A call in flight. It comes from the caller shard's pool and goes back
 * there when its reply has been taken (replies()), so a caller whose
 * deadline passed can leave while the target still holds the record.
 * Between the request and the reply the target writes only result,
 * status and next; wait and answered are the home shard's. */
enum { CALL_QUEUED, CALL_STARTED, CALL_DROPPED };
struct call {
	struct call *next; /* done stack; the pool's free list */
	intptr_t (*fn)(void *);
	void *arg;
	intptr_t result;
	int status;
	_Atomic int state;   /* CALL_*: the caller drops, or the target starts */
	bool answered;       /* home: the reply was taken */
	uint64_t deadline_ns; /* the caller's deadline scope, applied to fn */
	unsigned cls;         /* the scheduling class fn runs in on the target */
	struct corio__shard *home;
	struct callwait *wait; /* home: NULL once the caller left */
};

struct msg {
	/* written by producers */
	_Atomic uint64_t tail __attribute__((aligned(64)));

	/* consumer (owner) only */
	uint64_t head __attribute__((aligned(64)));
	uint64_t mask, cap, closed_at;
	bool closed;
	bool use_msg_ring;
	bool db_badfd;               /* test fault: MSG_RING doorbells fail in the kernel */
	unsigned batch;
	unsigned nshards, nwords;
	struct slot *slots;
	struct corio__shard *s;
	struct corio_waitq *room_wq; /* [nshards]: fibers here waiting for room on shard i */
	unsigned room_waiting;       /* how many */
	struct call *call_free;      /* pool of call records (this shard's calls) */
	uint64_t calls_out;          /* records taken from the pool, not yet back */
	void **call_chunks;
	size_t ncall_chunks;
	struct peer_stats *peers;    /* [nshards + 1], the last is foreign threads */
	struct corio__op *db_ops;    /* [nshards]: our MSG_RING doorbells to shard i */

	/* written by other threads */
	_Atomic(struct call *) done __attribute__((aligned(64))); /* replies for fibers here */
	_Atomic unsigned db_inflight;
	_Atomic unsigned room_seq; /* see room_sync() */
	_Atomic uint64_t foreign_sent, foreign_full;
	_Atomic uint64_t *room_waiters; /* [nwords]: shards waiting for room in this ring */
	_Atomic uint64_t *room_from;    /* [nwords]: rings that have room again for us */
};

static inline struct msg *part(struct corio__shard *s)
{
	return s->parts[CORIO__PART_MSG];
}

/* ---- producer side ------------------------------------------------------------ */

/*
 * The full-ring handshake: a waiter sets its bit then retries; the consumer
 * frees slots then reads the bits. Both sides do an acq_rel RMW on
 * room_seq in between. RMWs on one location are totally ordered and each
 * reads the previous one, so whichever comes second synchronizes with the
 * first and sees what came before it: the consumer sees the bit, or the
 * waiter sees the freed slots. (Not a seq_cst fence: TSan cannot model
 * those, and this costs one RMW per drained batch.)
 */
static inline void room_sync(struct msg *m)
{
	atomic_fetch_add_explicit(&m->room_seq, 1, memory_order_acq_rel);
}

/* Claim and publish one slot; *count (if not NULL) is bumped before the
 * publishing store, so whoever consumes the message also sees the count. */
static int push(struct msg *t, void (*fn)(void *), void *arg, void (*release)(void *),
		uint64_t aux, _Atomic uint64_t *count)
{
	uint64_t pos = atomic_load_explicit(&t->tail, memory_order_relaxed);

	for (;;) {
		struct slot *sl;
		int64_t dif;

		if (CORIO__UNLIKELY(pos & CLOSED))
			return -ECANCELED;
		sl = &t->slots[pos & t->mask];
		dif = (int64_t)(atomic_load_explicit(&sl->seq, memory_order_acquire) - pos);
		if (CORIO__LIKELY(dif == 0)) {
			if (atomic_compare_exchange_weak_explicit(&t->tail, &pos, pos + 1,
								  memory_order_seq_cst,
								  memory_order_relaxed)) {
				sl->fn = fn;
				sl->arg = arg;
				sl->aux = aux;
				sl->release = release;
				if (count)
					atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
				atomic_store_explicit(&sl->seq, pos + 1, memory_order_release);
				return 0;
			}
		} else if (dif < 0) {
			return -EAGAIN;
		} else {
			pos = atomic_load_explicit(&t->tail, memory_order_relaxed);
		}
	}
}

/* After publishing something t will look at: wake t if it sleeps. s is the
 * calling shard (NULL: a foreign thread). Returns 1 if a doorbell was sent. */
static int wake(struct corio__shard *s, struct corio__shard *t)
{
	struct msg *tm;
	int rang = 0;

	corio__shard_hint(t, CORIO__PART_MSG); /* our own shard's too: it polls on hints */
	if (s == t || !atomic_load(&t->sleeping))
		return 0;
	if (!s || !part(s)->use_msg_ring) {
		if (atomic_exchange(&t->sleeping, 0)) {
			corio__shard_wake(t);
			rang = 1;
		}
		return rang;
	}
	tm = part(t);
	atomic_fetch_add(&tm->db_inflight, 1);
	if (atomic_exchange(&t->sleeping, 0)) {
		if (corio__ring_msg_doorbell(&s->ring, part(s)->db_badfd ? -1 : t->ring.ring.ring_fd,
					     &part(s)->db_ops[t->id]) < 0)
			corio__shard_wake(t); /* could not submit now: the eventfd never fails us */
		rang = 1;
	}
	atomic_fetch_sub(&tm->db_inflight, 1);
	return rang;
}

/* What a message carries. */
struct msgin {
	void (*fn)(void *);
	void *arg;
	void (*release)(void *);
	unsigned kind;
	unsigned cls; /* scheduling class on the target */
};

/* Our doorbell to op->data failed inside the kernel after the submit (its
 * CQE, on our ring, is the only trace): the target was not woken and, since
 * we took its `sleeping`, nobody else will ring. Ring its eventfd, which
 * lives until corio_wait(). Success CQEs (no IORING_FEAT_CQE_SKIP) and
 * the shutdown's cancels of nothing are ignored. */
static void doorbell_failed(struct corio__op *op, int32_t res, uint32_t flags)
{
	struct corio__shard *s = corio__shard();
	unsigned to = (unsigned)(uintptr_t)op->data;

	(void)flags;
	if (res >= 0)
		return;
	corio__shard_wake(s->rt->shards[to]);
	CORIO__STAT_ADD(part(s)->peers[to].doorbell_failed, 1);
}

/* One attempt from shard s to shard index `to`. */
static int send_try(struct corio__shard *s, unsigned to, const struct msgin *mi, bool count_full)
{
	struct corio__shard *t = s->rt->shards[to];
	struct peer_stats *ps = &part(s)->peers[to];
	int ret = push(part(t), mi->fn, mi->arg, mi->release, AUX(mi->kind, s->id, mi->cls), NULL);

	if (CORIO__UNLIKELY(ret)) {
		if (ret == -EAGAIN && count_full)
			CORIO__STAT_ADD(ps->full, 1);
		return ret;
	}
	CORIO__STAT_ADD(ps->sent, 1);
	if (CORIO__UNLIKELY(wake(s, t)))
		CORIO__STAT_ADD(ps->doorbells, 1);
	return 0;
}

/* The calling fiber's deadline scope has passed (the blocking calls here
 * start nothing then, as every blocking call in a scope). */
static bool expired(void)
{
	return corio__deadline_passed(corio__self());
}

/* send_try, parking the calling fiber while the target's ring is full.
 * 0, -ECANCELED (target stopping, or the caller cancelled) or -ETIMEDOUT
 * (the caller's deadline scope): every error of the wait ends it, so a
 * passed deadline is never a retry loop that keeps the shard from running. */
static int send_wait(struct corio__shard *s, unsigned to, const struct msgin *mi)
{
	struct msg *m = part(s);
	struct msg *tm = part(s->rt->shards[to]);
	bool first = true;
	int ret;

	for (;;) {
		ret = send_try(s, to, mi, first);
		first = false;
		if (ret != -EAGAIN)
			return ret;
		if (corio_cancelled())
			return -ECANCELED;
		atomic_fetch_or(&tm->room_waiters[s->id / 64], 1ull << (s->id % 64));
		room_sync(tm);
		ret = send_try(s, to, mi, false);
		if (ret != -EAGAIN)
			return ret;
		m->room_waiting++;
		ret = corio__wq_wait(&m->room_wq[to]);
		m->room_waiting--;
		if (ret < 0)
			return ret;
	}
}

/* Common argument checks; returns the calling shard or NULL with *err set. */
static struct corio__shard *sender(const char *who, unsigned to, const void *fn, int *err)
{
	struct corio__shard *s = corio__shard();

	if (CORIO__UNLIKELY(!s)) {
		*err = corio__misuse(-EPERM, who, "called from a thread that is not a shard "
					       "(use corio_post_foreign)");
		return NULL;
	}
	if (CORIO__UNLIKELY(!fn)) {
		*err = corio__error(-EINVAL, "%s: fn is NULL", who);
		return NULL;
	}
	if (CORIO__UNLIKELY(to >= s->rt->nshards)) {
		*err = corio__error(-EINVAL, "%s: no shard %u (the runtime has %u)", who, to,
				    s->rt->nshards);
		return NULL;
	}
	return s;
}

/* The blocking calls' prologue, written once: sender()'s checks, then
 * corio__may_block() (off a fiber, cancelled, past the deadline). */
static struct corio__shard *blocking_sender(const char *who, unsigned to, const void *fn,
					    int *err)
{
	struct corio__shard *s = sender(who, to, fn, err);

	if (s && (*err = corio__may_block(who)))
		return NULL;
	return s;
}

/* A class named by a sender: one the runtime has (any shard may create it;
 * the target sets it up when the work arrives, corio__class_use). */
static int class_ok(struct corio__shard *s, const char *who, unsigned cls)
{
	if (CORIO__LIKELY(!cls))
		return 0;
	if (cls < CORIO_CLASS_MAX && cls < atomic_load_explicit(&s->rt->ncls, memory_order_acquire))
		return 0;
	return corio__error(-EINVAL, "%s: no scheduling class %u (corio_class_create)", who, cls);
}

int corio_post(unsigned shard, void (*fn)(void *), void *arg)
{
	int err;
	struct corio__shard *s = sender("corio_post", shard, (const void *)fn, &err);

	if (CORIO__UNLIKELY(!s))
		return err;
	return send_try(s, shard, &(struct msgin){ .fn = fn, .arg = arg, .kind = KIND_POST }, true);
}

int corio_post_class(unsigned shard, unsigned cls, void (*fn)(void *), void *arg)
{
	int err;
	struct corio__shard *s = sender("corio_post_class", shard, (const void *)fn, &err);

	if (CORIO__UNLIKELY(!s))
		return err;
	if ((err = class_ok(s, "corio_post_class", cls)))
		return err;
	return send_try(s, shard,
			&(struct msgin){ .fn = fn, .arg = arg, .kind = KIND_POST, .cls = cls }, true);
}

int corio_post_wait(unsigned shard, void (*fn)(void *), void *arg)
{
	int err;
	struct corio__shard *s = blocking_sender("corio_post_wait", shard, (const void *)fn, &err);

	if (CORIO__UNLIKELY(!s))
		return err;
	return send_wait(s, shard, &(struct msgin){ .fn = fn, .arg = arg, .kind = KIND_POST });
}

/* spawn_on holds the runtime open (rt->busy_shards) until the target spawned. */
static void token_put(struct corio_rt *rt)
{
	if (atomic_fetch_sub(&rt->busy_shards, 1) == 1)
		corio_stop(rt);
}

static int spawn_on(const char *who, unsigned shard, unsigned cls, int (*fn)(void *), void *arg,
		    void (*release)(void *), unsigned flags)
{
	int err;
	bool bad = flags & ~CORIO_SPAWN_ON_WAIT; /* said after sender's checks, before blocking */
	struct corio__shard *s = !bad && (flags & CORIO_SPAWN_ON_WAIT)
					 ? blocking_sender(who, shard, (const void *)fn, &err)
					 : sender(who, shard, (const void *)fn, &err);
	/* The function pointer travels as void (*)(void *) and is converted
	 * back before the call (C11 6.3.2.3p8); the detour through
	 * void (*)(void) tells gcc the cast is deliberate. */
	struct msgin mi = { .fn = (void (*)(void *))(void (*)(void))fn, .arg = arg,
			    .release = release, .kind = KIND_SPAWN, .cls = cls };

	if (CORIO__UNLIKELY(!s))
		return err;
	if (bad)
		return corio__error(-EINVAL, "%s: unknown flags 0x%x", who, flags);
	if ((err = class_ok(s, who, cls)))
		return err;
	atomic_fetch_add(&s->rt->busy_shards, 1);
	err = (flags & CORIO_SPAWN_ON_WAIT) ? send_wait(s, shard, &mi) : send_try(s, shard, &mi, true);
	if (err)
		token_put(s->rt);
	return err;
}

int corio_spawn_on_ex(unsigned shard, int (*fn)(void *), void *arg, void (*release)(void *),
		      unsigned flags)
{
	return spawn_on("corio_spawn_on_ex", shard, 0, fn, arg, release, flags);
}

int corio_spawn_on_class(unsigned shard, unsigned cls, int (*fn)(void *), void *arg,
			 void (*release)(void *), unsigned flags)
{
	return spawn_on("corio_spawn_on_class", shard, cls, fn, arg, release, flags);
}

int corio_spawn_on(unsigned shard, int (*fn)(void *), void *arg)
{
	return spawn_on("corio_spawn_on", shard, 0, fn, arg, NULL, 0);
}

int corio_spawn_on_wait(unsigned shard, int (*fn)(void *), void *arg)
{
	return spawn_on("corio_spawn_on_wait", shard, 0, fn, arg, NULL, CORIO_SPAWN_ON_WAIT);
}

int corio_broadcast(void (*fn)(void *), void *arg)
{
	int err, n = 0;
	struct corio__shard *s = blocking_sender("corio_broadcast", 0, (const void *)fn, &err);

	if (CORIO__UNLIKELY(!s))
		return err;
	for (unsigned i = 0; i < s->rt->nshards; i++) {
		if (corio_cancelled() || expired())
			break;
		if (send_wait(s, i, &(struct msgin){ .fn = fn, .arg = arg, .kind = KIND_POST }) == 0)
			n++;
	}
	return n;
}

int corio_post_foreign(struct corio_rt *rt, unsigned shard, void (*fn)(void *), void *arg)
{
	struct corio__shard *t;
	struct msg *tm;
	int ret;

	if (!rt || !fn || shard >= rt->nshards)
		return corio__error(-EINVAL, "corio_post_foreign: %s",
				    !rt ? "rt is NULL" : !fn ? "fn is NULL" : "no such shard");
	t = rt->shards[shard];
	tm = part(t);
	/* Once our message is published the target may consume it, stop and
	 * free its ring: after the push only the shard struct (sleeping, efd),
	 * which lives until corio_wait(), is touched. */
	ret = push(tm, fn, arg, NULL, AUX(KIND_POST, rt->nshards, 0), &tm->foreign_sent);
	if (ret) {
		if (ret == -EAGAIN)
			atomic_fetch_add_explicit(&tm->foreign_full, 1, memory_order_relaxed);
		return ret;
	}
	wake(NULL, t);
	return 0;
}

/* ---- calls ---------------------------------------------------------------------- */

#define CALL_CHUNK 64

static struct call *call_get(struct msg *m)
{
	struct call *c = m->call_free;

	if (CORIO__UNLIKELY(!c)) {
		struct call *chunk;
		void **n;

		if (m->ncall_chunks % 16 == 0) {
			n = realloc(m->call_chunks, (m->ncall_chunks + 16) * sizeof(*n));
			if (!n)
				return NULL;
			m->call_chunks = n;
		}
		chunk = calloc(CALL_CHUNK, sizeof(*chunk));
		if (!chunk)
			return NULL;
		m->call_chunks[m->ncall_chunks++] = chunk;
		for (int i = CALL_CHUNK - 1; i >= 0; i--) {
			chunk[i].next = m->call_free;
			m->call_free = &chunk[i];
		}
		c = m->call_free;
	}
	m->call_free = c->next;
	m->calls_out++;
	return c;
}

static void call_put(struct msg *m, struct call *c)
{
	c->next = m->call_free;
	m->call_free = c;
	m->calls_out--;
}

/* Target side: hand c back to its caller's shard. c may be gone on return. */
static void reply(struct corio__shard *s, struct call *c)
{
	struct corio__shard *home = c->home;
	struct msg *hm = part(home);
	struct call *old = atomic_load_explicit(&hm->done, memory_order_relaxed);

	do
		c->next = old;
	while (!atomic_compare_exchange_weak_explicit(&hm->done, &old, c, memory_order_seq_cst,
						      memory_order_relaxed));
	if (wake(s, home))
		CORIO__STAT_ADD(part(s)->peers[home->id].doorbells, 1);
}

static int call_main(void *arg)
{
	struct call *c = arg;
	int queued = CALL_QUEUED;

	/* The caller may have given up (its deadline) before we started:
	 * then fn must not run. Once we are STARTED it runs to the end and
	 * the caller, if it leaves, drops the result. */
	if (atomic_compare_exchange_strong(&c->state, &queued, CALL_STARTED)) {
		struct corio_deadline d;
		bool scoped = c->deadline_ns && corio_deadline_push(&d, c->deadline_ns) == 0;

		c->result = c->fn(c->arg);
		c->status = 0;
		if (scoped)
			corio_deadline_pop(&d);
	} else {
		c->status = -ETIMEDOUT;
	}
	reply(corio__shard(), c);
	return 0;
}

/* The call's fiber ended before it ran (stop cancelled it, or no stack). */
static void call_unrun(struct corio_fiber *f)
{
	struct call *c = f->arg;

	c->status = f->status;
	reply(f->shard, c);
}

static void call_start(struct msg *m, struct call *c)
{
	struct corio_spawn_opts o = { .name = "corio_call", .sched_class = c->cls };
	int ret = corio__spawn_unrun(call_main, c, &o, NULL, call_unrun, 0, 0);

	if (ret) {
		c->status = ret;
		reply(m->s, c);
	}
}

/* Wait until every call of cw has been answered: 0, or -ETIMEDOUT at the
 * caller's deadline scope (some are still out then: call_drop them).
 * Cancellation does not end the wait: the target may still use the
 * caller's memory. When the scope's timer cannot be armed - the shard has
 * begun to stop (its timers refuse with -ECANCELED; a gather's caller can
 * still queue calls then), or no memory for the heap - the bounded park
 * returns at once without parking, so asking again would spin and keep
 * the loop, and with it the replies, from running: wait unbounded instead.
 * Every queued call is answered (a stopping target answers -ECANCELED). */
static int calls_wait(struct callwait *cw)
{
	struct corio_fiber *f = cw->fiber;
	bool bounded = true;
	int ret = 0;

	corio__nocancel_push(f);
	while (cw->pending) {
		ret = bounded ? corio__park_bounded() : corio__park();
		if (ret == -ETIMEDOUT && cw->pending)
			break;
		if (ret < 0 && ret != -ETIMEDOUT)
			bounded = false; /* the timer was not armed: we did not park */
		ret = 0;
	}
	corio__nocancel_pop(f);
	return ret;
}

/* The caller leaves: a call not started yet never runs; one that runs
 * finishes over there and its record comes back to the pool when its reply
 * is taken. A record already answered goes back now. */
static void call_drop(struct msg *m, struct call *c)
{
	int queued = CALL_QUEUED;

	if (c->answered) {
		call_put(m, c);
		return;
	}
	atomic_compare_exchange_strong(&c->state, &queued, CALL_DROPPED);
	c->wait = NULL;
}

/* Queue one call; on success cw->pending counts it. */
static int call_send(struct corio__shard *s, unsigned to, struct call *c, struct callwait *cw)
{
	int ret;

	c->home = s;
	c->wait = cw;
	c->status = -ECANCELED;
	c->answered = false;
	c->deadline_ns = cw->fiber->deadline_ns;
	atomic_store_explicit(&c->state, CALL_QUEUED, memory_order_relaxed);
	c->next = NULL;
	ret = send_wait(s, to, &(struct msgin){ .arg = c, .kind = KIND_CALL });
	if (ret == 0) {
		cw->pending++;
		CORIO__STAT_ADD(part(s)->peers[to].calls, 1);
	}
	return ret;
}

static int call_in(const char *who, unsigned shard, unsigned cls, intptr_t (*fn)(void *),
		   void *arg, intptr_t *result)
{
	int err;
	struct corio__shard *s = blocking_sender(who, shard, (const void *)fn, &err);
	struct callwait cw;
	struct call *c;
	struct msg *m;

	if (CORIO__UNLIKELY(!s))
		return err;
	if ((err = class_ok(s, who, cls)))
		return err;
	m = part(s);
	c = call_get(m);
	if (!c)
		return -ENOMEM;
	cw.fiber = s->current;
	cw.pending = 0;
	c->cls = cls;
	c->fn = fn;
	c->arg = arg;
	c->result = 0;
	err = call_send(s, shard, c, &cw);
	if (err) {
		call_put(m, c);
		return err;
	}
	err = calls_wait(&cw);
	if (err) {
		call_drop(m, c);
		return err;
	}
	err = c->status;
	if (err == 0 && result)
		*result = c->result;
	call_put(m, c);
	return err;
}

int corio_call(unsigned shard, intptr_t (*fn)(void *), void *arg, intptr_t *result)
{
	return call_in("corio_call", shard, 0, fn, arg, result);
}

int corio_call_class(unsigned shard, unsigned cls, intptr_t (*fn)(void *), void *arg,
		     intptr_t *result)
{
	return call_in("corio_call_class", shard, cls, fn, arg, result);
}

/* corio_gather's waves over n targets: shards[i], or i when shards is
 * NULL; results[i] is target i's. */
static int gather(struct corio__shard *s, const unsigned *shards, unsigned n,
		  intptr_t (*fn)(void *), void *arg, intptr_t *results)
{
	int first = 0;
	struct call *c[GATHER_WAVE];
	struct callwait cw;
	struct msg *m = part(s);

	cw.fiber = s->current;
	for (unsigned base = 0; base < n; base += GATHER_WAVE) {
		unsigned k = n - base < GATHER_WAVE ? n - base : GATHER_WAVE;
		int st[GATHER_WAVE], wait_err;
		bool late = false;

		/* pending starts at 1 so that replies arriving while a later
		 * send waits for room cannot make us ready in the middle of
		 * that wait */
		cw.pending = 1;
		for (unsigned i = 0; i < k; i++) {
			c[i] = NULL;
			st[i] = late ? -ETIMEDOUT : 0;
			if (late || !(c[i] = call_get(m))) {
				st[i] = late ? -ETIMEDOUT : -ENOMEM;
				continue;
			}
			c[i]->cls = 0;
			c[i]->fn = fn;
			c[i]->arg = arg;
			c[i]->result = 0;
			st[i] = call_send(s, shards ? shards[base + i] : base + i, c[i], &cw);
			if (st[i]) {
				call_put(m, c[i]);
				c[i] = NULL;
				late = st[i] == -ETIMEDOUT; /* send no more */
			}
		}
		cw.pending--;
		wait_err = calls_wait(&cw);
		for (unsigned i = 0; i < k; i++) {
			intptr_t r = 0;

			if (c[i]) {
				st[i] = c[i]->answered ? c[i]->status : wait_err;
				if (st[i] == 0)
					r = c[i]->result;
				if (c[i]->answered)
					call_put(m, c[i]);
				else
					call_drop(m, c[i]);
			}
			if (results)
				results[base + i] = r;
			if (st[i] && !first)
				first = st[i];
		}
		if (wait_err || late) {
			/* the deadline passed: the later waves are not sent */
			for (unsigned j = base + k; results && j < n; j++)
				results[j] = 0;
			return first;
		}
	}
	return first;
}

int corio_gather(intptr_t (*fn)(void *), void *arg, intptr_t *results)
{
	int err;
	struct corio__shard *s = blocking_sender("corio_gather", 0, (const void *)fn, &err);

	if (CORIO__UNLIKELY(!s))
		return err;
	return gather(s, NULL, s->rt->nshards, fn, arg, results);
}

int corio_gather_some(const unsigned *shards, unsigned n, intptr_t (*fn)(void *), void *arg,
		      intptr_t *results)
{
	int err;
	struct corio__shard *s = blocking_sender("corio_gather_some", 0, (const void *)fn, &err);

	if (CORIO__UNLIKELY(!s))
		return err;
	if (!shards && n)
		return corio__error(-EINVAL, "corio_gather_some: shards is NULL");
	for (unsigned i = 0; i < n; i++) {
		if (shards[i] >= s->rt->nshards)
			return corio__error(-EINVAL, "corio_gather_some: shards[%u] is %u, the "
					    "runtime has %u", i, shards[i], s->rt->nshards);
		for (unsigned j = 0; j < i; j++)
			if (shards[j] == shards[i])
				return corio__error(-EINVAL, "corio_gather_some: shard %u is "
						    "named twice", shards[i]);
	}
	return gather(s, shards, n, fn, arg, results);
}

/* ---- consumer side (the owning shard's loop) --------------------------------- */

/* A spawn_on whose fn will never run: count it, release its argument. */
static void spawn_failed(struct msg *m, unsigned from, void (*release)(void *), void *arg)
{
	CORIO__STAT_ADD(m->peers[from].spawn_failed, 1);
	if (release)
		release(arg);
}

/* A spawn_on fiber ended before it ran (cancelled by the stop, no stack). */
static void spawn_unrun(struct corio_fiber *f)
{
	spawn_failed(part(f->shard), (unsigned)f->unrun_ctx[1],
		     (void (*)(void *))f->unrun_ctx[0], f->arg);
}

/* corio_post_class: fn runs in a fiber of its class. Exactly once: if the
 * fiber cannot be had, or ends before it ran (the shard stops), fn runs on
 * the loop instead, as an unclassed post would. */
static int post_main(void *arg)
{
	void (*fn)(void *) = (void (*)(void *))corio__self()->unrun_ctx[0];

	fn(arg);
	return 0;
}

static void post_unrun(struct corio_fiber *f)
{
	((void (*)(void *))f->unrun_ctx[0])(f->arg);
}

static void post_in_class(void (*fn)(void *), void *arg, unsigned cls)
{
	struct corio_spawn_opts o = { .name = "corio_post", .sched_class = cls };

	if (corio__spawn_unrun(post_main, arg, &o, NULL, post_unrun, (uintptr_t)fn, 0))
		fn(arg);
}

static void run_one(struct msg *m, void (*fn)(void *), void *arg, void (*release)(void *),
		    uint64_t aux)
{
	switch (aux & 3) {
	case KIND_POST:
		if (CORIO__LIKELY(!AUX_CLASS(aux)))
			fn(arg);
		else
			post_in_class(fn, arg, AUX_CLASS(aux));
		break;
	case KIND_CALL:
		call_start(m, arg);
		break;
	case KIND_SPAWN: {
		int (*sfn)(void *) = (int (*)(void *))(void (*)(void))fn;
		struct corio_spawn_opts o = { .sched_class = AUX_CLASS(aux) };

		if (corio__spawn_unrun(sfn, arg, &o, NULL, spawn_unrun, (uintptr_t)release,
				       (uintptr_t)AUX_SENDER(aux)))
			spawn_failed(m, AUX_SENDER(aux), release, arg); /* stopping, or no memory */
		token_put(m->s->rt);
		break;
	}
	default:
		assert(!"corio: bad message kind");
	}
}

/* Tell every shard that waits for room in m's ring to try again. */
static void room_notify(struct msg *m)
{
	struct corio__shard *s = m->s;

	for (unsigned w = 0; w < m->nwords; w++) {
		uint64_t bits;

		if (!atomic_load_explicit(&m->room_waiters[w], memory_order_relaxed))
			continue;
		bits = atomic_exchange(&m->room_waiters[w], 0);
		while (bits) {
			unsigned b = (unsigned)__builtin_ctzll(bits) + w * 64;
			struct corio__shard *t = s->rt->shards[b];

			bits &= bits - 1;
			atomic_fetch_or(&part(t)->room_from[s->id / 64], 1ull << (s->id % 64));
			wake(s, t);
		}
	}
}

static unsigned drain(struct msg *m)
{
	uint64_t head = m->head;
	unsigned n = 0;

	while (n < m->batch) {
		struct slot *sl = &m->slots[head & m->mask];
		void (*fn)(void *), (*release)(void *);
		void *arg;
		uint64_t aux;

		if (atomic_load_explicit(&sl->seq, memory_order_acquire) != head + 1)
			break;
		fn = sl->fn;
		arg = sl->arg;
		aux = sl->aux;
		release = sl->release;
		atomic_store_explicit(&sl->seq, head + m->cap, memory_order_release);
		m->head = ++head;
		n++;
		CORIO__STAT_ADD(m->peers[AUX_SENDER(aux)].received, 1);
		run_one(m, fn, arg, release, aux);
	}
	if (n) {
		/* Pairs with room_sync in send_wait: either we see its bit or it
		 * sees the slots we freed. */
		room_sync(m);
		room_notify(m);
	}
	return n;
}

static unsigned replies(struct msg *m)
{
	struct call *c;
	unsigned n = 0;

	if (!atomic_load(&m->done)) /* seq_cst: part of the sleeping handshake */
		return 0;
	c = atomic_exchange_explicit(&m->done, NULL, memory_order_acquire);
	while (c) {
		struct call *next = c->next;
		struct callwait *cw = c->wait;

		if (!cw) {
			call_put(m, c); /* its caller left (deadline): drop the result */
		} else {
			c->answered = true;
			if (--cw->pending == 0)
				corio__ready(cw->fiber, 0);
		}
		c = next;
		n++;
	}
	return n;
}

static unsigned room_wakeups(struct msg *m)
{
	unsigned n = 0;

	for (unsigned w = 0; w < m->nwords; w++) {
		uint64_t bits;

		if (!atomic_load(&m->room_from[w])) /* seq_cst: sleeping handshake */
			continue;
		bits = atomic_exchange(&m->room_from[w], 0);
		while (bits) {
			unsigned b = (unsigned)__builtin_ctzll(bits) + w * 64;

			bits &= bits - 1;
			corio__wq_wake_all(&m->room_wq[b], 0);
			n++;
		}
	}
	return n;
}

/* Whether anything waits, running nothing: seq_cst loads, the closing
 * look of a poll (the handshake at the top of the file). A claimed
 * position that is not yet published counts: its producer is about to
 * publish it. */
static unsigned msg_pending(struct msg *m)
{
	if (atomic_load(&m->done))
		return 1;
	if (m->room_waiting)
		for (unsigned w = 0; w < m->nwords; w++)
			if (atomic_load(&m->room_from[w]))
				return 1;
	return (atomic_load(&m->tail) & ~CLOSED) != m->head;
}

/* In a turn after a hint (or our own re-hint: work was left). */
static unsigned msg_poll(struct corio__shard *s)
{
	struct msg *m = part(s);
	unsigned work;

	work = replies(m);
	if (m->room_waiting)
		work += room_wakeups(m);
	work += drain(m);
	if (msg_pending(m))
		corio__shard_hint(s, CORIO__PART_MSG);
	return work;
}

static void msg_stop(struct corio__shard *s)
{
	struct msg *m = part(s);

	m->closed_at = atomic_fetch_or(&m->tail, CLOSED) & ~CLOSED;
	m->closed = true;
	/* Fibers elsewhere waiting for room here retry and get -ECANCELED. */
	room_sync(m);
	room_notify(m);
	/* Call and spawn_on fibers cancelled before they ran are answered /
	 * released by their unrun hooks when the loop ends them. */
}

/* A stopping shard goes on while call records of its own are out: a
 * caller that left at its deadline (call_drop) no longer holds the shard
 * open, but its record comes back only with the reply, which the target
 * sends while it stops (every queued call is answered), and only this
 * loop takes replies. Ending first would leak the record (the census). */
static bool msg_busy(struct corio__shard *s)
{
	struct msg *m = part(s);

	return !m->closed || m->head != m->closed_at || atomic_load(&m->db_inflight) ||
	       m->calls_out;
}

/* ---- set-up and teardown ----------------------------------------------------------- */

static void msg_free(struct msg *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->ncall_chunks; i++)
		free(m->call_chunks[i]);
	free(m->call_chunks);
	free(m->slots);
	free(m->room_waiters);
	free(m->room_wq);
	free(m->peers);
	free(m->db_ops);
	free(m);
}

static int msg_init(struct corio__shard *s)
{
	static const char *const doorbells[] = { "eventfd", "badfd", NULL };
	struct corio_rt *rt = s->rt;
	unsigned db = UINT32_MAX; /* unset: MSG_RING where the ring can */
	struct msg *m;
	size_t cap = rt->cfg.msg_slots;

	if (corio__env_choice("CORIO_MSG_DOORBELL", doorbells, &db, s->err, sizeof(s->err)) < 0)
		return -EINVAL;
	m = aligned_alloc(64, (sizeof(*m) + 63) & ~(size_t)63);
	if (!m)
		return -ENOMEM;
	memset(m, 0, sizeof(*m));
	m->s = s;
	m->cap = cap;
	m->mask = cap - 1;
	m->batch = cap < BATCH_MAX ? (unsigned)cap : BATCH_MAX;
	m->nshards = rt->nshards;
	m->nwords = (rt->nshards + 63) / 64;
	/* aligned_alloc wants a size that is a multiple of the alignment */
	m->slots = aligned_alloc(64, (cap * sizeof(struct slot) + 63) & ~(size_t)63);
	m->room_waiters = calloc(2 * (size_t)m->nwords, sizeof(*m->room_waiters));
	m->room_wq = calloc(rt->nshards, sizeof(*m->room_wq));
	m->peers = calloc(rt->nshards + 1, sizeof(*m->peers));
	m->db_ops = calloc(rt->nshards, sizeof(*m->db_ops));
	if (!m->slots || !m->room_waiters || !m->room_wq || !m->peers || !m->db_ops) {
		msg_free(m);
		return -ENOMEM;
	}
	m->room_from = m->room_waiters + m->nwords;
	for (size_t i = 0; i < cap; i++)
		atomic_init(&m->slots[i].seq, i);
	for (unsigned i = 0; i < rt->nshards; i++) {
		m->db_ops[i].cb = doorbell_failed;
		m->db_ops[i].data = (void *)(uintptr_t)i; /* the target's index */
	}
	atomic_init(&m->tail, 0);
	atomic_init(&m->done, NULL);
	/* MSG_RING doorbells unless the ring cannot send them or the
	 * environment asks for the eventfd (tests, the benchmark). */
	m->use_msg_ring = corio__ring_can_msg(&s->ring) && db != 0;
	/* CORIO_MSG_DOORBELL=badfd (tests): send each MSG_RING to fd -1, so
	 * the kernel takes the SQE and fails it afterwards, as it may with
	 * -EOVERFLOW or -ENOMEM */
	m->db_badfd = m->use_msg_ring && db == 1;
	__atomic_store_n(&s->parts[CORIO__PART_MSG], m, __ATOMIC_RELEASE); /* stats readers */
	return 0;
}

/* After every shard thread has ended (corio_wait): nobody can post any more. */
static void msg_release(struct corio__shard *s)
{
	msg_free(part(s));
	s->parts[CORIO__PART_MSG] = NULL;
}

/* Leak census: every call record back in its home pool. */
static unsigned msg_census(struct corio__shard *s, char *buf, size_t len)
{
	struct msg *m = part(s);

	if (m->calls_out)
		snprintf(buf, len, "%llu call records not back in the pool",
			 (unsigned long long)m->calls_out);
	return m->calls_out ? (unsigned)m->calls_out : 0;
}

const struct corio__part corio__msg_part = {
	.name = "msg",
	.census = msg_census,
	.init = msg_init,
	.poll = msg_poll,
	.fed = true,
	.stop = msg_stop,
	.busy = msg_busy,
	.release = msg_release,
};

/* ---- stats ------------------------------------------------------------------------- */

static void add_peer(struct corio_msg_stats *o, const struct peer_stats *p)
{
	o->sent += __atomic_load_n(&p->sent, __ATOMIC_RELAXED);
	o->received += __atomic_load_n(&p->received, __ATOMIC_RELAXED);
	o->full += __atomic_load_n(&p->full, __ATOMIC_RELAXED);
	o->doorbells += __atomic_load_n(&p->doorbells, __ATOMIC_RELAXED);
	o->calls += __atomic_load_n(&p->calls, __ATOMIC_RELAXED);
	o->spawn_failed += __atomic_load_n(&p->spawn_failed, __ATOMIC_RELAXED);
	o->doorbell_failed += __atomic_load_n(&p->doorbell_failed, __ATOMIC_RELAXED);
}

static void add_foreign(struct corio_msg_stats *o, struct msg *m)
{
	add_peer(o, &m->peers[m->nshards]);
	o->sent += atomic_load_explicit(&m->foreign_sent, memory_order_relaxed);
	o->full += atomic_load_explicit(&m->foreign_full, memory_order_relaxed);
}

int corio_msg_stats_get(struct corio_rt *rt, unsigned shard, unsigned peer,
			struct corio_msg_stats *out)
{
	struct msg *m;

	rt = corio__rt_or_own(rt);
	if (!rt)
		return corio__error(-EPERM, "corio_msg_stats_get: rt is NULL off a shard");
	if (!out || shard >= rt->nshards || !rt->shards[shard])
		return corio__error(-EINVAL, "corio_msg_stats_get: %s",
				    out ? "no such shard" : "out is NULL");
	if (peer != CORIO_MSG_PEER_ALL && peer != CORIO_MSG_PEER_FOREIGN && peer >= rt->nshards)
		return corio__error(-EINVAL, "corio_msg_stats_get: no peer %u", peer);
	memset(out, 0, sizeof(*out));
	if (!(m = __atomic_load_n(&rt->shards[shard]->parts[CORIO__PART_MSG], __ATOMIC_ACQUIRE)))
		return 0; /* the part has not started: zeros, as every getter */
	if (peer == CORIO_MSG_PEER_ALL) {
		for (unsigned i = 0; i < rt->nshards; i++)
			add_peer(out, &m->peers[i]);
		add_foreign(out, m);
	} else if (peer == CORIO_MSG_PEER_FOREIGN) {
		add_foreign(out, m);
	} else {
		add_peer(out, &m->peers[peer]);
	}
	return 0;
}
