/* SPDX-License-Identifier: MIT */
/*
 * tools/kv (corio-kv), command by command: the same commands sent to
 * redis-server 7.0 and to corio-kv (when redis-server is installed), then
 * the command families one by one, each through the real server (run_kv(),
 * kv_helpers.h) and a RESP client in a fiber: (a) the command table,
 * dispatch, COMMAND and the families not served, (b) access control, (c)
 * strings, keys and expiry, (d) hashes, (e) INFO and CONFIG GET for
 * dashboards, (f) the emulated cluster, (g) pub/sub; then redis-cli and
 * redis-benchmark, when installed, against corio-kv. Each runtime ends with
 * no fd left open (th_run()).
 */
#include "kv_helpers.h"

static int run_cmd(const char *cmd, char *out, size_t n);
static void kv_idle_entry(void *arg);

/* ---- differential: the same commands to redis-server 7.0 and to corio-kv ---------- */

/*
 * The tests below start a redis-server of their own (skipping when it is not
 * installed), send it and corio-kv the same scripts, and compare the replies
 * byte for byte, in RESP2 and in RESP3 (HELLO 3 first), against 1 and 2
 * shards. A script is lines of words split at spaces ("" is an empty
 * argument, \s a space inside one); a line that starts with "~ " compares
 * only the type of the reply (its first byte: times, ids), "? " does not
 * compare, "! " wants corio-kv's reply (after the mark) and does not ask
 * redis (where corio-kv differs on purpose: its name, its errors); "3 "
 * (a digit) reads that many replies (SUBSCRIBE a b c) and compares them
 * all.
 */
static pid_t ref_pid;
static int ref_port;

static int free_tcp_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;

	if (fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void ref_stop(void);

/* Start the reference redis-server (extra: more arguments, NULL-ended). */
/* Is the server at 127.0.0.1:port our reference (its INFO names its pid)?
 * 1 yes, 0 something else answers there, -1 nothing listens yet. */
static int ref_is_ours(int port, pid_t pid, const char *pass)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = 2 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ret = -1;
	char buf[8192], want[48];
	size_t got = 0;

	if (fd < 0)
		return -1;
	if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		char info[160];
		int len = snprintf(info, sizeof(info), "%s%s%s*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n",
				   pass ? "AUTH " : "", pass ? pass : "", pass ? "\r\n" : "");
		ssize_t n;

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		ret = 0;
		if (write(fd, info, (size_t)len) == len) {
			snprintf(want, sizeof(want), "process_id:%d\r\n", (int)pid);
			while (got < sizeof(buf) - 1 && (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0) {
				got += (size_t)n;
				buf[got] = 0;
				if (strstr(buf, "# Clients") || strstr(buf, want))
					break;
			}
			buf[got] = 0;
			ret = strstr(buf, want) != NULL;
		}
	}
	close(fd);
	return ret;
}

/* Start the reference redis-server (extra: more arguments, NULL-ended) and
 * wait until it answers: a port picked free may be taken by another test
 * running at the same time before redis binds it, so the server that
 * answers must name our child's pid, or we start over on another port. */
