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
# bf16 (2 ranks, ZeRO 0 and 3) and fp16 (2 ranks, ZeRO 2, an inf injected
# at step 3) train the same way (a subset: an emulated step takes seconds;
# tests/gpu/train.bats runs ZeRO 0-3 in both on a GPU): the losses and norms within
# 16-bit tolerances (engine_cuda_check.c), the skipped steps, overflows and
# the fp16 loss scale exactly the cpu backend's and the 1-rank run's at
# every step; so does an fp32 model with communication_data_type bf16
# (ZeRO 2).
# The memory plan's device, host and pinned bytes hold at 2 ranks over
# ds-train-emu.  A planted partitioning fault must break it.  Needs a build
# with CUDA (the emulation is compiled from the same .cu sources); skips
# with the reason otherwise.
# shellcheck disable=SC2154  # stderr: set by bats' run --separate-stderr
load helper

MODEL_DROPOUT="$TDATA/gpt-test-dropout.json"
field() { awk -v k="$2" 'BEGIN { RS = " [|] " } index($0, k " ") == 1 { print substr($0, length(k) + 2) + 0 }' <<<"$1"; }

setup() {
	require_feature mpi
	require_feature cuda
	[ -x "$DS_BUILDDIR/tests/mpi/engine_cuda_check" ] || skip "tests/mpi/engine_cuda_check not built (make check builds it where cmocka is)"
}

# the memory plan of a --device cuda run (ds-train --check's device_total,
# host_total less comm_staging, comm_staging) against what ds-train over
# the emulation (tests/unit/ds-train-emu) allocates at 2 ranks sharing the
# emulated GPU: the backend's device bytes and the host allocator's byte
# for byte, and the staged mpi path's pinned pool equal to the plan's one
# buffer of the largest collective without overlap_comm, at most the
# plan's one per call in flight with it
@test "emulated cuda at 2 ranks, ZeRO 0-3: device, host and pinned bytes as the memory plan says" {
	local emu=$DS_BUILDDIR/tests/unit/ds-train-emu st ov line dev host pin
	[ -x "$emu" ] || fail "$emu is missing: make check builds it on a CUDA build"
	for st in 0 1 2 3; do
		for ov in false true; do
			[ "$ov" = true ] && [ "$st" -ne 3 ] && continue
			printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "zero_optimization": {"stage": %d, "overlap_comm": %s}}' \
				"$st" "$ov" >"$BATS_TEST_TMPDIR/z.json"
			run -0 ds-train --check --world-size 2 --deepspeed_config "$BATS_TEST_TMPDIR/z.json" \
				--model "$SHARE/models/gpt-test.json" --device cuda
			dev=$(awk '$1 == "device_total" { print $2 }' <<<"$output")
			pin=$(awk '$1 == "comm_staging" { print $2 }' <<<"$output")
			host=$(($(awk '$1 == "host_total" { print $2 }' <<<"$output") - pin))
			[ "$pin" -gt 0 ] || fail "stage $st: no pinned staging in the plan: $output"
			DS_MPIRUN_TIMEOUT=300 run -0 --separate-stderr mpirun_n 2 "$emu" --deepspeed_config "$BATS_TEST_TMPDIR/z.json" \
				--model "$SHARE/models/gpt-test.json" --device cuda --train-iters 1 --peak-gflops 1
			line=$(grep '^device memory per rank' <<<"$output") || fail "stage $st: no device memory line: $output"
			[ "$(field "$line" device_alloc_setup)" -eq "$dev" ] || fail "stage $st overlap $ov: device $line, plan $dev"
			[ "$(field "$line" device_alloc_peak)" -eq "$dev" ] || fail "stage $st overlap $ov: device peak $line"
			[ "$(field "$line" host_estimate)" -eq "$host" ] || fail "stage $st overlap $ov: host plan $line, --check $host"
			[ "$(field "$(grep '^memory per rank' <<<"$output")" alloc_setup)" -eq "$host" ] || fail "stage $st: host bytes"
			if [ "$ov" = false ]; then
				[ "$(field "$line" pinned)" -eq "$pin" ] || fail "stage $st: pinned $line, plan $pin"
			else
				[ "$(field "$line" pinned)" -gt 0 ] && [ "$(field "$line" pinned)" -le "$pin" ] ||
					fail "stage $st overlap: pinned $line above the plan's $pin"
			fi
		done
	done
}

