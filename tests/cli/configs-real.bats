#!/usr/bin/env bats
# Real configs (DeepSpeed's tests, DeepSpeedExamples, Megatron-DeepSpeed,
# transformers, accelerate, BigScience's JSON; GPT-NeoX's YAML), kept
# unchanged under tests/data/configs-real/ with their source in SOURCES:
# each either loads (ds-train --check exits 0; "auto" values resolved) or
# fails with the errors that name a feature dstk lacks or a real mistake in
# the file, as DeepSpeed's or NeoX's own code would read it.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

R=$(cd "$TDATA/configs-real" && pwd)

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

# neox_verdict FILE... [-- ERROR-TEXT...]: ds-train --check --conf on the
# files of configs-real, in a directory holding what local_setup.yml names
# (data/gpt2-vocab.json: GPT-2's 50257 tokens) and 20B.yml's tokenizer.
# No text -> loads; else exit 2 and stderr holds each text.
neox_verdict() {
	ds-train --version | grep -q libyaml || skip "built without libyaml"
	local files=() f
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do files+=("$R/$1"); shift; done
	[ "${1:-}" = "--" ] && shift
	mkdir -p "$BATS_TEST_TMPDIR/run/data" "$BATS_TEST_TMPDIR/run/20B_checkpoints"
	cd "$BATS_TEST_TMPDIR/run" || return 1
	[ -s data/gpt2-vocab.json ] ||
		awk 'BEGIN { printf "{"; for (i = 0; i < 50257; i++) printf "%s\"t%d\": %d", i ? "," : "", i, i; print "}" }' >data/gpt2-vocab.json
	echo '{"model": {"vocab": {"a": 0, "b": 1}}}' >20B_checkpoints/20B_tokenizer.json
	run --separate-stderr ds-train --check --conf "${files[@]}" --mem-per-rank 64G
	if [ $# -eq 0 ]; then
		[ "$status" -eq 0 ] || fail "${files[*]}: expected to load, exit $status: $stderr"
		[[ "$output" == *"# batch: train_batch_size "* ]] || fail "${files[*]}: no batch line"
		return 0
	fi
	[ "$status" -eq 2 ] || fail "${files[*]}: expected exit 2, got $status: $stderr"
	for f in "$@"; do
		[[ "$stderr" == *"$f"* ]] || fail "stderr lacks '$f': $stderr"
	done
}

@test "every file in configs-real has a SOURCES line with repository, path and a 40-hex commit" {
	n=0
	for f in "$R"/*.json "$R"/*.yml; do
		b=${f##*/}
		line=$(awk -F'\t' -v b="$b" '$1 == b' "$R/SOURCES")
		[ -n "$line" ] || fail "$b: not in SOURCES"
		awk -F'\t' 'NF != 4 || $2 !~ /^[A-Za-z0-9-]+\/[A-Za-z0-9._-]+$/ || length($4) != 40 || $4 ~ /[^0-9a-f]/ { exit 1 }' <<<"$line" ||
			fail "$b: bad SOURCES line: $line"
		n=$((n + 1))
	done
	[ "$n" -ge 45 ] || fail "only $n real configs"
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
	# BERT's 1-bit Adam sets bias_correction false, which OneBitAdam takes and never applies
	verdict DeepSpeedExamples__training_bing_bert_1-bit_adam_nccl_deepspeed_bsz4k_onebitadam_config_seq128_nccl.json
	[[ "$stderr" == *"'optimizer.params.bias_correction' has no effect: OneBitAdam never corrects bias"* ]] || fail "$stderr"
	# perf_bs16 sets disable_allgather, which DeepSpeed parses and never reads
	verdict DeepSpeed__tests_model_Megatron_GPT2_ds_config_perf_bs16.json
	[[ "$stderr" == *"key 'disable_allgather' has no effect"* ]] || fail "$stderr"
}

