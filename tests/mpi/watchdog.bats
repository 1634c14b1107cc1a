#!/usr/bin/env bats
# watchdog.bats - dstk.watchdog_timeout_s: one rank made to hang on purpose
# (DS_TEST_WATCHDOG_STALL=RANK:STEP, a test-only variable) ends the whole
# job with status 5 and a report naming the stalled rank and its host; a
# healthy run with the watchdog on trains as without it.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

setup() {
	require_feature mpi
	cd "$BATS_TEST_TMPDIR" || return
	HOST=$(hostname)
	write_cfg 0
}

# write_cfg TIMEOUT [EXTRA_DSTK_JSON]
write_cfg() {
	cat >ds.json <<-EOF
	{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1000,
	 "optimizer": {"type": "AdamW", "params": {"lr": 0.002}},
	 "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "run"},
	 "dstk": {"watchdog_timeout_s": $1 ${2:-}}}
	EOF
}

# train N [ENV=V...]: ds-train at N ranks, 12 steps; a hang fails at 120 s
train() {
	local n=$1
	shift
	# shellcheck disable=SC2086  # $MPIRUN is a command with its options
	bounded 120 env "$@" $MPIRUN -np "$n" -x OMP_NUM_THREADS=1 -x DS_TEST_WATCHDOG_STALL \
		ds-train --deepspeed_config ds.json --model "$SHARE/models/gpt-test.json" --train-iters 12 \
		--peak-gflops 1
}

@test "watchdog: rank 1 stalls at step 5 of 2: exit 5, the report names rank 1 and its host, rank 0 waits in a collective" {
	write_cfg 3 ', "watchdog_dir": "."'
	run --separate-stderr train 2 DS_TEST_WATCHDOG_STALL=1:5
	[ "$status" -eq 5 ] || { echo "$stderr" >&2; fail "exit $status"; }
	echo "$stderr" | grep -q "watchdog: stalled: rank 1 on $HOST (outside any collective" || { echo "$stderr" >&2; false; }
	echo "$stderr" | grep -q "rank 0 on $HOST (pid [0-9]*): step 5, train_step, in all_reduce"
	echo "$stderr" | grep -q "rank 1 on $HOST (pid [0-9]*): step 5, train_step(DS_TEST_WATCHDOG_STALL), not in a collective"
	# it stopped at the stall, not after the 12 steps
	[ "$(($(wc -l <csv/run/Train_Samples_train_loss.csv) - 1))" -eq 4 ]
}

@test "watchdog: rank 0 stalls at step 3 of 4: exit 5 naming rank 0 only" {
	write_cfg 3 ', "watchdog_dir": "."'
	run --separate-stderr train 4 DS_TEST_WATCHDOG_STALL=0:3
	[ "$status" -eq 5 ] || { echo "$stderr" >&2; fail "exit $status"; }
	echo "$stderr" | grep -q "watchdog: stalled: rank 0 on $HOST (" || { echo "$stderr" >&2; false; }
	run -1 grep -q "watchdog: stalled: .*rank [123] on" <<<"$stderr"
}

@test "watchdog on, nothing stalls: the run trains with the same losses as without it and leaves no heartbeat files" {
	run -0 train 2
	mv csv/run/Train_Samples_train_loss.csv plain.csv
	mkdir hb
	write_cfg 30 ', "watchdog_dir": "hb"'
	run -0 --separate-stderr train 2
	echo "$stderr" | grep -q "watchdog: timeout 30 s, heartbeats in hb/ds-watchdog-"
	run -1 grep -q "stalled" <<<"$stderr"
	cmp plain.csv csv/run/Train_Samples_train_loss.csv
	[ -z "$(ls -A hb)" ]
}

@test "watchdog: a dstk.watchdog_dir that cannot be created exits 2 naming the key" {
	touch notadir
	write_cfg 5 ', "watchdog_dir": "notadir/sub"'
	run --separate-stderr train 2
	[ "$status" -eq 2 ] || { echo "$stderr" >&2; fail "exit $status"; }
	echo "$stderr" | grep -q "dstk.watchdog_dir notadir/sub"
}