# ZeRO-Offload at 2 ranks (offload_optimizer.device cpu): each rank's
# optimizer_states row (its half of the states, and of a bf16 run's
# master, with the host step's staging) in pinned host memory, the device
# holding exactly the plan's device rows; the pinned bytes are the plan's
# row plus the staged path's pool (fp32 ZeRO 2: exactly the plan's; bf16
# reduces in 16 bits and ZeRO 3's calls in flight vary, so there the pool
# stays under the plan's bound); each step's
# loss is the run without offload's within 1e-5 (its gradients are the
# same, and the host step is the cpu backend's).  The ZeRO 3 runs (bf16
# and fp32) also offload their parameters (offload_param cpu, persistence
# threshold 1000: three of the four segments), each rank's slices pinned
# (params_offloaded: half of the three segments, 2 or 4 bytes each; added
# to the pinned bytes) and copied to the device before every allgather.
@test "emulated cuda at 2 ranks, offload_optimizer cpu, fp32 ZeRO 2 and bf16, fp32 ZeRO 3 with offload_param cpu: the plan's bytes, the losses without offload" {
	local emu=$DS_BUILDDIR/tests/unit/ds-train-emu cs st dt half line dev pin opt off plain zo op hp want
	[ -x "$emu" ] || fail "$emu is missing: make check builds it on a CUDA build"
	for cs in 2-fp32 3-bf16 3-fp32; do
		st=${cs%-*} dt=${cs#*-} half='' zo='' op=''
		[ "$dt" = bf16 ] && half=', "bf16": {"enabled": true}'
		if [ "$st" -eq 3 ]; then
			zo=', "stage3_param_persistence_threshold": 1000' op=', "offload_param": {"device": "cpu"}'
		fi
		printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": %d, "offload_optimizer": {"device": "cpu"}%s%s}%s}' \
			"$st" "$zo" "$op" "$half" >"$BATS_TEST_TMPDIR/cpu.json"
		printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": %d%s}%s}' \
			"$st" "$zo" "$half" >"$BATS_TEST_TMPDIR/none.json"
		run -0 ds-train --check --world-size 2 --deepspeed_config "$BATS_TEST_TMPDIR/cpu.json" \
			--model "$SHARE/models/gpt-test.json" --device cuda
		dev=$(awk '$1 == "device_total" { print $2 }' <<<"$output")
		pin=$(awk '$1 == "comm_staging" { print $2 }' <<<"$output")
		opt=$(awk '$1 == "optimizer_states" { print $2 }' <<<"$output")
		hp=$(awk '$1 == "params_offloaded" { print $2 }' <<<"$output")
		[ "$(awk '$1 == "optimizer_states" { print $5, $6 }' <<<"$output")" = "pinned host" ] || fail "$dt: $output"
		if [ "$st" -eq 3 ]; then
			[ "$dt" = bf16 ] && want=118400
			[ "$dt" = fp32 ] && want=236800
			[ "$hp" = "$want" ] || fail "$dt: params_offloaded ${hp:-missing}, want $want (half of 3 segments'): $output"
			opt=$((opt + hp))
		fi
		DS_MPIRUN_TIMEOUT=300 run -0 --separate-stderr mpirun_n 2 "$emu" --deepspeed_config "$BATS_TEST_TMPDIR/cpu.json" \
			--model "$SHARE/models/gpt-test.json" --device cuda --train-iters 3 --log-interval 1 --peak-gflops 1
		line=$(grep '^device memory per rank' <<<"$output") || fail "$dt: no device memory line: $output"
		[ "$(field "$line" device_alloc_setup)" -eq "$dev" ] || fail "$dt: device $line, plan $dev"
		[ "$(field "$line" device_alloc_peak)" -eq "$dev" ] || fail "$dt: device peak $line, plan $dev"
		if [ "$st" -eq 2 ]; then
			[ "$(field "$line" pinned)" -eq $((opt + pin)) ] || fail "$dt: pinned $line, plan $opt + $pin"
		else
			[ "$(field "$line" pinned)" -gt "$opt" ] && [ "$(field "$line" pinned)" -le $((opt + pin)) ] ||
				fail "$dt: pinned $line, plan $opt + at most $pin"
		fi
		off=$(grep -o 'loss [0-9.]*' <<<"$output" | awk '{ print $2 }')
		[ "$(wc -l <<<"$off")" -eq 3 ] || fail "$dt: expected 3 losses: $output"
		DS_MPIRUN_TIMEOUT=300 run -0 --separate-stderr mpirun_n 2 "$emu" --deepspeed_config "$BATS_TEST_TMPDIR/none.json" \
			--model "$SHARE/models/gpt-test.json" --device cuda --train-iters 3 --log-interval 1 --peak-gflops 1
		plain=$(grep -o 'loss [0-9.]*' <<<"$output" | awk '{ print $2 }')
		paste <(echo "$off") <(echo "$plain") |
			awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) { print "loss " $1 " vs " $2; bad = 1 } } END { exit bad }' ||
			fail "$dt: offloaded losses differ from the run without offload: $off / $plain"
	done
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

