/* test_kernels.c - the per-element math (kernels/common) and the CPU kernels
 * (kernels/cpu) against hand-computed values, libm's in double and
 * double-precision derivatives; every bf16 product implementation this CPU has (oneDNN on
 * AMX or AVX512_BF16, dstk's AVX512_BF16 kernel, and always the kernel's
 * portable micro-kernel) against a double-precision product of the
 * bf16-rounded inputs.
 */
#include "unit.h"

#include <math.h>
#include <omp.h>
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

/* exact (erf) GeLU: x Phi(x) and Phi(x) + x phi(x), the values computed by
 * hand from the normal distribution (mpmath, 30 digits) and at every point
 * of a fine grid against libm's erfc and exp in double */
static double gelu_erf_ref(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double gelu_erf_grad_ref(double x)
{
	return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}

static void test_gelu_exact_values(void **state)
{
	(void)state;
	static const struct { float x; double y, dy; } pt[] = {
		{ -3.0f, -0.00404969409489, -0.0119456472042 }, { -1.0f, -0.158655253931, -0.0833154705877 },
		{ -0.5f, -0.154268769363, 0.132504875344 },     { 0.0f, 0.0, 0.5 },
		{ 0.5f, 0.345731230637, 0.867495124656 },       { 1.0f, 0.841344746069, 1.08331547059 },
		{ 3.0f, 2.99595030591, 1.0119456472 },
	};
	for (size_t i = 0; i < sizeof(pt) / sizeof(pt[0]); i++) {
		double y = ds_gelu_exact(pt[i].x), dy = ds_gelu_exact_grad(pt[i].x);
		/* a few float ulps of the value (and 1e-6 relative in the tail at -3) */
		assert_true(fabs(y - pt[i].y) <= 2e-7 * fmax(1.0, fabs(pt[i].x)) && fabs(y - pt[i].y) <= 1e-6 * fabs(pt[i].y) + 1e-9);
		assert_true(fabs(dy - pt[i].dy) < 3e-7);
		/* and not the tanh form, 1.7e-5 to 4.1e-4 away at these points */
		if (pt[i].x != 0.0f)
			assert_true(fabs(ds_gelu(pt[i].x) - pt[i].y) > 1e-5);
	}
	assert_true(ds_gelu_exact(0.0f) == 0.0f);
	assert_true(ds_gelu_exact(12.0f) == 12.0f && ds_gelu_exact(-12.0f) <= 0.0f && ds_gelu_exact(-12.0f) > -1e-30f);
	double worst = 0, worst_tail = 0, worst_grad = 0;
	for (double xd = -10.0; xd <= 10.0; xd += 1.3e-3) {
		float x = (float)xd;
		double want = gelu_erf_ref(x), got = ds_gelu_exact(x);
		worst = fmax(worst, fabs(got - want) / fmax(1.0, fabs((double)x)));
		if (x < 0.0f && x > -6.0f)   /* the tail keeps its relative accuracy */
			worst_tail = fmax(worst_tail, fabs(got - want) / fabs(want));
		worst_grad = fmax(worst_grad, fabs(ds_gelu_exact_grad(x) - gelu_erf_grad_ref(x)));
	}
	printf("# gelu_exact: |err| / max(1, |x|) %.2g, tail relative %.2g, derivative %.2g\n", worst, worst_tail,
	       worst_grad);
	assert_true(worst < 1.5e-7);
	assert_true(worst_tail < 5e-6);
	assert_true(worst_grad < 4e-7);
}

/* The CPU activation kernels on rows of [a | b] against the double
 * references: act 3 gelu_exact out = gelu(x), act 4 geglu_exact out =
 * gelu(a) b, and their backward (d = gelu'(x) g; da = gelu'(a) b g, db =
 * gelu(a) g) */
static void test_act_kernels_exact(void **state)
{
	(void)state;
	enum { N = 3, F = 37 };
	float in[N * 2 * F], g[N * F], out[N * F], d[N * 2 * F];
	for (int i = 0; i < N * 2 * F; i++)
		in[i] = (float)(4.0 * sin(0.7 * i + 0.3));
	for (int i = 0; i < N * F; i++)
		g[i] = (float)cos(1.3 * i);
	ds_kernel_act_forward(out, in, N, F, 3);
	ds_kernel_act_backward(d, g, in, N, F, 3);
	for (int i = 0; i < N * F; i++) {
		assert_true(fabs(out[i] - gelu_erf_ref(in[i])) < 1e-6);
		assert_true(fabs(d[i] - gelu_erf_grad_ref(in[i]) * g[i]) < 1e-6);
	}
	ds_kernel_act_forward(out, in, N, F, 4);
	ds_kernel_act_backward(d, g, in, N, F, 4);
	for (int n = 0; n < N; n++)
		for (int f = 0; f < F; f++) {
			double a = in[n * 2 * F + f], b = in[n * 2 * F + F + f], gg = g[n * F + f];
			assert_true(fabs(out[n * F + f] - gelu_erf_ref(a) * b) < 4e-6);
			assert_true(fabs(d[n * 2 * F + f] - gelu_erf_grad_ref(a) * b * gg) < 4e-6);
			assert_true(fabs(d[n * 2 * F + F + f] - gelu_erf_ref(a) * gg) < 4e-6);
		}
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
		fd = (ds_gelu_exact((float)(x + h)) - ds_gelu_exact((float)(x - h))) / (2 * h);
		assert_true(fabs(fd - ds_gelu_exact_grad(x)) < 2e-3);
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

/* The implementations to test here: every one this build and CPU can run
 * (the portable one always), each printed with why an absent one is. */
static int impls(enum ds_bf16_impl *out)
{
	static const enum ds_bf16_impl all[] = { DS_BF16_ONEDNN, DS_BF16_KERNEL, DS_BF16_PORTABLE };
	static const char *const name[] = { "oneDNN", "kernel", "portable" };
	int n = 0;
	for (int i = 0; i < 3; i++) {
		const char *why = NULL;
		if (ds_gemm_bf16_available(all[i], &why))
			out[n++] = all[i];
		else
			printf("# %s: not on this build/CPU (%s)\n", name[i], why);
	}
	return n;
}

static const char *impl_name(enum ds_bf16_impl im)
{
	return im == DS_BF16_ONEDNN ? "oneDNN" : im == DS_BF16_KERNEL ? "kernel" : "portable";
}

/* C (M, ldc) against alpha op(bf16(A)) op(bf16(B)) + beta C0 in double,
 * within the bound fp32 accumulation order allows, 4(K+2) u sum|terms|
 * (u = 2^-24); beta 0 takes 0 for C0.  Returns the number of elements where
 * the product of the unrounded inputs falls outside that bound (a kernel
 * that skipped the rounding would fail there).  C's padding columns must
 * equal C0's. */
static int check_prod(const char *what, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
		      const float *B, int ldb, float beta, const float *C0, const float *C, int ldc)
{
	int sensitive = 0;
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
				fail_msg("%s %s%s M%d N%d K%d alpha %g beta %g: C[%d,%d] = %.9g, want %.9g +- %.3g", what,
					 ta ? "T" : "N", tb ? "T" : "N", M, N, K, alpha, beta, i, j, got, want, tol);
			sensitive += fabs(want32 - want) > tol;
		}
		for (int j = N; j < ldc; j++)
			assert_true(memcmp(&C[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], sizeof(float)) == 0);
	}
	return sensitive;
}

/* ds_gemm_bf16 = alpha op(bf16(A)) op(bf16(B)) + beta C (check_prod) for
 * every implementation here, the layouts the model uses (NT forward, NN
 * and TN backward, and TT), sizes that are not multiples of AMX's 16x32
 * tiles or of the kernel's 6x64 micro-tile and 16-pair packing blocks, odd
 * K, K beyond one 256-deep K block (the kernel's accumulation across
 * blocks), strided lda/ldb/ldc, alpha/beta; beta 0 must not read C (NaN
 * there), and C's padding columns stay untouched.  Sizes start above
 * oneDNN 2.6's AMX minimum (about M, N > 8 and K > 16; smaller products
 * may answer -1 there and stay on sgemm).  No implementation is skipped
 * for want of AMX: the portable micro-kernel runs on every CPU. */
