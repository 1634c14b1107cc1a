/* gpt.h - the GPT family on CPU: parameter registry, initialisation, forward
 * and backward over ONE flat fp32 buffer, segment by segment.
 *
 * Architecture (GPT-2 / GPT-NeoX / Megatron options of struct ds_model_config):
 *   x = wte[tok] (+ wpe[t] learned | + sinusoidal[t]), hidden dropout
 *   per layer, sequential:   h = x + drop(attn(norm1(x)));  out = h + drop(mlp(norm2(h)))
 *              gpt_j_residual: out = x + drop(attn(norm1(x))) + drop(mlp(norm2(x)))
 *   logits = norm_f(x) @ head^T (head = wte when tied), columns >= vocab_size
 *   are -inf and take no part in the softmax, so the loss is the unpadded
 *   model's; loss = mean over B*T tokens of the cross-entropy.
 * Details a reference implementation must match:
 *   - c_attn output is [q | k | v], each C wide, head h at columns h*hs..;
 *     causal softmax(q k^T / sqrt(hs)); attention dropout on the probabilities.
 *   - rotary: NeoX rotate-half on the first rd = floor(hs*rotary_pct) (even)
 *     dims of q and k of each head, pair (i, i+rd/2) rotated by t*base^(-2i/rd)
 *     (base rotary_emb_base, 10000), positions 0..T-1, angles in double.
 *   - sinusoidal: pos[t] = [sin(t*f_i) | cos(t*f_i)], f_i = 10000^(-2i/C)
 *     (GPT-NeoX's SinusoidalPositionalEmbedding: halves, not interleaved).
 *   - layernorm: (x - mean) / sqrt(var + layernorm_epsilon) * w + b (biased var).
 *   - rmsnorm (GPT-NeoX's): w * x / (sqrt(mean(x^2)) + rms_norm_epsilon), no bias.
 *   - gelu is the TANH approximation (GPT-2, torch approximate='tanh'),
 *     gelu_exact the erf form (torch's default F.gelu, GPT-NeoX's unfused);
 *     geglu/geglu_exact/swiglu: c_fc gives 2F = [a | b], act(a) * b
 *     (Megatron's order).
 *   - dropout keeps with probability 1-p and scales by 1/(1-p).
 *
 * Tensor parallelism (Megatron-LM's scheme, issue 19; registry.h for the
 * shards): c_attn and c_fc are column-parallel (each rank computes its
 * heads' q, k, v and its slice of the MLP width), attn.c_proj and
 * mlp.c_proj row-parallel (partial sums, summed over the tensor-parallel
 * ranks in forward, their bias added after the sum), norms, positions and
 * row-parallel biases replicated; the embedding is vocabulary-parallel
 * (each rank looks up its rows, the sum completes them) and so are the
 * head and the cross-entropy, which never gathers the logits (the row
 * max, the target's logit and the exp-sum are reduced across ranks).  In
 * backward the inputs of column-parallel products (and of the head) have
 * their gradients summed.  The collectives are the hooks' (tp_allreduce),
 * so this layer never communicates.  A rank's attention dropout keys its
 * heads by their model-wide index: masks do not depend on the split.
 *
 * Pipeline parallelism: a stage runs a part of the model (struct
 * ds_gpt_part): the embeddings, layers [l0, l1), the final norm, the head
 * and loss, in any contiguous selection; a part without the embeddings
 * takes its input activation, one without the head returns its output,
 * and backward takes and returns their gradients.
 *
 * Parameters, in registry order (F = intermediate_size, F' = 2F for the
 * gated geglu, geglu_exact and swiglu else F; matrices stored [out, in]
 * row-major like torch.nn.Linear
 * -- HF GPT-2's Conv1D checkpoints hold the transpose):
 *   segment 0      transformer.wte.weight [Vp, C]
 *                  transformer.wpe.weight [max_position_embeddings, C]  (learned only)
 *   segment 1+i    transformer.h.i.ln_1.weight [C], ln_1.bias [C] (layernorm only)
 *                  transformer.h.i.attn.c_attn.weight [3C, C], .bias [3C]
 *                  transformer.h.i.attn.c_proj.weight [C, C],  .bias [C]
 *                  transformer.h.i.ln_2.weight [C], ln_2.bias [C] (layernorm only)
 *                  transformer.h.i.mlp.c_fc.weight [F', C],    .bias [F']
 *                  transformer.h.i.mlp.c_proj.weight [C, F],   .bias [C]
 *   segment L+1    transformer.ln_f.weight [C], ln_f.bias [C] (layernorm only)
 *   segment L+2    lm_head.weight [Vp, C]  (no_weight_tying only)
 *
 * Initialisation (ds_gpt_init): normal(0, init_method_std) for weights and
 * embeddings, normal(0, init_method_std / sqrt(2 num_layers)) for the two
 * output projections attn.c_proj and mlp.c_proj (Megatron's
 * scaled_init_method_normal), zeros for biases, ones for norm weights.
 * Element i of tensor x draws from Philox stream (seed, hash(x.name), 0),
 * index i, so any slice of the flat buffer initialises on its own (ZeRO-3).
 *
 * Dropout masks: Philox stream (seed, step, (sample << 20) | (layer << 4) |
 * site), element = index within the sample's (whole model's) tensor; sample is the GLOBAL
 * sample index sample_offset + b, layer 0 = embeddings, 1+i = layer i; site 0
 * embedding, 1 attention probabilities, 2 attention output, 3 MLP output.
 * Masks therefore do not depend on rank or on the micro-batch split.
 */
