# bounded.bash - a bound for every wait in the tests, so that a hung rank, a
# job Slurm cannot place or a daemon that never comes up fails the test with
# one line naming what it waited for instead of stopping the suite.  Loaded
# by tests/cli/helper.bash (so by every bats file) and by cluster.bash.
#
#   bounded SECS CMD...       run CMD for at most SECS s; then TERM to CMD and
#                             everything it started (timeout's process group),
#                             KILL 10 s later; says "timed out after SECS s: CMD"
#                             and returns 124.  Otherwise CMD's exit status.
#   wait_pid SECS PID WHAT    wait for the background child PID: its exit
#                             status; after SECS s KILL it, say so, return 124
#   wait_for SECS WHAT CMD... run CMD every WAIT_FOR_INTERVAL s (0.5) until it
#                             succeeds; after SECS s say so and return 124
#   bounded_say MSG           the message: a TAP comment on fd 3 inside bats (it
#                             reaches the test's .log whatever `run` captured),
#                             stderr elsewhere
# The bounds are for a loaded 2-core machine: far above a normal run, far
# below the per-file bound of tests/bound.sh.

bounded_say() {
	if [ -n "${BATS_TEST_FILENAME:-}" ] && { true >&3; } 2>/dev/null; then
		echo "# $*" >&3
	else
		echo "$*" >&2
	fi
}

bounded() {
	local secs=$1 t0=$SECONDS rc=0
	shift
	timeout -k 10 "$secs" "$@" || rc=$?
	# 124: TERM on time; 137: KILL after an ignored TERM (or a KILL from
	# elsewhere: only a timeout when the time is up)
	if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ $((SECONDS - t0)) -ge "$secs" ]; }; then
		bounded_say "timed out after $secs s: $*"
		return 124
	fi
	return "$rc"
}

wait_pid() {
	local secs=$1 pid=$2 what=$3 end=$((SECONDS + $1)) rc=0
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$end" ]; then
			bounded_say "timed out after $secs s: $what (pid $pid, killed)"
			kill -KILL "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			return 124
		fi
		sleep 0.1
	done
	wait "$pid" || rc=$?
	return "$rc"
}

wait_for() {
	local secs=$1 what=$2 end=$((SECONDS + $1))
	shift 2
	until "$@"; do
		if [ "$SECONDS" -ge "$end" ]; then
			bounded_say "timed out after $secs s: $what"
			return 124
		fi
		sleep "${WAIT_FOR_INTERVAL:-0.5}"
	done
}
