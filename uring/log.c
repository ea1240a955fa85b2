/* SPDX-License-Identifier: MIT */
/*
 * uring/log.c - where the runtime's messages go: the application's hook
 * (corio_set_log) or stderr. It sits at the bottom of the stack so that
 * every area, uring/ itself included, reports through the one channel; it
 * knows nothing of liburing, timers or fibers.
 *
 * One process-wide hook. Messages are rare (errors, rate-limited stall
 * reports), so a mutex serializes them: the hook needs no lock of its own,
 * lines never interleave, and once corio_set_log() returns the old hook is
 * neither running nor called again. The stack-overflow handler (a signal
 * handler: core/stack.c) cannot take a lock and keeps writing to stderr.
 */
#include "corio.h"
#include "uring/internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static corio_log_fn log_fn;
static void *log_arg;

void corio_set_log(corio_log_fn fn, void *arg)
{
	pthread_mutex_lock(&log_mu);
	log_fn = fn;
	log_arg = arg;
	pthread_mutex_unlock(&log_mu);
}

void corio__log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2; /* truncated */
	pthread_mutex_lock(&log_mu);
	if (log_fn) {
		log_fn(log_arg, line);
	} else {
		line[n++] = '\n';
		/* one write: the line is not interleaved with other output */
		if (write(STDERR_FILENO, line, (size_t)n) < 0) {
			/* nothing to do: stderr is gone */
		}
	}
	pthread_mutex_unlock(&log_mu);
}
