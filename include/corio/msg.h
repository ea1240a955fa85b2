/* SPDX-License-Identifier: MIT */
/* corio/msg.h - placeholder: filled in by its issue. Include <corio.h>. */
#ifndef CORIO_MSG_H
#define CORIO_MSG_H
#include <corio.h>
#endif
