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
};

struct ds_comm_req {
	const char *op, *caller;
	size_t bytes;
	double t0, t_done;  /* start; when a test first saw it finished (0: not yet) */
	void *priv; /* backend request (MPI_Request) */
	char inline_buf[64];
};

extern const struct ds_comm_ops ds_comm_self_ops;
extern const struct ds_comm_ops ds_comm_mpi_ops;
/* 1 when MPI is compiled in (comm_mpi.c), 0 from the stub. */
extern const int ds_comm_mpi_built;
/* True when this process was started by an MPI launcher or srun. */
int ds_comm_mpi_launched(void);

#endif
