/* test_kernels_cuda_emu.c - kernels/cuda's launchers against the CPU, on
 * the host: the .cu sources compiled by g++ over tests/unit/cuda_emu.h
 * (fibers for threads, real barriers, checked launch limits), every case in
 * three thread and block orders so that a race shows as a wrong result,
 * on emulated device memory that host code cannot touch.
 * This checks the kernels' indexing, reductions and float math, not the
 * hardware: test_kernels_cuda runs the same cases on a GPU.
 */
#include "unit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ds_cuda.h"
#include "cuda_emu_api.h"

/* emulated device memory, as test_kernels_cuda allocates and copies it on
 * a GPU: the test's own host code cannot reach it either (cuda_emu.h) */
static void *dmalloc(size_t n)
{
	void *p = NULL;
	assert_int_equal(ds_cuda_malloc(&p, n ? n : 1), 0);
	assert_int_equal(ds_cuda_memset(p, 0xff, n, NULL), 0);   /* NaN bytes, as uninitialised device memory might hold */
	return p;
}
static void dfree(void *p) { assert_int_equal(ds_cuda_free(p), 0); }
static void h2d(void *d, const void *h, size_t n) { assert_int_equal(ds_cuda_memcpy(d, h, n, NULL), 0); }
static void d2h(void *h, const void *d, size_t n) { assert_int_equal(ds_cuda_memcpy(h, d, n, NULL), 0); }
static void dsync(void) {}

#define NORDERS 3
static void set_order(int i) { ds_emu_set_order((enum ds_emu_order)i); }

#include "kernels_cuda_cases.h"

/* the emulator itself: a barrier after an early exit, a deadlock and a
 * launch over the limits are reported, not run */
#include "emu_selftest.h"

int main(void)
{
	const struct CMUnitTest tests[] = {
		DS_CUDA_GPT_CASES,
		DS_CUDA_FLAT_CASES,
		DS_CUDA_GEMM_CASES,
		DS_CUDA_ATTN_CASES,
		DS_EMU_SELF_CASES,
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	fprintf(stderr, "# %ld emulated launches, %ld refused or stopped\n", ds_emu_launches(), ds_emu_failures());
	return rc;
}
