/* SPDX-License-Identifier: MIT */
/*
 * tools/kv/auth.c - access control: requirepass, AUTH, HELLO's AUTH, and
 * Redis's protected mode.
 *
 * The password is the server's, but each shard keeps its own copy
 * (kv_shard.auth), read by that shard's connections only: CONFIG SET
 * requirepass writes every copy through corio_gather (each shard writes
 * its own, on its thread), so no lock and no torn read. Connections
 * authenticated before a change stay so (Redis does the same for
 * requirepass); new ones need the new password.
 *
 * Passwords are compared in constant time: the time depends on the
 * length of the attempt (the caller knows it), never on where the attempt
 * and the password first differ, or on the password's length.
 */
#include "kv.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

const char kv_noauth_msg[] = "NOAUTH Authentication required.";
const char kv_wrongpass_msg[] = "WRONGPASS invalid username-password pair or user is disabled.";

/* 1 when the attempt p[0..n) is the shard's password: every byte of the
 * (zero-padded) password buffer is looked at, whatever the attempt. */
static bool kv_pass_eq(const struct kv_auth *a, const char *p, size_t n)
{
	volatile unsigned char d = (unsigned char)(n != a->len) | (unsigned char)(n > KV_PASS_MAX);

	for (size_t i = 0; i < KV_PASS_MAX; i++)
		d |= (unsigned char)((i < n ? (unsigned char)p[i] : 0) ^ (unsigned char)a->pass[i]);
	return d == 0;
}

/* Does user/pass (user NULL: AUTH's one-argument form) log in as the
 * default user? NULL when it does, else the error reply (no "-"). */
const char *kv_auth_check(struct kv_shard *sh, const struct kv_arg *user, const struct kv_arg *pass)
{
	if (user && !kv_is(user, "default"))
		return kv_wrongpass_msg; /* the only user */
	if (!sh->auth.set) {
		if (!user) /* Redis's warning: the default user has no password */
			return "ERR AUTH <password> called without any password configured for the "
			       "default user. Are you sure your configuration is correct?";
		return NULL; /* "nopass": any password */
	}
	return kv_pass_eq(&sh->auth, pass->p, pass->n) ? NULL : kv_wrongpass_msg;
}

/* Set this shard's copy of the password (len 0: none). */
void kv_auth_set(struct kv_auth *a, const char *p, size_t n)
{
	memset(a->pass, 0, sizeof(a->pass));
	memcpy(a->pass, p, n);
	a->len = (uint32_t)n;
	a->set = n > 0;
}

struct kv_pass_msg {
	struct kv_server *srv;
	const char *p;
	size_t n;
};

static intptr_t kv_pass_fn(void *arg)
{
	struct kv_pass_msg *m = arg;

	kv_auth_set(&m->srv->sh[corio_shard_id()].auth, m->p, m->n);
	return 0;
}

/* CONFIG SET requirepass: every shard's copy, each on its own thread (the
 * caller's fiber waits; p stays valid until then). 0 or -errno. */
int kv_auth_set_all(struct kv_server *srv, const char *p, size_t n)
{
	struct kv_pass_msg m = { srv, p, n };

	if (n > KV_PASS_MAX)
		return -E2BIG;
	return corio_gather(kv_pass_fn, &m, NULL);
}

/* Protected mode (Redis's): with no password set, only clients on the
 * loopback interface are served. True when the client of s may not be. */
bool kv_protected_refuses(struct kv_server *srv, struct kv_shard *sh, struct corio_sock *s)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (!atomic_load_explicit(&srv->protected_mode, memory_order_relaxed) || sh->auth.set)
		return false;
	if (getpeername(corio_sock_fd(s), (struct sockaddr *)&ss, &len))
		return false; /* gone already: the read will say so */
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;

		return (ntohl(in->sin_addr.s_addr) >> 24) != 127;
	}
	if (ss.ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)&ss)->sin6_addr;

		if (IN6_IS_ADDR_LOOPBACK(a))
			return false;
		return !(IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false; /* a Unix socket is local */
}

const char kv_denied_msg[] =
	"-DENIED Redis is running in protected mode because protected mode is enabled and no "
	"password is set for the default user. In this mode connections are only accepted from "
	"the loopback interface. If you want to connect from external computers to Redis you may "
	"adopt one of the following solutions: 1) Just disable protected mode sending the command "
	"'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from "
	"the same host the server is running, however MAKE SURE Redis is not publicly accessible "
	"from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) "
	"Alternatively you can just disable the protected mode by editing the Redis configuration "
	"file, and setting the protected mode option to 'no', and then restarting the server. 3) "
	"If you started the server manually just for testing, restart it with the "
	"'--protected-mode no' option. 4) Setup a an authentication password for the default "
	"user. NOTE: You only need to do one of the above things in order for the server to start "
	"accepting connections from the outside.\r\n";
