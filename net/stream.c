/* SPDX-License-Identifier: MIT */
/*
 * net/stream.c - buffered streams over a transport (corio/stream.h), and the
 * plain transport over a corio socket.
 *
 * The read side. What has been received and not consumed is, in order,
 *
 *	rb[rhead..rtail)  ++  cur[coff..cur.len)
 *
 * rb is the stream's own buffer (grown on demand up to max_frame); cur is
 * at most one buffer the transport lent (read_buf). Bytes only ever move
 * from cur's head to rb's tail, so the order holds. A frame that lies in
 * cur while rb is empty is returned in place (zero copy); one that does not
 * is gathered into rb, copying only the bytes it needs from cur (one copy),
 * and the rest stays in cur. The stream waits for the transport (fill) only
 * when cur is empty: whatever was left of it was gathered first, so no lent
 * buffer is pinned while a stream is idle. A spent cur is given back at the
 * start of the next read call, not at once, because the view returned last
 * may point into it (the header's view lifetime). Nothing is consumed
 * before a call succeeds, so an error or a timeout loses no byte.
 *
 * Back in place. Bytes gathered from cur are contiguous and end at coff
 * (coff moves without a gather only while rb is empty), and rb is consumed
 * from its head. So when a caller gathered more than it then consumed (a
 * parser that peeks for more than one frame), and what is left in rb all
 * came from cur (rb_len <= cgath), those bytes are still in cur just
 * before coff: the next read call drops them from rb and steps coff back,
 * and reading goes on in place instead of through rb until rb runs dry.
 *
 * The write side is one buffer, sent with the caller's bytes appended in
 * one gathered write when they do not fit. A failed write is sticky (werr):
 * how much went out is unknown, so nothing after it could be framed right.
 *
 * The stream layer knows the transport only through its ops; the plain
 * transport at the end of this file is the one place that names sockets.
 * The shard's net part counts live streams and their buffer bytes for the
 * leak census (net/shard.c).
 */
#include "net/internal.h"

#include <corio/stream.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#define STREAM_MAX_FRAME_DEFAULT ((size_t)64 * 1024)
#define STREAM_WBUF_DEFAULT      ((size_t)16 * 1024)
#define STREAM_LIMIT             ((size_t)1 << 30)
#define STREAM_LINGER_DEFAULT    (5ull * 1000 * 1000 * 1000)
#define STREAM_RB_MIN            ((size_t)4096)
#define STREAM_RB_KEEP           ((size_t)1 << 20) /* an empty read buffer above it is freed */
#define STREAM_IOV               16 /* writev entries gathered with the buffer */
#define STREAM_FILE_COPY         ((size_t)16 * 1024) /* sendfile copies a cached file up to it */

struct corio_stream {
	const struct corio_stream_transport *ops;
	void *t;
	struct corio__net *net; /* the owning shard's part (census, checks) */
	unsigned flags;
	size_t max_frame;
	uint64_t linger_ns;
	/* read side */
	char *rb;
	size_t rcap, rhead, rtail;
	struct corio_buf cur; /* lent by the transport while has_cur */
	size_t coff;
	size_t cgath;     /* bytes gathered from cur into rb (back in place) */
	size_t rscan;    /* bytes at rb's head known to hold no rscan_delim */
	int rscan_delim;
	bool has_cur, eof, reading;
	/* write side */
	char *wb;
	size_t wcap, wlen;
	int werr;
	bool writing;
	struct corio_stream_stats stats;
};

/* ---- checks ------------------------------------------------------------------ */

static int not_mine(const char *who, const struct corio_stream *st)
{
	if (!st)
		return corio__error(-EINVAL, "%s: the stream is NULL", who);
	return corio__misuse(-EPERM, who, "the stream belongs to another shard, or the caller is "
			     "not on a shard");
}

static bool mine(const struct corio_stream *st)
{
	return st && st->net == corio__net();
}

/* Enter a read call: -errno when st is not usable here or a read is in
 * progress (another fiber parked in one). */
static int read_enter(struct corio_stream *st, const char *who)
{
	if (!mine(st))
		return not_mine(who, st);
	if (st->reading)
		return corio__error(-EBUSY, "%s: another fiber is reading the stream", who);
	st->reading = true;
	return 0;
}

static ssize_t read_leave(struct corio_stream *st, ssize_t ret)
{
	st->reading = false;
	return ret;
}

/* ---- the read buffers ---------------------------------------------------------- */

static size_t rb_len(const struct corio_stream *st)
{
	return st->rtail - st->rhead;
}

static size_t cur_len(const struct corio_stream *st)
{
	return st->has_cur ? st->cur.len - st->coff : 0;
}

