/* SPDX-License-Identifier: MIT */
/* tools/examples/httpd/httpd.c - the server; main.c says what it does. */
#include "httpd.h"

#include <ctype.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

/*
 * The open-file cache: one per shard, a few dozen files directly under DIR
 * kept open, so a file served again costs one fstatat(2) instead of an
 * open, an fstat and a close (two of them ring round trips: about 1,600
 * of the 5,900 instructions a 4 KiB GET took). It changes nothing that is
 * served: every request stats the name (AT_SYMLINK_NOFOLLOW) and uses the
 * cached fd only when the name is still that same regular file (device and
 * inode, which the open fd keeps from being reused) with the same mode,
 * owner and ctime as when it was opened, so a file replaced, removed,
 * turned into a link or chmod-ed is opened afresh (or gets its 404 / 403)
 * exactly as without the cache; the length is the stat's, the bytes the
 * inode's (a file rewritten in place is the same inode). Only a name served
 * in the last FCACHE_IDLE_S seconds is stat-ed on the shard (its dentry was
 * just used, its inode is held open): a cold name takes corio_openat's
 * path, which never blocks the shard on the disk. An entry nobody asked
 * for in FCACHE_IDLE_S seconds is closed, so a removed file's space is
 * held that long at most; an entry some response is sending from (users)
 * is never closed or replaced. Paths with a '/' after the first (files in
 * subdirectories, the index.html of a directory) are not cached.
 */
#define FCACHE_SLOTS 64
#define FCACHE_IDLE_S 2
#define HEAD_OPEN_MAX 200 /* a head up to its length's digits */

struct fentry {
	int fd;         /* -1: empty */
	unsigned users; /* responses sending from fd now */
	time_t used;    /* the second of the last request for it */
	dev_t dev;
	ino_t ino;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	struct timespec ctime;
	const char *type;
	time_t head_sec;    /* the second in head's Date */
	off_t head_size;    /* the length in head */
	size_t head_len;    /* 0: none yet */
	char head[HEAD_OPEN_MAX]; /* head_open's for this file */
	size_t len;         /* of name */
	char name[NAME_MAX + 1];
};

/* One shard's server: its configuration and its open files. */
struct shard {
	const struct httpd_conf *conf;
	time_t swept; /* the second of the last sweep for idle entries */
	struct fentry files[FCACHE_SLOTS];
};

static __thread struct shard *srv; /* this shard's */

enum { M_GET, M_HEAD, M_OTHER };

struct req {
	int method;
	bool close; /* answer with Connection: close, then close */
	char path[HTTPD_HEAD_MAX];
};

static bool word_is(const char *p, size_t n, const char *w)
{
	return n == strlen(w) && strncasecmp(p, w, n) == 0;
}

/* "METHOD SP /target SP HTTP/1.x": 0 or 400. */
static int parse_request_line(const char *p, size_t n, struct req *r)
{
	const char *sp1 = memchr(p, ' ', n);
	const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - p)) : NULL;

	if (!sp1 || sp1 == p || !sp2 || sp1[1] != '/' || p + n - sp2 != 9 ||
	    memcmp(sp2 + 1, "HTTP/1.", 7) != 0 || (sp2[8] != '0' && sp2[8] != '1'))
		return 400;
	r->method = (sp1 - p == 3 && memcmp(p, "GET", 3) == 0) ||
				    word_is(p, (size_t)(sp1 - p), "GET") ? M_GET
		    : word_is(p, (size_t)(sp1 - p), "HEAD") ? M_HEAD : M_OTHER;
	r->close = sp2[8] == '0'; /* HTTP/1.0 closes unless it asks to keep alive */
	memcpy(r->path, sp1 + 1, (size_t)(sp2 - sp1 - 1));
	r->path[sp2 - sp1 - 1] = '\0';
	return 0;
}

