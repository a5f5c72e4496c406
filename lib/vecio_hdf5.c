/*
 * vecio_hdf5.c - ann-benchmarks HDF5 files: one 2-D dataset read by
 * hyperslab, and string attributes of the root group ("distance").
 *
 * HDF5 files are hostile input like any other: only hard links are
 * followed (an external link would open another file), datasets whose raw
 * data lives in external or virtual storage are refused (they would read
 * other files), and a dataset whose storage is not all allocated is
 * refused rather than read as fill values, so a small file cannot claim
 * billions of rows.  HDF5's own error printing is switched off; the
 * innermost message of its error stack goes into the failure detail.
 *
 * The HDF5 library is loaded when the first HDF5 file is opened, not
 * linked: Debian's brings some thirty libraries with it (curl, TLS,
 * Kerberos, LDAP for its remote drivers), and loading them at the start
 * took 12 of the 23 ms that every tq program spent before main() (a
 * program linked with hdf5 alone: 15.1 ms, with nothing: 3.0 ms).  Its
 * functions are called through the table h5 below, under their own names
 * (macros), and the type ids the headers read from HDF5's globals are
 * read from the loaded library.  TQ_HDF5_LIB names another library file.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "internal.h"
#include "reader_impl.h"

/* The library the build was made against (Makefile), then other names. */
#ifndef TQ_HDF5_SONAME
#define TQ_HDF5_SONAME "libhdf5_serial.so.103"
#endif
static const char *const h5_names[] = {
	TQ_HDF5_SONAME, "libhdf5_serial.so.103", "libhdf5.so.103",
	"libhdf5_serial.so", "libhdf5.so",
};

/* The functions used here, and the globals behind the type ids used. */
#define H5_FUNCS(X)							\
	X(open) X(Aclose) X(Aexists) X(Aget_space) X(Aget_type)		\
	X(Aopen) X(Aread) X(Dclose) X(Dget_create_plist) X(Dget_space)	\
	X(Dget_storage_size) X(Dget_type) X(Dopen2) X(Dread)		\
	X(Eclear2) X(Eset_auto2) X(Ewalk2) X(Fclose) X(Fopen)		\
	X(Gget_info) X(Iget_type) X(Lexists) X(Lget_info)		\
	X(Lget_name_by_idx) X(Oclose) X(Oopen) X(Pclose) X(Pcreate)	\
	X(Pget_chunk) X(Pget_external_count) X(Pget_layout)		\
	X(Pset_fclose_degree) X(Sclose) X(Screate_simple)		\
	X(Sget_simple_extent_dims) X(Sget_simple_extent_ndims)		\
	X(Sget_simple_extent_npoints) X(Sselect_hyperslab) X(Tclose)	\
	X(Tcopy) X(Tget_class) X(Tget_cset) X(Tget_sign) X(Tget_size)	\
	X(Tis_variable_str) X(Tset_cset) X(Tset_size) X(Tset_strpad)	\
	X(free_memory) H5_FUNCS_110(X)
#if H5_VERSION_GE(1, 10, 5)
#define H5_FUNCS_110(X) X(Dget_num_chunks)
#else
#define H5_FUNCS_110(X)
#endif
#define H5_IDS(X)							\
	X(T_NATIVE_FLOAT) X(T_NATIVE_DOUBLE) X(T_NATIVE_INT32)		\
	X(T_NATIVE_INT64) X(T_NATIVE_UINT64) X(T_C_S1)			\
	X(P_CLS_FILE_ACCESS_ID)

static struct {
#define H5_FIELD(f) __typeof__(H5##f) *f;
	H5_FUNCS(H5_FIELD)
#undef H5_FIELD
#define H5_ID_FIELD(g) const hid_t *g;
	H5_IDS(H5_ID_FIELD)
#undef H5_ID_FIELD
	/* Since 1.10.7, and not needed: may be NULL. */
	herr_t (*Pset_file_locking)(hid_t, hbool_t, hbool_t);
	int ok;
	char err[240];		/* why it could not be loaded */
} h5;
static pthread_once_t h5_once = PTHREAD_ONCE_INIT;

