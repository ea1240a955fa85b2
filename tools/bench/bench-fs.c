/* SPDX-License-Identifier: MIT */
/*
 * bench-fs - 4 KiB random reads over one file, through the page cache
 * ("buffered") and with O_DIRECT ("direct"), at several queue depths, by
 * three engines pinned to the same single CPU:
 *
 *   corio    one shard, QD fibers each looping on corio_read_at()
 *   pool     a libuv-style thread pool: one requester thread keeps QD reads
 *            queued to QD worker threads that pread(2) and hand the result
 *            back (what an event loop without io_uring does for file I/O)
 *   threads  QD threads each looping on pread(2) directly: no hand-off at
 *            all, the cheapest possible use of synchronous pread (an upper
 *            bound for any thread pool, not something a loop can use)
 *
 * Per cell: IOPS, CPU use of the process (all its threads, io_uring
 * workers included), IOPS per busy core (IOPS / CPU use), and p50/p99
 * latency of one read. With --reps N each cell runs N times, engines
 * alternating, and the medians are printed.
 *
 *   bench-fs [--size MiB] [--seconds S] [--qd 1,32,128] [--reps N]
 *            [--cpu C] [--dir DIR] [--modes buffered,direct]
 */
#include <corio.h>

#include "common/backend.h"
#include "common/opt.h"
#include "common/timing.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#define BS 4096
#define MAXQD 1024
#define MAXREPS 15

static uint64_t file_size = 1024ull << 20;
static double seconds = 1.0;
static double warm = 0.2;
static int cpu = -1;
static const char *dir;
static char path[4096];
static int qds[8] = { 1, 32, 128 }, nqd = 3;
static int reps = 1;
static int do_buffered = 1, do_direct = 1;
static cpu_set_t orig_mask;

/* ---- latency histogram: 16 sub-buckets per power of two of ns --------------- */
#define HB 16
struct hist {
	uint64_t b[64 * HB];
	uint64_t n;
};

static unsigned hbucket(uint64_t ns)
{
	unsigned msb;

	if (ns < HB)
		return (unsigned)ns;
	msb = 63u - (unsigned)__builtin_clzll(ns);
	return (msb - 3) * HB + (unsigned)((ns >> (msb - 4)) & (HB - 1));
}

static uint64_t hvalue(unsigned b)
{
	unsigned msb = b / HB + 3, sub = b % HB;

	if (b < HB)
		return b;
	return ((uint64_t)(HB + sub) << (msb - 4)) + ((1ull << (msb - 4)) >> 1);
}

static void hadd(struct hist *h, uint64_t ns)
{
	h->b[hbucket(ns)]++;
	h->n++;
}

static void hmerge(struct hist *to, const struct hist *from)
{
	for (unsigned i = 0; i < 64 * HB; i++)
		to->b[i] += from->b[i];
	to->n += from->n;
}

static double hq(const struct hist *h, double q)
{
	uint64_t want = (uint64_t)(q * (double)h->n), seen = 0;

	for (unsigned i = 0; i < 64 * HB; i++) {
		seen += h->b[i];
		if (seen > want)
			return (double)hvalue(i) / 1000.0;
	}
	return 0;
}

/* ---- shared ----------------------------------------------------------------- */

struct result {
	double iops, cpu, per_core, p50, p99;
	int err;
};

