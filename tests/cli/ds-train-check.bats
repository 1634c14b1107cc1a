#!/usr/bin/env bats
# ds-train --check: every bundled example config validates and prints the
# effective configuration; every bad-input class exits 2 with one line on
# stderr naming the file and the key; the usual flag conventions.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

MODEL_ARGS=()
setup() { MODEL_ARGS=(--model "$SHARE/models/gpt-test.json"); }

# check_bad FILE KEY [TEXT]: exit 2, exactly one stderr line naming FILE and KEY (and TEXT)
check_bad() {
	run -2 --separate-stderr ds-train --check --deepspeed_config "$TDATA/configs/$1" "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one stderr line, got: $stderr"
	[[ "$stderr" == *"$1"* ]] || fail "stderr does not name the file: $stderr"
	[[ "$stderr" == *"$2"* ]] || fail "stderr does not name '$2': $stderr"
	[[ -z "${3:-}" || "$stderr" == *"$3"* ]] || fail "stderr lacks '$3': $stderr"
	[ -z "$output" ] || fail "stdout not empty on error"
}

@test "ds-train --help exits 0 and lists --check and the run flags" {
	run -0 ds-train --help
	assert_output --partial "Usage: ds-train"
	for o in --check --deepspeed-config --model --world-size --lenient --train-iters --save --save-interval \
		--load --no-load-optim --seed --data --valid-data --split --eval-interval --eval-iters \
		--log-interval --exit-interval --peak-gflops --metrics-json; do
		assert_output --partial -- "$o"
	done
}

@test "ds-train --version names the features" {
	run -0 ds-train --version
	assert_line --index 0 --regexp '^ds-train \(dstk\) '
	assert_line --partial "features: "
}

@test "a bad flag exits 2 with a hint" {
	run -2 --separate-stderr ds-train --no-such-flag
	[[ "$stderr" == *"Try 'ds-train --help'"* ]]
	run -2 --separate-stderr ds-train --check --world-size 0
	[[ "$stderr" == *"--world-size"* ]]
	run -2 ds-train --check extra-argument
}