/* The library's symbol `name` into *p; 0 and h5.err if it has none. */
static int
h5_sym(void *dl, const char *lib, const char *name, void **p)
{
	if ((*p = dlsym(dl, name)) != NULL)
		return 1;
	snprintf(h5.err, sizeof(h5.err), "%s has no %s", lib, name);
	return 0;
}

static void
h5_load_once(void)
{
	const char *env = getenv("TQ_HDF5_LIB"), *lib;
	void *dl, *ids;
	size_t i, n = sizeof(h5_names) / sizeof(h5_names[0]);

	/* The error kept is that of the first name: the build's library. */
	lib = env != NULL && env[0] != '\0' ? env : h5_names[0];
	if ((dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		const char *e = dlerror();

		snprintf(h5.err, sizeof(h5.err), "%s", e != NULL ? e : lib);
		for (i = 1; lib != env && i < n && dl == NULL; i++)
			dl = dlopen(lib = h5_names[i], RTLD_NOW | RTLD_LOCAL);
		if (dl == NULL)
			return;
	}
#define H5_SYM(f)							\
	if (!h5_sym(dl, lib, "H5" #f, (void **)&h5.f))			\
		return;
	H5_FUNCS(H5_SYM)
#undef H5_SYM
	ids = dl;
	/*
	 * A program that links this same library itself and names an id
	 * may hold its own copy of the global (a copy relocation), which
	 * the library then uses; the global scope finds that one.
	 */
	if (dlsym(RTLD_DEFAULT, "H5open") == (void *)h5.open)
		ids = RTLD_DEFAULT;
#define H5_ID_SYM(g)							\
	if (!h5_sym(ids, lib, "H5" #g "_g", (void **)&h5.g))		\
		return;
	H5_IDS(H5_ID_SYM)
#undef H5_ID_SYM
	*(void **)&h5.Pset_file_locking = dlsym(dl, "H5Pset_file_locking");
	/* The library sets the globals of its ids as it starts. */
	if (h5.open() < 0) {
		snprintf(h5.err, sizeof(h5.err), "%s did not start", lib);
		return;
	}
	h5.ok = 1;
}

/* Loads the HDF5 library once; fails, saying why, if it cannot. */
static enum tq_status
h5_load(void)
{
	pthread_once(&h5_once, h5_load_once);
	if (!h5.ok)
		return tq_fail(TQ_ERR_UNSUPPORTED, "reading HDF5 needs the "
		    "HDF5 library: %s", h5.err);
	return TQ_OK;
}

/* From here on the HDF5 names are the loaded library's. */
#define H5_CALL(f) (*h5.f)
#define H5Aclose H5_CALL(Aclose)
#define H5Aexists H5_CALL(Aexists)
#define H5Aget_space H5_CALL(Aget_space)
#define H5Aget_type H5_CALL(Aget_type)
#define H5Aopen H5_CALL(Aopen)
#define H5Aread H5_CALL(Aread)
#define H5Dclose H5_CALL(Dclose)
#define H5Dget_create_plist H5_CALL(Dget_create_plist)
#define H5Dget_num_chunks H5_CALL(Dget_num_chunks)
#define H5Dget_space H5_CALL(Dget_space)
#define H5Dget_storage_size H5_CALL(Dget_storage_size)
#define H5Dget_type H5_CALL(Dget_type)
#define H5Dopen2 H5_CALL(Dopen2)
#define H5Dread H5_CALL(Dread)
#define H5Eclear2 H5_CALL(Eclear2)
#define H5Eset_auto2 H5_CALL(Eset_auto2)
#define H5Ewalk2 H5_CALL(Ewalk2)
#define H5Fclose H5_CALL(Fclose)
#define H5Fopen H5_CALL(Fopen)
#define H5Gget_info H5_CALL(Gget_info)
#define H5Iget_type H5_CALL(Iget_type)
#define H5Lexists H5_CALL(Lexists)
#define H5Lget_info H5_CALL(Lget_info)
#define H5Lget_name_by_idx H5_CALL(Lget_name_by_idx)
#define H5Oclose H5_CALL(Oclose)
#define H5Oopen H5_CALL(Oopen)
#define H5Pclose H5_CALL(Pclose)
#define H5Pcreate H5_CALL(Pcreate)
#define H5Pget_chunk H5_CALL(Pget_chunk)
#define H5Pget_external_count H5_CALL(Pget_external_count)
#define H5Pget_layout H5_CALL(Pget_layout)
#define H5Pset_fclose_degree H5_CALL(Pset_fclose_degree)
#define H5Sclose H5_CALL(Sclose)
#define H5Screate_simple H5_CALL(Screate_simple)
#define H5Sget_simple_extent_dims H5_CALL(Sget_simple_extent_dims)
#define H5Sget_simple_extent_ndims H5_CALL(Sget_simple_extent_ndims)
#define H5Sget_simple_extent_npoints H5_CALL(Sget_simple_extent_npoints)
#define H5Sselect_hyperslab H5_CALL(Sselect_hyperslab)
#define H5Tclose H5_CALL(Tclose)
#define H5Tcopy H5_CALL(Tcopy)
#define H5Tget_class H5_CALL(Tget_class)
#define H5Tget_cset H5_CALL(Tget_cset)
#define H5Tget_sign H5_CALL(Tget_sign)
#define H5Tget_size H5_CALL(Tget_size)
#define H5Tis_variable_str H5_CALL(Tis_variable_str)
#define H5Tset_cset H5_CALL(Tset_cset)
#define H5Tset_size H5_CALL(Tset_size)
#define H5Tset_strpad H5_CALL(Tset_strpad)
#define H5free_memory H5_CALL(free_memory)
#undef H5T_NATIVE_FLOAT
#undef H5T_NATIVE_DOUBLE
#undef H5T_NATIVE_INT32
#undef H5T_NATIVE_INT64
#undef H5T_NATIVE_UINT64
#undef H5T_C_S1
#undef H5P_FILE_ACCESS
#undef H5F_ACC_RDONLY
#define H5T_NATIVE_FLOAT (*h5.T_NATIVE_FLOAT)
#define H5T_NATIVE_DOUBLE (*h5.T_NATIVE_DOUBLE)
#define H5T_NATIVE_INT32 (*h5.T_NATIVE_INT32)
#define H5T_NATIVE_INT64 (*h5.T_NATIVE_INT64)
#define H5T_NATIVE_UINT64 (*h5.T_NATIVE_UINT64)
#define H5T_C_S1 (*h5.T_C_S1)
#define H5P_FILE_ACCESS (*h5.P_CLS_FILE_ACCESS_ID)
/* The headers' flag also checks the version of a linked library. */
#define H5F_ACC_RDONLY 0x0000u

/* Rows of 8-byte values converted per step through the scratch buffer. */
#define SCRATCH_BYTES ((size_t)1 << 20)

/* How values travel from the file into memory. */
enum h5mem { M_F32, M_F64, M_I32, M_I64, M_U64 };

struct tq_h5 {
	hid_t file, dset, space;
	char name[64];		/* dataset name, for details */
	uint32_t dim;
	uint64_t n;
	enum h5mem mem;
	int is_integer;
	void *scratch;
	size_t scratch_rows;
};

static void
h5_quiet(void)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static herr_t
h5_first_desc(unsigned n, const H5E_error2_t *e, void *arg)
{
	char *out = arg;

	if (n == 0 && e->desc != NULL)
		snprintf(out, 160, "%s", e->desc);
	return 0;
}

/* tq_fail with the innermost HDF5 error message appended. */
static enum tq_status
h5_fail(enum tq_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static enum tq_status
h5_fail(enum tq_status st, const char *fmt, ...)
{
	char what[256], desc[160] = "";
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5_first_desc, desc);
	H5Eclear2(H5E_DEFAULT);
	if (desc[0] != '\0')
		return tq_fail(st, "%s (HDF5: %s)", what, desc);
	return tq_fail(st, "%s", what);
}

static void
h5_close_id(hid_t *id, herr_t (*fn)(hid_t))
{
	if (*id >= 0)
		fn(*id);
	*id = -1;
}

static hid_t
h5_open_file(const char *path)
{
	hid_t fapl, f;

	if ((fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0)
		return -1;
	H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
	/* Reading needs no lock; some file systems refuse them (1.10.7). */
	if (h5.Pset_file_locking != NULL)
		h5.Pset_file_locking(fapl, 0, 1);
	f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	H5Pclose(fapl);
	return f;
}

/* Is `name` a hard link in the root group? */
static int
h5_hard_link(hid_t file, const char *name)
{
	H5L_info_t li;

	if (strchr(name, '/') != NULL || strcmp(name, ".") == 0)
		return 0;
	if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
		return 0;
	if (H5Lget_info(file, name, &li, H5P_DEFAULT) < 0)
		return 0;
	return li.type == H5L_TYPE_HARD;
}

/* "train, test, ..." : the datasets of the root group, for a detail. */
static void
h5_list(hid_t file, char *out, size_t cap)
{
	H5G_info_t gi;
	hsize_t i;
	size_t len = 0;

	out[0] = '\0';
	if (H5Gget_info(file, &gi) < 0)
		return;
	for (i = 0; i < gi.nlinks && i < 256; i++) {
		char name[64];
		ssize_t k;
		hid_t o;
		int isdata;

		k = H5Lget_name_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC,
		    i, name, sizeof(name), H5P_DEFAULT);
		if (k <= 0 || (size_t)k >= sizeof(name) ||
		    !h5_hard_link(file, name))
			continue;
		if ((o = H5Oopen(file, name, H5P_DEFAULT)) < 0)
			continue;
		isdata = H5Iget_type(o) == H5I_DATASET;
		H5Oclose(o);
		if (!isdata || len + (size_t)k + 3 >= cap)
			continue;
		len += (size_t)snprintf(out + len, cap - len, "%s%s",
		    len ? ", " : "", name);
	}
	H5Eclear2(H5E_DEFAULT);
}

/* Refuses layouts that read other files or that are not all there. */
static enum tq_status
h5_check_storage(struct tq_h5 *h, const hsize_t dims[2], size_t esz)
{
	enum tq_status st = TQ_OK;
	hid_t dcpl = H5Dget_create_plist(h->dset);
	H5D_layout_t layout;
	hsize_t cdims[2], want, have;

	if (dcpl < 0)
		return h5_fail(TQ_ERR_FORMAT, "dataset '%s': no creation "
		    "properties", h->name);
	layout = H5Pget_layout(dcpl);
	if (H5Pget_external_count(dcpl) != 0 || layout == H5D_VIRTUAL) {
		st = tq_fail(TQ_ERR_UNSUPPORTED, "dataset '%s' keeps its data "
		    "in other files", h->name);
	} else if (layout == H5D_CHUNKED) {
#if H5_VERSION_GE(1, 10, 5)
		if (H5Pget_chunk(dcpl, 2, cdims) != 2 || cdims[0] == 0 ||
		    cdims[1] == 0) {
			st = h5_fail(TQ_ERR_FORMAT, "dataset '%s': bad chunk "
			    "layout", h->name);
		} else {
			want = ((dims[0] + cdims[0] - 1) / cdims[0]) *
			    ((dims[1] + cdims[1] - 1) / cdims[1]);
			if (H5Dget_num_chunks(h->dset, h->space, &have) < 0 ||
			    have < want)
				st = h5_fail(TQ_ERR_FORMAT, "dataset '%s' is "
				    "incomplete (unwritten chunks)", h->name);
		}
#else
		(void)cdims;
		(void)want;
		(void)have;
#endif
	} else if (layout == H5D_CONTIGUOUS) {
		have = H5Dget_storage_size(h->dset);
		want = dims[0] * dims[1] * esz;
		if (have < want)
			st = tq_fail(TQ_ERR_FORMAT, "dataset '%s' is incomplete "
			    "(%llu of %llu bytes stored)", h->name,
			    (unsigned long long)have, (unsigned long long)want);
	}
	H5Pclose(dcpl);
	return st;
}

static enum tq_status
h5_type(struct tq_h5 *h, size_t *esz)
{
	hid_t t = H5Dget_type(h->dset);
	H5T_class_t cls;
	H5T_sign_t sign;
	size_t size;

	if (t < 0)
		return h5_fail(TQ_ERR_FORMAT, "dataset '%s': no type", h->name);
	cls = H5Tget_class(t);
	size = H5Tget_size(t);
	sign = H5Tget_sign(t);
	H5Tclose(t);
	*esz = size;
	if (cls == H5T_FLOAT && size >= 2 && size <= 16) {
		h->mem = size <= 4 ? M_F32 : M_F64;
		h->is_integer = 0;
	} else if (cls == H5T_INTEGER && size >= 1 && size <= 8) {
		h->is_integer = 1;
		if (sign == H5T_SGN_2)
			h->mem = size <= 4 ? M_I32 : M_I64;
		else
			h->mem = size <= 2 ? M_I32 : size <= 4 ? M_I64 :
			    M_U64;
	} else {
		return tq_fail(TQ_ERR_UNSUPPORTED, "dataset '%s' holds neither "
		    "floats nor integers", h->name);
	}
	return TQ_OK;
}

static enum tq_status
h5_open(struct tq_h5 *h, const char *path, const char *dataset)
{
	hsize_t dims[2];
	size_t esz = 0;
	int nd;
	char names[256];

	if (strlen(dataset) >= sizeof(h->name))
		return tq_fail(TQ_ERR_ARG, "dataset name too long");
	snprintf(h->name, sizeof(h->name), "%s", dataset);
	if ((h->file = h5_open_file(path)) < 0)
		return h5_fail(TQ_ERR_FORMAT, "not a readable HDF5 file");
	if (*dataset == '\0' || !h5_hard_link(h->file, dataset)) {
		h5_list(h->file, names, sizeof(names));
		return tq_fail(TQ_ERR_FORMAT, "no dataset '%s' (has: %s)",
		    dataset, names[0] ? names : "none");
	}
	if ((h->dset = H5Dopen2(h->file, dataset, H5P_DEFAULT)) < 0)
		return h5_fail(TQ_ERR_FORMAT, "'%s' is not a dataset",
		    dataset);
	if ((h->space = H5Dget_space(h->dset)) < 0)
		return h5_fail(TQ_ERR_FORMAT, "dataset '%s': no dataspace",
		    dataset);
	nd = H5Sget_simple_extent_ndims(h->space);
	if (nd != 2)
		return tq_fail(TQ_ERR_UNSUPPORTED, "dataset '%s' has %d "
		    "dimensions (expected 2)", dataset, nd < 0 ? 0 : nd);
	if (H5Sget_simple_extent_dims(h->space, dims, NULL) != 2)
		return h5_fail(TQ_ERR_FORMAT, "dataset '%s': bad dataspace",
		    dataset);
	if (dims[1] == 0)
		return tq_fail(TQ_ERR_FORMAT, "dataset '%s' has rows of "
		    "dimension 0", dataset);
	if (dims[1] > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_UNSUPPORTED, "dataset '%s' has rows of "
		    "dimension %llu (at most %u)", dataset,
		    (unsigned long long)dims[1], TQ_MAX_DIM);
	if (dims[0] == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	if (dims[0] > (hsize_t)INT64_MAX / TQ_MAX_DIM / 16)
		return tq_fail(TQ_ERR_FORMAT, "dataset '%s' claims %llu rows",
		    dataset, (unsigned long long)dims[0]);
	h->dim = (uint32_t)dims[1];
	h->n = dims[0];
	TQ_TRY(h5_type(h, &esz));
	return h5_check_storage(h, dims, esz);
}

enum tq_status
tq_h5_open(const char *path, const char *dataset, struct tq_h5 **out,
    uint32_t *dim, uint64_t *n, int *is_integer)
{
	struct tq_h5 *h;
	enum tq_status st;

	*out = NULL;
	TQ_TRY(h5_load());
	h5_quiet();
	if ((h = calloc(1, sizeof(*h))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	h->file = h->dset = h->space = -1;
	st = h5_open(h, path, dataset != NULL ? dataset : "train");
	if (st != TQ_OK) {
		tq_h5_close(h);
		return st;
	}
	*dim = h->dim;
	*n = h->n;
	*is_integer = h->is_integer;
	*out = h;
	return TQ_OK;
}

void
tq_h5_close(struct tq_h5 *h)
{
	if (h == NULL)
		return;
	h5_close_id(&h->space, H5Sclose);
	h5_close_id(&h->dset, H5Dclose);
	h5_close_id(&h->file, H5Fclose);
	H5Eclear2(H5E_DEFAULT);
	free(h->scratch);
	free(h);
}

static enum tq_status
h5_slab(struct tq_h5 *h, uint64_t row, size_t nrows, hid_t memtype,
    void *buf)
{
	hsize_t start[2] = { row, 0 }, count[2] = { nrows, h->dim };
	hid_t ms;
	herr_t e;

	if (H5Sselect_hyperslab(h->space, H5S_SELECT_SET, start, NULL, count,
	    NULL) < 0)
		return h5_fail(TQ_ERR_FORMAT, "dataset '%s': cannot select "
		    "rows %llu..%llu", h->name, (unsigned long long)row,
		    (unsigned long long)(row + nrows - 1));
	if ((ms = H5Screate_simple(2, count, NULL)) < 0)
		return h5_fail(TQ_ERR_NOMEM, "out of memory");
	e = H5Dread(h->dset, memtype, ms, h->space, H5P_DEFAULT, buf);
	H5Sclose(ms);
	if (e < 0)
		return h5_fail(TQ_ERR_FORMAT, "dataset '%s': cannot read rows "
		    "%llu..%llu", h->name, (unsigned long long)row,
		    (unsigned long long)(row + nrows - 1));
	return TQ_OK;
}

enum tq_status
tq_h5_read(struct tq_h5 *h, uint64_t row, size_t nrows, float *f,
    int32_t *i)
{
	size_t done, k, dim = h->dim;

	h5_quiet();
	if (f != NULL && h->mem != M_F64) {
		/* HDF5 converts integers to float exactly as a cast would. */
		TQ_TRY(h5_slab(h, row, nrows, H5T_NATIVE_FLOAT, f));
		if (h->is_integer)
			return TQ_OK;
		return tq_vec_check_finite(f, nrows, h->dim, row);
	}
	if (f == NULL && h->mem == M_I32)
		return h5_slab(h, row, nrows, H5T_NATIVE_INT32, i);
	if (f == NULL && !h->is_integer)
		return tq_fail(TQ_ERR_UNSUPPORTED, "dataset '%s' holds floats, "
		    "not integers", h->name);

	/* Values that need a range check pass through the scratch buffer. */
	if (h->scratch == NULL) {
		h->scratch_rows = SCRATCH_BYTES / (dim * 8);
		if (h->scratch_rows == 0)
			h->scratch_rows = 1;
		h->scratch = malloc(h->scratch_rows * dim * 8);
		if (h->scratch == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	for (done = 0; done < nrows; done += k) {
		k = nrows - done < h->scratch_rows ? nrows - done :
		    h->scratch_rows;
		if (h->mem == M_F64) {
			TQ_TRY(h5_slab(h, row + done, k, H5T_NATIVE_DOUBLE,
			    h->scratch));
			TQ_TRY(tq_vec_f64_to_f32(h->scratch, k, h->dim,
			    row + done, f + done * dim));
		} else if (h->mem == M_I64) {
			TQ_TRY(h5_slab(h, row + done, k, H5T_NATIVE_INT64,
			    h->scratch));
			TQ_TRY(tq_vec_i64_to_i32(h->scratch, k, h->dim,
			    row + done, i + done * dim));
		} else {
			TQ_TRY(h5_slab(h, row + done, k, H5T_NATIVE_UINT64,
			    h->scratch));
			TQ_TRY(tq_vec_u64_to_i32(h->scratch, k, h->dim,
			    row + done, i + done * dim));
		}
	}
	return TQ_OK;
}

/* Reads one string (fixed or variable length) from an attribute. */
static enum tq_status
h5_attr_read(hid_t attr, const char *name, char *buf, size_t len)
{
	enum tq_status st = TQ_OK;
	hid_t type = -1, space = -1, mt = -1;
	char *s = NULL, *tmp = NULL;
	size_t size;

	if ((type = H5Aget_type(attr)) < 0 ||
	    (space = H5Aget_space(attr)) < 0) {
		st = h5_fail(TQ_ERR_FORMAT, "attribute '%s' is unreadable",
		    name);
		goto out;
	}
	if (H5Tget_class(type) != H5T_STRING) {
		st = tq_fail(TQ_ERR_FORMAT, "attribute '%s' is not a string",
		    name);
		goto out;
	}
	if (H5Sget_simple_extent_npoints(space) != 1) {
		st = tq_fail(TQ_ERR_FORMAT, "attribute '%s' is not a single "
		    "string", name);
		goto out;
	}
	if ((mt = H5Tcopy(H5T_C_S1)) < 0 ||
	    H5Tset_cset(mt, H5Tget_cset(type)) < 0) {
		st = h5_fail(TQ_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (H5Tis_variable_str(type) > 0) {
		if (H5Tset_size(mt, H5T_VARIABLE) < 0 ||
		    H5Aread(attr, mt, &s) < 0 || s == NULL) {
			st = h5_fail(TQ_ERR_FORMAT, "attribute '%s' is "
			    "unreadable", name);
			goto out;
		}
	} else {
		size = H5Tget_size(type);
		if (size == 0 || size > 65536) {
			st = tq_fail(TQ_ERR_FORMAT, "attribute '%s' has a bad "
			    "size", name);
			goto out;
		}
		if ((tmp = malloc(size + 1)) == NULL) {
			st = tq_fail(TQ_ERR_NOMEM, "out of memory");
			goto out;
		}
		if (H5Tset_size(mt, size) < 0 ||
		    H5Tset_strpad(mt, H5T_STR_NULLPAD) < 0 ||
		    H5Aread(attr, mt, tmp) < 0) {
			st = h5_fail(TQ_ERR_FORMAT, "attribute '%s' is "
			    "unreadable", name);
			goto out;
		}
		tmp[size] = '\0';
	}
	if (strlen(s ? s : tmp) >= len) {
		st = tq_fail(TQ_ERR_OVERFLOW, "attribute '%s' is longer than "
		    "%zu bytes", name, len - 1);
		goto out;
	}
	strcpy(buf, s ? s : tmp);
out:
	if (s != NULL)
		H5free_memory(s);
	free(tmp);
	h5_close_id(&mt, H5Tclose);
	h5_close_id(&space, H5Sclose);
	h5_close_id(&type, H5Tclose);
	return st;
}

enum tq_status
tq_hdf5_attr_string(const char *path, const char *name, char *buf,
    size_t len)
{
	enum tq_status st;
	uint8_t sig[8];
	hid_t file, attr;
	ssize_t k;
	int fd;

	if (path == NULL || name == NULL || *name == '\0' || buf == NULL ||
	    len == 0)
		return tq_fail(TQ_ERR_ARG, "bad arguments");
	buf[0] = '\0';
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return tq_fail(TQ_ERR_IO, "open: %s", strerror(errno));
	do
		k = read(fd, sig, sizeof(sig));
	while (k < 0 && errno == EINTR);
	if (k < 0) {
		int saved = errno;

		close(fd);
		errno = saved;
		return tq_fail(TQ_ERR_IO, "read: %s", strerror(errno));
	}
	close(fd);
	if (k != 8 || memcmp(sig, TQ_HDF5_SIGNATURE, 8) != 0)
		return tq_fail(TQ_ERR_FORMAT, "not an HDF5 file");
	TQ_TRY(h5_load());
	h5_quiet();
	if ((file = h5_open_file(path)) < 0)
		return h5_fail(TQ_ERR_FORMAT, "not a readable HDF5 file");
	if (H5Aexists(file, name) <= 0) {
		H5Fclose(file);
		H5Eclear2(H5E_DEFAULT);
		return tq_fail(TQ_ERR_FORMAT, "no attribute '%s'", name);
	}
	if ((attr = H5Aopen(file, name, H5P_DEFAULT)) < 0) {
		st = h5_fail(TQ_ERR_FORMAT, "attribute '%s' is unreadable",
		    name);
	} else {
		st = h5_attr_read(attr, name, buf, len);
		H5Aclose(attr);
	}
	H5Fclose(file);
	H5Eclear2(H5E_DEFAULT);
	return st;
}

/* ------------------------------------------------------------------------ */
/* The reader format                                                         */

static int
hdf5_bid(const struct tq_sniff *sn)
{
	return sn->avail >= 8 && memcmp(sn->p, TQ_HDF5_SIGNATURE, 8) == 0 ?
	    TQ_BID_MAGIC : 0;
}

static enum tq_status
hdf5_open(struct tq_reader *r, const char *path, const char *dataset)
{
	struct tq_h5 *h;
	uint64_t n;

	if (r->src.zd != NULL)
		return tq_fail(TQ_ERR_UNSUPPORTED,
		    "HDF5 inside zstd is not supported");
	if (strcmp(path, "-") == 0 || !r->src.regular)
		return tq_fail(TQ_ERR_UNSUPPORTED, "HDF5 input must be "
		    "a regular file, not a pipe or standard input");
	/* The HDF5 library opens the file by name itself. */
	tq_src_close(&r->src);
	TQ_TRY(tq_h5_open(path, dataset, &h, &r->dim, &n, &r->is_integer));
	r->priv = h;
	r->claimed = n;
	r->count = (int64_t)n;
	return TQ_OK;
}

static enum tq_status
hdf5_read(struct tq_reader *r, float *f, int32_t *iv, size_t max,
    size_t *got)
{
	size_t k = max;

	if (k > r->claimed - r->row)
		k = (size_t)(r->claimed - r->row);
	if (k > 0)
		TQ_TRY(tq_h5_read(r->priv, r->row, k, f, iv));
	r->row += k;
	*got = k;
	return TQ_OK;
}

static void
hdf5_close(struct tq_reader *r)
{
	tq_h5_close(r->priv);
	r->priv = NULL;
}

const struct tq_rformat tq_rformat_hdf5 = {
	.name = "hdf5",
	.bid = hdf5_bid,
	.open = hdf5_open,
	.read = hdf5_read,
	.close = hdf5_close,
	.window = TQ_WIN_ROWS,
};
