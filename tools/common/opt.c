/* SPDX-License-Identifier: MIT */
/* tools/common/opt.c - see opt.h. */
#include "opt.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

const char *tool_prog = "corio-tool";

static int bad(const char *name, const char *s, const char *why)
{
	fprintf(stderr, "%s: %s: bad value '%s' (%s)\n", tool_prog, name, s ? s : "", why);
	return -EINVAL;
}

/*
 * Parse a non-negative decimal number with an optional fraction: digits,
 * optionally '.' and more digits, at least one digit in all; *end is set past
 * it (a unit suffix may follow). Signs, spaces, hex (0x50), exponents (1e2),
 * inf and nan are rejected here: strtod() alone takes all of those, and
 * "-p 0x50" must not mean port 80. Too many digits give +inf, which every
 * caller's range check then refuses with the range in its message.
 */
static int number(const char *s, double *v, const char **end)
{
	char buf[64];
	size_t n = 0, digits = 0;

	if (!s)
		return -EINVAL;
	while (s[n] >= '0' && s[n] <= '9')
		n++, digits++;
	if (s[n] == '.') {
		n++;
		while (s[n] >= '0' && s[n] <= '9')
			n++, digits++;
	}
	if (!digits)
		return -EINVAL;
	*end = s + n;
	if (n >= sizeof(buf)) {
		*v = INFINITY;
		return 0;
	}
	memcpy(buf, s, n);
	buf[n] = '\0';
	*v = strtod(buf, NULL); /* only decimal digits and one '.': cannot fail */
	return 0;
}

int tool_opt_count(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *e;
	double v, mul = 1;
	char why[96];

	if (number(s, &v, &e))
		return bad(name, s, "expected a number such as 64, 20k, 1m");
	if (!strcmp(e, "k") || !strcmp(e, "K"))
		mul = 1e3;
	else if (!strcmp(e, "m") || !strcmp(e, "M"))
		mul = 1e6;
	else if (*e)
		return bad(name, s, "unknown suffix; use k or m");
	v *= mul;
	if (v != floor(v) || v < (double)min || v > (double)max) {
		snprintf(why, sizeof(why), "expected a whole number in %llu..%llu",
			 (unsigned long long)min, (unsigned long long)max);
		return bad(name, s, why);
	}
	*out = (uint64_t)v;
	return 0;
}

int tool_opt_size(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *e;
	double v, mul = 1;
	char why[96];

	if (number(s, &v, &e))
		return bad(name, s, "expected a size such as 64, 4k, 4KiB");
	if (!strcasecmp(e, "k") || !strcasecmp(e, "kib") || !strcasecmp(e, "kb"))
		mul = 1024;
	else if (!strcasecmp(e, "m") || !strcasecmp(e, "mib") || !strcasecmp(e, "mb"))
		mul = 1024 * 1024;
	else if (*e && strcasecmp(e, "b"))
		return bad(name, s, "unknown suffix; use k/KiB or m/MiB");
	v *= mul;
	if (v != floor(v) || v < (double)min || v > (double)max) {
		snprintf(why, sizeof(why), "expected %llu..%llu bytes", (unsigned long long)min,
			 (unsigned long long)max);
		return bad(name, s, why);
	}
	*out = (uint64_t)v;
	return 0;
}

int tool_opt_seconds(const char *name, const char *s, double min_s, double max_s, double *out)
{
	const char *e;
	double v;
	char why[96];

	if (number(s, &v, &e))
		return bad(name, s, "expected a duration such as 2, 2.5s, 500ms");
	if (!strcmp(e, "ms"))
		v /= 1e3;
	else if (!strcmp(e, "us"))
		v /= 1e6;
	else if (*e && strcmp(e, "s"))
		return bad(name, s, "unknown unit; use s, ms or us");
	if (v < min_s || v > max_s) {
		snprintf(why, sizeof(why), "expected %g..%g seconds", min_s, max_s);
		return bad(name, s, why);
	}
	*out = v;
	return 0;
}

int tool_opt_cpus(const char *name, const char *s, int *cpus, unsigned max, unsigned *n)
{
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	const char *p = s;
	char why[96];

	*n = 0;
	if (!s || !*s)
		return bad(name, s, "expected a CPU list such as 0 or 0,1 or 0-3");
	while (*p) {
		char *e;
		long a, b;

		if (*p < '0' || *p > '9')
			return bad(name, s, "expected a CPU list such as 0 or 0,1 or 0-3");
		a = strtol(p, &e, 10);
		b = a;
		if (*e == '-') {
			if (e[1] < '0' || e[1] > '9')
				return bad(name, s, "expected a range such as 0-3");
			b = strtol(e + 1, &e, 10);
		}
		if (b < a || b >= ncpu) {
			snprintf(why, sizeof(why), "CPUs must be ascending ranges within 0..%ld",
				 ncpu - 1);
			return bad(name, s, why);
		}
		for (long c = a; c <= b; c++) {
			if (*n >= max) {
				snprintf(why, sizeof(why), "at most %u CPUs", max);
				return bad(name, s, why);
			}
			cpus[(*n)++] = (int)c;
		}
		if (*e == ',' && e[1])
			e++;
		else if (*e)
			return bad(name, s, "expected a CPU list such as 0 or 0,1 or 0-3");
		p = e;
	}
	return 0;
}