static void ref_start(const char *extra, ...)
{
	char portstr[16];
	const char *argv[32] = { "redis-server", "--port", portstr, "--save", "", "--appendonly", "no",
				 "--bind", "127.0.0.1", "--logfile", "/dev/null", "--daemonize", "no" };
	const char *pass = NULL;
	int n = 13;
	va_list ap;

	if (system("command -v redis-server >/dev/null 2>&1") != 0)
		cr_skip_test("redis-server is not installed (apt-get install redis-server): "
			     "no reference to compare with");
	va_start(ap, extra);
	for (const char *a = extra; a && n < 31; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	for (int i = 13; i + 1 < n; i++)
		if (!strcmp(argv[i], "--requirepass"))
			pass = argv[i + 1];
	atexit(ref_stop); /* a failed assertion ends the test before its ref_stop() */
	for (int attempt = 0; attempt < 5; attempt++) {
		ref_port = free_tcp_port();
		cr_assert(ref_port > 0);
		snprintf(portstr, sizeof(portstr), "%d", ref_port);
		ref_pid = fork();
		cr_assert(ref_pid >= 0);
		if (ref_pid == 0) {
			int nul = open("/dev/null", O_RDWR);

			/* a test that fails, or is killed at its timeout, takes its
			 * reference down with it */
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
			execvp("redis-server", (char *const *)argv);
			_exit(127);
		}
		for (int i = 0; i < 500; i++) {
			int r = ref_is_ours(ref_port, ref_pid, pass);

			if (r == 1)
				return;
			if (r == 0 || waitpid(ref_pid, NULL, WNOHANG) == ref_pid)
				break; /* another server has the port, or ours died of it */
			usleep(10000);
		}
		ref_stop();
	}
	cr_assert_fail("redis-server did not start");
}

static void ref_stop(void)
{
	if (ref_pid > 0) {
		kill(ref_pid, SIGTERM);
		waitpid(ref_pid, NULL, 0); /* ECHILD if it already died: fine */
	}
	ref_pid = 0;
}

/* A connection to the reference server, once it accepts (5 s at most). */
static struct cl *ref_open(void)
{
	char where[32];

	snprintf(where, sizeof(where), "127.0.0.1:%d", ref_port);
	for (int i = 0; i < 500; i++) {
		struct corio_sock *s;

		if (corio_tcp_connect(where, &s) == 0) {
			struct cl *c = calloc(1, sizeof(*c));

			c->s = s;
			return c;
		}
		if (corio_sleep_ns(10000000) < 0)
			break;
	}
	CHECK(!"redis-server did not start");
	return NULL;
}

/* Queue the command of one script line (its words). */
static void cl_line(struct cl *c, const char *line)
{
	char w[64][256];
	const char *argv[65];
	int n = 0;

	for (const char *p = line; *p && n < 64;) {
		size_t len = 0;

		while (*p == ' ')
			p++;
		if (!*p)
			break;
		while (*p && *p != ' ' && len < sizeof(w[0]) - 1) {
			if (p[0] == '\\' && p[1] == 's') {
				w[n][len++] = ' ';
				p += 2;
			} else {
				w[n][len++] = *p++;
			}
		}
		w[n][len] = 0;
		if (!strcmp(w[n], "\"\""))
			w[n][0] = 0;
		argv[n] = w[n];
		n++;
	}
	kv_num(&c->out, '*', n);
	for (int i = 0; i < n; i++)
		kv_bulk(&c->out, argv[i], strlen(argv[i]));
}

/* The next n replies, concatenated (malloc), or none: a copy of dflt. */
static char *cl_replies(struct cl *c, int n, const char *dflt)
{
	struct kv_buf b = { 0 };

	for (int i = 0; i < n; i++) {
		const char *r = cl_reply(c);

		if (!r) {
			kv_buf_free(&b);
			return dflt ? strdup(dflt) : NULL;
		}
		kv_put(&b, r, strlen(r));
	}
	kv_put(&b, "", 1);
	return b.p;
}

/* Run a script (lines, NULL-ended) on both; every reply compared. */
static void diff_script_at(struct cl *kv, struct cl *ref, const char *const *lines, const char *file,
			   int line)
{
	for (int i = 0; lines[i]; i++) {
		const char *l = lines[i], *got;
		char *want = NULL, msg[440];
		int mode = 0; /* 0 exact, 1 type, 2 none, 3 literal */
		int replies = 1;

		if (l[0] >= '1' && l[0] <= '9' && l[1] == ' ') {
			replies = l[0] - '0';
			l += 2;
		}

		if ((l[0] == '~' || l[0] == '?' || l[0] == '!') && l[1] == ' ') {
			mode = l[0] == '~' ? 1 : l[0] == '?' ? 2 : 3;
			l += 2;
		}
		if (mode == 3) {
			const char *bar = strstr(l, " => ");

			if (!bar) {
				th_fail(file, line, "a ! line needs ' => reply'");
				return;
			}
			want = malloc(strlen(bar + 4) + 3);
			sprintf(want, "%s\r\n", bar + 4);
			{
				char cmd[512];

				snprintf(cmd, sizeof(cmd), "%.*s", (int)(bar - l), l);
				cl_line(kv, cmd);
			}
		} else {
			cl_line(kv, l);
			cl_line(ref, l);
			want = cl_replies(ref, replies, "(no reply from redis-server)");
		}
		got = replies > 1 ? cl_replies(kv, replies, NULL) : cl_reply(kv);
		if (!got || (mode == 0 && strcmp(got, want)) || (mode == 3 && strcmp(got, want)) ||
		    (mode == 1 && got[0] != want[0])) {
			size_t at = 0;

			while (got && got[at] && got[at] == want[at])
				at++;
			at = at > 40 ? at - 40 : 0; /* show where they part */
			snprintf(msg, sizeof(msg), "line %d '%.50s' at byte %zu: corio-kv %.150s, redis %.150s",
				 i, l, at, got ? got + at : "(none)", want + at);
			th_fail(file, line, msg);
		}
		if (replies > 1)
			free((char *)got);
		free(want);
	}
}

/* Both fresh (FLUSHALL), in protocol proto, then the script. */
static void diff_run_at(struct kv_test *t, int proto, const char *const *lines, const char *file, int line)
{
	struct cl *kv = cl_open(t->port), *ref = ref_open();

	if (kv && ref) {
		static const char *const prologue2[] = { "FLUSHALL", NULL };
		static const char *const prologue3[] = { "? HELLO 3", "FLUSHALL", NULL };

		diff_script_at(kv, ref, proto == 3 ? prologue3 : prologue2, file, line);
		diff_script_at(kv, ref, lines, file, line);
	}
	cl_close(kv);
	cl_close(ref);
}
#define DIFF(t, proto, lines) diff_run_at((t), (proto), (lines), __FILE__, __LINE__)

/* Run body on 1 and 2 shards against a fresh reference server. */
static void diff_test(void (*body)(struct kv_test *t))
{
	ref_start(NULL);
	run_kv(1, NULL, body);
	run_kv(2, NULL, body);
	ref_stop();
}

/* ---- (a) the table: dispatch, COMMAND, the families not served --------------------- */

static const char *const table_script[] = {
	"COMMAND INFO get mset del mget exists ttl incr dbsize flushall ping echo info quit hello multi exec",
	"COMMAND INFO GeT nosuch",
	"COMMAND DOCS nosuch",
	"COMMAND FOO",
	"COMMAND COUNT x",
	"COMMAND LIST x",
	"nosuch a b",
	"GeT",
	"get a",
	"SET a 1",
	"gEt a",
	"! LPUSH l a => -ERR 'lpush' is a list command: corio-kv does not serve lists, sets, sorted "
	"sets, streams or scripting; see docs/corio-kv.md (corio-kv(1)) for the commands it serves",
	"! zadd z 1 a => -ERR 'zadd' is a sorted set command: corio-kv does not serve lists, sets, "
	"sorted sets, streams or scripting; see docs/corio-kv.md (corio-kv(1)) for the commands it serves",
	"! EVAL x 0 => -ERR 'eval' is a scripting command: corio-kv does not serve lists, sets, "
	"sorted sets, streams or scripting; see docs/corio-kv.md (corio-kv(1)) for the commands it serves",
	"MULTI",
	"! SADD s a => -ERR 'sadd' is a set command: corio-kv does not serve lists, sets, sorted sets, "
	"streams or scripting; see docs/corio-kv.md (corio-kv(1)) for the commands it serves",
	NULL,
};

static void table_body(struct kv_test *t)
{
	DIFF(t, 2, table_script);
	DIFF(t, 3, table_script);
}

Test(kv, diff_command_table, .timeout = 120)
{
	diff_test(table_body);
}

/* Every name the table holds is found in any case, COMMAND COUNT and LIST
 * agree with COMMAND, and a name that is no command (however it hashes) is
 * not found. */
static void table_lookup(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	const char *r;
	long long count;

	if (!c)
		return;
	cl_cmd(c, "COMMAND", "COUNT", NULL);
	r = cl_reply(c);
	count = r ? atoll(r + 1) : -1;
	CHECK(count >= 30);
	cl_cmd(c, "COMMAND", "LIST", NULL);
	r = cl_reply(c);
	CHECK(r && atoll(r + 1) == count);
	for (const char *p = r ? strchr(r, '\n') + 1 : ""; *p == '$';) {
		char name[64], mixed[64];
		size_t n = (size_t)atoi(p + 1);
		const struct kv_spec *sp;
		struct kv_arg a = { mixed, n };

		p = strchr(p, '\n') + 1;
		snprintf(name, sizeof(name), "%.*s", (int)n, p);
		for (size_t i = 0; i < n; i++)
			mixed[i] = (char)(i % 2 ? toupper((unsigned char)name[i]) : name[i]);
		sp = kv_find_spec(&t->srv.cmds, &a);
		CHECK(sp && !strcmp(sp->name, name));
		a.n = n - 1; /* a prefix is not the command */
		sp = kv_find_spec(&t->srv.cmds, &a);
		CHECK(!sp || strcmp(sp->name, name));
		p += n + 2;
	}
	{
		struct kv_arg a = { "getx", 4 }, b = { "zremrangebyscorex", 17 };

		CHECK(!kv_find_spec(&t->srv.cmds, &a));
		CHECK(!kv_find_spec(&t->srv.cmds, &b));
	}
	cl_close(c);
}

Test(kv, command_table_finds_every_name, .timeout = 60)
{
	run_kv(1, NULL, table_lookup);
}

/* ---- (c) strings, keys and expiry ---------------------------------------------------- */

static const char *const strings_script[] = {
	"SETEX s 100 v", "~ TTL s", "SETEX s 0 v", "SETEX s -1 v", "SETEX s x v", "SETEX s 10",
	"PSETEX s 100000 v", "~ PTTL s", "PSETEX s 0 v", "GET s",
	"SETNX s w", "SETNX n1 w", "GET n1", "GETSET n1 x", "GETSET nope x", "GET nope", "TTL n1",
	"GETDEL n1", "GETDEL n1", "EXISTS n1",
	"SET g v", "GETEX g", "GETEX g EX 100", "~ TTL g", "GETEX g PERSIST", "TTL g",
	"GETEX g PX 5000", "~ PTTL g", "GETEX g EXAT 99999999999", "GETEX g EX 0", "GETEX g EX -1",
	"GETEX g EX x", "GETEX g EX 1 PX 1", "GETEX g PERSIST EX 1", "GETEX g FOO", "GETEX nope EX 1",
	"GETEX g PXAT 1", "EXISTS g",
	"APPEND a x", "APPEND a yz", "GET a", "STRLEN a", "STRLEN nope", "APPEND a \"\"",
	"SET r Hello\\sWorld", "GETRANGE r 0 4", "GETRANGE r -5 -1", "GETRANGE r 5 2",
	"GETRANGE r -1 -5", "GETRANGE r 0 100", "GETRANGE r -100 2", "GETRANGE r 20 30",
	"GETRANGE nope 0 1", "GETRANGE r x 1", "GETRANGE r 0 -100",
	"SETRANGE r 6 Redis", "GET r", "SETRANGE z 3 ab", "GET z", "SETRANGE y 3 \"\"", "EXISTS y",
	"SETRANGE r 1 \"\"", "SETRANGE r -1 a", "SETRANGE r x a", "SETRANGE r 536870911 ab",
	"SET f 10.50", "INCRBYFLOAT f 0.1", "INCRBYFLOAT f -5", "INCRBYFLOAT f 5.0e3",
	"INCRBYFLOAT f 2.0e-3", "INCRBYFLOAT nf 3", "INCRBYFLOAT nf 1.5", "INCRBYFLOAT f abc",
	"INCRBYFLOAT f \"\"", "INCRBYFLOAT f inf", "SET f abc", "INCRBYFLOAT f 1", "SET f 1e308",
	"INCRBYFLOAT f 1e308", "SET f 0", "INCRBYFLOAT f -0", "INCRBYFLOAT f 1.0000000000000001",
	"INCRBYFLOAT f \\s1",
	"SET e v", "EXPIREAT e 99999999999", "~ EXPIRETIME e", "~ PEXPIRETIME e",
	"EXPIRETIME nokey", "EXPIRETIME r", "PEXPIRETIME r", "PEXPIREAT e 99999999999000",
	"~ PEXPIRETIME e", "EXPIREAT e 9999999999999999", "PEXPIREAT e 1 GT", "EXPIREAT e 1",
	"EXISTS e", "EXPIREAT e 1", "PEXPIREAT nokey 1", "EXPIREAT r 100000000000 NX",
	"EXPIREAT r 100000000001 NX", "EXPIREAT r 1 XX LT",
	"TYPE r", "TYPE nope", "SET t1 1", "SET t2 2", "TOUCH t1 t2 nope", "UNLINK t1 t2 nope",
	"SET oi 12345", "OBJECT ENCODING oi", "SET oe short", "OBJECT ENCODING oe",
	"SET or 0123456789012345678901234567890123456789012345", "OBJECT ENCODING or",
	"OBJECT ENCODING nope", "OBJECT IDLETIME oe", "OBJECT FREQ oe", "OBJECT FOO oe",
	"OBJECT ENCODING", "~ OBJECT REFCOUNT oe", "OBJECT IDLETIME nope",
	"~ MEMORY USAGE oe", "MEMORY USAGE nope", "~ MEMORY USAGE oe SAMPLES 5", "MEMORY FOO",
	NULL,
};

static void strings_body(struct kv_test *t)
{
	DIFF(t, 2, strings_script);
	DIFF(t, 3, strings_script);
}

Test(kv, diff_strings_keys_expiry, .timeout = 120)
{
	diff_test(strings_body);
}

static const char *const across_script[] = {
	"SET a 1", "RENAME a b", "GET a", "GET b", "RENAME nokey x", "RENAME b b", "RENAME nokey nokey",
	"SET c 2", "RENAMENX b c", "RENAMENX b d", "GET d", "RENAMENX nokey d", "RENAMENX d d",
	"RENAMENX nokey2 c",
	"SET e v", "EXPIRE e 100", "RENAME e f", "~ TTL f", "EXISTS e",
	"COPY f g", "GET g", "~ TTL g", "COPY f g", "COPY f g REPLACE", "COPY f f", "COPY nokey g",
	"COPY f h DB 0", "! COPY f h DB 1 => -ERR DB index is out of range", "COPY f h FOO", "COPY f h DB x", "COPY f", "GET f",
	"MSETNX m1 1 m2 2", "MGET m1 m2", "MSETNX m2 3 m3 4", "EXISTS m3", "MSETNX m1",
	"MSETNX m1 1 m2",
	"FLUSHALL", "RANDOMKEY", "SET only 1", "RANDOMKEY", "KEYS *", "KEYS o*", "KEYS x*",
	"KEYS o[mn]l?", "KEYS", "RANDOMKEY x",
	"SCAN x", "SCAN 99999999999999999999999", "SCAN 0 COUNT 0", "SCAN 0 COUNT x", "SCAN 0 FOO bar", "SCAN 0 MATCH",
	"WATCH", "WATCH only", "UNWATCH", "MULTI", "WATCH x", "SET only 2", "EXEC", "GET only",
	"MULTI", "UNWATCH", "EXEC",
	"SET hh 1", "RENAME hh hh2", "TYPE hh2",
	NULL,
};

static void across_body(struct kv_test *t)
{
	DIFF(t, 2, across_script);
	DIFF(t, 3, across_script);
}

Test(kv, diff_rename_copy_msetnx_keys_watch, .timeout = 120)
{
	diff_test(across_body);
}

/* RENAME, RENAMENX, COPY between keys of two shards move the value, its
 * expiry and nothing else; a pipeline around them stays in order. */
static void across_shards(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	char a[32], b[32], b2[32];

	if (!c)
		return;
	key_on(&t->srv, 0, "x", 0, a, sizeof(a));
	key_on(&t->srv, t->srv.nshards - 1, "y", 0, b, sizeof(b));
	key_on(&t->srv, t->srv.nshards - 1, "z", 0, b2, sizeof(b2));
	/* one send: SET, RENAME across, GETs on both sides, in order */
	cl_cmd(c, "SET", a, "va", "EX", "100", NULL);
	cl_cmd(c, "GET", b, NULL);
	cl_cmd(c, "RENAME", a, b, NULL);
	cl_cmd(c, "GET", a, NULL);
	cl_cmd(c, "GET", b, NULL);
	cl_cmd(c, "TTL", b, NULL);
	EXPECT(c, "+OK\r\n");
	EXPECT(c, "$-1\r\n");
	EXPECT(c, "+OK\r\n");
	EXPECT(c, "$-1\r\n");
	EXPECT(c, "$2\r\nva\r\n");
	EXPECT_TTL(c, 100);
	cl_cmd(c, "SET", a, "new", NULL);
	cl_cmd(c, "RENAMENX", a, b, NULL);
	cl_cmd(c, "COPY", b, a, NULL);
	cl_cmd(c, "COPY", b, a, "REPLACE", NULL);
	cl_cmd(c, "GET", a, NULL);
	cl_cmd(c, "RENAMENX", b, b2, NULL);
	cl_cmd(c, "MGET", a, b, b2, NULL);
	EXPECT(c, "+OK\r\n");
	EXPECT(c, ":0\r\n");
	EXPECT(c, ":0\r\n");
	EXPECT(c, ":1\r\n");
	EXPECT(c, "$2\r\nva\r\n");
	EXPECT(c, ":1\r\n");
	EXPECT(c, "*3\r\n$2\r\nva\r\n$-1\r\n$2\r\nva\r\n");
	cl_cmd(c, "DBSIZE", NULL);
	EXPECT(c, ":2\r\n");
	cl_close(c);
}

Test(kv, rename_copy_across_shards, .timeout = 60)
{
	run_kv(2, NULL, across_shards);
}

#define SCAN_KEYS 3000

/* SCAN's guarantee: every key present for the whole scan comes back at
 * least once, however the tables grow and rehash meanwhile (another
 * client adds keys between the pages), on every shard; MATCH and TYPE
 * filter; the cursor ends at 0. */
static void scan_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port), *w = cl_open(t->port);
	static unsigned char seen[SCAN_KEYS];
	char k[32], cur[32] = "0";
	int pages = 0, extra = 0;

	if (!c || !w)
		return;
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < SCAN_KEYS; i++) {
		snprintf(k, sizeof(k), "s:%d", i);
		cl_cmd(c, "SET", k, "v", NULL);
	}
	for (int i = 0; i < SCAN_KEYS; i++)
		EXPECT(c, "+OK\r\n");
	do {
		const char *r, *p;
		int n;

		cl_cmd(c, "SCAN", cur, "COUNT", "50", "MATCH", "s:*", NULL);
		r = cl_reply(c);
		if (!r || strncmp(r, "*2\r\n$", 5)) {
			CHECK(!"SCAN's reply");
			break;
		}
		p = strchr(r + 4, '\n') + 1;
		snprintf(cur, sizeof(cur), "%.*s", (int)strcspn(p, "\r"), p);
		p = strchr(p, '\n') + 1;
		CHECK(*p == '*');
		n = atoi(p + 1);
		p = strchr(p, '\n') + 1;
		for (int i = 0; i < n; i++) {
			int len = atoi(p + 1), id;

			p = strchr(p, '\n') + 1;
			if (sscanf(p, "s:%d", &id) == 1 && id >= 0 && id < SCAN_KEYS)
				seen[id] = 1;
			else
				extra++;
			p += len + 2;
		}
		/* the other client grows the tables between pages */
		for (int i = 0; i < 200; i++) {
			snprintf(k, sizeof(k), "grow:%d:%d", pages, i);
			cl_cmd(w, "SET", k, "v", NULL);
		}
		for (int i = 0; i < 200; i++)
			EXPECT(w, "+OK\r\n");
		pages++;
	} while (strcmp(cur, "0") && pages < 100000);
	for (int i = 0; i < SCAN_KEYS; i++)
		if (!seen[i]) {
			char msg[64];

			snprintf(msg, sizeof(msg), "SCAN missed s:%d", i);
			th_fail(__FILE__, __LINE__, msg);
			break;
		}
	CHECK_EQ(extra, 0); /* MATCH kept the grow: keys out */
	/* TYPE: strings only here */
	cl_cmd(c, "SCAN", "0", "TYPE", "hash", "COUNT", "100000", NULL);
	EXPECT(c, t->srv.nshards == 1 ? "*2\r\n$1\r\n0\r\n*0\r\n" : "*2\r\n$1\r\n1\r\n*0\r\n");
	cl_close(c);
	cl_close(w);
}

