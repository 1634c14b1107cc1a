#!/usr/bin/env bats
# Mixture of Experts on one rank (issue 23): the top-2 and PR-MoE test
# models train (the loss falls, the step line shows moe_loss and dropped)
# and resume bit for bit; --check shows the parameters per rank and the
# all-to-all volume; ds-profile counts the routed MACs; what DeepSpeed
# refuses is refused.
# shellcheck disable=SC2154  # stderr: set by bats' run --separate-stderr
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	cat >cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.1}},
 "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "run"},
 "gradient_clipping": 1.0}
JSON
}

train() { ds-train --deepspeed_config cfg.json "$@"; }
loss_at() { echo "$output" | grep "^step $1/" | sed 's/.*| loss \([0-9.]*\).*/\1/'; }

# train 16 steps straight, then 8 + save + 8 resumed: the same CSV rows
falls_and_resumes() {
	local model=$1
	run -0 train --model "$model" --train-iters 16
	local first last
	first=$(loss_at 1)
	last=$(loss_at 16)
	awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 0.5) }' || fail "loss $first -> $last did not fall"
	assert_output --regexp 'step 16/16 \| samples 128 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| grad_norm [0-9.]+ \| moe_loss [0-9.]+ \| dropped 0\.[0-9]{4} \|'
	cp csv/run/Train_Samples_train_loss.csv straight.csv
	rm -rf csv
	run -0 train --model "$model" --train-iters 16 --save ck --exit-interval 8
	[ "$(cat ck/latest)" = global_step8 ]
	run -0 train --model "$model" --train-iters 16 --save ck --load auto
	assert_output --partial "step 9/16"
	diff straight.csv csv/run/Train_Samples_train_loss.csv
}

@test "top-2 MoE test model: the loss falls, a resume is bit-identical" {
	falls_and_resumes "$SHARE/models/gpt-test-moe-top2.json"
	# every expert is stored whole under its global name
	run -0 ds-ckpt-convert inspect ck
	assert_output --partial "model/transformer.h.1.mlp.experts.3.c_fc.weight"
	assert_output --partial "model/transformer.h.0.mlp.gate.weight"
}

# the JSON header of a safetensors file
st_header() { local n; n=$(od -An -t u8 -N 8 "$1" | tr -d ' '); tail -c +9 "$1" | head -c "$n"; }

@test "ds-ckpt-convert: the top-2 model exports under Mixtral's names; PR-MoE says why it cannot" {
	run -0 train --model "$SHARE/models/gpt-test-moe-top2.json" --train-iters 2 --save ck
	run -0 ds-ckpt-convert ck --to safetensors -o hf
	jq -e '.architectures == ["MixtralForCausalLM"] and .num_local_experts == 4 and .num_experts_per_tok == 2
	       and .intermediate_size == 96 and .num_key_value_heads == 4' hf/config.json >/dev/null ||
		fail "config.json: $(cat hf/config.json)"
	st_header hf/model.safetensors >h.json
	jq -e '."model.layers.1.block_sparse_moe.experts.3.w1.weight".shape == [96, 64]
	       and ."model.layers.1.block_sparse_moe.experts.3.w3.weight".shape == [96, 64]
	       and ."model.layers.1.block_sparse_moe.experts.3.w2.weight".shape == [64, 96]
	       and ."model.layers.0.block_sparse_moe.gate.weight".shape == [4, 64]
	       and ."model.layers.0.self_attn.k_proj.weight".shape == [64, 64]
	       and ."model.embed_tokens.weight".shape == [256, 64]' h.json >/dev/null || fail "header: $(cat h.json)"
	# 2 layers x (4 experts x 3 + gate + q, k, v, o + 2 norms) + embeddings, norm, head
	[ "$(jq '[keys[] | select(. != "__metadata__")] | length' h.json)" -eq $((2 * (4 * 3 + 1 + 4 + 2) + 3)) ]
	run -0 train --model "$SHARE/models/gpt-test-prmoe.json" --train-iters 1 --save ck2
	run -2 --separate-stderr ds-ckpt-convert ck2 --to safetensors -o hf2
	[[ "$stderr" == *"not Mixtral's architecture"* ]] || fail "$stderr"
	[ ! -e hf2 ]
}

@test "PR-MoE test model (residual MLP, pyramid of 2 and 4 experts): the loss falls, a resume is bit-identical" {
	falls_and_resumes "$SHARE/models/gpt-test-prmoe.json"
}

