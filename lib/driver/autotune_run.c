/* autotune_run.c - ds-autotune's run: read the config's "auto" keys and the
 * autotuning section, build and prune the space, launch each trial as a real
 * ds-train run (fork/exec in its own process group, a deadline, the group
 * killed on timeout), read its metrics.json, and write results_dir.
 *
 * Test hook: DS_AUTOTUNE_FAIL_TRIAL="N[:crash|oom|hang]" (N a 1-based trial
 * number or an experiment name) replaces that trial's command with one that
 * exits 1, kills itself with signal 9, or sleeps until the timeout.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "compute/compute.h"
#include "config/config.h"
#include "config/model.h"
#include "driver/autotune.h"
#include "driver/train_int.h"
#include "engine/estimate.h"
#include "model/count.h"
#include "model/gpt.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timer.h"

#define MAX_ARGS 128

struct ctx {
	const struct ds_autotune_opts *o;
	struct ds_autotune_res *res;
	json_t *raw;             /* the user's config as written */
	json_t *resolved_other;  /* path -> value for other "auto" keys */
	char model[PATH_MAX], data[PATH_MAX], trainer[PATH_MAX];
	char *launch[MAX_ARGS];  /* launcher prefix tokens */
	int nlaunch;
	char launch_buf[2048];
	int overwrite, start_step, end_step, set_tbs, set_gas, stage_in_raw;
	char exps_dir[1024];
};

/* ---- small helpers --------------------------------------------------- */

static int mkdirs(const char *path, struct ds_err *err)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return ds_err_set(err, DS_EINVAL, "%s: path too long", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(buf, 0777) < 0 && errno != EEXIST)
				return ds_err_set(err, DS_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
			*p = '/';
		}
	if (mkdir(buf, 0777) < 0 && errno != EEXIST)
		return ds_err_set(err, DS_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
	return 0;
}

static int write_text(const char *path, const char *text, struct ds_err *err)
{
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return ds_err_set(err, DS_EIO, "%s: cannot write: %s", tmp, strerror(errno));
	int bad = fputs(text, f) < 0;
	bad |= fclose(f) != 0;
	if (bad || rename(tmp, path) < 0) {
		unlink(tmp);
		return ds_err_set(err, DS_EIO, "%s: cannot write", path);
	}
	return 0;
}

static int write_json(const char *path, const json_t *j, struct ds_err *err)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (!s)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	size_t n = strlen(s);
	char *t = realloc(s, n + 2);
	if (!t) {
		free(s);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	t[n] = '\n', t[n + 1] = 0;
	int rc = write_text(path, t, err);
	free(t);
	return rc;
}

/* Append arg to buf shell-quoted (single quotes when needed). */
static void quote(char *buf, size_t n, const char *arg)
{
	size_t l = strlen(buf);
	int plain = *arg != 0;
	for (const char *p = arg; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *p))
			plain = 0;
	if (l && l + 1 < n)
		buf[l++] = ' ', buf[l] = 0;
	if (plain) {
		snprintf(buf + l, n - l, "%s", arg);
		return;
	}
	if (l + 1 < n)
		buf[l++] = '\'', buf[l] = 0;
	for (const char *p = arg; *p && l + 5 < n; p++) {
		if (*p == '\'')
			l += (size_t)snprintf(buf + l, n - l, "'\\''");
		else
			buf[l++] = *p, buf[l] = 0;
	}
	if (l + 1 < n)
		buf[l++] = '\'', buf[l] = 0;
}

/* Set dotted path in obj (creating objects); steals v. */
static int json_set_path(json_t *obj, const char *path, json_t *v)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", path);
	char *p = buf, *dot;
	while ((dot = strchr(p, '.'))) {
		*dot = 0;
		json_t *c = json_object_get(obj, p);
		if (!json_is_object(c)) {
			c = json_object();
			json_object_set_new(obj, p, c);
		}
		obj = c, p = dot + 1;
	}
	return json_object_set_new(obj, p, v);
}

static json_t *json_get_path(json_t *obj, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", path);
	char *p = buf, *dot;
	while (obj && (dot = strchr(p, '.'))) {
		*dot = 0;
		obj = json_object_get(obj, p);
		p = dot + 1;
	}
	return json_is_object(obj) ? json_object_get(obj, p) : NULL;
}

static int is_auto(const json_t *v) { return json_is_string(v) && !strcmp(json_string_value(v), "auto"); }

/* ---- "auto" keys other than the batch and the stage ---------------------- */

/* Walk raw; for every "auto" not tuned here, record a value: "enabled" of a
 * section is true when the section sets other keys, else false; any other
 * key takes the table's default. */
static int resolve_other(struct ctx *x, const struct ds_config *c, json_t *obj, const char *prefix,
			 const struct ds_config *empty, struct ds_err *err)
{
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v) {
		char path[256];
		snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", k);
		if (!strcmp(path, "autotuning"))
			continue;
		if (json_is_object(v)) {
			DS_TRY(resolve_other(x, c, v, path, empty, err));
			continue;
		}
		if (!is_auto(v) || ds_config_source(c, path) != DS_SRC_AUTO)
			continue;
		if (!strcmp(path, "train_micro_batch_size_per_gpu") || !strcmp(path, "gradient_accumulation_steps") ||
		    !strcmp(path, "train_batch_size") || !strcmp(path, "zero_optimization.stage"))
			continue;
		json_t *val;
		const char *base = strrchr(path, '.');
		if (base && !strcmp(base + 1, "enabled")) {
			val = json_boolean(json_object_size(obj) > 1);
		} else {
			const json_t *d = ds_config_get_json(empty, path);
			if (!d)
				return ds_err_set(err, DS_EINVAL,
						  "%s: key '%s': \"auto\" is not something ds-autotune tunes and the key has no default; give a value",
						  x->o->config, path);
			val = json_deep_copy(d);
		}
		json_object_set_new(x->resolved_other, path, val);
		size_t l = strlen(x->res->auto_keys);
		snprintf(x->res->auto_keys + l, sizeof(x->res->auto_keys) - l, "%s%s", l ? "," : "", path);
	}
	return 0;
}

