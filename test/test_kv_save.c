/* SPDX-License-Identifier: MIT */
/*
 * test/test_kv_save.c - corio-kv's snapshots (tools/kv/rdb.c, save.c): the
 * RDB format alone (CRC64, LZF, listpack, ziplist, every truncation of a
 * file), then the built corio-kv program ($(B)/tools/corio-kv, next to this
 * binary's directory) with Debian's redis-server and redis-check-rdb: files
 * either writes load in the other, restarts keep keys and TTLs, save points
 * fire, corrupt files stop the start, a BGSAVE under writes holds the keys
 * as they were when it began, and a kill in the middle of one leaves the
 * previous file. Every server runs in a temp directory on a port of its own.
 */
#include "kv_helpers.h"

#include "kv/rdb.h"

#include <poll.h>
#include <sys/mman.h>

/* ---- the format alone ----------------------------------------------------------- */

Test(kv_save, crc64_is_redis_jones)
{
	const char *s = "123456789";
	uint64_t whole = kv_crc64(0, s, 9);

	cr_assert_eq(whole, 0xe9c6d914c4b8d9caull, "crc64 %016llx", (unsigned long long)whole);
	for (size_t cut = 0; cut <= 9; cut++) /* continued over parts: the same */
		cr_assert_eq(kv_crc64(kv_crc64(0, s, cut), s + cut, 9 - cut), whole);
	{
		char big[1000];

		for (size_t i = 0; i < sizeof(big); i++)
			big[i] = (char)(i * 7);
		uint64_t c = kv_crc64(0, big, sizeof(big)), d = 0;

		for (size_t i = 0; i < sizeof(big); i++) /* byte by byte: the slice-by-8 agrees */
			d = kv_crc64(d, big + i, 1);
		cr_assert_eq(c, d);
	}
}

/* The long-buffer path (carry-less multiplication where the CPU has it, 64
 * bytes and up) against the bit-at-a-time definition, at every length and
 * alignment around its 16-byte steps, from a non-zero crc. */
static uint64_t crc64_bitwise(uint64_t crc, const uint8_t *p, size_t n)
{
	while (n--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0x95ac9329ac4bc9b5ull : crc >> 1;
	}
	return crc;
}

Test(kv_save, crc64_long_buffers_match_the_definition)
{
	static uint8_t buf[4096 + 16];

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t off = 0; off < 16; off += 3)
		for (size_t n = 0; n <= 300; n++)
			cr_assert_eq(kv_crc64(0xfeedfacecafebeefull, buf + off, n),
				     crc64_bitwise(0xfeedfacecafebeefull, buf + off, n), "off %zu n %zu",
				     off, n);
	cr_assert_eq(kv_crc64(0, buf, 4096), crc64_bitwise(0, buf, 4096));
}

Test(kv_save, lzf_decompresses_and_refuses_bad_input)
{
	/* "abc" as a literal, then 6 bytes from 3 back: "abcabcabc" */
	const uint8_t ok[] = { 2, 'a', 'b', 'c', (6 - 2) << 5, 2 };
	const uint8_t far[] = { 2, 'a', 'b', 'c', (6 - 2) << 5, 9 };  /* 10 back: before the start */
	const uint8_t cut[] = { 5, 'a', 'b' };                        /* a literal past the end */
	uint8_t out[16];

	cr_assert_eq(kv_lzf_decompress(ok, sizeof(ok), out, 9), 0);
	cr_assert(!memcmp(out, "abcabcabc", 9));
	cr_assert_eq(kv_lzf_decompress(ok, sizeof(ok), out, 8), -EINVAL); /* longer than said */
	cr_assert_eq(kv_lzf_decompress(ok, sizeof(ok), out, 10), -EINVAL); /* shorter */
	cr_assert_eq(kv_lzf_decompress(far, sizeof(far), out, 9), -EINVAL);
	cr_assert_eq(kv_lzf_decompress(cut, sizeof(cut), out, 6), -EINVAL);
}

/* Our compressor's output decompresses to its input, for inputs that
 * compress (runs, repeats near and 8 KiB back, matches of 264 bytes and
 * more) and ones that do not (random bytes: 0 when the output would not
 * fit, as the writer asks); and a string written by kv_rdb_put_str is read
 * back through the LZF encoding when it is long and compressible. */
