/* ds_cuda.h - what every kernels/cuda launcher shares: its return value and
 * how to name it, the element types, and scratch memory.  The launchers
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

/* cuBLAS statuses come back as DS_CUDA_EBLAS + status. */
#define DS_CUDA_EBLAS 100000

/* The text of a launcher's return value: "no error", cudaGetErrorString's,
 * or "cuBLAS: " and cublasGetStatusString's (static). */
const char *ds_cuda_strerror(int rc);

#ifdef __cplusplus
}
#endif

#endif
