/* ckpt.c - HDF5 checkpoints: atomic save, chunk CRC-32C, slice reads,
 * `latest`/`auto` resolution, attributes (see ckpt.h for the layout).
 *
 * Tensors are contiguous HDF5 datasets with their full logical shape; a flat
 * element range maps to a union of at most 2*ndim hyperslabs, which HDF5
 * walks in row-major order, so one H5Dread/H5Dwrite moves it to or from a
 * contiguous buffer.  HDF5's own error stack is silenced and translated into
 * one line that names the file and the dataset.
 *
 * The parallel writer (ds_ckpt_create_comm with more than one rank) opens
 * the one state.h5 of the save with the MPI-IO driver (ckpt_mpio.c):
 * metadata calls are collective, every rank writes its own range of a
 * tensor in one collective H5Dwrite, and commit gathers the CRC pieces,
 * closes the file together and votes before rank 0 renames anything.
 */
#include "config.h"

#include "io/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt_int.h"
#include "util/crc32c.h"
#include "util/log.h"

#define piece ds_ckpt_crc_piece  /* the public record, ckpt.h */

struct wtensor {
	char *name;
	int dtype, ndim;
	size_t es;
	uint64_t numel, chunk_bytes;
	hsize_t shape[DS_CKPT_MAX_DIMS];
	hid_t dset;
	struct piece *p;
	size_t np, cap;
};

struct ds_ckpt {
	int writing, committed;
	char *save_dir;  /* writer: SAVE; reader: the load directory */
	char *tag;
	char *dir;       /* directory holding state.h5 (SAVE/tag.tmp while writing) */
	char *file;      /* .../state.h5 */
	hid_t f;
	size_t chunk_bytes;
	struct wtensor *t;
	size_t nt, capt, last;
	char *m_dtype, *m_config, *m_model;  /* meta strings handed out by meta_get */
	uint8_t *tmp;                        /* one chunk, for partial chunks */
	size_t tmp_size;
	/* writer: the ranks writing this file (comm NULL: this process alone) */
	struct ds_comm *comm;
	int par, rank;       /* par: more than one rank, MPI-IO */
	hid_t dxpl;          /* collective transfer (par) or H5P_DEFAULT */
	int wrc;             /* this rank's first failure while writing (0: none) */
	struct ds_err werr;  /* and its message, for commit's vote */
	int fault_rank;      /* DS_TEST_FAULT_CKPT_FAIL_RANK, -1 off */
};

static int reserve_pieces(struct wtensor *w, size_t n, struct ds_err *err);

/* Bytes moved per H5Dread/H5Dwrite when streaming whole chunks: small
 * enough that the CRC pass finds them in cache, large enough to amortise
 * the call. */
enum { RUN_BYTES = 4 << 20 };

/* ---- small helpers ----------------------------------------------------- */

static char *join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s/%s", a, b);
	return s;
}

/* The innermost HDF5 error description (the most specific), or "". */
static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *ud)
{
	char *buf = ud;
	if (n == 0 && e->desc)
		snprintf(buf, 160, "%s", e->desc);
	return 0;
}

static const char *h5msg(char *buf)
{
	buf[0] = '\0';
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, buf);
	H5Eclear2(H5E_DEFAULT);
	return buf;
}

