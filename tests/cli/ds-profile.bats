#!/usr/bin/env bats
# ds-profile: help, bad input, the seed's BERT-Large figures, GPT-2 124M's
# parameter count, and the JSON / CSV renderings.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

@test "ds-profile --help exits 0 and shows usage" {
	run -0 ds-profile --help
	assert_output --partial "Usage: ds-profile --model FILE"
}

@test "ds-profile --version names the features" {
	run -0 ds-profile --version
	assert_line --index 0 --regexp '^ds-profile \(dstk\) '
	assert_line --partial "features: "
}

@test "a bad flag exits 2 with a hint" {
	run -2 --separate-stderr ds-profile --no-such-flag
	[[ "$stderr" == *"Try 'ds-profile --help'"* ]]
}

@test "missing required options exit 2" {
	run -2 ds-profile --model "$SHARE/models/gpt2-124m.json"
	run -2 ds-profile --model "$SHARE/models/gpt2-124m.json" --batch-size 0 --seq-length 8
}

@test "a bad model file exits 2 naming the file and key" {
	printf '{"num_layers": 2, "hiden_size": 64}' > "$BATS_TEST_TMPDIR/m.json"
	run -2 --separate-stderr ds-profile --model "$BATS_TEST_TMPDIR/m.json" -b 1 -s 8
	[[ "$stderr" == *"m.json: unknown key 'hiden_size' (did you mean 'hidden_size'?)"* ]]
	printf '{"num_layers": 2,' > "$BATS_TEST_TMPDIR/t.json"
	run -2 --separate-stderr ds-profile --model "$BATS_TEST_TMPDIR/t.json" -b 1 -s 8
	[[ "$stderr" == *"t.json:1:"* ]]
	run -2 ds-profile --model "$BATS_TEST_TMPDIR/none.json" -b 1 -s 8
	printf '{"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 256, "norm": "batchnorm"}' > "$BATS_TEST_TMPDIR/n.json"
	run -2 --separate-stderr ds-profile --model "$BATS_TEST_TMPDIR/n.json" -b 1 -s 8
	[[ "$stderr" == *"n.json: key 'norm': "* ]]
}

@test "a sequence longer than the position table exits 2" {
	run -2 --separate-stderr ds-profile --model "$SHARE/models/gpt2-124m.json" -b 1 -s 2048
	[[ "$stderr" == *"max_position_embeddings 1024"* ]]
}

@test "BERT-Large at batch 80, sequence 128 reproduces the seed's table" {
	# params 336.23 M whatever the convention
	run -0 ds-profile --model "$SHARE/models/bert-large.json" --batch-size 80 --seq-length 128
	assert_line --regexp '^params per GPU: +336\.23 M$'
	# the table's convention: no attention matmuls, softmax as MACs, the
	# 1159 masked positions its MLM decoder saw -> 3139.93 G MACs
	run -0 ds-profile --model "$SHARE/models/bert-large.json" --batch-size 80 --seq-length 128 \
		--convention legacy --mlm-tokens 1159 --top-modules 3
	assert_line --regexp '^params per GPU: +336\.23 M$'
	assert_line --regexp '^fwd MACs per GPU: +3\.14 TMACs$'
	assert_line --regexp '^fwd flops per GPU: +6\.28 T +$'
	assert_line "    params      - {'BertModel': '335.15 M', 'BertPreTrainingHeads': '32.34 M'}"
	assert_line --partial "    MACs        - {'BertModel': '3.09 TMACs', 'BertPreTrainingHeads': '46.97 GMACs'}"
	run -0 ds-profile --model "$SHARE/models/bert-large.json" --batch-size 80 --seq-length 128 \
		--convention legacy --mlm-tokens 1159 --json
	macs=$(printf '%s' "$output" | jq -r .summary.fwd_macs_per_gpu)
	[ "$(awk -v m="$macs" 'BEGIN { printf "%.2f G", m / 1e9 }')" = "3139.93 G" ]
	[ "$(printf '%s' "$output" | jq -r .summary.params_per_gpu)" = 336232258 ]
}

@test "GPT-2 124M: 124,439,808 params with vocab 50257, more when padded to 50304" {
	run -0 ds-profile --model "$SHARE/models/gpt2-124m-hf.json" -b 1 -s 1024 --json
	[ "$(printf '%s' "$output" | jq -r .summary.params_per_gpu)" = 124439808 ]
	run -0 ds-profile --model "$SHARE/models/gpt2-124m.json" -b 1 -s 1024 --json
	[ "$(printf '%s' "$output" | jq -r .summary.params_per_gpu)" = $((124439808 + 47 * 768)) ]
}

