/* search.c - grid and coarse-then-refine pattern search (see search.h).
 *
 * Coarse: from the start point, sweep each dimension in turn over its
 * first, middle and last value (every value of a dimension with at most 3),
 * keeping the best so far.  Refine: try every neighbour at distance `step`
 * along each dimension (step starts at a quarter of the longest dimension);
 * move when a neighbour beats the best by more than the threshold, else
 * halve the step; stop when step 1 brings no such gain.
 * Confirm: measure the top `confirm` points again; the best mean wins.
 */
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

struct ctx {
	const struct ds_tune_space *s;
	const struct ds_tune_search_opts *o;
	ds_tune_eval_fn f;
	void *arg;
	struct ds_tune_search_res *r;
	struct memo m;
	double t0;
	int have_best;
};

static int capped(struct ctx *c)
{
	if ((c->o->max_trials > 0 && c->r->trials >= c->o->max_trials) ||
	    (c->o->max_seconds > 0 && ds_now() - c->t0 > c->o->max_seconds)) {
		c->r->capped = 1;
		return 1;
	}
	return 0;
}

/* Score p (from the memo when seen); *score out.  Returns 1 when it was
 * evaluated or found, 0 when the cap stopped it, <0 on error. */
static int eval(struct ctx *c, const int *p, const char *phase, double *score, struct ds_err *err)
{
	int i = memo_find(&c->m, p);
	if (i >= 0) {
		*score = c->m.score[i];
		return 1;
	}
	if (capped(c))
		return 0;
	if (c->m.n == c->m.cap) {
		int cap = c->m.cap ? 2 * c->m.cap : 64;
		int *idx = realloc(c->m.idx, sizeof(int) * (size_t)cap * (size_t)c->m.nd);
		double *sc = realloc(c->m.score, sizeof(double) * (size_t)cap);
		if (idx)
			c->m.idx = idx;
		if (sc)
			c->m.score = sc;
		if (!idx || !sc)
			return ds_err_set(err, DS_ENOMEM, "tune: out of memory");
		c->m.cap = cap;
	}
	DS_TRY(c->f(c->arg, p, phase, score, err));
	memcpy(c->m.idx + (size_t)c->m.n * c->m.nd, p, sizeof(int) * (size_t)c->m.nd);
	c->m.score[c->m.n++] = *score;
	c->r->trials++;
	if (!c->have_best || *score > c->r->best_score) {
		c->r->best_score = *score;
		memcpy(c->r->best, p, sizeof(int) * (size_t)c->m.nd);
		c->have_best = 1;
	}
	return 1;
}

static int grid(struct ctx *c, struct ds_err *err)
{
	int p[DS_TUNE_MAX_DIMS] = { 0 };
	const struct ds_tune_space *s = c->s;
	double sc;

	for (;;) {
		int rc = eval(c, p, "grid", &sc, err);
		if (rc <= 0)
			return rc;
		int d = s->ndims - 1;
		while (d >= 0 && ++p[d] == s->d[d].n)
			p[d--] = 0;
		if (d < 0)
			return 0;
	}
}

static int pattern(struct ctx *c, struct ds_err *err)
{
	const struct ds_tune_space *s = c->s;
	int nd = s->ndims, p[DS_TUNE_MAX_DIMS], step = 1;
	double sc;
	int rc;

	for (int d = 0; d < nd; d++) {
		p[d] = c->o->start ? c->o->start[d] : s->d[d].n / 2;
		if (p[d] < 0 || p[d] >= s->d[d].n)
			p[d] = s->d[d].n / 2;
		if ((s->d[d].n - 1) / 4 > step)
			step = (s->d[d].n - 1) / 4;
	}
	if ((rc = eval(c, p, "start", &sc, err)) <= 0)
		return rc;
	/* coarse: one dimension at a time over first / middle / last */
	for (int d = 0; d < nd; d++) {
		int n = s->d[d].n, cand[3] = { 0, (n - 1) / 2, n - 1 };
		for (int k = 0; k < 3; k++) {
			memcpy(p, c->r->best, sizeof(int) * (size_t)nd);
			p[d] = cand[k];
			if ((rc = eval(c, p, "coarse", &sc, err)) <= 0)
				return rc;
		}
	}
	/* refine: neighbours of the best at distance step */
	for (;;) {
		int base[DS_TUNE_MAX_DIMS];
		double base_score = c->r->best_score;
		memcpy(base, c->r->best, sizeof(int) * (size_t)nd);
		for (int d = 0; d < nd; d++)
			for (int dir = -1; dir <= 1; dir += 2) {
				memcpy(p, base, sizeof(int) * (size_t)nd);
				p[d] += dir * step;
				if (p[d] < 0 || p[d] >= s->d[d].n)
					continue;
				if ((rc = eval(c, p, "refine", &sc, err)) <= 0)
					return rc;
			}
		double gain = base_score > 0 ? (c->r->best_score - base_score) / base_score
					     : (c->r->best_score > base_score ? 1.0 : 0.0);
		if (gain > c->o->threshold)
			continue;       /* moved: search around the new best */
		if (step == 1)
			return 0;       /* no gain worth the time at the finest step */
		step /= 2;
	}
}

/* Second measurement of the top-k points; the best mean becomes r->best. */
static int confirm(struct ctx *c, int k, struct ds_err *err)
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
			if (!done[i] && (top < 0 || c->m.score[i] > c->m.score[top]))
				top = i;
		done[top] = 1;
		int rc = c->f(c->arg, c->m.idx + (size_t)top * nd, "confirm", &again, err);
		if (rc < 0) {
			free(done);
			return rc;
		}
		c->r->trials++;
		double mean = 0.5 * (c->m.score[top] + again);
		if (!have || mean > best) {
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

int ds_tune_search(const struct ds_tune_space *s, const struct ds_tune_search_opts *o, ds_tune_eval_fn f,
		   void *arg, struct ds_tune_search_res *r, struct ds_err *err)
{
	struct ctx c = { .s = s, .o = o, .f = f, .arg = arg, .r = r, .m = { .nd = s->ndims }, .t0 = ds_now() };
	int rc;

	memset(r, 0, sizeof(*r));
	if (s->ndims < 1)
		return ds_err_set(err, DS_EINVAL, "tune: nothing to search (no dimensions)");
	rc = o->exhaustive ? grid(&c, err) : pattern(&c, err);
	if (rc >= 0 && o->confirm > 0 && c.m.n > 1)
		rc = confirm(&c, o->confirm, err);
	free(c.m.idx);
	free(c.m.score);
	return rc < 0 ? rc : 0;
}
