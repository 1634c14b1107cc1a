/* autotune.c - ds-autotune's memory model, micro-batch list and tuners
 * (gridsearch, random, model_based).  Pure functions of the space and the
 * trials' results; launching trials is autotune_run.c's job.
 */
#include <math.h>
#include <string.h>

#include "tune/autotune.h"
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

int ds_autotune_search(struct ds_autotune_space *s, const struct ds_autotune_search_opts *o,
		       ds_autotune_eval_fn f, void *ctx, struct ds_autotune_search_res *r, struct ds_err *err)
{
	int ord[DS_AUTOTUNE_MAX_POINTS], n = ds_autotune_order(s, ord, DS_AUTOTUNE_MAX_POINTS);
	struct ds_rng rng;
	ds_rng_init(&rng, o->seed, 0x617574, (uint64_t)o->tuner);
	if (o->tuner == DS_AT_RANDOM) /* Fisher-Yates with a seeded stream */
		for (int k = n - 1; k > 0; k--) {
			int j = (int)(ds_rng_uniform(&rng, (uint64_t)k + 1000) * (k + 1));
			if (j > k)
				j = k;
			int t = ord[k];
			ord[k] = ord[j], ord[j] = t;
		}
	r->best = -1, r->trials = 0, r->stopped_early = 0;
	int best_trial = 0, next = 0;
	while (r->trials < o->num_trials) {
		if (r->trials >= best_trial + o->early_stop) {
			r->stopped_early = 1;
			break;
		}
		int i = -1;
		if (o->tuner == DS_AT_MODEL)
			i = model_pick(s, ord, n, o->metric, r->trials, &rng);
		else
			while (next < n && i < 0)
				if (s->p[ord[next++]].status == DS_AT_PENDING)
					i = ord[next - 1];
		if (i < 0)
			break;
		struct ds_autotune_point *p = &s->p[i];
		double m = NAN;
		p->order = ++r->trials;
		DS_TRY(f(ctx, s, i, &m, err));
		if (p->status == DS_AT_FAILED || isnan(m)) {
			p->status = DS_AT_FAILED;
			if (!p->why[0])
				snprintf(p->why, sizeof(p->why), "no metric");
			if (p->oom && o->tuner == DS_AT_MODEL)
				mark_infeasible(s, i);
			continue;
		}
		p->status = DS_AT_OK;
		p->metric = m;
		if (r->best < 0 || ds_autotune_better(o->metric, m, s->p[r->best].metric)) {
			/* only a gain beyond the noise restarts the early-stopping count */
			double b = r->best < 0 ? NAN : s->p[r->best].metric;
			double margin = o->metric == DS_AT_LATENCY ? b * (1 - DS_AUTOTUNE_MIN_GAIN)
								    : b * (1 + DS_AUTOTUNE_MIN_GAIN);
			if (r->best < 0 || ds_autotune_better(o->metric, m, margin))
				best_trial = r->trials;
			r->best = i;
		}
	}
	return 0;
}

const char *ds_autotune_metric_name(int metric)
{
	return metric == DS_AT_LATENCY ? "latency" : metric == DS_AT_FLOPS ? "flops" : "throughput";
}
