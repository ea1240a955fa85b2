/* SPDX-License-Identifier: MIT */
/*
 * Networking, listeners and accepting: a thousand connections across two
 * shards under each accept model (SO_REUSEPORT, dispatch round-robin and
 * least-loaded), least-loaded dispatch of short connections, accept under
 * EMFILE and transient errors, Unix listeners and their socket files,
 * max_conns, listen-all (one port, a listener on every shard), corio_drain,
 * and bursts of 5,000 connections on small and default buffer rings.
 */
#include "net_helpers.h"

/* ---- 1k concurrent connections across 2 shards ------------------------------------ */

#define NCONN 1000
#define NSHARDS 2

static struct {
	_Atomic int port;
	_Atomic int done;      /* clients finished */
	_Atomic int served[NSHARDS];
	int model;             /* 0: SO_REUSEPORT, 1/2: accept + dispatch RR/LL */
} many;

static int many_handler(struct corio_sock *s, void *arg)
{
	(void)arg;
	atomic_fetch_add(&many.served[corio_shard_id()], 1);
	return echo_conn(s, 2);
}

static int many_handler_fiber(void *arg)
{
	return many_handler(arg, NULL);
}

static int many_acceptor(void *arg)
{
	struct corio_listener *l = arg;
	struct corio_spawn_opts so = { .stack_size = 64 * 1024 };

	if (many.model == 1)
		return corio_accept_dispatch(l, CORIO_DISPATCH_ROUND_ROBIN, many_handler, NULL);
	if (many.model == 2)
		return corio_accept_dispatch(l, CORIO_DISPATCH_LEAST_LOADED, many_handler, NULL);
	for (;;) {
		struct corio_sock *s;
		int ret = corio_accept(l, &s);

		if (ret)
			return ret;
		CHECK_EQ(corio_spawn(many_handler_fiber, s, &so, NULL), 0);
	}
}

static int many_client(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	char where[32];
	uint8_t out[64], in[64];
	struct corio_sock *c;

	snprintf(where, sizeof(where), "127.0.0.1:%d", atomic_load(&many.port));
	CHECK_EQ(corio_tcp_connect(where, &c), 0);
	if (c) {
		fill(out, sizeof(out), id);
		CHECK_EQ(corio_send(c, out, sizeof(out)), sizeof(out));
		CHECK_EQ(recv_all(c, in, sizeof(in)), sizeof(in));
		CHECK(memcmp(in, out, sizeof(in)) == 0);
		CHECK_EQ(corio_close(c), 0);
	}
	atomic_fetch_add(&many.done, 1);
	return 0;
}

static void many_entry(void *arg)
{
	struct corio_listen_opts o = { .flags = CORIO_LISTEN_REUSEPORT, .backlog = 4096 };
	struct corio_spawn_opts so = { .stack_size = 64 * 1024 };
	struct corio_listener *l = NULL;
	struct corio_fiber *acc = NULL;
	struct corio_net_stats st;
	unsigned me = corio_shard_id();

	(void)arg;
	if (me == 0) {
		char where[64];

		CHECK_EQ(corio_tcp_listen("127.0.0.1:0", &o, &l), 0);
		addr_of(l, where, sizeof(where));
		atomic_store(&many.port, atoi(strrchr(where, ':') + 1));
	} else {
		while (!atomic_load(&many.port))
			corio_yield();
		if (many.model == 0) {
			char where[64];

			snprintf(where, sizeof(where), "127.0.0.1:%d", atomic_load(&many.port));
			CHECK_EQ(corio_tcp_listen(where, &o, &l), 0);
		}
	}
	if (l)
		CHECK_EQ(corio_spawn(many_acceptor, l, NULL, &acc), 0);
	for (unsigned i = me; i < NCONN; i += NSHARDS)
		CHECK_EQ(corio_spawn(many_client, (void *)(uintptr_t)i, &so, NULL), 0);
	while (atomic_load(&many.done) < NCONN)
		CHECK_EQ(corio_sleep_ns(1000000), 0);
	if (acc) {
		int status = 0;

		corio_cancel(acc);
		CHECK_EQ(corio_join(acc, &status), 0);
		CHECK_EQ(status, -ECANCELED);
		CHECK_EQ(corio_listener_close(l), 0);
	}
	/* wait for this shard's handlers to see EOF and close */
	do {
		CHECK_EQ(corio_net_stats_get(NULL, me, &st), 0);
		if (st.conns_live)
			CHECK_EQ(corio_sleep_ns(1000000), 0);
	} while (st.conns_live);
}

static void run_many(int model)
{
	struct corio_config cfg = th_cfg(NSHARDS);
	struct rlimit rl;

	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 2 * NCONN + 100)
		cr_skip_test("RLIMIT_NOFILE hard limit %lu is below %d", (unsigned long)rl.rlim_max,
			     2 * NCONN + 100);
	if (rl.rlim_cur < 2 * NCONN + 100) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? 4 * NCONN : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	many.model = model;
	th_run(&cfg, many_entry, NULL);
	cr_assert_eq(atomic_load(&many.done), NCONN);
	cr_assert_eq(atomic_load(&many.served[0]) + atomic_load(&many.served[1]), NCONN);
	if (model) /* dispatch reaches both shards */
		cr_assert(atomic_load(&many.served[0]) > 0 && atomic_load(&many.served[1]) > 0,
			  "served %d / %d", atomic_load(&many.served[0]),
			  atomic_load(&many.served[1]));
}

