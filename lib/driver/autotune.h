/* autotune.h - ds-autotune's driver: read the config's "auto" keys and the
 * autotuning section, build and prune the space (lib/tune/autotune.h),
 * launch each trial as a real ds-train run, write results_dir.
 *
 * Memory per rank: for fp32 GPT runs the engine's memory estimator
 * (ds_engine_mem_estimate: what ds-train allocates, padding, comm and
 * gather buffers included) plus a fixed DS_AUTOTUNE_MEM_OVERHEAD for the
 * runtime.  For fp16/bf16, another model family or an
 * autotuning.model_info.num_params override, the formula (spec §2.2 / §7,
 * P params, W ranks, half = fp16/bf16):
 *   params P*(2|4), grads P*(2|4), optimizer P*(16|8); stage >= 1 divides the
 *   optimizer by W, >= 2 also the grads, 3 also the params; plus the
 *   activations ds_gpt_activation_bytes(micro batch) and the overhead.
 * A cuda trial set (the config's dstk.device "cuda"): the estimator's
 * device total (ds_engine_mem_place) against the free memory of device 0
 * shared by the ranks of a node per device, unless --mem-per-rank.
 */
#ifndef DS_DRIVER_AUTOTUNE_H
#define DS_DRIVER_AUTOTUNE_H

#include <stdint.h>
#include <stdio.h>

#include "tune/autotune.h"
#include "util/err.h"

struct ds_autotune_opts {
	const char *config;      /* DeepSpeed JSON with "auto" values and an autotuning section */
	const char *model;       /* model JSON */
	const char *data;        /* --data for ds-train, or NULL */
	const char *launcher;    /* user's launcher prefix (split on blanks), or NULL */
	const char *results_dir; /* overrides autotuning.results_dir, or NULL */
	const char *trainer;     /* ds-train executable, or NULL: next to this program, else PATH */
	uint64_t mem_per_rank;   /* bytes; 0: derived from Slurm or /proc/meminfo */
	int np;                  /* ranks; 0: num_gpus*num_nodes, SLURM_NTASKS, else 1 */
	double trial_timeout;    /* seconds per trial (> 0) */
	uint64_t seed;
	volatile int *stop;      /* set nonzero (e.g. by a signal handler) to kill the running
				  * trial's group and stop: DS_ESIGNAL; NULL for none */
};
#define DS_AUTOTUNE_OPTS_INIT { NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 600.0, 1, NULL }

struct ds_autotune_res {
	struct ds_autotune_space space;
	struct ds_autotune_search_res search;
	int metric;                /* enum ds_autotune_metric */
	int np;
	uint64_t budget;           /* bytes per rank used for pruning */
	char budget_from[64];      /* "--mem-per-rank", "SLURM_MEM_PER_NODE", "MemAvailable" */
	int pruned_mem, pruned_batch, skipped_resume;
	char results_dir[1024];
	char optimal_config[1100]; /* path of ds_config_optimal.json ("" when none) */
	char optimal_cmd[4096];    /* the command of cmd_optimal.txt */
	char auto_keys[512];       /* the "auto" keys resolved, comma-separated */
};

/* Tune: build and prune the space, run the trials, write results_dir.
 * Returns 0 (res->search.best may still be -1: nothing succeeded, which
 * ds_autotune_run reports as DS_ECHECK with the failures' reasons), or
 * DS_EINVAL (bad input), DS_EIO, DS_ENOMEM.  res is large: allocate it. */
int ds_autotune_run(const struct ds_autotune_opts *o, struct ds_autotune_res *res, struct ds_err *err);

/* The summary table (a '#' header, one row per point, '#' footer lines with
 * the pruning counts and the best) to f; 0 or DS_EIO. */
int ds_autotune_print_summary(const struct ds_autotune_res *res, FILE *f, struct ds_err *err);

/* The same rows as CSV with a header line; 0 or DS_EIO. */
int ds_autotune_write_csv(const struct ds_autotune_res *res, FILE *f, struct ds_err *err);

/* The result as one JSON object (metric, ranks, budget, pruning counts, best,
 * optimal config and command, and every experiment) to f; 0 or DS_EIO. */
int ds_autotune_write_json(const struct ds_autotune_res *res, FILE *f, struct ds_err *err);

#endif
