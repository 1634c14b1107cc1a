/* profile_run.c - ds-profile's work: model file -> count tree -> profile.
 * The model JSON goes through lib/config's loader, so a bad file gets the
 * same one-line message as under ds-train.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "config/model.h"

#include "driver/profile.h"
#include "driver/profile_run.h"
#include "model/count.h"
#include "model/pipe.h"

int ds_profile_load_model(const char *path, struct ds_model_config *m, struct ds_err *err)
{
	return ds_model_config_load(path, m, err);
}

/* The part of the model pipeline stage o->stage runs (DeepSpeed's
 * partition over o->pp stages of tp-local parameter counts). */
static int stage_part(const struct ds_model_config *m, const struct ds_profile_opts *o, struct ds_gpt_part *part,
		      struct ds_err *err)
{
	struct ds_gpt *g = NULL;
	int *b = calloc((size_t)o->pp + 1, sizeof *b), rc;
	if (!b)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	if ((rc = ds_gpt_create_tp(&g, m, o->tp > 1 ? o->tp : 1, 0, err)) == 0 &&
	    (rc = ds_pipe_partition(g, o->pp, o->partition, b, err)) == 0)
		ds_pipe_stage_part(g, b, o->stage, part);
	ds_gpt_destroy(g);
	free(b);
	return rc;
}

int ds_profile_run(const struct ds_profile_opts *o, FILE *out, struct ds_profile_result *res,
		   struct ds_err *err)
{
	struct ds_model_config m;
	struct ds_count c = DS_COUNT_INIT;
	struct ds_gpt_part part;
	struct ds_count_opts co = { o->batch, o->seq, o->convention, o->mlm_tokens, o->tp, NULL };
	struct ds_profile_view v = DS_PROFILE_VIEW_INIT;
	const int tp = o->tp > 1 ? o->tp : 1, pp = o->pp > 1 ? o->pp : 1;
	int rc;

	DS_TRY(ds_profile_load_model(o->model_path, &m, err));
	if (o->mlm_tokens > 0 && m.family != DS_FAMILY_BERT)
		return ds_err_set(err, DS_EINVAL, "--mlm-tokens applies to the bert family only (%s is gpt)",
				  o->model_path);
	if (tp * pp > 1 && m.family != DS_FAMILY_GPT)
		return ds_err_set(err, DS_EINVAL, "--tensor-model-parallel-size and --pipeline-model-parallel-size apply "
				  "to the gpt family only (%s is bert)", o->model_path);
	if (tp * pp > 1 && o->measure)
		return ds_err_set(err, DS_EINVAL, "--measure times one process of the whole model; profile a tensor or "
				  "pipeline parallel rank without it (or ds-train's flops_profiler)");
	if (o->stage < 0 || o->stage >= pp)
		return ds_err_set(err, DS_EINVAL, "--pipe-stage %d: the stages are 0 .. %d", o->stage, pp - 1);
	if (pp > 1) {
		if ((rc = stage_part(&m, o, &part, err)) < 0)
			return ds_err_prefix(err, "%s: ", o->model_path);
		co.part = &part;
	}
	if ((rc = ds_count_model(&m, &co, &c, err)) < 0)
		return ds_err_prefix(err, "%s: ", o->model_path);
	v.format = o->format;
	v.module_depth = o->module_depth;
	v.top_modules = o->top_modules;
	v.detailed = o->detailed;
	v.model = o->model_path;
	struct ds_profile_engine e = { 0 };
	if (tp * pp > 1) {   /* one rank of a model-parallel group of tp x pp (mp_size), one replica */
		e.world_size = tp * pp;
		e.dp_size = 1;
		e.mp_size = tp * pp;
		e.micro_batch = o->batch;
	}
	if (o->measure) {
		struct ds_profile_measure_opts mo = { o->warmup, o->iters, o->checkpointing, o->device };
		e.micro_batch = o->batch;
		if ((rc = ds_profile_measure(&m, &mo, &c, &e, err)) < 0) {
			ds_count_release(&c);
			return rc;
		}
	}
	rc = ds_profile_render(&c, &v, o->measure || tp * pp > 1 ? &e : NULL, out, err);
	if (rc == 0 && res) {
		res->params = c.nodes[0].total.params;
		res->fwd_macs = c.nodes[0].total.macs;
		res->fwd_flops = c.nodes[0].total.flops;
		res->attn_macs = c.nodes[0].total.attn_macs;
	}
	ds_count_release(&c);
	return rc;
}
