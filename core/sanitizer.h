/* SPDX-License-Identifier: MIT */
/*
 * core/sanitizer.h - tell ASan, TSan and Valgrind about fiber switches.
 * Without these they see a stack pointer jump to foreign memory on every
 * switch and report false errors. Each macro is a no-op when the tool is
 * not in use.
 */
#ifndef CORIO_CORE_SANITIZER_H
#define CORIO_CORE_SANITIZER_H

#include <stddef.h>

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#ifndef __has_include
#define __has_include(x) 0
#endif

#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define CORIO__ASAN 1
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
				     size_t *size_old);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#define CORIO__ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define CORIO__ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#define CORIO__ASAN_UNPOISON(p, n) __asan_unpoison_memory_region(p, n)
#else
#define CORIO__ASAN 0
#define CORIO__ASAN_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define CORIO__ASAN_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define CORIO__ASAN_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
#define CORIO__TSAN 1
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
#else
#define CORIO__TSAN 0
#endif

#if __has_include(<valgrind/valgrind.h>) && !CORIO__ASAN && !CORIO__TSAN
#include <valgrind/valgrind.h>
#define CORIO__VG_STACK_REGISTER(lo, hi) ((unsigned)VALGRIND_STACK_REGISTER(lo, hi))
#define CORIO__VG_STACK_DEREGISTER(id) VALGRIND_STACK_DEREGISTER(id)
#else
#define CORIO__VG_STACK_REGISTER(lo, hi) ((void)(lo), (void)(hi), 0u)
#define CORIO__VG_STACK_DEREGISTER(id) ((void)(id))
#endif

#endif
