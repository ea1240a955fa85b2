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
	struct corio_listener *l;
	size_t max_line;    /* 0: UE_MAX_LINE_DEFAULT */
	uint64_t idle_ns;   /* 0: no idle timeout */
	struct corio_group conns;
};

/* Listen on host_port (REUSEPORT: every shard on the same port). */
int ue_listen(struct ue_server *srv, const char *host_port);
/* Accept and serve until cancelled; then close every connection. */
int ue_serve(struct ue_server *srv);

#endif
