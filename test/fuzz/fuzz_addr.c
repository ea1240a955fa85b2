/* SPDX-License-Identifier: MIT */
/*
 * fuzz_addr - corio_addr_parse() on any string: it returns 0 or -EINVAL with
 * a message, never crashes, and what it accepts formats back into a string
 * that parses to the same address (parse -> format -> parse is stable).
 */
#include <corio.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_storage a, b;
	socklen_t alen, blen;
	char in[256], text[256];
	int ret;

	if (size >= sizeof(in))
		size = sizeof(in) - 1;
	memcpy(in, data, size);
	in[size] = 0;
	ret = corio_addr_parse(in, &a, &alen);
	if (ret != 0) {
		if (ret != -EINVAL || !corio_last_error()[0])
			abort(); /* errors are -EINVAL with a message */
		return 0;
	}
	if (corio_addr_format((struct sockaddr *)&a, alen, text, sizeof(text)) < 0)
		abort(); /* an accepted address always formats */
	if (corio_addr_parse(text, &b, &blen) != 0 || alen != blen || memcmp(&a, &b, alen) != 0)
		abort(); /* and formats into its own spelling */
	return 0;
}
