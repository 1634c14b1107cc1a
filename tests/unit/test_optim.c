/* test_optim.c - lib/optim optimizers and clipping helpers against spec
 * cases 15-17 and 25 (deepspeed-training.md), hand-computed Adam (two steps,
 * bias correction, both weight-decay modes), torch SGD momentum/nesterov/
 * dampening values worked by hand, Lamb trust-ratio clamps, and the
 * vector Adam kernels against the scalar reference (bit for bit).
 */
#include "unit.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "optim/clip.h"
#include "optim/optim.h"
#include "util/mem.h"

static struct ds_optim *make(enum ds_optim_type type, size_t n, void (*tweak)(struct ds_optim_params *))
{
	struct ds_optim_params hp;
	struct ds_err err = DS_ERR_INIT;
	struct ds_optim *o;
	ds_optim_params_init(&hp, type);
	if (tweak)
		tweak(&hp);
	assert_int_equal(ds_optim_create(&o, &hp, n, &err), 0);
	return o;
}

static int isas[] = { DS_SIMD_SCALAR, DS_SIMD_AVX2, DS_SIMD_AVX512 };

/* spec case 16 through each kernel: p=1 g=0.5 lr=0.1 wd=0.1 eps=0 */
static void one_adam_step(enum ds_simd isa, int adamw, float *p_out)
{
	struct ds_optim_params hp;
	ds_optim_params_init(&hp, DS_OPTIM_ADAM);
	hp.lr = 0.1;
	hp.weight_decay = 0.1;
	hp.eps = 0;
	hp.adam_w_mode = adamw;
	struct ds_adam_coef c;
	ds_adam_coef_init(&c, &hp, 1, 1.0f);
	float p = 1, g = 0.5f, m = 0, v = 0;
	ds_adam_update(&c, &p, &g, &m, &v, 1, isa);
	*p_out = p;
}

static void test_case16_adamw_step(void **state)
{
	for (int i = 0; i < 3; i++) {
		float p;
		one_adam_step(isas[i], 1, &p);
		assert_float_equal(p, 0.89f, 1e-6);
		one_adam_step(isas[i], 0, &p);   /* L2: g = 0.6 */
		assert_float_equal(p, 0.9f, 1e-6);
	}
}

static void set_case16(struct ds_optim_params *hp)
{
	hp->lr = 0.1;
	hp->weight_decay = 0.1;
	hp->eps = 0;
}

/* spec case 15: type "Adam" is AdamW unless adam_w_mode false; max_grad_norm
 * and amsgrad=true are rejected */
static void test_case15_adam_mode(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	enum ds_optim_type t;
	assert_int_equal(ds_optim_type_from_name("Adam", &t, &err), 0);
	assert_int_equal(t, DS_OPTIM_ADAM);
	struct ds_optim_params hp;
	ds_optim_params_init(&hp, t);
	assert_true(ds_optim_decoupled(&hp));
	double f = 0;
	assert_int_equal(ds_optim_param_set(&hp, "adam_w_mode", &f, 1, &err), 0);
	assert_false(ds_optim_decoupled(&hp));

	float p = 1, g = 0.5f;
	struct ds_optim *o = make(DS_OPTIM_ADAM, 1, set_case16);
	assert_int_equal(ds_optim_step(o, &p, &g, 1.0f, NULL, 0, &err), 0);
	assert_float_equal(p, 0.89f, 1e-6);
	assert_int_equal(o->step, 1);
	ds_optim_destroy(o);

	double one = 1;
	ds_optim_params_init(&hp, DS_OPTIM_ADAM);
	assert_int_equal(ds_optim_param_set(&hp, "max_grad_norm", &one, 1, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "gradient_clipping"));
	assert_int_equal(ds_optim_param_set(&hp, "amsgrad", &one, 1, &err), DS_EINVAL);
	assert_int_equal(ds_optim_param_set(&hp, "amsgrad", &f, 1, &err), 0);
	assert_int_equal(ds_optim_param_set(&hp, "fp32_optimizer_states", &f, 1, &err), DS_EINVAL);
	assert_int_equal(ds_optim_param_set(&hp, "fp32_optimizer_states", &one, 1, &err), 0);
	assert_int_equal(ds_optim_param_set(&hp, "set_grad_none", &f, 1, &err), 0);
	/* adamw ignores adam_w_mode=false in DeepSpeed: dstk says so */
	ds_optim_params_init(&hp, DS_OPTIM_ADAMW);
	assert_int_equal(ds_optim_param_set(&hp, "adam_w_mode", &f, 1, &err), DS_EINVAL);
	assert_true(ds_optim_decoupled(&hp));
}

