/*
 * common.h - helpers shared by the tq-* programs: the program name, usage
 * and error exits, strict number parsing, progress on a terminal, checked
 * output and atomic text files.  Only cmd/ prints or exits; lib/ never does.
 */
#ifndef TQ_CMD_COMMON_H
#define TQ_CMD_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "tq.h"

#define NORETURN	__attribute__((noreturn))
#define PRINTFLIKE(f, a) __attribute__((format(printf, f, a)))

/*
 * Sets the program name (basename of argv0), the usage text and the help
 * text.  The usage is the man page SYNOPSIS, each line after the first
 * already indented.  The help has one line per option of the man page,
 * "  -k, --long arg        what it does (default)\n", in the man page's
 * order.  Also points argv0 at the name so that getopt's own messages read
 * "PROG: ...".
 */
void cmd_init(char **argv, const char *usage, const char *help);
const char *progname(void);

/*
 * --help: the usage, a blank line, the help, a blank line and "See
 * PROG(1)." on stdout, exit 0.  --version: "PROG 0.1.0", exit 0.
 */
NORETURN void usage_help(void);
NORETURN void print_version(void);
/* Usage error: "PROG: msg" (if fmt != NULL), the usage, exit 2. */
NORETURN void usage_error(const char *fmt, ...) PRINTFLIKE(1, 2);
/* Usage only (getopt already printed why), exit 2. */
NORETURN void usage_exit(void);

/* "PROG: msg", exit 1 (errx). */
NORETURN void die(const char *fmt, ...) PRINTFLIKE(1, 2);
/* "PROG: msg: strerror(errno)", exit 1 (err). */
NORETURN void die_errno(const char *fmt, ...) PRINTFLIKE(1, 2);
/* "PROG: msg" without exiting (warnx). */
void warnmsg(const char *fmt, ...) PRINTFLIKE(1, 2);
/*
 * The warning of rows far from the origin (tq_quantizer_offset) about the
 * corpus at path, once a process; nothing for a quantizer fitted without
 * data (offset 0, path may be NULL).
 */
void warn_offset(const struct tq_quantizer *q, const char *path);
/*
 * A library failure: "PROG: FILE: DETAIL" (or "PROG: DETAIL" when file is
 * NULL), DETAIL being tq_errdetail(), else strerror(errno) for TQ_ERR_IO,
 * else tq_strerror(st).  Exit 1.
 */
NORETURN void die_status(enum tq_status st, const char *file);
/* The text die_status() would print after "FILE: ". */
const char *status_detail(enum tq_status st);
/* A path for messages: "-" reads as "stdin". */
const char *in_name(const char *path);
const char *out_name(const char *path);

/*
 * Strict numbers (strtonum-like): the whole string, decimal, in range.
 * `what` names the value in the message, e.g. "tq-search: k '0' out of
 * range 1..1000000".  Garbage or range errors are usage errors.
 */
uint32_t parse_u32(const char *s, uint32_t lo, uint32_t hi, const char *what);
uint64_t parse_u64(const char *s, uint64_t lo, uint64_t hi, const char *what);
float parse_float(const char *s, float lo, float hi, const char *what);
/*
 * An --oversample value: a factor from 1 to 1000, or auto or auto:z (z
 * from 0.5 to 10) for the error-bounded re-rank, *over then
 * TQ_OVERSAMPLE_AUTO and *z the z given or 0 (the library's default).
 */
void parse_oversample(const char *s, float *over, float *z);
/* Writes the --oversample value (over, z) into buf as parse_oversample reads it. */
void format_oversample(char *buf, size_t len, float over, float z);
/* Metric and rotation names; usage error if unknown. */
enum tq_metric parse_metric(const char *s);
enum tq_rotation parse_rotation(const char *s);
/* The result formats of tq-search and tq-merge (--format). */
enum result_format { FMT_TSV, FMT_JSON, FMT_IVECS };
enum result_format parse_result_format(const char *s);
const char *rotation_name(enum tq_rotation r);
const char *originals_name(enum tq_originals o);

