/* SPDX-License-Identifier: MIT */
/*
 * corio-load - TCP echo load generator for corio-echo, epoll-echo or any
 * echo server on 127.0.0.1.
 *
 *   closed loop: every connection keeps --pipeline messages in flight and
 *                sends a new one for each echo; latency from the send.
 *   open loop:   --rate msgs/s spread evenly over the connections at fixed
 *                intervals; latency from each message's intended send time,
 *                so a stalled server shows up as latency instead of slowing
 *                the generator down (no coordinated omission).
 *
 * Every echoed byte is verified (tools/common/load.h says how), a probe
 * connection is opened and closed before the load starts, and the run is
 * bounded: warm-up + duration + at most --drain for the last echoes.
 *
 * Two engines drive the same connections and logic:
 *   corio  (default) one corio shard per CPU, a fiber per connection (two in
 *          open loop: sender and receiver); --busy-poll uses CORIO_IDLE_POLL.
 *   epoll  one plain thread per CPU, non-blocking sockets and epoll;
 *          --busy-poll spins in epoll_wait(0). The instrument that does not
 *          depend on corio.
 *
 * --udp: each connection is one connected UDP socket and each message one
 * datagram (closed loop: --pipeline datagrams in flight per socket; open
 * loop: --rate), every echo checked whole; an echo missing --loss seconds
 * after its datagram was due is counted lost (and, in closed loop, replaced),
 * so a lost datagram cannot hang the run. Lost, late, duplicated and
 * reordered datagrams are reported, and make the exit status 3 (1 is kept
 * for errors: wrong bytes, a socket that failed).
 *
 * --tls (corio engine, TCP): each connection does a TLS 1.3 handshake (a
 * full one: no session tickets, so every connection costs the server one)
 * before the load starts, within the 5 s connect bound, then sends and
 * receives through the session (corio_tls_write / corio_tls_read) and ends
 * its side with close_notify; the same bytes are verified. The server's
 * certificate is verified against --tls-ca FILE, else the system store, and
 * its name against --tls-name (127.0.0.1); only --tls-insecure skips that.
 * No probe connection is made (it speaks plain TCP); a refused handshake is
 * each connection's error, with OpenSSL's reason.
 *
 * --server-pid PID samples that process's CPU time (all threads, ns) at the
 * start and end of the measured window and prints server CPU per message.
 *
 * This file: the options, their checks, the run's steps and main(); the
 * engines are corio.c and epoll.c, the report report.c (load.h lists them).
 */
#include "load.h"

/* The run's state and what main()'s steps share (load.h). */
struct load_state g;
struct load_run m = { .probe = 1, .cpus = { g.cpus, MAX_WORKERS, 0, NULL }, .srv0 = -1, .srv1 = -1 };

/* ---- main --------------------------------------------------------------------- */

const char *const engines[] = { "corio", "epoll", NULL };
static const char *const recvs[] = { "buf", "copy", NULL };

