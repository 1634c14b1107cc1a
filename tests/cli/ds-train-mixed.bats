#!/usr/bin/env bats
# ds-train in fp16 and bf16 (issue 5, spec/deepspeed-training.md §5): an
# injected overflow skips the step, halves the loss scale and leaves the
# parameters and the LR schedule as they were; DeepSpeed's 2^32 ZeRO
# default; bf16's non-finite policy; a resume continues the scaler; and
# 16-bit training tracks fp32 on the small test model.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	MODEL="$SHARE/models/gpt-test.json"
}

# cfg FILE STAGE PRECISION_SECTION [EXTRA]: AdamW, linear warmup over 10
# steps (so the lr moves every step), every step printed and in the CSV.
cfg() {
	cat > "$1" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "steps_per_print": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.01}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 2e-3, "warmup_num_steps": 10, "warmup_type": "linear"}},
 "zero_optimization": {"stage": $2},
 "csv_monitor": {"enabled": true, "output_path": "csv-${1%.json}", "job_name": "run"}, $3 ${4:+, $4}}
JSON
}
col() { tail -n +2 "csv-$1/run/Train_Samples_$2.csv" | tr -d '\r'; }  # step,value rows
at() { col "$1" "$2" | sed -n "${3}p" | cut -d, -f2; }          # value after step N
field() { grep "^step $2/" <<<"$1" | sed "s/.*| $3 \([^ |]*\).*/\1/"; }

@test "fp16: an injected overflow at step 5 skips it, halves the scale, keeps the parameters and the schedule" {
	for s in 0 1; do
		cfg f$s.json $s '"fp16": {"enabled": true, "initial_scale_power": 10, "hysteresis": 1}'
		DS_TEST_INJECT_INF_STEP=5 run -0 --separate-stderr ds-train --deepspeed_config f$s.json --model "$MODEL" \
			--train-iters 7 --save ck$s --save-interval 1
		[ "$(field "$output" 4 loss_scale) $(field "$output" 4 skipped)" = "1024 0" ] || fail "stage $s: $output"
		[ "$(field "$output" 5 loss_scale) $(field "$output" 5 skipped)" = "512 1" ] || fail "stage $s: $output"
		[ "$(field "$output" 5 grad_norm)" = inf ] || fail "stage $s: $output"
		[[ "$stderr" == *"step 5: fp16 gradient overflow"*"1024 -> 512"* ]] || fail "$stderr"
		# CSV: loss_scale 1024 1024 1024 1024 512 512 512; skipped count 1 from step 5
		[ "$(col f$s loss_scale | cut -d, -f2 | tr '\n' ' ')" = "1024.0 1024.0 1024.0 1024.0 512.0 512.0 512.0 " ] ||
			fail "$(col f$s loss_scale)"
		[ "$(at f$s skipped_steps 4) $(at f$s skipped_steps 5)" = "0.0 1.0" ]
		# the LR schedule did not advance: the lr logged after step 5 is step 4's
		lr4=$(at f$s lr 4)
		lr5=$(at f$s lr 5)
		lr6=$(at f$s lr 6)
		[ -n "$lr4" ] || fail "stage $s: no lr after step 4 in the CSV"
		[ "$lr5" = "$lr4" ] || fail "stage $s: the lr after step 5 is $lr5, after step 4 $lr4"
		[ "$lr6" != "$lr5" ] || fail "stage $s: the lr did not move at step 6 ($lr6)"
		# the parameters after step 5 are those after step 4; step 6 moved them
		for t in 4 5 6; do ds-ckpt-convert -q ck$s/global_step$t --to safetensors -o st$s-$t; done
		cmp st$s-4/model.safetensors st$s-5/model.safetensors
		run -1 cmp -s st$s-5/model.safetensors st$s-6/model.safetensors
	done
}

@test "fp16 under ZeRO with no scaler key starts at 2^32 with no hysteresis; hysteresis 2 starts at 2^16" {
	cfg z.json 1 '"fp16": {"enabled": true}'
	run -0 ds-train --deepspeed_config z.json --model "$MODEL" --train-iters 2
	# the first step overflows at 2^32 and halves at once (hysteresis 1)
	[ "$(field "$output" 1 loss_scale) $(field "$output" 1 skipped)" = "2147483648 1" ] || fail "$output"
	cfg h.json 1 '"fp16": {"enabled": true, "hysteresis": 2}'
	run -0 ds-train --deepspeed_config h.json --model "$MODEL" --train-iters 1
	[ "$(field "$output" 1 loss_scale)" = 65536 ] || fail "$output"
}