/* The config of point p: raw with every "auto" resolved; without the
 * autotuning section when optimal. New reference. */
static json_t *point_config(const struct ctx *x, const struct ds_autotune_point *p, int optimal)
{
	json_t *j = json_deep_copy(x->raw);
	const char *k;
	json_t *v;
	json_object_foreach(x->resolved_other, k, v) json_set_path(j, k, json_deep_copy(v));
	json_object_set_new(j, "train_micro_batch_size_per_gpu", json_integer(p->mb));
	if (x->set_gas || p->gas != 1)
		json_object_set_new(j, "gradient_accumulation_steps", json_integer(p->gas));
	if (x->set_tbs)
		json_object_set_new(j, "train_batch_size", json_integer(p->tbs));
	else
		json_object_del(j, "train_batch_size");
	if (x->stage_in_raw || p->stage != 0)
		json_set_path(j, "zero_optimization.stage", json_integer(p->stage));
	if (optimal)
		json_object_del(j, "autotuning");
	return j;
}

static void exp_name(const struct ds_autotune_point *p, char *buf, size_t n)
{
	snprintf(buf, n, "z%d_gas%d_tmbspg%d", p->stage, p->gas, p->mb);
}

/* ---- the space --------------------------------------------------------- */

static void add_mb(int *v, int *n, int cap, int m)
{
	for (int i = 0; i < *n; i++)
		if (v[i] == m)
			return;
	if (*n < cap)
		v[(*n)++] = m;
}

/* Bytes per rank of a trial.  fp32 runs of the model's own size: the
 * engine's memory estimator, i.e. what ds-train allocates (padding, comm
 * and gather buffers, activations, rows; tests/mpi/memory.bats).  fp16/bf16
 * (the engine keeps no 16-bit copies yet), another model family or an
 * autotuning.model_info.num_params override: DeepSpeed's model-state
 * formula plus the activations.  Both add DS_AUTOTUNE_MEM_OVERHEAD.
 * ZeRO-Infinity (offload to nvme): host memory only - the estimator moves
 * what the trial's stage offloads out and counts the swap buffers; the
 * formula drops its optimizer term (states and fp32 master) for the
 * buffer_count x sub_group_size fp32 buffers. */
/* The trials run on a device: the config's dstk.device is cuda (ds-train
 * then puts the plan's model states and activations there). */
static int trials_on_device(const struct ds_config *c)
{
	const char *d = ds_config_values(c)->dstk.device;
	return d && ds_device_parse(d) == DS_DEVICE_CUDA;
}

static void trial_bytes(const struct ds_config *c, const struct ds_model_config *mc, double P, int formula,
			int half, int ckpt, int stage, int mb, int gas, int W, double *out)
{
	struct ds_engine_opts eo;
	struct ds_engine_mem m;
	struct ds_config_optimizer co;
	ds_engine_opts_init(&eo);
	eo.model = *mc;
	eo.micro_batch = mb;
	eo.grad_accum = gas;
	eo.zero_stage = stage;
	eo.checkpointing = ckpt;
	const struct ds_config_values *v = ds_config_values(c);
	ds_config_optimizer(c, &co);
	if (co.type == DS_OPT_SGD) {
		ds_optim_params_init(&eo.optim, DS_OPTIM_SGD);
		eo.optim.momentum = co.momentum;
	}
	/* the ZeRO settings ds-train would pass (the table's defaults included) */
	eo.stage3_param_persistence_threshold = v->zero_optimization.stage3_param_persistence_threshold;
	eo.reduce_bucket_size = v->zero_optimization.reduce_bucket_size;
	eo.allgather_bucket_size = v->zero_optimization.allgather_bucket_size;
	/* overlap_comm keeps more gradient buffers (stages 2-3); unless the
	 * file sets it, it follows the trial's stage as DeepSpeed infers it */
	eo.overlap_comm = v->src.zero_optimization.overlap_comm == DS_SRC_FILE ? v->zero_optimization.overlap_comm
									      : stage == 3;
	ds_train_offload_opts(c, stage, &eo.offload);
	/* a model the trainer cannot build fails its trial anyway; keep the formula for it */
	struct ds_err ignored = DS_ERR_INIT;
	if (!formula && ds_engine_mem_estimate(&eo, W, &m, &ignored) == 0) {
		/* a cuda trial set (dstk.device cuda): what the plan puts on the
		 * device, against the device's memory (find_budget) */
		ds_engine_mem_place(&m, &eo, trials_on_device(c));
		*out = (double)(m.device ? m.device_total : m.total) + DS_AUTOTUNE_MEM_OVERHEAD;
		return;
	}
	double states = ds_autotune_model_state_bytes(P, half, stage, W);
	if (eo.offload.optimizer) {
		double optim = P * (half ? 16 : 8) / W, sub = (double)eo.offload.sub_group_size;
		states -= optim;
		states += (double)eo.offload.opt_buffer_count * 4.0 * (sub < P / W ? sub : P / W);
	}
	*out = states + (double)ds_gpt_activation_bytes(mc, mb, mc->seq_length, ckpt, half ? DS_HALF_FP16 : DS_HALF_NONE) +
	       DS_AUTOTUNE_MEM_OVERHEAD;
}

