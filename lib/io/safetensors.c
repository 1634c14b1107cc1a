/* safetensors.c - safetensors reader (validating) and streaming writer.
 *
 * The reader trusts nothing: header length against the file size and the
 * 100 MB limit, JSON syntax, every entry's dtype, shape and byte count, and
 * that the ranges tile the data section with no hole and no overlap.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"
#include "io/convert_out.h"
#include "io/safetensors.h"
#include "util/half.h"
#include "util/mem.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[DS_ST_NDTYPES] = {
	[DS_ST_F32] = { "F32", 4 }, [DS_ST_F16] = { "F16", 2 }, [DS_ST_BF16] = { "BF16", 2 },
	[DS_ST_F64] = { "F64", 8 }, [DS_ST_I64] = { "I64", 8 }, [DS_ST_I32] = { "I32", 4 },
	[DS_ST_I16] = { "I16", 2 }, [DS_ST_I8] = { "I8", 1 },   [DS_ST_U8] = { "U8", 1 },
	[DS_ST_BOOL] = { "BOOL", 1 }, [DS_ST_U16] = { "U16", 2 }, [DS_ST_U32] = { "U32", 4 },
	[DS_ST_U64] = { "U64", 8 },
};

const char *ds_st_dtype_name(int dtype)
{
	return dtype >= 0 && dtype < DS_ST_NDTYPES ? dtypes[dtype].name : NULL;
}

size_t ds_st_dtype_size(int dtype)
{
	return dtype >= 0 && dtype < DS_ST_NDTYPES ? dtypes[dtype].size : 0;
}

int ds_st_dtype_parse(const char *s)
{
	for (int i = 0; i < DS_ST_NDTYPES; i++)
		if (!strcmp(s, dtypes[i].name))
			return i;
	return -1;
}

void ds_st_index_release(struct ds_st_index *idx)
{
	for (int i = 0; i < idx->nt; i++)
		free(idx->t[i].name);
	for (int i = 0; i < idx->nmeta; i++) {
		free(idx->meta_key[i]);
		free(idx->meta_val[i]);
	}
	free(idx->t);
	free(idx->meta_key);
	free(idx->meta_val);
	memset(idx, 0, sizeof(*idx));
}

int ds_st_index_find(const struct ds_st_index *idx, const char *name)
{
	for (int i = 0; i < idx->nt; i++)
		if (!strcmp(idx->t[i].name, name))
			return i;
	return -1;
}

const char *ds_st_index_meta(const struct ds_st_index *idx, const char *key)
{
	for (int i = 0; i < idx->nmeta; i++)
		if (!strcmp(idx->meta_key[i], key))
			return idx->meta_val[i];
	return NULL;
}

static int cmp_begin(const void *a, const void *b)
{
	const struct ds_st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* Non-negative JSON integer into *v; 0 on success. */
static int get_u64(json_t *j, uint64_t *v)
{
	if (!json_is_integer(j) || json_integer_value(j) < 0)
		return -1;
	*v = (uint64_t)json_integer_value(j);
	return 0;
}

static int parse_meta(json_t *m, const char *where, struct ds_st_index *idx, struct ds_err *err)
{
	const char *k;
	json_t *v;
	size_t n = json_object_size(m);
	if (!json_is_object(m))
		return ds_err_set(err, DS_ECORRUPT, "%s: header: __metadata__ is not an object", where);
	idx->meta_key = calloc(n + 1, sizeof(char *));
	idx->meta_val = calloc(n + 1, sizeof(char *));
	if (!idx->meta_key || !idx->meta_val)
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", where);
	json_object_foreach(m, k, v) {
		if (!json_is_string(v))
			return ds_err_set(err, DS_ECORRUPT, "%s: header: __metadata__ key '%s' is not a string",
					  where, k);
		idx->meta_key[idx->nmeta] = strdup(k);
		idx->meta_val[idx->nmeta] = strdup(json_string_value(v));
		if (!idx->meta_key[idx->nmeta++] || !idx->meta_val[idx->nmeta - 1])
			return ds_err_set(err, DS_ENOMEM, "%s: out of memory", where);
	}
	return 0;
}

