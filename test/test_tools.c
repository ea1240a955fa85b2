/* SPDX-License-Identifier: MIT */
/*
 * The benchmark tools (tools/): the option parser they share, compiled in
 * here, and the built programs started as children with a bounded wait.
 * The programs are looked up next to this test binary ($(B)/tools/), so
 * every build flavour runs its own; a test skips when they are not built.
 */
#include "helpers.h"

#include "../tools/lib/eb_opt.c"

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

/* ---- the number parser ----------------------------------------------------------- */

/* Run a parser with stderr captured: its return value, and the message. */
static int capture(int (*fn)(const char *, const char *, uint64_t, uint64_t, uint64_t *),
		   const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out,
		   char *msg, size_t msglen)
{
	int p[2], saved = dup(2), ret;
	ssize_t n;

	cr_assert(saved >= 0 && pipe(p) == 0);
	fflush(stderr);
	dup2(p[1], 2);
	ret = fn(name, s, min, max, out);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(p[1]);
	n = read(p[0], msg, msglen - 1);
	msg[n > 0 ? n : 0] = '\0';
	close(p[0]);
	return ret;
}

Test(tools, numbers_are_decimal_digits_only)
{
	static const char *const bad_counts[] = {
		"0x50", "0X50", "1e2", "1E2", "8e1", "0x", "+80", "-1", " 80", "80 ", "", ".",
		"inf", "nan", "1.5", "80x", "0b1", "１", "99999999999999999999999999", "1.2.3",
		"1..", "1kk", "1e", NULL,
	};
	static const char *const bad_sizes[] = { "0x1000", "4e3", "1p10", "0x1p4", NULL };
	static const char *const bad_secs[] = { "1e-3", "0x1", "1e2s", "infs", NULL };
	char msg[512];
	uint64_t v;
	double d;

	eb_prog = "test";
	for (int i = 0; bad_counts[i]; i++) {
		v = 12345;
		cr_assert_eq(capture(eb_opt_count, "--port", bad_counts[i], 0, 65535, &v, msg,
				     sizeof(msg)),
			     -EINVAL, "'%s' accepted as %llu", bad_counts[i], (unsigned long long)v);
		cr_assert_eq(v, 12345, "'%s' wrote a value", bad_counts[i]);
		cr_assert(strstr(msg, "--port"), "'%s': message does not name the option: %s",
			  bad_counts[i], msg);
	}
	for (int i = 0; bad_sizes[i]; i++)
		cr_assert_eq(capture(eb_opt_size, "--size", bad_sizes[i], 1, 1u << 20, &v, msg,
				     sizeof(msg)),
			     -EINVAL, "'%s' accepted", bad_sizes[i]);
	for (int i = 0; bad_secs[i]; i++) {
		int saved = dup(2), nul = open("/dev/null", O_WRONLY);

		dup2(nul, 2);
		cr_assert_eq(eb_opt_seconds("--timeout", bad_secs[i], 0, 1e6, &d), -EINVAL,
			     "'%s' accepted", bad_secs[i]);
		dup2(saved, 2);
		close(saved);
		close(nul);
	}
	/* what the tools document still parses */
	cr_assert_eq(eb_opt_count("--port", "80", 0, 65535, &v), 0);
	cr_assert_eq(v, 80);
	cr_assert_eq(eb_opt_count("--port", "0", 0, 65535, &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(eb_opt_count("--port", "0080", 0, 65535, &v), 0);
	cr_assert_eq(v, 80);
	cr_assert_eq(eb_opt_count("--rate", "100k", 1, 100000000, &v), 0);
	cr_assert_eq(v, 100000);
	cr_assert_eq(eb_opt_count("--rate", "1.5m", 1, 100000000, &v), 0);
	cr_assert_eq(v, 1500000);
	cr_assert_eq(eb_opt_size("--size", "4KiB", 1, 1u << 20, &v), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(eb_opt_size("--size", "64", 1, 1u << 20, &v), 0);
	cr_assert_eq(v, 64);
	cr_assert_eq(eb_opt_seconds("--drain", "2.5s", 0, 600, &d), 0);
	cr_assert_eq(d, 2.5);
	cr_assert_eq(eb_opt_seconds("--drain", "500ms", 0, 600, &d), 0);
	cr_assert_eq(d, 0.5);
	cr_assert_eq(eb_opt_seconds("--drain", ".5", 0, 600, &d), 0);
	cr_assert_eq(d, 0.5);
	/* out of range names the range */
	cr_assert_eq(capture(eb_opt_count, "--port", "65536", 0, 65535, &v, msg, sizeof(msg)),
		     -EINVAL);
	cr_assert(strstr(msg, "--port") && strstr(msg, "0..65535"), "%s", msg);
}

/* ---- the programs, as children ------------------------------------------------------ */

/* $(B)/tools/name, from this binary's path ($(B)/test/test_tools). */
static void tool_path(char *out, size_t len, const char *name)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	cr_assert(n > 0);
	self[n] = '\0';
	slash = strrchr(self, '/');
	cr_assert_not_null(slash);
	*slash = '\0'; /* $(B)/test */
	snprintf(out, len, "%s/../tools/%s", self, name);
}

struct child {
	pid_t pid;
	int err; /* read end of its stderr */
};

static struct child spawn_tool(const char *prog, char *const argv[])
{
	struct child c;
	int p[2];

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	c.pid = fork();
	cr_assert(c.pid >= 0);
	if (c.pid == 0) {
		int nul = open("/dev/null", O_RDWR);

		dup2(nul, 0);
		dup2(nul, 1);
		dup2(p[1], 2);
		execv(prog, argv);
		_exit(127);
	}
	close(p[1]);
	c.err = p[0];
	return c;
}

/* Wait at most timeout_ms for the child; kill it then. Its stderr goes
 * into msg. Returns the wait status or TH_HUNG. */
static int wait_tool(struct child *c, unsigned timeout_ms, char *msg, size_t msglen)
{
	size_t got = 0;
	int status = 0;

	fcntl(c->err, F_SETFL, O_NONBLOCK);
	for (unsigned waited = 0;; waited++) {
		pid_t r = waitpid(c->pid, &status, WNOHANG);
		ssize_t n;

		while (got < msglen - 1 && (n = read(c->err, msg + got, msglen - 1 - got)) > 0)
			got += (size_t)n;
		if (r == c->pid)
			break;
		cr_assert_eq(r, 0);
		if (waited >= timeout_ms) {
			kill(c->pid, SIGKILL);
			waitpid(c->pid, &status, 0);
			status = TH_HUNG;
			break;
		}
		usleep(1000);
	}
	msg[got] = '\0';
	close(c->err);
	return status;
}

Test(tools, echo_rejects_hex_port, .timeout = 30)
{
	char prog[PATH_MAX + 32], msg[1024];
	struct child c;
	int st;

	tool_path(prog, sizeof(prog), "corio-echo");
	if (access(prog, X_OK))
		cr_skip_test("%s is not built (make tools)", prog);
	c = spawn_tool(prog, (char *[]){ prog, "-p", "0x50", NULL });
	st = wait_tool(&c, 10000, msg, sizeof(msg));
	cr_assert(st != TH_HUNG, "corio-echo -p 0x50 is still running (listening on port 80?)");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status 0x%x, stderr: %s", st, msg);
	cr_assert(strstr(msg, "--port") && strstr(msg, "0x50"), "stderr: %s", msg);
}

/* ---- corio-load ends when the server stops answering ------------------------------- */

/* A server that accepts (the kernel's backlog does) and never reads or
 * answers. Returns the listening fd; *port is its port. */
static int mute_server(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert(fd >= 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fd, 64), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Open loop against the mute server: the tool must end soon after
 * warm-up + duration + drain (0.5 s here), report the unanswered messages
 * and exit 1. 20 s is the bound; the bug ran forever. */
static void load_mute(const char *size, const char *rate)
{
	char prog[PATH_MAX + 32], msg[4096], ports[16];
	struct child c;
	int lfd, port, st;
	uint64_t t0;

	tool_path(prog, sizeof(prog), "corio-load");
	if (access(prog, X_OK))
		cr_skip_test("%s is not built (make tools)", prog);
	lfd = mute_server(&port);
	snprintf(ports, sizeof(ports), "%d", port);
	t0 = corio_now_ns();
	c = spawn_tool(prog, (char *[]){ prog, "-p", ports, "--no-probe", "-q", "-c", "2", "-s",
					 (char *)size, "-r", (char *)rate, "-w", "0", "-d", "0.2",
					 "--drain", "0.3", NULL });
	st = wait_tool(&c, 20000, msg, sizeof(msg));
	close(lfd);
	cr_assert(st != TH_HUNG, "corio-load is still running 20 s after a 0.5 s run; stderr: %s",
		  msg);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status 0x%x, stderr: %s", st, msg);
	cr_assert(strstr(msg, "echoes missing"), "no word of the missing echoes: %s", msg);
	cr_assert_lt(corio_now_ns() - t0, 20000000000ull);
}

/* The receiver waits for echoes that never come. */
Test(tools, load_rate_ends_when_server_is_mute, .timeout = 60)
{
	load_mute("64", "1000");
}

/* Big messages fill the socket buffers: the sender is still blocked in its
 * send when the drain deadline passes, so it never shuts its side down. */
Test(tools, load_rate_ends_when_sends_block_past_drain, .timeout = 60)
{
	load_mute("64k", "20k");
}
