/* test_sched.c - lib/optim LR schedules against every hand-computed value
 * of spec/deepspeed-training.md §4 and cases 18-19 (construction values),
 * OneCycle momentum cycling and decay, the W = max(2, warmup_num_steps)
 * rule, names, set-by-name and the checks.
 */
#include "unit.h"

#include <math.h>
#include <string.h>

#include "optim/sched.h"

/* the spec prints 5 significant digits: compare to that */
#define near5(a, b) assert_float_equal((a), (b), fabs(b) * 5e-5 + 1e-15)

static struct ds_sched_params mk(enum ds_sched_type t)
{
	struct ds_sched_params p;
	ds_sched_params_init(&p, t);
	return p;
}

static void test_warmup_log(void **state)
{
	struct ds_sched_params p = mk(DS_SCHED_WARMUP_LR);   /* defaults: 0, 1e-3, 1000, log */
	assert_float_equal(ds_sched_lr(&p, 0.5, -1), 0.0, 0);  /* case 19: min_lr */
	assert_float_equal(ds_sched_lr(&p, 0.5, 0), 0.0, 0);
	near5(ds_sched_lr(&p, 0.5, 9), 3.3333e-4);
	near5(ds_sched_lr(&p, 0.5, 99), 6.6667e-4);
	near5(ds_sched_lr(&p, 0.5, 999), 1e-3);
	assert_float_equal(ds_sched_lr(&p, 0.5, 5000), 1e-3, 1e-18);
	/* case 19 with a non-zero minimum */
	p.warmup_min_lr = 1e-5;
	assert_float_equal(ds_sched_lr(&p, 0.5, -1), 1e-5, 0);
}

static void test_warmup_linear(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_sched_params p = mk(DS_SCHED_WARMUP_LR);
	assert_int_equal(ds_sched_param_set(&p, "warmup_max_lr", 0.1, &err), 0);
	assert_int_equal(ds_sched_param_set(&p, "warmup_num_steps", 10, &err), 0);
	assert_int_equal(ds_sched_param_set_str(&p, "warmup_type", "linear", &err), 0);
	assert_float_equal(ds_sched_lr(&p, 0, 5), 0.05, 1e-15);
	assert_float_equal(ds_sched_lr(&p, 0, 9), 0.09, 1e-15);
	assert_float_equal(ds_sched_lr(&p, 0, 10), 0.1, 1e-15);
	/* W = max(2, warmup_num_steps): 1 step of warmup behaves as 2 */
	p.warmup_num_steps = 1;
	assert_float_equal(ds_sched_lr(&p, 0, 1), 0.05, 1e-15);
	assert_float_equal(ds_sched_lr(&p, 0, 2), 0.1, 1e-15);
}

static void test_warmup_decay(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_sched_params p = mk(DS_SCHED_WARMUP_DECAY_LR);
	assert_int_equal(ds_sched_params_check(&p, &err), DS_EINVAL);   /* total_num_steps required */
	assert_non_null(strstr(err.msg, "total_num_steps"));
	p.warmup_max_lr = 0.1;
	p.warmup_num_steps = 10;
	p.warmup_type = DS_WARMUP_LINEAR;
	p.total_num_steps = 100;
	assert_int_equal(ds_sched_params_check(&p, &err), 0);
	assert_float_equal(ds_sched_lr(&p, 0, -1), 0.0, 0);
	assert_float_equal(ds_sched_lr(&p, 0, 5), 0.05, 1e-15);
	assert_float_equal(ds_sched_lr(&p, 0, 10), 0.1, 1e-15);
	assert_float_equal(ds_sched_lr(&p, 0, 55), 0.05, 1e-15);
	assert_float_equal(ds_sched_lr(&p, 0, 100), 0.0, 0);
	assert_float_equal(ds_sched_lr(&p, 0, 150), 0.0, 0);
}

