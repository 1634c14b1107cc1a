/* clip.c - clipping factors and the non-finite / sum-of-squares / scale
 * passes (see clip.h).  The per-chunk kernels are target_clones, so each
 * runs as AVX-512, AVX2 or baseline code, picked once at load time; the
 * chunks are spread over OpenMP threads.
 */
#include "optim/clip.h"

#include <stdint.h>
#include <string.h>

#include "util/mem.h"

#define CHUNK 65536

double ds_clip_combined_divisor(double scaled_norm, double scale, double clip)
{
	double c = scale;
	if (clip > 0) {
		double f = (scaled_norm / scale + 1e-6) / clip;
		if (f > 1)
			c = f * scale;
	}
	return c;
}

double ds_clip_coef(double norm, double clip)
{
	if (clip <= 0)
		return 1.0;
	double c = clip / (norm + 1e-6);
	return c < 1.0 ? c : 1.0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

CLONES static unsigned nonfinite_chunk(const float *x, size_t n)
{
	unsigned acc = 0;
#pragma omp simd reduction(| : acc)
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, x + i, sizeof(u));
		acc |= (u & 0x7f800000u) == 0x7f800000u;
	}
	return acc;
}

CLONES static double sumsq_chunk(const float *x, size_t n)
{
	double acc = 0;
#pragma omp simd reduction(+ : acc)
	for (size_t i = 0; i < n; i++)
		acc += (double)x[i] * (double)x[i];
	return acc;
}

CLONES static void scale_chunk(float *x, size_t n, float mul)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++)
		x[i] *= mul;
}

int ds_clip_has_nonfinite(const float *x, size_t n)
{
	size_t nc = (n + CHUNK - 1) / CHUNK;
	unsigned any = 0;
#pragma omp parallel for schedule(static) reduction(| : any) if (nc > 1)
	for (size_t c = 0; c < nc; c++) {
		size_t lo = c * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
		any |= nonfinite_chunk(x + lo, len);
	}
	return any != 0;
}

double ds_clip_sumsq(const float *x, size_t n)
{
	size_t nc = (n + CHUNK - 1) / CHUNK;
	if (nc <= 1)
		return n ? sumsq_chunk(x, n) : 0.0;
	double sbuf[256];
	double *part = nc <= 256 ? sbuf : ds_alloc(nc * sizeof(double));
	if (!part) {
		/* no memory for the partials: one thread, same chunk order */
		double s = 0;
		for (size_t c = 0; c < nc; c++) {
			size_t lo = c * CHUNK;
			s += sumsq_chunk(x + lo, n - lo < CHUNK ? n - lo : CHUNK);
		}
		return s;
	}
#pragma omp parallel for schedule(static)
	for (size_t c = 0; c < nc; c++) {
		size_t lo = c * CHUNK;
		part[c] = sumsq_chunk(x + lo, n - lo < CHUNK ? n - lo : CHUNK);
	}
	double s = 0;
	for (size_t c = 0; c < nc; c++)
		s += part[c];
	if (part != sbuf)
		ds_free(part);
	return s;
}

void ds_clip_scale(float *x, size_t n, float mul)
{
	size_t nc = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (nc > 1)
	for (size_t c = 0; c < nc; c++) {
		size_t lo = c * CHUNK;
		scale_chunk(x + lo, n - lo < CHUNK ? n - lo : CHUNK, mul);
	}
}
