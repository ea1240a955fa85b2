/* SPDX-License-Identifier: MIT */
/*
 * test/test_faults.c - workloads under injected faults (uring/fault.h).
 * Only meaningful in the fault build (make test FAULTS=1); elsewhere every
 * test skips. Each test sets CORIO_FAULTS itself and runs its runtime in a
 * forked child with a bounded wait (a hang fails the test, the suite goes
 * on). The invariants, whatever fails:
 *  - every byte a peer receives is exactly the prefix of what was sent
 *    (nothing lost in the middle, nothing duplicated);
 *  - every cross-shard call runs exactly once or its caller got an error;
 *  - every injected error reaches the caller as -errno (counted exactly
 *    where one op is one call: file I/O);
 *  - no crash, no hang, nothing leaked (corio_run's census and the fds).
 */
#include "helpers.h"
#include "uring/fault.h"

#include <pthread.h>
#include <stdlib.h>

#ifndef CORIO_FAULTS
#define NEED_FAULTS() cr_skip_test("fault injection is built only with make test FAULTS=1")
#else
#define NEED_FAULTS() ((void)0)

/* The backend of the child's runtime: AUTO (CORIO_BACKEND decides), or
 * the epoll fallback for the tests of its own failure paths. */
static enum corio_backend child_backend;

/* The child's verdict: the runtime returned 0 (census included), no CHECK
 * failed, no fd left open. Prints the faults it injected. */
static int child_run(unsigned shards, void (*entry)(void *), void *arg)
{
	struct corio_config cfg;
	int before = th_fd_count(), ret;

	cfg = th_cfg(shards);
	if (child_backend) {
		unsetenv("CORIO_BACKEND"); /* the config decides */
		cfg.backend = child_backend;
	}
	ret = corio_run(&cfg, entry, arg);
	fprintf(stderr, "  faults:");
	for (unsigned k = 0; k < CORIO__FK_MAX; k++)
		if (corio__fault_count(k))
			fprintf(stderr, " %s=%llu", corio__fault_name(k),
				(unsigned long long)corio__fault_count(k));
	fprintf(stderr, "\n");
	if (ret) {
		fprintf(stderr, "corio_run: %s (%s)\n", strerror(-ret), corio_last_error());
		return 1;
	}
	if (atomic_load(&th_failures)) {
		fprintf(stderr, "%s\n", th_msg);
		return 2;
	}
	if (th_fd_count() != before) {
		fprintf(stderr, "fds left open: %d -> %d\n", before, th_fd_count());
		return 3;
	}
	return 0;
}

static uint8_t pat(size_t i, unsigned id)
{
	return (uint8_t)(i * 7 + id * 13 + (i >> 9));
}

/* ---- streams: echo with errors allowed ------------------------------------------------ */

#define NCONN 64
#define CONN_BYTES (48 * 1024)

static struct {
	_Atomic int port;
	_Atomic int done;
	_Atomic uint64_t bytes_ok;   /* bytes verified back at the clients */
	_Atomic int errors;          /* calls that returned -errno */
	bool borrow;                 /* server echoes with borrowed ring buffers */
} st;

static bool allowed(long err)
{
	switch (-err) {
	case ECONNRESET:
	case EPIPE:
	case ENOMEM:
	case ECANCELED:
	case ECONNABORTED:
		return true;
	default:
		return false;
	}
}

static int echo_server_conn(void *arg)
{
	struct corio_sock *s = arg;
	uint8_t buf[4096];

	for (;;) {
		ssize_t r, w;

		if (st.borrow) {
			struct corio_buf b;

			r = corio_recv_buf(s, &b);
			if (r <= 0)
				break;
			w = corio_send(s, b.data, b.len);
			corio_buf_release(&b);
		} else {
			r = corio_recv(s, buf, sizeof(buf));
			if (r <= 0)
				break;
			w = corio_send(s, buf, (size_t)r);
		}
		if (w != r) {
			CHECK(w < 0 && allowed(w));
			atomic_fetch_add(&st.errors, 1);
			break;
		}
	}
	corio_close(s);
	return 0;
}