@test "emulated cuda bf16 at 2 ranks, ZeRO 0 and 3, overlap_comm off and on: the 1-rank and the cpu losses and norms" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" "$MODEL_DROPOUT" 2 03 bf16
	assert_success
	assert_output --partial "device path mpi"
	assert_output --partial "2 ranks, 0 failed checks"
	[ "$(grep -c '^stage [03] overlap [01]: ' <<<"$output")" -eq 4 ] || fail "not every configuration ran: $output"
}

@test "emulated cuda fp16 at 2 ranks, ZeRO 2, an inf at step 3: the cpu's skips and loss scale" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 2 -x DS_TEST_INJECT_INF_STEP=3 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" \
		"$MODEL_DROPOUT" 4 2 fp16
	assert_success
	assert_output --partial "device path mpi"
	assert_output --partial "2 ranks, 0 failed checks"
	[ "$(grep -c '^stage 2 overlap [01]: ' <<<"$output")" -eq 2 ] || fail "not every configuration ran: $output"
}

@test "emulated cuda fp32 with communication_data_type bf16 at 2 ranks, ZeRO 2: the 1-rank and the cpu losses" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 2 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" "$MODEL_DROPOUT" 2 2 cdt-bf16
	assert_success
	assert_output --partial "2 ranks, 0 failed checks"
	[ "$(grep -c '^stage 2 overlap [01]: ' <<<"$output")" -eq 2 ] || fail "not every configuration ran: $output"
}

@test "ds-train --device cuda at 2 ranks: a bad DS_COMM_NCCL is one line per rank naming the choices, exit 2" {
	local emu=$DS_BUILDDIR/tests/unit/ds-train-emu
	[ -x "$emu" ] || fail "$emu is missing: make check builds it on a CUDA build"
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}' \
		>"$BATS_TEST_TMPDIR/z.json"
	run -2 --separate-stderr mpirun_n 2 -x DS_COMM_NCCL=bogus "$emu" --deepspeed_config "$BATS_TEST_TMPDIR/z.json" \
		--model "$SHARE/models/gpt-test.json" --device cuda --train-iters 1
	[ "$(grep -c '^ds-train: DS_COMM_NCCL=bogus: must be never, auto or require (or unset: auto)$' <<<"$stderr")" -eq 2 ] ||
		fail "not one line per rank: $stderr"
	[ -z "$output" ] || fail "stdout: $output"
}

@test "emulated cuda at 2 ranks: a planted partitioning fault leaves the 1-rank losses" {
	DS_MPIRUN_TIMEOUT=900 run mpirun_n 2 -x DS_TEST_FAULT_SHARD_SHIFT=1 "$DS_BUILDDIR/tests/mpi/engine_cuda_check" "$MODEL_DROPOUT" 2 1
	assert_failure
	assert_output --partial "vs 1-rank"
	refute_output --partial "ranks, 0 failed checks"
}
