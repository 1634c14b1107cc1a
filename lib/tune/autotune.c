/* autotune.c - ds-autotune's memory model, micro-batch list and tuners
 * (gridsearch, random, model_based) as strategies of lib/tune's one search
 * loop (search.h).  Pure functions of the space and the trials' results;
 * launching trials is the driver's job (lib/driver/autotune_run.c).
 */
#include <math.h>
#include <string.h>

#include "tune/autotune.h"
#include "tune/search.h"
#include "util/rng.h"

double ds_autotune_model_state_bytes(double P, int half, int stage, int W)
{
	double params = P * (half ? 2 : 4), grads = params, optim = P * (half ? 16 : 8);
	if (W < 1)
		W = 1;
	if (stage >= 1)
		optim /= W;
	if (stage >= 2)
		grads /= W;
	if (stage >= 3)
		params /= W;
	return params + grads + optim;
}

int ds_autotune_mbs_list(int mn, int mx, int n, int64_t tbs_pg, int *out, int cap)
{
	int k = 0;
	if (mx < 1 || cap < 1)
		return 0;
	if (mn < 1)
		mn = 1;
	if (n < 1)
		n = 1;
	if (tbs_pg <= 0)
		tbs_pg = mx;
	if (mn < mx / 2)
		mn = mx / 2;
	int stride = (mx - mn) / n > 1 ? (mx - mn) / n : 1;
	for (int m = mn; m < mx && k < cap - 1; m += stride)
		if (tbs_pg / m != tbs_pg / mx)
			out[k++] = m;
	out[k++] = mx;
	return k;
}

int ds_autotune_better(int metric, double a, double b)
{
	if (isnan(a))
		return 0;
	if (isnan(b))
		return 1;
	return metric == DS_AT_LATENCY ? a < b : a > b;
}

int ds_autotune_order(const struct ds_autotune_space *s, int *out, int cap)
{
	int k = 0;
	for (int st = 0; st <= 3; st++) {
		/* largest micro batch first: DeepSpeed tries the memory maximum first */
		int last = 1 << 30;
		for (;;) {
			int pick = -1;
			for (int i = 0; i < s->n; i++) {
				const struct ds_autotune_point *p = &s->p[i];
				if (p->stage != st || p->status == DS_AT_PRUNED || p->mb >= last)
					continue;
				if (pick < 0 || p->mb > s->p[pick].mb)
					pick = i;
			}
			if (pick < 0 || k == cap)
				break;
			out[k++] = pick;
			last = s->p[pick].mb;
		}
	}
	return k;
}

/* Seconds-like time per optimizer step from a metric value, and back. */
static double time_of(const struct ds_autotune_point *p, int metric, double m)
{
	if (metric == DS_AT_LATENCY)
		return m;
	if (metric == DS_AT_FLOPS)
		return m > 0 ? p->flops / m : INFINITY;
	return m > 0 ? (double)p->tbs / m : INFINITY;
}

static double metric_of(const struct ds_autotune_point *p, int metric, double t)
{
	if (metric == DS_AT_LATENCY)
		return t;
	if (metric == DS_AT_FLOPS)
		return t > 0 ? p->flops / t : 0;
	return t > 0 ? (double)p->tbs / t : 0;
}

/* The model_based pick among the pending points of ord[], or -1. */
static int model_pick(const struct ds_autotune_space *s, const int *ord, int n, int metric, int trials,
		      const struct ds_rng *rng)
{
	int cand[DS_AUTOTUNE_MAX_POINTS], nc = 0, nok = 0;
	for (int k = 0; k < n; k++)
		if (s->p[ord[k]].status == DS_AT_PENDING)
			cand[nc++] = ord[k];
	if (nc == 0)
		return -1;
	for (int i = 0; i < s->n; i++)
		nok += s->p[i].status == DS_AT_OK;
	if (nok < 2)
		return cand[0]; /* the baseline order until two trials fit the model */
	if (trials % 5 == 4) { /* exploration: one pick in five is random */
		int j = (int)(ds_rng_uniform(rng, (uint64_t)trials) * nc);
		return cand[j < nc ? j : nc - 1];
	}
	/* least squares t = a + b F over the successful trials */
	double sf = 0, st = 0, sff = 0, sft = 0, cnt = 0;
	for (int i = 0; i < s->n; i++) {
		const struct ds_autotune_point *p = &s->p[i];
		if (p->status != DS_AT_OK)
			continue;
		double t = time_of(p, metric, p->metric);
		sf += p->flops, st += t, sff += p->flops * p->flops, sft += p->flops * t, cnt++;
	}
	double den = cnt * sff - sf * sf, a = 0, b = 0;
	if (fabs(den) > 1e-12 * sff * cnt) {
		b = (cnt * sft - sf * st) / den;
		a = (st - b * sf) / cnt;
	}
	if (b <= 0 || a < 0) { /* through the origin */
		a = 0;
		b = sff > 0 ? sft / sff : 1;
	}
	double r[4];
	for (int stg = 0; stg < 4; stg++) {
		double sr = 0, nr = 0;
		for (int i = 0; i < s->n; i++) {
			const struct ds_autotune_point *p = &s->p[i];
			if (p->status != DS_AT_OK || p->stage != stg)
				continue;
			double fit = a + b * p->flops;
			if (fit > 0)
				sr += time_of(p, metric, p->metric) / fit, nr++;
		}
		r[stg] = nr > 0 ? sr / nr : 1.0;
	}
	int best = -1;
	double bm = NAN;
	for (int k = 0; k < nc; k++) {
		const struct ds_autotune_point *p = &s->p[cand[k]];
		double m = metric_of(p, metric, r[p->stage & 3] * (a + b * p->flops));
		if (best < 0 || ds_autotune_better(metric, m, bm))
			best = cand[k], bm = m;
	}
	return best;
}

