/* search.h - experiment spaces and search strategies (DESIGN.md: tune),
 * shared by ds-nvme-tune and later ds-autotune.
 *
 * A space is an ordered list of dimensions, each an ascending list of
 * integer values (booleans are 0/1).  A point is one index per dimension.
 * The caller scores a point (higher is better); the search never evaluates
 * a point twice.  Strategies: the full product (grid) and a coarse sweep
 * refined around the best (pattern search), which stops when a round of
 * refinement gains less than a threshold.  Optionally the top few points
 * are measured once more and the best mean wins, so one lucky draw of a
 * noisy measurement does not decide.
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

/* Score the point idx[ndims] into *score.  phase is "grid", "start",
 * "coarse", "refine" or "confirm" (a second measurement of a point).  A negative return stops the search with that code. */
typedef int (*ds_tune_eval_fn)(void *ctx, const int *idx, const char *phase, double *score, struct ds_err *err);

struct ds_tune_search_opts {
	int exhaustive;      /* 1: every point, in key order, last dimension fastest */
	double threshold;    /* refine while a round gains more than this fraction (e.g. 0.02) */
	int max_trials;      /* stop after this many evaluations; 0: no cap */
	double max_seconds;  /* stop starting new rounds after this long; 0: no cap */
	const int *start;    /* starting point, or NULL: the middle of each dimension */
	int confirm;         /* re-measure the best this many points ("confirm"); 0: none */
};
#define DS_TUNE_SEARCH_OPTS_INIT { 0, 0.02, 0, 0, NULL, 0 }

struct ds_tune_search_res {
	int best[DS_TUNE_MAX_DIMS]; /* the best point */
	double best_score;          /* its score (with confirm: the mean of its two) */
	int trials;                 /* evaluations made */
	int capped;                 /* 1: stopped by max_trials or max_seconds */
};

/* Run the search.  Returns 0, or the evaluator's negative code. */
int ds_tune_search(const struct ds_tune_space *s, const struct ds_tune_search_opts *o, ds_tune_eval_fn f,
		   void *ctx, struct ds_tune_search_res *r, struct ds_err *err);

#endif