static void set_two_step(struct ds_optim_params *hp)
{
	hp->lr = 0.01;
	hp->weight_decay = 0.01;
}

static void set_two_step_l2(struct ds_optim_params *hp)
{
	set_two_step(hp);
	hp->adam_w_mode = 0;
}

/* Two steps of Adam with bias correction: p=0.5, g=0.2 then -0.1, lr=0.01,
 * wd=0.01, betas (0.9, 0.999), eps 1e-8.  By hand, AdamW:
 *   t=1: m=0.02 v=4e-5, m^=0.2 v^=0.04 -> p = 0.5 - 0.01*(0.2/0.2 + 0.005) = 0.4899500005
 *   t=2: m=0.008 v=4.996e-5, bc1=0.19 bc2=0.001999, m^=0.0421053 v^=0.0249925
 *        -> p = 0.48995 - 0.01*(0.266338 + 0.0048995) = 0.4872376353
 * L2: t=1 g=0.205 -> p = 0.4900000005; t=2 g=-0.0951 -> 0.4870549663. */
static void test_adam_two_steps(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	const float g1 = 0.2f, g2 = -0.1f;
	struct ds_optim *o = make(DS_OPTIM_ADAMW, 1, set_two_step);
	float p = 0.5f;
	assert_int_equal(ds_optim_step(o, &p, &g1, 1.0f, NULL, 0, &err), 0);
	assert_float_equal(p, 0.4899500005, 2e-7);
	assert_float_equal(ds_optim_state(o, "exp_avg")[0], 0.02, 1e-8);
	assert_float_equal(ds_optim_state(o, "exp_avg_sq")[0], 4e-5, 1e-11);
	assert_int_equal(ds_optim_step(o, &p, &g2, 1.0f, NULL, 0, &err), 0);
	assert_float_equal(p, 0.4872376353, 2e-7);
	assert_int_equal(o->step, 2);
	ds_optim_destroy(o);

	o = make(DS_OPTIM_ADAM, 1, set_two_step_l2);
	p = 0.5f;
	assert_int_equal(ds_optim_step(o, &p, &g1, 1.0f, NULL, 0, &err), 0);
	assert_float_equal(p, 0.4900000005, 2e-7);
	assert_int_equal(ds_optim_step(o, &p, &g2, 1.0f, NULL, 0, &err), 0);
	assert_float_equal(p, 0.4870549663, 2e-7);
	ds_optim_destroy(o);

	/* without bias correction t=1: m=0.02, v=4e-5 -> update 0.02/0.0063246 = 3.16228 */
	struct ds_optim_params hp;
	ds_optim_params_init(&hp, DS_OPTIM_ADAMW);
	hp.lr = 0.01;
	hp.bias_correction = 0;
	assert_int_equal(ds_optim_create(&o, &hp, 1, &err), 0);
	p = 0.5f;
	assert_int_equal(ds_optim_step(o, &p, &g1, 1.0f, NULL, 0, &err), 0);
	assert_float_equal(p, 0.5 - 0.01 * 3.16227766, 1e-6);
	ds_optim_destroy(o);
}

/* grad_mul is applied to g first: g=1 with 1/2 is g=0.5 */
static void test_grad_mul(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_optim *a = make(DS_OPTIM_ADAMW, 1, set_case16), *b = make(DS_OPTIM_ADAMW, 1, set_case16);
	float pa = 1, pb = 1, ga = 1, gb = 0.5f;
	assert_int_equal(ds_optim_step(a, &pa, &ga, 0.5f, NULL, 0, &err), 0);
	assert_int_equal(ds_optim_step(b, &pb, &gb, 1.0f, NULL, 0, &err), 0);
	assert_memory_equal(&pa, &pb, sizeof(float));
	assert_float_equal(pa, 0.89f, 1e-6);
	ds_optim_destroy(a);
	ds_optim_destroy(b);
}