static void h5_quiet(void)
{
	/* HDF5 prints its error stack by default; libds never prints. */
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* File access: on a file system without flock (Lustre and NFS mounts often
 * lack it) HDF5 >= 1.10.7 can go on unlocked instead of failing; our
 * writers never share a file with a reader (.tmp + rename), so locking is
 * only a courtesy.  New files use the 1.8 object format: dense attribute
 * storage lets a crc32c array exceed 64 KiB (a tensor over 16 GiB). */
static hid_t make_fapl(int create)
{
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
	H5Pset_file_locking(fapl, 1, 1);
#endif
	if (create)
		H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
	return fapl;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

static int rm_rf(const char *p)
{
	struct stat st;
	if (lstat(p, &st) != 0)
		return errno == ENOENT ? 0 : -1;
	return nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int fsync_path(const char *p)
{
	int fd = open(p, O_RDONLY | O_CLOEXEC), rc;
	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

static int mkdir_p(const char *dir, struct ds_err *err)
{
	char *s = strdup(dir);
	if (!s)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (char *p = s + 1; ; p++) {
		if (*p == '/' || *p == '\0') {
			char c = *p;
			*p = '\0';
			if (mkdir(s, 0777) != 0 && errno != EEXIST) {
				int e = errno;
				free(s);
				return ds_err_set(err, DS_EIO, "%s: cannot create directory: %s", dir, strerror(e));
			}
			*p = c;
			if (!c)
				break;
		}
	}
	free(s);
	return 0;
}

static const char *skip_slash(const char *s)
{
	while (*s == '/')
		s++;
	return s;
}

size_t ds_ckpt_dtype_size(int dtype)
{
	switch (dtype) {
	case DS_CKPT_F32: case DS_CKPT_I32: return 4;
	case DS_CKPT_F64: case DS_CKPT_I64: return 8;
	case DS_CKPT_F16: case DS_CKPT_BF16: return 2;
	case DS_CKPT_U8: return 1;
	default: return 0;
	}
}

static const char *const dtype_names[] = { "f32", "f64", "f16", "bf16", "i32", "i64", "u8" };

const char *ds_ckpt_dtype_name(int dtype)
{
	return dtype >= 0 && dtype <= DS_CKPT_U8 ? dtype_names[dtype] : "?";
}

static int dtype_from_name(const char *s)
{
	for (int i = 0; i <= DS_CKPT_U8; i++)
		if (strcmp(s, dtype_names[i]) == 0)
			return i;
	return -1;
}

static hid_t file_type(int dtype)
{
	switch (dtype) {
	case DS_CKPT_F32: return H5T_IEEE_F32LE;
	case DS_CKPT_F64: return H5T_IEEE_F64LE;
	case DS_CKPT_F16: case DS_CKPT_BF16: return H5T_STD_U16LE;
	case DS_CKPT_I32: return H5T_STD_I32LE;
	case DS_CKPT_I64: return H5T_STD_I64LE;
	default: return H5T_STD_U8LE;
	}
}

static hid_t mem_type(int dtype)
{
	switch (dtype) {
	case DS_CKPT_F32: return H5T_NATIVE_FLOAT;
	case DS_CKPT_F64: return H5T_NATIVE_DOUBLE;
	case DS_CKPT_F16: case DS_CKPT_BF16: return H5T_NATIVE_UINT16;
	case DS_CKPT_I32: return H5T_NATIVE_INT32;
	case DS_CKPT_I64: return H5T_NATIVE_INT64;
	default: return H5T_NATIVE_UINT8;
	}
}

/* ---- CRC combination (zlib's crc32_combine, for the Castagnoli poly) --- */

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;
	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		sq[n] = gf2_times(mat, mat[n]);
}

uint32_t ds_ckpt_crc_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	uint32_t even[32], odd[32], row = 1;
	if (len_b == 0)
		return crc_a;
	/* odd: the operator for one zero bit */
	odd[0] = 0x82f63b78u;
	for (int n = 1; n < 32; n++, row <<= 1)
		odd[n] = row;
	gf2_square(even, odd);  /* two zero bits */
	gf2_square(odd, even);  /* four zero bits */
	do {  /* apply len_b zero bytes to crc_a */
		gf2_square(even, odd);
		if (len_b & 1)
			crc_a = gf2_times(even, crc_a);
		len_b >>= 1;
		if (!len_b)
			break;
		gf2_square(odd, even);
		if (len_b & 1)
			crc_a = gf2_times(odd, crc_a);
		len_b >>= 1;
	} while (len_b);
	return crc_a ^ crc_b;
}

/* ---- selections -------------------------------------------------------- */

/* Add to space the elements [b, e) (relative to the block of dims k.. at
 * coordinate prefix start[0..k)) as at most 2*(ndim-k) hyperslabs. */
static herr_t sel_rec(hid_t space, int ndim, const hsize_t *shape, int k, hsize_t *start, hsize_t b, hsize_t e,
		      int *first)
{
	hsize_t row = 1, cnt[DS_CKPT_MAX_DIMS];
	herr_t rc = 0;
	if (b >= e)
		return 0;
	for (int j = k + 1; j < ndim; j++)
		row *= shape[j];
	if (k == ndim - 1 || (b % row == 0 && e % row == 0)) {
		/* whole rows b/row .. e/row of dim k, everything below */
		for (int j = 0; j < ndim; j++)
			cnt[j] = j < k ? 1 : shape[j];
		start[k] = b / row;
		cnt[k] = (e - b) / row;
		for (int j = k + 1; j < ndim; j++)
			start[j] = 0;
		rc = H5Sselect_hyperslab(space, *first ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, cnt, NULL);
		*first = 0;
		return rc;
	}
	hsize_t r0 = b / row, r1 = (e - 1) / row;
	if (r0 == r1) {
		start[k] = r0;
		return sel_rec(space, ndim, shape, k + 1, start, b - r0 * row, e - r0 * row, first);
	}
	if (b % row) {  /* head: a partial row */
		start[k] = r0;
		if ((rc = sel_rec(space, ndim, shape, k + 1, start, b - r0 * row, row, first)) < 0)
			return rc;
		b = (r0 + 1) * row;
	}
	if (e / row > b / row) {  /* full rows */
		hsize_t fe = (e / row) * row;
		if ((rc = sel_rec(space, ndim, shape, k, start, b, fe, first)) < 0)
			return rc;
		b = fe;
	}
	if (b < e) {  /* tail */
		start[k] = b / row;
		rc = sel_rec(space, ndim, shape, k + 1, start, 0, e - b, first);
	}
	return rc;
}

/* Move elements [b, e) of dset to (write) or from (read) buf, with the
 * transfer properties dxpl.  An empty range moves nothing, except that a
 * collective write (dxpl not H5P_DEFAULT) still joins the other ranks' call
 * with an empty selection. */
static herr_t xfer(hid_t dset, hid_t mtype, int ndim, const hsize_t *shape, hsize_t b, hsize_t e, void *buf,
		   int write, hid_t dxpl)
{
	hsize_t start[DS_CKPT_MAX_DIMS] = { 0 }, n = e > b ? e - b : 0, one = 1;
	hid_t fs, ms;
	herr_t rc = 0;
	int first = 1;
	if (n == 0 && (dxpl == H5P_DEFAULT || !write))
		return 0;
	fs = H5Dget_space(dset);
	if (fs < 0)
		return -1;
	if (n)
		rc = sel_rec(fs, ndim, shape, 0, start, b, e, &first);
	else
		rc = H5Sselect_none(fs);
	ms = H5Screate_simple(1, n ? &n : &one, NULL);
	if (!n && ms >= 0 && H5Sselect_none(ms) < 0)
		rc = -1;
	if (rc >= 0 && ms >= 0)
		rc = write ? H5Dwrite(dset, mtype, ms, fs, dxpl, buf) : H5Dread(dset, mtype, ms, fs, dxpl, buf);
	else
		rc = -1;
	if (ms >= 0)
		H5Sclose(ms);
	H5Sclose(fs);
	return rc;
}

/* ---- attributes --------------------------------------------------------- */

static herr_t attr_put(hid_t obj, const char *key, hid_t ftype, hid_t mtype, hid_t space, const void *buf)
{
	hid_t a;
	herr_t rc;
	if (H5Aexists(obj, key) > 0 && H5Adelete(obj, key) < 0)
		return -1;
	a = H5Acreate2(obj, key, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
	if (a < 0)
		return -1;
	rc = H5Awrite(a, mtype, buf);
	H5Aclose(a);
	return rc;
}

static herr_t attr_put_scalar(hid_t obj, const char *key, hid_t ftype, hid_t mtype, const void *v)
{
	hid_t s = H5Screate(H5S_SCALAR);
	herr_t rc = attr_put(obj, key, ftype, mtype, s, v);
	H5Sclose(s);
	return rc;
}

static herr_t attr_put_str(hid_t obj, const char *key, const char *v)
{
	hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR);
	herr_t rc;
	const char *p = v ? v : "";
	H5Tset_size(t, H5T_VARIABLE);
	H5Tset_cset(t, H5T_CSET_UTF8);
	rc = attr_put(obj, key, t, t, s, &p);
	H5Tclose(t);
	H5Sclose(s);
	return rc;
}

/* Read a one-element numeric attribute converted to mtype.  1 ok, 0 missing,
 * -1 bad. */
static int attr_get_num(hid_t obj, const char *key, hid_t mtype, void *v)
{
	hid_t a, s;
	int rc = -1;
	if (H5Aexists(obj, key) <= 0)
		return 0;
	a = H5Aopen(obj, key, H5P_DEFAULT);
	if (a < 0)
		return -1;
	s = H5Aget_space(a);
	if (s >= 0 && H5Sget_simple_extent_npoints(s) == 1 && H5Aread(a, mtype, v) >= 0)
		rc = 1;
	if (s >= 0)
		H5Sclose(s);
	H5Aclose(a);
	return rc;
}

/* Read a string attribute (fixed or variable length) into a malloc'd copy. */
static int attr_get_str(hid_t obj, const char *key, char **out)
{
	hid_t a, t, mt = -1;
	int rc = -1;
	*out = NULL;
	if (H5Aexists(obj, key) <= 0)
		return 0;
	a = H5Aopen(obj, key, H5P_DEFAULT);
	if (a < 0)
		return -1;
	t = H5Aget_type(a);
	if (t >= 0 && H5Tget_class(t) == H5T_STRING) {
		mt = H5Tcopy(H5T_C_S1);
		H5Tset_cset(mt, H5Tget_cset(t));  /* HDF5 converts no cset into another */
		if (H5Tis_variable_str(t) > 0) {
			char *p = NULL;
			H5Tset_size(mt, H5T_VARIABLE);
			if (H5Aread(a, mt, &p) >= 0) {
				*out = strdup(p ? p : "");
				H5free_memory(p);
				rc = *out ? 1 : -1;
			}
		} else {
			size_t n = H5Tget_size(t);
			char *buf = calloc(1, n + 1);
			H5Tset_size(mt, n + 1);
			H5Tset_strpad(mt, H5T_STR_NULLTERM);
			if (buf && H5Aread(a, mt, buf) >= 0) {
				*out = buf;
				rc = 1;
			} else {
				free(buf);
			}
		}
	}
	if (mt >= 0)
		H5Tclose(mt);
	if (t >= 0)
		H5Tclose(t);
	H5Aclose(a);
	return rc;
}

/* ---- groups --------------------------------------------------------------- */

/* Create every missing group on the path prefix of name up to `upto`
 * characters, tracking link creation order (so listings follow the
 * parameter registry). */
static int ensure_groups(struct ds_ckpt *c, const char *name, size_t upto, struct ds_err *err)
{
	char path[DS_CKPT_NAME_MAX];
	if (upto >= sizeof path)
		return ds_err_set(err, DS_EINVAL, "%s: name too long (%zu bytes)", c->file, upto);
	for (size_t i = 1; i <= upto; i++) {
		if (i < upto && name[i] != '/')
			continue;
		memcpy(path, name, i);
		path[i] = '\0';
		htri_t ex = H5Lexists(c->f, path, H5P_DEFAULT);
		if (ex > 0)
			continue;
		hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE), g;
		H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
		g = ex < 0 ? -1 : H5Gcreate2(c->f, path, H5P_DEFAULT, gcpl, H5P_DEFAULT);
		H5Pclose(gcpl);
		if (g < 0) {
			char m[160];
			return ds_err_set(err, DS_EIO, "%s: cannot create group /%s: %s", c->file, path, h5msg(m));
		}
		H5Gclose(g);
	}
	return 0;
}

static hid_t open_obj(struct ds_ckpt *c, const char *group)
{
	group = skip_slash(group ? group : "");
	if (!*group)
		return H5Oopen(c->f, "/", H5P_DEFAULT);
	if (H5Lexists(c->f, group, H5P_DEFAULT) <= 0)
		return -1;
	return H5Oopen(c->f, group, H5P_DEFAULT);
}

/* ---- writer ----------------------------------------------------------------- */

static int write_meta(struct ds_ckpt *c, const struct ds_ckpt_meta *m, struct ds_err *err)
{
	hid_t r = H5Gopen2(c->f, "/", H5P_DEFAULT);
	int64_t ver = DS_CKPT_FORMAT_VERSION;
	herr_t rc = r < 0 ? -1 : 0;
	char msg[160];
	if (rc >= 0) rc = attr_put_scalar(r, "format_version", H5T_STD_I64LE, H5T_NATIVE_INT64, &ver);
	if (rc >= 0) rc = attr_put_scalar(r, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &m->step);
	if (rc >= 0) rc = attr_put_scalar(r, "consumed_samples", H5T_STD_I64LE, H5T_NATIVE_INT64, &m->consumed_samples);
	if (rc >= 0) rc = attr_put_scalar(r, "world_size", H5T_STD_I64LE, H5T_NATIVE_INT64, &m->world_size);
	if (rc >= 0) rc = attr_put_scalar(r, "zero_stage", H5T_STD_I64LE, H5T_NATIVE_INT64, &m->zero_stage);
	if (rc >= 0) rc = attr_put_str(r, "dtype", m->dtype ? m->dtype : "fp32");
	if (rc >= 0) rc = attr_put_str(r, "config_json", m->config_json);
	if (rc >= 0) rc = attr_put_str(r, "model_json", m->model_json);
	if (rc >= 0) rc = attr_put_str(r, "dstk_version", PACKAGE_VERSION);
	if (r >= 0)
		H5Gclose(r);
	if (rc < 0)
		return ds_err_set(err, DS_EIO, "%s: cannot write the root attributes: %s", c->file, h5msg(msg));
	return 0;
}

/* Remember this rank's first failure as a parallel writer (commit's vote
 * reports it; a serial caller simply stops at an error); returns rc. */
static int note(struct ds_ckpt *c, int rc, const struct ds_err *err)
{
	if (rc < 0 && c->par && c->wrc == 0) {
		c->wrc = rc;
		if (err)
			c->werr = *err;
		else
			ds_err_set(&c->werr, rc, "%s: a write failed", c->file);
	}
	return rc;
}

/* Every rank learns whether all succeeded: 1 all did, 0 one failed (then
 * *bad is the lowest failing rank).  A failed collective counts as a failure. */
static int all_ok(struct ds_ckpt *c, int ok, int *bad)
{
	int64_t v = ok ? INT64_MAX : c->rank;
	if (!c->par) {
		*bad = ok ? -1 : c->rank;
		return ok;
	}
	if (ds_comm_allreduce(c->comm, &v, 1, DS_I64, DS_MIN, NULL) < 0)
		v = c->rank;
	*bad = v == INT64_MAX ? -1 : (int)v;
	return v == INT64_MAX;
}

int ds_ckpt_create(struct ds_ckpt **out, const char *save_dir, const struct ds_ckpt_meta *meta, struct ds_err *err)
{
	return ds_ckpt_create_comm(out, save_dir, meta, NULL, err);
}

int ds_ckpt_create_comm(struct ds_ckpt **out, const char *save_dir, const struct ds_ckpt_meta *meta,
			struct ds_comm *comm, struct ds_err *err)
{
	static const char *const groups[] = { "model", "optimizer", "scheduler", "loss_scaler", "data", "rng" };
	struct ds_ckpt *c;
	char tag[64], msg[160];
	int rc = 0, bad;
	*out = NULL;
	h5_quiet();
	if (!save_dir || !*save_dir)
		return ds_err_set(err, DS_EINVAL, "no checkpoint directory given (--save DIR)");
	if (meta->step < 0)
		return ds_err_set(err, DS_EINVAL, "%s: step %lld is negative", save_dir, (long long)meta->step);
	c = calloc(1, sizeof *c);
	if (!c)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	c->writing = 1;
	c->f = -1;
	c->dxpl = H5P_DEFAULT;
	c->chunk_bytes = DS_CKPT_CHUNK_BYTES;
	c->comm = comm;
	c->par = comm && ds_comm_size(comm) > 1;
	c->rank = comm ? ds_comm_rank(comm) : 0;
	{
		const char *f = getenv("DS_TEST_FAULT_CKPT_FAIL_RANK");
		c->fault_rank = f && *f ? atoi(f) : -1;
	}
	snprintf(tag, sizeof tag, "global_step%lld", (long long)meta->step);
	c->save_dir = strdup(save_dir);
	c->tag = strdup(tag);
	snprintf(tag + strlen(tag), sizeof tag - strlen(tag), ".tmp");
	c->dir = join(save_dir, tag);
	c->file = c->dir ? join(c->dir, "state.h5") : NULL;
	if (!c->save_dir || !c->tag || !c->file) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	if (c->par && !ds_ckpt_mpio_built) {
		rc = ds_ckpt_mpio_fapl(-1, comm, err);  /* says how to build it in */
		goto out;
	}
	/* rank 0 alone prepares the directory; the others learn how it went */
	if (c->rank == 0) {
		rc = mkdir_p(save_dir, err);
		if (rc == 0 && (rm_rf(c->dir) != 0 || mkdir(c->dir, 0777) != 0))
			rc = ds_err_set(err, DS_EIO, "%s: cannot create: %s", c->dir, strerror(errno));
	}
	if (!all_ok(c, rc == 0, &bad)) {
		if (rc == 0)
			rc = ds_err_set(err, DS_EIO, "%s: rank %d could not create the checkpoint directory", c->dir, bad);
		c->rank = -1;  /* nothing of ours to remove */
		goto out;
	}
	{
		hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = make_fapl(1);
		H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
		if (c->par && (rc = ds_ckpt_mpio_fapl(fapl, comm, err)) < 0) {
			H5Pclose(fcpl);
			H5Pclose(fapl);
			goto out;
		}
		c->f = H5Fcreate(c->file, H5F_ACC_TRUNC, fcpl, fapl);
		H5Pclose(fcpl);
		H5Pclose(fapl);
	}
	if (c->f < 0) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot create: %s", c->file, h5msg(msg));
		goto out;
	}
	if (c->par)
		c->dxpl = ds_ckpt_mpio_dxpl();
	rc = write_meta(c, meta, err);
	for (size_t i = 0; rc == 0 && i < sizeof groups / sizeof groups[0]; i++)
		rc = ensure_groups(c, groups[i], strlen(groups[i]), err);
out:
	if (rc < 0) {
		ds_ckpt_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

int ds_ckpt_set_chunk_bytes(struct ds_ckpt *c, size_t bytes, struct ds_err *err)
{
	if (bytes == 0 || bytes % 8)
		return ds_err_set(err, DS_EINVAL, "crc_chunk_bytes %zu must be a positive multiple of 8", bytes);
	c->chunk_bytes = bytes;
	return 0;
}

static struct wtensor *find_w(struct ds_ckpt *c, const char *name)
{
	for (size_t k = 0; k < c->nt; k++) {
		size_t i = (c->last + k) % c->nt;
		if (strcmp(c->t[i].name, name) == 0) {
			c->last = i;
			return &c->t[i];
		}
	}
	return NULL;
}

static int tensor_create(struct ds_ckpt *c, const char *name, int dtype, int ndim, const uint64_t *shape,
			 struct ds_err *err)
{
	struct wtensor *w;
	hid_t space, dcpl;
	const char *slash;
	char msg[160];
	name = skip_slash(name);
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: opened for reading; cannot create %s", c->file, name);
	if (!*name || strlen(name) >= DS_CKPT_NAME_MAX)
		return ds_err_set(err, DS_EINVAL, "%s: bad tensor name '%s'", c->file, name);
	if (!ds_ckpt_dtype_size(dtype) || ndim < 1 || ndim > DS_CKPT_MAX_DIMS)
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s: bad dtype %d or ndim %d", c->file, name, dtype, ndim);
	if (find_w(c, name))
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s created twice", c->file, name);
	if (c->nt == c->capt) {
		size_t cap = c->capt ? 2 * c->capt : 64;
		struct wtensor *t = realloc(c->t, cap * sizeof *t);
		if (!t)
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		c->t = t;
		c->capt = cap;
	}
	w = &c->t[c->nt];
	memset(w, 0, sizeof *w);
	w->dset = -1;
	w->dtype = dtype;
	w->ndim = ndim;
	w->es = ds_ckpt_dtype_size(dtype);
	w->chunk_bytes = c->chunk_bytes;
	w->numel = 1;
	for (int i = 0; i < ndim; i++) {
		w->shape[i] = shape[i];
		w->numel *= shape[i];
	}
	if (w->numel == 0)
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s has no elements", c->file, name);
	slash = strrchr(name, '/');
	if (slash)
		DS_TRY(ensure_groups(c, name, (size_t)(slash - name), err));
	w->name = strdup(name);
	if (!w->name)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	space = H5Screate_simple(ndim, w->shape, NULL);
	dcpl = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);  /* every byte is written once: no zero fill pass */
	w->dset = H5Dcreate2(c->f, name, file_type(dtype), space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
	H5Pclose(dcpl);
	H5Sclose(space);
	if (w->dset < 0) {
		free(w->name);
		return ds_err_set(err, DS_EIO, "%s: cannot create dataset /%s: %s", c->file, name, h5msg(msg));
	}
	uint64_t cb = w->chunk_bytes;
	if (attr_put_str(w->dset, "dtype", ds_ckpt_dtype_name(dtype)) < 0 ||
	    attr_put_scalar(w->dset, "crc_chunk_bytes", H5T_STD_U64LE, H5T_NATIVE_UINT64, &cb) < 0) {
		H5Dclose(w->dset);
		free(w->name);
		return ds_err_set(err, DS_EIO, "%s: /%s: cannot write attributes: %s", c->file, name, h5msg(msg));
	}
	c->last = c->nt++;
	return 0;
}

int ds_ckpt_tensor_create(struct ds_ckpt *c, const char *name, int dtype, int ndim, const uint64_t *shape,
			  struct ds_err *err)
{
	return note(c, tensor_create(c, name, dtype, ndim, shape, err), err);
}

/* The parallel write: CRC pieces of the whole range, then one collective
 * H5Dwrite that every rank joins (with an empty selection when it has
 * nothing to write, or when its range is bad or its test fault fires). */
static int write_par(struct ds_ckpt *c, struct wtensor *w, uint64_t begin, uint64_t end, const void *data,
		     struct ds_err *err)
{
	const uint8_t *p = data;
	char msg[160];
	int rc = 0;
	if (begin > end || end > w->numel) {
		rc = ds_err_set(err, DS_EINVAL, "%s: /%s: slice [%llu, %llu) outside its %llu elements", c->file,
				w->name, (unsigned long long)begin, (unsigned long long)end,
				(unsigned long long)w->numel);
	} else if (begin < end && c->fault_rank == c->rank && c->wrc == 0) {
		rc = ds_err_set(err, DS_EIO, "%s: /%s: rank %d: planted write failure (DS_TEST_FAULT_CKPT_FAIL_RANK)",
				c->file, w->name, c->rank);
	} else if (begin < end) {
		uint64_t bb = begin * w->es, be = end * w->es, cb = w->chunk_bytes;
		size_t k0 = w->np, nnew = (size_t)((be - 1) / cb - bb / cb + 1);
		if ((rc = reserve_pieces(w, nnew, err)) == 0) {
			#pragma omp parallel for schedule(dynamic, 1) if (nnew > 2)
			for (size_t k = 0; k < nnew; k++) {
				uint64_t ch = bb / cb + k, cs = ch * cb > bb ? ch * cb : bb;
				uint64_t ce = (ch + 1) * cb < be ? (ch + 1) * cb : be;
				w->p[k0 + k] = (struct piece){ ch, cs - ch * cb, ce - cs,
							       ds_crc32c(0, p + (cs - bb), (size_t)(ce - cs)), 0 };
			}
			w->np += nnew;
		}
	}
	if (rc < 0)
		begin = end = 0;  /* still join the collective write */
	if (xfer(w->dset, mem_type(w->dtype), w->ndim, w->shape, begin, end, (void *)(p ? p : (const uint8_t *)w),
		 1, c->dxpl) < 0 && rc == 0)
		rc = ds_err_set(err, DS_EIO, "%s: /%s: write of elements [%llu, %llu) failed: %s", c->file, w->name,
				(unsigned long long)begin, (unsigned long long)end, h5msg(msg));
	return note(c, rc, err);
}

int ds_ckpt_tensor_write(struct ds_ckpt *c, const char *name, uint64_t begin, uint64_t end, const void *data,
			 struct ds_err *err)
{
	struct wtensor *w;
	char msg[160];
	name = skip_slash(name);
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: not open for writing", c->file);
	w = find_w(c, name);
	if (!w)
		return note(c, ds_err_set(err, DS_EINVAL, "%s: tensor %s was not created", c->file, name), err);
	if (c->par)
		return write_par(c, w, begin, end, data, err);
	if (begin > end || end > w->numel)
		return ds_err_set(err, DS_EINVAL, "%s: /%s: slice [%llu, %llu) outside its %llu elements", c->file, name,
				  (unsigned long long)begin, (unsigned long long)end, (unsigned long long)w->numel);
	if (begin == end)
		return 0;
	if (c->fault_rank == c->rank && c->wrc == 0)
		return note(c, ds_err_set(err, DS_EIO, "%s: /%s: planted write failure (DS_TEST_FAULT_CKPT_FAIL_RANK)",
					  c->file, name), err);
	/* one piece per chunk the slice touches */
	const uint8_t *p = data;
	uint64_t bb = begin * w->es, be = end * w->es, cb = w->chunk_bytes;
	size_t k0 = w->np, nnew = (size_t)((be - 1) / cb - bb / cb + 1);
	DS_TRY(reserve_pieces(w, nnew, err));
	for (size_t k = 0; k < nnew; k++) {
		uint64_t ch = bb / cb + k, cs = ch * cb > bb ? ch * cb : bb, ce = (ch + 1) * cb < be ? (ch + 1) * cb : be;
		w->p[k0 + k] = (struct piece){ ch, cs - ch * cb, ce - cs, 0, 0 };
	}
	/* in runs of about RUN_BYTES: the threads share the chunk CRCs, then
	 * HDF5 copies the run out while it is still in cache */
	for (size_t k = 0; k < nnew; ) {
		size_t ke = k + 1;
		uint64_t bytes = w->p[k0 + k].len;
		while (ke < nnew && bytes + w->p[k0 + ke].len <= RUN_BYTES)
			bytes += w->p[k0 + ke++].len;
		#pragma omp parallel for schedule(dynamic, 1) if (ke - k > 2)
		for (size_t j = k; j < ke; j++) {
			struct piece *q = &w->p[k0 + j];
			q->crc = ds_crc32c(0, p + (q->chunk * cb + q->off - bb), (size_t)q->len);
		}
		/* piece bounds are chunk bounds or slice ends: whole elements */
		uint64_t rb = w->p[k0 + k].chunk * cb + w->p[k0 + k].off;
		uint64_t re = w->p[k0 + ke - 1].chunk * cb + w->p[k0 + ke - 1].off + w->p[k0 + ke - 1].len;
		if (xfer(w->dset, mem_type(w->dtype), w->ndim, w->shape, rb / w->es, re / w->es,
			 (void *)(p + (rb - bb)), 1, H5P_DEFAULT) < 0)
			return ds_err_set(err, DS_EIO, "%s: /%s: write of elements [%llu, %llu) failed: %s", c->file,
					  name, (unsigned long long)(rb / w->es), (unsigned long long)(re / w->es),
					  h5msg(msg));
		k = ke;
	}
	w->np += nnew;
	return 0;
}

/* Make room for n more pieces of w. */
static int reserve_pieces(struct wtensor *w, size_t n, struct ds_err *err)
{
	if (w->np + n <= w->cap)
		return 0;
	size_t cap = w->cap ? w->cap : 16;
	while (cap < w->np + n)
		cap *= 2;
	struct piece *np = realloc(w->p, cap * sizeof *np);
	if (!np)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	w->p = np;
	w->cap = cap;
	return 0;
}

int ds_ckpt_tensor_pieces(struct ds_ckpt *c, const char *name, const struct ds_ckpt_crc_piece **p, size_t *n,
			  struct ds_err *err)
{
	struct wtensor *w;
	*p = NULL;
	*n = 0;
	name = skip_slash(name);
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: not open for writing", c->file);
	if (!(w = find_w(c, name)))
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s was not created", c->file, name);
	*p = w->p;
	*n = w->np;
	return 0;
}

int ds_ckpt_tensor_add_pieces(struct ds_ckpt *c, const char *name, const struct ds_ckpt_crc_piece *p, size_t n,
			      struct ds_err *err)
{
	struct wtensor *w;
	name = skip_slash(name);
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: not open for writing", c->file);
	if (!(w = find_w(c, name)))
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s was not created", c->file, name);
	uint64_t total = w->numel * w->es, cb = w->chunk_bytes, nch = (total + cb - 1) / cb;
	for (size_t i = 0; i < n; i++) {
		uint64_t clen = p[i].chunk == nch - 1 ? total - p[i].chunk * cb : cb;
		if (p[i].chunk >= nch || p[i].len == 0 || p[i].off > clen || p[i].len > clen - p[i].off)
			return ds_err_set(err, DS_EINVAL, "%s: /%s: CRC piece (chunk %llu, bytes %llu+%llu) outside the "
					  "tensor's %llu chunks of %llu bytes", c->file, name,
					  (unsigned long long)p[i].chunk, (unsigned long long)p[i].off,
					  (unsigned long long)p[i].len, (unsigned long long)nch, (unsigned long long)cb);
	}
	DS_TRY(reserve_pieces(w, n, err));
	memcpy(w->p + w->np, p, n * sizeof *p);
	w->np += n;
	return 0;
}

int ds_ckpt_tensor_put(struct ds_ckpt *c, const char *name, int dtype, int ndim, const uint64_t *shape,
		       const void *data, struct ds_err *err)
{
	uint64_t n = 1;
	DS_TRY(ds_ckpt_tensor_create(c, name, dtype, ndim, shape, err));
	for (int i = 0; i < ndim; i++)
		n *= shape[i];
	return ds_ckpt_tensor_write(c, name, 0, n, data, err);
}

static int piece_cmp(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;
	if (x->chunk != y->chunk)
		return x->chunk < y->chunk ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Combine the pieces into one CRC per chunk and store them. */
static int finish_tensor(struct ds_ckpt *c, struct wtensor *w, struct ds_err *err)
{
	uint64_t total = w->numel * w->es, cb = w->chunk_bytes, nch = (total + cb - 1) / cb;
	uint32_t *crc = calloc(nch, sizeof *crc);
	size_t k = 0;
	int rc = 0;
	char msg[160];
	if (!crc)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	qsort(w->p, w->np, sizeof *w->p, piece_cmp);
	for (uint64_t ch = 0; ch < nch && rc == 0; ch++) {
		uint64_t len = ch == nch - 1 ? total - ch * cb : cb, pos = 0;
		uint32_t v = 0;
		for (; k < w->np && w->p[k].chunk == ch; k++) {
			if (w->p[k].off != pos)
				break;
			v = ds_ckpt_crc_combine(v, w->p[k].crc, w->p[k].len);
			pos += w->p[k].len;
		}
		/* a piece of this chunk left over (it did not start where the last
		 * one ended), or bytes missing at the end */
		if (pos != len || (k < w->np && w->p[k].chunk == ch)) {
			uint64_t at = (ch * cb + pos) / w->es;
			if (k < w->np && w->p[k].chunk == ch && w->p[k].off < pos)
				rc = ds_err_set(err, DS_EINVAL, "%s: /%s: element %llu written twice", c->file, w->name,
						(unsigned long long)((ch * cb + w->p[k].off) / w->es));
			else
				rc = ds_err_set(err, DS_EINVAL, "%s: /%s: elements from %llu on were never written; "
						"every element of a tensor must be written before commit", c->file,
						w->name, (unsigned long long)at);
		}
		crc[ch] = v;
	}
	if (rc == 0) {
		hsize_t n = nch;
		hid_t s = H5Screate_simple(1, &n, NULL);
		if (attr_put(w->dset, "crc32c", H5T_STD_U32LE, H5T_NATIVE_UINT32, s, crc) < 0)
			rc = ds_err_set(err, DS_EIO, "%s: /%s: cannot store checksums: %s", c->file, w->name, h5msg(msg));
		H5Sclose(s);
	}
	free(crc);
	return rc;
}

static int write_latest(struct ds_ckpt *c, struct ds_err *err)
{
	char *tmp = join(c->save_dir, "latest.tmp"), *fin = join(c->save_dir, "latest");
	int rc = 0, fd = -1;
	if (!tmp || !fin) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0 || dprintf(fd, "%s\n", c->tag) < 0 || fsync(fd) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot write: %s", tmp, strerror(errno));
		goto out;
	}
	close(fd);
	fd = -1;
	if (rename(tmp, fin) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot rename to %s: %s", tmp, fin, strerror(errno));
		goto out;
	}
	fsync_path(c->save_dir);
out:
	if (fd >= 0)
		close(fd);
	if (rc < 0 && tmp)
		unlink(tmp);
	free(tmp);
	free(fin);
	return rc;
}

/* Rename the closed, synced SAVE/tag.tmp to SAVE/tag, then replace
 * `latest` (c->committed is set once the tag directory is in place). */
static int publish(struct ds_ckpt *c, struct ds_err *err)
{
	char *fin = NULL, *old = NULL;
	int rc = 0, moved_old = 0;
	if (fsync_path(c->file) != 0 || fsync_path(c->dir) != 0)
		return ds_err_set(err, DS_EIO, "%s: fsync failed: %s", c->file, strerror(errno));
	fin = join(c->save_dir, c->tag);
	old = fin ? join(c->save_dir, ".replaced") : NULL;
	if (!old) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	/* Saving a step that exists (a rerun): move the old one aside first,
	 * since rename(2) will not replace a non-empty directory. */
	if (access(fin, F_OK) == 0) {
		rm_rf(old);
		if (rename(fin, old) != 0) {
			rc = ds_err_set(err, DS_EIO, "%s: cannot move aside: %s", fin, strerror(errno));
			goto out;
		}
		moved_old = 1;
	}
	if (rename(c->dir, fin) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot rename to %s: %s", c->dir, fin, strerror(errno));
		if (moved_old)
			rename(old, fin);
		goto out;
	}
	if (moved_old)
		rm_rf(old);
	fsync_path(c->save_dir);
	c->committed = 1;
	/* from here the tag is complete; only `latest` remains */
	free(c->dir);
	c->dir = fin;
	fin = NULL;
	free(c->file);
	c->file = join(c->dir, "state.h5");
	rc = write_latest(c, err);
out:
	free(fin);
	free(old);
	return rc;
}

/* One record of the pieces exchange: a piece and the index of its tensor
 * (the same on every rank, since tensor_create is collective). */
struct xpiece { uint64_t tensor, chunk, off, len, crc; };

/* Allgather every rank's CRC pieces so that each rank holds all of them. */
static int gather_pieces(struct ds_ckpt *c, struct ds_err *err)
{
	int W = ds_comm_size(c->comm), rc;
	int64_t *cnt = calloc((size_t)W, sizeof *cnt), n = 0, maxn = 0;
	struct xpiece *mine = NULL, *all = NULL;
	if (!cnt)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (size_t i = 0; i < c->nt; i++)
		n += (int64_t)c->t[i].np;
	cnt[c->rank] = n;
	if ((rc = ds_comm_allgather(c->comm, &n, cnt, 1, DS_I64, err)) < 0)
		goto out;
	for (int r = 0; r < W; r++)
		maxn = cnt[r] > maxn ? cnt[r] : maxn;
	mine = calloc((size_t)(maxn ? maxn : 1), sizeof *mine);
	all = calloc((size_t)(maxn ? maxn : 1) * (size_t)W, sizeof *all);
	if (!mine || !all) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory for %lld CRC pieces", (long long)maxn * W);
		goto out;
	}
	n = 0;
	for (size_t i = 0; i < c->nt; i++)
		for (size_t k = 0; k < c->t[i].np; k++, n++) {
			const struct piece *q = &c->t[i].p[k];
			mine[n] = (struct xpiece){ i, q->chunk, q->off, q->len, q->crc };
		}
	if (maxn && (rc = ds_comm_allgather(c->comm, mine, all, (size_t)maxn * sizeof *mine, DS_U8, err)) < 0)
		goto out;
	for (int r = 0; r < W && rc == 0; r++) {
		if (r == c->rank)
			continue;
		for (int64_t k = 0; k < cnt[r] && rc == 0; k++) {
			const struct xpiece *x = &all[(size_t)r * (size_t)maxn + (size_t)k];
			struct piece q = { x->chunk, x->off, x->len, (uint32_t)x->crc, 0 };
			if (x->tensor >= c->nt)
				rc = ds_err_set(err, DS_EINVAL, "%s: rank %d sent CRC pieces of tensor %llu of %zu; the "
						"ranks created different tensors", c->file, r,
						(unsigned long long)x->tensor, c->nt);
			else
				rc = ds_ckpt_tensor_add_pieces(c, c->t[x->tensor].name, &q, 1, err);
		}
	}
out:
	free(cnt);
	free(mine);
	free(all);
	return rc;
}

/* The parallel commit.  Every step is collective, so a rank that failed
 * earlier still takes part and only the vote tells: all ranks gather the
 * pieces and store the same checksums, flush and close the file together,
 * then agree on success; only if every rank succeeded does rank 0 rename
 * the tag directory and replace `latest`, and its outcome is shared. */
static int commit_par(struct ds_ckpt *c, struct ds_err *err)
{
	struct ds_err e = DS_ERR_INIT;
	char msg[160];
	int rc = 0, bad;
	/* checksums only when every rank wrote its part (otherwise the gaps a
	 * failed rank left would be reported instead of its failure); then the
	 * pieces are the same on every rank, and so is each outcome here */
	if (all_ok(c, c->wrc == 0, &bad)) {
		rc = gather_pieces(c, &e);
		for (size_t i = 0; i < c->nt && rc == 0; i++)
			rc = finish_tensor(c, &c->t[i], &e);
		note(c, rc, &e);
	}
	for (size_t i = 0; i < c->nt; i++) {
		H5Dclose(c->t[i].dset);
		c->t[i].dset = -1;
	}
	if (H5Fflush(c->f, H5F_SCOPE_GLOBAL) < 0)  /* MPI_File_sync on every rank */
		note(c, ds_err_set(&e, DS_EIO, "%s: flush failed: %s", c->file, h5msg(msg)), &e);
	if (H5Fclose(c->f) < 0)
		note(c, ds_err_set(&e, DS_EIO, "%s: close failed: %s", c->file, h5msg(msg)), &e);
	c->f = -1;
	ds_ckpt_mpio_dxpl_close(c->dxpl);
	c->dxpl = H5P_DEFAULT;
	if (!all_ok(c, c->wrc == 0, &bad)) {
		if (c->wrc < 0) {
			if (err)
				*err = c->werr;
			return c->wrc;
		}
		return ds_err_set(err, DS_EIO, "%s/%s not saved: rank %d failed writing its part (see its message); "
				  "%s/latest is unchanged", c->save_dir, c->tag, bad, c->save_dir);
	}
	rc = 0;
	if (c->rank == 0)
		rc = publish(c, err);
	/* {tag directory in place, everything done} as rank 0 saw it */
	int64_t v[2] = { c->committed, rc == 0 };
	if (ds_comm_broadcast(c->comm, v, 2, DS_I64, 0, &e) < 0 && rc == 0)
		return ds_err_set(err, DS_EIO, "%s/%s: lost rank 0's outcome: %s", c->save_dir, c->tag, e.msg);
	if (c->rank != 0) {
		c->committed = (int)v[0];
		if (!v[1])
			rc = ds_err_set(err, DS_EIO, "%s/%s: rank 0 could not publish the checkpoint (see its message)",
					c->save_dir, c->tag);
	}
	return rc;
}

int ds_ckpt_commit(struct ds_ckpt *c, struct ds_err *err)
{
	char msg[160];
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: not an open checkpoint writer", c->file ? c->file : "checkpoint");
	if (c->par)
		return commit_par(c, err);
	if (c->wrc < 0) {
		if (err)
			*err = c->werr;
		return c->wrc;
	}
	for (size_t i = 0; i < c->nt; i++)
		DS_TRY(finish_tensor(c, &c->t[i], err));
	for (size_t i = 0; i < c->nt; i++) {
		H5Dclose(c->t[i].dset);
		c->t[i].dset = -1;
	}
	if (H5Fclose(c->f) < 0) {
		c->f = -1;
		return ds_err_set(err, DS_EIO, "%s: close failed: %s", c->file, h5msg(msg));
	}
	c->f = -1;
	return publish(c, err);
}

/* ---- reader ----------------------------------------------------------------- */

static int open_file(struct ds_ckpt *c, struct ds_err *err)
{
	struct stat st;
	char msg[160];
	int64_t ver = 0;
	int r;
	if (stat(c->file, &st) != 0)
		return ds_err_set(err, DS_EINVAL, "%s: no such file; not a checkpoint (give --load DIR with a "
				  "'latest' file, DIR/global_stepN, or auto)", c->file);
	if (H5Fis_hdf5(c->file) <= 0) {
		H5Eclear2(H5E_DEFAULT);
		return ds_err_set(err, DS_ECORRUPT, "%s: not an HDF5 file (%lld bytes); the checkpoint is corrupt or "
				  "truncated", c->file, (long long)st.st_size);
	}
	hid_t fapl = make_fapl(0);
	c->f = H5Fopen(c->file, H5F_ACC_RDONLY, fapl);
	H5Pclose(fapl);
	if (c->f < 0)
		return ds_err_set(err, DS_ECORRUPT, "%s: cannot open (%s); the checkpoint is corrupt or truncated",
				  c->file, h5msg(msg));
	hid_t root = H5Gopen2(c->f, "/", H5P_DEFAULT);
	r = root < 0 ? -1 : attr_get_num(root, "format_version", H5T_NATIVE_INT64, &ver);
	if (root >= 0)
		H5Gclose(root);
	if (r <= 0)
		return ds_err_set(err, DS_ECORRUPT, "%s: not a dstk checkpoint (no format_version attribute on /)",
				  c->file);
	if (ver < 1 || ver > DS_CKPT_FORMAT_VERSION)
		return ds_err_set(err, DS_EINVAL, "%s: checkpoint format version %lld; this dstk reads up to %d",
				  c->file, (long long)ver, DS_CKPT_FORMAT_VERSION);
	return 0;
}

/* Open dir/tag/state.h5 (tag "": dir/state.h5; file non-NULL: that file,
 * dir being its directory). */
static int open_tag(struct ds_ckpt **out, const char *dir, const char *tag, const char *file, struct ds_err *err)
{
	struct ds_ckpt *c = calloc(1, sizeof *c);
	int rc;
	*out = NULL;
	if (!c)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	c->f = -1;
	c->save_dir = strdup(dir);
	c->tag = strdup(tag);
	if (c->save_dir) {  /* "ckpt/" and "ckpt" name the same directory */
		size_t n = strlen(c->save_dir);
		while (n > 1 && c->save_dir[n - 1] == '/')
			c->save_dir[--n] = '\0';
	}
	c->dir = !c->save_dir ? NULL : *tag ? join(c->save_dir, tag) : strdup(c->save_dir);
	c->file = !c->dir ? NULL : file ? strdup(file) : join(c->dir, "state.h5");
	if (!c->save_dir || !c->tag || !c->file) {
		ds_ckpt_close(c);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	rc = open_file(c, err);
	if (rc < 0) {
		ds_ckpt_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

static int read_latest(const char *dir, char *tag, size_t n, struct ds_err *err)
{
	char *p = join(dir, "latest");
	FILE *f = p ? fopen(p, "r") : NULL;
	size_t len;
	if (!f) {
		int rc = ds_err_set(err, DS_EINVAL, "%s: no such file; %s holds no complete checkpoint (give "
				    "--load %s/global_stepN or --load auto)", p ? p : dir, dir, dir);
		free(p);
		return rc;
	}
	if (!fgets(tag, (int)n, f))
		tag[0] = '\0';
	fclose(f);
	len = strcspn(tag, " \t\r\n");
	tag[len] = '\0';
	if (!len || strchr(tag, '/') || strcmp(tag, "..") == 0 || strcmp(tag, ".") == 0) {
		int rc = ds_err_set(err, DS_ECORRUPT, "%s: does not name a tag (\"%s\")", p, tag);
		free(p);
		return rc;
	}
	free(p);
	return 0;
}

/* global_step<digits> exactly (never .tmp); its step, or -1. */
static long long tag_step(const char *name)
{
	const char *d = name + 11;
	if (strncmp(name, "global_step", 11) != 0 || !*d)
		return -1;
	for (const char *p = d; *p; p++)
		if (*p < '0' || *p > '9')
			return -1;
	return strtoll(d, NULL, 10);
}

static int cmp_desc(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

static int open_auto(struct ds_ckpt **out, const char *dir, struct ds_err *err)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	long long *steps = NULL;
	size_t n = 0, cap = 0, tried = 0;
	struct ds_err last = DS_ERR_INIT;
	int rc;
	if (!dp)
		return ds_err_set(err, DS_EINVAL, "%s: cannot open checkpoint directory: %s", dir, strerror(errno));
	while ((de = readdir(dp))) {
		long long s = tag_step(de->d_name);
		if (s < 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			long long *ns = realloc(steps, cap * sizeof *ns);
			if (!ns) {
				closedir(dp);
				free(steps);
				return ds_err_set(err, DS_ENOMEM, "out of memory");
			}
			steps = ns;
		}
		steps[n++] = s;
	}
	closedir(dp);
	qsort(steps, n, sizeof *steps, cmp_desc);
	for (size_t i = 0; i < n; i++) {
		char tag[64];
		struct ds_ckpt *c;
		snprintf(tag, sizeof tag, "global_step%lld", steps[i]);
		tried++;
		rc = open_tag(&c, dir, tag, NULL, &last);
		if (rc == 0)
			rc = ds_ckpt_verify(c, NULL, NULL, &last);
		if (rc == 0) {
			free(steps);
			*out = c;
			return 0;
		}
		ds_log_warn("checkpoint %s/%s skipped: %s", dir, tag, last.msg);
		ds_ckpt_close(c);  /* NULL when it did not open */
	}
	free(steps);
	if (!tried)
		return ds_err_set(err, DS_EINVAL, "%s: no global_stepN checkpoint to load (auto)", dir);
	return ds_err_set(err, DS_ECORRUPT, "%s: none of the %zu checkpoints verifies; newest failure: %s", dir, tried,
			  last.msg);
}

int ds_ckpt_open(struct ds_ckpt **out, const char *load_dir, const char *tag, struct ds_err *err)
{
	char buf[256];
	*out = NULL;
	h5_quiet();
	if (!load_dir || !*load_dir)
		return ds_err_set(err, DS_EINVAL, "no checkpoint directory given (--load DIR)");
	struct stat st;
	if (stat(load_dir, &st) == 0 && S_ISREG(st.st_mode)) {  /* a state.h5 (or weights .h5) itself */
		const char *sl = strrchr(load_dir, '/');
		char *dir = !sl ? strdup(".") : strndup(load_dir, sl == load_dir ? 1 : (size_t)(sl - load_dir));
		int rc = dir ? open_tag(out, dir, "", load_dir, err) : ds_err_set(err, DS_ENOMEM, "out of memory");
		free(dir);
		return rc;
	}
	if (tag && strcmp(tag, "auto") == 0)
		return open_auto(out, load_dir, err);
	if (!tag || strcmp(tag, "latest") == 0) {
		char *p = join(load_dir, "state.h5"), *l = join(load_dir, "latest");
		int direct = p && l && access(p, F_OK) == 0 && access(l, F_OK) != 0;
		free(p);
		free(l);
		if (direct)  /* load_dir is itself a tag directory */
			return open_tag(out, load_dir, "", NULL, err);
		DS_TRY(read_latest(load_dir, buf, sizeof buf, err));
		tag = buf;
	}
	return open_tag(out, load_dir, tag, NULL, err);
}

const char *ds_ckpt_tag(const struct ds_ckpt *c)
{
	if (*c->tag)
		return c->tag;
	const char *s = strrchr(c->dir, '/');
	return s ? s + 1 : c->dir;
}

const char *ds_ckpt_file(const struct ds_ckpt *c) { return c->file; }

int ds_ckpt_meta_get(struct ds_ckpt *c, struct ds_ckpt_meta *m, struct ds_err *err)
{
	hid_t r;
	int ok = 1;
	memset(m, 0, sizeof *m);
	if (c->f < 0)
		return ds_err_set(err, DS_EINVAL, "%s: checkpoint is closed", c->file);
	r = H5Gopen2(c->f, "/", H5P_DEFAULT);
	free(c->m_dtype); free(c->m_config); free(c->m_model);
	c->m_dtype = c->m_config = c->m_model = NULL;
	ok = ok && attr_get_num(r, "format_version", H5T_NATIVE_INT64, &m->format_version) == 1;
	ok = ok && attr_get_num(r, "step", H5T_NATIVE_INT64, &m->step) == 1;
	ok = ok && attr_get_num(r, "consumed_samples", H5T_NATIVE_INT64, &m->consumed_samples) == 1;
	ok = ok && attr_get_num(r, "world_size", H5T_NATIVE_INT64, &m->world_size) == 1;
	ok = ok && attr_get_num(r, "zero_stage", H5T_NATIVE_INT64, &m->zero_stage) == 1;
	ok = ok && attr_get_str(r, "dtype", &c->m_dtype) == 1;
	ok = ok && attr_get_str(r, "config_json", &c->m_config) == 1;
	ok = ok && attr_get_str(r, "model_json", &c->m_model) == 1;
	H5Gclose(r);
	if (!ok)
		return ds_err_set(err, DS_ECORRUPT, "%s: root attributes incomplete (need format_version, step, "
				  "consumed_samples, world_size, zero_stage, dtype, config_json, model_json)", c->file);
	m->dtype = c->m_dtype;
	m->config_json = c->m_config;
	m->model_json = c->m_model;
	return 0;
}

/* ---- tensors: info, checked reads, verify ----------------------------------- */

struct rtensor {
	struct ds_ckpt_tensor_info info;
	hid_t dset;
	hsize_t shape[DS_CKPT_MAX_DIMS];
	uint64_t chunk_bytes, nchunks;
	uint32_t *crc;
};

static void rt_close(struct rtensor *t)
{
	if (t->dset >= 0)
		H5Dclose(t->dset);
	free(t->crc);
	t->dset = -1;
	t->crc = NULL;
}

/* Open dataset name with its shape, dtype and (want_crc) checksums. */
static int rt_open(struct ds_ckpt *c, const char *name, struct rtensor *t, int want_crc, struct ds_err *err)
{
	char *dt = NULL;
	hid_t s;
	int nd;
	memset(t, 0, sizeof *t);
	t->dset = -1;
	name = skip_slash(name);
	if (strlen(name) >= DS_CKPT_NAME_MAX)
		return ds_err_set(err, DS_EINVAL, "%s: name too long", c->file);
	snprintf(t->info.name, sizeof t->info.name, "%s", name);
	if (c->f < 0 || !*name || H5Lexists(c->f, name, H5P_DEFAULT) <= 0 ||
	    (t->dset = H5Dopen2(c->f, name, H5P_DEFAULT)) < 0) {
		H5Eclear2(H5E_DEFAULT);
		return ds_err_set(err, DS_EINVAL, "%s: no tensor /%s in this checkpoint", c->file, name);
	}
	if (attr_get_str(t->dset, "dtype", &dt) != 1 || (t->info.dtype = dtype_from_name(dt)) < 0) {
		free(dt);
		rt_close(t);
		return ds_err_set(err, DS_ECORRUPT, "%s: /%s: missing or unknown dtype attribute", c->file, name);
	}
	free(dt);
	s = H5Dget_space(t->dset);
	nd = s < 0 ? -1 : H5Sget_simple_extent_ndims(s);
	if (nd < 1 || nd > DS_CKPT_MAX_DIMS || H5Sget_simple_extent_dims(s, t->shape, NULL) < 0) {
		if (s >= 0)
			H5Sclose(s);
		rt_close(t);
		return ds_err_set(err, DS_ECORRUPT, "%s: /%s: bad dataspace", c->file, name);
	}
	H5Sclose(s);
	t->info.ndim = nd;
	t->info.numel = 1;
	for (int i = 0; i < nd; i++) {
		t->info.shape[i] = t->shape[i];
		t->info.numel *= t->shape[i];
	}
	if (!want_crc)
		return 0;
	size_t es = ds_ckpt_dtype_size(t->info.dtype);
	hid_t a = -1, as = -1;
	int ok = attr_get_num(t->dset, "crc_chunk_bytes", H5T_NATIVE_UINT64, &t->chunk_bytes) == 1 &&
		 t->chunk_bytes > 0 && t->chunk_bytes % 8 == 0 && H5Aexists(t->dset, "crc32c") > 0;
	if (ok) {
		t->nchunks = (t->info.numel * es + t->chunk_bytes - 1) / t->chunk_bytes;
		a = H5Aopen(t->dset, "crc32c", H5P_DEFAULT);
		as = a < 0 ? -1 : H5Aget_space(a);
		ok = as >= 0 && (uint64_t)H5Sget_simple_extent_npoints(as) == t->nchunks &&
		     (t->crc = malloc(t->nchunks * sizeof *t->crc)) && H5Aread(a, H5T_NATIVE_UINT32, t->crc) >= 0;
	}
	if (as >= 0)
		H5Sclose(as);
	if (a >= 0)
		H5Aclose(a);
	if (!ok) {
		rt_close(t);
		return ds_err_set(err, DS_ECORRUPT, "%s: /%s: checksum attributes (crc32c, crc_chunk_bytes) missing "
				  "or inconsistent with its shape", c->file, name);
	}
	return 0;
}

static int ensure_tmp(struct ds_ckpt *c, size_t n, struct ds_err *err)
{
	if (c->tmp_size >= n)
		return 0;
	free(c->tmp);
	c->tmp = malloc(n);
	c->tmp_size = c->tmp ? n : 0;
	return c->tmp ? 0 : ds_err_set(err, DS_ENOMEM, "out of memory (%zu bytes)", n);
}

static int crc_fail(struct ds_ckpt *c, const struct rtensor *t, uint64_t ch, uint32_t got, struct ds_err *err)
{
	uint64_t total = t->info.numel * ds_ckpt_dtype_size(t->info.dtype), e = (ch + 1) * t->chunk_bytes;
	return ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s: chunk %llu (bytes %llu..%llu) fails its CRC-32C "
			  "(stored %08x, computed %08x); the checkpoint is corrupt, load another tag or --load auto",
			  c->file, t->info.name, (unsigned long long)ch,
			  (unsigned long long)(ch * t->chunk_bytes), (unsigned long long)(e < total ? e : total),
			  t->crc[ch], got);
}

/* Read elements [b, e) of t into out (NULL: verify only), checking every
 * chunk touched.  Runs of whole chunks go straight into out. */
static int rt_read(struct ds_ckpt *c, struct rtensor *t, uint64_t b, uint64_t e, uint8_t *out, struct ds_err *err)
{
	size_t es = ds_ckpt_dtype_size(t->info.dtype);
	uint64_t cb = t->chunk_bytes, total = t->info.numel * es, bb = b * es, be = e * es;
	hid_t mt = mem_type(t->info.dtype);
	char msg[160];
	if (b >= e)
		return 0;
	DS_TRY(ensure_tmp(c, (size_t)cb, err));
	for (uint64_t ch = bb / cb; ch * cb < be; ) {
		uint64_t cs = ch * cb, ce = cs + cb < total ? cs + cb : total;
		if (out && cs >= bb && ce <= be) {
			uint64_t run = ch + 1, re = ce;
			/* runs of at most RUN_BYTES, so the CRC pass finds them in cache */
			while (run * cb < be && (run * cb + cb <= be || be == total) && run < t->nchunks &&
			       (run - ch + 1) * cb <= RUN_BYTES) {
				re = run * cb + cb < total ? run * cb + cb : total;
				run++;
			}
			uint8_t *dst = out + (cs - bb);
			if (xfer(t->dset, mt, t->info.ndim, t->shape, cs / es, re / es, dst, 0, H5P_DEFAULT) < 0)
				return ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s: read of bytes %llu..%llu failed (%s)",
						  c->file, t->info.name, (unsigned long long)cs, (unsigned long long)re,
						  h5msg(msg));
			/* the first bad chunk of the run, if any (threads share the CRCs) */
			uint64_t bad = run;
			#pragma omp parallel for schedule(dynamic, 4) reduction(min : bad) if (run - ch > 8)
			for (uint64_t k = ch; k < run; k++) {
				uint64_t ks = k * cb, ke = ks + cb < total ? ks + cb : total;
				if (ds_crc32c(0, out + (ks - bb), (size_t)(ke - ks)) != t->crc[k] && k < bad)
					bad = k;
			}
			if (bad < run) {
				uint64_t ks = bad * cb, ke = ks + cb < total ? ks + cb : total;
				return crc_fail(c, t, bad, ds_crc32c(0, out + (ks - bb), (size_t)(ke - ks)), err);
			}
			ch = run;
			continue;
		}
		if (xfer(t->dset, mt, t->info.ndim, t->shape, cs / es, ce / es, c->tmp, 0, H5P_DEFAULT) < 0)
			return ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s: read of chunk %llu failed (%s)", c->file,
					  t->info.name, (unsigned long long)ch, h5msg(msg));
		uint32_t v = ds_crc32c(0, c->tmp, (size_t)(ce - cs));
		if (v != t->crc[ch])
			return crc_fail(c, t, ch, v, err);
		if (out) {
			uint64_t s = cs > bb ? cs : bb, f = ce < be ? ce : be;
			memcpy(out + (s - bb), c->tmp + (s - cs), (size_t)(f - s));
		}
		ch++;
	}
	return 0;
}

int ds_ckpt_tensor_info(struct ds_ckpt *c, const char *name, struct ds_ckpt_tensor_info *info, struct ds_err *err)
{
	struct rtensor t;
	if (c->writing)
		return ds_err_set(err, DS_EINVAL, "%s: tensor_info needs a reader", c->file);
	DS_TRY(rt_open(c, name, &t, 0, err));
	*info = t.info;
	rt_close(&t);
	return 0;
}

int ds_ckpt_tensor_read(struct ds_ckpt *c, const char *name, uint64_t begin, uint64_t end, void *out,
			struct ds_err *err)
{
	struct rtensor t;
	int rc;
	if (c->writing)
		return ds_err_set(err, DS_EINVAL, "%s: tensor_read needs a reader", c->file);
	DS_TRY(rt_open(c, name, &t, 1, err));
	if (begin > end || end > t.info.numel)
		rc = ds_err_set(err, DS_EINVAL, "%s: /%s: slice [%llu, %llu) outside its %llu elements", c->file,
				t.info.name, (unsigned long long)begin, (unsigned long long)end,
				(unsigned long long)t.info.numel);
	else
		rc = rt_read(c, &t, begin, end, out, err);
	rt_close(&t);
	return rc;
}

struct list_ctx {
	struct ds_ckpt *c;
	struct ds_ckpt_tensor_info *v;
	size_t n, cap;
	char prefix[DS_CKPT_NAME_MAX];
	int rc;
	struct ds_err *err;
};

static int list_group(struct list_ctx *x, hid_t g);

static herr_t list_cb(hid_t g, const char *name, const H5L_info_t *info, void *ud)
{
	struct list_ctx *x = ud;
	size_t plen = strlen(x->prefix);
	hid_t o;
	(void)info;
	if (plen + strlen(name) + 2 > sizeof x->prefix) {
		x->rc = ds_err_set(x->err, DS_ECORRUPT, "%s: object name too long", x->c->file);
		return -1;
	}
	o = H5Oopen(g, name, H5P_DEFAULT);
	if (o < 0)
		return 0;
	H5I_type_t ty = H5Iget_type(o);
	snprintf(x->prefix + plen, sizeof x->prefix - plen, "%s%s", plen ? "/" : "", name);
	if (ty == H5I_GROUP) {
		x->rc = list_group(x, o);
	} else if (ty == H5I_DATASET) {
		struct rtensor t;
		if (x->n == x->cap) {
			size_t cap = x->cap ? 2 * x->cap : 64;
			struct ds_ckpt_tensor_info *nv = realloc(x->v, cap * sizeof *nv);
			if (!nv)
				x->rc = ds_err_set(x->err, DS_ENOMEM, "out of memory");
			else
				x->v = nv, x->cap = cap;
		}
		if (x->rc == 0)
			x->rc = rt_open(x->c, x->prefix, &t, 0, x->err);
		if (x->rc == 0) {
			x->v[x->n++] = t.info;
			rt_close(&t);
		}
	}
	x->prefix[plen] = '\0';
	H5Oclose(o);
	return x->rc < 0 ? -1 : 0;
}

static int list_group(struct list_ctx *x, hid_t g)
{
	hsize_t idx = 0;
	if (H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, list_cb, x) < 0 && x->rc == 0) {
		/* a group without a creation-order index (not written by dstk) */
		H5Eclear2(H5E_DEFAULT);
		idx = 0;
		if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, list_cb, x) < 0 && x->rc == 0)
			x->rc = ds_err_set(x->err, DS_ECORRUPT, "%s: cannot list group /%s", x->c->file, x->prefix);
	}
	return x->rc;
}