#ifndef DS_MODEL_GPT_H
#define DS_MODEL_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "config/model.h"
#include "model/registry.h"
#include "util/err.h"

struct ds_gpt;      /* model: config + registry (no parameter storage) */
struct ds_gpt_ws;   /* activations/workspace for one (B, T) */

/* ---- model and registry ------------------------------------------------ */

/* Create the model for config *cfg (copied).  padded_vocab_size 0 is derived
 * from vocab_size and make_vocab_size_divisible_by (default 128),
 * intermediate_size 0 becomes 4*hidden_size, rotary_emb_base 0 becomes 10000.
 * Returns 0 or DS_EINVAL (names the field) / DS_ENOMEM.  Free with ds_gpt_destroy. */
int ds_gpt_create(struct ds_gpt **out, const struct ds_model_config *cfg, struct ds_err *err);
/* The model as expert-parallel rank ep_rank of ep holds it (registry.h:
 * its share of every MoE layer's experts); ds_gpt_create is ep 1. */
int ds_gpt_create_ep(struct ds_gpt **out, const struct ds_model_config *cfg, int ep, int ep_rank,
		     struct ds_err *err);
/* The expert-parallel size (and *rank, may be NULL). */
int ds_gpt_ep(const struct ds_gpt *m, int *rank);
/* 1 when segment s holds experts (segments from ds_gpt_num_dense_segments
 * on: one per MoE layer, after the final norm's), else 0. */
int ds_gpt_expert_segment(const struct ds_gpt *m, int s);
int ds_gpt_num_dense_segments(const struct ds_gpt *m);
/* The model as tensor-parallel rank tp_rank of tp holds it: the registry
 * of its shards (registry.h; DS_EINVAL names what tp does not divide).
 * ds_gpt_create is tp 1. */
int ds_gpt_create_tp(struct ds_gpt **out, const struct ds_model_config *cfg, int tp, int tp_rank,
		     struct ds_err *err);
void ds_gpt_destroy(struct ds_gpt *m);   /* accepts NULL */
/* The tensor-parallel size (and *rank, may be NULL). */
int ds_gpt_tp(const struct ds_gpt *m, int *rank);

/* The effective config (derived fields filled); borrowed. */
const struct ds_model_config *ds_gpt_config(const struct ds_gpt *m);
/* The compute backend (lib/compute/compute.h) every tensor operation of
 * the model's workspaces goes through: cpu when the model is made; set it
 * before creating workspaces (NULL: cpu). */
struct ds_compute_ops;
void ds_gpt_set_compute(struct ds_gpt *m, const struct ds_compute_ops *ops);
const struct ds_compute_ops *ds_gpt_compute(const struct ds_gpt *m);
/* The registry: tensors (name, offset, shape, segment) and segments; borrowed. */
const struct ds_gpt_registry *ds_gpt_registry(const struct ds_gpt *m);
/* Number of parameters = elements of the flat buffer. */
int64_t ds_gpt_num_params(const struct ds_gpt *m);
/* Tensor count, tensor i (0 <= i < count; borrowed), index of `name` or -1. */
int ds_gpt_num_tensors(const struct ds_gpt *m);
const struct ds_gpt_tensor *ds_gpt_tensor(const struct ds_gpt *m, int i);
int ds_gpt_find(const struct ds_gpt *m, const char *name);
/* Segment count (num_layers + 2, + 1 untied) and segment s (offset, numel; borrowed). */
int ds_gpt_num_segments(const struct ds_gpt *m);
const struct ds_gpt_segment *ds_gpt_segment(const struct ds_gpt *m, int s);
/* The final norm's segment (L+1) and the head's (L+2 untied, else 0: wte). */
int ds_gpt_norm_segment(const struct ds_gpt *m);
int ds_gpt_head_segment(const struct ds_gpt *m);

