#!/usr/bin/env bats
# comms_logger in ds-train at 2 ranks (spec/deepspeed-tools.md §5): the
# summary table lists exactly the collectives the engine must issue for the
# configured stage, buckets and steps, with DeepSpeed's message sizes; the
# verbose line, prof_ops filtering, debug caller names; nothing when
# disabled.  Expected counts and sizes come from the model's segment sizes
# (registry order, padding to world x 16), computed here from the model JSON.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
# shellcheck disable=SC2017  # a / b * c: integer division first on purpose (padding, a rank's share)
load helper

MODEL="$DS_SRCDIR/tests/data/gpt-test-dropout.json"
STEPS=3

# Elements of each segment of the test model: embeddings (wte Vp x C, wpe
# P x C), each layer (2 layernorms, qkv, proj, fc, fc-proj with biases),
# final layernorm (tied head).  V 256 is already a multiple of 128, P = T.
C=64 L=2 VP=256 P=32 F=256
SEG_EMB=$((VP * C + P * C))
SEG_LAYER=$((2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C))
SEG_FINAL=$((2 * C))
TOTAL=$((SEG_EMB + L * SEG_LAYER + SEG_FINAL))

# pad N W: elements rounded up to a multiple of W*16 (DESIGN.md)
pad() { echo $((($1 + $2 * 16 - 1) / ($2 * 16) * $2 * 16)); }

# size B: DeepSpeed's convert_size ("%s %s" % (round(B/1024^i, 2), unit))
size() {
	awk -v b="$1" 'BEGIN {
		if (b == 0) { print "0B"; exit }
		split("B KB MB GB", u, " "); i = int(log(b) / log(1024))
		v = sprintf("%.2f", b / 1024 ^ i); sub(/0$/, "", v); print v " " u[i + 1] }'
}

# cfg FILE STAGE GA EXTRA: 8 samples per step at 2 ranks, buckets of 20000
# elements; EXTRA is appended to the top level (the comms_logger section)
cfg() {
	local s3=""
	[ "$2" -eq 3 ] && s3=', "stage3_param_persistence_threshold": 0'
	cat >"$1" <<EOF
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": $((4 / $3)), "gradient_accumulation_steps": $3,
 "steps_per_print": 1000, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
 "zero_optimization": {"stage": $2, "reduce_bucket_size": 20000$s3}$4}
EOF
}

# train2 STAGE GA EXTRA: ds-train at 2 ranks; stdout in $output, stderr in $stderr
train2() {
	cfg "$BATS_TEST_TMPDIR/ds.json" "$1" "$2" "$3"
	run --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$BATS_TEST_TMPDIR/ds.json" \
		--model "$MODEL" --train-iters "$STEPS" --peak-gflops 1
	assert_success
}

# rows: the summary as "op|size|count" lines, one per row (the table's
# columns are 20 characters wide), after checking the header
rows() {
	echo "$output" | awk '
		/^Comm\. Op/ { t = 1; next }
		!t { next }
		/^step / { next }
		/^[^ ]/ { op = $0; sub(/ +$/, "", op); next }
		{ s = substr($0, 21, 20); c = substr($0, 41, 20); sub(/ +$/, "", s); sub(/ +$/, "", c)
		  print op "|" s "|" c }'
}

# expect: the sorted rows must be exactly the sorted lines given
expect_rows() {
	diff <(rows | sort) <(printf '%s\n' "$@" | sort)
}

@test "the model's segment sizes add up to the parameter count ds-train prints" {
	train2 0 1 ''
	echo "$stderr" | grep -q " $TOTAL parameters"
}

