/* SPDX-License-Identifier: MIT */
/*
 * net/shard.c - net's per-shard part: its CORIO_NET_* settings and config
 * fields, the capability probe, start, stop (cancelling multishot ops and
 * queued sends), teardown and the leak census, the error counters and
 * corio_net_stats_get, the uninterruptible park. The part's poll (re-arming
 * starved receives) is the receive path's, in net/recv.c.
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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_NBUFS 512
#define DEFAULT_BUFSZ (16 * 1024)
#define DEFAULT_RECV_CAP 16 /* 1/32 of the default ring per socket */
#define DEFAULT_SEND_CAP 16
#define DEFAULT_RESERVE_PCT 50 /* of each ring, for sockets that hold nothing */
#define DEFAULT_PIPE_SIZE (256 * 1024) /* docs/BENCHMARKS.md, "sendfile" */

/*
 * The receive buffers: DEFAULT_NBUFS x DEFAULT_BUFSZ (8 MiB) per ring.
 * With incremental consumption (6.12) a receive takes only the bytes it
 * got, so 512 connections x 64 B in flight fill about two buffers, and the
 * count no longer has to follow the connection count: what runs a ring dry
 * is bytes held (unread or being sent) spread over distinct buffers, and a
 * socket holds at most cap.recv slices. The size is kept at 16 KiB, not
 * raised: a slice that stays borrowed pins its whole buffer, and a bigger
 * buffer pins more. Without it (whole buffers, before 6.12) the same ring
 * holds one receive per buffer, as before; CORIO_NET_BUFS=count:size sizes
 * either. Datagrams use a whole-buffer ring (net/udp.c), the stream ring
 * itself when that is not incremental, else one of their own, same size.
 */
/* CORIO_NET_DISABLE=bufring,pbuf_inc,multishot,send_zc,recv_limit,send_gather,udp_direct,
 * tcp_direct,splice,cached,dns forces fallbacks (tests, A/B): the words, in the order of
 * net->disabled's bits (NO_* in net/internal.h). */
static const char *const disable_words[] = {
	"bufring", "pbuf_inc", "multishot", "send_zc", "recv_limit", "send_gather", "udp_direct",
	"tcp_direct", "splice", "cached", "dns", NULL,
};

/* CORIO_NET_BUFS=count:size: count a power of two (the ring's mask). */
static int env_bufs(struct corio__net *n, char *err, size_t len)
{
	static const uint64_t lim[4] = { 1, 32768, 1, INT32_MAX };
	uint64_t v[2] = { DEFAULT_NBUFS, DEFAULT_BUFSZ };
	const char *val;
	int ret = corio__env_pair("CORIO_NET_BUFS", "COUNT:SIZE", lim, v, err, len);

	if (ret > 0 && (v[0] & (v[0] - 1)) && corio__env_str("CORIO_NET_BUFS", &val, err, len) > 0)
		ret = corio__env_fail(err, len, "CORIO_NET_BUFS", val, "COUNT must be a power of two");
	n->nbufs = (unsigned)v[0];
	n->bufsz = (unsigned)v[1];
	return ret;
}

/* The per-socket queue caps: cfg.net_recv_queue / net_send_queue (0: the
 * default), each replaced by CORIO_NET_RECV_QUEUE / CORIO_NET_SEND_QUEUE
 * when set, the operator's knob, which listeners' fields do not override
 * either (cap_env; corio.h says so). 1..65535: qcount and sq_count are
 * 16 bits. */
static int net_caps(struct corio__net *n, const struct corio_config *cfg, char *err, size_t len)
{
	uint64_t recv = cfg->net_recv_queue ? cfg->net_recv_queue : DEFAULT_RECV_CAP;
	uint64_t send = cfg->net_send_queue ? cfg->net_send_queue : DEFAULT_SEND_CAP;
	int r = corio__env_uint("CORIO_NET_RECV_QUEUE", 1, 65535, &recv, err, len);
	int s = r < 0 ? r : corio__env_uint("CORIO_NET_SEND_QUEUE", 1, 65535, &send, err, len);

	n->cap = (struct corio__qcaps){ .recv = (uint16_t)recv, .send = (uint16_t)send };
	n->cap_env = (uint8_t)((r > 0) | (s > 0) << 1);
	return r < 0 ? r : s;
}

