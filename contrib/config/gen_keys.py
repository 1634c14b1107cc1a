#!/usr/bin/env python3
"""gen_keys.py - turn the DeepSpeed key list into dstk's config table.

Reads spec/deepspeed-config-keys.json (403 keys: path, type, default,
allowed, min, section, note) and writes lib/config/keys_ds.c: one
struct ds_config_key per key, with dstk's own type, range, one-line help
and status (implemented / inherent / unsupported), plus the keys dstk adds
(SGD params, the `dstk` section).  Every implemented key that is a value
(not an alias, a <name> pattern or an object of keys) gets a field of
struct ds_config_values (values.h, also written here) and carries its
offsetof, so lib/config fills the struct from the table and a consumer
never reads a key by its path.  The status rules below are the place to
flip a key once the trainer implements it; re-run and commit the output:

    python3 contrib/config/gen_keys.py /work/shared/spec/deepspeed-config-keys.json \
        > lib/config/keys_ds.c
    python3 contrib/config/gen_keys.py --values /work/shared/spec/deepspeed-config-keys.json \
        > lib/config/values.h   # the typed struct the table fills (fio-style offsetof)
    python3 contrib/config/gen_keys.py --paths /work/shared/spec/deepspeed-config-keys.json \
        > tests/data/config-keys.txt    # the list test_config checks the table against
"""
import json
import sys

IMPL, INH, UNSUP = "DS_KEY_IMPLEMENTED", "DS_KEY_INHERENT", "DS_KEY_UNSUPPORTED"

# Whole sections dstk does not implement, with the reason shown to the user.
UNSUP_SECTION = {
    "Sparse attention": "sparse attention kernels are not implemented in dstk",
    "Data efficiency": "data efficiency (random-LTD, curriculum sampling) is not implemented in dstk",
    "Curriculum learning (legacy)": "curriculum learning is not implemented in dstk",
    "Elasticity": "elastic training is not implemented in dstk (fix the batch triad instead)",
    "Compression": "compression training is not implemented in dstk",
    "Eigenvalue": "eigenvalue computation is not implemented in dstk",
    "Progressive layer drop": "progressive layer drop is not implemented in dstk",
    "Hybrid engine": "the RLHF hybrid engine is not implemented in dstk",
    "Nebula": "Nebula checkpointing is an Azure service; dstk writes HDF5 checkpoints",
    "Tensor parallel": "DeepSpeed's AutoTP is not implemented in dstk; its tensor parallelism is Megatron's "
                       "(--tensor-model-parallel-size, NeoX model_parallel_size)",
    "Weight quantization (inference)": "inference weight quantization is not part of dstk's trainer",
    "AMP": "apex AMP is a PyTorch library; use fp16 or bf16",
}

