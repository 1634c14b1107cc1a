#!/usr/bin/env bats
# ds-autotune.bats - real trials of ds-train on the tiny test model: "auto"
# resolved, memory pruning, an injected failing/hanging trial reported and
# survived, the metric's direction, resume, and the optimal config trains.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

setup() {
	# 4 stages x micro batches 1, 2, 4 = 12 experiments of 2 steps each
	CFG="$BATS_TEST_TMPDIR/autotune-test.json"
	cat > "$CFG" <<-'EOF'
	{
	  "train_micro_batch_size_per_gpu": "auto",
	  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
	  "zero_optimization": {"stage": "auto"},
	  "autotuning": {
	    "enabled": true, "overwrite": false, "metric": "throughput",
	    "start_profile_step": 1, "end_profile_step": 2,
	    "min_train_micro_batch_size_per_gpu": 1, "max_train_micro_batch_size_per_gpu": 4,
	    "tuner_type": "gridsearch", "tuner_early_stopping": 3, "tuner_num_trials": 6
	  }
	}
	EOF
	MODEL="$SHARE/models/gpt-test.json"
	R="$BATS_TEST_TMPDIR/res"
}

# cfg_with JQ_FILTER: the test config edited by jq, path printed
cfg_with() {
	local out="$BATS_TEST_TMPDIR/cfg-$RANDOM.json"
	jq "$1" "$CFG" > "$out"
	echo "$out"
}

@test "ds-autotune --help exits 0 and shows usage" {
	run -0 ds-autotune --help
	assert_output --partial "Usage: ds-autotune"
	assert_output --partial "--mem-per-rank"
}

@test "ds-autotune: a bad flag or a missing --model exits 2" {
	run -2 --separate-stderr ds-autotune --bogus
	assert_equal "${stderr_lines[-1]}" "Try 'ds-autotune --help' for more information."
	run -2 --separate-stderr ds-autotune --deepspeed_config "$CFG"
	[[ $stderr == *"--model FILE are required"* ]]
	run -2 --separate-stderr ds-autotune -c "$CFG" -m "$MODEL" --mem-per-rank lots
	[[ $stderr == *"--mem-per-rank 'lots'"* ]]
}

@test "ds-autotune --np 2 in a build without MPI exits 3 naming the configure flag" {
	ds_has mpi && skip "built with mpi"
	run -3 --separate-stderr ds-autotune -c "$CFG" -m "$MODEL" --np 2 --results-dir "$R"
	[[ $stderr == *"--with-mpi"* ]]
	[ ! -e "$R" ]
}

@test "ds-autotune --json parses and agrees with summary.csv" {
	run -0 --separate-stderr ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R" --json
	echo "$output" | jq -e '.metric == "throughput" and .np == 1 and (.experiments | length) == 12' >/dev/null
	best=$(echo "$output" | jq -r .best)
	[ "$best" = "$(awk -F, '$11 == 1 { print $1 }' "$R/summary.csv")" ]
	[ "$(echo "$output" | jq '[.experiments[] | select(.trial > 0)] | length')" = "$(echo "$output" | jq .trials)" ]
}

@test "ds-autotune: autotuning.enabled false is refused naming the key" {
	run -2 --separate-stderr ds-autotune -c "$(cfg_with '.autotuning.enabled = false')" -m "$MODEL" --results-dir "$R"
	[[ $stderr == *"autotuning.enabled"* ]]
	[ ! -e "$R" ]
}

@test "ds-autotune resolves every \"auto\": the optimal config passes --check and trains 2 steps" {
	# (Hugging Face's "betas": "auto" too: DeepSpeed's default, not a refusal)
	c=$(cfg_with '.gradient_clipping = "auto" | .optimizer.params.betas = "auto"')
	run -0 --separate-stderr ds-autotune -c "$c" -m "$MODEL" --results-dir "$R"
	assert_output --partial "# best: z"
	assert_output --partial "gradient_clipping"
	[ "$(jq -c '.optimizer.params.betas' "$R/ds_config_optimal.json")" = "[0.9,0.999]" ] || fail "betas: $(jq -c .optimizer "$R/ds_config_optimal.json")"
	opt="$R/ds_config_optimal.json"
	[ -f "$opt" ]
	[ -f "$R/cmd_optimal.txt" ]
	[ -f "$R/summary.csv" ]
	run -1 grep -q '"auto"' "$opt"
	[ "$(jq 'has("autotuning")' "$opt")" = false ]
	[ "$(jq '.train_micro_batch_size_per_gpu | type' "$opt")" = '"number"' ]
	[ "$(jq '.zero_optimization.stage | type' "$opt")" = '"number"' ]
	[ "$(jq '.gradient_clipping' "$opt")" = 0 ]
	# the best row of the CSV is the experiment the optimal config describes
	best=$(awk -F, '$11 == 1 { print $3, $2 }' "$R/summary.csv")
	[ "$best" = "$(jq -r '"\(.train_micro_batch_size_per_gpu) \(.zero_optimization.stage)"' "$opt")" ]
	# every trial left its files
	trials=0
	while read -r d; do
		for f in ds_config.json cmd.txt stdout.txt stderr.txt metrics.json result.json; do
			[ -f "$R/$d/$f" ] || fail "missing $R/$d/$f"
		done
		trials=$((trials + 1))
	done < <(awk -F, 'NR > 1 && $9 > 0 { print $1 }' "$R/summary.csv")
	[ "$trials" -gt 0 ] || fail "no trial in $R/summary.csv"
	run -0 ds-train --check --deepspeed_config "$opt" --model "$MODEL"
	run -0 ds-train --deepspeed_config "$opt" --model "$MODEL" --train-iters 2
	assert_output --partial "step 2/2"
	grep -q -- "--deepspeed_config $opt" "$R/cmd_optimal.txt"
}

