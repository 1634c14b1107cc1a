/* config.h - the DeepSpeed configuration: load, validate, resolve, print.
 *
 * One table (keys.h) declares every DeepSpeed key and dstk's own `dstk`
 * section.  ds_config_load_file/_string parse the JSON (duplicates
 * rejected, syntax errors as file:line:column), check every key against the
 * table (unknown key: error with a suggestion, or a warning when lenient),
 * apply DeepSpeed's aliases, enforce the exclusions of spec §2, refuse
 * unsupported features, resolve the batch triad for the world size and
 * infer what DeepSpeed infers.  Every message is one line naming the file
 * and the key.  Every value dstk acts on is then a field of one typed
 * struct, struct ds_config_values (values.h), filled from the table:
 * consumers read fields, never a key by its path.
 */
#ifndef DS_CONFIG_CONFIG_H
#define DS_CONFIG_CONFIG_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "config/values.h"
#include "util/err.h"

struct ds_config;

/* What an "auto" value (Hugging Face's convention) becomes: ds-train's
 * Megatron-style flags where given, else the key's documented default.
 * DS_CONFIG_AUTO_INIT is "nothing given". */
struct ds_config_auto {
	double lr, weight_decay, beta1, beta2, eps, clip_grad;  /* NAN: flag not given */
	int64_t micro_batch, global_batch, train_iters, warmup_iters;  /* -1: not given */
	int fp16, bf16;          /* -1: not given, else 0/1 */
	int64_t hidden_size;     /* the model's, for Hugging Face's ZeRO bucket sizes (0: unknown) */
	int64_t micro_fit;       /* micro batch "auto": the largest the memory plan fits (0: unknown, 1 is used) */
	const char *micro_fit_why;  /* how micro_fit was found, for its note (NULL: not said) */
};
#define DS_CONFIG_AUTO_INIT { NAN, NAN, NAN, NAN, NAN, NAN, -1, -1, -1, -1, -1, -1, 0, 0, NULL }

struct ds_config_opts {
	int world_size;  /* data-parallel ranks for the triad (0 means 1) */
	int lenient;     /* unknown keys are warnings (ds_log_warn), not errors */
	int allow_auto;  /* ds-autotune: accept "auto" and a ZeRO stage "all"/list */
	/* resolve every "auto" from these (ds-train); NULL: "auto" is an error
	 * unless allow_auto */
	const struct ds_config_auto *autos;
	int tp_size;     /* tensor-parallel ranks (0 means 1): whether partition_activations acts */
};
#define DS_CONFIG_OPTS_INIT { 1, 0, 0, NULL, 0 }

/* Where a resolved value came from. */
enum ds_config_source {
	DS_SRC_UNSET = 0,  /* no value and no default */
	DS_SRC_FILE,       /* given in the config */
	DS_SRC_DEFAULT,    /* the table's default */
	DS_SRC_INFERRED,   /* derived (batch triad, overlap_comm, dtypes, ...) */
	DS_SRC_AUTO        /* "auto", left to ds-autotune (allow_auto only) */
};

/* Load and validate.  *out is a new config (free with ds_config_destroy) on
 * success, NULL on error.  Returns 0, DS_EINVAL (bad config; err names the
 * file and key), DS_EIO (cannot read) or DS_ENOMEM. */
int ds_config_load_file(struct ds_config **out, const char *path, const struct ds_config_opts *o,
			struct ds_err *err);
/* The same from JSON text; `name` (NULL: "<string>") stands for the file in messages. */
int ds_config_load_string(struct ds_config **out, const char *json, const char *name,
			  const struct ds_config_opts *o, struct ds_err *err);
void ds_config_destroy(struct ds_config *c);  /* accepts NULL */

/* Every value dstk acts on (values.h), filled once per load from the key
 * table: the file's value, the table's default or the inferred value;
 * borrowed from c (valid until ds_config_destroy). */
const struct ds_config_values *ds_config_values(const struct ds_config *c);
/* 1 when field f of struct ds_config_values *v was given in the config
 * (under any alias, "auto" included), for settings whose meaning depends on
 * being given (DeepSpeed's fp16 keys, the batch triad). */
#define DS_CONFIG_GIVEN(v, f) ((v)->src.f == DS_SRC_FILE || (v)->src.f == DS_SRC_AUTO)
/* 1 when field f was given as "auto" (allow_auto): it holds the default. */
#define DS_CONFIG_AUTO(v, f) ((v)->src.f == DS_SRC_AUTO)

/* The value at a dotted path as a borrowed jansson json_t (valid until
 * ds_config_destroy), NULL when it has none (unset without default, or
 * "auto").  For code that walks arbitrary keys (ds-autotune's "auto"
 * resolution); a known key is read from ds_config_values. */
struct json_t;
const struct json_t *ds_config_get_json(const struct ds_config *c, const char *path);
/* Source of the value at a dotted path (DS_SRC_UNSET for unknown paths),
 * for code that walks arbitrary keys; a known key's is v->src.<path>. */
int ds_config_source(const struct ds_config *c, const char *path);
const char *ds_config_source_name(int src);  /* "file", "default", ... */
/* 1 when the value at path was "auto", resolved (struct ds_config_auto). */
int ds_config_resolved(const struct ds_config *c, const char *path);
/* The file name the config was loaded from ("<string>" name for strings). */
const char *ds_config_name(const struct ds_config *c);

