/* convert_hf.c - dstk <-> Hugging Face GPT-2 / GPT-NeoX names, layouts and
 * config.json, and the dstk model JSON (see convert_hf.h).
 *
 * The model JSON goes through lib/config's model key table (the same
 * loader as ds-train's --model), so unknown keys stay errors and no option
 * that changes the math is silently dropped.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/convert_hf.h"
#include "util/log.h"

const char *ds_hf_arch_name(int arch) { return arch == DS_HF_NEOX ? "gpt_neox" : "gpt2"; }

int ds_hf_arch_for(const struct ds_model_config *m, struct ds_err *err)
{
	if (m->family != DS_FAMILY_GPT)
		return ds_err_set(err, DS_EINVAL, "safetensors export: family is not gpt");
	if (m->moe.enabled)
		return ds_err_set(err, DS_EINVAL, "safetensors export: an MoE model is neither GPT-2 nor GPT-NeoX "
				  "(it exports under Mixtral's names where its architecture is Mixtral's)");
	if (m->no_bias_in_attn_linear || m->no_bias_in_mlp)
		return ds_err_set(err, DS_EINVAL, "safetensors export: GPT-2 and GPT-NeoX in transformers have "
				  "biases in every linear layer; this model has none in its %s; export with --to fp32",
				  m->no_bias_in_attn_linear ? "attention" : "MLP");
	if (m->norm != DS_NORM_LAYERNORM)
		return ds_err_set(err, DS_EINVAL, "safetensors export: norm 'rmsnorm' has no GPT-2 or GPT-NeoX "
				  "equivalent in transformers; export with --to fp32 instead");
	if (m->activation != DS_ACT_GELU && m->activation != DS_ACT_GELU_EXACT)
		return ds_err_set(err, DS_EINVAL, "safetensors export: activation '%s' has no GPT-2 or GPT-NeoX "
				  "equivalent in transformers; export with --to fp32 instead",
				  m->activation == DS_ACT_SWIGLU ? "swiglu" :
				  m->activation == DS_ACT_GEGLU_EXACT ? "geglu_exact" : "geglu");
	if (m->pos_emb == DS_POS_LEARNED) {
		if (m->gpt_j_residual)
			return ds_err_set(err, DS_EINVAL, "safetensors export: learned positions with gpt_j_residual "
					  "(parallel residual) is neither GPT-2 nor GPT-NeoX; export with --to fp32");
		return DS_HF_GPT2;
	}
	if (m->pos_emb == DS_POS_ROTARY) {
		/* transformers rotates int(head_dim * rotary_pct) dims; dstk rounds
		 * that down to even, so an odd count has no exact HF twin */
		int rd = (int)(m->hidden_size / m->num_attention_heads * m->rotary_pct);
		if (rd % 2)
			return ds_err_set(err, DS_EINVAL, "safetensors export: rotary_pct %g of head_dim %d rotates %d "
					  "dims, an odd count GPT-NeoX in transformers cannot match", m->rotary_pct,
					  m->hidden_size / m->num_attention_heads, rd);
		return DS_HF_NEOX;
	}
	return ds_err_set(err, DS_EINVAL, "safetensors export: pos_emb 'sinusoidal' has no GPT-2 or GPT-NeoX "
			  "equivalent in transformers; export with --to fp32 instead");
}

static const struct {
	const char *dstk, *gpt2, *neox;
	int conv1d;    /* GPT-2 stores the transpose */
} layer_map[] = {
	{ "ln_1.weight", "ln_1.weight", "input_layernorm.weight", 0 },
	{ "ln_1.bias", "ln_1.bias", "input_layernorm.bias", 0 },
	{ "attn.c_attn.weight", "attn.c_attn.weight", "attention.query_key_value.weight", 1 },
	{ "attn.c_attn.bias", "attn.c_attn.bias", "attention.query_key_value.bias", 0 },
	{ "attn.c_proj.weight", "attn.c_proj.weight", "attention.dense.weight", 1 },
	{ "attn.c_proj.bias", "attn.c_proj.bias", "attention.dense.bias", 0 },
	{ "ln_2.weight", "ln_2.weight", "post_attention_layernorm.weight", 0 },
	{ "ln_2.bias", "ln_2.bias", "post_attention_layernorm.bias", 0 },
	{ "mlp.c_fc.weight", "mlp.c_fc.weight", "mlp.dense_h_to_4h.weight", 1 },
	{ "mlp.c_fc.bias", "mlp.c_fc.bias", "mlp.dense_h_to_4h.bias", 0 },
	{ "mlp.c_proj.weight", "mlp.c_proj.weight", "mlp.dense_4h_to_h.weight", 1 },
	{ "mlp.c_proj.bias", "mlp.c_proj.bias", "mlp.dense_4h_to_h.bias", 0 },
};