static void cur_release(struct corio_stream *st)
{
	if (st->has_cur) {
		st->ops->release(st->t, &st->cur);
		st->has_cur = false;
		st->coff = 0;
		st->cgath = 0;
	}
}

/* A spent lent buffer goes back at the start of the next read call (the
 * last view may have pointed into it until now). So does an empty read
 * buffer that one big frame grew past STREAM_RB_KEEP: a connection that
 * once sent a large frame does not keep its memory for the rest of its
 * life (the next large frame grows it again). */
static void release_spent(struct corio_stream *st)
{
	size_t b = rb_len(st);

	if (st->has_cur && b && b <= st->cgath) { /* back in place (top of the file) */
		st->coff -= b;
		st->cgath = 0;
		st->rhead = st->rtail = 0;
		st->rscan = 0;
	}
	if (st->has_cur && st->coff == st->cur.len)
		cur_release(st);
	if (st->rcap > STREAM_RB_KEEP && !rb_len(st)) {
		st->net->stream_bytes -= st->rcap;
		free(st->rb);
		st->rb = NULL;
		st->rcap = st->rhead = st->rtail = 0;
		st->stats.rbuf_size = 0;
	}
}

/* A blocking read call whose arguments are good: cancellation and the
 * deadline first, even with bytes buffered (corio.h's one rule, as
 * corio_recv: a cancelled fiber that is kept fed still sees its cancel),
 * and nothing taken or changed then; else the spent lent buffer goes back.
 * 0 or -errno. */
static int read_begin(struct corio_stream *st, const char *who)
{
	int ret = corio__may_block(who);

	if (ret)
		return ret;
	release_spent(st);
	return 0;
}

/* Room in rb for `more` bytes past rtail, with rb's unread + more <=
 * max_frame: compact first, grow (doubling, capped) when that is not
 * enough. 0 or -ENOMEM. */
static int rb_room(struct corio_stream *st, size_t more)
{
	size_t need = rb_len(st) + more, cap;
	char *p;

	if (st->rtail + more <= st->rcap)
		return 0;
	if (st->rhead) {
		memmove(st->rb, st->rb + st->rhead, rb_len(st));
		st->rtail -= st->rhead;
		st->rhead = 0;
	}
	if (need <= st->rcap)
		return 0;
	cap = st->rcap ? st->rcap : STREAM_RB_MIN;
	while (cap < need)
		cap *= 2;
	if (cap > st->max_frame)
		cap = need > st->max_frame ? need : st->max_frame;
	p = realloc(st->rb, cap);
	if (!p)
		return corio__error(-ENOMEM, "corio_stream: no memory for a %zu-byte read buffer",
				    cap);
	st->net->stream_bytes += cap - st->rcap;
	st->rb = p;
	st->rcap = cap;
	st->stats.rbuf_size = cap;
	return 0;
}

/* Move n bytes from cur's head to rb's tail. 0 or -ENOMEM. */
static int gather(struct corio_stream *st, size_t n)
{
	int ret = rb_room(st, n);

	if (ret)
		return ret;
	memcpy(st->rb + st->rtail, (char *)st->cur.data + st->coff, n);
	st->rtail += n;
	st->coff += n;
	st->cgath += n;
	st->stats.bytes_copied += n;
	return 0;
}

static int flush_locked(struct corio_stream *st);

/* Wait for more bytes from the transport; call only with cur empty. >= 1
 * (bytes added to cur or rb), 0 at end of stream, -errno (nothing lost).
 * With ev (corio_stream_wait) through read_or, which copies into rb. */
static ssize_t fill_or(struct corio_stream *st, struct corio_event *ev)
{
	ssize_t r;

	if (st->eof)
		return 0;
	if ((st->flags & CORIO_STREAM_AUTOFLUSH) && st->wlen && !st->writing) {
		int ret;

		st->writing = true; /* a writer fiber must not touch wb meanwhile */
		ret = flush_locked(st);
		st->writing = false;
		if (ret)
			return ret;
	}
	if (st->ops->read_buf && !ev) {
		cur_release(st);
		r = st->ops->read_buf(st->t, &st->cur);
		if (r > 0) {
			st->has_cur = true;
			st->coff = 0;
		}
	} else {
		size_t room = st->max_frame - rb_len(st);
		int ret = rb_room(st, room < STREAM_RB_MIN ? room : STREAM_RB_MIN);

		if (ret)
			return ret;
		r = ev ? st->ops->read_or(st->t, st->rb + st->rtail, st->rcap - st->rtail, ev)
		       : st->ops->read(st->t, st->rb + st->rtail, st->rcap - st->rtail);
		if (r > 0)
			st->rtail += (size_t)r;
	}
	if (r == 0)
		st->eof = true;
	if (r > 0)
		st->stats.bytes_in += (uint64_t)r;
	return r;
}

