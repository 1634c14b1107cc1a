#!/usr/bin/env bats
# profile.bats - ds-profile --measure --device cuda on a GPU (issue 18): the
# forward, backward and Adam step of GPT-2 124M timed on the device, each
# layer through the segment hooks, MFU against cuBLAS's fp32 GEMM ceiling
# measured in the same run (TF32 off, as the backend's default); the
# analytic counts are the cpu run's.  Needs a CUDA device: elsewhere every
# test skips with the reason (tests/cli/ds-profile-cuda.bats checks the
# same path on the host emulation of CUDA).
# shellcheck disable=SC2154  # stderr: set by bats' run --separate-stderr
load ../cli/helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	require_feature cuda
	local why
	why=$(ds-profile --model "$SHARE/models/gpt-test.json" -b 1 -s 8 --measure --warmup 0 --iters 1 --device cuda 2>&1 >/dev/null) ||
		skip "no CUDA device: $why"
}

@test "gpu: ds-profile --measure --device cuda on GPT-2 124M, B 4 T 1024: latencies, each layer, MFU against the device's GEMM ceiling" {
	run -0 --separate-stderr ds-profile --model "$SHARE/models/gpt2-124m.json" -b 4 -s 1024 --measure --json --device cuda
	[[ "$stderr" == *"--measure: device cuda: GPU "* ]] || fail "not on the GPU: $stderr"
	echo "# summary: $(jq -c .summary <<<"$output")" >&3   # (into the run's raw TAP output)
	jq -e '.summary.fwd_latency_s > 0 and .summary.bwd_latency_s > 0 and .summary.step_latency_s > 0 and
		.summary.sgemm_flops_per_s > 1e12 and .summary.mfu > 0 and
		(.summary.mfu - .summary.flops_per_s / .summary.sgemm_flops_per_s | fabs) < 1e-9' <<<"$output" >/dev/null ||
		fail "$(jq -c .summary <<<"$output")"
	[ "$(jq '[.modules[] | select(.class == "GPTBlock") | select(.fwd_latency_s > 0)] | length' <<<"$output")" -eq 12 ] ||
		fail "not every layer was timed"
}
