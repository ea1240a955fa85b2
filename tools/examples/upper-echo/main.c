/* SPDX-License-Identifier: MIT */
/*
 * upper-echo - the line-protocol server that introductions to async
 * runtimes build, written against corio's public API only. Start here.
 *
 *	upper-echo [-b host] [-p port] [-s shards] [-m max_line] [-i idle_s]
 *
 * It accepts TCP connections and answers every line with the line
 * upper-cased and followed by "!!!":
 *
 *	$ printf 'hello\r\nworld\n' | nc 127.0.0.1 7000
 *	HELLO!!!
 *	WORLD!!!
 *
 * The protocol, precisely:
 *  - A line ends at LF; a CR right before the LF belongs to the line ending
 *    (CRLF), and the answer ends the same way the line did (CRLF or LF).
 *  - Lines may arrive split across any number of receives, and one receive
 *    may hold many lines: answers keep the order of the lines.
 *  - Upper-casing is ASCII-only and byte-wise (a-z -> A-Z, as toupper() in
 *    the C locale). Every other byte - UTF-8, invalid UTF-8, NUL - passes
 *    through unchanged; nothing is decoded or validated.
 *  - A line longer than max_line bytes (-m, default 64 KiB; the line ending
 *    not counted) is answered, as soon as it gets too long, with
 *	ERROR line too long (max N bytes)
 *    and the rest of it, up to its LF, is skipped. The connection is kept:
 *    the next line is answered normally. Memory per connection is bounded
 *    by max_line.
 *  - When the client closes its side, a last line without LF is still
 *    answered (with LF), then the server closes.
 *  - With -i, a connection idle for that many seconds gets
 *	ERROR idle timeout
 *    and is closed.
 *
 * How it is built (each piece is the usual way to do it with corio):
 *  - every shard serves the one port with corio_serve() (corio/serve.h:
 *    a listener per shard on the same port, port 0 picking one for all, a
 *    fiber per connection); SIGINT / SIGTERM start a drain
 *    (corio_drain_on_signal: cfg.signals, which corio_start blocks in the
 *    calling thread too): accepting stops, lines under way are answered,
 *    connections still open a second later are cancelled and closed, and
 *    corio_serve returns on each shard;
 *  - a connection reads lines through a buffered stream (corio/stream.h:
 *    corio_stream_read_until with the line limit, -EMSGSIZE for a line
 *    over it), answers into the stream's write buffer, which goes out when
 *    the stream would wait for input, and ends with the stream's graceful
 *    close, so the last answers are not lost to a reset; the idle timeout
 *    is a deadline scope around the read;
 *  - the protocol is also written without I/O (struct ue_line), the
 *    reference the tests and the fuzzer drive at every cut.
 *
 * The files: main.c (this one: options, signals, starting the shards),
 * upper.h (the protocol and the server, as main.c and the tests use them)
 * and upper.c (their code). test/test_upper_echo.c links upper.c and
 * drives ue_serve() over 127.0.0.1, and also runs the built binary.
 */
#include "upper.h"
#include "../../common/opt.h" /* the tools' option parser */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the program ------------------------------------------------------------------ */

struct ue_opts {
	const char *host;
	unsigned port;
	unsigned shards;
	size_t max_line;
	uint64_t idle_ns;
	char addr[300]; /* the address every shard listens on */
};

static struct ue_opts opts;
static volatile sig_atomic_t failed;

static void ready(struct ue_server *srv)
{
	if (corio_shard_id() == 0) {
		printf("upper-echo: listening on %s (%u shards)\n", srv->bound, corio_shard_count());
		fflush(stdout);
	}
}

static void entry(void *arg)
{
	struct ue_server srv = { .addr = opts.addr, .max_line = opts.max_line,
				 .idle_ns = opts.idle_ns, .drain_ns = 1000000000ull,
				 .ready = ready };
	int ret;

	(void)arg;
	ret = corio_drain_on_signal(CORIO_SIG(SIGINT) | CORIO_SIG(SIGTERM), 2000000000ull);
	if (ret == 0)
		ret = ue_serve(&srv);
	if (ret < 0 && ret != -ECANCELED) {
		fprintf(stderr, "upper-echo: %s (%s)\n", strerror(-ret), corio_last_error());
		failed = 1;
		corio_shutdown();
	}
}

int main(int argc, char **argv)
{
	struct corio_config cfg;
	unsigned idle_s = 0;
	int ret;
	const struct tool_opt table[] = {
		{ TOOL_OPT_STRING(NULL, 'b', opts.host, "host",
				  "address to listen on (127.0.0.1; * for all)") },
		{ TOOL_OPT_COUNT(NULL, 'p', opts.port, 0, 65535, "port",
				 "TCP port (7000; 0: pick one and print it)") },
		{ TOOL_OPT_COUNT(NULL, 's', opts.shards, 0, 1024, "shards",
				 "shards (threads) to run (1; 0: one per CPU)") },
		{ TOOL_OPT_SIZE(NULL, 'm', opts.max_line, 1, (1u << 30) - 2, "bytes",
				"longest line answered (65536); longer ones get an error line") },
		{ TOOL_OPT_COUNT(NULL, 'i', idle_s, 0, 1000000, "seconds",
				 "close connections idle this long (0: never)") },
		{ 0 },
	};
	const struct tool_cli cli = {
		"upper-echo", "[-b host] [-p port] [-s shards] [-m max_line] [-i idle_s]",
		"Drains and exits on SIGINT or SIGTERM.\n", table,
	};

	opts.host = "127.0.0.1";
	opts.port = 7000;
	opts.shards = 1;
	opts.max_line = UE_MAX_LINE_DEFAULT;
	ret = tool_opt_parse(&cli, argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	opts.idle_ns = idle_s * 1000000000ull;

	snprintf(opts.addr, sizeof(opts.addr), "%s:%u", opts.host, opts.port);
	corio_config_init(&cfg);
	cfg.shards = opts.shards;
	cfg.flags |= CORIO_F_NO_PIN;
	cfg.signals = CORIO_SIG(SIGINT) | CORIO_SIG(SIGTERM);
	ret = corio_run(&cfg, entry, NULL);
	if (ret < 0)
		fprintf(stderr, "upper-echo: %s\n", corio_last_error());
	return ret < 0 || failed ? 1 : 0;
}