Test(kv_save, lzf_compresses_and_round_trips)
{
	static uint8_t in[20000], z[20000], back[20000];
	uint32_t x = 12345;
	size_t n, c;

	for (int kind = 0; kind < 5; kind++) {
		n = kind == 4 ? 30 : sizeof(in);
		for (size_t i = 0; i < n; i++) {
			x = x * 1103515245u + 12345u;
			in[i] = kind == 0   ? 0 /* one long run */
				: kind == 1 || kind == 4 ? (uint8_t)"the quick brown fox "[i % 20]
				: kind == 2 ? (uint8_t)(i < 9000 ? x >> 24 : in[i - 8192]) /* far back */
				: (uint8_t)(x >> 24);               /* random: no gain */
		}
		c = kv_lzf_compress(in, n, z, kind == 3 ? n - 4 : sizeof(z));
		if (kind == 3) {
			cr_assert_eq(c, 0, "random bytes did not compress by 4");
			continue;
		}
		cr_assert(c > 0 && c < n, "kind %d: %zu of %zu", kind, c, n);
		memset(back, 0xee, n);
		cr_assert_eq(kv_lzf_decompress(z, c, back, n), 0, "kind %d", kind);
		cr_assert(!memcmp(in, back, n), "kind %d differs", kind);
		if (kind == 0)
			cr_assert(c < n / 50, "a run of zeros: %zu of %zu", c, n);
	}
	/* every short prefix of a repetitive input, the edges of runs and literals */
	for (n = 0; n < 300; n++) {
		for (size_t i = 0; i < n; i++)
			in[i] = (uint8_t)(i % 7 < 3 ? 'a' : 'a' + i % 5);
		c = kv_lzf_compress(in, n, z, sizeof(z));
		cr_assert(n == 0 ? c == 0 : c > 0);
		cr_assert_eq(kv_lzf_decompress(z, c, back, n), 0, "length %zu", n);
		cr_assert(!memcmp(in, back, n), "length %zu", n);
	}
	{
		struct kv_buf b = { 0 };
		const char *v = "0000000000000000000000000000000000000000000000000000000000000000";

		kv_rdb_put_str(&b, v, strlen(v));
		cr_assert_eq((uint8_t)b.p[0], 0xc3, "a compressible string is written LZF-encoded");
		cr_assert(b.len < 20);
		kv_buf_free(&b);
		kv_rdb_put_str(&b, "short, 20 bytes long", 20);
		cr_assert_eq(b.len, 21, "20 bytes or fewer: as they are");
		kv_buf_free(&b);
	}
}

/* What a parse saw: "key=value" lines (hashes: key={f=v,...}), expiries as
 * "@ms" suffixes. */
struct seen {
	char text[8192];
	size_t len;
	int keys;
};

static int seen_key(void *arg, const struct kv_rdb_obj *o)
{
	struct seen *s = arg;
	int n = snprintf(s->text + s->len, sizeof(s->text) - s->len, "%.*s=", (int)o->key.n, o->key.p);

	s->len += (size_t)n;
	if (o->type == KV_RDB_STR) {
		s->len += (size_t)snprintf(s->text + s->len, sizeof(s->text) - s->len, "%.*s",
					   (int)(o->val.n > 40 ? 40 : o->val.n), o->val.p);
	} else {
		s->len += (size_t)snprintf(s->text + s->len, sizeof(s->text) - s->len, "{");
		for (size_t i = 0; i < o->npairs && i < 4; i++)
			s->len += (size_t)snprintf(s->text + s->len, sizeof(s->text) - s->len, "%.*s=%.*s,",
						   (int)o->fv[2 * i].n, o->fv[2 * i].p,
						   (int)o->fv[2 * i + 1].n, o->fv[2 * i + 1].p);
		s->len += (size_t)snprintf(s->text + s->len, sizeof(s->text) - s->len, "#%zu}",
					   o->npairs);
	}
	if (o->expire_ms)
		s->len += (size_t)snprintf(s->text + s->len, sizeof(s->text) - s->len, "@%lld",
					   (long long)o->expire_ms);
	s->len += (size_t)snprintf(s->text + s->len, sizeof(s->text) - s->len, ";");
	s->keys++;
	return 0;
}

static void put_byte(struct kv_buf *b, unsigned v)
{
	uint8_t c = (uint8_t)v;

	kv_put(b, &c, 1);
}

static void put_eof(struct kv_buf *b)
{
	uint64_t crc;

	put_byte(b, RDB_OP_EOF);
	crc = kv_crc64(0, b->p, b->len);
	for (int i = 0; i < 8; i++)
		put_byte(b, (unsigned)(crc >> (8 * i)) & 0xff);
}

/* A file with every encoding the reader takes, made by hand and by the writer. */
static void make_file(struct kv_buf *b)
{
	const struct kv_arg lp[] = { { "f1", 2 }, { "v1", 2 }, { "n", 1 }, { "-70000", 6 },
				     { "small", 5 }, { "127", 3 }, { "neg", 3 }, { "-4000", 5 } };
	/* a ziplist of "a" "1" "bb" "300" (Redis 6 wrote small hashes so) */
	const uint8_t zl[] = { 0, 0, 0, 0, 0, 0, 0, 0, 4, 0,
			       0, 0x01, 'a',          /* prevlen 0, 6-bit string "a" */
			       3, 0xf2,               /* prevlen 3, immediate 1 */
			       2, 0x02, 'b', 'b',     /* "bb" */
			       4, 0xc0, 0x2c, 0x01,   /* int16 300 */
			       0xff };
	uint8_t zlb[sizeof(zl)];
	/* LZF: "xyzxyzxyzxyz" (12 bytes) as literal "xyz" then 9 from 3 back
	 * (length 7 + 2: the 7 takes an extra length byte, 0) */
	const uint8_t lzf[] = { 2, 'x', 'y', 'z', 7 << 5, 0, 2 };

	memcpy(zlb, zl, sizeof(zl));
	zlb[0] = sizeof(zl);
	kv_rdb_put_header(b, 1700000000, 1000, 7, 1);
	put_byte(b, RDB_OP_EXPIRETIME_MS);
	for (int i = 0; i < 8; i++)
		put_byte(b, (unsigned)((4102444800000ull >> (8 * i)) & 0xff)); /* 2100-01-01 */
	put_byte(b, RDB_TYPE_STRING);
	kv_rdb_put_str(b, "s", 1);
	kv_rdb_put_str(b, "hello", 5);
	put_byte(b, RDB_TYPE_STRING);
	kv_rdb_put_str(b, "12", 2);          /* an int-encoded key */
	kv_rdb_put_str(b, "-100000", 7);     /* an int32 value */
	put_byte(b, RDB_TYPE_STRING);
	kv_rdb_put_str(b, "big", 3);
	kv_rdb_put_str(b, "12345678901", 11); /* over 32 bits: raw */
	put_byte(b, RDB_TYPE_STRING);
	kv_rdb_put_str(b, "z", 1);
	put_byte(b, 0xc3);                   /* LZF */
	kv_rdb_put_len(b, sizeof(lzf));
	kv_rdb_put_len(b, 12);
	kv_put(b, lzf, sizeof(lzf));
	put_byte(b, RDB_TYPE_HASH_LISTPACK);
	kv_rdb_put_str(b, "lp", 2);
	kv_rdb_put_listpack(b, lp, 8);
	put_byte(b, RDB_TYPE_HASH_ZIPLIST);
	kv_rdb_put_str(b, "zl", 2);
	kv_rdb_put_len(b, sizeof(zlb));
	kv_put(b, zlb, sizeof(zlb));
	put_byte(b, RDB_TYPE_HASH);
	kv_rdb_put_str(b, "ht", 2);
	kv_rdb_put_len(b, 1);
	kv_rdb_put_str(b, "k", 1);
	kv_rdb_put_str(b, "v", 1);
	put_eof(b);
}

