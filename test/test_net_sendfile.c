/* SPDX-License-Identifier: MIT */
/*
 * Networking, corio_sendfile: byte-exact offsets and EOF on every path
 * (inline, copy, splice, small pipes), a cached file going inline, order
 * after owned sends, deadline and cancel with a peer that stops reading,
 * and bad input (with the owned sends').
 */
#include "net_helpers.h"

/* ---- sendfile ---- */

static char sf_dir[64];

/* A file of len pattern bytes (seed 7) in a temp dir: its fd, or -1. */
static int sf_file(size_t len)
{
	char path[128];
	uint8_t *p = malloc(len ? len : 1);
	int fd;

	snprintf(sf_dir, sizeof(sf_dir), "/tmp/corio-sf-XXXXXX");
	if (!p || !mkdtemp(sf_dir))
		return -1;
	snprintf(path, sizeof(path), "%s/f", sf_dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	fill(p, len, 7);
	if (fd >= 0 && write(fd, p, len) != (ssize_t)len) {
		close(fd);
		fd = -1;
	}
	unlink(path);
	rmdir(sf_dir);
	free(p);
	return fd;
}

struct sf_read {
	struct corio_sock *c;
	size_t off, len; /* the file's bytes expected */
	int bad;
};

static int sf_reader(void *arg)
{
	struct sf_read *r = arg;
	uint8_t buf[65536];
	size_t got = 0;

	while (got < r->len) {
		ssize_t n = corio_recv(r->c, buf, sizeof(buf));

		if (n <= 0) {
			r->bad = 1;
			return 0;
		}
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != pat(r->off + got + (size_t)i, 7))
				r->bad = 2;
		got += (size_t)n;
	}
	return 0;
}

#define SF_BIG (6u << 20) /* far more than a pipe */

static void sf_exact_entry(void *arg)
{
	struct sf_read r = { 0 };
	struct corio_fiber *f;
	struct pair p;
	int fd = sf_file(SF_BIG);
	uint8_t x;

	(void)arg;
	CHECK(fd >= 0);
	pair_open(&p, 0, 0);
	r = (struct sf_read){ .c = p.c, .off = 0, .len = SF_BIG };
	CHECK_EQ(corio_spawn(sf_reader, &r, NULL, &f), 0);
	CHECK_EQ(corio_sendfile(p.s, fd, 0, SF_BIG), (ssize_t)SF_BIG);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(r.bad, 0);
	/* an offset, and a length past the end: what the file has */
	r = (struct sf_read){ .c = p.c, .off = 1000, .len = SF_BIG - 1000 - 77 };
	CHECK_EQ(corio_spawn(sf_reader, &r, NULL, &f), 0);
	CHECK_EQ(corio_sendfile(p.s, fd, 1000, SF_BIG - 1000 - 77), (ssize_t)(SF_BIG - 1077));
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(r.bad, 0);
	r = (struct sf_read){ .c = p.c, .off = SF_BIG - 77, .len = 77 };
	CHECK_EQ(corio_spawn(sf_reader, &r, NULL, &f), 0);
	CHECK_EQ(corio_sendfile(p.s, fd, SF_BIG - 77, 1u << 20), 77); /* EOF: short */
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(r.bad, 0);
	CHECK_EQ(corio_sendfile(p.s, fd, SF_BIG, 100), 0);     /* at the end */
	CHECK_EQ(corio_sendfile(p.s, fd, SF_BIG + 9, 100), 0); /* past it */
	CHECK_EQ(corio_sendfile(p.s, fd, 0, 0), 0);
	CHECK_EQ(lseek(fd, 0, SEEK_CUR), SF_BIG); /* the position is not used */
	/* the socket (O_NONBLOCK now on some paths) still sends as before */
	CHECK_EQ(corio_send(p.s, "z", 1), 1);
	CHECK_EQ(corio_recv(p.c, &x, 1), 1);
	CHECK_EQ(x, 'z');
	CHECK_EQ(corio_close(p.s), 0);
	p.s = NULL;
	CHECK_EQ(corio_recv(p.c, &x, 1), 0); /* nothing more was sent */
	pair_close(&p);
	close(fd);
}

Test(net, sendfile_byte_exact_offsets_and_eof, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, sf_exact_entry, NULL);
}

Test(net, sendfile_copy_path_byte_exact, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_DISABLE", "splice", 1);
	th_run(&cfg, sf_exact_entry, NULL);
}

