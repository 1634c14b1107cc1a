/* optim.c - optimizer hyper-parameters (defaults, names, checks), the
 * optimizer object with its named states, and the step dispatch: Adam
 * through the SIMD kernels of adam.c, SGD here, Lamb in lamb.c.
 */
#include "optim/optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/mem.h"

void ds_optim_params_init(struct ds_optim_params *p, enum ds_optim_type type)
{
	memset(p, 0, sizeof(*p));
	p->type = type;
	p->lr = 1e-3;
	p->beta1 = 0.9;
	p->beta2 = 0.999;
	p->eps = 1e-8;
	p->weight_decay = 0.0;
	p->bias_correction = 1;
	p->adam_w_mode = 1;
	p->eps_inside_sqrt = 0;
	p->max_coeff = 10.0;
	p->min_coeff = 0.01;
	p->momentum = 0.0;
	p->dampening = 0.0;
	p->nesterov = 0;
	p->freeze_step = 100000;
	p->comm_backend = DS_ONEBIT_NCCL;
	p->var_freeze_step = 100000;
	p->var_update_scaler = 16;
	p->local_step_scaler = 32678;
	p->local_step_clipper = 16;
	p->coeff_beta = 0.9;
	p->factor_max = 4.0;
	p->factor_min = 0.5;
	p->factor_threshold = 0.1;
}

#define NTYPES 7
static const char *const type_names[NTYPES] = { "adam", "adamw", "lamb", "sgd", "onebitadam", "zerooneadam",
						 "onebitlamb" };

const char *ds_optim_type_name(enum ds_optim_type type)
{
	return (unsigned)type < NTYPES ? type_names[type] : "?";
}

int ds_optim_is_onebit(enum ds_optim_type type)
{
	return type == DS_OPTIM_ONEBIT_ADAM || type == DS_OPTIM_ZERO_ONE_ADAM || type == DS_OPTIM_ONEBIT_LAMB;
}

int ds_optim_type_from_name(const char *name, enum ds_optim_type *type, struct ds_err *err)
{
	/* DeepSpeed's own names it does not have in dstk (yet) */
	static const char *const known[] = { "adagrad", "lion", "muadam", "muadamw", "musgd", NULL };
	for (int i = 0; i < NTYPES; i++)
		if (!strcasecmp(name, type_names[i])) {
			*type = (enum ds_optim_type)i;
			return 0;
		}
	for (int i = 0; known[i]; i++)
		if (!strcasecmp(name, known[i]))
			return ds_err_set(err, DS_EINVAL,
					  "optimizer.type: '%s' is a DeepSpeed optimizer dstk does not implement; "
					  "use Adam, AdamW, Lamb, SGD, OneBitAdam, ZeroOneAdam or OneBitLamb", name);
	return ds_err_set(err, DS_EINVAL, "optimizer.type: unknown optimizer '%s'; use Adam, AdamW, Lamb, SGD, "
			  "OneBitAdam, ZeroOneAdam or OneBitLamb", name);
}

int ds_optim_decoupled(const struct ds_optim_params *p)
{
	/* the 1-bit family adds weight_decay * p to the update, as AdamW */
	return p->type == DS_OPTIM_ADAMW || p->type == DS_OPTIM_LAMB || (p->type == DS_OPTIM_ADAM && p->adam_w_mode) ||
	       ds_optim_is_onebit(p->type);
}

enum { K_NUM, K_BOOL, K_PAIR, K_INT };

struct key {
	const char *name;
	int kind;
	unsigned types;  /* bit per ds_optim_type */
	size_t off;      /* offsetof the double or int field (K_PAIR: beta1) */
};

