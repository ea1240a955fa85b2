/* SPDX-License-Identifier: MIT */
/*
 * short-load - short connections against an echo service (through a proxy
 * in tools/bench/bench-proxy.sh): connect, send one 64-byte request, read
 * the 64-byte echo back and check every byte, close; again, for -d
 * seconds or -n connections, from one blocking thread (pin it with
 * taskset). Prints "conns N errors E secs S"; exit 1 on any error.
 *
 *	short-load -p PORT [-d SECS] [-n CONNS]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One connection: 0, or -1 (refused, cut short, a wrong byte). */
static int one(const struct sockaddr_in *a, unsigned seq)
{
	unsigned char req[64], got[64];
	size_t have = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0), one_ = 1, ok = 0;

	if (fd < 0)
		return -1;
	for (int i = 0; i < 64; i++)
		req[i] = (unsigned char)(seq * 13 + (unsigned)i);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one_, sizeof(one_));
	if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0 &&
	    write(fd, req, sizeof(req)) == (ssize_t)sizeof(req)) {
		while (have < sizeof(got)) {
			ssize_t r = read(fd, got + have, sizeof(got) - have);

			if (r <= 0)
				break;
			have += (size_t)r;
		}
		ok = have == sizeof(got) && !memcmp(req, got, sizeof(got));
	}
	close(fd);
	return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	double secs = 2, t0, t;
	unsigned long n = 0, max = 0, errors = 0;
	int c, port = 0;

	while ((c = getopt(argc, argv, "p:d:n:h")) != -1) {
		switch (c) {
		case 'p': port = atoi(optarg); break;
		case 'd': secs = atof(optarg); break;
		case 'n': max = strtoul(optarg, NULL, 10); break;
		default:
			fprintf(stderr, "usage: short-load -p PORT [-d SECS] [-n CONNS]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (port <= 0 || port > 65535) {
		fprintf(stderr, "short-load: -p PORT is required (1..65535)\n");
		return 2;
	}
	a.sin_port = htons((unsigned short)port);
	t0 = now_s();
	do {
		if (one(&a, (unsigned)n) < 0)
			errors++;
		n++;
		t = now_s();
	} while (max ? n < max : t - t0 < secs);
	printf("conns %lu errors %lu secs %.3f\n", n, errors, t - t0);
	return errors ? 1 : 0;
}
