#!/bin/sh
# export_make.sh - remakes tests/data/ckpt-small: the small checkpoints, dstk's
# logits, the PyTorch check of their safetensors export, the per-tensor
# SHA-256 of that export (what CI compares against) and the reference-written
# safetensors for the import direction.
# Usage: [HF_PYTHON=PY] contrib/reference/export_make.sh BUILDDIR   (after
#        make tools/ds-ckpt-convert tests/data/ckpt-small/ckpt-small there)
# With HF_PYTHON naming a python that has transformers, the exports are also
# loaded with GPT2LMHeadModel / GPTNeoXForCausalLM (export_hf_check.py) and
# the transformers-written fixtures hf-* are remade (export_hf_make.py).
set -eu
B=$(cd "${1:?usage: export_make.sh BUILDDIR}" && pwd)
S=$(cd "$(dirname "$0")/../.." && pwd)
D="$S/tests/data/ckpt-small"
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

rm -rf "$D/gpt2" "$D/neox" "$D/ref-gpt2" "$D/ref-neox"
[ -z "${HF_PYTHON:-}" ] || rm -rf "$D/hf-gpt2-untied" "$D/hf-gpt2-untied-sharded" "$D/hf-neox-seq"
"$B/tests/data/ckpt-small/ckpt-small" make "$D"
# 8 fixed token ids < 50 (both the checkpoints' vocab 60 and the references' 50)
printf '\003\000\000\000\021\000\000\000\052\000\000\000\000\000\000\000\061\000\000\000\007\000\000\000\027\000\000\000\014\000\000\000' > "$D/tokens.i32"
: > "$D/export_check.txt"
for m in gpt2 neox; do
	"$B/tests/data/ckpt-small/ckpt-small" logits "$D/$m" "$D/tokens.i32" "$D/dstk-logits-$m.f32"
	"$B/tools/ds-ckpt-convert" -q "$D/$m" --to safetensors -o "$T/$m" > /dev/null
	$PY "$S/contrib/reference/export_check.py" check "$T/$m" "$D/dstk-logits-$m.f32" "$D/tokens.i32" \
		| tee -a "$D/export_check.txt"
	$PY "$S/contrib/reference/export_check.py" hashes "$T/$m" > "$D/export-$m.sha256"
	sha256sum < "$T/$m/config.json" | sed 's/ .*/  config.json/' >> "$D/export-$m.sha256"
	if [ -n "${HF_PYTHON:-}" ]; then
		"$HF_PYTHON" "$S/contrib/reference/export_hf_check.py" "$T/$m" "$D/dstk-logits-$m.f32" "$D/tokens.i32" \
			2>/dev/null | sed "s/^/$m: /" | tee -a "$D/export_check.txt"
	fi
done
[ -z "${HF_PYTHON:-}" ] || "$HF_PYTHON" "$S/contrib/reference/export_hf_make.py" "$D" "$D/tokens.i32" 2>/dev/null
$PY "$S/contrib/reference/export_check.py" make-ref "$D" "$D/tokens.i32"
echo "made by contrib/reference/export_make.sh at $(git -C "$S" rev-parse --short HEAD) on $(date -u +%F)," \
	"torch $($PY -c 'import torch; print(torch.__version__)')" >> "$D/export_check.txt"
