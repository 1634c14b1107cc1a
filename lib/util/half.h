/* half.h - IEEE fp16 and bfloat16 <-> fp32 conversion.
 *
 * Round to nearest, ties to even; overflow goes to inf; NaN stays NaN (quiet);
 * subnormals are produced and read exactly.  Scalar functions are the
 * reference; the bulk functions may use F16C / AVX-512 BF16 when present and
 * must give identical bits.
 */
#ifndef DS_UTIL_HALF_H
#define DS_UTIL_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The scalar conversions are these inline functions, shared by half.c and
 * the CUDA kernels (kernels/cuda), so both round alike to the bit: plain C,
 * host and device under nvcc. */
#ifdef __CUDACC__
#define DS_HALF_HD __host__ __device__
#else
#define DS_HALF_HD
#endif

static inline DS_HALF_HD uint32_t ds_half_f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline DS_HALF_HD float ds_half_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline DS_HALF_HD uint16_t ds_f32_to_f16_rne(float f)
{
	uint32_t x = ds_half_f2u(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	uint32_t ax = x & 0x7fffffffu;
	if (ax >= 0x7f800000u) /* inf or nan */
		return (uint16_t)(sign | (ax > 0x7f800000u ? (uint16_t)(0x7e00u | ((ax >> 13) & 0x3ffu)) : 0x7c00u));
	if (ax >= 0x477ff000u) /* >= 65520 rounds to inf */
		return (uint16_t)(sign | 0x7c00u);
	if (ax < 0x38800000u) {
		/* result is subnormal in fp16 (|f| < 2^-14): value/2^-24, RNE */
		if (ax < 0x33000000u) /* < 2^-25: rounds to zero (2^-25 is a tie -> even 0) */
			return sign;
		uint32_t e = ax >> 23;               /* biased fp32 exponent, 102..112 */
		uint32_t m = (ax & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e;            /* 14..24 */
		uint32_t r = m >> shift;
		uint32_t rem = m & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return (uint16_t)(sign | (uint16_t)r);
	}
	/* normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits */
	uint32_t r = ax - 0x38000000u;  /* exponent rebias */
	uint32_t rem = r & 0x1fffu;
	r >>= 13;
	if (rem > 0x1000u || (rem == 0x1000u && (r & 1)))
		r++;                         /* may carry into exponent: correct */
	return (uint16_t)(sign | (uint16_t)r);
}

static inline DS_HALF_HD float ds_f16_to_f32_exact(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0x1f)  /* inf, or a nan made quiet (as IEEE 754's conversions and F16C's vcvtph2ps do) */
		return ds_half_u2f(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
	if (e == 0) {
		if (m == 0)
			return ds_half_u2f(sign);
		/* subnormal: m * 2^-24, exact in fp32 */
		float v = (float)m * (1.0f / 16777216.0f);
		return sign ? -v : v;
	}
	return ds_half_u2f(sign | ((e + 112) << 23) | (m << 13));
}

static inline DS_HALF_HD uint16_t ds_f32_to_bf16_rne(float f)
{
	uint32_t x = ds_half_f2u(f);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
	uint32_t lsb = (x >> 16) & 1u;
	x += 0x7fffu + lsb;                       /* RNE; overflow carries to inf */
	return (uint16_t)(x >> 16);
}

static inline DS_HALF_HD float ds_bf16_to_f32_exact(uint16_t h) { return ds_half_u2f((uint32_t)h << 16); }

uint16_t ds_fp32_to_fp16(float f);
float ds_fp16_to_fp32(uint16_t h);
uint16_t ds_fp32_to_bf16(float f);
float ds_bf16_to_fp32(uint16_t h);

void ds_fp32_to_fp16_n(uint16_t *dst, const float *src, size_t n);
void ds_fp16_to_fp32_n(float *dst, const uint16_t *src, size_t n);
/* The fp16 bulk loops' path: 2 F16C at 16 lanes (AVX-512), 1 F16C at 8
 * (AVX), 0 the scalar functions.  Returns the path the CPU allows (the one
 * used); force (tests: each path's bits) caps it, -1 lifts the cap. */
int ds_half_fp16_path(int force);
/* The same for the bf16 bulk loops: 2 AVX-512F, 1 AVX2, 0 scalar. */
int ds_half_bf16_path(int force);
void ds_fp32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
void ds_bf16_to_fp32_n(float *dst, const uint16_t *src, size_t n);

/* A 16-bit storage format, or none (fp32).  Mixed precision keeps values
 * in one of these and computes in fp32. */
enum ds_half_kind { DS_HALF_NONE = 0, DS_HALF_FP16, DS_HALF_BF16 };

/* "fp32", "fp16" or "bf16". */
const char *ds_half_name(enum ds_half_kind k);
/* Round x[0..n) in place to the nearest value kind can hold (through the
 * conversions above: overflow becomes inf); no-op for DS_HALF_NONE. */
void ds_half_round_n(enum ds_half_kind k, float *x, size_t n);
/* Pack fp32 to kind's 16 bits / unpack back (kind must not be NONE). */
void ds_half_pack_n(enum ds_half_kind k, uint16_t *dst, const float *src, size_t n);
void ds_half_unpack_n(enum ds_half_kind k, float *dst, const uint16_t *src, size_t n);
/* dst[0..n) = src rounded to bf16 values and h its bf16 bits, in one pass
 * (ds_half_round_n's and ds_fp32_to_bf16_n's bits; dst may be src), on the
 * calling thread. */
void ds_bf16_round_pack_n(float *dst, uint16_t *h, const float *src, size_t n);
/* acc[i] = acc[i] + x[i] for 16-bit values of kind, each sum in fp32
 * rounded once (the 16-bit allreduce's operator): through the bulk loops,
 * in chunks widened on the stack, on the calling thread; the scalar
 * conversions' bits. */
void ds_half_sum_n(enum ds_half_kind k, uint16_t *acc, const uint16_t *x, size_t n);
/* ds_half_unpack_n where src overlaps dst's back half (src = (uint16_t *)dst
 * + n, as a reader widening in place puts it): front to back on the calling
 * thread, so that no element is overwritten before it is read. */
void ds_half_widen_front(enum ds_half_kind k, float *dst, const uint16_t *src, size_t n);

#endif