static int parse_entry(const char *name, json_t *e, uint64_t data_len, const char *where,
		       struct ds_st_tensor *t, struct ds_err *err)
{
	json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape");
	json_t *off = json_object_get(e, "data_offsets");
	uint64_t numel = 1, bytes;
	if (!json_is_object(e))
		return ds_err_set(err, DS_ECORRUPT, "%s: header: tensor '%s' is not an object", where, name);
	if (!json_is_string(dt) || (t->dtype = ds_st_dtype_parse(json_string_value(dt))) < 0)
		return ds_err_set(err, DS_ECORRUPT, "%s: header: tensor '%s': unknown or missing dtype", where,
				  name);
	if (!json_is_array(sh) || json_array_size(sh) > DS_ST_MAX_DIMS)
		return ds_err_set(err, DS_ECORRUPT, "%s: header: tensor '%s': shape must be an array of at most %d "
				  "integers", where, name, DS_ST_MAX_DIMS);
	t->ndim = (int)json_array_size(sh);
	for (int d = 0; d < t->ndim; d++) {
		uint64_t v;
		if (get_u64(json_array_get(sh, d), &v) || v > ((uint64_t)1 << 48))
			return ds_err_set(err, DS_ECORRUPT, "%s: header: tensor '%s': shape[%d] is not a valid size",
					  where, name, d);
		t->shape[d] = (int64_t)v;
		if (v && numel > UINT64_MAX / 8 / v)
			return ds_err_set(err, DS_ECORRUPT, "%s: header: tensor '%s': shape too large", where, name);
		numel *= v;
	}
	if (!json_is_array(off) || json_array_size(off) != 2 || get_u64(json_array_get(off, 0), &t->begin) ||
	    get_u64(json_array_get(off, 1), &t->end) || t->end < t->begin)
		return ds_err_set(err, DS_ECORRUPT, "%s: header: tensor '%s': data_offsets must be [begin, end] "
				  "with begin <= end", where, name);
	if (t->end > data_len)
		return ds_err_set(err, DS_ECORRUPT, "%s: header: tensor '%s': data_offsets end %llu is past the "
				  "data (%llu bytes): truncated file?", where, name, (unsigned long long)t->end,
				  (unsigned long long)data_len);
	bytes = numel * ds_st_dtype_size(t->dtype);
	if (t->end - t->begin != bytes)
		return ds_err_set(err, DS_ECORRUPT, "%s: header: tensor '%s': data_offsets span %llu bytes, shape "
				  "and dtype need %llu", where, name, (unsigned long long)(t->end - t->begin),
				  (unsigned long long)bytes);
	t->name = strdup(name);
	if (!t->name)
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", where);
	return 0;
}

int ds_st_parse_header(const char *json, size_t n, uint64_t data_len, const char *where,
		       struct ds_st_index *idx, struct ds_err *err)
{
	json_error_t je;
	json_t *root = NULL, *e;
	const char *k;
	int rc = 0;
	uint64_t pos = 0;
	memset(idx, 0, sizeof(*idx));
	if (n == 0 || json[0] != '{')
		return ds_err_set(err, DS_ECORRUPT, "%s: not a safetensors file (header does not start with '{')",
				  where);
	const char *nul = memchr(json, 0, n);
	if (nul) {
		/* a whole JSON object before the NUL: the length field claims more
		 * than the header (its bytes run into the tensor data) */
		json_t *head = json_loadb(json, (size_t)(nul - json), JSON_DISABLE_EOF_CHECK, NULL);
		json_decref(head);
		if (head)
			return ds_err_set(err, DS_ECORRUPT, "%s: header length %zu runs past the header's JSON, which "
					  "ends before byte %zu (binary data follows): the length field is damaged or this "
					  "is not a safetensors file", where, n, (size_t)(nul - json) + 8);
		return ds_err_set(err, DS_ECORRUPT, "%s: header holds a NUL byte at byte %zu: not a safetensors file",
				  where, (size_t)(nul - json) + 8);
	}
	root = json_loadb(json, n, JSON_REJECT_DUPLICATES, &je);
	if (!root || !json_is_object(root)) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: header JSON at byte %d: %s", where, root ? 0 : je.position,
				root ? "not an object" : je.text);
		goto out;
	}
	idx->t = calloc(json_object_size(root) + 1, sizeof(*idx->t));
	if (!idx->t) {
		rc = ds_err_set(err, DS_ENOMEM, "%s: out of memory", where);
		goto out;
	}
	json_object_foreach(root, k, e) {
		if (!strcmp(k, "__metadata__")) {
			if ((rc = parse_meta(e, where, idx, err)) < 0)
				goto out;
			continue;
		}
		if ((rc = parse_entry(k, e, data_len, where, &idx->t[idx->nt], err)) < 0)
			goto out;
		idx->nt++;
	}
	qsort(idx->t, (size_t)idx->nt, sizeof(*idx->t), cmp_begin);
	for (int i = 0; i < idx->nt; i++) {
		if (idx->t[i].begin != pos) {
			rc = ds_err_set(err, DS_ECORRUPT, "%s: header: tensor '%s' starts at data byte %llu, expected %llu "
					"(ranges must tile the data with no overlap or hole)", where, idx->t[i].name,
					(unsigned long long)idx->t[i].begin, (unsigned long long)pos);
			goto out;
		}
		pos = idx->t[i].end;
	}
	if (pos != data_len)
		rc = ds_err_set(err, DS_ECORRUPT, "%s: %llu data bytes after the last tensor (which ends at %llu)",
				where, (unsigned long long)(data_len - pos), (unsigned long long)pos);
