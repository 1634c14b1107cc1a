/* comm_staged.c - collectives on device buffers through the host backend
 * (mpi or self): each device buffer is copied into pinned host memory
 * (dm->to_host), the host backend runs the collective there, and the result
 * is copied back (dm->to_dev); a buffer in host memory is used in place.
 * Non-blocking calls copy in, start the host backend's operation, and copy
 * back when test first sees it finished or at wait.  Pinned buffers are
 * pooled, since several non-blocking calls may be in flight: a call takes
 * the smallest free one that fits, else regrows the largest free one to its
 * message, else adds one; ds_comm_destroy frees them.  In a world of one
 * nothing crosses: device-to-device copies (dm->dev_copy) do all there is. */
#include "comm/comm_int.h"

#include <stdlib.h>
#include <string.h>

/* pinned buffers grow in steps of this, so that messages of nearby sizes
 * share one buffer */
#define STAGE_STEP ((size_t)64 << 10)

/* a non-blocking call in flight: its pinned buffer and what to copy back */
struct staged_req {
	int slot;
	void *dst;        /* device memory receiving the result, NULL: none */
	const void *src;  /* in the pinned buffer */
	size_t bytes;
	int copied;
};

static int is_dev(const struct ds_comm_dev *d, const void *p)
{
	return p && d->dm.is_dev(p, d->dm.ctx);
}

/* what a pinned buffer for bytes is grown to */
static size_t stage_cap(size_t bytes)
{
	return (bytes / STAGE_STEP + 1) * STAGE_STEP;
}

size_t ds_comm_staged_bytes(int op, size_t count, int dtype, int world)
{
	size_t n = count * ds_dtype_size(dtype);
	if (world <= 1)
		return 0;
	switch (op) {
	case DS_COMM_REDUCE_SCATTER: return stage_cap(n * (size_t)(world + 1));
	case DS_COMM_ALLGATHER: return stage_cap(n * (size_t)world);
	default: return stage_cap(n);
	}
}

/* Take a free pinned buffer of at least bytes into *slot. */
static int stage_get(struct ds_comm_dev *d, size_t bytes, int *slot, struct ds_err *err)
{
	int best = -1, big = -1;

	for (int i = 0; i < d->nstage; i++) {
		const struct ds_comm_stage *s = &d->stage[i];
		if (s->busy)
			continue;
		if (s->cap >= bytes && (best < 0 || s->cap < d->stage[best].cap))
			best = i;
		if (big < 0 || s->cap > d->stage[big].cap)
			big = i;
	}
	if (best < 0) {
		size_t cap = stage_cap(bytes);
		if (big < 0) {
			struct ds_comm_stage *n = realloc(d->stage, (size_t)(d->nstage + 1) * sizeof *n);
			if (!n)
				return ds_err_set(err, DS_ENOMEM, "out of memory for the staging buffer list");
			d->stage = n;
			big = d->nstage++;
			memset(&d->stage[big], 0, sizeof d->stage[big]);
		}
		struct ds_comm_stage *s = &d->stage[big];
		if (s->p) {
			d->dm.host_free(s->p, d->dm.ctx);
			d->pinned -= s->cap;
			s->p = NULL;
			s->cap = 0;
		}
		if (!(s->p = d->dm.host_alloc(cap, d->dm.ctx)))
			return ds_err_set(err, DS_ENOMEM, "pinned host memory: %zu bytes to stage a collective on "
					  "device buffers could not be allocated (%zu held)", cap, d->pinned);
		s->cap = cap;
		d->pinned += cap;
		best = big;
	}
	d->stage[best].busy = 1;
	*slot = best;
	return 0;
}

static void stage_put(struct ds_comm_dev *d, int slot)
{
	d->stage[slot].busy = 0;
}

void ds_comm_staged_free(struct ds_comm *c)
{
	struct ds_comm_dev *d = c->dev;
	for (int i = 0; i < d->nstage; i++)
		if (d->stage[i].p)
			d->dm.host_free(d->stage[i].p, d->dm.ctx);
	free(d->stage);
	d->stage = NULL;
	d->nstage = 0;
	d->pinned = 0;
}

/* Copy n bytes between any two of host and device memory. */
static int xcopy(struct ds_comm_dev *d, void *dst, const void *src, size_t n, const char *op, struct ds_err *err)
{
	int dd = is_dev(d, dst), sd = is_dev(d, src), rc;
	const char *how;

	if (!n || dst == src)
		return 0;
	if (dd && sd)
		rc = d->dm.dev_copy(dst, src, n, d->dm.ctx), how = "device to device";
	else if (sd)
		rc = d->dm.to_host(dst, src, n, d->dm.ctx), how = "device to host";
	else if (dd)
		rc = d->dm.to_dev(dst, src, n, d->dm.ctx), how = "host to device";
	else
		memmove(dst, src, n), rc = 0, how = "";
	if (rc)
		return ds_err_set(err, DS_EIO, "%s on device buffers: copying %zu bytes %s failed (code %d)", op, n,
				  how, rc);
	return 0;
}

