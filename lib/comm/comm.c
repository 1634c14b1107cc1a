/* comm.c - backend selection, timing for the comms logger, and the `self`
 * backend (world of one: every collective is a copy or nothing).  Each
 * wrapper hands its call to the table ds_comm_route picks: the host backend,
 * or for device buffers the device path (comm_dev.c). */
#include "comm/comm_int.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/mem.h"
#include "util/timer.h"

size_t ds_dtype_size(int dtype)
{
	switch (dtype) {
	case DS_F32: case DS_I32: return 4;
	case DS_F64: case DS_I64: return 8;
	case DS_F16: case DS_BF16: return 2;
	default: return 1;
	}
}

const char *ds_dtype_name(int dtype)
{
	static const char *n[] = { "fp32", "fp64", "int64", "int32", "uint8", "fp16", "bf16" };
	return dtype >= 0 && dtype <= DS_BF16 ? n[dtype] : "?";
}

static int env_int(const char *a, const char *b, int dflt)
{
	const char *v = getenv(a);
	if (!v && b)
		v = getenv(b);
	return v ? atoi(v) : dflt;
}

int ds_comm_mpi_launched(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") ||
	       getenv("SLURM_STEP_ID") || getenv("PMI_SIZE");
}

int ds_comm_create(struct ds_comm **out, const char *backend, struct ds_err *err)
{
	const struct ds_comm_ops *ops;
	if (!backend || !strcmp(backend, "auto"))
		ops = (ds_comm_mpi_built && ds_comm_mpi_launched()) ? &ds_comm_mpi_ops : &ds_comm_self_ops;
	else if (!strcmp(backend, "self"))
		ops = &ds_comm_self_ops;
	else if (!strcmp(backend, "mpi"))
		ops = &ds_comm_mpi_ops;
	else
		return ds_err_set(err, DS_EINVAL, "unknown communicator backend '%s' (self, mpi, auto)", backend);
	struct ds_comm *c = calloc(1, sizeof *c);
	if (!c)
		return ds_err_set(err, DS_ENOMEM, "out of memory creating the communicator");
	c->ops = ops;
	c->rank = 0;
	c->size = 1;
	gethostname(c->host, sizeof c->host - 1);
	int rc = ops->init(c, err);
	if (rc < 0) {
		free(c);
		return rc;
	}
	c->local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", 0);
	c->nodes = env_int("SLURM_NNODES", "SLURM_JOB_NUM_NODES", 1);
	*out = c;
	return 0;
}

void ds_comm_destroy(struct ds_comm *c)
{
	if (!c)
		return;
	ds_comm_dev_free(c);
	if (c->ops->fini)
		c->ops->fini(c);
	free(c);
}

int ds_comm_rank(const struct ds_comm *c) { return c->rank; }
int ds_comm_size(const struct ds_comm *c) { return c->size; }
int ds_comm_local_rank(const struct ds_comm *c) { return c->local_rank; }
int ds_comm_num_nodes(const struct ds_comm *c) { return c->nodes; }
/* the device path's name when it is not the host backend staging */
const char *ds_comm_backend(const struct ds_comm *c)
{
	return c->dops && c->dops != &ds_comm_staged_ops ? c->dops->name : c->ops->name;
}
const char *ds_comm_hostname(const struct ds_comm *c) { return c->host; }

void ds_comm_set_logger(struct ds_comm *c, ds_comm_log_fn fn, void *ctx)
{
	c->log_fn = fn;
	c->log_ctx = ctx;
}

