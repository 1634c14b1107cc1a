/* mpiver.h - the MPI library this build links, for ds-report.
 *
 * mpiver_mpi.c with --with-mpi, mpiver_stub.c without (DS_ENOTSUP).
 * Works before MPI_Init (MPI-3 allows both calls then).
 */
#ifndef DS_APP_MPIVER_H
#define DS_APP_MPIVER_H

#include <stddef.h>
#include "util/err.h"

/* Write "Open MPI v4.1.4 (MPI 3.1)" into buf.  Returns 0, or DS_ENOTSUP
 * when built without MPI ("built without MPI; reconfigure --with-mpi"). */
int ds_mpiver_get(char *buf, size_t n, struct ds_err *err);

#endif
