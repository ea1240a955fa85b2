/* SPDX-License-Identifier: MIT */
/*
 * tools/common/sockperf.h - the reflector side of sockperf's framing, shared
 * by corio-echo, epoll-echo and uring-echo (--sockperf, --udp --sockperf).
 *
 * Every sockperf message starts with a 14-byte big-endian header: u64
 * sequence number, u16 flags (0x1 sent by the client, 0x2 reply wanted,
 * 0x4 warm-up), u32 length of the whole message, header included. Messages
 * follow each other with no other framing. The reflector sends a message
 * back, with the client bit cleared, only when the client bit and the reply
 * bit are set and the warm-up bit is not - what `sockperf server` 3.7 does
 * (a message without the client bit is another server's reply and is never
 * answered, so two reflectors cannot ping-pong forever), so `sockperf
 * ping-pong` (a reply for every message) and `sockperf under-load` (a reply
 * for every Nth) both work. The TCP parser takes the stream in any pieces (a
 * header may be split across receives) and never trusts the length field
 * beyond TOOL_SP_MAX_MSG.
 *
 * UDP: sockperf's client sends one message per datagram and the reply goes
 * back to the sender as one datagram. sockperf server 3.7 runs the stream
 * parser over each socket's datagrams, so a message split over two
 * datagrams is joined, even across senders, and stray bytes after a message
 * corrupt the next datagram; we do not copy that: tool_sp_dgram_next() takes
 * each datagram alone, reflects every whole message in it (sockperf also
 * answers two messages packed in one datagram, each with its own datagram)
 * and drops a tail that is not a whole message.
 */
#ifndef CORIO_TOOLS_EB_SOCKPERF_H
#define CORIO_TOOLS_EB_SOCKPERF_H

#include <stddef.h>
#include <stdint.h>

#define TOOL_SP_HDR      14
#define TOOL_SP_MAX_MSG  (1u << 20) /* sockperf's own limit is 65 KB; be generous */
#define TOOL_SP_F_CLIENT 0x1u
#define TOOL_SP_F_REPLY  0x2u
#define TOOL_SP_F_WARMUP 0x4u

/* A growable output buffer. */
struct tool_buf {
	unsigned char *p;
	size_t len, cap;
};
/* Append n bytes: 0 or -ENOMEM. */
int tool_buf_put(struct tool_buf *b, const void *src, size_t n);
void tool_buf_free(struct tool_buf *b);

struct tool_sp {
	unsigned char hdr[TOOL_SP_HDR];
	uint32_t have;  /* bytes of the current message seen so far */
	uint32_t len;   /* its length once the header is complete */
	int reply;      /* the current message is reflected */
	uint64_t msgs;  /* messages seen, replies sent */
	uint64_t replies;
};

void tool_sp_init(struct tool_sp *sp);
/* Consume n bytes of the stream; the replies they complete (or parts of
 * them) are appended to out. 0, -EPROTO for a length field outside
 * 14..TOOL_SP_MAX_MSG (the connection should be closed), -ENOMEM. */
int tool_sp_feed(struct tool_sp *sp, const unsigned char *in, size_t n, struct tool_buf *out);

/* Does a message with these flags get a reply? */
static inline int tool_sp_wants_reply(unsigned flags)
{
	return (flags & (TOOL_SP_F_CLIENT | TOOL_SP_F_REPLY | TOOL_SP_F_WARMUP)) ==
	       (TOOL_SP_F_CLIENT | TOOL_SP_F_REPLY);
}

/* UDP: the next message to reflect in the datagram d[0..n), from *pos on.
 * Returns 1 with the reply at d + *off, *len bytes (its client bit cleared
 * in place: send those bytes back to the sender as one datagram), 0 when no
 * message is left, -EPROTO when the rest of the datagram is not a whole
 * message (shorter than a header or than its length field; it is dropped,
 * and the next call returns 0). *pos starts at 0 for each datagram. */
int tool_sp_dgram_next(unsigned char *d, size_t n, size_t *pos, size_t *off, size_t *len);

#endif
