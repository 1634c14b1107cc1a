#!/usr/bin/env bats
# The 1-bit optimizers between real ranks (issue 22).
#  - the compressed allreduce (tests/mpi/onebit_check.c) against the
#    hand-worked example of tests/unit/onebit_example.h at 2 ranks, and
#    against the ranks simulated in one process at 3 and 4;
#  - OneBitAdam, ZeroOneAdam and OneBitLamb train the test model at 2 ranks
#    to within 3% of Adam / Lamb (the issue's measure: the mean of the last
#    20 of STEPS = 300 steps; bench/onebit-loss.sh runs the same at 2 and 4
#    ranks), the gradient
#    all_reduce happens exactly on the steps DeepSpeed's schedule allreduces,
#    and the compressed exchanges move at most 1/16 of its bytes per step;
#  - a resume at the same world size, from before and after the freeze,
#    continues bit for bit; without the saved error feedback it does not;
#    at another world size the errors restart from zero, with a warning.
# shellcheck disable=SC2154  # stderr, lines: set by bats' run
load helper

MODEL="$DS_SRCDIR/share/models/gpt-test.json"

# cfg FILE TYPE PARAMS LR CSVDIR MB [EXTRA]: 16 samples per step (MB per
# rank), linear warm-up of the lr over 50 steps, clipping at 1; PARAMS are
# JSON members added to the optimizer's params, EXTRA to the top level
cfg() {
	cat >"$1" <<EOF
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": $6, "steps_per_print": 1000, "gradient_clipping": 1.0,
 "optimizer": {"type": "$2", "params": {"lr": $4, "weight_decay": 0.01$3}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": $4, "warmup_num_steps": 50,
                                               "warmup_type": "linear"}},
 "csv_monitor": {"enabled": true, "output_path": "$5", "job_name": "run"}${7:+, $7}}
EOF
}

# train DIR N TYPE PARAMS LR ITERS [EXTRA [ds-train flags...]]: stdout in
# DIR/out, stderr in DIR/err, losses in DIR/csv/run/Train_Samples_train_loss.csv
train() {
	local dir=$1 n=$2 t=$3 p=$4 lr=$5 it=$6 extra=${7:-}
	shift 7 2>/dev/null || shift $#
	mkdir -p "$dir"
	cfg "$dir/ds.json" "$t" "$p" "$lr" "$dir/csv" $((16 / n)) "$extra"
	mpirun_n "$n" "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$dir/ds.json" --model "$MODEL" \
		--train-iters "$it" --peak-gflops 1 "$@" >"$dir/out" 2>"$dir/err" ||
		{ tail -5 "$dir/err" >&2; return 1; }
}

losses() { echo "$1/csv/run/Train_Samples_train_loss.csv"; }

# mean20 DIR: the mean of the last 20 losses
mean20() { tail -n 20 "$(losses "$1")" | awk -F, '{ s += $2 } END { printf "%.6f\n", s / NR }'; }

# within3 A B: mean20 of A within 3% of B's
within3() {
	local a b
	a=$(mean20 "$1") b=$(mean20 "$2")
	awk -v a="$a" -v b="$b" 'BEGIN { r = (a - b) / b; printf "final loss %s against %s (%+.2f%%)\n", a, b, 100 * r
		exit !(r <= 0.03 && r >= -0.03) }'
}

# table OP DIR: comms_logger's summary rows of OP as "bytes count" lines
# (sizes as DeepSpeed's convert_size prints them, read back)
table() {
	awk -v op="$1" '
		function val(s,  v, u) { v = s + 0; u = s; sub(/^[0-9.]+ */, "", u)
			return v * (u == "KB" ? 1024 : u == "MB" ? 1048576 : u == "GB" ? 1073741824 : 1) }
		/^Comm\. Op/ { t = 1; next }
		!t { next }
		/^[^ ]/ { cur = $0; sub(/ +$/, "", cur); next }
		cur == op { s = substr($0, 21, 20); sub(/ +$/, "", s); printf "%.0f %d\n", val(s), substr($0, 41, 20) + 0 }' "$2/out"
}

# bytes OP DIR: the bytes of all OP calls; calls OP DIR: how many
bytes() { table "$1" "$2" | awk '{ s += $1 * $2 } END { printf "%.0f\n", s }'; }
calls() { table "$1" "$2" | awk '{ s += $2 } END { print s + 0 }'; }
# largest OP DIR: "bytes count" of OP's largest message
largest() { table "$1" "$2" | sort -n | tail -n 1; }

