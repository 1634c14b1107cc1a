/* scaler.c - DynamicLossScaler (ZeRO) and FP16_Optimizer loss-scale
 * updates, static and no scaling, and the construction rules that turn the
 * fp16 config section into one of them (see scaler.h).
 */
#include "optim/scaler.h"

#include <math.h>
#include <string.h>

static void base(struct ds_scaler *s, enum ds_scaler_kind kind, double scale)
{
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->cur_scale = scale;
	s->prev_scale = scale;
	s->min_scale = 1.0;
	s->scale_factor = 2.0;
	s->window = 1000;
	s->delayed_shift = 1;
	s->cur_hysteresis = 1;
	s->cur_iter = 0;
	s->last_overflow_iter = -1;
}

void ds_scaler_init_none(struct ds_scaler *s)
{
	base(s, DS_SCALER_NONE, 1.0);
}

void ds_scaler_init_static(struct ds_scaler *s, double scale)
{
	base(s, DS_SCALER_STATIC, scale);
}

void ds_scaler_init_dynamic(struct ds_scaler *s, double init_scale, int64_t window, int hysteresis,
			    int consecutive_hysteresis, double min_scale, int raise_error_at_min_scale)
{
	base(s, DS_SCALER_DYNAMIC, init_scale);
	s->window = window;
	s->delayed_shift = hysteresis;
	s->cur_hysteresis = hysteresis;
	s->consecutive_hysteresis = consecutive_hysteresis;
	s->min_scale = min_scale;
	s->raise_error_at_min_scale = raise_error_at_min_scale;
}

void ds_scaler_init_fp16_opt(struct ds_scaler *s, double init_scale, int64_t window, double min_scale)
{
	base(s, DS_SCALER_FP16_OPT, init_scale);
	s->window = window;
	s->min_scale = min_scale;
}

int ds_scaler_update(struct ds_scaler *s, int overflow, struct ds_err *err)
{
	double prev = s->cur_scale;
	switch (s->kind) {
	case DS_SCALER_NONE:
	case DS_SCALER_STATIC:
		break;
	case DS_SCALER_DYNAMIC:
		if (overflow) {
			if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
				if (s->cur_scale == s->min_scale && s->raise_error_at_min_scale)
					return ds_err_set(err, DS_EIO,
							  "fp16: gradient overflow with the loss scale already at its "
							  "minimum %g (Current loss scale already at minimum - cannot "
							  "decrease scale anymore); lower fp16.min_loss_scale, check the "
							  "model for inf/nan, or train in bf16", s->min_scale);
				s->cur_scale = fmax(s->cur_scale / s->scale_factor, s->min_scale);
			} else {
				s->cur_hysteresis--;
			}
			s->last_overflow_iter = s->cur_iter;
		} else {
			if (s->consecutive_hysteresis)
				s->cur_hysteresis = s->delayed_shift;
			if ((s->cur_iter - s->last_overflow_iter) % s->window == 0) {
				if (!s->consecutive_hysteresis)
					s->cur_hysteresis = s->delayed_shift;
				s->cur_scale *= s->scale_factor;
			}
		}
		break;
	case DS_SCALER_FP16_OPT:
		if (overflow) {
			s->cur_scale = fmax(s->cur_scale / s->scale_factor, s->min_scale);
			s->last_overflow_iter = s->cur_iter;
		} else {
			int64_t stable = s->cur_iter - s->last_overflow_iter - 1;
			if (stable > 0 && stable % s->window == 0)
				s->cur_scale *= s->scale_factor;
		}
		break;
	}
	s->prev_scale = prev;
	s->cur_iter++;
	return 0;
}

void ds_fp16_cfg_init(struct ds_fp16_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->loss_scale = 0.0;
	c->initial_scale_power = 16;
	c->loss_scale_window = 1000;
	c->hysteresis = 2;
	c->consecutive_hysteresis = 0;
	c->min_loss_scale = 1.0;
}

int ds_scaler_init_cfg(struct ds_scaler *s, int fp16_enabled, enum ds_scaler_path path,
		       const struct ds_fp16_cfg *c, struct ds_err *err)
{
	ds_scaler_init_none(s);
	if (!fp16_enabled)
		return 0;
	if (!(c->loss_scale >= 0))
		return ds_err_set(err, DS_EINVAL, "fp16.loss_scale: must be >= 0 (0 = dynamic), got %g",
				  c->loss_scale);
	if (c->loss_scale > 0) {
		ds_scaler_init_static(s, c->loss_scale);
		return 0;
	}
	if (c->initial_scale_power < 0 || c->initial_scale_power > 63)
		return ds_err_set(err, DS_EINVAL, "fp16.initial_scale_power: must be in [0, 63], got %d",
				  c->initial_scale_power);
	if (c->loss_scale_window < 1)
		return ds_err_set(err, DS_EINVAL, "fp16.loss_scale_window: must be >= 1, got %lld",
				  (long long)c->loss_scale_window);
	if (c->hysteresis < 1)
		return ds_err_set(err, DS_EINVAL, "fp16.hysteresis: must be >= 1, got %d", c->hysteresis);
	if (!(c->min_loss_scale > 0))
		return ds_err_set(err, DS_EINVAL, "fp16.min_loss_scale: must be > 0, got %g", c->min_loss_scale);
	int args = c->given != 0;   /* dynamic_loss_args is built only then */
	double init = ldexp(1.0, c->initial_scale_power);
	switch (path) {
	case DS_SCALER_PATH_ZERO:
		if (args)
			ds_scaler_init_dynamic(s, init, c->loss_scale_window, c->hysteresis,
					       c->consecutive_hysteresis, c->min_loss_scale, 1);
		else
			ds_scaler_init_dynamic(s, ldexp(1.0, 32), 1000, 1, 0, 1.0, 1);
		return 0;
	case DS_SCALER_PATH_FUSED:
		if (args)
			ds_scaler_init_fp16_opt(s, init, c->loss_scale_window, c->min_loss_scale);
		else
			ds_scaler_init_fp16_opt(s, init, 1000, 1.0);
		return 0;
	case DS_SCALER_PATH_UNFUSED:
		if (args)
			ds_scaler_init_fp16_opt(s, init, c->loss_scale_window, c->min_loss_scale);
		else
			ds_scaler_init_fp16_opt(s, ldexp(1.0, 16), 1000, 0.25);
		return 0;
	}
	return ds_err_set(err, DS_EINVAL, "fp16: invalid scaler path %d", (int)path);
}
