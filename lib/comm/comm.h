/* comm.h - a communicator with collective operations.
 *
 * Backends (one ops table each): `self` (one process, no MPI; always built)
 * and `mpi` (OpenMPI; compiled in when configure found it, else a stub that
 * says how to enable it).  Rank and world size come from the backend;
 * OMPI_COMM_WORLD_* / SLURM_* variables are read only for information
 * (local rank, node count) shown in logs.  Every operation works in place or
 * on caller buffers and returns 0 or a DS_E* code with err filled.
 */
#ifndef DS_COMM_COMM_H
#define DS_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum ds_dtype { DS_F32 = 0, DS_F64, DS_I64, DS_I32, DS_U8, DS_F16, DS_BF16 };
enum ds_redop { DS_SUM = 0, DS_MAX, DS_MIN };

/* Size in bytes of one element of dtype. */
size_t ds_dtype_size(int dtype);
const char *ds_dtype_name(int dtype);

struct ds_comm;
struct ds_comm_req;

/* Operations a backend provides (STYLE rule 12); NULL where not supported. */
struct ds_comm_ops {
	const char *name;
	int (*init)(struct ds_comm *c, struct ds_err *err);
	void (*fini)(struct ds_comm *c);
	int (*allreduce)(struct ds_comm *c, void *buf, size_t count, int dtype, int op, struct ds_err *err);
	int (*reduce_scatter)(struct ds_comm *c, const void *send, void *recv, size_t recvcount,
			      int dtype, int op, struct ds_err *err);
	int (*allgather)(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			 struct ds_err *err);
	int (*broadcast)(struct ds_comm *c, void *buf, size_t count, int dtype, int root, struct ds_err *err);
	int (*barrier)(struct ds_comm *c, struct ds_err *err);
	int (*alltoall)(struct ds_comm *c, const void *send, void *recv, size_t count, int dtype, struct ds_err *err);
	/* non-blocking variants: start and return a request, finished by wait */
	int (*iallreduce)(struct ds_comm *c, void *buf, size_t count, int dtype, int op,
			  struct ds_comm_req *req, struct ds_err *err);
	int (*ireduce_scatter)(struct ds_comm *c, const void *send, void *recv, size_t recvcount,
			       int dtype, int op, struct ds_comm_req *req, struct ds_err *err);
	int (*iallgather)(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			  struct ds_comm_req *req, struct ds_err *err);
	int (*wait)(struct ds_comm *c, struct ds_comm_req *req, struct ds_err *err);
	/* *done = 1 when req has finished (it stays valid until wait) */
	int (*test)(struct ds_comm *c, struct ds_comm_req *req, int *done, struct ds_err *err);
	void (*abort)(struct ds_comm *c, int code);
	/* sub-communicators and point to point (3D parallelism): split fills
	 * sub's rank, size and priv; send/recv block, isend/irecv start */
	int (*split)(struct ds_comm *c, int color, int key, struct ds_comm *sub, struct ds_err *err);
	int (*send)(struct ds_comm *c, const void *buf, size_t count, int dtype, int peer, int tag,
		    struct ds_err *err);
	int (*recv)(struct ds_comm *c, void *buf, size_t count, int dtype, int peer, int tag, struct ds_err *err);
	int (*isend)(struct ds_comm *c, const void *buf, size_t count, int dtype, int peer, int tag,
		     struct ds_comm_req *req, struct ds_err *err);
	int (*irecv)(struct ds_comm *c, void *buf, size_t count, int dtype, int peer, int tag,
		     struct ds_comm_req *req, struct ds_err *err);
};

/* One record per finished collective, for the comms logger.  op is
 * DeepSpeed's op name ("all_reduce", "reduce_scatter", "all_gather",
 * "broadcast", "barrier", "all_to_all_single", and point to point "send",
 * "recv", "isend", "irecv"); bytes DeepSpeed's message size, the tensor
 * each rank passes in (all_reduce, broadcast: the buffer; reduce_scatter,
 * all_to_all_single: the whole input, group size x count; all_gather: this
 * rank's block; send, recv: the message); seconds
 * from the call to its completion (non-blocking: to the first test or wait
 * that saw it finished); caller the function that issued it. */
