/* onebit.c - OneBitAdam, ZeroOneAdam and OneBitLamb (onebit.h), step by
 * step as DeepSpeed's adam.py, zoadam.py and lamb.py do them.
 *
 * Where the arithmetic is Adam's or Lamb's (the warm-up steps, 0/1 Adam's
 * variance steps) it runs through dstk's own kernels (a ds_optim of type
 * AdamW or Lamb with bias correction off, which owns exp_avg and
 * exp_avg_sq), so that until the freeze each optimizer is that one, bit for
 * bit.  The rest is written out element by element in DeepSpeed's order of
 * operations.  Sums of squares are taken in double over fixed chunks added
 * in order, so no result depends on the number of threads.
 */
#include "optim/onebit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/onebit.h"
#include "util/mem.h"

#define CHUNK 8192

struct unit {
	int t0, t1;          /* tensors [t0, t1) */
	size_t n, padded;    /* their elements, and DeepSpeed's corrected size */
	float *werr, *serr;  /* error feedback (W > 1): padded, padded / W */
};

struct ds_onebit {
	struct ds_optim_params hp;
	int W;
	ds_onebit_allreduce_fn xfn;
	void *xctx;
	size_t total;
	int nt, nu, fused;
	struct ds_onebit_tensor *t;
	struct ds_range *ranges;   /* the tensors as Lamb ranges of the flat buffers */
	double *sums;              /* Lamb: 2 per tensor */
	struct unit *u;
	float *buf;                /* one unit's exchange buffer (the largest padded) */
	struct ds_optim *base;     /* AdamW or Lamb, bias correction off: owns exp_avg, exp_avg_sq */
	float *m, *v;              /* base's states */
	float *x;                  /* momentum_accumulator (0/1 Adam) or exp_avg_sq_fresh (1-bit Lamb) */
	float *mlast;              /* 1-bit Lamb: exp_avg at the start of a compressed step */
	float *pad;                /* 1-bit Lamb: the fused buffer's tail (npad), kept between steps */
	size_t npad;
	double *tv[3];             /* 1-bit Lamb: lamb_coeff_freeze, last_factor, scaling_coeff per tensor */
	int64_t step, initialize, freeze_key, reduce_next, reinit_err;
	int64_t var_interval, var_counter, local_interval, local_counter, have_scaling;
	double lrs;
};

static const char *const tv_names[3] = { "lamb_coeff_freeze", "last_factor", "scaling_coeff" };

/* ---- element kernels over one tensor's [0, n) ---------------------------
 * The chunks run in parallel; each element's arithmetic is fixed. */

#define PAR_CHUNKS(n, body)                                                         \
	do {                                                                        \
		const size_t nc_ = ((n) + CHUNK - 1) / CHUNK;                       \
		_Pragma("omp parallel for schedule(static) if (nc_ > 2)")           \
		for (size_t c_ = 0; c_ < nc_; c_++) {                               \
			const size_t lo = c_ * CHUNK, hi = (n) - lo < CHUNK ? (n) : lo + CHUNK; \
			body;                                                       \
		}                                                                   \
	} while (0)

/* Adam's momentum update (adam.c's order): m = fma(g*gm, 1-b1, m*b1) */
static void mom_adam(const struct ds_adam_coef *c, float *m, const float *g, float gm, size_t n)
{
	PAR_CHUNKS(n, for (size_t i = lo; i < hi; i++) m[i] = fmaf(g[i] * gm, c->one_minus_beta1, m[i] * c->beta1));
}

/* Adam's update with the variance as it is (adam.c's order, no bias
 * correction): p = fma(m/(sqrt(v)+eps), -lr, p*(1-lr*wd)) */
static void apply_adam(const struct ds_adam_coef *c, float *p, const float *m, const float *v, size_t n)
{
	PAR_CHUNKS(n, for (size_t i = lo; i < hi; i++) {
		float u = m[i] / fmaf(sqrtf(v[i]), c->bc2_rsqrt, c->eps);
		float pa = p[i];
		if (c->wd_mul != 0.0f)
			pa = fmaf(pa, c->wd_mul, pa);
		p[i] = fmaf(u, c->step_size, pa);
	});
}

