/* mpiver_mpi.c - ds_mpiver_get() from MPI_Get_library_version (see mpiver.h).
 *
 * Open MPI's string runs "Open MPI v4.1.4, package: ..., ident: ..."; the
 * part before the first comma is the name and version.
 */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include <mpi.h>
#include "app/mpiver.h"

int ds_mpiver_get(char *buf, size_t n, struct ds_err *err)
{
	char lib[MPI_MAX_LIBRARY_VERSION_STRING];
	int len = 0, major = 0, minor = 0;

	if (MPI_Get_library_version(lib, &len) != MPI_SUCCESS)
		return ds_err_set(err, DS_EIO, "MPI_Get_library_version failed");
	lib[strcspn(lib, ",\n")] = '\0';
	MPI_Get_version(&major, &minor);
	snprintf(buf, n, "%s (MPI %d.%d)", lib, major, minor);
	return 0;
}
