/* cuda_emu.h - a host emulation of the CUDA subset that kernels/cuda uses,
 * so that g++ compiles the same .cu sources (-x c++ -DDS_CUDA_EMU, through
 * kernels/cuda/cuda_port.h) and the unit tests run their indexing,
 * barriers, warp exchanges, reductions and float math on a machine without
 * a GPU.  Each block's threads are fibers (ucontext) on one OS thread, run
 * to their next barrier in a chosen order (cuda_emu_api.h); __syncthreads
 * and the warp operations are real barriers, strictly checked (all threads
 * or all lanes of the mask, none exited); launch configurations are checked
 * against sm_80's limits, wmma pointers for their 32-byte alignment.  What
 * it does NOT check: timing, the memory model beyond barriers (a warp
 * shuffle here also orders the lanes' shared-memory accesses, which only
 * __syncwarp/__syncthreads do on hardware), register or static
 * shared-memory limits, out-of-bounds accesses (configure --enable-asan
 * for those, on buffers a test malloc'ed; cudaMalloc'ed memory is mmap'd
 * pages that ASan does not watch), the tensor cores' own rounding, inline
 * PTX (none is used).  Device memory is kept unreachable from the host
 * outside the emulated calls (the runtime API below), and on request
 * (ds_emu_strict_args) a launch's pointer arguments must be device or
 * pinned memory.
 * Test-only code: never part of libds.
 */
#ifndef DS_TESTS_CUDA_EMU_H
#define DS_TESTS_CUDA_EMU_H

#ifndef __cplusplus
#error "cuda_emu.h is C++: compile the .cu sources with g++ -x c++ -DDS_CUDA_EMU"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <type_traits>

#include "cuda_emu_api.h"

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __constant__ static
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct uint3 {
	unsigned x, y, z;
};

struct dim3 {
	unsigned x, y, z;
	constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;
typedef struct CUstream_st *cudaStream_t;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4
};

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

/* ---- the emulator's state, set by the scheduler before each switch ---- */
extern uint3 ds_emu_threadIdx, ds_emu_blockIdx;
extern dim3 ds_emu_blockDim, ds_emu_gridDim;
#define threadIdx ds_emu_threadIdx
#define blockIdx ds_emu_blockIdx
#define blockDim ds_emu_blockDim
#define gridDim ds_emu_gridDim
#define warpSize 32

cudaError_t ds_emu_launch(const char *name, const void *fn, dim3 grid, dim3 block, size_t shmem,
			  cudaStream_t stream, const std::function<void()> &body);
cudaError_t ds_emu_take_error(int clear);
void ds_emu_set_error(cudaError_t e);
void *ds_emu_dyn_smem(void);
cudaError_t ds_emu_set_smem_attr(const void *fn, int bytes);
const char *ds_emu_error_string(cudaError_t e);

/* a thread of the running block: its linear index, and the block's size */
unsigned ds_emu_linear_tid(void);
unsigned ds_emu_block_threads(void);
/* barriers: the whole block; the lanes of mask in this thread's warp */
void ds_emu_syncthreads(void);
void ds_emu_warp_wait(unsigned mask);
/* a warp exchange slot per thread: put this thread's 8 bytes, read those of
 * thread t (linear index) after a warp barrier; checks t is in the mask */
void ds_emu_slot_put(unsigned long long v);
unsigned long long ds_emu_slot_get(unsigned t, unsigned mask);
void ds_emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* With ds_emu_strict_args(1) (cuda_emu_api.h) every pointer argument of a
 * launch must point into device memory or pinned host memory, as on a GPU;
 * pointers inside structs passed by value are not looked at. */
void ds_emu_check_arg(const char *kernel, int i, const void *p);
template <class T> static inline void ds_emu_arg(const char *kernel, int i, const T &a)
{
	if constexpr (std::is_pointer<T>::value)
		ds_emu_check_arg(kernel, i, (const void *)a);
}
template <class... A> static inline int ds_emu_args(const char *kernel, const A &...a)
{
	int i = 0;
	(ds_emu_arg(kernel, i++, a), ...);
	return 0;
}

