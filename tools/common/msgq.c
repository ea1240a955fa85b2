/* SPDX-License-Identifier: MIT */
/* tools/common/msgq.c - baseline queues for bench-msg (see msgq.h). */
#include "msgq.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

int mq_init(struct mq *q, enum mq_kind kind, size_t cap)
{
	q->kind = kind;
	q->cap = cap;
	q->head = q->len = 0;
	q->consumer_waiting = q->producer_waiting = 0;
	q->efd = -1;
	q->ring = calloc(cap, sizeof(*q->ring));
	if (!q->ring)
		return -ENOMEM;
	if (kind == MQ_EVENTFD) {
		q->efd = eventfd(0, EFD_CLOEXEC);
		if (q->efd < 0) {
			free(q->ring);
			return -errno;
		}
	}
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->nonempty, NULL);
	pthread_cond_init(&q->nonfull, NULL);
	return 0;
}

void mq_destroy(struct mq *q)
{
	if (q->efd >= 0)
		close(q->efd);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->nonempty);
	pthread_cond_destroy(&q->nonfull);
	free(q->ring);
}

const char *mq_name(enum mq_kind kind)
{
	return kind == MQ_EVENTFD ? "eventfd-per-message" : "mutex+condvar";
}

void mq_post(struct mq *q, void (*fn)(void *), void *arg)
{
	int signal;

	pthread_mutex_lock(&q->lock);
	while (q->len == q->cap) {
		q->producer_waiting++;
		pthread_cond_wait(&q->nonfull, &q->lock);
		q->producer_waiting--;
	}
	q->ring[(q->head + q->len) % q->cap] = (struct mq_msg){ fn, arg };
	q->len++;
	signal = q->consumer_waiting;
	pthread_mutex_unlock(&q->lock);
	if (q->kind == MQ_EVENTFD) {
		uint64_t one = 1;

		if (write(q->efd, &one, sizeof(one)) != sizeof(one))
			abort(); /* a benchmark baseline: cannot happen with a blocking eventfd */
	} else if (signal) {
		pthread_cond_signal(&q->nonempty);
	}
}

size_t mq_run(struct mq *q)
{
	struct mq_msg batch[256];
	size_t n, ran = 0;
	uint64_t cnt;

	if (q->kind == MQ_EVENTFD) {
		/* one read per wake-up; then everything queued is ours (messages
		 * queued after the read leave a count behind: a later read
		 * returns at once and may find nothing) */
		if (read(q->efd, &cnt, sizeof(cnt)) != sizeof(cnt))
			abort();
	}
	pthread_mutex_lock(&q->lock);
	if (q->kind == MQ_MUTEX_CONDVAR) {
		while (!q->len) {
			q->consumer_waiting++;
			pthread_cond_wait(&q->nonempty, &q->lock);
			q->consumer_waiting--;
		}
	}
	for (;;) {
		n = q->len < 256 ? q->len : 256;
		for (size_t i = 0; i < n; i++)
			batch[i] = q->ring[(q->head + i) % q->cap];
		q->head = (q->head + n) % q->cap;
		q->len -= n;
		if (q->producer_waiting)
			pthread_cond_broadcast(&q->nonfull);
		pthread_mutex_unlock(&q->lock);
		for (size_t i = 0; i < n; i++)
			batch[i].fn(batch[i].arg);
		ran += n;
		if (n < 256)
			return ran;
		pthread_mutex_lock(&q->lock);
	}
}
