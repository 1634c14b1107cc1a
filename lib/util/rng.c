/* rng.c - Philox4x32-10 and per-element streams (see rng.h). */
#include "util/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
	uint64_t p = (uint64_t)a * b;
	*hi = (uint32_t)(p >> 32);
	*lo = (uint32_t)p;
}

void ds_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	uint32_t k0 = key[0], k1 = key[1];
	for (int r = 0; r < 10; r++) {
		uint32_t hi0, lo0, hi1, lo1;
		mulhilo(PHILOX_M0, c0, &hi0, &lo0);
		mulhilo(PHILOX_M1, c2, &hi1, &lo1);
		uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
		c0 = n0; c1 = n1; c2 = n2; c3 = n3;
		k0 += PHILOX_W0;
		k1 += PHILOX_W1;
	}
	out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
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
 * into the key; the lower two counter words carry the block index. */
void ds_rng_init(struct ds_rng *r, uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t mix = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
	r->key[0] = (uint32_t)seed;
	r->key[1] = (uint32_t)(seed >> 32);
	r->c0 = (uint32_t)mix;
	r->c1 = (uint32_t)(mix >> 32);
}

void ds_rng_block(const struct ds_rng *r, uint64_t idx, uint32_t out[4])
{
	uint32_t ctr[4] = { (uint32_t)idx, (uint32_t)(idx >> 32), r->c0, r->c1 };
	ds_philox4x32_10(ctr, r->key, out);
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
