/* setup.c - from the DeepSpeed config, the model config and the flags to
 * the engine's, scheduler's and loop's settings.  Every config value comes
 * from the typed struct lib/config fills (ds_config_values), defaults
 * included: none is repeated here.  What the trainer does not implement
 * yet is refused here with the key and the reason, never silently ignored
 * (DESIGN.md "Configuration"). */
#include "driver/train_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "cpu/gemm_bf16.h"
#include "engine/estimate.h"
#include "io/swap.h"
#include "util/log.h"
#include "util/mem.h"

static int map_optimizer(struct ds_train_setup *s, struct ds_err *err)
{
	struct ds_config_optimizer co;
	ds_config_optimizer(s->cfg, &co);
	struct ds_optim_params *p = &s->eng.optim;
	switch (co.type) {
	case DS_OPT_NONE:
		/* DeepSpeed needs a client optimizer then; dstk has none, so the
		 * documented default optimizer stands in, with the table's
		 * default params, and says so */
		ds_optim_params_init(p, DS_OPTIM_ADAMW);
		co.adamw = 1;
		ds_log_info("%s: no optimizer section; using AdamW (lr %g)", ds_config_name(s->cfg), co.lr);
		break;
	case DS_OPT_ADAM: ds_optim_params_init(p, DS_OPTIM_ADAM); break;
	case DS_OPT_ADAMW: ds_optim_params_init(p, DS_OPTIM_ADAMW); break;
	case DS_OPT_LAMB: ds_optim_params_init(p, DS_OPTIM_LAMB); break;
	case DS_OPT_SGD: ds_optim_params_init(p, DS_OPTIM_SGD); break;
	case DS_OPT_ONEBIT_ADAM: ds_optim_params_init(p, DS_OPTIM_ONEBIT_ADAM); break;
	case DS_OPT_ZERO_ONE_ADAM: ds_optim_params_init(p, DS_OPTIM_ZERO_ONE_ADAM); break;
	case DS_OPT_ONEBIT_LAMB: ds_optim_params_init(p, DS_OPTIM_ONEBIT_LAMB); break;
	default:
		return ds_err_set(err, DS_EINVAL, "%s: optimizer.type: not supported by the trainer",
				  ds_config_name(s->cfg));
	}
	p->lr = co.lr;
	p->weight_decay = co.weight_decay;
	if (co.type != DS_OPT_SGD) {
		p->beta1 = co.beta1;
		p->beta2 = co.beta2;
		p->eps = co.eps;
		p->bias_correction = co.bias_correction;
		p->adam_w_mode = co.type == DS_OPT_ADAMW || co.type == DS_OPT_NONE ? 1 : co.adamw;
	}
	if (co.type == DS_OPT_LAMB || co.type == DS_OPT_ONEBIT_LAMB) {
		p->eps_inside_sqrt = co.eps_inside_sqrt;
		p->max_coeff = co.max_coeff;
		p->min_coeff = co.min_coeff;
	}
	if (ds_optim_is_onebit(p->type)) {
		p->freeze_step = co.freeze_step;
		p->comm_backend = co.comm_backend;
		p->var_freeze_step = co.var_freeze_step;
		p->var_update_scaler = co.var_update_scaler;
		p->local_step_scaler = co.local_step_scaler;
		p->local_step_clipper = co.local_step_clipper;
		p->coeff_beta = co.coeff_beta;
		p->factor_max = co.factor_max;
		p->factor_min = co.factor_min;
		p->factor_threshold = co.factor_threshold;
		/* DeepSpeed's engine warns the same for each of the three */
		if (s->rank == 0 && !ds_config_values(s->cfg)->fp16.enabled)
			ds_log_warn("currently the convergence of %s is only verified under FP16 (DeepSpeed's warning)",
				    ds_config_opt_name(co.type));
	}
	if (co.type == DS_OPT_SGD) {
		p->momentum = co.momentum;
		p->dampening = co.dampening;
		p->nesterov = co.nesterov;
	}
	s->org_lr = co.lr;
	int rc = ds_optim_params_check(p, err);
	return rc < 0 ? ds_err_prefix(err, "%s: optimizer: ", ds_config_name(s->cfg)) : 0;
}