static double sumsq(const float *x, size_t n)
{
	size_t nc = (n + CHUNK - 1) / CHUNK;
	double s = 0;
	for (size_t c = 0; c < nc; c++) {
		double a = 0;
		for (size_t i = c * CHUNK; i < n && i < (c + 1) * CHUNK; i++)
			a += (double)x[i] * x[i];
		s += a;
	}
	return s;
}

/* ---- the exchange ------------------------------------------------------- */

/* DeepSpeed's compressed_allreduce of unit k of flat (the unit's tensors
 * back to back, then its tail: zeros, or 1-bit Lamb's kept padding) in
 * place; gm scales what is read (the gradient's unscale factor) */
static int exchange(struct ds_onebit *o, int k, float *flat, float gm, struct ds_err *err)
{
	struct unit *u = &o->u[k];
	size_t at = 0;
	for (int i = u->t0; i < u->t1; i++) {
		const float *src = flat + o->t[i].off;
		float *dst = o->buf + at;
		size_t n = o->t[i].n;
		if (gm == 1.0f)
			memcpy(dst, src, n * sizeof(float));
		else
			PAR_CHUNKS(n, for (size_t j = lo; j < hi; j++) dst[j] = src[j] * gm);
		at += n;
	}
	if (o->pad)
		memcpy(o->buf + at, o->pad, o->npad * sizeof(float));
	else
		memset(o->buf + at, 0, (u->padded - at) * sizeof(float));
	DS_TRY(o->xfn(o->xctx, o->buf, u->padded, u->werr, u->serr, err));
	at = 0;
	for (int i = u->t0; i < u->t1; i++) {
		memcpy(flat + o->t[i].off, o->buf + at, o->t[i].n * sizeof(float));
		at += o->t[i].n;
	}
	if (o->pad)
		memcpy(o->pad, o->buf + at, o->npad * sizeof(float));
	return 0;
}

static int exchange_all(struct ds_onebit *o, float *flat, float gm, struct ds_err *err)
{
	for (int k = 0; k < o->nu; k++)
		DS_TRY(exchange(o, k, flat, gm, err));
	return 0;
}

/* ---- OneBitAdam ----------------------------------------------------------- */

static int step_onebit_adam(struct ds_onebit *o, float *p, const float *g, float gm, struct ds_err *err)
{
	struct ds_adam_coef c;
	ds_adam_coef_init(&c, &o->base->hp, o->step, gm);
	if (!o->freeze_key) {
		/* warm-up: Adam on the allreduced gradient */
		DS_TRY(ds_optim_step(o->base, p, g, gm, NULL, 0, err));
	} else {
		/* the momentum from the local gradient, then its compressed
		 * average replaces it; the variance stays frozen */
		for (int i = 0; i < o->nt; i++)
			mom_adam(&c, o->m + o->t[i].off, g + o->t[i].off, gm, o->t[i].n);
		if (o->W > 1)
			DS_TRY(exchange_all(o, o->m, 1.0f, err));
		for (int i = 0; i < o->nt; i++)
			apply_adam(&c, p + o->t[i].off, o->m + o->t[i].off, o->v + o->t[i].off, o->t[i].n);
	}
	if (!o->freeze_key && o->step >= o->hp.freeze_step) {
		o->freeze_key = 1;
		o->reduce_next = 0;
	}
	return 0;
}

/* ---- ZeroOneAdam ------------------------------------------------------- */

/* a local step: update = m/(sqrt(v)+eps) + wd*p; p += -lr*update and the
 * accumulator cb += -lr*update (zoadam.py's order) */
static void local_step(const struct ds_optim_params *hp, float *p, const float *m, const float *v, float *cb,
		       size_t n)
{
	const float eps = (float)hp->eps, wd = (float)hp->weight_decay, nlr = (float)-hp->lr;
	const int decay = hp->weight_decay > 0;
	PAR_CHUNKS(n, for (size_t i = lo; i < hi; i++) {
		float upd = m[i] / (sqrtf(v[i]) + eps);
		if (decay)
			upd = upd + wd * p[i];
		float d = nlr * upd;
		p[i] = p[i] + d;
		cb[i] = cb[i] + d;
	});
}

