/* gemm_cuda.cu - the cuBLAS wrapper of gemm_cuda.h and ds_cuda_strerror.
 * A row-major product C = op(A) op(B) is the column-major product
 * C^T = op(B)^T op(A)^T on the same memory: cuBLAS gets B first, then A,
 * with M and N swapped and the same leading dimensions.  Under
 * -DDS_CUDA_EMU the calls go to tests/unit/cublas_emu.h (cblas_sgemm on the
 * host), which checks that mapping, not cuBLAS.
 *
 * cuBLAS is not linked: its entry points are resolved at the first
 * ds_cuda_blas_create, from the process when something already loaded it
 * (dlsym(RTLD_DEFAULT): ds-report links it), else from
 * dlopen("libcublas.so.<CUBLAS_VER_MAJOR>").  So every program with this
 * file (ds-train) starts without libcublas (about 150 MB of RSS) and a CPU
 * run never maps it; a missing library or entry point is DS_CUDA_ENOBLAS,
 * whose text says what to install.  The emulated build takes
 * cublas_emu.h's functions directly (they are C++ functions, not the
 * library's C symbols).
 */
#include "cuda/cuda_port.h"

#ifdef DS_CUDA_EMU
#include "cublas_emu.h"
#else
#include <cublas_v2.h>
#include <dlfcn.h>
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/flat_cuda.h"
#include "cuda/gemm_cuda.h"

struct ds_cuda_blas {
	cublasHandle_t h;
	int tf32;
};

/* cuBLAS's entry points (cublas_v2.h's names: cublasCreate is the macro
 * of cublasCreate_v2, and so on); set once by load() */
static struct {
	decltype(&cublasCreate) create;
	decltype(&cublasDestroy) destroy;
	decltype(&cublasSetStream) set_stream;
	decltype(&cublasSetMathMode) set_math_mode;
	decltype(&cublasGetStatusString) status_string;
	/* the int versions, cublas_api.h's C functions (C++ also sees 64-bit
	 * overloads of these two names) */
	cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
				  const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
				  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
	cublasStatus_t (*gemm_strided_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
					  const void *, const void *, cudaDataType, int, long long, const void *,
					  cudaDataType, int, long long, const void *, void *, cudaDataType, int, long long,
					  int, cublasComputeType_t, cublasGemmAlgo_t);
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static int blas_rc;            /* 0 or DS_CUDA_ENOBLAS */
static char blas_why[320];     /* DS_CUDA_ENOBLAS's text */

#ifdef DS_CUDA_EMU
static void load(void)
{
	blas.create = cublasCreate;
	blas.destroy = cublasDestroy;
	blas.set_stream = cublasSetStream;
	blas.set_math_mode = cublasSetMathMode;
	blas.status_string = cublasGetStatusString;
	blas.gemm_ex = cublasGemmEx;
	blas.gemm_strided_ex = cublasGemmStridedBatchedEx;
}
#else
#define DS_STR_(x) #x
#define DS_STR(x) DS_STR_(x)   /* the macro's expansion: "cublasCreate_v2" */
#ifndef DS_CUBLAS_SONAME
#define DS_CUBLAS_SONAME "libcublas.so." DS_STR(CUBLAS_VER_MAJOR)
#endif

static void load(void)
{
	const char *so = DS_CUBLAS_SONAME;
	void *lib = RTLD_DEFAULT;
	if (!dlsym(RTLD_DEFAULT, DS_STR(cublasCreate))) {
		lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			const char *e = dlerror();
			snprintf(blas_why, sizeof blas_why,
				 "cuBLAS: cannot load %s (%.120s): install CUDA %d's cuBLAS (the libcublas-%d-* package) or add "
				 "its directory to LD_LIBRARY_PATH", so, e ? e : "not found", CUBLAS_VER_MAJOR,
				 CUBLAS_VER_MAJOR);
			blas_rc = DS_CUDA_ENOBLAS;
			return;
		}
	}
	struct {
		void **slot;
		const char *name;
	} want[] = {
		{ (void **)&blas.create, DS_STR(cublasCreate) },
		{ (void **)&blas.destroy, DS_STR(cublasDestroy) },
		{ (void **)&blas.set_stream, DS_STR(cublasSetStream) },
		{ (void **)&blas.set_math_mode, DS_STR(cublasSetMathMode) },
		{ (void **)&blas.status_string, DS_STR(cublasGetStatusString) },
		{ (void **)&blas.gemm_ex, DS_STR(cublasGemmEx) },
		{ (void **)&blas.gemm_strided_ex, DS_STR(cublasGemmStridedBatchedEx) },
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		*want[i].slot = dlsym(lib, want[i].name);
		if (!*want[i].slot) {
			snprintf(blas_why, sizeof blas_why,
				 "cuBLAS: %s has no %s: install CUDA %d's cuBLAS (the libcublas-%d-* package), the version this "
				 "build was compiled against", lib == RTLD_DEFAULT ? "the loaded cuBLAS" : so,
				 want[i].name, CUBLAS_VER_MAJOR, CUBLAS_VER_MAJOR);
			memset(&blas, 0, sizeof blas);
			blas_rc = DS_CUDA_ENOBLAS;
			return;   /* the library stays loaded: dlclose of a half-used cuBLAS is not worth the risk */
		}
	}
}
#endif