/* (the arguments are evaluated twice: for the check, and by the lambda) */
#define DS_CUDA_LAUNCH(k, g, b, sh, st, ...)                                                               \
	(ds_emu_args(#k, __VA_ARGS__),                                                                      \
	 ds_emu_launch(#k, (const void *)(k), dim3(g), dim3(b), (size_t)(sh), (cudaStream_t)(st),            \
		       [=]() { (k)(__VA_ARGS__); }))
#define DS_CUDA_DYN_SHARED(T, name) T *name = reinterpret_cast<T *>(ds_emu_dyn_smem())

/* ---- runtime API -------------------------------------------------------
 * Device memory (cudaMalloc, cudaMallocAsync) is page-aligned mmap'd memory
 * that stays PROT_NONE except while an emulated call that may touch it
 * runs: a kernel launch, a copy or set, a cuBLAS call (cuda_emu.cpp,
 * cublas_emu.cpp).  So host code that reads or writes device memory
 * directly, which a GPU would not allow, dies with SIGSEGV here, and the
 * handler names it ("host access of emulated device memory at 0x...").
 * Pinned host memory (cudaMallocHost) is ordinary host memory, at most
 * DS_EMU_PINNED_MEM bytes of it when that is set (unlimited otherwise). */
cudaError_t ds_emu_dev_alloc(void **p, size_t n);
cudaError_t ds_emu_dev_free(void *p);
cudaError_t ds_emu_host_alloc(void **p, size_t n);
cudaError_t ds_emu_host_free(void *p);
cudaError_t ds_emu_copy(void *d, const void *src, size_t n);
cudaError_t ds_emu_set(void *d, int v, size_t n);
/* an emulated call's span (nested calls counted): every device allocation
 * is readable and writable from the outermost enter to its leave */
void ds_emu_enter(void);
void ds_emu_leave(void);
struct ds_emu_call {
	ds_emu_call() { ds_emu_enter(); }
	~ds_emu_call() { ds_emu_leave(); }
	ds_emu_call(const ds_emu_call &) = delete;
	ds_emu_call &operator=(const ds_emu_call &) = delete;
};

static inline cudaError_t cudaGetLastError(void) { return ds_emu_take_error(1); }
static inline cudaError_t cudaPeekAtLastError(void) { return ds_emu_take_error(0); }
static inline const char *cudaGetErrorString(cudaError_t e) { return ds_emu_error_string(e); }
static inline cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
	(void)s;
	return ds_emu_dev_alloc(p, n);
}
template <class T> static inline cudaError_t cudaMallocAsync(T **p, size_t n, cudaStream_t s)
{
	return cudaMallocAsync((void **)p, n, s);
}
static inline cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
	(void)s;
	return ds_emu_dev_free(p);
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s)
{
	(void)k;
	(void)s;
	return ds_emu_copy(d, src, n);
}
static inline cudaError_t cudaMemcpy(void *d, const void *src, size_t n, enum cudaMemcpyKind k)
{
	return cudaMemcpyAsync(d, src, n, k, (cudaStream_t)0);
}
static inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t s)
{
	(void)s;
	return ds_emu_set(d, v, n);
}
static inline cudaError_t cudaMemset(void *d, int v, size_t n) { return cudaMemsetAsync(d, v, n, (cudaStream_t)0); }
/* one device; streams are tokens (every launch runs to completion at once) */
enum { cudaStreamNonBlocking = 1 };
static inline cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}
static inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
/* the emulated device's memory: DS_EMU_DEVICE_MEM bytes (default 2 GiB,
 * of which 1 GiB is taken by others: free starts at 1 GiB), free less what
 * cudaMalloc holds; a cudaMalloc past it fails with
 * cudaErrorMemoryAllocation, as a full GPU does (cuda_emu.cpp) */