Test(kv, scan_returns_every_key_while_tables_grow, .timeout = 120)
{
	run_kv(1, NULL, scan_body);
	run_kv(2, NULL, scan_body);
}

/* WATCH: a change by anyone to a watched key, on whatever shard, between
 * WATCH and EXEC aborts the EXEC (a null reply, nothing run); no change,
 * or UNWATCH, lets it run. */
static intptr_t watch_count(void *arg)
{
	return (intptr_t)((struct kv_shard *)arg)->nw;
}

static void watch_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port), *o = cl_open(t->port);

	if (!c || !o)
		return;
	for (unsigned sh = 0; sh < t->srv.nshards; sh++) {
		char k[32], k2[32];

		key_on(&t->srv, sh, "w", 0, k, sizeof(k));
		key_on(&t->srv, (sh + 1) % t->srv.nshards, "v", 0, k2, sizeof(k2));
		cl_cmd(c, "SET", k, "1", NULL);
		EXPECT(c, "+OK\r\n");
		/* changed by another client: aborted */
		cl_cmd(c, "WATCH", k, k2, NULL);
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "SET", k, "other", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "SET", k, "mine", NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*-1\r\n");
		cl_cmd(c, "GET", k, NULL);
		EXPECT(c, "$5\r\nother\r\n");
		/* not changed: runs */
		cl_cmd(c, "WATCH", k, NULL);
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "SET", k, "mine", NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*1\r\n+OK\r\n");
		/* the watch ended with the EXEC: a later change does not matter */
		cl_cmd(o, "SET", k, "x", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "GET", k, NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*1\r\n$1\r\nx\r\n");
		/* an expiry set by another aborts; so does a key that expires */
		cl_cmd(c, "WATCH", k, NULL);
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "PEXPIRE", k, "1", NULL);
		EXPECT(o, ":1\r\n");
		corio_sleep_ns(5000000);
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "GET", k, NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*-1\r\n");
		/* UNWATCH forgets */
		cl_cmd(c, "WATCH", k2, NULL);
		cl_cmd(c, "UNWATCH", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "SET", k2, "changed", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "DEL", k2, NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*1\r\n:1\r\n");
		/* FLUSHALL aborts; DISCARD forgets the watches */
		cl_cmd(c, "WATCH", k2, NULL);
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "FLUSHALL", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "PING", NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "+QUEUED\r\n");
		EXPECT(c, "*-1\r\n");
		cl_cmd(c, "HELLO", "3", NULL);
		cl_reply(c);
		cl_cmd(c, "WATCH", k, NULL);
		EXPECT(c, "+OK\r\n");
		cl_cmd(o, "SET", k, "y", NULL);
		EXPECT(o, "+OK\r\n");
		cl_cmd(c, "MULTI", NULL);
		cl_cmd(c, "EXEC", NULL);
		EXPECT(c, "+OK\r\n");
		EXPECT(c, "_\r\n"); /* RESP3's null */
		cl_cmd(c, "HELLO", "2", NULL);
		cl_reply(c);
	}
	/* a connection that leaves with watches leaves none behind */
	{
		struct cl *d = cl_open(t->port);

		cl_cmd(d, "WATCH", "a", "b", "c", NULL);
		EXPECT(d, "+OK\r\n");
		cl_close(d);
		for (int i = 0; i < 200; i++) {
			size_t nw = 0;

			/* read on the owning shard: the count is that shard's alone */
			for (unsigned sh = 0; sh < t->srv.nshards; sh++) {
				intptr_t n = 0;

				CHECK_EQ(corio_call(sh, watch_count, &t->srv.sh[sh], &n), 0);
				nw += (size_t)n;
			}
			if (!nw)
				break;
			corio_sleep_ns(1000000);
		}
	}
	cl_close(c);
	cl_close(o);
}

