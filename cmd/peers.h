/*
 * peers.h - other systems' recall/latency points for tq-recall --peers: a
 * JSON Lines file, one flat object per line such as
 *
 *   {"system":"hnswlib","setting":"ef 64","recall":0.991,"p50_ms":0.21}
 *
 * "system" (a non-empty string) names the series, "recall" (a number from
 * 0 to 1) and "p50_ms" (a number above 0) place the point, "setting" (a
 * string, optional) labels it; other members are ignored.  Values are
 * strings, numbers, true, false or null; nested arrays and objects are
 * refused.  Blank lines are skipped.
 */
#ifndef TQ_CMD_PEERS_H
#define TQ_CMD_PEERS_H

#include <stddef.h>

struct peer {
	char *system;
	char *setting;		/* NULL when the line has none */
	double recall, p50_ms;
};

/*
 * Parses one line (len bytes, no newline; any bytes, NUL included).
 * Returns 1 and fills *p (malloc'd strings, free with peer_free) for an
 * object, 0 for a blank line, -1 with a message in err[0..errlen) (no
 * file or line in it) otherwise.  Prints nothing and never exits, so that
 * it can be fuzzed alone.
 */
int peer_parse(const char *line, size_t len, struct peer *p, char *err,
    size_t errlen);
void peer_free(struct peer *p);

/*
 * Reads a whole peers file into a malloc'd array of *n (at least 1) peers.
 * Exits 1 with "FILE: line N: ERROR" for a bad line or a system beyond
 * the first PEERS_MAX_SYSTEMS, "FILE: no points" for a file without any.
 */
#define PEERS_MAX_SYSTEMS	16
struct peer *peers_read(const char *path, size_t *n);

#endif /* TQ_CMD_PEERS_H */
