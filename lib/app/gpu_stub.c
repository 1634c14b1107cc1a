/* gpu_stub.c - ds_gpu_query() of a build without CUDA (see gpu.h).
 *
 * Chosen by lib/app/local.mk when configure found no CUDA toolkit.
 */
#include <string.h>
#include "app/gpu.h"

int ds_gpu_query(struct ds_gpu_info *info, struct ds_err *err)
{
	memset(info, 0, sizeof *info);
	strcpy(info->why_none, "built without CUDA");
	return ds_err_set(err, DS_ENOTSUP, "built without CUDA; reconfigure --with-cuda");
}
