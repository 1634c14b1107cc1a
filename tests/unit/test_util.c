/* test_util.c - lib/util against published and hand-computed values:
 * CRC-32C check values (RFC 3720 B.4), Philox4x32-10 known-answer vectors
 * (Random123 kat_vectors), fp16/bf16 bit patterns worked out by hand,
 * size parsing and error-code mapping. */
#include "unit.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "util/crc32c.h"
#include "util/err.h"
#include "util/half.h"
#include "util/mem.h"
#include "util/rng.h"

static void test_crc32c_check_values(void **state)
{
	unsigned char buf[32];
	assert_int_equal(ds_crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(ds_crc32c_portable(0, "123456789", 9), 0xE3069283u);
	memset(buf, 0, 32);
	assert_int_equal(ds_crc32c(0, buf, 32), 0x8A9136AAu);
	memset(buf, 0xff, 32);
	assert_int_equal(ds_crc32c(0, buf, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	assert_int_equal(ds_crc32c(0, buf, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	assert_int_equal(ds_crc32c_portable(0, buf, 32), 0x113FDB5Cu);
	/* extending in pieces equals one pass */
	assert_int_equal(ds_crc32c(ds_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
	/* TFRecord's masked crc of the length 24 (spec/platform.md §7) */
	unsigned char len[8] = { 24, 0, 0, 0, 0, 0, 0, 0 };
	assert_int_equal(ds_crc32c_mask(ds_crc32c(0, len, 8)), 0x224b7fa3u);
}

static void test_philox_kat(void **state)
{
	static const uint32_t v[3][10] = {
		{ 0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
		{ 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
		  0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd },
		{ 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
		  0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 },
	};
	for (int t = 0; t < 3; t++) {
		uint32_t out[4];
		ds_philox4x32_10(v[t], v[t] + 4, out);
		for (int i = 0; i < 4; i++)
			assert_int_equal(out[i], v[t][6 + i]);
	}
}

static void test_rng_streams(void **state)
{
	struct ds_rng a, b;
	ds_rng_init(&a, 1234, ds_hash_str("transformer.h.0.attn.c_attn.weight"), 0);
	ds_rng_init(&b, 1234, ds_hash_str("transformer.h.1.attn.c_attn.weight"), 0);
	/* same key and index: same value, whatever order it is asked in */
	float x = ds_rng_normal(&a, 777);
	ds_rng_normal(&a, 3);
	assert_true(x == ds_rng_normal(&a, 777));
	assert_true(x != ds_rng_normal(&b, 777));
	/* moments of 200k normals and uniforms */
	double s = 0, s2 = 0, us = 0;
	const int n = 200000;
	for (int i = 0; i < n; i++) {
		double z = ds_rng_normal(&a, i), u = ds_rng_uniform(&a, i);
		assert_true(u > 0 && u < 1);
		s += z;
		s2 += z * z;
		us += u;
	}
	assert_true(fabs(s / n) < 0.01);
	assert_true(fabs(s2 / n - 1) < 0.02);
	assert_true(fabs(us / n - 0.5) < 0.005);
}

static float f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

static void test_fp16_bits(void **state)
{
	assert_int_equal(ds_fp32_to_fp16(1.0f), 0x3C00);
	assert_int_equal(ds_fp32_to_fp16(-2.0f), 0xC000);
	assert_int_equal(ds_fp32_to_fp16(0.1f), 0x2E66);
	assert_int_equal(ds_fp32_to_fp16(65504.0f), 0x7BFF);      /* max finite */
	assert_int_equal(ds_fp32_to_fp16(65519.0f), 0x7BFF);      /* below the tie */
	assert_int_equal(ds_fp32_to_fp16(65520.0f), 0x7C00);      /* tie -> even = inf */
	assert_int_equal(ds_fp32_to_fp16(1e10f), 0x7C00);
	assert_int_equal(ds_fp32_to_fp16(-INFINITY), 0xFC00);
	assert_int_equal(ds_fp32_to_fp16(ldexpf(1, -14)), 0x0400); /* min normal */
	assert_int_equal(ds_fp32_to_fp16(ldexpf(1, -24)), 0x0001); /* min subnormal */
	assert_int_equal(ds_fp32_to_fp16(ldexpf(1, -25)), 0x0000); /* tie -> even 0 */
	assert_int_equal(ds_fp32_to_fp16(ldexpf(3, -26)), 0x0001); /* 0.75 ulp */
	assert_int_equal(ds_fp32_to_fp16(ldexpf(3, -25)), 0x0002); /* 1.5 ulp tie -> 2 */
	assert_int_equal(ds_fp32_to_fp16(ldexpf(5, -25)), 0x0002); /* 2.5 ulp tie -> 2 */
	assert_int_equal(ds_fp32_to_fp16(ldexpf(1023, -24)), 0x03FF); /* max subnormal */
	assert_int_equal(ds_fp32_to_fp16(ldexpf(2047, -25)), 0x0400); /* rounds up into normal */
	assert_int_equal(ds_fp32_to_fp16(1.0f + ldexpf(1, -11)), 0x3C00); /* tie, even */
	assert_int_equal(ds_fp32_to_fp16(1.0f + ldexpf(3, -11)), 0x3C02); /* tie, up to even */
	assert_int_equal(ds_fp32_to_fp16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)), 0x3C01);
	assert_int_equal(ds_fp32_to_fp16(-0.0f), 0x8000);
	uint16_t nan = ds_fp32_to_fp16(NAN);
	assert_true((nan & 0x7C00) == 0x7C00 && (nan & 0x3FF));
	/* back to fp32 */
	assert_true(ds_fp16_to_fp32(0x3C00) == 1.0f);
	assert_true(ds_fp16_to_fp32(0x0001) == ldexpf(1, -24));
	assert_true(ds_fp16_to_fp32(0x03FF) == ldexpf(1023, -24));
	assert_true(ds_fp16_to_fp32(0x7BFF) == 65504.0f);
	assert_true(isinf(ds_fp16_to_fp32(0x7C00)));
	assert_true(isnan(ds_fp16_to_fp32(0x7E00)));
	assert_true(signbit(ds_fp16_to_fp32(0x8000)));
	/* every finite fp16 round-trips exactly */
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7C00) == 0x7C00)
			continue;
		assert_int_equal(ds_fp32_to_fp16(ds_fp16_to_fp32((uint16_t)h)), h);
	}
}

/* in-place rounding and the bulk pack/unpack used by mixed precision */
static void test_half_round_n(void **state)
{
	(void)state;
	float x[] = { 65504.0f, 65519.0f, 65520.0f, 1.0f + ldexpf(1, -11), 1.0f + ldexpf(1, -11) + ldexpf(1, -20),
		      1e-8f, -3.0f };
	const float want16[] = { 65504.0f, 65504.0f, INFINITY, 1.0f, 1.0f + ldexpf(1, -10), 0.0f, -3.0f };
	float y[7];
	memcpy(y, x, sizeof x);
	ds_half_round_n(DS_HALF_NONE, y, 7);
	assert_memory_equal(y, x, sizeof x);
	ds_half_round_n(DS_HALF_FP16, y, 7);
	for (int i = 0; i < 7; i++)
		assert_true(y[i] == want16[i]);
	float z[] = { 1.0f + ldexpf(1, -8), 3.14159265f, 1e-30f, f(0x7F7FFFFF) };
	ds_half_round_n(DS_HALF_BF16, z, 4);
	assert_true(z[0] == 1.0f);
	assert_true(z[1] == ds_bf16_to_fp32(0x4049));
	assert_true(z[2] == ds_bf16_to_fp32(ds_fp32_to_bf16(1e-30f)));
	assert_true(isinf(z[3]));
	/* bulk pack/unpack give the scalar functions' bits */
	enum { N = 1000 };
	float src[N], back[N];
	uint16_t h[N];
	for (int i = 0; i < N; i++)
		src[i] = ldexpf((float)(i - 500) * 1.37f, i % 40 - 20);
	for (int k = DS_HALF_FP16; k <= DS_HALF_BF16; k++) {
		ds_half_pack_n((enum ds_half_kind)k, h, src, N);
		ds_half_unpack_n((enum ds_half_kind)k, back, h, N);
		for (int i = 0; i < N; i++) {
			uint16_t w = k == DS_HALF_FP16 ? ds_fp32_to_fp16(src[i]) : ds_fp32_to_bf16(src[i]);
			assert_int_equal(h[i], w);
			float r = src[i];
			ds_half_round_n((enum ds_half_kind)k, &r, 1);
			assert_memory_equal(&back[i], &r, sizeof r);
		}
	}
	assert_string_equal(ds_half_name(DS_HALF_BF16), "bf16");
}

static void test_bf16_bits(void **state)
{
	assert_int_equal(ds_fp32_to_bf16(1.0f), 0x3F80);
	assert_int_equal(ds_fp32_to_bf16(3.14159265f), 0x4049);
	assert_int_equal(ds_fp32_to_bf16(1.0f + ldexpf(1, -8)), 0x3F80);  /* tie, even */
	assert_int_equal(ds_fp32_to_bf16(1.0f + ldexpf(3, -8)), 0x3F82);  /* tie, up to even */
	assert_int_equal(ds_fp32_to_bf16(f(0x7F7FFFFF)), 0x7F80);         /* FLT_MAX -> inf */
	assert_int_equal(ds_fp32_to_bf16(f(0x7F7F7FFF)), 0x7F7F);
	assert_int_equal(ds_fp32_to_bf16(f(0x00010000)), 0x0001);         /* subnormal kept */
	assert_int_equal(ds_fp32_to_bf16(f(0x00008000)), 0x0000);         /* tie -> even 0 */
	assert_int_equal(ds_fp32_to_bf16(f(0x00018000)), 0x0002);         /* tie -> even 2 */
	assert_int_equal(ds_fp32_to_bf16(-INFINITY), 0xFF80);
	assert_true(isnan(ds_bf16_to_fp32(ds_fp32_to_bf16(NAN))));
	assert_true(ds_bf16_to_fp32(0x4049) == 3.140625f);
	float src[5] = { 1.0f, -2.5f, 65504.0f, 1e-8f, 0.1f };
	uint16_t h[5];
	float back[5];
	ds_fp32_to_bf16_n(h, src, 5);
	ds_bf16_to_fp32_n(back, h, 5);
	for (int i = 0; i < 5; i++)
		assert_true(fabsf(back[i] - src[i]) <= fabsf(src[i]) * ldexpf(1, -8));
	ds_fp32_to_fp16_n(h, src, 5);
	ds_fp16_to_fp32_n(back, h, 5);
	assert_true(back[0] == 1.0f && back[1] == -2.5f && back[2] == 65504.0f);
}

/* bf16 reference written apart from the library's (the branchy form):
 * round to nearest even on the bits, NaN kept quiet */
static uint16_t ref_bf16(uint32_t x)
{
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	const uint32_t rest = x & 0xffffu, hi = x >> 16;
	if (rest > 0x8000u || (rest == 0x8000u && (hi & 1u)))
		return (uint16_t)(hi + 1u);
	return (uint16_t)hi;
}

/* The bulk bf16 loops (vectorised, shared out over threads in blocks) give
 * the reference's bits on every class of input: ties either way,
 * subnormals, overflow to inf, signed zeros, quiet and signalling NaNs with
 * payloads; over a length that is no multiple of the vector or block size,
 * above the threads' threshold, from an unaligned start. */
static void test_bf16_bulk(void **state)
{
	(void)state;
	enum { N = 200003 };
	uint32_t *u = malloc(sizeof(uint32_t) * (N + 1));
	float *x = malloc(sizeof(float) * (N + 1)), *y = malloc(sizeof(float) * (N + 1));
	uint16_t *h = malloc(sizeof(uint16_t) * (N + 1));
	assert_non_null(u); assert_non_null(x); assert_non_null(y); assert_non_null(h);
	static const uint32_t special[] = { 0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu,
					    0x3f808001u, 0x00008000u, 0x00018000u, 0x00010000u, 0x807fffffu,
					    0x7f7fffffu, 0xff7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
					    0x7f800001u, 0xffa5a5a5u, 0x7fffffffu, 0x7f7f7fffu, 0x3f80ffffu };
	uint32_t seed = 12345u;
	for (int i = 0; i < N + 1; i++) {
		seed = seed * 1664525u + 1013904223u;
		u[i] = i < (int)(sizeof special / sizeof special[0]) ? special[i]
		       : i % 7 == 0 ? (seed & 0x807fffffu) | ((uint32_t)(i % 3) << 23)   /* subnormal-ish */
		       : i % 11 == 0 ? (seed | 0x7f800000u)                               /* inf / nan */
		       : i % 5 == 0 ? (seed & 0xffff0000u) | 0x8000u                       /* ties */
		       : seed;
		memcpy(&x[i], &u[i], sizeof(float));
	}
	/* each path the CPU has (16 lanes, 8 lanes, scalar), from element 1:
	 * an unaligned start */
	const int top = ds_half_bf16_path(-1);
	for (int path = top; path >= 0; path--) {
		assert_int_equal(ds_half_bf16_path(path), path);
		memset(h, 0, sizeof(uint16_t) * (N + 1));
		ds_fp32_to_bf16_n(h + 1, x + 1, N);
		for (int i = 1; i <= N; i++)
			if (h[i] != ref_bf16(u[i]))
				fail_msg("path %d: pack %08x: %04x, want %04x", path, u[i], h[i], ref_bf16(u[i]));
		ds_bf16_to_fp32_n(y + 1, h + 1, N);
		for (int i = 1; i <= N; i++) {
			uint32_t w;
			memcpy(&w, &y[i], sizeof w);
			if (w != (uint32_t)h[i] << 16)
				fail_msg("path %d: unpack %04x: %08x", path, h[i], w);
		}
		memcpy(y, x, sizeof(float) * (N + 1));
		ds_half_round_n(DS_HALF_BF16, y + 1, N);
		for (int i = 1; i <= N; i++) {
			uint32_t w;
			memcpy(&w, &y[i], sizeof w);
			if (w != (uint32_t)ref_bf16(u[i]) << 16)
				fail_msg("path %d: round %08x: %08x, want %08x", path, u[i], w,
					 (uint32_t)ref_bf16(u[i]) << 16);
		}
		/* round and pack in one pass, in place: both of the above */
		memcpy(y, x, sizeof(float) * (N + 1));
		memset(h, 0, sizeof(uint16_t) * (N + 1));
		ds_bf16_round_pack_n(y + 1, h + 1, y + 1, N);
		for (int i = 1; i <= N; i++) {
			uint32_t w;
			memcpy(&w, &y[i], sizeof w);
			if (h[i] != ref_bf16(u[i]) || w != (uint32_t)ref_bf16(u[i]) << 16)
				fail_msg("path %d: round_pack %08x: %08x %04x, want %04x", path, u[i], w, h[i],
					 ref_bf16(u[i]));
		}
	}
	ds_half_bf16_path(-1);
	free(u); free(x); free(y); free(h);
}

/* The bulk fp16 loops on each path the CPU has (F16C at 16 and 8 lanes,
 * the scalar loop) give the scalar functions' bits (test_fp16_bits checks
 * those by hand): unpacking every one of the 65536 fp16 values (NaNs come
 * out quiet with their payload), packing and rounding a sweep of fp32 bit
 * patterns that covers every exponent (ties, subnormals, overflow, NaNs),
 * over lengths no multiple of the vector or block size, above the threads'
 * threshold, from an unaligned start. */
static void test_fp16_bulk(void **state)
{
	(void)state;
	enum { N = 200003, H = 65536 };
	float *x = malloc(sizeof(float) * (N + 1)), *y = malloc(sizeof(float) * (N + 1)), *hf = malloc(sizeof(float) * (H + 1));
	uint16_t *h = malloc(sizeof(uint16_t) * (N + 1)), *all = malloc(sizeof(uint16_t) * (H + 1));
	assert_non_null(x); assert_non_null(y); assert_non_null(hf); assert_non_null(h); assert_non_null(all);
	uint32_t seed = 777u;
	for (int i = 0; i <= N; i++) {
		/* every exponent in turn with a random sign and mantissa; every 3rd
		 * mantissa a tie at fp16's rounding point (bit 12, or lower bits for
		 * fp16 subnormals: a half-way mantissa at every shift) */
		seed = seed * 1664525u + 1013904223u;
		uint32_t u = (seed & 0x807fffffu) | ((uint32_t)(i % 256) << 23);
		if (i % 3 == 0)
			u = (u & ~0x1fffu) | (0x1000u >> (i % 13));
		memcpy(&x[i], &u, sizeof u);
	}
	for (int i = 0; i < H; i++)
		all[i + 1] = (uint16_t)i;
	const int top = ds_half_fp16_path(-1);
	for (int path = top; path >= 0; path--) {
		assert_int_equal(ds_half_fp16_path(path), path);
		ds_fp16_to_fp32_n(hf + 1, all + 1, H);
		for (int i = 0; i < H; i++) {
			float want = ds_fp16_to_fp32((uint16_t)i);
			if (memcmp(&hf[i + 1], &want, sizeof want))
				fail_msg("path %d: unpack %04x: %a, want %a", path, i, (double)hf[i + 1], (double)want);
		}
		ds_fp32_to_fp16_n(h + 1, x + 1, N);
		for (int i = 1; i <= N; i++)
			if (h[i] != ds_fp32_to_fp16(x[i]))
				fail_msg("path %d: pack %a: %04x, want %04x", path, (double)x[i], h[i], ds_fp32_to_fp16(x[i]));
		memcpy(y, x, sizeof(float) * (N + 1));
		ds_half_round_n(DS_HALF_FP16, y + 1, N);
		for (int i = 1; i <= N; i++) {
			float want = ds_fp16_to_fp32(ds_fp32_to_fp16(x[i]));
			if (memcmp(&y[i], &want, sizeof want))
				fail_msg("path %d: round %a: %a, want %a", path, (double)x[i], (double)y[i], (double)want);
		}
	}
	/* widened in place from dst's back half, as the checkpoint readers do:
	 * every value survives (several blocks, an odd length) */
	for (int kk = 0; kk < 2; kk++) {
		enum { W = 3 * 8192 + 7 };
		const enum ds_half_kind k = kk ? DS_HALF_BF16 : DS_HALF_FP16;
		float *d = malloc(sizeof(float) * W);
		assert_non_null(d);
		uint16_t *src = (uint16_t *)(void *)d + W;
		for (int i = 0; i < W; i++)
			src[i] = (uint16_t)(i * 40503u);
		ds_half_widen_front(k, d, src, W);
		for (int i = 0; i < W; i++) {
			const uint16_t v = (uint16_t)(i * 40503u);
			float want = kk ? ds_bf16_to_fp32(v) : ds_fp16_to_fp32(v);
			if (memcmp(&d[i], &want, sizeof want))
				fail_msg("%s widen in place %d (%04x): %a, want %a", ds_half_name(k), i, v, (double)d[i],
					 (double)want);
		}
		free(d);
	}
	/* a quiet NaN out of a signalling fp16 one, payload kept */
	uint32_t w;
	float q = ds_fp16_to_fp32(0x7c01);
	memcpy(&w, &q, sizeof w);
	assert_int_equal(w, 0x7fc02000u);
	ds_half_fp16_path(-1);
	free(x); free(y); free(hf); free(h); free(all);
}

/* The bulk conversions called from inside a parallel region (a row of a
 * batched product's C, a chunk of the engine's gradients) run on the
 * calling thread: each thread's slice, long enough to be shared out at top
 * level, gets the bits the scalar conversions give, in both formats and
 * every direction; so do short calls. */
static void test_half_bulk_nested(void **state)
{
	(void)state;
	enum { N = 2 * 70001 };
	float *x = malloc(sizeof(float) * N), *r = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
	uint16_t *h = malloc(sizeof(uint16_t) * N);
	assert_non_null(x); assert_non_null(r); assert_non_null(b); assert_non_null(h);
	uint32_t seed = 777u;
	for (int i = 0; i < N; i++) {
		seed = seed * 1664525u + 1013904223u;
		uint32_t u = (seed & 0x8fffffffu) + 0x30000000u;   /* finite, 2^-31 to 2: fp16's underflow and normals */
		memcpy(&x[i], &u, sizeof u);
	}
	for (int k = DS_HALF_FP16; k <= DS_HALF_BF16; k++) {
		const enum ds_half_kind kind = (enum ds_half_kind)k;
		int bad = 0;
		memcpy(r, x, sizeof(float) * N);
#pragma omp parallel num_threads(2) reduction(+ : bad)
		{
			const int t = omp_get_thread_num(), nt = omp_get_num_threads();
			const size_t len = (size_t)N / (size_t)nt, o = (size_t)t * len;
			ds_half_pack_n(kind, h + o, x + o, len);
			ds_half_unpack_n(kind, b + o, h + o, len);
			ds_half_round_n(kind, r + o, len);
			ds_half_round_n(kind, r + o, 5);   /* a short call: rounding twice changes nothing */
			for (size_t i = o; i < o + len; i++) {
				const uint16_t want = kind == DS_HALF_FP16 ? ds_fp32_to_fp16(x[i]) : ds_fp32_to_bf16(x[i]);
				const float back = kind == DS_HALF_FP16 ? ds_fp16_to_fp32(want) : ds_bf16_to_fp32(want);
				bad += h[i] != want || memcmp(&b[i], &back, sizeof back) || memcmp(&r[i], &back, sizeof back);
			}
		}
		if (bad)
			fail_msg("%s: %d of %d elements differ from the scalar conversions inside a parallel region",
				 ds_half_name(kind), bad, N);
	}
	free(x); free(r); free(b); free(h);
}

static void test_parse_and_errors(void **state)
{
	uint64_t v;
	assert_int_equal(ds_parse_size("4096", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(ds_parse_size("4K", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(ds_parse_size("1M", &v), 0);
	assert_int_equal(v, 1048576);
	assert_int_equal(ds_parse_size("1.5GiB", &v), 0);
	assert_int_equal(v, 1610612736ull);
	assert_int_equal(ds_parse_size("5e8", &v), 0);
	assert_int_equal(v, 500000000ull);
	assert_int_equal(ds_parse_size("-1", &v), DS_EINVAL);
	assert_int_equal(ds_parse_size("12Q", &v), DS_EINVAL);
	assert_int_equal(ds_parse_size("0.5", &v), DS_EINVAL);
	assert_int_equal(ds_parse_u64("17", 1, 32, &v), 0);
	assert_int_equal(ds_parse_u64("33", 1, 32, &v), DS_EINVAL);
	assert_int_equal(ds_parse_u64("1x", 1, 32, &v), DS_EINVAL);

	struct ds_err e = DS_ERR_INIT;
	assert_int_equal(ds_err_set(&e, DS_EINVAL, "key '%s': bad", "x"), DS_EINVAL);
	ds_err_prefix(&e, "%s: ", "a.json");
	assert_string_equal(e.msg, "a.json: key 'x': bad");
	assert_int_equal(ds_exit_code(DS_EINVAL), 2);
	assert_int_equal(ds_exit_code(DS_ECORRUPT), 2);
	assert_int_equal(ds_exit_code(DS_EIO), 1);
	assert_int_equal(ds_exit_code(DS_ENOTSUP), 3);
	assert_int_equal(ds_exit_code(DS_ESIGNAL), 4);
	assert_int_equal(ds_exit_code(DS_ETIMEOUT), 5);
}

static void test_alloc_accounting(void **state)
{
	size_t before = ds_mem_held();
	float *p = ds_alloc(1000 * sizeof(float));
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % DS_ALIGN, 0);
	assert_true(p[0] == 0 && p[999] == 0);
	assert_int_equal(ds_mem_held() - before, 4000);
	void *q = ds_alloc_aligned(10, 4096);
	assert_int_equal((uintptr_t)q % 4096, 0);
	ds_free(p);
	ds_free(q);
	ds_free(NULL);
	assert_int_equal(ds_mem_held(), before);
	assert_true(ds_mem_peak() >= before + 4010);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_check_values),
		cmocka_unit_test(test_philox_kat),
		cmocka_unit_test(test_rng_streams),
		cmocka_unit_test(test_fp16_bits),
		cmocka_unit_test(test_bf16_bits),
		cmocka_unit_test(test_bf16_bulk),
		cmocka_unit_test(test_fp16_bulk),
		cmocka_unit_test(test_half_round_n),
		cmocka_unit_test(test_half_bulk_nested),
		cmocka_unit_test(test_parse_and_errors),
		cmocka_unit_test(test_alloc_accounting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
