/* pipe.h - the GPT as DeepSpeed's PipelineModule sees it, and its partition
 * over pipeline stages (issue 19).
 *
 * The layer list is GPT-NeoX's GPT2ModelPipe.init_specs: EmbeddingPipe,
 * _pre_transformer_block, num_layers x ParallelTransformerLayerPipe,
 * _post_transformer_block, NormPipe, then the head: EmbeddingPipe again
 * (the tied embedding: a TiedLayerSpec) or ParallelLinearPipe.  The two
 * blocks are functions without parameters.  A partition method cuts that
 * list into stages as deepspeed/runtime/pipe/module.py does:
 *   "uniform"     the same number of layers per stage (partition_uniform)
 *   "parameters"  balanced parameter counts (partition_balanced over each
 *                 layer's trainable parameters on this tensor-parallel
 *                 rank; the tied head counts the embedding's again)
 *   "type:REGEX"  balanced counts of the layers whose type name matches
 *                 REGEX, case-insensitively (NeoX's default is
 *                 "type:transformer|mlp")
 * partition_balanced minimises the spread (largest minus smallest part)
 * by dynamic programming, taking the last split point among equal costs,
 * and falls back to uniform when there are no more layers than stages.
 */
#ifndef DS_MODEL_PIPE_H
#define DS_MODEL_PIPE_H

#include <stdint.h>

#include "model/gpt.h"
#include "util/err.h"

enum ds_pipe_kind { DS_PL_EMBED = 0, DS_PL_PRE, DS_PL_LAYER, DS_PL_POST, DS_PL_NORM, DS_PL_HEAD };

struct ds_pipe_layer {
	int kind;            /* enum ds_pipe_kind */
	int layer;           /* transformer layer index (DS_PL_LAYER), else -1 */
	const char *type;    /* DeepSpeed's name of it: "EmbeddingPipe", "ParallelTransformerLayerPipe", ... */
	int64_t params;      /* its parameters on this tensor-parallel rank */
};

/* The layer list of model m (num_layers + 5 entries) into out[0 .. cap);
 * returns its length. */
int ds_pipe_layers(const struct ds_gpt *m, struct ds_pipe_layer *out, int cap);

/* DeepSpeed's partition_uniform and partition_balanced: bounds[0 .. parts]
 * with stage s holding items [bounds[s], bounds[s+1]). */
void ds_pipe_partition_uniform(int n, int parts, int *bounds);
int ds_pipe_partition_balanced(const int64_t *weights, int n, int parts, int *bounds);

/* Partition model m over `stages` by `method` (above; "best", DeepSpeed's
 * config default, is "parameters", PipelineModule's default) into
 * bounds[0 .. stages] over the layer list.  Returns 0, DS_EINVAL (an
 * unknown method, a bad regex, or a type matching no layer: DeepSpeed's
 * "found no valid layers to partition") or DS_ENOMEM. */
int ds_pipe_partition(const struct ds_gpt *m, int stages, const char *method, int *bounds, struct ds_err *err);

/* The model part stage s runs under bounds (a stage of only the
 * parameterless blocks passes its input on unchanged). */
void ds_pipe_stage_part(const struct ds_gpt *m, const int *bounds, int stage, struct ds_gpt_part *part);

#endif
