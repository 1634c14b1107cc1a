/* onebit.h - the element work of DeepSpeed's compressed allreduce (1-bit
 * Adam, 0/1 Adam, 1-bit LAMB; deepspeed/runtime/comm/nccl.py): error
 * feedback, one scale per chunk (||x|| / sqrt(n)), signs packed 8 to a byte
 * as numpy/cupy packbits packs them (element 8k+j in bit 7-j of byte k) with
 * 0 counted as +, and the decoding of W ranks' signed chunks.  Pure
 * functions of their arguments, so a test can play W ranks in one process;
 * lib/comm/compressed.c runs them around the exchanges.  Lengths given to
 * the packing are multiples of 8.
 */
#ifndef DS_KERNELS_CPU_ONEBIT_H
#define DS_KERNELS_CPU_ONEBIT_H

#include <stddef.h>
#include <stdint.h>

/* DeepSpeed's corrected_tensor_size: n rounded up to a multiple of
 * world * lcm(world, 8), so that each of the world chunks is whole bytes
 * of signs.  The scales divide by this length, so it is part of the
 * arithmetic, not only of the layout. */
size_t ds_onebit_padded(size_t n, int world);

/* x[i] += e[i] over [0, n); returns sum x[i]^2 after the add, in double,
 * summed in fixed chunks in order (the same at any thread count). */
double ds_onebit_add_sumsq(float *x, const float *e, size_t n);

/* DeepSpeed's scale of a chunk: ||x|| / sqrt(n) from the sum of squares,
 * rounded once to float (0 for n == 0). */
float ds_onebit_scale(double sumsq, size_t n);

/* The sign of x[i] as a bit, 1 for x >= 0 or NaN (torch's
 * x.sign().add_(1).bool()), packed: bits[i/8] bit 7-i%8.  With err
 * non-NULL also err[i] = x[i] - scale * (bit ? 1 : -1), the compression
 * error kept for the next call.  n % 8 == 0. */
void ds_onebit_pack(const float *x, size_t n, float scale, float *err, uint8_t *bits);

/* out[i] = (bit i ? 1 : -1) * scale over [0, n). */
void ds_onebit_unpack(const uint8_t *bits, size_t n, float scale, float *out);

/* Worker phase: x[0..n) += err, the scale of the result, its signs into
 * bits (n/8 bytes) and err = x - scale * sign.  Returns the scale. */
float ds_onebit_compress(float *x, float *err, size_t n, uint8_t *bits);

/* Server phase of one chunk of `chunk` elements: signs[r] (rows of chunk/8
 * bytes, row r from rank r) and scales[r] of W workers summed in rank
 * order, sum_r sign * (scales[r] * (float)(1/W)), plus the server error
 * err; then compressed as ds_onebit_compress does into bits (chunk/8
 * bytes), err updated.  tmp: chunk floats of scratch.  Returns the
 * server's scale. */
float ds_onebit_server(const uint8_t *signs, const float *scales, int W, size_t chunk, float *err, float *tmp,
		       uint8_t *bits);

/* The result: W chunks of `chunk` elements, chunk r decoded from signs row
 * r and scales[r], into out[0 .. W*chunk). */
void ds_onebit_decode(const uint8_t *signs, const float *scales, int W, size_t chunk, float *out);

#endif
