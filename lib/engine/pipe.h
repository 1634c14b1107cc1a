/* pipe.h - the pipeline engine's executor (engine-internal): runs a stage's
 * part of the model over the micro-batches of one step in the order of
 * DeepSpeed's TrainSchedule (schedule.h), or of InferenceSchedule for
 * evaluation, with the activations and their gradients passed between
 * neighbouring stages point to point.
 *
 * With tensor parallelism, pipe_partitioned / grad_partitioned (DeepSpeed's
 * pipeline section, both true by default) send only this tensor-parallel
 * rank's 1/tp of each activation / gradient; the receiving stage's ranks
 * allgather the pieces.  The optimizer-side instructions (ReduceTiedGrads,
 * ReduceGrads, OptimizerStep) are the engine's, after ds_pipe_train.
 */
#ifndef DS_ENGINE_PIPE_H
#define DS_ENGINE_PIPE_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "util/err.h"

struct ds_pipe_run {
	/* set by the engine */
	const struct ds_gpt *model;
	struct ds_gpt_ws **ws;         /* nbuf workspaces of this stage's part, one per pipeline buffer */
	int nbuf;
	struct ds_comm *pp, *tp;       /* the pipeline group (rank = stage) and the tensor-parallel group */
	int stage, stages, tp_rank, tp_size;
	int pipe_partitioned, grad_partitioned;
	int MB, T, GA, dp, dp_rank;
	/* per buffer, allocated by ds_pipe_run_alloc: the received input and
	 * the output (B, T, C), their gradients, the micro-batch's tokens */
	float **act_in, **act_out, **grad_in, **grad_out;
	int32_t **tok, **tgt;
	int rows[64];                  /* rows of the micro-batch each buffer holds (evaluation) */
	/* seconds this rank spent in the last call: forward, backward, and
	 * point-to-point transfers (waiting for a neighbour included) */
	double t_fwd, t_bwd, t_p2p;
	size_t bytes;                  /* of the buffers */
};

/* Allocate the per-buffer arrays (ds_alloc).  Returns 0 or DS_ENOMEM;
 * ds_pipe_run_free releases them (and accepts a zeroed struct). */
int ds_pipe_run_alloc(struct ds_pipe_run *r, struct ds_err *err);
void ds_pipe_run_free(struct ds_pipe_run *r);
/* Bytes ds_pipe_run_alloc takes for these sizes. */
size_t ds_pipe_run_bytes(int nbuf, int MB, int T, int C);

/* The micro-batch commands of one training step: rows holds this rank's
 * GA*MB rows of T+1 tokens (only the first and last stage read them),
 * base the step's first global sample (dropout keys: micro-batch a is
 * samples base + a*MB*dp + dp_rank*MB ..), scale the loss multiplier of
 * backward (the fp16 scale / GA).  *loss_sum: the sum of the micro-batch
 * losses on the last stage (0 elsewhere).  Returns 0 or DS_E*. */
int ds_pipe_train(struct ds_pipe_run *r, const int32_t *rows, int64_t base, int64_t step, float scale,
		  double *loss_sum, struct ds_err *err);

/* Forward only (InferenceSchedule) over nrows rows in micro-batches of MB
 * (the last may be shorter), no dropout: on the last stage *loss_sum is
 * the sum of the rows' mean losses times their counts and *count the rows
 * (0 elsewhere). */
int ds_pipe_eval(struct ds_pipe_run *r, const int32_t *rows, int nrows, double *loss_sum, double *count,
		 struct ds_err *err);

#endif