static uint64_t now_ns(void)
{
	return corio_now_ns();
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static uint64_t rnd_off(uint64_t *s)
{
	return (rnd(s) % (file_size / BS)) * BS;
}

static void pin_self(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* Window of one run: ops completing in [t_from, t_to) are counted. */
struct window {
	uint64_t t_from, t_to;
};

static struct window window_from_now(void)
{
	uint64_t t = now_ns() + tool_s_to_ns(warm);

	return (struct window){ t, t + tool_s_to_ns(seconds) };
}

static void finish(struct result *r, const struct hist *h, double cpu0, uint64_t t0)
{
	double wall = (double)(now_ns() - t0) / 1e9;

	r->iops = (double)h->n / seconds;
	r->cpu = (cpu_seconds() - cpu0) / wall;
	r->per_core = r->cpu > 0.01 ? r->iops / r->cpu : 0;
	r->p50 = hq(h, 0.50);
	r->p99 = hq(h, 0.99);
}

/* ---- corio ------------------------------------------------------------------ */

struct corio_run {
	int direct, qd;
	struct window w;
	struct hist h;
	struct corio_wg wg;
	int fd;
	int err;
	const char *why;
};

static int corio_reader(void *arg)
{
	struct corio_run *c = arg;
	uint64_t seed = 0x1234567ull + (uint64_t)(uintptr_t)&seed;
	void *buf = corio_dma_alloc(BS);
	uint64_t t;

	if (!buf) {
		c->err = -ENOMEM;
		goto out;
	}
	do {
		uint64_t t0 = now_ns();
		ssize_t r = corio_read_at(c->fd, buf, BS, rnd_off(&seed));

		t = now_ns();
		if (r != BS) {
			c->err = r < 0 ? (int)r : -EIO;
			c->why = corio_last_error();
			break;
		}
		if (t >= c->w.t_from && t < c->w.t_to)
			hadd(&c->h, t - t0);
	} while (t < c->w.t_to);
	corio_dma_free(buf);
out:
	corio_wg_done(&c->wg);
	return 0;
}

static void corio_entry(void *arg)
{
	struct corio_run *c = arg;

	c->fd = corio_open(path, O_RDONLY | (c->direct ? O_DIRECT : 0), 0);
	if (c->fd < 0) {
		c->err = c->fd;
		return;
	}
	corio_wg_init(&c->wg);
	corio_wg_add(&c->wg, c->qd);
	c->w = window_from_now();
	for (int i = 0; i < c->qd; i++)
		if (corio_spawn(corio_reader, c, NULL, NULL))
			corio_wg_done(&c->wg);
	corio_wg_wait(&c->wg);
	corio_close_fd(c->fd);
}

static struct result run_corio(int direct, int qd)
{
	static struct corio_run c;
	struct corio_config cfg;
	struct result r = { 0 };
	double cpu0 = cpu_seconds();
	uint64_t t0 = now_ns();
	int ret;

	memset(&c, 0, sizeof(c));
	c.direct = direct;
	c.qd = qd;
	corio_config_init(&cfg);
	cfg.shards = 1;
	cfg.cpus = &cpu;
	cfg.sq_entries = 256;
	cfg.stack_size = 64 * 1024;
	ret = corio_run(&cfg, corio_entry, &c);
	if (ret || c.err) {
		fprintf(stderr, "bench-fs: corio run failed: %s (%s)\n",
			strerror(-(ret ? ret : c.err)), ret ? corio_last_error() : c.why ? c.why : "");
		r.err = ret ? ret : c.err;
		return r;
	}
	finish(&r, &c.h, cpu0, t0);
	return r;
}

/* ---- thread pool with hand-off (libuv style) ------------------------------------ */

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t work_cv, done_cv;
	int fd;
	/* pending requests and completions: rings of slot ids */
	int req[MAXQD], nreq, rhead;
	int done[MAXQD], ndone, dhead;
	uint64_t off[MAXQD], start[MAXQD];
	int res[MAXQD];
	char *bufs;
	int stop;
	int err;
};

static void *pool_worker(void *arg)
{
	struct pool *p = arg;

	pin_self();
	pthread_mutex_lock(&p->lock);
	for (;;) {
		int slot;
		ssize_t r;

		while (!p->nreq && !p->stop)
			pthread_cond_wait(&p->work_cv, &p->lock);
		if (p->stop)
			break;
		slot = p->req[p->rhead];
		p->rhead = (p->rhead + 1) % MAXQD;
		p->nreq--;
		pthread_mutex_unlock(&p->lock);
		r = pread(p->fd, p->bufs + (size_t)slot * BS, BS, (off_t)p->off[slot]);
		pthread_mutex_lock(&p->lock);
		p->res[slot] = r == BS ? 0 : r < 0 ? -errno : -EIO;
		p->done[(p->dhead + p->ndone) % MAXQD] = slot;
		if (p->ndone++ == 0)
			pthread_cond_signal(&p->done_cv);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static struct result run_pool(int direct, int qd)
{
	static struct pool p;
	struct result r = { 0 };
	struct hist *h = calloc(1, sizeof(*h));
	pthread_t th[MAXQD];
	uint64_t seed = 0x9876543ull, t, t0 = now_ns();
	double cpu0 = cpu_seconds();
	struct window w;
	int got[MAXQD], inflight;

	memset(&p, 0, sizeof(p));
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.work_cv, NULL);
	pthread_cond_init(&p.done_cv, NULL);
	p.fd = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
	if (p.fd < 0 || posix_memalign((void **)&p.bufs, BS, (size_t)qd * BS)) {
		r.err = -errno;
		free(h);
		return r;
	}
	for (int i = 0; i < qd; i++)
		pthread_create(&th[i], NULL, pool_worker, &p);
	w = window_from_now();
	/* the requester: this thread, pinned with its workers */
	pin_self();
	pthread_mutex_lock(&p.lock);
	for (int i = 0; i < qd; i++) {
		p.off[i] = rnd_off(&seed);
		p.start[i] = now_ns();
		p.req[(p.rhead + p.nreq++) % MAXQD] = i;
	}
	pthread_cond_broadcast(&p.work_cv);
	inflight = qd;
	do {
		int n;

		while (!p.ndone)
			pthread_cond_wait(&p.done_cv, &p.lock);
		n = p.ndone;
		for (int i = 0; i < n; i++)
			got[i] = p.done[(p.dhead + i) % MAXQD];
		p.dhead = (p.dhead + n) % MAXQD;
		p.ndone = 0;
		pthread_mutex_unlock(&p.lock);
		t = now_ns();
		for (int i = 0; i < n; i++) {
			int s = got[i];

			if (p.res[s] && !r.err)
				r.err = p.res[s];
			if (t >= w.t_from && t < w.t_to)
				hadd(h, t - p.start[s]);
		}
		inflight -= n;
		pthread_mutex_lock(&p.lock);
		if (t < w.t_to && !r.err) {
			for (int i = 0; i < n; i++) {
				int s = got[i];

				p.off[s] = rnd_off(&seed);
				p.start[s] = t;
				p.req[(p.rhead + p.nreq++) % MAXQD] = s;
				pthread_cond_signal(&p.work_cv);
			}
			inflight += n;
		}
	} while (inflight);
	p.stop = 1;
	pthread_cond_broadcast(&p.work_cv);
	pthread_mutex_unlock(&p.lock);
	for (int i = 0; i < qd; i++)
		pthread_join(th[i], NULL);
	close(p.fd);
	free(p.bufs);
	if (!r.err)
		finish(&r, h, cpu0, t0);
	free(h);
	/* unpin the main thread again */
	pthread_setaffinity_np(pthread_self(), sizeof(orig_mask), &orig_mask);
	return r;
}

/* ---- plain threads, each pread in a loop -------------------------------------- */

struct tctx {
	int fd;
	struct window w;
	struct hist h;
	int err;
	uint64_t seed;
};

static void *plain_thread(void *arg)
{
	struct tctx *t = arg;
	void *buf;
	uint64_t now;

	pin_self();
	if (posix_memalign(&buf, BS, BS)) {
		t->err = -ENOMEM;
		return NULL;
	}
	do {
		uint64_t t0 = now_ns();
		ssize_t r = pread(t->fd, buf, BS, (off_t)rnd_off(&t->seed));

		now = now_ns();
		if (r != BS) {
			t->err = r < 0 ? -errno : -EIO;
			break;
		}
		if (now >= t->w.t_from && now < t->w.t_to)
			hadd(&t->h, now - t0);
	} while (now < t->w.t_to);
	free(buf);
	return NULL;
}

static struct result run_threads(int direct, int qd)
{
	struct result r = { 0 };
	struct tctx *t = calloc((size_t)qd, sizeof(*t));
	struct hist *h = calloc(1, sizeof(*h));
	pthread_t th[MAXQD];
	uint64_t t0 = now_ns();
	double cpu0 = cpu_seconds();
	struct window w = window_from_now();
	int fd = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));

	if (fd < 0) {
		r.err = -errno;
		goto out;
	}
	for (int i = 0; i < qd; i++) {
		t[i] = (struct tctx){ .fd = fd, .w = w, .seed = 0x51ed270b27ull * (uint64_t)(i + 1) };
		pthread_create(&th[i], NULL, plain_thread, &t[i]);
	}
	for (int i = 0; i < qd; i++) {
		pthread_join(th[i], NULL);
		hmerge(h, &t[i].h);
		if (t[i].err && !r.err)
			r.err = t[i].err;
	}
	close(fd);
	if (!r.err)
		finish(&r, h, cpu0, t0);
out:
	free(t);
	free(h);
	return r;
}

