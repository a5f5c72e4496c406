/*
 * format.c - the tq container: a header, a table of tagged sections with
 * XXH64 checksums, 64-byte aligned payloads (see tq(5)).  Version 1 (all
 * quantizers, older indexes) has one header and the table at 64; version
 * 2 (indexes) a superblock with two commit slots, each naming a table
 * (the order in which a commit reaches the disk is in commit.c).
 *
 * Reading maps the file read-only and validates every field of the header
 * (for version 2, of the current commit's slot) and the table before
 * anything else looks at a payload.  A new file goes to a temporary file
 * beside the destination; its header and table are written last, then
 * fsync and rename, so a crash leaves either the old file or the complete
 * new one.  A commit onto an existing index (tq_fw_open_commit) appends
 * instead.
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

/*
 * Reads and checks the nsec table entries at h + toff (within the file):
 * offsets aligned, at least `first`, ends at most `limit`, no two
 * sections overlapping each other or the table, no (part, tag) twice.
 * Version 1 entries have flags 0 (part 0); version 2 entries name their
 * part, at most `maxpart`.
 */
static enum tq_status
table_read(struct tq_file *f, uint64_t toff, uint32_t nsec, uint64_t first,
    uint64_t limit, uint32_t maxpart)
{
	const uint8_t *h = f->base;
	uint64_t tend = toff + (uint64_t)nsec * TQ_SECTION_ENTRY;
	struct tq_section_info *sorted = NULL;
	enum tq_status rc = TQ_OK;

	if ((f->sec = calloc(nsec, sizeof(*f->sec))) == NULL ||
	    (sorted = calloc(nsec, sizeof(*sorted))) == NULL) {
		free(sorted);
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	f->nsections = nsec;
	for (uint32_t i = 0; i < nsec; i++) {
		const uint8_t *e = h + toff + (uint64_t)i * TQ_SECTION_ENTRY;
		struct tq_section_info *s = &f->sec[i];
		uint64_t end;

		tag_string(rd_le32(e), s->tag);
		s->part = rd_le32(e + 4);
		s->offset = rd_le64(e + 8);
		s->length = rd_le64(e + 16);
		s->checksum = rd_le64(e + 24);
		if (s->part > maxpart) {
			rc = f->version == TQ_FORMAT_V1 ? tq_fail(TQ_ERR_FORMAT,
			    "section %s: unknown flags", s->tag) :
			    tq_fail(TQ_ERR_FORMAT, "section %s: part %u out of "
			    "range", s->tag, s->part);
			goto done;
		}
		if (s->offset % TQ_ALIGN != 0 || s->offset < first ||
		    ck_add64(s->offset, s->length, &end) || end > limit) {
			rc = tq_fail(TQ_ERR_FORMAT, "section %s: offset %llu "
			    "length %llu out of bounds (file %llu bytes)",
			    s->tag, (unsigned long long)s->offset,
			    (unsigned long long)s->length,
			    (unsigned long long)limit);
			goto done;
		}
		if (f->version != TQ_FORMAT_V1 && s->offset < tend &&
		    end > toff) {
			rc = tq_fail(TQ_ERR_FORMAT, "section %s overlaps the "
			    "section table", s->tag);
			goto done;
		}
	}
	memcpy(sorted, f->sec, nsec * sizeof(sorted[0]));
	qsort(sorted, nsec, sizeof(sorted[0]), cmp_offset);
	for (uint32_t i = 1; i < nsec; i++)
		if (sorted[i - 1].offset + sorted[i - 1].length >
		    sorted[i].offset) {
			rc = tq_fail(TQ_ERR_FORMAT, "sections %s and %s "
			    "overlap", sorted[i - 1].tag, sorted[i].tag);
			goto done;
		}
	/* (part, tag) pairs: sort a copy by them and look at neighbours. */
	for (uint32_t i = 0; i < nsec; i++)
		sorted[i].offset = (uint64_t)f->sec[i].part << 32 |
		    tag_value(f->sec[i].tag);
	qsort(sorted, nsec, sizeof(sorted[0]), cmp_offset);
	for (uint32_t i = 1; i < nsec; i++)
		if (sorted[i - 1].offset == sorted[i].offset) {
			rc = sorted[i].part == 0 ? tq_fail(TQ_ERR_FORMAT,
			    "section %s appears twice", sorted[i].tag) :
			    tq_fail(TQ_ERR_FORMAT, "section %s of segment %u "
			    "appears twice", sorted[i].tag,
			    sorted[i].part - 1);
			goto done;
		}
done:
	free(sorted);
	return rc;
}

/* Version 1: one header, the table at 64, the file size in the header. */
static enum tq_status
validate_v1(struct tq_file *f)
{
	const uint8_t *h = f->base;
	uint32_t nsec = rd_le32(h + 16), hsize = rd_le32(h + 20);
	uint64_t fsize = rd_le64(h + 24), toff = rd_le64(h + 32);
	uint64_t tsum = rd_le64(h + 40), tlen, tend;

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
	f->end = f->size;
	return table_read(f, toff, nsec, tend, f->size, 0);
}

/* Why a version 2 slot names no usable commit (slot_read). */
enum slot_why { SLOT_OK, SLOT_EMPTY, SLOT_DAMAGED, SLOT_FIELDS,
    SLOT_TRUNCATED, SLOT_TABLE };

/*
 * Version 2 slot k, copied before it is checked (a writer may be
 * rewriting the other slot, never the current one): SLOT_OK if it names
 * a complete commit within the mapping, with its fields in the out
 * arguments.
 */
static enum slot_why
slot_read(const struct tq_file *f, unsigned k, uint64_t *seq, uint64_t *toff,
    uint32_t *nsec, uint64_t *end)
{
	uint8_t sl[TQ_SLOT_SIZE];
	uint64_t tlen, tend;

	memcpy(sl, f->base + (k == 0 ? TQ_SLOT0 : TQ_SLOT1), sizeof(sl));
	*seq = rd_le64(sl);
	*toff = rd_le64(sl + 8);
	*nsec = rd_le32(sl + 16);
	*end = rd_le64(sl + 32);
	if (*seq == 0 && XXH64(sl, 56, 0) != rd_le64(sl + 56))
		return SLOT_EMPTY;	/* never written (or a torn first write) */
	if (XXH64(sl, 56, 0) != rd_le64(sl + 56))
		return SLOT_DAMAGED;
	tlen = (uint64_t)*nsec * TQ_SECTION_ENTRY;
	if (*seq == 0 || *nsec == 0 || *nsec > TQ_MAX_SECTIONS_V2 ||
	    *toff % TQ_ALIGN != 0 || *toff < TQ_SUPER_SIZE ||
	    ck_add64(*toff, tlen, &tend) || tend > *end)
		return SLOT_FIELDS;
	if (*end > f->size)
		return SLOT_TRUNCATED;
	if (XXH64(f->base + *toff, (size_t)tlen, 0) != rd_le64(sl + 24))
		return SLOT_TABLE;
	return SLOT_OK;
}

static enum tq_status
validate_v2(struct tq_file *f)
{
	const uint8_t *h = f->base;
	uint64_t seq[2], toff[2], end[2];
	uint32_t nsec[2];
	enum slot_why why[2], w;
	unsigned k;

	if (f->size < TQ_SUPER_SIZE)
		return tq_fail(TQ_ERR_FORMAT, "truncated: %zu bytes, less than "
		    "the %u-byte superblock", f->size, TQ_SUPER_SIZE);
	if (rd_le32(h + 16) != 0 || rd_le32(h + 20) != TQ_SUPER_SIZE)
		return tq_fail(TQ_ERR_FORMAT, "superblock size %u, expected "
		    "%u", rd_le32(h + 20), TQ_SUPER_SIZE);
	for (k = 0; k < 2; k++)
		why[k] = slot_read(f, k, &seq[k], &toff[k], &nsec[k], &end[k]);
	if (why[0] != SLOT_OK && why[1] != SLOT_OK) {
		/* The most telling reason of the slot with the later commit. */
		k = why[1] > SLOT_EMPTY && (why[0] <= SLOT_EMPTY ||
		    seq[1] > seq[0]);
		w = why[k];
		if (w == SLOT_TRUNCATED)
			return tq_fail(TQ_ERR_FORMAT, "truncated: commit %llu "
			    "needs %llu bytes, file has %zu",
			    (unsigned long long)seq[k],
			    (unsigned long long)end[k], f->size);
		if (w == SLOT_TABLE)
			return tq_fail(TQ_ERR_FORMAT, "section table checksum "
			    "mismatch");
		if (w == SLOT_FIELDS)
			return tq_fail(TQ_ERR_FORMAT, "commit slot %u: section "
			    "table out of bounds", k);
		return tq_fail(TQ_ERR_FORMAT, "no complete commit: both "
		    "commit slots are empty or damaged");
	}
	k = why[0] == SLOT_OK && why[1] == SLOT_OK ? (seq[1] > seq[0]) :
	    why[1] == SLOT_OK;
	if (why[0] == SLOT_OK && why[1] == SLOT_OK && seq[0] == seq[1])
		return tq_fail(TQ_ERR_FORMAT, "both commit slots hold commit "
		    "%llu", (unsigned long long)seq[0]);
	f->seq = seq[k];
	f->end = end[k];
	f->table = toff[k];
	return table_read(f, toff[k], nsec[k], TQ_SUPER_SIZE, end[k],
	    TQ_MAX_SEGMENTS);
}

/* Validates header and table of the mapping in f (base and size set). */
static enum tq_status
file_validate(struct tq_file *f)
{
	const uint8_t *h = f->base;
	uint32_t version, kind;

	if (f->size == 0)
		return tq_fail(TQ_ERR_FORMAT, "empty file");
	if (f->size < TQ_HEADER_SIZE || memcmp(h, TQ_MAGIC, 8) != 0)
		return tq_fail(TQ_ERR_FORMAT, "not a tq file (bad magic)");
	if (XXH64(h, 56, 0) != rd_le64(h + 56))
		return tq_fail(TQ_ERR_FORMAT, "header checksum mismatch");
	version = rd_le32(h + 8);
	kind = rd_le32(h + 12);
	if (version == 0)
		return tq_fail(TQ_ERR_FORMAT, "format version 0");
	if (version > TQ_FORMAT_VERSION)
		return tq_fail(TQ_ERR_VERSION, "format version %u is newer "
		    "than this program (%u)", version, TQ_FORMAT_VERSION);
	if (kind != TQ_FILE_QUANTIZER && kind != TQ_FILE_INDEX)
		return tq_fail(TQ_ERR_FORMAT, "unknown file kind %u", kind);
	f->version = version;
	f->kind = (enum tq_file_kind)kind;
	return version == TQ_FORMAT_V1 ? validate_v1(f) : validate_v2(f);
}

enum tq_status
tq_file_map_fd(int fd, struct tq_file *f)
{
	struct stat st;
	enum tq_status rc;
	void *p;

	memset(f, 0, sizeof(*f));
	if (fstat(fd, &st) == -1)
		return tq_fail(TQ_ERR_IO, "stat: %s", strerror(errno));
	if (!S_ISREG(st.st_mode))
		return tq_fail(TQ_ERR_FORMAT, "not a regular file");
	if ((uint64_t)st.st_size > SIZE_MAX)
		return tq_fail(TQ_ERR_OVERFLOW, "file too large to map");
	f->size = (size_t)st.st_size;
	if (f->size == 0)
		return tq_fail(TQ_ERR_FORMAT, "empty file");
	p = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return tq_fail(TQ_ERR_IO, "mmap: %s", strerror(errno));
	f->base = p;
	/*
	 * mincore's condition (can_do_mincore): the owner, or one who may
	 * write the file; supplementary groups are not looked at, which only
	 * keeps the read-ahead of a file that is in memory.
	 */
	f->residency = st.st_uid == geteuid() || geteuid() == 0 ||
	    (st.st_mode & S_IWOTH) != 0 || ((st.st_mode & S_IWGRP) != 0 &&
	    st.st_gid == getegid());
	if ((rc = file_validate(f)) != TQ_OK) {
		tq_file_unmap(f);
		return rc;
	}
	return TQ_OK;
}

enum tq_status
tq_file_map(const char *path, struct tq_file *f)
{
	enum tq_status rc;
	int fd;

	memset(f, 0, sizeof(*f));
	tq_clear_detail();
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return tq_fail(TQ_ERR_IO, "open: %s", strerror(errno));
	rc = tq_file_map_fd(fd, f);
	close(fd);
	return rc;
}

void
tq_file_unmap(struct tq_file *f)
{
	if (f == NULL)
		return;
	if (f->base != NULL)
		munmap((void *)(uintptr_t)f->base, f->size);
	f->base = NULL;
	free(f->sec);
	f->sec = NULL;
	f->nsections = 0;
}

void
tq_map_release(const void *lo, const void *hi)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)lo + pg - 1) & ~(pg - 1);
	uintptr_t b = (uintptr_t)hi & ~(pg - 1);

	if (lo != NULL && b > a)
		(void)madvise((void *)a, b - a, MADV_DONTNEED);
}

