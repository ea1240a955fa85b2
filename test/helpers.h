/* SPDX-License-Identifier: MIT */
/*
 * test/helpers.h - shared by the Criterion tests.
 *
 * Criterion's assertions must run on the test's own thread, so code that runs
 * on shards records failures with CHECK() and the test asserts them after
 * the runtime has stopped (th_run()). th_run() also checks that the runtime
 * left no file descriptor behind.
 */
#ifndef CORIO_TEST_HELPERS_H
#define CORIO_TEST_HELPERS_H

#include <corio.h>
#ifdef CORIO_TEST_SHIM
#include "crit_shim.h" /* TSan builds: Criterion cannot run under TSan */
#else
#include <criterion/criterion.h>
#endif
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

static _Atomic int th_failures;
static char th_msg[512];

static inline void th_fail(const char *file, int line, const char *what)
{
	if (atomic_fetch_add(&th_failures, 1) == 0)
		snprintf(th_msg, sizeof(th_msg), "%s:%d: CHECK(%s) failed", file, line, what);
}

/* Record a failure without leaving the (shard) thread. */
#define CHECK(cond)                                          \
	do {                                                 \
		if (!(cond))                                 \
			th_fail(__FILE__, __LINE__, #cond);  \
	} while (0)
#define CHECK_EQ(a, b)                                                              \
	do {                                                                        \
		long long th_a = (long long)(a), th_b = (long long)(b);             \
		if (th_a != th_b) {                                                 \
			char th_buf[200];                                           \
			snprintf(th_buf, sizeof(th_buf), "%s == %s (%lld != %lld)", #a, #b, \
				 th_a, th_b);                                       \
			th_fail(__FILE__, __LINE__, th_buf);                        \
		}                                                                   \
	} while (0)

/* Entries in a /proc directory (its own handle included for /proc/self/fd). */
static inline int th_dir_count(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static inline int th_fd_count(void)
{
	return th_dir_count("/proc/self/fd");
}

/*
 * A test's config: shards shards, the stall detector off (stall_ns 0). On a
 * loaded machine a shard is preempted for tens of ms at any time, and the
 * reports it would print (corio: stall:, corio: off-cpu:) are noise between
 * the PASS lines of a test that tests something else; the stall detector's
 * own tests set stall_ns themselves and read the reports they expect.
 */
static inline struct corio_config th_cfg(unsigned shards)
{
	struct corio_config cfg;

	corio_config_init(&cfg);
	cfg.shards = shards;
	cfg.stall_ns = 0;
	return cfg;
}

/*
 * A test of an error path that logs (corio_set_log's lines): th_log_capture()
 * takes every runtime message into th_log_buf instead of stderr, so the test
 * asserts the line it expects (th_log_has) and make test prints nothing a
 * reader could take for a failure; th_log_release() gives stderr back.
 */
static char th_log_buf[4096];
static pthread_mutex_t th_log_lock = PTHREAD_MUTEX_INITIALIZER;
static inline void th_log_hook(void *arg, const char *line)
{
	size_t n;

	(void)arg;
	pthread_mutex_lock(&th_log_lock);
	n = strlen(th_log_buf);
	snprintf(th_log_buf + n, sizeof(th_log_buf) - n, "%s\n", line);
	pthread_mutex_unlock(&th_log_lock);
}
static inline void th_log_capture(void)
{
	th_log_buf[0] = '\0';
	corio_set_log(th_log_hook, NULL);
}
static inline void th_log_release(void)
{
	corio_set_log(NULL, NULL);
}
/* How many captured lines contain needle. */
static inline int th_log_has(const char *needle)
{
	int n = 0;

	pthread_mutex_lock(&th_log_lock);
	for (const char *p = th_log_buf; (p = strstr(p, needle)); p++)
		n++;
	pthread_mutex_unlock(&th_log_lock);
	return n;
}

/* Run a runtime to completion and check it returned 0, recorded no CHECK
 * failure and closed every fd it opened. */
static inline void th_run(const struct corio_config *cfg, void (*entry)(void *), void *arg)
{
	int before = th_fd_count();
	int ret = corio_run(cfg, entry, arg);

	cr_assert_eq(ret, 0, "corio_run: %s (%s)", strerror(-ret), corio_last_error());
	cr_assert_eq(atomic_load(&th_failures), 0, "%s", th_msg);
	cr_assert_eq(th_fd_count(), before, "the runtime left file descriptors open");
}

static inline void th_backend_entry(void *arg)
{
	struct corio_stats st;

	if (corio_stats_get(NULL, 0, &st) == 0)
		*(int *)arg = (int)st.backend + 1;
}

/* True when a default runtime runs on the epoll fallback (CORIO_BACKEND,
 * or a host that refuses io_uring): asked of a one-shard runtime's stats. */
static inline bool th_on_epoll(void)
{
	static int backend; /* 0: not asked yet; 1: io_uring; 2: epoll */

	if (!backend) {
		struct corio_config cfg = th_cfg(1);

		if (corio_run(&cfg, th_backend_entry, &backend) != 0)
			backend = 1;
	}
	return backend == 2;
}

/* A test of something only io_uring has skips on the fallback, naming it. */
#define TH_URING_ONLY(feature)                                                           \
	do {                                                                             \
		if (th_on_epoll())                                                       \
			cr_skip_test("io_uring only: %s (the epoll fallback has none)",  \
				     (feature));                                         \
	} while (0)

/*
 * API misuse: release builds (NDEBUG, what make test builds) return the
 * documented error with a message naming the public call; debug builds
 * (make DEBUG=1, the sanitizer builds) print that message and abort.
 * Runs call() in a forked child and checks whichever of the two this build
 * promises, message included. call() runs on the child's main thread; when
 * the misuse happens on a shard (a timer callback, a posted function), it
 * copies that thread's corio_last_error() into th_misuse_err.
 */
static char th_misuse_err[256];

static inline void th_misuse_ex(int (*call)(void), const char *what, int expect)
{
	int status, fds[2];
	char out[1024] = "";
	ssize_t n, got = 0;
	pid_t pid;

	cr_assert(pipe(fds) == 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		int ret;
		const char *msg;

		close(fds[0]);
		dup2(fds[1], 2); /* the debug build's message comes here */
		ret = call();
		msg = th_misuse_err[0] ? th_misuse_err : corio_last_error();
		dprintf(fds[1], "ret %d msg %s\n", ret, msg);
		_exit(ret != expect ? 3 : !strstr(msg, what) ? 4 : 0);
	}
	close(fds[1]);
	while ((n = read(fds[0], out + got, sizeof(out) - 1 - (size_t)got)) > 0)
		got += n;
	close(fds[0]);
	out[got] = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
#ifdef NDEBUG
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "%s: release builds must return %d with a message naming the call "
		  "(status 0x%x): %s", what, expect, status, out);
#else
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
		  "%s: debug builds must abort on misuse (status 0x%x): %s", what, status, out);
#endif
	cr_assert(strstr(out, what) || WIFEXITED(status),
		  "%s: the message does not name the call: %s", what, out);
}

