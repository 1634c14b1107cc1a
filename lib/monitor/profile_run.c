/* profile_run.c - ds-profile's work: model file -> count tree -> profile.
 *
 * The model JSON is read here with a small key table until lib/config's
 * ds_model_config_load is available; keys and spellings are GPT-NeoX's
 * (DESIGN.md "Configuration"), '-' and '_' alike, unknown keys are errors.
 */
#include <jansson.h>
#include <stddef.h>
#include <string.h>

#include "model/count.h"
#include "monitor/profile.h"
#include "monitor/profile_run.h"

enum kt { T_INT, T_DOUBLE, T_BOOL, T_ENUM };

struct key {
	const char *name;
	int type;
	size_t off;
	double min;
	const char *const *names;   /* T_ENUM: value i is names[i] */
};

static const char *const fam_names[] = { "gpt", "bert", NULL };
static const char *const pos_names[] = { "learned", "rotary", "sinusoidal", NULL };
static const char *const norm_names[] = { "layernorm", "rmsnorm", NULL };
static const char *const act_names[] = { "gelu", "geglu", "swiglu", NULL };

#define K(n, t, min, e) { #n, t, offsetof(struct ds_model_config, n), min, e }
static const struct key keys[] = {
	K(family, T_ENUM, 0, fam_names),
	K(num_layers, T_INT, 1, NULL),
	K(hidden_size, T_INT, 1, NULL),
	K(num_attention_heads, T_INT, 1, NULL),
	K(seq_length, T_INT, 1, NULL),
	K(max_position_embeddings, T_INT, 1, NULL),
	K(vocab_size, T_INT, 1, NULL),
	K(make_vocab_size_divisible_by, T_INT, 1, NULL),
	K(intermediate_size, T_INT, 1, NULL),
	K(pos_emb, T_ENUM, 0, pos_names),
	K(rotary_pct, T_DOUBLE, 0, NULL),
	K(rotary_emb_base, T_DOUBLE, 0, NULL),
	K(norm, T_ENUM, 0, norm_names),
	K(layernorm_epsilon, T_DOUBLE, 0, NULL),
	K(rms_norm_epsilon, T_DOUBLE, 0, NULL),
	K(activation, T_ENUM, 0, act_names),
	K(no_weight_tying, T_BOOL, 0, NULL),
	K(gpt_j_residual, T_BOOL, 0, NULL),
	K(init_method_std, T_DOUBLE, 0, NULL),
	K(hidden_dropout, T_DOUBLE, 0, NULL),
	K(attention_dropout, T_DOUBLE, 0, NULL),
	K(type_vocab_size, T_INT, 1, NULL),
};
#undef K
#define NKEYS ((int)(sizeof(keys) / sizeof(keys[0])))

static void defaults(struct ds_model_config *m)
{
	memset(m, 0, sizeof(*m));
	m->make_vocab_size_divisible_by = 128;
	m->rotary_pct = 1.0;
	m->rotary_emb_base = 10000;
	m->layernorm_epsilon = 1e-5;
	m->rms_norm_epsilon = 1e-8;
	m->init_method_std = 0.02;
	m->type_vocab_size = 2;
}

/* Levenshtein distance, for "did you mean". */
static int edit_distance(const char *a, const char *b)
{
	int la = (int)strlen(a), lb = (int)strlen(b), d[64];
	if (la > 62 || lb > 62)
		return 99;
	for (int j = 0; j <= lb; j++)
		d[j] = j;
	for (int i = 1; i <= la; i++) {
		int prev = d[0];
		d[0] = i;
		for (int j = 1; j <= lb; j++) {
			int t = d[j];
			int sub = prev + (a[i - 1] != b[j - 1]);
			int best = d[j] + 1 < d[j - 1] + 1 ? d[j] + 1 : d[j - 1] + 1;
			d[j] = sub < best ? sub : best;
			prev = t;
		}
	}
	return d[lb];
}

static int set_key(const char *path, const struct key *k, json_t *v, struct ds_model_config *m,
		   struct ds_err *err)
{
	char *base = (char *)m + k->off;
	switch (k->type) {
	case T_INT:
		if (!json_is_integer(v) || json_integer_value(v) < k->min || json_integer_value(v) > 1000000000)
			return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected an integer >= %g",
					  path, k->name, k->min);
		*(int *)base = (int)json_integer_value(v);
		return 0;
	case T_DOUBLE:
		if (!json_is_number(v) || json_number_value(v) < k->min)
			return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected a number >= %g",
					  path, k->name, k->min);
		*(double *)base = json_number_value(v);
		return 0;
	case T_BOOL:
		if (!json_is_boolean(v))
			return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected true or false", path, k->name);
		*(int *)base = json_is_true(v);
		return 0;
	default:
		if (json_is_string(v))
			for (int i = 0; k->names[i]; i++)
				if (!strcmp(json_string_value(v), k->names[i])) {
					*(int *)base = i;
					return 0;
				}
		{
			char allowed[128] = "";
			for (int i = 0; k->names[i]; i++)
				snprintf(allowed + strlen(allowed), sizeof(allowed) - strlen(allowed), "%s\"%s\"",
					 i ? ", " : "", k->names[i]);
			return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected one of %s", path, k->name,
					  allowed);
		}
	}
}

