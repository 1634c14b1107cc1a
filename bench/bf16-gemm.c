/* bf16-gemm.c - are bf16 matrix products faster than fp32 sgemm on this
 * CPU?  (issue 5: use them when they are, else report the figure.)
 *
 * Measures, with the same thread count and the forward shapes of a
 * GPT-2-sized layer (out (M, N) = in (M, K) @ w (N, K)^T):
 *   sgemm     OpenBLAS cblas_sgemm in fp32 (the machine's ceiling here,
 *             and what lib/model/gpt.c uses);
 *   sbgemm    OpenBLAS cblas_sbgemm, when the library exports it (Debian's
 *             0.3.21 declares it in cblas.h but is built without
 *             BUILD_BFLOAT16, so it is looked up at run time with dlsym);
 *   dpbf16    a native AVX-512 BF16 kernel (vdpbf16ps, 4x4 register block
 *             over K-contiguous rows, 64-row L2 tiles of w, fp32
 *             accumulation), when the CPU has avx512_bf16.  It is a first
 *             kernel, not a tuned one: no packing, no K blocking.
 * Each figure is the best of several repetitions in GFLOP/s (2*M*N*K per
 * product; with OMP_NUM_THREADS=1 timed by the thread's CPU clock, so a
 * busy shared machine distorts it less) and its ratio to sgemm; the kernel's result is checked against
 * sgemm of the same bf16-rounded inputs.  Not a test: it asserts nothing.
 *
 * Usage: bench/bf16-gemm [M] [reps]   (M rows, default 512; reps default 5)
 */
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "util/half.h"
#include "util/mem.h"
#include "util/timer.h"

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 10)
#include <immintrin.h>
#define HAVE_DPBF16 1
#endif

typedef void (*sbgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
			  const uint16_t *b, int ldb, float beta, float *c, int ldc);

#ifdef HAVE_DPBF16
/* c (M,N) = a (M,K) @ b (N,K)^T, K a multiple of 32; bf16 in, fp32 out.
 * 4 rows of a x 4 rows of b: 16 accumulators kept in registers (written
 * out by hand: GCC keeps an array of them in memory). */
#define DP_ROW(i) \
	c##i##0 = _mm512_dpbf16_ps(c##i##0, a##i, b0); c##i##1 = _mm512_dpbf16_ps(c##i##1, a##i, b1); \
	c##i##2 = _mm512_dpbf16_ps(c##i##2, a##i, b2); c##i##3 = _mm512_dpbf16_ps(c##i##3, a##i, b3);
