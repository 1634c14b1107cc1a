/* comm_mpi.c - the OpenMPI backend of the communicator.
 * MPI errors are returned, not fatal (MPI_ERRORS_RETURN), and translated at
 * this boundary with DS_MPI_TRY (STYLE rule 5).  fp16/bf16 reductions use
 * user-defined operations that add in fp32 and round once per element. */
#include "config.h"
#include "comm/comm_int.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "util/half.h"

const int ds_comm_mpi_built = 1;

struct mpi_state {
	MPI_Comm comm;
	int we_initialised;
	MPI_Op half_sum, bf16_sum;
};

#define DS_MPI_TRY(call, what)                                                            \
	do {                                                                              \
		int mrc_ = (call);                                                        \
		if (mrc_ != MPI_SUCCESS) {                                                \
			char s_[MPI_MAX_ERROR_STRING];                                    \
			int n_ = 0;                                                       \
			MPI_Error_string(mrc_, s_, &n_);                                  \
			return ds_err_set(err, DS_EIO, "%s failed (%s:%d): %s", what, __FILE__, \
					  __LINE__, s_);                                  \
		}                                                                         \
	} while (0)

/* inout += in, 16-bit (util/half.h's sum: fp32 sums rounded once) */
static void fp16_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	ds_half_sum_n(DS_HALF_FP16, inout, in, (size_t)*len);
}

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	ds_half_sum_n(DS_HALF_BF16, inout, in, (size_t)*len);
}

static MPI_Datatype mpi_type(int dtype)
{
	switch (dtype) {
	case DS_F32: return MPI_FLOAT;
	case DS_F64: return MPI_DOUBLE;
	case DS_I64: return MPI_INT64_T;
	case DS_I32: return MPI_INT32_T;
	case DS_F16: case DS_BF16: return MPI_UINT16_T;
	default: return MPI_UINT8_T;
	}
}

static int mpi_op(struct mpi_state *s, int dtype, int op, MPI_Op *out, struct ds_err *err)
{
	if (dtype == DS_F16 || dtype == DS_BF16) {
		if (op != DS_SUM)
			return ds_err_set(err, DS_EINVAL, "only sum is supported for %s reductions",
					  ds_dtype_name(dtype));
		*out = dtype == DS_F16 ? s->half_sum : s->bf16_sum;
		return 0;
	}
	*out = op == DS_MAX ? MPI_MAX : op == DS_MIN ? MPI_MIN : MPI_SUM;
	return 0;
}

/* MPI counts are int: refuse what does not fit rather than truncate. */
#define CHECK_COUNT(n)                                                                     \
	do {                                                                               \
		if ((n) > (size_t)0x7fffffff)                                              \
			return ds_err_set(err, DS_EINVAL, "collective of %zu elements exceeds MPI's int count", \
					  (size_t)(n));                                    \
	} while (0)

static int m_init(struct ds_comm *c, struct ds_err *err)
{
	struct mpi_state *s = calloc(1, sizeof *s);
	int inited = 0, provided;
	if (!s)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	c->priv = s;
	MPI_Initialized(&inited);
	if (!inited) {
		if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
			free(s);
			return ds_err_set(err, DS_EIO, "MPI_Init_thread failed");
		}
		s->we_initialised = 1;
	}
	MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
	MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(s->comm, &c->rank);
	MPI_Comm_size(s->comm, &c->size);
	MPI_Op_create(fp16_sum, 1, &s->half_sum);
	MPI_Op_create(bf16_sum, 1, &s->bf16_sum);
	return 0;
}

static void m_fini(struct ds_comm *c)
{
	struct mpi_state *s = c->priv;
	if (!s)
		return;
	MPI_Op_free(&s->half_sum);
	MPI_Op_free(&s->bf16_sum);
	MPI_Comm_free(&s->comm);
	if (s->we_initialised)
		MPI_Finalize();
	free(s);
}

