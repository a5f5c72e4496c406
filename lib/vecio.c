/*
 * vecio.c - vector files out: atomic writers of fixture, fvecs and ivecs
 * files, to a path, a device or FIFO, or standard output (spooled when a
 * fixture's row count is not known).  The readers live in reader.c and
 * one file per format (vecio_*.c); the external ids in ids.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "reader_impl.h"
#include "vecwrite_fmt.h"

/* The writer buffer. */
#define BUF_SIZE TQ_RD_BUF

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_LE 1
#else
#define HOST_LE 0
#endif

#define raw_read tq_raw_read

typedef unsigned long long ull;

/* ------------------------------------------------------------------------ */
/* Writers                                                                   */

struct tq_writer {
	enum tq_vecfmt fmt;
	uint32_t dim;
	uint64_t declared;	/* rows promised at open, or TQ_COUNT_UNKNOWN */
	uint64_t written;
	int fd;			/* temporary file, spool or standard output */
	int to_stdout;		/* a stream: stdout or a device/FIFO */
	int outfd;		/* its descriptor */
	int own_outfd;		/* opened here (a device or FIFO path) */
	int spool;		/* fd is an unlinked spool copied at commit */
	char *dest;		/* final path; NULL for standard output */
	char *tmp;		/* temporary path, unlinked on failure */
	char *dir;		/* directory of dest, fsync'd after rename */
	uint8_t *buf;
	size_t len;
	enum tq_status failed;
	int labeled;		/* rows have labels: 1, none: 0, no row yet: -1 */
};

static enum tq_status
write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return tq_fail(TQ_ERR_IO, "write: %s", strerror(errno));
		}
		p += k;
		n -= (size_t)k;
	}
	return TQ_OK;
}

static enum tq_status
w_flush(struct tq_writer *w)
{
	enum tq_status st;

	if (w->len == 0)
		return TQ_OK;
	st = write_all(w->fd, w->buf, w->len);
	w->len = 0;
	return st;
}

static enum tq_status
w_put(struct tq_writer *w, const void *data, size_t n)
{
	const uint8_t *p = data;

	while (n > 0) {
		size_t k = BUF_SIZE - w->len;

		if (k > n)
			k = n;
		memcpy(w->buf + w->len, p, k);
		w->len += k;
		p += k;
		n -= k;
		if (w->len == BUF_SIZE)
			TQ_TRY(w_flush(w));
	}
	return TQ_OK;
}

/* The process umask, read without changing it where the kernel allows. */
static mode_t
current_umask(void)
{
	FILE *fp = fopen("/proc/self/status", "re");
	char line[128];
	unsigned mask;
	mode_t m;

	if (fp != NULL) {
		while (fgets(line, sizeof(line), fp) != NULL)
			if (sscanf(line, "Umask: %o", &mask) == 1) {
				fclose(fp);
				return (mode_t)(mask & 0777);
			}
		fclose(fp);
	}
	m = umask(022);
	umask(m);
	return m;
}

