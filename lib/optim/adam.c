/* adam.c - the Adam/AdamW element update (DeepSpeed CPUAdam order): a
 * scalar reference and AVX2+FMA / AVX-512F kernels chosen at run time with
 * __builtin_cpu_supports.  Every kernel does the same IEEE operations
 * (mul, fma, sqrt, div, each correctly rounded) in the same order, so all
 * three give identical bits; tests/unit/test_optim.c checks that.
 */
#include "optim/optim.h"

#include <math.h>
#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DS_X86 1
#else
#define DS_X86 0
#endif

void ds_adam_coef_init(struct ds_adam_coef *c, const struct ds_optim_params *hp, int64_t t, float grad_mul)
{
	double bc1 = 1.0, bc2 = 1.0;
	if (hp->bias_correction) {
		bc1 = 1.0 - pow(hp->beta1, (double)t);
		bc2 = 1.0 - pow(hp->beta2, (double)t);
	}
	int adamw = ds_optim_decoupled(hp);
	c->beta1 = (float)hp->beta1;
	c->beta2 = (float)hp->beta2;
	c->one_minus_beta1 = (float)(1.0 - hp->beta1);
	c->one_minus_beta2 = (float)(1.0 - hp->beta2);
	c->eps = (float)hp->eps;
	c->bc2_rsqrt = (float)(1.0 / sqrt(bc2));
	c->step_size = (float)(-hp->lr / bc1);
	/* CPUAdam applies decay only when weight_decay > 0 */
	c->l2_wd = (!adamw && hp->weight_decay > 0) ? (float)hp->weight_decay : 0.0f;
	c->wd_mul = (adamw && hp->weight_decay > 0) ? (float)(-hp->lr * hp->weight_decay) : 0.0f;
	c->grad_mul = grad_mul;
}

/* One element; the reference every vector lane must reproduce (the same
 * inline function the CUDA kernel runs). */
static inline void adam_one(const struct ds_adam_coef *c, float *p, const float *g, float *m, float *v)
{
	ds_adam_elem(c, p, g, m, v);
}

static void adam_scalar(const struct ds_adam_coef *c, float *p, const float *g, float *m, float *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		adam_one(c, p + i, g + i, m + i, v + i);
}

#if DS_X86
__attribute__((target("avx2,fma")))
static void adam_avx2(const struct ds_adam_coef *c, float *p, const float *g, float *m, float *v, size_t n)
{
	const __m256 b1 = _mm256_set1_ps(c->beta1), b2 = _mm256_set1_ps(c->beta2);
	const __m256 omb1 = _mm256_set1_ps(c->one_minus_beta1), omb2 = _mm256_set1_ps(c->one_minus_beta2);
	const __m256 eps = _mm256_set1_ps(c->eps), bc2r = _mm256_set1_ps(c->bc2_rsqrt);
	const __m256 step = _mm256_set1_ps(c->step_size), gm = _mm256_set1_ps(c->grad_mul);
	const __m256 l2 = _mm256_set1_ps(c->l2_wd), wdm = _mm256_set1_ps(c->wd_mul);
	const int use_l2 = c->l2_wd != 0.0f, use_wd = c->wd_mul != 0.0f;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 gr = _mm256_mul_ps(_mm256_loadu_ps(g + i), gm);
		__m256 pa = _mm256_loadu_ps(p + i);
		if (use_l2)
			gr = _mm256_fmadd_ps(pa, l2, gr);
		__m256 mo = _mm256_mul_ps(_mm256_loadu_ps(m + i), b1);
		mo = _mm256_fmadd_ps(gr, omb1, mo);
		__m256 va = _mm256_mul_ps(_mm256_loadu_ps(v + i), b2);
		va = _mm256_fmadd_ps(_mm256_mul_ps(gr, gr), omb2, va);
		__m256 d = _mm256_fmadd_ps(_mm256_sqrt_ps(va), bc2r, eps);
		__m256 u = _mm256_div_ps(mo, d);
		if (use_wd)
			pa = _mm256_fmadd_ps(pa, wdm, pa);
		_mm256_storeu_ps(p + i, _mm256_fmadd_ps(u, step, pa));
		_mm256_storeu_ps(m + i, mo);
		_mm256_storeu_ps(v + i, va);
	}
	for (; i < n; i++)
		adam_one(c, p + i, g + i, m + i, v + i);
}

