/* config.c - load, validate and resolve a DeepSpeed config (config.h).
 *
 * Order: parse (jansson, duplicates rejected) -> walk every key against the
 * table (types, ranges, enums, unknown keys, "auto") -> DeepSpeed's aliases
 * -> the flat list of values (file + defaults) -> constraints of spec §2 ->
 * unsupported features -> batch triad and other inferred values.
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config.h"
#include "config/keys.h"
#include "config/config_int.h"
#include "config/table.h"
#include "util/log.h"

#define T ds_config_keys
#define NT ds_config_nkeys

struct walk {
	struct ds_config *c;
	struct ds_err *err;
};

/* Store e's value in its field of c->v (DS_KEY_FIELD in the table), typed
 * by the key's type; "auto" stores the table's default (c->keep owns it),
 * or leaves the field 0 when there is none.  0 or DS_ENOMEM. */
static int store(struct ds_config *c, const struct ds_config_ent *e)
{
	const struct ds_config_key *k = &T[e->key];
	if (!k->field)
		return 0;
	char *f = (char *)&c->v + k->off;
	json_t *v = e->val;
	((unsigned char *)&c->v.src)[k->src_off] = (unsigned char)e->src;
	if (e->src == DS_SRC_AUTO) {
		if (!k->def)
			return 0;
		if (!c->keep && !(c->keep = json_array()))
			return DS_ENOMEM;
		if (!(v = json_loads(k->def, JSON_DECODE_ANY, NULL)) || json_array_append_new(c->keep, v))
			return DS_ENOMEM;
	}
	switch (k->type) {
	case DS_KT_BOOL:
		*(int *)(void *)f = json_is_true(v);
		break;
	case DS_KT_INT:
		*(int64_t *)(void *)f = json_integer_value(v);
		break;
	case DS_KT_FLOAT:
		*(double *)(void *)f = json_number_value(v); /* integers too */
		break;
	case DS_KT_STRING:
	case DS_KT_ENUM:
		*(const char **)(void *)f = json_string_value(v);
		break;
	default:
		*(const json_t **)(void *)f = v;
	}
	return 0;
}

int ds_config_add_ent(struct ds_config *c, const char *path, int key, json_t *val, int src)
{
	if (c->nents == c->cap) {
		int cap = c->cap ? 2 * c->cap : 128;
		struct ds_config_ent *e = realloc(c->ents, (size_t)cap * sizeof(*e));
		if (!e)
			return DS_ENOMEM;
		c->ents = e;
		c->cap = cap;
	}
	struct ds_config_ent *e = &c->ents[c->nents];
	if (!(e->path = strdup(path)))
		return DS_ENOMEM;
	e->key = key;
	e->val = json_incref(val);
	e->src = src;
	e->seq = c->nents++;
	e->resolved = 0;
	return store(c, e);
}

struct ds_config_ent *ds_config_find_ent(const struct ds_config *c, const char *path)
{
	for (int i = 0; i < c->nents; i++)
		if (!strcmp(c->ents[i].path, path))
			return &c->ents[i];
	return NULL;
}

/* The "key 'path'" a message names, into buf ("" if none). */
static void key_of(const char *msg, char *buf, size_t n)
{
	const char *k = strstr(msg, "key '");
	const char *e = k ? strchr(k + 5, '\'') : NULL;
	snprintf(buf, n, "%.*s", e ? (int)(e - k + 1) : 0, k ? k : "");
}

