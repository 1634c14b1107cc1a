/* lamb.c - Lamb as DeepSpeed's FusedLamb, in two phases so a sharded
 * caller can add the per-tensor partial norms across ranks in between.
 * Phase 1 updates m and v and sums p^2 and u^2 per range; phase 2
 * recomputes u from the stored m, v and p (the same float operations, so
 * the same bits) and applies the clamped trust ratio.  Partial sums are
 * taken over fixed 8192-element chunks and added in chunk order, so they do
 * not depend on the number of threads.
 */
#include "optim/optim.h"

#include <math.h>

#include "util/mem.h"

#define CHUNK 8192

struct lamb_k {
	float b1, b2, omb1, omb2, eps, wd;
	int inside;
};

static void lamb_k_init(struct lamb_k *k, const struct ds_optim_params *hp)
{
	k->b1 = (float)hp->beta1;
	k->b2 = (float)hp->beta2;
	k->omb1 = (float)(1.0 - hp->beta1);
	k->omb2 = (float)(1.0 - hp->beta2);
	k->eps = (float)hp->eps;
	k->wd = (float)hp->weight_decay;
	k->inside = hp->eps_inside_sqrt;
}

/* u = m/denom + wd*p from the updated moments */
static inline float lamb_u(const struct lamb_k *k, float p, float m, float v)
{
	float denom = k->inside ? sqrtf(v + k->eps) : sqrtf(v) + k->eps;
	return m / denom + k->wd * p;
}

double ds_lamb_trust_ratio(double p_norm, double u_norm, double min_coeff, double max_coeff)
{
	if (p_norm == 0 || u_norm == 0)
		return 1.0;
	double r = p_norm / u_norm;
	if (r > max_coeff)
		r = max_coeff;
	if (r < min_coeff)
		r = min_coeff;
	return r;
}

static int check_ranges(const struct ds_optim *o, const struct ds_range *r, int nr, struct ds_err *err)
{
	if (o->hp.type != DS_OPTIM_LAMB)
		return ds_err_set(err, DS_EINVAL, "lamb: optimizer is %s, not lamb", ds_optim_type_name(o->hp.type));
	if (nr < 0 || (nr > 0 && !r))
		return ds_err_set(err, DS_EINVAL, "lamb: bad range list");
	for (int i = 0; i < nr; i++)
		if (r[i].off > o->n || r[i].len > o->n - r[i].off)
			return ds_err_set(err, DS_EINVAL, "lamb: range %d [%zu, +%zu) outside the shard of %zu", i,
					  r[i].off, r[i].len, o->n);
	return 0;
}

/* Number of chunks of every range, and the prefix (first chunk index). */
static size_t count_chunks(const struct ds_range *r, int nr, size_t *first)
{
	size_t c = 0;
	for (int i = 0; i < nr; i++) {
		first[i] = c;
		c += (r[i].len + CHUNK - 1) / CHUNK;
	}
	first[nr] = c;
	return c;
}

/* Range index holding chunk c (binary search over first[]). */
static int range_of(const size_t *first, int nr, size_t c)
{
	int lo = 0, hi = nr - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (first[mid] <= c)
			lo = mid;
		else
			hi = mid - 1;
	}
	/* skip empty ranges that share the same first index */
	while (lo + 1 < nr && first[lo + 1] <= c)
		lo++;
	return lo;
}

int ds_lamb_partial_norms(struct ds_optim *o, const float *p, const float *g, float grad_mul,
			  const struct ds_range *ranges, int nranges, double *sums, struct ds_err *err)
{
	DS_TRY(check_ranges(o, ranges, nranges, err));
	struct lamb_k k;
	lamb_k_init(&k, &o->hp);
	float *m = o->states[0], *v = o->states[1];
	size_t *first = ds_alloc(((size_t)nranges + 1) * sizeof(size_t));
	if (!first)
		return ds_err_set(err, DS_ENOMEM, "lamb: out of memory");
	size_t nc = count_chunks(ranges, nranges, first);
	double *part = ds_alloc((nc ? nc : 1) * 2 * sizeof(double));
	if (!part) {
		ds_free(first);
		return ds_err_set(err, DS_ENOMEM, "lamb: out of memory");
	}
#pragma omp parallel for schedule(dynamic, 4) if (nc > 1)
	for (size_t c = 0; c < nc; c++) {
		int ri = range_of(first, nranges, c);
		size_t lo = ranges[ri].off + (c - first[ri]) * CHUNK;
		size_t hi = ranges[ri].off + ranges[ri].len;
		if (hi - lo > CHUNK)
			hi = lo + CHUNK;
		double sp = 0, su = 0;
		for (size_t i = lo; i < hi; i++) {
			float gr = g[i] * grad_mul;
			float mo = k.b1 * m[i] + k.omb1 * gr;
			float va = k.b2 * v[i] + k.omb2 * (gr * gr);
			m[i] = mo;
			v[i] = va;
			float u = lamb_u(&k, p[i], mo, va);
			sp += (double)p[i] * p[i];
			su += (double)u * u;
		}
		part[2 * c] = sp;
		part[2 * c + 1] = su;
	}
	for (int i = 0; i < nranges; i++) {
		double sp = 0, su = 0;
		for (size_t c = first[i]; c < first[i + 1]; c++) {
			sp += part[2 * c];
			su += part[2 * c + 1];
		}
		sums[2 * i] = sp;
		sums[2 * i + 1] = su;
	}
	ds_free(part);
	ds_free(first);
	return 0;
}

int ds_lamb_apply(struct ds_optim *o, float *p, const struct ds_range *ranges, int nranges, const double *sums,
		  struct ds_err *err)
{
	DS_TRY(check_ranges(o, ranges, nranges, err));
	struct lamb_k k;
	lamb_k_init(&k, &o->hp);
	const float *m = o->states[0], *v = o->states[1];
	int64_t t = o->step + 1;
	double step_size = o->hp.lr;
	if (o->hp.bias_correction) {
		double bc1 = 1.0 - pow(o->hp.beta1, (double)t), bc2 = 1.0 - pow(o->hp.beta2, (double)t);
		step_size = o->hp.lr * sqrt(bc2) / bc1;
	}
	for (int ri = 0; ri < nranges; ri++) {
		double r = ds_lamb_trust_ratio(sqrt(sums[2 * ri]), sqrt(sums[2 * ri + 1]), o->hp.min_coeff,
					       o->hp.max_coeff);
		const float s = (float)(step_size * r);
		size_t lo = ranges[ri].off, hi = lo + ranges[ri].len;
#pragma omp parallel for simd schedule(static) if (hi - lo >= 65536)
		for (size_t i = lo; i < hi; i++)
			p[i] = p[i] - s * lamb_u(&k, p[i], m[i], v[i]);
	}
	o->step = t;
	return 0;
}
