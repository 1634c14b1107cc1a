/* test_kernels.c - the per-element math (kernels/common) and the CPU kernels
 * (kernels/cpu) against hand-computed values and double-precision
 * derivatives.
 */
#include "unit.h"

#include <math.h>
#include <string.h>

#include "common/gpt_math.h"
#include "cpu/gpt_kernels.h"

/* gelu tanh approximation at hand-computed points (GPT-2 / torch 'tanh'). */
static void test_gelu_values(void **state)
{
	(void)state;
	/* 0.5*1*(1+tanh(0.7978845608*(1.044715))) = 0.8411919906 */
	assert_true(fabsf(ds_gelu(1.0f) - 0.8411920f) < 1e-6f);
	assert_true(fabsf(ds_gelu(-1.0f) - (-0.1588080f)) < 1e-6f);
	assert_true(ds_gelu(0.0f) == 0.0f);
	assert_true(fabsf(ds_gelu(10.0f) - 10.0f) < 1e-5f);
	/* silu(1) = 1/(1+e^-1) = 0.7310585786 */
	assert_true(fabsf(ds_silu(1.0f) - 0.7310586f) < 1e-6f);
}

/* ds_expf within 2 ulp-ish of libm's exp over the range the kernels use */
static void test_expf_accuracy(void **state)
{
	(void)state;
	double worst = 0;
	for (double x = -87.0; x <= 88.0; x += 0.0137) {
		double want = exp((double)(float)x), got = ds_expf((float)x);
		double rel = fabs(got - want) / want;
		if (rel > worst)
			worst = rel;
	}
	assert_true(worst < 3e-7);
	assert_true(ds_expf(0.0f) == 1.0f);
	assert_true(ds_expf(-200.0f) < 1e-37f && ds_expf(-200.0f) >= 0.0f);
	/* tanh through it: odd, saturating, accurate to 1e-6 absolute */
	for (float x = -9.0f; x <= 9.0f; x += 0.011f)
		assert_true(fabsf(ds_tanhf(x) - tanhf(x)) < 1e-6f);
	assert_true(ds_tanhf(50.0f) == 1.0f && ds_tanhf(-50.0f) == -1.0f);
}

/* derivatives against central differences in double-sized steps */
static void test_act_grads(void **state)
{
	(void)state;
	for (float x = -4.0f; x <= 4.0f; x += 0.37f) {
		double h = 1e-3;
		double fd = (ds_gelu((float)(x + h)) - ds_gelu((float)(x - h))) / (2 * h);
		assert_true(fabs(fd - ds_gelu_grad(x)) < 2e-3);
		fd = (ds_silu((float)(x + h)) - ds_silu((float)(x - h))) / (2 * h);
		assert_true(fabs(fd - ds_silu_grad(x)) < 2e-3);
	}
}

/* rotary: a rotation (norm kept), undone by the inverse kernel call */
static void test_rotary_inverse(void **state)
{
	(void)state;
	enum { B = 1, T = 3, C = 16, NH = 2, RD = 4 };   /* hs 8: dims 4..7 unrotated */
	float qkv[B * T * 3 * C], orig[B * T * 3 * C], cs[T * RD / 2], sn[T * RD / 2];
	for (int i = 0; i < B * T * 3 * C; i++)
		orig[i] = qkv[i] = (float)sin(i + 1.0);
	for (int t = 0; t < T; t++)
		for (int i = 0; i < RD / 2; i++) {
			double f = pow(10000.0, -2.0 * i / RD);
			cs[t * RD / 2 + i] = (float)cos(t * f);
			sn[t * RD / 2 + i] = (float)sin(t * f);
		}
	ds_kernel_rotary(qkv, cs, sn, B, T, C, NH, RD, 0);
	/* position 0 is unchanged, v and the unrotated dims are untouched */
	assert_memory_equal(qkv, orig, 3 * C * sizeof(float));
	int bt = 2;
	float *x = qkv + bt * 3 * C, *o = orig + bt * 3 * C;
	/* pair (0, 2) of head 0 of q rotated by angle 2 */
	assert_true(fabsf(x[0] - (o[0] * cosf(2) - o[2] * sinf(2))) < 1e-6f);
	assert_true(fabsf(x[2] - (o[2] * cosf(2) + o[0] * sinf(2))) < 1e-6f);
	assert_true(x[4] == o[4] && x[2 * C + 1] == o[2 * C + 1]);
	ds_kernel_rotary(qkv, cs, sn, B, T, C, NH, RD, 1);
	for (int i = 0; i < B * T * 3 * C; i++)
		assert_true(fabsf(qkv[i] - orig[i]) < 1e-6f);
}

