/* ceiling.c - sgemm and triad ceilings (see ceiling.h). */
#include "cpu/ceiling.h"

#include <cblas.h>

#include "util/err.h"
#include "util/mem.h"
#include "util/timer.h"

double ds_ceiling_sgemm_gflops(int n, double seconds)
{
	if (n <= 0)
		n = 1024;
	size_t nn = (size_t)n * n;
	float *a = ds_alloc(nn * sizeof(float)), *b = ds_alloc(nn * sizeof(float)),
	      *c = ds_alloc(nn * sizeof(float));
	double best = 0;
	if (!a || !b || !c) {
		best = DS_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < nn; i++) {
		a[i] = (float)(i % 7) * 0.1f;
		b[i] = (float)(i % 5) * 0.2f;
	}
	/* one untimed call warms up the BLAS thread pool */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
	double end = ds_now() + seconds;
	int reps = 0;
	do {
		double t0 = ds_now();
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
		double dt = ds_now() - t0;
		double g = 2.0 * n * (double)nn / dt * 1e-9;
		if (g > best)
			best = g;
	} while (++reps < 3 || ds_now() < end);
out:
	ds_free(a);
	ds_free(b);
	ds_free(c);
	return best;
}

double ds_ceiling_triad_gbs(size_t bytes, double seconds)
{
	if (!bytes)
		bytes = 256u << 20;
	size_t n = bytes / sizeof(float);
	float *a = ds_alloc(n * sizeof(float)), *b = ds_alloc(n * sizeof(float)), *c = ds_alloc(n * sizeof(float));
	double best = 0;
	if (!a || !b || !c) {
		best = DS_ENOMEM;
		goto out;
	}
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i++) {
		b[i] = 1.0f;
		c[i] = 2.0f;
	}
	double end = ds_now() + seconds;
	int reps = 0;
	do {
		double t0 = ds_now();
#pragma omp parallel for simd schedule(static)
		for (size_t i = 0; i < n; i++)
			a[i] = b[i] + 0.5f * c[i];
		double dt = ds_now() - t0;
		double g = 3.0 * (double)n * sizeof(float) / dt * 1e-9;
		if (g > best)
			best = g;
	} while (++reps < 3 || ds_now() < end);
out:
	ds_free(a);
	ds_free(b);
	ds_free(c);
	return best;
}
