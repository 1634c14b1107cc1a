/* half.c - fp16/bf16 <-> fp32 by bit manipulation (see half.h; the scalar
 * conversions are its inline functions, which the CUDA kernels share).
 * Round to nearest even throughout; NaNs are kept quiet with the sign.
 * The bulk loops run in blocks through x86-64's vector instructions where
 * the CPU has them (picked once at run time) and the scalar functions
 * elsewhere, with the same bits on every path. */
#include "util/half.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

uint16_t ds_fp32_to_fp16(float f) { return ds_f32_to_f16_rne(f); }
float ds_fp16_to_fp32(uint16_t h) { return ds_f16_to_f32_exact(h); }
uint16_t ds_fp32_to_bf16(float f) { return ds_f32_to_bf16_rne(f); }
float ds_bf16_to_fp32(uint16_t h) { return ds_bf16_to_f32_exact(h); }

/* ds_f32_to_bf16_rne without the branch, as the fp32 bits of the bf16
 * value (low half zero): the vector loops' arithmetic lane by lane */
static inline uint32_t bf16_bits(float f)
{
	const uint32_t x = ds_half_f2u(f);
	const uint32_t r = x + 0x7fffu + ((x >> 16) & 1u);   /* RNE; overflow carries to inf */
	return ((x & 0x7fffffffu) > 0x7f800000u ? x | 0x400000u : r) & 0xffff0000u;   /* quiet nan */
}

/* elements per block of the bulk loops (the unit OpenMP shares out) */
#define BLK 8192

/* fp16: the conversions of x86-64's F16C (vcvtps2ph with round to
 * nearest even, vcvtph2ps), 16 lanes with AVX-512, 8 with AVX, chosen once
 * from the CPU; the scalar functions elsewhere and for the tails.  Their
 * bits are the scalar functions' for every input (tests/unit/test_util.c
 * checks every fp16 value and a sweep of fp32 ones): both round to
 * nearest even with fp16 subnormals, overflow to inf and quiet NaNs
 * keeping their payload's top bits; MXCSR's FTZ does not apply to them and
 * its DAZ only zeroes fp32 subnormals, which round to zero in fp16 anyway.
 * (The scalar branches do not vectorise: the fp16 step on them spent a
 * third of its time in fp16_round_blk, 2026-12-02, bench/gpt-step tiny.) */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

__attribute__((target("avx512f"))) static size_t fp16_pack_512(uint16_t *dst, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), F16_RNE));
	return i;
}

__attribute__((target("avx512f"))) static size_t fp16_unpack_512(float *dst, const uint16_t *src, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(src + i))));
	return i;
}

__attribute__((target("avx512f"))) static size_t fp16_round_512(float *dst, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(src + i), F16_RNE)));
	return i;
}

__attribute__((target("avx,f16c"))) static size_t fp16_pack_256(uint16_t *dst, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), F16_RNE));
	return i;
}

__attribute__((target("avx,f16c"))) static size_t fp16_unpack_256(float *dst, const uint16_t *src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
	return i;
}

__attribute__((target("avx,f16c"))) static size_t fp16_round_256(float *dst, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + i), F16_RNE)));
	return i;
}

/* bf16: bf16_bits on 16 lanes (AVX-512F) or 8 (AVX2), the same integer
 * arithmetic, so the same bits; the scalar loop for tails and older CPUs.
 * (GCC's vectorisation of the scalar form ran at 3-4 Gelem/s per core in
 * cache, a quarter of the F16C loops: 256-bit vectors, and pack and
 * unpack through 16-bit lanes in the round loop; 2026-12-02.) */
__attribute__((target("avx512f"))) static inline __m512i bf16_bits_512(__m512i x)
{
	const __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)),
					   _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1)));
	const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
						      _mm512_set1_epi32(0x7f800000));
	return _mm512_and_si512(_mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x400000)),
				_mm512_set1_epi32((int)0xffff0000u));
}

