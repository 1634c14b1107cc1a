/* cuda-kernels.c - kernels/cuda on a GPU at training sizes: the fused
 * attention (tensor-core and FMA paths) forward and backward against the
 * unfused path (cuBLAS strided-batched products + the softmax kernels),
 * the bf16 GEMM through the wrapper, and a few memory-bound kernels, each
 * figure next to the device's ceilings measured in the same run: the bf16
 * cuBLAS rate at 8192^3 and the device-to-device copy bandwidth (bytes read
 * + written).  Attention FLOPs count the causal half: forward 2 products
 * of 2*B*NH*T*T*hs/2, backward 2.5 times the forward (FlashAttention-2's
 * convention).  max_relerr: the fused output and gradients against the
 * unfused path on the same inputs (max |diff| / max |ref| per tensor).
 * Not a test: it asserts nothing.  Without a device it says so and exits 0.
 *
 * Usage: bench/cuda-kernels [reps]   (default 10)
 *        bench/cuda-kernels ceiling [reps]   the bf16 GEMM ceiling line
 *                                 alone (bench/gpu-step.sh's MFU reference)
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/attn_cuda.h"
#include "cuda/flat_cuda.h"
#include "cuda/gemm_cuda.h"
#include "cuda/gpt_cuda.h"
#include "util/half.h"
#include "util/rng.h"

#define CK(x)                                                                                              \
	do {                                                                                               \
		int rc_ = (int)(x);                                                                        \
		if (rc_) {                                                                                 \
			fprintf(stderr, "cuda-kernels: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,           \
				ds_cuda_strerror(rc_));                                                    \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)

static int reps = 10;
static cudaEvent_t ev0, ev1;

/* milliseconds per call of fn(arg), best of reps after one warm-up */
static double time_ms(void (*fn)(void *), void *arg)
{
	fn(arg);
	CK(cudaDeviceSynchronize());
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		CK(cudaEventRecord(ev0, NULL));
		fn(arg);
		CK(cudaEventRecord(ev1, NULL));
		CK(cudaEventSynchronize(ev1));
		float ms = 0;
		CK(cudaEventElapsedTime(&ms, ev0, ev1));
		best = ms < best ? ms : best;
	}
	return best;
}

static void *dalloc(size_t n)
{
	void *p = NULL;
	CK(cudaMalloc(&p, n));
	return p;
}

/* n 16-bit (kind k) or fp32 values, uniform in [-s, s), on the device */
static void *drand(enum ds_half_kind k, size_t n, float s, unsigned seed)
{
	float *h = malloc(n * sizeof(float));
	struct ds_rng g;
	ds_rng_init(&g, seed, 1, 2);
	for (size_t i = 0; i < n; i++)
		h[i] = s * (2.0f * ds_rng_uniform(&g, i) - 1.0f);
	void *d = dalloc(n * (k == DS_HALF_NONE ? 4 : 2));
	if (k == DS_HALF_NONE) {
		CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
	} else {
		uint16_t *p = malloc(n * 2);
		ds_half_pack_n(k, p, h, n);
		CK(cudaMemcpy(d, p, n * 2, cudaMemcpyHostToDevice));
		free(p);
	}
	free(h);
	return d;
}

static float *fetch(enum ds_half_kind k, const void *d, size_t n)
{
	float *h = malloc(n * 4);
	if (k == DS_HALF_NONE) {
		CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
	} else {
		uint16_t *p = malloc(n * 2);
		CK(cudaMemcpy(p, d, n * 2, cudaMemcpyDeviceToHost));
		ds_half_unpack_n(k, h, p, n);
		free(p);
	}
	return h;
}

static double relerr(const float *a, const float *b, size_t n)
{
	double md = 0, mb = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		md = d > md || d != d ? d : md;
		mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
	}
	return mb > 0 ? md / mb : md;
}

/* ---- ceilings ------------------------------------------------------------- */

struct gemm_arg {
	struct ds_cuda_blas *b;
	int n;
	void *A, *B, *C;
};

static void run_gemm(void *p)
{
	struct gemm_arg *a = p;
	CK(ds_cuda_gemm(a->b, DS_HALF_BF16, DS_HALF_BF16, 0, 1, a->n, a->n, a->n, 1.0f, a->A, a->n, a->B, a->n, 0.0f,
			a->C, a->n));
}