static void map_scheduler(struct ds_train_setup *s, int64_t train_iters)
{
	struct ds_config_scheduler cs;
	const struct ds_config_values *v = ds_config_values(s->cfg);
	if (strcmp(v->dstk.lr_decay_style, "none")) {
		/* GPT-NeoX's AnnealingLR; its length defaults to the run's */
		static const char *const st[] = { "constant", "linear", "cosine", "exponential" };
		ds_sched_params_init(&s->sched, DS_SCHED_NEOX);
		for (int i = 0; i < 4; i++)
			if (!strcmp(v->dstk.lr_decay_style, st[i]))
				s->sched.neox_decay = (enum ds_neox_decay)i;
		s->sched.neox_warmup_iter = v->dstk.lr_warmup_iters;
		s->sched.neox_end_iter = DS_CONFIG_GIVEN(v, dstk.lr_decay_iters) ? v->dstk.lr_decay_iters
						 : train_iters > 0 ? train_iters : 1;
		s->sched.neox_min_lr = v->dstk.min_lr;
		s->sched.total_num_steps = s->sched.neox_end_iter;
		return;
	}
	ds_config_scheduler(s->cfg, &cs);
	/* the config's enum follows DeepSpeed's order, as optim's does */
	static const enum ds_sched_type map[] = { DS_SCHED_NONE, DS_SCHED_WARMUP_LR, DS_SCHED_WARMUP_DECAY_LR,
						   DS_SCHED_WARMUP_COSINE_LR, DS_SCHED_ONE_CYCLE,
						   DS_SCHED_LR_RANGE_TEST };
	struct ds_sched_params *p = &s->sched;
	ds_sched_params_init(p, map[cs.type]);
	p->warmup_min_lr = cs.warmup_min_lr;
	p->warmup_max_lr = cs.warmup_max_lr;
	p->warmup_num_steps = cs.warmup_num_steps;
	p->warmup_type = cs.warmup_linear ? DS_WARMUP_LINEAR : DS_WARMUP_LOG;
	p->total_num_steps = cs.total_num_steps;
	p->warmup_min_ratio = cs.warmup_min_ratio;
	p->cos_min_ratio = cs.cos_min_ratio;
	p->cycle_min_lr = cs.cycle_min_lr;
	p->cycle_max_lr = cs.cycle_max_lr;
	p->decay_lr_rate = cs.decay_lr_rate;
	p->cycle_first_step_size = cs.cycle_first_step_size;
	p->cycle_second_step_size = cs.cycle_second_step_size;
	p->cycle_first_stair_count = cs.cycle_first_stair_count;
	p->cycle_second_stair_count = cs.cycle_second_stair_count;
	p->decay_step_size = cs.decay_step_size;
	p->cycle_momentum = cs.cycle_momentum;
	p->cycle_min_mom = cs.cycle_min_mom;
	p->cycle_max_mom = cs.cycle_max_mom;
	p->decay_mom_rate = cs.decay_mom_rate;
	p->lr_range_test_min_lr = cs.lr_range_test_min_lr;
	p->lr_range_test_step_size = cs.lr_range_test_step_size;
	p->lr_range_test_step_rate = cs.lr_range_test_step_rate;
	p->lr_range_test_staircase = cs.lr_range_test_staircase;
}

/* Keys the config accepts (ds-train --check passes them) that this trainer
 * cannot honour yet: refuse rather than train something else. */
/* fp16/bf16: the model's dtype, gradient accumulation, the loss scaler
 * (DeepSpeed's ZeRO path at stages >= 1, FP16_Optimizer for FusedAdam and
 * FP16_UnfusedOptimizer for the others at stage 0) and the non-finite
 * policy. */