#define ADAMS ((1u << DS_OPTIM_ADAM) | (1u << DS_OPTIM_ADAMW))
#define LAMB (1u << DS_OPTIM_LAMB)
#define SGD (1u << DS_OPTIM_SGD)
#define OBA (1u << DS_OPTIM_ONEBIT_ADAM)
#define ZOA (1u << DS_OPTIM_ZERO_ONE_ADAM)
#define OBL (1u << DS_OPTIM_ONEBIT_LAMB)
#define ONEBIT (OBA | ZOA | OBL)
#define OFF(f) offsetof(struct ds_optim_params, f)

/* The 1-bit family takes bias_correction and eps_inside_sqrt as DeepSpeed
 * does and, as DeepSpeed does, never applies them (onebit.h). */
static const struct key keys[] = {
	{ "lr", K_NUM, ADAMS | LAMB | SGD | ONEBIT, OFF(lr) },
	{ "betas", K_PAIR, ADAMS | LAMB | ONEBIT, OFF(beta1) },
	{ "eps", K_NUM, ADAMS | LAMB | ONEBIT, OFF(eps) },
	{ "weight_decay", K_NUM, ADAMS | LAMB | SGD | ONEBIT, OFF(weight_decay) },
	{ "bias_correction", K_BOOL, ADAMS | LAMB | ONEBIT, OFF(bias_correction) },
	{ "adam_w_mode", K_BOOL, ADAMS, OFF(adam_w_mode) },
	{ "torch_adam", K_BOOL, ADAMS, 0 },   /* same update either way */
	{ "amsgrad", K_BOOL, ADAMS | LAMB | ONEBIT, 0 }, /* false only */
	{ "set_grad_none", K_BOOL, ADAMS, 0 },  /* dstk zeroes its flat grads anyway */
	{ "fp32_optimizer_states", K_BOOL, ADAMS, 0 }, /* true only */
	{ "eps_inside_sqrt", K_BOOL, LAMB | ONEBIT, OFF(eps_inside_sqrt) },
	{ "max_coeff", K_NUM, LAMB | OBL, OFF(max_coeff) },
	{ "min_coeff", K_NUM, LAMB | OBL, OFF(min_coeff) },
	{ "freeze_step", K_INT, OBA | OBL, OFF(freeze_step) },
	{ "cuda_aware", K_BOOL, ONEBIT, 0 },    /* host buffers: nothing for MPI to be aware of */
	{ "var_freeze_step", K_INT, ZOA, OFF(var_freeze_step) },
	{ "var_update_scaler", K_INT, ZOA, OFF(var_update_scaler) },
	{ "local_step_scaler", K_INT, ZOA, OFF(local_step_scaler) },
	{ "local_step_clipper", K_INT, ZOA, OFF(local_step_clipper) },
	{ "coeff_beta", K_NUM, OBL, OFF(coeff_beta) },
	{ "factor_max", K_NUM, OBL, OFF(factor_max) },
	{ "factor_min", K_NUM, OBL, OFF(factor_min) },
	{ "factor_threshold", K_NUM, OBL, OFF(factor_threshold) },
	{ "momentum", K_NUM, SGD, OFF(momentum) },
	{ "dampening", K_NUM, SGD, OFF(dampening) },
	{ "nesterov", K_BOOL, SGD, OFF(nesterov) },
};

/* Comma-separated list of the keys type takes, for messages. */
static void valid_keys(enum ds_optim_type type, char *buf, size_t n)
{
	buf[0] = 0;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (keys[i].types & (1u << type)) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, "%s%s", l ? ", " : "", keys[i].name);
		}
}

