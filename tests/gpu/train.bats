#!/usr/bin/env bats
# train.bats - ds-train --device cuda against --device cpu (issue 18): the
# cuda backend's fp32 dense step at one rank gives the cpu backend's losses
# within 1e-5 relative over 20 steps of the dropout test model, at ZeRO
# stage 0 and 3, and a checkpoint saved on one device at step 10 resumes
# on the other with the uninterrupted run's step-11 loss; ZeRO stages 0-3
# at 2 ranks sharing the GPU give the 1-rank GPU losses (fp32 within 1e-5;
# fp16 and bf16 within 1e-2, with the same loss scale).  bf16 and fp16
# runs give the cpu losses within the 16-bit tolerance of the CPU suite
# (1e-2 relative, tests/cli/ds-train-mixed.bats), the same loss scale at
# every step, and that suite's fp16 overflow injection and bf16
# non-finite steps behave as on cpu; ZeRO-Offload (offload_optimizer cpu,
# offload_param cpu) gives the cpu losses with less device memory.  Needs a CUDA device:
# bench/gpu-run.sh runs it on the GPU machine; elsewhere every test skips
# with the reason (the choice of --device cuda is checked without one by
# tests/cli/ds-train-device.bats, the backend by the emulated unit tests).
#
# The same checks run without a GPU over the host emulation of CUDA
# (tests/cli/ds-train-cuda-emu.sh), through these variables:
#   DS_TRAIN_CUDA       the program for the --device cuda runs (default
#                       ds-train; there tests/unit/ds-train-emu)
#   DS_GPU_TRAIN_ITERS  steps of each run (default 20), the checkpoint at
#                       half of them; an even number of 4 or more
#   DS_GPU_REQUIRE=1    no device answering fails the tests instead of
#                       skipping them
# shellcheck disable=SC2154  # stderr: set by bats' run --separate-stderr
load ../cli/helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	CUDA_TRAIN=${DS_TRAIN_CUDA:-ds-train}
	ITERS=${DS_GPU_TRAIN_ITERS:-20}
	if ! [[ $ITERS =~ ^[0-9]+$ ]] || [ "$ITERS" -lt 4 ] || [ $((ITERS % 2)) -ne 0 ]; then
		fail "DS_GPU_TRAIN_ITERS=$ITERS: give an even number of steps, 4 or more"
	fi
	HALF=$((ITERS / 2))
	MODEL="$TDATA/gpt-test-dropout.json"
	# the dry run of the 2-rank test's mechanics on cpu (below) needs no GPU
	if [ "${DS_GPU_DRY_DEVICE:-}" = cpu ]; then
		[[ "$BATS_TEST_DESCRIPTION" == *'2 ranks sharing one GPU'* ]] || skip "DS_GPU_DRY_DEVICE=cpu: the 2-rank test only"
		return 0
	fi
	require_feature cuda
	cfg cfg.json ''
	cfg z3.json ', "zero_optimization": {"stage": 3}'
	cfg bf16.json ', "bf16": {"enabled": true}'
	cfg fp16.json ', "fp16": {"enabled": true, "initial_scale_power": 10, "hysteresis": 1}'
	cfg fp16z2.json ', "fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 4},
 "zero_optimization": {"stage": 2}'
	local dev why
	dev=$("$CUDA_TRAIN" --check --json --deepspeed_config cfg.json --model "$MODEL" --device cuda) ||
		fail "$CUDA_TRAIN --check --device cuda: $dev"
	if [ "$(jq -r .device.backend <<<"$dev")" != cuda ]; then
		why="no CUDA device ($(jq -r .device.note <<<"$dev"))"
		if [ "${DS_GPU_REQUIRE:-0}" = 1 ]; then fail "$CUDA_TRAIN: $why, and DS_GPU_REQUIRE=1"; fi
		skip "$why"
	fi
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

# train DIR CONFIG ARGS...: a run in DIR (its own csv/ and ck/), by
# $CUDA_TRAIN when ARGS say --device cuda, else by ds-train
train() {
	local dir=$1 config=$2 prog=ds-train prev='' a
	shift 2
	for a in "$@"; do
		if [ "$prev" = --device ] && [ "$a" = cuda ]; then prog=$CUDA_TRAIN; fi
		prev=$a
	done
	mkdir -p "$dir" || return
	(
		cd "$dir" || exit 1
		"$prog" --deepspeed_config "../$config" --model "$MODEL" "$@"
	)
}

