/* profile_measure.c - ds-profile --measure: time the GPT's forward,
 * backward (per-layer forward through the segment hooks) and an Adam step
 * (DeepSpeed's defaults) on this machine, and the sgemm ceiling in the same
 * run for MFU.
 *
 * Warm-up iterations first, then the mean over timed iterations.  The
 * parameters are initialised as ds-train would (seed 1234); tokens are a
 * fixed pseudo-random draw, which does not change the work done.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/ceiling.h"
#include "driver/profile.h"
#include "driver/profile_run.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "util/mem.h"
#include "util/rng.h"
#include "util/timer.h"

struct seg_clock {
	double *t0, *sum;   /* per segment */
	int nseg;
	int on;
};

static int pre_hook(void *ctx, int seg, int phase, float **params, float **grads)
{
	struct seg_clock *k = ctx;
	if (k->on && phase == DS_GPT_FORWARD && seg < k->nseg)
		k->t0[seg] = ds_now();
	return 0;
}

static int post_hook(void *ctx, int seg, int phase)
{
	struct seg_clock *k = ctx;
	if (k->on && phase == DS_GPT_FORWARD && seg < k->nseg)
		k->sum[seg] += ds_now() - k->t0[seg];
	return 0;
}

int ds_profile_measure(const struct ds_model_config *cfg, const struct ds_profile_measure_opts *o,
		       struct ds_count *c, struct ds_profile_engine *e, struct ds_err *err)
{
	struct ds_gpt *m = NULL;
	struct ds_gpt_ws *ws = NULL;
	struct ds_optim *opt = NULL;
	float *params = NULL, *grads = NULL;
	int32_t *tok = NULL;
	struct seg_clock k = { 0 };
	int B = c->opts.batch, T = c->opts.seq, rc;

	if (cfg->family != DS_FAMILY_GPT)
		return ds_err_set(err, DS_EINVAL, "--measure: only the gpt family is trainable (bert is profile-only)");
	if ((rc = ds_gpt_create(&m, cfg, err)) < 0)
		goto out;
	struct ds_gpt_ws_opts wo = { .B = B, .T = T, .checkpointing = o->checkpointing, .dropout_seed = 1234 };
	if ((rc = ds_gpt_ws_create(&ws, m, &wo, err)) < 0)
		goto out;
	int64_t n = ds_gpt_num_params(m);
	params = ds_alloc((size_t)n * sizeof(float));
	grads = ds_alloc((size_t)n * sizeof(float));
	tok = ds_alloc((size_t)2 * B * T * sizeof(int32_t));
	k.nseg = ds_gpt_num_segments(m);
	k.t0 = calloc((size_t)k.nseg, sizeof(double));
	k.sum = calloc((size_t)k.nseg, sizeof(double));
	if (!params || !grads || !tok || !k.t0 || !k.sum) {
		rc = ds_err_set(err, DS_ENOMEM, "--measure: out of memory for %lld parameters at batch %d x %d",
				(long long)n, B, T);
		goto out;
	}
	struct ds_optim_params hp;
	ds_optim_params_init(&hp, DS_OPTIM_ADAM);
	if ((rc = ds_optim_create(&opt, &hp, (size_t)n, err)) < 0)
		goto out;
	ds_gpt_init(m, 1234, params, 0, n);
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
		memset(grads, 0, (size_t)n * sizeof(float));
		double t0 = ds_now();
		if ((rc = ds_gpt_forward(m, ws, params, tok, tok + (size_t)B * T, B, T, it, 0, 1, &loss, err)) < 0)
			goto out;
		double t1 = ds_now();
		if ((rc = ds_gpt_backward(m, ws, params, grads, 1.0f, err)) < 0)
			goto out;
		double t2 = ds_now();
		if ((rc = ds_optim_step(opt, params, grads, 1.0f, NULL, 0, err)) < 0)
			goto out;
		double t3 = ds_now();
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
	double g = ds_ceiling_sgemm_gflops(0, 1.0);
	if (g > 0)
		e->peak_flops = g * 1e9;
	rc = 0;
out:
	free(k.t0);
	free(k.sum);
	ds_free(tok);
	ds_free(params);
	ds_free(grads);
	ds_optim_destroy(opt);
	ds_gpt_ws_destroy(ws);
	ds_gpt_destroy(m);
	return rc;
}