int ds_optim_param_set(struct ds_optim_params *p, const char *name, const double *vals, int nvals,
		       struct ds_err *err)
{
	const char *tn = ds_optim_type_name(p->type);
	if (!strcmp(name, "max_grad_norm"))
		return ds_err_set(err, DS_EINVAL,
				  "optimizer.params.max_grad_norm: not supported as an optimizer parameter; "
				  "use the top-level 'gradient_clipping' instead");
	const struct key *k = NULL;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strcmp(name, keys[i].name))
			k = &keys[i];
	if (!k || !(k->types & (1u << p->type))) {
		char buf[256];
		valid_keys(p->type, buf, sizeof(buf));
		return ds_err_set(err, DS_EINVAL, "optimizer.params.%s: %s for optimizer %s (valid: %s)", name,
				  k ? "not a parameter" : "unknown parameter", tn, buf);
	}
	int want = k->kind == K_PAIR ? 2 : 1;
	if (nvals != want)
		return ds_err_set(err, DS_EINVAL, "optimizer.params.%s: expected %s", name,
				  want == 2 ? "a list of two numbers" : "one value");
	for (int i = 0; i < nvals; i++)
		if (!isfinite(vals[i]))
			return ds_err_set(err, DS_EINVAL, "optimizer.params.%s: value must be finite", name);
	char *base = (char *)p;
	if (k->kind == K_BOOL) {
		if (vals[0] != 0.0 && vals[0] != 1.0)
			return ds_err_set(err, DS_EINVAL, "optimizer.params.%s: expected true or false", name);
		int b = vals[0] != 0.0;
		if (!strcmp(name, "amsgrad")) {
			if (b)
				return ds_err_set(err, DS_EINVAL,
						  "optimizer.params.amsgrad: AMSGrad is not supported (as in DeepSpeed's "
						  "FusedAdam); set it to false or remove it");
			return 0;
		}
		if (!strcmp(name, "fp32_optimizer_states") && !b)
			return ds_err_set(err, DS_EINVAL,
					  "optimizer.params.fp32_optimizer_states: dstk keeps optimizer states in fp32; "
					  "set it to true or remove it");
		if (!strcmp(name, "torch_adam") || !strcmp(name, "set_grad_none") ||
		    !strcmp(name, "fp32_optimizer_states") || !strcmp(name, "cuda_aware"))
			return 0;
		if (!strcmp(name, "adam_w_mode") && !b && p->type == DS_OPTIM_ADAMW)
			return ds_err_set(err, DS_EINVAL,
					  "optimizer.params.adam_w_mode: false has no effect with type AdamW (DeepSpeed "
					  "ignores it); use type Adam for L2 weight decay");
		*(int *)(base + k->off) = b;
		return 0;
	}
	if (k->kind == K_PAIR) {
		p->beta1 = vals[0];
		p->beta2 = vals[1];
		return 0;
	}
	if (k->kind == K_INT) {
		if (vals[0] != floor(vals[0]) || fabs(vals[0]) > 9e15)
			return ds_err_set(err, DS_EINVAL, "optimizer.params.%s: expected an integer", name);
		*(int64_t *)(base + k->off) = (int64_t)vals[0];
		return 0;
	}
	*(double *)(base + k->off) = vals[0];
	return 0;
}

