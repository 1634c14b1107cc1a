/* cuda_emu_api.h - the C side of the CUDA emulation (cuda_emu.h): what a
 * test program written in C needs to drive kernels/cuda's launchers when
 * they were compiled by g++ with -DDS_CUDA_EMU.  Device memory there
 * (cudaMalloc, ds_cuda_malloc) is unreachable from host code outside the
 * emulated calls (cuda_emu.h); kernels also read and write host memory, so
 * a test may pass malloc'ed buffers to the launchers.
 */
#ifndef DS_TESTS_CUDA_EMU_API_H
#define DS_TESTS_CUDA_EMU_API_H

#ifdef __cplusplus
extern "C" {
#endif

/* The order in which the emulator runs the blocks of a grid and, between
 * two barriers, the threads of a block.  A kernel whose result depends on
 * it has a race (a missing __syncthreads or __syncwarp, blocks that read
 * each other's output): run each kernel in more than one order. */
enum ds_emu_order {
	DS_EMU_FORWARD = 0,   /* block 0 first; thread 0 first */
	DS_EMU_REVERSE,       /* last block first; last thread first */
	DS_EMU_SHUFFLE        /* a seeded permutation, new for every pass */
};
void ds_emu_set_order(enum ds_emu_order o);

/* Kernels launched, and launches refused (bad configuration) or stopped
 * (barrier divergence, deadlock, a warp operation naming an exited or
 * inactive lane) since the program started; each of those printed one
 * line to stderr naming the kernel and the block. */
long ds_emu_launches(void);
long ds_emu_failures(void);

/* on: every pointer argument of a kernel launch must point into device
 * memory (cudaMalloc) or pinned host memory (cudaMallocHost), else the
 * emulation says which kernel and argument and aborts, as a GPU would
 * fault on a pageable host address.  Off by default: the unit tests hand
 * kernels their own malloc'ed buffers; tests/unit/ds-train-emu turns it
 * on. */
void ds_emu_strict_args(int on);

/* The cuBLAS emulation: the compute type of the last GEMM call (the value
 * of cublasComputeType_t), and GEMM calls made. */
int ds_emu_blas_last_compute(void);
long ds_emu_blas_calls(void);

#ifdef __cplusplus
}
#endif

#endif