static unsigned long long lcg = 88172645463325252ULL;
static float frand(float lo, float hi)
{
	lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
	return lo + (hi - lo) * (float)((lcg >> 40) & 0xffffff) / 16777216.0f;
}

/* The vector kernels give the scalar reference's bits, over odd lengths
 * (masked/scalar tails) and lengths split across OpenMP threads. */
static void test_kernels_match_scalar(void **state)
{
	static const size_t lens[] = { 1, 7, 15, 16, 17, 31, 33, 255, 1000, 4097, 100003 };
	int tested = 0;
	for (int mode = 0; mode < 2; mode++) {
		struct ds_optim_params hp;
		ds_optim_params_init(&hp, DS_OPTIM_ADAM);
		hp.adam_w_mode = mode;
		hp.lr = 3e-4;
		hp.weight_decay = 0.05;
		for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
			size_t n = lens[li];
			float *buf = ds_alloc(n * 4 * sizeof(float) * 2);
			float *p0 = buf, *g = buf + n, *m0 = buf + 2 * n, *v0 = buf + 3 * n;
			float *p1 = buf + 4 * n, *m1 = buf + 5 * n, *v1 = buf + 6 * n;
			for (size_t i = 0; i < n; i++) {
				p0[i] = frand(-1, 1);
				g[i] = frand(-1e-2f, 1e-2f);
				m0[i] = frand(-1e-3f, 1e-3f);
				v0[i] = frand(0, 1e-5f);
			}
			struct ds_adam_coef c;
			ds_adam_coef_init(&c, &hp, 7, 0.25f);
			for (int k = 1; k < 3; k++) {
				if (!ds_simd_supported(isas[k]))
					continue;
				memcpy(p1, p0, n * sizeof(float));
				memcpy(m1, m0, n * sizeof(float));
				memcpy(v1, v0, n * sizeof(float));
				ds_adam_update(&c, p1, g, m1, v1, n, isas[k]);
				float *pr = ds_alloc(n * 3 * sizeof(float)), *mr = pr + n, *vr = pr + 2 * n;
				memcpy(pr, p0, n * sizeof(float));
				memcpy(mr, m0, n * sizeof(float));
				memcpy(vr, v0, n * sizeof(float));
				ds_adam_update(&c, pr, g, mr, vr, n, DS_SIMD_SCALAR);
				assert_memory_equal(p1, pr, n * sizeof(float));
				assert_memory_equal(m1, mr, n * sizeof(float));
				assert_memory_equal(v1, vr, n * sizeof(float));
				/* and the update did something */
				assert_true(memcmp(p1, p0, n * sizeof(float)) != 0);
				ds_free(pr);
				tested++;
			}
			ds_free(buf);
		}
	}
	if (!tested)
		skip();   /* no AVX2 on this CPU: nothing to compare */
	printf("# compared %d kernel runs against scalar (best isa: %s)\n", tested, ds_simd_name(ds_simd_best()));
}

static void sgd_tweak(struct ds_optim_params *hp)
{
	hp->lr = 0.1;
	hp->weight_decay = 0.1;
	hp->momentum = 0.9;
}
static void sgd_nesterov(struct ds_optim_params *hp)
{
	sgd_tweak(hp);
	hp->nesterov = 1;
}
static void sgd_damp(struct ds_optim_params *hp)
{
	sgd_tweak(hp);
	hp->dampening = 0.5;
}
static void sgd_plain(struct ds_optim_params *hp)
{
	sgd_tweak(hp);
	hp->momentum = 0;
}
static void sgd_nowd(struct ds_optim_params *hp)
{
	sgd_tweak(hp);
	hp->weight_decay = 0;
}