Test(net, conns_1k_two_shards_reuseport, .timeout = 60) { run_many(0); }
Test(net, conns_1k_two_shards_dispatch_rr, .timeout = 60) { run_many(1); }
Test(net, conns_1k_two_shards_dispatch_ll, .timeout = 60) { run_many(2); }

/* ---- least-loaded dispatch and short connections ---------------------------------- */

/* 2 shards, shard 0 accepts and dispatches least-loaded. One client thread
 * runs rounds of two short connections: connect c1 and echo a byte; connect
 * c2 and echo; shut both down and wait until the server closed them. So at
 * most 2 are live, and at each hand-off the loads are known: c1 meets two
 * idle shards, c2 meets c1's shard holding one. Least-loaded must send c2
 * to the other shard, so each shard serves one connection per round.
 * It used to count a hand-off as in flight until the target's live count
 * looked different at a later accept, and a connection that opens and
 * closes between two accepts is never seen: that shard's count stays up
 * for ever. Here c2's shard never saw its connections, and from the third
 * round on it got none (998 to 2); with free-running clients it was the
 * dispatching shard (27-472 against 3,700-27,000), whose own handlers run
 * only while it waits to accept.
 * The bound: each shard serves at least a quarter. The fix counts exactly
 * the connections handed to a shard and not closed (shard 0's own counts
 * are read on its own thread; shard 1's were stored before its echo, which
 * the client waited for, and its close before the end of stream), so every
 * round splits 1:1; only a counter read a whole round stale could move one
 * connection. */
#define SC_ROUNDS 500

static _Atomic int sc_port, sc_served[2];

static int sc_handler(struct corio_sock *s, void *arg)
{
	char c, me = (char)('0' + corio_shard_id());
	ssize_t r;

	(void)arg;
	atomic_fetch_add(&sc_served[corio_shard_id()], 1);
	while ((r = corio_recv(s, &c, 1)) == 1)
		CHECK_EQ(corio_send(s, &me, 1), 1);
	CHECK_EQ(r, 0);
	CHECK_EQ(corio_close(s), 0);
	return 0;
}

static void sc_entry(void *arg)
{
	struct corio_listener *l;
	char where[64];

	(void)arg;
	if (corio_shard_id() != 0)
		return;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	atomic_store(&sc_port, atoi(strrchr(where, ':') + 1));
	CHECK_EQ(corio_accept_dispatch(l, CORIO_DISPATCH_LEAST_LOADED, sc_handler, NULL),
		 -ECANCELED);
	CHECK_EQ(corio_listener_close(l), 0);
}

/* Connect and echo one byte: the fd, and in *shard the serving shard's
 * digit; -1 on any error. */
static int sc_open(char *shard)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)atomic_load(&sc_port)) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) || write(fd, "x", 1) != 1 ||
	    read(fd, shard, 1) != 1) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Half-close and wait until the server has closed its end (end of stream). */
static bool sc_close(int fd)
{
	char c;
	bool ok = shutdown(fd, SHUT_WR) == 0 && read(fd, &c, 1) == 0;

	close(fd);
	return ok;
}

Test(net, dispatch_ll_short_connections_fair_share, .timeout = 60)
{
	struct corio_config cfg = th_cfg(2);
	struct corio_rt *rt;
	int before = th_fd_count(), errors = 0, same = 0, s0, s1, ret;

	cr_assert_eq(corio_start(&cfg, sc_entry, NULL, &rt), 0, "%s", corio_last_error());
	while (!atomic_load(&sc_port))
		sched_yield();
	for (int i = 0; i < SC_ROUNDS; i++) {
		char a = 0, b = 0;
		int c1 = sc_open(&a), c2 = c1 < 0 ? -1 : sc_open(&b);

		errors += c1 < 0 || c2 < 0;
		same += a == b;
		if (c1 >= 0)
			errors += !sc_close(c1);
		if (c2 >= 0)
			errors += !sc_close(c2);
	}
	corio_stop(rt);
	ret = corio_wait(rt);
	cr_assert_eq(ret, 0, "corio_wait: %s (%s)", strerror(-ret), corio_last_error());
	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
	cr_assert_eq(th_fd_count(), before, "the runtime left file descriptors open");
	cr_assert_eq(errors, 0);
	s0 = atomic_load(&sc_served[0]);
	s1 = atomic_load(&sc_served[1]);
	cr_assert_eq(s0 + s1, 2 * SC_ROUNDS);
	cr_assert(s0 >= SC_ROUNDS / 2 && s1 >= SC_ROUNDS / 2,
		  "least-loaded starved a shard: shard 0 served %d, shard 1 %d (%d rounds "
		  "of 2 on one shard)", s0, s1, same);
	/* and c2 went to the shard not holding c1 (the same reasoning) */
	cr_assert(same <= SC_ROUNDS / 4, "%d of %d rounds put c2 beside c1", same, SC_ROUNDS);
}

/* ---- accept under EMFILE --------------------------------------------------------- */

static struct corio_sock *emfile_acc[8];
static _Atomic int emfile_naccepted;