static inline void th_misuse(int (*call)(void), const char *what)
{
	th_misuse_ex(call, what, -EPERM);
}

/*
 * corio_last_error() after a call that fails with -EINVAL: the call's own
 * message, "name: why". A config error is recorded first, so a call that
 * sets no message leaves a message that does not name it.
 */
static inline void th_error_reset(void)
{
	struct corio_config bad;

	corio_config_init(&bad);
	bad.flags = 0x80000000u;
	(void)corio_config_check(&bad); /* "... flags ...": names no call below */
}

#define CHECK_EINVAL_NAMES(call, name)                                              \
	do {                                                                        \
		long long th_r;                                                     \
		th_error_reset();                                                   \
		th_r = (long long)(call);                                           \
		CHECK_EQ(th_r, -EINVAL);                                            \
		CHECK(strncmp(corio_last_error(), name ": ", strlen(name ": ")) == 0); \
	} while (0)

/*
 * Run fn(arg) in a forked child and wait for it at most timeout_ms. A child
 * still running then is killed (SIGKILL) and reported as hung. Returns the
 * child's wait status, or -1 when it hung. For regression tests of bugs that
 * hang or crash the process: the suite itself never hangs.
 */
#define TH_HUNG (-1)
static inline int th_fork_bounded(int (*fn)(void *), void *arg, unsigned timeout_ms)
{
	int status = 0;
	pid_t pid = fork();

	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0)
		_exit(fn(arg));
	for (unsigned waited = 0;; waited++) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			return status;
		cr_assert(r == 0, "waitpid: %s", strerror(errno));
		if (waited >= timeout_ms) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return TH_HUNG;
		}
		usleep(1000);
	}
}

/* th_fork_bounded() and assert that the child exited 0 in time. */
#define th_child_ok(fn, arg, timeout_ms, what)                                          \
	do {                                                                              \
		int th_st = th_fork_bounded((fn), (arg), (timeout_ms));                  \
		cr_assert(th_st != TH_HUNG, "%s: still running after %u ms", (what),      \
			  (unsigned)(timeout_ms));                                        \
		cr_assert(WIFEXITED(th_st) && WEXITSTATUS(th_st) == 0,                    \
			  "%s: child ended with status 0x%x", (what), th_st);             \
	} while (0)

/* A connected TCP pair on this shard: *srv accepted, *cli connected (both
 * NULL first; a failed step is a CHECK failure). */
static inline void th_tcp_pair(struct corio_sock **srv, struct corio_sock **cli)
{
	struct corio_listener *l = NULL;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char addr[64];

	*srv = *cli = NULL;
	CHECK_EQ(corio_tcp_listen("127.0.0.1:0", NULL, &l), 0);
	CHECK_EQ(corio_listener_addr(l, &ss, &len), 0);
	CHECK(corio_addr_format((struct sockaddr *)&ss, len, addr, sizeof(addr)) > 0);
	CHECK_EQ(corio_tcp_connect(addr, cli), 0);
	CHECK_EQ(corio_accept(l, srv), 0);
	CHECK_EQ(corio_listener_close(l), 0);
}

