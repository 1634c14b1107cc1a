/* gpt_cuda.h - CUDA launchers of the GPT element-wise kernels (built only
 * when configure found nvcc: HAVE_CUDA).  The per-element math is
 * kernels/common/gpt_math.h, the same inline functions the CPU kernels use,
 * so both backends round alike.  All pointers are device pointers; every
 * launcher runs on `stream` (a cudaStream_t, NULL for the default stream)
 * and returns 0 or the cudaError_t of the launch.  Nothing calls them yet:
 * the CUDA engine (cuBLAS for the matmuls) is a later issue.
 */
#ifndef DS_KERNELS_GPT_CUDA_H
#define DS_KERNELS_GPT_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* act 0 gelu (tanh): out (N,F) = gelu(inp (N,F)); 1 geglu, 2 swiglu:
 * inp (N,2F) = [a | b], out = act(a) * b.  Same contract as ds_kernel_act_*. */
int ds_kernel_cuda_act_forward(float *out, const float *inp, int64_t N, int F, int act, void *stream);
int ds_kernel_cuda_act_backward(float *dinp, const float *dout, const float *inp, int64_t N, int F,
				int act, void *stream);

/* Cross-entropy over the first V of Vp columns: lse (N) writes, and
 * loss_rows (N) writes lse - logit[target].  ds_kernel_xent_forward's math. */
int ds_kernel_cuda_xent_forward(float *lse, float *loss_rows, const float *logits,
				const int32_t *targets, int64_t N, int V, int Vp, void *stream);
/* In place: logits become dscale * (softmax - onehot), padding columns 0. */
int ds_kernel_cuda_xent_backward(float *logits, const float *lse, const int32_t *targets, int64_t N,
				 int V, int Vp, float dscale, void *stream);

#ifdef __cplusplus
}
#endif

#endif
