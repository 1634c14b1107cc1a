#!/usr/bin/env bats
# Real DeepSpeed configs (DeepSpeed's tests, DeepSpeedExamples,
# Megatron-DeepSpeed, transformers, accelerate), kept unchanged under
# tests/data/configs-real/ with their source in SOURCES: each either loads
# (ds-train --check exits 0; "auto" values resolved) or fails with the one
# error that names a feature dstk lacks or a real mistake in the file, as
# DeepSpeed's own code would read it.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

R="$TDATA/configs-real"

# verdict FILE [ERROR-TEXT...]: no text -> loads; else exit 2 and the
# last stderr line, or one of the lines before it, holds each text
verdict() {
	local f=$1
	shift
	run --separate-stderr ds-train --check --deepspeed_config "$R/$f" --model "$SHARE/models/gpt-test.json" \
		--mem-per-rank 64M --train-iters 10000
	if [ $# -eq 0 ]; then
		[ "$status" -eq 0 ] || fail "$f: expected to load, exit $status: $stderr"
		[[ "$output" == *"# batch: train_batch_size "* ]] || fail "$f: no batch line"
		return 0
	fi
	[ "$status" -eq 2 ] || fail "$f: expected exit 2, got $status: $stderr"
	for t in "$@"; do
		[[ "$stderr" == *"$t"* ]] || fail "$f: stderr lacks '$t': $stderr"
	done
}

@test "every file in configs-real has a SOURCES line with repository, path and a 40-hex commit" {
	n=0
	for f in "$R"/*.json; do
		b=${f##*/}
		line=$(awk -F'\t' -v b="$b" '$1 == b' "$R/SOURCES")
		[ -n "$line" ] || fail "$b: not in SOURCES"
		awk -F'\t' 'NF != 4 || $2 !~ /^[A-Za-z0-9-]+\/[A-Za-z0-9._-]+$/ || length($4) != 40 || $4 ~ /[^0-9a-f]/ { exit 1 }' <<<"$line" ||
			fail "$b: bad SOURCES line: $line"
		n=$((n + 1))
	done
	[ "$n" -ge 25 ] || fail "only $n real configs"
}

@test "Hugging Face (transformers, accelerate) configs load, every \"auto\" resolved" {
	for f in transformers__tests_deepspeed_ds_config_zero2.json transformers__tests_deepspeed_ds_config_zero3.json \
		transformers__tests_deepspeed_ds_config_zero3_bf16.json accelerate__tests_deepspeed_ds_config_zero2.json \
		accelerate__tests_deepspeed_ds_config_zero3.json \
		accelerate__examples_deepspeed_config_templates_zero_stage1_config.json \
		accelerate__examples_deepspeed_config_templates_zero_stage2_offload_config.json \
		accelerate__examples_deepspeed_config_templates_zero_stage3_offload_config.json; do
		verdict "$f"
		[[ "$output" != *'"auto"  (file)'* ]] || fail "$f: an unresolved auto"
		assert_line --partial "# auto: train_micro_batch_size_per_gpu = "
	done
	# the bf16 file spells the section "bfloat16": DeepSpeed's old name, read as bf16 with a warning
	verdict transformers__tests_deepspeed_ds_config_zero3_bf16.json
	[[ "$stderr" == *"key 'bfloat16' is deprecated; read as 'bf16'"* ]] || fail "$stderr"
	assert_line --regexp '^zero_optimization\.stage3_gather_16bit_weights_on_model_save +true  \(file\)$'
}

@test "DeepSpeed's, DeepSpeedExamples' and Megatron-DeepSpeed's working configs load" {
	for f in DeepSpeed__tests_model_Megatron_GPT2_ds_config_func_bs8_zero2_offload.json \
		DeepSpeed__tests_model_Megatron_GPT2_ds_config_func_scheduler.json \
		DeepSpeed__tests_model_Megatron_GPT2_ds_config_perf_bs16.json \
		DeepSpeed__tests_model_Megatron_GPT2_ds_config_func_bs8_zero0_gas3.json \
		DeepSpeed__tests_accelerator_ds_config.json \
		DeepSpeedExamples__training_BingBertSquad_deepspeed_bsz24_config.json \
		DeepSpeedExamples__training_autotuning_hf_dsconfigs_ds_config_fp16_z2.json \
		DeepSpeedExamples__training_autotuning_hf_dsconfigs_ds_config_tune.json \
		Megatron-DeepSpeed__examples_deepspeed_finetune_hf_llama_ds_config.json \
		Megatron-DeepSpeed__examples_deepspeed_universal_checkpointing_ds_config.json \
		Megatron-DeepSpeed__examples_deepspeed_data_efficiency_gpt_eval_ds_config_eval_dummy.json; do
		verdict "$f"
	done
	# Megatron GPT-2's partition_activations: a no-op at model parallel size 1, said once
	verdict DeepSpeed__tests_model_Megatron_GPT2_ds_config_func_bs8_zero2_offload.json
	[[ "$stderr" == *"'activation_checkpointing.partition_activations' has no effect"* ]] || fail "$stderr"
	# perf_bs16 sets disable_allgather, which DeepSpeed parses and never reads
	verdict DeepSpeed__tests_model_Megatron_GPT2_ds_config_perf_bs16.json
	[[ "$stderr" == *"key 'disable_allgather' has no effect"* ]] || fail "$stderr"
}