int tool_opt_choice(const char *name, const char *s, const char *const *choices)
{
	char why[160];
	size_t off = 0;

	for (int i = 0; choices[i]; i++)
		if (s && !strcmp(s, choices[i]))
			return i;
	off += (size_t)snprintf(why, sizeof(why), "expected one of:");
	for (int i = 0; choices[i] && off < sizeof(why); i++)
		off += (size_t)snprintf(why + off, sizeof(why) - off, " %s", choices[i]);
	return bad(name, s, why);
}

/* ---- the table-driven parser --------------------------------------------------- */

/* Long-only options and positionals get getopt values past any letter. */
#define VAL_BASE 256
#define MAX_OPTS 48

static int is_end(const struct tool_opt *o)
{
	return !o->name && !o->letter && !o->meta;
}

static int is_positional(const struct tool_opt *o)
{
	return !o->name && !o->letter;
}

/* How messages name an entry: "--name", "-x", or the positional's META. */
static const char *label(const struct tool_opt *o, char *buf, size_t len)
{
	if (o->name)
		snprintf(buf, len, "--%s", o->name);
	else if (o->letter)
		snprintf(buf, len, "-%c", o->letter);
	else
		snprintf(buf, len, "%s", o->meta);
	return buf;
}

static void store_u64(const struct tool_opt *o, uint64_t v)
{
	switch (o->type) {
	case TOOL_T_INT:
		*(int *)o->to = (int)v;
		break;
	case TOOL_T_UNSIGNED:
		*(unsigned *)o->to = (unsigned)v;
		break;
	case TOOL_T_ULONG:
		*(unsigned long *)o->to = (unsigned long)v;
		break;
	case TOOL_T_ULLONG:
		*(unsigned long long *)o->to = (unsigned long long)v;
		break;
	case TOOL_T_DOUBLE:
		*(double *)o->to = (double)v;
		break;
	}
}

/* One value into its target: 0 or -EINVAL (the message printed). */
static int apply(const struct tool_opt *o, const char *value)
{
	char name[64];
	uint64_t v;
	int r = 0;

	label(o, name, sizeof(name));
	switch (o->kind) {
	case TOOL_K_SET:
		*(int *)o->to = o->val;
		break;
	case TOOL_K_COUNT:
	case TOOL_K_SIZE:
		r = (o->kind == TOOL_K_COUNT ? tool_opt_count : tool_opt_size)(
			name, value, (uint64_t)o->min, (uint64_t)o->max, &v);
		if (!r)
			store_u64(o, v);
		break;
	case TOOL_K_SECONDS:
		r = tool_opt_seconds(name, value, o->min, o->max, (double *)o->to);
		break;
	case TOOL_K_CHOICE:
		r = tool_opt_choice(name, value, o->choices);
		if (r >= 0)
			*(int *)o->to = r;
		break;
	case TOOL_K_STRING:
		*(const char **)o->to = value;
		break;
	case TOOL_K_CPUS: {
		struct tool_cpus *c = o->to;

		r = tool_opt_cpus(name, value, c->cpu, c->max, &c->n);
		c->arg = r ? NULL : value;
		break;
	}
	case TOOL_K_CALL:
		r = o->fn(name, value, o->to);
		break;
	}
	return r < 0 ? -EINVAL : 0;
}

/* "  -p, --port P", "      --drain SECS", "  -b host" or "  SOCKET". */
static int left_column(const struct tool_opt *o, char *buf, size_t len)
{
	int n;

	if (is_positional(o))
		return snprintf(buf, len, "  %s", o->meta);
	n = snprintf(buf, len, "  %c%c%s%s%s", o->letter ? '-' : ' ', o->letter ? o->letter : ' ',
		     o->letter && o->name ? ", " : o->name ? "  " : "", o->name ? "--" : "",
		     o->name ? o->name : "");
	if (o->meta && n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, " %s", o->meta);
	return n;
}

static void usage_line(FILE *f, const char *left, const char *help, int width)
{
	fprintf(f, "%-*s", width, left);
	for (const char *p = help ? help : ""; *p; p++) {
		fputc(*p, f);
		if (*p == '\n')
			fprintf(f, "%-*s", width, "");
	}
	fputc('\n', f);
}

