/* convert_st.c - safetensors as a tensor source (one file or transformers'
 * shards, HF names and layouts mapped back to dstk's) and as an output
 * (model.safetensors + config.json), for ds_convert_run.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/convert_hf.h"
#include "driver/convert_int.h"
#include "io/convert_out.h"
#include "io/safetensors.h"
#include "util/mem.h"

/* safetensors: HF names mapped back to dstk's, with the inverse transforms. */
struct st_src {
	struct ds_st_file **f;      /* one file, or the shards of model.safetensors.index.json */
	int nf;
	float *tmp;                 /* scratch for the permuted tensors, allocated once */
	uint64_t tmp_bytes;         /* fp32 bytes of the largest permuted tensor */
	int arch;
	int own_export;             /* carries dstk_model: its padding metadata applies */
	const char *prefix_strip;   /* "transformer." when the file holds hub-style unprefixed names */
	const struct ds_model_config *cfg;
};

/* Tensor hf (or its hub-style unprefixed name): index in file *fi, or -1. */
static int st_find(struct st_src *x, const char *hf, int *fi)
{
	for (*fi = 0; *fi < x->nf; (*fi)++) {
		const struct ds_st_index *idx = &x->f[*fi]->idx;
		int i = ds_st_index_find(idx, hf);
		if (i < 0 && x->prefix_strip && !strncmp(hf, x->prefix_strip, strlen(x->prefix_strip)))
			i = ds_st_index_find(idx, hf + strlen(x->prefix_strip));
		if (i >= 0)
			return i;
	}
	return -1;
}

/* ---- padding rows --------------------------------------------------------
 * HF holds vocab_size rows of wte / lm_head; dstk's rows past it (the
 * padding) never touch an output and get no gradient, but they are part of
 * the checkpoint.  Our export keeps them in __metadata__ as base64 of the
 * fp32 bytes under "dstk_padding:<dstk name>" (only when not all zero), so
 * HDF5 -> safetensors -> HDF5 is bitwise; transformers ignores the key. */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* base64 of n bytes (malloc'd, NUL-terminated) or NULL. */
static char *b64_encode(const unsigned char *p, size_t n)
{
	char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;
	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
		*q++ = b64[v >> 18];
		*q++ = b64[(v >> 12) & 63];
		*q++ = i + 1 < n ? b64[(v >> 6) & 63] : '=';
		*q++ = i + 2 < n ? b64[v & 63] : '=';
	}
	*q = 0;
	return o;
}

/* Decode base64 text s into exactly n bytes at out; 0, or -1 when s is not
 * valid base64 of n bytes. */
static int b64_decode(const char *s, unsigned char *out, size_t n)
{
	size_t len = strlen(s), k = 0;
	if (len % 4 || len / 4 * 3 < n || len / 4 * 3 > n + 2)
		return -1;
	for (size_t i = 0; i < len; i += 4) {
		uint32_t v = 0;
		for (int j = 0; j < 4; j++) {
			const char *c = strchr(b64, s[i + j]);
			if (s[i + j] == '=' && i + 4 == len && j >= 2)
				c = b64;
			else if (!c || !s[i + j])
				return -1;
			v = v << 6 | (uint32_t)(c - b64);
		}
		for (int j = 0; j < 3 && k < n; j++)
			out[k++] = (unsigned char)(v >> (16 - 8 * j));
	}
	return k == n ? 0 : -1;
}

static int st_read(void *ctx, const struct ds_gpt_tensor *t, float *dst, struct ds_err *err)
{
	struct st_src *x = ctx;
	char hf[160];
	int64_t shape[2];
	int xf, i, fi, rc;
	float *tmp;
	if (ds_hf_map(x->arch, x->cfg, t, hf, sizeof(hf), shape, &xf) < 0 || (i = st_find(x, hf, &fi)) < 0)
		return ds_err_set(err, DS_EINTERNAL, "%s: tensor for '%s' vanished", x->f[0]->path, t->name);
	if (xf == DS_HF_COPY || xf == DS_HF_UNPAD) {
		/* HF's rows are a prefix of dstk's: read in place; the padding is
		 * our export's metadata copy, else zero */
		int64_t n = shape[0] * (shape[1] ? shape[1] : 1);
		char key[160];
		const char *pad;
		snprintf(key, sizeof(key), "dstk_padding:%s", t->name);
		pad = x->own_export ? ds_st_index_meta(&x->f[0]->idx, key) : NULL;
		memset(dst + n, 0, (size_t)(t->numel - n) * sizeof(float));
		if (pad && b64_decode(pad, (unsigned char *)(dst + n), (size_t)(t->numel - n) * sizeof(float)))
			return ds_err_set(err, DS_ECORRUPT, "%s: __metadata__ '%s' is not base64 of %lld fp32 values",
					  x->f[0]->path, key, (long long)(t->numel - n));
		return ds_st_read_f32(x->f[fi], i, dst, err);
	}
	/* a scratch buffer kept across reads: allocating and freeing one per
	 * tensor lets glibc's heap grow past twice the largest tensor */
	if (!x->tmp) {
		x->tmp = ds_alloc((size_t)x->tmp_bytes + 64);
		if (!x->tmp)
			return ds_err_set(err, DS_ENOMEM, "%s: out of memory for '%s'", x->f[fi]->path, hf);
	}
	tmp = x->tmp;
	rc = ds_st_read_f32(x->f[fi], i, tmp, err);
	if (rc == 0)
		ds_hf_apply_inverse(xf, x->cfg, t, tmp, dst);
	return rc;
}

