/* gemm_bf16.c - bf16 matrix products: the choice of implementation per
 * product and the oneDNN one (gemm_bf16.h); dstk's own kernel is in
 * gemm_bf16_kernel.c.
 *
 * oneDNN: each call rounds op(A) and op(B) into bf16 scratch buffers
 * (dense, in their stored orientation: the transposition is left to
 * oneDNN's strides) and runs a oneDNN matmul primitive with bf16
 * src/weights and a dense fp32 destination (C itself, or a dense copy when
 * ldc != N: oneDNN 2.6 picks no AMX kernel for a strided destination);
 * alpha is the output scale and beta a sum post-op.  Primitives are kept
 * per (layout, M, N, K, alpha, beta) in a small least-recently-used table:
 * creating one costs far more than running a small one.  A shape for which
 * oneDNN would pick no bf16 kernel (AMX or AVX512_BF16) is remembered and
 * answered -1 (sgemm).
 */
#include "config.h"

#include "cpu/gemm_bf16.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm_bf16_int.h"
#include <time.h>

/* oneDNN's side, below */
static int onednn_isa(void);   /* 2 AMX, 1 AVX512_BF16, 0 not usable */
static int onednn_gemm(int keep, const uint16_t *a16, const uint16_t *b16, int ta, int tb, int M, int N, int K,
		       float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
static int onednn_gemm_ex(unsigned flags, const uint16_t *b16, int ta, int tb, int M, int N, int K, float alpha,
			  const void *A, int lda, const float *B, int ldb, float beta, void *C, int ldc);
static int onednn_batch_par(const struct ds_gemm_bf16_batch *bt, int ta, int tb, int M, int N, int K, float alpha,
			    const float *A, int lda, const float *B, int ldb, float *C, int ldc, unsigned char *done);

static const char *const mode_names[] = { "auto", "onednn", "avx512_bf16", "fp32" };

int ds_bf16_mode_parse(const char *s)
{
	for (int i = 0; i < (int)(sizeof mode_names / sizeof mode_names[0]); i++)
		if (s && !strcmp(s, mode_names[i]))
			return i;
	return -1;
}

const char *ds_bf16_mode_name(int mode)
{
	if (mode == DS_BF16_MM_PORTABLE)
		return "portable";
	return mode >= 0 && mode < (int)(sizeof mode_names / sizeof mode_names[0]) ? mode_names[mode] : "?";
}

int ds_gemm_bf16_available(enum ds_bf16_impl impl, const char **why)
{
	const char *w = NULL;
	switch (impl) {
	case DS_BF16_ONEDNN:
		if (!onednn_isa())
			w = ds_gemm_bf16_onednn_describe();
		break;
	case DS_BF16_KERNEL:
		if (!ds_gemm_bf16_cpu_avx512bf16())
			w = "this CPU has no AVX512_BF16";
		break;
	case DS_BF16_PORTABLE:
		break;
	default:
		w = "fp32 sgemm is not a bf16 implementation";
	}
	if (why)
		*why = w;
	return w == NULL;
}

int ds_gemm_bf16_amx(void) { return onednn_isa() == 2; }

int ds_gemm_bf16_mode_check(int mode, char *why, size_t whysz)
{
	const char *w = NULL;
	if (mode == DS_BF16_MM_ONEDNN)
		ds_gemm_bf16_available(DS_BF16_ONEDNN, &w);
	else if (mode == DS_BF16_MM_KERNEL)
		ds_gemm_bf16_available(DS_BF16_KERNEL, &w);
	if (w && why)
		snprintf(why, whysz, "dstk.bf16_matmul \"%s\": %s; use \"auto\"", ds_bf16_mode_name(mode), w);
	return w ? -1 : 0;
}

/* ---- auto's measurement ------------------------------------------------------
 *
 * Whether dstk's kernel beats fp32 sgemm depends on more than the CPU's
 * flags: vdpbf16ps runs at twice the fp32 FMA rate on AMD Zen 4 but at half
 * of it on Intel cores with two 512-bit FMA ports (Sapphire Rapids without
 * AMX, as in a VM that hides it), and the BLAS may run a kernel below what
 * the CPU has (OpenBLAS picks its SSE3 "Prescott" kernel on CPUs it does not
 * recognise).  So auto times both, once per process, on one product of
 * each shape class the model issues (a GPT-2 layer's (256, 768, 768)
 * product, and a batch of 24 attention per-head (64, 64, 64) ones), best of
 * CAL_REPS interleaved, and gives a class to the kernel only where it is at
 * least CAL_MARGIN times sgemm's rate (a near tie stays on sgemm, so noise
 * cannot flip the choice between runs).  The timings are one thread's CPU
 * time on one thread: the rate per core, which a shared machine's load
 * (another process on the core, a descheduled OpenMP thread) barely moves;
 * both implementations spread a product over the threads alike. */
#define CAL_REPS 5
#define CAL_MARGIN 1.1

static pthread_once_t cal_once = PTHREAD_ONCE_INIT;
static double cal_gf[DS_BF16_NCLASS][2];   /* [class][0 sgemm, 1 kernel] GFLOP/s; 0: not measured */

static void cal_fill(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((int)(i * 2654435761u % 2001u) - 1000) / 1000.0f;
}

/* One timed run of class cls on implementation k (0 sgemm, 1 kernel): calls
 * back-to-back products (a layer's NT forward one, or a batch of NB
 * per-head S = q k^T on (T, 64) views with lda 3C as gpt.c issues them);
 * its seconds, or -1 when the kernel failed. */
enum { CAL_M = 256, CAL_N = 768, CAL_K = 768, CAL_T = 64, CAL_NB = 24, CAL_LD = 3 * CAL_N / 2 };

/* this thread's CPU seconds */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cal_run(int cls, int k, int calls, const float *a, const float *b, float *c)
{
	const struct ds_gemm_bf16_batch h = { CAL_NB, CAL_NB, { 0, CAL_T }, { 0, CAL_T }, { 0, (long)CAL_T * CAL_T },
					      DS_GEMM_BF16_DENSE, 0, NULL, NULL };
	const double t0 = cpu_now();
	for (int i = 0; i < calls; i++) {
		if (cls == DS_BF16_CLASS_LAYER && !k)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, CAL_M, CAL_N, CAL_K, 1.0f, a, CAL_K, b, CAL_K,
				    0.0f, c, CAL_N);
		else if (cls == DS_BF16_CLASS_LAYER) {
			if (ds_gemm_bf16_kernel(1, 0, NULL, 0, 0, 1, CAL_M, CAL_N, CAL_K, 1.0f, a, CAL_K, b, CAL_K, 0.0f, c,
						CAL_N))
				return -1;
		} else if (!k) {
			for (int e = 0; e < CAL_NB; e++)
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, CAL_T, CAL_T, CAL_T, 1.0f, a + e * CAL_T,
					    CAL_LD, b + e * CAL_T, CAL_LD, 0.0f, c + (size_t)e * CAL_T * CAL_T, CAL_T);
		} else if (ds_gemm_bf16_kernel(1, 0, &h, 0, 0, 1, CAL_T, CAL_T, CAL_T, 1.0f, a, CAL_LD, b, CAL_LD, 0.0f, c,
					       CAL_T)) {
			return -1;
		}
	}
	return cpu_now() - t0;
}

