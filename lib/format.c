/*
 * format.c - the tq container: a 64-byte header, a table of tagged
 * sections with XXH64 checksums, 64-byte aligned payloads (see tq(5)).
 *
 * Reading maps the file read-only and validates every field of the header
 * and the table before anything else looks at a payload.  Writing goes to
 * a temporary file beside the destination; the header and table are
 * written last, then fsync and rename, so a crash leaves either the old
 * file or the complete new one.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "internal.h"

static void
tag_string(uint32_t tag, char out[5])
{
	for (int i = 0; i < 4; i++) {
		unsigned char c = (unsigned char)(tag >> (8 * i));

		out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	out[4] = '\0';
}

static uint32_t
tag_value(const char tag[5])
{
	return TQ_TAG(tag[0], tag[1], tag[2], tag[3]);
}

static int
cmp_offset(const void *a, const void *b)
{
	const struct tq_section_info *x = a, *y = b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Validates header and table of the mapping in f (base and size set). */
static enum tq_status
file_validate(struct tq_file *f)
{
	const uint8_t *h = f->base;
	uint32_t version, kind, nsec, hsize;
	uint64_t fsize, toff, tsum, tlen, tend;
	struct tq_section_info sorted[TQ_MAX_SECTIONS];

	if (f->size == 0)
		return tq_fail(TQ_ERR_FORMAT, "empty file");
	if (f->size < TQ_HEADER_SIZE || memcmp(h, TQ_MAGIC, 8) != 0)
		return tq_fail(TQ_ERR_FORMAT, "not a tq file (bad magic)");
	if (XXH64(h, 56, 0) != rd_le64(h + 56))
		return tq_fail(TQ_ERR_FORMAT, "header checksum mismatch");
	version = rd_le32(h + 8);
	kind = rd_le32(h + 12);
	nsec = rd_le32(h + 16);
	hsize = rd_le32(h + 20);
	fsize = rd_le64(h + 24);
	toff = rd_le64(h + 32);
	tsum = rd_le64(h + 40);
	if (version == 0)
		return tq_fail(TQ_ERR_FORMAT, "format version 0");
	if (version > TQ_FORMAT_VERSION)
		return tq_fail(TQ_ERR_VERSION, "format version %u is newer "
		    "than this program (%u)", version, TQ_FORMAT_VERSION);
	if (kind != TQ_FILE_QUANTIZER && kind != TQ_FILE_INDEX)
		return tq_fail(TQ_ERR_FORMAT, "unknown file kind %u", kind);
	if (hsize != TQ_HEADER_SIZE)
		return tq_fail(TQ_ERR_FORMAT, "header size %u, expected %u",
		    hsize, TQ_HEADER_SIZE);
	if (fsize != f->size)
		return tq_fail(TQ_ERR_FORMAT, "truncated or extended: header "
		    "says %llu bytes, file has %zu",
		    (unsigned long long)fsize, f->size);
	if (nsec == 0 || nsec > TQ_MAX_SECTIONS)
		return tq_fail(TQ_ERR_FORMAT, "bad section count %u", nsec);
	tlen = (uint64_t)nsec * TQ_SECTION_ENTRY;
	if (toff != TQ_HEADER_SIZE || ck_add64(toff, tlen, &tend) ||
	    tend > f->size)
		return tq_fail(TQ_ERR_FORMAT, "section table out of bounds");
	if (XXH64(h + toff, (size_t)tlen, 0) != tsum)
		return tq_fail(TQ_ERR_FORMAT, "section table checksum mismatch");

	f->version = version;
	f->kind = (enum tq_file_kind)kind;
	f->nsections = nsec;
	for (uint32_t i = 0; i < nsec; i++) {
		const uint8_t *e = h + toff + (uint64_t)i * TQ_SECTION_ENTRY;
		struct tq_section_info *s = &f->sec[i];
		uint64_t end;

		tag_string(rd_le32(e), s->tag);
		s->offset = rd_le64(e + 8);
		s->length = rd_le64(e + 16);
		s->checksum = rd_le64(e + 24);
		if (rd_le32(e + 4) != 0)
			return tq_fail(TQ_ERR_FORMAT, "section %s: unknown "
			    "flags", s->tag);
		if (s->offset % TQ_ALIGN != 0 || s->offset < tend ||
		    ck_add64(s->offset, s->length, &end) || end > f->size)
			return tq_fail(TQ_ERR_FORMAT, "section %s: offset %llu "
			    "length %llu out of bounds (file %zu bytes)",
			    s->tag, (unsigned long long)s->offset,
			    (unsigned long long)s->length, f->size);
		for (uint32_t j = 0; j < i; j++)
			if (memcmp(f->sec[j].tag, s->tag, 4) == 0)
				return tq_fail(TQ_ERR_FORMAT, "section %s "
				    "appears twice", s->tag);
	}
	memcpy(sorted, f->sec, nsec * sizeof(sorted[0]));
	qsort(sorted, nsec, sizeof(sorted[0]), cmp_offset);
	for (uint32_t i = 1; i < nsec; i++)
		if (sorted[i - 1].offset + sorted[i - 1].length >
		    sorted[i].offset)
			return tq_fail(TQ_ERR_FORMAT, "sections %s and %s "
			    "overlap", sorted[i - 1].tag, sorted[i].tag);
	return TQ_OK;
}

