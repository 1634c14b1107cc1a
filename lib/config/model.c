/* model.c - the model config (model.h): GPT-NeoX/Megatron key names,
 * declared in a ds_config_key table like the DeepSpeed keys and checked by
 * the same code (table.c): types, ranges, enums, did-you-mean.  '-' and '_'
 * are the same in key names (NeoX files use dashes).
 */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/model.h"
#include "config/table.h"

#define I DS_KEY_IMPLEMENTED
#define MIN DS_KEY_MIN
#define MM (DS_KEY_MIN | DS_KEY_MAX)
/* DS_KEY_NOFIELD: a model key fills struct ds_model_config through field[] below */
static const struct ds_config_key mkeys[] = {
	{ "family", DS_KT_ENUM, "\"gpt\"", "gpt|bert", NAN, NAN, I, 0, "gpt (trainable) or bert (profile only)", DS_KEY_NOFIELD },
	{ "num_layers", DS_KT_INT, NULL, NULL, 1, 1 << 30, I, MM, "transformer layers (required)", DS_KEY_NOFIELD },
	{ "hidden_size", DS_KT_INT, NULL, NULL, 1, 1 << 30, I, MM, "model width (required)", DS_KEY_NOFIELD },
	{ "num_attention_heads", DS_KT_INT, NULL, NULL, 1, 1 << 30, I, MM, "attention heads; divides hidden_size (required)", DS_KEY_NOFIELD },
	{ "seq_length", DS_KT_INT, NULL, NULL, 1, 1 << 30, I, MM, "training sequence length (required)", DS_KEY_NOFIELD },
	{ "max_position_embeddings", DS_KT_INT, NULL, NULL, 1, 1 << 30, I, MM, "position table size (default: seq_length)", DS_KEY_NOFIELD },
	{ "vocab_size", DS_KT_INT, NULL, NULL, 1, 1 << 30, I, MM, "tokenizer vocabulary (required)", DS_KEY_NOFIELD },
	{ "make_vocab_size_divisible_by", DS_KT_INT, "128", NULL, 1, 1 << 30, I, MM, "pad the vocabulary to a multiple of this", DS_KEY_NOFIELD },
	{ "intermediate_size", DS_KT_INT, NULL, NULL, 1, 1 << 30, I, MM, "MLP width (default: 4 x hidden_size)", DS_KEY_NOFIELD },
	{ "pos_emb", DS_KT_ENUM, "\"learned\"", "learned|rotary|sinusoidal", NAN, NAN, I, 0, "position embedding", DS_KEY_NOFIELD },
	{ "rotary_pct", DS_KT_FLOAT, "1.0", NULL, 1e-9, 1, I, MM, "rotary: fraction of each head's dims rotated, (0, 1]", DS_KEY_NOFIELD },
	{ "rotary_emb_base", DS_KT_FLOAT, "10000.0", NULL, 1, NAN, I, MIN, "rotary: frequency base", DS_KEY_NOFIELD },
	{ "norm", DS_KT_ENUM, "\"layernorm\"", "layernorm|rmsnorm", NAN, NAN, I, 0, "normalisation", DS_KEY_NOFIELD },
	{ "layernorm_epsilon", DS_KT_FLOAT, "1e-05", NULL, 0, NAN, I, MIN, "layernorm: epsilon", DS_KEY_NOFIELD },
	{ "rms_norm_epsilon", DS_KT_FLOAT, "1e-08", NULL, 0, NAN, I, MIN, "rmsnorm: epsilon", DS_KEY_NOFIELD },
	{ "activation", DS_KT_ENUM, "\"gelu\"", "gelu|geglu|swiglu|gelu_exact|geglu_exact", NAN, NAN, I, 0,
	  "MLP activation: gelu and geglu are the tanh approximation, gelu_exact and geglu_exact the erf form", DS_KEY_NOFIELD },
	{ "no_weight_tying", DS_KT_BOOL, "false", NULL, NAN, NAN, I, 0, "true: separate output head; false: tied to the embedding", DS_KEY_NOFIELD },
	{ "gpt_j_residual", DS_KT_BOOL, "false", NULL, NAN, NAN, I, 0, "parallel attention and MLP residual (GPT-J/NeoX)", DS_KEY_NOFIELD },
	{ "init_method_std", DS_KT_FLOAT, "0.02", NULL, 0, NAN, I, MIN, "standard deviation of the initial weights", DS_KEY_NOFIELD },
	{ "hidden_dropout", DS_KT_FLOAT, "0.0", NULL, 0, 0.999999, I, MM, "dropout after attention and MLP, [0, 1)", DS_KEY_NOFIELD },
	{ "attention_dropout", DS_KT_FLOAT, "0.0", NULL, 0, 0.999999, I, MM, "dropout of the attention probabilities, [0, 1)", DS_KEY_NOFIELD },
	{ "type_vocab_size", DS_KT_INT, "2", NULL, 1, 1 << 30, I, MM, "bert: token types", DS_KEY_NOFIELD },
	{ "padded_vocab_size", DS_KT_INT, NULL, NULL, 1, 1 << 30, I, MM,
	  "derived (vocab_size rounded up); when given it must agree, so printed configs load back", DS_KEY_NOFIELD },
	{ "init_method", DS_KT_ENUM, "\"normal\"", "normal|scaled_normal|small_init|wang_init", NAN, NAN, I, 0,
	  "GPT-NeoX init of the embeddings, QKV, MLP input and output head", DS_KEY_NOFIELD },
	{ "output_layer_init_method", DS_KT_ENUM, "\"scaled_normal\"", "scaled_normal|normal|small_init|wang_init", NAN, NAN,
	  I, 0, "GPT-NeoX init of the attention and MLP output projections", DS_KEY_NOFIELD },
	{ "use_bias_in_attn_linear", DS_KT_BOOL, "true", NULL, NAN, NAN, I, 0,
	  "biases in the attention's c_attn and c_proj (GPT-NeoX; false as Llama/Mixtral)", DS_KEY_NOFIELD },
	{ "use_bias_in_mlp", DS_KT_BOOL, "true", NULL, NAN, NAN, I, 0,
	  "biases in the MLP's c_fc and c_proj, and the experts' c_fc (GPT-NeoX; false as Llama/Mixtral)", DS_KEY_NOFIELD },
};
#define NMK ((int)(sizeof(mkeys) / sizeof(mkeys[0])))