struct copy_arg {
	void *a, *b;
	size_t n;
};

static void run_copy(void *p)
{
	struct copy_arg *a = p;
	CK(cudaMemcpyAsync(a->b, a->a, a->n, cudaMemcpyDeviceToDevice, NULL));
}

/* ---- attention -------------------------------------------------------------- */

struct attn_arg {
	int B, T, C, NH, impl;
	enum ds_half_kind dt;
	void *qkv, *y, *dy, *dqkv;
	float *lse;
	float p;
	struct ds_rng *gs;
	/* the unfused path (fp32) */
	struct ds_cuda_blas *blas;
	float *q32, *att, *attd, *datt, *y32, *dy32, *dq32;
};

static void run_fwd(void *p)
{
	struct attn_arg *a = p;
	CK(ds_cuda_attention_forward(a->y, a->lse, a->qkv, a->B, a->T, a->C, a->NH, a->p, a->gs, a->dt,
				     (enum ds_attn_impl)a->impl, NULL));
}

static void run_bwd(void *p)
{
	struct attn_arg *a = p;
	CK(ds_cuda_attention_backward(a->dqkv, a->dy, a->qkv, a->y, a->lse, a->B, a->T, a->C, a->NH, a->p, a->gs, a->dt,
				      (enum ds_attn_impl)a->impl, NULL));
}

/* lib/model/gpt.c's attention unfused on the device, fp32 */
static void run_unfused(void *p)
{
	struct attn_arg *a = p;
	CK(ds_cuda_attention_unfused_forward(a->blas, DS_HALF_NONE, DS_HALF_NONE, a->y32, a->att, a->attd, a->q32, a->B,
					     a->T, a->C, a->NH, a->p, a->gs, NULL));
	CK(ds_cuda_attention_unfused_backward(a->blas, DS_HALF_NONE, DS_HALF_NONE, a->dq32, a->dy32, a->q32, a->att,
					      a->attd, a->datt, a->B, a->T, a->C, a->NH, a->p, a->gs, NULL));
}

