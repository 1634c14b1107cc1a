#!/usr/bin/env bash
# pipeline.sh - 3D parallelism on this machine's ranks (issue 19): the
# pipeline bubble against 1F1B's theory, and tensor parallelism's
# communication against the analytic count.
#
# 1. Bubble: ds-train at P pipeline stages and M micro-batches per step
#    (gradient accumulation M, micro batch 1, wall_clock_breakdown): rank
#    0's share of its pipeline phase spent in point-to-point transfers
#    (waiting for a neighbour stage: the idle slots of the schedule), printed
#    next to DeepSpeed's 1F1B figure (P - 1) / (M + P - 1).  The schedule has
#    every stage idle for 2 (P - 1) of its 2 (M + P - 1) slots
#    (tests/unit/test_schedule.c), so stages of equal cost measure the
#    theory; a measured bubble above it comes from unequal stages (the first
#    holds the embeddings, the last the head and the loss) and transfer
#    latency.  Timings: report the load (uptime) with the figures.
# 2. TP volume: ds-train at tensor-parallel size 2 with comms_logger; the
#    bytes of rank 0's all_reduces against the count of Megatron's scheme:
#    per micro-batch the embedding's sum, two per layer in forward (the
#    row-parallel outputs) and two in backward (the column-parallel inputs'
#    gradients), the head input's gradient - B x T x C floats each - and
#    the vocabulary-parallel loss's row max, target logit and exp-sum (B x
#    T floats each).  Exact, not timed: the ratio must be 1.
#
# Usage: bench/pipeline.sh [MODEL] [STEPS]
#   MODEL default share/models/gpt-tiny.json, STEPS 6 (the bubble is the
#   last STEPS/2 steps'); DS_BUILDDIR (default .) is where tools/ds-train
#   lives; NP_MAX (default: the cores) caps the ranks of the bubble runs.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$here/share/models/gpt-tiny.json}
steps=${2:-6}
train=${DS_BUILDDIR:-.}/tools/ds-train
[ -x "$train" ] || { echo "pipeline.sh: $train not found; set DS_BUILDDIR" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "pipeline.sh: mpirun not found" >&2; exit 3; }
command -v jq >/dev/null || { echo "pipeline.sh: jq not found" >&2; exit 2; }
np_max=${NP_MAX:-$(nproc)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
half=$((steps / 2 > 0 ? steps / 2 : 1))

echo "# pipeline.sh: model $model, $steps steps; load: $(uptime | sed 's/.*load average: //')"
echo "# 1. pipeline bubble (rank 0, last $half steps): measured vs 1F1B (p-1)/(m+p-1)"
printf '%-6s %-6s %-12s %-12s %-10s %s\n' stages micro measured theory ratio note
for p in 2 4; do
	note=""
	[ "$p" -gt "$np_max" ] && note="($p ranks oversubscribed on $np_max cores: timings distorted)"
	for m in 2 4 8; do
		cat >"$tmp/ds.json" <<JSON
{"train_batch_size": $m, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": $m,
 "steps_per_print": $half, "wall_clock_breakdown": true,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
JSON
		out=$("${mpi[@]}" -np "$p" "$train" --deepspeed_config "$tmp/ds.json" --model "$model" \
			--train-iters $((2 * half)) --pipeline-model-parallel-size "$p" --peak-gflops 1 2>&1) ||
			{ echo "pipeline.sh: ds-train failed at $p stages, $m micro-batches:" >&2; echo "$out" >&2; exit 1; }
		read -r meas theo < <(grep 'pipeline (ms)' <<<"$out" | tail -1 |
			awk -F'|' '{ b = $4; t = $5; sub(/.*: /, "", b); sub(/.*: /, "", t); print b + 0, t + 0 }')
		printf '%-6s %-6s %-12s %-12s %-10s %s\n' "$p" "$m" "$meas" "$theo" \
			"$(awk -v a="$meas" -v b="$theo" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')" "$note"
	done
done

echo "# 2. tensor-parallel all_reduce volume at TP 2 (rank 0): measured vs Megatron's count"
read -r L C T <<<"$(jq -r '"\(.num_layers) \(.hidden_size) \(.seq_length)"' "$model")"
B=2 GA=2
cat >"$tmp/tp.json" <<JSON
{"train_batch_size": $((B * GA)), "train_micro_batch_size_per_gpu": $B, "gradient_accumulation_steps": $GA,
 "steps_per_print": 1000, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "comms_logger": {"enabled": true}}
JSON
out=$("${mpi[@]}" -np 2 "$train" --deepspeed_config "$tmp/tp.json" --model "$model" --train-iters "$steps" \
	--tensor-model-parallel-size 2 --peak-gflops 1 2>/dev/null) ||
	{ echo "pipeline.sh: ds-train failed at TP 2" >&2; exit 1; }
# rank 0's summary: all_reduce rows as "bytes count" (sizes in DeepSpeed's
# convert_size form, exact for these shapes); the step's 24-byte norm/loss
# and 8-byte stop sums are the data-parallel world's, not TP's
meas=$(awk '/^Comm\. Op/ { t = 1; next } !t { next } /^(step|memory) / { next }
	/^[^ ]/ { op = $1; next }
	op == "all_reduce" { split(substr($0, 21, 20), s, " "); n = substr($0, 41, 20) + 0
		u = s[2] == "B" ? 1 : s[2] == "KB" ? 1024 : s[2] == "MB" ? 1048576 : 1073741824
		b = s[1] * u; if (b > 24) tot += b * n }
	END { printf "%.0f", tot }' <<<"$out")
per_micro=$(((2 + 4 * L) * B * T * C * 4 + 3 * B * T * 4))
want=$((per_micro * GA * steps))
printf '%-22s %s bytes\n' "analytic" "$want" "measured" "$meas"
awk -v a="$meas" -v b="$want" 'BEGIN { printf "ratio                  %.6f (%s)\n", a / b, a == b ? "equal" : "DIFFERENT" }'
