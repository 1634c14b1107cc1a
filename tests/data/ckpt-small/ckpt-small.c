/* ckpt-small - makes and reads the small committed checkpoints of
 * tests/data/ckpt-small (README there says how they were made).
 *
 *   ckpt-small make DIR                 DIR/gpt2 and DIR/neox: SAVE directories
 *   ckpt-small logits CKPT TOK OUT      dstk's logits (T x vocab_size, fp32) of
 *                                       the int32 tokens in TOK, by lib/model
 *   ckpt-small compare A B RTOL         max|a-b| <= RTOL * max|b| over two fp32
 *                                       files: exit 0, else 1 (prints both)
 *   ckpt-small corrupt STATE_H5 DSET    flip one byte of dataset DSET's data
 *   ckpt-small same A B [zero-padding]  the same model JSON and every /model tensor
 *                                       of checkpoint B bitwise A's; with
 *                                       zero-padding the model JSON is not compared
 *                                       and wte/lm_head rows >= vocab_size may be
 *                                       all 0 in B (llm.c files zero them)
 *   ckpt-small make-model DIR MODEL.json a weights-only checkpoint of any model
 * A test helper, not an installed tool.
 */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/ckpt.h"
#include "driver/convert_hf.h"
#include "model/gpt.h"
#include "util/mem.h"
#include "util/rng.h"

static int fail(const struct ds_err *e)
{
	fprintf(stderr, "ckpt-small: %s\n", e->msg);
	return 1;
}

static void cfg_of(struct ds_model_config *c, int neox)
{
	memset(c, 0, sizeof(*c));
	c->family = DS_FAMILY_GPT;
	c->num_layers = 2;
	c->hidden_size = 16;
	c->num_attention_heads = 2;
	c->seq_length = 8;
	c->max_position_embeddings = 16;
	c->vocab_size = 60;                   /* padded to 64: the export drops 4 rows */
	c->make_vocab_size_divisible_by = 64;
	c->rotary_pct = 1.0;
	c->rotary_emb_base = 10000;
	c->layernorm_epsilon = 1e-5;
	c->rms_norm_epsilon = 1e-8;
	c->init_method_std = 0.02;
	if (neox) {
		c->intermediate_size = 48;    /* not 4C, so n_inner/intermediate_size matter */
		c->pos_emb = DS_POS_ROTARY;
		c->rotary_pct = 0.5;
		c->no_weight_tying = 1;
		c->gpt_j_residual = 1;
	}
}

/* Weights with visible structure (as contrib/reference/gpt_reference.py
 * makes them): every tensor, bias and norm distinct, so a swapped or
 * mistransposed tensor changes the logits. */
static void fill(const struct ds_gpt_tensor *t, uint64_t seed, float *dst)
{
	struct ds_rng r;
	ds_rng_init(&r, seed, ds_hash_str(t->name), 7);
	for (int64_t i = 0; i < t->numel; i++) {
		float z = ds_rng_normal(&r, (uint64_t)i);
		if (t->init == DS_INIT_ZERO)
			dst[i] = 0.05f * z;
		else if (t->init == DS_INIT_ONE)
			dst[i] = 1.0f + 0.1f * z;
		else if (strstr(t->name, "wte") || strstr(t->name, "wpe"))
			dst[i] = 0.5f * z;
		else
			dst[i] = z / sqrtf((float)t->shape[1]) * 1.5f;
	}
}

