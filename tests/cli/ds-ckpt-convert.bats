#!/usr/bin/env bats
# ds-ckpt-convert.bats - what a user types and sees (STYLE rule 21): help,
# bad flags, inspect/verify, every conversion of the committed checkpoints of
# tests/data/ckpt-small against the SHA-256 of the export that
# contrib/reference/export_check.py validated, the import of safetensors
# written by that script's own writer, llm.c round trips, and every bad
# input path (one line, exit 2, nothing left behind).
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

CS="$DS_SRCDIR/tests/data/ckpt-small"
helper_bin() { echo "$DS_BUILDDIR/tests/data/ckpt-small/ckpt-small"; }

setup() {
	[ -x "$(helper_bin)" ] || skip "tests/data/ckpt-small/ckpt-small not built (make check builds it)"
	W="$BATS_TEST_TMPDIR"
}

# sha256 of each tensor's bytes in a safetensors file, read with jq and dd
# only (independent of dstk's reader): "HASH  NAME DTYPE SHAPE", sorted by name
st_hashes() {
	local f=$1 n hdr
	n=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
	hdr=$(dd if="$f" bs=1 skip=8 count="$n" status=none)
	jq -r 'del(.__metadata__) | to_entries | sort_by(.key)[] |
		"\(.key) \(.value.data_offsets[0]) \(.value.data_offsets[1]) \(.value.dtype) \(.value.shape | map(tostring) | join("x") | if . == "" then "-" else . end)"' \
		<<<"$hdr" | while read -r name b e dt shape; do
		h=$(tail -c +$((8 + n + b + 1)) "$f" | head -c $((e - b)) | sha256sum | cut -d' ' -f1)
		echo "$h  $name $dt $shape"
	done
}

# sha256 of the raw bytes of every /model dataset of a state.h5, read with
# HDF5's own h5ls/h5dump (not dstk's reader): "HASH  /NAME"
h5_model_hashes() {
	local f=$1 d raw
	raw=$(mktemp -p "$W")
	h5ls -r "$f/model" | awk '$2 == "Dataset" { print $1 }' | sort | while read -r d; do
		h5dump -d "/model$d" -b LE -o "$raw" "$f" > /dev/null
		echo "$(sha256sum < "$raw" | cut -d' ' -f1)  $d"
	done
}

@test "--help exits 0 and shows usage" {
	run -0 ds-ckpt-convert --help
	assert_output --partial "Usage: ds-ckpt-convert"
	assert_output --partial "--to=FMT"
}

@test "a bad flag exits 2 with a hint" {
	run -2 --separate-stderr ds-ckpt-convert --bogus
	[[ "$stderr" == *"Try 'ds-ckpt-convert --help'"* ]]
}

@test "--version names the features" {
	run -0 ds-ckpt-convert --version
	assert_line --index 0 --partial "ds-ckpt-convert (dstk)"
	assert_line --index 1 --partial "features:"
}

@test "converting without --to or -o is a usage error" {
	run -2 --separate-stderr ds-ckpt-convert "$CS/gpt2" --to safetensors
	[[ "$stderr" == *"-o OUTPUT"* ]]
	run -2 ds-ckpt-convert "$CS/gpt2" --to pickle -o x
}

@test "inspect shows tag, step, world size, ZeRO stage, dtype, config and every tensor" {
	run -0 ds-ckpt-convert inspect "$CS/gpt2"
	assert_line "tag          global_step100"
	assert_line "step         100"
	assert_line "world size   2 (at save)"
	assert_line "zero stage   1 (at save)"
	assert_line "dtype        fp32"
	assert_output --partial '"train_batch_size": 8'
	assert_output --regexp 'model/transformer\.h\.1\.attn\.c_attn\.weight +\[48, 16\] +float32 +unchecked'
	assert_output --regexp 'optimizer/exp_avg_sq/lm_head|optimizer/exp_avg_sq/transformer\.ln_f\.bias'
	assert_line "# 84 tensors, 0 bad checksums"
}

