/* sched.c - LR schedules of DeepSpeed's lr_schedules.py as pure functions
 * of the iteration k (see sched.h), their defaults, names and checks.
 * Arithmetic in double, in the same order as the Python code.
 */
#include "optim/sched.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

void ds_sched_params_init(struct ds_sched_params *p, enum ds_sched_type type)
{
	memset(p, 0, sizeof(*p));
	p->type = type;
	p->last_batch_iteration = -1;
	p->warmup_min_lr = 0.0;
	p->warmup_max_lr = 0.001;
	p->warmup_num_steps = 1000;
	p->warmup_type = DS_WARMUP_LOG;
	p->total_num_steps = -1;
	p->warmup_min_ratio = 0.0;
	p->cos_min_ratio = 1e-4;
	p->cycle_min_lr = -1;
	p->cycle_max_lr = -1;
	p->decay_lr_rate = 0.0;
	p->cycle_first_step_size = 2000;
	p->cycle_second_step_size = -1;
	p->cycle_first_stair_count = 0;
	p->cycle_second_stair_count = -1;
	p->decay_step_size = 0;
	p->cycle_momentum = 1;
	p->cycle_min_mom = 0.8;
	p->cycle_max_mom = 0.9;
	p->decay_mom_rate = 0.0;
	p->lr_range_test_min_lr = 1e-3;
	p->lr_range_test_step_size = 2000;
	p->lr_range_test_step_rate = 1.0;
	p->lr_range_test_staircase = 0;
	p->neox_decay = DS_NEOX_LINEAR;
	p->neox_warmup_iter = 0.0;
	p->neox_end_iter = 1;
	p->neox_min_lr = 0.0;
}

static const char *const names[] = { "none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle",
				     "LRRangeTest", "NeoX" };

const char *ds_sched_type_name(enum ds_sched_type type)
{
	return (unsigned)type <= DS_SCHED_NEOX ? names[type] : "?";
}

int ds_sched_type_from_name(const char *name, enum ds_sched_type *type, struct ds_err *err)
{
	for (int i = 1; i <= DS_SCHED_LR_RANGE_TEST; i++)
		if (!strcasecmp(name, names[i])) {
			*type = (enum ds_sched_type)i;
			return 0;
		}
	return ds_err_set(err, DS_EINVAL,
			  "scheduler.type: unknown scheduler '%s'; use WarmupLR, WarmupDecayLR, WarmupCosineLR, "
			  "OneCycle or LRRangeTest", name);
}

enum { F_DBL, F_INT, F_BOOL };

#define W_ (1u << DS_SCHED_WARMUP_LR)
#define WD_ (1u << DS_SCHED_WARMUP_DECAY_LR)
#define WC_ (1u << DS_SCHED_WARMUP_COSINE_LR)
#define OC_ (1u << DS_SCHED_ONE_CYCLE)
#define RT_ (1u << DS_SCHED_LR_RANGE_TEST)
#define OFF(f) offsetof(struct ds_sched_params, f)

static const struct skey {
	const char *name;
	int kind;
	unsigned types;
	size_t off;
} skeys[] = {
	{ "last_batch_iteration", F_INT, W_ | WD_ | WC_ | OC_ | RT_, OFF(last_batch_iteration) },
	{ "warmup_min_lr", F_DBL, W_ | WD_, OFF(warmup_min_lr) },
	{ "warmup_max_lr", F_DBL, W_ | WD_, OFF(warmup_max_lr) },
	{ "warmup_num_steps", F_INT, W_ | WD_ | WC_, OFF(warmup_num_steps) },
	{ "warmup_type", -1, W_ | WD_ | WC_, 0 },
	{ "total_num_steps", F_INT, WD_ | WC_, OFF(total_num_steps) },
	{ "warmup_min_ratio", F_DBL, WC_, OFF(warmup_min_ratio) },
	{ "cos_min_ratio", F_DBL, WC_, OFF(cos_min_ratio) },
	{ "cycle_min_lr", F_DBL, OC_, OFF(cycle_min_lr) },
	{ "cycle_max_lr", F_DBL, OC_, OFF(cycle_max_lr) },
	{ "decay_lr_rate", F_DBL, OC_, OFF(decay_lr_rate) },
	{ "cycle_first_step_size", F_INT, OC_, OFF(cycle_first_step_size) },
	{ "cycle_second_step_size", F_INT, OC_, OFF(cycle_second_step_size) },
	{ "cycle_first_stair_count", F_INT, OC_, OFF(cycle_first_stair_count) },
	{ "cycle_second_stair_count", F_INT, OC_, OFF(cycle_second_stair_count) },
	{ "decay_step_size", F_INT, OC_, OFF(decay_step_size) },
	{ "cycle_momentum", F_BOOL, OC_, OFF(cycle_momentum) },
	{ "cycle_min_mom", F_DBL, OC_, OFF(cycle_min_mom) },
	{ "cycle_max_mom", F_DBL, OC_, OFF(cycle_max_mom) },
	{ "decay_mom_rate", F_DBL, OC_, OFF(decay_mom_rate) },
	{ "lr_range_test_min_lr", F_DBL, RT_, OFF(lr_range_test_min_lr) },
	{ "lr_range_test_step_size", F_INT, RT_, OFF(lr_range_test_step_size) },
	{ "lr_range_test_step_rate", F_DBL, RT_, OFF(lr_range_test_step_rate) },
	{ "lr_range_test_staircase", F_BOOL, RT_, OFF(lr_range_test_staircase) },
};
#define NKEYS (sizeof(skeys) / sizeof(skeys[0]))

