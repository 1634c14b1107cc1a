/* ckpt_mpio.c - parallel-HDF5 property lists for the checkpoint writer
 * (MPI builds, linked against hdf5-openmpi; see ckpt_int.h). */
#include "config.h"

#include "io/ckpt_int.h"

#include <mpi.h>

const int ds_ckpt_mpio_built = 1;

int ds_ckpt_mpio_fapl(hid_t fapl, const struct ds_comm *comm, struct ds_err *err)
{
	const MPI_Comm *mc = ds_comm_mpi_handle(comm);
	if (!mc)
		return ds_err_set(err, DS_ENOTSUP, "parallel checkpoint writes need the mpi communicator, not %s",
				  ds_comm_backend(comm));
	if (H5Pset_fapl_mpio(fapl, *mc, MPI_INFO_NULL) < 0)
		return ds_err_set(err, DS_EIO, "H5Pset_fapl_mpio failed");
#if H5_VERSION_GE(1, 10, 0)
	/* object headers and attributes go out in one collective write each
	 * instead of from every rank */
	H5Pset_coll_metadata_write(fapl, 1);
#endif
	return 0;
}

hid_t ds_ckpt_mpio_dxpl(void)
{
	hid_t x = H5Pcreate(H5P_DATASET_XFER);
	if (x < 0)
		return H5P_DEFAULT;
	if (H5Pset_dxpl_mpio(x, H5FD_MPIO_COLLECTIVE) < 0) {
		H5Pclose(x);
		return H5P_DEFAULT;
	}
	return x;
}

void ds_ckpt_mpio_dxpl_close(hid_t dxpl)
{
	if (dxpl != H5P_DEFAULT)
		H5Pclose(dxpl);
}
