/* onebit.c - the element work of DeepSpeed's compressed allreduce (see
 * onebit.h): error feedback, per-chunk scales, sign packing and decoding.
 * Every result is a pure function of the inputs: sums of squares are taken
 * in double over fixed 8192-element chunks added in order, so they do not
 * depend on the number of OpenMP threads.
 */
#include "cpu/onebit.h"

#include <math.h>
#include <stdlib.h>

#define SUMSQ_CHUNK 8192

static size_t gcd(size_t a, size_t b)
{
	while (b) {
		size_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

size_t ds_onebit_padded(size_t n, int world)
{
	size_t w = world > 0 ? (size_t)world : 1;
	size_t unit = w * (w * 8 / gcd(w, 8));  /* size * divider, divider = lcm(size, 8) */
	return (n + unit - 1) / unit * unit;
}

static double chunk_sumsq(float *x, const float *e, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++) {
		if (e)
			x[i] += e[i];
		s += (double)x[i] * x[i];
	}
	return s;
}

double ds_onebit_add_sumsq(float *x, const float *e, size_t n)
{
	size_t nc = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
	double *part = nc > 1 ? malloc(nc * sizeof(double)) : NULL;
	double s = 0;
	if (!part) {  /* one chunk, or no memory: the same sums, in the same order, on one thread */
		for (size_t c = 0; c < nc; c++) {
			size_t lo = c * SUMSQ_CHUNK, m = n - lo < SUMSQ_CHUNK ? n - lo : SUMSQ_CHUNK;
			s += chunk_sumsq(x + lo, e ? e + lo : NULL, m);
		}
		return s;
	}
#pragma omp parallel for schedule(static)
	for (size_t c = 0; c < nc; c++) {
		size_t lo = c * SUMSQ_CHUNK, m = n - lo < SUMSQ_CHUNK ? n - lo : SUMSQ_CHUNK;
		part[c] = chunk_sumsq(x + lo, e ? e + lo : NULL, m);
	}
	for (size_t c = 0; c < nc; c++)
		s += part[c];
	free(part);
	return s;
}

float ds_onebit_scale(double sumsq, size_t n)
{
	return n ? (float)(sqrt(sumsq) / sqrt((double)n)) : 0.0f;
}

void ds_onebit_pack(const float *x, size_t n, float scale, float *err, uint8_t *bits)
{
	const size_t nb = n / 8;
#pragma omp parallel for schedule(static) if (nb > 8192)
	for (size_t k = 0; k < nb; k++) {
		unsigned b = 0;
		for (int j = 0; j < 8; j++) {
			float v = x[8 * k + (size_t)j];
			unsigned pos = !(v < 0.0f);  /* NaN and both zeros count as + */
			b |= pos << (7 - j);
			if (err)
				err[8 * k + (size_t)j] = pos ? v - scale : v + scale;
		}
		bits[k] = (uint8_t)b;
	}
}

void ds_onebit_unpack(const uint8_t *bits, size_t n, float scale, float *out)
{
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		out[i] = (bits[i / 8] >> (7 - i % 8)) & 1u ? scale : -scale;
}

float ds_onebit_compress(float *x, float *err, size_t n, uint8_t *bits)
{
	float scale = ds_onebit_scale(ds_onebit_add_sumsq(x, err, n), n);
	ds_onebit_pack(x, n, scale, err, bits);
	return scale;
}

float ds_onebit_server(const uint8_t *signs, const float *scales, int W, size_t chunk, float *err, float *tmp,
		       uint8_t *bits)
{
	/* torch: unpack -> +-1, times scale_r * (1/size) as a float scalar,
	 * sum over the ranks (from 0, in rank order), plus the server error */
	const float inv = (float)(1.0 / W);
	const size_t rb = chunk / 8;
#pragma omp parallel for schedule(static) if (chunk > 65536)
	for (size_t i = 0; i < chunk; i++) {
		float acc = 0.0f;
		for (int r = 0; r < W; r++) {
			float s = scales[r] * inv;
			acc += (signs[(size_t)r * rb + i / 8] >> (7 - i % 8)) & 1u ? s : -s;
		}
		tmp[i] = acc + err[i];
	}
	/* the compensated chunk is compressed like a worker's, err becoming
	 * its new error */
	float scale = ds_onebit_scale(ds_onebit_add_sumsq(tmp, NULL, chunk), chunk);
	ds_onebit_pack(tmp, chunk, scale, err, bits);
	return scale;
}

void ds_onebit_decode(const uint8_t *signs, const float *scales, int W, size_t chunk, float *out)
{
	for (int r = 0; r < W; r++)
		ds_onebit_unpack(signs + (size_t)r * (chunk / 8), chunk, scales[r], out + (size_t)r * chunk);
}