Test(kv, watch_aborts_exec_on_any_shard, .timeout = 60)
{
	run_kv(1, NULL, watch_body);
	run_kv(2, NULL, watch_body);
}

static const char *const server_script[] = {
	"~ TIME", "ROLE", "WAIT 0 0", "WAIT 1 1", "WAIT x 0", "WAIT 0 -1", "WAIT 0 x",
	"SLOWLOG GET", "SLOWLOG GET 5", "SLOWLOG LEN", "SLOWLOG RESET", "SLOWLOG GET x",
	"SLOWLOG GET -2", "SLOWLOG FOO", "SLOWLOG LEN x",
	"LATENCY LATEST", "LATENCY HISTORY command", "LATENCY RESET", "LATENCY FOO",
	"CLIENT NO-EVICT on", "CLIENT NO-EVICT off", "CLIENT NO-EVICT x",
	"CLIENT KILL 1.2.3.4:5", "CLIENT KILL ID 999", "CLIENT KILL FOO bar", "CLIENT KILL ID x",
	"CLIENT KILL ID 0", "CLIENT KILL SKIPME maybe", "CLIENT KILL TYPE pubsub",
	"CLIENT KILL TYPE foo", "CLIENT KILL USER nobody", "CLIENT LIST TYPE pubsub",
	"CLIENT LIST TYPE foo", "CLIENT LIST ID x", "CLIENT LIST FOO", "CLIENT FOO", "CLIENT KILL",
	"CLIENT SETNAME a\\sb", "CLIENT GETNAME",
	"! CLIENT NO-TOUCH on => +OK", "! CLIENT NO-TOUCH x => -ERR syntax error",
	NULL,
};

static void server_body(struct kv_test *t)
{
	DIFF(t, 2, server_script);
	DIFF(t, 3, server_script);
}

Test(kv, diff_time_role_wait_slowlog_latency_client, .timeout = 120)
{
	diff_test(server_body);
}

/* CLIENT LIST shows the connections of every shard, in Redis's line
 * format; CLIENT KILL ID ends one on another shard; CLIENT INFO is the
 * caller's line; NO-TOUCH keeps OBJECT IDLETIME growing. */
static void clients_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port), *d[6];
	long long ids[6];
	const char *r;
	int victim = -1, me;

	if (!c)
		return;
	me = cl_shard(c);
	for (int i = 0; i < 6; i++) {
		d[i] = cl_open(t->port);
		cl_cmd(d[i], "CLIENT", "ID", NULL);
		r = cl_reply(d[i]);
		ids[i] = r ? atoll(r + 1) : -1;
		if (victim < 0 && cl_shard(d[i]) != me)
			victim = i;
	}
	/* SO_REUSEPORT may put all six on our shard: try more for the last */
	for (int tries = 0; victim < 0 && t->srv.nshards > 1 && tries < 60; tries++) {
		cl_close(d[5]);
		d[5] = cl_open(t->port);
		cl_cmd(d[5], "CLIENT", "ID", NULL);
		r = cl_reply(d[5]);
		ids[5] = r ? atoll(r + 1) : -1;
		if (cl_shard(d[5]) != me)
			victim = 5;
	}
	cl_cmd(c, "CLIENT", "LIST", NULL);
	r = cl_reply(c);
	for (int i = 0; r && i < 6; i++) {
		char want[48];

		snprintf(want, sizeof(want), "id=%lld addr=127.0.0.1:", ids[i]);
		CHECK(strstr(r, want));
	}
	CHECK(r && strstr(r, " cmd=client|list user=default redir=-1 resp=2 shard="));
	CHECK(r && strstr(r, " cmd=client ")); /* the others' last: CLIENT INFO */
	cl_cmd(c, "CLIENT", "INFO", NULL);
	EXPECT_HAS(c, " cmd=client|info ");
	if (t->srv.nshards > 1)
		CHECK(victim >= 0);
	if (victim < 0)
		victim = 0;
	{
		char id[24];

		snprintf(id, sizeof(id), "%lld", ids[victim]);
		cl_cmd(c, "CLIENT", "KILL", "ID", id, NULL);
		EXPECT(c, ":1\r\n");
		CHECK(cl_closed(d[victim]));
		cl_cmd(c, "CLIENT", "KILL", "ID", id, NULL);
		EXPECT(c, ":0\r\n");
	}
	/* SKIPME no: the caller too, after its reply */
	cl_cmd(d[(victim + 1) % 6], "CLIENT", "KILL", "USER", "default", "SKIPME", "no", NULL);
	EXPECT(d[(victim + 1) % 6], ":6\r\n");
	CHECK(cl_closed(d[(victim + 1) % 6]));
	CHECK(cl_closed(c));
	for (int i = 0; i < 6; i++)
		cl_close(d[i]);
	cl_close(c);
	c = cl_open(t->port);
	cl_cmd(c, "SET", "idle", "v", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "CLIENT", "NO-TOUCH", "on", NULL);
	EXPECT(c, "+OK\r\n");
	corio_sleep_ns(2100000000ull);
	cl_cmd(c, "GET", "idle", NULL);
	EXPECT(c, "$1\r\nv\r\n");
	cl_cmd(c, "OBJECT", "IDLETIME", "idle", NULL);
	r = cl_reply(c);
	CHECK(r && atoll(r + 1) >= 1);
	cl_cmd(c, "CLIENT", "NO-TOUCH", "off", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "GET", "idle", NULL);
	EXPECT(c, "$1\r\nv\r\n");
	cl_cmd(c, "OBJECT", "IDLETIME", "idle", NULL);
	EXPECT(c, ":0\r\n");
	cl_close(c);
}

Test(kv, client_list_kill_across_shards, .timeout = 60)
{
	run_kv(2, NULL, clients_body);
}

/* ---- (d) hashes ---------------------------------------------------------------------- */

static const char *const hash_script[] = {
	"HSET h a 1 b 2", "HSET h a 3 c 4", "HGETALL h", "HGET h a", "HGET h nope", "HGET nokey a",
	"HMGET h a nope b", "HMGET nokey a b", "HKEYS h", "HVALS h", "HLEN h", "HLEN nokey",
	"HEXISTS h a", "HEXISTS h z", "HSTRLEN h a", "HSTRLEN h z", "HSETNX h a 9", "HSETNX h d 9",
	"HGET h d", "HMSET h e 5 f 6", "HMSET h e", "HSET h", "HSET h a", "HSET h a 1 b",
	"HSET h a 1 a 2", "HGET h a", "HDEL h a nope c", "HDEL h a", "HGETALL h", "HDEL nokey a",
	"HINCRBY h n 5", "HINCRBY h n -7", "HINCRBY h n x", "HSET h s str", "HINCRBY h s 1",
	"HSET h big 9223372036854775807", "HINCRBY h big 1", "HINCRBYFLOAT h fl 1.5",
	"HINCRBYFLOAT h fl 2.0e2", "HINCRBYFLOAT h s 1", "HINCRBYFLOAT h fl x", "HINCRBYFLOAT h fl inf",
	"HGETALL h", "TYPE h", "OBJECT ENCODING h", "HRANDFIELD nokey", "HRANDFIELD nokey 2",
	"HRANDFIELD h 0", "HRANDFIELD h x", "HRANDFIELD h 1 FOO", "HRANDFIELD h 1 WITHVALUES x",
	"HRANDFIELD h -9223372036854775808", "HRANDFIELD h -9223372036854775807 WITHVALUES",
	"HSCAN h 0", "HSCAN h 0 MATCH f*", "HSCAN h 0 COUNT 0", "HSCAN h x", "HSCAN h 0 COUNT",
	"HSCAN nokey 0", "HSCAN h 0 FOO 1",
	/* types */
	"SET str v", "HGET str a", "HSET str a 1", "HGETALL str", "HLEN str", "HDEL str a",
	"HINCRBY str a 1", "HRANDFIELD str", "HSCAN str 0", "GET h", "INCR h", "APPEND h x",
	"STRLEN h", "GETRANGE h 0 1", "MGET h str", "SET h v", "TYPE h", "HSET h a 1",
	/* expiry on the key, and the key goes with its last field */
	"EXPIRE h 100", "~ TTL h", "HSET h b 2", "~ TTL h", "HDEL h a b", "EXISTS h",
	/* renamed and copied with their fields */
	"HSET r f v g w", "RENAME r r2", "HGETALL r2", "COPY r2 r3", "HGETALL r3", "HSET r3 f x",
	"HGET r2 f",
	/* past the small encoding: a value over 64 bytes */
	"HSET L f 0123456789012345678901234567890123456789012345678901234567890123456789",
	"OBJECT ENCODING L", "HSTRLEN L f", "HSET L g 1", "HLEN L", "HDEL L f", "HGET L g",
	"HINCRBY L g 2", "COPY L L2", "HLEN L2", "HDEL L g", "EXISTS L", "EXISTS L2",
	NULL,
};

