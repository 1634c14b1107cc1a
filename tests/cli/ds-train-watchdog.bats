#!/usr/bin/env bats
# ds-train-watchdog.bats - the hang watchdog at one rank (any build; the
# multi-rank reports are in tests/mpi/watchdog.bats and tests/slurm).
# DS_TEST_WATCHDOG_STALL=RANK:STEP is a test-only variable that makes that
# rank hang at that step.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	mkdir hb
	cat >ds.json <<-'EOF'
	{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1,
	 "optimizer": {"type": "AdamW", "params": {"lr": 0.002}},
	 "dstk": {"watchdog_timeout_s": 3, "watchdog_dir": "hb"}}
	EOF
}

train() {
	bounded 120 ds-train --deepspeed_config ds.json --model "$SHARE/models/gpt-test.json" --train-iters 5 \
		--peak-gflops 1 "$@"
}

@test "watchdog: a single rank that stalls exits 5, names itself and keeps the report" {
	DS_TEST_WATCHDOG_STALL=0:3 run --separate-stderr train
	[ "$status" -eq 5 ] || { echo "$stderr" >&2; fail "exit $status"; }
	echo "$stderr" | grep -q "rank 0 on $(hostname) (pid [0-9]*): step 3, train_step(DS_TEST_WATCHDOG_STALL), not in a collective" ||
		{ echo "$stderr" >&2; false; }
	echo "$stderr" | grep -q "watchdog: stalled: rank 0 on $(hostname)"
	# steps 1 and 2 ran, step 3 never finished
	[[ "$output" == *"step 2/5"* ]] || fail "$output"
	[[ "$output" != *"step 3/5"* ]] || fail "$output"
	grep -q "watchdog: stalled: rank 0" hb/ds-watchdog-*/report
}

@test "watchdog: a stall at another rank or step does not fire; the run ends normally and removes its heartbeats" {
	sed -i 's/"watchdog_timeout_s": 3/"watchdog_timeout_s": 30/' ds.json
	DS_TEST_WATCHDOG_STALL=1:3 run -0 --separate-stderr train
	assert_output --partial "step 5/5"
	echo "$stderr" | grep -q "watchdog: timeout 30 s, heartbeats in hb/ds-watchdog-"
	[ -z "$(ls -A hb)" ]
}