static int m_allreduce(struct ds_comm *c, void *buf, size_t count, int dtype, int op, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	MPI_Op o;
	CHECK_COUNT(count);
	DS_TRY(mpi_op(s, dtype, op, &o, err));
	DS_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dtype), o, s->comm), "MPI_Allreduce");
	return 0;
}

static int m_reduce_scatter(struct ds_comm *c, const void *send, void *recv, size_t recvcount,
			    int dtype, int op, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	MPI_Op o;
	CHECK_COUNT(recvcount * c->size);
	DS_TRY(mpi_op(s, dtype, op, &o, err));
	DS_MPI_TRY(MPI_Reduce_scatter_block(send, recv, (int)recvcount, mpi_type(dtype), o, s->comm),
		   "MPI_Reduce_scatter_block");
	return 0;
}

static int m_allgather(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
		       struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	MPI_Datatype t = mpi_type(dtype);
	CHECK_COUNT(sendcount * c->size);
	/* in place when send is this rank's block of recv */
	const void *sb = send == (const char *)recv + (size_t)c->rank * sendcount * ds_dtype_size(dtype)
				 ? MPI_IN_PLACE : send;
	DS_MPI_TRY(MPI_Allgather(sb, (int)sendcount, t, recv, (int)sendcount, t, s->comm), "MPI_Allgather");
	return 0;
}

static int m_broadcast(struct ds_comm *c, void *buf, size_t count, int dtype, int root, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	CHECK_COUNT(count);
	DS_MPI_TRY(MPI_Bcast(buf, (int)count, mpi_type(dtype), root, s->comm), "MPI_Bcast");
	return 0;
}

static int m_barrier(struct ds_comm *c, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	DS_MPI_TRY(MPI_Barrier(s->comm), "MPI_Barrier");
	return 0;
}

static int m_alltoall(struct ds_comm *c, const void *send, void *recv, size_t count, int dtype,
		      struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	MPI_Datatype t = mpi_type(dtype);
	CHECK_COUNT(count * c->size);
	DS_MPI_TRY(MPI_Alltoall(send, (int)count, t, recv, (int)count, t, s->comm), "MPI_Alltoall");
	return 0;
}

static MPI_Request *req_of(struct ds_comm_req *r)
{
	return (MPI_Request *)r->inline_buf;
}

static int m_iallreduce(struct ds_comm *c, void *buf, size_t count, int dtype, int op,
			struct ds_comm_req *req, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	MPI_Op o;
	CHECK_COUNT(count);
	DS_TRY(mpi_op(s, dtype, op, &o, err));
	DS_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dtype), o, s->comm, req_of(req)),
		   "MPI_Iallreduce");
	return 0;
}

static int m_ireduce_scatter(struct ds_comm *c, const void *send, void *recv, size_t recvcount,
			     int dtype, int op, struct ds_comm_req *req, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	MPI_Op o;
	CHECK_COUNT(recvcount * c->size);
	DS_TRY(mpi_op(s, dtype, op, &o, err));
	DS_MPI_TRY(MPI_Ireduce_scatter_block(send, recv, (int)recvcount, mpi_type(dtype), o, s->comm,
					     req_of(req)), "MPI_Ireduce_scatter_block");
	return 0;
}

static int m_iallgather(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			struct ds_comm_req *req, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	MPI_Datatype t = mpi_type(dtype);
	CHECK_COUNT(sendcount * c->size);
	const void *sb = send == (const char *)recv + (size_t)c->rank * sendcount * ds_dtype_size(dtype)
				 ? MPI_IN_PLACE : send;
	DS_MPI_TRY(MPI_Iallgather(sb, (int)sendcount, t, recv, (int)sendcount, t, s->comm, req_of(req)),
		   "MPI_Iallgather");
	return 0;
}

static int m_wait(struct ds_comm *c, struct ds_comm_req *req, struct ds_err *err)
{
	DS_MPI_TRY(MPI_Wait(req_of(req), MPI_STATUS_IGNORE), "MPI_Wait");
	return 0;
}

