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
/* gelu and geglu are GeLU's tanh approximation (GPT-2's, HF's "gelu_new"),
 * gelu_exact and geglu_exact its exact erf form (torch's F.gelu, HF's
 * "gelu", GPT-NeoX's unfused gelu and its geglu); the values are the
 * kernels' act codes (kernels/common/gpt_math.h) */
enum ds_activation {
	DS_ACT_GELU = 0, DS_ACT_GEGLU = 1, DS_ACT_SWIGLU = 2, DS_ACT_GELU_EXACT = 3, DS_ACT_GEGLU_EXACT = 4
};
/* 1: a gated activation (geglu, swiglu, geglu_exact), whose c_fc is 2 x
 * intermediate_size wide */
static inline int ds_activation_gated(int a)
{
	return a == DS_ACT_GEGLU || a == DS_ACT_SWIGLU || a == DS_ACT_GEGLU_EXACT;
}
/* Mixture of Experts (DeepSpeed's deepspeed.moe.layer.MoE, issue 23): the
 * model JSON's "moe" section, with DeepSpeed's argument names
 * (lib/config/model_moe.c).  A layer with layer_experts[l] > 1 replaces its
 * MLP by a gate and that many experts (each the model's MLP); 0 or 1 is
 * a dense layer. */
#define DS_MOE_MAX_LAYERS 1024
enum ds_moe_noise { DS_MOE_NOISE_NONE = 0, DS_MOE_NOISE_JITTER = 1, DS_MOE_NOISE_RSAMPLE = 2 };
struct ds_moe_config {
	int enabled;                   /* some layer has experts (derived) */
	int ep_size;                   /* expert-parallel ranks (divides every layer's experts) */
	int k;                         /* top-k gating: 1 or 2 */
	double capacity_factor;        /* training capacity: ceil(k * cf * tokens / experts) */
	double eval_capacity_factor;   /* the same at evaluation */
	int min_capacity;              /* the least capacity per expert */
	int use_residual;              /* PR-MoE: a dense MLP beside the experts, mixed by a learned coefficient */
	int noisy_gate_policy;         /* enum ds_moe_noise (top-1; Jitter also for top-2) */
	int drop_tokens;               /* 1: tokens past an expert's capacity are dropped */
	int use_rts;                   /* top-1: random token selection among an expert's tokens */
	int top2_2nd_expert_sampling;  /* top-2: Gumbel noise on the second choice */
	double loss_coeff;             /* the auxiliary loss's weight in the training loss */
	int expert_interval;           /* given: MoE in layers l with (l+1) % interval == 0 (0: not given) */
	int nlist;                     /* given: number of "layers" entries (0: not given) */
	int layer_experts[DS_MOE_MAX_LAYERS]; /* experts of layer l (0: dense) (derived) */
	int nexperts_given;            /* 1: num_experts was one number, else the list's length */
	int experts_given[DS_MOE_MAX_LAYERS]; /* num_experts as given (a list: the pyramid) */
	int layers_given[DS_MOE_MAX_LAYERS];  /* "layers" as given */
};

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
	/* GPT-NeoX's use_bias_in_attn_linear / use_bias_in_mlp false: no biases
	 * in c_attn and attn.c_proj / in c_fc, mlp.c_proj and the experts' c_fc
	 * (stored negated, so a zeroed struct has biases) */
	int no_bias_in_attn_linear, no_bias_in_mlp;
	unsigned set_mask;             /* bit i: the model file gave key i (loader) */
	struct ds_moe_config moe;      /* Mixture of Experts ("moe" section; disabled by default) */
};

/* The MoE section's defaults (DeepSpeed's MoE layer: ep_size 1, k 1,
 * capacity factors 1, min_capacity 4, no residual, no noise, drop_tokens,
 * use_rts, 2nd-expert sampling; loss_coeff 0.1 as Megatron-DeepSpeed and
 * GPT-NeoX) with no MoE layer. */
void ds_moe_config_defaults(struct ds_moe_config *c);
/* Read the "moe" object v of model file `file` into m->moe and derive the
 * per-layer expert counts for m->num_layers (which must be known): the
 * "layers" list, else every expert_interval-th layer (Megatron-DeepSpeed's
 * rule, default 2), each with num_experts (one number, or one per MoE
 * layer: PR-MoE's pyramid).  0 or DS_EINVAL naming "file: key 'moe.x'". */
struct json_t;
int ds_moe_config_load_json(struct json_t *v, const char *file, struct ds_model_config *m, struct ds_err *err);
/* The section as JSON (new reference; NULL when MoE is off), so a printed
 * model config loads back. */
struct json_t *ds_moe_config_to_json(const struct ds_moe_config *c);
/* Number of MoE layers, and the experts of layer l (0 dense). */
int ds_moe_num_layers(const struct ds_model_config *m);
static inline int ds_moe_experts(const struct ds_model_config *m, int l)
{
	return m->moe.enabled && l >= 0 && l < DS_MOE_MAX_LAYERS ? m->moe.layer_experts[l] : 0;
}

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
