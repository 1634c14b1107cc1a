#!/usr/bin/env bats
# ZeRO-Infinity at 1 rank (tests/mpi/nvme.bats has 2): optimizer states
# and parameters offloaded to NVMe give the in-memory run's losses bit for
# bit; checkpoints of either resume in the other; the swap files never
# show under nvme_path, whatever ends the run; an unusable nvme_path or a
# configuration that cannot stream is one line and exit 2 before training;
# the memory plan shows the NVMe bytes; ds-nvme-tune's "aio" section pastes
# in; and a model whose master weights and Adam moments exceed the memory
# limit trains within the plan.
# shellcheck disable=SC2154  # stderr: set by bats' run --separate-stderr
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	MODEL="$SHARE/models/gpt-test.json"
	mkdir -p nv
}

# cfg FILE STAGE PREC CSVDIR [ZERO_MEMBERS]: 2 x 2 x 1 samples per step,
# AdamW with clipping (the norm enters every update), dropout-free model,
# sub-groups of 16384 elements that cut across segments
cfg() {
	local mixed=""
	[ "$3" = bf16 ] && mixed=', "bf16": {"enabled": true}'
	[ "$3" = fp16 ] && mixed=', "fp16": {"enabled": true, "initial_scale_power": 12}'
	cat >"$1" <<EOF
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 100, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $2, "sub_group_size": 16000, "stage3_param_persistence_threshold": 1000${5:+, $5}},
 "csv_monitor": {"enabled": true, "output_path": "$4", "job_name": "run"}$mixed}
EOF
}

OPT='"offload_optimizer": {"device": "nvme", "nvme_path": "nv", "buffer_count": 12, "pipeline_read": true, "pipeline_write": true}'
PAR='"offload_param": {"device": "nvme", "nvme_path": "nv", "max_in_cpu": 0}'
loss_csv() { echo "$1/run/Train_Samples_train_loss.csv"; }

# io_busy_between TEXT: in each swap line, the time some read or write was
# in flight is at least the reads' or the writes' alone and at most both
# (the lines round to 0.01 ms)
io_busy_between() {
	grep '^nvme swap per step' <<<"$1" | awk -F' [|] ' '{
		for (i = 2; i <= NF; i++) { split($i, kv, ": "); v[kv[1]] = kv[2] + 0 }
		r = v["read_busy_ms"]; w = v["write_busy_ms"]; b = v["io_busy_ms"]; n++
		if (!(b > 0 && b >= (r > w ? r : w) - 0.01 && b <= r + w + 0.01)) { print "read " r ", write " w ", io " b; bad = 1 }
	} END { exit bad || !n }'
}

# same_bits STAGE PREC MEMBERS: in memory and offloaded, 4 steps, the same CSV
same_bits() {
	cfg a.json "$1" "$2" A
	cfg b.json "$1" "$2" B "$3"
	run -0 --separate-stderr ds-train --deepspeed_config a.json --model "$MODEL" --train-iters 4
	run -0 --separate-stderr ds-train --deepspeed_config b.json --model "$MODEL" --train-iters 4
	[[ "$stderr" == *"nvme swap per step (rank 0) | read_MB: "* ]] || fail "no swap line: $stderr"
	io_busy_between "$stderr" || fail "stage $1 $2: io_busy_ms not between the longer of read_busy_ms and write_busy_ms and their sum"
	[ "$(wc -l <"$(loss_csv B)")" -eq 5 ] || fail "$(cat "$(loss_csv B)")"
	cmp "$(loss_csv A)" "$(loss_csv B)" || fail "stage $1 $2: $(paste -d' ' "$(loss_csv A)" "$(loss_csv B)")"
	rm -rf A B
}

@test "offloaded to NVMe, the in-memory run's losses bit for bit: stage 3 fp32/bf16 (states and parameters), stages 1-2" {
	same_bits 3 fp32 "$OPT, $PAR"
	same_bits 3 bf16 "$OPT, $PAR"
	same_bits 2 bf16 "$OPT"
	same_bits 1 fp32 "${OPT/, \"pipeline_read\": true/}"
	[ -z "$(ls -A nv)" ] || fail "left in nvme_path: $(ls -A nv)"
}