@test "features dstk lacks are one error naming the feature" {
	verdict DeepSpeedExamples__training_bing_bert_1-bit_adam_nccl_deepspeed_bsz4k_onebitadam_config_seq128_nccl.json \
		"key 'optimizer.type': \"OneBitAdam\" is not supported by dstk"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$stderr"
	verdict DeepSpeedExamples__training_bing_bert_deepspeed_bsz64k_lamb_config_seq128.json \
		"not supported by dstk: sparse attention kernels are not implemented"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$stderr"
	verdict DeepSpeedExamples__training_bing_bert_deepspeed_bsz4k_progressive_layer_drop_config_seq128.json \
		"key 'progressive_layer_drop.enabled': not supported by dstk"
	verdict DeepSpeedExamples__compression_gpt2_config_ds_config_W8A8_Qgroup64_fp16.json \
		"key 'compression_training.weight_quantization.shared_parameters.enabled': not supported by dstk: compression training"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "one error for the section: $stderr"
	verdict DeepSpeedExamples__compression_cifar_config_ds_config_channel_prune.json \
		"key 'compression_training.channel_pruning.shared_parameters.enabled': not supported by dstk"
}

@test "real mistakes in the files are errors, all of a file's in one run" {
	# DeepSpeed's engine raises ValueError on max_grad_norm as an optimizer param
	verdict Megatron-DeepSpeed__examples_deepspeed_curriculum_learning_ds_zero_stage_1_config_baseline.json \
		"key 'optimizer.params.max_grad_norm': use the top-level gradient_clipping"
	# a template with CONFIG_* placeholders is not JSON: file:line:column
	verdict Megatron-DeepSpeed__examples_deepspeed_curriculum_learning_ds_zero_stage_1_config_curriculum_fixed_linear.json \
		"curriculum_fixed_linear.json:29:28: invalid token near 'CONFIG'"
	# DeepSpeed reads seq_parallel_comm_data_type; this spelling is silently unread there
	verdict accelerate__examples_alst_ulysses_sequence_parallelism_sp-alst.ds-config.json \
		"unknown key 'seq_parallel_communication_data_type' (did you mean 'seq_parallel_comm_data_type'?)"
	# loss-scale keys under bf16 (a copy of the fp16 section): five unknown keys, one run
	verdict DeepSpeed__tests_torch_compile_ds_config_z3.json "ds_config_z3.json: 5 errors (above)" \
		"unknown key 'bf16.loss_scale' (did you mean 'fp16.loss_scale'?)" \
		"unknown key 'bf16.initial_scale_power' (did you mean 'fp16.initial_scale_power'?)"
	[ "${#stderr_lines[@]}" -eq 6 ] || fail "$stderr"
	# MoQ's old quantize_training section and an eigenvalue key DeepSpeed does not have
	verdict DeepSpeed__tests_model_BingBertSquad_deepspeed_bsz24_fp16_eigenvalue_quantize_config.json \
		"unknown key 'quantize_training'" "unknown key 'eigenvalue.model_name'" "2 errors (above)"
	# an autotuning template is a fragment: no batch size
	verdict DeepSpeed__deepspeed_autotuning_config_templates_template_zero3.json \
		"Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"
	# --lenient loads the unknown-key files with warnings
	run -0 --separate-stderr ds-train --check --lenient --deepspeed_config \
		"$R/accelerate__examples_alst_ulysses_sequence_parallelism_sp-alst.ds-config.json" \
		--model "$SHARE/models/gpt-test.json" --mem-per-rank 64M
}

@test "every config in configs-real has a verdict in this file" {
	for f in "$R"/*.json; do
		grep -qF "${f##*/}" "$BATS_TEST_FILENAME" || fail "${f##*/}: no verdict"
	done
}
