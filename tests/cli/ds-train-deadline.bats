#!/usr/bin/env bats
# ds-train-deadline.bats - before saving on SIGUSR1/SIGTERM, ds-train
# compares the last save's duration with the time the job has left
# (SLURM_JOB_END_TIME, else dstk.signal_lead_s) and warns when the save
# cannot fit.
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	cat >cfg.json <<'JSON'
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
JSON
}

# signalled END_TIME [flags...]: train in the background, USR1 once a
# checkpoint exists (or after 1 s without --save-interval), expect exit 4
signalled() {
	local end=$1
	shift
	rm -rf ck
	SLURM_JOB_END_TIME=$end ds-train --deepspeed_config cfg.json --model "$SHARE/models/gpt-test.json" \
		--train-iters 1000000 --peak-gflops 1 --save ck "$@" >out.txt 2>err.txt &
	local pid=$!
	for _ in $(seq 300); do
		if { [ -s ck/latest ] || [ $# -eq 0 ]; } && grep -q "steps from step" err.txt; then break; fi
		sleep 0.1
	done
	kill -USR1 $pid
	local rc=0
	wait_pid 120 $pid "ds-train to save and exit after SIGUSR1" || rc=$?
	[ "$rc" -eq 4 ] || { cat err.txt >&2; kill -9 $pid 2>/dev/null; return 1; }
}

@test "a save that took longer than the time left (end time passed) is warned about before saving" {
	signalled $(($(date +%s) - 10)) --save-interval 1
	grep -q "signal 10: the last save took [0-9.]* s but the job ends in 0 s (SLURM_JOB_END_TIME): this save may not finish" err.txt ||
		{ cat err.txt >&2; false; }
	# the warning comes before the save it is about, and the save still happens
	[ "$(grep -n 'may not finish' err.txt | cut -d: -f1)" -lt "$(grep -n 'stopped by signal' err.txt | cut -d: -f1)" ]
	grep -q "stopped by signal 10 at step [0-9]* after saving" err.txt
}

@test "a save that fits in the time left is not warned about" {
	signalled $(($(date +%s) + 100000)) --save-interval 1
	grep -q "signal 10: the last save took [0-9.]* s, the job ends in [0-9]* s (SLURM_JOB_END_TIME): saving" err.txt || { cat err.txt >&2; false; }
	run -1 grep -q "may not finish" err.txt
}

@test "no save timed yet in this run: the time left is logged, no warning" {
	signalled $(($(date +%s) + 100000))
	grep -q "signal 10: the job ends in [0-9]* s (SLURM_JOB_END_TIME); no save timed yet in this run" err.txt ||
		{ cat err.txt >&2; false; }
	run -1 grep -q "may not finish" err.txt
}

@test "without SLURM_JOB_END_TIME, dstk.signal_lead_s is the time left: a tiny one warns, a large one does not" {
	jq '.dstk.signal_lead_s = 0.001' cfg.json >c
	mv c cfg.json
	signalled "" --save-interval 1
	grep -q "signal 10: the last save took [0-9.]* s but the job ends in 0 s (dstk.signal_lead_s after the signal): this save may not finish" err.txt ||
		{ cat err.txt >&2; false; }
	jq '.dstk.signal_lead_s = 100000' cfg.json >c
	mv c cfg.json
	signalled "" --save-interval 1
	grep -q "signal 10: the last save took [0-9.]* s, the job ends in [0-9]* s (dstk.signal_lead_s after the signal): saving" err.txt ||
		{ cat err.txt >&2; false; }
	# SLURM_JOB_END_TIME, when set, wins
	signalled $(($(date +%s) - 10)) --save-interval 1
	grep -q "ends in 0 s (SLURM_JOB_END_TIME): this save may not finish" err.txt
}

@test "without SLURM_JOB_END_TIME or dstk.signal_lead_s nothing is compared" {
	signalled "" --save-interval 1
	run -1 grep -q "SLURM_JOB_END_TIME\|the job ends in" err.txt
}
