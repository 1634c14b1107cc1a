#!/usr/bin/env bats
# 3D parallelism (issue 19): tensor x pipeline x data layouts of 2 and 4
# ranks against the oracle of DESIGN.md - the 1-rank run's losses within
# 1e-5 relative over 20 steps, dropout on, gradient accumulation 4 - for a
# GPT-2-style model and a NeoX-style one (rotary, rmsnorm, swiglu, parallel
# residual, untied head); planted faults (a wrong tensor-parallel shard, the
# tied embedding's gradient not summed) must break it.  Checkpoints written
# under one layout resume under another; the comms logger shows the
# tensor-parallel all_reduces and the pipeline's sends with their sizes.
# shellcheck disable=SC2154  # stderr: set by bats' run --separate-stderr
# shellcheck disable=SC2030,SC2031  # PRECISION, RTOL, CFG_EXTRA: set for the helpers in the @test (a subshell) that calls them
load train_helper

NEOX="$TDATA/neox-test-dropout.json"

# run3d DIR MODEL N TP PP STAGE GA [ENV=VALUE...] -- [ds-train flags]: 8
# samples per step as MB x GA x dp (dp = N / TP / PP); losses in DIR/csv
run3d() {
	local dir=$1 model=$2 n=$3 tp=$4 pp=$5 stage=$6 ga=$7
	shift 7
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
	[ "${1:-}" = "--" ] && shift
	mkdir -p "$dir"
	write_cfg "$dir/ds.json" "$stage" $((8 / (n / tp / pp) / ga)) "$ga" "$dir/csv"
	local cmd=(env "${envs[@]}" "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$dir/ds.json" --model "$model"
		--train-iters "$ITERS" --peak-gflops 1 --tensor-model-parallel-size "$tp"
		--pipeline-model-parallel-size "$pp" "$@")
	if [ "$n" -eq 1 ]; then
		OMP_NUM_THREADS=1 "${cmd[@]}" >"$dir/out" 2>"$dir/err"
	else
		mpirun_n "$n" "${cmd[@]}" >"$dir/out" 2>"$dir/err"
	fi
}

# ref3d MODEL: the 1-rank run with accumulation 4 (once per file, model and PRECISION)
ref3d() {
	local dir
	dir="$BATS_FILE_TMPDIR/ref-$(basename "$1" .json)${PRECISION:+-$PRECISION}"
	if [ ! -s "$(losses "$dir")" ]; then
		run3d "$dir" "$1" 1 1 1 1 4 || { cat "$dir/err" >&2; return 1; }
	fi
	echo "$dir"
}

