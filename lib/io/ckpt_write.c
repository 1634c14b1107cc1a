/* ckpt_write.c - the checkpoint writer: create, tensors written in slices
 * with their chunk CRC-32C pieces, attributes, and the atomic commit
 * (global_step<N>.tmp, fsync, rename, then `latest`); see ckpt.h.
 *
 * The parallel writer (ds_ckpt_create_comm with more than one rank) opens
 * the one state.h5 of the save with the MPI-IO driver (ckpt_mpio.c):
 * metadata calls are collective, every rank writes its own range of a
 * tensor in one collective H5Dwrite, and commit gathers the CRC pieces,
 * closes the file together and votes before rank 0 renames anything.
 */
#include "config.h"

#include "io/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt_int.h"
#include "util/crc32c.h"

#define piece ds_ckpt_crc_piece  /* the public record, ckpt.h */

static int reserve_pieces(struct ds_ckpt_wt *w, size_t n, struct ds_err *err);

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
			return ds_err_set(err, DS_EIO, "%s: cannot create group /%s: %s", c->file, path, ds_ckpt_h5msg(m));
		}
		H5Gclose(g);
	}
	return 0;
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
		return ds_err_set(err, DS_EIO, "%s: cannot write the root attributes: %s", c->file, ds_ckpt_h5msg(msg));
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
	ds_ckpt_h5_quiet();
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
	c->dir = ds_ckpt_join(save_dir, tag);
	c->file = c->dir ? ds_ckpt_join(c->dir, "state.h5") : NULL;
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
		if (rc == 0 && (ds_ckpt_rm_rf(c->dir) != 0 || mkdir(c->dir, 0777) != 0))
			rc = ds_err_set(err, DS_EIO, "%s: cannot create: %s", c->dir, strerror(errno));
	}
	if (!all_ok(c, rc == 0, &bad)) {
		if (rc == 0)
			rc = ds_err_set(err, DS_EIO, "%s: rank %d could not create the checkpoint directory", c->dir, bad);
		c->rank = -1;  /* nothing of ours to remove */
		goto out;
	}
	{
		hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = ds_ckpt_fapl(1);
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
		rc = ds_err_set(err, DS_EIO, "%s: cannot create: %s", c->file, ds_ckpt_h5msg(msg));
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

static struct ds_ckpt_wt *find_w(struct ds_ckpt *c, const char *name)
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
	struct ds_ckpt_wt *w;
	hid_t space, dcpl;
	const char *slash;
	char msg[160];
	name = ds_ckpt_skip_slash(name);
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
		struct ds_ckpt_wt *t = realloc(c->t, cap * sizeof *t);
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
		return ds_err_set(err, DS_EIO, "%s: cannot create dataset /%s: %s", c->file, name, ds_ckpt_h5msg(msg));
	}
	uint64_t cb = w->chunk_bytes;
	if (attr_put_str(w->dset, "dtype", ds_ckpt_dtype_name(dtype)) < 0 ||
	    attr_put_scalar(w->dset, "crc_chunk_bytes", H5T_STD_U64LE, H5T_NATIVE_UINT64, &cb) < 0) {
		H5Dclose(w->dset);
		free(w->name);
		return ds_err_set(err, DS_EIO, "%s: /%s: cannot write attributes: %s", c->file, name, ds_ckpt_h5msg(msg));
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
static int write_par(struct ds_ckpt *c, struct ds_ckpt_wt *w, uint64_t begin, uint64_t end, const void *data,
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
	if (ds_ckpt_xfer(w->dset, ds_ckpt_mem_type(w->dtype), w->ndim, w->shape, begin, end, (void *)(p ? p : (const uint8_t *)w),
		 1, c->dxpl) < 0 && rc == 0)
		rc = ds_err_set(err, DS_EIO, "%s: /%s: write of elements [%llu, %llu) failed: %s", c->file, w->name,
				(unsigned long long)begin, (unsigned long long)end, ds_ckpt_h5msg(msg));
	return note(c, rc, err);
}

int ds_ckpt_tensor_write(struct ds_ckpt *c, const char *name, uint64_t begin, uint64_t end, const void *data,
			 struct ds_err *err)
{
	struct ds_ckpt_wt *w;
	char msg[160];
	name = ds_ckpt_skip_slash(name);
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
		if (ds_ckpt_xfer(w->dset, ds_ckpt_mem_type(w->dtype), w->ndim, w->shape, rb / w->es, re / w->es,
			 (void *)(p + (rb - bb)), 1, H5P_DEFAULT) < 0)
			return ds_err_set(err, DS_EIO, "%s: /%s: write of elements [%llu, %llu) failed: %s", c->file,
					  name, (unsigned long long)(rb / w->es), (unsigned long long)(re / w->es),
					  ds_ckpt_h5msg(msg));
		k = ke;
	}
	w->np += nnew;
	return 0;
}