/* the synchronisation of local steps, before the exchange: p -= cb (back
 * to the last synchronised point), cb *= sqrt(v)+eps */
static void sync_before(const struct ds_optim_params *hp, float *p, const float *v, float *cb, size_t n)
{
	const float eps = (float)hp->eps;
	PAR_CHUNKS(n, for (size_t i = lo; i < hi; i++) {
		p[i] = p[i] + -1.0f * cb[i];
		cb[i] = cb[i] * (sqrtf(v[i]) + eps);
	});
}

/* ... after it: m = -(cb/lrs), p += cb/(sqrt(v)+eps), cb = 0 */
static void sync_after(const struct ds_optim_params *hp, float *p, float *m, const float *v, float *cb, float lrs,
		       size_t n)
{
	const float eps = (float)hp->eps;
	PAR_CHUNKS(n, for (size_t i = lo; i < hi; i++) {
		m[i] = 0.0f + -1.0f * (cb[i] / lrs);
		p[i] = p[i] + cb[i] / (sqrtf(v[i]) + eps);
		cb[i] = 0.0f;
	});
}

static int step_zero_one(struct ds_onebit *o, float *p, const float *g, float gm, struct ds_err *err)
{
	struct ds_adam_coef c;
	ds_adam_coef_init(&c, &o->base->hp, o->step, gm);
	const int frozen = (int)o->freeze_key;
	if (!frozen) {
		if (o->step % o->var_interval == 0) {
			/* a variance step: Adam on the allreduced gradient */
			DS_TRY(ds_optim_step(o->base, p, g, gm, NULL, 0, err));
		} else {
			/* the momentum from the compressed average of the local
			 * gradients, the variance left alone */
			if (o->W > 1) {
				for (int k = 0; k < o->nu; k++) {
					const struct unit *u = &o->u[k];
					/* the unit's gradient through the exchange buffer */
					size_t at = 0;
					for (int i = u->t0; i < u->t1; i++) {
						const float *src = g + o->t[i].off;
						float *dst = o->buf + at;
						PAR_CHUNKS(o->t[i].n, for (size_t j = lo; j < hi; j++) dst[j] = src[j] * gm);
						at += o->t[i].n;
					}
					memset(o->buf + at, 0, (u->padded - at) * sizeof(float));
					DS_TRY(o->xfn(o->xctx, o->buf, u->padded, u->werr, u->serr, err));
					at = 0;
					for (int i = u->t0; i < u->t1; i++) {
						mom_adam(&c, o->m + o->t[i].off, o->buf + at, 1.0f, o->t[i].n);
						at += o->t[i].n;
					}
				}
			} else {
				for (int i = 0; i < o->nt; i++)
					mom_adam(&c, o->m + o->t[i].off, g + o->t[i].off, gm, o->t[i].n);
			}
			for (int i = 0; i < o->nt; i++)
				apply_adam(&c, p + o->t[i].off, o->m + o->t[i].off, o->v + o->t[i].off, o->t[i].n);
		}
	} else {
		/* local steps on the local gradient, accumulated */
		for (int i = 0; i < o->nt; i++) {
			mom_adam(&c, o->m + o->t[i].off, g + o->t[i].off, gm, o->t[i].n);
			local_step(&o->hp, p + o->t[i].off, o->m + o->t[i].off, o->v + o->t[i].off, o->x + o->t[i].off,
				   o->t[i].n);
		}
		o->lrs += o->hp.lr;
		if (o->step % o->local_interval == 0) {
			for (int i = 0; i < o->nt; i++)
				sync_before(&o->hp, p + o->t[i].off, o->v + o->t[i].off, o->x + o->t[i].off, o->t[i].n);
			if (o->W > 1)
				DS_TRY(exchange_all(o, o->x, 1.0f, err));
			for (int i = 0; i < o->nt; i++)
				sync_after(&o->hp, p + o->t[i].off, o->m + o->t[i].off, o->v + o->t[i].off,
					   o->x + o->t[i].off, (float)o->lrs, o->t[i].n);
			o->lrs = 0;
		}
	}
	/* the schedules (zoadam.py: per parameter, all alike) */
	if (!frozen) {
		if (o->step % o->var_interval == 0 && ++o->var_counter == o->hp.var_update_scaler) {
			o->var_counter = 0;
			o->var_interval *= 2;
		}
		o->reduce_next = (o->step + 1) % o->var_interval == 0;
	} else if (++o->local_counter == o->hp.local_step_scaler) {
		o->local_counter = 0;
		o->local_interval = o->local_interval * 2 < o->hp.local_step_clipper ? o->local_interval * 2
										       : o->hp.local_step_clipper;
	}
	if (o->step > o->hp.var_freeze_step) {
		o->freeze_key = 1;
		o->reduce_next = 0;
	}
	/* from the freeze the errors measure another quantity (the
	 * accumulated update, not the gradient): start them afresh once */
	if (o->freeze_key && !o->reinit_err) {
		for (int k = 0; k < o->nu && o->W > 1; k++) {
			memset(o->u[k].werr, 0, o->u[k].padded * sizeof(float));
			memset(o->u[k].serr, 0, o->u[k].padded / (size_t)o->W * sizeof(float));
		}
		o->reinit_err = 1;
	}
	return 0;
}