struct ds_comm_record { const char *op; size_t bytes; double seconds; const char *caller; };
typedef void (*ds_comm_log_fn)(void *ctx, const struct ds_comm_record *rec);

/* Create a communicator.  backend: "self", "mpi" or "auto" (mpi when this
 * process was started by mpirun/srun and MPI is built in, else self).
 * Returns DS_ENOTSUP naming --with-mpi when "mpi" is asked of a build
 * without it.  Destroy with ds_comm_destroy (finalises MPI). */
int ds_comm_create(struct ds_comm **out, const char *backend, struct ds_err *err);
void ds_comm_destroy(struct ds_comm *c);

int ds_comm_rank(const struct ds_comm *c);
int ds_comm_size(const struct ds_comm *c);
int ds_comm_local_rank(const struct ds_comm *c);  /* from the launcher's env, 0 if unknown */
int ds_comm_num_nodes(const struct ds_comm *c);   /* from SLURM_/OMPI_ env, 1 if unknown */
const char *ds_comm_backend(const struct ds_comm *c);
const char *ds_comm_hostname(const struct ds_comm *c);

/* Called after every blocking collective (and every wait) with its size and
 * latency; NULL turns it off.  lib/driver feeds the comms logger of
 * lib/monitor (comms.h) from here.  A sub-communicator (ds_comm_split)
 * reports to the logger of the communicator it was split from, so one
 * logger sees every group's operations. */
void ds_comm_set_logger(struct ds_comm *c, ds_comm_log_fn fn, void *ctx);

/* Process groups (3D parallelism, lib/comm/topo.h): the ranks of c that
 * pass the same color form one sub-communicator, ordered by key then by
 * rank in c (MPI_Comm_split).  Collective over c.  *out is destroyed with
 * ds_comm_destroy before c is; the self backend gives a world of one.
 * Returns 0, DS_EINVAL (color < 0), DS_ENOMEM or the backend's error. */
int ds_comm_split(struct ds_comm *c, int color, int key, struct ds_comm **out, struct ds_err *err);

/* Collectives.  count / recvcount / sendcount are in elements.
 * allreduce: in place.  reduce_scatter: send holds size*recvcount elements,
 * rank r receives the reduction of block r.  allgather: recv holds
 * size*sendcount, block r from rank r.  broadcast: in place from root.
 * Each ds_comm_X is a macro that passes the calling function's name to
 * ds_comm_X_at (the caller that comms_logger.debug shows). */
int ds_comm_allreduce_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int op,
			 struct ds_err *err);
int ds_comm_reduce_scatter_at(const char *caller, struct ds_comm *c, const void *send, void *recv,
			      size_t recvcount, int dtype, int op, struct ds_err *err);
int ds_comm_allgather_at(const char *caller, struct ds_comm *c, const void *send, void *recv, size_t sendcount,
			 int dtype, struct ds_err *err);
int ds_comm_broadcast_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int root,
			 struct ds_err *err);
int ds_comm_barrier_at(const char *caller, struct ds_comm *c, struct ds_err *err);
/* All-to-all of equal blocks (DeepSpeed's all_to_all_single): send holds
 * size*count elements, block r going to rank r; recv block r comes from
 * rank r.  send and recv must not overlap. */
int ds_comm_alltoall_at(const char *caller, struct ds_comm *c, const void *send, void *recv, size_t count,
			int dtype, struct ds_err *err);
#define ds_comm_allreduce(...) ds_comm_allreduce_at(__func__, __VA_ARGS__)
#define ds_comm_reduce_scatter(...) ds_comm_reduce_scatter_at(__func__, __VA_ARGS__)
#define ds_comm_allgather(...) ds_comm_allgather_at(__func__, __VA_ARGS__)
#define ds_comm_broadcast(...) ds_comm_broadcast_at(__func__, __VA_ARGS__)
#define ds_comm_barrier(...) ds_comm_barrier_at(__func__, __VA_ARGS__)
#define ds_comm_alltoall(...) ds_comm_alltoall_at(__func__, __VA_ARGS__)

