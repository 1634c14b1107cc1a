/* optim.h - optimizers on flat fp32 shards: Adam/AdamW (DeepSpeed's
 * FusedAdam/CPUAdam), Lamb (FusedLamb) and SGD (torch.optim.SGD).  The
 * communication-compressed family (OneBitAdam, ZeroOneAdam, OneBitLamb)
 * shares the hyper-parameters and names here; its optimizer object, which
 * spans the whole model, is onebit.h's.
 *
 * Parameters, gradients and states are flat float arrays covering one shard
 * [0, n).  The optimizer owns its states (named as in DeepSpeed's state_dict
 * so checkpoints store them per name) and its step count t (1 on the first
 * step).  Hyper-parameters sit in a plain struct that callers may change
 * between steps (the LR scheduler sets lr and, for OneCycle, beta1/beta2).
 * Semantics: spec/deepspeed-training.md §3.
 */
#ifndef DS_OPTIM_OPTIM_H
#define DS_OPTIM_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "common/optim_math.h"
#include "util/err.h"

enum ds_optim_type {
	DS_OPTIM_ADAM = 0,  /* "adam": AdamW unless adam_w_mode is false */
	DS_OPTIM_ADAMW,     /* "adamw": always decoupled weight decay */
	DS_OPTIM_LAMB,
	DS_OPTIM_SGD,
	DS_OPTIM_ONEBIT_ADAM,   /* "onebitadam": DeepSpeed's OnebitAdam (onebit.h) */
	DS_OPTIM_ZERO_ONE_ADAM, /* "zerooneadam": ZeroOneAdam (0/1 Adam) */
	DS_OPTIM_ONEBIT_LAMB    /* "onebitlamb": OnebitLamb */
};

/* comm_backend_name of the 1-bit family: every one runs dstk's compressed
 * allreduce over the run's communicator (hccl, Ascend's, is refused). */
enum ds_onebit_backend { DS_ONEBIT_NCCL = 0, DS_ONEBIT_MPI, DS_ONEBIT_COMPRESSED };

/* Hyper-parameters; ds_optim_params_init fills DeepSpeed's defaults. */
struct ds_optim_params {
	enum ds_optim_type type;
	double lr;              /* 1e-3 for every type */
	double beta1, beta2;    /* Adam, Lamb: 0.9, 0.999 */
	double eps;             /* Adam, Lamb: 1e-8 */
	double weight_decay;    /* 0; L2 for SGD and Adam with adam_w_mode false */
	int bias_correction;    /* Adam, Lamb: 1 */
	int adam_w_mode;        /* Adam: 1 (type adamw forces 1) */
	int eps_inside_sqrt;    /* Lamb: 0 */
	double max_coeff;       /* Lamb: 10 */
	double min_coeff;       /* Lamb: 0.01 */
	double momentum;        /* SGD: 0 */
	double dampening;       /* SGD: 0 */
	int nesterov;           /* SGD: 0 */
	/* the 1-bit family (DeepSpeed's defaults; onebit.h) */
	int64_t freeze_step;        /* OneBitAdam, OneBitLamb: warm-up steps, 100000 */
	int comm_backend;           /* enum ds_onebit_backend: nccl */
	int64_t var_freeze_step;    /* ZeroOneAdam: last step the variance may change, 100000 */
	int64_t var_update_scaler;  /* ZeroOneAdam: variance updates per doubling of their interval, 16 */
	int64_t local_step_scaler;  /* ZeroOneAdam: steps per doubling of the local-step interval, 32678 */
	int64_t local_step_clipper; /* ZeroOneAdam: longest local-step interval, 16 */
	double coeff_beta;          /* OneBitLamb: EMA of the trust ratio in warm-up, 0.9 */
	double factor_max, factor_min;  /* OneBitLamb: clamp of the frozen ratio's factor, 4.0, 0.5 */
	double factor_threshold;    /* OneBitLamb: most the factor moves per step, 0.1 */
};

/* Fill p with DeepSpeed's (or torch's for SGD) defaults for type. */
void ds_optim_params_init(struct ds_optim_params *p, enum ds_optim_type type);

/* Map a config "type" ("Adam", "AdamW", "Lamb", "SGD", "OneBitAdam",
 * "ZeroOneAdam", "OneBitLamb", any case) to *type.  Returns 0, or
 * DS_EINVAL naming the type and the supported ones (the others DeepSpeed
 * knows are reported as not implemented in dstk). */
