/* rules.c - what the key table alone cannot say: the exclusions and
 * constraints of spec §2 (rejecting settings DeepSpeed would silently
 * ignore), unsupported features in use, the batch triad of spec §1, the
 * values DeepSpeed infers, and the typed optimizer/scheduler views.  They
 * read the values from c->v (filled as each value is recorded, so file
 * values and defaults are there before the rules run); only rules about
 * keys dstk does not act on, or about lists of keys, look entries up by
 * path.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config_int.h"
#include "config/keys.h"
#include "config/table.h"

#define T ds_config_keys

/* Validation over keys without a field (lists of keys named in messages,
 * unsupported keys checked before ds_config_unsupported for DeepSpeed's own
 * message): given in the file (any alias, "auto" included)? */
static int given(const struct ds_config *c, const char *path)
{
	struct ds_config_ent *e = ds_config_find_ent(c, path);
	return e && (e->src == DS_SRC_FILE || e->src == DS_SRC_AUTO);
}

/* ...and true there (their defaults are all false). */
static int given_true(const struct ds_config *c, const char *path)
{
	struct ds_config_ent *e = ds_config_find_ent(c, path);
	return e && json_is_true(e->val);
}

#define V (&c->v)
#define GIVEN(f) DS_CONFIG_GIVEN(V, f)
/* An error of the file: FAIL ends the rule at hand (later checks of it
 * depend on this one), ERR records it and goes on, so a file's errors are
 * all reported in one run. */
#define FAIL(...) return ds_config_error(c, __VA_ARGS__)
#define ERR(...) ds_config_error(c, __VA_ARGS__)
#define NOTE(kind, ...) DS_TRY(ds_config_note(c, kind, __VA_ARGS__))

static const char *const adam_params[] = { "lr", "betas", "eps", "weight_decay", "bias_correction", "torch_adam",
					   "adam_w_mode", "amsgrad", "set_grad_none", "fp32_optimizer_states",
					   NULL };
static const char *const lamb_params[] = { "lr", "betas", "eps", "weight_decay", "bias_correction",
					   "eps_inside_sqrt", "max_coeff", "min_coeff", NULL };
static const char *const sgd_params[] = { "lr", "momentum", "dampening", "nesterov", "weight_decay", NULL };
/* the 1-bit family's constructors (deepspeed/runtime/fp16/onebit/): all
 * take bias_correction and eps_inside_sqrt, and none applies them */
static const char *const oba_params[] = { "lr", "freeze_step", "bias_correction", "betas", "eps", "eps_inside_sqrt",
					  "weight_decay", "amsgrad", "cuda_aware", "comm_backend_name", NULL };
static const char *const zoa_params[] = { "lr", "bias_correction", "betas", "eps", "eps_inside_sqrt", "weight_decay",
					  "var_freeze_step", "var_update_scaler", "local_step_scaler",
					  "local_step_clipper", "amsgrad", "cuda_aware", "comm_backend_name", NULL };
static const char *const obl_params[] = { "lr", "freeze_step", "bias_correction", "betas", "eps", "eps_inside_sqrt",
					  "weight_decay", "max_coeff", "min_coeff", "amsgrad", "cuda_aware",
					  "comm_backend_name", "coeff_beta", "factor_max", "factor_min",
					  "factor_threshold", NULL };

static const char *const wlr_params[] = { "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
					  "last_batch_iteration", NULL };
static const char *const wdlr_params[] = { "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
					   "total_num_steps", "last_batch_iteration", NULL };
static const char *const wclr_params[] = { "total_num_steps", "warmup_min_ratio", "warmup_num_steps",
					   "cos_min_ratio", "warmup_type", "last_batch_iteration", NULL };
static const char *const oc_params[] = { "cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size",
					 "cycle_second_step_size", "cycle_first_stair_count",
					 "cycle_second_stair_count", "decay_step_size", "cycle_momentum", "cycle_min_mom",
					 "cycle_max_mom", "decay_mom_rate", "last_batch_iteration", NULL };
static const char *const lrrt_params[] = { "lr_range_test_min_lr", "lr_range_test_step_size",
					   "lr_range_test_step_rate", "lr_range_test_staircase",
					   "last_batch_iteration", NULL };

static int in_list(const char *const *l, const char *s)
{
	for (; *l; l++)
		if (!strcmp(*l, s))
			return 1;
	return 0;
}

static void join_list(const char *const *l, char *buf, size_t n)
{
	size_t o = 0;
	buf[0] = 0;
	for (; *l && o + 1 < n; l++)
		o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", *l);
}

/* Every params.X given in the file must be one the type takes. */
static int check_params(struct ds_config *c, const char *sect, const char *type, const char *const *ok,
			struct ds_err *err)
{
	char pre[64], all[512];
	int n = snprintf(pre, sizeof(pre), "%s.params.", sect);
	for (int i = 0; i < c->nents; i++) {
		const struct ds_config_ent *e = &c->ents[i];
		if (e->src != DS_SRC_FILE || strncmp(e->path, pre, (size_t)n) || in_list(ok, e->path + n))
			continue;
		if (ds_config_table_is_wild(T[e->key].path))
			continue; /* reported by ds_config_unsupported with its reason */
		join_list(ok, all, sizeof(all));
		FAIL("%s: key '%s': not a parameter of %s (it takes %s)", c->name, e->path, type, all);
	}
	return 0;
}

/* The 1-bit family: what DeepSpeed's engine asserts (no ZeRO; OneBitLamb,
 * like Lamb, dynamic loss scaling) and what its constructors accept but
 * never apply. */
