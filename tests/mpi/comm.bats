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

# Device buffers on a simulated device (tests/unit/comm_devsim.h: host
# memory at non-canonical addresses, so a host dereference faults): every
# collective, type and non-blocking variant staged through pinned memory
# equals the host-buffer run; ranks sharing one device never get NCCL.
@test "device buffers staged through pinned memory equal the host run on 2 ranks sharing a device" {
	if ds_has cuda; then why="ranks 0 and 1 share device"; else why="built without NCCL"; fi
	run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/comm_check" --mem devsim --nccl auto --expect mpi
	assert_success
	assert_output --partial "$why"
	assert_output --partial "2 ranks, 0 failed checks"
}

@test "device buffers staged through pinned memory equal the host run on 4 ranks" {
	run mpirun_n 4 "$DS_BUILDDIR/tests/mpi/comm_check" --mem devsim --nccl never --own-device --expect mpi
	assert_success
	assert_output --partial "NCCL not asked for"
	assert_output --partial "4 ranks, 0 failed checks"
}

@test "NCCL required of ranks sharing a device: every rank refuses, naming them" {
	if ds_has cuda; then want="ranks 0 and 1 share device"; else want="reconfigure --with-cuda"; fi
	run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/comm_check" --mem devsim --nccl require --expect-error "$want"
	assert_success
	assert_output --partial "2 ranks, 0 failed checks"
}
