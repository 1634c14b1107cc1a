/* bf16-gemm.c - every matrix product of a GPT training step in fp32 sgemm,
 * through oneDNN in bf16 and on dstk's own AVX512_BF16 kernel (issues 5
 * and 21): the measurements behind dstk.bf16_matmul "auto"'s choice per
 * shape class (kernels/cpu/gemm_bf16.c, ds_gemm_bf16_pick).
 *
 * Models: gpt-tiny (B=8, T=128: share/configs/default.json's micro-batch),
 * GPT-2 124M at B=4, T=64 (bench/gpt-step's gpt2) and at B=1, T=1024
 * (attention-heavy).  Products, row-major with N = B*T as lib/model/gpt.c
 * issues them:
 *   linear NT  out (N,OC) = inp (N,IC) @ w (OC,IC)^T        (forward)
 *          NN  dinp (N,IC) = dout (N,OC) @ w (OC,IC)         (backward)
 *          TN  dw (OC,IC) += dout^T @ inp                    (backward)
 *   for qkv, attn.proj, fc, fc.proj and the head (OC = V, the logits with
 *   leading dimension Vp); attention: the B*NH per-head products on
 *   strided views of qkv (lda 3C), forward S = q k^T, y = P v and backward
 *   dP = dy v^T, dv = P^T dy, dq = dS k, dk = dS^T q, each timed as one
 *   batch (gpt.c's ds_gemm_bf16_batch; sgemm: the cpu backend's fp32 batch,
 *   its calls shared out over the threads).
 * Columns: GFLOP/s of sgemm (fp32 inputs), oneDNN and the kernel (both on
 * the same fp32 inputs, so rounding them to bf16 is included, as every
 * call in gpt.c pays it), each one's ratio to sgemm, what auto picks, and
 * max_relerr: the kernel (oneDNN where the CPU has no AVX512_BF16)
 * against sgemm of the bf16-rounded inputs (max |diff| / max |ref|: the
 * fp32 summation order only).  The variants are timed in turn, repetition
 * after repetition, so a shared machine's load hits them alike; each
 * figure is the best of `reps` (wall time, or with OMP_NUM_THREADS=1 the
 * thread's CPU time, the ceiling too).  The sgemm ceiling (1024^3) is
 * measured at the start and end.  Not a test: it asserts nothing.
 *
 * Usage: bench/bf16-gemm [reps] [tiny|gpt2|gpt2-1024|all]   (default 5 all)
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/gemm_bf16.h"
#include "cpu/ceiling.h"
#include "compute/compute.h"
#include "app/blas_core.h"
#include "util/half.h"
#include "util/mem.h"
#include "util/timer.h"

/* one product, or a batch of them (bt.count > 1: entry e at offsets
 * (e / inner) * s[0] + (e % inner) * s[1], as gpt.c's attention) */
struct prod {
	char name[40];
	const char *lay;
	int M, N, K, lda, ldb, ldc;
	float alpha, beta;
	struct ds_gemm_bf16_batch bt;
};

/* offset of entry e with strides s */
static long off(const struct ds_gemm_bf16_batch *bt, const long s[2], int e)
{
	return (long)(e / bt->inner) * s[0] + (long)(e % bt->inner) * s[1];
}

enum { SG = 0, DN, KN, NV };   /* sgemm, oneDNN, kernel */

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

/* p with variant v on a, b, c; 0, or -1 when v cannot run it */
static int run(const struct prod *p, int v, const float *a, const float *b, float *c)
{
	int ta = p->lay[0] == 'T', tb = p->lay[1] == 'T';
	const struct ds_gemm_bf16_batch *bt = &p->bt;
	if (v == SG) {   /* the fp32 products of the cpu backend, as gpt.c's fp32 runs issue them */
		ds_compute_cpu.gemm(-1, bt, ta, tb, p->M, p->N, p->K, p->alpha, a, p->lda, b, p->ldb, p->beta, c, p->ldc);
		return 0;
	}
	enum ds_bf16_impl im = v == DN ? DS_BF16_ONEDNN : DS_BF16_KERNEL;
	if (bt->count > 1)
		return ds_gemm_bf16_batch(im, bt, ta, tb, p->M, p->N, p->K, p->alpha, a, p->lda, b, p->ldb, p->beta, c,
					  p->ldc);
	return ds_gemm_bf16(im, ta, tb, p->M, p->N, p->K, p->alpha, a, p->lda, b, p->ldb, p->beta, c, p->ldc);
}