__attribute__((target("avx512f")))
static void adam_avx512(const struct ds_adam_coef *c, float *p, const float *g, float *m, float *v, size_t n)
{
	const __m512 b1 = _mm512_set1_ps(c->beta1), b2 = _mm512_set1_ps(c->beta2);
	const __m512 omb1 = _mm512_set1_ps(c->one_minus_beta1), omb2 = _mm512_set1_ps(c->one_minus_beta2);
	const __m512 eps = _mm512_set1_ps(c->eps), bc2r = _mm512_set1_ps(c->bc2_rsqrt);
	const __m512 step = _mm512_set1_ps(c->step_size), gm = _mm512_set1_ps(c->grad_mul);
	const __m512 l2 = _mm512_set1_ps(c->l2_wd), wdm = _mm512_set1_ps(c->wd_mul);
	const int use_l2 = c->l2_wd != 0.0f, use_wd = c->wd_mul != 0.0f;
	for (size_t i = 0; i < n; i += 16) {
		/* the tail is one masked iteration: lanes past n are neither
		 * read nor written */
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 gr = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, g + i), gm);
		__m512 pa = _mm512_maskz_loadu_ps(k, p + i);
		if (use_l2)
			gr = _mm512_fmadd_ps(pa, l2, gr);
		__m512 mo = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, m + i), b1);
		mo = _mm512_fmadd_ps(gr, omb1, mo);
		__m512 va = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, v + i), b2);
		va = _mm512_fmadd_ps(_mm512_mul_ps(gr, gr), omb2, va);
		__m512 d = _mm512_fmadd_ps(_mm512_sqrt_ps(va), bc2r, eps);
		__m512 u = _mm512_div_ps(mo, d);
		if (use_wd)
			pa = _mm512_fmadd_ps(pa, wdm, pa);
		_mm512_mask_storeu_ps(p + i, k, _mm512_fmadd_ps(u, step, pa));
		_mm512_mask_storeu_ps(m + i, k, mo);
		_mm512_mask_storeu_ps(v + i, k, va);
	}
}
#endif

int ds_simd_supported(enum ds_simd isa)
{
	switch (isa) {
	case DS_SIMD_AUTO:
	case DS_SIMD_SCALAR:
		return 1;
#if DS_X86
	case DS_SIMD_AVX2:
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	case DS_SIMD_AVX512:
		return __builtin_cpu_supports("avx512f");
#endif
	default:
		return 0;
	}
}

enum ds_simd ds_simd_best(void)
{
	if (ds_simd_supported(DS_SIMD_AVX512))
		return DS_SIMD_AVX512;
	if (ds_simd_supported(DS_SIMD_AVX2))
		return DS_SIMD_AVX2;
	return DS_SIMD_SCALAR;
}

const char *ds_simd_name(enum ds_simd isa)
{
	switch (isa) {
	case DS_SIMD_SCALAR: return "scalar";
	case DS_SIMD_AVX2: return "avx2";
	case DS_SIMD_AVX512: return "avx512";
	default: return "auto";
	}
}

static enum ds_simd forced = DS_SIMD_AUTO;

void ds_simd_force(enum ds_simd isa)
{
	forced = isa;
}

enum ds_simd ds_simd_pick(void)
{
	if (forced != DS_SIMD_AUTO && ds_simd_supported(forced))
		return forced;
	return ds_simd_best();
}

typedef void (*adam_fn)(const struct ds_adam_coef *, float *, const float *, float *, float *, size_t);

void ds_adam_update(const struct ds_adam_coef *c, float *p, const float *g, float *m, float *v, size_t n,
		    enum ds_simd isa)
{
	if (isa == DS_SIMD_AUTO || !ds_simd_supported(isa))
		isa = ds_simd_pick();
	adam_fn fn = adam_scalar;
#if DS_X86
	if (isa == DS_SIMD_AVX512)
		fn = adam_avx512;
	else if (isa == DS_SIMD_AVX2)
		fn = adam_avx2;
#endif
	if (n < 4096) {
		fn(c, p, g, m, v, n);
		return;
	}
	/* one contiguous slice per thread, cut at cache-line multiples, so
	 * the same thread touches the same pages on every step */
#pragma omp parallel
	{
		size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
		size_t per = (n + nt - 1) / nt;
		per = (per + 15) & ~(size_t)15;
		size_t lo = t * per, hi = lo + per;
		if (hi > n)
			hi = n;
		if (lo < hi)
			fn(c, p + lo, g + lo, m + lo, v + lo, hi - lo);
	}
}
