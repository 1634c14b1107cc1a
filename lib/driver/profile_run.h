/* profile_run.h - the work of ds-profile: load a model file, count it,
 * render the profile to the caller's stream.
 */
#ifndef DS_DRIVER_PROFILE_RUN_H
#define DS_DRIVER_PROFILE_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "config/model.h"
#include "model/count.h"
#include "driver/profile.h"
#include "util/err.h"

struct ds_profile_opts {
	const char *model_path;   /* model JSON (gpt or bert family) */
	int batch;                /* micro-batch B >= 1 */
	int seq;                  /* sequence length T >= 1 */
	int module_depth;         /* aggregated profile depth, -1 = DeepSpeed's default */
	int top_modules;          /* >= 1 */
	int detailed;             /* print the module tree */
	int format;               /* enum ds_profile_format */
	int convention;           /* enum ds_count_convention */
	int64_t mlm_tokens;       /* bert: positions the MLM decoder sees, 0 = all */
	int measure;              /* time forward/backward here (gpt family) */
	int warmup, iters;        /* --measure: untimed, then timed iterations */
	int checkpointing;        /* --measure with activation checkpointing */
	/* gpt with tensor / pipeline parallelism: the figures of one rank of
	 * pipeline stage `stage` (DeepSpeed's partition by `partition`), as
	 * DeepSpeed's profiler reports them per GPU, with mp_size = tp x pp */
	int tp, pp, stage;
	const char *partition;    /* NULL: parameters */
	int device;               /* --measure: enum ds_device_kind of compute/compute.h (2: auto) */
};
#define DS_PROFILE_OPTS_INIT { NULL, 0, 0, -1, 1, 0, 0, 0, 0, 0, 2, 3, 0, 1, 1, 0, NULL, 2 }

struct ds_profile_result {
	int64_t params;           /* unique parameters */
	int64_t fwd_macs, fwd_flops, attn_macs;
};

/* Load o->model_path, count one forward step and render the profile to out.
 * Returns 0, DS_EINVAL (bad model file or option: the message names the file
 * and key), DS_EIO (write failed) or DS_ENOMEM. */
int ds_profile_run(const struct ds_profile_opts *o, FILE *out, struct ds_profile_result *res,
		   struct ds_err *err);

/* Measure the GPT of cfg at c's batch x seq on this machine: o->warmup
 * untimed then o->iters timed forward + backward + Adam step iterations
 * (fp32) on the compute backend o->device selects as ds-train's --device
 * does (cpu; cuda: this rank's GPU; auto: cpu until the cuda backend has
 * run on a GPU; the choice is logged).  Fills e->fwd_s, e->bwd_s,
 * e->step_s, e->breakdown, e->recompute_fwd_factor, e->peak_flops (the
 * backend's fp32 GEMM ceiling, same run: sgemm on the CPU, cuBLAS on a
 * GPU) and the latency of c's root and of each layer (segment hooks).
 * Returns 0, DS_EINVAL (bert, bad shape), DS_ENOMEM, or
 * ds_compute_select's codes (DS_ENOTSUP: no CUDA build, DS_EIO: no GPU
 * answers). */
struct ds_profile_measure_opts {
	int warmup, iters;
	int checkpointing;        /* recompute layers in backward: recompute_fwd_factor 1 */
	int device;               /* enum ds_device_kind */
};
int ds_profile_measure(const struct ds_model_config *cfg, const struct ds_profile_measure_opts *o,
		       struct ds_count *c, struct ds_profile_engine *e, struct ds_err *err);

/* Parse a model JSON into *m with lib/config's ds_model_config_load
 * (defaults applied, derived fields filled).  Returns 0 or DS_EINVAL with
 * "FILE: key 'k': ..." in err. */
int ds_profile_load_model(const char *path, struct ds_model_config *m, struct ds_err *err);

#endif