static int onebit_rules(struct ds_config *c, const char *type, struct ds_err *err)
{
	int lamb = !strcmp(type, "OneBitLamb");
	if (!DS_CONFIG_AUTO(V, zero_optimization.stage) && V->zero_optimization.stage != 0)
		FAIL("%s: key 'zero_optimization.stage': %s is not compatible with ZeRO (DeepSpeed asserts the same); "
		     "use stage 0", c->name, type);
	if (lamb && (V->bf16.enabled || (V->fp16.enabled && V->fp16.loss_scale > 0)))
		FAIL("%s: key 'optimizer.type': OneBitLamb needs dynamic loss scaling (fp16 with loss_scale 0, or fp32); %s",
		     c->name, V->bf16.enabled ? "bf16 has a fixed scale of 1" : "fp16.loss_scale is static");
	if (lamb && V->optimizer.params.min_coeff > V->optimizer.params.max_coeff)
		FAIL("%s: key 'optimizer.params.min_coeff': must not exceed max_coeff", c->name);
	if (lamb && V->optimizer.params.factor_min > V->optimizer.params.factor_max)
		FAIL("%s: key 'optimizer.params.factor_min': must not exceed factor_max", c->name);
	if (GIVEN(optimizer.params.bias_correction) && !V->optimizer.params.bias_correction)
		NOTE(DS_NOTE_WARNING, "key 'optimizer.params.bias_correction' has no effect: %s never corrects bias "
		     "(DeepSpeed takes the key and ignores it too)", type);
	if (V->optimizer.params.eps_inside_sqrt)
		NOTE(DS_NOTE_WARNING, "key 'optimizer.params.eps_inside_sqrt' has no effect: %s adds eps outside the "
		     "square root (DeepSpeed takes the key and ignores it too)", type);
	return check_params(c, "optimizer", type,
			    lamb ? obl_params : !strcmp(type, "ZeroOneAdam") ? zoa_params : oba_params, err);
}

static int optimizer_rules(struct ds_config *c, struct ds_err *err)
{
	const char *type = V->optimizer.type;
	if (given(c, "optimizer.params.max_grad_norm"))
		FAIL("%s: key 'optimizer.params.max_grad_norm': use the top-level gradient_clipping instead (DeepSpeed raises ValueError too)",
		     c->name);
	if (!type) {
		for (int i = 0; i < c->nents; i++)
			if (c->ents[i].src == DS_SRC_FILE && !strncmp(c->ents[i].path, "optimizer.", 10))
				FAIL("%s: key 'optimizer.type': required when the optimizer section is given", c->name);
		return 0;
	}
	if (V->optimizer.params.amsgrad)
		FAIL("%s: key 'optimizer.params.amsgrad': must be false (DeepSpeed's Adam kernels reject amsgrad)",
		     c->name);
	if (!strcmp(type, "Adam") || !strcmp(type, "AdamW")) {
		if (!strcmp(type, "AdamW") && GIVEN(optimizer.params.adam_w_mode) && !V->optimizer.params.adam_w_mode)
			FAIL("%s: key 'optimizer.params.adam_w_mode': AdamW is always decoupled; use type \"Adam\" with adam_w_mode false for L2",
			     c->name);
		if (given(c, "optimizer.params.fp32_optimizer_states") &&
		    !json_is_true(ds_config_find_ent(c, "optimizer.params.fp32_optimizer_states")->val))
			FAIL("%s: key 'optimizer.params.fp32_optimizer_states': dstk keeps optimizer states in fp32; only true is accepted",
			     c->name);
		return check_params(c, "optimizer", type, adam_params, err);
	}
	if (!strcmp(type, "Lamb")) {
		if (V->bf16.enabled || (V->fp16.enabled && V->fp16.loss_scale > 0))
			FAIL("%s: key 'optimizer.type': Lamb needs dynamic loss scaling (fp16 with loss_scale 0, or fp32); %s",
			     c->name, V->bf16.enabled ? "bf16 has a fixed scale of 1" : "fp16.loss_scale is static");
		if (V->optimizer.params.min_coeff > V->optimizer.params.max_coeff)
			FAIL("%s: key 'optimizer.params.min_coeff': must not exceed max_coeff", c->name);
		return check_params(c, "optimizer", type, lamb_params, err);
	}
	if (!strcmp(type, "SGD")) {
		if (V->optimizer.params.nesterov &&
		    (V->optimizer.params.momentum <= 0 || V->optimizer.params.dampening != 0))
			FAIL("%s: key 'optimizer.params.nesterov': needs momentum > 0 and dampening 0", c->name);
		return check_params(c, "optimizer", type, sgd_params, err);
	}
	if (!strcmp(type, "OneBitAdam") || !strcmp(type, "ZeroOneAdam") || !strcmp(type, "OneBitLamb"))
		return onebit_rules(c, type, err);
	FAIL("%s: key 'optimizer.type': \"%s\" is not supported by dstk (it implements Adam, AdamW, Lamb, SGD, "
	     "OneBitAdam, ZeroOneAdam and OneBitLamb)", c->name, type);
}

