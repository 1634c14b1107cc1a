#!/usr/bin/env bats
# train.bats - ds-train --device cuda against --device cpu (issue 18): the
# cuda backend's fp32 dense step at one rank gives the cpu backend's losses
# within 1e-5 relative over 20 steps of the dropout test model, at ZeRO
# stage 0 and 3, and a checkpoint saved on one device resumes on the other
# with the uninterrupted run's step-11 loss.  bf16 and fp16 runs give the
# cpu losses within the 16-bit tolerance of the CPU suite (1e-2 relative,
# tests/cli/ds-train-mixed.bats), the same loss scale at every step, and
# that suite's fp16 overflow injection and bf16 non-finite steps behave as
# on cpu.  Needs a CUDA device:
# bench/gpu-run.sh runs it on the GPU machine; elsewhere every test skips
# with the reason (the choice of --device cuda is checked without one by
# tests/cli/ds-train-device.bats, the backend by the emulated unit tests).
# shellcheck disable=SC2154  # stderr: set by bats' run --separate-stderr
load ../cli/helper

setup() {
	require_feature cuda
	cd "$BATS_TEST_TMPDIR" || return
	MODEL="$TDATA/gpt-test-dropout.json"
	cfg cfg.json ''
	cfg z3.json ', "zero_optimization": {"stage": 3}'
	cfg bf16.json ', "bf16": {"enabled": true}'
	cfg fp16.json ', "fp16": {"enabled": true, "initial_scale_power": 10, "hysteresis": 1}'
	cfg fp16z2.json ', "fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 4},
 "zero_optimization": {"stage": 2}'
	local dev
	dev=$(ds-train --check --json --deepspeed_config cfg.json --model "$MODEL" --device cuda) ||
		fail "ds-train --check --device cuda: $dev"
	[ "$(jq -r .device.backend <<<"$dev")" = cuda ] || skip "no CUDA device ($(jq -r .device.note <<<"$dev"))"
}

# cfg FILE EXTRA: the run's config with EXTRA members (", ..." text) added;
# the CSV monitor under csv/run keeps every step's loss at full precision
cfg() {
	cat >"$1" <<JSON
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
 "gradient_clipping": 1.0,
 "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "run"}$2}
JSON
}

# train DIR CONFIG ARGS...: a run in DIR (its own csv/ and ck/)
train() {
	local dir=$1 config=$2
	shift 2
	mkdir -p "$dir" || return
	(
		cd "$dir" || exit 1
		ds-train --deepspeed_config "../$config" --model "$MODEL" "$@"
	)
}

# the loss of step S (1-based) of the run in DIR: its CSV's rows are keyed
# by the samples before the step, 8 per step here
loss_of() { awk -F, -v s="$2" '$1 == (s - 1) * 8 { print $2 }' "$1/csv/run/Train_Samples_train_loss.csv"; }
# the losses of the run in DIR, one per line in step order
losses_of() { awk -F, 'NR > 1 { print $2 }' "$1/csv/run/Train_Samples_train_loss.csv"; }
# the CSV column NAME of the run in DIR (step,value rows)
col_of() { tail -n +2 "$1/csv/run/Train_Samples_$2.csv" | tr -d '\r'; }

# close A B: true when A is within 1e-5 of B, relative
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && d <= 1e-5 * m) }'; }

# same_losses DIR1 DIR2 N [TOL]: both runs have N losses, pairwise within
# TOL relative (default 1e-5)
same_losses() {
	local a b
	a=$(losses_of "$1") b=$(losses_of "$2")
	[ "$(wc -l <<<"$a")" -eq "$3" ] || { echo "$1: $(wc -l <<<"$a") losses, expected $3"; return 1; }
	[ "$(wc -l <<<"$b")" -eq "$3" ] || { echo "$2: $(wc -l <<<"$b") losses, expected $3"; return 1; }
	paste -d' ' <(echo "$a") <(echo "$b") | awk -v n1="$1" -v n2="$2" -v tol="${4:-1e-5}" '
		{ d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2
		  if (d > tol * m) { printf "step %d: %s %s, %s %s\n", NR, n1, $1, n2, $2; bad = 1 } }
		END { exit bad }'
}

# same_col DIR1 DIR2 NAME: the runs' CSV column NAME is the same text
same_col() {
	local a b
	a=$(col_of "$1" "$3") b=$(col_of "$2" "$3")
	[ -n "$a" ] || { echo "$1: no $3 column"; return 1; }
	[ "$a" = "$b" ] || { echo "$3: $1: $(tr '\n' ' ' <<<"$a"); $2: $(tr '\n' ' ' <<<"$b")"; return 1; }
}

@test "gpu: 20 steps of the dropout model on --device cuda give the cpu losses within 1e-5" {
	run -0 --separate-stderr train cpu cfg.json --train-iters 20 --device cpu
	run -0 --separate-stderr train cuda cfg.json --train-iters 20 --device cuda
	[[ "$stderr" == *'device cuda (--device): GPU '* ]] || fail "no cuda device line: $stderr"
	run -0 same_losses cpu cuda 20
}