static int emfile_acceptor(void *arg)
{
	for (;;) {
		struct corio_sock *s;
		int ret = corio_accept(arg, &s);

		if (ret)
			return ret;
		emfile_acc[atomic_fetch_add(&emfile_naccepted, 1)] = s;
	}
}

static int emfile_fail;
#define ECHECK(c)                                                                     \
	do {                                                                          \
		if (!(c) && !emfile_fail) {                                           \
			fprintf(stderr, "emfile child: %s:%d: %s\n", __FILE__, __LINE__, #c); \
			emfile_fail = 1;                                              \
		}                                                                     \
	} while (0)

static void wait_accepted(int n)
{
	while (atomic_load(&emfile_naccepted) < n)
		corio_sleep_ns(1000000);
}

static void emfile_entry(void *arg)
{
	struct corio_listener *l;
	struct corio_fiber *acc;
	struct corio_sock *c[4];
	struct corio_net_stats st;
	struct rlimit rl;
	char where[64], buf[4];
	int used;

	(void)arg;
	ECHECK(corio_tcp_listen("127.0.0.1:0", NULL, &l) == 0);
	addr_of(l, where, sizeof(where));
	/* four clients connect (the kernel completes them from the backlog) */
	for (int i = 0; i < 4; i++)
		ECHECK(corio_tcp_connect(where, &c[i]) == 0);
	/* room for two accepted sockets only */
	used = th_fd_count() - 1; /* minus the /proc/self/fd dir handle */
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = (rlim_t)used + 2;
	ECHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	ECHECK(corio_spawn(emfile_acceptor, l, NULL, &acc) == 0);
	wait_accepted(2);
	do {
		ECHECK(corio_net_stats_get(NULL, 0, &st) == 0);
		if (!st.err_fd_limit)
			corio_sleep_ns(1000000);
	} while (!st.err_fd_limit);
	ECHECK(atomic_load(&emfile_naccepted) == 2);
	/* free fds: the listener must serve the other two */
	ECHECK(corio_close(emfile_acc[0]) == 0);
	ECHECK(corio_close(emfile_acc[1]) == 0);
	wait_accepted(4);
	for (int i = 2; i < 4; i++) {
		ECHECK(corio_send(emfile_acc[i], "ok!", 3) == 3);
	}
	for (int i = 2; i < 4; i++) {
		/* accepted in order of connect: c[2], c[3] */
		ECHECK(recv_all(c[i], (uint8_t *)buf, 3) == 3);
		ECHECK(memcmp(buf, "ok!", 3) == 0);
	}
	corio_cancel(acc);
	corio_join(acc, NULL);
	for (int i = 2; i < 4; i++)
		corio_close(emfile_acc[i]);
	for (int i = 0; i < 4; i++)
		corio_close(c[i]);
	corio_listener_close(l);
}

Test(net, accept_backs_off_under_emfile, .timeout = 30)
{
	pid_t pid;
	int status;

#if defined(__SANITIZE_THREAD__)
	/* TSan's runtime opens and closes descriptors of its own, so the
	 * "exactly two free fds" arithmetic does not hold under it. */
	cr_skip_test("fd-limit arithmetic does not hold under TSan's own fds");
#endif
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		struct corio_config cfg = th_cfg(1);
		int ret = corio_run(&cfg, emfile_entry, NULL);

		_exit(ret || emfile_fail ? 1 : 0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status 0x%x)",
		  status);
}

/*
 * CORIO_LISTEN_UNLINK removes only a stale socket file (one that refuses
 * connections): a regular file is kept (-EEXIST), a live server's socket is
 * kept (-EADDRINUSE) and goes on serving.
 */
static void unix_unlink_entry(void *arg)
{
	char dir[] = "/tmp/corio-net-XXXXXX", file[64], live[64], stale[64];
	struct corio_listen_opts o = { .flags = CORIO_LISTEN_UNLINK };
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct corio_listener *l = NULL, *l2 = NULL;
	struct corio_sock *c, *s;
	struct stat st, st2;
	char buf[8];
	int fd;

	(void)arg;
	CHECK(mkdtemp(dir) != NULL);
	snprintf(file, sizeof(file), "%s/file", dir);
	snprintf(live, sizeof(live), "%s/live.sock", dir);
	snprintf(stale, sizeof(stale), "%s/stale.sock", dir);

	/* a regular file */
	fd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, "keep", 4), 4);
	close(fd);
	CHECK_EQ(corio_unix_listen(file, &o, &l), -EEXIST);
	CHECK(l == NULL);
	CHECK(stat(file, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 4);
	unlink(file);

	/* a live listener's socket */
	CHECK_EQ(corio_unix_listen(live, NULL, &l), 0);
	CHECK_EQ(stat(live, &st), 0);
	CHECK_EQ(corio_unix_listen(live, &o, &l2), -EADDRINUSE);
	CHECK(l2 == NULL);
	CHECK(stat(live, &st2) == 0 && st2.st_ino == st.st_ino);
	if (l2)
		corio_listener_close(l2);
	CHECK_EQ(corio_unix_connect(live, &c), 0);
	if (c) {
		/* accepted in order: the check's probe (if any) first, then c */
		CHECK_EQ(corio_send(c, "hi", 2), 2);
		CHECK_EQ(corio_shutdown_write(c), 0);
		for (int i = 0; i < 2; i++) {
			CHECK_EQ(corio_accept(l, &s), 0);
			if (!s)
				break;
			if (corio_recv(s, buf, sizeof(buf)) == 2) {
				CHECK_EQ(corio_close(s), 0);
				break;
			}
			CHECK(i == 0);
			CHECK_EQ(corio_close(s), 0);
		}
		CHECK_EQ(corio_close(c), 0);
	}
	CHECK_EQ(corio_listener_close(l), 0);

	/* a stale socket file: what a crashed server leaves */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", stale);
	CHECK_EQ(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	close(fd);
	CHECK_EQ(corio_unix_listen(stale, NULL, &l), -EADDRINUSE); /* without the flag */
	CHECK_EQ(corio_unix_listen(stale, &o, &l), 0);
	CHECK_EQ(corio_unix_connect(stale, &c), 0);
	CHECK_EQ(corio_accept(l, &s), 0);
	if (c && s) {
		CHECK_EQ(corio_send(c, "ok", 2), 2);
		CHECK_EQ(recv_all(s, (uint8_t *)buf, 2), 2);
		CHECK_EQ(corio_close(s), 0);
		CHECK_EQ(corio_close(c), 0);
	}
	CHECK_EQ(corio_listener_close(l), 0);
	rmdir(dir);
}

Test(net, unix_listen_unlink_only_stale, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, unix_unlink_entry, NULL);
}