static const struct skey *find_key(const struct ds_sched_params *p, const char *name, struct ds_err *err)
{
	const struct skey *k = NULL;
	for (size_t i = 0; i < NKEYS; i++)
		if (!strcmp(name, skeys[i].name))
			k = &skeys[i];
	if (k && (k->types & (1u << p->type)))
		return k;
	char buf[400] = "";
	for (size_t i = 0; i < NKEYS; i++)
		if (skeys[i].types & (1u << p->type)) {
			size_t l = strlen(buf);
			snprintf(buf + l, sizeof(buf) - l, "%s%s", l ? ", " : "", skeys[i].name);
		}
	ds_err_set(err, DS_EINVAL, "scheduler.params.%s: %s for scheduler %s (valid: %s)", name,
		   k ? "not a parameter" : "unknown parameter", ds_sched_type_name(p->type), buf[0] ? buf : "none");
	return NULL;
}

int ds_sched_param_set(struct ds_sched_params *p, const char *name, double val, struct ds_err *err)
{
	const struct skey *k = find_key(p, name, err);
	if (!k)
		return DS_EINVAL;
	if (k->kind < 0)
		return ds_err_set(err, DS_EINVAL, "scheduler.params.%s: expected a string (\"log\" or \"linear\")",
				  name);
	if (!isfinite(val))
		return ds_err_set(err, DS_EINVAL, "scheduler.params.%s: value must be finite", name);
	char *base = (char *)p;
	switch (k->kind) {
	case F_DBL:
		*(double *)(base + k->off) = val;
		break;
	case F_INT:
		if (val != floor(val) || fabs(val) > 9e15)
			return ds_err_set(err, DS_EINVAL, "scheduler.params.%s: expected an integer (got %g)", name,
					  val);
		/* DeepSpeed (spec §4) stores the stair counts and never uses
		 * them: a count that would silently do nothing is rejected */
		if (strstr(name, "_stair_count") && val != 0)
			return ds_err_set(err, DS_EINVAL,
					  "scheduler.params.%s: stair counts have no effect in DeepSpeed's OneCycle "
					  "(stored but unused); remove the key or set it to 0", name);
		*(int64_t *)(base + k->off) = (int64_t)val;
		break;
	case F_BOOL:
		if (val != 0.0 && val != 1.0)
			return ds_err_set(err, DS_EINVAL, "scheduler.params.%s: expected true or false", name);
		*(int *)(base + k->off) = val != 0.0;
		break;
	}
	return 0;
}

int ds_sched_param_set_str(struct ds_sched_params *p, const char *name, const char *val, struct ds_err *err)
{
	const struct skey *k = find_key(p, name, err);
	if (!k)
		return DS_EINVAL;
	if (k->kind >= 0)
		return ds_err_set(err, DS_EINVAL, "scheduler.params.%s: expected a number, not a string", name);
	if (!strcmp(val, "log"))
		p->warmup_type = DS_WARMUP_LOG;
	else if (!strcmp(val, "linear"))
		p->warmup_type = DS_WARMUP_LINEAR;
	else
		return ds_err_set(err, DS_EINVAL, "scheduler.params.warmup_type: '%s' is not \"log\" or \"linear\"",
				  val);
	return 0;
}