Test(kv_save, reader_takes_every_encoding)
{
	struct kv_buf b = { 0 };
	struct seen s = { 0 };
	char err[300];
	int ret;

	make_file(&b);
	ret = kv_rdb_parse((const uint8_t *)b.p, b.len, seen_key, &s, err, sizeof(err));
	cr_assert_eq(ret, 0, "%s", err);
	cr_assert_str_eq(s.text, "s=hello@4102444800000;12=-100000;big=12345678901;z=xyzxyzxyzxyz;"
				 "lp={f1=v1,n=-70000,small=127,neg=-4000,#4};zl={a=1,bb=300,#2};"
				 "ht={k=v,#1};");
	kv_buf_free(&b);
}

/* An LZF string that claims 0 bytes (fuzz_rdb found it: the read did
 * pointer arithmetic on a scratch area never allocated) reads as empty;
 * one that claims 0 but carries data is refused at its offset. */
Test(kv_save, empty_lzf_string_reads_as_empty)
{
	static const uint8_t ok[] = { 'R', 'E', 'D', 'I', 'S', '0', '0', '1', '0', 0x00, 1, 'k',
				      0xc3, 0, 0, 0xff, 0, 0, 0, 0, 0, 0, 0, 0 };
	static const uint8_t bad[] = { 'R', 'E', 'D', 'I', 'S', '0', '0', '1', '0', 0x00, 1, 'k',
				       0xc3, 2, 0, 0, 'a', 0xff, 0, 0, 0, 0, 0, 0, 0, 0 };
	struct seen s = { 0 };
	char err[300];

	cr_assert_eq(kv_rdb_parse(ok, sizeof(ok), seen_key, &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(s.text, "k=;");
	memset(&s, 0, sizeof(s));
	cr_assert_eq(kv_rdb_parse(bad, sizeof(bad), seen_key, &s, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "offset 12"), "%s", err);
}

Test(kv_save, damage_is_an_error_at_an_offset)
{
	struct kv_buf b = { 0 };
	char err[300];

	make_file(&b);
	for (size_t n = 0; n < b.len; n++) { /* every prefix: an error, never a read past it */
		struct seen s = { 0 };
		char *copy = malloc(n ? n : 1);
		int ret;

		memcpy(copy, b.p, n);
		ret = kv_rdb_parse((const uint8_t *)copy, n, seen_key, &s, err, sizeof(err));
		cr_assert_eq(ret, -EINVAL, "prefix of %zu bytes: %d", n, ret);
		cr_assert(strstr(err, "offset"), "prefix of %zu: %s", n, err);
		free(copy);
	}
	for (size_t i = 9; i < b.len - 8; i++) { /* any byte changed: the checksum, if nothing before */
		struct seen s = { 0 };
		char *copy = malloc(b.len);

		memcpy(copy, b.p, b.len);
		copy[i] ^= 0x5a;
		cr_assert_eq(kv_rdb_parse((const uint8_t *)copy, b.len, seen_key, &s, err, sizeof(err)),
			     -EINVAL, "byte %zu changed", i);
		free(copy);
	}
	kv_buf_free(&b);
}

/* ---- the program, redis-server and redis-check-rdb ------------------------------- */

static void need_redis(void)
{
	if (system("command -v redis-server >/dev/null 2>&1 && command -v redis-check-rdb >/dev/null 2>&1"))
		cr_skip_test("redis-server and redis-check-rdb are not installed (apt-get install "
			     "redis-server redis-tools)");
}

static void kv_prog(char *out, size_t len)
{
	char self[PATH_MAX] = "";
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0)
		self[n] = 0;
	*strrchr(self, '/') = 0;
	snprintf(out, len, "%s/../tools/corio-kv", self);
}

static char tmpdir[256];

static void tmp_make(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/corio-kv-save-XXXXXX");
	cr_assert(mkdtemp(tmpdir));
}

static void tmp_remove(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd)) {
	}
}

struct proc {
	pid_t pid;
	int port;
};

/* Start corio-kv -p 0 in tmpdir with the extra arguments (NULL-ended);
 * p->port 0 when it exited (or said nothing for 10 s) before listening. */
