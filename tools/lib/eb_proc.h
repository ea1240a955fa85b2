/* SPDX-License-Identifier: MIT */
/*
 * tools/lib/eb_proc.h - process plumbing shared by the thread-based tools
 * (epoll-echo, uring-echo): pinned worker threads and the wait for
 * SIGINT/SIGTERM or a timeout.
 */
#ifndef CORIO_TOOLS_EB_PROC_H
#define CORIO_TOOLS_EB_PROC_H

#include <pthread.h>
#include <signal.h>

/* Block SIGINT and SIGTERM in the calling thread (and the threads it starts
 * afterwards), so eb_wait_stop() can take them with sigtimedwait(). */
void eb_block_stop_signals(void);
/* Start fn(arg) on a thread pinned to cpu (-1: not pinned): 0 or an errno. */
int eb_thread_pinned(pthread_t *th, int cpu, void *(*fn)(void *), void *arg);
/* Return on SIGINT or SIGTERM, or after timeout_s seconds when > 0. An
 * EINTR (a tracer attaching) is not a stop. */
void eb_wait_stop(double timeout_s);

#endif