# Per-key status and help; (status, help).  Keys not listed get IMPLEMENTED
# unless their section is in UNSUP_SECTION.
KEY = {
    "optimizer.legacy_fusion": (INH, "dstk has one optimizer kernel per type; there is no legacy fused path to choose"),
    "optimizer.params.torch_adam": (INH, "dstk's Adam computes the same update as torch's; no other code is selected"),
    "optimizer.params.set_grad_none": (INH, "dstk zeroes its flat gradient buffer after every step"),
    "optimizer.params.fp32_optimizer_states": (INH, "optimizer states are always fp32 in dstk (only true is accepted)"),
    "optimizer.params.max_grad_norm": (UNSUP, "use the top-level gradient_clipping (DeepSpeed raises ValueError too)"),
    "optimizer.params.amsgrad": (IMPL, "must be false: DeepSpeed's fused and CPU Adam reject amsgrad"),
    "optimizer.params.<name>": (UNSUP, "dstk's optimizers take only the params DeepSpeed declares for them"),
    "scheduler.params.<name>": (UNSUP, "dstk's schedulers take only their declared params"),
    "seq_parallel_comm_data_type": (UNSUP, "dstk has no sequence parallelism"),
    "sparse_gradients": (UNSUP, "sparse embedding gradients are not implemented in dstk"),
    "disable_allgather": (INH, "DeepSpeed parses it but never uses it: accepted with a warning"),
    "fp32_allreduce": (INH, "DeepSpeed no longer reads it (use communication_data_type \"fp32\"): accepted with a warning"),
    "fp16.auto_cast": (UNSUP, "dstk casts inside its own kernels; there are no inputs to auto-cast"),
    "fp16.fp16_master_weights_and_grads": (UNSUP, "dstk always keeps fp32 master weights (DeepSpeed also needs ZeRO stage 2 with CPU offload)"),
    "bf16.immediate_grad_update": (UNSUP, "BF16_Optimizer's immediate gradient update is not implemented in dstk"),
    "bfloat16.immediate_grad_update": (UNSUP, "BF16_Optimizer's immediate gradient update is not implemented in dstk"),
    "zero_optimization.contiguous_gradients": (INH, "dstk's gradients always live in one contiguous flat buffer"),
    "zero_optimization.use_multi_rank_bucket_allreduce": (INH, "dstk reduces each bucket with one collective over all ranks"),
    "zero_optimization.elastic_checkpoint": (INH, "dstk checkpoints are world-size independent (full tensors by name)"),
    "zero_optimization.load_from_fp32_weights": (INH, "dstk checkpoints always hold fp32 master weights, which are loaded"),
    "zero_optimization.ignore_unused_parameters": (INH, "every parameter of dstk's models receives a gradient"),
    "zero_optimization.legacy_stage1": (UNSUP, "the legacy stage-1 implementation was removed from DeepSpeed"),
    "zero_optimization.stage3_module_granularity_threshold": (UNSUP, "module-granularity leaf fetching is not implemented in dstk"),
    "zero_optimization.module_granularity_threshold": (UNSUP, "module-granularity leaf fetching is not implemented in dstk"),
    "zero_optimization.stage3_use_all_reduce_for_fetch_params": (UNSUP, "dstk gathers stage-3 parameters with allgather"),
    "zero_optimization.use_all_reduce_for_fetch_params": (UNSUP, "dstk gathers stage-3 parameters with allgather"),
    "zero_optimization.zero_hpz_partition_size": (UNSUP, "ZeRO++ hierarchical partitioning is not implemented in dstk"),
    "zero_optimization.zero_quantized_weights": (UNSUP, "ZeRO++ quantized weights are not implemented in dstk"),
    "zero_optimization.zero_quantized_nontrainable_weights": (UNSUP, "ZeRO++ quantized weights are not implemented in dstk"),
    "zero_optimization.zero_quantized_gradients": (UNSUP, "ZeRO++ quantized gradients are not implemented in dstk"),
    "zero_optimization.zeropp_loco_param": (UNSUP, "ZeRO++ LoCo is not implemented in dstk"),
    "zero_optimization.zeropp_loco_param.err_beta": (UNSUP, "ZeRO++ LoCo is not implemented in dstk"),
    "zero_optimization.zeropp_loco_param.reset_T": (UNSUP, "ZeRO++ LoCo is not implemented in dstk"),
    "zero_optimization.mics_shard_size": (UNSUP, "MiCS sharding is not implemented in dstk"),
    "zero_optimization.mics_hierarchical_params_gather": (UNSUP, "MiCS sharding is not implemented in dstk"),
    "zero_optimization.memory_efficient_linear": (INH, "dstk's linear layers never keep extra copies of their inputs"),
    "zero_optimization.pipeline_loading_checkpoint": (UNSUP, "pipeline checkpoint loading is not implemented in dstk"),
    "zero_optimization.override_module_apply": (INH, "dstk has no torch module.apply to override"),
    "zero_optimization.log_trace_cache_warnings": (INH, "dstk has no trace cache; nothing to warn about"),
    "zero_optimization.grad_hooks": (UNSUP, "documented, but not a field in DeepSpeed's code (which rejects it too)"),
    "zero_optimization.offload_param.pin_memory": (INH, "pins the parameters kept in CPU memory for a device's copies; a CPU build has none (NVMe swap buffers are pinned whenever a device needs them, as DeepSpeed's)"),
    "zero_optimization.offload_optimizer.pin_memory": (INH, "pins the optimizer states kept in CPU memory for a device's copies: ZeRO-Offload on --device cuda always pins them; a CPU build has no device"),
    "zero_optimization.offload_optimizer.fast_init": (INH, "dstk writes the initial master weights and zeroed states straight to the swap files"),
    "aio.thread_count": (INH, "old name of intra_op_parallelism, which DeepSpeed no longer reads: accepted with a warning"),
    "aio.use_gds": (UNSUP, "GPUDirect Storage needs a CUDA build with cuFile"),
    "memory_breakdown": (INH, "dstk's log line always shows memory use (mem field)"),
    "dump_state": (IMPL, "print the effective configuration when training starts"),
    "autotuning.mp_size": (UNSUP, "ds-autotune does not search model-parallel layouts; give ds-train --tensor-model-parallel-size"),
    "activation_checkpointing.partition_activations": (IMPL, "with checkpointing and tensor parallelism each rank keeps 1/tp of every checkpointed layer input (no effect at tensor-parallel size 1)"),
    "activation_checkpointing.cpu_checkpointing": (INH, "on a CPU build checkpointed activations are already in host memory"),
    "activation_checkpointing.contiguous_memory_optimization": (INH, "with partition_activations only: dstk keeps the partitioned inputs in one buffer already"),
    "activation_checkpointing.synchronize_checkpoint_boundary": (INH, "CPU compute is synchronous at every checkpoint boundary"),
    "wandb.enabled": (UNSUP, "Weights & Biases needs a network service; use csv_monitor or tensorboard"),
    "comet.enabled": (UNSUP, "Comet needs a network service; use csv_monitor or tensorboard"),
    "checkpoint.load_universal": (INH, "every dstk checkpoint is universal: it loads at any world size and stage"),
    "checkpoint.use_node_local_storage": (UNSUP, "dstk writes one shared checkpoint with parallel HDF5"),
    "checkpoint.parallel_write.pipeline_stage": (INH, "every rank, of every pipeline stage, writes its part of one shared checkpoint in parallel already"),
    "pipeline.stages": (IMPL, "pipeline stages: \"auto\" (the --pipeline-model-parallel-size flag, else 1) or a number"),
    "pipeline.partition": (IMPL, "how layers are cut into stages: parameters (DeepSpeed's default; best is the same), uniform, or type:REGEX"),
    "pipeline.seed_layers": (INH, "dstk seeds every tensor by its name whatever the layout, so layers are always seeded alike"),
    "pipeline.activation_checkpoint_interval": (IMPL, "0: as activation_checkpointing says; 1: recompute every layer in backward (larger intervals are not implemented)"),
    "pipeline.pipe_partitioned": (IMPL, "with tensor parallelism each rank sends 1/tp of an activation to the next stage, which allgathers it"),
    "pipeline.grad_partitioned": (IMPL, "with tensor parallelism each rank sends 1/tp of a gradient to the previous stage, which allgathers it"),
    "pipeline.use_reentrant": (INH, "dstk's recomputation is not autograd's: there is no re-entrant mode to choose"),
    "zero_allow_untested_optimizer": (INH, "every dstk optimizer is tested with every ZeRO stage"),
    "zero_force_ds_cpu_optimizer": (INH, "dstk always uses its own CPU optimizer kernels"),
    "graph_harvesting": (UNSUP, "CUDA graph harvesting is not implemented in dstk"),
    "vocabulary_size": (UNSUP, "the vocabulary comes from the model file (vocab_size)"),
    "dataloader_drop_last": (INH, "dstk always draws whole global batches of fixed windows"),
    "use_data_before_expert_parallelism": (UNSUP, "mixture of experts is not implemented in dstk"),
    "timers.throughput.enabled": (INH, "dstk always measures throughput for its log line"),
    "timers.throughput.synchronized": (INH, "CPU timings are always synchronous"),
}
for k in ("wandb.group", "wandb.team", "wandb.project"):
    KEY[k] = (UNSUP, "Weights & Biases needs a network service; use csv_monitor or tensorboard")
