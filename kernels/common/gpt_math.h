/* gpt_math.h - per-element math of the GPT family, shared by the CPU kernels
 * (kernels/cpu) and a CUDA build (kernels/cuda): activations (GeLU in its
 * tanh and exact erf forms, SiLU), their derivatives, the rotary rotation
 * and the dropout keep test.
 *
 * Plain static inline C on floats; DS_HD marks them host+device for nvcc.
 */
#ifndef DS_KERNELS_GPT_MATH_H
#define DS_KERNELS_GPT_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DS_HD __host__ __device__
#else
#define DS_HD
#endif

#define DS_GELU_SCALE 0.7978845608028654f   /* sqrt(2/pi) */

/* exp(x) in float, within 2 ulp of expf on [-87, 88] (Cephes' expf: x = n ln2
 * + r, degree-6 polynomial for e^r, 2^n through the exponent bits).  Written
 * without library calls or branches so `omp simd` loops vectorise it (the
 * clamps need -fno-trapping-math to if-convert on SSE2); inputs
 * below -87.3 give a tiny positive number (~1e-38) instead of 0. */
static inline DS_HD float ds_expf(float x)
{
	x = x < -87.3f ? -87.3f : x;
	x = x > 88.7f ? 88.7f : x;
	float t = x * 1.44269504088896341f;
	float fn = (t + 12582912.0f) - 12582912.0f;   /* round to nearest: 1.5 * 2^23 */
	int n = (int)fn;
	float r = x - fn * 0.693359375f;
	r = r - fn * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	float y = p * r * r + r + 1.0f;
	union { int i; float f; } u;
	u.i = (n + 127) << 23;
	return y * u.f;
}

/* tanh(x) = 1 - 2 / (e^{2x} + 1), through ds_expf (abs error < 1e-7 near 0
 * is not needed here: gelu multiplies it by x). */
static inline DS_HD float ds_tanhf(float x)
{
	return 1.0f - 2.0f / (ds_expf(2.0f * x) + 1.0f);
}

/* GeLU, tanh approximation (GPT-2's and torch's approximate='tanh'):
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static inline DS_HD float ds_gelu(float x)
{
	float u = DS_GELU_SCALE * (x + 0.044715f * x * x * x);
	return 0.5f * x * (1.0f + ds_tanhf(u));
}

/* d gelu(x) / dx for the tanh approximation. */
static inline DS_HD float ds_gelu_grad(float x)
{
	float u = DS_GELU_SCALE * (x + 0.044715f * x * x * x);
	float th = ds_tanhf(u);
	float sech2 = 1.0f - th * th;
	return 0.5f * (1.0f + th) + 0.5f * x * sech2 * DS_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

/* Phi(x) = P(X <= x) for a standard normal X: erfc(|x| / sqrt 2) / 2 below
 * 0, one minus it above.  erfc(z) = t e^(P(t) - z^2), t = 1 / (1 + z / 2),
 * P of degree 10 interpolating log(erfc(z) / t) + z^2 at Chebyshev points
 * for z in [0, 12] (contrib/math/fit_erfc.py; 1.5e-8 off in exact
 * arithmetic).  The tail comes straight from the exponential, so it keeps
 * its relative accuracy (1.2e-6 on [-3, 3]) where 1 + erf(x / sqrt 2)
 * would cancel; 1 - tail is within 1e-7.  No branches or library calls,
 * like ds_expf, so `omp simd` loops vectorise it. */
static inline DS_HD float ds_normcdf(float x)
{
	float z = fabsf(x) * 0.70710678118654752f;
	float t = 1.0f / (1.0f + 0.5f * z);
	float p = -1.3680589196e-01f;
	p = p * t + 9.3950049628e-01f;
	p = p * t + -2.6975611525e+00f;
	p = p * t + 4.0945891418e+00f;
	p = p * t + -3.4085257664e+00f;
	p = p * t + 1.5728495021e+00f;
	p = p * t + -6.7031071031e-01f;
	p = p * t + 2.1362626151e-01f;
	p = p * t + 3.5674987297e-01f;
	p = p * t + 1.0014499566e+00f;
	p = p * t + -1.2655617082e+00f;
	float tail = 0.5f * t * ds_expf(p - z * z);
	return x < 0.0f ? tail : 1.0f - tail;
}

/* GeLU, the exact form x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (torch's
 * F.gelu with approximate='none', GPT-NeoX's unfused gelu, HF's "gelu"). */
static inline DS_HD float ds_gelu_exact(float x) { return x * ds_normcdf(x); }

/* d gelu_exact(x) / dx = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi). */
static inline DS_HD float ds_gelu_exact_grad(float x)
{
	return ds_normcdf(x) + x * 0.3989422804014327f * ds_expf(-0.5f * x * x);
}

/* The kernels' MLP activation codes (act), the values of lib/config's enum
 * ds_activation: 0 gelu (tanh), 1 geglu (tanh), 2 swiglu, 3 gelu_exact,
 * 4 geglu_exact (erf).  A gated one reads [a | b] (2F wide) and writes
 * act(a) * b. */
static inline DS_HD int ds_act_gated(int act) { return act == 1 || act == 2 || act == 4; }

static inline DS_HD float ds_sigmoid(float x) { return 1.0f / (1.0f + ds_expf(-x)); }

/* SiLU (swish): x * sigmoid(x), and its derivative s (1 + x (1 - s)). */
static inline DS_HD float ds_silu(float x) { return x * ds_sigmoid(x); }
static inline DS_HD float ds_silu_grad(float x)
{
	float s = ds_sigmoid(x);
	return s * (1.0f + x * (1.0f - s));
}

/* Rotate the pair (x1, x2) = (x[i], x[i + rd/2]) of NeoX's rotate-half by
 * angle th: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin.  The backward pass
 * is the same rotation with -sin. */
static inline DS_HD void ds_rotary_pair(float *x1, float *x2, float c, float s)
{
	float a = *x1, b = *x2;
	*x1 = a * c - b * s;
	*x2 = b * c + a * s;
}

/* Dropout: element kept when its uniform draw u in (0,1) is >= p. */
static inline DS_HD int ds_dropout_keep(uint32_t bits, float p)
{
	return ((float)(bits >> 8) + 0.5f) * (1.0f / 16777216.0f) >= p;
}

#endif
