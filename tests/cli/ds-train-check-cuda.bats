#!/usr/bin/env bats
# ds-train --check --device cuda: the memory plan of a device run (issue 18).
# Every build: each row says where it lives and the per-rank device, host
# and pinned totals, with byte counts computed by hand for the test model
# (118528 parameters: wte 256x64, wpe 32x64, 2 layers of 49984, the final
# norm 128; 4 segments, the largest a layer); the cpu plan keeps its table.
# A CUDA build (tests/unit/ds-train-emu: ds-train over the host emulation
# of CUDA) also holds the plan to what the backend really allocates on the
# device and the allocator on the host, and runs out of device memory on
# an emulated device made small (DS_EMU_DEVICE_MEM) and out of pinned host
# memory (DS_EMU_PINNED_MEM).
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

P=118528
EMU=${DS_BUILDDIR}/tests/unit/ds-train-emu

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
	MODEL="$SHARE/models/gpt-test.json"
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}' >c.json
}

# row NAME: the bytes column of a plan row; where NAME: its place column
# (after the size's number and unit)
row() { awk -v k="$1" '$1 == k { print $2 }' <<<"$output"; }
where() { awk -v k="$1" '$1 == k { print $5 ($6 == "host" ? " host" : "") }' <<<"$output"; }
field() { awk -v k="$2" 'BEGIN { RS = " [|] " } index($0, k " ") == 1 { print substr($0, length(k) + 2) + 0 }' <<<"$1"; }

# as_planned WHAT DEV HOST PIN: the emulated run in $output planned and
# allocated what --check says: DEV bytes on the device (after setup and
# at its peak), HOST in host memory outside pinned memory (libds's
# allocator), PIN pinned; prints what differs and fails otherwise
as_planned() {
	local line hl
	line=$(grep '^device memory per rank' <<<"$output") || { echo "$1: no device memory line: $output"; return 1; }
	hl=$(grep '^memory per rank' <<<"$output") || { echo "$1: no memory line: $output"; return 1; }
	[ "$(field "$line" device_estimate)" -eq "$2" ] || { echo "$1: run's device plan differs from --check's $2: $line"; return 1; }
	[ "$(field "$line" device_alloc_setup)" -eq "$2" ] || { echo "$1: device allocation $line, plan $2"; return 1; }
	[ "$(field "$line" device_alloc_peak)" -eq "$2" ] || { echo "$1: device peak $line, plan $2"; return 1; }
	[ "$(field "$line" host_estimate)" -eq "$3" ] || { echo "$1: host plan $line, --check $3"; return 1; }
	[ "$(field "$hl" alloc_setup)" -eq "$3" ] || { echo "$1: host allocation $hl, plan $3"; return 1; }
	[ "$(field "$line" pinned_estimate)" -eq "$4" ] || { echo "$1: pinned plan $line, --check $4"; return 1; }
	[ "$(field "$line" pinned)" -eq "$4" ] || { echo "$1: pinned $line, plan $4"; return 1; }
}

need_emu() {
	ds_has cuda || skip "built without CUDA (no emulated ds-train)"
	[ -x "$EMU" ] || fail "$EMU is missing: make check builds it on a CUDA build"
}