static int build_space(struct ctx *x, const struct ds_config *c, const struct ds_model_config *mc,
		       struct ds_err *err)
{
	struct ds_autotune_res *r = x->res;
	const struct ds_autotune_opts *o = x->o;
	const struct ds_config_values *v = ds_config_values(c);
	int W = r->np;
	/* stages: the config's, or ds-autotune's search forms ("auto", "all", a
	 * list) as the file spells them */
	int stages[4], ns = 0;
	json_t *sv = json_get_path(x->raw, "zero_optimization.stage");
	x->stage_in_raw = sv != NULL;
	if (!DS_CONFIG_AUTO(v, zero_optimization.stage)) {
		stages[ns++] = (int)v->zero_optimization.stage;
	} else if (is_auto(sv) || (json_is_string(sv) && !strcmp(json_string_value(sv), "all"))) {
		for (int s = 0; s < 4; s++)
			stages[ns++] = s;
	} else if (json_is_array(sv)) {
		size_t i;
		json_t *e;
		json_array_foreach(sv, i, e) {
			if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 3)
				return ds_err_set(err, DS_EINVAL,
						  "%s: key 'zero_optimization.stage': list entry %zu is not a stage 0-3",
						  o->config, i);
			int s = (int)json_integer_value(e), dup = 0;
			for (int k = 0; k < ns; k++)
				dup |= stages[k] == s;
			if (!dup)
				stages[ns++] = s;
		}
		if (!ns)
			return ds_err_set(err, DS_EINVAL, "%s: key 'zero_optimization.stage': empty list", o->config);
	} else {
		return ds_err_set(err, DS_EINTERNAL, "%s: key 'zero_optimization.stage': unexpected form", o->config);
	}
	/* batch keys: a value given in the file ("auto" holds none) */
	int mb_auto = DS_CONFIG_AUTO(v, train_micro_batch_size_per_gpu);
	int ga_auto = DS_CONFIG_AUTO(v, gradient_accumulation_steps);
	int tb_auto = DS_CONFIG_AUTO(v, train_batch_size);
	x->set_tbs = DS_CONFIG_GIVEN(v, train_batch_size);
	x->set_gas = DS_CONFIG_GIVEN(v, gradient_accumulation_steps);
	int64_t TB = x->set_tbs && !tb_auto ? v->train_batch_size : 0;
	int64_t GA = x->set_gas && !ga_auto ? v->gradient_accumulation_steps : 0;
	int64_t max_tbs = v->autotuning.max_train_batch_size;
	int mn = (int)v->autotuning.min_train_micro_batch_size_per_gpu;
	int mx = (int)v->autotuning.max_train_micro_batch_size_per_gpu;
	int ntune = (int)v->autotuning.num_tuning_micro_batch_sizes;
	if (mn > mx)
		return ds_err_set(err, DS_EINVAL,
				  "%s: key 'autotuning.min_train_micro_batch_size_per_gpu': %d is above max_train_micro_batch_size_per_gpu %d",
				  o->config, mn, mx);
	int mbs[DS_AUTOTUNE_MAX_POINTS / 4], nm = 0, cap = DS_AUTOTUNE_MAX_POINTS / 4;
	if (!mb_auto) {
		int64_t m = v->train_micro_batch_size_per_gpu; /* given, or inferred by the triad */
		if (!m && TB && GA)
			m = TB / (GA * W);
		if (!m && TB && !ga_auto)
			m = TB / W;
		add_mb(mbs, &nm, cap, m > 0 ? (int)m : 1);
	} else {
		for (int64_t m = mn; m <= mx; m *= 2)
			add_mb(mbs, &nm, cap, (int)m);
		add_mb(mbs, &nm, cap, mx);
	}
	/* "auto" fp16/bf16 hold their default (false); partition_activations
	 * is unsupported, so refused unless false */
	int half = v->fp16.enabled || v->bf16.enabled;
	int ckpt = DS_CONFIG_GIVEN(v, activation_checkpointing.number_checkpoints);
	struct ds_count_totals ct;
	DS_TRY(ds_count_train_flops(mc, 1, mc->seq_length, ckpt ? 1.0 : 0.0, &ct, err));
	double P = v->src.autotuning.model_info.num_params == DS_SRC_FILE ? (double)v->autotuning.model_info.num_params
									  : (double)ct.params;
	const int formula = half || mc->family != DS_FAMILY_GPT || DS_CONFIG_GIVEN(v, autotuning.model_info.num_params);
	/* DeepSpeed's list near each stage's memory maximum */
	if (mb_auto)
		for (int k = 0; k < ns; k++) {
			int hi = 0;
			for (int m = mn; m <= mx; m = m < mx / 2 ? m * 2 : (m == mx ? mx + 1 : mx)) {
				double b;
				trial_bytes(c, mc, P, formula, half, ckpt, stages[k], m, 1, W, &b);
				if (b <= (double)r->budget)
					hi = m;
			}
			if (hi > 0) {
				int v[64], nv = ds_autotune_mbs_list(mn, hi, ntune, max_tbs > 0 ? max_tbs / W : 0, v, 64);
				for (int i = 0; i < nv; i++)
					add_mb(mbs, &nm, cap, v[i]);
			}
		}
	struct ds_autotune_space *s = &r->space;
	s->n = 0;
	struct ds_config_opts co = DS_CONFIG_OPTS_INIT;
	co.world_size = W;
	for (int k = 0; k < ns; k++)
		for (int i = 0; i < nm; i++) {
			if (s->n == DS_AUTOTUNE_MAX_POINTS)
				break;
			struct ds_autotune_point *p = &s->p[s->n++];
			memset(p, 0, sizeof(*p));
			p->stage = stages[k], p->mb = mbs[i];
			int64_t ga = GA > 0 ? GA : 1;
			if (TB > 0 && GA <= 0)
				ga = TB / ((int64_t)p->mb * W);
			else if (GA <= 0 && max_tbs > 0 && (ga_auto || tb_auto))
				ga = max_tbs / ((int64_t)p->mb * W) > 0 ? max_tbs / ((int64_t)p->mb * W) : 1;
			p->gas = ga > 0 ? (int)ga : 1;
			p->tbs = (int64_t)p->mb * p->gas * W;
			trial_bytes(c, mc, P, formula, half, ckpt, p->stage, p->mb, p->gas, W, &p->mem);
			DS_TRY(ds_count_train_flops(mc, p->mb, mc->seq_length, ckpt ? 1.0 : 0.0, &ct, err));
			p->flops = ct.train_flops_step * p->gas;
			char b1[32], b2[32];
			if (TB > 0 && TB != p->tbs) {
				p->status = DS_AT_PRUNED;
				snprintf(p->why, sizeof(p->why), "batch: train_batch_size %lld is not %d x gas x %d ranks",
					 (long long)TB, p->mb, W);
				r->pruned_batch++;
			} else if (max_tbs > 0 && p->tbs > max_tbs) {
				p->status = DS_AT_PRUNED;
				snprintf(p->why, sizeof(p->why), "batch: %lld above max_train_batch_size %lld",
					 (long long)p->tbs, (long long)max_tbs);
				r->pruned_batch++;
			} else if (p->mem > (double)r->budget) {
				p->status = DS_AT_PRUNED;
				snprintf(p->why, sizeof(p->why), "memory: needs %s > budget %s per rank",
					 ds_fmt_bytes(p->mem, b1, sizeof(b1)), ds_fmt_bytes((double)r->budget, b2, sizeof(b2)));
				r->pruned_mem++;
			} else {
				/* the trainer's own validation, before anything runs */
				json_t *j = point_config(x, p, 0);
				char *txt = json_dumps(j, 0);
				json_decref(j);
				struct ds_config *pc = NULL;
				struct ds_err e2 = DS_ERR_INIT;
				if (!txt)
					return ds_err_set(err, DS_ENOMEM, "out of memory");
				if (ds_config_load_string(&pc, txt, "experiment", &co, &e2) < 0) {
					p->status = DS_AT_PRUNED;
					snprintf(p->why, sizeof(p->why), "config: %.140s", e2.msg);
					r->pruned_batch++;
				}
				ds_config_destroy(pc);
				free(txt);
			}
		}
	return 0;
}

