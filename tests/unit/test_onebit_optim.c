/* test_onebit_optim.c - OneBitAdam, ZeroOneAdam and OneBitLamb (lib/optim
 * /onebit.c) against DeepSpeed's rules, worked step by step:
 *  - at one rank each is its uncompressed counterpart until the freeze, bit
 *    for bit (AdamW or Lamb with bias correction off, shifted by the
 *    set-up step that updates nothing), and the engine is told to stop
 *    allreducing at DeepSpeed's step;
 *  - 0/1 Adam's variance steps and allreduce schedule (var_interval
 *    doubling every var_update_scaler variance updates), and its
 *    local-step schedule after var_freeze_step;
 *  - 1-bit Lamb's frozen trust ratio: the EMA of the warm-up ratios, the
 *    factor clamped to within factor_threshold of the last one;
 *  - with a stand-in exchange at 2 ranks: what crosses ranks, per unit
 *    (per tensor, fused, Lamb's padding kept), and 0/1 Adam's error buffers
 *    started afresh at the freeze.
 */
#include "unit.h"

#include <math.h>
#include <string.h>

#include "cpu/onebit.h"
#include "optim/onebit.h"
#include "optim/optim.h"

#define TOTAL 112
/* two tensors with a gap between them, as the engine's segment padding */
static const struct ds_onebit_tensor tens[2] = { { 0, 40 }, { 48, 61 } };

static float frand(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void fill(float *x, unsigned seed, float scale)
{
	memset(x, 0, TOTAL * sizeof(float));
	for (int k = 0; k < 2; k++)
		for (size_t i = tens[k].off; i < tens[k].off + tens[k].n; i++)
			x[i] = frand(&seed) * scale;
}

static struct ds_onebit *make(enum ds_optim_type type, int world, ds_onebit_allreduce_fn fn, void *ctx, int fused,
			      void (*tweak)(struct ds_optim_params *))
{
	struct ds_optim_params hp;
	struct ds_err err = DS_ERR_INIT;
	struct ds_onebit *o;
	ds_optim_params_init(&hp, type);
	hp.lr = 0.01;
	hp.weight_decay = 0.01;
	if (tweak)
		tweak(&hp);
	struct ds_onebit_comm x = { world, fn, ctx };
	assert_int_equal(ds_onebit_create(&o, &hp, TOTAL, tens, 2, fused, &x, &err), 0);
	return o;
}

static void freeze6(struct ds_optim_params *hp)
{
	hp->freeze_step = 6;
	hp->var_freeze_step = 6;
	hp->var_update_scaler = 1000;  /* variance updated every step until the freeze */
}

/* The uncompressed counterpart: AdamW (or Lamb) with bias correction off,
 * eps outside the square root, the same hyper-parameters. */
static struct ds_optim *counterpart(enum ds_optim_type type)
{
	struct ds_optim_params hp;
	struct ds_err err = DS_ERR_INIT;
	struct ds_optim *o;
	ds_optim_params_init(&hp, type);
	hp.lr = 0.01;
	hp.weight_decay = 0.01;
	hp.bias_correction = 0;
	assert_int_equal(ds_optim_create(&o, &hp, TOTAL, &err), 0);
	return o;
}

static const struct ds_range ranges[2] = { { 0, 40 }, { 48, 61 } };

/* At one rank, until the freeze: step 1 changes nothing, step k is the
 * counterpart's step k-1 on the same gradient, bit for bit; the engine is
 * told to stop allreducing after step 6 (1-bit: step >= freeze_step; 0/1:
 * step > var_freeze_step, so after step 7). */
static void check_warmup(enum ds_optim_type type, enum ds_optim_type ctype, int stop_after)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_onebit *o = make(type, 1, NULL, NULL, 0, freeze6);
	struct ds_optim *c = counterpart(ctype);
	float p[TOTAL], q[TOTAL], g[TOTAL], p0[TOTAL];
	fill(p, 1, 1.0f);
	memcpy(q, p, sizeof p);
	memcpy(p0, p, sizeof p);
	for (int step = 1; step <= stop_after; step++) {
		fill(g, 100 + (unsigned)step, 0.1f);
		assert_int_equal(ds_onebit_reduce_next(o), 1);
		assert_int_equal(ds_onebit_step(o, p, g, 0.5f, &err), 0);
		if (step == 1) {
			assert_memory_equal(p, p0, sizeof p);
		} else {
			assert_int_equal(ds_optim_step(c, q, g, 0.5f, ranges, 2, &err), 0);
			assert_memory_equal(p, q, sizeof p);
			assert_memory_equal(ds_onebit_state(o, "exp_avg"), c->states[0], sizeof p);
			assert_memory_equal(ds_onebit_state(o, "exp_avg_sq"), c->states[1], sizeof p);
		}
		assert_int_equal(ds_onebit_steps(o), step);
		assert_int_equal(ds_onebit_reduce_next(o), step < stop_after);
	}
	/* frozen: the variance stays as it was */
	float v[TOTAL];
	memcpy(v, ds_onebit_state(o, "exp_avg_sq"), sizeof v);
	fill(g, 999, 0.1f);
	assert_int_equal(ds_onebit_step(o, p, g, 1.0f, &err), 0);
	assert_memory_equal(ds_onebit_state(o, "exp_avg_sq"), v, sizeof v);
	assert_int_equal(ds_onebit_reduce_next(o), 0);
	ds_optim_destroy(c);
	ds_onebit_destroy(o);
}