@test "--check --device cuda: every row's place and bytes, device and host totals per rank (hand-computed)" {
	run -0 ds-train --check --deepspeed_config c.json --model "$MODEL" --device cuda
	[ "$(row parameters)" -eq $((4 * P)) ] || fail "parameters: $(row parameters)"
	[ "$(row gradients)" -eq $((4 * P)) ] || fail "gradients: $(row gradients)"
	[ "$(row optimizer_states)" -eq $((8 * P)) ] || fail "optimizer_states: $(row optimizer_states)"
	[ "$(row communication)" -eq $((4 * 49984)) ] || fail "communication: $(row communication)"
	for c in parameters gradients optimizer_states communication activations; do
		[ "$(where $c)" = device ] || fail "$c is not on the device: $(where $c)"
	done
	[ "$(where other)" = host ] || fail "other: $(where other)"
	[ "$(where swap_buffers)" = "pinned host" ] || fail "swap_buffers: $(where swap_buffers)"
	[ "$(row comm_staging)" -eq 0 ] || fail "one rank stages nothing: $(row comm_staging)"
	act=$(row activations) other=$(row other)
	[ "$(row device_total)" -eq $((16 * P + 4 * 49984 + act)) ] || fail "device_total: $output"
	[ "$(row host_total)" -eq "$other" ] || fail "host_total: $output"
	[ "$(row pinned_total)" -eq 0 ] || fail "pinned_total: $output"
	# the same engine buffers as the cpu plan's, whose table is unchanged
	dev=$output
	run -0 ds-train --check --deepspeed_config c.json --model "$MODEL" --device cpu
	for c in parameters gradients optimizer_states communication activations other; do
		[ "$(row $c)" = "$(awk -v k=$c '$1 == k { print $2 }' <<<"$dev")" ] || fail "$c differs from the cpu plan"
	done
	[ "$(row total)" -eq $((16 * P + 4 * 49984 + act + other)) ] || fail "cpu total: $output"
	[ -z "$(row device_total)" ] || fail "the cpu plan has a device row: $output"
	refute_output --partial "pinned host"
	assert_line --regexp '^# category +bytes +size +holds$'
}

@test "--check --json --device cuda: where each row lives and the device, host and pinned bytes" {
	command -v jq >/dev/null || skip "jq not installed"
	run -0 ds-train --check --json --deepspeed_config c.json --model "$MODEL" --device cuda
	jq -e --argjson p "$P" '.memory.where.parameters == "device" and .memory.where.activations == "device" and
		.memory.where.other == "host" and .memory.where.swap_buffers == "pinned host" and
		.memory.device_bytes == .memory.bytes_per_rank.parameters + .memory.bytes_per_rank.gradients +
			.memory.bytes_per_rank.optimizer_states + .memory.bytes_per_rank.communication +
			.memory.bytes_per_rank.activations and
		.memory.bytes_per_rank.optimizer_states == 8 * $p and
		.memory.host_bytes == .memory.bytes_per_rank.other and .memory.pinned_host_bytes == 0 and
		.memory.comm_staging_pinned_bytes == 0' <<<"$output" >/dev/null || fail "$output"
	run -0 ds-train --check --json --deepspeed_config c.json --model "$MODEL" --device cpu
	jq -e '.memory | has("where") or has("device_bytes") | not' <<<"$output" >/dev/null || fail "cpu JSON has device keys"
}

# the staged MPI path's pinned buffers at 2 ranks, by hand: stage 0 stages
# the one bucket's allreduce (the whole 118528-element buffer, 474112 bytes,
# grown to the next 64 KiB step: 524288); stage 2 the reduce-scatter of the
# largest shard (49984 / 2 = 24992 elements, input and block: 3 x 24992 x 4
# = 299904 bytes -> 327680), larger than the allgather of the updated slices
# (2 x 24992 x 4 = 199936 -> 262144); overlap_comm at stage 2 keeps 4 in flight
@test "--check --device cuda at 2 ranks: the pinned staging of the largest collective (hand-computed)" {
	local st ov want
	for st in 0 2; do
		for ov in false true; do
			printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": %d, "overlap_comm": %s}}' \
				"$st" "$ov" >z.json
			run -0 ds-train --check --world-size 2 --deepspeed_config z.json --model "$MODEL" --device cuda
			want=524288
			[ "$st" -eq 2 ] && want=327680
			[ "$st" -eq 2 ] && [ "$ov" = true ] && want=$((4 * 327680))
			[ "$st" -eq 0 ] && [ "$ov" = true ] && want=524288   # one bucket in flight
			[ "$(row comm_staging)" -eq "$want" ] || fail "stage $st overlap $ov: comm_staging $(row comm_staging), want $want"
			[ "$(row pinned_total)" -eq "$want" ] || fail "stage $st overlap $ov: pinned_total"
			[ "$(row host_total)" -eq $(($(row other) + want)) ] || fail "stage $st overlap $ov: host_total"
		done
	done
}