static int scheduler_rules(struct ds_config *c, struct ds_err *err)
{
	const char *type = V->scheduler.type;
	if (strcmp(V->dstk.lr_decay_style, "none")) {
		if (type)
			FAIL("%s: key 'dstk.lr_decay_style': \"%s\" is a schedule of its own; remove it or the scheduler section",
			     c->name, V->dstk.lr_decay_style);
		if (GIVEN(dstk.lr_decay_iters) && V->dstk.lr_warmup_iters >= (double)V->dstk.lr_decay_iters)
			FAIL("%s: key 'dstk.lr_warmup_iters': %g must be less than lr_decay_iters %lld", c->name,
			     V->dstk.lr_warmup_iters, (long long)V->dstk.lr_decay_iters);
	} else {
		static const char *const neox[] = { "dstk.lr_warmup_iters", "dstk.lr_decay_iters", "dstk.min_lr" };
		for (size_t i = 0; i < sizeof(neox) / sizeof(neox[0]); i++)
			if (given(c, neox[i]))
				DS_TRY(ds_config_note(c, DS_NOTE_IGNORED, "%s: dstk.lr_decay_style is \"none\"", neox[i]));
	}
	if (!type) {
		for (int i = 0; i < c->nents; i++)
			if (c->ents[i].src == DS_SRC_FILE && !strncmp(c->ents[i].path, "scheduler.", 10))
				FAIL("%s: key 'scheduler.type': required when the scheduler section is given", c->name);
		return 0;
	}
	if (!strcmp(type, "WarmupLR"))
		return check_params(c, "scheduler", type, wlr_params, err);
	if (!strcmp(type, "WarmupDecayLR") || !strcmp(type, "WarmupCosineLR")) {
		if (!GIVEN(scheduler.params.total_num_steps))
			FAIL("%s: key 'scheduler.params.total_num_steps': required by %s", c->name, type);
		/* DeepSpeed's WarmupDecayLR warns and runs (the lr stays in warmup) */
		if (V->scheduler.params.total_num_steps < V->scheduler.params.warmup_num_steps)
			DS_TRY(ds_config_note(c, DS_NOTE_WARNING,
					      "key 'scheduler.params.total_num_steps' %lld is less than warmup_num_steps %lld: the lr never leaves its warmup (as in DeepSpeed)",
					      (long long)V->scheduler.params.total_num_steps,
					      (long long)V->scheduler.params.warmup_num_steps));
		return check_params(c, "scheduler", type, type[6] == 'D' ? wdlr_params : wclr_params, err);
	}
	if (!strcmp(type, "OneCycle")) {
		if (!GIVEN(scheduler.params.cycle_min_lr) || !GIVEN(scheduler.params.cycle_max_lr))
			FAIL("%s: key 'scheduler.params.%s': required by OneCycle", c->name,
			     GIVEN(scheduler.params.cycle_min_lr) ? "cycle_max_lr" : "cycle_min_lr");
		if (V->scheduler.params.cycle_min_lr > V->scheduler.params.cycle_max_lr)
			FAIL("%s: key 'scheduler.params.cycle_min_lr': must not exceed cycle_max_lr", c->name);
		if (GIVEN(scheduler.params.decay_lr_rate) && V->scheduler.params.decay_lr_rate > 0 &&
		    V->scheduler.params.decay_step_size == 0)
			FAIL("%s: key 'scheduler.params.decay_lr_rate': has no effect with decay_step_size 0; set decay_step_size",
			     c->name);
		return check_params(c, "scheduler", type, oc_params, err);
	}
	return check_params(c, "scheduler", type, lrrt_params, err); /* LRRangeTest: the enum allows no other */
}

/* A key given in the file under prefix that its section's switch leaves
 * without effect: DeepSpeed never reads it, so dstk accepts and lists it
 * (--check), whatever dstk implements.  0 or DS_ENOMEM. */
static int ignore_under(struct ds_config *c, const char *prefix, const char *except, const char *why)
{
	size_t n = strlen(prefix);
	for (int i = 0; i < c->nents; i++) {
		const struct ds_config_ent *e = &c->ents[i];
		if (e->src != DS_SRC_FILE || strncmp(e->path, prefix, n) || (except && !strcmp(e->path, except)))
			continue;
		NOTE(DS_NOTE_IGNORED, "%s: %s", e->path, why);
	}
	return 0;
}

static int zero_rules(struct ds_config *c, struct ds_err *err)
{
	(void)err;
	if (DS_CONFIG_AUTO(V, zero_optimization.stage))
		return 0; /* "auto", "all" or a list: ds-autotune decides */
	int64_t stage = V->zero_optimization.stage;
	const char *opd = V->zero_optimization.offload_param.device;
	const char *ood = V->zero_optimization.offload_optimizer.device;
	char why[96];
	/* the stage switches off what belongs to other stages (DeepSpeed's
	 * ZeRO optimizers read only their stage's keys) */
	snprintf(why, sizeof(why), "ZeRO stage 3 only (stage is %lld)", (long long)stage);
	if (stage != 3) {
		static const char *const s3[] = { "sub_group_size", "stage3_prefetch_bucket_size",
						  "stage3_param_persistence_threshold",
						  "stage3_model_persistence_threshold", "stage3_max_live_parameters",
						  "stage3_max_reuse_distance",
						  "stage3_gather_16bit_weights_on_model_save", "offload_param." };
		/* dstk streams NVMe-offloaded optimizer states by sub-group at
		 * stages 1-2 too (DeepSpeed's stage 1-2 keeps them in memory) */
		int subgroups = stage >= 1 && !strcmp(ood, "nvme");
		for (size_t i = subgroups; i < sizeof(s3) / sizeof(s3[0]); i++) {
			char p[128];
			snprintf(p, sizeof(p), "zero_optimization.%s", s3[i]);
			DS_TRY(ignore_under(c, p, NULL, why));
		}
		opd = "none";
	}
	if (stage == 0) {
		DS_TRY(ignore_under(c, "zero_optimization.offload_optimizer.", NULL, "ZeRO stages 1-3 only (stage is 0)"));
		ood = "none";
	}
	if (!strcmp(opd, "none"))
		DS_TRY(ignore_under(c, "zero_optimization.offload_param.", "zero_optimization.offload_param.device",
				    "offload_param.device is \"none\""));
	if (!strcmp(ood, "none"))
		DS_TRY(ignore_under(c, "zero_optimization.offload_optimizer.",
				    "zero_optimization.offload_optimizer.device", "offload_optimizer.device is \"none\""));
	if (strcmp(ood, "none") && V->zero_optimization.offload_optimizer.ratio < 1 && stage != 3)
		ERR("%s: key 'zero_optimization.offload_optimizer.ratio': Partial offloading only supported for ZeRO Stage 3 (stage is %lld)",
		    c->name, (long long)stage);
	if (!strcmp(opd, "nvme") && !GIVEN(zero_optimization.offload_param.nvme_path))
		ERR("%s: key 'zero_optimization.offload_param.nvme_path': required with device \"nvme\"", c->name);
	if (!strcmp(ood, "nvme") && !GIVEN(zero_optimization.offload_optimizer.nvme_path))
		ERR("%s: key 'zero_optimization.offload_optimizer.nvme_path': required with device \"nvme\"", c->name);
	if (V->zero_optimization.allgather_bucket_size % 2)
		ERR("%s: key 'zero_optimization.allgather_bucket_size': must be a multiple of 2", c->name);
	if (stage == 2 && V->zero_optimization.reduce_scatter) {
		if (V->prescale_gradients)
			ERR("%s: key 'prescale_gradients': ZeRO stage 2 with reduce_scatter does not prescale (DeepSpeed asserts); set reduce_scatter false",
			    c->name);
		if (V->gradient_predivide_factor != 1)
			ERR("%s: key 'gradient_predivide_factor': ZeRO stage 2 with reduce_scatter needs 1.0 (DeepSpeed asserts); set reduce_scatter false",
			    c->name);
	}
	return 0;
}

