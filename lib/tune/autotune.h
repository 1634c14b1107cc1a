/* autotune.h - ds-autotune's space, memory model and search (DESIGN.md: tune).
 *
 * The space is every (ZeRO stage, micro batch) the config leaves to the tuner
 * ("auto", a stage "all" or a list).  Micro batches: the powers of two from
 * min to max plus max itself, and DeepSpeed's list near the largest micro
 * batch each stage fits (spec §2.3).  A point whose estimated bytes per rank
 * exceed the budget, or whose batch breaks the triad, is pruned before
 * anything runs and keeps its reason.
 *
 * Memory per rank is the driver's estimate (lib/driver/autotune.h); the
 * formula for DeepSpeed's model states is ds_autotune_model_state_bytes.
 *
 * Tuners (each trial yields a metric or fails; failures count as trials):
 *   gridsearch   the baseline order: stages ascending (DeepSpeed's), within a
 *                stage the largest micro batch first, then descending
 *   random       the same points in a seeded random order
 *   model_based  cost model: seconds per optimizer step t = r_s * (a + b*F),
 *                F = the analytic training flops one rank does per optimizer
 *                step (ds_count_train_flops x gas), a and b a least-squares
 *                fit over the successful trials, r_s the stage's mean ratio
 *                of measured to fitted time (1 for a stage not tried yet).
 *                The two first trials follow the baseline order; then the
 *                untried point with the best predicted metric runs, except
 *                that every fifth pick is a seeded random one (exploration).
 *                A trial killed for memory marks every point of the same or
 *                a lower stage with an equal or larger micro batch infeasible.
 * All stop after tuner_num_trials trials, or when tuner_early_stopping
 * trials in a row have not improved on the best by more than
 * DS_AUTOTUNE_MIN_GAIN (relative).  A smaller gain still makes that trial the
 * best, but does not restart the count: two measurements of the same plateau
 * differ by run-to-run noise (1-3% on a shared node), and DeepSpeed's rule
 * (any gain restarts it) lets such noise prolong the search.  Latency is
 * minimised, throughput and flops maximised.
 */
#ifndef DS_TUNE_AUTOTUNE_H
#define DS_TUNE_AUTOTUNE_H

#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#define DS_AUTOTUNE_MAX_POINTS 512
#define DS_AUTOTUNE_MIN_GAIN 0.02   /* early stopping: relative gain that counts */
#define DS_AUTOTUNE_MEM_OVERHEAD (32ull << 20) /* runtime, buffers, data: bytes */

enum ds_autotune_metric { DS_AT_THROUGHPUT = 0, DS_AT_LATENCY, DS_AT_FLOPS };
enum ds_autotune_tuner { DS_AT_GRID = 0, DS_AT_RANDOM, DS_AT_MODEL };
enum ds_autotune_status { DS_AT_PENDING = 0, DS_AT_PRUNED, DS_AT_OK, DS_AT_FAILED, DS_AT_INFEASIBLE };

/* Bytes of parameters, gradients and optimizer state per rank (no
 * activations) for P params at a ZeRO stage over W ranks. */
double ds_autotune_model_state_bytes(double P, int half, int stage, int W);

/* DeepSpeed's micro-batch list (spec §2.3) for [mn, mx], n sizes, and
 * tbs_pg = the per-rank batch budget (0: mx * gas with gas 1).  Writes at most
 * cap values ascending into out; returns their count. */
int ds_autotune_mbs_list(int mn, int mx, int n, int64_t tbs_pg, int *out, int cap);

/* 1 when metric a is better than b for this metric (latency: smaller). */
int ds_autotune_better(int metric, double a, double b);

struct ds_autotune_point {
	int stage, mb, gas;
	int64_t tbs;          /* train_batch_size = mb * gas * W */
	double mem;           /* estimated bytes per rank */
	double flops;         /* analytic training flops per rank per optimizer step */
	int status;           /* enum ds_autotune_status */
	char why[160];        /* pruned / failed / infeasible: the reason */
	double metric;        /* OK: the chosen metric */
	int order;            /* 1-based trial number; 0 not run */
	int oom;              /* FAILED: killed for memory (signal 9 / exit 137) */
};

struct ds_autotune_space {
	int n;
	struct ds_autotune_point p[DS_AUTOTUNE_MAX_POINTS];
};

/* Evaluate point i: 0 with *metric set (or NAN and p->status DS_AT_FAILED and
 * p->why filled when the trial failed); a negative code stops the search. */
typedef int (*ds_autotune_eval_fn)(void *ctx, struct ds_autotune_space *s, int i, double *metric,
				   struct ds_err *err);

struct ds_autotune_search_opts {
	int tuner;        /* enum ds_autotune_tuner */
	int metric;       /* enum ds_autotune_metric */
	int num_trials;   /* >= 1 */
	int early_stop;   /* >= 1 */
	uint64_t seed;    /* random / exploration order */
};

struct ds_autotune_search_res {
	int best;         /* index into the space, -1 when nothing succeeded */
	int trials;       /* trials run (failed included) */
	int stopped_early;
};

/* The baseline (gridsearch) order of the points that are not pruned:
 * writes their indices into out (cap entries); returns the count. */
int ds_autotune_order(const struct ds_autotune_space *s, int *out, int cap);

/* Run the search over s, calling f for each trial; marks points OK/FAILED,
 * their order, and INFEASIBLE ones (model_based).  Returns 0 or f's code. */
int ds_autotune_search(struct ds_autotune_space *s, const struct ds_autotune_search_opts *o,
		       ds_autotune_eval_fn f, void *ctx, struct ds_autotune_search_res *r, struct ds_err *err);

/* Metric name ("throughput", "latency", "flops"). */
const char *ds_autotune_metric_name(int metric);

#endif
