/* SPDX-License-Identifier: MIT */
/*
 * uring-echo - the TCP echo server a careful user would write by hand on raw
 * liburing, with no corio at all: the floor corio-echo has to beat.
 *
 * One thread per CPU, each with its own ring and SO_REUSEPORT listener:
 *  - ring: SINGLE_ISSUER | DEFER_TASKRUN, falling back to COOP_TASKRUN and
 *    then to no flags on kernels that refuse them;
 *  - multishot accept; TCP_NODELAY on every connection;
 *  - multishot recv into a provided-buffer ring (--bufs x --buf-size);
 *  - each received buffer is sent straight back from where it landed, with
 *    one send in flight per connection (a FIFO of buffer ids behind it keeps
 *    the bytes in order) and short sends resumed where they stopped;
 *  - a buffer goes back to the ring only after its bytes are all sent, and
 *    only when its CQE carried IORING_CQE_F_BUFFER;
 *  - a connection holding --max-held buffers (its peer does not read) has
 *    its receive cancelled until the queue drains, so one peer cannot take
 *    every buffer of the thread; an ENOBUFS stop is re-armed when a buffer
 *    comes back, never in a loop.
 * Callbacks, no fibers: a completion's user_data is the connection pointer
 * with the operation in its low bits.
 *
 * --udp: one SO_REUSEPORT UDP socket per thread and one multishot recvmsg
 * on it into the same buffer ring (each buffer: struct io_uring_recvmsg_out,
 * the sender's address, the payload; --buf-size bounds the datagram); each
 * datagram is sent back to its sender with a sendmsg straight from its
 * buffer (one msghdr per buffer id, so no allocation), and the buffer goes
 * back to the ring when that send completes. An ENOBUFS stop is re-armed
 * when a buffer comes back.
 *
 * Binds 127.0.0.1 only. Prints "uring-echo: listening on 127.0.0.1:PORT ..."
 * and stops cleanly on SIGINT/SIGTERM (or --timeout), printing per-thread
 * counters to stderr.
 */
#include "common/opt.h"
#include "common/proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256
#define BGID 1

enum { OP_ACCEPT = 1, OP_RECV, OP_SEND, OP_CANCEL, OP_STOP, OP_URECV, OP_USEND, OP_MASK = 7 };

struct conn {
	int fd;
	bool recv_armed;  /* the multishot recv has not sent its final CQE */
	bool send_busy;   /* a send is in flight                            */
	bool closing;     /* EOF or error seen: close when nothing is in flight */
	bool starved;     /* on the thread's list of ENOBUFS-stopped receives */
	bool cancelling;  /* its recv is being cancelled (too many held)     */
	uint32_t held;    /* buffers queued for sending                      */
	int32_t q_head, q_tail; /* FIFO of buffer ids, linked via w->next[]  */
	uint32_t sent;    /* bytes of the head buffer already sent           */
	struct conn *starved_next;
};

struct worker {
	pthread_t th;
	unsigned idx;
	int cpu;
	int lfd;
	struct io_uring ring;
	struct io_uring_buf_ring *br;
	unsigned char *bufs;
	int32_t *next;    /* per buffer id: the next one in its connection's FIFO */
	uint32_t *len;    /* per buffer id: bytes received into it             */
	struct conn *starved;
	uint64_t stopbuf;
	bool stopping;
	bool urecv_armed; /* --udp: the multishot recvmsg is armed */
	bool ustarved;    /* --udp: it stopped on ENOBUFS */
	struct msghdr rmsg;               /* --udp: the recvmsg layout */
	struct { struct msghdr m; struct iovec iov; } *smsg; /* --udp: per buffer id */
	unsigned flags;   /* ring set-up flags in use */
	int err;
	uint64_t accepts, recvs, bytes_in, sends, short_sends, enobufs, held_stops, errors;
	unsigned long live;
};

static struct {
	unsigned threads;
	int port;
	unsigned nbufs, buf_size, max_held, entries;
	int busy;
	int udp;
	int stopfd;
} g;

static void *tag(void *p, unsigned op)
{
	return (void *)((uintptr_t)p | op);
}

static struct io_uring_sqe *get_sqe(struct worker *w)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);

	if (!sqe) { /* SQ full: push what is queued, then there is room */
		io_uring_submit(&w->ring);
		sqe = io_uring_get_sqe(&w->ring);
	}
	return sqe;
}

