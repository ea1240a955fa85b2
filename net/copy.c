/* SPDX-License-Identifier: MIT */
/*
 * net/copy.c - corio_copy_bidi and corio_stream_copy_bidi: bytes both ways
 * between two connections, half-close carried (issue 35, part 3).
 *
 * Two member fibers in a group with CANCEL_ON_ERROR, one per direction,
 * and the caller waiting for the group: an error in one direction cancels
 * the other; the total deadline is a scope around the wait (its end
 * cancels both, corio_group_wait's contract); the idle deadline is a timer
 * on the loop that reads the byte counters every idle_ns / 4 and cancels
 * the group when they stood still for idle_ns. Every record lives on the
 * caller's stack, which outlives the members: corio_group_wait returns
 * only once none is left, however it ends.
 *
 * The splice path: a socket whose bytes corio holds none of (no receive
 * armed or queued, nothing queued to send) is read with a non-blocking
 * splice(2) into a pipe and the pipe written with splice(2) into the other
 * socket, readiness waited for with corio_poll: no byte crosses user
 * space. The fds are made O_NONBLOCK for good, as corio_sendfile does;
 * corio's own calls do not depend on the flag.
 */
#include "net/internal.h"

#include <corio/copy.h>
#include <corio/select.h>
#include <corio/stream.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define COPY_BUF        (16u * 1024)

struct copy_dir {
	struct corio_sock *src, *dst;       /* sockets, or */
	struct corio_stream *ssrc, *sdst;   /* streams */
	uint64_t bytes;
	int end;        /* 1 until reading src ended: 0 (EOF) or -errno */
	bool splice;
	bool spliced;   /* it moved bytes with splice */
};

struct copy {
	struct copy_dir d[2];
	struct corio_group g;
	struct corio_timer idle;
	uint64_t idle_ns, last_bytes, last_move_ns;
	bool idle_fired;
};

/* ---- the splice path --------------------------------------------------------- */

static bool splice_ok(const struct corio_sock *s)
{
	return s->type == SOCK_STREAM && !s->buffered && s->r.state == NET_IDLE && !s->qhead &&
	       !s->has_term && !s->sq_head && !s->readers;
}

/*
 * splice(2) without glibc's wrapper (uring/sys.h says why: in a process
 * with more than one thread it switches asynchronous cancellation on and
 * off around the call, about 30 instructions), since a short connection
 * through corio_copy_bidi makes about 8 splices. Sanitizer builds and
 * other architectures call libc. -1 and errno, as the wrapper.
 */