@test "--json parses and carries config, summary, aggregated and modules" {
	run -0 --separate-stderr ds-profile --model "$SHARE/models/gpt2-124m.json" -b 2 -s 64 --json
	printf '%s' "$output" | jq -e '.config.batch_size == 2 and .config.seq_length == 64 and .config.family == "gpt"'
	printf '%s' "$output" | jq -e '.summary.attention_matmul_macs_per_gpu == 12 * 2 * 2 * 64 * 64 * 768'
	printf '%s' "$output" | jq -e '(.modules | length) > 12 and .modules[0].class == "GPTLMHeadModel"'
	printf '%s' "$output" | jq -e '.aggregated[0].params[0].value == .summary.params_per_gpu'
}

@test "--csv has its header and one row per module" {
	run -0 ds-profile --model "$SHARE/models/gpt2-124m.json" -b 1 -s 32 --csv
	assert_line --index 0 "path,class,depth,params,macs,flops,attn_matmul_macs,fwd_latency_s"
	assert_line --index 1 --regexp '^,GPTLMHeadModel,0,124475904,'
	assert_line --regexp '^transformer\.h\.11\.mlp\.c_fc,Linear,5,2362368,'
}

@test "--detailed prints the module tree, -o writes a file" {
	run -0 ds-profile --model "$SHARE/models/gpt2-124m.json" -b 1 -s 32 --detailed
	assert_line --partial "Detailed Profile per GPU"
	assert_line --partial "(0-11): 12 x GPTBlock("
	run -0 ds-profile --model "$SHARE/models/gpt2-124m.json" -b 1 -s 32 -o "$BATS_TEST_TMPDIR/p.txt"
	assert_output ""
	grep -q '^params per GPU: ' "$BATS_TEST_TMPDIR/p.txt"
	# a failed run leaves the previous file alone
	run -2 ds-profile --model "$BATS_TEST_TMPDIR/none.json" -b 1 -s 32 -o "$BATS_TEST_TMPDIR/p.txt"
	grep -q '^params per GPU: ' "$BATS_TEST_TMPDIR/p.txt"
	[ ! -e "$BATS_TEST_TMPDIR/p.txt.tmp" ]
}

tiny_model() {
	printf '{"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 32, "max_position_embeddings": 32, "vocab_size": 256}' > "$BATS_TEST_TMPDIR/tiny.json"
}

@test "--measure times forward and backward, per layer, and reports MFU" {
	tiny_model
	run -0 ds-profile --model "$BATS_TEST_TMPDIR/tiny.json" -b 2 -s 32 --measure --warmup 1 --iters 2 --detailed
	assert_line --regexp '^fwd latency: +[0-9.]+ [mu]?s *$'
	assert_line --regexp '^bwd FLOPS per GPU = 2 \* fwd flops per GPU / bwd latency: +[0-9.]+ [KMGT]?FLOPS$'
	assert_line --regexp '^step latency: +[0-9.]+ [mu]?s *$'
	assert_line --regexp '^iter latency: +[0-9.]+ [mu]?s *$'
	# MFU is a ratio of two timings taken at different moments: on a shared
	# machine it may exceed 1, so only its shape is asserted here
	assert_line --regexp '^MFU = FLOPS per GPU / sgemm ceiling: +[0-9]+\.[0-9]{4} *$'
	assert_line --regexp "^    fwd latency - \{'GPTLMHeadModel': '[0-9.]+ [mu]?s'\}$"
	# each layer was timed through the segment hooks: no collapse, a latency each
	assert_line --regexp '^      \(0\): GPTBlock\($'
	assert_line --regexp '^      \(1\): GPTBlock\($'
	run -0 --separate-stderr ds-profile --model "$BATS_TEST_TMPDIR/tiny.json" -b 2 -s 32 --measure --warmup 0 --iters 1 --json
	# the backend it ran on, said on stderr (auto: cpu, as ds-train's)
	[[ "$stderr" == *"--measure: device auto: cpu"* ]] || fail "no device line: $stderr"
	printf '%s' "$output" | jq -e '.summary.fwd_latency_s > 0 and .summary.bwd_latency_s > 0 and .summary.mfu > 0' || fail "a latency or mfu missing"
	# and it is the quotient of the two rates the summary reports
	printf '%s' "$output" | jq -e '.summary | (.mfu - .flops_per_s / .sgemm_flops_per_s) | fabs < 1e-9' || fail "mfu is not flops_per_s / sgemm_flops_per_s"
	printf '%s' "$output" | jq -e '[.modules[] | select(.class == "GPTBlock") | .fwd_latency_s > 0] == [true, true]'
}

