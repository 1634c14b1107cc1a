/* neox.h - GPT-NeoX YAML configs (ds-train --conf a.yml b.yml) read as
 * NeoX's launcher reads them, mapped onto dstk's three inputs: a DeepSpeed
 * config, a model config and ds-train's run flags.
 *
 * Files are read in order (YAML with comments, True/False, trailing
 * commas); a key given in two files is an error, as in NeoX's from_ymls;
 * '-' and '_' in names are alike.  Every parameter of NeoX's table is
 * applied (to the DeepSpeed config, the model or a run flag), accepted as
 * having no effect on the computation (launcher and kernel-fusion
 * settings), or refused with one line naming it and why, unless it is
 * switched off or at its default.  model_parallel_size and
 * pipe_parallel_size become ds-train's --tensor-model-parallel-size and
 * --pipeline-model-parallel-size (NeoX's 0 and 1 stages are both one),
 * pipe_partition_method (NeoX's default "type:transformer|mlp")
 * pipeline.partition, and the vocabulary is padded to a multiple of
 * make_vocab_size_divisible_by x model_parallel_size as NeoX pads it.
 * NeoX's learning-rate schedule becomes
 * dstk.lr_decay_style / lr_warmup_iters / lr_decay_iters / min_lr, which
 * ds-train computes as NeoX's AnnealingLR does.
 */
#ifndef DS_CONFIG_NEOX_H
#define DS_CONFIG_NEOX_H

#include <stdint.h>

#include "util/err.h"

struct json_t;

struct ds_neox {
	struct json_t *ds;     /* the DeepSpeed config (owned) */
	struct json_t *model;  /* the model config (owned) */
	char *name;            /* "a.yml+b.yml", for messages */
	char *ds_text, *model_text;  /* the two configs as JSON text, when a caller keeps them here (freed on release) */
	/* run flags; 0/NULL: not given */
	int64_t train_iters, save_interval, keep_last_n, eval_interval, eval_iters, log_interval, exit_interval;
	int have_seed, no_load_optim;
	int tp, pp;            /* model_parallel_size, pipe_parallel_size (as stages: 0 is 1) */
	uint64_t seed;
	char *save, *load, *data, *valid_data, *test_data, *split;  /* data: a path or a blend "W1 P1 W2 P2 ..." */
	int weight_by_docs;    /* weight_by_num_documents */
	double alpha;          /* weighted_sampler_alpha (NeoX's default 1) */
	/* one line per parameter, "name: status: detail"; status is applied,
	 * no effect, accepted (off or at its default) or not read */
	char **lines;
	int nlines;
};

/* Read and map files[0..n-1].  0; DS_EINVAL (every refused or bad
 * parameter of the files logged as its own line when there are several,
 * err holds the one or a count), DS_ENOTSUP without libyaml, DS_ENOMEM.
 * lenient: unknown parameters are warnings. */
int ds_neox_load(const char *const *files, int n, int lenient, struct ds_neox *nx, struct ds_err *err);
void ds_neox_release(struct ds_neox *nx);  /* accepts a zeroed struct */

#endif
