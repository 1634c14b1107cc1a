/* profile.h - DeepSpeed's flops-profiler report, rendered from a count tree.
 *
 * One row model (summary rows + module rows) rendered once as DeepSpeed's
 * text layout (spec/deepspeed-tools.md §4: summary, aggregated profile by
 * depth, detailed module tree), as JSON or as CSV.  The caller owns the
 * stream: ds-profile passes stdout or its -o file, the trainer its own.
 *
 * The trainer at flops_profiler.profile_step (on rank 0):
 *   ds_count_model(&model_cfg, &(struct ds_count_opts){ mbs, T, DS_COUNT_CURRENT, 0 }, &c, err);
 *   c.nodes[0].latency_s = fwd_s;            (the measured forward)
 *   struct ds_profile_view v = { DS_PROFILE_TEXT, profile_step, module_depth, top_modules, detailed, NULL };
 *   struct ds_profile_engine e = { world, dp, mp, mbs, fwd_s, wall_clock_breakdown,
 *                                  bwd_s, step_s, recompute_fwd_factor, 0 };
 *   ds_profile_render(&c, &v, &e, output_file ? f : stdout, err);  ds_count_release(&c);
 */
#ifndef DS_DRIVER_PROFILE_H
#define DS_DRIVER_PROFILE_H

#include <stddef.h>
#include <stdio.h>

#include "model/count.h"
#include "util/err.h"

/* DeepSpeed's number formats, f"{round(x / magnitude, 2):g} {unit}" with T,
 * G, M, K, '' (x >= 1 or x == 0), m, u.  Each writes into buf (n >= 32) and
 * returns buf. */
char *ds_profile_number(double x, char *buf, size_t n);    /* "336.23 M", "0 " */
char *ds_profile_macs(double x, char *buf, size_t n);      /* "3.14 TMACs" */
char *ds_profile_flops(double x, char *buf, size_t n);     /* rate: "81.9 TFLOPS" */
char *ds_profile_params(double x, char *buf, size_t n);    /* "336.23 M", "1.5 B", "0" */
char *ds_profile_duration(double s, char *buf, size_t n);  /* "76.67 ms", "34.09 us" */

enum ds_profile_format { DS_PROFILE_TEXT = 0, DS_PROFILE_JSON = 1, DS_PROFILE_CSV = 2 };

/* What to print. */
struct ds_profile_view {
	int format;           /* enum ds_profile_format */
	int profile_step;     /* "Profile Summary at step N" */
	int module_depth;     /* depths of the aggregated profile; -1: DeepSpeed's
			       * default, every level but the deepest */
	int top_modules;      /* classes per depth and metric, >= 1 */
	int detailed;         /* print the module tree */
	const char *model;    /* model file, echoed in JSON (may be NULL) */
};
#define DS_PROFILE_VIEW_INIT { DS_PROFILE_TEXT, 1, -1, 1, 1, NULL }

/* Measured figures and engine-only lines; every field 0 when unknown. */
struct ds_profile_engine {
	int world_size;       /* > 0: print the four engine lines (as under ds-train) */
	int dp_size, mp_size, micro_batch;
	double fwd_s;         /* forward latency of the profiled step (s) */
	int breakdown;        /* bwd/step/iter lines (wall_clock_breakdown or --measure) */
	double bwd_s, step_s;
	double recompute_fwd_factor;  /* bwd = (2 + f) x fwd flops */
	double peak_flops;    /* sgemm ceiling measured in the same run (FLOP/s): MFU line */
};

/* Render the profile of c (root = node 0; node latency_s filled where
 * measured) to out.  e may be NULL (analytic only, standalone).  Returns 0,
 * DS_EIO when writing fails, DS_ENOMEM. */
int ds_profile_render(const struct ds_count *c, const struct ds_profile_view *v,
		      const struct ds_profile_engine *e, FILE *out, struct ds_err *err);

#endif
