/* test_engine.c - the training engine in one process, against
 * expectations that do not come from the engine itself: gradient
 * accumulation equals the large micro-batch (DeepSpeed divides the loss by
 * GA), clipping bounds an SGD update to the clip norm, a non-finite
 * gradient skips the step and leaves parameters alone, and the loss of a
 * memorised batch falls. */
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "cpu/gemm_bf16.h"
#include "engine/engine.h"
#include "model/gpt.h"
#include "util/half.h"
#include "util/rng.h"

static struct ds_comm *comm;

static int setup(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	return ds_comm_create(&comm, "self", &err);
}

static int teardown(void **state)
{
	ds_comm_destroy(comm);
	return 0;
}

static void opts_base(struct ds_engine_opts *o, int mb, int ga)
{
	ds_engine_opts_init(o);
	struct ds_model_config *c = &o->model;
	c->family = DS_FAMILY_GPT;
	c->num_layers = 2;
	c->hidden_size = 32;
	c->num_attention_heads = 4;
	c->seq_length = 16;
	c->max_position_embeddings = 16;
	c->vocab_size = 50;
	c->make_vocab_size_divisible_by = 16;
	c->rotary_pct = 1.0;
	c->rotary_emb_base = 10000;
	c->layernorm_epsilon = 1e-5;
	c->rms_norm_epsilon = 1e-8;
	c->init_method_std = 0.02;
	o->micro_batch = mb;
	o->grad_accum = ga;
	o->optim.lr = 1e-2;
}

static void rows(int32_t *t, int n, int T, int vocab, uint64_t seed)
{
	struct ds_rng r;
	ds_rng_init(&r, seed, 7, 7);
	for (int i = 0; i < n * (T + 1); i++)
		t[i] = (int32_t)(ds_rng_uniform(&r, (uint64_t)i) * vocab);
}

static struct ds_engine *mk(const struct ds_engine_opts *o)
{
	struct ds_engine *e = NULL;
	struct ds_err err = DS_ERR_INIT;
	int rc = ds_engine_create(&e, o, comm, &err);
	if (rc)
		fprintf(stderr, "# %s\n", err.msg);
	assert_int_equal(rc, 0);
	return e;
}

static void test_loss_falls(void **state)
{
	struct ds_engine_opts o;
	struct ds_engine_step r;
	struct ds_err err = DS_ERR_INIT;
	int32_t tok[4 * 17];
	opts_base(&o, 4, 1);
	struct ds_engine *e = mk(&o);
	rows(tok, 4, 16, 50, 1);
	double first = 0, last = 0;
	for (int s = 0; s < 30; s++) {
		assert_int_equal(ds_engine_train_step(e, &(struct ds_engine_batch){ .tokens = tok, .step = s, .lr = 1e-2 },
						      &r, &err), 0);
		assert_false(r.skipped);
		if (s == 0)
			first = r.loss;
		last = r.loss;
	}
	/* a fresh model predicts ~uniformly over 50 tokens: loss ~ ln 50 */
	assert_true(fabs(first - log(50.0)) < 0.1);
	assert_true(last < 0.5 * first);
	assert_int_equal(ds_engine_steps(e), 30);
	ds_engine_destroy(e);
}

static void test_grad_accum_equals_large_batch(void **state)
{
	struct ds_engine_opts oa, ob;
	struct ds_engine_step ra, rb;
	struct ds_err err = DS_ERR_INIT;
	int32_t tok[4 * 17];
	rows(tok, 4, 16, 50, 2);
	/* Adam for the loss and grad-norm sequence; SGD (linear in the
	 * gradient) for the parameters, since Adam's g/sqrt(v) turns fp32
	 * rounding of near-zero gradients into O(1) relative differences */
	for (int opt = 0; opt < 2; opt++) {
		opts_base(&oa, 4, 1);
		opts_base(&ob, 2, 2);
		if (opt == 1) {
			ds_optim_params_init(&oa.optim, DS_OPTIM_SGD);
			ds_optim_params_init(&ob.optim, DS_OPTIM_SGD);
		}
		struct ds_engine *a = mk(&oa), *b = mk(&ob);
		/* Adam at lr 1e-2: at 1e-1 its sign-like first steps amplify
		 * rounding to 1e-4 in the third step's norm */
		double lr = opt == 0 ? 1e-2 : 1e-1;
		for (int s = 0; s < 3; s++) {
			assert_int_equal(ds_engine_train_step(a, &(struct ds_engine_batch){ .tokens = tok, .step = s, .lr = lr },
							      &ra, &err), 0);
			assert_int_equal(ds_engine_train_step(b, &(struct ds_engine_batch){ .tokens = tok, .step = s, .lr = lr },
							      &rb, &err), 0);
			assert_true(fabs(ra.loss - rb.loss) <= 1e-5 * ra.loss);
			assert_true(fabs(ra.grad_norm - rb.grad_norm) <= 1e-4 * ra.grad_norm);
		}
		const struct ds_gpt *m = ds_engine_model(a);
		for (int i = 0; opt == 1 && i < ds_gpt_num_tensors(m); i++) {
			double rel;
			int64_t n = ds_gpt_tensor(m, i)->numel;
			if (!ds_test_close(ds_engine_param(b, i), ds_engine_param(a, i), n, 1e-5, &rel))
				fail_msg("%s differs: %g", ds_gpt_tensor(m, i)->name, rel);
		}
		ds_engine_destroy(a);
		ds_engine_destroy(b);
	}
}