static void calibrate(void)
{
	if (!ds_gemm_bf16_cpu_avx512bf16())
		return;
	const int nt = omp_get_max_threads();
	const size_t na = (size_t)CAL_M * CAL_K, nb = (size_t)CAL_N * CAL_K, nc = (size_t)CAL_M * CAL_N;
	float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb), *c = malloc(sizeof(float) * nc);
	if (!a || !b || !c)
		goto out;
	cal_fill(a, na);
	cal_fill(b, nb);
	omp_set_num_threads(1);
	for (int cls = 0; cls < DS_BF16_NCLASS; cls++) {
		/* about 2x 0.3 GFLOP per timing: long enough that one descheduled
		 * thread of a shared machine does not decide it */
		const int calls = cls == DS_BF16_CLASS_LAYER ? 2 : 48;
		const double flop = cls == DS_BF16_CLASS_LAYER ? 2.0 * CAL_M * CAL_N * CAL_K
							       : 2.0 * CAL_NB * CAL_T * CAL_T * CAL_T;
		double best[2] = { 1e30, 1e30 };
		if (cal_run(cls, 0, 1, a, b, c) < 0 || cal_run(cls, 1, 1, a, b, c) < 0)   /* warm-up */
			goto out;
		for (int r = 0; r < CAL_REPS; r++)
			for (int k = 0; k < 2; k++) {
				const double t = cal_run(cls, k, calls, a, b, c);
				if (t < 0)
					goto out;
				if (t < best[k])
					best[k] = t;
			}
		for (int k = 0; k < 2; k++)
			cal_gf[cls][k] = flop * calls / (best[k] > 1e-9 ? best[k] : 1e-9) / 1e9;
	}
out:
	omp_set_num_threads(nt);
	free(a);
	free(b);
	free(c);
}

int ds_gemm_bf16_measured(int cls, double *sgemm_gf, double *kernel_gf)
{
	pthread_once(&cal_once, calibrate);
	if (cls < 0 || cls >= DS_BF16_NCLASS)
		return 0;
	if (sgemm_gf)
		*sgemm_gf = cal_gf[cls][0];
	if (kernel_gf)
		*kernel_gf = cal_gf[cls][1];
	return cal_gf[cls][1] > 0 && cal_gf[cls][1] >= CAL_MARGIN * cal_gf[cls][0];
}

/* auto's choice for one product (count 1) or a batch of count products. */
static enum ds_bf16_impl pick_auto(int ta, int tb, int M, int N, int K, int count)
{
	const long long mnk = (long long)M * N * K;
	(void)ta;
	(void)tb;
	if (onednn_isa() == 2 && mnk >= (count > 1 ? DS_GEMM_BF16_MIN_MNK_BATCH : DS_GEMM_BF16_MIN_MNK))
		return DS_BF16_ONEDNN;   /* AMX: by size (gemm_bf16.h), not measured here */
	if (ds_gemm_bf16_cpu_avx512bf16() &&
	    ds_gemm_bf16_measured(count > 1 ? DS_BF16_CLASS_HEADS : DS_BF16_CLASS_LAYER, NULL, NULL))
		return DS_BF16_KERNEL;
	return DS_BF16_SGEMM;
}