/* Point to point (pipeline parallelism): count elements to or from rank
 * peer of c, matched by tag.  send returns once buf may be reused, recv
 * once buf holds the message (MPI_Send, MPI_Recv); isend/irecv start the
 * transfer and ds_comm_wait ends it.  The comms logger records them as
 * DeepSpeed's "send", "recv", "isend", "irecv".  DS_EINVAL for peer
 * outside the group or equal to this rank (the self backend has no peer). */
int ds_comm_send_at(const char *caller, struct ds_comm *c, const void *buf, size_t count, int dtype, int peer,
		    int tag, struct ds_err *err);
int ds_comm_recv_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int peer, int tag,
		    struct ds_err *err);
#define ds_comm_send(...) ds_comm_send_at(__func__, __VA_ARGS__)
#define ds_comm_recv(...) ds_comm_recv_at(__func__, __VA_ARGS__)

/* Non-blocking: *req is allocated by the call and freed by ds_comm_wait. */
int ds_comm_iallreduce_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int op,
			  struct ds_comm_req **req, struct ds_err *err);
int ds_comm_ireduce_scatter_at(const char *caller, struct ds_comm *c, const void *send, void *recv,
			       size_t recvcount, int dtype, int op, struct ds_comm_req **req, struct ds_err *err);
int ds_comm_iallgather_at(const char *caller, struct ds_comm *c, const void *send, void *recv, size_t sendcount,
			  int dtype, struct ds_comm_req **req, struct ds_err *err);
#define ds_comm_iallreduce(...) ds_comm_iallreduce_at(__func__, __VA_ARGS__)
#define ds_comm_ireduce_scatter(...) ds_comm_ireduce_scatter_at(__func__, __VA_ARGS__)
#define ds_comm_iallgather(...) ds_comm_iallgather_at(__func__, __VA_ARGS__)
int ds_comm_isend_at(const char *caller, struct ds_comm *c, const void *buf, size_t count, int dtype, int peer,
		     int tag, struct ds_comm_req **req, struct ds_err *err);
int ds_comm_irecv_at(const char *caller, struct ds_comm *c, void *buf, size_t count, int dtype, int peer, int tag,
		     struct ds_comm_req **req, struct ds_err *err);
#define ds_comm_isend(...) ds_comm_isend_at(__func__, __VA_ARGS__)
#define ds_comm_irecv(...) ds_comm_irecv_at(__func__, __VA_ARGS__)
int ds_comm_wait(struct ds_comm *c, struct ds_comm_req *req, struct ds_err *err);
/* Drive a started operation (MPI progresses non-blocking collectives only
 * inside MPI calls) and set *done to 1 when it has finished.  req stays
 * valid either way: ds_comm_wait still ends it (at once when done). */
int ds_comm_test(struct ds_comm *c, struct ds_comm_req *req, int *done, struct ds_err *err);

/* The MPI communicator behind c, for libraries that take one (parallel
 * HDF5): a pointer to its MPI_Comm, or NULL for the self backend and in a
 * build without MPI.  Borrowed; valid until ds_comm_destroy. */
const void *ds_comm_mpi_handle(const struct ds_comm *c);

/* For the hang watchdog (lib/driver/watchdog.c), safe from any thread: the
 * blocking collective (or wait) this process is in, NULL outside one, and
 * how many it has finished. */
const char *ds_comm_current_op(void);
unsigned long long ds_comm_ops_done(void);

