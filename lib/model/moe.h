/* moe.h - one Mixture-of-Experts MLP (issue 23) as DeepSpeed computes it:
 * deepspeed/moe/sharded_moe.py (TopKGate, top1gating, top2gating, MOELayer)
 * and deepspeed/moe/layer.py (MoE, use_residual), on CPU.
 *
 * For N tokens x (N, C) of one micro-batch of this rank:
 *   logits = x' @ gate^T (E experts; x' = x times uniform(0.99, 1.01) with
 *   the Jitter policy in training), gates = softmax(logits) in fp32.
 *   top-1: expert argmax(gates) (argmax(logits + Gumbel) with RSample in
 *     training); capacity ceil(N/E * cf), at least min_capacity; an
 *     expert over capacity keeps the tokens with the largest uniform draws
 *     (use_rts) or its first ones; weight gates[s, e].
 *   top-2: first argmax(gates), second argmax over the others of logits +
 *     Gumbel noise (top2_2nd_expert_sampling) or of logits; capacity
 *     ceil(N/E * 2 cf) (>= min_capacity); slots in token order, second
 *     choices after every first choice of the expert, a choice past the
 *     capacity dropped; weights g1, g2 renormalised by max(g1+g2, eps).
 *   Without drop_tokens the capacity is the largest expert load over the
 *   expert-parallel group (top-1: at most N): nothing is dropped.
 *   aux (l_aux) = E * sum_e mean_s(gates[s,e]) * (first choices of e)/N.
 *   Each expert is the model's MLP without its output bias (DeepSpeed drops
 *   the bias a Megatron/NeoX MLP returns): (c_fc, bias, activation, c_proj).
 *   Tokens travel in an (E, capacity, C) buffer; with expert parallelism
 *   the E/ep experts of each rank get their slots by one all-to-all and
 *   send the results back by another (the a2a callback).
 *   out = sum_k w_k expert_out; PR-MoE (use_residual): out = out * c0 +
 *   mlp(x) * c1 with (c0, c1) = softmax(x @ coefficient^T + bias).
 * Backward accumulates every parameter gradient and the loss weight daux
 * of aux (loss_coeff times the backward's scale) into the gate.
 *
 * Random draws are counter-based like dropout: Philox stream (seed, step,
 * (global sample << 20) | (layer << 4) | site) with site 4 jitter, 5
 * Gumbel, 6 token selection, element t*C + c or t*E + e: the same tokens
 * get the same draws whatever the layout.
 */
#ifndef DS_MODEL_MOE_H
#define DS_MODEL_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "config/model.h"
#include "util/err.h"

struct ds_moe_ws;

/* Parameters (or gradients) of one MoE layer.  experts: the El local
 * experts one after the other, each [c_fc.weight (F2, C) | c_fc.bias (F2)
 * | c_proj.weight (C, F)] (the registry's order).  fcw.. and coef..: PR-MoE
 * only (NULL otherwise). */
struct ds_moe_params {
	float *gate;                  /* (E, C) */
	float *fcw, *fcb, *pw;        /* (F2, C), (F2), (C, F) */
	float *coefw, *coefb;         /* (2, C), (2) */
	float *experts;
};

/* How the layer's random draws are keyed (header comment).  jitter, gumbel,
 * rts: when set, the draws themselves ((N, C) multipliers, (N, E) noise,
 * (N, E) uniforms) replace the keyed ones (reference tests). */
struct ds_moe_rand {
	uint64_t seed, step;
	int64_t sample_offset;   /* global index of the micro-batch's first sample */
	int T;                   /* tokens per sample */
	int layer;               /* layer id of the keys (transformer layer + 1) */
	const float *jitter, *gumbel, *rts;
};

/* The all-to-all of the expert-parallel group: send holds ep blocks of
 * count floats, block r for rank r; recv block r comes from rank r. */
struct ds_moe_a2a {
	void *ctx;
	int (*fn)(void *ctx, const float *send, float *recv, int64_t count);
};

/* What the forwards since ds_moe_stats_reset saw. */
struct ds_moe_stats {
	double aux;              /* sum of the layers' aux losses (unweighted) */
	int64_t dropped, routed; /* token choices dropped for capacity, and made (N*k per layer) */
	int64_t a2a_floats;      /* floats this rank sent in all-to-alls */
};

/* Working memory of model m's MoE layers for up to Nmax tokens, for
 * expert-parallel rank ep_rank of ep: `sets` layers' activations kept
 * (every MoE layer's, or 1 when each layer is recomputed before its
 * backward).  half: enum ds_half_kind of the activations (0 fp32).
 * 0, DS_EINVAL or DS_ENOMEM. */
int ds_moe_ws_create(struct ds_moe_ws **out, const struct ds_model_config *m, int ep, int ep_rank, int64_t Nmax,
		     int sets, int half, struct ds_err *err);
void ds_moe_ws_destroy(struct ds_moe_ws *w);   /* accepts NULL */
/* The compute backend of the layer's tensor operations (compute.h; cpu
 * when made, NULL: cpu). */
struct ds_compute_ops;
void ds_moe_ws_set_compute(struct ds_moe_ws *w, const struct ds_compute_ops *ops);
/* Bytes ds_moe_ws_create would allocate. */
size_t ds_moe_ws_bytes_for(const struct ds_model_config *m, int ep, int64_t Nmax, int sets);
size_t ds_moe_ws_bytes(const struct ds_moe_ws *w);
/* The capacity of an expert of layer l for N tokens with drop_tokens
 * (train 1: capacity_factor, 0: eval_capacity_factor). */
int64_t ds_moe_capacity(const struct ds_model_config *m, int l, int64_t N, int train);

/* Forward of layer l (transformer layer index) on x (N, C) into out (N,
 * C), keeping its activations in set `set`.  recompute: a checkpointed
 * layer's second forward (statistics not counted again).  0, DS_EINVAL
 * (N below min_capacity for top-1, as DeepSpeed asserts), or the a2a's
 * status. */
int ds_moe_forward(struct ds_moe_ws *w, int set, int l, const struct ds_moe_params *p, const float *x, int64_t N,
		   int train, int recompute, const struct ds_moe_rand *rnd, const struct ds_moe_a2a *a2a, float *out,
		   struct ds_err *err);
/* Backward of the last forward of set `set`: dout (N, C) the gradient of
 * out, daux the weight of aux in the loss; gradients accumulate into g,
 * dx (N, C) is written. */
int ds_moe_backward(struct ds_moe_ws *w, int set, int l, const struct ds_moe_params *p, struct ds_moe_params *g,
		    const float *x, const float *dout, float daux, const struct ds_moe_a2a *a2a, float *dx,
		    struct ds_err *err);

void ds_moe_stats_reset(struct ds_moe_ws *w);
void ds_moe_stats_get(const struct ds_moe_ws *w, struct ds_moe_stats *s);
/* aux loss, capacity and the per-(token, choice) expert (-1: dropped) and
 * weight of the last forward of set `set` (tests). */
double ds_moe_last_aux(const struct ds_moe_ws *w, int set);
int64_t ds_moe_last_capacity(const struct ds_moe_ws *w, int set);
const int32_t *ds_moe_last_route(const struct ds_moe_ws *w, int set, const float **weight);

#endif