static void test_gemm_bf16(void **state)
{
	(void)state;
	/* the last two: A split into several work items of streamed panels
	 * (M well above N), and B (N above M), each over three K blocks */
	static const int sz[][3] = { { 17, 18, 33 }, { 17, 33, 45 }, { 37, 19, 71 }, { 64, 48, 96 }, { 130, 77, 300 },
				     { 23, 150, 601 }, { 203, 21, 533 }, { 13, 330, 517 } };
	static const float ab[][2] = { { 1.0f, 0.0f }, { 0.5f, 1.0f }, { -1.25f, 0.75f } };
	enum ds_bf16_impl im[3];
	const int nim = impls(im);
	assert_true(nim >= 1);
	for (int v = 0; v < nim; v++) {
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
					if (ds_gemm_bf16(im[v], ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
						fail_msg("%s %s%s M%d N%d K%d alpha %g beta %g: not run", impl_name(im[v]),
							 ta ? "T" : "N", tb ? "T" : "N", M, N, K, alpha, beta);
					sensitive += check_prod(impl_name(im[v]), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta,
								C0, C, ldc);
					checked += M * N;
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
		assert_int_equal(ds_gemm_bf16(im[v], 0, 1, 32, 32, 32, 1.0f, a, 32, b, 32, 0.0f, c, 32), 0);
		for (int j = 0; j < 32; j++)
			assert_true(c[j] == 1.0f && c[32 + j] == 1.0f + 0x1p-6f && c[64 + j] == 0.0f);
		printf("# %s: %d elements checked\n", impl_name(im[v]), checked);
	}
	printf("# oneDNN: %s\n", ds_gemm_bf16_onednn_describe());
}

/* ds_gemm_bf16_batch: attention's per-(b, head) products, entry e at
 * (e / inner) * s[0] + (e % inner) * s[1] on strided views (lda 3C), as
 * gpt.c issues them, for batches smaller and larger than the thread count
 * (the kernel runs those two differently); every entry against
 * check_prod, and memory between the entries' outputs untouched. */
static void test_gemm_bf16_batch(void **state)
{
	(void)state;
	enum ds_bf16_impl im[3];
	const int nim = impls(im);
	enum { T = 40, hs = 24, NH = 3, C = NH * hs, C3 = 3 * C };
	const int nt = omp_get_max_threads();
	for (int v = 0; v < nim; v++)
		for (int Bn = 1; Bn <= 7; Bn += 6) {   /* 3 products on 4 threads, 21 on the default */
			omp_set_num_threads(Bn == 1 ? 4 : nt);
			const int n = Bn * NH;
			const long TT = (long)T * T;
			float *qkv = malloc(sizeof(float) * (size_t)Bn * T * C3);
			float *S = malloc(sizeof(float) * (size_t)n * TT), *S0 = malloc(sizeof(float) * (size_t)n * TT);
			float *y = malloc(sizeof(float) * (size_t)Bn * T * C), *y0 = malloc(sizeof(float) * (size_t)Bn * T * C);
			assert_non_null(qkv); assert_non_null(S); assert_non_null(S0); assert_non_null(y); assert_non_null(y0);
			fill(qkv, Bn * T, C3, C3, 3u);
			fill(S0, n, (int)TT, (int)TT, 7u);
			memcpy(S, S0, sizeof(float) * (size_t)n * TT);
			/* S[b,h] (T,T) = 0.5 q k^T, q and k strided views of qkv */
			const struct ds_gemm_bf16_batch sb = { n, NH, { (long)T * C3, hs }, { (long)T * C3, hs }, { NH * TT, TT }, DS_GEMM_BF16_DENSE, 0, NULL, NULL };
			assert_int_equal(ds_gemm_bf16_batch(im[v], &sb, 0, 1, T, T, hs, 0.5f, qkv, C3, qkv + C, C3, 0.0f, S,
							    T), 0);
			for (int e = 0; e < n; e++) {
				const long oq = (e / NH) * (long)T * C3 + (e % NH) * hs, os = (long)e * TT;
				check_prod(impl_name(im[v]), 0, 1, T, T, hs, 0.5f, qkv + oq, C3, qkv + oq + C, C3, 0.0f, S0 + os,
					   S + os, T);
			}
			/* y[b,:,h] (T,hs) = S[b,h] @ v: strided output (ldc C), beta 1 and
			 * beta 0 (which oneDNN shares out over the threads where the
			 * batch has two entries per thread) */
			for (int bz = 0; bz < 2; bz++) {
				fill(y0, Bn * T, C, C, 9u);
				memcpy(y, y0, sizeof(float) * (size_t)Bn * T * C);
				const struct ds_gemm_bf16_batch yb = { n, NH, { NH * TT, TT }, { (long)T * C3, hs }, { (long)T * C, hs }, DS_GEMM_BF16_DENSE, 0, NULL, NULL };
				assert_int_equal(ds_gemm_bf16_batch(im[v], &yb, 0, 0, T, hs, T, 1.0f, S, T, qkv + 2 * C, C3,
								    bz ? 0.0f : 1.0f, y, C), 0);
				for (int e = 0; e < n; e++) {
					const long os = (long)e * TT, ov = (e / NH) * (long)T * C3 + 2 * C + (e % NH) * hs,
						   oy = (e / NH) * (long)T * C + (e % NH) * hs;
					/* ldc C: the columns past hs belong to the other heads, checked by their own entry */
					for (int i = 0; i < T; i++)
						for (int j = 0; j < hs; j++) {
							double r = 0, mag = 0;
							for (int k = 0; k < T; k++) {
								double t = (double)bf(S[os + (long)i * T + k]) * bf(qkv[ov + (long)k * C3 + j]);
								r += t;
								mag += fabs(t);
							}
							double c0 = bz ? 0.0 : y0[oy + (long)i * C + j], want = r + c0;
							double tol = 4.0 * (T + 2) * ldexp(1.0, -24) * (mag + fabs(c0));
							if (!(fabs(y[oy + (long)i * C + j] - want) <= tol))
								fail_msg("%s batch y (beta %d) entry %d [%d,%d] = %.9g, want %.9g",
									 impl_name(im[v]), 1 - bz, e, i, j, y[oy + (long)i * C + j], want);
						}
				}
			}
			free(qkv); free(S); free(S0); free(y); free(y0);
		}
	omp_set_num_threads(nt);
}

/* ds_gemm_bf16_batch with the causal mask's structure, as gpt.c gives it
 * for attention: C_LOWER (scores: only n <= m wanted), A_LOWER
 * (probabilities times values), A_UPPER (transposed probabilities times a
 * gradient, beta 0 with C NaN and beta 1): the wanted entries against the
 * double product of the bf16-rounded inputs with the zeros in place, for
 * T that spans several micro-tiles and K blocks (300) or ends in a short
 * micro-tile (41), batches run whole
 * per thread (6 entries) and one at a time over the threads (2 entries on
 * 4 threads); oneDNN and sgemm ignore the hint (dense is right too). */
static void test_gemm_bf16_causal(void **state)
{
	(void)state;
	enum ds_bf16_impl im[3];
	const int nim = impls(im);
	const int nt = omp_get_max_threads();
	static const int Ts[] = { 41, 300 };   /* 41: a last micro-tile of 5 rows, an odd diagonal */
	enum { hs = 24 };
	for (int v = 0; v < nim; v++)
		for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
			for (int n = 2; n <= 6; n += 4) {
				omp_set_num_threads(n == 2 ? 4 : nt);
				const int T = Ts[ti];
				const long TT = (long)T * T, Th = (long)T * hs;
				float *q = malloc(sizeof(float) * n * Th), *k = malloc(sizeof(float) * n * Th);
				float *P = malloc(sizeof(float) * n * TT), *S = malloc(sizeof(float) * n * TT);
				float *y = malloc(sizeof(float) * n * Th), *y0 = malloc(sizeof(float) * n * Th);
				assert_non_null(q); assert_non_null(k); assert_non_null(P); assert_non_null(S);
				assert_non_null(y); assert_non_null(y0);
				fill(q, n * T, hs, hs, 21u);
				fill(k, n * T, hs, hs, 22u);
				fill(P, n * T, T, T, 23u);
				for (int e = 0; e < n; e++)   /* causal: zero above the diagonal */
					for (int i = 0; i < T; i++)
						for (int j = i + 1; j < T; j++)
							P[e * TT + (long)i * T + j] = 0.0f;
				/* scores: S = q k^T, lower triangle */
				const struct ds_gemm_bf16_batch sb = { n, 1, { Th, 0 }, { Th, 0 }, { TT, 0 }, DS_GEMM_BF16_C_LOWER, 0, NULL, NULL };
				for (long i = 0; i < n * TT; i++)
					S[i] = NAN;
				assert_int_equal(ds_gemm_bf16_batch(im[v], &sb, 0, 1, T, T, hs, 0.5f, q, hs, k, hs, 0.0f, S, T), 0);
				for (int e = 0; e < n; e++)
					for (int i = 0; i < T; i++)
						for (int j = 0; j <= i; j++) {
							double r = 0, mag = 0;
							for (int x = 0; x < hs; x++) {
								const double t = (double)bf(q[e * Th + i * hs + x]) * bf(k[e * Th + j * hs + x]);
								r += t;
								mag += fabs(t);
							}
							const double got = S[e * TT + (long)i * T + j];
							if (!(fabs(got - 0.5 * r) <= 4.0 * (hs + 2) * ldexp(1.0, -24) * 0.5 * mag))
								fail_msg("%s causal S T%d entry %d [%d,%d] = %.9g, want %.9g", impl_name(im[v]),
									 T, e, i, j, got, 0.5 * r);
						}
				/* y = P v (A_LOWER, beta 1) and dv = P^T dy (A_UPPER, beta 0 and 1) */
				for (int w = 0; w < 3; w++) {
					const int ta = w > 0;
					const float beta = w == 1 ? 0.0f : 1.0f;
					const struct ds_gemm_bf16_batch yb = { n, 1, { TT, 0 }, { Th, 0 }, { Th, 0 },
									       ta ? DS_GEMM_BF16_A_UPPER : DS_GEMM_BF16_A_LOWER, 0, NULL, NULL };
					fill(y0, n * T, hs, hs, 24u + (unsigned)w);
					if (beta == 0.0f)
						for (long i = 0; i < n * Th; i++)
							y0[i] = NAN;
					memcpy(y, y0, sizeof(float) * n * Th);
					assert_int_equal(ds_gemm_bf16_batch(im[v], &yb, ta, 0, T, hs, T, 1.0f, P, T, q, hs, beta, y, hs),
							 0);
					for (int e = 0; e < n; e++)
						check_prod(impl_name(im[v]), ta, 0, T, hs, T, 1.0f, P + e * TT, T, q + e * Th, hs, beta,
							   y0 + e * Th, y + e * Th, hs);
				}
				free(q); free(k); free(P); free(S); free(y); free(y0);
			}
	omp_set_num_threads(nt);
}

/* ds_gemm_bf16_keep_b: same = 1 reuses the copy of B made by the previous
 * call (so a B changed in between is not seen: the caller's promise),
 * same = 0 converts again; a different B pointer is converted even with
 * same = 1.  For every implementation here. */
static void test_gemm_bf16_keep_b(void **state)
{
	(void)state;
	enum ds_bf16_impl im[3];
	const int nim = impls(im);
	enum { M = 32, N = 300, K = 64 };   /* B: 5 panels of the kernel, split over the threads */
	static float a[M * K], b[N * K], b2[N * K], c[M * N];
	for (int v = 0; v < nim; v++) {
		const enum ds_bf16_impl x = im[v];
		for (int i = 0; i < M * K; i++)
			a[i] = (float)(i % 7) - 3.0f;
		for (int i = 0; i < N * K; i++)
			b[i] = b2[i] = 1.0f;
		/* small integers: every product is exact, so sums are too */
		assert_int_equal(ds_gemm_bf16_keep_b(x, 0, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N), 0);
		double row0 = 0;
		for (int k = 0; k < K; k++)
			row0 += a[k];
		assert_true(c[0] == (float)row0);
		for (int i = 0; i < N * K; i++)
			b[i] = 2.0f;
		assert_int_equal(ds_gemm_bf16_keep_b(x, 1, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N), 0);
		assert_true(c[0] == (float)row0);           /* the kept copy of the ones */
		assert_int_equal(ds_gemm_bf16_keep_b(x, 1, 0, 1, M, N, K, 1.0f, a, K, b2, K, 0.0f, c, N), 0);
		assert_true(c[0] == (float)row0);           /* another pointer: converted (ones) */
		assert_int_equal(ds_gemm_bf16_keep_b(x, 1, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N), 0);
		assert_true(c[0] == (float)(2 * row0));     /* b2's copy did not match b: converted */
		for (int i = 0; i < N * K; i++)
			b[i] = 3.0f;
		assert_int_equal(ds_gemm_bf16_keep_b(x, 0, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N), 0);
		assert_true(c[0] == (float)(3 * row0));     /* same = 0: converted again */
		for (int i = 0; i < M; i++) {               /* every row and column of the last */
			double r = 0;
			for (int k = 0; k < K; k++)
				r += a[i * K + k];
			for (int j = 0; j < N; j++)
				assert_true(c[i * N + j] == (float)(3 * r));
		}
	}
}

/* A batch's bf16 copies of A and B (bt->a16/b16): every implementation
 * reads them in place of converting A and B (oneDNN as its operands,
 * dstk's kernels as they pack), and the bits are those without copies.
 * Cases: one dense product (oneDNN uses the copies in place), one with
 * lda/ldb wider than the rows (oneDNN copies them row by row), a beta-1
 * batch (a product at a time) and a beta-0 batch of two entries per
 * thread or more (whole products per thread), all on strided views.
 * Copies of -A and -B then show the copies are read: C must be exactly
 * the product (the signs cancel), and -C (plus beta C) where only one copy
 * is negated. */
static void test_gemm_bf16_copies(void **state)
{
	(void)state;
	enum ds_bf16_impl im[3];
	const int nim = impls(im);
	enum { M = 40, N = 36, K = 48, LD = 56, NB = 8 };
	const size_t na = (size_t)NB * M * LD, nb = (size_t)NB * N * LD, nc = (size_t)NB * M * N;
	float *A = malloc(na * 4), *B = malloc(nb * 4), *mA = malloc(na * 4), *mB = malloc(nb * 4);
	float *C0 = malloc(nc * 4), *C1 = malloc(nc * 4);
	uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2), *ma16 = malloc(na * 2), *mb16 = malloc(nb * 2);
	assert_non_null(A); assert_non_null(B); assert_non_null(mA); assert_non_null(mB);
	assert_non_null(C0); assert_non_null(C1);
	assert_non_null(a16); assert_non_null(b16); assert_non_null(ma16); assert_non_null(mb16);
	fill(A, NB * M, LD, LD, 11u);
	fill(B, NB * N, LD, LD, 12u);
	for (size_t i = 0; i < na; i++)
		mA[i] = -A[i];
	for (size_t i = 0; i < nb; i++)
		mB[i] = -B[i];
	ds_fp32_to_bf16_n(a16, A, na);
	ds_fp32_to_bf16_n(b16, B, nb);
	ds_fp32_to_bf16_n(ma16, mA, na);
	ds_fp32_to_bf16_n(mb16, mB, nb);
	for (int v = 0; v < nim; v++) {
		for (int c = 0; c < 4; c++) {
			/* c 0: one dense (lda K), 1: one with lda LD, 2: batch beta 1, 3: batch beta 0 */
			const int cnt = c < 2 ? 1 : NB, ld = c == 0 ? K : LD;
			const float beta = c == 2 ? 1.0f : 0.0f;
			struct ds_gemm_bf16_batch bt = { cnt, 2, { 2L * M * LD, (long)M * LD }, { 2L * N * LD, (long)N * LD },
							 { 2L * M * N, (long)M * N }, DS_GEMM_BF16_DENSE, 0, NULL, NULL };
			fill(C0, NB * M, N, N, 13u);
			memcpy(C1, C0, nc * 4);
			const float *Cin = C1;
			assert_int_equal(ds_gemm_bf16_batch(im[v], &bt, 0, 1, M, N, K, 1.0f, A, ld, B, ld, beta, C0, N), 0);
			for (int e = 0; e < cnt; e++)
				check_prod(impl_name(im[v]), 0, 1, M, N, K, 1.0f, A + (size_t)e * M * LD, ld,
					   B + (size_t)e * N * LD, ld, beta, Cin + (size_t)e * M * N, C0 + (size_t)e * M * N, N);
			/* copies of A and B: the same bits */
			float *Cb = malloc(nc * 4);
			assert_non_null(Cb);
			for (int w = 0; w < 4; w++) {
				/* w 0: both copies, 1: copies of -A and -B, 2: of -A only, 3: of -B only */
				memcpy(Cb, C1, nc * 4);
				bt.a16 = w == 0 || w == 3 ? a16 : ma16;
				bt.b16 = w == 0 || w == 2 ? b16 : mb16;
				assert_int_equal(ds_gemm_bf16_batch(im[v], &bt, 0, 1, M, N, K, 1.0f, A, ld, B, ld, beta, Cb, N), 0);
				const int neg = w >= 2;
				for (size_t i = 0; i < (size_t)cnt * M * N; i++) {
					const float want = neg ? 2.0f * beta * C1[i] - C0[i] : C0[i];
					if (neg ? !(fabsf(Cb[i] - want) <= 1e-4f * (1.0f + fabsf(want)))
						: memcmp(&Cb[i], &C0[i], sizeof(float)) != 0)
						fail_msg("%s case %d copies %d: C[%zu] = %.9g, want %.9g", impl_name(im[v]), c,
							 w, i, Cb[i], want);
				}
			}
			free(Cb);
		}
	}
	free(A), free(B), free(mA), free(mB), free(C0), free(C1), free(a16), free(b16), free(ma16), free(mb16);
}

/* bf16 bits of x as the kernels round it */
static uint16_t h16(float x) { return ds_fp32_to_bf16(x); }

/* ds_gemm_bf16_ex: A given as bf16 values (as the model keeps its logits'
 * gradient), C written as bf16 (its logits), alone and together, in the
 * layouts the model uses (A16 NN and TN, C16 NT), sizes that split into
 * several work items and K blocks: against the double product of the
 * bf16-rounded inputs (A16: the same A in fp32 through check_prod's
 * bound), C16 between the bf16 roundings of that bound's ends (one
 * rounding to nearest of a sum within it);
 * beta must be 0 with a bf16 C; C's padding untouched.  Every
 * implementation but sgemm runs it (oneDNN too, for the head's bf16
 * logits), and each reads B's bf16 copy where one is given: the same bits
 * as without it, and a copy of -B negates C. */
static void test_gemm_bf16_ex(void **state)
{
	(void)state;
	/* the last: K deep enough that the whole-packed operand goes in two
	 * super-blocks (as the head's backward, K = the vocabulary) */
	static const int sz[][3] = { { 37, 19, 71 }, { 203, 21, 533 }, { 13, 330, 517 }, { 64, 150, 64 },
				     { 40, 70, 13001 } };
	enum ds_bf16_impl im[3];
	const int nim = impls(im);
	for (int v = 0; v < nim; v++) {
		int checked = 0;
		for (int lay = 0; lay < 3; lay++)
			for (size_t q = 0; q < sizeof sz / sizeof sz[0]; q++)
				for (int c16 = 0; c16 < 2; c16++) {
					/* lay 0: NN A16, 1: TN A16, 2: NT C16 (c16 adds C16 to the first two) */
					const int ta = lay == 1, tb = lay == 2, a16 = lay < 2;
					const unsigned fl = (a16 ? DS_GEMM_BF16_A16 : 0) | (c16 || lay == 2 ? DS_GEMM_BF16_C16 : 0);
					if (lay == 2 && c16)
						continue;
					const int M = sz[q][0], N = sz[q][1], K = sz[q][2];
					const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
					const int lda = ac + 3, ldb = bc + 5, ldc = N + 7;
					const float alpha = 0.75f;
					float *A = malloc(sizeof(float) * (size_t)ar * lda), *B = malloc(sizeof(float) * (size_t)br * ldb);
					float *C = malloc(sizeof(float) * (size_t)M * ldc), *C0 = malloc(sizeof(float) * (size_t)M * ldc);
					uint16_t *Ah = malloc(sizeof(uint16_t) * (size_t)ar * lda);
					uint16_t *Ch = malloc(sizeof(uint16_t) * (size_t)M * ldc);
					uint16_t *Bh = malloc(sizeof(uint16_t) * (size_t)br * ldb);
					float *Cb = malloc(sizeof(float) * (size_t)M * ldc);
					uint16_t *Chb = malloc(sizeof(uint16_t) * (size_t)M * ldc);
					assert_non_null(A); assert_non_null(B); assert_non_null(C); assert_non_null(C0);
					assert_non_null(Ah); assert_non_null(Ch); assert_non_null(Bh); assert_non_null(Cb);
					assert_non_null(Chb);
					fill(A, ar, ac, lda, 31u + (unsigned)q);
					fill(B, br, bc, ldb, 77u + (unsigned)lay);
					for (size_t i = 0; i < (size_t)ar * lda; i++) {   /* A holds bf16 values */
						Ah[i] = h16(A[i]);
						A[i] = ds_bf16_to_fp32(Ah[i]);
					}
					for (size_t i = 0; i < (size_t)M * ldc; i++) {
						C0[i] = NAN;   /* beta 0: never read */
						Ch[i] = 0x7fc1;
					}
					const int fl_c = !!(fl & DS_GEMM_BF16_C16);
					memcpy(C, C0, sizeof(float) * (size_t)M * ldc);
					int rc = ds_gemm_bf16_ex(im[v], fl, ta, tb, M, N, K, alpha, a16 ? (const void *)Ah : A, lda, B,
								 ldb, NULL, 0.0f, fl_c ? (void *)Ch : C, ldc);
					if (rc)
						fail_msg("%s ex %u %s%s M%d N%d K%d: not run", impl_name(im[v]), fl, ta ? "T" : "N",
							 tb ? "T" : "N", M, N, K);
					if (!fl_c) {
						check_prod(impl_name(im[v]), ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C0, C, ldc);
					} else {
						/* one bf16 rounding (monotonic) of a sum within check_prod's
						 * bound: between the roundings of the bound's ends */
						for (int i = 0; i < M; i++) {
							for (int j = 0; j < N; j++) {
								double r = 0, mag = 0;
								for (int k = 0; k < K; k++) {
									const double t = (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
											 bf(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
									r += t;
									mag += fabs(t);
								}
								const double want = alpha * r, tol = 4.0 * (K + 2) * ldexp(1.0, -24) * alpha * mag;
								const float g = ds_bf16_to_fp32(Ch[(size_t)i * ldc + j]);
								const float lo = ds_bf16_to_fp32(h16(nextafterf((float)(want - tol), -INFINITY))),
									    hi = ds_bf16_to_fp32(h16(nextafterf((float)(want + tol), INFINITY)));
								if (!(g >= lo && g <= hi))
									fail_msg("%s C16 M%d N%d K%d: C[%d,%d] = %.9g, want %.9g +- %.3g rounded", impl_name(im[v]),
										 M, N, K, i, j, g, want, tol);
							}
							for (int j = N; j < ldc; j++)
								assert_int_equal(Ch[(size_t)i * ldc + j], 0x7fc1);
						}
					}
					/* B's bf16 copy: the same bits, then a copy of -B: C negated */
					for (int sg = 0; sg < 2; sg++) {
						for (size_t i = 0; i < (size_t)br * ldb; i++)
							Bh[i] = (uint16_t)(h16(B[i]) ^ (sg ? 0x8000u : 0u));
						memcpy(Cb, C0, sizeof(float) * (size_t)M * ldc);
						for (size_t i = 0; i < (size_t)M * ldc; i++)
							Chb[i] = 0x7fc1;
						assert_int_equal(ds_gemm_bf16_ex(im[v], fl, ta, tb, M, N, K, alpha,
										 a16 ? (const void *)Ah : A, lda, B, ldb, Bh, 0.0f,
										 fl_c ? (void *)Chb : Cb, ldc), 0);
						for (int i = 0; i < M; i++)
							for (int j = 0; j < N; j++) {
								const size_t o = (size_t)i * ldc + j;
								const float g = fl_c ? ds_bf16_to_fp32(Chb[o]) : Cb[o],
									    w = fl_c ? ds_bf16_to_fp32(Ch[o]) : C[o];
								if (g != (sg ? -w : w))
									fail_msg("%s ex %u M%d N%d K%d: C[%d,%d] with %s B copy differs",
										 impl_name(im[v]), fl, M, N, K, i, j, sg ? "a negated" : "the");
							}
					}
					checked += M * N;
					free(A); free(B); free(C); free(C0); free(Ah); free(Ch); free(Bh); free(Cb); free(Chb);
				}
		float a[4] = { 1, 2, 3, 4 }, b[4] = { 1, 1, 1, 1 };
		uint16_t c[4];
		assert_int_equal(ds_gemm_bf16_ex(im[v], DS_GEMM_BF16_C16, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, NULL, 1.0f, c, 2),
				 -1);
		printf("# %s: %d elements checked through ds_gemm_bf16_ex\n", impl_name(im[v]), checked);
	}
	float a[4] = { 0 }, b[4] = { 0 }, c[4] = { 0 };
	assert_int_equal(ds_gemm_bf16_ex(DS_BF16_SGEMM, 0, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, NULL, 0.0f, c, 2), -1);
}

/* DS_GEMM_BF16_CR (the model's fused rounding of a product's output): C
 * bit for bit the same implementation's plain product followed by the
 * scalar rounding pass (ds_half_round_n) over C's rows, for single products
 * in the model's layouts (NT, NN, TN) with K over several K blocks, beta 0
 * (C NaN, never read) and beta 1, a strided C whose padding stays
 * untouched; and for causal batches (A_LOWER, whose tiles end before the
 * last K block; A_UPPER; C_LOWER, only the lower triangle compared), run
 * whole per thread and one product over the threads.  A rounding at the
 * wrong block, twice or not at all changes bits here.  oneDNN has no such
 * store: -1, nothing written. */
static void round_rows(float *c, int M, int N, int ldc)
{
	for (int i = 0; i < M; i++)
		ds_half_round_n(DS_HALF_BF16, c + (size_t)i * ldc, (size_t)N);
}

static void test_gemm_bf16_cr(void **state)
{
	(void)state;
	static const int sz[][3] = { { 37, 19, 71 }, { 203, 21, 533 }, { 13, 330, 517 }, { 64, 150, 64 } };
	enum ds_bf16_impl im[3];
	const int nim = impls(im);
	const int nt = omp_get_max_threads();
	for (int v = 0; v < nim; v++) {
		const int dnn = im[v] == DS_BF16_ONEDNN;
		long same = 0, moved = 0;   /* moved: elements the rounding changed (the test sees it) */
		for (int lay = 0; lay < 3; lay++)
			for (size_t q = 0; q < sizeof sz / sizeof sz[0]; q++)
				for (int bi = 0; bi < 2; bi++) {
					const int ta = lay == 2, tb = lay == 0;   /* NT, NN, TN */
					const int M = sz[q][0], N = sz[q][1], K = sz[q][2];
					const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
					const int lda = ac + 3, ldb = bc + 1, ldc = N + 5;
					const float beta = bi ? 1.0f : 0.0f;
					const size_t nc = (size_t)M * ldc;
					float *A = malloc(sizeof(float) * (size_t)ar * lda), *B = malloc(sizeof(float) * (size_t)br * ldb);
					float *C0 = malloc(sizeof(float) * nc), *C = malloc(sizeof(float) * nc);
					float *R = malloc(sizeof(float) * nc);
					assert_non_null(A); assert_non_null(B); assert_non_null(C0); assert_non_null(C);
					assert_non_null(R);
					fill(A, ar, ac, lda, 41u + (unsigned)q);
					fill(B, br, bc, ldb, 43u + (unsigned)lay);
					fill(C0, M, ldc, ldc, 47u);
					if (!bi)
						for (int i = 0; i < M; i++)
							for (int j = 0; j < N; j++)
								C0[(size_t)i * ldc + j] = NAN;
					memcpy(R, C0, sizeof(float) * nc);
					memcpy(C, C0, sizeof(float) * nc);
					int rc = ds_gemm_bf16_ex(im[v], DS_GEMM_BF16_CR, ta, tb, M, N, K, 0.75f, A, lda, B, ldb, NULL, beta,
								 C, ldc);
					if (dnn) {
						assert_int_equal(rc, -1);
						assert_memory_equal(C, C0, sizeof(float) * nc);
						goto next;
					}
					assert_int_equal(rc, 0);
					assert_int_equal(ds_gemm_bf16(im[v], ta, tb, M, N, K, 0.75f, A, lda, B, ldb, beta, R, ldc), 0);
					for (size_t i = 0; i < nc; i++)
						moved += R[i] != bf(R[i]);
					round_rows(R, M, N, ldc);
					for (int i = 0; i < M; i++)
						for (int j = 0; j < ldc; j++) {
							const size_t e = (size_t)i * ldc + j;
							if (memcmp(&C[e], &R[e], sizeof(float)))
								fail_msg("%s CR %s%s M%d N%d K%d beta %g: C[%d,%d] = %.9g, want %.9g", impl_name(im[v]),
									 ta ? "T" : "N", tb ? "T" : "N", M, N, K, beta, i, j, C[e], R[e]);
							same++;
						}
				next:
					free(A); free(B); free(C0); free(C); free(R);
				}
		/* causal batches, as gpt.c's attention */
		static const int Ts[] = { 41, 300 };
		enum { hs = 24 };
		for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
			for (int n = 2; n <= 6; n += 4)
				for (int w = 0; w < 3; w++) {
					omp_set_num_threads(n == 2 ? 4 : nt);
					const int T = Ts[ti];
					const long TT = (long)T * T, Th = (long)T * hs;
					float *P = malloc(sizeof(float) * n * TT), *x = malloc(sizeof(float) * n * Th);
					float *C = malloc(sizeof(float) * n * TT), *R = malloc(sizeof(float) * n * TT);
					assert_non_null(P); assert_non_null(x); assert_non_null(C); assert_non_null(R);
					fill(P, n * T, T, T, 51u);
					fill(x, n * T, hs, hs, 53u);
					for (int e = 0; e < n; e++)
						for (int i = 0; i < T; i++)
							for (int j = i + 1; j < T; j++)
								P[e * TT + (long)i * T + j] = 0.0f;
					/* w 0: y = P x (A_LOWER, beta 0); 1: P^T x (A_UPPER, beta 1);
					 * 2: S = x x^T (C_LOWER) */
					const int ta = w == 1, cs = w == 2;
					const int Nn = cs ? T : hs, Kk = cs ? hs : T, ldc = Nn;
					const long es = cs ? TT : Th;
					struct ds_gemm_bf16_batch bt = { n, 1, { cs ? Th : TT, 0 }, { Th, 0 }, { es, 0 },
									 w == 0 ? DS_GEMM_BF16_A_LOWER : w == 1 ? DS_GEMM_BF16_A_UPPER
										: DS_GEMM_BF16_C_LOWER, DS_GEMM_BF16_CR };
					fill(C, n * T, Nn, ldc, 57u);
					memcpy(R, C, sizeof(float) * n * es);
					const float *a = cs ? x : P;
					const int lda = cs ? hs : T, tb = cs;
					const float beta = w == 1 ? 1.0f : 0.0f;
					int rc = ds_gemm_bf16_batch(im[v], &bt, ta, tb, T, Nn, Kk, 1.0f, a, lda, x, hs, beta, C, ldc);
					if (dnn) {
						assert_int_equal(rc, -1);
						assert_memory_equal(C, R, sizeof(float) * n * es);
					} else {
						assert_int_equal(rc, 0);
						bt.flags = 0;
						assert_int_equal(ds_gemm_bf16_batch(im[v], &bt, ta, tb, T, Nn, Kk, 1.0f, a, lda, x, hs, beta,
										    R, ldc), 0);
						for (long i = 0; i < n * es; i++)
							moved += R[i] != bf(R[i]);
						round_rows(R, n * T, Nn, ldc);
						for (int e = 0; e < n; e++)
							for (int i = 0; i < T; i++)
								for (int j = 0; j < (cs ? i + 1 : Nn); j++) {
									const long o = e * es + (long)i * ldc + j;
									if (memcmp(&C[o], &R[o], sizeof(float)))
										fail_msg("%s CR batch %d T%d entry %d [%d,%d] = %.9g, want %.9g",
											 impl_name(im[v]), w, T, e, i, j, C[o], R[o]);
									same++;
								}
					}
					free(P); free(x); free(C); free(R);
				}
		omp_set_num_threads(nt);
		if (!dnn) {
			assert_true(moved > same / 2);   /* the plain products were not bf16 values already */
			printf("# %s: %ld elements of CR products equal to product + rounding pass\n", impl_name(im[v]), same);
		}
	}
}

/* The element-wise kernels' rounding variants (ds_kernel_*_r, r16 1):
 * bit for bit the plain kernel followed by ds_half_round_n(DS_HALF_BF16)
 * over its output, on odd sizes (rows that are no multiple of any vector
 * width, causal rows of every length up to T) and every activation; r16
 * 0 is the plain kernel.  A missed row tail or an unrounded element
 * changes bits; the outputs are checked to need the rounding at all. */
static void expect_rounded(const char *what, const float *got, float *plain, size_t n)
{
	size_t moved = 0;
	for (size_t i = 0; i < n; i++)
		moved += plain[i] != bf(plain[i]);
	ds_half_round_n(DS_HALF_BF16, plain, n);
	for (size_t i = 0; i < n; i++)
		if (memcmp(&got[i], &plain[i], sizeof(float)))
			fail_msg("%s[%zu] = %.9g, want %.9g", what, i, got[i], plain[i]);
	if (moved < n / 2)
		fail_msg("%s: only %zu of %zu plain values needed rounding", what, moved, n);
}

static void test_kernels_r16(void **state)
{
	(void)state;
	enum { N = 7, C = 37, F = 29, B = 2, NH = 3, T = 19 };
	float x[N * 2 * F], w[C], b[C], g[N * 2 * F], o1[N * 2 * F], o2[N * 2 * F];
	float m1[N], r1[N], m2[N], r2[N], dw1[C], db1[C], dw2[C], db2[C];
	fill(x, N, 2 * F, 2 * F, 61u);
	fill(g, N, 2 * F, 2 * F, 62u);
	fill(w, 1, C, C, 63u);
	fill(b, 1, C, C, 64u);
	/* layernorm forward: out rounded, mean/rstd as the plain kernel's */
	ds_kernel_layernorm_forward(o1, m1, r1, x, w, b, N, C, 1e-5f);
	ds_kernel_layernorm_forward_r(o2, m2, r2, x, w, b, N, C, 1e-5f, 1);
	assert_memory_equal(m1, m2, sizeof m1);
	assert_memory_equal(r1, r2, sizeof r1);
	float o3[N * C];
	ds_kernel_layernorm_forward_r(o3, m2, r2, x, w, b, N, C, 1e-5f, 0);   /* r16 0: the plain kernel */
	assert_memory_equal(o3, o1, sizeof o3);
	expect_rounded("layernorm_forward_r", o2, o1, (size_t)N * C);
	/* forward16: the bits of forward_r in bf16 alone, mean/rstd the same */
	{
		uint16_t h[N * C];
		float m3[N], r3[N];
		ds_kernel_layernorm_forward16(h, m3, r3, x, w, b, N, C, 1e-5f);
		assert_memory_equal(m3, m1, sizeof m1);
		assert_memory_equal(r3, r1, sizeof r1);
		for (int i = 0; i < N * C; i++)
			if (h[i] != ds_fp32_to_bf16(o2[i]))
				fail_msg("layernorm_forward16[%d] = %#x, want %#x", i, h[i], ds_fp32_to_bf16(o2[i]));
	}
	/* layernorm backward: dinp (+=, from the same start) rounded; dw, db unchanged */
	memcpy(o1, g, sizeof(float) * N * C);
	memcpy(o2, g, sizeof(float) * N * C);
	for (int i = 0; i < C; i++)
		dw1[i] = dw2[i] = db1[i] = db2[i] = 0.25f;
	ds_kernel_layernorm_backward(o1, dw1, db1, x + 3, x, w, m1, r1, N, C);
	ds_kernel_layernorm_backward_r(o2, dw2, db2, x + 3, x, w, m1, r1, N, C, 1);
	assert_memory_equal(dw1, dw2, sizeof dw1);
	assert_memory_equal(db1, db2, sizeof db1);
	expect_rounded("layernorm_backward_r", o2, o1, (size_t)N * C);
	/* backward16: backward_r's dinp, dw and db, and dinp's bits beside;
	 * with the input from its bits, backward_r's on the input rounded (xr)
	 * and unread in fp32 (NULL), with and without dinp's bits */
	for (int k = 0; k < 3; k++) {
		uint16_t h[N * C], hx[N * C];
		float o4[N * C], dw4[C], db4[C], xr[N * C];
		for (int i = 0; i < N * C; i++)
			xr[i] = ds_bf16_to_fp32(hx[i] = ds_fp32_to_bf16(x[i]));
		const float *want = o2, *wdw = dw2, *wdb = db2;
		if (k) {   /* the reference: backward_r on xr */
			memcpy(o1, g, sizeof(float) * N * C);
			for (int i = 0; i < C; i++)
				dw1[i] = db1[i] = 0.25f;
			ds_kernel_layernorm_backward_r(o1, dw1, db1, x + 3, xr, w, m1, r1, N, C, 1);
			want = o1, wdw = dw1, wdb = db1;
		}
		memcpy(o4, g, sizeof o4);
		for (int i = 0; i < C; i++)
			dw4[i] = db4[i] = 0.25f;
		ds_kernel_layernorm_backward16(o4, k == 2 ? NULL : h, dw4, db4, x + 3, k ? NULL : x, k ? hx : NULL, w, m1,
					       r1, N, C);
		assert_memory_equal(o4, want, sizeof o4);
		assert_memory_equal(dw4, wdw, sizeof dw4);
		assert_memory_equal(db4, wdb, sizeof db4);
		for (int i = 0; k < 2 && i < N * C; i++)
			if (h[i] != ds_fp32_to_bf16(want[i]))
				fail_msg("layernorm_backward16 %d d16[%d] = %#x, want %#x", k, i, h[i], ds_fp32_to_bf16(want[i]));
	}
	/* add16: add_r's rounded sum and its bits (n over several blocks) */
	{
		enum { NA = 20000 };
		float *ua = malloc(sizeof(float) * NA * 4), *ub = ua + NA, *uo = ub + NA, *ur = uo + NA;
		uint16_t *uh = malloc(sizeof(uint16_t) * NA);
		assert_non_null(ua); assert_non_null(uh);
		fill(ua, 1, 2 * NA, 2 * NA, 65u);
		ds_kernel_add16(uo, uh, ua, ub, NA);
		ds_kernel_add_r(ur, ua, ub, NA, 1);
		assert_memory_equal(uo, ur, sizeof(float) * NA);
		for (int i = 0; i < NA; i++)
			if (uh[i] != ds_fp32_to_bf16(ur[i]))
				fail_msg("add16 out16[%d] = %#x, want %#x", i, uh[i], ds_fp32_to_bf16(ur[i]));
		for (int i = 0; i < NA; i++)
			ur[i] = ua[i] + ub[i];
		expect_rounded("add16", uo, ur, NA);
		free(ua); free(uh);
	}
	/* activations, gated (2F wide inputs and gradients) or not */
	for (int act = 0; act <= 4; act++) {
		const int wd = ds_act_gated(act) ? 2 * F : F;
		ds_kernel_act_forward(o1, x, N, F, act);
		ds_kernel_act_forward_r(o2, x, N, F, act, 1);
		expect_rounded("act_forward_r", o2, o1, (size_t)N * F);
		/* forward16 with and without the input's bits (hx: all of the
		 * input, no more), the input rounded as read: forward_r on the
		 * rounded input (xr) */
		uint16_t h[N * F], h2[N * F], hx[N * 2 * F];
		float xr[N * 2 * F], o6[N * F];
		for (int i = 0; i < N * wd; i++)
			xr[i] = bf(x[i]);
		ds_kernel_act_forward_r(o6, xr, N, F, act, 1);
		memset(hx, 0xff, sizeof hx);
		ds_kernel_act_forward16(h, hx, x, N, F, act);
		ds_kernel_act_forward16(h2, NULL, x, N, F, act);
		assert_memory_equal(h2, h, sizeof h);
		long moved = 0;   /* outputs the input's rounding changes: the test sees it */
		for (int i = 0; i < N * F; i++) {
			if (h[i] != ds_fp32_to_bf16(o6[i]))
				fail_msg("act_forward16 %d [%d] = %#x, want %#x", act, i, h[i], ds_fp32_to_bf16(o6[i]));
			moved += o6[i] != o2[i];
		}
		assert_true(moved > 0);
		for (int i = 0; i < N * 2 * F; i++)
			if (hx[i] != (i < N * wd ? ds_fp32_to_bf16(x[i]) : 0xffff))
				fail_msg("act_forward16 %d in16[%d] = %#x", act, i, hx[i]);
		ds_kernel_act_backward(o1, g, x, N, F, act);
		ds_kernel_act_backward_r(o2, g, x, N, F, act, 1);
		expect_rounded("act_backward_r", o2, o1, (size_t)N * wd);
		/* backward16 from those bits and dout (g) rounded as read:
		 * backward_r on the input they hold and the rounded dout, and
		 * dinp's bits beside it where asked */
		float xb[N * 2 * F], o4[N * 2 * F], o5[N * 2 * F], gr[N * F];
		uint16_t hd[N * 2 * F];
		for (int i = 0; i < N * wd; i++)
			xb[i] = ds_bf16_to_fp32(hx[i]);
		for (int i = 0; i < N * F; i++)
			gr[i] = bf(g[i]);
		ds_kernel_act_backward_r(o2, gr, xb, N, F, act, 1);
		ds_kernel_act_backward16(o4, hd, g, hx, N, F, act);
		ds_kernel_act_backward16(o5, NULL, g, hx, N, F, act);
		assert_memory_equal(o4, o2, sizeof(float) * N * wd);
		assert_memory_equal(o5, o2, sizeof(float) * N * wd);
		for (int i = 0; i < N * wd; i++)
			if (hd[i] != ds_fp32_to_bf16(o2[i]))
				fail_msg("act_backward16 %d d16[%d] = %#x, want %#x", act, i, hd[i], ds_fp32_to_bf16(o2[i]));
	}
	/* the residual add, in place and not, over several of its blocks and a tail */
	{
		enum { n = 2 * 8192 + 37 };
		float *ra = malloc(sizeof(float) * n), *rb = malloc(sizeof(float) * n);
		float *ro = malloc(sizeof(float) * n), *rp = malloc(sizeof(float) * n);
		assert_non_null(ra); assert_non_null(rb); assert_non_null(ro); assert_non_null(rp);
		fill(ra, 1, n, n, 67u);
		fill(rb, 1, n, n, 68u);
		for (int i = 0; i < n; i++)
			rp[i] = ra[i] + rb[i];
		ds_kernel_add_r(ro, ra, rb, n, 0);
		assert_memory_equal(ro, rp, sizeof(float) * n);
		ds_kernel_add_r(ra, ra, rb, n, 1);
		expect_rounded("add_r", ra, rp, n);
		free(ra); free(rb); free(ro); free(rp);
	}
	/* causal softmax forward and backward, with and without dropout */
	static float s1[B * NH * T * T], s2[B * NH * T * T], d1[B * NH * T * T], d2[B * NH * T * T];
	const size_t ns = (size_t)B * NH * T * T;
	fill(s1, B * NH * T, T, T, 65u);
	memcpy(s2, s1, sizeof s1);
	ds_kernel_causal_softmax_forward(s1, B, NH, T);
	ds_kernel_causal_softmax_forward_r(s2, B, NH, T, 1);
	float keep[B * NH * T * T];
	memcpy(keep, s1, sizeof s1);
	/* above the diagonal: zeros, which need no rounding; compare all, count the rest */
	for (size_t i = 0; i < ns; i++)
		if (memcmp(&s2[i], &(float){ bf(s1[i]) }, sizeof(float)))
			fail_msg("causal_softmax_forward_r[%zu] = %.9g, want %.9g", i, s2[i], bf(s1[i]));
	struct ds_rng gs[B];
	for (int k = 0; k < B; k++)
		ds_rng_init(&gs[k], 7, 1, (uint64_t)k);
	for (int drop = 0; drop < 2; drop++) {
		fill(d1, B * NH * T, T, T, 66u + (unsigned)drop);
		memcpy(d2, d1, sizeof d1);
		ds_kernel_causal_softmax_backward_h0(d1, keep, B, NH, 1, T, 0.125f, drop ? 0.3f : 0.0f, drop ? gs : NULL);
		ds_kernel_causal_softmax_backward_r(d2, keep, B, NH, 1, T, 0.125f, drop ? 0.3f : 0.0f, drop ? gs : NULL, 1);
		for (size_t i = 0; i < ns; i++)
			if (memcmp(&d2[i], &(float){ bf(d1[i]) }, sizeof(float)))
				fail_msg("causal_softmax_backward_r drop %d [%zu] = %.9g, want %.9g", drop, i, d2[i], bf(d1[i]));
	}
	/* the bf16 storage's softmax: forward16's att and att16 bit for bit
	 * forward_r and a pack; backward16 from att16, dP unrounded, into a
	 * separate ds16, into att16 itself, and into datt: the rounding pass,
	 * backward_r on P in fp32 and a pack; both write the rows' causal part
	 * only (the rest of att16 and ds16 as it was) */
	static uint16_t h1[B * NH * T * T], h2[B * NH * T * T], hd[B * NH * T * T];
	static float s3[B * NH * T * T], d3[B * NH * T * T];
	fill(s3, B * NH * T, T, T, 65u);
	memset(h1, 0xff, sizeof h1);
	/* (f32 0: the same att16, the scores only read) */
	static float s4[B * NH * T * T], s5[B * NH * T * T];
	static uint16_t h0[B * NH * T * T];
	memcpy(s4, s3, sizeof s3);
	memcpy(s5, s3, sizeof s3);
	memset(h0, 0xff, sizeof h0);
	ds_kernel_causal_softmax_forward16(s4, h0, B, NH, T, 0);
	assert_memory_equal(s4, s5, sizeof s5);
	ds_kernel_causal_softmax_forward16(s3, h1, B, NH, T, 1);
	assert_memory_equal(s3, s2, sizeof s2);
	assert_memory_equal(h0, h1, sizeof h1);
	for (size_t i = 0; i < ns; i++) {
		const int up = (int)(i % T) > (int)(i / T % T);   /* above the diagonal */
		if (h1[i] != (up ? 0xffff : ds_fp32_to_bf16(s2[i])))
			fail_msg("causal_softmax_forward16: att16[%zu] = %#x, want %#x", i, h1[i],
				 up ? 0xffff : ds_fp32_to_bf16(s2[i]));
	}
	fill(d1, B * NH * T, T, T, 69u);
	for (size_t i = 0; i < ns; i++)
		d2[i] = bf(d1[i]);
	ds_kernel_causal_softmax_backward_r(d2, s2, B, NH, 0, T, 0.125f, 0.0f, NULL, 1);   /* the reference dS */
	long moved = 0;   /* dP elements the read's rounding changes: the test sees it */
	for (int into = 0; into < 3; into++) {   /* 0: ds16, 1: att16 itself, 2: datt */
		memcpy(d3, d1, sizeof d1);
		memcpy(h2, h1, sizeof h1);   /* P's copy, kept for the next */
		memset(hd, 0xff, sizeof hd);
		uint16_t *ds = into == 0 ? hd : into == 1 ? h1 : NULL;
		ds_kernel_causal_softmax_backward16(d3, h1, ds, B, NH, T, 0.125f);
		for (size_t i = 0; i < ns; i++) {
			const int up = (int)(i % T) > (int)(i / T % T);
			if (into < 2 && up) {
				if (ds[i] != 0xffff)
					fail_msg("causal_softmax_backward16 into %d: ds16[%zu] above the diagonal written", into, i);
				continue;
			}
			if (into == 2 ? memcmp(&d3[i], &d2[i], sizeof(float)) : ds[i] != ds_fp32_to_bf16(d2[i]))
				fail_msg("causal_softmax_backward16 into %d [%zu]: %.9g, want %.9g", into, i,
					 into == 2 ? d3[i] : ds_bf16_to_fp32(ds[i]), d2[i]);
			moved += into == 0 && d1[i] != bf(d1[i]);
		}
		memcpy(h1, h2, sizeof h1);
	}
	assert_true(moved > 0);
}

/* The bf16 cross-entropy kernels against the fp32 ones on the unpacked
 * logits: lse and the loss to fp32 summation order, the padding columns
 * set to -inf (forward) and 0 (backward), dlogits bit for bit the fp32
 * kernel's rounded to bf16 (same per-element operations), including each
 * row's target; over rows shared out to threads. */
static void test_xent16(void **state)
{
	(void)state;
	enum { N = 37, V = 1003, Vp = 1024 };
	uint16_t *h = malloc(sizeof(uint16_t) * N * Vp);
	float *f = malloc(sizeof(float) * N * Vp), lse16[N], lse[N];
	int32_t t[N];
	assert_non_null(h); assert_non_null(f);
	fill(f, N, Vp, Vp, 4242u);
	for (int i = 0; i < N * Vp; i++) {
		h[i] = h16(f[i] * 8.0f);
		f[i] = ds_bf16_to_fp32(h[i]);
	}
	for (int n = 0; n < N; n++) {
		t[n] = (n * 397) % V;
		for (int i = V; i < Vp; i++)
			f[n * Vp + i] = -INFINITY;
	}
	const double s16 = ds_kernel_xent_forward16(lse16, h, t, N, V, Vp);
	const double s = ds_kernel_xent_forward(lse, f, t, N, V, Vp);
	assert_true(fabs(s16 - s) <= 1e-6 * fabs(s));
	for (int n = 0; n < N; n++) {
		assert_true(fabsf(lse16[n] - lse[n]) <= 1e-6f * fabsf(lse[n]));
		for (int i = V; i < Vp; i++)
			assert_int_equal(h[n * Vp + i], 0xff80);
	}
	assert_true(ds_kernel_xent_forward16(lse16, h, NULL, N, V, Vp) == 0.0);
	ds_kernel_xent_backward16(h, lse, t, N, V, Vp, 0.125f);
	ds_kernel_xent_backward(f, lse, t, N, V, Vp, 0.125f);
	for (int i = 0; i < N * Vp; i++)
		if (h[i] != h16(f[i]))
			fail_msg("dlogits[%d] = %04x, fp32 kernel rounded %04x (%.9g)", i, h[i], h16(f[i]), f[i]);
	for (int n = 0; n < N; n++)
		assert_true(ds_bf16_to_fp32(h[n * Vp + t[n]]) < 0);   /* the target's p - 1 */
	free(h); free(f);
}

/* The bias gradient from dout's bf16 bits: bit for bit the fp32 kernel's
 * on the unpacked values (both add to db), over full 64-column strips and
 * a partial one, and within float rounding of each column's sum in double
 * plus db's value before. */
static void test_bias16(void **state)
{
	(void)state;
	enum { N = 37, OC = 200 };
	uint16_t *h = malloc(sizeof(uint16_t) * N * OC);
	float *f = malloc(sizeof(float) * N * OC), db16[OC], db[OC];
	assert_non_null(h); assert_non_null(f);
	fill(f, N, OC, OC, 977u);
	for (int i = 0; i < N * OC; i++) {
		h[i] = h16(f[i] * 3.0f);
		f[i] = ds_bf16_to_fp32(h[i]);
	}
	for (int c = 0; c < OC; c++)
		db16[c] = db[c] = 0.25f * (float)(c % 7) - 0.5f;
	ds_kernel_bias_backward16(db16, h, N, OC);
	ds_kernel_bias_backward(db, f, N, OC);
	for (int c = 0; c < OC; c++) {
		double e = 0.25 * (double)(c % 7) - 0.5;
		for (int n = 0; n < N; n++)
			e += (double)f[n * OC + c];
		if (memcmp(&db16[c], &db[c], sizeof(float)))
			fail_msg("db[%d] = %.9g from the bits, %.9g from fp32", c, db16[c], db[c]);
		assert_true(fabs((double)db16[c] - e) <= 1e-5 * (1.0 + fabs(e)));
	}
	free(h); free(f);
}

/* dstk.bf16_matmul's modes: names round-trip; "fp32" never picks a bf16
 * implementation; auto and the forced modes pick only what is available
 * here (ds_gemm_bf16_available), auto oneDNN for large products on AMX and
 * otherwise the kernel exactly for the shape classes where its measurement
 * found it faster than sgemm, sgemm elsewhere; an explicit mode this CPU
 * cannot honour is refused with a reason. */
static void test_gemm_bf16_modes(void **state)
{
	(void)state;
	static const char *const names[] = { "auto", "onednn", "avx512_bf16", "fp32" };
	for (int m = 0; m < 4; m++) {
		assert_int_equal(ds_bf16_mode_parse(names[m]), m);
		assert_string_equal(ds_bf16_mode_name(m), names[m]);
	}
	assert_int_equal(ds_bf16_mode_parse("amx"), -1);
	const int dn = ds_gemm_bf16_available(DS_BF16_ONEDNN, NULL), kn = ds_gemm_bf16_available(DS_BF16_KERNEL, NULL);
	static const int shp[][4] = { { 256, 768, 768, 1 }, { 64, 64, 64, 48 }, { 8, 8, 8, 1 }, { 256, 50257, 768, 1 },
				      { 128, 128, 64, 48 }, { 128, 128, 64, 1 }, { 1024, 1024, 64, 12 } };
	for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++) {
		const int M = shp[s][0], N = shp[s][1], K = shp[s][2], n = shp[s][3];
		assert_int_equal(ds_gemm_bf16_pick(DS_BF16_MM_FP32, 0, 1, M, N, K, n), DS_BF16_SGEMM);
		assert_int_equal(ds_gemm_bf16_pick(DS_BF16_MM_ONEDNN, 0, 1, M, N, K, n), dn ? DS_BF16_ONEDNN : DS_BF16_SGEMM);
		assert_int_equal(ds_gemm_bf16_pick(DS_BF16_MM_KERNEL, 0, 1, M, N, K, n), kn ? DS_BF16_KERNEL : DS_BF16_SGEMM);
		enum ds_bf16_impl a = ds_gemm_bf16_pick(DS_BF16_MM_AUTO, 0, 1, M, N, K, n);
		assert_true(a == DS_BF16_SGEMM || ds_gemm_bf16_available(a, NULL));
		assert_true(a != DS_BF16_PORTABLE);
		/* auto follows its measurement: oneDNN on AMX for large products, else
		 * the kernel exactly where it was measured faster than sgemm */
		const int cls = n > 1 ? DS_BF16_CLASS_HEADS : DS_BF16_CLASS_LAYER;
		if (ds_gemm_bf16_amx() && (long long)M * N * K >= (n > 1 ? DS_GEMM_BF16_MIN_MNK_BATCH : DS_GEMM_BF16_MIN_MNK))
			assert_int_equal(a, DS_BF16_ONEDNN);
		else
			assert_int_equal(a, kn && ds_gemm_bf16_measured(cls, NULL, NULL) ? DS_BF16_KERNEL : DS_BF16_SGEMM);
	}
	/* on AMX, GPT-2's (64,64,64) heads (2^18 multiply-adds) go to oneDNN in
	 * a batch, not alone; half their size stays off it either way */
	if (ds_gemm_bf16_amx()) {
		assert_int_equal(ds_gemm_bf16_pick(DS_BF16_MM_AUTO, 0, 1, 64, 64, 64, 48), DS_BF16_ONEDNN);
		assert_int_not_equal(ds_gemm_bf16_pick(DS_BF16_MM_AUTO, 0, 1, 64, 64, 64, 1), DS_BF16_ONEDNN);
		assert_int_not_equal(ds_gemm_bf16_pick(DS_BF16_MM_AUTO, 0, 1, 64, 64, 32, 48), DS_BF16_ONEDNN);
		assert_int_equal(ds_gemm_bf16_pick(DS_BF16_MM_AUTO, 0, 1, 1024, 1024, 64, 12), DS_BF16_ONEDNN);
	}
	/* the measurement: rates where the CPU has AVX512_BF16, none where not */
	for (int cls = 0; cls < DS_BF16_NCLASS; cls++) {
		double sg = -1, kg = -1;
		const int win = ds_gemm_bf16_measured(cls, &sg, &kg);
		assert_true(kn ? sg > 0 && kg > 0 : sg == 0 && kg == 0 && !win);
		assert_int_equal(win, kg >= 1.1 * sg && kg > 0);
		printf("# class %d: kernel %.1f GFLOP/s, sgemm %.1f\n", cls, kg, sg);
	}
	assert_int_equal(ds_gemm_bf16_measured(DS_BF16_NCLASS, NULL, NULL), 0);
	char why[200], plan[512];
	assert_int_equal(ds_gemm_bf16_mode_check(DS_BF16_MM_AUTO, why, sizeof why), 0);
	assert_int_equal(ds_gemm_bf16_mode_check(DS_BF16_MM_FP32, why, sizeof why), 0);
	assert_int_equal(ds_gemm_bf16_mode_check(DS_BF16_MM_KERNEL, why, sizeof why), kn ? 0 : -1);
	if (!kn)
		assert_non_null(strstr(why, "no AVX512_BF16"));
	assert_int_equal(ds_gemm_bf16_mode_check(DS_BF16_MM_ONEDNN, why, sizeof why), dn ? 0 : -1);
	assert_int_equal(ds_gemm_bf16_plan(DS_BF16_MM_FP32, plan, sizeof plan), 0);
	const int some = ds_gemm_bf16_amx() || (kn && (ds_gemm_bf16_measured(DS_BF16_CLASS_LAYER, NULL, NULL) ||
						     ds_gemm_bf16_measured(DS_BF16_CLASS_HEADS, NULL, NULL)));
	assert_int_equal(ds_gemm_bf16_plan(DS_BF16_MM_AUTO, plan, sizeof plan), some);
	assert_int_equal(strncmp(plan, some ? "bf16 on " : "fp32 sgemm", some ? 8 : 10), 0);
	printf("# auto: %s\n", plan);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gelu_values),
		cmocka_unit_test(test_gelu_exact_values),
		cmocka_unit_test(test_act_kernels_exact),
		cmocka_unit_test(test_expf_accuracy),
		cmocka_unit_test(test_act_grads),
		cmocka_unit_test(test_rotary_inverse),
		cmocka_unit_test(test_layernorm_row),
		cmocka_unit_test(test_xent_padding),
		cmocka_unit_test(test_causal_softmax),
		cmocka_unit_test(test_dropout),
		cmocka_unit_test(test_gemm_bf16),
		cmocka_unit_test(test_gemm_bf16_batch),
		cmocka_unit_test(test_gemm_bf16_causal),
		cmocka_unit_test(test_gemm_bf16_keep_b),
		cmocka_unit_test(test_gemm_bf16_copies),
		cmocka_unit_test(test_gemm_bf16_ex),
		cmocka_unit_test(test_gemm_bf16_cr),
		cmocka_unit_test(test_kernels_r16),
		cmocka_unit_test(test_xent16),
		cmocka_unit_test(test_bias16),
		cmocka_unit_test(test_gemm_bf16_modes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
