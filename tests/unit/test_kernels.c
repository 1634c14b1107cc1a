/* test_kernels.c - the per-element math (kernels/common) and the CPU kernels
 * (kernels/cpu) against hand-computed values and double-precision
 * derivatives; the AMX bf16 products against a double-precision product of
 * the bf16-rounded inputs.
 */
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gpt_math.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gpt_kernels.h"
#include "util/half.h"

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

/* x[i*ld + j] for i < rows, j < cols: values that bf16 cannot hold */
static void fill(float *x, int rows, int cols, int ld, unsigned seed)
{
	for (int i = 0; i < rows; i++)
		for (int j = 0; j < cols; j++) {
			seed = seed * 1664525u + 1013904223u;
			x[(size_t)i * ld + j] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 2.0f + 1e-4f;
		}
}

static float bf(float x) { return ds_bf16_to_fp32(ds_fp32_to_bf16(x)); }

/* ds_gemm_bf16 = alpha op(bf16(A)) op(bf16(B)) + beta C for the layouts the
 * model uses (NT forward, NN and TN backward, and TT), sizes that are not
 * multiples of AMX's 16x32 tiles, strided lda/ldb/ldc, alpha/beta; the
 * reference is the exact (double) product of the bf16-rounded inputs and
 * the bound fp32 accumulation order allows, 4(K+2) u sum|terms| (u = 2^-24).
 * The same bound rejects the product of the unrounded inputs (so a kernel
 * that skipped the rounding fails), beta 0 must not read C (NaN there), and
 * C's padding columns stay untouched.  Sizes start above oneDNN 2.6's AMX
 * minimum (about M, N > 8 and K > 16; smaller products answer -1 and stay on
 * sgemm).  Skipped where AMX is not usable. */