@test "emulated device: the backend allocates the plan's device rows byte for byte, the host its host rows" {
	need_emu
	local cfg dev host msg
	# (fp32: a 16-bit run on the emulated device stops in the model's
	# 16-bit head, lib/model/gpt.c's head_forward reading device memory)
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "activation_checkpointing": {"number_checkpoints": 1}}' >k.json
	for cfg in c.json k.json; do
		run -0 ds-train --check --deepspeed_config "$cfg" --model "$MODEL" --device cuda
		dev=$(row device_total) host=$(row host_total)
		[ "$dev" -gt 0 ] && [ "$host" -gt 0 ] || fail "$cfg: no totals: $output"
		run -0 --separate-stderr "$EMU" --deepspeed_config "$cfg" --model "$MODEL" --device cuda --train-iters 2 \
			--peak-gflops 1
		# (one rank: nothing pinned)
		msg=$(as_planned "$cfg" "$dev" "$host" 0) || fail "$msg"
	done
}

# 2000000 free bytes: parameters, gradients and optimizer states (16 x P =
# 1896448) fit, the communication row (4 x 49984) brings it to 2096384
@test "emulated device too small for the plan: one line naming the row, the sizes and what to do, exit 1, nothing trained" {
	need_emu
	DS_EMU_DEVICE_MEM=2000000 run -1 --separate-stderr "$EMU" --deepspeed_config c.json --model "$MODEL" --device cuda \
		--train-iters 2 --save ck
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one line: $stderr"
	[[ "$stderr" == *"memory plan's communication row"* ]] || fail "row: $stderr"
	[[ "$stderr" == *"2096384 bytes"* && "$stderr" == *"past the 2000000 bytes"* ]] || fail "sizes: $stderr"
	[[ "$stderr" == *"ZeRO stage"* && "$stderr" == *"micro batch"* && "$stderr" == *"activation checkpointing"* ]] ||
		fail "what to do: $stderr"
	[ -z "$output" ] || fail "stdout: $output"
	[ ! -e ck ] || fail "a checkpoint was written"
	# a device with room for the plan trains
	DS_EMU_DEVICE_MEM=$((64 << 20)) run -0 --separate-stderr "$EMU" --deepspeed_config c.json --model "$MODEL" \
		--device cuda --train-iters 1
}