static void test_clipping_bounds_sgd_update(void **state)
{
	struct ds_engine_opts o;
	struct ds_engine_step r;
	struct ds_err err = DS_ERR_INIT;
	int32_t tok[2 * 17];
	rows(tok, 2, 16, 50, 3);
	opts_base(&o, 2, 1);
	ds_optim_params_init(&o.optim, DS_OPTIM_SGD);
	o.gradient_clipping = 1e-3;
	struct ds_engine *e = mk(&o);
	const struct ds_gpt *m = ds_engine_model(e);
	int64_t n = ds_gpt_num_params(m);
	float *before = malloc(sizeof(float) * (size_t)n);
	int64_t k = 0;
	for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
		int64_t ni = ds_gpt_tensor(m, i)->numel;
		memcpy(before + k, ds_engine_param(e, i), sizeof(float) * (size_t)ni);
		k += ni;
	}
	assert_int_equal(ds_engine_train_step(e, &(struct ds_engine_batch){ .tokens = tok, .step = 0, .lr = 1.0 },
					      &r, &err), 0);
	assert_true(r.grad_norm > 1e-2); /* so clipping is active */
	/* SGD with lr 1: ||dp|| = clip * norm / (norm + 1e-6) */
	double d2 = 0;
	k = 0;
	for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
		int64_t ni = ds_gpt_tensor(m, i)->numel;
		const float *p = ds_engine_param(e, i);
		for (int64_t j = 0; j < ni; j++, k++)
			d2 += ((double)p[j] - before[k]) * ((double)p[j] - before[k]);
	}
	double want = 1e-3 * r.grad_norm / (r.grad_norm + 1e-6);
	assert_true(fabs(sqrt(d2) - want) < 1e-3 * want + 1e-7);
	free(before);
	ds_engine_destroy(e);
}

static void test_nonfinite_skips(void **state)
{
	struct ds_engine_opts o;
	struct ds_engine_step r;
	struct ds_err err = DS_ERR_INIT;
	int32_t tok[2 * 17];
	rows(tok, 2, 16, 50, 4);
	opts_base(&o, 2, 1);
	struct ds_engine *e = mk(&o);
	const struct ds_gpt *m = ds_engine_model(e);
	int ln = ds_gpt_find(m, "transformer.h.0.ln_1.weight");
	assert_true(ln >= 0);
	ds_engine_param(e, ln)[0] = INFINITY;
	int c_attn = ds_gpt_find(m, "transformer.h.1.attn.c_attn.weight");
	float keep = ds_engine_param(e, c_attn)[5];
	assert_int_equal(ds_engine_train_step(e, &(struct ds_engine_batch){ .tokens = tok, .step = 0, .lr = 1e-2 },
					      &r, &err), 0);
	assert_true(r.skipped);
	assert_int_equal(ds_engine_steps(e), 0);
	assert_true(ds_engine_param(e, c_attn)[5] == keep);
	ds_engine_destroy(e);
}

