#!/usr/bin/env bats
# bounded.bats - the bounds that keep the suite from hanging: one wait in a
# test (tests/bounded.bash) and one whole test file (tests/bound.sh, which
# make check runs every file through).  What runs out is stopped together
# with what it started, and the message names what was waited for.  The
# bounds stretch with the machine's load.
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
	export D=$BATS_TEST_TMPDIR
	# the bounds as given, whatever the load
	export DS_TIMEOUT_SCALE=1
}

# gone PID: no such process, or only its zombie is left
gone() { ! ps -o stat= -p "$1" | grep -qv Z; }

@test "bounded: a command past its bound is stopped with what it started; exit 124 and one line naming the command" {
	rc=0
	bounded 1 bash -c 'sleep 60 & echo $! >gc; wait' 3>msg || rc=$?
	[ "$rc" -eq 124 ] || fail "exit $rc"
	[ "$(cat msg)" = '# timed out after 1 s: bash -c sleep 60 & echo $! >gc; wait' ] || fail "message: $(cat msg)"
	wait_for 10 "the sleep it started to end" gone "$(cat gc)"
	# in time: the command's own status, no message
	run -3 bounded 10 bash -c 'exit 3' 3>msg
	[ ! -s msg ] || fail "message: $(cat msg)"
}

@test "bounded: a command that ignores TERM is killed 10 s later" {
	rc=0
	bounded 1 bash -c 'trap "" TERM; sleep 60' 3>msg || rc=$?
	[ "$rc" -eq 124 ] || fail "exit $rc"
	grep -qx "# timed out after 1 s: bash -c trap \"\" TERM; sleep 60" msg || fail "message: $(cat msg)"
}

@test "wait_pid: a background child's status; past the bound it is killed, 124 and a message" {
	(exit 7) &
	rc=0
	wait_pid 10 $! "a subshell" || rc=$?
	[ "$rc" -eq 7 ] || fail "exit $rc"
	sleep 60 &
	pid=$!
	rc=0
	wait_pid 1 "$pid" "a sleep to end" 3>msg || rc=$?
	[ "$rc" -eq 124 ] || fail "exit $rc"
	[ "$(cat msg)" = "# timed out after 1 s: a sleep to end (pid $pid, killed)" ] || fail "message: $(cat msg)"
	gone "$pid" || fail "pid $pid still runs"
}

@test "wait_for: polls until the command succeeds; past the bound 124 and a message" {
	(sleep 1; touch f) &
	wait_for 30 "f to appear" test -e f
	run -124 wait_for 1 "a file that never comes" test -e never 3>msg
	[ "$(cat msg)" = "# timed out after 1 s: a file that never comes" ] || fail "message: $(cat msg)"
}

@test "bound.sh: a test file past DS_TEST_FILE_TIMEOUT is stopped with its nested process groups; Bail out! names the file, the bound and the test" {
	# (an @test at the start of a line here would be one of this file's)
	printf '@test "%s" { %s; }\n' quick true "hangs under timeout" "run timeout 100 bash -c 'echo \$\$ >\"\$D/gc\"; sleep 100'" \
		"never reached" true >hang.bats
	run -124 env DS_TEST_FILE_TIMEOUT=3 "$DS_SRCDIR/tests/bound.sh" bats --tap hang.bats
	assert_line "ok 1 quick"
	assert_line "Bail out! hang.bats did not finish in 3 s (DS_TEST_FILE_TIMEOUT) and was killed, in test 2: hangs under timeout"
	refute_line --partial "never reached"
	wait_for 10 "the hung test's process to end" gone "$(cat gc)"
}

@test "bound.sh: a process a test file leaves in its process group is named and stopped" {
	# shellcheck disable=SC2016 # the stray test's own code
	printf '@test "%s" { %s; }\n' "leaves a sleep" 'sleep 100 </dev/null >/dev/null 2>&1 3>&- & echo $! >"$D/stray"' >stray.bats
	run -0 "$DS_SRCDIR/tests/bound.sh" bats --tap stray.bats
	pid=$(cat stray)
	assert_line "ok 1 leaves a sleep"
	assert_line "# bound.sh: stray.bats left pid $pid running (sleep 100): stopped"
	wait_for 10 "the stray sleep to end" gone "$pid"
}

@test "bounded_scale: DS_TIMEOUT_SCALE, else the load per core rounded up, 1 to 10" {
	[ "$(DS_TIMEOUT_SCALE=3 bounded_scale)" = 3 ]
	unset DS_TIMEOUT_SCALE
	want=$(awk -v n="$(nproc)" '{ f = $1 / n; print (f <= 1 ? 1 : f >= 10 ? 10 : (f == int(f) ? f : int(f) + 1)) }' /proc/loadavg)
	got=$(bounded_scale)
	# the load may move between the two reads: one step either way
	[ "$got" -ge 1 ] && [ "$got" -le 10 ] || fail "scale $got"
	[ $((got - want)) -le 1 ] && [ $((want - got)) -le 1 ] || fail "scale $got, load per core gives $want"
	# a bound in effect is the bound times the scale
	rc=0
	DS_TIMEOUT_SCALE=2 bounded 1 sleep 30 3>msg || rc=$?
	[ "$rc" -eq 124 ] || fail "exit $rc"
	[ "$(cat msg)" = "# timed out after 2 s: sleep 30" ] || fail "message: $(cat msg)"
}
