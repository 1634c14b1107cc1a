#!/bin/bash
# run-all.sh - build dstk twice and run every test, then print "N skipped"
# and, last, the closing line "N passed, N failed" over all TAP results.
#   build/      the full build (MPI, libaio, CUDA when present): make check
#   build-min/  --without-mpi --without-libaio --without-cuda: make check,
#               so the stubs stay honest
# The full build's make check includes tests/slurm: as root with Slurm
# installed (contrib/setup-debian.sh) each file starts a private one-node
# cluster (tests/slurm/cluster.bash); otherwise its tests are skipped with
# the reason, and counted as skipped below.
# Exit status is non-zero when any test failed or a build broke.
# shellcheck disable=SC2164,SC2013,SC2046  # it cd-s only into directories it just found or made; log names have no spaces
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
jobs=${JOBS:-$(nproc)}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# mpirun as root (CI runs as root) and on 2 cores with 4 ranks
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none

pass=0 fail=0 skip=0 broken=0
[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] || autoreconf -fi >/dev/null 2>&1 || { echo "autoreconf failed"; broken=1; }

run_build() { # dir, configure args...
	local dir=$1; shift
	echo "== $dir: configure $*"
	mkdir -p "$top/$dir" && cd "$top/$dir" || return 1
	"$top/configure" -q "$@" >configure.out 2>&1 || { cat configure.out; return 1; }
	make -j"$jobs" >make.out 2>&1 || { tail -40 make.out; return 1; }
	make -j"$jobs" check >check.out 2>&1
	grep -E '^(FAIL|ERROR|XPASS):' check.out
	local p f s e
	p=$(awk '/^# PASS:/ {print $3}' check.out | tail -1)
	f=$(awk '/^# FAIL:/ {print $3}' check.out | tail -1)
	s=$(awk '/^# SKIP:/ {print $3}' check.out | tail -1)
	e=$(awk '/^# ERROR:/ {print $3}' check.out | tail -1)
	if [ -z "$p" ]; then tail -40 check.out; return 1; fi
	echo "   $dir: $p passed, $((f + e)) failed, $s skipped"
	pass=$((pass + p)) fail=$((fail + f + e)) skip=$((skip + s))
	# show the logs of what failed, so CI output says why
	for log in $(grep -lE '^(not ok|FAIL|ERROR)' $(find . -name '*.log' ! -name test-suite.log ! -name config.log) 2>/dev/null); do
		echo "--- $dir/$log"; grep -vE '^(ok|PASS)' "$log" | tail -30
	done
	cd "$top"
}

run_build build || broken=1
cd "$top"
run_build build-min --without-mpi --without-libaio --without-cuda || broken=1
cd "$top"

[ "$broken" -eq 0 ] || fail=$((fail + 1))
echo "$skip skipped (neither passed nor failed)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