void
tq_map_willneed(const void *lo, const void *hi)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)lo & ~(pg - 1);

	if (lo != NULL && (uintptr_t)hi > a)
		(void)madvise((void *)a, (uintptr_t)hi - a, MADV_WILLNEED);
}

int
tq_map_resident(const void *lo, const void *hi)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)lo & ~(pg - 1);
	uintptr_t b = ((uintptr_t)hi - 1) & ~(pg - 1);
	unsigned char v = 0;

	if (lo == NULL || (uintptr_t)hi <= (uintptr_t)lo)
		return 0;
	if (mincore((void *)a, 1, &v) != 0 || !(v & 1))
		return 0;
	return b == a || (mincore((void *)b, 1, &v) == 0 && (v & 1));
}

const uint8_t *
tq_file_section(const struct tq_file *f, uint32_t tag, uint64_t *len)
{
	return tq_file_part(f, 0, tag, len);
}

const uint8_t *
tq_file_part(const struct tq_file *f, uint32_t part, uint32_t tag,
    uint64_t *len)
{
	for (uint32_t i = 0; i < f->nsections; i++)
		if (f->sec[i].part == part && tag_value(f->sec[i].tag) == tag) {
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
	uint32_t part;
	int kept;		/* carried over from the current commit */
	uint64_t checksum;	/* kept: the stored one */
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
	uint32_t version;	/* 1: quantizers; 2: indexes */
	unsigned max;		/* version 1: the table's room */
	unsigned n, cap;
	uint64_t pos;		/* end of the data written so far */
	int open;		/* index of the section being written, or -1 */
	uint32_t part;		/* of the sections begun from now on */
	struct fw_section *sec;
	/* A commit onto an existing file (tq_fw_open_commit). */
	int commit;
	uint64_t seq;		/* the new commit's number */
	uint64_t base_end;	/* the current commit's end */
	int sealed;		/* tq_fw_seal: complete, not yet renamed */
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
	if (max_sections == 0 || (kind != TQ_FILE_INDEX &&
	    max_sections > TQ_MAX_SECTIONS))
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
	fw->version = kind == TQ_FILE_INDEX ? TQ_FORMAT_VERSION : TQ_FORMAT_V1;
	fw->max = max_sections;
	fw->cap = max_sections;
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
	fw->pos = fw->version == TQ_FORMAT_V1 ? align_up(TQ_HEADER_SIZE +
	    (uint64_t)max_sections * TQ_SECTION_ENTRY) : TQ_SUPER_SIZE;
	*out = fw;
	return TQ_OK;
}

void
tq_fw_set_part(struct tq_filewriter *fw, uint32_t part)
{
	fw->part = part;
}

/* Room for one more section entry. */
static enum tq_status
fw_grow(struct tq_filewriter *fw)
{
	struct fw_section *ns;
	unsigned cap;

	if (fw->n < fw->cap)
		return TQ_OK;
	if (fw->version == TQ_FORMAT_V1 || fw->cap >= TQ_MAX_SECTIONS_V2)
		return tq_fail(TQ_ERR_ARG, "too many sections");
	cap = fw->cap < 16 ? 16 : 2 * fw->cap;
	if (cap > TQ_MAX_SECTIONS_V2)
		cap = TQ_MAX_SECTIONS_V2;
	if ((ns = realloc(fw->sec, cap * sizeof(*ns))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	fw->sec = ns;
	fw->cap = cap;
	return TQ_OK;
}

static enum tq_status
fw_new_section(struct tq_filewriter *fw, uint32_t tag, struct fw_section **s)
{
	if (fw->open >= 0)
		return tq_fail(TQ_ERR_ARG, "section still open");
	TQ_TRY(fw_grow(fw));
	*s = &fw->sec[fw->n];
	memset(*s, 0, sizeof(**s));
	if (((*s)->hash = XXH64_createState()) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	XXH64_reset((*s)->hash, 0);
	(*s)->tag = tag;
	(*s)->part = fw->part;
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

/* The section table of fw, malloc'd into *table (n entries). */
static enum tq_status
fw_table(struct tq_filewriter *fw, uint8_t **table, uint64_t *end)
{
	uint8_t *t;

	if (fw->open >= 0 || fw->n == 0)
		return tq_fail(TQ_ERR_ARG, "incomplete file");
	if ((t = calloc(fw->n, TQ_SECTION_ENTRY)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	for (unsigned i = 0; i < fw->n; i++) {
		struct fw_section *s = &fw->sec[i];
		uint8_t *e = t + (size_t)i * TQ_SECTION_ENTRY;

		if (!s->kept && s->written != s->length) {
			free(t);
			return tq_fail(TQ_ERR_ARG, "section incomplete");
		}
		wr_le32(e, s->tag);
		wr_le32(e + 4, s->part);
		wr_le64(e + 8, s->offset);
		wr_le64(e + 16, s->length);
		wr_le64(e + 24, s->kept ? s->checksum : XXH64_digest(s->hash));
		if (s->offset + s->length > *end)
			*end = s->offset + s->length;
	}
	*table = t;
	return TQ_OK;
}

/* The fixed first 64 bytes of a version 2 superblock. */
static void
super_fixed(uint8_t *h, enum tq_file_kind kind)
{
	memset(h, 0, 64);
	memcpy(h, TQ_MAGIC, 8);
	wr_le32(h + 8, TQ_FORMAT_VERSION);
	wr_le32(h + 12, (uint32_t)kind);
	wr_le32(h + 20, TQ_SUPER_SIZE);
	wr_le64(h + 56, XXH64(h, 56, 0));
}

/* A version 2 commit slot. */
static void
slot_fill(uint8_t *sl, uint64_t seq, uint64_t toff, uint32_t nsec,
    uint64_t tsum, uint64_t end)
{
	memset(sl, 0, TQ_SLOT_SIZE);
	wr_le64(sl, seq);
	wr_le64(sl + 8, toff);
	wr_le32(sl + 16, nsec);
	wr_le64(sl + 24, tsum);
	wr_le64(sl + 32, end);
	wr_le64(sl + 56, XXH64(sl, 56, 0));
}

static enum tq_status
fw_sync(int fd)
{
	if (fdatasync(fd) == -1)
		return tq_fail(TQ_ERR_IO, "fsync: %s", strerror(errno));
	return TQ_OK;
}

/*
 * A commit onto an existing file: the table past the new sections, a
 * sync (data and table durable), the slot of the new commit, a sync.
 * The current commit's slot is never written, so a crash before the
 * second sync leaves it current (commit.c).
 */
static enum tq_status
fw_commit_onto(struct tq_filewriter *fw)
{
	uint8_t *table = NULL, sl[TQ_SLOT_SIZE];
	uint64_t end = fw->base_end, toff;
	size_t tlen = (size_t)fw->n * TQ_SECTION_ENTRY;
	enum tq_status rc;

	if ((rc = fw_table(fw, &table, &end)) != TQ_OK)
		return rc;
	toff = align_up(fw->pos > end ? fw->pos : end);
	if ((rc = pwrite_all(fw->fd, table, tlen, toff)) == TQ_OK &&
	    (rc = tq_fault_point("table")) == TQ_OK &&
	    (rc = fw_sync(fw->fd)) == TQ_OK) {
		slot_fill(sl, fw->seq, toff, fw->n, XXH64(table, tlen, 0),
		    toff + tlen);
		if ((rc = tq_fault_point("synced")) == TQ_OK &&
		    (rc = pwrite_all(fw->fd, sl, sizeof(sl), (fw->seq - 1) %
		    2 ? TQ_SLOT1 : TQ_SLOT0)) == TQ_OK &&
		    (rc = tq_fault_point("slot")) == TQ_OK)
			rc = fw_sync(fw->fd);
	}
	free(table);
	if (rc == TQ_OK)
		fw->base_end = toff + tlen;	/* not truncated by the abort */
	return rc;
}

/*
 * A new file's table and header (or superblock, commit 1), written and
 * synced under its temporary name.
 */
static enum tq_status
fw_seal(struct tq_filewriter *fw)
{
	uint8_t hdr[TQ_SUPER_SIZE];
	uint8_t *table = NULL;
	uint64_t size = fw->version == TQ_FORMAT_V1 ? TQ_HEADER_SIZE +
	    (uint64_t)fw->max * TQ_SECTION_ENTRY : TQ_SUPER_SIZE, toff;
	size_t tlen = (size_t)fw->n * TQ_SECTION_ENTRY, hlen;
	enum tq_status rc;

	if ((rc = fw_table(fw, &table, &size)) != TQ_OK)
		goto fail;
	memset(hdr, 0, sizeof(hdr));
	if (fw->version == TQ_FORMAT_V1) {
		memcpy(hdr, TQ_MAGIC, 8);
		wr_le32(hdr + 8, TQ_FORMAT_V1);
		wr_le32(hdr + 12, (uint32_t)fw->kind);
		wr_le32(hdr + 16, fw->n);
		wr_le32(hdr + 20, TQ_HEADER_SIZE);
		wr_le64(hdr + 24, size);
		wr_le64(hdr + 32, TQ_HEADER_SIZE);
		wr_le64(hdr + 40, XXH64(table, tlen, 0));
		wr_le64(hdr + 56, XXH64(hdr, 56, 0));
		toff = TQ_HEADER_SIZE;
		hlen = TQ_HEADER_SIZE;
	} else {
		/* Commit 1, in slot 0; the table goes after the payloads. */
		toff = align_up(fw->pos > size ? fw->pos : size);
		size = toff + tlen;
		super_fixed(hdr, fw->kind);
		slot_fill(hdr + TQ_SLOT0, 1, toff, fw->n,
		    XXH64(table, tlen, 0), size);
		hlen = TQ_SUPER_SIZE;
	}
	if (ftruncate(fw->fd, (off_t)size) == -1) {
		rc = tq_fail(TQ_ERR_IO, "truncate: %s", strerror(errno));
		goto fail;
	}
	if ((rc = pwrite_all(fw->fd, table, tlen, toff)) != TQ_OK ||
	    (rc = pwrite_all(fw->fd, hdr, hlen, 0)) != TQ_OK)
		goto fail;
	if ((rc = tq_fault_point("written")) != TQ_OK)
		goto fail;
	if (fsync(fw->fd) == -1) {
		rc = tq_fail(TQ_ERR_IO, "fsync: %s", strerror(errno));
		goto fail;
	}
	fw->sealed = 1;
fail:
	free(table);
	return rc;
}

enum tq_status
tq_fw_seal(struct tq_filewriter *fw)
{
	if (fw->commit || fw->version < 2)
		return tq_fail(TQ_ERR_ARG, "only a new index file is sealed");
	if (fw->open >= 0)
		return tq_fail(TQ_ERR_ARG, "section still open");
	return fw->sealed ? TQ_OK : fw_seal(fw);
}

int
tq_fw_fd(const struct tq_filewriter *fw)
{
	return fw->fd;
}

enum tq_status
tq_fw_commit(struct tq_filewriter *fw)
{
	enum tq_status rc = TQ_OK;

	if (fw->commit) {
		rc = fw_commit_onto(fw);
		tq_fw_abort(fw);
		return rc;
	}
	if (!fw->sealed && (rc = fw_seal(fw)) != TQ_OK)
		goto fail;
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
	tq_fw_abort(fw);
	return rc;
}

void
tq_fw_abort(struct tq_filewriter *fw)
{
	if (fw == NULL)
		return;
	if (fw->commit) {
		/* Drop what this commit wrote; the file keeps the rest. */
		if (fw->fd >= 0)
			(void)ftruncate(fw->fd, (off_t)fw->base_end);
	} else if (fw->fd >= 0)
		close(fw->fd);
	if (fw->tmp != NULL) {
		unlink(fw->tmp);
		free(fw->tmp);
	}
	for (unsigned i = 0; i < fw->n; i++)
		if (fw->sec[i].hash != NULL)
			XXH64_freeState(fw->sec[i].hash);
	free(fw->sec);
	free(fw->path);
	free(fw);
}

enum tq_status
tq_fw_open_commit(int fd, const struct tq_file *cur,
    struct tq_filewriter **out)
{
	struct tq_filewriter *fw;

	*out = NULL;
	if (cur->version < 2)
		return tq_fail(TQ_ERR_ARG, "a commit needs a version 2 file");
	if ((fw = calloc(1, sizeof(*fw))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	fw->fd = fd;
	fw->kind = cur->kind;
	fw->version = cur->version;
	fw->open = -1;
	fw->commit = 1;
	fw->seq = cur->seq + 1;
	fw->base_end = cur->end;
	/* Bytes past the commit are a crashed writer's: never referenced. */
	if (ftruncate(fd, (off_t)cur->end) == -1) {
		free(fw);
		return tq_fail(TQ_ERR_IO, "truncate: %s", strerror(errno));
	}
	fw->pos = align_up(cur->end);
	*out = fw;
	return TQ_OK;
}

enum tq_status
tq_fw_keep(struct tq_filewriter *fw, const struct tq_section_info *si)
{
	struct fw_section *s;

	if (fw->open >= 0)
		return tq_fail(TQ_ERR_ARG, "section still open");
	TQ_TRY(fw_grow(fw));
	s = &fw->sec[fw->n++];
	memset(s, 0, sizeof(*s));
	s->tag = tag_value(si->tag);
	s->part = si->part;
	s->offset = si->offset;
	s->length = si->length;
	s->written = si->length;
	s->checksum = si->checksum;
	s->kept = 1;
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Verification                                                              */

/* Every section's checksum (tq_file_verify adds the index's own checks). */
enum tq_status
tq_file_verify_sums(const struct tq_file *f)
{
	for (uint32_t i = 0; i < f->nsections; i++) {
		const struct tq_section_info *s = &f->sec[i];
		XXH64_hash_t h = XXH64(f->base + s->offset, (size_t)s->length,
		    0);

		if (h != s->checksum)
			return tq_fail(TQ_ERR_CHECKSUM, "section %s: checksum "
			    "%016llx, expected %016llx", s->tag,
			    (unsigned long long)h,
			    (unsigned long long)s->checksum);
	}
	return TQ_OK;
}
