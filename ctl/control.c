/* SPDX-License-Identifier: MIT */
/*
 * ctl/control.c - the control socket (shard 0).
 *
 * It is served with corio's public socket API (corio/net.h), in fibers,
 * like any application would: ctl/ knows no socket internals. The server
 * and its client fibers are daemons (corio__daemon_add): they count in
 * fibers_live but do not keep the runtime running; shutdown cancels them.
 *
 * Nothing a client does can stall the shard: every read and write is a
 * parked fiber bounded by a deadline (a client that never reads is closed
 * when its answer cannot be sent in time), lines are capped at CORIO__CTL_LINE_MAX
 * bytes, each client gets a few errors before it is closed, and at most
 * CORIO_CONTROL_CLIENTS (16) are served at a time. The idle limit is a deadline on a whole
 * line, not on each receive, so a client that trickles bytes without a
 * newline loses its slot as surely as a silent one: a slot is held for at
 * most the idle limit per command.
 *
 * An abstract "@name" socket has no file and no mode: anyone on the host
 * could connect. Each client's SO_PEERCRED is checked instead, and only
 * the runtime's effective uid (at start) and root are served; anyone else
 * gets "error: permission denied" and is closed.
 *
 * The socket file is created inside a fresh mode-0700 directory, set to
 * 0600 there, and renamed over control_path: nobody can connect to it while
 * its mode is wider, and a stale socket file is replaced atomically. A
 * socket file that still answers connect() belongs to a live process and is
 * left alone; a path that is not a socket is never touched.
 */
#include "ctl/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_CLIENTS_DEFAULT 16
#define MAX_ERRORS 4

struct corio__control {
	struct corio_listener *l;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t dev;
	ino_t ino;
	bool started;    /* the server fiber ran (it closes l then) */
	bool abstract;   /* "@name": no file mode, so check SO_PEERCRED */
	uid_t owner;     /* the runtime's effective uid at start */
	unsigned clients, max_clients;
	uint64_t timeout_ns;
	struct corio__ctl_stats st;
};

static const char help_text[] =
	"commands (one per line):\n"
	"  stats  every shard's counters as one line of JSON\n"
	"  prom   the same in Prometheus text format, ending with '# EOF'\n"
	"  help   this text\n"
	"\n";

/*
 * CORIO_CONTROL_CLIENTS: clients served at once (1..1024, default 16).
 * CORIO_CONTROL_TIMEOUT_MS: the bound on each answer, and 12 times it on
 * each line (1..3600000 ms, default 5000: an idle limit of 60 s; at most
 * 12 h, far from any wrap). Read on every shard, whether or not it serves
 * the socket, so a bad value fails every start alike.
 */
static int control_env(struct corio__control *ctl, char *err, size_t len)
{
	uint64_t clients = MAX_CLIENTS_DEFAULT, ms = 5000;
	int ret = corio__env_uint("CORIO_CONTROL_CLIENTS", 1, 1024, &clients, err, len);

	if (ret >= 0)
		ret = corio__env_uint("CORIO_CONTROL_TIMEOUT_MS", 1, 3600000, &ms, err, len);
	ctl->max_clients = (unsigned)clients;
	ctl->timeout_ns = corio__ns_mul_sat(ms, CORIO__NS_PER_MS);
	return ret < 0 ? ret : 0;
}

/* Send all of buf within the control timeout: 0 or -errno. */
static int send_bounded(struct corio_sock *c, const char *buf, size_t len, uint64_t tmo)
{
	struct corio_deadline d;
	ssize_t n;

	corio_timeout_push(&d, tmo);
	n = corio_send(c, buf, len);
	corio_deadline_pop(&d);
	return n < 0 ? (int)n : 0;
}

static int answer_render(struct corio_sock *c, unsigned fmt, uint64_t tmo)
{
	static const char eof[] = "# EOF\n";
	char *out;
	size_t len;
	int ret = corio_stats_render(NULL, fmt, &out, &len);

	if (ret < 0) {
		char msg[80];
		int n = snprintf(msg, sizeof(msg), "error: cannot render: %s\n", strerror(-ret));

		return send_bounded(c, msg, (size_t)n, tmo);
	}
	ret = send_bounded(c, out, len, tmo);
	free(out);
	if (!ret && fmt == CORIO_STATS_PROM)
		ret = send_bounded(c, eof, sizeof(eof) - 1, tmo);
	return ret;
}