int ds_sched_params_check(const struct ds_sched_params *p, struct ds_err *err)
{
	const char *tn = ds_sched_type_name(p->type);
	if (p->last_batch_iteration < -1)
		return ds_err_set(err, DS_EINVAL, "scheduler.params.last_batch_iteration: must be >= -1 (got %lld)",
				  (long long)p->last_batch_iteration);
	switch (p->type) {
	case DS_SCHED_NONE:
		return 0;
	case DS_SCHED_WARMUP_LR:
	case DS_SCHED_WARMUP_DECAY_LR:
	case DS_SCHED_WARMUP_COSINE_LR:
		if (p->warmup_num_steps < 0)
			return ds_err_set(err, DS_EINVAL, "scheduler.params.warmup_num_steps: must be >= 0 for %s", tn);
		if (p->type == DS_SCHED_WARMUP_LR)
			return 0;
		if (p->total_num_steps < 0)
			return ds_err_set(err, DS_EINVAL, "scheduler.params.total_num_steps: required by %s", tn);
		if (p->type == DS_SCHED_WARMUP_COSINE_LR) {
			int64_t w = p->warmup_num_steps < 2 ? 2 : p->warmup_num_steps;
			/* DeepSpeed would divide by zero (or count backwards) here */
			if (p->total_num_steps <= w)
				return ds_err_set(err, DS_EINVAL,
						  "scheduler.params.total_num_steps: must exceed warmup_num_steps "
						  "(%lld) for WarmupCosineLR", (long long)w);
		}
		return 0;
	case DS_SCHED_ONE_CYCLE:
		if (p->cycle_min_lr < 0 || p->cycle_max_lr < 0)
			return ds_err_set(err, DS_EINVAL, "scheduler.params.%s: required by OneCycle (>= 0)",
					  p->cycle_min_lr < 0 ? "cycle_min_lr" : "cycle_max_lr");
		if (p->cycle_first_step_size <= 0)
			return ds_err_set(err, DS_EINVAL, "scheduler.params.cycle_first_step_size: must be > 0");
		if (p->cycle_second_step_size == 0 || p->cycle_second_step_size < -1)
			return ds_err_set(err, DS_EINVAL, "scheduler.params.cycle_second_step_size: must be > 0");
		if (p->decay_step_size < 0)
			return ds_err_set(err, DS_EINVAL, "scheduler.params.decay_step_size: must be >= 0");
		return 0;
	case DS_SCHED_LR_RANGE_TEST:
		if (p->lr_range_test_step_size <= 0)
			return ds_err_set(err, DS_EINVAL, "scheduler.params.lr_range_test_step_size: must be > 0");
		return 0;
	case DS_SCHED_NEOX:
		/* AnnealingLR asserts end_iter > 0; E == W would divide by zero */
		if (p->neox_end_iter <= 0 || p->neox_warmup_iter < 0 || p->neox_warmup_iter >= (double)p->neox_end_iter)
			return ds_err_set(err, DS_EINVAL, "dstk.lr_decay_iters: %lld must exceed the warmup iterations %g",
					  (long long)p->neox_end_iter, p->neox_warmup_iter);
		return 0;
	}
	return ds_err_set(err, DS_EINVAL, "scheduler.type: invalid type %d", (int)p->type);
}

/* WarmupLR's gamma for 0 <= k (W already max(2, warmup_num_steps)). */
static double warmup_gamma(enum ds_warmup_type wt, int64_t w, int64_t k)
{
	if (k >= w)
		return 1.0;
	if (wt == DS_WARMUP_LINEAR)
		return (double)k / (double)w;
	return (1.0 / log((double)w)) * log((double)(k + 1));
}

/* GPT-NeoX's AnnealingLR.get_lr at num_iters k (its own words: the warmup
 * ramp is not clamped by min_lr, the decay is). */
static double neox_lr(const struct ds_sched_params *p, double start, int64_t k)
{
	double n = k < 0 ? 0.0 : (double)k, w = p->neox_warmup_iter, lr;
	if (w > 0 && n <= w)
		return start * (n > 1.0 ? n : 1.0) / w;
	n -= w;
	double e = (double)p->neox_end_iter - w;
	switch (p->neox_decay) {
	case DS_NEOX_LINEAR:
		lr = start * (e - n) / e;
		break;
	case DS_NEOX_COSINE:
		lr = p->neox_min_lr + (start - p->neox_min_lr) / 2.0 * (cos(M_PI * n / e) + 1.0);
		break;
	case DS_NEOX_EXPONENTIAL:
		lr = start * exp(-0.693 * n / e); /* exp(-0.693) = 1/2, NeoX's constant */
		break;
	default:
		lr = start;
	}
	return lr > p->neox_min_lr ? lr : p->neox_min_lr;
}

