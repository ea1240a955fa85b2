/* SPDX-License-Identifier: MIT */
/*
 * bench-sendfile - corio_sendfile of one file over loopback TCP, by the
 * zero-copy path (IORING_OP_SPLICE into a pooled pipe, splice(2) to the
 * socket) and by the copying path (read into a buffer, corio_send:
 * CORIO_NET_DISABLE=splice), alternated, one shard. A plain thread reads
 * the bytes and throws them away. Per run: throughput from the first byte
 * sent to the last one read, and the process's CPU time over the same
 * span (getrusage RUSAGE_SELF: the shard, the kernel's io_uring workers
 * and the reader), with the reader's own share (RUSAGE_THREAD) beside it.
 *
 *   bench-sendfile [--mib N] [--reps N] [--dir DIR]
 */
#include <corio.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static struct {
	int fd;
	size_t len;
	char where[64];
	double t0, t1, cpu0, cpu1, reader_cpu;
	ssize_t sent;
	size_t got;
} b_;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void *reader(void *arg)
{
	struct sockaddr_storage sa;
	socklen_t len;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t bufsz = 256 << 10;
	char *buf = malloc(bufsz);
	double mine = cpu_s(RUSAGE_THREAD);
	ssize_t r;

	(void)arg;
	corio_addr_parse(b_.where, &sa, &len);
	if (connect(fd, (struct sockaddr *)&sa, len) < 0) {
		perror("connect");
		exit(1);
	}
	while ((r = read(fd, buf, bufsz)) > 0)
		b_.got += (size_t)r;
	b_.t1 = now_s();
	b_.cpu1 = cpu_s(RUSAGE_SELF);
	b_.reader_cpu = cpu_s(RUSAGE_THREAD) - mine;
	close(fd);
	free(buf);
	return NULL;
}

static void entry(void *arg)
{
	struct corio_listener *l;
	struct corio_sock *s;
	struct sockaddr_storage ss;
	socklen_t len;
	pthread_t t;

	(void)arg;
	if (corio_tcp_listen("127.0.0.1:0", NULL, &l) != 0)
		exit(1);
	corio_listener_addr(l, &ss, &len);
	corio_addr_format((struct sockaddr *)&ss, len, b_.where, sizeof(b_.where));
	pthread_create(&t, NULL, reader, NULL);
	if (corio_accept(l, &s) != 0)
		exit(1);
	b_.t0 = now_s();
	b_.cpu0 = cpu_s(RUSAGE_SELF);
	b_.sent = corio_sendfile(s, b_.fd, 0, b_.len);
	corio_close(s);
	corio_listener_close(l);
	pthread_join(t, NULL); /* the rest is in the socket: the reader needs no shard */
}

int main(int argc, char **argv)
{
	const char *dir = "/tmp", *modes[2] = { "splice", "copy" };
	size_t mib = 64;
	int reps = 3;
	char path[256];
	struct utsname u;
	struct corio_config cfg;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mib"))
			mib = strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
	}
	b_.len = mib << 20;
	snprintf(path, sizeof(path), "%s/corio-bench-sendfile-XXXXXX", dir);
	b_.fd = mkstemp(path);
	if (b_.fd < 0 || ftruncate(b_.fd, 0) < 0)
		return perror("mkstemp"), 1;
	unlink(path);
	{
		char *blk = malloc(1 << 20);

		for (size_t i = 0; i < (1 << 20); i++)
			blk[i] = (char)(i * 31);
		for (size_t m = 0; m < mib; m++)
			if (write(b_.fd, blk, 1 << 20) != (1 << 20))
				return perror("write"), 1;
		free(blk);
	}
	uname(&u);
	printf("bench-sendfile: kernel %s, file %zu MiB in %s (page cache warm), loopback TCP, "
	       "1 shard, default socket buffers, pipe %s B\n", u.release, mib, dir,
	       getenv("CORIO_NET_PIPE_SIZE") ? getenv("CORIO_NET_PIPE_SIZE") : "262144");
	printf("%-4s %-7s %10s %10s %12s %12s\n", "run", "path", "MiB/s", "cpu ms", "reader ms",
	       "others ms");
	for (int r = 0; r < reps; r++) {
		for (int m = 0; m < 2; m++) {
			if (m)
				setenv("CORIO_NET_DISABLE", "splice", 1);
			else
				unsetenv("CORIO_NET_DISABLE");
			corio_config_init(&cfg);
			cfg.shards = 1;
			b_.got = 0;
			if (corio_run(&cfg, entry, NULL) != 0 || b_.sent != (ssize_t)b_.len ||
			    b_.got != b_.len) {
				fprintf(stderr, "run failed: sent %zd got %zu (%s)\n", b_.sent, b_.got,
					corio_last_error());
				return 1;
			}
			printf("%-4d %-7s %10.0f %10.1f %12.1f %12.1f\n", r + 1, modes[m],
			       (double)b_.len / (1 << 20) / (b_.t1 - b_.t0),
			       (b_.cpu1 - b_.cpu0) * 1e3, b_.reader_cpu * 1e3,
			       (b_.cpu1 - b_.cpu0 - b_.reader_cpu) * 1e3);
		}
	}
	close(b_.fd);
	return 0;
}