int ds_profile_load_model(const char *path, struct ds_model_config *m, struct ds_err *err)
{
	json_error_t je;
	int rc = 0;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	defaults(m);
	if (!root) {
		if (je.line < 1)
			return ds_err_set(err, DS_EINVAL, "%s: %s", path, je.text);
		return ds_err_set(err, DS_EINVAL, "%s: line %d column %d: %s", path, je.line, je.column,
				  je.text);
	}
	if (!json_is_object(root)) {
		rc = ds_err_set(err, DS_EINVAL, "%s: expected a JSON object of model keys", path);
		goto out;
	}
	const char *name;
	json_t *v;
	json_object_foreach(root, name, v) {
		char norm[64];
		snprintf(norm, sizeof(norm), "%s", name);
		for (char *p = norm; *p; p++)
			if (*p == '-')
				*p = '_';
		int i = 0;
		while (i < NKEYS && strcmp(keys[i].name, norm))
			i++;
		if (i == NKEYS) {
			int best = -1, bd = 4;
			for (int j = 0; j < NKEYS; j++) {
				int d = edit_distance(norm, keys[j].name);
				if (d < bd)
					bd = d, best = j;
			}
			if (best >= 0)
				rc = ds_err_set(err, DS_EINVAL, "%s: unknown key '%s' (did you mean '%s'?)", path,
						name, keys[best].name);
			else
				rc = ds_err_set(err, DS_EINVAL, "%s: unknown key '%s'", path, name);
			goto out;
		}
		if ((rc = set_key(path, &keys[i], v, m, err)) < 0)
			goto out;
	}
	static const char *const required[] = { "num_layers", "hidden_size", "num_attention_heads",
						"vocab_size" };
	for (int i = 0; i < 4; i++)
		if (!json_object_get(root, required[i])) {
			rc = ds_err_set(err, DS_EINVAL, "%s: key '%s' is required", path, required[i]);
			goto out;
		}
	if (m->hidden_size % m->num_attention_heads) {
		rc = ds_err_set(err, DS_EINVAL,
				"%s: key 'hidden_size': %d is not a multiple of num_attention_heads %d", path,
				m->hidden_size, m->num_attention_heads);
		goto out;
	}
	if (m->max_position_embeddings == 0)
		m->max_position_embeddings = m->seq_length;
	if (m->family == DS_FAMILY_BERT || m->pos_emb == DS_POS_LEARNED)
		if (m->max_position_embeddings < 1) {
			rc = ds_err_set(err, DS_EINVAL,
					"%s: key 'max_position_embeddings' (or seq_length) is required with learned positions",
					path);
			goto out;
		}
	if (m->rotary_pct <= 0 || m->rotary_pct > 1) {
		rc = ds_err_set(err, DS_EINVAL, "%s: key 'rotary_pct': %g is not in (0, 1]", path, m->rotary_pct);
		goto out;
	}
	{
		int d = m->make_vocab_size_divisible_by;
		m->padded_vocab_size = (m->vocab_size + d - 1) / d * d;
		if (m->intermediate_size == 0)
			m->intermediate_size = 4 * m->hidden_size;
	}
out:
	json_decref(root);
	return rc;
}

int ds_profile_run(const struct ds_profile_opts *o, FILE *out, struct ds_profile_result *res,
		   struct ds_err *err)
{
	struct ds_model_config m;
	struct ds_count c = DS_COUNT_INIT;
	struct ds_count_opts co = { o->batch, o->seq, o->convention, o->mlm_tokens };
	struct ds_profile_view v = DS_PROFILE_VIEW_INIT;
	int rc;

	DS_TRY(ds_profile_load_model(o->model_path, &m, err));
	if (o->mlm_tokens > 0 && m.family != DS_FAMILY_BERT)
		return ds_err_set(err, DS_EINVAL, "--mlm-tokens applies to the bert family only (%s is gpt)",
				  o->model_path);
	if ((rc = ds_count_model(&m, &co, &c, err)) < 0)
		return ds_err_prefix(err, "%s: ", o->model_path);
	v.format = o->format;
	v.module_depth = o->module_depth;
	v.top_modules = o->top_modules;
	v.detailed = o->detailed;
	v.model = o->model_path;
	struct ds_profile_engine e = { 0 };
	if (o->measure) {
		struct ds_profile_measure_opts mo = { o->warmup, o->iters, o->checkpointing };
		e.micro_batch = o->batch;
		if ((rc = ds_profile_measure(&m, &mo, &c, &e, err)) < 0) {
			ds_count_release(&c);
			return rc;
		}
	}
	rc = ds_profile_render(&c, &v, o->measure ? &e : NULL, out, err);
	if (rc == 0 && res) {
		res->params = c.nodes[0].total.params;
		res->fwd_macs = c.nodes[0].total.macs;
		res->fwd_flops = c.nodes[0].total.flops;
		res->attn_macs = c.nodes[0].total.attn_macs;
	}
	ds_count_release(&c);
	return rc;
}
