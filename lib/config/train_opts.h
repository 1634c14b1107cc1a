/* train_opts.h - ds-train's command line as a struct, and its --check.
 *
 * tools/ds-train.c fills struct ds_train_opts with getopt_long; the
 * trainer (a later layer) takes the same struct.  ds_train_check loads and
 * validates both config files and prints the effective configuration.
 */
#ifndef DS_CONFIG_TRAIN_OPTS_H
#define DS_CONFIG_TRAIN_OPTS_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "util/err.h"

struct ds_train_opts {
	const char *deepspeed_config;  /* --deepspeed_config FILE (NULL: share/configs/default.json) */
	const char *model;             /* --model FILE (NULL: share/models/gpt-tiny.json) */
	int world_size;                /* --world-size N for --check: ranks of the job (0: the job's, 1 alone) */
	int tp, pp;                    /* --tensor-model-parallel-size, --pipeline-model-parallel-size (0: not given, 1) */
	int lenient;                   /* --lenient: unknown DeepSpeed keys are warnings */
	int check;                     /* --check: validate and print, do not train */
	int json;                      /* --json: --check prints JSON */
	int64_t train_iters;           /* --train-iters (0: until the schedule's total or 1 epoch) */
	const char *save;              /* --save DIR */
	int64_t save_interval;         /* --save-interval (0: only at the end) */
	int64_t keep_last_n;           /* --keep-last-n-checkpoints (0: keep all) */
	const char *load;              /* --load DIR or "auto" (newest valid tag under --save) */
	int no_load_optim;             /* --no-load-optim */
	uint64_t seed;                 /* --seed (default 1234) */
	const char *data;              /* --data PATH or blend "W1 P1 W2 P2 ..." (NULL: the bundled corpus) */
	const char *valid_data;        /* --valid-data PATH */
	const char *test_data;         /* --test-data PATH: evaluated after the last step */
	int data_weight_by_docs;       /* blend weights from document counts (NeoX's weight_by_num_documents) */
	double data_alpha;             /* and its weighted_sampler_alpha */
	const char *split;             /* --split "969,30,1" style train/valid weights */
	int64_t eval_interval;         /* --eval-interval (0: off) */
	int64_t eval_iters;            /* --eval-iters (default 10) */
	int64_t log_interval;          /* --log-interval (0: steps_per_print) */
	int64_t exit_interval;         /* --exit-interval (0: off) */
	double peak_gflops;            /* --peak-gflops (0: measure sgemm at start-up) */
	const char *metrics_json;      /* --metrics-json FILE */
	const char *device;            /* --device cpu|cuda|auto (NULL: dstk.device) */
	/* the Megatron-style flags that resolve "auto" values (--lr,
	 * --micro-batch-size, --global-batch-size, --lr-warmup-iters,
	 * --clip-grad, --weight-decay, --adam-beta1/2, --adam-eps, --fp16,
	 * --bf16; --train-iters is train_iters above) */
	struct ds_config_auto autos;
	uint64_t mem_per_rank;         /* --mem-per-rank: budget for micro batch "auto" (0: Slurm's or MemAvailable) */
	/* --conf A.yml [B.yml ...]: GPT-NeoX configs (ds_train_opts_neox
	 * turns them into the two texts below and the run flags) */
	const char **conf;
	int nconf;
	const char *deepspeed_json, *model_json;  /* config texts instead of the files (NULL: the files) */
	const char *conf_name;                    /* the NeoX files, named in messages and --check */
	const char *deepspeed_name, *model_name;  /* what each text is called in messages (--conf: conf_name) */
	char **conf_lines;                        /* what became of each NeoX parameter, for --check */
	int conf_nlines;
};

/* Fill o with the defaults above. */
void ds_train_opts_init(struct ds_train_opts *o);

/* --deepspeed_config and --model that are not regular files (a pipe, a
 * shell's <(jq ... cfg.json)) can be read only once, and a run reads its
 * configs more than once: read each such one now into *keep[0] (the
 * DeepSpeed config) and *keep[1] (the model), set o's texts and names, and
 * release with free().  0; DS_EIO naming the path when one cannot be read,
 * DS_EINVAL when it is over 64 MiB. */
int ds_train_opts_read_pipes(struct ds_train_opts *o, char *keep[2], struct ds_err *err);

/* --conf: read o->conf (GPT-NeoX YAML, lib/config/neox.h) and set o's
 * config texts and the run flags the files give that the command line
 * left at their defaults.  The texts live in *keep (release with
 * ds_neox_release after the run).  0, DS_EINVAL, DS_ENOTSUP (no libyaml). */
struct ds_neox;
int ds_train_opts_neox(struct ds_train_opts *o, struct ds_neox *keep, struct ds_err *err);

/* Default config paths: installed share dir, or the source tree's when the
 * installed one is absent (running from a build directory). */
const char *ds_train_default_config(void);
const char *ds_train_default_model(void);

/* --check: load both files, print the effective DeepSpeed config, the batch
 * triad and the model config to out (JSON when o->json).  0, DS_EINVAL
 * (err names the file and key), DS_EIO or DS_ENOMEM. */
int ds_train_check(const struct ds_train_opts *o, FILE *out, struct ds_err *err);

/* The same, where a layer above adds to the JSON: the members of the
 * object `extra` (borrowed, may be NULL; ignored for text) are set on the
 * printed root object.  Text output ends with the model config, so the
 * caller may print more after it. */
struct json_t;
int ds_train_check_extra(const struct ds_train_opts *o, FILE *out, struct json_t *extra, struct ds_err *err);

#endif