# free memory of exactly the plan's device total passes the check, and the
# emulation's page-granular cudaMalloc then runs out inside the engine
@test "emulated device allocation failing at run time names the plan row it belongs to" {
	need_emu
	run -0 ds-train --check --deepspeed_config c.json --model "$MODEL" --device cuda
	dev=$(row device_total)
	DS_EMU_DEVICE_MEM=$dev run -1 --separate-stderr "$EMU" --deepspeed_config c.json --model "$MODEL" --device cuda \
		--train-iters 1
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one line: $stderr"
	[[ "$stderr" =~ out\ of\ cuda\ memory\ for\ the\ memory\ plan\'s\ (parameters|gradients|optimizer_states|communication)\ row ]] ||
		fail "no plan row named: $stderr"
}

# ZeRO-Offload (offload_optimizer.device cpu, stages 1-3) by hand: the
# optimizer_states row leaves the device for pinned host memory with what
# the host step adds: fp32 runs 2 Adam states (8P) + a host copy of the
# updated ranges (4P) + two fp32 gradient buffers of the largest segment
# (a layer of 49984: one in flight while the other is stepped, 8 x 49984);
# bf16 runs 2 states + the fp32 master (12P) + one fp32 buffer (4 x 49984)
# and two bf16 ones (4 x 49984), their parameters (2P, the bf16 copy)
# staying on the device
@test "--check --device cuda with offload_optimizer cpu: optimizer_states in pinned host memory (hand-computed)" {
	local dt opt par half want
	for dt in fp32 bf16; do
		if [ $dt = fp32 ]; then
			opt=$((12 * P + 8 * 49984)) par=$((4 * P)) half=''
		else
			opt=$((12 * P + 8 * 49984)) par=$((2 * P)) half=', "bf16": {"enabled": true}'
		fi
		printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}%s}' \
			"$half" >o.json
		run -0 ds-train --check --deepspeed_config o.json --model "$MODEL" --device cuda
		[ "$(row optimizer_states)" -eq "$opt" ] || fail "$dt: optimizer_states $(row optimizer_states), want $opt"
		[ "$(where optimizer_states)" = "pinned host" ] || fail "$dt: optimizer_states on $(where optimizer_states)"
		[ "$(row parameters)" -eq "$par" ] || fail "$dt: parameters $(row parameters)"
		[ "$(where parameters)" = device ] || fail "$dt: parameters on $(where parameters)"
		[ "$(row pinned_total)" -eq "$opt" ] || fail "$dt: pinned_total: $output"
		[ "$(row host_total)" -eq $(($(row other) + opt)) ] || fail "$dt: host_total: $output"
		assert_line --partial "ZeRO-Offload: the step runs on the host"
		# the cpu plan: nothing moves, the row is the states (and master) alone
		run -0 ds-train --check --deepspeed_config o.json --model "$MODEL" --device cpu
		want=$((8 * P))
		[ $dt = bf16 ] && want=$((12 * P))
		[ "$(row optimizer_states)" -eq "$want" ] || fail "$dt: cpu optimizer_states $(row optimizer_states), want $want"
		assert_line --partial "nothing moves and no device memory is saved"
	done
	# stage 0 has no ZeRO optimizer to offload from: nothing moves
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}}' >o0.json
	run -0 ds-train --check --deepspeed_config o0.json --model "$MODEL" --device cuda
	[ "$(where optimizer_states)" = device ] || fail "stage 0: optimizer_states on $(where optimizer_states)"
}

# the emulated run allocates the offloaded plan: on the device its device
# rows, in pinned host memory its optimizer_states row, byte for byte; its
# losses are the run without offload's (the host step is the cpu
# backend's Adam on the same gradients), in fp32, fp16 (the loss scaler's
# unscaling reaching the host step) and bf16
@test "emulated device, offload_optimizer cpu: device and pinned allocations equal the plan; the losses of the run without offload (fp32, fp16, bf16)" {
	need_emu
	local dt half dev pin host msg off plain full room
	for dt in fp32 fp16 bf16; do
		half=''
		[ $dt = fp16 ] && half=', "fp16": {"enabled": true, "initial_scale_power": 8}'
		[ $dt = bf16 ] && half=', "bf16": {"enabled": true}'
		printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}%s}' \
			"$half" >o.json
		printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}%s}' "$half" >n.json
		run -0 ds-train --check --deepspeed_config o.json --model "$MODEL" --device cuda
		dev=$(row device_total) pin=$(row pinned_total) host=$(row host_total)
		run -0 --separate-stderr "$EMU" --deepspeed_config o.json --model "$MODEL" --device cuda --train-iters 4 \
			--log-interval 1 --peak-gflops 1
		msg=$(as_planned "$dt" "$dev" $((host - pin)) "$pin") || fail "$msg"
		off=$(grep -o 'loss [0-9.]*' <<<"$output")
		[ "$(wc -l <<<"$off")" -eq 4 ] || fail "$dt: expected 4 losses: $output"
		run -0 --separate-stderr "$EMU" --deepspeed_config n.json --model "$MODEL" --device cuda --train-iters 4 \
			--log-interval 1 --peak-gflops 1
		plain=$(grep -o 'loss [0-9.]*' <<<"$output")
		paste <(awk '{ print $2 }' <<<"$off") <(awk '{ print $2 }' <<<"$plain") |
			awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) { print "loss " $1 " vs " $2; bad = 1 } } END { exit bad }' ||
			fail "$dt: offloaded losses differ from the run without offload"
	done
	# (bf16, the last configs) a device with room for the offloaded plan
	# but not the plain one: without offload one line naming the row that
	# crossed, exit 1; with it the run trains
	run -0 ds-train --check --deepspeed_config n.json --model "$MODEL" --device cuda
	full=$(row device_total)
	run -0 ds-train --check --deepspeed_config o.json --model "$MODEL" --device cuda
	# (halfway: the emulation's cudaMalloc rounds each buffer to pages)
	[ "$(row device_total)" -lt "$full" ] || fail "offload saves no device memory: $(row device_total) vs $full"
	room=$((($(row device_total) + full) / 2))
	DS_EMU_DEVICE_MEM=$room run -1 --separate-stderr "$EMU" --deepspeed_config n.json --model "$MODEL" \
		--device cuda --train-iters 1
	[[ "$stderr" == *"memory plan's"* ]] || fail "no plan row named: $stderr"
	DS_EMU_DEVICE_MEM=$room run -0 --separate-stderr "$EMU" --deepspeed_config o.json --model "$MODEL" \
		--device cuda --train-iters 1
}