@test "compressed allreduce: the hand-worked 2-rank, 2-step example, exactly" {
	run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/onebit_check" example
	assert_success
	assert_output "ok"
}

@test "compressed allreduce at 3 and 4 ranks: the same bits as the ranks played in one process" {
	for n in 3 4; do
		run mpirun_n "$n" "$DS_BUILDDIR/tests/mpi/onebit_check" simulate
		assert_success
		assert_output "ok"
	done
}

LOG='"comms_logger": {"enabled": true}'
# 300 steps, as the issue measures: at 200 the compressed Lamb is still
# ahead of Lamb by more than 3% (it converges faster after the freeze), a
# difference that closes by 300 (-0.5%)
STEPS=300

# ref TYPE LR: the uncompressed STEPS-step run at 2 ranks (made once per file)
ref() {
	local d="$BATS_FILE_TMPDIR/ref-$1"
	[ -s "$(losses "$d")" ] || train "$d" 2 "$1" "" "$2" "$STEPS" "$LOG" >&2 || return 1
	echo "$d"
}

# check_bytes DIR REDUCED: the gradient all_reduce (the largest: every
# parameter, padded per segment) ran REDUCED times; the compressed
# exchanges of the other steps move at most 1/16 of its bytes per step
check_bytes() {
	local d=$1 reduced=$2 grad n a2a ag
	read -r grad n < <(largest all_reduce "$d")
	[ "$n" -eq "$reduced" ] || { echo "$n gradient all_reduces of $grad bytes, expected $reduced" >&2; return 1; }
	a2a=$(bytes all_to_all_single "$d") ag=$(bytes all_gather "$d")
	awk -v a="$a2a" -v g="$ag" -v steps=$((STEPS - reduced)) -v fp32="$grad" 'BEGIN {
		per = (a + g) / steps; printf "compressed %.0f bytes per step, fp32 allreduce %.0f (1/%.1f)\n", per, fp32, fp32 / per
		exit !(per > 0 && per <= fp32 / 16) }'
}

@test "OneBitAdam at 2 ranks: within 3% of Adam; allreduce until freeze_step, then <= 1/16 of its bytes" {
	local r d="$BATS_TEST_TMPDIR/oba"
	r=$(ref Adam 0.001) || fail "Adam reference failed"
	train "$d" 2 OneBitAdam ', "freeze_step": 100' 0.001 "$STEPS" "$LOG" || fail "OneBitAdam failed"
	run within3 "$d" "$r"
	assert_success
	run check_bytes "$d" 100
	assert_success
}

@test "ZeroOneAdam at 2 ranks: within 3% of Adam; allreduce on its variance steps, then <= 1/16 of the bytes" {
	local r d="$BATS_TEST_TMPDIR/zoa"
	r=$(ref Adam 0.001) || fail "Adam reference failed"
	# 64 variance updates per doubling of the interval (DeepSpeed's 16 suits
	# runs of 10^5 steps): steps 1-65 allreduce (set-up and 64 variance
	# steps), then the even steps 66-100 (18), 83 in all; the others send
	# compressed gradients, and after step 101 the accumulated updates
	train "$d" 2 ZeroOneAdam ', "var_freeze_step": 100, "var_update_scaler": 64' 0.001 "$STEPS" "$LOG" ||
		fail "ZeroOneAdam failed"
	run within3 "$d" "$r"
	assert_success
	run check_bytes "$d" 83
	assert_success
}

@test "OneBitLamb at 2 ranks: within 3% of Lamb; allreduce until freeze_step, then <= 1/16 of its bytes" {
	local r d="$BATS_TEST_TMPDIR/obl"
	r=$(ref Lamb 0.03) || fail "Lamb reference failed"
	train "$d" 2 OneBitLamb ', "freeze_step": 100' 0.03 "$STEPS" "$LOG" || fail "OneBitLamb failed"
	run within3 "$d" "$r"
	assert_success
	run check_bytes "$d" 100
	assert_success
}