/* The host backend refuses these too; checked here so that a world of one,
 * which never reaches it, answers the same. */
static int check_op(int dtype, int op, struct ds_err *err)
{
	if ((dtype == DS_F16 || dtype == DS_BF16) && op != DS_SUM)
		return ds_err_set(err, DS_EINVAL, "only sum is supported for %s reductions", ds_dtype_name(dtype));
	return 0;
}

static int check_root(struct ds_comm *c, int root, struct ds_err *err)
{
	if (root < 0 || root >= c->size)
		return ds_err_set(err, DS_EINVAL, "broadcast root %d out of range (world size %d)", root, c->size);
	return 0;
}

/* Record what a started call copies back; slot is released by its end. */
static int pend(struct ds_comm_req *req, int slot, void *dst, const void *src, size_t bytes, struct ds_err *err)
{
	struct staged_req *r = calloc(1, sizeof *r);
	if (!r)
		return ds_err_set(err, DS_ENOMEM, "out of memory for a communication request");
	r->slot = slot;
	r->dst = dst;
	r->src = src;
	r->bytes = bytes;
	req->dpriv = r;
	return 0;
}

/* ---- allreduce ---------------------------------------------------------- */

static int st_allreduce_any(struct ds_comm *c, void *buf, size_t count, int dtype, int op,
			    struct ds_comm_req *req, struct ds_err *err)
{
	struct ds_comm_dev *d = c->dev;
	size_t n = count * ds_dtype_size(dtype);
	int k, rc;
	void *h;

	DS_TRY(check_op(dtype, op, err));
	if (c->size == 1)
		return 0;
	DS_TRY(stage_get(d, n, &k, err));
	h = d->stage[k].p;
	if ((rc = xcopy(d, h, buf, n, "all_reduce", err)) < 0)
		goto fail;
	if (!req) {
		if ((rc = c->ops->allreduce(c, h, count, dtype, op, err)) == 0)
			rc = xcopy(d, buf, h, n, "all_reduce", err);
		stage_put(d, k);
		return rc;
	}
	if ((rc = pend(req, k, buf, h, n, err)) < 0)
		goto fail;
	if ((rc = c->ops->iallreduce(c, h, count, dtype, op, req, err)) < 0) {
		free(req->dpriv);
		req->dpriv = NULL;
		goto fail;
	}
	return 0;
fail:
	stage_put(d, k);
	return rc;
}

static int st_allreduce(struct ds_comm *c, void *buf, size_t count, int dtype, int op, struct ds_err *err)
{
	return st_allreduce_any(c, buf, count, dtype, op, NULL, err);
}

static int st_iallreduce(struct ds_comm *c, void *buf, size_t count, int dtype, int op, struct ds_comm_req *req,
			 struct ds_err *err)
{
	return st_allreduce_any(c, buf, count, dtype, op, req, err);
}

/* ---- reduce-scatter: the pinned buffer holds the input, then the block -- */

static int st_reduce_scatter_any(struct ds_comm *c, const void *send, void *recv, size_t recvcount, int dtype,
				 int op, struct ds_comm_req *req, struct ds_err *err)
{
	struct ds_comm_dev *d = c->dev;
	size_t rn = recvcount * ds_dtype_size(dtype), sn = rn * (size_t)c->size;
	int sd = is_dev(d, send), rd = is_dev(d, recv), k, rc;
	const void *sp = send;
	void *rp = recv;
	char *h;

	DS_TRY(check_op(dtype, op, err));
	if (c->size == 1)
		return xcopy(d, recv, send, rn, "reduce_scatter", err);
	DS_TRY(stage_get(d, (sd ? sn : 0) + (rd ? rn : 0), &k, err));
	h = d->stage[k].p;
	if (sd) {
		sp = h;
		if ((rc = xcopy(d, h, send, sn, "reduce_scatter", err)) < 0)
			goto fail;
	}
	if (rd)
		rp = h + (sd ? sn : 0);
	if (!req) {
		if ((rc = c->ops->reduce_scatter(c, sp, rp, recvcount, dtype, op, err)) == 0)
			rc = xcopy(d, recv, rp, rn, "reduce_scatter", err);
		stage_put(d, k);
		return rc;
	}
	if ((rc = pend(req, k, rd ? recv : NULL, rp, rn, err)) < 0)
		goto fail;
	if ((rc = c->ops->ireduce_scatter(c, sp, rp, recvcount, dtype, op, req, err)) < 0) {
		free(req->dpriv);
		req->dpriv = NULL;
		goto fail;
	}
	return 0;
fail:
	stage_put(d, k);
	return rc;
}

static int st_reduce_scatter(struct ds_comm *c, const void *send, void *recv, size_t recvcount, int dtype, int op,
			     struct ds_err *err)
{
	return st_reduce_scatter_any(c, send, recv, recvcount, dtype, op, NULL, err);
}

