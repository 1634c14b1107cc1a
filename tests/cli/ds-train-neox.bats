#!/usr/bin/env bats
# ds-train --conf: GPT-NeoX YAML configs read as NeoX's launcher reads them
# (files in order, comments, True/False, trailing commas, '-' = '_'),
# mapped onto the DeepSpeed config, the model and the run flags.  The
# shrunk 19M.yml- and 125M.yml-style files under tests/data/neox train to
# the same losses as their hand-written JSON pairs; the learning rates are
# NeoX's AnnealingLR computed by hand.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

setup() {
	ds-train --version | grep -q libyaml || skip "built without libyaml"
	cp "$TDATA"/neox/* "$BATS_TEST_TMPDIR"/
	cd "$BATS_TEST_TMPDIR" || exit 1
}

# the loss and lr series a run wrote (CSV, full precision)
series() { cat "csv/$1/Train_Samples_train_loss.csv" "csv/$1/Train_Samples_lr.csv"; }

@test "--check on a NeoX config prints what each parameter became, the DeepSpeed config, the model and the run flags" {
	run -0 --separate-stderr ds-train --check --conf 19M-tiny.yml
	assert_line "# GPT-NeoX config 19M-tiny.yml: what became of its parameters"
	assert_line "# neox: rope_fusion: no effect: a kernel-fusion switch: dstk computes the same math unfused"
	# NeoX's unfused GELU is the exact erf form: dstk's gelu_exact, not its tanh gelu
	assert_line "# neox: bias_gelu_fusion: applied: false: model activation \"gelu_exact\": NeoX's unfused F.gelu, the exact erf form"
	assert_line --regexp '^activation +"gelu_exact"  \(file\)$'
	assert_line "# neox: lr schedule: applied: NeoX AnnealingLR, cosine decay over 8 iterations, 2 of them warmup (warmup 0.25 x 8)"
	# every parameter has its line: the model's, DeepSpeed's and the run flags too
	assert_line "# neox: num_layers: applied: model config key num_layers"
	assert_line "# neox: zero_optimization: applied: DeepSpeed config key zero_optimization"
	assert_line "# neox: checkpoint_factor: applied: as --save-interval 1000 (unless the command line gives it)"
	assert_line "# neox: model_parallel_size: applied: 1, as --tensor-model-parallel-size 1"
	# (the file's parameters are the keys indented by two spaces; one more line is the schedule's)
	n=$(grep -c '^  "' 19M-tiny.yml)
	[ "$(grep -c '^# neox: ' <<<"$output")" -eq $((n + 1)) ] || fail "expected a line per parameter ($n)"
	assert_line --regexp '^optimizer\.params\.weight_decay +0\.1  \(file\)$'
	assert_line --regexp '^dstk\.lr_decay_style +"cosine"  \(file\)$'
	assert_line --regexp '^dstk\.min_lr +0\.0001  \(file\)$'
	assert_line --regexp '^activation_checkpointing\.number_checkpoints +2  \(file\)$'
	assert_line --regexp '^init_method +"small_init"  \(file\)$'
	assert_line --regexp '^output_layer_init_method +"wang_init"  \(file\)$'
	assert_line --regexp '^padded_vocab_size +256  \(inferred\)$'
	assert_line --partial "# run flags: --train-iters 8 --seed 1234 --save-interval 1000 --eval-interval 100000 --eval-iters 10 --log-interval 1"
	# --conf replaces the two files
	run -2 --separate-stderr ds-train --check --conf 19M-tiny.yml --model 19M-tiny.model.json
	[[ "$stderr" == *"--conf replaces --deepspeed_config and --model"* ]] || fail "$stderr"
}

@test "19M.yml-style NeoX config: the same losses as the JSON pair, and NeoX's cosine AnnealingLR by hand" {
	run -0 --separate-stderr ds-train --conf 19M-tiny.yml --peak-gflops 1
	# start 1e-3, min 1e-4, warmup_iter 0.25 x 8 = 2, end 8; step i runs at num_iters i - 1:
	# 1e-3 x max(1, n) / 2 while n <= 2, then 1e-4 + 4.5e-4 (cos(pi (n - 2) / 6) + 1)
	lrs=$(grep -o 'lr [0-9.e+-]*' <<<"$output" | awk '{ printf "%s ", $2 }')
	[ "$lrs" = "5.000e-04 5.000e-04 1.000e-03 9.397e-04 7.750e-04 5.500e-04 3.250e-04 1.603e-04 " ] || fail "lrs: $lrs"
	run -0 --separate-stderr ds-train --deepspeed_config 19M-tiny.ds.json --model 19M-tiny.model.json \
		--train-iters 8 --peak-gflops 1
	diff <(series neox) <(series json) || fail "the NeoX config and its JSON pair differ"
	[ "$(wc -l <csv/neox/Train_Samples_train_loss.csv)" -eq 9 ] || fail "expected 8 steps"
}

@test "125M.yml-style NeoX config in two files, vocab from a vocab file: the same losses as the JSON pair" {
	run -0 --separate-stderr ds-train --check --conf 125M-tiny.model.yml 125M-tiny.train.yml
	# 300 tokens padded as NeoX pads them: up to a multiple of 128 x model_parallel_size 1
	assert_line --regexp '^vocab_size +300  \(file\)$'
	assert_line --regexp '^padded_vocab_size +384  \(inferred\)$'
	assert_line --regexp '^seq_length +32  \(file\)$'   # given as seq-length
	assert_line --regexp '^fp16\.enabled +true  \(file\)$'
	assert_line --regexp '^dstk\.lr_warmup_iters +0\.06  \(file\)$'
	assert_line --partial "--train-iters 6 --seed 1234 --save-interval 3 "
	assert_line --partial "--keep-last-n-checkpoints 4"
	run -0 --separate-stderr ds-train --conf 125M-tiny.model.yml 125M-tiny.train.yml --save ck --peak-gflops 1
	# NeoX's warmup of 0.06 iterations: step 1 runs at 6e-4 x max(1, 0) / 0.06 = 1e-2
	[[ "$output" == *"step 1/6 "*"lr 1.000e-02"* ]] || fail "$output"
	[ -d ck/global_step3 ] && [ -d ck/global_step6 ] || fail "checkpoint_factor 3: $(ls ck)"
	run -0 --separate-stderr ds-train --deepspeed_config 125M-tiny.ds.json --model 125M-tiny.model.json \
		--train-iters 6 --peak-gflops 1
	diff <(series neox) <(series json) || fail "the NeoX config and its JSON pair differ"
	# the command line wins over the file: keep only the newest checkpoint
	rm -rf ck csv
	run -0 --separate-stderr ds-train --conf 125M-tiny.model.yml 125M-tiny.train.yml --save ck \
		--keep-last-n-checkpoints 1 --peak-gflops 1
	[ "$(find ck -maxdepth 1 -name 'global_step*' | wc -l)" -eq 1 ] && [ -d ck/global_step6 ] ||
		fail "expected only global_step6: $(ls ck)"
	[[ "$stderr" == *"removed ck/global_step3 (keep_last_n_checkpoints 1)"* ]] || fail "$stderr"
}

@test "vocab_file: an HF tokenizer.json counts its vocabulary and added tokens, padded as NeoX pads" {
	# ids 0..299 in model.vocab plus an added token 300: 301 tokens, padded to 384
	python3 -c 'import json; json.dump({"model": {"type": "BPE", "vocab": {"t%d" % i: i for i in range(300)}}, "added_tokens": [{"id": 300, "content": "<|endoftext|>"}]}, open("tokenizer.json", "w"))' ||
		skip "python3 not installed"
	sed 's/"vocab-300.json"/"tokenizer.json"/' 125M-tiny.model.yml >hf.yml
	run -0 --separate-stderr ds-train --check --conf hf.yml 125M-tiny.train.yml
	assert_line --regexp '^vocab_size +301  \(file\)$'
	assert_line --regexp '^padded_vocab_size +384  \(inferred\)$'
	assert_line --partial "# neox: vocab_file: applied: 301 tokens"
}

@test "bad YAML is one line with file:line:column, exit 2" {
	printf 'num_layers: 2\nhidden_size: [64\nseq_length: 32\n' >bad.yml
	run -2 --separate-stderr ds-train --check --conf bad.yml
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$stderr"
	[[ "$stderr" =~ ^ds-train:\ bad\.yml:[0-9]+:[0-9]+:\  ]] || fail "$stderr"
	printf 'num_layers: 2\nnum_layers: 3\n' >dup.yml
	run -2 --separate-stderr ds-train --check --conf dup.yml
	[[ "$stderr" == "ds-train: dup.yml:2:1: duplicate key 'num_layers'" ]] || fail "$stderr"
	run -2 --separate-stderr ds-train --check --conf no-such.yml
	[[ "$stderr" == *"no-such.yml: No such file or directory"* ]] || fail "$stderr"
}

@test "model_parallel_size, pipe_parallel_size and pipe_partition_method: ds-train's layout flags, NeoX's padding" {
	# NeoX pads the vocabulary to a multiple of make_vocab_size_divisible_by x
	# model_parallel_size (tokenizer.py); pipe_parallel_size 0 is one stage
	sed 's/"model_parallel_size": 1/"model_parallel_size": 2/; s/"pipe_parallel_size": 1/"pipe_parallel_size": 2/' \
		19M-tiny.yml >mp.yml
	run -0 --separate-stderr ds-train --check --conf mp.yml
	assert_line "# neox: model_parallel_size: applied: 2, as --tensor-model-parallel-size 2"
	assert_line "# neox: pipe_parallel_size: applied: 2, as --pipeline-model-parallel-size 2"
	assert_line --regexp '^pipeline\.partition +"type:transformer\|mlp"  \(file\)$'
	assert_line --partial "world size 4 = tensor 2 x pipeline 2 x data 1"
	# 301 tokens of vocab_file padded to a multiple of 128 x 2, not 128
	sed 's/"model_parallel_size": 1/"model_parallel_size": 2/' 125M-tiny.model.yml >mp125.yml
	run -0 --separate-stderr ds-train --check --conf mp125.yml 125M-tiny.train.yml
	assert_line --regexp '^padded_vocab_size +512  \(inferred\)$'
	printf '{"pipe_partition_method": "uniform"}\n' >pm.yml
	run -0 --separate-stderr ds-train --check --conf mp.yml pm.yml
	assert_line --regexp '^pipeline\.partition +"uniform"  \(file\)$'
	assert_line "# pipeline: 2 stages, partition method uniform; per rank of each stage:"
}

@test "refused, unknown and twice-given parameters: one line each, all in one run; off or default is accepted" {
	printf '{"rpe": true, "num-layers": 3, "keep_last_n_checkpoint": 2, "fp16_lm_cross_entropy": true}\n' >extra.yml
	run -2 --separate-stderr ds-train --check --conf 19M-tiny.yml extra.yml
	[[ "$stderr" == *"extra.yml: parameter 'rpe': not supported by dstk: relative position embeddings are not implemented"* ]] || fail "$stderr"
	[[ "$stderr" == *"extra.yml: parameter 'num_layers': also given in 19M-tiny.yml (NeoX refuses a key in two files)"* ]] || fail "$stderr"
	[[ "$stderr" == *"extra.yml: unknown GPT-NeoX parameter 'keep_last_n_checkpoint' (did you mean 'keep_last_n_checkpoints'?)"* ]] || fail "$stderr"
	[[ "$stderr" == *"extra.yml: parameter 'fp16_lm_cross_entropy': not supported by dstk: the loss is always computed in fp32"* ]] || fail "$stderr"
	[[ "${stderr_lines[-1]}" == "ds-train: 19M-tiny.yml+extra.yml: 4 errors (above)" ]] || fail "$stderr"
	# a negative model parallelism is refused
	sed 's/"model_parallel_size": 1/"model_parallel_size": 0/' 19M-tiny.yml >mp0.yml
	run -2 --separate-stderr ds-train --check --conf mp0.yml
	[[ "$stderr" == "ds-train: mp0.yml: parameter 'model_parallel_size': expected an integer >= 1"* ]] || fail "$stderr"
	# switched off, or at NeoX's default, a refused parameter is accepted and listed
	printf '{"rpe": false, "rpe_num_buckets": 32, "sparsity": "none", "eod_mask_loss": False}\n' >off.yml
	run -0 --separate-stderr ds-train --check --conf 19M-tiny.yml off.yml
	assert_line "# neox: rpe: accepted: off or at its default (relative position embeddings are not implemented; use pos_emb)"
	assert_line --partial "# neox: rpe_num_buckets: accepted: off or at its default"
	assert_line --partial "# neox: eod_mask_loss: accepted: off or at its default"
}

@test "--check --json carries what became of each NeoX parameter and the run flags" {
	command -v jq >/dev/null || skip "jq not installed"
	run -0 --separate-stderr ds-train --check --json --conf 19M-tiny.yml
	# the same lines as the text output, split into name, status and detail
	run -0 jq -r '.neox.parameters[] | "\(.name)|\(.status)|\(.detail)"' <<<"$output"
	assert_line "rope_fusion|no effect|a kernel-fusion switch: dstk computes the same math unfused"
	assert_line "init_method|applied|model config key init_method"
	assert_line "train_iters|applied|as --train-iters 8 (unless the command line gives it)"
	assert_line "lr schedule|applied|NeoX AnnealingLR, cosine decay over 8 iterations, 2 of them warmup (warmup 0.25 x 8)"
	run -0 --separate-stderr ds-train --check --json --conf 19M-tiny.yml
	local text
	text=$(ds-train --check --conf 19M-tiny.yml 2>/dev/null | sed -n 's/^# neox: //p')
	[ "$(jq -r '.neox.parameters[] | "\(.name): \(.status): \(.detail)"' <<<"$output")" = "$text" ] ||
		fail "JSON and text lines differ"
	[ "$(jq -r '.neox.files, .run_flags.train_iters, .run_flags.eval_interval' <<<"$output" | tr '\n' ' ')" = \
		"19M-tiny.yml 8 100000 " ] || fail "$(jq -c '.neox.files, .run_flags' <<<"$output")"
	# a JSON config has run flags but no neox object
	run -0 --separate-stderr ds-train --check --json --deepspeed_config 19M-tiny.ds.json --model 19M-tiny.model.json
	[ "$(jq -r 'has("neox"), .run_flags.seed' <<<"$output" | tr '\n' ' ')" = "false 1234 " ] || fail "$output"
}

# stderr without the warnings 19M-tiny.yml always gives (partition_activations)
errors() { grep -v '^warning: ' <<<"$stderr"; }

# two text datasets told apart by their bytes: letters and digits
blend_data() {
	for _ in $(seq 120); do printf '%s' "abcdefghijklmnopqrstuvwxyz"; done | head -c 3000 >a.txt
	for _ in $(seq 300); do printf '%s' "0123456789"; done >b.txt
	cp a.txt v.txt
}

@test "NeoX weighted train/valid/test paths: blended in the weights' proportions, evaluated, tested" {
	blend_data
	cat >blend.yml <<-EOF
	{
	  "train-data-paths": ["a.txt", "b.txt"],
	  "train-data-weights": [1., 3.],
	  "valid-data-paths": ["v.txt", "b.txt"],
	  "valid-data-weights": [0.5, 0.5],
	  "test-data-paths": ["b.txt"],
	}
	EOF
	run -0 --separate-stderr ds-train --check --conf 19M-tiny.yml blend.yml
	assert_line '# neox: train_data_paths: applied: a blend of 2 datasets, as --data "1 a.txt 3 b.txt"'
	assert_line '# neox: valid_data_weights: applied: the weights of the valid_data_paths blend'
	assert_line --partial ' --data "1 a.txt 3 b.txt"'
	assert_line '# data: --valid-data "0.5 v.txt 0.5 b.txt" --test-data b.txt'
	run -0 --separate-stderr ds-train --conf 19M-tiny.yml blend.yml --eval-interval 4 --eval-iters 2 --peak-gflops 1
	# 8 steps of 4: NeoX's counts ceil(32 x 1/4 x 1.005) = 9 and ceil(32 x 3/4 x 1.005) = 25;
	# the greedy order gives a.txt every fourth sample from the second on: 8 and 24 of 32
	[[ "$stderr" == *"data blend (train, 34 samples before it repeats): a.txt weight 0.25, 9 samples of 93 windows; b.txt weight 0.75, 25 samples"* ]] || fail "$stderr"
	[[ "$stderr" == *"data blend: 32 train samples drawn: a.txt 8 (0.2500, weight 0.2500); b.txt 24 (0.7500, weight 0.7500)"* ]] || fail "$stderr"
	# valid: (8 / 4 + 1) x 2 x 4 = 24 samples, 13 of each
	[[ "$stderr" == *"data blend (valid, 26 samples before it repeats): v.txt weight 0.5, 13 samples of 93 windows; b.txt weight 0.5, 13"* ]] || fail "$stderr"
	assert_line --regexp '^eval step 4 \| loss [0-9.]+ \| ppl '
	assert_line --regexp '^eval step 8 \| loss '
	assert_line --regexp '^test step 8 \| loss [0-9.]+ \| ppl [0-9.]+$'
	local blended_eval
	blended_eval=$(grep '^eval step 8' <<<"$output")
	# the weight all on the first dataset draws exactly what that dataset alone gives
	# (same losses, same eval), so the blend draws its samples from the files it names
	sed -e 's/\[1\., 3\.\]/[1, 0]/' -e 's/\[0\.5, 0\.5\]/[1, 0]/' blend.yml >first.yml
	rm -rf csv  # (the CSV monitor appends)
	run -0 --separate-stderr ds-train --conf 19M-tiny.yml first.yml --eval-interval 4 --eval-iters 2 --peak-gflops 1
	[[ "$stderr" == *"a.txt 32 (1.0000, weight 1.0000); b.txt 0 (0.0000, weight 0.0000)"* ]] || fail "$stderr"
	local first_eval first_test
	first_eval=$(grep '^eval step 8' <<<"$output")
	first_test=$(grep '^test step 8' <<<"$output")
	mv csv/neox csv/first
	run -0 --separate-stderr ds-train --conf 19M-tiny.yml --data a.txt --valid-data v.txt --test-data b.txt \
		--eval-interval 4 --eval-iters 2 --peak-gflops 1
	diff csv/first/Train_Samples_train_loss.csv csv/neox/Train_Samples_train_loss.csv || fail "blend [1, 0] != a.txt alone"
	assert_line "$first_eval"
	assert_line "$first_test"
	[ "$blended_eval" != "$first_eval" ] || fail "the valid blend evaluated only v.txt: $blended_eval"
}

@test "--data in Megatron's blend form; bad weights, paths and files: one line, exit 2" {
	blend_data
	run -0 --separate-stderr ds-train --conf 19M-tiny.yml --data "0.5 a.txt 0.5 b.txt" --split 9,1,0 \
		--train-iters 4 --peak-gflops 1
	[[ "$stderr" == *"data blend: 16 train samples drawn: a.txt 8 (0.5000, weight 0.5000); b.txt 8 (0.5000"* ]] || fail "$stderr"
	[[ "$stderr" == *"data blend (valid, "* ]] || fail "the split's valid parts are a blend: $stderr"
	run -2 --separate-stderr ds-train --conf 19M-tiny.yml --data "0.5 a.txt 0.5" --train-iters 1 --peak-gflops 1
	[ "$(errors | wc -l)" -eq 1 ] && [[ "$stderr" == *'data blend "0.5 a.txt 0.5": an odd number of words'* ]] || fail "$stderr"
	run -2 --separate-stderr ds-train --conf 19M-tiny.yml --data "1 a.txt 1 nothere.txt" --train-iters 1 --peak-gflops 1
	[ "$(errors | wc -l)" -eq 1 ] && [[ "$stderr" == *"nothere.txt: no such file"* ]] || fail "$stderr"
	printf '{"train_data_paths": ["a.txt", "b.txt"], "train_data_weights": [1, 2, 3]}\n' >n.yml
	run -2 --separate-stderr ds-train --check --conf 19M-tiny.yml n.yml
	[ "$(errors | wc -l)" -eq 1 ] || fail "$stderr"
	[[ "$stderr" == *"n.yml: parameter 'train_data_weights': 3 weights for the 2 train_data_paths; give one weight per path" ]] || fail "$stderr"
	printf '{"valid_data_paths": ["a.txt", "b.txt"], "valid_data_weights": [1, -2]}\n' >neg.yml
	run -2 --separate-stderr ds-train --check --conf 19M-tiny.yml neg.yml
	[ "$(errors | wc -l)" -eq 1 ] && [[ "$stderr" == *"neg.yml: parameter 'valid_data_weights': weight 2 is not a non-negative number" ]] || fail "$stderr"
	printf '{"test_data_paths": ["a.txt", "no such.txt"]}\n' >sp.yml
	run -2 --separate-stderr ds-train --check --conf 19M-tiny.yml sp.yml
	[[ "$stderr" == *"sp.yml: parameter 'test_data_paths': path 2: a path in a blend cannot hold whitespace" ]] || fail "$stderr"
	printf '{"train_data_paths": ["a.txt", "gone.txt"]}\n' >gone.yml
	run -2 --separate-stderr ds-train --conf 19M-tiny.yml gone.yml --peak-gflops 1
	[ "$(errors | wc -l)" -eq 1 ] && [[ "$stderr" == *"gone.txt: no such file"* ]] || fail "$stderr"
	# weight_by_num_documents needs a document index (Megatron .idx)
	printf '{"train_data_paths": ["a.txt", "b.txt"], "weight_by_num_documents": true, "weighted_sampler_alpha": 0.3}\n' >docs.yml
	run -0 --separate-stderr ds-train --check --conf 19M-tiny.yml docs.yml
	assert_line "# neox: weighted_sampler_alpha: applied: the exponent of the document-count weights"
	assert_line "# data: blend weights from document counts (weight_by_num_documents), weighted_sampler_alpha 0.3"
	run -2 --separate-stderr ds-train --conf 19M-tiny.yml docs.yml --peak-gflops 1
	[[ "$stderr" == *"a.txt: a text dataset has no document index to weigh a blend by (weight_by_num_documents)"* ]] || fail "$stderr"
}

@test "NeoX's MLP width: LLaMA-7B's 11008 from intermediate_size 32768, swiglu and mlp_multiple_of 256; bias switches" {
	# LLaMA-7B's published FFN width is 11008: int(32768 x 2/3) = 21845, up to a
	# multiple of 512 = 22016, halved (NeoX's ParallelMLP)
	printf '{"activation": "swiglu", "intermediate_size": 32768, "mlp_multiple_of": 256, "hidden_size": 4096, "num_layers": 1, "num_attention_heads": 32, "seq_length": 8, "max_position_embeddings": 8, "padded_vocab_size": 256, "train_micro_batch_size_per_gpu": 1}\n' >llama.yml
	run -0 --separate-stderr ds-train --check --conf llama.yml --mem-per-rank 64G
	assert_line --regexp '^intermediate_size +11008  \(file\)$'
	assert_line --regexp '^activation +"swiglu"  \(file\)$'
	assert_line --partial "# neox: mlp: applied: model intermediate_size 11008 (NeoX's width: intermediate_size 32768, x 2/3"
	# no intermediate_size: 4 x 64 = 256 -> int(512 / 3) = 170 -> 170 (multiple 2), halved: 85
	sed -e 's/"intermediate_size": 32768, "mlp_multiple_of": 256, "hidden_size": 4096/"hidden_size": 64/' \
		-e 's/"num_attention_heads": 32/"num_attention_heads": 4/' llama.yml >small.yml
	run -0 --separate-stderr ds-train --check --conf small.yml
	assert_line --regexp '^intermediate_size +85  \(file\)$'
	# widths NeoX cannot match (Mistral's 14336 without mlp_multiple_of: 9558 vs 4778)
	sed 's/"mlp_multiple_of": 256, //; s/32768/14336/' llama.yml >odd.yml
	run -2 --separate-stderr ds-train --check --conf odd.yml
	[[ "$stderr" == *"the MLP widths NeoX computes disagree (first linear 9558, second 4778, half of the first expected)"* ]] || fail "$stderr"
	# use_bias_in_*: false switches biasless layers on, which dstk lacks; true is the default
	printf '{"use_bias_in_norms": false, "use_bias_in_mlp": true}\n' >bias.yml
	run -2 --separate-stderr ds-train --check --conf llama.yml bias.yml
	[[ "$stderr" == *"parameter 'use_bias_in_norms': not supported by dstk: norms without bias are not implemented" ]] || fail "$stderr"
	# an activation dstk lacks
	sed 's/"swiglu"/"reglu"/' llama.yml >reglu.yml
	run -2 --separate-stderr ds-train --check --conf reglu.yml
	[[ "$stderr" == *"parameter 'activation': \"reglu\": only gelu, geglu and swiglu are implemented" ]] || fail "$stderr"
}

# gelu_of FILE: the model activation --check --json gives for a NeoX config
gelu_of() {
	ds-train --check --json --conf "$1" 2>/dev/null | jq -r '.model.keys.activation.value'
}

@test "NeoX's GELU switches give the GELU NeoX's code computes: erf unfused, tanh fused or openai_gelu" {
	command -v jq >/dev/null || skip "jq not installed"
	local m='"num_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 8, "max_position_embeddings": 8, "padded_vocab_size": 256, "train_micro_batch_size_per_gpu": 1'
	g() { printf '{%s, %s}\n' "$m" "$1" >g.yml; gelu_of g.yml; }
	# activation gelu: F.gelu (erf) unless bias_gelu_fusion's bias_gelu_impl (tanh);
	# NeoX's default is gelu unfused, so a file naming none of them is erf too
	[ "$(g '"activation": "gelu", "bias_gelu_fusion": false')" = gelu_exact ] || fail "unfused"
	[ "$(g '"activation": "gelu", "bias_gelu_fusion": true')" = gelu ] || fail "fused"
	printf '{%s}\n' "$m" >none.yml
	[ "$(gelu_of none.yml)" = gelu_exact ] || fail "NeoX's default"
	run -0 --separate-stderr ds-train --check --conf none.yml
	assert_line "# neox: activation: applied: NeoX's default gelu: model activation \"gelu_exact\": NeoX's unfused F.gelu, the exact erf form"
	# onnx_safe's erf_gelu is the erf form; the old openai_gelu the tanh one
	[ "$(g '"onnx_safe": true')" = gelu_exact ] || fail "onnx_safe"
	[ "$(g '"openai_gelu": true')" = gelu ] || fail "openai_gelu"
	# the gated GELU: F.gelu on the gate whatever the fusion switch; the old
	# geglu switch took bias_gelu_fusion as the tanh form
	[ "$(g '"activation": "geglu", "bias_gelu_fusion": true')" = geglu_exact ] || fail "geglu"
	[ "$(g '"geglu": true')" = geglu_exact ] || fail "old geglu"
	[ "$(g '"geglu": true, "bias_gelu_fusion": true')" = geglu ] || fail "old geglu fused"
	# NeoX refuses onnx_safe with bias_gelu_fusion; the old geglu switch beside activation is ambiguous
	printf '{%s, "onnx_safe": true, "bias_gelu_fusion": true}\n' "$m" >bad.yml
	run -2 --separate-stderr ds-train --check --conf bad.yml
	[[ "$stderr" == *"bad.yml: parameter 'onnx_safe': with bias_gelu_fusion NeoX refuses it"* ]] || fail "$stderr"
	printf '{%s, "geglu": true, "activation": "swiglu"}\n' "$m" >both.yml
	run -2 --separate-stderr ds-train --check --conf both.yml
	[[ "$stderr" == *"both.yml: parameter 'geglu': NeoX's switch from before its activation parameter"* ]] || fail "$stderr"
}