static void hash_body(struct kv_test *t)
{
	DIFF(t, 2, hash_script);
	DIFF(t, 3, hash_script);
}

Test(kv, diff_hashes, .timeout = 120)
{
	diff_test(hash_body);
}

/* A hash past 128 fields becomes a table: every field still there, HSCAN
 * walks it all (cursor until 0), HRANDFIELD's counts hold, and the memory
 * it holds is counted and given back when it goes. */
static void big_hash_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	static unsigned char seen[1000];
	char f[32], v[32], cur[32] = "0";
	long long before, after;
	const char *r;

	if (!c)
		return;
	before = info_num(c, "memory", "used_memory:");
	for (int i = 0; i < 1000; i++) {
		snprintf(f, sizeof(f), "f%d", i);
		snprintf(v, sizeof(v), "v%d", i);
		cl_cmd(c, "HSET", "big", f, v, NULL);
	}
	for (int i = 0; i < 1000; i++)
		EXPECT(c, ":1\r\n");
	cl_cmd(c, "OBJECT", "ENCODING", "big", NULL);
	EXPECT(c, "$9\r\nhashtable\r\n");
	cl_cmd(c, "HLEN", "big", NULL);
	EXPECT(c, ":1000\r\n");
	cl_cmd(c, "HGET", "big", "f777", NULL);
	EXPECT(c, "$4\r\nv777\r\n");
	cl_cmd(c, "HSET", "big", "f777", "x", "f1000", "y", NULL);
	EXPECT(c, ":1\r\n");
	cl_cmd(c, "HDEL", "big", "f1000", NULL);
	EXPECT(c, ":1\r\n");
	after = info_num(c, "memory", "used_memory:");
	CHECK(after - before > 1000 * 24);
	cl_cmd(c, "MEMORY", "USAGE", "big", NULL);
	r = cl_reply(c);
	CHECK(r && atoll(r + 1) > 1000 * 24);
	memset(seen, 0, sizeof(seen));
	do {
		const char *p;
		int n;

		cl_cmd(c, "HSCAN", "big", cur, "COUNT", "30", NULL);
		r = cl_reply(c);
		if (!r)
			break;
		p = strchr(r + 4, '\n') + 1;
		snprintf(cur, sizeof(cur), "%.*s", (int)strcspn(p, "\r"), p);
		p = strchr(p, '\n') + 1;
		n = atoi(p + 1);
		p = strchr(p, '\n') + 1;
		for (int i = 0; i < n; i++) {
			int len = atoi(p + 1), id;

			p = strchr(p, '\n') + 1;
			if (i % 2 == 0 && sscanf(p, "f%d", &id) == 1 && id >= 0 && id < 1000)
				seen[id] = 1;
			p += len + 2;
		}
	} while (strcmp(cur, "0"));
	for (int i = 0; i < 1000; i++)
		CHECK(seen[i]);
	cl_cmd(c, "HRANDFIELD", "big", "5", NULL);
	EXPECT_HAS(c, "*5\r\n");
	cl_cmd(c, "HRANDFIELD", "big", "-3000", NULL);
	EXPECT_HAS(c, "*3000\r\n");
	cl_cmd(c, "HRANDFIELD", "big", "2000", NULL);
	EXPECT_HAS(c, "*1000\r\n");
	cl_cmd(c, "HRANDFIELD", "big", "2", "WITHVALUES", NULL);
	EXPECT_HAS(c, "*4\r\n");
	/* a count whose reply the output limit cannot hold: refused, not built */
	cl_cmd(c, "HRANDFIELD", "big", "-9223372036854775807", NULL);
	EXPECT(c, "-ERR corio-kv: HRANDFIELD's count makes a reply over the output limit\r\n");
	cl_cmd(c, "SCAN", "0", "COUNT", "9223372036854775807", NULL); /* no overflow (UBSan) */
	EXPECT_HAS(c, "*2\r\n");
	cl_cmd(c, "DEL", "big", NULL);
	EXPECT(c, ":1\r\n");
	CHECK_EQ(info_num(c, "memory", "used_memory:"), before);
	cl_close(c);
}

Test(kv, hash_past_the_small_encoding, .timeout = 60)
{
	run_kv(1, NULL, big_hash_body);
	run_kv(2, NULL, big_hash_body);
}

/* ---- (e) INFO and CONFIG GET for dashboards ------------------------------------------ */

static const char *const config_script[] = {
	"CONFIG GET timeout", "CONFIG GET notify-keyspace-events", "CONFIG GET maxmemory-policy",
	"CONFIG GET maxmemory", "CONFIG GET appendonly", "CONFIG GET save", "CONFIG GET nosuch",
	"CONFIG GET appendfsync", "CONFIG GET requirepass",
	"CONFIG GET", "CONFIG GET TIMEOUT", "~ CONFIG GET timeout maxmemory-policy",
	"~ CONFIG GET maxmemory*", "CONFIG FOO", "CONFIG SET",
	NULL,
};

static void config_body(struct kv_test *t)
{
	DIFF(t, 2, config_script);
	DIFF(t, 3, config_script);
}

Test(kv, diff_config_get, .timeout = 120)
{
	diff_test(config_body);
}

/* The fields dashboards read are there, with values that move as they
 * should; sections persistence, replication, cpu and commandstats filled. */
static void info_body(struct kv_test *t)
{
	static const char *const fields[] = {
		"os:", "arch_bits:64", "blocked_clients:0", "maxclients:", "used_memory_peak:",
		"loading:0", "rdb_changes_since_last_save:", "rdb_last_save_time:",
		"rdb_last_bgsave_status:ok", "aof_enabled:0", "instantaneous_ops_per_sec:",
		"total_net_input_bytes:", "total_net_output_bytes:", "rejected_connections:0",
		"evicted_keys:0", "pubsub_channels:0", "role:master", "connected_slaves:0",
		"master_repl_offset:0", "used_cpu_sys:", "used_cpu_user:", "# Persistence",
		"# Replication", "# CPU",
	};
	struct cl *c = cl_open(t->port);
	uint64_t until;
	const char *r;
	long long ops = 0;

	if (!c)
		return;
	cl_cmd(c, "INFO", NULL);
	r = cl_reply(c);
	for (size_t i = 0; r && i < sizeof(fields) / sizeof(fields[0]); i++) {
		char want[64];

		snprintf(want, sizeof(want), "\n%s", fields[i]);
		if (!strstr(r, want))
			th_fail(__FILE__, __LINE__, fields[i]);
	}
	CHECK(r && !strstr(r, "# Commandstats")); /* not in the default set (Redis) */
	CHECK_EQ(info_num(c, "persistence", "rdb_changes_since_last_save:"), 0);
	for (int i = 0; i < 7; i++)
		cl_cmd(c, "SET", "k", "v", NULL);
	for (int i = 0; i < 7; i++)
		EXPECT(c, "+OK\r\n");
	CHECK_EQ(info_num(c, "persistence", "rdb_changes_since_last_save:"), 7);
	CHECK(info_num(c, "stats", "total_net_input_bytes:") > 7 * 20);
	CHECK(info_num(c, "stats", "total_net_output_bytes:") > 7 * 5);
	CHECK(info_num(c, "memory", "used_memory_peak:") >= info_num(c, "memory", "used_memory:"));
	cl_cmd(c, "INFO", "commandstats", NULL);
	EXPECT_HAS(c, "# Commandstats\r\n");
	CHECK(c->last && strstr(c->last, "cmdstat_set:calls=7,usec=0,"));
	CHECK(c->last && strstr(c->last, "cmdstat_info:calls="));
	/* busy for over a second: the last second's rate is not 0 */
	until = corio_now_ns() + 1300000000ull;
	while (corio_now_ns() < until) {
		for (int i = 0; i < 50; i++)
			cl_cmd(c, "PING", NULL);
		for (int i = 0; i < 50; i++)
			EXPECT(c, "+PONG\r\n");
	}
	ops = info_num(c, "stats", "instantaneous_ops_per_sec:");
	CHECK(ops > 0);
	cl_close(c);
}

Test(kv, info_fields_for_dashboards, .timeout = 60)
{
	run_kv(2, NULL, info_body);
}

/* ---- (f) the emulated cluster -------------------------------------------------------- */

static const char *const nocluster_script[] = {
	"CLUSTER INFO", "CLUSTER SLOTS", "CLUSTER KEYSLOT a", "READONLY", "READWRITE", "MGET a b",
	NULL,
};

static void nocluster_body(struct kv_test *t)
{
	DIFF(t, 2, nocluster_script);
	DIFF(t, 3, nocluster_script);
}

Test(kv, diff_cluster_disabled, .timeout = 120)
{
	diff_test(nocluster_body);
}

#define XSLOT "-CROSSSLOT Keys in request don't hash to the same slot"

/* Against a redis-server in cluster mode (no slots assigned: only what
 * does not need a slot is compared), and corio-kv's own answers. */