/* ---- driver -------------------------------------------------------------------- */

static int create_file(void)
{
	uint64_t seed = 99, t0 = now_ns();
	char *buf;
	int fd;

	snprintf(path, sizeof(path), "%s/corio-bench-fs.%d.dat", dir, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		fprintf(stderr, "bench-fs: open %s: %s\n", path, strerror(errno));
		return -1;
	}
	buf = malloc(1 << 20);
	for (size_t i = 0; i < (1u << 20) / 8; i++)
		((uint64_t *)buf)[i] = rnd(&seed);
	for (uint64_t off = 0; off < file_size; off += 1 << 20) {
		buf[0] = (char)off; /* no two MiB alike */
		if (pwrite(fd, buf, 1 << 20, (off_t)off) != 1 << 20) {
			fprintf(stderr, "bench-fs: writing %s: %s\n", path, strerror(errno));
			unlink(path);
			free(buf);
			close(fd);
			return -1;
		}
	}
	free(buf);
	/* on disk, so O_DIRECT reads really reach the device */
	fsync(fd);
	close(fd);
	printf("file: %s, %llu MiB written and synced in %.1f s\n", path,
	       (unsigned long long)(file_size >> 20), (double)(now_ns() - t0) / 1e9);
	return 0;
}

static const char *fs_name(const char *p)
{
	struct statfs sf;

	if (statfs(p, &sf))
		return "?";
	switch ((unsigned long)sf.f_type) {
	case 0xEF53: return "ext4";
	case 0x01021994: return "tmpfs";
	case 0x58465342: return "xfs";
	case 0x9123683E: return "btrfs";
	case 0x794c7630: return "overlayfs";
	default: return "other";
	}
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static struct result median(struct result *rs, int n)
{
	double v[MAXREPS];
	struct result m = { 0 };

	for (int i = 0; i < n; i++)
		if (rs[i].err)
			return rs[i];
#define MED(field)                                 \
	for (int i = 0; i < n; i++)                \
		v[i] = rs[i].field;                \
	qsort(v, (size_t)n, sizeof(double), cmpd); \
	m.field = v[n / 2];
	MED(iops) MED(cpu) MED(per_core) MED(p50) MED(p99)
#undef MED
	return m;
}

static void print_cell(const struct result *r)
{
	if (r->err) {
		printf(" | %-39s", strerror(-r->err));
		return;
	}
	printf(" | %7.0fk %4.0f%% %8.0fk %6.1f %7.1f", r->iops / 1e3, r->cpu * 100,
	       r->per_core / 1e3, r->p50, r->p99);
}

/* --qd 1,32,128: up to 8 queue depths in 1..MAXQD. */
static int parse_qd(const char *label, const char *s, void *to)
{
	char one[24];
	uint64_t v;
	int n = 0;

	(void)to;
	for (const char *p = s;; p++) {
		size_t len = strcspn(p, ",");

		if (n == 8 || len >= sizeof(one)) {
			fprintf(stderr, "bench-fs: %s: bad value '%s' (at most 8 depths)\n", label, s);
			return -EINVAL;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		if (tool_opt_count(label, one, 1, MAXQD, &v))
			return -EINVAL;
		qds[n++] = (int)v;
		p += len;
		if (!*p)
			break;
	}
	nqd = n;
	return 0;
}

/* --modes buffered,direct: which of the two to run. */
static int parse_modes(const char *label, const char *s, void *to)
{
	static const char *const modes[] = { "buffered", "direct", NULL };
	int want[2] = { 0, 0 };
	char one[24];

	(void)to;
	for (const char *p = s;; p++) {
		size_t len = strcspn(p, ",");
		int m;

		snprintf(one, sizeof(one), "%.*s", (int)len, p);
		if ((m = tool_opt_choice(label, one, modes)) < 0)
			return -EINVAL;
		want[m] = 1;
		p += len;
		if (!*p)
			break;
	}
	do_buffered = want[0];
	do_direct = want[1];
	return 0;
}

static int parse_options(int argc, char **argv)
{
	static uint64_t size_mib = 1024;
	static const struct tool_opt opts[] = {
		{ TOOL_OPT_COUNT("size", 0, size_mib, 1, 1u << 20, "MiB", "file size (1024)") },
		{ TOOL_OPT_SECONDS("seconds", 0, seconds, 0.001, 3600, "S",
				   "measured per run, after 0.2 s warm-up (1)") },
		{ TOOL_OPT_CALL("qd", 0, parse_qd, NULL, "1,32,128", "queue depths (1,32,128)") },
		{ TOOL_OPT_COUNT("reps", 0, reps, 1, MAXREPS, "N", "runs per cell, medians (1)") },
		{ TOOL_OPT_COUNT("cpu", 0, cpu, 0, CPU_SETSIZE - 1, "C",
				 "the CPU (the last of the affinity mask)") },
		{ TOOL_OPT_STRING("dir", 0, dir, "DIR", "where the file goes ($TMPDIR, else /var/tmp)") },
		{ TOOL_OPT_CALL("modes", 0, parse_modes, NULL, "buffered,direct",
				"page cache, O_DIRECT or both (both)") },
		{ 0 },
	};
	static const struct tool_cli cli = {
		"bench-fs",
		"[--size MiB] [--seconds S] [--qd 1,32,128] [--reps N] [--cpu C] [--dir DIR] "
		"[--modes buffered,direct]",
		NULL, opts,
	};
	int ret = tool_opt_parse(&cli, argc, argv);

	file_size = size_mib << 20;
	return ret;
}

/* The CPU's model name, or "?". */
static void cpu_model(char *model, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];

	snprintf(model, len, "?");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
			snprintf(model, len, "%s", strchr(line, ':') + 2);
			model[strcspn(model, "\n")] = 0;
			break;
		}
	fclose(f);
}

