/* search.c - the search loop (ds_tune_run) and its grid and
 * coarse-then-refine pattern strategies (see search.h).
 *
 * Grid: every point of the product, the last dimension fastest.
 * Pattern: from the start point, sweep each dimension in turn over its
 * first, middle and last value (every value of a dimension with at most
 * 3), keeping the best so far (coarse).  Then try every neighbour at
 * distance `step` along each dimension (step starts at a quarter of the
 * longest dimension); move when a round beats the best by more than the
 * threshold, else halve the step; stop when step 1 brings no such gain
 * (refine).  Confirm: measure the top `confirm` points again; the best
 * mean wins.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune/search.h"
#include "util/timer.h"

int ds_tune_space_add(struct ds_tune_space *s, const char *name, const int64_t *v, int n, struct ds_err *err)
{
	struct ds_tune_dim *d;

	if (s->ndims >= DS_TUNE_MAX_DIMS)
		return ds_err_set(err, DS_EINVAL, "more than %d dimensions to tune", DS_TUNE_MAX_DIMS);
	if (n < 1 || n > DS_TUNE_MAX_VALUES)
		return ds_err_set(err, DS_EINVAL, "'%s': %d values, expected 1 to %d", name, n, DS_TUNE_MAX_VALUES);
	if (ds_tune_space_find(s, name) >= 0)
		return ds_err_set(err, DS_EINVAL, "'%s' given twice", name);
	d = &s->d[s->ndims];
	memset(d, 0, sizeof(*d));
	strncpy(d->name, name, sizeof(d->name) - 1);
	for (int i = 0; i < n; i++) { /* insertion sort, dropping duplicates */
		int j = d->n;
		int dup = 0;
		for (int k = 0; k < d->n; k++)
			dup |= d->v[k] == v[i];
		if (dup)
			continue;
		while (j > 0 && d->v[j - 1] > v[i]) {
			d->v[j] = d->v[j - 1];
			j--;
		}
		d->v[j] = v[i];
		d->n++;
	}
	s->ndims++;
	return 0;
}

int ds_tune_space_find(const struct ds_tune_space *s, const char *name)
{
	for (int i = 0; i < s->ndims; i++)
		if (!strcmp(s->d[i].name, name))
			return i;
	return -1;
}

uint64_t ds_tune_space_size(const struct ds_tune_space *s)
{
	uint64_t n = 1;
	for (int i = 0; i < s->ndims; i++) {
		if (n > UINT64_MAX / (uint64_t)s->d[i].n)
			return UINT64_MAX;
		n *= (uint64_t)s->d[i].n;
	}
	return n;
}

int ds_tune_dim_nearest(const struct ds_tune_dim *d, int64_t v)
{
	int best = 0;
	for (int i = 1; i < d->n; i++)
		if (llabs(d->v[i] - v) < llabs(d->v[best] - v))
			best = i;
	return best;
}

/* Points already scored. */
struct memo {
	int nd, n, cap;
	int *idx;       /* [cap][nd] */
	double *score;  /* [cap] */
};

static int memo_find(const struct memo *m, const int *p)
{
	for (int i = 0; i < m->n; i++)
		if (!memcmp(m->idx + (size_t)i * m->nd, p, sizeof(int) * (size_t)m->nd))
			return i;
	return -1;
}

static int memo_add(struct memo *m, const int *p, double score, struct ds_err *err)
{
	if (m->n == m->cap) {
		int cap = m->cap ? 2 * m->cap : 64;
		int *idx = realloc(m->idx, sizeof(int) * (size_t)cap * (size_t)m->nd);
		double *sc = realloc(m->score, sizeof(double) * (size_t)cap);
		if (idx)
			m->idx = idx;
		if (sc)
			m->score = sc;
		if (!idx || !sc)
			return ds_err_set(err, DS_ENOMEM, "tune: out of memory");
		m->cap = cap;
	}
	memcpy(m->idx + (size_t)m->n * m->nd, p, sizeof(int) * (size_t)m->nd);
	m->score[m->n++] = score;
	return 0;
}

/* ---- the loop ------------------------------------------------------------ */

struct loop {
	const struct ds_tune_search_opts *o;
	ds_tune_eval_fn f;
	void *arg;
	struct ds_tune_search_res *r;
	struct memo m;
	double t0;
	int best_trial;  /* the trial whose gain last restarted the early-stop count */
};

/* a better than b (NaN is never better; anything beats NaN) */
static int better(const struct loop *c, double a, double b)
{
	if (isnan(a))
		return 0;
	if (isnan(b))
		return 1;
	return c->o->minimize ? a < b : a > b;
}

/* a ahead of b in the search's direction (a plain comparison: NaN is never
 * ahead, and nothing is ahead of NaN) */
