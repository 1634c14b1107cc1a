#!/usr/bin/env bats
# Checkpoints do not depend on the layout: saved at N ranks and ZeRO stage
# S after 10 steps, loaded at M ranks and stage S', the remaining 10 steps
# log the losses of the continuous 1-rank run (within 1e-5 relative).
load train_helper

# resume_check N S M S2: save at step 10 under (N, S), resume under (M, S2)
resume_check() {
	local ref d="$BATS_TEST_TMPDIR"
	ref=$(reference) || return 1
	ITERS=10 train_run "$d/a" "$1" "$2" 1 -- --save "$d/ckpt" --save-interval 10 ||
		{ tail -5 "$d/a/err" >&2; return 1; }
	[ -f "$d/ckpt/global_step10/state.h5" ] || { echo "no checkpoint at step 10" >&2; return 1; }
	train_run "$d/b" "$3" "$4" 1 -- --load "$d/ckpt" || { tail -5 "$d/b/err" >&2; return 1; }
	grep -q "loaded $d/ckpt/global_step10: step 10" "$d/b/err" || { cat "$d/b/err" >&2; return 1; }
	# the resumed run logs steps 11-20 only, each equal to the continuous run's
	[ "$(tail -n +2 "$(losses "$d/b")" | wc -l)" -eq 10 ] || { cat "$(losses "$d/b")" >&2; return 1; }
	same_losses_from "$(losses "$d/b")" "$(losses "$ref")"
}

@test "saved at 4 ranks stage 2, resumed at 1 rank stage 0: the continuous run's losses" {
	resume_check 4 2 1 0
}

@test "saved at 1 rank stage 0, resumed at 4 ranks stage 3: the continuous run's losses" {
	resume_check 1 0 4 3
}

@test "saved at 2 ranks stage 1, resumed at 4 ranks stage 2: the continuous run's losses" {
	resume_check 2 1 4 2
}

@test "saved at 4 ranks stage 3, resumed at 2 ranks stage 1: the continuous run's losses" {
	resume_check 4 3 2 1
}

# bf16 at stages 1-2 keeps the fp32 master for the owned slice only: a save
# at 2 ranks stage 1 writes the full fp32 tensors from the slices, and a
# resume at the same layout continues the continuous 2-rank run exactly; at
# 4 ranks stage 2 it follows the 1-rank bf16 run to bf16's layout tolerance
# (2e-3, as tests/mpi/train.bats).  A 16-bit copy not refreshed whole after
# the load (other ranks' slices stale) fails both.
@test "bf16: saved at 2 ranks stage 1, resumed at 2 ranks stage 1 (exact) and at 4 ranks stage 2" {
	export PRECISION=bf16
	local d="$BATS_TEST_TMPDIR" ref
	train_run "$d/cont" 2 1 1 || { tail -5 "$d/cont/err"; fail "continuous 2-rank run failed"; }
	ITERS=10 train_run "$d/a" 2 1 1 -- --save "$d/ckpt" --save-interval 10 || { tail -5 "$d/a/err"; fail "save run failed"; }
	[ -f "$d/ckpt/global_step10/state.h5" ] || fail "no checkpoint at step 10"
	train_run "$d/b" 2 1 1 -- --load "$d/ckpt" || { tail -5 "$d/b/err"; fail "resume at 2 ranks failed"; }
	[ "$(tail -n +2 "$(losses "$d/b")" | wc -l)" -eq 10 ] || fail "$(cat "$(losses "$d/b")")"
	run same_losses_from "$(losses "$d/b")" "$(losses "$d/cont")"
	assert_success
	train_run "$d/c" 4 2 1 -- --load "$d/ckpt" || { tail -5 "$d/c/err"; fail "resume at 4 ranks failed"; }
	grep -q "loaded $d/ckpt/global_step10: step 10" "$d/c/err" || fail "$(cat "$d/c/err")"
	ref=$(reference) || fail "1-rank bf16 reference failed"
	RTOL=2e-3 run same_losses_from "$(losses "$d/c")" "$(losses "$ref")"
	assert_success
}

@test "resuming without the optimizer state does not give the continuous run's losses (the check can fail)" {
	ref=$(reference)
	d="$BATS_TEST_TMPDIR"
	ITERS=10 train_run "$d/a" 2 1 1 -- --save "$d/ckpt" --save-interval 10
	train_run "$d/b" 2 1 1 -- --load "$d/ckpt" --no-load-optim
	run same_losses_from "$(losses "$d/b")" "$(losses "$ref")"
	assert_failure
}

# ---- parallel saves: one file, whole tensors, checksums of several writers

@test "3 ranks writing uneven slices across 24-byte CRC chunks: the file a serial save writes (h5diff), every chunk verifies" {
	d="$BATS_TEST_TMPDIR"
	run mpirun_n 3 "$DS_BUILDDIR/tests/mpi/ckpt_check" "$d"
	assert_success
	# same datasets, values and attributes (crc32c arrays included)
	run h5diff "$d/par/global_step7/state.h5" "$d/ser/global_step7/state.h5"
	assert_success
	run ds-ckpt-convert verify "$d/par"
	assert_success
	assert_output --partial "# 4 tensors, 0 bad checksums"
}

@test "ckpt_check: one of 4 ranks failing its write fails the commit on all 4, latest stays" {
	d="$BATS_TEST_TMPDIR"
	run mpirun_n 4 "$DS_BUILDDIR/tests/mpi/ckpt_check" "$d" fail 2
	assert_success
	[ "$(cat "$d/par/latest")" = global_step1 ]
	[ ! -e "$d/par/global_step2" ] || fail "global_step2 was created"
	[ ! -e "$d/par/global_step2.tmp" ] || fail "global_step2.tmp was left"
}