static int map_precision(struct ds_train_setup *s, struct ds_err *err)
{
	const struct ds_config *c = s->cfg;
	const struct ds_config_values *v = ds_config_values(c);
	int fp16 = v->fp16.enabled, bf16 = v->bf16.enabled;
	s->eng.half = fp16 ? DS_HALF_FP16 : bf16 ? DS_HALF_BF16 : DS_HALF_NONE;
	const char *acc = v->data_types.grad_accum_dtype;
	s->eng.grad_accum_fp32 = acc && !strcmp(acc, "fp32");
	/* communication_data_type fp16/bf16 with an fp32 model: the gradient
	 * reductions travel and sum in that type.  A 16-bit model's 16-bit
	 * gradients reduce in its own dtype (the inferred default) or, with
	 * "fp32", in fp32 (comm_fp32); gradients accumulated in fp32 reduce
	 * in fp32 */
	const char *cdt = v->communication_data_type; /* inferred from the model's dtype when not given */
	s->eng.comm_half = s->eng.half != DS_HALF_NONE ? DS_HALF_NONE
			   : !strcmp(cdt, "fp16") ? DS_HALF_FP16 : !strcmp(cdt, "bf16") ? DS_HALF_BF16 : DS_HALF_NONE;
	s->eng.comm_fp32 = s->eng.half != DS_HALF_NONE && !strcmp(cdt, "fp32");
	s->eng.bf16_matmul = ds_bf16_mode_parse(v->dstk.bf16_matmul);
	if (s->eng.bf16_matmul < 0)   /* the key table admits only the modes */
		s->eng.bf16_matmul = DS_BF16_MM_AUTO;
	s->nonfinite_abort = !strcmp(v->dstk.nonfinite_policy, "abort");
	s->nonfinite_max = v->dstk.nonfinite_max_consecutive;
	struct ds_fp16_cfg fc;
	ds_fp16_cfg_init(&fc);
	fc.loss_scale = v->fp16.loss_scale;
	fc.initial_scale_power = (int)v->fp16.initial_scale_power;
	fc.loss_scale_window = v->fp16.loss_scale_window;
	fc.hysteresis = (int)v->fp16.hysteresis;
	fc.consecutive_hysteresis = v->fp16.consecutive_hysteresis;
	fc.min_loss_scale = (double)v->fp16.min_loss_scale;
	/* DeepSpeed's fp16 paths differ in which keys they read at all */
	fc.given |= DS_CONFIG_GIVEN(v, fp16.initial_scale_power) ? DS_FP16_GIVEN_INITIAL_SCALE_POWER : 0;
	fc.given |= DS_CONFIG_GIVEN(v, fp16.loss_scale_window) ? DS_FP16_GIVEN_LOSS_SCALE_WINDOW : 0;
	fc.given |= DS_CONFIG_GIVEN(v, fp16.min_loss_scale) ? DS_FP16_GIVEN_MIN_LOSS_SCALE : 0;
	fc.given |= DS_CONFIG_GIVEN(v, fp16.hysteresis) ? DS_FP16_GIVEN_HYSTERESIS : 0;
	fc.given |= DS_CONFIG_GIVEN(v, fp16.consecutive_hysteresis) ? DS_FP16_GIVEN_CONSECUTIVE_HYSTERESIS : 0;
	/* DeepSpeed's FP16_Optimizer takes FusedAdam, OneBitAdam and ZeroOneAdam */
	const enum ds_optim_type ot = s->eng.optim.type;
	enum ds_scaler_path path = s->eng.zero_stage >= 1 ? DS_SCALER_PATH_ZERO
		: ot == DS_OPTIM_ADAM || ot == DS_OPTIM_ADAMW || ot == DS_OPTIM_ONEBIT_ADAM || ot == DS_OPTIM_ZERO_ONE_ADAM
		? DS_SCALER_PATH_FUSED : DS_SCALER_PATH_UNFUSED;
	int rc = ds_scaler_init_cfg(&s->eng.scaler, fp16, path, &fc, err);
	return rc < 0 ? ds_err_prefix(err, "%s: fp16: ", ds_config_name(c)) : 0;
}

/* ZeRO-Infinity: offload_optimizer device "nvme" at stages 1-3 (DeepSpeed:
 * stage 3; its stages 1-2 keep the states in memory), offload_param
 * device "nvme" at stage 3, and the "aio" section their swap files use;
 * ZeRO-Offload: offload_optimizer device "cpu" at stages 1-3, offload_param
 * device "cpu" at stage 3. */
static int64_t clamp_int(int64_t v) { return v > 1 << 30 ? 1 << 30 : v; }

