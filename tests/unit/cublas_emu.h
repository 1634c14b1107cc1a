/* cublas_emu.h - the cuBLAS subset kernels/cuda/gemm_cuda.cu calls, for its
 * emulated build (-DDS_CUDA_EMU): handles, streams, math modes, GemmEx and
 * GemmStridedBatchedEx with cuBLAS's column-major meaning, argument checks
 * (leading dimensions, type and compute-type combinations) and results
 * from cblas_sgemm on the fp32 values of the inputs (TF32 compute rounds
 * the inputs to TF32 first).  It checks the wrapper's row-major to
 * column-major mapping, not cuBLAS.  Values as in cublas_api.h and
 * library_types.h.  Test-only code.
 */
#ifndef DS_TESTS_CUBLAS_EMU_H
#define DS_TESTS_CUBLAS_EMU_H

#include "cuda_emu.h"

typedef struct ds_emu_blas *cublasHandle_t;

typedef enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_ALLOC_FAILED = 3,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_ARCH_MISMATCH = 8,
	CUBLAS_STATUS_MAPPING_ERROR = 11,
	CUBLAS_STATUS_EXECUTION_FAILED = 13,
	CUBLAS_STATUS_INTERNAL_ERROR = 14,
	CUBLAS_STATUS_NOT_SUPPORTED = 15,
	CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;

typedef enum {
	CUBLAS_COMPUTE_32F = 68,
	CUBLAS_COMPUTE_32F_PEDANTIC = 69,
	CUBLAS_COMPUTE_32F_FAST_16F = 74,
	CUBLAS_COMPUTE_32F_FAST_16BF = 75,
	CUBLAS_COMPUTE_32F_FAST_TF32 = 77
} cublasComputeType_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

typedef enum {
	CUBLAS_DEFAULT_MATH = 0,
	CUBLAS_PEDANTIC_MATH = 2,
	CUBLAS_TF32_TENSOR_OP_MATH = 3,
	CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16
} cublasMath_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			    const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
			    int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,
			    cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
					  int k, const void *alpha, const void *A, cudaDataType at, int lda,
					  long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
					  const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int count,
					  cublasComputeType_t comp, cublasGemmAlgo_t algo);

#endif