static ssize_t fill(struct corio_stream *st)
{
	return fill_or(st, NULL);
}

/* Return rb's first n bytes as the frame. */
static ssize_t take_rb(struct corio_stream *st, size_t n, const void **view)
{
	*view = st->rb + st->rhead;
	st->rscan = 0;
	st->rhead += n;
	if (st->rhead == st->rtail)
		st->rhead = st->rtail = 0; /* the view stays valid: nothing moves */
	st->stats.frames_buffered++;
	return (ssize_t)n;
}

static ssize_t take_cur(struct corio_stream *st, size_t n, const void **view)
{
	*view = (char *)st->cur.data + st->coff;
	st->coff += n;
	st->stats.frames_borrowed++;
	return (ssize_t)n;
}

/* ---- reading --------------------------------------------------------------------- */

/*
 * One step of read_until: look for delim in what is buffered without
 * waiting. > 0: the frame; 0: more bytes are needed (cur is empty now);
 * -EMSGSIZE; -ENOMEM. rscan bytes at rb's head are known to hold no delim
 * (from the last call, when it timed out or met the end of cur), so a long
 * frame gathered over many receives is searched once.
 */
static ssize_t until_step(struct corio_stream *st, int delim, size_t max, const void **view)
{
	for (;;) {
		size_t n = rb_len(st), c = cur_len(st), lim, k;
		const char *cp = st->has_cur ? (char *)st->cur.data + st->coff : NULL, *q;

		if (st->rscan_delim != delim || st->rscan > n)
			st->rscan = 0;
		st->rscan_delim = delim;
		if (n && n > st->rscan) {
			lim = n < max ? n : max;
			q = st->rscan < lim ? memchr(st->rb + st->rhead + st->rscan, delim,
						      lim - st->rscan) : NULL;
			if (q)
				return take_rb(st, (size_t)(q - (st->rb + st->rhead)) + 1, view);
			st->rscan = lim;
		}
		if (n >= max)
			goto too_long;
		if (!c)
			return 0;
		lim = c < max - n ? c : max - n;
		q = memchr(cp, delim, lim);
		if (q && !n) /* all in the lent buffer: returned in place */
			return take_cur(st, (size_t)(q - cp) + 1, view);
		if (!q && lim == max - n)
			goto too_long;
		k = q ? (size_t)(q - cp) + 1 : lim; /* one copy: up to the delimiter */
		if (gather(st, k) < 0)
			return -ENOMEM;
		if (q)
			return take_rb(st, n + k, view);
		st->rscan = n + k;
	}
too_long:
	return corio__error(-EMSGSIZE, "corio_stream_read_until: no delimiter in %zu bytes (they "
				       "stay buffered: skip or close)", max);
}

ssize_t corio_stream_read_until(struct corio_stream *st, int delim, size_t max, const void **view)
{
	static const char who[] = "corio_stream_read_until";
	ssize_t r;
	int ret = read_enter(st, who);

	if (ret)
		return ret;
	if (delim < 0 || delim > 255 || !view || !max || max > st->max_frame)
		return read_leave(st, corio__error(-EINVAL, "%s: %s", who,
						   !view ? "view is NULL"
						   : delim < 0 || delim > 255 ? "delim is not a byte"
						   : "max is 0 or over the stream's max_frame"));
	ret = read_begin(st, who);
	if (ret)
		return read_leave(st, ret);
	while ((r = until_step(st, delim, max, view)) == 0) {
		r = fill(st);
		if (r > 0)
			continue;
		if (r == 0 && rb_len(st)) /* the last frame, without its delimiter */
			r = take_rb(st, rb_len(st), view);
		break;
	}
	return read_leave(st, r);
}

ssize_t corio_stream_skip_until(struct corio_stream *st, int delim)
{
	ssize_t r, total = 0;
	int ret = read_enter(st, "corio_stream_skip_until");

	if (ret)
		return ret;
	if (delim < 0 || delim > 255)
		return read_leave(st, corio__error(-EINVAL, "corio_stream_skip_until: delim is not "
							    "a byte"));
	ret = read_begin(st, "corio_stream_skip_until");
	if (ret)
		return read_leave(st, ret);
	for (;;) {
		size_t n = rb_len(st), c = cur_len(st);
		char *p = n ? st->rb + st->rhead : (char *)st->cur.data + st->coff;
		size_t len = n ? n : c, k;
		const char *q = len ? memchr(p, delim, len) : NULL;

		k = q ? (size_t)(q - p) + 1 : len;
		total += (ssize_t)k;
		if (n) {
			st->rhead += k;
			st->rscan = 0;
			if (st->rhead == st->rtail)
				st->rhead = st->rtail = 0;
		} else {
			st->coff += k;
		}
		if (q)
			return read_leave(st, total);
		if (!len && (r = fill(st)) <= 0)
			return read_leave(st, r);
	}
}

