/* SPDX-License-Identifier: MIT */
/*
 * tools/common/load.h - the engine-independent half of corio-load: message
 * contents and their verification, the send-time ring that turns echoed
 * bytes into latencies, the open-loop schedule, server CPU sampling, the
 * probe connection and the report.
 *
 * Messages. Message k of connection c is size bytes: a 12-byte header
 * (u32 connection id, u64 k, little-endian; cut short for smaller messages)
 * followed by a stretch of a fixed pseudo-random pattern that starts at an
 * offset depending on c and k. Every received byte is compared with what
 * must come next on that connection, so lost, duplicated, reordered or
 * cross-connection bytes are caught at the first wrong byte.
 *
 * Latency. The time of each message (its actual send time in closed loop,
 * its intended send time in open loop, so a stalled server cannot hide
 * behind a generator that waits for it: no coordinated omission) goes into
 * a per-connection ring when it is queued; the message's last echoed byte
 * takes it out and records now - t.
 *
 * UDP (tool_uconn). A "connection" is one connected UDP socket and message k
 * is datagram k, with the same contents, so a datagram is checked whole and
 * on its own. Each datagram in flight has a slot (by sequence number) with
 * its time and state; an echo that has not come p->loss_s after it was due
 * is counted lost and its slot freed, so a lost datagram neither hangs the
 * tool nor stalls a closed loop (which sends a replacement). Counted over
 * the whole run: lost; late (an echo that came after it was counted lost);
 * duplicated (a second echo of one datagram, or one too old to tell);
 * reordered (an echo that came after the echo of a later datagram).
 */
#ifndef CORIO_TOOLS_EB_LOAD_H
#define CORIO_TOOLS_EB_LOAD_H

#include "hist.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOOL_HDR 12
#define TOOL_PATTERN 4096 /* pattern length beyond the message size */

uint64_t tool_now_ns(void); /* CLOCK_MONOTONIC */

struct tool_params {
	const char *addr;   /* "127.0.0.1:port" */
	int port;
	unsigned conns;
	size_t size;
	unsigned pipeline;  /* closed loop: messages in flight per connection */
	double rate;        /* open loop: messages/s over all connections; 0: closed loop */
	double duration_s;  /* measured time */
	double warmup_s;    /* before it: traffic, nothing recorded */
	double drain_s;     /* after it: wait this long at most for echoes of sent messages */
	uint64_t start_ns;  /* set by the runner: when warm-up starts */
	int udp;            /* datagrams (tool_uconn) instead of a byte stream */
	double loss_s;      /* UDP: an echo this late is counted lost */
};

/* Per-worker (shard or thread) results; counters the progress line reads are atomic. */
struct tool_worker_stats {
	struct tool_hist hist;       /* measured window only */
	uint64_t msgs;             /* completed in the measured window */
	uint64_t late_sends;       /* open loop: sends that started >= 1 interval late */
	_Atomic uint64_t done_all; /* completed messages, any time (progress) */
	_Atomic uint64_t errors;   /* connection failures, verification errors */
	uint64_t lost, late, dup, reordered; /* UDP, whole run; written by the worker only */
	char err[160];             /* the first error */
};

struct tool_conn {
	unsigned id;
	size_t size;
	const struct tool_params *p;
	struct tool_worker_stats *ws;
	uint64_t tx;     /* messages queued for sending */
	uint64_t rx;     /* messages fully echoed */
	size_t rx_off;   /* bytes of message rx seen */
	uint64_t *ts;    /* send times, ring of ts_mask + 1 */
	uint32_t ts_mask;
	double interval_ns; /* open loop: between this connection's messages */
	double phase_ns;
	int failed;
};

/* Set up the shared pattern (call once). */
void tool_load_global_init(void);
/* Connection c of the run; ring sized for the pipeline / open-loop backlog. 0 or -ENOMEM. */
int tool_conn_init(struct tool_conn *c, unsigned id, const struct tool_params *p,
		 struct tool_worker_stats *ws);
void tool_conn_free(struct tool_conn *c);
/* Room for more messages in flight (the ring is not full)? */
unsigned tool_conn_room(const struct tool_conn *c);
/* Write the next n messages (n <= room) into dst (n * size bytes), stamping
 * each with t (closed loop) or its scheduled time (open loop, t ignored). */
