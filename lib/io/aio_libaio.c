/* aio_libaio.c - the libaio I/O engine (built only with HAVE_LIBAIO).
 *
 * Each thread owns an io_context of queue_depth slots.  A chunk becomes
 * ceil(len / block_size) iocbs.  overlap_events keeps up to queue_depth in
 * flight and refills a slot as soon as its request completes; otherwise a
 * batch of queue_depth is submitted and drained before the next.
 * single_submit passes one iocb per io_submit call.  A partial io_submit or
 * EAGAIN (queue full) puts the rest back and retries after reaping, so no
 * request is lost; errors arrive as negative errno in io_event.res.
 * Test-only: DS_TEST_FAULT_AIO_QUEUE_FULL=1 makes io_submit take at most one
 * request per call and refuse every third call with EAGAIN while requests
 * are in flight, as a full kernel queue does, to exercise that path.
 */
#include <errno.h>
#include <libaio.h>
#include <stdlib.h>
#include <string.h>

#include "io/aio_int.h"
#include "util/timer.h"

struct aio_tctx {
	io_context_t ctx;
	int qd;
	struct iocb *cbs;     /* [qd] */
	struct iocb **ptrs;   /* [qd] batch being submitted */
	struct io_event *ev;  /* [qd] */
	double *t0;           /* [qd] submit time per slot */
	uint64_t *blk;        /* [qd] block index per slot */
	int *free;            /* [qd] stack of free slots */
	int nfree;
};

static void aio_fini(void *p)
{
	struct aio_tctx *t = p;

	if (!t)
		return;
	if (t->ctx)
		io_destroy(t->ctx);
	free(t->cbs);
	free(t->ptrs);
	free(t->ev);
	free(t->t0);
	free(t->blk);
	free(t->free);
	free(t);
}

static int aio_init(void **out, const struct ds_aio_opts *o, struct ds_err *err)
{
	struct aio_tctx *t = calloc(1, sizeof(*t));
	int qd = o->queue_depth, rc;

	if (!t)
		return ds_err_set(err, DS_ENOMEM, "aio: out of memory");
	t->qd = qd;
	t->cbs = calloc((size_t)qd, sizeof(*t->cbs));
	t->ptrs = calloc((size_t)qd, sizeof(*t->ptrs));
	t->ev = calloc((size_t)qd, sizeof(*t->ev));
	t->t0 = calloc((size_t)qd, sizeof(*t->t0));
	t->blk = calloc((size_t)qd, sizeof(*t->blk));
	t->free = calloc((size_t)qd, sizeof(*t->free));
	if (!t->cbs || !t->ptrs || !t->ev || !t->t0 || !t->blk || !t->free) {
		aio_fini(t);
		return ds_err_set(err, DS_ENOMEM, "aio: out of memory for queue_depth %d", qd);
	}
	if ((rc = io_setup(qd, &t->ctx)) < 0) {
		t->ctx = 0;
		aio_fini(t);
		return ds_err_set(err, DS_EIO, "aio: io_setup(queue_depth %d): %s%s", qd, strerror(-rc),
				  rc == -EAGAIN ? " (queue_depth x threads exceeds /proc/sys/fs/aio-max-nr)" : "");
	}
	for (int i = 0; i < qd; i++)
		t->free[i] = qd - 1 - i;
	t->nfree = qd;
	*out = t;
	return 0;
}

/* io_submit, or under the test fault a kernel queue that is always full. */
static int submit(struct aio_tctx *t, int fault, int inflight, int n, struct iocb **p)
{
	static _Thread_local unsigned calls;
	if (fault) {
		if (++calls % 3 == 0 && inflight > 0)
			return -EAGAIN;
		n = 1;
	}
	return io_submit(t->ctx, n, p);
}

/* Bytes of block b of the chunk (the last may be short). */
static uint64_t blk_len(const struct ds_aio_opts *o, const struct ds_io_xfer *x, uint64_t b)
{
	uint64_t start = b * o->block_size;
	return x->len - start < o->block_size ? x->len - start : o->block_size;
}

