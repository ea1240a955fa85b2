/* SPDX-License-Identifier: MIT */
#include "proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static sigset_t stop_set(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	return set;
}

void tool_block_stop_signals(void)
{
	sigset_t set = stop_set();

	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

int tool_thread_pinned(pthread_t *th, int cpu, void *(*fn)(void *), void *arg)
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

void tool_wait_stop(double timeout_s)
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

void tool_big_rcvbuf(int fd)
{
	int v = 4 << 20;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

int tool_listen_loopback(int type, int port, int nonblock)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, fd = socket(AF_INET, type | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
	int bad;

	if (fd < 0)
		return -errno;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bad = setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (!bad && type == SOCK_STREAM)
		bad = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
		      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (!bad)
		bad = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (!bad && type == SOCK_STREAM)
		bad = listen(fd, SOMAXCONN);
	if (bad) {
		int e = -errno;

		close(fd);
		return e;
	}
	if (type == SOCK_DGRAM)
		tool_big_rcvbuf(fd);
	return fd;
}

int tool_local_port(int fd)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	if (getsockname(fd, (struct sockaddr *)&sa, &len))
		return -errno;
	return ntohs(sa.sin_port);
}
