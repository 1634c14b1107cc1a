/* profile_measure.c - ds-profile --measure: time the GPT's forward,
 * backward (per-layer forward through the segment hooks) and an Adam step
 * (DeepSpeed's defaults) on this machine's compute backend (--device: the
 * CPU, or a GPU through the cuda backend), and in the same run the fp32
 * matrix-product ceiling of that backend (sgemm on the CPU, cuBLAS's on a
 * GPU) for MFU.
 *
 * Warm-up iterations first, then the mean over timed iterations.  The
 * parameters are initialised as ds-train would (seed 1234); tokens are a
 * fixed pseudo-random draw, which does not change the work done.  A device
 * backend queues its work: every clock reading waits for it first
 * (check), as DeepSpeed's profiler synchronizes around each module.
 */
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "cpu/ceiling.h"
#include "driver/profile.h"
#include "driver/profile_run.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/rng.h"
#include "util/timer.h"

struct seg_clock {
	const struct ds_compute_ops *ops;
	double *t0, *sum;   /* per segment */
	int nseg;
	int on;
	int rc;             /* the backend's first error in a hook */
	struct ds_err err;
};

/* the time once the backend's queued work is done */
static double now_synced(struct seg_clock *k)
{
	if (k->rc == 0)
		k->rc = k->ops->check(&k->err);
	return ds_now();
}

static int pre_hook(void *ctx, int seg, int phase, float **params, float **grads)
{
	struct seg_clock *k = ctx;
	(void)params;
	(void)grads;
	if (k->on && phase == DS_GPT_FORWARD && seg < k->nseg)
		k->t0[seg] = now_synced(k);
	return 0;
}

static int post_hook(void *ctx, int seg, int phase)
{
	struct seg_clock *k = ctx;
	if (k->on && phase == DS_GPT_FORWARD && seg < k->nseg)
		k->sum[seg] += now_synced(k) - k->t0[seg];
	return 0;
}

/* A device backend's fp32 GEMM ceiling (FLOP/s) measured now: square
 * products, the size doubled from 256 while one takes under 20 ms (at most
 * 4096), then repeated for about 0.2 s; 0 when the buffers do not fit. */
static double device_ceiling(const struct ds_compute_ops *ops, struct ds_err *err)
{
	double best = 0;
	for (int n = 256; n <= 4096; n *= 2) {
		const size_t b = (size_t)n * (size_t)n * sizeof(float);
		float *a = ops->alloc(b), *bb = ops->alloc(b), *c = ops->alloc(b);
		if (!a || !bb || !c) {
			ops->free(a);
			ops->free(bb);
			ops->free(c);
			break;
		}
		ops->zero(a, b);
		ops->zero(bb, b);
		ops->gemm(-1, NULL, 0, 0, n, n, n, 1.0f, a, n, bb, n, 0.0f, c, n);   /* warm-up */
		if (ops->check(err) < 0)
			best = -1;
		double t0 = ds_now(), t = 0;
		int reps = 0;
		while (best >= 0 && (reps < 1 || t < 0.2) && reps < 1000) {
			ops->gemm(-1, NULL, 0, 0, n, n, n, 1.0f, a, n, bb, n, 0.0f, c, n);
			if (ops->check(err) < 0)
				best = -1;
			reps++;
			t = ds_now() - t0;
		}
		ops->free(a);
		ops->free(bb);
		ops->free(c);
		if (best < 0)
			return -1;
		const double rate = 2.0 * n * n * (double)n * reps / (t > 0 ? t : 1e-9);
		if (rate > best)
			best = rate;
		if (t / reps > 0.02)
			break;
	}
	return best;
}

/* The backend o->device asks for, bound to its device (ds-train's choice:
 * auto is cpu until the cuda backend has run on a GPU). */
static int pick_backend(const struct ds_profile_measure_opts *o, const struct ds_compute_ops **ops,
			struct ds_err *err)
{
	struct ds_compute_env env;
	struct ds_compute_needs needs = { 0 };
	struct ds_err e = DS_ERR_INIT;
	char why[256];
	int device = -1;
	needs.tp = needs.pp = 1;
	ds_compute_probe(&env, o->device);
	int rc = ds_compute_select(o->device, &env, &needs, ops, &device, why, sizeof why, &e);
	if (rc < 0)
		return ds_err_set(err, rc, "--device %s: %s", ds_device_name(o->device), e.msg);
	ds_log_info("--measure: %s", why);
	if (!(*ops)->host && (rc = (*ops)->init(device, err)) < 0)
		return rc;
	return 0;
}

int ds_profile_measure(const struct ds_model_config *cfg, const struct ds_profile_measure_opts *o,
		       struct ds_count *c, struct ds_profile_engine *e, struct ds_err *err)
{
	struct ds_gpt *m = NULL;
	struct ds_gpt_ws *ws = NULL;
	struct ds_optim *opt = NULL;
	const struct ds_compute_ops *ops = &ds_compute_cpu;
	float *params = NULL, *grads = NULL, *hinit = NULL;
	int32_t *tok = NULL;
	struct seg_clock k = { .err = DS_ERR_INIT };
	int B = c->opts.batch, T = c->opts.seq, rc;