/* A section switched off by its gate: its keys are accepted and listed. */
static int gated(struct ds_config *c, const char *prefix, const char *gate, int on, int gate_src)
{
	char why[128];
	if (on || gate_src == DS_SRC_AUTO)
		return 0; /* on, or "auto" for ds-autotune to decide */
	snprintf(why, sizeof(why), "%s is false", gate);
	return ignore_under(c, prefix, gate, why);
}

static int gates(struct ds_config *c)
{
	const struct ds_config_values *v = V;
	DS_TRY(gated(c, "fp16.", "fp16.enabled", v->fp16.enabled, v->src.fp16.enabled));
	DS_TRY(gated(c, "bf16.", "bf16.enabled", v->bf16.enabled, v->src.bf16.enabled));
	DS_TRY(gated(c, "flops_profiler.", "flops_profiler.enabled", v->flops_profiler.enabled,
		     v->src.flops_profiler.enabled));
	DS_TRY(gated(c, "tensorboard.", "tensorboard.enabled", v->tensorboard.enabled, v->src.tensorboard.enabled));
	DS_TRY(gated(c, "csv_monitor.", "csv_monitor.enabled", v->csv_monitor.enabled, v->src.csv_monitor.enabled));
	return gated(c, "comms_logger.", "comms_logger.enabled", v->comms_logger.enabled, v->src.comms_logger.enabled);
}

/* Settings DeepSpeed accepts and reads differently from what they seem
 * (or not at all): accepted, with one warning each. */
static int accepted_with_warning(struct ds_config *c)
{
	const struct ds_config_values *v = V;
	if (v->fp16.enabled && v->fp16.loss_scale > 0) {
		/* DeepSpeed builds a static scaler when loss_scale > 0 and
		 * never reads the dynamic keys (get_dynamic_loss_scale_args) */
		static const char *const dyn[] = { "fp16.initial_scale_power", "fp16.loss_scale_window",
						   "fp16.hysteresis", "fp16.consecutive_hysteresis",
						   "fp16.min_loss_scale" };
		for (size_t i = 0; i < sizeof(dyn) / sizeof(dyn[0]); i++)
			if (given(c, dyn[i]))
				NOTE(DS_NOTE_WARNING, "key '%s' has no effect: fp16.loss_scale %g is a static scale (0 is dynamic)",
				     dyn[i], v->fp16.loss_scale);
	}
	static const char *const unread[] = { "disable_allgather", "fp32_allreduce" };
	for (size_t i = 0; i < sizeof(unread) / sizeof(unread[0]); i++)
		if (given(c, unread[i]))
			NOTE(DS_NOTE_WARNING, "key '%s' has no effect: DeepSpeed parses it and never reads it", unread[i]);
	if (given(c, "aio.thread_count"))
		NOTE(DS_NOTE_WARNING, "key 'aio.thread_count' has no effect: DeepSpeed renamed it intra_op_parallelism and no longer reads it; set aio.intra_op_parallelism");
	if (given_true(c, "activation_checkpointing.partition_activations") && c->o.tp_size <= 1)
		NOTE(DS_NOTE_WARNING, "key 'activation_checkpointing.partition_activations' has no effect: it splits checkpointed activations across tensor (model) parallel ranks and this run has tensor-parallel size 1");
	if (v->flops_profiler.enabled && v->flops_profiler.profile_step < 1)
		NOTE(DS_NOTE_WARNING, "key 'flops_profiler.profile_step' %lld: DeepSpeed's step counter never equals it, so no profile is taken (as in DeepSpeed); use a step >= 1",
		     (long long)v->flops_profiler.profile_step);
	return 0;
}

