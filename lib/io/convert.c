/* convert.c - ds_convert_run: detect the input, open it as a tensor source,
 * and stream it tensor by tensor into the requested writer; the safetensors
 * and llm.c sources and writers live here, the HDF5 ones in convert_ckpt.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/convert_hf.h"
#include "io/convert_int.h"
#include "io/convert_out.h"
#include "io/llmc.h"
#include "io/safetensors.h"
#include "util/half.h"
#include "util/log.h"
#include "util/mem.h"

static const char *const fmt_names[] = { "auto", "hdf5", "safetensors", "llmc", "fp32", "fp16", "bf16", NULL };

const char *ds_convert_fmt_name(int fmt)
{
	return fmt >= 0 && fmt <= DS_FMT_BF16 ? fmt_names[fmt] : "?";
}

int ds_convert_fmt_parse(const char *s)
{
	for (int i = 0; fmt_names[i]; i++)
		if (!strcmp(s, fmt_names[i]))
			return i;
	if (!strcmp(s, "ckpt") || !strcmp(s, "checkpoint"))
		return DS_FMT_CKPT;
	if (!strcmp(s, "llm.c"))
		return DS_FMT_LLMC;
	return -1;
}

void ds_convert_narrow_inplace(float *buf, size_t n, int bf16)
{
	/* block by block through a small buffer: block i's 16-bit output
	 * [2i, 2i + 2B) never reaches the fp32 input of a later block (>= 4(i + B)) */
	enum { B = 4096 };
	uint16_t tmp[B];
	uint16_t *out = (uint16_t *)buf;
	for (size_t i = 0; i < n; i += B) {
		size_t k = n - i < B ? n - i : B;
		if (bf16)
			ds_fp32_to_bf16_n(tmp, buf + i, k);
		else
			ds_fp32_to_fp16_n(tmp, buf + i, k);
		memcpy(out + i, tmp, k * sizeof(uint16_t));
	}
}

/* ---- sources ------------------------------------------------------------ */

int ds_csrc_setup(struct ds_csrc *s, struct ds_err *err)
{
	int rc = ds_gpt_create(&s->model, &s->cfg, err);
	if (rc < 0)
		return ds_err_prefix(err, "%s: ", s->path);
	s->cfg = *ds_gpt_config(s->model);
	if (!s->model_json && !(s->model_json = ds_convert_model_json(&s->cfg)))
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	return 0;
}

void ds_csrc_release(struct ds_csrc *s)
{
	if (s->close && s->ctx)
		s->close(s->ctx);
	ds_gpt_destroy(s->model);
	free(s->model_json);
	memset(s, 0, sizeof(*s));
}

uint64_t ds_csrc_largest(const struct ds_csrc *s)
{
	uint64_t m = 0;
	for (int i = 0; i < ds_gpt_num_tensors(s->model); i++)
		if ((uint64_t)ds_gpt_tensor(s->model, i)->numel > m)
			m = (uint64_t)ds_gpt_tensor(s->model, i)->numel;
	return m * sizeof(float);
}

