/* gpu_cuda.c - ds_gpu_query() through the CUDA runtime and NCCL (see gpu.h).
 *
 * The only wrapper that sees cuda_runtime.h here: CUDA status codes become
 * a sentence in why_none.  Nothing is allocated on a device.
 */
#include "config.h"
#include <stdio.h>
#include <string.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" /* nccl.h declares f() */
#include <cuda_runtime.h>
#include <nccl.h>
#pragma GCC diagnostic pop
#include "app/gpu.h"

int ds_gpu_query(struct ds_gpu_info *info, struct ds_err *err)
{
	cudaError_t ce;
	int n = 0;

	memset(info, 0, sizeof *info);
	if (cudaRuntimeGetVersion(&info->runtime_version) != cudaSuccess)
		info->runtime_version = 0;
	if (cudaDriverGetVersion(&info->driver_version) != cudaSuccess)
		info->driver_version = 0;
	if (ncclGetVersion(&info->nccl_version) != ncclSuccess)
		info->nccl_version = 0;
	/* Without a driver this is error 35 (insufficient driver) and n is left
	 * alone, so n starts at 0 and any error means "no device". */
	ce = cudaGetDeviceCount(&n);
	if (ce != cudaSuccess) {
		snprintf(info->why_none, sizeof info->why_none, "cudaGetDeviceCount: %s (error %d)",
			 cudaGetErrorString(ce), (int)ce);
		(void)cudaGetLastError(); /* clear the sticky error for later callers */
		return 0;
	}
	if (n == 0) {
		snprintf(info->why_none, sizeof info->why_none, "cudaGetDeviceCount: no CUDA device");
		return 0;
	}
	info->count = n;
	for (int i = 0; i < n && i < DS_GPU_MAX; i++) {
		struct cudaDeviceProp p;
		if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
			continue;
		snprintf(info->dev[i].name, sizeof info->dev[i].name, "%.95s", p.name);
		info->dev[i].mem_bytes = p.totalGlobalMem;
		info->dev[i].cc_major = p.major;
		info->dev[i].cc_minor = p.minor;
	}
	return 0;
}
