/* gemm_bf16.h - bf16 matrix products on CPU: oneDNN (AMX or AVX512_BF16)
 * or dstk's own AVX512_BF16 kernel, chosen per product (issues 5 and 21).
 *
 * Every implementation computes what cblas_sgemm(CblasRowMajor, ...)
 * computes with the same arguments, except that A and B are first rounded
 * to bf16 (round to nearest even, as ds_fp32_to_bf16) and the exact
 * products are accumulated in fp32: the result equals an fp32 product of
 * the bf16-rounded inputs up to the order of the fp32 sums (and the
 * hardware's reading of bf16 subnormal inputs as zero).  Implementations:
 *   oneDNN   oneDNN 2.x's matmul (Debian 12's libdnnl-dev, configure
 *            --with-dnnl) where it picks a bf16 kernel on this CPU: AMX
 *            (brg:avx512_core_amx_bf16) or AVX512_BF16 (brg:avx512_core_bf16);
 *   kernel   dstk's packed vdpbf16ps kernel (gemm_bf16_kernel.c), on every
 *            CPU with AVX512_BF16 (Intel Cooper Lake and later, AMD Zen 4
 *            and later), with or without oneDNN;
 *   portable the same kernel's C micro-kernel, on any CPU: slower than
 *            sgemm, for tests only (auto never picks it).
 * dstk.bf16_matmul chooses: "auto" picks per product the implementation
 * measured fastest for its shape class on this CPU, fp32 sgemm included
 * (see ds_gemm_bf16_pick),
 * "onednn" and "avx512_bf16" force one, "fp32" keeps fp32 sgemm.  fp16 runs
 * never use these, on any CPU: AVX512-FP16 accumulates in fp16 (the fp32
 * accumulation of GPU products is the contract), widening fp16 to fp32
 * first is sgemm's rate, and rounding fp16 to bf16 would drop 3 mantissa
 * bits.
 * Like cblas_sgemm, none of these may be called inside an OpenMP parallel
 * region (they run their own, on the same libgomp pool); calls are
 * serialised by locks.
 */
#ifndef DS_KERNELS_GEMM_BF16_H
#define DS_KERNELS_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

/* Below this M*N*K a single oneDNN call costs more than it saves
 * (conversion and per-call work): GPT-2's per-head 64x64x64 attention
 * products, run a call at a time over the threads, were 0.3-0.9x sgemm on
 * AMX with 2 threads (bench/amx-gemm, now part of bench/bf16-gemm).  auto
 * keeps such single products off oneDNN; batches have their own bound. */
#define DS_GEMM_BF16_MIN_MNK (1 << 19)

/* The same for each product of a batch (attention's per-head ones), which
 * oneDNN runs a product per thread (at least two per thread; else a
 * product at a time).  On AMX (bench/bf16-gemm, 2026-12-03) GPT-2's
 * (64,64,64) heads, 2^18 multiply-adds, took 0.81x the time of sgemm's batch
 * at 2 threads and 0.98x at 1; gpt-tiny's (128,128,64) 0.5-0.6x at both. */
#define DS_GEMM_BF16_MIN_MNK_BATCH (1 << 18)

/* Who runs one product. */
enum ds_bf16_impl {
	DS_BF16_SGEMM = 0,   /* nobody here: the caller runs fp32 sgemm */
	DS_BF16_ONEDNN,      /* oneDNN's matmul on a bf16 kernel (AMX or AVX512_BF16) */
	DS_BF16_KERNEL,      /* dstk's vdpbf16ps kernel (AVX512_BF16) */
	DS_BF16_PORTABLE,    /* dstk's kernel with its portable C micro-kernel (tests) */
};

/* dstk.bf16_matmul */
enum ds_bf16_mode {
	DS_BF16_MM_AUTO = 0,   /* "auto": the fastest measured per shape class, sgemm where none is */
	DS_BF16_MM_ONEDNN,     /* "onednn": oneDNN for every product */
	DS_BF16_MM_KERNEL,     /* "avx512_bf16": dstk's kernel for every product */
	DS_BF16_MM_FP32,       /* "fp32": fp32 sgemm for every product */
	DS_BF16_MM_PORTABLE,   /* tests only (no config value): the portable kernel for every product */
};