/*
 * A transient accept error (a connection that died before accept returned
 * it) costs that connection only: the listener goes on accepting. A fatal
 * one (EINVAL, EBADF: the listening socket itself is broken) ends it.
 * CORIO_NET_ACCEPT_FAULT=errno:count turns the next count accepted
 * connections into that error (test hook).
 */
static void accept_fault_entry(void *arg)
{
	int err = *(int *)arg;
	bool fatal = err == EINVAL || err == EBADF;
	struct corio_listener *l;
	struct corio_sock *c1, *c2, *s = NULL;
	struct corio_deadline d;
	struct corio_net_stats st;
	char where[64], buf[8];
	int ret;

	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	addr_of(l, where, sizeof(where));
	CHECK_EQ(corio_tcp_connect(where, &c1), 0); /* its accept fails */
	CHECK_EQ(corio_tcp_connect(where, &c2), 0);
	corio_timeout_push(&d, 2000 * MS); /* bounds every wait below */
	ret = corio_accept(l, &s);
	if (fatal) {
		/* a connection the kernel accepted already may come first */
		if (ret == 0) {
			corio_close(s);
			s = NULL;
			ret = corio_accept(l, &s);
		}
		CHECK_EQ(ret, -err);
		CHECK_EQ(corio_accept(l, &s), -err); /* sticky */
	} else {
		CHECK_EQ(ret, 0);
	}
	if (s) { /* c2's connection: c1's was closed */
		CHECK_EQ(corio_send(c2, "ok", 2), 2);
		CHECK_EQ(recv_all(s, (uint8_t *)buf, 2), 2);
		CHECK(!memcmp(buf, "ok", 2));
		CHECK_EQ(corio_close(s), 0);
	}
	if (c1) {
		ssize_t r = corio_recv(c1, buf, sizeof(buf));

		CHECK(r == 0 || r == -ECONNRESET);
	}
	corio_deadline_pop(&d);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK(st.err_other >= 1); /* counted */
	corio_close(c1);
	corio_close(c2);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, accept_transient_error_keeps_listening, .timeout = 60)
{
	static const int errs[] = { EPROTO, ENETDOWN, EPERM, ECONNABORTED, EHOSTUNREACH,
				    EINVAL };
	struct corio_config cfg = th_cfg(1);

	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		int err = errs[i];
		char v[32];

		snprintf(v, sizeof(v), "%d:1", err);
		setenv("CORIO_NET_ACCEPT_FAULT", v, 1);
		th_run(&cfg, accept_fault_entry, &err);
		/* the single-shot accept fallback too */
		setenv("CORIO_NET_DISABLE", "multishot", 1);
		th_run(&cfg, accept_fault_entry, &err);
		unsetenv("CORIO_NET_DISABLE");
	}
	unsetenv("CORIO_NET_ACCEPT_FAULT");
}

/* Closing a Unix listener removes its socket file only if the file is still
 * its own: a server that took the path over after it was removed keeps it. */
static void unix_close_keeps_other_entry(void *arg)
{
	char dir[] = "/tmp/corio-net-XXXXXX", path[64];
	struct corio_listener *a, *b;
	struct corio_sock *c;
	struct stat st;

	(void)arg;
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	CHECK_EQ(corio_unix_listen(path, NULL, &a), 0);
	CHECK_EQ(unlink(path), 0); /* an operator removes it ... */
	CHECK_EQ(corio_unix_listen(path, NULL, &b), 0); /* ... a new server binds */
	CHECK_EQ(corio_listener_close(a), 0);
	CHECK(lstat(path, &st) == 0 && S_ISSOCK(st.st_mode));
	CHECK_EQ(corio_unix_connect(path, &c), 0);
	if (c)
		CHECK_EQ(corio_close(c), 0);
	CHECK_EQ(corio_listener_close(b), 0);
	CHECK(lstat(path, &st) < 0); /* b's own file: removed */
	rmdir(dir);
}

