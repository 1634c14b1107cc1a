/* gemm_bf16_int.h - private interface between the bf16 product dispatcher
 * (gemm_bf16.c, which also wraps oneDNN) and dstk's own packed kernel
 * (gemm_bf16_kernel.c).  Not for callers outside kernels/cpu/gemm_bf16*.c.
 */
#ifndef DS_KERNELS_GEMM_BF16_INT_H
#define DS_KERNELS_GEMM_BF16_INT_H

#include "cpu/gemm_bf16.h"

/* 1 when this CPU runs AVX512_BF16 (vdpbf16ps) with the OS saving the
 * AVX-512 state (CPUID and XGETBV, through __builtin_cpu_supports). */
int ds_gemm_bf16_cpu_avx512bf16(void);

/* The own kernel: C (M,N) = alpha op(A) op(B) + beta C with cblas_sgemm's
 * row-major arguments, A and B rounded to bf16 while they are packed, fp32
 * accumulation.  isa 1 uses vdpbf16ps (the CPU must have it), 0 the
 * portable C micro-kernel (same packing and blocking, any CPU; for tests).
 * keep: 0 none; 1 pack B and keep the packed copy; 2 reuse the kept copy
 * when it was packed from the same B pointer, orientation, size and ldb.
 * bt (NULL: one product) runs a batch (keep must be 0).  flags: A and C
 * element types as ds_gemm_bf16_ex.  Returns 0, or -1 when out of memory
 * or given a bf16 C with beta != 0 (C untouched).  Calls are serialised by
 * a lock; not inside a parallel region. */
int ds_gemm_bf16_kernel(int isa, int keep, const struct ds_gemm_bf16_batch *bt, unsigned flags, int ta, int tb,
			int M, int N, int K, float alpha, const void *A, int lda, const float *B, int ldb, float beta,
			void *C, int ldc);

#endif
