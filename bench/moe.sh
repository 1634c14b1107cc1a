#!/bin/bash
# moe.sh - an MoE model against its dense equivalent of the same active
# parameters (issue 23): tokens/s of each, and the share of the MoE run's
# time spent in the experts' all-to-alls, next to this machine's sgemm
# ceiling measured in the same run.
#
#   bench/moe.sh [NP] [STEPS] [EXPERTS]   (defaults: 2 ranks, 20 steps, 8 experts)
#
# The MoE model is share/models/gpt-tiny.json with a top-2 MoE MLP in every
# layer (EXPERTS experts of width F, moe.ep_size NP, capacity factor 1.25);
# the dense model is the same with one MLP of width 2F, so a token meets the
# same parameters in both (top-2: two experts of width F).  Both run NP
# ranks (mpirun when NP > 1) with micro batch 4, ZeRO 1, the comms logger
# on.  Prints, per model: tokens/s (--metrics-json window), MFU as ds-train
# reports it (routed MACs for MoE); for MoE also the all_to_all_single time
# summed over the run (the comms logger's total latency) as a share of the
# run's step time, the dropped fraction and the parameters per rank; and
# the ratio MoE / dense.  A benchmark, not a test: it never fails on a
# ratio.  Needs jq.  Set DS_TOOLS to the build's tools/ directory.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tools=${DS_TOOLS:-$here/tools}
np=${1:-2}
steps=${2:-20}
experts=${3:-8}
for t in jq "$tools/ds-train"; do
	command -v "$t" >/dev/null || { echo "$0: $t not found (set DS_TOOLS)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
F=768   # gpt-tiny's MLP is 4 x 384 = 1536: top-2 of 768 each keeps it
jq --argjson e "$experts" --argjson ep "$np" --argjson f "$F" \
	'. + {intermediate_size: $f, moe: {num_experts: $e, expert_interval: 1, k: 2, ep_size: $ep,
	  capacity_factor: 1.25, min_capacity: 4}}' "$here/share/models/gpt-tiny.json" >"$work/moe.json"
jq --argjson f "$((2 * F))" '. + {intermediate_size: $f}' "$here/share/models/gpt-tiny.json" >"$work/dense.json"
cat >"$work/ds.json" <<EOF
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "steps_per_print": $steps,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
 "comms_logger": {"enabled": true, "prof_all": true},
 "flops_profiler": {"enabled": false}}
EOF
run() { # name
	local cmd=("$tools/ds-train" --deepspeed_config "$work/ds.json" --model "$work/$1.json" --train-iters "$steps"
		--metrics-json "$work/$1-m.json")
	local t0
	t0=$(date +%s.%N)
	if [ "$np" -gt 1 ]; then
		local mpirun=(mpirun --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS)
		[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
		"${mpirun[@]}" "${cmd[@]}" >"$work/$1.out" 2>"$work/$1.err"
	else
		"${cmd[@]}" >"$work/$1.out" 2>"$work/$1.err"
	fi
	echo "$(date +%s.%N) - $t0" | bc
}
cores=$(nproc --all)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$((cores / np > 0 ? cores / np : 1))}
wd=$(run dense)
wm=$(run moe)
tps() { jq '.tokens_per_sec' "$work/$1-m.json"; }
mfu() { grep "^step $steps/" "$work/$1.out" | sed 's/.*| MFU \([0-9.]*\).*/\1/'; }
# all_to_all_single rows of the comms table: the total latency column, summed
a2a_ms=$(awk '/^all_to_all_single/ { on = 1; next } /^[a-z_]+$/ { on = 0 } on && NF >= 7 { s += $(NF - 3) } END { print s + 0 }' "$work/moe.out")
ceiling=$(grep -oh 'sgemm ceiling [0-9.]* GFLOP/s per rank' "$work/moe.err" "$work/moe.out" | head -n 1 | sed 's/.*ceiling //')
params=$(grep -oh '[0-9]* parameters' "$work/moe.err" "$work/moe.out" | head -n 1)
dropped=$(grep "^step $steps/" "$work/moe.out" | sed 's/.*| dropped \([0-9.]*\).*/\1/')
echo "# bench/moe.sh: $np rank(s), $steps steps, gpt-tiny with $experts experts (top-2, ep_size $np) vs dense MLP 2x$F; load $(cut -d' ' -f1-3 /proc/loadavg) on $cores cores"
echo "# sgemm ceiling: $ceiling (measured by ds-train in the same run)"
printf '%-6s %12s %6s %10s\n' model tokens/s MFU wall_s
printf '%-6s %12.0f %6s %10.1f\n' dense "$(tps dense)" "$(mfu dense)" "$wd"
printf '%-6s %12.0f %6s %10.1f\n' moe "$(tps moe)" "$(mfu moe)" "$wm"
echo "moe/dense tokens/s: $(echo "$(tps moe) / $(tps dense)" | bc -l | cut -c1-6)"
echo "moe all_to_all_single: ${a2a_ms} ms in total, $(echo "$a2a_ms / 1000 / $wm * 100" | bc -l | cut -c1-5)% of the run's wall time (rank 0)"
echo "moe: dropped fraction at the last step $dropped; rank 0 holds $params"