for k in ("comet.samples_log_interval", "comet.project", "comet.workspace", "comet.api_key",
          "comet.experiment_name", "comet.experiment_key", "comet.online", "comet.mode"):
    KEY[k] = (UNSUP, "Comet needs a network service; use csv_monitor or tensorboard")
KEY["optimizer.params.cuda_aware"] = (INH, "OneBitAdam, ZeroOneAdam, OneBitLamb: dstk's compressed allreduce "
                                      "runs on host buffers, so MPI needs no CUDA awareness")

# Ranges dstk enforces beyond the spec's min: path -> (min, max); None = open.
RANGE = {
    "train_batch_size": (1, 2147483647), "train_micro_batch_size_per_gpu": (1, 2147483647),
    "gradient_accumulation_steps": (1, 2147483647),
    "optimizer.params.lr": (0, None), "optimizer.params.eps": (0, None),
    "optimizer.params.weight_decay": (0, None), "optimizer.params.max_coeff": (0, None),
    "optimizer.params.min_coeff": (0, None),
    "optimizer.params.local_step_clipper": (1, None), "optimizer.params.coeff_beta": (0, 1),
    "optimizer.params.factor_max": (0, None), "optimizer.params.factor_min": (0, None),
    "optimizer.params.factor_threshold": (0, None),
    "scheduler.params.warmup_min_lr": (0, None), "scheduler.params.warmup_max_lr": (0, None),
    "scheduler.params.warmup_num_steps": (0, None), "scheduler.params.total_num_steps": (1, None),
    "scheduler.params.warmup_min_ratio": (0, 1), "scheduler.params.cos_min_ratio": (0, 1),
    "scheduler.params.last_batch_iteration": (-1, None),
    "scheduler.params.lr_range_test_min_lr": (0, None), "scheduler.params.lr_range_test_step_size": (1, None),
    "scheduler.params.lr_range_test_step_rate": (0, None),
    "scheduler.params.cycle_min_lr": (0, None), "scheduler.params.cycle_max_lr": (0, None),
    "scheduler.params.decay_lr_rate": (0, None), "scheduler.params.cycle_first_step_size": (1, None),
    "scheduler.params.cycle_second_step_size": (1, None), "scheduler.params.cycle_first_stair_count": (0, None),
    "scheduler.params.cycle_second_stair_count": (0, None), "scheduler.params.decay_step_size": (0, None),
    "scheduler.params.cycle_min_mom": (0, 1), "scheduler.params.cycle_max_mom": (0, 1),
    "scheduler.params.decay_mom_rate": (0, None),
    "gradient_predivide_factor": (1e-30, None),
    "fp16.loss_scale": (0, None), "fp16.initial_scale_power": (0, 126), "fp16.loss_scale_window": (1, None),
    "fp16.hysteresis": (1, None), "fp16.min_loss_scale": (0, None),
    "gradient_clipping": (0, None), "allgather_size": (0, None),
    "zero_optimization.offload_optimizer.ratio": (0, 1),
    "aio.block_size": (1, None), "aio.queue_depth": (1, None), "aio.intra_op_parallelism": (1, None),
    "steps_per_print": (1, None),
    "autotuning.start_profile_step": (1, None), "autotuning.end_profile_step": (1, None),
    "autotuning.max_train_batch_size": (1, None), "autotuning.min_train_batch_size": (1, None),
    "autotuning.max_train_micro_batch_size_per_gpu": (1, None),
    "autotuning.min_train_micro_batch_size_per_gpu": (1, None),
    "autotuning.num_tuning_micro_batch_sizes": (1, None), "autotuning.tuner_early_stopping": (1, None),
    "autotuning.tuner_num_trials": (1, None),
    "flops_profiler.recompute_fwd_factor": (0, None),
    "flops_profiler.module_depth": (-1, None), "flops_profiler.top_modules": (1, None),
    "activation_checkpointing.number_checkpoints": (1, None),
}

# Defaults dstk uses instead of the spec's (DESIGN.md), or for keys the
# spec leaves open.
DEFAULT = {"steps_per_print": 10, "zero_optimization.grad_hooks": None}