static void test_warmup_is_counterpart(void **state)
{
	check_warmup(DS_OPTIM_ONEBIT_ADAM, DS_OPTIM_ADAMW, 6);
	check_warmup(DS_OPTIM_ZERO_ONE_ADAM, DS_OPTIM_ADAMW, 7);
	check_warmup(DS_OPTIM_ONEBIT_LAMB, DS_OPTIM_LAMB, 6);
}

/* After the freeze at one rank (no exchange): OneBitAdam's momentum from
 * the gradient, Adam's update with the frozen variance, element by element
 * in adam.c's order. */
static void test_onebit_adam_frozen(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_onebit *o = make(DS_OPTIM_ONEBIT_ADAM, 1, NULL, NULL, 0, freeze6);
	float p[TOTAL], g[TOTAL];
	fill(p, 1, 1.0f);
	for (int step = 1; step <= 6; step++) {
		fill(g, 100 + (unsigned)step, 0.1f);
		assert_int_equal(ds_onebit_step(o, p, g, 1.0f, &err), 0);
	}
	float m[TOTAL], v[TOTAL], want[TOTAL];
	memcpy(m, ds_onebit_state(o, "exp_avg"), sizeof m);
	memcpy(v, ds_onebit_state(o, "exp_avg_sq"), sizeof v);
	fill(g, 7, 0.1f);
	memcpy(want, p, sizeof p);
	for (int k = 0; k < 2; k++)
		for (size_t i = tens[k].off; i < tens[k].off + tens[k].n; i++) {
			float mo = fmaf(g[i] * 2.0f, (float)(1.0 - 0.9), m[i] * 0.9f);
			float u = mo / fmaf(sqrtf(v[i]), 1.0f, 1e-8f);
			float pa = fmaf(want[i], (float)(-0.01 * 0.01), want[i]);
			want[i] = fmaf(u, -0.01f, pa);
		}
	assert_int_equal(ds_onebit_step(o, p, g, 2.0f, &err), 0);
	assert_memory_equal(p, want, sizeof p);
	ds_onebit_destroy(o);
}

static void sched(struct ds_optim_params *hp)
{
	hp->var_update_scaler = 2;
	hp->var_freeze_step = 12;
	hp->local_step_scaler = 2;
	hp->local_step_clipper = 4;
}

/* 0/1 Adam's schedules by DeepSpeed's rules (zoadam.py), worked by hand:
 * var_interval 1 -> 2 after the variance steps 2, 3 -> 4 after 4, 6 -> 8
 * after 8, 12; the engine allreduces step t+1 when (t+1) % var_interval ==
 * 0; after step 13 (> var_freeze_step 12) the variance is frozen and local
 * steps begin: local_step_interval 1 for two steps (14, 15), then 2 for
 * two (16, 17), then 4 (the clipper), syncing when step % interval == 0. */