@test "fp16 OneBitAdam exchanges one fused buffer per step after the freeze, as FP16_Optimizer hands it one flat tensor" {
	local d="$BATS_TEST_TMPDIR/fp16"
	train "$d" 2 OneBitAdam ', "freeze_step": 5' 0.001 12 "$LOG"', "fp16": {"enabled": true, "initial_scale_power": 8}' ||
		fail "fp16 OneBitAdam failed"
	# one all_to_all per step after step 5 (steps 6-12, fewer if a step overflowed)
	n=$(calls all_to_all_single "$d")
	[ "$n" -ge 1 ] && [ "$n" -le 7 ] || fail "$n all_to_all calls: $(cat "$d/out")"
	# of the whole model's signs, one bit per parameter (padded to 16)
	params=$(grep -o '[0-9]* parameters' "$d/err" | head -1 | cut -d' ' -f1)
	read -r sz _ < <(largest all_to_all_single "$d")
	[ "$sz" -ge $((params / 8)) ] && [ "$sz" -le $((params / 8 + 8)) ] || fail "all_to_all of $sz bytes for $params parameters"
	[ "$(table all_to_all_single "$d" | wc -l)" -eq 1 ] || fail "more than one message size: $(cat "$d/out")"
}

# resume_exact TYPE PARAMS LR: the continuous 14-step run at 2 ranks against
# runs resumed from step 3 (before the freeze at 5) and 9 (after it)
resume_exact() {
	local d="$BATS_TEST_TMPDIR/$1"
	train "$d/cont" 2 "$1" "$2" "$3" 14 || return 1
	train "$d/a" 2 "$1" "$2" "$3" 9 "" --save "$d/ck" --save-interval 3 || return 1
	train "$d/b" 2 "$1" "$2" "$3" 14 "" --load "$d/ck/global_step3" || return 1
	train "$d/c" 2 "$1" "$2" "$3" 14 "" --load "$d/ck" || return 1
	grep -q "loaded $d/ck/global_step9" "$d/c/err" || { cat "$d/c/err" >&2; return 1; }
	# bit for bit: the same step and loss text on every line
	for r in b c; do
		diff <(tail -n +2 "$(losses "$d/$r")") <(tail -n "$(($(wc -l <"$(losses "$d/$r")") - 1))" "$(losses "$d/cont")") ||
			{ echo "resumed run $r differs from the continuous one" >&2; return 1; }
	done
	# the saved error feedback is what keeps it exact
	DS_TEST_FAULT_ONEBIT_RESET=1 train "$d/e" 2 "$1" "$2" "$3" 14 "" --load "$d/ck" || return 1
	if diff -q <(tail -n 5 "$(losses "$d/e")") <(tail -n 5 "$(losses "$d/cont")") >/dev/null; then
		echo "resumed without the error feedback, the losses did not change: the check cannot fail" >&2
		return 1
	fi
}

@test "OneBitAdam: resumed across the freeze at the same world size, bit for bit" {
	run resume_exact OneBitAdam ', "freeze_step": 5' 0.001
	assert_success
}

@test "ZeroOneAdam: resumed across the variance freeze and between local steps, bit for bit" {
	# var_freeze_step 4: frozen after step 5; local steps from 6, each
	# synchronised up to step 8, then every second (local_step_scaler 3),
	# then every fourth: saved at 9 between two synchronisations, which the
	# resumed run makes at 10 and 12
	run resume_exact ZeroOneAdam ', "var_freeze_step": 4, "var_update_scaler": 2, "local_step_scaler": 3' 0.001
	assert_success
}

@test "OneBitLamb: resumed across the freeze at the same world size, bit for bit" {
	run resume_exact OneBitLamb ', "freeze_step": 5' 0.03
	assert_success
}

@test "resumed at another world size: the error feedback restarts from zero, 0/1 Adam from rank 0's weights" {
	local d="$BATS_TEST_TMPDIR/ws"
	train "$d/a" 2 ZeroOneAdam ', "var_freeze_step": 4, "var_update_scaler": 2, "local_step_scaler": 3' 0.001 9 "" \
		--save "$d/ck" --save-interval 9 || fail "save run failed"
	train "$d/b" 4 ZeroOneAdam ', "var_freeze_step": 4, "var_update_scaler": 2, "local_step_scaler": 3' 0.001 12 "" \
		--load "$d/ck" || fail "resume at 4 ranks failed"
	grep -q "error feedback was saved at 2 ranks and this run has 4: it starts from zero" "$d/b/err" || fail "$(cat "$d/b/err")"
	grep -q "every rank of this run continues from rank 0's weights and momentum" "$d/b/err" || fail "$(cat "$d/b/err")"
	[ "$(tail -n +2 "$(losses "$d/b")" | wc -l)" -eq 3 ] || fail "$(cat "$(losses "$d/b")")"
}