static void test_state_accessors(void **state)
{
	struct ds_engine_opts o;
	struct ds_engine_step r;
	struct ds_err err = DS_ERR_INIT;
	int32_t tok[2 * 17];
	rows(tok, 2, 16, 50, 5);
	opts_base(&o, 2, 1);
	struct ds_engine *e = mk(&o);
	assert_int_equal(ds_engine_num_states(e), 2);
	assert_string_equal(ds_engine_state_name(e, 0), "exp_avg");
	assert_int_equal(ds_engine_train_step(e, &(struct ds_engine_batch){ .tokens = tok, .step = 0, .lr = 1e-2 },
					      &r, &err), 0);
	const struct ds_gpt *m = ds_engine_model(e);
	for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
		int64_t b, en;
		ds_engine_save_slice(e, i, &b, &en);
		assert_int_equal(b, 0);
		assert_int_equal(en, ds_gpt_tensor(m, i)->numel);
		float *v = ds_engine_state(e, i, "exp_avg_sq", &b, &en);
		assert_non_null(v);
		assert_int_equal(en - b, ds_gpt_tensor(m, i)->numel);
		/* exp_avg_sq after one step is (1 - beta2) g^2 >= 0 */
		for (int64_t j = 0; j < en - b; j++)
			assert_true(v[j] >= 0);
	}
	assert_null(ds_engine_state(e, 0, "momentum_buffer", &(int64_t){ 0 }, &(int64_t){ 0 }));
	ds_engine_set_steps(e, 41);
	assert_int_equal(ds_engine_steps(e), 41);
	assert_true(ds_engine_state_bytes(e) >= 4 * sizeof(float) * (size_t)ds_engine_num_params(e));
	ds_engine_destroy(e);
}

/* Mixed precision: an fp16 scaler at 2^32 overflows the first step, which
 * is skipped with the parameters unchanged and the scale halved (hysteresis
 * 1); at 2^10 the step goes through and reports the unscaled norm, close to
 * fp32's.  bf16 keeps fp32 master weights that move by less than a bf16
 * ulp, and its loss is near fp32's but not equal.  A scaler needs fp16. */
static void test_mixed_precision(void **state)
{
	(void)state;
	struct ds_engine_opts o;
	struct ds_engine_step r32, r;
	struct ds_err err = DS_ERR_INIT;
	int32_t tok[4 * 17];
	rows(tok, 4, 16, 50, 6);
	opts_base(&o, 4, 1);
	struct ds_engine *e32 = mk(&o);
	assert_int_equal(ds_engine_train_step(e32, &(struct ds_engine_batch){ .tokens = tok, .step = 1, .lr = 1e-4 },
					      &r32, &err), 0);
	ds_engine_destroy(e32);

	opts_base(&o, 4, 1);
	o.half = DS_HALF_FP16;
	ds_scaler_init_dynamic(&o.scaler, 4294967296.0, 1000, 1, 0, 1, 1);
	struct ds_engine *e = mk(&o);
	const struct ds_gpt *m = ds_engine_model(e);
	int w = ds_gpt_find(m, "transformer.h.1.mlp.c_fc.weight");
	float keep[8];
	memcpy(keep, ds_engine_param(e, w), sizeof keep);
	assert_int_equal(ds_engine_train_step(e, &(struct ds_engine_batch){ .tokens = tok, .step = 1, .lr = 1e-4 },
					      &r, &err), 0);
	assert_true(r.skipped && r.overflow);
	assert_true(r.loss_scale == 2147483648.0);
	assert_int_equal(ds_engine_steps(e), 0);
	assert_memory_equal(ds_engine_param(e, w), keep, sizeof keep);
	struct ds_scaler sc;
	ds_scaler_init_dynamic(&sc, 1024, 1000, 1, 0, 1, 1);
	ds_engine_set_scaler(e, &sc);
	assert_int_equal(ds_engine_train_step(e, &(struct ds_engine_batch){ .tokens = tok, .step = 1, .lr = 1e-4 },
					      &r, &err), 0);
	assert_false(r.skipped);
	assert_true(r.loss_scale == 1024);
	assert_true(fabs(r.grad_norm - r32.grad_norm) <= 0.01 * r32.grad_norm);
	assert_true(fabs(r.loss - r32.loss) <= 1e-2 * r32.loss);
	assert_int_equal(ds_engine_steps(e), 1);
	assert_memory_not_equal(ds_engine_param(e, w), keep, sizeof keep);
	ds_engine_destroy(e);

	opts_base(&o, 4, 1);
	o.half = DS_HALF_BF16;
	e = mk(&o);
	m = ds_engine_model(e);
	assert_int_equal(ds_engine_train_step(e, &(struct ds_engine_batch){ .tokens = tok, .step = 1, .lr = 1e-4 },
					      &r, &err), 0);
	assert_false(r.skipped);
	assert_true(r.loss_scale == 1.0);
	assert_true(r.loss != r32.loss && fabs(r.loss - r32.loss) <= 1e-2 * r32.loss);
	/* the master weights are fp32: after a 1e-4 step most are no longer bf16 values */
	const float *p = ds_engine_param(e, w);
	int64_t n = ds_gpt_tensor(m, w)->numel, off16 = 0;
	for (int64_t i = 0; i < n; i++)
		off16 += ds_bf16_to_fp32(ds_fp32_to_bf16(p[i])) != p[i];
	assert_true(off16 > n / 2);
	ds_engine_destroy(e);

	opts_base(&o, 4, 1);
	o.half = DS_HALF_BF16;
	ds_scaler_init_static(&o.scaler, 128);
	e = NULL;
	assert_int_equal(ds_engine_create(&e, &o, comm, &err), DS_EINVAL);
	assert_null(e);
}