out:
	json_decref(root);
	if (rc < 0)
		ds_st_index_release(idx);
	return rc;
}

/* ---- reading ------------------------------------------------------------ */

int ds_st_open(struct ds_st_file **out, const char *path, struct ds_err *err)
{
	struct ds_st_file *f = calloc(1, sizeof(*f));
	struct stat st;
	unsigned char h8[8];
	uint64_t n = 0;
	char *hdr = NULL;
	int rc = 0;
	*out = NULL;
	if (!f || !(f->path = strdup(path))) {
		free(f);
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
	}
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		rc = ds_err_set(err, errno == ENOENT ? DS_EINVAL : DS_EIO, "%s: cannot open: %s", path,
				strerror(errno));
		goto out;
	}
	if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = ds_err_set(err, DS_EINVAL, "%s: not a regular file", path);
		goto out;
	}
	f->file_size = (uint64_t)st.st_size;
	if (f->file_size < 8 || ds_pread_full(f->fd, h8, 8, 0)) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: %llu bytes: too short for a safetensors file", path,
				(unsigned long long)f->file_size);
		goto out;
	}
	for (int i = 7; i >= 0; i--)
		n = n << 8 | h8[i];
	if (n > DS_ST_HEADER_MAX) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: header length %llu exceeds the 100 MB limit: not a "
				"safetensors file", path, (unsigned long long)n);
		goto out;
	}
	if (n > f->file_size - 8) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: header length %llu is past the end of the %llu-byte file: "
				"truncated or not a safetensors file", path, (unsigned long long)n,
				(unsigned long long)f->file_size);
		goto out;
	}
	hdr = malloc(n ? n : 1);
	if (!hdr) {
		rc = ds_err_set(err, DS_ENOMEM, "%s: out of memory for a %llu-byte header", path,
				(unsigned long long)n);
		goto out;
	}
	if (ds_pread_full(f->fd, hdr, n, 8)) {
		rc = ds_err_set(err, DS_EIO, "%s: read failed: %s", path, strerror(errno));
		goto out;
	}
	f->data_start = 8 + n;
	rc = ds_st_parse_header(hdr, n, f->file_size - f->data_start, path, &f->idx, err);
out:
	free(hdr);
	if (rc < 0)
		ds_st_close(f);
	else
		*out = f;
	return rc;
}

void ds_st_close(struct ds_st_file *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	ds_st_index_release(&f->idx);
	free(f->path);
	free(f);
}

int ds_st_read_raw(const struct ds_st_file *f, int i, void *dst, struct ds_err *err)
{
	const struct ds_st_tensor *t = &f->idx.t[i];
	if (ds_pread_full(f->fd, dst, (size_t)(t->end - t->begin), f->data_start + t->begin))
		return ds_err_set(err, DS_ECORRUPT, "%s: tensor '%s': cannot read bytes %llu..%llu: truncated?",
				  f->path, t->name, (unsigned long long)(f->data_start + t->begin),
				  (unsigned long long)(f->data_start + t->end));
	return 0;
}

int ds_st_read_f32(const struct ds_st_file *f, int i, float *dst, struct ds_err *err)
{
	const struct ds_st_tensor *t = &f->idx.t[i];
	size_t es = ds_st_dtype_size(t->dtype), n = (size_t)(t->end - t->begin) / es;
	void *tmp = NULL;
	int rc;
	if (t->dtype == DS_ST_F32)
		return ds_st_read_raw(f, i, dst, err);
	if (t->dtype != DS_ST_F16 && t->dtype != DS_ST_BF16 && t->dtype != DS_ST_F64)
		return ds_err_set(err, DS_EINVAL, "%s: tensor '%s': dtype %s is not a floating-point type",
				  f->path, t->name, ds_st_dtype_name(t->dtype));
	if (es == 2) {
		/* in place, no second buffer: the 16-bit values go to the back half
		 * and widen front to back (element k is read before 4k..4k+3 is
		 * written, and later elements lie at 2n + 2j >= 4k + 4) */
		uint16_t *h = (uint16_t *)((char *)dst + 2 * n);
		DS_TRY(ds_st_read_raw(f, i, h, err));
		ds_half_widen_front(t->dtype == DS_ST_F16 ? DS_HALF_FP16 : DS_HALF_BF16, dst, h, n);
		return 0;
	}
	tmp = ds_alloc(n * es + 1);
	if (!tmp)
		return ds_err_set(err, DS_ENOMEM, "%s: tensor '%s': out of memory", f->path, t->name);
	rc = ds_st_read_raw(f, i, tmp, err);
	if (rc == 0)
		for (size_t k = 0; k < n; k++)
			dst[k] = (float)((const double *)tmp)[k];
	ds_free(tmp);
	return rc;
}

