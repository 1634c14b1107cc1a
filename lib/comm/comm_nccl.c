/* comm_nccl.c - collectives on device buffers over NCCL (built with CUDA).
 * ds_comm_nccl_open joins one NCCL communicator per ds_comm: rank 0 makes
 * the unique id and the host backend broadcasts it (ds_comm_share_id: no
 * MASTER_ADDR, no ssh), then every rank calls ncclCommInitRank on its
 * device.  A collective first makes the communicator's own stream wait for
 * the work the engine's stream (dm->stream) holds, runs there (the
 * separate stream DeepSpeed's overlap_comm uses), and ends with an event:
 * a blocking call waits for it, a non-blocking one leaves it to test/wait,
 * which also make the engine's stream wait for it.  While waiting, NCCL's
 * asynchronous errors are polled, so a failed peer is an error, not a hang.
 * fp16/bf16 sums are NCCL's own (see DESIGN.md, "Communicators").  CUDA and
 * NCCL status codes become one line here (DS_CUDA_TRY, DS_NCCL_TRY): the
 * only file of lib/comm that includes their headers. */
#include "config.h"
#include "comm/comm_int.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" /* nccl.h declares f() */
#include <cuda_runtime.h>
#include <nccl.h>
#pragma GCC diagnostic pop

int ds_comm_nccl_built(void) { return 1; }

struct nccl_state {
	ncclComm_t comm;
	cudaStream_t cs;   /* the collectives' stream */
	cudaStream_t es;   /* the engine's (dm->stream; NULL: the legacy default stream) */
	cudaEvent_t ready; /* what es held when a collective was called: cs waits for it */
	cudaEvent_t done;  /* a blocking collective's end on cs */
	int failed;        /* NCCL reported an asynchronous error: abort, do not destroy */
};

#define DS_CUDA_TRY(call, what)                                                                  \
	do {                                                                                     \
		cudaError_t ce_ = (call);                                                        \
		if (ce_ != cudaSuccess)                                                          \
			return ds_err_set(err, DS_EIO, "%s failed (%s:%d): %s", what, __FILE__,  \
					  __LINE__, cudaGetErrorString(ce_));                    \
	} while (0)

#define DS_NCCL_TRY(s, call, what)                                                                   \
	do {                                                                                         \
		ncclResult_t nr_ = (call);                                                           \
		if (nr_ != ncclSuccess)                                                              \
			return nccl_fail(err, (s), nr_, what, __FILE__, __LINE__);                   \
	} while (0)

/* One line for an NCCL failure: the call, where, NCCL's error string and
 * its last message when the communicator has one. */
static int nccl_fail(struct ds_err *err, const struct nccl_state *s, ncclResult_t nr, const char *what,
		     const char *file, int line)
{
	const char *last = ncclGetLastError(s ? s->comm : NULL);
	return ds_err_set(err, DS_EIO, "%s failed (%s:%d): %s%s%s", what, file, line, ncclGetErrorString(nr),
			  last && last[0] ? ": " : "", last ? last : "");
}

static struct nccl_state *state(struct ds_comm *c)
{
	return c->dev->nccl;
}

/* ---- data types and operations ------------------------------------------ */

static int nccl_type(int dtype, ncclDataType_t *t, struct ds_err *err)
{
	switch (dtype) {
	case DS_F32: *t = ncclFloat32; return 0;
	case DS_F64: *t = ncclFloat64; return 0;
	case DS_I64: *t = ncclInt64; return 0;
	case DS_I32: *t = ncclInt32; return 0;
	case DS_U8: *t = ncclUint8; return 0;
	case DS_F16: *t = ncclFloat16; return 0;
	case DS_BF16: *t = ncclBfloat16; return 0;
	default: return ds_err_set(err, DS_EINVAL, "no NCCL data type for dtype %d", dtype);
	}
}

/* The host backends sum fp16/bf16 only; NCCL could do more, but the same
 * call must mean the same on every path. */