/* ---- OneBitLamb ------------------------------------------------------- */

/* At the first compressed step: each tensor's momentum scale
 * ||m||/sqrt(n) and the factor bringing it to their mean (lamb.py).  A
 * tensor whose momentum is all zero keeps factor 1 (DeepSpeed would divide
 * by zero). */
static void scaling_coeffs(struct ds_onebit *o)
{
	double *sc = o->tv[2], united = 0;
	for (int i = 0; i < o->nt; i++) {
		float norm = (float)sqrt(sumsq(o->m + o->t[i].off, o->t[i].n));
		sc[i] = (double)(norm / (float)sqrt((double)o->t[i].n));
		united += sc[i];
	}
	united /= o->nt;
	for (int i = 0; i < o->nt; i++)
		sc[i] = sc[i] != 0 ? united / sc[i] : 1.0;
	o->have_scaling = 1;
}

/* the compressed step of tensor i after the exchange (lamb.py): unscale the
 * momentum, the gradient it implies updates the fresh variance, the frozen
 * ratio times a factor from the frozen and fresh denominators */
static void lamb_frozen_tensor(struct ds_onebit *o, int i, float *p)
{
	const struct ds_optim_params *hp = &o->hp;
	const size_t off = o->t[i].off, n = o->t[i].n;
	float *m = o->m + off, *v = o->v + off, *vf = o->x + off, *pp = p + off;
	const float *ml = o->mlast + off;
	const float sc = (float)o->tv[2][i], b1 = (float)hp->beta1, omb1 = (float)(1.0 - hp->beta1);
	const float b2 = (float)hp->beta2, omb2 = (float)(1.0 - hp->beta2), eps = (float)hp->eps;
	const float wd = (float)hp->weight_decay;
	const int decay = hp->weight_decay > 0;
	const size_t nc = (n + CHUNK - 1) / CHUNK;
	double *part = ds_alloc((nc ? nc : 1) * 3 * sizeof(double));
	double su = 0, sup = 0, fmx = -INFINITY;
	/* without memory for the partial sums the chunks run one after
	 * another, added in the same order */
#pragma omp parallel for schedule(static) if (nc > 2 && part)
	for (size_t c = 0; c < nc; c++) {
		double a = 0, b = 0, mx = -INFINITY;
		for (size_t j = c * CHUNK; j < n && j < (c + 1) * CHUNK; j++) {
			float mm = m[j] / sc;
			m[j] = mm;
			float gr = (mm - ml[j] * b1) / omb1;
			float f = b2 * vf[j] + omb2 * (gr * gr);
			vf[j] = f;
			float denom = sqrtf(v[j]) + eps;
			float up = mm / denom;
			float u = decay ? up + wd * pp[j] : up;
			a += (double)u * u;
			b += (double)up * up;
			float r = denom / (sqrtf(f) + eps);
			if (r > mx || isnan(r))
				mx = r;
		}
		if (part) {
			part[3 * c] = a;
			part[3 * c + 1] = b;
			part[3 * c + 2] = mx;
		} else {
			su += a;
			sup += b;
			if (mx > fmx || isnan(mx))
				fmx = mx;
		}
	}
	for (size_t c = 0; part && c < nc; c++) {
		su += part[3 * c];
		sup += part[3 * c + 1];
		if (part[3 * c + 2] > fmx || isnan(part[3 * c + 2]))
			fmx = part[3 * c + 2];
	}
	ds_free(part);
	double factor = fmx;
	if (decay) {
		double r = sqrt(sup) / sqrt(su);
		double ratio = r < 1.0 ? r : 1.0;  /* a NaN ratio counts as 1, as Python's min(1.0, nan) */
		factor = factor * ratio + (1.0 - ratio);
	}
	if (factor > hp->factor_max)
		factor = hp->factor_max;
	if (factor < hp->factor_min)
		factor = hp->factor_min;
	double *last = &o->tv[1][i];
	if (factor > *last * (1.0 + hp->factor_threshold))
		factor = *last * (1.0 + hp->factor_threshold);
	if (factor < *last * (1.0 - hp->factor_threshold))
		factor = *last * (1.0 - hp->factor_threshold);
	*last = factor;
	const float s = (float)(hp->lr * (o->tv[0][i] * factor));
	PAR_CHUNKS(n, for (size_t j = lo; j < hi; j++) {
		float up = m[j] / (sqrtf(v[j]) + eps);
		float u = decay ? up + wd * pp[j] : up;
		pp[j] = pp[j] - s * u;
	});
}