static void attention(struct ds_cuda_blas *blas, const char *name, int B, int T, int NH, int hs, double bf16_tf)
{
	const int C = NH * hs;
	const size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, tt = (size_t)B * NH * T * T;
	struct attn_arg a = { B, T, C, NH, 0, DS_HALF_BF16, NULL, NULL, NULL, NULL, NULL, 0.1f, NULL, blas,
			      NULL, NULL, NULL, NULL, NULL, NULL, NULL };
	a.gs = malloc((size_t)B * sizeof(*a.gs));
	for (int b = 0; b < B; b++)
		ds_rng_init(&a.gs[b], 1234, 0, (uint64_t)b << 20 | 1 << 4 | 1);
	const double fwd_flop = 4.0 * B * NH * (double)T * T * hs / 2, bwd_flop = 2.5 * fwd_flop;
	/* the unfused fp32 reference on the bf16 values */
	a.q32 = drand(DS_HALF_NONE, nq, 1.5f, 7);
	a.dy32 = drand(DS_HALF_NONE, ny, 1.0f, 8);
	float *hq = fetch(DS_HALF_NONE, a.q32, nq), *hd = fetch(DS_HALF_NONE, a.dy32, ny);
	ds_half_round_n(DS_HALF_BF16, hq, nq);
	ds_half_round_n(DS_HALF_BF16, hd, ny);
	CK(cudaMemcpy(a.q32, hq, nq * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(a.dy32, hd, ny * 4, cudaMemcpyHostToDevice));
	a.att = dalloc(tt * 4);
	a.attd = dalloc(tt * 4);
	a.datt = dalloc(tt * 4);
	a.y32 = dalloc(ny * 4);
	a.dq32 = dalloc(nq * 4);
	double ms_un = time_ms(run_unfused, &a);
	float *ry = fetch(DS_HALF_NONE, a.y32, ny), *rq = fetch(DS_HALF_NONE, a.dq32, nq);
	printf("%-10s unfused fp32 (cuBLAS + softmax) fwd+bwd %8.3f ms  %7.1f TFLOP/s  (%.0f MiB of (T,T) scores)\n", name,
	       ms_un, (fwd_flop + bwd_flop) / ms_un * 1e-9, 3.0 * tt * 4 / 1048576.0);
	for (int dk = 0; dk < 2; dk++) {
		a.dt = dk ? DS_HALF_BF16 : DS_HALF_NONE;
		const size_t es = a.dt == DS_HALF_NONE ? 4 : 2;
		a.qkv = dalloc(nq * es);
		a.dy = dalloc(ny * es);
		a.y = dalloc(ny * es);
		a.dqkv = dalloc(nq * es);
		a.lse = dalloc((size_t)B * NH * T * 4);
		if (a.dt == DS_HALF_NONE) {
			CK(cudaMemcpy(a.qkv, hq, nq * 4, cudaMemcpyHostToDevice));
			CK(cudaMemcpy(a.dy, hd, ny * 4, cudaMemcpyHostToDevice));
		} else {
			uint16_t *p = malloc(nq * 2);
			ds_half_pack_n(a.dt, p, hq, nq);
			CK(cudaMemcpy(a.qkv, p, nq * 2, cudaMemcpyHostToDevice));
			ds_half_pack_n(a.dt, p, hd, ny);
			CK(cudaMemcpy(a.dy, p, ny * 2, cudaMemcpyHostToDevice));
			free(p);
		}
		for (int im = DS_ATTN_FMA; im <= DS_ATTN_TC; im++) {
			if (!ds_cuda_attention_supported((enum ds_attn_impl)im, a.dt, hs))
				continue;
			a.impl = im;
			double mf = time_ms(run_fwd, &a), mb = time_ms(run_bwd, &a);
			float *gy = fetch(a.dt, a.y, ny), *gq = fetch(a.dt, a.dqkv, nq);
			printf("%-10s fused %s %-4s fwd %8.3f ms %7.1f TFLOP/s (%4.1f%% of bf16 GEMM)  bwd %8.3f ms %7.1f TFLOP/s"
			       "  max_relerr y %.2e dqkv %.2e\n",
			       name, ds_half_name(a.dt), im == DS_ATTN_TC ? "tc" : "fma", mf, fwd_flop / mf * 1e-9,
			       100.0 * fwd_flop / mf * 1e-9 / bf16_tf, mb, bwd_flop / mb * 1e-9, relerr(gy, ry, ny),
			       relerr(gq, rq, nq));
			free(gy);
			free(gq);
		}
		cudaFree(a.qkv);
		cudaFree(a.dy);
		cudaFree(a.y);
		cudaFree(a.dqkv);
		cudaFree(a.lse);
	}
	free(hq); free(hd); free(ry); free(rq); free(a.gs);
	cudaFree(a.q32); cudaFree(a.dy32); cudaFree(a.att); cudaFree(a.attd); cudaFree(a.datt); cudaFree(a.y32);
	cudaFree(a.dq32);
}

/* ---- memory-bound kernels ----------------------------------------------------- */

struct ew_arg {
	float *x, *y, *w, *b, *s1, *s2, *m, *v;
	int64_t N, n;
	int C;
	struct ds_adam_coef c;
};

static void run_ln(void *p)
{
	struct ew_arg *a = p;
	CK(ds_kernel_cuda_layernorm_forward(a->y, a->s1, a->s2, a->x, a->w, a->b, a->N, a->C, 1e-5f, NULL));
}

static void run_adam(void *p)
{
	struct ew_arg *a = p;
	CK(ds_cuda_adam(&a->c, a->x, a->y, a->m, a->v, a->n, NULL));
}

int main(int argc, char **argv)
{
	const int only_ceiling = argc > 1 && !strcmp(argv[1], "ceiling");
	if (argc > 1 + only_ceiling)
		reps = atoi(argv[1 + only_ceiling]) > 0 ? atoi(argv[1 + only_ceiling]) : reps;
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("cuda-kernels: no CUDA device here; nothing measured\n");
		return 0;
	}
	struct cudaDeviceProp pr;
	CK(cudaGetDeviceProperties(&pr, 0));
	printf("device: %s, sm_%d%d, %d SMs, %.0f GiB; reps %d (best of)\n", pr.name, pr.major, pr.minor,
	       pr.multiProcessorCount, pr.totalGlobalMem / 1073741824.0, reps);
	CK(cudaEventCreate(&ev0));
	CK(cudaEventCreate(&ev1));
	struct ds_cuda_blas *blas = NULL;
	CK(ds_cuda_blas_create(&blas, NULL, 0));

	/* ceilings */
	struct gemm_arg g = { blas, 8192, NULL, NULL, NULL };
	g.A = drand(DS_HALF_BF16, (size_t)g.n * g.n, 1.0f, 1);
	g.B = drand(DS_HALF_BF16, (size_t)g.n * g.n, 1.0f, 2);
	g.C = dalloc((size_t)g.n * g.n * 2);
	const double gms = time_ms(run_gemm, &g), gtf = 2.0 * g.n * (double)g.n * g.n / gms * 1e-9;
	printf("ceiling    bf16 GEMM %d^3 (cuBLAS)    %8.3f ms  %7.1f TFLOP/s\n", g.n, gms, gtf);
	cudaFree(g.A); cudaFree(g.B); cudaFree(g.C);
	if (only_ceiling) {
		ds_cuda_blas_destroy(blas);
		return 0;
	}
	struct copy_arg cp = { NULL, NULL, (size_t)1 << 30 };
	cp.a = dalloc(cp.n);
	cp.b = dalloc(cp.n);
	CK(cudaMemset(cp.a, 0, cp.n));
	const double cms = time_ms(run_copy, &cp), cgb = 2.0 * cp.n / cms * 1e-6;
	printf("ceiling    device copy 1 GiB         %8.3f ms  %7.1f GB/s (read + write)\n", cms, cgb);
	cudaFree(cp.a); cudaFree(cp.b);

	/* GPT-2 124M and 350M attention at micro batch 16 x 1024 tokens */
	attention(blas, "gpt2-124M", 16, 1024, 12, 64, gtf);
	attention(blas, "gpt2-350M", 16, 1024, 16, 64, gtf);

	/* layernorm (16K rows of 1024) and Adam over 350M parameters */
	struct ew_arg e;
	memset(&e, 0, sizeof(e));
	e.N = 16384;
	e.C = 1024;
	e.x = drand(DS_HALF_NONE, (size_t)e.N * e.C, 1.0f, 3);
	e.y = dalloc((size_t)e.N * e.C * 4);
	e.w = drand(DS_HALF_NONE, (size_t)e.C, 1.0f, 4);
	e.b = drand(DS_HALF_NONE, (size_t)e.C, 1.0f, 5);
	e.s1 = dalloc((size_t)e.N * 4);
	e.s2 = dalloc((size_t)e.N * 4);
	const double lms = time_ms(run_ln, &e);
	printf("layernorm  fwd %lld x %d fp32          %8.3f ms  %7.1f GB/s (%4.1f%% of copy)\n", (long long)e.N, e.C, lms,
	       2.0 * e.N * e.C * 4 / lms * 1e-6, 100.0 * 2.0 * e.N * e.C * 4 / lms * 1e-6 / cgb);
	cudaFree(e.x); cudaFree(e.y);
	e.n = 350000000;
	e.x = drand(DS_HALF_NONE, (size_t)e.n, 1.0f, 6);
	e.y = drand(DS_HALF_NONE, (size_t)e.n, 1.0f, 7);
	e.m = dalloc((size_t)e.n * 4);
	e.v = dalloc((size_t)e.n * 4);
	CK(cudaMemset(e.m, 0, (size_t)e.n * 4));
	CK(cudaMemset(e.v, 0, (size_t)e.n * 4));
	e.c = (struct ds_adam_coef){ 0.9f, 0.999f, 0.1f, 0.001f, 1e-8f, 1.0f, -1e-3f, 0.0f, -1e-5f, 1.0f };
	const double ams = time_ms(run_adam, &e);
	printf("adamw      %lld params fp32           %8.3f ms  %7.1f GB/s (%4.1f%% of copy; 7 x 4 bytes per param)\n",
	       (long long)e.n, ams, 28.0 * e.n / ams * 1e-6, 100.0 * 28.0 * e.n / ams * 1e-6 / cgb);
	ds_cuda_blas_destroy(blas);
	return 0;
}
