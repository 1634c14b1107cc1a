/* comm_nccl_stub.c - the NCCL device path of a build without CUDA and NCCL:
 * ds_comm_devpath_choose never picks it here (ds_comm_nccl_built is 0), and
 * opening it anyway fails with DS_ENOTSUP naming the configure flag. */
#include "comm/comm_int.h"

int ds_comm_nccl_built(void) { return 0; }

int ds_comm_nccl_open(struct ds_comm *c, struct ds_err *err)
{
	(void)c;
	return ds_err_set(err, DS_ENOTSUP, "built without NCCL; reconfigure --with-cuda (the CUDA toolkit "
			  "with NCCL)");
}

void ds_comm_nccl_close(struct ds_comm *c) { (void)c; }
void ds_comm_nccl_abort(struct ds_comm *c) { (void)c; }

const struct ds_comm_ops ds_comm_nccl_ops = { .name = "nccl" };