static int step_onebit_lamb(struct ds_onebit *o, float *p, const float *g, float gm, int frozen,
			    struct ds_err *err)
{
	const struct ds_optim_params *hp = &o->hp;
	if (!frozen) {
		/* warm-up: Lamb on the allreduced gradient; the trust ratios
		 * feed each tensor's EMA */
		DS_TRY(ds_lamb_partial_norms(o->base, p, g, gm, o->ranges, o->nt, o->sums, err));
		if (o->step == hp->freeze_step)
			memcpy(o->x, o->v, o->total * sizeof(float));
		for (int i = 0; i < o->nt; i++) {
			double r = ds_lamb_trust_ratio(sqrt(o->sums[2 * i]), sqrt(o->sums[2 * i + 1]), hp->min_coeff,
						       hp->max_coeff);
			if (r != 1.0)
				o->tv[0][i] = hp->coeff_beta * o->tv[0][i] + (1.0 - hp->coeff_beta) * r;
		}
		DS_TRY(ds_lamb_apply(o->base, p, o->ranges, o->nt, o->sums, err));
	} else {
		const float b1 = (float)hp->beta1, omb1 = (float)(1.0 - hp->beta1);
		for (int i = 0; i < o->nt; i++) {
			float *m = o->m + o->t[i].off;
			const float *gg = g + o->t[i].off, sc = (float)o->tv[2][i];
			PAR_CHUNKS(o->t[i].n, for (size_t j = lo; j < hi; j++) {
				float mm = b1 * m[j] + omb1 * (gg[j] * gm);
				m[j] = mm * sc;
			});
		}
		if (o->W > 1)
			DS_TRY(exchange_all(o, o->m, 1.0f, err));
		for (int i = 0; i < o->nt; i++)
			lamb_frozen_tensor(o, i, p);
	}
	if (!frozen && o->step >= hp->freeze_step) {
		o->freeze_key = 1;
		o->reduce_next = 0;
	}
	return 0;
}

/* ---- the object ----------------------------------------------------------- */