static void arm_accept(struct worker *w)
{
	struct io_uring_sqe *sqe = get_sqe(w);

	io_uring_prep_multishot_accept(sqe, w->lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data(sqe, tag(w, OP_ACCEPT));
}

static void arm_recv(struct worker *w, struct conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(w);

	io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = BGID;
	io_uring_sqe_set_data(sqe, tag(c, OP_RECV));
	c->recv_armed = true;
}

static void send_head(struct worker *w, struct conn *c)
{
	int32_t bid = c->q_head;
	struct io_uring_sqe *sqe = get_sqe(w);

	io_uring_prep_send(sqe, c->fd, w->bufs + (size_t)bid * g.buf_size + c->sent,
			   w->len[bid] - c->sent, MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, tag(c, OP_SEND));
	c->send_busy = true;
	w->sends++;
}

static void buf_return(struct worker *w, int32_t bid)
{
	io_uring_buf_ring_add(w->br, w->bufs + (size_t)bid * g.buf_size, g.buf_size,
			      (unsigned short)bid, io_uring_buf_ring_mask(g.nbufs), 0);
	io_uring_buf_ring_advance(w->br, 1);
}

/* A buffer came back: re-arm one receive that ENOBUFS stopped. */
static void unstarve(struct worker *w)
{
	struct conn *c = w->starved;

	if (!c)
		return;
	w->starved = c->starved_next;
	c->starved = false;
	if (!c->closing && !c->recv_armed)
		arm_recv(w, c);
}

static void maybe_close(struct worker *w, struct conn *c)
{
	if (!c->closing || c->recv_armed || c->send_busy || c->starved)
		return;
	while (c->q_head >= 0) {
		int32_t bid = c->q_head;

		c->q_head = w->next[bid];
		buf_return(w, bid);
		unstarve(w);
	}
	close(c->fd);
	w->live--;
	free(c);
}

static void start_closing(struct worker *w, struct conn *c)
{
	c->closing = true;
	if (c->recv_armed && !c->cancelling) {
		struct io_uring_sqe *sqe = get_sqe(w);

		io_uring_prep_cancel(sqe, tag(c, OP_RECV), 0);
		io_uring_sqe_set_data(sqe, tag(c, OP_CANCEL));
		c->cancelling = true;
	}
	if (c->starved) { /* unlink it from the starved list */
		struct conn **pp = &w->starved;

		while (*pp != c)
			pp = &(*pp)->starved_next;
		*pp = c->starved_next;
		c->starved = false;
	}
	maybe_close(w, c);
}

static void on_accept(struct worker *w, int res, unsigned flags)
{
	struct conn *c;
	int one = 1;

	if (!(flags & IORING_CQE_F_MORE) && !w->stopping)
		arm_accept(w);
	if (res < 0) {
		w->errors++;
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(res);
		w->errors++;
		return;
	}
	setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = res;
	c->q_head = c->q_tail = -1;
	w->accepts++;
	w->live++;
	arm_recv(w, c);
}

static void on_recv(struct worker *w, struct conn *c, int res, unsigned flags)
{
	if (!(flags & IORING_CQE_F_MORE)) {
		c->recv_armed = false;
		c->cancelling = false;
	}
	if (flags & IORING_CQE_F_BUFFER) {
		int32_t bid = (int32_t)(flags >> IORING_CQE_BUFFER_SHIFT);

		if (res <= 0 || c->closing) { /* an empty buffer, or no one to send to */
			buf_return(w, bid);
			unstarve(w);
		} else {
			w->recvs++;
			w->bytes_in += (uint64_t)res;
			w->len[bid] = (uint32_t)res;
			w->next[bid] = -1;
			if (c->q_tail >= 0)
				w->next[c->q_tail] = bid;
			else
				c->q_head = bid;
			c->q_tail = bid;
			c->held++;
			if (!c->send_busy)
				send_head(w, c);
		}
	}
	if (res == 0 || (res < 0 && res != -ENOBUFS && res != -ECANCELED)) {
		if (res < 0)
			w->errors++;
		start_closing(w, c);
		return;
	}
	if (c->recv_armed || c->closing) {
		/* Too much queued for a peer that does not read: stop receiving. */
		if (c->recv_armed && !c->cancelling && c->held >= g.max_held) {
			struct io_uring_sqe *sqe = get_sqe(w);

			io_uring_prep_cancel(sqe, tag(c, OP_RECV), 0);
			io_uring_sqe_set_data(sqe, tag(c, OP_CANCEL));
			c->cancelling = true;
			w->held_stops++;
		}
		maybe_close(w, c);
		return;
	}
	/* The multishot receive ended: ENOBUFS, our cancel, or the kernel's choice. */
	if (res == -ENOBUFS) {
		w->enobufs++;
		c->starved = true;
		c->starved_next = w->starved;
		w->starved = c;
	} else if (c->held < g.max_held) {
		arm_recv(w, c);
	} /* else: re-armed by on_send once the queue drains */
}

static void on_send(struct worker *w, struct conn *c, int res)
{
	int32_t bid = c->q_head;

	c->send_busy = false;
	if (res < 0) {
		w->errors++;
		start_closing(w, c);
		return;
	}
	c->sent += (uint32_t)res;
	if (c->sent < w->len[bid]) {
		w->short_sends++;
	} else {
		c->sent = 0;
		c->q_head = w->next[bid];
		if (c->q_head < 0)
			c->q_tail = -1;
		c->held--;
		buf_return(w, bid);
		unstarve(w);
		if (!c->recv_armed && !c->closing && !c->starved && c->held == 0)
			arm_recv(w, c);
	}
	if (c->closing) {
		maybe_close(w, c);
		return;
	}
	if (c->q_head >= 0)
		send_head(w, c);
}

/* ---- UDP ---- */

static void arm_urecv(struct worker *w)
{
	struct io_uring_sqe *sqe = get_sqe(w);

	io_uring_prep_recvmsg_multishot(sqe, w->lfd, &w->rmsg, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = BGID;
	io_uring_sqe_set_data(sqe, tag(w, OP_URECV));
	w->urecv_armed = true;
}

static void ubuf_return(struct worker *w, int32_t bid)
{
	buf_return(w, bid);
	if (w->ustarved && !w->stopping) {
		w->ustarved = false;
		arm_urecv(w);
	}
}

static void on_urecv(struct worker *w, int res, unsigned flags)
{
	if (!(flags & IORING_CQE_F_MORE))
		w->urecv_armed = false;
	if (flags & IORING_CQE_F_BUFFER) {
		int32_t bid = (int32_t)(flags >> IORING_CQE_BUFFER_SHIFT);
		void *b = w->bufs + (size_t)bid * g.buf_size;
		struct io_uring_recvmsg_out *o =
			res > 0 ? io_uring_recvmsg_validate(b, res, &w->rmsg) : NULL;
		struct io_uring_sqe *sqe;

		if (!o) {
			w->errors++;
			ubuf_return(w, bid);
		} else {
			w->recvs++;
			w->smsg[bid].iov.iov_base = io_uring_recvmsg_payload(o, &w->rmsg);
			w->smsg[bid].iov.iov_len = io_uring_recvmsg_payload_length(o, res, &w->rmsg);
			w->bytes_in += w->smsg[bid].iov.iov_len;
			w->smsg[bid].m.msg_name = io_uring_recvmsg_name(o);
			w->smsg[bid].m.msg_namelen = o->namelen < w->rmsg.msg_namelen
							     ? o->namelen : w->rmsg.msg_namelen;
			w->smsg[bid].m.msg_iov = &w->smsg[bid].iov;
			w->smsg[bid].m.msg_iovlen = 1;
			sqe = get_sqe(w);
			io_uring_prep_sendmsg(sqe, w->lfd, &w->smsg[bid].m, 0);
			io_uring_sqe_set_data64(sqe, (uint64_t)bid << 8 | OP_USEND);
			w->sends++;
		}
	}
	if (w->urecv_armed || w->stopping)
		return;
	if (res == -ENOBUFS) {
		w->enobufs++;
		w->ustarved = true; /* re-armed when a buffer comes back */
	} else {
		if (res < 0 && res != -ECANCELED)
			w->errors++;
		arm_urecv(w);
	}
}

static void on_usend(struct worker *w, uint64_t ud, int res)
{
	if (res < 0)
		w->errors++;
	ubuf_return(w, (int32_t)(ud >> 8));
}

static void dispatch(struct worker *w, struct io_uring_cqe *cqe)
{
	uintptr_t ud = (uintptr_t)io_uring_cqe_get_data(cqe);
	void *p = (void *)(ud & ~(uintptr_t)OP_MASK);

	switch (ud & OP_MASK) {
	case OP_URECV:
		on_urecv(w, cqe->res, cqe->flags);
		break;
	case OP_USEND:
		on_usend(w, ud, cqe->res);
		break;
	case OP_ACCEPT:
		on_accept(w, cqe->res, cqe->flags);
		break;
	case OP_RECV:
		on_recv(w, p, cqe->res, cqe->flags);
		break;
	case OP_SEND:
		on_send(w, p, cqe->res);
		break;
	case OP_STOP:
		w->stopping = true;
		break;
	default: /* OP_CANCEL: the recv's own final CQE does the work */
		break;
	}
}

static int ring_init(struct worker *w)
{
	static const unsigned ladder[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, /* 6.1+ */
		IORING_SETUP_COOP_TASKRUN,                               /* 5.19+ */
		0,
	};
	struct io_uring_buf_reg reg;
	size_t ring_bytes = (size_t)g.nbufs * sizeof(struct io_uring_buf);
	int ret = -EINVAL;

	for (unsigned i = 0; i < sizeof(ladder) / sizeof(ladder[0]); i++) {
		struct io_uring_params p;

		memset(&p, 0, sizeof(p));
		p.flags = ladder[i] | IORING_SETUP_CQSIZE;
		p.cq_entries = g.entries * 8;
		ret = io_uring_queue_init_params(g.entries, &w->ring, &p);
		if (ret == 0) {
			w->flags = ladder[i];
			break;
		}
	}
	if (ret)
		return ret;
	w->br = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	w->bufs = mmap(NULL, (size_t)g.nbufs * g.buf_size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	w->next = calloc(g.nbufs, sizeof(*w->next));
	w->len = calloc(g.nbufs, sizeof(*w->len));
	w->smsg = g.udp ? calloc(g.nbufs, sizeof(*w->smsg)) : NULL;
	if (w->br == MAP_FAILED || w->bufs == MAP_FAILED || !w->next || !w->len ||
	    (g.udp && !w->smsg))
		return -ENOMEM;
	w->rmsg.msg_namelen = sizeof(struct sockaddr_in); /* we bind 127.0.0.1 */
	io_uring_buf_ring_init(w->br);
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uint64_t)(uintptr_t)w->br;
	reg.ring_entries = g.nbufs;
	reg.bgid = BGID;
	ret = io_uring_register_buf_ring(&w->ring, &reg, 0);
	if (ret)
		return ret;
	for (unsigned i = 0; i < g.nbufs; i++)
		io_uring_buf_ring_add(w->br, w->bufs + (size_t)i * g.buf_size, g.buf_size,
				      (unsigned short)i, io_uring_buf_ring_mask(g.nbufs), (int)i);
	io_uring_buf_ring_advance(w->br, (int)g.nbufs);
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct io_uring_sqe *sqe;
	int ret = ring_init(w);

	if (ret) {
		w->err = ret;
		return NULL;
	}
	if (g.udp)
		arm_urecv(w);
	else
		arm_accept(w);
	sqe = get_sqe(w);
	io_uring_prep_read(sqe, g.stopfd, &w->stopbuf, sizeof(w->stopbuf), 0);
	io_uring_sqe_set_data(sqe, tag(w, OP_STOP));
	while (!w->stopping) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;

		if (g.busy)
			ret = io_uring_submit_and_get_events(&w->ring);
		else
			ret = io_uring_submit_and_wait(&w->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			w->err = ret;
			break;
		}
		io_uring_for_each_cqe(&w->ring, head, cqe) {
			dispatch(w, cqe);
			n++;
		}
		io_uring_cq_advance(&w->ring, n);
	}
	/* Process exit closes the sockets; the ring goes with the process too. */
	return NULL;
}

static struct worker workers[MAX_THREADS];
static int cpu[MAX_THREADS];
static struct tool_cpus cpus = { cpu, MAX_THREADS, 0, NULL };
static double timeout;

/* --bufs and --entries: a count in [1 or 8, 32768] that is a power of two. */
static int pow2(const char *label, const char *s, void *to)
{
	uint64_t v;

	if (tool_opt_count(label, s, to == &g.entries ? 8 : 1, 32768, &v))
		return -EINVAL;
	if (v & (v - 1)) {
		fprintf(stderr, "uring-echo: %s: %s is not a power of two\n", label, s);
		return -EINVAL;
	}
	*(unsigned *)to = (unsigned)v;
	return 0;
}

static int parse_options(int argc, char **argv)
{
	const struct tool_opt opts[] = {
		{ TOOL_OPT_COUNT("threads", 't', g.threads, 1, MAX_THREADS, "N",
				 "threads, one ring and listener each (1)") },
		{ TOOL_OPT_CPUS("cpus", 'C', cpus, "LIST",
				"pin thread i to the i-th CPU of LIST (0-3,6)") },
		{ TOOL_OPT_COUNT("port", 'p', g.port, 0, 65535, "N",
				 "TCP port on 127.0.0.1; 0 picks one (0)") },
		{ TOOL_OPT_FLAG("busy-poll", 'b', g.busy,
				"spin on the completion queue instead of sleeping") },
		{ TOOL_OPT_FLAG("udp", 'u', g.udp,
				"UDP echo: one SO_REUSEPORT socket per thread, multishot\n"
				"recvmsg, each datagram sent back to its sender") },
		{ TOOL_OPT_CALL("bufs", 0, pow2, &g.nbufs, "N",
				"provided buffers per thread, power of two (4096)") },
		{ TOOL_OPT_SIZE("buf-size", 0, g.buf_size, 64, 1u << 20, "N",
				"bytes per buffer (4k)") },
		{ TOOL_OPT_COUNT("max-held", 0, g.max_held, 1, 32768, "N",
				 "buffers one connection may hold before its receive\n"
				 "is paused (64)") },
		{ TOOL_OPT_CALL("entries", 0, pow2, &g.entries, "N",
				"submission queue entries (1024)") },
		{ TOOL_OPT_SECONDS("timeout", 'T', timeout, 0.001, 1e6, "SECS",
				   "stop after SECS (default: run until SIGINT/SIGTERM)") },
		{ 0 },
	};
	const struct tool_cli cli = { "uring-echo", "[options]", NULL, opts };

	g.threads = 1;
	g.nbufs = 4096;
	g.buf_size = 4096;
	g.max_held = 64;
	g.entries = 1024;
	return tool_opt_parse(&cli, argc, argv);
}

/* The stop eventfd and one listener per thread, in the main thread (port 0
 * is resolved by the first): 0 or 1. */
static int listen_all(void)
{
	g.stopfd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (g.stopfd < 0) {
		perror("uring-echo: eventfd");
		return 1;
	}
	for (unsigned i = 0; i < g.threads; i++) {
		int fd = tool_listen_loopback(g.udp ? SOCK_DGRAM : SOCK_STREAM, g.port, 0);

		if (fd < 0) {
			fprintf(stderr, "uring-echo: listen on 127.0.0.1:%d: %s\n", g.port, strerror(-fd));
			return 1;
		}
		if (!g.port)
			g.port = tool_local_port(fd);
		workers[i].idx = i;
		workers[i].lfd = fd;
		workers[i].cpu = cpus.n ? cpu[i % cpus.n] : -1;
	}
	return 0;
}

/* Wake every thread, join them, print their counters: the exit status. */
static int stop_all(void)
{
	int ret = 0;

	/* A semaphore eventfd: each thread's read takes one count, so one
	 * write per thread wakes every thread. */
	for (unsigned i = 0; i < g.threads; i++) {
		uint64_t v = 1;

		if (write(g.stopfd, &v, sizeof(v)) != sizeof(v))
			perror("uring-echo: eventfd write");
	}
	for (unsigned i = 0; i < g.threads; i++) {
		struct worker *w = &workers[i];

		pthread_join(w->th, NULL);
		if (w->err) {
			fprintf(stderr, "uring-echo: thread %u: %s\n", i, strerror(-w->err));
			ret = 1;
		}
		fprintf(stderr,
			"uring-echo: thread %u: ring flags 0x%x, %llu accepts, %llu recvs, %llu bytes, "
			"%llu sends (%llu short), %llu enobufs stops, %llu held stops, %llu errors\n",
			i, w->flags, (unsigned long long)w->accepts, (unsigned long long)w->recvs,
			(unsigned long long)w->bytes_in, (unsigned long long)w->sends,
			(unsigned long long)w->short_sends, (unsigned long long)w->enobufs,
			(unsigned long long)w->held_stops, (unsigned long long)w->errors);
	}
	return ret;
}

int main(int argc, char **argv)
{
	int ret;

	ret = parse_options(argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	if (listen_all())
		return 1;
	tool_block_stop_signals();
	for (unsigned i = 0; i < g.threads; i++) {
		ret = tool_thread_pinned(&workers[i].th, workers[i].cpu, worker_main, &workers[i]);
		if (ret) {
			fprintf(stderr, "uring-echo: pthread_create: %s\n", strerror(ret));
			return 1;
		}
	}
	printf("uring-echo: listening on 127.0.0.1:%d threads=%u cpus=", g.port, g.threads);
	for (unsigned i = 0; i < g.threads; i++)
		printf("%s%d", i ? "," : "", workers[i].cpu);
	printf(" proto=%s idle=%s bufs=%ux%u max-held=%u pid=%d\n", g.udp ? "udp" : "tcp",
	       g.busy ? "busy-poll" : "block", g.nbufs,
	       g.buf_size, g.max_held, (int)getpid());
	fflush(stdout);
	/* SIGINT/SIGTERM or the timeout; EINTR (a tracer attaching) is not a stop */
	tool_wait_stop(timeout);
	return stop_all();
}
