/* mpiver_stub.c - ds_mpiver_get() of a build without MPI (see mpiver.h). */
#include "app/mpiver.h"

int ds_mpiver_get(char *buf, size_t n, struct ds_err *err)
{
	if (n > 0)
		buf[0] = '\0';
	return ds_err_set(err, DS_ENOTSUP, "built without MPI; reconfigure --with-mpi");
}
