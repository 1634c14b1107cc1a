# helper.bash - loaded by every bats file under tests/ (STYLE rule 21).
# Puts the build's tools first on PATH, fixes the locale, gives each test a
# scratch directory, and offers feature checks that `skip` honestly.
# Every wait in a test is bounded: ../bounded.bash (bounded, wait_pid, wait_for).
# shellcheck disable=SC2034  # SHARE, TDATA and the like are for the .bats files that load this
bats_require_minimum_version 1.5.0
load '/usr/lib/bats/bats-support/load'
load '/usr/lib/bats/bats-assert/load'
load "$(dirname "${BASH_SOURCE[0]}")/../bounded"

: "${DS_BUILDDIR:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
: "${DS_SRCDIR:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
export PATH="$DS_BUILDDIR/tools:$PATH"
export LC_ALL=C
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
SHARE="$DS_SRCDIR/share"
TDATA="$DS_SRCDIR/tests/data"

# ds_has FEATURE: true when `ds-report --version` lists it (mpi, libaio, cuda).
ds_has() { ds-report --version | grep -qw -- "$1"; }
require_feature() { ds_has "$1" || skip "built without $1"; }