static int acceptor(void *arg)
{
	struct corio_listener *l = arg;

	for (;;) {
		struct corio_sock *s;
		int ret = corio_accept(l, &s);

		if (ret) {
			/* the cancel at the end; anything else reached the caller */
			if (ret != -ECANCELED) {
				fprintf(stderr, "  corio_accept: %s (%s)\n", strerror(-ret),
					corio_last_error());
				CHECK(allowed(ret));
				atomic_fetch_add(&st.errors, 1);
			}
			return ret;
		}
		CHECK(corio_spawn(echo_server_conn, s, NULL, NULL) == 0);
	}
}

static int client(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	uint8_t *out = malloc(CONN_BYTES), *in = malloc(CONN_BYTES);
	char where[32];
	struct corio_sock *c;
	size_t got = 0;
	ssize_t r;
	int ret;

	snprintf(where, sizeof(where), "127.0.0.1:%d", atomic_load(&st.port));
	CHECK(out && in);
	if (!out || !in)
		goto out;
	ret = corio_tcp_connect(where, &c);
	if (ret) {
		CHECK(allowed(ret));
		atomic_fetch_add(&st.errors, 1);
		goto out;
	}
	for (size_t i = 0; i < CONN_BYTES; i++)
		out[i] = pat(i, id);
	/* send it all first: the echo comes back in the socket buffers */
	r = corio_send(c, out, CONN_BYTES);
	if (r != (ssize_t)CONN_BYTES) {
		CHECK(r < 0 && allowed(r));
		atomic_fetch_add(&st.errors, 1);
		corio_shutdown_write(c);
	}
	while (got < CONN_BYTES && (r = corio_recv(c, in + got, CONN_BYTES - got)) > 0)
		got += (size_t)r;
	if (r < 0 && got < CONN_BYTES) {
		CHECK(allowed(r));
		atomic_fetch_add(&st.errors, 1);
	}
	/* whatever came back is exactly the prefix of what was sent */
	CHECK(memcmp(in, out, got) == 0);
	atomic_fetch_add(&st.bytes_ok, got);
	corio_close(c);
out:
	free(out);
	free(in);
	atomic_fetch_add(&st.done, 1);
	return 0;
}

static void stream_entry(void *arg)
{
	struct corio_listen_opts o = { .backlog = 1024 };
	struct corio_listener *l = NULL;
	struct corio_fiber *acc = NULL;
	unsigned me = corio_shard_id();

	(void)arg;
	if (me == 0) {
		struct sockaddr_storage ss;
		socklen_t len;

		CHECK(corio_tcp_listen("127.0.0.1:0", &o, &l) == 0);
		CHECK(corio_listener_addr(l, &ss, &len) == 0);
		atomic_store(&st.port, corio_addr_port((struct sockaddr *)&ss));
		CHECK(corio_spawn(acceptor, l, NULL, &acc) == 0);
	}
	while (!atomic_load(&st.port))
		corio_yield();
	for (unsigned i = me; i < NCONN; i += corio_shard_count())
		CHECK(corio_spawn(client, (void *)(uintptr_t)i, NULL, NULL) == 0);
	while (atomic_load(&st.done) < NCONN)
		CHECK(corio_sleep_ns(1000000) == 0);
	if (acc) {
		corio_cancel(acc);
		corio_join(acc, NULL);
		CHECK(corio_listener_close(l) == 0);
	}
}

static int stream_child(void *arg)
{
	int ret;

	setenv("CORIO_FAULTS", arg, 1);
	ret = child_run(2, stream_entry, NULL);
	fprintf(stderr, "  %s: %llu bytes verified, %d errors seen\n", (char *)arg,
		(unsigned long long)atomic_load(&st.bytes_ok), atomic_load(&st.errors));
	if (!ret && strstr(arg, "kinds=transparent"))
		ret = atomic_load(&st.errors) || atomic_load(&st.bytes_ok) != NCONN * CONN_BYTES ? 4
														      : 0;
	if (!ret && strstr(arg, "reset") && !atomic_load(&st.errors))
		ret = 5; /* errors were injected: someone must have seen one */
	return ret;
}
#endif

/* A full SQ whose submit the kernel refuses (-EBUSY/-EAGAIN) must drain
 * the CQ. That used to dispatch the completions right inside the
 * corio__ring_sqe() or corio__ring_cancel() of whoever was taking an SQE:
 * a closer marked an op CANCELING after its final CQE had already been
 * dispatched and parked forever, and a reader between checking its queue
 * and parking missed the wake-up for the data that arrived (parked with
 * buffers queued). Now those CQEs are stashed and dispatched by the loop's
 * next reap (uring/ring.c, submit_refused). Hung 3 of 3 before. */
