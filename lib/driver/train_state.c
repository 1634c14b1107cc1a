/* state.c - a run's checkpoint: model weights, optimizer states, the step
 * counts that drive the schedule and the data position, in the HDF5 layout
 * of DESIGN.md (lib/io/ckpt).  Tensors are stored whole under their names,
 * so a checkpoint does not depend on the world size or ZeRO stage.
 *
 * Every rank writes its ZeRO slice of every tensor (stage 0 included, where
 * each holds all of it) into the same file with parallel HDF5; one rank
 * writes serially.  Nothing is renamed unless every rank succeeded (see
 * lib/io/ckpt.h).  With tensor and pipeline parallelism a rank holds
 * shards of some tensors: each writes its shard's elements at their
 * logical places (ds_gpt_tensor_global), run by run, and reads back
 * whatever layout it now has from the whole tensors.
 * State offloaded to NVMe (ZeRO-Infinity) passes through host memory a
 * piece at a time (ds_engine_ckpt_piece), so a checkpoint of an offloaded
 * run is the same as any other. */
#include "driver/train_int.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "driver/ckpt_need.h"
#include "io/ckpt.h"
#include "util/log.h"

static void shape_of(const struct ds_gpt_tensor *t, uint64_t *shape)
{
	shape[0] = (uint64_t)t->gshape[0];
	shape[1] = (uint64_t)t->gshape[1];
}

/* Write this rank's part of tensor t: its checkpoint slice [sb, se)
 * (ds_engine_save_slice: the ZeRO split of the segment, whatever the stage;
 * shard element indices) out of the range [hb, he) it holds at src, each
 * run of shard elements at its logical place.  Every rank calls this for
 * every tensor, even with nothing to write. */
static int put_slice(struct ds_ckpt *ck, const char *name, const struct ds_gpt_tensor *t, const float *src, int64_t hb,
		     int64_t he, int64_t sb, int64_t se, struct ds_err *err)
{
	int64_t b = sb > hb ? sb : hb, en = se < he ? se : he;
	if (en <= b || !src)
		return ds_ckpt_tensor_write(ck, name, 0, 0, src, err);
	for (int64_t i = b; i < en;) {
		int64_t run, g = ds_gpt_tensor_global(t, i, &run);
		if (run > en - i)
			run = en - i;
		DS_TRY(ds_ckpt_tensor_write(ck, name, (uint64_t)g, (uint64_t)(g + run), src + (i - hb), err));
		i += run;
	}
	return 0;
}