/* torch.optim.SGD by hand, p=1, g=0.5 on both steps, lr=0.1, wd=0.1:
 *   momentum 0.9: d1=0.6 buf=0.6 p=0.94; d2=0.594 buf=1.134 p=0.8266
 *   nesterov:     d1=0.6+0.54=1.14 p=0.886; d2=0.5886 buf=1.1286 d=1.60434 p=0.725566
 *   dampening .5: p=0.94; buf=0.54+0.297=0.837 p=0.8563
 *   no momentum:  p=0.94 then d=0.594 p=0.8806
 *   momentum, wd 0: buf=0.5 p=0.95; buf=0.45+0.5=0.95 p=0.855 */
static void test_sgd(void **state)
{
	struct {
		void (*tw)(struct ds_optim_params *);
		double p1, p2;
		int has_buf;
	} cases[] = {
		{ sgd_tweak, 0.94, 0.8266, 1 },
		{ sgd_nesterov, 0.886, 0.725566, 1 },
		{ sgd_damp, 0.94, 0.8563, 1 },
		{ sgd_plain, 0.94, 0.8806, 0 },
		{ sgd_nowd, 0.95, 0.855, 1 },   /* buf 0.5 then 0.95 */
	};
	struct ds_err err = DS_ERR_INIT;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ds_optim *o = make(DS_OPTIM_SGD, 1, cases[i].tw);
		float p = 1, g = 0.5f;
		assert_int_equal(ds_optim_step(o, &p, &g, 1.0f, NULL, 0, &err), 0);
		assert_float_equal(p, cases[i].p1, 1e-6);
		assert_int_equal(ds_optim_step(o, &p, &g, 1.0f, NULL, 0, &err), 0);
		assert_float_equal(p, cases[i].p2, 1e-6);
		assert_int_equal(ds_optim_state(o, "momentum_buffer") != NULL, cases[i].has_buf);
		assert_null(ds_optim_state(o, "exp_avg"));
		ds_optim_destroy(o);
	}
	/* torch: nesterov needs momentum > 0 and zero dampening */
	struct ds_optim_params hp;
	struct ds_optim *o;
	ds_optim_params_init(&hp, DS_OPTIM_SGD);
	hp.nesterov = 1;
	assert_int_equal(ds_optim_create(&o, &hp, 1, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "nesterov"));
	hp.momentum = 0.9;
	hp.dampening = 0.1;
	assert_int_equal(ds_optim_create(&o, &hp, 1, &err), DS_EINVAL);
}

/* spec case 17: ||p||/||u|| clamped to [min, max], 1 when a norm is 0 */
static void test_case17_trust_ratio(void **state)
{
	assert_float_equal(ds_lamb_trust_ratio(100, 1, 0.01, 10), 10, 0);
	assert_float_equal(ds_lamb_trust_ratio(0, 1, 0.01, 10), 1, 0);
	assert_float_equal(ds_lamb_trust_ratio(3, 0, 0.01, 10), 1, 0);
	assert_float_equal(ds_lamb_trust_ratio(1, 1000, 0.01, 10), 0.01, 0);
	assert_float_equal(ds_lamb_trust_ratio(2, 4, 0.01, 10), 0.5, 0);
}

static void lamb_tweak(struct ds_optim_params *hp)
{
	hp->lr = 0.01;
}

/* Lamb first step, g = +-1 per element, wd 0: m = 0.1g, v = 0.001,
 * u = 0.1g/(sqrt(0.001)+1e-8) = +-3.16228, step_size = lr*sqrt(0.001)/0.1.
 * Tensor A: p = 50 x4, ||p|| = 100, ||u|| = 6.32 -> r = 15.8 clamped to 10;
 * tensor B: p = 0 -> r = 1.  So A moves by 10*step_size*u ~ 0.1,
 * B by ~0.01. */
