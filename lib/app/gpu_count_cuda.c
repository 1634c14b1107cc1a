/* gpu_count_cuda.c - ds_gpu_count() through the CUDA runtime alone (see
 * gpu.h).
 *
 * A file of its own so that a tool which only asks how many devices answer
 * (ds-train choosing its compute device) links the runtime and not
 * gpu_cuda.c's cuBLAS and NCCL: loading cuBLAS costs every process about
 * 150 MB of resident memory, on a machine with or without a GPU.
 */
#include "config.h"
#include <stdio.h>
#include <cuda_runtime.h>
#include "app/gpu.h"

int ds_gpu_count(int *n, char *why, size_t why_len)
{
	int c = 0;
	cudaError_t ce = cudaGetDeviceCount(&c);

	*n = 0;
	if (ce != cudaSuccess) {
		snprintf(why, why_len, "cudaGetDeviceCount: %s (error %d)", cudaGetErrorString(ce), (int)ce);
		(void)cudaGetLastError(); /* clear the sticky error for later callers */
		return 0;
	}
	if (c == 0) {
		snprintf(why, why_len, "cudaGetDeviceCount: no CUDA device");
		return 0;
	}
	*n = c;
	return 0;
}