/* Make n bytes (or all there will be) contiguous without consuming, and
 * when they must be gathered, up to max (>= n) of what is buffered: the
 * count at *view (>= n, fewer only at end of stream), or -errno. */
static ssize_t peek_locked(struct corio_stream *st, size_t n, size_t max, const void **view)
{
	for (;;) {
		size_t b = rb_len(st), c = cur_len(st);
		ssize_t r;

		if (!b && c >= n) {
			*view = (char *)st->cur.data + st->coff;
			return (ssize_t)c;
		}
		if (c && b < max) {
			if (gather(st, c < max - b ? c : max - b) < 0)
				return -ENOMEM;
			continue;
		}
		if (b >= n || (b && st->eof)) {
			*view = st->rb + st->rhead;
			return (ssize_t)b;
		}
		r = fill(st);
		if (r < 0)
			return r;
		if (r == 0 && !b)
			return 0;
	}
}

static int bad_n(const char *who, const struct corio_stream *st, size_t n, const void **view)
{
	if (!view)
		return corio__error(-EINVAL, "%s: view is NULL", who);
	if (!n || n > st->max_frame)
		return corio__error(-EINVAL, "%s: n is 0 or over the stream's max_frame (%zu)", who,
				    st->max_frame);
	return 0;
}

ssize_t corio_stream_peek(struct corio_stream *st, size_t n, const void **view)
{
	int ret = read_enter(st, "corio_stream_peek");

	if (ret)
		return ret;
	ret = bad_n("corio_stream_peek", st, n, view);
	if (ret)
		return read_leave(st, ret);
	ret = read_begin(st, "corio_stream_peek");
	if (ret)
		return read_leave(st, ret);
	return read_leave(st, peek_locked(st, n, n, view));
}

ssize_t corio_stream_peek_upto(struct corio_stream *st, size_t n, size_t max, const void **view)
{
	int ret = read_enter(st, "corio_stream_peek_upto");

	if (ret)
		return ret;
	ret = bad_n("corio_stream_peek_upto", st, n, view);
	if (!ret && (max < n || max > st->max_frame))
		ret = corio__error(-EINVAL, "corio_stream_peek_upto: max is below n or over the "
					    "stream's max_frame (%zu)", st->max_frame);
	if (ret)
		return read_leave(st, ret);
	ret = read_begin(st, "corio_stream_peek_upto");
	if (ret)
		return read_leave(st, ret);
	return read_leave(st, peek_locked(st, n, max, view));
}

ssize_t corio_stream_read_exact(struct corio_stream *st, size_t n, const void **view)
{
	ssize_t r;
	int ret = read_enter(st, "corio_stream_read_exact");

	if (ret)
		return ret;
	ret = bad_n("corio_stream_read_exact", st, n, view);
	if (ret)
		return read_leave(st, ret);
	ret = read_begin(st, "corio_stream_read_exact");
	if (ret)
		return read_leave(st, ret);
	r = peek_locked(st, n, n, view);
	if (r > 0 && (size_t)r < n)
		r = corio__error(-ENODATA, "corio_stream_read_exact: the stream ended %zd bytes "
					   "into a %zu-byte frame", r, n);
	else if (r > 0)
		r = rb_len(st) ? take_rb(st, n, view) : take_cur(st, n, view);
	return read_leave(st, r);
}

int corio_stream_consume(struct corio_stream *st, size_t n)
{
	size_t b;

	if (!mine(st))
		return not_mine("corio_stream_consume", st);
	if (n > corio_stream_buffered(st))
		return corio__error(-EINVAL, "corio_stream_consume: %zu bytes, %zu buffered", n,
				    corio_stream_buffered(st));
	b = rb_len(st) < n ? rb_len(st) : n;
	st->rhead += b;
	st->rscan = 0;
	if (st->rhead == st->rtail)
		st->rhead = st->rtail = 0;
	st->coff += n - b;
	return 0;
}

ssize_t corio_stream_read(struct corio_stream *st, void *buf, size_t len)
{
	const void *v;
	ssize_t r;
	int ret = read_enter(st, "corio_stream_read");

	if (ret)
		return ret;
	if (!buf || !len)
		return read_leave(st, corio__error(-EINVAL, "corio_stream_read: %s",
						   buf ? "len is 0" : "buf is NULL"));
	ret = read_begin(st, "corio_stream_read");
	if (ret)
		return read_leave(st, ret);
	r = peek_locked(st, 1, 1, &v);
	if (r > 0) {
		if ((size_t)r > len)
			r = (ssize_t)len;
		memcpy(buf, v, (size_t)r);
		if (rb_len(st))
			take_rb(st, (size_t)r, &v);
		else
			st->coff += (size_t)r;
	}
	return read_leave(st, r);
}