@test "gpu: ZeRO stage 3 at one rank on --device cuda gives the cpu losses within 1e-5" {
	run -0 --separate-stderr train cpu z3.json --train-iters 20 --device cpu
	run -0 --separate-stderr train cuda z3.json --train-iters 20 --device cuda
	[[ "$stderr" == *'device cuda (--device): GPU '* ]] || fail "no cuda device line: $stderr"
	run -0 same_losses cpu cuda 20
}

@test "gpu: a checkpoint of step 10 saved on cuda resumes on cpu, and the other way round, with the step-11 loss" {
	run -0 train straight cfg.json --train-iters 20 --device cpu
	want=$(loss_of straight 11)
	[ -n "$want" ] || fail "no step-11 loss in the uninterrupted run"
	for pair in "cuda cpu" "cpu cuda"; do
		read -r from to <<<"$pair"
		dir=$from-$to
		run -0 train "$dir" cfg.json --train-iters 20 --device "$from" --save ck --exit-interval 10
		[ "$(cat "$dir/ck/latest")" = global_step10 ] || fail "$from: latest is $(cat "$dir/ck/latest")"
		rm -rf "$dir/csv"
		run -0 --separate-stderr train "$dir" cfg.json --train-iters 20 --device "$to" --save ck --load auto
		assert_output --partial "step 11/20"
		[[ "$stderr" == *"device $to (--device)"* ]] || fail "$to: no device line: $stderr"
		got=$(loss_of "$dir" 11)
		close "$got" "$want" || fail "saved on $from, resumed on $to: step-11 loss $got, uninterrupted $want"
	done
}

@test "gpu: 20 steps in bf16 on --device cuda give the cpu losses within the 16-bit tolerance (1e-2)" {
	run -0 --separate-stderr train cpu bf16.json --train-iters 20 --device cpu
	run -0 --separate-stderr train cuda bf16.json --train-iters 20 --device cuda
	[[ "$stderr" == *'device cuda (--device): GPU '* ]] || fail "no cuda device line: $stderr"
	[[ "$stderr" == *'matmul: bf16 products on the GPU'* ]] || fail "not bf16 products: $stderr"
	run -0 same_losses cpu cuda 20 1e-2
	run -0 same_col cpu cuda skipped_steps
}

@test "gpu: 20 steps in fp16 on --device cuda give the cpu losses within 1e-2 and the same loss scale, at stage 0 and 2" {
	for c in fp16 fp16z2; do
		run -0 --separate-stderr train "cpu-$c" "$c.json" --train-iters 20 --device cpu
		run -0 --separate-stderr train "cuda-$c" "$c.json" --train-iters 20 --device cuda
		[[ "$stderr" == *'device cuda (--device): GPU '* ]] || fail "no cuda device line: $stderr"
		run -0 same_losses "cpu-$c" "cuda-$c" 20 1e-2
		run -0 same_col "cpu-$c" "cuda-$c" loss_scale
		run -0 same_col "cpu-$c" "cuda-$c" skipped_steps
	done
	# the scale grew (window 4), so matching it can fail
	[ "$(col_of cuda-fp16z2 loss_scale | cut -d, -f2 | sort -u | wc -l)" -gt 1 ] ||
		fail "$(col_of cuda-fp16z2 loss_scale)"
}

@test "gpu: fp16 on --device cuda: an injected overflow at step 5 skips it and halves the scale, as on cpu" {
	for d in cpu cuda; do
		DS_TEST_INJECT_INF_STEP=5 run -0 --separate-stderr train "ov-$d" fp16.json --train-iters 7 --device "$d"
		[[ "$stderr" == *"step 5: fp16 gradient overflow"*"1024 -> 512"* ]] || fail "$d: $stderr"
	done
	run -0 same_col ov-cpu ov-cuda loss_scale
	run -0 same_col ov-cpu ov-cuda skipped_steps
	run -0 same_col ov-cpu ov-cuda lr
	[ "$(col_of ov-cuda loss_scale | cut -d, -f2 | tr '\n' ' ')" = "1024.0 1024.0 1024.0 1024.0 512.0 512.0 512.0 " ] ||
		fail "$(col_of ov-cuda loss_scale)"
	run -0 same_losses ov-cpu ov-cuda 7 1e-2
}

@test "gpu: bf16 on --device cuda: a non-finite step is skipped as on cpu; nonfinite_policy abort stops it" {
	for d in cpu cuda; do
		DS_TEST_INJECT_INF_STEP=3 run -0 --separate-stderr train "nf-$d" bf16.json --train-iters 4 --device "$d"
		[[ "$stderr" == *"step 3: non-finite gradients; step skipped"* ]] || fail "$d: $stderr"
	done
	run -0 same_col nf-cpu nf-cuda skipped_steps
	run -0 same_col nf-cpu nf-cuda lr
	run -0 same_losses nf-cpu nf-cuda 4 1e-2
	cfg abort.json ', "bf16": {"enabled": true}, "dstk": {"nonfinite_policy": "abort"}'
	DS_TEST_INJECT_INF_STEP=3 run -1 --separate-stderr train ab abort.json --train-iters 4 --device cuda
	[[ "$stderr" == *"step 3"*"nonfinite_policy"*"abort"* ]] || fail "$stderr"
}