int ds_optim_type_from_name(const char *name, enum ds_optim_type *type, struct ds_err *err);

/* Canonical lower-case name of a type ("adam", "adamw", "lamb", "sgd",
 * "onebitadam", "zerooneadam", "onebitlamb"). */
const char *ds_optim_type_name(enum ds_optim_type type);

/* True for the 1-bit family, whose optimizer is a struct ds_onebit. */
int ds_optim_is_onebit(enum ds_optim_type type);

/* Set one config param ("lr", "betas" (nvals 2), "eps", "weight_decay",
 * "bias_correction", "adam_w_mode", "torch_adam", "amsgrad",
 * "set_grad_none", "fp32_optimizer_states", "momentum", "nesterov",
 * "dampening", "max_coeff", "min_coeff", "eps_inside_sqrt"; for the 1-bit
 * family "freeze_step", "cuda_aware", "var_freeze_step",
 * "var_update_scaler", "local_step_scaler", "local_step_clipper",
 * "coeff_beta", "factor_max", "factor_min", "factor_threshold") for p->type.
 * torch_adam and set_grad_none change nothing (same update, grads always
 * zeroed); amsgrad must be false and fp32_optimizer_states true.
 * Booleans are 0 or 1.  Returns 0, or DS_EINVAL with a message
 * for an unknown name, a name the type does not take, a wrong count, or a
 * value DeepSpeed rejects (max_grad_norm: use gradient_clipping; amsgrad
 * true: not supported). */
int ds_optim_param_set(struct ds_optim_params *p, const char *name, const double *vals, int nvals,
		       struct ds_err *err);

/* Check the whole set (ranges, nesterov needs momentum > 0 and dampening 0).
 * Returns 0 or DS_EINVAL naming the param. */
int ds_optim_params_check(const struct ds_optim_params *p, struct ds_err *err);

/* True when the update decouples weight decay (AdamW, Lamb). */
int ds_optim_decoupled(const struct ds_optim_params *p);

#define DS_OPTIM_MAX_STATES 3

/* An optimizer over one shard of n elements.  A checkpoint keeps step and
 * every state by name; both must be restored together (SGD's first step
 * copies the gradient into momentum_buffer, Adam's bias correction uses t). */
struct ds_optim {
	struct ds_optim_params hp;  /* may be changed between steps */
	size_t n;                   /* shard length */
	int64_t step;               /* steps taken; the next step uses t = step + 1 */
	int nstates;
	const char *state_names[DS_OPTIM_MAX_STATES];
	float *states[DS_OPTIM_MAX_STATES];  /* owned, ds_alloc'ed, zeroed */
};

/* Create an optimizer for a shard of n elements with states zeroed and
 * step 0.  Checks hp.  Returns 0, DS_EINVAL or DS_ENOMEM. */
int ds_optim_create(struct ds_optim **out, const struct ds_optim_params *hp, size_t n, struct ds_err *err);
void ds_optim_destroy(struct ds_optim *o);  /* accepts NULL */
/* The same without states: o->states[i] stay NULL for the caller to set
 * (lib/compute puts them in backend memory) and to free before
 * ds_optim_destroy, which frees whatever they still point to. */
int ds_optim_create_bare(struct ds_optim **out, const struct ds_optim_params *hp, size_t n, struct ds_err *err);

/* The state named name ("exp_avg", "exp_avg_sq", "momentum_buffer"), or
 * NULL if this type has none of that name.  Borrowed. */
float *ds_optim_state(struct ds_optim *o, const char *name);

/* One optimizer step over the shard: p -= update(g * grad_mul), t = step+1.
 * grad_mul is the unscale/clip factor 1/c (1 for none), applied to the
 * gradient before anything else, as FusedLamb's combined_scale and
 * ZeRO's unscale_and_clip_grads do.  Lamb needs the tensor pieces
 * (ranges, nranges) to take per-tensor norms; Adam and SGD ignore them.
 * For a Lamb whose tensors span ranks use ds_lamb_partial_norms and
 * ds_lamb_apply instead.  Returns 0 or DS_EINVAL. */
int ds_optim_step(struct ds_optim *o, float *p, const float *g, float grad_mul,
		  const struct ds_range *ranges, int nranges, struct ds_err *err);