int ds_optim_params_check(const struct ds_optim_params *p, struct ds_err *err)
{
	if ((unsigned)p->type >= NTYPES)
		return ds_err_set(err, DS_EINVAL, "optimizer.type: invalid type %d", (int)p->type);
	if (!(p->lr >= 0))
		return ds_err_set(err, DS_EINVAL, "optimizer.params.lr: must be >= 0 (got %g)", p->lr);
	if (!(p->weight_decay >= 0))
		return ds_err_set(err, DS_EINVAL, "optimizer.params.weight_decay: must be >= 0 (got %g)",
				  p->weight_decay);
	if (p->type == DS_OPTIM_SGD) {
		if (!(p->momentum >= 0))
			return ds_err_set(err, DS_EINVAL, "optimizer.params.momentum: must be >= 0 (got %g)",
					  p->momentum);
		if (p->nesterov && (p->momentum <= 0 || p->dampening != 0))
			return ds_err_set(err, DS_EINVAL, "optimizer.params.nesterov: Nesterov momentum requires a "
					  "momentum > 0 and zero dampening");
		return 0;
	}
	if (!(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1))
		return ds_err_set(err, DS_EINVAL, "optimizer.params.betas: each must be in [0, 1) (got [%g, %g])",
				  p->beta1, p->beta2);
	if (!(p->eps >= 0))
		return ds_err_set(err, DS_EINVAL, "optimizer.params.eps: must be >= 0 (got %g)", p->eps);
	if ((p->type == DS_OPTIM_LAMB || p->type == DS_OPTIM_ONEBIT_LAMB) &&
	    !(p->min_coeff >= 0 && p->min_coeff <= p->max_coeff))
		return ds_err_set(err, DS_EINVAL,
				  "optimizer.params.min_coeff: need 0 <= min_coeff <= max_coeff (got %g, %g)",
				  p->min_coeff, p->max_coeff);
	/* DeepSpeed takes the step modulo the local-step interval, which the
	 * clipper bounds: 0 would divide by zero */
	if (p->type == DS_OPTIM_ZERO_ONE_ADAM && p->local_step_clipper < 1)
		return ds_err_set(err, DS_EINVAL, "optimizer.params.local_step_clipper: must be >= 1 (got %lld)",
				  (long long)p->local_step_clipper);
	if (p->type == DS_OPTIM_ONEBIT_LAMB &&
	    !(p->coeff_beta >= 0 && p->coeff_beta <= 1 && p->factor_min >= 0 && p->factor_min <= p->factor_max &&
	      p->factor_threshold >= 0))
		return ds_err_set(err, DS_EINVAL, "optimizer.params: need coeff_beta in [0, 1], 0 <= factor_min <= "
				  "factor_max and factor_threshold >= 0 (got %g, %g, %g, %g)", p->coeff_beta,
				  p->factor_min, p->factor_max, p->factor_threshold);
	return 0;
}

int ds_optim_create_bare(struct ds_optim **out, const struct ds_optim_params *hp, size_t n, struct ds_err *err)
{
	*out = NULL;
	DS_TRY(ds_optim_params_check(hp, err));
	if (ds_optim_is_onebit(hp->type))
		return ds_err_set(err, DS_EINVAL, "optimizer %s spans the whole model: create it with ds_onebit_create",
				  ds_optim_type_name(hp->type));
	struct ds_optim *o = ds_alloc(sizeof(*o));
	if (!o)
		return ds_err_set(err, DS_ENOMEM, "optimizer: out of memory");
	o->hp = *hp;
	o->n = n;
	if (hp->type == DS_OPTIM_SGD) {
		/* torch allocates momentum_buffer only with momentum != 0 */
		if (hp->momentum != 0) {
			o->nstates = 1;
			o->state_names[0] = "momentum_buffer";
		}
	} else {
		o->nstates = 2;
		o->state_names[0] = "exp_avg";
		o->state_names[1] = "exp_avg_sq";
	}
	*out = o;
	return 0;
}

int ds_optim_create(struct ds_optim **out, const struct ds_optim_params *hp, size_t n, struct ds_err *err)
{
	DS_TRY(ds_optim_create_bare(out, hp, n, err));
	struct ds_optim *o = *out;
	for (int i = 0; i < o->nstates; i++) {
		o->states[i] = ds_alloc((n ? n : 1) * sizeof(float));
		if (!o->states[i]) {
			ds_optim_destroy(o);
			*out = NULL;
			return ds_err_set(err, DS_ENOMEM, "optimizer: out of memory for %s (%zu floats)",
					  o->state_names[i], n);
		}
	}
	return 0;
}

void ds_optim_destroy(struct ds_optim *o)
{
	if (!o)
		return;
	for (int i = 0; i < o->nstates; i++)
		ds_free(o->states[i]);
	ds_free(o);
}