static struct proc kv_start(const char *arg, ...)
{
	const char *argv[32];
	char prog[PATH_MAX + 32], line[256] = "";
	int pfd[2], n = 0;
	struct proc p = { 0 };
	size_t got = 0;
	va_list ap;

	kv_prog(prog, sizeof(prog));
	argv[n++] = prog;
	argv[n++] = "-p";
	argv[n++] = "0";
	argv[n++] = "--dir";
	argv[n++] = tmpdir;
	va_start(ap, arg);
	for (const char *a = arg; a && n < 30; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	cr_assert_eq(pipe(pfd), 0);
	p.pid = fork();
	cr_assert(p.pid >= 0);
	if (p.pid == 0) {
		char errpath[512];
		int e;

		snprintf(errpath, sizeof(errpath), "%s/kv.err", tmpdir);
		e = open(errpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(pfd[1], 1);
		if (e >= 0)
			dup2(e, 2);
		close(pfd[0]);
		execv(prog, (char *const *)argv);
		_exit(127);
	}
	close(pfd[1]);
	for (;;) {
		struct pollfd pl = { pfd[0], POLLIN, 0 };
		ssize_t r;
		char *at;

		if (poll(&pl, 1, 10000) <= 0)
			break;
		r = read(pfd[0], line + got, sizeof(line) - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
		line[got] = 0;
		if ((at = strstr(line, "listening on ")) && strchr(at, '\n')) {
			at = strchr(at + 13, ':');
			p.port = at ? atoi(at + 1) : 0;
			break;
		}
	}
	close(pfd[0]);
	return p;
}

/* SIGTERM (or sig), then wait: the exit status. */
static int proc_end(struct proc *p, int sig)
{
	int st = 0;

	if (p->pid <= 0)
		return -1;
	if (sig)
		kill(p->pid, sig);
	waitpid(p->pid, &st, 0);
	p->pid = 0;
	return st;
}

/* redis-server on a free port with its dir in tmpdir (loading dump.rdb). */
static struct proc redis_start(void)
{
	struct proc p = { 0 };

	for (int attempt = 0; attempt < 5; attempt++) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(sa);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		char portstr[16];

		if (fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
		    !getsockname(fd, (struct sockaddr *)&sa, &len))
			p.port = ntohs(sa.sin_port);
		close(fd);
		snprintf(portstr, sizeof(portstr), "%d", p.port);
		p.pid = fork();
		cr_assert(p.pid >= 0);
		if (p.pid == 0) {
			int nul = open("/dev/null", O_RDWR);

			prctl(PR_SET_PDEATHSIG, SIGKILL);
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
			execlp("redis-server", "redis-server", "--port", portstr, "--bind", "127.0.0.1",
			       "--dir", tmpdir, "--save", "", "--appendonly", "no", "--daemonize", "no",
			       "--logfile", "", (char *)NULL);
			_exit(127);
		}
		for (int i = 0; i < 500; i++) { /* answers PING within 5 s, as our child */
			int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p.port),
						  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
			int ok = !connect(c, (struct sockaddr *)&to, sizeof(to));

			close(c);
			if (waitpid(p.pid, NULL, WNOHANG) == p.pid)
				break;
			if (ok)
				return p;
			usleep(10000);
		}
		proc_end(&p, SIGKILL);
	}
	cr_assert_fail("redis-server did not start");
	return p;
}

/* A blocking client: one connection, one reply per command (10 s bound). */
struct bc {
	int fd;
	char in[1 << 20];
	size_t len;
	char reply[1 << 16];
};

static struct bc *bc_open(int port)
{
	struct bc *c = calloc(1, sizeof(*c));
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = 10 };

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(connect(c->fd, (struct sockaddr *)&to, sizeof(to)), 0, "connect to %d", port);
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return c;
}

static void bc_close(struct bc *c)
{
	close(c->fd);
	free(c);
}

static void bc_send(struct bc *c, const char *const *a, int n)
{
	struct kv_buf b = { 0 };

	kv_num(&b, '*', n);
	for (int i = 0; i < n; i++)
		kv_bulk(&b, a[i], strlen(a[i]));
	cr_assert_eq(write(c->fd, b.p, b.len), (ssize_t)b.len);
	kv_buf_free(&b);
}

/* The next reply (NUL-terminated, cut at 64 KiB), or "" at the end. */
static const char *bc_reply(struct bc *c)
{
	long m;

	while ((m = reply_len(c->in, c->len)) == 0) {
		ssize_t r = read(c->fd, c->in + c->len, sizeof(c->in) - c->len);

		if (r <= 0)
			return "";
		c->len += (size_t)r;
	}
	cr_assert(m > 0);
	snprintf(c->reply, sizeof(c->reply), "%.*s", (int)m, c->in);
	memmove(c->in, c->in + m, c->len - (size_t)m);
	c->len -= (size_t)m;
	return c->reply;
}

/* Send one command (words) and return its reply. */
static const char *bc_cmdv(struct bc *c, const char *const *a, int n)
{
	bc_send(c, a, n);
	return bc_reply(c);
}
#define BC(c, ...) bc_cmdv((c), (const char *const[]){ __VA_ARGS__ }, \
			  (int)(sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(const char *)))

static long long bc_info(struct bc *c, const char *field)
{
	const char *r = BC(c, "INFO", "all"), *p = strstr(r, field);

	return p ? atoll(p + strlen(field)) : -1;
}

/* Keys of every kind: strings (ints, long, compressible), hashes small and
 * large (by count and by value length), and an expiry. */
