/* compute.c - the backend registry, the choice of backend and device
 * (compute.h), and an optimizer whose states are a backend's memory.  The
 * choice (everything but ds_compute_probe) is a pure function of its
 * arguments, so the unit tests play any machine on the CPU.  In builds
 * with CUDA the registry holds the cuda backend: --device cuda selects it
 * where a device answers and the run is one it covers; auto stays cpu
 * (auto_cuda) until it has run on a GPU.
 */
#include "config.h"
#include "compute/compute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/gpu.h"
#include "optim/optim.h"

#ifdef HAVE_CUDA
const struct ds_compute_ops *const ds_compute_all[] = { &ds_compute_cpu, &ds_compute_cuda, NULL };
#else
const struct ds_compute_ops *const ds_compute_all[] = { &ds_compute_cpu, NULL };
#endif

/* Whether auto may choose cuda.  Not until the cuda backend has run on a
 * GPU (it is checked over the host emulation only): until then auto is
 * cpu, never touches CUDA, and says how to ask for cuda. */
static const int auto_cuda = 0;
#define HELD_BACK "the cuda backend has not yet run on a GPU; ask for it with --device cuda"

static const char *const kinds[] = { "cpu", "cuda", "auto" };

int ds_device_parse(const char *s)
{
	for (int i = 0; s && i < 3; i++)
		if (!strcmp(s, kinds[i]))
			return i;
	return -1;
}

const char *ds_device_name(int kind) { return kind >= 0 && kind < 3 ? kinds[kind] : "?"; }

static const struct ds_compute_ops *find(const char *name)
{
	for (int i = 0; ds_compute_all[i]; i++)
		if (!strcmp(ds_compute_all[i]->name, name))
			return ds_compute_all[i];
	return NULL;
}

void ds_compute_probe(struct ds_compute_env *env, int asked)
{
	memset(env, 0, sizeof *env);
#ifdef HAVE_CUDA
	env->cuda_built = 1;
#endif
	env->cuda = find("cuda");
	env->ompi_local_rank = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	env->slurm_localid = getenv("SLURM_LOCALID");
	/* a CPU run, or one that cannot use a GPU anyway (auto while it keeps
	 * to cpu), never touches CUDA */
	if (asked == DS_DEVICE_CPU || (asked == DS_DEVICE_AUTO && !auto_cuda) || !env->cuda_built || !env->cuda) {
		snprintf(env->why_none, sizeof env->why_none, "%s",
			 !env->cuda_built ? "built without CUDA" : !env->cuda ? "no usable cuda compute backend" : "not asked");
		return;
	}
	/* the runtime's count only: ds_gpu_query would load cuBLAS and NCCL */
	int n = 0;
	ds_gpu_count(&n, env->why_none, sizeof env->why_none);
	if (n > 0)
		env->device_count = n;
}

/* A local rank's text: a whole number 0..65535, else -1. */
static int parse_rank(const char *s)
{
	long v = 0;
	if (!*s)
		return -1;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9' || (v = v * 10 + (*p - '0')) > 65535)
			return -1;
	}
	return (int)v;
}

int ds_compute_local_rank(const char *ompi, const char *slurm, int *local_rank, struct ds_err *err)
{
	const char *name = ompi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "SLURM_LOCALID";
	const char *s = ompi ? ompi : slurm;
	*local_rank = 0;
	if (!s)
		return 0;
	int r = parse_rank(s);
	if (r < 0)
		return ds_err_set(err, DS_EINVAL, "%s='%.40s' is not a local rank (a whole number 0..65535): fix or "
				  "unset it (the launcher sets it)", name, s);
	*local_rank = r;
	return 0;
}

int ds_compute_device_for(int local_rank, int device_count)
{
	if (device_count < 1 || local_rank < 0)
		return -1;
	return local_rank % device_count;
}