/* "Name: value": 0, 400 (malformed) or 413 (a body: this server reads none). */
static int parse_header(const char *p, size_t n, struct req *r)
{
	const char *colon = memchr(p, ':', n), *v = colon ? colon + 1 : p;
	size_t nl = colon ? (size_t)(colon - p) : 0, vl;

	if (!nl || memchr(p, ' ', nl))
		return 400;
	while (v < p + n && (*v == ' ' || *v == '\t'))
		v++;
	for (vl = (size_t)(p + n - v); vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'); vl--)
		;
	if (word_is(p, nl, "transfer-encoding"))
		return 413;
	if (word_is(p, nl, "content-length")) /* digits only; not all zeros: a body */
		return !vl || strspn(v, "0123456789") < vl ? 400 : strspn(v, "0") < vl ? 413 : 0;
	if (word_is(p, nl, "connection"))
		r->close = memmem(v, vl, "close", 5)        ? true
			   : memmem(v, vl, "keep-alive", 10) ? false : r->close;
	return 0;
}

/* Read a request head into r within the idle deadline: 0, a status to
 * answer before closing (400, 408, 413, 431), or -1: close quietly (end of
 * stream, an idle timeout or the drain before a byte of it came, an error).
 * The head is parsed in place in the stream's buffer, a line at a time as
 * its lines come (a bad request line is answered before the rest arrives),
 * and consumed whole: one peek per head that came in one piece, where a
 * read per line cost about 200 instructions each. */
static int read_head(struct corio_stream *st, struct req *r)
{
	struct corio_deadline d;
	size_t used = 0, seen = 0; /* bytes in complete lines; bytes looked at */
	int ret;

	corio_timeout_push(&d, srv->conf->idle_ns ? srv->conf->idle_ns : UINT64_MAX / 2);
	ret = corio_stream_wait(st, corio_drain_event()) > 0 ? 0 : -1;
	while (ret == 0) {
		const char *v, *nl;
		ssize_t n = seen >= HTTPD_HEAD_MAX
				    ? -EMSGSIZE
				    : corio_stream_peek_upto(st, seen + 1, HTTPD_HEAD_MAX,
							     (const void **)&v);

		if (n == -EMSGSIZE) {
			ret = 431;
			break;
		}
		if (n == -ETIMEDOUT)
			ret = used || corio_stream_buffered(st) ? 408 : -1;
		else if (n <= (ssize_t)seen)
			ret = -1; /* end of stream (inside a head too), the drain, an error */
		else
			seen = n > HTTPD_HEAD_MAX ? HTTPD_HEAD_MAX : (size_t)n;
		while (ret == 0 && (nl = memchr(v + used, '\n', seen - used))) {
			const char *line = v + used;
			size_t k = (size_t)(nl - line) - (nl > line && nl[-1] == '\r'); /* no CRLF */

			ret = !used ? parse_request_line(line, k, r) : k ? parse_header(line, k, r) : 1;
			used = (size_t)(nl + 1 - v);
		}
	}
	corio_stream_consume(st, used);
	corio_deadline_pop(&d);
	return ret == 1 ? 0 : ret;
}

static const char *reason(int code)
{
	switch (code) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 431:
		return "Request Header Fields Too Large";
	default:
		return "Error";
	}
}

static const char *content_type(const char *path)
{
	static const char *const map[][2] = {
		{ "html", "text/html" }, { "txt", "text/plain" }, { "css", "text/css" },
		{ "js", "text/javascript" }, { "json", "application/json" }, { "png", "image/png" },
		{ "jpg", "image/jpeg" }, { "svg", "image/svg+xml" },
	};
	const char *dot = strrchr(path, '.');

	for (size_t i = 0; dot && !strchr(dot, '/') && i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(dot + 1, map[i][0]) == 0)
			return map[i][1];
	return "application/octet-stream";
}

/* The Date header's value, formatted once a second per shard; *sec
 * the second it names. */
static const char *http_date(time_t *sec)
{
	static __thread time_t last;
	static __thread char buf[64];
	time_t now = time(NULL);
	struct tm tm;

	if (now != last && gmtime_r(&now, &tm) &&
	    strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm))
		last = now;
	*sec = last;
	return buf;
}

/* The head of a response up to its Content-Length's digits (what does
 * not depend on the request) at h, at most HEAD_OPEN_MAX bytes: the end.
 * Put together by hand: snprintf was 4% of the server's CPU per 4 KiB GET. */
