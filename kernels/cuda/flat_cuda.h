/* flat_cuda.h - CUDA launchers of the training engine's passes over flat
 * buffers and of the optimizer updates, on device pointers: 16-bit
 * rounding, packing and widening (util/half.h's bits), scaling, the
 * communication casts, gradient accumulation, the sum of squares with the
 * non-finite flag, and Adam/AdamW, Lamb (both phases, per-tensor norms)
 * and SGD exactly as lib/optim computes them (kernels/common/optim_math.h:
 * the same element function, so the same bits).  Return values: ds_cuda.h.
 * The host loops they mirror are lib/engine/engine.c's (scale_buf,
 * cast_prescale, hadd, hrecast, accumulate_half, owned_sumsq) and
 * lib/optim's (ds_adam_update, ds_lamb_partial_norms, ds_lamb_apply, SGD).
 */
#ifndef DS_KERNELS_FLAT_CUDA_H
#define DS_KERNELS_FLAT_CUDA_H

#include <stdint.h>

#include "common/optim_math.h"
#include "cuda/ds_cuda.h"
#include "util/half.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x[0..n) rounded in place to kind k (DS_HALF_NONE: nothing), as ds_half_round_n. */
int ds_cuda_half_round(enum ds_half_kind k, float *x, int64_t n, void *stream);
/* dst (16-bit, kind k) = src; unpack: dst (fp32) = src.  As ds_half_pack_n /
 * ds_half_unpack_n (a kind other than fp16 means bf16); no overlap. */
int ds_cuda_half_pack(enum ds_half_kind k, uint16_t *dst, const float *src, int64_t n, void *stream);
int ds_cuda_half_unpack(enum ds_half_kind k, float *dst, const uint16_t *src, int64_t n, void *stream);

/* x[0..n) *= f (nothing when f is 1). */
int ds_cuda_scale(float *x, int64_t n, float f, void *stream);

/* The 16-bit communication cast: unless f is 1, g is rounded to k and
 * multiplied by f; then packed as k into h.  h may be g's own memory
 * ((uint16_t *)g: the first 2n bytes); g is clobbered either way. */
int ds_cuda_cast_prescale(enum ds_half_kind k, float *g, uint16_t *h, int64_t n, float f, void *stream);

/* acc (16-bit, kind k) = round(acc + g), added in fp32 and rounded once. */
int ds_cuda_hadd(enum ds_half_kind k, uint16_t *acc, const float *g, int64_t n, void *stream);

/* p (16-bit) in place: widen from `from`; unless f is 1, round to `cast`
 * (DS_HALF_NONE: no rounding), times f, round to `cast` again; pack as `to`.
 * Nothing when from == to and f is 1. */
int ds_cuda_hrecast(uint16_t *p, int64_t n, enum ds_half_kind from, enum ds_half_kind cast, float f,
		    enum ds_half_kind to, void *stream);

/* acc[0..n) += g, then rounded to k (DS_HALF_NONE: fp32 accumulation). */
int ds_cuda_accumulate(enum ds_half_kind k, float *acc, const float *g, int64_t n, void *stream);

/* acc (two doubles, device): acc[0] += the sum of x^2 over x[0..n) in
 * double, acc[1] becomes 1 (and stays 1) when an element is inf or nan.
 * x is fp32 (k NONE) or 16-bit of kind k.  Fixed order: 64Ki-element
 * chunks (a block each, a fixed tree), then one block over the chunks: the
 * same bits every run. */
int ds_cuda_sumsq(double *acc, const void *x, enum ds_half_kind k, int64_t n, void *stream);

/* *out (one double, device) writes x[0] + ... + x[n-1] (device doubles:
 * the cross-entropy's per-row losses), in a fixed tree. */
int ds_cuda_sum(double *out, const double *x, int64_t n, void *stream);

/* x (rows, ld): columns [col0, col1) of every row write v (the logits'
 * padding columns). */
int ds_cuda_fill_cols(float *x, int64_t rows, int64_t ld, int col0, int col1, float v, void *stream);

/* Adam/AdamW over [0, n): c from ds_adam_coef_init (lib/optim). */
int ds_cuda_adam(const struct ds_adam_coef *c, float *p, const float *g, float *m, float *v, int64_t n,
		 void *stream);

/* torch SGD over [0, n): c from ds_sgd_coef_init; buf NULL without momentum. */
int ds_cuda_sgd(const struct ds_sgd_coef *c, float *p, const float *g, float *buf, int64_t n, void *stream);

/* Lamb phase 1 (ds_lamb_partial_norms): m, v updated from g * grad_mul on
 * every range (host array), sums (device, 2*nranges doubles) write
 * sum p^2 and sum u^2 per range over 8192-element chunks added in order.
 * k from ds_lamb_coef_init. */
int ds_cuda_lamb_partial(const struct ds_lamb_coef *k, const float *p, const float *g, float *m, float *v,
			 float grad_mul, const struct ds_range *ranges, int nranges, double *sums, void *stream);
/* Lamb phase 2 (ds_lamb_apply): with the reduced sums (host, 2*nranges
 * doubles) the trust ratio per range (ds_lamb_ratio, on the host as the
 * CPU takes it) and p -= (float)(step_size * ratio) * u; step_size from
 * ds_lamb_step_size. */
int ds_cuda_lamb_apply(const struct ds_lamb_coef *k, float *p, const float *m, const float *v,
		       const struct ds_range *ranges, int nranges, const double *sums, double step_size,
		       double min_coeff, double max_coeff, void *stream);

#ifdef __cplusplus
}
#endif

#endif
