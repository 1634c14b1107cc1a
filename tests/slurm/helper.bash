# helper.bash for tests/slurm: the MPI helpers plus a private one-node Slurm
# (cluster.bash) started once per bats file and stopped after it.  Without
# root, Slurm or MPI every test of the file is skipped with the reason.
load ../mpi/helper
load cluster

# bats 1.8 cannot skip from setup_file: the reason goes to every test's setup
setup_file() {
	SLURM_SKIP=$(slurm_skip_reason)
	[ -n "$SLURM_SKIP" ] || ds_has mpi || SLURM_SKIP="built without mpi"
	export SLURM_SKIP OMP_NUM_THREADS=1
	[ -n "$SLURM_SKIP" ] || slurm_up "$BATS_FILE_TMPDIR/slurm"
}

teardown_file() {
	if [ -n "${SLURM_DIR:-}" ]; then slurm_down "$SLURM_DIR"; fi
}

setup() {
	[ -z "$SLURM_SKIP" ] || skip "$SLURM_SKIP"
	cd "$BATS_TEST_TMPDIR"
}

# state_of JOB [CAP]: wait for the final jobcomp record, fail unless COMPLETED
# is wanted by the caller; prints the state.  On a timeout shows the queue.
final_state() {
	local st
	st=$(slurm_wait_final "$@") || { squeue >&2; scontrol show job "$1" >&2; }
	echo "$st"
}

# exit_code_of JOB: the ExitCode=N:S field of the job's last jobcomp record
exit_code_of() { slurm_jobcomp "$1" | tail -1 | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p'; }

# show the output file of a job when an assertion fails
show() { echo "--- $1" >&2; cat "$1" >&2; }