static char *head_open(char *h, int code, const char *type, uint64_t len, time_t *sec)
{
	char num[21], *n = num + sizeof(num), *p = stpcpy(h, "HTTP/1.1 ");

	*--n = '\0';
	do
		*--n = (char)('0' + len % 10);
	while (len /= 10);
	*p++ = (char)('0' + code / 100), *p++ = (char)('0' + code / 10 % 10);
	*p++ = (char)('0' + code % 10), *p++ = ' ';
	p = stpcpy(stpcpy(stpcpy(p, reason(code)), "\r\nServer: corio-httpd\r\nDate: "), http_date(sec));
	return stpcpy(stpcpy(stpcpy(stpcpy(p, "\r\nContent-Type: "), type), "\r\nContent-Length: "), n);
}

/* Finish the head at p (from head_open) and buffer it: 0 or -1. During the
 * drain every answer is the connection's last; after 400, 408, 413, 431
 * the stream cannot be trusted. */
static int head_close(struct corio_stream *st, char *h, char *p, int code, struct req *r)
{
	static const char keep[] = "\r\n\r\n", close[] = "\r\nConnection: close\r\n\r\n",
			  allow[] = "\r\nAllow: GET, HEAD";

	r->close |= corio_draining() || (code >= 400 && code != 403 && code != 404 && code != 405);
	if (code == 405)
		p = (char *)memcpy(p, allow, sizeof(allow) - 1) + sizeof(allow) - 1;
	if (r->close)
		p = (char *)memcpy(p, close, sizeof(close) - 1) + sizeof(close) - 1;
	else
		p = (char *)memcpy(p, keep, sizeof(keep) - 1) + sizeof(keep) - 1;
	return corio_stream_write(st, h, (size_t)(p - h)) < 0 ? -1 : 0;
}

static int write_head(struct corio_stream *st, int code, struct req *r, const char *type,
		      uint64_t len)
{
	char h[HEAD_OPEN_MAX + 64];
	time_t sec;

	return head_close(st, h, head_open(h, code, type, len, &sec), code, r);
}

/* An error answer: the reason as a text body (none for HEAD). 0 or -1. */
static int answer_error(struct corio_stream *st, int code, struct req *r)
{
	char body[64];
	int n = snprintf(body, sizeof(body), "%d %s\n", code, reason(code));

	if (write_head(st, code, r, "text/plain", (size_t)n) < 0)
		return -1;
	return r->method == M_HEAD || corio_stream_write(st, body, (size_t)n) >= 0 ? 0 : -1;
}

/* Cut the query off (at the first '?'; an escaped one is the path's) and
 * decode %XX in place: 0, or -1 (a bad escape, or %00). */
static int unescape(char *s)
{
	char *o = s;

	for (; *s && *s != '?'; s++, o++) {
		*o = *s;
		if (*s != '%')
			continue;
		if (!isxdigit((unsigned char)s[1]) || !isxdigit((unsigned char)s[2]) ||
		    sscanf(s + 1, "%2hhx", (unsigned char *)o) != 1 || !*o)
			return -1;
		s += 2;
	}
	*o = '\0';
	return 0;
}

/* The regular file path names below the served directory (fd, *sb), or
 * -404 / -403: one component at a time with O_NOFOLLOW, so a ".." segment or
 * a link anywhere (even one staying inside) gets 403. A directory:
 * index.html (*index set). */