# Checkpoints have one format: saved offloaded at step 3 and resumed in
# memory (and the other way), steps 4-6 are the continuous run's; the
# offloaded save holds the in-memory save's tensors bit for bit and verifies.
@test "a checkpoint of an offloaded run is any checkpoint: resume in memory, and back" {
	command -v h5diff >/dev/null || skip "h5diff not installed"
	cfg mem.json 3 bf16 C
	cfg off.json 3 bf16 C "$OPT, $PAR"
	run -0 --separate-stderr ds-train --deepspeed_config mem.json --model "$MODEL" --train-iters 6
	cp "$(loss_csv C)" cont.csv
	rm -rf C
	for way in off-mem mem-off; do
		rm -rf C ck
		first=${way%-*}.json second=${way#*-}.json
		run -0 --separate-stderr ds-train --deepspeed_config "$first" --model "$MODEL" --train-iters 3 --save ck
		run -0 --separate-stderr ds-train --deepspeed_config "$second" --model "$MODEL" --train-iters 6 --load ck
		[[ "$stderr" == *"loaded ck/global_step3: step 3"* ]] || fail "$way: $stderr"
		# steps 1-3 and, appended by the resumed run, 4-6: the continuous run's
		cmp "$(loss_csv C)" cont.csv || fail "$way: $(paste -d' ' "$(loss_csv C)" cont.csv)"
		cp -r ck "ck-$way"
	done
	# the same tensors, bit for bit, whichever run wrote them
	run -0 h5diff ck-off-mem/global_step3/state.h5 ck-mem-off/global_step3/state.h5 /model /model
	run -0 h5diff ck-off-mem/global_step3/state.h5 ck-mem-off/global_step3/state.h5 /optimizer /optimizer
	run -0 ds-ckpt-convert verify ck-off-mem
}

# started PID: ds-train printed its summary line, or ended (no waiting on it then)
started() { grep -qs 'parameters' err.txt || ! kill -0 "$1" 2>/dev/null; }

@test "swap files are private scratch: no name under nvme_path during the run, after SIGTERM (exit 4, saved) or SIGKILL" {
	cfg s.json 3 bf16 S "$OPT, $PAR"
	for sig in TERM KILL; do
		rm -rf ck
		ds-train --deepspeed_config s.json --model "$MODEL" --train-iters 100000 --save ck >out.txt 2>err.txt &
		pid=$!
		wait_for 120 "ds-train to print its first line" started $pid ||
			{ kill -9 $pid 2>/dev/null; fail "ds-train printed nothing: $(cat err.txt)"; }
		kill -0 $pid 2>/dev/null || fail "ds-train ended early: $(cat err.txt)"
		sleep 1
		# open, full of state, and without a name
		open_swp=0
		for fd in "/proc/$pid/fd"/*; do
			[[ "$(readlink "$fd")" == *"/exp_avg.swp (deleted)" ]] && open_swp=1
		done
		[ $open_swp -eq 1 ] || { kill -9 $pid; fail "no unlinked swap file open"; }
		[ -z "$(ls -A nv)" ] || { kill -9 $pid; fail "names under nvme_path: $(ls -A nv)"; }
		kill -$sig $pid
		status=0
		wait_pid 120 $pid "ds-train to end after SIG$sig" || status=$?
		if [ $sig = TERM ]; then
			[ "$status" -eq 4 ] || fail "exit $status after SIGTERM: $(cat err.txt)"
			[ -f "ck/$(cat ck/latest)/state.h5" ] || fail "no checkpoint after SIGTERM"
		else
			[ "$status" -eq 137 ] || fail "exit $status after SIGKILL"
		fi
		[ -z "$(ls -A nv)" ] || fail "left in nvme_path after SIG$sig: $(ls -A nv)"
	done
	# a failing device: one line, exit 1, nothing left
	run -1 --separate-stderr env DS_TEST_FAULT_SWAP_EIO=40 ds-train --deepspeed_config s.json --model "$MODEL" --train-iters 4
	[[ "$stderr" == *"(rank 0): "*"Input/output error (planted: DS_TEST_FAULT_SWAP_EIO)"* ]] || fail "$stderr"
	[ -z "$(ls -A nv)" ] || fail "left in nvme_path after an I/O error: $(ls -A nv)"
}

# refused NAME JSON-ZERO-MEMBERS WANT [ENV=VALUE]: exit 2, one line, WANT in it
refused() {
	cfg r.json "${REFUSE_STAGE:-3}" "${REFUSE_PREC:-fp32}" R "$2"
	if [ -n "${EXTRA_TOP:-}" ]; then
		sed -i "s|^ \"csv_monitor\"| $EXTRA_TOP, \"csv_monitor\"|" r.json
	fi
	run -2 --separate-stderr env ${4:+"$4"} ds-train --deepspeed_config r.json --model "$MODEL" --train-iters 1
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$1: not one line: $stderr"
	[[ "$stderr" == *"$3"* ]] || fail "$1: $stderr"
	[ ! -e R ] || fail "$1: training started"
}

@test "an unusable nvme_path or a configuration that cannot stream: one line, exit 2, before training" {
	touch afile
	refused missing '"offload_optimizer": {"device": "nvme", "nvme_path": "nope"}' \
		"r.json: zero_optimization.offload_optimizer.nvme_path: 'nope': No such file or directory; create it"
	refused file '"offload_optimizer": {"device": "nvme", "nvme_path": "afile"}' "'afile' is not a directory"
	refused unwritable '"offload_optimizer": {"device": "nvme", "nvme_path": "/sys/kernel"}' \
		"/sys/kernel: not writable (cannot create a file there"
	refused small '"offload_optimizer": {"device": "nvme", "nvme_path": "nv"}' \
		"'nv' has 64.0 KiB (65536 bytes) free but the swap files need" DS_TEST_NVME_FREE_BYTES=65536
	refused odirect '"offload_optimizer": {"device": "nvme", "nvme_path": "nv"}' "'nv' refuses O_DIRECT" \
		DS_TEST_FAULT_NO_ODIRECT=1
	REFUSE_PREC=bf16 refused param-path "$OPT"', "offload_param": {"device": "nvme", "nvme_path": "nope2", "max_in_cpu": 0}' \
		"r.json: zero_optimization.offload_param.nvme_path: 'nope2'"
	refused buffers '"offload_optimizer": {"device": "nvme", "nvme_path": "nv", "buffer_count": 5, "pipeline_read": true}' \
		"zero_optimization.offload_optimizer.buffer_count 5: too few; streaming needs 6 buffers"
	REFUSE_PREC=bf16 refused bufsize "$OPT"', "offload_param": {"device": "nvme", "nvme_path": "nv", "max_in_cpu": 0, "buffer_size": 100}' \
		"offload_param.buffer_size 100: smaller than this rank's largest offloaded parameter slice"
	refused fp32-params "$PAR" "in an fp32 run the parameters are the optimizer's master weights"
	sed_lamb() { sed -i 's/"AdamW"/"Lamb"/' r.json; }
	cfg r.json 3 fp32 R "$OPT"
	sed_lamb
	run -2 --separate-stderr ds-train --deepspeed_config r.json --model "$MODEL" --train-iters 1
	[[ "$stderr" == *"optimizer Lamb cannot stream its states sub-group by sub-group"* ]] || fail "$stderr"
	EXTRA_TOP='"aio": {"block_size": 1000}' refused block '"offload_optimizer": {"device": "nvme", "nvme_path": "nv"}' \
		"aio.block_size: 1000 is not a multiple of 4096, as O_DIRECT needs"
	EXTRA_TOP='"aio": {"use_gds": true}' refused gds '"offload_optimizer": {"device": "nvme", "nvme_path": "nv"}' \
		"key 'aio.use_gds': not supported by dstk: GPUDirect Storage needs a CUDA build with cuFile"
	[ -z "$(ls -A nv)" ] || fail "left in nvme_path: $(ls -A nv)"
}

@test "--check: swap buffers in the host memory table, the NVMe bytes per rank, the sub-groups, the path" {
	cfg c.json 3 bf16 C "$OPT, $PAR"
	run -0 ds-train --check --deepspeed_config c.json --model "$MODEL"
	# 2 layers x 49984 + 18432 + 128 elements, each range rounded up to
	# 2048: 51200 x 2 + 18432 + 2048 = 122880; master and 2 Adam states
	# (4 bytes) and the 16-bit slices (2 bytes)
	assert_line --regexp "^nvme +1720320 .* the optimizer's \(fp32 master and states\), 16-bit parameter slices$"
	assert_line --regexp '^swap_buffers +[0-9]+ .* 12 optimizer buffers of 16384 elements .*5 parameter buffers of 51200 elements'
	assert_line --regexp '^optimizer_states +0 '
	assert_line "# the optimizer step streams 8 sub-groups of 16384 elements per rank"
	assert_line "# nvme_path on this machine: writable, accepts O_DIRECT, room for 1 rank"
	run -0 ds-train --check --json --deepspeed_config c.json --model "$MODEL"
	echo "$output" | python3 -c 'import json,sys; m=json.load(sys.stdin)["memory"]; b=m["bytes_per_rank"]; assert m["nvme_bytes"]==1720320 and m["nvme_optimizer_bytes"]==122880*12 and m["nvme_param_bytes"]==122880*2, m; assert b["swap_buffers"]==12*16384*4+2*16384*2+5*51200*2, b; assert m["total_bytes"]==sum(b.values())'
	DS_TEST_NVME_FREE_BYTES=1000 run -0 ds-train --check --deepspeed_config c.json --model "$MODEL"
	assert_line --partial "# nvme_path on this machine: c.json: zero_optimization.offload_optimizer.nvme_path: 'nv' has"
	# an fp32 run's master is its parameters, in memory: the files hold the
	# 2 Adam states of 18432 + 2 x 51200 + 2048 (the update ranges, each
	# rounded up to 2048) elements
	cfg f.json 2 fp32 F "$OPT"
	run -0 ds-train --check --deepspeed_config f.json --model "$MODEL"
	assert_line --regexp "^nvme +983040 .* the optimizer's \(states\)$"
}

@test "ds-nvme-tune's aio section pastes into the config the offloaded run uses" {
	printf '{"block_size": ["64K", "256K"], "queue_depth": [4], "intra_op_parallelism": [1, 2]}' >sweep.json
	cfg t.json 3 bf16 T "$OPT, $PAR"
	run -0 --separate-stderr ds-nvme-tune --nvme_dir nv --io_size 1M --sweep_config sweep.json --exhaustive \
		--deepspeed_config t.json -q
	python3 -c 'import json; a=json.load(open("t.json"))["aio"]; assert a["block_size"] in (65536, 262144) and a["intra_op_parallelism"] in (1, 2), a'
	run -0 --separate-stderr ds-train --deepspeed_config t.json --model "$MODEL" --train-iters 2
	[[ "$stderr" == *"nvme swap per step (rank 0) | read_MB: "* ]] || fail "$stderr"
	[ -z "$(ls -A nv)" ] || fail "left in nvme_path: $(ls -A nv)"
}

# The model: 8 layers of hidden 384, 14.3M parameters; bf16 with Adam
# keeps 12 bytes per parameter of fp32 master weights and moments (171 MB),
# more than the whole offloaded run needs.  The limit: a cgroup v2
# memory.max of those 171 MB where this machine lets the test make one,
# else the run's peak RSS measured against them.  Within the plan: the
# allocator's peak is the --check estimate to the byte, and the RSS above
# it no more than a tiny run's process overhead plus 16 MiB.
@test "master weights and Adam moments larger than the memory limit train with them on NVMe, within the plan" {
	cat >big.json <<'EOF'
{"family": "gpt", "num_layers": 8, "hidden_size": 384, "num_attention_heads": 6, "seq_length": 32, "vocab_size": 256,
 "make_vocab_size_divisible_by": 128, "pos_emb": "learned", "norm": "layernorm", "activation": "gelu"}
EOF
	printf '{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "sub_group_size": 1000000, "offload_optimizer": {"device": "nvme", "nvme_path": "nv"}}}' >m.json
	# the process's own overhead: a tiny run's RSS above its allocator's peak
	run -0 --separate-stderr ds-train --deepspeed_config "$SHARE/configs/default.json" --model "$MODEL" --train-iters 1 --peak-gflops 1
	line=$(grep '^memory per rank' <<<"$output")
	base=$(awk -F' [|] ' '{ for (i = 1; i <= NF; i++) { split($i, kv, " "); v[kv[1]] = kv[2] } } END { print v["peak_rss"] - v["alloc_peak"] }' <<<"$line")
	run -0 ds-train --check --deepspeed_config m.json --model big.json
	est=$(awk '$1 == "total" { print $2 }' <<<"$output")
	states=$(awk '$1 == "nvme" { print $2 }' <<<"$output")
	# the plan fits under the limit the states alone exceed
	[ "$((est + base + 16777216))" -lt "$states" ] || fail "plan $est + $base not below the states' $states bytes"
	cg=""
	if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null && mkdir "/sys/fs/cgroup/dstk-nvme-$$" 2>/dev/null; then
		cg="/sys/fs/cgroup/dstk-nvme-$$"
		echo "$states" >"$cg/memory.max" || fail "cannot set $cg/memory.max"
		echo 0 >"$cg/memory.swap.max" 2>/dev/null || true  # no swap controller: nothing to switch off
	fi
	if [ -n "$cg" ]; then
		# shellcheck disable=SC2016  # $$ and $1 belong to the inner shell, which joins the cgroup
		run -0 --separate-stderr bash -c 'echo $$ >"$1/cgroup.procs" && exec ds-train --deepspeed_config m.json --model big.json --train-iters 2 --peak-gflops 1' _ "$cg"
		rmdir "$cg"
	else
		run -0 --separate-stderr ds-train --deepspeed_config m.json --model big.json --train-iters 2 --peak-gflops 1
	fi
	line=$(grep '^memory per rank' <<<"$output")
	kv() { awk -F' [|] ' -v k="$1" '{ for (i = 1; i <= NF; i++) { split($i, a, " "); if (a[1] == k) print a[2] } }' <<<"$line"; }
	[ "$(kv alloc_peak)" -eq "$est" ] || fail "allocator peak $(kv alloc_peak), plan $est"
	[ "$(kv peak_rss)" -lt "$states" ] || fail "peak RSS $(kv peak_rss) not below the states' $states bytes"
	[ "$(kv peak_rss)" -le "$((est + base + 16777216))" ] || fail "peak RSS $(kv peak_rss) above plan $est + overhead $base + 16 MiB"
	[[ "$stderr" == *"nvme swap per step (rank 0) | read_MB: "* ]] || fail "$stderr"
}
