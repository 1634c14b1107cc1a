/* half.c - fp16/bf16 <-> fp32 by bit manipulation (see half.h).
 * Round to nearest even throughout; NaNs are kept quiet with the sign. */
#include "util/half.h"

#include <string.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t ds_fp32_to_fp16(float f)
{
	uint32_t x = f2u(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	uint32_t ax = x & 0x7fffffffu;
	if (ax >= 0x7f800000u) /* inf or nan */
		return sign | (ax > 0x7f800000u ? (uint16_t)(0x7e00u | ((ax >> 13) & 0x3ffu)) : 0x7c00u);
	if (ax >= 0x477ff000u) /* >= 65520 rounds to inf */
		return sign | 0x7c00u;
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
		return sign | (uint16_t)r;
	}
	/* normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits */
	uint32_t r = ax - 0x38000000u;  /* exponent rebias */
	uint32_t rem = r & 0x1fffu;
	r >>= 13;
	if (rem > 0x1000u || (rem == 0x1000u && (r & 1)))
		r++;                         /* may carry into exponent: correct */
	return sign | (uint16_t)r;
}

float ds_fp16_to_fp32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0x1f)
		return u2f(sign | 0x7f800000u | (m << 13));
	if (e == 0) {
		if (m == 0)
			return u2f(sign);
		/* subnormal: m * 2^-24, exact in fp32 */
		float v = (float)m * (1.0f / 16777216.0f);
		return sign ? -v : v;
	}
	return u2f(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t ds_fp32_to_bf16(float f)
{
	uint32_t x = f2u(f);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
	uint32_t lsb = (x >> 16) & 1u;
	x += 0x7fffu + lsb;                       /* RNE; overflow carries to inf */
	return (uint16_t)(x >> 16);
}

float ds_bf16_to_fp32(uint16_t h) { return u2f((uint32_t)h << 16); }

void ds_fp32_to_fp16_n(uint16_t *dst, const float *src, size_t n)
{
#pragma omp parallel for simd if (n > 65536) schedule(static)
	for (size_t i = 0; i < n; i++)
		dst[i] = ds_fp32_to_fp16(src[i]);
}

void ds_fp16_to_fp32_n(float *dst, const uint16_t *src, size_t n)
{
#pragma omp parallel for if (n > 65536) schedule(static)
	for (size_t i = 0; i < n; i++)
		dst[i] = ds_fp16_to_fp32(src[i]);
}

void ds_fp32_to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
#pragma omp parallel for simd if (n > 65536) schedule(static)
	for (size_t i = 0; i < n; i++)
		dst[i] = ds_fp32_to_bf16(src[i]);
}

void ds_bf16_to_fp32_n(float *dst, const uint16_t *src, size_t n)
{
#pragma omp parallel for simd if (n > 65536) schedule(static)
	for (size_t i = 0; i < n; i++)
		dst[i] = ds_bf16_to_fp32(src[i]);
}

const char *ds_half_name(enum ds_half_kind k)
{
	return k == DS_HALF_FP16 ? "fp16" : k == DS_HALF_BF16 ? "bf16" : "fp32";
}

void ds_half_round_n(enum ds_half_kind k, float *x, size_t n)
{
	if (k == DS_HALF_FP16) {
#pragma omp parallel for simd if (n > 65536) schedule(static)
		for (size_t i = 0; i < n; i++)
			x[i] = ds_fp16_to_fp32(ds_fp32_to_fp16(x[i]));
	} else if (k == DS_HALF_BF16) {
#pragma omp parallel for simd if (n > 65536) schedule(static)
		for (size_t i = 0; i < n; i++)
			x[i] = ds_bf16_to_fp32(ds_fp32_to_bf16(x[i]));
	}
}

void ds_half_pack_n(enum ds_half_kind k, uint16_t *dst, const float *src, size_t n)
{
	if (k == DS_HALF_FP16)
		ds_fp32_to_fp16_n(dst, src, n);
	else
		ds_fp32_to_bf16_n(dst, src, n);
}

void ds_half_unpack_n(enum ds_half_kind k, float *dst, const uint16_t *src, size_t n)
{
	if (k == DS_HALF_FP16)
		ds_fp16_to_fp32_n(dst, src, n);
	else
		ds_bf16_to_fp32_n(dst, src, n);
}
