/* SPDX-License-Identifier: MIT */
/* corio/timer.h - placeholder: filled in by its issue. Include <corio.h>. */
#ifndef CORIO_TIMER_H
#define CORIO_TIMER_H
#include <corio.h>
#endif
