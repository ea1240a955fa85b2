/* SPDX-License-Identifier: MIT */
/* File I/O: read/write at offsets, vectored, _all helpers, fsync and reopen,
 * rename/unlink/mkdir, statx, fallocate, O_DIRECT, bad input, the forced
 * synchronous fallback, cancel, stats, the aligned allocator. Every test
 * works in its own temporary directory and removes it. */
#include "helpers.h"

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- temporary directory -------------------------------------------------- */

static char tdir[256];

static void tmp_setup(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(tdir, sizeof(tdir), "%s/corio-fs-XXXXXX", base && *base ? base : "/tmp");
	cr_assert_not_null(mkdtemp(tdir), "mkdtemp(%s): %s", tdir, strerror(errno));
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(p);
}

static void tmp_teardown(void)
{
	if (tdir[0])
		nftw(tdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void tpath(char *out, const char *name)
{
	snprintf(out, PATH_MAX, "%s/%s", tdir, name);
}

/* A test in a fresh temporary directory, removed afterwards (no TestSuite
 * .init/.fini: the TSan build's Criterion shim has none). */
#define FS_TEST(name)                                    \
	static void name##_body(void);                   \
	Test(fs, name, .timeout = 60)                    \
	{                                                \
		tmp_setup();                             \
		name##_body();                           \
		tmp_teardown();                          \
	}                                                \
	static void name##_body(void)

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fill(unsigned char *p, size_t n, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)rnd(seed);
}

static void run1(void (*entry)(void *), void *arg)
{
	struct corio_config cfg = th_cfg(1);

	th_run(&cfg, entry, arg);
}

/* ---- random data at random offsets, read back byte-exact ------------------- */

#define FSZ (1u << 20)

static void random_rw(void *arg)
{
	char path[PATH_MAX];
	unsigned char *shadow = calloc(1, FSZ), *buf = malloc(FSZ), *b2 = malloc(FSZ);
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	size_t filesize = 0;
	int fd;

	(void)arg;
	tpath(path, "random");
	fd = corio_open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	if (fd < 0)
		goto out;
	for (int i = 0; i < 400; i++) {
		size_t len = 1 + rnd(&seed) % 20000;
		uint64_t off = rnd(&seed) % (FSZ - len);
		ssize_t r;

		fill(buf, len, &seed);
		if (i % 3 == 0) { /* vectored: three pieces */
			size_t a = len / 3, b = len / 3;
			struct iovec iov[3] = { { buf, a }, { buf + a, b }, { buf + a + b, len - a - b } };

			r = corio_writev_at(fd, iov, 3, off);
		} else {
			r = corio_write_at(fd, buf, len, off);
		}
		CHECK_EQ(r, (ssize_t)len);
		memcpy(shadow + off, buf, len);
		if (off + len > filesize)
			filesize = off + len;
		/* spot-check a random range right away, alternating read forms */
		off = rnd(&seed) % filesize;
		len = 1 + rnd(&seed) % (filesize - off);
		if (i % 2) {
			struct iovec iov[2] = { { b2, len / 2 }, { b2 + len / 2, len - len / 2 } };

			r = corio_readv_at(fd, iov, 2, off);
		} else {
			r = corio_read_at(fd, b2, len, off);
		}
		CHECK_EQ(r, (ssize_t)len);
		CHECK(memcmp(b2, shadow + off, len) == 0);
	}
	/* the whole file, byte-exact, and EOF */
	CHECK_EQ(corio_read_all(fd, b2, FSZ, 0, NULL), (ssize_t)filesize);
	CHECK(memcmp(b2, shadow, filesize) == 0);
	CHECK_EQ(corio_read_at(fd, b2, 100, filesize), 0);
	CHECK_EQ(corio_read_at(fd, b2, 100, filesize + 12345), 0);
	CHECK_EQ(corio_close_fd(fd), 0);
out:
	free(shadow);
	free(buf);
	free(b2);
}

FS_TEST(random_offsets_read_back_exact) { run1(random_rw, NULL); }

/* The same through the blocking-syscall fallback a kernel without the ops
 * would use; the counters show it really ran that way. */
static void random_rw_sync(void *arg)
{
	struct corio_fs_stats st;

	random_rw(arg);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &st), 0);
	CHECK(st.sync_fallbacks > 400);
}

FS_TEST(forced_sync_fallback_is_equivalent)
{
	setenv("CORIO_FS_SYNC", "all", 1);
	run1(random_rw_sync, NULL);
	unsetenv("CORIO_FS_SYNC");
}

/* ---- several fibers writing disjoint ranges of one file --------------------- */

#define WRITERS 8
#define SLICE (64u * 1024)
#define CHUNK 4000 /* not a divisor of SLICE: the last write of each is short */

struct wctx {
	int fd;
	int idx;
	struct corio_wg *wg;
};

static unsigned char pattern(int w, size_t i)
{
	return (unsigned char)(w * 31 + i * 7 + (i >> 8));
}

static int writer(void *arg)
{
	struct wctx *w = arg;
	unsigned char buf[CHUNK];

	for (size_t done = 0; done < SLICE;) {
		size_t n = SLICE - done < CHUNK ? SLICE - done : CHUNK;

		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(w->idx, done + i);
		CHECK_EQ(corio_write_all(w->fd, buf, n, (uint64_t)w->idx * SLICE + done, NULL),
			 (ssize_t)n);
		done += n;
	}
	corio_wg_done(w->wg);
	return 0;
}

