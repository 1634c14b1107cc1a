/* convert_ckpt.c - the HDF5 side of ds-ckpt-convert, on lib/io/ckpt:
 * a dstk checkpoint (or weights-only checkpoint) as a tensor source,
 * inspect/verify, weights-only output in fp32/fp16/bf16 and a fresh
 * checkpoint from any source.  One tensor in memory at a time.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/ckpt_need.h"
#include "driver/convert_hf.h"
#include "driver/convert_int.h"
#include "io/ckpt.h"
#include "optim/optim.h"
#include "util/half.h"
#include "util/mem.h"

struct ck_src {
	struct ds_ckpt *c;
	int *dtype;          /* per registry tensor: enum ds_ckpt_dtype */
	const struct ds_gpt *model;
};

static int ck_read(void *ctx, const struct ds_gpt_tensor *t, float *dst, struct ds_err *err)
{
	struct ck_src *x = ctx;
	char name[DS_CKPT_NAME_MAX];
	int i = ds_gpt_find(x->model, t->name), dt = x->dtype[i];
	snprintf(name, sizeof(name), "model/%s", t->name);
	if (dt == DS_CKPT_F32)
		return ds_ckpt_tensor_read(x->c, name, 0, (uint64_t)t->numel, dst, err);
	/* 16-bit: read the bits into the back half of dst, widen from the front
	 * (element k's source lies at byte 2 numel + 2 k >= 4 k: never overwritten
	 * first), in chunks the bulk loops run in order on this thread */
	{
		uint16_t *h = (uint16_t *)(dst + t->numel / 2 + (t->numel & 1));
		DS_TRY(ds_ckpt_tensor_read(x->c, name, 0, (uint64_t)t->numel, h, err));
		ds_half_widen_front(dt == DS_CKPT_F16 ? DS_HALF_FP16 : DS_HALF_BF16, dst, h, (size_t)t->numel);
	}
	return 0;
}

static void ck_close(void *ctx)
{
	struct ck_src *x = ctx;
	ds_ckpt_close(x->c);
	free(x->dtype);
	free(x);
}

/* ds_ckpt_open wants a directory: a state.h5 path means its tag directory. */
static int open_any(const char *path, struct ds_ckpt **c, struct ds_err *err)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		char dir[4096];
		const char *sl = strrchr(path, '/');
		snprintf(dir, sizeof(dir), "%.*s", sl ? (int)(sl - path) : 1, sl ? path : ".");
		if (!sl || strcmp(sl + 1, "state.h5"))
			return ds_err_set(err, DS_EINVAL, "%s: a checkpoint file must be named state.h5 (or give its "
					  "save or tag directory)", path);
		return ds_ckpt_open(c, dir, NULL, err);
	}
	return ds_ckpt_open(c, path, NULL, err);
}

