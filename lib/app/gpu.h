/* gpu.h - which CUDA devices this process can use, and the CUDA/NCCL
 * versions it was built against.
 *
 * Built from gpu_cuda.c with --with-cuda, else from gpu_stub.c, which
 * returns DS_ENOTSUP; callers never #ifdef.  Only gpu_cuda.c includes CUDA
 * headers (STYLE rule 17).
 */
#ifndef DS_APP_GPU_H
#define DS_APP_GPU_H

#include <stddef.h>

#include "util/err.h"

#define DS_GPU_MAX 16

struct ds_gpu_dev {
	char name[96];                /* "NVIDIA H100 80GB HBM3" */
	unsigned long long mem_bytes; /* total device memory */
	int cc_major, cc_minor;       /* compute capability */
};

struct ds_gpu_info {
	int runtime_version;  /* cudaRuntimeGetVersion: 13000 = 13.0 */
	int driver_version;   /* cudaDriverGetVersion: 0 when no driver */
	int nccl_version;     /* ncclGetVersion: 22809 = 2.28.9 */
	int cublas_version;   /* cublasGetProperty: 130100 = 13.1.0 */
	int count;            /* usable devices (at most DS_GPU_MAX listed) */
	char why_none[160];   /* when count is 0: the CUDA error that said so */
	struct ds_gpu_dev dev[DS_GPU_MAX];
};

/* Fill info.  Returns 0, also with no device: any CUDA error from the device
 * query counts as "no device" and is explained in why_none (without a driver
 * cudaGetDeviceCount fails with error 35, not 100).  DS_ENOTSUP when built
 * without CUDA: "built without CUDA; reconfigure --with-cuda". */
int ds_gpu_query(struct ds_gpu_info *info, struct ds_err *err);

/* How many CUDA devices answer (*n, 0 with the CUDA error in why when
 * none), through the runtime only: what ds-train's device choice needs,
 * without loading cuBLAS and NCCL as ds_gpu_query does.  Returns 0;
 * DS_ENOTSUP (*n 0, why "built without CUDA") when built without CUDA.
 * why is not touched when a device answers. */
int ds_gpu_count(int *n, char *why, size_t why_len);

/* Whether each part works on device 0 (ds-report's cuda and nccl rows). */
struct ds_gpu_usable {
	int cuda, cublas, nccl;  /* 1: usable */
	char cuda_why[192];      /* when not: the call that failed and CUDA's words */
	char cublas_why[192];
	char nccl_why[192];
};

/* Try each part on device 0 of info: CUDA (an allocation, a memset, a
 * synchronize), cuBLAS (a handle), NCCL (a one-device communicator).  It
 * takes up to a few seconds and a little device memory, so only ds-report
 * calls it.  Returns 0, also with no device (none usable, why_none as the
 * reason); DS_ENOTSUP when built without CUDA. */
int ds_gpu_probe(const struct ds_gpu_info *info, struct ds_gpu_usable *u, struct ds_err *err);

#endif
