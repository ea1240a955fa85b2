/* SPDX-License-Identifier: MIT */
/*
 * net/addr.c - "host:port" parsing and formatting. Numeric addresses only:
 * a name lookup would block the shard's thread (getaddrinfo is synchronous).
 */
#include "net/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

static int parse_port(const char *p, const char *all, uint16_t *out)
{
	unsigned long v = 0;

	if (!*p)
		return corio__error(-EINVAL, "address \"%s\": missing port after ':'", all);
	for (const char *c = p; *c; c++) {
		if (*c < '0' || *c > '9')
			return corio__error(-EINVAL, "address \"%s\": port \"%s\" is not a number",
					    all, p);
		v = v * 10 + (unsigned long)(*c - '0');
		if (v > 65535)
			return corio__error(-EINVAL, "address \"%s\": port %s is above 65535", all,
					    p);
	}
	*out = (uint16_t)v;
	return 0;
}

/*
 * A dotted quad of len bytes at s, as inet_pton(AF_INET) reads it (glibc's
 * inet_pton4: four decimal parts of at most 255, no leading zero, nothing
 * else): 1 and *out (network order), or 0. Written out because it runs on
 * every corio_tcp_connect to a numeric address, where inet_pton's copy
 * and checks cost about 200 instructions.
 */
int corio__ipv4_parse(const char *s, size_t len, struct in_addr *out)
{
	uint32_t a = 0, part = 0;
	unsigned parts = 0;
	bool digit = false;

	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (c >= '0' && c <= '9') {
			if (digit && part == 0)
				return 0; /* a leading zero */
			part = part * 10 + (uint32_t)(c - '0');
			if (part > 255)
				return 0;
			if (!digit) {
				if (++parts > 4)
					return 0;
				digit = true;
			}
		} else if (c == '.' && digit && parts < 4) {
			a = a << 8 | part;
			part = 0;
			digit = false;
		} else {
			return 0;
		}
	}
	if (parts < 4 || !digit)
		return 0;
	out->s_addr = htonl(a << 8 | part);
	return 1;
}

int corio_addr_parse(const char *hp, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *colon, *port;
	size_t hlen;
	uint16_t pnum;
	int ret;

	if (!hp || !ss || !len)
		return corio__error(-EINVAL, "corio_addr_parse: NULL argument");
	memset(ss, 0, sizeof(*ss));
	if (hp[0] == '[') {
		const char *end = strchr(hp, ']');

		if (!end)
			return corio__error(-EINVAL, "address \"%s\": missing ']'", hp);
		if (end[1] != ':')
			return corio__error(-EINVAL, "address \"%s\": expected ':port' after ']'", hp);
		hlen = (size_t)(end - hp - 1);
		if (hlen >= sizeof(host))
			return corio__error(-EINVAL, "address \"%s\": IPv6 address too long", hp);
		memcpy(host, hp + 1, hlen);
		host[hlen] = 0;
		port = end + 2;
		ret = parse_port(port, hp, &pnum);
		if (ret)
			return ret;
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

		if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
			return corio__error(-EINVAL, "address \"%s\": \"%s\" is not an IPv6 address",
					    hp, host);
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(pnum);
		*len = sizeof(*a6);
		return 0;
	}
	colon = strrchr(hp, ':');
	if (!colon)
		return corio__error(-EINVAL, "address \"%s\": expected host:port", hp);
	if (memchr(hp, ':', (size_t)(colon - hp)))
		return corio__error(-EINVAL,
				    "address \"%s\": an IPv6 address needs brackets: [addr]:port",
				    hp);
	hlen = (size_t)(colon - hp);
	if (hlen >= sizeof(host))
		return corio__error(-EINVAL, "address \"%s\": host part too long", hp);
	memcpy(host, hp, hlen);
	host[hlen] = 0;
	ret = parse_port(colon + 1, hp, &pnum);
	if (ret)
		return ret;
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;

	a4->sin_family = AF_INET;
	a4->sin_port = htons(pnum);
	*len = sizeof(*a4);
	if (!hlen || !strcmp(host, "*")) {
		a4->sin_addr.s_addr = htonl(INADDR_ANY);
		return 0;
	}
	if (!strcmp(host, "localhost")) {
		a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return 0;
	}
	if (!corio__ipv4_parse(host, hlen, &a4->sin_addr))
		return corio__error(-EINVAL,
				    "address \"%s\": \"%s\" is not a numeric IPv4 address (corio "
				    "does not resolve host names)",
				    hp, host);
	return 0;
}

int corio_addr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t size)
{
	char host[INET6_ADDRSTRLEN];
	int n;

	if (!sa || !buf || !size)
		return corio__error(-EINVAL, "corio_addr_format: %s",
				    !sa ? "sa is NULL" : "no room in buf");
	switch (sa->sa_family) {
	case AF_INET: {
		const struct sockaddr_in *a = (const struct sockaddr_in *)sa;

		if (len < sizeof(*a))
			return corio__error(-EINVAL, "corio_addr_format: len %u is short for AF_INET",
					    (unsigned)len);
		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		n = snprintf(buf, size, "%s:%u", host, ntohs(a->sin_port));
		break;
	}
	case AF_INET6: {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;

		if (len < sizeof(*a))
			return corio__error(-EINVAL, "corio_addr_format: len %u is short for AF_INET6",
					    (unsigned)len);
		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		n = snprintf(buf, size, "[%s]:%u", host, ntohs(a->sin6_port));
		break;
	}
	case AF_UNIX: {
		const struct sockaddr_un *a = (const struct sockaddr_un *)sa;
		size_t plen = len > offsetof(struct sockaddr_un, sun_path)
				      ? len - offsetof(struct sockaddr_un, sun_path)
				      : 0;

		if (plen && a->sun_path[0] == 0) /* abstract */
			n = snprintf(buf, size, "@%.*s", (int)(plen - 1), a->sun_path + 1);
		else
			n = snprintf(buf, size, "%.*s", (int)strnlen(a->sun_path, plen), a->sun_path);
		break;
	}
	default:
		return corio__error(-EINVAL, "corio_addr_format: address family %d is not "
					    "AF_INET or AF_INET6", sa->sa_family);
	}
	if (n < 0)
		return corio__error(-EINVAL, "corio_addr_format: cannot format the address");
	return (size_t)n >= size ? (int)size - 1 : n;
}

int corio_addr_port(const struct sockaddr *sa)
{
	if (!sa)
		return corio__error(-EINVAL, "corio_addr_port: sa is NULL");
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return corio__error(-EINVAL, "corio_addr_port: address family %d has no port",
			    sa->sa_family);
}