/* elements one operand spans: rows x ld, over all entries */
static long span(const struct ds_gemm_bf16_batch *bt, int rows, int ld, const long s[2])
{
	return (long)rows * ld + off(bt, s, bt->count - 1);
}

/* the products of one model's step (see the top comment) */
static int add_model(struct prod *ps, const char *name, int C, int NH, int F, int V, int Vp, int B, int T)
{
	const int N = B * T, hs = C / NH, C3 = 3 * C;
	const struct { const char *n; int ic, oc; } lin[5] = {
		{ "qkv", C, C3 }, { "attn.proj", C, C }, { "fc", C, F }, { "fc.proj", F, C }, { "head", C, V }
	};
	int np = 0;
	for (int l = 0; l < 5; l++) {
		int ic = lin[l].ic, oc = lin[l].oc, head = l == 4, ldo = head ? Vp : oc;
		const char *lays[3] = { "NT", "NN", "TN" };
		const struct ds_gemm_bf16_batch one = { 1, 1, { 0, 0 }, { 0, 0 }, { 0, 0 }, DS_GEMM_BF16_DENSE, 0, NULL, NULL };
		struct prod q[3] = {
			/* out (N,oc) = inp (N,ic) @ w^T, += bias (the head writes, ldc Vp) */
			{ "", "NT", N, oc, ic, ic, ic, ldo, 1.0f, head ? 0.0f : 1.0f, one },
			/* dinp (N,ic) = dout (N,oc) @ w (oc,ic) */
			{ "", "NN", N, ic, oc, ldo, ic, ic, 1.0f, 0.0f, one },
			/* dw (oc,ic) += dout^T @ inp */
			{ "", "TN", oc, ic, N, ldo, ic, ic, 1.0f, 1.0f, one },
		};
		for (int k = 0; k < 3; k++) {
			q[k].lay = lays[k];
			snprintf(q[k].name, sizeof q[k].name, "%s %s", name, lin[l].n);
			ps[np++] = q[k];
		}
	}
	/* attention: B*NH products on strided views (gpt.c's batches), dense:
	 * gpt.c also tells the kernel which half the causal mask zeroes, which
	 * it skips (not timed here) */
	const long TT = (long)T * T, TC3 = (long)T * C3, TC = (long)T * C;
	const float sc = 1.0f / sqrtf((float)hs);
	const int n = B * NH;
	struct prod att[6] = {
		/* S = q k^T */
		{ "", "NT", T, T, hs, C3, C3, T, sc, 0.0f, { n, NH, { TC3, hs }, { TC3, hs }, { NH * TT, TT }, DS_GEMM_BF16_DENSE, 0, NULL, NULL } },
		/* y = P v */
		{ "", "NN", T, hs, T, T, C3, C, 1.0f, 0.0f, { n, NH, { NH * TT, TT }, { TC3, hs }, { TC, hs }, DS_GEMM_BF16_DENSE, 0, NULL, NULL } },
		/* dP = dy v^T */
		{ "", "NT", T, T, hs, C, C3, T, 1.0f, 0.0f, { n, NH, { TC, hs }, { TC3, hs }, { NH * TT, TT }, DS_GEMM_BF16_DENSE, 0, NULL, NULL } },
		/* dv = P^T dy */
		{ "", "TN", T, hs, T, T, C, C3, 1.0f, 0.0f, { n, NH, { NH * TT, TT }, { TC, hs }, { TC3, hs }, DS_GEMM_BF16_DENSE, 0, NULL, NULL } },
		/* dq = dS k */
		{ "", "NN", T, hs, T, T, C3, C3, 1.0f, 0.0f, { n, NH, { NH * TT, TT }, { TC3, hs }, { TC3, hs }, DS_GEMM_BF16_DENSE, 0, NULL, NULL } },
		/* dk = dS^T q */
		{ "", "TN", T, hs, T, T, C3, C3, 1.0f, 0.0f, { n, NH, { NH * TT, TT }, { TC3, hs }, { TC3, hs }, DS_GEMM_BF16_DENSE, 0, NULL, NULL } },
	};
	const char *an[6] = { "S=qk'", "y=Pv", "dP=dyv'", "dv=P'dy", "dq=dSk", "dk=dS'q" };
	for (int k = 0; k < 6; k++) {
		att[k].lay = k == 0 || k == 2 ? "NT" : k == 1 || k == 4 ? "NN" : "TN";
		snprintf(att[k].name, sizeof att[k].name, "%s att %s", name, an[k]);
		ps[np++] = att[k];
	}
	return np;
}