@test "stage 0: all_reduce of every gradient bucket, the norm/loss sums and the stop flag, per step" {
	train2 0 1 ', "comms_logger": {"enabled": true}'
	# header: seven columns, each left-justified to 20 characters
	echo "$output" | grep -qx "$(printf '%-20s' 'Comm. Op' 'Message Size' 'Count' 'Total Latency(ms)' \
		'Avg Latency(ms)' 'tput_avg (Gbps)' 'busbw_avg (Gbps)')"
	local total full last
	total=$(($(pad $SEG_EMB 2) + L * $(pad $SEG_LAYER 2) + $(pad $SEG_FINAL 2)))
	full=$((total / 20000)) last=$((total % 20000))
	expect_rows "all_reduce|$(size $((20000 * 4)))|$((full * STEPS))" \
		"all_reduce|$(size $((last * 4)))|$STEPS" \
		"all_reduce|$(size 24)|$STEPS" \
		"all_reduce|$(size 8)|$STEPS"
	# the table comes once, at the end, after the last step line
	[ "$(echo "$output" | grep -c '^Comm\. Op')" -eq 1 ]
	echo "$output" | awk '/^step /{s=NR} /^Comm\. Op/{c=NR} END{exit !(c > s)}'
}

@test "stage 2 with accumulation: reduce_scatter per segment per micro-step, all_gather per segment per step" {
	train2 2 2 ', "comms_logger": {"enabled": true}'
	local e l f
	e=$(pad $SEG_EMB 2) l=$(pad $SEG_LAYER 2) f=$(pad $SEG_FINAL 2)
	# reduce_scatter: the whole segment goes in (DeepSpeed's size); all_gather:
	# this rank's half
	expect_rows "reduce_scatter|$(size $((e * 4)))|$((2 * STEPS))" \
		"reduce_scatter|$(size $((l * 4)))|$((2 * L * STEPS))" \
		"reduce_scatter|$(size $((f * 4)))|$((2 * STEPS))" \
		"all_gather|$(size $((e / 2 * 4)))|$STEPS" \
		"all_gather|$(size $((l / 2 * 4)))|$((L * STEPS))" \
		"all_gather|$(size $((f / 2 * 4)))|$STEPS" \
		"all_reduce|$(size 24)|$STEPS" \
		"all_reduce|$(size 8)|$STEPS"
}

# fp16 (issue 5): the gradients are held in 16 bits and reduced in the
# model's dtype by default (DeepSpeed's communication_data_type default), so
# every gradient reduction carries 2 bytes per element - stage 0's buckets
# of 20000 elements are 40000 bytes, stage 2's segments 2 x padded - and
# with communication_data_type "fp32" the same reductions carry 4 (widened,
# summed in fp32, rounded back).  The parameter allgathers are left out:
# fp16's first steps overflow and skip, and skipped steps gather nothing.
@test "fp16: gradient reductions carry 2 bytes per element, 4 with communication_data_type fp32" {
	local total full last e l f b cdt
	total=$(($(pad $SEG_EMB 2) + L * $(pad $SEG_LAYER 2) + $(pad $SEG_FINAL 2)))
	full=$((total / 20000)) last=$((total % 20000))
	e=$(pad $SEG_EMB 2) l=$(pad $SEG_LAYER 2) f=$(pad $SEG_FINAL 2)
	for cdt in fp16 fp32; do
		b=2
		[ $cdt = fp32 ] && b=4
		train2 0 1 ", \"fp16\": {\"enabled\": true}, \"communication_data_type\": \"$cdt\", \"comms_logger\": {\"enabled\": true}"
		diff <(rows | grep -v '^all_gather|' | sort) \
			<(printf '%s\n' "all_reduce|$(size $((20000 * b)))|$((full * STEPS))" \
				"all_reduce|$(size $((last * b)))|$STEPS" "all_reduce|$(size 24)|$STEPS" \
				"all_reduce|$(size 8)|$STEPS" | sort) || fail "stage 0, $cdt"
		train2 2 1 ", \"fp16\": {\"enabled\": true}, \"communication_data_type\": \"$cdt\", \"comms_logger\": {\"enabled\": true}"
		diff <(rows | grep -v '^all_gather|' | sort) \
			<(printf '%s\n' "reduce_scatter|$(size $((e * b)))|$STEPS" \
				"reduce_scatter|$(size $((l * b)))|$((L * STEPS))" \
				"reduce_scatter|$(size $((f * b)))|$STEPS" "all_reduce|$(size 24)|$STEPS" \
				"all_reduce|$(size 8)|$STEPS" | sort) || fail "stage 2, $cdt"
	done
}

