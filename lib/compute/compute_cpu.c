/* compute_cpu.c - the cpu compute backend (compute.h): kernels/cpu as the
 * model called them before the table, so it is the oracle of the others.
 *
 * Matrix products: cblas_sgemm (the OpenMP OpenBLAS, one thread pool with
 * the kernels' loops; inside a parallel region only for a batch of small
 * per-head products, one single-threaded call per thread), or in bf16
 * runs the implementation ds_gemm_bf16_pick chooses for the shape (oneDNN
 * on AMX or AVX512_BF16, or dstk's AVX512_BF16 kernel): it rounds A and B
 * to bf16 and accumulates in fp32, as a GPU's bf16 GEMM does.  Buffers are
 * host memory from ds_alloc (counted in the peak).
 */
#include "compute/compute.h"

#include <cblas.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/gemm_bf16.h"
#include "cpu/gpt_kernels.h"
#include "optim/clip.h"
#include "optim/optim.h"
#include "util/half.h"
#include "util/mem.h"

static const char *cpu_uncovered(const struct ds_compute_needs *needs) { return NULL; }
static int cpu_init(int device, struct ds_err *err) { return 0; }

/* the entries' first failure since the last check (only an sgemm that
 * could not unpack its operands' bf16 copies fails: out of memory) */
static _Atomic int cpu_failed;

static int cpu_check(struct ds_err *err)
{
	if (!atomic_exchange(&cpu_failed, 0))
		return 0;
	return ds_err_set(err, DS_ENOMEM, "cpu backend: out of memory unpacking a product's bf16 operands for sgemm");
}

static void cpu_fill_cols(float *x, int64_t rows, int64_t ld, int col0, int col1, float v)
{
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < rows; i++)
		for (int j = col0; j < col1; j++)
			x[i * ld + j] = v;
}

static void *cpu_alloc(size_t bytes) { return ds_alloc(bytes); }
static void cpu_free(void *p) { ds_free(p); }
/* The bulk passes (copies, 16-bit rounding, packing, unpacking) share
 * large buffers out over the threads: alone on one core they left the
 * pool's other threads waiting, and element-wise work gives the same bits
 * in any split.  Each thread takes a run of whole 64-byte lines; inside a
 * parallel region, and below BULK_MIN elements, the calling thread does it
 * all. */
#define BULK_MIN 65536

enum { BULK_ZERO, BULK_COPY, BULK_ROUND, BULK_PACK, BULK_UNPACK, BULK_ROUND_PACK };

/* op over elements [b, e) (bytes for zero and copy); h: round-pack's bits */
static void bulk_span(int op, int kind, void *dst, const void *src, uint16_t *h, size_t b, size_t e)
{
	const enum ds_half_kind k = (enum ds_half_kind)kind;
	switch (op) {
	case BULK_ROUND_PACK:
		ds_bf16_round_pack_n((float *)dst + b, h + b, (const float *)src + b, e - b);
		break;
	case BULK_ZERO:
		memset((char *)dst + b, 0, e - b);
		break;
	case BULK_COPY:
		memcpy((char *)dst + b, (const char *)src + b, e - b);
		break;
	case BULK_ROUND:
		ds_half_round_n(k, (float *)dst + b, e - b);
		break;
	case BULK_PACK:
		ds_half_pack_n(k, (uint16_t *)dst + b, (const float *)src + b, e - b);
		break;
	default:
		ds_half_unpack_n(k, (float *)dst + b, (const uint16_t *)src + b, e - b);
		break;
	}
}

/* op over n elements (bytes for zero and copy, weighed as n / 4 against
 * BULK_MIN); each thread's run starts at a multiple of 16 */
static void bulk(int op, int kind, void *dst, const void *src, uint16_t *h, size_t n)
{
	if ((op <= BULK_COPY ? n / 4 : n) < BULK_MIN || omp_in_parallel() || omp_get_max_threads() < 2) {
		bulk_span(op, kind, dst, src, h, 0, n);
		return;
	}
#pragma omp parallel
	{
		const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
		bulk_span(op, kind, dst, src, h, n / 16 * t / nt * 16, t + 1 == nt ? n : n / 16 * (t + 1) / nt * 16);
	}
}