static ssize_t splice_fd(int in, int out, size_t len)
{
#ifdef CORIO__SYS_RAW
	return corio__nc(corio__sys6(SYS_splice, in, 0, out, 0, (long)len,
				     SPLICE_F_MOVE | SPLICE_F_NONBLOCK));
#else
	return splice(in, NULL, out, NULL, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
#endif
}

/* Empty the pipe (inpipe bytes) into dst: 0 or -errno. */
static int pipe_drain(struct copy_dir *d, int pr, size_t inpipe)
{
	while (inpipe) {
		ssize_t w = splice_fd(pr, d->dst->fd, inpipe);
		int ret;

		if (w > 0) {
			inpipe -= (size_t)w;
			d->dst->tx += (uint64_t)w;
			d->bytes += (uint64_t)w;
			CORIO__STAT_ADD(d->dst->net->stats.bytes_out, (uint64_t)w);
			CORIO__STAT_ADD(d->dst->net->stats.ops_out, 1);
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w == 0 || errno != EAGAIN)
			return corio__net_err(d->dst->net, w == 0 ? -EPIPE : -errno);
		ret = corio_poll(d->dst->fd, POLLOUT);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static int dir_splice(struct copy_dir *d)
{
	struct corio__net *n = d->src->net;
	bool clean = true;
	int p[2], ret;

	if ((ret = corio__sock_nonblock(d->src)) || (ret = corio__sock_nonblock(d->dst)))
		return ret;
	/* a pipe from the shard's pool (corio_sendfile's): no pipe2 and two
	 * closes per connection; SPLICE_F_NONBLOCK makes its side non-blocking */
	if ((ret = corio__net_pipe_get(n, p)))
		return ret;
	d->spliced = true;
	for (;;) {
		ssize_t r = splice_fd(d->src->fd, p[1], n->pipe_size);

		if (r > 0) {
			d->src->rx += (uint64_t)r;
			CORIO__STAT_ADD(d->src->net->stats.bytes_in, (uint64_t)r);
			CORIO__STAT_ADD(d->src->net->stats.ops_in, 1);
			if ((ret = pipe_drain(d, p[0], (size_t)r))) {
				clean = false; /* bytes may be left in it: not pooled */
				break;
			}
			continue;
		}
		if (r == 0) { /* end of stream: carried as a half-close */
			d->end = 0;
			ret = corio_shutdown_write(d->dst);
			break;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN) {
			ret = d->end = corio__net_err(d->src->net, -errno);
			break;
		}
		ret = corio_poll(d->src->fd, POLLIN | POLLRDHUP);
		if (ret < 0)
			break;
	}
	corio__net_pipe_put(n, p, clean);
	return ret < 0 ? ret : 0;
}

/* ---- the ring path and the stream path ------------------------------------------ */

static int dir_ring(struct copy_dir *d)
{
	for (;;) {
		struct corio_buf b;
		ssize_t n = corio_recv_buf(d->src, &b);
		int ret;

		if (n == 0) {
			d->end = 0;
			return corio_shutdown_write(d->dst);
		}
		if (n < 0) {
			if (n != -ECANCELED && n != -ETIMEDOUT)
				d->end = (int)n;
			return (int)n;
		}
		ret = corio_send_buf(d->dst, &b); /* takes b, on error too */
		if (ret)
			return ret;
		d->bytes += (uint64_t)n;
	}
}

static int dir_stream(struct copy_dir *d)
{
	char buf[COPY_BUF];

	for (;;) {
		ssize_t n = corio_stream_read(d->ssrc, buf, sizeof(buf)), w;

		if (n == 0) {
			d->end = 0;
			return corio_stream_shutdown_write(d->sdst);
		}
		if (n < 0) {
			if (n != -ECANCELED && n != -ETIMEDOUT)
				d->end = (int)n;
			return (int)n;
		}
		w = corio_stream_write(d->sdst, buf, (size_t)n);
		if (w < 0)
			return (int)w;
		/* nothing more at hand: send what we have before we wait */
		if (!corio_stream_buffered(d->ssrc) && (w = corio_stream_flush(d->sdst)) < 0)
			return (int)w;
		d->bytes += (uint64_t)n;
	}
}

static int dir_main(void *arg)
{
	struct copy_dir *d = arg;

	if (d->ssrc)
		return dir_stream(d);
	return d->splice ? dir_splice(d) : dir_ring(d);
}

/* ---- the call ------------------------------------------------------------------- */

static uint64_t copy_moved(const struct copy *c)
{
	uint64_t n = 0;

	for (int i = 0; i < 2; i++) {
		const struct copy_dir *d = &c->d[i];

		if (d->src) {
			n += d->src->rx + d->src->tx;
		} else {
			struct corio_stream_stats s;

			if (!corio_stream_stats_get(d->ssrc, &s))
				n += s.bytes_in + s.bytes_out;
		}
	}
	return n;
}

static void copy_idle_tick(struct corio_timer *t, void *arg, int res)
{
	struct copy *c = arg;
	uint64_t now = corio_now_ns(), b;

	(void)t;
	if (res < 0)
		return;
	b = copy_moved(c);
	if (b != c->last_bytes) {
		c->last_bytes = b;
		c->last_move_ns = now;
	} else if (now - c->last_move_ns >= c->idle_ns) {
		c->idle_fired = true;
		corio_timer_cancel(&c->idle);
		corio_group_cancel(&c->g);
	}
}

static int copy_check(const char *who, const void *a, const void *b,
		      const struct corio_copy_opts *o)
{
	if (!a || !b)
		return corio__error(-EINVAL, "%s: %s is NULL", who, a ? "b" : "a");
	if (a == b)
		return corio__error(-EINVAL, "%s: a and b are the same connection", who);
	if (o && (o->flags & ~CORIO_COPY_ALL))
		return corio__error(-EINVAL, "%s: unknown flags 0x%x", who, o->flags);
	if (o)
		for (unsigned i = 0; i < 3; i++)
			if (o->reserved[i])
				return corio__error(-EINVAL, "%s: reserved[%u] is not zero", who, i);
	return 0;
}

static int copy_run(struct copy *c, const struct corio_copy_opts *o, struct corio_copy_stats *st)
{
	struct corio_spawn_opts so = { .name = "corio-copy" };
	struct corio_deadline dl;
	bool timer = false, scope = false;
	int ret;

	corio_group_init(&c->g, CORIO_GROUP_CANCEL_ON_ERROR);
	if (o && o->total_ns)
		scope = !corio_timeout_push(&dl, o->total_ns);
	if (o && o->idle_ns) {
		uint64_t tick = o->idle_ns / 4 ? o->idle_ns / 4 : 1;

		c->idle_ns = o->idle_ns;
		c->last_move_ns = corio_now_ns();
		c->last_bytes = copy_moved(c);
		corio_timer_init(&c->idle, copy_idle_tick, c);
		timer = !corio_timer_arm_in(&c->idle, tick, tick);
	}
	ret = corio_group_spawn(&c->g, dir_main, &c->d[0], &so, NULL);
	if (ret >= 0)
		ret = corio_group_spawn(&c->g, dir_main, &c->d[1], &so, NULL);
	if (ret >= 0)
		ret = corio_group_wait(&c->g);
	else
		corio_group_close(&c->g); /* the first member, if it started */
	if (timer)
		corio_timer_cancel(&c->idle);
	if (scope)
		corio_deadline_pop(&dl);
	if (c->idle_fired && (ret == -ECANCELED || ret == 0 || ret == -ETIMEDOUT))
		ret = -ETIMEDOUT;
	if (st) {
		memset(st, 0, sizeof(*st));
		st->a_to_b = c->d[0].bytes;
		st->b_to_a = c->d[1].bytes;
		st->a_end = c->d[0].end;
		st->b_end = c->d[1].end;
		st->spliced = c->d[0].spliced + c->d[1].spliced;
	}
	return ret;
}

int corio_copy_bidi(struct corio_sock *a, struct corio_sock *b, const struct corio_copy_opts *o,
		    struct corio_copy_stats *st)
{
	struct copy c;
	bool splice;
	int ret = corio__may_block("corio_copy_bidi");

	if (!ret)
		ret = copy_check("corio_copy_bidi", a, b, o);
	if (ret)
		return ret;
	if (!corio__sock_owner(a))
		return corio__sock_not_mine("corio_copy_bidi", a);
	if (!corio__sock_owner(b))
		return corio__sock_not_mine("corio_copy_bidi", b);
	if (a->type != SOCK_STREAM || b->type != SOCK_STREAM)
		return corio__error(-EINVAL, "corio_copy_bidi: not a stream socket");
	memset(&c, 0, sizeof(c));
	splice = !(o && (o->flags & CORIO_COPY_NO_SPLICE)) &&
		 !corio__net_disabled(a->net, NO_SPLICE) && splice_ok(a) && splice_ok(b);
	c.d[0] = (struct copy_dir){ .src = a, .dst = b, .end = 1, .splice = splice };
	c.d[1] = (struct copy_dir){ .src = b, .dst = a, .end = 1, .splice = splice };
	return copy_run(&c, o, st);
}

int corio_stream_copy_bidi(struct corio_stream *a, struct corio_stream *b,
			   const struct corio_copy_opts *o, struct corio_copy_stats *st)
{
	struct copy c;
	int ret = corio__may_block("corio_stream_copy_bidi");

	if (!ret)
		ret = copy_check("corio_stream_copy_bidi", a, b, o);
	if (ret)
		return ret;
	memset(&c, 0, sizeof(c));
	c.d[0] = (struct copy_dir){ .ssrc = a, .sdst = b, .end = 1 };
	c.d[1] = (struct copy_dir){ .ssrc = b, .sdst = a, .end = 1 };
	return copy_run(&c, o, st);
}