/* FNV-1a of a string: all ranks compare tags by comparing these. */
static uint64_t tag_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* checkpoint.tag_validation (DeepSpeed's meanings): with more than one
 * rank, Warn and Fail compare every rank's tag (hash, allreduce min/max);
 * a mismatch is logged (Warn) or fails the save before anything is
 * written (Fail); Ignore compares nothing.  The ranks share one file, so
 * the save then goes on under rank 0's step.  Test-only:
 * DS_TEST_FAULT_CKPT_TAG_RANK=R gives rank R the tag of the next step. */
static int agree_on_tag(const struct ds_train_setup *s, struct ds_comm *comm, int64_t *step, struct ds_err *err)
{
	const char *f = getenv("DS_TEST_FAULT_CKPT_TAG_RANK");
	const char *mode = s->tag_validation ? s->tag_validation : "WARN";
	int rank = ds_comm_rank(comm);
	char tag[64];
	if (f && *f && atoi(f) == rank)
		(*step)++;
	if (s->W <= 1)
		return 0;
	snprintf(tag, sizeof tag, "global_step%lld", (long long)*step);
	if (strcasecmp(mode, "IGNORE") != 0) {
		int64_t h = (int64_t)(tag_hash(tag) >> 1), v[2] = { h, -h };  /* min and -max */
		DS_TRY(ds_comm_allreduce(comm, v, 2, DS_I64, DS_MIN, err));
		if (v[0] != -v[1]) {
			if (strcasecmp(mode, "FAIL") == 0)
				return ds_err_set(err, DS_EINVAL, "checkpoint tag %s of rank %d is not the same on all "
						  "ranks (checkpoint.tag_validation is Fail); nothing was saved", tag, rank);
			ds_log_warn("checkpoint tag %s (rank 0's) is not the same on all ranks; saving under it "
				    "(checkpoint.tag_validation is Warn)", tag);
		}
	}
	return ds_comm_broadcast(comm, step, 1, DS_I64, 0, err);
}

int ds_train_save(const char *dir, struct ds_engine *e, const struct ds_train_setup *s,
		  const struct ds_train_state *st, struct ds_comm *comm, struct ds_err *err)
{
	const struct ds_gpt *m = ds_engine_model(e);
	struct ds_gpt *whole = NULL;   /* expert parallelism: every rank lists every expert */
	struct ds_ckpt *ck = NULL;
	struct ds_err later = DS_ERR_INIT;  /* each call's own error; the writer keeps the first for commit */
	char *cfg_json = ds_config_to_json(s->cfg, 0);
	char *model_json = ds_model_config_to_json(&s->model, 0);
	char states[256] = "";
	int64_t step = st->iteration;
	int rc = 0;
	if (!cfg_json || !model_json) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory serialising the configuration");
		goto out;
	}
	if ((rc = agree_on_tag(s, comm, &step, err)) < 0)
		goto out;
	/* the datasets are created collectively: with expert parallelism each
	 * rank holds only its experts, so all ranks walk the whole model's
	 * tensors and write what they hold (an expert is written whole by the
	 * ranks of its expert-data-parallel group, each its ZeRO slice) */
	if (ds_gpt_ep(m, NULL) > 1 && (rc = ds_gpt_create(&whole, ds_gpt_config(m), err)) < 0)
		goto out;
	struct ds_ckpt_meta meta = { .step = step, .consumed_samples = st->consumed, .world_size = s->W,
				     .zero_stage = s->eng.zero_stage, .dtype = "fp32", .config_json = cfg_json,
				     .model_json = model_json };
	/* every rank writes its slices; one rank alone is a serial save */
	if ((rc = ds_ckpt_create_comm(&ck, dir, &meta, s->W > 1 ? comm : NULL, err)) < 0)
		goto out;
	/* Every rank makes every call, whatever failed before (the tensor
	 * calls are collective for W > 1): the writer remembers each rank's
	 * first failure and commit returns the one all ranks agree on. */
	const struct ds_gpt *all = whole ? whole : m;
	for (int gi = 0; gi < ds_gpt_num_tensors(all); gi++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(all, gi);
		const int i = whole ? ds_gpt_find(m, t->name) : gi;   /* -1: another rank's expert */
		char name[DS_CKPT_NAME_MAX];
		uint64_t shape[2];
		int64_t sb = 0, se = 0, hb = 0, he = 0;
		shape_of(t, shape);
		if (i >= 0)
			ds_engine_save_slice(e, i, &sb, &se);
		snprintf(name, sizeof name, "model/%s", t->name);
		ds_ckpt_tensor_create(ck, name, DS_CKPT_F32, t->ndim, shape, &later);
		for (int k = 0; k < ds_engine_num_states(e); k++) {
			snprintf(name, sizeof name, "optimizer/%s/%s", ds_engine_state_name(e, k), t->name);
			ds_ckpt_tensor_create(ck, name, DS_CKPT_F32, t->ndim, shape, &later);
		}
		for (int j = 0, np = i >= 0 ? ds_engine_ckpt_pieces(e, i) : 1; j < np; j++) {
			struct ds_err pe = DS_ERR_INIT;
			if (i >= 0 && ds_engine_ckpt_piece(e, i, j, 0, &pe) < 0)
				ds_ckpt_fail(ck, &pe);  /* a swap file failed: the save is lost on every rank */
			snprintf(name, sizeof name, "model/%s", t->name);
			const float *pp = i >= 0 ? ds_engine_param_range(e, i, &hb, &he) : NULL;
			put_slice(ck, name, t, pp, hb, he, sb, se, &later);
			for (int k = 0; k < ds_engine_num_states(e); k++) {
				const char *sn = ds_engine_state_name(e, k);
				const float *p = i >= 0 ? ds_engine_state(e, i, sn, &hb, &he) : NULL;
				snprintf(name, sizeof name, "optimizer/%s/%s", sn, t->name);
				put_slice(ck, name, t, p, hb, he, sb, se, &later);
			}
		}
	}
	ds_train_save_onebit(ck, e, s->W, ds_comm_rank(comm), &later);
	for (int k = 0; k < ds_engine_num_states(e); k++)
		snprintf(states + strlen(states), sizeof states - strlen(states), "%s%s", k ? "," : "",
			 ds_engine_state_name(e, k));
	ds_ckpt_attr_set_i64(ck, "optimizer", "step", ds_engine_steps(e), &later);
	ds_ckpt_attr_set_str(ck, "optimizer", "type", ds_optim_type_name(s->eng.optim.type), &later);
	ds_ckpt_attr_set_str(ck, "optimizer", "states", states, &later);
	ds_ckpt_attr_set_i64(ck, "scheduler", "steps", st->sched_steps, &later);
	ds_ckpt_attr_set_str(ck, "scheduler", "type", ds_sched_type_name(s->sched.type), &later);
	ds_ckpt_attr_set_i64(ck, "data", "consumed_samples", st->consumed, &later);
	ds_ckpt_attr_set_i64(ck, "data", "seed", (int64_t)s->eng.seed, &later);
	ds_ckpt_attr_set_i64(ck, "data", "skipped_steps", st->skipped, &later);
	ds_ckpt_attr_set_i64(ck, "rng", "seed", (int64_t)s->eng.seed, &later);
	const struct ds_scaler *sc = ds_engine_scaler(e);
	ds_ckpt_attr_set_i64(ck, "loss_scaler", "kind", sc->kind, &later);
	ds_ckpt_attr_set_f64(ck, "loss_scaler", "cur_scale", sc->cur_scale, &later);
	ds_ckpt_attr_set_f64(ck, "loss_scaler", "prev_scale", sc->prev_scale, &later);
	ds_ckpt_attr_set_i64(ck, "loss_scaler", "cur_iter", sc->cur_iter, &later);
	ds_ckpt_attr_set_i64(ck, "loss_scaler", "last_overflow_iter", sc->last_overflow_iter, &later);
	ds_ckpt_attr_set_i64(ck, "loss_scaler", "cur_hysteresis", sc->cur_hysteresis, &later);
	/* the vote: the same outcome and message on every rank */
	rc = ds_ckpt_commit(ck, err);
out:
	ds_ckpt_close(ck);
	ds_gpt_destroy(whole);
	free(cfg_json);
	free(model_json);
	return rc;
}