int ds_hf_map(int arch, const struct ds_model_config *m, const struct ds_gpt_tensor *t, char *buf,
	      size_t n, int64_t shape[2], int *xform)
{
	const char *nm = t->name;
	int layer, pos = 0, neox = arch == DS_HF_NEOX;
	shape[0] = t->shape[0];
	shape[1] = t->ndim > 1 ? t->shape[1] : 0;
	*xform = DS_HF_COPY;
	if (!strcmp(nm, "transformer.wte.weight") || !strcmp(nm, "lm_head.weight")) {
		int wte = nm[0] == 't';
		snprintf(buf, n, "%s", neox ? (wte ? "gpt_neox.embed_in.weight" : "embed_out.weight") : nm);
		shape[0] = m->vocab_size;
		*xform = DS_HF_UNPAD;
		return 0;
	}
	if (!strcmp(nm, "transformer.wpe.weight") && !neox) {
		snprintf(buf, n, "%s", nm);
		return 0;
	}
	if (!strncmp(nm, "transformer.ln_f.", 17)) {
		snprintf(buf, n, "%s%s", neox ? "gpt_neox.final_layer_norm." : "transformer.ln_f.", nm + 17);
		return 0;
	}
	if (sscanf(nm, "transformer.h.%d.%n", &layer, &pos) == 1 && pos > 0)
		for (size_t k = 0; k < sizeof(layer_map) / sizeof(layer_map[0]); k++) {
			if (strcmp(nm + pos, layer_map[k].dstk))
				continue;
			if (neox) {
				snprintf(buf, n, "gpt_neox.layers.%d.%s", layer, layer_map[k].neox);
				if (k == 2)
					*xform = DS_HF_QKV_W;
				else if (k == 3)
					*xform = DS_HF_QKV_B;
			} else {
				snprintf(buf, n, "transformer.h.%d.%s", layer, layer_map[k].gpt2);
				if (layer_map[k].conv1d) {
					*xform = DS_HF_TRANSPOSE;
					shape[0] = t->shape[1];
					shape[1] = t->shape[0];
				}
			}
			return 0;
		}
	return DS_EINVAL;   /* the caller names the tensor and the arch */
}

/* NeoX row of dstk c_attn row r: [q|k|v] (part p, head h, dim d) ->
 * per-head [q,k,v]. */
static int64_t qkv_row(const struct ds_model_config *m, int64_t r)
{
	int64_t C = m->hidden_size, hs = C / m->num_attention_heads;
	int64_t p = r / C, h = (r % C) / hs, d = r % hs;
	return h * 3 * hs + p * hs + d;
}

static void apply(int xform, const struct ds_model_config *m, const struct ds_gpt_tensor *t,
		  const float *src, float *dst, int inverse)
{
	int64_t rows = t->shape[0], cols = t->ndim > 1 ? t->shape[1] : 1;
	switch (xform) {
	case DS_HF_TRANSPOSE:
		/* dstk [rows, cols] <-> HF [cols, rows] */
		for (int64_t i = 0; i < rows; i++)
			for (int64_t j = 0; j < cols; j++) {
				if (inverse)
					dst[i * cols + j] = src[j * rows + i];
				else
					dst[j * rows + i] = src[i * cols + j];
			}
		break;
	case DS_HF_UNPAD:
		memcpy(dst, src, (size_t)(m->vocab_size * cols) * sizeof(float));
		if (inverse)
			memset(dst + m->vocab_size * cols, 0, (size_t)((rows - m->vocab_size) * cols) * sizeof(float));
		break;
	case DS_HF_QKV_W:
	case DS_HF_QKV_B:
		for (int64_t r = 0; r < rows; r++) {
			int64_t q = qkv_row(m, r);
			if (inverse)
				memcpy(dst + r * cols, src + q * cols, (size_t)cols * sizeof(float));
			else
				memcpy(dst + q * cols, src + r * cols, (size_t)cols * sizeof(float));
		}
		break;
	default:
		memcpy(dst, src, (size_t)t->numel * sizeof(float));
	}
}

void ds_hf_apply(int xform, const struct ds_model_config *m, const struct ds_gpt_tensor *t,
		 const float *src, float *dst)
{
	apply(xform, m, t, src, dst, 0);
}