static int m_test(struct ds_comm *c, struct ds_comm_req *req, int *done, struct ds_err *err)
{
	/* a finished request becomes MPI_REQUEST_NULL, which MPI_Wait accepts */
	DS_MPI_TRY(MPI_Test(req_of(req), done, MPI_STATUS_IGNORE), "MPI_Test");
	return 0;
}

/* a group: its own MPI communicator and reduction ops; MPI stays the
 * world communicator's to finalise */
static int m_split(struct ds_comm *c, int color, int key, struct ds_comm *sub, struct ds_err *err)
{
	struct mpi_state *s = c->priv, *n = calloc(1, sizeof *n);
	if (!n)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	int mrc = MPI_Comm_split(s->comm, color, key, &n->comm);
	if (mrc != MPI_SUCCESS) {
		free(n);
		DS_MPI_TRY(mrc, "MPI_Comm_split");
	}
	MPI_Comm_set_errhandler(n->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(n->comm, &sub->rank);
	MPI_Comm_size(n->comm, &sub->size);
	MPI_Op_create(fp16_sum, 1, &n->half_sum);
	MPI_Op_create(bf16_sum, 1, &n->bf16_sum);
	sub->priv = n;
	return 0;
}

static int m_send(struct ds_comm *c, const void *buf, size_t count, int dtype, int peer, int tag,
		  struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	CHECK_COUNT(count);
	DS_MPI_TRY(MPI_Send(buf, (int)count, mpi_type(dtype), peer, tag, s->comm), "MPI_Send");
	return 0;
}

static int m_recv(struct ds_comm *c, void *buf, size_t count, int dtype, int peer, int tag, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	CHECK_COUNT(count);
	DS_MPI_TRY(MPI_Recv(buf, (int)count, mpi_type(dtype), peer, tag, s->comm, MPI_STATUS_IGNORE), "MPI_Recv");
	return 0;
}

static int m_isend(struct ds_comm *c, const void *buf, size_t count, int dtype, int peer, int tag,
		   struct ds_comm_req *req, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	CHECK_COUNT(count);
	DS_MPI_TRY(MPI_Isend(buf, (int)count, mpi_type(dtype), peer, tag, s->comm, req_of(req)), "MPI_Isend");
	return 0;
}

static int m_irecv(struct ds_comm *c, void *buf, size_t count, int dtype, int peer, int tag,
		   struct ds_comm_req *req, struct ds_err *err)
{
	struct mpi_state *s = c->priv;
	CHECK_COUNT(count);
	DS_MPI_TRY(MPI_Irecv(buf, (int)count, mpi_type(dtype), peer, tag, s->comm, req_of(req)), "MPI_Irecv");
	return 0;
}

static void m_abort(struct ds_comm *c, int code)
{
	struct mpi_state *s = c->priv;
	MPI_Abort(s ? s->comm : MPI_COMM_WORLD, code);
}

const void *ds_comm_mpi_handle(const struct ds_comm *c)
{
	const struct mpi_state *s = c && c->ops == &ds_comm_mpi_ops ? c->priv : NULL;
	return s ? &s->comm : NULL;
}

const struct ds_comm_ops ds_comm_mpi_ops = {
	.name = "mpi",
	.init = m_init,
	.fini = m_fini,
	.allreduce = m_allreduce,
	.reduce_scatter = m_reduce_scatter,
	.allgather = m_allgather,
	.broadcast = m_broadcast,
	.barrier = m_barrier,
	.alltoall = m_alltoall,
	.iallreduce = m_iallreduce,
	.ireduce_scatter = m_ireduce_scatter,
	.iallgather = m_iallgather,
	.wait = m_wait,
	.test = m_test,
	.abort = m_abort,
	.split = m_split,
	.send = m_send,
	.recv = m_recv,
	.isend = m_isend,
	.irecv = m_irecv,
};