HELP = {
    "train_batch_size": "samples per optimizer step over all ranks (= micro x accumulation x world size)",
    "train_micro_batch_size_per_gpu": "samples per rank per forward/backward pass",
    "gradient_accumulation_steps": "micro-batches accumulated before each optimizer step",
    "optimizer.type": "Adam, AdamW, Lamb, SGD, OneBitAdam, ZeroOneAdam or OneBitLamb (any case)",
    "optimizer.params.lr": "learning rate (the scheduler overrides it when one is configured)",
    "optimizer.params.betas": "[beta1, beta2], each in [0, 1)",
    "optimizer.params.eps": "term added to the denominator",
    "optimizer.params.weight_decay": "weight decay (decoupled for AdamW and Lamb, L2 for Adam with adam_w_mode false and SGD)",
    "optimizer.params.bias_correction": "Adam/Lamb bias correction",
    "optimizer.params.adam_w_mode": "Adam: true gives the decoupled AdamW update, false L2 regularisation",
    "optimizer.params.eps_inside_sqrt": "Lamb: add eps inside the square root (the 1-bit family takes it and, as DeepSpeed, ignores it)",
    "optimizer.params.max_coeff": "Lamb, OneBitLamb: upper clamp of the trust ratio",
    "optimizer.params.min_coeff": "Lamb, OneBitLamb: lower clamp of the trust ratio",
    "optimizer.params.freeze_step": "OneBitAdam, OneBitLamb: steps of uncompressed warm-up before the variance freezes and momentum travels as 1-bit signs",
    "optimizer.params.comm_backend_name": "1-bit family: nccl, mpi or compressed all run dstk's compressed allreduce over the run's communicator (hccl: Ascend, refused)",
    "optimizer.params.var_freeze_step": "ZeroOneAdam: the last step at which the variance may change; local steps follow",
    "optimizer.params.var_update_scaler": "ZeroOneAdam: variance updates before the interval between them doubles",
    "optimizer.params.local_step_scaler": "ZeroOneAdam: steps before the local-step interval doubles",
    "optimizer.params.local_step_clipper": "ZeroOneAdam: the longest local-step interval",
    "optimizer.params.coeff_beta": "OneBitLamb: EMA factor of the warm-up trust ratios that become the frozen ratio",
    "optimizer.params.factor_max": "OneBitLamb: upper clamp of the factor applied to the frozen ratio",
    "optimizer.params.factor_min": "OneBitLamb: lower clamp of the factor applied to the frozen ratio",
    "optimizer.params.factor_threshold": "OneBitLamb: most the factor may change from one step to the next (relative)",
    "scheduler.type": "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle or LRRangeTest",
    "scheduler.params.total_num_steps": "WarmupDecayLR/WarmupCosineLR: total steps of the schedule (required)",
    "communication_data_type": "dtype of gradient reductions (fp32, fp16, bf16; default: the model dtype)",
    "prescale_gradients": "divide gradients by the world size before the reduction",
    "gradient_predivide_factor": "divide gradients by this before the reduction and by world/factor after",
    "fp16.enabled": "fp16 storage with fp32 master weights and loss scaling",
    "fp16.loss_scale": "0: dynamic loss scaling; > 0: this static scale",
    "fp16.initial_scale_power": "dynamic scaling starts at 2^this",
    "fp16.loss_scale_window": "steps without overflow before the scale doubles",
    "fp16.hysteresis": "overflows tolerated before the scale halves",
    "fp16.consecutive_hysteresis": "refill the hysteresis on every step without overflow",
    "fp16.min_loss_scale": "the dynamic scale never goes below this",
    "bf16.enabled": "bf16 storage with fp32 master weights, no loss scaling",
    "bfloat16.enabled": "old spelling of bf16.enabled",
    "gradient_clipping": "clip the global gradient norm to this (0: off)",
    "zero_optimization": "ZeRO settings (a bare true/false is the legacy form: stage 1/0)",
    "allgather_size": "legacy boolean zero_optimization form only: its allgather bucket",
    "zero_optimization.stage": "0 off, 1 optimizer states, 2 + gradients, 3 + parameters sharded",
    "zero_optimization.reduce_scatter": "stage 2: reduce-scatter gradients instead of allreduce",
    "zero_optimization.reduce_bucket_size": "elements per gradient reduction bucket",
    "zero_optimization.allgather_partitions": "stages 1-2: allgather updated parameters (else broadcast)",
    "zero_optimization.allgather_bucket_size": "elements per parameter allgather chunk (even)",
    "zero_optimization.overlap_comm": "overlap reductions with backward (default: true at stage 3 only)",
    "zero_optimization.sub_group_size": "elements per optimizer sub-group (stage 3; in dstk also stages 1-2 with offload_optimizer nvme)",
    "zero_optimization.cpu_offload": "deprecated: offload_optimizer.device \"cpu\"",
    "zero_optimization.cpu_offload_param": "deprecated: offload_param.device \"cpu\"",
    "zero_optimization.cpu_offload_use_pin_memory": "deprecated: offload_param/offload_optimizer pin_memory",
    "zero_optimization.stage3_prefetch_bucket_size": "stage 3: elements gathered ahead of use",
    "zero_optimization.stage3_param_persistence_threshold": "stage 3: tensors smaller than this stay whole on every rank",
    "zero_optimization.stage3_model_persistence_threshold": "stage 3: cap on the elements kept whole",
    "zero_optimization.stage3_max_live_parameters": "stage 3: most gathered elements at once",
    "zero_optimization.stage3_max_reuse_distance": "stage 3: keep a gathered tensor if reused within this many elements",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": "stage 3: gather full 16-bit weights when saving",
    "zero_optimization.stage3_gather_fp16_weights_on_model_save": "deprecated: stage3_gather_16bit_weights_on_model_save",
    "zero_optimization.round_robin_gradients": "stages 1-2: assign gradients to ranks round-robin",
    "zero_optimization.offload_param.device": "stage 3: keep parameter slices in none, cpu (ZeRO-Offload: a 16-bit device run's in pinned host memory) or nvme (ZeRO-Infinity: swap files under nvme_path)",
    "zero_optimization.offload_optimizer.device": "keep optimizer states in none, cpu or nvme (stages 1-3; cpu: on --device cuda in pinned host memory, the step on the host (ZeRO-Offload); nvme: master and states in swap files, streamed per sub-group)",
    "zero_optimization.offload_optimizer.ratio": "fraction of optimizer states offloaded (< 1 only at stage 3)",
    "steps_per_print": "print the log line every this many steps (dstk default 10, DeepSpeed's documented default)",
    "wall_clock_breakdown": "print forward/backward/step times",
    "checkpoint.tag_validation": "Warn, Ignore or Fail when ranks disagree on the checkpoint tag (any case)",
    "data_types.grad_accum_dtype": "dtype gradients accumulate in (default: fp32 for bf16 without ZeRO, else the model dtype)",
    "tensorboard.enabled": "write TensorBoard event files",
    "csv_monitor.enabled": "write CSV monitor files",
    "comms_logger.enabled": "log every collective with size, latency and bandwidth",
    "flops_profiler.enabled": "print the flops profile at profile_step",
    "autotuning.enabled": "read by ds-autotune",
}

