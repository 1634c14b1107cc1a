# cluster.bash - a private one-node Slurm for the tests (spec/slurm.md):
# munged, slurmctld and slurmd of one run under a fresh /tmp/dstk-slurm.XXXXXX
# with their own munge key and socket, ports nobody listened on, state,
# spool, pid files and logs; clients find it through SLURM_CONF.  Nothing
# under /etc or /run is touched, so clusters of two bats files (make -j2) or
# of two runs coexist, and a daemon left by an earlier run can neither serve
# nor disturb this one (another key, other ports, other state).
#
# What a cluster starts is stopped: by slurm_down at teardown_file, which
# bats runs also when a test or setup_file fails and on INT or TERM; should
# the process that started it die without that (KILL), a guard process sees
# it gone and runs slurm_down.  The daemons hold none of the test harness's
# file descriptors, so one left running cannot keep make check waiting for
# an end of file.  Every wait here is bounded (tests/bounded.bash) and says
# what it waited for.
#
#   slurm_skip_reason        why a cluster cannot run here (empty: it can)
#   slurm_up                 start one; exports SLURM_CONF and SLURM_DIR;
#                            first reports and stops leftovers of earlier runs
#   slurm_down DIR           cancel its jobs, stop its daemons by pid (each
#                            awaited), then name and kill any process of it
#                            still running; removes DIR
#   slurm_procs [DIR]        "PID DIR COMMAND" of every process of cluster DIR
#                            (daemons, job steps, job tasks); without DIR, of
#                            every cluster whose starter is gone
#   slurm_wait_final JOB [S] wait (at most S seconds, default 120) for the
#                            job's final jobcomp record; prints its JobState
#   slurm_jobcomp JOB        every jobcomp record of the job, one a line
# Jobs get the submitting environment (sbatch's default --export=ALL).
# shellcheck source-path=SCRIPTDIR source=../bounded.bash
. "$(dirname "${BASH_SOURCE[0]}")/../bounded.bash"
_SLURM_CLUSTER_BASH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster.bash

slurm_skip_reason() {
	local b
	[ "$(id -u 2>/dev/null)" = 0 ] || { echo "the Slurm suite runs as root (slurmd starts jobs as their user)"; return; }
	for b in slurmctld slurmd munged sbatch srun scontrol; do
		command -v "$b" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin" command -v "$b" >/dev/null 2>&1 ||
			{ echo "$b not installed (contrib/setup-debian.sh installs Slurm)"; return; }
	done
	[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so ] || ls /usr/lib/*/slurm*/mpi_pmix.so >/dev/null 2>&1 ||
		{ echo "Slurm's pmix plugin is missing (slurm-wlm-basic-plugins)"; return; }
}

# the start time of PID (field 22 of its stat, after the command's
# parentheses); nothing for a zombie, which may wait long for its reaper
_slurm_starttime() { sed -n 's/.*) [^Z] //p' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f19; }

# is the process that started cluster DIR (DIR/owner: "PID STARTTIME") alive?
_slurm_owner_alive() {
	local pid st
	read -r pid st <"$1/owner" 2>/dev/null || return 1
	[ -n "$st" ] || return 1
	[ "$(_slurm_starttime "$pid")" = "$st" ]
}

# a port nobody listens on, from a start that differs between processes
_slurm_free_port() {
	local p=$1
	for _ in $(seq 500); do
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
		p=$((p + 2))
	done
	echo "slurm_up: no free port in $1..$p" >&2
	return 1
}

