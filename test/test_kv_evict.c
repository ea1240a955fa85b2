/* SPDX-License-Identifier: MIT */
/*
 * test/test_kv_evict.c - corio-kv's eviction (tools/kv/evict.c): each
 * maxmemory-policy under a write load that exceeds maxmemory, on two
 * shards (each holding half the limit), set at run time with CONFIG SET:
 * memory stays at the limit, writes are not refused (noeviction's are),
 * evicted_keys counts, the volatile policies take only keys with an
 * expiry (the soonest first for volatile-ttl), LRU keeps the keys read
 * since the others were written, LFU the keys read often; OBJECT FREQ and
 * IDLETIME answer by the policy.
 */
#include "kv_helpers.h"

#define VAL_LEN 200
#define LIMIT (2 * 512 * 1024) /* 512 KiB a shard: about 2,000 keys of 200 bytes each, 4,000 in all */

static const char *policy; /* the policy the body sets */

/* SET prefix:from .. prefix:from+n-1 (pipelined), with an expiry when ttl
 * > 0 (ttl + i seconds: later keys live longer). The replies that were
 * not +OK. */
static int set_many(struct cl *c, const char *prefix, int from, int n, int ttl)
{
	char k[48], v[VAL_LEN + 1], ex[24];
	int bad = 0;

	memset(v, 'v', VAL_LEN);
	v[VAL_LEN] = 0;
	for (int i = from; i < from + n; i += 200) {
		int m = i + 200 < from + n ? 200 : from + n - i;

		for (int j = i; j < i + m; j++) {
			snprintf(k, sizeof(k), "%s:%d", prefix, j);
			if (ttl > 0) {
				snprintf(ex, sizeof(ex), "%d", ttl + j);
				cl_cmd(c, "SET", k, v, "EX", ex, NULL);
			} else {
				cl_cmd(c, "SET", k, v, NULL);
			}
		}
		for (int j = 0; j < m; j++) {
			const char *r = cl_reply(c);

			bad += !r || strcmp(r, "+OK\r\n");
		}
	}
	return bad;
}

/* How many of prefix:from .. from+n-1 exist. */
static int count_many(struct cl *c, const char *prefix, int from, int n)
{
	char k[48];
	int have = 0;

	for (int i = from; i < from + n; i += 200) {
		int m = i + 200 < from + n ? 200 : from + n - i;

		for (int j = i; j < i + m; j++) {
			snprintf(k, sizeof(k), "%s:%d", prefix, j);
			cl_cmd(c, "EXISTS", k, NULL);
		}
		for (int j = 0; j < m; j++) {
			const char *r = cl_reply(c);

			have += r && !strcmp(r, ":1\r\n");
		}
	}
	return have;
}

/* Read prefix:from .. from+n-1 times times (pipelined). */
static void read_many(struct cl *c, const char *prefix, int from, int n, int times)
{
	char k[48];

	for (int t = 0; t < times; t++) {
		for (int j = from; j < from + n; j++) {
			snprintf(k, sizeof(k), "%s:%d", prefix, j);
			cl_cmd(c, "GET", k, NULL);
		}
		for (int j = 0; j < n; j++)
			cl_reply(c);
	}
}

static void set_policy(struct cl *c, const char *p)
{
	char lim[24];

	snprintf(lim, sizeof(lim), "%d", LIMIT);
	cl_cmd(c, "CONFIG", "SET", "maxmemory-policy", p, "maxmemory", lim, "maxmemory-samples", "5",
	       NULL);
	EXPECT(c, "+OK\r\n");
}

/* Wait (2.5 s at most) until key's shard's clock has passed a second since
 * the key was written, so keys touched after it are younger (LRU's clock
 * is in seconds, and each shard ticks its own). */
static void next_second(struct cl *c, const char *key)
{
	for (int i = 0; i < 250; i++) {
		const char *r;

		cl_cmd(c, "OBJECT", "IDLETIME", key, NULL);
		r = cl_reply(c);
		if (r && r[0] == ':' && atoi(r + 1) >= 1)
			return;
		corio_sleep_ns(10000000);
	}
	CHECK(!"the shard clock did not move in 2.5 s");
}