/* Read shard elements [b, en) of tensor t into dst: one read of the
 * logical elements they span (the chunks' CRCs are checked once), then
 * each run of shard elements from its logical place. */
static int read_tensor(struct ds_ckpt *ck, const char *name, const struct ds_gpt_tensor *t, int64_t b,
		       int64_t en, float *dst, struct ds_err *err)
{
	struct ds_ckpt_tensor_info info;
	DS_TRY(ds_ckpt_tensor_info(ck, name, &info, err));
	if (info.dtype != DS_CKPT_F32 || info.numel != (uint64_t)t->gnumel || info.ndim != t->ndim ||
	    info.shape[0] != (uint64_t)t->gshape[0] || (t->ndim > 1 && info.shape[1] != (uint64_t)t->gshape[1]))
		return ds_err_set(err, DS_EINVAL,
				  "%s: %s has shape/dtype %s[%llu%s] but the model needs f32[%lld%s]; the checkpoint "
				  "is of another model (check --model)", ds_ckpt_file(ck), name,
				  ds_ckpt_dtype_name(info.dtype), (unsigned long long)info.shape[0],
				  info.ndim > 1 ? ",..." : "", (long long)t->gshape[0], t->ndim > 1 ? ",..." : "");
	if (en <= b)
		return 0;
	if (t->split == DS_TP_NONE)
		return ds_ckpt_tensor_read(ck, name, (uint64_t)b, (uint64_t)en, dst, err);
	int64_t g0 = ds_gpt_tensor_global(t, b, NULL), g1 = ds_gpt_tensor_global(t, en - 1, NULL) + 1;
	float *span = malloc((size_t)(g1 - g0) * sizeof(float));
	if (!span)
		return ds_err_set(err, DS_ENOMEM, "out of memory reading %s", name);
	int rc = ds_ckpt_tensor_read(ck, name, (uint64_t)g0, (uint64_t)g1, span, err);
	for (int64_t i = b; rc == 0 && i < en;) {
		int64_t run, g = ds_gpt_tensor_global(t, i, &run);
		if (run > en - i)
			run = en - i;
		memcpy(dst + (i - b), span + (g - g0), (size_t)run * sizeof(float));
		i += run;
	}
	free(span);
	return rc;
}