@test "features dstk lacks are one error naming the feature" {
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

@test "BigScience's DeepSpeed configs load, old spellings read with a warning; curriculum learning is refused" {
	for f in bigscience__jz_configs_deepspeed_ds_zero0.json bigscience__jz_configs_deepspeed_ds_zero2.json \
		bigscience__jz_configs_deepspeed_ds_zero3.json bigscience-Megatron-DeepSpeed__tests_ds_config.json \
		bigscience-Megatron-DeepSpeed__tests_ds_config_bf16.json; do
		verdict "$f"
	done
	verdict bigscience__jz_configs_deepspeed_ds_zero2.json
	[[ "$stderr" == *"key 'zero_optimization.cpu_offload' is deprecated; read as zero_optimization.offload_optimizer.device \"cpu\""* ]] || fail "$stderr"
	assert_line --regexp '^fp16\.initial_scale_power +32  \(file\)$'
	verdict bigscience__jz_configs_deepspeed_ds_zero3.json
	[[ "$stderr" == *"'zero_optimization.stage3_gather_fp16_weights_on_model_save' is deprecated"* ]] || fail "$stderr"
	verdict bigscience-Megatron-DeepSpeed__tests_ds_config_cl.json \
		"key 'curriculum_learning.enabled': not supported by dstk: curriculum learning is not implemented"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$stderr"
}

@test "GPT-NeoX's configs with its local_setup.yml load: GPT-2's vocabulary padded as NeoX pads it, its AnnealingLR" {
	for f in gpt-neox__configs_125M.yml gpt-neox__configs_19M.yml gpt-neox__configs_350M.yml \
		gpt-neox__configs_1-3B.yml gpt-neox__configs_bf16_125M.yml gpt-neox__configs_49M.yml; do
		neox_verdict "$f" gpt-neox__configs_local_setup.yml
		# 50257 tokens up to a multiple of 128 x model_parallel_size 1: the 50304 of NeoX's logs
		assert_line --regexp '^vocab_size +50257  \(file\)$'
		assert_line --regexp '^padded_vocab_size +50304  \(inferred\)$'
		assert_line --partial "--data data/enwik8/enwik8_text_document"
		assert_line --partial "--save checkpoints --load checkpoints"
		assert_line "# neox: merge_file: no effect: the data is tokenized already; BPE merges do not enter training"
	done
	neox_verdict gpt-neox__configs_125M.yml gpt-neox__configs_local_setup.yml
	assert_line "# neox: lr schedule: applied: NeoX AnnealingLR, cosine decay over 320000 iterations, 3200 of them warmup (warmup 0.01 x 320000)"
	assert_line --regexp '^fp16\.enabled +true  \(file\)$'
	assert_line --regexp '^num_layers +12  \(file\)$'
	assert_line --regexp '^init_method +"small_init"  \(file\)$'
	# bias_gelu_fusion false: NeoX's unfused F.gelu, the erf form
	assert_line --regexp '^activation +"gelu_exact"  \(file\)$'
	assert_line "# neox: checkpoint_validation_with_forward_pass: accepted: off or at its default (not implemented; checkpoints carry checksums instead)"
	assert_line "# neox: tensorboard_dir: applied: DeepSpeed config keys tensorboard.enabled and tensorboard.output_path"
	neox_verdict gpt-neox__configs_bf16_125M.yml gpt-neox__configs_local_setup.yml
	assert_line --regexp '^bf16\.enabled +true  \(file\)$'
	# 49M: GPT-J's parallel residual and a quarter of the dimensions rotary
	neox_verdict gpt-neox__configs_49M.yml gpt-neox__configs_local_setup.yml
	assert_line --regexp '^gpt_j_residual +true  \(file\)$'
	assert_line --regexp '^rotary_pct +0\.25  \(file\)$'
	# 20B: tensor 2 x pipeline 4 (8 ranks by default), NeoX's type:transformer|mlp
	# partition of its 44 layers (the two blocks named *_transformer_block
	# match too, as in DeepSpeed), the vocabulary padded to 128 x 2
	neox_verdict gpt-neox__configs_20B.yml
	assert_line "# neox: model_parallel_size: applied: 2, as --tensor-model-parallel-size 2"
	assert_line "# neox: pipe_parallel_size: applied: 4, as --pipeline-model-parallel-size 4"
	assert_line --partial "x data-parallel size 1 (world 8 = tensor 2 x pipeline 4 x data 1)"
	assert_line --regexp '^# stage 0: layers 0-12 \(13\): EmbeddingPipe, _pre_transformer_block, ParallelTransformerLayerPipe'
	assert_line --regexp '^# stage 3: layers 36-48 \(13\): .*, _post_transformer_block, NormPipe, ParallelLinearPipe;'
	assert_line --regexp '^make_vocab_size_divisible_by +256  \(file\)$'
}

@test "GPT-NeoX's configs with features dstk lacks: the errors name them, all in one run" {
	neox_verdict gpt-neox__configs_125M-dmoe.yml gpt-neox__configs_local_setup.yml -- \
		"parameter 'moe_num_experts': without moe_type \"deepspeed\" NeoX's MoE is megablocks' dMoE, which is not implemented"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$stderr"
	# Pythia: "flash" attention is the dense attention; its extra checkpoints at listed steps are not
	neox_verdict gpt-neox__configs_pythia_160M.yml gpt-neox__configs_local_setup.yml -- \
		"parameter 'extra_save_iters': not supported by dstk: saving at listed iterations is not implemented"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$stderr"
	# LLaMA: bias-free linear layers are model keys (use_bias_in_attn_linear,
	# use_bias_in_mlp); bias-free norms are not implemented (false switches
	# them on, so it is not "off")
	neox_verdict gpt-neox__configs_llama_7B.yml gpt-neox__configs_llama_train_config.yml gpt-neox__configs_local_setup.yml -- \
		"parameter 'use_bias_in_norms': not supported by dstk: norms without bias are not implemented" \
		"train_config.yml: parameter 'finetune': not supported by dstk" \
		"train_config.yml: parameter 'override_lr_scheduler': not supported by dstk" "3 errors (above)"
	neox_verdict gpt-neox__configs_sparse.yml gpt-neox__configs_local_setup.yml -- \
		"parameter 'sparsity_config': not supported by dstk: sparse attention is not implemented" \
		"parameter 'attention_config': only \"global\" or \"flash\" (dense) attention is implemented"
}

@test "every config in configs-real has a verdict in this file" {
	for f in "$R"/*.json "$R"/*.yml; do
		grep -qF "${f##*/}" "$BATS_TEST_FILENAME" || fail "${f##*/}: no verdict"
	done
}
