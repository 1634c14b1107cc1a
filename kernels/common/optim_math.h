/* optim_math.h - the per-element updates of the optimizers (lib/optim), as
 * inline functions that lib/optim's scalar code and the CUDA kernels
 * (kernels/cuda/flat_cuda.cu) both compile, so a GPU step updates every
 * element with the CPU's float operations in the CPU's order: Adam/AdamW in
 * DeepSpeed CPUAdam's order with fused multiply-adds, Lamb's update
 * direction and trust ratio, torch SGD's momentum step.
 */
#ifndef DS_KERNELS_OPTIM_MATH_H
#define DS_KERNELS_OPTIM_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DS_OPT_HD __host__ __device__
#else
#define DS_OPT_HD
#endif

/* A tensor piece inside the shard: elements [off, off + len). */
struct ds_range {
	size_t off, len;
};

/* Per-step constants of the Adam element update, in the order CPUAdam
 * applies them:
 *   g *= grad_mul;  if L2: g = p*wd + g
 *   m = m*b1; m = g*(1-b1) + m;  v = v*b2; v = (g*g)*(1-b2) + v
 *   d = sqrt(v)*bc2_rsqrt + eps;  u = m/d
 *   if AdamW: p = p*wd_mul + p    (wd_mul = -lr*wd)
 *   p = u*step_size + p          (step_size = -lr/bc1)
 * where every "a*b + c" is one fused multiply-add (fmaf) in all kernels,
 * so the scalar reference and the vector kernels agree bit for bit.  The
 * bias corrections 1-b^t are computed in double and rounded once to float
 * (CPUAdam keeps b^t as a float running product: last-bit differences). */
struct ds_adam_coef {
	float beta1, beta2, one_minus_beta1, one_minus_beta2;
	float eps, bc2_rsqrt, step_size;
	float l2_wd;   /* wd in L2 mode, else 0 */
	float wd_mul;  /* -lr*wd in AdamW mode, else 0 */
	float grad_mul;
};

/* One Adam element; the reference every vector lane must reproduce. */
static inline DS_OPT_HD void ds_adam_elem(const struct ds_adam_coef *c, float *p, const float *g, float *m,
					  float *v)
{
	float gr = *g * c->grad_mul;
	float pa = *p;
	if (c->l2_wd != 0.0f)
		gr = fmaf(pa, c->l2_wd, gr);
	float mo = *m * c->beta1;
	mo = fmaf(gr, c->one_minus_beta1, mo);
	float va = *v * c->beta2;
	va = fmaf(gr * gr, c->one_minus_beta2, va);
	float d = fmaf(sqrtf(va), c->bc2_rsqrt, c->eps);
	float u = mo / d;
	if (c->wd_mul != 0.0f)
		pa = fmaf(pa, c->wd_mul, pa);
	*p = fmaf(u, c->step_size, pa);
	*m = mo;
	*v = va;
}

/* Lamb's per-step constants (FusedLamb): betas, eps, decoupled decay and
 * where eps goes. */
struct ds_lamb_coef {
	float b1, b2, omb1, omb2, eps, wd;
	int inside;
};

/* Lamb's moments from g (already times grad_mul): separate mul and add, no fma. */
static inline DS_OPT_HD void ds_lamb_moments(const struct ds_lamb_coef *k, float gr, float *m, float *v)
{
	*m = k->b1 * *m + k->omb1 * gr;
	*v = k->b2 * *v + k->omb2 * (gr * gr);
}

/* Lamb's update direction u = m/denom + wd*p from the updated moments. */
static inline DS_OPT_HD float ds_lamb_u(const struct ds_lamb_coef *k, float p, float m, float v)
{
	float denom = k->inside ? sqrtf(v + k->eps) : sqrtf(v) + k->eps;
	return m / denom + k->wd * p;
}

/* Lamb trust ratio for the norms (not squared): ||p||/||u|| clamped to
 * [min_coeff, max_coeff], 1 when either norm is 0. */
static inline DS_OPT_HD double ds_lamb_ratio(double p_norm, double u_norm, double min_coeff, double max_coeff)
{
	if (p_norm == 0 || u_norm == 0)
		return 1.0;
	double r = p_norm / u_norm;
	if (r > max_coeff)
		r = max_coeff;
	if (r < min_coeff)
		r = min_coeff;
	return r;
}

/* torch.optim.SGD's constants for one step. */
struct ds_sgd_coef {
	float lr, wd, mom, damp;   /* damp = 1 - dampening */
	float grad_mul;
	int first, nesterov;       /* first: the step that creates the momentum buffer */
};

/* One SGD element; buf NULL without momentum.  The same float operations
 * as lib/optim's sgd_chunk, in its order. */
static inline DS_OPT_HD void ds_sgd_elem(const struct ds_sgd_coef *c, float *p, float g, float *buf)
{
	float d = c->wd != 0.0f ? g * c->grad_mul + c->wd * *p : g * c->grad_mul;
	if (!buf) {
		*p = *p - c->lr * d;
		return;
	}
	float b = c->first ? d : c->mom * *buf + c->damp * d;
	*buf = b;
	*p = *p - c->lr * (c->nesterov ? d + c->mom * b : b);
}

#endif