static void test_zero_one_schedules(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_onebit *o = make(DS_OPTIM_ZERO_ONE_ADAM, 1, NULL, NULL, 0, sched);
	/* [step]: the variance changes, the engine allreduces the next step */
	static const int var_step[14] = { 0, 0, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 1, 0 };
	static const int reduce[14] = { 1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0 };
	float p[TOTAL], g[TOTAL], v[TOTAL];
	fill(p, 1, 1.0f);
	for (int step = 1; step <= 13; step++) {
		memcpy(v, ds_onebit_state(o, "exp_avg_sq"), sizeof v);
		fill(g, 100 + (unsigned)step, 0.1f);
		assert_int_equal(ds_onebit_step(o, p, g, 1.0f, &err), 0);
		int changed = memcmp(v, ds_onebit_state(o, "exp_avg_sq"), sizeof v) != 0;
		if (changed != var_step[step])
			fail_msg("step %d: variance %s", step, changed ? "changed" : "unchanged");
		if (ds_onebit_reduce_next(o) != reduce[step])
			fail_msg("step %d: reduce_next %d", step, ds_onebit_reduce_next(o));
	}
	assert_int_equal(ds_onebit_reduce_next(o), 0);
	/* local steps: the accumulator is empty right after a sync step and
	 * holds the local updates between them */
	static const int sync[22] = { [14] = 1, [15] = 1, [16] = 1, [17] = 0, [18] = 0, [19] = 0, [20] = 1, [21] = 0 };
	const float *cb = ds_onebit_state(o, "momentum_accumulator");
	for (int step = 14; step <= 21; step++) {
		memcpy(v, ds_onebit_state(o, "exp_avg_sq"), sizeof v);
		fill(g, 100 + (unsigned)step, 0.1f);
		assert_int_equal(ds_onebit_step(o, p, g, 1.0f, &err), 0);
		assert_memory_equal(v, ds_onebit_state(o, "exp_avg_sq"), sizeof v);
		int empty = 1;
		for (int i = 0; i < TOTAL; i++)
			empty &= cb[i] == 0.0f;
		if (empty != sync[step])
			fail_msg("step %d: accumulator %s", step, empty ? "empty" : "holding updates");
	}
	/* the interval stopped at the clipper */
	struct ds_onebit_var vars[DS_ONEBIT_MAX_VARS];
	int nv = ds_onebit_vars(o, vars);
	for (int k = 0; k < nv; k++)
		if (!strcmp(vars[k].name, "local_step_interval"))
			assert_int_equal(*vars[k].i, 4);
	ds_onebit_destroy(o);
}

static void lamb_sched(struct ds_optim_params *hp)
{
	hp->freeze_step = 4;
	hp->beta2 = 0.5;
	hp->weight_decay = 0;
}

/* 1-bit Lamb at one rank: the warm-up ratios' EMA (coeff_beta 0.9) is the
 * frozen ratio; with zero gradients after the freeze the fresh variance
 * halves each step (beta2 0.5), so the frozen/fresh denominators grow by
 * about sqrt(2) a step and the factor rises by factor_threshold (10%) a
 * step from 1: 1.1, 1.21, ... */
static void test_lamb_frozen_ratio(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_onebit *o = make(DS_OPTIM_ONEBIT_LAMB, 1, NULL, NULL, 0, lamb_sched);
	float p[TOTAL], g[TOTAL];
	double ema[2] = { 0, 0 };
	fill(p, 1, 1.0f);
	for (int step = 1; step <= 4; step++) {
		fill(g, 100 + (unsigned)step, 0.1f);
		float before[TOTAL];
		memcpy(before, p, sizeof p);
		assert_int_equal(ds_onebit_step(o, p, g, 1.0f, &err), 0);
		if (step == 1)
			continue;
		/* the ratio of each tensor from its own norms: ||p|| / ||m/(sqrt(v)+eps)|| */
		const float *m = ds_onebit_state(o, "exp_avg"), *v = ds_onebit_state(o, "exp_avg_sq");
		for (int k = 0; k < 2; k++) {
			double sp = 0, su = 0;
			for (size_t i = tens[k].off; i < tens[k].off + tens[k].n; i++) {
				float u = m[i] / (sqrtf(v[i]) + 1e-8f);
				sp += (double)before[i] * before[i];
				su += (double)u * u;
			}
			double r = sqrt(sp) / sqrt(su);
			r = r > 10 ? 10 : r < 0.01 ? 0.01 : r;
			ema[k] = 0.9 * ema[k] + 0.1 * r;
			assert_true(fabs(ds_onebit_tensor_var(o, 0)[k] - ema[k]) <= 1e-12 * ema[k]);
		}
	}
	/* the fresh variance starts from the variance at freeze_step */
	assert_memory_equal(ds_onebit_state(o, "exp_avg_sq_fresh"), ds_onebit_state(o, "exp_avg_sq"), sizeof p);
	double cf[2];
	memcpy(cf, ds_onebit_tensor_var(o, 0), sizeof cf);
	memset(g, 0, sizeof g);
	double want = 1.0;
	for (int step = 5; step <= 9; step++) {
		assert_int_equal(ds_onebit_step(o, p, g, 1.0f, &err), 0);
		want = want * (1.0 + 0.1);
		for (int k = 0; k < 2; k++) {
			assert_true(ds_onebit_tensor_var(o, 1)[k] == want);  /* last_factor */
			assert_true(ds_onebit_tensor_var(o, 0)[k] == cf[k]);  /* the EMA is frozen */
		}
	}
	ds_onebit_destroy(o);
}