static int st_ireduce_scatter(struct ds_comm *c, const void *send, void *recv, size_t recvcount, int dtype,
			      int op, struct ds_comm_req *req, struct ds_err *err)
{
	return st_reduce_scatter_any(c, send, recv, recvcount, dtype, op, req, err);
}

/* ---- allgather: this rank's block goes where it lands, then in place ---- */

static int st_allgather_any(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			    struct ds_comm_req *req, struct ds_err *err)
{
	struct ds_comm_dev *d = c->dev;
	size_t bn = sendcount * ds_dtype_size(dtype), tn = bn * (size_t)c->size;
	int rd = is_dev(d, recv), k = -1, rc;
	char *h = recv;

	if (c->size == 1)
		return xcopy(d, recv, send, bn, "all_gather", err);
	if (rd) {
		DS_TRY(stage_get(d, tn, &k, err));
		h = d->stage[k].p;
	}
	if ((rc = xcopy(d, h + (size_t)c->rank * bn, send, bn, "all_gather", err)) < 0)
		goto fail;
	if (!req) {
		if ((rc = c->ops->allgather(c, h + (size_t)c->rank * bn, h, sendcount, dtype, err)) == 0)
			rc = xcopy(d, recv, h, tn, "all_gather", err);
		if (k >= 0)
			stage_put(d, k);
		return rc;
	}
	if ((rc = pend(req, k, rd ? recv : NULL, h, tn, err)) < 0)
		goto fail;
	if ((rc = c->ops->iallgather(c, h + (size_t)c->rank * bn, h, sendcount, dtype, req, err)) < 0) {
		free(req->dpriv);
		req->dpriv = NULL;
		goto fail;
	}
	return 0;
fail:
	if (k >= 0)
		stage_put(d, k);
	return rc;
}

static int st_allgather(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			struct ds_err *err)
{
	return st_allgather_any(c, send, recv, sendcount, dtype, NULL, err);
}

static int st_iallgather(struct ds_comm *c, const void *send, void *recv, size_t sendcount, int dtype,
			 struct ds_comm_req *req, struct ds_err *err)
{
	return st_allgather_any(c, send, recv, sendcount, dtype, req, err);
}

/* ---- broadcast: the root copies out, the others copy in ----------------- */

static int st_broadcast(struct ds_comm *c, void *buf, size_t count, int dtype, int root, struct ds_err *err)
{
	struct ds_comm_dev *d = c->dev;
	size_t n = count * ds_dtype_size(dtype);
	int k, rc = 0;
	void *h;

	DS_TRY(check_root(c, root, err));
	if (c->size == 1)
		return 0;
	DS_TRY(stage_get(d, n, &k, err));
	h = d->stage[k].p;
	if (c->rank == root)
		rc = xcopy(d, h, buf, n, "broadcast", err);
	if (rc == 0 && (rc = c->ops->broadcast(c, h, count, dtype, root, err)) == 0 && c->rank != root)
		rc = xcopy(d, buf, h, n, "broadcast", err);
	stage_put(d, k);
	return rc;
}

static int st_barrier(struct ds_comm *c, struct ds_err *err)
{
	return c->ops->barrier(c, err);
}

/* ---- completion: copy back once, release the pinned buffer at wait ----- */

static int copy_back(struct ds_comm *c, struct staged_req *r, struct ds_err *err)
{
	if (r->copied)
		return 0;
	r->copied = 1;
	return r->dst ? xcopy(c->dev, r->dst, r->src, r->bytes, "a non-blocking collective", err) : 0;
}

static int st_test(struct ds_comm *c, struct ds_comm_req *req, int *done, struct ds_err *err)
{
	struct staged_req *r = req->dpriv;

	*done = 1;
	if (!r)
		return 0; /* a world of one: finished when started */
	DS_TRY(c->ops->test(c, req, done, err));
	return *done ? copy_back(c, r, err) : 0;
}

static int st_wait(struct ds_comm *c, struct ds_comm_req *req, struct ds_err *err)
{
	struct staged_req *r = req->dpriv;
	int rc;

	if (!r)
		return 0;
	if ((rc = c->ops->wait(c, req, err)) == 0)
		rc = copy_back(c, r, err);
	if (r->slot >= 0)
		stage_put(c->dev, r->slot);
	free(r);
	req->dpriv = NULL;
	return rc;
}

const struct ds_comm_ops ds_comm_staged_ops = {
	.name = "staged",
	.allreduce = st_allreduce,
	.reduce_scatter = st_reduce_scatter,
	.allgather = st_allgather,
	.broadcast = st_broadcast,
	.barrier = st_barrier,
	.iallreduce = st_iallreduce,
	.ireduce_scatter = st_ireduce_scatter,
	.iallgather = st_iallgather,
	.wait = st_wait,
	.test = st_test,
};