@test "stage 1, allgather_bucket_size 10000: each shard gathered in rounds of 5000 elements, same losses" {
	cd "$BATS_TEST_TMPDIR" || return
	train2 1 1 ', "comms_logger": {"enabled": true}'
	grep '^step ' <<<"$output" | cut -d'|' -f1,3 > whole.txt
	cfg "$BATS_TEST_TMPDIR/ds.json" 1 1 ', "comms_logger": {"enabled": true}'
	jq '.zero_optimization.allgather_bucket_size = 10000' "$BATS_TEST_TMPDIR/ds.json" > "$BATS_TEST_TMPDIR/ag.json"
	run --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$BATS_TEST_TMPDIR/ag.json" \
		--model "$MODEL" --train-iters "$STEPS" --peak-gflops 1
	assert_success
	grep '^step ' <<<"$output" | cut -d'|' -f1,3 > rounds.txt
	[ -s whole.txt ] || fail "no step lines in the run without rounds"
	diff whole.txt rounds.txt
	# DeepSpeed's rounds: bucket / W = 5000 elements of every shard per
	# all_gather; a shard of at most 5000 goes in one call
	local want=() sh n sz
	declare -A cnt=()
	for sh in $(($(pad $SEG_EMB 2) / 2)) $(for _ in $(seq $L); do echo $(($(pad $SEG_LAYER 2) / 2)); done) \
		  $(($(pad $SEG_FINAL 2) / 2)); do
		for ((n = 0; n < sh; n += 5000)); do
			sz=$((sh - n < 5000 ? sh - n : 5000))
			cnt[$sz]=$((${cnt[$sz]:-0} + STEPS))
		done
	done
	for sz in "${!cnt[@]}"; do want+=("all_gather|$(size $((sz * 4)))|${cnt[$sz]}"); done
	rows | grep '^all_gather' | sort > got.txt
	printf '%s\n' "${want[@]}" | sort > want.txt
	diff got.txt want.txt
	[ "$(wc -l < want.txt)" -ge 3 ]  # full rounds and partial ones
}

@test "stage 3: every segment gathered before its forward and its backward, none after the step" {
	train2 3 1 ', "comms_logger": {"enabled": true}'
	local e l f
	e=$(pad $SEG_EMB 2) l=$(pad $SEG_LAYER 2) f=$(pad $SEG_FINAL 2)
	expect_rows "all_gather|$(size $((e / 2 * 4)))|$((2 * STEPS))" \
		"all_gather|$(size $((l / 2 * 4)))|$((2 * L * STEPS))" \
		"all_gather|$(size $((f / 2 * 4)))|$((2 * STEPS))" \
		"reduce_scatter|$(size $((e * 4)))|$STEPS" \
		"reduce_scatter|$(size $((l * 4)))|$((L * STEPS))" \
		"reduce_scatter|$(size $((f * 4)))|$STEPS" \
		"all_reduce|$(size 24)|$STEPS" \
		"all_reduce|$(size 8)|$STEPS"
}

@test "busbw is DeepSpeed's: algbw x (n-1)/n for all_reduce, reduce_scatter and all_gather at n = 2" {
	train2 2 1 ', "comms_logger": {"enabled": true}'
	echo "$output" | awk '
		/^Comm\. Op/ { t = 1; next }
		t && /^ / { n++; tput = substr($0, 101, 20) + 0; bus = substr($0, 121, 20) + 0
			d = tput / 2 - bus; if (d < 0) d = -d
			if (d > 0.006) { print "busbw " bus " for tput " tput; bad = 1 } }
		END { if (n < 8) { print n " rows"; bad = 1 } exit bad }'
}