/* An unlinked temporary file in $TMPDIR for rows bound for a pipe. */
static enum tq_status
open_spool(int *fd)
{
	const char *dir = getenv("TMPDIR");
	char *path;
	size_t len;

	if (dir == NULL || *dir == '\0')
		dir = "/tmp";
	len = strlen(dir) + sizeof("/tq-spool.XXXXXX");
	if ((path = malloc(len)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	snprintf(path, len, "%s/tq-spool.XXXXXX", dir);
	*fd = mkostemp(path, O_CLOEXEC);
	if (*fd < 0) {
		free(path);
		return tq_fail(TQ_ERR_IO, "spool file: %s", strerror(errno));
	}
	unlink(path);
	free(path);
	return TQ_OK;
}

/* Creates <dir>/.<name>.tmp.XXXXXX beside the destination. */
static enum tq_status
open_temp(struct tq_writer *w, const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t dlen, len;

	if (*base == '\0')
		return tq_fail(TQ_ERR_ARG, "output path '%s' names a directory",
		    path);
	dlen = slash == NULL ? 1 : slash == path ? 1 : (size_t)(slash - path);
	if ((w->dest = strdup(path)) == NULL ||
	    (w->dir = malloc(dlen + 1)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	memcpy(w->dir, slash == NULL ? "." : path, dlen);
	w->dir[dlen] = '\0';
	len = strlen(w->dir) + strlen(base) + sizeof("/..tmp.XXXXXX");
	if ((w->tmp = malloc(len)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	snprintf(w->tmp, len, "%s/.%s.tmp.XXXXXX", w->dir, base);
	w->fd = mkostemp(w->tmp, O_CLOEXEC);
	if (w->fd < 0) {
		free(w->tmp);
		w->tmp = NULL;
		return tq_fail(TQ_ERR_IO, "create: %s", strerror(errno));
	}
	if (fchmod(w->fd, 0666 & ~current_umask()) != 0)
		return tq_fail(TQ_ERR_IO, "chmod: %s", strerror(errno));
	return TQ_OK;
}

/* Closes and removes what the writer made, and frees it. */
static void
w_free(struct tq_writer *w)
{
	int saved = errno;

	if (w->fd >= 0 && !(w->to_stdout && !w->spool))
		close(w->fd);
	if (w->own_outfd)
		close(w->outfd);
	if (w->tmp != NULL)
		unlink(w->tmp);
	free(w->tmp);
	free(w->dest);
	free(w->dir);
	free(w->buf);
	free(w);
	errno = saved;
}

enum tq_status
tq_writer_open(const char *path, enum tq_vecfmt fmt, uint32_t dim,
    uint64_t n, struct tq_writer **out)
{
	struct tq_writer *w;
	enum tq_status st;
	uint8_t hdr[TQ_WFMT_HEADER_MAX];
	size_t hlen;

	*out = NULL;
	if (path == NULL || *path == '\0')
		return tq_fail(TQ_ERR_ARG, "no output file name");
	if (!tq_wfmt_known(fmt))
		return tq_fail(TQ_ERR_ARG, "unknown vector format %d",
		    (int)fmt);
	if (dim < 1 || dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_ARG, "dimension %lu is not in 1..%u",
		    (unsigned long)dim, TQ_MAX_DIM);
	if (n != TQ_COUNT_UNKNOWN && n > tq_wfmt_max_rows(fmt))
		return tq_fail(TQ_ERR_OVERFLOW, "a fixture holds at most "
		    "%lu rows", (unsigned long)UINT32_MAX);
	if ((w = calloc(1, sizeof(*w))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	w->fd = -1;
	w->fmt = fmt;
	w->dim = dim;
	w->declared = n;
	w->labeled = -1;
	if ((w->buf = malloc(BUF_SIZE)) == NULL) {
		w_free(w);
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	w->outfd = STDOUT_FILENO;
	st = TQ_OK;
	if (strcmp(path, "-") != 0 && tq_path_is_special(path)) {
		/*
		 * A device or FIFO (/dev/null, a named pipe) is written in
		 * place like standard output: renaming a temporary file
		 * over it would replace the device with a regular file.
		 */
		w->outfd = open(path, O_WRONLY | O_CLOEXEC);
		if (w->outfd < 0)
			st = tq_fail(TQ_ERR_IO, "open: %s", strerror(errno));
		else
			w->own_outfd = 1;
	}
	if (st != TQ_OK) {
		/* reported below */
	} else if (strcmp(path, "-") == 0 || w->own_outfd) {
		w->to_stdout = 1;
		if ((tq_wfmt_counted(fmt) || tq_wfmt_headed(fmt)) &&
		    n == TQ_COUNT_UNKNOWN) {
			w->spool = 1;
			st = open_spool(&w->fd);
		} else {
			w->fd = w->outfd;
			st = TQ_OK;
		}
	} else {
		st = open_temp(w, path);
		/*
		 * A header whose length depends on the count goes before the
		 * rows at commit: they are spooled, the temporary file waits.
		 */
		if (st == TQ_OK && tq_wfmt_headed(fmt) &&
		    n == TQ_COUNT_UNKNOWN) {
			w->outfd = w->fd;
			w->own_outfd = 1;
			w->fd = -1;
			w->spool = 1;
			st = open_spool(&w->fd);
		}
	}
	/* A header of unknown count gets its count at commit. */
	if (st == TQ_OK && !w->spool) {
		hlen = tq_wfmt_header(fmt, dim, n == TQ_COUNT_UNKNOWN ? 0 : n,
		    hdr);
		st = w_put(w, hdr, hlen);
	}
	if (st != TQ_OK) {
		w_free(w);
		return st;
	}
	*out = w;
	return TQ_OK;
}

/* Checks a write of n rows before any byte of it is written. */
static enum tq_status
w_check(struct tq_writer *w, size_t n, int ints, int labels)
{
	size_t elems;
	uint64_t total;

	if (w->failed != TQ_OK)
		return tq_fail(w->failed, "an earlier write failed");
	if (ints && w->fmt != TQ_VEC_IVECS)
		return tq_fail(TQ_ERR_ARG, "integer rows need an ivecs writer");
	if (labels && !tq_wfmt_labels(w->fmt))
		return tq_fail(TQ_ERR_ARG, "labels need a text writer");
	if (!labels && tq_wfmt_needs_labels(w->fmt))
		return tq_fail(TQ_ERR_ARG, "word2vec and .vec rows need labels");
	if (w->labeled >= 0 && w->labeled != labels)
		return tq_fail(TQ_ERR_ARG, labels ? "labelled rows after rows "
		    "without labels" : "rows without labels after labelled rows");
	if (ck_mul(n, w->dim, &elems) || ck_add64(w->written, n, &total))
		return tq_fail(TQ_ERR_OVERFLOW, "too many rows");
	if (total > tq_wfmt_max_rows(w->fmt))
		return tq_fail(TQ_ERR_OVERFLOW, "a fixture holds at most "
		    "%lu rows", (unsigned long)UINT32_MAX);
	if (w->declared != TQ_COUNT_UNKNOWN && total > w->declared)
		return tq_fail(TQ_ERR_ARG, "more rows than the %llu declared",
		    (ull)w->declared);
	return TQ_OK;
}

static enum tq_status
w_put_cb(void *w, const void *data, size_t n)
{
	return w_put(w, data, n);
}

/*
 * Rows of 4-byte values copied as they are (fixture, npy, fvecs, ivecs
 * from int32 rows) are written here; the others are encoded by
 * tq_wfmt_rows (vecwrite_fmt.c), which checks them all first.
 */
static enum tq_status
w_rows(struct tq_writer *w, const void *rows, const char *const *labels,
    size_t n, int ints)
{
	const uint8_t *p = rows;
	uint8_t pre[4];
	size_t i, j, rowbytes = (size_t)w->dim * 4;
	enum tq_status st = TQ_OK;
	int bare = w->fmt == TQ_VEC_FIXTURE || w->fmt == TQ_VEC_NPY;

	wr_le32(pre, w->dim);
	if (!bare && w->fmt != TQ_VEC_FVECS && !ints) {
		st = tq_wfmt_rows(w->fmt, w->dim, rows, labels, n, w->written,
		    w_put_cb, w);
		/* A refused row leaves nothing half-written behind. */
		if (st == TQ_ERR_ARG)
			return st;
	} else if (bare && HOST_LE) {
		st = w_put(w, p, n * rowbytes);
	} else {
		for (i = 0; i < n && st == TQ_OK; i++, p += rowbytes) {
			if (!bare)
				st = w_put(w, pre, 4);
			if (HOST_LE) {
				if (st == TQ_OK)
					st = w_put(w, p, rowbytes);
				continue;
			}
			for (j = 0; j < w->dim && st == TQ_OK; j++) {
				uint32_t u;
				uint8_t le[4];

				memcpy(&u, p + 4 * j, 4);
				wr_le32(le, u);
				st = w_put(w, le, 4);
			}
		}
	}
	if (st != TQ_OK) {
		w->failed = st;
	} else {
		w->written += n;
		w->labeled = labels != NULL;
	}
	return st;
}

enum tq_status
tq_writer_write(struct tq_writer *w, const float *rows, size_t n)
{
	TQ_TRY(w_check(w, n, 0, 0));
	TQ_TRY(tq_vec_check_finite(rows, n, w->dim, w->written));
	return w_rows(w, rows, NULL, n, 0);
}

enum tq_status
tq_writer_write_i32(struct tq_writer *w, const int32_t *rows, size_t n)
{
	TQ_TRY(w_check(w, n, 1, 0));
	return w_rows(w, rows, NULL, n, 1);
}

enum tq_status
tq_writer_write_labeled(struct tq_writer *w, const float *rows,
    const char *const *labels, size_t n)
{
	TQ_TRY(w_check(w, n, 0, labels != NULL));
	TQ_TRY(tq_vec_check_finite(rows, n, w->dim, w->written));
	return w_rows(w, rows, labels, n, 0);
}

/* Copies the spool to standard output behind the header. */
static enum tq_status
w_unspool(struct tq_writer *w)
{
	uint8_t hdr[TQ_WFMT_HEADER_MAX];
	size_t got, hlen;

	hlen = tq_wfmt_header(w->fmt, w->dim, w->written, hdr);
	TQ_TRY(write_all(w->outfd, hdr, hlen));
	if (lseek(w->fd, 0, SEEK_SET) != 0)
		return tq_fail(TQ_ERR_IO, "seek: %s", strerror(errno));
	for (;;) {
		TQ_TRY(raw_read(w->fd, w->buf, BUF_SIZE, &got));
		if (got == 0)
			return TQ_OK;
		TQ_TRY(write_all(w->outfd, w->buf, got));
	}
}

static enum tq_status
fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return tq_fail(TQ_ERR_IO, "open directory: %s",
		    strerror(errno));
	if (fsync(fd) != 0 && errno != EINVAL) {
		int saved = errno;

		close(fd);
		errno = saved;
		return tq_fail(TQ_ERR_IO, "fsync directory: %s",
		    strerror(errno));
	}
	close(fd);
	return TQ_OK;
}

static enum tq_status
w_commit(struct tq_writer *w)
{
	uint8_t hdr[TQ_WFMT_HEADER_MAX];
	size_t hlen;
	int fd;

	if (w->failed != TQ_OK)
		return tq_fail(w->failed, "an earlier write failed");
	TQ_TRY(w_flush(w));
	if (w->declared != TQ_COUNT_UNKNOWN && w->written != w->declared)
		return tq_fail(TQ_ERR_ARG, "wrote %llu rows but %llu were "
		    "declared", (ull)w->written, (ull)w->declared);
	if (w->to_stdout)
		return w->spool ? w_unspool(w) : TQ_OK;
	if (w->spool) {
		/* Header and spooled rows into the temporary file. */
		TQ_TRY(w_unspool(w));
		fd = w->fd;
		w->fd = w->outfd;
		w->own_outfd = 0;
		w->spool = 0;
		if (close(fd) != 0)
			return tq_fail(TQ_ERR_IO, "close: %s", strerror(errno));
	}
	if (tq_wfmt_counted(w->fmt) && w->declared == TQ_COUNT_UNKNOWN) {
		hlen = tq_wfmt_header(w->fmt, w->dim, w->written, hdr);
		ssize_t k = pwrite(w->fd, hdr, hlen, 0);

		if (k < 0 || (size_t)k != hlen) {
			if (k >= 0)
				errno = EIO;
			return tq_fail(TQ_ERR_IO, "write: %s",
			    strerror(errno));
		}
	}
	if (fsync(w->fd) != 0)
		return tq_fail(TQ_ERR_IO, "fsync: %s", strerror(errno));
	fd = w->fd;
	w->fd = -1;
	if (close(fd) != 0)
		return tq_fail(TQ_ERR_IO, "close: %s", strerror(errno));
	if (rename(w->tmp, w->dest) != 0)
		return tq_fail(TQ_ERR_IO, "rename: %s", strerror(errno));
	free(w->tmp);
	w->tmp = NULL;
	return fsync_dir(w->dir);
}

enum tq_status
tq_writer_commit(struct tq_writer *w)
{
	enum tq_status st;

	if (w == NULL)
		return tq_fail(TQ_ERR_ARG, "no writer");
	st = w_commit(w);
	w_free(w);
	return st;
}

void
tq_writer_abort(struct tq_writer *w)
{
	if (w != NULL)
		w_free(w);
}