/* Every other CORIO_NET_* setting, read once per shard: 0, or -EINVAL with
 * the variable named in err. The test hooks' 0 means off, as unset does. */
static int net_env(struct corio__net *n, char *err, size_t len)
{
	static const uint64_t fault_lim[4] = { 1, 4095, 0, UINT32_MAX };
	uint64_t eagain = 0, shrt = 0;
	uint64_t reserve = DEFAULT_RESERVE_PCT, pipe = DEFAULT_PIPE_SIZE;
	uint64_t fault[2] = { 0, 0 };
	int ret = corio__env_words("CORIO_NET_DISABLE", disable_words, &n->disabled, err, len);

	if (ret >= 0)
		ret = net_caps(n, &n->shard->rt->cfg, err, len);
	if (ret >= 0)
		ret = corio__env_uint("CORIO_NET_RECV_RESERVE", 0, 99, &reserve, err, len);
	if (ret >= 0)
		ret = corio__env_uint("CORIO_NET_UDP_EAGAIN", 0, 65535, &eagain, err, len);
	if (ret >= 0)
		ret = corio__env_uint("CORIO_NET_TCP_SHORT", 0, 65535, &shrt, err, len);
	if (ret >= 0)
		ret = corio__env_pair("CORIO_NET_ACCEPT_FAULT", "ERRNO:COUNT", fault_lim, fault,
				      err, len);
	if (ret >= 0)
		ret = env_bufs(n, err, len);
	if (ret >= 0)
		ret = corio__env_uint("CORIO_NET_PIPE_SIZE", 4096, 1u << 20, &pipe, err, len);
	n->pipe_size = (unsigned)pipe;
	n->reserve_pct = (unsigned)reserve;
	n->udp_eagain_test = (unsigned)eagain;
	n->tcp_short_test = (unsigned)shrt;
	n->send_max = shrt ? (size_t)shrt : SIZE_MAX;
	n->accept_fault_err = (int)fault[0];
	n->accept_fault_n = (unsigned)fault[1];
	return ret < 0 ? ret : 0;
}

static int net_init(struct corio__shard *s)
{
	struct corio__net *n = calloc(1, sizeof(*n));
	const struct corio__ring *r = &s->ring;

	if (!n)
		return -ENOMEM;
	n->shard = s;
	if (net_env(n, s->err, sizeof(s->err)) < 0) {
		free(n);
		return -EINVAL;
	}
	corio__list_init(&n->starved);
	corio__list_init(&n->armed);
	corio__list_init(&n->listeners);
	corio__list_init(&n->sending);
	/*
	 * The opcode probe cannot see flags, so infer them from opcodes that
	 * landed in the same release: multishot accept came with
	 * IORING_OP_SOCKET (5.19), multishot recv/recvmsg with
	 * IORING_OP_SEND_ZC (6.0). The ring emulator has both without those
	 * opcodes, and says so with CORIO__CAP_MSHOT.
	 */
	bool mshot = r->caps & CORIO__CAP_MSHOT; /* the emulator: no SOCKET/SEND_ZC to infer from */

	n->multishot_accept = (mshot || corio__ring_has_op(r, IORING_OP_SOCKET)) &&
			      !corio__net_disabled(n, NO_MULTISHOT);
	n->multishot_recv = (mshot || corio__ring_has_op(r, IORING_OP_SEND_ZC)) &&
			    !corio__net_disabled(n, NO_MULTISHOT);
	n->multishot_recvmsg = n->multishot_recv;
	n->send_zc = corio__ring_has_op(r, IORING_OP_SEND_ZC) && !corio__net_disabled(n, NO_SEND_ZC);
	n->recv_limit = n->multishot_recv && !corio__net_disabled(n, NO_RECV_LIMIT);
	n->send_gather = !corio__net_disabled(n, NO_SEND_GATHER);
	n->udp_direct = !corio__net_disabled(n, NO_UDP_DIRECT);
	/* fault injection runs keep every send in the ring, where faults are */
	n->send_direct = !corio__net_disabled(n, NO_TCP_DIRECT) && !r->faults_env;
	/* corio_sendfile: SPLICE (5.7) file -> pipe -> socket. Without it, a
	 * ring whose READ reads files (5.6) copies through it, which parks
	 * the fiber on a page-cache miss; one without (the epoll fallback's
	 * probe has no READ) uses sendfile(2) with readiness waits, whose
	 * miss blocks the shard but whose hit costs no copy and no pool hop
	 * (net/send.c). Both from the probe: nothing here asks the backend. */
	n->splice = corio__ring_has_op(r, IORING_OP_SPLICE) && !corio__net_disabled(n, NO_SPLICE);
	n->sendfile_now = !corio__ring_has_op(r, IORING_OP_SPLICE) &&
			  !corio__ring_has_op(r, IORING_OP_READ);
	n->sendfile_cached = !corio__net_disabled(n, NO_CACHED);
	s->parts[CORIO__PART_NET] = n;
	return 0;
}

