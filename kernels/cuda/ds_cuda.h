/* ds_cuda.h - what every kernels/cuda launcher shares: its return value and
 * how to name it, the element types; and the few CUDA runtime calls (devices,
 * streams, memory, copies) a backend in lib/ makes through kernels/cuda.  The launchers
 * (gpt_cuda.h, flat_cuda.h, gemm_cuda.h, attn_cuda.h) are plain C functions
 * on device pointers: each enqueues its work on `stream` (a cudaStream_t,
 * NULL for the default stream), never synchronises, and returns 0, a
 * positive cudaError_t, or DS_CUDA_EBLAS + a cublasStatus_t.  Nothing here
 * includes a CUDA header, so libds code can call them.
 */
#ifndef DS_KERNELS_DS_CUDA_H
#define DS_KERNELS_DS_CUDA_H

#include "util/half.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of tensors the launchers read and write: enum ds_half_kind
 * of util/half.h, DS_HALF_NONE meaning fp32.  16-bit tensors are uint16_t
 * bit patterns rounded as util/half.h rounds (nearest even). */

/* cuBLAS statuses come back as DS_CUDA_EBLAS + status; DS_CUDA_ENOBLAS:
 * cuBLAS could not be loaded (gemm_cuda.cu resolves it at run time; the
 * text names the library and what to install). */
#define DS_CUDA_EBLAS 100000
#define DS_CUDA_ENOBLAS (DS_CUDA_EBLAS - 1)

/* The text of a launcher's return value: "no error", cudaGetErrorString's,
 * "cuBLAS: " and cublasGetStatusString's, or why cuBLAS could not be
 * loaded (static). */
const char *ds_cuda_strerror(int rc);

/* ---- the CUDA runtime for libds (rt_cuda.cu) ------------------------------
 * The calls a compute backend in lib/ needs, so that only kernels/cuda (and
 * lib/app/gpu_cuda.c) include CUDA headers.  Each returns 0 or the
 * cudaError_t. */

/* Devices this process sees; make dev the calling thread's device. */
int ds_cuda_device_count(int *n);
int ds_cuda_set_device(int dev);
/* Free and total device memory of the current device, bytes. */
int ds_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
/* A stream that does not synchronise with the default stream; destroy
 * accepts NULL; sync waits for everything enqueued on it. */
int ds_cuda_stream_create(void **stream);
int ds_cuda_stream_destroy(void *stream);
int ds_cuda_stream_sync(void *stream);
/* Device memory (*p NULL on failure); free accepts NULL. */
int ds_cuda_malloc(void **p, size_t bytes);
int ds_cuda_free(void *p);
/* Pinned host memory, the fastest to copy from and to; free accepts NULL. */
int ds_cuda_host_alloc(void **p, size_t bytes);
int ds_cuda_host_free(void *p);
/* Copy bytes in any direction (unified addressing tells which) or set
 * them, enqueued on stream: asynchronous unless the host side is pageable
 * memory (then the call returns when the host buffer may be reused). */
int ds_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream);
int ds_cuda_memset(void *p, int value, size_t bytes, void *stream);
/* The PCI bus id of device dev ("0000:3b:00.0"), unique on its host, in
 * buf (n bytes, NUL-terminated; "" on failure): how the communicator
 * tells ranks on one GPU from ranks on their own. */
int ds_cuda_device_pci_id(int dev, char *buf, int n);

#ifdef __cplusplus
}
#endif

#endif