# a checkpoint of an offloaded device run (the states and master read from
# pinned host memory) resumes on cpu without offload, and a cpu run's on
# the device with offload (written into the host copies), each with the
# step-3 and step-4 losses of the uninterrupted run (step 4 shows the
# first update made from what was loaded)
@test "emulated device, offload_optimizer cpu: checkpoints resume on cpu without offload and back, with the next loss" {
	need_emu
	local want w4
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}' >o.json
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}}' >n.json
	loss_at() { sed -n "s/^step $1\\/4 .*| loss \\([0-9.]*\\) .*/\\1/p" <<<"$output"; }
	near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * b) }'; }
	run -0 --separate-stderr ds-train --deepspeed_config n.json --model "$MODEL" --train-iters 4 --log-interval 1
	want=$(loss_at 3) w4=$(loss_at 4)
	[ -n "$want" ] && [ -n "$w4" ] || fail "no step-3 or step-4 loss: $output"
	# offloaded on the device, saved at step 2, resumed on cpu
	run -0 --separate-stderr "$EMU" --deepspeed_config o.json --model "$MODEL" --device cuda --train-iters 4 \
		--log-interval 1 --save a --exit-interval 2
	[ "$(cat a/latest)" = global_step2 ] || fail "latest: $(cat a/latest)"
	run -0 --separate-stderr ds-train --deepspeed_config n.json --model "$MODEL" --train-iters 4 --log-interval 1 \
		--save a --load auto
	near "$(loss_at 3)" "$want" && near "$(loss_at 4)" "$w4" ||
		fail "offloaded cuda -> cpu: losses $(loss_at 3) $(loss_at 4), uninterrupted $want $w4"
	# on cpu, saved at step 2, resumed offloaded on the device
	run -0 --separate-stderr ds-train --deepspeed_config n.json --model "$MODEL" --train-iters 4 --log-interval 1 \
		--save b --exit-interval 2
	run -0 --separate-stderr "$EMU" --deepspeed_config o.json --model "$MODEL" --device cuda --train-iters 4 \
		--log-interval 1 --save b --load auto
	near "$(loss_at 3)" "$want" && near "$(loss_at 4)" "$w4" ||
		fail "cpu -> offloaded cuda: losses $(loss_at 3) $(loss_at 4), uninterrupted $want $w4"
}

