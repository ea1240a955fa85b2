/* SPDX-License-Identifier: MIT */
/*
 * tools/common/msgq.h - baseline thread-to-thread message queues for
 * bench-msg: what you would write without corio.
 *
 *  - mutex+condvar: a bounded ring under a mutex; the consumer sleeps on a
 *    condition variable and is signalled only when it waits; the producer
 *    waits on another condvar when the ring is full. The consumer takes
 *    everything that is queued in one lock hold.
 *  - eventfd per message: the same ring, plus one eventfd write per
 *    message; the consumer blocks in read() on the eventfd and then takes
 *    as many messages as the counter said.
 */
#ifndef CORIO_TOOLS_MSGQ_H
#define CORIO_TOOLS_MSGQ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct mq_msg {
	void (*fn)(void *);
	void *arg;
};

enum mq_kind { MQ_MUTEX_CONDVAR, MQ_EVENTFD };

struct mq {
	enum mq_kind kind;
	pthread_mutex_t lock;
	pthread_cond_t nonempty, nonfull;
	struct mq_msg *ring;
	size_t cap, head, len;
	int consumer_waiting, producer_waiting;
	int efd;
};

int mq_init(struct mq *q, enum mq_kind kind, size_t cap); /* 0 or -errno */
void mq_destroy(struct mq *q);
/* Queue one message, waiting while the ring is full. */
void mq_post(struct mq *q, void (*fn)(void *), void *arg);
/* Block until woken (mutex+condvar: until a message is queued), then run
 * everything queued, outside the lock, 256 per lock hold. Returns how many
 * ran (eventfd: may be 0). */
size_t mq_run(struct mq *q);
const char *mq_name(enum mq_kind kind);

#endif