static void test_warmup_cosine(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_sched_params p = mk(DS_SCHED_WARMUP_COSINE_LR);
	assert_float_equal(p.cos_min_ratio, 1e-4, 0);
	p.warmup_num_steps = 10;
	p.total_num_steps = 110;
	p.warmup_type = DS_WARMUP_LINEAR;
	assert_int_equal(ds_sched_params_check(&p, &err), 0);
	const double org = 0.1;
	assert_float_equal(ds_sched_lr(&p, org, -1), 0.0, 0);   /* case 19 */
	assert_float_equal(ds_sched_lr(&p, org, 5), 0.05, 1e-15);
	near5(ds_sched_lr(&p, org, 10), 0.0999753);
	near5(ds_sched_lr(&p, org, 59), 0.050005);
	near5(ds_sched_lr(&p, org, 109), 1e-5);
	/* past total_num_steps it stays at the floor (unclamped, k=160 would
	 * give cos(1.5 pi) -> 0.050005 again) */
	near5(ds_sched_lr(&p, org, 160), 1e-5);
	near5(ds_sched_lr(&p, org, 5000), 1e-5);
	/* the lr scales with the optimizer's lr */
	near5(ds_sched_lr(&p, 2 * org, 59), 0.10001);
	/* warmup_min_ratio lifts the start of the warmup */
	p.warmup_min_ratio = 0.5;
	assert_float_equal(ds_sched_lr(&p, org, 0), 0.05, 1e-15);
	p.total_num_steps = 10;
	assert_int_equal(ds_sched_params_check(&p, &err), DS_EINVAL);
}

static void test_one_cycle(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_sched_params p = mk(DS_SCHED_ONE_CYCLE);
	assert_int_equal(ds_sched_params_check(&p, &err), DS_EINVAL);   /* min/max lr required */
	assert_int_equal(ds_sched_param_set(&p, "cycle_min_lr", 0.01, &err), 0);
	assert_int_equal(ds_sched_param_set(&p, "cycle_max_lr", 0.1, &err), 0);
	assert_int_equal(ds_sched_param_set(&p, "cycle_first_step_size", 10, &err), 0);
	assert_int_equal(ds_sched_params_check(&p, &err), 0);
	struct ds_sched_value v;
	/* construction: lr = min, betas = (cycle_min_mom, 0.99) */
	ds_sched_value(&p, 1.0, -1, &v);
	assert_float_equal(v.lr, 0.01, 0);
	assert_true(v.has_betas);
	assert_float_equal(v.beta1, 0.8, 0);
	assert_float_equal(v.beta2, 0.99, 0);
	ds_sched_value(&p, 1.0, 0, &v);
	assert_float_equal(v.lr, 0.019, 1e-12);
	assert_float_equal(v.beta1, 0.89, 1e-12);
	assert_float_equal(v.beta2, 0.99, 0);
	ds_sched_value(&p, 1.0, 9, &v);
	assert_float_equal(v.lr, 0.1, 1e-12);
	assert_float_equal(v.beta1, 0.8, 1e-12);
	assert_float_equal(ds_sched_lr(&p, 1.0, 14), 0.055, 1e-12);
	assert_float_equal(ds_sched_lr(&p, 1.0, 18), 0.019, 1e-12);
	ds_sched_value(&p, 1.0, 19, &v);
	assert_float_equal(v.lr, 0.01, 1e-12);
	assert_float_equal(v.beta1, 0.9, 1e-12);
	/* no decay configured: stays at min lr and max momentum */
	ds_sched_value(&p, 1.0, 25, &v);
	assert_float_equal(v.lr, 0.01, 0);
	assert_float_equal(v.beta1, 0.9, 0);
	p.decay_lr_rate = 0.5;
	p.decay_step_size = 10;
	near5(ds_sched_lr(&p, 1.0, 20), 0.0095238);
	near5(ds_sched_lr(&p, 1.0, 29), 0.0066667);
	/* momentum decay multiplies: d=10 -> 0.9 * (1 + 0.1*1) = 0.99 */
	p.decay_mom_rate = 0.1;
	ds_sched_value(&p, 1.0, 29, &v);
	assert_float_equal(v.beta1, 0.99, 1e-12);
	/* stair counts do nothing in DeepSpeed: 0 is accepted, others rejected */
	assert_int_equal(ds_sched_param_set(&p, "cycle_first_stair_count", 0, &err), 0);
	assert_int_equal(ds_sched_param_set(&p, "cycle_second_stair_count", 3, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "cycle_second_stair_count"));
	/* an asymmetric cycle: first 10 up, second 30 down; k=24: b=25, x=0.625,
	 * scale = (0.625-1)/(0.25-1) = 0.5 */
	p.cycle_second_step_size = 30;
	assert_float_equal(ds_sched_lr(&p, 1.0, 24), 0.055, 1e-12);
	/* momentum cycling off */
	p.cycle_momentum = 0;
	ds_sched_value(&p, 1.0, 0, &v);
	assert_false(v.has_betas);
}