/* ---- the protocol, without I/O (test/fuzz/fuzz_control.c drives it) ---- */

static int classify(const char *line, size_t len)
{
	while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	while (len && (*line == ' ' || *line == '\t')) {
		line++;
		len--;
	}
	if (!len)
		return CORIO__CTL_EMPTY;
	if (len == 5 && !memcmp(line, "stats", 5))
		return CORIO__CTL_STATS;
	if (len == 4 && !memcmp(line, "prom", 4))
		return CORIO__CTL_PROM;
	if (len == 4 && !memcmp(line, "help", 4))
		return CORIO__CTL_HELP;
	return CORIO__CTL_UNKNOWN;
}

size_t corio__ctl_feed(struct corio__ctl_lines *r, const char *p, size_t n)
{
	size_t room = CORIO__CTL_LINE_MAX - r->have;

	if (n > room)
		n = room;
	memcpy(r->buf + r->have, p, n);
	r->have += n;
	return n;
}

int corio__ctl_next(struct corio__ctl_lines *r)
{
	char *nl = memchr(r->buf, '\n', r->have);
	size_t ll;
	int cmd;

	if (!nl)
		return r->have >= CORIO__CTL_LINE_MAX ? CORIO__CTL_TOO_LONG : CORIO__CTL_MORE;
	ll = (size_t)(nl - r->buf);
	cmd = classify(r->buf, ll);
	memmove(r->buf, nl + 1, r->have - ll - 1);
	r->have -= ll + 1;
	return cmd;
}

/* ---- serving ------------------------------------------------------------------ */

/* Answer one command; < 0 ends the connection. */
static int command(struct corio_sock *c, int cmd, unsigned *errors, uint64_t tmo)
{
	static const char unknown[] = "error: unknown command (try 'help')\n";

	switch (cmd) {
	case CORIO__CTL_EMPTY:
		return 0;
	case CORIO__CTL_STATS:
		return answer_render(c, CORIO_STATS_JSON, tmo);
	case CORIO__CTL_PROM:
		return answer_render(c, CORIO_STATS_PROM, tmo);
	case CORIO__CTL_HELP:
		return send_bounded(c, help_text, sizeof(help_text) - 1, tmo);
	default:
		/* never echo the line back: it may be binary */
		if (send_bounded(c, unknown, sizeof(unknown) - 1, tmo) < 0)
			return -EPIPE;
		return ++*errors >= MAX_ERRORS ? -EPROTO : 0;
	}
}

struct client {
	struct corio__control *ctl;
	struct corio_sock *c;
};

/* The abstract namespace has no file mode: serve only the runtime's own
 * user and root (who could connect to a mode-0600 file too). */
static bool peer_allowed(struct corio_sock *c, const struct corio__control *ctl)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (!ctl->abstract)
		return true; /* the 0600 file decided */
	if (corio_getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || len != sizeof(cr))
		return false;
	return cr.uid == ctl->owner || cr.uid == 0;
}

static int client_fiber(void *arg)
{
	struct client *cl = arg;
	struct corio__control *ctl = cl->ctl;
	struct corio_sock *c = cl->c;
	struct corio__ctl_lines r = { .have = 0 };
	unsigned errors = 0;
	int ret = 0, cmd = CORIO__CTL_MORE;

	free(cl);
	if (!peer_allowed(c, ctl)) {
		static const char denied[] =
			"error: permission denied (not the runtime's user)\n";

		send_bounded(c, denied, sizeof(denied) - 1, ctl->timeout_ns);
		CORIO__STAT_ADD(ctl->st.denied, 1);
		ret = -EACCES;
	}
	while (ret >= 0) {
		struct corio_deadline d;
		ssize_t n = 0;

		/*
		 * The idle limit (12 timeouts, 60 s by default) bounds the whole
		 * next line, from the end of the previous one to its newline:
		 * a client that trickles bytes cannot hold its slot for longer
		 * than that by sending one byte before each receive's deadline.
		 * Answers are sent outside it, each with its own bound.
		 */
		corio_timeout_push(&d, ctl->timeout_ns * 12);
		while ((cmd = corio__ctl_next(&r)) == CORIO__CTL_MORE) {
			n = corio_recv(c, r.buf + r.have, CORIO__CTL_LINE_MAX - r.have);
			if (n <= 0)
				break;
			r.have += (size_t)n;
		}
		corio_deadline_pop(&d);
		if (cmd == CORIO__CTL_MORE) {
			if (n == -ETIMEDOUT)
				CORIO__STAT_ADD(ctl->st.idle_dropped, 1);
			break; /* end of stream, an error, or the idle limit */
		}
		if (cmd == CORIO__CTL_TOO_LONG) {
			static const char toolong[] = "error: line too long (max 255 bytes)\n";

			send_bounded(c, toolong, sizeof(toolong) - 1, ctl->timeout_ns);
			CORIO__STAT_ADD(ctl->st.too_long, 1);
			break;
		}
		ret = command(c, cmd, &errors, ctl->timeout_ns);
	}
	corio_close(c);
	ctl->clients--;
	CORIO__STAT_SET(ctl->st.clients, ctl->clients);
	corio__daemon_add(corio__shard(), -1);
	return 0;
}