void ds_train_offload_opts(const struct ds_config *c, int stage, struct ds_engine_offload *o)
{
	const struct ds_config_values *v = ds_config_values(c);
	o->optimizer = stage >= 1 && !strcmp(v->zero_optimization.offload_optimizer.device, "nvme");
	o->param = stage == 3 && !strcmp(v->zero_optimization.offload_param.device, "nvme");
	o->cpu = stage >= 1 && !strcmp(v->zero_optimization.offload_optimizer.device, "cpu");
	o->param_cpu = stage == 3 && !strcmp(v->zero_optimization.offload_param.device, "cpu");
	o->opt_path = v->zero_optimization.offload_optimizer.nvme_path;
	o->param_path = v->zero_optimization.offload_param.nvme_path;
	o->sub_group_size = v->zero_optimization.sub_group_size;
	o->opt_buffer_count = (int)clamp_int(v->zero_optimization.offload_optimizer.buffer_count);
	o->pipeline_read = v->zero_optimization.offload_optimizer.pipeline_read;
	o->pipeline_write = v->zero_optimization.offload_optimizer.pipeline_write;
	o->param_buffer_count = (int)clamp_int(v->zero_optimization.offload_param.buffer_count);
	o->param_buffer_size = v->zero_optimization.offload_param.buffer_size;
	o->max_in_cpu = v->zero_optimization.offload_param.max_in_cpu;
	o->aio.block_size = (uint64_t)v->aio.block_size;
	o->aio.queue_depth = (int)clamp_int(v->aio.queue_depth);
	o->aio.intra_op_parallelism = (int)clamp_int(v->aio.intra_op_parallelism);
	o->aio.single_submit = v->aio.single_submit;
	o->aio.overlap_events = v->aio.overlap_events;
	o->aio.engine = NULL;  /* libaio when built, else posix */
}

static int map_offload(struct ds_train_setup *s, struct ds_err *err)
{
	struct ds_engine_offload *o = &s->eng.offload;
	ds_train_offload_opts(s->cfg, s->eng.zero_stage, o);
	if (!o->optimizer && !o->param)
		return 0;
	int rc = ds_aio_opts_check(&o->aio, err);
	return rc < 0 ? ds_err_prefix(err, "%s: ", ds_config_name(s->cfg)) : 0;
}

int ds_train_check_nvme(const struct ds_train_setup *s, int per_node, struct ds_err *err)
{
	const struct ds_engine_offload *o = &s->eng.offload;
	struct ds_engine_mem m;
	char key[96];
	if (!o->optimizer && !o->param)
		return 0;
	if (ds_engine_mem_estimate(&s->eng, s->W, &m, err) < 0)
		return ds_err_prefix(err, "%s: ", ds_config_name(s->cfg));
	if (per_node < 1)
		per_node = 1;
	/* every rank of this node puts its files in the same directory */
	int same = o->opt_path && o->param_path && !strcmp(o->opt_path, o->param_path);
	uint64_t need_opt = m.nvme_opt_bytes + (same ? m.nvme_param_bytes : 0);
	if (m.nvme_opt_bytes || same) {
		snprintf(key, sizeof key, "%s: zero_optimization.offload_optimizer.nvme_path", ds_config_name(s->cfg));
		DS_TRY(ds_swap_check_dir(o->opt_path, key, need_opt * (uint64_t)per_node, err));
	}
	if (m.nvme_param_bytes && !same) {
		snprintf(key, sizeof key, "%s: zero_optimization.offload_param.nvme_path", ds_config_name(s->cfg));
		DS_TRY(ds_swap_check_dir(o->param_path, key, m.nvme_param_bytes * (uint64_t)per_node, err));
	}
	return 0;
}

static int refuse_unimplemented(const struct ds_train_setup *s, struct ds_err *err)
{
	const char *f = ds_config_name(s->cfg);
	const struct ds_config_values *v = ds_config_values(s->cfg);
	/* an fp32 model reduces in fp32, fp16 or bf16; a 16-bit model in its
	 * own dtype or in fp32, so the other 16-bit type is what this build
	 * cannot honour */
	const char *model_dt = v->fp16.enabled ? "fp16" : v->bf16.enabled ? "bf16" : "fp32";
	const char *cdt = v->communication_data_type;
	if (cdt && strcmp(model_dt, "fp32") && strcmp(cdt, "fp32") && strcmp(cdt, model_dt))
		return ds_err_set(err, DS_EINVAL,
				  "%s: communication_data_type '%s': a %s model reduces in fp32 or %s in this build; "
				  "use one of those", f, cdt, model_dt, model_dt);
	/* values the key table accepts but declares not implemented (offload to nvme) */
	return ds_config_unimplemented(s->cfg, err);
}