HELP.update({
    "scheduler.params.warmup_min_lr": "WarmupLR/WarmupDecayLR: lr at the start of warmup",
    "scheduler.params.warmup_max_lr": "WarmupLR/WarmupDecayLR: lr at the end of warmup",
    "scheduler.params.warmup_num_steps": "warmup steps (at least 2 are used)",
    "scheduler.params.warmup_type": "warmup curve: log or linear",
    "scheduler.params.warmup_min_ratio": "WarmupCosineLR: lr ratio at the start of warmup",
    "scheduler.params.cos_min_ratio": "WarmupCosineLR: lr ratio at the end of the cosine decay",
    "scheduler.params.last_batch_iteration": "iteration the schedule starts after (-1: from the beginning)",
    "scheduler.params.lr_range_test_min_lr": "LRRangeTest: starting lr",
    "scheduler.params.lr_range_test_step_size": "LRRangeTest: steps per lr increase",
    "scheduler.params.lr_range_test_step_rate": "LRRangeTest: lr growth per step_size",
    "scheduler.params.lr_range_test_staircase": "LRRangeTest: grow in steps instead of continuously",
    "scheduler.params.cycle_min_lr": "OneCycle: lowest lr of the cycle (required)",
    "scheduler.params.cycle_max_lr": "OneCycle: highest lr of the cycle (required)",
    "scheduler.params.decay_lr_rate": "OneCycle: lr decay rate after the cycle",
    "scheduler.params.cycle_first_step_size": "OneCycle: steps of the rising half",
    "scheduler.params.cycle_second_step_size": "OneCycle: steps of the falling half (default: the first's)",
    "scheduler.params.cycle_first_stair_count": "OneCycle: stored but unused, as in DeepSpeed",
    "scheduler.params.cycle_second_stair_count": "OneCycle: stored but unused, as in DeepSpeed",
    "scheduler.params.decay_step_size": "OneCycle: steps per decay interval after the cycle (0: no decay)",
    "scheduler.params.cycle_momentum": "OneCycle: cycle beta1 inversely to the lr",
    "scheduler.params.cycle_min_mom": "OneCycle: lowest beta1",
    "scheduler.params.cycle_max_mom": "OneCycle: highest beta1",
    "scheduler.params.decay_mom_rate": "OneCycle: beta1 growth rate after the cycle",
    "zero_optimization.offload_param": "stage 3 parameter offload settings",
    "zero_optimization.offload_param.nvme_path": "directory for nvme offload (required with device nvme)",
    "zero_optimization.offload_param.buffer_count": "nvme: parameter swap buffers (a segment's slice each; at least 2)",
    "zero_optimization.offload_param.buffer_size": "nvme: elements per parameter swap buffer (at least the largest slice)",
    "zero_optimization.offload_param.max_in_cpu": "nvme: parameter elements kept in memory (the first segments'), the rest on NVMe",
    "zero_optimization.offload_optimizer": "optimizer state offload settings",
    "zero_optimization.offload_optimizer.nvme_path": "directory for nvme offload (required with device nvme)",
    "zero_optimization.offload_optimizer.buffer_count": "nvme: swap buffers of sub_group_size elements (4 for Adam: master, gradient and 2 states per sub-group in flight)",
    "zero_optimization.offload_optimizer.pipeline_read": "nvme: read the next sub-group while this one is updated",
    "zero_optimization.offload_optimizer.pipeline_write": "nvme: write the last sub-group back while this one is updated",
    "aio.block_size": "bytes per I/O request",
    "aio.queue_depth": "I/O requests in flight per thread",
    "aio.intra_op_parallelism": "threads splitting each request",
    "aio.single_submit": "submit requests one at a time instead of in batches",
    "aio.overlap_events": "refill the queue as requests complete",
    "autotuning.results_dir": "ds-autotune: directory of results and the optimal config",
    "autotuning.exps_dir": "ds-autotune: directory of experiment configs",
    "autotuning.overwrite": "ds-autotune: re-run finished experiments",
    "autotuning.metric": "ds-autotune: throughput, latency or flops",
    "autotuning.start_profile_step": "ds-autotune: first step measured in a trial",
    "autotuning.end_profile_step": "ds-autotune: last step of a trial",
    "autotuning.fast": "ds-autotune: tune only ZeRO stage and micro batch",
    "autotuning.max_train_batch_size": "ds-autotune: largest global batch to try",
    "autotuning.min_train_batch_size": "ds-autotune: smallest global batch to try",
    "autotuning.max_train_micro_batch_size_per_gpu": "ds-autotune: largest micro batch to try",
    "autotuning.min_train_micro_batch_size_per_gpu": "ds-autotune: smallest micro batch to try",
    "autotuning.num_tuning_micro_batch_sizes": "ds-autotune: micro batch sizes tried per stage",
    "autotuning.tuner_type": "ds-autotune: gridsearch, random or model_based",
    "autotuning.tuner_early_stopping": "ds-autotune: stop after this many trials without improvement",
    "autotuning.tuner_num_trials": "ds-autotune: most trials",
    "autotuning.arg_mappings": "ds-autotune: config key -> command-line flag of the launched program",
    "autotuning.metric_path": "ds-autotune: where a trial writes its metrics",
    "autotuning.model_info_path": "ds-autotune: where the model profile is written",
    "autotuning.model_info.profile": "ds-autotune: profile the model first",
    "autotuning.model_info.num_params": "ds-autotune: model parameters (else counted)",
    "autotuning.model_info.hidden_size": "ds-autotune: model width (else from the model file)",
    "autotuning.model_info.num_layers": "ds-autotune: model depth (else from the model file)",
    "flops_profiler.recompute_fwd_factor": "extra forward passes counted for activation recomputation",
    "flops_profiler.profile_step": "step at which the profile is taken",
    "flops_profiler.module_depth": "depths shown in the aggregated profile (-1: all)",
    "flops_profiler.top_modules": "modules shown per depth",
    "flops_profiler.detailed": "also print the module tree",
    "flops_profiler.output_file": "write the profile here (default: stdout)",
    "activation_checkpointing.number_checkpoints": "layers whose activations are recomputed in backward",
    "activation_checkpointing.profile": "time each checkpointed forward",
    "tensorboard.output_path": "directory of the event files (default: the current one)",
    "tensorboard.job_name": "subdirectory per job",
    "csv_monitor.output_path": "directory of the CSV files (default: the current one)",
    "csv_monitor.job_name": "subdirectory per job",
    "comms_logger.verbose": "print every collective as it happens",
    "comms_logger.prof_all": "log every kind of collective",
    "comms_logger.debug": "add the calling function to each log name",
    "comms_logger.prof_ops": "collectives to log when prof_all is false",
    "zero_optimization.prefetch_bucket_size": "other spelling of stage3_prefetch_bucket_size",
    "zero_optimization.param_persistence_threshold": "other spelling of stage3_param_persistence_threshold",
    "zero_optimization.model_persistence_threshold": "other spelling of stage3_model_persistence_threshold",
    "zero_optimization.max_live_parameters": "other spelling of stage3_max_live_parameters",
    "zero_optimization.max_reuse_distance": "other spelling of stage3_max_reuse_distance",
    "zero_optimization.gather_16bit_weights_on_model_save": "other spelling of stage3_gather_16bit_weights_on_model_save",
})

