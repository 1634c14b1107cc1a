/* ckpt_mpio_stub.c - the MPI-IO hooks of a build without MPI (serial HDF5):
 * a checkpoint is always written by one process (ckpt_int.h). */
#include "io/ckpt_int.h"

const int ds_ckpt_mpio_built = 0;

int ds_ckpt_mpio_fapl(hid_t fapl, const struct ds_comm *comm, struct ds_err *err)
{
	(void)fapl;
	(void)comm;
	return ds_err_set(err, DS_ENOTSUP, "built without MPI; parallel checkpoint writes need --with-mpi "
			  "(apt-get install libopenmpi-dev openmpi-bin libhdf5-openmpi-dev)");
}

hid_t ds_ckpt_mpio_dxpl(void)
{
	return H5P_DEFAULT;
}

void ds_ckpt_mpio_dxpl_close(hid_t dxpl)
{
	(void)dxpl;
}