static void test_lamb_step(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_optim *o = make(DS_OPTIM_LAMB, 7, lamb_tweak);
	float p[7] = { 50, 50, 50, 50, 0, 0, 0 };
	float g[7] = { 1, -1, 1, 1, 1, -1, 1 };
	struct ds_range r[2] = { { 0, 4 }, { 4, 3 } };
	assert_int_equal(ds_optim_step(o, p, g, 1.0f, r, 2, &err), 0);
	double u = 0.1 / (sqrt(0.001) + 1e-8), ss = 0.01 * sqrt(0.001) / 0.1;
	assert_float_equal(p[0], 50 - ss * 10 * u, 2e-5);
	assert_float_equal(p[1], 50 + ss * 10 * u, 2e-5);
	assert_float_equal(p[0], 49.9, 1e-4);
	assert_float_equal(p[4], -ss * u, 1e-7);
	assert_float_equal(p[5], ss * u, 1e-7);
	assert_int_equal(o->step, 1);
	ds_optim_destroy(o);

	/* a range outside the shard is an error */
	o = make(DS_OPTIM_LAMB, 7, lamb_tweak);
	struct ds_range bad = { 5, 3 };
	assert_int_equal(ds_optim_step(o, p, g, 1.0f, &bad, 1, &err), DS_EINVAL);
	ds_optim_destroy(o);
}

/* eps_inside_sqrt: one element, p=0 (r=1), g=1, eps=1e-3:
 * inside u = 0.1/sqrt(0.001+0.001) = 2.23607, outside 0.1/(0.0316228+0.001) = 3.06534 */
static void lamb_inside(struct ds_optim_params *hp)
{
	hp->lr = 0.01;
	hp->eps = 1e-3;
	hp->eps_inside_sqrt = 1;
}
static void lamb_outside(struct ds_optim_params *hp)
{
	lamb_inside(hp);
	hp->eps_inside_sqrt = 0;
}
static void test_lamb_eps_inside(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_range r = { 0, 1 };
	double ss = 0.01 * sqrt(0.001) / 0.1;
	float g = 1;
	struct ds_optim *o = make(DS_OPTIM_LAMB, 1, lamb_inside);
	float p = 0;
	assert_int_equal(ds_optim_step(o, &p, &g, 1.0f, &r, 1, &err), 0);
	assert_float_equal(p, -ss * 2.2360680, 1e-7);
	ds_optim_destroy(o);
	o = make(DS_OPTIM_LAMB, 1, lamb_outside);
	p = 0;
	assert_int_equal(ds_optim_step(o, &p, &g, 1.0f, &r, 1, &err), 0);
	assert_float_equal(p, -ss * 3.0653430, 1e-7);
	ds_optim_destroy(o);
}

static void lamb_wd(struct ds_optim_params *hp)
{
	hp->lr = 0.02;
	hp->weight_decay = 0.01;
}

/* Two-phase Lamb over a tensor split between two "ranks" gives the same
 * parameters as one optimizer over the whole tensor (after the caller adds
 * the partial sums), to float rounding of the norms. */
static void test_lamb_two_phase(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	enum { N = 20011, H = 9000 };
	float *p = ds_alloc(N * sizeof(float)), *g = ds_alloc(N * sizeof(float)), *q = ds_alloc(N * sizeof(float));
	for (int i = 0; i < N; i++) {
		p[i] = q[i] = frand(-0.5f, 0.5f);
		g[i] = frand(-1, 1);
	}
	struct ds_optim *whole = make(DS_OPTIM_LAMB, N, lamb_wd);
	struct ds_range rw[2] = { { 0, 100 }, { 100, N - 100 } };
	for (int step = 0; step < 2; step++)
		assert_int_equal(ds_optim_step(whole, p, g, 1.0f, rw, 2, &err), 0);

	struct ds_optim *r0 = make(DS_OPTIM_LAMB, H, lamb_wd), *r1 = make(DS_OPTIM_LAMB, N - H, lamb_wd);
	/* rank 0 holds tensor 0 and the start of tensor 1, rank 1 the rest */
	struct ds_range a[2] = { { 0, 100 }, { 100, H - 100 } }, b[2] = { { 0, 0 }, { 0, N - H } };
	for (int step = 0; step < 2; step++) {
		double sa[4], sb[4], sum[4];
		assert_int_equal(ds_lamb_partial_norms(r0, q, g, 1.0f, a, 2, sa, &err), 0);
		assert_int_equal(ds_lamb_partial_norms(r1, q + H, g + H, 1.0f, b, 2, sb, &err), 0);
		for (int i = 0; i < 4; i++)
			sum[i] = sa[i] + sb[i];
		assert_int_equal(ds_lamb_apply(r0, q, a, 2, sum, &err), 0);
		assert_int_equal(ds_lamb_apply(r1, q + H, b, 2, sum, &err), 0);
	}
	double rel;
	assert_true(ds_test_close(q, p, N, 1e-6, &rel));
	assert_true(memcmp(ds_optim_state(r0, "exp_avg"), ds_optim_state(whole, "exp_avg"), H * sizeof(float)) == 0);
	assert_int_equal(r1->step, 2);
	ds_optim_destroy(whole);
	ds_optim_destroy(r0);
	ds_optim_destroy(r1);
	ds_free(p);
	ds_free(g);
	ds_free(q);
}