/* ---- budget and ranks -------------------------------------------------- */

static uint64_t env_u64(const char *name)
{
	const char *s = getenv(name);
	char *end;
	if (!s || !*s)
		return 0;
	unsigned long long v = strtoull(s, &end, 10);
	return end != s ? v : 0;
}

/* The memory per rank the trials are pruned against: the host's
 * (ds_engine_mem_budget), or for a cuda trial set (trials_on_device) the
 * free memory of device 0 split over the ranks of a node that share a
 * device; --mem-per-rank overrides either.  Where no device answers here
 * the host's budget stands, and the log says so. */
static void find_budget(struct ds_autotune_res *r, const struct ds_autotune_opts *o, int nodes,
			const struct ds_config *c)
{
	int per_node = (r->np + nodes - 1) / nodes;
	uint64_t tpn = env_u64("SLURM_NTASKS_PER_NODE");
	if (getenv("SLURM_JOB_ID") && tpn > 0)
		per_node = (int)tpn;
	r->budget = ds_engine_mem_budget(per_node, o->mem_per_rank, r->budget_from, sizeof(r->budget_from));
	if (!trials_on_device(c) || o->mem_per_rank)
		return;
	struct ds_compute_env env;
	struct ds_err e = DS_ERR_INIT;
	size_t fr = 0, tot = 0;
	ds_compute_probe(&env, DS_DEVICE_CUDA);
	if (!env.cuda || env.device_count < 1 || !env.cuda->mem_info || env.cuda->init(0, &e) < 0 ||
	    env.cuda->mem_info(&fr, &tot, &e) < 0 || !fr) {
		ds_log_warn("ds-autotune: dstk.device cuda, but no device answers here (%s): the trials are pruned against "
			    "the host's memory; --mem-per-rank sets the device's", e.msg[0] ? e.msg
			    : env.why_none[0] ? env.why_none : "no cuda backend in this build");
		return;
	}
	const int share = (per_node + env.device_count - 1) / env.device_count;
	r->budget = (uint64_t)fr / (uint64_t)(share > 0 ? share : 1);
	snprintf(r->budget_from, sizeof(r->budget_from), "free memory of cuda device 0 / %d rank%s", share,
		 share == 1 ? "" : "s");
}