/* A pipeline stage's part of the model (DeepSpeed's layer partition,
 * lib/model/pipe.h): any contiguous run of embeddings, layers [l0, l1),
 * final norm, head (with the loss). */
struct ds_gpt_part {
	int embed;      /* the embeddings: the part starts from tokens */
	int l0, l1;     /* transformer layers [l0, l1) */
	int norm;       /* the final norm */
	int head;       /* the head and the loss: the part ends with the loss */
};
/* The whole model as one part. */
void ds_gpt_part_whole(const struct ds_gpt *m, struct ds_gpt_part *p);
/* 1 when part p reads segment seg's parameters (a tied head reads 0; an MoE
 * layer's expert segment goes with its layer). */
int ds_gpt_part_uses(const struct ds_gpt *m, const struct ds_gpt_part *p, int seg);

/* Initialise flat elements [begin, end) of the parameters into dst[0..end-begin)
 * (dst = params + begin for the whole buffer).  Pure function of
 * (seed, names, indices). */
void ds_gpt_init(const struct ds_gpt *m, uint64_t seed, float *dst, int64_t begin, int64_t end);

/* ---- workspace --------------------------------------------------------- */

struct ds_gpt_ws_opts {
	int B, T;                /* largest micro-batch and sequence length */
	int checkpointing;       /* 1: keep only each layer's input, recompute in backward */
	uint64_t dropout_seed;   /* key of the dropout streams */
	int half;                /* enum ds_half_kind: round activations to 16 bits (0: fp32) */
	int bf16_matmul;         /* bf16: enum ds_bf16_mode of the matrix products (dstk.bf16_matmul; 0 auto) */
	const struct ds_gpt_part *part;  /* the part this workspace runs (NULL: the whole model); copied */
	/* activation_checkpointing.partition_activations with checkpointing
	 * and tensor parallelism (DeepSpeed's meaning): each checkpointed
	 * layer input is kept as this rank's 1/tp slice, and the slices are
	 * allgathered (hooks' tp_allgather) before the layer is recomputed */
	int partition_activations;
	/* bf16 runs: 1 makes the products convert every operand, as if no bf16
	 * copies were at hand (the same results: for tests and comparisons) */
	int no_bf16_copies;
};

/* Mixed precision (half != DS_HALF_NONE): activations are computed in fp32
 * and rounded to the 16-bit format where a GPU would store them: the
 * outputs of every norm and matrix product, the attention output, the
 * activation function, the residual stream at each layer boundary and the
 * logits and the attention probabilities; in backward every activation
 * gradient an op produces (the logits', each matrix product's input
 * gradient, the activation function's, the attention probabilities' and
 * scores', q/k/v's, the residual stream's after each norm), so a scaled
 * fp16 gradient overflows where it would on a GPU.
 * The layer inputs are stored in 16 bits, and without checkpointing every
 * layer's saved activations too (its norms' row statistics stay fp32):
 * layers compute in one fp32 working set, packed after forward and
 * unpacked before backward, losslessly since the values are 16-bit
 * already.  The logits are stored in 16 bits too; the head computes them
 * (and in backward their gradient) a few rows at a time in fp32 scratch
 * that backward's layer buffers lend it.  The final norm, one working layer
 * and the backward scratch stay fp32: the compute is fp32, except that
 * bf16 runs the matrix products bf16_matmul picks (kernels/cpu/gemm_bf16.h:
 * on AMX or AVX512_BF16 CPUs, unless "fp32") with both inputs rounded to
 * bf16 and fp32 accumulation (a GPU's bf16 GEMM): every input is a bf16
 * value already (rounded activations and gradients, the bf16 parameter
 * copy) except the attention probabilities scaled by dropout's 1/(1-p),
 * rounded on entry as on a GPU, so results differ from sgemm by the order
 * of the fp32 sums (and the hardware reads bf16 subnormals as 0).
 * Where the products read bf16 copies of their operands (oneDNN and
 * dstk's kernel: the backend's gemm_hints), the weights' come from the
 * params16 hook or the workspace, and the activations' are the 16-bit
 * layer storage, filled as each product's input is written; on oneDNN
 * each output gradient also goes to bf16 once for its two products (a
 * scratch in the activation bytes).
 * fp16 keeps fp32 sgemm (rounding fp16 to bf16 would drop 3 mantissa bits;
 * AVX512-FP16 accumulates in fp16, and oneDNN 2.6 has no AMX-FP16). */