/* The loss of the model run directly on flat parameters p (B rows of
 * T + 1 tokens as the engine takes them), bf16 with products `mode`. */
static float direct_loss(const struct ds_gpt *m, const float *p, const int32_t *tok, int B, int T, int mode)
{
	int32_t in[4 * 16], tg[4 * 16];
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			in[b * T + t] = tok[b * (T + 1) + t];
			tg[b * T + t] = tok[b * (T + 1) + t + 1];
		}
	struct ds_err err = DS_ERR_INIT;
	struct ds_gpt_ws *ws = NULL;
	struct ds_gpt_ws_opts wo = { .B = B, .T = T, .half = DS_HALF_BF16, .bf16_matmul = mode };
	assert_int_equal(ds_gpt_ws_create(&ws, m, &wo, &err), 0);
	float loss = 0;
	assert_int_equal(ds_gpt_forward(m, ws, p, in, tg, B, T, 0, 0, 1, &loss, &err), 0);
	ds_gpt_ws_destroy(ws);
	return loss;
}

/* A bf16 engine hands the model its 16-bit parameter copy (the params16
 * hook), which oneDNN's products read instead of converting the widened
 * weights: each step's loss equals, bit for bit, the model's own run on
 * the master weights rounded to bf16 (the copy refreshed after every
 * step), at ZeRO stage 0 (the resident copy) and 3 (its gather slots). */
static void test_bf16_weight_copies(void **state)
{
	(void)state;
	const int mode = ds_gemm_bf16_available(DS_BF16_ONEDNN, NULL) ? DS_BF16_MM_ONEDNN : DS_BF16_MM_AUTO;
	if (mode != DS_BF16_MM_ONEDNN)
		printf("# no oneDNN bf16 kernel here: no product reads the copies\n");
	int32_t tok[4 * 17];
	rows(tok, 4, 16, 50, 9);
	for (int z = 0; z <= 3; z += 3) {
		struct ds_engine_opts o;
		struct ds_engine_step r;
		struct ds_err err = DS_ERR_INIT;
		opts_base(&o, 4, 1);
		o.half = DS_HALF_BF16;
		o.bf16_matmul = mode;
		o.zero_stage = z;
		struct ds_engine *e = mk(&o);
		const struct ds_gpt *m = ds_engine_model(e);
		const int64_t n = ds_gpt_num_params(m);
		float *p = calloc((size_t)n, sizeof(float));
		assert_non_null(p);
		for (int s = 0; s < 3; s++) {
			for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
				const struct ds_gpt_tensor *t = ds_gpt_tensor(m, i);
				memcpy(p + t->offset, ds_engine_param(e, i), (size_t)t->numel * sizeof(float));
			}
			ds_half_round_n(DS_HALF_BF16, p, (size_t)n);
			const float want = direct_loss(m, p, tok, 4, 16, mode);
			assert_int_equal(ds_engine_train_step(e, &(struct ds_engine_batch){ .tokens = tok, .step = s, .lr = 1e-2 },
							      &r, &err), 0);
			if ((float)r.loss != want)
				fail_msg("stage %d step %d: loss %.9g, the model on the rounded master %.9g", z, s,
					 (float)r.loss, want);
		}
		free(p);
		ds_engine_destroy(e);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loss_falls),
		cmocka_unit_test(test_grad_accum_equals_large_batch),
		cmocka_unit_test(test_clipping_bounds_sgd_update),
		cmocka_unit_test(test_nonfinite_skips),
		cmocka_unit_test(test_state_accessors),
		cmocka_unit_test(test_mixed_precision),
		cmocka_unit_test(test_bf16_weight_copies),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