void tool_opt_usage(const struct tool_cli *cli, FILE *f)
{
	static const char help[] = "  -h, --help";
	char left[96];
	int width = (int)sizeof(help) - 1;

	for (const struct tool_opt *o = cli->opts; !is_end(o); o++) {
		int n = left_column(o, left, sizeof(left));

		if (n > width)
			width = n;
	}
	width += 2;
	fprintf(f, "usage: %s %s\n", cli->prog, cli->synopsis ? cli->synopsis : "[options]");
	for (const struct tool_opt *o = cli->opts; !is_end(o); o++) {
		left_column(o, left, sizeof(left));
		usage_line(f, left, o->help, width);
	}
	usage_line(f, help, "print this help", width);
	if (cli->footer)
		fputs(cli->footer, f);
}

/* getopt_long's tables from ours; -EINVAL when ours is too long. */
static int build(const struct tool_cli *cli, struct option *lo, char *so, int *count)
{
	int n = 0, k = 0, s = 0;

	so[s++] = ':'; /* report a missing value as ':', not '?' */
	so[s++] = 'h';
	for (const struct tool_opt *o = cli->opts; !is_end(o); o++, n++) {
		int arg = o->meta ? required_argument : no_argument;

		if (n >= MAX_OPTS) {
			fprintf(stderr, "%s: more than %d options in the table\n", cli->prog, MAX_OPTS);
			return -EINVAL;
		}
		if (o->name)
			lo[k++] = (struct option){ o->name, arg, NULL, o->letter ? o->letter : VAL_BASE + n };
		if (o->letter) {
			so[s++] = o->letter;
			if (arg == required_argument)
				so[s++] = ':';
		}
	}
	lo[k++] = (struct option){ "help", no_argument, NULL, 'h' };
	lo[k] = (struct option){ 0 };
	so[s] = '\0';
	*count = n;
	return 0;
}

/* The table index of getopt's value v, or -1. */
static int lookup(const struct tool_cli *cli, int n, int v)
{
	if (v >= VAL_BASE && v < VAL_BASE + n)
		return v - VAL_BASE;
	for (int i = 0; v > 0 && i < n; i++)
		if (cli->opts[i].letter == v)
			return i;
	return -1;
}

/* getopt's complaint ('?' unknown, ':' value missing) as our message. For a
 * short option optopt names it; for a long one glibc sets optopt to 0 and
 * has stepped past the argument, except when a known flag was given
 * "--flag=value": then optopt is that flag's value. */
static int complain(const struct tool_cli *cli, int n, int c, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	int i = lookup(cli, n, optopt);
	char name[64];

	if (c == ':')
		fprintf(stderr, "%s: %s: missing value\n", cli->prog,
			i >= 0 ? label(&cli->opts[i], name, sizeof(name)) : arg);
	else if (i >= 0 || optopt == 'h') /* a known flag: only "--flag=value" gets here */
		fprintf(stderr, "%s: '%s': this option takes no value\n", cli->prog, arg);
	else if (optopt)
		fprintf(stderr, "%s: -%c: unknown option\n", cli->prog, optopt);
	else
		fprintf(stderr, "%s: unknown option '%s'\n", cli->prog, arg);
	tool_opt_usage(cli, stderr);
	return -EINVAL;
}

/* Positionals in table order, then: nothing left over, nothing required missing. */
static int finish(const struct tool_cli *cli, int n, int argc, char **argv, unsigned char *seen)
{
	char name[64];

	for (int i = 0; i < n; i++) {
		const struct tool_opt *o = &cli->opts[i];

		if (!is_positional(o) || optind >= argc)
			continue;
		if (apply(o, argv[optind++]))
			return -EINVAL;
		seen[i] = 1;
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", cli->prog, argv[optind]);
		tool_opt_usage(cli, stderr);
		return -EINVAL;
	}
	for (int i = 0; i < n; i++) {
		if (cli->opts[i].required && !seen[i]) {
			fprintf(stderr, "%s: %s is required\n", cli->prog,
				label(&cli->opts[i], name, sizeof(name)));
			tool_opt_usage(cli, stderr);
			return -EINVAL;
		}
	}
	return 0;
}

int tool_opt_parse(const struct tool_cli *cli, int argc, char **argv)
{
	struct option lo[MAX_OPTS + 2];
	char so[3 * MAX_OPTS + 4];
	unsigned char seen[MAX_OPTS] = { 0 };
	int n, c;

	tool_prog = cli->prog;
	if (build(cli, lo, so, &n))
		return -EINVAL;
	optind = 0; /* glibc: start over (a test parses more than once) */
	opterr = 0; /* our messages, not getopt's */
	while ((c = getopt_long(argc, argv, so, lo, NULL)) != -1) {
		int i;

		if (c == 'h') {
			tool_opt_usage(cli, stdout);
			return TOOL_OPT_HELP;
		}
		if (c == '?' || c == ':')
			return complain(cli, n, c, argv);
		i = lookup(cli, n, c);
		if (i < 0 || apply(&cli->opts[i], optarg))
			return -EINVAL;
		seen[i] = 1;
	}
	return finish(cli, n, argc, argv, seen);
}
