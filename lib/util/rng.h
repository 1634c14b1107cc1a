/* rng.h - Philox4x32-10 counter-based random numbers.
 *
 * DESIGN.md: parameter initialisation draws from (seed, tensor name, element
 * index) and dropout from (seed, step, global sample index, layer), so any
 * rank can produce any element without talking to anyone.  Philox is the
 * generator of Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"
 * (SC'11), checked against the Random123 known-answer vectors.
 */
#ifndef DS_UTIL_RNG_H
#define DS_UTIL_RNG_H

#include <stdint.h>

/* The inline functions below are the generator itself, shared by rng.c and
 * the CUDA kernels (kernels/cuda), so a dropout mask drawn on a GPU has the
 * CPU's bits: plain C, host and device under nvcc. */
#ifdef __CUDACC__
#define DS_RNG_HD __host__ __device__
#else
#define DS_RNG_HD
#endif

/* One Philox4x32-10 block: out = philox(ctr, key). */
void ds_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* 64-bit FNV-1a hash of a string, used to key streams by tensor name. */
uint64_t ds_hash_str(const char *s);

/* A stream: key = seed, counter = (c0, c1 = stream id words, index). */
struct ds_rng { uint32_t key[2]; uint32_t c0, c1; };

/* Philox4x32-10: ten rounds of two 32x32->64 products, Weyl key steps. */
static inline DS_RNG_HD void ds_philox_rounds(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	uint32_t k0 = key[0], k1 = key[1];
	for (int r = 0; r < 10; r++) {
		uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
		c0 = n0; c1 = n1; c2 = n2; c3 = n3;
		k0 += 0x9E3779B9u;
		k1 += 0xBB67AE85u;
	}
	out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* ds_rng_init's mix of (seed, a, b) into a stream. */
static inline DS_RNG_HD struct ds_rng ds_rng_make(uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t mix = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
	struct ds_rng r;
	r.key[0] = (uint32_t)seed;
	r.key[1] = (uint32_t)(seed >> 32);
	r.c0 = (uint32_t)mix;
	r.c1 = (uint32_t)(mix >> 32);
	return r;
}

/* ds_rng_block's counter: (idx low, idx high, c0, c1). */
static inline DS_RNG_HD void ds_rng_draw4(const struct ds_rng *r, uint64_t idx, uint32_t out[4])
{
	uint32_t ctr[4] = { (uint32_t)idx, (uint32_t)(idx >> 32), r->c0, r->c1 };
	ds_philox_rounds(ctr, r->key, out);
}

/* Stream for (seed, a, b): a and b are 64-bit ids, e.g. hash(name) and 0, or
 * step and layer. */
void ds_rng_init(struct ds_rng *r, uint64_t seed, uint64_t a, uint64_t b);

/* Four uniform uint32 for element block idx (elements 4*idx .. 4*idx+3). */
void ds_rng_block(const struct ds_rng *r, uint64_t idx, uint32_t out[4]);

/* Uniform in (0, 1) from a uint32 (never 0 or 1). */
static inline float ds_u32_to_unit(uint32_t x) { return ((float)(x >> 8) + 0.5f) * (1.0f / 16777216.0f); }

/* Element i of the stream as uniform (0,1) float. */
float ds_rng_uniform(const struct ds_rng *r, uint64_t i);

/* Element i of the stream as standard normal (Box-Muller on the pair that
 * contains i; deterministic per element). */
float ds_rng_normal(const struct ds_rng *r, uint64_t i);

#endif