static void st_close(void *ctx)
{
	struct st_src *x = ctx;
	for (int i = 0; i < x->nf; i++)
		ds_st_close(x->f[i]);
	free(x->f);
	ds_free(x->tmp);
	free(x);
}

/* Known non-parameter buffers some HF versions save. */
static int st_ignorable(const char *n)
{
	static const char *const suffix[] = { ".attn.bias", ".attn.masked_bias", ".attention.bias",
					      ".attention.masked_bias", ".rotary_emb.inv_freq" };
	size_t ln = strlen(n);
	for (size_t k = 0; k < sizeof(suffix) / sizeof(suffix[0]); k++) {
		size_t ls = strlen(suffix[k]);
		if (ln > ls && !strcmp(n + ln - ls, suffix[k]))
			return 1;
	}
	return 0;
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* path is a .safetensors file, or transformers' sharded index
 * (model.safetensors.index.json: {"weight_map": {tensor: shard file}}). */
static int open_shards(struct st_src *x, const char *path, struct ds_err *err)
{
	size_t n = strlen(path);
	json_error_t je;
	json_t *j, *wm, *v;
	const char *k, *sl;
	char **names = NULL;
	int rc = 0, nn = 0;
	if (n < 11 || strcmp(path + n - 11, ".index.json")) {
		if (!(x->f = calloc(1, sizeof(*x->f))))
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		x->nf = 1;
		return ds_st_open(&x->f[0], path, err);
	}
	if (!(j = json_load_file(path, JSON_REJECT_DUPLICATES, &je)))
		return ds_err_set(err, DS_EINVAL, "%s:%d: %s", path, je.line, je.text);
	wm = json_object_get(j, "weight_map");
	if (!json_is_object(wm) || !json_object_size(wm)) {
		rc = ds_err_set(err, DS_EINVAL, "%s: key 'weight_map' must map tensor names to shard files", path);
		goto out;
	}
	names = calloc(json_object_size(wm), sizeof(char *));
	x->f = calloc(json_object_size(wm), sizeof(*x->f));
	if (!names || !x->f) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	sl = strrchr(path, '/');
	json_object_foreach(wm, k, v) {
		char p[4096];
		int seen = 0;
		if (!json_is_string(v) || strchr(json_string_value(v), '/')) {
			rc = ds_err_set(err, DS_EINVAL, "%s: weight_map '%s': expected a file name in this directory",
					path, k);
			goto out;
		}
		for (int i = 0; i < nn; i++)
			seen |= !strcmp(names[i], json_string_value(v));
		if (seen)
			continue;
		names[nn++] = (char *)json_string_value(v);
		snprintf(p, sizeof(p), "%.*s%s", sl ? (int)(sl - path + 1) : 0, path, json_string_value(v));
		if ((rc = ds_st_open(&x->f[x->nf], p, err)) < 0)
			goto out;
		x->nf++;
	}
	/* every listed tensor in the shard named for it, and only there */
	json_object_foreach(wm, k, v) {
		int hits = 0, right = 0;
		for (int f = 0; f < x->nf; f++)
			if (ds_st_index_find(&x->f[f]->idx, k) >= 0) {
				const char *b = strrchr(x->f[f]->path, '/');
				hits++;
				right |= !strcmp(b ? b + 1 : x->f[f]->path, json_string_value(v));
			}
		if (hits != 1 || !right) {
			rc = ds_err_set(err, DS_EINVAL, "%s: tensor '%s' is %s", path, k,
					hits == 0 ? "in no shard" : "not (only) in the shard weight_map names");
			goto out;
		}
	}
out:
	free(names);
	json_decref(j);
	return rc;
}

int ds_csrc_open_safetensors(struct ds_csrc *s, const char *path, const char *hf_config, int approx_gelu,
			     struct ds_err *err)
{
	struct st_src *x = calloc(1, sizeof(*x));
	char cfgpath[4096];
	const char *dm;
	int rc, arch, *used = NULL;
	memset(s, 0, sizeof(*s));
	s->kind = "safetensors";
	if (!x)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	if (is_dir(path)) {
		snprintf(s->path, sizeof(s->path), "%s/model.safetensors", path);
		if (access(s->path, F_OK) != 0)
			snprintf(s->path, sizeof(s->path), "%s/model.safetensors.index.json", path);
	} else {
		snprintf(s->path, sizeof(s->path), "%s", path);
	}
	if (hf_config) {
		snprintf(cfgpath, sizeof(cfgpath), "%s", hf_config);
	} else {
		const char *sl = strrchr(s->path, '/');
		snprintf(cfgpath, sizeof(cfgpath), "%.*sconfig.json", sl ? (int)(sl - s->path + 1) : 0, s->path);
	}
	s->ctx = x;
	s->read = st_read;
	s->close = st_close;
	if ((rc = open_shards(x, s->path, err)) < 0)
		return rc;
	if (access(cfgpath, R_OK) != 0)
		return ds_err_set(err, DS_EINVAL, "%s: cannot read the model's config.json (%s); give it with "
				  "--hf-config FILE", cfgpath, strerror(errno));
	if ((rc = ds_hf_config_load(cfgpath, &s->cfg, &arch, approx_gelu, err)) < 0)
		return rc;
	/* our own export carries dstk's model JSON: padding, init and window
	 * survive the round trip; it must describe the same network */
	if ((dm = ds_st_index_meta(&x->f[0]->idx, "dstk_model"))) {
		struct ds_model_config m;
		if ((rc = ds_convert_model_parse(dm, s->path, &m, err)) < 0)
			return rc;
		/* --approx-gelu on an export of gelu_exact: its tanh gelu, as config.json gave */
		int approx = approx_gelu && m.activation == DS_ACT_GELU_EXACT;
		if (approx)
			m.activation = DS_ACT_GELU;
		if (m.num_layers != s->cfg.num_layers || m.hidden_size != s->cfg.hidden_size ||
		    m.num_attention_heads != s->cfg.num_attention_heads || m.vocab_size != s->cfg.vocab_size ||
		    m.intermediate_size != s->cfg.intermediate_size || m.pos_emb != s->cfg.pos_emb ||
		    m.no_weight_tying != s->cfg.no_weight_tying || m.gpt_j_residual != s->cfg.gpt_j_residual ||
		    m.max_position_embeddings != s->cfg.max_position_embeddings || m.activation != s->cfg.activation)
			return ds_err_set(err, DS_EINVAL, "%s: __metadata__ dstk_model disagrees with %s; remove one",
					  s->path, cfgpath);
		s->cfg = m;
		x->own_export = 1;
		/* kept verbatim, so HDF5 -> safetensors -> HDF5 returns the same text */
		if (!(s->model_json = approx ? ds_convert_model_json(&m) : strdup(dm)))
			return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	x->arch = arch;
	x->cfg = &s->cfg;
	if (arch == DS_HF_GPT2) {
		int fi;
		if (st_find(x, "transformer.wte.weight", &fi) < 0 && st_find(x, "wte.weight", &fi) >= 0)
			x->prefix_strip = "transformer.";
	}
	if ((rc = ds_csrc_setup(s, err)) < 0)
		return rc;
	x->cfg = &s->cfg;
	/* every tensor present with the right shape and a float dtype, nothing unknown */
	{
		int total = 0;
		for (int f = 0; f < x->nf; f++)
			total += x->f[f]->idx.nt;
		used = calloc((size_t)total + 1, sizeof(int));
		if (!used)
			return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	for (int k = 0; k < ds_gpt_num_tensors(s->model); k++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, k);
		const struct ds_st_tensor *st;
		char hf[160];
		int64_t shape[2];
		int xf, i, fi, base = 0;
		if (ds_hf_map(arch, &s->cfg, t, hf, sizeof(hf), shape, &xf) < 0) {
			rc = ds_err_set(err, DS_EINTERNAL, "no %s name for '%s'", ds_hf_arch_name(arch), t->name);
			goto out;
		}
		if ((i = st_find(x, hf, &fi)) < 0) {
			rc = ds_err_set(err, DS_EINVAL, "%s: tensor '%s' is missing (model_type %s in %s)", s->path, hf,
					ds_hf_arch_name(arch), cfgpath);
			goto out;
		}
		st = &x->f[fi]->idx.t[i];
		for (int f = 0; f < fi; f++)
			base += x->f[f]->idx.nt;
		used[base + i] = 1;
		if (xf != DS_HF_COPY && xf != DS_HF_UNPAD && (uint64_t)t->numel * 4 > x->tmp_bytes)
			x->tmp_bytes = (uint64_t)t->numel * 4;
		if (st->ndim != t->ndim || st->shape[0] != shape[0] || (t->ndim > 1 && st->shape[1] != shape[1])) {
			rc = ds_err_set(err, DS_EINVAL, "%s: tensor '%s' has shape [%lld%s%lld], %s expects [%lld%s%lld]",
					s->path, hf, (long long)st->shape[0], st->ndim > 1 ? ", " : "",
					st->ndim > 1 ? (long long)st->shape[1] : 0LL, cfgpath, (long long)shape[0],
					t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)shape[1] : 0LL);
			goto out;
		}
		if (st->dtype != DS_ST_F32 && st->dtype != DS_ST_F16 && st->dtype != DS_ST_BF16 &&
		    st->dtype != DS_ST_F64) {
			rc = ds_err_set(err, DS_EINVAL, "%s: tensor '%s' has dtype %s; expected F32, F16, BF16 or F64",
					s->path, hf, ds_st_dtype_name(st->dtype));
			goto out;
		}
	}
	for (int f = 0, base = 0; f < x->nf; base += x->f[f++]->idx.nt)
		for (int i = 0; i < x->f[f]->idx.nt; i++) {
			const char *n = x->f[f]->idx.t[i].name;
			/* a tied head saved anyway (HF does that sometimes) is the embedding */
			if (used[base + i] || st_ignorable(n) ||
			    (!s->cfg.no_weight_tying && (!strcmp(n, "lm_head.weight") || !strcmp(n, "embed_out.weight"))))
				continue;
			rc = ds_err_set(err, DS_EINVAL, "%s: tensor '%s' is not part of a %s model as %s describes it",
					x->f[f]->path, n, ds_hf_arch_name(arch), cfgpath);
			goto out;
		}
out:
	free(used);
	return rc;
}

/* ---- writer ------------------------------------------------------------- */

/* mkdir -p d. */
int ds_convert_make_dir(const char *d, struct ds_err *err)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s", d);
	for (char *c = p + 1; *c; c++)
		if (*c == '/') {
			*c = 0;
			if (mkdir(p, 0777) != 0 && errno != EEXIST)
				return ds_err_set(err, DS_EIO, "%s: cannot create directory: %s", p, strerror(errno));
			*c = '/';
		}
	if (mkdir(d, 0777) != 0 && errno != EEXIST)
		return ds_err_set(err, DS_EIO, "%s: cannot create directory: %s", d, strerror(errno));
	if (!is_dir(d))
		return ds_err_set(err, DS_EINVAL, "%s: exists and is not a directory", d);
	return 0;
}

