#!/usr/bin/env bats
# ds-train --device cpu|cuda|auto and "dstk": {"device": ...}: the compute
# backend the model runs on (issue 18).  On this GPU-less machine cpu and
# auto train with the losses of no flag (auto stays cpu even where a device
# answers: the cuda backend has not run on a GPU yet); cuda is refused in
# one line with the exit code of its reason (3: built without CUDA or for
# what the backend does not cover; 1: no device answers) before anything is
# written, at one rank as at many (tests/mpi/train.bats runs 2).  Where a device answers the
# refusal tests skip: tests/gpu/train.bats runs --device cuda there.
# shellcheck disable=SC2154  # stderr: set by bats' run --separate-stderr
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	MODEL="$SHARE/models/gpt-test.json"
	cfg cfg.json ''
}

# cfg FILE EXTRA: the test config with EXTRA members (", ..." text) added
cfg() {
	cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
 "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "run"}$2}
JSON
}

train() { ds-train --deepspeed_config "${CFG:-cfg.json}" --model "$MODEL" --train-iters 4 "$@"; }
# step, loss and grad_norm of the stdout step lines
losses() { grep '^step ' | awk -F' [|] ' '{print $1, $3, $5}'; }

# the message --device cuda gets on this build (no GPU in CI), and its exit
# code
cuda_refusal() {
	if ds_has cuda; then
		echo "no CUDA device answers ("
	else
		echo "built without CUDA; reconfigure --with-cuda"
	fi
}
cuda_code() { if ds_has cuda; then echo 1; else echo 3; fi; }

# skip where --device cuda would train (a CUDA build on a GPU machine)
skip_if_device() {
	ds_has cuda || return 0
	local b
	b=$(ds-train --check --json --deepspeed_config cfg.json --model "$MODEL" --device cuda | jq -r .device.backend)
	[ "$b" != cuda ] || skip "a CUDA device answers here (tests/gpu/train.bats runs --device cuda)"
}

@test "--device cpu, --device auto and dstk.device \"cpu\" train with the losses of no flag" {
	run -0 --separate-stderr train
	ref=$(losses <<<"$output")
	[ "$(wc -l <<<"$ref")" -eq 4 ] || fail "expected 4 step lines: $ref"
	[[ "$stderr" == *'device auto (dstk.device): cpu ('*')'* ]] || fail "no device line: $stderr"
	run -0 --separate-stderr train --device cpu
	[ "$(losses <<<"$output")" = "$ref" ] || fail "--device cpu: $(losses <<<"$output") vs $ref"
	[[ "$stderr" == *'device cpu (--device)'* ]] || fail "$stderr"
	run -0 --separate-stderr train --device auto
	[ "$(losses <<<"$output")" = "$ref" ] || fail "--device auto: $(losses <<<"$output")"
	[[ "$stderr" == *'device auto (--device): cpu ('*')'* ]] || fail "$stderr"
	cfg cpu.json ', "dstk": {"device": "cpu"}'
	CFG=cpu.json run -0 --separate-stderr train
	[ "$(losses <<<"$output")" = "$ref" ] || fail "dstk.device cpu: $(losses <<<"$output")"
	[[ "$stderr" == *'device cpu (dstk.device)'* ]] || fail "$stderr"
}

@test "bf16: --device cpu gives the losses of no flag" {
	cfg bf.json ', "bf16": {"enabled": true}'
	CFG=bf.json run -0 train
	ref=$(losses <<<"$output")
	[ -n "$ref" ] || fail "no step lines"
	CFG=bf.json run -0 train --device cpu
	[ "$(losses <<<"$output")" = "$ref" ] || fail "$(losses <<<"$output") vs $ref"
}

@test "--device cuda on this machine: one line, exit 1 (no device) or 3 (no CUDA), nothing written" {
	skip_if_device
	want=$(cuda_refusal)
	run "-$(cuda_code)" --separate-stderr train --device cuda --save ck --metrics-json m.json
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one line: $stderr"
	assert_equal "${stderr_lines[0]:0:29}" "ds-train: --device cuda: $(cut -c1-4 <<<"$want")"
	[[ "$stderr" == *"$want"* ]] || fail "$stderr"
	[ -z "$output" ] || fail "stdout: $output"
	[ ! -e ck ] && [ ! -e csv ] && [ ! -e m.json ] || fail "files written: $(ls)"
}