size_t corio_stream_buffered(const struct corio_stream *st)
{
	return mine(st) ? rb_len(st) + cur_len(st) : 0;
}

ssize_t corio_stream_wait(struct corio_stream *st, struct corio_event *ev)
{
	ssize_t r = read_enter(st, "corio_stream_wait");

	if (r)
		return r;
	if (!ev || !st->ops->read_or)
		return read_leave(st, corio__error(ev ? -ENOTSUP : -EINVAL, "corio_stream_wait: %s",
						   ev ? "the transport has no read_or" : "ev is NULL"));
	r = read_begin(st, "corio_stream_wait");
	if (r)
		return read_leave(st, r);
	if (!corio_stream_buffered(st)) /* a spent lent buffer went back just now */
		r = fill_or(st, ev);
	return read_leave(st, r < 0 ? r : (ssize_t)corio_stream_buffered(st));
}

/* ---- writing ----------------------------------------------------------------------- */

/* One transport write of iov; a failure is kept as the write side's error.
 * more: a file follows at once, so the transport may hold the bytes for its
 * first segment (CORIO_STREAM_WRITE_MORE; the plain transport's MSG_MORE)
 * rather than send them in a packet of their own: a response head, one
 * packet fewer per response (nginx corks for this). */
static int send_iov(struct corio_stream *st, const struct iovec *iov, int n, bool more)
{
	ssize_t r = st->ops->writev(st->t, iov, n, more ? CORIO_STREAM_WRITE_MORE : 0);

	st->stats.writes++;
	if (r < 0) {
		st->werr = (int)r;
		return (int)r;
	}
	st->stats.bytes_out += (uint64_t)r;
	return 0;
}

static int flush_more(struct corio_stream *st, bool more)
{
	struct iovec iov = { st->wb, st->wlen };
	int ret;

	if (st->werr)
		return st->werr;
	if (!st->wlen)
		return 0;
	ret = send_iov(st, &iov, 1, more);
	st->wlen = 0;
	return ret;
}

static int flush_locked(struct corio_stream *st)
{
	return flush_more(st, false);
}

static int write_enter(struct corio_stream *st, const char *who)
{
	if (!mine(st))
		return not_mine(who, st);
	if (st->writing)
		return corio__error(-EBUSY, "%s: another fiber is writing the stream", who);
	if (st->werr)
		return st->werr;
	st->writing = true;
	return 0;
}

static ssize_t write_leave(struct corio_stream *st, ssize_t ret)
{
	st->writing = false;
	return ret;
}

/* The write buffer, allocated at its first use: 0 or -ENOMEM. */
static int wb_alloc(struct corio_stream *st, const char *who)
{
	if (st->wb)
		return 0;
	st->wb = malloc(st->wcap);
	if (!st->wb)
		return corio__error(-ENOMEM, "%s: no memory for the write buffer", who);
	st->net->stream_bytes += st->wcap;
	st->stats.wbuf_size = st->wcap;
	return 0;
}

ssize_t corio_stream_write(struct corio_stream *st, const void *buf, size_t len)
{
	struct iovec iov[2];
	int ret = write_enter(st, "corio_stream_write");

	if (ret)
		return ret;
	if (!buf && len)
		return write_leave(st, corio__error(-EINVAL, "corio_stream_write: buf is NULL"));
	if ((ret = wb_alloc(st, "corio_stream_write")))
		return write_leave(st, ret);
	if (st->wlen + len <= st->wcap) {
		memcpy(st->wb + st->wlen, buf, len);
		st->wlen += len;
		return write_leave(st, (ssize_t)len);
	}
	iov[0] = (struct iovec){ st->wb, st->wlen };
	iov[1] = (struct iovec){ (void *)buf, len };
	ret = st->wlen ? send_iov(st, iov, 2, false) : send_iov(st, iov + 1, 1, false);
	st->wlen = 0;
	return write_leave(st, ret ? ret : (ssize_t)len);
}

static const struct corio_stream_transport sock_ops;