@test "inspect --json parses and carries the same facts" {
	run -0 --separate-stderr ds-ckpt-convert inspect --json "$CS/neox"
	[ "$(jq -r .step <<<"$output")" = 40 ]
	[ "$(jq -r .world_size <<<"$output")" = 4 ]
	[ "$(jq -r .zero_stage <<<"$output")" = 2 ]
	[ "$(jq -r .model.pos_emb <<<"$output")" = rotary ]
	[ "$(jq -r '.tensors | length' <<<"$output")" = 28 ]
	[ "$(jq -r '.tensors[] | select(.name == "model/lm_head.weight") | .shape | join(",")' <<<"$output")" = 64,16 ]
}

@test "inspect reads safetensors and llm.c files too; verify needs a checkpoint" {
	run -0 --separate-stderr ds-ckpt-convert inspect --json "$CS/ref-neox"
	[ "$(jq -r .format <<<"$output")" = safetensors ]
	[ "$(jq -r .model.num_attention_heads <<<"$output")" = 4 ]
	[ "$(jq -r '.tensors[] | select(.name == "transformer.h.0.attn.c_attn.weight") | .shape | join(",")' <<<"$output")" = 48,16 ]
	ds-ckpt-convert -q "$CS/gpt2" --to llmc -o "$W/m.bin" > /dev/null
	run -0 ds-ckpt-convert inspect "$W/m.bin"
	assert_line "format       llm.c"
	run -2 --separate-stderr ds-ckpt-convert verify "$CS/ref-gpt2"
	[[ "$stderr" == *"carry no checksums"* ]]
}

@test "verify passes on the committed checkpoints" {
	run -0 ds-ckpt-convert verify "$CS/gpt2"
	assert_line "# 84 tensors, 0 bad checksums"
	refute_output --partial "BAD"
	run -0 --separate-stderr ds-ckpt-convert verify --json "$CS/neox/global_step40/state.h5"
	[ "$(jq -r .bad_checksums <<<"$output")" = 0 ]
}

@test "verify on a corrupted copy exits 1 naming the dataset" {
	cp -r "$CS/gpt2" "$W/c"
	"$(helper_bin)" corrupt "$W/c/global_step100/state.h5" /model/transformer.h.1.mlp.c_fc.weight
	run -1 --separate-stderr ds-ckpt-convert verify "$W/c"
	[[ "$stderr" == *"model/transformer.h.1.mlp.c_fc.weight"* ]]
	assert_output --regexp 'model/transformer\.h\.1\.mlp\.c_fc\.weight .* BAD'
	assert_line "# 84 tensors, 1 bad checksums"
	# converting it reads through the checksums too: exit 2 naming the tensor, no output
	run -2 --separate-stderr ds-ckpt-convert "$W/c" --to safetensors -o "$W/c-out"
	[ "${#stderr_lines[@]}" = 1 ]
	[[ "$stderr" == *"transformer.h.1.mlp.c_fc.weight"* ]]
	[ ! -e "$W/c-out" ]
}

@test "safetensors export: every tensor's bytes match the hashes validated by export_check.py" {
	for m in gpt2 neox; do
		run -0 ds-ckpt-convert -q "$CS/$m" --to safetensors -o "$W/$m"
		{ st_hashes "$W/$m/model.safetensors"
		  sha256sum < "$W/$m/config.json" | sed 's/ .*/  config.json/'; } > "$W/$m.sha256"
		diff -u "$CS/export-$m.sha256" "$W/$m.sha256"
	done
	# HF names, Conv1D transposes, unpadded vocabulary, tying
	grep -q '  transformer.h.0.attn.c_attn.weight F32 16x48$' "$W/gpt2.sha256"
	grep -q '  transformer.wte.weight F32 60x16$' "$W/gpt2.sha256"
	run -1 grep -q 'lm_head' "$W/gpt2.sha256"
	grep -q '  gpt_neox.layers.1.attention.query_key_value.weight F32 48x16$' "$W/neox.sha256"
	grep -q '  embed_out.weight F32 60x16$' "$W/neox.sha256"
}

