/* gemm_bf16.h - bf16 matrix products on Intel AMX, through oneDNN (issue 5).
 *
 * ds_gemm_bf16 computes what cblas_sgemm(CblasRowMajor, ...) computes with
 * the same arguments, except that A and B are first rounded to bf16 (round
 * to nearest even, as ds_fp32_to_bf16) and the products are accumulated in
 * fp32 by AMX's TDPBF16PS in oneDNN's order: the result equals an fp32
 * product of the bf16-rounded inputs up to the accumulation order (and
 * TDPBF16PS's treatment of bf16 subnormal inputs as zero).  On the 2-core
 * AMX machine it was written on it is 3-4.8x OpenBLAS's sgemm on the GPT
 * linear and head shapes, conversion included (bench/amx-gemm).  AMX-FP16
 * (Granite Rapids) is not used: fp16 products stay on sgemm.
 *
 * Built on oneDNN 2.x (Debian 12's libdnnl-dev, configure --with-dnnl);
 * without it every call reports "not usable" and callers keep sgemm.  Like
 * cblas_sgemm it must not be called inside an OpenMP parallel region (it
 * runs its own, on the same libgomp pool).  Calls are serialised by a lock.
 */
#ifndef DS_KERNELS_GEMM_BF16_H
#define DS_KERNELS_GEMM_BF16_H

/* Below this M*N*K a call costs more than it saves (conversion and
 * oneDNN's per-call work): GPT-2's per-head 64x64x64 attention products ran
 * at 0.3-0.9x sgemm with 2 threads, gpt-tiny's 128x128x64 and 128x64x128 at
 * 1.1-1.8x (bench/amx-gemm).  Callers that choose per call keep sgemm below
 * it. */
#define DS_GEMM_BF16_MIN_MNK (1 << 19)

/* 1 when bf16 products run on AMX in this process: oneDNN is built in and
 * its matmul picks an AMX implementation on this CPU (checked once, on a
 * small product); else 0. */
int ds_gemm_bf16_usable(void);

/* One line for reports: the implementation ("oneDNN 2.6.3
 * brg:avx512_core_amx_bf16") or why it is not usable. */
const char *ds_gemm_bf16_describe(void);

/* C (M,N) = alpha op(A) op(B) + beta C, row-major; ta/tb nonzero mean
 * op(X) = X^T (A stored (K,M), B stored (N,K)); lda/ldb/ldc as in
 * cblas_sgemm.  beta 0 overwrites C without reading it.  Returns 0, or -1
 * when not usable or out of memory (C untouched: the caller runs sgemm). */
int ds_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
		 int ldb, float beta, float *C, int ldc);

/* ds_gemm_bf16 with B's bf16 copy kept for the next call: same = 0
 * converts B (and keeps the copy), same = 1 promises that B holds the same
 * values as in the previous ds_gemm_bf16_keep_b call and reuses the copy if
 * that call had the same B pointer, orientation, size and ldb.  For a
 * product split into row chunks against one weight matrix (the model's
 * head: converting its (V, C) embedding per chunk would cost more than the
 * product).  One kept copy per process; ds_gemm_bf16 calls do not touch it. */
int ds_gemm_bf16_keep_b(int same, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
			const float *B, int ldb, float beta, float *C, int ldc);

#endif