static void test_names_and_params(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	enum ds_optim_type t;
	assert_int_equal(ds_optim_type_from_name("ADAMW", &t, &err), 0);
	assert_int_equal(t, DS_OPTIM_ADAMW);
	assert_int_equal(ds_optim_type_from_name("lamb", &t, &err), 0);
	assert_int_equal(t, DS_OPTIM_LAMB);
	assert_int_equal(ds_optim_type_from_name("SGD", &t, &err), 0);
	assert_int_equal(t, DS_OPTIM_SGD);
	assert_int_equal(ds_optim_type_from_name("Adagrad", &t, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "does not implement"));
	assert_int_equal(ds_optim_type_from_name("RMSprop", &t, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "unknown"));

	struct ds_optim_params hp;
	ds_optim_params_init(&hp, DS_OPTIM_LAMB);
	assert_float_equal(hp.max_coeff, 10.0, 0);
	assert_float_equal(hp.min_coeff, 0.01, 0);
	assert_float_equal(hp.eps, 1e-8, 0);
	double betas[2] = { 0.8, 0.95 }, v = 2e-4, one = 1, half = 0.5;
	assert_int_equal(ds_optim_param_set(&hp, "betas", betas, 2, &err), 0);
	assert_float_equal(hp.beta1, 0.8, 0);
	assert_float_equal(hp.beta2, 0.95, 0);
	assert_int_equal(ds_optim_param_set(&hp, "betas", betas, 1, &err), DS_EINVAL);
	assert_int_equal(ds_optim_param_set(&hp, "lr", &v, 1, &err), 0);
	assert_float_equal(hp.lr, 2e-4, 0);
	assert_int_equal(ds_optim_param_set(&hp, "eps_inside_sqrt", &one, 1, &err), 0);
	assert_int_equal(hp.eps_inside_sqrt, 1);
	assert_int_equal(ds_optim_param_set(&hp, "eps_inside_sqrt", &half, 1, &err), DS_EINVAL);
	assert_int_equal(ds_optim_param_set(&hp, "nesterov", &one, 1, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "nesterov"));
	assert_int_equal(ds_optim_param_set(&hp, "lrr", &v, 1, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "unknown parameter"));
	assert_non_null(strstr(err.msg, "lrr"));
	ds_optim_params_init(&hp, DS_OPTIM_SGD);
	assert_int_equal(ds_optim_param_set(&hp, "nesterov", &one, 1, &err), 0);
	assert_int_equal(ds_optim_param_set(&hp, "momentum", &half, 1, &err), 0);
	assert_int_equal(ds_optim_params_check(&hp, &err), 0);
	assert_int_equal(ds_optim_param_set(&hp, "betas", betas, 2, &err), DS_EINVAL);
	ds_optim_params_init(&hp, DS_OPTIM_ADAM);
	betas[1] = 1.0;
	assert_int_equal(ds_optim_param_set(&hp, "betas", betas, 2, &err), 0);
	assert_int_equal(ds_optim_params_check(&hp, &err), DS_EINVAL);

	struct ds_optim *o = make(DS_OPTIM_ADAM, 3, NULL);
	assert_non_null(ds_optim_state(o, "exp_avg"));
	assert_non_null(ds_optim_state(o, "exp_avg_sq"));
	assert_null(ds_optim_state(o, "momentum_buffer"));
	assert_int_equal(o->nstates, 2);
	assert_string_equal(o->state_names[1], "exp_avg_sq");
	ds_optim_destroy(o);
	ds_optim_destroy(NULL);
}