@test "safetensors export: __metadata__ format pt and a GPT2Config / GPTNeoXConfig" {
	ds-ckpt-convert -q "$CS/gpt2" --to safetensors -o "$W/g" > /dev/null
	ds-ckpt-convert -q "$CS/neox" --to safetensors -o "$W/n" > /dev/null
	n=$(od -An -t u8 -N 8 "$W/g/model.safetensors" | tr -d ' ')
	[ $(( (8 + n) % 8 )) = 0 ]
	[ "$(dd if="$W/g/model.safetensors" bs=1 skip=8 count="$n" status=none | jq -r .__metadata__.format)" = pt ]
	jq -e '.model_type == "gpt2" and .architectures == ["GPT2LMHeadModel"] and .vocab_size == 60 and
		.n_positions == 16 and .n_embd == 16 and .n_layer == 2 and .n_head == 2 and .n_inner == 64 and
		.activation_function == "gelu_new" and .layer_norm_epsilon == 1e-5 and .tie_word_embeddings == true' \
		"$W/g/config.json"
	jq -e '.model_type == "gpt_neox" and .architectures == ["GPTNeoXForCausalLM"] and .rotary_pct == 0.5 and
		.use_parallel_residual == true and .tie_word_embeddings == false and .intermediate_size == 48' \
		"$W/n/config.json"
}

@test "safetensors --dtype bf16|fp16: 16-bit tensors, torch_dtype, the logits to 16-bit rounding" {
	for t in bf16 fp16; do
		run -0 --separate-stderr ds-ckpt-convert "$CS/neox" --to safetensors --dtype $t --json -o "$W/$t"
		[ "$(jq -r .bytes <<<"$output")" = $(( (7584 - 4 * 16 * 2) * 2 )) ]
		n=$(od -An -t u8 -N 8 "$W/$t/model.safetensors" | tr -d ' ')
		want=$([ "$t" = bf16 ] && echo BF16 || echo F16)
		dd if="$W/$t/model.safetensors" bs=1 skip=8 count="$n" status=none |
			jq -e --arg d "$want" '[del(.__metadata__)[] | .dtype] | all(. == $d)'
		jq -e --arg d "$([ "$t" = bf16 ] && echo bfloat16 || echo float16)" '.torch_dtype == $d' "$W/$t/config.json"
		run -0 ds-ckpt-convert "$W/$t" --to hdf5 -o "$W/back-$t"
		"$(helper_bin)" logits "$W/back-$t" "$CS/tokens.i32" "$W/$t.f32"
		run -0 "$(helper_bin)" compare "$W/$t.f32" "$CS/dstk-logits-neox.f32" 2e-2
		run -1 "$(helper_bin)" compare "$W/$t.f32" "$CS/dstk-logits-neox.f32" 1e-6
	done
	run -2 --separate-stderr ds-ckpt-convert "$CS/gpt2" --to llmc --dtype fp16 -o "$W/x.bin"
	[[ "$stderr" == *"version 5"* ]]
	run -2 --separate-stderr ds-ckpt-convert "$CS/gpt2" --to hdf5 --dtype bf16 -o "$W/x"
	[[ "$stderr" == *"--to bf16"* ]]
	run -2 ds-ckpt-convert "$CS/gpt2" --to safetensors --dtype int8 -o "$W/x"
}