__attribute__((target("avx512f"))) static size_t bf16_pack_512(uint16_t *dst, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m512i b = bf16_bits_512(_mm512_loadu_si512((const void *)(src + i)));
		_mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(b, 16)));
	}
	return i;
}

__attribute__((target("avx512f"))) static size_t bf16_unpack_512(float *dst, const uint16_t *src, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(src + i));
		_mm512_storeu_si512((void *)(dst + i), _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	}
	return i;
}

__attribute__((target("avx512f"))) static size_t bf16_round_512(float *dst, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_si512((void *)(dst + i), bf16_bits_512(_mm512_loadu_si512((const void *)(src + i))));
	return i;
}

__attribute__((target("avx512f"))) static size_t bf16_round_pack_512(float *dst, uint16_t *h, const float *src,
								    size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m512i b = bf16_bits_512(_mm512_loadu_si512((const void *)(src + i)));
		_mm512_storeu_si512((void *)(dst + i), b);
		_mm256_storeu_si256((__m256i *)(void *)(h + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(b, 16)));
	}
	return i;
}

/* (AVX2 has no unsigned compare: |x| fits a signed one) */
__attribute__((target("avx2"))) static inline __m256i bf16_bits_256(__m256i x)
{
	const __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
					   _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1)));
	const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
					       _mm256_set1_epi32(0x7f800000));
	return _mm256_and_si256(_mm256_blendv_epi8(r, _mm256_or_si256(x, _mm256_set1_epi32(0x400000)), nan),
				_mm256_set1_epi32((int)0xffff0000u));
}

__attribute__((target("avx2"))) static size_t bf16_pack_256(uint16_t *dst, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m256i a = _mm256_srli_epi32(bf16_bits_256(_mm256_loadu_si256((const __m256i *)(const void *)(src + i))), 16);
		const __m256i b = _mm256_srli_epi32(bf16_bits_256(_mm256_loadu_si256((const __m256i *)(const void *)(src + i + 8))), 16);
		/* packus interleaves the 128-bit halves: a0-3 b0-3 a4-7 b4-7 */
		_mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8));
	}
	return i;
}

__attribute__((target("avx2"))) static size_t bf16_round_pack_256(float *dst, uint16_t *h, const float *src,
								  size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m256i a = bf16_bits_256(_mm256_loadu_si256((const __m256i *)(const void *)(src + i)));
		const __m256i b = bf16_bits_256(_mm256_loadu_si256((const __m256i *)(const void *)(src + i + 8)));
		_mm256_storeu_si256((__m256i *)(void *)(dst + i), a);
		_mm256_storeu_si256((__m256i *)(void *)(dst + i + 8), b);
		const __m256i p = _mm256_packus_epi32(_mm256_srli_epi32(a, 16), _mm256_srli_epi32(b, 16));
		_mm256_storeu_si256((__m256i *)(void *)(h + i), _mm256_permute4x64_epi64(p, 0xd8));
	}
	return i;
}

__attribute__((target("avx2"))) static size_t bf16_unpack_256(float *dst, const uint16_t *src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
		_mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	}
	return i;
}

__attribute__((target("avx2"))) static size_t bf16_round_256(float *dst, const float *src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_si256((__m256i *)(void *)(dst + i),
				    bf16_bits_256(_mm256_loadu_si256((const __m256i *)(const void *)(src + i))));
	return i;
}

/* The vector path per format, indexed by enum ds_half_kind: 2 AVX-512F
 * (fp16: with its F16C conversions), 1 fp16's F16C at 8 lanes or bf16's
 * AVX2, 0 neither (every thread computes the same value); cap: what
 * ds_half_fp16_path and ds_half_bf16_path allow */