static int ahead(const struct loop *c, double a, double b)
{
	return c->o->minimize ? a < b : a > b;
}

/* Before a new evaluation: at max_trials or past max_seconds? */
static int capped(struct loop *c)
{
	if ((c->o->max_trials > 0 && c->r->trials >= c->o->max_trials) ||
	    (c->o->max_seconds > 0 && ds_now() - c->t0 > c->o->max_seconds)) {
		c->r->capped = 1;
		return 1;
	}
	return 0;
}

/* Before asking for a point: early_stop trials without a gain beyond
 * min_gain (a search at its trial cap is capped, not stopped early). */
static int stops_early(struct loop *c)
{
	const struct ds_tune_search_opts *o = c->o;
	if (o->early_stop <= 0 || (o->max_trials > 0 && c->r->trials >= o->max_trials) ||
	    c->r->trials < c->best_trial + o->early_stop)
		return 0;
	c->r->stopped_early = 1;
	return 1;
}

/* Score a new point and keep the best (a failed trial, NaN, never is); a
 * gain beyond min_gain over the previous best restarts the early-stop
 * count. */
static int evaluate(struct loop *c, const int *p, const char *phase, struct ds_err *err)
{
	struct ds_tune_search_res *r = c->r;
	double score = NAN;
	DS_TRY(c->f(c->arg, p, phase, &score, err));
	DS_TRY(memo_add(&c->m, p, score, err));
	r->trials++;
	if (!isnan(score) && (!r->have_best || better(c, score, r->best_score))) {
		double g = c->o->min_gain, margin = c->o->minimize ? r->best_score * (1 - g) : r->best_score * (1 + g);
		if (!r->have_best || better(c, score, margin))
			c->best_trial = r->trials;
		r->best_score = score;
		memcpy(r->best, p, sizeof(int) * (size_t)c->m.nd);
		r->have_best = 1;
	}
	return 0;
}

/* Second measurement of the top-k points (highest scores, or lowest when
 * minimising); the best mean becomes r->best. */
static int confirm(struct loop *c, int k, struct ds_err *err)
{
	int nd = c->m.nd, *done = calloc((size_t)c->m.n, sizeof(int));
	double best = 0;
	int have = 0;

	if (!done)
		return ds_err_set(err, DS_ENOMEM, "tune: out of memory");
	for (int round = 0; round < k && round < c->m.n; round++) {
		int top = -1;
		double again;
		for (int i = 0; i < c->m.n; i++)
			if (!done[i] && !isnan(c->m.score[i]) && (top < 0 || ahead(c, c->m.score[i], c->m.score[top])))
				top = i;
		if (top < 0)
			break;
		done[top] = 1;
		int rc = c->f(c->arg, c->m.idx + (size_t)top * nd, "confirm", &again, err);
		if (rc < 0) {
			free(done);
			return rc;
		}
		c->r->trials++;
		double mean = 0.5 * (c->m.score[top] + again);
		if (!have || ahead(c, mean, best)) {
			best = mean;
			have = 1;
			memcpy(c->r->best, c->m.idx + (size_t)top * nd, sizeof(int) * (size_t)nd);
		}
	}
	free(done);
	if (have)
		c->r->best_score = best;
	return 0;
}

int ds_tune_run(const struct ds_tune_strategy *st, int ndims, const struct ds_tune_search_opts *o,
		ds_tune_eval_fn f, void *arg, struct ds_tune_search_res *r, struct ds_err *err)
{
	struct loop c = { .o = o, .f = f, .arg = arg, .r = r, .m = { .nd = ndims }, .t0 = ds_now() };
	int p[DS_TUNE_MAX_DIMS], rc = 0;

	memset(r, 0, sizeof(*r));
	for (;;) {
		const struct ds_tune_progress pr = { r->trials, r->have_best, r->best, r->best_score };
		const char *phase = NULL;
		if (stops_early(&c) || !st->next(st->self, &pr, p, &phase))
			break;
		if (memo_find(&c.m, p) >= 0)
			continue;  /* scored before: the strategy reads the best from pr */
		if (capped(&c))
			break;
		if ((rc = evaluate(&c, p, phase, err)) < 0)
			break;
	}
	if (rc >= 0 && o->confirm > 0 && c.m.n > 1)
		rc = confirm(&c, o->confirm, err);
	free(c.m.idx);
	free(c.m.score);
	return rc < 0 ? rc : 0;
}

/* ---- grid ---------------------------------------------------------------- */

struct grid {
	const struct ds_tune_space *s;
	int p[DS_TUNE_MAX_DIMS];
	int done;
};

