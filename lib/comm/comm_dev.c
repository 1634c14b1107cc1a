/* comm_dev.c - collectives on device buffers: which path carries them (NCCL
 * or the host backend staging through pinned memory), chosen once by
 * ds_comm_set_devmem from every rank's device, and the routing of each call
 * by where its buffers live (comm.h, "Device buffers").  The choice is a
 * pure function of what every rank reports, so all ranks agree on it. */
#include "comm/comm_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ds_comm_devkey(char *out, const char *host, int device, const char *dev_id)
{
	if (dev_id && dev_id[0])
		snprintf(out, DS_COMM_DEVKEY, "%.64s/%.64s", host, dev_id);
	else
		snprintf(out, DS_COMM_DEVKEY, "%.64s/cuda:%d", host, device);
}

/* The first two ranks i < j whose keys are equal; 0 when all differ. */
static int shared_device(int world, const char *keys, int *i_out, int *j_out)
{
	for (int i = 0; i < world; i++)
		for (int j = i + 1; j < world; j++)
			if (!strncmp(keys + (size_t)i * DS_COMM_DEVKEY, keys + (size_t)j * DS_COMM_DEVKEY,
				     DS_COMM_DEVKEY)) {
				*i_out = i;
				*j_out = j;
				return 1;
			}
	return 0;
}

int ds_comm_devpath_choose(int nccl_built, int prefer_nccl, int world, const char *keys, char *why,
			   size_t whylen, struct ds_err *err)
{
	int i = 0, j = 0, shared = shared_device(world, keys, &i, &j);
	const char *k = keys + (size_t)i * DS_COMM_DEVKEY;

	if (prefer_nccl == DS_COMM_NCCL_NEVER) {
		snprintf(why, whylen, "NCCL not asked for: device buffers are staged through pinned host memory");
		return DS_COMM_PATH_STAGED;
	}
	if (prefer_nccl == DS_COMM_NCCL_REQUIRE) {
		if (!nccl_built)
			return ds_err_set(err, DS_ENOTSUP, "NCCL was asked for but this build has no NCCL; "
					  "reconfigure --with-cuda (the CUDA toolkit with NCCL)");
		if (shared)
			return ds_err_set(err, DS_EINVAL, "NCCL was asked for but ranks %d and %d share device %.*s, "
					  "which NCCL refuses: run one rank per GPU", i, j, DS_COMM_DEVKEY, k);
	} else if (world == 1) {
		snprintf(why, whylen, "one rank: nothing crosses, device buffers stay where they are");
		return DS_COMM_PATH_STAGED;
	} else if (!nccl_built) {
		snprintf(why, whylen, "built without NCCL (--with-cuda): device buffers are staged through "
			 "pinned host memory");
		return DS_COMM_PATH_STAGED;
	} else if (shared) {
		snprintf(why, whylen, "ranks %d and %d share device %.*s, which NCCL refuses: device buffers "
			 "are staged through pinned host memory", i, j, DS_COMM_DEVKEY, k);
		return DS_COMM_PATH_STAGED;
	}
	snprintf(why, whylen, "NCCL: each of the %d rank%s has a device of its own", world, world == 1 ? "" : "s");
	return DS_COMM_PATH_NCCL;
}

int ds_comm_set_devmem(struct ds_comm *c, const struct ds_comm_devmem *dm, int prefer_nccl,
		       struct ds_err *err)
{
	struct ds_comm_dev *d = NULL;
	char mine[DS_COMM_DEVKEY] = { 0 }, *keys = NULL;
	int rc, path;