# Keys dstk adds: (path, type, default, allowed, min, max, status, help).
EXTRA = [
    ("optimizer.params.momentum", "float", 0.0, None, 0, None, IMPL, "SGD: momentum factor (torch.optim.SGD's name)"),
    ("optimizer.params.dampening", "float", 0.0, None, 0, 1, IMPL, "SGD: dampening of the momentum (torch.optim.SGD's name)"),
    ("optimizer.params.nesterov", "bool", False, None, None, None, IMPL, "SGD: Nesterov momentum (needs momentum > 0, dampening 0)"),
    ("autotuning.num_nodes", "int", None, None, 1, None, IMPL,
     "ds-autotune: nodes to use (default: the allocation's; in DeepSpeed's autotuning docs, not its key list)"),
    ("autotuning.num_gpus", "int", None, None, 1, None, IMPL,
     "ds-autotune: ranks per node (default: the allocation's; in DeepSpeed's autotuning docs, not its key list)"),
    ("dstk", "object", None, None, None, None, IMPL, "dstk's own settings, which DeepSpeed has no key for"),
    ("dstk.nonfinite_policy", "enum", "skip", ["skip", "abort"], None, None, IMPL,
     "on a non-finite gradient (bf16/fp32): skip the step and log it, or abort"),
    ("dstk.nonfinite_max_consecutive", "int", 10, None, 1, None, IMPL,
     "skip policy: abort after this many consecutive non-finite steps"),
    ("dstk.watchdog_timeout_s", "float", 1800.0, None, 0, None, IMPL,
     "exit with status 5 when a rank makes no progress this long (DeepSpeed's 30-minute "
     "process-group timeout; 0: off)"),
    ("dstk.signal_lead_s", "float", 0.0, None, 0, None, IMPL,
     "seconds the job has left when SIGUSR1/SIGTERM comes (the N of --signal=USR1@N; 0: unknown), "
     "when SLURM_JOB_END_TIME is unset: warn before a save that cannot fit"),
    ("dstk.watchdog_dir", "string", None, None, None, None, IMPL,
     "where the watchdog's per-rank heartbeat files go (a directory all ranks share; default $TMPDIR or /tmp)"),
    ("dstk.lr_decay_style", "enum", "none", ["none", "constant", "linear", "cosine", "exponential"], None, None, IMPL,
     "GPT-NeoX's learning-rate schedule (AnnealingLR) from optimizer.params.lr, instead of a DeepSpeed scheduler (none: off)"),
    ("dstk.lr_warmup_iters", "float", 0.0, None, 0, None, IMPL,
     "NeoX schedule: warmup iterations (NeoX's warmup fraction x lr_decay_iters; may be fractional)"),
    ("dstk.lr_decay_iters", "int", None, None, 1, None, IMPL,
     "NeoX schedule: iterations of warmup plus decay (default: --train-iters)"),
    ("dstk.min_lr", "float", 0.0, None, 0, None, IMPL, "NeoX schedule: the lr never decays below this"),
    ("dstk.bf16_matmul", "enum", "auto", ["auto", "onednn", "avx512_bf16", "fp32"], None, None, IMPL,
     "bf16 runs: matrix products on the fastest this CPU and build have, measured per shape class against fp32 "
     "sgemm (auto: oneDNN on AMX, dstk's AVX512_BF16 kernel, or sgemm), always oneDNN (onednn), always the kernel "
     "(avx512_bf16), or fp32 sgemm (fp32)"),
    ("dstk.device", "enum", "auto", ["auto", "cpu", "cuda"], None, None, IMPL,
     "where the model computes: auto (cuda when the build has CUDA, a GPU answers and the cuda backend is usable, "
     "else cpu), cpu, or cuda (GPU local rank % device count; refused while the cuda backend is not usable: "
     "not yet); --device overrides"),
]

