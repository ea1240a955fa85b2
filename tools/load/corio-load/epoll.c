/* SPDX-License-Identifier: MIT */
/*
 * tools/load/corio-load/epoll.c - corio-load's epoll engine: one plain
 * thread per CPU, non-blocking sockets and epoll (TCP and UDP); the
 * instrument that does not depend on corio.
 */
#include "load.h"

/* ---- epoll engine -------------------------------------------------------------- */

static int fcntl_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -1 : 0;
}

static int p_queue(struct pconn *k, unsigned n, uint64_t t)
{
	size_t need = (size_t)n * k->c.size;

	if (k->out.off == k->out.len)
		k->out.off = k->out.len = 0;
	if (k->out.len + need > k->out.cap) {
		size_t cap = k->out.cap ? k->out.cap : 4096;
		unsigned char *p;

		if (k->out.off) {
			memmove(k->out.p, k->out.p + k->out.off, k->out.len - k->out.off);
			k->out.len -= k->out.off;
			k->out.off = 0;
		}
		while (cap < k->out.len + need)
			cap *= 2;
		p = realloc(k->out.p, cap);
		if (!p)
			return -ENOMEM;
		k->out.p = p;
		k->out.cap = cap;
	}
	tool_conn_fill(&k->c, n, k->out.p + k->out.len, t);
	k->out.len += need;
	return 0;
}

static int p_events(int ep, struct pconn *k, unsigned ev)
{
	struct epoll_event e = { .events = ev, .data.ptr = k };

	if (ev == k->ev)
		return 0;
	k->ev = ev;
	return epoll_ctl(ep, EPOLL_CTL_MOD, k->fd, &e);
}

/* Send what is queued: 0, or -errno. */
static int p_flush(int ep, struct pconn *k)
{
	while (k->out.off < k->out.len) {
		ssize_t r = send(k->fd, k->out.p + k->out.off, k->out.len - k->out.off, MSG_NOSIGNAL);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return p_events(ep, k, EPOLLIN | EPOLLOUT) ? -errno : 0;
			return -errno;
		}
		k->out.off += (size_t)r;
	}
	return p_events(ep, k, EPOLLIN) ? -errno : 0;
}

static void p_close(struct pconn *k, unsigned *open)
{
	if (k->closed)
		return;
	k->closed = 1;
	close(k->fd);
	(*open)--;
}