/* comms_logger: the flags, and prof_ops as the names the communicator
 * reports (DeepSpeed's tensor-API names all_gather_into_tensor and
 * reduce_scatter_tensor are the same collectives here). */
static int map_comms_logger(struct ds_train_setup *s, struct ds_err *err)
{
	static const char *const known[] = { "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier",
					     "all_to_all_single", "send", "recv", NULL };
	struct ds_monitor_comms_opts *o = &s->comms;
	const struct ds_config_values *v = ds_config_values(s->cfg);
	o->enabled = v->comms_logger.enabled;
	o->verbose = v->comms_logger.verbose;
	o->prof_all = v->comms_logger.prof_all;
	o->debug = v->comms_logger.debug;
	const json_t *l = v->comms_logger.prof_ops;
	size_t n = json_is_array(l) ? json_array_size(l) : 0;
	s->comms_ops = calloc(n + 1, sizeof *s->comms_ops);
	if (!s->comms_ops)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const char *v = json_string_value(json_array_get(l, i));
		if (!v)
			return ds_err_set(err, DS_EINVAL, "%s: comms_logger.prof_ops[%zu]: not a string; give op names "
					  "such as \"all_reduce\"", ds_config_name(s->cfg), i);
		if (!strcmp(v, "all_gather_into_tensor"))
			v = "all_gather";
		else if (!strcmp(v, "reduce_scatter_tensor"))
			v = "reduce_scatter";
		int ok = 0;
		for (const char *const *k = known; *k && !ok; k++)
			ok = !strcmp(*k, v);
		if (!ok && o->enabled && !o->prof_all && s->rank == 0)
			ds_log_warn("%s: comms_logger.prof_ops: ds-train issues no '%s' (it issues all_reduce, "
				    "reduce_scatter, all_gather, broadcast, barrier, all_to_all_single with the 1-bit "
				    "optimizers, and send and recv with pipeline parallelism)", ds_config_name(s->cfg), v);
		s->comms_ops[i] = v;
	}
	o->prof_ops = s->comms_ops;
	return 0;
}

/* The 3D layout: --tensor-model-parallel-size and
 * --pipeline-model-parallel-size (or NeoX's sizes, which become those
 * flags), else pipeline.stages of the DeepSpeed config (pp_cfg, 0 when
 * "auto"), else 1; the data-parallel ranks are the rest of the world. */
static int set_layout(struct ds_train_setup *s, const struct ds_train_opts *o, int W, int rank, int pp_cfg,
		      struct ds_err *err)
{
	struct ds_topo t;
	s->tp = o->tp > 0 ? o->tp : 1;
	s->pp = o->pp > 0 ? o->pp : pp_cfg > 0 ? pp_cfg : 1;
	if (ds_topo_init(&t, W, rank, s->tp, s->pp, err) < 0)
		return ds_err_prefix(err, "%s: ", o->check ? "--world-size" : "the job's ranks");
	s->dp = t.dp;
	s->dp_rank = t.dp_rank;
	return 0;
}

