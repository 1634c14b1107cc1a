/* adamw.c - benchmark (not a test): one AdamW pass over GPT-2 124M's
 * parameters (p, g, m, v: four flat fp32 buffers) per kernel, in GB/s,
 * next to the STREAM-style triad measured in the same run.
 * Bytes are counted as 28 per parameter: read p, g, m, v and write p, m, v.
 * The triad (kernels/cpu/ceiling.c) counts 12 bytes per element, STREAM's
 * convention, which leaves out the write-allocate read of its output array
 * (16 bytes really move).  So the run also measures an in-place update
 * a[i] += s*b[i] (12 bytes, all of them real, no write-allocate), the
 * access pattern of an optimizer, as a second reference, and the same
 * 4-read/3-write pattern as AdamW with almost no arithmetic ("pattern",
 * 28 bytes), which is what the kernel would reach if it were purely
 * memory-bound: on few cores the bandwidth depends on the number of streams.
 *
 *   bench/adamw [-n PARAMS] [-r ROUNDS] [--scalar] [--json]
 */
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ceiling.h"
#include "optim/optim.h"
#include "util/err.h"
#include "util/mem.h"
#include "util/timer.h"

/* Best GB/s of a[i] += s*b[i] over n floats (12 bytes per element). */
static double rmw_gbs(float *a, const float *b, size_t n, int reps)
{
	double best = 0;
	for (int r = 0; r < reps; r++) {
		double t0 = ds_now();
#pragma omp parallel for simd schedule(static)
		for (size_t i = 0; i < n; i++)
			a[i] += 1e-7f * b[i];
		double g = 12.0 * (double)n / (ds_now() - t0) * 1e-9;
		if (g > best)
			best = g;
	}
	return best;
}

