/* gpt_kernels.h - CPU kernels of the GPT forward and backward passes (all but
 * the matrix products, which lib/model/gpt.c hands to cblas_sgemm).
 *
 * llm.c's conventions: N = B*T rows, C channels, shapes in the comments,
 * forward/backward pairs adjacent with the same argument order.  Backward
 * kernels ACCUMULATE (+=) into parameter gradients and into dinp unless the
 * comment says "writes".  Each kernel runs its own OpenMP loop and calls no
 * BLAS, so BLAS is never called inside a parallel region.
 */
#ifndef DS_KERNELS_GPT_KERNELS_H
#define DS_KERNELS_GPT_KERNELS_H

#include <stdint.h>

#include "util/rng.h"

/* Dropout in place on x[0..n): element i of stream g kept with probability
 * 1-p and scaled by 1/(1-p), else zeroed.  The backward pass is the same
 * call on the gradient.  p <= 0 does nothing. */
void ds_kernel_dropout(float *x, int64_t n, const struct ds_rng *g, float p);

/* out (N,C) writes = wte[tok] + pos[t] (pos (T,C) or NULL), N = B*T. */
void ds_kernel_embed_forward(float *out, const int32_t *tok, const float *wte, const float *pos,
			     int B, int T, int C);
/* dwte (Vp,C) += scatter of dout (N,C) by token; dpos (T,C) += sum over b (NULL: skip). */
void ds_kernel_embed_backward(float *dwte, float *dpos, const float *dout, const int32_t *tok,
			      int B, int T, int C);

/* Vocabulary-parallel embedding (Megatron's VocabParallelEmbedding): this
 * rank holds rows [v0, v0 + rows) of wte as wte_l (rows, C).  out (N,C)
 * writes wte_l[tok - v0] for tokens in that range, zeros for the others
 * (the tensor-parallel sum then completes every row). */
void ds_kernel_vocab_embed_forward(float *out, const int32_t *tok, const float *wte_l, int v0, int rows,
				   int B, int T, int C);
/* out (N,C) += pos[t] (pos (T,C)): the positions, added after that sum. */
void ds_kernel_pos_add(float *out, const float *pos, int B, int T, int C);
/* dwte_l (rows,C) += scatter of dout (N,C) by the tokens in [v0, v0+rows);
 * dpos (T,C) += sum over b (NULL: skip). */
void ds_kernel_vocab_embed_backward(float *dwte_l, float *dpos, const float *dout, const int32_t *tok, int v0,
				    int rows, int B, int T, int C);

/* LayerNorm: out (N,C) writes, mean/rstd (N) writes; w, b (C). */
void ds_kernel_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
				 const float *w, const float *b, int64_t N, int C, float eps);
/* dinp (N,C) +=, dw, db (C) +=. */
void ds_kernel_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
				  const float *inp, const float *w, const float *mean, const float *rstd,
				  int64_t N, int C);

/* RMSNorm as GPT-NeoX: out = w * x / (sqrt(mean(x^2)) + eps).  rms (N) and
 * inv = 1/(rms+eps) (N) write. */
void ds_kernel_rmsnorm_forward(float *out, float *rms, float *inv, const float *inp,
			       const float *w, int64_t N, int C, float eps);
void ds_kernel_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
				const float *w, const float *rms, const float *inv, int64_t N, int C);

/* out (N,OC) writes: every row = b (OC), or zeros when b is NULL. */
void ds_kernel_bias_fill(float *out, const float *b, int64_t N, int OC);
/* out (N,OC) += b (OC) on every row (a row-parallel product's bias, added
 * after the tensor-parallel sum). */
void ds_kernel_bias_add(float *out, const float *b, int64_t N, int OC);
/* db (OC) += column sums of dout (N,OC). */
void ds_kernel_bias_backward(float *db, const float *dout, int64_t N, int OC);

/* out (N,C) += a (N,C) (residual add). */
void ds_kernel_add_inplace(float *out, const float *a, int64_t n);

/* Rotary embedding (NeoX rotate-half) in place on q and k of qkv (B,T,3C):
 * the first rd dims of each head, pair (i, i+rd/2) rotated by angle
 * t*inv_freq[i]; cs, sn (T, rd/2).  inverse != 0 rotates by -angle (backward). */
void ds_kernel_rotary(float *qkv, const float *cs, const float *sn, int B, int T, int C, int NH,
		      int rd, int inverse);

/* Causal softmax of attention scores att (B,NH,T,T) in place, row by row
 * (zeros above the diagonal).  The matrix products around it are the
 * caller's (sgemm). */
void ds_kernel_causal_softmax_forward(float *att, int B, int NH, int T);
/* Attention dropout p > 0: attd (B,NH,T,T) writes att times the keep mask
 * (1/(1-p) or 0), keyed per sample by gs[b] at element h*T*T + t*T + t2. */
