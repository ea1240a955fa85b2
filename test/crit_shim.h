/* SPDX-License-Identifier: MIT */
/*
 * test/crit_shim.h - a minimal stand-in for the part of Criterion our tests
 * use, for ThreadSanitizer builds only (make test SAN=thread).
 *
 * Why: Criterion 2.4 cannot start under TSan ("Could not initialize
 * inheritable arena", Criterion issue #274, open since 2018). Under TSan
 * the same test files are compiled against this header instead: each Test()
 * registers itself, main() runs every test (with its .init/.fini) in a
 * forked child with its timeout, and prints Criterion's summary line so tools/scripts/run-tests.sh reads
 * both alike. Supported: Test(suite, name, .timeout/.disabled), cr_assert*,
 * cr_expect* (fatal here), cr_skip_test, cr_log_*; --filter GLOB.
 */
#ifndef CORIO_TEST_CRIT_SHIM_H
#define CORIO_TEST_CRIT_SHIM_H

#include <fnmatch.h>
#include <stdbool.h> /* Criterion pulls these in; tests rely on them */
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shim_extra {
	double timeout;
	int disabled;
	int signal;
	int exit_code;
	const char *description;
	void (*init)(void);
	void (*fini)(void);
};

struct shim_test {
	const char *suite, *name;
	void (*fn)(void);
	struct shim_extra *ex;
};

static struct shim_test shim_tests[512];
static int shim_ntests;

static inline void shim_register(const char *suite, const char *name, void (*fn)(void),
				 struct shim_extra *ex)
{
	if (shim_ntests < 512)
		shim_tests[shim_ntests++] = (struct shim_test){ suite, name, fn, ex };
}

#define Test(suite, name, ...)                                                          \
	static void suite##_##name##_impl(void);                                        \
	__attribute__((constructor)) static void suite##_##name##_reg(void)             \
	{                                                                               \
		static struct shim_extra ex = { __VA_ARGS__ };                          \
		shim_register(#suite, #name, suite##_##name##_impl, &ex);               \
	}                                                                               \
	static void suite##_##name##_impl(void)

__attribute__((format(printf, 4, 5), noreturn)) static inline void
shim_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "[----] %s:%d: Assertion Failed: %s\n[----]   ", file, line, expr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

#define cr_assert(cond, ...)                                                      \
	do {                                                                      \
		if (!(cond))                                                      \
			shim_fail(__FILE__, __LINE__, #cond, " " __VA_ARGS__);     \
	} while (0)
#define cr_assert_not(cond, ...) cr_assert(!(cond), __VA_ARGS__)
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...) cr_assert((a) < (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) cr_assert((a) <= (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...) cr_assert((a) > (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b), __VA_ARGS__)
#define cr_assert_null(p, ...) cr_assert((p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) cr_assert((p) != NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) cr_assert(strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) cr_assert(strcmp((a), (b)) != 0, __VA_ARGS__)
#define cr_assert_fail(...) shim_fail(__FILE__, __LINE__, "fail", " " __VA_ARGS__)
#define cr_expect cr_assert
#define cr_expect_eq cr_assert_eq
#define cr_expect_str_eq cr_assert_str_eq
#define cr_expect_str_neq cr_assert_str_neq
#define cr_expect_neq cr_assert_neq
#define cr_expect_gt cr_assert_gt
#define cr_expect_geq cr_assert_geq
#define cr_expect_lt cr_assert_lt
#define cr_expect_leq cr_assert_leq
#define cr_log_info(...) (fprintf(stderr, "[----] " __VA_ARGS__), fputc('\n', stderr))
#define cr_log_warn cr_log_info
#define cr_log_error cr_log_info
#define cr_skip_test(...)                                                   \
	do {                                                                \
		fprintf(stderr, "[SKIP] " __VA_ARGS__);                     \
		fputc('\n', stderr);                                        \
		exit(77);                                                   \
	} while (0)

int main(int argc, char **argv)
{
	const char *filter = NULL;
	int pass = 0, fail = 0, crash = 0, skip = 0;
	bool verbose = false;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--verbose", 9))
			verbose = true; /* a [PASS] line, with its time, for every test */
		else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
			filter = argv[++i];
		else if (!strncmp(argv[i], "--filter=", 9))
			filter = argv[i] + 9;
	}
	for (int i = 0; i < shim_ntests; i++) {
		struct shim_test *t = &shim_tests[i];
		struct timespec t0, t1;
		char full[256];
		double secs;
		int status;
		pid_t pid;

		snprintf(full, sizeof(full), "%s/%s", t->suite, t->name);
		if (filter && fnmatch(filter, full, 0))
			continue;
		if (t->ex->disabled) {
			skip++;
			continue;
		}
		fflush(NULL);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		pid = fork();
		if (pid == 0) {
			alarm(t->ex->timeout > 0 ? (unsigned)t->ex->timeout + 1 : 600);
			if (t->ex->init)
				t->ex->init();
			t->fn();
			if (t->ex->fini)
				t->ex->fini();
			fflush(NULL);
			_exit(0);
		}
		waitpid(pid, &status, 0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			pass++;
			if (verbose)
				printf("[PASS] %s::%s: (%.2fs)\n", t->suite, t->name, secs);
		} else if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
			skip++;
			printf("[SKIP] %s::%s\n", t->suite, t->name);
		} else if (WIFEXITED(status)) {
			fail++;
			printf("[FAIL] %s::%s: exit %d (%.2fs)\n", t->suite, t->name,
			       WEXITSTATUS(status), secs);
		} else {
			crash++;
			printf("[FAIL] %s::%s: CRASH (signal %d%s) (%.2fs)\n", t->suite, t->name,
			       WTERMSIG(status),
			       WTERMSIG(status) == SIGALRM ? ": timed out" : "", secs);
		}
	}
	printf("[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: %d | Skipped: %d\n",
	       pass + fail + crash, pass, fail, crash, skip);
	return fail || crash;
}

#endif
