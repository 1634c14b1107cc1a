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
#   bounded_scale             what every bound here, in tests/bound.sh and in
#                             tests/run-all.sh is multiplied by:
#                             DS_TIMEOUT_SCALE, else the load per core when
#                             the wait begins (1-minute load average over the
#                             cores, rounded up, 1 to 10)
# The bounds are for a 2-core machine running the suite: far above a normal
# run, far below the per-file bound of tests/bound.sh.  The load scale keeps
# a machine shared with other work (slower, not hung) from failing on them;
# the messages give the bound in effect.

bounded_say() {
	if [ -n "${BATS_TEST_FILENAME:-}" ] && { true >&3; } 2>/dev/null; then
		echo "# $*" >&3
	else
		echo "$*" >&2
	fi
}

bounded_scale() {
	if [ -n "${DS_TIMEOUT_SCALE:-}" ]; then
		echo "$DS_TIMEOUT_SCALE"
	else
		awk -v n="$(nproc)" '{ f = int($1 / n + 0.999); print (f < 1 ? 1 : (f > 10 ? 10 : f)) }' /proc/loadavg
	fi
}

bounded() {
	local secs=$(($1 * $(bounded_scale))) t0=$SECONDS rc=0
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
	local secs=$(($1 * $(bounded_scale))) pid=$2 what=$3 end rc=0
	end=$((SECONDS + secs))
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
	local secs=$(($1 * $(bounded_scale))) what=$2 end
	end=$((SECONDS + secs))
	shift 2
	until "$@"; do
		if [ "$SECONDS" -ge "$end" ]; then
			bounded_say "timed out after $secs s: $what"
			return 124
		fi
		sleep "${WAIT_FOR_INTERVAL:-0.5}"
	done
}
