/* SPDX-License-Identifier: MIT */
/*
 * kv-zipf - a cache workload against a Redis-protocol server, for hit rates
 * under eviction (tools/bench/bench-kvsave.sh): GET a key drawn from a
 * Zipf distribution (s = 0.99 by default, as YCSB's), and on a miss SET it
 * (cache-aside), pipelined on one connection. The key sequence depends on
 * the seed only, so two servers see the same requests. Plain blocking
 * sockets: the server, not this client, is measured.
 *
 *	kv-zipf -p PORT [-n KEYS] [-o GETS] [-s 0.99] [-P 32] [-d 100] [-S SEED]
 *
 * Prints: gets=N hits=N hit_rate=R hit_rate_second_half=R sets=N refused=N
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int writen(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

struct rd {
	int fd;
	char buf[1 << 16];
	size_t at, len;
};

static int rd_fill(struct rd *r)
{
	ssize_t n;

	if (r->at) {
		memmove(r->buf, r->buf + r->at, r->len - r->at);
		r->len -= r->at;
		r->at = 0;
	}
	if (r->len == sizeof(r->buf))
		return -1;
	n = read(r->fd, r->buf + r->len, sizeof(r->buf) - r->len);
	if (n <= 0)
		return -1;
	r->len += (size_t)n;
	return 0;
}

/* One reply: 1 a bulk string (a hit), 0 a null bulk, 2 +OK, 3 an error. */
static int rd_reply(struct rd *r)
{
	for (;;) {
		char *cr = memchr(r->buf + r->at, '\r', r->len - r->at);

		if (cr && cr + 1 < r->buf + r->len) {
			char t = r->buf[r->at];
			long long n = atoll(r->buf + r->at + 1);
			size_t line = (size_t)(cr - (r->buf + r->at)) + 2;

			if (t != '$') {
				r->at += line;
				return t == '+' ? 2 : 3;
			}
			if (n < 0) {
				r->at += line;
				return 0;
			}
			if (r->len - r->at >= line + (size_t)n + 2) {
				r->at += line + (size_t)n + 2;
				return 1;
			}
		}
		if (rd_fill(r))
			return -1;
	}
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int main(int argc, char **argv)
{
	long keys = 200000, gets = 1000000, pipe = 32, dlen = 100, port = 0;
	double s = 0.99, *cdf;
	uint64_t seed = 42;
	long hits = 0, hits2 = 0, gets2 = 0, sets = 0, refused = 0;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static struct rd r;
	char *out, *val;
	long *batch;
	int opt, one = 1;

	while ((opt = getopt(argc, argv, "p:n:o:s:P:d:S:")) != -1) {
		switch (opt) {
		case 'p': port = atol(optarg); break;
		case 'n': keys = atol(optarg); break;
		case 'o': gets = atol(optarg); break;
		case 's': s = atof(optarg); break;
		case 'P': pipe = atol(optarg); break;
		case 'd': dlen = atol(optarg); break;
		case 'S': seed = strtoull(optarg, NULL, 10) | 1; break;
		default:
			fprintf(stderr, "usage: kv-zipf -p PORT [-n KEYS] [-o GETS] [-s S] [-P PIPELINE] "
					"[-d BYTES] [-S SEED]\n");
			return 2;
		}
	}
	if (port <= 0 || port > 65535 || keys < 1 || gets < 1 || pipe < 1 || pipe > 4096 || dlen < 1 ||
	    dlen > 1000000 || !(s > 0)) {
		fprintf(stderr, "kv-zipf: -p PORT is needed; the rest must be positive\n");
		return 2;
	}
	cdf = malloc((size_t)keys * sizeof(*cdf));
	batch = malloc((size_t)pipe * sizeof(*batch));
	val = malloc((size_t)dlen);
	out = malloc((size_t)pipe * (size_t)(dlen + 64));
	if (!cdf || !batch || !val || !out)
		return 1;
	memset(val, 'z', (size_t)dlen);
	{ /* the Zipf CDF over ranks 1..keys */
		double sum = 0;

		for (long i = 0; i < keys; i++)
			cdf[i] = sum += 1.0 / pow((double)(i + 1), s);
		for (long i = 0; i < keys; i++)
			cdf[i] /= sum;
	}
	r.fd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_port = htons((uint16_t)port);
	if (r.fd < 0 || connect(r.fd, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("kv-zipf: connect");
		return 1;
	}
	setsockopt(r.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (long done = 0; done < gets;) {
		long m = gets - done < pipe ? gets - done : pipe, misses = 0;
		size_t o = 0;

		for (long i = 0; i < m; i++) {
			double u = (double)(rng(&seed) >> 11) / 9007199254740992.0;
			long lo = 0, hi = keys - 1;

			while (lo < hi) { /* the first rank whose CDF reaches u */
				long mid = (lo + hi) / 2;

				if (cdf[mid] < u)
					lo = mid + 1;
				else
					hi = mid;
			}
			batch[i] = lo;
			o += (size_t)sprintf(out + o, "*2\r\n$3\r\nGET\r\n$12\r\nkey:%08ld\r\n", lo);
		}
		if (writen(r.fd, out, o))
			return 1;
		o = 0;
		for (long i = 0; i < m; i++) {
			int x = rd_reply(&r);

			if (x < 0) {
				fprintf(stderr, "kv-zipf: the server closed the connection\n");
				return 1;
			}
			hits += x == 1;
			if (done + i >= gets / 2) {
				gets2++;
				hits2 += x == 1;
			}
			if (x == 0) { /* a miss: the cache fills it */
				o += (size_t)sprintf(out + o, "*3\r\n$3\r\nSET\r\n$12\r\nkey:%08ld\r\n$%ld\r\n",
						     batch[i], dlen);
				memcpy(out + o, val, (size_t)dlen);
				o += (size_t)dlen;
				memcpy(out + o, "\r\n", 2);
				o += 2;
				misses++;
			}
		}
		if (misses) {
			if (writen(r.fd, out, o))
				return 1;
			for (long i = 0; i < misses; i++) {
				int x = rd_reply(&r);

				if (x < 0)
					return 1;
				refused += x == 3;
			}
			sets += misses;
		}
		done += m;
	}
	printf("gets=%ld hits=%ld hit_rate=%.4f hit_rate_second_half=%.4f sets=%ld refused=%ld\n", gets,
	       hits, (double)hits / (double)gets, gets2 ? (double)hits2 / (double)gets2 : 0.0, sets,
	       refused);
	close(r.fd);
	free(cdf);
	free(batch);
	free(val);
	free(out);
	return 0;
}