# trained: the run just made exited 0, else the test fails with its exit
# status and the end of its stderr (a crash's own words: a CUDA error, the
# emulation's "host access of emulated device memory")
trained() {
	[ "$status" -eq 0 ] || fail "exit $status: $(tail -n 5 <<<"$stderr")"
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

@test "gpu: ${DS_GPU_TRAIN_ITERS:-20} steps of the dropout model on --device cuda give the cpu losses within 1e-5" {
	run --separate-stderr train cpu cfg.json --train-iters "$ITERS" --device cpu
	trained
	run --separate-stderr train cuda cfg.json --train-iters "$ITERS" --device cuda
	trained
	[[ "$stderr" == *'device cuda (--device): GPU '* ]] || fail "no cuda device line: $stderr"
	run same_losses cpu cuda "$ITERS"
	[ "$status" -eq 0 ] || fail "cpu and cuda losses differ by more than 1e-5 relative: $output"
}

@test "gpu: ZeRO stage 3 at one rank on --device cuda gives the cpu losses within 1e-5" {
	run --separate-stderr train cpu z3.json --train-iters "$ITERS" --device cpu
	trained
	run --separate-stderr train cuda z3.json --train-iters "$ITERS" --device cuda
	trained
	[[ "$stderr" == *'device cuda (--device): GPU '* ]] || fail "no cuda device line: $stderr"
	run same_losses cpu cuda "$ITERS"
	[ "$status" -eq 0 ] || fail "cpu and cuda losses differ by more than 1e-5 relative: $output"
}

# ZeRO-Offload: the states (and bf16's master) in pinned host memory, the
# step on the host: the cpu losses as without offload (fp32 1e-5, bf16
# the 16-bit tolerance), the pinned bytes reported, and the device
# holding less than the same run without offload
@test "gpu: ZeRO-Offload (offload_optimizer cpu) on --device cuda, fp32 stage 2 and bf16 stage 1: the cpu losses, less device memory" {
	local dt z tol line pin dev0 extra
	# (over the emulation, tests/cli/ds-train-check-cuda.bats runs these
	# checks on shorter runs; here they would double ds-train-cuda-emu.sh)
	[ "$CUDA_TRAIN" = ds-train ] || skip "$CUDA_TRAIN: the emulation's offload checks are ds-train-check-cuda.bats's"
	for dt in fp32 bf16; do
		z=2 tol=1e-5 extra=''
		[ $dt = bf16 ] && z=1 tol=1e-2 extra=', "bf16": {"enabled": true}'
		cfg off-$dt.json ", \"zero_optimization\": {\"stage\": $z, \"offload_optimizer\": {\"device\": \"cpu\"}}$extra"
		cfg on-$dt.json ", \"zero_optimization\": {\"stage\": $z}$extra"
		run -0 --separate-stderr train cpu-$dt off-$dt.json --train-iters "$ITERS" --device cpu
		run -0 --separate-stderr train plain-$dt on-$dt.json --train-iters "$ITERS" --device cuda
		dev0=$(grep '^device memory per rank' <<<"$output" | grep -o 'device_alloc_peak [0-9]*' | awk '{ print $2 }')
		run -0 --separate-stderr train cuda-$dt off-$dt.json --train-iters "$ITERS" --device cuda
		line=$(grep '^device memory per rank' <<<"$output") || fail "$dt: no device memory line: $output"
		pin=$(grep -o '| pinned [0-9]*' <<<"$line" | awk '{ print $3 }')
		[ "${pin:-0}" -gt 0 ] || fail "$dt: nothing pinned: $line"
		[ "$(grep -o 'device_alloc_peak [0-9]*' <<<"$line" | awk '{ print $2 }')" -lt "$dev0" ] ||
			fail "$dt: offload saved no device memory: $line (without: $dev0)"
		run same_losses cpu-$dt cuda-$dt "$ITERS" "$tol"
		[ "$status" -eq 0 ] || fail "$dt: offloaded cuda and cpu losses differ by more than $tol relative: $output"
	done
}

# offload_param cpu at ZeRO stage 3 in bf16 (persistence threshold 1000:
# the embeddings and both layers offloaded, 2 x 118400 bytes), with and
# without offload_optimizer cpu: the cpu losses within the 16-bit
# tolerance, the offloaded parameters pinned, and less device memory than
# the same run without offload_param (it saves 236800 bytes and adds two
# 16-bit widening sources of 99968)
@test "gpu: offload_param cpu on --device cuda, bf16 stage 3: the cpu losses, pinned parameters, less device memory" {
	local oo line pin dev0 k=0 zo='"stage": 3, "stage3_param_persistence_threshold": 1000'
	[ "$CUDA_TRAIN" = ds-train ] || skip "$CUDA_TRAIN: the emulation's offload checks are ds-train-check-cuda.bats's"
	cfg np.json ", \"zero_optimization\": {$zo}, \"bf16\": {\"enabled\": true}"
	run -0 --separate-stderr train cpu-p np.json --train-iters "$ITERS" --device cpu
	run -0 --separate-stderr train plain-p np.json --train-iters "$ITERS" --device cuda
	dev0=$(grep '^device memory per rank' <<<"$output" | grep -o 'device_alloc_peak [0-9]*' | awk '{ print $2 }')
	for oo in '' ', "offload_optimizer": {"device": "cpu"}'; do
		cfg op.json ", \"zero_optimization\": {$zo, \"offload_param\": {\"device\": \"cpu\"}$oo}, \"bf16\": {\"enabled\": true}"
		k=$((k + 1))
		run -0 --separate-stderr train cuda-p$k op.json --train-iters "$ITERS" --device cuda
		line=$(grep '^device memory per rank' <<<"$output") || fail "$oo: no device memory line: $output"
		pin=$(grep -o '| pinned [0-9]*' <<<"$line" | awk '{ print $3 }')
		[ "${pin:-0}" -ge 236800 ] || fail "$oo: the parameters are not pinned: $line"
		[ "$(grep -o 'device_alloc_peak [0-9]*' <<<"$line" | awk '{ print $2 }')" -lt "$dev0" ] ||
			fail "$oo: offload_param saved no device memory: $line (without: $dev0)"
		run same_losses cpu-p cuda-p$k "$ITERS" 1e-2
		[ "$status" -eq 0 ] || fail "$oo: offloaded cuda and cpu losses differ by more than 1e-2 relative: $output"
	done
}

@test "gpu: a checkpoint saved on cuda half-way resumes on cpu, and the other way round, with the next step's loss" {
	run --separate-stderr train straight cfg.json --train-iters "$ITERS" --device cpu
	trained
	want=$(loss_of straight $((HALF + 1)))
	[ -n "$want" ] || fail "no step-$((HALF + 1)) loss in the uninterrupted run"
	for pair in "cuda cpu" "cpu cuda"; do
		read -r from to <<<"$pair"
		dir=$from-$to
		run --separate-stderr train "$dir" cfg.json --train-iters "$ITERS" --device "$from" --save ck --exit-interval "$HALF"
		trained
		[ "$(cat "$dir/ck/latest")" = "global_step$HALF" ] || fail "$from: latest is $(cat "$dir/ck/latest")"
		rm -rf "$dir/csv"
		run --separate-stderr train "$dir" cfg.json --train-iters "$ITERS" --device "$to" --save ck --load auto
		trained
		assert_output --partial "step $((HALF + 1))/$ITERS"
		[[ "$stderr" == *"device $to (--device)"* ]] || fail "$to: no device line: $stderr"
		got=$(loss_of "$dir" $((HALF + 1)))
		close "$got" "$want" || fail "saved on $from, resumed on $to: step-$((HALF + 1)) loss $got, uninterrupted $want"
	done
}

@test "gpu: ${DS_GPU_TRAIN_ITERS:-20} steps in bf16 on --device cuda give the cpu losses within the 16-bit tolerance (1e-2)" {
	run -0 --separate-stderr train cpu bf16.json --train-iters "$ITERS" --device cpu
	run -0 --separate-stderr train cuda bf16.json --train-iters "$ITERS" --device cuda
	[[ "$stderr" == *'device cuda (--device): GPU '* ]] || fail "no cuda device line: $stderr"
	[[ "$stderr" == *'matmul: bf16 products on the GPU'* ]] || fail "not bf16 products: $stderr"
	run -0 same_losses cpu cuda "$ITERS" 1e-2
	run -0 same_col cpu cuda skipped_steps
}

@test "gpu: ${DS_GPU_TRAIN_ITERS:-20} steps in fp16 on --device cuda give the cpu losses within 1e-2 and the same loss scale, at stage 0 and 2" {
	for c in fp16 fp16z2; do
		run -0 --separate-stderr train "cpu-$c" "$c.json" --train-iters "$ITERS" --device cpu
		run -0 --separate-stderr train "cuda-$c" "$c.json" --train-iters "$ITERS" --device cuda
		[[ "$stderr" == *'device cuda (--device): GPU '* ]] || fail "no cuda device line: $stderr"
		run -0 same_losses "cpu-$c" "cuda-$c" "$ITERS" 1e-2
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

# ZeRO at 2 ranks sharing one GPU (issue 18): both ranks take device
# local_rank % 1 = 0, so the engine's device buffers cross ranks through
# the mpi backend staged in pinned memory (NCCL refuses two ranks on one
# GPU); each stage's losses (20 steps) equal the 1-rank GPU run's within 1e-5.
# The global batch is 8 either way: micro 4 x 2 accumulation on one rank,
# micro 2 x 2 on each of two.  DS_GPU_DRY_DEVICE=cpu runs the same
# mechanics with --device cpu where no GPU answers (the test's own check
# that it can pass), skipping only the device-path line.
# zcfg FILE STAGE MICRO [EXTRA]: EXTRA (", ..." members) as cfg's
zcfg() {
	cfg "$1" ", \"train_batch_size\": 8, \"zero_optimization\": {\"stage\": $2, \"reduce_bucket_size\": 5000, \"allgather_bucket_size\": 5000}${4:-}"
	sed -i "s/\"train_micro_batch_size_per_gpu\": 4/\"train_micro_batch_size_per_gpu\": $3/" "$1"
}

@test "gpu: ZeRO stages 0-3 on 2 ranks sharing one GPU equal the 1-rank GPU run" {
	local dev=${DS_GPU_DRY_DEVICE:-cuda} s mpirun
	# over the emulation an engine step takes seconds: the engine at 2 and
	# 4 ranks on the emulated backend is tests/mpi/engine-cuda.bats's
	[ -z "${DS_TRAIN_CUDA:-}" ] || skip "DS_TRAIN_CUDA set: multi-rank over the emulation is tests/mpi/engine-cuda.bats"
	mpirun="$(command -v mpirun || command -v mpirun.openmpi)" || skip "no mpirun"
	ds_has mpi || skip "built without mpi"
	local mpi=("$mpirun" --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1)
	[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
	for s in 0 1 2 3; do
		zcfg "one$s.json" "$s" 4
		zcfg "two$s.json" "$s" 2
		run -0 --separate-stderr train "one$s" "one$s.json" --train-iters "$ITERS" --device "$dev"
		mkdir -p "two$s"
		run -0 --separate-stderr bounded 600 "${mpi[@]}" -wdir "$PWD/two$s" \
			"$DS_BUILDDIR/tools/ds-train" --deepspeed_config "../two$s.json" --model "$MODEL" --train-iters "$ITERS" --device "$dev"
		if [ "$dev" = cuda ]; then
			[[ "$stderr" == *'device buffers between ranks over mpi: ranks 0 and 1 share device'* ]] ||
				fail "stage $s: not staged over mpi: $stderr"
		fi
		run -0 same_losses "one$s" "two$s" "$ITERS"
	done
}

# fp16 and bf16 at 2 ranks sharing one GPU (issue 18): the 16-bit
# gradients reduced in their own dtype over the staged mpi path, cast and
# scaled on the device.  Each stage's losses are the 1-rank GPU run's
# within the 16-bit tolerance (1e-2 relative, as against the cpu above;
# the 2-rank sums round in another order), and the fp16 loss scale and
# skipped steps are the 1-rank run's at every step (scaling from 2^12,
# doubling every 4 clean steps, so the scale moves within the run).
# DS_GPU_DRY_DEVICE=cpu dry-runs the mechanics with --device cpu.
@test "gpu: fp16 and bf16 ZeRO stages 0-3 on 2 ranks sharing one GPU: the 1-rank GPU run's losses and loss scale" {
	local dev=${DS_GPU_DRY_DEVICE:-cuda} s p x mpirun
	[ -z "${DS_TRAIN_CUDA:-}" ] || skip "DS_TRAIN_CUDA set: multi-rank over the emulation is tests/mpi/engine-cuda.bats"
	mpirun="$(command -v mpirun || command -v mpirun.openmpi)" || skip "no mpirun"
	ds_has mpi || skip "built without mpi"
	local mpi=("$mpirun" --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1)
	[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
	for p in bf16 fp16; do
		x=', "bf16": {"enabled": true}'
		[ $p = fp16 ] && x=', "fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 4}'
		for s in 0 1 2 3; do
			zcfg "one$p$s.json" "$s" 4 "$x"
			zcfg "two$p$s.json" "$s" 2 "$x"
			run -0 --separate-stderr train "one$p$s" "one$p$s.json" --train-iters "$ITERS" --device "$dev"
			mkdir -p "two$p$s"
			run -0 --separate-stderr bounded 600 "${mpi[@]}" -wdir "$PWD/two$p$s" \
				"$DS_BUILDDIR/tools/ds-train" --deepspeed_config "../two$p$s.json" --model "$MODEL" --train-iters "$ITERS" --device "$dev"
			if [ "$dev" = cuda ]; then
				[[ "$stderr" == *'device buffers between ranks over mpi: ranks 0 and 1 share device'* ]] ||
					fail "$p stage $s: not staged over mpi: $stderr"
			fi
			run -0 same_losses "one$p$s" "two$p$s" "$ITERS" 1e-2
			run -0 same_col "one$p$s" "two$p$s" skipped_steps
			[ $p = bf16 ] && continue
			run -0 same_col "one$p$s" "two$p$s" loss_scale
			[ "$(col_of "two$p$s" loss_scale | cut -d, -f2 | sort -u | wc -l)" -gt 1 ] ||
				fail "$p stage $s: the loss scale never moved: $(col_of "two$p$s" loss_scale)"
		done
	done
}
