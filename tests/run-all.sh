#!/bin/bash
# run-all.sh - build dstk twice and run every test, then print "N skipped"
# and, last, the closing line "N passed, N failed" over all TAP results.
#   build/      the full build (MPI, libaio, CUDA when present): make check,
#               then the Slurm suite once more right after the first run on
#               this machine (what a run leaves must not break the next)
#   build-min/  --without-mpi --without-libaio --without-cuda: make check,
#               so the stubs stay honest
# The full build's make check includes tests/slurm: as root with Slurm
# installed (contrib/setup-debian.sh) each file starts a private one-node
# cluster (tests/slurm/cluster.bash); otherwise its tests are skipped with
# the reason, and counted as skipped below.
#
# While make check runs, each test file is shown as it starts and ends, with
# its time and results, and every 2 minutes the files still running: a slow
# or hung file is visible in CI output.  Nothing waits forever: a test file
# gets DS_TEST_FILE_TIMEOUT s (600, tests/bound.sh), each make check
# DS_CHECK_TIMEOUT s (1800) before it is stopped and its running files are
# counted as failed; both times the load per core when they start
# (bounded_scale in tests/bounded.bash; DS_TIMEOUT_SCALE sets it).  A process a test left running (its environment names
# this build's DS_BUILDDIR) is named, stopped and counted as a failure.
# Exit status is non-zero when any test failed or a build broke.
# shellcheck disable=SC2164,SC2013,SC2046  # it cd-s only into directories it just found or made; log names have no spaces
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
# shellcheck source-path=SCRIPTDIR source=bounded.bash
. "$top/tests/bounded.bash"
jobs=${JOBS:-$(nproc)}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# mpirun as root (CI runs as root) and on 2 cores with 4 ranks
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none

pass=0 fail=0 skip=0 broken=0 unfinished=()
[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] || autoreconf -fi >/dev/null 2>&1 || { echo "autoreconf failed"; broken=1; }

# the name of a test from its log's base: tests/cli/man -> tests/cli/man.bats
label() {
	local x
	for x in .bats .sh ""; do
		if [ -e "$top/$1$x" ]; then break; fi
	done
	echo "$1$x"
}

# "3 PASS, 1 SKIP" from a .trs file
results() { awk '/^:test-result:/ { n[$2]++ } END { for (r in n) printf "%s%d %s", (s++ ? ", " : ""), n[r], r }' "$1"; }

# watch_tests PID BASE...: until PID ends, print each test (its log's base;
# none: every log make check writes) as it starts and as it ends, with its
# time and results, and every 2 minutes the ones still running; leaves the
# ones that started and did not end in unfinished[]
watch_tests() {
	local pid=$1 base now alive list
	shift
	local -A t0=() ended=() beat=()
	while :; do
		alive=1
		kill -0 "$pid" 2>/dev/null || alive=
		now=$SECONDS
		list=("$@")
		[ $# -gt 0 ] || mapfile -t list < <(find tests -name '*.log' ! -name 'test-suite*.log' 2>/dev/null | sed 's/\.log$//' | sort)
		for base in "${list[@]}"; do
			if [ -n "${ended[$base]:-}" ] || [ ! -e "$base.log" ]; then continue; fi
			if [ -z "${t0[$base]:-}" ]; then
				t0[$base]=$now beat[$base]=$now
				echo "   start $(label "$base")"
			fi
			if [ -e "$base.trs" ]; then
				ended[$base]=1
				printf '   done  %-40s %4d s  %s\n' "$(label "$base")" $((now - t0[$base])) "$(results "$base.trs")"
			elif [ $((now - beat[$base])) -ge 120 ]; then
				beat[$base]=$now
				echo "   ...   $(label "$base") still running after $((now - t0[$base])) s"
			fi
		done
		[ -n "$alive" ] || break
		sleep 1
	done
	unfinished=()
	for base in "${!t0[@]}"; do [ -n "${ended[$base]:-}" ] || unfinished+=("$base"); done
}

# processes a test left running: their environment names this build
leftovers() {
	grep -lsxz "DS_BUILDDIR=$1" /proc/[0-9]*/environ | sed 's|^/proc/\([0-9]*\)/environ$|\1|' |
		while read -r p; do
			[ "$(ps -o stat= -p "$p" | cut -c1)" != Z ] || continue
			echo "$p $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")"
		done
}

