#!/usr/bin/env bats
# ZeRO-Infinity at 2 ranks: each rank's optimizer states (and a 16-bit
# run's master weights) and stage-3 parameter slices in its own swap files
# give the 2-rank in-memory run's losses bit for bit; a checkpoint saved
# offloaded at 2 ranks resumes in memory at 1 rank, and one saved in memory
# at 1 rank resumes offloaded at 2, on the continuous run's losses (1e-5,
# the layouts' rounding, as tests/mpi/ckpt.bats); a rank whose nvme_path
# is unusable stops every rank before training, none hangs.  Under tensor
# and pipeline parallelism (issue 19) each rank offloads its shards of its
# stage's segments: TP 2 and PP 2 give the in-memory losses bit for bit.
# shellcheck disable=SC2154  # stderr: set by bats' run --separate-stderr
load train_helper

OPT='"sub_group_size": 8000, "offload_optimizer": {"device": "nvme", "nvme_path": "NV", "buffer_count": 8, "pipeline_read": true}'
PAR='"offload_param": {"device": "nvme", "nvme_path": "NV", "max_in_cpu": 0}'

# offloaded DIR N STAGE MEMBERS [-- flags]: train_run with MEMBERS added to
# zero_optimization (nvme_path DIR/nv)
offloaded() {
	local dir=$1 n=$2 stage=$3 members=$4
	shift 4
	mkdir -p "$dir/nv"
	ZERO_EXTRA="${members//NV/$dir/nv}" train_run "$dir" "$n" "$stage" 1 "$@"
}

@test "2 ranks offloaded: the 2-rank in-memory losses bit for bit (stage 3 fp32 and bf16 with parameters, stages 1-2)" {
	local d="$BATS_TEST_TMPDIR" prec stage members
	for c in "3 fp32 opt,par" "3 bf16 opt,par" "1 bf16 opt" "2 fp32 opt"; do
		read -r stage prec members <<<"$c"
		members=${members/opt/$OPT}
		members=${members/par/$PAR}
		rm -rf "$d/m" "$d/o"
		ITERS=6 PRECISION=$prec train_run "$d/m" 2 "$stage" 1 || fail "$c: in memory: $(tail -3 "$d/m/err")"
		ITERS=6 PRECISION=$prec offloaded "$d/o" 2 "$stage" "$members" || fail "$c: offloaded: $(tail -3 "$d/o/err")"
		grep -q 'nvme swap per step (rank 0)' "$d/o/err" || fail "$c: no swap line: $(cat "$d/o/err")"
		cmp "$(losses "$d/m")" "$(losses "$d/o")" || fail "$c: $(paste -d' ' "$(losses "$d/m")" "$(losses "$d/o")")"
		[ -z "$(ls -A "$d/o/nv")" ] || fail "$c: left in nvme_path: $(ls -A "$d/o/nv")"
	done
}

@test "saved offloaded at 2 ranks, resumed in memory at 1; saved in memory at 1, resumed offloaded at 2" {
	local d="$BATS_TEST_TMPDIR" ref
	ref=$(ITERS=6 reference) || fail "1-rank reference failed"
	ITERS=3 offloaded "$d/a" 2 3 "$OPT, $PAR" -- --save "$d/ck1" || fail "$(tail -3 "$d/a/err")"
	ITERS=6 train_run "$d/b" 1 3 1 -- --load "$d/ck1" || fail "$(tail -3 "$d/b/err")"
	grep -q "loaded $d/ck1/global_step3: step 3" "$d/b/err" || fail "$(cat "$d/b/err")"
	[ "$(tail -n +2 "$(losses "$d/b")" | wc -l)" -eq 3 ] || fail "$(cat "$(losses "$d/b")")"
	run same_losses_from "$(losses "$d/b")" "$(losses "$ref")"
	assert_success
	ITERS=3 train_run "$d/c" 1 0 1 -- --save "$d/ck2" || fail "$(tail -3 "$d/c/err")"
	ITERS=6 offloaded "$d/e" 2 2 "$OPT" -- --load "$d/ck2" || fail "$(tail -3 "$d/e/err")"
	grep -q "loaded $d/ck2/global_step3: step 3" "$d/e/err" || fail "$(cat "$d/e/err")"
	run same_losses_from "$(losses "$d/e")" "$(losses "$ref")"
	assert_success
}

