/* train_opts.c - ds-train's options: defaults and the --check run. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/model.h"
#include "config/neox.h"
#include "config/train_opts.h"

void ds_train_opts_init(struct ds_train_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->seed = 1234;
	o->eval_iters = 10;
	o->autos = (struct ds_config_auto)DS_CONFIG_AUTO_INIT;
}

static const char *share_file(const char *rel)
{
	static char buf[2][4096];
	static int n;
	char *b = buf[n++ & 1];
	snprintf(b, sizeof(buf[0]), "%s/%s", DS_DATADIR, rel);
	if (access(b, R_OK) == 0)
		return b;
	snprintf(b, sizeof(buf[0]), "%s/share/%s", DS_SRCDIR, rel);
	return b;
}

int ds_train_opts_neox(struct ds_train_opts *o, struct ds_neox *nx, struct ds_err *err)
{
	DS_TRY(ds_neox_load(o->conf, o->nconf, o->lenient, nx, err));
	char *ds = json_dumps(nx->ds, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
	char *mo = json_dumps(nx->model, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
	if (!ds || !mo) {
		free(ds);
		free(mo);
		ds_neox_release(nx);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	nx->ds_text = ds; /* freed by ds_neox_release */
	nx->model_text = mo;
	o->deepspeed_json = ds;
	o->model_json = mo;
	o->conf_name = nx->name;
	o->deepspeed_name = o->model_name = nx->name;
	o->conf_lines = nx->lines;
	o->conf_nlines = nx->nlines;
	/* the files' run flags, where the command line gave none */
	struct ds_train_opts d;
	ds_train_opts_init(&d);
#define RUNF(f) if (nx->f && o->f == d.f) o->f = nx->f
	RUNF(train_iters);
	RUNF(save_interval);
	RUNF(keep_last_n);
	RUNF(eval_interval);
	RUNF(eval_iters);
	RUNF(log_interval);
	RUNF(exit_interval);
	RUNF(save);
	RUNF(load);
	RUNF(data);
	RUNF(valid_data);
	RUNF(test_data);
	RUNF(split);
	RUNF(no_load_optim);
	RUNF(tp);
	RUNF(pp);
#undef RUNF
	if (nx->have_seed && o->seed == d.seed)
		o->seed = nx->seed;
	o->data_weight_by_docs = nx->weight_by_docs;
	o->data_alpha = nx->alpha;
	return 0;
}

const char *ds_train_default_config(void)
{
	return share_file("configs/default.json");
}

const char *ds_train_default_model(void)
{
	return share_file("models/gpt-tiny.json");
}

int ds_train_check(const struct ds_train_opts *o, FILE *out, struct ds_err *err)
{
	return ds_train_check_extra(o, out, NULL, err);
}

/* A value for the run-flags line: a blend in double quotes (a shell word). */
static const char *quoted(const char *v, char *buf, size_t n)
{
	if (!strpbrk(v, " \t"))
		return v;
	snprintf(buf, n, "\"%s\"", v);
	return buf;
}

/* --check --json: the run flags, and for --conf what became of each NeoX
 * parameter ({name, status, detail} from its "name: status: detail" line). */