/* Activation bytes a workspace for (B, T, checkpointing, half: enum
 * ds_half_kind) holds, without
 * allocating (the memory estimator's figure; ds_gpt_ws_bytes of the real one
 * is the same number). */
size_t ds_gpt_activation_bytes(const struct ds_model_config *cfg, int B, int T, int checkpointing, int half);
/* Of those, the bytes forward keeps for backward: the layer inputs, the
 * saved activations of every layer (without checkpointing) and the logits.
 * The rest is working memory of one layer at a time (fp32 compute). */
size_t ds_gpt_activation_saved_bytes(const struct ds_model_config *cfg, int B, int T, int checkpointing, int half);
/* Both for a tensor-parallel rank of tp running `part` (NULL: whole) with
 * partition_activations pa (ds_gpt_ws_opts); *saved (may be NULL) gets the
 * saved bytes. */
size_t ds_gpt_activation_bytes_part(const struct ds_model_config *cfg, int tp, const struct ds_gpt_part *part,
				    int pa, int B, int T, int checkpointing, int half, size_t *saved);

/* Allocate (ds_alloc) a workspace.  Returns 0, DS_EINVAL (T > max positions
 * for learned, B or T < 1), DS_ENOTSUP (bf16 with a bf16_matmul this build
 * or CPU cannot run: "onednn" without oneDNN's bf16 kernel, "avx512_bf16"
 * without AVX512_BF16) or DS_ENOMEM.  Free with ds_gpt_ws_destroy. */
int ds_gpt_ws_create(struct ds_gpt_ws **out, const struct ds_gpt *m, const struct ds_gpt_ws_opts *o,
		     struct ds_err *err);
void ds_gpt_ws_destroy(struct ds_gpt_ws *ws);   /* accepts NULL */
size_t ds_gpt_ws_bytes(const struct ds_gpt_ws *ws);
/* Logits of the last forward, (B, T, Vp) row-major; columns >= vocab_size are
 * -inf (with tensor parallelism this rank's (B, T, Vp/tp) columns).  Valid
 * until the next backward (which turns them into dlogits).
 * NULL in mixed precision, whose logits are stored in 16 bits: use
 * ds_gpt_ws_logits_copy, which works in both (dst holds B*T*Vp floats). */
const float *ds_gpt_ws_logits(const struct ds_gpt_ws *ws);
void ds_gpt_ws_logits_copy(const struct ds_gpt_ws *ws, float *dst);
/* 1 when the last forward kept the logits in bf16 from one product over
 * the whole batch (the backend's head16: bf16 runs whose head products
 * run in bf16), 0 when it took fp32 row chunks. */
int ds_gpt_ws_head16(const struct ds_gpt_ws *ws);
/* Seconds spent recomputing layers in backward so far (activation
 * checkpointing's `profile` figure); 0 without checkpointing. */
double ds_gpt_ws_recompute_seconds(const struct ds_gpt_ws *ws);
/* 1 when some of the workspace's matrix products run in bf16 (see above),
 * else 0; buf (n bytes) receives one line saying which implementation
 * runs them and why (ds_gemm_bf16_plan). */
int ds_gpt_ws_bf16_matmul(const struct ds_gpt_ws *ws, char *buf, size_t n);

/* ---- per-segment hooks (ZeRO-3) ---------------------------------------- */

enum ds_gpt_phase { DS_GPT_FORWARD = 0, DS_GPT_BACKWARD = 1 };

/* Called around each segment's work.  pre() may replace *params (and in
 * backward *grads) with a buffer holding the segment's elements (element 0 =
 * the segment's first); by default they point into the flat buffers passed
 * to forward/backward.  post() says the segment is done (in backward its
 * gradients are complete).  With tied weights the head (segment L+1) also
 * uses segment 0's wte, so segment 0 stays open: forward calls pre(0) first
 * and post(0) after the head; backward calls pre(0) before the head and
 * post(0) after the embeddings.  Return 0 or a negative DS_E* to abort. */
