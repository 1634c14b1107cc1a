/* gemm_cuda.h - matrix products on the GPU through cuBLAS, with the row-major
 * (trans, M, N, K, lda, ...) convention of cblas_sgemm(CblasRowMajor, ...)
 * that lib/model/gpt.c's gemm() uses, so a caller swaps one for the other.
 * Inputs A and B are fp32 or 16-bit (enum ds_half_kind), the output fp32
 * or the inputs' 16-bit kind; products accumulate in fp32.  fp32 inputs run
 * CUBLAS_COMPUTE_32F_PEDANTIC (no TF32: results within float rounding of
 * the CPU's sgemm) unless the handle allows TF32; 16-bit inputs run on the
 * tensor cores.  Return values: ds_cuda.h (DS_CUDA_EBLAS + a cuBLAS status).
 * This file and lib/app/gpu_cuda.c are the only ones that include cuBLAS.
 */
#ifndef DS_KERNELS_GEMM_CUDA_H
#define DS_KERNELS_GEMM_CUDA_H

#include "cuda/ds_cuda.h"
#include "util/half.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A cuBLAS handle bound to one stream, with the TF32 choice. */
struct ds_cuda_blas;

/* Create a handle on stream (a cudaStream_t, NULL: the default stream);
 * allow_tf32 != 0 lets fp32 products use TF32 ("dstk": {"tf32": true}).
 * Returns 0 (*out owned: ds_cuda_blas_destroy) or an error. */
int ds_cuda_blas_create(struct ds_cuda_blas **out, void *stream, int allow_tf32);
void ds_cuda_blas_destroy(struct ds_cuda_blas *b);   /* accepts NULL */
int ds_cuda_blas_set_stream(struct ds_cuda_blas *b, void *stream);
/* The cublasComputeType_t value fp32 products use (for tests and logs). */
int ds_cuda_blas_fp32_compute(const struct ds_cuda_blas *b);

/* C (M,N) = alpha op(A) op(B) + beta C, row-major, op(X) = X^T when its
 * flag is nonzero (A stored (K,M), B stored (N,K) then); ab: the type of
 * A and B, c: the type of C (ab's or fp32).  beta 0 does not read C. */
int ds_cuda_gemm(struct ds_cuda_blas *b, enum ds_half_kind ab, enum ds_half_kind c, int ta, int tb, int M, int N,
		 int K, float alpha, const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc);

/* Where entry e of a batch lives: X + (e / inner) * s[0] + (e % inner) * s[1]
 * elements, for X = A, B, C (attention's (b, head) products: inner =
 * heads); the layout of kernels/cpu/gemm_bf16.h's struct ds_gemm_bf16_batch.
 * count must be a multiple of inner. */
struct ds_cuda_batch {
	int count, inner;
	long sa[2], sb[2], sc[2];
};

/* The batch's products, each ds_cuda_gemm with the same shape: strided
 * batched calls, one per outer index (or one in all when the strides are
 * uniform). */
int ds_cuda_gemm_batch(struct ds_cuda_blas *b, const struct ds_cuda_batch *bt, enum ds_half_kind ab,
		       enum ds_half_kind c, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
		       const void *B, int ldb, float beta, void *C, int ldc);

/* The CPU's bf16 products (kernels/cpu/gemm_bf16.h) on fp32 buffers: A
 * and B rounded to kind k (to nearest even, into stream-ordered scratch
 * covering the elements the product reads), the products on the tensor
 * cores accumulated in fp32, C fp32.  bt NULL: one product.  For a model
 * that keeps 16-bit values in fp32 buffers, as the CPU path does. */
int ds_cuda_gemm_rounded(struct ds_cuda_blas *b, const struct ds_cuda_batch *bt, enum ds_half_kind k, int ta, int tb,
			 int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta,
			 float *C, int ldc, void *stream);

#ifdef __cplusplus
}
#endif

#endif
