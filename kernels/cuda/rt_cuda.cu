/* rt_cuda.cu - the CUDA runtime calls of ds_cuda.h, so that libds code
 * reaches devices, streams, memory and copies without a CUDA header.  Under
 * -DDS_CUDA_EMU (the unit tests) they are tests/unit/cuda_emu.h's host
 * versions: one device, device memory that only the emulated calls can
 * reach, pinned memory from malloc, copies by memmove.
 */
#include "cuda/cuda_port.h"

#include <stdio.h>

extern "C" int ds_cuda_device_count(int *n)
{
	*n = 0;
	return (int)cudaGetDeviceCount(n);
}

extern "C" int ds_cuda_set_device(int dev) { return (int)cudaSetDevice(dev); }

extern "C" int ds_cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
	return (int)cudaMemGetInfo(free_bytes, total_bytes);
}

extern "C" int ds_cuda_stream_create(void **stream)
{
	cudaStream_t s = NULL;
	cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	*stream = e == cudaSuccess ? (void *)s : NULL;
	return (int)e;
}

extern "C" int ds_cuda_stream_destroy(void *stream)
{
	return stream ? (int)cudaStreamDestroy((cudaStream_t)stream) : 0;
}

extern "C" int ds_cuda_stream_sync(void *stream) { return (int)cudaStreamSynchronize((cudaStream_t)stream); }

extern "C" int ds_cuda_malloc(void **p, size_t bytes)
{
	*p = NULL;
	cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
	if (e != cudaSuccess)
		*p = NULL;
	return (int)e;
}

extern "C" int ds_cuda_free(void *p) { return p ? (int)cudaFree(p) : 0; }

extern "C" int ds_cuda_host_alloc(void **p, size_t bytes)
{
	*p = NULL;
	cudaError_t e = cudaMallocHost(p, bytes ? bytes : 1);
	if (e != cudaSuccess)
		*p = NULL;
	return (int)e;
}

extern "C" int ds_cuda_host_free(void *p) { return p ? (int)cudaFreeHost(p) : 0; }

extern "C" int ds_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream)
{
	if (!bytes)
		return 0;
	return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
}

extern "C" int ds_cuda_memset(void *p, int value, size_t bytes, void *stream)
{
	if (!bytes)
		return 0;
	return (int)cudaMemsetAsync(p, value, bytes, (cudaStream_t)stream);
}

extern "C" int ds_cuda_device_pci_id(int dev, char *buf, int n)
{
	if (n > 0)
		buf[0] = '\0';
#ifdef DS_CUDA_EMU
	/* the emulation's one device: every process of a host shares it, as
	 * ranks on one GPU do */
	if (n > 0)
		snprintf(buf, (size_t)n, "emu:%d", dev);
	return 0;
#else
	return (int)cudaDeviceGetPCIBusId(buf, n, dev);
#endif
}