static int nccl_op(int dtype, int op, ncclRedOp_t *o, struct ds_err *err)
{
	if ((dtype == DS_F16 || dtype == DS_BF16) && op != DS_SUM)
		return ds_err_set(err, DS_EINVAL, "only sum is supported for %s reductions", ds_dtype_name(dtype));
	*o = op == DS_MAX ? ncclMax : op == DS_MIN ? ncclMin : ncclSum;
	return 0;
}

/* ---- ordering and completion ------------------------------------------- */

/* The collective about to be queued on cs runs after what es holds now. */
static int order_after_engine(struct nccl_state *s, struct ds_err *err)
{
	DS_CUDA_TRY(cudaEventRecord(s->ready, s->es), "cudaEventRecord (engine stream)");
	DS_CUDA_TRY(cudaStreamWaitEvent(s->cs, s->ready, 0), "cudaStreamWaitEvent (communication stream)");
	return 0;
}

/* Has ev happened?  Also answers NCCL's asynchronous errors (a peer gone,
 * a network failure), which would otherwise leave ev pending for ever. */
static int poll_event(struct nccl_state *s, cudaEvent_t ev, int *done, struct ds_err *err)
{
	cudaError_t ce = cudaEventQuery(ev);
	ncclResult_t async = ncclSuccess;

	*done = ce == cudaSuccess;
	if (ce != cudaSuccess && ce != cudaErrorNotReady)
		return ds_err_set(err, DS_EIO, "cudaEventQuery failed (%s:%d): %s", __FILE__, __LINE__,
				  cudaGetErrorString(ce));
	if (*done)
		return 0;
	DS_NCCL_TRY(s, ncclCommGetAsyncError(s->comm, &async), "ncclCommGetAsyncError");
	if (async != ncclSuccess && async != ncclInProgress) {
		s->failed = 1;
		return nccl_fail(err, s, async, "an NCCL collective (asynchronous error)", __FILE__, __LINE__);
	}
	return 0;
}

/* Wait for ev on the host, then order the engine's stream after it. */
static int finish(struct nccl_state *s, cudaEvent_t ev, struct ds_err *err)
{
	int done = 0;
	while (!done) {
		DS_TRY(poll_event(s, ev, &done, err));
		if (!done)
			sched_yield();
	}
	DS_CUDA_TRY(cudaStreamWaitEvent(s->es, ev, 0), "cudaStreamWaitEvent (engine stream)");
	return 0;
}

/* After a collective was queued on cs: wait for it (req NULL), or give req
 * an event of its own for test/wait. */
static int queued(struct nccl_state *s, struct ds_comm_req *req, struct ds_err *err)
{
	cudaEvent_t ev;

	if (!req) {
		DS_CUDA_TRY(cudaEventRecord(s->done, s->cs), "cudaEventRecord (communication stream)");
		return finish(s, s->done, err);
	}
	DS_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
	if (cudaEventRecord(ev, s->cs) != cudaSuccess) {
		cudaEventDestroy(ev);
		return ds_err_set(err, DS_EIO, "cudaEventRecord (communication stream) failed (%s:%d): %s",
				  __FILE__, __LINE__, cudaGetErrorString(cudaGetLastError()));
	}
	memcpy(req->inline_buf, &ev, sizeof ev);
	return 0;
}

static cudaEvent_t req_event(const struct ds_comm_req *req)
{
	cudaEvent_t ev;
	memcpy(&ev, req->inline_buf, sizeof ev);
	return ev;
}

/* ---- collectives: the engine's order, NCCL's call, completion ---------- */

static int n_allreduce_any(struct ds_comm *c, void *buf, size_t count, int dtype, int op,
			   struct ds_comm_req *req, struct ds_err *err)
{
	struct nccl_state *s = state(c);
	ncclDataType_t t = ncclFloat32;
	ncclRedOp_t o = ncclSum;

	DS_TRY(nccl_type(dtype, &t, err));
	DS_TRY(nccl_op(dtype, op, &o, err));
	DS_TRY(order_after_engine(s, err));
	DS_NCCL_TRY(s, ncclAllReduce(buf, buf, count, t, o, s->comm, s->cs), "ncclAllReduce");
	return queued(s, req, err);
}