enum tq_status
tq_file_map(const char *path, struct tq_file *f)
{
	struct stat st;
	enum tq_status rc;
	void *p;
	int fd;

	memset(f, 0, sizeof(*f));
	tq_clear_detail();
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return tq_fail(TQ_ERR_IO, "open: %s", strerror(errno));
	if (fstat(fd, &st) == -1) {
		rc = tq_fail(TQ_ERR_IO, "stat: %s", strerror(errno));
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return tq_fail(TQ_ERR_FORMAT, "not a regular file");
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		close(fd);
		return tq_fail(TQ_ERR_OVERFLOW, "file too large to map");
	}
	f->size = (size_t)st.st_size;
	if (f->size == 0) {
		close(fd);
		return tq_fail(TQ_ERR_FORMAT, "empty file");
	}
	p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return tq_fail(TQ_ERR_IO, "mmap: %s", strerror(errno));
	f->base = p;
	if ((rc = file_validate(f)) != TQ_OK) {
		tq_file_unmap(f);
		return rc;
	}
	return TQ_OK;
}

void
tq_file_unmap(struct tq_file *f)
{
	if (f != NULL && f->base != NULL)
		munmap((void *)(uintptr_t)f->base, f->size);
	if (f != NULL)
		f->base = NULL;
}

const uint8_t *
tq_file_section(const struct tq_file *f, uint32_t tag, uint64_t *len)
{
	for (uint32_t i = 0; i < f->nsections; i++)
		if (tag_value(f->sec[i].tag) == tag) {
			*len = f->sec[i].length;
			return f->base + f->sec[i].offset;
		}
	*len = 0;
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */

struct fw_section {
	uint32_t tag;
	uint64_t offset;
	uint64_t length;	/* reserved or final length */
	uint64_t written;
	XXH64_state_t *hash;
	int reserved;
};

struct tq_filewriter {
	int fd;
	char *path;		/* destination */
	char *tmp;		/* temporary name beside it */
	enum tq_file_kind kind;
	unsigned max;
	unsigned n;
	uint64_t pos;		/* end of the data written so far */
	int open;		/* index of the section being written, or -1 */
	struct fw_section *sec;
};

static uint64_t
align_up(uint64_t x)
{
	return (x + TQ_ALIGN - 1) / TQ_ALIGN * TQ_ALIGN;
}

static enum tq_status
pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t w = pwrite(fd, b, n > (1u << 30) ? (1u << 30) : n,
		    (off_t)off);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return tq_fail(TQ_ERR_IO, "write: %s",
			    strerror(errno));
		}
		b += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return TQ_OK;
}

int
tq_path_is_special(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && !S_ISREG(st.st_mode) &&
	    !S_ISDIR(st.st_mode);
}

/* Opens "<dir>/.<base>.tmp.XXXXXX" beside path. */
int
tq_tmpfile_beside(const char *path, char **tmpname)
{
	const char *slash = strrchr(path, '/');
	size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
	const char *base = slash ? slash + 1 : path;
	size_t len = dirlen + strlen(base) + 16;
	char *t = malloc(len);
	int fd;

	if (t == NULL)
		return -1;
	snprintf(t, len, "%.*s.%s.tmp.XXXXXX", (int)dirlen, path, base);
	if ((fd = mkostemp(t, O_CLOEXEC)) == -1) {
		free(t);
		return -1;
	}
	*tmpname = t;
	return fd;
}