static void cpu_zero(void *p, size_t bytes) { bulk(BULK_ZERO, 0, p, NULL, NULL, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { bulk(BULK_COPY, 0, dst, src, NULL, bytes); }
static void cpu_half_round(int kind, float *x, size_t n) { bulk(BULK_ROUND, kind, x, NULL, NULL, n); }
static void cpu_half_pack(int kind, uint16_t *dst, const float *src, size_t n)
{
	bulk(BULK_PACK, kind, dst, src, NULL, n);
}
static void cpu_half_unpack(int kind, float *dst, const uint16_t *src, size_t n)
{
	bulk(BULK_UNPACK, kind, dst, src, NULL, n);
}
static void cpu_half_round_pack(float *dst, uint16_t *h, const float *src, size_t n)
{
	bulk(BULK_ROUND_PACK, DS_HALF_BF16, dst, src, h, n);
}

/* ---- the engine's 16-bit gradients: lib/engine/engine.c's loops as the
 * engine ran them before these entries, in chunks of HCH elements widened
 * on the stack (no fp32 copy of the gradients) ---- */
#define HCH 2048

static void cpu_half_add(int kind, uint16_t *acc, const float *g, int64_t n)
{
	const enum ds_half_kind k = (enum ds_half_kind)kind;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (int64_t c = 0; c < n; c += HCH) {
		float t[HCH];
		size_t m = (size_t)(n - c < HCH ? n - c : HCH);
		ds_half_unpack_n(k, t, acc + c, m);
		for (size_t i = 0; i < m; i++)
			t[i] += g[c + (int64_t)i];
		ds_half_pack_n(k, acc + c, t, m);
	}
}

static void cpu_half_recast(uint16_t *p, int64_t n, int from_, int cast_, float f, int to_)
{
	const enum ds_half_kind from = (enum ds_half_kind)from_, cast = (enum ds_half_kind)cast_,
				to = (enum ds_half_kind)to_;
	if (from == to && f == 1.0f)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (int64_t c = 0; c < n; c += HCH) {
		float t[HCH];
		size_t m = (size_t)(n - c < HCH ? n - c : HCH);
		ds_half_unpack_n(from, t, p + c, m);
		if (f != 1.0f) {
			ds_half_round_n(cast, t, m);
			for (size_t i = 0; i < m; i++)
				t[i] *= f;
			ds_half_round_n(cast, t, m);
		}
		ds_half_pack_n(to, p + c, t, m);
	}
}

static void cpu_accumulate(int kind, float *acc, const float *g, int64_t n)
{
#pragma omp parallel for simd schedule(static)
	for (int64_t i = 0; i < n; i++)
		acc[i] += g[i];
	if (kind != DS_HALF_NONE)
		ds_half_round_n((enum ds_half_kind)kind, acc, (size_t)n);
}

/* C of every entry of bt (M rows of N at ldc) rounded to bf16 values: the
 * pass DS_GEMM_BF16_CR asks for where the product did not round as it
 * stored (the same bits: rounding is element-wise) */
static void round_c(const struct ds_gemm_bf16_batch *bt, int M, int N, float *C, int ldc)
{
	if (bt->count == 1 && ldc == N) {
		cpu_half_round(DS_HALF_BF16, C, (size_t)M * N);
		return;
	}
	const int64_t rows = (int64_t)bt->count * M;
#pragma omp parallel for schedule(static) if (rows * N > 65536)
	for (int64_t i = 0; i < rows; i++) {
		const long e = (long)(i / M), q = e / bt->inner, r = e % bt->inner;
		ds_half_round_n(DS_HALF_BF16, C + q * bt->sc[0] + r * bt->sc[1] + (i % M) * ldc, (size_t)N);
	}
}

/* An operand's fp32 values from its bf16 copy h for sgemm (the copy is
 * what the caller vouches for: gemm_bf16.h): every entry's (rows, cols) at
 * ld, from offset 0 to the last entry's end, into a buffer of the caller's
 * to free; NULL when out of memory. */
static float *unpack_operand(const uint16_t *h, const struct ds_gemm_bf16_batch *bt, const long s[2], int rows,
			     int cols, int ld)
{
	long last = 0;
	for (int e = 0; e < bt->count; e++) {
		const long o = e / bt->inner * s[0] + e % bt->inner * s[1];
		last = o > last ? o : last;
	}
	const size_t n = (size_t)last + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
	float *f = malloc(n * sizeof(float));
	if (f)
		cpu_half_unpack(DS_HALF_BF16, f, h, n);
	return f;
}

static void cpu_gemm(int mm, const struct ds_gemm_bf16_batch *bt, int t1, int t2, int M, int N, int K, float alpha,
		     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	const struct ds_gemm_bf16_batch one = DS_GEMM_BF16_BATCH_ONE;
	if (!bt)
		bt = &one;
	const unsigned cr = bt->flags & DS_GEMM_BF16_CR;
	enum ds_bf16_impl im = mm < 0 ? DS_BF16_SGEMM : ds_gemm_bf16_pick(mm, t1, t2, M, N, K, bt->count);
	if (im != DS_BF16_SGEMM) {
		/* dstk's kernel rounds C as it stores it; the others leave it to round_c */
		const unsigned fl = im == DS_BF16_KERNEL || im == DS_BF16_PORTABLE ? cr : 0u;
		struct ds_gemm_bf16_batch b2 = *bt;
		b2.flags = fl;
		/* (bf16 copies of A and B go through the batch entry) */
		const int rc = bt->count != 1 || bt->a16 || bt->b16
				       ? ds_gemm_bf16_batch(im, &b2, t1, t2, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
			       : fl ? ds_gemm_bf16_ex(im, fl, t1, t2, M, N, K, alpha, A, lda, B, ldb, NULL, beta, C, ldc)
				    : ds_gemm_bf16(im, t1, t2, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
		if (rc == 0) {
			if (cr && !fl)
				round_c(bt, M, N, C, ldc);
			return;
		}
	}
	float *fa = NULL, *fb = NULL;   /* A's and B's values from their copies */
	if (bt->a16 && (fa = unpack_operand(bt->a16, bt, bt->sa, t1 ? K : M, t1 ? M : K, lda)))
		A = fa;
	if (bt->b16 && (fb = unpack_operand(bt->b16, bt, bt->sb, t2 ? N : K, t2 ? K : N, ldb)))
		B = fb;
	if ((bt->a16 && !fa) || (bt->b16 && !fb)) {   /* C left as it was; check() says so */
		free(fa);
		free(fb);
		atomic_store(&cpu_failed, 1);
		return;
	}
	const enum CBLAS_TRANSPOSE ta = t1 ? CblasTrans : CblasNoTrans, tb = t2 ? CblasTrans : CblasNoTrans;
	/* attention's per-head products are small for BLAS's threading:
	 * OpenBLAS runs a product of 2^18 multiply-adds or less on one thread
	 * and splits larger ones over the threads with little gain (GPT-2's
	 * (64,64,64) heads ran at one core's rate at 2 threads, gpt-tiny's
	 * (128,128,64) at 1.1 cores').  A batch of at least two entries per
	 * thread is shared out an entry per thread instead, each call
	 * single-threaded inside the region (the OpenMP OpenBLAS runs one
	 * thread there, in the same pool): the same calls, so the same bits.
	 * (Not an if clause: a region with it false still builds a team.) */
#define ENTRY(e)                                                                                                      \
	cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A + (e) / bt->inner * bt->sa[0] + (e) % bt->inner * bt->sa[1], \
		    lda, B + (e) / bt->inner * bt->sb[0] + (e) % bt->inner * bt->sb[1], ldb, beta,                       \
		    C + (e) / bt->inner * bt->sc[0] + (e) % bt->inner * bt->sc[1], ldc)
	const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
	if (nt > 1 && bt->count >= 2 * nt) {
#pragma omp parallel for schedule(static)
		for (int e = 0; e < bt->count; e++)
			ENTRY(e);
	} else {
		for (int e = 0; e < bt->count; e++)
			ENTRY(e);
	}
#undef ENTRY
	free(fa);
	free(fb);
	if (cr)
		round_c(bt, M, N, C, ldc);
}

static void cpu_gemm_keep_b(int mm, int same, int M0, int t1, int t2, int M, int N, int K, float alpha,
			    const float *A, int lda, const float *B, int ldb, const uint16_t *a16, const uint16_t *b16,
			    float beta, float *C, int ldc)
{
	enum ds_bf16_impl im = mm < 0 ? DS_BF16_SGEMM : ds_gemm_bf16_pick(mm, t1, t2, M0, N, K, 1);
	struct ds_gemm_bf16_batch one = DS_GEMM_BF16_BATCH_ONE;
	one.a16 = a16;
	one.b16 = b16;   /* oneDNN with a copy to read: nothing to keep (dstk's kernel keeps its packed B) */
	if (im != DS_BF16_SGEMM &&
	    (im == DS_BF16_ONEDNN && b16
		     ? ds_gemm_bf16_batch(im, &one, t1, t2, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
		     : ds_gemm_bf16_keep_b(im, same, t1, t2, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) == 0)
		return;
	cblas_sgemm(CblasRowMajor, t1 ? CblasTrans : CblasNoTrans, t2 ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
		    lda, B, ldb, beta, C, ldc);
}

/* oneDNN converts whole operands before its product: a copy made for two
 * products pays (2); dstk's kernels convert as they pack and read copies
 * at half the bytes, which pays for the copies already at hand (1) */
static int cpu_gemm_hints(int mm, int count, int M, int N, int K)
{
	if (mm < 0)
		return 0;
	const enum ds_bf16_impl im = ds_gemm_bf16_pick(mm, 0, 1, M, N, K, count);
	return im == DS_BF16_ONEDNN ? 2 : im == DS_BF16_KERNEL || im == DS_BF16_PORTABLE ? 1 : 0;
}

/* the head keeps bf16 logits wherever a bf16 implementation runs its
 * product (oneDNN writes and reads them as dstk's kernels do) */
static int cpu_head16(int mm, int N, int V, int C)
{
	if (mm < 0)
		return 0;
	return (int)ds_gemm_bf16_pick(mm, 0, 1, N, V, C, 1);   /* DS_BF16_SGEMM is 0 */
}

/* (should oneDNN fail a product, dstk's kernel runs it: the head's bf16
 * logits have no fp32 copy for sgemm) */
static int cpu_gemm16(int token, unsigned flags, int ta, int tb, int M, int N, int K, float alpha, const void *A,
		      int lda, const float *B, int ldb, const uint16_t *b16, float beta, void *C, int ldc)
{
	const enum ds_bf16_impl im = (enum ds_bf16_impl)token;
	if (ds_gemm_bf16_ex(im, flags, ta, tb, M, N, K, alpha, A, lda, B, ldb, b16, beta, C, ldc) == 0)
		return 0;
	if (im != DS_BF16_ONEDNN)
		return -1;
	const enum ds_bf16_impl k = ds_gemm_bf16_pick(DS_BF16_MM_KERNEL, ta, tb, M, N, K, 1);
	return ds_gemm_bf16_ex(k == DS_BF16_KERNEL ? k : DS_BF16_PORTABLE, flags, ta, tb, M, N, K, alpha, A, lda, B, ldb,
			       b16, beta, C, ldc);
}

/* ---- the engine's step: lib/engine/engine.c's loops and lib/optim as the
 * engine called them before these entries ---- */
static void cpu_scale(float *p, int64_t n, float f)
{
	if (f == 1.0f)
		return;
#pragma omp parallel for simd schedule(static)
	for (int64_t i = 0; i < n; i++)
		p[i] *= f;
}

/* lib/optim's sum over fixed chunks in order: an OpenMP reduction adds the
 * threads' partial sums in the order they finish, so the norm's last bit
 * (and through clipping every weight) would vary from run to run */
static void cpu_sumsq(double *acc, const float *x, int64_t n)
{
	if (ds_clip_has_nonfinite(x, (size_t)n))
		acc[1] = 1;
	acc[0] += ds_clip_sumsq(x, (size_t)n);
}

static int cpu_optim_step(struct ds_optim *o, float *p, const float *g, float grad_mul, struct ds_err *err)
{
	if (o->hp.type == DS_OPTIM_LAMB)
		return ds_err_set(err, DS_EINVAL, "optimizer lamb: step it with lamb_partial and lamb_apply");
	return ds_optim_step(o, p, g, grad_mul, NULL, 0, err);
}

/* host memory: what the machine has free and in all (sysconf), and what
 * libds's allocator holds (util/mem.h; reset restarts its peak) */
static int cpu_mem_info(size_t *free_bytes, size_t *total_bytes, struct ds_err *err)
{
	const long pg = sysconf(_SC_PAGESIZE), av = sysconf(_SC_AVPHYS_PAGES), ph = sysconf(_SC_PHYS_PAGES);
	(void)err;
	*free_bytes = pg > 0 && av > 0 ? (size_t)av * (size_t)pg : 0;
	*total_bytes = pg > 0 && ph > 0 ? (size_t)ph * (size_t)pg : 0;
	return 0;
}
static void cpu_mem_held(size_t *held, size_t *peak, int reset)
{
	if (reset)
		ds_mem_peak_reset();
	*held = ds_mem_held();
	*peak = ds_mem_peak();
}

const struct ds_compute_ops ds_compute_cpu = {
	.name = "cpu",
	.host = 1,
	.uncovered = cpu_uncovered,
	.init = cpu_init,
	.check = cpu_check,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.zero = cpu_zero,
	.copy = cpu_copy,
	.to_host = cpu_copy,
	.from_host = cpu_copy,
	.to_host_async = cpu_copy,
	.from_host_async = cpu_copy,
	.fill_cols = cpu_fill_cols,
	.half_round = cpu_half_round,
	.half_pack = cpu_half_pack,
	.half_unpack = cpu_half_unpack,
	.half_round_pack = cpu_half_round_pack,
	.half_add = cpu_half_add,
	.half_recast = cpu_half_recast,
	.accumulate = cpu_accumulate,
	.gemm = cpu_gemm,
	.gemm_keep_b = cpu_gemm_keep_b,
	.gemm_hints = cpu_gemm_hints,
	.head16 = cpu_head16,
	.gemm16 = cpu_gemm16,
	.mm_check = ds_gemm_bf16_mode_check,
	.mm_plan = ds_gemm_bf16_plan,
	.dropout = ds_kernel_dropout,
	.embed_forward = ds_kernel_embed_forward,
	.embed_backward = ds_kernel_embed_backward,
	.vocab_embed_forward = ds_kernel_vocab_embed_forward,
	.pos_add = ds_kernel_pos_add,
	.vocab_embed_backward = ds_kernel_vocab_embed_backward,
	.layernorm_forward = ds_kernel_layernorm_forward_r,
	.layernorm_backward = ds_kernel_layernorm_backward_r,
	.rmsnorm_forward = ds_kernel_rmsnorm_forward,
	.rmsnorm_backward = ds_kernel_rmsnorm_backward,
	.bias_fill = ds_kernel_bias_fill,
	.bias_add = ds_kernel_bias_add,
	.bias_backward = ds_kernel_bias_backward,
	.add = ds_kernel_add_r,
	.rotary = ds_kernel_rotary,
	.causal_softmax_forward = ds_kernel_causal_softmax_forward_r,
	.attention_dropout_h0 = ds_kernel_attention_dropout_h0,
	.causal_softmax_backward_h0 = ds_kernel_causal_softmax_backward_r,
	.causal_softmax_forward16 = ds_kernel_causal_softmax_forward16,
	.causal_softmax_backward16 = ds_kernel_causal_softmax_backward16,
	.layernorm_forward16 = ds_kernel_layernorm_forward16,
	.act_forward16 = ds_kernel_act_forward16,
	.act_backward16 = ds_kernel_act_backward16,
	.bias_backward16 = ds_kernel_bias_backward16,
	.layernorm_backward16 = ds_kernel_layernorm_backward16,
	.add16 = ds_kernel_add16,
	.act_forward = ds_kernel_act_forward_r,
	.act_backward = ds_kernel_act_backward_r,
	.xent_forward = ds_kernel_xent_forward,
	.xent_backward = ds_kernel_xent_backward,
	.xent_forward16 = ds_kernel_xent_forward16,
	.xent_backward16 = ds_kernel_xent_backward16,
	.xent_vp_max = ds_kernel_xent_vp_max,
	.xent_vp_sumexp = ds_kernel_xent_vp_sumexp,
	.xent_vp_backward = ds_kernel_xent_vp_backward,
	.scale = cpu_scale,
	.sumsq = cpu_sumsq,
	.optim_step = cpu_optim_step,
	.lamb_partial = ds_lamb_partial_norms,
	.lamb_apply = ds_lamb_apply,
	.mem_info = cpu_mem_info,
	.mem_held = cpu_mem_held,
	.pinned_alloc = cpu_alloc,
	.pinned_free = cpu_free,
};