@test "round trip HDF5 -> safetensors -> HDF5 is bitwise equal (padding rows and model JSON too)" {
	for m in gpt2 neox; do
		ds-ckpt-convert -q "$CS/$m" --to safetensors -o "$W/st-$m" > /dev/null
		run -0 ds-ckpt-convert "$W/st-$m" --to hdf5 -o "$W/back-$m"
		run -0 "$(helper_bin)" same "$CS/$m" "$W/back-$m"
		assert_output --partial "28 tensors compared, 0 differ"
		h5_model_hashes "$CS/$m"/global_step*/state.h5 > "$W/a.sha"
		h5_model_hashes "$W/back-$m"/global_step0/state.h5 > "$W/b.sha"
		[ "$(wc -l < "$W/a.sha")" = 28 ]
		diff "$W/a.sha" "$W/b.sha"
	done
	# the padding rows (never used, but part of the checkpoint) ride in __metadata__
	n=$(od -An -t u8 -N 8 "$W/st-gpt2/model.safetensors" | tr -d ' ')
	dd if="$W/st-gpt2/model.safetensors" bs=1 skip=8 count="$n" status=none |
		jq -e '.__metadata__["dstk_padding:transformer.wte.weight"] | length == 344'   # base64 of 4 x 16 floats
}

@test "--to fp32|fp16|bf16 writes weights-only checkpoints without optimizer state" {
	run -0 ds-ckpt-convert "$CS/gpt2" --to fp32 -o "$W/w32"
	run -0 "$(helper_bin)" same "$CS/gpt2" "$W/w32"
	diff <(h5_model_hashes "$CS/gpt2"/global_step100/state.h5) <(h5_model_hashes "$W/w32"/global_step100/state.h5)
	for t in fp16 bf16; do
		run -0 --separate-stderr ds-ckpt-convert "$CS/gpt2" --to $t --json -o "$W/w$t"
		[ "$(jq -r .bytes <<<"$output")" = $((7872 * 2)) ]
		run -0 --separate-stderr ds-ckpt-convert verify --json "$W/w$t"
		[ "$(jq -r .format <<<"$output")" = weights ]
		[ "$(jq -r .dtype <<<"$output")" = $t ]
		[ "$(jq -r '[.tensors[] | select(.name | startswith("model/"))] | length' <<<"$output")" = 28 ]
		[ "$(jq -r '.tensors | length' <<<"$output")" = 28 ]
	done
	jq -e '.tensors[0].dtype == "bfloat16"' <(ds-ckpt-convert inspect --json "$W/wbf16")
	# the 16-bit weights still give the model's logits, to 16-bit rounding
	for t in fp16 bf16; do
		run -0 ds-ckpt-convert "$W/w$t" --to hdf5 -o "$W/wide-$t"
		"$(helper_bin)" logits "$W/wide-$t" "$CS/tokens.i32" "$W/$t.f32"
		run -0 "$(helper_bin)" compare "$W/$t.f32" "$CS/dstk-logits-gpt2.f32" "$([ "$t" = fp16 ] && echo 2e-3 || echo 2e-2)"
		run -1 "$(helper_bin)" compare "$W/$t.f32" "$CS/dstk-logits-gpt2.f32" 1e-5
	done
	# a 16-bit weights file converts on (widened to fp32)
	run -0 ds-ckpt-convert "$W/wbf16" --to safetensors -o "$W/from-bf16"
}

@test "safetensors written by the reference script import with the reference's logits" {
	for m in gpt2 neox; do
		run -0 ds-ckpt-convert --from safetensors "$CS/ref-$m" --to hdf5 -o "$W/imp-$m"
		run -0 --separate-stderr ds-ckpt-convert inspect --json "$W/imp-$m"
		[ "$(jq -r .step <<<"$output")" = 0 ]
		"$(helper_bin)" logits "$W/imp-$m" "$CS/tokens.i32" "$W/$m.f32"
		run -0 "$(helper_bin)" compare "$W/$m.f32" "$CS/ref-$m/logits.f32" 1e-5
	done
}

@test "safetensors written by transformers' save_pretrained import with transformers' logits" {
	for m in hf-gpt2-untied hf-gpt2-untied-sharded hf-neox-seq; do
		run -0 ds-ckpt-convert "$CS/$m" --to hdf5 -o "$W/$m"
		"$(helper_bin)" logits "$W/$m" "$CS/tokens.i32" "$W/$m.f32"
		run -0 "$(helper_bin)" compare "$W/$m.f32" "$CS/$m/logits.f32" 1e-5
	done
	run -0 --separate-stderr ds-ckpt-convert inspect --json "$W/hf-gpt2-untied"
	[ "$(jq -r .model.no_weight_tying <<<"$output")" = true ]
	run -0 --separate-stderr ds-ckpt-convert inspect --json "$W/hf-neox-seq"
	[ "$(jq -r .model.gpt_j_residual <<<"$output")" = false ]
}