/* Everything the load below reads, for ds_ckpt_check_need. */
static void need_of(struct ds_engine *e, const struct ds_ckpt_need_tensor *nt, int weights_only, const char **states,
		    struct ds_ckpt_need *n)
{
	int k = weights_only ? 0 : ds_engine_num_states(e);
	for (int i = 0; i < k; i++)
		states[i] = ds_engine_state_name(e, i);
	*n = (struct ds_ckpt_need){ nt, ds_gpt_num_tensors(ds_engine_model(e)), 0, states, k, !weights_only };
}

/* ds_ckpt_check_need with what to do about it. */
static int check_need(struct ds_ckpt *ck, const struct ds_ckpt_need *n, struct ds_err *err)
{
	int rc = ds_ckpt_check_need(ck, n, NULL, NULL, err);
	if (rc < 0) {
		char m[DS_ERR_MSG_MAX];
		snprintf(m, sizeof m, "%s", err->msg);
		ds_err_set(err, rc, "%.300s; saved for another model (check --model) or optimizer, or weights only "
			   "(--no-load-optim loads the weights alone)", m);
	}
	return rc;
}

static int accept_cb(void *ud, struct ds_ckpt *ck, struct ds_err *err)
{
	return check_need(ck, ud, err);
}

/* --load auto: the newest tag that verifies and fits, the same on every
 * rank; skipped tags are named with the reason.  *ck NULL: none finished. */
static int pick(const char *dir, const struct ds_ckpt_need *n, struct ds_comm *comm, struct ds_ckpt **ck,
		struct ds_err *err)
{
	struct ds_ckpt_skip *sk = NULL;
	size_t nsk = 0;
	int rc = ds_ckpt_pick(ck, dir, comm, accept_cb, (void *)n, &sk, &nsk, err);
	for (size_t i = 0; i < nsk; i++)
		ds_log_warn("--load auto: skipped %s/%s: %s", dir, sk[i].tag, sk[i].why);
	free(sk);
	if (rc == 0 && !*ck)
		ds_log_info("--load auto: %s holds no finished checkpoint; starting from scratch", dir);
	return rc;
}