void ds_kernel_attention_dropout(float *attd, const float *att, int B, int NH, int T, float p,
				 const struct ds_rng *gs);
/* The same for heads h0 .. h0+NH-1 of the model (a tensor-parallel rank's):
 * local head h is keyed as head h0 + h, so the masks are the whole
 * model's whatever the split. */
void ds_kernel_attention_dropout_h0(float *attd, const float *att, int B, int NH, int h0, int T, float p,
				    const struct ds_rng *gs);
/* datt (B,NH,T,T) in place: from dL/d(attd) (or dL/d(att) when p <= 0) to
 * scale * dL/d(scores): mask, then softmax backward with att (B,NH,T,T);
 * zeros above the diagonal. */
void ds_kernel_causal_softmax_backward(float *datt, const float *att, int B, int NH, int T,
				       float scale, float p, const struct ds_rng *gs);
/* ... for heads h0 .. h0+NH-1 (see ds_kernel_attention_dropout_h0). */
void ds_kernel_causal_softmax_backward_h0(float *datt, const float *att, int B, int NH, int h0, int T,
					  float scale, float p, const struct ds_rng *gs);

/* MLP activation (act: gpt_math.h's codes).  act 0 gelu (tanh), 3
 * gelu_exact (erf): out (N,F) = gelu(inp (N,F)).  act 1 geglu, 4
 * geglu_exact, 2 swiglu: inp (N,2F) = [a | b], out = act(a) * b
 * (Megatron's chunk order). */
void ds_kernel_act_forward(float *out, const float *inp, int64_t N, int F, int act);
/* dinp (N,F or 2F) writes. */
void ds_kernel_act_backward(float *dinp, const float *dout, const float *inp, int64_t N, int F,
			    int act);

/* The kernels above whose output a bf16 mixed-precision run rounds next,
 * with r16 nonzero leaving that output (out, dinp, att, datt) rounded to
 * bf16 values: bit for bit the plain kernel followed by
 * ds_half_round_n(DS_HALF_BF16) over it, each row rounded while it is
 * still in cache instead of in a pass over the whole tensor.  r16 0: the
 * plain kernel. */
void ds_kernel_layernorm_forward_r(float *out, float *mean, float *rstd, const float *inp, const float *w,
				   const float *b, int64_t N, int C, float eps, int r16);
void ds_kernel_layernorm_backward_r(float *dinp, float *dw, float *db, const float *dout, const float *inp,
				    const float *w, const float *mean, const float *rstd, int64_t N, int C, int r16);
/* layernorm_backward_r with r16 1, the input read from its bits inp16
 * where not NULL (inp then unread; the same values), and the rounded
 * dinp's bits into d16 where not NULL (N,C), for the products that read
 * dinp next (a pack after, without its pass) */
void ds_kernel_layernorm_backward16(float *dinp, uint16_t *d16, float *dw, float *db, const float *dout,
				    const float *inp, const uint16_t *inp16, const float *w, const float *mean,
				    const float *rstd, int64_t N, int C);
/* ds_kernel_add_r with r16 1 and out's bits into out16 as well (a pack
 * after, in the same pass) */
void ds_kernel_add16(float *out, uint16_t *out16, const float *a, const float *b, int64_t n);
void ds_kernel_causal_softmax_forward_r(float *att, int B, int NH, int T, int r16);
void ds_kernel_causal_softmax_backward_r(float *datt, const float *att, int B, int NH, int h0, int T, float scale,
					 float p, const struct ds_rng *gs, int r16);
void ds_kernel_act_forward_r(float *out, const float *inp, int64_t N, int F, int act, int r16);
void ds_kernel_act_backward_r(float *dinp, const float *dout, const float *inp, int64_t N, int F, int act,
			      int r16);
/* out (n) = a + b (out may be a or b: the residual adds), rounded as above
 * with r16. */
void ds_kernel_add_r(float *out, const float *a, const float *b, int64_t n, int r16);

/* The attention softmax of a bf16 run that keeps P's bf16 copy (the
 * products read it): forward into att16 (B,NH,T,T), each row's bf16 bits,
 * the bits of ds_kernel_causal_softmax_forward_r with r16 1 and a pack;
 * with f32 nonzero att gets that kernel's output too, else att (the
 * scores) is only read.  Both kernels write each row's causal part of
 * their bf16 output only (t2 <= t): the caller keeps zeros above the
 * diagonal, which P and dS share.
 * Backward without dropout from that copy: datt holds dP as the product
 * wrote it, rounded to bf16 here as it is read (the bits of a rounding
 * pass before); dS = scale P (dP - sum P dP) rounded, into ds16 in bf16
 * (which may be att16 itself: each row's P is read before its dS is
 * written) or, with ds16 NULL, into datt: bit for bit the rounding pass,
 * ds_kernel_causal_softmax_backward_r with r16 1 on P in fp32 and a pack. */
