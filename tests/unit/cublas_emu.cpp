/* cublas_emu.cpp - cublas_emu.h's calls: column-major GEMMs checked as
 * cuBLAS checks them and computed by cblas_sgemm on fp32 copies, each
 * inside a ds_emu_call (cuda_emu.h), the span in which emulated device
 * memory is reachable. */
#include "cublas_emu.h"

#include <cblas.h>

#include <vector>

#include "util/half.h"

struct ds_emu_blas {
	cudaStream_t stream;
	cublasMath_t math;
};

static int last_compute = -1;
static long calls = 0;

extern "C" int ds_emu_blas_last_compute(void) { return last_compute; }
extern "C" long ds_emu_blas_calls(void) { return calls; }

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
	*h = new ds_emu_blas{ nullptr, CUBLAS_DEFAULT_MATH };
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->stream = s;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->math = m;
	return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
	case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
	default: return "cuBLAS error (emulated)";
	}
}

static size_t esize(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static float get(const void *p, cudaDataType t, size_t i)
{
	if (t == CUDA_R_32F)
		return ((const float *)p)[i];
	uint16_t h = ((const uint16_t *)p)[i];
	return t == CUDA_R_16F ? ds_f16_to_f32_exact(h) : ds_bf16_to_f32_exact(h);
}

static void put(void *p, cudaDataType t, size_t i, float v)
{
	if (t == CUDA_R_32F)
		((float *)p)[i] = v;
	else
		((uint16_t *)p)[i] = t == CUDA_R_16F ? ds_f32_to_f16_rne(v) : ds_f32_to_bf16_rne(v);
}

/* TF32: 10 mantissa bits, round to nearest even */
static float tf32(float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	if ((u & 0x7f800000u) != 0x7f800000u)
		u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
	memcpy(&v, &u, 4);
	return v;
}

/* a rows x cols column-major matrix with leading dimension ld, as fp32 */
static std::vector<float> widen(const void *p, cudaDataType t, int rows, int cols, int ld, bool round_tf32)
{
	std::vector<float> out((size_t)ld * (cols ? cols : 1), 0.0f);
	for (int c = 0; c < cols; c++)
		for (int r = 0; r < rows; r++) {
			float v = get(p, t, (size_t)c * ld + r);
			out[(size_t)c * ld + r] = round_tf32 ? tf32(v) : v;
		}
	return out;
}

static cublasStatus_t check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			    cudaDataType at, int lda, cudaDataType bt, int ldb, cudaDataType ct, int ldc,
			    cublasComputeType_t comp)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m < 0 || n < 0 || k < 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	int ar = ta == CUBLAS_OP_N ? m : k, br = tb == CUBLAS_OP_N ? k : n;
	if (lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (at != bt)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	switch (comp) {
	case CUBLAS_COMPUTE_32F:
	case CUBLAS_COMPUTE_32F_PEDANTIC:
		if (at == CUDA_R_32F && ct != CUDA_R_32F)
			return CUBLAS_STATUS_NOT_SUPPORTED;
		if (at != CUDA_R_32F && ct != CUDA_R_32F && ct != at)
			return CUBLAS_STATUS_NOT_SUPPORTED;
		return CUBLAS_STATUS_SUCCESS;
	case CUBLAS_COMPUTE_32F_FAST_TF32:
	case CUBLAS_COMPUTE_32F_FAST_16F:
	case CUBLAS_COMPUTE_32F_FAST_16BF:
		return at == CUDA_R_32F && ct == CUDA_R_32F ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
	}
	return CUBLAS_STATUS_NOT_SUPPORTED;
}

static void one(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A,
		cudaDataType at, int lda, const void *B, int ldb, float beta, void *C, cudaDataType ct, int ldc,
		bool round_tf32)
{
	int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
	int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
	std::vector<float> a = widen(A, at, ar, ac, lda, round_tf32), b = widen(B, at, br, bc, ldb, round_tf32);
	std::vector<float> c((size_t)m * (n ? n : 1), 0.0f);
	if (beta != 0.0f)  /* beta 0: C is not read (it may hold NaNs) */
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++)
				c[(size_t)j * m + i] = get(C, ct, (size_t)j * ldc + i);
	if (m && n)
		cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
			    tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha, a.data(), lda, b.data(), ldb,
			    beta, c.data(), m > 0 ? m : 1);
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++)
			put(C, ct, (size_t)j * ldc + i, c[(size_t)j * m + i]);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			    const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
			    int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,
			    cublasGemmAlgo_t algo)
{
	(void)algo;
	ds_emu_call call;  /* A, B and C are device memory */
	calls++;
	cublasStatus_t s = check(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, comp);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	last_compute = comp;
	one(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, B, ldb, *(const float *)beta, C, ct, ldc,
	    comp == CUBLAS_COMPUTE_32F_FAST_TF32);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
					  int k, const void *alpha, const void *A, cudaDataType at, int lda,
					  long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
					  const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int count,
					  cublasComputeType_t comp, cublasGemmAlgo_t algo)
{
	(void)algo;
	ds_emu_call call;  /* A, B and C are device memory */
	calls++;
	cublasStatus_t s = check(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, comp);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	if (count < 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	last_compute = comp;
	for (int e = 0; e < count; e++)
		one(ta, tb, m, n, k, *(const float *)alpha, (const char *)A + (size_t)(e * sa) * esize(at), at, lda,
		    (const char *)B + (size_t)(e * sb) * esize(bt), ldb, *(const float *)beta,
		    (char *)C + (size_t)(e * sc) * esize(ct), ct, ldc, comp == CUBLAS_COMPUTE_32F_FAST_TF32);
	return CUBLAS_STATUS_SUCCESS;
}
