/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/kv.h - corio-kv's internal header: what crosses its units.
 *
 * Design (shared nothing, like Seastar's memcached and Dragonfly):
 *  - Each shard owns the keys whose hash maps to it (a seeded 64-bit hash;
 *    the high half picks the shard, the low half the bucket). Its table,
 *    expiry heap, memory count and counters are touched by its thread only.
 *  - Every shard listens on the same port (CORIO_LISTEN_REUSEPORT); a
 *    connection is a fiber on the shard that accepted it.
 *  - A connection receives into its own query buffer (corio_recv: the
 *    kernel writes there directly) and parses every complete command in it
 *    in place: arguments are (pointer, length) pairs into that buffer.
 *  - The commands of one receive form a batch. Each command becomes one or
 *    more ops, one per key (MGET/MSET/DEL/EXISTS fan out per key) or one per
 *    shard (DBSIZE, FLUSHALL). Ops owned by other shards run there first,
 *    one corio_call per shard (corio_gather when several shards are
 *    involved), each writing its replies into that shard's reply buffer of
 *    the connection. Then the connection walks the batch in request order,
 *    running its own shard's ops right there into the output buffer and
 *    copying the remote replies, so replies leave in request order. Each
 *    shard runs a batch's ops in request order, so a pipeline sees its own
 *    writes. The output of a batch goes out with one send (or in
 *    parts of half the output limit, when larger).
 *  - Expiry: an absolute CLOCK_MONOTONIC deadline in ms per key; checked
 *    lazily on every access, and an active sweep: a min-heap of expiring
 *    keys per shard and one corio_timer armed at its earliest deadline,
 *    which wakes the shard's sweeper fiber (class kv-background, store.c):
 *    it deletes at most KV_SWEEP_BUDGET keys per loop turn while more are
 *    due, so a mass expiry never stalls the loop and takes only the
 *    class's share of a busy shard.
 *  - The table rehashes incrementally (Redis's scheme): a few buckets move
 *    per operation, never the whole table at once.
 *  - Limits: a bulk longer than proto-max-bulk-len, a multi-bulk count over
 *    max-multibulk, a command larger than the query-buffer limit, or
 *    malformed RESP get "-ERR Protocol error: ..." and the connection is
 *    closed (replies to the commands before it are sent first). The output
 *    limit bounds the replies a connection holds: they are sent at half of
 *    it, mid-batch, the fiber waiting while the client does not read (see
 *    kv_remote_budget()); a client that reads is never closed. With
 *    --maxmemory, writes are refused with -OOM once a shard uses more than
 *    its share (maxmemory / shards) and its policy is noeviction (or it
 *    found nothing to evict); otherwise it evicts (evict.c).
 *  - MULTI copies the commands after it into a queue; EXEC makes them a
 *    batch of their own, replied to as one array.
 *
 * Not atomic across shards: MSET, FLUSHALL and EXEC apply per shard
 * (another client may see part of an MSET); single-key commands are
 * atomic, and each shard runs its part of an EXEC back to back while the
 * replies stay under the output budgets.
 *
 * The units, in the order a request meets them:
 *	resp.[ch]   limits and the RESP parser (no I/O)
 *	out.[ch]    growable output buffers and the RESP replies
 *	store.[ch]  a shard's keyspace: the table, the expiry heap and sweep
 *	conn.c      connections: receive, parse a batch, run it, send; the
 *	            listeners and the server's setup
 *	plan.c      planning: a parsed command becomes ops
 *	batch.c     a batch: the remote ops, then the replies in order
 *	table.c     the command table: dispatch by name, and COMMAND
 *	cmd.c       the ops run on the key's shard
 *	keys.c      the string and key commands that are one op (GETEX, APPEND, ...)
 *	reply.c     replies made on the connection's shard (INFO, HELLO, ...)
 *	auth.c      requirepass, AUTH and protected mode
 *	across.c    RENAME, COPY, MSETNX, SCAN, KEYS, RANDOMKEY, WATCH: step by step
 *	hash.c      hashes
 *	server.c    CLIENT, TIME, ROLE, WAIT, SLOWLOG, LATENCY
 *	cluster.c   the emulated cluster: CLUSTER, slots, CROSSSLOT
 *	pubsub.c    SUBSCRIBE, PUBLISH across shards, PUBSUB
 *	rdb.[ch]    the RDB format: CRC64, LZF, listpack, ziplist, records (no I/O)
 *	save.c      snapshots without fork (copy-on-write of entries), loading,
 *	            SAVE, BGSAVE, LASTSAVE, SHUTDOWN, save points
 *	evict.c     eviction under maxmemory: the policies, sampling, the pool, LFU
 *	main.c      the program: options, signals, the runtime
 *
 * test/test_kv_*.c link every unit but main.c and drives kv_shard_main()
 * over 127.0.0.1; test/fuzz/fuzz_resp.c fuzzes resp_parse() (resp.c, out.c).
 */
#ifndef CORIO_KV_KV_H
#define CORIO_KV_KV_H

#include <corio.h>

#include <pthread.h>

#include "out.h"
#include "resp.h"
#include "store.h"

#define KV_VERSION "7.0.0" /* the Redis version whose replies we follow */
#define KV_STREAM_MAX ((size_t)1 << 30) /* the stream's largest max_frame */
#define KV_BIG_BUF (1024 * 1024)  /* buffers above this shrink when idle */
#define KV_OUT_DEFER (64 * 1024)  /* replies held back while more input is buffered */
#define KV_GATHER_MIN 4096        /* the least gathered for an incomplete command */
#define KV_BATCH_CMDS 256         /* commands per batch */
#define KV_BATCH_OPS 4096         /* ops per batch (one command may exceed it) */
#define KV_NONE UINT32_MAX
#define KV_NAME_MAX 64            /* CLIENT SETNAME: bytes, with the NUL */

/* ---- the commands ------------------------------------------------------------- */

enum kv_kind {
	C_UNKNOWN, C_ARITY, C_ERR, /* replies made from the command alone */
	C_PING, C_ECHO, C_GET, C_SET, C_DEL, C_EXISTS, C_INCR, C_MGET, C_MSET, C_EXPIRE,
	C_TTL, C_PERSIST, C_DBSIZE, C_FLUSHALL, C_INFO, C_CONFIG, C_COMMAND, C_CLIENT,
	C_SELECT, C_QUIT, C_HELLO, C_MULTI, C_EXEC, C_DISCARD, C_QUEUED,
	C_NOTSERVED, /* a family corio-kv does not serve (lists, ...): one clear error */
	C_AUTH, C_BADSUB, /* unknown subcommand: the reply names it */
	C_SETEX, C_GETDEL, C_GETEX, C_APPEND, C_STRLEN, C_GETRANGE, C_SETRANGE, C_INCRBYFLOAT,
	C_EXPIRETIME, C_TYPE, C_OBJECT, C_MEMORY,
	C_RENAME, C_COPY, C_MSETNX, C_RANDOMKEY, C_SCAN, C_KEYS, C_WATCH, C_UNWATCH, /* across.c */
	C_EXECNULL, /* EXEC of a transaction a watched key's change aborted */
	C_TIME, C_ROLE, C_WAIT, C_SLOWLOG, C_LATENCY, /* server.c */
	C_HSET, C_HSETNX, C_HGET, C_HMGET, C_HGETALL, C_HKEYS, C_HVALS, C_HDEL, C_HEXISTS, C_HLEN,
	C_HSTRLEN, C_HINCRBY, C_HINCRBYFLOAT, C_HRANDFIELD, C_HSCAN, /* hash.c */
	C_CLUSTER, C_READONLY, /* cluster.c */
	C_SAVE, C_BGSAVE, C_LASTSAVE, C_SHUTDOWN, /* save.c */
	C_SUBSCRIBE, C_UNSUBSCRIBE, C_PUBLISH, C_PUBSUB, C_PSBLOCKED, /* pubsub.c */
};

/* set / expire flags */
#define F_NX 0x1u
#define F_XX 0x2u
#define F_GET 0x4u
#define F_KEEPTTL 0x8u
#define F_GT 0x10u
#define F_LT 0x20u
#define F_PX 0x40u  /* TTL: milliseconds */
#define F_EXP 0x80u /* SET: an expiry was given (in n, ms) */
#define F_NEG 0x100u /* DECRBY: negate the argument */
#define F_EXAT 0x200u /* SET: n is a Unix time in ms (EXAT, PXAT) */
#define F_AUTHBAD 0x400u /* HELLO: its AUTH was refused when planned */
#define F_NOAUTH 0x800u  /* HELLO: sent before authenticating, without AUTH */
#define F_PERSIST 0x1000u /* GETEX PERSIST */
#define F_INTREPLY 0x2000u /* SETNX: :1 or :0 rather than OK or nil */
#define F_SERIAL 0x4000u /* its batch runs serially (across.c) */
#define F_OKREPLY 0x8000u /* HMSET: +OK rather than the count */
#define F_COUNT 0x10000u  /* HRANDFIELD: a count was given (in n) */
#define F_WITHVALUES 0x20000u
#define F_MATCH 0x40000u  /* HSCAN: MATCH's pattern is argument n2 */
#define F_PATTERN 0x80000u /* PSUBSCRIBE, PUNSUBSCRIBE */

struct kv_spec {
	const char *name;
	int arity; /* Redis's: > 0 exactly, < 0 at least -arity */
	enum kv_kind kind;
	long long n;  /* INCR's step, ... */
	unsigned flags;
	const char *cflags; /* COMMAND's flags */
	int first, last, step;
	const char *group;  /* COMMAND DOCS's group; C_NOTSERVED: the family */
	const char *tips;   /* COMMAND INFO's tips (Redis's), or NULL */
	const char *ks;     /* its key spec's flags, NULL: RO access / RW update */
	const char *acl;    /* its ACL categories, NULL: from the flags and group */
};

/* The index of the command table by name (table.c): a quarter full at
 * most, so a lookup is one hash of the name and about one compare. */
#define KV_CMDTAB 1024
#define KV_NAME_LONGEST 16 /* "zremrangebyscore" */
struct kv_slot {
	const struct kv_spec *sp; /* NULL: empty */
	uint64_t key[2];          /* the name, lower case, in two words (zero-padded) */
	uint16_t len;             /* the name's */
	uint16_t idx;             /* its row in the served table (INFO commandstats);
				     kv_nspecs() for a family not served */
};
struct kv_cmdtab {
	struct kv_slot slot[KV_CMDTAB];
};

int kv_cmdtab_build(struct kv_cmdtab *t);
const struct kv_spec *kv_spec_at(size_t i);
size_t kv_spec_index(const struct kv_spec *sp); /* kv_nspecs() for one not served */
const struct kv_slot *kv_find_cmd(const struct kv_cmdtab *t, const struct kv_arg *a);
const struct kv_spec *kv_find_spec(const struct kv_cmdtab *t, const struct kv_arg *a);
bool kv_is(const struct kv_arg *a, const char *word);
bool kv_subcommand_known(const char *name, const struct kv_arg *sub);



/* ---- the server ------------------------------------------------------------------ */

/* Persistence (save.c). The configuration (dir, dbfilename, save points)
 * is written by CONFIG SET on any shard and read when a save starts: it is
 * the one thing corio-kv guards with a lock, held only to copy it. */
#define KV_SAVE_POINTS 16
struct kv_persist {
	pthread_mutex_t lock;     /* dir, dbfilename, points, npoints */
	char dir[1024];
	char dbfilename[256];
	struct { int64_t secs, changes; } points[KV_SAVE_POINTS];
	int npoints;
	bool load_partial;        /* --load-partial yes: keep what a bad file held before the error */
	_Atomic int64_t lastsave; /* Unix s: the last successful save (the start before any) */
	_Atomic int64_t last_try; /* Unix s: the last save started */
	_Atomic int in_progress;  /* a save runs (SAVE or BGSAVE) */
	_Atomic int bg;           /* ... and it is a BGSAVE */
	_Atomic int last_ok;      /* the last save succeeded */
	_Atomic uint64_t dirty_saved; /* the changes the last save holds */
	_Atomic int64_t last_ms;  /* how long the last save took */
	_Atomic uint64_t saves;   /* successful saves since start (INFO rdb_saves) */
	_Atomic int shutdown;     /* 1: stop now; 2: save first (SIGTERM with save points) */
	_Atomic int scheduled;    /* BGSAVE SCHEDULE came while a save ran: one after it */
	_Atomic int stop;         /* the server should stop (SHUTDOWN, or the save above ended) */
	uint64_t seq;             /* temp file names (shard 0) */
	struct corio_fiber *saver; /* shard 0's fiber for the save points */
};

struct kv_server {
	struct kv_limits lim;
	unsigned nshards;
	uint64_t seed;
	const char *host;         /* "127.0.0.1" */
	int port;                 /* 0: pick one (shard 0 binds, the others join) */
	struct kv_shard *sh;      /* [nshards], each touched by its shard only */
	struct kv_cmdtab cmds;    /* built by kv_server_init(), then read-only */
	uint64_t start_ns;
	int64_t start_unix;       /* s: rdb_last_save_time (nothing is ever saved) */
	_Atomic uint64_t mem_peak; /* used_memory's peak, sampled */
	const char *requirepass;  /* the password at start (NULL: none) */
	_Atomic int protected_mode; /* refuse non-loopback clients while no password */
	bool cluster;             /* --cluster-mode emulated (cluster.c) */
	struct kv_persist persist; /* save.c */
	_Atomic int policy;       /* enum kv_policy (evict.c) */
	_Atomic uint64_t maxmemory; /* bytes, all shards (CONFIG SET changes it) */
	_Atomic int samples;      /* maxmemory-samples */
	_Atomic int bound_port;
	_Atomic unsigned listening;
	_Atomic int failed;
};

static inline unsigned kv_owner(const struct kv_server *srv, uint64_t h)
{
	return (unsigned)(((h >> 32) * srv->nshards) >> 32);
}


/* One command of a batch. */
struct kv_cmd {
	enum kv_kind kind;
	unsigned flags;
	const struct kv_spec *spec;
	uint32_t arg0, argc; /* its arguments: batch argv[arg0 .. arg0 + argc) */
	uint32_t op0, nops;  /* its ops */
	long long n, n2;     /* INCR step, expiry in ms, GETRANGE's ends, ... */
	uint32_t vidx;       /* SET: argv index of the value; HSCAN: its COUNT */
	const char *err;     /* C_ERR: the reply, without "-" and CRLF */
	bool resp3;          /* reply in RESP3 (the protocol when it was planned) */
};

/* An op: the part of a command that one shard runs. */
enum kv_op_kind { OP_GET, OP_SET, OP_MSET1, OP_DEL, OP_EXISTS, OP_INCR, OP_EXPIRE, OP_TTL,
		  OP_PERSIST, OP_DBSIZE, OP_FLUSH, OP_KEY /* keys.c, by the command's kind */,
		  OP_HASH /* hash.c */ };

struct kv_op {
	uint8_t kind;
	uint8_t ran;    /* remote: its shard has run it (reply or v is there) */
	uint16_t shard;
	uint32_t cmd;   /* its command */
	uint32_t key;   /* argv index of its key (MSET: then its value) */
	uint32_t next;  /* next op of the same shard in this batch, KV_NONE */
	uint64_t hash;
	size_t roff, rlen; /* remote: its reply in the shard's reply buffer */
	long long v;       /* DEL/EXISTS/DBSIZE: count; MSET: 1 when refused (OOM) */
};

/* What the connection keeps per shard for a batch. */
struct kv_remote {
	uint32_t head, tail; /* its ops not run yet, KV_NONE: none */
	struct kv_buf out;   /* the replies that shard wrote */
};

struct kv_conn {
	struct kv_conn *prev, *next; /* the shard's connections (server.c) */
	struct kv_server *srv;
	struct kv_shard *sh;
	struct corio_sock *s;  /* until the fiber makes the stream of it */
	struct corio_stream *st; /* reads in place; writes c->out (kv_send) */
	uint64_t id;
	struct kv_buf out;
	struct kv_argv av;
	struct kv_cmd *cmds;
	size_t ncmds, cmdcap;
	struct kv_op *ops;
	size_t nops, opcap;
	struct kv_remote *rem; /* [nshards] */
	char name[KV_NAME_MAX];
	uint8_t resp;          /* 2 or 3: the protocol of the commands planned next */
	bool authed;           /* may run commands (no password, or AUTH took it) */
	bool no_touch;         /* CLIENT NO-TOUCH on: reads leave the access time */
	bool no_evict;         /* CLIENT NO-EVICT on (nothing is evicted anyway) */
	bool serial;           /* this batch runs serially (a command of across.c) */
	bool batch_end;        /* the batch ends after the command planned last */
	uint32_t nwatch;       /* keys WATCHed (registered on their shards) */
	bool listed;           /* in its shard's list */
	bool killed;           /* CLIENT KILL ended it (its fiber may not have seen it yet) */
	int fd;
	uint16_t last_clock;   /* the shard's clock at its last command (idle=) */
	uint64_t created_ns;
	const struct kv_spec *last; /* its last command (cmd=) */
	char addr[64], laddr[64];
	struct kv_ps *ps;      /* subscribed (pubsub.c), else NULL */
	bool busy;             /* between reading a batch and sending its replies */
	bool in_multi;         /* after MULTI: commands are queued, not run */
	bool multi_dirty;      /* a queued command was refused: EXEC aborts */
	bool exec;             /* this batch is an EXEC: one array of replies */
	struct kv_buf mq;      /* MULTI's queue: (argc, (len, bytes)...) per command */
	uint32_t mq_cmds;      /* commands queued */
	bool closing;          /* QUIT or a protocol error: send, then close */
};

extern const char kv_oom_msg[];
extern const char kv_wrongtype_msg[];
extern const char kv_noauth_msg[];
extern const char kv_wrongpass_msg[];
extern const char kv_denied_msg[];

/* auth.c: requirepass, AUTH, protected mode. */
const char *kv_auth_check(struct kv_shard *sh, const struct kv_arg *user, const struct kv_arg *pass);
void kv_auth_set(struct kv_auth *a, const char *p, size_t n);
int kv_auth_set_all(struct kv_server *srv, const char *p, size_t n);
bool kv_protected_refuses(struct kv_server *srv, struct kv_shard *sh, struct corio_sock *s);

#define KV_PLAN_EXEC 1 /* kv_plan(): EXEC of a transaction; nothing was planned */

/* cmd.c: an op on its key's shard (sh), its reply (if any) to o. */
void kv_run_op(struct kv_shard *sh, struct kv_conn *c, struct kv_op *op, struct kv_buf *o);
bool kv_oom(struct kv_shard *sh);
/* keys.c: the OP_KEY commands, on the key's entry e (NULL: none) at link l. */
void kv_run_key(struct kv_shard *sh, struct kv_conn *c, struct kv_op *op, struct kv_entry *e,
		struct kv_entry **l, struct kv_buf *o);
size_t kv_format_ld(char *buf, size_t n, long double v);
bool kv_parse_ld(const char *p, size_t n, long double *out);
/* hash.c: the OP_HASH commands, likewise. */
void kv_run_hash(struct kv_shard *sh, struct kv_conn *c, struct kv_op *op, struct kv_entry *e,
		 struct kv_entry **l, struct kv_buf *o);
/* table.c: COMMAND, and the error of an out-of-scope family. */
void kv_reply_command(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);
void kv_reply_notserved(const struct kv_cmd *cmd, struct kv_buf *o);

/* across.c: commands that step from shard to shard; WATCH. */
void kv_reply_across(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);
bool kv_unwatch(struct kv_conn *c);

/* server.c: CLIENT, TIME, ROLE, WAIT, SLOWLOG, LATENCY; the shard's connections. */
void kv_reply_client(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);
void kv_reply_server(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);
void kv_conn_register(struct kv_conn *c, int fd);
void kv_conn_unregister(struct kv_conn *c);
const char *kv_name_check(const struct kv_arg *name);
void kv_set_name(struct kv_conn *c, const struct kv_arg *name);
void kv_reply_badsub(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);

/* pubsub.c: publish/subscribe across shards. */
void kv_reply_ps(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);
bool kv_ps_subscribed(const struct kv_conn *c);
void kv_ps_end(struct kv_conn *c);
int kv_ps_lock(struct kv_conn *c);
void kv_ps_unlock(struct kv_conn *c);
void kv_ps_idle(struct kv_conn *c);
uint64_t kv_pubsub_count(struct kv_server *srv, bool patterns);

/* cluster.c: the emulated cluster. */
unsigned kv_keyslot(const char *p, size_t n);
bool kv_crossslot(const struct kv_spec *sp, const struct kv_arg *a, uint32_t argc);
void kv_reply_cluster(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);

/* plan.c: a parsed command becomes ops. */
int kv_plan(struct kv_conn *c, uint32_t arg0, uint32_t argc);
int kv_plan_exec(struct kv_conn *c);
void kv_multi_reset(struct kv_conn *c);

/* reply.c: replies made on the connection's shard. */
int kv_hello(struct kv_conn *c, const struct kv_cmd *cmd, unsigned *authst, char *err, size_t n);
void kv_reply_unknown(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);
void kv_reply_local(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);
void kv_err_sanitized(struct kv_buf *o, const char *msg);
bool kv_glob(const char *p, size_t pn, const char *s, size_t sn, bool nocase);

/* save.c: SAVE, BGSAVE, LASTSAVE, SHUTDOWN; the snapshot; loading; save points. */
void kv_reply_save(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o);
int kv_persist_init(struct kv_persist *p);
int kv_save_points_parse(struct kv_persist *p, const char *s, size_t n);
size_t kv_save_points_format(struct kv_persist *p, char *out, size_t n);
int kv_rdb_load(struct kv_server *srv, struct kv_shard *sh);
void kv_saver_start(struct kv_server *srv);
void kv_saver_stop(struct kv_server *srv);

/* evict.c: maxmemory policies. */
extern const char *const kv_policy_names[KV_NPOLICIES];
int kv_policy_parse(const char *p, size_t n);
bool kv_evict(struct kv_shard *sh, uint64_t max);
void kv_make_room(struct kv_shard *sh);
unsigned kv_lfu_get(const struct kv_shard *sh, const struct kv_entry *e);
void kv_lfu_touch(struct kv_shard *sh, struct kv_entry *e);

static inline bool kv_policy_lfu(int policy)
{
	return policy == KV_ALLKEYS_LFU || policy == KV_VOLATILE_LFU;
}

/* batch.c: run a planned batch and write its replies to c->out. */
int kv_run_batch(struct kv_conn *c);
/* conn.c: send c->out through the connection's stream; bytes or -errno. */
ssize_t kv_send(struct kv_conn *c);

/* conn.c: a shard's listener and connections; the server's setup. */
void kv_shard_main(struct kv_server *srv);
int kv_server_init(struct kv_server *srv, unsigned nshards);
void kv_server_free(struct kv_server *srv);

#endif
