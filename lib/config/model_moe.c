/* model_moe.c - the model JSON's "moe" section (model.h, issue 23): the
 * arguments of DeepSpeed's deepspeed.moe.layer.MoE under their names, plus
 * where the MoE layers go (Megatron-DeepSpeed's expert_interval, or an
 * explicit list) and the auxiliary loss's coefficient.  Checked by the same
 * key-table code as every other key (table.c).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/model.h"
#include "config/table.h"

#define I DS_KEY_IMPLEMENTED
#define MM (DS_KEY_MIN | DS_KEY_MAX)
static const struct ds_config_key moekeys[] = {
	{ "num_experts", DS_KT_ANY, NULL, NULL, NAN, NAN, I, 0,
	  "experts per MoE layer: a number, or one per MoE layer (the PR-MoE pyramid)", DS_KEY_NOFIELD },
	{ "expert_interval", DS_KT_INT, "2", NULL, 1, 1 << 30, I, MM,
	  "an MoE layer every expert_interval layers: l with (l+1) % interval == 0 (Megatron-DeepSpeed)", DS_KEY_NOFIELD },
	{ "layers", DS_KT_LIST, NULL, NULL, NAN, NAN, I, 0, "the MoE layers by index from 0 (instead of expert_interval)",
	  DS_KEY_NOFIELD },
	{ "ep_size", DS_KT_INT, "1", NULL, 1, 1 << 20, I, MM, "expert-parallel ranks; divides every layer's experts",
	  DS_KEY_NOFIELD },
	{ "k", DS_KT_INT, "1", NULL, 1, 2, I, MM, "top-k gating: 1 or 2", DS_KEY_NOFIELD },
	{ "capacity_factor", DS_KT_FLOAT, "1.0", NULL, 0, NAN, I, DS_KEY_MIN, "expert capacity factor in training",
	  DS_KEY_NOFIELD },
	{ "eval_capacity_factor", DS_KT_FLOAT, "1.0", NULL, 0, NAN, I, DS_KEY_MIN, "expert capacity factor in evaluation",
	  DS_KEY_NOFIELD },
	{ "min_capacity", DS_KT_INT, "4", NULL, 0, 1 << 30, I, MM, "the least capacity of an expert", DS_KEY_NOFIELD },
	{ "use_residual", DS_KT_BOOL, "false", NULL, NAN, NAN, I, 0,
	  "PR-MoE: a dense MLP beside the experts, mixed by a learned coefficient", DS_KEY_NOFIELD },
	{ "noisy_gate_policy", DS_KT_ANY, "null", NULL, NAN, NAN, I, 0, "null, \"None\", \"Jitter\" or \"RSample\"",
	  DS_KEY_NOFIELD },
	{ "drop_tokens", DS_KT_BOOL, "true", NULL, NAN, NAN, I, 0, "drop the tokens past an expert's capacity",
	  DS_KEY_NOFIELD },
	{ "use_rts", DS_KT_BOOL, "true", NULL, NAN, NAN, I, 0, "top-1: random token selection", DS_KEY_NOFIELD },
	{ "top2_2nd_expert_sampling", DS_KT_BOOL, "true", NULL, NAN, NAN, I, 0,
	  "top-2: sample the second expert (Gumbel noise on its logits)", DS_KEY_NOFIELD },
	{ "loss_coeff", DS_KT_FLOAT, "0.1", NULL, 0, NAN, I, DS_KEY_MIN,
	  "weight of the load-balancing loss in the training loss (moe_loss_coeff)", DS_KEY_NOFIELD },
};
#define NMOE ((int)(sizeof(moekeys) / sizeof(moekeys[0])))

void ds_moe_config_defaults(struct ds_moe_config *c)
{
	memset(c, 0, sizeof *c);
	c->ep_size = 1;
	c->k = 1;
	c->capacity_factor = 1.0;
	c->eval_capacity_factor = 1.0;
	c->min_capacity = 4;
	c->drop_tokens = 1;
	c->use_rts = 1;
	c->top2_2nd_expert_sampling = 1;
	c->loss_coeff = 0.1;
}

int ds_moe_num_layers(const struct ds_model_config *m)
{
	int n = 0;
	for (int l = 0; l < m->num_layers && l < DS_MOE_MAX_LAYERS; l++)
		n += ds_moe_experts(m, l) > 1;
	return n;
}

#define FAIL(...) do { rc = ds_err_set(err, DS_EINVAL, __VA_ARGS__); goto out; } while (0)

/* a list of ints in [lo, hi] into out (at most DS_MOE_MAX_LAYERS) */
static int int_list(json_t *v, const char *file, const char *key, int lo, int hi, int *out, int *n,
		    struct ds_err *err)
{
	int rc = 0;
	size_t i;
	json_t *x;
	if (json_array_size(v) < 1 || json_array_size(v) > DS_MOE_MAX_LAYERS)
		FAIL("%s: key 'moe.%s': a list of 1 to %d numbers", file, key, DS_MOE_MAX_LAYERS);
	json_array_foreach(v, i, x) {
		double d = json_is_number(x) ? json_number_value(x) : NAN;
		if (!(d == floor(d)) || d < lo || d > hi)
			FAIL("%s: key 'moe.%s': entry %zu must be an integer in [%d, %d]", file, key, i, lo, hi);
		out[i] = (int)d;
	}
	*n = (int)json_array_size(v);
out:
	return rc;
}

