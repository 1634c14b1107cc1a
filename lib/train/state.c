/* state.c - a run's checkpoint: model weights, optimizer states, the step
 * counts that drive the schedule and the data position, in the HDF5 layout
 * of DESIGN.md (lib/io/ckpt).  Tensors are stored whole under their names,
 * so a checkpoint does not depend on the world size or ZeRO stage.
 *
 * This build writes from rank 0: it holds every tensor at stage 0, and at
 * stages >= 1 the other ranks' optimizer slices are gathered to it first
 * (collective parallel-HDF5 writes are the next step). */
#include "train/train_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/ckpt.h"
#include "util/log.h"
#include "util/mem.h"

static void shape_of(const struct ds_gpt_tensor *t, uint64_t *shape)
{
	shape[0] = (uint64_t)t->shape[0];
	shape[1] = (uint64_t)t->shape[1];
}

/* Write the elements [b, e) of tensor name held at src; ranks other than 0
 * send their slice to rank 0 (allgather of a tensor-sized buffer). */
static int put_slices(struct ds_ckpt *ck, const char *name, const struct ds_gpt_tensor *t, const float *src,
		      int64_t b, int64_t en, int gathered, struct ds_comm *comm, float *tmp, struct ds_err *err)
{
	int rank = ds_comm_rank(comm);
	if (!gathered) {
		if (rank == 0)
			return ds_ckpt_tensor_write(ck, name, (uint64_t)b, (uint64_t)en, src, err);
		return 0;
	}
	/* stages >= 1: every rank holds a different slice; sum a zero buffer */
	memset(tmp, 0, sizeof(float) * (size_t)t->numel);
	if (en > b)
		memcpy(tmp + b, src, sizeof(float) * (size_t)(en - b));
	DS_TRY(ds_comm_allreduce(comm, tmp, (size_t)t->numel, DS_F32, DS_SUM, err));
	if (rank == 0)
		return ds_ckpt_tensor_write(ck, name, 0, (uint64_t)t->numel, tmp, err);
	return 0;
}

int ds_train_save(const char *dir, struct ds_engine *e, const struct ds_train_setup *s,
		  const struct ds_train_state *st, struct ds_comm *comm, struct ds_err *err)
{
	const struct ds_gpt *m = ds_engine_model(e);
	int rank = ds_comm_rank(comm), sharded = s->eng.zero_stage >= 1 && s->W > 1;
	int64_t pb, pe;
	struct ds_ckpt *ck = NULL;
	char *cfg_json = ds_config_to_json(s->cfg, 0);
	char *model_json = ds_model_config_to_json(&s->model, 0);
	float *tmp = NULL;
	int rc = 0;
	if (!cfg_json || !model_json) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory serialising the configuration");
		goto out;
	}
	if (sharded) {
		int64_t maxn = 0;
		for (int i = 0; i < ds_gpt_num_tensors(m); i++)
			if (ds_gpt_tensor(m, i)->numel > maxn)
				maxn = ds_gpt_tensor(m, i)->numel;
		if (!(tmp = ds_alloc(sizeof(float) * (size_t)maxn))) {
			rc = ds_err_set(err, DS_ENOMEM, "out of memory for a checkpoint buffer");
			goto out;
		}
	}
	if (rank == 0) {
		struct ds_ckpt_meta meta = { .step = st->iteration, .consumed_samples = st->consumed,
					     .world_size = s->W, .zero_stage = s->eng.zero_stage, .dtype = "fp32",
					     .config_json = cfg_json, .model_json = model_json };
		rc = ds_ckpt_create(&ck, dir, &meta, err);
	}
	/* every rank learns whether rank 0 could start the save */
	int64_t ok = rc == 0;
	if (s->W > 1)
		ds_comm_allreduce(comm, &ok, 1, DS_I64, DS_MIN, NULL);
	if (!ok) {
		if (rc == 0)
			rc = ds_err_set(err, DS_EIO, "rank 0 could not start the checkpoint in %s", dir);
		goto out;
	}
	for (int i = 0; i < ds_gpt_num_tensors(m) && rc == 0; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(m, i);
		char name[DS_CKPT_NAME_MAX];
		uint64_t shape[2];
		shape_of(t, shape);
		snprintf(name, sizeof name, "model/%s", t->name);
		if (rank == 0)
			rc = ds_ckpt_tensor_create(ck, name, DS_CKPT_F32, t->ndim, shape, err);
		/* stage 3: each rank holds a slice of the parameters too */
		float *pp = ds_engine_param_range(e, i, &pb, &pe);
		if (rc == 0)
			rc = put_slices(ck, name, t, pp, pb, pe, ds_engine_param_partitioned(e, i), comm, tmp, err);
		for (int k = 0; k < ds_engine_num_states(e) && rc == 0; k++) {
			int64_t b, en;
			const char *sn = ds_engine_state_name(e, k);
			float *p = ds_engine_state(e, i, sn, &b, &en);
			snprintf(name, sizeof name, "optimizer/%s/%s", sn, t->name);
			if (rank == 0)
				rc = ds_ckpt_tensor_create(ck, name, DS_CKPT_F32, t->ndim, shape, err);
			if (rc == 0)
				rc = put_slices(ck, name, t, p, b, en, sharded, comm, tmp, err);
		}
	}
	if (rank == 0 && rc == 0) {
		rc = ds_ckpt_attr_set_i64(ck, "optimizer", "step", ds_engine_steps(e), err);
		if (!rc) rc = ds_ckpt_attr_set_str(ck, "optimizer", "type", ds_optim_type_name(s->eng.optim.type), err);
		if (!rc) rc = ds_ckpt_attr_set_i64(ck, "scheduler", "steps", st->sched_steps, err);
		if (!rc) rc = ds_ckpt_attr_set_str(ck, "scheduler", "type", ds_sched_type_name(s->sched.type), err);
		if (!rc) rc = ds_ckpt_attr_set_i64(ck, "data", "consumed_samples", st->consumed, err);
		if (!rc) rc = ds_ckpt_attr_set_i64(ck, "data", "seed", (int64_t)s->eng.seed, err);
		if (!rc) rc = ds_ckpt_attr_set_i64(ck, "data", "skipped_steps", st->skipped, err);
		if (!rc) rc = ds_ckpt_attr_set_i64(ck, "rng", "seed", (int64_t)s->eng.seed, err);
		if (!rc) rc = ds_ckpt_commit(ck, err);
	}
	ok = rc == 0;
	if (s->W > 1)
		ds_comm_allreduce(comm, &ok, 1, DS_I64, DS_MIN, NULL);
	if (!ok && rc == 0)
		rc = ds_err_set(err, DS_EIO, "checkpoint %s/global_step%lld failed on another rank", dir,
				st->iteration);