int corio_stream_write_owned(struct corio_stream *st, const void *buf, size_t len,
			     void (*done)(void *arg, int res), void *arg)
{
	struct iovec iov = { (void *)buf, len };
	int ret = write_enter(st, "corio_stream_write_owned");

	if (ret)
		return ret;
	if (!buf || !len || len > INT32_MAX)
		return (int)write_leave(st, corio__error(-EINVAL, "corio_stream_write_owned: %s",
							 !buf ? "buf is NULL" : !len ? "len is 0"
							 : "len is over INT32_MAX"));
	ret = flush_locked(st); /* what was buffered goes first */
	if (ret)
		return (int)write_leave(st, ret);
	if (st->ops == &sock_ops) {
		/* queued on the socket without waiting; done runs from the
		 * loop once the kernel let go of buf, and later writes (a
		 * corio_sendv) wait for the queue, so the order holds */
		ret = corio_send_owned(st->t, buf, len, done, arg);
		if (ret && ret != -EINVAL && ret != -ETIMEDOUT && ret != -ECANCELED &&
		    ret != -EAGAIN && ret != -ENOMEM)
			st->werr = ret; /* the socket's send error: sticky, as for writes */
		if (!ret) {
			st->stats.writes++;
			st->stats.bytes_out += len;
		}
		return (int)write_leave(st, ret);
	}
	/* a transport that copies (TLS encrypts buf into its records): done
	 * runs once the write returned, here */
	ret = send_iov(st, &iov, 1, false);
	write_leave(st, 0);
	if (done)
		done(arg, ret ? ret : (int)len);
	return 0;
}

int corio_stream_shutdown_write(struct corio_stream *st)
{
	int ret = write_enter(st, "corio_stream_shutdown_write"), r;

	if (ret)
		return ret;
	ret = flush_locked(st);
	r = st->ops->shutdown_write(st->t);
	return (int)write_leave(st, ret ? ret : r);
}

int corio_stream_flush(struct corio_stream *st)
{
	int ret = write_enter(st, "corio_stream_flush");

	if (ret)
		return ret;
	return (int)write_leave(st, flush_locked(st));
}

ssize_t corio_stream_writev(struct corio_stream *st, const struct iovec *iov, int iovcnt)
{
	struct iovec v[STREAM_IOV + 1];
	size_t total = 0;
	int ret = write_enter(st, "corio_stream_writev");

	if (ret)
		return ret;
	if (iovcnt < 0 || iovcnt > IOV_MAX || (!iov && iovcnt))
		return write_leave(st, corio__error(-EINVAL, "corio_stream_writev: %s",
						    iovcnt < 0 || iovcnt > IOV_MAX ? "iovcnt out of range"
										  : "iov is NULL"));
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (!st->wlen) { /* nothing buffered: iov as it is */
		ret = iovcnt ? send_iov(st, iov, iovcnt, false) : 0;
	} else if (iovcnt <= STREAM_IOV) { /* the buffer and iov in one write */
		v[0] = (struct iovec){ st->wb, st->wlen };
		if (iovcnt)
			memcpy(v + 1, iov, sizeof(*iov) * (size_t)iovcnt);
		ret = send_iov(st, v, 1 + iovcnt, false);
		st->wlen = 0;
	} else {
		ret = flush_locked(st);
		if (!ret)
			ret = send_iov(st, iov, iovcnt, false);
	}
	return write_leave(st, ret ? ret : (ssize_t)total);
}

/* One piece of a file: sent by the transport, or read into the write
 * buffer (flushed first when full). The count (>= 1), or -errno. */
static ssize_t file_step(struct corio_stream *st, int fd, uint64_t off, size_t len)
{
	ssize_t n;
	int ret;

	if (st->ops->sendfile) {
		n = st->ops->sendfile(st->t, fd, (off_t)off, len);
		st->stats.writes++;
		st->stats.bytes_out += n > 0 ? (uint64_t)n : 0;
	} else {
		if ((ret = wb_alloc(st, "corio_stream_sendfile")) ||
		    (st->wlen == st->wcap && (ret = flush_locked(st))))
			return ret;
		n = corio__file_read(fd, st->wb + st->wlen,
				     len < st->wcap - st->wlen ? len : st->wcap - st->wlen, (off_t)off,
				     "corio_stream_sendfile");
		st->wlen += n > 0 ? (size_t)n : 0;
		if (n < 0 && n != -ECANCELED && n != -ETIMEDOUT)
			n = corio__error((int)n, "corio_stream_sendfile: reading fd %d: %s", fd,
					 strerror((int)-n));
	}
	if (n == 0)
		n = corio__error(-ENODATA, "corio_stream_sendfile: the file ended %zu bytes early",
				 len);
	return n;
}

/*
 * preadv2(2) of one buffer with RWF_NOWAIT, without glibc's wrapper (as
 * net/copy.c's splice: in a process with more than one thread the wrapper
 * switches asynchronous cancellation on and off around the call, about 40
 * of the 70 instructions it took per small file httpd serves). The offset
 * goes in one register on the 64-bit targets CORIO__SYS_RAW covers (its
 * high half is ignored there). Bytes read, or -1 and errno, as the wrapper.
 */
