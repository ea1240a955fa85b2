/* SPDX-License-Identifier: MIT */
/*
 * tools/examples/upper-echo/upper.h - upper-echo's two parts, as its main.c
 * and the tests use them: the line protocol (struct ue_line, no I/O) and a
 * server on one shard (struct ue_server). main.c's opening comment states
 * the protocol; each call's contract is the comment at its code in upper.c.
 */
#ifndef UPPER_ECHO_UPPER_H
#define UPPER_ECHO_UPPER_H

#include <corio.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UE_MAX_LINE_DEFAULT (64 * 1024)

/* ---- the protocol (no I/O) ---------------------------------------------------- */

/* A growable byte buffer. */
struct ue_buf {
	char *p;
	size_t len, cap;
};

int ue_put(struct ue_buf *b, const void *p, size_t n); /* 0 or -ENOMEM */

/* One connection's line state. */
struct ue_line {
	struct ue_buf part; /* the line so far (no LF yet) */
	size_t max;         /* longest line answered, line ending excluded */
	bool skipping;      /* inside an over-long line: drop up to its LF */
};

void ue_line_init(struct ue_line *l, size_t max);
void ue_line_free(struct ue_line *l);
/* Feed received bytes; the answers to every completed line go to out. */
int ue_feed(struct ue_line *l, const char *p, size_t n, struct ue_buf *out);
/* End of stream: answer a last line that had no LF. */
int ue_finish(struct ue_line *l, struct ue_buf *out);

/* ---- a server on one shard ------------------------------------------------------ */

struct ue_server {
	const char *addr;   /* where to listen: "127.0.0.1:0" (port 0: any) */
	size_t max_line;    /* 0: UE_MAX_LINE_DEFAULT */
	uint64_t idle_ns;   /* 0: no idle timeout */
	uint64_t drain_ns;  /* after the drain: this long for lines under way
	                       (0: the runtime's drain deadline) */
	void (*ready)(struct ue_server *srv); /* optional: bound is filled */
	char bound[64];     /* out: the address it listens on */
	unsigned live;      /* connections served now */
};

/* Serve srv->addr on this shard until the drain or a cancel (corio_serve). */
int ue_serve(struct ue_server *srv);

#endif
