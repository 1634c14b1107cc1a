/* convert_mixtral.c - an MoE model to safetensors under Hugging Face's
 * Mixtral names (MixtralForCausalLM), where the architecture matches:
 * top-2 gating, swiglu experts, no PR-MoE residual, every layer MoE with
 * the same number of experts, rmsnorm, full rotary, untied head, no
 * linear biases.  Otherwise one line says what does not match.
 *
 * dstk's fused c_attn [q | k | v] becomes q_proj, k_proj, v_proj (rows
 * 0..C, C..2C, 2C..3C; both rotate halves of each head, NeoX's and
 * Llama's rotate_half); an expert's c_fc [a | b] (silu(a) * b) becomes w1
 * (rows 0..F) and w3 (rows F..2F), its c_proj w2.  Routing in
 * transformers is DeepSpeed's top-2 without capacity: softmax, the two
 * largest, renormalised.  Notes: transformers' RMSNorm adds epsilon under
 * the square root where GPT-NeoX's (dstk's) adds it to the root; outputs
 * differ at the order of rms_norm_epsilon.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/convert_int.h"
#include "io/convert_out.h"
#include "io/safetensors.h"
#include "util/mem.h"

int ds_convert_mixtral_check(const struct ds_model_config *m, struct ds_err *err)
{
	const struct ds_moe_config *c = &m->moe;
	const char *why = NULL;
	int E = ds_moe_experts(m, 0);
	for (int l = 1; l < m->num_layers && !why; l++)
		if (ds_moe_experts(m, l) != E)
			why = "every layer of Mixtral is MoE with the same number of experts (this model has dense layers or "
			      "a pyramid)";
	if (why) {
	} else if (!c->enabled || E < 2) {
		why = "it has no MoE layers";
	} else if (c->k != 2) {
		why = "Mixtral routes each token to 2 experts (moe.k is 1)";
	} else if (c->use_residual) {
		why = "PR-MoE's residual MLP and coefficient (moe.use_residual) have no Mixtral counterpart";
	} else if (m->activation != DS_ACT_SWIGLU) {
		why = "Mixtral's experts are swiglu (activation is not)";
	} else if (m->norm != DS_NORM_RMSNORM) {
		why = "Mixtral normalises with RMSNorm (norm is layernorm)";
	} else if (m->pos_emb != DS_POS_ROTARY || m->rotary_pct != 1.0) {
		why = "Mixtral rotates every dimension of each head (pos_emb rotary with rotary_pct 1)";
	} else if (!m->no_weight_tying) {
		why = "Mixtral's output head is its own weight (no_weight_tying true)";
	} else if (m->gpt_j_residual) {
		why = "Mixtral's residual is sequential (gpt_j_residual is true)";
	} else if (!m->no_bias_in_attn_linear || !m->no_bias_in_mlp) {
		why = "Mixtral has no biases in its linear layers (set use_bias_in_attn_linear and use_bias_in_mlp false)";
	}
	if (why)
		return ds_err_set(err, DS_EINVAL, "safetensors export of an MoE model: not Mixtral's architecture: %s; "
				  "export with --to fp32 instead", why);
	return 0;
}

/* one output tensor: rows [r0, r0 + rows) of dstk tensor t */
struct part { int t; int64_t r0, rows; char name[160]; };

/* the output tensors in the source's order; DS_EINVAL with *bad the first
 * tensor without a Mixtral name, or DS_ENOMEM */