float *ds_optim_state(struct ds_optim *o, const char *name)
{
	for (int i = 0; i < o->nstates; i++)
		if (!strcmp(o->state_names[i], name))
			return o->states[i];
	return NULL;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

/* torch.optim.SGD over one chunk; buf NULL without momentum.  The cases
 * are separate loops so each vectorises (target_clones picks the ISA). */
CLONES static void sgd_chunk(float *p, const float *g, float *buf, size_t n, float gm, float lr, float wd, float mom,
			     float damp, int first, int nest)
{
	if (!buf) {
#pragma omp simd
		for (size_t i = 0; i < n; i++)
			p[i] = p[i] - lr * (wd != 0.0f ? g[i] * gm + wd * p[i] : g[i] * gm);
		return;
	}
	if (first) {
#pragma omp simd
		for (size_t i = 0; i < n; i++) {
			float d = wd != 0.0f ? g[i] * gm + wd * p[i] : g[i] * gm;
			buf[i] = d;
			p[i] = p[i] - lr * (nest ? d + mom * d : d);
		}
		return;
	}
#pragma omp simd
	for (size_t i = 0; i < n; i++) {
		float d = wd != 0.0f ? g[i] * gm + wd * p[i] : g[i] * gm;
		float b = mom * buf[i] + damp * d;
		buf[i] = b;
		p[i] = p[i] - lr * (nest ? d + mom * b : b);
	}
}

void ds_sgd_update(const struct ds_optim_params *hp, int64_t t, float *p, const float *g, float *buf, float grad_mul,
		   size_t n)
{
	const float lr = (float)hp->lr, wd = (float)hp->weight_decay, mom = (float)hp->momentum;
	const float damp = (float)(1.0 - hp->dampening);
	const int first = t == 1, nest = hp->nesterov;
	const size_t chunk = 65536, nc = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nc > 1)
	for (size_t c = 0; c < nc; c++) {
		size_t lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
		sgd_chunk(p + lo, g + lo, buf ? buf + lo : NULL, len, grad_mul, lr, wd, mom, damp, first, nest);
	}
}

int ds_optim_step(struct ds_optim *o, float *p, const float *g, float grad_mul, const struct ds_range *ranges,
		  int nranges, struct ds_err *err)
{
	DS_TRY(ds_optim_params_check(&o->hp, err));
	int64_t t = o->step + 1;
	switch (o->hp.type) {
	case DS_OPTIM_ADAM:
	case DS_OPTIM_ADAMW: {
		struct ds_adam_coef c;
		ds_adam_coef_init(&c, &o->hp, t, grad_mul);
		ds_adam_update(&c, p, g, o->states[0], o->states[1], o->n, DS_SIMD_AUTO);
		break;
	}
	case DS_OPTIM_SGD:
		ds_sgd_update(&o->hp, t, p, g, o->nstates ? o->states[0] : NULL, grad_mul, o->n);
		break;
	case DS_OPTIM_LAMB: {
		double sbuf[64];
		double *sums = nranges <= 32 ? sbuf : ds_alloc((size_t)nranges * 2 * sizeof(double));
		if (!sums)
			return ds_err_set(err, DS_ENOMEM, "lamb: out of memory");
		int rc = ds_lamb_partial_norms(o, p, g, grad_mul, ranges, nranges, sums, err);
		if (!rc)
			rc = ds_lamb_apply(o, p, ranges, nranges, sums, err);
		if (sums != sbuf)
			ds_free(sums);
		return rc;
	}
	default:
		return ds_err_set(err, DS_EINVAL, "optimizer %s: step it with ds_onebit_step",
				  ds_optim_type_name(o->hp.type));
	}
	o->step = t;
	return 0;
}

/* The constants sgd_update computes, for a device implementation of the
 * same step (kernels/common/optim_math.h, ds_sgd_elem). */
void ds_sgd_coef_init(struct ds_sgd_coef *c, const struct ds_optim_params *hp, int64_t t, float grad_mul)
{
	c->lr = (float)hp->lr;
	c->wd = (float)hp->weight_decay;
	c->mom = (float)hp->momentum;
	c->damp = (float)(1.0 - hp->dampening);
	c->grad_mul = grad_mul;
	c->first = t == 1;
	c->nesterov = hp->nesterov;
}