static int parse_options(int argc, char **argv)
{
	const struct tool_opt opts[] = {
		{ TOOL_OPT_COUNT("port", 'p', g.p.port, 1, 65535, "P",
				 "echo server on 127.0.0.1:P (required)"), .required = 1 },
		{ TOOL_OPT_COUNT("conns", 'c', g.p.conns, 1, MAX_CONNS, "N", "connections (1)") },
		{ TOOL_OPT_SIZE("size", 's', g.p.size, 1, 65536, "BYTES",
				"message size, 1..64KiB (64)") },
		{ TOOL_OPT_COUNT("pipeline", 'P', g.p.pipeline, 1, 1024, "N",
				 "closed loop: messages in flight per connection (1)") },
		{ TOOL_OPT_COUNT("rate", 'r', g.p.rate, 1, 100000000, "MSGS/S",
				 "open loop at this total rate (e.g. 100k); default closed loop") },
		{ TOOL_OPT_SECONDS("duration", 'd', g.p.duration_s, 0.01, 3600, "SECS",
				   "measured time (5)") },
		{ TOOL_OPT_SECONDS("warmup", 'w', g.p.warmup_s, 0, 600, "SECS",
				   "load before measuring, not recorded (0.5)") },
		{ TOOL_OPT_SECONDS("drain", 0, g.p.drain_s, 0.01, 600, "SECS",
				   "wait at most this long for the last echoes (2)") },
		{ TOOL_OPT_CHOICE("engine", 'e', g.engine, engines, "E",
				  "corio (shards, fibers) or epoll (plain threads) (corio)") },
		{ TOOL_OPT_COUNT("workers", 't', g.workers, 1, MAX_WORKERS, "N",
				 "shards / threads; default: one per --cpus entry, else 1") },
		{ TOOL_OPT_CPUS("cpus", 'C', m.cpus, "LIST",
				"pin worker i to the i-th CPU of LIST (e.g. 0)") },
		{ TOOL_OPT_FLAG("busy-poll", 0, g.busy, "never sleep: corio idle=poll / epoll_wait(0)") },
		{ TOOL_OPT_CHOICE("recv", 0, g.recv_copy, recvs, "MODE",
				  "corio engine: buf (provided buffers) or copy (buf)") },
		{ TOOL_OPT_FLAG("udp", 'u', g.p.udp,
				"UDP: one socket per conn, one datagram per message\n"
				"(--size 12..65507); reports lost/late/dup/reordered") },
		{ TOOL_OPT_SECONDS("loss", 0, g.p.loss_s, 0.001, 600, "SECS",
				   "UDP: an echo this late is counted lost (0.5)") },
		{ TOOL_OPT_FLAG("tls", 0, g.tls,
				"TLS 1.3 on every connection (corio engine, TCP): a full\n"
				"handshake each, before the load; no probe connection") },
		{ TOOL_OPT_STRING("tls-ca", 0, g.tls_ca, "FILE",
				  "--tls: trust these CAs (PEM; corio-echo's cert=PATH);\n"
				  "default: the system store") },
		{ TOOL_OPT_STRING("tls-name", 0, g.tls_name, "NAME",
				  "--tls: the name (SNI) the certificate must carry\n"
				  "(127.0.0.1)") },
		{ TOOL_OPT_FLAG("tls-insecure", 0, g.tls_insecure,
				"--tls: do not verify the certificate (anyone could\n"
				"impersonate the server)") },
		{ TOOL_OPT_COUNT("server-pid", 0, m.server_pid, 1, 1u << 30, "PID",
				 "report that process's CPU time per message") },
		{ TOOL_OPT_SET("no-probe", 0, m.probe, 0, "skip the probe connection") },
		{ TOOL_OPT_FLAG("json", 0, m.json, "one JSON object instead of the text report") },
		{ TOOL_OPT_STRING("label", 0, m.label, "TEXT", "copied into the JSON") },
		{ TOOL_OPT_STRING("spectrum", 0, m.spectrum, "FILE",
				  "write the latency percentile spectrum (percentile, us)") },
		{ TOOL_OPT_FLAG("quiet", 'q', m.quiet, "no progress line") },
		{ 0 },
	};
	const struct tool_cli cli = {
		"corio-load", "-p PORT [options]",
		"Exit status: 0; 1 errors (wrong bytes, a connection failed); 2 bad options;\n"
		"3 (--udp) datagrams lost, late, duplicated or reordered.\n",
		opts,
	};

	g.p.conns = 1;
	g.p.size = 64;
	g.p.pipeline = 1;
	g.p.duration_s = 5;
	g.p.warmup_s = 0.5;
	g.p.drain_s = 2;
	g.p.loss_s = 0.5;
	g.p.port = -1;
	g.recv_copy = -1; /* not given: --tls tells it apart */
	g.tls_name = "127.0.0.1";
	return tool_opt_parse(&cli, argc, argv);
}

/* --tls and what it can be combined with; the client context: 0 or 2.
 * TLS reads decrypt into the connection's buffer: --recv copy only. */