int ds_ckpt_list(struct ds_ckpt *c, struct ds_ckpt_tensor_info **out, size_t *n, struct ds_err *err)
{
	struct list_ctx x = { .c = c, .err = err };
	hid_t root;
	*out = NULL;
	*n = 0;
	if (c->writing || c->f < 0)
		return ds_err_set(err, DS_EINVAL, "%s: list needs an open reader", c->file);
	root = H5Gopen2(c->f, "/", H5P_DEFAULT);
	list_group(&x, root);
	H5Gclose(root);
	if (x.rc < 0) {
		free(x.v);
		return x.rc;
	}
	*out = x.v;
	*n = x.n;
	return 0;
}

int ds_ckpt_verify(struct ds_ckpt *c, ds_ckpt_verify_fn cb, void *ud, struct ds_err *err)
{
	struct ds_ckpt_tensor_info *v;
	size_t n;
	int first = 0;
	DS_TRY(ds_ckpt_list(c, &v, &n, err));
	for (size_t i = 0; i < n; i++) {
		struct ds_err e = DS_ERR_INIT;
		struct rtensor t;
		int rc = rt_open(c, v[i].name, &t, 1, &e);
		if (rc == 0) {
			rc = rt_read(c, &t, 0, t.info.numel, NULL, &e);
			rt_close(&t);
		}
		if (cb)
			cb(ud, &v[i], rc, e.msg);
		if (rc < 0 && first == 0) {
			first = rc;
			if (err)
				*err = e;
		}
	}
	free(v);
	return first;
}