void tool_conn_fill(struct tool_conn *c, unsigned n, unsigned char *dst, uint64_t t);
/* Open loop: the intended send time of message k. */
uint64_t tool_conn_due(const struct tool_conn *c, uint64_t k);
/* Open loop: how many messages are due at now (not yet queued), capped by room. */
unsigned tool_conn_due_count(const struct tool_conn *c, uint64_t now, uint64_t end_ns);
/* Account n received bytes at time now: verify them, record latencies of
 * the messages they complete. Returns the number completed, or -EPROTO on
 * a wrong byte (the error is recorded in the worker stats). */
int tool_conn_rx(struct tool_conn *c, const unsigned char *data, size_t n, uint64_t now);
/* Record a failure on c (first error kept). */
void tool_conn_fail(struct tool_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tool_worker_fail(struct tool_worker_stats *ws, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- UDP ---- */

struct tool_uconn {
	struct tool_conn c;     /* c.rx: the oldest datagram not yet echoed nor lost */
	uint64_t *seq;        /* per slot: the datagram it holds */
	unsigned char *state; /* per slot: TOOL_U_* */
	uint64_t top;         /* highest sequence number echoed + 1 */
};
enum { TOOL_U_FREE, TOOL_U_PENDING, TOOL_U_GOT, TOOL_U_LOST };

/* As tool_conn_init; p->size must be >= TOOL_HDR. 0 or -ENOMEM. */
int tool_uconn_init(struct tool_uconn *u, unsigned id, const struct tool_params *p,
		  struct tool_worker_stats *ws);
void tool_uconn_free(struct tool_uconn *u);
/* Write the next datagram (p->size bytes) into dst, stamped with t (closed
 * loop) or its scheduled time (open loop); needs tool_conn_room(&u->c). */
void tool_uconn_fill(struct tool_uconn *u, unsigned char *dst, uint64_t t);
/* The datagram just filled could not be sent (EAGAIN): forget it. */
void tool_uconn_unfill(struct tool_uconn *u);
/* One received datagram at time now: 1 when it is the first echo of a
 * datagram in flight (a slot is free again), 0 for a duplicate or a late
 * one (counted), -EPROTO when its contents are wrong (recorded as an error). */
int tool_uconn_rx(struct tool_uconn *u, const unsigned char *data, size_t n, uint64_t now);
/* Count as lost every datagram in flight whose echo is p->loss_s overdue at
 * now (UINT64_MAX: all of them): how many were. */
unsigned tool_uconn_expire(struct tool_uconn *u, uint64_t now);
/* When the oldest datagram in flight will be lost, or UINT64_MAX for none. */
uint64_t tool_uconn_next_loss(const struct tool_uconn *u);

/* UDP probe: send one datagram from a fresh socket, expect it back within
 * 2 s: 0, or -errno with a line on stderr. */
int tool_probe_udp(const struct tool_params *p);

/* Warm-up end / measurement end / drain end, absolute. */
uint64_t tool_warm_end(const struct tool_params *p);
uint64_t tool_meas_end(const struct tool_params *p);
uint64_t tool_drain_end(const struct tool_params *p);

/* Connect with a plain blocking socket, send one message, check the echo,
 * close: 0, or -errno with a line on stderr. Catches a dead server or a
 * broken echo before any load starts. */
int tool_probe(const struct tool_params *p, int sockperf);

/* CPU time (ns) used so far by every thread of process pid: the sum of
 * /proc/pid/task/x/schedstat (ns) or else /proc/pid/stat utime+stime.
 * -1 when the process cannot be read. */
int64_t tool_proc_cpu_ns(int pid);
/* This process's own CPU time (getrusage). */
int64_t tool_self_cpu_ns(void);

struct tool_report {
	const char *engine;
	const char *label;   /* free text from --label */
	unsigned workers;
	const char *cpus;
	int busy_poll;
	struct tool_hist hist;
	uint64_t msgs, errors, late_sends;
	uint64_t lost, late, dup, reordered; /* UDP */
	double seconds;      /* measured window */
	int64_t server_cpu_ns; /* -1: not measured */
	int64_t client_cpu_ns;
	const char *tls;         /* the TLS version agreed ("TLSv1.3"), or NULL: plain */
	uint64_t tls_handshakes; /* the client's completed handshakes */
	char first_err[160];
};
/* Human-readable or one JSON object on a line. */
void tool_report_print(FILE *f, const struct tool_report *r, const struct tool_params *p, int json);

#endif