static int grid_next(void *self, const struct ds_tune_progress *pr, int *idx, const char **phase)
{
	struct grid *g = self;
	const struct ds_tune_space *s = g->s;
	(void)pr;
	if (g->done)
		return 0;
	memcpy(idx, g->p, sizeof(int) * (size_t)s->ndims);
	*phase = "grid";
	int d = s->ndims - 1;
	while (d >= 0 && ++g->p[d] == s->d[d].n)
		g->p[d--] = 0;
	g->done = d < 0;
	return 1;
}

/* ---- pattern ------------------------------------------------------------- */

enum { PAT_START, PAT_COARSE, PAT_REFINE, PAT_DONE };

struct pattern {
	const struct ds_tune_space *s;
	double threshold;
	int stage;
	int start[DS_TUNE_MAX_DIMS];
	int d, k;                     /* coarse: dimension and which of first/middle/last */
	int step;                     /* refine: the neighbours' distance */
	int base[DS_TUNE_MAX_DIMS];   /* refine: the round's centre and its score */
	double base_score;
	int rd, dir;                  /* refine: the next neighbour's dimension and direction */
};

static void pattern_init(struct pattern *t, const struct ds_tune_space *s, const struct ds_tune_search_opts *o)
{
	memset(t, 0, sizeof(*t));
	t->s = s;
	t->threshold = o->threshold;
	t->step = 1;
	for (int d = 0; d < s->ndims; d++) {
		t->start[d] = o->start ? o->start[d] : s->d[d].n / 2;
		if (t->start[d] < 0 || t->start[d] >= s->d[d].n)
			t->start[d] = s->d[d].n / 2;
		if ((s->d[d].n - 1) / 4 > t->step)
			t->step = (s->d[d].n - 1) / 4;
	}
}

/* The best so far, or the start point while every trial failed. */
static const int *pattern_best(const struct pattern *t, const struct ds_tune_progress *pr)
{
	return pr->have_best ? pr->best : t->start;
}

static void pattern_round(struct pattern *t, const struct ds_tune_progress *pr)
{
	memcpy(t->base, pattern_best(t, pr), sizeof(int) * (size_t)t->s->ndims);
	t->base_score = pr->best_score;
	t->rd = 0;
	t->dir = -1;
}

static int pattern_next(void *self, const struct ds_tune_progress *pr, int *p, const char **phase)
{
	struct pattern *t = self;
	const struct ds_tune_space *s = t->s;
	const int nd = s->ndims;
	for (;;) {
		switch (t->stage) {
		case PAT_START:
			memcpy(p, t->start, sizeof(int) * (size_t)nd);
			*phase = "start";
			t->stage = PAT_COARSE;
			return 1;
		case PAT_COARSE:
			/* one dimension at a time over first / middle / last of
			 * the best so far */
			if (t->d == nd) {
				t->stage = PAT_REFINE;
				pattern_round(t, pr);
				continue;
			}
			int n = s->d[t->d].n, cand[3] = { 0, (n - 1) / 2, n - 1 };
			memcpy(p, pattern_best(t, pr), sizeof(int) * (size_t)nd);
			p[t->d] = cand[t->k];
			if (++t->k == 3) {
				t->k = 0;
				t->d++;
			}
			*phase = "coarse";
			return 1;
		case PAT_REFINE:
			/* the neighbours of the round's centre at distance step */
			while (t->rd < nd) {
				memcpy(p, t->base, sizeof(int) * (size_t)nd);
				p[t->rd] += t->dir * t->step;
				int inside = p[t->rd] >= 0 && p[t->rd] < s->d[t->rd].n;
				if (t->dir < 0) {
					t->dir = 1;
				} else {
					t->dir = -1;
					t->rd++;
				}
				if (inside) {
					*phase = "refine";
					return 1;
				}
			}
			double gain = t->base_score > 0 ? (pr->best_score - t->base_score) / t->base_score
							: (pr->best_score > t->base_score ? 1.0 : 0.0);
			if (gain <= t->threshold) {
				if (t->step == 1) {
					t->stage = PAT_DONE;  /* no gain worth the time at the finest step */
					continue;
				}
				t->step /= 2;
			}
			pattern_round(t, pr);  /* moved: around the new best; else closer */
			continue;
		default:
			return 0;
		}
	}
}

int ds_tune_search(const struct ds_tune_space *s, const struct ds_tune_search_opts *o, ds_tune_eval_fn f,
		   void *arg, struct ds_tune_search_res *r, struct ds_err *err)
{
	struct grid g = { .s = s };
	struct pattern t;
	struct ds_tune_strategy st = { grid_next, &g };

	memset(r, 0, sizeof(*r));
	if (s->ndims < 1)
		return ds_err_set(err, DS_EINVAL, "tune: nothing to search (no dimensions)");
	if (!o->exhaustive) {
		pattern_init(&t, s, o);
		st = (struct ds_tune_strategy){ pattern_next, &t };
	}
	return ds_tune_run(&st, s->ndims, o, f, arg, r, err);
}