/* Where each key lives in struct ds_model_config, and how. */
enum { F_INT, F_DBL, F_ENUM, F_NOT };   /* F_NOT: a bool stored negated */
static const struct { size_t off; int how; } field[NMK] = {
#define FI(n) { offsetof(struct ds_model_config, n), F_INT }
#define FD(n) { offsetof(struct ds_model_config, n), F_DBL }
#define FE(n) { offsetof(struct ds_model_config, n), F_ENUM }
#define FN(n) { offsetof(struct ds_model_config, n), F_NOT }
	FE(family), FI(num_layers), FI(hidden_size), FI(num_attention_heads), FI(seq_length),
	FI(max_position_embeddings), FI(vocab_size), FI(make_vocab_size_divisible_by), FI(intermediate_size),
	FE(pos_emb), FD(rotary_pct), FD(rotary_emb_base), FE(norm), FD(layernorm_epsilon), FD(rms_norm_epsilon),
	FE(activation), FI(no_weight_tying), FI(gpt_j_residual), FD(init_method_std), FD(hidden_dropout),
	FD(attention_dropout), FI(type_vocab_size), FI(padded_vocab_size), FE(init_method),
	FE(output_layer_init_method), FN(no_bias_in_attn_linear), FN(no_bias_in_mlp),
};

static int key_index(const char *name)
{
	for (int i = 0; i < NMK; i++)
		if (!strcmp(mkeys[i].path, name))
			return i;
	return -1;
}

