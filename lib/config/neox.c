/* neox.c - GPT-NeoX YAML configs onto a DeepSpeed config, a model config
 * and run flags (neox.h).  One table says what becomes of every parameter
 * of NeoX's table (plus the ones its shipped configs use); the mapping
 * follows NeoX's code: megatron/neox_arguments (from_ymls: files in order,
 * duplicate keys an error, '-' read as '_'), megatron/training.py
 * (get_learning_rate_scheduler: warmup_iter = warmup x lr_decay_iters),
 * megatron/tokenizer (padding the vocabulary), megatron/model/activations.py
 * (which GELU: gelu_form).
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/neox.h"
#include "config/table.h"
#include "config/yaml.h"
#include "util/log.h"

enum how {
	H_DS,      /* a DeepSpeed key: copied into the DeepSpeed config */
	H_MODEL,   /* a model key of the same name */
	H_RUN,     /* a run flag (code below) */
	H_SPECIAL, /* translated by code below */
	H_NOEFFECT,/* accepted: it does not change what dstk computes (why) */
	H_REFUSE   /* refused (why) unless switched off or at def */
};

struct param {
	const char *name;
	int how;
	const char *def;  /* H_REFUSE: the default as JSON */
	const char *why;
};

#define DS(n) { n, H_DS, NULL, NULL }
#define MO(n) { n, H_MODEL, NULL, NULL }
#define RUN(n) { n, H_RUN, NULL, NULL }
#define SP(n) { n, H_SPECIAL, NULL, NULL }
#define NOE(n, why) { n, H_NOEFFECT, NULL, why }
#define REF(n, def, why) { n, H_REFUSE, def, why }

static const char LAUNCH[] = "a launcher setting: dstk runs under srun or mpirun";
static const char FUSE[] = "a kernel-fusion switch: dstk computes the same math unfused";
static const char RETR[] = "retrieval (ICT/REALM) models are not implemented";
static const char FP16S[] = "NeoX hands the fp16 section to DeepSpeed: set it there";
static const char RNG[] = "dstk's random numbers are counter-based: there is no RNG state to save or load";
static const char GEN[] = "a text-generation or evaluation setting: ds-train trains";
static const char TE[] = "Transformer Engine layers are not implemented";
static const char MUP[] = "use_mup is off (muP is not implemented)";
static const char OTHER_LAYERS[] = "a gMLP, RWKV or Mamba layer setting: those layers are not implemented";
static const char PAIRS[] = "pairwise, labelled and reward datasets (DPO, KTO, reward models) are not implemented";
static const char ALIGN[] = "train_impl is normal (DPO, KTO and REINFORCE are not implemented)";
static const char LOGX[] = "an extra NeoX log: ds-train's step line has the grad norm, its monitors the rest";
static const char DERIVED[] = "NeoX derives it from the DeepSpeed keys; set those";

