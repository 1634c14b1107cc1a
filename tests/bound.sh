#!/bin/bash
# bound.sh - make check runs every test file through this (LOG_COMPILER and
# BATS_LOG_COMPILER, tests/local.mk): CMD... gets DS_TEST_FILE_TIMEOUT
# seconds (default 600) of wall-clock time, times the load scale when it
# starts (bounded_scale, tests/bounded.bash).  On expiry, or when make check is
# interrupted, the file's whole process tree gets TERM, then KILL 10 s later,
# and a TAP "Bail out!" names the file, the bound and the test it was in, so
# the harness reports an ERROR and goes on instead of hanging.
#
# The file's output goes through a temporary file, not a pipe: a process it
# leaves behind that still holds its stdout (a daemon, a stray rank) cannot
# keep the harness waiting for an end of file.  The bounds of single waits
# inside the tests (tests/bounded.bash) are shorter and name what they waited
# for; this one is the backstop.
set -u
# shellcheck source-path=SCRIPTDIR source=bounded.bash
. "$(dirname "$0")/bounded.bash"
limit=$((${DS_TEST_FILE_TIMEOUT:-600} * $(bounded_scale)))
file=${!#}
out=$(mktemp "${TMPDIR:-/tmp}/ds-bound.XXXXXX") || exit 99
trap 'rm -f "$out"' EXIT

# the pids under (and including) $1, one snapshot: nested process groups
# (timeout, mpirun) included, daemons that detached themselves not
tree() {
	ps -e -o pid= -o ppid= | awk -v root="$1" '
		{ kids[$2] = kids[$2] " " $1 }
		END {
			todo[1] = root; n = 1
			while (n > 0) {
				p = todo[n--]; print p
				k = split(kids[p], a, " ")
				for (i = 1; i <= k; i++) todo[++n] = a[i]
			}
		}'
}

stop() { # stop the file's processes: TERM, up to 10 s, KILL
	local pids
	pids=$(tree "$pid")
	# shellcheck disable=SC2086
	kill -TERM $pids 2>/dev/null
	for _ in $(seq 20); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	# shellcheck disable=SC2086
	kill -KILL $pids 2>/dev/null
}

set -m # a process group of its own: signals reach it only through stop()
"$@" >"$out" &
pid=$!
set +m
tail -n +1 -f --pid="$pid" "$out" &
tailer=$!
trap 'stop; wait "$tailer"; echo "Bail out! $file: interrupted"; exit 130' INT TERM HUP

end=$((SECONDS + limit))
timed_out=
while kill -0 "$pid" 2>/dev/null; do
	if [ "$SECONDS" -ge "$end" ]; then
		timed_out=1
		stop
		break
	fi
	sleep 0.2
done
wait "$pid"
rc=$?
wait "$tailer"
# what the file left running in its process group (zombies aside): named, stopped
[ -n "$timed_out" ] || left=$(pgrep -g "$pid" | xargs -r ps -o pid= -o stat= -p | awk '$2 !~ /^Z/ { print $1 }')
for p in ${left:-}; do
	cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")
	echo "# bound.sh: $file left pid $p running (${cmd% }): stopped"
	kill -KILL "$p" 2>/dev/null
done
if [ -n "$timed_out" ]; then
	msg="Bail out! $file did not finish in $limit s (DS_TEST_FILE_TIMEOUT) and was killed"
	case $file in
	*.bats)
		# bats runs its tests in file order: the one after the last result hung
		n=$(grep -cE '^(not )?ok ' "$out")
		t=$(sed -n 's/^[[:space:]]*@test[[:space:]]*"\(.*\)"[[:space:]]*{.*/\1/p' "$file" | sed -n "$((n + 1))p")
		[ -z "$t" ] || msg="$msg, in test $((n + 1)): $t"
		;;
	esac
	echo "$msg"
	exit 124
fi
exit "$rc"
