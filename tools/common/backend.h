/* SPDX-License-Identifier: MIT */
/*
 * tools/common/backend.h - which I/O backend corio runs on here, for the
 * setup lines of the benchmarks (make bench runs them once per backend,
 * with CORIO_BACKEND=uring and =epoll).
 */
#ifndef CORIO_TOOLS_BACKEND_H
#define CORIO_TOOLS_BACKEND_H

/* "io_uring" or "epoll" (the fallback: the ring emulator), the words of
 * CORIO_BACKEND: what a runtime started with the default config (and so
 * with this process's CORIO_BACKEND) runs on, found by starting a one-shard
 * runtime and reading its stats; "none (REASON)" when it cannot start
 * (CORIO_BACKEND=uring where io_uring is refused). The string is static. */
const char *tool_backend(void);
/* The same for a running runtime (its shard 0): "io_uring", "epoll"
 * or "?" when its stats cannot be read. */
struct corio_rt;
const char *tool_backend_of(struct corio_rt *rt);

#endif
