/* SPDX-License-Identifier: MIT */
/*
 * net/part.c - the shard's net part: capability probe, the lazily created
 * provided-buffer ring, re-arming receives starved by an empty ring,
 * shutdown draining of multishot ops, stats.
 *
 * Waiting: single-shot calls (connect, send, recv into a caller buffer)
 * wait in corio__op_wait(), which the timer area bounds with linked
 * timeouts. A fiber waiting on a multishot stream (accept, recv_buf) parks
 * on its socket's wait queue (corio__wq_wait), which the timer area bounds
 * with the fiber's deadline scope and which cancellation interrupts; the
 * stream's CQE handler wakes it.
 */
#include "net/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_NBUFS 512
#define DEFAULT_BUFSZ (16 * 1024)
#define DEFAULT_RECV_CAP 16 /* 1/32 of the default ring per socket */
#define DEFAULT_SEND_CAP 16

/*
 * The receive buffers: DEFAULT_NBUFS x DEFAULT_BUFSZ (8 MiB) per ring.
 * With incremental consumption (6.12) a receive takes only the bytes it
 * got, so 512 connections x 64 B in flight fill about two buffers, and the
 * count no longer has to follow the connection count: what runs a ring dry
 * is bytes held (unread or being sent) spread over distinct buffers, and a
 * socket holds at most recv_cap slices. The size is kept at 16 KiB, not
 * raised: a slice that stays borrowed pins its whole buffer, and a bigger
 * buffer pins more. Without it (whole buffers, before 6.12) the same ring
 * holds one receive per buffer, as before; CORIO_NET_BUFS=count:size sizes
 * either. Datagrams use a whole-buffer ring (net/udp.c), the stream ring
 * itself when that is not incremental, else one of their own, same size.
 */
/* CORIO_NET_DISABLE=bufring,pbuf_inc,multishot,send_zc,recv_limit,send_gather,udp_direct,
 * tcp_direct forces fallbacks (tests, A/B). */
static bool net_disabled(const char *what)
{
	return corio__env_has("CORIO_NET_DISABLE", what);
}

/* A per-socket buffer limit from the environment: 1..65535, else def. */
static unsigned env_cap(const char *name, unsigned def)
{
	const char *e = getenv(name);
	char *end;
	unsigned long v;

	if (!e || !*e)
		return def;
	errno = 0;
	v = strtoul(e, &end, 10);
	if (errno || *end || v < 1 || v > 65535 || e[0] < '0' || e[0] > '9') {
		fprintf(stderr, "corio: %s=%s ignored (expected 1..65535), using %u\n", name, e,
			def);
		return def;
	}
	return (unsigned)v;
}

static int net_init(struct corio__shard *s)
{
	struct corio__net *n = calloc(1, sizeof(*n));
	const struct corio__ring *r = &s->ring;

	if (!n)
		return -ENOMEM;
	n->shard = s;
	corio__list_init(&n->starved);
	corio__list_init(&n->armed);
	corio__list_init(&n->sending);
	/*
	 * The opcode probe cannot see flags, so infer them from opcodes that
	 * landed in the same release: multishot accept came with
	 * IORING_OP_SOCKET (5.19), multishot recv/recvmsg with
	 * IORING_OP_SEND_ZC (6.0). The ring emulator has both without those
	 * opcodes, and says so with CORIO__CAP_MSHOT.
	 */
	bool mshot = r->caps & CORIO__CAP_MSHOT;

	n->multishot_accept = (mshot || corio__ring_has_op(r, IORING_OP_SOCKET)) &&
			      !net_disabled("multishot");
	n->multishot_recv = (mshot || corio__ring_has_op(r, IORING_OP_SEND_ZC)) &&
			    !net_disabled("multishot");
	n->multishot_recvmsg = n->multishot_recv;
	n->send_zc = corio__ring_has_op(r, IORING_OP_SEND_ZC) && !net_disabled("send_zc");
	n->recv_cap = env_cap("CORIO_NET_RECV_QUEUE", DEFAULT_RECV_CAP);
	n->recv_limit = n->multishot_recv && !net_disabled("recv_limit");
	n->send_cap = env_cap("CORIO_NET_SEND_QUEUE", DEFAULT_SEND_CAP);
	n->send_gather = !net_disabled("send_gather");
	n->udp_direct = !net_disabled("udp_direct");
	n->send_direct = !net_disabled("tcp_direct") && !getenv("CORIO_FAULTS");
	n->udp_eagain_test = getenv("CORIO_NET_UDP_EAGAIN")
				     ? env_cap("CORIO_NET_UDP_EAGAIN", 0)
				     : 0;
	n->tcp_short_test = getenv("CORIO_NET_TCP_SHORT") ? env_cap("CORIO_NET_TCP_SHORT", 0) : 0;
	s->parts[CORIO__PART_NET] = n;
	return 0;
}

