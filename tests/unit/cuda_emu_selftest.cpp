/* cuda_emu_selftest.cpp - kernels that show what the emulator (cuda_emu.h)
 * catches and computes, for test_kernels_cuda_emu's own cases
 * (emu_selftest.h): warp shuffles and ballots, a race that only some
 * thread orders expose, a barrier after an early exit, a deadlock, a
 * launch over the limits. */
#include "cuda_emu.h"

extern "C" {
#include "emu_selftest_api.h"
}

/* out[w] = sum of lane values of warp w through __shfl_xor_sync; bal[w] =
 * ballot of odd lanes */
static __global__ void shfl_k(float *out, unsigned *bal)
{
	float v = (float)threadIdx.x;
	for (int m = 16; m > 0; m >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, m);
	unsigned b = __ballot_sync(0xffffffffu, threadIdx.x & 1);
	float d = __shfl_down_sync(0xffffffffu, (float)threadIdx.x, 1);
	if ((threadIdx.x & 31) == 0) {
		out[threadIdx.x / 32] = v;
		bal[threadIdx.x / 32] = b;
		out[2 + threadIdx.x / 32] = d;
	}
}

int ds_emu_selftest_shfl(float out[4], unsigned bal[2])
{
	DS_CUDA_LAUNCH(shfl_k, 1, 64, 0, 0, out, bal);
	return (int)cudaGetLastError();
}

/* thread i writes sh[i], then (without a barrier) reads sh[i+1] */
static __global__ void race_k(float *out)
{
	__shared__ float sh[33];
	sh[threadIdx.x] = (float)threadIdx.x;
	sh[32] = -1.0f;
	out[threadIdx.x] = sh[threadIdx.x + 1];
}

int ds_emu_selftest_race(float out[32])
{
	DS_CUDA_LAUNCH(race_k, 1, 32, 0, 0, out);
	return (int)cudaGetLastError();
}

static __global__ void exit_then_sync_k(int *x)
{
	if (threadIdx.x == 3)
		return;
	__syncthreads();
	x[threadIdx.x] = 1;
}

static __global__ void deadlock_k(int *x)
{
	if (threadIdx.x < 16)
		__syncthreads();
	else
		__syncwarp();
	x[threadIdx.x] = 1;
}

int ds_emu_selftest_exit_sync(int *x)
{
	DS_CUDA_LAUNCH(exit_then_sync_k, 1, 64, 0, 0, x);
	return (int)cudaGetLastError();
}

int ds_emu_selftest_deadlock(int *x)
{
	DS_CUDA_LAUNCH(deadlock_k, 1, 64, 0, 0, x);
	return (int)cudaGetLastError();
}

int ds_emu_selftest_limits(int *x)
{
	DS_CUDA_LAUNCH(deadlock_k, 1, 2048, 0, 0, x);
	int a = (int)cudaGetLastError();
	DS_CUDA_LAUNCH(deadlock_k, 1, 64, 64 << 10, 0, x);
	int b = (int)cudaGetLastError();
	return a == cudaErrorInvalidConfiguration && b == cudaErrorInvalidValue ? 0 : -1;
}