# offload_param.device cpu (ZeRO stage 3, a 16-bit run) by hand, with
# stage3_param_persistence_threshold 1000: the embeddings (18432) and both
# layers (49984) reach it, the final norm (128) does not.  On one rank the
# 16-bit parameters of those three (2 x 118400 bytes) leave the parameters
# row (2 x 128 stay) for pinned host memory, and communication gains two
# 16-bit widening sources of the largest segment (2 x 2 x 49984); on 2
# ranks each holds half of them (118400) and gains three 16-bit send
# slices of the largest shard (3 x 2 x 24992).  An fp32 run offloads them
# with offload_optimizer cpu (its host step's master): on one rank 4 x
# 118400 bytes leave the parameters row (4 x 128 stay) and the host copy
# of them under optimizer_states, so the pinned total stays what
# offload_optimizer alone pins, and communication gains two fp32 segments
# (2 x 4 x 49984).  Where nothing moves (fp32 without offload_optimizer,
# stage 2, the default threshold, the cpu plan) a note says why.
@test "--check --device cuda with offload_param cpu: the offloaded parameters in pinned host memory, 16-bit and fp32 (hand-computed)" {
	local zo='"stage": 3, "stage3_param_persistence_threshold": 1000' ws plain_comm plain_dev off extra opt0 pin0 comm0
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "zero_optimization": {%s}}' \
		"$zo" >n.json
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "zero_optimization": {%s, "offload_param": {"device": "cpu"}}}' \
		"$zo" >p.json
	for ws in 1 2; do
		run -0 ds-train --check --world-size $ws --deepspeed_config n.json --model "$MODEL" --device cuda
		plain_comm=$(row communication) plain_dev=$(row device_total)
		[ -z "$(row params_offloaded)" ] || fail "no offload, yet a params_offloaded row: $output"
		run -0 ds-train --check --world-size $ws --deepspeed_config p.json --model "$MODEL" --device cuda
		off=$((2 * 118400)) extra=$((2 * 2 * 49984))
		[ $ws -eq 2 ] && off=118400 extra=$((3 * 2 * 24992))
		[ "$(row params_offloaded)" -eq "$off" ] || fail "ws $ws: params_offloaded $(row params_offloaded), want $off"
		[ "$(where params_offloaded)" = "pinned host" ] || fail "ws $ws: params_offloaded on $(where params_offloaded)"
		[ "$(row parameters)" -eq 256 ] || fail "ws $ws: parameters $(row parameters), want 256"
		[ "$(where parameters)" = device ] || fail "ws $ws: parameters on $(where parameters)"
		[ "$(row communication)" -eq $((plain_comm + extra)) ] || fail "ws $ws: communication $(row communication)"
		[ "$(row device_total)" -eq $((plain_dev - off + extra)) ] || fail "ws $ws: device_total $(row device_total)"
		[ "$(row pinned_total)" -eq $((off + $(row comm_staging))) ] || fail "ws $ws: pinned_total: $output"
		assert_line --partial "# offload of parameters to cpu: params_offloaded is pinned host memory"
	done
	if command -v jq >/dev/null; then
		run -0 ds-train --check --json --deepspeed_config p.json --model "$MODEL" --device cuda
		jq -e '.memory.params_offloaded_pinned_bytes == 236800 and .memory.pinned_host_bytes == 236800' \
			<<<"$output" >/dev/null || fail "JSON: $output"
	fi
	# fp32 with offload_optimizer cpu
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {%s, "offload_optimizer": {"device": "cpu"}}}' \
		"$zo" >fo.json
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {%s, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}' \
		"$zo" >fp.json
	run -0 ds-train --check --deepspeed_config fo.json --model "$MODEL" --device cuda
	opt0=$(row optimizer_states) pin0=$(row pinned_total) comm0=$(row communication)
	run -0 ds-train --check --deepspeed_config fp.json --model "$MODEL" --device cuda
	[ "$(row params_offloaded)" -eq $((4 * 118400)) ] || fail "fp32: params_offloaded $(row params_offloaded)"
	[ "$(row parameters)" -eq 512 ] || fail "fp32: parameters $(row parameters), want 512"
	[ "$(row optimizer_states)" -eq $((opt0 - 4 * 118400)) ] || fail "fp32: optimizer_states $(row optimizer_states)"
	[ "$(row pinned_total)" -eq "$pin0" ] || fail "fp32: pinned_total $(row pinned_total), offload_optimizer alone $pin0"
	[ "$(row communication)" -eq $((comm0 + 2 * 4 * 49984)) ] || fail "fp32: communication $(row communication)"
	# where nothing moves, the parameters stay in the row and a note says why
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {%s, "offload_param": {"device": "cpu"}}}' \
		"$zo" >f.json
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}' >s2.json
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}' >d.json
	run -0 ds-train --check --deepspeed_config f.json --model "$MODEL" --device cuda
	[ "$(row parameters)" -eq $((4 * P)) ] && [ -z "$(row params_offloaded)" ] || fail "fp32: $output"
	assert_line --partial "an fp32 run's parameters are its master weights"
	run -0 ds-train --check --deepspeed_config s2.json --model "$MODEL" --device cuda
	[ "$(row parameters)" -eq $((2 * P)) ] && [ -z "$(row params_offloaded)" ] || fail "stage 2: $output"
	assert_line --partial "ZeRO stage 2 does not partition parameters"
	run -0 ds-train --check --deepspeed_config d.json --model "$MODEL" --device cuda
	[ "$(row parameters)" -eq $((2 * P)) ] && [ -z "$(row params_offloaded)" ] || fail "default threshold: $output"
	assert_line --partial "no segment reaches stage3_param_persistence_threshold"
	run -0 ds-train --check --deepspeed_config p.json --model "$MODEL" --device cpu
	[ "$(row parameters)" -eq $((2 * P)) ] || fail "cpu plan: $output"
	assert_line --partial "on this CPU build every row above is already host memory"
}

