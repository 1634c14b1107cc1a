/* schedule.c - DeepSpeed's TrainSchedule and InferenceSchedule as lists of
 * commands (schedule.h).  tests/unit/test_schedule.c compares them with
 * the instructions DeepSpeed's own schedule.py yields
 * (tests/data/pipe_schedule.txt, contrib/reference/pipe_reference.py). */
#include "engine/schedule.h"

#include <stddef.h>

static const char *const names[] = { "LoadMicroBatch", "ForwardPass", "BackwardPass", "SendActivation",
				      "RecvActivation", "SendGrad", "RecvGrad", "ReduceTiedGrads",
				      "ReduceGrads", "OptimizerStep" };

const char *ds_pipe_op_name(int op)
{
	return op >= 0 && op <= DS_PIPE_OPT_STEP ? names[op] : "?";
}

int ds_pipe_num_buffers(int micro_batches, int stages, int stage)
{
	int b = stages - stage < micro_batches ? stages - stage : micro_batches;
	return b > 2 ? b : 2;
}

/* the collector: cmds may be NULL or full, n counts regardless */
struct out {
	struct ds_pipe_cmd *c;
	int cap, n;
};

static void emit(struct out *o, int op, int buf, int micro, int step)
{
	if (o->c && o->n < o->cap)
		o->c[o->n] = (struct ds_pipe_cmd){ op, buf, micro, step };
	o->n++;
}

/* which micro-batch stage s works on at step k, and in which direction */
static int step_micro(int k, int p, int s, int *fwd)
{
	*fwd = (k % 2) == (s % 2);
	if (*fwd)
		return (k % 2 == 0 ? k / 2 : (k - 1) / 2) - s / 2;
	if (k % 2 == 0)
		return k / 2 - p + (s + 1) / 2;
	return (k - 1) / 2 - p + 1 + s / 2;
}

int ds_pipe_train_schedule(int micro_batches, int stages, int stage, struct ds_pipe_cmd *cmds, int cap)
{
	const int m = micro_batches, p = stages, s = stage;
	if (m < 1 || p < 1 || s < 0 || s >= p)
		return -1;
	const int nbuf = ds_pipe_num_buffers(m, p, s), total = 2 * (m + p - 1);
	const int has_prev = s > 0, has_next = s < p - 1;
	struct out o = { cmds, cap, 0 };
	int prev = -1;
	for (int k = 0; k < total; k++) {
		int fwd, cur = step_micro(k, p, s, &fwd);
		const int vp = prev >= 0 && prev < m, vc = cur >= 0 && cur < m;
		const int pb = vp ? prev % nbuf : -1, cb = vc ? cur % nbuf : -1;
		if (fwd) {
			if (vp && has_prev)
				emit(&o, DS_PIPE_SEND_GRAD, pb, prev, k);
			if (vc && has_prev)
				emit(&o, DS_PIPE_RECV_ACT, cb, cur, k);
		} else {
			if (vc && has_next)
				emit(&o, DS_PIPE_RECV_GRAD, cb, cur, k);
			if (vp && has_next)
				emit(&o, DS_PIPE_SEND_ACT, pb, prev, k);
		}
		if ((s == 0 || s == p - 1) && fwd && vc)
			emit(&o, DS_PIPE_LOAD, cb, cur, k);
		if (vc)
			emit(&o, fwd ? DS_PIPE_FORWARD : DS_PIPE_BACKWARD, cb, cur, k);
		if (k == total - 1) {
			emit(&o, DS_PIPE_REDUCE_TIED, -1, -1, k);
			emit(&o, DS_PIPE_REDUCE_GRADS, -1, -1, k);
			emit(&o, DS_PIPE_OPT_STEP, -1, -1, k);
		}
		prev = cur;
	}
	return o.n;
}

int ds_pipe_infer_schedule(int micro_batches, int stages, int stage, struct ds_pipe_cmd *cmds, int cap)
{
	const int m = micro_batches, p = stages, s = stage;
	if (m < 1 || p < 1 || s < 0 || s >= p)
		return -1;
	struct out o = { cmds, cap, 0 };
	for (int k = 0; k < m + p - 1; k++) {
		const int mb = k - s, even = s % 2 == 0;
		const int rb = even ? k % 2 : (k + 1) % 2, sb = even ? (k + 1) % 2 : k % 2;
		const int vc = mb >= 0 && mb < m, vs = mb - 1 >= 0 && mb - 1 < m;
		if ((s == 0 || s == p - 1) && vc)
			emit(&o, DS_PIPE_LOAD, rb, mb, k);
		if (even) {
			if (s < p - 1 && vs)
				emit(&o, DS_PIPE_SEND_ACT, sb, mb - 1, k);
			if (s > 0 && vc)
				emit(&o, DS_PIPE_RECV_ACT, rb, mb, k);
		} else {
			if (s > 0 && vc)
				emit(&o, DS_PIPE_RECV_ACT, rb, mb, k);
			if (s < p - 1 && vs)
				emit(&o, DS_PIPE_SEND_ACT, sb, mb - 1, k);
		}
		if (vc)
			emit(&o, DS_PIPE_FORWARD, rb, mb, k);
	}
	return o.n;
}

int ds_pipe_idle_steps(int micro_batches, int stages, int stage)
{
	const int total = 2 * (micro_batches + stages - 1);
	int idle = 0;
	for (int k = 0; k < total; k++) {
		int fwd, cur = step_micro(k, stages, stage, &fwd);
		idle += !(cur >= 0 && cur < micro_batches);
	}
	return idle;
}