/* A trial killed for memory: the same or lower stages with an equal or
 * larger micro batch need at least as much, so they are not run. */
static void mark_infeasible(struct ds_autotune_space *s, int i)
{
	const struct ds_autotune_point *f = &s->p[i];
	for (int j = 0; j < s->n; j++) {
		struct ds_autotune_point *p = &s->p[j];
		if (p->status != DS_AT_PENDING || p->stage > f->stage || p->mb < f->mb)
			continue;
		p->status = DS_AT_INFEASIBLE;
		snprintf(p->why, sizeof(p->why), "not run: z%d micro batch %d ran out of memory", f->stage, f->mb);
	}
}

/* ---- the tuners as strategies of ds_tune_run (search.h) -------------------
 * A point of the search is one index into the space's list; the loop
 * counts trials, keeps the best and stops early, eval_point below keeps
 * each point's status and trial number. */

struct tuner {
	struct ds_autotune_space *s;
	const struct ds_autotune_search_opts *o;
	int ord[DS_AUTOTUNE_MAX_POINTS], n, next;  /* the baseline (or shuffled) order, the next in it */
	struct ds_rng rng;
	ds_autotune_eval_fn f;
	void *ctx;
	int trials;
};

/* gridsearch and random: the next pending point of ord */
static int order_next(void *self, const struct ds_tune_progress *pr, int *idx, const char **phase)
{
	struct tuner *t = self;
	(void)pr;
	while (t->next < t->n)
		if (t->s->p[t->ord[t->next++]].status == DS_AT_PENDING) {
			idx[0] = t->ord[t->next - 1];
			*phase = t->o->tuner == DS_AT_RANDOM ? "random" : "gridsearch";
			return 1;
		}
	return 0;
}

static int model_next(void *self, const struct ds_tune_progress *pr, int *idx, const char **phase)
{
	struct tuner *t = self;
	int i = model_pick(t->s, t->ord, t->n, t->o->metric, pr->trials, &t->rng);
	if (i < 0)
		return 0;
	idx[0] = i;
	*phase = "model_based";
	return 1;
}

/* One trial: number it, run the caller's evaluator, keep the point's
 * status; a failure is NaN for the loop (and, model_based, a trial killed
 * for memory makes the points that need at least as much infeasible). */
static int eval_point(void *ctx, const int *idx, const char *phase, double *score, struct ds_err *err)
{
	struct tuner *t = ctx;
	struct ds_autotune_point *p = &t->s->p[idx[0]];
	double m = NAN;
	(void)phase;
	p->order = ++t->trials;
	DS_TRY(t->f(t->ctx, t->s, idx[0], &m, err));
	if (p->status == DS_AT_FAILED || isnan(m)) {
		p->status = DS_AT_FAILED;
		if (!p->why[0])
			snprintf(p->why, sizeof(p->why), "no metric");
		if (p->oom && t->o->tuner == DS_AT_MODEL)
			mark_infeasible(t->s, idx[0]);
		*score = NAN;
		return 0;
	}
	p->status = DS_AT_OK;
	p->metric = m;
	*score = m;
	return 0;
}

int ds_autotune_search(struct ds_autotune_space *s, const struct ds_autotune_search_opts *o,
		       ds_autotune_eval_fn f, void *ctx, struct ds_autotune_search_res *r, struct ds_err *err)
{
	struct tuner t = { .s = s, .o = o, .f = f, .ctx = ctx };
	t.n = ds_autotune_order(s, t.ord, DS_AUTOTUNE_MAX_POINTS);
	ds_rng_init(&t.rng, o->seed, 0x617574, (uint64_t)o->tuner);
	if (o->tuner == DS_AT_RANDOM) /* Fisher-Yates with a seeded stream */
		for (int k = t.n - 1; k > 0; k--) {
			int j = (int)(ds_rng_uniform(&t.rng, (uint64_t)k + 1000) * (k + 1));
			if (j > k)
				j = k;
			int tmp = t.ord[k];
			t.ord[k] = t.ord[j], t.ord[j] = tmp;
		}
	struct ds_tune_strategy st = { o->tuner == DS_AT_MODEL ? model_next : order_next, &t };
	struct ds_tune_search_opts so = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res sr;
	so.max_trials = o->num_trials;
	so.early_stop = o->early_stop;
	so.min_gain = DS_AUTOTUNE_MIN_GAIN;
	so.minimize = o->metric == DS_AT_LATENCY;
	int rc = ds_tune_run(&st, 1, &so, eval_point, &t, &sr, err);
	r->best = sr.have_best ? sr.best[0] : -1;
	r->trials = sr.trials;
	r->stopped_early = sr.stopped_early;
	return rc;
}

const char *ds_autotune_metric_name(int metric)
{
	return metric == DS_AT_LATENCY ? "latency" : metric == DS_AT_FLOPS ? "flops" : "throughput";
}
