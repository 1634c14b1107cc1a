# helper.bash for tests/mpi: the cli helper plus an mpirun wrapper that works
# as root and on 2 cores (spec/platform.md §1) and is bounded: a rank that
# died or hangs fails the test after DS_MPIRUN_TIMEOUT seconds (300) with
# "timed out after 300 s: mpirun ..." instead of hanging the suite.
load ../cli/helper
setup() { require_feature mpi; }
# mpirun, or Debian's mpirun.openmpi where the alternatives link is missing
# (OpenMPI unpacked from its .deb, as bench/gpu-run.sh carries it)
MPIRUN="$(command -v mpirun || command -v mpirun.openmpi || echo mpirun) --oversubscribe --bind-to none"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
# one OpenMP thread per rank when ranks share the 2 cores
mpirun_n() {
	local n=$1
	shift
	# shellcheck disable=SC2086  # $MPIRUN is a command with its options
	bounded "${DS_MPIRUN_TIMEOUT:-300}" $MPIRUN -np "$n" -x OMP_NUM_THREADS=1 "$@"
}