Test(net, sendfile_small_pipes_byte_exact, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_PIPE_SIZE", "4096", 1);
	setenv("CORIO_NET_DISABLE", "cached", 1); /* the pipe even for a cached file */
	th_run(&cfg, sf_exact_entry, NULL);
}

/* The files these tests write are in the page cache, so on io_uring they go
 * by sendfile(2) on the spot; this one forces the SPLICE path for them. */
Test(net, sendfile_splice_path_byte_exact, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	setenv("CORIO_NET_DISABLE", "cached", 1);
	th_run(&cfg, sf_exact_entry, NULL);
}

/*
 * A file all in the page cache goes by sendfile(2) on the spot: no SQE (no
 * SPLICE op on a kernel worker, no pipe); with CORIO_NET_DISABLE=cached, or
 * once the pages are evicted, it takes the SPLICE path (at least one SQE).
 * Byte-exact either way. io_uring only: the fallback always uses sendfile.
 */
static void sf_sqes_case(int fd, bool evict, bool inline_expected)
{
	struct corio_stats a, b;
	struct sf_read r;
	struct corio_fiber *f;
	struct pair p;

	if (evict) {
		CHECK_EQ(fdatasync(fd), 0);
		CHECK_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	}
	pair_open(&p, 0, 0);
	CHECK_EQ(corio_stats_get(NULL, corio_shard_id(), &a), 0);
	CHECK_EQ(corio_sendfile(p.s, fd, 0, 32768), 32768); /* fits the socket: no wait */
	CHECK_EQ(corio_stats_get(NULL, corio_shard_id(), &b), 0);
	if (inline_expected)
		CHECK_EQ(b.sqes, a.sqes);
	else
		CHECK(b.sqes > a.sqes);
	r = (struct sf_read){ .c = p.c, .off = 0, .len = 32768 };
	CHECK_EQ(corio_spawn(sf_reader, &r, NULL, &f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(r.bad, 0);
	pair_close(&p);
}

static void sf_cached_entry(void *arg)
{
	int fd = sf_file(32768);

	CHECK(fd >= 0);
	if (arg) {
		sf_sqes_case(fd, false, false); /* CORIO_NET_DISABLE=cached */
	} else {
		sf_sqes_case(fd, false, true);
		sf_sqes_case(fd, true, false); /* evicted: the splice reads it... */
		sf_sqes_case(fd, false, true); /* ...into the cache again */
	}
	close(fd);
}

Test(net, sendfile_of_a_cached_file_goes_inline_else_by_splice, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	TH_URING_ONLY("IORING_OP_SPLICE (the fallback always calls sendfile(2))");
	th_run(&cfg, sf_cached_entry, NULL);
	setenv("CORIO_NET_DISABLE", "cached", 1);
	th_run(&cfg, sf_cached_entry, (void *)1);
}

/* Owned sends queued before a sendfile go out first. */
static void sf_order_entry(void *arg)
{
	static uint8_t head[100000];
	struct ow_done d = { 0 };
	struct sf_read r;
	struct corio_fiber *f;
	struct pair p;
	int fd = sf_file(300000);

	(void)arg;
	CHECK(fd >= 0);
	pair_open(&p, 4096, 4096);
	fill(head, sizeof(head), 7); /* the file's first bytes */
	CHECK_EQ(corio_send_owned(p.s, head, sizeof(head), ow_done_cb, &d), 0);
	r = (struct sf_read){ .c = p.c, .off = 0, .len = 300000 };
	CHECK_EQ(corio_spawn(sf_reader, &r, NULL, &f), 0);
	CHECK_EQ(corio_sendfile(p.s, fd, sizeof(head), 300000 - sizeof(head)),
		 (ssize_t)(300000 - sizeof(head)));
	CHECK_EQ(d.calls, 1);
	CHECK_EQ(d.res, (int)sizeof(head));
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(r.bad, 0);
	pair_close(&p);
	close(fd);
}

Test(net, sendfile_after_owned_sends_keeps_order, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, sf_order_entry, NULL);
}

/* The peer stops reading: the deadline scope ends a sendfile mid-file, and
 * cancellation ends another; the shard then stops cleanly (no pipe left:
 * the census). In a bounded child: a sendfile that ignored them would hang. */
static int sf_cancel_ret;

static int sf_sender(void *arg)
{
	struct pair *p = arg;
	int fd = sf_file(SF_BIG);

	sf_cancel_ret = (int)corio_sendfile(p->s, fd, 0, SF_BIG);
	close(fd);
	return 0;
}

static void sf_cut_entry(void *arg)
{
	struct corio_deadline dl;
	struct corio_fiber *f;
	struct pair p;
	int fd = sf_file(SF_BIG);

	(void)arg;
	pair_open(&p, 4096, 4096);
	corio_timeout_push(&dl, 100 * 1000000ull);
	CHECK_EQ(corio_sendfile(p.s, fd, 0, SF_BIG), -ETIMEDOUT);
	corio_deadline_pop(&dl);
	CHECK_EQ(corio_close(p.s), 0);
	CHECK_EQ(corio_close(p.c), 0);
	pair_open(&p, 4096, 4096);
	sf_cancel_ret = 1;
	CHECK_EQ(corio_spawn(sf_sender, &p, NULL, &f), 0);
	corio_sleep_ns(50 * 1000000ull); /* not for ordering: the result is checked either way */
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(sf_cancel_ret, -ECANCELED);
	pair_close(&p);
	close(fd);
}

static int sf_cut_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);

	(void)arg;
	if (corio_run(&cfg, sf_cut_entry, NULL) != 0)
		return 1;
	if (atomic_load(&th_failures)) {
		fprintf(stderr, "%s\n", th_msg);
		return 2;
	}
	return 0;
}