/* ---- attribute API ------------------------------------------------------------ */

static int attr_set(struct ds_ckpt *c, const char *group, const char *key, int kind, const void *v,
		    struct ds_err *err)
{
	const char *g = skip_slash(group ? group : "");
	hid_t o;
	herr_t rc;
	char msg[160];
	if (!c->writing || c->committed || c->f < 0)
		return ds_err_set(err, DS_EINVAL, "%s: attributes are set on a checkpoint being written", c->file);
	if (*g)
		DS_TRY(ensure_groups(c, g, strlen(g), err));
	o = open_obj(c, g);
	if (o < 0)
		return ds_err_set(err, DS_EIO, "%s: cannot open /%s: %s", c->file, g, h5msg(msg));
	if (kind == 0)
		rc = attr_put_scalar(o, key, H5T_STD_I64LE, H5T_NATIVE_INT64, v);
	else if (kind == 1)
		rc = attr_put_scalar(o, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v);
	else
		rc = attr_put_str(o, key, v);
	H5Oclose(o);
	if (rc < 0)
		return note(c, ds_err_set(err, DS_EIO, "%s: /%s: cannot set attribute %s: %s", c->file, g, key,
					  h5msg(msg)), err);
	return 0;
}

int ds_ckpt_attr_set_i64(struct ds_ckpt *c, const char *group, const char *key, int64_t v, struct ds_err *err)
{
	return attr_set(c, group, key, 0, &v, err);
}