void ds_sched_value(const struct ds_sched_params *p, double org_lr, int64_t k, struct ds_sched_value *out)
{
	memset(out, 0, sizeof(*out));
	int64_t w = p->warmup_num_steps < 2 ? 2 : p->warmup_num_steps;
	switch (p->type) {
	case DS_SCHED_NEOX:
		/* AnnealingLR's constructor steps to num_iters 0, which the first
		 * optimizer step uses; a DeepSpeed scheduler's k is -1 there */
		out->lr = neox_lr(p, org_lr, k + 1);
		return;
	case DS_SCHED_NONE:
		out->lr = org_lr;
		return;
	case DS_SCHED_WARMUP_LR:
	case DS_SCHED_WARMUP_DECAY_LR: {
		if (k < 0) {
			out->lr = p->warmup_min_lr;
			return;
		}
		double gamma = warmup_gamma(p->warmup_type, w, k);
		if (p->type == DS_SCHED_WARMUP_DECAY_LR && k >= w) {
			double d = (double)(p->total_num_steps - w);
			gamma = (double)(p->total_num_steps - k) / (d > 1.0 ? d : 1.0);
			if (gamma < 0.0)
				gamma = 0.0;
		}
		out->lr = p->warmup_min_lr + (p->warmup_max_lr - p->warmup_min_lr) * gamma;
		return;
	}
	case DS_SCHED_WARMUP_COSINE_LR: {
		if (k < 0) {
			out->lr = 0.0;
			return;
		}
		double ratio;
		if (k < w) {
			ratio = warmup_gamma(p->warmup_type, w, k);
			ratio = p->warmup_min_ratio + ratio * (1.0 - p->warmup_min_ratio);
		} else {
			/* progress clamped to 1, as DeepSpeed does since it fixed the
			 * schedule climbing back up after total_num_steps */
			double s = (double)(k - w + 1), d = (double)(p->total_num_steps - w);
			double prog = s / (d > 1.0 ? d : 1.0);
			if (prog > 1.0)
				prog = 1.0;
			ratio = (1.0 + cos(M_PI * prog)) / 2.0;
			ratio = p->cos_min_ratio + (1.0 - p->cos_min_ratio) * ratio;
			if (ratio < 0.0)
				ratio = 0.0;
		}
		out->lr = org_lr * ratio;
		return;
	}
	case DS_SCHED_ONE_CYCLE: {
		int64_t first = p->cycle_first_step_size;
		int64_t second = p->cycle_second_step_size > 0 ? p->cycle_second_step_size : first;
		double total = (double)(first + second), ratio = (double)first / total;
		out->has_betas = p->cycle_momentum;
		out->beta2 = 0.99;
		if (k < 0) {
			/* construction: lr = min, betas = (cycle_min_mom, 0.99) */
			out->lr = p->cycle_min_lr;
			out->beta1 = p->cycle_min_mom;
			return;
		}
		if ((double)k < total) {
			double b = (double)(k + 1);
			double cycle = floor(1.0 + b / total);
			double x = 1.0 + b / total - cycle;
			double scale = x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
			out->lr = p->cycle_min_lr + (p->cycle_max_lr - p->cycle_min_lr) * scale;
			out->beta1 = p->cycle_max_mom - (p->cycle_max_mom - p->cycle_min_mom) * scale;
			return;
		}
		double d = (double)(k - (first + second) + 1);
		if (p->decay_lr_rate == 0.0 || p->decay_step_size == 0)
			out->lr = p->cycle_min_lr;
		else
			out->lr = p->cycle_min_lr / (1.0 + p->decay_lr_rate * (d / (double)p->decay_step_size));
		if (p->decay_mom_rate == 0.0 || p->decay_step_size == 0)
			out->beta1 = p->cycle_max_mom;
		else
			out->beta1 = p->cycle_max_mom * (1.0 + p->decay_mom_rate * (d / (double)p->decay_step_size));
		return;
	}
	case DS_SCHED_LR_RANGE_TEST: {
		double i = (double)(k + 1) / (double)p->lr_range_test_step_size;
		if (p->lr_range_test_staircase)
			i = floor(i);
		out->lr = p->lr_range_test_min_lr * (1.0 + p->lr_range_test_step_rate * i);
		return;
	}
	}
	out->lr = org_lr;
}

double ds_sched_lr(const struct ds_sched_params *p, double org_lr, int64_t k)
{
	struct ds_sched_value v;
	ds_sched_value(p, org_lr, k, &v);
	return v.lr;
}

void ds_sched_step_value(const struct ds_sched_params *p, double org_lr, int64_t i, struct ds_sched_value *out)
{
	if (i <= 1 && p->last_batch_iteration != -1 && p->type != DS_SCHED_NONE) {
		memset(out, 0, sizeof(*out));
		out->lr = org_lr;
		return;
	}
	ds_sched_value(p, org_lr, p->last_batch_iteration + (i < 1 ? 1 : i) - 1, out);
}