int ds_comm_split(struct ds_comm *c, int color, int key, struct ds_comm **out, struct ds_err *err)
{
	*out = NULL;
	if (color < 0)
		return ds_err_set(err, DS_EINVAL, "communicator split: color %d must be >= 0", color);
	if (!c->ops->split)
		return ds_err_set(err, DS_ENOTSUP, "the %s communicator cannot split into groups", c->ops->name);
	struct ds_comm *s = calloc(1, sizeof *s);
	if (!s)
		return ds_err_set(err, DS_ENOMEM, "out of memory splitting the communicator");
	*s = *c;
	s->log_fn = NULL;
	s->log_ctx = NULL;
	s->priv = NULL;
	s->dops = NULL;   /* host buffers until ds_comm_set_devmem on the group */
	s->dev = NULL;
	s->parent = c;
	int rc = c->ops->split(c, color, key, s, err);
	if (rc < 0) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* what this process is blocked in, for the hang watchdog */
static _Atomic(const char *) cur_op;
static atomic_ullong ops_done;
const char *ds_comm_current_op(void) { return atomic_load(&cur_op); }
unsigned long long ds_comm_ops_done(void) { return atomic_load(&ops_done); }
static void op_enter(const char *op) { atomic_store(&cur_op, op); }
static void op_leave(void) { atomic_store(&cur_op, NULL); atomic_fetch_add(&ops_done, 1); }

/* c or the communicator it was split from has a logger */
static int has_logger(const struct ds_comm *c)
{
	while (c->parent && !c->log_fn)
		c = c->parent;
	return c->log_fn != NULL;
}

static void log_op(struct ds_comm *c, const char *op, const char *caller, size_t bytes, double t0, double t1)
{
	while (c->parent && !c->log_fn)  /* a group reports to its parent's logger */
		c = c->parent;
	if (c->log_fn) {
		struct ds_comm_record r = { op, bytes, (t1 > 0 ? t1 : ds_now()) - t0, caller };
		c->log_fn(c->log_ctx, &r);
	}
}

/* The wrappers time each call for the logger.  Message sizes follow
 * DeepSpeed's comms logger, which measures the tensor argument each rank
 * passes in: the whole input of reduce_scatter, this rank's block of
 * all_gather (comm.h, struct ds_comm_record). */
#define TIMED(opname, bytes, call)                                  \
	do {                                                        \
		double t0_ = has_logger(c) ? ds_now() : 0;          \
		op_enter(opname);                                   \
		int rc_ = (call);                                   \
		op_leave();                                         \
		if (rc_ == 0)                                       \
			log_op(c, opname, caller, bytes, t0_, 0);   \
		return rc_;                                         \
	} while (0)

int ds_comm_allreduce_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int op,
			 struct ds_err *err)
{
	TIMED("all_reduce", count * ds_dtype_size(dtype), ds_comm_route(c, buf, NULL)->allreduce(c, buf, count, dtype, op, err));
}

int ds_comm_reduce_scatter_at(const char *caller, struct ds_comm *c, const void *send, void *recv,
			      size_t recvcount, int dtype, int op, struct ds_err *err)
{
	TIMED("reduce_scatter", recvcount * c->size * ds_dtype_size(dtype),
	      ds_comm_route(c, send, recv)->reduce_scatter(c, send, recv, recvcount, dtype, op, err));
}

int ds_comm_allgather_at(const char *caller, struct ds_comm *c, const void *send, void *recv, size_t sendcount,
			 int dtype, struct ds_err *err)
{
	TIMED("all_gather", sendcount * ds_dtype_size(dtype),
	      ds_comm_route(c, send, recv)->allgather(c, send, recv, sendcount, dtype, err));
}

int ds_comm_broadcast_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int root,
			 struct ds_err *err)
{
	TIMED("broadcast", count * ds_dtype_size(dtype), ds_comm_route(c, buf, NULL)->broadcast(c, buf, count, dtype, root, err));
}

int ds_comm_barrier_at(const char *caller, struct ds_comm *c, struct ds_err *err)
{
	TIMED("barrier", 0, c->ops->barrier(c, err));
}

int ds_comm_alltoall_at(const char *caller, struct ds_comm *c, const void *send, void *recv, size_t count,
			int dtype, struct ds_err *err)
{
	const struct ds_comm_ops *ops = ds_comm_route(c, send, recv);
	if (!ops->alltoall)
		return ds_err_set(err, DS_ENOTSUP, "the %s communicator has no all_to_all", ops->name);
	TIMED("all_to_all_single", count * c->size * ds_dtype_size(dtype),
	      ops->alltoall(c, send, recv, count, dtype, err));
}

