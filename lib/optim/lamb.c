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

#if defined(__x86_64__)
#include <immintrin.h>
#define DS_X86 1
#else
#define DS_X86 0
#endif

#define CHUNK 8192

/* Lamb's element math is kernels/common/optim_math.h's (ds_lamb_moments,
 * ds_lamb_u, ds_lamb_ratio), shared with the CUDA kernels. */

void ds_lamb_coef_init(struct ds_lamb_coef *k, const struct ds_optim_params *hp)
{
	k->b1 = (float)hp->beta1;
	k->b2 = (float)hp->beta2;
	k->omb1 = (float)(1.0 - hp->beta1);
	k->omb2 = (float)(1.0 - hp->beta2);
	k->eps = (float)hp->eps;
	k->wd = (float)hp->weight_decay;
	k->inside = hp->eps_inside_sqrt;
}

/* Phase 1 over [0, n): update m, v; add p^2 and u^2 to *sp, *su. */
static void partial_scalar(const struct ds_lamb_coef *k, const float *p, const float *g, float *m, float *v, size_t n,
			   float gm, double *sp, double *su)
{
	double a = 0, b = 0;
	for (size_t i = 0; i < n; i++) {
		float mo = m[i], va = v[i];
		ds_lamb_moments(k, g[i] * gm, &mo, &va);
		m[i] = mo;
		v[i] = va;
		float u = ds_lamb_u(k, p[i], mo, va);
		a += (double)p[i] * p[i];
		b += (double)u * u;
	}
	*sp = a;
	*su = b;
}

/* Phase 2 over [0, n): p -= s*u. */
static void apply_scalar(const struct ds_lamb_coef *k, float *p, const float *m, const float *v, size_t n, float s)
{
	for (size_t i = 0; i < n; i++)
		p[i] = p[i] - s * ds_lamb_u(k, p[i], m[i], v[i]);
}

#if DS_X86
/* The same float operations as the scalar code (separate mul and add, no
 * fma), so m, v and p come out with the same bits; only the double sums
 * are added in another order (16 lanes, then across). */
__attribute__((target("avx512f")))
static inline __m512 u_avx512(const struct ds_lamb_coef *k, __m512 pa, __m512 mo, __m512 va)
{
	__m512 d = k->inside ? _mm512_sqrt_ps(_mm512_add_ps(va, _mm512_set1_ps(k->eps)))
			     : _mm512_add_ps(_mm512_sqrt_ps(va), _mm512_set1_ps(k->eps));
	return _mm512_add_ps(_mm512_div_ps(mo, d), _mm512_mul_ps(_mm512_set1_ps(k->wd), pa));
}

__attribute__((target("avx512f")))
static void partial_avx512(const struct ds_lamb_coef *k, const float *p, const float *g, float *m, float *v, size_t n,
			   float gm, double *sp, double *su)
{
	const __m512 b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2), gmv = _mm512_set1_ps(gm);
	const __m512 omb1 = _mm512_set1_ps(k->omb1), omb2 = _mm512_set1_ps(k->omb2);
	__m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd(), c0 = _mm512_setzero_pd(), c1 = _mm512_setzero_pd();
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 km = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 gr = _mm512_mul_ps(_mm512_maskz_loadu_ps(km, g + i), gmv);
		__m512 pa = _mm512_maskz_loadu_ps(km, p + i);
		__m512 mo = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(km, m + i)), _mm512_mul_ps(omb1, gr));
		__m512 va = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(km, v + i)),
					  _mm512_mul_ps(omb2, _mm512_mul_ps(gr, gr)));
		_mm512_mask_storeu_ps(m + i, km, mo);
		_mm512_mask_storeu_ps(v + i, km, va);
		/* lanes past n may be 0/0 when eps is 0: zero them */
		__m512 u = _mm512_maskz_mov_ps(km, u_avx512(k, pa, mo, va));
		__m512d plo = _mm512_cvtps_pd(_mm512_castps512_ps256(pa));
		__m512d phi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pa), 1)));
		__m512d ulo = _mm512_cvtps_pd(_mm512_castps512_ps256(u));
		__m512d uhi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)));
		a0 = _mm512_add_pd(a0, _mm512_mul_pd(plo, plo));
		a1 = _mm512_add_pd(a1, _mm512_mul_pd(phi, phi));
		c0 = _mm512_add_pd(c0, _mm512_mul_pd(ulo, ulo));
		c1 = _mm512_add_pd(c1, _mm512_mul_pd(uhi, uhi));
	}
	*sp = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
	*su = _mm512_reduce_add_pd(_mm512_add_pd(c0, c1));
}