int ds_csrc_open_ckpt(struct ds_csrc *s, const char *path, struct ds_err *err)
{
	struct ck_src *x = calloc(1, sizeof(*x));
	struct ds_ckpt_meta meta;
	struct ds_ckpt_tensor_info *list = NULL;
	size_t nl = 0;
	int rc, n;
	memset(s, 0, sizeof(*s));
	s->kind = "hdf5";
	snprintf(s->path, sizeof(s->path), "%s", path);
	if (!x)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	s->ctx = x;
	s->read = ck_read;
	s->close = ck_close;
	if ((rc = open_any(path, &x->c, err)) < 0)
		return rc;
	snprintf(s->path, sizeof(s->path), "%s", ds_ckpt_file(x->c));
	if ((rc = ds_ckpt_meta_get(x->c, &meta, err)) < 0)
		return rc;
	if (!meta.model_json || !*meta.model_json)
		return ds_err_set(err, DS_ECORRUPT, "%s: root attribute model_json is empty: not a model checkpoint",
				  s->path);
	if ((rc = ds_convert_model_parse(meta.model_json, s->path, &s->cfg, err)) < 0)
		return rc;
	s->step = meta.step;
	if (!(s->model_json = strdup(meta.model_json)))
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	if ((rc = ds_csrc_setup(s, err)) < 0)
		return rc;
	x->model = s->model;
	n = ds_gpt_num_tensors(s->model);
	if (!(x->dtype = calloc((size_t)n, sizeof(int))))
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, i);
		struct ds_ckpt_tensor_info ti;
		char name[DS_CKPT_NAME_MAX];
		snprintf(name, sizeof(name), "model/%s", t->name);
		if (ds_ckpt_tensor_info(x->c, name, &ti, err) < 0)
			return ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s is missing (the model JSON needs it)",
					  s->path, name);
		if ((int64_t)ti.numel != t->numel || ti.ndim != t->ndim || (int64_t)ti.shape[0] != t->shape[0])
			return ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s has %llu elements in %d dims; the model "
					  "JSON says [%lld%s%lld]", s->path, name, (unsigned long long)ti.numel, ti.ndim,
					  (long long)t->shape[0], t->ndim > 1 ? ", " : "",
					  t->ndim > 1 ? (long long)t->shape[1] : 0LL);
		if (ti.dtype != DS_CKPT_F32 && ti.dtype != DS_CKPT_F16 && ti.dtype != DS_CKPT_BF16)
			return ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s has dtype %s; expected f32, f16 or bf16",
					  s->path, name, ds_ckpt_dtype_name(ti.dtype));
		x->dtype[i] = ti.dtype;
	}
	/* nothing under /model that the model JSON does not describe */
	if ((rc = ds_ckpt_list(x->c, &list, &nl, err)) < 0)
		return rc;
	for (size_t k = 0; k < nl; k++)
		if (!strncmp(list[k].name, "model/", 6) && ds_gpt_find(s->model, list[k].name + 6) < 0) {
			rc = ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s is not a tensor of the model JSON", s->path,
					list[k].name);
			break;
		}
	free(list);
	return rc;
}

/* One dstk checkpoint from source s: weights only, in dtype dt. */
static int write_ckpt(struct ds_csrc *s, const char *dir, int dt, const char *dtname, int weights_only,
		      uint64_t *bytes, struct ds_err *err)
{
	struct ds_ckpt *c = NULL;
	struct ds_ckpt_meta meta = { 0 };
	float *a = ds_alloc(ds_csrc_largest(s) + 64);
	int rc, created = 0;
	meta.step = s->step;
	meta.consumed_samples = 0;
	meta.world_size = 1;
	meta.zero_stage = 0;
	meta.dtype = dtname;
	meta.config_json = "{}";
	meta.model_json = s->model_json;
	if (!a) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	created = access(dir, F_OK) != 0;
	{
		/* never replace a checkpoint (e.g. -o naming the input's own save
		 * directory would swap a full checkpoint for weights only) */
		char tagdir[4096], latest[4096];
		snprintf(tagdir, sizeof(tagdir), "%s/global_step%lld", dir, (long long)meta.step);
		snprintf(latest, sizeof(latest), "%s/latest", dir);
		if (access(tagdir, F_OK) == 0) {
			rc = ds_err_set(err, DS_EINVAL, "%s exists: writing there would replace that checkpoint; "
					"give another -o directory", tagdir);
			goto out;
		}
		/* nor move another run's `latest` to our weights-only tag */
		if (access(latest, F_OK) == 0) {
			rc = ds_err_set(err, DS_EINVAL, "%s exists: %s holds a run's checkpoints and its latest would "
					"point at this conversion; give another -o directory", latest, dir);
			goto out;
		}
	}
	if ((rc = ds_ckpt_create(&c, dir, &meta, err)) < 0)
		goto out;
	if ((rc = ds_ckpt_attr_set_i64(c, "/", "weights_only", weights_only, err)) < 0 ||
	    (rc = ds_ckpt_attr_set_str(c, "/", "converted_from", s->path, err)) < 0)
		goto out;
	for (int i = 0; i < ds_gpt_num_tensors(s->model); i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, i);
		char name[DS_CKPT_NAME_MAX];
		uint64_t shape[2] = { (uint64_t)t->shape[0], (uint64_t)t->shape[1] };
		snprintf(name, sizeof(name), "model/%s", t->name);
		if ((rc = s->read(s->ctx, t, a, err)) < 0)
			goto out;
		if (dt != DS_CKPT_F32)
			ds_convert_narrow_inplace(a, (size_t)t->numel, dt == DS_CKPT_BF16);
		if ((rc = ds_ckpt_tensor_put(c, name, dt, t->ndim, shape, a, err)) < 0)
			goto out;
		*bytes += (uint64_t)t->numel * ds_ckpt_dtype_size(dt);
	}
	rc = ds_ckpt_commit(c, err);
