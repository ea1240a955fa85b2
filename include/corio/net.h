/* SPDX-License-Identifier: MIT */
/* corio/net.h - placeholder: filled in by its issue. Include <corio.h>. */
#ifndef CORIO_NET_H
#define CORIO_NET_H
#include <corio.h>
#endif