/* The setup lines, before the file is made. */
static const char *backend; /* tool_backend(), asked once (it starts a runtime) */

static void print_setup(const cpu_set_t *mask)
{
	struct utsname un;
	char model[128];

	cpu_model(model, sizeof(model));
	uname(&un);
	printf("bench-fs: 4 KiB random reads, every engine pinned to CPU %d of %d (%s), "
	       "kernel %s\n", cpu, CPU_COUNT(mask), model, un.release);
	backend = tool_backend();
	printf("corio: 1 shard, backend %s, QD fibers each in corio_read_at(), buffers from "
	       "corio_dma_alloc()\n", backend);
	printf("pool: 1 requester + QD pread workers (hand-off via mutex/condvar); "
	       "threads: QD threads in pread(), no hand-off\n");
	printf("dir: %s (%s); %.1f s measured per run after %.1f s warm-up; %d rep%s, medians\n",
	       dir, fs_name(dir), seconds, warm, reps, reps > 1 ? "s" : "");
}

static void print_columns(void)
{
	printf("columns per engine: IOPS, CPU use of the process, IOPS per busy core, p50 and p99 "
	       "latency of one read in us\n\n");
	printf("%-8s %4s | %-39s | %-39s | %-39s | %s\n", "", "", "corio", "pool (hand-off)",
	       "threads (no hand-off)", "corio/pool");
	printf("%-8s %4s", "mode", "QD");
	for (int i = 0; i < 3; i++)
		printf(" | %8s %5s %9s %6s %7s", "IOPS", "cpu", "IOPS/core", "p50", "p99");
	printf(" | %s\n", "per core");
}