Test(net, unix_listener_close_keeps_a_file_not_its_own, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, unix_close_keeps_other_entry, NULL);
}

/* ==== listener limits: max_conns ========================================= */

struct maxc {
	_Atomic int port;
	int got_hi, got_closed;
};

static void *maxc_client(void *arg)
{
	struct maxc *m = arg;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct timeval tv = { .tv_sec = 10 };
	int fds[5];

	while (!atomic_load(&m->port))
		sched_yield();
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)atomic_load(&m->port));
	for (int i = 0; i < 5; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)))
			fds[i] = -1;
	}
	for (int i = 0; i < 5; i++) {
		char c[2];
		ssize_t r = fds[i] >= 0 ? recv(fds[i], c, 2, MSG_WAITALL) : -1;

		if (r == 2 && !memcmp(c, "hi", 2))
			m->got_hi++;
		else if (r == 0 || (r < 0 && errno == ECONNRESET))
			m->got_closed++;
		if (fds[i] >= 0)
			close(fds[i]);
	}
	return NULL;
}

static void maxc_entry(void *arg)
{
	struct maxc *m = arg;
	struct corio_listen_opts o = { .max_conns = 2 };
	struct corio_listener *l;
	struct corio_sock *held[2];
	struct corio_net_stats st;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	uint64_t until = corio_now_ns() + 10000000000ull;

	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", &o, &l), 0);
	CHECK_EQ(corio_listener_addr(l, &ss, &sl), 0);
	atomic_store(&m->port, corio_addr_port((struct sockaddr *)&ss));
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(corio_accept(l, &held[i]), 0);
		CHECK_EQ(corio_send(held[i], "hi", 2), 2);
	}
	/* the other three are closed as they are taken: accept keeps waiting */
	do {
		struct corio_deadline d;
		struct corio_sock *s = NULL;

		corio_timeout_push(&d, 100000000ull);
		CHECK_EQ(corio_accept(l, &s), -ETIMEDOUT);
		corio_deadline_pop(&d);
		CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	} while (st.conns_refused < 3 && corio_now_ns() < until);
	CHECK_EQ(st.conns_refused, 3);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(corio_close(held[i]), 0);
	CHECK_EQ(corio_listener_close(l), 0);
}

Test(net, listener_max_conns_closes_the_excess, .timeout = 60)
{
	struct corio_config cfg = th_cfg(1);
	struct maxc m = { .port = 0 };
	pthread_t th;

	cr_assert_eq(pthread_create(&th, NULL, maxc_client, &m), 0);
	th_run(&cfg, maxc_entry, &m);
	pthread_join(th, NULL);
	cr_assert_eq(m.got_hi, 2, "%d connections were served, 2 expected", m.got_hi);
	cr_assert_eq(m.got_closed, 3, "%d connections were closed, 3 expected", m.got_closed);
}

/* ---- listen-all: one port, a listener on every shard ------------------- */

#define LS_SHARDS 2
#define LS_CLIENTS 32
static struct {
	struct corio_listener *l[LS_SHARDS];
	char where[LS_SHARDS][64];
	_Atomic int accepted[LS_SHARDS];
} ls_;

static int ls_setup(void *arg)
{
	unsigned me = corio_shard_id();
	int ret = corio_tcp_listen_shared("127.0.0.1:0", NULL, &ls_.l[me]);

	if (ret)
		return ret;
	addr_of(ls_.l[me], ls_.where[me], sizeof(ls_.where[me]));
	return 0;
}

static int ls_acceptor(void *arg)
{
	unsigned me = corio_shard_id();
	struct corio_sock *c;
	uint8_t b;

	while (corio_accept(ls_.l[me], &c) == 0) {
		atomic_fetch_add(&ls_.accepted[me], 1);
		if (corio_recv(c, &b, 1) == 1)
			CHECK_EQ(corio_send(c, &b, 1), 1);
		corio_close(c);
	}
	return 0;
}

static int ls_close(void *arg)
{
	CHECK_EQ(corio_listener_close(ls_.l[corio_shard_id()]), 0);
	return 0;
}

static void ls_entry(void *arg)
{
	CHECK_EQ(corio_spawn(ls_acceptor, NULL, NULL, NULL), 0);
	if (corio_shard_id() != 0)
		return;
	/* one port for all, resolved once from :0 */
	CHECK(strcmp(ls_.where[0], ls_.where[1]) == 0);
	CHECK(strcmp(ls_.where[0], "127.0.0.1:0") != 0);
	for (int i = 0; i < LS_CLIENTS; i++) {
		struct corio_sock *c;
		uint8_t b = (uint8_t)i, back = 0;

		CHECK_EQ(corio_tcp_connect(ls_.where[0], &c), 0);
		CHECK_EQ(corio_send(c, &b, 1), 1);
		CHECK_EQ(corio_recv(c, &back, 1), 1);
		CHECK_EQ(back, b);
		corio_close(c);
	}
	for (unsigned i = 0; i < LS_SHARDS; i++)
		CHECK_EQ(corio_spawn_on(i, ls_close, NULL), 0);
}