static const struct param params[] = {
	/* launcher (DeepSpeed runner) */
	NOE("hostfile", LAUNCH), NOE("include", LAUNCH), NOE("exclude", LAUNCH), NOE("num_nodes", LAUNCH),
	NOE("num_gpus", LAUNCH), NOE("master_port", LAUNCH), NOE("master_addr", LAUNCH), NOE("launcher", LAUNCH),
	NOE("deepspeed_mpi", LAUNCH), NOE("local_rank", LAUNCH),
	NOE("distributed_backend", "the communicator is MPI (or NCCL in a CUDA build)"),
	NOE("DDP_impl", "data parallelism is ZeRO's"), NOE("lazy_mpu_init", "there is no model-parallel unit"),
	/* what NeoX's launcher and arguments code set or keep for themselves */
	NOE("global_num_gpus", LAUNCH), NOE("no_ssh_check", LAUNCH), NOE("force_multi", LAUNCH), NOE("deepspeed_slurm", LAUNCH),
	NOE("comment", LAUNCH), NOE("account", LAUNCH), NOE("user_script", LAUNCH), NOE("deepspeed", LAUNCH),
	NOE("deepscale", LAUNCH), NOE("deepscale_config", LAUNCH), NOE("config_files", LAUNCH), NOE("git_hash", LAUNCH),
	NOE("world_size", LAUNCH), NOE("rank", LAUNCH), NOE("is_pipe_parallel", LAUNCH), NOE("autotuning_run", LAUNCH),
	NOE("fused_kernels_build_path", LAUNCH), NOE("do_train", LAUNCH), NOE("do_valid", LAUNCH), NOE("do_test", LAUNCH),
	NOE("iteration", LAUNCH), NOE("use_shared_fs", "the sample order needs no index files"),
	NOE("optimizer_type", DERIVED), NOE("zero_stage", DERIVED), NOE("zero_reduce_scatter", DERIVED),
	NOE("zero_contiguous_gradients", DERIVED), NOE("zero_reduce_bucket_size", DERIVED),
	NOE("zero_allgather_bucket_size", DERIVED), NOE("clip_grad", DERIVED), NOE("dynamic_loss_scale", DERIVED),
	/* text generation and evaluation */
	NOE("text_gen_type", GEN), NOE("maximum_tokens", GEN), NOE("prompt_end", GEN), NOE("temperature", GEN),
	NOE("top_p", GEN), NOE("top_k", GEN), NOE("recompute", GEN), NOE("num_samples", GEN), NOE("sample_input_file", GEN),
	NOE("sample_output_file", GEN), NOE("eval_results_prefix", GEN), NOE("eval_tasks", GEN), NOE("return_logits", GEN),
	NOE("char_level_ppl", GEN), NOE("serve_model_weights", GEN), NOE("weight_server_port", GEN),
	NOE("online_dataserver_ips", GEN), NOE("online_dataserver_ports", GEN),
	/* model */
	MO("num_layers"), MO("hidden_size"), MO("num_attention_heads"), MO("seq_length"), MO("max_position_embeddings"),
	MO("make_vocab_size_divisible_by"), MO("layernorm_epsilon"), MO("rms_norm_epsilon"), MO("attention_dropout"),
	MO("hidden_dropout"), MO("init_method_std"), MO("pos_emb"), MO("rotary_pct"), MO("rotary_emb_base"), MO("norm"),
	MO("no_weight_tying"), MO("gpt_j_residual"), MO("init_method"), MO("output_layer_init_method"),
	SP("intermediate_size"), SP("expansion_factor"), SP("mlp_multiple_of"), SP("padded_vocab_size"), SP("vocab_file"), SP("rms_norm"), SP("geglu"),
	SP("sinusoidal_pos_emb"), SP("activation"), SP("attention_config"),
	NOE("merge_file", "the data is tokenized already; BPE merges do not enter training"),
	NOE("tokenizer_type", "the data is tokenized already; the vocabulary size comes from vocab_file or padded_vocab_size"),
	REF("num_unique_layers", "null", "layer sharing is not implemented"),
	REF("param_sharing_style", "\"grouped\"", "layer sharing is not implemented"),
	REF("apply_residual_connection_post_layernorm", "false", "the post-layernorm residual is not implemented"),
	SP("openai_gelu"), SP("onnx_safe"),
	REF("rpe", "false", "relative position embeddings are not implemented; use pos_emb"),
	REF("rpe_causal", "false", "relative position embeddings are not implemented"),
	REF("rpe_num_buckets", "32", "relative position embeddings are not implemented"),
	REF("rpe_max_distance", "128", "relative position embeddings are not implemented"),
	REF("sparsity", "\"none\"", "sparse attention is not implemented"),
	REF("sparsity_config", "{}", "sparse attention is not implemented"),
	REF("gpt_j_tied", "false", "GPT-J's tied layernorm is not implemented"),
	REF("use_bias_in_norms", "true", "norms without bias are not implemented"),
	MO("use_bias_in_attn_linear"), MO("use_bias_in_mlp"),
	REF("num_kv_heads", "null", "grouped-query attention is not implemented"),
	REF("use_mup", "false", "muP is not implemented"),
	REF("coord_check", "false", "muP coordinate checks are not implemented"),
	NOE("save_base_shapes", MUP), NOE("base_shapes_file", MUP), NOE("mup_init_scale", MUP), NOE("mup_attn_temp", MUP),
	NOE("mup_output_temp", MUP), NOE("mup_embedding_mult", MUP), NOE("mup_rp_embedding_mult", MUP),
	NOE("mup_width_scale", MUP),
	REF("use_qk_layernorm", "false", "query-key layernorm is not implemented"),
	REF("sliding_window_width", "null", "sliding-window attention is not implemented"),
	REF("opt_pos_emb_offset", "0", "OPT's position-embedding offset is not implemented"),
	REF("soft_prompt_tuning", "null", "soft prompt tuning is not implemented"),
	REF("sequence_parallel", "false", "Megatron's sequence parallelism (with tensor parallelism) is not implemented"),
	NOE("scalenorm_epsilon", "for norm scalenorm, which is not implemented"),
	NOE("rotary_save_freqs_buffer", "rotary frequencies are recomputed, never stored"),
	REF("te_columnparallel", "false", TE), REF("te_rowparallel", "false", TE), REF("te_layernorm_mlp", "false", TE),
	REF("te_mha", "false", TE), REF("te_fp8_mha", "false", TE),
	NOE("te_fp8_format", "Transformer Engine is off"), NOE("te_fp8_wgrad", "Transformer Engine is off"),
	NOE("te_fp8_amax_history_len", "Transformer Engine is off"), NOE("te_fp8_amax_compute_algo", "Transformer Engine is off"),
	NOE("te_fp8_margin", "Transformer Engine is off"),
	NOE("gmlp_attn_dim", OTHER_LAYERS), NOE("dim_att", OTHER_LAYERS), NOE("head_size", OTHER_LAYERS),
	NOE("ffn_dim", OTHER_LAYERS), NOE("mamba_use_bias_in_conv", OTHER_LAYERS), NOE("mamba_use_bias_in_linears", OTHER_LAYERS),
	NOE("mamba_selective_fp32_params", OTHER_LAYERS), NOE("mamba_selective_scan_fusion", OTHER_LAYERS),
	NOE("mamba_causal_conv_fusion", OTHER_LAYERS), NOE("mamba_inner_func_fusion", OTHER_LAYERS),
	NOE("output_layer_parallelism", "the head is column (vocabulary) parallel, NeoX's one choice"),
	NOE("scaled_upper_triang_masked_softmax_fusion", FUSE), NOE("scaled_masked_softmax_fusion", FUSE),
	SP("bias_gelu_fusion"), NOE("bias_dropout_fusion", FUSE), NOE("rope_fusion", FUSE),
	NOE("layernorm_fusion", FUSE), NOE("rmsnorm_fusion", FUSE),
	NOE("use_flashattn_swiglu", "a kernel choice: the same swiglu"), NOE("attention_softmax_in_fp32", "dstk's softmax is always fp32"),
	REF("apply_query_key_layer_scaling", "false", "query-key layer scaling is not implemented"),
	REF("fp16_lm_cross_entropy", "false", "the loss is always computed in fp32"),
	/* optimizer and schedule */
	SP("lr"), SP("weight_decay"), SP("lr_decay_style"), SP("lr_decay_iters"), SP("lr_decay_fraction"), SP("min_lr"),
	SP("warmup"), SP("batch_size"),
	REF("adam_beta1", "0.9", "NeoX reads optimizer.params.betas: set it there"),
	REF("adam_beta2", "0.999", "NeoX reads optimizer.params.betas: set it there"),
	REF("adam_eps", "1e-08", "NeoX reads optimizer.params.eps: set it there"),
	REF("onebitadam", "false", "1-bit Adam is not implemented"),
	NOE("cpu_optimizer", "dstk's optimizer runs on the CPU already"), NOE("cpu_torch_adam", "dstk has one Adam"),
	REF("override_lr_scheduler", "false", "the schedule is a function of the step: nothing in a checkpoint to override"),
	REF("use_checkpoint_lr_scheduler", "false", "the schedule is a function of the step and the config"),
	/* precision */
	SP("precision"), SP("fp16"),
	REF("hysteresis", "2", FP16S), REF("loss_scale", "null", FP16S), REF("loss_scale_window", "1000", FP16S),
	REF("min_scale", "1", FP16S),
	/* parallelism */
	SP("model_parallel_size"), SP("pipe_parallel_size"), SP("pipe_partition_method"),
	NOE("use_cpu_initialization", "initialisation is the same wherever it runs (seed, name, index)"),
	/* activation checkpointing */
	SP("checkpoint_activations"), SP("checkpoint_num_layers"), SP("partition_activations"),
	SP("contigious_checkpointing"), SP("contiguous_checkpointing"), SP("checkpoint_in_cpu"), SP("synchronize_each_layer"),
	REF("distribute_checkpointed_activations", "false", "needs model parallelism"),
	NOE("deepspeed_activation_checkpointing", "activation checkpointing is dstk's own"),
	NOE("profile_backward", "ds-train's wall_clock_breakdown times backward"),
	/* run */
	RUN("train_iters"), RUN("seed"), RUN("save"), RUN("load"), RUN("save_interval"), RUN("checkpoint_factor"),
	RUN("eval_interval"), RUN("eval_iters"), RUN("log_interval"), RUN("exit_interval"), RUN("data_path"),
	RUN("split"), RUN("no_load_optim"), SP("train_data_paths"), SP("valid_data_paths"), SP("test_data_paths"),
	SP("train_data_weights"), SP("valid_data_weights"), SP("test_data_weights"), SP("weight_by_num_documents"),
	SP("weighted_sampler_alpha"), SP("tensorboard_dir"),
	RUN("keep_last_n_checkpoints"),
	REF("no_save_optim", "false", "checkpoints always hold the optimizer state"),
	NOE("no_save_rng", RNG), NOE("no_load_rng", RNG),
	REF("finetune", "false", "not implemented; use --load with --no-load-optim"),
	REF("extra_save_iters", "null", "saving at listed iterations is not implemented; use save_interval"),
	REF("checkpoint_scale", "\"linear\"", "checkpoints on a log scale are not implemented; use save_interval"),
	REF("train_epochs", "null", "give train_iters"),
	REF("s3_path", "null", "uploading checkpoints to S3 is not implemented"), NOE("s3_chunk_size", "s3_path is not set"),
	REF("dataset_impl", "\"gpt2\"", "only GPT-2 style (pretraining) datasets are implemented"),
	REF("train_impl", "\"normal\"", "only language-model training is implemented (not DPO, KTO, reward models or REINFORCE)"),
	REF("pack_impl", "\"packed\"", "only packed samples (documents concatenated) are implemented"),
	NOE("allow_chopped", "used with pack_impl other than packed"),
	REF("precompute_model_name", "null", PAIRS), REF("z_loss", "0", "the z-loss term is not implemented"),
	REF("train_label_data_paths", "null", PAIRS), REF("valid_label_data_paths", "null", PAIRS),
	REF("test_label_data_paths", "null", PAIRS), REF("train_reward_data_paths", "null", PAIRS),
	REF("valid_reward_data_paths", "null", PAIRS), REF("test_reward_data_paths", "null", PAIRS),
	REF("pos_train_data_paths", "null", PAIRS), REF("neg_train_data_paths", "null", PAIRS),
	REF("pos_valid_data_paths", "null", PAIRS), REF("neg_valid_data_paths", "null", PAIRS),
	REF("pos_test_data_paths", "null", PAIRS), REF("neg_test_data_paths", "null", PAIRS),
	REF("pos_train_label_data_paths", "null", PAIRS), REF("neg_train_label_data_paths", "null", PAIRS),
	REF("pos_valid_label_data_paths", "null", PAIRS), REF("neg_valid_label_data_paths", "null", PAIRS),
	REF("pos_test_label_data_paths", "null", PAIRS), REF("neg_test_label_data_paths", "null", PAIRS),
	NOE("dpo_beta", ALIGN), NOE("dpo_fp32", ALIGN), NOE("dpo_reference_free", ALIGN), NOE("kto_beta", ALIGN),
	NOE("kto_fp32", ALIGN), NOE("kto_desirable_weight", ALIGN), NOE("kto_undesirable_weight", ALIGN),
	NOE("kl_impl", ALIGN), NOE("kl_div_beta", ALIGN), NOE("fp32_reinforce", ALIGN), NOE("reinforce_leave_one_out", ALIGN),
	REF("checkpoint_validation_with_forward_pass", "false", "not implemented; checkpoints carry checksums instead"),
	NOE("num_workers", "data is read in-process"), NOE("data_impl", "the .bin/.idx format is detected"),
	NOE("mmap_warmup", "the data file is read through mmap on demand"),
	NOE("mask_prob", "BERT masking: GPT training masks nothing"), NOE("short_seq_prob", "BERT masking: GPT training masks nothing"),
	REF("reset_position_ids", "false", "per-document position ids are not implemented"),
	REF("reset_attention_mask", "false", "per-document attention masks are not implemented"),
	REF("eod_mask_loss", "false", "masking the loss at end-of-document is not implemented"),
	REF("adlr_autoresume", "false", "use Slurm's --signal: ds-train saves and exits 4 to be requeued"),
	NOE("adlr_autoresume_interval", "autoresume is off"),
	REF("ict_head_size", "null", RETR), REF("ict_load", "null", RETR), REF("bert_load", "null", RETR),
	REF("titles_data_path", "null", RETR), REF("query_in_block_prob", "0.1", RETR),
	REF("use_one_sent_docs", "false", RETR), REF("report_topk_accuracies", "[]", RETR),
	REF("faiss_use_gpu", "false", RETR), REF("block_data_path", "null", RETR), REF("indexer_batch_size", "128", RETR),
	REF("indexer_log_interval", "1000", RETR),
	REF("use_wandb", "false", "Weights & Biases needs a network service; use tensorboard_dir"),
	NOE("wandb_project", "use_wandb is off"), NOE("wandb_group", "use_wandb is off"), NOE("wandb_team", "use_wandb is off"),
	NOE("wandb_host", "use_wandb is off"), NOE("wandb_run_name", "use_wandb is off"),
	NOE("wandb_init_all_ranks", "use_wandb is off"), NOE("log_dir", "ds-train logs to stderr"),
	REF("use_comet", "null", "Comet needs a network service; use tensorboard_dir"),
	NOE("comet_workspace", "use_comet is off"), NOE("comet_project", "use_comet is off"),
	NOE("comet_experiment_name", "use_comet is off"), NOE("comet_tags", "use_comet is off"),
	NOE("comet_others", "use_comet is off"), NOE("comet_experiment", "use_comet is off"),
	NOE("log_grad_norm", LOGX), NOE("log_grad_pct_zeros", LOGX), NOE("log_param_norm", LOGX),
	NOE("log_optimizer_states", LOGX), NOE("log_gradient_noise_scale", LOGX),
	NOE("gradient_noise_scale_n_batches", LOGX), NOE("gradient_noise_scale_cpu_offload", LOGX),
	NOE("profile", "NeoX's nsys/torch profiler: ds-train has wall_clock_breakdown and flops_profiler"),
	NOE("profile_step_start", "profile is not read"), NOE("profile_step_stop", "profile is not read"),
	NOE("memory_profiling_path", "ds-train reports memory per rank at the end"),
	NOE("peak_theoretical_tflops", "the MFU reference: ds-train measures its own or takes --peak-gflops"),
	NOE("curriculum_seqlen", "the state of DeepSpeed's curriculum_learning section"),
	NOE("memory_profiling", "ds-train reports memory per rank at the end"),
	/* DeepSpeed's own keys */
	DS("train_batch_size"), DS("train_micro_batch_size_per_gpu"), DS("gradient_accumulation_steps"), DS("optimizer"),
	DS("scheduler"), DS("fp32_allreduce"), DS("prescale_gradients"), DS("gradient_predivide_factor"),
	DS("sparse_gradients"), DS("bf16"), DS("amp"), DS("gradient_clipping"), DS("zero_optimization"),
	DS("steps_per_print"), DS("wall_clock_breakdown"), DS("dump_state"), DS("flops_profiler"),
	DS("activation_checkpointing"), DS("sparse_attention"), DS("zero_allow_untested_optimizer"), DS("comms_logger"),
	DS("csv_monitor"), DS("tensorboard"), DS("autotuning"), DS("data_types"), DS("communication_data_type"),
	DS("memory_breakdown"), DS("checkpoint"), DS("curriculum_learning"), DS("data_efficiency"),
	DS("compression_training"), DS("elasticity"), SP("deepspeed_extra_args"),
	/* Mixture of Experts: NeoX's DeepSpeed-MoE keys (moe_type "deepspeed"),
	 * gathered into the model's moe section by moe_section() */
	SP("moe_num_experts"), SP("moe_top_k"), SP("moe_expert_parallel_size"), SP("moe_loss_coeff"),
	SP("moe_train_capacity_factor"), SP("moe_eval_capacity_factor"), SP("moe_min_capacity"),
	SP("moe_token_dropping"), SP("moe_use_residual"), SP("expert_interval"), SP("moe_expert_interval"),
	SP("moe_type"),
	NOE("use_tutel", "Tutel is a faster dispatch of the same routing"),
	NOE("create_moe_param_group", "the experts' parameters form their own groups already"),
	NOE("moe_lbl_in_fp32", "the load-balancing loss is computed in fp32 (double) already"),
	REF("enable_expert_tensor_parallelism", "false", "expert tensor parallelism is not implemented"),
	REF("moe_glu", "false", "megablocks' GLU experts are not implemented (the experts use the model's activation)"),
	REF("moe_jitter_eps", "null", "megablocks' router jitter is not implemented"),
	REF("moe_router_type", "\"topk\"", "NeoX's sinkhorn router (dMoE) is not implemented; dstk routes as DeepSpeed's TopKGate"),
};
#define NP ((int)(sizeof(params) / sizeof(params[0])))