static void fill(struct bc *c)
{
	char big[300], f[16], v[16];

	memset(big, 'q', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	cr_assert_str_eq(BC(c, "SET", "int", "42"), "+OK\r\n");
	cr_assert_str_eq(BC(c, "SET", "neg", "-123456"), "+OK\r\n");
	cr_assert_str_eq(BC(c, "SET", "wide", "123456789012345"), "+OK\r\n");
	cr_assert_str_eq(BC(c, "SET", "big", big), "+OK\r\n");
	cr_assert_str_eq(BC(c, "SET", "7", "seven"), "+OK\r\n");
	cr_assert_str_eq(BC(c, "SET", "ttl", "v", "EX", "1000"), "+OK\r\n");
	cr_assert_str_eq(BC(c, "HSET", "small", "a", "1", "b", "x", "c", "-9999999"), ":3\r\n");
	cr_assert_str_eq(BC(c, "HSET", "longval", "a", big), ":1\r\n");
	for (int i = 0; i < 300; i++) {
		snprintf(f, sizeof(f), "f%d", i);
		snprintf(v, sizeof(v), "%d", i * 3);
		bc_send(c, (const char *const[]){ "HSET", "large", f, v }, 4);
	}
	for (int i = 0; i < 300; i++)
		cr_assert_str_eq(bc_reply(c), ":1\r\n");
	cr_assert_str_eq(BC(c, "EXPIRE", "large", "2000"), ":1\r\n");
}

/* The keys fill() made, as they should read back. */
static void check_filled(struct bc *c)
{
	const char *r;

	cr_assert_str_eq(BC(c, "DBSIZE"), ":9\r\n");
	cr_assert_str_eq(BC(c, "GET", "int"), "$2\r\n42\r\n");
	cr_assert_str_eq(BC(c, "GET", "neg"), "$7\r\n-123456\r\n");
	cr_assert_str_eq(BC(c, "GET", "wide"), "$15\r\n123456789012345\r\n");
	cr_assert_str_eq(BC(c, "STRLEN", "big"), ":299\r\n");
	cr_assert_str_eq(BC(c, "GET", "7"), "$5\r\nseven\r\n");
	r = BC(c, "TTL", "ttl");
	cr_assert(atoi(r + 1) > 990 && atoi(r + 1) <= 1000, "TTL %s", r);
	cr_assert_str_eq(BC(c, "HGETALL", "small"),
			 "*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\nx\r\n$1\r\nc\r\n$8\r\n-9999999\r\n");
	cr_assert_str_eq(BC(c, "HSTRLEN", "longval", "a"), ":299\r\n");
	cr_assert_str_eq(BC(c, "HLEN", "large"), ":300\r\n");
	cr_assert_str_eq(BC(c, "HGET", "large", "f299"), "$3\r\n897\r\n");
	r = BC(c, "TTL", "large");
	cr_assert(atoi(r + 1) > 1990 && atoi(r + 1) <= 2000, "TTL %s", r);
}

static int check_rdb(void)
{
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "redis-check-rdb '%s/dump.rdb' >'%s/check.out' 2>&1", tmpdir, tmpdir);
	return system(cmd);
}

Test(kv_save, redis_loads_corio_dumps, .timeout = 120)
{
	need_redis();
	tmp_make();
	for (int shards = 1; shards <= 2; shards++) {
		struct proc kv = kv_start("--save", "", "-n", shards == 1 ? "1" : "2", NULL), rs;
		struct bc *c;

		cr_assert(kv.port > 0, "corio-kv did not start");
		c = bc_open(kv.port);
		cr_assert_str_eq(BC(c, "FLUSHALL"), "+OK\r\n");
		fill(c);
		cr_assert_str_eq(BC(c, "SAVE"), "+OK\r\n");
		bc_close(c);
		cr_assert_eq(proc_end(&kv, SIGTERM), 0);
		cr_assert_eq(check_rdb(), 0, "redis-check-rdb refused corio-kv's file (%d shards)", shards);
		rs = redis_start();
		c = bc_open(rs.port);
		check_filled(c);
		cr_assert_str_eq(BC(c, "OBJECT", "ENCODING", "small"), "$8\r\nlistpack\r\n");
		bc_close(c);
		proc_end(&rs, SIGKILL);
	}
	tmp_remove();
}

Test(kv_save, corio_loads_redis_dumps, .timeout = 120)
{
	struct proc rs, kv;
	struct bc *c;

	need_redis();
	tmp_make();
	rs = redis_start();
	c = bc_open(rs.port);
	fill(c); /* redis compresses "big" with LZF (rdbcompression yes) */
	cr_assert_str_eq(BC(c, "SAVE"), "+OK\r\n");
	bc_close(c);
	proc_end(&rs, SIGKILL);
	for (int shards = 1; shards <= 2; shards++) {
		kv = kv_start("--save", "", "-n", shards == 1 ? "1" : "2", NULL);
		cr_assert(kv.port > 0, "corio-kv did not start on redis-server's file");
		c = bc_open(kv.port);
		check_filled(c);
		cr_assert_str_eq(BC(c, "OBJECT", "ENCODING", "large"), "$9\r\nhashtable\r\n");
		bc_close(c);
		cr_assert_eq(proc_end(&kv, SIGTERM), 0);
	}
	tmp_remove();
}

