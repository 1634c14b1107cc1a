/* gpt_cuda.h - CUDA launchers of the GPT kernels: one for every CPU kernel
 * of kernels/cpu/gpt_kernels.h, with the same arguments in the same order
 * and the same contract (shapes, "writes" versus "+=", what p <= 0 or a
 * NULL tensor means), plus a trailing stream.  All pointers are device
 * pointers but the dropout streams (struct ds_rng, read on the host at the
 * call).  Built only with CUDA (HAVE_CUDA); see ds_cuda.h for the return
 * value.
 *
 * How close each is to the CPU kernel (tests/unit/test_kernels_cuda*.c):
 * the same bits where the per-element math is the same (embedding forward
 * and backward, bias fill, residual add, rotary, dropout and its masks,
 * activations, the cross-entropy gradient given the same lse); a few ulps
 * where only the order of a sum differs (norms, softmax, column sums,
 * log-sum-exp).  Every sum runs in a fixed order: results repeat bit for
 * bit from run to run (no float atomics).
 */
#ifndef DS_KERNELS_GPT_CUDA_H
#define DS_KERNELS_GPT_CUDA_H

#include <stdint.h>

#include "cuda/ds_cuda.h"
#include "util/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dropout in place on x[0..n) with stream *g, as ds_kernel_dropout.  The
 * _rows form does B samples of n elements at once, sample b with gs[b]
 * (the model's dropout of a (B,T,C) tensor). */
int ds_kernel_cuda_dropout(float *x, int64_t n, const struct ds_rng *g, float p, void *stream);
int ds_kernel_cuda_dropout_rows(float *x, int B, int64_t n, const struct ds_rng *gs, float p, void *stream);

/* out (N,C) writes wte[tok] + pos[t] (pos NULL: wte[tok]). */
int ds_kernel_cuda_embed_forward(float *out, const int32_t *tok, const float *wte, const float *pos, int B, int T,
				 int C, void *stream);
/* dwte (Vp,C) += dout rows by token, dpos (T,C) += sum over b (NULL: skip).
 * Each token's rows are added in row order by one owner, as the CPU
 * kernel adds them: the same bits. */
int ds_kernel_cuda_embed_backward(float *dwte, float *dpos, const float *dout, const int32_t *tok, int B, int T,
				  int C, void *stream);

/* LayerNorm: out (N,C), mean/rstd (N) write (statistics in double). */
int ds_kernel_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
				     const float *b, int64_t N, int C, float eps, void *stream);
/* dinp (N,C) +=, dw, db (C) +=. */
int ds_kernel_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
				      const float *w, const float *mean, const float *rstd, int64_t N, int C,
				      void *stream);

/* RMSNorm as GPT-NeoX: out = w * x / (sqrt(mean(x^2)) + eps); rms, inv (N) write. */
int ds_kernel_cuda_rmsnorm_forward(float *out, float *rms, float *inv, const float *inp, const float *w, int64_t N,
				   int C, float eps, void *stream);
/* dinp (N,C) +=, dw (C) +=. */
int ds_kernel_cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
				    const float *rms, const float *inv, int64_t N, int C, void *stream);

/* out (N,OC) writes: every row = b, or zeros when b is NULL. */
int ds_kernel_cuda_bias_fill(float *out, const float *b, int64_t N, int OC, void *stream);
/* db (OC) += column sums of dout (N,OC). */
int ds_kernel_cuda_bias_backward(float *db, const float *dout, int64_t N, int OC, void *stream);

/* out[0..n) += a[0..n). */
int ds_kernel_cuda_add_inplace(float *out, const float *a, int64_t n, void *stream);

/* NeoX rotary in place on q and k of qkv (B,T,3C); cs, sn (T, rd/2) device
 * tables (the CPU's, computed in double on the host); inverse: -angle. */
int ds_kernel_cuda_rotary(float *qkv, const float *cs, const float *sn, int B, int T, int C, int NH, int rd,
			  int inverse, void *stream);

/* Causal softmax of att (B,NH,T,T) in place, zeros above the diagonal. */
int ds_kernel_cuda_causal_softmax_forward(float *att, int B, int NH, int T, void *stream);
/* attd (B,NH,T,T) writes att times the keep mask of gs[b] at element
 * h*T*T + t*T + t2 (p > 0). */
int ds_kernel_cuda_attention_dropout(float *attd, const float *att, int B, int NH, int T, float p,
				     const struct ds_rng *gs, void *stream);
/* datt in place: mask (p > 0), then scale * softmax backward with att. */
int ds_kernel_cuda_causal_softmax_backward(float *datt, const float *att, int B, int NH, int T, float scale, float p,
					   const struct ds_rng *gs, void *stream);

/* act (gpt_math.h's codes) 0 gelu (tanh), 3 gelu_exact (erf): out (N,F) =
 * gelu(inp (N,F)); 1 geglu, 4 geglu_exact, 2 swiglu: inp (N,2F) = [a | b],
 * out = act(a) * b.  dinp (N,F or 2F) writes. */
int ds_kernel_cuda_act_forward(float *out, const float *inp, int64_t N, int F, int act, void *stream);
int ds_kernel_cuda_act_backward(float *dinp, const float *dout, const float *inp, int64_t N, int F, int act,
				void *stream);

/* Cross-entropy over the first V of Vp columns: lse (N) writes the
 * log-sum-exp (the CPU's: float max and sum, log in double), losses (N,
 * double; NULL: skip) writes (double)lse - (double)logit[target] (the
 * terms ds_kernel_xent_forward adds up; ds_cuda_sum adds them here). */
int ds_kernel_cuda_xent_forward(float *lse, double *losses, const float *logits, const int32_t *targets, int64_t N,
				int V, int Vp, void *stream);
/* In place: logits become dscale * (softmax - onehot), padding columns 0. */
int ds_kernel_cuda_xent_backward(float *logits, const float *lse, const int32_t *targets, int64_t N, int V, int Vp,
				 float dscale, void *stream);

#ifdef __cplusplus
}
#endif

#endif
