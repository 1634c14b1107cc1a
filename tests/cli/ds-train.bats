#!/usr/bin/env bats
# ds-train training runs on the small test model: the loss falls, a resume
# gives bit-identical losses, signals checkpoint and exit 4, a corrupt
# checkpoint is refused naming the dataset, bad data exits 2 naming the
# file and offset, and the monitors write what DeepSpeed's do.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	MODEL="$SHARE/models/gpt-test.json"
	cat > cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 3, "total_num_steps": 12, "warmup_max_lr": 1e-3}},
 "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "run"},
 "tensorboard": {"enabled": true, "output_path": "tb", "job_name": "run"},
 "gradient_clipping": 1.0}
JSON
}

train() { ds-train --deepspeed_config cfg.json --model "$MODEL" "$@"; }
# column N (1-based, " | " separated) of the stdout step lines
losses() { grep '^step ' | awk -F' [|] ' '{print $1, $3}'; }

@test "the loss of the test model falls over 40 steps" {
	sed -i 's/"total_num_steps": 12/"total_num_steps": 40/' cfg.json
	run -0 train
	first=$(echo "$output" | grep '^step 1/' | sed 's/.*| loss \([0-9.]*\).*/\1/')
	last=$(echo "$output" | grep '^step 40/' | sed 's/.*| loss \([0-9.]*\).*/\1/')
	# a fresh model is near ln(256) = 5.545
	awk -v f="$first" 'BEGIN { exit !(f > 5.3 && f < 5.8) }' || fail "first loss $first"
	awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 1.0) }' || fail "loss $first -> $last did not fall"
	assert_output --partial "step 40/40 | samples 320 |"
	assert_output --partial "| grad_norm "
	assert_output --partial "| MFU "
}

@test "N steps straight equal N/2, save, load auto, N/2 bit for bit (CSV full precision)" {
	run -0 train --train-iters 12
	echo "$output" | losses > straight.txt
	cp csv/run/Train_Samples_train_loss.csv straight.csv
	rm -rf csv tb
	run -0 train --train-iters 12 --save ck --exit-interval 6
	[ "$(cat ck/latest)" = global_step6 ]
	run -0 train --train-iters 12 --save ck --load auto
	assert_output --partial "step 7/12"
	echo "$output" | losses > resumed.txt
	diff <(tail -6 straight.txt) resumed.txt
	# one header across the restart, every row identical to full precision
	diff straight.csv csv/run/Train_Samples_train_loss.csv
	[ "$(grep -c '^step,' csv/run/Train_Samples_train_loss.csv)" -eq 1 ]
}