static int setup_once(struct ds_train_setup *s, const struct ds_train_opts *o, const struct ds_config_auto *a,
		      int W, int rank, int pp_cfg, struct ds_err *err)
{
	struct ds_config_opts co = DS_CONFIG_OPTS_INIT;
	struct ds_config_batch b;
	int rc;
	memset(s, 0, sizeof *s);
	s->W = W;
	s->rank = rank;
	s->autos = *a;
	DS_TRY(set_layout(s, o, W, rank, pp_cfg, err));
	co.world_size = s->dp;   /* the triad counts data-parallel ranks (DeepSpeed's dp_world_size) */
	co.tp_size = s->tp;
	co.lenient = o->lenient;
	co.autos = &s->autos;
	const char *cpath = o->deepspeed_config ? o->deepspeed_config : ds_train_default_config();
	const char *mpath = o->model ? o->model : ds_train_default_model();
	/* "auto" ZeRO bucket sizes follow the model's hidden size; a bad
	 * model is reported below, after the DeepSpeed config's errors */
	struct ds_err scratch = DS_ERR_INIT;
	if (o->model_json)
		mpath = o->model_name;
	if ((o->model_json ? ds_model_config_load_string(o->model_json, mpath, &s->model, &scratch)
			   : ds_model_config_load(mpath, &s->model, &scratch)) == 0)
		s->autos.hidden_size = s->model.hidden_size;
	if ((rc = o->deepspeed_json ? ds_config_load_string(&s->cfg, o->deepspeed_json, o->deepspeed_name, &co, err)
				    : ds_config_load_file(&s->cfg, cpath, &co, err)) < 0)
		return rc;
	if ((rc = o->model_json ? ds_model_config_load_string(o->model_json, mpath, &s->model, err)
				: ds_model_config_load(mpath, &s->model, err)) < 0)
		goto fail;
	if (s->model.family != DS_FAMILY_GPT) {
		rc = ds_err_set(err, DS_EINVAL, "%s: family: only gpt models train (bert is profile-only)", mpath);
		goto fail;
	}
	if (o->check) {
		/* --check estimates memory for configs the trainer refuses too,
		 * and says why it would refuse them */
		struct ds_err why = DS_ERR_INIT;
		if (refuse_unimplemented(s, &why) < 0)
			snprintf(s->unimplemented, sizeof s->unimplemented, "%s", why.msg);
	} else if ((rc = refuse_unimplemented(s, err)) < 0) {
		goto fail;
	}
	const struct ds_config_values *v = ds_config_values(s->cfg);
	const json_t *stages = v->pipeline.stages;
	if (json_is_integer(stages) && o->pp > 0 && json_integer_value(stages) != o->pp) {
		rc = ds_err_set(err, DS_EINVAL, "%s: key 'pipeline.stages': %lld, but --pipeline-model-parallel-size is %d; "
				"give one", ds_config_name(s->cfg), (long long)json_integer_value(stages), o->pp);
		goto fail;
	}
	if (s->pp > 1 && v->zero_optimization.stage >= 2) {
		rc = ds_err_set(err, DS_EINVAL, "%s: key 'zero_optimization.stage': %lld with %d pipeline stages: ZeRO-2 and "
				"ZeRO-3 are incompatible with pipeline parallelism (DeepSpeed's pipeline engine refuses them); "
				"use stage 0 or 1", ds_config_name(s->cfg), (long long)v->zero_optimization.stage, s->pp);
		goto fail;
	}
	if (ds_moe_num_layers(&s->model) > 0 && s->tp * s->pp > 1) {
		rc = ds_err_set(err, DS_EINVAL, "MoE layers with tensor or pipeline parallelism (tp %d, pp %d) are not "
				"supported; use expert parallelism (moe.ep_size) with data parallelism", s->tp, s->pp);
		goto fail;
	}
	ds_config_batch(s->cfg, &b);
	s->tb = b.train_batch_size;
	s->mb = b.micro_batch;
	s->ga = b.grad_accum;

	ds_engine_opts_init(&s->eng);
	s->eng.model = s->model;
	s->eng.micro_batch = (int)s->mb;
	s->eng.grad_accum = (int)s->ga;
	if ((rc = map_optimizer(s, err)) < 0)
		goto fail;
	map_scheduler(s, o->train_iters);
	s->eng.zero_stage = (int)v->zero_optimization.stage;
	if ((rc = map_precision(s, err)) < 0 || (rc = map_offload(s, err)) < 0)
		goto fail;
	s->eng.gradient_clipping = v->gradient_clipping;
	s->eng.reduce_bucket_size = v->zero_optimization.reduce_bucket_size;
	s->eng.allgather_bucket_size = v->zero_optimization.allgather_bucket_size;
	s->eng.prescale_gradients = v->prescale_gradients;
	s->eng.gradient_predivide_factor = v->gradient_predivide_factor;
	s->eng.overlap_comm = v->zero_optimization.overlap_comm; /* inferred per stage when not given */
	s->eng.seed = o->seed;
	s->eng.checkpointing = DS_CONFIG_GIVEN(v, activation_checkpointing.number_checkpoints) ||
			       v->pipeline.activation_checkpoint_interval == 1;
	/* 3D parallelism (DeepSpeed's pipeline section; "best" is
	 * PipelineModule's default, parameters) */
	s->eng.tp = s->tp;
	s->eng.pp = s->pp;
	snprintf(s->eng.pipe_partition, sizeof s->eng.pipe_partition, "%s",
		 v->pipeline.partition && strcmp(v->pipeline.partition, "best") ? v->pipeline.partition : "parameters");
	s->eng.pipe_partitioned = v->pipeline.pipe_partitioned;
	s->eng.grad_partitioned = v->pipeline.grad_partitioned;
	s->eng.partition_activations = v->activation_checkpointing.partition_activations;
	if (s->eng.partition_activations && s->tp > 1 && !s->eng.checkpointing && rank == 0)
		ds_log_warn("%s: key 'activation_checkpointing.partition_activations' has no effect without activation "
			    "checkpointing: it partitions the checkpointed layer inputs", ds_config_name(s->cfg));
	s->eng.stage3_prefetch_bucket_size = v->zero_optimization.stage3_prefetch_bucket_size;
	s->eng.stage3_max_live_parameters = v->zero_optimization.stage3_max_live_parameters;
	s->eng.stage3_param_persistence_threshold = v->zero_optimization.stage3_param_persistence_threshold;

	s->steps_per_print = v->steps_per_print;
	s->wall_clock = v->wall_clock_breakdown;
	s->ckpt_profile = s->eng.checkpointing && v->activation_checkpointing.profile;
	s->start_profile_step = v->autotuning.start_profile_step;
	s->end_profile_step = v->autotuning.end_profile_step;
	s->csv_enabled = v->csv_monitor.enabled;
	s->csv_path = v->csv_monitor.output_path;
	s->csv_job = v->csv_monitor.job_name;
	s->tb_enabled = v->tensorboard.enabled;
	s->tb_path = v->tensorboard.output_path;
	s->tb_job = v->tensorboard.job_name;
	s->tag_validation = v->checkpoint.tag_validation;
	if ((rc = map_comms_logger(s, err)) < 0)
		goto fail;

	s->device_from = o->device ? "--device" : "dstk.device";
	const char *dev = o->device ? o->device : v->dstk.device;
	s->device_kind = ds_device_parse(dev);
	if (s->device_kind < 0) {   /* the key table admits only the kinds; the tool checks the flag */
		rc = ds_err_set(err, DS_EINVAL, "%s '%s': expected cpu, cuda or auto", s->device_from, dev ? dev : "");
		goto fail;
	}

	s->train_iters = o->train_iters;
	if (!s->train_iters && s->sched.total_num_steps > 0)
		s->train_iters = s->sched.total_num_steps;
	return 0;
fail:
	ds_train_setup_release(s);
	return rc;
}