cudaError_t ds_emu_mem_info(size_t *f, size_t *t);
static inline cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { return ds_emu_mem_info(f, t); }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	*s = (cudaStream_t)malloc(1);
	return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	free(s);
	return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	(void)s;
	return ds_emu_take_error(0);
}
static inline cudaError_t cudaMalloc(void **p, size_t n) { return cudaMallocAsync(p, n, (cudaStream_t)0); }
static inline cudaError_t cudaFree(void *p) { return cudaFreeAsync(p, (cudaStream_t)0); }
static inline cudaError_t cudaMallocHost(void **p, size_t n) { return ds_emu_host_alloc(p, n); }
static inline cudaError_t cudaFreeHost(void *p) { return ds_emu_host_free(p); }
template <class F> static inline cudaError_t cudaFuncSetAttribute(F *fn, enum cudaFuncAttribute a, int v)
{
	(void)a;
	return ds_emu_set_smem_attr((const void *)fn, v);
}

/* ---- device functions -------------------------------------------------- */
static inline void __syncthreads(void) { ds_emu_syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { ds_emu_warp_wait(mask); }
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}

template <class T> static inline unsigned long long ds_emu_bits(T v)
{
	static_assert(sizeof(T) <= 8, "warp exchange of more than 8 bytes");
	unsigned long long u = 0;
	memcpy(&u, &v, sizeof(T));
	return u;
}
template <class T> static inline T ds_emu_unbits(unsigned long long u)
{
	T v;
	memcpy(&v, &u, sizeof(T));
	return v;
}

/* lane src of this thread's warp (linear index base + src) */
template <class T> static inline T ds_emu_shfl(unsigned mask, T v, int src)
{
	unsigned me = ds_emu_linear_tid(), base = me & ~31u;
	ds_emu_slot_put(ds_emu_bits(v));
	ds_emu_warp_wait(mask);
	T r = ds_emu_unbits<T>(ds_emu_slot_get(base + (unsigned)src, mask));
	ds_emu_warp_wait(mask);
	return r;
}
static inline int ds_emu_lane(void) { return (int)(ds_emu_linear_tid() & 31u); }
static inline void ds_emu_width(int w)
{
	if (w != 32)
		ds_emu_fail("warp shuffle with width %d: the emulation does only 32", w);
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
	ds_emu_width(width);
	return ds_emu_shfl(mask, v, src & 31);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32)
{
	ds_emu_width(width);
	return ds_emu_shfl(mask, v, (ds_emu_lane() ^ lm) & 31);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	ds_emu_width(width);
	int s = ds_emu_lane() + (int)d;
	return ds_emu_shfl(mask, v, s > 31 ? ds_emu_lane() : s);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	ds_emu_width(width);
	int s = ds_emu_lane() - (int)d;
	return ds_emu_shfl(mask, v, s < 0 ? ds_emu_lane() : s);
}
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
	unsigned me = ds_emu_linear_tid(), base = me & ~31u, r = 0;
	ds_emu_slot_put(pred ? 1 : 0);
	ds_emu_warp_wait(mask);
	for (unsigned l = 0; l < 32; l++)
		if (mask >> l & 1u)
			r |= (unsigned)ds_emu_slot_get(base + l, mask) << l;
	ds_emu_warp_wait(mask);
	return r;
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }

/* fibers never interleave inside an atomic: plain read-modify-write */
template <class T> static inline T atomicAdd(T *p, T v)
{
	T o = *p;
	*p = o + v;
	return o;
}
template <class T> static inline T atomicMax(T *p, T v)
{
	T o = *p;
	*p = o > v ? o : v;
	return o;
}
template <class T> static inline T atomicOr(T *p, T v)
{
	T o = *p;
	*p = o | v;
	return o;
}
template <class T> static inline T atomicExch(T *p, T v)
{
	T o = *p;
	*p = v;
	return o;
}
template <class T> static inline T atomicCAS(T *p, T cmp, T v)
{
	T o = *p;
	if (o == cmp)
		*p = v;
	return o;
}