Test(kv_save, restart_keeps_keys_and_ttls, .timeout = 60)
{
	struct proc kv;
	struct bc *c;
	const char *r;

	need_redis();
	tmp_make();
	kv = kv_start("--save", "3600 1", "-n", "2", NULL); /* save points: SIGTERM saves */
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	fill(c);
	bc_close(c);
	cr_assert_eq(proc_end(&kv, SIGTERM), 0);
	kv = kv_start("--save", "3600 1", "-n", "2", NULL);
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	check_filled(c);
	r = BC(c, "INFO", "persistence");
	cr_assert(strstr(r, "rdb_changes_since_last_save:0\r\n"), "%s", r);
	cr_assert_str_eq(BC(c, "SHUTDOWN", "NOSAVE"), ""); /* no reply: the server goes */
	bc_close(c);
	cr_assert_eq(proc_end(&kv, 0), 0);
	tmp_remove();
}

Test(kv_save, save_points_fire_and_commands_answer, .timeout = 60)
{
	struct proc kv;
	struct bc *c;
	char path[512];
	long long last;
	struct stat st;

	tmp_make();
	kv = kv_start("--save", "1 2", NULL);
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	cr_assert_str_eq(BC(c, "CONFIG", "GET", "save"), "*2\r\n$4\r\nsave\r\n$3\r\n1 2\r\n");
	cr_assert_str_eq(BC(c, "CONFIG", "GET", "dbfilename"), "*2\r\n$10\r\ndbfilename\r\n$8\r\ndump.rdb\r\n");
	cr_assert_str_eq(BC(c, "CONFIG", "SET", "save", "1 x"),
			 "-ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save "
			 "parameters\r\n");
	cr_assert_str_eq(BC(c, "CONFIG", "SET", "dbfilename", "a/b"),
			 "-ERR CONFIG SET failed (possibly related to argument 'dbfilename') - dbfilename "
			 "can't be a path, just a filename\r\n");
	cr_assert_str_eq(BC(c, "CONFIG", "SET", "dbfilename", "points.rdb"), "+OK\r\n");
	last = atoll(BC(c, "LASTSAVE") + 1);
	cr_assert_str_eq(BC(c, "SET", "a", "1"), "+OK\r\n");
	cr_assert_str_eq(BC(c, "SET", "b", "2"), "+OK\r\n");
	cr_assert_eq(bc_info(c, "rdb_changes_since_last_save:"), 2);
	cr_assert_eq(bc_info(c, "rdb_saves:"), 0);
	snprintf(path, sizeof(path), "%s/points.rdb", tmpdir);
	for (int i = 0; i < 500 && (stat(path, &st) || bc_info(c, "rdb_changes_since_last_save:")); i++)
		usleep(10000); /* the point is due after 1 s; the saver looks every 100 ms */
	cr_assert_eq(stat(path, &st), 0, "no save within 5 s");
	cr_assert_eq(bc_info(c, "rdb_changes_since_last_save:"), 0);
	cr_assert(atoll(BC(c, "LASTSAVE") + 1) >= last);
	cr_assert_eq(bc_info(c, "rdb_saves:"), 1); /* one point, one save */
	cr_assert_eq(bc_info(c, "rdb_bgsave_in_progress:"), 0);
	cr_assert(strstr(BC(c, "INFO", "persistence"), "rdb_last_bgsave_status:ok"));
	cr_assert_str_eq(BC(c, "BGSAVE", "x"), "-ERR syntax error\r\n");
	cr_assert_str_eq(BC(c, "SHUTDOWN", "SAVE", "NOSAVE"), "-ERR syntax error\r\n");
	cr_assert_str_eq(BC(c, "SHUTDOWN", "ABORT"), "-ERR No shutdown in progress.\r\n");
	cr_assert_str_eq(BC(c, "CONFIG", "SET", "dir", "/nonexistent/corio"),
			 "-ERR CONFIG SET failed (possibly related to argument 'dir') - No such file or "
			 "directory\r\n");
	bc_close(c);
	cr_assert_eq(proc_end(&kv, SIGTERM), 0);
	tmp_remove();
}

Test(kv_save, bad_files_stop_the_start, .timeout = 60)
{
	struct proc kv;
	struct bc *c;
	char path[512], errp[512], buf[600] = "";
	struct stat st;
	int fd;
	ssize_t n;

	tmp_make();
	kv = kv_start("--save", "", NULL);
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	fill(c);
	cr_assert_str_eq(BC(c, "SAVE"), "+OK\r\n");
	bc_close(c);
	cr_assert_eq(proc_end(&kv, SIGTERM), 0);
	snprintf(path, sizeof(path), "%s/dump.rdb", tmpdir);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(truncate(path, st.st_size - 100), 0);
	kv = kv_start("--save", "", NULL);
	cr_assert_eq(kv.port, 0, "started on a truncated file");
	cr_assert(WIFEXITED(proc_end(&kv, 0)));
	snprintf(errp, sizeof(errp), "%s/kv.err", tmpdir);
	fd = open(errp, O_RDONLY);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	cr_assert(strstr(buf, "offset") && strstr(buf, "does not start"), "stderr: %s", buf);
	/* told to, it starts with the keys before the damage */
	kv = kv_start("--save", "", "--load-partial", "yes", NULL);
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	cr_assert(atoi(BC(c, "DBSIZE") + 1) >= 1);
	bc_close(c);
	cr_assert_eq(proc_end(&kv, SIGTERM), 0);
	/* not an RDB file at all */
	fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert_eq(write(fd, "hello world", 11), 11);
	close(fd);
	kv = kv_start("--save", "", NULL);
	cr_assert_eq(kv.port, 0);
	proc_end(&kv, 0);
	tmp_remove();
}