/* The mode a dstk.bf16_matmul value names, or -1. */
int ds_bf16_mode_parse(const char *s);
/* "auto", "onednn", "avx512_bf16", "fp32" (or "portable"). */
const char *ds_bf16_mode_name(int mode);

/* 1 when impl can run on this build and CPU, else 0 with *why (optional)
 * saying why not (static text).  oneDNN is probed once, on a small
 * product: it counts when its matmul picks a bf16 kernel (AMX or
 * AVX512_BF16; ONEDNN_MAX_CPU_ISA and the kernel's AMX permission apply). */
int ds_gemm_bf16_available(enum ds_bf16_impl impl, const char **why);
/* oneDNN's kernel name on this CPU ("brg:avx512_core_amx_bf16") and
 * version, or why oneDNN is not used (static text). */
const char *ds_gemm_bf16_onednn_describe(void);
/* 1 when oneDNN runs bf16 products on AMX here. */
int ds_gemm_bf16_amx(void);

/* Whether mode can be honoured here: 0, or -1 with why (an explicit
 * "onednn" without oneDNN's bf16 kernel, "avx512_bf16" on a CPU without
 * it).  auto and fp32 always can. */
int ds_gemm_bf16_mode_check(int mode, char *why, size_t whysz);

/* auto's shape classes: a layer's linear products, and the batches of
 * attention's per-head ones. */
enum { DS_BF16_CLASS_LAYER = 0, DS_BF16_CLASS_HEADS, DS_BF16_NCLASS };

/* auto's measurement of this process (taken once, on first use: best of a
 * few runs of one product of class cls, a GPT-2 layer's (256, 768, 768)
 * or 24 per-head (64, 64, 64) ones, in fp32 sgemm and on dstk's kernel):
 * both rates in GFLOP/s (0 where the CPU has no AVX512_BF16), and 1 when
 * the kernel is faster by a margin (auto then gives it the class), else 0. */
int ds_gemm_bf16_measured(int cls, double *sgemm_gf, double *kernel_gf);

/* One line: what mode does on this build and CPU and why, e.g. "bf16 on
 * dstk's AVX512_BF16 kernel (vdpbf16ps), faster than fp32 sgemm (measured
 * here: ...)" (without the mode's name: callers add it).  Returns 1 when
 * some products run in bf16, 0 when all stay on sgemm. */
int ds_gemm_bf16_plan(int mode, char *buf, size_t n);

/* The implementation mode gives a product of this shape (count > 1: a
 * batch of that many, attention's per-head ones).
 * Never an unavailable one: DS_BF16_SGEMM when nothing fits.  auto on an
 * AMX CPU gives oneDNN the products of at least DS_GEMM_BF16_MIN_MNK
 * (DS_GEMM_BF16_MIN_MNK_BATCH each in a batch); every other product goes to dstk's kernel
 * where ds_gemm_bf16_measured says it beats sgemm for its class, else to
 * sgemm (without AMX, oneDNN's AVX512_BF16 kernel was no faster than
 * dstk's in bench/bf16-gemm, and slower on the per-head products). */
enum ds_bf16_impl ds_gemm_bf16_pick(int mode, int ta, int tb, int M, int N, int K, int count);

/* C (M,N) = alpha op(A) op(B) + beta C, row-major; ta/tb nonzero mean
 * op(X) = X^T (A stored (K,M), B stored (N,K)); lda/ldb/ldc as in
 * cblas_sgemm.  beta 0 overwrites C without reading it.  Returns 0, or -1
 * when impl cannot run it (not available, out of memory; C untouched: the
 * caller runs sgemm). */
int ds_gemm_bf16(enum ds_bf16_impl impl, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
		 const float *B, int ldb, float beta, float *C, int ldc);

/* ds_gemm_bf16_ex's flags: A holds bf16 values (uint16_t, ds_fp32_to_bf16's
 * encoding, lda counted in them); C is bf16, written rounded to nearest
 * even as ds_fp32_to_bf16 rounds (beta must be 0); C is fp32, each element
 * left rounded to a bf16 value (alpha op(A) op(B) + beta C rounded once,
 * bit for bit what ds_half_round_n(DS_HALF_BF16) over C after the product
 * gives, without that pass: for callers that round every activation). */
#define DS_GEMM_BF16_A16 1u
#define DS_GEMM_BF16_C16 2u
#define DS_GEMM_BF16_CR 4u

