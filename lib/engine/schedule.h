/* schedule.h - the pipeline schedules of DeepSpeed's pipeline engine
 * (deepspeed/runtime/pipe/schedule.py) as pure functions.
 *
 * TrainSchedule: the gradient-accumulation steps of one optimizer step are
 * the micro-batches of a synchronous 1F1B pipeline.  There are 2 (m + p - 1)
 * steps; on step k stage s runs a forward when k and s have the same parity,
 * else a backward, on micro-batch
 *     forward:  floor(k / 2) - floor(s / 2)            (k even)
 *               floor((k - 1) / 2) - floor(s / 2)      (k odd)
 *     backward: floor(k / 2) - p + floor((s + 1) / 2)  (k even)
 *               floor((k - 1) / 2) - p + 1 + floor(s / 2)  (k odd)
 * (a micro-batch outside [0, m) means the stage idles: the bubble).  A
 * forward step first sends the gradient of the previous micro-batch back
 * and receives this one's activation; a backward step first receives this
 * one's gradient and sends the previous step's activation on.  Neighbouring
 * stages always run opposite parities, so every send meets its receive in
 * the same step and blocking point-to-point never deadlocks.  The last step
 * ends with ReduceTiedGrads, ReduceGrads and OptimizerStep.  Buffers are
 * max(2, min(p - s, m)), micro-batch i in buffer i mod that.
 *
 * InferenceSchedule (evaluation): m + p - 1 steps, stage s forwards
 * micro-batch k - s through two alternating buffers.
 */
#ifndef DS_ENGINE_SCHEDULE_H
#define DS_ENGINE_SCHEDULE_H

enum ds_pipe_op {
	DS_PIPE_LOAD = 0,        /* LoadMicroBatch: first and last stage read the micro-batch's rows */
	DS_PIPE_FORWARD,         /* ForwardPass */
	DS_PIPE_BACKWARD,        /* BackwardPass */
	DS_PIPE_SEND_ACT,        /* SendActivation to the next stage */
	DS_PIPE_RECV_ACT,        /* RecvActivation from the previous stage */
	DS_PIPE_SEND_GRAD,       /* SendGrad to the previous stage */
	DS_PIPE_RECV_GRAD,       /* RecvGrad from the next stage */
	DS_PIPE_REDUCE_TIED,     /* ReduceTiedGrads */
	DS_PIPE_REDUCE_GRADS,    /* ReduceGrads */
	DS_PIPE_OPT_STEP         /* OptimizerStep */
};

struct ds_pipe_cmd {
	int op;      /* enum ds_pipe_op */
	int buf;     /* buffer id (-1 for the last three) */
	int micro;   /* micro-batch the buffer holds (-1 for the last three) */
	int step;    /* the schedule step that issues it */
};

/* DeepSpeed's instruction name ("LoadMicroBatch", "ForwardPass", ...). */
const char *ds_pipe_op_name(int op);

/* Pipeline buffers of a stage: max(2, min(stages - stage, micro_batches))
 * for training, 2 for inference. */
int ds_pipe_num_buffers(int micro_batches, int stages, int stage);

/* The commands of TrainSchedule for `stage` of `stages` over
 * `micro_batches`, in order, into cmds[0 .. cap) (cmds may be NULL to
 * count).  Returns how many there are, or -1 for a size < 1 or a stage
 * outside [0, stages). */
int ds_pipe_train_schedule(int micro_batches, int stages, int stage, struct ds_pipe_cmd *cmds, int cap);

/* The same for InferenceSchedule (forward only, two buffers). */
int ds_pipe_infer_schedule(int micro_batches, int stages, int stage, struct ds_pipe_cmd *cmds, int cap);

/* Steps of the train schedule in which `stage` computes nothing, over
 * its 2 (m + p - 1) steps: 2 (p - 1) for every stage, so the bubble
 * fraction of 1F1B is (p - 1) / (m + p - 1). */
int ds_pipe_idle_steps(int micro_batches, int stages, int stage);

#endif