void ds_hf_apply_inverse(int xform, const struct ds_model_config *m, const struct ds_gpt_tensor *t,
			 const float *src, float *dst)
{
	apply(xform, m, t, src, dst, 1);
}

/* ---- config.json ------------------------------------------------------- */

char *ds_hf_config_json(int arch, const struct ds_model_config *m, const char *torch_dtype)
{
	json_t *j;
	char *s;
	int F = m->intermediate_size ? m->intermediate_size : 4 * m->hidden_size;
	/* transformers' names: "gelu" is the exact erf GELU, "gelu_new" the tanh one */
	const char *act = m->activation == DS_ACT_GELU_EXACT ? "gelu" : "gelu_new";
	if (arch == DS_HF_GPT2)
		j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f, s:f, s:f, s:f,"
			      " s:b, s:b, s:s}",
			      "architectures", "GPT2LMHeadModel", "model_type", "gpt2",
			      "vocab_size", m->vocab_size, "n_positions", m->max_position_embeddings,
			      "n_ctx", m->max_position_embeddings, "n_embd", m->hidden_size,
			      "n_layer", m->num_layers, "n_head", m->num_attention_heads, "n_inner", F,
			      "activation_function", act, "layer_norm_epsilon", m->layernorm_epsilon,
			      "initializer_range", m->init_method_std, "resid_pdrop", m->hidden_dropout,
			      "embd_pdrop", m->hidden_dropout, "attn_pdrop", m->attention_dropout,
			      "tie_word_embeddings", !m->no_weight_tying, "scale_attn_weights", 1,
			      "torch_dtype", torch_dtype);
	else
		j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f, s:f, s:f, s:f, s:f,"
			      " s:f, s:b, s:b, s:b, s:s}",
			      "architectures", "GPTNeoXForCausalLM", "model_type", "gpt_neox",
			      "vocab_size", m->vocab_size, "hidden_size", m->hidden_size,
			      "num_hidden_layers", m->num_layers, "num_attention_heads", m->num_attention_heads,
			      "intermediate_size", F, "max_position_embeddings", m->max_position_embeddings,
			      "hidden_act", act, "rotary_pct", m->rotary_pct,
			      "partial_rotary_factor", m->rotary_pct, "rotary_emb_base", m->rotary_emb_base,
			      "rope_theta", m->rotary_emb_base, "layer_norm_eps", m->layernorm_epsilon,
			      "initializer_range", m->init_method_std, "hidden_dropout", m->hidden_dropout,
			      "use_parallel_residual", m->gpt_j_residual, "tie_word_embeddings",
			      !m->no_weight_tying, "attention_bias", 1, "torch_dtype", torch_dtype);
	if (!j)
		return NULL;
	if (arch == DS_HF_NEOX)
		json_object_set_new(j, "attention_dropout", json_real(m->attention_dropout));
	s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(j);
	return s;
}

/* Optional number key; *v unchanged when absent.  -1 when present but not a number. */
static int num_key(json_t *j, const char *k, double *v)
{
	json_t *x = json_object_get(j, k);
	if (!x || json_is_null(x))
		return 0;
	if (!json_is_number(x))
		return -1;
	*v = json_number_value(x);
	return 1;
}

static int int_key(json_t *j, const char *path, const char *k, int required, int *v, struct ds_err *err)
{
	json_t *x = json_object_get(j, k);
	if (!x || json_is_null(x)) {
		if (required)
			return ds_err_set(err, DS_EINVAL, "%s: key '%s' is missing", path, k);
		return 0;
	}
	if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > 1000000000)
		return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected a positive integer", path, k);
	*v = (int)json_integer_value(x);
	return 0;
}

static int bool_key(json_t *j, const char *path, const char *k, int *v, struct ds_err *err)
{
	json_t *x = json_object_get(j, k);
	if (!x || json_is_null(x))
		return 0;
	if (!json_is_boolean(x))
		return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected true or false", path, k);
	*v = json_is_true(x);
	return 0;
}

/* The activation key k (transformers' default def when absent) into
 * *act: the tanh GELU (gelu_new, gelu_pytorch_tanh, gelu_fast) is dstk's
 * gelu, the exact erf GELU ("gelu") its gelu_exact -- or, with approx,
 * the tanh gelu (--approx-gelu, as before dstk had the exact form). */
