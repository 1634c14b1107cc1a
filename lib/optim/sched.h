/* sched.h - DeepSpeed's LR schedules as pure functions of the iteration.
 *
 * k is DeepSpeed's last_batch_iteration: -1 at construction, then k after
 * the (k+1)-th scheduler.step().  The engine steps the scheduler only after
 * an optimizer step that did not overflow, so the first optimizer step uses
 * the construction value (k = -1) and, in general, the i-th non-skipped
 * optimizer step (i = 1, 2, ...) uses k = i - 2.
 * Semantics: spec/deepspeed-training.md §4, with two choices of dstk:
 * WarmupCosineLR holds the floor after total_num_steps (the progress is
 * clamped at 1, as later DeepSpeed does, instead of climbing back up), and
 * non-zero OneCycle stair counts, which DeepSpeed ignores, are rejected.
 */
#ifndef DS_OPTIM_SCHED_H
#define DS_OPTIM_SCHED_H

#include <stdint.h>

#include "util/err.h"

enum ds_sched_type {
	DS_SCHED_NONE = 0,           /* constant: the optimizer's lr */
	DS_SCHED_WARMUP_LR,
	DS_SCHED_WARMUP_DECAY_LR,
	DS_SCHED_WARMUP_COSINE_LR,
	DS_SCHED_ONE_CYCLE,
	DS_SCHED_LR_RANGE_TEST,
	DS_SCHED_NEOX                /* GPT-NeoX's AnnealingLR (megatron/learning_rates.py), start lr = org_lr */
};

enum ds_neox_decay { DS_NEOX_CONSTANT = 0, DS_NEOX_LINEAR, DS_NEOX_COSINE, DS_NEOX_EXPONENTIAL };

enum ds_warmup_type { DS_WARMUP_LOG = 0, DS_WARMUP_LINEAR };

/* Scheduler params; ds_sched_params_init fills DeepSpeed's defaults. */
struct ds_sched_params {
	enum ds_sched_type type;
	int64_t last_batch_iteration;      /* -1: start from the beginning (all types) */
	/* WarmupLR, WarmupDecayLR, WarmupCosineLR */
	double warmup_min_lr;              /* 0 */
	double warmup_max_lr;              /* 0.001 */
	int64_t warmup_num_steps;          /* 1000 */
	enum ds_warmup_type warmup_type;   /* log */
	int64_t total_num_steps;           /* required for Decay/Cosine; -1 = not given */
	double warmup_min_ratio;           /* cosine: 0 */
	double cos_min_ratio;              /* cosine: 1e-4 */
	/* OneCycle */
	double cycle_min_lr, cycle_max_lr; /* required; -1 = not given */
	double decay_lr_rate;              /* 0 */
	int64_t cycle_first_step_size;     /* 2000 */
	int64_t cycle_second_step_size;    /* -1: same as the first */
	int64_t cycle_first_stair_count;   /* 0; only 0 accepted (no effect in DeepSpeed) */
	int64_t cycle_second_stair_count;  /* -1 (None); only 0 accepted */
	int64_t decay_step_size;           /* 0 */
	int cycle_momentum;                /* 1 */
	double cycle_min_mom;              /* 0.8 */
	double cycle_max_mom;              /* 0.9 */
	double decay_mom_rate;             /* 0 */
	/* LRRangeTest */
	double lr_range_test_min_lr;       /* 1e-3 */
	int64_t lr_range_test_step_size;   /* 2000 */
	double lr_range_test_step_rate;    /* 1.0 */
	int lr_range_test_staircase;       /* 0 */
	/* GPT-NeoX AnnealingLR: at k = num_iters, lr = org_lr * max(1, k) / W
	 * while k <= W (warmup_iter, fractional: warmup x decay_iters), then
	 * decays over E - W (end_iter) by decay_style, never below min_lr */
	enum ds_neox_decay neox_decay;     /* linear */
	double neox_warmup_iter;           /* 0 */
	int64_t neox_end_iter;             /* > 0 */
	double neox_min_lr;                /* 0 */
};

/* Fill p with the defaults of type. */
void ds_sched_params_init(struct ds_sched_params *p, enum ds_sched_type type);

/* "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"
 * (any case) to *type.  Returns 0 or DS_EINVAL listing the valid names. */
int ds_sched_type_from_name(const char *name, enum ds_sched_type *type, struct ds_err *err);
/* DeepSpeed's spelling of type ("WarmupLR", ...; "none" for DS_SCHED_NONE). */
const char *ds_sched_type_name(enum ds_sched_type type);

/* Set a numeric (or boolean 0/1) scheduler param by its config name for
 * p->type.  Returns 0 or DS_EINVAL naming the key (unknown for this
 * scheduler, not integral where an integer is needed, out of range). */
int ds_sched_param_set(struct ds_sched_params *p, const char *name, double val, struct ds_err *err);
/* Set a string param: only "warmup_type" ("log" or "linear").  DeepSpeed
 * warns and falls back to log on other values; dstk rejects them. */
int ds_sched_param_set_str(struct ds_sched_params *p, const char *name, const char *val, struct ds_err *err);

/* Check required keys and ranges (total_num_steps for Decay/Cosine,
 * cycle_min_lr/cycle_max_lr for OneCycle, positive step sizes).
 * Returns 0 or DS_EINVAL naming the key. */
int ds_sched_params_check(const struct ds_sched_params *p, struct ds_err *err);

/* What a schedule sets on the optimizer at iteration k. */
struct ds_sched_value {
	double lr;
	int has_betas;       /* OneCycle with cycle_momentum: set betas too */
	double beta1, beta2; /* beta2 is always 0.99 then, as in DeepSpeed */
};

/* The value at iteration k (>= -1; -1 is construction).  org_lr is the
 * optimizer's configured lr (used by NONE and WarmupCosineLR).  DeepSpeed
 * applies OneCycle's betas only to optimizers that have betas (Adam, Lamb);
 * the caller does the same. */
void ds_sched_value(const struct ds_sched_params *p, double org_lr, int64_t k, struct ds_sched_value *out);

/* Shorthand for ds_sched_value(...).lr. */
double ds_sched_lr(const struct ds_sched_params *p, double org_lr, int64_t k);

/* What the i-th non-skipped optimizer step (i >= 1) uses, with DeepSpeed's
 * timing: k = last_batch_iteration + i - 1.  With last_batch_iteration
 * != -1 DeepSpeed's constructors leave the optimizer alone, so step 1 then
 * runs with org_lr and the optimizer's own betas (has_betas 0). */
void ds_sched_step_value(const struct ds_sched_params *p, double org_lr, int64_t i, struct ds_sched_value *out);

#endif