@test "--check: parameters per rank (expert and non-expert) and the all-to-all bytes" {
	sed 's/"expert_interval": 1,/"expert_interval": 1, "ep_size": 2,/' "$SHARE/models/gpt-test-moe-top2.json" >ep2.json
	run -0 ds-train --check --model ep2.json --world-size 4
	# per rank: 2 of the 4 experts of each of the 2 layers; the whole model twice that
	assert_output --regexp '# MoE: 2 layers with experts, top-2, ep_size 2: parameters per rank [0-9]+ non-expert \+ [0-9]+ expert \(the whole model: [0-9]+'
	line=$(echo "$output" | grep '^# MoE: 2 layers')
	# after "per rank": non-expert, expert, the whole model's, its experts'
	read -r ne ex whole exw <<<"$(echo "${line#*per rank }" | grep -oE '[0-9]+' | head -n 4 | tr '\n' ' ')"
	# an expert (no biases, as Mixtral's): c_fc [192, 64] + c_proj [64, 96]
	[ "$ex" -eq $((2 * 2 * (192 * 64 + 64 * 96))) ] || fail "expert params per rank $ex"
	[ "$exw" -eq $((2 * ex)) ] && [ "$whole" -eq $((ne + exw)) ] || fail "whole model $whole, experts $exw"
	# capacity ceil(256 tokens / 4 experts x 2) = 128 slots: an (4, 128, 64) fp32 buffer
	# 4 times per layer, 2 layers, micro batch 8, accumulation 1: 1 MiB; half leaves the rank
	assert_output --partial "# MoE all-to-all per step and rank: 1.0 MiB in all_to_all_single messages"
	assert_output --partial "512.0 KiB of it sent to other ranks"
	run -0 ds-train --check --json --model ep2.json --world-size 4
	echo "$output" | jq -e '.memory.moe.expert_params_per_rank > 0 and .memory.moe.ep_size == 2' >/dev/null ||
		fail "no moe object in --check --json"
}

@test "ds-profile counts the routed MACs: k tokens' worth of experts, not all experts" {
	run -0 ds-profile --model "$SHARE/models/gpt-test-moe-top2.json" --batch-size 2 --seq-length 32 --json
	# per layer: 64 tokens x 2 choices through c_fc (64 -> 192) and c_proj (96 -> 64)
	want=$((2 * 64 * 2 * (64 * 192 + 96 * 64)))
	got=$(echo "$output" | jq '[.. | objects | select(.class? == "Experts") | .macs] | add')
	[ "$got" -eq "$want" ] || fail "Experts MACs $got, want $want (routed, top-2)"
}

@test "MoE: bad moe sections exit 2 naming the key; ZeRO 3 and an ep_size the world cannot hold are refused" {
	printf '{"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 32, "vocab_size": 256, "moe": {"num_experts": 6, "ep_size": 4, "expert_interval": 1}}' >bad.json
	run -2 --separate-stderr ds-train --model bad.json --train-iters 1
	[[ "$stderr" == *"moe.ep_size"* ]] || fail "$stderr"
	sed 's/"k": 2,/"k": 2, "capacity_factr": 1,/' "$SHARE/models/gpt-test-moe-top2.json" >typo.json
	run -2 --separate-stderr ds-train --model typo.json --train-iters 1
	[[ "$stderr" == *"did you mean 'moe.capacity_factor'"* ]] || fail "$stderr"
	sed 's/}$/, "zero_optimization": {"stage": 3}}/' cfg.json >z3.json
	run -2 --separate-stderr ds-train --deepspeed_config z3.json --model "$SHARE/models/gpt-test-moe-top2.json" --train-iters 1
	[[ "$stderr" == *"not supported with ZeRO stage 3"* ]] || fail "$stderr"
	sed 's/"expert_interval": 1,/"expert_interval": 1, "ep_size": 2,/' "$SHARE/models/gpt-test-moe-top2.json" >ep2.json
	run -2 --separate-stderr ds-train --model ep2.json --train-iters 1
	[[ "$stderr" == *"moe.ep_size 2 does not divide the world size 1"* ]] || fail "$stderr"
}

@test "GPT-NeoX's DeepSpeed-MoE keys become the model's moe section, with NeoX's defaults" {
	require_feature libyaml
	cat >moe.yml <<'YML'
{
  "num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 32,
  "max_position_embeddings": 32, "padded_vocab_size": 256,
  "moe_type": "deepspeed", "moe_num_experts": 4, "moe_top_k": 2, "moe_expert_parallel_size": 2,
  "moe_train_capacity_factor": 1.5, "moe_min_capacity": 2, "moe_loss_coeff": 0.01,
  "train_micro_batch_size_per_gpu": 4, "train_iters": 2,
  "optimizer": {"type": "Adam", "params": {"lr": 0.001}}
}
YML
	run -0 ds-train --check --conf moe.yml --world-size 2
	# NeoX: layers 0, 2 (0-based multiples of expert_interval 2), residual on, dropping off
	assert_output --regexp 'moe\.layers +\[0, 2\]'
	assert_output --regexp 'moe\.k +2 '
	assert_output --regexp 'moe\.ep_size +2 '
	assert_output --regexp 'moe\.use_residual +true '
	assert_output --regexp 'moe\.drop_tokens +false '
	assert_output --regexp 'moe\.capacity_factor +1\.5 '
	assert_output --regexp 'moe\.min_capacity +2 '
	assert_output --regexp 'moe\.loss_coeff +0\.01 '
	sed 's/"deepspeed"/"megablocks"/' moe.yml >mb.yml
	run -2 --separate-stderr ds-train --check --conf mb.yml
	[[ "$stderr" == *"moe_type"* ]] || fail "$stderr"
}
