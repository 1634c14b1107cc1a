#!/usr/bin/env bats
# launch.bats - inside a Slurm allocation the tools find their ranks from
# srun (PMIx) with nothing else set, and ds-autotune starts its trials with
# srun; checked against a private one-node cluster (cluster.bash).
load helper
load ../mpi/train_helper

@test "srun -n 2 ds-train inside an sbatch job trains with the losses of mpirun -np 2" {
	d=$BATS_TEST_TMPDIR
	train_run "$d/mpi" 2 0 1 || { show "$d/mpi/err"; false; }
	write_cfg "$d/ds.json" 0 4 1 "$d/srun/csv"
	# no hostfile, no MASTER_ADDR, no OMPI_* launcher variables: only srun's
	j=$(sbatch --parsable --ntasks 2 --job-name srun-train --output "$d/job.out" --wrap \
		"env -u OMPI_MCA_rmaps_base_oversubscribe srun ds-train --deepspeed_config $d/ds.json \
		 --model $MODEL_DROPOUT --train-iters $ITERS --peak-gflops 1")
	st=$(final_state "$j" 120)
	[ "$st" = COMPLETED ] || { show "$d/job.out"; fail "job $j: $st"; }
	grep -q ", 2 ranks," "$d/job.out" || { show "$d/job.out"; fail "ds-train did not run on 2 ranks"; }
	[ "$(grep -c '^ds-train: adamw' "$d/job.out")" -eq 1 ]  # one world of 2, not 2 worlds of 1
	same_losses "$(losses "$d/srun")" "$(losses "$d/mpi")"
}

@test "ds-autotune inside an allocation runs its trials with srun over the job's tasks; --launcher overrides" {
	d=$BATS_TEST_TMPDIR
	cat >"$d/at.json" <<-'JSON'
	{"train_micro_batch_size_per_gpu": "auto",
	 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
	 "zero_optimization": {"stage": [1, 2]},
	 "autotuning": {"enabled": true, "metric": "throughput", "start_profile_step": 1, "end_profile_step": 2,
	   "min_train_micro_batch_size_per_gpu": 1, "max_train_micro_batch_size_per_gpu": 2,
	   "tuner_type": "gridsearch", "tuner_early_stopping": 3, "tuner_num_trials": 2}}
	JSON
	j=$(sbatch --parsable --ntasks 2 --job-name autotune --output "$d/job.out" \
		"$DS_SRCDIR/contrib/slurm/autotune.sbatch" "$d/at.json" "$SHARE/models/gpt-test.json" "$d/res" \
		--trial-timeout 120)
	st=$(final_state "$j" 150)
	[ "$st" = COMPLETED ] || { show "$d/job.out"; fail "job $j: $st"; }
	grep -q "^srun --ntasks 2 " "$d/res/cmd_optimal.txt" || { cat "$d/res/cmd_optimal.txt" >&2; false; }
	grep -q "# trials: 2 run (0 failed" "$d/job.out" || { show "$d/job.out"; false; }
	# each trial ran as a 2-rank world
	n=0
	for t in "$d"/res/z*/; do
		grep -q "^srun --ntasks 2 " "$t/cmd.txt" || { cat "$t/cmd.txt" >&2; false; }
		grep -q ", 2 ranks," "$t/stderr.txt" "$t/stdout.txt" || { cat "$t/stderr.txt" >&2; false; }
		n=$((n + 1))
	done
	[ "$n" -eq 2 ]
	# an explicit --launcher wins inside the allocation too
	j=$(sbatch --parsable --ntasks 2 --job-name autotune-l --output "$d/job2.out" \
		"$DS_SRCDIR/contrib/slurm/autotune.sbatch" "$d/at.json" "$SHARE/models/gpt-test.json" "$d/res2" \
		--trial-timeout 120 --launcher "mpirun -np 2 --oversubscribe --bind-to none --allow-run-as-root")
	st=$(final_state "$j" 150)
	[ "$st" = COMPLETED ] || { show "$d/job2.out"; fail "job $j: $st"; }
	grep -q "^mpirun -np 2 " "$d/res2/cmd_optimal.txt" || { cat "$d/res2/cmd_optimal.txt" >&2; false; }
}

@test "watchdog under srun: a rank made to stall fails the job (FAILED, exit code 5) naming the rank and host" {
	d=$BATS_TEST_TMPDIR
	cat >"$d/ds.json" <<-'JSON'
	{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
	 "optimizer": {"type": "AdamW", "params": {"lr": 0.002}}, "dstk": {"watchdog_timeout_s": 3, "watchdog_dir": "DIR"}}
	JSON
	sed -i "s|DIR|$d|" "$d/ds.json"
	j=$(DS_TEST_WATCHDOG_STALL=1:4 sbatch --parsable --ntasks 2 --job-name watchdog --output "$d/job.out" --wrap \
		"srun ds-train --deepspeed_config $d/ds.json --model $SHARE/models/gpt-test.json --train-iters 1000 \
		 --peak-gflops 1")
	st=$(final_state "$j" 120)
	echo "# job $j: $st, ExitCode=$(exit_code_of "$j")" >&3
	[ "$st" = FAILED ] || { show "$d/job.out"; fail "job $j: $st"; }
	[ "$(exit_code_of "$j")" = 5:0 ]
	grep -q "watchdog: stalled: rank 1 on $(hostname) (outside any collective" "$d/job.out" || { show "$d/job.out"; false; }
	grep -q "Exited with exit code 5" "$d/job.out"
	if grep -q "step 1000/1000" "$d/job.out"; then fail "the job with a stalled rank trained to the end"; fi
	grep -q "watchdog: stalled: rank 1" "$d"/ds-watchdog-*/report
}