out:
	ds_ckpt_close(ck);
	ds_free(tmp);
	free(cfg_json);
	free(model_json);
	return rc;
}

static int read_tensor(struct ds_ckpt *ck, const char *name, const struct ds_gpt_tensor *t, int64_t b,
		       int64_t en, float *dst, struct ds_err *err)
{
	struct ds_ckpt_tensor_info info;
	DS_TRY(ds_ckpt_tensor_info(ck, name, &info, err));
	if (info.dtype != DS_CKPT_F32 || info.numel != (uint64_t)t->numel || info.ndim != t->ndim ||
	    info.shape[0] != (uint64_t)t->shape[0] || (t->ndim > 1 && info.shape[1] != (uint64_t)t->shape[1]))
		return ds_err_set(err, DS_EINVAL,
				  "%s: %s has shape/dtype %s[%llu%s] but the model needs f32[%lld%s]; the checkpoint "
				  "is of another model (check --model)", ds_ckpt_file(ck), name,
				  ds_ckpt_dtype_name(info.dtype), (unsigned long long)info.shape[0],
				  info.ndim > 1 ? ",..." : "", (long long)t->shape[0], t->ndim > 1 ? ",..." : "");
	if (en <= b)
		return 0;
	return ds_ckpt_tensor_read(ck, name, (uint64_t)b, (uint64_t)en, dst, err);
}

int ds_train_load(const char *dir, const char *tag, int weights_only, struct ds_engine *e,
		  const struct ds_train_setup *s, struct ds_train_state *st, char **tag_out, struct ds_err *err)
{
	struct ds_ckpt *ck;
	struct ds_ckpt_meta meta;
	const struct ds_gpt *m = ds_engine_model(e);
	int64_t v;
	DS_TRY(ds_ckpt_open(&ck, dir, tag, err));
	int rc = ds_ckpt_meta_get(ck, &meta, err);
	if (rc == 0 && strcmp(meta.dtype ? meta.dtype : "fp32", "fp32"))
		rc = ds_err_set(err, DS_EINVAL, "%s: dtype %s: this build loads fp32 checkpoints only",
				ds_ckpt_file(ck), meta.dtype);
	for (int i = 0; i < ds_gpt_num_tensors(m) && rc == 0; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(m, i);
		char name[DS_CKPT_NAME_MAX];
		snprintf(name, sizeof name, "model/%s", t->name);
		int64_t pb, pe;
		float *pp = ds_engine_param_range(e, i, &pb, &pe);
		rc = read_tensor(ck, name, t, pb, pe, pp, err);
		for (int k = 0; k < ds_engine_num_states(e) && rc == 0 && !weights_only; k++) {
			int64_t b, en;
			const char *sn = ds_engine_state_name(e, k);
			float *p = ds_engine_state(e, i, sn, &b, &en);
			snprintf(name, sizeof name, "optimizer/%s/%s", sn, t->name);
			struct ds_ckpt_tensor_info probe;
			if (ds_ckpt_tensor_info(ck, name, &probe, NULL) < 0) {
				rc = ds_err_set(err, DS_EINVAL,
						"%s: no optimizer state %s (saved with another optimizer?); use "
						"--no-load-optim to load the weights only", ds_ckpt_file(ck), name);
				break;
			}
			rc = read_tensor(ck, name, t, b, en, p, err);
		}
	}
	memset(st, 0, sizeof *st);
	if (rc == 0 && !weights_only) {
		st->iteration = meta.step;
		st->consumed = meta.consumed_samples;
		rc = ds_ckpt_attr_get_i64(ck, "optimizer", "step", &v, err);
		if (rc == 0)
			ds_engine_set_steps(e, v);
		if (rc == 0 && (rc = ds_ckpt_attr_get_i64(ck, "scheduler", "steps", &v, err)) == 0)
			st->sched_steps = v;
		if (rc == 0 && (rc = ds_ckpt_attr_get_i64(ck, "data", "skipped_steps", &v, err)) == 0)
			st->skipped = v;
		if (rc == 0 && ds_ckpt_attr_get_i64(ck, "data", "seed", &v, NULL) == 0 && (uint64_t)v != s->eng.seed)
			ds_log_warn("%s: saved with --seed %lld, resumed with %llu: the data order and dropout "
				    "change from here", ds_ckpt_file(ck), (long long)v,
				    (unsigned long long)s->eng.seed);
	}
	if (rc == 0 && tag_out)
		*tag_out = strdup(ds_ckpt_tag(ck));
	ds_ckpt_close(ck);
	return rc;
}
