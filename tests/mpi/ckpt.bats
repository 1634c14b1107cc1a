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

@test "resuming without the optimizer state does not give the continuous run's losses (the check can fail)" {
	ref=$(reference)
	d="$BATS_TEST_TMPDIR"
	ITERS=10 train_run "$d/a" 2 1 1 -- --save "$d/ckpt" --save-interval 10
	train_run "$d/b" 2 1 1 -- --load "$d/ckpt" --no-load-optim
	run same_losses_from "$(losses "$d/b")" "$(losses "$ref")"
	assert_failure
}
