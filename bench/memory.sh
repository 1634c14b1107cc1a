#!/bin/bash
# memory.sh - memory per rank of ds-train on a model of >= 100M parameters
# (GPT-2 124M) at ZeRO stages 0-3 on 1, 2 and 4 ranks: the estimate that
# `ds-train --check --world-size N` prints, what libds's allocator held per
# rank after setup and at its peak in the loop, and each rank's peak RSS,
# with the ratios allocator/estimate and RSS/estimate.
#
#   bench/memory.sh [MODEL] [STEPS]   (defaults: share/models/gpt2-124m.json, 2)
#
# Environment: DTYPE=fp16|bf16 trains in that precision (default fp32;
# model_GiB is then ZeRO's 2 + 2 + 12 bytes per parameter at stage 0 -
# 16-bit parameters and gradients, fp32 master weights and AdamW states -
# 2 + 2 + 12/N, 2 + 14/N, 16/N at stages 1-3, and for bf16 at stage 0,
# which accumulates gradients in fp32 by default, 2 + 4 + 12);
# STAGES and NS (space-separated) restrict the stages and rank counts
# (defaults "0 1 2 3" and "1 2 4").
#
# The model runs at sequence 32 (its parameters do not depend on it) with
# one sample per rank per step, so a step is cheap; the figures are the
# model's state, the comm/gather buffers and the small activations.  The
# machine's own ceiling, read in the same run: MemTotal and MemAvailable of
# /proc/meminfo, and MemAvailable / N as each rank's share.  A run whose
# N x estimate exceeds MemAvailable is skipped and says so.  Stage 3 uses
# stage3_param_persistence_threshold 0 (every segment partitioned).
# A benchmark, not a test: it never fails on a ratio.  Needs jq, and mpirun
# for N > 1 (OpenMPI, --oversubscribe).  DS_TOOLS: the build's tools/.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tools=${DS_TOOLS:-$here/tools}
model_in=${1:-$here/share/models/gpt2-124m.json}
steps=${2:-2}
for t in jq "$tools/ds-train"; do
	command -v "$t" >/dev/null || { echo "$0: $t not found (set DS_TOOLS)" >&2; exit 2; }
done
mpirun=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

jq '.seq_length = 32' "$model_in" >"$work/model.json"
kib() { awk -v k="$1" '$1 == k ":" { printf "%.0f\n", $2 * 1024 }' /proc/meminfo; }
mem_total=$(kib MemTotal) mem_avail=$(kib MemAvailable)
gib() { awk -v b="$1" 'BEGIN { printf "%.3f", b / 1073741824 }'; }

params=$("$tools/ds-train" --check --json --model "$work/model.json" | jq '.memory.num_params')
dtype=${DTYPE:-fp32}
mixed=""
case $dtype in
fp32) ;;
fp16 | bf16) mixed=", \"$dtype\": {\"enabled\": true}" ;;
*) echo "$0: DTYPE $dtype: must be fp32, fp16 or bf16" >&2; exit 2 ;;
esac
echo "# ds-train memory per rank: $(basename "$model_in") ($params parameters, seq 32, 1 sample per rank, $steps steps, AdamW $dtype)"
echo "# machine: MemTotal $(gib "$mem_total") GiB, MemAvailable $(gib "$mem_avail") GiB at start"
printf '# %-5s %2s %4s %11s %11s %11s %11s %11s %9s %9s %9s\n' stage N rank model_GiB est_GiB alloc_GiB peak_GiB rss_GiB \
	alloc/est rss/est avail/N
for stage in ${STAGES:-0 1 2 3}; do
	for n in ${NS:-1 2 4}; do
		s3=""
		[ "$stage" -eq 3 ] && s3=', "stage3_param_persistence_threshold": 0'
		cfg="$work/z$stage-n$n.json"
		cat >"$cfg" <<-EOF
		{"train_batch_size": $n, "train_micro_batch_size_per_gpu": 1,
		 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
		 "zero_optimization": {"stage": $stage$s3}$mixed,
		 "autotuning": {"start_profile_step": 1, "end_profile_step": $steps}}
		EOF
		est=$("$tools/ds-train" --check --json --deepspeed_config "$cfg" --model "$work/model.json" --world-size "$n" |
			jq '.memory.total_bytes')
		share=$((mem_avail / n))
		if [ $((est * n)) -gt "$mem_avail" ]; then
			printf '  %-5s %2s %4s  skipped: %d x estimate %s GiB > MemAvailable\n' "$stage" "$n" - "$n" "$(gib "$est")"
			continue
		fi
		cmd=("$tools/ds-train" --deepspeed_config "$cfg" --model "$work/model.json" --train-iters "$steps"
			--peak-gflops 1 --metrics-json "$work/m.json")
		if [ "$n" -eq 1 ]; then
			OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "${cmd[@]}" >"$work/out" 2>"$work/err" ||
				{ echo "$0: stage $stage N $n failed:" >&2; tail -3 "$work/err" >&2; exit 1; }
		else
			"${mpirun[@]}" -np "$n" -x OMP_NUM_THREADS=1 "${cmd[@]}" >"$work/out" 2>"$work/err" ||
				{ echo "$0: stage $stage N $n failed:" >&2; tail -3 "$work/err" >&2; exit 1; }
		fi
		jq -r --argjson est "$est" --argjson share "$share" --arg stage "$stage" '.memory as $m |
			range(0; $m.world_size) as $r |
			[$stage, $m.world_size, $r, $m.model_state_bytes / 1073741824, $est / 1073741824,
			 $m.alloc_setup_bytes[$r] / 1073741824, $m.alloc_peak_bytes[$r] / 1073741824,
			 $m.peak_rss_bytes[$r] / 1073741824, $m.alloc_setup_bytes[$r] / $est,
			 $m.peak_rss_bytes[$r] / $est, $share / 1073741824] | @tsv' "$work/m.json" |
			awk -F'\t' '{ printf "  %-5s %2d %4d %11.3f %11.3f %11.3f %11.3f %11.3f %9.4f %9.3f %9.2f\n",
				$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }'
	done
done
echo "# model_GiB: parameters + gradients + optimizer states the engine holds; est: ds-train --check's total;"
echo "# alloc/peak: ds_alloc bytes after setup / high-water mark in the loop; rss: the process's peak RSS"
echo "# (program, MPI, BLAS and libc included); avail/N: this machine's MemAvailable per rank, GiB"