int ds_onebit_step(struct ds_onebit *o, float *p, const float *g, float grad_mul, struct ds_err *err)
{
	DS_TRY(ds_optim_params_check(&o->hp, err));
	/* the warm-up kernels' hyper-parameters follow the caller's */
	struct ds_optim_params *b = &o->base->hp;
	b->lr = o->hp.lr;
	b->beta1 = o->hp.beta1;
	b->beta2 = o->hp.beta2;
	b->eps = o->hp.eps;
	b->weight_decay = o->hp.weight_decay;
	b->max_coeff = o->hp.max_coeff;
	b->min_coeff = o->hp.min_coeff;
	if (!o->initialize) {
		/* DeepSpeed's first step sets up its buffers and updates
		 * nothing (it also sends the zero momentum through the
		 * compressed allreduce, which gives zeros back: skipped here) */
		o->step++;
		o->initialize = 1;
		o->freeze_key = 0;
		return 0;
	}
	const int frozen = (int)o->freeze_key;
	if (o->hp.type == DS_OPTIM_ONEBIT_LAMB && frozen) {
		memcpy(o->mlast, o->m, o->total * sizeof(float));
		if (!o->have_scaling)
			scaling_coeffs(o);
	}
	o->step++;
	switch (o->hp.type) {
	case DS_OPTIM_ONEBIT_ADAM: return step_onebit_adam(o, p, g, grad_mul, err);
	case DS_OPTIM_ZERO_ONE_ADAM: return step_zero_one(o, p, g, grad_mul, err);
	default: return step_onebit_lamb(o, p, g, grad_mul, frozen, err);
	}
}

static int make_units(struct ds_onebit *o, int fused, struct ds_err *err)
{
	o->fused = fused;
	o->nu = fused ? (o->nt > 0) : o->nt;
	o->u = calloc((size_t)(o->nu ? o->nu : 1), sizeof *o->u);
	if (!o->u)
		return ds_err_set(err, DS_ENOMEM, "1-bit optimizer: out of memory");
	size_t maxpad = 0;
	for (int k = 0; k < o->nu; k++) {
		struct unit *u = &o->u[k];
		u->t0 = fused ? 0 : k;
		u->t1 = fused ? o->nt : k + 1;
		for (int i = u->t0; i < u->t1; i++)
			u->n += o->t[i].n;
		u->padded = ds_onebit_padded(u->n, o->W);
		if (u->padded > maxpad)
			maxpad = u->padded;
		if (o->W > 1) {
			u->werr = ds_alloc(u->padded * sizeof(float));
			u->serr = ds_alloc(u->padded / (size_t)o->W * sizeof(float));
			if (!u->werr || !u->serr)
				return ds_err_set(err, DS_ENOMEM, "1-bit optimizer: out of memory for error feedback");
			memset(u->werr, 0, u->padded * sizeof(float));
			memset(u->serr, 0, u->padded / (size_t)o->W * sizeof(float));
		}
	}
	if (o->W > 1 && !(o->buf = ds_alloc((maxpad ? maxpad : 1) * sizeof(float))))
		return ds_err_set(err, DS_ENOMEM, "1-bit optimizer: out of memory for the exchange buffer");
	if (o->W > 1 && o->hp.type == DS_OPTIM_ONEBIT_LAMB && o->nu) {
		o->npad = o->u[0].padded - o->u[0].n;
		if (o->npad && !(o->pad = ds_alloc(o->npad * sizeof(float))))
			return ds_err_set(err, DS_ENOMEM, "1-bit optimizer: out of memory");
		if (o->pad)
			memset(o->pad, 0, o->npad * sizeof(float));
	}
	return 0;
}

