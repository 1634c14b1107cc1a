/* gpu_count_emu.c - ds_gpu_count() (lib/app/gpu.h) over the host emulation
 * of CUDA, for tests/unit/ds-train-emu: linked before libds, it takes the
 * place of lib/app/gpu_count_cuda.c, which asks the real CUDA runtime, so
 * that ds-train's device choice sees the emulation's one device
 * (rt_cuda.cu compiled with -DDS_CUDA_EMU); and it turns on the
 * emulation's check that kernels are handed only device or pinned memory
 * (ds_emu_strict_args), which holds for ds-train as a whole, not for the
 * unit tests that pass kernels their own host buffers.  Test-only code.
 */
#include "config.h"

#include <stdio.h>

#include "app/gpu.h"
#include "cuda/ds_cuda.h"
#include "cuda_emu_api.h"

__attribute__((constructor)) static void strict(void) { ds_emu_strict_args(1); }

int ds_gpu_count(int *n, char *why, size_t why_len)
{
	int c = 0, rc = ds_cuda_device_count(&c);

	*n = 0;
	if (rc || c < 1) {
		snprintf(why, why_len, "emulated cudaGetDeviceCount: %s", rc ? ds_cuda_strerror(rc) : "no device");
		return 0;
	}
	*n = c;
	return 0;
}