int main(int argc, char **argv)
{
	(void)ds_blas_core_reexec(argv);   /* OpenBLAS's Prescott fallback replaced, as the tools do */
	int reps = argc > 1 ? atoi(argv[1]) : 5;
	const char *which = argc > 2 ? argv[2] : "all";
	if (reps < 1 || (strcmp(which, "all") && strcmp(which, "tiny") && strcmp(which, "gpt2") &&
			 strcmp(which, "gpt2-1024"))) {
		fprintf(stderr, "usage: bf16-gemm [reps] [tiny|gpt2|gpt2-1024|all]\n");
		return 2;
	}
	static struct prod ps[64];
	int np = 0;
	if (!strcmp(which, "all") || !strcmp(which, "tiny"))
		np += add_model(ps + np, "tiny", 384, 6, 1536, 256, 256, 8, 128);
	if (!strcmp(which, "all") || !strcmp(which, "gpt2"))
		np += add_model(ps + np, "gpt2", 768, 12, 3072, 50257, 50304, 4, 64);
	if (!strcmp(which, "all") || !strcmp(which, "gpt2-1024"))
		np += add_model(ps + np, "gpt2/1024", 768, 12, 3072, 50257, 50304, 1, 1024);
	long big = 0;
	for (int i = 0; i < np; i++) {
		const struct prod *p = &ps[i];
		int ta = p->lay[0] == 'T', tb = p->lay[1] == 'T';
		long a = span(&p->bt, ta ? p->K : p->M, p->lda, p->bt.sa);
		long b = span(&p->bt, tb ? p->N : p->K, p->ldb, p->bt.sb);
		long c = span(&p->bt, p->M, p->ldc, p->bt.sc);
		big = a > big ? a : big;
		big = b > big ? b : big;
		big = c > big ? c : big;
	}
	A = ds_alloc((size_t)big * 4); B = ds_alloc((size_t)big * 4); C = ds_alloc((size_t)big * 4);
	R = ds_alloc((size_t)big * 4); Ar = ds_alloc((size_t)big * 4); Br = ds_alloc((size_t)big * 4);
	if (!A || !B || !C || !R || !Ar || !Br) {
		fprintf(stderr, "bf16-gemm: out of memory\n");
		return 1;
	}
	for (long i = 0; i < big; i++) {
		A[i] = (float)((i * 2654435761u % 2001) / 1000.0 - 1.0);
		B[i] = (float)((i * 40503u % 2001) / 1000.0 - 1.0) * 0.05f;
		C[i] = 0.0f;
	}
	memcpy(Ar, A, (size_t)big * 4);
	memcpy(Br, B, (size_t)big * 4);
	ds_half_round_n(DS_HALF_BF16, Ar, (size_t)big);
	ds_half_round_n(DS_HALF_BF16, Br, (size_t)big);

	double ceil0 = ceiling();
	const char *why = NULL;
	int have[NV] = { 1, ds_gemm_bf16_available(DS_BF16_ONEDNN, NULL), ds_gemm_bf16_available(DS_BF16_KERNEL, &why) };
	char plan[512];
	ds_gemm_bf16_plan(DS_BF16_MM_AUTO, plan, sizeof plan);
	printf("# bf16-gemm: %d threads, best of %d (%s), variants interleaved\n", omp_get_max_threads(), reps,
	       omp_get_max_threads() == 1 ? "thread CPU time" : "wall time");
	char bnote[512];
	printf("# blas: %s, core %s%s%s\n", openblas_get_config(), openblas_get_corename(),
	       ds_blas_core_note(bnote, sizeof bnote) ? "; " : "", bnote);
	printf("# oneDNN: %s\n# kernel: %s\n# auto: %s\n", ds_gemm_bf16_onednn_describe(),
	       have[KN] ? "dstk's AVX512_BF16 kernel (vdpbf16ps)" : why, plan);
	printf("# sgemm_ceiling_gflops (1024^3, start) %.1f\n", ceil0);
	printf("# %-24s %-3s %5s %5s %5s %5s %8s %8s %8s %6s %6s %-7s %9s\n", "product", "lay", "M", "N", "K", "calls",
	       "sgemm_gf", "onednn_gf", "kernel_gf", "dn/s", "kn/s", "auto", "max_relerr");
	double tot[NV + 1] = { 0 };
	for (int i = 0; i < np; i++) {
		const struct prod *p = &ps[i];
		double flops = 2.0 * p->M * p->N * p->K * p->bt.count, t[NV] = { 1e30, 1e30, 1e30 };
		int ok[NV];
		for (int v = 0; v < NV; v++)   /* warm: primitives, pages */
			ok[v] = have[v] && run(p, v, A, B, C) == 0;
		for (int r = 0; r < reps; r++)
			for (int v = 0; v < NV; v++) {
				if (!ok[v])
					continue;
				double t0 = now();
				run(p, v, A, B, C);
				double d = now() - t0;
				t[v] = d < t[v] ? d : t[v];
			}
		int ta = p->lay[0] == 'T', tb = p->lay[1] == 'T';
		enum ds_bf16_impl pick = ds_gemm_bf16_pick(DS_BF16_MM_AUTO, ta, tb, p->M, p->N, p->K, p->bt.count);
		int pv = pick == DS_BF16_ONEDNN ? DN : pick == DS_BF16_KERNEL ? KN : SG;
		for (int v = 0; v < NV; v++)
			tot[v] += ok[v] ? t[v] : t[SG];
		tot[NV] += ok[pv] ? t[pv] : t[SG];
		double err = 0;
		int ev = ok[KN] ? KN : ok[DN] ? DN : SG;
		if (ev != SG) {   /* bf16 on the fp32 inputs vs sgemm on the bf16-rounded ones, from the same C */
			long nc = span(&p->bt, p->M, p->ldc, p->bt.sc);
			for (long j = 0; j < nc; j++)
				C[j] = R[j] = (float)(j % 7) * 0.125f;
			run(p, ev, A, B, C);
			run(p, SG, Ar, Br, R);
			double mx = 0, d = 0;
			for (long j = 0; j < nc; j++) {
				d = fmax(d, fabs((double)C[j] - R[j]));
				mx = fmax(mx, fabs((double)R[j]));
			}
			err = mx > 0 ? d / mx : d;
		}
		printf("  %-24s %-3s %5d %5d %5d %5d %8.1f %8.1f %8.1f %6.2f %6.2f %-7s %9.2e\n", p->name, p->lay, p->M,
		       p->N, p->K, p->bt.count, flops / t[SG] * 1e-9, ok[DN] ? flops / t[DN] * 1e-9 : 0.0,
		       ok[KN] ? flops / t[KN] * 1e-9 : 0.0, ok[DN] ? t[SG] / t[DN] : 0.0, ok[KN] ? t[SG] / t[KN] : 0.0,
		       pv == DN ? "onednn" : pv == KN ? "kernel" : "sgemm", err);
	}
	double ceil1 = ceiling();
	printf("# sgemm_ceiling_gflops (1024^3, end) %.1f\n", ceil1);
	printf("# all products once (ms): sgemm %.2f, onednn %.2f, kernel %.2f, auto %.2f (auto %.2fx sgemm)\n",
	       tot[SG] * 1e3, tot[DN] * 1e3, tot[KN] * 1e3, tot[NV] * 1e3, tot[SG] / tot[NV]);
	ds_free(A); ds_free(B); ds_free(C); ds_free(R); ds_free(Ar); ds_free(Br);
	return 0;
}
