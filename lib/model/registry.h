/* registry.h - the parameter registry of the GPT family: named tensors in a
 * fixed order inside ONE flat fp32 buffer, split into segments.
 *
 * DESIGN.md "One flat buffer, named views": each tensor is an offset and a
 * shape into the flat buffer; gradients and optimizer states mirror it.
 * Segments: 0 = embeddings, 1..L = transformer layers, L+1 = final norm,
 * L+2 = lm_head when untied (a pipeline stage may hold the norm without the
 * head, as DeepSpeed's NormPipe and ParallelLinearPipe are separate layers).
 * Names are HF GPT-2 style; see gpt.h for the table.
 *
 * Mixture of Experts (issue 23): an MoE layer's segment holds its gate (and
 * PR-MoE's residual MLP and coefficient) in place of the MLP; its experts
 * get a segment of their own, after the final norm's (and lm_head's), one
 * per MoE layer in layer order.  A registry built for expert-parallel rank
 * ep_rank of ep holds that rank's experts only (each layer's [ep_rank *
 * E/ep, +E/ep)), named by their global index, so every rank's registry has
 * the same shape and a checkpoint name means the same expert at any ep.
 *
 * Tensor parallelism (Megatron's split, issue 19): a registry built for tp
 * ranks holds rank tp_rank's shard of every split tensor -- its shape is the
 * shard's, gshape the logical tensor's -- and the replicated ones whole.
 * A split tensor is cut along dim 0 (DS_TP_ROWS: column-parallel outputs,
 * the vocabulary) or dim 1 (DS_TP_COLS: row-parallel inputs) into tp equal
 * pieces, each of `blocks` equal blocks separately (c_attn's [q | k | v] is
 * 3 blocks, a gated c_fc's [a | b] 2), so a shard of c_attn is
 * [q_r | k_r | v_r]: the same layout as the whole tensor at 1/tp width.
 * Initialisation and checkpoints address a shard's elements by their
 * logical index (ds_gpt_tensor_global), so any layout gives the same model.
 * MoE layers are not split (tp > 1 with MoE layers is refused).
 */
#ifndef DS_MODEL_REGISTRY_H
#define DS_MODEL_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "config/model.h"
#include "util/err.h"

#define DS_GPT_NAME_MAX 64

/* How a tensor is initialised (ds_gpt_registry_init_range). */
enum ds_gpt_init_kind {
	DS_INIT_NORMAL = 0,      /* normal(0, init_method_std) */
	DS_INIT_SCALED = 1,      /* normal(0, init_method_std / sqrt(2 L)): output projections */
	DS_INIT_ZERO = 2,        /* biases */
	DS_INIT_ONE = 3          /* norm weights */
};

/* How tensor parallelism cuts a tensor (see the top of this file). */
enum ds_tp_split { DS_TP_NONE = 0, DS_TP_ROWS = 1, DS_TP_COLS = 2 };

struct ds_gpt_tensor {
	char name[DS_GPT_NAME_MAX];  /* "transformer.h.0.attn.c_attn.weight" */
	int64_t offset;              /* first element in the flat buffer */
	int64_t numel;               /* of this rank's shard (the whole tensor unless split) */
	int ndim;                    /* 1 or 2 */
	int64_t shape[2];            /* [out, in] row-major for matrices (torch.nn.Linear); the shard's */
	int64_t gshape[2], gnumel;   /* the logical tensor's */
	int split;                   /* enum ds_tp_split (DS_TP_NONE when tp is 1 or replicated) */
	int blocks;                  /* equal blocks cut separately along the split dimension */
	int tp, tp_rank;             /* the shard: tp_rank of tp (0 of 1 when not split) */
	int segment;                 /* index into the segment table */
	int init;                    /* enum ds_gpt_init_kind */
	float init_std;              /* std of the normal kinds, 0 otherwise */
	uint64_t name_hash;          /* ds_hash_str(name): the RNG stream id */
	int expert;                  /* 1: an expert's (lives in an expert segment) */
};

struct ds_gpt_segment {
	int64_t offset;              /* first element */
	int64_t numel;               /* elements (no padding) */
	int first_tensor, ntensors;  /* tensors [first, first+n) of the registry */
};

struct ds_gpt_registry {
	struct ds_gpt_tensor *t;
	int nt;
	struct ds_gpt_segment *seg;
	int nseg;                    /* num_layers + 2 (+ 1 with an untied lm_head), + one per MoE layer */
	int64_t numel;               /* total elements of the flat buffer (this rank's shards) */
	int nseg_dense;              /* segments before the expert segments (num_layers + 2, + 1 untied) */
	int ep, ep_rank;             /* the expert-parallel shard it describes (1, 0: every expert) */
	int *expert_seg;             /* per layer: the segment of its experts, -1 for a dense layer */
	int tp, tp_rank;             /* the tensor-parallel shard it describes (1, 0: the whole model) */
};

/* Build the registry of config m (padded_vocab_size and intermediate_size
 * must be set).  Returns 0, DS_EINVAL (names the bad field) or DS_ENOMEM.
 * Release with ds_gpt_registry_release. */
int ds_gpt_registry_build(struct ds_gpt_registry *r, const struct ds_model_config *m, struct ds_err *err);
/* The same for expert-parallel rank ep_rank of ep (ep divides every MoE
 * layer's experts: the config loader checks it; DS_EINVAL otherwise). */
int ds_gpt_registry_build_ep(struct ds_gpt_registry *r, const struct ds_model_config *m, int ep, int ep_rank,
			     struct ds_err *err);
/* The same for tensor-parallel rank tp_rank of tp: every split tensor's
 * shard.  DS_EINVAL names what tp does not divide (num_attention_heads,
 * intermediate_size, padded_vocab_size).  Test-only fault: with
 * DS_TEST_FAULT_TP_SLICE=1 in the environment the last rank of tp > 1
 * addresses the previous rank's slice (a wrong shard).  A config with MoE
 * layers at tp > 1 is DS_EINVAL. */
int ds_gpt_registry_build_tp(struct ds_gpt_registry *r, const struct ds_model_config *m, int tp, int tp_rank,
			     struct ds_err *err);
void ds_gpt_registry_release(struct ds_gpt_registry *r);   /* accepts a zeroed struct */

/* Logical element index (in the whole tensor's row-major order) of
 * element i of tensor x's shard; *run (may be NULL) receives how many
 * shard elements from i on are consecutive in the logical tensor too. */
int64_t ds_gpt_tensor_global(const struct ds_gpt_tensor *x, int64_t i, int64_t *run);

/* Index of tensor `name`, or -1. */
int ds_gpt_registry_find(const struct ds_gpt_registry *r, const char *name);

/* Initialise flat elements [begin, end) into dst[0 .. end-begin): element i
 * of tensor x draws from the Philox stream (seed, hash(x.name), 0) at the
 * logical index of i - x.offset (ds_gpt_tensor_global), so any slice, and
 * any tensor-parallel shard, gives the values of the whole model. */
void ds_gpt_registry_init_range(const struct ds_gpt_registry *r, uint64_t seed, float *dst,
				int64_t begin, int64_t end);

#endif
