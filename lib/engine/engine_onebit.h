/* engine_onebit.h - the 1-bit optimizers (lib/optim/onebit.h) inside the
 * engine (private to lib/engine): one optimizer over the whole flat
 * buffers of a ZeRO-stage-0 run, its momentum exchange bound to the run's
 * communicator through the compressed allreduce of lib/comm, and 16-bit
 * gradients widened for it.  engine.c asks it whether to allreduce the next
 * step's gradients (DeepSpeed's enable_backward_allreduce).
 */
#ifndef DS_ENGINE_ONEBIT_H
#define DS_ENGINE_ONEBIT_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/onebit.h"
#include "util/err.h"
#include "util/half.h"

struct ds_engine_onebit;

/* The optimizer of hp (the 1-bit family) for model laid out in flat
 * buffers of total elements, segment s starting at seg_off[s].  A 16-bit
 * model (half) exchanges its momentum as one fused buffer, as DeepSpeed's
 * FP16_Optimizer hands the optimizer one flat tensor; an fp32 one per
 * tensor.  comm is borrowed.  Returns 0, DS_EINVAL or DS_ENOMEM. */
int ds_engine_onebit_create(struct ds_engine_onebit **out, const struct ds_optim_params *hp,
			    const struct ds_gpt *model, const int64_t *seg_off, int64_t total, enum ds_half_kind half,
			    struct ds_comm *comm, struct ds_err *err);
void ds_engine_onebit_destroy(struct ds_engine_onebit *b);  /* accepts NULL */

/* The step's lr (and betas when has_betas), from the schedule. */
void ds_engine_onebit_set_lr(struct ds_engine_onebit *b, double lr, int has_betas, double beta1, double beta2);

/* One optimizer step on params with the fp32 gradients grads, or (grads
 * NULL) the 16-bit gradients gh of kind half in the same layout. */
int ds_engine_onebit_step(struct ds_engine_onebit *b, float *params, const float *grads, const uint16_t *gh,
			  float grad_mul, struct ds_err *err);

/* The optimizer itself (borrowed), for the engine's accessors and
 * checkpoints. */
struct ds_onebit *ds_engine_onebit_optim(struct ds_engine_onebit *b);

#endif
