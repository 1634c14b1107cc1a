/* cuda_port.h - included first by every .cu file of kernels/cuda: the CUDA runtime
 * under nvcc, or the host emulation tests/unit/cuda_emu.h when g++ compiles
 * the same source with -DDS_CUDA_EMU (the unit tests); the launch and
 * dynamic-shared-memory macros that read the same in both; and the device
 * helpers the kernels share (16-bit loads and stores, fixed-order block
 * reductions, the per-sample dropout streams passed by value).
 *
 * Kernels are launched only as DS_CUDA_LAUNCH(kernel, grid, block, shmem,
 * stream, args...): nvcc gets kernel<<<grid, block, shmem, stream>>>, the
 * emulator a host loop over blocks and fibers.  A template instance goes
 * through a local function pointer (auto k = kern<T>; DS_CUDA_LAUNCH(k, ...)).
 */
#ifndef DS_KERNELS_CUDA_PORT_H
#define DS_KERNELS_CUDA_PORT_H

#ifdef DS_CUDA_EMU
#include "cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#define DS_CUDA_LAUNCH(k, g, b, sh, st, ...) (k)<<<(g), (b), (sh), (cudaStream_t)(st)>>>(__VA_ARGS__)
#define DS_CUDA_DYN_SHARED(T, name)                                                                        \
	extern __shared__ __align__(128) unsigned char ds_cuda_dyn_smem[];                                   \
	T *name = reinterpret_cast<T *>(ds_cuda_dyn_smem)
#endif

#include <stdint.h>

#include "common/gpt_math.h"
#include "cuda/ds_cuda.h"
#include "util/half.h"
#include "util/rng.h"

/* the status of the launches just made (and of any earlier asynchronous
 * error): 0 or the cudaError_t */
static inline int ds_cuda_status(void)
{
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? 0 : (int)e;
}

#define DS_CUDA_TRY(x)                                                                                     \
	do {                                                                                               \
		cudaError_t ds_e_ = (x);                                                                   \
		if (ds_e_ != cudaSuccess)                                                                  \
			return (int)ds_e_;                                                                 \
	} while (0)

/* blocks of n elements, b per block (n > 0) */
static inline unsigned ds_cuda_blocks(int64_t n, int b) { return (unsigned)((n + b - 1) / b); }

/* ---- 16-bit storage: load and store one element as float ------------- */
struct ds_f32 {
	typedef float elem;
	static __device__ __forceinline__ float load(const float *p) { return *p; }
	static __device__ __forceinline__ void store(float *p, float v) { *p = v; }
};
struct ds_f16 {
	typedef uint16_t elem;
	typedef __half wmma_t;   /* the type wmma's fragments name */
	static __device__ __forceinline__ float load(const uint16_t *p) { return ds_f16_to_f32_exact(*p); }
	static __device__ __forceinline__ void store(uint16_t *p, float v) { *p = ds_f32_to_f16_rne(v); }
};
struct ds_bf16 {
	typedef uint16_t elem;
	typedef __nv_bfloat16 wmma_t;
	static __device__ __forceinline__ float load(const uint16_t *p) { return ds_bf16_to_f32_exact(*p); }
	static __device__ __forceinline__ void store(uint16_t *p, float v) { *p = ds_f32_to_bf16_rne(v); }
};

/* x rounded to kind's 16 bits and back (DS_HALF_NONE: x) */
static __device__ __forceinline__ float ds_cuda_round(enum ds_half_kind k, float x)
{
	if (k == DS_HALF_FP16)
		return ds_f16_to_f32_exact(ds_f32_to_f16_rne(x));
	if (k == DS_HALF_BF16)
		return ds_bf16_to_f32_exact(ds_f32_to_bf16_rne(x));
	return x;
}

static __device__ __forceinline__ float ds_cuda_unpack(enum ds_half_kind k, uint16_t h)
{
	return k == DS_HALF_FP16 ? ds_f16_to_f32_exact(h) : ds_bf16_to_f32_exact(h);
}

static __device__ __forceinline__ uint16_t ds_cuda_pack(enum ds_half_kind k, float x)
{
	return k == DS_HALF_FP16 ? ds_f32_to_f16_rne(x) : ds_f32_to_bf16_rne(x);
}

/* ---- fixed-order block reductions --------------------------------------
 * sh holds blockDim.x values; blockDim.x is a power of two <= 1024.  The
 * tree is the same on every run and device (pairs s apart, s halving), so
 * a sum has the same bits run to run; every thread gets the result. */
template <class T> static __device__ T ds_block_sum(T v, T *sh)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			sh[threadIdx.x] += sh[threadIdx.x + s];
		__syncthreads();
	}
	T r = sh[0];
	__syncthreads();
	return r;
}

template <class T> static __device__ T ds_block_max(T v, T *sh)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			sh[threadIdx.x] = sh[threadIdx.x] > sh[threadIdx.x + s] ? sh[threadIdx.x] : sh[threadIdx.x + s];
		__syncthreads();
	}
	T r = sh[0];
	__syncthreads();
	return r;
}

/* ---- per-sample dropout streams, by value ----------------------------- */
#define DS_CUDA_STREAMS 64
struct ds_cuda_streams {
	struct ds_rng g[DS_CUDA_STREAMS];
};

/* streams gs[b0 .. b0+n) (n <= DS_CUDA_STREAMS) into s */
static inline void ds_cuda_streams_fill(struct ds_cuda_streams *s, const struct ds_rng *gs, int b0, int n)
{
	for (int i = 0; i < n; i++)
		s->g[i] = gs[b0 + i];
}

/* keep factors of a run of elements of one stream, one Philox block per 4
 * consecutive elements (a thread walking along a row draws each block once) */
struct ds_cuda_keeper {
	const struct ds_rng *g;
	uint64_t blk;
	uint32_t r[4];
	float p, sc;
	__device__ __forceinline__ void init(const struct ds_rng *gg, float pp, float scc)
	{
		g = gg;
		blk = ~(uint64_t)0;
		p = pp;
		sc = scc;
	}
	__device__ __forceinline__ float at(uint64_t e)
	{
		if (e >> 2 != blk) {
			blk = e >> 2;
			ds_rng_draw4(g, blk, r);
		}
		return ds_dropout_keep(r[e & 3], p) ? sc : 0.0f;
	}
};

/* the keep factor of element e of stream g: 1/(1-p) or 0 */
static __device__ __forceinline__ float ds_cuda_keep(const struct ds_rng *g, uint64_t e, float p, float sc)
{
	uint32_t r[4];
	ds_rng_draw4(g, e >> 2, r);
	return ds_dropout_keep(r[e & 3], p) ? sc : 0.0f;
}

#endif
