/* count.h - analytic parameter, MAC and flop counts of a model, per module.
 *
 * Counts follow DeepSpeed's flops-profiler conventions (spec/deepspeed-tools.md
 * §4): a Linear is tokens*in*out MACs and twice that in flops (no bias term),
 * matmuls are MACs too, element-wise ops (softmax, activations, norms, adds)
 * are flops only.  Only the forward pass is counted; training is estimated as
 * (3 + recompute_fwd_factor) x forward.  The result is a module tree shaped
 * like the PyTorch model DeepSpeed would hook (HF GPT-2 / BERT names), so the
 * profiler can print its aggregated and detailed views from it.
 */
#ifndef DS_MODEL_COUNT_H
#define DS_MODEL_COUNT_H

#include <stdint.h>

#include "config/model.h"
#include "model/gpt.h"
#include "util/err.h"

/* Which ops count.  CURRENT is today's DeepSpeed: Linear and the attention
 * matmuls (QK^T, AV) are MACs, element-wise ops are flops.  LEGACY is what
 * DeepSpeed 0.3 saw in the seed's BERT-Large table: Linear MACs plus softmax
 * elements counted as MACs, nothing else (attention matmuls, fused norms and
 * bias-GeLU were invisible to it); flops = 2 x MACs. */
enum ds_count_convention { DS_COUNT_CURRENT = 0, DS_COUNT_LEGACY = 1 };

/* One op or one module: parameters, forward MACs and flops.  attn_macs is
 * the part of macs that comes from the attention matmuls QK^T and AV, so the
 * count without them (the older convention) is macs - attn_macs. */
struct ds_count_op {
	int64_t params;
	int64_t macs;
	int64_t flops;
	int64_t attn_macs;
};

/* Per-op counts (they overwrite *op).  tokens = product of the leading dims. */
void ds_count_linear(int64_t tokens, int64_t in, int64_t out, int bias, struct ds_count_op *op);
/* Attention matmuls of q [b,nh,tq,dk], k [b,nh,tk,dk], v [b,nh,tk,dv]: MACs
 * b*nh*tq*dk*tk + b*nh*tq*tk*dv (DeepSpeed's SDPA formula; no causal halving). */
void ds_count_attention(int64_t b, int64_t nh, int64_t tq, int64_t tk, int64_t dk, int64_t dv,
			struct ds_count_op *op);
/* LayerNorm over numel elements of width `width`: 5 flops/element when affine
 * (params 2*width), else 4. */
void ds_count_layernorm(int64_t numel, int64_t width, int affine, struct ds_count_op *op);
/* RMSNorm (weight only): 4 flops/element (square, mean, scale, weight), params width. */
void ds_count_rmsnorm(int64_t numel, int64_t width, struct ds_count_op *op);
/* Softmax, GeLU, SiLU, tanh and other element-wise ops: numel flops. */
void ds_count_elementwise(int64_t numel, struct ds_count_op *op);
/* Embedding table rows x width: params only, 0 flops. */
void ds_count_embedding(int64_t rows, int64_t width, struct ds_count_op *op);

/* A module of the tree.  Counts include the module's children; params are
 * what module.parameters() would show (a tied weight is seen by both of its
 * users), except at the node that holds both users, which subtracts `dedup`
 * so the root's params are the model's unique parameters. */
struct ds_count_node {
	char name[32];        /* local name: "transformer", "h", "0", "attn" */
	char cls[32];         /* class name, the key of the aggregated profile */
	char extra[96];       /* PyTorch-style extra_repr: "in_features=768, ..." */
	int parent;           /* index, -1 for the root (index 0) */
	int depth;            /* root 0 */
	int nchild;
	int is_list;          /* a ModuleList: identical children print as "(0-11): 12 x" */
	int64_t dedup;        /* tied parameters counted twice below this node */
	struct ds_count_op own;   /* ops of the module's own forward (not children) */
	struct ds_count_op total; /* own + children - dedup (filled by the builder) */
	double latency_s;     /* measured forward latency, 0 when not measured */
};

/* Shape of the counted step.  gpt with tensor / pipeline parallelism
 * (issue 19): the tree is one rank's, as DeepSpeed's profiler hooks see
 * its module - tp > 1 splits c_attn, c_fc and the head by their outputs,
 * attn.c_proj and mlp.c_proj by their inputs, the heads and the
 * embedding's rows over tp ranks (norms and row-parallel biases whole);
 * part (NULL: whole) keeps the stage's modules only, lm_head's tie with
 * wte counted once only where the stage holds both. */
struct ds_count_opts {
	int batch;            /* micro-batch per GPU, B >= 1 */
	int seq;              /* sequence length T >= 1 (<= max_position_embeddings if learned) */
	int convention;       /* enum ds_count_convention */
	int64_t mlm_tokens;   /* bert: positions the MLM decoder sees; 0 = all B*T */
	int tp;               /* gpt: tensor-parallel size (0 or 1: none) */
	const struct ds_gpt_part *part;  /* gpt: the pipeline stage counted (NULL: the whole model) */
};

/* The module tree, nodes in pre-order (children follow their parent). */
struct ds_count {
	struct ds_count_node *nodes;
	int n, cap;
	int family;           /* enum ds_model_family of the counted model */
	struct ds_count_opts opts;
};
#define DS_COUNT_INIT { 0, 0, 0, 0, { 0, 0, 0, 0, 0, NULL } }

/* Build the module tree of model m for one forward step of o->batch x o->seq
 * tokens.  Returns 0, or DS_EINVAL (bad shape: names the field) / DS_ENOMEM.
 * Release with ds_count_release. */
int ds_count_model(const struct ds_model_config *m, const struct ds_count_opts *o,
		   struct ds_count *c, struct ds_err *err);
void ds_count_release(struct ds_count *c);   /* accepts an empty tree */

/* Dotted path of node i ("transformer.h.0.attn") into buf; returns buf. */
char *ds_count_path(const struct ds_count *c, int i, char *buf, int n);

/* Totals for the trainer's MFU and the autotuner's cost model (current
 * convention, attention matmuls included, no causal halving):
 *   params              unique parameters of the model (padded vocabulary)
 *   fwd_flops_step      forward flops of one micro-batch of batch x seq
 *   train_flops_step    (3 + recompute_fwd_factor) x fwd_flops_step: forward,
 *                       backward = 2 x forward, plus recomputed forward
 *   *_per_token         the same divided by batch x seq
 * Returns 0, DS_EINVAL or DS_ENOMEM. */
struct ds_count_totals {
	int64_t params;
	double fwd_flops_step;
	double train_flops_step;
	double fwd_flops_per_token;
	double train_flops_per_token;
};
int ds_count_train_flops(const struct ds_model_config *m, int batch, int seq,
			 double recompute_fwd_factor, struct ds_count_totals *t, struct ds_err *err);

#endif
