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

uint16_t ds_fp32_to_fp16(float f);
float ds_fp16_to_fp32(uint16_t h);
uint16_t ds_fp32_to_bf16(float f);
float ds_bf16_to_fp32(uint16_t h);

void ds_fp32_to_fp16_n(uint16_t *dst, const float *src, size_t n);
void ds_fp16_to_fp32_n(float *dst, const uint16_t *src, size_t n);
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

#endif