static void concurrent_writers(void *arg)
{
	char path[PATH_MAX];
	struct wctx w[WRITERS];
	struct corio_wg wg;
	unsigned char *all = malloc(WRITERS * SLICE);
	int fd;

	(void)arg;
	tpath(path, "shared");
	fd = corio_open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	corio_wg_init(&wg);
	corio_wg_add(&wg, WRITERS);
	/* spawned in reverse order, so the file grows from its end too */
	for (int i = WRITERS - 1; i >= 0; i--) {
		w[i] = (struct wctx){ .fd = fd, .idx = i, .wg = &wg };
		CHECK_EQ(corio_spawn(writer, &w[i], NULL, NULL), 0);
	}
	CHECK_EQ(corio_wg_wait(&wg), 0);
	CHECK_EQ(corio_read_all(fd, all, WRITERS * SLICE, 0, NULL), (ssize_t)(WRITERS * SLICE));
	for (int i = 0; i < WRITERS; i++)
		for (size_t j = 0; j < SLICE; j++)
			if (all[(size_t)i * SLICE + j] != pattern(i, j)) {
				CHECK(!"byte differs from its writer's pattern");
				i = WRITERS;
				break;
			}
	CHECK_EQ(corio_close_fd(fd), 0);
	free(all);
}

FS_TEST(concurrent_fibers_disjoint_ranges) { run1(concurrent_writers, NULL); }

/* Two shards writing disjoint halves of one file at the same time. */
static void two_shard_writer(void *arg)
{
	const char *path = arg;
	unsigned id = corio_shard_id();
	unsigned char buf[SLICE];
	int fd = corio_open(path, O_WRONLY | O_CREAT, 0600);

	CHECK(fd >= 0);
	for (size_t i = 0; i < SLICE; i++)
		buf[i] = pattern((int)id, i);
	for (int rep = 0; rep < 20; rep++)
		CHECK_EQ(corio_write_all(fd, buf, SLICE, (uint64_t)id * SLICE, NULL), (ssize_t)SLICE);
	CHECK_EQ(corio_close_fd(fd), 0);
}

FS_TEST(two_shards_disjoint_ranges)
{
	char path[PATH_MAX];
	struct corio_config cfg = th_cfg(2);
	unsigned char buf[2 * SLICE];
	int fd;

	tpath(path, "two");
	th_run(&cfg, two_shard_writer, path);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	close(fd);
	for (int s = 0; s < 2; s++)
		for (size_t i = 0; i < SLICE; i++)
			cr_assert_eq(buf[s * SLICE + i], pattern(s, i), "shard %d byte %zu", s, i);
}

/* ---- write, fsync, close, reopen, verify ------------------------------------------ */

static void durable(void *arg)
{
	char path[PATH_MAX];
	unsigned char data[10000], back[10000];
	uint64_t seed = 42;
	struct statx stx;
	size_t done = 7;
	int fd;

	(void)arg;
	tpath(path, "durable");
	fill(data, sizeof(data), &seed);
	fd = corio_open(path, O_WRONLY | O_CREAT | O_EXCL, 0640);
	CHECK(fd >= 0);
	CHECK_EQ(corio_write_all(fd, data, sizeof(data), 0, &done), (ssize_t)sizeof(data));
	CHECK_EQ(done, sizeof(data));
	CHECK_EQ(corio_fsync(fd, 0), 0);
	CHECK_EQ(corio_fsync(fd, CORIO_FSYNC_DATA), 0);
	CHECK_EQ(corio_close_fd(fd), 0);
	CHECK_EQ(corio_open(path, O_WRONLY | O_CREAT | O_EXCL, 0640), -EEXIST);

	CHECK_EQ(corio_statx(AT_FDCWD, path, 0, STATX_BASIC_STATS, &stx), 0);
	CHECK_EQ(stx.stx_size, sizeof(data));
	CHECK_EQ(stx.stx_mode & 0777, 0640);
	CHECK(S_ISREG(stx.stx_mode));

	fd = corio_open(path, O_RDONLY, 0);
	CHECK(fd >= 0);
	memset(back, 0, sizeof(back));
	/* the file position form: two reads continue where the first stopped */
	CHECK_EQ(corio_read_at(fd, back, 1000, CORIO_OFF_CUR), 1000);
	CHECK_EQ(corio_read_all(fd, back + 1000, sizeof(back), CORIO_OFF_CUR, &done),
		 (ssize_t)(sizeof(back) - 1000));
	CHECK(memcmp(data, back, sizeof(data)) == 0);
	CHECK_EQ(corio_statx(fd, "", AT_EMPTY_PATH, STATX_SIZE, &stx), 0);
	CHECK_EQ(stx.stx_size, sizeof(data));
	/* writing to a read-only fd is an error value, and counted */
	CHECK_EQ(corio_write_at(fd, data, 10, 0), -EBADF);
	CHECK_EQ(corio_write_all(fd, data, 10, 0, &done), -EBADF);
	CHECK_EQ(done, 0);
	CHECK_EQ(corio_close_fd(fd), 0);
	CHECK_EQ(corio_close_fd(fd), -EBADF);
}

FS_TEST(write_fsync_close_reopen_verify) { run1(durable, NULL); }

/* ---- rename, unlink, mkdir ---------------------------------------------------------- */