static void *p_worker(void *arg)
{
	struct pworker *w = arg;
	struct tool_worker_stats *ws = &g.ws[w->idx];
	struct epoll_event ev[64];
	unsigned char *rbuf = malloc(rx_len());
	int ep = epoll_create1(EPOLL_CLOEXEC);
	unsigned open = 0;
	uint64_t meas_end, drain_end;
	int closed = g.p.rate <= 0, v;

	if (w->idx < g.ncpus) {
		cpu_set_t cs;

		CPU_ZERO(&cs);
		CPU_SET(g.cpus[w->idx], &cs);
		pthread_setaffinity_np(pthread_self(), sizeof(cs), &cs);
	}
	if (!rbuf || ep < 0) {
		tool_worker_fail(ws, "worker %u: out of memory or epoll", w->idx);
		atomic_fetch_add(&g.dead, w->n);
		return NULL;
	}
	for (unsigned i = 0; i < w->n; i++) {
		struct pconn *k = &w->conns[i];
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g.p.port) };
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = k };
		int one = 1;

		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		k->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (k->fd < 0 || setsockopt(k->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
		    connect(k->fd, (struct sockaddr *)&sa, sizeof(sa))) {
			tool_conn_fail(&k->c, "conn %u: connect %s: %s", k->c.id, g.p.addr, strerror(errno));
			if (k->fd >= 0)
				close(k->fd);
			k->closed = 1;
			atomic_fetch_add(&g.dead, 1);
			continue;
		}
		if (fcntl_nonblock(k->fd) || epoll_ctl(ep, EPOLL_CTL_ADD, k->fd, &e)) {
			tool_conn_fail(&k->c, "conn %u: epoll: %s", k->c.id, strerror(errno));
			close(k->fd);
			k->closed = 1;
			atomic_fetch_add(&g.dead, 1);
			continue;
		}
		k->ev = EPOLLIN;
		open++;
		atomic_fetch_add(&g.connected, 1);
	}
	while (!(v = atomic_load(&g.go)))
		usleep(50);
	if (v < 0)
		goto out;
	meas_end = tool_meas_end(&g.p);
	drain_end = tool_drain_end(&g.p);
	if (closed) {
		uint64_t now = tool_now_ns();

		for (unsigned i = 0; i < w->n; i++) {
			struct pconn *k = &w->conns[i];

			if (!k->closed && (p_queue(k, g.p.pipeline, now) || p_flush(ep, k)))
				tool_conn_fail(&k->c, "conn %u: send: %s", k->c.id, strerror(errno));
		}
	}
	while (open) {
		uint64_t now = tool_now_ns(), wake = drain_end;
		struct timespec ts;
		int n;

		if (now >= drain_end) {
			for (unsigned i = 0; i < w->n; i++) {
				struct pconn *k = &w->conns[i];

				if (!k->closed) {
					tool_conn_fail(&k->c, "conn %u: echoes missing at the end of the drain "
						     "time after %llu of %llu messages", k->c.id,
						     (unsigned long long)k->c.rx, (unsigned long long)k->c.tx);
					p_close(k, &open);
				}
			}
			break;
		}
		for (unsigned i = 0; i < w->n; i++) {
			struct pconn *k = &w->conns[i];

			if (k->closed || k->wr_shut)
				continue;
			if (!closed && now < meas_end) {
				unsigned d = tool_conn_due_count(&k->c, now, meas_end);

				if (d) {
					if (now - tool_conn_due(&k->c, k->c.tx) >= (uint64_t)k->c.interval_ns)
						atomic_fetch_add_explicit(&g.late, 1, memory_order_relaxed);
					if (p_queue(k, d, 0) || p_flush(ep, k)) {
						tool_conn_fail(&k->c, "conn %u: send: %s", k->c.id, strerror(errno));
						p_close(k, &open);
						continue;
					}
				}
				if (tool_conn_room(&k->c)) {
					uint64_t due = tool_conn_due(&k->c, k->c.tx);

					if (due < wake)
						wake = due;
				}
			} else if (now >= meas_end && k->out.off == k->out.len &&
				   (!closed || k->c.rx == k->c.tx)) {
				shutdown(k->fd, SHUT_WR);
				k->wr_shut = 1;
			}
		}
		if (now < meas_end && meas_end < wake)
			wake = meas_end;
		if (g.busy || wake <= now) {
			ts.tv_sec = 0;
			ts.tv_nsec = 0;
		} else {
			ts.tv_sec = (time_t)((wake - now) / 1000000000ull);
			ts.tv_nsec = (long)((wake - now) % 1000000000ull);
		}
		n = epoll_pwait2(ep, ev, 64, &ts, NULL);
		if (n < 0 && errno != EINTR) {
			tool_worker_fail(ws, "epoll_pwait2: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct pconn *k = ev[i].data.ptr;
			ssize_t r;
			int done;

			if (k->closed)
				continue;
			if ((ev[i].events & EPOLLOUT) && p_flush(ep, k)) {
				tool_conn_fail(&k->c, "conn %u: send: %s", k->c.id, strerror(errno));
				p_close(k, &open);
				continue;
			}
			if (!(ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
				continue;
			r = recv(k->fd, rbuf, rx_len(), 0);
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r <= 0) {
				if (r < 0)
					tool_conn_fail(&k->c, "conn %u: recv: %s", k->c.id, strerror(errno));
				else if (k->c.rx != k->c.tx || !k->wr_shut)
					tool_conn_fail(&k->c, "conn %u: server closed after %llu of %llu messages",
						     k->c.id, (unsigned long long)k->c.rx,
						     (unsigned long long)k->c.tx);
				p_close(k, &open);
				continue;
			}
			now = tool_now_ns();
			done = tool_conn_rx(&k->c, rbuf, (size_t)r, now);
			if (done < 0) {
				p_close(k, &open);
				continue;
			}
			if (closed && done && now < meas_end &&
			    (p_queue(k, (unsigned)done, now) || p_flush(ep, k))) {
				tool_conn_fail(&k->c, "conn %u: send: %s", k->c.id, strerror(errno));
				p_close(k, &open);
			}
		}
	}
out:
	for (unsigned i = 0; i < w->n; i++) {
		p_close(&w->conns[i], &open);
		free(w->conns[i].out.p);
	}
	close(ep);
	free(rbuf);
	return NULL;
}

/* ---- epoll engine, UDP ---------------------------------------------------------- */

/* Send one datagram stamped t: 1 sent, 0 the socket is full (try later), -errno. */
static int pu_send(struct pconn *k, unsigned char *buf, uint64_t t)
{
	tool_uconn_fill(&k->u, buf, t);
	if (send(k->fd, buf, k->u.c.size, 0) == (ssize_t)k->u.c.size)
		return 1;
	tool_uconn_unfill(&k->u);
	return errno == EAGAIN || errno == EINTR || errno == ENOBUFS ? 0 : -errno;
}

static void *pu_worker(void *arg)
{
	struct pworker *w = arg;
	struct tool_worker_stats *ws = &g.ws[w->idx];
	struct epoll_event ev[64];
	unsigned char *rbuf = malloc(65536), *tbuf = malloc(g.p.size);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	unsigned open = 0;
	uint64_t meas_end, drain_end;
	int closed = g.p.rate <= 0, v;

	if (w->idx < g.ncpus) {
		cpu_set_t cs;

		CPU_ZERO(&cs);
		CPU_SET(g.cpus[w->idx], &cs);
		pthread_setaffinity_np(pthread_self(), sizeof(cs), &cs);
	}
	if (!rbuf || !tbuf || ep < 0) {
		tool_worker_fail(ws, "worker %u: out of memory or epoll", w->idx);
		atomic_fetch_add(&g.dead, w->n);
		free(rbuf);
		free(tbuf);
		if (ep >= 0)
			close(ep);
		return NULL;
	}
	for (unsigned i = 0; i < w->n; i++) {
		struct pconn *k = &w->conns[i];
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g.p.port) };
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = k };

		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		k->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (k->fd >= 0)
			big_rcvbuf(k->fd);
		if (k->fd < 0 || connect(k->fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, k->fd, &e)) {
			tool_conn_fail(&k->u.c, "conn %u: udp socket to %s: %s", k->u.c.id, g.p.addr,
				     strerror(errno));
			if (k->fd >= 0)
				close(k->fd);
			k->closed = 1;
			atomic_fetch_add(&g.dead, 1);
			continue;
		}
		open++;
		atomic_fetch_add(&g.connected, 1);
	}
	while (!(v = atomic_load(&g.go)))
		usleep(50);
	if (v < 0)
		goto out;
	meas_end = tool_meas_end(&g.p);
	drain_end = tool_drain_end(&g.p);
	while (open) {
		uint64_t now = tool_now_ns(), wake = drain_end;
		struct timespec ts;
		int n;

		if (now >= drain_end) {
			for (unsigned i = 0; i < w->n; i++) {
				tool_uconn_expire(&w->conns[i].u, UINT64_MAX);
				p_close(&w->conns[i], &open);
			}
			break;
		}
		for (unsigned i = 0; i < w->n; i++) {
			struct pconn *k = &w->conns[i];
			struct tool_conn *c = &k->u.c;
			int r = 1;

			if (k->closed)
				continue;
			tool_uconn_expire(&k->u, now);
			if (now < meas_end && closed) {
				while (tool_conn_room(c) && (r = pu_send(k, tbuf, now)) > 0)
					;
			} else if (now < meas_end) {
				unsigned d = tool_conn_due_count(c, now, meas_end);

				if (d && now - tool_conn_due(c, c->tx) >= (uint64_t)c->interval_ns)
					atomic_fetch_add_explicit(&g.late, 1, memory_order_relaxed);
				while (d-- && (r = pu_send(k, tbuf, 0)) > 0)
					;
				if (tool_conn_room(c) && tool_conn_due(c, c->tx) < wake)
					wake = tool_conn_due(c, c->tx);
			}
			if (r < 0) {
				tool_conn_fail(c, "conn %u: send: %s", c->id, strerror(-r));
				p_close(k, &open);
				continue;
			}
			if (now >= meas_end && c->rx == c->tx) {
				p_close(k, &open);
				continue;
			}
			if (r == 0 || !tool_conn_room(c)) /* socket full / ring full: poll again soon */
				wake = now + 20000 < wake ? now + 20000 : wake;
			if (tool_uconn_next_loss(&k->u) < wake)
				wake = tool_uconn_next_loss(&k->u);
		}
		if (!open)
			break;
		if (now < meas_end && meas_end < wake)
			wake = meas_end;
		if (g.busy || wake <= now) {
			ts.tv_sec = 0;
			ts.tv_nsec = 0;
		} else {
			ts.tv_sec = (time_t)((wake - now) / 1000000000ull);
			ts.tv_nsec = (long)((wake - now) % 1000000000ull);
		}
		n = epoll_pwait2(ep, ev, 64, &ts, NULL);
		if (n < 0 && errno != EINTR) {
			tool_worker_fail(ws, "epoll_pwait2: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct pconn *k = ev[i].data.ptr;

			for (int j = 0; j < 64 && !k->closed; j++) {
				ssize_t r = recv(k->fd, rbuf, 65536, 0);

				if (r < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				if (r < 0) {
					tool_conn_fail(&k->u.c, "conn %u: recv: %s", k->u.c.id, strerror(errno));
					p_close(k, &open);
					break;
				}
				now = tool_now_ns();
				if (tool_uconn_rx(&k->u, rbuf, (size_t)r, now) < 0) {
					p_close(k, &open);
					break;
				}
				/* closed loop: the next datagram goes out at once */
				while (closed && now < meas_end && tool_conn_room(&k->u.c) &&
				       pu_send(k, tbuf, now) > 0)
					;
			}
		}
	}
out:
	for (unsigned i = 0; i < w->n; i++)
		p_close(&w->conns[i], &open);
	close(ep);
	free(rbuf);
	free(tbuf);
	return NULL;
}

/* The epoll engine: one plain thread per worker. */
int load_start_epoll(void)
{
	int ret;

	m.pw = calloc(g.workers, sizeof(*m.pw));
	if (!m.pw)
		return -ENOMEM;
	for (unsigned w = 0; w < g.workers; w++) {
		m.pw[w].idx = w;
		m.pw[w].conns = calloc(g.p.conns / g.workers + 1, sizeof(struct pconn));
		if (!m.pw[w].conns)
			return -ENOMEM;
	}
	for (unsigned i = 0; i < g.p.conns; i++) {
		struct pworker *w = &m.pw[i % g.workers];
		struct pconn *k = &w->conns[w->n++];

		if (g.p.udp ? tool_uconn_init(&k->u, i, &g.p, &g.ws[w->idx])
			    : tool_conn_init(&k->c, i, &g.p, &g.ws[w->idx]))
			return -ENOMEM;
	}
	for (unsigned w = 0; w < g.workers; w++) {
		ret = pthread_create(&m.pw[w].th, NULL, g.p.udp ? pu_worker : p_worker, &m.pw[w]);
		if (ret) {
			fprintf(stderr, "corio-load: pthread_create: %s\n", strerror(ret));
			return 1;
		}
	}
	return 0;
}