/* Whether cuda can be had on env: 0 with *ops and *device, or the error. */
static int want_cuda(const struct ds_compute_env *env, const struct ds_compute_needs *needs,
		     const struct ds_compute_ops **ops, int *device, struct ds_err *err)
{
	if (!env->cuda_built)
		return ds_err_set(err, DS_ENOTSUP, "built without CUDA; reconfigure --with-cuda (or use --device cpu)");
	if (!env->cuda)
		return ds_err_set(err, DS_ENOTSUP, "this build has no usable cuda compute backend yet (the engine keeps "
				  "its buffers in host memory); use --device cpu");
	const char *what = needs && env->cuda->uncovered ? env->cuda->uncovered(needs) : NULL;
	if (what)
		return ds_err_set(err, DS_ENOTSUP, "%s is not on the cuda backend yet; use --device cpu", what);
	if (env->device_count < 1)
		return ds_err_set(err, DS_EIO, "no CUDA device answers (%s); use --device cpu or auto", env->why_none);
	int lr;
	DS_TRY(ds_compute_local_rank(env->ompi_local_rank, env->slurm_localid, &lr, err));
	*ops = env->cuda;
	*device = ds_compute_device_for(lr, env->device_count);
	return 0;
}

int ds_compute_select(int kind, const struct ds_compute_env *env, const struct ds_compute_needs *needs,
		      const struct ds_compute_ops **ops, int *device, char *why, size_t whysz, struct ds_err *err)
{
	*ops = &ds_compute_cpu;
	*device = -1;
	if (kind == DS_DEVICE_CPU) {
		snprintf(why, whysz, "device cpu");
		return 0;
	}
	if (kind == DS_DEVICE_CUDA) {
		DS_TRY(want_cuda(env, needs, ops, device, err));   /* on failure *ops, *device stay cpu's */
		snprintf(why, whysz, "device cuda: GPU %d of %d", *device, env->device_count);
		return 0;
	}
	if (kind != DS_DEVICE_AUTO)
		return ds_err_set(err, DS_EINVAL, "device: unknown kind %d (cpu, cuda or auto)", kind);
	struct ds_err e = DS_ERR_INIT;
	const int rc = want_cuda(env, needs, ops, device, &e);
	if (auto_cuda && rc == DS_EINVAL)   /* a GPU to use but a garbage local rank: not a reason to fall back */
		return ds_err_set(err, rc, "%s", e.msg);
	if (auto_cuda && rc == 0) {
		snprintf(why, whysz, "device auto: cuda, GPU %d of %d", *device, env->device_count);
		return 0;
	}
	*ops = &ds_compute_cpu;
	*device = -1;
	/* held back, a run the backend covers is cpu whatever the devices
	 * (the probe did not ask them), and a garbage local rank, which cpu
	 * does not use, is no error */
	const char *because = !env->cuda_built       ? "built without CUDA"
			      : !env->cuda            ? "no usable cuda compute backend yet"
			      : rc == DS_ENOTSUP      ? e.msg
			      : !auto_cuda            ? HELD_BACK
			      : env->device_count < 1 ? env->why_none
						      : e.msg;
	snprintf(why, whysz, "device auto: cpu (%s)", because);
	return 0;
}

int ds_compute_optim_create(const struct ds_compute_ops *ops, int pinned, struct ds_optim **o,
			    const struct ds_optim_params *hp, size_t n, int *failed, struct ds_err *err)
{
	*failed = -1;
	if (ops->host)
		return ds_optim_create(o, hp, n, err);
	DS_TRY(ds_optim_create_bare(o, hp, n, err));
	const size_t b = (n ? n : 1) * sizeof(float);
	for (int k = 0; k < (*o)->nstates; k++) {
		if (!((*o)->states[k] = pinned ? ops->pinned_alloc(b) : ops->alloc(b))) {
			*failed = k;
			return DS_ENOMEM;
		}
		if (pinned)
			memset((*o)->states[k], 0, b);
		else
			ops->zero((*o)->states[k], b);
	}
	return 0;
}

void ds_compute_optim_destroy(const struct ds_compute_ops *ops, int pinned, struct ds_optim *o)
{
	for (int k = 0; o && !ops->host && k < o->nstates; k++) {
		/* the backend's memory, not ds_free's */
		(pinned ? ops->pinned_free : ops->free)(o->states[k]);
		o->states[k] = NULL;
	}
	ds_optim_destroy(o);
}
