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

/* One Philox4x32-10 block: out = philox(ctr, key). */
void ds_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* 64-bit FNV-1a hash of a string, used to key streams by tensor name. */
uint64_t ds_hash_str(const char *s);

/* A stream: key = seed, counter = (c0, c1 = stream id words, index). */
struct ds_rng { uint32_t key[2]; uint32_t c0, c1; };

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
