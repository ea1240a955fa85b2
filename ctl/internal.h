/* SPDX-License-Identifier: MIT */
/*
 * ctl/internal.h - the private interface of ctl/, the top area of the
 * library: the table of parts handed to core at start (ctl/ctl.c, which
 * also defines corio_start and corio_run), the control socket
 * (ctl/control.c), the HTTP /metrics server (ctl/metrics.c), and JSON and
 * Prometheus rendering of every area's counters (ctl/render.c).
 *
 * May include: tls/, net/, fs/, core/, timer/, uring/ and the public headers.
 * Nothing includes it. Not installed.
 */
#ifndef CORIO_CTL_INTERNAL_H
#define CORIO_CTL_INTERNAL_H

#include "core/internal.h"
#include "fs/internal.h"
#include "net/internal.h"
#include "tls/internal.h"

/* ctl's slot in s->parts[]: shard 0's control server, when there is one. */
#define CORIO__PART_CTL (CORIO__PART_FIRST_AREA + 2)

struct corio__control;

/* The control socket's counters (shard 0; owner-written, read by the stats
 * renderer from any thread with relaxed loads, like every area's). */
struct corio__ctl_stats {
	uint64_t clients;      /* connected now                                  */
	uint64_t refused;      /* turned away: CORIO_CONTROL_CLIENTS were connected */
	uint64_t idle_dropped; /* closed at the idle limit (no whole line in time) */
	uint64_t denied;       /* refused by the peer-credential check (@name)   */
	uint64_t too_long;     /* closed for a line over 255 bytes               */
	/* HTTP /metrics servers on this shard (ctl/metrics.c) */
	uint64_t metrics_evicted; /* slot given to a newer connection: no request yet */
	uint64_t metrics_refused; /* closed at accept: every slot was answering    */
};
/* Copy shard's control counters (zeros where no control socket runs). */
void corio__ctl_stats_get(struct corio_rt *rt, unsigned shard, struct corio__ctl_stats *out);

/* ctl's state on shard s (every shard: it holds the /metrics counters too):
 * 0, or -errno with the reason in s->err. */
int corio__control_init(struct corio__shard *s);
/* This shard's ctl counters, for the /metrics server (a shard's fiber). */
struct corio__ctl_stats *corio__ctl_stats_own(void);
/* Start the control socket on shard s (shard 0) at path, after
 * corio__control_init: 0, or -errno with the reason in s->err.
 * corio__control_fini() after the loop ended. */
int corio__control_start(struct corio__shard *s, const char *path);
void corio__control_fini(struct corio__shard *s);
void corio__control_release(struct corio__shard *s); /* in corio_wait */

/* The control protocol without I/O: lines of at most CORIO__CTL_LINE_MAX - 1
 * bytes before their LF, each one command. */
#define CORIO__CTL_LINE_MAX 256
enum {
	CORIO__CTL_MORE,     /* no complete line buffered yet            */
	CORIO__CTL_TOO_LONG, /* the buffer is full and holds no LF       */
	CORIO__CTL_EMPTY,    /* a blank line                             */
	CORIO__CTL_STATS,
	CORIO__CTL_PROM,
	CORIO__CTL_HELP,
	CORIO__CTL_UNKNOWN,
};
struct corio__ctl_lines {
	char buf[CORIO__CTL_LINE_MAX];
	size_t have;
};
/* Buffer up to n received bytes; returns how many fit. */
size_t corio__ctl_feed(struct corio__ctl_lines *r, const char *p, size_t n);
/* Take the next complete line and classify it (CORIO__CTL_*). */
int corio__ctl_next(struct corio__ctl_lines *r);

#endif