enum ds_bf16_impl ds_gemm_bf16_pick(int mode, int ta, int tb, int M, int N, int K, int count)
{
	switch (mode) {
	case DS_BF16_MM_AUTO:
		return pick_auto(ta, tb, M, N, K, count);
	case DS_BF16_MM_ONEDNN:
		return onednn_isa() ? DS_BF16_ONEDNN : DS_BF16_SGEMM;
	case DS_BF16_MM_KERNEL:
		return ds_gemm_bf16_cpu_avx512bf16() ? DS_BF16_KERNEL : DS_BF16_SGEMM;
	case DS_BF16_MM_PORTABLE:
		return DS_BF16_PORTABLE;
	default:
		return DS_BF16_SGEMM;
	}
}

int ds_gemm_bf16_plan(int mode, char *buf, size_t n)
{
	static const char kn[] = "dstk's AVX512_BF16 kernel (vdpbf16ps)";
	const int kern = ds_gemm_bf16_cpu_avx512bf16(), isa = onednn_isa();
	const char *dn = ds_gemm_bf16_onednn_describe();
	switch (mode) {
	case DS_BF16_MM_FP32:
		snprintf(buf, n, "fp32 sgemm");
		return 0;
	case DS_BF16_MM_ONEDNN:
		if (isa)
			snprintf(buf, n, "bf16 on %s for every product", dn);
		else
			snprintf(buf, n, "fp32 sgemm: %s", dn);
		return isa != 0;
	case DS_BF16_MM_KERNEL:
		if (kern)
			snprintf(buf, n, "bf16 on %s for every product", kn);
		else
			snprintf(buf, n, "fp32 sgemm: this CPU has no AVX512_BF16");
		return kern;
	case DS_BF16_MM_PORTABLE:
		snprintf(buf, n, "bf16 on dstk's portable C kernel for every product (tests)");
		return 1;
	default:
		break;
	}
	if (!kern && !isa) {
		snprintf(buf, n, "fp32 sgemm: this CPU has no AVX512_BF16 or AMX-BF16");
		return 0;
	}
	double s[DS_BF16_NCLASS] = { 0 }, k[DS_BF16_NCLASS] = { 0 };
	int win[DS_BF16_NCLASS];
	for (int c = 0; c < DS_BF16_NCLASS; c++)
		win[c] = ds_gemm_bf16_measured(c, &s[c], &k[c]);
	char meas[160];
	snprintf(meas, sizeof meas,
		 "measured here per core: layer products %.0f vs sgemm's %.0f GFLOP/s, per-head %.0f vs %.0f", k[0], s[0],
		 k[1], s[1]);
	if (isa == 2) {
		snprintf(buf, n, "bf16 on %s for products of 2^19 multiply-adds and more (2^18 each in attention's "
			 "per-head batches); smaller ones on %s%s%s%s", dn,
			 win[0] || win[1] ? kn : "fp32 sgemm", kern ? " (" : "", kern ? meas : "", kern ? ")" : "");
		return 1;
	}
	if (!kern) {   /* oneDNN's AVX512_BF16 kernel without the CPU flag: not reached */
		snprintf(buf, n, "fp32 sgemm: oneDNN has %s, this CPU no AVX512_BF16 for dstk's kernel", dn);
		return 0;
	}
	if (win[0] && win[1])
		snprintf(buf, n, "bf16 on %s, faster than fp32 sgemm (%s)%s%s", kn, meas, isa ? "; oneDNN's " : "",
			 isa ? "AVX512_BF16 kernel is no faster without AMX (bench/bf16-gemm)" : "");
	else if (win[0] || win[1])
		snprintf(buf, n, "bf16 on %s for %s products, fp32 sgemm for the %s ones, the faster of the two (%s)", kn,
			 win[0] ? "layer" : "per-head", win[0] ? "per-head" : "layer", meas);
	else
		snprintf(buf, n, "fp32 sgemm: faster here than %s (%s; this CPU's vdpbf16ps rate is below its "
			 "fp32 FMA rate)", kn, meas);
	return win[0] || win[1];
}