TYPE = {"integer": "int", "boolean": "bool", "string": "string", "number": "float",
        "array": "list", "object": "object", "null": "any"}


def cstr(s):
    if s is None:
        return "NULL"
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cnum(x):
    if x is None:
        return "NAN"
    return repr(float(x))


def first_clause(note):
    if not note:
        return ""
    s = note.split(";")[0].strip()
    return s[:110]


# Deprecated or alternative spellings: accepted, moved to their replacement
# by lib/config before anything reads them; no default of their own.
ALIAS = {"bfloat16.enabled", "bfloat16.immediate_grad_update", "allgather_size",
         "zero_optimization.cpu_offload", "zero_optimization.cpu_offload_param",
         "zero_optimization.cpu_offload_use_pin_memory",
         "zero_optimization.stage3_gather_fp16_weights_on_model_save"} | {
    "zero_optimization." + k for k in (
        "prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
        "max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save",
        "module_granularity_threshold", "use_all_reduce_for_fetch_params")}


# Values DeepSpeed accepts for a key that dstk does not implement yet:
# path -> (values, why and what to do).  The config loads (so ds-train
# --check still estimates it); ds-train refuses it with this reason
# (ds_config_unimplemented in lib/config).
UNIMPL = {
    "optimizer.params.comm_backend_name": (["hccl"], "HCCL is Huawei Ascend's collective library; use nccl, mpi or "
                                           "compressed, which all run dstk's compressed allreduce over MPI"),
}

# C type of a field per key type (values.h).
CTYPE = {"bool": "int", "int": "int64_t", "float": "double", "string": "const char *", "enum": "const char *",
         "list": "const struct json_t *", "object": "const struct json_t *", "any": "const struct json_t *"}

C_WORDS = {"auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
           "extern", "float", "for", "goto", "if", "int", "long", "register", "return", "short", "signed",
           "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while",
           "src"}


def fields(rows):
    """The rows that get a field: implemented values, not aliases, patterns or objects of keys."""
    nodes = set()
    for r in rows:
        parts = r[0].split(".")
        for i in range(1, len(parts)):
            nodes.add(".".join(parts[:i]))
    out = []
    for r in rows:
        path, typ, status = r[0], r[1], r[6]
        if status != IMPL or path in ALIAS or "<" in path:
            continue
        if path in nodes:
            assert typ == "object", path  # a value cannot also hold keys
            continue
        for comp in path.split("."):
            assert comp.isidentifier() and comp not in C_WORDS, path
        out.append(r)
    return out


def emit(path, typ, default, allowed, lo, hi, status, hlp, field):
    flags = []
    if path in ALIAS:
        flags.append("DS_KEY_ALIAS")
    if lo is not None:
        flags.append("DS_KEY_MIN")
    if hi is not None:
        flags.append("DS_KEY_MAX")
    if path in ("optimizer.type", "checkpoint.tag_validation", "communication_data_type"):
        flags.append("DS_KEY_NOCASE")
    dflt = "NULL" if default is None else cstr(json.dumps(default))
    alw = "NULL" if not allowed else cstr("|".join(str(a) for a in allowed))
    extra = ", DS_KEY_FIELD(%s)" % path if field else ", DS_KEY_NOFIELD"
    if path in UNIMPL:
        vals, why = UNIMPL[path]
        assert allowed and set(vals) <= set(allowed), path
        extra += ", .unimpl = %s, .unimpl_why = %s" % (cstr("|".join(vals)), cstr(why))
    print("\t{ %s, DS_KT_%s, %s, %s, %s, %s, %s, %s, %s%s }," % (
        cstr(path), typ.upper(), dflt, alw, cnum(lo), cnum(hi), status,
        " | ".join(flags) or "0", cstr(hlp), extra))