@test "ds-autotune: a small --mem-per-rank prunes exactly the points above it, before launch" {
	run -0 --separate-stderr ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R" --mem-per-rank 35M
	budget=$((35 * 1024 * 1024))
	# every row above the budget is pruned with a memory reason, none below is
	read -r over pruned bad < <(awk -F, -v b=$budget 'NR > 1 {
		if ($6 > b) { over++; if ($8 == "pruned" && $12 ~ /memory/) pruned++ }
		else if ($8 == "pruned") bad++ } END { print over + 0, pruned + 0, bad + 0 }' "$R/summary.csv")
	[ "$over" -gt 0 ] || fail "no experiment above the budget"
	assert_equal "$pruned" "$over"
	assert_equal "$bad" 0
	assert_output --partial "# pruned before launch: $over (memory: $over over the budget of 35.0 MiB per rank from --mem-per-rank"
	# no pruned experiment was launched
	while read -r d; do
		[ ! -e "$R/$d" ] || fail "pruned $d was launched"
	done < <(awk -F, '$8 == "pruned" { print $1 }' "$R/summary.csv")
	# a budget below everything: exit 1 saying so, nothing launched
	run -1 --separate-stderr ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R.2" --mem-per-rank 1M
	[[ $stderr == *"all 12 experiments were pruned before launch"*"raise --mem-per-rank"* ]]
}

# ZeRO-Infinity: with offload_optimizer nvme the trials of stages 1-3 need
# less host memory by the Adam states (8 bytes x 118528 elements at 1 rank)
# less the 4 swap buffers of sub_group_size 20000, rounded up to 20480
# elements (4 x 20480 x 4 bytes); stage 0 offloads nothing.
@test "ds-autotune: offloading the optimizer to nvme moves its states out of each trial's host memory" {
	command -v jq >/dev/null || skip "jq not installed"
	mkdir -p "$BATS_TEST_TMPDIR/nv"
	nv=$(cfg_with ".zero_optimization += {\"sub_group_size\": 20000, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$BATS_TEST_TMPDIR/nv\"}}")
	run -1 --separate-stderr ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R.m" --mem-per-rank 1M
	run -1 --separate-stderr ds-autotune -c "$nv" -m "$MODEL" --results-dir "$R.n" --mem-per-rank 1M
	# shellcheck disable=SC2016  # awk's fields
	run -0 awk -F, 'NR == FNR { m[$1] = $6; next } FNR > 1 { d = m[$1] - $6; want = $2 == 0 ? 0 : 118528 * 8 - 4 * 20480 * 4
		if (d != want) { print $1 ": " d " bytes less, want " want; bad = 1 } } END { exit bad }' "$R.m/summary.csv" "$R.n/summary.csv"
}

# dstk.device cuda: each trial is pruned by the plan's device total, so by
# the host rows less than the cpu trial set's: the "other" row of token
# rows and optimizer headers, 2 x mb x 32 x 4 + mb x 33 x 4 bytes at gas 1
# plus 4 headers of 256 bytes (ds-train --check's other row: 2064 at
# micro batch 2 and gas 2 = 512 + 528 + 1024)
@test "ds-autotune: a cuda trial set prunes by the device total of each trial's plan" {
	command -v jq >/dev/null || skip "jq not installed"
	cu=$(cfg_with '. + {"dstk": {"device": "cuda"}}')
	run -1 --separate-stderr ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R.m" --mem-per-rank 1M
	run -1 --separate-stderr ds-autotune -c "$cu" -m "$MODEL" --results-dir "$R.c" --mem-per-rank 1M
	# shellcheck disable=SC2016  # awk's fields
	run -0 awk -F, 'NR == FNR { m[$1] = $6; next } FNR > 1 { d = m[$1] - $6; want = 388 * $3 + 1024; n++
		if (d != want) { print $1 ": " d " bytes less, want " want; bad = 1 } } END { exit bad || n != 12 }' \
		"$R.m/summary.csv" "$R.c/summary.csv"
}

# 10 s: the other trials (well under a second alone) must not time out on a loaded 2-core machine
@test "ds-autotune: a hanging trial is killed at --trial-timeout, reported, and the search goes on" {
	DS_AUTOTUNE_FAIL_TRIAL=1:hang run -0 --separate-stderr \
		ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R" --trial-timeout 10
	assert_output --regexp "z0_gas1_tmbspg4 .* failed .* timeout after 10 s"
	assert_output --partial "# best: z"
	[[ $stderr == *"failed: timeout after 10 s"*"going on"* ]]
	[ "$(awk -F, 'NR > 1 && $8 == "ok"' "$R/summary.csv" | wc -l)" -ge 2 ]
	[ "$(jq -r .status "$R/z0_gas1_tmbspg4/result.json")" = failed ]
}