int ds_gemm_bf16(enum ds_bf16_impl impl, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
		 const float *B, int ldb, float beta, float *C, int ldc)
{
	if (impl == DS_BF16_ONEDNN)
		return onednn_gemm(0, NULL, NULL, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
	if ((impl == DS_BF16_KERNEL && ds_gemm_bf16_cpu_avx512bf16()) || impl == DS_BF16_PORTABLE)
		return ds_gemm_bf16_kernel(impl == DS_BF16_KERNEL, 0, NULL, 0, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta,
					   C, ldc);
	return -1;
}

int ds_gemm_bf16_ex(enum ds_bf16_impl impl, unsigned flags, int ta, int tb, int M, int N, int K, float alpha,
		    const void *A, int lda, const float *B, int ldb, const uint16_t *b16, float beta, void *C, int ldc)
{
	if (impl == DS_BF16_ONEDNN)
		return onednn_gemm_ex(flags, b16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
	struct ds_gemm_bf16_batch one = DS_GEMM_BF16_BATCH_ONE;
	one.b16 = b16;
	if ((impl == DS_BF16_KERNEL && ds_gemm_bf16_cpu_avx512bf16()) || impl == DS_BF16_PORTABLE)
		return ds_gemm_bf16_kernel(impl == DS_BF16_KERNEL, 0, b16 ? &one : NULL, flags, ta, tb, M, N, K, alpha, A,
					   lda, B, ldb, beta, C, ldc);
	return -1;
}

int ds_gemm_bf16_keep_b(enum ds_bf16_impl impl, int same, int ta, int tb, int M, int N, int K, float alpha,
			const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	if (impl == DS_BF16_ONEDNN)
		return onednn_gemm(same ? 2 : 1, NULL, NULL, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
	if ((impl == DS_BF16_KERNEL && ds_gemm_bf16_cpu_avx512bf16()) || impl == DS_BF16_PORTABLE)
		return ds_gemm_bf16_kernel(impl == DS_BF16_KERNEL, same ? 2 : 1, NULL, 0, ta, tb, M, N, K, alpha, A, lda, B,
					   ldb, beta, C, ldc);
	return -1;
}

/* entry e of bt on the portable kernel, from the entry's bf16 copies where
 * the batch has them (their fp32 operands may be stale: gemm_bf16.h) */
static int entry_portable(const struct ds_gemm_bf16_batch *bt, int e, int ta, int tb, int M, int N, int K,
			  float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	const long q = e / bt->inner, r = e % bt->inner;
	const long oa = q * bt->sa[0] + r * bt->sa[1], ob = q * bt->sb[0] + r * bt->sb[1],
		   oc = q * bt->sc[0] + r * bt->sc[1];
	struct ds_gemm_bf16_batch one = DS_GEMM_BF16_BATCH_ONE;
	one.a16 = bt->a16 ? bt->a16 + oa : NULL;
	one.b16 = bt->b16 ? bt->b16 + ob : NULL;
	return ds_gemm_bf16_kernel(0, 0, &one, 0, ta, tb, M, N, K, alpha, A + oa, lda, B + ob, ldb, beta, C + oc, ldc);
}

int ds_gemm_bf16_batch(enum ds_bf16_impl impl, const struct ds_gemm_bf16_batch *bt, int ta, int tb, int M, int N,
		       int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
		       int ldc)
{
	if (bt->count < 1 || bt->inner < 1)
		return bt->count == 0 ? 0 : -1;
	if (bt->flags & ~DS_GEMM_BF16_CR)
		return -1;
	if (impl == DS_BF16_ONEDNN) {
		if (bt->flags)
			return -1;   /* the caller rounds C */
		const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
		unsigned char *done = nt > 1 && bt->count >= 2 * nt && beta == 0.0f ? calloc((size_t)bt->count, 1) : NULL;
		if (done && onednn_batch_par(bt, ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, done) == 0) {
			int rc = 0;   /* beta 0: an entry that failed is computed again from scratch */
			for (int e = 0; e < bt->count && !rc; e++)
				if (!done[e])
					rc = entry_portable(bt, e, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
			free(done);
			return rc;
		}
		free(done);
		/* one primitive for every entry: the first call answers for all;
		 * should a later one fail, the portable kernel does the rest */
		for (int e = 0; e < bt->count; e++) {
			const long q = e / bt->inner, r = e % bt->inner;
			const long oa = q * bt->sa[0] + r * bt->sa[1], ob = q * bt->sb[0] + r * bt->sb[1],
				   oc = q * bt->sc[0] + r * bt->sc[1];
			if (onednn_gemm(0, bt->a16 ? bt->a16 + oa : NULL, bt->b16 ? bt->b16 + ob : NULL, ta, tb, M, N, K,
					alpha, A + oa, lda, B + ob, ldb, beta, C + oc, ldc) == 0)
				continue;
			if (e == 0)
				return -1;
			for (; e < bt->count; e++)
				if (entry_portable(bt, e, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
					return -1;
		}
		return 0;
	}
	if ((impl == DS_BF16_KERNEL && ds_gemm_bf16_cpu_avx512bf16()) || impl == DS_BF16_PORTABLE)
		return ds_gemm_bf16_kernel(impl == DS_BF16_KERNEL, 0, bt, bt->flags, ta, tb, M, N, K, alpha, A, lda, B, ldb,
					   beta, C, ldc);
	return -1;
}

#ifdef HAVE_DNNL

#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCACHE 64

struct prim {
	int ta, tb, M, N, K, ldc;
	float alpha, beta;
	int one;                      /* made for one thread, with a scratchpad of the caller's (a parallel batch's) */
	int c16;                      /* C is bf16 (ds_gemm_bf16_ex's DS_GEMM_BF16_C16), else fp32 */
	size_t scratch;               /* that scratchpad's bytes */
	int bf16;                     /* 0: oneDNN picks no bf16 kernel for it (answer -1) */
	unsigned long used;           /* 0: empty slot */
	dnnl_primitive_t p;
	dnnl_memory_t a, b, c;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int isa;                 /* 2 AMX, 1 AVX512_BF16, 0 none */
static char desc[200];
static dnnl_engine_t eng;
static dnnl_stream_t strm;
static struct prim cache[NCACHE];
static unsigned long tick;
static uint16_t *abuf, *bbuf;   /* bf16 A and B */
static size_t abuf_n, bbuf_n;
static uint16_t *kbuf;          /* bf16 B of ds_gemm_bf16_keep_b, kept */
static size_t kbuf_n;
static struct { const float *src; int rows, cols, ld; } kept;   /* what kbuf holds (src NULL: nothing) */
static float *cdense;           /* C when ldc != N (oneDNN's AMX matmul wants a dense one) */
static size_t cdense_n;

static void prim_free(struct prim *e)
{
	if (e->p)
		dnnl_primitive_destroy(e->p);
	if (e->a)
		dnnl_memory_destroy(e->a);
	if (e->b)
		dnnl_memory_destroy(e->b);
	if (e->c)
		dnnl_memory_destroy(e->c);
	memset(e, 0, sizeof *e);
}

/* 2 when oneDNN's implementation name is an AMX bf16 kernel, 1 an
 * AVX512_BF16 one, else 0 (a reference or fp32-converting one) */
static int bf16_kind(const char *name)
{
	return strstr(name, "amx") ? 2 : strstr(name, "avx512_core_bf16") ? 1 : 0;
}

/* Build the primitive of e's key; impl receives oneDNN's implementation
 * name.  Returns 0 (e->bf16 says whether it runs on a bf16 kernel) or -1. */
static int prim_make(struct prim *e, char *impl, size_t implsz)
{
	dnnl_memory_desc_t a, b, c;
	dnnl_dims_t da = { e->M, e->K }, db = { e->K, e->N }, dc = { e->M, e->N };
	dnnl_dims_t sa = { e->ta ? 1 : e->K, e->ta ? e->M : 1 }, sb = { e->tb ? 1 : e->N, e->tb ? e->K : 1 },
		    sc = { e->ldc, 1 };
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	int rc = -1;
	if (dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa) ||
	    dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb) ||
	    dnnl_memory_desc_init_by_strides(&c, 2, dc, e->c16 ? dnnl_bf16 : dnnl_f32, sc))
		return -1;
	dnnl_matmul_desc_t md;
	if (dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) || dnnl_primitive_attr_create(&attr))
		return -1;
	if (e->one && dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user))
		goto out;
	if (e->alpha != 1.0f && dnnl_primitive_attr_set_output_scales(attr, 1, 0, &e->alpha))
		goto out;
	if (e->beta != 0.0f) {
		dnnl_post_ops_t po;
		if (dnnl_post_ops_create(&po))
			goto out;
		int bad = dnnl_post_ops_append_sum(po, e->beta) || dnnl_primitive_attr_set_post_ops(attr, po);
		dnnl_post_ops_destroy(po);
		if (bad)
			goto out;
	}
	/* oneDNN plans a primitive for the threads it may use; one that runs
	 * inside a parallel region (where oneDNN runs a single thread) is
	 * planned for one */
	const int nt = omp_get_max_threads();
	if (e->one)
		omp_set_num_threads(1);
	const int bad = dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL) != dnnl_success;
	if (e->one)
		omp_set_num_threads(nt);
	if (bad)
		goto out;
	if (e->one) {
		const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
		e->scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
	}
	const char *name = NULL;
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) || !name)
		goto out;
	snprintf(impl, implsz, "%s", name);
	e->bf16 = bf16_kind(name) != 0;
	if (e->bf16 && (dnnl_primitive_create(&e->p, pd) || dnnl_memory_create(&e->a, &a, eng, DNNL_MEMORY_NONE) ||
		       dnnl_memory_create(&e->b, &b, eng, DNNL_MEMORY_NONE) ||
		       dnnl_memory_create(&e->c, &c, eng, DNNL_MEMORY_NONE)))
		goto out;
	rc = 0;
out:
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_attr_destroy(attr);
	return rc;
}