Test(net, sendfile_deadline_and_cancel_with_a_peer_that_stops_reading, .timeout = 60)
{
	th_child_ok(sf_cut_child, NULL, 20000, "sendfile cut short");
}

Test(net, sendfile_copy_path_deadline_and_cancel, .timeout = 60)
{
	setenv("CORIO_NET_DISABLE", "splice", 1);
	th_child_ok(sf_cut_child, NULL, 20000, "sendfile (copy) cut short");
}

Test(net, sendfile_splice_path_deadline_and_cancel, .timeout = 60)
{
	setenv("CORIO_NET_DISABLE", "cached", 1);
	th_child_ok(sf_cut_child, NULL, 20000, "sendfile (splice) cut short");
}

/* Bad input: -errno and a message, no callback. */
static void ow_bad_entry(void *arg)
{
	struct ow_done d = { 0 };
	struct corio_sock *u;
	struct pair p;
	int fds[2], fd = sf_file(10), closed;

	(void)arg;
	pair_open(&p, 0, 0);
	CHECK_EQ(corio_send_owned(p.s, NULL, 1, ow_done_cb, &d), -EINVAL);
	CHECK(strstr(corio_last_error(), "buf is NULL") != NULL);
	CHECK_EQ(corio_send_owned(p.s, "x", 0, ow_done_cb, &d), -EINVAL);
	CHECK(strstr(corio_last_error(), "len is 0") != NULL);
	CHECK_EQ(corio_send_owned(NULL, "x", 1, ow_done_cb, &d), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_send_owned") != NULL);
	CHECK_EQ(corio_udp_bind("127.0.0.1:0", &u), 0);
	CHECK_EQ(corio_send_owned(u, "x", 1, ow_done_cb, &d), -EINVAL);
	CHECK(strstr(corio_last_error(), "not a stream socket") != NULL);
	CHECK_EQ(corio_sendfile(u, fd, 0, 1), -EINVAL);
	CHECK_EQ(corio_close(u), 0);
	CHECK_EQ(corio_sock_queued(NULL, NULL), -EINVAL);
	CHECK_EQ(corio_sendfile(p.s, -1, 0, 1), -EBADF);
	CHECK(strstr(corio_last_error(), "not an open file") != NULL);
	closed = dup(fd);
	close(closed);
	CHECK_EQ(corio_sendfile(p.s, closed, 0, 1), -EBADF);
	CHECK_EQ(pipe(fds), 0);
	CHECK_EQ(corio_sendfile(p.s, fds[0], 0, 1), -EINVAL);
	CHECK(strstr(corio_last_error(), "not a regular file") != NULL);
	CHECK_EQ(corio_sendfile(p.s, corio_sock_fd(p.c), 0, 1), -EINVAL);
	CHECK_EQ(corio_sendfile(p.s, fd, -1, 1), -EINVAL);
	CHECK(strstr(corio_last_error(), "negative") != NULL);
	CHECK_EQ(d.calls, 0);
	close(fds[0]);
	close(fds[1]);
	close(fd);
	pair_close(&p);
}

Test(net, send_owned_and_sendfile_bad_input, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, ow_bad_entry, NULL);
}