Test(faults, inline_reap_during_cancel, .timeout = 120)
{
	NEED_FAULTS();
#ifdef CORIO_FAULTS
	static char spec[] = "seed=1,rate=0.3,kinds=sqfull+sqbusy";

	st.borrow = true;
	th_child_ok(stream_child, spec, 60000, spec);
#endif
}

Test(faults, stream_transparent_every_byte, .timeout = 120)
{
	NEED_FAULTS();
#ifdef CORIO_FAULTS
	static char spec[] = "seed=7,rate=0.05,kinds=transparent";

	st.borrow = true;
	th_child_ok(stream_child, spec, 60000, spec);
#endif
}

Test(faults, stream_errors_prefix_only, .timeout = 120)
{
	NEED_FAULTS();
#ifdef CORIO_FAULTS
	static char spec[] = "seed=3,rate=0.03,kinds=reset+pipe+enomem+cancel+short+mshot";

	th_child_ok(stream_child, spec, 60000, spec);
#endif
}

Test(faults, stream_errors_borrowed_buffers, .timeout = 120)
{
	NEED_FAULTS();
#ifdef CORIO_FAULTS
	static char spec[] = "seed=5,rate=0.03,kinds=reset+pipe+enomem+cancel+enobufs+mshot";

	st.borrow = true;
	th_child_ok(stream_child, spec, 60000, spec);
#endif
}

#ifdef CORIO_FAULTS
/* ---- files: one op per call, so every injected error is one -errno ---------------------- */

#define FS_CHUNKS 512
#define FS_CHUNK 4096

static struct {
	char path[64];
	_Atomic int errors;
} fs;

