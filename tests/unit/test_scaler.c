/* test_scaler.c - lib/optim loss scaler driven by injected overflow
 * patterns: spec/deepspeed-training.md cases 20-24 (DynamicLossScaler vs
 * FP16_Optimizer timings, ZeRO's 2^32 default, the error at the minimum),
 * plus window doubling with hysteresis reset, the minimum clamp, static and
 * bf16 scalers, and the config-to-scaler rules.
 */
#include "unit.h"

#include <string.h>

#include "optim/scaler.h"

/* Feed pattern ("O" overflow, "N" not) and check the scale after each call. */
static void run(struct ds_scaler *s, const char *pattern, const double *want)
{
	struct ds_err err = DS_ERR_INIT;
	for (int i = 0; pattern[i]; i++) {
		assert_int_equal(ds_scaler_update(s, pattern[i] == 'O', &err), 0);
		assert_float_equal(s->cur_scale, want[i], 0);
	}
}

/* case 20 */
static void test_case20_dynamic_hysteresis(void **state)
{
	struct ds_scaler s;
	ds_scaler_init_dynamic(&s, 16, 2, 2, 0, 1, 1);
	run(&s, "OONNONO", (const double[]){ 16, 8, 8, 16, 16, 16, 8 });
	assert_int_equal(s.cur_iter, 7);
	assert_int_equal(s.last_overflow_iter, 6);
	ds_scaler_init_dynamic(&s, 16, 2, 2, 1, 1, 1);
	run(&s, "OONNONO", (const double[]){ 16, 8, 8, 16, 16, 16, 16 });
}

/* case 21 */
static void test_case21_fp16_optimizer(void **state)
{
	struct ds_scaler s;
	ds_scaler_init_fp16_opt(&s, 16, 2, 1);
	run(&s, "OONNONO", (const double[]){ 8, 4, 4, 4, 2, 2, 1 });
}

/* case 22: window 3, no overflows: DynamicLossScaler doubles on calls 3, 6,
 * 9; FP16_Optimizer on calls 4, 7, 10 */
static void test_case22_growth_timing(void **state)
{
	struct ds_scaler s;
	ds_scaler_init_dynamic(&s, 1, 3, 1, 0, 1, 1);
	run(&s, "NNNNNNNNNN", (const double[]){ 1, 1, 2, 2, 2, 4, 4, 4, 8, 8 });
	ds_scaler_init_fp16_opt(&s, 1, 3, 1);
	run(&s, "NNNNNNNNNN", (const double[]){ 1, 1, 1, 2, 2, 2, 4, 4, 4, 8 });
	assert_float_equal(s.prev_scale, 4, 0);
}

/* case 23: which fp16 keys are given decides the ZeRO defaults */
static void test_case23_zero_defaults(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_fp16_cfg c;
	struct ds_scaler s;
	ds_fp16_cfg_init(&c);
	assert_int_equal(ds_scaler_init_cfg(&s, 1, DS_SCALER_PATH_ZERO, &c, &err), 0);
	assert_int_equal(s.kind, DS_SCALER_DYNAMIC);
	assert_float_equal(s.cur_scale, 4294967296.0, 0);
	assert_int_equal(s.delayed_shift, 1);
	assert_int_equal(s.window, 1000);
	assert_float_equal(s.min_scale, 1, 0);
	assert_true(s.raise_error_at_min_scale);

	c.hysteresis = 2;
	c.given = DS_FP16_GIVEN_HYSTERESIS;
	assert_int_equal(ds_scaler_init_cfg(&s, 1, DS_SCALER_PATH_ZERO, &c, &err), 0);
	assert_float_equal(s.cur_scale, 65536.0, 0);
	assert_int_equal(s.delayed_shift, 2);
	assert_int_equal(s.cur_hysteresis, 2);

	/* any one key is enough; the others take the config defaults */
	ds_fp16_cfg_init(&c);
	c.loss_scale_window = 500;
	c.given = DS_FP16_GIVEN_LOSS_SCALE_WINDOW;
	assert_int_equal(ds_scaler_init_cfg(&s, 1, DS_SCALER_PATH_ZERO, &c, &err), 0);
	assert_float_equal(s.cur_scale, 65536.0, 0);
	assert_int_equal(s.window, 500);
	assert_int_equal(s.delayed_shift, 2);

	/* non-ZeRO: FP16_Optimizer 2^power/1000/1, unfused 2^16/1000/0.25 */
	ds_fp16_cfg_init(&c);
	assert_int_equal(ds_scaler_init_cfg(&s, 1, DS_SCALER_PATH_FUSED, &c, &err), 0);
	assert_int_equal(s.kind, DS_SCALER_FP16_OPT);
	assert_float_equal(s.cur_scale, 65536.0, 0);
	assert_float_equal(s.min_scale, 1, 0);
	assert_int_equal(ds_scaler_init_cfg(&s, 1, DS_SCALER_PATH_UNFUSED, &c, &err), 0);
	assert_float_equal(s.cur_scale, 65536.0, 0);
	assert_float_equal(s.min_scale, 0.25, 0);
	c.initial_scale_power = 12;
	c.min_loss_scale = 2;
	c.given = DS_FP16_GIVEN_INITIAL_SCALE_POWER | DS_FP16_GIVEN_MIN_LOSS_SCALE;
	assert_int_equal(ds_scaler_init_cfg(&s, 1, DS_SCALER_PATH_UNFUSED, &c, &err), 0);
	assert_float_equal(s.cur_scale, 4096.0, 0);
	assert_float_equal(s.min_scale, 2, 0);

	/* static and bf16/fp32 */
	ds_fp16_cfg_init(&c);
	c.loss_scale = 128;
	assert_int_equal(ds_scaler_init_cfg(&s, 1, DS_SCALER_PATH_ZERO, &c, &err), 0);
	assert_int_equal(s.kind, DS_SCALER_STATIC);
	run(&s, "ONO", (const double[]){ 128, 128, 128 });
	assert_int_equal(ds_scaler_init_cfg(&s, 0, DS_SCALER_PATH_ZERO, &c, &err), 0);
	assert_int_equal(s.kind, DS_SCALER_NONE);
	run(&s, "ONNO", (const double[]){ 1, 1, 1, 1 });

	/* bad values */
	c.loss_scale = -1;
	assert_int_equal(ds_scaler_init_cfg(&s, 1, DS_SCALER_PATH_ZERO, &c, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "loss_scale"));
	ds_fp16_cfg_init(&c);
	c.hysteresis = 0;
	c.given = DS_FP16_GIVEN_HYSTERESIS;
	assert_int_equal(ds_scaler_init_cfg(&s, 1, DS_SCALER_PATH_ZERO, &c, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "hysteresis"));
}

