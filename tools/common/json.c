/* SPDX-License-Identifier: MIT */
/* tools/common/json.c - see json.h. Recursive descent, one pass, no allocation. */
#include "json.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

struct jp {
	const char *p;
	char path[256]; /* the current value's path, "a.b.0.c" */
	int depth;
	tool_json_fn fn;
	void *arg;
};

static int value(struct jp *j);

static void ws(struct jp *j)
{
	while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')
		j->p++;
}

/* A string, its unescaped-enough text into out (cut to cap) when out. */
static int string(struct jp *j, char *out, size_t cap)
{
	size_t n = 0;

	if (*j->p++ != '"')
		return -1;
	while (*j->p != '"') {
		unsigned char c = (unsigned char)*j->p++;

		if (c < 0x20) /* the end of doc among them */
			return -1;
		if (c == '\\') {
			c = (unsigned char)*j->p++;
			if (!c || !strchr("\"\\/bfnrtu", c))
				return -1;
		}
		if (out && n + 1 < cap)
			out[n++] = (char)c;
	}
	j->p++;
	if (out)
		out[n] = '\0';
	return 0;
}

static int number(struct jp *j)
{
	bool neg = *j->p == '-';
	uint64_t v = 0;

	if (neg)
		j->p++;
	if (!isdigit((unsigned char)*j->p) || (*j->p == '0' && isdigit((unsigned char)j->p[1])))
		return -1;
	while (isdigit((unsigned char)*j->p)) {
		unsigned d = (unsigned)(*j->p++ - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -1; /* more than 64 bits: not one of corio's counters */
		v = v * 10 + d;
	}
	if (*j->p == '.' || *j->p == 'e' || *j->p == 'E')
		return -1; /* corio's JSON has integers only */
	return j->fn && j->fn(j->arg, j->path, v, neg) ? -1 : 0;
}

/* The value of member key (an object's key or an array's index). */
static int member(struct jp *j, const char *key)
{
	size_t len = strlen(j->path);
	int ret;

	if (len + strlen(key) + 2 >= sizeof(j->path))
		return -1;
	snprintf(j->path + len, sizeof(j->path) - len, "%s%s", len ? "." : "", key);
	ret = value(j);
	j->path[len] = '\0';
	return ret;
}

/* An object or an array, from its opening bracket. */
static int container(struct jp *j)
{
	char close = *j->p == '{' ? '}' : ']', key[64];

	j->p++;
	ws(j);
	if (*j->p == close) {
		j->p++;
		return 0;
	}
	for (int i = 0;; i++) {
		ws(j);
		if (close == ']') {
			snprintf(key, sizeof(key), "%d", i);
		} else {
			if (string(j, key, sizeof(key)))
				return -1;
			ws(j);
			if (*j->p++ != ':')
				return -1;
		}
		if (member(j, key))
			return -1;
		ws(j);
		if (*j->p != ',')
			return *j->p++ == close ? 0 : -1;
		j->p++;
	}
}

static int value(struct jp *j)
{
	int ret = 0;

	if (++j->depth > 16)
		return -1;
	ws(j);
	if (*j->p == '{' || *j->p == '[')
		ret = container(j);
	else if (*j->p == '"')
		ret = string(j, NULL, 0);
	else if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "null", 4))
		j->p += 4;
	else if (!strncmp(j->p, "false", 5))
		j->p += 5;
	else
		ret = number(j);
	j->depth--;
	return ret;
}

int tool_json_walk(const char *doc, tool_json_fn fn, void *arg)
{
	struct jp j = { .p = doc, .fn = fn, .arg = arg };

	if (value(&j))
		return -1;
	ws(&j);
	return *j.p ? -1 : 0;
}

struct want {
	const char *path;
	uint64_t got;
	int found;
};

static int pick(void *arg, const char *path, uint64_t mag, bool neg)
{
	struct want *w = arg;

	if (!neg && !strcmp(path, w->path)) {
		w->got = mag;
		w->found++;
	}
	return 0;
}

int tool_json_get(const char *doc, const char *path, uint64_t *out)
{
	struct want w = { .path = path };

	if (tool_json_walk(doc, path ? pick : NULL, &w))
		return -1;
	if (path && w.found != 1)
		return -2;
	if (out)
		*out = w.got;
	return 0;
}