static void test_lr_range_test(void **state)
{
	struct ds_sched_params p = mk(DS_SCHED_LR_RANGE_TEST);
	p.lr_range_test_step_size = 10;
	assert_float_equal(ds_sched_lr(&p, 1, -1), 1e-3, 0);
	assert_float_equal(ds_sched_lr(&p, 1, 0), 1.1e-3, 1e-15);
	assert_float_equal(ds_sched_lr(&p, 1, 9), 2e-3, 1e-15);
	assert_float_equal(ds_sched_lr(&p, 1, 19), 3e-3, 1e-15);
	p.lr_range_test_staircase = 1;
	for (int k = 0; k <= 8; k++)
		assert_float_equal(ds_sched_lr(&p, 1, k), 1e-3, 1e-15);
	for (int k = 9; k <= 18; k++)
		assert_float_equal(ds_sched_lr(&p, 1, k), 2e-3, 1e-15);
	assert_float_equal(ds_sched_lr(&p, 1, 19), 3e-3, 1e-15);
}

static void test_none(void **state)
{
	struct ds_sched_params p = mk(DS_SCHED_NONE);
	assert_float_equal(ds_sched_lr(&p, 3e-4, -1), 3e-4, 0);
	assert_float_equal(ds_sched_lr(&p, 3e-4, 12345), 3e-4, 0);
}

/* The lr of the i-th non-skipped optimizer step: construction value first,
 * then k = i - 2; with last_batch_iteration L, org_lr first, then L + i - 1. */
static void test_step_timing(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_sched_params p = mk(DS_SCHED_WARMUP_LR);
	p.warmup_max_lr = 0.1;
	p.warmup_num_steps = 10;
	p.warmup_type = DS_WARMUP_LINEAR;
	struct ds_sched_value v;
	ds_sched_step_value(&p, 0.5, 1, &v);
	assert_float_equal(v.lr, 0.0, 0);      /* construction: min lr */
	ds_sched_step_value(&p, 0.5, 2, &v);
	assert_float_equal(v.lr, 0.0, 0);      /* k = 0 */
	ds_sched_step_value(&p, 0.5, 7, &v);
	assert_float_equal(v.lr, 0.05, 1e-15); /* k = 5 */
	assert_int_equal(ds_sched_param_set(&p, "last_batch_iteration", 9, &err), 0);
	ds_sched_step_value(&p, 0.5, 1, &v);
	assert_float_equal(v.lr, 0.5, 0);      /* DeepSpeed leaves the optimizer's lr */
	ds_sched_step_value(&p, 0.5, 2, &v);
	assert_float_equal(v.lr, 0.1, 1e-15);  /* k = 10 */
	p.last_batch_iteration = -2;
	assert_int_equal(ds_sched_params_check(&p, &err), DS_EINVAL);

	struct ds_sched_params oc = mk(DS_SCHED_ONE_CYCLE);
	oc.cycle_min_lr = 0.01;
	oc.cycle_max_lr = 0.1;
	oc.cycle_first_step_size = 10;
	ds_sched_step_value(&oc, 1.0, 1, &v);
	assert_true(v.has_betas);
	assert_float_equal(v.beta1, 0.8, 0);
	oc.last_batch_iteration = 4;
	ds_sched_step_value(&oc, 1.0, 1, &v);
	assert_false(v.has_betas);             /* betas untouched */
	ds_sched_step_value(&oc, 1.0, 11, &v);
	assert_float_equal(v.lr, 0.055, 1e-12); /* k = 4 + 11 - 1 = 14 */
}

static void test_names_and_set(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	enum ds_sched_type t;
	assert_int_equal(ds_sched_type_from_name("WarmupCosineLR", &t, &err), 0);
	assert_int_equal(t, DS_SCHED_WARMUP_COSINE_LR);
	assert_int_equal(ds_sched_type_from_name("onecycle", &t, &err), 0);
	assert_int_equal(t, DS_SCHED_ONE_CYCLE);
	assert_int_equal(ds_sched_type_from_name("CosineAnnealing", &t, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "CosineAnnealing"));
	assert_string_equal(ds_sched_type_name(DS_SCHED_LR_RANGE_TEST), "LRRangeTest");

	struct ds_sched_params p = mk(DS_SCHED_WARMUP_LR);
	assert_int_equal(ds_sched_param_set(&p, "total_num_steps", 10, &err), DS_EINVAL);  /* not WarmupLR's */
	assert_non_null(strstr(err.msg, "total_num_steps"));
	assert_int_equal(ds_sched_param_set(&p, "warmup_steps", 10, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "unknown parameter"));
	assert_int_equal(ds_sched_param_set(&p, "warmup_num_steps", 10.5, &err), DS_EINVAL);
	assert_int_equal(ds_sched_param_set(&p, "warmup_type", 1, &err), DS_EINVAL);
	assert_int_equal(ds_sched_param_set_str(&p, "warmup_type", "cosine", &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "cosine"));
	assert_int_equal(ds_sched_param_set_str(&p, "warmup_max_lr", "0.1", &err), DS_EINVAL);
	p = mk(DS_SCHED_LR_RANGE_TEST);
	assert_int_equal(ds_sched_param_set(&p, "lr_range_test_staircase", 1, &err), 0);
	assert_int_equal(p.lr_range_test_staircase, 1);
	assert_int_equal(ds_sched_param_set(&p, "lr_range_test_staircase", 2, &err), DS_EINVAL);
	p.lr_range_test_step_size = 0;
	assert_int_equal(ds_sched_params_check(&p, &err), DS_EINVAL);
}