struct ds_gpt_hooks {
	void *ctx;
	int (*pre)(void *ctx, int seg, int phase, float **params, float **grads);
	int (*post)(void *ctx, int seg, int phase);
	/* expert parallelism (ep > 1; moe.h): all-to-all of count floats per
	 * rank over the expert-parallel group */
	int (*ep_alltoall)(void *ctx, const float *send, float *recv, int64_t count);
	/* tensor parallelism (tp > 1; NULL otherwise): sum (op
	 * DS_GPT_TP_SUM) or max (DS_GPT_TP_MAX) buf[0..n) in place over the
	 * tensor-parallel ranks; allgather n elements of elem_bytes (4: fp32,
	 * 2: 16-bit) from each rank into recv, rank r's at r * n */
	int (*tp_allreduce)(void *ctx, float *buf, int64_t n, int op);
	int (*tp_allgather)(void *ctx, const void *send, void *recv, int64_t n, int elem_bytes);
	/* bf16 runs (optional): the bf16 copy of segment seg's parameters,
	 * laid out as the buffer the last pre hook gave (ds_fp32_to_bf16 of
	 * each element: a 16-bit model's copy that buffer was widened from),
	 * valid until the segment's post hook; NULL where there is none.
	 * Matrix products that convert their operands to bf16 read it instead
	 * of converting the weights.  Without pre hooks the workspace makes
	 * such copies itself in forward (2 bytes per parameter of the part's
	 * layers and head, kept for backward). */
	const uint16_t *(*params16)(void *ctx, int seg);
};
enum { DS_GPT_TP_SUM = 0, DS_GPT_TP_MAX = 1 };
/* Install hooks (copied; NULL removes them). */
void ds_gpt_ws_set_hooks(struct ds_gpt_ws *ws, const struct ds_gpt_hooks *h);

/* What the MoE layers saw in the last forward (moe.h's struct ds_moe_stats:
 * the aux loss summed over layers, dropped and routed token choices); all
 * zero for a dense model.  The loss of ds_gpt_forward is the language
 * model's; backward adds moe.loss_coeff x aux to it. */
struct ds_moe_stats;
void ds_gpt_ws_moe_stats(const struct ds_gpt_ws *ws, struct ds_moe_stats *st);

/* ---- passes ------------------------------------------------------------ */

/* Forward of tokens (B, T) with B <= ws.B, T <= ws.T.  params: the flat
 * buffer (may be NULL when hooks supply every segment).  targets (B, T) or
 * NULL (then *loss is not computed).  step and sample_offset (global index
 * of row 0) key the dropout masks; train 0 disables dropout.  *loss = mean
 * cross-entropy over the B*T tokens.  Returns 0 or DS_EINVAL (token id out
 * of range: names the position) or a hook's status. */
int ds_gpt_forward(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params,
		   const int32_t *tokens, const int32_t *targets, int B, int T, int64_t step,
		   int64_t sample_offset, int train, float *loss, struct ds_err *err);

/* Backward of the last forward (which had targets): ACCUMULATES
 * scale * d(loss)/d(param) into grads (the flat gradient buffer, same layout;
 * the caller zeroes it; NULL when hooks supply it).  scale carries 1/GA and
 * the fp16 loss scale.  Returns 0, DS_EINVAL (no forward with targets) or a
 * hook's status. */
int ds_gpt_backward(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params,
		    float *grads, float scale, struct ds_err *err);

/* The passes of the workspace's part (ds_gpt_ws_opts.part; pipeline
 * stages).  Forward: tokens (B, T) when the part has the embeddings, else
 * x_in (B, T, C), the previous stage's output; targets when it has the
 * head (then *loss as above), else the output goes to x_out (B, T, C).
 * Backward: dy (B, T, C), the gradient of x_out, unless the part has the
 * head; dx (B, T, C) receives the gradient of x_in unless it has the
 * embeddings.  Tokens and targets are still checked, and step and
 * sample_offset key dropout, as in ds_gpt_forward (whose part is whole). */
int ds_gpt_forward_part(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params, const int32_t *tokens,
			const float *x_in, const int32_t *targets, int B, int T, int64_t step, int64_t sample_offset,
			int train, float *x_out, float *loss, struct ds_err *err);
int ds_gpt_backward_part(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params, float *grads,
			 const float *dy, float *dx, float scale, struct ds_err *err);

#endif