static void under_limit(struct cl *c)
{
	long long used = info_num(c, "memory", "used_memory:");

	/* a write may take a shard one value over its share */
	CHECK(used > 0 && used <= LIMIT + 2 * 4096);
}

static void evict_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);
	int have, bad;

	set_policy(c, policy);
	if (!strcmp(policy, "allkeys-lru")) {
		/* old keys, then (a second later) a working set read again, then
		 * new writes: the working set stays */
		CHECK_EQ(set_many(c, "old", 0, 3500, 0), 0);
		/* each shard ticks its own clock: wait for both */
		for (unsigned sh = 0; sh < t->srv.nshards; sh++) {
			char k[32];

			for (int i = 0;; i++) {
				snprintf(k, sizeof(k), "old:%d", i);
				if (kv_owner(&t->srv, kv_hash(t->srv.seed, k, strlen(k))) == sh)
					break;
			}
			next_second(c, k);
		}
		CHECK_EQ(set_many(c, "hot", 0, 300, 0), 0);
		read_many(c, "hot", 0, 300, 1);
		CHECK_EQ(set_many(c, "new", 0, 2000, 0), 0);
		CHECK_EQ(count_many(c, "hot", 0, 300), 300);
		CHECK(count_many(c, "old", 0, 3500) < 3500 - 1000);
		CHECK_EQ(count_many(c, "new", 0, 2000), 2000);
	} else if (!strcmp(policy, "allkeys-lfu")) {
		/* keys read 50 times outlive keys written once */
		CHECK_EQ(set_many(c, "hot", 0, 300, 0), 0);
		read_many(c, "hot", 0, 300, 50);
		cl_cmd(c, "OBJECT", "FREQ", "hot:1", NULL);
		{
			const char *r = cl_reply(c);

			CHECK(r && r[0] == ':' && atoi(r + 1) > KV_LFU_INIT);
		}
		CHECK_EQ(set_many(c, "cold", 0, 6000, 0), 0);
		CHECK(count_many(c, "hot", 0, 300) >= 297);
		CHECK(count_many(c, "cold", 0, 6000) < 6000 - 1000);
		cl_cmd(c, "OBJECT", "IDLETIME", "hot:1", NULL);
		EXPECT_HAS(c, "-ERR An LFU maxmemory policy is selected, idle time not tracked.");
	} else if (!strcmp(policy, "volatile-ttl")) {
		/* persistent keys stay; the keys that expire soonest go first */
		CHECK_EQ(set_many(c, "keep", 0, 1000, 0), 0);
		CHECK_EQ(set_many(c, "ttl", 0, 3000, 1000), 0);
		CHECK_EQ(set_many(c, "more", 0, 1500, 100000), 0);
		CHECK_EQ(count_many(c, "keep", 0, 1000), 1000);
		have = count_many(c, "ttl", 0, 1000);
		CHECK(have < count_many(c, "ttl", 2000, 1000)); /* earlier deadlines went first */
		CHECK(have < 500);
	} else if (!strncmp(policy, "volatile-", 9)) {
		/* only keys with an expiry go; when none is left, writes are refused */
		CHECK_EQ(set_many(c, "keep", 0, 1500, 0), 0);
		CHECK_EQ(set_many(c, "vol", 0, 2000, 1000), 0);
		CHECK_EQ(set_many(c, "more", 0, 1500, 1000), 0);
		CHECK_EQ(count_many(c, "keep", 0, 1500), 1500);
		CHECK(count_many(c, "vol", 0, 2000) < 2000 - 500);
		bad = set_many(c, "plain", 0, 3000, 0);
		CHECK(bad > 0); /* no key with an expiry left: -OOM */
		CHECK_EQ(count_many(c, "keep", 0, 1500), 1500);
	} else if (!strcmp(policy, "allkeys-random")) {
		CHECK_EQ(set_many(c, "a", 0, 8000, 0), 0);
		have = count_many(c, "a", 0, 8000);
		CHECK(have > 1000 && have < 6000);
	} else { /* noeviction */
		bad = set_many(c, "a", 0, 8000, 0);
		CHECK(bad > 1000);
		CHECK_EQ(info_num(c, "stats", "evicted_keys:"), 0);
		CHECK(info_num(c, "stats", "oom_refused:") > 0);
		cl_cmd(c, "OBJECT", "FREQ", "a:1", NULL);
		EXPECT_HAS(c, "-ERR An LFU maxmemory policy is not selected");
		cl_close(c);
		return;
	}
	under_limit(c);
	CHECK(info_num(c, "stats", "evicted_keys:") > 0);
	cl_cmd(c, "CONFIG", "GET", "maxmemory-policy", NULL);
	EXPECT_HAS(c, policy);
	cl_close(c);
}