static void names(void *arg)
{
	char a[PATH_MAX], b[PATH_MAX], d[PATH_MAX], in[PATH_MAX];
	unsigned char buf[16];
	struct statx stx;
	int fd, dfd;

	(void)arg;
	tpath(a, "a");
	tpath(b, "b");
	tpath(d, "dir");
	tpath(in, "dir/inner");
	fd = corio_open(a, O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(corio_write_at(fd, "hello", 5, 0), 5);
	CHECK_EQ(corio_close_fd(fd), 0);

	CHECK_EQ(corio_rename(a, b), 0);
	CHECK_EQ(corio_open(a, O_RDONLY, 0), -ENOENT);
	CHECK_EQ(corio_statx(AT_FDCWD, a, 0, STATX_BASIC_STATS, &stx), -ENOENT);
	fd = corio_open(b, O_RDONLY, 0);
	CHECK(fd >= 0);
	CHECK_EQ(corio_read_at(fd, buf, sizeof(buf), 0), 5);
	CHECK(memcmp(buf, "hello", 5) == 0);
	CHECK_EQ(corio_close_fd(fd), 0);

	/* RENAME_NOREPLACE refuses to overwrite */
	fd = corio_open(a, O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(corio_close_fd(fd), 0);
	CHECK_EQ(corio_renameat(AT_FDCWD, a, AT_FDCWD, b, RENAME_NOREPLACE), -EEXIST);

	CHECK_EQ(corio_unlink(a), 0);
	CHECK_EQ(corio_unlink(a), -ENOENT);

	CHECK_EQ(corio_mkdir(d, 0700), 0);
	CHECK_EQ(corio_mkdir(d, 0700), -EEXIST);
	CHECK_EQ(corio_statx(AT_FDCWD, d, 0, STATX_TYPE, &stx), 0);
	CHECK(S_ISDIR(stx.stx_mode));
	/* *at forms relative to a directory fd */
	dfd = corio_open(d, O_RDONLY | O_DIRECTORY, 0);
	CHECK(dfd >= 0);
	fd = corio_openat(dfd, "inner", O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(corio_close_fd(fd), 0);
	CHECK_EQ(corio_renameat(AT_FDCWD, b, dfd, "moved", 0), 0);
	CHECK_EQ(corio_rmdir(d), -ENOTEMPTY);
	CHECK_EQ(corio_unlinkat(dfd, "moved", 0), 0);
	CHECK_EQ(corio_unlink(in), 0);
	CHECK_EQ(corio_mkdirat(dfd, "sub", 0700), 0);
	CHECK_EQ(corio_unlinkat(dfd, "sub", AT_REMOVEDIR), 0);
	CHECK_EQ(corio_close_fd(dfd), 0);
	CHECK_EQ(corio_rmdir(d), 0);
	CHECK_EQ(corio_statx(AT_FDCWD, d, 0, STATX_TYPE, &stx), -ENOENT);
}

FS_TEST(rename_unlink_mkdir) { run1(names, NULL); }

/* ---- fallocate ---------------------------------------------------------------------- */

static void falloc(void *arg)
{
	char path[PATH_MAX];
	struct statx stx;
	int fd;

	(void)arg;
	tpath(path, "falloc");
	fd = corio_open(path, O_RDWR | O_CREAT, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(corio_fallocate(fd, 0, 0, 1 << 20), 0);
	CHECK_EQ(corio_statx(fd, "", AT_EMPTY_PATH, STATX_SIZE | STATX_BLOCKS, &stx), 0);
	CHECK_EQ(stx.stx_size, 1 << 20);
	CHECK(stx.stx_blocks * 512 >= (1 << 20));
	/* KEEP_SIZE allocates past the end without growing the file */
	CHECK_EQ(corio_fallocate(fd, FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20), 0);
	CHECK_EQ(corio_statx(fd, "", AT_EMPTY_PATH, STATX_SIZE, &stx), 0);
	CHECK_EQ(stx.stx_size, 1 << 20);
	CHECK_EQ(corio_fallocate(fd, 0, 0, 0), -EINVAL);
	CHECK_EQ(corio_close_fd(fd), 0);
}

FS_TEST(fallocate) { run1(falloc, NULL); }

/* ---- O_DIRECT --------------------------------------------------------------------- */

static _Atomic int dio_unsupported;
static char dio_why[512];

static void direct(void *arg)
{
	char path[PATH_MAX];
	unsigned mem = 0, offa = 0;
	unsigned char *buf, *back;
	uint64_t seed = 7;
	int fd;

	(void)arg;
	tpath(path, "direct");
	fd = corio_open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd == -EINVAL) {
		snprintf(dio_why, sizeof(dio_why), "O_DIRECT open failed in %s: %s", tdir,
			 corio_last_error());
		dio_unsupported = 1;
		return;
	}
	CHECK(fd >= 0);
	if (corio_dio_align(fd, &mem, &offa) == -EOPNOTSUPP) {
		snprintf(dio_why, sizeof(dio_why), "%s", corio_last_error());
		dio_unsupported = 1;
		CHECK_EQ(corio_close_fd(fd), 0);
		return;
	}
	CHECK(mem >= 1 && mem <= CORIO_DMA_ALIGN && offa >= 1 && offa <= 4096);
	buf = corio_dma_alloc(64 * 1024);
	back = corio_dma_alloc(64 * 1024);
	CHECK(buf && back);
	CHECK(((uintptr_t)buf % CORIO_DMA_ALIGN) == 0);
	fill(buf, 64 * 1024, &seed);

	/* aligned I/O works, plain and vectored */
	CHECK_EQ(corio_write_at(fd, buf, 64 * 1024, 0), 64 * 1024);
	CHECK_EQ(corio_fsync(fd, CORIO_FSYNC_DATA), 0);
	CHECK_EQ(corio_read_at(fd, back, 64 * 1024, 0), 64 * 1024);
	CHECK(memcmp(buf, back, 64 * 1024) == 0);
	{
		struct iovec iov[2] = { { back, 4096 }, { back + 8192, 8192 } };

		memset(back, 0, 64 * 1024);
		CHECK_EQ(corio_readv_at(fd, iov, 2, 4096), 12288);
		CHECK(memcmp(back, buf + 4096, 4096) == 0);
		CHECK(memcmp(back + 8192, buf + 8192, 8192) == 0);
	}
	/* reading across EOF gives the short count, then 0 */
	CHECK_EQ(corio_read_at(fd, back, 8192, 60 * 1024), 4096);
	CHECK_EQ(corio_read_at(fd, back, 4096, 64 * 1024), 0);

	/* misaligned buffer, offset and length fail cleanly with an explanation */
	if (mem > 1) {
		CHECK_EQ(corio_read_at(fd, back + 1, 4096, 0), -EINVAL);
		CHECK(strstr(corio_last_error(), "buffer") && strstr(corio_last_error(), "aligned"));
		CHECK_EQ(corio_write_at(fd, buf + 1, 4096, 0), -EINVAL);
	}
	if (offa > 1) {
		CHECK_EQ(corio_read_at(fd, back, 4096, 1), -EINVAL);
		CHECK(strstr(corio_last_error(), "offset") != NULL);
		CHECK_EQ(corio_write_at(fd, buf, 100, 0), -EINVAL);
		CHECK(strstr(corio_last_error(), "length") != NULL);
		struct iovec iov[2] = { { back, 4096 }, { back + 4096, 100 } };
		CHECK_EQ(corio_readv_at(fd, iov, 2, 0), -EINVAL);
		CHECK(strstr(corio_last_error(), "length") != NULL);
	}
	/* the file is unchanged by the failed writes */
	CHECK_EQ(corio_read_at(fd, back, 64 * 1024, 0), 64 * 1024);
	CHECK(memcmp(buf, back, 64 * 1024) == 0);
	corio_dma_free(buf);
	corio_dma_free(back);
	CHECK_EQ(corio_close_fd(fd), 0);
}

Test(fs, o_direct_aligned_works_misaligned_fails, .timeout = 60)
{
	tmp_setup();
	run1(direct, NULL);
	tmp_teardown();
	if (dio_unsupported)
		cr_skip_test("filesystem of %s has no O_DIRECT: %s", tdir, dio_why);
}

/* ---- bad input never aborts ------------------------------------------------------ */

static void bad_input(void *arg)
{
	char path[PATH_MAX], buf[8];
	struct statx stx;
	struct iovec iov = { buf, sizeof(buf) };
	int fd;

	(void)arg;
	CHECK_EQ(corio_open(NULL, O_RDONLY, 0), -EINVAL);
	CHECK(strstr(corio_last_error(), "NULL") != NULL);
	CHECK_EQ(corio_read_at(-1, buf, 8, 0), -EBADF);
	CHECK_EQ(corio_write_at(-3, buf, 8, 0), -EBADF);
	CHECK_EQ(corio_close_fd(-1), -EBADF);
	CHECK_EQ(corio_fsync(-1, 0), -EBADF);
	CHECK_EQ(corio_rename(NULL, "x"), -EINVAL);
	CHECK_EQ(corio_unlink(NULL), -EINVAL);
	CHECK_EQ(corio_mkdir(NULL, 0700), -EINVAL);
	CHECK_EQ(corio_statx(AT_FDCWD, "/", 0, STATX_BASIC_STATS, NULL), -EINVAL);
	CHECK_EQ(corio_unlinkat(AT_FDCWD, "x", 0x4000000), -EINVAL);
	CHECK_EQ(corio_open("/nonexistent/corio/x", O_RDONLY, 0), -ENOENT);

	tpath(path, "bad");
	fd = corio_open(path, O_RDWR | O_CREAT, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(corio_fsync(fd, 0x80), -EINVAL);
	CHECK(strstr(corio_last_error(), "flags") != NULL);
	CHECK_EQ(corio_read_at(fd, NULL, 8, 0), -EINVAL);
	CHECK_EQ(corio_read_at(fd, buf, 8, (uint64_t)INT64_MAX + 1), -EINVAL);
	CHECK(strstr(corio_last_error(), "offset") != NULL);
	CHECK_EQ(corio_readv_at(fd, &iov, 0, 0), -EINVAL);
	CHECK_EQ(corio_readv_at(fd, NULL, 1, 0), -EINVAL);
	CHECK_EQ(corio_writev_at(fd, &iov, IOV_MAX + 1, 0), -EINVAL);
	CHECK_EQ(corio_fallocate(fd, 0, (uint64_t)INT64_MAX, 2), -EINVAL);
	CHECK_EQ(corio_read_at(fd, buf, 0, 0), 0);
	CHECK_EQ(corio_statx(fd, "", AT_EMPTY_PATH, STATX_SIZE, &stx), 0);
	CHECK_EQ(corio_close_fd(fd), 0);
	/* a directory is not readable: the kernel's answer comes back as a value */
	fd = corio_open(tdir, O_RDONLY | O_DIRECTORY, 0);
	CHECK(fd >= 0);
	CHECK_EQ(corio_read_at(fd, buf, 8, 0), -EISDIR);
	CHECK_EQ(corio_close_fd(fd), 0);
}

FS_TEST(bad_input_returns_errors) { run1(bad_input, NULL); }

/* ---- cancel of a blocked read ------------------------------------------------------ */

struct blocked {
	int fd;
	ssize_t res;
	int started;
};

static int blocked_reader(void *arg)
{
	struct blocked *b = arg;
	char buf[16];

	b->started = 1;
	b->res = corio_read_at(b->fd, buf, sizeof(buf), CORIO_OFF_CUR);
	return 0;
}

static void cancel_read(void *arg)
{
	char path[PATH_MAX];
	struct blocked b = { .res = 1 };
	struct corio_fiber *f;
	struct corio_fs_stats st;
	int st_before;

	(void)arg;
	tpath(path, "fifo");
	CHECK_EQ(mkfifo(path, 0600), 0);
	/* O_RDWR: the open does not wait for a writer, and the read has one
	 * (ourselves) so it blocks instead of returning EOF */
	b.fd = corio_open(path, O_RDWR, 0);
	CHECK(b.fd >= 0);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &st), 0);
	st_before = (int)st.kind[CORIO_FS_READ].errors;
	CHECK_EQ(corio_spawn(blocked_reader, &b, NULL, &f), 0);
	for (int i = 0; i < 5; i++)
		corio_nop(); /* let it start and park in the kernel */
	CHECK(b.started);
	CHECK_EQ(b.res, 1);
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
	CHECK_EQ(b.res, -ECANCELED);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.kind[CORIO_FS_READ].errors, st_before + 1);
	/* data written now is still there: the cancelled read consumed none */
	CHECK_EQ(corio_write_at(b.fd, "abc", 3, CORIO_OFF_CUR), 3);
	{
		char got[8];

		CHECK_EQ(corio_read_at(b.fd, got, sizeof(got), CORIO_OFF_CUR), 3);
	}
	CHECK_EQ(corio_close_fd(b.fd), 0);
}

FS_TEST(cancel_blocked_read) { run1(cancel_read, NULL); }

/* A cancelled fiber's clean-up still closes its fd (th_run checks none leak). */
static int cancelled_closer(void *arg)
{
	const char *path = arg;
	int fd = corio_open(path, O_RDWR, 0);
	char c;

	CHECK(fd >= 0);
	CHECK_EQ(corio_read_at(fd, &c, 1, CORIO_OFF_CUR), -ECANCELED);
	CHECK_EQ(corio_read_at(fd, &c, 1, CORIO_OFF_CUR), -ECANCELED); /* sticky */
	CHECK_EQ(corio_close_fd(fd), 0);
	return 0;
}

static void cancel_then_close(void *arg)
{
	char *path = arg;
	struct corio_fiber *f;

	CHECK_EQ(mkfifo(path, 0600), 0);
	CHECK_EQ(corio_spawn(cancelled_closer, path, NULL, &f), 0);
	for (int i = 0; i < 5; i++)
		corio_nop();
	CHECK_EQ(corio_cancel(f), 0);
	CHECK_EQ(corio_join(f, NULL), 0);
}

FS_TEST(cancelled_fiber_still_closes)
{
	char path[PATH_MAX];

	tpath(path, "fifo2");
	run1(cancel_then_close, path);
}

/* ---- stats --------------------------------------------------------------------- */

static void stats(void *arg)
{
	char path[PATH_MAX], buf[1000];
	struct corio_fs_stats a, b;
	int fd;

	(void)arg;
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &a), 0);
	CHECK_EQ(corio_fs_stats_get(NULL, 7, &a), -EINVAL);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, NULL), -EINVAL);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &a), 0);
	tpath(path, "stats");
	fd = corio_open(path, O_RDWR | O_CREAT, 0600);
	memset(buf, 'x', sizeof(buf));
	CHECK_EQ(corio_write_at(fd, buf, 1000, 0), 1000);
	CHECK_EQ(corio_write_at(fd, buf, 500, 1000), 500);
	CHECK_EQ(corio_read_at(fd, buf, 1000, 700), 800);
	CHECK_EQ(corio_fsync(fd, 0), 0);
	CHECK_EQ(corio_close_fd(fd), 0);
	CHECK_EQ(corio_close_fd(fd), -EBADF);
	CHECK_EQ(corio_unlink(path), 0);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &b), 0);
	CHECK_EQ(b.kind[CORIO_FS_OPEN].ops - a.kind[CORIO_FS_OPEN].ops, 1);
	CHECK_EQ(b.kind[CORIO_FS_WRITE].ops - a.kind[CORIO_FS_WRITE].ops, 2);
	CHECK_EQ(b.kind[CORIO_FS_WRITE].bytes - a.kind[CORIO_FS_WRITE].bytes, 1500);
	CHECK_EQ(b.kind[CORIO_FS_READ].ops - a.kind[CORIO_FS_READ].ops, 1);
	CHECK_EQ(b.kind[CORIO_FS_READ].bytes - a.kind[CORIO_FS_READ].bytes, 800);
	CHECK_EQ(b.kind[CORIO_FS_FSYNC].ops - a.kind[CORIO_FS_FSYNC].ops, 1);
	CHECK_EQ(b.kind[CORIO_FS_CLOSE].ops - a.kind[CORIO_FS_CLOSE].ops, 2);
	CHECK_EQ(b.kind[CORIO_FS_CLOSE].errors - a.kind[CORIO_FS_CLOSE].errors, 1);
	CHECK_EQ(b.kind[CORIO_FS_UNLINK].ops - a.kind[CORIO_FS_UNLINK].ops, 1);
	CHECK_EQ(b.kind[CORIO_FS_WRITE].errors, 0);
	struct corio_stats cs;

	CHECK_EQ(corio_stats_get(NULL, 0, &cs), 0);
	if (!cs.backend) /* the epoll fallback runs every file call the blocking way */
		CHECK_EQ(b.sync_fallbacks, 0); /* this kernel has every op */
}

