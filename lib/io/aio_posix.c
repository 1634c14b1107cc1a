/* aio_posix.c - the posix I/O engine: each thread issues its chunk as
 * block_size pread/pwrite calls, one at a time.  Always built, so a build
 * without libaio still tunes and swaps; queue_depth, single_submit and
 * overlap_events have no effect here (one request in flight per thread).
 */
#include <errno.h>
#include <unistd.h>

#include "io/aio_int.h"
#include "util/timer.h"

static int posix_xfer(void *tctx, const struct ds_aio_opts *o, const struct ds_io_xfer *x, struct ds_err *err)
{
	(void)tctx;
	for (uint64_t done = 0; done < x->len;) {
		uint64_t want = x->len - done < o->block_size ? x->len - done : o->block_size;
		uint64_t got = 0;
		double t0 = ds_now();
		while (got < want) {
			ssize_t r = x->write ? pwrite(x->fd, x->buf + done + got, want - got, (off_t)(x->off + done + got))
					     : pread(x->fd, x->buf + done + got, want - got, (off_t)(x->off + done + got));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				return ds_io_req_error(err, x, x->off + done, want, r < 0 ? -(long)errno : (long)got);
			got += (uint64_t)r;
		}
		if (x->lat)
			ds_aio_lat_add(x->lat, ds_now() - t0);
		x->cnt->requests++;
		if (x->cnt->max_inflight < 1)
			x->cnt->max_inflight = 1;
		done += want;
	}
	return 0;
}

const struct ds_io_ops ds_io_posix_ops = {
	.name = "posix",
	.xfer = posix_xfer,
};