static int split_launcher(struct ctx *x, const char *s)
{
	snprintf(x->launch_buf, sizeof(x->launch_buf), "%s", s);
	char *save = NULL;
	for (char *t = strtok_r(x->launch_buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
		if (x->nlaunch < MAX_ARGS - 16)
			x->launch[x->nlaunch++] = t;
	return 0;
}

static void default_launcher(struct ctx *x, int np, int nodes)
{
	static char nps[32], nns[32];
	snprintf(nps, sizeof(nps), "%d", np);
	snprintf(nns, sizeof(nns), "%d", nodes);
	if (np <= 1)
		return;
	if (getenv("SLURM_JOB_ID")) {
		x->launch[x->nlaunch++] = "srun";
		x->launch[x->nlaunch++] = "--ntasks";
		x->launch[x->nlaunch++] = nps;
		if (nodes > 1) {
			x->launch[x->nlaunch++] = "--nodes";
			x->launch[x->nlaunch++] = nns;
		}
		return;
	}
	x->launch[x->nlaunch++] = "mpirun";
	x->launch[x->nlaunch++] = "-np";
	x->launch[x->nlaunch++] = nps;
	x->launch[x->nlaunch++] = "--oversubscribe";
	x->launch[x->nlaunch++] = "--bind-to";
	x->launch[x->nlaunch++] = "none";
	if (geteuid() == 0)
		x->launch[x->nlaunch++] = "--allow-run-as-root";
}

static void find_trainer(struct ctx *x)
{
	if (x->o->trainer) {
		snprintf(x->trainer, sizeof(x->trainer), "%s", x->o->trainer);
		return;
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		char *sl = strrchr(self, '/');
		if (sl) {
			*sl = 0;
			snprintf(x->trainer, sizeof(x->trainer), "%.*s/ds-train", (int)(sizeof(x->trainer) - 10), self);
			if (access(x->trainer, X_OK) == 0)
				return;
		}
	}
	snprintf(x->trainer, sizeof(x->trainer), "ds-train");
}

/* ---- one trial ----------------------------------------------------------- */

/* "N[:kind]" or "name[:kind]" from DS_AUTOTUNE_FAIL_TRIAL: the kind when this
 * trial is the one to fail, else NULL. */
static const char *injected(int trial, const char *name, char *kind, size_t n)
{
	const char *e = getenv("DS_AUTOTUNE_FAIL_TRIAL");
	if (!e || !*e)
		return NULL;
	char who[128];
	snprintf(who, sizeof(who), "%s", e);
	char *colon = strchr(who, ':');
	snprintf(kind, n, "%s", colon ? colon + 1 : "crash");
	if (colon)
		*colon = 0;
	char num[16];
	snprintf(num, sizeof(num), "%d", trial);
	return !strcmp(who, num) || !strcmp(who, name) ? kind : NULL;
}

static void last_line(const char *path, char *out, size_t n)
{
	FILE *f = fopen(path, "r");
	char line[512];
	out[0] = 0;
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = 0;
		if (line[0])
			snprintf(out, n, "%.*s", (int)n - 1, line);
	}
	if (f)
		fclose(f);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Run argv with stdout/stderr to files, in its own process group, until it
 * exits or timeout seconds pass (then TERM, 2 s grace, KILL the group).
 * *status is waitpid's; *timed_out 1 when the deadline hit. */
static int spawn_wait(char **argv, const char *out, const char *errf, double timeout, volatile int *stop,
		      int *status, int *timed_out, struct ds_err *err)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return ds_err_set(err, DS_EIO, "fork: %s", strerror(errno));
	if (pid == 0) {
		setpgid(0, 0);
		int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0666), fe = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		if (fo >= 0)
			dup2(fo, 1);
		if (fe >= 0)
			dup2(fe, 2);
		int fi = open("/dev/null", O_RDONLY);
		if (fi >= 0)
			dup2(fi, 0);
		execvp(argv[0], argv);
		/* still the forked child, not the caller's process: fd 2 is the
		 * trial's stderr.txt, where the reason becomes the trial's (see
		 * last_line); _exit ends the child alone, without running the
		 * parent's atexit handlers or flushing its stdio buffers twice */
		dprintf(2, "ds-autotune: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	double deadline = ds_now() + timeout;
	*timed_out = 0;
	for (;;) {
		pid_t w = waitpid(pid, status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			return ds_err_set(err, DS_EIO, "waitpid: %s", strerror(errno));
		if ((ds_now() > deadline || (stop && *stop)) && !*timed_out) {
			*timed_out = 1;
			kill(-pid, SIGTERM);
			for (int i = 0; i < 100 && waitpid(pid, status, WNOHANG) == 0; i++)
				sleep_ms(20);
			kill(-pid, SIGKILL);
			waitpid(pid, status, 0);
			break;
		}
		sleep_ms(20);
	}
	kill(-pid, SIGKILL); /* whatever the trial left behind in its group */
	if (stop && *stop)
		return ds_err_set(err, DS_ESIGNAL, "stopped on a signal; the running trial was killed");
	return 0;
}

static int read_result(const char *path, struct ds_autotune_point *p)
{
	json_t *j = json_load_file(path, 0, NULL);
	if (!j)
		return -1;
	const char *st = json_string_value(json_object_get(j, "status"));
	const char *why = json_string_value(json_object_get(j, "reason"));
	int ok = st && !strcmp(st, "ok");
	p->metric = ok ? json_number_value(json_object_get(j, "metric")) : NAN;
	p->status = ok ? DS_AT_OK : DS_AT_FAILED;
	p->oom = json_is_true(json_object_get(j, "oom"));
	snprintf(p->why, sizeof(p->why), "%s", why ? why : "");
	json_decref(j);
	return st ? 0 : -1;
}

static int eval_trial(void *vctx, struct ds_autotune_space *s, int i, double *metric, struct ds_err *err)
{
	struct ctx *x = vctx;
	struct ds_autotune_point *p = &s->p[i];
	char name[64], dir[PATH_MAX], cfgp[PATH_MAX + 32], mpath[PATH_MAX + 32], outp[PATH_MAX + 32],
	    errp[PATH_MAX + 32], resp[PATH_MAX + 32], cmdp[PATH_MAX + 32], expp[PATH_MAX + 64];
	exp_name(p, name, sizeof(name));
	snprintf(dir, sizeof(dir), "%s/%s", x->res->results_dir, name);
	snprintf(cfgp, sizeof(cfgp), "%s/ds_config.json", dir);
	snprintf(mpath, sizeof(mpath), "%s/metrics.json", dir);
	snprintf(outp, sizeof(outp), "%s/stdout.txt", dir);
	snprintf(errp, sizeof(errp), "%s/stderr.txt", dir);
	snprintf(resp, sizeof(resp), "%s/result.json", dir);
	snprintf(cmdp, sizeof(cmdp), "%s/cmd.txt", dir);
	snprintf(expp, sizeof(expp), "%s/%s.json", x->exps_dir, name);
	json_t *cfg = point_config(x, p, 0);
	int rc = 0;
	/* resume: a finished experiment with the same config is not run again */
	if (!x->overwrite) {
		json_t *old = json_load_file(cfgp, 0, NULL);
		int same = old && json_equal(old, cfg);
		json_decref(old);
		if (same && read_result(resp, p) == 0) {
			json_decref(cfg);
			x->res->skipped_resume++;
			*metric = p->status == DS_AT_OK ? p->metric : NAN;
			ds_log_info("trial %d %s: finished before (%s), not run again", p->order, name,
				    p->status == DS_AT_OK ? "ok" : p->why);
			return 0;
		}
	}
	if ((rc = mkdirs(dir, err)) < 0 || (rc = mkdirs(x->exps_dir, err)) < 0 || (rc = write_json(cfgp, cfg, err)) < 0)
		goto out;
	json_t *exp = json_pack("{s:s, s:O, s:i, s:i}", "name", name, "ds_config", cfg, "num_gpus", x->res->np,
				"num_nodes", 1);
	rc = exp ? write_json(expp, exp, err) : ds_err_set(err, DS_ENOMEM, "out of memory");
	json_decref(exp);
	if (rc < 0)
		goto out;
	unlink(mpath);
	unlink(resp);
	char iters[32];
	snprintf(iters, sizeof(iters), "%d", x->end_step);
	char *argv[MAX_ARGS];
	int n = 0;
	for (int k = 0; k < x->nlaunch; k++)
		argv[n++] = x->launch[k];
	argv[n++] = x->trainer;
	argv[n++] = "--deepspeed_config";
	argv[n++] = cfgp;
	argv[n++] = "--model";
	argv[n++] = x->model;
	argv[n++] = "--train-iters";
	argv[n++] = iters;
	argv[n++] = "--metrics-json";
	argv[n++] = mpath;
	if (x->data[0]) {
		argv[n++] = "--data";
		argv[n++] = x->data;
	}
	argv[n] = NULL;
	char cmd[8192] = "";
	for (int k = 0; k < n; k++)
		quote(cmd, sizeof(cmd), argv[k]);
	strcat(cmd, "\n");
	if ((rc = write_text(cmdp, cmd, err)) < 0)
		goto out;
	char kind[32];
	const char *inj = injected(p->order, name, kind, sizeof(kind));
	char *fake[4] = { "/bin/sh", "-c", NULL, NULL };
	if (inj) {
		fake[2] = !strcmp(inj, "oom")	  ? "echo 'injected failure (DS_AUTOTUNE_FAIL_TRIAL): oom' >&2; kill -9 $$"
			  : !strcmp(inj, "hang") ? "echo 'injected failure (DS_AUTOTUNE_FAIL_TRIAL): hang' >&2; exec sleep 100000"
						 : "echo 'injected failure (DS_AUTOTUNE_FAIL_TRIAL): crash' >&2; exit 1";
	}
	ds_log_info("trial %d: %s (est. %.1f MiB per rank)", p->order, name, p->mem / 1048576.0);
	int st = 0, to = 0;
	double t0 = ds_now();
	if ((rc = spawn_wait(inj ? fake : argv, outp, errp, x->o->trial_timeout, x->o->stop, &st, &to, err)) < 0)
		goto out;
	double secs = ds_now() - t0;
	char tail[400];
	last_line(errp, tail, sizeof(tail));
	p->oom = 0;
	p->why[0] = 0;
	if (to) {
		snprintf(p->why, sizeof(p->why), "timeout after %g s (process group killed)", x->o->trial_timeout);
	} else if (WIFSIGNALED(st)) {
		p->oom = WTERMSIG(st) == SIGKILL;
		snprintf(p->why, sizeof(p->why), "killed by signal %d%s", WTERMSIG(st),
			 p->oom ? " (out of memory?)" : "");
	} else if (WEXITSTATUS(st) == 137) {
		p->oom = 1;
		snprintf(p->why, sizeof(p->why), "exit 137: killed (out of memory?)");
	} else if (WEXITSTATUS(st) != 0) {
		snprintf(p->why, sizeof(p->why), "exit %d: %.130s", WEXITSTATUS(st), tail[0] ? tail : "(no stderr)");
	}
	double m = NAN;
	if (!p->why[0]) {
		json_t *mj = json_load_file(mpath, 0, NULL);
		const char *key = x->res->metric == DS_AT_LATENCY ? "latency"
				  : x->res->metric == DS_AT_FLOPS ? "FLOPS_per_gpu" : "throughput";
		json_t *v = mj ? json_object_get(mj, key) : NULL;
		if (!json_is_number(v))
			snprintf(p->why, sizeof(p->why), "exit 0 but metrics.json has no '%s'", key);
		else
			m = json_number_value(v);
		json_decref(mj);
	}
	p->status = isnan(m) ? DS_AT_FAILED : DS_AT_OK;
	*metric = m;
	json_t *res = json_pack("{s:s, s:s, s:s, s:s, s:f, s:b, s:f}", "name", name, "status",
				isnan(m) ? "failed" : "ok", "reason", p->why, "metric_name",
				ds_autotune_metric_name(x->res->metric), "seconds", secs, "oom", p->oom, "metric",
				isnan(m) ? 0.0 : m);
	rc = res ? write_json(resp, res, err) : ds_err_set(err, DS_ENOMEM, "out of memory");
	json_decref(res);
	if (isnan(m))
		ds_log_warn("trial %d: %s failed: %s (see %s); going on", p->order, name, p->why, errp);
	else
		ds_log_info("trial %d: %s %s %.6g", p->order, name, ds_autotune_metric_name(x->res->metric), m);
out:
	json_decref(cfg);
	return rc;
}

/* ---- the run ------------------------------------------------------------ */

static int write_outputs(struct ctx *x, struct ds_err *err)
{
	struct ds_autotune_res *r = x->res;
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/summary.csv", r->results_dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return ds_err_set(err, DS_EIO, "%s: cannot write: %s", path, strerror(errno));
	int rc = ds_autotune_write_csv(r, f, err);
	if (fclose(f) != 0 && rc == 0)
		rc = ds_err_set(err, DS_EIO, "%s: cannot write", path);
	if (rc < 0 || r->search.best < 0)
		return rc;
	const struct ds_autotune_point *b = &r->space.p[r->search.best];
	snprintf(r->optimal_config, sizeof(r->optimal_config), "%s/ds_config_optimal.json", r->results_dir);
	json_t *j = point_config(x, b, 1);
	rc = write_json(r->optimal_config, j, err);
	json_decref(j);
	if (rc < 0)
		return rc;
	char abs[PATH_MAX];
	if (!realpath(r->optimal_config, abs))
		snprintf(abs, sizeof(abs), "%s", r->optimal_config);
	r->optimal_cmd[0] = 0;
	for (int k = 0; k < x->nlaunch; k++)
		quote(r->optimal_cmd, sizeof(r->optimal_cmd), x->launch[k]);
	quote(r->optimal_cmd, sizeof(r->optimal_cmd), x->trainer);
	quote(r->optimal_cmd, sizeof(r->optimal_cmd), "--deepspeed_config");
	quote(r->optimal_cmd, sizeof(r->optimal_cmd), abs);
	quote(r->optimal_cmd, sizeof(r->optimal_cmd), "--model");
	quote(r->optimal_cmd, sizeof(r->optimal_cmd), x->model);
	if (x->data[0]) {
		quote(r->optimal_cmd, sizeof(r->optimal_cmd), "--data");
		quote(r->optimal_cmd, sizeof(r->optimal_cmd), x->data);
	}
	char line[4200];
	snprintf(line, sizeof(line), "%s\n", r->optimal_cmd);
	snprintf(path, sizeof(path), "%s/cmd_optimal.txt", r->results_dir);
	return write_text(path, line, err);
}

int ds_autotune_run(const struct ds_autotune_opts *o, struct ds_autotune_res *r, struct ds_err *err)
{
	struct ctx x;
	struct ds_config *c = NULL, *empty = NULL;
	struct ds_model_config mc;
	struct ds_config_opts co = DS_CONFIG_OPTS_INIT;
	int rc;
	memset(&x, 0, sizeof(x));
	memset(r, 0, sizeof(*r));
	r->search.best = -1;
	x.o = o, x.res = r;
	x.resolved_other = json_object();
	if (!x.resolved_other)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	co.allow_auto = 1;
	co.world_size = o->np > 0 ? o->np : 1;
	if ((rc = ds_config_load_file(&c, o->config, &co, err)) < 0)
		goto out;
	json_error_t je;
	if (!(x.raw = json_load_file(o->config, 0, &je))) {
		rc = ds_err_set(err, DS_EINVAL, "%s: %s", o->config, je.text);
		goto out;
	}
	if ((rc = ds_model_config_load(o->model, &mc, err)) < 0)
		goto out;
	const struct ds_config_values *v = ds_config_values(c);
	if (v->src.autotuning.enabled == DS_SRC_FILE && !v->autotuning.enabled) {
		rc = ds_err_set(err, DS_EINVAL, "%s: key 'autotuning.enabled': is false; set it true to tune this config",
				o->config);
		goto out;
	}
	/* ranks and nodes */
	int nodes = (int)v->autotuning.num_nodes, gpus = (int)v->autotuning.num_gpus;
	if (!nodes)
		nodes = env_u64("SLURM_JOB_ID") || getenv("SLURM_JOB_ID") ? (int)env_u64("SLURM_NNODES") : 0;
	if (nodes < 1)
		nodes = 1;
	r->np = o->np > 0 ? o->np : gpus > 0 ? gpus * nodes : getenv("SLURM_JOB_ID") && env_u64("SLURM_NTASKS") ? (int)env_u64("SLURM_NTASKS") : 1;
	if (r->np != co.world_size) { /* the triad checks need the real world size */
		ds_config_destroy(c);
		c = NULL;
		co.world_size = r->np;
		if ((rc = ds_config_load_file(&c, o->config, &co, err)) < 0)
			goto out;
		v = ds_config_values(c);
	}
	const char *ms = v->autotuning.metric, *tt = v->autotuning.tuner_type, *rd = v->autotuning.results_dir,
		   *ed = v->autotuning.exps_dir;
	r->metric = !strcmp(ms, "latency") ? DS_AT_LATENCY : !strcmp(ms, "flops") ? DS_AT_FLOPS : DS_AT_THROUGHPUT;
	snprintf(r->results_dir, sizeof(r->results_dir), "%s", o->results_dir ? o->results_dir : rd);
	if (o->results_dir && !DS_CONFIG_GIVEN(v, autotuning.exps_dir))
		snprintf(x.exps_dir, sizeof(x.exps_dir), "%s/exps", o->results_dir);
	else
		snprintf(x.exps_dir, sizeof(x.exps_dir), "%s", ed);
	x.overwrite = v->autotuning.overwrite;
	x.start_step = (int)v->autotuning.start_profile_step;
	x.end_step = (int)v->autotuning.end_profile_step;
	if (x.end_step < x.start_step) {
		rc = ds_err_set(err, DS_EINVAL, "%s: key 'autotuning.end_profile_step': %d is before start_profile_step %d",
				o->config, x.end_step, x.start_step);
		goto out;
	}
	if (!realpath(o->model, x.model))
		snprintf(x.model, sizeof(x.model), "%s", o->model);
	if (o->data && !realpath(o->data, x.data))
		snprintf(x.data, sizeof(x.data), "%s", o->data);
	find_trainer(&x);
	if (o->launcher && *o->launcher)
		split_launcher(&x, o->launcher);
	else
		default_launcher(&x, r->np, nodes);
	find_budget(r, o, nodes, c);
	/* other "auto" keys */
	if ((rc = ds_config_load_string(&empty, "{\"train_micro_batch_size_per_gpu\": 1}", "defaults", &co, err)) < 0)
		goto out;
	if ((rc = resolve_other(&x, c, x.raw, "", empty, err)) < 0)
		goto out;
	if (!v->autotuning.fast && strstr(r->auto_keys, "zero_optimization."))
		ds_log_warn("%s: autotuning.fast is false, but ds-autotune tunes only the stage and the batch: the \"auto\" "
			    "ZeRO keys take their defaults (%s)", o->config, r->auto_keys);
	if (json_object_size(v->autotuning.arg_mappings))
		ds_log_warn("%s: autotuning.arg_mappings is not used: ds-train reads every tuned value from the config",
			    o->config);
	if ((rc = build_space(&x, c, &mc, err)) < 0)
		goto out;
	int live = 0;
	for (int i = 0; i < r->space.n; i++)
		live += r->space.p[i].status != DS_AT_PRUNED;
	ds_log_info("ds-autotune: %d experiments, %d pruned before launch (%d memory over %.1f MiB per rank from %s, %d batch/config), %d ranks",
		    r->space.n, r->pruned_mem + r->pruned_batch, r->pruned_mem, (double)r->budget / 1048576.0,
		    r->budget_from, r->pruned_batch, r->np);
	if ((rc = mkdirs(r->results_dir, err)) < 0)
		goto out;
	if (live) {
		struct ds_autotune_search_opts so;
		so.tuner = !strcmp(tt, "random") ? DS_AT_RANDOM : !strcmp(tt, "model_based") ? DS_AT_MODEL : DS_AT_GRID;
		so.metric = r->metric;
		so.num_trials = (int)v->autotuning.tuner_num_trials;
		so.early_stop = (int)v->autotuning.tuner_early_stopping;
		so.seed = o->seed;
		if ((rc = ds_autotune_search(&r->space, &so, eval_trial, &x, &r->search, err)) < 0)
			goto out;
	}
	rc = write_outputs(&x, err);
out:
	ds_config_destroy(c);
	ds_config_destroy(empty);
	json_decref(x.raw);
	json_decref(x.resolved_other);
	return rc;
}

/* ---- reports ------------------------------------------------------------ */

static const char *status_name(int s)
{
	static const char *const n[] = { "not-run", "pruned", "ok", "failed", "infeasible" };
	return s >= 0 && s <= DS_AT_INFEASIBLE ? n[s] : "?";
}

int ds_autotune_print_summary(const struct ds_autotune_res *r, FILE *f, struct ds_err *err)
{
	const char *mn = ds_autotune_metric_name(r->metric);
	fprintf(f, "# %-22s %5s %5s %5s %7s %10s %-10s %14s  %s\n", "experiment", "stage", "mbs", "gas", "batch",
		"est_MiB", "status", mn, "reason");
	for (int i = 0; i < r->space.n; i++) {
		const struct ds_autotune_point *p = &r->space.p[i];
		char name[64];
		exp_name(p, name, sizeof(name));
		char mv[32] = "-";
		if (p->status == DS_AT_OK)
			snprintf(mv, sizeof(mv), "%.6g", p->metric);
		fprintf(f, "  %-22s %5d %5d %5d %7lld %10.1f %-10s %14s  %s%s\n", name, p->stage, p->mb, p->gas,
			(long long)p->tbs, p->mem / 1048576.0, status_name(p->status), mv, p->why,
			r->search.best == i ? "  <- best" : "");
	}
	int failed = 0, inf = 0;
	for (int i = 0; i < r->space.n; i++)
		failed += r->space.p[i].status == DS_AT_FAILED, inf += r->space.p[i].status == DS_AT_INFEASIBLE;
	fprintf(f, "# pruned before launch: %d (memory: %d over the budget of %.1f MiB per rank from %s; batch/config: %d)\n",
		r->pruned_mem + r->pruned_batch, r->pruned_mem, (double)r->budget / 1048576.0, r->budget_from,
		r->pruned_batch);
	fprintf(f, "# trials: %d run (%d failed, %d reused from an earlier run)%s; %d not run as infeasible\n",
		r->search.trials, failed, r->skipped_resume, r->search.stopped_early ? ", stopped early" : "", inf);
	if (r->auto_keys[0])
		fprintf(f, "# other \"auto\" keys resolved to defaults: %s\n", r->auto_keys);
	if (r->search.best >= 0) {
		const struct ds_autotune_point *b = &r->space.p[r->search.best];
		char name[64];
		exp_name(b, name, sizeof(name));
		fprintf(f, "# best: %s (%s %.6g)\n# optimal config: %s\n# run it: %s\n", name, mn, b->metric,
			r->optimal_config, r->optimal_cmd);
	} else {
		fprintf(f, "# best: none (no experiment succeeded)\n");
	}
	if (ferror(f))
		return ds_err_set(err, DS_EIO, "cannot write the summary");
	return 0;
}

int ds_autotune_write_csv(const struct ds_autotune_res *r, FILE *f, struct ds_err *err)
{
	fprintf(f, "experiment,stage,micro_batch,gas,train_batch_size,est_mem_bytes,train_flops_per_step,status,trial,%s,best,reason\n",
		r->metric == DS_AT_LATENCY ? "latency_us" : r->metric == DS_AT_FLOPS ? "flops_per_gpu" : "throughput_samples_per_s");
	for (int i = 0; i < r->space.n; i++) {
		const struct ds_autotune_point *p = &r->space.p[i];
		char name[64], why[200];
		exp_name(p, name, sizeof(name));
		snprintf(why, sizeof(why), "%s", p->why);
		for (char *q = why; *q; q++)
			if (*q == '"')
				*q = '\'';
		fprintf(f, "%s,%d,%d,%d,%lld,%.0f,%.6g,%s,%d,", name, p->stage, p->mb, p->gas, (long long)p->tbs, p->mem,
			p->flops, status_name(p->status), p->order);
		if (p->status == DS_AT_OK)
			fprintf(f, "%.9g", p->metric);
		fprintf(f, ",%d,\"%s\"\n", r->search.best == i, why);
	}
	if (ferror(f))
		return ds_err_set(err, DS_EIO, "cannot write the CSV");
	return 0;
}

int ds_autotune_write_json(const struct ds_autotune_res *r, FILE *f, struct ds_err *err)
{
	json_t *exps = json_array();
	for (int i = 0; i < r->space.n; i++) {
		const struct ds_autotune_point *p = &r->space.p[i];
		char name[64];
		exp_name(p, name, sizeof(name));
		json_array_append_new(exps, json_pack("{s:s, s:i, s:i, s:i, s:I, s:f, s:f, s:s, s:i, s:o, s:s}", "name",
						      name, "stage", p->stage, "micro_batch", p->mb, "gas", p->gas,
						      "train_batch_size", (json_int_t)p->tbs, "est_mem_bytes", p->mem,
						      "train_flops_per_step", p->flops, "status", status_name(p->status),
						      "trial", p->order,
						      "metric", p->status == DS_AT_OK ? json_real(p->metric) : json_null(),
						      "reason", p->why));
	}
	char best[64] = "";
	if (r->search.best >= 0)
		exp_name(&r->space.p[r->search.best], best, sizeof(best));
	json_t *j = json_pack("{s:s, s:i, s:I, s:s, s:i, s:i, s:i, s:i, s:b, s:o, s:s, s:s, s:s, s:o}", "metric",
			      ds_autotune_metric_name(r->metric), "np", r->np, "budget_bytes", (json_int_t)r->budget,
			      "budget_from", r->budget_from, "pruned_memory", r->pruned_mem, "pruned_batch", r->pruned_batch,
			      "trials", r->search.trials, "reused", r->skipped_resume, "stopped_early",
			      r->search.stopped_early, "best", best[0] ? json_string(best) : json_null(), "results_dir",
			      r->results_dir, "optimal_config", r->optimal_config, "optimal_cmd", r->optimal_cmd,
			      "experiments", exps);
	if (!j)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	int rc = json_dumpf(j, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(j);
	fputc('\n', f);
	if (rc < 0 || ferror(f))
		return ds_err_set(err, DS_EIO, "cannot write the JSON");
	return 0;
}