static ssize_t pread_nowait(int fd, void *buf, size_t len, off_t off)
{
	struct iovec v = { buf, len };

#ifdef CORIO__SYS_RAW
	return corio__nc(corio__sys6(SYS_preadv2, fd, (long)&v, 1, (long)off, 0, RWF_NOWAIT));
#else
	return preadv2(fd, &v, 1, off, RWF_NOWAIT);
#endif
}

/* A small file on a transport that could send it without a copy: read
 * into the write buffer on the spot when its pages are cached, so it leaves
 * in one send with the head before it (no pipe, no second send). false
 * when it is not small, does not fit or is not all cached (RWF_NOWAIT
 * refuses rather than block): nothing was appended. */
static bool file_inline(struct corio_stream *st, int fd, uint64_t off, size_t len)
{
	if (!st->ops->sendfile || !len || len > STREAM_FILE_COPY ||
	    wb_alloc(st, "corio_stream_sendfile") || st->wcap - st->wlen < len)
		return false;
	if (pread_nowait(fd, st->wb + st->wlen, len, (off_t)off) != (ssize_t)len)
		return false;
	st->wlen += len;
	return true;
}

ssize_t corio_stream_sendfile(struct corio_stream *st, int fd, uint64_t off, size_t len)
{
	size_t done = 0;
	ssize_t n = write_enter(st, "corio_stream_sendfile");

	if (n)
		return n;
	if (off > INT64_MAX || len > INT64_MAX - off)
		return write_leave(st, corio__error(-EINVAL, "corio_stream_sendfile: off + len "
							     "is past the largest file offset"));
	/* Before any path reads fd: a device reads fine (the inline copy sent
	 * 4 KiB of /dev/zero), a FIFO or socket would wait for input. Bad
	 * input, so not sticky: nothing was sent. */
	n = corio__sendfile_fd(fd, "corio_stream_sendfile");
	if (n)
		return write_leave(st, n);
	if (file_inline(st, fd, off, len))
		return write_leave(st, (ssize_t)len);
	if (st->ops->sendfile)
		n = flush_more(st, true); /* the buffered bytes go first, with the file */
	while (n == 0 && done < len) {
		n = file_step(st, fd, off + done, len - done);
		done += n > 0 ? (size_t)n : 0;
		n = n > 0 ? 0 : n;
	}
	if (n < 0) /* sticky: the peer was promised bytes that did not come */
		st->werr = (int)n;
	return write_leave(st, n < 0 ? n : (ssize_t)len);
}

/* ---- creating and closing ------------------------------------------------------------ */

static int bad_opts(const struct corio_stream_opts *o)
{
	if (o->flags & ~CORIO_STREAM_AUTOFLUSH)
		return corio__error(-EINVAL, "corio_stream_new: unknown flags 0x%x",
				    o->flags & ~CORIO_STREAM_AUTOFLUSH);
	if (o->reserved[0] || o->reserved[1] || o->reserved[2])
		return corio__error(-EINVAL, "corio_stream_new: reserved fields must be zero");
	if (o->max_frame > STREAM_LIMIT || o->wbuf > STREAM_LIMIT)
		return corio__error(-EINVAL, "corio_stream_new: max_frame and wbuf are at most 1 GiB");
	return 0;
}

int corio_stream_new(const struct corio_stream_transport *ops, void *t,
		     const struct corio_stream_opts *opts, struct corio_stream **out)
{
	static const struct corio_stream_opts none;
	const struct corio_stream_opts *o = opts ? opts : &none;
	struct corio__net *n = corio__net();
	struct corio_stream *st;
	int ret;

	if (!n)
		return corio__error(-EPERM, "corio_stream_new: not on a shard");
	if (!ops || !out || !ops->writev || !ops->shutdown_write || !ops->close ||
	    !(ops->read_buf ? !!ops->release : !!ops->read))
		return corio__error(-EINVAL, "corio_stream_new: %s",
				    !ops || !out ? "ops or out is NULL"
						 : "ops lacks writev, shutdown_write, close, or a "
						   "read (read, or read_buf with release)");
	ret = bad_opts(o);
	if (ret)
		return ret;
	st = calloc(1, sizeof(*st));
	if (!st)
		return corio__error(-ENOMEM, "corio_stream_new: no memory");
	st->ops = ops;
	st->t = t;
	st->net = n;
	st->flags = o->flags;
	st->max_frame = o->max_frame ? o->max_frame : STREAM_MAX_FRAME_DEFAULT;
	st->wcap = o->wbuf ? o->wbuf : STREAM_WBUF_DEFAULT;
	st->linger_ns = o->linger_ns ? o->linger_ns : STREAM_LINGER_DEFAULT;
	n->streams_live++;
	*out = st;
	return 0;
}

void *corio_stream_transport(struct corio_stream *st)
{
	return mine(st) ? st->t : NULL;
}