# layout3d MODEL N TP PP [STAGE] [ENV=VALUE...]: train at that layout and
# compare every step's loss with the 1-rank run's
layout3d() {
	local model=$1 n=$2 tp=$3 pp=$4 stage=${5:-0} ref dir
	shift 4
	[ $# -gt 0 ] && shift
	dir="$BATS_TEST_TMPDIR/$(basename "$model" .json)-n$n-tp$tp-pp$pp-s$stage${PRECISION:+-$PRECISION}"
	ref=$(ref3d "$model") || return 1
	if ! run3d "$dir" "$model" "$n" "$tp" "$pp" "$stage" 4 "$@"; then
		echo "ds-train at tp $tp x pp $pp x dp $((n / tp / pp)), stage $stage failed:" >&2
		tail -5 "$dir/err" >&2
		return 1
	fi
	[ "$(wc -l <"$(losses "$dir")")" -gt "$ITERS" ] || { echo "fewer than $ITERS losses logged" >&2; return 1; }
	same_losses "$(losses "$dir")" "$(losses "$ref")" || { echo "at tp $tp x pp $pp x dp $((n / tp / pp))" >&2; return 1; }
}

# the seven layouts of 2 and 4 ranks
all_layouts() {
	layout3d "$1" 2 2 1 || return 1   # TP 2
	layout3d "$1" 2 1 2 || return 1   # PP 2
	layout3d "$1" 4 2 1 || return 1   # TP 2 x DP 2
	layout3d "$1" 4 1 2 || return 1   # PP 2 x DP 2
	layout3d "$1" 4 2 2 || return 1   # TP 2 x PP 2
	layout3d "$1" 4 1 4 || return 1   # PP 4
	layout3d "$1" 4 4 1                # TP 4
}

@test "GPT-2 style: TP 2, PP 2, TP 2 x DP 2, PP 2 x DP 2, TP 2 x PP 2, PP 4, TP 4 give the 1-rank losses" {
	all_layouts "$MODEL_DROPOUT"
}

@test "NeoX style (rotary, rmsnorm, swiglu, parallel residual, untied): the seven layouts give the 1-rank losses" {
	all_layouts "$NEOX"
}

@test "ZeRO 1-3 with tensor parallelism alone, ZeRO 1 under pipelining: the 1-rank losses" {
	for s in 1 2 3; do layout3d "$MODEL_DROPOUT" 4 2 1 "$s" || fail "TP 2 x DP 2, stage $s"; done
	layout3d "$NEOX" 4 1 2 1 || fail "PP 2 x DP 2, stage 1"
}

@test "a wrong tensor-parallel shard, or the tied embedding's gradient left unsummed, breaks the oracle" {
	local ref
	ref=$(ref3d "$MODEL_DROPOUT")
	run3d "$BATS_TEST_TMPDIR/slice" "$MODEL_DROPOUT" 2 2 1 0 4 DS_TEST_FAULT_TP_SLICE=1 || fail "$(cat "$BATS_TEST_TMPDIR/slice/err")"
	run same_losses "$(losses "$BATS_TEST_TMPDIR/slice")" "$(losses "$ref")"
	assert_failure
	run3d "$BATS_TEST_TMPDIR/tied" "$MODEL_DROPOUT" 2 1 2 0 4 DS_TEST_FAULT_SKIP_TIED=1 || fail "$(cat "$BATS_TEST_TMPDIR/tied/err")"
	run same_losses "$(losses "$BATS_TEST_TMPDIR/tied")" "$(losses "$ref")"
	assert_failure
}

@test "ZeRO 2 and 3 under pipelining are refused with DeepSpeed's reason; layouts that do not fit and 1-bit optimizers under TP/PP are refused" {
	mkdir -p "$BATS_TEST_TMPDIR/r"
	write_cfg "$BATS_TEST_TMPDIR/r/ds.json" 2 8 1 "$BATS_TEST_TMPDIR/r/csv"
	run --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$BATS_TEST_TMPDIR/r/ds.json" \
		--model "$MODEL_DROPOUT" --train-iters 1 --pipeline-model-parallel-size 2
	assert_failure 2
	[[ "$stderr" == *"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"* ]] || fail "$stderr"
	write_cfg "$BATS_TEST_TMPDIR/r/ds.json" 0 8 1 "$BATS_TEST_TMPDIR/r/csv"
	run --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$BATS_TEST_TMPDIR/r/ds.json" \
		--model "$MODEL_DROPOUT" --train-iters 1 --tensor-model-parallel-size 4
	assert_failure 2
	[[ "$stderr" == *"world size 2 is not a multiple of tensor-parallel size 4"* ]] || fail "$stderr"
	# heads split whole: 4 heads over 3 ranks is refused naming them
	write_cfg "$BATS_TEST_TMPDIR/r/ds.json" 0 8 1 "$BATS_TEST_TMPDIR/r/csv"
	run --separate-stderr mpirun_n 3 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$BATS_TEST_TMPDIR/r/ds.json" \
		--model "$MODEL_DROPOUT" --train-iters 1 --tensor-model-parallel-size 3
	assert_failure 2
	[[ "$stderr" == *"num_attention_heads 4 is not a multiple of the tensor-parallel size 3"* ]] || fail "$stderr"
	# the 1-bit optimizers' compressed allreduce is the whole world's: refused under TP/PP
	jq '.optimizer = {"type": "OneBitAdam", "params": {"lr": 0.001, "freeze_step": 2}}' \
		"$BATS_TEST_TMPDIR/r/ds.json" >"$BATS_TEST_TMPDIR/r/onebit.json"
	run --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$BATS_TEST_TMPDIR/r/onebit.json" \
		--model "$MODEL_DROPOUT" --train-iters 1 --tensor-model-parallel-size 2
	assert_failure 2
	[[ "$stderr" == *"optimizer onebitadam with tensor or pipeline parallelism (tp 2, pp 1)"* ]] || fail "$stderr"
}

@test "a checkpoint saved at TP 2 x PP 2 resumes at 1 rank and at DP 4 with the uninterrupted run's losses" {
	local ref save="$BATS_TEST_TMPDIR/save"
	ref=$(ref3d "$MODEL_DROPOUT")
	ITERS=10 run3d "$BATS_TEST_TMPDIR/first" "$MODEL_DROPOUT" 4 2 2 0 4 -- --save "$save" ||
		fail "$(cat "$BATS_TEST_TMPDIR/first/err")"
	[ -s "$save/global_step10/state.h5" ]
	run3d "$BATS_TEST_TMPDIR/one" "$MODEL_DROPOUT" 1 1 1 0 4 -- --load "$save" || fail "$(cat "$BATS_TEST_TMPDIR/one/err")"
	grep -q "loaded $save/global_step10: step 10" "$BATS_TEST_TMPDIR/one/err"
	same_losses_from "$(losses "$BATS_TEST_TMPDIR/one")" "$(losses "$ref")"
	run3d "$BATS_TEST_TMPDIR/dp4" "$MODEL_DROPOUT" 4 1 1 0 2 -- --load "$save" || fail "$(cat "$BATS_TEST_TMPDIR/dp4/err")"
	same_losses_from "$(losses "$BATS_TEST_TMPDIR/dp4")" "$(losses "$ref")"
	# and the other way round: a 1-rank checkpoint resumes at TP 2 x PP 2
	ITERS=10 run3d "$BATS_TEST_TMPDIR/first1" "$MODEL_DROPOUT" 1 1 1 0 4 -- --save "$save.1" ||
		fail "$(cat "$BATS_TEST_TMPDIR/first1/err")"
	run3d "$BATS_TEST_TMPDIR/tp2pp2" "$MODEL_DROPOUT" 4 2 2 0 4 -- --load "$save.1" ||
		fail "$(cat "$BATS_TEST_TMPDIR/tp2pp2/err")"
	same_losses_from "$(losses "$BATS_TEST_TMPDIR/tp2pp2")" "$(losses "$ref")"
}

@test "bf16 and fp16 at TP 2 x PP 2: the 1-rank 16-bit losses within their tolerances" {
	export RTOL
	for PRECISION in bf16 fp16; do
		export PRECISION
		[ $PRECISION = bf16 ] && RTOL=2e-3 || RTOL=1e-3
		layout3d "$NEOX" 4 2 2 1 || fail "$PRECISION"
	done
}

@test "evaluation under pipelining and tensor parallelism: the 1-rank validation loss" {
	local d n tp pp
	for l in "1 1 1" "2 1 2" "2 2 1" "4 2 2"; do
		read -r n tp pp <<<"$l"
		d="$BATS_TEST_TMPDIR/eval-$n-$tp-$pp"
		ITERS=2 run3d "$d" "$NEOX" "$n" "$tp" "$pp" 0 4 -- --eval-interval 2 --eval-iters 2 || fail "$(cat "$d/err")"
		grep '^eval step 2 ' "$d/out" | sed 's/^.*| loss \([^ ]*\) .*$/\1/' >"$d/val"
		[ -s "$d/val" ] || fail "no evaluation line: $(cat "$d/out")"
	done
	for l in 2-1-2 2-2-1 4-2-2; do
		awk -v l="$l" 'NR == FNR { ref = $1; next }
		     { d = $1 - ref; if (d < 0) d = -d; if (!(d <= 1e-5 * ref)) { print l ": loss " $1 " vs " ref; exit 1 } }' \
			"$BATS_TEST_TMPDIR/eval-1-1-1/val" "$BATS_TEST_TMPDIR/eval-$l/val"
	done
}

# rows of rank 0's comms_logger summary: "op|size|count" (tests/mpi/comms.bats)
rows() {
	echo "$output" | awk '
		/^Comm\. Op/ { t = 1; next }
		!t { next }
		/^(step|memory) / { next }
		/^[^ ]/ { op = $0; sub(/ +$/, "", op); next }
		{ s = substr($0, 21, 20); c = substr($0, 41, 20); sub(/ +$/, "", s); sub(/ +$/, "", c)
		  print op "|" s "|" c }'
}

@test "comms_logger: the tensor-parallel all_reduces and the pipeline's sends, receives and tied sum, with their sizes" {
	# 3 steps of 2 micro-batches of 4 x 32 tokens: an activation is 4 x 32 x 64
	# floats (32 KB), a row statistic 4 x 32 floats (512 B)
	cat >"$BATS_TEST_TMPDIR/ds.json" <<-'EOF'
	{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
	 "steps_per_print": 1000, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
	 "zero_optimization": {"stage": 0}, "comms_logger": {"enabled": true}}
	EOF
	local args=(--deepspeed_config "$BATS_TEST_TMPDIR/ds.json" --model "$MODEL_DROPOUT" --train-iters 3 --peak-gflops 1)
	# TP 2: per micro-batch the embedding's sum, two per layer in forward and
	# two in backward, the head input's gradient (10 activations), and the
	# loss's row max, target logit and exp-sum; then the norm/loss and stop sums
	run --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" "${args[@]}" --tensor-model-parallel-size 2
	assert_success
	diff <(rows | sort) <(printf '%s\n' "all_reduce|32.0 KB|60" "all_reduce|512.0 B|18" "all_reduce|24.0 B|3" \
		"all_reduce|8.0 B|3" | sort)
	# the memory plan holds per rank for these layouts too
	assert_line --regexp '^memory per rank .*\| alloc/estimate 1\.0000 \|'
	# PP 2, rank 0 (stage 0): an activation sent and a gradient received per
	# micro-batch, the tied embedding (256 x 64 floats) summed once per step
	run --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" "${args[@]}" --pipeline-model-parallel-size 2
	assert_success
	diff <(rows | sort) <(printf '%s\n' "send|32.0 KB|6" "recv|32.0 KB|6" "all_reduce|64.0 KB|3" \
		"all_reduce|24.0 B|3" "all_reduce|8.0 B|3" | sort)
	assert_line --regexp '^memory per rank .*\| alloc/estimate 1\.0000 \|'
	# TP 2 x PP 2: pipe_partitioned/grad_partitioned send half of each and
	# allgather the halves received; stage 0's TP sums (embedding, one layer)
	# and its half of the tied embedding
	run --separate-stderr mpirun_n 4 "$DS_BUILDDIR/tools/ds-train" "${args[@]}" --pipeline-model-parallel-size 2 \
		--tensor-model-parallel-size 2
	assert_success
	diff <(rows | sort) <(printf '%s\n' "send|16.0 KB|6" "recv|16.0 KB|6" "all_gather|16.0 KB|6" \
		"all_reduce|32.0 KB|33" "all_reduce|24.0 B|3" "all_reduce|8.0 B|3" | sort)
	assert_line --regexp '^memory per rank .*\| alloc/estimate 1\.0000 \|'
}

@test "flops_profiler at TP 2 x PP 2: rank 0's module per GPU with model parallel size 4; the bubble line" {
	mkdir -p "$BATS_TEST_TMPDIR/p"
	CFG_EXTRA='"flops_profiler": {"enabled": true, "profile_step": 2}, "wall_clock_breakdown": true' \
		write_cfg "$BATS_TEST_TMPDIR/p/ds.json" 0 2 4 "$BATS_TEST_TMPDIR/p/csv"
	sed -i 's/"steps_per_print": 1000/"steps_per_print": 2/' "$BATS_TEST_TMPDIR/p/ds.json"
	run --separate-stderr mpirun_n 4 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$BATS_TEST_TMPDIR/p/ds.json" \
		--model "$MODEL_DROPOUT" --train-iters 2 --peak-gflops 1 --tensor-model-parallel-size 2 \
		--pipeline-model-parallel-size 2
	assert_success
	assert_line --regexp '^world size: +4 *$'
	assert_line --regexp '^data parallel size: +1 *$'
	assert_line --regexp '^model parallel size: +4 *$'
	# stage 0 of TP 2: half of wte (128 x 64), wpe (32 x 64), layer 0's shard
	assert_line --regexp '^params per GPU: +35\.42 K *$'
	[[ "$stderr" == *"pipeline (ms) | compute: "*"| 1F1B (p-1)/(m+p-1): 0.2000"* ]] || fail "$stderr"
}
