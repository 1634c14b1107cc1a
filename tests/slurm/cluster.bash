# cluster.bash - a private one-node Slurm for the tests (../shared/spec/slurm.md):
# slurmctld + slurmd + munged under one directory, with their own munge key
# and socket, ports, state and logs; clients find it through SLURM_CONF.
# Nothing under /etc or /run is touched, and the daemons are stopped by the
# PIDs they wrote, so two clusters (two bats files under make -j2) coexist.
#
#   slurm_skip_reason        prints why a cluster cannot run here (empty: it can)
#   slurm_up DIR             start it; exports SLURM_CONF and SLURM_DIR
#   slurm_down DIR           stop the daemons by PID, waiting for each
#   slurm_wait_final JOB [S] wait (at most S seconds, default 120) for the
#                            job's final jobcomp record; prints its JobState
#   slurm_jobcomp JOB        every jobcomp record of the job, one a line
# Jobs get the submitting environment (sbatch's default --export=ALL).

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

# a port nobody listens on, from a start that differs between processes
_slurm_free_port() {
	local p=$1
	while (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; do p=$((p + 2)); done
	echo "$p"
}

slurm_up() {
	local D=$1 H i
	export PATH="$PATH:/usr/sbin"
	H=$(hostname -s)
	mkdir -p "$D"/{state,spool,log,run,pmix}
	D=$(cd "$D" && pwd)
	local base=$((20000 + ($$ % 2000) * 10))
	local cport dport
	cport=$(_slurm_free_port "$base")
	dport=$(_slurm_free_port $((cport + 1)))
	dd if=/dev/urandom of="$D/munge.key" bs=1024 count=1 status=none
	chmod 400 "$D/munge.key"
	munged --force --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/run/munged.pid" \
		--log-file="$D/log/munged.log" --seed-file="$D/munged.seed" || return 1
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
	export SLURM_CONF="$D/slurm.conf" SLURM_DIR="$D"
	slurmctld -c || { slurm_down "$D"; return 1; }
	slurmd -N "$H" || { slurm_down "$D"; return 1; }
	for i in $(seq 100); do
		if [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && srun -n1 -t1 true 2>/dev/null; then
			return 0
		fi
		sleep 0.2
	done
	echo "slurm_up: the cluster in $D did not become ready in 20 s; logs:" >&2
	tail -5 "$D"/log/*.log >&2
	slurm_down "$D"
	return 1
}

slurm_down() {
	local D=$1 d pid i
	for d in slurmd slurmctld munged; do
		[ -s "$D/run/$d.pid" ] || continue
		pid=$(cat "$D/run/$d.pid")
		kill -TERM "$pid" 2>/dev/null || continue
		for i in $(seq 150); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	done
	return 0
}

slurm_jobcomp() { grep -E "^JobId=$1 " "$SLURM_DIR/log/jobcomp.txt" 2>/dev/null; }

# The job's last record once it is final: its JobState.  A requeued run leaves
# a record too (JobState=PENDING in 22.05, REQUEUED in others): not final.
slurm_wait_final() {
	local job=$1 cap=${2:-120} i st
	for i in $(seq $((cap * 2))); do
		st=$(slurm_jobcomp "$job" | tail -1 | sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p')
		case $st in
		"" | PENDING | REQUEUED* | REQUEUE_*) ;;
		*) echo "$st"; return 0 ;;
		esac
		sleep 0.5
	done
	echo "TIMEOUT_WAITING"
	return 1
}