@test "a 4-rank stage-1 save is one state.h5 of whole tensors whose chunk checksums verify" {
	d="$BATS_TEST_TMPDIR"
	# gpt-test's tensors are smaller than one CRC chunk (1 MiB): every
	# chunk is written by several ranks, its CRC combined from their pieces
	ITERS=4 train_run "$d/a" 4 1 1 -- --save "$d/ckpt" --save-interval 4 || { tail -5 "$d/a/err"; false; }
	run ls "$d/ckpt/global_step4"
	assert_output "state.h5
state.h5.manifest"
	run ds-ckpt-convert inspect "$d/ckpt"
	assert_success
	assert_line --regexp '^world size +4 \(at save\)'
	assert_line --regexp '^zero stage +1 \(at save\)'
	# the full logical shapes, never flat shards (wte is vocab x hidden)
	assert_line --regexp '^ *model/transformer\.wte\.weight +\[256, 64\]'
	assert_line --regexp '^ *optimizer/exp_avg_sq/transformer\.h\.1\.mlp\.c_proj\.weight +\[64, 256\]'
	run ds-ckpt-convert verify "$d/ckpt"
	assert_success
	assert_output --partial ", 0 bad checksums"
}

@test "a rank failing during a parallel save: no rank renames, latest stays, the job names the rank" {
	d="$BATS_TEST_TMPDIR"
	ITERS=10 train_run "$d/a" 4 2 1 -- --save "$d/ckpt" --save-interval 10 || { tail -5 "$d/a/err"; false; }
	[ "$(cat "$d/ckpt/latest")" = global_step10 ]
	run train_run "$d/b" 4 2 1 DS_TEST_FAULT_CKPT_FAIL_RANK=2 -- --load "$d/ckpt" --save "$d/ckpt" --save-interval 10
	assert_failure
	# the ranks end with rank 2's line, which says what latest still names
	# (mpirun kills the ranks still printing once one has exited 1: count
	# the lines that came out, all the same)
	grep -q "rank 2: planted write failure (DS_TEST_FAULT_CKPT_FAIL_RANK); .*/latest still names global_step10" \
		"$d/b/err" || { cat "$d/b/err"; false; }
	[ "$(grep '^ds-train: .*global_step20' "$d/b/err" | sort -u | wc -l)" -eq 1 ] || { cat "$d/b/err"; false; }
	[ "$(cat "$d/ckpt/latest")" = global_step10 ]
	[ ! -e "$d/ckpt/global_step20" ] || fail "global_step20 was created"
	[ ! -e "$d/ckpt/global_step20.tmp" ] || fail "global_step20.tmp was left"
	run ds-ckpt-convert verify "$d/ckpt"
	assert_success
	# the same run without the fault saves step 20
	train_run "$d/c" 4 2 1 -- --load "$d/ckpt" --save "$d/ckpt" --save-interval 10 || { tail -5 "$d/c/err"; false; }
	[ "$(cat "$d/ckpt/latest")" = global_step20 ]
}

# ---- checkpoint.tag_validation (DeepSpeed: Warn logs, Fail refuses, Ignore skips)

@test "tag_validation Fail: a rank with another tag fails the save before anything is written" {
	d="$BATS_TEST_TMPDIR"
	CFG_EXTRA='"checkpoint": {"tag_validation": "Fail"}' run train_run "$d/a" 2 1 1 \
		DS_TEST_FAULT_CKPT_TAG_RANK=1 -- --save "$d/ckpt" --save-interval 5
	assert_failure
	run cat "$d/a/err"
	assert_output --partial "checkpoint tag global_step6 of rank 1 is not the same on all ranks (checkpoint.tag_validation is Fail); nothing was saved"
	[ ! -e "$d/ckpt/latest" ]
	[ -z "$(ls -A "$d/ckpt" 2>/dev/null)" ]
	# agreeing ranks save as usual under Fail
	CFG_EXTRA='"checkpoint": {"tag_validation": "FAIL"}' train_run "$d/b" 2 1 1 -- --save "$d/ck2" --save-interval 5 ||
		{ tail -5 "$d/b/err"; false; }
	[ "$(cat "$d/ck2/latest")" = global_step20 ]
}

@test "tag_validation Warn (the default): the mismatch is logged and rank 0's tag is saved" {
	d="$BATS_TEST_TMPDIR"
	ITERS=5 train_run "$d/a" 2 1 1 DS_TEST_FAULT_CKPT_TAG_RANK=1 -- --save "$d/ckpt" --save-interval 5 ||
		{ tail -5 "$d/a/err"; false; }
	run cat "$d/a/err"
	assert_output --partial "warning: checkpoint tag global_step5 (rank 0's) is not the same on all ranks; saving under it (checkpoint.tag_validation is Warn)"
	[ "$(cat "$d/ckpt/latest")" = global_step5 ]
	run ds-ckpt-convert verify "$d/ckpt"
	assert_success
}

@test "tag_validation Ignore: no comparison, no message, the save goes on" {
	d="$BATS_TEST_TMPDIR"
	CFG_EXTRA='"checkpoint": {"tag_validation": "ignore"}' ITERS=5 train_run "$d/a" 2 1 1 \
		DS_TEST_FAULT_CKPT_TAG_RANK=1 -- --save "$d/ckpt" --save-interval 5 || { tail -5 "$d/a/err"; false; }
	run grep -c "not the same on all ranks" "$d/a/err"
	assert_output 0
	[ "$(cat "$d/ckpt/latest")" = global_step5 ]
}