static int n_reduce_scatter_any(struct ds_comm *c, const void *send, void *recv, size_t recvcount, int dtype,
				int op, struct ds_comm_req *req, struct ds_err *err)
{
	struct nccl_state *s = state(c);
	ncclDataType_t t = ncclFloat32;
	ncclRedOp_t o = ncclSum;

	DS_TRY(nccl_type(dtype, &t, err));
	DS_TRY(nccl_op(dtype, op, &o, err));
	DS_TRY(order_after_engine(s, err));
	DS_NCCL_TRY(s, ncclReduceScatter(send, recv, recvcount, t, o, s->comm, s->cs), "ncclReduceScatter");
	return queued(s, req, err);
}

/* In place when send is this rank's block of recv, as NCCL allows. */
static int n_allgather_any(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			   struct ds_comm_req *req, struct ds_err *err)
{
	struct nccl_state *s = state(c);
	ncclDataType_t t = ncclFloat32;

	DS_TRY(nccl_type(dtype, &t, err));
	DS_TRY(order_after_engine(s, err));
	DS_NCCL_TRY(s, ncclAllGather(send, recv, sendcount, t, s->comm, s->cs), "ncclAllGather");
	return queued(s, req, err);
}

static int n_allreduce(struct ds_comm *c, void *buf, size_t count, int dtype, int op, struct ds_err *err)
{
	return n_allreduce_any(c, buf, count, dtype, op, NULL, err);
}

static int n_iallreduce(struct ds_comm *c, void *buf, size_t count, int dtype, int op, struct ds_comm_req *req,
			struct ds_err *err)
{
	return n_allreduce_any(c, buf, count, dtype, op, req, err);
}

static int n_reduce_scatter(struct ds_comm *c, const void *send, void *recv, size_t recvcount, int dtype, int op,
			    struct ds_err *err)
{
	return n_reduce_scatter_any(c, send, recv, recvcount, dtype, op, NULL, err);
}

static int n_ireduce_scatter(struct ds_comm *c, const void *send, void *recv, size_t recvcount, int dtype,
			     int op, struct ds_comm_req *req, struct ds_err *err)
{
	return n_reduce_scatter_any(c, send, recv, recvcount, dtype, op, req, err);
}

static int n_allgather(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
		       struct ds_err *err)
{
	return n_allgather_any(c, send, recv, sendcount, dtype, NULL, err);
}

static int n_iallgather(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			struct ds_comm_req *req, struct ds_err *err)
{
	return n_allgather_any(c, send, recv, sendcount, dtype, req, err);
}

static int n_broadcast(struct ds_comm *c, void *buf, size_t count, int dtype, int root, struct ds_err *err)
{
	struct nccl_state *s = state(c);
	ncclDataType_t t = ncclFloat32;

	if (root < 0 || root >= c->size)
		return ds_err_set(err, DS_EINVAL, "broadcast root %d out of range (world size %d)", root, c->size);
	DS_TRY(nccl_type(dtype, &t, err));
	DS_TRY(order_after_engine(s, err));
	DS_NCCL_TRY(s, ncclBroadcast(buf, buf, count, t, root, s->comm, s->cs), "ncclBroadcast");
	return queued(s, NULL, err);
}

/* a barrier has no buffer: the host backend's (ds_comm_route never sends
 * one here; kept for a complete table) */
static int n_barrier(struct ds_comm *c, struct ds_err *err)
{
	return c->ops->barrier(c, err);
}

static int n_test(struct ds_comm *c, struct ds_comm_req *req, int *done, struct ds_err *err)
{
	return poll_event(state(c), req_event(req), done, err);
}

static int n_wait(struct ds_comm *c, struct ds_comm_req *req, struct ds_err *err)
{
	cudaEvent_t ev = req_event(req);
	int rc = finish(state(c), ev, err);
	cudaEventDestroy(ev);
	return rc;
}