@test "verbose: one DeepSpeed line per recorded call on rank 0's log" {
	train2 0 1 ', "comms_logger": {"enabled": true, "verbose": true}'
	local want
	want=$(rows | awk -F'|' '{ s += $3 } END { print s }')
	[ "$(echo "$stderr" | grep -cE 'comm op: all_reduce \| time \(ms\): [0-9]+\.[0-9]{2} \| msg size: [0-9.]+ K?B \| algbw \(Gbps\): [0-9]+\.[0-9]{2} \| busbw \(Gbps\): [0-9]+\.[0-9]{2}$')" -eq "$want" ]
	# rank 0 only: the other rank's calls are not printed too
	[ "$(echo "$stderr" | grep -c 'comm op:')" -eq "$want" ]
}

@test "prof_all false: only the ops in prof_ops are recorded (DeepSpeed's tensor-API name accepted)" {
	train2 2 1 ', "comms_logger": {"enabled": true, "prof_all": false, "prof_ops": ["all_gather_into_tensor"]}'
	[ "$(rows | cut -d'|' -f1 | sort -u)" = "all_gather" ]
	[ "$(rows | wc -l)" -eq 3 ]
	train2 2 1 ', "comms_logger": {"enabled": true, "prof_all": false, "prof_ops": ["all_reduce", "reduce_scatter"]}'
	[ "$(rows | cut -d'|' -f1 | sort -u | tr '\n' ' ')" = "all_reduce reduce_scatter " ]
	train2 2 1 ', "comms_logger": {"enabled": true, "prof_all": false}'
	echo "$output" | grep -q '^Comm\. Op'
	[ -z "$(rows)" ]
}

@test "debug: each record is named after the function that issued it" {
	train2 0 1 ', "comms_logger": {"enabled": true, "debug": true}'
	rows | cut -d'|' -f1,2 | sort -u >"$BATS_TEST_TMPDIR/names"
	grep -qx 'all_reduce | \[Caller Func: reduce_grads\]' "$BATS_TEST_TMPDIR/names"
	grep -qx 'all_reduce | \[Caller Func: ds_engine_train_step\]' "$BATS_TEST_TMPDIR/names"
	grep -qx 'all_reduce | \[Caller Func: ds_train_run\]' "$BATS_TEST_TMPDIR/names"
}

@test "overlap_comm: the same collectives, now issued as segments finish backward" {
	train2 0 1 ', "comms_logger": {"enabled": true, "debug": true}'
	sed -i 's/"reduce_bucket_size"/"overlap_comm": true, "reduce_bucket_size"/' "$BATS_TEST_TMPDIR/ds.json"
	local off
	off=$(rows | sed 's/ | \[Caller Func: [a-z_]*\]//' | sort)
	run --separate-stderr mpirun_n 2 "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$BATS_TEST_TMPDIR/ds.json" \
		--model "$MODEL" --train-iters "$STEPS" --peak-gflops 1
	assert_success
	diff <(echo "$off") <(rows | sed 's/ | \[Caller Func: [a-z_]*\]//' | sort)
	# the bucket reductions now start from the backward pass's segment hook
	rows | grep -q '^all_reduce | \[Caller Func: start_bucket\]|'
	[[ "$(rows)" != *"Caller Func: reduce_grads"* ]] || fail "$(rows)"
}

@test "comms_logger disabled (the default, or enabled false): no table, no per-call lines" {
	for extra in '' ', "comms_logger": {"enabled": false}'; do
		train2 2 1 "$extra"
		echo "$output" | grep -q '^step 3/3'
		[[ "$output" != *"Comm. Op"* ]] || fail "$output"
		[[ "$stderr" != *"comm op:"* ]] || fail "$stderr"
	done
}
