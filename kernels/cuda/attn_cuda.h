/* attn_cuda.h - fused causal self-attention on the GPU (flash-attention
 * style: online softmax over key tiles, no (T,T) matrix in memory), forward
 * and backward, for qkv in fp32, fp16 or bf16 and head sizes up to 128.
 * The math is lib/model/gpt.c's attention: scores scale * q k^T with
 * scale = 1/sqrtf(hs), a causal softmax with ds_expf, attention dropout on
 * the probabilities keyed exactly as ds_kernel_attention_dropout (stream
 * gs[b], element h*T*T + t*T + t2), y = P' v; the backward is FA2's with
 * D = rowsum(dy * y), dq and dk, dv in two kernels so that nothing is
 * added by atomics (the same bits every run).  Memory beyond q, k, v and y:
 * the (B,NH,T) log-sum-exp the backward reads, and (B,NH,T) floats of
 * scratch during the backward.  Return values: ds_cuda.h.
 *
 * Implementations: DS_ATTN_FMA is plain CUDA (fp32 FMAs, every element
 * type); DS_ATTN_TC runs the two products of each tile on the tensor cores
 * (wmma, 16x16x16 bf16/fp16 with fp32 accumulation; 16-bit types, head
 * sizes a multiple of 16); DS_ATTN_AUTO picks TC where it applies.
 */
#ifndef DS_KERNELS_ATTN_CUDA_H
#define DS_KERNELS_ATTN_CUDA_H

#include "cuda/ds_cuda.h"
#include "util/half.h"
#include "util/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ds_attn_impl { DS_ATTN_AUTO = 0, DS_ATTN_FMA, DS_ATTN_TC };

/* The implementation auto picks for (dt, hs); whether impl can run (dt,
 * hs): 1 or 0. */
enum ds_attn_impl ds_cuda_attention_pick(enum ds_half_kind dt, int hs);
int ds_cuda_attention_supported(enum ds_attn_impl impl, enum ds_half_kind dt, int hs);

/* y (B,T,C) writes softmax(scale q k^T) v per (b, head), with dropout p
 * (p <= 0: none; gs: B host streams, read at the call) on the
 * probabilities; lse (B,NH,T) writes each row's log-sum-exp of the scaled
 * scores.  qkv (B,T,3C) = [q | k | v] per row, heads NH, hs = C/NH <= 128;
 * qkv and y of type dt.  DS_CUDA's cudaErrorInvalidValue for a shape or
 * implementation it cannot run. */
int ds_cuda_attention_forward(void *y, float *lse, const void *qkv, int B, int T, int C, int NH, float p,
			      const struct ds_rng *gs, enum ds_half_kind dt, enum ds_attn_impl impl, void *stream);

/* dqkv (B,T,3C) writes the gradient of q, k, v from dy (B,T,C), given the
 * forward's qkv, y and lse and the same p and streams. */
int ds_cuda_attention_backward(void *dqkv, const void *dy, const void *qkv, const void *y, const float *lse, int B,
			       int T, int C, int NH, float p, const struct ds_rng *gs, enum ds_half_kind dt,
			       enum ds_attn_impl impl, void *stream);

/* lib/model/gpt.c's attention unfused, on the device, step for step: the
 * per-(sample, head) products through b in fp32 (mm DS_HALF_NONE) or under
 * the CPU's bf16 contract (mm: ds_cuda_gemm_rounded), the causal softmax,
 * attention dropout, and with `half` set the rounding of the probabilities
 * and their gradients to 16 bits where gpt.c rounds them.  Forward: att
 * (B,NH,T,T) writes the probabilities (kept for backward), attd (B,NH,T,T)
 * scratch when p > 0, y (B,T,C) writes.  Backward: dqkv (B,T,3C) writes
 * from dy (B,T,C), with the forward's att; attd and datt (B,NH,T,T)
 * scratch.  All fp32 buffers.  The path that matches the CPU to float
 * rounding (fp32 runs' 1e-5 check); it keeps what the CPU keeps per head. */
struct ds_cuda_blas;
int ds_cuda_attention_unfused_forward(struct ds_cuda_blas *b, enum ds_half_kind mm, enum ds_half_kind half, float *y,
				      float *att, float *attd, const float *qkv, int B, int T, int C, int NH, float p,
				      const struct ds_rng *gs, void *stream);
int ds_cuda_attention_unfused_backward(struct ds_cuda_blas *b, enum ds_half_kind mm, enum ds_half_kind half,
				       float *dqkv, const float *dy, const float *qkv, const float *att, float *attd,
				       float *datt, int B, int T, int C, int NH, float p, const struct ds_rng *gs,
				       void *stream);

#ifdef __cplusplus
}
#endif

#endif