	if (cfg->family != DS_FAMILY_GPT)
		return ds_err_set(err, DS_EINVAL, "--measure: only the gpt family is trainable (bert is profile-only)");
	DS_TRY(pick_backend(o, &ops, err));
	k.ops = ops;
	if ((rc = ds_gpt_create(&m, cfg, err)) < 0)
		goto out;
	ds_gpt_set_compute(m, ops);
	struct ds_gpt_ws_opts wo = { .B = B, .T = T, .checkpointing = o->checkpointing, .dropout_seed = 1234 };
	if ((rc = ds_gpt_ws_create(&ws, m, &wo, err)) < 0)
		goto out;
	int64_t n = ds_gpt_num_params(m);
	params = ops->alloc((size_t)n * sizeof(float));
	grads = ops->alloc((size_t)n * sizeof(float));
	hinit = ops->host ? params : malloc((size_t)n * sizeof(float));
	tok = ds_alloc((size_t)2 * B * T * sizeof(int32_t));   /* host memory, as the engine's */
	k.nseg = ds_gpt_num_segments(m);
	k.t0 = calloc((size_t)k.nseg, sizeof(double));
	k.sum = calloc((size_t)k.nseg, sizeof(double));
	if (!params || !grads || !hinit || !tok || !k.t0 || !k.sum) {
		rc = ds_err_set(err, DS_ENOMEM, "--measure: out of %s memory for %lld parameters at batch %d x %d",
				params && grads ? "host" : ops->name, (long long)n, B, T);
		goto out;
	}
	struct ds_optim_params hp;
	int failed;
	ds_optim_params_init(&hp, DS_OPTIM_ADAM);
	if ((rc = ds_compute_optim_create(ops, 0, &opt, &hp, (size_t)n, &failed, err)) < 0) {
		if (failed >= 0)
			rc = ds_err_set(err, DS_ENOMEM, "--measure: out of %s memory for the Adam states (%lld floats each)",
					ops->name, (long long)n);
		goto out;
	}
	ds_gpt_init(m, 1234, hinit, 0, n);
	if (!ops->host)
		ops->from_host(params, hinit, (size_t)n * sizeof(float));
	struct ds_rng r;
	ds_rng_init(&r, 1234, 0x70726f66, 0);
	for (int64_t i = 0; i < 2LL * B * T; i++)
		tok[i] = (int32_t)(ds_rng_uniform(&r, (uint64_t)i) * cfg->vocab_size) % cfg->vocab_size;
	struct ds_gpt_hooks h = { .ctx = &k, .pre = pre_hook, .post = post_hook };
	ds_gpt_ws_set_hooks(ws, &h);

	double fwd = 0, bwd = 0, step = 0;
	int iters = o->iters > 0 ? o->iters : 3;
	for (int it = 0; it < o->warmup + iters; it++) {
		float loss;
		int timed = it >= o->warmup;
		k.on = timed;
		ops->zero(grads, (size_t)n * sizeof(float));
		double t0 = now_synced(&k);
		if ((rc = ds_gpt_forward(m, ws, params, tok, tok + (size_t)B * T, B, T, it, 0, 1, &loss, err)) < 0)
			goto out;
		double t1 = now_synced(&k);
		if ((rc = ds_gpt_backward(m, ws, params, grads, 1.0f, err)) < 0)
			goto out;
		double t2 = now_synced(&k);
		if ((rc = ops->optim_step(opt, params, grads, 1.0f, err)) < 0)
			goto out;
		double t3 = now_synced(&k);
		if (k.rc < 0) {
			rc = ds_err_set(err, k.rc, "--measure: %s", k.err.msg);
			goto out;
		}
		if (timed) {
			fwd += t1 - t0;
			bwd += t2 - t1;
			step += t3 - t2;
		}
	}
	e->fwd_s = fwd / iters;
	e->bwd_s = bwd / iters;
	e->step_s = step / iters;
	e->breakdown = 1;
	e->recompute_fwd_factor = o->checkpointing ? 1.0 : 0.0;
	/* the tree: root = whole forward, block i = segment 1+i */
	c->nodes[0].latency_s = e->fwd_s;
	for (int i = 0; i < c->n; i++) {
		const struct ds_count_node *nd = &c->nodes[i];
		if (nd->parent >= 0 && c->nodes[nd->parent].is_list) {
			int l = atoi(nd->name);
			if (1 + l < k.nseg)
				c->nodes[i].latency_s = k.sum[1 + l] / iters;
		}
	}
	if (ops->host) {
		double g = ds_ceiling_sgemm_gflops(0, 1.0);
		if (g > 0)
			e->peak_flops = g * 1e9;
	} else {
		/* the model's buffers go first, so that the ceiling's fit */
		ops->free(params);
		ops->free(grads);
		params = grads = NULL;
		ds_compute_optim_destroy(ops, 0, opt);
		opt = NULL;
		ds_gpt_ws_destroy(ws);
		ws = NULL;
		double g = device_ceiling(ops, err);
		if (g < 0) {
			rc = ds_err_prefix(err, "--measure: the %s GEMM ceiling: ", ops->name);
			goto out;
		}
		e->peak_flops = g;
	}
	rc = 0;
out:
	free(k.t0);
	free(k.sum);
	ds_free(tok);
	if (hinit != params)
		free(hinit);
	ops->free(params);
	ops->free(grads);
	ds_compute_optim_destroy(ops, 0, opt);
	ds_gpt_ws_destroy(ws);
	ds_gpt_destroy(m);
	return rc;
}
