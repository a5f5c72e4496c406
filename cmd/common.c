/* common.c - helpers shared by the tq-* programs (see common.h). */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static const char *prog = "tq";
static const char *usage_text = "";
static const char *help_text = "";

struct cleanup {
	void (*fn)(void *, int);
	void *arg;
};
static struct cleanup cleanups[8];
static volatile sig_atomic_t ncleanups;

static void
run_cleanups(int in_signal)
{
	while (ncleanups > 0) {
		ncleanups--;
		cleanups[ncleanups].fn(cleanups[ncleanups].arg, in_signal);
	}
}

static void
cleanup_at_exit(void)
{
	run_cleanups(0);
}

static void
cleanup_on_signal(int sig)
{
	run_cleanups(1);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Catches sig unless it was ignored (nohup, "cmd &" in a script). */
static void
catch_signal(int sig)
{
	struct sigaction sa, old;

	if (sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN)
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = cleanup_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

void
at_cleanup(void (*fn)(void *, int), void *arg)
{
	static int installed;

	if (!installed) {
		installed = 1;
		atexit(cleanup_at_exit);
		catch_signal(SIGHUP);
		catch_signal(SIGINT);
		catch_signal(SIGTERM);
	}
	if (ncleanups == (int)(sizeof(cleanups) / sizeof(cleanups[0])))
		die("too many cleanup handlers");
	cleanups[ncleanups].fn = fn;
	cleanups[ncleanups].arg = arg;
	ncleanups++;
}

const char *
base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	if (s == NULL)
		return path;
	if (s[1] == '\0') {
		/* Trailing slash: back up to the previous component. */
		while (s > path && s[-1] != '/')
			s--;
		return s;
	}
	return s + 1;
}

/*
 * OpenBLAS chose its kernels before main(); when they are narrower than
 * this CPU runs and the user chose none, run this program again with
 * OPENBLAS_CORETYPE set (see tq_blas_info in tq.h).  Nothing has been
 * read yet, so stdin and pipes carry over intact; TQ_BLAS_REEXEC marks
 * the second run so that a name OpenBLAS ignores cannot loop.
 */
static void
blas_reexec(char **argv)
{
	const char *set = getenv("OPENBLAS_CORETYPE");
	struct tq_blas_info bi;

	if ((set != NULL && set[0] != '\0') ||
	    getenv("TQ_BLAS_REEXEC") != NULL)
		return;
	tq_blas_info(&bi);
	if (bi.wider == NULL || setenv("TQ_BLAS_REEXEC", bi.core, 1) == -1 ||
	    setenv("OPENBLAS_CORETYPE", bi.wider, 1) == -1)
		return;
	execv("/proc/self/exe", argv);
	/* No /proc, or the binary is gone: run on with the kernels we have. */
	unsetenv("OPENBLAS_CORETYPE");
}

void
cmd_init(char **argv, const char *usage, const char *help)
{
	blas_reexec(argv);
	/*
	 * tq runs its products on its own threads; OpenBLAS's would spin
	 * between calls and take their cores (measured: a Fashion-MNIST
	 * IVF build 0.85x the wall time, ground truth the same).
	 */
	if (getenv("OPENBLAS_NUM_THREADS") == NULL &&
	    getenv("GOTO_NUM_THREADS") == NULL &&
	    getenv("OMP_NUM_THREADS") == NULL)
		tq_blas_set_threads(1);
	if (argv[0] != NULL && argv[0][0] != '\0')
		prog = base_name(argv[0]);
	/* glibc's getopt names argv[0] in its messages. */
	argv[0] = (char *)prog;
	usage_text = usage;
	help_text = help;
}

const char *
progname(void)
{
	return prog;
}

NORETURN void
usage_help(void)
{
	printf("usage: %s\n\n%s\nSee %s(1).\n", usage_text, help_text, prog);
	finish_stdout();
	exit(0);
}

NORETURN void
print_version(void)
{
	printf("%s %s\n", prog, TQ_VERSION_STRING);
	finish_stdout();
	exit(0);
}

NORETURN void
usage_exit(void)
{
	fprintf(stderr, "usage: %s\n", usage_text);
	exit(2);
}

NORETURN void
usage_error(const char *fmt, ...)
{
	va_list ap;

	if (fmt != NULL) {
		fprintf(stderr, "%s: ", prog);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fputc('\n', stderr);
	}
	usage_exit();
}

static void PRINTFLIKE(1, 0)
vmsg(const char *fmt, va_list ap, const char *errstr)
{
	progress_done();
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	if (errstr != NULL)
		fprintf(stderr, ": %s", errstr);
	fputc('\n', stderr);
}

NORETURN void
die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, NULL);
	va_end(ap);
	exit(1);
}