static int make_one(const char *dir, int neox, const struct ds_model_config *given, struct ds_err *err)
{
	struct ds_model_config c;
	struct ds_gpt *m = NULL;
	struct ds_ckpt *ck = NULL;
	struct ds_ckpt_meta meta = { 0 };
	char *mj = NULL;
	float *buf = NULL;
	int rc;
	cfg_of(&c, neox);
	if (given)
		c = *given;
	if ((rc = ds_gpt_create(&m, &c, err)) < 0)
		return rc;
	mj = ds_convert_model_json(ds_gpt_config(m));
	meta.step = neox ? 40 : 100;
	meta.consumed_samples = meta.step * 8;
	meta.world_size = neox ? 4 : 2;
	meta.zero_stage = neox ? 2 : 1;
	meta.dtype = "fp32";
	meta.config_json = "{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 4, \"optimizer\": "
			   "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}, \"zero_optimization\": {\"stage\": 1}}";
	meta.model_json = mj;
	buf = ds_alloc((size_t)ds_gpt_num_params(m) * sizeof(float));
	if (!mj || !buf) {
		rc = -4;
		goto out;
	}
	if ((rc = ds_ckpt_create(&ck, dir, &meta, err)) < 0 || (rc = ds_ckpt_set_chunk_bytes(ck, 1024, err)) < 0)
		goto out;
	for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(m, i);
		uint64_t shape[2] = { (uint64_t)t->shape[0], (uint64_t)t->shape[1] };
		char name[256];
		fill(t, neox ? 4321 : 1234, buf);
		snprintf(name, sizeof(name), "model/%s", t->name);
		if ((rc = ds_ckpt_tensor_put(ck, name, DS_CKPT_F32, t->ndim, shape, buf, err)) < 0)
			goto out;
		if (neox || given)
			continue;
		/* the trained checkpoint also carries Adam moments: exports drop them */
		for (int64_t k = 0; k < t->numel; k++)
			buf[k] = 0.01f * buf[k];
		snprintf(name, sizeof(name), "optimizer/exp_avg/%s", t->name);
		if ((rc = ds_ckpt_tensor_put(ck, name, DS_CKPT_F32, t->ndim, shape, buf, err)) < 0)
			goto out;
		for (int64_t k = 0; k < t->numel; k++)
			buf[k] = buf[k] * buf[k];
		snprintf(name, sizeof(name), "optimizer/exp_avg_sq/%s", t->name);
		if ((rc = ds_ckpt_tensor_put(ck, name, DS_CKPT_F32, t->ndim, shape, buf, err)) < 0)
			goto out;
	}
	/* the trained one has what a resume reads (ds-ckpt-convert verify
	 * checks it); the others say they hold weights only */
	if (!neox && !given && ((rc = ds_ckpt_attr_set_i64(ck, "optimizer", "step", 100, err)) < 0 ||
		      (rc = ds_ckpt_attr_set_str(ck, "optimizer", "type", "adamw", err)) < 0 ||
		      (rc = ds_ckpt_attr_set_str(ck, "optimizer", "states", "exp_avg,exp_avg_sq", err)) < 0 ||
		      (rc = ds_ckpt_attr_set_f64(ck, "scheduler", "lr", 1e-3, err)) < 0 ||
		      (rc = ds_ckpt_attr_set_i64(ck, "scheduler", "steps", 100, err)) < 0 ||
		      (rc = ds_ckpt_attr_set_i64(ck, "data", "consumed_samples", meta.consumed_samples, err)) < 0 ||
		      (rc = ds_ckpt_attr_set_i64(ck, "data", "skipped_steps", 0, err)) < 0))
		goto out;
	if ((neox || given) && (rc = ds_ckpt_attr_set_i64(ck, "/", "weights_only", 1, err)) < 0)
		goto out;
	rc = ds_ckpt_commit(ck, err);
out:
	ds_ckpt_close(ck);
	ds_gpt_destroy(m);
	ds_free(buf);
	free(mj);
	return rc;
}

static void *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *b = NULL;
	long sz;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)sz + 1);
	if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
		free(b);
		b = NULL;
	}
	fclose(f);
	*n = (size_t)sz;
	return b;
}