static void fs_entry(void *arg)
{
	static uint8_t buf[FS_CHUNK], back[FS_CHUNK];
	static bool written[FS_CHUNKS];
	int fd;

	(void)arg;
	do
		fd = corio_open(fs.path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	while (fd < 0 && allowed(fd) && atomic_fetch_add(&fs.errors, 1) >= 0);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	for (unsigned c = 0; c < FS_CHUNKS; c++) {
		ssize_t r;

		for (unsigned i = 0; i < FS_CHUNK; i++)
			buf[i] = pat(i, c);
		r = corio_write_at(fd, buf, FS_CHUNK, (uint64_t)c * FS_CHUNK);
		written[c] = r == FS_CHUNK;
		if (r != FS_CHUNK) {
			CHECK(r == -EIO || r == -ENOMEM || r == -ECANCELED);
			atomic_fetch_add(&fs.errors, 1);
		}
	}
	for (unsigned c = 0; c < FS_CHUNKS; c++) {
		ssize_t r = corio_read_at(fd, back, FS_CHUNK, (uint64_t)c * FS_CHUNK);

		if (r < 0) {
			CHECK(r == -EIO || r == -ENOMEM || r == -ECANCELED);
			atomic_fetch_add(&fs.errors, 1);
			continue;
		}
		CHECK(r == FS_CHUNK);
		for (unsigned i = 0; written[c] && i < FS_CHUNK; i++)
			buf[i] = pat(i, c);
		/* a chunk whose write failed was never written: zeros (a hole) */
		if (!written[c])
			memset(buf, 0, FS_CHUNK);
		CHECK(memcmp(back, buf, FS_CHUNK) == 0);
	}
	corio_close_fd(fd);
	unlink(fs.path);
}

static int fs_child(void *arg)
{
	int ret;
	uint64_t injected;

	setenv("CORIO_FAULTS", arg, 1);
	snprintf(fs.path, sizeof(fs.path), "/tmp/corio-faults-%d", (int)getpid());
	ret = child_run(1, fs_entry, NULL);
	injected = corio__fault_count(CORIO__FK_EIO) + corio__fault_count(CORIO__FK_ENOMEM) +
		   corio__fault_count(CORIO__FK_CANCEL);
	fprintf(stderr, "  %s: %llu injected, %d errors seen\n", (char *)arg,
		(unsigned long long)injected, atomic_load(&fs.errors));
	if (!ret && (uint64_t)atomic_load(&fs.errors) != injected)
		ret = 6;
	if (!ret && !injected)
		ret = 7;
	return ret;
}
#endif

Test(faults, fs_each_error_reaches_the_caller, .timeout = 60)
{
	NEED_FAULTS();
	/* the injector rewrites file SQEs; the fallback's file ops run on
	 * their blocking path and never reach a ring */
	TH_URING_ONLY("file I/O through the ring");
#ifdef CORIO_FAULTS
	static char spec[] = "seed=11,rate=0.05,kinds=eio+enomem+cancel";

	th_child_ok(fs_child, spec, 30000, spec);
#endif
}

#ifdef CORIO_FAULTS
/* ---- messages: each call runs once or its caller got an error -------------------------- */

#define NCALLS 2000

static struct {
	_Atomic int ran, ok, failed;
} msg;

static intptr_t bump(void *arg)
{
	(void)arg;
	atomic_fetch_add(&msg.ran, 1);
	return 1;
}

static void msg_entry(void *arg)
{
	unsigned me = corio_shard_id(), peer = (me + 1) % corio_shard_count();

	(void)arg;
	for (int i = 0; i < NCALLS; i++) {
		intptr_t res = 0;
		int ret = corio_call(peer, bump, NULL, &res);

		if (ret == 0 && res == 1)
			atomic_fetch_add(&msg.ok, 1);
		else
			atomic_fetch_add(&msg.failed, 1);
	}
}

static int msg_child(void *arg)
{
	int ret;

	setenv("CORIO_FAULTS", arg, 1);
	ret = child_run(2, msg_entry, NULL);
	fprintf(stderr, "  %s: %d ran, %d ok, %d failed\n", (char *)arg, atomic_load(&msg.ran),
		atomic_load(&msg.ok), atomic_load(&msg.failed));
	if (!ret && (atomic_load(&msg.ran) != atomic_load(&msg.ok) ||
		     atomic_load(&msg.ok) + atomic_load(&msg.failed) != 2 * NCALLS))
		ret = 8;
	return ret;
}
#endif

Test(faults, msg_calls_run_exactly_once, .timeout = 60)
{
	NEED_FAULTS();
#ifdef CORIO_FAULTS
	static char spec[] = "seed=13,rate=0.05,kinds=transparent+surfacing";

	th_child_ok(msg_child, spec, 30000, spec);
#endif
}

/* ---- the epoll fallback's own failure paths (uring/emu_ops.c's syscall sites) ---------------- */

#ifdef CORIO_FAULTS
/* An echo on the fallback under one spec: each kind named must have been
 * injected (the path was reached); exact: no error and every byte back. */
struct emu_case {
	char *spec;
	bool borrow, exact;
	enum corio__fault_kind kinds[2];
	unsigned nkinds;
};

static int emu_stream_child(void *arg)
{
	struct emu_case *c = arg;
	int ret;

	child_backend = CORIO_BACKEND_EPOLL;
	st.borrow = c->borrow;
	ret = stream_child(c->spec);
	if (!ret && c->exact &&
	    (atomic_load(&st.errors) || atomic_load(&st.bytes_ok) != NCONN * CONN_BYTES))
		ret = 4;
	for (unsigned i = 0; i < c->nkinds && !ret; i++)
		if (!corio__fault_count(c->kinds[i]))
			ret = 9; /* the emulator's path was never reached */
	return ret;
}

#define EMU_CASE(name, spec_, borrow_, exact_, ...)                                       \
	Test(faults, name, .timeout = 120)                                                 \
	{                                                                                  \
		NEED_FAULTS();                                                             \
		static char spec[] = spec_;                                                \
		static struct emu_case c = { spec, borrow_, exact_, { __VA_ARGS__ },       \
					     sizeof((int[]){ __VA_ARGS__ }) / sizeof(int) }; \
		th_child_ok(emu_stream_child, &c, 60000, spec);                           \
	}
#else
#define EMU_CASE(name, spec_, borrow_, exact_, ...)                                       \
	Test(faults, name, .timeout = 120) { NEED_FAULTS(); }
#endif

/* EAGAIN storms: recv, send, accept and the wake-up read answer EAGAIN
 * though epoll said ready, 30% of the time: each op waits for the next
 * edge and completes then. */
EMU_CASE(emu_eagain_storm_every_byte, "seed=21,rate=0.3,kinds=eagain", true, true,
	 CORIO__FK_EAGAIN)
EMU_CASE(emu_eagain_storm_copying_every_byte, "seed=22,rate=0.5,kinds=eagain", false, true,
	 CORIO__FK_EAGAIN)
/* Short transfers from the syscall: the CQE says how many bytes moved, as
 * io_uring's does (no MSG_WAITALL), and corio sends the rest. */
EMU_CASE(emu_short_transfers_every_byte, "seed=23,rate=0.3,kinds=short", true, true,
	 CORIO__FK_SHORT)
/* EPOLLERR|EPOLLHUP on edges of files that have neither. */
EMU_CASE(emu_err_hup_edges_every_byte, "seed=24,rate=0.2,kinds=hup", true, true, CORIO__FK_HUP)
/* Every transparent kind at once on the fallback (the emulator's EAGAIN
 * storms among them): no call may see an error, accept included. */
EMU_CASE(emu_transparent_every_byte, "seed=1,rate=0.05,kinds=transparent", false, true,
	 CORIO__FK_EAGAIN, CORIO__FK_SQFULL)
/* Resets and broken pipes from the syscalls: prefixes only, errors seen. */
EMU_CASE(emu_reset_pipe_prefix_only, "seed=25,rate=0.05,kinds=reset+pipe+short+eagain", false,
	 false, CORIO__FK_RESET, CORIO__FK_PIPE)

#ifdef CORIO_FAULTS
/* ---- a reset in the middle of a send: *sent is exactly what the peer got ------------------ */

#define MID_BYTES (256 * 1024)

static struct {
	int fd;
	size_t got;
	uint8_t *in;
	int midsend;
} mid;

static void *mid_reader(void *arg)
{
	ssize_t n;

	(void)arg;
	mid.got = 0;
	while (mid.got < MID_BYTES && (n = read(mid.fd, mid.in + mid.got, MID_BYTES - mid.got)) > 0)
		mid.got += (size_t)n;
	return NULL;
}

static void mid_entry(void *arg)
{
	static uint8_t out[MID_BYTES];

	(void)arg;
	for (size_t i = 0; i < MID_BYTES; i++)
		out[i] = pat(i, 3);
	for (int round = 0; round < 300 && mid.midsend < 3; round++) {
		struct corio_sock *s;
		pthread_t t;
		size_t sent = 0;
		ssize_t r;
		int sv[2];

		CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
		CHECK(corio_sock_from_fd(sv[0], &s) == 0);
		mid.fd = sv[1];
		CHECK(pthread_create(&t, NULL, mid_reader, NULL) == 0);
		r = corio_send_ex(s, out, MID_BYTES, 0, &sent);
		CHECK(r == MID_BYTES || r == -EPIPE || r == -ECONNRESET);
		if (r < 0 && sent > 0)
			mid.midsend++; /* some bytes went, then the error */
		CHECK(corio_close(s) == 0); /* the reader sees the end */
		pthread_join(t, NULL);
		close(sv[1]);
		CHECK(mid.got == (r < 0 ? sent : MID_BYTES));
		CHECK(memcmp(mid.in, out, mid.got) == 0);
	}
}

static int mid_child(void *arg)
{
	int ret;

	setenv("CORIO_FAULTS", arg, 1);
	child_backend = CORIO_BACKEND_EPOLL;
	mid.in = malloc(MID_BYTES);
	ret = child_run(1, mid_entry, NULL);
	fprintf(stderr, "  %s: %d sends failed mid-way\n", (char *)arg, mid.midsend);
	if (!ret && (mid.midsend < 1 || !corio__fault_count(CORIO__FK_SHORT)))
		ret = 10;
	free(mid.in);
	return ret;
}
#endif

/* A send that fails after part of it went (EPIPE or ECONNRESET from the
 * syscall after short writes): corio_send_ex returns the error and *sent
 * the bytes that went, and the peer got exactly those. */
Test(faults, emu_reset_mid_send_reports_what_went, .timeout = 120)
{
	NEED_FAULTS();
#ifdef CORIO_FAULTS
	static char spec[] = "seed=26,rate=0.1,kinds=short+pipe+reset";

	th_child_ok(mid_child, spec, 60000, spec);
#endif
}