Test(net, listen_shared_gives_every_shard_a_listener_on_one_port, .timeout = 30)
{
	struct corio_config cfg = th_cfg(LS_SHARDS);

	memset(&ls_, 0, sizeof(ls_));
	cfg.setup = ls_setup;
	th_run(&cfg, ls_entry, NULL);
	cr_assert_eq(atomic_load(&ls_.accepted[0]) + atomic_load(&ls_.accepted[1]), LS_CLIENTS);
	/* SO_REUSEPORT spreads by a hash of the 4-tuple: 32 clients all on one
	 * shard would happen once in 2^31 runs */
	cr_assert(atomic_load(&ls_.accepted[0]) > 0 && atomic_load(&ls_.accepted[1]) > 0,
		  "accepted %d and %d", atomic_load(&ls_.accepted[0]), atomic_load(&ls_.accepted[1]));
}

static void ls_bad_entry(void *arg)
{
	struct corio_listener *l[17];
	char hp[32];
	int i;

	CHECK_EQ(corio_tcp_listen_shared("127.0.0.1:0", NULL, NULL), -EINVAL);
	CHECK(strstr(corio_last_error(), "corio_tcp_listen_shared") != NULL);
	CHECK_EQ(corio_tcp_listen_shared(NULL, NULL, &l[0]), -EINVAL);
	/* a failure is not remembered (else the 16 below would not fit) */
	CHECK_EQ(corio_tcp_listen_shared("nohost", NULL, &l[0]), -EINVAL);
	CHECK(l[0] == NULL);
	for (i = 0; i < 16; i++) {
		snprintf(hp, sizeof(hp), "127.0.0.%d:0", i + 1);
		CHECK_EQ(corio_tcp_listen_shared(hp, NULL, &l[i]), 0);
	}
	CHECK_EQ(corio_tcp_listen_shared("127.0.0.100:0", NULL, &l[16]), -ENOSPC);
	CHECK(strstr(corio_last_error(), "per runtime") != NULL);
	/* a string seen before still works when the table is full */
	CHECK_EQ(corio_tcp_listen_shared("127.0.0.1:0", NULL, &l[16]), 0);
	CHECK_EQ(corio_listener_close(l[16]), 0);
	for (i = 0; i < 16; i++)
		CHECK_EQ(corio_listener_close(l[i]), 0);
}

Test(net, listen_shared_bad_input_and_its_bound, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, ls_bad_entry, NULL);
}

/* ---- corio_drain: stop accepting, let the work under way finish --------- */

#define DR_SHARDS 2
#define DR_CLIENTS 4
static struct {
	struct corio_listener *l[DR_SHARDS];
	char where[64];
	_Atomic int accepted, answered;
	int accept_end[DR_SHARDS];
	int refused;
} dr_;

static int dr_setup(void *arg)
{
	unsigned me = corio_shard_id();
	int ret = corio_tcp_listen_shared("127.0.0.1:0", NULL, &dr_.l[me]);

	if (!ret && me == 0)
		addr_of(dr_.l[0], dr_.where, sizeof(dr_.where));
	return ret;
}

static int dr_handler(void *arg)
{
	struct corio_sock *c = arg;
	uint8_t b;

	if (corio_recv(c, &b, 1) == 1) {
		/* the request is in; the drain begins while we hold it */
		CHECK_EQ(corio_event_wait(corio_drain_event()), 0);
		CHECK_EQ(corio_draining(), 1);
		if (corio_send(c, &b, 1) == 1)
			atomic_fetch_add(&dr_.answered, 1);
	}
	corio_close(c);
	return 0;
}

static int dr_acceptor(void *arg)
{
	unsigned me = corio_shard_id();
	struct corio_sock *c;
	int ret;

	while ((ret = corio_accept(dr_.l[me], &c)) == 0) {
		atomic_fetch_add(&dr_.accepted, 1);
		CHECK_EQ(corio_spawn(dr_handler, c, NULL, NULL), 0);
	}
	dr_.accept_end[me] = ret;
	CHECK_EQ(corio_listener_close(dr_.l[me]), 0);
	return 0;
}

static intptr_t dr_is_draining(void *arg)
{
	(void)arg;
	return corio_draining();
}

static void dr_entry(void *arg)
{
	struct corio_sock *c[DR_CLIENTS], *late;

	CHECK_EQ(corio_spawn(dr_acceptor, NULL, NULL, NULL), 0);
	if (corio_shard_id() != 0)
		return;
	for (int i = 0; i < DR_CLIENTS; i++) {
		uint8_t b = (uint8_t)i;

		CHECK_EQ(corio_tcp_connect(dr_.where, &c[i]), 0);
		CHECK_EQ(corio_send(c[i], &b, 1), 1);
	}
	for (int i = 0; i < 5000 && atomic_load(&dr_.accepted) < DR_CLIENTS; i++)
		corio_sleep_ns(1000 * 1000); /* polls a condition, bounded */
	CHECK_EQ(atomic_load(&dr_.accepted), DR_CLIENTS);
	CHECK_EQ(corio_draining(), 0);
	/* a deadline far beyond the test's timeout: the runtime must end by
	 * itself, once the work under way is done */
	CHECK_EQ(corio_drain(3600ull * 1000 * 1000 * 1000), 0);
	CHECK_EQ(corio_drain(1), 0); /* the first drain's deadline holds */
	for (int i = 0; i < DR_CLIENTS; i++) {
		uint8_t b = 0xff;

		CHECK_EQ(corio_recv(c[i], &b, 1), 1);
		CHECK_EQ(b, (uint8_t)i);
		corio_close(c[i]);
	}
	/* new connections are refused once every shard has stopped accepting:
	 * a call behind the drain's message on the same ring sees it done */
	for (unsigned i = 0; i < DR_SHARDS; i++) {
		intptr_t draining = 0;

		CHECK_EQ(corio_call(i, dr_is_draining, NULL, &draining), 0);
		CHECK_EQ(draining, 1);
	}
	dr_.refused = corio_tcp_connect(dr_.where, &late);
	if (dr_.refused == 0)
		corio_close(late);
}