static void set_field(struct ds_model_config *m, int i, json_t *v)
{
	char *base = (char *)m + field[i].off;
	if (field[i].how == F_NOT) {
		*(int *)base = !json_is_true(v);
	} else if (field[i].how == F_DBL) {
		*(double *)base = json_number_value(v);
	} else if (field[i].how == F_INT) {
		*(int *)base = json_is_boolean(v) ? json_is_true(v) : (int)json_integer_value(v);
	} else {
		const char *s = json_string_value(v), *p = mkeys[i].allowed;
		int idx = 0;
		while (strncmp(p, s, strlen(s)) || (p[strlen(s)] && p[strlen(s)] != '|')) {
			p = strchr(p, '|') + 1;
			idx++;
		}
		*(int *)base = idx;
	}
}

void ds_model_config_defaults(struct ds_model_config *m)
{
	memset(m, 0, sizeof(*m));
	ds_moe_config_defaults(&m->moe);
	for (int i = 0; i < NMK; i++)
		if (mkeys[i].def) {
			json_t *v = json_loads(mkeys[i].def, JSON_DECODE_ANY, NULL);
			if (v)
				set_field(m, i, v);
			json_decref(v);
		}
}

void ds_model_config_derive(struct ds_model_config *m)
{
	int d = m->make_vocab_size_divisible_by > 0 ? m->make_vocab_size_divisible_by : 1;
	m->padded_vocab_size = (m->vocab_size + d - 1) / d * d;
	if (m->intermediate_size == 0)
		m->intermediate_size = 4 * m->hidden_size;
	if (m->max_position_embeddings == 0)
		m->max_position_embeddings = m->seq_length;
}

#define MSET(m, n) ((m)->set_mask & (1u << key_index(n)))
#define FAIL(...) do { rc = ds_err_set(err, DS_EINVAL, __VA_ARGS__); goto out; } while (0)