static const char *const cluster_script[] = {
	"CLUSTER KEYSLOT 123456789", "CLUSTER KEYSLOT foo", "CLUSTER KEYSLOT {user1000}.following",
	"CLUSTER KEYSLOT {user1000}.followers", "CLUSTER KEYSLOT foo{}{bar}", "CLUSTER KEYSLOT foo{{bar}}zap",
	"CLUSTER KEYSLOT foo{bar}{zap}", "CLUSTER KEYSLOT {", "CLUSTER KEYSLOT }{", "CLUSTER KEYSLOT \"\"",
	"CLUSTER KEYSLOT", "CLUSTER FOO", "CLUSTER COUNTKEYSINSLOT x", "CLUSTER COUNTKEYSINSLOT 20000",
	"CLUSTER COUNTKEYSINSLOT -1", "READONLY", "READWRITE",
	"! MGET a b => " XSLOT, "! MSET a 1 b 2 => " XSLOT, "! DEL a b => " XSLOT,
	"! EXISTS {a}1 {b}2 => " XSLOT, "! RENAME a b => " XSLOT, "! WATCH a b => " XSLOT,
	"! MSET {a}1 1 {a}2 2 => +OK", "! MGET {a}1 {a}2 => *2\r\n$1\r\n1\r\n$1\r\n2",
	"! RENAME {a}1 {a}3 => +OK", "! CLUSTER COUNTKEYSINSLOT 15495 => :2",
	"! MULTI => +OK", "! MGET a b => " XSLOT, "! EXEC => -EXECABORT Transaction discarded because "
	"of previous errors.",
	NULL,
};

static void cluster_body(struct kv_test *t)
{
	struct cl *c;
	char want[512], id[48];
	const char *r;

	DIFF(t, 2, cluster_script);
	DIFF(t, 3, cluster_script);
	c = cl_open(t->port);
	if (!c)
		return;
	cl_cmd(c, "CLUSTER", "MYID", NULL);
	r = cl_reply(c);
	CHECK(r && !strncmp(r, "$40\r\n", 5));
	snprintf(id, sizeof(id), "%.40s", r ? r + 5 : "");
	cl_cmd(c, "CLUSTER", "SLOTS", NULL);
	snprintf(want, sizeof(want), "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:%d\r\n"
		 "$40\r\n%s\r\n*0\r\n", t->port, id);
	EXPECT(c, want);
	cl_cmd(c, "CLUSTER", "NODES", NULL);
	snprintf(want, sizeof(want), "%s 127.0.0.1:%d@%d myself,master - 0 0 1 connected 0-16383\n",
		 id, t->port, t->port + 10000);
	EXPECT_HAS(c, want);
	cl_cmd(c, "CLUSTER", "INFO", NULL);
	EXPECT_HAS(c, "cluster_state:ok\r\ncluster_slots_assigned:16384\r\n");
	cl_cmd(c, "CLUSTER", "SHARDS", NULL);
	EXPECT_HAS(c, "$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n");
	cl_cmd(c, "INFO", "cluster", NULL);
	EXPECT_HAS(c, "cluster_enabled:1");
	cl_close(c);
}

static char kv_test_nodes[64];

Test(kv, diff_cluster_emulated, .timeout = 120)
{
	snprintf(kv_test_nodes, sizeof(kv_test_nodes), "/tmp/corio-kv-test-nodes-%d.conf", (int)getpid());
	ref_start("--cluster-enabled", "yes", "--cluster-config-file", kv_test_nodes, NULL);
	kv_test_cluster = 1;
	run_kv(1, NULL, cluster_body);
	run_kv(2, NULL, cluster_body);
	kv_test_cluster = 0;
	ref_stop();
	unlink(kv_test_nodes);
}

/* Cluster clients connect unchanged: redis-cli -c, and redis-py's
 * RedisCluster (when the system's python3 has redis). The server runs on
 * its own shards; the clients run from the test's thread. */
Test(kv, cluster_clients_connect, .timeout = 120)
{
	static struct kv_server srv;
	struct corio_config cfg = th_cfg(2);
	struct corio_rt *rt;
	char cmd[1024], out[4096];
	int before, port, st;

	if (system("command -v redis-cli >/dev/null 2>&1") != 0)
		cr_skip_test("redis-cli is not installed (apt-get install redis-tools)");
	before = th_fd_count();
	memset(&srv, 0, sizeof(srv));
	kv_limits_default(&srv.lim);
	srv.cluster = true;
	cfg.flags |= CORIO_F_NO_PIN;
	cr_assert_eq(kv_server_init(&srv, 2), 0);
	cr_assert_eq(corio_start(&cfg, kv_idle_entry, &srv, &rt), 0);
	while (atomic_load(&srv.listening) < 2 && !atomic_load(&srv.failed))
		usleep(1000);
	cr_assert(!atomic_load(&srv.failed));
	port = atomic_load(&srv.bound_port);
	snprintf(cmd, sizeof(cmd), "redis-cli -c -p %d set '{u}a' 1 && redis-cli -c -p %d get '{u}a' && "
		 "redis-cli -c -p %d mget '{u}a' '{u}b'", port, port, port);
	st = run_cmd(cmd, out, sizeof(out));
	cr_expect_eq(st, 0);
	cr_expect_str_eq(out, "OK\n1\n1\n\n");
	if (system("/usr/bin/python3 -c 'import redis.cluster' >/dev/null 2>&1") == 0) {
		snprintf(cmd, sizeof(cmd),
			 "/usr/bin/python3 -c 'import redis\n"
			 "rc = redis.cluster.RedisCluster(host=\"127.0.0.1\", port=%d)\n"
			 "rc.set(\"x\", \"1\"); rc.set(\"y\", \"2\"); rc.hset(\"h\", mapping={\"f\": \"v\"})\n"
			 "print(rc.get(\"x\"), rc.get(\"y\"), rc.hgetall(\"h\"), rc.mget_nonatomic(\"x\", \"y\"), "
			 "len(rc.get_nodes()))\n' 2>&1", port);
		st = run_cmd(cmd, out, sizeof(out));
		cr_expect_eq(st, 0, "%s", out);
		cr_expect_str_eq(out, "b'1' b'2' {b'f': b'v'} [b'1', b'2'] 1\n");
	}
	corio_stop(rt);
	cr_assert_eq(corio_wait(rt), 0);
	kv_server_free(&srv);
	cr_assert_eq(th_fd_count(), before, "the runtime left file descriptors open");
}

/* ---- (g) pub/sub --------------------------------------------------------------------- */

static const char *const pubsub_script[] = {
	"PUBLISH nochan m", "PUBSUB NUMSUB a", "PUBSUB NUMPAT", "PUBSUB CHANNELS", "PUBSUB FOO",
	"SUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "PUBSUB NUMSUB", "PUBLISH a",
	"2 SUBSCRIBE a b", "GET x", "PING", "PING hi", "SUBSCRIBE a", "PSUBSCRIBE p*",
	"~ PUBSUB CHANNELS", "PUBSUB CHANNELS a*", "PUBSUB NUMSUB a b c", "PUBSUB NUMPAT",
	"UNSUBSCRIBE a", "UNSUBSCRIBE", "PUNSUBSCRIBE", "UNSUBSCRIBE", "PUBSUB NUMPAT", "GET x",
	NULL,
};

static void pubsub_body(struct kv_test *t)
{
	DIFF(t, 2, pubsub_script);
	DIFF(t, 3, pubsub_script);
}

Test(kv, diff_pubsub, .timeout = 120)
{
	diff_test(pubsub_body);
}

/* PUBLISH reaches the subscribers of every shard (channel and pattern,
 * RESP2 and RESP3 push), answers how many, and a subscriber's replies and
 * pushes stay in order. */
