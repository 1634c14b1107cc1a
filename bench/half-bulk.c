/* half-bulk.c - benchmark (not a test) of the 16-bit conversions a
 * mixed-precision step and a 16-bit gradient reduction make on the CPU:
 * libds's bulk loops (lib/util/half.c: F16C for fp16, AVX-512F or AVX2
 * integer arithmetic for bf16) against the per-element scalar conversions they
 * replace, on N elements, one thread, the best of ROUNDS, next to the
 * machine's copy bandwidth measured in the same run (memcpy of the same
 * bytes).  "sum" is the 16-bit allreduce's operator (ds_half_sum_n, which
 * lib/comm/comm_mpi.c calls): unpack both, add in fp32, round once.
 *
 *   bench/half-bulk [N] [ROUNDS]      (default 16777216 5)
 *
 * Prints one line per format and operation: elements per second of the
 * scalar loop and of the bulk one, their ratio, and the bulk loop's bytes
 * moved per second beside memcpy's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/half.h"
#include "util/mem.h"
#include "util/timer.h"

enum { OP_PACK, OP_UNPACK, OP_ROUND, OP_SUM, NOP };
static const char *const op_name[NOP] = { "pack", "unpack", "round", "sum" };
/* bytes each element moves: read + written */
static const double op_bytes[NOP] = { 4 + 2, 2 + 4, 4 + 4, 2 + 2 + 2 };

static volatile uint32_t sink;

static void scalar(int op, enum ds_half_kind k, float *f, uint16_t *a, uint16_t *b, size_t n)
{
	const int h = k == DS_HALF_FP16;
	for (size_t i = 0; i < n; i++) {
		switch (op) {
		case OP_PACK: a[i] = h ? ds_fp32_to_fp16(f[i]) : ds_fp32_to_bf16(f[i]); break;
		case OP_UNPACK: f[i] = h ? ds_fp16_to_fp32(a[i]) : ds_bf16_to_fp32(a[i]); break;
		case OP_ROUND: f[i] = h ? ds_fp16_to_fp32(ds_fp32_to_fp16(f[i])) : ds_bf16_to_fp32(ds_fp32_to_bf16(f[i])); break;
		default:
			b[i] = h ? ds_fp32_to_fp16(ds_fp16_to_fp32(a[i]) + ds_fp16_to_fp32(b[i]))
				 : ds_fp32_to_bf16(ds_bf16_to_fp32(a[i]) + ds_bf16_to_fp32(b[i]));
		}
	}
}

static void bulk(int op, enum ds_half_kind k, float *f, uint16_t *a, uint16_t *b, size_t n)
{
	switch (op) {
	case OP_PACK: ds_half_pack_n(k, a, f, n); break;
	case OP_UNPACK: ds_half_unpack_n(k, f, a, n); break;
	case OP_ROUND: ds_half_round_n(k, f, n); break;
	default: ds_half_sum_n(k, b, a, n); break;   /* comm_mpi.c's operator */
	}
}

int main(int argc, char **argv)
{
	const size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)1 << 24;
	const int rounds = argc > 2 ? atoi(argv[2]) : 5;
	if (!n || rounds < 1) {
		fprintf(stderr, "usage: half-bulk [N>0] [ROUNDS>0]\n");
		return 2;
	}
	float *f = ds_alloc(n * sizeof(float)), *g = ds_alloc(n * sizeof(float));
	uint16_t *a = ds_alloc(n * 2), *b = ds_alloc(n * 2);
	if (!f || !g || !a || !b) {
		fprintf(stderr, "half-bulk: out of memory for %zu elements\n", n);
		return 1;
	}
	/* values of a trained model's range: magnitudes 2^-20 .. 2^10 */
	uint32_t s = 12345u;
	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		uint32_t u = (s & 0x807fffffu) | ((107u + (s >> 8) % 30u) << 23);
		memcpy(&f[i], &u, sizeof u);
	}
	double mc = 1e30;
	for (int r = 0; r < rounds; r++) {
		double t = ds_now();
		memcpy(g, f, n * sizeof(float));
		t = ds_now() - t;
		mc = t < mc ? t : mc;
	}
	const double mcbw = 2.0 * (double)n * sizeof(float) / mc;
	printf("# half-bulk: %zu elements, best of %d, 1 thread (run it with OMP_NUM_THREADS=1); memcpy %.2f GB/s "
	       "(read + write); fp16 path %d (2: F16C at 16 lanes, 1: at 8, 0: scalar); bf16 path %d (2: AVX-512F, "
	       "1: AVX2, 0: scalar)\n",
	       n, rounds, mcbw / 1e9, ds_half_fp16_path(-1), ds_half_bf16_path(-1));
	for (int kk = 0; kk < 2; kk++) {
		const enum ds_half_kind k = kk ? DS_HALF_BF16 : DS_HALF_FP16;
		ds_half_pack_n(k, a, f, n);
		ds_half_pack_n(k, b, f, n);
		for (int op = 0; op < NOP; op++) {
			double ts = 1e30, tb = 1e30;
			for (int r = 0; r < rounds; r++) {
				memcpy(g, f, n * sizeof(float));
				double t = ds_now();
				scalar(op, k, g, a, b, n);
				t = ds_now() - t;
				ts = t < ts ? t : ts;
				memcpy(g, f, n * sizeof(float));
				t = ds_now();
				bulk(op, k, g, a, b, n);
				t = ds_now() - t;
				tb = t < tb ? t : tb;
				sink += a[n / 2] + b[n / 3];
			}
			printf("%s %-6s | scalar %.3f Gelem/s | bulk %.3f Gelem/s | bulk/scalar %.1f | bulk %.2f GB/s | "
			       "memcpy %.2f GB/s\n", ds_half_name(k), op_name[op], (double)n / ts / 1e9, (double)n / tb / 1e9,
			       ts / tb, (double)n * op_bytes[op] / tb / 1e9, mcbw / 1e9);
		}
	}
	ds_free(f);
	ds_free(g);
	ds_free(a);
	ds_free(b);
	return 0;
}
