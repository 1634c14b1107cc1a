/* gpt_cuda.cu - CUDA versions of the GPT element-wise kernels (gpt_cuda.h):
 * activations and the padded-vocabulary cross-entropy, on the shared math
 * of kernels/common/gpt_math.h.  One block per row for the reductions. */
#include <cuda_runtime.h>
#include <math.h>

#include "common/gpt_math.h"
#include "cuda/gpt_cuda.h"

static int launch_status(void)
{
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? 0 : (int)e;
}

static __global__ void act_forward_k(float *out, const float *inp, int64_t N, int F, int act)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= N * F)
		return;
	int64_t n = i / F;
	int f = (int)(i % F);
	if (act == 0) {
		out[i] = ds_gelu(inp[i]);
		return;
	}
	const float *a = inp + n * 2 * F;
	float g = act == 1 ? ds_gelu(a[f]) : ds_silu(a[f]);
	out[i] = g * a[F + f];
}

static __global__ void act_backward_k(float *dinp, const float *dout, const float *inp, int64_t N, int F, int act)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= N * F)
		return;
	int64_t n = i / F;
	int f = (int)(i % F);
	float g = dout[i];
	if (act == 0) {
		dinp[i] = ds_gelu_grad(inp[i]) * g;
		return;
	}
	const float *a = inp + n * 2 * F;
	float *d = dinp + n * 2 * F;
	float x = a[f], b = a[F + f];
	if (act == 1) {
		d[f] = ds_gelu_grad(x) * b * g;
		d[F + f] = ds_gelu(x) * g;
	} else {
		d[f] = ds_silu_grad(x) * b * g;
		d[F + f] = ds_silu(x) * g;
	}
}

/* block reduction helpers: blockDim.x is a power of two <= 1024 */
static __device__ float block_max(float v, float *sh)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
		__syncthreads();
	}
	float r = sh[0];
	__syncthreads();
	return r;
}

static __device__ float block_sum(float v, float *sh)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			sh[threadIdx.x] += sh[threadIdx.x + s];
		__syncthreads();
	}
	float r = sh[0];
	__syncthreads();
	return r;
}

static __global__ void xent_forward_k(float *lse, float *loss_rows, const float *logits, const int32_t *targets,
			       int V, int Vp)
{
	extern __shared__ float sh[];
	int64_t n = blockIdx.x;
	const float *l = logits + n * Vp;
	float mx = -INFINITY;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		mx = fmaxf(mx, l[i]);
	mx = block_max(mx, sh);
	float s = 0;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		s += ds_expf(l[i] - mx);
	s = block_sum(s, sh);
	if (threadIdx.x == 0) {
		float z = mx + logf(s);
		lse[n] = z;
		loss_rows[n] = z - l[targets[n]];
	}
}

static __global__ void xent_backward_k(float *logits, const float *lse, const int32_t *targets, int V, int Vp,
				float dscale)
{
	int64_t n = blockIdx.x;
	float *l = logits + n * Vp;
	const float z = lse[n];
	const int t = targets[n];
	for (int i = threadIdx.x; i < Vp; i += blockDim.x)
		l[i] = i < V ? dscale * (ds_expf(l[i] - z) - (i == t ? 1.0f : 0.0f)) : 0.0f;
}

extern "C" int ds_kernel_cuda_act_forward(float *out, const float *inp, int64_t N, int F, int act, void *stream)
{
	int64_t n = N * F;
	if (n == 0)
		return 0;
	act_forward_k<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(out, inp, N, F, act);
	return launch_status();
}

extern "C" int ds_kernel_cuda_act_backward(float *dinp, const float *dout, const float *inp, int64_t N, int F,
					   int act, void *stream)
{
	int64_t n = N * F;
	if (n == 0)
		return 0;
	act_backward_k<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(dinp, dout, inp, N, F, act);
	return launch_status();
}

extern "C" int ds_kernel_cuda_xent_forward(float *lse, float *loss_rows, const float *logits,
					   const int32_t *targets, int64_t N, int V, int Vp, void *stream)
{
	if (N == 0)
		return 0;
	xent_forward_k<<<(unsigned)N, 256, 256 * sizeof(float), (cudaStream_t)stream>>>(lse, loss_rows, logits,
											 targets, V, Vp);
	return launch_status();
}

extern "C" int ds_kernel_cuda_xent_backward(float *logits, const float *lse, const int32_t *targets, int64_t N,
					    int V, int Vp, float dscale, void *stream)
{
	if (N == 0)
		return 0;
	xent_backward_k<<<(unsigned)N, 256, 0, (cudaStream_t)stream>>>(logits, lse, targets, V, Vp, dscale);
	return launch_status();
}
