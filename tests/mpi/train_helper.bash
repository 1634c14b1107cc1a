# train_helper.bash - shared by tests/mpi/train.bats and ckpt.bats: write a
# DeepSpeed config whose global batch is 8 samples whatever the layout, run
# ds-train at N ranks, and compare the per-step losses of two CSV monitors.
load helper

MODEL_DROPOUT="$TDATA/gpt-test-dropout.json"
ITERS=20

# write_cfg FILE STAGE MB GA CSVDIR: AdamW with clipping, small buckets so
# the bucketed reductions really split, CSV monitor under CSVDIR/run.
# OVERLAP_COMM=true|false sets zero_optimization.overlap_comm (unset: the
# inferred default, true at stage 3 only); CFG_EXTRA (JSON members, e.g.
# '"checkpoint": {...}') is added when set, ZERO_EXTRA (members, e.g.
# '"offload_optimizer": {...}') inside zero_optimization.
# PRECISION=fp16|bf16 in the environment adds that section (fp16: dynamic
# scaling from 2^12, doubling every 5 clean steps; no step of these runs
# overflows).
write_cfg() {
	# stage 3: partition every segment; prefetch the embeddings and the
	# final norm (< 30000 elements) but not the layers (~50000)
	local s3=""
	[ "$2" -eq 3 ] && s3=', "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 30000'
	[ -n "${OVERLAP_COMM:-}" ] && s3="$s3, \"overlap_comm\": $OVERLAP_COMM"
	local mixed=""
	case "${PRECISION:-fp32}" in
	fp16) mixed=', "fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 5}' ;;
	bf16) mixed=', "bf16": {"enabled": true}' ;;
	esac
	cat >"$1" <<EOF
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": $3, "gradient_accumulation_steps": $4,
 "steps_per_print": 1000, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $2, "reduce_bucket_size": 5000, "allgather_bucket_size": 5000$s3${ZERO_EXTRA:+, $ZERO_EXTRA}},
 "csv_monitor": {"enabled": true, "output_path": "$5", "job_name": "run"}$mixed${CFG_EXTRA:+, $CFG_EXTRA}}
EOF
}

# train_run DIR N STAGE GA [ENV=VALUE...] -- [ds-train flags]: 8 samples per
# step as (8/N/GA) x GA x N; losses land in DIR/csv/run/Train_Samples_train_loss.csv.
# MODEL in the environment replaces the model JSON (default MODEL_DROPOUT).
train_run() {
	local dir=$1 n=$2 stage=$3 ga=$4
	shift 4
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
	[ "${1:-}" = "--" ] && shift
	mkdir -p "$dir"
	write_cfg "$dir/ds.json" "$stage" $((8 / n / ga)) "$ga" "$dir/csv"
	local cmd=(env "${envs[@]}" "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$dir/ds.json"
		--model "${MODEL:-$MODEL_DROPOUT}" --train-iters "$ITERS" --peak-gflops 1 "$@")
	if [ "$n" -eq 1 ]; then
		OMP_NUM_THREADS=1 "${cmd[@]}" >"$dir/out" 2>"$dir/err"
	else
		mpirun_n "$n" "${cmd[@]}" >"$dir/out" 2>"$dir/err"
	fi
}

losses() { echo "$1/csv/run/Train_Samples_train_loss.csv"; }

# same_losses A B: the same steps, each loss within RTOL (default 1e-5)
# relative of B's (B is the reference); prints the first disagreements and
# fails.
same_losses() {
	awk -F, -v rtol="${RTOL:-1e-5}" '
	NR == FNR { step[FNR] = $1; ref[FNR] = $2; n = FNR; next }
	FNR > 1 {
		m = FNR
		if ($1 != step[FNR]) { printf "row %d: step %s, reference step %s\n", FNR, $1, step[FNR]; bad = 1; next }
		d = $2 - ref[FNR]; if (d < 0) d = -d
		r = ref[FNR] < 0 ? -ref[FNR] : ref[FNR]
		if (!(d <= rtol * r)) {
			if (shown++ < 5) printf "step %s: loss %s, reference %s (relative %.3g)\n", $1, $2, ref[FNR], d / r
			bad = 1
		}
	}
	END {
		if (m != n) { printf "%d losses, reference has %d\n", m - 1, n - 1; bad = 1 }
		if (n - 1 < 1) { print "reference has no losses"; bad = 1 }
		exit bad
	}' "$2" "$1"
}

# reference [STAGE]: the 1-rank, no-accumulation run at STAGE (default 0;
# made once per file, stage and PRECISION)
reference() {
	local stage=${1:-0}
	local dir="$BATS_FILE_TMPDIR/ref-s$stage${PRECISION:+-$PRECISION}"
	if [ ! -s "$(losses "$dir")" ]; then
		train_run "$dir" 1 "$stage" 1 || { cat "$dir/err" >&2; return 1; }
	fi
	echo "$dir"
}

# check_layout N STAGE GA: train at that layout and compare with the
# reference.  fp16 compares stages >= 1 with the 1-rank stage-1 run: its
# loss scaler follows DeepSpeed's ZeRO path there and FP16_Optimizer's at
# stage 0, so the two skip different steps.
check_layout() {
	local ref dir="$BATS_TEST_TMPDIR/n$1-s$2-ga$3${OVERLAP_COMM:+-overlap-$OVERLAP_COMM}${PRECISION:+-$PRECISION}" rs=0
	[ "${PRECISION:-}" = fp16 ] && [ "$2" -ge 1 ] && rs=1
	ref=$(reference $rs) || return 1
	if ! train_run "$dir" "$1" "$2" "$3"; then
		echo "ds-train at $1 ranks, stage $2, GA $3 failed:" >&2
		tail -5 "$dir/err" >&2
		return 1
	fi
	[ "$(wc -l <"$(losses "$dir")")" -gt "$ITERS" ] || { echo "fewer than $ITERS losses logged" >&2; return 1; }
	same_losses "$(losses "$dir")" "$(losses "$ref")"
}

# same_losses_from A B: every step A logged (at least one) is in B with a
# loss within RTOL (default 1e-5) relative; for a resumed run A against a
# continuous B.
same_losses_from() {
	awk -F, -v rtol="${RTOL:-1e-5}" '
	NR == FNR { if (FNR > 1) ref[$1] = $2; next }
	FNR > 1 {
		m++
		if (!($1 in ref)) { printf "step %s is not in the reference\n", $1; bad = 1; next }
		d = $2 - ref[$1]; if (d < 0) d = -d
		r = ref[$1] < 0 ? -ref[$1] : ref[$1]
		if (!(d <= rtol * r)) {
			if (shown++ < 5) printf "step %s: loss %s, reference %s (relative %.3g)\n", $1, $2, ref[$1], d / r
			bad = 1
		}
	}
	END { if (m < 1) { print "no losses logged"; bad = 1 } exit bad }' "$2" "$1"
}
