/*
 * fuzz_peers.c - peer_parse (cmd/peers.c), the JSON Lines line parser of
 * tq-recall --peers, on every line of the input.  A parsed point must
 * satisfy what the parser promises.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "peers.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size, *nl;
	struct peer pt;
	char err[160];
	int r;

	while (p <= end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		r = peer_parse(p, (size_t)(nl - p), &pt, err, sizeof(err));
		if (r == 1) {
			if (pt.system == NULL || pt.system[0] == '\0' ||
			    !(pt.recall >= 0 && pt.recall <= 1) ||
			    !(pt.p50_ms > 0 && isfinite(pt.p50_ms)))
				abort();
			peer_free(&pt);
		} else if (r == -1) {
			if (strlen(err) == 0 || strchr(err, '\n') != NULL)
				abort();
		} else if (r != 0)
			abort();
		p = nl + 1;
	}
	return 0;
}