/* Every key of the file at path, counted by value ("old"/"new"/other). */
struct tally {
	long old, fresh, other;
	long hashes_old, hashes_changed; /* hashes with every field "old", and the rest */
	long fields;
};

static int tally_key(void *arg, const struct kv_rdb_obj *o)
{
	struct tally *t = arg;

	if (o->type == KV_RDB_HASH) {
		bool old = true;

		for (size_t i = 0; i < o->npairs; i++)
			old &= o->fv[2 * i + 1].n >= 3 && !memcmp(o->fv[2 * i + 1].p, "old", 3);
		t->fields += (long)o->npairs;
		if (old)
			t->hashes_old++;
		else
			t->hashes_changed++;
	} else if (o->type == KV_RDB_STR && o->val.n >= 3 && !memcmp(o->val.p, "old", 3))
		t->old++;
	else if (o->type == KV_RDB_STR && o->val.n >= 3 && !memcmp(o->val.p, "new", 3))
		t->fresh++;
	else
		t->other++;
	return 0;
}

static int tally_file(const char *path, struct tally *t, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	void *m;
	int ret;

	if (fd < 0 || fstat(fd, &st))
		return -errno;
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -errno;
	ret = kv_rdb_parse(m, (size_t)st.st_size, tally_key, t, err, errlen);
	munmap(m, (size_t)st.st_size);
	return ret;
}

/* Load n keys k:0.. with value "old..." (100 bytes), pipelined. */
static void load_keys(struct bc *c, long n, const char *val)
{
	char k[32];

	for (long i = 0; i < n; i += 1000) {
		for (long j = i; j < i + 1000 && j < n; j++) {
			snprintf(k, sizeof(k), "k:%ld", j);
			bc_send(c, (const char *const[]){ "SET", k, val }, 3);
		}
		for (long j = i; j < i + 1000 && j < n; j++)
			cr_assert_str_eq(bc_reply(c), "+OK\r\n");
	}
}