/* GPT-NeoX's AnnealingLR (megatron/learning_rates.py), by hand: the i-th
 * optimizer step (k = i - 2) runs at num_iters i - 1, lr = start x max(1, n)
 * / W while n <= W, then decays over E - W, never below min_lr. */
static void test_neox(void **state)
{
	(void)state;
	struct ds_sched_params p;
	struct ds_sched_value v;
	ds_sched_params_init(&p, DS_SCHED_NEOX);
	p.neox_decay = DS_NEOX_COSINE;
	p.neox_warmup_iter = 2.0;
	p.neox_end_iter = 8;
	p.neox_min_lr = 1e-4;
	/* n = 0..7: 1e-3/2, 1e-3/2, 1e-3, then 1e-4 + 4.5e-4 (cos(pi m / 6) + 1) for m = 1..5 */
	const double cosv[8] = { 5e-4, 5e-4, 1e-3, 1e-4 + 4.5e-4 * (cos(M_PI / 6) + 1), 7.75e-4, 5.5e-4, 3.25e-4,
				 1e-4 + 4.5e-4 * (cos(5 * M_PI / 6) + 1) };
	for (int n = 0; n < 8; n++) {
		ds_sched_value(&p, 1e-3, n - 1, &v);
		assert_float_equal(v.lr, cosv[n], 1e-15);
	}
	/* past the end the cosine climbs back, clamped at min_lr only from below (NeoX's formula) */
	ds_sched_value(&p, 1e-3, 8 - 1, &v);
	assert_float_equal(v.lr, 1e-4, 1e-15);
	/* linear: start (E - W - m) / (E - W), floored at min_lr; fractional warmup 0.5 */
	p.neox_decay = DS_NEOX_LINEAR;
	p.neox_warmup_iter = 0.5;
	p.neox_end_iter = 10;
	p.neox_min_lr = 0.0;
	ds_sched_value(&p, 2.0, -1, &v); /* n = 0 <= 0.5: 2 x max(1, 0) / 0.5 */
	assert_float_equal(v.lr, 4.0, 1e-12);
	ds_sched_value(&p, 2.0, 2, &v); /* n = 3: m = 2.5, 2 x (9.5 - 2.5) / 9.5 */
	assert_float_equal(v.lr, 2.0 * 7.0 / 9.5, 1e-12);
	ds_sched_value(&p, 2.0, 20, &v); /* past the end: max(negative, 0) */
	assert_float_equal(v.lr, 0.0, 0);
	/* exponential: start exp(-0.693 m / (E - W)); no warmup */
	p.neox_decay = DS_NEOX_EXPONENTIAL;
	p.neox_warmup_iter = 0;
	p.neox_end_iter = 4;
	ds_sched_value(&p, 1.0, 3, &v); /* n = 4 */
	assert_float_equal(v.lr, exp(-0.693), 1e-12);
	/* constant: start, not below min_lr */
	p.neox_decay = DS_NEOX_CONSTANT;
	p.neox_min_lr = 0.5;
	ds_sched_value(&p, 0.25, 5, &v);
	assert_float_equal(v.lr, 0.5, 0);
	assert_string_equal(ds_sched_type_name(DS_SCHED_NEOX), "NeoX");
	/* warmup covering the whole schedule divides by zero in NeoX: refused */
	struct ds_err e = DS_ERR_INIT;
	p.neox_warmup_iter = 4.0;
	assert_int_equal(ds_sched_params_check(&p, &e), DS_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warmup_log),
		cmocka_unit_test(test_warmup_linear),
		cmocka_unit_test(test_warmup_decay),
		cmocka_unit_test(test_warmup_cosine),
		cmocka_unit_test(test_one_cycle),
		cmocka_unit_test(test_lr_range_test),
		cmocka_unit_test(test_none),
		cmocka_unit_test(test_step_timing),
		cmocka_unit_test(test_names_and_set),
		cmocka_unit_test(test_neox),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