/* case 24: at min_scale 1 with hysteresis exhausted an overflow is an error;
 * the state is left as it was */
static void test_case24_error_at_min(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_scaler s;
	ds_scaler_init_dynamic(&s, 1, 1000, 1, 0, 1, 1);
	assert_int_equal(ds_scaler_update(&s, 1, &err), DS_EIO);
	assert_non_null(strstr(err.msg, "minimum"));
	assert_int_equal(ds_exit_code(err.code), 1);
	assert_float_equal(s.cur_scale, 1, 0);
	assert_int_equal(s.cur_iter, 0);

	/* with hysteresis 2 the first overflow only spends hysteresis */
	ds_scaler_init_dynamic(&s, 1, 1000, 2, 0, 1, 1);
	assert_int_equal(ds_scaler_update(&s, 1, &err), 0);
	assert_int_equal(s.cur_hysteresis, 1);
	assert_int_equal(ds_scaler_update(&s, 1, &err), DS_EIO);

	/* raise_error_at_min_scale off: stays at the minimum */
	ds_scaler_init_dynamic(&s, 1, 1000, 1, 0, 1, 0);
	run(&s, "OO", (const double[]){ 1, 1 });

	/* FP16_Optimizer never fails at the minimum */
	ds_scaler_init_fp16_opt(&s, 1, 1000, 1);
	run(&s, "OOO", (const double[]){ 1, 1, 1 });
}

/* Halving stops at min_scale (not below), in both paths. */
static void test_min_clamp(void **state)
{
	struct ds_scaler s;
	ds_scaler_init_dynamic(&s, 8, 1000, 1, 0, 3, 1);
	run(&s, "OO", (const double[]){ 4, 3 });
	ds_scaler_init_fp16_opt(&s, 1, 1000, 0.25);
	run(&s, "OOO", (const double[]){ 0.5, 0.25, 0.25 });
}

/* Window doubling resets the hysteresis (non-consecutive), window 2,
 * hysteresis 3: iter 0 O spends one (hyst 2); iter 1 N: (1-0)%2 = 1, no
 * change; iter 2 N: (2-0)%2 = 0, doubles and resets hyst to 3; iters 3-5 O
 * spend 3 -> 2 -> 1, then halve; iter 6 N: (6-5)%2 = 1 keeps hyst 1;
 * iter 7 N: (7-5)%2 = 0 doubles and resets it. */
static void test_window_resets_hysteresis(void **state)
{
	struct ds_scaler s;
	ds_scaler_init_dynamic(&s, 64, 2, 3, 0, 1, 1);
	run(&s, "ONN", (const double[]){ 64, 64, 128 });
	assert_int_equal(s.cur_hysteresis, 3);
	run(&s, "OOO", (const double[]){ 128, 128, 64 });
	assert_int_equal(s.cur_hysteresis, 1);
	run(&s, "N", (const double[]){ 64 });
	assert_int_equal(s.cur_hysteresis, 1);
	run(&s, "N", (const double[]){ 128 });
	assert_int_equal(s.cur_hysteresis, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_case20_dynamic_hysteresis),
		cmocka_unit_test(test_case21_fp16_optimizer),
		cmocka_unit_test(test_case22_growth_timing),
		cmocka_unit_test(test_case23_zero_defaults),
		cmocka_unit_test(test_case24_error_at_min),
		cmocka_unit_test(test_min_clamp),
		cmocka_unit_test(test_window_resets_hysteresis),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