Test(kv_save, bgsave_under_writes_is_a_point_in_time, .timeout = 120)
{
	char old[101], fresh[101], path[300], err[300];
	struct proc kv;
	struct bc *c;
	struct tally t = { 0 };
	long n = 200000, changed = 0;
	int saw_running = 0;

	need_redis();
	memset(old, 'o', 100);
	memcpy(old, "old", 3);
	old[100] = 0;
	memset(fresh, 'n', 100);
	memcpy(fresh, "new", 3);
	fresh[100] = 0;
	tmp_make();
	kv = kv_start("--save", "", "-n", "2", NULL);
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	load_keys(c, n, old);
	/* hashes too: 20 large (a table each, changed in place) and 20 small */
	for (int h = 0; h < 40; h++) {
		char hk[32], f[16];
		int fields = h < 20 ? 300 : 10;

		snprintf(hk, sizeof(hk), "hash:%d", h);
		for (int i = 0; i < fields; i++) {
			snprintf(f, sizeof(f), "f%d", i);
			bc_send(c, (const char *const[]){ "HSET", hk, f, "oldvalue" }, 4);
		}
		for (int i = 0; i < fields; i++)
			cr_assert_str_eq(bc_reply(c), ":1\r\n");
	}
	cr_assert_str_eq(BC(c, "BGSAVE"), "+Background saving started\r\n");
	/* change every hash at once: the snapshot must hold them as they were */
	for (int h = 0; h < 40; h++) {
		char hk[32];

		snprintf(hk, sizeof(hk), "hash:%d", h);
		bc_send(c, (const char *const[]){ "HSET", hk, "f1", "newvalue", "added", "x" }, 6);
		bc_send(c, (const char *const[]){ "HDEL", hk, "f2" }, 3);
	}
	for (int h = 0; h < 80; h++)
		bc_reply(c);
	/* overwrite, delete and add keys while it runs: it must hold the old ones */
	for (long i = 0; i < n && (i < 2000 || bc_info(c, "rdb_bgsave_in_progress:") == 1); i += 1000) {
		char k[32];

		saw_running |= bc_info(c, "rdb_bgsave_in_progress:") == 1;
		for (long j = i; j < i + 1000; j++) {
			snprintf(k, sizeof(k), "k:%ld", j);
			if (j % 3 == 0)
				bc_send(c, (const char *const[]){ "SET", k, fresh }, 3);
			else if (j % 3 == 1)
				bc_send(c, (const char *const[]){ "DEL", k }, 2);
			else
				bc_send(c, (const char *const[]){ "EXPIRE", k, "1000" }, 3);
			snprintf(k, sizeof(k), "added:%ld", j);
			bc_send(c, (const char *const[]){ "SET", k, fresh }, 3);
		}
		for (long j = 0; j < 2000; j++)
			bc_reply(c);
		changed = i + 1000;
	}
	for (int i = 0; i < 3000 && bc_info(c, "rdb_bgsave_in_progress:") == 1; i++)
		usleep(10000);
	cr_assert_eq(bc_info(c, "rdb_bgsave_in_progress:"), 0);
	cr_assert(strstr(BC(c, "INFO", "persistence"), "rdb_last_bgsave_status:ok"));
	bc_close(c);
	cr_assert_eq(proc_end(&kv, SIGTERM), 0);
	cr_assert(saw_running, "the BGSAVE ended before any write: nothing was tested");
	cr_assert(changed > 0);
	snprintf(path, sizeof(path), "%s/dump.rdb", tmpdir);
	cr_assert_eq(tally_file(path, &t, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(t.old, n, "old %ld new %ld other %ld (changed %ld)", t.old, t.fresh, t.other, changed);
	cr_assert_eq(t.fresh + t.other, 0);
	cr_assert_eq(t.hashes_old, 40, "hashes as they were %ld, changed %ld", t.hashes_old, t.hashes_changed);
	cr_assert_eq(t.fields, 20 * 300 + 20 * 10);
	cr_assert_eq(check_rdb(), 0);
	tmp_remove();
}

Test(kv_save, kill_mid_bgsave_keeps_previous_file, .timeout = 120)
{
	char old[101], path[300], err[300];
	struct proc kv;
	struct bc *c;
	struct tally t = { 0 };
	int saw_running = 0;

	memset(old, 'o', 100);
	memcpy(old, "old", 3);
	old[100] = 0;
	tmp_make();
	kv = kv_start("--save", "", "-n", "2", NULL);
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	load_keys(c, 1000, old);
	cr_assert_str_eq(BC(c, "SAVE"), "+OK\r\n"); /* the previous file: 1000 keys */
	load_keys(c, 300000, old);
	/* a BGSAVE of 301,000 keys is still running when INFO answers */
	cr_assert_str_eq(BC(c, "BGSAVE"), "+Background saving started\r\n");
	saw_running = bc_info(c, "rdb_bgsave_in_progress:") == 1;
	cr_assert(saw_running, "the BGSAVE had ended before the kill: nothing was tested");
	proc_end(&kv, SIGKILL);
	bc_close(c);
	snprintf(path, sizeof(path), "%s/dump.rdb", tmpdir);
	cr_assert_eq(tally_file(path, &t, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(t.old, 1000); /* the previous file, whole */
	kv = kv_start("--save", "", "-n", "2", NULL);
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	cr_assert_str_eq(BC(c, "DBSIZE"), ":1000\r\n");
	bc_close(c);
	cr_assert_eq(proc_end(&kv, SIGTERM), 0);
	tmp_remove();
}

Test(kv_save, flushall_mid_bgsave_keeps_it_whole, .timeout = 120)
{
	char old[101], path[512], err[300];
	struct proc kv;
	struct bc *c;
	struct tally t = { 0 };

	memset(old, 'o', 100);
	memcpy(old, "old", 3);
	old[100] = 0;
	tmp_make();
	kv = kv_start("--save", "", "-n", "2", NULL);
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	load_keys(c, 200000, old);
	cr_assert_str_eq(BC(c, "BGSAVE"), "+Background saving started\r\n");
	cr_assert_eq(bc_info(c, "rdb_bgsave_in_progress:"), 1, "the BGSAVE ended too soon to test");
	cr_assert_str_eq(BC(c, "FLUSHALL"), "+OK\r\n");
	cr_assert_str_eq(BC(c, "SET", "after", "new"), "+OK\r\n");
	for (int i = 0; i < 3000 && bc_info(c, "rdb_bgsave_in_progress:") == 1; i++)
		usleep(10000);
	cr_assert(strstr(BC(c, "INFO", "persistence"), "rdb_last_bgsave_status:ok"));
	cr_assert_str_eq(BC(c, "DBSIZE"), ":1\r\n");
	bc_close(c);
	cr_assert_eq(proc_end(&kv, SIGTERM), 0);
	snprintf(path, sizeof(path), "%s/dump.rdb", tmpdir);
	cr_assert_eq(tally_file(path, &t, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(t.old, 200000);
	cr_assert_eq(t.fresh + t.other, 0);
	tmp_remove();
}

Test(kv_save, shutdown_save_and_failed_saves, .timeout = 60)
{
	char gone[512], path[512];
	struct proc kv;
	struct bc *c;
	struct stat st;

	tmp_make();
	kv = kv_start("--save", "", NULL);
	cr_assert(kv.port > 0);
	c = bc_open(kv.port);
	cr_assert_str_eq(BC(c, "SET", "k", "v"), "+OK\r\n");
	/* a directory that goes away: the save fails, the server stays */
	snprintf(gone, sizeof(gone), "%s/gone", tmpdir);
	cr_assert_eq(mkdir(gone, 0755), 0);
	cr_assert_str_eq(BC(c, "CONFIG", "SET", "dir", gone), "+OK\r\n");
	cr_assert_eq(rmdir(gone), 0);
	cr_assert_str_eq(BC(c, "SHUTDOWN", "SAVE"), "-ERR Errors trying to SHUTDOWN. Check logs.\r\n");
	cr_assert_str_eq(BC(c, "SAVE"),
			 "-ERR corio-kv could not save the snapshot: see its log (stderr)\r\n");
	cr_assert(strstr(BC(c, "INFO", "persistence"), "rdb_last_bgsave_status:err"));
	cr_assert_eq(bc_info(c, "rdb_saves:"), 0); /* failed saves are not saves */
	cr_assert_str_eq(BC(c, "PING"), "+PONG\r\n");
	/* back to a directory that is there: SHUTDOWN SAVE saves, then exits */
	cr_assert_str_eq(BC(c, "CONFIG", "SET", "dir", tmpdir), "+OK\r\n");
	cr_assert_str_eq(BC(c, "SHUTDOWN", "SAVE"), "");
	bc_close(c);
	cr_assert_eq(proc_end(&kv, 0), 0);
	snprintf(path, sizeof(path), "%s/dump.rdb", tmpdir);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(check_rdb(), 0);
	tmp_remove();
}