static json_t *run_json(const struct ds_train_opts *o)
{
	json_t *r = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "train_iters", (json_int_t)o->train_iters,
			      "seed", (json_int_t)o->seed, "save_interval", (json_int_t)o->save_interval,
			      "eval_interval", (json_int_t)o->eval_interval, "eval_iters", (json_int_t)o->eval_iters,
			      "log_interval", (json_int_t)o->log_interval, "keep_last_n_checkpoints", (json_int_t)o->keep_last_n,
			      "no_load_optim", o->no_load_optim);
	const char *const str[][2] = { { "save", o->save }, { "load", o->load }, { "data", o->data },
				       { "valid_data", o->valid_data }, { "test_data", o->test_data }, { "split", o->split } };
	for (size_t i = 0; r && i < sizeof(str) / sizeof(str[0]); i++)
		if (str[i][1])
			json_object_set_new(r, str[i][0], json_string(str[i][1]));
	if (r && o->data_weight_by_docs)
		json_object_set_new(r, "weighted_sampler_alpha", json_real(o->data_alpha));
	if (r && o->tp > 0)
		json_object_set_new(r, "tensor_model_parallel_size", json_integer(o->tp));
	if (r && o->pp > 0)
		json_object_set_new(r, "pipeline_model_parallel_size", json_integer(o->pp));
	json_t *root = r ? json_pack("{s:o}", "run_flags", r) : NULL;
	if (!root || !o->conf_name)
		return root;
	json_t *ps = json_array();
	for (int i = 0; ps && i < o->conf_nlines; i++) {
		const char *l = o->conf_lines[i], *a = strstr(l, ": "), *b = a ? strstr(a + 2, ": ") : NULL;
		json_t *e = a && b ? json_pack("{s:s%,s:s%,s:s}", "name", l, (size_t)(a - l), "status", a + 2,
					       (size_t)(b - a - 2), "detail", b + 2) : NULL;
		if (!e || json_array_append_new(ps, e) != 0) {
			json_decref(ps);
			ps = NULL;
		}
	}
	if (!ps || json_object_set_new(root, "neox", json_pack("{s:s,s:o}", "files", o->conf_name, "parameters", ps)) != 0) {
		json_decref(root);
		return NULL;
	}
	return root;
}

