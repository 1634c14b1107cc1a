/* test_kernels_cuda.c - kernels/cuda's launchers against the CPU on a real
 * GPU: the cases of kernels_cuda_cases.h (which test_kernels_cuda_emu also
 * runs on the host emulation), on device memory.  Built with CUDA; skips
 * when no device answers.
 */
#include "unit.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *dmalloc(size_t n)
{
	void *d = NULL;
	assert_int_equal(cudaMalloc(&d, n ? n : 1), cudaSuccess);
	assert_int_equal(cudaMemset(d, 0xff, n), cudaSuccess);   /* NaN bytes */
	return d;
}
static void dfree(void *p) { cudaFree(p); }
static void h2d(void *d, const void *h, size_t n) { assert_int_equal(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), cudaSuccess); }
static void d2h(void *h, const void *d, size_t n) { assert_int_equal(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), cudaSuccess); }
static void dsync(void) { assert_int_equal(cudaDeviceSynchronize(), cudaSuccess); }

#define NORDERS 1
static void set_order(int i) { (void)i; }

#include "kernels_cuda_cases.h"

int main(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		printf("1..0 # SKIP no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return 0;
	}
	struct cudaDeviceProp p;
	if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
		printf("# device 0: %s, sm_%d%d\n", p.name, p.major, p.minor);
	const struct CMUnitTest tests[] = {
		DS_CUDA_GPT_CASES,
		DS_CUDA_FLAT_CASES,
		DS_CUDA_GEMM_CASES,
		DS_CUDA_ATTN_CASES,
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