static inline float __int_as_float(int i) { return ds_emu_unbits<float>((unsigned)i); }
static inline int __float_as_int(float f) { return (int)(unsigned)ds_emu_bits(f); }
static inline float __uint_as_float(unsigned u) { return ds_emu_unbits<float>(u); }
static inline unsigned __float_as_uint(float f) { return (unsigned)ds_emu_bits(f); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
template <class T> static inline T __ldg(const T *p) { return *p; }

/* ---- 16-bit storage types and the warp matrix functions (wmma) ---------
 * kernels/cuda keep 16-bit values as uint16_t and convert with
 * util/half.h; __half and __nv_bfloat16 exist here only so that wmma's
 * pointers have their CUDA types.  The emulated fragments hold the whole
 * 16x16 tile in every lane (the hardware spreads it over the warp in an
 * unspecified way, so code may only touch fragment elements uniformly);
 * load/store/mma are warp-collective (a __syncwarp each) and check the
 * pointer's 32-byte alignment and ldm's multiple of 16 bytes, as CUDA
 * requires.  Products are summed in double and rounded once: tensor cores
 * round differently, so tests compare with tolerances. */
struct __half {
	uint16_t x;
};
struct __nv_bfloat16 {
	uint16_t x;
};

namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

float ds_emu_wmma_read(const __half *p);
float ds_emu_wmma_read(const __nv_bfloat16 *p);
static inline float ds_emu_wmma_read(const float *p) { return *p; }
void ds_emu_wmma_check(const void *p, unsigned ldm, size_t elem, const char *what);

template <class Use, int M, int N, int K, class T, class L = void> struct fragment {
	enum { rows = std::is_same<Use, matrix_b>::value ? K : M,
	       cols = std::is_same<Use, matrix_a>::value ? K : N, num_elements = rows * cols };
	float x[num_elements];
};

template <class Use, int M, int N, int K, class T, class L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, float v)
{
	for (int i = 0; i < f.num_elements; i++)
		f.x[i] = v;
}

/* a, b: element (r, c) of the tile at p[r*ldm + c] (row_major) or
 * p[c*ldm + r] (col_major) */
/* a warp's slot for the collective operation this lane is at: the first
 * lane to arrive (*first set) does the work there, the others copy it (the
 * operands are the same for every lane of a correct kernel), so the
 * emulation loads and multiplies once per warp, not 32 times */
float *ds_emu_wmma_slot(int *first);

template <class Use, int M, int N, int K, class T, class L, class P>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const P *p, unsigned ldm)
{
	ds_emu_wmma_check(p, ldm, sizeof(P), "load_matrix_sync");
	typedef fragment<Use, M, N, K, T, L> F;
	int first = 0;
	float *v = ds_emu_wmma_slot(&first);
	if (first)
		for (int r = 0; r < F::rows; r++)
			for (int c = 0; c < F::cols; c++)
				v[r * F::cols + c] = ds_emu_wmma_read(std::is_same<L, col_major>::value ? p + (size_t)c * ldm + r
												 : p + (size_t)r * ldm + c);
	memcpy(f.x, v, sizeof(f.x));
	__syncwarp();
}

template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float, void> &f, const float *p, unsigned ldm,
				    layout_t l)
{
	ds_emu_wmma_check(p, ldm, sizeof(float), "load_matrix_sync");
	for (int r = 0; r < M; r++)
		for (int c = 0; c < N; c++)
			f.x[r * N + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
	__syncwarp();
}

template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float, void> &f, unsigned ldm,
				     layout_t l)
{
	ds_emu_wmma_check(p, ldm, sizeof(float), "store_matrix_sync");
	__syncwarp();
	for (int r = 0; r < M; r++)
		for (int c = 0; c < N; c++)
			(l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * N + c];
	__syncwarp();
}

template <int M, int N, int K, class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float, void> &d,
			    const fragment<matrix_a, M, N, K, T, LA> &a, const fragment<matrix_b, M, N, K, T, LB> &b,
			    const fragment<accumulator, M, N, K, float, void> &c)
{
	static_assert(M * N <= 256 && M * K <= 256 && K * N <= 256, "wmma tile larger than the emulation's slot");
	int first = 0;
	float *out = ds_emu_wmma_slot(&first);
	if (first)
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++) {
				double s = c.x[i * N + j];
				for (int k = 0; k < K; k++)
					s += (double)a.x[i * K + k] * (double)b.x[k * N + j];
				out[i * N + j] = (float)s;
			}
	memcpy(d.x, out, sizeof(float) * M * N);
	__syncwarp();
}
} // namespace wmma
} // namespace nvcuda

#endif