NORETURN void
die_errno(const char *fmt, ...)
{
	const char *e = strerror(errno);
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, e);
	va_end(ap);
	exit(1);
}

void
warnmsg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, NULL);
	va_end(ap);
}

void
warn_offset(const struct tq_quantizer *q, const char *path)
{
	static int said;
	double o = tq_quantizer_offset(q);

	if (said || !(o > TQ_OFFSET_WARN))
		return;
	said = 1;
	warnmsg("warning: %s: the rows lie %.0f times farther from the "
	    "origin than from their mean, so their codes rank them poorly "
	    "(tq-fit(1), CAVEATS)", in_name(path), o);
}

const char *
status_detail(enum tq_status st)
{
	const char *d = tq_errdetail();

	if (d != NULL && d[0] != '\0')
		return d;
	if (st == TQ_ERR_IO && errno != 0)
		return strerror(errno);
	return tq_strerror(st);
}

NORETURN void
die_status(enum tq_status st, const char *file)
{
	const char *d = status_detail(st);

	if (file != NULL)
		die("%s: %s", file, d);
	die("%s", d);
}

const char *
in_name(const char *path)
{
	return strcmp(path, "-") == 0 ? "stdin" : path;
}

const char *
out_name(const char *path)
{
	return strcmp(path, "-") == 0 ? "stdout" : path;
}

/* Numbers -------------------------------------------------------------- */

uint64_t
parse_u64(const char *s, uint64_t lo, uint64_t hi, const char *what)
{
	unsigned long long v;
	char *end;

	/* strtoull would take blanks, a sign and "0x"; a number here is
	   decimal digits only. */
	if (s[0] < '0' || s[0] > '9')
		usage_error("%s '%s' is not a number", what, s);
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end != '\0')
		usage_error("%s '%s' is not a number", what, s);
	if (errno == ERANGE || v < lo || v > hi)
		usage_error("%s '%s' out of range %llu..%llu", what, s,
		    (unsigned long long)lo, (unsigned long long)hi);
	return v;
}

uint32_t
parse_u32(const char *s, uint32_t lo, uint32_t hi, const char *what)
{
	return (uint32_t)parse_u64(s, lo, hi, what);
}

float
parse_float(const char *s, float lo, float hi, const char *what)
{
	char *end;
	float v;

	/* Decimal only: strtof would also take blanks, signs, hex, "inf". */
	if (!((s[0] >= '0' && s[0] <= '9') || s[0] == '.') ||
	    strpbrk(s, "xX") != NULL)
		usage_error("%s '%s' is not a number", what, s);
	errno = 0;
	v = strtof(s, &end);
	if (*end != '\0' || end == s)
		usage_error("%s '%s' is not a number", what, s);
	if (errno == ERANGE || !isfinite(v) || v < lo || v > hi)
		usage_error("%s '%s' out of range %g..%g", what, s,
		    (double)lo, (double)hi);
	return v;
}

void
parse_oversample(const char *s, float *over, float *z)
{
	size_t n = strncmp(s, "auto-set", 8) == 0 ? 8 :
	    strncmp(s, "auto", 4) == 0 ? 4 : 0;

	*z = 0.0f;
	if (n > 0 && (s[n] == '\0' || s[n] == ':')) {
		*over = n == 8 ? TQ_OVERSAMPLE_AUTO_SET : TQ_OVERSAMPLE_AUTO;
		if (s[n] == ':')
			*z = parse_float(s + n + 1, 0.5f, 10.0f,
			    "oversample auto:z");
		return;
	}
	*over = parse_float(s, 1, 1000, "oversample");
}

void
format_oversample(char *buf, size_t len, float over, float z)
{
	const char *name = over == TQ_OVERSAMPLE_AUTO_SET ? "auto-set" :
	    "auto";

	if (over >= 0.0f)
		snprintf(buf, len, "%g", (double)over);
	else if (z > 0.0f)
		snprintf(buf, len, "%s:%g", name, (double)z);
	else
		snprintf(buf, len, "%s", name);
}