/* A stand-in for the compressed allreduce at 2 ranks: records what it is
 * given; gives back its input (so results are the one-rank ones), 7 in
 * the padding, and marks the error buffers. */
struct mock {
	int calls;
	size_t padded[8];
	float first[8], tail[8];
	float seen[8][128];
};

static int mock_allreduce(void *ctx, float *buf, size_t padded, float *werr, float *serr, struct ds_err *err)
{
	struct mock *m = ctx;
	if (m->calls < 8) {
		m->padded[m->calls] = padded;
		memcpy(m->seen[m->calls], buf, (padded < 128 ? padded : 128) * sizeof(float));
		m->tail[m->calls] = buf[padded - 1];
	}
	m->calls++;
	buf[padded - 1] = 7.0f;
	werr[0] = 1.0f;
	serr[0] = 1.0f;
	return 0;
}

static void freeze3(struct ds_optim_params *hp)
{
	hp->freeze_step = 3;
}

/* OneBitAdam's momentum crosses per tensor (fp32 runs) or as one buffer
 * (fp16/bf16), padded to DeepSpeed's size with zeros; nothing crosses
 * during the warm-up; with an exchange that gives the momentum back, the
 * weights are the one-rank ones. */
static void test_exchange_units(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	for (int fused = 0; fused < 2; fused++) {
		struct mock mk = { 0 };
		struct ds_onebit *o = make(DS_OPTIM_ONEBIT_ADAM, 2, mock_allreduce, &mk, fused, freeze3);
		struct ds_onebit *one = make(DS_OPTIM_ONEBIT_ADAM, 1, NULL, NULL, fused, freeze3);
		float p[TOTAL], q[TOTAL], g[TOTAL];
		fill(p, 1, 1.0f);
		memcpy(q, p, sizeof p);
		for (int step = 1; step <= 4; step++) {
			fill(g, 100 + (unsigned)step, 0.1f);
			assert_int_equal(ds_onebit_step(o, p, g, 1.0f, &err), 0);
			assert_int_equal(ds_onebit_step(one, q, g, 1.0f, &err), 0);
			assert_int_equal(mk.calls, step < 4 ? 0 : fused ? 1 : 2);
		}
		/* the momentum (these tensors' elements back to back), then zeros */
		const float *m = ds_onebit_state(o, "exp_avg");
		if (fused) {
			assert_int_equal(mk.padded[0], ds_onebit_padded(101, 2));
			assert_memory_equal(mk.seen[0], m, 40 * sizeof(float));
			assert_memory_equal(mk.seen[0] + 40, m + 48, 61 * sizeof(float));
			for (size_t i = 101; i < mk.padded[0]; i++)
				assert_true(mk.seen[0][i] == 0.0f);
		} else {
			assert_int_equal(mk.padded[0], ds_onebit_padded(40, 2));
			assert_int_equal(mk.padded[1], ds_onebit_padded(61, 2));
			assert_memory_equal(mk.seen[1], m + 48, 61 * sizeof(float));
			assert_true(mk.seen[1][63] == 0.0f);
		}
		assert_memory_equal(p, q, sizeof p);
		assert_int_equal(ds_onebit_num_units(o), fused ? 1 : 2);
		assert_int_equal(ds_onebit_unit_tensor(o, 0), fused ? -1 : 0);
		ds_onebit_destroy(o);
		ds_onebit_destroy(one);
	}
}

/* 1-bit Lamb fuses all momenta, scaled per tensor, and keeps the padding
 * that comes back for the next exchange. */
static void test_lamb_keeps_padding(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct mock mk = { 0 };
	struct ds_onebit *o = make(DS_OPTIM_ONEBIT_LAMB, 2, mock_allreduce, &mk, 0, freeze3);
	float p[TOTAL], g[TOTAL];
	fill(p, 1, 1.0f);
	for (int step = 1; step <= 5; step++) {
		fill(g, 100 + (unsigned)step, 0.1f);
		assert_int_equal(ds_onebit_step(o, p, g, 1.0f, &err), 0);
	}
	assert_int_equal(mk.calls, 2);
	assert_int_equal(mk.padded[0], 112);
	assert_true(mk.tail[0] == 0.0f);
	assert_true(mk.tail[1] == 7.0f);
	size_t npad;
	float *pad = ds_onebit_lamb_pad(o, &npad);
	assert_int_equal(npad, 11);
	assert_true(pad[10] == 7.0f);
	assert_true(ds_onebit_tensor_var(o, 2)[0] > 0);  /* scaling_coeff was set */
	ds_onebit_destroy(o);
}