static int check_tls(void)
{
	struct corio_tls_ctx_opts o = { .flags = CORIO_TLS_ONLY_13 | CORIO_TLS_NO_TICKETS };
	const char *bad = NULL;

	if (!g.tls) {
		if (g.tls_ca || g.tls_insecure) {
			fprintf(stderr, "corio-load: --tls-ca and --tls-insecure need --tls\n");
			return 2;
		}
		g.recv_copy = g.recv_copy > 0;
		return 0;
	}
	if (g.engine != 0)
		bad = "--engine epoll (TLS runs on the corio engine)";
	else if (g.p.udp)
		bad = "--udp (TLS runs over TCP)";
	else if (g.recv_copy == 0)
		bad = "--recv buf (a TLS session decrypts into the connection's buffer: --recv copy)";
	else if (g.tls_ca && g.tls_insecure)
		bad = "--tls-ca and --tls-insecure together (verify, or do not)";
	if (bad) {
		fprintf(stderr, "corio-load: --tls: not with %s\n", bad);
		return 2;
	}
	g.recv_copy = 1;
	o.ca_file = g.tls_ca;
	if (g.tls_insecure)
		o.flags |= CORIO_TLS_NO_VERIFY;
	if (corio_tls_ctx_new(&o, &g.tls_ctx)) {
		fprintf(stderr, "corio-load: --tls-ca %s: %s\n", g.tls_ca ? g.tls_ca : "(system store)",
			corio_last_error());
		return 2;
	}
	m.probe = 0; /* the probe speaks plain TCP */
	return 0;
}

/* The checks that span options, and the derived settings: 0 or 2. */
static int check_options(void)
{
	if (check_tls())
		return 2;
	g.ncpus = m.cpus.n;
	snprintf(g.cpus_str, sizeof(g.cpus_str), "%s", g.ncpus ? m.cpus.arg : "any");
	if (!g.workers)
		g.workers = g.ncpus ? g.ncpus : 1;
	if (g.workers > g.p.conns)
		g.workers = g.p.conns;
	if (g.p.rate > 0 && g.p.rate / g.p.conns > 1e7) {
		fprintf(stderr, "corio-load: --rate: more than 10M msgs/s per connection\n");
		return 2;
	}
	if (g.p.udp && (g.p.size < TOOL_HDR || g.p.size > 65507)) {
		fprintf(stderr, "corio-load: --udp: --size must be %d..65507 (a datagram carries its "
				"connection and sequence number)\n", TOOL_HDR);
		return 2;
	}
	return 0;
}

/* The probe connection and the --server-pid check: 0, 1 or 2. */
static int probe_target(char *addr, size_t len)
{
	snprintf(addr, len, "127.0.0.1:%d", g.p.port);
	g.p.addr = addr;
	tool_load_global_init();
	if (m.probe && (g.p.udp ? tool_probe_udp(&g.p) : tool_probe(&g.p, 0))) {
		fprintf(stderr, "corio-load: the probe connection to %s failed; is an echo server there?\n",
			addr);
		return 1;
	}
	if (m.server_pid && tool_proc_cpu_ns(m.server_pid) < 0) {
		fprintf(stderr, "corio-load: --server-pid %d: cannot read its CPU time\n", m.server_pid);
		return 2;
	}
	return 0;
}

/* Per-worker stats, then the engine: 0 or 1 (out of memory said). */
static int start_workers(void)
{
	int ret = -ENOMEM;

	g.ws = calloc(g.workers, sizeof(*g.ws));
	if (g.ws) {
		for (unsigned i = 0; i < g.workers; i++)
			tool_hist_init(&g.ws[i].hist);
		ret = g.engine == 0 ? load_start_corio() : load_start_epoll();
	}
	if (ret == -ENOMEM) {
		fprintf(stderr, "corio-load: out of memory\n");
		return 1;
	}
	return ret;
}