FS_TEST(stats_count_ops_bytes_errors) { run1(stats, NULL); }

/* ---- aligned allocator ------------------------------------------------------------ */

static void dma(void *arg)
{
	struct corio_fs_stats st;
	void *p[4], *q;
	size_t sizes[4] = { 1, 4096, 5000, 3u << 20 };

	(void)arg;
	CHECK(corio_dma_alloc(0) == NULL);
	for (int i = 0; i < 4; i++) {
		p[i] = corio_dma_alloc(sizes[i]);
		CHECK(p[i] != NULL);
		CHECK(((uintptr_t)p[i] % CORIO_DMA_ALIGN) == 0);
		memset(p[i], 0xab, sizes[i]); /* ASan checks the size really is there */
	}
	corio_dma_free(p[2]); /* 8 KiB class */
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.dma_cached, 8192);
	q = corio_dma_alloc(6000);
	CHECK(q == p[2]); /* reused from the shard's cache */
	memset(q, 1, 8192);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.dma_cache_hits, 1);
	CHECK_EQ(st.dma_cached, 0);
	corio_dma_free(q);
	corio_dma_free(p[0]);
	corio_dma_free(p[1]);
	corio_dma_free(p[3]); /* large: not cached */
	corio_dma_free(NULL);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &st), 0);
	CHECK_EQ(st.dma_cached, 8192 + 4096 + 4096);
}