static int gelu_of(json_t *j, const char *path, const char *k, const char *def, int approx, int *act,
		   struct ds_err *err)
{
	json_t *x = json_object_get(j, k);
	const char *s = !x ? def : json_is_string(x) ? json_string_value(x) : NULL;
	if (s && (!strcmp(s, "gelu_new") || !strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_fast"))) {
		*act = DS_ACT_GELU;
		return 0;
	}
	if (s && !strcmp(s, "gelu")) {
		*act = approx ? DS_ACT_GELU : DS_ACT_GELU_EXACT;
		if (approx)
			ds_log_warn("%s: %s 'gelu' (exact erf GELU) imported as dstk's tanh GELU (--approx-gelu): "
				    "outputs differ slightly from the original model", path, k);
		return 0;
	}
	return ds_err_set(err, DS_EINVAL, "%s: key '%s' is %s%s%s%s: dstk computes the GELU as 'gelu' (exact erf) "
			  "or 'gelu_new' / 'gelu_pytorch_tanh' / 'gelu_fast' (tanh)", path, k, s ? "'" : "",
			  s ? s : "not a string", s ? "'" : "", x ? "" : " (transformers' default)");
}

static void dstk_defaults(struct ds_model_config *m)
{
	ds_model_config_defaults(m);
	m->family = DS_FAMILY_GPT;
}

static void derive(struct ds_model_config *m)
{
	int d = m->make_vocab_size_divisible_by > 0 ? m->make_vocab_size_divisible_by : 1;
	m->padded_vocab_size = (m->vocab_size + d - 1) / d * d;
	if (!m->intermediate_size)
		m->intermediate_size = 4 * m->hidden_size;
	if (!m->seq_length)
		m->seq_length = m->max_position_embeddings;
	if (!m->max_position_embeddings)
		m->max_position_embeddings = m->seq_length;
}

int ds_hf_config_load(const char *path, struct ds_model_config *m, int *arch, int approx_gelu,
		      struct ds_err *err)
{
	json_error_t je;
	json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je), *mt;
	const char *type;
	int rc = 0, tie = 1;
	dstk_defaults(m);
	if (!j)
		return ds_err_set(err, DS_EINVAL, "%s:%d: %s", path, je.line, je.text);
	mt = json_object_get(j, "model_type");
	type = json_is_string(mt) ? json_string_value(mt) : "";
	if (!strcmp(type, "gpt2")) {
		*arch = DS_HF_GPT2;
		m->pos_emb = DS_POS_LEARNED;
		if ((rc = int_key(j, path, "n_layer", 1, &m->num_layers, err)) ||
		    (rc = int_key(j, path, "n_embd", 1, &m->hidden_size, err)) ||
		    (rc = int_key(j, path, "n_head", 1, &m->num_attention_heads, err)) ||
		    (rc = int_key(j, path, "n_positions", 1, &m->max_position_embeddings, err)) ||
		    (rc = int_key(j, path, "vocab_size", 1, &m->vocab_size, err)) ||
		    (rc = int_key(j, path, "n_inner", 0, &m->intermediate_size, err)) ||
		    (rc = bool_key(j, path, "tie_word_embeddings", &tie, err)) ||
		    (rc = gelu_of(j, path, "activation_function", "gelu_new", approx_gelu, &m->activation, err)))
			goto out;
		if (num_key(j, "layer_norm_epsilon", &m->layernorm_epsilon) < 0 ||
		    num_key(j, "initializer_range", &m->init_method_std) < 0 ||
		    num_key(j, "resid_pdrop", &m->hidden_dropout) < 0 ||
		    num_key(j, "attn_pdrop", &m->attention_dropout) < 0) {
			rc = ds_err_set(err, DS_EINVAL, "%s: a number key holds a non-number", path);
			goto out;
		}
		if (json_is_false(json_object_get(j, "scale_attn_weights")) ||
		    json_is_true(json_object_get(j, "scale_attn_by_inverse_layer_idx")) ||
		    json_is_true(json_object_get(j, "reorder_and_upcast_attn"))) {
			rc = ds_err_set(err, DS_EINVAL, "%s: attention scaling other than 1/sqrt(head_dim) is not "
					"supported by dstk", path);
			goto out;
		}
	} else if (!strcmp(type, "gpt_neox")) {
		double pct = 0.25;   /* GPTNeoXConfig's default rotary_pct */
		*arch = DS_HF_NEOX;
		tie = 0;
		m->pos_emb = DS_POS_ROTARY;
		m->gpt_j_residual = 1;
		if ((rc = int_key(j, path, "num_hidden_layers", 1, &m->num_layers, err)) ||
		    (rc = int_key(j, path, "hidden_size", 1, &m->hidden_size, err)) ||
		    (rc = int_key(j, path, "num_attention_heads", 1, &m->num_attention_heads, err)) ||
		    (rc = int_key(j, path, "max_position_embeddings", 1, &m->max_position_embeddings, err)) ||
		    (rc = int_key(j, path, "vocab_size", 1, &m->vocab_size, err)) ||
		    (rc = int_key(j, path, "intermediate_size", 0, &m->intermediate_size, err)) ||
		    (rc = bool_key(j, path, "tie_word_embeddings", &tie, err)) ||
		    (rc = bool_key(j, path, "use_parallel_residual", &m->gpt_j_residual, err)) ||
		    (rc = gelu_of(j, path, "hidden_act", "gelu", approx_gelu, &m->activation, err)))
			goto out;
		if (num_key(j, "rotary_pct", &pct) < 0 || num_key(j, "partial_rotary_factor", &pct) < 0 ||
		    num_key(j, "rotary_emb_base", &m->rotary_emb_base) < 0 ||
		    num_key(j, "rope_theta", &m->rotary_emb_base) < 0 ||
		    num_key(j, "layer_norm_eps", &m->layernorm_epsilon) < 0 ||
		    num_key(j, "initializer_range", &m->init_method_std) < 0 ||
		    num_key(j, "hidden_dropout", &m->hidden_dropout) < 0 ||
		    num_key(j, "attention_dropout", &m->attention_dropout) < 0) {
			rc = ds_err_set(err, DS_EINVAL, "%s: a number key holds a non-number", path);
			goto out;
		}
		if (pct <= 0 || pct > 1) {
			rc = ds_err_set(err, DS_EINVAL, "%s: key 'rotary_pct': %g is not in (0, 1]", path, pct);
			goto out;
		}
		m->rotary_pct = pct;
		if (json_is_false(json_object_get(j, "attention_bias"))) {
			rc = ds_err_set(err, DS_EINVAL, "%s: key 'attention_bias' false: dstk's attention has biases",
					path);
			goto out;
		}
		if (json_object_get(j, "rope_scaling") && !json_is_null(json_object_get(j, "rope_scaling"))) {
			rc = ds_err_set(err, DS_EINVAL, "%s: key 'rope_scaling' is not supported by dstk", path);
			goto out;
		}
	} else {
		rc = ds_err_set(err, DS_EINVAL, "%s: key 'model_type' is '%s': only 'gpt2' and 'gpt_neox' can be "
				"imported", path, type);
		goto out;
	}
	m->no_weight_tying = !tie;
	if (m->hidden_size % m->num_attention_heads) {
		rc = ds_err_set(err, DS_EINVAL, "%s: hidden size %d is not a multiple of the %d heads", path,
				m->hidden_size, m->num_attention_heads);
		goto out;
	}
	m->seq_length = m->max_position_embeddings;
	derive(m);
out:
	json_decref(j);
	return rc;
}

