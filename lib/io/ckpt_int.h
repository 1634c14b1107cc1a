/* ckpt_int.h - the MPI-IO hooks of the checkpoint writer (private to
 * lib/io/ckpt*.c).  ckpt_mpio.c fills them with parallel HDF5 in MPI builds;
 * ckpt_mpio_stub.c stands in for them elsewhere, so ckpt.c has no #ifdef. */
#ifndef DS_IO_CKPT_INT_H
#define DS_IO_CKPT_INT_H

#include <hdf5.h>

#include "comm/comm.h"
#include "util/err.h"

/* 1 when this build links parallel HDF5 and can write with MPI-IO. */
extern const int ds_ckpt_mpio_built;

/* Make fapl open files with the MPI-IO driver over comm's MPI
 * communicator, metadata written collectively.  DS_ENOTSUP in a build
 * without MPI or when comm is not an MPI communicator. */
int ds_ckpt_mpio_fapl(hid_t fapl, const struct ds_comm *comm, struct ds_err *err);

/* A dataset transfer property list asking for collective MPI-IO
 * (H5FD_MPIO_COLLECTIVE); H5P_DEFAULT in a build without MPI.  Close with
 * ds_ckpt_mpio_dxpl_close. */
hid_t ds_ckpt_mpio_dxpl(void);
void ds_ckpt_mpio_dxpl_close(hid_t dxpl);

#endif
