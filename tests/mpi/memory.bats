#!/usr/bin/env bats
# ds-train's memory at 1, 2 and 4 ranks, ZeRO stages 0-3 on gpt-test.json:
# what libds's allocator holds per rank is within 10% of the estimate that
# `ds-train --check --world-size N` prints, and the model-state bytes the
# engine holds per rank fall with N as the ZeRO formulas say (spec §7):
# 4 + 4 + 8 bytes per parameter, stage 1 dividing the optimizer states by N,
# stage 2 also the gradients, stage 3 also the parameters.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

P=118528  # gpt-test.json's parameters; no padding at 1, 2, 4 ranks

field() { awk -v k="$2" 'BEGIN { RS = " [|] " } index($0, k " ") == 1 { print substr($0, length(k) + 2) + 0 }' <<<"$1"; }
within10() { awk -v a="$1" -v b="$2" 'BEGIN { r = a / b; exit !(b > 0 && r >= 0.9 && r <= 1.1) }'; }

# run_mem N STAGE: train 3 steps of 8 samples at N ranks; sets $line
run_mem() {
	local n=$1 st=$2 cfg="$BATS_TEST_TMPDIR/n$1-s$2.json" s3=""
	# stage 3: partition every segment (they are all below the default threshold)
	[ "$st" -eq 3 ] && s3=', "stage3_param_persistence_threshold": 0'
	printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": %d, "zero_optimization": {"stage": %d%s}}' \
		$((8 / n)) "$st" "$s3" >"$cfg"
	run -0 ds-train --check --deepspeed_config "$cfg" --model "$SHARE/models/gpt-test.json" --world-size "$n"
	est=$(awk '$1 == "total" { print $2 }' <<<"$output")
	local cmd=(ds-train --deepspeed_config "$cfg" --model "$SHARE/models/gpt-test.json" --train-iters 3 --peak-gflops 1)
	if [ "$n" -eq 1 ]; then
		run -0 --separate-stderr "${cmd[@]}"
	else
		run -0 --separate-stderr mpirun_n "$n" "$DS_BUILDDIR/tools/${cmd[0]}" "${cmd[@]:1}"
	fi
	line=$(grep '^memory per rank' <<<"$output") || fail "N $n stage $st: no memory line: $output $stderr"
	[ "$(field "$line" estimate)" -eq "$est" ] || fail "N $n stage $st: run's estimate $line, --check's $est"
	within10 "$(field "$line" alloc_setup)" "$est" || fail "N $n stage $st: alloc_setup not within 10%: $line"
	within10 "$(field "$line" alloc_peak)" "$est" || fail "N $n stage $st: alloc_peak not within 10%: $line"
	[[ "$line" == *"max over $n rank"* ]] || fail "N $n: $line"
}

# formula N STAGE: model-state bytes per rank (spec §7, fp32 + Adam)
formula() {
	local n=$1 st=$2
	case $st in
	0) echo $((16 * P)) ;;
	1) echo $((8 * P + 8 * P / n)) ;;
	2) echo $((4 * P + 12 * P / n)) ;;
	3) echo $((16 * P / n)) ;;
	esac
}

check_stage() {
	local st=$1 prev=""
	for n in 1 2 4; do
		run_mem "$n" "$st"
		ms=$(field "$line" model_state)
		[ "$ms" -eq "$(formula "$n" "$st")" ] || fail "N $n stage $st: model state $ms, formula $(formula "$n" "$st")"
		[ "$(field "$line" model_state_estimate)" -eq "$ms" ] || fail "N $n stage $st: estimate's model state differs: $line"
		# stages >= 1 hold less per rank as N grows; stage 0 the same
		if [ -n "$prev" ]; then
			if [ "$st" -eq 0 ]; then [ "$ms" -eq "$prev" ]; else [ "$ms" -lt "$prev" ]; fi ||
				fail "N $n stage $st: model state $ms vs $prev at N/2"
		fi
		prev=$ms
	done
}

@test "stage 0: allocator within 10% of the estimate at 1, 2, 4 ranks; model states 16 B/param" { check_stage 0; }
@test "stage 1: optimizer states / N" { check_stage 1; }
@test "stage 2: gradients and optimizer states / N" { check_stage 2; }
@test "stage 3: parameters, gradients and optimizer states / N" { check_stage 3; }

# communication_data_type fp16 of an fp32 model at 2 ranks: the 16-bit
# reduction buffers are counted exactly - stage 0 a 16-bit copy of the flat
# gradients (2 bytes x P), stage 2 per gradient slot a 16-bit segment and
# shard (2 bytes x (49984 + 24992): the largest padded segment and its half;
# 2 slots, 4 with overlap_comm) - and the allocator holds the estimate.
@test "communication_data_type fp16: the 16-bit reduction buffers are in the estimate, byte for byte" {
	local st ov cdt want slots
	for st in 0 2; do
		for ov in false true; do
			[ "$st" -eq 0 ] && [ "$ov" = true ] && continue
			local base=""
			for cdt in fp32 fp16; do
				cfg="$BATS_TEST_TMPDIR/cdt-$cdt-s$st-$ov.json"
				printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "communication_data_type": "%s", "zero_optimization": {"stage": %d, "overlap_comm": %s}}' \
					"$cdt" "$st" "$ov" >"$cfg"
				run -0 --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$cfg" \
					--model "$SHARE/models/gpt-test.json" --train-iters 2 --peak-gflops 1
				line=$(grep '^memory per rank' <<<"$output") || fail "no memory line: $output $stderr"
				[ "$(field "$line" alloc_setup)" -eq "$(field "$line" estimate)" ] || fail "$cdt stage $st overlap $ov: $line"
				[ "$(field "$line" alloc_peak)" -eq "$(field "$line" estimate)" ] || fail "$cdt stage $st overlap $ov: $line"
				[ -z "$base" ] && base=$(field "$line" estimate)
			done
			want=$((2 * P))
			slots=2
			[ "$ov" = true ] && slots=4
			[ "$st" -eq 2 ] && want=$((slots * 2 * (49984 + 24992)))
			[ $(( $(field "$line" estimate) - base )) -eq "$want" ] ||
				fail "stage $st overlap $ov: fp16 adds $(( $(field "$line" estimate) - base )) bytes, want $want"
		done
	done
}