# the emulated run allocates the plan with offload_param cpu (alone and
# with offload_optimizer cpu, whose host step then writes the 16-bit copy
# straight into host memory) byte for byte, and each step's loss is the
# run without offload's within 1e-5 (the same 16-bit values reach the
# model, only through pinned memory): bf16 with AdamW, fp16 with Lamb
# (its trust ratios take the host step's synchronous path), and fp32 with
# AdamW and offload_optimizer (the host step updating the pinned
# parameters in place); a cpu run's checkpoint resumes there with the
# uninterrupted run's next two losses (the load's master weights packed
# into the host copy), and an fp32 one's resumes on cpu (read from the
# pinned parameters)
@test "emulated device, offload_param cpu: allocations equal the plan; the losses without offload; a cpu checkpoint resumes" {
	need_emu
	local zo='"stage": 3, "stage3_param_persistence_threshold": 1000' dt opt half oo dev pin host msg off plain want w4
	for dt in fp32 bf16 fp16; do
		opt='' half=', "bf16": {"enabled": true}'
		[ $dt = fp32 ] && half=''
		[ $dt = fp16 ] && opt=', "optimizer": {"type": "Lamb", "params": {"lr": 0.001}}' half=', "fp16": {"enabled": true, "initial_scale_power": 8}'
		printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {%s}%s%s}' "$zo" "$opt" "$half" >n.json
		run -0 --separate-stderr "$EMU" --deepspeed_config n.json --model "$MODEL" --device cuda --train-iters 3 \
			--log-interval 1 --peak-gflops 1
		plain=$(grep -o 'loss [0-9.]*' <<<"$output" | awk '{ print $2 }')
		[ "$(wc -l <<<"$plain")" -eq 3 ] || fail "$dt: expected 3 losses: $output"
		for oo in '' ', "offload_optimizer": {"device": "cpu"}'; do
			[ $dt = fp32 ] && [ -z "$oo" ] && continue   # (fp32 moves them with offload_optimizer only)
			printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {%s, "offload_param": {"device": "cpu"}%s}%s%s}' \
				"$zo" "$oo" "$opt" "$half" >p.json
			run -0 ds-train --check --deepspeed_config p.json --model "$MODEL" --device cuda
			dev=$(row device_total) pin=$(row pinned_total) host=$(row host_total)
			[ "$(row params_offloaded)" -gt 0 ] || fail "$dt$oo: nothing offloaded: $output"
			run -0 --separate-stderr "$EMU" --deepspeed_config p.json --model "$MODEL" --device cuda --train-iters 3 \
				--log-interval 1 --peak-gflops 1
			msg=$(as_planned "$dt$oo" "$dev" $((host - pin)) "$pin") || fail "$msg"
			off=$(grep -o 'loss [0-9.]*' <<<"$output" | awk '{ print $2 }')
			paste <(echo "$off") <(echo "$plain") |
				awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) { print "loss " $1 " vs " $2; bad = 1 } } END { exit bad }' ||
				fail "$dt$oo: offloaded losses differ from the run without offload: $off / $plain"
		done
	done
	# (fp16 with Lamb and both offloads, the last config) saved on cpu at
	# step 2, resumed on the emulated device
	loss_at() { sed -n "s/^step $1\\/4 .*| loss \\([0-9.]*\\) .*/\\1/p" <<<"$output"; }
	near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * b) }'; }
	run -0 --separate-stderr ds-train --deepspeed_config n.json --model "$MODEL" --train-iters 4 --log-interval 1 \
		--save c --exit-interval 2
	run -0 --separate-stderr ds-train --deepspeed_config n.json --model "$MODEL" --train-iters 4 --log-interval 1
	want=$(loss_at 3) w4=$(loss_at 4)
	[ -n "$want" ] && [ -n "$w4" ] || fail "no step-3 or step-4 loss: $output"
	run -0 --separate-stderr "$EMU" --deepspeed_config p.json --model "$MODEL" --device cuda --train-iters 4 \
		--log-interval 1 --save c --load auto
	near "$(loss_at 3)" "$want" && near "$(loss_at 4)" "$w4" ||
		fail "cpu -> offloaded cuda: losses $(loss_at 3) $(loss_at 4), uninterrupted $want $w4"
	# fp32 with both offloads, saved on the device at step 2, resumed on cpu
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {%s}}' "$zo" >n.json
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {%s, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}}' \
		"$zo" >p.json
	run -0 --separate-stderr ds-train --deepspeed_config n.json --model "$MODEL" --train-iters 4 --log-interval 1
	want=$(loss_at 3) w4=$(loss_at 4)
	run -0 --separate-stderr "$EMU" --deepspeed_config p.json --model "$MODEL" --device cuda --train-iters 4 \
		--log-interval 1 --save f --exit-interval 2
	run -0 --separate-stderr ds-train --deepspeed_config n.json --model "$MODEL" --train-iters 4 --log-interval 1 \
		--save f --load auto
	near "$(loss_at 3)" "$want" && near "$(loss_at 4)" "$w4" ||
		fail "offloaded fp32 cuda -> cpu: losses $(loss_at 3) $(loss_at 4), uninterrupted $want $w4"
}