@test "bf16: a non-finite gradient is skipped and logged; nonfinite_policy abort and max_consecutive stop the run" {
	cfg b.json 1 '"bf16": {"enabled": true}'
	DS_TEST_INJECT_INF_STEP=3 run -0 --separate-stderr ds-train --deepspeed_config b.json --model "$MODEL" --train-iters 4
	[[ "$stderr" == *"step 3: non-finite gradients; step skipped"* ]] || fail "$stderr"
	[ "$(field "$output" 3 skipped)" = 1 ] || fail "$output"
	[ "$(field "$output" 4 skipped)" = 1 ] || fail "$output"
	[[ "$output" != *loss_scale* ]]   # bf16 has no loss scaling
	[ -n "$(at b lr 2)" ] || fail "no lr after step 2 in the CSV"
	[ "$(at b lr 3)" = "$(at b lr 2)" ]
	cfg a.json 1 '"bf16": {"enabled": true}' '"dstk": {"nonfinite_policy": "abort"}'
	DS_TEST_INJECT_INF_STEP=3 run -1 --separate-stderr ds-train --deepspeed_config a.json --model "$MODEL" --train-iters 4
	[[ "$stderr" == *"step 3"*"nonfinite_policy"*"abort"* ]] || fail "$stderr"
	cfg m.json 1 '"bf16": {"enabled": true}' '"dstk": {"nonfinite_max_consecutive": 3}'
	DS_TEST_INJECT_INF_STEP=3:2 run -0 ds-train --deepspeed_config m.json --model "$MODEL" --train-iters 6
	DS_TEST_INJECT_INF_STEP=3:3 run -1 --separate-stderr ds-train --deepspeed_config m.json --model "$MODEL" --train-iters 8
	[[ "$stderr" == *"step 5: non-finite gradients in too many consecutive steps"* ]] || fail "$stderr"
}

@test "fp16: a resumed run continues the loss scaler and gives the continuous run's losses" {
	cfg r.json 2 '"fp16": {"enabled": true, "initial_scale_power": 20, "loss_scale_window": 3}'
	run -0 ds-train --deepspeed_config r.json --model "$MODEL" --train-iters 12
	cont=$(col r train_loss; col r loss_scale)
	rm -rf csv-r
	run -0 ds-train --deepspeed_config r.json --model "$MODEL" --train-iters 6 --save ck
	run -0 ds-train --deepspeed_config r.json --model "$MODEL" --train-iters 12 --save ck --load ck
	[ "$(col r train_loss; col r loss_scale)" = "$cont" ] || fail "resumed: $(col r loss_scale)"
	# the scale moved during the run (overflows and growth), so the test can fail
	[ "$(col r loss_scale | cut -d, -f2 | sort -u | wc -l)" -gt 1 ]
}

# Dynamic fp16 skips its first steps while the scale comes down from 2^16,
# so it lags fp32 by those steps early on: the per-step check uses a static
# scale, the 181-200 mean (the issue's criterion) the dynamic one.
@test "fp16 and bf16 track fp32: steps 181-200 within 2%, the first 20 steps within 1%, yet not identical" {
	mean() { col "$1" train_loss | sed -n '181,200p' | awk -F, '{s += $2} END {printf "%.6f", s / NR}'; }
	cfg p32.json 0 '"fp16": {"enabled": false}'
	cfg p16.json 0 '"fp16": {"enabled": true}'
	cfg pbf.json 0 '"bf16": {"enabled": true}'
	cfg pst.json 0 '"fp16": {"enabled": true, "loss_scale": 1024}'
	for p in p32 p16 pbf; do run -0 ds-train --deepspeed_config $p.json --model "$MODEL" --train-iters 200; done
	run -0 ds-train --deepspeed_config pst.json --model "$MODEL" --train-iters 20
	ref=$(mean p32)
	for p in p16 pbf; do
		m=$(mean $p)
		awk -v a="$m" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * b) }' ||
			fail "$p: mean loss of steps 181-200 $m, fp32 $ref"
		[ "$(col $p train_loss)" != "$(col p32 train_loss)" ]
	done
	[ "$(tail -1 csv-p16/run/Train_Samples_skipped_steps.csv | tr -d '\r' | cut -d, -f2)" != 0.0 ]
	for p in pbf pst; do
		paste -d, <(col p32 train_loss | head -20) <(col $p train_loss | head -20) |
			awk -F, '{ d = $4 - $2; if (d < 0) d = -d; if (d > 0.01 * $2) { print; bad = 1 } } END { exit bad }' ||
			fail "$p: a first-20 loss is more than 1% from fp32's"
		[ "$(col $p train_loss | head -20)" != "$(col p32 train_loss | head -20)" ]
	done
}

@test "data_types.grad_accum_dtype fp32 and bf16 accumulate differently under bf16" {
	cfg g1.json 1 '"bf16": {"enabled": true}' '"data_types": {"grad_accum_dtype": "bf16"}, "gradient_accumulation_steps": 4, "train_micro_batch_size_per_gpu": 2'
	cfg g2.json 1 '"bf16": {"enabled": true}' '"data_types": {"grad_accum_dtype": "fp32"}, "gradient_accumulation_steps": 4, "train_micro_batch_size_per_gpu": 2'
	sed -i 's/"train_micro_batch_size_per_gpu": 8, //' g1.json g2.json
	run -0 ds-train --deepspeed_config g1.json --model "$MODEL" --train-iters 8
	run -0 ds-train --deepspeed_config g2.json --model "$MODEL" --train-iters 8
	[ "$(col g1 train_loss | head -1)" = "$(col g2 train_loss | head -1)" ]   # the same first forward
	[ "$(col g1 train_loss)" != "$(col g2 train_loss)" ]
}

