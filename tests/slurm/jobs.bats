#!/usr/bin/env bats
# jobs.bats - the sbatch scripts of contrib/slurm on a private one-node
# cluster (cluster.bash), with the small test model: the afterok pipeline,
# preemption (USR1 -> save -> exit 4 -> requeue -> resume) and a job array.
# Final states come from the job-completion log, not sbatch's exit code.
load helper
load ../mpi/train_helper

CONTRIB="$DS_SRCDIR/contrib/slurm"

@test "pipeline.sh: nvme-tune -> autotune -> train -> convert chained with afterok, every job COMPLETED" {
	d=$BATS_TEST_TMPDIR
	cat >"$d/at.json" <<-'JSON'
	{"train_micro_batch_size_per_gpu": "auto",
	 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
	 "zero_optimization": {"stage": "auto"},
	 "autotuning": {"enabled": true, "metric": "throughput", "start_profile_step": 1, "end_profile_step": 2,
	   "min_train_micro_batch_size_per_gpu": 1, "max_train_micro_batch_size_per_gpu": 2,
	   "tuner_type": "gridsearch", "tuner_early_stopping": 3, "tuner_num_trials": 2}}
	JSON
	echo '{"block_size": [1048576], "queue_depth": [4], "single_submit": [false], "overlap_events": [true]}' >"$d/sweep.json"
	mkdir -p "$d/nvme"
	NVME_TUNE_FLAGS="--io-size 4M --sweep-config $d/sweep.json" AUTOTUNE_FLAGS="--trial-timeout 120" \
		bounded 120 "$CONTRIB/pipeline.sh" "$d/work" "$d/at.json" "$SHARE/models/gpt-test.json" "$d/nvme" \
		--train-iters 6 --peak-gflops 1 >"$d/ids"
	[ "$(awk '{print $1}' "$d/ids" | tr '\n' ' ')" = "nvme-tune autotune train convert " ]
	# the last job cannot have started yet: it waits on the train job
	j3=$(awk '$1 == "train" {print $2}' "$d/ids") j4=$(awk '$1 == "convert" {print $2}' "$d/ids")
	scontrol show job "$j4" | grep -q "Dependency=afterok:$j3" || { scontrol show job "$j4" >&2; false; }
	prev_end=
	while read -r stage j; do
		st=$(final_state "$j" 150)
		echo "# $stage job $j: $st" >&3
		[ "$st" = COMPLETED ] || { cat "$d"/work/*.out >&2; fail "$stage job $j: $st"; }
		# each job started only once the one before had ended
		start=$(slurm_jobcomp "$j" | tail -1 | sed -n 's/.* StartTime=\([^ ]*\).*/\1/p')
		[ -z "$prev_end" ] || [[ ! "$start" < "$prev_end" ]] || fail "$stage job $j started $start, before $prev_end"
		prev_end=$(slurm_jobcomp "$j" | tail -1 | sed -n 's/.* EndTime=\([^ ]*\).*/\1/p')
	done <"$d/ids"
	# what each stage handed on
	jq -e '.aio.block_size == 1048576' "$d/work/ds_config_aio.json"
	jq -e '.train_micro_batch_size_per_gpu | type == "number"' "$d/work/autotune/ds_config_optimal.json"
	jq -e '.aio.block_size == 1048576' "$d/work/autotune/ds_config_optimal.json"
	[ "$(cat "$d/work/ckpt/latest")" = global_step6 ]
	[ -s "$d/work/hf/model.safetensors" ] || fail "convert wrote no $d/work/hf/model.safetensors"
	[ -s "$d/work/hf/config.json" ] || fail "convert wrote no $d/work/hf/config.json"
}

@test "pipeline: a failed stage leaves the later jobs never run (afterok)" {
	d=$BATS_TEST_TMPDIR
	echo '{"train_micro_batch_size_per_gpu": "auto"}' >"$d/at.json"
	# the nvme directory does not exist and is not creatable: stage 1 fails
	touch "$d/file"
	bounded 120 "$CONTRIB/pipeline.sh" "$d/work" "$d/at.json" "$SHARE/models/gpt-test.json" "$d/file/nvme" >"$d/ids"
	j1=$(awk '$1 == "nvme-tune" {print $2}' "$d/ids")
	st=$(final_state "$j1" 60)
	[ "$st" = FAILED ] || fail "nvme-tune job $j1: $st"
	# the next job is held for good (DependencyNeverSatisfied), so the rest
	# never start either; none of them ever ran
	j2=$(awk '$1 == "autotune" {print $2}' "$d/ids")
	wait_for 60 "job $j2 (autotune) to be held with DependencyNeverSatisfied" \
		held_for_good "$j2" || { scontrol show job "$j2" >&2; false; }
	for stage in autotune train convert; do
		j=$(awk -v s=$stage '$1 == s {print $2}' "$d/ids")
		[ -z "$(slurm_jobcomp "$j")" ] || fail "$stage job $j ran after its dependency failed: $(slurm_jobcomp "$j")"
		scontrol show job "$j" | grep -q "JobState=PENDING" || fail "$stage job $j: $(scontrol show job "$j" | grep -o 'JobState=[^ ]*')"
		scancel "$j"
	done
	[ ! -e "$d/work/autotune" ]
}

held_for_good() { scontrol show job "$1" | grep -q "JobState=PENDING Reason=DependencyNeverSatisfied"; }

# start a preemptible training job with the CSV monitor under DIR/csv
submit_train() { # DIR ITERS [sbatch flags...]
	local dir=$1 iters=$2
	shift 2
	write_cfg "$dir/ds.json" 1 2 2 "$dir/csv"
	sbatch --parsable --ntasks 2 --output "$dir/job.out" "$@" "$CONTRIB/train.sbatch" \
		"$dir/ds.json" "$MODEL_DROPOUT" "$dir/ckpt" --train-iters "$iters" --peak-gflops 1
}

# wait (at most 120 s) until the job's CSV has at least N losses
wait_losses() { # DIR N
	WAIT_FOR_INTERVAL=0.1 wait_for 120 "$2 losses in $(losses "$1")" has_losses "$@"
}
has_losses() {
	[ -f "$(losses "$1")" ] || return 1
	[ "$(($(wc -l <"$(losses "$1")") - 1))" -ge "$2" ]
}

@test "train.sbatch: scancel --signal=USR1 -> save, exit 4, requeue, resume from latest; losses equal an uninterrupted run" {
	d=$BATS_TEST_TMPDIR
	iters=300
	ITERS=$iters train_run "$d/straight" 2 1 2 || { show "$d/straight/err"; false; }
	mkdir -p "$d/pre"
	j=$(submit_train "$d/pre" $iters --job-name preempt)
	wait_losses "$d/pre" 5 || { show "$d/pre/job.out"; fail "training never started"; }
	scancel --signal=USR1 "$j"
	st=$(final_state "$j" 150)
	echo "# job $j: $(slurm_jobcomp "$j" | sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' | tr '\n' ' ')" >&3
	[ "$st" = COMPLETED ] || { show "$d/pre/job.out"; fail "job $j: $st"; }
	out=$d/pre/job.out
	# the first run stopped on the signal after saving, and requeued itself
	grep -q "stopped by signal 10 at step [0-9]* after saving" "$out" || { show "$out"; false; }
	grep -q "exited with exit code 4\|Exited with exit code 4" "$out" || { show "$out"; false; }
	grep -q "requeueing job $j" "$out"
	# train.sbatch looked the job's end time up (squeue) and ds-train compared it before saving
	grep -q "signal 10: the job ends in [0-9]* s (SLURM_JOB_END_TIME)" "$out" || { show "$out"; false; }
	# the rerun: SLURM_RESTART_COUNT 1, loaded the saved step, trained to the end
	step=$(sed -n 's/.*stopped by signal 10 at step \([0-9]*\) .*/\1/p' "$out" | head -1)
	[ "$step" -gt 0 ] && [ "$step" -lt $iters ] || fail "stopped at step '$step'"
	grep -q "train.sbatch: job $j, restart 1," "$out"
	grep -q "loaded $d/pre/ckpt/global_step$step: step $step, .*SLURM_RESTART_COUNT 1" "$out" || { show "$out"; false; }
	[ "$(cat "$d/pre/ckpt/latest")" = "global_step$iters" ]
	# two records in the completion log: the requeued run, then COMPLETED
	[ "$(slurm_jobcomp "$j" | wc -l)" -eq 2 ]
	# one CSV across the restart, every step once, equal to the straight run's
	[ "$(tail -n +2 "$(losses "$d/pre")" | wc -l)" -eq $iters ] || { cat "$(losses "$d/pre")" >&2; false; }
	same_losses "$(losses "$d/pre")" "$(losses "$d/straight")"
}

@test "train.sbatch: a USR1 to the batch shell only (as --signal=B:USR1@N sends) is passed on: save, exit 4, requeue, resume" {
	d=$BATS_TEST_TMPDIR
	iters=200
	mkdir -p "$d/pre"
	j=$(submit_train "$d/pre" $iters --job-name preempt-b)
	wait_losses "$d/pre" 5 || { show "$d/pre/job.out"; fail "training never started"; }
	scancel --batch --signal=USR1 "$j"
	st=$(final_state "$j" 150)
	echo "# job $j: $(slurm_jobcomp "$j" | sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' | tr '\n' ' ')" >&3
	[ "$st" = COMPLETED ] || { show "$d/pre/job.out"; fail "job $j: $st"; }
	out=$d/pre/job.out
	grep -q "train.sbatch: USR1: passing it to the job step" "$out" || { show "$out"; false; }
	grep -q "stopped by signal 10 at step [0-9]* after saving" "$out"
	grep -q "train.sbatch: job $j, restart 1," "$out"
	[ "$(cat "$d/pre/ckpt/latest")" = "global_step$iters" ]
	[ "$(tail -n +2 "$(losses "$d/pre")" | wc -l)" -eq $iters ]
}

@test "sweep.sbatch: a job array trains one config per task, each COMPLETED with its own settings" {
	d=$BATS_TEST_TMPDIR
	write_cfg "$d/ds.json" 0 4 1 "$d/unused"
	cat >"$d/sweep.txt" <<-'EOF'
	# name  flags
	lr2e-3  --train-iters 4 --peak-gflops 1
	lr1e-2  --train-iters 4 --peak-gflops 1 --set optimizer.params.lr=0.01
	seed7   --train-iters 4 --peak-gflops 1 --seed 7
	EOF
	j=$(sbatch --parsable --array=0-2 --ntasks 2 --job-name sweep --output "$d/sweep-%A_%a.out" \
		"$CONTRIB/sweep.sbatch" "$d/sweep.txt" "$d/ds.json" "$MODEL_DROPOUT" "$d/out")
	# the array's tasks have their own job ids: follow them through the log by name
	wait_for 150 "the 3 tasks of array $j to end (their records in jobcomp.txt)" sweep_ended || true
	states=$(grep ' Name=sweep ' "$SLURM_DIR/log/jobcomp.txt" | sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' | sort | uniq -c | xargs)
	echo "# array $j: $states" >&3
	[ "$states" = "3 COMPLETED" ] || { cat "$d"/sweep-*.out >&2; fail "array $j: $states"; }
	for t in lr2e-3 lr1e-2 seed7; do
		[ "$(cat "$d/out/$t/ckpt/latest")" = global_step4 ]
		[ "$(tail -n +2 "$d/out/$t/csv/run/Train_Samples_train_loss.csv" | wc -l)" -eq 4 ]
	done
	jq -e '.optimizer.params.lr == 0.01' "$d/out/lr1e-2/ds_config.json"
	jq -e '.optimizer.params.lr == 0.002' "$d/out/lr2e-3/ds_config.json"
	# the settings differ, so do the losses (the same first loss at the same seed)
	a=$(sed -n 5p "$d/out/lr2e-3/csv/run/Train_Samples_train_loss.csv")
	b=$(sed -n 5p "$d/out/lr1e-2/csv/run/Train_Samples_train_loss.csv")
	c=$(sed -n 2p "$d/out/seed7/csv/run/Train_Samples_train_loss.csv")
	[ "$a" != "$b" ] || fail "lr 0.01 and lr 0.002: the same loss at step 4: $a"
	[ "$(sed -n 2p "$d/out/lr2e-3/csv/run/Train_Samples_train_loss.csv")" != "$c" ] || fail "seed 7 and the default seed: the same first loss: $c"
}

sweep_ended() { [ "$(grep -c ' Name=sweep JobState=\(COMPLETED\|FAILED\|CANCELLED\|TIMEOUT\)' "$SLURM_DIR/log/jobcomp.txt")" -ge 3 ]; }

@test "train.sbatch: a TERM to the batch shell only is passed on as USR1: save, exit 4, requeue, resume" {
	d=$BATS_TEST_TMPDIR
	iters=200
	mkdir -p "$d/pre"
	j=$(submit_train "$d/pre" $iters --job-name preempt-t)
	wait_losses "$d/pre" 5 || { show "$d/pre/job.out"; fail "training never started"; }
	scancel --batch --signal=TERM "$j"
	st=$(final_state "$j" 150)
	[ "$st" = COMPLETED ] || { show "$d/pre/job.out"; fail "job $j: $st"; }
	out=$d/pre/job.out
	grep -q "train.sbatch: TERM: passing USR1 to the job step" "$out" || { show "$out"; false; }
	grep -q "stopped by signal 10 at step [0-9]* after saving" "$out" || { show "$out"; false; }
	grep -q "train.sbatch: job $j, restart 1," "$out"
	[ "$(cat "$d/pre/ckpt/latest")" = "global_step$iters" ]
	[ "$(tail -n +2 "$(losses "$d/pre")" | wc -l)" -eq $iters ]
}
