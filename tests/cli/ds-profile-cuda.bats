#!/usr/bin/env bats
# ds-profile --measure --device (issue 18): the timing runs on the compute
# backend ds-train would pick (cpu, cuda, auto), says which on stderr, and
# on a device compares with the device's own fp32 GEMM ceiling measured in
# the same run.  Without a GPU: --device cuda is one line (exit 1 no device,
# 3 no CUDA build), a bad --device exit 2; on a CUDA build
# tests/unit/ds-profile-emu (ds-profile over the host emulation of CUDA,
# where host code cannot touch device memory) runs the whole measurement
# on the cuda backend.  tests/gpu/profile.bats runs it on a GPU.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

EMU=${DS_BUILDDIR}/tests/unit/ds-profile-emu

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
	MODEL="$SHARE/models/gpt-test.json"
}

@test "--measure --device cuda where no device answers: one line, exit 1 (3 without CUDA), nothing on stdout" {
	local code=1 want="no CUDA device answers ("
	ds_has cuda || code=3 want="built without CUDA; reconfigure --with-cuda"
	CUDA_VISIBLE_DEVICES='' run "-$code" --separate-stderr ds-profile --model "$MODEL" -b 2 -s 32 --measure \
		--device cuda -o p.txt
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one line: $stderr"
	[[ "$stderr" == "ds-profile: --device cuda: $want"* ]] || fail "$stderr"
	[ -z "$output" ] || fail "stdout: $output"
	[ ! -e p.txt ] || fail "p.txt written"
}

@test "--device that is not cpu, cuda or auto: exit 2 naming the flag" {
	run -2 --separate-stderr ds-profile --model "$MODEL" -b 2 -s 32 --measure --device gpu
	[[ "$stderr" == *"--device 'gpu': expected cpu, cuda or auto"* ]] || fail "$stderr"
}

@test "--measure --device cpu: the cpu backend, said on stderr, MFU against sgemm" {
	run -0 --separate-stderr ds-profile --model "$MODEL" -b 2 -s 32 --measure --warmup 0 --iters 1 --json --device cpu
	[[ "$stderr" == *"--measure: device cpu"* ]] || fail "$stderr"
	jq -e '.summary.fwd_latency_s > 0 and .summary.sgemm_flops_per_s > 0' <<<"$output" >/dev/null || fail "$output"
}

@test "emulated device: --measure --device cuda times forward, backward, the Adam step and each layer on the cuda backend" {
	ds_has cuda || skip "built without CUDA (no emulated ds-profile)"
	[ -x "$EMU" ] || fail "$EMU is missing: make check builds it on a CUDA build"
	run -0 --separate-stderr "$EMU" --model "$MODEL" -b 2 -s 32 --measure --warmup 1 --iters 1 --json --device cuda
	[[ "$stderr" == *"--measure: device cuda: GPU 0 of 1"* ]] || fail "not on the cuda backend: $stderr"
	local dev=$output
	jq -e '.summary.fwd_latency_s > 0 and .summary.bwd_latency_s > 0 and .summary.step_latency_s > 0 and
		.summary.sgemm_flops_per_s > 0 and (.summary.mfu - .summary.flops_per_s / .summary.sgemm_flops_per_s | fabs) < 1e-9' \
		<<<"$dev" >/dev/null || fail "$dev"
	jq -e '[.modules[] | select(.class == "GPTBlock") | .fwd_latency_s > 0] == [true, true]' <<<"$dev" >/dev/null ||
		fail "a layer was not timed: $dev"
	# the counts are the model's, whichever backend timed it
	jq -e '.summary.params_per_gpu == 118528 and .summary.fwd_macs_per_gpu > 0' <<<"$dev" >/dev/null || fail "$dev"
	run -0 --separate-stderr ds-profile --model "$MODEL" -b 2 -s 32 --measure --warmup 0 --iters 1 --json --device cpu
	[ "$(jq -c '.summary | [.params_per_gpu, .fwd_macs_per_gpu, .fwd_flops_per_gpu]' <<<"$dev")" = "$(jq -c '.summary | [.params_per_gpu, .fwd_macs_per_gpu, .fwd_flops_per_gpu]' <<<"$output")" ] ||
		fail "counts differ: $(jq -c .summary <<<"$dev") vs $(jq -c .summary <<<"$output")"
}