int ds_onebit_create(struct ds_onebit **out, const struct ds_optim_params *hp, size_t total,
		     const struct ds_onebit_tensor *t, int nt, int fused, const struct ds_onebit_comm *x,
		     struct ds_err *err)
{
	int rc;
	*out = NULL;
	DS_TRY(ds_optim_params_check(hp, err));
	if (!ds_optim_is_onebit(hp->type))
		return ds_err_set(err, DS_EINVAL, "optimizer %s is not of the 1-bit family", ds_optim_type_name(hp->type));
	if (x->world < 1 || (x->world > 1 && !x->allreduce))
		return ds_err_set(err, DS_EINVAL, "1-bit optimizer: world %d needs a compressed allreduce", x->world);
	for (int i = 0; i < nt; i++)
		if (t[i].off > total || t[i].n > total - t[i].off)
			return ds_err_set(err, DS_EINVAL, "1-bit optimizer: tensor %d [%zu, +%zu) outside %zu elements",
					  i, t[i].off, t[i].n, total);
	struct ds_onebit *o = calloc(1, sizeof *o);
	if (!o)
		return ds_err_set(err, DS_ENOMEM, "1-bit optimizer: out of memory");
	o->hp = *hp;
	o->W = x->world;
	o->xfn = x->allreduce;
	o->xctx = x->ctx;
	o->total = total;
	o->nt = nt;
	o->var_interval = o->local_interval = 1;
	o->reduce_next = 1;
	if (hp->type == DS_OPTIM_ONEBIT_LAMB)
		fused = 1;  /* lamb.py flattens all momenta into one buffer */
	o->t = malloc((size_t)(nt ? nt : 1) * sizeof *o->t);
	o->ranges = malloc((size_t)(nt ? nt : 1) * sizeof *o->ranges);
	o->sums = calloc((size_t)(nt ? nt : 1) * 2, sizeof(double));
	if (!o->t || !o->ranges || !o->sums) {
		rc = ds_err_set(err, DS_ENOMEM, "1-bit optimizer: out of memory");
		goto fail;
	}
	memcpy(o->t, t, (size_t)nt * sizeof *t);
	for (int i = 0; i < nt; i++)
		o->ranges[i] = (struct ds_range){ t[i].off, t[i].n };
	/* the warm-up optimizer: Adam in AdamW form or Lamb, as DeepSpeed's
	 * 1-bit code computes them: no bias correction, eps outside sqrt */
	struct ds_optim_params bp = *hp;
	bp.type = hp->type == DS_OPTIM_ONEBIT_LAMB ? DS_OPTIM_LAMB : DS_OPTIM_ADAMW;
	bp.bias_correction = 0;
	bp.eps_inside_sqrt = 0;
	bp.adam_w_mode = 1;
	if ((rc = ds_optim_create(&o->base, &bp, total, err)) < 0)
		goto fail;
	o->m = o->base->states[0];
	o->v = o->base->states[1];
	if (hp->type != DS_OPTIM_ONEBIT_ADAM) {
		if (!(o->x = ds_alloc((total ? total : 1) * sizeof(float)))) {
			rc = ds_err_set(err, DS_ENOMEM, "1-bit optimizer: out of memory");
			goto fail;
		}
		memset(o->x, 0, total * sizeof(float));
	}
	if (hp->type == DS_OPTIM_ONEBIT_LAMB) {
		o->mlast = ds_alloc((total ? total : 1) * sizeof(float));
		for (int k = 0; k < 3; k++)
			o->tv[k] = calloc((size_t)(nt ? nt : 1), sizeof(double));
		if (!o->mlast || !o->tv[0] || !o->tv[1] || !o->tv[2]) {
			rc = ds_err_set(err, DS_ENOMEM, "1-bit optimizer: out of memory");
			goto fail;
		}
		for (int i = 0; i < nt; i++) {
			o->tv[1][i] = 1.0;  /* last_factor */
			o->tv[2][i] = 1.0;
		}
	}
	if ((rc = make_units(o, fused, err)) < 0)
		goto fail;
	*out = o;
	return 0;
fail:
	ds_onebit_destroy(o);
	return rc;
}

void ds_onebit_destroy(struct ds_onebit *o)
{
	if (!o)
		return;
	for (int k = 0; o->u && k < o->nu; k++) {
		ds_free(o->u[k].werr);
		ds_free(o->u[k].serr);
	}
	free(o->u);
	ds_free(o->buf);
	ds_optim_destroy(o->base);
	ds_free(o->x);
	ds_free(o->mlast);
	ds_free(o->pad);
	for (int k = 0; k < 3; k++)
		free(o->tv[k]);
	free(o->t);
	free(o->ranges);
	free(o->sums);
	free(o);
}

struct ds_optim_params *ds_onebit_params(struct ds_onebit *o) { return &o->hp; }
int ds_onebit_reduce_next(const struct ds_onebit *o) { return (int)o->reduce_next; }
int ds_onebit_rank_local(const struct ds_onebit *o)
{
	return o->hp.type == DS_OPTIM_ZERO_ONE_ADAM && o->freeze_key && o->W > 1;
}
int64_t ds_onebit_steps(const struct ds_onebit *o) { return o->step; }
void ds_onebit_set_steps(struct ds_onebit *o, int64_t steps) { o->step = steps; }

int ds_onebit_num_states(const struct ds_onebit *o) { return o->x ? 3 : 2; }

