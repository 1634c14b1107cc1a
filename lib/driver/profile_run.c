/* profile_run.c - ds-profile's work: model file -> count tree -> profile.
 * The model JSON goes through lib/config's loader, so a bad file gets the
 * same one-line message as under ds-train.
 */
#include <stddef.h>
#include <string.h>

#include "config/model.h"

#include "driver/profile.h"
#include "driver/profile_run.h"
#include "model/count.h"

int ds_profile_load_model(const char *path, struct ds_model_config *m, struct ds_err *err)
{
	return ds_model_config_load(path, m, err);
}

int ds_profile_run(const struct ds_profile_opts *o, FILE *out, struct ds_profile_result *res,
		   struct ds_err *err)
{
	struct ds_model_config m;
	struct ds_count c = DS_COUNT_INIT;
	struct ds_count_opts co = { o->batch, o->seq, o->convention, o->mlm_tokens };
	struct ds_profile_view v = DS_PROFILE_VIEW_INIT;
	int rc;

	DS_TRY(ds_profile_load_model(o->model_path, &m, err));
	if (o->mlm_tokens > 0 && m.family != DS_FAMILY_BERT)
		return ds_err_set(err, DS_EINVAL, "--mlm-tokens applies to the bert family only (%s is gpt)",
				  o->model_path);
	if ((rc = ds_count_model(&m, &co, &c, err)) < 0)
		return ds_err_prefix(err, "%s: ", o->model_path);
	v.format = o->format;
	v.module_depth = o->module_depth;
	v.top_modules = o->top_modules;
	v.detailed = o->detailed;
	v.model = o->model_path;
	struct ds_profile_engine e = { 0 };
	if (o->measure) {
		struct ds_profile_measure_opts mo = { o->warmup, o->iters, o->checkpointing };
		e.micro_batch = o->batch;
		if ((rc = ds_profile_measure(&m, &mo, &c, &e, err)) < 0) {
			ds_count_release(&c);
			return rc;
		}
	}
	rc = ds_profile_render(&c, &v, o->measure ? &e : NULL, out, err);
	if (rc == 0 && res) {
		res->params = c.nodes[0].total.params;
		res->fwd_macs = c.nodes[0].total.macs;
		res->fwd_flops = c.nodes[0].total.flops;
		res->attn_macs = c.nodes[0].total.attn_macs;
	}
	ds_count_release(&c);
	return rc;
}