/* Micro batch "auto": the largest the memory plan fits in the budget per
 * rank, at this world size; with a fixed global batch only the micro
 * batches that divide it per rank.  0 when micro batch 1 does not fit. */
static int64_t fit_micro(struct ds_train_setup *s, uint64_t budget)
{
	const struct ds_config_values *v = ds_config_values(s->cfg);
	int64_t tb_rank = v->src.train_batch_size == DS_SRC_FILE ? v->train_batch_size / s->dp : 0;
	int64_t ga = v->src.gradient_accumulation_steps == DS_SRC_FILE ? v->gradient_accumulation_steps : 1;
	int64_t cap = tb_rank > 0 ? tb_rank : 65536, best = 0;
	struct ds_engine_opts e = s->eng;
	struct ds_engine_mem m;
	struct ds_err why = DS_ERR_INIT;
	for (int64_t mb = 1; mb <= cap; mb++) {
		if (tb_rank > 0 && tb_rank % mb)
			continue;
		e.micro_batch = (int)mb;
		e.grad_accum = (int)(tb_rank > 0 ? tb_rank / mb : ga);
		if (ds_engine_mem_estimate(&e, s->W, &m, &why) < 0 || m.total > budget)
			break; /* memory grows with the micro batch */
		best = mb;
	}
	return best;
}

int ds_train_ranks_per_node(int W)
{
	/* the launcher's count, else all */
	const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	if (!lr)
		lr = getenv("SLURM_NTASKS_PER_NODE");
	return lr && atoi(lr) > 0 ? atoi(lr) : W;
}

