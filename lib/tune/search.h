/* search.h - experiment spaces and the one search loop of dstk (DESIGN.md:
 * tune), shared by ds-nvme-tune and ds-autotune.
 *
 * A space is an ordered list of dimensions, each an ascending list of
 * integer values (booleans are 0/1).  A point is one index per dimension.
 * The caller scores a point (higher is better unless the search
 * minimises; NaN: the trial failed).
 *
 * ds_tune_run is the loop every search runs: a strategy proposes points
 * one at a time; the loop evaluates each at most once (a point seen before
 * keeps its score), counts the trials, keeps the best, and stops when the
 * strategy is done, at max_trials or max_seconds (checked before each new
 * evaluation), or - early stopping - when early_stop trials in a row did
 * not improve on the best by more than min_gain (relative).  Optionally
 * the top few points are then measured once more and the best mean wins,
 * so one lucky draw of a noisy measurement does not decide.
 *
 * Strategies: here the full product (grid) and a coarse sweep refined
 * around the best (pattern search), which stops when a round of refinement
 * gains less than a threshold - ds_tune_search runs either on a space.
 * ds-autotune's gridsearch, random and model_based orders over its list of
 * experiments are strategies of lib/tune/autotune.c on the same loop.
 */
#ifndef DS_TUNE_SEARCH_H
#define DS_TUNE_SEARCH_H

#include <stdint.h>

#include "util/err.h"

#define DS_TUNE_MAX_DIMS 16
#define DS_TUNE_MAX_VALUES 64

struct ds_tune_dim {
	char name[48];
	int n;                          /* values, >= 1 */
	int64_t v[DS_TUNE_MAX_VALUES];  /* ascending, distinct */
};

struct ds_tune_space {
	int ndims;
	struct ds_tune_dim d[DS_TUNE_MAX_DIMS];
};

/* Append a dimension; values are sorted and deduplicated.  Returns 0 or
 * DS_EINVAL (no values, too many, too many dimensions, duplicate name). */
int ds_tune_space_add(struct ds_tune_space *s, const char *name, const int64_t *v, int n, struct ds_err *err);
/* Index of the dimension called name, or -1. */
int ds_tune_space_find(const struct ds_tune_space *s, const char *name);
/* Points in the full product (saturates at UINT64_MAX). */
uint64_t ds_tune_space_size(const struct ds_tune_space *s);
/* Index in dimension d of the value nearest to v. */
int ds_tune_dim_nearest(const struct ds_tune_dim *d, int64_t v);

/* Score the point idx[ndims] into *score (NaN: the trial failed; it
 * counts, and is never the best).  phase is the strategy's name for it:
 * "grid", "start", "coarse", "refine", "confirm" (a second measurement of
 * a point), or ds-autotune's.  A negative return stops the search with
 * that code. */
typedef int (*ds_tune_eval_fn)(void *ctx, const int *idx, const char *phase, double *score, struct ds_err *err);

struct ds_tune_search_opts {
	/* ds_tune_search's strategy */
	int exhaustive;      /* 1: every point, in key order, last dimension fastest */
	double threshold;    /* refine while a round gains more than this fraction (e.g. 0.02) */
	/* the loop */
	int max_trials;      /* stop before a new evaluation once this many were made; 0: no cap */
	double max_seconds;  /* stop before a new evaluation after this long; 0: no cap */
	const int *start;    /* pattern: starting point, or NULL: the middle of each dimension */
	int confirm;         /* re-measure the best this many points ("confirm"); 0: none */
	int early_stop;      /* stop when this many trials in a row gained <= min_gain; 0: never */
	double min_gain;     /* relative gain over the best that restarts the early-stop count */
	int minimize;        /* lower scores are better */
};
#define DS_TUNE_SEARCH_OPTS_INIT { 0, 0.02, 0, 0, NULL, 0, 0, 0, 0 }

struct ds_tune_search_res {
	int best[DS_TUNE_MAX_DIMS]; /* the best point (valid when have_best) */
	double best_score;          /* its score (with confirm: the mean of its two) */
	int trials;                 /* evaluations made */
	int capped;                 /* 1: stopped by max_trials or max_seconds */
	int stopped_early;          /* 1: stopped by early_stop */
	int have_best;              /* 0: no trial succeeded */
};

/* What a strategy sees of the search so far. */
struct ds_tune_progress {
	int trials;                 /* evaluations made */
	int have_best;
	const int *best;            /* the best point (when have_best) */
	double best_score;
};

/* A strategy: next() writes the next point to try into idx and names its
 * phase (a static string); returns 1, or 0 when it has nothing more. */
struct ds_tune_strategy {
	int (*next)(void *self, const struct ds_tune_progress *pr, int *idx, const char **phase);
	void *self;
};

/* The search loop over points of ndims indices (see the top of this
 * file); r is reset first.  Returns 0, or the evaluator's negative code. */
int ds_tune_run(const struct ds_tune_strategy *st, int ndims, const struct ds_tune_search_opts *o,
		ds_tune_eval_fn f, void *ctx, struct ds_tune_search_res *r, struct ds_err *err);

/* Grid (o->exhaustive) or pattern search over s with ds_tune_run.  Returns
 * 0, DS_EINVAL (no dimensions), or the evaluator's negative code. */
int ds_tune_search(const struct ds_tune_space *s, const struct ds_tune_search_opts *o, ds_tune_eval_fn f,
		   void *ctx, struct ds_tune_search_res *r, struct ds_err *err);

#endif