static void zo_sched(struct ds_optim_params *hp)
{
	hp->var_update_scaler = 1;
	hp->var_freeze_step = 4;
}

/* 0/1 Adam at 2 ranks: the variance steps are 2 and 4 (the interval doubles
 * after each), so step 3 and 5 send their gradients (times the unscale
 * factor), one exchange per tensor; after step 5 (> var_freeze_step) the
 * error buffers are zeroed, as DeepSpeed does once at the freeze. */
static void test_zero_one_exchanges(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct mock mk = { 0 };
	struct ds_onebit *o = make(DS_OPTIM_ZERO_ONE_ADAM, 2, mock_allreduce, &mk, 0, zo_sched);
	float p[TOTAL], g[TOTAL];
	fill(p, 1, 1.0f);
	static const int calls[6] = { 0, 0, 0, 2, 2, 4 };
	for (int step = 1; step <= 5; step++) {
		fill(g, 100 + (unsigned)step, 0.1f);
		assert_int_equal(ds_onebit_step(o, p, g, 0.5f, &err), 0);
		assert_int_equal(mk.calls, calls[step]);
		if (step == 3)
			for (int i = 0; i < 40; i++)
				assert_true(mk.seen[0][i] == g[i] * 0.5f);
	}
	for (int u = 0; u < 2; u++) {
		const float *we = ds_onebit_worker_error(o, u), *se = ds_onebit_server_error(o, u);
		for (size_t i = 0; i < ds_onebit_unit_padded(o, u); i++)
			assert_true(we[i] == 0.0f);
		for (size_t i = 0; i < ds_onebit_unit_padded(o, u) / 2; i++)
			assert_true(se[i] == 0.0f);
	}
	assert_int_equal(ds_onebit_rank_local(o), 1);
	ds_onebit_destroy(o);
}

static void test_params(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	enum ds_optim_type t;
	assert_int_equal(ds_optim_type_from_name("OneBitAdam", &t, &err), 0);
	assert_int_equal(t, DS_OPTIM_ONEBIT_ADAM);
	assert_int_equal(ds_optim_type_from_name("zerooneadam", &t, &err), 0);
	assert_int_equal(t, DS_OPTIM_ZERO_ONE_ADAM);
	assert_int_equal(ds_optim_type_from_name("OneBitLamb", &t, &err), 0);
	assert_true(ds_optim_is_onebit(t));
	struct ds_optim_params hp;
	ds_optim_params_init(&hp, DS_OPTIM_ZERO_ONE_ADAM);
	/* DeepSpeed's defaults */
	assert_int_equal(hp.freeze_step, 100000);
	assert_int_equal(hp.var_update_scaler, 16);
	assert_int_equal(hp.local_step_scaler, 32678);
	assert_int_equal(hp.local_step_clipper, 16);
	double v = 0;
	assert_int_equal(ds_optim_param_set(&hp, "local_step_clipper", &v, 1, &err), 0);
	assert_int_equal(ds_optim_params_check(&hp, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "local_step_clipper"));
	v = 2.5;
	assert_int_equal(ds_optim_param_set(&hp, "var_freeze_step", &v, 1, &err), DS_EINVAL);
	assert_int_equal(ds_optim_param_set(&hp, "freeze_step", &v, 1, &err), DS_EINVAL);  /* not 0/1 Adam's */
	/* a plain optimizer object is refused for the family */
	struct ds_optim *o;
	ds_optim_params_init(&hp, DS_OPTIM_ONEBIT_ADAM);
	assert_int_equal(ds_optim_create(&o, &hp, 4, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "ds_onebit_create"));
	/* more than one rank needs an exchange */
	struct ds_onebit *ob;
	struct ds_onebit_comm x = { 2, NULL, NULL };
	assert_int_equal(ds_onebit_create(&ob, &hp, TOTAL, tens, 2, 0, &x, &err), DS_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warmup_is_counterpart),
		cmocka_unit_test(test_onebit_adam_frozen),
		cmocka_unit_test(test_zero_one_schedules),
		cmocka_unit_test(test_lamb_frozen_ratio),
		cmocka_unit_test(test_exchange_units),
		cmocka_unit_test(test_lamb_keeps_padding),
		cmocka_unit_test(test_zero_one_exchanges),
		cmocka_unit_test(test_params),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
