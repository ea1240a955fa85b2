/* SPDX-License-Identifier: MIT */
/*
 * tools/examples/tcp-proxy, run as a child process in front of two echo
 * upstreams (threads of this test, blocking sockets on 127.0.0.1, port 0):
 * every byte both ways with the half-close carried, round robin and least
 * connections, an upstream that goes away, the drain on SIGTERM.
 */
#include "helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>

#define PROG "build/tools/examples/tcp-proxy"
#define PX_LEN (256u << 10)

struct up {
	int lfd, port;
	_Atomic int accepted;
	pthread_t th;
};

static uint8_t px_pat(size_t i)
{
	return (uint8_t)(i * 31 + 7);
}

/* Echo one connection until its end of stream, then close. */
static void *px_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[16384];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (write(fd, buf, (size_t)n) != n)
			break;
	close(fd);
	return NULL;
}

static void *px_up(void *arg)
{
	struct up *u = arg;

	for (;;) {
		int fd = accept(u->lfd, NULL, NULL);
		pthread_t t;

		if (fd < 0)
			return NULL; /* the listener was shut down */
		atomic_fetch_add(&u->accepted, 1);
		pthread_create(&t, NULL, px_conn, (void *)(intptr_t)fd);
		pthread_detach(t);
	}
}

static void px_up_start(struct up *u)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	memset(u, 0, sizeof(*u));
	u->lfd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert(u->lfd >= 0);
	cr_assert_eq(bind(u->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(u->lfd, 64), 0);
	cr_assert_eq(getsockname(u->lfd, (struct sockaddr *)&a, &len), 0);
	u->port = ntohs(a.sin_port);
	pthread_create(&u->th, NULL, px_up, u);
}

static void px_up_stop(struct up *u)
{
	shutdown(u->lfd, SHUT_RDWR); /* accept returns: the thread ends */
	pthread_join(u->th, NULL);
	close(u->lfd);
}

static pid_t px_start(int *port, const char *balance, const char *check_ms, struct up *a,
		      struct up *b)
{
	char ua[32], ub[32];

	snprintf(ua, sizeof(ua), "127.0.0.1:%d", a->port);
	snprintf(ub, sizeof(ub), "localhost:%d", b->port); /* by name too */
	return th_start_server((char *[]){ PROG, "-l", "127.0.0.1:0", "-u", ua, "-u", ub, "-b",
					   (char *)balance, "-c", (char *)check_ms, NULL },
			       "tcp-proxy", NULL, port);
}

static int px_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert(fd >= 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* PX_LEN bytes up, half-close, the same bytes back, end of stream: exact. */
static void *px_sender(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t *buf = malloc(PX_LEN);

	for (size_t i = 0; i < PX_LEN; i++)
		buf[i] = px_pat(i);
	if (write(fd, buf, PX_LEN) != (ssize_t)PX_LEN)
		abort();
	shutdown(fd, SHUT_WR);
	free(buf);
	return NULL;
}

static void px_exchange(int port)
{
	int fd = px_connect(port);
	static uint8_t in[PX_LEN + 1];
	size_t got = 0;
	ssize_t n;
	pthread_t t;

	pthread_create(&t, NULL, px_sender, (void *)(intptr_t)fd);
	while ((n = read(fd, in + got, sizeof(in) - got)) > 0)
		got += (size_t)n;
	pthread_join(t, NULL);
	close(fd);
	cr_assert_eq(got, PX_LEN, "got %zu of %u bytes back", got, PX_LEN);
	for (size_t i = 0; i < PX_LEN; i++)
		cr_assert_eq(in[i], px_pat(i), "byte %zu lost or reordered", i);
}

static void px_stop(pid_t pid)
{
	int status = 0;

	cr_assert_eq(kill(pid, SIGTERM), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
}

Test(proxy, round_robin_moves_every_byte_and_carries_the_half_close, .timeout = 60)
{
	struct up a, b;
	int port;
	pid_t pid;

	if (access(PROG, X_OK) != 0)
		cr_skip_test("%s is not built (make tools)", PROG);
	px_up_start(&a);
	px_up_start(&b);
	pid = px_start(&port, "rr", "0", &a, &b); /* no health checks: exact counts */
	for (int i = 0; i < 8; i++)
		px_exchange(port);
	cr_assert_eq(atomic_load(&a.accepted), 4);
	cr_assert_eq(atomic_load(&b.accepted), 4);
	/* an upstream that goes away: every connection still served, by the other */
	px_up_stop(&b);
	for (int i = 0; i < 6; i++)
		px_exchange(port);
	cr_assert_eq(atomic_load(&a.accepted), 10);
	px_stop(pid);
	px_up_stop(&a);
}

Test(proxy, least_connections_spreads_held_connections, .timeout = 60)
{
	struct up a, b;
	int port, fd[2];
	pid_t pid;
	char c = 'x';

	if (access(PROG, X_OK) != 0)
		cr_skip_test("%s is not built (make tools)", PROG);
	px_up_start(&a);
	px_up_start(&b);
	pid = px_start(&port, "least", "0", &a, &b);
	for (int i = 0; i < 2; i++) {
		fd[i] = px_connect(port);
		/* a round trip: the proxy has its upstream connection now */
		cr_assert_eq(write(fd[i], &c, 1), 1);
		cr_assert_eq(read(fd[i], &c, 1), 1);
	}
	/* two held at once: one on each */
	cr_assert_eq(atomic_load(&a.accepted), 1);
	cr_assert_eq(atomic_load(&b.accepted), 1);
	close(fd[0]);
	close(fd[1]);
	px_stop(pid);
	px_up_stop(&a);
	px_up_stop(&b);
}

Test(proxy, sigterm_drains_a_connection_under_way, .timeout = 60)
{
	struct up a, b;
	int port, fd, status = 0;
	pid_t pid;
	char c = 'y';

	if (access(PROG, X_OK) != 0)
		cr_skip_test("%s is not built (make tools)", PROG);
	px_up_start(&a);
	px_up_start(&b);
	pid = px_start(&port, "rr", "50", &a, &b); /* health checks running */
	fd = px_connect(port);
	cr_assert_eq(write(fd, &c, 1), 1);
	cr_assert_eq(read(fd, &c, 1), 1);
	cr_assert_eq(kill(pid, SIGTERM), 0);
	/* still served during the drain */
	cr_assert_eq(write(fd, "z", 1), 1);
	cr_assert_eq(read(fd, &c, 1), 1);
	cr_assert_eq(c, 'z');
	close(fd);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
	px_up_stop(&a);
	px_up_stop(&b);
}