#define SLICE_CHUNK 256

static int slices_grow(struct corio__net *n)
{
	/* one chunk: a link word, then SLICE_CHUNK records */
	struct corio__slice *c = malloc(sizeof(*c) * (SLICE_CHUNK + 1));

	if (!c)
		return -ENOMEM;
	c[0].next = n->slice_chunks;
	n->slice_chunks = c;
	for (unsigned i = 1; i <= SLICE_CHUNK; i++)
		corio__net_slice_put(n, &c[i]);
	return 0;
}

struct corio__slice *corio__net_slice_get(struct corio__net *n)
{
	struct corio__slice *q = n->slice_free;

	if (CORIO__UNLIKELY(!q)) {
		if (slices_grow(n))
			return NULL;
		q = n->slice_free;
	}
	n->slice_free = q->next;
	return q;
}

void corio__net_bufs_stat(struct corio__net *n)
{
	uint64_t out = n->bufs.nbufs - n->bufs.in_ring + n->dbufs.nbufs - n->dbufs.in_ring;

	CORIO__STAT_SET(n->stats.bufs_out, out);
}

void corio__net_buf_put(struct corio__net *n, uint32_t id)
{
	corio__bufring_put(corio__net_ring(n, id), id & 0xffffu);
	corio__net_bufs_stat(n);
}

static int ring_init(struct corio__net *n, struct corio__bufring *b, uint16_t bgid, bool inc)
{
	unsigned nbufs = DEFAULT_NBUFS, size = DEFAULT_BUFSZ;
	const char *env = getenv("CORIO_NET_BUFS"); /* "count:size", for tests */
	int ret;

	if (env && sscanf(env, "%u:%u", &nbufs, &size) != 2) {
		nbufs = DEFAULT_NBUFS;
		size = DEFAULT_BUFSZ;
	}
	ret = corio__bufring_init(b, &n->shard->ring, bgid, nbufs, size, !net_disabled("bufring"),
				  inc && !net_disabled("pbuf_inc"));
	if (ret)
		return corio__error(ret, "net: cannot set up %u receive buffers of %u bytes: %s",
				    nbufs, size, strerror(-ret));
	return 0;
}

int corio__net_bufs(struct corio__net *n)
{
	int ret;

	if (CORIO__LIKELY(n->bufs_ready))
		return 0;
	ret = ring_init(n, &n->bufs, 0, true);
	if (ret)
		return ret;
	if (!corio__bufring_kernel(&n->bufs))
		n->multishot_recv = false; /* user mode is single-shot */
	n->bufs_ready = true;
	return 0;
}

int corio__net_dbufs(struct corio__net *n)
{
	int ret;

	if (n->bufs_ready && !n->bufs.inc)
		return 0; /* share the stream ring: it holds whole buffers */
	if (!n->dbufs_ready) {
		/* A datagram is cut to the room left in an incremental buffer:
		 * datagrams get whole buffers of their own (bgid 1). */
		ret = ring_init(n, &n->dbufs, 1, false);
		if (ret)
			return ret;
		n->dbufs_ready = true;
	}
	return CORIO__NET_DRING;
}

/* Re-arm receives that an empty ring stopped, once buffers came back. A
 * socket whose reader waits gets the first free buffer; one nobody waits
 * on only when the ring has some slack, so a slow consumer holding buffers
 * does not make the others ping-pong on ENOBUFS. */
static unsigned net_poll(struct corio__shard *sh)
{
	struct corio__net *n = sh->parts[CORIO__PART_NET];
	struct corio__link *l, *next;
	unsigned work = 0, slack;

	if (!n || n->starved.next == &n->starved || n->stopping)
		return 0;
	for (l = n->starved.next; l != &n->starved; l = next) {
		struct corio_sock *s = CORIO__CONTAINER(l, struct corio_sock, starved_link);
		const struct corio__bufring *b = corio__net_ring(n, s->rtag);

		next = l->next;
		slack = b->nbufs / 8 ? b->nbufs / 8 : 1;
		if (!b->in_ring || (!s->rwq.head && b->in_ring < slack))
			continue;
		corio__list_del(l);
		s->starved = false;
		if (s->qcount >= n->recv_cap)
			s->capped = true; /* its reader re-arms it */
		else if (s->r.state == NET_IDLE && !s->has_term && corio__sock_arm(s) == 0)
			work++;
	}
	return work;
}