# pinned host memory that runs out (the emulation's DS_EMU_PINNED_MEM
# caps cudaMallocHost): one line naming the plan row whose buffer did not
# come and what it holds, exit 1, nothing trained or written
@test "emulated pinned memory too small for an offload: one line naming the row, exit 1, nothing written" {
	need_emu
	local opt='"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}'
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, %s, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1000, "offload_param": {"device": "cpu"}}}' \
		"$opt" >p.json
	printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, %s, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}' \
		"$opt" >o.json
	# (the offloaded parameters are 236800 bytes, the optimizer's row 12 x P)
	DS_EMU_PINNED_MEM=200000 run -1 --separate-stderr "$EMU" --deepspeed_config p.json --model "$MODEL" --device cuda \
		--train-iters 2 --save ck
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one line: $stderr"
	[[ "$stderr" == *"out of pinned host memory for the memory plan's parameters row (offload_param cpu: the 16-bit parameters, 236800 bytes)"* ]] ||
		fail "parameters row not named: $stderr"
	[ ! -e ck ] || fail "a failed run wrote a checkpoint directory"
	refute_output --partial "step 1/"
	DS_EMU_PINNED_MEM=600000 run -1 --separate-stderr "$EMU" --deepspeed_config o.json --model "$MODEL" --device cuda \
		--train-iters 2
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "expected one line: $stderr"
	[[ "$stderr" == *"out of pinned host memory for the memory plan's optimizer_states row (ZeRO-Offload:"* ]] ||
		fail "optimizer_states row not named: $stderr"
	# with room for the plan's pinned total both train
	DS_EMU_PINNED_MEM=$((236800 + 4096)) run -0 --separate-stderr "$EMU" --deepspeed_config p.json --model "$MODEL" \
		--device cuda --train-iters 1
}