# bf16 at stages 1 and 2 on 2 and 4 ranks: each rank keeps the whole 16-bit
# model copy (2 bytes x P) but the fp32 master weights and the Adam states
# for its own 1/N slice only (12 bytes x P / N, as DeepSpeed's fp32
# partitions), plus bf16 gradients (grad_accum_dtype defaults to bf16 under
# ZeRO: 2 x P, stage 2 2 x P / N); the allocator holds the estimate byte
# for byte, at setup and at its peak.
@test "bf16 stages 1-2: 16-bit copy whole, fp32 master + Adam states / N, allocator equal to the estimate" {
	local st n cfg ms want
	for st in 1 2; do
		for n in 2 4; do
			cfg="$BATS_TEST_TMPDIR/bf16-s$st-n$n.json"
			printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": %d, "bf16": {"enabled": true}, "zero_optimization": {"stage": %d}}' \
				$((8 / n)) "$st" >"$cfg"
			run -0 --separate-stderr mpirun_n "$n" "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$cfg" \
				--model "$SHARE/models/gpt-test.json" --train-iters 2 --peak-gflops 1
			line=$(grep '^memory per rank' <<<"$output") || fail "no memory line: $output $stderr"
			want=$((2 * P + 12 * P / n + (st == 2 ? 2 * P / n : 2 * P)))
			ms=$(field "$line" model_state)
			[ "$ms" -eq "$want" ] || fail "stage $st N $n: model state $ms, want $want: $line"
			[ "$(field "$line" model_state_estimate)" -eq "$ms" ] || fail "stage $st N $n: $line"
			[ "$(field "$line" alloc_setup)" -eq "$(field "$line" estimate)" ] || fail "stage $st N $n: $line"
			[ "$(field "$line" alloc_peak)" -eq "$(field "$line" estimate)" ] || fail "stage $st N $n: $line"
		done
	done
}

# fp16 at stages 0-3 on 1, 2 and 4 ranks: the ZeRO paper's mixed-precision
# model states, 2 bytes of fp16 parameters + 2 of fp16 gradients + K = 12
# of fp32 master weights and Adam states per parameter - 16 x P at stage 0,
# (4 + 12/N) x P at stage 1, (2 + 14/N) x P at stage 2, 16 x P / N at stage
# 3 - and the allocator holds the estimate byte for byte.  With
# communication_data_type "fp32" the 16-bit gradients are summed in fp32
# one bucket at a time: at stage 0 (2 ranks, the default reduce_bucket_size
# is larger than the model) that adds one fp32 copy of the gradients,
# 4 x P bytes, to the estimate and to what the allocator holds.
@test "fp16: model states 2 + 2 + 12 bytes per parameter as in ZeRO, allocator equal to the estimate" {
	local st n cfg ms want s3 base
	for st in 0 1 2 3; do
		for n in 1 2 4; do
			s3=""
			[ "$st" -eq 3 ] && s3=', "stage3_param_persistence_threshold": 0'
			cfg="$BATS_TEST_TMPDIR/fp16-s$st-n$n.json"
			printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": %d, "fp16": {"enabled": true}, "zero_optimization": {"stage": %d%s}}' \
				$((8 / n)) "$st" "$s3" >"$cfg"
			run -0 --separate-stderr mpirun_n "$n" "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$cfg" \
				--model "$SHARE/models/gpt-test.json" --train-iters 2 --peak-gflops 1
			line=$(grep '^memory per rank' <<<"$output") || fail "no memory line: $output $stderr"
			case $st in
			0) want=$((16 * P)) ;;
			1) want=$((4 * P + 12 * P / n)) ;;
			2) want=$((2 * P + 14 * P / n)) ;;
			3) want=$((16 * P / n)) ;;
			esac
			[ "$n" -eq 1 ] && want=$((16 * P))
			ms=$(field "$line" model_state)
			[ "$ms" -eq "$want" ] || fail "stage $st N $n: model state $ms, want $want: $line"
			[ "$(field "$line" model_state_estimate)" -eq "$ms" ] || fail "stage $st N $n: $line"
			[ "$(field "$line" alloc_setup)" -eq "$(field "$line" estimate)" ] || fail "stage $st N $n: $line"
			[ "$(field "$line" alloc_peak)" -eq "$(field "$line" estimate)" ] || fail "stage $st N $n: $line"
			[ "$st" -eq 0 ] && [ "$n" -eq 2 ] && base=$(field "$line" estimate)
		done
	done
	cfg="$BATS_TEST_TMPDIR/fp16-cdt32.json"
	printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true}, "communication_data_type": "fp32", "zero_optimization": {"stage": 0}}' >"$cfg"
	run -0 --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$cfg" \
		--model "$SHARE/models/gpt-test.json" --train-iters 2 --peak-gflops 1
	line=$(grep '^memory per rank' <<<"$output") || fail "no memory line: $output $stderr"
	[ "$(field "$line" alloc_peak)" -eq "$(field "$line" estimate)" ] || fail "fp32 reduction: $line"
	[ $(( $(field "$line" estimate) - base )) -eq $((4 * P)) ] ||
		fail "communication_data_type fp32 adds $(( $(field "$line" estimate) - base )) bytes, want $((4 * P))"
}