static void publish_body(struct kv_test *t)
{
	struct cl *sub[40] = { 0 }, *p = cl_open(t->port);
	int on[2] = { -1, -1 }, n = 0, nsub = 0;
	char want[128];

	if (!p)
		return;
	/* until there is a subscriber on each shard (SO_REUSEPORT spreads them) */
	while (nsub < 40 && (on[0] < 0 || (t->srv.nshards > 1 && on[1] < 0))) {
		int sh;

		sub[nsub] = cl_open(t->port);
		sh = cl_shard(sub[nsub]);
		if (sh >= 0 && sh < 2 && on[sh] < 0)
			on[sh] = nsub;
		nsub++;
	}
	CHECK(on[0] >= 0 && (t->srv.nshards == 1 || on[1] >= 0));
	for (int s = 0; s < (int)t->srv.nshards; s++) {
		struct cl *c = sub[on[s]];

		if (s == 1) { /* the second in RESP3, with a pattern too */
			cl_cmd(c, "HELLO", "3", NULL);
			cl_reply(c);
			cl_cmd(c, "PSUBSCRIBE", "ne*", NULL);
			EXPECT(c, ">3\r\n$10\r\npsubscribe\r\n$3\r\nne*\r\n:1\r\n");
			n++;
		}
		cl_cmd(c, "SUBSCRIBE", "news", NULL);
		EXPECT(c, s == 1 ? ">3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:2\r\n"
				 : "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n");
		n++;
	}
	cl_cmd(p, "PUBLISH", "news", "hello", NULL);
	snprintf(want, sizeof(want), ":%d\r\n", n);
	EXPECT(p, want);
	EXPECT(sub[on[0]], "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n");
	if (t->srv.nshards > 1) {
		const char *a = cl_reply(sub[on[1]]), *b;
		char *first = a ? strdup(a) : NULL;

		b = cl_reply(sub[on[1]]);
		/* a pmessage and a message, in either order (as Redis: patterns after) */
		CHECK(first && b);
		if (first && b) {
			CHECK(strstr(first, "message\r\n") && strstr(b, "message\r\n"));
			CHECK(!strcmp(first, ">4\r\n$8\r\npmessage\r\n$3\r\nne*\r\n$4\r\nnews\r\n$5\r\nhello\r\n") ||
			      !strcmp(b, ">4\r\n$8\r\npmessage\r\n$3\r\nne*\r\n$4\r\nnews\r\n$5\r\nhello\r\n"));
		}
		free(first);
	}
	cl_cmd(p, "PUBSUB", "NUMSUB", "news", NULL);
	snprintf(want, sizeof(want), "*2\r\n$4\r\nnews\r\n:%u\r\n", t->srv.nshards);
	EXPECT(p, want);
	cl_cmd(p, "PUBSUB", "CHANNELS", NULL);
	EXPECT(p, "*1\r\n$4\r\nnews\r\n");
	cl_cmd(p, "INFO", "stats", NULL);
	EXPECT_HAS(p, "pubsub_channels:1\r\n");
	/* pipelined after SUBSCRIBE in one send: RESP2's subscribed state holds */
	{
		struct cl *q = cl_open(t->port);

		cl_cmd(q, "SUBSCRIBE", "other", NULL);
		cl_cmd(q, "GET", "x", NULL);
		cl_cmd(q, "UNSUBSCRIBE", NULL);
		cl_cmd(q, "GET", "x", NULL);
		EXPECT(q, "*3\r\n$9\r\nsubscribe\r\n$5\r\nother\r\n:1\r\n");
		EXPECT(q, "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
			  "QUIT / RESET are allowed in this context\r\n");
		EXPECT(q, "*3\r\n$11\r\nunsubscribe\r\n$5\r\nother\r\n:0\r\n");
		EXPECT(q, "$-1\r\n");
		cl_close(q);
	}
	/* a reply and the pushes after it, in order. The PING and the PUBLISH
	 * travel on two connections, so the server may read either first:
	 * publish only once CLIENT LIST shows the PING was run (its reply is
	 * then made, and the push must come after it). */
	cl_cmd(sub[on[0]], "PING", NULL);
	cl_flush(sub[on[0]]);
	for (int i = 0; i < 2000; i++) {
		const char *l;

		cl_cmd(p, "CLIENT", "LIST", NULL);
		l = cl_reply(p);
		if (!l || strcasestr(l, "cmd=ping "))
			break;
		usleep(1000);
	}
	cl_cmd(p, "PUBLISH", "news", "2", NULL);
	EXPECT(p, t->srv.nshards > 1 ? ":3\r\n" : ":1\r\n");
	EXPECT(sub[on[0]], "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
	EXPECT(sub[on[0]], "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$1\r\n2\r\n");
	for (int i = 0; i < nsub; i++)
		cl_close(sub[i]);
	cl_close(p);
}

Test(kv, publish_reaches_every_shard, .timeout = 60)
{
	run_kv(1, NULL, publish_body);
	run_kv(2, NULL, publish_body);
}

/* A subscriber that does not read is disconnected once its pending
 * pushes pass the pubsub limit (--output-limit / 8), and the publisher
 * never waits for it. */
static void slow_sub_body(struct kv_test *t)
{
	struct cl *s = cl_open(t->port), *p = cl_open(t->port);
	static char big[64 * 1024];
	uint64_t t0 = corio_now_ns();
	int i;

	if (!s || !p)
		return;
	memset(big, 'x', sizeof(big) - 1);
	cl_cmd(s, "SUBSCRIBE", "flood", NULL);
	EXPECT(s, "*3\r\n$9\r\nsubscribe\r\n$5\r\nflood\r\n:1\r\n");
	for (i = 0; i < 2000; i++) {
		const char *r;

		cl_cmd(p, "PUBLISH", "flood", big, NULL);
		r = cl_reply(p);
		if (!r || !strcmp(r, ":0\r\n"))
			break; /* gone */
	}
	CHECK(i < 2000);
	CHECK(corio_now_ns() - t0 < 20000000000ull);
	CHECK(info_num(p, "stats", "client_output_limit_disconnections:") == 1);
	cl_close(s);
	cl_close(p);
}

Test(kv, slow_subscriber_is_disconnected, .timeout = 60)
{
	struct kv_limits lim;

	kv_limits_default(&lim);
	lim.out_limit = 1 << 20; /* pubsub limit: 128 KiB */
	run_kv(2, &lim, slow_sub_body);
}

/* ---- (b) access control ------------------------------------------------------------ */

static const char *const auth_script[] = {
	"nosuch",
	"get",
	"get a",
	"ping",
	"MULTI",
	"EXEC",
	"AUTH",
	"AUTH a b c",
	"AUTH bad",
	"AUTH bob sec",
	"HELLO",
	"HELLO 3",
	"HELLO 3 AUTH default bad",
	"HELLO 2 AUTH bob sec SETNAME x",
	"CLIENT ID",
	"AUTH default sec",
	"SET a 1",
	"GET a",
	"MULTI",
	"AUTH sec",
	"GET a",
	"EXEC",
	"CONFIG SET requirepass \"\"",
	"AUTH sec",
	"AUTH x y",
	"AUTH default zzz",
	"CONFIG SET protected-mode no",
	"CONFIG SET foo bar",
	"CONFIG SET requirepass",
	"CONFIG GET requirepass",
	"CONFIG SET requirepass sec",
	"CONFIG GET requirepass",
	"CONFIG SET protected-mode maybe",
	"CONFIG SET protected-mode yes requirepass sec2",
	"CONFIG GET protected-mode",
	NULL,
};

/* A new connection after the password changed. */
static const char *const auth_after_script[] = {
	"GET a",
	"AUTH sec",
	"~ HELLO 3 AUTH default sec2",
	"GET a",
	"CONFIG SET requirepass sec",
	NULL,
};

static void auth_body(struct kv_test *t)
{
	struct cl *kv = cl_open(t->port), *ref = ref_open();

	if (kv && ref)
		diff_script_at(kv, ref, auth_script, __FILE__, __LINE__);
	cl_close(kv);
	cl_close(ref);
	kv = cl_open(t->port);
	ref = ref_open();
	if (kv && ref)
		diff_script_at(kv, ref, auth_after_script, __FILE__, __LINE__);
	cl_close(kv);
	cl_close(ref);
}

Test(kv, diff_auth_requirepass, .timeout = 120)
{
	ref_start("--requirepass", "sec", NULL);
	kv_test_pass = "sec";
	run_kv(1, NULL, auth_body);
	run_kv(2, NULL, auth_body);
	kv_test_pass = NULL;
	ref_stop();
}

/* CONFIG SET requirepass on one shard holds on every shard: connections
 * that land on each (SO_REUSEPORT spreads them) need the new password and
 * refuse the old; those already authenticated stay so. */
static void auth_all_shards(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	bool seen[2] = { false, false };

	if (!c)
		return;
	cl_cmd(c, "CONFIG", "SET", "requirepass", "n3w", NULL);
	EXPECT(c, "+OK\r\n");
	for (int i = 0; i < 40 && !(seen[0] && seen[t->srv.nshards - 1]); i++) {
		struct cl *d = cl_open(t->port);

		if (!d)
			break;
		cl_cmd(d, "GET", "k", NULL);
		EXPECT(d, "-NOAUTH Authentication required.\r\n");
		cl_cmd(d, "AUTH", "pw", NULL);
		EXPECT(d, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
		cl_cmd(d, "AUTH", "n3wx", NULL); /* a longer attempt that starts right */
		EXPECT(d, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
		cl_cmd(d, "AUTH", "n3", NULL);
		EXPECT(d, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
		cl_cmd(d, "AUTH", "n3w", NULL);
		EXPECT(d, "+OK\r\n");
		seen[cl_shard(d) == 1] = true;
		cl_close(d);
	}
	CHECK(seen[0] && seen[t->srv.nshards - 1]);
	cl_cmd(c, "GET", "k", NULL); /* authenticated before the change */
	EXPECT(c, "$-1\r\n");
	cl_close(c);
}

Test(kv, requirepass_set_on_one_shard_holds_on_all, .timeout = 60)
{
	run_kv(2, NULL, auth_all_shards);
}

/* The first IPv4 address of this machine that is not loopback, or 0. */
static int outside_addr(char *out, size_t n)
{
	struct ifaddrs *ifa, *i;
	int found = 0;

	if (getifaddrs(&ifa))
		return 0;
	for (i = ifa; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		if ((ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr) >> 24) == 127)
			continue;
		found = inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out,
				  (socklen_t)n) != NULL;
	}
	freeifaddrs(ifa);
	return found;
}

static char outside[INET_ADDRSTRLEN];

/* Protected mode: bound to every address with no password, a client from
 * another address gets Redis's -DENIED and the close; loopback is served;
 * once a password is set the outside client is served (and must AUTH). */
static void protected_body(struct kv_test *t)
{
	struct cl *local = cl_open(t->port), *far;
	char where[64];
	struct corio_sock *s;

	if (!local)
		return;
	snprintf(where, sizeof(where), "%s:%d", outside, t->port);
	CHECK_EQ(corio_tcp_connect(where, &s), 0);
	far = calloc(1, sizeof(*far));
	far->s = s;
	cl_reply(far);
	CHECK(far->last && !strncmp(far->last, "-DENIED Redis is running in protected mode", 42));
	CHECK(far->last && !strcmp(far->last, kv_denied_msg));
	CHECK(cl_closed(far));
	cl_close(far);
	cl_cmd(local, "PING", NULL);
	EXPECT(local, "+PONG\r\n");
	cl_cmd(local, "INFO", "stats", NULL);
	EXPECT_HAS(local, "rejected_connections:1\r\n");
	cl_cmd(local, "CONFIG", "SET", "requirepass", "pw", NULL);
	EXPECT(local, "+OK\r\n");
	CHECK_EQ(corio_tcp_connect(where, &s), 0);
	far = calloc(1, sizeof(*far));
	far->s = s;
	cl_cmd(far, "PING", NULL);
	EXPECT(far, "-NOAUTH Authentication required.\r\n");
	cl_cmd(far, "AUTH", "pw", NULL);
	EXPECT(far, "+OK\r\n");
	cl_close(far);
	/* protected-mode no: served without a password too */
	cl_cmd(local, "CONFIG", "SET", "requirepass", "", "protected-mode", "no", NULL);
	EXPECT(local, "+OK\r\n");
	CHECK_EQ(corio_tcp_connect(where, &s), 0);
	far = calloc(1, sizeof(*far));
	far->s = s;
	cl_cmd(far, "PING", NULL);
	EXPECT(far, "+PONG\r\n");
	cl_close(far);
	cl_close(local);
}

Test(kv, protected_mode_refuses_outside_clients, .timeout = 60)
{
	if (!outside_addr(outside, sizeof(outside)))
		cr_skip_test("no non-loopback IPv4 address to connect from");
	kv_test_host = "0.0.0.0";
	kv_test_protected = 1;
	run_kv(2, NULL, protected_body);
	kv_test_host = NULL;
	kv_test_protected = 0;
}

/* ---- real clients ------------------------------------------------------------------------ */

static void kv_idle_entry(void *arg)
{
	kv_shard_main(arg);
}

static int run_cmd(const char *cmd, char *out, size_t n)
{
	FILE *f = popen(cmd, "r");
	size_t got;

	cr_assert(f, "popen %s", cmd);
	got = fread(out, 1, n - 1, f);
	out[got] = 0;
	return pclose(f);
}

Test(kv, redis_cli_and_benchmark, .timeout = 120)
{
	static struct kv_server srv;
	struct corio_config cfg = th_cfg(2);
	struct corio_rt *rt;
	char cmd[512], out[4096];
	int before, port, st;

	if (system("command -v redis-cli >/dev/null 2>&1") != 0)
		cr_skip_test("redis-cli is not installed (apt-get install redis-tools)");
	before = th_fd_count();
	memset(&srv, 0, sizeof(srv));
	kv_limits_default(&srv.lim);
	cfg.flags |= CORIO_F_NO_PIN;
	cr_assert_eq(kv_server_init(&srv, 2), 0);
	cr_assert_eq(corio_start(&cfg, kv_idle_entry, &srv, &rt), 0);
	/* waiting for a condition, not for time to pass */
	while (atomic_load(&srv.listening) < 2 && !atomic_load(&srv.failed))
		usleep(1000);
	cr_assert(!atomic_load(&srv.failed));
	port = atomic_load(&srv.bound_port);

	snprintf(cmd, sizeof(cmd), "redis-cli -p %d set a 1 && redis-cli -p %d incr a && "
		 "redis-cli -p %d get a", port, port, port);
	st = run_cmd(cmd, out, sizeof(out));
	cr_assert_eq(st, 0, "%s: status %d", cmd, st);
	cr_assert_str_eq(out, "OK\n2\n2\n");
	snprintf(cmd, sizeof(cmd),
		 "printf 'mset x 1 y 2 z 3\\nmget x y z nope\\nexpire x 100\\nttl x\\ndbsize\\n"
		 "ping\\nnosuch\\n' | redis-cli -p %d", port);
	st = run_cmd(cmd, out, sizeof(out));
	cr_assert_eq(st, 0);
	cr_assert_str_eq(out, "OK\n1\n2\n3\n\n1\n100\n4\nPONG\n"
			      "ERR unknown command 'nosuch', with args beginning with: \n\n", "got: %s", out);
	snprintf(cmd, sizeof(cmd), "redis-cli -p %d info keyspace", port);
	st = run_cmd(cmd, out, sizeof(out));
	cr_assert(st == 0 && strstr(out, "db0:keys=4,expires=1"), "got: %s", out);

	/* redis-py's pubsub (when the system's python3 has redis) */
	if (system("/usr/bin/python3 -c 'import redis' >/dev/null 2>&1") == 0) {
		snprintf(cmd, sizeof(cmd),
			 "/usr/bin/python3 -c 'import redis\n"
			 "r = redis.Redis(port=%d); p = r.pubsub(); p.subscribe(\"ch\")\n"
			 "print(p.get_message(timeout=2)[\"type\"], r.publish(\"ch\", \"hi\"))\n"
			 "m = p.get_message(timeout=2); print(m[\"type\"], m[\"data\"])\n' 2>&1", port);
		st = run_cmd(cmd, out, sizeof(out));
		cr_assert_eq(st, 0, "%s", out);
		cr_assert_str_eq(out, "subscribe 1\nmessage b'hi'\n");
	}
	/* node-redis's subscribe, which used to throw an uncaught "unknown
	 * command" and end the Node process (runs when node resolves the redis
	 * module, e.g. NODE_PATH=/path/node_modules with redis@4 installed) */
	if (system("node -e \"require('redis')\" >/dev/null 2>&1") == 0) {
		snprintf(cmd, sizeof(cmd),
			 "node -e \"const { createClient } = require('redis'); (async () => {"
			 "const c = createClient({ url: 'redis://127.0.0.1:%d' }); await c.connect();"
			 "const s = c.duplicate(); await s.connect(); let got = null;"
			 "await s.subscribe('ch', (m, ch) => { got = ch + ':' + m; });"
			 "const n = await c.publish('ch', 'hi');"
			 "await new Promise(r => setTimeout(r, 200));"
			 "console.log(n, got); await s.quit(); await c.quit();"
			 "})().catch(e => { console.log('throw', e.message); process.exit(3); });\" 2>&1",
			 port);
		st = run_cmd(cmd, out, sizeof(out));
		cr_assert_eq(st, 0, "%s", out);
		cr_assert_str_eq(out, "1 ch:hi\n");
	}
	if (system("command -v redis-benchmark >/dev/null 2>&1") == 0) {
		snprintf(cmd, sizeof(cmd),
			 "redis-benchmark -p %d -n 2000 -c 8 -P 4 -t set,get,incr,mset -q 2>&1", port);
		st = run_cmd(cmd, out, sizeof(out));
		cr_assert_eq(st, 0, "%s: %s", cmd, out);
		cr_assert(strstr(out, "SET: ") && strstr(out, "GET: ") && strstr(out, "INCR: ") &&
			  strstr(out, "MSET (10 keys): "), "got: %s", out);
	}
	corio_stop(rt);
	cr_assert_eq(corio_wait(rt), 0);
	kv_server_free(&srv);
	cr_assert_eq(th_fd_count(), before, "the runtime left file descriptors open");
}

/* kv_str2ll is Redis's string2ll: what it accepts and refuses, on both
 * sides of the 18-digit fast path. */
Test(kv, str2ll_accepts_what_redis_accepts)
{
	static const struct { const char *s; int ok; long long v; } c[] = {
		{ "0", 1, 0 }, { "7", 1, 7 }, { "-7", 1, -7 }, { "100", 1, 100 },
		{ "999999999999999999", 1, 999999999999999999LL },
		{ "-999999999999999999", 1, -999999999999999999LL },
		{ "9223372036854775807", 1, 9223372036854775807LL },
		{ "-9223372036854775808", 1, (-9223372036854775807LL - 1) },
		{ "9223372036854775808", 0, 0 }, { "-9223372036854775809", 0, 0 },
		{ "18446744073709551616", 0, 0 }, { "", 0, 0 }, { "-", 0, 0 }, { "-0", 0, 0 },
		{ "01", 0, 0 }, { " 1", 0, 0 }, { "1 ", 0, 0 }, { "1a", 0, 0 }, { "+1", 0, 0 },
		{ "12345678901234567x", 0, 0 }, { "123456789012345678901", 0, 0 },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		long long v = 12345;
		int ok = kv_str2ll(c[i].s, strlen(c[i].s), &v);

		cr_assert_eq(ok, c[i].ok, "kv_str2ll(\"%s\") = %d", c[i].s, ok);
		if (ok)
			cr_assert_eq(v, c[i].v, "kv_str2ll(\"%s\") gave %lld", c[i].s, v);
	}
}
