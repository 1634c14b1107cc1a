/* comm_mpi_stub.c - the `mpi` backend of a build without MPI: creating it
 * fails with DS_ENOTSUP and says how to build it in (STYLE rule 16). */
#include "comm/comm_int.h"

const int ds_comm_mpi_built = 0;

static int stub_init(struct ds_comm *c, struct ds_err *err)
{
	return ds_err_set(err, DS_ENOTSUP,
			  "built without MPI; reconfigure --with-mpi (apt-get install libopenmpi-dev "
			  "openmpi-bin libhdf5-openmpi-dev)");
}

const struct ds_comm_ops ds_comm_mpi_ops = { .name = "mpi", .init = stub_init };

const void *ds_comm_mpi_handle(const struct ds_comm *c)
{
	(void)c;
	return NULL;
}