@test "--measure on the profile-only bert family exits 2" {
	run -2 --separate-stderr ds-profile --model "$SHARE/models/bert-large.json" -b 1 -s 8 --measure
	[[ "$stderr" == *"profile-only"* ]]
}

@test "--measure --checkpointing counts the recomputed forward in the labels" {
	tiny_model
	run -0 ds-profile --model "$BATS_TEST_TMPDIR/tiny.json" -b 2 -s 32 --measure --checkpointing --warmup 0 --iters 1
	assert_line --regexp '^bwd FLOPS per GPU = 3 \* fwd flops per GPU / bwd latency: '
	assert_line --regexp '^FLOPS per GPU = 4 \* fwd flops per GPU / iter latency: '
}

@test "tensor and pipeline parallelism: one rank's params and MACs per GPU, the model as per GPU x mp_size" {
	# gpt-test at TP 2, B 2 x T 32: wte's 128 rows, wpe 32 x 64, per layer
	# c_attn 96 x 64 + 96, c_proj 64 x 32 + 64, c_fc 128 x 64 + 128,
	# mlp.c_proj 64 x 128 + 64, two layernorms; the final layernorm, and the
	# tied head counted once.  MACs per layer: 64 tokens x (64 x 96 + 32 x 64
	# + 64 x 128 + 128 x 64) + the attention of 2 heads 2 x 2 x 32 x 32 x 16 x 2;
	# the head 64 x 64 x 128
	run -0 ds-profile --model "$SHARE/models/gpt-test.json" -b 2 -s 32 --tensor-model-parallel-size 2 --json
	local layer=$((96 * 64 + 96 + 64 * 32 + 64 + 128 * 64 + 128 + 64 * 128 + 64 + 4 * 64))
	local macs=$((64 * (64 * 96 + 32 * 64 + 64 * 128 + 128 * 64) + 2 * 2 * 32 * 32 * 16 * 2))
	printf '%s' "$output" | jq -e --argjson p $((128 * 64 + 32 * 64 + 2 * layer + 128)) --argjson m $((2 * macs + 64 * 64 * 128)) \
		'.summary | .params_per_gpu == $p and .params_of_model == 2 * $p and .model_parallel_size == 2 and
		 .world_size == 2 and .data_parallel_size == 1 and .fwd_macs_per_gpu == $m' || fail "$output"
	# PP 2: stage 0 holds the embeddings and layer 0 (DeepSpeed's parameter
	# partition), stage 1 layer 1, the final norm and the tied head (the
	# 256 x 64 embedding weight it uses)
	run -0 ds-profile --model "$SHARE/models/gpt-test.json" -b 2 -s 32 --pipeline-model-parallel-size 2 --json
	printf '%s' "$output" | jq -e '.summary | .params_per_gpu == 68416 and .model_parallel_size == 2' || fail "$output"
	run -0 ds-profile --model "$SHARE/models/gpt-test.json" -b 2 -s 32 --pipeline-model-parallel-size 2 --pipe-stage 1 --json
	printf '%s' "$output" | jq -e '.summary.params_per_gpu == 49984 + 128 + 256 * 64' || fail "$output"
	run -0 ds-profile --model "$SHARE/models/gpt-test.json" -b 2 -s 32 --pipeline-model-parallel-size 2 --pipe-stage 1
	assert_line --regexp '^model parallel size: +2 *$'
	run -2 --separate-stderr ds-profile --model "$SHARE/models/gpt-test.json" -b 2 -s 32 --tensor-model-parallel-size 3
	[[ "$stderr" == *"tensor-parallel size 3 must divide num_attention_heads 4"* ]] || fail "$stderr"
	run -2 --separate-stderr ds-profile --model "$SHARE/models/gpt-test.json" -b 2 -s 32 --pipeline-model-parallel-size 2 --pipe-stage 2
	[[ "$stderr" == *"--pipe-stage 2: the stages are 0 .. 1"* ]] || fail "$stderr"
	run -2 --separate-stderr ds-profile --model "$SHARE/models/gpt-test.json" -b 2 -s 32 --tensor-model-parallel-size 2 --measure
	[[ "$stderr" == *"--measure times one process"* ]] || fail "$stderr"
}