# what the cuda backend does not cover is exit 3 before any device is
# asked for, on any machine: one error line naming it (a build without
# CUDA says that first); under a launcher's local rank as at one rank
@test "--device cuda with MoE or a 1-bit optimizer: one line, exit 3, nothing written, with or without a launcher's local rank" {
	local moe="is not on the cuda backend yet" onebit="is not on the cuda backend yet"
	if ds_has cuda; then
		moe="a Mixture-of-Experts model $moe"
		onebit="a 1-bit optimizer (OneBitAdam, ZeroOneAdam, OneBitLamb) $onebit"
	else
		moe=$(cuda_refusal) onebit=$(cuda_refusal)
	fi
	cfg onebit.json ', "zero_optimization": {"stage": 0}'
	sed -i 's/"type": "AdamW"/"type": "OneBitAdam"/' onebit.json
	local lr envs
	for lr in "" 1; do
		envs=()
		[ -n "$lr" ] && envs=("OMPI_COMM_WORLD_LOCAL_RANK=$lr")
		run -3 --separate-stderr env "${envs[@]}" \
			ds-train --deepspeed_config cfg.json --model "$TDATA/gpt-test-moe.json" --train-iters 4 --device cuda --save ck
		[ "${#stderr_lines[@]}" -eq 1 ] || fail "MoE: expected one line: $stderr"
		[[ "$stderr" == *"ds-train: --device cuda: $moe"* ]] || fail "MoE: $stderr"
		run -3 --separate-stderr env "${envs[@]}" \
			ds-train --deepspeed_config onebit.json --model "$MODEL" --train-iters 4 --device cuda --save ck
		# (after DeepSpeed's warning that OneBitAdam is verified under fp16)
		[ "$(grep -c '^ds-train: ' <<<"$stderr")" -eq 1 ] || fail "1-bit: expected one error line: $stderr"
		[[ "$stderr" == *"ds-train: --device cuda: $onebit"* ]] || fail "1-bit: $stderr"
		[ ! -e ck ] && [ ! -e csv ] || fail "files written: $(ls)"
	done
}

@test "dstk.device \"cuda\": refused naming the file and key; --device cpu overrides it" {
	skip_if_device
	cfg cuda.json ', "dstk": {"device": "cuda"}'
	CFG=cuda.json run "-$(cuda_code)" --separate-stderr train --save ck
	[[ "$stderr" == *"cuda.json: key 'dstk.device': \"cuda\": $(cuda_refusal)"* ]] || fail "$stderr"
	[ ! -e ck ] && [ ! -e csv ] || fail "files written: $(ls)"
	CFG=cuda.json run -0 --separate-stderr train --device cpu
	[[ "$stderr" == *'device cpu (--device)'* ]] || fail "$stderr"
	[ "$(losses <<<"$output" | wc -l)" -eq 4 ] || fail "$output"
}

@test "a device that is not cpu, cuda or auto: exit 2 naming the flag or the key" {
	run -2 --separate-stderr train --device gpu
	assert_equal "${stderr_lines[0]}" "ds-train: --device 'gpu': expected cpu, cuda or auto"
	cfg gpu.json ', "dstk": {"device": "gpu"}'
	CFG=gpu.json run -2 --separate-stderr train
	[[ "$stderr" == *"gpu.json: key 'dstk.device'"*'"gpu"'* ]] || fail "$stderr"
	[ ! -e csv ] || fail "csv written"
}

@test "--check shows dstk.device and what it gives here, without failing on a device it cannot have" {
	skip_if_device
	run -0 ds-train --check --deepspeed_config cfg.json --model "$MODEL"
	assert_line --regexp '^dstk\.device +"auto"  \(default\)$'
	assert_line --regexp '^# compute: device auto \(dstk\.device\): cpu \(.+\)$'
	if ds_has cuda; then
		assert_line '# compute: device auto (dstk.device): cpu (the cuda backend has not yet run on a GPU; ask for it with --device cuda)'
	fi
	run -0 ds-train --check --deepspeed_config cfg.json --model "$MODEL" --device cuda
	assert_line --partial "# compute: not possible here: --device cuda: $(cuda_refusal)"
	run -0 ds-train --check --json --deepspeed_config cfg.json --model "$MODEL" --device cpu
	dev=$(jq -c .device <<<"$output")
	assert_equal "$dev" '{"asked":"cpu","from":"--device","backend":"cpu","device":-1,"note":"device cpu (--device)"}'
	run -0 ds-train --check --json --deepspeed_config cfg.json --model "$MODEL" --device cuda
	assert_equal "$(jq -r .device.backend <<<"$output")" null
	[[ "$(jq -r .device.note <<<"$output")" == *"$(cuda_refusal)"* ]] || fail "$output"
}

@test "ds-train --help and --list-keys describe --device and dstk.device" {
	run -0 ds-train --help
	assert_output --partial "--device=cpu|cuda|auto"
	run -0 ds-train --list-keys
	assert_output --partial "dstk.device"
}