static int check_peer(const struct ds_comm *c, int peer, const char *op, struct ds_err *err)
{
	if (peer < 0 || peer >= c->size || peer == c->rank)
		return ds_err_set(err, DS_EINVAL, "%s: peer %d is not another rank of this group of %d (rank %d)", op,
				  peer, c->size, c->rank);
	if (!c->ops->send)
		return ds_err_set(err, DS_ENOTSUP, "the %s communicator has no point-to-point operations", c->ops->name);
	return 0;
}

/* point to point moves host buffers through the host backend (the device
 * path of ds_comm_set_devmem covers the collectives) */
int ds_comm_send_at(const char *caller, struct ds_comm *c, const void *buf, size_t count, int dtype, int peer,
		    int tag, struct ds_err *err)
{
	DS_TRY(check_peer(c, peer, "send", err));
	TIMED("send", count * ds_dtype_size(dtype), c->ops->send(c, buf, count, dtype, peer, tag, err));
}

int ds_comm_recv_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int peer, int tag,
		    struct ds_err *err)
{
	DS_TRY(check_peer(c, peer, "recv", err));
	TIMED("recv", count * ds_dtype_size(dtype), c->ops->recv(c, buf, count, dtype, peer, tag, err));
}

static int start_req(struct ds_comm_req **req, const struct ds_comm_ops *ops, const char *op, const char *caller,
		     size_t bytes, struct ds_err *err)
{
	*req = calloc(1, sizeof **req);
	if (!*req)
		return ds_err_set(err, DS_ENOMEM, "out of memory for a communication request");
	(*req)->ops = ops;
	(*req)->op = op;
	(*req)->caller = caller;
	(*req)->bytes = bytes;
	(*req)->t0 = ds_now();
	return 0;
}

#define START(ops, opname, bytes, call)                                  \
	do {                                                             \
		const struct ds_comm_ops *o_ = (ops);                    \
		DS_TRY(start_req(req, o_, opname, caller, bytes, err));  \
		int rc_ = (call);                                        \
		if (rc_ < 0) {                                      \
			free(*req);                                 \
			*req = NULL;                                \
		}                                                   \
		return rc_;                                         \
	} while (0)

int ds_comm_iallreduce_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int op,
			  struct ds_comm_req **req, struct ds_err *err)
{
	START(ds_comm_route(c, buf, NULL), "all_reduce", count * ds_dtype_size(dtype),
	      o_->iallreduce(c, buf, count, dtype, op, *req, err));
}

int ds_comm_ireduce_scatter_at(const char *caller, struct ds_comm *c, const void *send, void *recv,
			       size_t recvcount, int dtype, int op, struct ds_comm_req **req, struct ds_err *err)
{
	START(ds_comm_route(c, send, recv), "reduce_scatter", recvcount * c->size * ds_dtype_size(dtype),
	      o_->ireduce_scatter(c, send, recv, recvcount, dtype, op, *req, err));
}

int ds_comm_iallgather_at(const char *caller, struct ds_comm *c, const void *send, void *recv, size_t sendcount,
			  int dtype, struct ds_comm_req **req, struct ds_err *err)
{
	START(ds_comm_route(c, send, recv), "all_gather", sendcount * ds_dtype_size(dtype),
	      o_->iallgather(c, send, recv, sendcount, dtype, *req, err));
}

int ds_comm_isend_at(const char *caller, struct ds_comm *c, const void *buf, size_t count, int dtype, int peer,
		     int tag, struct ds_comm_req **req, struct ds_err *err)
{
	*req = NULL;
	DS_TRY(check_peer(c, peer, "isend", err));
	START(c->ops, "isend", count * ds_dtype_size(dtype), o_->isend(c, buf, count, dtype, peer, tag, *req, err));
}

int ds_comm_irecv_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int peer, int tag,
		     struct ds_comm_req **req, struct ds_err *err)
{
	*req = NULL;
	DS_TRY(check_peer(c, peer, "irecv", err));
	START(c->ops, "irecv", count * ds_dtype_size(dtype), o_->irecv(c, buf, count, dtype, peer, tag, *req, err));
}