/* 0, or DS_EINVAL naming the first value given in the file that the table
 * accepts (DeepSpeed does) but dstk does not implement yet: "file: key
 * 'value': why; what to do" (offload device nvme).  ds-train refuses such
 * a config; --check notes it. */
int ds_config_unimplemented(const struct ds_config *c, struct ds_err *err);

/* The batch triad resolved as DeepSpeed does (spec §1). */
struct ds_config_batch {
	int64_t train_batch_size, micro_batch, grad_accum;
	int world_size;
	int resolved;  /* 0 only under allow_auto when a batch key is "auto" */
};
void ds_config_batch(const struct ds_config *c, struct ds_config_batch *b);

enum ds_opt_type { DS_OPT_NONE = 0, DS_OPT_ADAM, DS_OPT_ADAMW, DS_OPT_LAMB, DS_OPT_SGD, DS_OPT_ONEBIT_ADAM,
		   DS_OPT_ZERO_ONE_ADAM, DS_OPT_ONEBIT_LAMB };
struct ds_config_optimizer {
	int type;               /* enum ds_opt_type; NONE when no optimizer section */
	int adamw;              /* Adam family: 1 decoupled (AdamW), 0 L2 */
	double lr, beta1, beta2, eps, weight_decay;
	int bias_correction;
	int eps_inside_sqrt;    /* Lamb */
	double max_coeff, min_coeff;  /* Lamb trust-ratio clamp */
	double momentum, dampening;   /* SGD */
	int nesterov;           /* SGD */
	/* the 1-bit family (optim/onebit.h) */
	int64_t freeze_step, var_freeze_step, var_update_scaler, local_step_scaler, local_step_clipper;
	int comm_backend;       /* comm_backend_name: 0 nccl, 1 mpi, 2 compressed */
	double coeff_beta, factor_max, factor_min, factor_threshold;
};
void ds_config_optimizer(const struct ds_config *c, struct ds_config_optimizer *o);
const char *ds_config_opt_name(int type);  /* "Adam", ... "none" */

enum ds_cfg_sched_type { DS_CFG_SCHED_NONE = 0, DS_CFG_SCHED_WARMUP_LR, DS_CFG_SCHED_WARMUP_DECAY_LR,
		     DS_CFG_SCHED_WARMUP_COSINE_LR, DS_CFG_SCHED_ONE_CYCLE, DS_CFG_SCHED_LR_RANGE_TEST };
struct ds_config_scheduler {
	int type;                          /* enum ds_cfg_sched_type */
	int64_t last_batch_iteration;      /* -1 */
	double warmup_min_lr, warmup_max_lr;
	int64_t warmup_num_steps;
	int warmup_linear;                 /* warmup_type "linear" (else "log") */
	int64_t total_num_steps;           /* WarmupDecayLR / WarmupCosineLR */
	double warmup_min_ratio, cos_min_ratio;
	double lr_range_test_min_lr, lr_range_test_step_rate;
	int64_t lr_range_test_step_size;
	int lr_range_test_staircase;
	double cycle_min_lr, cycle_max_lr, decay_lr_rate;
	int64_t cycle_first_step_size, cycle_second_step_size;  /* second: = first when unset */
	int64_t cycle_first_stair_count, cycle_second_stair_count, decay_step_size;
	int cycle_momentum;
	double cycle_min_mom, cycle_max_mom, decay_mom_rate;
};
void ds_config_scheduler(const struct ds_config *c, struct ds_config_scheduler *s);
const char *ds_config_sched_name(int type);  /* "WarmupLR", ... "none" */

/* Note i (from 0) of the load, NULL past the last: a key of a switched-off
 * section that was ignored (*kind "ignored": "path: why"), a setting
 * accepted with a warning ("warning"), an "auto" value resolved ("auto":
 * "path = value (from where)").  Borrowed from c. */
const char *ds_config_note_text(const struct ds_config *c, int i, const char **kind);

/* The effective configuration, one line per key that is set, inferred or
 * has a default ("path = value  (source)"), in table order, then one
 * "# kind: text" line per note.  Returns 0 or
 * DS_EIO when writing fails. */
int ds_config_print(const struct ds_config *c, FILE *f, struct ds_err *err);
/* The effective configuration as nested JSON text (malloc'd, caller frees;
 * NULL on ENOMEM).  with_sources: {"path": {"value": v, "source": s}} flat
 * instead of nested values. */
char *ds_config_to_json(const struct ds_config *c, int with_sources);

/* The table's declaration of a key: type name, status name ("implemented",
 * "inherent", "unsupported") and help; 0, or DS_EINVAL for an unknown path. */
int ds_config_describe(const char *path, const char **type, const char **status, const char **help);

/* Every declared key, one tab-separated line each: path, type (with the
 * allowed values or range), default, status and help.  0 or DS_EIO. */
int ds_config_print_keys(FILE *f, struct ds_err *err);

/* Edit distance (case-insensitive) between two strings, for suggestions. */
int ds_config_edit_distance(const char *a, const char *b);

#endif
