/* SPDX-License-Identifier: MIT */
/*
 * tools/common/opt.h - option parsing for every tool: value parsers, and
 * one table-driven parser over them (tool_opt_parse, below) that each
 * tool's main() calls. Each value parser checks the whole string and the
 * range, and on failure prints "prog: --name: why" to stderr and returns
 * -EINVAL; the caller exits with status 2.
 */
#ifndef CORIO_TOOLS_OPT_H
#define CORIO_TOOLS_OPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The program name used in messages (set it first thing in main). */
extern const char *tool_prog;

/* An integer in [min, max]; suffixes k (1000) and m (1000000) allowed. */
int tool_opt_count(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* A byte size in [min, max]: 4096, 4k, 4KiB, 1m, 1MiB (k and m are 1024). */
int tool_opt_size(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* A duration in [min_s, max_s] seconds: 2, 2.5, 2s, 500ms, 100us. */
int tool_opt_seconds(const char *name, const char *s, double min_s, double max_s, double *out);
/* A CPU list "0", "1,3", "0-3,6" into cpus[0..*n), at most max entries,
 * each below the number of configured CPUs. */
int tool_opt_cpus(const char *name, const char *s, int *cpus, unsigned max, unsigned *n);
/* One of the words in choices (NULL-terminated): its index. */
int tool_opt_choice(const char *name, const char *s, const char *const *choices);

/* ---- the table-driven parser ---------------------------------------------------
 *
 * A tool lists its options in one table and calls tool_opt_parse() once:
 *
 *	const struct tool_opt opts[] = {
 *		{ TOOL_OPT_COUNT("port", 'p', port, 1, 65535, "P", "server port"), .required = 1 },
 *		{ TOOL_OPT_FLAG("json", 0, json, "one JSON object") },
 *		{ 0 },
 *	};
 *	const struct tool_cli cli = { "corio-x", "-p PORT [options]", NULL, opts };
 *	int r = tool_opt_parse(&cli, argc, argv);
 *	if (r)
 *		return r > 0 ? 0 : 2;
 *
 * An entry with a long name, a short letter or both is an option; one with
 * neither is a positional argument (named by its meta), taken in table order.
 * Values go through the parsers above, so a bad one is reported as
 * "prog: --name: bad value 'x' (why)". -h/--help is every tool's and may not
 * be in the table. Targets keep their value when the option is not given:
 * set the defaults before the call.
 */
enum tool_opt_kind {
	TOOL_K_SET,	/* no value: *(int *)to = val */
	TOOL_K_COUNT,	/* tool_opt_count() in [min, max] */
	TOOL_K_SIZE,	/* tool_opt_size() in [min, max] */
	TOOL_K_SECONDS, /* tool_opt_seconds() in [min, max], into a double */
	TOOL_K_CHOICE,	/* tool_opt_choice(): the index, into an int */
	TOOL_K_STRING,	/* the argument itself (argv outlives main), into a const char * */
	TOOL_K_CPUS,	/* tool_opt_cpus() into a struct tool_cpus */
	TOOL_K_CALL,	/* fn(label, value, to): 0, or -EINVAL with its message printed;
			 * without a meta it takes no value and value is NULL */
};

/* The type a number is stored as (COUNT, SIZE): picked from the target. */
enum tool_opt_type { TOOL_T_INT = 1, TOOL_T_UNSIGNED, TOOL_T_ULONG, TOOL_T_ULLONG, TOOL_T_DOUBLE };

/* A CPU list's target: cpu[0..max) is the caller's; n and arg are filled. */
struct tool_cpus {
	int *cpu;
	unsigned max;
	unsigned n;	 /* entries parsed; 0 when the option was not given */
	const char *arg; /* the list as given, or NULL */
};

struct tool_opt {
	const char *name; /* long name without "--", or NULL */
	char letter;	  /* short letter, or 0 */
	enum tool_opt_kind kind;
	enum tool_opt_type type; /* COUNT and SIZE */
	void *to;		 /* the target */
	double min, max;	 /* COUNT, SIZE, SECONDS: the bounds (they must fit the target) */
	int val;		 /* SET: the value stored */
	const char *const *choices;			     /* CHOICE: NULL-terminated */
	int (*fn)(const char *label, const char *value, void *to); /* CALL */
	const char *meta; /* the value's name in the usage ("N", "SECS"), a positional's
			   * name; an option without one takes no value (SET; a CALL
			   * then gets NULL) */
	const char *help; /* the usage text; each '\n' starts an indented line */
	int required;	  /* an error when not given */
};

/* What the usage says around the table: "usage: prog synopsis", the options,
 * then footer (verbatim, or NULL). opts ends with an all-zero entry. */
struct tool_cli {
	const char *prog;
	const char *synopsis;
	const char *footer;
	const struct tool_opt *opts;
};

#define TOOL_OPT_HELP 1

/*
 * Parse argv against cli->opts (getopt_long underneath: "--name=v",
 * "--name v", "-xv", "-x v", unambiguous prefixes of long names, "--").
 * Sets tool_prog to cli->prog. Returns 0 to go on; TOOL_OPT_HELP after
 * printing the usage to stdout (exit 0); -EINVAL after printing to stderr
 * a message that names the option and the bad value, or the unknown or
 * incomplete option (followed by the usage), or the missing required one
 * (exit 2). Never exits or aborts.
 */
int tool_opt_parse(const struct tool_cli *cli, int argc, char **argv);
/* The usage, as --help prints it. */
void tool_opt_usage(const struct tool_cli *cli, FILE *f);

/* The table's entries, by kind. Each gives designators: write the braces,
 * and add ".required = 1" inside them where needed. A target of the wrong
 * type does not compile (SET, SECONDS, CHOICE, STRING, CPUS: a pointer
 * mismatch; COUNT and SIZE: no _Generic match). */
#define TOOL_OPT_PTR_(T, v) ((void *)(1 ? &(v) : (T *)0))
#define TOOL_OPT_TYPE_(v)                                                                    \
	_Generic((v), int: TOOL_T_INT, unsigned: TOOL_T_UNSIGNED, unsigned long: TOOL_T_ULONG, \
		 unsigned long long: TOOL_T_ULLONG, double: TOOL_T_DOUBLE)
#define TOOL_OPT_SET(n, l, v, value, h) \
	.name = n, .letter = l, .kind = TOOL_K_SET, .to = TOOL_OPT_PTR_(int, v), .val = value, .help = h
#define TOOL_OPT_FLAG(n, l, v, h) TOOL_OPT_SET(n, l, v, 1, h)
#define TOOL_OPT_COUNT(n, l, v, lo, hi, m, h)                                                \
	.name = n, .letter = l, .kind = TOOL_K_COUNT, .type = TOOL_OPT_TYPE_(v), .to = &(v), \
	.min = lo, .max = hi, .meta = m, .help = h
#define TOOL_OPT_SIZE(n, l, v, lo, hi, m, h)                                                \
	.name = n, .letter = l, .kind = TOOL_K_SIZE, .type = TOOL_OPT_TYPE_(v), .to = &(v), \
	.min = lo, .max = hi, .meta = m, .help = h
#define TOOL_OPT_SECONDS(n, l, v, lo, hi, m, h)                                                \
	.name = n, .letter = l, .kind = TOOL_K_SECONDS, .to = TOOL_OPT_PTR_(double, v), .min = lo, \
	.max = hi, .meta = m, .help = h
#define TOOL_OPT_CHOICE(n, l, v, words, m, h)                                                \
	.name = n, .letter = l, .kind = TOOL_K_CHOICE, .to = TOOL_OPT_PTR_(int, v), .choices = words, \
	.meta = m, .help = h
#define TOOL_OPT_STRING(n, l, v, m, h) \
	.name = n, .letter = l, .kind = TOOL_K_STRING, .to = TOOL_OPT_PTR_(const char *, v), .meta = m, .help = h
#define TOOL_OPT_CPUS(n, l, v, m, h) \
	.name = n, .letter = l, .kind = TOOL_K_CPUS, .to = TOOL_OPT_PTR_(struct tool_cpus, v), .meta = m, .help = h
#define TOOL_OPT_CALL(n, l, f, target, m, h) \
	.name = n, .letter = l, .kind = TOOL_K_CALL, .fn = f, .to = target, .meta = m, .help = h

#endif