/* Progress every second; CPU times sampled at the window's edges. */
static void measure(void)
{
	uint64_t w0 = tool_warm_end(&g.p), w1 = tool_meas_end(&g.p);
	int progress = !m.quiet && g.p.warmup_s + g.p.duration_s > 3;
	int tty = isatty(2);
	uint64_t next = g.p.start_ns + 1000000000ull, last_done = 0, last_t = g.p.start_ns;

	for (;;) {
		uint64_t t = next;

		if (m.cli0 == 0 && w0 <= t)
			t = w0;
		if (w1 <= t)
			t = w1;
		sleep_until_ns(t);
		if (m.cli0 == 0 && t == w0) {
			m.srv0 = m.server_pid ? tool_proc_cpu_ns(m.server_pid) : -1;
			m.cli0 = tool_self_cpu_ns();
			if (!m.cli0)
				m.cli0 = 1;
		}
		if (t == w1) {
			m.srv1 = m.server_pid ? tool_proc_cpu_ns(m.server_pid) : -1;
			m.cli1 = tool_self_cpu_ns();
			break;
		}
		if (t == next) {
			uint64_t done = 0, errs = 0;

			for (unsigned i = 0; i < g.workers; i++) {
				done += atomic_load_explicit(&g.ws[i].done_all, memory_order_relaxed);
				errs += atomic_load(&g.ws[i].errors);
			}
			if (progress)
				fprintf(stderr, "%s[%5.1f s] %10.0f msgs/s  %llu errors%s",
					tty ? "\r" : "", (double)(t - g.p.start_ns) / 1e9,
					(double)(done - last_done) * 1e9 / (double)(t - last_t),
					(unsigned long long)errs, tty ? "  " : "\n");
			last_done = done;
			last_t = t;
			next += 1000000000ull;
		}
	}
	if (progress && tty)
		fprintf(stderr, "\n");
}

/* Every connection up (or failed), then go, measure, and wait for the
 * workers to end: 0 or 1. */
static int run(void)
{
	uint64_t limit = tool_now_ns() + 10000000000ull;
	int ret = 0;

	while (atomic_load(&g.connected) + (unsigned)atomic_load(&g.dead) < g.p.conns &&
	       tool_now_ns() < limit)
		usleep(1000);
	if (atomic_load(&g.connected) < g.p.conns) {
		atomic_store(&g.go, -1);
		ret = 1;
	} else {
		g.p.start_ns = tool_now_ns() + 2000000;
		atomic_store(&g.go, 1);
		measure();
	}
	if (g.engine == 0) {
		int r2;

		for (unsigned i = 0; g.tls && i < g.workers; i++) {
			struct corio_tls_stats ts;

			if (!corio_tls_stats_get(m.rt, i, &ts))
				m.tls_handshakes += ts.handshakes;
		}
		r2 = corio_wait(m.rt);

		if (r2) {
			fprintf(stderr, "corio-load: runtime: %s\n", strerror(-r2));
			ret = 1;
		}
	} else {
		for (unsigned w = 0; w < g.workers; w++)
			pthread_join(m.pw[w].th, NULL);
	}
	return ret;
}

static void free_conn(struct tool_conn *c, struct tool_uconn *u)
{
	if (g.p.udp)
		tool_uconn_free(u);
	else
		tool_conn_free(c);
}

static void free_all(void)
{
	if (m.cc) {
		for (unsigned i = 0; i < g.p.conns; i++) {
			free_conn(&m.cc[i].c, &m.cc[i].u);
			free(m.cc[i].tx);
			free(m.cc[i].rx);
		}
		free(m.cc);
	}
	if (m.pw) {
		for (unsigned w = 0; w < g.workers; w++) {
			for (unsigned i = 0; i < m.pw[w].n; i++)
				free_conn(&m.pw[w].conns[i].c, &m.pw[w].conns[i].u);
			free(m.pw[w].conns);
		}
		free(m.pw);
	}
	free(g.ws);
}

int main(int argc, char **argv)
{
	char addr[32];
	int ret;

	/* timed sleeps (open loop without --busy-poll) should wake on time, not
	 * up to 50 us late: the default timer slack; threads inherit this */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	ret = parse_options(argc, argv);
	if (ret)
		return ret > 0 ? 0 : 2;
	ret = check_options();
	if (!ret)
		ret = probe_target(addr, sizeof(addr));
	if (!ret)
		ret = start_workers();
	if (ret)
		return ret;
	ret = load_report(run());
	free_all();
	corio_tls_ctx_free(g.tls_ctx); /* after corio_wait: no session is open */
	return ret;
}