int ds_ckpt_attr_set_f64(struct ds_ckpt *c, const char *group, const char *key, double v, struct ds_err *err)
{
	return attr_set(c, group, key, 1, &v, err);
}

int ds_ckpt_attr_set_str(struct ds_ckpt *c, const char *group, const char *key, const char *v, struct ds_err *err)
{
	return attr_set(c, group, key, 2, v, err);
}

static int attr_get(struct ds_ckpt *c, const char *group, const char *key, hid_t mtype, void *v, char **s,
		    struct ds_err *err)
{
	const char *g = skip_slash(group ? group : "");
	hid_t o;
	int r;
	if (c->f < 0)
		return ds_err_set(err, DS_EINVAL, "%s: checkpoint is closed", c->file);
	o = open_obj(c, g);
	if (o < 0) {
		H5Eclear2(H5E_DEFAULT);
		return ds_err_set(err, DS_EINVAL, "%s: no group /%s (wanted attribute %s)", c->file, g, key);
	}
	r = s ? attr_get_str(o, key, s) : attr_get_num(o, key, mtype, v);
	H5Oclose(o);
	if (r == 0)
		return ds_err_set(err, DS_EINVAL, "%s: /%s has no attribute %s", c->file, g, key);
	if (r < 0)
		return ds_err_set(err, DS_ECORRUPT, "%s: /%s: attribute %s is not a %s", c->file, g, key,
				  s ? "string" : "single number");
	return 0;
}