out:
	ds_ckpt_close(c);   /* an uncommitted save removes its .tmp tag directory */
	if (rc < 0 && created)
		rmdir(dir);
	ds_free(a);
	return rc;
}

int ds_convert_write_weights(struct ds_csrc *s, const char *path, int fmt, uint64_t *bytes, struct ds_err *err)
{
	int dt = fmt == DS_FMT_FP16 ? DS_CKPT_F16 : fmt == DS_FMT_BF16 ? DS_CKPT_BF16 : DS_CKPT_F32;
	const char *nm = fmt == DS_FMT_FP16 ? "fp16" : fmt == DS_FMT_BF16 ? "bf16" : "fp32";
	return write_ckpt(s, path, dt, nm, 1, bytes, err);
}

int ds_convert_write_ckpt(struct ds_csrc *s, const char *savedir, uint64_t *bytes, struct ds_err *err)
{
	return write_ckpt(s, savedir, DS_CKPT_F32, "fp32", 1, bytes, err);
}

/* ---- inspect / verify ---------------------------------------------------- */

struct vctx {
	struct ds_cinfo *ci;
};

static void on_verify(void *ud, const struct ds_ckpt_tensor_info *t, int status, const char *msg)
{
	struct ds_cinfo *ci = ((struct vctx *)ud)->ci;
	if (status != 0 && !ci->bad_msg[0])
		snprintf(ci->bad_msg, sizeof(ci->bad_msg), "%s", msg && *msg ? msg : t->name);
	for (int i = 0; i < ci->nt; i++)
		if (!strcmp(ci->t[i].name, t->name)) {
			ci->t[i].status = status == 0 ? "ok" : "BAD";
			ci->nbad += status != 0;
		}
}

/* Append a row named name (no shape) with status st. */
static int add_row(struct ds_cinfo *ci, const char *name, const char *st)
{
	struct ds_cinfo_tensor *t = realloc(ci->t, (size_t)(ci->nt + 2) * sizeof(*t));
	if (!t)
		return DS_ENOMEM;
	ci->t = t;
	t = &ci->t[ci->nt++];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->dtype = "-";
	t->status = st;
	return 0;
}

static void on_missing(void *ud, const char *name, const char *problem)
{
	struct ds_cinfo *ci = ud;
	if (!ci->nmissing++)
		snprintf(ci->missing_msg, sizeof(ci->missing_msg), "/%s %s", name, problem);
	add_row(ci, name, "MISSING");
}

/* verify: everything a resume reads (weights files: the model's tensors)
 * is there in the right shape and dtype, for the model of its model JSON
 * and the optimizer states it says it holds; MISSING rows otherwise. */
static int check_contents(struct ds_ckpt *c, const struct ds_ckpt_meta *meta, int weights_only, struct ds_cinfo *ci,
			  struct ds_err *err)
{
	char names[DS_OPTIM_MAX_STATES][DS_CKPT_STATE_MAX];
	const char *states[DS_OPTIM_MAX_STATES];
	struct ds_model_config cfg;
	struct ds_gpt *model = NULL;
	struct ds_err e = DS_ERR_INIT;
	int ns = 0, rc;
	if (!meta->model_json || !*meta->model_json || !strcmp(meta->model_json, "{}")) {
		ci->no_model = 1;  /* not a model checkpoint: nothing to compare with */
		return 0;
	}
	if (ds_convert_model_parse(meta->model_json, ci->path, &cfg, &e) < 0 || ds_gpt_create(&model, &cfg, &e) < 0) {
		on_missing(ci, "(root attribute model_json)", e.msg[0] ? "does not describe a model" : "is empty");
		return 0;
	}
	if (!weights_only && ds_ckpt_saved_states(c, names, DS_OPTIM_MAX_STATES, &ns, &e) < 0)
		on_missing(ci, "optimizer@states", e.msg);
	for (int i = 0; i < ns; i++)
		states[i] = names[i];
	struct ds_ckpt_need_tensor *nt = ds_ckpt_need_tensors(model);
	struct ds_ckpt_need need = { nt, ds_gpt_num_tensors(model), weights_only, states, weights_only ? 0 : ns,
				     !weights_only };
	rc = nt ? ds_ckpt_check_need(c, &need, on_missing, ci, &e)
		: ds_err_set(&e, DS_ENOMEM, "out of memory listing the model's tensors");
	free(nt);
	ds_gpt_destroy(model);
	if (rc == DS_EINVAL)  /* the problems are the report (MISSING rows) */
		return 0;
	if (rc < 0 && err)
		*err = e;
	return rc;
}

