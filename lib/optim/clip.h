/* clip.h - gradient clipping factors of DeepSpeed (spec §6) as pure
 * functions, and the fast buffer passes around them: the non-finite check
 * (overflow), the sum of squares for the global norm, and scaling.
 * The buffer passes use OpenMP and AVX2/AVX-512 clones chosen at run time.
 */
#ifndef DS_OPTIM_CLIP_H
#define DS_OPTIM_CLIP_H

#include <stddef.h>

/* fp16 and ZeRO: the combined divisor c = scale * max(1, (norm/scale + 1e-6)
 * / clip) for the norm of the scaled grads; grads are multiplied by 1/c.
 * clip <= 0 (no gradient_clipping) gives c = scale. */
double ds_clip_combined_divisor(double scaled_norm, double scale, double clip);

/* fp32 without ZeRO (torch clip_grad_norm_) and bf16: the factor
 * min(1, clip/(norm + 1e-6)); 1 when clip <= 0. */
double ds_clip_coef(double norm, double clip);

/* 1 if any of x[0..n) is inf or nan, else 0. */
int ds_clip_has_nonfinite(const float *x, size_t n);

/* Sum of squares of x[0..n) in double, added over fixed 64Ki-element
 * chunks in order, so the result does not depend on the thread count. */
double ds_clip_sumsq(const float *x, size_t n);

/* x[i] *= mul over [0, n). */
void ds_clip_scale(float *x, size_t n, float mul);

#endif