int ds_config_rules(struct ds_config *c, struct ds_err *err)
{
	int fp16 = V->fp16.enabled, bf16 = V->bf16.enabled, amp = given_true(c, "amp.enabled");
	int64_t stage = V->zero_optimization.stage;
	if (fp16 && bf16)
		ERR("%s: key 'bf16.enabled': bfloat16 and fp16 modes cannot be simultaneously enabled (fp16.enabled is true)",
		    c->name);
	if (amp && stage > 0)
		ERR("%s: key 'amp.enabled': Amp and ZeRO are not currently compatible (zero_optimization.stage is %lld)",
		    c->name, (long long)stage);
	if (amp && (fp16 || bf16))
		ERR("%s: key 'amp.enabled': Cannot enable both amp with (legacy) fp16 or bfloat16 mode", c->name);
	if (fp16 && given_true(c, "fp16.fp16_master_weights_and_grads") && stage != 2)
		ERR("%s: key 'fp16.fp16_master_weights_and_grads': only supported with ZeRO Stage 2 (stage is %lld)",
		    c->name, (long long)stage);
	if (given_true(c, "activation_checkpointing.contiguous_memory_optimization")) {
		/* DeepSpeed's configure() asserts this; its number_checkpoints
		 * may come from the caller (Megatron's --checkpoint-num-layers),
		 * so the file need not give it */
		if (!given_true(c, "activation_checkpointing.partition_activations"))
			ERR("%s: key 'activation_checkpointing.contiguous_memory_optimization': Contiguous Checkpointing is only available with partitioned activations (set partition_activations)",
			    c->name);
	}
	/* the pipeline section: stages "auto" or a count, a partition
	 * method DeepSpeed's PipelineModule knows (ds-train checks a type:
	 * regex against the model) */
	const json_t *st = V->pipeline.stages;
	if (st && !(json_is_string(st) && !strcmp(json_string_value(st), "auto")) &&
	    !(json_is_integer(st) && json_integer_value(st) >= 1))
		ERR("%s: key 'pipeline.stages': must be \"auto\" or a number of stages >= 1", c->name);
	const char *pm = V->pipeline.partition;
	if (pm && strcmp(pm, "best") && strcmp(pm, "parameters") && strcmp(pm, "uniform") && strncmp(pm, "type:", 5))
		ERR("%s: key 'pipeline.partition': '%s' is not a partition method (parameters, uniform, type:REGEX; "
		    "best is parameters)", c->name, pm);
	if (V->pipeline.activation_checkpoint_interval < 0 || V->pipeline.activation_checkpoint_interval > 1)
		ERR("%s: key 'pipeline.activation_checkpoint_interval': %lld is not implemented: dstk recomputes every "
		    "layer (1) or as activation_checkpointing says (0)", c->name,
		    (long long)V->pipeline.activation_checkpoint_interval);
	if (V->prescale_gradients && V->gradient_predivide_factor != 1)
		NOTE(DS_NOTE_WARNING, "key 'gradient_predivide_factor' has no effect with prescale_gradients (DeepSpeed reads it only without); use one of the two");
	const char *acc = V->data_types.grad_accum_dtype;
	if (acc && stage == 0) {
		const char *m = fp16 ? "fp16" : bf16 ? "bf16" : "fp32";
		int ok = !strcmp(m, acc) ? strcmp(m, "bf16") != 0 : !strcmp(m, "bf16") && !strcmp(acc, "fp32");
		if (!ok)
			ERR("%s: key 'data_types.grad_accum_dtype': %s accumulation with %s training is not implemented without ZeRO (DeepSpeed raises NotImplementedError too)",
			    c->name, acc, m);
	}
	if (V->autotuning.start_profile_step > V->autotuning.end_profile_step)
		ERR("%s: key 'autotuning.end_profile_step': must not be less than start_profile_step", c->name);
	if (V->scheduler.params.cycle_min_mom > V->scheduler.params.cycle_max_mom)
		ERR("%s: key 'scheduler.params.cycle_min_mom': must not exceed cycle_max_mom", c->name);
	/* the value given ("auto" too, which is no list), not the field */
	const struct ds_config_ent *be = ds_config_find_ent(c, "optimizer.params.betas");
	json_t *betas = be && be->src != DS_SRC_AUTO ? be->val : NULL;
	if (betas) {
		double b0 = json_number_value(json_array_get(betas, 0)), b1 = json_number_value(json_array_get(betas, 1));
		if (json_array_size(betas) != 2 || !json_is_number(json_array_get(betas, 0)) ||
		    !json_is_number(json_array_get(betas, 1)) || b0 < 0 || b0 >= 1 || b1 < 0 || b1 >= 1)
			ERR("%s: key 'optimizer.params.betas': expected two numbers in [0, 1)", c->name);
	}
	if (GIVEN(dstk.nonfinite_max_consecutive) && !strcmp(V->dstk.nonfinite_policy, "abort"))
		ERR("%s: key 'dstk.nonfinite_max_consecutive': has no effect with nonfinite_policy \"abort\" (it aborts at the first)",
		    c->name);
	DS_TRY(gates(c));
	DS_TRY(accepted_with_warning(c));
	int rc;
	if ((rc = zero_rules(c, err)) == DS_ENOMEM || (rc = optimizer_rules(c, err)) == DS_ENOMEM ||
	    (rc = scheduler_rules(c, err)) == DS_ENOMEM)
		return rc;
	return c->errs.n ? DS_EINVAL : 0;
}