#define DP_OUT(i) \
	c[(size_t)(i0 + i) * N + j0 + 0] = _mm512_reduce_add_ps(c##i##0); \
	c[(size_t)(i0 + i) * N + j0 + 1] = _mm512_reduce_add_ps(c##i##1); \
	c[(size_t)(i0 + i) * N + j0 + 2] = _mm512_reduce_add_ps(c##i##2); \
	c[(size_t)(i0 + i) * N + j0 + 3] = _mm512_reduce_add_ps(c##i##3);
__attribute__((target("avx512f,avx512bf16"))) static void dpbf16_gemm(const uint16_t *a, const uint16_t *b,
								       float *c, int M, int N, int K)
{
	/* 64 rows of b (96 KiB at K = 768) stay in L2 while every row block of
	 * a passes over them */
	for (int jb = 0; jb < N; jb += 64)
#pragma omp parallel for schedule(static)
	for (int i0 = 0; i0 < M; i0 += 4)
		for (int j0 = jb; j0 < jb + 64 && j0 < N; j0 += 4) {
			__m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
			       c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00,
			       c32 = c00, c33 = c00;
			const uint16_t *pa = a + (size_t)i0 * K, *pb = b + (size_t)j0 * K;
			for (int k = 0; k < K; k += 32) {
				__m512bh a0 = (__m512bh)_mm512_loadu_si512(pa + k);
				__m512bh a1 = (__m512bh)_mm512_loadu_si512(pa + K + k);
				__m512bh a2 = (__m512bh)_mm512_loadu_si512(pa + 2 * (size_t)K + k);
				__m512bh a3 = (__m512bh)_mm512_loadu_si512(pa + 3 * (size_t)K + k);
				__m512bh b0 = (__m512bh)_mm512_loadu_si512(pb + k);
				__m512bh b1 = (__m512bh)_mm512_loadu_si512(pb + K + k);
				__m512bh b2 = (__m512bh)_mm512_loadu_si512(pb + 2 * (size_t)K + k);
				__m512bh b3 = (__m512bh)_mm512_loadu_si512(pb + 3 * (size_t)K + k);
				DP_ROW(0) DP_ROW(1) DP_ROW(2) DP_ROW(3)
			}
			DP_OUT(0) DP_OUT(1) DP_OUT(2) DP_OUT(3)
		}
}
#endif

/* seconds: the thread's CPU time with one thread (a shared machine's
 * preemption does not count), else wall time */
static double now(void)
{
	struct timespec ts;
	if (omp_get_max_threads() == 1 && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
		return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
	return ds_now();
}

static double best_of(int reps, void (*fn)(void *), void *arg)
{
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		fn(arg);
		double t = now() - t0;
		if (t < best)
			best = t;
	}
	return best;
}

struct job {
	int M, N, K;
	const float *af, *bf;
	const uint16_t *ah, *bh;
	float *c;
	sbgemm_fn sb;
};

static void run_sgemm(void *p)
{
	struct job *j = p;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->M, j->N, j->K, 1.0f, j->af, j->K, j->bf, j->K, 0.0f,
		    j->c, j->N);
}

static void run_sbgemm(void *p)
{
	struct job *j = p;
	j->sb(CblasRowMajor, CblasNoTrans, CblasTrans, j->M, j->N, j->K, 1.0f, j->ah, j->K, j->bh, j->K, 0.0f, j->c,
	      j->N);
}

#ifdef HAVE_DPBF16
static void run_dpbf16(void *p)
{
	struct job *j = p;
	dpbf16_gemm(j->ah, j->bh, j->c, j->M, j->N, j->K);
}
#endif

int main(int argc, char **argv)
{
	int M = argc > 1 ? atoi(argv[1]) : 512, reps = argc > 2 ? atoi(argv[2]) : 5;
	if (M < 4 || M % 4 || reps < 1) {
		fprintf(stderr, "usage: bf16-gemm [M (multiple of 4)] [reps]\n");
		return 2;
	}
	/* GPT-2 124M forward products: c_attn, attn c_proj, c_fc, mlp c_proj */
	const int shapes[4][2] = { { 2304, 768 }, { 768, 768 }, { 3072, 768 }, { 768, 3072 } };
	const char *names[4] = { "c_attn", "attn.c_proj", "c_fc", "mlp.c_proj" };
	sbgemm_fn sb = (sbgemm_fn)dlsym(RTLD_DEFAULT, "cblas_sbgemm");
	int have_native = 0;
#ifdef HAVE_DPBF16
	__builtin_cpu_init();
	have_native = __builtin_cpu_supports("avx512bf16");
#endif
	printf("# bf16 vs fp32 matrix products, M %d, %d threads, best of %d\n", M, omp_get_max_threads(), reps);
	printf("# cblas_sbgemm in the linked OpenBLAS: %s; AVX-512 BF16 on this CPU: %s\n", sb ? "yes" : "no (not exported)",
	       have_native ? "yes" : "no");
	printf("# %-12s %6s %6s %6s %12s %12s %12s %8s %8s %10s\n", "product", "M", "N", "K", "sgemm_gflops",
	       "sbgemm_gflops", "dpbf16_gflops", "sb/s", "dp/s", "max_relerr");
	for (int s = 0; s < 4; s++) {
		int N = shapes[s][0], K = shapes[s][1];
		size_t na = (size_t)M * K, nb = (size_t)N * K;
		float *af = ds_alloc(na * 4), *bf = ds_alloc(nb * 4), *c = ds_alloc((size_t)M * N * 4),
		      *ref = ds_alloc((size_t)M * N * 4);
		uint16_t *ah = ds_alloc(na * 2), *bh = ds_alloc(nb * 2);
		if (!af || !bf || !c || !ref || !ah || !bh) {
			fprintf(stderr, "bf16-gemm: out of memory\n");
			return 1;
		}
		for (size_t i = 0; i < na; i++)
			af[i] = (float)((i * 2654435761u % 2001) / 1000.0 - 1.0);
		for (size_t i = 0; i < nb; i++)
			bf[i] = (float)((i * 40503u % 2001) / 1000.0 - 1.0) * 0.05f;
		/* the same bf16-rounded inputs for every variant */
		ds_half_round_n(DS_HALF_BF16, af, na);
		ds_half_round_n(DS_HALF_BF16, bf, nb);
		ds_fp32_to_bf16_n(ah, af, na);
		ds_fp32_to_bf16_n(bh, bf, nb);
		struct job j = { M, N, K, af, bf, ah, bh, ref, sb };
		double flops = 2.0 * M * N * K;
		run_sgemm(&j);
		double ts = best_of(reps, run_sgemm, &j);
		double tsb = 0, tdp = 0, err = 0;
		j.c = c;
		if (sb) {
			run_sbgemm(&j);
			tsb = best_of(reps, run_sbgemm, &j);
		}
#ifdef HAVE_DPBF16
		if (have_native) {
			run_dpbf16(&j);
			tdp = best_of(reps, run_dpbf16, &j);
			double mx = 0;
			for (size_t i = 0; i < (size_t)M * N; i++) {
				double d = fabs((double)c[i] - ref[i]);
				if (d > err)
					err = d;
				if (fabs(ref[i]) > mx)
					mx = fabs(ref[i]);
			}
			err = mx > 0 ? err / mx : err;
		}
#endif
		printf("  %-12s %6d %6d %6d %12.1f %12.1f %12.1f %8.2f %8.2f %10.2e\n", names[s], M, N, K, flops / ts * 1e-9,
		       tsb > 0 ? flops / tsb * 1e-9 : 0.0, tdp > 0 ? flops / tdp * 1e-9 : 0.0, tsb > 0 ? ts / tsb : 0.0,
		       tdp > 0 ? ts / tdp : 0.0, err);
		ds_free(af);
		ds_free(bf);
		ds_free(c);
		ds_free(ref);
		ds_free(ah);
		ds_free(bh);
	}
	return 0;
}