@test "sharded safetensors: an index naming a missing shard or the wrong shard -> exit 2" {
	cp -r "$CS/hf-gpt2-untied-sharded" "$W/s1"
	rm "$W/s1/model-00002-of-00003.safetensors"
	run -2 --separate-stderr ds-ckpt-convert "$W/s1" --to hdf5 -o "$W/s1-out"
	[[ "$stderr" == *"model-00002-of-00003.safetensors"* ]]
	cp -r "$CS/hf-gpt2-untied-sharded" "$W/s2"
	jq '.weight_map["lm_head.weight"] = "model-00001-of-00003.safetensors"' \
		"$CS/hf-gpt2-untied-sharded/model.safetensors.index.json" > "$W/s2/model.safetensors.index.json"
	grep -q '"lm_head.weight": "model-00003' "$CS/hf-gpt2-untied-sharded/model.safetensors.index.json"
	run -2 --separate-stderr ds-ckpt-convert "$W/s2" --to hdf5 -o "$W/s2-out"
	[[ "$stderr" == *"lm_head.weight"* ]]
	[ ! -e "$W/s2-out" ]
}

@test "llm.c: export has llm.c's size and round-trips byte for byte" {
	run -0 ds-ckpt-convert "$CS/gpt2" --to llmc -o "$W/m.bin"
	# 256 int32 header + 7872 floats (wte padded to Vp 64 rows, as dstk pads)
	[ "$(stat -c %s "$W/m.bin")" = $((1024 + 7872 * 4)) ]
	[ "$(od -An -t d4 -w32 -N 32 "$W/m.bin" | tr -s ' ' | sed 's/^ //')" = "20240326 3 16 60 2 2 16 64" ]
	run -0 ds-ckpt-convert "$W/m.bin" --to hdf5 -o "$W/from-llmc"
	# llm.c files carry no training window: the model JSON gets seq_length = maxT
	run -0 "$(helper_bin)" same "$CS/gpt2" "$W/from-llmc" zero-padding
	run -0 ds-ckpt-convert "$W/from-llmc" --to llmc -o "$W/m2.bin"
	cmp "$W/m.bin" "$W/m2.bin"
	run -0 ds-ckpt-convert "$W/m.bin" --to llmc --dtype bf16 -o "$W/m16.bin"
	[ "$(stat -c %s "$W/m16.bin")" = $((1024 + 7872 * 2)) ]
	[ "$(od -An -t d4 -j 4 -N 4 "$W/m16.bin" | tr -d ' ')" = 5 ]
}

@test "bad input: not a checkpoint, truncated files, missing config -> one line, exit 2" {
	echo "hello" > "$W/text"
	run -2 --separate-stderr ds-ckpt-convert inspect "$W/text"
	[ "${#stderr_lines[@]}" = 1 ]
	[[ "$stderr" == *"$W/text"* ]]
	mkdir "$W/empty"
	run -2 --separate-stderr ds-ckpt-convert inspect "$W/empty"
	[ "${#stderr_lines[@]}" = 1 ]
	cp -r "$CS/gpt2" "$W/t"
	truncate -s 60000 "$W/t/global_step100/state.h5"
	run -2 --separate-stderr ds-ckpt-convert "$W/t" --to safetensors -o "$W/t-out"
	[ "${#stderr_lines[@]}" = 1 ]
	[[ "$stderr" == *"state.h5"* ]]
	[ ! -e "$W/t-out" ]
	head -c 20000 "$CS/ref-gpt2/model.safetensors" > "$W/cut.safetensors"
	cp "$CS/ref-gpt2/config.json" "$W/config.json"
	run -2 --separate-stderr ds-ckpt-convert "$W/cut.safetensors" --to hdf5 -o "$W/cut-out"
	[[ "$stderr" == *"cut.safetensors"* ]]
	[ ! -e "$W/cut-out" ]
	cp "$CS/ref-gpt2/model.safetensors" "$W/noconf.safetensors"
	mkdir "$W/nc"
	mv "$W/noconf.safetensors" "$W/nc/"
	run -2 --separate-stderr ds-ckpt-convert "$W/nc/noconf.safetensors" --to hdf5 -o "$W/nc-out"
	[[ "$stderr" == *"config.json"* ]]
	# config.json that does not match the tensors
	mkdir "$W/mis"
	cp "$CS/ref-gpt2/model.safetensors" "$W/mis/"
	jq '.n_embd = 32' "$CS/ref-gpt2/config.json" > "$W/mis/config.json"
	run -2 --separate-stderr ds-ckpt-convert "$W/mis" --to hdf5 -o "$W/mis-out"
	[[ "$stderr" == *"shape"* ]]
}