Test(net, drain_stops_accepting_and_lets_the_work_under_way_finish, .timeout = 30)
{
	struct corio_config cfg = th_cfg(DR_SHARDS);

	memset(&dr_, 0, sizeof(dr_));
	cfg.setup = dr_setup;
	th_run(&cfg, dr_entry, NULL);
	cr_assert_eq(atomic_load(&dr_.answered), DR_CLIENTS);
	for (int i = 0; i < DR_SHARDS; i++)
		cr_assert_eq(dr_.accept_end[i], -ESHUTDOWN, "shard %d: %d", i, dr_.accept_end[i]);
	cr_assert_eq(dr_.refused, -ECONNREFUSED, "a connect after the drain: %d", dr_.refused);
}

static int dr_sleeper(void *arg)
{
	*(int *)arg = corio_sleep_ns(3600ull * 1000 * 1000 * 1000);
	return 0;
}

static void dr_deadline_entry(void *arg)
{
	CHECK_EQ(corio_spawn(dr_sleeper, arg, NULL, NULL), 0);
	CHECK(corio_drain_event() != NULL);
	CHECK_EQ(corio_drain(30 * 1000 * 1000), 0); /* then the sleeper is cancelled */
}

static int drain_off_shard(void)
{
	return corio_drain(1);
}

Test(net, drain_deadline_cancels_what_is_left, .timeout = 30)
{
	struct corio_config cfg = th_cfg(1);
	int slept = 1;

	th_run(&cfg, dr_deadline_entry, &slept);
	cr_assert_eq(slept, -ECANCELED);
	cr_assert_null(corio_drain_event());
	cr_assert_eq(corio_draining(), 0);
	/* off a shard: -EPERM naming the call (debug builds abort saying so) */
	th_misuse_ex(drain_off_shard, "corio_drain", -EPERM);
}

/*
 * A burst: BU_CONNS connections to one shard each send BU_MSG bytes at once
 * to an echo fiber (corio_recv_buf + corio_send_buf) while the ring holds
 * far fewer buffers than there are senders. The ring runs dry and most
 * receives stop with ENOBUFS; every one of them must be armed again as
 * buffers return, so every connection gets its bytes back (issue 31: at
 * 5,000 connections on 64 buffers, up to half of them waited for good).
 * The client is a plain thread with epoll, outside the runtime.
 */
#ifdef CORIO_TEST_SHIM
/* TSan runs every access ~10x slower and gives each fiber a shadow
 * context: 1,000 connections still run a 64-buffer ring dry many times */
#define BU_CONNS 1000
#else
#define BU_CONNS 5000
#endif
#define BU_MSG   3000

static struct {
	_Atomic int port;
	_Atomic int done;    /* the client has finished (echoed or gave up) */
	_Atomic int echoed;  /* connections whose bytes all came back, intact */
	_Atomic int waiting; /* connections still short when the client gave up */
	bool small; /* the 64-buffer ring: it must run dry */
} bu;

static int bu_echo(void *arg)
{
	struct corio_sock *s = arg;
	struct corio_buf b;
	ssize_t r;

	while ((r = corio_recv_buf(s, &b)) > 0)
		if (corio_send_buf(s, &b) < 0)
			break;
	CHECK_EQ(corio_close(s), 0);
	return 0;
}

static int bu_acceptor(void *arg)
{
	struct corio_spawn_opts so = { .stack_size = 32 * 1024 };
	struct corio_listener *l = arg;
	struct corio_sock *s;

	while (corio_accept(l, &s) == 0)
		CHECK_EQ(corio_spawn(bu_echo, s, &so, NULL), 0);
	return 0;
}