static int load(json_t *root, const char *file, struct ds_model_config *m, struct ds_err *err)
{
	int rc = 0;
	ds_model_config_defaults(m);
	if (!json_is_object(root))
		FAIL("%s: expected a JSON object of model keys", file);
	const char *name;
	json_t *v, *moe = NULL;
	json_object_foreach(root, name, v) {
		char norm[128];
		ds_config_table_underscores(name, norm, sizeof(norm));
		if (!strcmp(norm, "moe")) {  /* read once num_layers is known (model_moe.c) */
			moe = v;
			continue;
		}
		int i = key_index(norm);
		if (i < 0) {
			char sug[128];
			ds_config_table_suggest(mkeys, NMK, norm, sug, sizeof(sug));
			if (sug[0])
				FAIL("%s: unknown key '%s' (did you mean '%s'?)", file, name, sug);
			FAIL("%s: unknown key '%s'", file, name);
		}
		if (json_is_null(v)) {
			if (mkeys[i].def)
				FAIL("%s: key '%s': null is not a value here; remove the key for its default %s", file, norm,
				     mkeys[i].def);
			continue; /* null: not set */
		}
		if (m->set_mask & (1u << i))
			FAIL("%s: key '%s': given twice (as '-' and '_' spellings)", file, norm);
		json_t *nv = NULL;
		if ((rc = ds_config_table_check(&mkeys[i], file, norm, v, &nv, err)) < 0)
			goto out;
		set_field(m, i, nv ? nv : v);
		json_decref(nv);
		m->set_mask |= 1u << i;
	}
	static const char *const required[] = { "num_layers", "hidden_size", "num_attention_heads", "seq_length",
						"vocab_size" };
	for (int i = 0; i < 5; i++)
		if (!MSET(m, required[i]))
			FAIL("%s: key '%s' is required", file, required[i]);
	if (m->hidden_size % m->num_attention_heads)
		FAIL("%s: key 'hidden_size': %d is not a multiple of num_attention_heads %d", file, m->hidden_size,
		     m->num_attention_heads);
	if (MSET(m, "max_position_embeddings") && m->max_position_embeddings < m->seq_length)
		FAIL("%s: key 'max_position_embeddings': %d is less than seq_length %d", file,
		     m->max_position_embeddings, m->seq_length);
	if (MSET(m, "rotary_pct") && m->pos_emb != DS_POS_ROTARY)
		FAIL("%s: key 'rotary_pct': only used with pos_emb \"rotary\"", file);
	if (MSET(m, "rotary_emb_base") && m->pos_emb != DS_POS_ROTARY)
		FAIL("%s: key 'rotary_emb_base': only used with pos_emb \"rotary\"", file);
	if (MSET(m, "rms_norm_epsilon") && m->norm != DS_NORM_RMSNORM)
		FAIL("%s: key 'rms_norm_epsilon': only used with norm \"rmsnorm\"", file);
	if (MSET(m, "layernorm_epsilon") && m->norm != DS_NORM_LAYERNORM)
		FAIL("%s: key 'layernorm_epsilon': only used with norm \"layernorm\"", file);
	if (m->family == DS_FAMILY_GPT && MSET(m, "type_vocab_size"))
		FAIL("%s: key 'type_vocab_size': only used with family \"bert\"", file);
	if (m->family == DS_FAMILY_BERT) {
		static const char *const gpt_only[] = { "pos_emb", "rotary_pct", "norm", "rms_norm_epsilon",
							"activation", "no_weight_tying", "gpt_j_residual" };
		for (int i = 0; i < 7; i++)
			if (MSET(m, gpt_only[i]))
				FAIL("%s: key '%s': not used with family \"bert\" (learned positions, post-LN, gelu, tied head)",
				     file, gpt_only[i]);
	}
	if (moe && !json_is_null(moe)) {
		if ((rc = ds_moe_config_load_json(moe, file, m, err)) < 0)
			goto out;
		if (m->family != DS_FAMILY_GPT)
			FAIL("%s: key 'moe': Mixture of Experts is for family \"gpt\"", file);
	}
	int given_pv = MSET(m, "padded_vocab_size") ? m->padded_vocab_size : 0;
	ds_model_config_derive(m);
	if (given_pv && given_pv != m->padded_vocab_size)
		FAIL("%s: key 'padded_vocab_size': %d, but vocab_size %d rounded up to a multiple of %d is %d", file, given_pv,
		     m->vocab_size, m->make_vocab_size_divisible_by, m->padded_vocab_size);
out:
	return rc;
}

int ds_model_config_load(const char *path, struct ds_model_config *m, struct ds_err *err)
{
	json_t *root;
	int rc = ds_config_table_load_file(path, &root, err);
	if (rc < 0) {
		ds_model_config_defaults(m);
		return rc;
	}
	rc = load(root, path, m, err);
	json_decref(root);
	return rc;
}

int ds_model_config_load_json(const struct json_t *root, const char *name, struct ds_model_config *m,
			      struct ds_err *err)
{
	return load((json_t *)root, name, m, err);
}

int ds_model_output_init(const struct ds_model_config *m)
{
	/* its enum lists scaled_normal first, so a zeroed struct keeps the default */
	static const int map[] = { DS_INIT_SCALED_NORMAL, DS_INIT_NORMAL_STD, DS_INIT_SMALL, DS_INIT_WANG };
	return map[m->output_layer_init_method & 3];
}

double ds_model_init_std(const struct ds_model_config *m, int method)
{
	double L = m->num_layers > 0 ? m->num_layers : 1, C = m->hidden_size > 0 ? m->hidden_size : 1;
	switch (method) {
	case DS_INIT_SCALED_NORMAL:
		return m->init_method_std / sqrt(2.0 * L); /* scaled_init_method_normal */
	case DS_INIT_SMALL:
		return sqrt(2.0 / (5.0 * C)); /* small_init_init_method: Nguyen and Salazar 2019 */
	case DS_INIT_WANG:
		return 2.0 / L / sqrt(C); /* wang_init_method */
	default:
		return m->init_method_std; /* init_method_normal */
	}
}