static int open_path(char *path, struct stat *sb, const char **type, bool *index)
{
	int fd = srv->conf->dir, next;
	char *save = NULL, *seg = strtok_r(path, "/", &save);

	sb->st_mode = 0;
	for (;; seg = seg ? strtok_r(NULL, "/", &save) : NULL) {
		if (seg && strcmp(seg, ".") == 0)
			continue;
		if (seg && strcmp(seg, "..") == 0)
			next = -EPERM;
		else if (seg)
			next = corio_openat(fd, seg, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
		else if (fstat(fd, sb) == 0 && S_ISDIR(sb->st_mode) && (*type = "text/html") &&
			 (*index = true))
			next = corio_openat(fd, "index.html", O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
		else
			break;
		if (fd != srv->conf->dir)
			corio_close_fd(fd);
		if (next < 0)
			return next == -ELOOP || next == -EPERM || next == -EACCES ? -403 : -404;
		fd = next;
	}
	if (fd != srv->conf->dir && S_ISREG(sb->st_mode))
		return fd;
	if (fd != srv->conf->dir)
		corio_close_fd(fd);
	return -404;
}

/* The cache's slot for path when it can be cached ("/name", no other '/',
 * not "." or ".."), with the name's length in *len; else NULL. */
static struct fentry *fcache_slot(const char *path, size_t *len)
{
	const char *name = path + 1;
	uint32_t h = 2166136261u; /* FNV-1a */
	size_t n;

	for (n = 0; name[n]; n++) {
		if (name[n] == '/')
			return NULL;
		h = (h ^ (unsigned char)name[n]) * 16777619u;
	}
	if (!n || n > NAME_MAX || (name[0] == '.' && (n == 1 || (n == 2 && name[1] == '.'))))
		return NULL;
	*len = n;
	return &srv->files[h % FCACHE_SLOTS];
}

/* Whether e's fd is still the file sb describes, with the same access. */
static bool fcache_same(const struct fentry *e, const struct stat *sb)
{
	return e->ino == sb->st_ino && e->dev == sb->st_dev && e->mode == sb->st_mode &&
	       e->uid == sb->st_uid && e->gid == sb->st_gid &&
	       e->ctime.tv_sec == sb->st_ctim.tv_sec && e->ctime.tv_nsec == sb->st_ctim.tv_nsec;
}

/* Close the entries nobody has asked for in FCACHE_IDLE_S seconds (once a
 * second, from a request: the fd leaves the slot before the close parks). */
static void fcache_sweep(time_t now)
{
	srv->swept = now;
	for (unsigned i = 0; i < FCACHE_SLOTS; i++) {
		struct fentry *e = &srv->files[i];
		int fd = e->fd;

		if (fd >= 0 && !e->users && now - e->used >= FCACHE_IDLE_S) {
			e->fd = -1;
			corio_close_fd(fd);
		}
	}
}

/* The file for path: its fd and stat, from the cache or opened (and then
 * cached when its slot is free); *e the entry to release (fcache_put), or
 * NULL: close the fd after. -404 / -403 as open_path. */
static int fcache_get(char *path, struct stat *sb, const char **type, struct fentry **ep)
{
	time_t now = time(NULL);
	size_t n = 0;
	struct fentry *e = fcache_slot(path, &n);
	char name[NAME_MAX + 1];
	bool index = false;
	int fd, old;

	if (now != srv->swept)
		fcache_sweep(now);
	*ep = NULL;
	if (e && e->fd >= 0 && e->len == n && now - e->used < FCACHE_IDLE_S &&
	    memcmp(e->name, path + 1, n) == 0 &&
	    fstatat(srv->conf->dir, e->name, sb, AT_SYMLINK_NOFOLLOW) == 0 && fcache_same(e, sb)) {
		e->users++;
		e->used = now;
		*type = e->type;
		*ep = e;
		return e->fd;
	}
	if (e)
		memcpy(name, path + 1, n + 1); /* open_path cuts path up */
	*type = content_type(path);
	fd = open_path(path, sb, type, &index);
	if (!e || e->users)
		return fd;
	if (e->fd >= 0 && e->len == n && memcmp(e->name, name, n) == 0 && fd < 0) {
		old = e->fd; /* gone, or now a link or unreadable: not kept open */
		e->fd = -1;
		corio_close_fd(old);
	}
	if (fd < 0 || index)
		return fd;
	old = e->fd;
	*e = (struct fentry){ .fd = fd, .users = 1, .used = now, .dev = sb->st_dev,
			      .ino = sb->st_ino, .mode = sb->st_mode, .uid = sb->st_uid,
			      .gid = sb->st_gid, .ctime = sb->st_ctim, .type = *type, .len = n };
	memcpy(e->name, name, n + 1);
	*ep = e;
	if (old >= 0)
		corio_close_fd(old);
	return fd;
}

/* write_head(200) for a cached file: the head as far as its length is
 * kept with the file and made again when the second or the length
 * changes, so most answers copy it. */
static int write_head_cached(struct corio_stream *st, struct req *r, struct fentry *e,
			     off_t size)
{
	char h[HEAD_OPEN_MAX + 64];
	time_t sec;

	http_date(&sec);
	if (!e->head_len || e->head_sec != sec || e->head_size != size) {
		e->head_len = (size_t)(head_open(e->head, 200, e->type, (uint64_t)size, &sec) -
				       e->head);
		e->head_sec = sec;
		e->head_size = size;
	}
	memcpy(h, e->head, e->head_len);
	return head_close(st, h, h + e->head_len, 200, r);
}

/* Answer a GET or HEAD: the head into the stream, then (GET) the file:
 * corio_sendfile from the page cache to the socket in plain HTTP, read,
 * encrypted and written over TLS. 0, or -1: end the connection (an error,
 * or the file shrank: the length sent is a lie now). */
static int answer_file(struct corio_stream *st, struct req *r)
{
	const char *type;
	struct fentry *e;
	struct stat sb;
	int fd, ret;

	if (unescape(r->path) < 0) /* the query is ignored */
		return answer_error(st, 400, r);
	fd = fcache_get(r->path, &sb, &type, &e);
	if (fd < 0)
		return answer_error(st, -fd, r);
	ret = (e ? write_head_cached(st, r, e, sb.st_size)
		 : write_head(st, 200, r, type, (uint64_t)sb.st_size)) < 0 ||
	      (r->method == M_GET && corio_stream_sendfile(st, fd, 0, (size_t)sb.st_size) < 0)
		      ? -1 : 0;
	if (e)
		e->users--;
	else
		corio_close_fd(fd);
	return ret;
}

/* One connection: corio_serve made its stream (TLS or plain) and closes
 * it after; requests until one asks to close, fails, or times out. */
static int conn_main(struct corio_conn *c)
{
	struct corio_stream *st = c->stream;
	struct req r;
	int code;

	srv = c->arg;
	do {
		r.method = M_OTHER;
		r.close = false;
		code = read_head(st, &r);
		if (code > 0)
			answer_error(st, code, &r); /* and close */
		else if (code == 0)
			code = r.method == M_OTHER ? answer_error(st, 405, &r) : answer_file(st, &r);
	} while (code == 0 && !r.close);
	return 0;
}

int httpd_serve(const struct httpd_conf *conf, const char *addr,
		void (*ready)(const struct sockaddr *a, socklen_t len, void *arg))
{
	static const struct corio_stream_opts plain = {
		.max_frame = HTTPD_HEAD_MAX, .linger_ns = 2000000000ull,
		.flags = CORIO_STREAM_AUTOFLUSH };
	static const struct corio_stream_opts tls = {
		.max_frame = HTTPD_HEAD_MAX, .linger_ns = 2000000000ull,
		.flags = CORIO_STREAM_AUTOFLUSH, .wbuf = 72 << 10 };
	struct corio_serve_opts o = { .idle_ns = conf->idle_ns, .tls = conf->tls,
				      .stream = conf->tls ? &tls : &plain,
				      .flags = CORIO_SERVE_STREAM, .ready = ready,
				      .handshake_class = conf->tls ? conf->hs_class : 0 };
	struct shard *sh = calloc(1, sizeof(*sh));
	int ret;

	if (!sh)
		return -ENOMEM;
	sh->conf = conf;
	for (unsigned i = 0; i < FCACHE_SLOTS; i++)
		sh->files[i].fd = -1;
	/* the handshake is bounded by idle_ns, and so is a connection that
	 * moves no byte; each request head has idle_ns too (read_head) */
	ret = corio_serve(addr, conn_main, sh, &o);
	for (unsigned i = 0; i < FCACHE_SLOTS; i++) /* every connection has ended */
		if (sh->files[i].fd >= 0)
			corio_close_fd(sh->files[i].fd);
	free(sh);
	return ret;
}