	if (!dm || !dm->to_host || !dm->to_dev || !dm->dev_copy || !dm->host_alloc || !dm->host_free || !dm->is_dev)
		return ds_err_set(err, DS_EINVAL, "ds_comm_set_devmem: struct ds_comm_devmem needs every copy, "
				  "allocation and is_dev function");
	if (prefer_nccl < DS_COMM_NCCL_NEVER || prefer_nccl > DS_COMM_NCCL_REQUIRE)
		return ds_err_set(err, DS_EINVAL, "ds_comm_set_devmem: prefer_nccl %d is not NEVER, AUTO or REQUIRE",
				  prefer_nccl);
	if (c->dev)
		return ds_err_set(err, DS_EINVAL, "ds_comm_set_devmem: called twice on one communicator");
	d = calloc(1, sizeof *d);
	keys = calloc((size_t)c->size, DS_COMM_DEVKEY);
	if (!d || !keys) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory choosing the device communicator");
		goto out;
	}
	d->dm = *dm;
	d->dm.dev_id[sizeof d->dm.dev_id - 1] = '\0';
	/* every rank's device, over the host backend itself: set-up is not a
	 * collective the comms logger shows */
	ds_comm_devkey(mine, c->host, dm->device, d->dm.dev_id);
	if ((rc = c->ops->allgather(c, mine, keys, DS_COMM_DEVKEY, DS_U8, err)) < 0)
		goto out;
	path = ds_comm_devpath_choose(ds_comm_nccl_built(), prefer_nccl, c->size, keys, d->why, sizeof d->why,
				      err);
	if ((rc = path) < 0)
		goto out;
	c->dev = d;
	if (path == DS_COMM_PATH_NCCL) {
		if ((rc = ds_comm_nccl_open(c, err)) < 0) {
			c->dev = NULL;
			goto out;
		}
		c->dops = &ds_comm_nccl_ops;
	} else {
		c->dops = &ds_comm_staged_ops;
	}
	d = NULL;
	rc = 0;
out:
	free(d);
	free(keys);
	return rc;
}

const struct ds_comm_ops *ds_comm_dev_route(struct ds_comm *c, const void *a, const void *b)
{
	const struct ds_comm_devmem *dm = &c->dev->dm;
	int da = a && dm->is_dev(a, dm->ctx), db = b && dm->is_dev(b, dm->ctx);

	if (!da && !db)
		return c->ops;
	if (a && b && da != db)
		return &ds_comm_staged_ops; /* only staging mixes host and device memory */
	return c->dops;
}

void ds_comm_dev_free(struct ds_comm *c)
{
	if (!c->dev)
		return;
	if (c->dops == &ds_comm_nccl_ops)
		ds_comm_nccl_close(c);
	ds_comm_staged_free(c);
	free(c->dev);
	c->dev = NULL;
	c->dops = NULL;
}

void ds_comm_dev_abort(struct ds_comm *c)
{
	if (c->dev && c->dops == &ds_comm_nccl_ops)
		ds_comm_nccl_abort(c);
}

const char *ds_comm_devpath_why(const struct ds_comm *c)
{
	return c->dev ? c->dev->why : "";
}

size_t ds_comm_pinned_bytes(const struct ds_comm *c)
{
	return c->dev ? c->dev->pinned : 0;
}

int ds_comm_agree(struct ds_comm *c, int ok, struct ds_err *err)
{
	int64_t v = ok != 0;
	if (c->ops->allreduce(c, &v, 1, DS_I64, DS_MIN, err) < 0)
		return 0;
	return v == 1;
}

int ds_comm_share_id(struct ds_comm *c, int local_ok, const struct ds_err *local_err,
		     int (*make)(void *id, size_t n, void *ctx, struct ds_err *err), void *ctx, void *id, size_t n,
		     struct ds_err *err)
{
	/* rank 0's verdict travels with the id, so a failed make cannot leave
	 * the other ranks waiting for an id that never comes */
	struct boot { int64_t made; unsigned char id[1024]; } boot;
	struct ds_err merr = DS_ERR_INIT;
	int64_t first_bad;

	if (n > sizeof boot.id)
		return ds_err_set(err, DS_EINVAL, "ds_comm_share_id: an id of %zu bytes (at most %zu)", n,
				  sizeof boot.id);
	memset(&boot, 0, sizeof boot);
	if (c->rank == 0 && local_ok)
		boot.made = make(boot.id, n, ctx, &merr) == 0;
	DS_TRY(c->ops->broadcast(c, &boot, offsetof(struct boot, id) + n, DS_U8, 0, err));
	/* the lowest rank that failed, the world size when none did */
	first_bad = local_ok ? c->size : c->rank;
	DS_TRY(c->ops->allreduce(c, &first_bad, 1, DS_I64, DS_MIN, err));
	if (first_bad == c->size && boot.made) {
		memcpy(id, boot.id, n);
		return 0;
	}
	if (!local_ok)
		return ds_err_set(err, DS_EIO, "%s", local_err && local_err->msg[0] ? local_err->msg
					     : "setting up this rank's device for NCCL failed");
	if (first_bad < c->size)
		return ds_err_set(err, DS_EIO, "NCCL set-up failed on rank %lld (its error says why)",
				  (long long)first_bad);
	if (c->rank == 0 && merr.msg[0])
		return ds_err_set(err, DS_EIO, "%s", merr.msg);
	return ds_err_set(err, DS_EIO, "rank 0 could not make the NCCL unique id (its error says why)");
}