static void net_drain(struct corio__shard *sh)
{
	corio__listeners_drain(sh->parts[CORIO__PART_NET]);
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
	while (n->npipes) {
		n->npipes--;
		close(n->pipes[n->npipes][0]);
		close(n->pipes[n->npipes][1]);
	}
	corio__net_bufs_fini(n);
	corio__resolve_fini(n);
	corio__dns_fini(n);
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
	int k = 0;

	/* Incremental buffers the kernel still fills are in no one's hands but
	 * its own; what counts is a slice the application was given and never
	 * gave back (a corio_buf not released). */
	if (out)
		k = snprintf(buf, len, "%lu received buffer slices never released", out);
	/* A stream belongs to its fiber, which must close it (stream.h). */
	if (n->streams_live && k >= 0 && (size_t)k < len)
		k += snprintf(buf + k, len - (size_t)k, "%s%lu streams never closed (%lu buffer bytes)",
			      k ? ", " : "", n->streams_live, n->stream_bytes);
	/* corio_sendfile returns every pipe it takes */
	if (n->pipes_out && k >= 0 && (size_t)k < len)
		snprintf(buf + k, len - (size_t)k, "%s%u sendfile pipes never given back", k ? ", " : "",
			 n->pipes_out);
	return (unsigned)(out + n->streams_live + n->pipes_out);
}

const struct corio__part corio__net_part = {
	.name = "net",
	.census = net_census,
	.init = net_init,
	.poll = corio__net_recv_poll,
	.on_demand = true, /* while a receive is starved (net/recv.c) */
	.stop = net_stop,
	.drain = net_drain,
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
		return corio__error(-EPERM, "corio_net_stats_get: rt is NULL off a shard");
	if (!out || shard >= rt->nshards || !rt->shards[shard])
		return corio__error(-EINVAL, "corio_net_stats_get: %s",
				    out ? "no such shard" : "out is NULL");
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

/* ---- corio_sendfile's pipes ------------------------------------------------- */

/*
 * A splice from a file to a socket goes through a pipe (the kernel moves
 * page references, not bytes). Making one costs pipe2(2) and F_SETPIPE_SZ,
 * so a shard keeps up to CORIO__NET_PIPES idle ones. A pipe goes back to
 * the pool only empty: one a failed or cancelled splice may have left
 * bytes in is closed instead (its bytes belong to no stream).
 */
int corio__net_pipe_get(struct corio__net *n, int p[2])
{
	int sz;

	if (n->npipes) {
		n->npipes--;
		p[0] = n->pipes[n->npipes][0];
		p[1] = n->pipes[n->npipes][1];
		n->pipes_out++;
		return 0;
	}
	if (pipe2(p, O_CLOEXEC) < 0)
		return corio__error(-errno, "corio_sendfile: pipe2: %s", strerror(errno));
	/* A bigger pipe moves more per splice. Refused over
	 * /proc/sys/fs/pipe-max-size or the user's pipe-user-pages-soft:
	 * the pipe keeps its size, and what it holds is read back. */
	(void)fcntl(p[1], F_SETPIPE_SZ, (int)n->pipe_size);
	sz = fcntl(p[1], F_GETPIPE_SZ);
	if (sz > 0 && (unsigned)sz < n->pipe_size)
		n->pipe_size = (unsigned)sz; /* ask no more than a pipe holds */
	n->pipes_out++;
	return 0;
}

void corio__net_pipe_put(struct corio__net *n, int p[2], bool clean)
{
	n->pipes_out--;
	if (clean && n->npipes < CORIO__NET_PIPES) {
		n->pipes[n->npipes][0] = p[0];
		n->pipes[n->npipes][1] = p[1];
		n->npipes++;
		return;
	}
	close(p[0]);
	close(p[1]);
}