@test "ds-autotune: SIGTERM kills the running trial's process group and exits 4" {
	DS_AUTOTUNE_FAIL_TRIAL=1:hang run -4 --separate-stderr \
		timeout -k 60 --preserve-status -s TERM 2 ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R" --trial-timeout 300
	[[ $stderr == *"stopped on a signal; the running trial was killed"* ]]
}

@test "ds-autotune: a crashing and an out-of-memory trial are recorded with their reasons" {
	DS_AUTOTUNE_FAIL_TRIAL=2:crash run -0 ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R" -q
	assert_output --regexp "z0_gas1_tmbspg2 .* failed .* exit 1: injected failure"
	DS_AUTOTUNE_FAIL_TRIAL=z0_gas1_tmbspg4:oom run -0 ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R.2" -q
	assert_output --regexp "z0_gas1_tmbspg4 .* failed .* killed by signal 9 \(out of memory\?\)"
	# every trial failing: exit 1 naming the first failure
	c=$(cfg_with '.autotuning.max_train_micro_batch_size_per_gpu = 1 | .zero_optimization.stage = 0')
	DS_AUTOTUNE_FAIL_TRIAL=1:crash run -1 --separate-stderr ds-autotune -c "$c" -m "$MODEL" --results-dir "$R.3"
	[[ $stderr == *"no configuration found: all 1 trials failed; first: z0 micro batch 1: exit 1: injected failure"* ]]
}

@test "ds-autotune: latency is minimised and throughput maximised over the trials run" {
	c=$(cfg_with '.autotuning.metric = "latency" | .autotuning.tuner_early_stopping = 20 | .zero_optimization.stage = [0, 1]')
	run -0 ds-autotune -c "$c" -m "$MODEL" --results-dir "$R" -q --csv
	assert_line --index 0 --partial "latency_us"
	want=$(awk -F, 'NR > 1 && $8 == "ok" { if (m == "" || $10 < m) { m = $10; e = $1 } } END { print e }' "$R/summary.csv")
	got=$(awk -F, '$11 == 1 { print $1 }' "$R/summary.csv")
	[ -n "$got" ] || fail "no best row in summary.csv"
	assert_equal "$got" "$want"
	c=$(cfg_with '.autotuning.tuner_early_stopping = 20 | .zero_optimization.stage = [0, 1]')
	run -0 ds-autotune -c "$c" -m "$MODEL" --results-dir "$R.2" -q
	want=$(awk -F, 'NR > 1 && $8 == "ok" { if (m == "" || $10 > m + 0) { m = $10; e = $1 } } END { print e }' "$R.2/summary.csv")
	got=$(awk -F, '$11 == 1 { print $1 }' "$R.2/summary.csv")
	[ -n "$got" ] || fail "no best row in summary.csv"
	assert_equal "$got" "$want"
	# the trials' metric is metrics.json's, not a log scrape
	m=$(jq .throughput "$R.2/$got/metrics.json")
	awk -F, -v e="$got" -v m="$m" '$1 == e { n++; d = $10 - m; ok = d < 1e-6 * m && -d < 1e-6 * m }
		END { exit !(n == 1 && ok) }' "$R.2/summary.csv"
}

@test "ds-autotune: a re-run with overwrite false reuses finished experiments" {
	run -0 ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R" -q
	n=$(awk -F, 'NR > 1 && $9 > 0' "$R/summary.csv" | wc -l)
	run -0 --separate-stderr ds-autotune -c "$CFG" -m "$MODEL" --results-dir "$R"
	assert_output --partial ", $n reused from an earlier run"
	[[ $stderr == *"finished before"* ]]
	run -0 ds-autotune -c "$(cfg_with '.autotuning.overwrite = true')" -m "$MODEL" --results-dir "$R" -q
	assert_output --partial ", 0 reused from an earlier run"
}

@test "ds-autotune --np 2 runs its trials under mpirun and the optimal config trains on 2 ranks" {
	require_feature mpi
	c=$(cfg_with '.autotuning.max_train_micro_batch_size_per_gpu = 2 | .zero_optimization.stage = [1, 2] | .autotuning.tuner_num_trials = 2')
	run -0 --separate-stderr ds-autotune -c "$c" -m "$MODEL" --results-dir "$R" --np 2 --trial-timeout 120
	assert_output --partial "# best: z"
	grep -q "^mpirun -np 2 --oversubscribe --bind-to none" "$R/cmd_optimal.txt"
	opt="$R/ds_config_optimal.json"
	run -0 ds-train --check --deepspeed_config "$opt" --model "$MODEL" --world-size 2
	run -0 bounded 300 mpirun -np 2 --oversubscribe --bind-to none --allow-run-as-root \
		ds-train --deepspeed_config "$opt" --model "$MODEL" --train-iters 2
	assert_output --partial "step 2/2"
}