static int stream_free(struct corio_stream *st)
{
	int ret;

	cur_release(st);
	ret = st->ops->close(st->t);
	st->net->stream_bytes -= st->rcap + (st->wb ? st->wcap : 0);
	st->net->streams_live--;
	free(st->rb);
	free(st->wb);
	free(st);
	return ret;
}

static int close_enter(struct corio_stream *st, const char *who)
{
	if (!mine(st))
		return not_mine(who, st);
	if (st->reading || st->writing)
		return corio__error(-EBUSY, "%s: another fiber is inside a call on the stream", who);
	return 0;
}

/* Read and discard until the peer closes: 0, or why it stopped. */
static int drain(struct corio_stream *st)
{
	struct corio_deadline d;
	ssize_t r;
	int ret = corio_timeout_push(&d, st->linger_ns);

	if (ret)
		return ret;
	st->flags &= ~CORIO_STREAM_AUTOFLUSH; /* flushed already */
	do {
		st->rhead = st->rtail = 0;
		if (st->has_cur)
			st->coff = st->cur.len;
		r = fill(st);
	} while (r > 0);
	corio_deadline_pop(&d);
	return (int)r;
}

int corio_stream_close(struct corio_stream *st)
{
	int ret = close_enter(st, "corio_stream_close"), r;

	if (ret)
		return ret;
	ret = flush_locked(st);
	r = st->ops->shutdown_write(st->t);
	if (!ret)
		ret = r;
	if (ret != -ECANCELED) {
		r = drain(st);
		if (!ret)
			ret = r;
	}
	r = stream_free(st);
	return ret ? ret : r;
}

int corio_stream_abort(struct corio_stream *st)
{
	int ret = close_enter(st, "corio_stream_abort");

	return ret ? ret : stream_free(st);
}

int corio_stream_stats_get(const struct corio_stream *st, struct corio_stream_stats *out)
{
	if (!mine(st))
		return not_mine("corio_stream_stats_get", st);
	if (!out)
		return corio__error(-EINVAL, "corio_stream_stats_get: out is NULL");
	*out = st->stats;
	return 0;
}

/* ---- the plain transport: a corio socket ------------------------------------------------ */

static ssize_t sock_read_buf(void *t, struct corio_buf *b)
{
	return corio_recv_buf(t, b);
}

static void sock_release(void *t, struct corio_buf *b)
{
	(void)t;
	corio_buf_release(b);
}

/* One buffer (a reply the caller built, or the write buffer alone) goes
 * out with corio_send_ex: half the instructions of corio_sendv's general
 * path, which a request-reply loop pays on every answer. "More follows"
 * is MSG_MORE (CORIO_SEND_MORE); the stream asks it for one buffer only
 * (its write buffer before a file), and corio_sendv has no flags, so a
 * gathered write ignores the hint. */
static ssize_t sock_writev(void *t, const struct iovec *iov, int iovcnt, unsigned flags)
{
	if (iovcnt == 1)
		return corio_send_ex(t, iov[0].iov_base, iov[0].iov_len,
				     flags & CORIO_STREAM_WRITE_MORE ? CORIO_SEND_MORE : 0, NULL);
	return corio_sendv(t, iov, iovcnt, NULL);
}

static int sock_shutdown(void *t)
{
	return corio_shutdown_write(t);
}

static int sock_close(void *t)
{
	return corio_close(t);
}

/* The idle wait: a select copies (corio/select.h), so this path does too. */
static ssize_t sock_read_or(void *t, void *buf, size_t len, struct corio_event *ev)
{
	struct corio_sel w[2];
	int i;

	corio_sel_recv(&w[0], t, buf, len); /* first: input that came wins */
	corio_sel_event(&w[1], ev);
	i = corio_select(w, 2);
	return i < 0 ? i : i == 0 ? w[0].res : -ESHUTDOWN;
}

/* corio_stream_sendfile has checked fd (one fstat per call, not per piece) */
static ssize_t sock_sendfile(void *t, int fd, off_t off, size_t len)
{
	return corio__sendfile_checked(t, fd, off, len);
}

static const struct corio_stream_transport sock_ops = {
	.read_buf = sock_read_buf,
	.read_or = sock_read_or,
	.sendfile = sock_sendfile,
	.release = sock_release,
	.writev = sock_writev,
	.shutdown_write = sock_shutdown,
	.close = sock_close,
};

int corio_stream_sock(struct corio_sock *s, const struct corio_stream_opts *opts,
		      struct corio_stream **out)
{
	if (!corio__sock_owner(s))
		return corio__sock_not_mine("corio_stream_sock", s);
	if (s->type != SOCK_STREAM)
		return corio__error(-EINVAL, "corio_stream_sock: not a stream socket");
	return corio_stream_new(&sock_ops, s, opts, out);
}