/* spec case 25 and torch's clip_grad_norm_ factor */
static void test_case25_clip(void **state)
{
	assert_float_equal(ds_clip_combined_divisor(1000, 100, 1), 1000.0001, 1e-9);
	assert_float_equal(ds_clip_combined_divisor(50, 100, 1), 100, 0);
	assert_float_equal(ds_clip_combined_divisor(1000, 100, 0), 100, 0);   /* no clipping */
	assert_float_equal(ds_clip_coef(10, 1), 1 / (10 + 1e-6), 1e-15);
	assert_float_equal(ds_clip_coef(0.5, 1), 1, 0);
	assert_float_equal(ds_clip_coef(10, 0), 1, 0);
}

static void test_nonfinite_sumsq(void **state)
{
	enum { N = 300007 };
	float *x = ds_alloc(N * sizeof(float));
	double ref = 0;
	for (int i = 0; i < N; i++) {
		x[i] = frand(-2, 2);
		ref += (double)x[i] * x[i];
	}
	assert_false(ds_clip_has_nonfinite(x, N));
	double s = ds_clip_sumsq(x, N);
	assert_float_equal(s, ref, ref * 1e-12);
	assert_float_equal(ds_clip_sumsq(x, 5), (double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2] +
						  (double)x[3] * x[3] + (double)x[4] * x[4], 1e-12);
	assert_float_equal(ds_clip_sumsq(x, 0), 0, 0);
	x[N - 1] = INFINITY;   /* the last element of an odd length */
	assert_true(ds_clip_has_nonfinite(x, N));
	assert_false(ds_clip_has_nonfinite(x, N - 1));
	x[N - 1] = 0;
	x[123457] = NAN;
	assert_true(ds_clip_has_nonfinite(x, N));
	x[123457] = -INFINITY;
	assert_true(ds_clip_has_nonfinite(x, N));
	x[123457] = 3.4e38f;   /* large but finite */
	assert_false(ds_clip_has_nonfinite(x, N));
	assert_false(ds_clip_has_nonfinite(x, 0));
	float y[3] = { 1, -2, 4 };
	ds_clip_scale(y, 3, 0.5f);
	assert_float_equal(y[0], 0.5, 0);
	assert_float_equal(y[1], -1, 0);
	assert_float_equal(y[2], 2, 0);
	ds_free(x);
}

/* Results do not depend on the thread count (exact resume and the 1-rank
 * oracle need that): Lamb's chunked partial norms, the sum of squares and
 * Adam, with 1, 2 and 3 threads, bit for bit. */
static void test_thread_count_independent(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	enum { N = 200003 };
	float *g = ds_alloc(N * sizeof(float)), *p0 = ds_alloc(N * sizeof(float));
	float *p[3], *pa[3];
	double ss[3];
	for (int i = 0; i < N; i++) {
		p0[i] = frand(-1, 1);
		g[i] = frand(-1, 1);
	}
	struct ds_range r[3] = { { 0, 70000 }, { 70000, 3 }, { 70003, N - 70003 } };
	for (int t = 0; t < 3; t++) {
		omp_set_num_threads(t + 1);
		p[t] = ds_alloc(N * sizeof(float));
		pa[t] = ds_alloc(N * sizeof(float));
		memcpy(p[t], p0, N * sizeof(float));
		memcpy(pa[t], p0, N * sizeof(float));
		struct ds_optim *o = make(DS_OPTIM_LAMB, N, lamb_wd), *a = make(DS_OPTIM_ADAMW, N, set_two_step);
		for (int s = 0; s < 2; s++) {
			assert_int_equal(ds_optim_step(o, p[t], g, 0.5f, r, 3, &err), 0);
			assert_int_equal(ds_optim_step(a, pa[t], g, 0.5f, NULL, 0, &err), 0);
		}
		ss[t] = ds_clip_sumsq(p[t], N);
		ds_optim_destroy(o);
		ds_optim_destroy(a);
	}
	omp_set_num_threads(2);
	for (int t = 1; t < 3; t++) {
		assert_memory_equal(p[t], p[0], N * sizeof(float));
		assert_memory_equal(pa[t], pa[0], N * sizeof(float));
		assert_memory_equal(&ss[t], &ss[0], sizeof(double));
	}
	assert_true(memcmp(p[0], p0, N * sizeof(float)) != 0);
	for (int t = 0; t < 3; t++) {
		ds_free(p[t]);
		ds_free(pa[t]);
	}
	ds_free(g);
	ds_free(p0);
}

