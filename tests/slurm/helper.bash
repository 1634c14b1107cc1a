# helper.bash for tests/slurm: the MPI helpers plus a private one-node Slurm
# (cluster.bash) started once per bats file and stopped after it, also when
# a test or setup_file fails or the run is interrupted.  Without root, Slurm
# or MPI every test of the file is skipped with the reason.
load ../mpi/helper
load cluster

# bats 1.8 cannot skip from setup_file: the reason goes to every test's setup
setup_file() {
	DS_SLURM_SKIP=$(slurm_skip_reason)
	[ -n "$DS_SLURM_SKIP" ] || ds_has mpi || DS_SLURM_SKIP="built without mpi"
	export DS_SLURM_SKIP OMP_NUM_THREADS=1
	[ -n "$DS_SLURM_SKIP" ] || slurm_up
}

teardown_file() {
	if [ -n "${SLURM_DIR:-}" ]; then slurm_down "$SLURM_DIR"; fi
}

setup() {
	[ -z "$DS_SLURM_SKIP" ] || skip "$DS_SLURM_SKIP"
	cd "$BATS_TEST_TMPDIR" || return 1
}

# client commands of the cluster: bounded, so an unresponsive slurmctld
# fails the test naming the command
sbatch() { bounded 60 sbatch "$@"; }
scontrol() { bounded 30 scontrol "$@"; }
squeue() { bounded 30 squeue "$@"; }
scancel() { bounded 30 scancel "$@"; }

# final_state JOB [CAP]: wait (at most CAP s, default 120) for the job's final
# jobcomp record and print its state; on a timeout also show the queue, the
# job and the controller's log
final_state() {
	local st
	st=$(slurm_wait_final "$@") || {
		squeue --all >&2
		scontrol show job "$1" >&2
		tail -5 "$SLURM_DIR/log/slurmctld.log" >&2
	}
	echo "$st"
}

# exit_code_of JOB: the ExitCode=N:S field of the job's last jobcomp record
exit_code_of() { slurm_jobcomp "$1" | tail -1 | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p'; }

# show the output file of a job when an assertion fails
show() { echo "--- $1" >&2; cat "$1" >&2; }
