/* ckpt_read.c - the checkpoint reader: open a tag (`latest`, a named tag,
 * a tag directory or a state.h5), the root attributes, tensor listings and
 * slice reads that check the CRC-32C of every chunk they touch (see ckpt.h).
 */
#include "config.h"

#include "io/ckpt.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt_int.h"
#include "util/crc32c.h"
#include "util/log.h"
#include "util/progress.h"

static int dtype_from_name(const char *s)
{
	for (int i = 0; i <= DS_CKPT_U8; i++)
		if (strcmp(s, ds_ckpt_dtype_name(i)) == 0)
			return i;
	return -1;
}

/* ---- attributes --------------------------------------------------------- */

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

/* ---- reader ----------------------------------------------------------------- */

/* Open c->file: its manifest first (the file's size, the CRC of every byte
 * of HDF5's), so that HDF5 parses only bytes that verified; a file without
 * a manifest (written before dstk had them) goes to HDF5 unchecked. */
static int open_file(struct ds_ckpt *c, struct ds_err *err)
{
	struct stat st;
	char msg[160];
	int64_t ver = 0;
	int r;
	if (stat(c->file, &st) != 0)
		return ds_err_set(err, DS_EINVAL, "%s: no such file; not a checkpoint (give --load DIR with a "
				  "'latest' file, DIR/global_stepN, or auto)", c->file);
	if (!S_ISREG(st.st_mode))
		return ds_err_set(err, DS_ECORRUPT, "%s: not a regular file; the checkpoint is damaged", c->file);
	DS_TRY(ds_ckpt_manifest_load(c->file, &c->man, err));
	if (c->man)
		DS_TRY(ds_ckpt_manifest_check(c->file, c->man, "m", 0, UINT64_MAX, NULL, NULL, err));
	if (H5Fis_hdf5(c->file) <= 0) {
		H5Eclear2(H5E_DEFAULT);
		return ds_err_set(err, DS_ECORRUPT, "%s: not an HDF5 file (%lld bytes); the checkpoint is corrupt or "
				  "truncated", c->file, (long long)st.st_size);
	}
	hid_t fapl = ds_ckpt_fapl(0);
	c->f = H5Fopen(c->file, H5F_ACC_RDONLY, fapl);
	H5Pclose(fapl);
	if (c->f < 0)
		return ds_err_set(err, DS_ECORRUPT, "%s: cannot open (%s); the checkpoint is corrupt or truncated",
				  c->file, ds_ckpt_h5msg(msg));
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
int ds_ckpt_open_tag(struct ds_ckpt **out, const char *dir, const char *tag, const char *file, struct ds_err *err)
{
	struct ds_ckpt *c = calloc(1, sizeof *c);
	int rc;
	*out = NULL;
	if (!c)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	c->f = -1;
	c->dfd = -1;
	c->save_dir = strdup(dir);
	c->tag = strdup(tag);
	if (c->save_dir) {  /* "ckpt/" and "ckpt" name the same directory */
		size_t n = strlen(c->save_dir);
		while (n > 1 && c->save_dir[n - 1] == '/')
			c->save_dir[--n] = '\0';
	}
	c->dir = !c->save_dir ? NULL : *tag ? ds_ckpt_join(c->save_dir, tag) : strdup(c->save_dir);
	c->file = !c->dir ? NULL : file ? strdup(file) : ds_ckpt_join(c->dir, "state.h5");
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
	char *p = ds_ckpt_join(dir, "latest");
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

int ds_ckpt_open(struct ds_ckpt **out, const char *load_dir, const char *tag, struct ds_err *err)
{
	char buf[256];
	*out = NULL;
	ds_ckpt_h5_quiet();
	if (!load_dir || !*load_dir)
		return ds_err_set(err, DS_EINVAL, "no checkpoint directory given (--load DIR)");
	struct stat st;
	if (stat(load_dir, &st) == 0 && S_ISREG(st.st_mode)) {  /* a state.h5 (or weights .h5) itself */
		const char *sl = strrchr(load_dir, '/');
		char *dir = !sl ? strdup(".") : strndup(load_dir, sl == load_dir ? 1 : (size_t)(sl - load_dir));
		int rc = dir ? ds_ckpt_open_tag(out, dir, "", load_dir, err) : ds_err_set(err, DS_ENOMEM, "out of memory");
		free(dir);
		return rc;
	}
	if (tag && strcmp(tag, "auto") == 0) {
		struct ds_ckpt_skip *sk;
		size_t nsk;
		int rc = ds_ckpt_pick(out, load_dir, NULL, NULL, NULL, &sk, &nsk, err);
		for (size_t i = 0; i < nsk; i++)
			ds_log_warn("checkpoint %s/%s skipped: %s", load_dir, sk[i].tag, sk[i].why);
		free(sk);
		if (rc == 0 && !*out)
			rc = ds_err_set(err, DS_EINVAL, "%s: no finished global_stepN checkpoint to load (auto)", load_dir);
		return rc;
	}
	if (!tag || strcmp(tag, "latest") == 0) {
		char *p = ds_ckpt_join(load_dir, "state.h5"), *l = ds_ckpt_join(load_dir, "latest");
		int direct = p && l && access(p, F_OK) == 0 && access(l, F_OK) != 0;
		free(p);
		free(l);
		if (direct)  /* load_dir is itself a tag directory */
			return ds_ckpt_open_tag(out, load_dir, "", NULL, err);
		DS_TRY(read_latest(load_dir, buf, sizeof buf, err));
		tag = buf;
	}
	return ds_ckpt_open_tag(out, load_dir, tag, NULL, err);
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

void ds_ckpt_rt_close(struct ds_ckpt_rt *t)
{
	if (t->dset >= 0)
		H5Dclose(t->dset);
	free(t->crc);
	t->dset = -1;
	t->crc = NULL;
}

/* Open dataset name with its shape, dtype and (want_crc) checksums. */
int ds_ckpt_rt_open(struct ds_ckpt *c, const char *name, struct ds_ckpt_rt *t, int want_crc, struct ds_err *err)
{
	char *dt = NULL;
	hid_t s;
	int nd;
	memset(t, 0, sizeof *t);
	t->dset = -1;
	name = ds_ckpt_skip_slash(name);
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
		ds_ckpt_rt_close(t);
		return ds_err_set(err, DS_ECORRUPT, "%s: /%s: missing or unknown dtype attribute", c->file, name);
	}
	free(dt);
	s = H5Dget_space(t->dset);
	nd = s < 0 ? -1 : H5Sget_simple_extent_ndims(s);
	if (nd < 1 || nd > DS_CKPT_MAX_DIMS || H5Sget_simple_extent_dims(s, t->shape, NULL) < 0) {
		if (s >= 0)
			H5Sclose(s);
		ds_ckpt_rt_close(t);
		return ds_err_set(err, DS_ECORRUPT, "%s: /%s: bad dataspace", c->file, name);
	}
	H5Sclose(s);
	haddr_t at = H5Dget_offset(t->dset);
	t->off = at == HADDR_UNDEF ? UINT64_MAX : (uint64_t)at;
	H5Eclear2(H5E_DEFAULT);
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
		ds_ckpt_rt_close(t);
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

static int crc_fail(struct ds_ckpt *c, const struct ds_ckpt_rt *t, uint64_t ch, uint32_t got, struct ds_err *err)
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
int ds_ckpt_rt_read(struct ds_ckpt *c, struct ds_ckpt_rt *t, uint64_t b, uint64_t e, uint8_t *out, struct ds_err *err)
{
	size_t es = ds_ckpt_dtype_size(t->info.dtype);
	uint64_t cb = t->chunk_bytes, total = t->info.numel * es, bb = b * es, be = e * es;
	hid_t mt = ds_ckpt_mem_type(t->info.dtype);
	char msg[160];
	if (b >= e)
		return 0;
	DS_TRY(ensure_tmp(c, (size_t)cb, err));
	for (uint64_t ch = bb / cb; ch * cb < be; ) {
		uint64_t cs = ch * cb, ce = cs + cb < total ? cs + cb : total;
		ds_progress_note();
		if (out && cs >= bb && ce <= be) {
			uint64_t run = ch + 1, re = ce;
			/* runs of at most RUN_BYTES, so the CRC pass finds them in cache */
			while (run * cb < be && (run * cb + cb <= be || be == total) && run < t->nchunks &&
			       (run - ch + 1) * cb <= RUN_BYTES) {
				re = run * cb + cb < total ? run * cb + cb : total;
				run++;
			}
			uint8_t *dst = out + (cs - bb);
			if (ds_ckpt_xfer(t->dset, mt, t->info.ndim, t->shape, cs / es, re / es, dst, 0, H5P_DEFAULT) < 0)
				return ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s: read of bytes %llu..%llu failed (%s)",
						  c->file, t->info.name, (unsigned long long)cs, (unsigned long long)re,
						  ds_ckpt_h5msg(msg));
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
		if (ds_ckpt_xfer(t->dset, mt, t->info.ndim, t->shape, cs / es, ce / es, c->tmp, 0, H5P_DEFAULT) < 0)
			return ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s: read of chunk %llu failed (%s)", c->file,
					  t->info.name, (unsigned long long)ch, ds_ckpt_h5msg(msg));
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
	struct ds_ckpt_rt t;
	if (c->writing)
		return ds_err_set(err, DS_EINVAL, "%s: tensor_info needs a reader", c->file);
	DS_TRY(ds_ckpt_rt_open(c, name, &t, 0, err));
	*info = t.info;
	ds_ckpt_rt_close(&t);
	return 0;
}

int ds_ckpt_tensor_read(struct ds_ckpt *c, const char *name, uint64_t begin, uint64_t end, void *out,
			struct ds_err *err)
{
	struct ds_ckpt_rt t;
	int rc;
	if (c->writing)
		return ds_err_set(err, DS_EINVAL, "%s: tensor_read needs a reader", c->file);
	DS_TRY(ds_ckpt_rt_open(c, name, &t, 1, err));
	if (begin > end || end > t.info.numel)
		rc = ds_err_set(err, DS_EINVAL, "%s: /%s: slice [%llu, %llu) outside its %llu elements", c->file,
				t.info.name, (unsigned long long)begin, (unsigned long long)end,
				(unsigned long long)t.info.numel);
	else
		rc = ds_ckpt_rt_read(c, &t, begin, end, out, err);
	ds_ckpt_rt_close(&t);
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
		struct ds_ckpt_rt t;
		if (x->n == x->cap) {
			size_t cap = x->cap ? 2 * x->cap : 64;
			struct ds_ckpt_tensor_info *nv = realloc(x->v, cap * sizeof *nv);
			if (!nv)
				x->rc = ds_err_set(x->err, DS_ENOMEM, "out of memory");
			else
				x->v = nv, x->cap = cap;
		}
		if (x->rc == 0)
			x->rc = ds_ckpt_rt_open(x->c, x->prefix, &t, 0, x->err);
		if (x->rc == 0) {
			x->v[x->n++] = t.info;
			ds_ckpt_rt_close(&t);
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

static int attr_get(struct ds_ckpt *c, const char *group, const char *key, hid_t mtype, void *v, char **s,
		    struct ds_err *err)
{
	const char *g = ds_ckpt_skip_slash(group ? group : "");
	hid_t o;
	int r;
	if (c->f < 0)
		return ds_err_set(err, DS_EINVAL, "%s: checkpoint is closed", c->file);
	o = ds_ckpt_open_obj(c, g);
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
	o = ds_ckpt_open_obj(c, group);
	if (o < 0) {
		H5Eclear2(H5E_DEFAULT);
		return 0;
	}
	r = H5Aexists(o, key) > 0;
	H5Oclose(o);
	return r;
}