FS_TEST(dma_alloc_aligned_and_cached) { run1(dma, NULL); }

Test(fs, dma_alloc_off_shard, .timeout = 60)
{
	void *p = corio_dma_alloc(10000);

	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % CORIO_DMA_ALIGN, 0);
	memset(p, 0, 10000);
	corio_dma_free(p);
}

/* ---- deadlines bound fs calls ------------------------------------------------- */

static void deadline(void *arg)
{
	char path[PATH_MAX], c;
	struct corio_deadline d;
	uint64_t t0, dt;
	int fd, fd2;

	(void)arg;
	tpath(path, "fifo3");
	CHECK_EQ(mkfifo(path, 0600), 0);
	fd = corio_open(path, O_RDWR, 0);
	CHECK(fd >= 0);
	/* a read nobody will ever satisfy ends at the scope's deadline */
	t0 = corio_now_ns();
	CHECK_EQ(corio_timeout_push(&d, 50 * 1000000ull), 0);
	CHECK_EQ(corio_read_at(fd, &c, 1, CORIO_OFF_CUR), -ETIMEDOUT);
	CHECK_EQ(corio_deadline_pop(&d), 0);
	dt = corio_now_ns() - t0;
	CHECK(dt >= 45 * 1000000ull);
	CHECK(dt < 2000 * 1000000ull);
	/* the fifo is still usable and lost nothing */
	CHECK_EQ(corio_write_at(fd, "z", 1, CORIO_OFF_CUR), 1);
	CHECK_EQ(corio_read_at(fd, &c, 1, CORIO_OFF_CUR), 1);
	CHECK_EQ(c, 'z');

	/* a passed deadline fails every call at once, except close */
	fd2 = corio_open(path, O_RDWR, 0);
	CHECK(fd2 >= 0);
	CHECK_EQ(corio_deadline_push(&d, corio_now_ns() - 1), 0);
	CHECK_EQ(corio_open(path, O_RDWR, 0), -ETIMEDOUT);
	CHECK_EQ(corio_read_at(fd, &c, 1, CORIO_OFF_CUR), -ETIMEDOUT);
	CHECK_EQ(corio_fsync(fd, 0), -ETIMEDOUT);
	CHECK_EQ(corio_unlink(path), -ETIMEDOUT);
	CHECK_EQ(corio_close_fd(fd2), 0); /* th_run checks it really closed */
	CHECK(corio_deadline_ns() != 0);  /* the scope is still in force */
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_close_fd(fd), 0);
}

