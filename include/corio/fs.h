/* SPDX-License-Identifier: MIT */
/* corio/fs.h - placeholder: filled in by its issue. Include <corio.h>. */
#ifndef CORIO_FS_H
#define CORIO_FS_H
#include <corio.h>
#endif