static bool still_ours(const struct corio__control *ctl)
{
	struct stat st;

	return ctl->path[0] != '@' && !lstat(ctl->path, &st) && S_ISSOCK(st.st_mode) &&
	       st.st_dev == ctl->dev && st.st_ino == ctl->ino;
}

static void close_listener(struct corio__control *ctl)
{
	if (!ctl->l)
		return;
	corio_listener_close(ctl->l);
	ctl->l = NULL;
	/* a later runtime may have taken the path over: only remove our own */
	if (still_ours(ctl))
		unlink(ctl->path);
}

static int server_fiber(void *arg)
{
	struct corio__shard *s = corio__shard();
	struct corio__control *ctl = arg;

	ctl->started = true;
	for (;;) {
		struct corio_spawn_opts o = { .name = "corio-control-client" };
		struct corio_sock *c;
		struct client *cl;
		int ret = corio_accept(ctl->l, &c);

		if (ret == -ECANCELED)
			break;
		if (ret < 0) {
			corio__log("corio: control socket %s: accept: %s; not serving it any more",
				   ctl->path, strerror(-ret));
			break;
		}
		if (ctl->clients >= ctl->max_clients || !(cl = malloc(sizeof(*cl)))) {
			static const char busy[] = "error: too many clients\n";

			CORIO__STAT_ADD(ctl->st.refused, 1);
			send_bounded(c, busy, sizeof(busy) - 1, ctl->timeout_ns / 10);
			corio_close(c);
			continue;
		}
		cl->ctl = ctl;
		cl->c = c;
		ret = corio_spawn(client_fiber, cl, &o, NULL);
		if (ret < 0) {
			free(cl);
			corio_close(c);
			if (ret == -ECANCELED)
				break;
			continue;
		}
		ctl->clients++;
		CORIO__STAT_SET(ctl->st.clients, ctl->clients);
		corio__daemon_add(s, 1);
	}
	close_listener(ctl);
	corio__daemon_add(s, -1);
	return 0;
}

static int fail(struct corio__shard *s, int err, const char *fmt, const char *path)
{
	char why[200];

	snprintf(why, sizeof(why), fmt, path);
	snprintf(s->err, sizeof(s->err), "shard %u: control socket: %s", s->id, why);
	return err;
}

/* Is something listening on the socket file at path? 1 yes, 0 no (stale),
 * -errno when we cannot tell. */
static int socket_live(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), ret;

	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	ret = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 1
	      : errno == ECONNREFUSED                          ? 0
	      : errno == EAGAIN || errno == EINPROGRESS        ? 1 /* backlog full: live */
							       : -errno;
	close(fd);
	return ret;
}