FS_TEST(deadline_bounds_calls_close_still_closes) { run1(deadline, NULL); }

/* The blocking-syscall fallback keeps the same promise as the ring: in a
 * scope whose deadline has passed no call runs (the file is not opened,
 * read, written, renamed or removed), close still closes, and a cancelled
 * fiber gets -ECANCELED. Run once through the ring and once forced through
 * the fallback. */
static void expired_all_kinds(void *arg)
{
	char path[PATH_MAX], p2[PATH_MAX], dir[PATH_MAX], c = 0;
	struct corio_deadline d;
	struct corio_fs_stats st0, st1;
	struct statx stx;
	int fd, fd2;

	tpath(path, "expired");
	tpath(p2, "expired2");
	tpath(dir, "expired-dir");
	fd = corio_open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(corio_write_at(fd, "abc", 3, 0), 3);
	fd2 = corio_open(path, O_RDONLY, 0);
	CHECK(fd2 >= 0);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &st0), 0);
	CHECK_EQ(corio_deadline_push(&d, corio_now_ns() - 1), 0);
	CHECK_EQ(corio_open(path, O_RDONLY, 0), -ETIMEDOUT);
	CHECK_EQ(corio_read_at(fd, &c, 1, 0), -ETIMEDOUT);
	CHECK_EQ(c, 0);
	CHECK_EQ(corio_write_at(fd, "x", 1, 0), -ETIMEDOUT);
	CHECK_EQ(corio_fsync(fd, 0), -ETIMEDOUT);
	CHECK_EQ(corio_fallocate(fd, 0, 0, 8192), -ETIMEDOUT);
	CHECK_EQ(corio_statx(AT_FDCWD, path, 0, STATX_SIZE, &stx), -ETIMEDOUT);
	CHECK_EQ(corio_rename(path, p2), -ETIMEDOUT);
	CHECK_EQ(corio_mkdir(dir, 0700), -ETIMEDOUT);
	CHECK_EQ(corio_unlink(path), -ETIMEDOUT);
	CHECK_EQ(corio_close_fd(fd2), 0); /* close is exempt; th_run checks it closed */
	CHECK_EQ(corio_deadline_pop(&d), 0);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &st1), 0);
	/* nothing ran through the fallback inside the scope but the close */
	CHECK(st1.sync_fallbacks - st0.sync_fallbacks <= 1);
	/* and nothing happened: same file, same size, no new names */
	CHECK_EQ(access(path, F_OK), 0);
	CHECK(access(p2, F_OK) != 0);
	CHECK(access(dir, F_OK) != 0);
	CHECK_EQ(corio_read_at(fd, &c, 1, 0), 1);
	CHECK_EQ(c, 'a');
	CHECK_EQ(corio_statx(AT_FDCWD, path, 0, STATX_SIZE, &stx), 0);
	CHECK_EQ(stx.stx_size, 3);
	/* a cancelled fiber's calls fail without running, close still closes */
	fd2 = corio_open(path, O_RDONLY, 0);
	CHECK(fd2 >= 0);
	CHECK_EQ(corio_cancel(corio_self()), 0);
	CHECK_EQ(corio_read_at(fd, &c, 1, 0), -ECANCELED);
	CHECK_EQ(corio_open(path, O_RDONLY, 0), -ECANCELED);
	CHECK_EQ(corio_close_fd(fd2), 0);
	CHECK_EQ(corio_close_fd(fd), 0);
}

