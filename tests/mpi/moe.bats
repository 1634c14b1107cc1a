#!/usr/bin/env bats
# Expert parallelism (issue 23): EP 2, EP 2 x DP 2 and EP 4 give the 1-rank
# losses within 1e-5 relative over 20 steps of a top-1 MoE model with
# token dropping, RSample noise, random token selection and dropout (the
# 1-rank run uses the same micro batch, so every gating group is the same
# tokens); a checkpoint saved at EP 4 resumes at EP 2 on 2 ranks with the
# same losses.  The comms logger sees the experts' all_to_all_single.
load train_helper

MOE="$TDATA/gpt-test-moe.json"

# the test model with moe.ep_size $1, in the file's directory $2
moe_model() { sed "s/\"ep_size\": 1/\"ep_size\": $1/" "$MOE" >"$2/moe-ep$1.json"; echo "$2/moe-ep$1.json"; }

setup_file() {
	# the references: 1 rank, micro batch 4 (GA 2) and 2 (GA 4)
	MODEL_DROPOUT="$MOE" train_run "$BATS_FILE_TMPDIR/ref-mb4" 1 0 2
	MODEL_DROPOUT="$MOE" train_run "$BATS_FILE_TMPDIR/ref-mb2" 1 0 4
}

@test "EP 2 (2 ranks, ZeRO 1): the 1-rank losses" {
	local d="$BATS_TEST_TMPDIR/ep2"
	mkdir -p "$d"
	MODEL_DROPOUT=$(moe_model 2 "$d") train_run "$d" 2 1 1 || fail "$(cat "$d/err")"
	same_losses "$(losses "$d")" "$(losses "$BATS_FILE_TMPDIR/ref-mb4")"
}

@test "EP 2 x DP 2 (4 ranks, ZeRO 2, expert parameters sharded over 2): the 1-rank losses" {
	local d="$BATS_TEST_TMPDIR/ep2dp2"
	mkdir -p "$d"
	MODEL_DROPOUT=$(moe_model 2 "$d") train_run "$d" 4 2 1 || fail "$(cat "$d/err")"
	same_losses "$(losses "$d")" "$(losses "$BATS_FILE_TMPDIR/ref-mb2")"
}

@test "EP 4 (4 ranks, ZeRO 0) saves; EP 2 on 2 ranks resumes: the 1-rank losses, the all-to-alls logged" {
	local d="$BATS_TEST_TMPDIR/ep4" r="$BATS_TEST_TMPDIR/resume"
	mkdir -p "$d" "$r"
	CFG_EXTRA='"comms_logger": {"enabled": true, "prof_all": true}' MODEL_DROPOUT=$(moe_model 4 "$d") \
		train_run "$d" 4 0 1 -- --save "$d/ck" --save-interval 10 || fail "$(cat "$d/err")"
	same_losses "$(losses "$d")" "$(losses "$BATS_FILE_TMPDIR/ref-mb2")"
	grep -q "all_to_all_single" "$d/out" || fail "no all_to_all_single in the comms table: $(cat "$d/out")"
	# the checkpoint holds every expert whole; 2 ranks (micro batch 2, GA 2) at EP 2 go on from step 10
	echo global_step10 >"$d/ck/latest"
	MODEL_DROPOUT=$(moe_model 2 "$r") train_run "$r" 2 1 2 -- --load "$d/ck" || fail "$(cat "$r/err")"
	grep -q "step 20/20" "$r/out" || fail "$(cat "$r/out")"
	tail -n 10 "$(losses "$BATS_FILE_TMPDIR/ref-mb2")" >"$r/ref-tail.csv"
	sed -i '1i step,train_loss' "$r/ref-tail.csv"
	same_losses "$(losses "$r")" "$r/ref-tail.csv"
}
