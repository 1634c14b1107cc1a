/* model.h - the model configuration (GPT-NeoX / Megatron option names).
 *
 * A plain struct that every layer reads; lib/config parses and validates it
 * from the model JSON (ds_model_config_load) through the same key table as
 * the DeepSpeed config.  Tests may fill it by hand after
 * ds_model_config_defaults().
 */
#ifndef DS_CONFIG_MODEL_H
#define DS_CONFIG_MODEL_H

#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

enum ds_model_family { DS_FAMILY_GPT = 0, DS_FAMILY_BERT = 1 };
enum ds_pos_emb { DS_POS_LEARNED = 0, DS_POS_ROTARY = 1, DS_POS_SINUSOIDAL = 2 };
enum ds_norm { DS_NORM_LAYERNORM = 0, DS_NORM_RMSNORM = 1 };
enum ds_activation { DS_ACT_GELU = 0, DS_ACT_GEGLU = 1, DS_ACT_SWIGLU = 2 };
/* GPT-NeoX's init methods (megatron/model/init_functions.py) */
enum ds_init_method { DS_INIT_NORMAL_STD = 0, DS_INIT_SCALED_NORMAL, DS_INIT_SMALL, DS_INIT_WANG };

struct ds_model_config {
	int family;                    /* enum ds_model_family; bert is profile-only */
	int num_layers;                /* L */
	int hidden_size;               /* C */
	int num_attention_heads;       /* NH; C % NH == 0 */
	int seq_length;                /* T, training window */
	int max_position_embeddings;   /* >= seq_length */
	int vocab_size;                /* V, the tokenizer's vocabulary */
	int make_vocab_size_divisible_by; /* default 128 */
	int padded_vocab_size;         /* Vp = V rounded up (derived) */
	int intermediate_size;         /* MLP hidden width; default 4*C (derived when 0) */
	int pos_emb;                   /* enum ds_pos_emb */
	double rotary_pct;             /* fraction of head dim rotated, (0,1] */
	double rotary_emb_base;        /* default 10000 */
	int norm;                      /* enum ds_norm */
	double layernorm_epsilon;      /* default 1e-5 */
	double rms_norm_epsilon;       /* default 1e-8 (NeoX rms_norm_epsilon) */
	int activation;                /* enum ds_activation */
	int no_weight_tying;           /* 1: separate lm_head; 0: tied to wte */
	int gpt_j_residual;            /* 1: parallel attention + MLP residual */
	double init_method_std;        /* default 0.02 */
	double hidden_dropout;         /* default 0 */
	double attention_dropout;      /* default 0 */
	int type_vocab_size;           /* bert: token types (default 2) */
	int init_method;               /* enum ds_init_method: embeddings, QKV, MLP in, lm_head (normal) */
	int output_layer_init_method;  /* index in "scaled_normal|normal|small_init|wang_init" (0, a zeroed
					* struct: scaled_normal); ds_model_output_init gives its enum ds_init_method */
	unsigned set_mask;             /* bit i: the model file gave key i (loader) */
};

/* Fill *m with the documented defaults (GPT-2 small shapes are NOT implied:
 * num_layers etc. are 0 and must be given). */
void ds_model_config_defaults(struct ds_model_config *m);

/* Derive padded_vocab_size, and intermediate_size (4*C) and
 * max_position_embeddings (seq_length) when they are 0. */
void ds_model_config_derive(struct ds_model_config *m);

/* Load and validate a model JSON file (GPT-NeoX/Megatron names, '-' or '_';
 * unknown keys are errors with a suggestion); fills *m with defaults, the
 * file's values and the derived sizes.  0 or DS_EINVAL (err: "file: key
 * 'x': ..."). */
int ds_model_config_load(const char *path, struct ds_model_config *m, struct ds_err *err);
/* The same from a parsed JSON object (borrowed). */
struct json_t;
int ds_model_config_load_json(const struct json_t *root, const char *name, struct ds_model_config *m,
			      struct ds_err *err);
/* The standard deviation of init method `method` (enum ds_init_method)
 * for this model: normal sigma, scaled_normal sigma / sqrt(2 L),
 * small_init sqrt(2 / (5 C)), wang_init 2 / L / sqrt(C). */
double ds_model_init_std(const struct ds_model_config *m, int method);
/* output_layer_init_method as an enum ds_init_method. */
int ds_model_output_init(const struct ds_model_config *m);
/* The same from JSON text; `name` stands for the file in messages. */
int ds_model_config_load_string(const char *json, const char *name, struct ds_model_config *m,
				struct ds_err *err);
/* The effective model config, one "key value (source)" line per key that
 * applies to the model; 0 or DS_EIO. */
int ds_model_config_print(const struct ds_model_config *m, FILE *f, struct ds_err *err);
/* The same as JSON text (malloc'd; NULL on ENOMEM); with_sources as
 * ds_config_to_json. */
char *ds_model_config_to_json(const struct ds_model_config *m, int with_sources);

#endif