# close every descriptor above 2 (the harness's TAP pipe among them): for a
# process that may outlive the test
_slurm_close_fds() {
	local fd
	for fd in "/proc/$BASHPID/fd/"*; do
		fd=${fd##*/}
		[ "$fd" -le 2 ] || eval "exec $fd>&-" 2>/dev/null
	done
}

# _slurm_start DIR DAEMON ARGS...: start a daemon of cluster DIR (it forks
# and returns), marked DSTK_SLURM_DIR=DIR in its environment (slurmd passes
# the mark on to slurmstepd); at most 60 s
_slurm_start() {
	local D=$1 rc=0
	shift
	(
		_slurm_close_fds
		exec timeout -k 5 60 env DSTK_SLURM_DIR="$D" "$@" </dev/null >>"$D/log/start.out" 2>&1
	) || rc=$?
	[ "$rc" -eq 0 ] && return 0
	if [ "$rc" -eq 124 ]; then
		bounded_say "timed out after 60 s: starting $* (cluster $D)"
	else
		echo "slurm_up: $1 failed to start (exit $rc); $D/log/start.out:" >&2
	fi
	tail -5 "$D/log/start.out" "$D/log/$1.log" >&2 2>/dev/null
	return 1
}

slurm_procs() {
	local want=${1:-} f pid dir
	# daemons and job steps carry DSTK_SLURM_DIR; job tasks SLURM_CONF
	# (DIR/slurm.conf) and a SLURM_JOB_ID (the tests run with none)
	while read -r f; do
		pid=${f#/proc/} pid=${pid%/environ}
		if [ "$pid" = "$BASHPID" ] || [ "$pid" = $$ ]; then continue; fi
		dir=$(grep -saz '^DSTK_SLURM_DIR=' "$f" | tr -d '\0')
		dir=${dir#DSTK_SLURM_DIR=}
		if [ -z "$dir" ]; then
			grep -qsaz '^SLURM_JOB_ID=' "$f" || continue
			dir=$(grep -saz '^SLURM_CONF=' "$f" | tr -d '\0')
			dir=${dir#SLURM_CONF=} dir=${dir%/slurm.conf}
		fi
		if [ -n "$want" ]; then
			[ "$dir" = "$want" ] || continue
		else
			! _slurm_owner_alive "$dir" || continue
		fi
		echo "$pid $dir $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")"
	done < <(grep -lsaz '^DSTK_SLURM_DIR=\|^SLURM_CONF=/tmp/dstk-slurm\.[^/]*/slurm\.conf$' /proc/[0-9]*/environ)
}

# _slurm_kill_procs WHO DIR: TERM, then KILL 3 s later, every process
# slurm_procs DIR lists, each named in a message that begins with WHO
_slurm_kill_procs() {
	local who=$1 pid dir cmd pids=
	while read -r pid dir cmd; do
		[ -n "$pid" ] || continue
		bounded_say "$who: $pid ($cmd) of cluster $dir was still running: stopped"
		pids="$pids $pid"
	done < <(slurm_procs "$2")
	[ -n "$pids" ] || return 0
	# shellcheck disable=SC2086
	kill -TERM $pids 2>/dev/null
	sleep 3
	# shellcheck disable=SC2086
	kill -KILL $pids 2>/dev/null
	return 0
}

# leftovers of earlier runs, whose starter is gone: processes named and
# stopped, directories (a minute old: not one being set up) removed
_slurm_reap() {
	local d
	_slurm_kill_procs "slurm_up: a leftover of an earlier run" ""
	while read -r d; do
		_slurm_owner_alive "$d" || rm -rf "$d"
	done < <(find /tmp -maxdepth 1 -name 'dstk-slurm.*' -mmin +1 2>/dev/null)
}

_slurm_ready() {
	[ "$(timeout -k 5 15 sinfo -h -o %T 2>/dev/null)" = idle ] || return 1
	timeout -k 5 40 srun --immediate=30 -n1 -t1 true 2>>"$SLURM_DIR/log/probe.out"
}

# a daemon of the cluster being started that has exited (its pid file
# written, the process gone): its name; nothing while all are running
_slurm_exited() {
	local d pid
	for d in munged slurmctld slurmd; do
		pid=$(cat "$SLURM_DIR/run/$d.pid" 2>/dev/null) || continue
		[ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || { echo "$d"; return; }
	done
}

# ready, or no longer able to become ready (a daemon exited): stop waiting
_slurm_ready_or_exited() { [ -n "$(_slurm_exited)" ] || _slurm_ready; }

# One cluster that does not come up (a daemon that exits while it starts:
# seen twice in CI at a load of 7 on 2 cores, slurmctld gone before it
# answered) is shown with its logs and replaced once by a fresh one, with
# other ports, key and state; a second failure fails slurm_up.
slurm_up() {
	export PATH="$PATH:/usr/sbin"
	# the variables of an allocation these tests might run in are not ours
	# shellcheck disable=SC2046
	unset $(compgen -e | grep '^SLURM_')
	_slurm_reap
	_slurm_up_once 0 && return 0
	bounded_say "slurm_up: the cluster did not come up (above); starting a new one, once"
	_slurm_up_once 1000
}

# _slurm_up_once SHIFT: one cluster, its ports searched from a start that
# SHIFT moves (the retry does not reuse the failed cluster's)
_slurm_up_once() {
	local D H cport dport gone ready=0
	# /tmp, not TMPDIR: the munge socket's path must stay short
	D=$(mktemp -d /tmp/dstk-slurm.XXXXXX) || return 1
	export SLURM_DIR="$D" SLURM_CONF="$D/slurm.conf"
	mkdir -p "$D"/{state,spool,log,run,pmix}
	echo "$$ $(_slurm_starttime $$)" >"$D/owner"
	# the guard: once the starter is gone, slurm_down (a no-op after ours)
	(
		_slurm_close_fds
		# shellcheck disable=SC2016 # the guard's own script
		exec setsid bash -c '. "$1"; while _slurm_owner_alive "$2"; do sleep 1; done; slurm_down "$2"' \
			guard "$_SLURM_CLUSTER_BASH" "$D" </dev/null >/dev/null 2>&1
	) &
	echo $! >"$D/run/guard.pid"
	H=$(hostname -s)
	cport=$(_slurm_free_port $((20000 + (($$ + $1) % 2000) * 10))) || { _slurm_up_failed; return 1; }
	dport=$(_slurm_free_port $((cport + 1))) || { _slurm_up_failed; return 1; }
	dd if=/dev/urandom of="$D/munge.key" bs=1024 count=1 status=none
	chmod 400 "$D/munge.key"
	_slurm_start "$D" munged --force --key-file="$D/munge.key" --socket="$D/munge.sock" \
		--pid-file="$D/run/munged.pid" --log-file="$D/log/munged.log" --seed-file="$D/munged.seed" || { _slurm_up_failed; return 1; }
	cat >"$D/slurm.conf" <<CONF
ClusterName=dstk$cport
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge.sock,cred_expire=10
SlurmctldPort=$cport
SlurmdPort=$dport
FirstJobId=$((cport * 10))
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=sched_interval=2,bf_interval=1
MpiDefault=pmix
MailProg=/bin/true
ReturnToService=2
MinJobAge=4
KillWait=5
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.txt
SlurmdParameters=config_overrides
NodeName=$H NodeAddr=127.0.0.1 CPUs=4 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
	# PMIx client files of this cluster stay under its directory
	echo "PMIxCliTmpDirBase=$D/pmix" >"$D/mpi.conf"
	_slurm_start "$D" slurmctld -c || { _slurm_up_failed; return 1; }
	_slurm_start "$D" slurmd -N "$H" || { _slurm_up_failed; return 1; }
	wait_for 90 "the Slurm cluster in $D to come up (sinfo: node idle, then srun -n1 true runs)" \
		_slurm_ready_or_exited && ready=1
	gone=$(_slurm_exited)
	if [ -n "$gone" ] || [ "$ready" = 0 ]; then
		[ -z "$gone" ] || bounded_say "slurm_up: $gone of cluster $D exited while the cluster came up"
		echo "sinfo: $(timeout -k 5 15 sinfo -h -o '%T %E' 2>&1)" >&2
		# what is left of the cluster: its directory, its logs, its daemons
		[ -d "$D" ] || echo "slurm_up: $D was removed while the cluster came up" >&2
		echo "slurm_up: in $D/log: $(find "$D/log" -mindepth 1 -printf '%f ' 2>&1); daemons: $(slurm_procs "$D" | cut -d' ' -f1,3 | tr '\n' ';')" >&2
		tail -n 12 "$D"/log/*.log "$D/log/start.out" "$D/log/probe.out" >&2 2>/dev/null
		_slurm_up_failed
		return 1
	fi
}

# slurm_up gave up: stop what it started (the logs were shown) and fail
_slurm_up_failed() {
	slurm_down "$SLURM_DIR"
	unset SLURM_DIR SLURM_CONF
	return 1
}

_slurm_gone() { ! kill -0 "$1" 2>/dev/null; }
_slurm_no_jobs() { [ -z "$(timeout -k 5 15 squeue -h -o %i 2>/dev/null)" ]; }

slurm_down() {
	local D=$1 d pid guard
	[ -n "$D" ] && [ -d "$D" ] || return 0
	(
		export SLURM_CONF="$D/slurm.conf"
		# its jobs first: a job step outlives slurmd
		if [ -s "$D/run/slurmctld.pid" ] && kill -0 "$(cat "$D/run/slurmctld.pid")" 2>/dev/null && ! _slurm_no_jobs; then
			bounded 30 scancel --user="$(id -un)"
			wait_for 60 "the jobs of cluster $D to end after scancel" _slurm_no_jobs
		fi
		for d in slurmd slurmctld munged; do
			[ -s "$D/run/$d.pid" ] || continue
			pid=$(cat "$D/run/$d.pid")
			kill -TERM "$pid" 2>/dev/null || continue
			wait_for 30 "$d of cluster $D (pid $pid) to exit after SIGTERM; killed" _slurm_gone "$pid" ||
				kill -KILL "$pid" 2>/dev/null
		done
	)
	# what is left of it (a job step, a task, a daemon whose pid file was
	# never written): named and killed
	_slurm_kill_procs "slurm_down" "$D"
	guard=$(cat "$D/run/guard.pid" 2>/dev/null)
	[ -z "$guard" ] || [ "$guard" = "$BASHPID" ] || kill -TERM "$guard" 2>/dev/null
	rm -rf "$D"
	return 0
}

slurm_jobcomp() { grep -E "^JobId=$1 " "$SLURM_DIR/log/jobcomp.txt" 2>/dev/null; }

# the job's last record once it is final: its JobState.  A requeued run leaves
# a record too (JobState=PENDING in 22.05, REQUEUED in others): not final.
_slurm_final() {
	_slurm_st=$(slurm_jobcomp "$1" | tail -1 | sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p')
	case $_slurm_st in
	"" | PENDING | REQUEUED* | REQUEUE_*) return 1 ;;
	esac
}

slurm_wait_final() {
	local _slurm_st=
	if ! wait_for "${2:-120}" "job $1 to end (its final record in $SLURM_DIR/log/jobcomp.txt)" _slurm_final "$1"; then
		echo "TIMEOUT_WAITING"
		return 1
	fi
	echo "$_slurm_st"
}