/* One mode's rows, every queue depth; the QD32 corio/pool ratio, or 0. */
static double run_mode(int direct)
{
	double ratio32 = 0;

	for (int qi = 0; qi < nqd; qi++) {
		struct result rc[MAXREPS], rp[MAXREPS], rt[MAXREPS], c, p, t;

		for (int k = 0; k < reps; k++) { /* alternate: A B C A B C */
			rc[k] = run_corio(direct, qds[qi]);
			rp[k] = run_pool(direct, qds[qi]);
			rt[k] = run_threads(direct, qds[qi]);
		}
		c = median(rc, reps);
		p = median(rp, reps);
		t = median(rt, reps);
		printf("%-8s %4d", direct ? "direct" : "buffered", qds[qi]);
		print_cell(&c);
		print_cell(&p);
		print_cell(&t);
		if (!c.err && !p.err && p.per_core > 0) {
			printf(" | %.2fx\n", c.per_core / p.per_core);
			if (qds[qi] == 32)
				ratio32 = c.per_core / p.per_core;
		} else {
			printf(" |\n");
		}
		fflush(stdout);
		if (c.err == -EINVAL && direct) {
			printf("direct: O_DIRECT not supported in %s: skipped\n", dir);
			break;
		}
	}
	return ratio32;
}

