/* amx-gemm.c - bf16 matrix products on AMX (oneDNN, kernels/cpu/gemm_bf16)
 * against OpenBLAS's sgemm on the products of a GPT training step (issue 5).
 *
 * For gpt-tiny (B=8, T=128: share/configs/default.json's micro-batch) and
 * GPT-2 124M (B=4, T=64: bench/gpt-step's gpt2) it times every product
 * lib/model/gpt.c issues, row-major with N = B*T:
 *   linear NT  out (N,OC) = inp (N,IC) @ w (OC,IC)^T        (forward)
 *          NN  dinp (N,IC) = dout (N,OC) @ w (OC,IC)         (backward)
 *          TN  dw (OC,IC) += dout^T @ inp                    (backward)
 *   for qkv, attn.proj, fc, fc.proj and the head (OC = V, the logits
 *   with leading dimension Vp); attention: the B*NH per-head products on strided
 *   views of qkv (lda 3C), timed as the whole loop gpt.c runs.
 * sgemm_gflops is cblas_sgemm on the fp32 inputs; amx_gflops is
 * ds_gemm_bf16 on the same fp32 inputs, so it includes rounding A and B to
 * bf16 (the conversion every call in gpt.c pays); ratio = sgemm time / AMX
 * time.  max_relerr compares AMX with sgemm of the bf16-rounded inputs
 * (max |diff| / max |ref|; fp32 accumulation order only).  The attention
 * rows show why gpt.c keeps products below DS_GEMM_BF16_MIN_MNK on sgemm;
 * here every product runs on AMX.  The sgemm
 * ceiling (1024^3) is measured at the start and end of the same run.
 * Figures are the best of `reps`: wall time, or with OMP_NUM_THREADS=1 the
 * thread's CPU time (a busy shared machine's preemption does not count; the
 * ceiling is then also timed so, by the same 1024^3 sgemm).
 * Not a test: it asserts nothing.
 *
 * Usage: bench/amx-gemm [reps]   (default 5)
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/ceiling.h"
#include "cpu/gemm_bf16.h"
#include "util/half.h"
#include "util/mem.h"
#include "util/timer.h"

/* one product, issued `count` times with A/B/C advanced by the offsets
 * (the attention's per-(b, head) loop) */
struct prod {
	const char *name, *lay;
	int M, N, K, lda, ldb, ldc, count;
	int64_t da, db, dc;          /* offsets between consecutive calls */
	float alpha, beta;
};

static float *A, *B, *C, *R, *Ar, *Br;

/* seconds: the thread's CPU time with one thread, else wall time */
static double now(void)
{
	struct timespec ts;
	if (omp_get_max_threads() == 1 && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
		return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
	return ds_now();
}

/* the sgemm ceiling: ds_ceiling_sgemm_gflops's 1024^3 product, timed by now() */
static double ceiling(void)
{
	if (omp_get_max_threads() != 1)
		return ds_ceiling_sgemm_gflops(0, 1.0);
	const int n = 1024;
	float *a = ds_alloc((size_t)n * n * 4), *b = ds_alloc((size_t)n * n * 4), *c = ds_alloc((size_t)n * n * 4);
	if (!a || !b || !c)
		return -1;
	for (size_t i = 0; i < (size_t)n * n; i++)
		a[i] = b[i] = (float)(i % 13) * 0.01f;
	double t = 1e30;
	for (int r = 0; r < 6; r++) {
		double t0 = now();
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
		double d = now() - t0;
		t = d < t ? d : t;
	}
	ds_free(a); ds_free(b); ds_free(c);
	return 2.0 * n * n * n / t * 1e-9;
}

static void run(const struct prod *p, int amx, const float *a, const float *b, float *c)
{
	int ta = p->lay[0] == 'T', tb = p->lay[1] == 'T';
	for (int i = 0; i < p->count; i++) {
		const float *ai = a + i * p->da, *bi = b + i * p->db;
		float *ci = c + i * p->dc;
		if (!amx || ds_gemm_bf16(ta, tb, p->M, p->N, p->K, p->alpha, ai, p->lda, bi, p->ldb, p->beta, ci,
					 p->ldc))
			cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, p->M,
				    p->N, p->K, p->alpha, ai, p->lda, bi, p->ldb, p->beta, ci, p->ldc);
	}
}