enum tq_metric
parse_metric(const char *s)
{
	enum tq_metric m;

	if (tq_metric_parse(s, &m) != TQ_OK)
		usage_error("metric '%s' is not one of l2, ip, cosine", s);
	return m;
}

enum result_format
parse_result_format(const char *s)
{
	if (strcmp(s, "tsv") == 0)
		return FMT_TSV;
	if (strcmp(s, "json") == 0)
		return FMT_JSON;
	if (strcmp(s, "ivecs") != 0)
		usage_error("format '%s' is not one of tsv, json, ivecs", s);
	return FMT_IVECS;
}

enum tq_rotation
parse_rotation(const char *s)
{
	if (strcmp(s, "auto") == 0)
		return TQ_ROT_AUTO;
	if (strcmp(s, "dense") == 0)
		return TQ_ROT_DENSE;
	if (strcmp(s, "structured") == 0)
		return TQ_ROT_STRUCTURED;
	if (strcmp(s, "hadamard") == 0)
		return TQ_ROT_HADAMARD;
	usage_error("rotation '%s' is not one of auto, dense, structured, "
	    "hadamard", s);
}

const char *
rotation_name(enum tq_rotation r)
{
	switch (r) {
	case TQ_ROT_AUTO:	return "auto";
	case TQ_ROT_DENSE:	return "dense";
	case TQ_ROT_STRUCTURED:	return "structured";
	case TQ_ROT_HADAMARD:	return "hadamard";
	}
	return "unknown";
}

const char *
originals_name(enum tq_originals o)
{
	switch (o) {
	case TQ_ORIG_NONE:	return "none";
	case TQ_ORIG_F32:	return "f32";
	case TQ_ORIG_F16:	return "f16";
	}
	return "unknown";
}

/* Progress ------------------------------------------------------------- */

static int progress_shown;

void
progress(const char *fmt, ...)
{
	static int tty = -1;
	va_list ap;

	if (tty == -1)
		tty = isatty(STDERR_FILENO);
	if (!tty)
		return;
	fprintf(stderr, "\r%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\033[K", stderr);
	progress_shown = 1;
}

void
progress_done(void)
{
	if (progress_shown) {
		fputs("\r\033[K", stderr);
		progress_shown = 0;
	}
}

/*
 * The library's progress (a tq_progress_fn) through progress(), a few
 * times a second: rows read or written, of the total when known, and
 * their rate; the k-means iteration; other steps as done of total.
 */
void
show_progress(void *arg, const char *step, uint64_t done, uint64_t total)
{
	static double t0, last;
	static const char *prev;
	double t = now_seconds();

	(void)arg;
	if (step != prev) {
		prev = step;
		t0 = t;
	} else if (t - last < 0.2 && done != total)
		return;
	last = t;
	if (strcmp(step, "reading") == 0 || strncmp(step, "writing", 7) == 0) {
		double rate = t > t0 ? (double)done / (t - t0) : 0.0;
		const char *what = step;
		char of[40] = "";

		if (total > 0)
			snprintf(of, sizeof(of), " of %llu",
			    (unsigned long long)total);
		if (rate > 0.0)
			progress("%s: %llu%s rows, %.0f rows/s", what,
			    (unsigned long long)done, of, rate);
		else
			progress("%s: %llu%s rows", what,
			    (unsigned long long)done, of);
	} else if (strcmp(step, "k-means") == 0)
		progress("k-means: iteration %llu of at most %llu",
		    (unsigned long long)done + 1, (unsigned long long)total);
	else if (total == 0)
		progress("%s", step);	/* a step without a count */
	else
		progress("%s: %llu of %llu", step, (unsigned long long)done,
		    (unsigned long long)total);
}

double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Memory --------------------------------------------------------------- */

void *
xmallocarray(size_t n, size_t size)
{
	void *p;

	if (size != 0 && n > SIZE_MAX / size)
		die("out of memory");
	p = malloc(n * size == 0 ? 1 : n * size);
	if (p == NULL)
		die("out of memory");
	return p;
}

void *
xcalloc(size_t n, size_t size)
{
	void *p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);

	if (p == NULL)
		die("out of memory");
	return p;
}

/* Output --------------------------------------------------------------- */

/*
 * Temporary files not yet renamed into place.  Kept here rather than in
 * struct out, which may be gone by the time the exit handlers run.
 */
static char *pending[4];

static void
out_cleanup(void *arg, int in_signal)
{
	size_t i;

	for (i = 0; i < sizeof(pending) / sizeof(pending[0]); i++)
		if (pending[i] != NULL)
			unlink(pending[i]);	/* async-signal-safe */
}

