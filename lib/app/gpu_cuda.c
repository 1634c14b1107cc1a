/* gpu_cuda.c - ds_gpu_query() and ds_gpu_probe() through the CUDA runtime,
 * cuBLAS and NCCL (see gpu.h).
 *
 * The only wrapper of lib/app that sees their headers: status codes become a
 * sentence in why_none and the usable table.  The query allocates nothing on
 * a device; the probe (ds-report only) does, briefly.
 */
#include "config.h"
#include <stdio.h>
#include <string.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" /* nccl.h declares f() */
#include <cuda_runtime.h>
#include <cublas_v2.h>
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
	{
		int ma = 0, mi = 0, pa = 0;
		if (cublasGetProperty(MAJOR_VERSION, &ma) == CUBLAS_STATUS_SUCCESS &&
		    cublasGetProperty(MINOR_VERSION, &mi) == CUBLAS_STATUS_SUCCESS &&
		    cublasGetProperty(PATCH_LEVEL, &pa) == CUBLAS_STATUS_SUCCESS)
			info->cublas_version = ma * 10000 + mi * 100 + pa;
	}
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

/* CUDA on device 0: a context, an allocation, a memset, a synchronize. */
static int probe_cuda(struct ds_gpu_usable *u)
{
	void *p = NULL;
	cudaError_t ce = cudaSetDevice(0);
	const char *what = "cudaSetDevice(0)";

	if (ce == cudaSuccess && (ce = cudaMalloc(&p, 1 << 20)) != cudaSuccess)
		what = "cudaMalloc of 1 MiB on device 0";
	if (ce == cudaSuccess && (ce = cudaMemset(p, 0, 1 << 20)) != cudaSuccess)
		what = "cudaMemset on device 0";
	if (ce == cudaSuccess && (ce = cudaDeviceSynchronize()) != cudaSuccess)
		what = "cudaDeviceSynchronize on device 0";
	if (p)
		cudaFree(p);
	if (ce != cudaSuccess) {
		snprintf(u->cuda_why, sizeof u->cuda_why, "%s: %s (error %d)", what, cudaGetErrorString(ce), (int)ce);
		(void)cudaGetLastError();
		return 0;
	}
	return 1;
}

int ds_gpu_probe(const struct ds_gpu_info *info, struct ds_gpu_usable *u, struct ds_err *err)
{
	memset(u, 0, sizeof *u);
	if (info->count == 0) {
		snprintf(u->cuda_why, sizeof u->cuda_why, "%s", info->why_none);
		snprintf(u->cublas_why, sizeof u->cublas_why, "%s", info->why_none);
		snprintf(u->nccl_why, sizeof u->nccl_why, "%s", info->why_none);
		return 0;
	}
	u->cuda = probe_cuda(u);
	if (!u->cuda) {
		snprintf(u->cublas_why, sizeof u->cublas_why, "CUDA is not usable: %.160s", u->cuda_why);
		snprintf(u->nccl_why, sizeof u->nccl_why, "CUDA is not usable: %.160s", u->cuda_why);
		return 0;
	}
	{
		cublasHandle_t h;
		cublasStatus_t st = cublasCreate(&h);
		if (st == CUBLAS_STATUS_SUCCESS) {
			cublasDestroy(h);
			u->cublas = 1;
		} else {
			snprintf(u->cublas_why, sizeof u->cublas_why, "cublasCreate on device 0: %s",
				 cublasGetStatusString(st));
		}
	}
	{
		ncclComm_t comm;
		int dev = 0;
		ncclResult_t nr = ncclCommInitAll(&comm, 1, &dev);
		if (nr == ncclSuccess) {
			ncclCommDestroy(comm);
			u->nccl = 1;
		} else {
			snprintf(u->nccl_why, sizeof u->nccl_why, "ncclCommInitAll on device 0: %s",
				 ncclGetErrorString(nr));
		}
	}
	return 0;
}