/* ---- writing ------------------------------------------------------------ */

struct ds_st_writer {
	struct ds_outfile out;
	json_t *hdr, *meta;
	uint64_t declared, written;
	int started;
	char *path;
};

int ds_st_writer_create(struct ds_st_writer **out, const char *path, struct ds_err *err)
{
	struct ds_st_writer *w = calloc(1, sizeof(*w));
	*out = NULL;
	if (!w || !(w->hdr = json_object()) || !(w->path = strdup(path))) {
		ds_st_writer_destroy(w);
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
	}
	*out = w;
	return 0;
}

int ds_st_writer_meta(struct ds_st_writer *w, const char *key, const char *val, struct ds_err *err)
{
	if (w->started)
		return ds_err_set(err, DS_EINTERNAL, "%s: metadata after data", w->path);
	if (!w->meta && (!(w->meta = json_object()) || json_object_set(w->hdr, "__metadata__", w->meta)))
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", w->path);
	if (json_object_set_new(w->meta, key, json_string(val)))
		return ds_err_set(err, DS_EINVAL, "%s: metadata '%s' is not valid UTF-8", w->path, key);
	return 0;
}

int ds_st_writer_add(struct ds_st_writer *w, const char *name, int dtype, int ndim, const int64_t *shape,
		     struct ds_err *err)
{
	json_t *e, *sh, *off;
	uint64_t bytes = ds_st_dtype_size(dtype);
	if (w->started)
		return ds_err_set(err, DS_EINTERNAL, "%s: tensor '%s' declared after data", w->path, name);
	if (!bytes || ndim < 0 || ndim > DS_ST_MAX_DIMS)
		return ds_err_set(err, DS_EINVAL, "%s: tensor '%s': bad dtype or rank", w->path, name);
	if (json_object_get(w->hdr, name) || !strcmp(name, "__metadata__"))
		return ds_err_set(err, DS_EINVAL, "%s: tensor '%s' declared twice", w->path, name);
	e = json_object();
	sh = json_array();
	for (int d = 0; d < ndim; d++) {
		json_array_append_new(sh, json_integer(shape[d]));
		bytes *= (uint64_t)shape[d];
	}
	off = json_pack("[II]", (json_int_t)w->declared, (json_int_t)(w->declared + bytes));
	if (!e || !sh || !off || json_object_set_new(e, "dtype", json_string(ds_st_dtype_name(dtype))) ||
	    json_object_set_new(e, "shape", sh) || json_object_set_new(e, "data_offsets", off) ||
	    json_object_set_new(w->hdr, name, e))
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", w->path);
	w->declared += bytes;
	return 0;
}

/* Header JSON padded with spaces so the data starts 8-byte aligned, as the
 * reference writer does. */
static int start(struct ds_st_writer *w, struct ds_err *err)
{
	char *js = json_dumps(w->hdr, JSON_PRESERVE_ORDER | JSON_COMPACT);
	size_t n, padded;
	unsigned char h8[8];
	int rc;
	if (!js)
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", w->path);
	n = strlen(js);
	padded = (n + 7) / 8 * 8;
	for (int i = 0; i < 8; i++)
		h8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
	rc = ds_outfile_open(&w->out, w->path, err);
	if (rc == 0)
		rc = ds_outfile_write(&w->out, h8, 8, err);
	if (rc == 0)
		rc = ds_outfile_write(&w->out, js, n, err);
	if (rc == 0)
		rc = ds_outfile_write(&w->out, "        ", padded - n, err);
	free(js);
	w->started = 1;
	return rc;
}

int ds_st_writer_write(struct ds_st_writer *w, const void *data, size_t n, struct ds_err *err)
{
	if (!w->started)
		DS_TRY(start(w, err));
	if (w->written + n > w->declared)
		return ds_err_set(err, DS_EINTERNAL, "%s: more data than declared", w->path);
	w->written += n;
	return ds_outfile_write(&w->out, data, n, err);
}

int ds_st_writer_commit(struct ds_st_writer *w, struct ds_err *err)
{
	if (!w->started)
		DS_TRY(start(w, err));
	if (w->written != w->declared)
		return ds_err_set(err, DS_EINTERNAL, "%s: %llu data bytes written, %llu declared", w->path,
				  (unsigned long long)w->written, (unsigned long long)w->declared);
	return ds_outfile_commit(&w->out, err);
}

void ds_st_writer_destroy(struct ds_st_writer *w)
{
	if (!w)
		return;
	ds_outfile_abort(&w->out);
	json_decref(w->meta);
	json_decref(w->hdr);
	free(w->path);
	free(w);
}
