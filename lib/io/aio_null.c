/* aio_null.c - the null I/O engine: every request succeeds at once and no
 * byte moves, so tools and tests run the whole engine (threads, splitting,
 * checks) with no disk at all.  A read leaves the buffer as it was.
 */
#include "io/aio_int.h"

static int null_xfer(void *tctx, const struct ds_aio_opts *o, const struct ds_io_xfer *x, struct ds_err *err)
{
	(void)tctx;
	(void)err;
	for (uint64_t done = 0; done < x->len; done += o->block_size) {
		if (x->lat)
			ds_aio_lat_add(x->lat, 0.0);
		x->cnt->requests++;
	}
	return 0;
}

const struct ds_io_ops ds_io_null_ops = {
	.name = "null",
	.caps = DS_IO_CAP_NOFILE,
	.xfer = null_xfer,
};
