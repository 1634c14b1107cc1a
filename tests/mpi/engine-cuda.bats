#!/usr/bin/env bats
# The engine on the cuda backend data-parallel over the mpi communicator
# (issue 18), over the host emulation of CUDA (tests/mpi/engine_cuda_check.c):
# at 2 ranks ZeRO stages 0-3, at 4 ranks stages 0 and 3 (the emulation
# takes seconds a step: a run may take minutes, hence DS_MPIRUN_TIMEOUT
# 900), each with overlap_comm off and on, every step's loss and grad norm
# equal the 1-rank run's and the cpu backend's at the same world size within
# 1e-5 relative; the device buffers take the staged mpi path (the ranks
# share the emulated device) and the comms logger sees the stage's
# collectives; DS_COMM_NCCL never and auto stage, a bad value is refused.
# bf16 (2 ranks, ZeRO 0-3; 4 ranks, ZeRO 3) and fp16 (2 ranks, ZeRO 0 and 2,
# an inf injected at step 3) train the same way: the losses and norms within
# 16-bit tolerances (engine_cuda_check.c), the skipped steps, overflows and
# the fp16 loss scale exactly the cpu backend's and the 1-rank run's at
# every step; so does an fp32 model with communication_data_type bf16.
# A planted partitioning fault must break it.  Needs a build
# with CUDA (the emulation is compiled from the same .cu sources); skips
# with the reason otherwise.
load helper

MODEL_DROPOUT="$TDATA/gpt-test-dropout.json"

setup() {
	require_feature mpi
	require_feature cuda
	[ -x "$DS_BUILDDIR/tests/mpi/engine_cuda_check" ] || skip "tests/mpi/engine_cuda_check not built (make check builds it where cmocka is)"
}

@test "emulated cuda at 2 ranks, ZeRO 0-3, overlap_comm off and on: the 1-rank and the cpu losses and norms" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" "$MODEL_DROPOUT" 3
	assert_success
	assert_output --partial "device path mpi"
	assert_output --partial "2 ranks, 0 failed checks"
	[ "$(grep -c '^stage [0-3] overlap [01]: ' <<<"$output")" -eq 8 ] || fail "not every configuration ran: $output"
}

@test "emulated cuda at 4 ranks, ZeRO 0 and 3, overlap_comm off and on: the 1-rank and the cpu losses and norms" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 4 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" "$MODEL_DROPOUT" 2 03
	assert_success
	assert_output --partial "device path mpi"
	assert_output --partial "4 ranks, 0 failed checks"
	[ "$(grep -c '^stage [03] overlap [01]: ' <<<"$output")" -eq 4 ] || fail "not every configuration ran: $output"
}

@test "emulated cuda bf16 at 2 ranks, ZeRO 0-3, overlap_comm off and on: the 1-rank and the cpu losses and norms" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" "$MODEL_DROPOUT" 2 0123 bf16
	assert_success
	assert_output --partial "device path mpi"
	assert_output --partial "2 ranks, 0 failed checks"
	[ "$(grep -c '^stage [0-3] overlap [01]: ' <<<"$output")" -eq 8 ] || fail "not every configuration ran: $output"
}

@test "emulated cuda bf16 at 4 ranks, ZeRO 3, overlap_comm off and on: the 1-rank and the cpu losses and norms" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 4 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" "$MODEL_DROPOUT" 2 3 bf16
	assert_success
	assert_output --partial "4 ranks, 0 failed checks"
	[ "$(grep -c '^stage 3 overlap [01]: ' <<<"$output")" -eq 2 ] || fail "not every configuration ran: $output"
}

@test "emulated cuda fp16 at 2 ranks, ZeRO 0 and 2, an inf at step 3: the cpu's skips and loss scale" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 2 -x DS_TEST_INJECT_INF_STEP=3 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" \
		"$MODEL_DROPOUT" 4 02 fp16
	assert_success
	assert_output --partial "device path mpi"
	assert_output --partial "2 ranks, 0 failed checks"
	[ "$(grep -c '^stage [02] overlap [01]: ' <<<"$output")" -eq 4 ] || fail "not every configuration ran: $output"
}

@test "emulated cuda fp32 with communication_data_type bf16 at 2 ranks, ZeRO 0 and 2: the 1-rank and the cpu losses" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" "$MODEL_DROPOUT" 2 02 cdt-bf16
	assert_success
	assert_output --partial "2 ranks, 0 failed checks"
	[ "$(grep -c '^stage [02] overlap [01]: ' <<<"$output")" -eq 4 ] || fail "not every configuration ran: $output"
}

@test "emulated cuda at 2 ranks: a planted partitioning fault leaves the 1-rank losses" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 2 -x DS_TEST_FAULT_SHARD_SHIFT=1 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" "$MODEL_DROPOUT" 2 1
	assert_failure
	assert_output --partial "vs 1-rank"
	refute_output --partial "ranks, 0 failed checks"
}