@test "bad input: architectures a format cannot hold -> one line, exit 2, old output kept" {
	echo old > "$W/n.bin"
	run -2 --separate-stderr ds-ckpt-convert "$CS/neox" --to llmc -o "$W/n.bin"
	[[ "$stderr" == *"pos_emb"* ]]
	[ "$(cat "$W/n.bin")" = old ]
	run -0 find "$W" -maxdepth 1 -name '*tmp*'
	assert_output ""
	for arch in '"norm": "rmsnorm"' '"activation": "swiglu"' '"pos_emb": "sinusoidal"'; do
		echo "{\"num_layers\": 1, \"hidden_size\": 8, \"num_attention_heads\": 2, \"seq_length\": 8,
		       \"vocab_size\": 10, \"pos_emb\": \"rotary\", $arch}" | sed 's/"pos_emb": "rotary", "pos_emb"/"pos_emb"/' > "$W/m.json"
		rm -rf "$W/a"
		"$(helper_bin)" make-model "$W/a" "$W/m.json"
		run -2 --separate-stderr ds-ckpt-convert "$W/a" --to safetensors -o "$W/a-out"
		[ "${#stderr_lines[@]}" = 1 ]
		val=${arch##*: \"}
		val=${val%\"}
		[[ "$stderr" == *"${arch//\"/}"* || "$stderr" == *"$val"* ]]
		[ ! -e "$W/a-out" ]
	done
}

@test "an HDF5 output never replaces an existing checkpoint tag" {
	cp -r "$CS/gpt2" "$W/own"
	run -2 --separate-stderr ds-ckpt-convert "$W/own" --to fp32 -o "$W/own"
	[[ "$stderr" == *"global_step100 exists"* ]]
	run -0 ds-ckpt-convert inspect "$W/own"
	assert_line "format       checkpoint"
	assert_line "# 84 tensors, 0 bad checksums"
	# another save directory: its latest is not moved to the conversion
	run -2 --separate-stderr ds-ckpt-convert "$CS/neox" --to fp32 -o "$W/own"
	[[ "$stderr" == *"latest exists"* ]]
	[ "$(cat "$W/own/latest")" = global_step100 ]
	[ ! -e "$W/own/global_step40" ]
}

@test "bad input: a vocabulary too large for llm.c -> exit 2" {
	echo '{"num_layers": 1, "hidden_size": 4, "num_attention_heads": 1, "seq_length": 4,
	       "vocab_size": 70000, "make_vocab_size_divisible_by": 1}' > "$W/v.json"
	"$(helper_bin)" make-model "$W/v" "$W/v.json"
	run -2 --separate-stderr ds-ckpt-convert "$W/v" --to llmc -o "$W/v.bin"
	[[ "$stderr" == *"vocab_size"* ]]
	[ ! -e "$W/v.bin" ]
}

@test "gelu_exact: the checkpoint keeps it, transformers' \"gelu\" carries it out and back, llm.c refuses it" {
	command -v jq > /dev/null || skip "jq not installed"
	sed 's/"activation": "gelu"/"activation": "gelu_exact"/' "$SHARE/models/gpt-test.json" > "$W/e.json"
	"$(helper_bin)" make-model "$W/e" "$W/e.json"
	run -0 ds-ckpt-convert inspect --json "$W/e"
	[ "$(jq -r .model.activation <<<"$output")" = gelu_exact ] || fail "$output"
	# transformers' "gelu" is the erf form ("gelu_new" the tanh one)
	ds-ckpt-convert -q "$W/e" --to safetensors -o "$W/hf" > /dev/null
	[ "$(jq -r .activation_function "$W/hf/config.json")" = gelu ] || fail "$(cat "$W/hf/config.json")"
	ds-ckpt-convert -q "$W/hf" --to hdf5 -o "$W/back" > /dev/null
	run -0 ds-ckpt-convert inspect --json "$W/back"
	[ "$(jq -r .model.activation <<<"$output")" = gelu_exact ] || fail "$output"
	# --approx-gelu still imports it as the tanh gelu, and says so
	run -0 --separate-stderr ds-ckpt-convert "$W/hf" --approx-gelu --to hdf5 -o "$W/approx"
	[[ "$stderr" == *"imported as dstk's tanh GELU (--approx-gelu)"* ]] || fail "$stderr"
	run -0 ds-ckpt-convert inspect --json "$W/approx"
	[ "$(jq -r .model.activation <<<"$output")" = gelu ] || fail "$output"
	# llm.c's GPT-2 has only the tanh form
	run -2 --separate-stderr ds-ckpt-convert "$W/e" --to llmc -o "$W/e.bin"
	[[ "$stderr" == *"activation is 'gelu_exact' (the erf form); llm.c's GPT-2 computes the tanh GELU ('gelu') only"* ]] ||
		fail "$stderr"
	[ ! -e "$W/e.bin" ]
}

@test "ds-train --load --no-load-optim takes an import and trains exactly as from the original" {
	command -v ds-train > /dev/null || skip "ds-train not built"
	cd "$W"
	run -0 ds-train --model "$SHARE/models/gpt-test.json" --train-iters 2 --save ck --save-interval 2
	run -0 ds-ckpt-convert verify ck
	ds-ckpt-convert -q ck --to safetensors -o hf > /dev/null
	ds-ckpt-convert -q hf --to hdf5 -o imp > /dev/null
	ds-ckpt-convert -q ck --to llmc -o m.bin > /dev/null
	ds-ckpt-convert -q m.bin --to hdf5 -o impl > /dev/null
	for d in ck imp impl; do
		run -0 --separate-stderr ds-train --model "$SHARE/models/gpt-test.json" --train-iters 3 \
			--load $d --no-load-optim --log-interval 1
		grep -o 'loss [0-9.]*' <<<"$output" > "$d.loss"
		[ "$(wc -l < "$d.loss")" = 3 ]
	done
	diff ck.loss imp.loss
	diff ck.loss impl.loss
	# without --no-load-optim the trainer says what is missing
	run -2 --separate-stderr ds-train --model "$SHARE/models/gpt-test.json" --train-iters 3 --load imp
	[[ "$stderr" == *"--no-load-optim"* ]]
}

@test "optional: transformers loads the exports (GPT2LMHeadModel, GPTNeoXForCausalLM) with dstk's logits" {
	PY=${HF_PYTHON:-/usr/bin/python3}
	"$PY" -c 'import transformers' 2>/dev/null || skip "python3 transformers not installed (set HF_PYTHON)"
	for m in gpt2 neox; do
		ds-ckpt-convert -q "$CS/$m" --to safetensors -o "$W/hf-$m" > /dev/null
		run -0 "$PY" "$DS_SRCDIR/contrib/reference/export_hf_check.py" "$W/hf-$m" \
			"$CS/dstk-logits-$m.f32" "$CS/tokens.i32"
	done
}