static int logits(const char *dir, const char *tokpath, const char *outpath, struct ds_err *err)
{
	struct ds_ckpt *ck = NULL;
	struct ds_ckpt_meta meta;
	struct ds_model_config c;
	struct ds_gpt *m = NULL;
	struct ds_gpt_ws *ws = NULL;
	float *p = NULL, loss;
	int32_t *tok = NULL;
	size_t nb;
	int rc, T;
	FILE *f;
	if ((rc = ds_ckpt_open(&ck, dir, NULL, err)) < 0 || (rc = ds_ckpt_meta_get(ck, &meta, err)) < 0 ||
	    (rc = ds_convert_model_parse(meta.model_json, dir, &c, err)) < 0 || (rc = ds_gpt_create(&m, &c, err)) < 0)
		goto out;
	tok = slurp(tokpath, &nb);
	T = (int)(nb / 4);
	p = ds_alloc((size_t)ds_gpt_num_params(m) * sizeof(float));
	if (!tok || !p || T < 1) {
		rc = ds_err_set(err, DS_EINVAL, "%s: cannot read tokens", tokpath);
		goto out;
	}
	for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(m, i);
		char name[256];
		snprintf(name, sizeof(name), "model/%s", t->name);
		if ((rc = ds_ckpt_tensor_read(ck, name, 0, (uint64_t)t->numel, p + t->offset, err)) < 0)
			goto out;
	}
	{
		struct ds_gpt_ws_opts o = { 1, T, 0, 0, 0, 0 };
		const struct ds_model_config *e = ds_gpt_config(m);
		if ((rc = ds_gpt_ws_create(&ws, m, &o, err)) < 0 ||
		    (rc = ds_gpt_forward(m, ws, p, tok, NULL, 1, T, 0, 0, 0, &loss, err)) < 0)
			goto out;
		f = fopen(outpath, "wb");
		for (int t = 0; f && t < T; t++)
			fwrite(ds_gpt_ws_logits(ws) + (size_t)t * e->padded_vocab_size, 4, (size_t)e->vocab_size, f);
		if (!f || fclose(f) != 0)
			rc = ds_err_set(err, DS_EIO, "%s: cannot write", outpath);
	}
out:
	ds_gpt_ws_destroy(ws);
	ds_gpt_destroy(m);
	ds_ckpt_close(ck);
	ds_free(p);
	free(tok);
	return rc;
}

static int compare(const char *a, const char *b, double rtol)
{
	size_t na, nb;
	float *x = slurp(a, &na), *y = slurp(b, &nb);
	double md = 0, mb = 0;
	if (!x || !y || na != nb || na == 0) {
		fprintf(stderr, "ckpt-small: %s (%zu bytes) and %s (%zu bytes) differ in size\n", a, na, b, nb);
		return 1;
	}
	for (size_t i = 0; i < na / 4; i++) {
		double d = fabs((double)x[i] - (double)y[i]);
		if (d > md || d != d)
			md = d;
		if (fabs((double)y[i]) > mb)
			mb = fabs((double)y[i]);
	}
	printf("max|a-b| %.3e  max|b| %.3e  rel %.3e  (rtol %.1e, %zu values)\n", md, mb, md / mb, rtol, na / 4);
	free(x);
	free(y);
	return md <= rtol * mb ? 0 : 1;
}