# run_mp DIR TP PP STAGE MEMBERS [ds-train flags]: 2 ranks as tensor TP x
# pipeline PP (data-parallel size 1), 2 x 4 samples per step; MEMBERS (""
# in memory) inside zero_optimization, nvme_path DIR/nv
run_mp() {
	local dir=$1 tp=$2 pp=$3 stage=$4 members=$5
	shift 5
	mkdir -p "$dir/nv"
	ZERO_EXTRA="${members//NV/$dir/nv}" write_cfg "$dir/ds.json" "$stage" 4 2 "$dir/csv"
	mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$dir/ds.json" --model "$MODEL_DROPOUT" \
		--train-iters "$ITERS" --peak-gflops 1 --tensor-model-parallel-size "$tp" \
		--pipeline-model-parallel-size "$pp" "$@" >"$dir/out" 2>"$dir/err"
}

@test "TP 2 and PP 2 offloaded: the in-memory losses bit for bit, the plan equal to the allocation; their checkpoints resume at 1 rank" {
	local d="$BATS_TEST_TMPDIR" tp pp stage prec members ref
	# each rank's swap files hold its tensor-parallel shards of the segments
	# its pipeline stage holds (at stage 3 with data-parallel size 1 every
	# offloaded segment is read from its file before use)
	for c in "2 1 3 fp32 opt,par" "2 1 2 bf16 opt" "1 2 1 bf16 opt" "1 2 1 fp32 opt"; do
		read -r tp pp stage prec members <<<"$c"
		members=${members/opt/$OPT}
		members=${members/par/$PAR}
		rm -rf "$d/m" "$d/o"
		ITERS=6 PRECISION=$prec run_mp "$d/m" "$tp" "$pp" "$stage" "" || fail "$c: in memory: $(tail -3 "$d/m/err")"
		ITERS=6 PRECISION=$prec run_mp "$d/o" "$tp" "$pp" "$stage" "$members" || fail "$c: offloaded: $(tail -3 "$d/o/err")"
		grep -q 'nvme swap per step (rank 0)' "$d/o/err" || fail "$c: no swap line: $(cat "$d/o/err")"
		cmp "$(losses "$d/m")" "$(losses "$d/o")" || fail "$c: $(paste -d' ' "$(losses "$d/m")" "$(losses "$d/o")")"
		grep -q '^memory per rank .*| alloc/estimate 1\.0000 |' "$d/o/out" || fail "$c: plan: $(grep '^memory' "$d/o/out")"
		[ -z "$(ls -A "$d/o/nv")" ] || fail "$c: left in nvme_path: $(ls -A "$d/o/nv")"
	done
	# checkpoints written piecewise from the shards' swap files
	ref=$(ITERS=6 reference) || fail "1-rank reference failed"
	for c in "2 1 3 opt,par" "1 2 1 opt"; do
		read -r tp pp stage members <<<"$c"
		members=${members/opt/$OPT}
		members=${members/par/$PAR}
		rm -rf "$d/a" "$d/b" "$d/ck"
		ITERS=3 run_mp "$d/a" "$tp" "$pp" "$stage" "$members" --save "$d/ck" || fail "$c: $(tail -3 "$d/a/err")"
		ITERS=6 train_run "$d/b" 1 "$stage" 1 -- --load "$d/ck" || fail "$c: $(tail -3 "$d/b/err")"
		grep -q "loaded $d/ck/global_step3: step 3" "$d/b/err" || fail "$c: $(cat "$d/b/err")"
		same_losses_from "$(losses "$d/b")" "$(losses "$ref")" || fail "$c: resumed at 1 rank"
	done
}

@test "one rank's unusable nvme_path stops both ranks before training, with its reason" {
	local d="$BATS_TEST_TMPDIR"
	mkdir -p "$d/nv"
	ZERO_EXTRA="${OPT//NV/$d/nv}" write_cfg "$d/ds.json" 3 4 1 "$d/csv"
	# rank 1 alone sees a full device
	# shellcheck disable=SC2016  # the inner shell expands them, per rank
	run -2 --separate-stderr mpirun_n 2 bash -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export DS_TEST_NVME_FREE_BYTES=4096; exec "$0" "$@"' \
		"$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$d/ds.json" --model "$MODEL_DROPOUT" --train-iters 2
	[[ "$stderr" == *"'$d/nv' has 4.0 KiB (4096 bytes) free but the swap files need"* ]] || fail "$stderr"
	[[ "$stderr" == *"another rank's nvme_path is not usable"* ]] || fail "$stderr"
	[ ! -e "$d/csv" ] || fail "training started"
}
