/* SPDX-License-Identifier: MIT */
/*
 * uring/sys.h - system calls without glibc's wrappers, for the few calls
 * made on a hot path outside the ring (a direct send(2) / sendmsg(2)).
 *
 * Why: in a multi-threaded process glibc's send, recv, sendmsg and
 * epoll_wait are cancellation points; each call enters and leaves
 * asynchronous cancellation around the syscall (~30 user-space
 * instructions a call, counted with callgrind, docs/BENCHMARKS.md). A
 * shard thread is never pthread-cancelled, so corio needs none of it.
 * The result is the kernel's: >= 0, or -errno (errno is not touched).
 *
 * x86-64 and aarch64 issue the instruction inline; other architectures
 * go through syscall(2), which is not a cancellation point either.
 */
#ifndef CORIO_URING_SYS_H
#define CORIO_URING_SYS_H

#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline long corio__sys6(long nr, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;

	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
#else
	long ret = syscall(nr, a, b, c, d, e, f);

	return ret < 0 ? -errno : ret;
#endif
}

/* send(2) and sendmsg(2): bytes sent, or -errno */
static inline long corio__sys_send(int fd, const void *buf, size_t len, int flags)
{
	return corio__sys6(SYS_sendto, fd, (long)buf, (long)len, flags, 0, 0);
}

static inline long corio__sys_sendmsg(int fd, const struct msghdr *mh, int flags)
{
	return corio__sys6(SYS_sendmsg, fd, (long)mh, flags, 0, 0, 0);
}

#endif