const char *ds_onebit_state_name(const struct ds_onebit *o, int k)
{
	static const char *const n[] = { "exp_avg", "exp_avg_sq" };
	if (k < 2)
		return n[k];
	return o->hp.type == DS_OPTIM_ZERO_ONE_ADAM ? "momentum_accumulator" : "exp_avg_sq_fresh";
}

float *ds_onebit_state(struct ds_onebit *o, const char *name)
{
	float *s[3] = { o->m, o->v, o->x };
	for (int k = 0; k < ds_onebit_num_states(o); k++)
		if (!strcmp(name, ds_onebit_state_name(o, k)))
			return s[k];
	return NULL;
}

int ds_onebit_vars(struct ds_onebit *o, struct ds_onebit_var *out)
{
	int n = 0;
#define I(nm, f) out[n++] = (struct ds_onebit_var){ nm, &o->f, NULL }
	I("step", step);
	I("initialize", initialize);
	I("freeze_key", freeze_key);
	I("reduce_next", reduce_next);
	if (o->hp.type == DS_OPTIM_ZERO_ONE_ADAM) {
		I("reinitial_error_buffer", reinit_err);
		I("var_interval", var_interval);
		I("var_counter", var_counter);
		I("local_step_interval", local_interval);
		I("local_step_counter", local_counter);
		out[n++] = (struct ds_onebit_var){ "lrs", NULL, &o->lrs };
	}
	if (o->hp.type == DS_OPTIM_ONEBIT_LAMB)
		I("have_scaling_coeff", have_scaling);
#undef I
	return n;
}

int ds_onebit_num_tensor_vars(const struct ds_onebit *o) { return o->hp.type == DS_OPTIM_ONEBIT_LAMB ? 3 : 0; }
const char *ds_onebit_tensor_var_name(const struct ds_onebit *o, int k) { return tv_names[k]; }
double *ds_onebit_tensor_var(struct ds_onebit *o, int k) { return o->tv[k]; }

int ds_onebit_num_units(const struct ds_onebit *o) { return o->nu; }
int ds_onebit_unit_tensor(const struct ds_onebit *o, int u) { return o->fused ? -1 : o->u[u].t0; }
size_t ds_onebit_unit_padded(const struct ds_onebit *o, int u) { return o->u[u].padded; }
float *ds_onebit_worker_error(struct ds_onebit *o, int u) { return o->u[u].werr; }
float *ds_onebit_server_error(struct ds_onebit *o, int u) { return o->u[u].serr; }

float *ds_onebit_lamb_pad(struct ds_onebit *o, size_t *n)
{
	*n = o->npad;
	return o->pad;
}

size_t ds_onebit_bytes(enum ds_optim_type type, size_t total, const struct ds_onebit_tensor *t, int nt, int fused,
		       int world, size_t *scratch)
{
	const size_t F = sizeof(float), W = world > 0 ? (size_t)world : 1;
	size_t b = (type == DS_OPTIM_ONEBIT_ADAM ? 2 : 3) * (total ? total : 1) * F, maxpad = 0;
	if (type == DS_OPTIM_ONEBIT_LAMB) {
		b += (total ? total : 1) * F;  /* exp_avg at the step's start */
		fused = 1;
	}
	int nu = fused ? nt > 0 : nt;
	for (int k = 0; k < nu; k++) {
		size_t n = 0;
		for (int i = fused ? 0 : k; i < (fused ? nt : k + 1); i++)
			n += t[i].n;
		size_t padded = ds_onebit_padded(n, world);
		maxpad = padded > maxpad ? padded : maxpad;
		if (W > 1)
			b += (padded + padded / W) * F;
		if (W > 1 && type == DS_OPTIM_ONEBIT_LAMB && padded > n)
			b += (padded - n) * F;  /* the kept padding */
	}
	if (W > 1)
		b += (maxpad ? maxpad : 1) * F;
	*scratch = W > 1 ? 2 * (maxpad / 8) + maxpad / 8 / W + maxpad / W * F : 0;
	return b;
}

size_t ds_onebit_state_bytes(const struct ds_onebit *o)
{
	size_t scratch;
	return ds_onebit_bytes(o->hp.type, o->total, o->t, o->nt, o->fused, o->W, &scratch);
}