#define BLAS_TRY(x)                                                                                        \
	do {                                                                                               \
		cublasStatus_t ds_s_ = (x);                                                                \
		if (ds_s_ != CUBLAS_STATUS_SUCCESS)                                                        \
			return DS_CUDA_EBLAS + (int)ds_s_;                                                 \
	} while (0)

extern "C" const char *ds_cuda_strerror(int rc)
{
	static thread_local char buf[160];
	if (rc == 0)
		return "no error";
	if (rc == DS_CUDA_ENOBLAS)
		return blas_why;
	if (rc >= DS_CUDA_EBLAS) {
		if (blas.status_string)
			snprintf(buf, sizeof(buf), "cuBLAS: %s",
				 blas.status_string((cublasStatus_t)(rc - DS_CUDA_EBLAS)));
		else
			snprintf(buf, sizeof(buf), "cuBLAS: status %d", rc - DS_CUDA_EBLAS);
		return buf;
	}
	return cudaGetErrorString((cudaError_t)rc);
}

extern "C" int ds_cuda_blas_create(struct ds_cuda_blas **out, void *stream, int allow_tf32)
{
	*out = NULL;
	pthread_once(&blas_once, load);
	if (blas_rc)
		return blas_rc;
	struct ds_cuda_blas *b = (struct ds_cuda_blas *)calloc(1, sizeof(*b));
	if (!b)
		return (int)cudaErrorMemoryAllocation;
	cublasStatus_t s = blas.create(&b->h);
	if (s != CUBLAS_STATUS_SUCCESS) {
		free(b);
		return DS_CUDA_EBLAS + (int)s;
	}
	b->tf32 = allow_tf32 != 0;
	s = blas.set_stream(b->h, (cudaStream_t)stream);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = blas.set_math_mode(b->h, b->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
	if (s != CUBLAS_STATUS_SUCCESS) {
		ds_cuda_blas_destroy(b);
		return DS_CUDA_EBLAS + (int)s;
	}
	*out = b;
	return 0;
}

extern "C" void ds_cuda_blas_destroy(struct ds_cuda_blas *b)
{
	if (!b)
		return;
	blas.destroy(b->h);
	free(b);
}

extern "C" int ds_cuda_blas_set_stream(struct ds_cuda_blas *b, void *stream)
{
	BLAS_TRY(blas.set_stream(b->h, (cudaStream_t)stream));
	return 0;
}

static cudaDataType dtype(enum ds_half_kind k)
{
	return k == DS_HALF_FP16 ? CUDA_R_16F : k == DS_HALF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static cublasComputeType_t compute(const struct ds_cuda_blas *b, enum ds_half_kind ab)
{
	if (ab != DS_HALF_NONE)
		return CUBLAS_COMPUTE_32F;   /* 16-bit inputs, fp32 accumulation: tensor cores */
	return b->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
}

extern "C" int ds_cuda_blas_fp32_compute(const struct ds_cuda_blas *b) { return (int)compute(b, DS_HALF_NONE); }

static size_t esize(enum ds_half_kind k) { return k == DS_HALF_NONE ? 4 : 2; }

extern "C" int ds_cuda_gemm(struct ds_cuda_blas *b, enum ds_half_kind ab, enum ds_half_kind c, int ta, int tb, int M,
			    int N, int K, float alpha, const void *A, int lda, const void *B, int ldb, float beta,
			    void *C, int ldc)
{
	BLAS_TRY(blas.gemm_ex(b->h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
			      dtype(ab), ldb, A, dtype(ab), lda, &beta, C, dtype(c), ldc, compute(b, ab),
			      CUBLAS_GEMM_DEFAULT));
	return 0;
}

extern "C" int ds_cuda_gemm_batch(struct ds_cuda_blas *b, const struct ds_cuda_batch *bt, enum ds_half_kind ab,
				  enum ds_half_kind c, int ta, int tb, int M, int N, int K, float alpha, const void *A,
				  int lda, const void *B, int ldb, float beta, void *C, int ldc)
{
	if (bt->count <= 0)
		return 0;
	if (bt->inner <= 0 || bt->count % bt->inner)
		return DS_CUDA_EBLAS + (int)CUBLAS_STATUS_INVALID_VALUE;
	const long in = bt->inner;
	/* one strided call over everything when the outer stride continues
	 * the inner one */
	const int uniform = bt->sa[0] == in * bt->sa[1] && bt->sb[0] == in * bt->sb[1] && bt->sc[0] == in * bt->sc[1];
	const int outer = uniform ? 1 : bt->count / bt->inner, per = uniform ? bt->count : bt->inner;
	const size_t ea = esize(ab), ec = esize(c);
	for (int q = 0; q < outer; q++) {
		const char *a = (const char *)A + (size_t)q * bt->sa[0] * ea;
		const char *bb = (const char *)B + (size_t)q * bt->sb[0] * ea;
		char *cc = (char *)C + (size_t)q * bt->sc[0] * ec;
		BLAS_TRY(blas.gemm_strided_ex(b->h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N,
						    M, K, &alpha, bb, dtype(ab), ldb, bt->sb[1], a, dtype(ab), lda,
						    bt->sa[1], &beta, cc, dtype(c), ldc, bt->sc[1], per, compute(b, ab),
						    CUBLAS_GEMM_DEFAULT));
	}
	return 0;
}

/* elements from X's start that a (batch of) product(s) reads: the last
 * entry's offset plus one stored matrix of rows x cols at leading dim ld */
static int64_t extent(const struct ds_cuda_batch *bt, const long *s, int rows, int cols, int ld)
{
	int64_t off = 0;
	if (bt && bt->count > 1)
		off = (int64_t)(bt->count / bt->inner - 1) * s[0] + (int64_t)(bt->inner - 1) * s[1];
	return off + (int64_t)(rows - 1) * ld + cols;
}

extern "C" int ds_cuda_gemm_rounded(struct ds_cuda_blas *b, const struct ds_cuda_batch *bt, enum ds_half_kind k,
				    int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
				    const float *B, int ldb, float beta, float *C, int ldc, void *stream)
{
	if (M <= 0 || N <= 0 || (bt && bt->count <= 0))
		return 0;
	const struct ds_cuda_batch one = { 1, 1, { 0, 0 }, { 0, 0 }, { 0, 0 } };
	if (!bt)
		bt = &one;
	const int64_t na = K > 0 ? extent(bt, bt->sa, ta ? K : M, ta ? M : K, lda) : 0;
	const int64_t nb = K > 0 ? extent(bt, bt->sb, tb ? N : K, tb ? K : N, ldb) : 0;
	uint16_t *h = NULL;
	DS_CUDA_TRY(cudaMallocAsync((void **)&h, (size_t)(na + nb + 1) * sizeof(uint16_t), (cudaStream_t)stream));
	int rc = ds_cuda_half_pack(k, h, A, na, stream);
	if (!rc)
		rc = ds_cuda_half_pack(k, h + na, B, nb, stream);
	if (!rc)
		rc = ds_cuda_gemm_batch(b, bt, k, DS_HALF_NONE, ta, tb, M, N, K, alpha, h, lda, h + na, ldb, beta, C, ldc);
	cudaError_t e = cudaFreeAsync(h, (cudaStream_t)stream);
	return rc ? rc : (int)e;
}
