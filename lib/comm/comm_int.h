/* comm_int.h - what backends share with comm.c (private). */
#ifndef DS_COMM_INT_H
#define DS_COMM_INT_H

#include "comm/comm.h"

struct ds_comm {
	const struct ds_comm_ops *ops;
	int rank, size, local_rank, nodes;
	char host[64];
	ds_comm_log_fn log_fn;
	void *log_ctx;
	void *priv; /* backend state */
	/* device buffers (comm_dev.c), NULL before ds_comm_set_devmem */
	const struct ds_comm_ops *dops; /* ds_comm_nccl_ops or ds_comm_staged_ops */
	struct ds_comm_dev *dev;
	struct ds_comm *parent;  /* the communicator this one was split from (its logger logs), or NULL */
};

struct ds_comm_req {
	const char *op, *caller;
	size_t bytes;
	double t0, t_done;  /* start; when a test first saw it finished (0: not yet) */
	void *priv; /* backend request (MPI_Request) */
	char inline_buf[64];
	const struct ds_comm_ops *ops; /* the table that started it: wait and test go there */
	void *dpriv;                   /* the device path's request state */
};

/* The device path's state (comm_dev.c, comm_staged.c, comm_nccl.c). */
struct ds_comm_stage { void *p; size_t cap; int busy; };
struct ds_comm_dev {
	struct ds_comm_devmem dm;
	char why[256];                /* ds_comm_devpath_why */
	struct ds_comm_stage *stage;  /* the pinned buffers of the staged path */
	int nstage;
	size_t pinned;                /* bytes held in stage[] */
	void *nccl;                   /* comm_nccl.c's state */
};

extern const struct ds_comm_ops ds_comm_self_ops;
extern const struct ds_comm_ops ds_comm_mpi_ops;
/* 1 when MPI is compiled in (comm_mpi.c), 0 from the stub. */
extern const int ds_comm_mpi_built;
/* True when this process was started by an MPI launcher or srun. */
int ds_comm_mpi_launched(void);

/* Device buffers.  A collective's wrapper (comm.c) asks ds_comm_route which
 * table carries it: the host backend when no buffer is device memory, else
 * the device path.  A new operation on device buffers (send/recv,
 * all-to-all) is one function in comm_staged.c (stage, call the host
 * backend's op, copy back) and one in comm_nccl.c, plus ds_comm_route in its
 * wrapper. */
const struct ds_comm_ops *ds_comm_dev_route(struct ds_comm *c, const void *a, const void *b);
static inline const struct ds_comm_ops *ds_comm_route(struct ds_comm *c, const void *a, const void *b)
{
	return c->dev ? ds_comm_dev_route(c, a, b) : c->ops;
}
void ds_comm_dev_free(struct ds_comm *c);  /* ds_comm_destroy, before the host backend's fini */
void ds_comm_dev_abort(struct ds_comm *c); /* ds_comm_abort, before the host backend's abort */
extern const struct ds_comm_ops ds_comm_staged_ops;
void ds_comm_staged_free(struct ds_comm *c);
/* comm_nccl.c (with CUDA and NCCL) or comm_nccl_stub.c: open bootstraps the
 * NCCL communicator over the host backend (collective: every rank calls it
 * and all get the same verdict); close and abort end it. */
extern const struct ds_comm_ops ds_comm_nccl_ops;
int ds_comm_nccl_open(struct ds_comm *c, struct ds_err *err);
void ds_comm_nccl_close(struct ds_comm *c);
void ds_comm_nccl_abort(struct ds_comm *c);

#endif
