/* SPDX-License-Identifier: MIT */
#include "eb_proc.h"

#include <sched.h>
#include <time.h>

static sigset_t stop_set(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	return set;
}

void eb_block_stop_signals(void)
{
	sigset_t set = stop_set();

	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

int eb_thread_pinned(pthread_t *th, int cpu, void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;
	int ret;

	pthread_attr_init(&a);
	if (cpu >= 0) {
		cpu_set_t cs;

		CPU_ZERO(&cs);
		CPU_SET(cpu, &cs);
		pthread_attr_setaffinity_np(&a, sizeof(cs), &cs);
	}
	ret = pthread_create(th, &a, fn, arg);
	pthread_attr_destroy(&a);
	return ret;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void eb_wait_stop(double timeout_s)
{
	sigset_t set = stop_set();
	double end = now_s() + timeout_s;

	for (;;) {
		struct timespec left = { .tv_sec = 1 };
		int sig;

		if (timeout_s > 0) {
			double d = end - now_s();

			if (d <= 0)
				return;
			if (d < 1) {
				left.tv_sec = 0;
				left.tv_nsec = (long)(d * 1e9);
			}
		}
		sig = sigtimedwait(&set, NULL, &left);
		if (sig == SIGINT || sig == SIGTERM)
			return;
	}
}