int ds_comm_wait(struct ds_comm *c, struct ds_comm_req *req, struct ds_err *err)
{
	if (!req)
		return 0;
	op_enter(req->op);
	int rc = req->ops->wait(c, req, err);
	op_leave();
	if (rc == 0)
		log_op(c, req->op, req->caller, req->bytes, req->t0, req->t_done);
	free(req);
	return rc;
}

int ds_comm_test(struct ds_comm *c, struct ds_comm_req *req, int *done, struct ds_err *err)
{
	*done = 1;
	if (!req || req->t_done > 0)
		return 0;
	DS_TRY(req->ops->test(c, req, done, err));
	if (*done)
		req->t_done = ds_now();
	return 0;
}

void ds_comm_abort(struct ds_comm *c, int code)
{
	if (!c)
		return;
	ds_comm_dev_abort(c);
	if (c->ops->abort)
		c->ops->abort(c, code);
}

/* ---- self: a world of one ---------------------------------------------- */

static int self_init(struct ds_comm *c, struct ds_err *err) { return 0; }

static int self_allreduce(struct ds_comm *c, void *buf, size_t count, int dtype, int op, struct ds_err *err)
{
	return 0;
}

static int self_reduce_scatter(struct ds_comm *c, const void *send, void *recv, size_t recvcount,
			       int dtype, int op, struct ds_err *err)
{
	if (send != recv)
		memmove(recv, send, recvcount * ds_dtype_size(dtype));
	return 0;
}

static int self_allgather(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			  struct ds_err *err)
{
	if (send != recv)
		memmove(recv, send, sendcount * ds_dtype_size(dtype));
	return 0;
}

static int self_broadcast(struct ds_comm *c, void *buf, size_t count, int dtype, int root, struct ds_err *err)
{
	if (root != 0)
		return ds_err_set(err, DS_EINVAL, "broadcast root %d out of range (world size 1)", root);
	return 0;
}

static int self_barrier(struct ds_comm *c, struct ds_err *err) { return 0; }

static int self_alltoall(struct ds_comm *c, const void *send, void *recv, size_t count, int dtype,
			 struct ds_err *err)
{
	memmove(recv, send, count * ds_dtype_size(dtype));
	return 0;
}

static int self_iallreduce(struct ds_comm *c, void *buf, size_t count, int dtype, int op,
			   struct ds_comm_req *req, struct ds_err *err)
{
	return 0;
}

static int self_ireduce_scatter(struct ds_comm *c, const void *send, void *recv, size_t recvcount,
				int dtype, int op, struct ds_comm_req *req, struct ds_err *err)
{
	return self_reduce_scatter(c, send, recv, recvcount, dtype, op, err);
}

static int self_iallgather(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			   struct ds_comm_req *req, struct ds_err *err)
{
	return self_allgather(c, send, recv, sendcount, dtype, err);
}

static int self_wait(struct ds_comm *c, struct ds_comm_req *req, struct ds_err *err) { return 0; }

static int self_test(struct ds_comm *c, struct ds_comm_req *req, int *done, struct ds_err *err)
{
	*done = 1;
	return 0;
}

/* a world of one splits into a world of one */
static int self_split(struct ds_comm *c, int color, int key, struct ds_comm *sub, struct ds_err *err)
{
	sub->rank = 0;
	sub->size = 1;
	return 0;
}

const struct ds_comm_ops ds_comm_self_ops = {
	.name = "self",
	.split = self_split,
	.init = self_init,
	.allreduce = self_allreduce,
	.reduce_scatter = self_reduce_scatter,
	.allgather = self_allgather,
	.broadcast = self_broadcast,
	.barrier = self_barrier,
	.alltoall = self_alltoall,
	.iallreduce = self_iallreduce,
	.ireduce_scatter = self_ireduce_scatter,
	.iallgather = self_iallgather,
	.wait = self_wait,
	.test = self_test,
};