/* Device buffers (issue 18).  When the engine runs on a GPU it calls
 * ds_comm_set_devmem once, before its first collective on device memory,
 * and then passes device buffers of dm->device to the collectives it runs
 * on device memory.  Each call is routed by where its buffers live
 * (dm->is_dev): host buffers (the driver's flags, the checkpoint's offsets,
 * the engine's norm sums) go to the host backend exactly as before; device
 * buffers take the device path chosen here, the same on every rank:
 *  - "nccl" when prefer_nccl allows it, NCCL is built in, and no two ranks
 *    of a host share a device (ds_comm_devpath_choose).  Rank 0 makes the
 *    NCCL unique id and the host backend broadcasts it (no MASTER_ADDR, no
 *    ssh).  Each collective waits for the work dm->stream holds when it is
 *    called and runs on a stream of the communicator's own;
 *  - else the host backend (mpi or self) STAGES each device buffer through
 *    pinned host memory (dm->host_alloc; buffers reused, grown to the
 *    largest message, freed by ds_comm_destroy) with dm's copy functions.
 *    Two ranks sharing one GPU (which NCCL refuses) and builds without NCCL
 *    take this path, so multi-rank runs are testable on one GPU.
 * A call whose buffers are partly host, partly device memory is staged.
 * ds_comm_backend() names the device path ("nccl", "mpi", "self"),
 * ds_comm_devpath_why() says why.  On device buffers a blocking collective
 * has finished when it returns, a non-blocking one when ds_comm_test says
 * so or ds_comm_wait returns; until then the engine leaves its buffers
 * alone.  The comms logger sees DeepSpeed's op names and the device bytes.
 *
 * dm is copied.  The copy functions return 0 or nonzero on failure and are
 * synchronous: they start after the work dm->stream holds and have finished
 * when they return.  host_alloc returns pinned host memory (NULL on
 * failure).  is_dev says whether p is device memory (pinned host memory is
 * not).  dev_id names the physical device, unique on its host (the PCI bus
 * id or UUID); empty, "cuda:<device>" stands for it, which per-rank
 * CUDA_VISIBLE_DEVICES makes look shared (then the staged path is taken).
 * prefer_nccl: DS_COMM_NCCL_NEVER, _AUTO (NCCL where it can be used; with
 * one rank the staged path, where nothing crosses), or _REQUIRE (NCCL or an
 * error: DS_ENOTSUP naming --with-cuda without NCCL, DS_EINVAL when ranks
 * share a device); memory NCCL cannot read (a simulated device) needs
 * _NEVER.  A collective: every rank calls it, and all return 0 or the same
 * DS_E* code. */
enum { DS_COMM_NCCL_NEVER = 0, DS_COMM_NCCL_AUTO = 1, DS_COMM_NCCL_REQUIRE = 2 };
struct ds_comm_devmem {
	int device;   /* CUDA ordinal this rank uses */
	void *stream; /* the engine's stream, cudaStream_t (NULL: the default stream) */
	int (*to_host)(void *host, const void *dev, size_t bytes, void *ctx);
	int (*to_dev)(void *dev, const void *host, size_t bytes, void *ctx);
	int (*dev_copy)(void *dst, const void *src, size_t bytes, void *ctx);
	void *(*host_alloc)(size_t bytes, void *ctx);
	void (*host_free)(void *p, void *ctx);
	int (*is_dev)(const void *p, void *ctx);
	void *ctx;
	char dev_id[64];
};
int ds_comm_set_devmem(struct ds_comm *c, const struct ds_comm_devmem *dm, int prefer_nccl,
		       struct ds_err *err);

/* The device path's choice as a pure function, the same on every rank:
 * keys holds world keys of DS_COMM_DEVKEY bytes, rank r's at r *
 * DS_COMM_DEVKEY ("host/device", ds_comm_devkey).  Returns
 * DS_COMM_PATH_NCCL or DS_COMM_PATH_STAGED with the reason in why (one
 * line), or a DS_E* code (prefer_nccl DS_COMM_NCCL_REQUIRE and NCCL cannot
 * be used) with err filled. */
#define DS_COMM_DEVKEY 136
enum { DS_COMM_PATH_STAGED = 0, DS_COMM_PATH_NCCL = 1 };
int ds_comm_devpath_choose(int nccl_built, int prefer_nccl, int world, const char *keys, char *why,
			   size_t whylen, struct ds_err *err);
/* out (DS_COMM_DEVKEY bytes): "host/dev_id", or "host/cuda:<device>" when
 * dev_id is NULL or empty. */
void ds_comm_devkey(char *out, const char *host, int device, const char *dev_id);
/* Why the device path is what it is: one line, "" before ds_comm_set_devmem. */
const char *ds_comm_devpath_why(const struct ds_comm *c);
/* Pinned host memory the staged path holds now, in bytes (on NCCL only
 * what calls mixing host and device buffers needed). */
