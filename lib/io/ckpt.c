/* ckpt.c - what the checkpoint writer (ckpt_write.c), reader (ckpt_read.c)
 * and verifier (ckpt_verify.c) share: HDF5 error translation, file access
 * properties, dtype tables, element-range selections, close (see ckpt.h for
 * the layout, ckpt_int.h for the private interface).
 *
 * Tensors are contiguous HDF5 datasets with their full logical shape; a flat
 * element range maps to a union of at most 2*ndim hyperslabs, which HDF5
 * walks in row-major order, so one H5Dread/H5Dwrite moves it to or from a
 * contiguous buffer.  HDF5's own error stack is silenced and translated into
 * one line that names the file and the dataset.
 */
#include "config.h"

#include "io/ckpt.h"

#include <errno.h>
#include <ftw.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/ckpt_int.h"

/* ---- small helpers ----------------------------------------------------- */

char *ds_ckpt_join(const char *a, const char *b)
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

const char *ds_ckpt_h5msg(char *buf)
{
	buf[0] = '\0';
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, buf);
	H5Eclear2(H5E_DEFAULT);
	return buf;
}

void ds_ckpt_h5_quiet(void)
{
	/* HDF5 prints its error stack by default; libds never prints. */
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* File access: on a file system without flock (Lustre and NFS mounts often
 * lack it) HDF5 >= 1.10.7 can go on unlocked instead of failing; our
 * writers never share a file with a reader (.tmp + rename), so locking is
 * only a courtesy.  New files use the 1.8 object format: dense attribute
 * storage lets a crc32c array exceed 64 KiB (a tensor over 16 GiB).  The
 * writer's metadata cache never evicts (it grows instead: a few MB for
 * thousands of tensors), so HDF5 writes nothing before the flush at commit
 * and never reads back what it wrote. */
hid_t ds_ckpt_fapl(int create)
{
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
	H5Pset_file_locking(fapl, 1, 1);
#endif
	if (create) {
		H5AC_cache_config_t cc;
		H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
		memset(&cc, 0, sizeof cc);
		cc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
		if (H5Pget_mdc_config(fapl, &cc) >= 0) {
			cc.evictions_enabled = 0;  /* needs every automatic resize off */
			cc.incr_mode = H5C_incr__off;
			cc.flash_incr_mode = H5C_flash_incr__off;
			cc.decr_mode = H5C_decr__off;
			H5Pset_mdc_config(fapl, &cc);
		}
	}
	return fapl;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

int ds_ckpt_rm_rf(const char *p)
{
	struct stat st;
	if (lstat(p, &st) != 0)
		return errno == ENOENT ? 0 : -1;
	return nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

const char *ds_ckpt_skip_slash(const char *s)
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

hid_t ds_ckpt_mem_type(int dtype)
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

/* ---- agreement ---------------------------------------------------------- */

int ds_ckpt_agree(struct ds_comm *comm, int rc, const char *what, struct ds_err *err)
{
	struct { int64_t code; char msg[DS_ERR_MSG_MAX]; } m;
	struct ds_err e = DS_ERR_INIT;
	int W = comm ? ds_comm_size(comm) : 1, rank = comm ? ds_comm_rank(comm) : 0;
	int64_t v = rc < 0 ? rank : W;
	if (W <= 1)
		return rc;
	if (ds_comm_allreduce(comm, &v, 1, DS_I64, DS_MIN, &e) < 0)
		return rc < 0 ? rc : ds_err_set(err, DS_EIO, "%s: the ranks could not agree: %s", what, e.msg);
	if (v >= W)
		return 0;
	memset(&m, 0, sizeof m);
	if (v == rank) {
		m.code = rc;
		snprintf(m.msg, sizeof m.msg, "%s", err && err->msg[0] ? err->msg : ds_status_name(rc));
	}
	if (ds_comm_broadcast(comm, &m, sizeof m, DS_U8, (int)v, &e) < 0)
		return rc < 0 ? rc : ds_err_set(err, DS_EIO, "%s: rank %d failed; its message was lost: %s", what,
						(int)v, e.msg);
	m.msg[sizeof m.msg - 1] = '\0';
	return ds_err_set(err, m.code < 0 ? (int)m.code : DS_EIO, "%s", m.msg);
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
herr_t ds_ckpt_xfer(hid_t dset, hid_t mtype, int ndim, const hsize_t *shape, hsize_t b, hsize_t e, void *buf,
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

hid_t ds_ckpt_open_obj(struct ds_ckpt *c, const char *group)
{
	group = ds_ckpt_skip_slash(group ? group : "");
	if (!*group)
		return H5Oopen(c->f, "/", H5P_DEFAULT);
	if (H5Lexists(c->f, group, H5P_DEFAULT) <= 0)
		return -1;
	return H5Oopen(c->f, group, H5P_DEFAULT);
}

void ds_ckpt_close(struct ds_ckpt *c)
{
	if (!c)
		return;
	/* a writer not committed leaves nothing behind (rank 0 removes it) */
	if (c->writing)
		ds_ckpt_writer_abandon(c);
	else if (c->f >= 0)
		H5Fclose(c->f);
	for (size_t i = 0; i < c->nt; i++) {
		free(c->t[i].name);
		free(c->t[i].p);
		free(c->t[i].crc);
	}
	free(c->t);
	ds_ckpt_manifest_free(c->man);
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
