#!/usr/bin/env bats
# The 1-bit optimizers between real ranks: the compressed allreduce
# (tests/mpi/onebit_check.c) against the hand-worked example of
# tests/unit/onebit_example.h at 2 ranks, and against the ranks simulated
# in one process at 2, 3 and 4.
load helper

@test "compressed allreduce: the hand-worked 2-rank, 2-step example, exactly" {
	run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/onebit_check" example
	assert_success
	assert_output "ok"
}

@test "compressed allreduce at 3 and 4 ranks: the same bits as the ranks played in one process" {
	for n in 3 4; do
		run mpirun_n "$n" "$DS_BUILDDIR/tests/mpi/onebit_check" simulate
		assert_success
		assert_output "ok"
	done
}