static int parts_of(const struct ds_csrc *s, struct part **out, int *np, int *bad)
{
	const struct ds_model_config *m = &s->cfg;
	const int64_t C = m->hidden_size, F = m->intermediate_size;
	int n = ds_gpt_num_tensors(s->model), k = 0;
	struct part *p = calloc((size_t)n * 3, sizeof *p);
	if (!p)
		return DS_ENOMEM;
	for (int i = 0; i < n; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, i);
		const char *nm = t->name;
		int l, e, pos = 0;
		struct part *q = &p[k];
		q->t = i;
		q->r0 = 0;
		q->rows = t->shape[0];
		if (!strcmp(nm, "transformer.wte.weight") || !strcmp(nm, "lm_head.weight")) {
			snprintf(q->name, sizeof q->name, "%s", nm[0] == 't' ? "model.embed_tokens.weight" : "lm_head.weight");
			q->rows = m->vocab_size;
		} else if (!strcmp(nm, "transformer.ln_f.weight")) {
			snprintf(q->name, sizeof q->name, "model.norm.weight");
		} else if (sscanf(nm, "transformer.h.%d.mlp.experts.%d.%n", &l, &e, &pos) == 2 && pos > 0) {
			const char *rest = nm + pos;
			if (!strcmp(rest, "c_proj.weight")) {
				snprintf(q->name, sizeof q->name, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", l, e);
			} else {   /* c_fc.weight: w1 (silu's input) then w3 */
				snprintf(q->name, sizeof q->name, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", l, e);
				q->rows = F;
				p[++k] = (struct part){ i, F, F, "" };
				snprintf(p[k].name, sizeof p[k].name, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight",
					 l, e);
			}
		} else if (sscanf(nm, "transformer.h.%d.%n", &l, &pos) == 1 && pos > 0) {
			const char *rest = nm + pos;
			static const char *const qkv[] = { "q_proj", "k_proj", "v_proj" };
			if (!strcmp(rest, "ln_1.weight"))
				snprintf(q->name, sizeof q->name, "model.layers.%d.input_layernorm.weight", l);
			else if (!strcmp(rest, "ln_2.weight"))
				snprintf(q->name, sizeof q->name, "model.layers.%d.post_attention_layernorm.weight", l);
			else if (!strcmp(rest, "attn.c_proj.weight"))
				snprintf(q->name, sizeof q->name, "model.layers.%d.self_attn.o_proj.weight", l);
			else if (!strcmp(rest, "mlp.gate.weight"))
				snprintf(q->name, sizeof q->name, "model.layers.%d.block_sparse_moe.gate.weight", l);
			else if (!strcmp(rest, "attn.c_attn.weight"))
				for (int j = 0; j < 3; j++) {
					p[k + j] = (struct part){ i, j * C, C, "" };
					snprintf(p[k + j].name, sizeof p[k + j].name, "model.layers.%d.self_attn.%s.weight", l,
						 qkv[j]);
				}
			else
				goto unmapped;
			if (!strcmp(rest, "attn.c_attn.weight"))
				k += 2;
		} else {
			goto unmapped;
		}
		k++;
		continue;
unmapped:
		free(p);
		*bad = i;
		return DS_EINVAL;
	}
	*out = p;
	*np = k;
	return 0;
}

static char *config_json(const struct ds_model_config *m, const char *dtype)
{
	json_t *j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:i, s:s, s:b, s:f,"
			      " s:b, s:n, s:f, s:f, s:s}",
			      "architectures", "MixtralForCausalLM", "model_type", "mixtral", "vocab_size", m->vocab_size,
			      "hidden_size", m->hidden_size, "intermediate_size", m->intermediate_size,
			      "num_hidden_layers", m->num_layers, "num_attention_heads", m->num_attention_heads,
			      "num_key_value_heads", m->num_attention_heads, "max_position_embeddings",
			      m->max_position_embeddings, "rms_norm_eps", m->rms_norm_epsilon, "rope_theta",
			      m->rotary_emb_base, "num_local_experts", ds_moe_experts(m, 0), "num_experts_per_tok", 2,
			      "hidden_act", "silu", "tie_word_embeddings", 0, "router_aux_loss_coef", m->moe.loss_coeff,
			      "output_router_logits", 0, "sliding_window", "attention_dropout", m->attention_dropout,
			      "initializer_range", m->init_method_std, "torch_dtype", dtype);
	char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
	json_decref(j);
	return s;
}

int ds_convert_write_mixtral(struct ds_csrc *s, const char *outdir, int st_dt, uint64_t *bytes,
			     struct ds_err *err)
{
	struct ds_st_writer *w = NULL;
	struct ds_outfile cj = { 0 };
	struct part *p = NULL;
	char path[4096], *cfgtxt = NULL;
	float *a = NULL;
	int np = 0, rc, created, bad = 0;
	const size_t es = st_dt == DS_ST_F32 ? 4 : 2;
	if ((rc = ds_convert_mixtral_check(&s->cfg, err)) < 0)
		return ds_err_prefix(err, "%s: ", s->path);
	if ((rc = parts_of(s, &p, &np, &bad)) < 0) {
		if (rc == DS_ENOMEM)
			return ds_err_set(err, rc, "out of memory");
		return ds_err_set(err, DS_EINVAL, "%s: tensor '%s' has no Mixtral name", s->path,
				  ds_gpt_tensor(s->model, bad)->name);
	}
	created = access(outdir, F_OK) != 0;
	if ((rc = ds_convert_make_dir(outdir, err)) < 0)
		goto out;
	a = ds_alloc(ds_csrc_largest(s) + 64);
	cfgtxt = config_json(&s->cfg, st_dt == DS_ST_F16 ? "float16" : st_dt == DS_ST_BF16 ? "bfloat16" : "float32");
	if (!a || !cfgtxt) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	snprintf(path, sizeof(path), "%s/model.safetensors", outdir);
	if ((rc = ds_st_writer_create(&w, path, err)) < 0 || (rc = ds_st_writer_meta(w, "format", "pt", err)) < 0 ||
	    (rc = ds_st_writer_meta(w, "dstk_model", s->model_json, err)) < 0)
		goto out;
	for (int i = 0; i < np; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, p[i].t);
		int64_t shape[2] = { p[i].rows, t->ndim > 1 ? t->shape[1] : 0 };
		if ((rc = ds_st_writer_add(w, p[i].name, st_dt, t->ndim, shape, err)) < 0)
			goto out;
	}
	for (int i = 0; i < np; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, p[i].t);
		const int64_t cols = t->ndim > 1 ? t->shape[1] : 1;
		if ((rc = s->read(s->ctx, t, a, err)) < 0)
			goto out;
		float *rows = a + p[i].r0 * cols;
		size_t k = (size_t)(p[i].rows * cols);
		if (es == 2)
			ds_convert_narrow_inplace(rows, k, st_dt == DS_ST_BF16);
		if ((rc = ds_st_writer_write(w, rows, k * es, err)) < 0)
			goto out;
		*bytes += (uint64_t)k * es;
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
	free(p);
	ds_free(a);
	if (rc < 0 && created)
		rmdir(outdir);
	return rc;
}