static void
pending_set(char *old, char *new)
{
	static int registered;
	size_t i;

	if (!registered) {
		registered = 1;
		at_cleanup(out_cleanup, NULL);
	}
	for (i = 0; i < sizeof(pending) / sizeof(pending[0]); i++)
		if (pending[i] == old) {
			pending[i] = new;
			return;
		}
	die("too many output files");
}

void
out_open(struct out *o, const char *path)
{
	const char *base;
	struct stat st;
	size_t dirlen, len;
	mode_t mask;
	int fd;

	o->path = path;
	o->tmp = NULL;
	if (strcmp(path, "-") == 0) {
		o->fp = stdout;
		return;
	}
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) &&
	    !S_ISDIR(st.st_mode)) {
		/*
		 * A device or FIFO (/dev/null, a named pipe) is written in
		 * place: renaming a temporary file over it would replace
		 * the device with a regular file.
		 */
		if ((o->fp = fopen(path, "w")) == NULL)
			die_errno("%s", path);
		return;
	}
	base = base_name(path);
	dirlen = (size_t)(base - path);
	len = dirlen + strlen(base) + sizeof("/..tmp.XXXXXX");
	o->tmp = xmallocarray(len, 1);
	snprintf(o->tmp, len, "%.*s.%s.tmp.XXXXXX", (int)dirlen, path, base);
	if ((fd = mkstemp(o->tmp)) == -1) {
		free(o->tmp);
		o->tmp = NULL;
		die_errno("%s", path);
	}
	pending_set(NULL, o->tmp);
	/* mkstemp makes the file 0600; an output gets the usual mode. */
	mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask) == -1 ||
	    (o->fp = fdopen(fd, "w")) == NULL)
		die_errno("%s", path);
}

static NORETURN void
out_fail(struct out *o)
{
	if (o->tmp == NULL && errno == EPIPE)
		exit(1);
	die_errno("%s", out_name(o->path));
}

void
out_write(struct out *o, const void *buf, size_t len)
{
	if (len > 0 && fwrite(buf, 1, len, o->fp) != len)
		out_fail(o);
}

void
out_printf(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vfprintf(o->fp, fmt, ap);
	va_end(ap);
	if (r < 0)
		out_fail(o);
}

void
out_commit(struct out *o)
{
	if (o->tmp == NULL) {
		if (o->fp == stdout) {
			finish_stdout();
			return;
		}
		if (fflush(o->fp) == EOF || ferror(o->fp) || fclose(o->fp) == EOF)
			die_errno("%s", o->path);
		o->fp = NULL;
		return;
	}
	if (fflush(o->fp) == EOF || ferror(o->fp) || fsync(fileno(o->fp)) == -1)
		out_fail(o);
	if (fclose(o->fp) == EOF) {
		o->fp = NULL;
		out_fail(o);
	}
	o->fp = NULL;
	if (rename(o->tmp, o->path) == -1)
		die_errno("%s", o->path);
	pending_set(o->tmp, NULL);
	free(o->tmp);
	o->tmp = NULL;
}

void
finish_stdout(void)
{
	if (fflush(stdout) == EOF || ferror(stdout)) {
		if (errno == EPIPE)
			exit(1);
		die_errno("stdout");
	}
}

/* Small things ---------------------------------------------------------- */

