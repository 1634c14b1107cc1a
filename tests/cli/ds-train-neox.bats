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
	assert_line "# neox: bias_gelu_fusion: no effect: a kernel-fusion switch: dstk computes the same math unfused"
	assert_line "# neox: lr schedule: NeoX AnnealingLR, cosine decay over 8 iterations, 2 of them warmup (warmup 0.25 x 8)"
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
	assert_line --partial "# neox: vocab_file: 301 tokens"
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

@test "refused, unknown and twice-given parameters: one line each, all in one run; off or default is accepted" {
	printf '{"rpe": true, "num-layers": 3, "keep_last_n_checkpoint": 2, "fp16_lm_cross_entropy": true}\n' >extra.yml
	run -2 --separate-stderr ds-train --check --conf 19M-tiny.yml extra.yml
	[[ "$stderr" == *"extra.yml: parameter 'rpe': not supported by dstk: relative position embeddings are not implemented"* ]] || fail "$stderr"
	[[ "$stderr" == *"extra.yml: parameter 'num_layers': also given in 19M-tiny.yml (NeoX refuses a key in two files)"* ]] || fail "$stderr"
	[[ "$stderr" == *"extra.yml: unknown GPT-NeoX parameter 'keep_last_n_checkpoint' (did you mean 'keep_last_n_checkpoints'?)"* ]] || fail "$stderr"
	[[ "$stderr" == *"extra.yml: parameter 'fp16_lm_cross_entropy': not supported by dstk: the loss is always computed in fp32"* ]] || fail "$stderr"
	[[ "${stderr_lines[-1]}" == "ds-train: 19M-tiny.yml+extra.yml: 4 errors (above)" ]] || fail "$stderr"
	# model parallelism: 1 until dstk has it
	sed 's/"model_parallel_size": 1/"model_parallel_size": 2/' 19M-tiny.yml >mp.yml
	run -2 --separate-stderr ds-train --check --conf mp.yml
	[[ "$stderr" == "ds-train: mp.yml: parameter 'model_parallel_size': more than one stage: dstk runs data parallel only"* ]] || fail "$stderr"
	# switched off, or at NeoX's default, a refused parameter is accepted and listed
	printf '{"rpe": false, "rpe_num_buckets": 32, "sparsity": "none", "eod_mask_loss": False}\n' >off.yml
	run -0 --separate-stderr ds-train --check --conf 19M-tiny.yml off.yml
	assert_line "# neox: rpe: accepted: off or at its default (relative position embeddings are not implemented; use pos_emb)"
	assert_line --partial "# neox: rpe_num_buckets: accepted: off or at its default"
	assert_line --partial "# neox: eod_mask_loss: accepted: off or at its default"
}