int ds_model_config_load_string(const char *json, const char *name, struct ds_model_config *m,
				struct ds_err *err)
{
	json_error_t je;
	json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		ds_model_config_defaults(m);
		return ds_config_table_parse_error(name, &je, err);
	}
	int rc = load(root, name, m, err);
	json_decref(root);
	return rc;
}

static const char *source(const struct ds_model_config *m, int i)
{
	if (m->set_mask & (1u << i))
		return "file";
	if (!mkeys[i].def)
		return "inferred";
	return "default";
}

/* The value of key i as JSON (new reference). */
static json_t *value(const struct ds_model_config *m, int i)
{
	const char *base = (const char *)m + field[i].off;
	if (field[i].how == F_DBL)
		return json_real(*(const double *)base);
	if (field[i].how == F_NOT)
		return json_boolean(!*(const int *)base);
	if (mkeys[i].type == DS_KT_BOOL)
		return json_boolean(*(const int *)base);
	if (field[i].how == F_INT)
		return json_integer(*(const int *)base);
	const char *p = mkeys[i].allowed;
	for (int k = *(const int *)base; k > 0 && strchr(p, '|'); k--)
		p = strchr(p, '|') + 1;
	return json_stringn(p, strcspn(p, "|"));
}

/* Keys that mean nothing for this model (not printed). */
static int relevant(const struct ds_model_config *m, int i)
{
	const char *n = mkeys[i].path;
	if (m->family == DS_FAMILY_BERT)
		return strcmp(n, "pos_emb") && strcmp(n, "rotary_pct") && strcmp(n, "rotary_emb_base") &&
		       strcmp(n, "norm") && strcmp(n, "rms_norm_epsilon") && strcmp(n, "activation") &&
		       strcmp(n, "no_weight_tying") && strcmp(n, "gpt_j_residual");
	if (!strcmp(n, "type_vocab_size"))
		return 0;
	if (!strncmp(n, "rotary_", 7))
		return m->pos_emb == DS_POS_ROTARY;
	if (!strcmp(n, "rms_norm_epsilon"))
		return m->norm == DS_NORM_RMSNORM;
	if (!strcmp(n, "layernorm_epsilon"))
		return m->norm == DS_NORM_LAYERNORM;
	return 1;
}

int ds_model_config_print(const struct ds_model_config *m, FILE *f, struct ds_err *err)
{
	for (int i = 0; i < NMK; i++) {
		if (!relevant(m, i))
			continue;
		json_t *v = value(m, i);
		char s[128];
		ds_config_table_fmt_value(v, s, sizeof(s));
		fprintf(f, "%-58s %s  (%s)\n", mkeys[i].path, s, source(m, i));
		json_decref(v);
	}
	json_t *moe = ds_moe_config_to_json(&m->moe);
	if (moe) {
		const char *k;
		json_t *v;
		json_object_foreach(moe, k, v) {
			char s[128], p[96];
			ds_config_table_fmt_value(v, s, sizeof(s));
			snprintf(p, sizeof p, "moe.%s", k);
			fprintf(f, "%-58s %s  (file)\n", p, s);
		}
		json_decref(moe);
	}
	if (fflush(f) != 0 || ferror(f))
		return ds_err_set(err, DS_EIO, "writing the model configuration failed");
	return 0;
}

char *ds_model_config_to_json(const struct ds_model_config *m, int with_sources)
{
	json_t *root = json_object();
	for (int i = 0; root && i < NMK; i++) {
		if (!relevant(m, i))
			continue;
		json_t *v = value(m, i);
		if (with_sources)
			json_object_set_new(root, mkeys[i].path,
					    json_pack("{s:o,s:s}", "value", v, "source", source(m, i)));
		else
			json_object_set_new(root, mkeys[i].path, v);
	}
	json_t *moe = root ? ds_moe_config_to_json(&m->moe) : NULL;
	if (moe && with_sources)
		json_object_set_new(root, "moe", json_pack("{s:o,s:s}", "value", moe, "source", "file"));
	else if (moe)
		json_object_set_new(root, "moe", moe);
	char *s = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
	json_decref(root);
	return s;
}