def rows_of(keys):
    """(path, type, default, allowed, min, max, status, help) of every key, in table order."""
    rows = []
    seen = set()
    for e in keys:
        p = e["path"]
        seen.add(p)
        typ = TYPE[e["type"]]
        allowed = e["allowed"]
        if typ == "string" and allowed:
            typ = "enum"
        if p == "optimizer.type":
            allowed = allowed + ["SGD"]
        if p == "zero_optimization.stage" or p == "elasticity.version":
            allowed = None  # ranges / numbers, checked as such
        if p == "pipeline.stages":
            typ = "any"  # "auto" or a number of stages (rules.c checks which)
        default = DEFAULT.get(p, e["default"])
        if p == "zero_optimization.stage":
            lo, hi = 0, 3
        else:
            lo, hi = RANGE.get(p, (e["min"], None))
        status, hlp = KEY.get(p, (None, None))
        if status is None:
            sec = e["section"]
            if sec in UNSUP_SECTION:
                status, hlp = UNSUP, UNSUP_SECTION[sec]
            else:
                status = IMPL
        if hlp is None or status == IMPL:
            hlp = HELP.get(p) or hlp or first_clause(e["note"]) or p
        rows.append((p, typ, default, allowed, lo, hi, status, hlp))
    assert not (ALIAS - seen), ALIAS - seen
    for r in EXTRA:
        assert r[0] not in seen
        rows.append(r)
    return rows


def values_h(rows):
    tree = {}
    for r in fields(rows):
        parts = r[0].split(".")
        node = tree
        for comp in parts[:-1]:
            node = node.setdefault(comp, {})
            assert isinstance(node, dict), r[0]
        node[parts[-1]] = r

    def out(node, depth, src):
        ind = "\t" * depth
        for name, v in node.items():
            if isinstance(v, dict):
                print(ind + "struct {")
                out(v, depth + 1, src)
                print(ind + "} %s;" % name)
            elif src:
                print(ind + "unsigned char %s;" % name)
            else:
                ct = CTYPE[v[1]]
                note = v[7] if v[2] is None or "default" in v[7] else "%s (default %s)" % (v[7], json.dumps(v[2]))
                assert "*/" not in note
                print("%s%s%s%s;  /* %s */" % (ind, ct, "" if ct.endswith("*") else " ", name, note))

    print("""/* values.h - every DeepSpeed and dstk key that dstk acts on, as one typed
 * struct (GENERATED by contrib/config/gen_keys.py --values: edit the script,
 * not this file).
 *
 * A field's name is its key's dotted path; its type follows the key's:
 * bool -> int, int -> int64_t, float -> double, string and enum -> const
 * char * (enums in the spelling the table declares), list and object ->
 * the jansson value.  lib/config fills it once per load from the key table
 * (keys_ds.c: each entry here carries its offsetof): the file's value, else
 * the table's default, else the value DeepSpeed infers; a key given as
 * "auto" (ds-autotune only) holds its default.  A key with none of these
 * stays 0/NULL.  src holds each field's enum ds_config_source (file,
 * default, inferred, auto; DS_CONFIG_GIVEN in config.h).  Pointers are
 * borrowed from the config.
 */
#ifndef DS_CONFIG_VALUES_H
#define DS_CONFIG_VALUES_H

#include <stdint.h>

struct json_t;

/* The source of each field of struct ds_config_values (enum ds_config_source). */
struct ds_config_sources {""")
    out(tree, 1, True)
    print("};\n")
    print("struct ds_config_values {")
    out(tree, 1, False)
    print("\tstruct ds_config_sources src;")
    print("};\n\n#endif")


def main():
    if sys.argv[1] == "--paths":
        keys = json.load(open(sys.argv[2]))
        print("# the 403 key paths of spec/deepspeed-config-keys.json (contrib/config/gen_keys.py --paths)")
        for e in keys:
            print(e["path"])
        return
    if sys.argv[1] == "--values":
        values_h(rows_of(json.load(open(sys.argv[2]))))
        return
    rows = rows_of(json.load(open(sys.argv[1])))
    with_field = {r[0] for r in fields(rows)}
    print("/* keys_ds.c - the DeepSpeed key table (GENERATED by contrib/config/gen_keys.py")
    print(" * from spec/deepspeed-config-keys.json: edit the script, not this file).")
    print(" * One entry per key of DeepSpeed's configuration plus dstk's own; see keys.h.")
    print(" * DS_KEY_FIELD(path) is the key's field in struct ds_config_values (values.h).")
    print(" */")
    print("#include <math.h>\n#include <stddef.h>\n\n#include \"config/keys.h\"\n")
    print("const struct ds_config_key ds_config_keys[] = {")
    for r in rows:
        emit(*r, r[0] in with_field)
    print("};\n")
    print("const int ds_config_nkeys = (int)(sizeof(ds_config_keys) / sizeof(ds_config_keys[0]));")


main()