int ds_train_setup_load(struct ds_train_setup *s, const struct ds_train_opts *o, int W, int rank,
			struct ds_err *err)
{
	struct ds_config_auto a = o->autos;
	char why[200], from[64], h[32];
	if (a.train_iters < 0 && o->train_iters > 0)
		a.train_iters = o->train_iters;
	DS_TRY(setup_once(s, o, &a, W, rank, 0, err));
	/* pipeline.stages of the config (without the flag): the triad's
	 * data-parallel size changes, so load again with it */
	const json_t *st = ds_config_values(s->cfg)->pipeline.stages;
	if (o->pp <= 0 && json_is_integer(st) && json_integer_value(st) != s->pp) {
		int pp_cfg = (int)json_integer_value(st), rc;
		ds_train_setup_release(s);
		rc = setup_once(s, o, &a, W, rank, pp_cfg, err);
		s->pp_cfg = pp_cfg;   /* --check retries with room for the stages when this fails */
		DS_TRY(rc);
	}
	if (a.micro_batch > 0 || !ds_config_resolved(s->cfg, "train_micro_batch_size_per_gpu"))
		return 0;
	uint64_t budget = ds_engine_mem_budget(ds_train_ranks_per_node(W), o->mem_per_rank, from, sizeof(from));
	int64_t mb = fit_micro(s, budget);
	ds_fmt_bytes((double)budget, h, sizeof(h));
	if (mb > 0)
		snprintf(why, sizeof(why), "the largest micro batch whose memory plan fits %s per rank, from %s", h, from);
	else
		snprintf(why, sizeof(why), "micro batch 1 does not fit %s per rank (from %s); 1 is used", h, from);
	ds_train_setup_release(s);
	a.micro_fit = mb > 0 ? mb : 1;
	a.micro_fit_why = why;
	/* the second load says nothing new: its warnings were logged */
	int lvl = ds_log_level(), rc;
	ds_log_init(ds_log_rank(), lvl < DS_LOG_ERROR ? lvl : DS_LOG_ERROR, 0);
	int pp_cfg = s->pp_cfg;
	rc = setup_once(s, o, &a, W, rank, pp_cfg, err);
	s->pp_cfg = pp_cfg;
	ds_log_init(ds_log_rank(), lvl, 0);
	DS_TRY(rc);
	snprintf(s->fit_why, sizeof(s->fit_why), "%s", why);
	s->autos.micro_fit_why = s->fit_why; /* why is this frame's */
	return 0;
}

void ds_train_setup_log_notes(const struct ds_train_setup *s)
{
	const char *kind, *text;
	int ignored = 0;
	for (int i = 0; (text = ds_config_note_text(s->cfg, i, &kind)); i++) {
		if (!strcmp(kind, "auto"))
			ds_log_info("%s: auto: %s", ds_config_name(s->cfg), text);
		ignored += !strcmp(kind, "ignored");
	}
	if (ignored)
		ds_log_info("%s: %d key%s of switched-off sections ignored (ds-train --check lists them)",
			    ds_config_name(s->cfg), ignored, ignored > 1 ? "s" : "");
}

int ds_train_device(struct ds_train_setup *s, char *why, size_t whysz, struct ds_err *err)
{
	struct ds_compute_env env;
	struct ds_err e = DS_ERR_INIT;
	char line[256];
	struct ds_compute_needs needs;
	ds_engine_compute_needs(&s->eng, &needs);
	ds_compute_probe(&env, s->device_kind);
	int rc = ds_compute_select(s->device_kind, &env, &needs, &s->eng.compute, &s->eng.device, line, sizeof line,
				   &e);
	if (rc < 0) {
		snprintf(why, whysz, "device %s (%s): not possible here", ds_device_name(s->device_kind), s->device_from);
		if (strcmp(s->device_from, "--device"))
			return ds_err_set(err, rc, "%s: key 'dstk.device': \"%s\": %s", ds_config_name(s->cfg),
					  ds_device_name(s->device_kind), e.msg);
		return ds_err_set(err, rc, "--device %s: %s", ds_device_name(s->device_kind), e.msg);
	}
	/* line is "device KIND: ...": say where KIND came from */
	const char *rest = strchr(line, ':');
	snprintf(why, whysz, "device %s (%s)%s", ds_device_name(s->device_kind), s->device_from, rest ? rest : "");
	return 0;
}

void ds_train_setup_release(struct ds_train_setup *s)
{
	ds_config_destroy(s->cfg);
	s->cfg = NULL;
	free(s->comms_ops);
	s->comms_ops = NULL;
	s->comms.prof_ops = NULL;
}