void ds_kernel_causal_softmax_forward16(float *att, uint16_t *att16, int B, int NH, int T, int f32);
/* Outputs that only products read, written in bf16 alone (a bf16 run's
 * layer storage): out16 the bits of ds_kernel_layernorm_forward_r /
 * ds_kernel_act_forward_r with r16 1 and a pack, without the fp32 tensor
 * (each row goes through stack scratch); mean and rstd as there.  The
 * activation rounds its input to bf16 values as it reads it (the bits of
 * a rounding pass over inp before: its product need not round), and
 * in16, where not NULL, gets that input's bits (N, F or 2F: backward reads
 * it from there). */
void ds_kernel_layernorm_forward16(uint16_t *out16, float *mean, float *rstd, const float *inp, const float *w,
				   const float *b, int64_t N, int C, float eps);
void ds_kernel_act_forward16(uint16_t *out16, uint16_t *in16, const float *inp, int64_t N, int F, int act);
/* The activation's backward with its input read from those bits (inp16)
 * and dout rounded to bf16 values as it is read: dinp bit for bit
 * ds_kernel_act_backward_r with r16 1 on the unpacked input and the
 * rounded dout, and its bits into d16 where not NULL (for the next
 * products, the bits of a pack after). */
void ds_kernel_act_backward16(float *dinp, uint16_t *d16, const float *dout, const uint16_t *inp16, int64_t N,
			      int F, int act);
void ds_kernel_causal_softmax_backward16(float *datt, const uint16_t *att16, uint16_t *ds16, int B, int NH, int T,
					 float scale);
/* ds_kernel_bias_backward on the bf16 bits of dout (N,OC): db bit for bit
 * that kernel's on the unpacked values (the same sums in the same order),
 * reading half the bytes; for a backward whose products take dout's copy
 * and which leaves the fp32 dout unrounded (only the copy is read). */
void ds_kernel_bias_backward16(float *db, const uint16_t *dout16, int64_t N, int OC);

/* Cross-entropy on logits (N,Vp), softmax over the first V columns only.
 * lse (N) writes log-sum-exp; returns the sum over rows of the losses
 * (double).  targets (N) in [0,V). */
double ds_kernel_xent_forward(float *lse, const float *logits, const int32_t *targets, int64_t N,
			      int V, int Vp);
/* In place: logits (N,Vp) becomes dlogits = dscale * (softmax - onehot) on
 * columns < V, 0 on the padding columns. */
void ds_kernel_xent_backward(float *logits, const float *lse, const int32_t *targets, int64_t N,
			     int V, int Vp, float dscale);

/* The same on bf16 logits (N,Vp), as mixed precision keeps them: forward
 * also writes -inf into the padding columns (targets NULL: only that) and
 * returns the loss sum (0 without targets); backward turns them into
 * dlogits rounded to bf16 in place (ds_fp32_to_bf16's rounding).  Each
 * equals the fp32 kernel on the unpacked rows up to the order of its fp32
 * sums. */
double ds_kernel_xent_forward16(float *lse, uint16_t *logits, const int32_t *targets, int64_t N, int V, int Vp);
void ds_kernel_xent_backward16(uint16_t *logits, const float *lse, const int32_t *targets, int64_t N, int V,
			       int Vp, float dscale);
/* Vocabulary-parallel cross-entropy (Megatron's VocabParallelCrossEntropy):
 * this rank holds columns [v0, v0 + Vl) of the vocabulary as the first Vl
 * of Vpl columns of logits (N,Vpl).  Per row, mx writes the largest local
 * logit (-inf when Vl is 0) and pred the target's logit when the target is
 * local, else 0; after a max and a sum over the tensor-parallel ranks,
 * se writes the sum of exp(logit - mx) over the local columns, to be
 * summed too: lse = mx + log(se), loss = lse - pred. */
void ds_kernel_xent_vp_max(float *mx, float *pred, const float *logits, const int32_t *targets, int v0,
			   int64_t N, int Vl, int Vpl);
void ds_kernel_xent_vp_sumexp(float *se, const float *logits, const float *mx, int64_t N, int Vl, int Vpl);
/* In place: logits (N,Vpl) becomes dscale * (softmax - onehot) on the Vl
 * local columns (the onehot only where the target is local), 0 on the
 * padding columns. */
void ds_kernel_xent_vp_backward(float *logits, const float *lse, const int32_t *targets, int v0, int64_t N,
				int Vl, int Vpl, float dscale);

#endif