int ds_config_applies(const struct ds_config *c, const char *path)
{
	static const struct { const char *name; const char *const *params; } tab[] = {
		{ "Adam", adam_params }, { "AdamW", adam_params }, { "Lamb", lamb_params }, { "SGD", sgd_params },
		{ "OneBitAdam", oba_params }, { "ZeroOneAdam", zoa_params }, { "OneBitLamb", obl_params },
		{ "WarmupLR", wlr_params }, { "WarmupDecayLR", wdlr_params }, { "WarmupCosineLR", wclr_params },
		{ "OneCycle", oc_params }, { "LRRangeTest", lrrt_params },
	};
	const char *type;
	if (!strncmp(path, "optimizer.params.", 17))
		type = V->optimizer.type;
	else if (!strncmp(path, "scheduler.params.", 17))
		type = V->scheduler.type;
	else
		return 1;
	for (size_t i = 0; type && i < sizeof(tab) / sizeof(tab[0]); i++)
		if (!strcmp(type, tab[i].name))
			return in_list(tab[i].params, path + 17);
	return 0;
}

/* The switch of the section around path: the nearest ancestor P with a
 * value (given or default) at P.enabled or P.shared_parameters.enabled
 * (compression_training's layout).  Its path into gate, its entry, or NULL. */
static const struct ds_config_ent *section_gate(const struct ds_config *c, const char *path, char *gate, size_t n)
{
	char pre[512];
	snprintf(pre, sizeof(pre), "%s", path);
	for (char *dot = strrchr(pre, '.'); dot; dot = strrchr(pre, '.')) {
		*dot = 0;
		static const char *const sw[] = { "enabled", "shared_parameters.enabled" };
		for (size_t i = 0; i < 2; i++) {
			snprintf(gate, n, "%s.%s", pre, sw[i]);
			const struct ds_config_ent *e = ds_config_find_ent(c, gate);
			if (e && strcmp(gate, path))
				return e;
		}
	}
	return NULL;
}

int ds_config_unsupported(struct ds_config *c, struct ds_err *err)
{
	const char *last_help = NULL, *last_path = "";
	(void)err;
	for (int i = 0; i < c->nents; i++) {
		const struct ds_config_ent *e = &c->ents[i];
		const struct ds_config_key *k = &T[e->key];
		if (e->src != DS_SRC_FILE || k->status != DS_KEY_UNSUPPORTED)
			continue;
		const char *last = strrchr(e->path, '.');
		last = last ? last + 1 : e->path;
		char gate[600];
		const struct ds_config_ent *g = section_gate(c, e->path, gate, sizeof(gate));
		if (g && !json_is_true(g->val)) {
			/* a switched-off section: DeepSpeed never reads it */
			char why[640];
			snprintf(why, sizeof(why), "%s is false%s", gate, g->src == DS_SRC_DEFAULT ? " (default)" : "");
			DS_TRY(ds_config_note(c, DS_NOTE_IGNORED, "%s: %s", e->path, why));
			continue;
		}
		if (g && T[g->key].status == DS_KEY_UNSUPPORTED)
			continue; /* the switch, turned on, is the one error */
		if (!strncmp(e->path, "optimizer.params.", 17) && V->optimizer.type &&
		    !ds_config_applies(c, "optimizer.params.lr"))
			continue; /* the optimizer type dstk lacks is the one error */
		int off;
		if (!strcmp(last, "enabled")) {
			off = json_is_false(e->val);
		} else {
			json_t *d = k->def ? json_loads(k->def, JSON_DECODE_ANY, NULL) : NULL;
			off = d && json_equal(d, e->val);
			json_decref(d);
		}
		/* one error per section dstk lacks, naming its first key */
		size_t root = strcspn(e->path, ".");
		if (!off && (!last_help || last_help != k->help || strncmp(last_path, e->path, root) ||
			     last_path[root] != e->path[root]))
			ERR("%s: key '%s': not supported by dstk: %s", c->name, e->path, k->help);
		if (!off) {
			last_help = k->help;
			last_path = e->path;
		}
	}
	return c->errs.n ? DS_EINVAL : 0;
}

/* 1 when s is one of the '|'-separated values of list. */
static int in_bars(const char *list, const char *s)
{
	size_t n = strlen(s);
	for (const char *p = list; p; p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL)
		if (!strncmp(p, s, n) && (p[n] == '|' || !p[n]))
			return 1;
	return 0;
}

int ds_config_unimplemented(const struct ds_config *c, struct ds_err *err)
{
	for (int i = 0; i < c->nents; i++) {
		const struct ds_config_ent *e = &c->ents[i];
		const struct ds_config_key *k = &T[e->key];
		if (e->src == DS_SRC_FILE && k->unimpl && json_is_string(e->val) &&
		    in_bars(k->unimpl, json_string_value(e->val)))
			return ds_err_set(err, DS_EINVAL, "%s: %s '%s': %s", c->name, e->path, json_string_value(e->val), k->unimpl_why);
	}
	return 0;
}

/* ---- batch triad ----------------------------------------------------- */

/* " (a, b, c)" list of the divisors of n, at most 8 of them. */
static void divisors(int64_t n, char *buf, size_t len)
{
	size_t o = 0;
	int cnt = 0;
	buf[0] = 0;
	for (int64_t d = 1; d <= n && cnt < 8; d++)
		if (n % d == 0) {
			o += (size_t)snprintf(buf + o, len - o, "%s%lld", cnt ? ", " : "", (long long)d);
			cnt++;
		}
}

/* "9 or 12": the multiples of m around x (the lower one only when > 0). */
static void multiples(int64_t x, int64_t m, char *buf, size_t len)
{
	int64_t lo = x / m * m;
	if (lo > 0 && lo != x)
		snprintf(buf, len, "%lld or %lld", (long long)lo, (long long)(lo + m));
	else
		snprintf(buf, len, "%lld", (long long)(lo == x && lo > 0 ? lo : lo + m));
}

