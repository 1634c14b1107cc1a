/* onebit.h - DeepSpeed's communication-compressed optimizers over a whole
 * model: OneBitAdam, ZeroOneAdam (0/1 Adam) and OneBitLamb, as
 * deepspeed/runtime/fp16/onebit/{adam,zoadam,lamb}.py compute them.
 *
 * Common to all three, as in DeepSpeed: the first step only sets the
 * optimizer up (no update; the step count becomes 1); no bias correction
 * (bias_correction and eps_inside_sqrt are taken and ignored); weight decay
 * adds wd*p to the update.  Momentum (or 0/1 Adam's gradient and
 * accumulated update) crosses ranks through the compressed allreduce the
 * caller provides (struct ds_onebit_comm, DeepSpeed's
 * compressed_allreduce with its worker and server errors), one call per
 * compression unit: every tensor alone, or with `fused` the whole model as
 * one buffer (DeepSpeed's FP16_Optimizer hands 1-bit and 0/1 Adam one flat
 * tensor in fp16/bf16 runs; OneBitLamb always fuses its momentum).  At one
 * rank no exchange is made (DeepSpeed's size > 1 tests): the compressed
 * allreduce of one rank is taken to be the identity.
 *
 *  OneBitAdam: steps 2..freeze_step are Adam (the engine allreduces the
 *    gradients); then the engine stops allreducing, the variance is
 *    frozen, and each step's momentum is updated from the local gradient
 *    and replaced by its compressed average.
 *  ZeroOneAdam: the variance is updated on steps that are multiples of
 *    var_interval (1, doubling after every var_update_scaler updates), with
 *    allreduced gradients; on the other steps the local gradient's
 *    compressed average updates the momentum.  After var_freeze_step the
 *    variance is frozen and ranks take local steps, accumulating their
 *    updates; every local_step_interval steps (1, doubling every
 *    local_step_scaler steps up to local_step_clipper) the accumulated
 *    update, scaled by the denominator, is averaged compressed and
 *    replaces the local ones, and the momentum is rebuilt from it.  Ranks'
 *    parameters and momentum differ between those exchanges.
 *  OneBitLamb: steps 2..freeze_step are Lamb, keeping an EMA (coeff_beta)
 *    of each tensor's trust ratio; then the momentum, scaled per tensor to
 *    a common magnitude, is averaged compressed, a fresh variance is
 *    tracked from the gradient the momentum implies, and each tensor's
 *    ratio is the frozen EMA times a factor from the frozen/fresh
 *    denominators (clamped to [factor_min, factor_max] and to within
 *    factor_threshold of the last one).
 *
 * The engine asks ds_onebit_reduce_next whether to allreduce the next
 * step's gradients (DeepSpeed's enable_backward_allreduce).
 */
#ifndef DS_OPTIM_ONEBIT_H
#define DS_OPTIM_ONEBIT_H

#include <stddef.h>
#include <stdint.h>

#include "optim/optim.h"
#include "util/err.h"

/* A tensor's elements [off, off + n) in the flat buffers. */
struct ds_onebit_tensor {
	size_t off, n;
};

/* DeepSpeed's compressed_allreduce of buf[0 .. padded) in place (the
 * average over the ranks), with the unit's worker error (padded floats)
 * and server error (padded / world), which it updates.  padded is
 * ds_onebit_padded(n, world) of kernels/cpu/onebit.h. */
typedef int (*ds_onebit_allreduce_fn)(void *ctx, float *buf, size_t padded, float *worker_error,
				      float *server_error, struct ds_err *err);

struct ds_onebit_comm {
	int world;                        /* ranks averaging (1: no exchanges) */
	ds_onebit_allreduce_fn allreduce; /* may be NULL at world 1 */
	void *ctx;
};

struct ds_onebit;

/* An optimizer of hp->type (the 1-bit family) over flat buffers of total
 * elements holding nt tensors t[] (copied), compression units per tensor
 * or, with fused, one for all.  Returns 0, DS_EINVAL or DS_ENOMEM. */
int ds_onebit_create(struct ds_onebit **out, const struct ds_optim_params *hp, size_t total,
		     const struct ds_onebit_tensor *t, int nt, int fused, const struct ds_onebit_comm *x,
		     struct ds_err *err);
