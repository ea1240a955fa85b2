/* SPDX-License-Identifier: MIT */
/*
 * uring/sys.h - system calls without glibc's wrappers, for the calls made
 * on a hot path outside the ring: a direct send(2) / sendmsg(2) (net/send.c),
 * the epoll fallback's socket calls and wait (uring/emu.c) and the idle
 * turn's blocking io_uring_enter (uring/ring.c).
 *
 * Why: in a multi-threaded process glibc's send, recv, sendmsg, recvmsg,
 * read and epoll_wait are cancellation points; each call enters and leaves
 * asynchronous cancellation around the syscall (~30 user-space
 * instructions a call, counted with callgrind: make bench-instr). A shard
 * thread is never pthread-cancelled, so corio needs none of it.
 *
 * x86-64 and aarch64 issue the instruction inline. Other architectures,
 * and sanitizer builds (whose interceptors check the buffers and, under
 * TSan, model the synchronisation a socket carries), call libc.
 */
#ifndef CORIO_URING_SYS_H
#define CORIO_URING_SYS_H

#include <errno.h>
#include <linux/time_types.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CORIO__SYS_SAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CORIO__SYS_SAN 1
#endif
#endif

#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(CORIO__SYS_SAN)
#define CORIO__SYS_RAW 1

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
#else
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
#endif
}

/* libc's shape: -1 and errno */
static inline long corio__nc(long r)
{
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

#define corio__nc_recv(fd, buf, len, fl) \
	corio__nc(corio__sys6(SYS_recvfrom, (fd), (long)(buf), (long)(len), (fl), 0, 0))
#define corio__nc_send(fd, buf, len, fl) \
	corio__nc(corio__sys6(SYS_sendto, (fd), (long)(buf), (long)(len), (fl), 0, 0))
#define corio__nc_recvmsg(fd, mh, fl) corio__nc(corio__sys6(SYS_recvmsg, (fd), (long)(mh), (fl), 0, 0, 0))
#define corio__nc_sendmsg(fd, mh, fl) corio__nc(corio__sys6(SYS_sendmsg, (fd), (long)(mh), (fl), 0, 0, 0))
#define corio__nc_read(fd, buf, len) corio__nc(corio__sys6(SYS_read, (fd), (long)(buf), (long)(len), 0, 0, 0))
/* no signal mask: the kernel ignores the size then */
#define corio__nc_epoll_pwait2(ep, evs, n, ts) \
	corio__nc(corio__sys6(SYS_epoll_pwait2, (ep), (long)(evs), (n), (long)(ts), 0, 8))
#define corio__nc_epoll_wait(ep, evs, n, ms) \
	corio__nc(corio__sys6(SYS_epoll_pwait, (ep), (long)(evs), (n), (ms), 0, 8))

#else /* libc */

#define corio__nc_recv(fd, buf, len, fl) recv((fd), (buf), (len), (fl))
#define corio__nc_send(fd, buf, len, fl) send((fd), (buf), (len), (fl))
#define corio__nc_recvmsg(fd, mh, fl) recvmsg((fd), (mh), (fl))
#define corio__nc_sendmsg(fd, mh, fl) sendmsg((fd), (mh), (fl))
#define corio__nc_read(fd, buf, len) read((fd), (buf), (len))
#define corio__nc_epoll_pwait2(ep, evs, n, ts) \
	syscall(SYS_epoll_pwait2, (ep), (evs), (n), (ts), NULL, (size_t)8)
#define corio__nc_epoll_wait(ep, evs, n, ms) epoll_wait((ep), (evs), (n), (ms))

#endif

/* send(2) and sendmsg(2): bytes sent, or -errno (errno untouched on the
 * raw path) */
static inline long corio__sys_send(int fd, const void *buf, size_t len, int flags)
{
#ifdef CORIO__SYS_RAW
	return corio__sys6(SYS_sendto, fd, (long)buf, (long)len, flags, 0, 0);
#else
	long r = send(fd, buf, len, flags);

	return r < 0 ? -errno : r;
#endif
}

static inline long corio__sys_sendmsg(int fd, const struct msghdr *mh, int flags)
{
#ifdef CORIO__SYS_RAW
	return corio__sys6(SYS_sendmsg, fd, (long)mh, flags, 0, 0, 0);
#else
	long r = sendmsg(fd, mh, flags);

	return r < 0 ? -errno : r;
#endif
}

/* io_uring_enter(2) without a signal mask or argument: -errno on failure */
static inline long corio__sys_uring_enter(int fd, unsigned submit, unsigned wait_nr, unsigned flags)
{
#ifdef CORIO__SYS_RAW
	return corio__sys6(SYS_io_uring_enter, fd, submit, wait_nr, flags, 0, 0);
#else
	long r = syscall(SYS_io_uring_enter, fd, submit, wait_nr, flags, NULL, 0);

	return r < 0 ? -errno : r;
#endif
}

#endif