@test "SIGUSR1 and SIGTERM: finish the step, save, exit 4; the resumed run goes on" {
	for sig in USR1 TERM; do
		rm -rf ck
		# ds-train itself in the background (not a function's subshell), so
		# the signal reaches it
		ds-train --deepspeed_config cfg.json --model "$MODEL" --train-iters 100000 --save ck \
			> out.txt 2> err.txt &
		pid=$!
		# its handlers are installed before its first line: signal after it
		# (a fixed sleep could land before them on a loaded machine)
		wait_for 120 "ds-train to print its first line" grep -qs 'parameters' out.txt err.txt ||
			{ kill -9 $pid 2>/dev/null; fail "ds-train printed nothing"; }
		sleep 1
		kill -$sig $pid
		status=0
		wait_pid 120 $pid "ds-train to save and exit after SIG$sig" || status=$?
		[ "$status" -eq 4 ] || { kill -9 $pid 2>/dev/null; fail "exit $status after SIG$sig: $(cat err.txt)"; }
		grep -q "stopped by signal" err.txt
		tag=$(cat ck/latest)
		[ -f "ck/$tag/state.h5" ]
		step=${tag#global_step}
		run -0 train --train-iters $((step + 2)) --save ck --load auto
		assert_output --partial "step $((step + 1))/$((step + 2))"
	done
}

@test "a save that fails (planted write error) leaves the previous checkpoint latest and no .tmp" {
	run -0 train --train-iters 6 --save ckpt --save-interval 3
	[ "$(cat ckpt/latest)" = global_step6 ]
	DS_TEST_FAULT_CKPT_FAIL_RANK=0 run train --train-iters 9 --load ckpt --save ckpt --save-interval 3
	assert_failure 1
	assert_output --partial "planted write failure (DS_TEST_FAULT_CKPT_FAIL_RANK)"
	[ "$(cat ckpt/latest)" = global_step6 ]
	[ ! -e ckpt/global_step9 ] || fail "global_step9 was created"
	[ ! -e ckpt/global_step9.tmp ] || fail "global_step9.tmp was left"
	run -0 ds-ckpt-convert verify ckpt
}

@test "a checkpoint whose checksum fails is refused naming the dataset; auto falls back" {
	run -0 train --train-iters 4 --save ck --save-interval 2
	[ -d ck/global_step2 ] || fail "no global_step2"
	[ -d ck/global_step4 ] || fail "no global_step4"
	# flip bytes in the middle of the newest file's data
	f=ck/global_step4/state.h5
	size=$(stat -c %s $f)
	printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of=$f bs=1 seek=$((size / 2)) conv=notrunc status=none
	run -2 --separate-stderr train --train-iters 6 --load ck
	assert_equal "${#stderr_lines[@]}" 1
	[[ "$stderr" == *"global_step4"* && "$stderr" == *"dataset"* && "$stderr" == *"CRC"* ]] || fail "$stderr"
	run -0 --separate-stderr train --train-iters 6 --save ck --load auto
	[[ "$stderr" == *"global_step2"* ]] || fail "auto did not fall back: $stderr"
	assert_output --partial "step 3/6"
}

@test "bad data: missing file, too short, token id >= vocab_size, truncated .idx" {
	run -2 --separate-stderr train --data nonexistent.txt
	[[ "$stderr" == *"nonexistent.txt"* ]]
	printf 'short' > short.txt
	run -2 --separate-stderr train --data short.txt
	[[ "$stderr" == *"short.txt"* && "$stderr" == *"33"* ]] || fail "$stderr"
	sed 's/"vocab_size": 256/"vocab_size": 100/' "$MODEL" > v100.json
	{
		printf 'abc'
		head -c 200 /dev/zero | tr '\0' 'a'    # 'a' is 97 < 100
		printf '~'                              # '~' is 126 >= 100, at byte 203
		head -c 200 /dev/zero | tr '\0' 'a'
	} > hi.txt
	run -2 --separate-stderr ds-train --deepspeed_config cfg.json --model v100.json --data hi.txt
	[[ "$stderr" == *"hi.txt"* && "$stderr" == *"203"* ]] || fail "$stderr"
	cp "$TDATA/devil5k.bin" d.bin
	head -c 40 "$TDATA/devil5k.idx" > d.idx
	run -2 --separate-stderr train --data d
	[[ "$stderr" == *"d.idx"* ]] || fail "$stderr"
}

@test "a config the trainer cannot honour yet is refused, not ignored" {
	# Lamb cannot stream its states from NVMe (tests/cli/ds-train-nvme.bats)
	echo '{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Lamb"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}}' > nv.json
	run -2 --separate-stderr ds-train --deepspeed_config nv.json --model "$MODEL" --train-iters 1
	[[ "$stderr" == *"nv.json"* && "$stderr" == *"offload_optimizer.device"* ]] || fail "$stderr"
	echo '{"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": true}, "communication_data_type": "bf16"}' > cd.json
	run -2 --separate-stderr ds-train --deepspeed_config cd.json --model "$MODEL" --train-iters 1
	[[ "$stderr" == *"cd.json"* && "$stderr" == *"communication_data_type"* ]] || fail "$stderr"
	# an fp32 model may reduce in either 16-bit type (tests/mpi/train.bats)
	for t in fp16 BF16; do
		echo '{"train_micro_batch_size_per_gpu": 2, "communication_data_type": "'$t'"}' > cd32.json
		run -0 --separate-stderr ds-train --deepspeed_config cd32.json --model "$MODEL" --train-iters 1
	done
}

@test "TensorBoard events decode with protoc; --metrics-json has DeepSpeed's keys" {
	command -v protoc >/dev/null || skip "protoc not installed"
	command -v jq >/dev/null || skip "jq not installed"
	run -0 train --train-iters 6 --metrics-json m.json
	ev=$(ls tb/run/events.out.tfevents.*)
	[ -s "$ev" ]
	# the first record after the 12-byte TFRecord header is file_version
	len=$(od -An -t u8 -N 8 "$ev" | tr -d ' ')
	tail -c +13 "$ev" | head -c "$len" | protoc --decode_raw | grep -q 'brain.Event:2'
	jq -e '.latency > 0 and .throughput > 0 and .fwd > 0' m.json
	head -1 csv/run/Train_Samples_lr.csv | grep -q '^step,lr'
}

@test "SGD, Lamb, every scheduler, fp16 and bf16 train a few steps" {
	for f in "$SHARE"/configs/*.json; do
		grep -q '"offload' "$f" && grep -q '"device"' "$f" && continue
		run ds-train --deepspeed_config "$f" --model "$MODEL" --train-iters 2 --log-interval 1
		[ "$status" -eq 0 ] || fail "$f: $output"
		assert_output --partial "step 2/2"
	done
}

@test "flops_profiler prints DeepSpeed's profile at profile_step, to output_file when given" {
	cat > fp.json <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "flops_profiler": {"enabled": true, "profile_step": 2, "module_depth": -1, "top_modules": 1, "detailed": true}}
JSON
	run -0 ds-train --deepspeed_config fp.json --model "$MODEL" --train-iters 3
	assert_output --partial "Profile Summary at step 2:"
	assert_output --partial "world size:"
	assert_output --partial "batch size per GPU:"
	# gpt-test: 118,528 parameters (2 layers, hidden 64, vocab 256)
	assert_output --partial "118.53 K"
	sed -i 's/"detailed": true}/"detailed": true, "output_file": "prof.txt"}/' fp.json
	run -0 ds-train --deepspeed_config fp.json --model "$MODEL" --train-iters 3
	refute_output --partial "Profile Summary"
	grep -q "Profile Summary at step 2:" prof.txt
}

@test "activation checkpointing: the same losses bit for bit; profile prints the recompute time per interval" {
	run -0 train --train-iters 4
	echo "$output" | losses > plain.txt
	jq '. + {activation_checkpointing: {number_checkpoints: 2, profile: true}}' cfg.json > ck.json
	run -0 ds-train --deepspeed_config ck.json --model "$MODEL" --train-iters 4
	echo "$output" | losses > ckpt.txt
	diff plain.txt ckpt.txt
	[ "$(echo "$output" | grep -c '^activation checkpointing: 1 steps recomputed layer forwards in ')" -eq 4 ]
	# times and shares of backward that are numbers, in range, not all zero
	echo "$output" | grep '^activation checkpointing' |
		awk '{ ms = $9; pct = $13; sub(/%/, "", pct); tot += ms
		       if (ms !~ /^[0-9.]+$/ || pct !~ /^[0-9.]+$/ || pct + 0 > 100) bad = 1 }
		     END { exit bad || !(tot > 0) }'
	# without checkpointing, profile has nothing to time and says nothing
	jq '. + {activation_checkpointing: {profile: true}}' cfg.json > nock.json
	run -0 ds-train --deepspeed_config nock.json --model "$MODEL" --train-iters 2
	refute_output --partial "activation checkpointing:"
}

@test "comms_logger at 1 rank: the summary is printed at the end, empty - a world of one issues no collectives" {
	sed -i 's/"gradient_clipping": 1.0}/"gradient_clipping": 1.0, "comms_logger": {"enabled": true, "verbose": true}}/' cfg.json
	run --separate-stderr train --train-iters 2
	assert_success
	# the header (seven columns, 20 characters each) right after the last
	# step line, and no rows before the memory report
	hdr=$(printf '%-20s' 'Comm. Op' 'Message Size' 'Count' 'Total Latency(ms)' 'Avg Latency(ms)' \
		'tput_avg (Gbps)' 'busbw_avg (Gbps)')
	echo "$output" | grep -A1 '^step 2/2' | tail -1 | grep -qxF "$hdr"
	echo "$output" | grep -A1 -xF "$hdr" | tail -1 | grep -q '^memory per rank'
	[[ "$stderr" != *"comm op:"* ]] || fail "$stderr"
	# off: no table
	sed -i 's/"comms_logger": {"enabled": true, "verbose": true}/"comms_logger": {"enabled": false}/' cfg.json
	run --separate-stderr train --train-iters 2
	assert_success
	[[ "$output" != *"Comm. Op"* ]] || fail "$output"
}

@test "comms_logger.prof_ops: a non-string is refused naming the key; an op ds-train never issues is a warning" {
	sed -i 's/"gradient_clipping": 1.0}/"gradient_clipping": 1.0, "comms_logger": {"enabled": true, "prof_all": false, "prof_ops": [3]}}/' cfg.json
	run --separate-stderr train --train-iters 1
	assert_failure 2
	echo "$stderr" | grep -q 'cfg.json: comms_logger.prof_ops\[0\]: not a string'
	sed -i 's/"prof_ops": \[3\]/"prof_ops": ["reduce"]/' cfg.json
	run --separate-stderr train --train-iters 1
	assert_success
	echo "$stderr" | grep -q "comms_logger.prof_ops: ds-train issues no 'reduce'"
}
