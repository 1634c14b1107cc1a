#!/usr/bin/env bats
# comm.bats - collectives on CUDA device buffers (tests/mpi/comm_check.c
# --mem cuda: every collective, data type and non-blocking variant on
# cudaMalloc'd buffers equals the host-buffer run): over NCCL, and over the
# mpi backend staging through pinned memory where ranks share a GPU.  Needs
# a CUDA device: bench/gpu-run.sh runs it on the GPU machine; elsewhere
# every test skips with the reason.
load ../mpi/helper

setup() {
	require_feature mpi
	require_feature cuda
	local d
	d=$("$DS_BUILDDIR/tests/mpi/comm_check" --devices) || fail "comm_check --devices: $d"
	[[ $d =~ ^devices\ ([0-9]+) ]] || fail "comm_check --devices: $d"
	NDEV=${BASH_REMATCH[1]}
	[ "$NDEV" -gt 0 ] || skip "no CUDA device (${d#*: })"
	CHECK=$DS_BUILDDIR/tests/mpi/comm_check
}

@test "gpu: one rank over NCCL (required) equals the host-buffer run" {
	run mpirun_n 1 "$CHECK" --mem cuda --nccl require --expect nccl
	assert_success
	assert_output --partial "device buffers over nccl"
	assert_output --partial "1 ranks, 0 failed checks"
}

@test "gpu: two ranks sharing one GPU stage through pinned memory over mpi" {
	run mpirun_n 2 env CUDA_VISIBLE_DEVICES=0 "$CHECK" --mem cuda --nccl auto --expect mpi
	assert_success
	assert_output --partial "ranks 0 and 1 share device"
	assert_output --partial "2 ranks, 0 failed checks"
}

@test "gpu: four ranks sharing one GPU stage through pinned memory over mpi" {
	run mpirun_n 4 env CUDA_VISIBLE_DEVICES=0 "$CHECK" --mem cuda --nccl auto --expect mpi
	assert_success
	assert_output --partial "4 ranks, 0 failed checks"
}

@test "gpu: NCCL required of two ranks sharing one GPU is refused on every rank" {
	run mpirun_n 2 env CUDA_VISIBLE_DEVICES=0 "$CHECK" --mem cuda --nccl require \
		--expect-error "ranks 0 and 1 share device"
	assert_success
	assert_output --partial "2 ranks, 0 failed checks"
}

@test "gpu: two ranks on two GPUs use NCCL" {
	[ "$NDEV" -ge 2 ] || skip "one CUDA device: NCCL between ranks needs two"
	run mpirun_n 2 "$CHECK" --mem cuda --nccl auto --expect nccl
	assert_success
	assert_output --partial "each of the 2 ranks has a device of its own"
	assert_output --partial "2 ranks, 0 failed checks"
}
