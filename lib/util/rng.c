/* rng.c - Philox4x32-10 and per-element streams (see rng.h). */
#include "util/rng.h"

#include <math.h>

void ds_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
	ds_philox_rounds(ctr, key, out);
}

uint64_t ds_hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

/* Mix the two 64-bit stream ids into the upper counter words and the seed
 * into the key; the lower two counter words carry the block index
 * (ds_rng_make and ds_rng_draw4 in rng.h, shared with the CUDA kernels). */
void ds_rng_init(struct ds_rng *r, uint64_t seed, uint64_t a, uint64_t b)
{
	*r = ds_rng_make(seed, a, b);
}

void ds_rng_block(const struct ds_rng *r, uint64_t idx, uint32_t out[4])
{
	ds_rng_draw4(r, idx, out);
}

float ds_rng_uniform(const struct ds_rng *r, uint64_t i)
{
	uint32_t o[4];
	ds_rng_block(r, i >> 2, o);
	return ds_u32_to_unit(o[i & 3]);
}

float ds_rng_normal(const struct ds_rng *r, uint64_t i)
{
	uint32_t o[4];
	ds_rng_block(r, i >> 2, o);
	/* elements (0,1) and (2,3) of a block form Box-Muller pairs */
	unsigned j = (unsigned)(i & 3) & ~1u;
	double u1 = ds_u32_to_unit(o[j]), u2 = ds_u32_to_unit(o[j + 1]);
	double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
	return (float)((i & 1) ? rad * sin(th) : rad * cos(th));
}
