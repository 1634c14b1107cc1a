/* pipe.c - the pipeline executor (pipe.h): DeepSpeed's PipelineEngine
 * _exec_* instructions for one stage.  Sends and receives are blocking
 * (MPI_Send/MPI_Recv): the schedule pairs every send with its receive in
 * the same step (schedule.h), so no stage waits on one that waits on it. */
#include "engine/pipe.h"

#include <stdlib.h>
#include <string.h>

#include "engine/schedule.h"
#include "util/mem.h"
#include "util/timer.h"

enum { TAG_ACT = 1, TAG_GRAD = 2 };

size_t ds_pipe_run_bytes(int nbuf, int MB, int T, int C)
{
	const size_t nc = (size_t)MB * (size_t)T * (size_t)C, nt = (size_t)MB * (size_t)T;
	return (size_t)nbuf * (4 * nc * sizeof(float) + 2 * nt * sizeof(int32_t));
}

int ds_pipe_run_alloc(struct ds_pipe_run *r, struct ds_err *err)
{
	const size_t nc = (size_t)r->MB * (size_t)r->T * (size_t)ds_gpt_config(r->model)->hidden_size;
	const size_t nt = (size_t)r->MB * (size_t)r->T;
	float ***f[4] = { &r->act_in, &r->act_out, &r->grad_in, &r->grad_out };
	int32_t ***t[2] = { &r->tok, &r->tgt };
	int ok = r->nbuf <= 64;
	for (int k = 0; k < 4 && ok; k++) {
		if (!(*f[k] = calloc((size_t)r->nbuf, sizeof(float *))))
			ok = 0;
		for (int b = 0; ok && b < r->nbuf; b++)
			ok = ((*f[k])[b] = ds_alloc(nc * sizeof(float))) != NULL;
	}
	for (int k = 0; k < 2 && ok; k++) {
		if (!(*t[k] = calloc((size_t)r->nbuf, sizeof(int32_t *))))
			ok = 0;
		for (int b = 0; ok && b < r->nbuf; b++)
			ok = ((*t[k])[b] = ds_alloc(nt * sizeof(int32_t))) != NULL;
	}
	r->bytes = ds_pipe_run_bytes(r->nbuf, r->MB, r->T, ds_gpt_config(r->model)->hidden_size);
	if (!ok) {
		ds_pipe_run_free(r);
		return ds_err_set(err, DS_ENOMEM, "out of memory for %d pipeline buffers", r->nbuf);
	}
	return 0;
}

void ds_pipe_run_free(struct ds_pipe_run *r)
{
	float **f[4] = { r->act_in, r->act_out, r->grad_in, r->grad_out };
	int32_t **t[2] = { r->tok, r->tgt };
	for (int k = 0; k < 4; k++) {
		for (int b = 0; f[k] && b < r->nbuf; b++)
			ds_free(f[k][b]);
		free(f[k]);
	}
	for (int k = 0; k < 2; k++) {
		for (int b = 0; t[k] && b < r->nbuf; b++)
			ds_free(t[k][b]);
		free(t[k]);
	}
	r->act_in = r->act_out = r->grad_in = r->grad_out = NULL;
	r->tok = r->tgt = NULL;
}

/* rows of micro-batch k of nrows in micro-batches of MB */
static int micro_rows(const struct ds_pipe_run *r, int k, int nrows)
{
	int n = nrows - k * r->MB;
	return n < r->MB ? n : r->MB;
}

/* LoadMicroBatch: inputs and targets of micro-batch k into buffer b */
static void load(struct ds_pipe_run *r, const int32_t *rows, int k, int n, int b)
{
	const int T = r->T;
	for (int i = 0; i < n; i++) {
		const int32_t *row = rows + ((size_t)k * r->MB + (size_t)i) * (size_t)(T + 1);
		memcpy(r->tok[b] + (size_t)i * T, row, (size_t)T * sizeof(int32_t));
		memcpy(r->tgt[b] + (size_t)i * T, row + 1, (size_t)T * sizeof(int32_t));
	}
}

/* One transfer of n floats with the neighbour stage `peer`: with
 * partitioning and tensor parallelism only this rank's 1/tp goes over the
 * link, and the receiver allgathers the pieces from its tensor-parallel
 * group (DeepSpeed's pipe_partitioned / grad_partitioned). */
static int p2p(struct ds_pipe_run *r, int sending, float *buf, int64_t n, int peer, int tag, int partitioned,
	       struct ds_err *err)
{
	double t0 = ds_now();
	int64_t cnt = n, off = 0;
	int part = partitioned && r->tp_size > 1;
	if (part) {
		cnt = n / r->tp_size;
		off = (int64_t)r->tp_rank * cnt;
	}
	int rc = sending ? ds_comm_send(r->pp, buf + off, (size_t)cnt, DS_F32, peer, tag, err)
			 : ds_comm_recv(r->pp, buf + off, (size_t)cnt, DS_F32, peer, tag, err);
	if (rc == 0 && part && !sending)
		rc = ds_comm_allgather(r->tp, buf + off, buf, (size_t)cnt, DS_F32, err);
	r->t_p2p += ds_now() - t0;
	return rc;
}

/* DeepSpeed's instruction handlers, named as its _exec_* (the comms
 * logger's debug mode shows the caller) */
static int send_activations(struct ds_pipe_run *r, int b, int64_t n, struct ds_err *err)
{
	return p2p(r, 1, r->act_out[b], n, r->stage + 1, TAG_ACT, r->pipe_partitioned, err);
}