/* safetensors: HF names mapped back to dstk's, with the inverse transforms. */
struct st_src {
	struct ds_st_file **f;      /* one file, or the shards of model.safetensors.index.json */
	int nf;
	float *tmp;                 /* scratch for the permuted tensors, allocated once */
	uint64_t tmp_bytes;         /* fp32 bytes of the largest permuted tensor */
	int arch;
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
		/* HF's rows are a prefix of dstk's: read in place, zero the padding */
		int64_t n = shape[0] * (shape[1] ? shape[1] : 1);
		memset(dst + n, 0, (size_t)(t->numel - n) * sizeof(float));
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

int ds_csrc_open_safetensors(struct ds_csrc *s, const char *path, const char *hf_config, struct ds_err *err)
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
	if ((rc = ds_hf_config_load(cfgpath, &s->cfg, &arch, err)) < 0)
		return rc;
	/* our own export carries dstk's model JSON: padding, init and window
	 * survive the round trip; it must describe the same network */
	if ((dm = ds_st_index_meta(&x->f[0]->idx, "dstk_model"))) {
		struct ds_model_config m;
		if ((rc = ds_convert_model_parse(dm, s->path, &m, err)) < 0)
			return rc;
		if (m.num_layers != s->cfg.num_layers || m.hidden_size != s->cfg.hidden_size ||
		    m.num_attention_heads != s->cfg.num_attention_heads || m.vocab_size != s->cfg.vocab_size ||
		    m.intermediate_size != s->cfg.intermediate_size || m.pos_emb != s->cfg.pos_emb ||
		    m.no_weight_tying != s->cfg.no_weight_tying || m.gpt_j_residual != s->cfg.gpt_j_residual ||
		    m.max_position_embeddings != s->cfg.max_position_embeddings)
			return ds_err_set(err, DS_EINVAL, "%s: __metadata__ dstk_model disagrees with %s; remove one",
					  s->path, cfgpath);
		s->cfg = m;
		/* kept verbatim, so HDF5 -> safetensors -> HDF5 returns the same text */
		if (!(s->model_json = strdup(dm)))
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

/* llm.c model file. */
struct llmc_src {
	int fd;
	struct ds_llmc_header h;
	char *path;
};

static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int llmc_read(void *ctx, const struct ds_gpt_tensor *t, float *dst, struct ds_err *err)
{
	struct llmc_src *x = ctx;
	int64_t off, n;
	int bf = x->h.version == DS_LLMC_V_BF16;
	if (ds_llmc_locate(&x->h, t->name, &off, &n) < 0)
		return ds_err_set(err, DS_EINTERNAL, "%s: no llm.c slot for '%s'", x->path, t->name);
	memset(dst, 0, (size_t)t->numel * sizeof(float));
	if (pread_full(x->fd, dst, (size_t)n * (bf ? 2 : 4), DS_LLMC_HEADER_BYTES + (uint64_t)off * (bf ? 2 : 4)))
		return ds_err_set(err, DS_ECORRUPT, "%s: tensor '%s': short read: truncated?", x->path, t->name);
	if (bf) {
		/* widen in place from the back: bf16 element i sits in bytes 2i..2i+1 */
		const uint16_t *h = (const uint16_t *)dst;
		for (int64_t i = n - 1; i >= 0; i--)
			dst[i] = ds_bf16_to_fp32(h[i]);
	}
	return 0;
}

static void llmc_close(void *ctx)
{
	struct llmc_src *x = ctx;
	if (x->fd >= 0)
		close(x->fd);
	free(x->path);
	free(x);
}

int ds_csrc_open_llmc(struct ds_csrc *s, const char *path, struct ds_err *err)
{
	struct llmc_src *x = calloc(1, sizeof(*x));
	int32_t w[256];
	struct stat st;
	int rc;
	memset(s, 0, sizeof(*s));
	s->kind = "llm.c";
	snprintf(s->path, sizeof(s->path), "%s", path);
	if (!x || !(x->path = strdup(path))) {
		free(x);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	x->fd = -1;
	s->ctx = x;
	s->read = llmc_read;
	s->close = llmc_close;
	x->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (x->fd < 0)
		return ds_err_set(err, DS_EINVAL, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(x->fd, &st) != 0 || st.st_size < DS_LLMC_HEADER_BYTES || pread_full(x->fd, w, sizeof(w), 0))
		return ds_err_set(err, DS_ECORRUPT, "%s: shorter than llm.c's 1024-byte header", path);
	if ((rc = ds_llmc_parse_header(w, (uint64_t)st.st_size, path, &x->h, err)) < 0)
		return rc;
	ds_llmc_config(&x->h, &s->cfg);
	return ds_csrc_setup(s, err);
}

/* ---- writers ------------------------------------------------------------ */

/* mkdir -p d. */
static int make_dir(const char *d, struct ds_err *err)
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
	int rc, xf, arch = ds_hf_arch_for(&s->cfg, err), n = ds_gpt_num_tensors(s->model);
	if (arch < 0)
		return ds_err_prefix(err, "%s: ", s->path);
	if ((rc = make_dir(outdir, err)) < 0)
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
	return rc;
}

int ds_convert_write_llmc(struct ds_csrc *s, const char *path, int version, uint64_t *bytes,
			  struct ds_err *err)
{
	struct ds_llmc_header h;
	struct ds_outfile o = { 0 };
	int32_t w[256];
	float *a = NULL;
	char name[96];
	int rc, bf = version == DS_LLMC_V_BF16;
	if ((rc = ds_llmc_header_for(&s->cfg, version, &h, err)) < 0)
		return ds_err_prefix(err, "%s: ", s->path);
	/* one buffer: the largest tensor, or llm.c's wte if dstk pads less */
	{
		uint64_t wte = (uint64_t)h.Vp * h.C * 4;
		a = ds_alloc((ds_csrc_largest(s) > wte ? ds_csrc_largest(s) : wte) + 64);
	}
	if (!a) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	ds_llmc_encode_header(&h, w);
	if ((rc = ds_outfile_open(&o, path, err)) < 0 || (rc = ds_outfile_write(&o, w, sizeof(w), err)) < 0)
		goto out;
	for (int k = 0; k < ds_llmc_tensor_count(&h); k++) {
		int i;
		const struct ds_gpt_tensor *t;
		int64_t off, n, total;
		ds_llmc_tensor_name(&h, k, name, sizeof(name));
		if ((i = ds_gpt_find(s->model, name)) < 0) {
			rc = ds_err_set(err, DS_EINTERNAL, "no tensor '%s'", name);
			goto out;
		}
		t = ds_gpt_tensor(s->model, i);
		ds_llmc_locate(&h, name, &off, &n);
		if ((rc = s->read(s->ctx, t, a, err)) < 0)
			goto out;
		/* wte: rows [0, V) then zeros up to llm.c's Vp */
		total = k == 0 ? (int64_t)h.Vp * h.C : n;
		if (total > n)
			memset(a + n, 0, (size_t)(total - n) * sizeof(float));
		if (bf) {
			ds_convert_narrow_inplace(a, (size_t)total, 1);
			rc = ds_outfile_write(&o, a, (size_t)total * 2, err);
		} else {
			rc = ds_outfile_write(&o, a, (size_t)total * 4, err);
		}
		if (rc < 0)
			goto out;
		*bytes += (uint64_t)total * (bf ? 2 : 4);
	}
	rc = ds_outfile_commit(&o, err);
out:
	ds_outfile_abort(&o);
	ds_free(a);
	return rc;
}

/* ---- inspect output ---------------------------------------------------- */

void ds_cinfo_release(struct ds_cinfo *ci)
{
	free(ci->config_json);
	free(ci->model_json);
	free(ci->t);
	memset(ci, 0, sizeof(*ci));
}

static void print_shape(FILE *out, const struct ds_cinfo_tensor *t)
{
	fputc('[', out);
	for (int d = 0; d < t->ndim; d++)
		fprintf(out, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
	fputc(']', out);
}

void ds_cinfo_print(const struct ds_cinfo *ci, int json, FILE *out)
{
	if (json) {
		json_t *j = json_object(), *ts = json_array(), *v;
		json_object_set_new(j, "path", json_string(ci->path));
		json_object_set_new(j, "format", json_string(ci->format));
		json_object_set_new(j, "tag", ci->tag[0] ? json_string(ci->tag) : json_null());
		json_object_set_new(j, "step", ci->step >= 0 ? json_integer(ci->step) : json_null());
		json_object_set_new(j, "consumed_samples", ci->consumed >= 0 ? json_integer(ci->consumed) : json_null());
		json_object_set_new(j, "world_size", ci->world_size >= 0 ? json_integer(ci->world_size) : json_null());
		json_object_set_new(j, "zero_stage", ci->zero_stage >= 0 ? json_integer(ci->zero_stage) : json_null());
		json_object_set_new(j, "dtype", json_string(ci->dtype));
		v = ci->config_json ? json_loads(ci->config_json, 0, NULL) : NULL;
		json_object_set_new(j, "config", v ? v : (ci->config_json ? json_string(ci->config_json) : json_null()));
		v = ci->model_json ? json_loads(ci->model_json, 0, NULL) : NULL;
		json_object_set_new(j, "model", v ? v : (ci->model_json ? json_string(ci->model_json) : json_null()));
		for (int i = 0; i < ci->nt; i++) {
			json_t *sh = json_array();
			for (int d = 0; d < ci->t[i].ndim; d++)
				json_array_append_new(sh, json_integer(ci->t[i].shape[d]));
			json_array_append_new(ts, json_pack("{s:s, s:o, s:s, s:s}", "name", ci->t[i].name, "shape", sh,
							    "dtype", ci->t[i].dtype, "checksum", ci->t[i].status));
		}
		json_object_set_new(j, "tensors", ts);
		json_object_set_new(j, "bad_checksums", json_integer(ci->nbad));
		json_dumpf(j, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', out);
		json_decref(j);
		return;
	}
	fprintf(out, "# %s\n", ci->path);
	fprintf(out, "format       %s\n", ci->format);
	if (ci->tag[0])
		fprintf(out, "tag          %s\n", ci->tag);
	if (ci->step >= 0)
		fprintf(out, "step         %lld\n", (long long)ci->step);
	if (ci->consumed >= 0)
		fprintf(out, "consumed     %lld samples\n", (long long)ci->consumed);
	if (ci->world_size >= 0)
		fprintf(out, "world size   %d (at save)\n", ci->world_size);
	if (ci->zero_stage >= 0)
		fprintf(out, "zero stage   %d (at save)\n", ci->zero_stage);
	fprintf(out, "dtype        %s\n", ci->dtype);
	if (ci->config_json)
		fprintf(out, "config       %s\n", ci->config_json);
	if (ci->model_json) {
		json_t *m = json_loads(ci->model_json, 0, NULL);
		char *c = m ? json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		fprintf(out, "model        %s\n", c ? c : ci->model_json);
		free(c);
		json_decref(m);
	}
	fprintf(out, "# %-52s %-16s %-9s %s\n", "tensor", "shape", "dtype", "checksum");
	for (int i = 0; i < ci->nt; i++) {
		char sh[64];
		FILE *m = fmemopen(sh, sizeof(sh), "w");
		if (m) {
			print_shape(m, &ci->t[i]);
			fclose(m);
		} else {
			sh[0] = 0;
		}
		fprintf(out, "  %-52s %-16s %-9s %s\n", ci->t[i].name, sh, ci->t[i].dtype, ci->t[i].status);
	}
	fprintf(out, "# %d tensors, %d bad checksums\n", ci->nt, ci->nbad);
}

/* inspect of a safetensors or llm.c input: the file's tensors seen as dstk's. */
static int info_source(struct ds_csrc *s, struct ds_cinfo *ci, struct ds_err *err)
{
	int n = ds_gpt_num_tensors(s->model);
	memset(ci, 0, sizeof(*ci));
	ci->format = s->kind;
	snprintf(ci->path, sizeof(ci->path), "%s", s->path);
	ci->step = ci->consumed = -1;
	ci->world_size = ci->zero_stage = -1;
	snprintf(ci->dtype, sizeof(ci->dtype), "float32");
	ci->model_json = strdup(s->model_json);
	ci->t = calloc((size_t)n, sizeof(*ci->t));
	if (!ci->t || !ci->model_json)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, i);
		snprintf(ci->t[i].name, sizeof(ci->t[i].name), "%s", t->name);
		ci->t[i].ndim = t->ndim;
		ci->t[i].shape[0] = t->shape[0];
		ci->t[i].shape[1] = t->shape[1];
		ci->t[i].dtype = "float32";
		ci->t[i].status = "none";
	}
	ci->nt = n;
	return 0;
}

/* ---- detection and run -------------------------------------------------- */

static int detect(const char *path, struct ds_err *err)
{
	unsigned char b[16] = { 0 };
	char p[4096];
	struct stat st;
	int fd;
	ssize_t n;
	if (stat(path, &st) != 0)
		return ds_err_set(err, DS_EINVAL, "%s: %s", path, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		snprintf(p, sizeof(p), "%s/model.safetensors", path);
		if (access(p, F_OK) == 0)
			return DS_FMT_SAFETENSORS;
		snprintf(p, sizeof(p), "%s/model.safetensors.index.json", path);
		if (access(p, F_OK) == 0)
			return DS_FMT_SAFETENSORS;
		return DS_FMT_CKPT;   /* SAVE dir or tag dir: the checkpoint reader says if not */
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ds_err_set(err, DS_EINVAL, "%s: cannot open: %s", path, strerror(errno));
	n = read(fd, b, sizeof(b));
	close(fd);
	if (n >= 8 && !memcmp(b, "\x89HDF\r\n\x1a\n", 8))
		return DS_FMT_CKPT;
	if (n >= 4 && b[0] == (DS_LLMC_MAGIC & 255) && b[1] == ((DS_LLMC_MAGIC >> 8) & 255) &&
	    b[2] == ((DS_LLMC_MAGIC >> 16) & 255) && b[3] == ((DS_LLMC_MAGIC >> 24) & 255))
		return DS_FMT_LLMC;
	if ((n >= 9 && b[8] == '{') || (strlen(path) > 11 && !strcmp(path + strlen(path) - 11, ".index.json")))
		return DS_FMT_SAFETENSORS;
	return ds_err_set(err, DS_EINVAL, "%s: not a dstk checkpoint, safetensors or llm.c model file (give "
			  "--from if it is one)", path);
}

static int open_source(int fmt, const struct ds_convert_opts *o, struct ds_csrc *s, struct ds_err *err)
{
	switch (fmt) {
	case DS_FMT_SAFETENSORS: return ds_csrc_open_safetensors(s, o->input, o->hf_config, err);
	case DS_FMT_LLMC: return ds_csrc_open_llmc(s, o->input, err);
	case DS_FMT_CKPT: return ds_csrc_open_ckpt(s, o->input, err);
	default: return ds_err_set(err, DS_EINVAL, "--from %s: not an input format", ds_convert_fmt_name(fmt));
	}
}

/* Peak RSS of this process image: VmHWM, since getrusage's ru_maxrss
 * carries the pre-exec peak of a fat parent (a Python driver, say). */
static uint64_t peak_rss(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb ? kb * 1024 : ds_mem_peak_rss();
}

static void summary(const struct ds_convert_opts *o, const struct ds_csrc *s, const struct ds_convert_result *r,
		    FILE *out)
{
	if (o->json) {
		json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:I}", "input", s->path, "from", s->kind,
				      "output", o->output, "to", ds_convert_fmt_name(o->to), "tensors", r->ntensors,
				      "bytes", (json_int_t)r->bytes_out, "largest_tensor_bytes",
				      (json_int_t)r->largest_bytes, "peak_rss_bytes", (json_int_t)r->peak_rss);
		json_dumpf(j, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', out);
		json_decref(j);
		return;
	}
	fprintf(out, "%s: %d tensors, %llu bytes (%s -> %s); largest tensor %llu bytes, peak RSS %llu bytes\n",
		o->output, r->ntensors, (unsigned long long)r->bytes_out, s->kind, ds_convert_fmt_name(o->to),
		(unsigned long long)r->largest_bytes, (unsigned long long)r->peak_rss);
}

int ds_convert_run(const struct ds_convert_opts *o, FILE *out, struct ds_convert_result *res,
		   struct ds_err *err)
{
	struct ds_csrc s = { 0 };
	struct ds_cinfo ci = { 0 };
	int fmt = o->from, rc, dtype = o->dtype ? o->dtype : DS_FMT_FP32;
	int llmc_version = dtype == DS_FMT_BF16 ? DS_LLMC_V_BF16 : DS_LLMC_V_FP32;
	memset(res, 0, sizeof(*res));
	if (!o->input)
		return ds_err_set(err, DS_EINVAL, "no input given");
	if (fmt == DS_FMT_AUTO && (fmt = detect(o->input, err)) < 0)
		return fmt;
	if (fmt > DS_FMT_LLMC)
		return ds_err_set(err, DS_EINVAL, "--from %s: weights files are an output format; read them as "
				  "--from hdf5", ds_convert_fmt_name(fmt));
	if (o->cmd != DS_CONVERT_CONVERT) {
		if (fmt == DS_FMT_CKPT) {
			rc = ds_convert_info_ckpt(o->input, o->cmd == DS_CONVERT_VERIFY, &ci, err);
		} else if (o->cmd == DS_CONVERT_VERIFY) {
			rc = ds_err_set(err, DS_EINVAL, "%s: verify needs a dstk checkpoint (%s files carry no "
					"checksums)", o->input, ds_convert_fmt_name(fmt));
		} else if ((rc = open_source(fmt, o, &s, err)) == 0) {
			rc = info_source(&s, &ci, err);
		}
		if (rc == 0) {
			res->ntensors = ci.nt;
			res->bad = ci.nbad;
			ds_cinfo_print(&ci, o->json, out);
			if (ci.nbad) {
				int first = 0;
				while (first < ci.nt && strcmp(ci.t[first].status, "BAD"))
					first++;
				rc = ds_err_set(err, DS_ECHECK, "%s: %d dataset%s failed verification, first /%s (%s)",
						ci.path, ci.nbad, ci.nbad > 1 ? "s" : "",
						first < ci.nt ? ci.t[first].name : "?", ci.bad_msg);
			}
		}
		goto out;
	}
	if (!o->output) {
		rc = ds_err_set(err, DS_EINVAL, "no output given: use -o PATH");
		goto out;
	}
	if (o->to == DS_FMT_AUTO) {
		rc = ds_err_set(err, DS_EINVAL, "no output format: give --to hdf5|safetensors|llmc|fp32|fp16|bf16");
		goto out;
	}
	if (dtype != DS_FMT_FP32 && o->to != DS_FMT_SAFETENSORS && o->to != DS_FMT_LLMC) {
		rc = ds_err_set(err, DS_EINVAL, "--dtype applies to --to safetensors and llmc; for HDF5 weights "
				"use --to %s", ds_convert_fmt_name(dtype));
		goto out;
	}
	if (o->to == DS_FMT_LLMC && dtype == DS_FMT_FP16) {
		rc = ds_err_set(err, DS_EINVAL, "--dtype fp16: llm.c model files are fp32 (version 3) or bf16 "
				"(version 5)");
		goto out;
	}
	if ((rc = open_source(fmt, o, &s, err)) < 0)
		goto out;
	/* refuse an architecture the target cannot hold before any work */
	if (o->to == DS_FMT_SAFETENSORS && (rc = ds_hf_arch_for(&s.cfg, err)) < 0) {
		ds_err_prefix(err, "%s: ", s.path);
		goto out;
	}
	if (o->to == DS_FMT_LLMC) {
		struct ds_llmc_header h;
		if ((rc = ds_llmc_header_for(&s.cfg, llmc_version, &h, err)) < 0) {
			ds_err_prefix(err, "%s: ", s.path);
			goto out;
		}
	}
	res->ntensors = ds_gpt_num_tensors(s.model);
	res->largest_bytes = ds_csrc_largest(&s);
	ds_log_info("%s (%s): %d tensors, %lld parameters -> %s %s", s.path, s.kind, res->ntensors,
		    (long long)ds_gpt_num_params(s.model), ds_convert_fmt_name(o->to), o->output);
	switch (o->to) {
	case DS_FMT_SAFETENSORS: rc = ds_convert_write_safetensors(&s, o->output, dtype, &res->bytes_out, err); break;
	case DS_FMT_LLMC: rc = ds_convert_write_llmc(&s, o->output, llmc_version, &res->bytes_out, err); break;
	case DS_FMT_CKPT: rc = ds_convert_write_ckpt(&s, o->output, &res->bytes_out, err); break;
	default: rc = ds_convert_write_weights(&s, o->output, o->to, &res->bytes_out, err); break;
	}
	res->peak_rss = peak_rss();
	if (rc == 0)
		summary(o, &s, res, out);
out:
	ds_cinfo_release(&ci);
	ds_csrc_release(&s);
	return rc;
}