static void probe(void)
{
	const dnnl_version_t *v = dnnl_version();
	if (dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&strm, eng, dnnl_stream_default_flags)) {
		snprintf(desc, sizeof desc, "oneDNN %d.%d.%d: no CPU engine", v->major, v->minor, v->patch);
		return;
	}
	/* what oneDNN picks for a small product tells whether it reaches AMX
	 * or AVX512_BF16 here (CPU, kernel permission, ONEDNN_MAX_CPU_ISA) */
	struct prim e = { .ta = 0, .tb = 1, .M = 32, .N = 32, .K = 32, .ldc = 32, .alpha = 1.0f, .beta = 0.0f };
	char impl[128] = "none";
	if (prim_make(&e, impl, sizeof impl) == 0 && e.bf16) {
		isa = bf16_kind(impl);
		snprintf(desc, sizeof desc, "oneDNN %d.%d.%d %s", v->major, v->minor, v->patch, impl);
	} else {
		snprintf(desc, sizeof desc, "no bf16 kernel in oneDNN %d.%d.%d on this CPU (it picks %s)", v->major,
			 v->minor, v->patch, impl);
	}
	prim_free(&e);
}

static int onednn_isa(void)
{
	pthread_once(&once, probe);
	return isa;
}

const char *ds_gemm_bf16_onednn_describe(void)
{
	pthread_once(&once, probe);
	return desc;
}

/* dst (rows, cols) dense = bf16 of src (rows, cols) with leading dimension
 * ld: round to nearest even, NaN stays a quiet NaN (ds_fp32_to_bf16's bits;
 * vcvtneps2bf16 would flush subnormals).  Only called where oneDNN runs a
 * bf16 kernel, so AVX-512 is there. */
static void to_bf16_rows(uint16_t *dst, const float *src, int r0, int r1, int cols, int ld);

/* (on the calling thread only where par is 0: inside a parallel region,
 * where even a region whose if clause is false builds a team) */