int ds_moe_config_load_json(json_t *v, const char *file, struct ds_model_config *m, struct ds_err *err)
{
	struct ds_moe_config *c = &m->moe;
	int rc = 0, given_interval = 0, given_experts = 0;
	const char *name;
	json_t *x;
	ds_moe_config_defaults(c);
	if (!json_is_object(v))
		FAIL("%s: key 'moe': expected an object of DeepSpeed MoE arguments (num_experts, k, ep_size, ...)", file);
	json_object_foreach(v, name, x) {
		char key[128];
		ds_config_table_underscores(name, key, sizeof key);
		int i = ds_config_table_find(moekeys, NMOE, key);
		if (i < 0) {
			char sug[128];
			ds_config_table_suggest(moekeys, NMOE, key, sug, sizeof sug);
			if (sug[0])
				FAIL("%s: unknown key 'moe.%s' (did you mean 'moe.%s'?)", file, name, sug);
			FAIL("%s: unknown key 'moe.%s'", file, name);
		}
		char path[160];
		snprintf(path, sizeof path, "moe.%s", key);
		json_t *nv = NULL;
		if (moekeys[i].type != DS_KT_ANY && (rc = ds_config_table_check(&moekeys[i], file, path, x, &nv, err)) < 0)
			goto out;
		json_t *y = nv ? nv : x;
		if (!strcmp(key, "num_experts")) {
			if (json_is_array(y)) {
				rc = int_list(y, file, key, 1, 1 << 20, c->experts_given, &c->nexperts_given, err);
			} else if (json_is_integer(y) && json_integer_value(y) >= 1 && json_integer_value(y) <= 1 << 20) {
				c->experts_given[0] = (int)json_integer_value(y);
				c->nexperts_given = 1;
			} else {
				rc = ds_err_set(err, DS_EINVAL, "%s: key 'moe.num_experts': a number >= 1 or a list of them",
						file);
			}
			given_experts = 1;
		} else if (!strcmp(key, "expert_interval")) {
			c->expert_interval = (int)json_integer_value(y);
			given_interval = 1;
		} else if (!strcmp(key, "layers")) {
			rc = int_list(y, file, key, 0, DS_MOE_MAX_LAYERS - 1, c->layers_given, &c->nlist, err);
		} else if (!strcmp(key, "ep_size")) {
			c->ep_size = (int)json_integer_value(y);
		} else if (!strcmp(key, "k")) {
			c->k = (int)json_integer_value(y);
		} else if (!strcmp(key, "capacity_factor")) {
			c->capacity_factor = json_number_value(y);
		} else if (!strcmp(key, "eval_capacity_factor")) {
			c->eval_capacity_factor = json_number_value(y);
		} else if (!strcmp(key, "min_capacity")) {
			c->min_capacity = (int)json_integer_value(y);
		} else if (!strcmp(key, "use_residual")) {
			c->use_residual = json_is_true(y);
		} else if (!strcmp(key, "noisy_gate_policy")) {
			const char *s = json_is_null(y) ? "None" : json_string_value(y);
			if (s && !strcmp(s, "None"))
				c->noisy_gate_policy = DS_MOE_NOISE_NONE;
			else if (s && !strcmp(s, "Jitter"))
				c->noisy_gate_policy = DS_MOE_NOISE_JITTER;
			else if (s && !strcmp(s, "RSample"))
				c->noisy_gate_policy = DS_MOE_NOISE_RSAMPLE;
			else
				rc = ds_err_set(err, DS_EINVAL, "%s: key 'moe.noisy_gate_policy': null, \"None\", \"Jitter\" "
						"or \"RSample\" (DeepSpeed's spellings)", file);
		} else if (!strcmp(key, "drop_tokens")) {
			c->drop_tokens = json_is_true(y);
		} else if (!strcmp(key, "use_rts")) {
			c->use_rts = json_is_true(y);
		} else if (!strcmp(key, "top2_2nd_expert_sampling")) {
			c->top2_2nd_expert_sampling = json_is_true(y);
		} else if (!strcmp(key, "loss_coeff")) {
			c->loss_coeff = json_number_value(y);
		}
		json_decref(nv);
		if (rc < 0)
			goto out;
	}
	if (!given_experts)
		FAIL("%s: key 'moe.num_experts' is required in the moe section", file);
	if (given_interval && c->nlist)
		FAIL("%s: key 'moe.layers': give either the layer list or expert_interval, not both", file);
	if (m->num_layers > DS_MOE_MAX_LAYERS)
		FAIL("%s: key 'moe': MoE models of more than %d layers are not supported", file, DS_MOE_MAX_LAYERS);
	/* which layers, and how many experts each */
	int interval = given_interval ? c->expert_interval : 2, nmoe = 0;
	int is_moe[DS_MOE_MAX_LAYERS] = { 0 };
	if (c->nlist) {
		for (int i = 0; i < c->nlist; i++) {
			if (c->layers_given[i] >= m->num_layers)
				FAIL("%s: key 'moe.layers': layer %d, but the model has num_layers %d", file, c->layers_given[i],
				     m->num_layers);
			if (i && c->layers_given[i] <= c->layers_given[i - 1])
				FAIL("%s: key 'moe.layers': list the layers in increasing order, each once", file);
			is_moe[c->layers_given[i]] = 1;
		}
	} else {
		for (int l = 0; l < m->num_layers; l++)
			is_moe[l] = (l + 1) % interval == 0;
	}
	for (int l = 0; l < m->num_layers; l++)
		nmoe += is_moe[l];
	if (nmoe == 0)
		FAIL("%s: key 'moe.expert_interval': %d leaves no MoE layer among num_layers %d", file, interval,
		     m->num_layers);
	if (c->nexperts_given > 1 && c->nexperts_given != nmoe)
		FAIL("%s: key 'moe.num_experts': %d entries, but there are %d MoE layers (one number, or one per MoE "
		     "layer)", file, c->nexperts_given, nmoe);
	for (int l = 0, j = 0; l < m->num_layers; l++) {
		if (!is_moe[l])
			continue;
		int e = c->experts_given[c->nexperts_given > 1 ? j : 0];
		j++;
		if (e % c->ep_size)
			FAIL("%s: key 'moe.ep_size': %d does not divide the %d experts of layer %d", file, c->ep_size, e, l);
		if (e < c->k)
			FAIL("%s: key 'moe.k': top-%d gating needs at least %d experts (layer %d has %d)", file, c->k, c->k, l,
			     e);
		c->layer_experts[l] = e > 1 ? e : 0;
		c->enabled |= e > 1;
	}
	if (!c->enabled)
		FAIL("%s: key 'moe.num_experts': every MoE layer has 1 expert; give 2 or more, or remove the moe section",
		     file);
out:
	if (rc < 0)
		ds_moe_config_defaults(c);
	return rc;
}

