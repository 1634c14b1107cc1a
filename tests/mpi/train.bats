#!/usr/bin/env bats
# The oracle of the distributed engine (DESIGN.md): the tiny model with
# dropout trains 20 steps at 1, 2 and 4 ranks x ZeRO stages 0-3, with and
# without gradient accumulation, and every logged loss equals the 1-rank
# run's to 1e-5 relative.  A planted partitioning fault must break it.
load train_helper

@test "1 rank: stages 1-3 and gradient accumulation give the stage-0 losses" {
	for s in 1 2 3; do check_layout 1 $s 1; done
	for s in 0 1 2 3; do check_layout 1 $s 2; done
}

@test "2 ranks, ZeRO stage 0: the 1-rank losses, with and without accumulation" {
	check_layout 2 0 1
	check_layout 2 0 2
}

@test "2 ranks, ZeRO stage 1: the 1-rank losses, with and without accumulation" {
	check_layout 2 1 1
	check_layout 2 1 2
}

@test "2 ranks, ZeRO stage 2: the 1-rank losses, with and without accumulation" {
	check_layout 2 2 1
	check_layout 2 2 2
}

@test "2 ranks, ZeRO stage 3: the 1-rank losses, with and without accumulation" {
	check_layout 2 3 1
	check_layout 2 3 2
}

@test "4 ranks, ZeRO stage 0: the 1-rank losses, with and without accumulation" {
	check_layout 4 0 1
	check_layout 4 0 2
}

@test "4 ranks, ZeRO stage 1: the 1-rank losses, with and without accumulation" {
	check_layout 4 1 1
	check_layout 4 1 2
}

@test "4 ranks, ZeRO stage 2: the 1-rank losses, with and without accumulation" {
	check_layout 4 2 1
	check_layout 4 2 2
}

@test "4 ranks, ZeRO stage 3: the 1-rank losses, with and without accumulation" {
	check_layout 4 3 1
	check_layout 4 3 2
}

@test "the comparison fails for another seed (it can fail)" {
	ref=$(reference)
	train_run "$BATS_TEST_TMPDIR/seed" 1 0 1 -- --seed 7
	run same_losses "$(losses "$BATS_TEST_TMPDIR/seed")" "$(losses "$ref")"
	assert_failure
	assert_output --partial "reference"
}

@test "a ZeRO slice shifted by one element on rank 0 makes the comparison fail (stage 1, 2 ranks)" {
	ref=$(reference)
	train_run "$BATS_TEST_TMPDIR/fault" 2 1 1 DS_TEST_FAULT_SHARD_SHIFT=1
	run same_losses "$(losses "$BATS_TEST_TMPDIR/fault")" "$(losses "$ref")"
	assert_failure
	assert_output --partial "relative"
}

@test "a ZeRO slice shifted by one element on rank 0 makes the comparison fail (stage 2, 4 ranks, GA 2)" {
	ref=$(reference)
	train_run "$BATS_TEST_TMPDIR/fault" 4 2 2 DS_TEST_FAULT_SHARD_SHIFT=1
	run same_losses "$(losses "$BATS_TEST_TMPDIR/fault")" "$(losses "$ref")"
	assert_failure
	assert_output --partial "relative"
}

@test "a rank that fails makes the whole job exit non-zero, naming the rank" {
	write_cfg "$BATS_TEST_TMPDIR/ds.json" 1 4 1 "$BATS_TEST_TMPDIR/csv"
	run --separate-stderr timeout 120 $MPIRUN -np 2 -x OMP_NUM_THREADS=1 env DS_TEST_FAULT_FAIL_RANK=1:3 \
		"$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$BATS_TEST_TMPDIR/ds.json" \
		--model "$MODEL_DROPOUT" --train-iters 10 --peak-gflops 1
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || { echo "status $status" >&2; false; }
	[[ "$stderr" == *"rank 1: step 3: planted failure"* ]] || { echo "$stderr" >&2; false; }
	# no step after the failure was logged by rank 0
	refute_output --partial "step 10/10"
}