int ds_train_check_extra(const struct ds_train_opts *o, FILE *out, json_t *extra, struct ds_err *err)
{
	char q[3][4096];
	struct ds_config_opts co = DS_CONFIG_OPTS_INIT;
	struct ds_config *c = NULL;
	struct ds_model_config m;
	struct ds_config_batch b;
	const char *cfg = o->deepspeed_config ? o->deepspeed_config : ds_train_default_config();
	const char *mod = o->model ? o->model : ds_train_default_model();
	int rc = 0;
	struct ds_config_auto a = o->autos;
	struct ds_err merr = DS_ERR_INIT;
	/* the triad counts data-parallel ranks: the job's (default: one per
	 * tensor x pipeline rank) over tp x pp */
	const int tp = o->tp > 0 ? o->tp : 1, pp = o->pp > 0 ? o->pp : 1;
	const int world = o->world_size > 0 ? o->world_size : tp * pp;
	if (world % (tp * pp))
		return ds_err_set(err, DS_EINVAL, "--world-size: world size %d is not a multiple of tensor-parallel size %d "
				  "x pipeline-parallel size %d; start tp x pp x dp ranks", world, tp, pp);
	co.world_size = world / (tp * pp);
	co.tp_size = tp;
	co.lenient = o->lenient;
	co.autos = &a;
	/* the model first: "auto" ZeRO bucket sizes follow its hidden size;
	 * a bad model is reported after the DeepSpeed config's errors */
	if (o->model_json)
		mod = o->model_name;
	int mrc = o->model_json ? ds_model_config_load_string(o->model_json, mod, &m, &merr)
				: ds_model_config_load(mod, &m, &merr);
	a.hidden_size = mrc == 0 ? m.hidden_size : 0;
	if (a.train_iters < 0 && o->train_iters > 0)
		a.train_iters = o->train_iters;
	if (o->deepspeed_json)
		cfg = o->deepspeed_name;
	if (o->deepspeed_json)
		DS_TRY(ds_config_load_string(&c, o->deepspeed_json, cfg, &co, err));
	else
		DS_TRY(ds_config_load_file(&c, cfg, &co, err));
	if (mrc < 0) {
		*err = merr;
		rc = mrc;
		goto out;
	}
	/* the layout rules ds-train applies (DeepSpeed's pipeline engine
	 * refuses ZeRO 2 and 3) */
	const struct ds_config_values *v = ds_config_values(c);
	const json_t *st = v->pipeline.stages;
	int stg = json_is_integer(st) ? (int)json_integer_value(st) : 0;
	if (stg && o->pp > 0 && stg != o->pp) {
		rc = ds_err_set(err, DS_EINVAL, "%s: key 'pipeline.stages': %d, but --pipeline-model-parallel-size is %d; "
				"give one", cfg, stg, o->pp);
		goto out;
	}
	if ((o->pp > 1 || stg > 1) && v->zero_optimization.stage >= 2) {
		rc = ds_err_set(err, DS_EINVAL, "%s: key 'zero_optimization.stage': %lld with %d pipeline stages: ZeRO-2 and "
				"ZeRO-3 are incompatible with pipeline parallelism (DeepSpeed's pipeline engine refuses them); "
				"use stage 0 or 1", cfg, (long long)v->zero_optimization.stage, o->pp > 1 ? o->pp : stg);
		goto out;
	}
	if (mrc == 0 && ds_moe_num_layers(&m) > 0 && tp * pp > 1) {
		rc = ds_err_set(err, DS_EINVAL, "%s: MoE layers with tensor or pipeline parallelism (tp %d, pp %d) are "
				"not supported; use expert parallelism (moe.ep_size) with data parallelism", mod, tp, pp);
		goto out;
	}
	ds_config_batch(c, &b);
	if (o->json) {
		char *dj = ds_config_to_json(c, 1), *mj = ds_model_config_to_json(&m, 1);
		json_t *dk = dj ? json_loads(dj, 0, NULL) : NULL, *mk = mj ? json_loads(mj, 0, NULL) : NULL;
		json_t *root = dk && mk ? json_pack("{s:{s:s,s:o},s:{s:s,s:o},s:{s:I,s:I,s:I,s:i,s:i,s:i,s:i}}",
						   "deepspeed_config", "file", cfg, "keys", dk,
						   "model", "file", mod, "keys", mk,
						   "batch", "train_batch_size", (json_int_t)b.train_batch_size,
						   "train_micro_batch_size_per_gpu", (json_int_t)b.micro_batch,
						   "gradient_accumulation_steps", (json_int_t)b.grad_accum,
						   "world_size", world, "data_parallel_size", b.world_size,
						   "tensor_parallel_size", tp, "pipeline_parallel_size", pp) : NULL;
		json_t *more = root ? run_json(o) : NULL;
		if (root && (!more || json_object_update(root, more) != 0 || (extra && json_object_update(root, extra) != 0))) {
			json_decref(root);
			root = NULL;
			dk = mk = NULL;  /* owned by root, freed with it */
		}
		json_decref(more);
		if (!root) {
			if (!dk || !mk) {
				json_decref(dk);
				json_decref(mk);
			}
			rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		} else if (json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) != 0 ||
			   fputc('\n', out) == EOF || fflush(out) != 0 || ferror(out)) {
			rc = ds_err_set(err, DS_EIO, "writing the configuration failed");
		}
		json_decref(root);
		free(dj);
		free(mj);
		goto out;
	}
	if (o->conf_nlines) {
		fprintf(out, "# GPT-NeoX config %s: what became of its parameters\n", o->conf_name);
		for (int i = 0; i < o->conf_nlines; i++)
			fprintf(out, "# neox: %s\n", o->conf_lines[i]);
	}
	fprintf(out, "# DeepSpeed config %s (world size %d)\n", cfg, world);
	if ((rc = ds_config_print(c, out, err)) < 0)
		goto out;
	if (tp * pp > 1)
		fprintf(out, "# batch: train_batch_size %lld = micro %lld x accumulation %lld x data-parallel size %d "
			"(world %d = tensor %d x pipeline %d x data %d)\n", (long long)b.train_batch_size,
			(long long)b.micro_batch, (long long)b.grad_accum, b.world_size, world, tp, pp, b.world_size);
	else
		fprintf(out, "# batch: train_batch_size %lld = micro %lld x accumulation %lld x world size %d\n",
			(long long)b.train_batch_size, (long long)b.micro_batch, (long long)b.grad_accum, b.world_size);
	fprintf(out, "# model config %s\n", mod);
	if ((rc = ds_model_config_print(&m, out, err)) < 0)
		goto out;
	fprintf(out, "# run flags: --train-iters %lld --seed %llu --save-interval %lld --eval-interval %lld --eval-iters %lld "
		"--log-interval %lld --keep-last-n-checkpoints %lld%s%s%s%s%s%s%s%s%s\n", (long long)o->train_iters, (unsigned long long)o->seed,
		(long long)o->save_interval, (long long)o->eval_interval, (long long)o->eval_iters, (long long)o->log_interval,
		(long long)o->keep_last_n, o->save ? " --save " : "", o->save ? o->save : "", o->load ? " --load " : "", o->load ? o->load : "",
		o->data ? " --data " : "", o->data ? quoted(o->data, q[0], sizeof(q[0])) : "", o->split ? " --split " : "", o->split ? o->split : "",
		o->no_load_optim ? " --no-load-optim" : "");
	if (o->valid_data || o->test_data)
		fprintf(out, "# data:%s%s%s%s\n", o->valid_data ? " --valid-data " : "",
			o->valid_data ? quoted(o->valid_data, q[1], sizeof(q[1])) : "", o->test_data ? " --test-data " : "",
			o->test_data ? quoted(o->test_data, q[2], sizeof(q[2])) : "");
	if (o->data_weight_by_docs)
		fprintf(out, "# data: blend weights from document counts (weight_by_num_documents), weighted_sampler_alpha %g\n",
			o->data_alpha);