static int cap[3] = { 0, 2, 2 };
static int cpu_level(enum ds_half_kind k)
{
	static int level[3] = { 0, -1, -1 };
	if (level[k] < 0)
		level[k] = __builtin_cpu_supports("avx512f") ? 2
			   : (k == DS_HALF_FP16 ? __builtin_cpu_supports("f16c") : __builtin_cpu_supports("avx2")) ? 1
			   : 0;
	return level[k];
}
static int vec_level(enum ds_half_kind k) { return cpu_level(k) < cap[k] ? cpu_level(k) : cap[k]; }
#define HALF_VEC(K, FN, dst, src, n) \
	(vec_level(K) == 2 ? FN##_512(dst, src, n) : vec_level(K) == 1 ? FN##_256(dst, src, n) : 0)
#define ROUND_PACK_VEC(dst, h, src, n)                                                                               \
	(vec_level(DS_HALF_BF16) == 2   ? bf16_round_pack_512(dst, h, src, n)                                      \
	 : vec_level(DS_HALF_BF16) == 1 ? bf16_round_pack_256(dst, h, src, n)                                      \
					: 0)
#else
static int cap[3];
static int vec_level(enum ds_half_kind k)
{
	(void)k;
	return 0;
}
#define HALF_VEC(K, FN, dst, src, n) ((size_t)0)
#define ROUND_PACK_VEC(dst, h, src, n) ((size_t)0)
#endif

static int set_cap(enum ds_half_kind k, int force)
{
	cap[k] = force < 0 ? 2 : force;
	return vec_level(k);
}

int ds_half_fp16_path(int force) { return set_cap(DS_HALF_FP16, force); }
int ds_half_bf16_path(int force) { return set_cap(DS_HALF_BF16, force); }

static void bf16_pack_blk(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = HALF_VEC(DS_HALF_BF16, bf16_pack, dst, src, n); i < n; i++)
		dst[i] = (uint16_t)(bf16_bits(src[i]) >> 16);
}

static void bf16_unpack_blk(float *dst, const uint16_t *src, size_t n)
{
	for (size_t i = HALF_VEC(DS_HALF_BF16, bf16_unpack, dst, src, n); i < n; i++)
		dst[i] = ds_bf16_to_f32_exact(src[i]);
}

/* the round blocks take dst == src (element-wise, so in place is safe) */
static void bf16_round_blk(float *dst, const float *src, size_t n)
{
	for (size_t i = HALF_VEC(DS_HALF_BF16, bf16_round, dst, src, n); i < n; i++)
		dst[i] = ds_half_u2f(bf16_bits(src[i]));
}

static void fp16_pack_blk(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = HALF_VEC(DS_HALF_FP16, fp16_pack, dst, src, n); i < n; i++)
		dst[i] = ds_f32_to_f16_rne(src[i]);
}

static void fp16_unpack_blk(float *dst, const uint16_t *src, size_t n)
{
	for (size_t i = HALF_VEC(DS_HALF_FP16, fp16_unpack, dst, src, n); i < n; i++)
		dst[i] = ds_f16_to_f32_exact(src[i]);
}

static void fp16_round_blk(float *dst, const float *src, size_t n)
{
	for (size_t i = HALF_VEC(DS_HALF_FP16, fp16_round, dst, src, n); i < n; i++)
		dst[i] = ds_f16_to_f32_exact(ds_f32_to_f16_rne(src[i]));
}

/* Shared out among the threads only when the loop is long enough to pay
 * for a parallel region (PAR elements) and no region is open: a call from
 * inside one (a row of a batched product's C, a chunk of the engine's
 * gradients) or a short one runs on the calling thread and opens no region
 * at all.  An "if" clause is not enough: a region with the clause false
 * still builds a team, and libgomp allocates and frees one for every
 * nested region: more than half of what a bf16 step on sgemm cost beyond
 * the fp32 step (2026-12-02, bench/gpt-step tiny: round_c's per-row calls). */
#define PAR 65536

static int serial(size_t n)
{
#ifdef _OPENMP
	return n <= PAR || omp_in_parallel();
#else
	(void)n;
	return 1;
#endif
}

