#!/usr/bin/env bats
# ds-train's memory report at 1 rank (every build, MPI or not): the bytes
# libds's allocator holds after setup and at its peak are within 10% of the
# memory estimate that --check prints, at ZeRO stages 0-3, and the model
# states are 16 bytes per parameter (fp32 parameters and gradients, two
# Adam states) whatever the stage when nothing is split.
load helper

P=118528  # gpt-test.json: 18432 + 2 x 49984 + 128 (tests/unit/test_estimate.c)

# field LINE KEY: the number after "KEY " in a " | "-separated line
field() { awk -v k="$2" 'BEGIN { RS = " [|] " } index($0, k " ") == 1 { print substr($0, length(k) + 2) + 0 }' <<<"$1"; }

# within10 A B: |A/B - 1| <= 0.1
within10() { awk -v a="$1" -v b="$2" 'BEGIN { r = a / b; exit !(b > 0 && r >= 0.9 && r <= 1.1) }'; }

@test "allocator bytes at 1 rank are within 10% of the --check estimate, stages 0-3" {
	for st in 0 1 2 3; do
		printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": %d}}' \
			"$st" >"$BATS_TEST_TMPDIR/z$st.json"
		run -0 ds-train --check --deepspeed_config "$BATS_TEST_TMPDIR/z$st.json" --model "$SHARE/models/gpt-test.json"
		est=$(awk '$1 == "total" { print $2 }' <<<"$output")
		[ -n "$est" ] || fail "stage $st: no total in --check"
		run -0 --separate-stderr ds-train --deepspeed_config "$BATS_TEST_TMPDIR/z$st.json" \
			--model "$SHARE/models/gpt-test.json" --train-iters 3 --peak-gflops 1
		line=$(grep '^memory per rank' <<<"$output") || fail "stage $st: no memory line: $output"
		[ "$(field "$line" estimate)" -eq "$est" ] || fail "stage $st: run's estimate differs from --check's: $line"
		within10 "$(field "$line" alloc_setup)" "$est" || fail "stage $st: alloc_setup not within 10%: $line"
		within10 "$(field "$line" alloc_peak)" "$est" || fail "stage $st: alloc_peak not within 10%: $line"
		[ "$(field "$line" peak_rss)" -gt "$(field "$line" alloc_setup)" ] || fail "stage $st: RSS below the allocator's bytes"
		[ "$(field "$line" model_state)" -eq $((16 * P)) ] || fail "stage $st: model state is not 16 B/param: $line"
	done
}

# fp16 and bf16 at 1 rank (ZeRO's mixed-precision count): 2 bytes of 16-bit
# parameters, K = 12 of fp32 master weights and Adam states, and 2 bytes of
# 16-bit gradients when they accumulate in the model's dtype (fp16's
# default, bf16's under ZeRO) - 16 per parameter - or 4 when they
# accumulate in fp32 (bf16's default at stage 0) - 18; the allocator holds
# the estimate byte for byte.
@test "fp16 and bf16 at 1 rank: model states 2 + 2 + 12 bytes per parameter, 2 + 4 + 12 with fp32 accumulation" {
	local dt st want
	for dt in fp16 bf16; do
		for st in 0 1; do
			printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "%s": {"enabled": true}, "zero_optimization": {"stage": %d}}' \
				"$dt" "$st" >"$BATS_TEST_TMPDIR/h.json"
			run -0 --separate-stderr ds-train --deepspeed_config "$BATS_TEST_TMPDIR/h.json" \
				--model "$SHARE/models/gpt-test.json" --train-iters 2 --peak-gflops 1
			line=$(grep '^memory per rank' <<<"$output") || fail "$dt stage $st: no memory line: $output"
			want=$((16 * P))
			[ $dt = bf16 ] && [ $st -eq 0 ] && want=$((18 * P))
			[ "$(field "$line" model_state)" -eq "$want" ] || fail "$dt stage $st: want $want: $line"
			[ "$(field "$line" alloc_peak)" -eq "$(field "$line" estimate)" ] || fail "$dt stage $st: $line"
		done
	done
}

@test "--metrics-json carries the memory figures" {
	command -v jq >/dev/null || skip "jq not installed"
	cd "$BATS_TEST_TMPDIR"
	printf '{"train_batch_size": 4, "zero_optimization": {"stage": 1}}' >z.json
	run -0 ds-train --deepspeed_config z.json --model "$SHARE/models/gpt-test.json" --train-iters 3 \
		--peak-gflops 1 --metrics-json m.json
	jq -e --argjson p "$P" '.memory.world_size == 1 and .memory.zero_stage == 1 and
		.memory.model_state_bytes == 16 * $p and (.memory.alloc_setup_bytes | length) == 1 and
		.memory.estimate_bytes == ([.memory.estimate[]] | add) and
		(.memory.alloc_setup_bytes[0] / .memory.estimate_bytes - 1 | fabs) <= 0.1 and
		.memory.peak_rss_bytes[0] > .memory.alloc_peak_bytes[0]' m.json
}