static void to_bf16(uint16_t *dst, const float *src, int rows, int cols, int ld, int par)
{
	if (!par || (int64_t)rows * cols <= 32768 || omp_in_parallel()) {
		to_bf16_rows(dst, src, 0, rows, cols, ld);
		return;
	}
#pragma omp parallel
	{
		const int nt = omp_get_num_threads(), t = omp_get_thread_num();
		to_bf16_rows(dst, src, (int)((int64_t)rows * t / nt), (int)((int64_t)rows * (t + 1) / nt), cols, ld);
	}
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void to_bf16_rows(uint16_t *dst, const float *src, int r0,
									      int r1, int cols, int ld)
{
	for (int r = r0; r < r1; r++) {
		const float *s = src + (size_t)r * (size_t)ld;
		uint16_t *d = dst + (size_t)r * (size_t)cols;
		const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff),
			      abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
			      quiet = _mm512_set1_epi32(0x40);
		for (int j = 0; j < cols; j += 16) {
			__mmask16 m = cols - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - j)) - 1u);
			__m512i x = _mm512_maskz_loadu_epi32(m, s + j);
			__m512i hi = _mm512_srli_epi32(x, 16);
			__m512i r = _mm512_add_epi32(x, _mm512_add_epi32(half, _mm512_and_si512(hi, one)));
			r = _mm512_srli_epi32(r, 16);
			__mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs), inf);
			r = _mm512_mask_or_epi32(r, nan, hi, quiet);
			_mm256_mask_storeu_epi16(d + j, m, _mm512_cvtepi32_epi16(r));
		}
	}
}

static struct prim *lookup(int ta, int tb, int M, int N, int K, int ldc, float alpha, float beta, int one, int c16)
{
	struct prim *lru = &cache[0];
	for (int i = 0; i < NCACHE; i++) {
		struct prim *e = &cache[i];
		if (e->used && e->ta == ta && e->tb == tb && e->M == M && e->N == N && e->K == K && e->ldc == ldc &&
		    e->alpha == alpha && e->beta == beta && e->one == one && e->c16 == c16) {
			e->used = ++tick;
			return e;
		}
		if (e->used < lru->used)
			lru = e;
	}
	prim_free(lru);
	*lru = (struct prim){ .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .ldc = ldc, .alpha = alpha, .beta = beta,
			      .one = one, .c16 = c16 };
	char impl[128];
	if (prim_make(lru, impl, sizeof impl)) {
		prim_free(lru);
		return NULL;
	}
	lru->used = ++tick;
	return lru;
}

/* grow *buf to n elements of size sz (64-byte aligned); 0 or -1 */
static int grow(void **buf, size_t *have, size_t n, size_t sz)
{
	if (n <= *have)
		return 0;
	n += n / 4;
	free(*buf);
	*buf = aligned_alloc(64, (n * sz + 63) & ~(size_t)63);
	*have = *buf ? n : 0;
	return *buf ? 0 : -1;
}

/* dst (rows, cols) with leading dimension ldd = src with lds, elements of
 * es bytes (fp32 C, bf16 operands); over the threads where par is 1, on
 * the calling thread where 0 (as to_bf16) */
static void copy_rows_es(void *dst, int ldd, const void *src, int lds, int rows, int cols, size_t es, int par)
{
	char *d = dst;
	const char *s = src;
	if (!par || (int64_t)rows * cols <= 65536 || omp_in_parallel()) {
		for (int r = 0; r < rows; r++)
			memcpy(d + (size_t)r * (size_t)ldd * es, s + (size_t)r * (size_t)lds * es, (size_t)cols * es);
		return;
	}
#pragma omp parallel for schedule(static)
	for (int r = 0; r < rows; r++)
		memcpy(d + (size_t)r * (size_t)ldd * es, s + (size_t)r * (size_t)lds * es, (size_t)cols * es);
}

static void copy_rows(float *dst, int ldd, const float *src, int lds, int rows, int cols, int par)
{
	copy_rows_es(dst, ldd, src, lds, rows, cols, sizeof(float), par);
}

/* The bf16 operand (rows, cols) dense: the caller's bf16 copy h itself
 * where it is dense (ld == cols), else buf filled from h's rows, or from
 * src converted where there is no copy; par as to_bf16. */
static const uint16_t *load16(uint16_t *buf, const float *src, const uint16_t *h, int rows, int cols, int ld, int par)
{
	if (h && ld == cols)
		return h;
	if (h)
		copy_rows_es(buf, cols, h, ld, rows, cols, sizeof(uint16_t), par);
	else
		to_bf16(buf, src, rows, cols, ld, par);
	return buf;
}

/* e's product of the bf16 operands ah, bh into C (M rows of N at ldc,
 * elements of es bytes: the primitive's dst type), through the dense
 * cdense where ldc != N (read first when beta is not 0); the caller holds
 * the lock and has grown cdense.  0 or -1. */
static int exec_dense(struct prim *e, const uint16_t *ah, const uint16_t *bh, void *C, int ldc, int M, int N,
		      float beta, size_t es)
{
	const int dense = ldc == N;
	void *cd = dense ? C : (void *)cdense;
	if (!dense && beta != 0.0f)
		copy_rows_es(cd, N, C, ldc, M, N, es, 1);
	dnnl_exec_arg_t args[3] = { { DNNL_ARG_SRC, e->a }, { DNNL_ARG_WEIGHTS, e->b }, { DNNL_ARG_DST, e->c } };
	if (dnnl_memory_set_data_handle(e->a, (void *)ah) || dnnl_memory_set_data_handle(e->b, (void *)bh) ||
	    dnnl_memory_set_data_handle(e->c, cd) || dnnl_primitive_execute(e->p, strm, 3, args) ||
	    dnnl_stream_wait(strm))
		return -1;
	if (!dense)
		copy_rows_es(C, ldc, cd, N, M, N, es, 1);
	return 0;
}