@test "bf16: dstk.bf16_matmul auto, avx512_bf16, onednn and fp32 train alike and say which matmul they use" {
	flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
	feats=" $(ds-train --version | sed -n 's/^features: //p') "
	cfg ma.json 0 '"bf16": {"enabled": true}'
	cfg mf.json 0 '"bf16": {"enabled": true}' '"dstk": {"bf16_matmul": "fp32"}'
	cfg mk.json 0 '"bf16": {"enabled": true}' '"dstk": {"bf16_matmul": "avx512_bf16"}'
	cfg md.json 0 '"bf16": {"enabled": true}' '"dstk": {"bf16_matmul": "onednn"}'
	run -0 ds-train --deepspeed_config ma.json --model "$MODEL" --train-iters 20
	auto=$output
	run -0 ds-train --deepspeed_config mf.json --model "$MODEL" --train-iters 20
	[[ "$output" == *'matmul: fp32 sgemm (dstk.bf16_matmul "fp32")'* ]] || fail "$output"
	# within the bf16 tolerance of the fp32-vs-bf16 test: every one of the 20 losses within 1%
	near() {
		paste -d, <(col mf train_loss) <(col "$1" train_loss) |
			awk -F, '{ d = $4 - $2; if (d < 0) d = -d; if (d > 0.01 * $2) { print; bad = 1 } } END { exit bad || NR != 20 }' ||
			fail "a loss of the $1 run is more than 1% from the fp32-matmul run's"
	}
	near ma
	if [[ "$feats" == *" onednn "* && "$flags" == *" amx_bf16 "* ]]; then
		[[ "$auto" == *"matmul: bf16 on oneDNN "*"amx"* ]] || fail "$auto"
	elif [[ "$flags" == *" avx512_bf16 "* ]]; then
		# the kernel where auto measured it faster than sgemm, else sgemm
		[[ "$auto" == *"matmul: bf16 on dstk's AVX512_BF16 kernel"*'(dstk.bf16_matmul "auto")'* ||
			"$auto" == *"matmul: fp32 sgemm: faster here than dstk's AVX512_BF16 kernel"*'(dstk.bf16_matmul "auto")'* ]] ||
			fail "$auto"
	else
		[[ "$auto" == *'matmul: fp32 sgemm: this CPU has no AVX512_BF16 or AMX-BF16 (dstk.bf16_matmul "auto")'* ]] ||
			fail "$auto"
	fi
	if [[ "$auto" == *"matmul: bf16 on "* ]]; then   # bf16 products sum in another order: not identical
		[ "$(col ma train_loss)" != "$(col mf train_loss)" ] || fail "auto's losses equal sgemm's"
	fi
	# the kernel forced: where the CPU has AVX512_BF16, else exit 3 naming why
	if [[ "$flags" == *" avx512_bf16 "* ]]; then
		run -0 ds-train --deepspeed_config mk.json --model "$MODEL" --train-iters 20
		[[ "$output" == *"matmul: bf16 on dstk's AVX512_BF16 kernel (vdpbf16ps) for every product"* ]] || fail "$output"
		near mk
		[ "$(col mk train_loss)" != "$(col mf train_loss)" ] || fail "the kernel's losses equal sgemm's"
	else
		run -3 --separate-stderr ds-train --deepspeed_config mk.json --model "$MODEL" --train-iters 1
		[[ "$stderr" == *'dstk.bf16_matmul "avx512_bf16": this CPU has no AVX512_BF16; use "auto"'* ]] || fail "$stderr"
	fi
	# oneDNN forced: runs where the build has it and it picks a bf16 kernel
	if [[ "$feats" != *" onednn "* ]]; then
		run -3 --separate-stderr ds-train --deepspeed_config md.json --model "$MODEL" --train-iters 1
		[[ "$stderr" == *'dstk.bf16_matmul "onednn": not built with oneDNN'* ]] || fail "$stderr"
	elif [[ "$flags" == *" avx512_bf16 "* || "$flags" == *" amx_bf16 "* ]]; then
		run -0 ds-train --deepspeed_config md.json --model "$MODEL" --train-iters 20
		[[ "$output" == *"matmul: bf16 on oneDNN "*" for every product"* ]] || fail "$output"
		near md
	fi
	# fp16 keeps sgemm and prints no matmul line
	cfg m16.json 0 '"fp16": {"enabled": true}'
	run -0 ds-train --deepspeed_config m16.json --model "$MODEL" --train-iters 1
	[[ "$output" != *"matmul:"* ]] || fail "$output"
}
