/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/save.c - snapshots in Redis's RDB format without fork, loading
 * them at start, and the commands around them: SAVE, BGSAVE, LASTSAVE,
 * SHUTDOWN, save points.
 *
 * The point-in-time view: copy-on-write of entries, one bit per entry.
 *  - Each shard has a current bit (snap.cur). Outside a snapshot every entry
 *    carries it. A snapshot begins on a shard by flipping the bit: from then
 *    on, an entry whose bit differs is "in the view and not written yet";
 *    entries made after the begin carry the new bit, so they are not in it.
 *  - The shard's walker (a fiber, kv_snap_walk_fn) goes through the table's
 *    buckets a few at a time, writes each entry whose bit differs into the
 *    snapshot's buffer and gives it the current bit, hands full buffers to
 *    corio's file I/O, and yields between steps.
 *  - Every change to an entry (store.c, hash.c: a write, a delete, an
 *    expiry set or reached, a field changed) calls kv_snap_pre() first; an
 *    entry the walker has not reached is written to the buffer right then,
 *    as it was, and gets the current bit. So each entry of the view is
 *    written exactly once, with the value it had at the begin, whatever
 *    happens to it meanwhile; nothing is copied that no write touches.
 *  - The incremental rehash pauses while the walk runs (an entry moved from
 *    a bucket not yet walked to one already walked would be missed); the
 *    table still grows (new entries go to the new table, which the walk
 *    visits after the old one). FLUSHALL during a walk writes what is left
 *    first.
 * Why not versioned entries (Dragonfly's per-bucket versions)? They need a
 * version word per entry or bucket and a walk in bucket order that the
 * incremental rehash keeps moving; one bit in what was padding does it
 * here, and the memory a snapshot costs is the buffer of entries changed
 * ahead of the walk, not a second copy of the data.
 *
 * One file from many shards: shard 0 writes the header, then its own part
 * right after it; every other shard writes its part to a file of its own,
 * at the same time; then shard 0 appends those parts (reading them back and
 * carrying the CRC64 over them), the EOF opcode and the checksum, fsyncs,
 * renames the temp file over dbfilename and fsyncs the directory. With one
 * shard nothing is copied. A crash or kill before the rename leaves the
 * previous file as it was (and a temp-*.rdb file, as Redis does).
 *
 * Loading: every shard maps the file and reads all of it, keeping the keys
 * it owns (the parse runs on every shard at once; the page cache holds one
 * copy). A file that is not valid stops the start with its offset, unless
 * --load-partial yes.
 */
#include "kv.h"
#include "rdb.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef KV_SNAP_STEP
#define KV_SNAP_STEP 64               /* buckets walked per step */
#endif
#ifndef KV_SNAP_CHUNK
#define KV_SNAP_CHUNK (256 * 1024)    /* bytes handed to the file at a time */
#endif
#define KV_SAVE_RETRY_S 5             /* a failed save point tries again after this */

/* ---- the configuration ---- */

int kv_persist_init(struct kv_persist *p)
{
	int ret = pthread_mutex_init(&p->lock, NULL);

	atomic_store(&p->lastsave, kv_unix_ms() / 1000);
	atomic_store(&p->last_ok, 1);
	return -ret;
}

/* "secs changes [secs changes ...]" ("" or spaces: none): 0 or -EINVAL. */
int kv_save_points_parse(struct kv_persist *p, const char *s, size_t n)
{
	long long v[2 * KV_SAVE_POINTS];
	int k = 0;
	size_t i = 0;

	while (i < n) {
		size_t j;

		while (i < n && s[i] == ' ')
			i++;
		if (i == n)
			break;
		for (j = i; j < n && s[j] != ' '; j++)
			;
		if (k == 2 * KV_SAVE_POINTS || !kv_str2ll(s + i, j - i, &v[k]) || v[k] < 0 ||
		    (k % 2 == 0 && v[k] == 0))
			return -EINVAL;
		k++;
		i = j;
	}
	if (k % 2)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	for (int j = 0; j < k / 2; j++) {
		p->points[j].secs = v[2 * j];
		p->points[j].changes = v[2 * j + 1];
	}
	p->npoints = k / 2;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

size_t kv_save_points_format(struct kv_persist *p, char *out, size_t n)
{
	size_t len = 0;

	out[0] = 0;
	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < p->npoints && len < n; i++)
		len += (size_t)snprintf(out + len, n - len, "%s%lld %lld", i ? " " : "",
					(long long)p->points[i].secs, (long long)p->points[i].changes);
	pthread_mutex_unlock(&p->lock);
	return len < n ? len : n - 1;
}

/* ---- the copy-on-write hook ---- */

void kv_snap_cow(struct kv_shard *sh, struct kv_entry *e)
{
	struct kv_snap *s = &sh->snap;

	if (s->active && !s->failed) {
		kv_rdb_put_entry(&s->buf, e, s->unix_off);
		s->cow++;
		if (s->buf.nomem)
			s->failed = true;
	}
	e->snap = s->cur;
}

/* Write every entry of the view not written yet (FLUSHALL mid-walk). */
void kv_snap_flush_all(struct kv_shard *sh)
{
	for (int i = 0; i < 2; i++)
		for (size_t b = 0; sh->t[i].b && b <= sh->t[i].mask; b++)
			for (struct kv_entry *e = sh->t[i].b[b]; e; e = e->next)
				kv_snap_pre(sh, e);
}

/* ---- one save ---- */

struct kv_part {
	char path[1200];
	uint64_t len, crc; /* shard 0: its part's end offset, the CRC so far */
	int err;
};

struct kv_save_job {
	struct kv_server *srv;
	int fd;             /* the temp file */
	uint64_t hdr_len, hdr_crc;
	struct kv_part *part; /* [nshards] */
	char dir[1024], tmp[1200], final[1300];
	uint64_t keys, expires, dirty, used; /* at the point in time, summed */
	uint64_t t0;
	char why[1024];     /* what failed */
};

/* On every shard, at the snapshot's point in time. */
static intptr_t kv_snap_begin_fn(void *arg)
{
	struct kv_save_job *job = arg;
	struct kv_shard *sh = &job->srv->sh[corio_shard_id()];
	struct kv_snap *s = &sh->snap;

	s->cur ^= 1; /* every entry is now in the view, not written */
	s->active = true;
	s->failed = false;
	s->buf.len = 0;
	s->buf.nomem = false;
	s->unix_off = kv_unix_ms() - kv_now_ms();
	s->keys = sh->count;
	s->expires = sh->hn;
	s->dirty = KV_GET(sh->st.dirty);
	s->cow = 0;
	return 0;
}

/* Hand the records made so far to the file (swapping buffers, so changes
 * made while the write is in flight go to the other one). */
static void kv_snap_out(struct kv_snap *s, struct kv_buf *out, int fd, uint64_t *off, uint64_t *crc)
{
	struct kv_buf t = *out;

	*out = s->buf;
	s->buf = t;
	s->buf.len = 0;
	if (!s->failed && out->len) {
		ssize_t n;

		*crc = kv_crc64(*crc, out->p, out->len);
		n = corio_write_all(fd, out->p, out->len, *off, NULL);
		if (n < 0)
			s->failed = true;
		else
			*off += out->len;
	}
	out->len = 0;
}

/*
 * The walker: on every shard, in a fiber of its own. Bounded work per step
 * (KV_SNAP_STEP buckets, or a buffer of KV_SNAP_CHUNK bytes), then a yield.
 */
static intptr_t kv_snap_walk_fn(void *arg)
{
	struct kv_save_job *job = arg;
	unsigned me = corio_shard_id();
	struct kv_shard *sh = &job->srv->sh[me];
	struct kv_snap *s = &sh->snap;
	struct kv_part *pt = &job->part[me];
	struct kv_buf out = { 0 };
	uint64_t off = 0, crc = 0;
	size_t b = 0;
	int ti = 0, fd;
	bool done = false, cancelled = false;

	corio_class_switch(sh->bg_cls); /* a corio_call fiber: it ends with the walk */
	if (me == 0) {
		fd = job->fd;
		off = job->hdr_len;
		crc = job->hdr_crc;
	} else {
		fd = corio_open(pt->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0)
			s->failed = true;
	}
	while (!done) {
		for (int nb = 0; nb < KV_SNAP_STEP && s->buf.len < KV_SNAP_CHUNK;) {
			struct kv_table *t = &sh->t[ti];

			if (!t->b || b > t->mask) {
				if (ti == 1) {
					done = true;
					break;
				}
				ti = 1;
				b = 0;
				continue;
			}
			for (struct kv_entry *e = t->b[b]; e; e = e->next)
				kv_snap_pre(sh, e);
			b++;
			nb++;
		}
		if (done)
			s->active = false; /* every entry carries the current bit now */
		if (done || s->buf.len >= KV_SNAP_CHUNK)
			kv_snap_out(s, &out, fd, &off, &crc);
		if (!done) {
			/*
			 * One step per loop turn, in the background class
			 * (kv_shard_start; switched to at the top): when the
			 * connections have work, the classes' shares give the
			 * walker KV_BG_SHARES of every 100 + KV_BG_SHARES of the
			 * CPU and the connections' fibers run first; on an idle
			 * shard it goes from turn to turn at once.
			 */
			corio_yield();
			if (corio_cancelled()) /* shutdown: finish marking, write nothing */
				s->failed = cancelled = true;
		}
	}
	pt->err = !s->failed ? 0 : cancelled ? -ECANCELED : s->buf.nomem || out.nomem ? -ENOMEM : -EIO;
	pt->len = off;
	pt->crc = crc;
	kv_buf_free(&out);
	kv_buf_free(&s->buf);
	if (me != 0 && fd >= 0)
		corio_close_fd(fd);
	return pt->err;
}

static void kv_save_cleanup(struct kv_save_job *job, const char *tmp)
{
	/* plain syscalls: this runs after a cancel too, when corio's calls refuse */
	for (unsigned i = 1; i < job->srv->nshards; i++)
		unlink(job->part[i].path);
	if (tmp)
		unlink(tmp);
}

/* Copy the part file of shard i to the end of the temp file. */
static int kv_save_append(struct kv_save_job *job, unsigned i, char *buf, size_t bufsz, uint64_t *off,
			  uint64_t *crc)
{
	int fd = corio_open(job->part[i].path, O_RDONLY, 0);
	uint64_t at = 0;
	int ret = 0;

	if (fd < 0)
		return fd;
	while (at < job->part[i].len) {
		ssize_t n = corio_read_at(fd, buf, bufsz, at);

		if (n <= 0) {
			ret = n < 0 ? (int)n : -EIO;
			break;
		}
		*crc = kv_crc64(*crc, buf, (size_t)n);
		if ((n = corio_write_all(job->fd, buf, (size_t)n, *off, NULL)) < 0) {
			ret = (int)n;
			break;
		}
		*off += (uint64_t)n;
		at += (uint64_t)n;
	}
	corio_close_fd(fd);
	unlink(job->part[i].path);
	return ret;
}

static void kv_save_done(struct kv_save_job *job, int ret)
{
	struct kv_persist *p = &job->srv->persist;

	if (job->fd >= 0)
		corio_close_fd(job->fd);
	job->fd = -1;
	if (ret && job->part)
		kv_save_cleanup(job, job->tmp[0] ? job->tmp : NULL);
	atomic_store(&p->last_ok, ret == 0);
	if (!ret) {
		atomic_store(&p->lastsave, kv_unix_ms() / 1000);
		atomic_store(&p->dirty_saved, job->dirty);
		atomic_fetch_add(&p->saves, 1);
	}
	atomic_store(&p->last_ms, (int64_t)((corio_now_ns() - job->t0) / 1000000));
}

static void kv_save_job_free(struct kv_save_job *job)
{
	if (job) {
		free(job->part);
		free(job);
	}
}

/*
 * The first half of a save, on shard 0 (in a fiber): the temp file, and
 * the point in time on every shard. A BGSAVE answers once it returns, so
 * writes its client sends after the answer are not in the snapshot (as
 * after redis's fork). NULL on failure (why in why[]).
 */
static struct kv_save_job *kv_save_begin(struct kv_server *srv, char *why, size_t whylen)
{
	struct kv_persist *p = &srv->persist;
	struct kv_save_job *job = calloc(1, sizeof(*job));
	unsigned long long seq = ++p->seq;
	int ret;

	why[0] = 0;
	atomic_store(&p->last_try, kv_unix_ms() / 1000);
	if (!job || !(job->part = calloc(srv->nshards, sizeof(*job->part)))) {
		snprintf(why, whylen, "out of memory");
		atomic_store(&p->last_ok, 0);
		kv_save_job_free(job);
		return NULL;
	}
	job->srv = srv;
	job->fd = -1;
	job->t0 = corio_now_ns();
	pthread_mutex_lock(&p->lock);
	snprintf(job->dir, sizeof(job->dir), "%s", p->dir[0] ? p->dir : ".");
	snprintf(job->final, sizeof(job->final), "%s/%s", job->dir,
		 p->dbfilename[0] ? p->dbfilename : "dump.rdb");
	pthread_mutex_unlock(&p->lock);
	snprintf(job->tmp, sizeof(job->tmp), "%s/temp-%d-%llu.rdb", job->dir, (int)getpid(), seq);
	for (unsigned i = 1; i < srv->nshards; i++)
		snprintf(job->part[i].path, sizeof(job->part[i].path), "%s/temp-%d-%llu.part%u", job->dir,
			 (int)getpid(), seq, i);
	job->fd = corio_open(job->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (job->fd < 0) {
		ret = job->fd;
		snprintf(why, whylen, "cannot open %.400s: %.100s", job->tmp, strerror(-ret));
		job->tmp[0] = 0;
		kv_save_done(job, ret);
		kv_save_job_free(job);
		return NULL;
	}
	/* the point in time, shard by shard */
	if ((ret = corio_gather(kv_snap_begin_fn, job, NULL))) {
		/* a shard that began has its walk still to do: the runtime stops
		 * (that is when a gather fails), so it never will */
		snprintf(why, whylen, "cannot reach every shard: %.100s", strerror(-ret));
		kv_save_done(job, ret);
		kv_save_job_free(job);
		return NULL;
	}
	for (unsigned i = 0; i < srv->nshards; i++) {
		job->keys += srv->sh[i].snap.keys;
		job->expires += srv->sh[i].snap.expires;
		job->dirty += srv->sh[i].snap.dirty;
		job->used += KV_GET(srv->sh[i].st.used_memory);
	}
	return job;
}

/*
 * The second half, on shard 0 (in a fiber): the header, every shard's
 * walk, the parts joined, EOF and checksum, fsync, rename, fsync of the
 * directory. 0, or -errno (why in job->why). Frees job.
 */
static int kv_save_finish(struct kv_save_job *job)
{
	struct kv_server *srv = job->srv;
	struct kv_buf hdr = { 0 };
	intptr_t *res = calloc(srv->nshards, sizeof(*res));
	char *buf = NULL, *why = job->why;
	size_t whylen = sizeof(job->why);
	uint64_t off, crc;
	int ret = 0, dfd;

	why[0] = 0;
	kv_rdb_put_header(&hdr, kv_unix_ms() / 1000, job->used, job->keys, job->expires);
	if (hdr.nomem || !res) {
		ret = -ENOMEM;
		snprintf(why, whylen, "out of memory");
	} else {
		job->hdr_crc = kv_crc64(0, hdr.p, hdr.len);
		job->hdr_len = hdr.len;
		if ((ret = (int)corio_write_all(job->fd, hdr.p, hdr.len, 0, NULL)) < 0)
			snprintf(why, whylen, "cannot write %.400s: %.100s", job->tmp, strerror(-ret));
		else
			ret = 0;
	}
	{ /* the walkers run whatever happened: they give the entries their bits back */
		int wret = corio_gather(kv_snap_walk_fn, job, res);

		for (unsigned i = 0; i < srv->nshards && !wret && res; i++)
			if (res[i])
				wret = (int)res[i];
		if (!ret && wret) {
			ret = wret;
			snprintf(why, whylen, "writing the snapshot: %.100s",
				 ret == -ECANCELED ? "cancelled (the server stops)" : strerror(-ret));
		}
	}
	if (ret)
		goto out;
	off = job->part[0].len;
	crc = job->part[0].crc;
	if (srv->nshards > 1 && !(buf = malloc(1 << 20))) {
		ret = -ENOMEM;
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	for (unsigned i = 1; i < srv->nshards && !ret; i++)
		if ((ret = kv_save_append(job, i, buf, 1 << 20, &off, &crc)))
			snprintf(why, whylen, "joining shard %u's part: %.100s", i, strerror(-ret));
	if (ret)
		goto out;
	{
		uint8_t tail[9] = { RDB_OP_EOF };

		crc = kv_crc64(crc, tail, 1);
		for (int i = 0; i < 8; i++)
			tail[1 + i] = (uint8_t)(crc >> (8 * i));
		ret = (int)corio_write_all(job->fd, tail, sizeof(tail), off, NULL);
	}
	if (ret >= 0)
		ret = corio_fsync(job->fd, 0);
	if (ret < 0) {
		snprintf(why, whylen, "cannot write %.400s: %.100s", job->tmp, strerror(-ret));
		goto out;
	}
	ret = 0;
	corio_close_fd(job->fd);
	job->fd = -1;
	if ((ret = corio_rename(job->tmp, job->final))) {
		snprintf(why, whylen, "cannot rename %.400s to %.400s: %.100s", job->tmp, job->final,
			 strerror(-ret));
		goto out;
	}
	job->tmp[0] = 0; /* renamed: nothing to clean up */
	dfd = corio_open(job->dir, O_RDONLY | O_DIRECTORY, 0);
	if (dfd >= 0) { /* the rename itself made durable */
		ret = corio_fsync(dfd, 0);
		corio_close_fd(dfd);
		if (ret)
			snprintf(why, whylen, "cannot fsync %.400s: %.100s", job->dir, strerror(-ret));
	} else {
		ret = dfd;
		snprintf(why, whylen, "cannot open %.400s: %.100s", job->dir, strerror(-ret));
	}
out:
	kv_save_done(job, ret);
	kv_buf_free(&hdr);
	free(buf);
	free(res);
	return ret;
}

/* A whole save, on shard 0 (in a fiber): 0 or -errno, after a line on
 * stderr saying why (what: "SAVE", ...). The caller claimed it and
 * releases it. */
static int kv_save_run(struct kv_server *srv, const char *what)
{
	char why[1024];
	struct kv_save_job *job = kv_save_begin(srv, why, sizeof(why));
	int ret;

	if (!job) {
		fprintf(stderr, "corio-kv: %s failed: %s\n", what, why);
		return -EIO;
	}
	ret = kv_save_finish(job);
	if (ret)
		fprintf(stderr, "corio-kv: %s failed: %s\n", what, job->why);
	kv_save_job_free(job);
	return ret;
}

/* ---- SAVE, BGSAVE, the save points, SHUTDOWN ---- */

/* Take the right to save: false when a save runs. */
static bool kv_save_claim(struct kv_persist *p, bool bg)
{
	int zero = 0;

	if (!atomic_compare_exchange_strong(&p->in_progress, &zero, 1))
		return false;
	atomic_store(&p->bg, bg);
	return true;
}

static void kv_save_release(struct kv_persist *p)
{
	atomic_store(&p->bg, 0);
	atomic_store(&p->in_progress, 0);
}

/* corio_call target on shard 0: a save the caller waits for (claimed). */
static intptr_t kv_save_call_fn(void *arg)
{
	struct kv_server *srv = arg;
	int ret = kv_save_run(srv, "SAVE");

	kv_save_release(&srv->persist);
	return ret;
}

/* A detached fiber on shard 0: the second half of a BGSAVE. */
static int kv_bgsave_fiber(void *arg)
{
	struct kv_save_job *job = arg;
	struct kv_server *srv = job->srv;
	int ret = kv_save_finish(job);

	if (ret)
		fprintf(stderr, "corio-kv: background save failed: %s\n", job->why);
	kv_save_job_free(job);
	kv_save_release(&srv->persist);
	return ret;
}

/* corio_call target on shard 0: BGSAVE's first half (claimed), then its
 * second half in a fiber of its own. 0 once the point in time is taken. */
static intptr_t kv_bgsave_start_fn(void *arg)
{
	struct kv_server *srv = arg;
	struct corio_spawn_opts o = { .name = "kv-bgsave" };
	char why[1024];
	struct kv_save_job *job = kv_save_begin(srv, why, sizeof(why));
	int ret;

	if (!job) {
		fprintf(stderr, "corio-kv: background save failed: %s\n", why);
		kv_save_release(&srv->persist);
		return -EIO;
	}
	if ((ret = corio_spawn(kv_bgsave_fiber, job, &o, NULL))) {
		/* no fiber for the rest: finish here, the client waits */
		return kv_bgsave_fiber(job);
	}
	return 0;
}

/* Wait (polling, 10 ms) until no save runs and claim it; -ECANCELED. */
static int kv_save_claim_wait(struct kv_persist *p)
{
	while (!kv_save_claim(p, false))
		if (corio_sleep_ns(10000000) < 0)
			return -ECANCELED;
	return 0;
}

static uint64_t kv_dirty_now(struct kv_server *srv)
{
	uint64_t d = 0;

	for (unsigned i = 0; i < srv->nshards; i++)
		d += KV_GET(srv->sh[i].st.dirty);
	return d;
}

/* The saver: a fiber on shard 0 that checks the save points and a SIGTERM's
 * request to save every 100 ms (Redis's serverCron does both at 10 Hz). */
static int kv_saver_fiber(void *arg)
{
	struct kv_server *srv = arg;
	struct kv_persist *p = &srv->persist;

	while (corio_sleep_ns(100000000) == 0) {
		int64_t now = kv_unix_ms() / 1000;
		uint64_t changes = kv_dirty_now(srv) - atomic_load(&p->dirty_saved);
		bool due = false;

		if (atomic_load(&p->shutdown) == 2) {
			int ret;

			if (kv_save_claim_wait(p))
				break;
			ret = kv_save_run(srv, "saving before the exit");
			kv_save_release(p);
			if (ret) { /* Redis refuses to exit then: the data would be lost */
				fprintf(stderr, "corio-kv: not exiting: the data would be lost\n");
				atomic_store(&p->shutdown, 0);
				continue;
			}
			atomic_store(&p->stop, 1);
			corio_shutdown();
			break;
		}
		pthread_mutex_lock(&p->lock);
		for (int i = 0; i < p->npoints && !due; i++)
			due = changes >= (uint64_t)p->points[i].changes &&
			      now - atomic_load(&p->lastsave) >= p->points[i].secs;
		pthread_mutex_unlock(&p->lock);
		/* after a failure, wait a while before the next try (Redis) */
		if (due && !atomic_load(&p->last_ok) && now - atomic_load(&p->last_try) < KV_SAVE_RETRY_S)
			due = false;
		if (atomic_load(&p->scheduled) && !atomic_load(&p->in_progress)) {
			atomic_store(&p->scheduled, 0);
			due = true;
		}
		if (due && kv_save_claim(p, true)) {
			kv_save_run(srv, "background save (save point)");
			kv_save_release(p);
		}
	}
	return 0;
}

/* Start the saver (on shard 0; the other shards have none). */
void kv_saver_start(struct kv_server *srv)
{
	struct corio_spawn_opts o = { .name = "kv-saver" };

	if (corio_shard_id() == 0 && corio_spawn(kv_saver_fiber, srv, &o, &srv->persist.saver))
		srv->persist.saver = NULL;
}

void kv_saver_stop(struct kv_server *srv)
{
	if (corio_shard_id() == 0 && srv->persist.saver) {
		corio_cancel(srv->persist.saver);
		/* not joined: this fiber is itself cancelled at shutdown, and a
		 * cancelled fiber's join returns at once; detached, it is freed
		 * when it ends */
		corio_detach(srv->persist.saver);
		srv->persist.saver = NULL;
	}
}

void kv_reply_save(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	struct kv_server *srv = c->srv;
	struct kv_persist *p = &srv->persist;
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	intptr_t res = 0;
	int ret;

	switch (cmd->kind) {
	case C_LASTSAVE:
		kv_num(o, ':', (long long)atomic_load(&p->lastsave));
		return;
	case C_SAVE:
		if (!kv_save_claim(p, false)) {
			kv_err(o, "ERR Background save already in progress");
			return;
		}
		ret = corio_call(0, kv_save_call_fn, srv, &res);
		if (ret) /* the call did not run: release the claim here */
			kv_save_release(p);
		if (ret || res)
			kv_err(o, "ERR corio-kv could not save the snapshot: see its log (stderr)");
		else
			KV_LIT(o, "+OK\r\n");
		return;
	case C_BGSAVE:
		if (cmd->argc > 2 || (cmd->argc == 2 && !kv_is(&a[1], "schedule"))) {
			kv_err(o, "ERR syntax error");
			return;
		}
		if (!kv_save_claim(p, true)) {
			if (cmd->argc == 2) { /* SCHEDULE: the saver starts it after this one */
				atomic_store(&p->scheduled, 1);
				KV_LIT(o, "+Background saving scheduled\r\n");
			}
			else
				kv_err(o, "ERR Background save already in progress");
			return;
		}
		ret = corio_call(0, kv_bgsave_start_fn, srv, &res);
		if (ret) /* the call did not run: release the claim here */
			kv_save_release(p);
		if (ret || res)
			kv_err(o, "ERR corio-kv could not start the background save: see its log (stderr)");
		else
			KV_LIT(o, "+Background saving started\r\n");
		return;
	case C_SHUTDOWN: {
		bool save = false, nosave = false, force = false;

		for (uint32_t i = 1; i < cmd->argc; i++) {
			if (kv_is(&a[i], "save"))
				save = true;
			else if (kv_is(&a[i], "nosave"))
				nosave = true;
			else if (kv_is(&a[i], "force") || kv_is(&a[i], "now"))
				force |= kv_is(&a[i], "force");
			else if (kv_is(&a[i], "abort") && cmd->argc == 2) {
				kv_err(o, "ERR No shutdown in progress.");
				return;
			} else {
				kv_err(o, "ERR syntax error");
				return;
			}
		}
		if (save && nosave) {
			kv_err(o, "ERR syntax error");
			return;
		}
		if (!nosave && !save) {
			pthread_mutex_lock(&p->lock);
			save = p->npoints > 0;
			pthread_mutex_unlock(&p->lock);
		}
		if (save) {
			if (kv_save_claim_wait(p))
				return;
			ret = corio_call(0, kv_save_call_fn, srv, &res);
			if (ret)
				kv_save_release(p);
			if ((ret || res) && !force) {
				kv_err(o, "ERR Errors trying to SHUTDOWN. Check logs.");
				return;
			}
		}
		atomic_store(&p->stop, 1);
		c->closing = true; /* no reply: the connection ends with the server */
		corio_shutdown();
		return;
	}
	default:
		return;
	}
}

/* ---- loading ---- */

struct kv_load_ctx {
	struct kv_server *srv;
	struct kv_shard *sh;
	int64_t unix_now, mono_now;
	uint64_t loaded, expired;
};

static int kv_load_key(void *arg, const struct kv_rdb_obj *o)
{
	struct kv_load_ctx *x = arg;
	struct kv_shard *sh = x->sh;
	uint64_t h = kv_hash(x->srv->seed, o->key.p, o->key.n);
	struct kv_entry *e, **l;

	if (kv_owner(x->srv, h) != sh->id)
		return 0;
	if (o->expire_ms && o->expire_ms <= x->unix_now) { /* Redis's master drops these too */
		x->expired++;
		return 0;
	}
	if (o->type == KV_RDB_STR) {
		e = kv_lookup(sh, h, &o->key, &l);
		e = kv_store(sh, l, e, h, &o->key, o->val.p, o->val.n, false);
	} else {
		e = kv_hash_restore(sh, h, &o->key, o->fv, o->npairs);
	}
	if (!e)
		return -ENOMEM;
	if (o->expire_ms && !kv_set_expire(sh, e, o->expire_ms - x->unix_now + x->mono_now))
		return -ENOMEM;
	x->loaded++;
	return 0;
}

/*
 * Load dir/dbfilename into this shard (its keys only), on the shard before
 * it serves. 0 (no file is fine), or -errno after a message on stderr
 * (shard 0 says it) when the server must not start.
 */
int kv_rdb_load(struct kv_server *srv, struct kv_shard *sh)
{
	struct kv_persist *p = &srv->persist;
	struct kv_load_ctx x = { srv, sh, kv_unix_ms(), kv_now_ms(), 0, 0 };
	char path[1300], err[400];
	struct stat st;
	void *m;
	int fd, ret;

	if (!p->dbfilename[0])
		return 0;
	pthread_mutex_lock(&p->lock);
	snprintf(path, sizeof(path), "%s/%s", p->dir[0] ? p->dir : ".", p->dbfilename);
	pthread_mutex_unlock(&p->lock);
	sh->clock = (uint16_t)(corio_now_ns() / 1000000000ull);
	fd = corio_open(path, O_RDONLY, 0);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0) {
		if (sh->id == 0)
			fprintf(stderr, "corio-kv: cannot open %s: %s\n", path, strerror(-fd));
		return fd;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		corio_close_fd(fd);
		if (sh->id == 0)
			fprintf(stderr, "corio-kv: %s is not a regular file\n", path);
		return -EINVAL;
	}
	m = st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
	corio_close_fd(fd);
	if (m == MAP_FAILED) {
		ret = -errno;
		if (sh->id == 0)
			fprintf(stderr, "corio-kv: cannot map %s: %s\n", path, strerror(-ret));
		return ret;
	}
	ret = kv_rdb_parse(m ? m : "", (size_t)st.st_size, kv_load_key, &x, err, sizeof(err));
	if (m)
		munmap(m, (size_t)st.st_size);
	if (ret && sh->id == 0)
		fprintf(stderr, "corio-kv: %s: %s%s\n", path, err[0] ? err : strerror(-ret),
			p->load_partial ? " (--load-partial yes: starting with the keys read before it)"
					: " (the server does not start; --load-partial yes starts it "
					  "with the keys read before the error)");
	if (ret && !p->load_partial)
		return ret;
	KV_SET(sh->st.dirty, 0); /* what was loaded is saved */
	return 0;
}
