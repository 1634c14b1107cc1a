/* gpu_stub.c - ds_gpu_query() of a build without CUDA (see gpu.h).
 *
 * Chosen by lib/app/local.mk when configure found no CUDA toolkit.
 */
#include <stdio.h>
#include <string.h>
#include "app/gpu.h"

int ds_gpu_query(struct ds_gpu_info *info, struct ds_err *err)
{
	memset(info, 0, sizeof *info);
	strcpy(info->why_none, "built without CUDA");
	return ds_err_set(err, DS_ENOTSUP, "built without CUDA; reconfigure --with-cuda");
}

int ds_gpu_count(int *n, char *why, size_t why_len)
{
	*n = 0;
	snprintf(why, why_len, "built without CUDA");
	return DS_ENOTSUP;
}

int ds_gpu_probe(const struct ds_gpu_info *info, struct ds_gpu_usable *u, struct ds_err *err)
{
	memset(u, 0, sizeof *u);
	strcpy(u->cuda_why, "built without CUDA");
	strcpy(u->cublas_why, "built without CUDA");
	strcpy(u->nccl_why, "built without CUDA");
	return ds_err_set(err, DS_ENOTSUP, "built without CUDA; reconfigure --with-cuda");
}