static int load(const char *dir, const char *tag, int weights_only, struct ds_engine *e,
		const struct ds_train_setup *s, struct ds_train_state *st, struct ds_comm *comm, char **tag_out,
		const struct ds_ckpt_need_tensor *nt, struct ds_err *err)
{
	struct ds_ckpt *ck = NULL;
	struct ds_ckpt_meta meta;
	struct ds_ckpt_need need;
	const char *states[DS_OPTIM_MAX_STATES];
	const struct ds_gpt *m = ds_engine_model(e);
	int64_t v;
	if (tag_out)
		*tag_out = NULL;
	need_of(e, nt, weights_only, states, &need);
	if (tag && !strcmp(tag, "auto")) {
		DS_TRY(pick(dir, &need, s->W > 1 ? comm : NULL, &ck, err));
		if (!ck)
			return 0;
	} else {
		DS_TRY(ds_ckpt_open(&ck, dir, tag, err));
		if (check_need(ck, &need, err) < 0) {
			ds_ckpt_close(ck);
			return DS_EINVAL;
		}
	}
	if (!ds_ckpt_has_manifest(ck))
		ds_log_warn("%s has no manifest (written by an older dstk): its HDF5 metadata is not checked before "
			    "it is read", ds_ckpt_file(ck));
	int rc = ds_ckpt_meta_get(ck, &meta, err);
	if (rc == 0 && strcmp(meta.dtype ? meta.dtype : "fp32", "fp32"))
		rc = ds_err_set(err, DS_EINVAL, "%s: dtype %s: this build loads fp32 checkpoints only",
				ds_ckpt_file(ck), meta.dtype);
	for (int i = 0; i < ds_gpt_num_tensors(m) && rc == 0; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(m, i);
		char name[DS_CKPT_NAME_MAX];
		for (int j = 0, np = ds_engine_ckpt_pieces(e, i); j < np && rc == 0; j++) {
			rc = ds_engine_ckpt_piece(e, i, j, 1, err);
			snprintf(name, sizeof name, "model/%s", t->name);
			int64_t pb, pe;
			float *pp = ds_engine_param_range(e, i, &pb, &pe);
			if (rc == 0)
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
		/* the fp16 scaler resumes where it was when the checkpoint used the
		 * same kind (older checkpoints have no loss_scaler attributes) */
		struct ds_scaler sc = *ds_engine_scaler(e);
		int64_t kind, it, last, hyst;
		double cur, prev;
		if (rc == 0 && ds_ckpt_attr_get_i64(ck, "loss_scaler", "kind", &kind, NULL) == 0 &&
		    kind == (int64_t)sc.kind && sc.kind != DS_SCALER_NONE &&
		    ds_ckpt_attr_get_f64(ck, "loss_scaler", "cur_scale", &cur, NULL) == 0 &&
		    ds_ckpt_attr_get_f64(ck, "loss_scaler", "prev_scale", &prev, NULL) == 0 &&
		    ds_ckpt_attr_get_i64(ck, "loss_scaler", "cur_iter", &it, NULL) == 0 &&
		    ds_ckpt_attr_get_i64(ck, "loss_scaler", "last_overflow_iter", &last, NULL) == 0 &&
		    ds_ckpt_attr_get_i64(ck, "loss_scaler", "cur_hysteresis", &hyst, NULL) == 0) {
			sc.cur_scale = cur;
			sc.prev_scale = prev;
			sc.cur_iter = it;
			sc.last_overflow_iter = last;
			sc.cur_hysteresis = (int)hyst;
			ds_engine_set_scaler(e, &sc);
		}
		if (rc == 0 && ds_ckpt_attr_get_i64(ck, "data", "seed", &v, NULL) == 0 && (uint64_t)v != s->eng.seed)
			ds_log_warn("%s: saved with --seed %lld, resumed with %llu: the data order and dropout "
				    "change from here", ds_ckpt_file(ck), (long long)v,
				    (unsigned long long)s->eng.seed);
	}
	if (rc == 0 && !weights_only)
		rc = ds_train_load_onebit(ck, e, s->W, ds_comm_rank(comm), err);
	if (rc == 0)  /* the 16-bit model copy follows the loaded master weights */
		rc = ds_engine_params_loaded(e, err);
	if (rc == 0 && tag_out)
		*tag_out = strdup(ds_ckpt_tag(ck));
	ds_ckpt_close(ck);
	return rc;
}

int ds_train_load(const char *dir, const char *tag, int weights_only, struct ds_engine *e,
		  const struct ds_train_setup *s, struct ds_train_state *st, struct ds_comm *comm, char **tag_out,
		  struct ds_err *err)
{
	struct ds_ckpt_need_tensor *nt = ds_ckpt_need_tensors(ds_engine_model(e));
	if (!nt)
		return ds_err_set(err, DS_ENOMEM, "out of memory listing the model's tensors");
	int rc = load(dir, tag, weights_only, e, s, st, comm, tag_out, nt, err);
	free(nt);
	return rc;
}

/* ---- keep_last_n_checkpoints -------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int ds_train_prune_checkpoints(const char *dir, int64_t keep, int64_t newest, struct ds_err *err)
{
	DIR *d = opendir(dir);
	int64_t *steps = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int rc = 0;
	if (!d)
		return ds_err_set(err, DS_EIO, "%s: cannot list the checkpoints: %s", dir, strerror(errno));
	while ((de = readdir(d))) {
		char *end;
		if (strncmp(de->d_name, "global_step", 11))
			continue;
		long long st = strtoll(de->d_name + 11, &end, 10);
		if (*end || end == de->d_name + 11 || st > newest)
			continue; /* a .tmp of a save in flight, or not ours */
		if (n == cap) {
			int64_t *p = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof(*p));
			if (!p) {
				rc = ds_err_set(err, DS_ENOMEM, "out of memory");
				goto out;
			}
			steps = p;
		}
		steps[n++] = st;
	}
	/* the oldest go: sort descending, remove from index keep on */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && steps[j - 1] < steps[j]; j--) {
			int64_t t = steps[j];
			steps[j] = steps[j - 1];
			steps[j - 1] = t;
		}
	for (size_t i = (size_t)keep; i < n; i++) {
		char p[4096];
		snprintf(p, sizeof(p), "%s/global_step%lld", dir, (long long)steps[i]);
		if (nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
			rc = ds_err_set(err, DS_EIO, "%s: cannot remove an old checkpoint (keep_last_n_checkpoints %lld): %s",
					p, (long long)keep, strerror(errno));
			goto out;
		}
		ds_log_info("removed %s (keep_last_n_checkpoints %lld)", p, (long long)keep);
	}
out:
	closedir(d);
	free(steps);
	return rc;
}
