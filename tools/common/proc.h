/* SPDX-License-Identifier: MIT */
/*
 * tools/common/proc.h - process plumbing shared by the benchmark tools:
 * pinned worker threads, the wait for SIGINT/SIGTERM or a timeout, and the
 * loopback sockets the servers listen on.
 */
#ifndef CORIO_TOOLS_EB_PROC_H
#define CORIO_TOOLS_EB_PROC_H

#include <pthread.h>
#include <signal.h>

/* Block SIGINT and SIGTERM in the calling thread (and the threads it starts
 * afterwards), so tool_wait_stop() can take them with sigtimedwait(). */
void tool_block_stop_signals(void);
/* Start fn(arg) on a thread pinned to cpu (-1: not pinned): 0 or an errno. */
int tool_thread_pinned(pthread_t *th, int cpu, void *(*fn)(void *), void *arg);
/* Return on SIGINT or SIGTERM, or after timeout_s seconds when > 0. An
 * EINTR (a tracer attaching) is not a stop. */
void tool_wait_stop(double timeout_s);

/* A socket bound to 127.0.0.1:port (0: the kernel picks) with SO_REUSEPORT,
 * so one per thread or shard can share the port. SOCK_STREAM: also
 * SO_REUSEADDR and TCP_NODELAY (accepted sockets inherit it), listening.
 * SOCK_DGRAM: a 4 MiB receive buffer (tool_big_rcvbuf). nonblock: O_NONBLOCK.
 * Returns the fd or -errno. */
int tool_listen_loopback(int type, int port, int nonblock);
/* The port fd is bound to, or -errno. */
int tool_local_port(int fd);
/* A 4 MiB receive buffer, so a few milliseconds' stall at 100k datagrams/s
 * does not overflow it (the default holds ~200 small datagrams): forced
 * when we may (root), else as much as net.core.rmem_max allows. */
void tool_big_rcvbuf(int fd);

#endif
