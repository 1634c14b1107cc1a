#!/usr/bin/env bats
# cluster.bats - the private cluster of the Slurm tests (cluster.bash) keeps
# to itself and leaves nothing behind: its daemons hold no descriptor of the
# test harness, slurm_down stops every process of it (a running job's
# included), a cluster whose starter is killed is stopped by its guard, and a
# leftover of a run that is over is named and stopped by the next slurm_up.
load helper

# pipe:[N] of every descriptor of PID
pipes_of() { for fd in /proc/"$1"/fd/*; do readlink "$fd"; done 2>/dev/null | grep '^pipe:' | sort -u; }

# the pipes of this test and of every process above it (bats, make's
# driver, make): the harness
harness_pipes() {
	local p=$BASHPID
	while [ "$p" -gt 1 ]; do
		pipes_of "$p"
		p=$(awk '/^PPid:/ { print $2 }' "/proc/$p/status")
	done | sort -u
}

# start_cluster_in_background LOG: a bash that starts a cluster, submits a
# job that runs 300 s, writes "DIR JOB" to LOG once the job runs, then
# sleeps; prints the bash's pid
start_cluster_in_background() {
	# shellcheck disable=SC2016 # the background bash's own script
	bash -c '. "$1"; slurm_up || exit 1; j=$(sbatch --parsable --wrap "sleep 300") || exit 1
		running() { [ "$(squeue -h -j "$j" -o %T)" = RUNNING ]; }
		wait_for 100 "job $j to run" running || exit 1
		echo "$SLURM_DIR $j" >"$2"; exec sleep 300' _ "$DS_SRCDIR/tests/slurm/cluster.bash" "$1" \
		</dev/null >"$1.out" 2>&1 3>&- &
	echo $!
}

# wait_cluster_job LOG PID: until the background cluster of PID runs its job
# (LOG written) or PID has given up (slurm_up may start a second cluster,
# so allow for two); if it gave up, show what it said and fail
wait_cluster_job() {
	job_or_gone() { test -s "$1" || ! kill -0 "$2" 2>/dev/null; }
	wait_for 300 "the second cluster to run its job" job_or_gone "$1" "$2"
	test -s "$1" || { cat "$1.out" >&2; false; }
}

@test "the daemons hold no descriptor of the test harness (its TAP pipe), only their own files and sockets" {
	ours=$(harness_pipes)
	[ -n "$ours" ] || fail "the test holds no pipe: nothing to compare"
	for d in munged slurmctld slurmd; do
		pid=$(cat "$SLURM_DIR/run/$d.pid")
		shared=$(comm -12 <(pipes_of "$pid") <(echo "$ours"))
		[ -z "$shared" ] || fail "$d (pid $pid) holds the harness's $shared"
		for fd in 0 1 2; do
			[ "$(readlink "/proc/$pid/fd/$fd")" = /dev/null ] || fail "$d: fd $fd is $(readlink "/proc/$pid/fd/$fd")"
		done
	done
}

@test "slurm_down stops every process of a cluster, a running job's steps and tasks included, and removes its directory" {
	log=$BATS_TEST_TMPDIR/c
	pid=$(start_cluster_in_background "$log")
	wait_cluster_job "$log" "$pid" || fail "the second cluster did not run its job"
	read -r dir j <"$log"
	procs=$(slurm_procs "$dir")
	echo "$procs" | grep -q " slurmstepd: \[$j.batch\]" || fail "no job step of $j among: $procs"
	echo "$procs" | grep -q " sleep 300 $" || fail "no job task of $j among: $procs"
	# it keeps to its own ports and state: the file's cluster is another one
	[ "$dir" != "$SLURM_DIR" ]
	[ "$(grep '^SlurmctldPort=' "$dir/slurm.conf")" != "$(grep '^SlurmctldPort=' "$SLURM_DIR/slurm.conf")" ] ||
		fail "both clusters on $(grep '^SlurmctldPort=' "$dir/slurm.conf")"
	slurm_down "$dir" 3>"$log.msg"
	[ -z "$(slurm_procs "$dir")" ] || fail "left running: $(slurm_procs "$dir")"
	[ ! -e "$dir" ] || fail "$dir is still there"
	# scancel ended the job: nothing had to be killed
	[ ! -s "$log.msg" ] || fail "slurm_down had to kill: $(cat "$log.msg")"
	kill "$pid"
}

@test "a cluster whose starter is killed is stopped by its guard" {
	log=$BATS_TEST_TMPDIR/c
	pid=$(start_cluster_in_background "$log")
	wait_cluster_job "$log" "$pid" || fail "the second cluster did not run its job"
	read -r dir _ <"$log"
	kill -KILL "$pid"
	wait_for 60 "the guard to stop the cluster in $dir" test ! -e "$dir"
	[ -z "$(slurm_procs "$dir")" ] || fail "left running: $(slurm_procs "$dir")"
}

@test "a leftover of a run that is over (starter and guard killed) is named and stopped by the next slurm_up" {
	log=$BATS_TEST_TMPDIR/c
	pid=$(start_cluster_in_background "$log")
	wait_cluster_job "$log" "$pid" || fail "the second cluster did not run its job"
	read -r dir _ <"$log"
	kill -KILL "$(cat "$dir/run/guard.pid")" "$pid"
	munged=$(cat "$dir/run/munged.pid")
	[ -n "$(slurm_procs "$dir")" ]
	(
		slurm_up 3>"$log.msg" || exit 1
		slurm_down "$SLURM_DIR"
	) || fail "slurm_up failed"
	grep -q "^# slurm_up: a leftover of an earlier run: $munged (munged .*) of cluster $dir was still running: stopped$" "$log.msg" ||
		fail "slurm_up said: $(cat "$log.msg")"
	grep -q "(sleep 300) of cluster $dir" "$log.msg" || fail "slurm_up said: $(cat "$log.msg")"
	[ -z "$(slurm_procs "$dir")" ] || fail "left running: $(slurm_procs "$dir")"
	rm -rf "$dir"
}
