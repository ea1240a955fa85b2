/* SPDX-License-Identifier: MIT */
/*
 * tools/load/corio-load/report.c - corio-load's report: the workers'
 * counts gathered and printed, and the exit status.
 */
#include "load.h"

/* The workers' results summed into one report. */
static void gather(struct tool_report *rep)
{
	rep->engine = engines[g.engine];
	rep->label = m.label;
	rep->workers = g.workers;
	rep->cpus = g.cpus_str;
	rep->busy_poll = g.busy;
	rep->seconds = g.p.duration_s;
	rep->late_sends = atomic_load(&g.late);
	tool_hist_init(&rep->hist);
	for (unsigned i = 0; i < g.workers; i++) {
		tool_hist_merge(&rep->hist, &g.ws[i].hist);
		rep->msgs += g.ws[i].msgs;
		if (g.ws[i].errors && !rep->errors)
			snprintf(rep->first_err, sizeof(rep->first_err), "%s", g.ws[i].err);
		rep->errors += atomic_load(&g.ws[i].errors);
		rep->lost += g.ws[i].lost;
		rep->late += g.ws[i].late;
		rep->dup += g.ws[i].dup;
		rep->reordered += g.ws[i].reordered;
	}
	rep->server_cpu_ns = m.srv0 >= 0 && m.srv1 >= 0 ? m.srv1 - m.srv0 : -1;
	rep->client_cpu_ns = m.cli1 - m.cli0;
	if (g.tls) {
		rep->tls = atomic_load(&g.tls_version);
		if (!rep->tls)
			rep->tls = "none agreed";
		rep->tls_handshakes = m.tls_handshakes;
	}
}

int load_report(int ret)
{
	struct tool_report rep = { 0 };

	gather(&rep);
	tool_report_print(stdout, &rep, &g.p, m.json);
	if (m.spectrum) {
		FILE *f = fopen(m.spectrum, "w");

		if (!f) {
			fprintf(stderr, "corio-load: %s: %s\n", m.spectrum, strerror(errno));
			ret = 1;
		} else {
			tool_hist_spectrum(&rep.hist, f);
			fclose(f);
		}
	}
	if (rep.errors) {
		fprintf(stderr, "corio-load: %llu errors; first: %s\n", (unsigned long long)rep.errors,
			rep.first_err);
		ret = 1;
	}
	if (!ret && (rep.lost || rep.late || rep.dup || rep.reordered)) {
		fprintf(stderr, "corio-load: datagrams lost %llu, late %llu, duplicated %llu, "
				"reordered %llu (exit status 3)\n", (unsigned long long)rep.lost,
			(unsigned long long)rep.late, (unsigned long long)rep.dup,
			(unsigned long long)rep.reordered);
		ret = 3;
	}
	return ret;
}