FS_TEST(expired_deadline_fails_every_call_ring) { run1(expired_all_kinds, NULL); }

FS_TEST(expired_deadline_fails_every_call_fallback)
{
	setenv("CORIO_FS_SYNC", "all", 1);
	run1(expired_all_kinds, NULL);
	unsetenv("CORIO_FS_SYNC");
}

/* ---- a write to a pipe or FIFO without a reader returns -EPIPE ------------------ */

struct epipe {
	int rc; /* 0 when every write said -EPIPE */
};

static void epipe_entry(void *arg)
{
	struct epipe *e = arg;
	char path[PATH_MAX];
	int p[2], rd, wr;

	/* a pipe whose read end is closed */
	if (pipe2(p, O_CLOEXEC)) {
		e->rc = 10;
		return;
	}
	close(p[0]);
	if (corio_write_at(p[1], "x", 1, CORIO_OFF_CUR) != -EPIPE)
		e->rc = 11;
	close(p[1]);
	/* a FIFO whose reader has gone */
	tpath(path, "epipe-fifo");
	rd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	wr = rd >= 0 ? corio_open(path, O_WRONLY, 0) : -1;
	if (rd < 0 || wr < 0) {
		e->rc = 12;
	} else {
		close(rd);
		if (corio_write_at(wr, "y", 1, CORIO_OFF_CUR) != -EPIPE)
			e->rc = 13;
		/* and the shard lives on: another call works */
		if (corio_nop() != 0)
			e->rc = 14;
	}
	if (wr >= 0)
		corio_close_fd(wr);
}

/* In a child: SIGPIPE's default action kills the process (exit 141 from a
 * shell) if a shard thread takes the signal. */
static int epipe_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	struct epipe e = { 0 };

	signal(SIGPIPE, SIG_DFL);
	if (arg)
		setenv("CORIO_FS_SYNC", "all", 1);
	if (corio_run(&cfg, epipe_entry, &e))
		return 20;
	return e.rc;
}

static void epipe_test(void *sync)
{
	char path[PATH_MAX];
	int st;

	tpath(path, "epipe-fifo");
	cr_assert_eq(mkfifo(path, 0600), 0);
	st = th_fork_bounded(epipe_child, sync, 10000);
	cr_assert(st != TH_HUNG, "still running after 10 s");
	cr_assert(!WIFSIGNALED(st), "the child died of signal %d (SIGPIPE is %d)", WTERMSIG(st),
		  SIGPIPE);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
}

FS_TEST(write_to_broken_pipe_is_epipe_ring) { epipe_test(NULL); }
FS_TEST(write_to_broken_pipe_is_epipe_fallback) { epipe_test((void *)1); }

/* ---- the blocking fallback runs off the shard ---------------------------------- */

struct pipe_pair {
	int p[2];
	int rc;
};

static int pipe_writer(void *arg)
{
	struct pipe_pair *pp = arg;

	/* Runs only if the shard is free while the reader's read(2) blocks. */
	if (corio_write_at(pp->p[1], "z", 1, CORIO_OFF_CUR) != 1)
		pp->rc = 2;
	return 0;
}

static void fallback_read_entry(void *arg)
{
	struct pipe_pair *pp = arg;
	struct corio_work_stats ws;
	char c = 0, path[64], buf[64];
	int fd;

	if (corio_spawn(pipe_writer, pp, NULL, NULL))
		pp->rc = 3;
	/* read(2) blocks until the writer fiber, on this same shard, writes */
	if (corio_read_at(pp->p[0], &c, 1, CORIO_OFF_CUR) != 1 || c != 'z')
		pp->rc = 4;
	/* a regular file's fallback read goes to the pool */
	snprintf(path, sizeof(path), "/proc/self/stat");
	fd = corio_open(path, O_RDONLY, 0);
	if (fd < 0 || corio_read_at(fd, buf, sizeof(buf), 0) <= 0)
		pp->rc = 5;
	if (fd >= 0)
		corio_close_fd(fd);
	if (corio_work_stats_get(NULL, 0, &ws) || ws.done < 1)
		pp->rc = 6;
}

static int fallback_read_child(void *arg)
{
	struct corio_config cfg = th_cfg(1);
	struct pipe_pair pp = { .rc = 0 };

	(void)arg;
	setenv("CORIO_FS_SYNC", "read", 1); /* open and close stay on the ring */
	if (pipe2(pp.p, O_CLOEXEC))
		return 10;
	if (corio_run(&cfg, fallback_read_entry, &pp))
		return 20;
	return pp.rc;
}

/* Before the blocking-work pool, the fallback's read(2) ran on the shard
 * thread and the writer fiber never ran: the child hung. A pipe's read now
 * waits for readiness on the shard (cancellable); a regular file's read
 * runs on the pool. */
FS_TEST(blocking_fallback_runs_on_the_pool_and_the_shard_keeps_serving)
{
	th_child_ok(fallback_read_child, NULL, 10000, "fallback read of a pipe");
}

/* ---- open on the spot -------------------------------------------------------------- */

/* Whether this kernel takes openat2(2) RESOLVE_CACHED (5.12). */
static bool cached_open_here(void)
{
	struct { uint64_t flags, mode, resolve; } how = {
		.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC, .resolve = 0x20 };
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));

	if (fd >= 0)
		close(fd);
	return fd >= 0 || errno == EAGAIN;
}