const struct ds_comm_ops ds_comm_nccl_ops = {
	.name = "nccl",
	.allreduce = n_allreduce,
	.reduce_scatter = n_reduce_scatter,
	.allgather = n_allgather,
	.broadcast = n_broadcast,
	.barrier = n_barrier,
	.iallreduce = n_iallreduce,
	.ireduce_scatter = n_ireduce_scatter,
	.iallgather = n_iallgather,
	.wait = n_wait,
	.test = n_test,
};

/* ---- set-up and tear-down ----------------------------------------------- */

static int make_id(void *id, size_t n, void *ctx, struct ds_err *err)
{
	ncclUniqueId u;
	(void)ctx;
	DS_NCCL_TRY(NULL, ncclGetUniqueId(&u), "ncclGetUniqueId");
	memcpy(id, &u, n < sizeof u ? n : sizeof u);
	return 0;
}

/* This rank's device, streams and events. */
static int local_setup(struct nccl_state *s, const struct ds_comm_devmem *dm, struct ds_err *err)
{
	s->es = (cudaStream_t)dm->stream;
	DS_CUDA_TRY(cudaSetDevice(dm->device), "cudaSetDevice");
	DS_CUDA_TRY(cudaStreamCreateWithFlags(&s->cs, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	DS_CUDA_TRY(cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming), "cudaEventCreateWithFlags");
	DS_CUDA_TRY(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
	return 0;
}

static void local_free(struct nccl_state *s)
{
	if (s->done)
		cudaEventDestroy(s->done);
	if (s->ready)
		cudaEventDestroy(s->ready);
	if (s->cs)
		cudaStreamDestroy(s->cs);
	free(s);
}

int ds_comm_nccl_open(struct ds_comm *c, struct ds_err *err)
{
	struct nccl_state *s = calloc(1, sizeof *s);
	struct ds_err lerr = DS_ERR_INIT;
	ncclUniqueId id;
	int local_ok, rc;

	if (!s)
		return ds_err_set(err, DS_ENOMEM, "out of memory for the NCCL communicator");
	local_ok = local_setup(s, &c->dev->dm, &lerr) == 0;
	/* no rank reaches ncclCommInitRank unless every rank can: it would wait
	 * there for the missing one */
	if ((rc = ds_comm_share_id(c, local_ok, &lerr, make_id, NULL, &id, sizeof id, err)) < 0)
		goto fail;
	{
		ncclResult_t nr = ncclCommInitRank(&s->comm, c->size, id, c->rank);
		if (nr != ncclSuccess) {
			nccl_fail(&lerr, NULL, nr, "ncclCommInitRank", __FILE__, __LINE__);
			s->comm = NULL;
		}
		if (!ds_comm_agree(c, nr == ncclSuccess, err)) {
			if (s->comm)
				ncclCommAbort(s->comm);
			rc = nr != ncclSuccess ? ds_err_set(err, DS_EIO, "%s", lerr.msg)
					       : ds_err_set(err, DS_EIO, "ncclCommInitRank failed on another rank");
			goto fail;
		}
	}
	c->dev->nccl = s;
	return 0;
fail:
	local_free(s);
	return rc;
}

void ds_comm_nccl_close(struct ds_comm *c)
{
	struct nccl_state *s = state(c);
	if (!s)
		return;
	if (s->comm && s->failed) {
		ncclCommAbort(s->comm); /* a peer may be gone: do not wait for it */
	} else if (s->comm) {
		cudaStreamSynchronize(s->cs);
		ncclCommDestroy(s->comm);
	}
	local_free(s);
	c->dev->nccl = NULL;
}

/* The job is going down: stop what NCCL has in flight without waiting for
 * peers that may be gone.  The host backend's abort follows. */
void ds_comm_nccl_abort(struct ds_comm *c)
{
	struct nccl_state *s = state(c);
	if (s && s->comm) {
		ncclCommAbort(s->comm);
		s->comm = NULL;
	}
}