@test "every share/configs example passes --check with gpt-test.json" {
	n=0
	for f in "$SHARE"/configs/*.json; do
		run --separate-stderr ds-train --check --deepspeed_config "$f" "${MODEL_ARGS[@]}"
		[ "$status" -eq 0 ] || fail "$f: exit $status: $stderr"
		[[ "$output" == *"train_batch_size"* && "$output" == *"(file)"* ]] || fail "$f: no effective config"
		[[ "$output" == *"num_layers"*"2  (file)"* ]] || fail "$f: no model config"
		n=$((n + 1))
	done
	[ "$n" -ge 20 ]
}

@test "--check prints values with their sources; underscore and dash flags agree" {
	run -0 ds-train --check --deepspeed_config "$SHARE/configs/basic-fp16-zero2.json" "${MODEL_ARGS[@]}" --world-size 1
	assert_line --regexp '^train_batch_size +32  \(file\)$'
	assert_line --regexp '^zero_optimization\.stage +2  \(file\)$'
	assert_line --regexp '^zero_optimization\.overlap_comm +false  \(inferred\)$'
	assert_line --regexp '^steps_per_print +10  \(default\)$'
	assert_line --regexp '^padded_vocab_size +256  \(inferred\)$'
	a=$output
	run -0 ds-train --check --deepspeed-config "$SHARE/configs/basic-fp16-zero2.json" "${MODEL_ARGS[@]}" --world_size 1
	[ "$output" = "$a" ]
}

@test "--world-size resolves the triad (spec case 1: 32/4 at 2 ranks -> GA 4)" {
	printf '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}' > "$BATS_TEST_TMPDIR/t.json"
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/t.json" "${MODEL_ARGS[@]}" --world-size 2
	assert_line --regexp '^gradient_accumulation_steps +4  \(inferred\)$'
	assert_line "# batch: train_batch_size 32 = micro 4 x accumulation 4 x world size 2"
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/t.json" "${MODEL_ARGS[@]}" --world-size 3
	[[ "$stderr" == *"key 'train_batch_size'"*"32 != 4 * 2 * 3"* ]]
}

@test "--check --json is JSON with values and sources" {
	command -v python3 >/dev/null || skip "python3 not installed"
	run -0 ds-train --check --json --deepspeed_config "$SHARE/configs/zero3-offload.json" "${MODEL_ARGS[@]}"
	echo "$output" | python3 -c 'import json,sys; d=json.load(sys.stdin); k=d["deepspeed_config"]["keys"]; assert k["zero_optimization.stage"]=={"value":3,"source":"file"}, k["zero_optimization.stage"]; assert d["batch"]["train_batch_size"]==8; assert d["model"]["keys"]["hidden_size"]["value"]==64'
	# a file name that needs escaping still gives valid JSON
	cp "$SHARE/configs/default.json" "$BATS_TEST_TMPDIR/a\"b.json"
	run -0 ds-train --check --json --deepspeed_config "$BATS_TEST_TMPDIR/a\"b.json" "${MODEL_ARGS[@]}"
	echo "$output" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["deepspeed_config"]["file"].endswith("a\"b.json")'
}

@test "bad input: syntax errors report file:line:column" {
	check_bad seed-optimizer-truncated.json "seed-optimizer-truncated.json:7:"
	check_bad seed-structure.json "seed-structure.json:5:"
}

@test "bad input: duplicate key" {
	check_bad duplicate.json "train_batch_size" "duplicate"
}

@test "bad input: unknown key with a suggestion" {
	check_bad unknown-key.json "zero_optimization.reduce_bucket_sise" "did you mean 'zero_optimization.reduce_bucket_size'"
}

@test "--lenient turns an unknown key into a warning" {
	run -0 --separate-stderr ds-train --check --lenient --deepspeed_config "$TDATA/configs/unknown-key.json" "${MODEL_ARGS[@]}"
	[[ "$stderr" == *"reduce_bucket_sise"* ]]
}

@test "bad input: wrong type, 1.5 for an integer, out of range, bad enum" {
	check_bad wrong-type.json "train_micro_batch_size_per_gpu" "expected an integer"
	check_bad fractional-int.json "train_micro_batch_size_per_gpu" "1.5"
	check_bad out-of-range.json "zero_optimization.stage" "out of range"
	check_bad bad-enum.json "zero_optimization.offload_optimizer.device" '"gpu"'
	check_bad tag-validation.json "checkpoint.tag_validation" '"strict"'
}

@test "Hugging Face \"auto\": from the Megatron-style flags, else the documented default; one line each" {
	# the batch triad: micro and global from the flags, accumulation inferred 16 / (4 x 2)
	run -0 --separate-stderr ds-train --check --deepspeed_config "$TDATA/configs/seed-hf-auto.json" "${MODEL_ARGS[@]}" \
		--world-size 2 --micro-batch-size 4 --global-batch-size 16 --clip-grad 0.5
	assert_line --regexp '^train_batch_size +16  \(auto\)$'
	assert_line --regexp '^train_micro_batch_size_per_gpu +4  \(auto\)$'
	assert_line --regexp '^gradient_accumulation_steps +2  \(inferred\)$'
	assert_line --regexp '^gradient_clipping +0\.5  \(auto\)$'
	assert_line "# auto: gradient_clipping = 0.5 (--clip-grad)"
	assert_line "# auto: train_micro_batch_size_per_gpu = 4 (--micro-batch-size)"
	assert_line "# auto: train_batch_size = 16 (--global-batch-size)"
	assert_line "# batch: train_batch_size 16 = micro 4 x accumulation 2 x world size 2"
	# without flags: DeepSpeed's default (gradient_clipping 0), the triad infers the rest
	run -0 --separate-stderr ds-train --check --deepspeed_config "$TDATA/configs/seed-hf-auto.json" "${MODEL_ARGS[@]}" \
		--mem-per-rank 64M
	assert_line "# auto: gradient_clipping = 0.0 (the default)"
	cat >"$BATS_TEST_TMPDIR/hf.json" <<-'EOF'
	{"train_micro_batch_size_per_gpu": 2,
	 "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
	 "bf16": {"enabled": "auto"},
	 "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
	 "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
	               "warmup_num_steps": "auto", "total_num_steps": "auto"}},
	 "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
	                       "stage3_param_persistence_threshold": "auto"}}
	EOF
	run -0 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/hf.json" "${MODEL_ARGS[@]}" \
		--lr 3e-4 --adam-beta2 0.95 --weight-decay 0.1 --train-iters 100 --lr-warmup-iters 10 --bf16
	assert_line --regexp '^optimizer\.params\.lr +0\.0003  \(auto\)$'
	assert_line --regexp '^optimizer\.params\.betas +\[0\.9, 0\.95\]  \(auto\)$'
	assert_line --regexp '^optimizer\.params\.eps +1e-08  \(auto\)$'
	assert_line --regexp '^optimizer\.params\.weight_decay +0\.1  \(auto\)$'
	assert_line --regexp '^scheduler\.params\.warmup_min_lr +0\.0  \(auto\)$'
	assert_line --regexp '^scheduler\.params\.warmup_max_lr +0\.0003  \(auto\)$'
	assert_line --regexp '^scheduler\.params\.warmup_num_steps +10  \(auto\)$'
	assert_line --regexp '^scheduler\.params\.total_num_steps +100  \(auto\)$'
	assert_line --regexp '^bf16\.enabled +true  \(auto\)$'
	assert_line --regexp '^fp16\.enabled +false  \(auto\)$'
	# transformers' rule on gpt-test's hidden size 64: 64^2, floor(0.9 x 64^2), 10 x 64
	assert_line --regexp '^zero_optimization\.reduce_bucket_size +4096  \(auto\)$'
	assert_line --regexp '^zero_optimization\.stage3_prefetch_bucket_size +3686  \(auto\)$'
	assert_line --regexp '^zero_optimization\.stage3_param_persistence_threshold +640  \(auto\)$'
	assert_line "# ignored: fp16.initial_scale_power: fp16.enabled is false"
	[ -z "$stderr" ] || fail "resolution is not a warning: $stderr"
	# total_num_steps has no default: one line naming the flag
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/hf.json" "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$stderr"
	[[ "$stderr" == *"key 'scheduler.params.total_num_steps': \"auto\" has no default to resolve to; give a value or --train-iters"* ]] || fail "$stderr"
	run -2 --separate-stderr ds-train --check --fp16 --bf16
	run -2 --separate-stderr ds-train --check --lr -1
}

@test "micro batch \"auto\" is the largest whose memory plan fits the budget per rank" {
	printf '{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 1}}' >"$BATS_TEST_TMPDIR/a.json"
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/a.json" "${MODEL_ARGS[@]}" --world-size 2 --mem-per-rank 48M
	line=$(grep '^# auto: train_micro_batch_size_per_gpu = ' <<<"$output") || fail "no resolution line: $output"
	[[ "$line" == *"fits 48.0 MiB per rank, from --mem-per-rank)" ]] || fail "$line"
	m=$(awk '{ print $5 }' <<<"$line")
	[ "$m" -gt 1 ] || fail "micro batch $m"
	# the estimate itself says m fits in 48 MiB and m + 1 does not
	for k in "$m" $((m + 1)); do
		printf '{"train_micro_batch_size_per_gpu": %d, "zero_optimization": {"stage": 1}}' "$k" >"$BATS_TEST_TMPDIR/m$k.json"
		run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/m$k.json" "${MODEL_ARGS[@]}" --world-size 2
		eval "t$((k - m))=$(awk '$1 == "total" { print $2 }' <<<"$output")"
	done
	[ "$t0" -le $((48 << 20)) ] || fail "micro $m: $t0 bytes > 48 MiB"
	[ "$t1" -gt $((48 << 20)) ] || fail "micro $((m + 1)): $t1 bytes fits too"
	# with a fixed global batch only divisors of it per rank: 12 / 2 ranks -> 1, 2, 3 or 6
	printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": "auto"}' >"$BATS_TEST_TMPDIR/g.json"
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/g.json" "${MODEL_ARGS[@]}" --world-size 2 --mem-per-rank 48M
	assert_line "# batch: train_batch_size 12 = micro 6 x accumulation 1 x world size 2"
}

@test "a run logs each \"auto\" it resolved, and its checkpoint stores the resolved config" {
	cd "$BATS_TEST_TMPDIR"
	run -0 --separate-stderr ds-train --deepspeed_config "$TDATA/configs/seed-hf-auto.json" "${MODEL_ARGS[@]}" \
		--train-iters 1 --micro-batch-size 2 --clip-grad 1 --save ck --peak-gflops 1
	[[ "$stderr" == *"seed-hf-auto.json: auto: train_micro_batch_size_per_gpu = 2 (--micro-batch-size)"* ]] || fail "$stderr"
	[[ "$stderr" == *"seed-hf-auto.json: auto: gradient_clipping = 1.0 (--clip-grad)"* ]] || fail "$stderr"
	run -0 ds-ckpt-convert inspect --json ck
	jq -e '.config.train_micro_batch_size_per_gpu == 2 and .config.train_batch_size == 2 and .config.gradient_clipping == 1' <<<"$output"
}

@test "bad input: stage \"all\" is ds-autotune's" {
	check_bad stage-all.json "zero_optimization.stage" "ds-autotune"
}

@test "switched-off sections load with any documented key; --check lists them as ignored" {
	cat >"$BATS_TEST_TMPDIR/off.json" <<-'EOF'
	{"train_batch_size": 8,
	 "curriculum_learning": {"enabled": false, "curriculum_type": "seqlen", "min_difficulty": 8,
	                         "max_difficulty": 1024, "schedule_type": "fixed_linear"},
	 "compression_training": {"weight_quantization": {"shared_parameters": {"enabled": false, "quantizer_kernel": true}}},
	 "fp16": {"enabled": false, "loss_scale": 0, "initial_scale_power": 32},
	 "zero_optimization": {"stage": 1, "stage3_max_live_parameters": 1e9,
	                       "offload_param": {"device": "cpu"},
	                       "offload_optimizer": {"device": "none", "nvme_path": "/local_nvme"}}}
	EOF
	run -0 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/off.json" "${MODEL_ARGS[@]}"
	assert_line "# ignored: curriculum_learning.min_difficulty: curriculum_learning.enabled is false"
	assert_line "# ignored: curriculum_learning.schedule_type: curriculum_learning.enabled is false"
	assert_line "# ignored: compression_training.weight_quantization.shared_parameters.quantizer_kernel: compression_training.weight_quantization.shared_parameters.enabled is false"
	assert_line "# ignored: fp16.initial_scale_power: fp16.enabled is false"
	assert_line "# ignored: zero_optimization.stage3_max_live_parameters: ZeRO stage 3 only (stage is 1)"
	assert_line "# ignored: zero_optimization.offload_param.device: ZeRO stage 3 only (stage is 1)"
	assert_line "# ignored: zero_optimization.offload_optimizer.nvme_path: offload_optimizer.device is \"none\""
	[ -z "$stderr" ] || fail "ignored keys are not warnings: $stderr"
	# switched on, the section dstk lacks is one error naming it
	sed 's/"enabled": false, "curriculum_type"/"enabled": true, "curriculum_type"/' "$BATS_TEST_TMPDIR/off.json" >"$BATS_TEST_TMPDIR/on.json"
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/on.json" "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$stderr"
	[[ "$stderr" == *"key 'curriculum_learning.enabled': not supported by dstk"* ]] || fail "$stderr"
}

@test "what DeepSpeed accepts loads with one warning each, and --check repeats them" {
	cat >"$BATS_TEST_TMPDIR/w.json" <<-'EOF'
	{"train_batch_size": 8, "communication_data_type": "bfp16",
	 "bfloat16": {"enabled": true},
	 "fp16": {"enabled": false},
	 "aio": {"thread_count": 2},
	 "flops_profiler": {"enabled": true, "profile_step": -1},
	 "activation_checkpointing": {"partition_activations": true},
	 "zero_optimization": {"stage": 2, "cpu_offload": true}}
	EOF
	run -0 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/w.json" "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 6 ] || fail "expected 6 warnings: $stderr"
	for w in "'bfloat16' is deprecated; read as 'bf16'" "'communication_data_type': \"bfp16\" is the spelling of DeepSpeed before 0.14.1" \
		"'aio.thread_count' has no effect" "'flops_profiler.profile_step' -1" \
		"'activation_checkpointing.partition_activations' has no effect" \
		"'zero_optimization.cpu_offload' is deprecated; read as zero_optimization.offload_optimizer.device \"cpu\""; do
		[[ "$stderr" == *"warning: $BATS_TEST_TMPDIR/w.json: key $w"* ]] || fail "no warning '$w': $stderr"
		assert_line --partial "# warning: key $w"
	done
	assert_line --regexp '^communication_data_type +"bf16"  \(file\)$'
	assert_line --regexp '^bf16\.enabled +true  \(file\)$'
	assert_line --regexp '^zero_optimization\.offload_optimizer\.device +"cpu"  \(file\)$'
}

@test "every error of a file in one run: 20 lines, then a count; --lenient warns instead" {
	{
		printf '{"train_batch_size": 8'
		for i in $(seq 1 23); do printf ', "no_such_key_%d": %d' "$i" "$i"; done
		printf ', "zero_optimization": {"comm_overlap": true}}\n'
	} >"$BATS_TEST_TMPDIR/many.json"
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/many.json" "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 21 ] || fail "expected 20 errors and a count, got ${#stderr_lines[@]}: $stderr"
	[[ "${stderr_lines[0]}" == "error: $BATS_TEST_TMPDIR/many.json: unknown key 'no_such_key_1'"* ]] || fail "${stderr_lines[0]}"
	[[ "${stderr_lines[20]}" == "ds-train: $BATS_TEST_TMPDIR/many.json: 24 errors (the first 20 above, 4 more not shown)" ]] ||
		fail "${stderr_lines[20]}"
	run -0 --separate-stderr ds-train --check --lenient --deepspeed_config "$BATS_TEST_TMPDIR/many.json" "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 24 ] || fail "expected 24 warnings: $stderr"
	[[ "$stderr" == *"ignoring unknown key 'zero_optimization.comm_overlap' (did you mean 'zero_optimization.overlap_comm'?)"* ]] ||
		fail "$stderr"
}

@test "bad input: exclusions, constraints and unsupported features" {
	check_bad fp16-bf16.json "bf16.enabled" "cannot be simultaneously enabled"
	check_bad partial-offload.json "zero_optimization.offload_optimizer.ratio" "Stage 3"
	check_bad max-grad-norm.json "optimizer.params.max_grad_norm" "gradient_clipping"
	check_bad unsupported-wandb.json "wandb.enabled" "not supported by dstk"
	# two errors in the file: both reported in one run, then the count
	run -2 --separate-stderr ds-train --check --deepspeed_config "$TDATA/configs/seed-autotuning-nulls.json" "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 3 ] || fail "expected two errors and a count: $stderr"
	[[ "${stderr_lines[0]}" == "error: "*"key 'autotuning.results_dir': null is not a value here"* ]] || fail "$stderr"
	[[ "${stderr_lines[1]}" == "error: "*"key 'autotuning.exps_dir': null is not a value here"* ]] || fail "$stderr"
	[[ "${stderr_lines[2]}" == "ds-train: "*"seed-autotuning-nulls.json: 2 errors (above)" ]] || fail "$stderr"
	check_bad seed-flops-trailing-comma.json "seed-flops-trailing-comma.json:9:"
}

# the 1-bit family (issue 22): the seeds' OneBitAdam loads; what DeepSpeed
# refuses is refused with DeepSpeed's reason, one line each
@test "the 1-bit optimizers: their params load; ZeRO, hccl, another type's param and static fp16 scaling for OneBitLamb do not" {
	run -0 --separate-stderr ds-train --check --deepspeed_config "$TDATA/configs/seed-onebit-adam.json" "${MODEL_ARGS[@]}"
	assert_line --regexp '^optimizer\.params\.freeze_step +400  \(file\)$'
	local d="$BATS_TEST_TMPDIR"
	echo '{"train_batch_size": 8, "optimizer": {"type": "ZeroOneAdam", "params": {"var_freeze_step": 10,
		"var_update_scaler": 4, "local_step_scaler": 100, "local_step_clipper": 8}}}' >"$d/zo.json"
	run -0 ds-train --check --deepspeed_config "$d/zo.json" "${MODEL_ARGS[@]}"
	assert_line --regexp '^optimizer\.params\.local_step_clipper +8  \(file\)$'
	echo '{"train_batch_size": 8, "zero_optimization": {"stage": 1}, "optimizer": {"type": "OneBitAdam"}}' >"$d/z1.json"
	run -2 --separate-stderr ds-train --check --deepspeed_config "$d/z1.json" "${MODEL_ARGS[@]}"
	[[ "$stderr" == *"z1.json: key 'zero_optimization.stage': OneBitAdam is not compatible with ZeRO"* ]] || fail "$stderr"
	echo '{"train_batch_size": 8, "optimizer": {"type": "ZeroOneAdam", "params": {"freeze_step": 10}}}' >"$d/fs.json"
	run -2 --separate-stderr ds-train --check --deepspeed_config "$d/fs.json" "${MODEL_ARGS[@]}"
	[[ "$stderr" == *"key 'optimizer.params.freeze_step': not a parameter of ZeroOneAdam"* ]] || fail "$stderr"
	echo '{"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": 128},
		"optimizer": {"type": "OneBitLamb"}}' >"$d/lamb.json"
	run -2 --separate-stderr ds-train --check --deepspeed_config "$d/lamb.json" "${MODEL_ARGS[@]}"
	[[ "$stderr" == *"OneBitLamb needs dynamic loss scaling"* ]] || fail "$stderr"
	# hccl loads for --check, which says the trainer would refuse it; a run refuses it
	echo '{"train_batch_size": 8, "optimizer": {"type": "OneBitLamb", "params": {"comm_backend_name": "hccl"}}}' >"$d/hccl.json"
	run -0 ds-train --check --deepspeed_config "$d/hccl.json" "${MODEL_ARGS[@]}"
	run -2 --separate-stderr ds-train --deepspeed_config "$d/hccl.json" "${MODEL_ARGS[@]}" --train-iters 1
	[[ "$stderr" == *"optimizer.params.comm_backend_name"*"HCCL is Huawei Ascend's"* ]] || fail "$stderr"
	# bias_correction false and eps_inside_sqrt are taken and ignored, as by DeepSpeed: a warning each
	echo '{"train_batch_size": 8, "optimizer": {"type": "OneBitAdam", "params": {"bias_correction": false,
		"eps_inside_sqrt": true}}}' >"$d/bc.json"
	run -0 --separate-stderr ds-train --check --deepspeed_config "$d/bc.json" "${MODEL_ARGS[@]}"
	[[ "$stderr" == *"'optimizer.params.bias_correction' has no effect: OneBitAdam never corrects bias"* ]] || fail "$stderr"
	[[ "$stderr" == *"'optimizer.params.eps_inside_sqrt' has no effect"* ]] || fail "$stderr"
}

@test "bad input: the seeds' incomplete snippets (no batch size) and an inconsistent triad" {
	check_bad seed-optimizer-adam.json "train_batch_size" "needs to be provided"
	check_bad seed-zero2-offload.json "train_batch_size" "needs to be provided"
	check_bad seed-large-zero3.json "train_batch_size" "needs to be provided"
	check_bad triad-mismatch.json "train_batch_size" "10 != 3 * 3 * 1"
}

@test "bad input: model files and missing files" {
	run -2 --separate-stderr ds-train --check --deepspeed_config "$SHARE/configs/default.json" --model "$TDATA/configs/model-unknown-key.json"
	[[ "$stderr" == *"model-unknown-key.json: unknown key 'hiden_size' (did you mean 'hidden_size'?)"* ]]
	run -2 --separate-stderr ds-train --check --deepspeed_config "$SHARE/configs/default.json" --model "$TDATA/configs/model-heads.json"
	[[ "$stderr" == *"model-heads.json: key 'hidden_size'"* ]]
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/none.json" "${MODEL_ARGS[@]}"
	[[ "$stderr" == *"none.json"* ]]
	run -2 --separate-stderr ds-train --check --deepspeed_config "$SHARE/configs/default.json" --model "$BATS_TEST_TMPDIR"
	[[ "$stderr" == *"is a directory"* ]]
}

@test "--check with no files uses the bundled default config and gpt-tiny" {
	run -0 ds-train --check
	assert_output --partial "default.json"
	assert_output --partial "gpt-tiny.json"
	assert_line --regexp '^hidden_size +384  \(file\)$'
}

@test "--list-keys prints the whole table with a status per key" {
	run -0 ds-train --list-keys
	assert_line --regexp $'^zero_optimization\\.stage\tinteger \\[0, 3\\]\t0\timplemented\t'
	assert_line --regexp $'^wandb\\.enabled\tboolean\tfalse\tunsupported\t.*network service'
	assert_line --regexp $'^zero_optimization\\.contiguous_gradients\tboolean\ttrue\tinherent\t'
	assert_line --regexp $'^dstk\\.nonfinite_policy\tskip\\|abort\t"skip"\timplemented\t'
	# the 403 DeepSpeed keys of the spec plus dstk's own, and a header
	[ "${#lines[@]}" -ge 404 ]
}

# mem_row CATEGORY TEXT: the bytes of the memory estimate's row for CATEGORY in TEXT
mem_row() { awk -v k="$1" '$1 == k { print $2 }' <<<"$2"; }

@test "--check prints the memory estimate per rank (hand-computed for gpt-test.json)" {
	# 118528 parameters (18432 embeddings + 2 x 49984 per layer + 128
	# final norm), no padding at 4 ranks; AdamW at stage 1: parameters and
	# gradients whole (4 B each), the two Adam states split over 4 ranks
	printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}}' \
		>"$BATS_TEST_TMPDIR/z1.json"
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/z1.json" "${MODEL_ARGS[@]}" --world-size 4
	assert_line "# memory per rank: ZeRO stage 1, world size 4, adamw, fp32"
	assert_line --partial "# 118528 parameters, 118528 after padding"
	[ "$(mem_row parameters "$output")" -eq $((118528 * 4)) ]
	[ "$(mem_row gradients "$output")" -eq $((118528 * 4)) ]
	[ "$(mem_row optimizer_states "$output")" -eq $((118528 * 8 / 4)) ]
	for k in communication activations other; do [ "$(mem_row $k "$output")" -gt 0 ] || fail "no $k row"; done
	sum=$(awk '$1 ~ /^(parameters|gradients|optimizer_states|communication|activations|other)$/ { s += $2 } END { print s }' <<<"$output")
	[ "$(mem_row total "$output")" -eq "$sum" ]
	# stage 3 at 2 ranks (every segment partitioned): parameters halve too
	printf '{"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}' \
		>"$BATS_TEST_TMPDIR/z3.json"
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/z3.json" "${MODEL_ARGS[@]}" --world-size 2
	assert_line "# memory per rank: ZeRO stage 3, world size 2, adamw, fp32"
	[ "$(mem_row parameters "$output")" -eq $((118528 * 4 / 2)) ]
	[ "$(mem_row gradients "$output")" -eq $((118528 * 4 / 2)) ]
	[ "$(mem_row optimizer_states "$output")" -eq $((118528 * 8 / 2)) ]
}

@test "--check with tensor and pipeline parallelism: the layout, each stage's layers, memory per rank (hand-computed)" {
	printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}' \
		>"$BATS_TEST_TMPDIR/b.json"
	# TP 2 (2 ranks by default): each rank holds half of wte (128 x 64), wpe
	# whole (32 x 64), per layer its halves of c_attn (96 x 64 + 96), c_fc
	# (128 x 64 + 128) and the row-parallel weights (64 x 32, 64 x 128), the
	# norms and row-parallel biases whole (4 x 64 + 2 x 64), the final norm
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/b.json" "${MODEL_ARGS[@]}" --tensor-model-parallel-size 2
	assert_line "# batch: train_batch_size 8 = micro 2 x accumulation 4 x data-parallel size 1 (world 2 = tensor 2 x pipeline 1 x data 1)"
	assert_line --partial "# memory per rank: ZeRO stage 0, world size 2 = tensor 2 x pipeline 1 x data 1"
	local layer=$((96 * 64 + 96 + 64 * 32 + 64 + 128 * 64 + 128 + 64 * 128 + 64 + 4 * 64))
	[ "$(mem_row parameters "$output")" -eq $(((128 * 64 + 32 * 64 + 2 * layer + 128) * 4)) ] || fail "$output"
	# ZeRO splits over the data-parallel ranks, and the notes say so: stage 1
	# at TP 2 x DP 1 splits nothing, at TP 2 x DP 2 halves the states
	printf '{"train_batch_size": 8, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1}}' \
		>"$BATS_TEST_TMPDIR/z1.json"
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/z1.json" "${MODEL_ARGS[@]}" --tensor-model-parallel-size 2
	assert_line --regexp '^optimizer_states .* 2 fp32 states per element, whole model$'
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/z1.json" "${MODEL_ARGS[@]}" --tensor-model-parallel-size 2 \
		--world-size 4
	assert_line --regexp '^optimizer_states .* 2 fp32 states per element, owned slices \(1/2\)$'
	# PP 2 at 4 ranks (2 data-parallel): DeepSpeed's parameter partition of
	# NeoX's layer list, stage 1 holding the tied embedding's copy too
	printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4}' \
		>"$BATS_TEST_TMPDIR/b1.json"
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/b1.json" "${MODEL_ARGS[@]}" --pipeline-model-parallel-size 2 \
		--world-size 4
	assert_line "# pipeline: 2 stages, partition method parameters; per rank of each stage:"
	assert_line --regexp '^# stage 0: layers 0-2 \(3\): EmbeddingPipe, _pre_transformer_block, ParallelTransformerLayerPipe; 68416 parameters, 2 buffers, [0-9]+ bytes'
	assert_line --regexp '^# stage 1: layers 3-6 \(4\): ParallelTransformerLayerPipe, _post_transformer_block, NormPipe, EmbeddingPipe; 68544 parameters, 2 buffers'
	assert_line "# stage 1 holds the most"
	[ "$(mem_row parameters "$output")" -eq $((68544 * 4)) ]
	# the DeepSpeed config's pipeline section sets the stages and the method
	printf '{"train_batch_size": 8, "gradient_accumulation_steps": 4, "pipeline": {"stages": 2, "partition": "type:transformer"}}' \
		>"$BATS_TEST_TMPDIR/p.json"
	run -0 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/p.json" "${MODEL_ARGS[@]}" --json
	jq -e '.memory.pipeline_parallel_size == 2 and .memory.world_size == 2 and (.memory.stages | length) == 2 and
		.memory.stages[0].num_layers == 3 and .memory.stages[1].layers[0] == "ParallelTransformerLayerPipe" and
		.batch.data_parallel_size == 1' <<<"$output" || fail "$output"
	# what does not fit is one line, exit 2
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/b.json" "${MODEL_ARGS[@]}" \
		--tensor-model-parallel-size 4 --world-size 6
	[[ "$stderr" == *"world size 6 is not a multiple of tensor-parallel size 4"* ]] || fail "$stderr"
	printf '{"train_batch_size": 8, "zero_optimization": {"stage": 3}}' >"$BATS_TEST_TMPDIR/z3p.json"
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/z3p.json" "${MODEL_ARGS[@]}" \
		--pipeline-model-parallel-size 2
	[[ "$stderr" == *"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"* ]] || fail "$stderr"
	# MoE layers are not split by tensor or pipeline parallelism here
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/b.json" \
		--model "$SHARE/models/gpt-test-moe-top2.json" --tensor-model-parallel-size 2
	[[ "$stderr" == *"MoE layers with tensor or pipeline parallelism (tp 2, pp 1) are not supported"* ]] ||
		fail "$stderr"
	printf '{"train_batch_size": 8, "pipeline": {"stages": 4}}' >"$BATS_TEST_TMPDIR/p4.json"
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/p4.json" "${MODEL_ARGS[@]}" \
		--pipeline-model-parallel-size 2
	[[ "$stderr" == *"key 'pipeline.stages': 4, but --pipeline-model-parallel-size is 2"* ]] || fail "$stderr"
	run -2 --separate-stderr ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/b.json" "${MODEL_ARGS[@]}" \
		--tensor-model-parallel-size 0
	[[ "$stderr" == *"--tensor-model-parallel-size '0'"* ]] || fail "$stderr"
}

@test "--check: the memory estimate in JSON; a model the trainer cannot run says why" {
	command -v python3 >/dev/null || skip "python3 not installed"
	run -0 ds-train --check --json --deepspeed_config "$SHARE/configs/zero2.json" "${MODEL_ARGS[@]}" --world-size 2
	echo "$output" | python3 -c 'import json,sys; m=json.load(sys.stdin)["memory"]; b=m["bytes_per_rank"]; assert m["zero_stage"]==2 and m["world_size"]==2; assert b["gradients"]==118528*4//2, b; assert m["total_bytes"]==sum(b.values()); assert m["model_state_bytes"]==b["parameters"]+b["gradients"]+b["optimizer_states"]'
	run -0 ds-train --check --deepspeed_config "$SHARE/configs/default.json" --model "$SHARE/models/bert-large.json"
	assert_line --partial "# memory per rank: not available: "
	assert_output --partial "only gpt models train"
	# a configuration the trainer refuses still checks, with the reason
	echo '{"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_param": {"device": "nvme", "nvme_path": "/tmp", "max_in_cpu": 0}}}' > "$BATS_TEST_TMPDIR/nvme.json"
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/nvme.json" --model "$SHARE/models/gpt-test.json"
	assert_line --regexp '^# memory per rank: not available: .*in an fp32 run the parameters are the optimizer.s master weights'
}

@test "--check: bf16 counts the 16-bit copy as parameters and the fp32 master with the optimizer states" {
	# as DeepSpeed and the ZeRO paper count them: 2 bytes of 16-bit
	# parameters, 12 of fp32 master + Adam states per parameter, and the
	# gradients: 4 bytes at stage 0, where bf16 accumulates them in fp32 by
	# default (data_types.grad_accum_dtype, as in DeepSpeed), 2 (bf16)
	# under ZeRO
	run -0 ds-train --check --deepspeed_config "$SHARE/configs/bf16.json" "${MODEL_ARGS[@]}"
	assert_line "# memory per rank: ZeRO stage 0, world size 1, adamw, bf16"
	[ "$(mem_row parameters "$output")" -eq $((118528 * 2)) ]
	[ "$(mem_row gradients "$output")" -eq $((118528 * 4)) ]
	assert_output --regexp $'\ngradients .* fp32, every segment whole'
	[ "$(mem_row optimizer_states "$output")" -eq $((118528 * 12)) ]
	assert_output --regexp $'\noptimizer_states .* \+ the fp32 master weights, whole model'
	# stages 1-2 at 4 ranks: the whole 16-bit copy, the master with the
	# states for the owned quarter only (stage 2 also the gradients)
	for st in 1 2; do
		jq --argjson s $st '.zero_optimization.stage = $s' "$SHARE/configs/bf16.json" > "$BATS_TEST_TMPDIR/b$st.json"
		run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/b$st.json" "${MODEL_ARGS[@]}" --world-size 4
		[ "$(mem_row parameters "$output")" -eq $((118528 * 2)) ]
		[ "$(mem_row optimizer_states "$output")" -eq $((118528 * 12 / 4)) ]
		[ "$(mem_row gradients "$output")" -eq $((st == 2 ? 118528 * 2 / 4 : 118528 * 2)) ]
		assert_output --regexp $'\ngradients .* bf16, '
		assert_output --regexp $'\noptimizer_states .* \+ the fp32 master weights, owned slices'
	done
}

@test "--check: offload to cpu is said to change nothing on a CPU build (the estimate is the same)" {
	run -0 ds-train --check --deepspeed_config "$SHARE/configs/zero2-offload.json" "${MODEL_ARGS[@]}" --world-size 2
	assert_output --partial "# offload of optimizer states to cpu: on this CPU build every row above is already host memory"
	with=$(echo "$output" | grep '^total ')
	jq 'del(.zero_optimization.offload_optimizer)' "$SHARE/configs/zero2-offload.json" > "$BATS_TEST_TMPDIR/plain.json"
	run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/plain.json" "${MODEL_ARGS[@]}" --world-size 2
	refute_output --partial "# offload"
	[ "$(echo "$output" | grep '^total ')" = "$with" ]
}

@test "configs from pipes (<(jq ...), /dev/stdin) are read once and mean what the files mean" {
	cd "$BATS_TEST_TMPDIR" || return
	printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3, "steps_per_print": 1,\n "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}\n' > cfg.json
	run -0 ds-train --check --deepspeed_config cfg.json "${MODEL_ARGS[@]}"
	want=$(printf '%s\n' "$output" | grep -E '^(train_batch_size|gradient_accumulation_steps|optimizer.params.lr) ')
	[ -n "$want" ] || fail "no effective-config rows: $output"
	# a pipe: before, the second read of the config found it empty
	run -0 --separate-stderr ds-train --check --deepspeed_config <(cat cfg.json) --model <(cat "$SHARE/models/gpt-test.json")
	assert_equal "$(printf '%s\n' "$output" | grep -E '^(train_batch_size|gradient_accumulation_steps|optimizer.params.lr) ')" "$want"
	# a training run from standard input gives the file's losses
	run -0 ds-train --deepspeed_config cfg.json "${MODEL_ARGS[@]}" --train-iters 2
	file=$(printf '%s\n' "$output" | grep '^step ' | cut -d'|' -f1-5)
	run -0 ds-train --deepspeed_config /dev/stdin "${MODEL_ARGS[@]}" --train-iters 2 < <(cat cfg.json)
	assert_equal "$(printf '%s\n' "$output" | grep '^step ' | cut -d'|' -f1-5)" "$file"
	# errors in a piped config still name it and the key
	run -2 --separate-stderr ds-train --check --deepspeed_config <(echo '{"no_such_key_xyz": 1}') "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one stderr line, got: $stderr"
	[[ "$stderr" == *"/dev/fd/"*"no_such_key_xyz"* ]] || fail "stderr does not name the pipe and the key: $stderr"
	# a path that is not there is still one line, exit 2
	run -2 --separate-stderr ds-train --check --deepspeed_config /dev/null/x "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one stderr line, got: $stderr"
	# a pipe that never ends is cut at 64 MiB: one line naming it, exit 2 (no hang, no huge buffer)
	run -2 --separate-stderr ds-train --check --deepspeed_config /dev/zero "${MODEL_ARGS[@]}"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one stderr line, got: $stderr"
	[[ "$stderr" == *"/dev/zero: over 64 MiB"* ]] || fail "stderr does not name the endless input: $stderr"
}
