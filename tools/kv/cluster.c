/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/cluster.c - the emulated cluster (--cluster-mode emulated, as
 * Dragonfly's): corio-kv answers the cluster handshake as one node that
 * owns all 16384 slots, so cluster clients (redis-cli -c, redis-py's
 * RedisCluster, ioredis's Cluster) connect unchanged; keys still spread
 * over the shards by corio-kv's own hash, which clients never see. Slots
 * are Redis's: CRC16 (XMODEM) of the key, or of its hash tag (what is
 * between the first '{' and the next '}', when not empty), mod 16384.
 * Multi-key commands whose keys are in different slots get -CROSSSLOT, as
 * a cluster would answer. Without the mode every CLUSTER command, READONLY
 * and READWRITE get Redis's "cluster support disabled".
 */
#include "kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_SLOTS 16384

static uint16_t kv_crc16(const char *p, size_t n)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < n; i++) {
		crc ^= (uint16_t)((uint8_t)p[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
	}
	return crc;
}

unsigned kv_keyslot(const char *p, size_t n)
{
	const char *open = memchr(p, '{', n), *close;

	if (open) {
		size_t rest = n - (size_t)(open - p) - 1;

		close = memchr(open + 1, '}', rest);
		if (close && close > open + 1)
			return kv_crc16(open + 1, (size_t)(close - open - 1)) & (KV_SLOTS - 1);
	}
	return kv_crc16(p, n) & (KV_SLOTS - 1);
}

/* CROSSSLOT: do the keys of this command (its spec's positions) hash to
 * more than one slot? Only asked in cluster mode. */
bool kv_crossslot(const struct kv_spec *sp, const struct kv_arg *a, uint32_t argc)
{
	int last = sp->last < 0 ? (int)argc + sp->last : sp->last;
	unsigned slot = KV_SLOTS;

	if (sp->first <= 0 || last <= sp->first)
		return false;
	for (int i = sp->first; i <= last && i < (int)argc; i += sp->step) {
		unsigned s = kv_keyslot(a[i].p, a[i].n);

		if (slot != KV_SLOTS && s != slot)
			return true;
		slot = s;
	}
	return false;
}

/* This node's id: 40 hex digits, from the server's seed. */
static void kv_node_id(const struct kv_server *srv, char id[41])
{
	uint64_t x = srv->seed ^ 0x636f72696f6b76ull;

	for (int i = 0; i < 40; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		id[i] = "0123456789abcdef"[(x >> 59) & 15];
	}
	id[40] = 0;
}

/* The address clients reach this node at: the one the client connected to. */
static void kv_node_ip(const struct kv_conn *c, char *ip, size_t n)
{
	const char *colon = strrchr(c->laddr, ':');
	size_t len = colon ? (size_t)(colon - c->laddr) : strlen(c->laddr);

	if (len && c->laddr[0] == '[') { /* [v6]:port */
		len -= 2;
		snprintf(ip, n, "%.*s", (int)len, c->laddr + 1);
	} else {
		snprintf(ip, n, "%.*s", (int)len, c->laddr);
	}
	if (!ip[0])
		snprintf(ip, n, "127.0.0.1");
}

struct kv_slotcount {
	struct kv_server *srv;
	unsigned slot;
};

static intptr_t kv_countslot_fn(void *arg)
{
	struct kv_slotcount *q = arg;
	struct kv_shard *sh = &q->srv->sh[corio_shard_id()];
	int64_t now = kv_now_ms();
	intptr_t n = 0;

	for (int i = 0; i < 2; i++)
		for (size_t b = 0; sh->t[i].b && b <= sh->t[i].mask; b++)
			for (struct kv_entry *e = sh->t[i].b[b]; e; e = e->next)
				n += !(e->expire && e->expire <= now) &&
				     kv_keyslot(e->data, e->klen) == q->slot;
	return n;
}

void kv_reply_cluster(struct kv_conn *c, const struct kv_cmd *cmd, struct kv_buf *o)
{
	const struct kv_arg *a = &c->av.v[cmd->arg0];
	struct kv_server *srv = c->srv;
	int port = atomic_load(&srv->bound_port);
	char id[41], ip[64], line[512];
	bool r3 = cmd->resp3;

	if (!srv->cluster) {
		kv_err(o, "ERR This instance has cluster support disabled");
		return;
	}
	if (cmd->kind == C_READONLY) {
		KV_LIT(o, "+OK\r\n");
		return;
	}
	kv_node_id(srv, id);
	kv_node_ip(c, ip, sizeof(ip));
	if (kv_is(&a[1], "info") && cmd->argc == 2) {
		snprintf(line, sizeof(line),
			 "cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\n"
			 "cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:1\r\n"
			 "cluster_size:1\r\ncluster_current_epoch:1\r\ncluster_my_epoch:1\r\n"
			 "cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n"
			 "total_cluster_links_buffer_limit_exceeded:0\r\n");
		kv_verbatim(o, line, strlen(line), r3);
	} else if (kv_is(&a[1], "myid") && cmd->argc == 2) {
		kv_bulkstr(o, id);
	} else if (kv_is(&a[1], "nodes") && cmd->argc == 2) {
		snprintf(line, sizeof(line), "%s %s:%d@%d myself,master - 0 0 1 connected 0-16383\n", id,
			 ip, port, port + 10000);
		kv_verbatim(o, line, strlen(line), r3);
	} else if (kv_is(&a[1], "slots") && cmd->argc == 2) {
		KV_LIT(o, "*1\r\n*3\r\n:0\r\n:16383\r\n");
		kv_num(o, '*', 4);
		kv_bulkstr(o, ip);
		kv_num(o, ':', port);
		kv_bulkstr(o, id);
		kv_num(o, r3 ? '%' : '*', 0);
	} else if (kv_is(&a[1], "shards") && cmd->argc == 2) {
		char m = r3 ? '%' : '*';
		int f = r3 ? 1 : 2;

		kv_num(o, '*', 1);
		kv_num(o, m, 2 * f);
		kv_bulkstr(o, "slots");
		KV_LIT(o, "*2\r\n:0\r\n:16383\r\n");
		kv_bulkstr(o, "nodes");
		kv_num(o, '*', 1);
		kv_num(o, m, 7 * f);
		kv_bulkstr(o, "id");
		kv_bulkstr(o, id);
		kv_bulkstr(o, "port");
		kv_num(o, ':', port);
		kv_bulkstr(o, "ip");
		kv_bulkstr(o, ip);
		kv_bulkstr(o, "endpoint");
		kv_bulkstr(o, ip);
		kv_bulkstr(o, "role");
		kv_bulkstr(o, "master");
		kv_bulkstr(o, "replication-offset");
		kv_num(o, ':', 0);
		kv_bulkstr(o, "health");
		kv_bulkstr(o, "online");
	} else if (kv_is(&a[1], "keyslot") && cmd->argc == 3) {
		kv_num(o, ':', kv_keyslot(a[2].p, a[2].n));
	} else if (kv_is(&a[1], "countkeysinslot") && cmd->argc == 3) {
		struct kv_slotcount q = { srv, 0 };
		intptr_t *res = calloc(srv->nshards, sizeof(*res));
		long long slot, n = 0;

		if (!kv_str2ll(a[2].p, a[2].n, &slot) || slot < 0 || slot >= KV_SLOTS) {
			kv_err(o, kv_str2ll(a[2].p, a[2].n, &slot) ? "ERR Invalid slot" :
				  "ERR value is not an integer or out of range");
			free(res);
			return;
		}
		q.slot = (unsigned)slot;
		if (!res || corio_gather(kv_countslot_fn, &q, res)) {
			kv_err(o, "ERR corio-kv: a shard did not answer");
		} else {
			for (unsigned i = 0; i < srv->nshards; i++)
				n += res[i];
			kv_num(o, ':', n);
		}
		free(res);
	} else {
		kv_reply_badsub(c, cmd, o);
	}
}