/* ds_gemm_bf16 with A and/or C in bf16, or C rounded (flags), for callers
 * that keep activations in bf16: the same numbers as rounding C after an
 * fp32 ds_gemm_bf16 of the unpacked A, without the fp32 copies or the
 * rounding pass.  b16: B's bf16 copy (as the batch's; NULL: none).
 * dstk's kernels take every flag; oneDNN takes DS_GEMM_BF16_A16 and
 * DS_GEMM_BF16_C16 (its own rounding of C, which flushes subnormal
 * results to zero: the one difference from ds_fp32_to_bf16); -1 (nothing
 * written) otherwise, and for sgemm, whose callers keep fp32 operands and
 * round C themselves. */
int ds_gemm_bf16_ex(enum ds_bf16_impl impl, unsigned flags, int ta, int tb, int M, int N, int K, float alpha,
		    const void *A, int lda, const float *B, int ldb, const uint16_t *b16, float beta, void *C, int ldc);

/* ds_gemm_bf16 with B's bf16 copy kept for the next call: same = 0
 * converts B (and keeps the copy), same = 1 promises that B holds the same
 * values as in the previous ds_gemm_bf16_keep_b call and reuses the copy if
 * that call had the same implementation, B pointer, orientation, size and
 * ldb.  For a product split into row chunks against one weight matrix (the
 * model's head: converting its (V, C) embedding per chunk would cost more
 * than the product).  One kept copy per implementation and process;
 * ds_gemm_bf16 calls do not touch it. */
int ds_gemm_bf16_keep_b(enum ds_bf16_impl impl, int same, int ta, int tb, int M, int N, int K, float alpha,
			const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* A batch's causal structure (attention's square per-head products under
 * the causal mask), which dstk's kernel uses to skip work; the others
 * compute everything, which gives the same results. */
enum ds_gemm_bf16_causal {
	DS_GEMM_BF16_DENSE = 0,
	DS_GEMM_BF16_C_LOWER,   /* only C[m][n] with n <= m is wanted (scores, their gradient): the rest is not written */
	DS_GEMM_BF16_A_LOWER,   /* op(A)[m][k] = 0 for k > m (probabilities times values) */
	DS_GEMM_BF16_A_UPPER,   /* op(A)[m][k] = 0 for k < m (transposed probabilities) */
};

/* Where entry e of a batch of products lives: X + (e / inner) * s[0] +
 * (e % inner) * s[1] for X = A, B, C (attention's (b, head) products:
 * inner = heads); causal: enum ds_gemm_bf16_causal; flags: 0 or
 * DS_GEMM_BF16_CR (dstk's kernel only, as ds_gemm_bf16_ex). */
struct ds_gemm_bf16_batch {
	int count, inner;
	long sa[2], sb[2], sc[2];
	int causal;
	unsigned flags;
	/* Optional bf16 copies of A and B (NULL: none): ds_fp32_to_bf16 of
	 * every element, at the same offsets (lda/ldb and the strides count
	 * elements of either).  oneDNN reads these instead of converting A or
	 * B, and dstk's kernels (the portable one too) pack from them, half
	 * the bytes of fp32, so a caller that already holds them (a layer's
	 * weights, its saved activations) spares the conversions; the results
	 * are the same bits either way.  Where a copy is given its fp32
	 * operand is never read, and may be stale (the model's backward leaves
	 * activations that only products read in bf16): every implementation,
	 * and compute_cpu's sgemm path, reads the copy. */
	const uint16_t *a16, *b16;
};
/* One dense product: the batch of a single ds_gemm_bf16 call. */
#define DS_GEMM_BF16_BATCH_ONE { 1, 1, { 0, 0 }, { 0, 0 }, { 0, 0 }, DS_GEMM_BF16_DENSE, 0, NULL, NULL }

/* The batch's products, each ds_gemm_bf16 with the same shape and
 * arguments on its own A, B and C; the kernel runs whole entries per
 * thread, and so does oneDNN for beta 0 and at least two entries per
 * thread (else an entry at a time, each over the threads).  Returns 0 or -1 as ds_gemm_bf16 (-1: every C untouched; also
 * for flags on an implementation other than dstk's kernel). */
int ds_gemm_bf16_batch(enum ds_bf16_impl impl, const struct ds_gemm_bf16_batch *bt, int ta, int tb, int M, int N,
		       int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
		       int ldc);

#endif
