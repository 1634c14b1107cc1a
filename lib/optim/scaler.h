/* scaler.h - the fp16 loss scaler as a small state machine with DeepSpeed's
 * two dynamic code paths (spec/deepspeed-training.md §5):
 *   DS_SCALER_DYNAMIC   DynamicLossScaler, used by ZeRO stages 1-3:
 *                       hysteresis, grows when (cur_iter - last_overflow)
 *                       % window == 0, fails at the minimum scale;
 *   DS_SCALER_FP16_OPT  FP16_Optimizer / FP16_UnfusedOptimizer (no ZeRO):
 *                       no hysteresis, grows one call later (stable
 *                       interval cur - last - 1 > 0 and % window == 0),
 *                       never fails at the minimum;
 * plus a static scale (fp16 loss_scale > 0) and none (bf16/fp32: scale 1).
 *
 * When to call: once per optimizer step (after gradient accumulation),
 * with the overflow flag already reduced (MAX) across all ranks, and BEFORE
 * unscaling, as every ZeRO stage and FP16_Optimizer do.  So on a step where
 * the scale grows, the gradients (scaled by the old scale, prev_scale) are
 * divided by the new, doubled cur_scale; ZeRO 1/2 report the grad norm with
 * prev_scale.  On overflow the caller skips the step, zeroes the grads and
 * does not step the LR scheduler.  DeepSpeed's ZeRO path never reports an
 * overflow with a static scale (LossScaler.has_overflow is False).
 */
#ifndef DS_OPTIM_SCALER_H
#define DS_OPTIM_SCALER_H

#include <stdint.h>

#include "util/err.h"

enum ds_scaler_kind {
	DS_SCALER_NONE = 0,   /* bf16 or fp32: scale 1, no dynamics */
	DS_SCALER_STATIC,     /* fp16 with loss_scale > 0 */
	DS_SCALER_DYNAMIC,    /* DynamicLossScaler (ZeRO) */
	DS_SCALER_FP16_OPT    /* FP16_Optimizer / FP16_UnfusedOptimizer */
};

/* The state; everything a checkpoint must keep is here. */
struct ds_scaler {
	enum ds_scaler_kind kind;
	double cur_scale;
	double prev_scale;          /* cur_scale before the last update */
	double min_scale;
	double scale_factor;        /* 2 */
	int64_t window;             /* scale_window */
	int delayed_shift;          /* hysteresis (DYNAMIC only) */
	int cur_hysteresis;
	int consecutive_hysteresis;
	int raise_error_at_min_scale;
	int64_t cur_iter;           /* calls to update so far */
	int64_t last_overflow_iter; /* -1 before the first overflow */
};

/* Constructors with the given values (scale_factor 2, cur_iter 0,
 * last_overflow_iter -1, cur_hysteresis = hysteresis). */
void ds_scaler_init_none(struct ds_scaler *s);
void ds_scaler_init_static(struct ds_scaler *s, double scale);
void ds_scaler_init_dynamic(struct ds_scaler *s, double init_scale, int64_t window, int hysteresis,
			    int consecutive_hysteresis, double min_scale, int raise_error_at_min_scale);
void ds_scaler_init_fp16_opt(struct ds_scaler *s, double init_scale, int64_t window, double min_scale);

/* Record one step's overflow flag and update the scale (see the top).
 * Returns 0; for DS_SCALER_DYNAMIC at the minimum scale with
 * raise_error_at_min_scale, returns DS_EIO (exit 1) with a message that
 * the loss scale reached the minimum, and leaves the state unchanged. */
int ds_scaler_update(struct ds_scaler *s, int overflow, struct ds_err *err);

/* --- from the fp16/bf16 config sections to a scaler --- */

/* Bits of struct ds_fp16_cfg.given: which fp16 keys the config named. */
enum {
	DS_FP16_GIVEN_INITIAL_SCALE_POWER = 1u << 0,
	DS_FP16_GIVEN_LOSS_SCALE_WINDOW = 1u << 1,
	DS_FP16_GIVEN_MIN_LOSS_SCALE = 1u << 2,
	DS_FP16_GIVEN_HYSTERESIS = 1u << 3,
	DS_FP16_GIVEN_CONSECUTIVE_HYSTERESIS = 1u << 4
};

/* The fp16 section as configured (ds_fp16_cfg_init: the config defaults). */
struct ds_fp16_cfg {
	double loss_scale;           /* 0: dynamic */
	int initial_scale_power;     /* 16 */
	int64_t loss_scale_window;   /* 1000 */
	int hysteresis;              /* 2 */
	int consecutive_hysteresis;  /* 0 */
	double min_loss_scale;       /* 1 */
	unsigned given;              /* DS_FP16_GIVEN_* of the keys present */
};

void ds_fp16_cfg_init(struct ds_fp16_cfg *c);

/* Which wrapper holds the scaler. */
enum ds_scaler_path {
	DS_SCALER_PATH_ZERO = 0,     /* ZeRO stage 1-3: DynamicLossScaler */
	DS_SCALER_PATH_FUSED,        /* no ZeRO, FusedAdam, OneBitAdam, ZeroOneAdam: FP16_Optimizer */
	DS_SCALER_PATH_UNFUSED       /* no ZeRO, other optimizers: FP16_UnfusedOptimizer */
};

/* The scaler DeepSpeed builds for fp16 on path (or DS_SCALER_NONE when fp16
 * is off: bf16/fp32).  Under ZeRO with none of the dynamic keys given it is
 * DynamicLossScaler's constructor defaults: 2^32, window 1000, min 1,
 * hysteresis 1 (spec case 23); with any of them, 2^initial_scale_power and
 * the config values.  Non-ZeRO paths start at 2^initial_scale_power; with
 * no dynamic keys the fused path uses window 1000/min 1 and the unfused
 * path 2^16/window 1000/min 0.25.  Returns 0 or DS_EINVAL for values out of
 * range (negative loss_scale, window < 1, hysteresis < 1, ...). */
int ds_scaler_init_cfg(struct ds_scaler *s, int fp16_enabled, enum ds_scaler_path path,
		       const struct ds_fp16_cfg *c, struct ds_err *err);

#endif