json_t *ds_moe_config_to_json(const struct ds_moe_config *c)
{
	if (!c->enabled)
		return NULL;
	json_t *o = json_object(), *ne;
	if (!o)
		return NULL;
	if (c->nexperts_given == 1) {
		ne = json_integer(c->experts_given[0]);
	} else {
		ne = json_array();
		for (int i = 0; i < c->nexperts_given; i++)
			json_array_append_new(ne, json_integer(c->experts_given[i]));
	}
	json_object_set_new(o, "num_experts", ne);
	if (c->nlist) {
		json_t *ls = json_array();
		for (int i = 0; i < c->nlist; i++)
			json_array_append_new(ls, json_integer(c->layers_given[i]));
		json_object_set_new(o, "layers", ls);
	} else {
		json_object_set_new(o, "expert_interval", json_integer(c->expert_interval ? c->expert_interval : 2));
	}
	static const char *const noise[] = { "None", "Jitter", "RSample" };
	json_object_set_new(o, "ep_size", json_integer(c->ep_size));
	json_object_set_new(o, "k", json_integer(c->k));
	json_object_set_new(o, "capacity_factor", json_real(c->capacity_factor));
	json_object_set_new(o, "eval_capacity_factor", json_real(c->eval_capacity_factor));
	json_object_set_new(o, "min_capacity", json_integer(c->min_capacity));
	json_object_set_new(o, "use_residual", json_boolean(c->use_residual));
	json_object_set_new(o, "noisy_gate_policy", json_string(noise[c->noisy_gate_policy % 3]));
	json_object_set_new(o, "drop_tokens", json_boolean(c->drop_tokens));
	json_object_set_new(o, "use_rts", json_boolean(c->use_rts));
	json_object_set_new(o, "top2_2nd_expert_sampling", json_boolean(c->top2_2nd_expert_sampling));
	json_object_set_new(o, "loss_coeff", json_real(c->loss_coeff));
	return o;
}