# run_check DIR LABEL [TEST...]: make check in DIR (only TEST... when given;
# check.out, or check-LABEL.out for a subset), bounded; adds its results to
# the totals and shows the logs of what failed.  Returns 1 when make check
# broke before running tests.
run_check() {
	local dir=$1 name=$2 out=check.out began=$SECONDS rc=0 p f s e pid bases=() t left all stopped=0
	local check_timeout=$((${DS_CHECK_TIMEOUT:-1800} * $(bounded_scale)))
	shift 2
	for t in "$@"; do bases+=("${t%.bats}"); done
	if [ $# -gt 0 ]; then
		out=check-$name.out
		for t in "${bases[@]}"; do rm -f "$t.log" "$t.trs"; done
		set -- TESTS="$*" TEST_SUITE_LOG="test-suite-$name.log"
	else
		find tests \( -name '*.log' -o -name '*.trs' \) -delete 2>/dev/null
	fi
	timeout -k 60 "$check_timeout" make -j"$jobs" check "$@" >"$out" 2>&1 &
	pid=$!
	# make check runs in timeout's process group: pass an interrupt on
	trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"; echo "run-all.sh: interrupted"; exit 130' INT TERM HUP
	watch_tests "$pid" "${bases[@]}"
	wait "$pid" || rc=$?
	trap - INT TERM HUP
	grep -E '^(FAIL|ERROR|XPASS):' "$out"
	all=("${bases[@]}")
	[ ${#all[@]} -gt 0 ] || mapfile -t all < <(find tests -name '*.log' ! -name 'test-suite*.log' | sed 's/\.log$//')
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		# make removes the logs of the files it was running when stopped
		echo "   $dir: make check ($name) did not finish in $check_timeout s (DS_CHECK_TIMEOUT): stopped; counted as failed:"
		for t in "${unfinished[@]}"; do echo "     $(label "$t") (it was still running)"; done
		[ ${#unfinished[@]} -gt 0 ] || echo "     make check itself"
		stopped=$((${#unfinished[@]} + (${#unfinished[@]} == 0)))
	elif ! grep -q '^# TOTAL:' "$out"; then
		tail -40 "$out"
		return 1
	fi
	local trs=()
	for t in "${all[@]}"; do [ ! -e "$t.trs" ] || trs+=("$t.trs"); done
	read -r p f s e < <(cat /dev/null "${trs[@]}" | awk '/^:test-result:/ { n[$2]++ }
		END { print n["PASS"] + n["XFAIL"], n["FAIL"] + n["XPASS"], n["SKIP"] + 0, n["ERROR"] + 0 }')
	echo "   $dir ($name): $p passed, $((f + e + stopped)) failed, $s skipped in $((SECONDS - began)) s"
	pass=$((pass + p)) fail=$((fail + f + e + stopped)) skip=$((skip + s))
	# show the logs of what failed, so CI output says why
	[ ${#trs[@]} -eq 0 ] || while read -r log; do
		echo "--- $dir/$log"
		grep -vE '^(ok|PASS)' "$log" | tail -30
	done < <(grep -lE '^(not ok|FAIL|ERROR)' "${trs[@]/%.trs/.log}" 2>/dev/null)
	# what a test started must be gone when make check is (a moment's grace
	# for what is still exiting)
	left=$(leftovers "$PWD")
	[ -z "$left" ] || { sleep 5; left=$(leftovers "$PWD"); }
	if [ -n "$left" ]; then
		echo "   $dir ($name): left running after make check, stopped and counted as failed:"
		while read -r t; do echo "     $t"; done <<<"$left"
		# shellcheck disable=SC2046
		kill -KILL $(echo "$left" | cut -d' ' -f1) 2>/dev/null
		fail=$((fail + 1))
	fi
	return 0
}

run_build() { # dir, configure args...
	local dir=$1 slurm=()
	shift
	echo "== $dir: configure $*"
	mkdir -p "$top/$dir" && cd "$top/$dir" || return 1
	"$top/configure" -q "$@" >configure.out 2>&1 || { cat configure.out; return 1; }
	make -j"$jobs" >make.out 2>&1 || { tail -40 make.out; return 1; }
	echo "== $dir: make check"
	run_check "$dir" all || return 1
	# the Slurm suite a second time in a row, when it ran (not all skipped)
	mapfile -t slurm < <(grep -lE '^:test-result: (PASS|FAIL|ERROR)' tests/slurm/*.trs 2>/dev/null | sed 's/\.trs$/.bats/')
	if [ ${#slurm[@]} -gt 0 ]; then
		echo "== $dir: the Slurm suite again, right after the first run on this machine"
		run_check "$dir" slurm-again "${slurm[@]}" || return 1
	fi
	cd "$top" || return 1
}

run_build build || broken=1
cd "$top" || exit 1
run_build build-min --without-mpi --without-libaio --without-cuda || broken=1
cd "$top" || exit 1

[ "$broken" -eq 0 ] || fail=$((fail + 1))
echo "$skip skipped (neither passed nor failed)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