/* layernorm of (1,2,3,4): mean 2.5, var 1.25 */
static void test_layernorm_row(void **state)
{
	(void)state;
	float x[4] = { 1, 2, 3, 4 }, w[4] = { 1, 1, 2, 1 }, b[4] = { 0, 0, 0, 1 }, y[4], m, r;
	ds_kernel_layernorm_forward(y, &m, &r, x, w, b, 1, 4, 0.0f);
	assert_true(fabsf(m - 2.5f) < 1e-7f);
	assert_true(fabsf(r - 1.0f / sqrtf(1.25f)) < 1e-6f);
	assert_true(fabsf(y[0] - (-1.5f / sqrtf(1.25f))) < 1e-6f);
	assert_true(fabsf(y[2] - 2 * (0.5f / sqrtf(1.25f))) < 1e-6f);
	assert_true(fabsf(y[3] - (1.5f / sqrtf(1.25f) + 1)) < 1e-6f);
	/* rmsnorm (NeoX): rms = sqrt(30/4) */
	float rms, inv;
	ds_kernel_rmsnorm_forward(y, &rms, &inv, x, w, 1, 4, 0.0f);
	assert_true(fabsf(rms - sqrtf(7.5f)) < 1e-6f);
	assert_true(fabsf(y[2] - 2 * 3 / sqrtf(7.5f)) < 1e-6f);
}

/* cross-entropy over the real vocabulary only: logits (0, ln 3, 99 padded)
 * with V = 2: softmax (1/4, 3/4), loss of target 1 = ln(4/3). */
static void test_xent_padding(void **state)
{
	(void)state;
	float l[3] = { 0.0f, logf(3.0f), 99.0f }, lse;
	int32_t t = 1;
	double s = ds_kernel_xent_forward(&lse, l, &t, 1, 2, 3);
	assert_true(fabs(s - log(4.0 / 3.0)) < 1e-6);
	ds_kernel_xent_backward(l, &lse, &t, 1, 2, 3, 2.0f);
	assert_true(fabsf(l[0] - 0.5f) < 1e-6f);        /* 2 * 1/4 */
	assert_true(fabsf(l[1] - (-0.5f)) < 1e-6f);     /* 2 * (3/4 - 1) */
	assert_true(l[2] == 0.0f);
}

/* causal softmax rows by hand: T = 2, row 0 sees itself only, row 1 has
 * scores (0, ln 3) -> (1/4, 3/4); backward of d = (1, 0) on row 1:
 * a * (d - sum(a d)) = (1/4 * 3/4, 3/4 * -1/4), times scale 2 */
static void test_causal_softmax(void **state)
{
	(void)state;
	float att[4] = { 5.0f, 7.0f, 0.0f, logf(3.0f) };
	ds_kernel_causal_softmax_forward(att, 1, 1, 2);
	assert_true(att[0] == 1.0f && att[1] == 0.0f);
	assert_true(fabsf(att[2] - 0.25f) < 1e-7f && fabsf(att[3] - 0.75f) < 1e-7f);
	float d[4] = { 9.0f, 9.0f, 1.0f, 0.0f };
	ds_kernel_causal_softmax_backward(d, att, 1, 1, 2, 2.0f, 0.0f, NULL);
	assert_true(d[0] == 0.0f && d[1] == 0.0f);   /* one element: no gradient */
	assert_true(fabsf(d[2] - 2 * 3.0f / 16) < 1e-7f && fabsf(d[3] + 2 * 3.0f / 16) < 1e-7f);
}

/* dropout keeps about 1-p, scales by 1/(1-p), depends only on the stream */
static void test_dropout(void **state)
{
	(void)state;
	enum { N = 10000 };
	static float a[N], b[N];
	for (int i = 0; i < N; i++)
		a[i] = b[i] = 1.0f;
	struct ds_rng g;
	ds_rng_init(&g, 1, 2, 3);
	ds_kernel_dropout(a, N, &g, 0.25f);
	ds_kernel_dropout(b + 4, N - 4, &g, 0.25f);   /* different start: different mask */
	int kept = 0;
	for (int i = 0; i < N; i++) {
		assert_true(a[i] == 0.0f || fabsf(a[i] - 1.0f / 0.75f) < 1e-6f);
		kept += a[i] != 0.0f;
	}
	assert_true(kept > 7300 && kept < 7700);
	assert_true(memcmp(a, b + 4, 400 * sizeof(float)) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gelu_values),
		cmocka_unit_test(test_expf_accuracy),
		cmocka_unit_test(test_act_grads),
		cmocka_unit_test(test_rotary_inverse),
		cmocka_unit_test(test_layernorm_row),
		cmocka_unit_test(test_xent_padding),
		cmocka_unit_test(test_causal_softmax),
		cmocka_unit_test(test_dropout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