/* ---- dstk model JSON ----------------------------------------------------- */

/* lib/config's key table does the work; padded_vocab_size, which
 * ds_model_config_to_json adds but its loader does not take, is dropped on
 * writing and checked on reading. */

char *ds_convert_model_json(const struct ds_model_config *m)
{
	char *s = ds_model_config_to_json(m, 0), *out = NULL;
	json_t *j = s ? json_loads(s, 0, NULL) : NULL;
	if (j) {
		json_object_del(j, "padded_vocab_size");
		out = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	}
	json_decref(j);
	free(s);
	return out;
}

int ds_convert_model_parse(const char *text, const char *where, struct ds_model_config *m,
			   struct ds_err *err)
{
	json_error_t je;
	json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je), *pv;
	char *t = NULL;
	int rc, padded = 0;
	if (!j || !json_is_object(j)) {
		json_decref(j);
		return ds_err_set(err, DS_EINVAL, "%s: model JSON: %s", where, j ? "not an object" : je.text);
	}
	if ((pv = json_object_get(j, "padded_vocab_size")) && json_is_integer(pv)) {
		padded = (int)json_integer_value(pv);
		json_object_del(j, "padded_vocab_size");
	}
	t = json_dumps(j, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	json_decref(j);
	if (!t)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	rc = ds_model_config_load_string(t, where, m, err);
	free(t);
	if (rc == 0 && padded && padded != m->padded_vocab_size)
		rc = ds_err_set(err, DS_EINVAL, "%s: model JSON: padded_vocab_size %d disagrees with vocab_size %d "
				"padded to a multiple of %d", where, padded, m->vocab_size,
				m->make_vocab_size_divisible_by);
	return rc;
}