/* fsyncs the directory holding path, so a rename is durable. */
static void
sync_dir(const char *path)
{
	char *copy = strdup(path);
	int fd;

	if (copy == NULL)
		return;
	if ((fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		(void)fsync(fd);
		close(fd);
	}
	free(copy);
}

enum tq_status
tq_fw_open(const char *path, enum tq_file_kind kind, unsigned max_sections,
    struct tq_filewriter **out)
{
	struct tq_filewriter *fw;
	mode_t um;

	*out = NULL;
	if (max_sections == 0 || max_sections > TQ_MAX_SECTIONS)
		return tq_fail(TQ_ERR_ARG, "bad section count");
	if (strcmp(path, "-") == 0)
		return tq_fail(TQ_ERR_UNSUPPORTED,
		    "cannot write a tq file to standard output");
	if (tq_path_is_special(path))
		return tq_fail(TQ_ERR_UNSUPPORTED, "not a regular file: a tq "
		    "file is written beside its destination and renamed "
		    "over it");
	if ((fw = calloc(1, sizeof(*fw))) == NULL ||
	    (fw->sec = calloc(max_sections, sizeof(*fw->sec))) == NULL ||
	    (fw->path = strdup(path)) == NULL) {
		if (fw != NULL) {
			free(fw->sec);
			free(fw);
		}
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	fw->kind = kind;
	fw->max = max_sections;
	fw->open = -1;
	if ((fw->fd = tq_tmpfile_beside(path, &fw->tmp)) == -1) {
		enum tq_status rc = tq_fail(TQ_ERR_IO,
		    "cannot create a temporary file beside it: %s",
		    strerror(errno));

		free(fw->path);
		free(fw->sec);
		free(fw);
		return rc;
	}
	um = umask(0);
	umask(um);
	(void)fchmod(fw->fd, 0666 & ~um);
	fw->pos = align_up(TQ_HEADER_SIZE + (uint64_t)max_sections *
	    TQ_SECTION_ENTRY);
	*out = fw;
	return TQ_OK;
}

static enum tq_status
fw_new_section(struct tq_filewriter *fw, uint32_t tag, struct fw_section **s)
{
	if (fw->open >= 0)
		return tq_fail(TQ_ERR_ARG, "section still open");
	if (fw->n == fw->max)
		return tq_fail(TQ_ERR_ARG, "too many sections");
	*s = &fw->sec[fw->n];
	memset(*s, 0, sizeof(**s));
	if (((*s)->hash = XXH64_createState()) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	XXH64_reset((*s)->hash, 0);
	(*s)->tag = tag;
	(*s)->offset = align_up(fw->pos);
	fw->n++;
	return TQ_OK;
}

enum tq_status
tq_fw_begin(struct tq_filewriter *fw, uint32_t tag)
{
	struct fw_section *s;

	TQ_TRY(fw_new_section(fw, tag, &s));
	fw->pos = s->offset;
	fw->open = (int)(fw->n - 1);
	return TQ_OK;
}

enum tq_status
tq_fw_write(struct tq_filewriter *fw, const void *p, size_t n)
{
	struct fw_section *s;

	if (fw->open < 0)
		return tq_fail(TQ_ERR_ARG, "no section open");
	s = &fw->sec[fw->open];
	TQ_TRY(pwrite_all(fw->fd, p, n, fw->pos));
	XXH64_update(s->hash, p, n);
	fw->pos += n;
	s->written += n;
	s->length = s->written;
	return TQ_OK;
}

enum tq_status
tq_fw_end(struct tq_filewriter *fw)
{
	if (fw->open < 0)
		return tq_fail(TQ_ERR_ARG, "no section open");
	fw->open = -1;
	return TQ_OK;
}

enum tq_status
tq_fw_reserve(struct tq_filewriter *fw, uint32_t tag, uint64_t length,
    unsigned *slot)
{
	struct fw_section *s;

	TQ_TRY(fw_new_section(fw, tag, &s));
	s->length = length;
	s->reserved = 1;
	if (ck_add64(s->offset, length, &fw->pos))
		return tq_fail(TQ_ERR_OVERFLOW, "section too large");
	*slot = fw->n - 1;
	return TQ_OK;
}

enum tq_status
tq_fw_put(struct tq_filewriter *fw, unsigned slot, const void *p, size_t n)
{
	struct fw_section *s;

	if (slot >= fw->n || !fw->sec[slot].reserved ||
	    n > fw->sec[slot].length - fw->sec[slot].written)
		return tq_fail(TQ_ERR_ARG, "write past a reserved section");
	s = &fw->sec[slot];
	TQ_TRY(pwrite_all(fw->fd, p, n, s->offset + s->written));
	XXH64_update(s->hash, p, n);
	s->written += n;
	return TQ_OK;
}

enum tq_status
tq_fw_commit(struct tq_filewriter *fw)
{
	uint8_t hdr[TQ_HEADER_SIZE];
	uint8_t *table = NULL;
	uint64_t size = TQ_HEADER_SIZE + (uint64_t)fw->max * TQ_SECTION_ENTRY;
	size_t tlen = (size_t)fw->n * TQ_SECTION_ENTRY;
	enum tq_status rc = TQ_OK;

	if (fw->open >= 0 || fw->n == 0) {
		rc = tq_fail(TQ_ERR_ARG, "incomplete file");
		goto fail;
	}
	if ((table = calloc(1, tlen)) == NULL) {
		rc = tq_fail(TQ_ERR_NOMEM, "out of memory");
		goto fail;
	}
	for (unsigned i = 0; i < fw->n; i++) {
		struct fw_section *s = &fw->sec[i];
		uint8_t *e = table + (size_t)i * TQ_SECTION_ENTRY;

		if (s->written != s->length) {
			rc = tq_fail(TQ_ERR_ARG, "section incomplete");
			goto fail;
		}
		wr_le32(e, s->tag);
		wr_le32(e + 4, 0);
		wr_le64(e + 8, s->offset);
		wr_le64(e + 16, s->length);
		wr_le64(e + 24, XXH64_digest(s->hash));
		if (s->offset + s->length > size)
			size = s->offset + s->length;
	}
	memset(hdr, 0, sizeof(hdr));
	memcpy(hdr, TQ_MAGIC, 8);
	wr_le32(hdr + 8, TQ_FORMAT_VERSION);
	wr_le32(hdr + 12, (uint32_t)fw->kind);
	wr_le32(hdr + 16, fw->n);
	wr_le32(hdr + 20, TQ_HEADER_SIZE);
	wr_le64(hdr + 24, size);
	wr_le64(hdr + 32, TQ_HEADER_SIZE);
	wr_le64(hdr + 40, XXH64(table, tlen, 0));
	wr_le64(hdr + 56, XXH64(hdr, 56, 0));
	if (ftruncate(fw->fd, (off_t)size) == -1) {
		rc = tq_fail(TQ_ERR_IO, "truncate: %s", strerror(errno));
		goto fail;
	}
	if ((rc = pwrite_all(fw->fd, table, tlen, TQ_HEADER_SIZE)) != TQ_OK ||
	    (rc = pwrite_all(fw->fd, hdr, sizeof(hdr), 0)) != TQ_OK)
		goto fail;
	if (fsync(fw->fd) == -1) {
		rc = tq_fail(TQ_ERR_IO, "fsync: %s", strerror(errno));
		goto fail;
	}
	if (close(fw->fd) == -1) {
		fw->fd = -1;
		rc = tq_fail(TQ_ERR_IO, "close: %s", strerror(errno));
		goto fail;
	}
	fw->fd = -1;
	if (rename(fw->tmp, fw->path) == -1) {
		rc = tq_fail(TQ_ERR_IO, "rename: %s", strerror(errno));
		goto fail;
	}
	sync_dir(fw->path);
	free(fw->tmp);
	fw->tmp = NULL;
fail:
	free(table);
	tq_fw_abort(fw);
	return rc;
}

void
tq_fw_abort(struct tq_filewriter *fw)
{
	if (fw == NULL)
		return;
	if (fw->fd >= 0)
		close(fw->fd);
	if (fw->tmp != NULL) {
		unlink(fw->tmp);
		free(fw->tmp);
	}
	for (unsigned i = 0; i < fw->n; i++)
		XXH64_freeState(fw->sec[i].hash);
	free(fw->sec);
	free(fw->path);
	free(fw);
}

/* ------------------------------------------------------------------------ */
/* Verification                                                              */

enum tq_status
tq_file_verify(const char *path)
{
	struct tq_file f;

	TQ_TRY(tq_file_map(path, &f));
	for (uint32_t i = 0; i < f.nsections; i++) {
		const struct tq_section_info *s = &f.sec[i];
		XXH64_hash_t h = XXH64(f.base + s->offset, (size_t)s->length, 0);

		if (h != s->checksum) {
			tq_file_unmap(&f);
			return tq_fail(TQ_ERR_CHECKSUM, "section %s: checksum "
			    "%016llx, expected %016llx", s->tag,
			    (unsigned long long)h,
			    (unsigned long long)s->checksum);
		}
	}
	tq_file_unmap(&f);
	return TQ_OK;
}