int main(int argc, char **argv)
{
	cpu_set_t mask;
	double ratio32[2] = { 0, 0 };
	int ret = parse_options(argc, argv);

	if (ret)
		return ret > 0 ? 0 : 2;
	if (!dir)
		dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	sched_getaffinity(0, sizeof(mask), &mask);
	orig_mask = mask;
	if (cpu < 0) /* the last CPU of the mask: CPU 0 takes more interrupts */
		for (int c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &mask))
				cpu = c;
	print_setup(&mask);
	if (create_file())
		return 1;
	print_columns();
	for (int m = 0; m < 2; m++) {
		int direct = m == 1;

		if ((direct && !do_direct) || (!direct && !do_buffered))
			continue;
		ratio32[m] = run_mode(direct);
	}
	unlink(path);
	/* The goal is io_uring's: on the fallback corio's file reads go
	 * through a blocking-work pool themselves, so no goal is judged there. */
	for (int m = 0; m < 2; m++) {
		if (ratio32[m] <= 0)
			continue;
		if (strcmp(backend, "io_uring") == 0)
			printf("goal QD32 >= 2x pool IOPS per core, %s: %.2fx %s\n",
			       m ? "direct" : "buffered", ratio32[m], ratio32[m] >= 2 ? "met" : "NOT met");
		else
			printf("QD32 corio/pool IOPS per core, %s: %.2fx (the 2x goal is io_uring's: "
			       "on the %s fallback corio reads regular files on a blocking-work pool "
			       "too)\n", m ? "direct" : "buffered", ratio32[m], backend);
	}
	return 0;
}