out:
	ds_config_destroy(c);
	return rc;
}

/* the whole of a non-regular file, NUL-terminated, in *out; 0, or DS_EIO /
 * DS_EINVAL naming path */
static int read_once(const char *path, char **out, struct ds_err *err)
{
	const size_t max = 64u << 20;
	size_t n = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	FILE *f = fopen(path, "rb");
	*out = NULL;
	if (!f || !buf) {
		int e = errno;
		free(buf);
		if (f)
			fclose(f);
		return ds_err_set(err, f ? DS_ENOMEM : DS_EIO, "%s: %s", path, f ? "out of memory" : strerror(e));
	}
	for (;;) {
		if (n + 1 >= cap) {
			char *nb = cap < max ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				free(buf);
				fclose(f);
				return cap < max ? ds_err_set(err, DS_ENOMEM, "%s: out of memory", path)
						 : ds_err_set(err, DS_EINVAL, "%s: over 64 MiB: not a config", path);
			}
			buf = nb;
			cap *= 2;
		}
		size_t k = fread(buf + n, 1, cap - 1 - n, f);
		n += k;
		if (k == 0)
			break;
	}
	int bad = ferror(f), e = errno;
	fclose(f);
	if (bad) {
		free(buf);
		return ds_err_set(err, DS_EIO, "%s: read: %s", path, strerror(e));
	}
	buf[n] = '\0';
	*out = buf;
	return 0;
}

static int is_pipe(const char *path)
{
	struct stat st;
	return path && stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

int ds_train_opts_read_pipes(struct ds_train_opts *o, char *keep[2], struct ds_err *err)
{
	keep[0] = keep[1] = NULL;
	if (is_pipe(o->deepspeed_config) && !o->deepspeed_json) {
		DS_TRY(read_once(o->deepspeed_config, &keep[0], err));
		o->deepspeed_json = keep[0];
		o->deepspeed_name = o->deepspeed_config;
	}
	if (is_pipe(o->model) && !o->model_json) {
		DS_TRY(read_once(o->model, &keep[1], err));
		o->model_json = keep[1];
		o->model_name = o->model;
	}
	return 0;
}