__attribute__((target("avx512f")))
static void apply_avx512(const struct ds_lamb_coef *k, float *p, const float *m, const float *v, size_t n, float s)
{
	const __m512 sv = _mm512_set1_ps(s);
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 km = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 pa = _mm512_maskz_loadu_ps(km, p + i);
		__m512 u = u_avx512(k, pa, _mm512_maskz_loadu_ps(km, m + i), _mm512_maskz_loadu_ps(km, v + i));
		_mm512_mask_storeu_ps(p + i, km, _mm512_sub_ps(pa, _mm512_mul_ps(sv, u)));
	}
}
#endif

typedef void (*partial_fn)(const struct ds_lamb_coef *, const float *, const float *, float *, float *, size_t, float,
			   double *, double *);
typedef void (*apply_fn)(const struct ds_lamb_coef *, float *, const float *, const float *, size_t, float);

/* AVX-512 when ds_simd_pick() says so; scalar otherwise (also on AVX2). */
static int use_avx512(void)
{
#if DS_X86
	return ds_simd_pick() == DS_SIMD_AVX512;
#else
	return 0;
#endif
}

double ds_lamb_trust_ratio(double p_norm, double u_norm, double min_coeff, double max_coeff)
{
	return ds_lamb_ratio(p_norm, u_norm, min_coeff, max_coeff);
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

double ds_lamb_step_size(const struct ds_optim_params *hp, int64_t t)
{
	if (!hp->bias_correction)
		return hp->lr;
	double bc1 = 1.0 - pow(hp->beta1, (double)t), bc2 = 1.0 - pow(hp->beta2, (double)t);
	return hp->lr * sqrt(bc2) / bc1;
}

int ds_lamb_partial_norms(struct ds_optim *o, const float *p, const float *g, float grad_mul,
			  const struct ds_range *ranges, int nranges, double *sums, struct ds_err *err)
{
	DS_TRY(check_ranges(o, ranges, nranges, err));
	struct ds_lamb_coef k;
	ds_lamb_coef_init(&k, &o->hp);
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
	partial_fn fn = partial_scalar;
#if DS_X86
	if (use_avx512())
		fn = partial_avx512;
#endif
#pragma omp parallel for schedule(dynamic, 4) if (nc > 1)
	for (size_t c = 0; c < nc; c++) {
		int ri = range_of(first, nranges, c);
		size_t lo = ranges[ri].off + (c - first[ri]) * CHUNK;
		size_t hi = ranges[ri].off + ranges[ri].len;
		if (hi - lo > CHUNK)
			hi = lo + CHUNK;
		fn(&k, p + lo, g + lo, m + lo, v + lo, hi - lo, grad_mul, &part[2 * c], &part[2 * c + 1]);
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
	struct ds_lamb_coef k;
	ds_lamb_coef_init(&k, &o->hp);
	const float *m = o->states[0], *v = o->states[1];
	int64_t t = o->step + 1;
	apply_fn afn = apply_scalar;
#if DS_X86
	if (use_avx512())
		afn = apply_avx512;
#endif
	double step_size = ds_lamb_step_size(&o->hp, t);
	for (int ri = 0; ri < nranges; ri++) {
		double r = ds_lamb_trust_ratio(sqrt(sums[2 * ri]), sqrt(sums[2 * ri + 1]), o->hp.min_coeff,
					       o->hp.max_coeff);
		const float s = (float)(step_size * r);
		size_t off = ranges[ri].off, len = ranges[ri].len;
		size_t nc = (len + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (nc > 1)
		for (size_t c = 0; c < nc; c++) {
			size_t lo = off + c * CHUNK, n = off + len - lo < CHUNK ? off + len - lo : CHUNK;
			afn(&k, p + lo, m + lo, v + lo, n, s);
		}
	}
	o->step = t;
	return 0;
}