void ds_onebit_destroy(struct ds_onebit *o);  /* accepts NULL */

/* Hyper-parameters the caller may change between steps (lr, betas). */
struct ds_optim_params *ds_onebit_params(struct ds_onebit *o);

/* One step over p[0..total) with gradients g * grad_mul (the unscale/clip
 * factor).  g holds the allreduced average on steps the engine reduced
 * (ds_onebit_reduce_next was 1), else this rank's own gradient.  Returns 0
 * or the exchange's error. */
int ds_onebit_step(struct ds_onebit *o, float *p, const float *g, float grad_mul, struct ds_err *err);

/* 1 when the engine is to allreduce the next step's gradients. */
int ds_onebit_reduce_next(const struct ds_onebit *o);

/* 1 when ranks' parameters, exp_avg and momentum_accumulator may differ
 * (ZeroOneAdam after var_freeze_step with more than one rank): a
 * checkpoint then keeps each rank's own. */
int ds_onebit_rank_local(const struct ds_onebit *o);

/* ---- state, for checkpoints ------------------------------------------ */

/* Steps taken (DeepSpeed's state['step'], the set-up step included). */
int64_t ds_onebit_steps(const struct ds_onebit *o);
void ds_onebit_set_steps(struct ds_onebit *o, int64_t steps);

/* Element states over the flat buffers (total floats each): "exp_avg",
 * "exp_avg_sq", and "momentum_accumulator" (ZeroOneAdam) or
 * "exp_avg_sq_fresh" (OneBitLamb).  ds_onebit_state: NULL for a name the
 * type lacks.  Borrowed. */
int ds_onebit_num_states(const struct ds_onebit *o);
const char *ds_onebit_state_name(const struct ds_onebit *o, int k);
float *ds_onebit_state(struct ds_onebit *o, const char *name);

/* Counters and flags, the same on every rank, each an int64 (i) or a
 * double (d; the other NULL): step, initialize, freeze_key,
 * reduce_next, and per type reinitial_error_buffer, var_interval,
 * var_counter, local_step_interval, local_step_counter, lrs,
 * have_scaling_coeff.  Fills at most DS_ONEBIT_MAX_VARS; returns the count. */
#define DS_ONEBIT_MAX_VARS 16
struct ds_onebit_var {
	const char *name;
	int64_t *i;
	double *d;
};
int ds_onebit_vars(struct ds_onebit *o, struct ds_onebit_var *out);

/* OneBitLamb's per-tensor doubles, nt each: "lamb_coeff_freeze",
 * "last_factor", "scaling_coeff" (none for the others). */
int ds_onebit_num_tensor_vars(const struct ds_onebit *o);
const char *ds_onebit_tensor_var_name(const struct ds_onebit *o, int k);
double *ds_onebit_tensor_var(struct ds_onebit *o, int k);

/* Compression units and their error feedback (this rank's, world-size
 * dependent): the first tensor of unit u (-1 for a fused unit), its padded
 * length, the worker error (padded floats) and server error (padded /
 * world); NULL errors at world 1. */
int ds_onebit_num_units(const struct ds_onebit *o);
int ds_onebit_unit_tensor(const struct ds_onebit *o, int u);
size_t ds_onebit_unit_padded(const struct ds_onebit *o, int u);
float *ds_onebit_worker_error(struct ds_onebit *o, int u);
float *ds_onebit_server_error(struct ds_onebit *o, int u);

/* OneBitLamb: the padding after the fused momentum, which DeepSpeed keeps
 * from step to step (*n elements, the same on every rank); NULL and 0
 * otherwise or at world 1. */
float *ds_onebit_lamb_pad(struct ds_onebit *o, size_t *n);

/* Bytes this optimizer allocates with ds_alloc beyond its ds_optim header:
 * element states, error feedback, the exchange buffer. */
size_t ds_onebit_state_bytes(const struct ds_onebit *o);

/* The same figure before creating it, for the memory estimate, and in
 * *scratch the bytes lib/comm's compressed allreduce keeps for the largest
 * unit (its signs, the received signs, a server chunk; 0 at world 1). */
size_t ds_onebit_bytes(enum ds_optim_type type, size_t total, const struct ds_onebit_tensor *t, int nt, int fused,
		       int world, size_t *scratch);

#endif