/*
 * File descriptors that sendfile must refuse, each with the error it must
 * give: a character device (/dev/zero, which reads fine), a FIFO, a
 * directory, a socket (-EINVAL: not a regular file) and a closed fd
 * (-EBADF). th_not_files_close() closes what is open.
 */
#define TH_NOT_FILES 5
struct th_not_file {
	int fd, err;
	const char *what, *msg;
};

static inline void th_not_files(struct th_not_file nf[TH_NOT_FILES])
{
	char fifo[] = "/tmp/corio-test-fifo-XXXXXX";
	int tmp = mkstemp(fifo);

	CHECK(tmp >= 0);
	close(tmp);
	unlink(fifo);
	CHECK_EQ(mkfifo(fifo, 0600), 0);
	nf[0] = (struct th_not_file){ open("/dev/zero", O_RDONLY | O_CLOEXEC), -EINVAL,
				      "a character device", "not a regular file" };
	/* O_RDWR: a FIFO opened so never waits for a peer (Linux) */
	nf[1] = (struct th_not_file){ open(fifo, O_RDWR | O_NONBLOCK | O_CLOEXEC), -EINVAL,
				      "a FIFO", "not a regular file" };
	unlink(fifo);
	nf[2] = (struct th_not_file){ open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC), -EINVAL,
				      "a directory", "not a regular file" };
	nf[3] = (struct th_not_file){ socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), -EINVAL,
				      "a socket", "not a regular file" };
	nf[4] = (struct th_not_file){ dup(nf[0].fd), -EBADF, "a closed fd", "not an open file" };
	for (int i = 0; i < TH_NOT_FILES; i++)
		CHECK(nf[i].fd >= 0);
	close(nf[4].fd); /* nothing opens an fd before the calls: it stays closed */
}

static inline void th_not_files_close(struct th_not_file nf[TH_NOT_FILES])
{
	for (int i = 0; i < TH_NOT_FILES - 1; i++)
		close(nf[i].fd);
}

/*
 * An example server as a child process (the tools' own tests): argv[0] is
 * its path; the child dies with the test (PR_SET_PDEATHSIG), runs
 * child_setup (may be NULL) and execs with stdout on a pipe. Its first
 * line must be "NAME: listening on 127.0.0.1:PORT": the port goes to
 * *port. Returns the child's pid.
 */
static inline pid_t th_start_server(char *const argv[], const char *name,
				    void (*child_setup)(void), int *port)
{
	char line[256] = { 0 }, fmt[96];
	size_t got = 0;
	int pfd[2];
	pid_t pid;

	cr_assert_eq(pipe(pfd), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test leaves no server behind */
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		if (child_setup)
			child_setup();
		execv(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
		ssize_t r = read(pfd[0], line + got, sizeof(line) - 1 - got);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(pfd[0]);
	snprintf(fmt, sizeof(fmt), "%s: listening on 127.0.0.1:%%d", name);
	cr_assert(sscanf(line, fmt, port) == 1, "%s: no port in '%s'", name, line);
	return pid;
}

/*
 * A client command line (curl, the examples, openssl) for a test, as
 * system(3) runs it, except that it cannot outlive the test. system()'s
 * shell and what it starts are nobody's once the test process dies (make
 * test interrupted, Criterion's .timeout): the server dies with it
 * (th_start_server's PR_SET_PDEATHSIG) and the client is left behind,
 * reparented to init. So the command runs under timeout(1), which puts it
 * in a process group of its own and passes a SIGTERM to that whole group
 * (SIGKILL 5 s later for what is still alive), and timeout gets that
 * SIGTERM when this process dies. The 600 s cap also ends a command that
 * hangs while the test lives. out_fd, err_fd: its stdout and stderr
 * (-1: this process's).
 * The pid, for th_sh_wait().
 */
static inline pid_t th_sh_start(const char *cmd, int out_fd, int err_fd)
{
	pid_t parent = getpid(), pid = fork();

	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent) /* it died before the prctl */
			_exit(127);
		if (out_fd >= 0)
			dup2(out_fd, 1);
		if (err_fd >= 0)
			dup2(err_fd, 2);
		execlp("timeout", "timeout", "-k", "5", "600", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The wait status of th_sh_start's pid (as system() returns it). */
static inline int th_sh_wait(pid_t pid)
{
	int status = 0;

	while (waitpid(pid, &status, 0) < 0)
		cr_assert_eq(errno, EINTR, "waitpid: %s", strerror(errno));
	return status;
}

/* system(cmd) for a client: see th_sh_start. */
static inline int th_system(const char *cmd)
{
	return th_sh_wait(th_sh_start(cmd, -1, -1));
}

#endif