size_t ds_comm_pinned_bytes(const struct ds_comm *c);
/* The pinned bytes the staged path holds for one call on device buffers in
 * a world of world ranks: op DS_COMM_ALLREDUCE (count), _REDUCE_SCATTER
 * (recvcount: the input and this rank's block), _ALLGATHER (sendcount: the
 * whole output) or _BROADCAST (count); 0 in a world of one, where nothing
 * is staged.  The memory plan adds one per call that may be in flight. */
enum { DS_COMM_ALLREDUCE, DS_COMM_REDUCE_SCATTER, DS_COMM_ALLGATHER, DS_COMM_BROADCAST };
size_t ds_comm_staged_bytes(int op, size_t count, int dtype, int world);
/* 1 when NCCL is compiled in (configure found CUDA and NCCL), else 0. */
int ds_comm_nccl_built(void);

/* The NCCL bootstrap over this communicator's host backend, with every
 * rank's verdict agreed: rank 0 fills id (n bytes, at most 1024) with make
 * (0, or nonzero with its err filled), the host backend broadcasts it, and
 * every rank returns 0 with rank 0's id only if make succeeded and every
 * rank passed local_ok != 0.  Otherwise every rank returns DS_EIO with its
 * own failure when it had one (local_err, the caller's; make's on rank 0),
 * else naming the rank that failed.  A collective: every rank calls it. */
int ds_comm_share_id(struct ds_comm *c, int local_ok, const struct ds_err *local_err,
		     int (*make)(void *id, size_t n, void *ctx, struct ds_err *err), void *ctx, void *id, size_t n,
		     struct ds_err *err);
/* 1 when ok is nonzero on every rank, else 0 (0 also when the agreement
 * itself failed, with err filled); a collective over the host backend. */
int ds_comm_agree(struct ds_comm *c, int ok, struct ds_err *err);

/* ---- the compressed allreduce (1-bit Adam, 0/1 Adam, 1-bit LAMB) -------
 * DeepSpeed's compressed_allreduce (deepspeed/runtime/comm/nccl.py), the
 * average over the ranks of buf with 1-bit compression and error feedback
 * on both sides: each rank (worker) adds its worker error to buf, sends
 * the signs of chunk r (buf cut in `world` equal chunks) to rank r with
 * one all_to_all_single and its scale ||buf||/sqrt(padded) with an
 * all_gather, keeping what the signs lost as its new worker error; rank r
 * (server of chunk r) averages the W signed chunks, adds its server error,
 * compresses that the same way (keeping the server error) and all_gathers
 * its signs and scale; every rank decodes the W server chunks into buf.
 * Each rank sends padded/8 + padded/(8W) bytes of signs and two 4-byte
 * scales, against 4*padded for an fp32 allreduce.  The comms logger sees
 * the four collectives with those sizes. */

/* Scratch reused by the compressed allreduce (grows on demand). */
struct ds_comm_onebit;
int ds_comm_onebit_create(struct ds_comm_onebit **out, struct ds_err *err);
void ds_comm_onebit_destroy(struct ds_comm_onebit *w);  /* accepts NULL */

/* The compressed allreduce of buf[0 .. padded) in place (padded: the
 * length DeepSpeed pads a tensor of n elements to, ds_onebit_padded of
 * kernels/cpu/onebit.h; the caller fills the tail, zeros unless it keeps
 * them), with this rank's worker_error (padded floats) and server_error
 * (padded / world floats), both updated.  Collective: every rank passes the
 * same padded.  At world 1 the same arithmetic runs without exchanges.
 * Returns 0, DS_EINVAL (padded not a valid size) or the collective's
 * error. */
int ds_comm_compressed_allreduce(struct ds_comm *c, struct ds_comm_onebit *w, float *buf, size_t padded,
				 float *worker_error, float *server_error, struct ds_err *err);

/* Take every rank down with exit status `code` (a failing rank must not
 * leave the others hanging).  The self backend simply returns. */
void ds_comm_abort(struct ds_comm *c, int code);

#endif