static int aio_xfer(void *p, const struct ds_aio_opts *o, const struct ds_io_xfer *x, struct ds_err *err)
{
	struct aio_tctx *t = p;
	uint64_t nblk = (x->len + o->block_size - 1) / o->block_size;
	uint64_t next = 0, done = 0;
	int inflight = 0, rc = 0;
	const char *f = getenv("DS_TEST_FAULT_AIO_QUEUE_FULL");
	int fault = f && *f && strcmp(f, "0") != 0;

	while (done < nblk) {
		/* fill: with overlap whatever slots are free; without, a new batch
		 * only once the previous one has drained */
		int room = (o->overlap_events || inflight == 0) ? t->nfree : 0;
		int n = 0;
		if (rc == 0 && next < nblk && room > 0) {
			while (n < room && next + (uint64_t)n < nblk) {
				uint64_t b = next + (uint64_t)n;
				int s = t->free[--t->nfree];
				struct iocb *cb = &t->cbs[s];
				if (x->write)
					io_prep_pwrite(cb, x->fd, x->buf + b * o->block_size, blk_len(o, x, b),
						       (long long)(x->off + b * o->block_size));
				else
					io_prep_pread(cb, x->fd, x->buf + b * o->block_size, blk_len(o, x, b),
						      (long long)(x->off + b * o->block_size));
				cb->data = (void *)(intptr_t)s;
				t->blk[s] = b;
				t->ptrs[n++] = cb;
			}
			int sub = 0;
			double now = ds_now();
			while (sub < n) {
				int r = submit(t, fault, inflight + sub, o->single_submit ? 1 : n - sub, t->ptrs + sub);
				if (r == -EINTR)
					continue;
				if (r <= 0) {
					if (r < 0 && r != -EAGAIN)
						rc = ds_err_set(err, DS_EIO, "%s %s: io_submit: %s", x->write ? "write" : "read",
								x->path, strerror(-r));
					else if (inflight == 0 && sub == 0)
						rc = ds_err_set(err, DS_EIO, "%s %s: io_submit accepts no request with none in flight",
								x->write ? "write" : "read", x->path);
					break; /* queue full: reap first, the rest goes back */
				}
				for (int i = 0; i < r; i++)
					t->t0[(intptr_t)t->ptrs[sub + i]->data] = now;
				sub += r;
				x->cnt->submit_calls++;
				if ((uint64_t)(inflight + sub) > x->cnt->max_inflight)
					x->cnt->max_inflight = (uint64_t)(inflight + sub);
			}
			/* give back what was not submitted, in reverse so blocks stay in order */
			for (int i = n - 1; i >= sub; i--)
				t->free[t->nfree++] = (int)(intptr_t)t->ptrs[i]->data;
			inflight += sub;
			next += (uint64_t)sub;
		}
		if (inflight == 0) {
			if (rc < 0)
				break;
			continue;
		}
		int r = io_getevents(t->ctx, o->overlap_events ? 1 : inflight, t->qd, t->ev, NULL);
		if (r == -EINTR)
			continue;
		if (r < 0) {
			/* cannot reap: the kernel still owns the buffers, destroying the
			 * context (aio_fini) cancels or waits for them */
			return ds_err_set(err, DS_EIO, "%s %s: io_getevents: %s", x->write ? "write" : "read", x->path,
					  strerror(-r));
		}
		double now = ds_now();
		for (int i = 0; i < r; i++) {
			int s = (int)(intptr_t)t->ev[i].data;
			uint64_t b = t->blk[s], want = blk_len(o, x, b);
			long res = (long)t->ev[i].res;
			if ((res < 0 || (uint64_t)res != want) && rc == 0)
				rc = ds_io_req_error(err, x, x->off + b * o->block_size, want, res);
			if (x->lat)
				ds_aio_lat_add(x->lat, now - t->t0[s]);
			t->free[t->nfree++] = s;
			inflight--;
			done++;
			x->cnt->requests++;
		}
		if (rc < 0 && inflight == 0)
			break;
	}
	return rc;
}

const struct ds_io_ops ds_io_libaio_ops = {
	.name = "aio",
	.thread_init = aio_init,
	.thread_fini = aio_fini,
	.xfer = aio_xfer,
};