int ds_config_error(struct ds_config *c, const char *fmt, ...)
{
	char line[DS_ERR_MSG_MAX], key[300], other[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* one error per key: a later rule about the same key adds nothing */
	key_of(line, key, sizeof(key));
	for (int i = 0; key[0] && i < c->errs.n && i < DS_CONFIG_MAX_ERRS; i++) {
		key_of(c->errs.line[i], other, sizeof(other));
		if (!strcmp(key, other))
			return DS_EINVAL;
	}
	ds_config_errs_add(&c->errs, line);
	return DS_EINVAL;
}

int ds_config_note(struct ds_config *c, int kind, const char *fmt, ...)
{
	char line[DS_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	for (int i = 0; i < c->nnotes; i++)
		if (c->notes[i].kind == kind && !strcmp(c->notes[i].text, line))
			return 0; /* said once */
	if (c->nnotes == c->ncap) {
		int cap = c->ncap ? 2 * c->ncap : 16;
		struct ds_config_note *n = realloc(c->notes, (size_t)cap * sizeof(*n));
		if (!n)
			return DS_ENOMEM;
		c->notes = n;
		c->ncap = cap;
	}
	if (!(c->notes[c->nnotes].text = strdup(line)))
		return DS_ENOMEM;
	c->notes[c->nnotes++].kind = kind;
	if (kind == DS_NOTE_WARNING)
		ds_log_warn("%s: %s", c->name, line);
	return 0;
}

static void join(char *buf, size_t n, const char *prefix, const char *name)
{
	if (prefix && *prefix)
		snprintf(buf, n, "%s.%s", prefix, name);
	else
		snprintf(buf, n, "%s", name);
}

static int is_auto(json_t *v)
{
	return json_is_string(v) && !strcmp(json_string_value(v), "auto");
}

static int auto_error(struct walk *w, const char *path, const char *what)
{
	return ds_config_error(w->c, "%s: key '%s': %s is resolved by ds-autotune: give a value, or run ds-autotune on this config",
			       w->c->name, path, what);
}

static int unknown(struct walk *w, json_t *obj, const char *name, const char *path)
{
	char sug[256];
	ds_config_table_suggest(T, NT, path, sug, sizeof(sug));
	if (w->c->o.lenient) {
		if (sug[0])
			ds_log_warn("%s: ignoring unknown key '%s' (did you mean '%s'?)", w->c->name, path, sug);
		else
			ds_log_warn("%s: ignoring unknown key '%s'", w->c->name, path);
		json_object_del(obj, name);
		return 0;
	}
	json_object_del(obj, name);
	if (sug[0])
		return ds_config_error(w->c, "%s: unknown key '%s' (did you mean '%s'?)", w->c->name, path, sug);
	return ds_config_error(w->c, "%s: unknown key '%s' (ds-train --list-keys lists them; --lenient ignores it)",
			       w->c->name, path);
}

/* Validate (and normalise in place) every key of obj, whose path is prefix.
 * Every bad key is recorded (ds_config_error) and removed, so one run
 * reports them all; returns 0, or DS_ENOMEM. */
static int walk(struct walk *w, json_t *obj, const char *prefix)
{
	const char *name;
	json_t *v;
	void *tmp;
	json_object_foreach_safe(obj, tmp, name, v) {
		char path[512];
		join(path, sizeof(path), prefix, name);
		int k = ds_config_table_find(T, NT, path);
		int node = ds_config_table_is_node(T, NT, path);
		if (k >= 0 && T[k].type == DS_KT_ANY && ds_config_table_is_wild(T[k].path)) {
			/* a user-chosen name under a pass-through map: catch typos first */
			char sug[256];
			ds_config_table_suggest(T, NT, path, sug, sizeof(sug));
			if (sug[0] && strcmp(sug, path))
				unknown(w, obj, name, path);
			continue;
		}
		if (k < 0 && !node) {
			unknown(w, obj, name, path);
			continue;
		}
		if (json_is_null(v)) {
			/* null spells "not set" for a key without a default, as DeepSpeed reads it */
			if (k >= 0 && T[k].def)
				ds_config_error(w->c, "%s: key '%s': null is not a value here; remove the key for its default %s",
						w->c->name, path, T[k].def);
			json_object_del(obj, name);
			continue;
		}
		if (node) {
			if (!strcmp(path, "zero_optimization") && json_is_boolean(v))
				continue; /* the legacy form, mapped by aliases() */
			if (is_auto(v)) {
				auto_error(w, path, "\"auto\"");
				json_object_del(obj, name);
			} else if (!json_is_object(v)) {
				ds_config_error(w->c, "%s: key '%s': expected an object", w->c->name, path);
				json_object_del(obj, name);
			} else {
				DS_TRY(walk(w, v, path));
			}
			continue;
		}
		if (!strcmp(path, "zero_optimization.stage") &&
		    ((json_is_string(v) && !strcmp(json_string_value(v), "all")) || json_is_array(v))) {
			if (!w->c->o.allow_auto) {
				auto_error(w, path, "a stage given as \"all\" or a list");
				json_object_del(obj, name);
			}
			continue;
		}
		if (is_auto(v) && T[k].type != DS_KT_STRING) {
			if (!w->c->o.allow_auto && !w->c->o.autos) {
				auto_error(w, path, "\"auto\"");
				json_object_del(obj, name);
			}
			continue;
		}
		json_t *norm;
		struct ds_err e = DS_ERR_INIT;
		int rc = ds_config_table_check(&T[k], w->c->name, path, v, &norm, &e);
		if (rc == DS_ENOMEM)
			return rc;
		if (rc < 0) {
			ds_config_error(w->c, "%s", e.msg);
			json_object_del(obj, name);
			continue;
		}
		if (norm && json_object_set_new(obj, name, norm))
			return DS_ENOMEM;
	}
	return 0;
}

/* Move a deprecated key to its replacement, with DeepSpeed's deprecation
 * warning; both given is an error (DeepSpeed asserts).  0 or DS_ENOMEM. */
static int rename_key(struct walk *w, json_t *obj, const char *prefix, const char *old, const char *new)
{
	json_t *v = json_object_get(obj, old);
	const char *dot = *prefix ? "." : "";
	if (!v)
		return 0;
	if (json_object_get(obj, new)) {
		ds_config_error(w->c, "%s: key '%s%s%s': give either it or its replacement '%s%s%s', not both",
				w->c->name, prefix, dot, old, prefix, dot, new);
		json_object_del(obj, old);
		return 0;
	}
	DS_TRY(ds_config_note(w->c, DS_NOTE_WARNING, "key '%s%s%s' is deprecated; read as '%s%s%s'", prefix, dot,
			      old, prefix, dot, new));
	if (json_object_set(obj, new, v))
		return DS_ENOMEM;
	json_object_del(obj, old);
	return 0;
}

/* cpu_offload: true -> {"offload_X": {"device": "cpu"}}; false sets nothing
 * (DeepSpeed's new_param_fn gives None) */
static int offload_alias(struct walk *w, json_t *z, const char *old, const char *new)
{
	json_t *v = json_object_get(z, old);
	if (!v)
		return 0;
	if (json_object_get(z, new)) {
		ds_config_error(w->c, "%s: key 'zero_optimization.%s': deprecated; give either it or 'zero_optimization.%s', not both",
				w->c->name, old, new);
		json_object_del(z, old);
		return 0;
	}
	DS_TRY(ds_config_note(w->c, DS_NOTE_WARNING, "key 'zero_optimization.%s' is deprecated; read as zero_optimization.%s%s",
			      old, new, json_is_true(v) ? ".device \"cpu\"" : " off"));
	if (json_is_true(v) && json_object_set_new(z, new, json_pack("{s:s}", "device", "cpu")))
		return DS_ENOMEM;
	json_object_del(z, old);
	return 0;
}

/* Spellings to rewrite before the values are checked against the table. */
static int spellings(struct walk *w)
{
	json_t *root = w->c->tree;
	/* DeepSpeed before 0.14.1 spelled bf16 communication "bfp16" */
	json_t *cdt = json_object_get(root, "communication_data_type");
	if (json_is_string(cdt) && !strcasecmp(json_string_value(cdt), "bfp16")) {
		DS_TRY(ds_config_note(w->c, DS_NOTE_WARNING,
				      "key 'communication_data_type': \"%s\" is the spelling of DeepSpeed before 0.14.1; read as \"bf16\"",
				      json_string_value(cdt)));
		if (json_object_set_new(root, "communication_data_type", json_string("bf16")))
			return DS_ENOMEM;
	}
	return 0;
}

static int aliases(struct walk *w)
{
	json_t *root = w->c->tree;
	/* DeepSpeed reads "bf16" and only without it the old "bfloat16" */
	if (json_object_get(root, "bfloat16") && json_object_get(root, "bf16")) {
		DS_TRY(ds_config_note(w->c, DS_NOTE_WARNING,
				      "key 'bfloat16' is ignored beside 'bf16' (DeepSpeed reads bf16 first); remove it"));
		json_object_del(root, "bfloat16");
	}
	DS_TRY(rename_key(w, root, "", "bfloat16", "bf16"));
	json_t *z = json_object_get(root, "zero_optimization");
	json_t *ag = json_object_get(root, "allgather_size");
	if (json_is_boolean(z)) {
		json_t *nz = json_object();
		json_object_set_new(nz, "stage", json_integer(json_is_true(z) ? 1 : 0));
		if (ag)
			json_object_set(nz, "allgather_bucket_size", ag);
		json_object_set_new(root, "zero_optimization", nz);
		json_object_del(root, "allgather_size");
		return ds_config_note(w->c, DS_NOTE_WARNING,
				      "key 'zero_optimization': the boolean form is deprecated; use {\"stage\": N}");
	}
	if (ag) {
		ds_config_error(w->c, "%s: key 'allgather_size': only read with the legacy boolean zero_optimization; use zero_optimization.allgather_bucket_size",
				w->c->name);
		json_object_del(root, "allgather_size");
	}
	if (!json_is_object(z))
		return 0;
	DS_TRY(offload_alias(w, z, "cpu_offload", "offload_optimizer"));
	DS_TRY(offload_alias(w, z, "cpu_offload_param", "offload_param"));
	if (json_object_get(z, "cpu_offload_use_pin_memory")) {
		DS_TRY(ds_config_note(w->c, DS_NOTE_WARNING,
				      "key 'zero_optimization.cpu_offload_use_pin_memory' is deprecated and has no effect (pinning is inherent in dstk)"));
		json_object_del(z, "cpu_offload_use_pin_memory");
	}
	DS_TRY(rename_key(w, z, "zero_optimization", "stage3_gather_fp16_weights_on_model_save",
			  "stage3_gather_16bit_weights_on_model_save"));
	/* the names without "stage3_" are the pydantic field names DeepSpeed
	 * accepts beside their aliases: no warning */
	static const char *const bare[] = { "prefetch_bucket_size", "param_persistence_threshold",
					    "model_persistence_threshold", "max_live_parameters",
					    "max_reuse_distance", "gather_16bit_weights_on_model_save",
					    "module_granularity_threshold", "use_all_reduce_for_fetch_params" };
	for (size_t i = 0; i < sizeof(bare) / sizeof(bare[0]); i++) {
		char s3[128];
		snprintf(s3, sizeof(s3), "stage3_%s", bare[i]);
		json_t *v = json_object_get(z, bare[i]);
		if (!v)
			continue;
		if (json_object_get(z, s3)) {
			ds_config_error(w->c, "%s: key 'zero_optimization.%s': give either it or 'zero_optimization.%s', not both",
					w->c->name, bare[i], s3);
		} else if (json_object_set(z, s3, v)) {
			return DS_ENOMEM;
		}
		json_object_del(z, bare[i]);
	}
	return 0;
}

/* The table default of key k as a new value, or NULL. */
static json_t *table_default(int k)
{
	return T[k].def ? json_loads(T[k].def, JSON_DECODE_ANY, NULL) : NULL;
}

/* What "auto" at path (key k) becomes (c->o.autos): *out a new value, or
 * NULL to leave the key unset (the batch triad infers it); *from says
 * where it came from.  An error is recorded when there is nothing to
 * resolve it to.  0 or DS_ENOMEM. */
static int resolve_auto(struct ds_config *c, const char *path, int k, json_t **out, char *from, size_t n)
{
	const struct ds_config_auto *a = c->o.autos;
	double h = (double)a->hidden_size;
	*out = NULL;
	snprintf(from, n, "the default");
#define FLAG(cond, val, name) if (cond) { *out = (val); snprintf(from, n, "%s", name); }
	if (!strcmp(path, "train_micro_batch_size_per_gpu")) {
		FLAG(a->micro_batch > 0, json_integer(a->micro_batch), "--micro-batch-size")
		else if (a->micro_fit > 0) {
			*out = json_integer(a->micro_fit);
			snprintf(from, n, "%s", a->micro_fit_why ? a->micro_fit_why : "the memory plan");
		} else {
			*out = json_integer(1);
			snprintf(from, n, "no memory plan yet");
		}
	} else if (!strcmp(path, "train_batch_size")) {
		FLAG(a->global_batch > 0, json_integer(a->global_batch), "--global-batch-size")
		else snprintf(from, n, "micro batch x accumulation x world size");
	} else if (!strcmp(path, "gradient_accumulation_steps")) {
		snprintf(from, n, "the batch triad");
	} else if (!strcmp(path, "gradient_clipping")) {
		FLAG(!isnan(a->clip_grad), json_real(a->clip_grad), "--clip-grad")
	} else if (!strcmp(path, "optimizer.params.lr") || !strcmp(path, "scheduler.params.warmup_max_lr")) {
		FLAG(!isnan(a->lr), json_real(a->lr), "--lr")
	} else if (!strcmp(path, "optimizer.params.weight_decay")) {
		FLAG(!isnan(a->weight_decay), json_real(a->weight_decay), "--weight-decay")
	} else if (!strcmp(path, "optimizer.params.eps")) {
		FLAG(!isnan(a->eps), json_real(a->eps), "--adam-eps")
	} else if (!strcmp(path, "optimizer.params.betas")) {
		if (!isnan(a->beta1) || !isnan(a->beta2)) {
			json_t *d = table_default(k);
			double b1 = isnan(a->beta1) ? json_number_value(json_array_get(d, 0)) : a->beta1;
			double b2 = isnan(a->beta2) ? json_number_value(json_array_get(d, 1)) : a->beta2;
			json_decref(d);
			*out = json_pack("[f,f]", b1, b2);
			snprintf(from, n, "%s", !isnan(a->beta1) && !isnan(a->beta2) ? "--adam-beta1, --adam-beta2"
						: !isnan(a->beta1) ? "--adam-beta1 and the default" : "--adam-beta2 and the default");
		}
	} else if (!strcmp(path, "scheduler.params.warmup_num_steps")) {
		FLAG(a->warmup_iters >= 0, json_integer(a->warmup_iters), "--lr-warmup-iters")
	} else if (!strcmp(path, "scheduler.params.total_num_steps")) {
		FLAG(a->train_iters > 0, json_integer(a->train_iters), "--train-iters")
	} else if (!strcmp(path, "fp16.enabled")) {
		FLAG(a->fp16 >= 0 || a->bf16 > 0, json_boolean(a->fp16 > 0), a->fp16 >= 0 ? "--fp16" : "--bf16")
	} else if (!strcmp(path, "bf16.enabled")) {
		FLAG(a->bf16 >= 0 || a->fp16 > 0, json_boolean(a->bf16 > 0), a->bf16 >= 0 ? "--bf16" : "--fp16")
	} else if (!strcmp(path, "zero_optimization.reduce_bucket_size")) {
		/* Hugging Face's: hidden_size squared, and for stage 3 0.9 of it
		 * and 10 x hidden_size (transformers' deepspeed integration) */
		FLAG(h > 0, json_integer((json_int_t)(h * h)), "hidden_size^2 of the model")
	} else if (!strcmp(path, "zero_optimization.stage3_prefetch_bucket_size")) {
		FLAG(h > 0, json_integer((json_int_t)(0.9 * h * h)), "0.9 x hidden_size^2 of the model")
	} else if (!strcmp(path, "zero_optimization.stage3_param_persistence_threshold")) {
		FLAG(h > 0, json_integer((json_int_t)(10 * h)), "10 x hidden_size of the model")
	}
#undef FLAG
	int left = !strcmp(path, "gradient_accumulation_steps") || (!strcmp(path, "train_batch_size") && !*out);
	if (!*out && !left && !(*out = table_default(k))) {
		if (!T[k].def)
			ds_config_error(c, "%s: key '%s': \"auto\" has no default to resolve to; give a value%s", c->name, path,
					!strcmp(path, "scheduler.params.total_num_steps") ? " or --train-iters" : "");
		else
			return DS_ENOMEM;
	}
	return 0;
}

/* Record every leaf of the (normalised) tree as a file value. */
static int collect(struct ds_config *c, json_t *obj, const char *prefix)
{
	const char *name;
	json_t *v;
	json_object_foreach(obj, name, v) {
		char path[512];
		join(path, sizeof(path), prefix, name);
		int k = ds_config_table_find(T, NT, path);
		if (ds_config_table_is_node(T, NT, path) && json_is_object(v)) {
			DS_TRY(collect(c, v, path));
			continue;
		}
		if (k < 0)
			continue;
		if (is_auto(v) && T[k].type != DS_KT_STRING && T[k].type != DS_KT_ANY && c->o.autos) {
			json_t *r;
			char from[160], shown[256];
			DS_TRY(resolve_auto(c, path, k, &r, from, sizeof(from)));
			if (!r) {
				DS_TRY(ds_config_note(c, DS_NOTE_RESOLVED, "%s: inferred (%s)", path, from));
				continue; /* left to the batch triad */
			}
			struct ds_err e = DS_ERR_INIT;
			json_t *norm = NULL;
			int rc = ds_config_table_check(&T[k], c->name, path, r, &norm, &e);
			if (norm) {
				json_decref(r);
				r = norm;
			}
			if (rc < 0) {
				ds_config_error(c, "%s (\"auto\" from %s)", e.msg, from);
				json_decref(r);
				continue;
			}
			ds_config_table_fmt_value(r, shown, sizeof(shown));
			rc = ds_config_add_ent(c, path, k, r, DS_SRC_FILE);
			json_decref(r);
			DS_TRY(rc);
			c->ents[c->nents - 1].resolved = 1;
			DS_TRY(ds_config_note(c, DS_NOTE_RESOLVED, "%s = %s (%s)", path, shown, from));
			continue;
		}
		int src = (is_auto(v) && T[k].type != DS_KT_STRING && T[k].type != DS_KT_ANY) ||
				  (!strcmp(path, "zero_optimization.stage") && !json_is_integer(v))
			  ? DS_SRC_AUTO : DS_SRC_FILE;
		DS_TRY(ds_config_add_ent(c, path, k, v, src));
	}
	return 0;
}

static int add_defaults(struct ds_config *c)
{
	for (int k = 0; k < NT; k++) {
		if (!T[k].def || (T[k].flags & DS_KEY_ALIAS) || ds_config_table_is_wild(T[k].path) ||
		    ds_config_find_ent(c, T[k].path))
			continue;
		json_t *v = json_loads(T[k].def, JSON_DECODE_ANY, NULL);
		if (!v)
			return DS_EINTERNAL;
		int rc = ds_config_add_ent(c, T[k].path, k, v, DS_SRC_DEFAULT);
		json_decref(v);
		DS_TRY(rc);
	}
	return 0;
}

int ds_config_set_inferred(struct ds_config *c, const char *path, json_t *v)
{
	int k = ds_config_table_find(T, NT, path);
	int rc = k < 0 ? DS_EINTERNAL : ds_config_add_ent(c, path, k, v, DS_SRC_INFERRED);
	json_decref(v);
	return rc;
}

/* ---- getters --------------------------------------------------------- */

static json_t *value(const struct ds_config *c, const char *path)
{
	struct ds_config_ent *e = ds_config_find_ent(c, path);
	return e && e->src != DS_SRC_AUTO ? e->val : NULL;
}

const struct ds_config_values *ds_config_values(const struct ds_config *c)
{
	return &c->v;
}

const struct json_t *ds_config_get_json(const struct ds_config *c, const char *path)
{
	return value(c, path);
}

int ds_config_source(const struct ds_config *c, const char *path)
{
	struct ds_config_ent *e = ds_config_find_ent(c, path);
	return e ? e->src : DS_SRC_UNSET;
}

int ds_config_resolved(const struct ds_config *c, const char *path)
{
	struct ds_config_ent *e = ds_config_find_ent(c, path);
	return e && e->resolved;
}

const char *ds_config_source_name(int src)
{
	static const char *const n[] = { "unset", "file", "default", "inferred", "auto" };
	return src >= 0 && src <= DS_SRC_AUTO ? n[src] : "?";
}

const char *ds_config_name(const struct ds_config *c)
{
	return c->name;
}

/* ---- load ------------------------------------------------------------ */

static int cmp_ent(const void *a, const void *b)
{
	const struct ds_config_ent *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int load(struct ds_config **out, json_t *root, const char *name, const struct ds_config_opts *o,
		struct ds_err *err)
{
	struct ds_config *c = calloc(1, sizeof(*c));
	int rc;
	*out = NULL;
	if (!c || !(c->name = strdup(name))) {
		free(c);
		json_decref(root);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	c->tree = root;
	c->o = o ? *o : (struct ds_config_opts)DS_CONFIG_OPTS_INIT;
	if (c->o.world_size < 1)
		c->o.world_size = 1;
	struct walk w = { c, err };
	if (!json_is_object(root)) {
		rc = ds_err_set(err, DS_EINVAL, "%s: expected a JSON object of DeepSpeed keys", name);
		goto fail;
	}
	/* every key error of the file in one run; the rules need valid keys */
	if ((rc = spellings(&w)) < 0 || (rc = walk(&w, root, "")) < 0 || (rc = aliases(&w)) < 0)
		goto mem;
	if (c->errs.n)
		goto bad;
	if ((rc = collect(c, root, "")) < 0 || (rc = add_defaults(c)) < 0)
		goto mem;
	if (((rc = ds_config_rules(c, err)) < 0 && rc != DS_EINVAL) ||
	    ((rc = ds_config_unsupported(c, err)) < 0 && rc != DS_EINVAL))
		goto mem;
	if (c->errs.n)
		goto bad;
	if ((rc = ds_config_triad(c, err)) < 0 && rc != DS_EINVAL)
		goto mem;
	if (c->errs.n)
		goto bad;
	if ((rc = ds_config_infer(c)) < 0)
		goto mem;
	qsort(c->ents, (size_t)c->nents, sizeof(*c->ents), cmp_ent);
	*out = c;
	return 0;
bad:
	rc = ds_config_errs_report(&c->errs, c->name, err);
	goto fail;
mem:
	rc = ds_err_set(err, rc == DS_EINTERNAL ? DS_EINTERNAL : DS_ENOMEM, "%s: %s", name,
			rc == DS_EINTERNAL ? "internal error in the key table" : "out of memory");
fail:
	ds_config_destroy(c);
	return rc;
}

int ds_config_load_file(struct ds_config **out, const char *path, const struct ds_config_opts *o,
			struct ds_err *err)
{
	json_t *root;
	*out = NULL;
	DS_TRY(ds_config_table_load_file(path, &root, err));
	return load(out, root, path, o, err);
}

int ds_config_load_string(struct ds_config **out, const char *json, const char *name,
			  const struct ds_config_opts *o, struct ds_err *err)
{
	json_error_t je;
	*out = NULL;
	if (!name)
		name = "<string>";
	json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return ds_config_table_parse_error(name, &je, err);
	return load(out, root, name, o, err);
}

void ds_config_destroy(struct ds_config *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->nents; i++) {
		free(c->ents[i].path);
		json_decref(c->ents[i].val);
	}
	free(c->ents);
	for (int i = 0; i < c->nnotes; i++)
		free(c->notes[i].text);
	free(c->notes);
	json_decref(c->tree);
	json_decref(c->keep);
	free(c->name);
	free(c);
}

/* ---- printing -------------------------------------------------------- */

static const char *status_name(int s)
{
	return s == DS_KEY_IMPLEMENTED ? "implemented" : s == DS_KEY_INHERENT ? "inherent" : "unsupported";
}

int ds_config_describe(const char *path, const char **type, const char **status, const char **help)
{
	int k = ds_config_table_find(T, NT, path);
	if (k < 0)
		return DS_EINVAL;
	if (type)
		*type = ds_config_table_type_name(T[k].type);
	if (status)
		*status = status_name(T[k].status);
	if (help)
		*help = T[k].help;
	return 0;
}

int ds_config_print_keys(FILE *f, struct ds_err *err)
{
	fprintf(f, "# key\ttype\tdefault\tstatus\thelp\n");
	for (int k = 0; k < NT; k++) {
		char type[300];
		if (T[k].type == DS_KT_ENUM)
			snprintf(type, sizeof(type), "%s", T[k].allowed);
		else
			snprintf(type, sizeof(type), "%s", ds_config_table_type_name(T[k].type));
		if ((T[k].flags & DS_KEY_MIN) && (T[k].flags & DS_KEY_MAX))
			snprintf(type + strlen(type), sizeof(type) - strlen(type), " [%g, %g]", T[k].min, T[k].max);
		else if (T[k].flags & DS_KEY_MIN)
			snprintf(type + strlen(type), sizeof(type) - strlen(type), " >= %g", T[k].min);
		fprintf(f, "%s\t%s\t%s\t%s%s\t%s\n", T[k].path, type, T[k].def ? T[k].def : "-",
			status_name(T[k].status), (T[k].flags & DS_KEY_ALIAS) ? ", alias" : "", T[k].help);
	}
	if (fflush(f) != 0 || ferror(f))
		return ds_err_set(err, DS_EIO, "writing the key table failed");
	return 0;
}

int ds_config_print(const struct ds_config *c, FILE *f, struct ds_err *err)
{
	for (int i = 0; i < c->nents; i++) {
		const struct ds_config_ent *e = &c->ents[i];
		if (e->src != DS_SRC_FILE && !ds_config_applies(c, e->path))
			continue;
		char s[1024];
		ds_config_table_fmt_value(e->val, s, sizeof(s));
		const char *st = T[e->key].status == DS_KEY_IMPLEMENTED ? "" : T[e->key].status == DS_KEY_INHERENT
				 ? ", inherent" : ", unsupported: off";
		fprintf(f, "%-58s %s  (%s%s)\n", e->path, s, e->resolved ? "auto" : ds_config_source_name(e->src), st);
	}
	const char *kind, *text;
	for (int i = 0; (text = ds_config_note_text(c, i, &kind)); i++)
		fprintf(f, "# %s: %s\n", kind, text);
	if (fflush(f) != 0 || ferror(f))
		return ds_err_set(err, DS_EIO, "writing the effective configuration failed");
	return 0;
}

const char *ds_config_note_text(const struct ds_config *c, int i, const char **kind)
{
	static const char *const k[] = { "ignored", "warning", "auto" };
	if (i < 0 || i >= c->nnotes)
		return NULL;
	if (kind)
		*kind = k[c->notes[i].kind];
	return c->notes[i].text;
}

char *ds_config_to_json(const struct ds_config *c, int with_sources)
{
	json_t *root = json_object();
	for (int i = 0; root && i < c->nents; i++) {
		const struct ds_config_ent *e = &c->ents[i];
		if (e->src != DS_SRC_FILE && !ds_config_applies(c, e->path))
			continue;
		if (with_sources) {
			json_object_set_new(root, e->path,
					    json_pack("{s:O,s:s}", "value", e->val, "source",
						      e->resolved ? "auto" : ds_config_source_name(e->src)));
			continue;
		}
		json_t *o = root;
		char buf[512];
		snprintf(buf, sizeof(buf), "%s", e->path);
		char *p = buf, *dot;
		while ((dot = strchr(p, '.'))) {
			*dot = 0;
			json_t *n = json_object_get(o, p);
			if (!json_is_object(n)) {
				n = json_object();
				json_object_set_new(o, p, n);
			}
			o = n;
			p = dot + 1;
		}
		json_object_set(o, p, e->val);
	}
	char *s = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
	json_decref(root);
	return s;
}