/* torch.optim.SGD for step t over [0, n): d = g*grad_mul + wd*p; buf = d
 * on the first step, else mom*buf + (1-dampening)*d; nesterov d +=
 * mom*buf, else d = buf; p -= lr*d (wd*p only when wd != 0, as torch).
 * buf NULL without momentum.  ds_optim_step's SGD. */
void ds_sgd_update(const struct ds_optim_params *hp, int64_t t, float *p, const float *g, float *buf, float grad_mul,
		   size_t n);

/* Lamb, phase 1: update exp_avg and exp_avg_sq from g * grad_mul and write
 * for every range i the partial sums sums[2i] = sum p^2 and sums[2i+1] =
 * sum u^2, u = m/denom + wd*p.  The caller adds sums over the ranks holding
 * other pieces of the same tensor (an allreduce), then calls phase 2.  Call
 * it once per step.  Elements outside every range are left alone. */
int ds_lamb_partial_norms(struct ds_optim *o, const float *p, const float *g, float grad_mul,
			  const struct ds_range *ranges, int nranges, double *sums, struct ds_err *err);

/* Lamb, phase 2: with the reduced sums, r = clamp(||p||/||u||) (1 if either
 * is 0) per range, p -= step_size * r * u; advances the step count. */
int ds_lamb_apply(struct ds_optim *o, float *p, const struct ds_range *ranges, int nranges,
		  const double *sums, struct ds_err *err);

/* Lamb's per-step constants (struct ds_lamb_coef, optim_math.h) for hp, and
 * its step size for step t: lr * sqrt(1-b2^t) / (1-b1^t) with bias
 * correction, else lr (in double; phase 2 scales it by the trust ratio and
 * rounds once to float).  For a device implementation of the two phases. */
void ds_lamb_coef_init(struct ds_lamb_coef *k, const struct ds_optim_params *hp);
double ds_lamb_step_size(const struct ds_optim_params *hp, int64_t t);

/* torch SGD's constants (struct ds_sgd_coef, optim_math.h) for step t (>= 1)
 * of hp with gradient factor grad_mul. */
void ds_sgd_coef_init(struct ds_sgd_coef *c, const struct ds_optim_params *hp, int64_t t, float grad_mul);

/* Lamb trust ratio for the norms (not squared): ||p||/||u|| clamped to
 * [min_coeff, max_coeff], 1 when either norm is 0 (spec case 17). */
double ds_lamb_trust_ratio(double p_norm, double u_norm, double min_coeff, double max_coeff);

/* --- the Adam kernel, exposed for tests and the benchmark --- */

enum ds_simd {
	DS_SIMD_AUTO = 0,  /* the best one this CPU supports */
	DS_SIMD_SCALAR,
	DS_SIMD_AVX2,      /* AVX2 + FMA */
	DS_SIMD_AVX512     /* AVX-512F */
};

/* True if this CPU (and this build) can run isa. */
int ds_simd_supported(enum ds_simd isa);
/* The isa DS_SIMD_AUTO resolves to; its name ("avx512", "avx2", "scalar"). */
enum ds_simd ds_simd_best(void);
const char *ds_simd_name(enum ds_simd isa);

/* The isa the optimizers use for DS_SIMD_AUTO: the one set by
 * ds_simd_force if this CPU supports it, else ds_simd_best().  Lamb has an
 * AVX-512 kernel and a scalar one (used on AVX2 machines too). */
enum ds_simd ds_simd_pick(void);
/* Make every optimizer step use isa (DS_SIMD_AUTO: back to the best); a
 * hook for tests and benchmarks.  Process-wide: call between steps. */
void ds_simd_force(enum ds_simd isa);

/* struct ds_adam_coef (the per-step constants of the Adam element update,
 * in CPUAdam's order) and struct ds_range are kernels/common/optim_math.h's,
 * shared with the CUDA kernels. */

/* Constants for step t (>= 1) of hp with gradient factor grad_mul. */
void ds_adam_coef_init(struct ds_adam_coef *c, const struct ds_optim_params *hp, int64_t t, float grad_mul);

/* The Adam element update over [0, n) with isa (DS_SIMD_AUTO for
 * ds_simd_pick()), split across OpenMP threads.  An unsupported isa falls back to
 * the best supported one. */
void ds_adam_update(const struct ds_adam_coef *c, float *p, const float *g, float *m, float *v, size_t n,
		    enum ds_simd isa);

#endif