/* Lamb's AVX-512 kernels against the scalar ones: m and v bit for bit
 * (same float operations), the double partial sums to 1e-12 (another
 * addition order), p to the rounding of a trust ratio computed from them.
 * eps = 0 checks that the masked tail lanes (0/0) stay out of the sums. */
static void test_lamb_kernels_match_scalar(void **state)
{
	if (!ds_simd_supported(DS_SIMD_AVX512))
		skip();
	struct ds_err err = DS_ERR_INIT;
	static const size_t lens[] = { 1, 15, 17, 1000, 20011 };
	for (int variant = 0; variant < 3; variant++) {
		for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
			size_t n = lens[li];
			float *g = ds_alloc(n * sizeof(float)), *p[2];
			double sums[2][4];
			struct ds_optim *o[2];
			for (size_t i = 0; i < n; i++)
				g[i] = frand(-1, 1);
			struct ds_range r[2] = { { 0, n / 3 }, { n / 3, n - n / 3 } };
			for (int k = 0; k < 2; k++) {
				ds_simd_force(k ? DS_SIMD_AVX512 : DS_SIMD_SCALAR);
				lcg = 12345;
				p[k] = ds_alloc(n * sizeof(float));
				for (size_t i = 0; i < n; i++)
					p[k][i] = frand(-0.5f, 0.5f);
				o[k] = make(DS_OPTIM_LAMB, n, lamb_wd);
				o[k]->hp.eps = variant == 0 ? 1e-8 : variant == 1 ? 0.0 : 1e-6;
				o[k]->hp.eps_inside_sqrt = variant == 2;
				assert_int_equal(ds_optim_step(o[k], p[k], g, 0.5f, r, 2, &err), 0);
				assert_int_equal(ds_lamb_partial_norms(o[k], p[k], g, 0.5f, r, 2, sums[k], &err), 0);
				assert_int_equal(ds_lamb_apply(o[k], p[k], r, 2, sums[k], &err), 0);
			}
			ds_simd_force(DS_SIMD_AUTO);
			assert_memory_equal(ds_optim_state(o[0], "exp_avg"), ds_optim_state(o[1], "exp_avg"),
					    n * sizeof(float));
			assert_memory_equal(ds_optim_state(o[0], "exp_avg_sq"), ds_optim_state(o[1], "exp_avg_sq"),
					    n * sizeof(float));
			for (int i = 0; i < 4; i++) {
				assert_true(isfinite(sums[1][i]));
				assert_float_equal(sums[1][i], sums[0][i], fabs(sums[0][i]) * 1e-12);
			}
			double rel;
			assert_true(ds_test_close(p[1], p[0], (long)n, 1e-6, &rel));
			for (int k = 0; k < 2; k++) {
				ds_optim_destroy(o[k]);
				ds_free(p[k]);
			}
			ds_free(g);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_case16_adamw_step),
		cmocka_unit_test(test_case15_adam_mode),
		cmocka_unit_test(test_adam_two_steps),
		cmocka_unit_test(test_grad_mul),
		cmocka_unit_test(test_kernels_match_scalar),
		cmocka_unit_test(test_sgd),
		cmocka_unit_test(test_case17_trust_ratio),
		cmocka_unit_test(test_lamb_step),
		cmocka_unit_test(test_lamb_eps_inside),
		cmocka_unit_test(test_lamb_two_phase),
		cmocka_unit_test(test_lamb_kernels_match_scalar),
		cmocka_unit_test(test_names_and_params),
		cmocka_unit_test(test_case25_clip),
		cmocka_unit_test(test_nonfinite_sumsq),
		cmocka_unit_test(test_thread_count_independent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