int ds_config_triad(struct ds_config *c, struct ds_err *err)
{
	const char *ktb = "train_batch_size", *kmb = "train_micro_batch_size_per_gpu",
		   *kga = "gradient_accumulation_steps";
	const struct ds_config_values *v = V;
	int64_t W = c->o.world_size, TB = v->train_batch_size, MB = v->train_micro_batch_size_per_gpu,
		GA = v->gradient_accumulation_steps;
	int tb = v->src.train_batch_size == DS_SRC_FILE, mb = v->src.train_micro_batch_size_per_gpu == DS_SRC_FILE,
	    ga = v->src.gradient_accumulation_steps == DS_SRC_FILE;
	char a[160], b[160];
	c->batch.world_size = (int)W;
	if (DS_CONFIG_AUTO(v, train_batch_size) || DS_CONFIG_AUTO(v, train_micro_batch_size_per_gpu) ||
	    DS_CONFIG_AUTO(v, gradient_accumulation_steps))
		return 0; /* allow_auto: ds-autotune resolves the triad */
	if (tb && mb && ga) {
	} else if (tb && mb) {
		GA = TB / MB / W;
	} else if (tb && ga) {
		MB = TB / W / GA;
	} else if (mb && ga) {
		if ((double)MB * (double)GA * (double)W > 2147483647.0)
			FAIL("%s: key 'train_micro_batch_size_per_gpu': %lld x %lld accumulation steps x world size %lld is too large a batch",
			     c->name, (long long)MB, (long long)GA, (long long)W);
		TB = MB * GA * W;
	} else if (tb) {
		GA = 1;
		MB = TB / W;
	} else if (mb) {
		GA = 1;
		if ((double)MB * (double)W > 2147483647.0)
			FAIL("%s: key 'train_micro_batch_size_per_gpu': %lld x world size %lld is too large a batch", c->name,
			     (long long)MB, (long long)W);
		TB = MB * W;
	} else {
		FAIL("%s: key 'train_batch_size': Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided",
		     c->name);
	}
	if ((double)MB * (double)GA * (double)W > 2147483647.0)
		FAIL("%s: key 'train_batch_size': micro %lld x accumulation %lld x world size %lld is more than 2147483647 samples",
		     c->name, (long long)MB, (long long)GA, (long long)W);
	if (MB <= 0) {
		multiples(TB, W * GA, a, sizeof(a));
		FAIL("%s: key 'train_batch_size': Train micro batch size per GPU: %lld has to be greater than 0 (%lld samples over world size %lld x %lld accumulation steps); set train_batch_size to %s",
		     c->name, (long long)MB, (long long)TB, (long long)W, (long long)GA, a);
	}
	if (GA <= 0) {
		multiples(TB, MB * W, a, sizeof(a));
		if (TB % W == 0)
			divisors(TB / W, b, sizeof(b));
		FAIL("%s: key 'train_batch_size': Gradient accumulation steps: %lld has to be greater than 0 (%lld < micro %lld x world size %lld); set train_batch_size to %s%s%s%s",
		     c->name, (long long)GA, (long long)TB, (long long)MB, (long long)W, a,
		     TB % W == 0 ? ", or train_micro_batch_size_per_gpu to one of " : "", TB % W == 0 ? b : "", "");
	}
	if ((double)MB * (double)GA * (double)W != (double)TB || TB != MB * GA * W) {
		char msg[256];
		snprintf(msg, sizeof(msg),
			 "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size %lld != %lld * %lld * %lld",
			 (long long)TB, (long long)MB, (long long)GA, (long long)W);
		if (tb && mb && ga) {
			int64_t q1 = MB * W, q2 = GA * W;
			snprintf(a, sizeof(a), "%s%lld", "", (long long)(MB * GA * W));
			b[0] = 0;
			if (TB % q1 == 0)
				snprintf(b + strlen(b), sizeof(b) - strlen(b), ", or gradient_accumulation_steps to %lld",
					 (long long)(TB / q1));
			if (TB % q2 == 0)
				snprintf(b + strlen(b), sizeof(b) - strlen(b), ", or train_micro_batch_size_per_gpu to %lld",
					 (long long)(TB / q2));
			FAIL("%s: key 'train_batch_size': %s; set train_batch_size to %s%s", c->name, msg, a, b);
		}
		if (tb && ga) {
			multiples(TB, GA * W, a, sizeof(a));
			b[0] = 0;
			if (TB % W == 0)
				divisors(TB / W, b, sizeof(b));
			FAIL("%s: key 'train_batch_size': %s; set train_batch_size to %s%s%s", c->name, msg, a,
			     b[0] ? ", or gradient_accumulation_steps to one of " : "", b);
		}
		multiples(TB, mb ? MB * W : W, a, sizeof(a));
		b[0] = 0;
		if (mb && TB % W == 0)
			divisors(TB / W, b, sizeof(b));
		FAIL("%s: key 'train_batch_size': %s; set train_batch_size to %s%s%s", c->name, msg, a,
		     b[0] ? ", or train_micro_batch_size_per_gpu to one of " : "", b);
	}
	c->batch.train_batch_size = TB;
	c->batch.micro_batch = MB;
	c->batch.grad_accum = GA;
	c->batch.resolved = 1;
	if (!tb)
		DS_TRY(ds_config_set_inferred(c, ktb, json_integer(TB)));
	if (!mb)
		DS_TRY(ds_config_set_inferred(c, kmb, json_integer(MB)));
	if (!ga)
		DS_TRY(ds_config_set_inferred(c, kga, json_integer(GA)));
	return 0;
}