/* Best GB/s of AdamW's access pattern with trivial arithmetic (28 B/elem). */
static double pattern_gbs(float *p, const float *g, float *m, float *v, size_t n, int reps)
{
	double best = 0;
	for (int r = 0; r < reps; r++) {
		double t0 = ds_now();
#pragma omp parallel for simd schedule(static)
		for (size_t i = 0; i < n; i++) {
			float gi = g[i];
			m[i] = 0.9f * m[i] + 0.1f * gi;
			v[i] = 0.999f * v[i] + 0.001f * (gi * gi);
			p[i] = p[i] - 1e-7f * gi;
		}
		double gbs = 28.0 * (double)n / (ds_now() - t0) * 1e-9;
		if (gbs > best)
			best = gbs;
	}
	return best;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint64_t n = 124439808;   /* GPT-2 124M (HF vocabulary 50257) */
	uint64_t reps = 10;
	int json = 0, with_scalar = 0;
	static const struct option longopts[] = {
		{ "params", required_argument, NULL, 'n' },
		{ "repeats", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "scalar", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "n:r:jsh", longopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (ds_parse_size(optarg, &n) < 0 || n == 0) {
				fprintf(stderr, "adamw: bad -n '%s'\n", optarg);
				return 2;
			}
			break;
		case 'r':
			if (ds_parse_u64(optarg, 1, 1000, &reps) < 0) {
				fprintf(stderr, "adamw: bad -r '%s' (1..1000)\n", optarg);
				return 2;
			}
			break;
		case 'j':
			json = 1;
			break;
		case 's':
			with_scalar = 1;
			break;
		case 'h':
			printf("Usage: bench/adamw [-n PARAMS] [-r ROUNDS] [--scalar] [--json]\n"
			       "AdamW pass over PARAMS fp32 parameters (default 124439808) per SIMD kernel,\n"
			       "in GB/s (28 bytes/param), next to a triad measured in the same run.\n"
			       "  -n, --params=N    parameters (default 124439808, GPT-2 124M)\n"
			       "  -r, --repeats=N   measured rounds, each running every kernel and reference once\n"
			       "                    (default 10; best and median reported)\n"
			       "  -s, --scalar      also time the scalar reference kernel (slow)\n"
			       "  -j, --json        one JSON object on stdout\n");
			return 0;
		default:
			fprintf(stderr, "Try 'bench/adamw --help'\n");
			return 2;
		}
	}
	size_t bytes = (size_t)n * sizeof(float);
	float *p = ds_alloc_aligned(bytes, 4096), *g = ds_alloc_aligned(bytes, 4096);
	float *m = ds_alloc_aligned(bytes, 4096), *v = ds_alloc_aligned(bytes, 4096);
	if (!p || !g || !m || !v) {
		fprintf(stderr, "adamw: cannot allocate 4 x %zu bytes\n", bytes);
		return 1;
	}
	/* first touch by the threads that will run the kernel */
#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < n; i++) {
		p[i] = 0.01f * (float)(i % 97) - 0.5f;
		g[i] = 1e-3f * (float)(i % 89) - 0.04f;
		m[i] = 0;
		v[i] = 0;
	}
	/* the triad on arrays of the same size as one buffer (at least 256 MiB) */
	struct ds_optim_params hp;
	ds_optim_params_init(&hp, DS_OPTIM_ADAMW);
	hp.lr = 6e-4;
	hp.weight_decay = 0.1;
	static const enum ds_simd isas[] = { DS_SIMD_AVX512, DS_SIMD_AVX2, DS_SIMD_SCALAR };
	int nisa = with_scalar ? 3 : 2;
	double best[3] = { 0 }, med[3] = { 0 };
	double *t = calloc(reps * 3, sizeof(double));
	double triad = 0, rmw = 0, pattern = 0;
	int64_t step = 0;
	/* Rounds interleave the references and the kernels, so that a machine
	 * shared with other work slows all of them alike; round 0 warms up. */
	for (uint64_t r = 0; r <= reps; r++) {
		double tr = ds_ceiling_triad_gbs(bytes > (256u << 20) ? bytes : (256u << 20), 0);
		double rm = rmw_gbs(m, g, n, 1), pa = pattern_gbs(p, g, m, v, n, 1);
		if (r > 0) {
			triad = tr > triad ? tr : triad;
			rmw = rm > rmw ? rm : rmw;
			pattern = pa > pattern ? pa : pattern;
		}
		for (int k = 0; k < nisa; k++) {
			if (!ds_simd_supported(isas[k]))
				continue;
			struct ds_adam_coef co;
			ds_adam_coef_init(&co, &hp, ++step, 1.0f);
			double t0 = ds_now();
			ds_adam_update(&co, p, g, m, v, n, isas[k]);
			if (r > 0)
				t[k * reps + r - 1] = ds_now() - t0;
		}
	}
	for (int k = 0; k < nisa; k++) {
		if (!ds_simd_supported(isas[k]))
			continue;
		qsort(t + k * reps, reps, sizeof(double), cmp_double);
		best[k] = 28.0 * (double)n / t[k * reps] * 1e-9;
		med[k] = 28.0 * (double)n / t[k * reps + reps / 2] * 1e-9;
	}
	int threads = omp_get_max_threads();
	if (json) {
		printf("{\"params\": %llu, \"threads\": %d, \"repeats\": %llu, \"bytes_per_param\": 28, "
		       "\"triad_gbps\": %.2f, \"rmw_gbps\": %.2f, \"pattern_gbps\": %.2f",
		       (unsigned long long)n, threads, (unsigned long long)reps, triad, rmw, pattern);
		for (int k = 0; k < 3; k++)
			if (best[k] > 0)
				printf(", \"%s\": {\"best_gbps\": %.2f, \"median_gbps\": %.2f, \"ms\": %.2f, "
				       "\"of_triad\": %.3f, \"of_rmw\": %.3f, \"of_pattern\": %.3f}",
				       ds_simd_name(isas[k]), best[k], med[k], 28.0 * (double)n / best[k] * 1e-6,
				       best[k] / triad, best[k] / rmw, best[k] / pattern);
		printf("}\n");
	} else {
		printf("# AdamW pass over %llu params, %d threads, best of %llu rounds (28 bytes/param)\n",
		       (unsigned long long)n, threads, (unsigned long long)reps);
		printf("# %-8s %10s %10s %10s %9s %9s %10s\n", "kernel", "ms", "GB/s", "median", "of_triad",
		       "of_rmw", "of_pattern");
		for (int k = 0; k < 3; k++)
			if (best[k] > 0)
				printf("  %-8s %10.2f %10.2f %10.2f %8.1f%% %8.1f%% %9.1f%%\n", ds_simd_name(isas[k]),
				       28.0 * (double)n / best[k] * 1e-6, best[k], med[k], 100.0 * best[k] / triad,
				       100.0 * best[k] / rmw, 100.0 * best[k] / pattern);
		printf("  %-8s %10s %10.2f %10s   (STREAM count, 12 B/elem)\n", "triad", "-", triad, "-");
		printf("  %-8s %10s %10.2f %10s   (a[i] += s*b[i], 12 B/elem)\n", "rmw", "-", rmw, "-");
		printf("  %-8s %10s %10.2f %10s   (AdamW's 4-read/3-write pattern, 28 B/elem)\n", "pattern", "-",
		       pattern, "-");
	}
	free(t);
	ds_free(p);
	ds_free(g);
	ds_free(m);
	ds_free(v);
	return 0;
}