/* keep: 0 none, 1 convert B and keep it, 2 reuse the kept copy if it
 * matches; a16, b16: the caller's bf16 copies of A, B (or NULL) */
static int onednn_gemm(int keep, const uint16_t *a16, const uint16_t *b16, int ta, int tb, int M, int N, int K,
		       float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	const int reuse = keep != 0;
	if (!onednn_isa() || M <= 0 || N <= 0 || K <= 0 || ldc < N)
		return -1;
	ta = ta != 0;
	tb = tb != 0;
	const int br = tb ? N : K, bc = tb ? K : N;
	int rc = -1, dense = ldc == N;
	pthread_mutex_lock(&lock);
	if (keep == 1)
		kept.src = NULL;   /* a new B: whatever happens below, the old copy is stale */
	if (grow((void **)&abuf, &abuf_n, (size_t)M * (size_t)K, 2) ||
	    grow(reuse && !b16 ? (void **)&kbuf : (void **)&bbuf, reuse && !b16 ? &kbuf_n : &bbuf_n,
		 (size_t)K * (size_t)N, 2) ||
	    (!dense && grow((void **)&cdense, &cdense_n, (size_t)M * (size_t)N, 4)))
		goto out;
	struct prim *e = lookup(ta, tb, M, N, K, N, alpha, beta, 0, 0);
	if (!e || !e->bf16)
		goto out;
	const uint16_t *ah = load16(abuf, A, a16, ta ? K : M, ta ? M : K, lda, 1), *bh = reuse ? kbuf : bbuf;
	if (b16) {
		bh = load16(bbuf, B, b16, br, bc, ldb, 1);
	} else if (!reuse || kept.src != B || kept.rows != br || kept.cols != bc || kept.ld != ldb) {
		if (reuse)
			kept.src = NULL;   /* until the copy is complete */
		to_bf16(reuse ? kbuf : bbuf, B, br, bc, ldb, 1);
		if (reuse) {
			kept.src = B;
			kept.rows = br;
			kept.cols = bc;
			kept.ld = ldb;
		}
	}
	rc = exec_dense(e, ah, bh, C, ldc, M, N, beta, sizeof(float));
out:
	pthread_mutex_unlock(&lock);
	return rc;
}

/* ds_gemm_bf16_ex on oneDNN: A given in bf16 (DS_GEMM_BF16_A16) or fp32,
 * B's bf16 copy b16 or B converted, C written in bf16 (DS_GEMM_BF16_C16,
 * beta 0: oneDNN's conversion, round to nearest even as
 * ds_fp32_to_bf16, subnormal results flushed to zero) or fp32.  Operands
 * and C not dense go through dense buffers: oneDNN 2.6 runs its AMX
 * kernel only on dense ones. */
static int onednn_gemm_ex(unsigned flags, const uint16_t *b16, int ta, int tb, int M, int N, int K, float alpha,
			  const void *A, int lda, const float *B, int ldb, float beta, void *C, int ldc)
{
	const int a16 = !!(flags & DS_GEMM_BF16_A16), c16 = !!(flags & DS_GEMM_BF16_C16);
	if (!onednn_isa() || M <= 0 || N <= 0 || K <= 0 || ldc < N || (c16 && beta != 0.0f) ||
	    (flags & ~(DS_GEMM_BF16_A16 | DS_GEMM_BF16_C16)))
		return -1;
	ta = ta != 0;
	tb = tb != 0;
	const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N, dense = ldc == N;
	const size_t es = c16 ? sizeof(uint16_t) : sizeof(float);
	int rc = -1;
	pthread_mutex_lock(&lock);
	if (grow((void **)&abuf, &abuf_n, (size_t)M * (size_t)K, 2) || grow((void **)&bbuf, &bbuf_n, (size_t)K * (size_t)N, 2) ||
	    (!dense && grow((void **)&cdense, &cdense_n, (size_t)M * (size_t)N, 4)))
		goto out;
	struct prim *e = lookup(ta, tb, M, N, K, N, alpha, beta, 0, c16);
	if (!e || !e->bf16)
		goto out;
	const uint16_t *ah = a16 ? load16(abuf, NULL, A, ar, ac, lda, 1) : load16(abuf, A, NULL, ar, ac, lda, 1),
		       *bh = load16(bbuf, B, b16, br, bc, ldb, 1);
	rc = exec_dense(e, ah, bh, C, ldc, M, N, beta, es);
out:
	pthread_mutex_unlock(&lock);
	return rc;
}

/* Each thread's own buffers for a parallel batch: bf16 A and B, a dense C,
 * the primitive's scratchpad, and a stream. */
struct lane {
	uint16_t *a, *b;
	float *c;
	void *sp;
	size_t an, bn, cn, spn;
	dnnl_stream_t s;
};
static struct lane *lanes;
static int nlanes;

/* A batch (beta 0) shared out over the threads, a product each on one
 * thread: oneDNN runs a small product a call at a time no faster than
 * sgemm, and its per-call work and barriers stay on one thread.  The
 * primitive is made for one thread, with a scratchpad per thread
 * (oneDNN's own is shared between concurrent calls).  done[e] is set for
 * every entry computed; -1 when nothing could start (no bf16 kernel,
 * out of memory), the entries untouched. */