void
json_string(FILE *fp, const char *s)
{
	const unsigned char *p;

	fputc('"', fp);
	for (p = (const unsigned char *)s; *p != '\0'; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(fp, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(fp, "\\u%04x", *p);
		else
			fputc(*p, fp);
	}
	fputc('"', fp);
}

void
put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

void
put_lef32(uint8_t *p, float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	put_le32(p, u);
}

float
get_lef32(const uint8_t *p)
{
	uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
	    (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

uint64_t *
read_all_ids(const char *path, size_t *n)
{
	struct tq_ids_reader *r;
	enum tq_status st;
	uint64_t *ids = NULL;
	size_t cap = 0, got;

	*n = 0;
	if ((st = tq_ids_open(path, &r)) != TQ_OK)
		die_status(st, in_name(path));
	do {
		if (cap - *n < 4096) {
			uint64_t *p;

			cap = cap ? 2 * cap : 4096;
			if ((p = realloc(ids, cap * sizeof(*ids))) == NULL) {
				free(ids);
				die("out of memory");
			}
			ids = p;
		}
		/* Freed before exiting, so no leak is reported. */
		if ((st = tq_ids_read(r, ids + *n, cap - *n, &got)) != TQ_OK) {
			free(ids);
			tq_ids_close(r);
			die_status(st, in_name(path));
		}
		*n += got;
	} while (got > 0);
	tq_ids_close(r);
	return ids;
}


/* Shards ---------------------------------------------------------------- */

void
parse_shard(const char *s, uint32_t *i, uint32_t *n)
{
	const char *slash = strchr(s, '/');
	char num[24];

	if (slash == NULL || (size_t)(slash - s) >= sizeof(num))
		usage_error("shard '%s' is not i/n", s);
	memcpy(num, s, (size_t)(slash - s));
	num[slash - s] = '\0';
	*n = parse_u32(slash + 1, 1, 1000000, "shard count");
	*i = parse_u32(num, 0, *n - 1, "shard number");
}

void
shard_select(const char *corpus, struct tq_reader *r, const char *idspath,
    struct tq_ids_reader **ids, uint32_t i, uint32_t n)
{
	int64_t rows = tq_reader_count(r);
	uint64_t first, count;
	enum tq_status st;

	if (rows < 0)
		die("%s: --shard needs a row count known in advance (an "
		    "uncompressed file or HDF5, not a pipe or zstd)",
		    in_name(corpus));
	if ((st = tq_shard_rows((uint64_t)rows, i, n, &first, &count)) != TQ_OK)
		die_status(st, in_name(corpus));
	if (count == 0)
		die("%s: shard %u/%u is empty: %lld rows for %u shards",
		    in_name(corpus), i, n, (long long)rows, n);
	if ((st = tq_reader_window(r, first, count)) != TQ_OK)
		die_status(st, in_name(corpus));
	if (*ids != NULL)
		st = tq_ids_window(*ids, first, count);
	else
		st = tq_ids_sequence(first, count, ids);
	if (st != TQ_OK)
		die_status(st, idspath != NULL ? in_name(idspath) : NULL);
}

/* ------------------------------------------------------------------------ */
/* Checks before work                                                        */

void
check_output(const char *path)
{
	struct stat st;
	char *copy, *dir;

	if (path == NULL || strcmp(path, "-") == 0)
		return;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		die("%s: is a directory", path);
	if ((copy = strdup(path)) == NULL)
		die("out of memory");
	dir = dirname(copy);
	if (stat(dir, &st) != 0)
		die("%s: cannot write there: %s: %s", path, dir,
		    strerror(errno));
	if (!S_ISDIR(st.st_mode))
		die("%s: cannot write there: %s is not a directory", path, dir);
	/* The output is a temporary file in dir, renamed over path. */
	if (access(dir, W_OK | X_OK) != 0)
		die("%s: cannot write there: %s: %s", path, dir,
		    strerror(errno));
	free(copy);
}

static void
say_waiting(const char *path, void *arg)
{
	(void)arg;
	if (isatty(STDERR_FILENO))
		fprintf(stderr, "%s: %s: waiting for another writer to "
		    "finish\n", progname(), path);
}

void
wait_politely(struct tq_build_params *bp)
{
	bp->on_wait = say_waiting;
	bp->wait_arg = NULL;
}

static struct tq_writer **guarded;

static void
abort_guarded(void *arg, int in_signal)
{
	(void)arg;
	if (!in_signal && guarded != NULL && *guarded != NULL)
		tq_writer_abort(*guarded);
	if (guarded != NULL)
		*guarded = NULL;
}

void
guard_writer(struct tq_writer **w)
{
	if (guarded == NULL)
		at_cleanup(abort_guarded, NULL);
	guarded = w;
}

/*
 * The length of the valid UTF-8 sequence at s, of at most n bytes (1 for
 * ASCII), or 0 for an invalid one: a stray continuation byte, a sequence
 * cut short, an overlong form, a surrogate or a code point past U+10FFFF.
 */
size_t
utf8_len(const unsigned char *s, size_t n)
{
	size_t k;
	uint32_t c;

	if (n == 0)
		return 0;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		k = 2, c = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		k = 3, c = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		k = 4, c = s[0] & 0x07;
	else
		return 0;
	if (n < k)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if ((k == 3 && c < 0x800) || (k == 4 && (c < 0x10000 ||
	    c > 0x10ffff)) || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return k;
}