static void *bu_client(void *arg)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static int fd[BU_CONNS], got[BU_CONNS];
	static uint8_t in[BU_MSG];
	uint8_t out[BU_MSG];
	int ep = epoll_create1(0), left = BU_CONNS;
	uint64_t until;
	struct timespec ts;

	(void)arg;
	a.sin_port = htons((uint16_t)atomic_load(&bu.port));
	fill(out, sizeof(out), 5);
	for (int i = 0; i < BU_CONNS; i++) {
		int one = 1;

		fd[i] = socket(AF_INET, SOCK_STREAM, 0);
		got[i] = 0;
		if (fd[i] < 0 || connect(fd[i], (struct sockaddr *)&a, sizeof(a)) < 0) {
			CHECK(!"bu_client: socket/connect failed");
			left = i;
			break;
		}
		setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	/* every connection sends its message at once */
	for (int i = 0; i < left; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };

		CHECK_EQ(send(fd[i], out, sizeof(out), 0), sizeof(out));
		CHECK_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd[i], &ev), 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	until = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + 30000;
	for (int n = left; n > 0;) {
		struct epoll_event evs[256];
		int k = epoll_wait(ep, evs, 256, 100);

		for (int j = 0; j < k; j++) {
			int i = (int)evs[j].data.u32;
			ssize_t r = recv(fd[i], in + got[i], sizeof(in) - (size_t)got[i], MSG_DONTWAIT);

			if (r <= 0) {
				CHECK(!"bu_client: connection ended before its echo");
				epoll_ctl(ep, EPOLL_CTL_DEL, fd[i], NULL);
				n--;
				continue;
			}
			/* the echo of [got, got + r) must match what was sent */
			if (memcmp(in + got[i], out + got[i], (size_t)r))
				CHECK(!"bu_client: echoed bytes differ");
			got[i] += (int)r;
			if (got[i] == BU_MSG) {
				atomic_fetch_add(&bu.echoed, 1);
				epoll_ctl(ep, EPOLL_CTL_DEL, fd[i], NULL);
				n--;
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 > until) {
			atomic_store(&bu.waiting, n);
			break;
		}
	}
	for (int i = 0; i < left; i++)
		close(fd[i]);
	close(ep);
	atomic_store(&bu.done, 1);
	return NULL;
}

static void bu_entry(void *arg)
{
	struct corio_listen_opts o = { .backlog = 4096 };
	struct corio_listener *l = NULL;
	struct corio_fiber *acc;
	struct corio_net_stats st;
	pthread_t t;
	char where[64];

	(void)arg;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", &o, &l), 0);
	addr_of(l, where, sizeof(where));
	atomic_store(&bu.port, atoi(strrchr(where, ':') + 1));
	CHECK_EQ(corio_spawn(bu_acceptor, l, NULL, &acc), 0);
	CHECK_EQ(pthread_create(&t, NULL, bu_client, NULL), 0);
	while (!atomic_load(&bu.done))
		corio_sleep_ns(10 * MS);
	pthread_join(t, NULL);
	CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(atomic_load(&bu.echoed), BU_CONNS);
	if (atomic_load(&bu.echoed) != BU_CONNS)
		fprintf(stderr, "burst of %d on %s: echoed %d, %d waiting; starved %llu, "
				"enobufs %llu, rearms %llu\n",
			BU_CONNS, getenv("CORIO_NET_BUFS"), atomic_load(&bu.echoed),
			atomic_load(&bu.waiting), (unsigned long long)st.starved,
			(unsigned long long)st.enobufs, (unsigned long long)st.rearms);
	/* the ring ran dry and starved receives were armed again (on the
	 * small ring always; the default ring runs dry only when receives
	 * outrun the echoes, which depends on timing: under TSan, where each
	 * new fiber costs milliseconds, the loop's slices reap between them
	 * and it may not) ... */
	CHECK(st.starved_armed > 0 || !bu.small);
	CHECK(st.starved_armed <= st.rearms);
	/* ... and none is left waiting once the buffers are back: a reader
	 * that re-armed after its echo while the ring was dry (nothing more
	 * to read) is armed again within a few turns */
	for (int i = 0; i < 5000 && (st.starved || st.bufs_out); i++) {
		corio_sleep_ns(MS);
		CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
	}
	CHECK_EQ(st.starved, 0);
	CHECK_EQ(st.bufs_out, 0);
#ifndef CORIO_FAULTS /* fault builds inject ENOBUFS completions on purpose */
	/* at most 4 re-arms per connection on average (round 3's storm: 32) */
	CHECK(st.rearms <= 4 * BU_CONNS);
#endif
	corio_cancel(acc);
	CHECK_EQ(corio_join(acc, NULL), 0);
	CHECK_EQ(corio_listener_close(l), 0);
	do {
		CHECK_EQ(corio_net_stats_get(NULL, 0, &st), 0);
		if (st.conns_live)
			corio_sleep_ns(MS);
	} while (st.conns_live);
}

static void run_burst(const char *bufs)
{
	struct corio_config cfg = th_cfg(1);
	struct rlimit rl;

	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < 2 * BU_CONNS + 100 && rl.rlim_max >= 2 * BU_CONNS + 100) {
		rl.rlim_cur = 2 * BU_CONNS + 100;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < 2 * BU_CONNS + 100)
		cr_skip_test("RLIMIT_NOFILE %lu is below %d", (unsigned long)rl.rlim_cur,
			     2 * BU_CONNS + 100);
	memset(&bu, 0, sizeof(bu));
	bu.small = !strncmp(bufs, "64:", 3);
	setenv("CORIO_NET_BUFS", bufs, 1);
	th_run(&cfg, bu_entry, NULL);
	unsetenv("CORIO_NET_BUFS");
}

Test(net, burst_of_5000_on_a_small_ring_serves_every_connection, .timeout = 120)
{
	run_burst("64:4096");
}

Test(net, burst_of_5000_on_the_default_ring_serves_every_connection, .timeout = 120)
{
	run_burst("512:4096");
}