static int same(const char *a, const char *b, int loose, struct ds_err *err)
{
	struct ds_ckpt *ca = NULL, *cb = NULL;
	struct ds_ckpt_meta ma, mb;
	struct ds_model_config c;
	struct ds_gpt *m = NULL;
	float *x = NULL, *y = NULL;
	int rc, diff = 0;
	if ((rc = ds_ckpt_open(&ca, a, NULL, err)) < 0 || (rc = ds_ckpt_open(&cb, b, NULL, err)) < 0 ||
	    (rc = ds_ckpt_meta_get(ca, &ma, err)) < 0 || (rc = ds_ckpt_meta_get(cb, &mb, err)) < 0 ||
	    (rc = ds_convert_model_parse(ma.model_json, a, &c, err)) < 0 || (rc = ds_gpt_create(&m, &c, err)) < 0)
		goto out;
	if (!loose && strcmp(ma.model_json, mb.model_json)) {
		printf("model JSON differs:\n%s\n%s\n", ma.model_json, mb.model_json);
		diff++;
	}
	x = ds_alloc((size_t)ds_gpt_num_params(m) * 4);
	y = ds_alloc((size_t)ds_gpt_num_params(m) * 4);
	for (int i = 0; x && y && i < ds_gpt_num_tensors(m); i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(m, i);
		const struct ds_model_config *e = ds_gpt_config(m);
		int64_t keep = t->numel;
		char name[256];
		snprintf(name, sizeof(name), "model/%s", t->name);
		if ((rc = ds_ckpt_tensor_read(ca, name, 0, (uint64_t)t->numel, x, err)) < 0 ||
		    (rc = ds_ckpt_tensor_read(cb, name, 0, (uint64_t)t->numel, y, err)) < 0)
			goto out;
		if (!strcmp(t->name, "transformer.wte.weight") || !strcmp(t->name, "lm_head.weight"))
			keep = (int64_t)e->vocab_size * e->hidden_size;
		if (memcmp(x, y, (size_t)keep * 4)) {
			printf("%s differs\n", name);
			diff++;
		}
		/* padding rows: as they were, or (loose) zero */
		if (keep < t->numel && memcmp(x + keep, y + keep, (size_t)(t->numel - keep) * 4) && !loose) {
			printf("%s: padding rows differ\n", name);
			diff++;
		} else if (keep < t->numel && memcmp(x + keep, y + keep, (size_t)(t->numel - keep) * 4))
			for (int64_t k = keep; k < t->numel; k++)
				if (y[k] != 0.0f) {
					printf("%s: padding element %lld is neither A's nor 0\n", name, (long long)k);
					diff++;
					break;
				}
	}
	printf("%d tensors compared, %d differ\n", ds_gpt_num_tensors(m), diff);
	rc = diff ? 1 : 0;
out:
	ds_free(x);
	ds_free(y);
	ds_gpt_destroy(m);
	ds_ckpt_close(ca);
	ds_ckpt_close(cb);
	return rc;
}

static int corrupt(const char *file, const char *dset)
{
	hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT), d;
	haddr_t off;
	FILE *fp;
	int c;
	if (f < 0 || (d = H5Dopen2(f, dset, H5P_DEFAULT)) < 0)
		return 1;
	off = H5Dget_offset(d);
	H5Dclose(d);
	H5Fclose(f);
	if (off == HADDR_UNDEF || !(fp = fopen(file, "r+b")))
		return 1;
	fseek(fp, (long)off + 5, SEEK_SET);
	c = fgetc(fp);
	fseek(fp, (long)off + 5, SEEK_SET);
	fputc(c ^ 0x40, fp);
	return fclose(fp) != 0;
}

int main(int argc, char **argv)
{
	struct ds_err err = DS_ERR_INIT;
	char p[4096];
	if (argc == 3 && !strcmp(argv[1], "make")) {
		snprintf(p, sizeof(p), "%s/gpt2", argv[2]);
		if (make_one(p, 0, NULL, &err) < 0)
			return fail(&err);
		snprintf(p, sizeof(p), "%s/neox", argv[2]);
		return make_one(p, 1, NULL, &err) < 0 ? fail(&err) : 0;
	}
	if (argc == 4 && !strcmp(argv[1], "make-model")) {
		struct ds_model_config c;
		size_t n;
		char *text = slurp(argv[3], &n);
		if (!text)
			return 1;
		text[n] = 0;
		if (ds_convert_model_parse(text, argv[3], &c, &err) < 0 || make_one(argv[2], 1, &c, &err) < 0)
			return fail(&err);
		free(text);
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "logits"))
		return logits(argv[2], argv[3], argv[4], &err) < 0 ? fail(&err) : 0;
	if (argc == 5 && !strcmp(argv[1], "compare"))
		return compare(argv[2], argv[3], atof(argv[4]));
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "same")) {
		int rc = same(argv[2], argv[3], argc == 5 && !strcmp(argv[4], "zero-padding"), &err);
		return rc < 0 ? fail(&err) : rc;
	}
	if (argc == 4 && !strcmp(argv[1], "corrupt"))
		return corrupt(argv[2], argv[3]);
	fprintf(stderr, "usage: ckpt-small make DIR | logits CKPT TOK OUT | compare A B RTOL | same A B | make-model DIR JSON | corrupt H5 DSET\n");
	return 2;
}