struct ctx {
	struct ds_neox *nx;
	json_t *all;      /* every parameter, '-' read as '_' */
	json_t *from;     /* parameter -> the file that gave it */
	struct ds_config_errs errs;
};

static void error(struct ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void error(struct ctx *x, const char *fmt, ...)
{
	char buf[DS_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	ds_config_errs_add(&x->errs, buf);
}

/* What became of parameter `name`: status "applied", "no effect",
 * "accepted" or "not read", and a detail (one "# neox:" line of --check,
 * one entry of its JSON). */
static int line(struct ctx *x, const char *name, const char *status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int line(struct ctx *x, const char *name, const char *status, const char *fmt, ...)
{
	char buf[DS_ERR_MSG_MAX];
	va_list ap;
	int n = snprintf(buf, sizeof(buf), "%s: %s: ", name, status);
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	char **l = realloc(x->nx->lines, (size_t)(x->nx->nlines + 1) * sizeof(*l));
	if (!l)
		return DS_ENOMEM;
	x->nx->lines = l;
	if (!(l[x->nx->nlines] = strdup(buf)))
		return DS_ENOMEM;
	x->nx->nlines++;
	return 0;
}

static const char *file_of(struct ctx *x, const char *name)
{
	const char *f = json_string_value(json_object_get(x->from, name));
	return f ? f : x->nx->name;
}

/* Set path (dotted) in obj to v (stolen), making the objects on the way. */
static int set_path(json_t *obj, const char *path, json_t *v)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", path);
	char *p = buf, *dot;
	while ((dot = strchr(p, '.'))) {
		*dot = 0;
		json_t *n = json_object_get(obj, p);
		if (!json_is_object(n)) {
			n = json_object();
			if (!n || json_object_set_new(obj, p, n)) {
				json_decref(v);
				return DS_ENOMEM;
			}
		}
		obj = n;
		p = dot + 1;
	}
	return json_object_set_new(obj, p, v) ? DS_ENOMEM : 0;
}

/* Off (null, false) or at NeoX's default.  Where the default is true
 * (use_bias_in_norms), false switches a feature on, so only true is. */
static int off_or_default(json_t *v, const char *def)
{
	if (json_is_null(v) || (json_is_false(v) && !(def && !strcmp(def, "true"))))
		return 1;
	json_t *d = def ? json_loads(def, JSON_DECODE_ANY, NULL) : NULL;
	int same = d && (json_equal(d, v) ||
			 (json_is_number(d) && json_is_number(v) && json_number_value(d) == json_number_value(v)));
	json_decref(d);
	return same;
}

static char *dup_str(json_t *v)
{
	return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static int64_t int_of(struct ctx *x, const char *name, json_t *v)
{
	if (json_is_integer(v) && json_integer_value(v) >= 0)
		return json_integer_value(v);
	if (!json_is_null(v))
		error(x, "%s: parameter '%s': expected a non-negative integer", file_of(x, name), name);
	return 0;
}

/* train/valid/test_data_paths with their *_data_weights: one path is
 * --data (--valid-data, --test-data) PATH, more a blend "W1 P1 W2 P2 ..."
 * (lib/io/dataset.h); weights default to 1 each, as NeoX's. */
static int data_paths(struct ctx *x, const char *name, json_t *v, char **dst)
{
	char wname[64], *buf = NULL;
	const char *flag = name[0] == 't' && name[1] == 'r' ? "data" : name[0] == 'v' ? "valid-data" : "test-data";
	size_t len = 1, i, n;
	json_t *p;
	int rc = 0;
	snprintf(wname, sizeof(wname), "%.*s_weights", (int)(strstr(name, "_paths") - name), name);
	json_t *w = json_object_get(x->all, wname);
	const int by_docs = json_is_true(json_object_get(x->all, "weight_by_num_documents"));
	if (json_is_null(v))
		return 0;
	if (json_is_string(v))
		v = json_pack("[O]", v);
	else
		json_incref(v);
	n = json_array_size(v);
	if (!n)
		error(x, "%s: parameter '%s': expected a path or a list of paths", file_of(x, name), name);
	json_array_foreach(v, i, p) {
		const char *s = json_string_value(p);
		if (!s || !*s || strpbrk(s, " \t\n")) {
			error(x, "%s: parameter '%s': path %zu: %s", file_of(x, name), name, i + 1,
			      s ? "a path in a blend cannot hold whitespace" : "expected a string");
			n = 0;
		}
		len += (s ? strlen(s) : 0) + 32;
	}
	if (w && !json_is_null(w) && n) {
		if (json_array_size(w) != n) {
			error(x, "%s: parameter '%s': %zu weights for the %zu %s; give one weight per path", file_of(x, wname),
			      wname, json_array_size(w), n, name);
			n = 0;
		}
		double sum = 0;
		json_array_foreach(w, i, p) {
			if (n && (!json_is_number(p) || json_number_value(p) < 0)) {
				error(x, "%s: parameter '%s': weight %zu is not a non-negative number", file_of(x, wname), wname, i + 1);
				n = 0;
			}
			sum += json_number_value(p);
		}
		if (n && !(sum > 0)) {
			error(x, "%s: parameter '%s': the weights sum to 0; give at least one positive weight", file_of(x, wname), wname);
			n = 0;
		}
	}
	if (n == 1) {
		free(*dst);
		*dst = dup_str(json_array_get(v, 0));
		rc = *dst ? line(x, name, "applied", "as --%s %s", flag, *dst) : DS_ENOMEM;
	} else if (n > 1) {
		buf = malloc(len);
		size_t o = 0;
		json_array_foreach(v, i, p) {
			json_t *wi = json_array_get(w, i);
			o += (size_t)snprintf(buf + o, len - o, "%s%.17g %s", i ? " " : "", wi ? json_number_value(wi) : 1.0,
					      json_string_value(p));
		}
		free(*dst);
		*dst = buf;
		rc = line(x, name, "applied", "a blend of %zu datasets, as --%s \"%s\"%s", n, flag, buf,
			  by_docs ? " (weights from document counts: weight_by_num_documents)" : "");
	}
	json_decref(v);
	return rc;
}

/* The vocabulary of a tokenizer file: GPT-2's vocab.json (token -> id) or
 * an HF tokenizer.json (model.vocab plus added_tokens); 0 on failure. */
static int64_t vocab_of(struct ctx *x, const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	int64_t n = 0;
	if (!j) {
		error(x, "%s: parameter 'vocab_file': %s: %s", file_of(x, "vocab_file"), path, je.text);
		return 0;
	}
	json_t *model = json_object_get(j, "model");
	if (json_is_object(json_object_get(model, "vocab"))) {
		/* the tokenizer's size: the largest id + 1 over vocab and added tokens */
		const char *k;
		json_t *id;
		json_object_foreach(json_object_get(model, "vocab"), k, id)
			if (json_integer_value(id) + 1 > n)
				n = json_integer_value(id) + 1;
		size_t i;
		json_t *t;
		json_array_foreach(json_object_get(j, "added_tokens"), i, t)
			if (json_integer_value(json_object_get(t, "id")) + 1 > n)
				n = json_integer_value(json_object_get(t, "id")) + 1;
	} else if (json_is_object(j)) {
		n = (int64_t)json_object_size(j);
	}
	json_decref(j);
	if (n < 1)
		error(x, "%s: parameter 'vocab_file': %s holds no vocabulary (a GPT-2 vocab.json or an HF tokenizer.json)",
		      file_of(x, "vocab_file"), path);
	return n;
}

/* NeoX's DeepSpeed MoE (megatron/model/transformer.py of the NeoX that
 * had it): MoE(num_experts=moe_num_experts, ep_size, k=moe_top_k,
 * use_residual=moe_use_residual, capacity_factor=moe_train_capacity_factor,
 * eval_capacity_factor, min_capacity, drop_tokens=moe_token_dropping) in
 * the layers whose 0-based index is a multiple of expert_interval, with
 * NeoX's defaults (interval 2, residual on, dropping off, loss coeff 0.1),
 * as the model's moe section. */
static int moe_section(struct ctx *x)
{
	json_t *a = x->all, *ne = json_object_get(a, "moe_num_experts");
	if (!ne || (json_is_integer(ne) && json_integer_value(ne) <= 1))
		return 0;  /* NeoX: MoE layers not used with 1 expert */
	const char *f = file_of(x, "moe_num_experts");
	json_t *ty = json_object_get(a, "moe_type");
	if (!ty) {   /* today's NeoX: megablocks' dMoE with the sinkhorn router */
		error(x, "%s: parameter 'moe_num_experts': without moe_type \"deepspeed\" NeoX's MoE is megablocks' dMoE, "
		      "which is not implemented; dstk implements DeepSpeed's MoE (moe_type \"deepspeed\")", f);
		return 0;
	}
	if (!(json_is_string(ty) && !strcmp(json_string_value(ty), "deepspeed"))) {
		error(x, "%s: parameter 'moe_type': only \"deepspeed\" is implemented (megablocks' dMoE is not)",
		      file_of(x, "moe_type"));
		return 0;
	}
	json_t *iv = json_object_get(a, "moe_expert_interval");
	if (!iv)
		iv = json_object_get(a, "expert_interval");
	int64_t interval = iv ? json_integer_value(iv) : 2, L = json_integer_value(json_object_get(a, "num_layers"));
	if (interval < 1 || L < 1) {
		error(x, "%s: parameter 'expert_interval': a positive integer, with num_layers given", f);
		return 0;
	}
	json_t *moe = json_object(), *layers = json_array();
	for (int64_t l = 0; l < L; l += interval)
		json_array_append_new(layers, json_integer(l));
	json_object_set(moe, "num_experts", ne);
	json_object_set_new(moe, "layers", layers);
	static const struct { const char *neox, *ds, *def; } map[] = {
		{ "moe_top_k", "k", "1" }, { "moe_expert_parallel_size", "ep_size", "1" },
		{ "moe_loss_coeff", "loss_coeff", "0.1" }, { "moe_train_capacity_factor", "capacity_factor", "1.0" },
		{ "moe_eval_capacity_factor", "eval_capacity_factor", "1.0" }, { "moe_min_capacity", "min_capacity", "4" },
		{ "moe_token_dropping", "drop_tokens", "false" }, { "moe_use_residual", "use_residual", "true" },
	};
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
		json_t *v = json_object_get(a, map[i].neox);
		json_object_set_new(moe, map[i].ds, v ? json_incref(v) : json_loads(map[i].def, JSON_DECODE_ANY, NULL));
	}
	DS_TRY(line(x, "moe_num_experts", "applied", "DeepSpeed MoE in layers 0, %lld, ... of %lld; the load-balancing loss "
		    "adds its gradient (NeoX's DeepSpeed-MoE training.py took .item() of it, which adds none)",
		    (long long)interval, (long long)L));
	return set_path(x->nx->model, "moe", moe);
}

/* Which GELU NeoX computes (megatron/model/activations.py get_activation,
 * transformer.py ParallelMLP and Gated_Activation; before its activation
 * parameter, 2021-05, the geglu and openai_gelu switches and
 * transformer.py's GEGLU): activation gelu is bias_gelu_fusion's
 * bias_gelu_impl, the tanh form, else openai_gelu's gelu_impl (tanh), else
 * erf_gelu (onnx_safe) or F.gelu, the erf form -- onnx_safe with
 * bias_gelu_fusion is NeoX's ValueError; activation geglu applies F.gelu
 * (erf) to the gate whatever bias_gelu_fusion; the old geglu switch took
 * bias_gelu_fusion or openai_gelu as the tanh form, else the erf form.
 * act: the model activation, or NULL: err about parameter errp (NULL too:
 * the activation's own error). */
struct gelu {
	const char *act, *why, *err, *errp;   /* errp: the parameter err is about */
};

static struct gelu gelu_form(json_t *all)
{
	struct gelu g = { NULL, NULL, NULL, NULL };
	json_t *av = json_object_get(all, "activation");
	const char *a = av ? json_string_value(av) : "gelu";
	int old = json_is_true(json_object_get(all, "geglu")), fused = json_is_true(json_object_get(all, "bias_gelu_fusion")),
	    openai = json_is_true(json_object_get(all, "openai_gelu")), onnx = json_is_true(json_object_get(all, "onnx_safe"));
	if (!a || (strcmp(a, "gelu") && strcmp(a, "geglu") && strcmp(a, "swiglu")))
		return g;
	if (old && strcmp(a, "gelu")) {
		g.errp = "geglu";
		g.err = "NeoX's switch from before its activation parameter; give it or the activation, not both";
		return g;
	}
	if (!strcmp(a, "swiglu")) {
		g.act = "swiglu";
		g.why = "swish on the gate, no GELU";
	} else if (old) {
		g.act = fused || openai ? "geglu" : "geglu_exact";
		g.why = fused ? "the old GEGLU with bias_gelu_fusion, bias_gelu_impl: the tanh approximation"
			: openai ? "the old GEGLU with openai_gelu, gelu_impl: the tanh approximation"
			: "the old GEGLU's F.gelu (erf_gelu with onnx_safe): the exact erf form";
	} else if (!strcmp(a, "geglu")) {
		g.act = openai ? "geglu" : "geglu_exact";
		g.why = openai ? "openai_gelu's gelu_impl on the gate: the tanh approximation"
			: "NeoX's Gated_Activation applies F.gelu to the gate, the exact erf form, whatever bias_gelu_fusion";
	} else if (fused && onnx) {
		g.errp = "onnx_safe";
		g.err = "with bias_gelu_fusion NeoX refuses it (get_activation: not compatible); give one";
	} else {
		g.act = fused || openai ? "gelu" : "gelu_exact";
		g.why = fused ? "NeoX's fused bias_gelu_impl, the tanh approximation"
			: openai ? "NeoX's openai_gelu, gelu_impl: the tanh approximation"
			: onnx ? "NeoX's erf_gelu, the exact erf form (its 1.41421 for sqrt 2 moves it by under 1e-6)"
			: "NeoX's unfused F.gelu, the exact erf form";
	}
	return g;
}

/* One of the GELU switches (geglu, bias_gelu_fusion, openai_gelu,
 * onnx_safe): its line says what NeoX computes with it. */
static int gelu_switch(struct ctx *x, const char *name, json_t *v)
{
	struct gelu g = gelu_form(x->all);
	const char *a = json_string_value(json_object_get(x->all, "activation"));
	int on = json_is_true(v), old = json_is_true(json_object_get(x->all, "geglu"));
	if (!json_is_boolean(v)) {
		error(x, "%s: parameter '%s': expected true or false", file_of(x, name), name);
		return 0;
	}
	if (g.err && !strcmp(name, g.errp)) {
		error(x, "%s: parameter '%s': %s", file_of(x, name), name, g.err);
		return 0;
	}
	if (g.err)
		return line(x, name, "not read", "the GELU switches conflict (parameter '%s')", g.errp);
	if (!g.act)
		return line(x, name, "not read", "activation %s%s%s is not implemented", a ? "\"" : "", a ? a : "(not a string)",
			    a ? "\"" : "");
	if (!strcmp(g.act, "swiglu"))
		return line(x, name, "no effect", "%s: activation swiglu has no GELU", on ? "true" : "false");
	if (!strcmp(name, "geglu") && !on)
		return line(x, name, "accepted", "off");
	if (!on && !strcmp(name, "onnx_safe"))
		return line(x, name, "accepted", "off (no ONNX export)");
	if (!on && !strcmp(name, "openai_gelu"))
		return line(x, name, "accepted", "off");
	/* the switches NeoX's code does not read here, or reads after another */
	int gated = a && !strcmp(a, "geglu") && !old, fused = json_is_true(json_object_get(x->all, "bias_gelu_fusion")),
	    openai = json_is_true(json_object_get(x->all, "openai_gelu"));
	const char *none = NULL;
	if (gated && (!strcmp(name, "bias_gelu_fusion") || !strcmp(name, "onnx_safe")))
		none = "NeoX's gated activations call F.gelu (the erf form)";
	else if (fused && (!strcmp(name, "openai_gelu") || !strcmp(name, "onnx_safe")))
		none = "bias_gelu_fusion's tanh form comes first";
	else if (openai && !strcmp(name, "onnx_safe"))
		none = "openai_gelu's tanh form comes first";
	if (none)
		return line(x, name, "no effect", "%s: %s: model activation \"%s\"", on ? "true" : "false", none, g.act);
	return line(x, name, "applied", "%s: model activation \"%s\": %s", on ? "true" : "false", g.act, g.why);
}

/* The model activation NeoX's switches give (gelu_form), set whether or
 * not the file names any: NeoX's default, the unfused F.gelu, is the erf
 * form (gelu_exact), not dstk's default tanh gelu.  A file naming none of
 * them gets an activation line of its own. */
static int gelu_apply(struct ctx *x)
{
	static const char *const keys[] = { "activation", "geglu", "bias_gelu_fusion", "openai_gelu", "onnx_safe" };
	struct gelu g = gelu_form(x->all);
	if (!g.act)
		return 0;   /* its parameter's line said why */
	DS_TRY(set_path(x->nx->model, "activation", json_string(g.act)));
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (json_object_get(x->all, keys[i]))
			return 0;
	return line(x, "activation", "applied", "NeoX's default gelu: model activation \"%s\": %s", g.act, g.why);
}

static int special(struct ctx *x, const char *name, json_t *v)
{
	struct ds_neox *nx = x->nx;
	const char *f = file_of(x, name);
	static const char *const to_ds[][2] = {
		{ "lr", "optimizer.params.lr" }, { "weight_decay", "optimizer.params.weight_decay" },
		{ "batch_size", "train_micro_batch_size_per_gpu" }, { "min_lr", "dstk.min_lr" },
		/* NeoX's default is linear; any other style is an error there too */
		{ "lr_decay_style", "dstk.lr_decay_style" },
	};
	for (size_t i = 0; i < sizeof(to_ds) / sizeof(to_ds[0]); i++)
		if (!strcmp(name, to_ds[i][0])) {
			DS_TRY(set_path(nx->ds, to_ds[i][1], json_incref(v)));
			return line(x, name, "applied", "DeepSpeed config key %s", to_ds[i][1]);
		}
	if (!strcmp(name, "lr_decay_iters") || !strcmp(name, "lr_decay_fraction") || !strcmp(name, "warmup"))
		return line(x, name, "applied", "in NeoX's AnnealingLR (the lr schedule line)");
	if (!strncmp(name, "moe_", 4) || !strcmp(name, "expert_interval"))
		return line(x, name, "applied", "in the model's moe section (the moe_num_experts line)");
	if (!strcmp(name, "padded_vocab_size")) {
		DS_TRY(set_path(nx->model, "vocab_size", json_incref(v)));
		DS_TRY(set_path(nx->model, "make_vocab_size_divisible_by", json_integer(1)));
		return line(x, name, "applied", "model vocab_size, not padded further");
	}
	if (!strcmp(name, "vocab_file")) {
		if (json_object_get(x->all, "padded_vocab_size"))
			return line(x, name, "not read", "padded_vocab_size is given");
		int64_t n = json_is_string(v) ? vocab_of(x, json_string_value(v)) : 0;
		if (n > 0) {
			DS_TRY(set_path(nx->model, "vocab_size", json_integer(n)));
			return line(x, name, "applied", "%lld tokens, padded as NeoX pads them (make_vocab_size_divisible_by x "
				    "model_parallel_size)", (long long)n);
		}
		return 0;
	}
	static const char *const to_model[][3] = {
		{ "rms_norm", "norm", "rmsnorm" }, { "sinusoidal_pos_emb", "pos_emb", "sinusoidal" },
	};
	for (size_t i = 0; i < sizeof(to_model) / sizeof(to_model[0]); i++)
		if (!strcmp(name, to_model[i][0])) {
			if (!json_is_true(v))
				return line(x, name, "accepted", "off");
			DS_TRY(set_path(nx->model, to_model[i][1], json_string(to_model[i][2])));
			return line(x, name, "applied", "model %s \"%s\"", to_model[i][1], to_model[i][2]);
		}
	if (!strcmp(name, "activation")) {
		const char *a = json_string_value(v);
		if (!a || (strcmp(a, "gelu") && strcmp(a, "geglu") && strcmp(a, "swiglu"))) {
			error(x, "%s: parameter 'activation': %s%s%s: only gelu, geglu and swiglu are implemented", f,
			      a ? "\"" : "", a ? a : "not a string", a ? "\"" : "");
			return 0;
		}
		struct gelu g = gelu_form(x->all);
		if (!g.act)
			return line(x, name, "not read", "the GELU switches conflict (parameter '%s')", g.errp);
		return line(x, name, "applied", "model activation \"%s\": %s%s", g.act, g.why,
			    strcmp(a, "gelu") ? "; gated: the MLP width as NeoX sizes it (the mlp line)" : "");
	}
	if (!strcmp(name, "geglu") || !strcmp(name, "bias_gelu_fusion") || !strcmp(name, "openai_gelu") ||
	    !strcmp(name, "onnx_safe"))
		return gelu_switch(x, name, v);
	if (!strcmp(name, "intermediate_size") || !strcmp(name, "expansion_factor") || !strcmp(name, "mlp_multiple_of"))
		return line(x, name, "applied", "in the MLP width as NeoX sizes it (the mlp line)");
	if (!strcmp(name, "attention_config")) {
		/* [[["global"], N], ...]: every layer global is the dense attention
		 * dstk has; "flash" is the same attention through FlashAttention's
		 * kernel (NeoX's transformer.py counts it as not sparse) */
		char *s = json_dumps(v, JSON_COMPACT);
		int ok = s && !strstr(s, "local") && !strstr(s, "sparse") && !strstr(s, "bigbird") && !strstr(s, "bslongformer") &&
			 !strstr(s, "rwkv") && !strstr(s, "mamba") && !strstr(s, "gmlp") && !strstr(s, "amlp");
		free(s);
		if (!ok)
			error(x, "%s: parameter 'attention_config': only \"global\" or \"flash\" (dense) attention is implemented", f);
		return ok ? line(x, name, "applied", "dense attention in every layer (global or flash), dstk's attention") : 0;
	}
	if (!strcmp(name, "precision")) {
		const char *p = json_string_value(v);
		if (p && (!strcmp(p, "bfloat16") || !strcmp(p, "fp16"))) {
			DS_TRY(set_path(nx->ds, p[0] == 'b' ? "bf16.enabled" : "fp16.enabled", json_true()));
			return line(x, name, "applied", "DeepSpeed config key %s true", p[0] == 'b' ? "bf16.enabled" : "fp16.enabled");
		}
		if (!p || strcmp(p, "fp32"))
			error(x, "%s: parameter 'precision': expected fp32, fp16 or bfloat16", f);
		return p && !strcmp(p, "fp32") ? line(x, name, "applied", "fp32 training") : 0;
	}
	if (!strcmp(name, "fp16")) {
		if (!json_is_object(v)) {
			error(x, "%s: parameter 'fp16': expected a mapping (DeepSpeed's fp16 section)", f);
			return 0;
		}
		json_t *c = json_deep_copy(v);
		json_object_del(c, "fp16"); /* NeoX's own marker beside DeepSpeed's keys */
		DS_TRY(set_path(nx->ds, "fp16", c));
		return line(x, name, "applied", "DeepSpeed config section fp16");
	}
	if (!strcmp(name, "model_parallel_size") || !strcmp(name, "pipe_parallel_size")) {
		int64_t n = json_integer_value(v);
		int pipe = name[0] == 'p';
		if (!json_is_integer(v) || n < (pipe ? 0 : 1) || n > 65536) {
			error(x, "%s: parameter '%s': expected an integer >= %d", f, name, pipe ? 0 : 1);
			return 0;
		}
		if (pipe)
			x->nx->pp = n < 1 ? 1 : (int)n;   /* NeoX's 0: no pipeline engine, one stage all the same */
		else
			x->nx->tp = (int)n;
		return line(x, name, "applied", "%lld, as --%s-model-parallel-size %lld", (long long)n,
			    pipe ? "pipeline" : "tensor", (long long)(n < 1 ? 1 : n));
	}
	if (!strcmp(name, "pipe_partition_method")) {
		DS_TRY(set_path(nx->ds, "pipeline.partition", json_incref(v)));
		return line(x, name, "applied", "DeepSpeed config key pipeline.partition");
	}
	if (!strcmp(name, "checkpoint_activations")) {
		if (!json_is_true(v))
			return line(x, name, "accepted", "off");
		json_t *k = json_object_get(x->all, "checkpoint_num_layers");
		if (k && json_integer_value(k) != 1) {
			error(x, "%s: parameter 'checkpoint_num_layers': %lld: dstk checkpoints each layer (1 only)", f,
			      (long long)json_integer_value(k));
			return 0;
		}
		json_t *L = json_object_get(x->all, "num_layers");
		DS_TRY(set_path(nx->ds, "activation_checkpointing.number_checkpoints",
				json_integer(json_is_integer(L) ? json_integer_value(L) : 1)));
		return line(x, name, "applied", "DeepSpeed config key activation_checkpointing.number_checkpoints (every layer)");
	}
	if (!strcmp(name, "checkpoint_num_layers"))
		return line(x, name, "applied", "%lld layer per checkpoint", (long long)json_integer_value(v));
	static const char *const ac[][2] = {
		{ "partition_activations", "partition_activations" },
		{ "contigious_checkpointing", "contiguous_memory_optimization" },
		{ "contiguous_checkpointing", "contiguous_memory_optimization" },
		{ "checkpoint_in_cpu", "cpu_checkpointing" },
		{ "synchronize_each_layer", "synchronize_checkpoint_boundary" },
	};
	for (size_t i = 0; i < sizeof(ac) / sizeof(ac[0]); i++)
		if (!strcmp(name, ac[i][0])) {
			char path[128];
			snprintf(path, sizeof(path), "activation_checkpointing.%s", ac[i][1]);
			if (!json_is_true(v))
				return line(x, name, "accepted", "off");
			DS_TRY(set_path(nx->ds, path, json_true()));
			return line(x, name, "applied", "DeepSpeed config key %s", path);
		}
	if (!strcmp(name, "train_data_paths"))
		return data_paths(x, name, v, &nx->data);
	if (!strcmp(name, "valid_data_paths"))
		return data_paths(x, name, v, &nx->valid_data);
	if (!strcmp(name, "test_data_paths"))
		return data_paths(x, name, v, &nx->test_data);
	if (strstr(name, "_data_weights")) {
		char pname[64];
		snprintf(pname, sizeof(pname), "%.*s_paths", (int)(strstr(name, "_weights") - name), name);
		json_t *paths = json_object_get(x->all, pname);
		if (!paths || json_is_null(paths))
			return line(x, name, "no effect", "no %s", pname);
		if (json_is_true(json_object_get(x->all, "weight_by_num_documents")))
			return line(x, name, "not read", "weight_by_num_documents replaces the weights, as in NeoX");
		return line(x, name, "applied", "the weights of the %s blend", pname);
	}
	if (!strcmp(name, "weight_by_num_documents")) {
		nx->weight_by_docs = json_is_true(v);
		if (!json_is_boolean(v))
			error(x, "%s: parameter '%s': expected true or false", f, name);
		return line(x, name, "applied", nx->weight_by_docs ? "blend weights from each dataset's document count "
			    "(NeoX's weights_by_num_docs)" : "off: the *_data_weights weigh the blends");
	}
	if (!strcmp(name, "weighted_sampler_alpha")) {
		if (!json_is_number(v) || json_number_value(v) < 0)
			error(x, "%s: parameter '%s': expected a non-negative number", f, name);
		nx->alpha = json_number_value(v);
		if (!json_is_true(json_object_get(x->all, "weight_by_num_documents")))
			return line(x, name, "no effect", "weight_by_num_documents is off");
		return line(x, name, "applied", "the exponent of the document-count weights");
	}
	if (!strcmp(name, "tensorboard_dir")) {
		if (json_is_null(v))
			return 0;
		DS_TRY(set_path(nx->ds, "tensorboard.enabled", json_true()));
		DS_TRY(set_path(nx->ds, "tensorboard.output_path", json_incref(v)));
		return line(x, name, "applied", "DeepSpeed config keys tensorboard.enabled and tensorboard.output_path");
	}
	if (!strcmp(name, "deepspeed_extra_args")) {
		const char *k;
		json_t *e;
		json_object_foreach(v, k, e) {
			if (json_object_get(nx->ds, k) && json_is_object(e) && json_is_object(json_object_get(nx->ds, k)))
				json_object_update(json_object_get(nx->ds, k), e);
			else if (json_object_set(nx->ds, k, e))
				return DS_ENOMEM;
		}
		return line(x, name, "applied", "merged into the DeepSpeed config");
	}
	return 0;
}

/* ds-train's flag for a run parameter, and the line saying so. */
static int run_line(struct ctx *x, const char *name, json_t *v)
{
	static const char *const flag[][2] = {
		{ "checkpoint_factor", "save-interval" }, { "data_path", "data" }, { "keep_last_n_checkpoints", "keep-last-n-checkpoints" },
	};
	char f[64];
	snprintf(f, sizeof(f), "%s", name);
	for (char *c = f; *c; c++)
		if (*c == '_')
			*c = '-';
	for (size_t i = 0; i < sizeof(flag) / sizeof(flag[0]); i++)
		if (!strcmp(name, flag[i][0]))
			snprintf(f, sizeof(f), "%s", flag[i][1]);
	if (!strcmp(name, "data_path") && json_object_get(x->all, "train_data_paths") &&
	    !json_is_null(json_object_get(x->all, "train_data_paths")))
		return line(x, name, "not read", "train_data_paths is given (NeoX reads those then)");
	if (json_is_boolean(v))
		return line(x, name, "applied", json_is_true(v) ? "as --%s" : "false: no --%s", f);
	char *val = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	int rc = line(x, name, "applied", "as --%s %s (unless the command line gives it)", f, val ? val : "");
	free(val);
	return rc;
}

static int run_flag(struct ctx *x, const char *name, json_t *v)
{
	struct ds_neox *nx = x->nx;
	DS_TRY(run_line(x, name, v));
	if (!strcmp(name, "train_iters"))
		nx->train_iters = int_of(x, name, v);
	else if (!strcmp(name, "seed")) {
		nx->have_seed = json_is_integer(v);
		nx->seed = (uint64_t)int_of(x, name, v);
	} else if (!strcmp(name, "save"))
		nx->save = dup_str(v);
	else if (!strcmp(name, "load"))
		nx->load = dup_str(v);
	else if (!strcmp(name, "save_interval") || !strcmp(name, "checkpoint_factor"))
		nx->save_interval = int_of(x, name, v);
	else if (!strcmp(name, "keep_last_n_checkpoints"))
		nx->keep_last_n = int_of(x, name, v);
	else if (!strcmp(name, "eval_interval"))
		nx->eval_interval = int_of(x, name, v);
	else if (!strcmp(name, "eval_iters"))
		nx->eval_iters = int_of(x, name, v);
	else if (!strcmp(name, "log_interval"))
		nx->log_interval = int_of(x, name, v);
	else if (!strcmp(name, "exit_interval"))
		nx->exit_interval = int_of(x, name, v);
	else if (!strcmp(name, "data_path")) {
		if (!json_object_get(x->all, "train_data_paths") || json_is_null(json_object_get(x->all, "train_data_paths"))) {
			free(nx->data);
			nx->data = dup_str(v);
		}
	} else if (!strcmp(name, "split")) {
		/* "969, 30, 1": ds-train's --split takes it without spaces */
		if (json_is_string(v)) {
			const char *s = json_string_value(v);
			char *d = malloc(strlen(s) + 1), *o = d;
			for (; d && *s; s++)
				if (*s != ' ')
					*o++ = *s;
			if (o)
				*o = 0;
			nx->split = d;
		}
	} else if (!strcmp(name, "no_load_optim"))
		nx->no_load_optim = json_is_true(v);
	return 0;
}

/* NeoX's MLP width (megatron/model/transformer.py ParallelMLP): F =
 * intermediate_size, else expansion_factor x hidden_size, else 4 x
 * hidden_size; a gated activation (geglu, swiglu) takes int(2F / 3) for
 * both halves together; the first linear's width is rounded up to a
 * multiple of 2 x mlp_multiple_of and the second's (half of it when gated)
 * to a multiple of mlp_multiple_of.  dstk's intermediate_size is the
 * second's width.  Nothing given: the model's default 4 x hidden_size. */
static int mlp(struct ctx *x)
{
	json_t *a = x->all, *is = json_object_get(a, "intermediate_size"), *ef = json_object_get(a, "expansion_factor"),
	       *mo = json_object_get(a, "mlp_multiple_of"), *act = json_object_get(a, "activation"),
	       *h = json_object_get(a, "hidden_size");
	const char *an = json_string_value(act);
	int gated = an && (!strcmp(an, "geglu") || !strcmp(an, "swiglu"));
	if (json_is_null(is))
		is = NULL;
	if (json_is_null(ef))
		ef = NULL;
	if (!is && !ef && !mo && !gated)
		return 0;
	if ((is && !json_is_integer(is)) || (ef && !json_is_number(ef)) || (mo && !json_is_integer(mo)) ||
	    json_integer_value(mo) < (mo ? 1 : 0) || !json_is_integer(h)) {
		if (json_is_integer(h))
			error(x, "%s: parameters 'intermediate_size', 'expansion_factor', 'mlp_multiple_of': expected integers "
			      "(expansion_factor a number), mlp_multiple_of at least 1", x->nx->name);
		return 0;
	}
	if (is && ef) {
		error(x, "%s: parameter 'expansion_factor': give intermediate_size or expansion_factor, not both (as NeoX asserts)",
		      file_of(x, "expansion_factor"));
		return 0;
	}
	int64_t H = json_integer_value(h), m = mo ? json_integer_value(mo) : 1;
	int64_t F = is ? json_integer_value(is) : ef ? (int64_t)(json_number_value(ef) * (double)H) : 4 * H;
	int64_t out = gated ? (int64_t)((double)(F * 2) / 3.0) : F, in = gated ? out / 2 : out;
	out = 2 * m * ((out + 2 * m - 1) / (2 * m));
	in = m * ((in + m - 1) / m);
	if (out != (gated ? 2 * in : in) || in < 1) {
		error(x, "%s: parameters 'intermediate_size'/'mlp_multiple_of': the MLP widths NeoX computes disagree (first "
		      "linear %lld, second %lld%s); give an mlp_multiple_of or intermediate_size that divides evenly",
		      x->nx->name, (long long)out, (long long)in, gated ? ", half of the first expected" : "");
		return 0;
	}
	DS_TRY(set_path(x->nx->model, "intermediate_size", json_integer(in)));
	return line(x, "mlp", "applied", "model intermediate_size %lld (NeoX's width: %s %lld%s, rounded to %lld%s)", (long long)in,
		    is ? "intermediate_size" : ef ? "expansion_factor x hidden_size =" : "4 x hidden_size =", (long long)F,
		    gated ? ", x 2/3 for the gated activation" : "", (long long)(gated ? 2 * m : m), gated ? " and halved" : "");
}

/* NeoX's schedule (get_learning_rate_scheduler): num_iters =
 * lr_decay_iters, else floor(train_iters x lr_decay_fraction), else
 * train_iters (at least 1); warmup_iter = warmup x num_iters. */
static int schedule(struct ctx *x)
{
	struct ds_neox *nx = x->nx;
	json_t *a = x->all;
	json_t *style = json_object_get(a, "lr_decay_style"), *di = json_object_get(a, "lr_decay_iters"),
	       *df = json_object_get(a, "lr_decay_fraction"), *wu = json_object_get(a, "warmup");
	if (json_object_get(nx->ds, "scheduler")) {
		if (style || di || wu || json_object_get(a, "min_lr"))
			error(x, "%s: parameter 'scheduler': a DeepSpeed scheduler beside NeoX's lr_decay_style/warmup: give one",
			      nx->name);
		return 0;
	}
	if (!style)
		DS_TRY(set_path(nx->ds, "dstk.lr_decay_style", json_string("linear"))); /* NeoX's default */
	int64_t n = json_is_integer(di) ? json_integer_value(di)
		    : json_is_number(df) ? (int64_t)(nx->train_iters * json_number_value(df)) : nx->train_iters;
	if (n < 1)
		n = 1;
	double w = (wu ? json_number_value(wu) : 0.01) * (double)n; /* NeoX's default warmup 0.01 */
	DS_TRY(set_path(nx->ds, "dstk.lr_decay_iters", json_integer(n)));
	DS_TRY(set_path(nx->ds, "dstk.lr_warmup_iters", json_real(w)));
	return line(x, "lr schedule", "applied", "NeoX AnnealingLR, %s decay over %lld iterations, %g of them warmup (warmup %g x %lld)",
		    style ? json_string_value(style) : "linear", (long long)n, w, wu ? json_number_value(wu) : 0.01,
		    (long long)n);
}

static int map(struct ctx *x, int lenient)
{
	const char *name;
	json_t *v;
	json_object_foreach(x->all, name, v) {
		int i;
		for (i = 0; i < NP && strcmp(params[i].name, name); i++)
			;
		const char *f = file_of(x, name);
		if (i == NP) {
			struct ds_config_key keys[NP];
			memset(keys, 0, sizeof(keys));
			for (int k = 0; k < NP; k++)
				keys[k].path = params[k].name;
			char sug[128];
			ds_config_table_suggest(keys, NP, name, sug, sizeof(sug));
			if (lenient)
				ds_log_warn("%s: ignoring unknown GPT-NeoX parameter '%s'%s%s%s", f, name, sug[0] ? " (did you mean '" : "",
					    sug, sug[0] ? "'?)" : "");
			else
				error(x, "%s: unknown GPT-NeoX parameter '%s'%s%s%s", f, name, sug[0] ? " (did you mean '" : "", sug,
				      sug[0] ? "'?)" : " (--lenient ignores it)");
			continue;
		}
		const struct param *p = &params[i];
		switch (p->how) {
		case H_DS:
			if (json_is_object(v) && json_is_object(json_object_get(x->nx->ds, name)))
				json_object_update(json_object_get(x->nx->ds, name), v);
			else
				DS_TRY(set_path(x->nx->ds, name, json_deep_copy(v)));
			DS_TRY(line(x, name, "applied", "DeepSpeed config key %s", name));
			break;
		case H_MODEL:
			DS_TRY(set_path(x->nx->model, name, json_incref(v)));
			DS_TRY(line(x, name, "applied", "model config key %s", name));
			break;
		case H_RUN:
			DS_TRY(run_flag(x, name, v));
			break;
		case H_SPECIAL: {
			int before = x->nx->nlines, errs = x->errs.n;
			DS_TRY(special(x, name, v));
			if (x->nx->nlines == before && x->errs.n == errs) {
				/* the translations without a line of their own */
				char *val = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
				int rc = line(x, name, "applied", "%s", val ? val : "");
				free(val);
				DS_TRY(rc);
			}
			break;
		}
		case H_NOEFFECT:
			DS_TRY(line(x, name, "no effect", "%s", p->why));
			break;
		default:
			if (off_or_default(v, p->def))
				DS_TRY(line(x, name, "accepted", "off or at its default (%s)", p->why));
			else
				error(x, "%s: parameter '%s': not supported by dstk: %s", f, name, p->why);
		}
	}
	DS_TRY(gelu_apply(x));
	DS_TRY(mlp(x));
	DS_TRY(moe_section(x));
	return schedule(x);
}

void ds_neox_release(struct ds_neox *nx)
{
	json_decref(nx->ds);
	json_decref(nx->model);
	free(nx->name);
	free(nx->ds_text);
	free(nx->model_text);
	free(nx->save);
	free(nx->load);
	free(nx->data);
	free(nx->valid_data);
	free(nx->test_data);
	free(nx->split);
	for (int i = 0; i < nx->nlines; i++)
		free(nx->lines[i]);
	free(nx->lines);
	memset(nx, 0, sizeof(*nx));
}

int ds_neox_load(const char *const *files, int n, int lenient, struct ds_neox *nx, struct ds_err *err)
{
	struct ctx x = { .nx = nx };
	int rc = 0;
	memset(nx, 0, sizeof(*nx));
	size_t len = 1;
	for (int i = 0; i < n; i++)
		len += strlen(files[i]) + 1;
	nx->name = calloc(1, len);
	nx->ds = json_object();
	nx->model = json_object();
	x.all = json_object();
	x.from = json_object();
	nx->alpha = 1.0;  /* NeoX's weighted_sampler_alpha default */
	if (!nx->name || !nx->ds || !nx->model || !x.all || !x.from) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		json_t *doc;
		if (i)
			strcat(nx->name, "+");
		strcat(nx->name, files[i]);
		if ((rc = ds_yaml_load_file(files[i], &doc, err)) < 0)
			goto out;
		const char *k;
		json_t *v;
		json_object_foreach(doc, k, v) {
			char name[128];
			ds_config_table_underscores(k, name, sizeof(name));
			if (json_object_get(x.all, name)) {
				error(&x, "%s: parameter '%s': also given in %s (NeoX refuses a key in two files)", files[i], name,
				      json_string_value(json_object_get(x.from, name)));
				continue;
			}
			json_object_set(x.all, name, v);
			json_object_set_new(x.from, name, json_string(files[i]));
		}
		json_decref(doc);
	}
	/* run flags first: the schedule needs train_iters */
	json_t *ti = json_object_get(x.all, "train_iters");
	if (ti)
		nx->train_iters = int_of(&x, "train_iters", ti);
	if ((rc = map(&x, lenient)) < 0) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	/* NeoX's pipeline partition default, and its vocabulary padding: a
	 * multiple of make_vocab_size_divisible_by x model_parallel_size
	 * (tokenizer.py), unless padded_vocab_size fixes it */
	if (!json_object_get(x.all, "pipe_partition_method") &&
	    set_path(nx->ds, "pipeline.partition", json_string("type:transformer|mlp")) < 0)
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
	if (rc == 0 && nx->tp > 1 && !json_object_get(x.all, "padded_vocab_size")) {
		json_t *d = json_object_get(nx->model, "make_vocab_size_divisible_by");
		int64_t k = json_is_integer(d) ? json_integer_value(d) : 128;
		if (set_path(nx->model, "make_vocab_size_divisible_by", json_integer(k * nx->tp)) < 0)
			rc = ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	if (rc < 0)
		goto out;
	if (x.errs.n)
		rc = ds_config_errs_report(&x.errs, nx->name, err);
out:
	json_decref(x.all);
	json_decref(x.from);
	if (rc < 0)
		ds_neox_release(nx);
	return rc;
}