/* Progress on stderr, only when stderr is a terminal; "\r" overwrites. */
void progress(const char *fmt, ...) PRINTFLIKE(1, 2);
void progress_done(void);
/* A tq_progress_fn that shows the library's steps with progress(). */
void show_progress(void *arg, const char *step, uint64_t done,
    uint64_t total);

/* Seconds on the monotonic clock. */
double now_seconds(void);

/* Checked allocation: exit 1 "out of memory" on failure or overflow. */
void *xmallocarray(size_t n, size_t size);
void *xcalloc(size_t n, size_t size);

/*
 * Output files.  An output to a path is written to "<dir>/.<name>.tmp.XXXXXX"
 * and renamed into place by out_commit() after fsync; "-" is stdout.  If the
 * program exits before the commit, the temporary file is removed.
 */
struct out {
	FILE *fp;
	const char *path;	/* as given; "-" for stdout */
	char *tmp;		/* temporary path, NULL for stdout */
};
void out_open(struct out *o, const char *path);
void out_commit(struct out *o);
/* fwrite all of buf or exit 1 naming the output. */
void out_write(struct out *o, const void *buf, size_t len);
/* Checked fprintf to an output. */
void out_printf(struct out *o, const char *fmt, ...) PRINTFLIKE(2, 3);

/*
 * Flushes stdout and exits 1 on a write error (quietly for EPIPE).  Call
 * before returning 0 from main.
 */
void finish_stdout(void);

/*
 * Runs fn(arg) at exit (also on die* and on SIGINT/SIGTERM/SIGHUP, where
 * fn must be async-signal-safe if `in_signal` is used).  At most a few.
 */
void at_cleanup(void (*fn)(void *, int in_signal), void *arg);

/*
 * Checks before any work that an output path can be written: not a
 * directory, its directory exists and may be written (the output goes to
 * a temporary file there first).  Exit 1 naming the path otherwise.
 * NULL (no output given) and "-" pass.
 */
void check_output(const char *path);
/*
 * *w, a vector writer (NULL until opened), is aborted if the program exits
 * before it is committed (and *w set to NULL); the destination keeps what
 * it held.
 */
void guard_writer(struct tq_writer **w);
/* Writers of an index: say once on a terminal when waiting for its lock. */
void wait_politely(struct tq_build_params *bp);

/* JSON string (quoted, escaped) to fp. */
void json_string(FILE *fp, const char *s);
/* Bytes of the valid UTF-8 sequence at s (at most n), or 0. */
size_t utf8_len(const unsigned char *s, size_t n);

/* Little-endian stores. */
void put_le32(uint8_t *p, uint32_t v);
void put_lef32(uint8_t *p, float f);
float get_lef32(const uint8_t *p);

/*
 * Reads a whole ids file (tq_ids_open) into a malloc'd array of *n ids;
 * exit 1 naming the file on failure.
 */
uint64_t *read_all_ids(const char *path, size_t *n);

/*
 * --shard I/N: 0 <= I < N <= 1000000, else a usage error naming the value.
 */
void parse_shard(const char *s, uint32_t *i, uint32_t *n);
/*
 * Restricts the corpus reader r (of the file `corpus`) to shard i of n
 * (tq_shard_rows) and the ids to the same rows: *ids, the reader of the
 * file idspath, is windowed; when *ids is NULL it becomes the sequence of
 * the shard's row numbers in the whole corpus.  Exit 1 naming the file on
 * failure: a corpus whose count is not known in advance, an empty shard.
 */
void shard_select(const char *corpus, struct tq_reader *r,
    const char *idspath, struct tq_ids_reader **ids, uint32_t i, uint32_t n);

/* Last component of a path (no allocation; "a/b/" gives "b/"). */
const char *base_name(const char *path);

#endif /* TQ_CMD_COMMON_H */