int ds_config_infer(struct ds_config *c)
{
	const struct ds_config_values *v = V;
	int64_t stage = DS_CONFIG_AUTO(v, zero_optimization.stage) ? -1 : v->zero_optimization.stage;
	const char *m = v->fp16.enabled ? "fp16" : v->bf16.enabled ? "bf16" : "fp32";
	if (v->src.zero_optimization.overlap_comm == DS_SRC_UNSET && stage >= 0)
		DS_TRY(ds_config_set_inferred(c, "zero_optimization.overlap_comm", json_boolean(stage == 3)));
	if (v->src.communication_data_type == DS_SRC_UNSET)
		DS_TRY(ds_config_set_inferred(c, "communication_data_type", json_string(m)));
	if (v->src.data_types.grad_accum_dtype == DS_SRC_UNSET && stage >= 0)
		DS_TRY(ds_config_set_inferred(c, "data_types.grad_accum_dtype",
					   json_string(!strcmp(m, "bf16") && stage == 0 ? "fp32" : m)));
	return 0;
}

void ds_config_batch(const struct ds_config *c, struct ds_config_batch *b)
{
	*b = c->batch;
}

/* ---- typed views ----------------------------------------------------- */

const char *ds_config_opt_name(int type)
{
	static const char *const n[] = { "none", "Adam", "AdamW", "Lamb", "SGD", "OneBitAdam", "ZeroOneAdam",
					 "OneBitLamb" };
	return type >= 0 && type <= DS_OPT_ONEBIT_LAMB ? n[type] : "?";
}

const char *ds_config_sched_name(int type)
{
	static const char *const n[] = { "none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle",
					 "LRRangeTest" };
	return type >= 0 && type <= DS_CFG_SCHED_LR_RANGE_TEST ? n[type] : "?";
}

void ds_config_optimizer(const struct ds_config *c, struct ds_config_optimizer *o)
{
	const struct ds_config_values *v = V;
	const char *t = v->optimizer.type ? v->optimizer.type : "none";
	memset(o, 0, sizeof(*o));
	for (int i = DS_OPT_ADAM; i <= DS_OPT_ONEBIT_LAMB; i++)
		if (!strcmp(t, ds_config_opt_name(i)))
			o->type = i;
	o->adamw = o->type == DS_OPT_ADAMW || (o->type == DS_OPT_ADAM && v->optimizer.params.adam_w_mode) ||
		   o->type == DS_OPT_LAMB || o->type >= DS_OPT_ONEBIT_ADAM;
	o->lr = v->optimizer.params.lr;
	o->beta1 = json_number_value(json_array_get(v->optimizer.params.betas, 0));
	o->beta2 = json_number_value(json_array_get(v->optimizer.params.betas, 1));
	o->eps = v->optimizer.params.eps;
	o->weight_decay = v->optimizer.params.weight_decay;
	o->bias_correction = v->optimizer.params.bias_correction;
	o->eps_inside_sqrt = v->optimizer.params.eps_inside_sqrt;
	o->max_coeff = v->optimizer.params.max_coeff;
	o->min_coeff = v->optimizer.params.min_coeff;
	o->momentum = v->optimizer.params.momentum;
	o->dampening = v->optimizer.params.dampening;
	o->nesterov = v->optimizer.params.nesterov;
	o->freeze_step = v->optimizer.params.freeze_step;
	static const char *const be[] = { "nccl", "mpi", "compressed" };
	for (int i = 0; i < 3; i++)
		if (v->optimizer.params.comm_backend_name && !strcmp(v->optimizer.params.comm_backend_name, be[i]))
			o->comm_backend = i;
	o->var_freeze_step = v->optimizer.params.var_freeze_step;
	o->var_update_scaler = v->optimizer.params.var_update_scaler;
	o->local_step_scaler = v->optimizer.params.local_step_scaler;
	o->local_step_clipper = v->optimizer.params.local_step_clipper;
	o->coeff_beta = v->optimizer.params.coeff_beta;
	o->factor_max = v->optimizer.params.factor_max;
	o->factor_min = v->optimizer.params.factor_min;
	o->factor_threshold = v->optimizer.params.factor_threshold;
}

void ds_config_scheduler(const struct ds_config *c, struct ds_config_scheduler *s)
{
	const struct ds_config_values *v = V;
	const char *t = v->scheduler.type ? v->scheduler.type : "none";
	memset(s, 0, sizeof(*s));
	for (int i = DS_CFG_SCHED_WARMUP_LR; i <= DS_CFG_SCHED_LR_RANGE_TEST; i++)
		if (!strcmp(t, ds_config_sched_name(i)))
			s->type = i;
#define P(x) s->x = v->scheduler.params.x
	P(last_batch_iteration);
	P(warmup_min_lr);
	P(warmup_max_lr);
	P(warmup_num_steps);
	s->warmup_linear = !strcmp(v->scheduler.params.warmup_type, "linear");
	P(total_num_steps);
	P(warmup_min_ratio);
	P(cos_min_ratio);
	P(lr_range_test_min_lr);
	P(lr_range_test_step_size);
	P(lr_range_test_step_rate);
	P(lr_range_test_staircase);
	P(cycle_min_lr);
	P(cycle_max_lr);
	P(decay_lr_rate);
	P(cycle_first_step_size);
	P(cycle_first_stair_count);
	P(decay_step_size);
	P(cycle_momentum);
	P(cycle_min_mom);
	P(cycle_max_mom);
	P(decay_mom_rate);
#undef P
	/* DeepSpeed's OneCycle: the falling half mirrors the rising one unless given */
	s->cycle_second_step_size = v->src.scheduler.params.cycle_second_step_size == DS_SRC_FILE
		? v->scheduler.params.cycle_second_step_size : s->cycle_first_step_size;
	s->cycle_second_stair_count = v->src.scheduler.params.cycle_second_stair_count == DS_SRC_FILE
		? v->scheduler.params.cycle_second_stair_count : s->cycle_first_stair_count;
}