/* FN(dst + b, src + b, len) over [0, n) in blocks of BLK */
#define BULK(FN, dst, src, n)                                                                                     \
	do {                                                                                                          \
		if (serial(n)) {                                                                                      \
			for (size_t b_ = 0; b_ < (n); b_ += BLK)                                                      \
				FN((dst) + b_, (src) + b_, (n) - b_ < BLK ? (n) - b_ : BLK);                          \
		} else {                                                                                              \
			_Pragma("omp parallel for schedule(static)") for (size_t b_ = 0; b_ < (n); b_ += BLK)        \
				FN((dst) + b_, (src) + b_, (n) - b_ < BLK ? (n) - b_ : BLK);                          \
		}                                                                                                     \
	} while (0)

void ds_fp32_to_fp16_n(uint16_t *dst, const float *src, size_t n) { BULK(fp16_pack_blk, dst, src, n); }
void ds_fp16_to_fp32_n(float *dst, const uint16_t *src, size_t n) { BULK(fp16_unpack_blk, dst, src, n); }
void ds_fp32_to_bf16_n(uint16_t *dst, const float *src, size_t n) { BULK(bf16_pack_blk, dst, src, n); }
void ds_bf16_to_fp32_n(float *dst, const uint16_t *src, size_t n) { BULK(bf16_unpack_blk, dst, src, n); }

const char *ds_half_name(enum ds_half_kind k)
{
	return k == DS_HALF_FP16 ? "fp16" : k == DS_HALF_BF16 ? "bf16" : "fp32";
}

void ds_half_round_n(enum ds_half_kind k, float *x, size_t n)
{
	if (k == DS_HALF_FP16)
		BULK(fp16_round_blk, x, x, n);
	else if (k == DS_HALF_BF16)
		BULK(bf16_round_blk, x, x, n);
}

void ds_half_pack_n(enum ds_half_kind k, uint16_t *dst, const float *src, size_t n)
{
	if (k == DS_HALF_FP16)
		ds_fp32_to_fp16_n(dst, src, n);
	else
		ds_fp32_to_bf16_n(dst, src, n);
}

void ds_bf16_round_pack_n(float *dst, uint16_t *h, const float *src, size_t n)
{
	for (size_t i = ROUND_PACK_VEC(dst, h, src, n); i < n; i++) {
		const uint32_t b = bf16_bits(src[i]);
		h[i] = (uint16_t)(b >> 16);
		dst[i] = ds_half_u2f(b);
	}
}

void ds_half_sum_n(enum ds_half_kind k, uint16_t *acc, const uint16_t *x, size_t n)
{
	enum { CH = 1024 };
	float a[CH], b[CH];
	for (size_t c = 0; c < n; c += CH) {
		const size_t m = n - c < CH ? n - c : CH;
		ds_half_unpack_n(k, a, acc + c, m);
		ds_half_unpack_n(k, b, x + c, m);
		for (size_t i = 0; i < m; i++)
			a[i] += b[i];
		ds_half_pack_n(k, acc + c, a, m);
	}
}

void ds_half_widen_front(enum ds_half_kind k, float *dst, const uint16_t *src, size_t n)
{
	/* blocks of BLK in order; within one the vector loops read each
	 * vector before they store it, and a store at 4j bytes ends below the
	 * next unread source at 2n + 2(j + lanes) */
	for (size_t b = 0; b < n; b += BLK) {
		const size_t m = n - b < BLK ? n - b : BLK;
		if (k == DS_HALF_FP16)
			fp16_unpack_blk(dst + b, src + b, m);
		else
			bf16_unpack_blk(dst + b, src + b, m);
	}
}

void ds_half_unpack_n(enum ds_half_kind k, float *dst, const uint16_t *src, size_t n)
{
	if (k == DS_HALF_FP16)
		ds_fp16_to_fp32_n(dst, src, n);
	else
		ds_bf16_to_fp32_n(dst, src, n);
}