/* Listen on path with mode 0600, replacing a stale socket file. */
static int listen_private(struct corio__shard *s, struct corio__control *ctl, const char *path)
{
	char dir[sizeof(ctl->path)], tmp[sizeof(ctl->path)];
	const char *slash = strrchr(path, '/');
	struct stat st;
	int ret;

	if (!lstat(path, &st)) {
		if (!S_ISSOCK(st.st_mode))
			return fail(s, -EEXIST, "%s exists and is not a socket; not replacing it",
				    path);
		ret = socket_live(path);
		if (ret > 0)
			return fail(s, -EADDRINUSE,
				    "%s is in use: another process is listening on it", path);
		if (ret < 0)
			return fail(s, ret, "%s: cannot tell whether it is in use", path);
	} else if (errno != ENOENT) {
		return fail(s, -errno, "%s: cannot stat it", path);
	}
	if (slash)
		snprintf(dir, sizeof(dir), "%.*s/.corio-ctl.XXXXXX", (int)(slash - path), path);
	else
		snprintf(dir, sizeof(dir), ".corio-ctl.XXXXXX");
	if (strlen(dir) + 3 >= sizeof(dir))
		return fail(s, -ENAMETOOLONG, "%s: path too long for a Unix socket", path);
	if (!mkdtemp(dir)) /* mode 0700 */
		return fail(s, -errno, "%s: cannot create a private directory beside it", path);
	snprintf(tmp, sizeof(tmp), "%s/s", dir);
	ret = corio_unix_listen(tmp, NULL, &ctl->l);
	if (ret < 0) {
		rmdir(dir);
		return fail(s, ret, "%s: cannot listen", path);
	}
	if (chmod(tmp, 0600) || rename(tmp, path) || lstat(path, &st)) {
		ret = -errno;
		corio_listener_close(ctl->l);
		ctl->l = NULL;
		unlink(tmp);
		rmdir(dir);
		return fail(s, ret, "%s: cannot put the socket in place", path);
	}
	rmdir(dir);
	ctl->dev = st.st_dev;
	ctl->ino = st.st_ino;
	return 0;
}

int corio__control_init(struct corio__shard *s)
{
	struct corio__control *ctl = calloc(1, sizeof(*ctl));

	if (!ctl)
		return -ENOMEM;
	if (control_env(ctl, s->err, sizeof(s->err)) < 0) {
		free(ctl);
		return -EINVAL;
	}
	__atomic_store_n(&s->parts[CORIO__PART_CTL], ctl, __ATOMIC_RELEASE);
	return 0;
}

struct corio__ctl_stats *corio__ctl_stats_own(void)
{
	struct corio__control *ctl = corio__shard()->parts[CORIO__PART_CTL];

	return &ctl->st;
}

int corio__control_start(struct corio__shard *s, const char *path)
{
	struct corio_spawn_opts o = { .name = "corio-control" };
	struct corio__control *ctl = s->parts[CORIO__PART_CTL];
	int ret;

	if (strlen(path) >= sizeof(ctl->path))
		return fail(s, -ENAMETOOLONG, "%s: path too long for a Unix socket", path);
	snprintf(ctl->path, sizeof(ctl->path), "%s", path);
	ctl->abstract = path[0] == '@';
	ctl->owner = geteuid();
	if (path[0] == '@') /* abstract namespace: no file, no mode */
		ret = corio_unix_listen(path, NULL, &ctl->l);
	else
		ret = listen_private(s, ctl, path);
	if (ret < 0) {
		if (!s->err[0])
			fail(s, ret, "%s: cannot listen", path);
		return ret;
	}
	ret = corio_spawn(server_fiber, ctl, &o, NULL);
	if (ret < 0)
		return fail(s, ret, "%s: cannot start the server fiber", path);
	/* No busy check here: the entry fiber is not spawned yet, and the
	 * shard counts as busy until the loop has looked. */
	s->ls.daemons++;
	return 0;
}

void corio__control_fini(struct corio__shard *s)
{
	struct corio__control *ctl = s->parts[CORIO__PART_CTL];

	if (!ctl)
		return;
	/* The loop never ran (another shard failed to start): the server
	 * fiber never armed an accept, so the listener closes without one. */
	if (!ctl->started)
		close_listener(ctl);
}

void corio__control_release(struct corio__shard *s)
{
	free(s->parts[CORIO__PART_CTL]);
	s->parts[CORIO__PART_CTL] = NULL;
}

void corio__ctl_stats_get(struct corio_rt *rt, unsigned shard, struct corio__ctl_stats *out)
{
	struct corio__control *ctl = NULL;

	memset(out, 0, sizeof(*out));
	if (rt && shard < rt->nshards && rt->shards[shard])
		ctl = __atomic_load_n((struct corio__control **)&rt->shards[shard]->parts[CORIO__PART_CTL],
				      __ATOMIC_ACQUIRE);
	if (ctl)
		corio__stats_copy(out, &ctl->st, sizeof(*out));
}

