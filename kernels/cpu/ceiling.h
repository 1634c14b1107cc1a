/* ceiling.h - this machine's ceilings, measured in the same run as the
 * figure they are compared with (DESIGN.md "Benchmarks"): sgemm GFLOP/s
 * through the linked BLAS, and memory bandwidth by a STREAM-style triad.
 * MFU = achieved model FLOP/s / sgemm ceiling. */
#ifndef DS_CPU_CEILING_H
#define DS_CPU_CEILING_H

#include <stddef.h>

/* Best GFLOP/s of an n x n x n sgemm over repeats lasting about `seconds`
 * (n = 0 picks 1024).  Returns a negative DS_E* code on allocation failure. */
double ds_ceiling_sgemm_gflops(int n, double seconds);

/* Best triad a[i] = b[i] + s*c[i] bandwidth in GB/s (1e9 bytes) over arrays
 * of `bytes_per_array` (0 picks 256 MiB), counting 3 arrays moved (STREAM's
 * convention; write-allocate traffic not counted). */
double ds_ceiling_triad_gbs(size_t bytes_per_array, double seconds);

#endif