/*
 * corio_open takes a path that the dentry cache knows on the spot (openat2
 * RESOLVE_CACHED, O_NONBLOCK for the open itself) and every other through
 * the ring (or, on the fallback, the pool): the fd's flags are the same
 * either way (O_NONBLOCK only when asked, O_CLOEXEC always), and
 * open_cached counts the first kind only. /proc/version's lookup must be
 * revalidated every time (procfs refuses the cached walk), so it always
 * takes the ring. A creating open never
 * takes the spot path; a passed deadline opens nothing.
 */
static void fd_flags_are(int fd, bool nonblock)
{
	int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);

	CHECK(fl >= 0 && fdfl >= 0);
	CHECK_EQ(!!(fl & O_NONBLOCK), nonblock);
	CHECK(fdfl & FD_CLOEXEC);
}

static void open_spot(void *arg)
{
	char path[PATH_MAX], buf[8];
	struct corio_fs_stats a, b;
	struct corio_deadline d;
	bool spot = *(bool *)arg;
	int fd;

	tpath(path, "known");
	fd = corio_open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(corio_write_at(fd, "hello", 5, 0), 5);
	CHECK_EQ(corio_close_fd(fd), 0);

	CHECK_EQ(corio_fs_stats_get(NULL, 0, &a), 0);
	fd = corio_open(path, O_RDONLY, 0); /* just created: its dentry is cached */
	CHECK(fd >= 0);
	fd_flags_are(fd, false);
	CHECK_EQ(corio_read_at(fd, buf, sizeof(buf), 0), 5);
	CHECK(memcmp(buf, "hello", 5) == 0);
	CHECK_EQ(corio_close_fd(fd), 0);
	fd = corio_open(path, O_RDONLY | O_NONBLOCK, 0);
	CHECK(fd >= 0);
	fd_flags_are(fd, true);
	CHECK_EQ(corio_close_fd(fd), 0);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &b), 0);
	CHECK_EQ(b.open_cached - a.open_cached, spot ? 2u : 0u);
	CHECK_EQ(b.kind[CORIO_FS_OPEN].ops - a.kind[CORIO_FS_OPEN].ops, 2u);

	/* the ring's (or the pool's) kind: the same flags */
	fd = corio_open("/proc/version", O_RDONLY, 0);
	CHECK(fd >= 0);
	fd_flags_are(fd, false);
	CHECK(corio_read_at(fd, buf, sizeof(buf), 0) > 0);
	CHECK_EQ(corio_close_fd(fd), 0);
	CHECK_EQ(corio_open(path, O_WRONLY | O_CREAT | O_EXCL, 0600), -EEXIST);
	tpath(path, "never-made");
	CHECK_EQ(corio_open(path, O_RDONLY, 0), -ENOENT);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &a), 0);
	CHECK_EQ(a.open_cached, b.open_cached);

	/* a passed deadline: -ETIMEDOUT, and no fd was opened (th_run
	 * counts the fds) */
	tpath(path, "known");
	CHECK_EQ(corio_timeout_push(&d, 1), 0);
	CHECK_EQ(corio_sleep_ns(1000000), -ETIMEDOUT);
	CHECK_EQ(corio_open(path, O_RDONLY, 0), -ETIMEDOUT);
	CHECK_EQ(corio_deadline_pop(&d), 0);
}

FS_TEST(open_on_the_spot_when_the_path_is_cached)
{
	bool spot = cached_open_here() && !getenv("CORIO_FS_SYNC"); /* that forces the pool */

	run1(open_spot, &spot);
}

/*
 * On the epoll fallback (no CLOSE op) a file on a local filesystem is
 * closed on the shard: its close cannot wait (no flush method), so it
 * does not take a pool thread. The fd is gone when the call returns, and
 * the pool counted no job. A file that is not local would go to the pool
 * (CORIO_FS_SYNC=close forces that path in forced_sync_fallback_...).
 */
static void close_spot(void *arg)
{
	struct corio_work_stats wa, wb;
	struct corio_fs_stats a, b;
	char path[PATH_MAX];
	int fd;

	(void)arg;
	tpath(path, "closed-here");
	fd = corio_open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(corio_work_stats_get(NULL, 0, &wa), 0);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &a), 0);
	CHECK_EQ(corio_close_fd(fd), 0);
	CHECK_EQ(fcntl(fd, F_GETFD), -1); /* closed */
	CHECK_EQ(corio_work_stats_get(NULL, 0, &wb), 0);
	CHECK_EQ(corio_fs_stats_get(NULL, 0, &b), 0);
	CHECK_EQ(wb.submitted, wa.submitted);
	CHECK_EQ(b.kind[CORIO_FS_CLOSE].ops - a.kind[CORIO_FS_CLOSE].ops, 1u);
	CHECK_EQ(b.kind[CORIO_FS_CLOSE].errors, a.kind[CORIO_FS_CLOSE].errors);
}

FS_TEST(fallback_closes_a_local_file_on_the_shard)
{
	struct corio_config cfg = th_cfg(1);
	struct statfs sf;

	cr_assert_eq(statfs(tdir, &sf), 0);
	if (sf.f_type != EXT4_SUPER_MAGIC && sf.f_type != XFS_SUPER_MAGIC &&
	    sf.f_type != BTRFS_SUPER_MAGIC && sf.f_type != TMPFS_MAGIC &&
	    sf.f_type != OVERLAYFS_SUPER_MAGIC)
		cr_skip_test("%s is on a filesystem this test does not know (0x%lx)", tdir,
			     (unsigned long)sf.f_type);
	unsetenv("CORIO_BACKEND");
	cfg.backend = CORIO_BACKEND_EPOLL;
	th_run(&cfg, close_spot, NULL);
}
