#!/usr/bin/env bash
# mixed-memory.sh - what fp16/bf16 storage costs or saves per rank, next to
# fp32, measured by ds-train itself (issue 5).
#
# For each precision it trains a few steps of MODEL at ZeRO stage STAGE on
# one rank and prints, from ds-train's own memory line: libds's allocator
# at its peak (alloc_peak), the process's peak RSS and the model states,
# and, from `ds-train --check`, the parameter and activation rows; each as
# a ratio to fp32.  The machine's memory (MemTotal) is the ceiling line.
# The parameters the forward/backward read are the 16-bit copy (2 bytes per
# parameter instead of 4) plus fp32 widening buffers of the segments in
# use, but the fp32 master weights stay; the gradients are stored in 16
# bits too (2 bytes instead of 4: model states 2 + 2 + 12 bytes per
# parameter with AdamW, as fp32's 4 + 4 + 8) except bf16 at stage 0, which
# accumulates them in fp32 by default (2 + 4 + 12).  Of the activation row, what
# forward keeps for backward (layer inputs, every layer's saved
# activations, the logits: act_saved, from `--check --json`) is stored in
# 16 bits; the rest is the fp32 working memory of one layer at a time
# (the compute is fp32 on this CPU), which does not grow with depth.
#
# Usage: bench/mixed-memory.sh [MODEL] [STAGE] [MICRO_BATCH]
#   MODEL default share/models/gpt-tiny.json, STAGE 0, MICRO_BATCH 8;
#   DS_BUILDDIR (default .) is where tools/ds-train lives.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$here/share/models/gpt-tiny.json}
stage=${2:-0}
mb=${3:-8}
train=${DS_BUILDDIR:-.}/tools/ds-train
[ -x "$train" ] || { echo "mixed-memory.sh: $train not found; set DS_BUILDDIR" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# machine ceiling: MemTotal $(awk '/MemTotal/ {printf "%.0f", $2 * 1024}' /proc/meminfo) bytes"
echo "# model $model, ZeRO stage $stage, micro batch $mb, 1 rank"
printf '# %-6s %14s %14s %14s %14s %14s %14s %8s %8s %8s %8s\n' precision alloc_peak peak_rss model_state params_row act_row \
	act_saved alloc/32 params/32 act/32 saved/32
for p in fp32 fp16 bf16; do
	sec=""
	[ $p = fp16 ] && sec=', "fp16": {"enabled": true}'
	[ $p = bf16 ] && sec=', "bf16": {"enabled": true}'
	cat >"$tmp/$p.json" <<JSON
{"train_micro_batch_size_per_gpu": $mb, "steps_per_print": 1000,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": $stage} $sec}
JSON
	line=$(OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$train" --deepspeed_config "$tmp/$p.json" --model "$model" \
		--train-iters 3 --peak-gflops 1 2>&1 | grep '^memory per rank')
	chk=$("$train" --check --deepspeed_config "$tmp/$p.json" --model "$model")
	sv=$("$train" --check --json --deepspeed_config "$tmp/$p.json" --model "$model" |
		tr -d ' \n' | sed -n 's/.*"activations_saved_bytes":\([0-9]*\).*/\1/p')
	get() { sed -n "s/.*| $1 \([0-9]*\).*/\1/p" <<<"$line"; }
	row() { awk -v k="$1" '$1 == k { print $2 }' <<<"$chk"; }
	a=$(get alloc_peak) r=$(get peak_rss) m=$(get model_state) pr=$(row parameters) ar=$(row activations)
	[ $p = fp32 ] && { a0=$a p0=$pr r0=$ar s0=$sv; }
	printf '  %-6s %14s %14s %14s %14s %14s %14s %8.3f %8.3f %8.3f %8.3f\n' $p "$a" "$r" "$m" "$pr" "$ar" "$sv" \
		"$(awk -v x="$a" -v y="$a0" 'BEGIN { print x / y }')" "$(awk -v x="$pr" -v y="$p0" 'BEGIN { print x / y }')" \
		"$(awk -v x="$ar" -v y="$r0" 'BEGIN { print x / y }')" "$(awk -v x="$sv" -v y="$s0" 'BEGIN { print x / y }')"
done