int ds_ckpt_attr_get_i64(struct ds_ckpt *c, const char *group, const char *key, int64_t *v, struct ds_err *err)
{
	return attr_get(c, group, key, H5T_NATIVE_INT64, v, NULL, err);
}

int ds_ckpt_attr_get_f64(struct ds_ckpt *c, const char *group, const char *key, double *v, struct ds_err *err)
{
	return attr_get(c, group, key, H5T_NATIVE_DOUBLE, v, NULL, err);
}

int ds_ckpt_attr_get_str_dup(struct ds_ckpt *c, const char *group, const char *key, char **v, struct ds_err *err)
{
	*v = NULL;
	return attr_get(c, group, key, 0, NULL, v, err);
}

int ds_ckpt_attr_has(struct ds_ckpt *c, const char *group, const char *key)
{
	hid_t o;
	int r;
	if (c->f < 0)
		return 0;
	o = open_obj(c, group);
	if (o < 0) {
		H5Eclear2(H5E_DEFAULT);
		return 0;
	}
	r = H5Aexists(o, key) > 0;
	H5Oclose(o);
	return r;
}

void ds_ckpt_close(struct ds_ckpt *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nt; i++) {
		if (c->t[i].dset >= 0)
			H5Dclose(c->t[i].dset);
		free(c->t[i].name);
		free(c->t[i].p);
	}
	free(c->t);
	ds_ckpt_mpio_dxpl_close(c->dxpl);
	if (c->f >= 0)
		H5Fclose(c->f);  /* collective for a parallel writer: every rank closes */
	/* an abandoned save leaves nothing behind: rank 0 removes it once
	 * every rank has let go of the file */
	if (c->par)
		ds_comm_barrier(c->comm, NULL);
	if (c->writing && !c->committed && c->dir && c->rank == 0)
		rm_rf(c->dir);
	free(c->save_dir);
	free(c->tag);
	free(c->dir);
	free(c->file);
	free(c->m_dtype);
	free(c->m_config);
	free(c->m_model);
	free(c->tmp);
	free(c);
}