static void run_policy(const char *p)
{
	policy = p;
	run_kv(2, NULL, evict_body);
}

Test(kv_evict, noeviction_refuses, .timeout = 60) { run_policy("noeviction"); }
Test(kv_evict, allkeys_lru_keeps_the_working_set, .timeout = 60) { run_policy("allkeys-lru"); }
Test(kv_evict, volatile_lru_takes_only_expiring_keys, .timeout = 60) { run_policy("volatile-lru"); }
Test(kv_evict, allkeys_lfu_keeps_keys_read_often, .timeout = 60) { run_policy("allkeys-lfu"); }
Test(kv_evict, volatile_lfu_takes_only_expiring_keys, .timeout = 60) { run_policy("volatile-lfu"); }
Test(kv_evict, volatile_ttl_takes_the_soonest_first, .timeout = 60) { run_policy("volatile-ttl"); }
Test(kv_evict, allkeys_random_stays_under_the_limit, .timeout = 60) { run_policy("allkeys-random"); }
Test(kv_evict, volatile_random_takes_only_expiring_keys, .timeout = 60) { run_policy("volatile-random"); }

static void config_body(struct kv_test *t)
{
	struct cl *c = cl_open(t->port);

	cl_cmd(c, "CONFIG", "SET", "maxmemory-policy", "most-recent", NULL);
	EXPECT_HAS(c, "-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy')");
	cl_cmd(c, "CONFIG", "SET", "maxmemory", "12x", NULL);
	EXPECT_HAS(c, "-ERR CONFIG SET failed (possibly related to argument 'maxmemory')");
	cl_cmd(c, "CONFIG", "SET", "maxmemory-samples", "0", NULL);
	EXPECT_HAS(c, "-ERR CONFIG SET failed (possibly related to argument 'maxmemory-samples')");
	cl_cmd(c, "CONFIG", "SET", "maxmemory", "2mb", "maxmemory-samples", "10", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "CONFIG", "GET", "maxmemory", NULL);
	EXPECT(c, "*2\r\n$9\r\nmaxmemory\r\n$7\r\n2097152\r\n");
	cl_cmd(c, "CONFIG", "GET", "maxmemory-samples", NULL);
	EXPECT(c, "*2\r\n$17\r\nmaxmemory-samples\r\n$2\r\n10\r\n");
	cl_cmd(c, "CONFIG", "SET", "maxmemory", "1gb", NULL);
	EXPECT(c, "+OK\r\n");
	cl_cmd(c, "CONFIG", "GET", "maxmemory", NULL);
	EXPECT(c, "*2\r\n$9\r\nmaxmemory\r\n$10\r\n1073741824\r\n");
	cl_cmd(c, "INFO", "memory", NULL);
	EXPECT_HAS(c, "maxmemory_policy:noeviction\r\n");
	cl_close(c);
}

Test(kv_evict, config_set_checks_and_applies, .timeout = 60)
{
	run_kv(1, NULL, config_body);
}
