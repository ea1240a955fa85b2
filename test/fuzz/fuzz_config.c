/* SPDX-License-Identifier: MIT */
/*
 * fuzz_config - corio_config_check() on any config a caller could build: the
 * bytes fill the struct (pointers aside: cpus points at an array of at least
 * `shards` ints taken from the input, control_path at a string from it). It
 * returns 0 or a negative errno with a message, and never crashes.
 */
#include <corio.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int cpus[1025];
	static char path[128];
	struct corio_config cfg;
	uint8_t sel;
	int ret;

	corio_config_init(&cfg);
	if (size < 1)
		return 0;
	sel = data[0];
	data++, size--;
	/* Overwrite a prefix of the struct (bit 0 of sel: the whole thing). */
	memcpy(&cfg, data, size < sizeof(cfg) ? size : sizeof(cfg));
	data += size < sizeof(cfg) ? size : sizeof(cfg);
	size -= size < sizeof(cfg) ? size : sizeof(cfg);
	cfg.cpus = NULL;
	cfg.control_path = NULL;
	if ((sel & 2) && cfg.shards <= 1024) { /* the contract: shards entries */
		memset(cpus, 0, sizeof(cpus));
		memcpy(cpus, data, size < sizeof(cpus) ? size : sizeof(cpus));
		cfg.cpus = cpus;
	}
	if (sel & 4) {
		size_t n = size < sizeof(path) - 1 ? size : sizeof(path) - 1;

		memcpy(path, data, n);
		path[n] = 0;
		cfg.control_path = path;
	}
	ret = corio_config_check(&cfg);
	if (ret > 0 || (ret < 0 && !corio_last_error()[0]))
		abort(); /* 0, or -errno with a message naming the field */
	return 0;
}
