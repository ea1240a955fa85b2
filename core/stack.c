/* SPDX-License-Identifier: MIT */
/*
 * core/stack.c - fiber stacks: mmap'd with a PROT_NONE guard below,
 * pooled per shard, and a SIGSEGV handler that turns a hit on a guard
 * into a message naming the fiber.
 *
 * The guard is cfg.stack_guard bytes (64 KiB by default), not one page: a
 * frame larger than the guard, in code built without
 * -fstack-clash-protection, makes its first store below the guard, into
 * whatever is mapped there (usually the stack of the fiber that took a stack
 * next). A PROT_NONE range costs address space only, no memory, and the
 * same two VMAs whatever its size.
 *
 * Stacks are mapped by the shard thread, which runs with a local NUMA policy,
 * so their pages are first touched (and placed) on the shard's node.
 *
 * Limit: every guarded stack costs two VMAs, so the number of fibers that
 * hold a stack at once is bounded by vm.max_map_count / 2 (about 32k with
 * the default 65530). A fiber only takes a stack when it first runs, so
 * spawning many short fibers does not hit it.
 */
#include "core/internal.h"
#include "core/sanitizer.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_size(void)
{
	static size_t ps; /* racy first fill writes the same value: atomics keep TSan honest */
	size_t v = __atomic_load_n(&ps, __ATOMIC_RELAXED);

	if (!v) {
		v = (size_t)sysconf(_SC_PAGESIZE);
		__atomic_store_n(&ps, v, __ATOMIC_RELAXED);
	}
	return v;
}

size_t corio__stack_round(size_t size)
{
	size_t ps = page_size();

	/* size <= CORIO__STACK_MAX (validated), so this cannot wrap */
	return (size + ps - 1) & ~(ps - 1);
}

int corio__stack_init(struct corio__shard *s, const struct corio_config *cfg)
{
	/* Rounded once here, and spawn sizes once in corio_spawn: the cache
	 * takes a stack back only when its size equals s->stack_size. */
	s->stack_size = corio__stack_round(cfg->stack_size);
	s->stack_guard = cfg->stack_guard ? cfg->stack_guard : CORIO__STACK_GUARD_DEFAULT;
	s->stack_cache_cap = cfg->stack_cache;
	s->stack_cache = calloc(s->stack_cache_cap ? s->stack_cache_cap : 1, sizeof(void *));
	return s->stack_cache ? 0 : -ENOMEM;
}

int corio__stack_get(struct corio__shard *s, struct corio_fiber *f)
{
	size_t guard = s->stack_guard;
	size_t size = f->stack_req ? f->stack_req : s->stack_size; /* both page multiples */
	void *map;

	if (size == s->stack_size && s->nstacks) {
		map = s->stack_cache[--s->nstacks];
	} else {
		map = mmap(NULL, size + guard, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
		if (map == MAP_FAILED)
			return -errno;
		if (mprotect(map, guard, PROT_NONE)) {
			int err = -errno;

			munmap(map, size + guard);
			return err;
		}
		s->stacks_mapped++;
	}
	f->stack_map = map;
	f->stack_size = size;
	f->stack_lo = (char *)map + guard;
	f->vg_id = CORIO__VG_STACK_REGISTER((char *)map + guard, (char *)map + guard + size);
	return 0;
}

void corio__stack_put(struct corio__shard *s, struct corio_fiber *f)
{
	size_t guard = s->stack_guard;

	if (!f->stack_map)
		return;
	CORIO__VG_STACK_DEREGISTER(f->vg_id);
	/* The fiber never returned from its frames: clear ASan's stack poison
	 * so the next fiber on this stack starts clean. */
	CORIO__ASAN_UNPOISON(f->stack_lo, f->stack_size);
	if (f->stack_size == s->stack_size && s->nstacks < s->stack_cache_cap)
		s->stack_cache[s->nstacks++] = f->stack_map;
	else if (munmap(f->stack_map, f->stack_size + guard) == 0)
		s->stacks_mapped--;
	f->stack_map = NULL;
}

void corio__stack_cache_free(struct corio__shard *s)
{
	while (s->nstacks)
		if (munmap(s->stack_cache[--s->nstacks], s->stack_size + s->stack_guard) == 0)
			s->stacks_mapped--;
	free(s->stack_cache);
	s->stack_cache = NULL;
}

/* ---- overflow detection ------------------------------------------------- */

static struct sigaction old_segv, old_bus;

static void put(const char *str)
{
	ssize_t r = write(STDERR_FILENO, str, strlen(str));

	(void)r;
}

static void put_u64(uint64_t v)
{
	char buf[24];
	int i = (int)sizeof(buf);

	buf[--i] = '\0';
	do
		buf[--i] = (char)('0' + v % 10);
	while ((v /= 10) && i);
	put(buf + i);
}

static void on_fault(int sig, siginfo_t *si, void *uctx)
{
	struct corio__shard *s = corio__tl_shard;
	struct corio_fiber *f = s ? s->current : NULL;
	struct sigaction *old = sig == SIGSEGV ? &old_segv : &old_bus;

	if (f && f->stack_map) {
		uintptr_t addr = (uintptr_t)si->si_addr;
		uintptr_t lo = (uintptr_t)f->stack_map;
		uintptr_t guard_end = (uintptr_t)f->stack_lo;

		/* The guard, or a frame that jumped just past it into unmapped
		 * space (past it into a mapping, it faults nowhere: see the top). */
		if (addr < guard_end && addr + 65536 >= lo) {
			put("corio: stack overflow in fiber '");
			put(f->name[0] ? f->name : "(unnamed)");
			put("' (id ");
			put_u64(f->id);
			put(") on shard ");
			put_u64(s->id);
			put(": its stack is ");
			put_u64(f->stack_size);
			put(" bytes; give it a larger corio_spawn_opts.stack_size\n");
			signal(sig, SIG_DFL);
			return; /* the faulting access repeats and kills the process */
		}
	}
	/* Not ours: hand it to whoever was installed before us. */
	if (old->sa_flags & SA_SIGINFO) {
		if (old->sa_sigaction) {
			old->sa_sigaction(sig, si, uctx);
			return;
		}
	} else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
		old->sa_handler(sig);
		return;
	}
	signal(sig, SIG_DFL);
}

static pthread_once_t handler_once = PTHREAD_ONCE_INIT;

static void install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &old_segv);
	sigaction(SIGBUS, &sa, &old_bus);
}

void corio__overflow_handler_install(void)
{
	pthread_once(&handler_once, install);
}

int corio__altstack_init(struct corio__shard *s)
{
	size_t len = 64 * 1024;
	stack_t ss;

	s->altstack = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->altstack == MAP_FAILED) {
		s->altstack = NULL;
		return -errno;
	}
	memset(&ss, 0, sizeof(ss));
	ss.ss_sp = s->altstack;
	ss.ss_size = len;
	if (sigaltstack(&ss, NULL)) {
		int err = -errno;

		munmap(s->altstack, len);
		s->altstack = NULL;
		return err;
	}
	return 0;
}

void corio__altstack_fini(struct corio__shard *s)
{
	stack_t ss;

	if (!s->altstack)
		return;
	memset(&ss, 0, sizeof(ss));
	ss.ss_flags = SS_DISABLE;
	sigaltstack(&ss, NULL);
	munmap(s->altstack, 64 * 1024);
	s->altstack = NULL;
}