/* Make room for n more pieces of w. */
static int reserve_pieces(struct ds_ckpt_wt *w, size_t n, struct ds_err *err)
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
	struct ds_ckpt_wt *w;
	*p = NULL;
	*n = 0;
	name = ds_ckpt_skip_slash(name);
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
	struct ds_ckpt_wt *w;
	name = ds_ckpt_skip_slash(name);
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
static int finish_tensor(struct ds_ckpt *c, struct ds_ckpt_wt *w, struct ds_err *err)
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
			rc = ds_err_set(err, DS_EIO, "%s: /%s: cannot store checksums: %s", c->file, w->name, ds_ckpt_h5msg(msg));
		H5Sclose(s);
	}
	free(crc);
	return rc;
}

static int write_latest(struct ds_ckpt *c, struct ds_err *err)
{
	char *tmp = ds_ckpt_join(c->save_dir, "latest.tmp"), *fin = ds_ckpt_join(c->save_dir, "latest");
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
	fin = ds_ckpt_join(c->save_dir, c->tag);
	old = fin ? ds_ckpt_join(c->save_dir, ".replaced") : NULL;
	if (!old) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	/* Saving a step that exists (a rerun): move the old one aside first,
	 * since rename(2) will not replace a non-empty directory. */
	if (access(fin, F_OK) == 0) {
		ds_ckpt_rm_rf(old);
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
		ds_ckpt_rm_rf(old);
	fsync_path(c->save_dir);
	c->committed = 1;
	/* from here the tag is complete; only `latest` remains */
	free(c->dir);
	c->dir = fin;
	fin = NULL;
	free(c->file);
	c->file = ds_ckpt_join(c->dir, "state.h5");
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
		note(c, ds_err_set(&e, DS_EIO, "%s: flush failed: %s", c->file, ds_ckpt_h5msg(msg)), &e);
	if (H5Fclose(c->f) < 0)
		note(c, ds_err_set(&e, DS_EIO, "%s: close failed: %s", c->file, ds_ckpt_h5msg(msg)), &e);
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
		return ds_err_set(err, DS_EIO, "%s: close failed: %s", c->file, ds_ckpt_h5msg(msg));
	}
	c->f = -1;
	return publish(c, err);
}

/* ---- attribute API ------------------------------------------------------------ */

static int attr_set(struct ds_ckpt *c, const char *group, const char *key, int kind, const void *v,
		    struct ds_err *err)
{
	const char *g = ds_ckpt_skip_slash(group ? group : "");
	hid_t o;
	herr_t rc;
	char msg[160];
	if (!c->writing || c->committed || c->f < 0)
		return ds_err_set(err, DS_EINVAL, "%s: attributes are set on a checkpoint being written", c->file);
	if (*g)
		DS_TRY(ensure_groups(c, g, strlen(g), err));
	o = ds_ckpt_open_obj(c, g);
	if (o < 0)
		return ds_err_set(err, DS_EIO, "%s: cannot open /%s: %s", c->file, g, ds_ckpt_h5msg(msg));
	if (kind == 0)
		rc = attr_put_scalar(o, key, H5T_STD_I64LE, H5T_NATIVE_INT64, v);
	else if (kind == 1)
		rc = attr_put_scalar(o, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v);
	else
		rc = attr_put_str(o, key, v);
	H5Oclose(o);
	if (rc < 0)
		return note(c, ds_err_set(err, DS_EIO, "%s: /%s: cannot set attribute %s: %s", c->file, g, key,
					  ds_ckpt_h5msg(msg)), err);
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