static double best(const struct prod *p, int amx, int reps)
{
	double t = 1e30;
	run(p, amx, A, B, C);   /* warm: primitive creation, pages */
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		run(p, amx, A, B, C);
		double d = now() - t0;
		if (d < t)
			t = d;
	}
	return t;
}

/* elements one operand spans: rows x ld, over all calls */
static int64_t span(int rows, int ld, int count, int64_t step) { return (int64_t)rows * ld + (count - 1) * step; }

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 5;
	if (reps < 1) {
		fprintf(stderr, "usage: amx-gemm [reps]\n");
		return 2;
	}
	struct prod ps[64];
	int np = 0;
	static const struct { const char *name; int C, NH, F, V, Vp, B, T; } models[2] = {
		{ "gpt-tiny", 384, 6, 1536, 256, 256, 8, 128 }, { "gpt2-124m", 768, 12, 3072, 50257, 50304, 4, 64 }
	};
	static char names[32][48];
	for (int m = 0; m < 2; m++) {
		const int C = models[m].C, F = models[m].F, V = models[m].V, Vp = models[m].Vp, B = models[m].B, T = models[m].T;
		const int N = B * T, NH = models[m].NH, hs = C / NH, C3 = 3 * C;
		const struct { const char *n; int ic, oc; } lin[5] = {
			{ "qkv", C, C3 }, { "attn.proj", C, C }, { "fc", C, F }, { "fc.proj", F, C }, { "head", C, V }
		};
		for (int l = 0; l < 5; l++) {
			int ic = lin[l].ic, oc = lin[l].oc, head = l == 4, ldo = head ? Vp : oc;
			char *nm = names[np / 3];
			snprintf(nm, sizeof names[0], "%s %s", models[m].name, lin[l].n);
			/* out (N,oc) = inp (N,ic) @ w^T, += bias (the head writes, ldc Vp) */
			ps[np++] = (struct prod){ nm, "NT", N, oc, ic, ic, ic, ldo, 1, 0, 0, 0, 1.0f, head ? 0.0f : 1.0f };
			/* dinp (N,ic) = dout (N,oc) @ w (oc,ic) */
			ps[np++] = (struct prod){ nm, "NN", N, ic, oc, ldo, ic, ic, 1, 0, 0, 0, 1.0f, 0.0f };
			/* dw (oc,ic) += dout^T @ inp */
			ps[np++] = (struct prod){ nm, "TN", oc, ic, N, ldo, ic, ic, 1, 0, 0, 0, 1.0f, 1.0f };
		}
		/* attention, B*NH calls on strided views (gpt.c's loops): S = q k^T
		 * (NT, lda 3C), y = P v (NN), dv = P^T dy (TN) */
		char *nm = names[np / 3];
		snprintf(nm, sizeof names[0], "%s att x%d", models[m].name, B * NH);
		const int64_t TT = (int64_t)T * T;
		ps[np++] = (struct prod){ nm, "NT", T, T, hs, C3, C3, T, B * NH, hs, hs, TT, 1.0f / sqrtf((float)hs), 0.0f };
		ps[np++] = (struct prod){ nm, "NN", T, hs, T, T, C3, C, B * NH, TT, hs, hs, 1.0f, 0.0f };
		ps[np++] = (struct prod){ nm, "TN", T, hs, T, T, C, C3, B * NH, TT, hs, hs, 1.0f, 0.0f };
	}
	int64_t big = 0;
	for (int i = 0; i < np; i++) {
		const struct prod *p = &ps[i];
		int ta = p->lay[0] == 'T', tb = p->lay[1] == 'T';
		int64_t a = span(ta ? p->K : p->M, p->lda, p->count, p->da);
		int64_t b = span(tb ? p->N : p->K, p->ldb, p->count, p->db);
		int64_t c = span(p->M, p->ldc, p->count, p->dc);
		big = a > big ? a : big;
		big = b > big ? b : big;
		big = c > big ? c : big;
	}
	A = ds_alloc((size_t)big * 4); B = ds_alloc((size_t)big * 4); C = ds_alloc((size_t)big * 4);
	R = ds_alloc((size_t)big * 4); Ar = ds_alloc((size_t)big * 4); Br = ds_alloc((size_t)big * 4);
	if (!A || !B || !C || !R || !Ar || !Br) {
		fprintf(stderr, "amx-gemm: out of memory\n");
		return 1;
	}
	for (int64_t i = 0; i < big; i++) {
		A[i] = (float)((i * 2654435761u % 2001) / 1000.0 - 1.0);
		B[i] = (float)((i * 40503u % 2001) / 1000.0 - 1.0) * 0.05f;
	}
	memcpy(Ar, A, (size_t)big * 4);
	memcpy(Br, B, (size_t)big * 4);
	ds_half_round_n(DS_HALF_BF16, Ar, (size_t)big);
	ds_half_round_n(DS_HALF_BF16, Br, (size_t)big);

	double ceil0 = ceiling();
	int amx = ds_gemm_bf16_usable();
	printf("# amx-gemm: %d threads, best of %d (%s); bf16 products: %s\n", omp_get_max_threads(), reps,
	       omp_get_max_threads() == 1 ? "thread CPU time" : "wall time",
	       ds_gemm_bf16_describe());
	printf("# sgemm_ceiling_gflops (1024^3, start) %.1f\n", ceil0);
	printf("# %-22s %-3s %6s %6s %6s %5s %12s %12s %7s %10s\n", "product", "lay", "M", "N", "K", "calls",
	       "sgemm_gflops", "amx_gflops", "ratio", "max_relerr");
	double ts_all = 0, ta_all = 0;
	for (int i = 0; i < np; i++) {
		const struct prod *p = &ps[i];
		double flops = 2.0 * p->M * p->N * p->K * p->count;
		double ts = best(p, 0, reps), tx = amx ? best(p, 1, reps) : 0, err = 0;
		ts_all += ts;
		ta_all += amx ? tx : ts;
		if (amx) {   /* AMX on the fp32 inputs vs sgemm on the bf16-rounded ones, from the same C */
			int64_t nc = span(p->M, p->ldc, p->count, p->dc);
			for (int64_t j = 0; j < nc; j++)
				C[j] = R[j] = (float)(j % 7) * 0.125f;
			run(p, 1, A, B, C);
			run(p, 0, Ar, Br, R);
			double mx = 0, d = 0;
			for (int64_t j = 0; j < nc; j++) {
				d = fmax(d, fabs((double)C[j] - R[j]));
				mx = fmax(mx, fabs((double)R[j]));
			}
			err = mx > 0 ? d / mx : d;
		}
		printf("  %-22s %-3s %6d %6d %6d %5d %12.1f %12.1f %7.2f %10.2e\n", p->name, p->lay, p->M, p->N, p->K,
		       p->count, flops / ts * 1e-9, amx ? flops / tx * 1e-9 : 0.0, amx ? ts / tx : 0.0, err);
	}
	double ceil1 = ceiling();
	printf("# sgemm_ceiling_gflops (1024^3, end) %.1f\n", ceil1);
	printf("# all products once: sgemm %.2f ms, bf16 path %.2f ms, ratio %.2f\n", ts_all * 1e3, ta_all * 1e3,
	       ts_all / ta_all);
	ds_free(A); ds_free(B); ds_free(C); ds_free(R); ds_free(Ar); ds_free(Br);
	return 0;
}