static void test_gemm_bf16(void **state)
{
	(void)state;
	if (!ds_gemm_bf16_usable()) {
		printf("# skipped: %s\n", ds_gemm_bf16_describe());
		skip();
	}
	static const int sz[][3] = { { 17, 18, 33 }, { 17, 33, 45 }, { 37, 19, 71 }, { 64, 48, 96 }, { 130, 77, 300 } };
	static const float ab[][2] = { { 1.0f, 0.0f }, { 0.5f, 1.0f }, { -1.25f, 0.75f } };
	int checked = 0, sensitive = 0;
	for (int lay = 0; lay < 4; lay++)
		for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
			for (size_t q = 0; q < sizeof ab / sizeof ab[0]; q++) {
				const int ta = lay == 2 || lay == 3, tb = lay == 0 || lay == 3;
				const int M = sz[s][0], N = sz[s][1], K = sz[s][2];
				const float alpha = ab[q][0], beta = ab[q][1];
				const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
				const int lda = ac + 3, ldb = bc + 5, ldc = N + 7;
				float *A = malloc(sizeof(float) * (size_t)ar * lda), *B = malloc(sizeof(float) * (size_t)br * ldb);
				float *C = malloc(sizeof(float) * (size_t)M * ldc), *C0 = malloc(sizeof(float) * (size_t)M * ldc);
				assert_non_null(A); assert_non_null(B); assert_non_null(C); assert_non_null(C0);
				fill(A, ar, ac, lda, 11u + (unsigned)s);
				fill(B, br, bc, ldb, 97u + (unsigned)q);
				fill(C0, M, ldc, ldc, 5u);
				if (beta == 0.0f)
					for (int i = 0; i < M; i++)
						for (int j = 0; j < N; j++)
							C0[(size_t)i * ldc + j] = NAN;
				memcpy(C, C0, sizeof(float) * (size_t)M * ldc);
				if (ds_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
					fail_msg("%s%s M%d N%d K%d alpha %g beta %g: not run on AMX", ta ? "T" : "N",
						 tb ? "T" : "N", M, N, K, alpha, beta);
				for (int i = 0; i < M; i++) {
					for (int j = 0; j < N; j++) {
						double r = 0, r32 = 0, mag = 0;
						for (int k = 0; k < K; k++) {
							float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
							float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
							r += (double)bf(a) * bf(b);
							r32 += (double)a * b;
							mag += fabs((double)bf(a) * bf(b));
						}
						double c0 = beta == 0.0f ? 0.0 : (double)C0[(size_t)i * ldc + j];
						double want = alpha * r + beta * c0, want32 = alpha * r32 + beta * c0;
						double tol = 4.0 * (K + 2) * ldexp(1.0, -24) * (fabs(alpha) * mag + fabs(beta * c0));
						double got = C[(size_t)i * ldc + j];
						if (!(fabs(got - want) <= tol))
							fail_msg("%s%s M%d N%d K%d alpha %g beta %g: C[%d,%d] = %.9g, want %.9g +- %.3g",
								 ta ? "T" : "N", tb ? "T" : "N", M, N, K, alpha, beta, i, j, got, want, tol);
						sensitive += fabs(want32 - want) > tol;
						checked++;
					}
					for (int j = N; j < ldc; j++)
						assert_true(memcmp(&C[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], sizeof(float)) == 0);
				}
				free(A); free(B); free(C); free(C0);
			}
	assert_true(sensitive > checked / 2);
	/* round to nearest even: 1 + 2^-8 is a tie that rounds to 1, 1 + 3 2^-8
	 * one that rounds up to 1 + 2^-6 (a (32,32) @ (32,32)^T product with
	 * one nonzero column) */
	float a[32 * 32] = { 0 }, b[32 * 32] = { 0 }, c[32 * 32];
	a[0] = 1.0f + 0x1p-8f;
	a[32] = 1.0f + 0x3p-8f;
	for (int j = 0; j < 32; j++)
		b[j * 32] = 1.0f;
	assert_int_equal(ds_gemm_bf16(0, 1, 32, 32, 32, 1.0f, a, 32, b, 32, 0.0f, c, 32), 0);
	for (int j = 0; j < 32; j++)
		assert_true(c[j] == 1.0f && c[32 + j] == 1.0f + 0x1p-6f && c[64 + j] == 0.0f);
	printf("# %d elements checked (%s)\n", checked, ds_gemm_bf16_describe());
}

/* ds_gemm_bf16_keep_b: same = 1 reuses the copy of B made by the previous
 * call (so a B changed in between is not seen: the caller's promise),
 * same = 0 converts again; a different B pointer is converted even with
 * same = 1. */
static void test_gemm_bf16_keep_b(void **state)
{
	(void)state;
	if (!ds_gemm_bf16_usable()) {
		printf("# skipped: %s\n", ds_gemm_bf16_describe());
		skip();
	}
	enum { M = 32, N = 48, K = 64 };
	static float a[M * K], b[N * K], b2[N * K], c[M * N];
	for (int i = 0; i < M * K; i++)
		a[i] = (float)(i % 7) - 3.0f;
	for (int i = 0; i < N * K; i++)
		b[i] = b2[i] = 1.0f;
	/* small integers: every product is exact, so sums are too */
	assert_int_equal(ds_gemm_bf16_keep_b(0, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N), 0);
	double row0 = 0;
	for (int k = 0; k < K; k++)
		row0 += a[k];
	assert_true(c[0] == (float)row0);
	for (int i = 0; i < N * K; i++)
		b[i] = 2.0f;
	assert_int_equal(ds_gemm_bf16_keep_b(1, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N), 0);
	assert_true(c[0] == (float)row0);           /* the kept copy of the ones */
	assert_int_equal(ds_gemm_bf16_keep_b(1, 0, 1, M, N, K, 1.0f, a, K, b2, K, 0.0f, c, N), 0);
	assert_true(c[0] == (float)row0);           /* another pointer: converted (ones) */
	assert_int_equal(ds_gemm_bf16_keep_b(1, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N), 0);
	assert_true(c[0] == (float)(2 * row0));     /* b2's copy did not match b: converted */
	for (int i = 0; i < N * K; i++)
		b[i] = 3.0f;
	assert_int_equal(ds_gemm_bf16_keep_b(0, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N), 0);
	assert_true(c[0] == (float)(3 * row0));     /* same = 0: converted again */
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
		cmocka_unit_test(test_gemm_bf16),
		cmocka_unit_test(test_gemm_bf16_keep_b),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
