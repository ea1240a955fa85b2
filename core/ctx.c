/* SPDX-License-Identifier: MIT */
/*
 * core/ctx.c - the fiber context switch, hand-written per architecture.
 *
 * Only the callee-saved registers of the platform ABI are saved, on the
 * stack being left; the context is just that stack pointer. No signal mask
 * is switched (that is what makes swapcontext cost a syscall). The floating
 * point control words (x86 MXCSR / x87 CW, aarch64 FPCR) are not switched
 * either: all fibers of a shard share them, so a fiber that changes the
 * rounding mode must restore it before it parks.
 *
 * A new context starts in a trampoline that calls entry(arg); entry never
 * returns (a fiber ends by switching away for good).
 */
#include "core/internal.h"

#include <string.h>

#if defined(__x86_64__)
__asm__(".text\n"
	".globl corio__ctx_switch\n"
	".hidden corio__ctx_switch\n"
	".type corio__ctx_switch,@function\n"
	".p2align 4\n"
	"corio__ctx_switch:\n"
	"	pushq %rbp\n"
	"	pushq %rbx\n"
	"	pushq %r12\n"
	"	pushq %r13\n"
	"	pushq %r14\n"
	"	pushq %r15\n"
	"	movq %rsp, (%rdi)\n"
	"	movq (%rsi), %rsp\n"
	"	popq %r15\n"
	"	popq %r14\n"
	"	popq %r13\n"
	"	popq %r12\n"
	"	popq %rbx\n"
	"	popq %rbp\n"
	"	ret\n"
	".size corio__ctx_switch,.-corio__ctx_switch\n"
	".type corio__ctx_trampoline,@function\n"
	".p2align 4\n"
	"corio__ctx_trampoline:\n"
	"	movq %r12, %rdi\n"
	"	callq *%r13\n"
	"	ud2\n"
	".size corio__ctx_trampoline,.-corio__ctx_trampoline\n");

void corio__ctx_trampoline(void);

void corio__ctx_make(struct corio__ctx *ctx, void *lo, size_t size, void (*entry)(void *),
		     void *arg)
{
	/* top is 16-aligned; after the six pops and the ret, rsp == top, so the
	 * trampoline's call sees the ABI's alignment. */
	uintptr_t top = ((uintptr_t)lo + size) & ~(uintptr_t)15;
	void **sp = (void **)top - 7;

	sp[0] = NULL;                           /* r15 */
	sp[1] = NULL;                           /* r14 */
	sp[2] = (void *)entry;                  /* r13 */
	sp[3] = arg;                            /* r12 */
	sp[4] = NULL;                           /* rbx */
	sp[5] = NULL;                           /* rbp: ends backtraces */
	sp[6] = (void *)corio__ctx_trampoline;  /* return address */
	ctx->sp = sp;
}

#elif defined(__aarch64__)
__asm__(".text\n"
	".globl corio__ctx_switch\n"
	".hidden corio__ctx_switch\n"
	".type corio__ctx_switch,%function\n"
	".p2align 4\n"
	"corio__ctx_switch:\n"
	"	sub sp, sp, #160\n"
	"	stp x19, x20, [sp, #0]\n"
	"	stp x21, x22, [sp, #16]\n"
	"	stp x23, x24, [sp, #32]\n"
	"	stp x25, x26, [sp, #48]\n"
	"	stp x27, x28, [sp, #64]\n"
	"	stp x29, x30, [sp, #80]\n"
	"	stp d8, d9, [sp, #96]\n"
	"	stp d10, d11, [sp, #112]\n"
	"	stp d12, d13, [sp, #128]\n"
	"	stp d14, d15, [sp, #144]\n"
	"	mov x9, sp\n"
	"	str x9, [x0]\n"
	"	ldr x9, [x1]\n"
	"	mov sp, x9\n"
	"	ldp x19, x20, [sp, #0]\n"
	"	ldp x21, x22, [sp, #16]\n"
	"	ldp x23, x24, [sp, #32]\n"
	"	ldp x25, x26, [sp, #48]\n"
	"	ldp x27, x28, [sp, #64]\n"
	"	ldp x29, x30, [sp, #80]\n"
	"	ldp d8, d9, [sp, #96]\n"
	"	ldp d10, d11, [sp, #112]\n"
	"	ldp d12, d13, [sp, #128]\n"
	"	ldp d14, d15, [sp, #144]\n"
	"	add sp, sp, #160\n"
	"	ret\n"
	".size corio__ctx_switch,.-corio__ctx_switch\n"
	".type corio__ctx_trampoline,%function\n"
	".p2align 4\n"
	"corio__ctx_trampoline:\n"
	"	mov x0, x19\n"
	"	blr x20\n"
	"	brk #0\n"
	".size corio__ctx_trampoline,.-corio__ctx_trampoline\n");

void corio__ctx_trampoline(void);

void corio__ctx_make(struct corio__ctx *ctx, void *lo, size_t size, void (*entry)(void *),
		     void *arg)
{
	uintptr_t top = ((uintptr_t)lo + size) & ~(uintptr_t)15;
	void **sp = (void **)(top - 160);

	memset(sp, 0, 160);
	sp[0] = arg;                            /* x19 */
	sp[1] = (void *)entry;                  /* x20 */
	sp[10] = NULL;                          /* x29: ends backtraces */
	sp[11] = (void *)corio__ctx_trampoline; /* x30: return address */
	ctx->sp = sp;
}

#else
#error "corio: no context switch for this architecture (x86-64 and aarch64 only)"
#endif
