#!/usr/bin/env bats
# The mpi communicator under mpirun at 2 and 4 ranks (tests/mpi/comm_check.c).
load helper

@test "collectives agree with hand-computed values on 2 ranks" {
	run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/comm_check"
	assert_success
	assert_output --partial "2 ranks, 0 failed checks"
}

@test "collectives agree with hand-computed values on 4 ranks" {
	run mpirun_n 4 "$DS_BUILDDIR/tests/mpi/comm_check"
	assert_success
	assert_output --partial "4 ranks, 0 failed checks"
}