static int onednn_batch_par(const struct ds_gemm_bf16_batch *bt, int ta, int tb, int M, int N, int K, float alpha,
			    const float *A, int lda, const float *B, int ldb, float *C, int ldc, unsigned char *done)
{
	const int nt = omp_get_max_threads();
	if (!onednn_isa() || M <= 0 || N <= 0 || K <= 0 || ldc < N)
		return -1;
	ta = ta != 0;
	tb = tb != 0;
	const int br = tb ? N : K, bc = tb ? K : N, dense = ldc == N;
	int rc = -1;
	pthread_mutex_lock(&lock);
	if (nlanes < nt) {
		struct lane *l = realloc(lanes, sizeof *l * (size_t)nt);
		if (!l)
			goto out;
		memset(l + nlanes, 0, sizeof *l * (size_t)(nt - nlanes));
		lanes = l;
		nlanes = nt;
	}
	struct prim *e = lookup(ta, tb, M, N, K, N, alpha, 0.0f, 1, 0);
	if (!e || !e->bf16)
		goto out;
	for (int t = 0; t < nt; t++) {
		struct lane *l = &lanes[t];
		if ((!l->s && dnnl_stream_create(&l->s, eng, dnnl_stream_default_flags)) ||
		    grow((void **)&l->a, &l->an, (size_t)M * (size_t)K, 2) ||
		    grow((void **)&l->b, &l->bn, (size_t)K * (size_t)N, 2) ||
		    (!dense && grow((void **)&l->c, &l->cn, (size_t)M * (size_t)N, 4)) ||
		    (e->scratch && grow(&l->sp, &l->spn, e->scratch, 1)))
			goto out;
	}
	const dnnl_memory_desc_t *mda, *mdb, *mdc;
	if (dnnl_memory_get_memory_desc(e->a, &mda) || dnnl_memory_get_memory_desc(e->b, &mdb) ||
	    dnnl_memory_get_memory_desc(e->c, &mdc))
		goto out;
#pragma omp parallel num_threads(nt)
	{
		struct lane *l = &lanes[omp_get_thread_num()];
		dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
		dnnl_memory_desc_t sd;
		const dnnl_dims_t sz = { (dnnl_dim_t)(e->scratch ? e->scratch : 1) };
		const int ok = !dnnl_memory_create(&ma, mda, eng, l->a) && !dnnl_memory_create(&mb, mdb, eng, l->b) &&
			       !dnnl_memory_create(&mc, mdc, eng, DNNL_MEMORY_NONE) &&
			       (!e->scratch || (!dnnl_memory_desc_init_by_tag(&sd, 1, sz, dnnl_u8, dnnl_a) &&
						!dnnl_memory_create(&ms, &sd, eng, l->sp)));
#pragma omp for schedule(static)
		for (int i = 0; i < bt->count; i++) {
			const long q = i / bt->inner, r = i % bt->inner;
			float *ci = C + q * bt->sc[0] + r * bt->sc[1], *cd = dense ? ci : l->c;
			dnnl_exec_arg_t args[4] = { { DNNL_ARG_SRC, ma }, { DNNL_ARG_WEIGHTS, mb }, { DNNL_ARG_DST, mc },
						    { DNNL_ARG_SCRATCHPAD, ms } };
			if (!ok)
				continue;
			const long oa = q * bt->sa[0] + r * bt->sa[1], ob = q * bt->sb[0] + r * bt->sb[1];
			const uint16_t *ah = load16(l->a, A + oa, bt->a16 ? bt->a16 + oa : NULL, ta ? K : M, ta ? M : K,
						    lda, 0),
				       *bh = load16(l->b, B + ob, bt->b16 ? bt->b16 + ob : NULL, br, bc, ldb, 0);
			if (dnnl_memory_set_data_handle(ma, (void *)ah) || dnnl_memory_set_data_handle(mb, (void *)bh) ||
			    dnnl_memory_set_data_handle(mc, cd) ||
			    dnnl_primitive_execute(e->p, l->s, e->scratch ? 4 : 3, args) || dnnl_stream_wait(l->s))
				continue;
			if (!dense)
				copy_rows(ci, ldc, cd, N, M, N, 0);
			done[i] = 1;
		}
		if (ma)
			dnnl_memory_destroy(ma);
		if (mb)
			dnnl_memory_destroy(mb);
		if (mc)
			dnnl_memory_destroy(mc);
		if (ms)
			dnnl_memory_destroy(ms);
	}
	rc = 0;
out:
	pthread_mutex_unlock(&lock);
	return rc;
}

#else /* !HAVE_DNNL */

static int onednn_isa(void) { return 0; }

const char *ds_gemm_bf16_onednn_describe(void)
{
	return "not built with oneDNN (apt-get install libdnnl-dev, configure --with-dnnl)";
}

static int onednn_gemm(int keep, const uint16_t *a16, const uint16_t *b16, int ta, int tb, int M, int N, int K,
		       float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	return -1;
}

static int onednn_gemm_ex(unsigned flags, const uint16_t *b16, int ta, int tb, int M, int N, int K, float alpha,
			  const void *A, int lda, const float *B, int ldb, float beta, void *C, int ldc)
{
	return -1;
}

static int onednn_batch_par(const struct ds_gemm_bf16_batch *bt, int ta, int tb, int M, int N, int K, float alpha,
			    const float *A, int lda, const float *B, int ldb, float *C, int ldc, unsigned char *done)
{
	return -1;
}

#endif