int ds_convert_write_safetensors(struct ds_csrc *s, const char *outdir, int fmt, uint64_t *bytes,
				 struct ds_err *err)
{
	int st_dt = fmt == DS_FMT_FP16 ? DS_ST_F16 : fmt == DS_FMT_BF16 ? DS_ST_BF16 : DS_ST_F32;
	size_t es = st_dt == DS_ST_F32 ? 4 : 2;
	struct ds_st_writer *w = NULL;
	struct ds_outfile cj = { 0 };
	char path[4096], hf[160];
	char *cfgtxt = NULL;
	float *a = NULL, *b = NULL;
	int64_t shape[2];
	if (s->cfg.moe.enabled)   /* Mixtral's names, where the architecture is Mixtral's */
		return ds_convert_write_mixtral(s, outdir, st_dt, bytes, err);
	int rc, xf, created, arch = ds_hf_arch_for(&s->cfg, err), n = ds_gpt_num_tensors(s->model);
	if (arch < 0)
		return ds_err_prefix(err, "%s: ", s->path);
	created = access(outdir, F_OK) != 0;
	if ((rc = ds_convert_make_dir(outdir, err)) < 0)
		return rc;
	snprintf(path, sizeof(path), "%s/model.safetensors", outdir);
	/* peak memory: the largest tensor, plus the largest one that must be
	 * permuted (COPY and UNPAD are written straight from the read buffer) */
	{
		uint64_t moved = 0;
		for (int i = 0; i < n; i++) {
			const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, i);
			if (ds_hf_map(arch, &s->cfg, t, hf, sizeof(hf), shape, &xf) == 0 && xf != DS_HF_COPY &&
			    xf != DS_HF_UNPAD && (uint64_t)t->numel * 4 > moved)
				moved = (uint64_t)t->numel * 4;
		}
		a = ds_alloc(ds_csrc_largest(s) + 64);
		b = ds_alloc(moved + 64);
	}
	cfgtxt = ds_hf_config_json(arch, &s->cfg, st_dt == DS_ST_F16 ? "float16" : st_dt == DS_ST_BF16 ? "bfloat16" : "float32");
	if (!a || !b || !cfgtxt) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = ds_st_writer_create(&w, path, err)) < 0 ||
	    (rc = ds_st_writer_meta(w, "format", "pt", err)) < 0 ||
	    (rc = ds_st_writer_meta(w, "dstk_model", s->model_json, err)) < 0)
		goto out;
	/* padding rows into the metadata (read once more here: the header goes first) */
	for (int i = 0; i < n; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, i);
		int64_t keep = (int64_t)s->cfg.vocab_size * (t->ndim > 1 ? t->shape[1] : 1);
		char key[160], *txt;
		int zero = 1;
		if (ds_hf_map(arch, &s->cfg, t, hf, sizeof(hf), shape, &xf) < 0 || xf != DS_HF_UNPAD ||
		    keep >= t->numel)
			continue;
		if ((rc = s->read(s->ctx, t, a, err)) < 0)
			goto out;
		for (int64_t k = keep; k < t->numel && zero; k++)
			zero = a[k] == 0.0f && !signbit(a[k]);
		if (zero)
			continue;
		snprintf(key, sizeof(key), "dstk_padding:%s", t->name);
		if (!(txt = b64_encode((const unsigned char *)(a + keep), (size_t)(t->numel - keep) * sizeof(float)))) {
			rc = ds_err_set(err, DS_ENOMEM, "out of memory");
			goto out;
		}
		rc = ds_st_writer_meta(w, key, txt, err);
		free(txt);
		if (rc < 0)
			goto out;
	}
	for (int i = 0; i < n; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, i);
		if (ds_hf_map(arch, &s->cfg, t, hf, sizeof(hf), shape, &xf) < 0) {
			rc = ds_err_set(err, DS_EINVAL, "%s: tensor '%s' has no %s name", s->path, t->name,
					ds_hf_arch_name(arch));
			goto out;
		}
		if ((rc = ds_st_writer_add(w, hf, st_dt, t->ndim, shape, err)) < 0)
			goto out;
	}
	for (int i = 0; i < n; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, i);
		ds_hf_map(arch, &s->cfg, t, hf, sizeof(hf), shape, &xf);
		if ((rc = s->read(s->ctx, t, a, err)) < 0)
			goto out;
		{
			float *out = xf != DS_HF_COPY && xf != DS_HF_UNPAD ? b : a;
			size_t k = (size_t)(shape[0] * (shape[1] ? shape[1] : 1));
			if (out == b)
				ds_hf_apply(xf, &s->cfg, t, a, b);
			if (es == 2)
				ds_convert_narrow_inplace(out, k, st_dt == DS_ST_BF16);
			if ((rc = ds_st_writer_write(w, out, k * es, err)) < 0)
				goto out;
			*bytes += (uint64_t)k * es;
		}
	}
	snprintf(path, sizeof(path), "%s/config.json", outdir);
	if ((rc = ds_outfile_open(&cj, path, err)) < 0 || (rc = ds_outfile_write(&cj, cfgtxt, strlen(cfgtxt), err)) < 0 ||
	    (rc = ds_outfile_write(&cj, "\n", 1, err)) < 0)
		goto out;
	if ((rc = ds_st_writer_commit(w, err)) < 0)
		goto out;
	rc = ds_outfile_commit(&cj, err);
out:
	ds_outfile_abort(&cj);
	ds_st_writer_destroy(w);
	free(cfgtxt);
	ds_free(a);
	ds_free(b);
	if (rc < 0 && created)
		rmdir(outdir);   /* a directory we made for a failed run: leave nothing behind */
	return rc;
}
