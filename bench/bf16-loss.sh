#!/usr/bin/env bash
# bf16-loss.sh - do bf16 matrix products change the loss curve? (issue 21)
#
# Trains MODEL for STEPS steps on ds-train's default corpus with gradient
# clipping 1.0 (AdamW, warmup then constant lr), once per seed (3 seeds) in
# fp32 and in bf16 with each dstk.bf16_matmul choice this CPU can run:
# auto, avx512_bf16 (dstk's kernel forced, so it is measured even where
# auto keeps sgemm) and fp32 (bf16 activations, fp32 sgemm products).
# Prints, per run, the mean train loss of the last 20 steps and which
# products ran (ds-train's matmul line), then per variant the mean over the
# seeds and its relative difference to fp32's, the reference (the
# "ceiling" of this benchmark); the issue asks for |diff| <= 2%.
#
# Usage: bench/bf16-loss.sh [MODEL] [STEPS] [SEEDS]
#   MODEL default share/models/gpt-test.json (small enough for 200 steps x 3
#   seeds x 4 variants in minutes; gpt-tiny.json takes hours on 2 cores),
#   STEPS 200, SEEDS "1 2 3";
#   DS_BUILDDIR (default .) is where tools/ds-train lives.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$here/share/models/gpt-test.json}
steps=${2:-200}
seeds=${3:-1 2 3}
train=${DS_BUILDDIR:-.}/tools/ds-train
[ -x "$train" ] || { echo "bf16-loss.sh: $train not found; set DS_BUILDDIR" >&2; exit 2; }
[ "$steps" -ge 20 ] || { echo "bf16-loss.sh: STEPS must be >= 20" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

variants="fp32 bf16-auto bf16-kernel bf16-sgemm"
grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null || variants="fp32 bf16-auto bf16-sgemm"

cfg() {   # cfg FILE PRECISION_AND_DSTK_SECTIONS
	local name
	name=$(basename "$1" .json)
	cat >"$1" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "steps_per_print": 1000, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 20}},
 "csv_monitor": {"enabled": true, "output_path": "$tmp/csv-$name", "job_name": "run"} $2}
JSON
}
cfg "$tmp/fp32.json" ''
cfg "$tmp/bf16-auto.json" ', "bf16": {"enabled": true}'
cfg "$tmp/bf16-kernel.json" ', "bf16": {"enabled": true}, "dstk": {"bf16_matmul": "avx512_bf16"}'
cfg "$tmp/bf16-sgemm.json" ', "bf16": {"enabled": true}, "dstk": {"bf16_matmul": "fp32"}'

echo "# model $model, $steps steps, seeds $seeds, gradient_clipping 1.0, mean train loss of steps $((steps - 19))-$steps"
for seed in $seeds; do
	for v in $variants; do
		rm -rf "$tmp/csv-$v"
		out=$("$train" --deepspeed_config "$tmp/$v.json" --model "$model" --train-iters "$steps" --seed "$seed" 2>&1) ||
			{ echo "bf16-loss.sh: ds-train failed for $v seed $seed:" >&2; echo "$out" >&2; exit 1; }
		m=$(tail -n +2 "$tmp/csv-$v/run/Train_Samples_train_loss.csv" | tr -d '\r' | tail -20 |
			awk -F, '{ s += $2 } END { printf "%.6f", s / NR }')
		echo "$v $seed $m" >>"$tmp/means"
		mm=$(sed -n 's/.*matmul: //p' <<<"$out" | head -1)
		printf '  %-12s seed %s  last20_mean %s  %s\n' "$v" "$seed" "$m" "${mm:-fp32 sgemm}"
	done
done
ref=$(awk '$1 == "fp32" { s += $3; n++ } END { printf "%.6f", s / n }' "$tmp/means")
printf '# %-12s %12s %10s\n' variant mean_loss vs_fp32
for v in $variants; do
	awk -v v="$v" -v r="$ref" '$1 == v { s += $3; n++ }
		END { m = s / n; printf "  %-12s %12.6f %+9.3f%%\n", v, m, 100 * (m - r) / r }' "$tmp/means"
done