static const char *dtype_word(int dt)
{
	switch (dt) {
	case DS_CKPT_F32: return "float32";
	case DS_CKPT_F64: return "float64";
	case DS_CKPT_F16: return "float16";
	case DS_CKPT_BF16: return "bfloat16";
	case DS_CKPT_I32: return "int32";
	case DS_CKPT_I64: return "int64";
	default: return "uint8";
	}
}

int ds_convert_info_ckpt(const char *path, int verify, struct ds_cinfo *ci, struct ds_err *err)
{
	struct ds_ckpt *c = NULL;
	struct ds_ckpt_meta meta;
	struct ds_ckpt_tensor_info *list = NULL;
	size_t n = 0;
	int64_t wo = 0;
	int rc;
	memset(ci, 0, sizeof(*ci));
	if ((rc = open_any(path, &c, err)) < 0) {
		/* for verify, damage found before HDF5 may read the file is its finding */
		if (verify && rc == DS_ECORRUPT) {
			rc = DS_ECHECK;
			if (err)
				err->code = rc;
		}
		return rc;
	}
	if ((rc = ds_ckpt_meta_get(c, &meta, err)) < 0 || (rc = ds_ckpt_list(c, &list, &n, err)) < 0)
		goto out;
	if (ds_ckpt_attr_has(c, "/", "weights_only"))
		ds_ckpt_attr_get_i64(c, "/", "weights_only", &wo, NULL);
	ci->format = wo ? "weights" : "checkpoint";
	snprintf(ci->path, sizeof(ci->path), "%s", ds_ckpt_file(c));
	snprintf(ci->tag, sizeof(ci->tag), "%.127s", ds_ckpt_tag(c));
	ci->step = meta.step;
	ci->consumed = meta.consumed_samples;
	ci->world_size = (int)meta.world_size;
	ci->zero_stage = (int)meta.zero_stage;
	snprintf(ci->dtype, sizeof(ci->dtype), "%s", meta.dtype ? meta.dtype : "");
	ci->config_json = meta.config_json && *meta.config_json ? strdup(meta.config_json) : NULL;
	ci->model_json = meta.model_json && *meta.model_json ? strdup(meta.model_json) : NULL;
	ci->t = calloc(n + 1, sizeof(*ci->t));
	if (!ci->t) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct ds_cinfo_tensor *t = &ci->t[i];
		snprintf(t->name, sizeof(t->name), "%s", list[i].name);
		t->ndim = list[i].ndim < 4 ? list[i].ndim : 4;
		for (int d = 0; d < t->ndim; d++)
			t->shape[d] = (int64_t)list[i].shape[d];
		t->dtype = dtype_word(list[i].dtype);
		t->status = ds_ckpt_attr_has(c, list[i].name, "crc32c") ? "unchecked" : "none";
	}
	ci->nt = (int)n;
	if (verify) {
		struct vctx v = { ci };
		struct ds_err e = DS_ERR_INIT;
		/* a bad checksum is the report, not a failure to produce it */
		int vr = ds_ckpt_verify(c, on_verify, &v, &e);
		for (int i = 0; i < ci->nt; i++)
			if (!strcmp(ci->t[i].status, "unchecked") || !strcmp(ci->t[i].status, "none")) {
				ci->t[i].status = "BAD";
				ci->nbad++;
			}
		if (vr < 0 && !ci->nbad) {  /* bytes of no dataset */
			if ((rc = add_row(ci, "(state.h5 outside the datasets)", "BAD")) < 0)
				goto out;
			ci->nbad++;
			snprintf(ci->bad_msg, sizeof(ci->bad_msg), "%s", e.msg);
		}
		ci->verified = 1;
		ci->manifest = ds_ckpt_has_manifest(c);
		rc = check_contents(c, &meta, (int)wo, ci, err);
	}
out:
	free(list);
	ds_ckpt_close(c);
	return rc;
}