static int recv_activations(struct ds_pipe_run *r, int b, int64_t n, struct ds_err *err)
{
	return p2p(r, 0, r->act_in[b], n, r->stage - 1, TAG_ACT, r->pipe_partitioned, err);
}

static int send_grads(struct ds_pipe_run *r, int b, int64_t n, struct ds_err *err)
{
	return p2p(r, 1, r->grad_out[b], n, r->stage - 1, TAG_GRAD, r->grad_partitioned, err);
}

static int recv_grads(struct ds_pipe_run *r, int b, int64_t n, struct ds_err *err)
{
	return p2p(r, 0, r->grad_in[b], n, r->stage + 1, TAG_GRAD, r->grad_partitioned, err);
}

static struct ds_pipe_cmd *schedule(const struct ds_pipe_run *r, int micro, int train, int *n)
{
	*n = train ? ds_pipe_train_schedule(micro, r->stages, r->stage, NULL, 0)
		   : ds_pipe_infer_schedule(micro, r->stages, r->stage, NULL, 0);
	struct ds_pipe_cmd *c = *n > 0 ? malloc((size_t)*n * sizeof *c) : NULL;
	if (c && train)
		ds_pipe_train_schedule(micro, r->stages, r->stage, c, *n);
	else if (c)
		ds_pipe_infer_schedule(micro, r->stages, r->stage, c, *n);
	return c;
}

int ds_pipe_train(struct ds_pipe_run *r, const int32_t *rows, int64_t base, int64_t step, float scale,
		  double *loss_sum, struct ds_err *err)
{
	const int64_t NC = (int64_t)r->MB * r->T * ds_gpt_config(r->model)->hidden_size;
	int n, rc = 0;
	struct ds_pipe_cmd *cmds = schedule(r, r->GA, 1, &n);
	*loss_sum = 0;
	r->t_fwd = r->t_bwd = r->t_p2p = 0;
	if (!cmds)
		return ds_err_set(err, DS_ENOMEM, "out of memory for the pipeline schedule");
	for (int i = 0; i < n && rc == 0; i++) {
		const struct ds_pipe_cmd *c = &cmds[i];
		const int b = c->buf;
		double t0 = ds_now();
		float loss = 0;
		switch (c->op) {
		case DS_PIPE_LOAD:
			load(r, rows, c->micro, r->MB, b);
			break;
		case DS_PIPE_FORWARD: {
			int64_t off = base + (int64_t)c->micro * r->MB * r->dp + (int64_t)r->dp_rank * r->MB;
			rc = ds_gpt_forward_part(r->model, r->ws[b], NULL, r->tok[b], r->act_in[b], r->tgt[b], r->MB, r->T, step,
						 off, 1, r->act_out[b], &loss, err);
			if (r->stage == r->stages - 1)
				*loss_sum += loss;
			r->t_fwd += ds_now() - t0;
			break;
		}
		case DS_PIPE_BACKWARD:
			rc = ds_gpt_backward_part(r->model, r->ws[b], NULL, NULL, r->grad_in[b], r->grad_out[b], scale, err);
			r->t_bwd += ds_now() - t0;
			break;
		case DS_PIPE_SEND_ACT:
			rc = send_activations(r, b, NC, err);
			break;
		case DS_PIPE_RECV_ACT:
			rc = recv_activations(r, b, NC, err);
			break;
		case DS_PIPE_SEND_GRAD:
			rc = send_grads(r, b, NC, err);
			break;
		case DS_PIPE_RECV_GRAD:
			rc = recv_grads(r, b, NC, err);
			break;
		default:   /* ReduceTiedGrads, ReduceGrads, OptimizerStep: the engine's */
			break;
		}
	}
	free(cmds);
	return rc;
}

int ds_pipe_eval(struct ds_pipe_run *r, const int32_t *rows, int nrows, double *loss_sum, double *count,
		 struct ds_err *err)
{
	const int64_t C = ds_gpt_config(r->model)->hidden_size;
	const int micro = (nrows + r->MB - 1) / r->MB;
	int n, rc = 0;
	*loss_sum = *count = 0;
	if (micro < 1)
		return 0;
	struct ds_pipe_cmd *cmds = schedule(r, micro, 0, &n);
	if (!cmds)
		return ds_err_set(err, DS_ENOMEM, "out of memory for the pipeline schedule");
	for (int i = 0; i < n && rc == 0; i++) {
		const struct ds_pipe_cmd *c = &cmds[i];
		const int b = c->buf, k = micro_rows(r, c->micro, nrows);
		const int64_t nc = (int64_t)k * r->T * C;
		float loss = 0;
		switch (c->op) {
		case DS_PIPE_LOAD:
			load(r, rows, c->micro, k, b);
			break;
		case DS_PIPE_FORWARD:
			rc = ds_gpt_forward_part(r->model, r->ws[b], NULL, r->tok[b], r->act_in[b], r->tgt[b], k, r->T, 0, 0, 0,
						 r->act_out[b], &loss, err);
			if (r->stage == r->stages - 1) {
				*loss_sum += (double)loss * k;
				*count += k;
			}
			break;
		case DS_PIPE_SEND_ACT:
			rc = send_activations(r, b, nc, err);
			break;
		case DS_PIPE_RECV_ACT:
			rc = recv_activations(r, b, nc, err);
			break;
		default:
			break;
		}
	}
	free(cmds);
	return rc;
}