static void net_stop(struct corio__shard *sh)
{
	struct corio__net *n = sh->parts[CORIO__PART_NET];

	if (!n)
		return;
	n->stopping = true;
	/* Multishot ops would keep the shard alive: cancel them all. Their
	 * final CQEs arrive as -ECANCELED (counted in ops_inflight). */
	for (struct corio__link *l = n->armed.next; l != &n->armed; l = l->next) {
		struct corio__mshot *m = CORIO__CONTAINER(l, struct corio__mshot, link);

		if (m->state == NET_ARMED) {
			m->state = NET_CANCELING;
			corio__ring_cancel(&sh->ring, &m->op);
		}
	}
	/* Queued sends too: the peer may never read them. */
	for (struct corio__link *l = n->sending.next; l != &n->sending; l = l->next)
		corio__sock_send_cancel(CORIO__CONTAINER(l, struct corio_sock, send_link));
}

static bool net_busy(struct corio__shard *sh)
{
	struct corio__net *n = sh->parts[CORIO__PART_NET];

	return n && (n->armed.next != &n->armed || n->sending.next != &n->sending);
}

static void net_fini(struct corio__shard *sh)
{
	struct corio__net *n = sh->parts[CORIO__PART_NET];

	if (!n)
		return;
	while (n->sock_free) {
		struct corio_sock *s = n->sock_free;

		n->sock_free = s->free_next;
		free(s);
	}
	while (n->srec_free) {
		struct corio__srec *r = n->srec_free;

		n->srec_free = r->next;
		free(r);
	}
	/* for the leak census, which runs after the rings are gone */
	n->lent_at_fini = corio__bufring_lent(&n->bufs) + corio__bufring_lent(&n->dbufs);
	if (n->bufs_ready)
		corio__bufring_fini(&n->bufs, &sh->ring);
	if (n->dbufs_ready)
		corio__bufring_fini(&n->dbufs, &sh->ring);
	while (n->slice_chunks) {
		struct corio__slice *c = n->slice_chunks;

		n->slice_chunks = c->next;
		free(c);
	}
	n->slice_free = NULL;
}

/* The stats (and the live count least-loaded dispatch reads) stay readable
 * until every shard has stopped. */
static void net_release(struct corio__shard *sh)
{
	free(sh->parts[CORIO__PART_NET]);
	sh->parts[CORIO__PART_NET] = NULL;
}

/* Leak census: every provided buffer back in the ring (buffers a reader
 * never released, or a queue dropped without returning them). */
static unsigned net_census(struct corio__shard *sh, char *buf, size_t len)
{
	struct corio__net *n = sh->parts[CORIO__PART_NET];
	unsigned long out = n->lent_at_fini;

	/* Incremental buffers the kernel still fills are in no one's hands but
	 * its own; what counts is a slice the application was given and never
	 * gave back (a corio_buf not released). */
	if (out)
		snprintf(buf, len, "%lu received buffer slices never released", out);
	return out ? (unsigned)out : 0;
}

const struct corio__part corio__net_part = {
	.name = "net",
	.census = net_census,
	.init = net_init,
	.poll = net_poll,
	.stop = net_stop,
	.busy = net_busy,
	.fini = net_fini,
	.release = net_release,
};

/* ---- errors and stats ------------------------------------------------------- */

int corio__net_err(struct corio__net *n, int err)
{
	struct corio_net_stats *st = &n->stats;

	switch (-err) {
	case 0:
	case ECANCELED:
	case ETIME:
	case EAGAIN:
		break;
	case ECONNRESET:
		CORIO__STAT_ADD(st->err_reset, 1);
		break;
	case EPIPE:
		CORIO__STAT_ADD(st->err_pipe, 1);
		break;
	case ECONNREFUSED:
		CORIO__STAT_ADD(st->err_refused, 1);
		break;
	case ETIMEDOUT:
		CORIO__STAT_ADD(st->err_timeout, 1);
		break;
	case EMFILE:
	case ENFILE:
		CORIO__STAT_ADD(st->err_fd_limit, 1);
		break;
	default:
		CORIO__STAT_ADD(st->err_other, 1);
	}
	return err;
}

int corio_net_stats_get(struct corio_rt *rt, unsigned shard, struct corio_net_stats *out)
{
	const struct corio__net *n;

	rt = corio__rt_or_own(rt);
	if (!rt)
		return -EPERM;
	if (!out || shard >= rt->nshards || !rt->shards[shard])
		return -EINVAL;
	n = __atomic_load_n(&rt->shards[shard]->parts[CORIO__PART_NET], __ATOMIC_ACQUIRE);
	if (!n) {
		memset(out, 0, sizeof(*out));
		return 0;
	}
	corio__stats_copy(out, &n->stats, sizeof(*out));
	return 0;
}

/* ---- parking ---------------------------------------------------------------- */

void corio__net_park_until(bool (*done)(void *), void *arg)
{
	struct corio_fiber *f = corio__self();

	corio__nocancel_push(f); /* not interruptible: the CQE handler wakes us */
	while (!done(arg))
		corio__park();
	corio__nocancel_pop(f);
}
